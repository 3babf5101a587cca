"""The normal distribution, as ``scipy.stats.norm`` (and ``jax.scipy.stats.norm``)."""
from __future__ import annotations

import math
from typing import Any

from flowjit.scipy import special
from flowjit.scipy.stats._common import ArrayLike, promote, standardize
from flowjit.tracer.numpy import namespace as fnp

__all__ = ["cdf", "logcdf", "logpdf", "logsf", "pdf", "ppf", "sf"]

_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


def logpdf(x: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Any:
    """log of the normal density of mean ``loc`` and standard deviation ``scale`` at ``x``."""
    x, loc, scale = promote(x, loc, scale)
    z = standardize(x, loc, scale)
    return -0.5 * z * z - fnp.log(scale) - _LOG_SQRT_2PI


def pdf(x: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Any:
    """The normal density of mean ``loc`` and standard deviation ``scale`` at ``x``."""
    return fnp.exp(logpdf(x, loc, scale))


def cdf(x: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Any:
    """P(X <= x) for X normal with mean ``loc`` and standard deviation ``scale``."""
    x, loc, scale = promote(x, loc, scale)
    return special.ndtr(standardize(x, loc, scale))


def logcdf(x: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Any:
    """log P(X <= x), accurate in the lower tail (``log_ndtr``)."""
    x, loc, scale = promote(x, loc, scale)
    return special.log_ndtr(standardize(x, loc, scale))


def sf(x: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Any:
    """P(X > x) = cdf of the reflected variable, accurate in the upper tail."""
    x, loc, scale = promote(x, loc, scale)
    return special.ndtr(-standardize(x, loc, scale))


def logsf(x: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Any:
    """log P(X > x), accurate in the upper tail."""
    x, loc, scale = promote(x, loc, scale)
    return special.log_ndtr(-standardize(x, loc, scale))


def ppf(q: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Any:
    """The quantile function (inverse of cdf): ``loc + scale * ndtri(q)``."""
    q, loc, scale = promote(q, loc, scale)
    return loc + scale * special.ndtri(q)
