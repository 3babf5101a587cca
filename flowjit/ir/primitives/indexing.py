"""Indexing primitives: gather along one axis and its transpose, scatter_add, and
first_occurrence (where each index first appears: the slots of a sparse gradient).

Both take an integer index array (i32 or i64, any shape, rank 0 included) that selects
positions along ``axis`` of the data operand; the index array's shape replaces that axis
in the gathered (or scattered) block: ``x.shape[:axis] + indices.shape + x.shape[axis+1:]``.

Out-of-range indices are CLAMPED to ``[0, n-1]`` (as XLA's gather does), never wrapped
and never an error: a negative index reads or writes element 0, a too-large one element
n-1. Indices are data, not attributes, so the rule cannot check them, and clamping keeps
every backend's memory access in bounds. The data axis must therefore be non-empty.
gather is a ``layout`` op (role ``gather``): each result element is one element of ``x``
at a position read from ``indices``, so it fuses with its neighbours (an embedding lookup
and the mean over its bag are one kernel). scatter_add is ``opaque``: repeated indices add
into one element, so its elements are not independent; the lowering gives it a kernel of
its own that adds the updates in order. first_occurrence is ``opaque`` for the same reason
(a later index must see what an earlier one wrote); the ``sparse_scatter`` pass makes it, to
add an embedding's gradient into one row per distinct id instead of a table of zeros.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from flowjit.ir.dtypes import ALL_DTYPES, COMPLEX_DTYPES, INT_DTYPES, NUMERIC_DTYPES, int64
from flowjit.ir.errors import ShapeError
from flowjit.ir.registry import attr, declare, defvjp, normalize_axis
from flowjit.ir.types import TensorType


def _block_shape(x: TensorType, indices: TensorType, axis: int) -> tuple[int, ...]:
    """Normalized-axis check shared by both ops; returns the gathered block's shape."""
    if indices.dtype not in INT_DTYPES:
        raise ShapeError(f"indices must be i32 or i64, got {indices}")
    if x.ndim == 0:
        raise ShapeError(f"operand must have rank >= 1, got {x}")
    ax = normalize_axis(axis, x.ndim)
    if x.shape[ax] == 0:
        raise ShapeError(f"axis {axis} of {x} is empty: there is no element to clamp indices to")
    return x.shape[:ax] + indices.shape + x.shape[ax + 1:]


def _index_tuple(x: np.ndarray, indices: np.ndarray, axis: int) -> tuple:
    # One advanced index behind full slices: NumPy then puts indices.shape in place of axis.
    ax = axis % x.ndim
    clamped = np.clip(indices.astype(np.int64), 0, x.shape[ax] - 1)
    return (slice(None),) * ax + (clamped,)


# ---- gather -----------------------------------------------------------------------------
def _gather_rule(in_types: Sequence[TensorType], *, axis: int) -> TensorType:
    x, indices = in_types
    return x.with_shape(_block_shape(x, indices, axis))


def _gather_impl(x: np.ndarray, indices: np.ndarray, *, axis: int) -> np.ndarray:
    return np.array(x[_index_tuple(x, indices, axis)], dtype=x.dtype, order="C")


declare("gather", kind="layout", role="gather", rule=_gather_rule, impl=_gather_impl, arity=2,
        attrs={"axis": attr("int")}, dtypes=ALL_DTYPES,
        doc="np.take(x, clip(indices, 0, n-1), axis): out-of-range indices are clamped; "
            "result shape x.shape[:axis] + indices.shape + x.shape[axis+1:]; "
            "differentiable w.r.t. x (its VJP is scatter_add)")


# ---- scatter_add ------------------------------------------------------------------------
def _scatter_add_rule(in_types: Sequence[TensorType], *, axis: int) -> TensorType:
    operand, indices, updates = in_types
    block = _block_shape(operand, indices, axis)
    if updates.dtype != operand.dtype:
        raise ShapeError(f"updates {updates} must have the dtype of operand {operand}")
    if updates.shape != block:
        raise ShapeError(f"updates {updates} must have shape {list(block)} "
                         f"(operand {operand}, indices {indices}, axis {axis})")
    return operand


def _scatter_add_impl(operand: np.ndarray, indices: np.ndarray, updates: np.ndarray, *,
                      axis: int) -> np.ndarray:
    out = np.array(operand, order="C", copy=True)
    with np.errstate(all="ignore"):
        np.add.at(out, _index_tuple(operand, indices, axis), updates)
    return out


declare("scatter_add", kind="opaque", role="scatter_add", rule=_scatter_add_rule, impl=_scatter_add_impl, arity=3,
        attrs={"axis": attr("int")}, dtypes=NUMERIC_DTYPES + COMPLEX_DTYPES,
        doc="copy of operand with updates added at clip(indices, 0, n-1) along axis; repeated "
            "indices accumulate (np.add.at); the transpose of gather")


# ---- first_occurrence ------------------------------------------------------------------
def _first_occurrence_rule(in_types: Sequence[TensorType], *, size: int) -> TensorType:
    (indices,) = in_types
    if not indices.dtype.is_int:
        raise ShapeError(f"indices must be integers, got {indices}")
    if size < 1:
        raise ShapeError(f"size must be at least 1 (indices are clamped to [0, size-1]), got {size}")
    return TensorType((size,), int64)


def _first_occurrence_impl(indices: np.ndarray, *, size: int) -> np.ndarray:
    out = np.full(size, -1, np.int64)
    seen, first = np.unique(np.clip(indices.reshape(-1), 0, size - 1), return_index=True)
    out[seen] = first
    return out


declare("first_occurrence", kind="opaque", role="first_occurrence", rule=_first_occurrence_rule,
        impl=_first_occurrence_impl, attrs={"size": attr("int")}, dtypes=INT_DTYPES, differentiable=False,
        doc="i64[size]: at v, the first row-major position of v among clip(indices, 0, size-1), -1 where v "
            "does not occur (the slot of each distinct index: see the sparse_scatter pass)")


# ---- VJP rules (see Primitive): gather and scatter_add are each other's transpose.
defvjp("gather", lambda e, g, y, x, indices, axis: [
    e.scatter_add(e.zeros(x.type), indices, g, axis=axis), None])
defvjp("scatter_add", lambda e, g, y, x, indices, updates, axis: [g, None, e.gather(g, indices, axis=axis)])
