"""The beta distribution, as ``scipy.stats.beta``: shapes ``a`` and ``b`` on [loc, loc + scale]."""
from __future__ import annotations

import math
from typing import Any

from flowjit.scipy import special
from flowjit.scipy.stats._common import ArrayLike, inside, on_support, promote, standardize, xlog1py, xlogy
from flowjit.tracer.numpy import namespace as fnp

__all__ = ["cdf", "logpdf", "pdf"]


def logpdf(x: ArrayLike, a: ArrayLike, b: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Any:
    """log of the beta density of shapes ``a``, ``b`` at ``x``; -inf outside [loc, loc + scale]."""
    x, a, b, loc, scale = promote(x, a, b, loc, scale)
    y = standardize(x, loc, scale)
    ok = fnp.logical_and(y >= 0, y <= 1)
    ys = inside(ok, y, 0.5)
    value = xlogy(a - 1, ys) + xlog1py(b - 1, -ys) - special.betaln(a, b) - fnp.log(scale)
    return on_support(ok, value, -math.inf)


def pdf(x: ArrayLike, a: ArrayLike, b: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Any:
    """The beta density of shapes ``a``, ``b`` at ``x``."""
    return fnp.exp(logpdf(x, a, b, loc, scale))


def cdf(x: ArrayLike, a: ArrayLike, b: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Any:
    """P(X <= x) = I_y(a, b), the regularized incomplete beta function at y = (x - loc) / scale
    clipped to [0, 1]; differentiable in x, loc and scale (not in a and b)."""
    x, a, b, loc, scale = promote(x, a, b, loc, scale)
    y = standardize(x, loc, scale)
    ok = fnp.logical_and(y > 0, y < 1)
    value = special.betainc(a, b, inside(ok, y, 0.5))
    return fnp.where(ok, value, fnp.where(y <= 0, fnp.zeros_like(value), fnp.ones_like(value)))
