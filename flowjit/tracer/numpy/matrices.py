"""Matrices built or read along their diagonals: ``eye``, ``diag``, ``diagonal``, ``trace``,
``tril`` and ``triu``."""

from __future__ import annotations

import builtins
from typing import Any

import numpy as np

from flowjit.ir.dtypes import float64, int64
from flowjit.ir.errors import FlowjitTypeError, ShapeError
from flowjit.tracer.core import Tracer, user_location
from flowjit.tracer.numpy.conversion import astype
from flowjit.tracer.numpy.counterparts import numpy_counterpart
from flowjit.tracer.numpy.creation import iota, zeros
from flowjit.tracer.numpy.indexing import index_along
from flowjit.tracer.numpy.layout import expand_dims, moveaxis, reshape, shape
from flowjit.tracer.numpy.manipulation import pad
from flowjit.tracer.numpy.operands import (
    ArrayLike,
    as_operand,
    bad_argument,
    normalize_axis,
    on_device,
    operand_value,
    static_int,
)
from flowjit.tracer.numpy.reductions import sum
from flowjit.tracer.numpy.ufuncs import add, equal, greater_equal, less_equal, where

__all__: list[str] = [
    "diag", "diagonal", "eye", "trace", "tril", "triu",
]


def eye(N: int, M: int | None = None, k: int = 0, dtype: Any = None, *, device: Any = None) -> Any:
    """A 2-D array with ones on the k-th diagonal (float64 by default). ``k`` is any int: a
    diagonal outside the array (even past int64) leaves it all zeros, as NumPy's."""
    M = N if M is None else M
    if not isinstance(k, Tracer):
        if not isinstance(k, (int, np.integer)):
            raise FlowjitTypeError(f"eye: k={k!r} at {user_location()}; k (the diagonal's offset) must be an "
                                   "int: 0 the main diagonal, > 0 above it, < 0 below")
        if not -N < k < M:  # no element on that diagonal; int64 arithmetic could not hold k
            return zeros((N, M), dtype, device=device)
    with on_device(device):
        rows = iota(int64, (N, M), 0)
        cols = iota(int64, (N, M), 1)
        return astype(equal(add(rows, k), cols), float64 if dtype is None else dtype)


@numpy_counterpart
def diagonal(a: ArrayLike, offset: int = 0, axis1: int = 0, axis2: int = 1) -> Any:
    """The ``offset``-th diagonal of the planes (axis1, axis2), appended as the last axis, as
    ``np.diagonal`` (a strided slice of the flattened planes, so it fuses and its gradient is a pad)."""
    o = as_operand(a, "a")
    n = len(o.shape)
    if n < 2:
        raise bad_argument("diagonal", f"a must have at least two dimensions, got shape {list(o.shape)}", ShapeError)
    offset = static_int("diagonal", "offset", offset)
    ax1, ax2 = normalize_axis("diagonal", axis1, n, "axis1"), normalize_axis("diagonal", axis2, n, "axis2")
    if ax1 == ax2:
        raise bad_argument("diagonal", f"axis1 and axis2 cannot be the same (both {ax1})", ShapeError)
    x = moveaxis(operand_value(o), (ax1, ax2), (-2, -1))
    rows, cols = o.shape[ax1], o.shape[ax2]
    size = builtins.max(0, builtins.min(rows, cols - offset) if offset >= 0 else builtins.min(rows + offset, cols))
    flat = reshape(x, shape(x)[:-2] + (rows * cols,))
    if size == 0:
        return index_along(flat, n - 2, builtins.slice(0, 0))
    start = offset if offset >= 0 else -offset * cols
    return index_along(flat, n - 2, builtins.slice(start, start + (size - 1) * (cols + 1) + 1, cols + 1))


@numpy_counterpart
def diag(v: ArrayLike, k: int = 0) -> Any:
    """The k-th diagonal of a 2-D array, or a 2-D array with a 1-D v on its k-th diagonal, as ``np.diag``."""
    o = as_operand(v, "v")
    k = static_int("diag", "k", k)
    if len(o.shape) == 2:
        return diagonal(operand_value(o), k)
    if len(o.shape) != 1:
        raise bad_argument("diag", f"v must be 1-D or 2-D, got shape {list(o.shape)}", ShapeError)
    n = o.shape[0] + builtins.abs(k)
    padded = pad(operand_value(o), (0, builtins.abs(k)))
    # Row r holds v[r] at column r + k (k >= 0); column c holds v[c] at row c - k (k < 0).
    spread = expand_dims(padded, 1 if k >= 0 else 0)
    return where(eye(n, n, k, dtype=bool), spread, zeros((), o.dtype))


@numpy_counterpart
def trace(a: ArrayLike, offset: int = 0, axis1: int = 0, axis2: int = 1, dtype: Any = None) -> Any:
    """Sum along a diagonal, as ``np.trace`` (ints and bools sum in int64)."""
    d = diagonal(a, offset, axis1, axis2)
    return sum(d, axis=-1, dtype=dtype)


def _triangle(fn: str, m: ArrayLike, k: Any, lower: bool) -> Any:
    o = as_operand(m, "m")
    if not o.shape:
        raise bad_argument(fn, "m must be at least 1-D (a 1-D m is taken as the rows of a square matrix)", ShapeError)
    k = static_int(fn, "k", k)
    rows, cols = (o.shape[-2], o.shape[-1]) if len(o.shape) >= 2 else (o.shape[0], o.shape[0])
    r, c = iota(int64, (rows, cols), 0), iota(int64, (rows, cols), 1)
    keep = less_equal(c, add(r, k)) if lower else greater_equal(c, add(r, k))
    return where(keep, operand_value(o), zeros((), o.dtype))


@numpy_counterpart
def tril(m: ArrayLike, k: int = 0) -> Any:
    """``m`` with the elements above the k-th diagonal zeroed (on the last two axes), as ``np.tril``."""
    return _triangle("tril", m, k, True)


@numpy_counterpart
def triu(m: ArrayLike, k: int = 0) -> Any:
    """``m`` with the elements below the k-th diagonal zeroed (on the last two axes), as ``np.triu``."""
    return _triangle("triu", m, k, False)
