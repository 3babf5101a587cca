"""Indexing primitives: gather along one axis and its transpose, scatter_add (with
scatter_mul, scatter_max and scatter_min, which combine their updates by another reducer), and
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
and the mean over its bag are one kernel). The scatters are ``opaque``: repeated indices
combine into one element, so its elements are not independent; the lowering gives each a
kernel of its own that combines the updates in order by its declared ``reducer``.
first_occurrence is ``opaque`` for the same reason (a later index must see what an earlier
one wrote); the ``sparse_scatter`` pass makes it, to add an embedding's gradient into one
row per distinct id instead of a table of zeros.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from flowjit.ir.dtypes import ALL_DTYPES, COMPLEX_DTYPES, INT_DTYPES, NUMERIC_DTYPES, bool_, int32, int64
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


# ---- scatter_add, scatter_mul, scatter_max, scatter_min -------------------------------------
def _scatter_rule(in_types: Sequence[TensorType], *, axis: int) -> TensorType:
    operand, indices, updates = in_types
    block = _block_shape(operand, indices, axis)
    if updates.dtype != operand.dtype:
        raise ShapeError(f"updates {updates} must have the dtype of operand {operand}")
    if updates.shape != block:
        raise ShapeError(f"updates {updates} must have shape {list(block)} "
                         f"(operand {operand}, indices {indices}, axis {axis})")
    return operand


def _scatter_impl(ufunc: np.ufunc):
    def impl(operand: np.ndarray, indices: np.ndarray, updates: np.ndarray, *, axis: int) -> np.ndarray:
        out = np.array(operand, order="C", copy=True)
        with np.errstate(all="ignore"):
            ufunc.at(out, _index_tuple(operand, indices, axis), updates)
        return out
    return impl


# The four share one kernel: the operand copied, then each update combined into its element
# in the row-major order of the updates, by the combine of the reduction they declare.
for _name, _ufunc, _reducer, _dtypes, _doc in (
        ("scatter_add", np.add, ("0", "acc + v"), NUMERIC_DTYPES + COMPLEX_DTYPES,
         "updates added (np.add.at); the transpose of gather"),
        ("scatter_mul", np.multiply, ("1", "acc * v"), NUMERIC_DTYPES + COMPLEX_DTYPES,
         "each element multiplied by its updates (np.multiply.at)"),
        ("scatter_max", np.maximum, ("lowest", "maximum(acc, v)"), NUMERIC_DTYPES + (bool_,),
         "each element the maximum of itself and its updates, NaN propagating (np.maximum.at)"),
        ("scatter_min", np.minimum, ("highest", "minimum(acc, v)"), NUMERIC_DTYPES + (bool_,),
         "each element the minimum of itself and its updates, NaN propagating (np.minimum.at)")):
    declare(_name, kind="opaque", role="scatter", reducer=_reducer, rule=_scatter_rule, impl=_scatter_impl(_ufunc),
            arity=3, attrs={"axis": attr("int")}, dtypes=_dtypes,
            doc=f"copy of operand with the updates combined at clip(indices, 0, n-1) along axis, repeated "
                f"indices in turn: {_doc}")


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


def _scatter_mul_vjp(e, g, y, x, indices, updates, *, axis):
    # An element's derivative by one of its updates is the product of everything else it was
    # multiplied by, through zeros too (as reduce_prod's rule): with u1 the updates with their
    # zeros as ones, p = scatter_mul(x, u1) and z the zeros among an element's updates, an
    # update's derivative is p / u where z is 0, p at the element's only zero, 0 elsewhere.
    zero = e.eq(updates, e.const(0, updates))
    u1 = e.select(zero, e.const(1, updates), updates)
    p = e.gather(e.scatter_mul(x, indices, u1, axis=axis), indices, axis=axis)
    counted = e.scatter_add(e.zeros(TensorType(x.type.shape, int32)), indices, e.cast(zero, dtype=int32), axis=axis)
    zeros = e.gather(counted, indices, axis=axis)
    none = e.eq(zeros, e.const(0, zeros))
    only = e.logical_and(zero, e.eq(zeros, e.const(1, zeros)))
    others = e.select(zero, p, e.div(p, u1))
    gu = e.select(e.logical_or(none, only), e.mul(e.gather(g, indices, axis=axis), others), e.zeros(updates.type))
    ones = e.broadcast_to(e.const(1, x), shape=x.type.shape)
    return [e.mul(g, e.scatter_mul(ones, indices, updates, axis=axis)), None, gu]


def _same(e, a, b):
    # Equal, or both NaN: the NaN an element kept is its own (NaN propagates through max).
    if not a.type.dtype.is_float:
        return e.eq(a, b)
    return e.logical_or(e.eq(a, b), e.logical_and(e.ne(a, a), e.ne(b, b)))


def _scatter_extreme_vjp(e, g, y, x, indices, updates, *, axis):
    # As reduce_max's rule and JAX's scatter_max: the cotangent of an element is shared
    # equally by what attains its result, the operand's element and each update that ties.
    won = e.cast(_same(e, updates, e.gather(y, indices, axis=axis)), dtype=x.type.dtype)
    kept = e.cast(_same(e, x, y), dtype=x.type.dtype)
    count = e.add(kept, e.scatter_add(e.zeros(x.type), indices, won, axis=axis))
    share = e.div(g, e.select(e.eq(count, e.const(0, count)), e.const(1, count), count))
    return [e.mul(share, kept), None, e.mul(e.gather(share, indices, axis=axis), won)]


defvjp("scatter_mul", _scatter_mul_vjp)
defvjp("scatter_max", _scatter_extreme_vjp)
defvjp("scatter_min", _scatter_extreme_vjp)
