"""Layout primitives: ops that only move, copy or drop elements, never combine them.

broadcast_to, reshape, transpose, squeeze, expand_dims, slice, concatenate and pad keep
the input dtype and compute each result element from exactly one input element (or the
pad value), so the fusion pass can fold them into the index arithmetic of a consumer.
Every attribute is explicit and already resolved by the tracer: no ``-1`` in a reshape,
one ``start/size/step`` entry per dimension in a slice, one ``low/high`` per dimension in
a pad. Axes attributes accept negative values, counted from the end; the rules check
them against the rank and the IR keeps what the caller wrote.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from flowjit.ir.dtypes import DType
from flowjit.ir.dtypes import dtype as as_dtype
from flowjit.ir.errors import ShapeError
from flowjit.ir.registry import (
    attr,
    declare,
    defvjp,
    normalize_axes,
    normalize_axis,
    same_dtype,
)
from flowjit.ir.types import TensorType


def _fresh(a: object) -> np.ndarray:
    # A C-contiguous copy: never a read-only broadcast view, nor an alias of an input that a
    # consumer might write through. (np.ascontiguousarray would turn 0-d into 1-d.)
    return np.array(a, order="C", copy=True)


def _per_dim(name: str, values: tuple[int, ...], t: TensorType) -> None:
    if len(values) != t.ndim:
        raise ShapeError(f"{name}={values} must have one entry per dimension of {t} "
                         f"({t.ndim}), got {len(values)}")


# ---- broadcast_to -----------------------------------------------------------------------
def _broadcast_to_rule(in_types: Sequence[TensorType], *, shape: tuple[int, ...]) -> TensorType:
    (x,) = in_types
    if x.ndim > len(shape):
        raise ShapeError(f"cannot broadcast {x} to a lower rank shape {list(shape)}")
    lead = len(shape) - x.ndim
    for i, d in enumerate(x.shape):
        if d != 1 and d != shape[lead + i]:
            raise ShapeError(f"cannot broadcast {x} to shape {list(shape)}: dimension {i} has "
                             f"size {d}, target has {shape[lead + i]} (must be equal or 1)")
    return x.with_shape(shape)


def _broadcast_to_impl(x: np.ndarray, *, shape: tuple[int, ...]) -> np.ndarray:
    return _fresh(np.broadcast_to(x, shape))


declare("broadcast_to", kind="layout", rule=_broadcast_to_rule, impl=_broadcast_to_impl,
        attrs={"shape": attr("shape")}, role="broadcast",
        doc="np.broadcast_to: align trailing dimensions, stretch size-1 ones, add leading ones")


# ---- reshape ----------------------------------------------------------------------------
def _reshape_rule(in_types: Sequence[TensorType], *, shape: tuple[int, ...]) -> TensorType:
    (x,) = in_types
    if math.prod(shape) != x.size:
        raise ShapeError(f"cannot reshape {x} ({x.size} elements) to {list(shape)} "
                         f"({math.prod(shape)} elements)")
    return x.with_shape(shape)


def _reshape_impl(x: np.ndarray, *, shape: tuple[int, ...]) -> np.ndarray:
    return _fresh(np.reshape(x, shape))


declare("reshape", kind="layout", rule=_reshape_rule, impl=_reshape_impl,
        attrs={"shape": attr("shape")}, role="row_major_reshape",
        doc="row-major reshape to an explicit shape with the same element count (no -1)")


# ---- transpose --------------------------------------------------------------------------
def _transpose_rule(in_types: Sequence[TensorType], *, perm: tuple[int, ...]) -> TensorType:
    (x,) = in_types
    # Strictly non-negative, so passes can invert perm without normalizing it first.
    if sorted(perm) != list(range(x.ndim)):
        raise ShapeError(f"perm={perm} is not a permutation of range({x.ndim}) for {x}")
    return x.with_shape(tuple(x.shape[p] for p in perm))


def _transpose_impl(x: np.ndarray, *, perm: tuple[int, ...]) -> np.ndarray:
    return _fresh(np.transpose(x, perm))


declare("transpose", kind="layout", rule=_transpose_rule, impl=_transpose_impl,
        attrs={"perm": attr("ints")}, role="permute_axes",
        doc="np.transpose(x, perm): result dimension i is input dimension perm[i]")


# ---- squeeze / expand_dims ----------------------------------------------------------------
def _squeeze_rule(in_types: Sequence[TensorType], *, axes: tuple[int, ...]) -> TensorType:
    (x,) = in_types
    norm = normalize_axes(axes, x.ndim)
    for a in norm:
        if x.shape[a] != 1:
            raise ShapeError(f"cannot squeeze axis {a} of {x}: its size is {x.shape[a]}, not 1")
    return x.with_shape(tuple(d for i, d in enumerate(x.shape) if i not in norm))


def _squeeze_impl(x: np.ndarray, *, axes: tuple[int, ...]) -> np.ndarray:
    return _fresh(np.squeeze(x, axis=tuple(axes)))


declare("squeeze", kind="layout", rule=_squeeze_rule, impl=_squeeze_impl,
        attrs={"axes": attr("ints")}, role="unit_axes_reshape",
        doc="drop the named axes, each of which must have size 1")


def _expand_dims_rule(in_types: Sequence[TensorType], *, axes: tuple[int, ...]) -> TensorType:
    (x,) = in_types
    out_ndim = x.ndim + len(axes)
    norm = normalize_axes(axes, out_ndim)
    rest = iter(x.shape)
    return x.with_shape(tuple(1 if i in norm else next(rest) for i in range(out_ndim)))


def _expand_dims_impl(x: np.ndarray, *, axes: tuple[int, ...]) -> np.ndarray:
    return _fresh(np.expand_dims(x, tuple(axes)))


declare("expand_dims", kind="layout", rule=_expand_dims_rule, impl=_expand_dims_impl,
        attrs={"axes": attr("ints")}, role="unit_axes_reshape",
        doc="insert size-1 axes; axes index the result (rank ndim + len(axes)), as np.expand_dims")


# ---- slice ------------------------------------------------------------------------------
def _slice_rule(in_types: Sequence[TensorType], *, start: tuple[int, ...], size: tuple[int, ...],
                step: tuple[int, ...]) -> TensorType:
    (x,) = in_types
    for name, values in (("start", start), ("size", size), ("step", step)):
        _per_dim(name, values, x)
    for d, (b, n, s, dim) in enumerate(zip(start, size, step, x.shape)):
        if s == 0:
            raise ShapeError(f"step of dimension {d} is 0 (slicing {x} with step={step})")
        if n < 0:
            raise ShapeError(f"size of dimension {d} is negative (slicing {x} with size={size})")
        if n == 0:
            continue
        last = b + (n - 1) * s
        if not (0 <= b < dim and 0 <= last < dim):
            raise ShapeError(f"dimension {d} of {x}: start {b}, size {n}, step {s} touch indices "
                             f"{b}..{last}, outside [0, {dim})")
    return x.with_shape(size)


def _slice_impl(x: np.ndarray, *, start: tuple[int, ...], size: tuple[int, ...],
                step: tuple[int, ...]) -> np.ndarray:
    index = []
    for b, n, s in zip(start, size, step):
        if n == 0:
            # start is unchecked here, so it cannot seed a Python slice.
            index.append(slice(0, 0, 1))
            continue
        stop: int | None = b + n * s
        if stop < 0:
            # A negative stop would count from the end; None runs down to index 0.
            stop = None
        index.append(slice(b, stop, s))
    return _fresh(x[tuple(index)])


declare("slice", kind="layout", rule=_slice_rule, impl=_slice_impl,
        attrs={"start": attr("ints"), "size": attr("ints"), "step": attr("ints")}, role="strided_window",
        doc="strided window: result[i] along dimension d is x[start[d] + i*step[d]]; "
            "step != 0 and may be negative; every touched index must be in range")


# ---- concatenate ------------------------------------------------------------------------
def _concatenate_rule(in_types: Sequence[TensorType], *, axis: int) -> TensorType:
    if not in_types:
        raise ShapeError("needs at least one input")
    d = same_dtype(in_types)
    first = in_types[0]
    listed = ", ".join(map(str, in_types))
    if any(t.ndim != first.ndim for t in in_types):
        raise ShapeError(f"inputs must have the same rank, got {listed}")
    if first.ndim == 0:
        raise ShapeError(f"cannot concatenate rank-0 inputs ({listed})")
    ax = normalize_axis(axis, first.ndim)
    for t in in_types[1:]:
        if any(a != b for i, (a, b) in enumerate(zip(t.shape, first.shape)) if i != ax):
            raise ShapeError(f"inputs must have equal shapes except along axis {axis}, got {listed}")
    shape = list(first.shape)
    shape[ax] = sum(t.shape[ax] for t in in_types)
    return TensorType(shape, d)


def _concatenate_impl(*xs: np.ndarray, axis: int) -> np.ndarray:
    return _fresh(np.concatenate(xs, axis=axis))


declare("concatenate", kind="layout", role="join", rule=_concatenate_rule, impl=_concatenate_impl,
        attrs={"axis": attr("int")}, arity=None,
        doc="join one or more same-dtype inputs along axis; other dimensions must match")


# ---- pad --------------------------------------------------------------------------------
def _pad_rule(in_types: Sequence[TensorType], *, low: tuple[int, ...], high: tuple[int, ...],
              value: float) -> TensorType:
    (x,) = in_types
    _per_dim("low", low, x)
    _per_dim("high", high, x)
    if any(v < 0 for v in low + high):
        raise ShapeError(f"padding must be non-negative, got low={low}, high={high} for {x}")
    return x.with_shape(tuple(lo + d + hi for lo, d, hi in zip(low, x.shape, high)))


def swaps_last_two_axes(perm: Sequence[int]) -> bool:
    """Whether transpose ``perm`` only swaps the last two axes (a matrix transpose of each
    matrix of a stack): the one a BLAS call reads in place through its transpose flag."""
    n = len(perm)
    return n >= 2 and tuple(p % n for p in perm) == (*range(n - 2), n - 1, n - 2)


def pad_fill(value: float, d: DType) -> np.ndarray:
    """The 0-d array of dtype ``d`` a pad with ``value`` fills with.

    Bool: ``value != 0``. Integers: truncated toward zero and saturated to the dtype's
    range (so -inf pads with the minimum, as a max-pool wants), NaN gives 0. Floats: the
    nearest value (f16 overflows to inf).
    """
    if d.is_bool:
        return np.asarray(value != 0)
    if d.is_int:
        info = np.iinfo(d.np)
        if math.isnan(value):
            v = 0
        elif value >= info.max:
            v = int(info.max)
        elif value <= info.min:
            v = int(info.min)
        else:
            v = int(value)
        return np.asarray(v, dtype=d.np)
    with np.errstate(over="ignore"):
        return np.asarray(value, dtype=np.float64).astype(d.np)


def _pad_impl(x: np.ndarray, *, low: tuple[int, ...], high: tuple[int, ...],
              value: float = 0.0) -> np.ndarray:
    shape = tuple(lo + d + hi for lo, d, hi in zip(low, x.shape, high))
    out = np.full(shape, pad_fill(value, as_dtype(x.dtype)), dtype=x.dtype)
    out[tuple(slice(lo, lo + d) for lo, d in zip(low, x.shape))] = x
    return out


declare("pad", kind="layout", role="constant_pad", rule=_pad_rule, impl=_pad_impl,
        attrs={"low": attr("ints"), "high": attr("ints"), "value": attr("float", 0.0)},
        doc="constant padding: low[d] / high[d] (non-negative) copies of value before / after "
            "each dimension d; value is cast to the input dtype (see pad_fill)")


# ---- VJP rules (see Primitive): each moves the cotangent back where the elements came from.
def _reshape_back(e, g, y, x, **attrs):
    return [e.reshape(g, shape=x.type.shape)]


def _transpose_vjp(e, g, y, x, *, perm):
    inverse = [0] * len(perm)
    for i, p in enumerate(perm):
        inverse[p % len(perm)] = i
    return [e.transpose(g, perm=tuple(inverse))]


def _slice_vjp(e, g, y, x, *, start, size, step):
    for axis, (s0, m, st) in enumerate(zip(start, size, step)):
        n = x.type.shape[axis]
        if m == 0:
            return [e.zeros(x.type)]
        if st < 0:  # reverse: the picked positions, increasing, start at s0 + st*(m-1)
            rev_start = [0] * g.type.ndim
            rev_step = [1] * g.type.ndim
            rev_start[axis], rev_step[axis] = m - 1, -1
            g = e.slice(g, start=tuple(rev_start), size=g.type.shape, step=tuple(rev_step))
            s0, st = s0 + st * (m - 1), -st
        g = e.embed(g, axis, s0, st, n)
    return [g]


def _concatenate_vjp(e, g, y, *xs, axis):
    ax = axis % g.type.ndim
    out, offset = [], 0
    for x in xs:
        start = [0] * g.type.ndim
        start[ax] = offset
        out.append(e.slice(g, start=tuple(start), size=x.type.shape, step=(1,) * g.type.ndim))
        offset += x.type.shape[ax]
    return out


defvjp("broadcast_to", lambda e, g, y, x, shape: [e.unbroadcast(g, x.type)])
defvjp("reshape", _reshape_back)
defvjp("squeeze", _reshape_back)
defvjp("expand_dims", _reshape_back)
defvjp("transpose", _transpose_vjp)
defvjp("slice", _slice_vjp)
defvjp("concatenate", _concatenate_vjp)
defvjp("pad", lambda e, g, y, x, low, high, value: [
    e.slice(g, start=tuple(low), size=x.type.shape, step=(1,) * x.type.ndim)])
