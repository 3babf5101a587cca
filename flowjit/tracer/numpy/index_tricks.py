"""Index arrays: ``indices``, ``unravel_index``, ``ravel_multi_index``, ``tril_indices``,
``triu_indices``, ``tril_indices_from``, ``triu_indices_from``, ``diag_indices`` and
``diag_indices_from``.

The triangle and diagonal indices depend only on static sizes, so they are NumPy's own int64
constants (the ``_from`` forms read only their array's shape, which may be traced).
``unravel_index`` and ``ravel_multi_index`` convert traced indices; as everywhere in flowjit
(and in JAX) an index that is data is clamped into range rather than raising while the
program runs."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from flowjit.ir.dtypes import dtype as as_dtype
from flowjit.ir.dtypes import int64
from flowjit.ir.errors import FlowjitTypeError, ShapeError
from flowjit.tracer.core import user_location
from flowjit.tracer.numpy.conversion import astype
from flowjit.tracer.numpy.counterparts import numpy_counterpart
from flowjit.tracer.numpy.creation import iota
from flowjit.tracer.numpy.layout import broadcast_arrays, shape
from flowjit.tracer.numpy.manipulation import stack
from flowjit.tracer.numpy.operands import ArrayLike, as_operand, bad_argument, operand_value, static_int
from flowjit.tracer.numpy.ufuncs import add, clip, floor_divide, greater, less, multiply, remainder, where

__all__: list[str] = [
    "diag_indices", "diag_indices_from", "indices", "ravel_multi_index", "tril_indices", "tril_indices_from",
    "triu_indices", "triu_indices_from", "unravel_index",
]


def _dims(fname: str, name: str, dims: Any) -> tuple[int, ...]:
    seq = (dims,) if np.ndim(dims) == 0 else tuple(dims)
    out = tuple(static_int(fname, name, d) for d in seq)
    if any(d < 0 for d in out):
        raise bad_argument(fname, f"{name}={tuple(out)} has a negative dimension", ShapeError)
    return out


def _order(fname: str, order: str) -> None:
    if order not in ("C", "F"):
        raise bad_argument(fname, f"order={order!r}; allowed 'C' (row-major) or 'F' (column-major)")


@numpy_counterpart
def indices(dimensions: Sequence[int], dtype: Any = int, sparse: bool = False) -> Any:
    """An array of the grid's indices, as ``np.indices``: shape ``(len(dimensions), *dimensions)``
    with ``result[i]`` varying along axis i; with ``sparse=True`` a tuple of arrays of size 1
    except along their own axis. Built from iotas (int64 by default)."""
    dims = _dims("indices", "dimensions", dimensions)
    d = as_dtype(np.dtype(dtype))
    if sparse:
        return tuple(iota(d, tuple(n if j == i else 1 for j in range(len(dims))), i)
                     for i, n in enumerate(dims))
    if not dims:
        return np.zeros((0,), d.np)
    return stack([iota(d, dims, i) for i in range(len(dims))])


@numpy_counterpart
def unravel_index(indices: ArrayLike, shape: Sequence[int], order: str = "C") -> tuple[Any, ...]:  # noqa: F811
    """The per-axis int64 indices, one array per axis of ``shape``, of flat positions into an
    array of that shape, as ``np.unravel_index`` (``order='F'``: column-major). As in JAX,
    negative positions down to -size count from the end, and positions still out of range
    clamp to the first or last element (NumPy raises)."""
    dims = _dims("unravel_index", "shape", shape)
    _order("unravel_index", order)
    o = as_operand(indices, "indices")
    if not (o.dtype.is_int or o.dtype.is_bool):
        raise bad_argument("unravel_index", f"indices must be integers, got {o.aval}")
    size = math.prod(dims)
    if size == 0:
        raise bad_argument("unravel_index", f"shape={dims} has no elements: there is no position to unravel into",
                           ShapeError)
    rest = astype(operand_value(o), int64)
    parts: list[Any] = [None] * len(dims)
    for i in (reversed(range(len(dims))) if order == "C" else range(len(dims))):
        parts[i] = remainder(rest, dims[i])
        rest = floor_divide(rest, dims[i])
    past, before = greater(rest, 0), less(rest, -1)  # rest: 0 in range, -1 for -size..-1
    return tuple(where(past, n - 1, where(before, 0, p)) for n, p in zip(dims, parts))


@numpy_counterpart
def ravel_multi_index(multi_index: Sequence[ArrayLike], dims: Sequence[int], mode: Any = "raise",
                      order: str = "C") -> Any:
    """Flat positions (int64) into an array of shape ``dims`` from one integer array per axis
    (broadcast together), as ``np.ravel_multi_index``. ``mode`` (one, or one per axis):
    'clip' clamps an index into its axis, 'wrap' wraps it around, 'raise' raises for an index
    out of range; a traced index cannot be checked while tracing, so 'raise' needs concrete
    indices, as in JAX (pass mode='clip' or 'wrap' in a traced function)."""
    shape_ = _dims("ravel_multi_index", "dims", dims)
    _order("ravel_multi_index", order)
    if len(multi_index) != len(shape_):
        raise bad_argument("ravel_multi_index", f"{len(multi_index)} index arrays for the {len(shape_)} dimensions "
                           f"{shape_}; give one per dimension", ShapeError)
    modes = (mode,) * len(shape_) if isinstance(mode, str) else tuple(mode)
    if len(modes) != len(shape_) or any(m not in ("raise", "clip", "wrap") for m in modes):
        raise bad_argument("ravel_multi_index", f"mode={mode!r}; allowed 'raise', 'clip' or 'wrap', or one of them "
                           "per dimension")
    parts = []
    for k, (i, n, m) in enumerate(zip(multi_index, shape_, modes)):
        o = as_operand(i, f"multi_index[{k}]")
        if not (o.dtype.is_int or o.dtype.is_bool):
            raise bad_argument("ravel_multi_index", f"multi_index[{k}] must hold integers, got {o.aval}")
        v = astype(operand_value(o), int64)
        if m == "raise":
            if o.tracer is not None:
                raise FlowjitTypeError(
                    f"ravel_multi_index(mode='raise') on a traced index ({o.aval}) at {user_location()}: whether it "
                    "is in range is known only when the program runs. Pass mode='clip' or mode='wrap' (as JAX asks)")
            arr = np.asarray(o.array)
            if arr.size and (int(arr.min()) < 0 or int(arr.max()) >= n):
                raise bad_argument("ravel_multi_index", f"invalid entry in coordinates array: multi_index[{k}] has "
                                   f"values outside [0, {n}); pass mode='clip' or 'wrap' to bring them in", ShapeError)
        elif m == "clip":
            v = clip(v, 0, max(n - 1, 0))
        else:
            v = remainder(v, n) if n else v
        parts.append(v)
    parts = broadcast_arrays(*parts)
    strides = np.cumprod((1, *shape_[:0:-1]))[::-1] if order == "C" else np.cumprod((1, *shape_[:-1]))
    flat = None
    for p, s in zip(parts, strides):
        term = multiply(p, int(s)) if s != 1 else p
        flat = term if flat is None else add(flat, term)
    return flat if flat is not None else np.zeros((), np.int64)


def _as_int64(t: tuple[np.ndarray, ...]) -> tuple[np.ndarray, ...]:
    return tuple(np.asarray(a, np.int64) for a in t)


@numpy_counterpart
def tril_indices(n: int, k: int = 0, m: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The (row, column) int64 indices of the lower triangle (at and below the k-th diagonal)
    of an n x m array, as ``np.tril_indices``: NumPy constants."""
    n, k = static_int("tril_indices", "n", n), static_int("tril_indices", "k", k)
    return _as_int64(np.tril_indices(n, k, None if m is None else static_int("tril_indices", "m", m)))


