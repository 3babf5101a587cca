"""Student's t distribution, as ``scipy.stats.t`` (pdf and logpdf as ``jax.scipy.stats.t``;
cdf and logcdf through the regularized incomplete beta function, which jax does not have)."""
from __future__ import annotations

import math
from typing import Any

from flowjit.scipy import special
from flowjit.scipy.stats._common import ArrayLike, promote, standardize
from flowjit.tracer.numpy import namespace as fnp

__all__ = ["cdf", "logcdf", "logpdf", "pdf"]


def logpdf(x: ArrayLike, df: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Any:
    """log of the density of t with ``df`` degrees of freedom, shifted by ``loc``, scaled by ``scale``."""
    x, df, loc, scale = promote(x, df, loc, scale)
    z = standardize(x, loc, scale)
    half = 0.5 * (df + 1)
    return (special.gammaln(half) - special.gammaln(0.5 * df) - 0.5 * fnp.log(df * math.pi)
            - fnp.log(scale) - half * fnp.log1p(z * z / df))


def pdf(x: ArrayLike, df: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Any:
    """The density of t with ``df`` degrees of freedom, shifted by ``loc``, scaled by ``scale``."""
    return fnp.exp(logpdf(x, df, loc, scale))


def _tail(x: ArrayLike, df: ArrayLike, loc: ArrayLike, scale: ArrayLike) -> tuple[Any, Any]:
    # P(T > |z|) = I_{df / (df + z^2)}(df / 2, 1 / 2) / 2: no cancellation in either tail.
    x, df, loc, scale = promote(x, df, loc, scale)
    z = standardize(x, loc, scale)
    return z, 0.5 * special.betainc(0.5 * df, fnp.full_like(z, 0.5), df / (df + z * z))


def cdf(x: ArrayLike, df: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Any:
    """P(X <= x) for t with ``df`` degrees of freedom; differentiable in x, loc and scale (the
    derivative in ``df`` needs betainc's in its parameters, which is refused)."""
    z, tail = _tail(x, df, loc, scale)
    return fnp.where(z < 0, tail, 1 - tail)


def logcdf(x: ArrayLike, df: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Any:
    """log P(X <= x) for t with ``df`` degrees of freedom (log1p of the upper tail above loc)."""
    z, tail = _tail(x, df, loc, scale)
    return fnp.where(z < 0, fnp.log(tail), fnp.log1p(-tail))
