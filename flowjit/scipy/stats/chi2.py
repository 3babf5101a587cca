"""The chi-squared distribution, as ``scipy.stats.chi2``: the gamma distribution of shape
``df / 2`` and scale ``2 * scale``."""
from __future__ import annotations

from typing import Any

from flowjit.scipy.stats import gamma
from flowjit.scipy.stats._common import ArrayLike, promote

__all__ = ["cdf", "logpdf", "pdf"]


def logpdf(x: ArrayLike, df: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Any:
    """log of the chi-squared density with ``df`` degrees of freedom at ``x``."""
    x, df, loc, scale = promote(x, df, loc, scale)
    return gamma.logpdf(x, 0.5 * df, loc, 2 * scale)


def pdf(x: ArrayLike, df: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Any:
    """The chi-squared density with ``df`` degrees of freedom at ``x``."""
    x, df, loc, scale = promote(x, df, loc, scale)
    return gamma.pdf(x, 0.5 * df, loc, 2 * scale)


def cdf(x: ArrayLike, df: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Any:
    """P(X <= x) with ``df`` degrees of freedom; differentiable in x, loc and scale."""
    x, df, loc, scale = promote(x, df, loc, scale)
    return gamma.cdf(x, 0.5 * df, loc, 2 * scale)
