"""The Poisson distribution, as ``scipy.stats.poisson``: ``k`` counts, ``mu`` the mean, ``loc``
a shift; the probability of a non-integer or negative count is 0."""
from __future__ import annotations

import math
from typing import Any

from flowjit.scipy import special
from flowjit.scipy.stats._common import ArrayLike, inside, on_support, promote
from flowjit.tracer.numpy import namespace as fnp

__all__ = ["cdf", "logpmf", "pmf"]


def logpmf(k: ArrayLike, mu: ArrayLike, loc: ArrayLike = 0) -> Any:
    """log P(K = k) for K Poisson with mean ``mu`` shifted by ``loc``; -inf off the support."""
    k, mu, loc = promote(k, mu, loc)
    k = k - loc
    ok = fnp.logical_and(k >= 0, k == fnp.floor(k))
    ks = inside(ok, k, 0.0)
    return on_support(ok, special.xlogy(ks, mu) - special.gammaln(ks + 1) - mu, -math.inf)


def pmf(k: ArrayLike, mu: ArrayLike, loc: ArrayLike = 0) -> Any:
    """P(K = k) for K Poisson with mean ``mu`` shifted by ``loc``."""
    return fnp.exp(logpmf(k, mu, loc))


def cdf(k: ArrayLike, mu: ArrayLike, loc: ArrayLike = 0) -> Any:
    """P(K <= k) = Q(floor(k) + 1, mu), the regularized upper incomplete gamma function;
    differentiable in ``mu``."""
    k, mu, loc = promote(k, mu, loc)
    k = fnp.floor(k - loc)
    ok = k >= 0
    return on_support(ok, special.gammaincc(inside(ok, k, 0.0) + 1, mu), 0.0)
