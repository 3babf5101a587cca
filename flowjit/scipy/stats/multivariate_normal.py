"""The multivariate normal distribution, as ``scipy.stats.multivariate_normal`` (its pdf,
logpdf and entropy functions): ``x`` of shape (..., d), ``mean`` (d,), ``cov`` a (d, d) matrix, a
vector of variances or a scalar. A positive-definite cov goes through its Cholesky factor;
``allow_singular=True`` goes through ``eigh`` and scipy's pseudo-inverse and
pseudo-determinant (eigenvalues below scipy's cutoff count as zero; x off the support of a
singular cov has density 0)."""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from flowjit.ir.errors import ShapeError
from flowjit.scipy.stats._common import ArrayLike, promote
from flowjit.tracer import linalg as la
from flowjit.tracer.array_namespace import finfo
from flowjit.tracer.core import user_location
from flowjit.tracer.numpy import namespace as fnp

__all__ = ["entropy", "logpdf", "pdf"]

_LOG_2PI = math.log(2 * math.pi)


def _cov_matrix(cov: Any, d: int, fname: str) -> Any:
    if cov.ndim == 0:
        return cov * fnp.eye(d, dtype=cov.dtype)
    if cov.ndim == 1 and cov.shape[0] == d:
        return cov * fnp.eye(d, dtype=cov.dtype)
    if cov.ndim == 2 and tuple(cov.shape) == (d, d):
        return cov
    raise ShapeError(f"multivariate_normal.{fname}: cov must be a scalar, ({d},) or ({d}, {d}) for a mean of "
                     f"dimension {d}, got shape {tuple(cov.shape)} (at {user_location(3)})")


def _dimension(mean: Any, cov: Any) -> int:
    """scipy's rule: the mean's size, else a matrix cov's order, else 1."""
    if mean is not None:
        return int(np.size(mean)) if not hasattr(mean, "shape") else int(np.prod(mean.shape))
    return int(np.shape(cov)[0]) if np.ndim(cov) == 2 else 1


def _pseudo(cov: Any) -> tuple[Any, Any, Any, Any]:
    """eigh's (vectors, 1/eigenvalues with zeros for the dropped ones, log pseudo-determinant,
    rank), with scipy's cutoff: eigenvalues below 1e6 * eps * max|eigenvalue| are zero."""
    w, v = la.eigh(cov)
    eps = float(finfo(cov.dtype).eps)
    cutoff = 1e6 * eps * fnp.max(fnp.abs(w))
    keep = w > cutoff
    w_safe = fnp.where(keep, w, fnp.ones_like(w))
    inv_w = fnp.where(keep, 1 / w_safe, fnp.zeros_like(w))
    log_pdet = fnp.sum(fnp.where(keep, fnp.log(w_safe), fnp.zeros_like(w)))
    rank = fnp.sum(fnp.astype(keep, w.dtype))
    return v, inv_w, log_pdet, rank


def logpdf(x: ArrayLike, mean: ArrayLike = None, cov: ArrayLike = 1, allow_singular: bool = False) -> Any:
    """log of the density at ``x`` (shape (..., d); the result has shape (...)) of the normal
    distribution with ``mean`` (default 0) and covariance ``cov``."""
    d = _dimension(mean, cov)
    x, cov = promote(x, cov)
    mean = fnp.zeros(d, dtype=x.dtype) if mean is None else promote(mean, x)[0]
    if d == 1 and (x.ndim == 0 or x.shape[-1] != 1):
        x = fnp.expand_dims(x, -1)
    if x.shape[-1] != d:
        raise ShapeError(f"multivariate_normal.logpdf: x must end in the mean's dimension {d}, got shape "
                         f"{tuple(x.shape)} (at {user_location()})")
    cov = _cov_matrix(cov, d, "logpdf")
    dev = x - mean
    if not allow_singular:
        chol = la.cholesky(cov)
        z = la.solve(chol, fnp.reshape(dev, (-1, d)).T)
        maha = fnp.reshape(fnp.sum(z * z, axis=0), x.shape[:-1])
        half_logdet = fnp.sum(fnp.log(la.diagonal(chol)))
        return -0.5 * (d * _LOG_2PI + maha) - half_logdet
    v, inv_w, log_pdet, rank = _pseudo(cov)
    proj = fnp.matmul(dev, v)  # coordinates along the eigenvectors
    maha = fnp.sum(proj * proj * inv_w, axis=-1)
    # x - mean off the range of cov: density 0 (log -inf), as scipy.
    off = fnp.sum(proj * proj * fnp.astype(inv_w == 0, x.dtype), axis=-1)
    tol = 1e6 * float(finfo(x.dtype).eps) * (1 + fnp.sum(dev * dev, axis=-1))
    value = -0.5 * (rank * _LOG_2PI + log_pdet + maha)
    return fnp.where(off > tol, fnp.full_like(value, -math.inf), value)


def pdf(x: ArrayLike, mean: ArrayLike = None, cov: ArrayLike = 1, allow_singular: bool = False) -> Any:
    """The density at ``x`` of the normal distribution with ``mean`` and covariance ``cov``."""
    return fnp.exp(logpdf(x, mean, cov, allow_singular))


def entropy(mean: ArrayLike = None, cov: ArrayLike = 1, allow_singular: bool = False) -> Any:
    """The differential entropy ``(d (1 + log 2 pi) + log det cov) / 2`` (pseudo-determinant and
    rank with ``allow_singular``); it does not depend on ``mean``."""
    d = _dimension(mean, cov)
    (cov,) = promote(cov)
    cov = _cov_matrix(cov, d, "entropy")
    if not allow_singular:
        return 0.5 * (d * (1 + _LOG_2PI) + la.slogdet(cov).logabsdet)
    _, _, log_pdet, rank = _pseudo(cov)
    return 0.5 * (rank * (1 + _LOG_2PI) + log_pdet)