@numpy_counterpart
def triu_indices(n: int, k: int = 0, m: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The (row, column) int64 indices of the upper triangle (at and above the k-th diagonal)
    of an n x m array, as ``np.triu_indices``: NumPy constants."""
    n, k = static_int("triu_indices", "n", n), static_int("triu_indices", "k", k)
    return _as_int64(np.triu_indices(n, k, None if m is None else static_int("triu_indices", "m", m)))


def _matrix_shape(fname: str, arr: ArrayLike) -> tuple[int, int]:
    s = shape(arr)
    if len(s) != 2:
        raise bad_argument(fname, f"arr must be 2-D, got shape {list(s)}", ShapeError)
    return s[0], s[1]


@numpy_counterpart
def tril_indices_from(arr: ArrayLike, k: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``tril_indices`` for the 2-D ``arr``'s shape (only its shape is read: it may be traced)."""
    rows, cols = _matrix_shape("tril_indices_from", arr)
    return tril_indices(rows, k, cols)


@numpy_counterpart
def triu_indices_from(arr: ArrayLike, k: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``triu_indices`` for the 2-D ``arr``'s shape (only its shape is read: it may be traced)."""
    rows, cols = _matrix_shape("triu_indices_from", arr)
    return triu_indices(rows, k, cols)


@numpy_counterpart
def diag_indices(n: int, ndim: int = 2) -> tuple[np.ndarray, ...]:
    """The indices of the main diagonal of an n x n x ... array of rank ``ndim``, as
    ``np.diag_indices``: ``ndim`` copies of ``arange(n)`` (int64 NumPy constants)."""
    n, ndim = static_int("diag_indices", "n", n), static_int("diag_indices", "ndim", ndim)
    return (np.arange(n, dtype=np.int64),) * ndim


@numpy_counterpart
def diag_indices_from(arr: ArrayLike) -> tuple[np.ndarray, ...]:
    """``diag_indices`` for ``arr``, which must be at least 2-D with all sides equal (only its
    shape is read)."""
    s = shape(arr)
    if len(s) < 2:
        raise bad_argument("diag_indices_from", f"arr must be at least 2-d, got shape {list(s)}", ShapeError)
    if len(set(s)) != 1:
        raise bad_argument("diag_indices_from", f"all dimensions of arr must be of equal length, got shape {list(s)}",
                           ShapeError)
    return diag_indices(s[0], len(s))
