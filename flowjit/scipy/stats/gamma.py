"""The gamma distribution, as ``scipy.stats.gamma``: shape ``a``, ``loc``, ``scale``."""
from __future__ import annotations

import math
from typing import Any

from flowjit.scipy import special
from flowjit.scipy.stats._common import ArrayLike, inside, on_support, promote, standardize, xlogy
from flowjit.tracer.numpy import namespace as fnp

__all__ = ["cdf", "logpdf", "pdf"]


def logpdf(x: ArrayLike, a: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Any:
    """log of the gamma density of shape ``a`` at ``x``; -inf below ``loc``."""
    x, a, loc, scale = promote(x, a, loc, scale)
    y = standardize(x, loc, scale)
    ok = y >= 0
    ys = inside(ok, y, 1.0)
    value = xlogy(a - 1, ys) - ys - special.gammaln(a) - fnp.log(scale)
    return on_support(ok, value, -math.inf)


def pdf(x: ArrayLike, a: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Any:
    """The gamma density of shape ``a`` at ``x``."""
    return fnp.exp(logpdf(x, a, loc, scale))


def cdf(x: ArrayLike, a: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Any:
    """P(X <= x) = P(a, (x - loc) / scale), the regularized lower incomplete gamma function;
    differentiable in x, a, loc and scale (in ``a`` through ``gammainc_grad_a``'s sums)."""
    x, a, loc, scale = promote(x, a, loc, scale)
    y = standardize(x, loc, scale)
    ok = y >= 0
    return on_support(ok, special.gammainc(a, inside(ok, y, 0.0)), 0.0)
