"""The Dirichlet distribution, as ``scipy.stats.dirichlet``: ``x`` holds the K components along
its first axis (or K - 1, the last being 1 minus their sum), ``alpha`` the K concentrations."""
from __future__ import annotations

from typing import Any

from flowjit.ir.errors import ShapeError
from flowjit.scipy import special
from flowjit.scipy.stats._common import ArrayLike, promote, xlogy
from flowjit.tracer.core import user_location
from flowjit.tracer.numpy import namespace as fnp

__all__ = ["logpdf", "pdf"]


def logpdf(x: ArrayLike, alpha: ArrayLike) -> Any:
    """log of the Dirichlet density with concentrations ``alpha`` (shape (K,)) at ``x`` (shape
    (K, ...) or (K - 1, ...)); the components are not checked to sum to 1 (traced values)."""
    x, alpha = promote(x, alpha)
    if alpha.ndim != 1:
        raise ShapeError(f"dirichlet.logpdf: alpha must be 1-d (K concentrations), got shape "
                         f"{tuple(alpha.shape)} (at {user_location()})")
    k = alpha.shape[0]
    if x.ndim == 0 or x.shape[0] not in (k, k - 1):
        raise ShapeError(f"dirichlet.logpdf: x must hold {k} (or {k - 1}) components along its first axis "
                         f"for alpha of shape {tuple(alpha.shape)}, got x of shape {tuple(x.shape)} "
                         f"(at {user_location()})")
    if x.shape[0] == k - 1:
        x = fnp.concatenate([x, 1 - fnp.sum(x, axis=0, keepdims=True)], axis=0)
    a = fnp.reshape(alpha, (k,) + (1,) * (x.ndim - 1))
    log_norm = fnp.sum(special.gammaln(alpha)) - special.gammaln(fnp.sum(alpha))
    return fnp.sum(xlogy(a - 1, x), axis=0) - log_norm


def pdf(x: ArrayLike, alpha: ArrayLike) -> Any:
    """The Dirichlet density with concentrations ``alpha`` at ``x``."""
    return fnp.exp(logpdf(x, alpha))
