"""Indexing: ``x[key]`` (``getitem``: NumPy's basic and advanced indexing), ``take``,
``take_along_axis``, ``scatter_add`` and ``select``. Integer indices that are data are
clamped into range (as in JAX), never an error at run time."""

from __future__ import annotations

import builtins
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from flowjit.ir.dtypes import bool_, int64
from flowjit.ir.errors import AxisError, FlowjitTypeError, ShapeError
from flowjit.tracer.core import Operand, Tracer, bind, user_location
from flowjit.tracer.numpy.conversion import astype
from flowjit.tracer.numpy.counterparts import numpy_counterpart
from flowjit.tracer.numpy.creation import full, iota
from flowjit.tracer.numpy.layout import broadcast_to, expand_dims, ndim, ravel, reshape, shape, squeeze, transpose
from flowjit.tracer.numpy.operands import ArrayLike, as_operand, bad_argument, cast, operand_value, promote
from flowjit.tracer.numpy.ufuncs import add, clip, multiply, where

__all__: list[str] = [
    "getitem", "scatter_add", "scatter_max", "scatter_min", "scatter_mul", "select", "take", "take_along_axis",
]


def _normalize_index(i: Operand, n: int) -> Operand:
    """Negative indices count from the end; the gather clamps anything still out of range."""
    if i.tracer is None:
        arr = np.asarray(i.array)
        return Operand(None, np.where(arr < 0, arr + n, arr).astype(arr.dtype), False)
    neg = bind("lt", [i, cast(Operand(None, np.asarray(0), True), i.dtype)])
    wrapped = bind("add", [i, cast(Operand(None, np.asarray(n), True), i.dtype)])
    return as_operand(bind("select", [neg, wrapped, i]))


def _index_operand(i: ArrayLike, what: str) -> Operand:
    o = as_operand(i, what)
    if o.tracer is None and o.array.size == 0 and not o.dtype.is_int:
        return Operand(None, o.array.astype(np.int64), False)  # [] selects nothing, as in NumPy
    if o.dtype.is_bool or o.dtype.is_float:
        raise FlowjitTypeError(f"{what} must be integers, got {o.aval}")
    return o


def take(x: ArrayLike, indices: ArrayLike, axis: int | None = None) -> Any:
    """Elements of ``x`` at ``indices`` along ``axis`` (of the flattened array when None).

    Negative indices count from the end; indices still out of range are clamped (as in
    JAX), never an error at run time.
    """
    o = as_operand(x)
    if axis is None:
        o, axis = as_operand(ravel(operand_value(o))), 0
    n = len(o.shape)
    if not -n <= axis < n:
        raise AxisError(f"axis {axis} is out of range for {o.aval}", op="take")
    axis = axis % n
    idx = _index_operand(indices, "indices")
    if o.shape[axis] == 0:
        if math.prod(idx.shape):
            raise IndexError(f"cannot take from axis {axis} of {o.aval}: it is empty")
        return full(o.shape[:axis] + idx.shape + o.shape[axis + 1:], 0, o.dtype)  # nothing from nothing
    return bind("gather", [o, _normalize_index(idx, o.shape[axis])], {"axis": axis})


def flat_index(parts: Sequence[Any], sizes: Sequence[int]) -> Any:
    """The row-major flat position from per-axis indices: ``sum(parts[d] * stride_d)`` with
    the strides of an array of shape ``sizes`` (the last axis's term first)."""
    flat, stride = None, 1
    for part, n in zip(reversed(parts), reversed(sizes)):
        term = multiply(part, stride) if stride != 1 else part
        flat = term if flat is None else add(flat, term)
        stride *= n
    return flat


def take_along_axis(x: ArrayLike, indices: ArrayLike, axis: int | None = -1) -> Any:
    """``np.take_along_axis``: pick along ``axis`` with indices broadcast against x's other axes.

    ``axis=None`` works on the flattened x with 1-D indices. Out-of-range indices clamp.
    """
    o = as_operand(x)
    idx = _index_operand(indices, "indices")
    if axis is None:
        if len(idx.shape) != 1:
            raise FlowjitTypeError(f"take_along_axis: with axis=None indices must be 1-D, got {list(idx.shape)}")
        return take(operand_value(o), operand_value(idx))
    n = len(o.shape)
    if len(idx.shape) != n:
        raise FlowjitTypeError(f"take_along_axis: indices of shape {list(idx.shape)} must have the "
                               f"rank of x {list(o.shape)}")
    axis = axis % n
    out_shape = tuple(idx.shape[i] if i == axis else builtins.max(idx.shape[i], o.shape[i]) if idx.shape[i] == 1
                      else idx.shape[i] for i in range(n))
    i_ax = clip(operand_value(_normalize_index(idx, o.shape[axis])), 0, o.shape[axis] - 1)
    parts = [broadcast_to(i_ax, out_shape) if d == axis else iota(idx.dtype, out_shape, d) for d in range(n)]
    linear = flat_index(parts, o.shape)
    return bind("gather", [as_operand(ravel(operand_value(o))), as_operand(linear)], {"axis": 0})


def _scatter(primitive: str, x: ArrayLike, indices: ArrayLike, updates: ArrayLike, axis: int) -> Any:
    o = as_operand(x)
    axis = axis % len(o.shape)
    idx = _normalize_index(_index_operand(indices, "indices"), o.shape[axis])
    u = cast(as_operand(updates, "updates"), o.dtype)
    return bind(primitive, [o, idx, u], {"axis": axis})


def scatter_add(x: ArrayLike, indices: ArrayLike, updates: ArrayLike, axis: int = 0) -> Any:
    """A copy of ``x`` with ``updates`` added at ``indices`` along ``axis`` (duplicates
    accumulate, as ``np.add.at``; a negative index counts from the end, and one still out of
    range is clamped to the first or last element)."""
    return _scatter("scatter_add", x, indices, updates, axis)


def scatter_mul(x: ArrayLike, indices: ArrayLike, updates: ArrayLike, axis: int = 0) -> Any:
    """A copy of ``x`` with each element at ``indices`` along ``axis`` multiplied by its
    updates (``np.multiply.at``); indices as ``scatter_add``'s."""
    return _scatter("scatter_mul", x, indices, updates, axis)


def scatter_max(x: ArrayLike, indices: ArrayLike, updates: ArrayLike, axis: int = 0) -> Any:
    """A copy of ``x`` with each element at ``indices`` along ``axis`` the maximum of itself
    and its updates, NaN propagating (``np.maximum.at``); indices as ``scatter_add``'s."""
    return _scatter("scatter_max", x, indices, updates, axis)


def scatter_min(x: ArrayLike, indices: ArrayLike, updates: ArrayLike, axis: int = 0) -> Any:
    """A copy of ``x`` with each element at ``indices`` along ``axis`` the minimum of itself
    and its updates, NaN propagating (``np.minimum.at``); indices as ``scatter_add``'s."""
    return _scatter("scatter_min", x, indices, updates, axis)


def _classify_index(k: Any) -> tuple[str, Any]:
    """One entry of an index tuple as (kind, value): none, ellipsis, slice, int, bool0, mask or array."""
    if k is None:
        return "none", None
    if k is Ellipsis:
        return "ellipsis", None
    if isinstance(k, builtins.slice):
        for name in ("start", "stop", "step"):
            v = getattr(k, name)
            if isinstance(v, Tracer):
                raise FlowjitTypeError(f"slice {name} is a traced value ({v.aval}): slice bounds must be static "
                                       "(the result's shape depends on them); use fj.take or fj.where instead")
        return "slice", k
    if isinstance(k, (bool, np.bool_)):
        return "bool0", builtins.bool(k)
    if isinstance(k, (int, np.integer)):
        return "int", int(k)
    if isinstance(k, Tracer):
        if k.dtype == bool_:
            raise FlowjitTypeError("indexing with a traced boolean mask has a data-dependent shape; "
                                   "use fj.where(mask, x, 0) instead")
        if not k.dtype.is_int:
            raise IndexError(f"indexing at {user_location()}: arrays used as indices must be of integer (or "
                             f"boolean) type, got {k.aval}; convert the index with .astype(np.int32)")
        return "array", k
    try:
        arr = np.asarray(k)
    except ValueError:
        raise IndexError(f"index {k!r:.60} is a ragged sequence") from None
    if arr.dtype == np.bool_:
        return ("bool0", builtins.bool(arr)) if arr.ndim == 0 else ("mask", arr)
    if arr.size == 0 and arr.dtype.kind not in "iu":
        arr = arr.astype(np.int64)  # x[[]] selects nothing, as in NumPy
    if arr.dtype.kind not in "iu":
        raise IndexError(f"indexing at {user_location()}: arrays used as indices must be of integer (or "
                         f"boolean) type, got {arr.dtype}; convert the index with .astype(np.int32)")
    if arr.dtype not in (np.int32, np.int64):
        arr = arr.astype(np.int64)
    return "array", arr


def getitem(x: ArrayLike, key: Any) -> Any:
    """``x[key]`` with NumPy's basic and advanced (integer array) indexing.

    Ints, slices (any step), None, Ellipsis, integer arrays and concrete boolean masks
    (also 0-d ``True``/``False``) are supported; several integer arrays broadcast together,
    and their result dimensions go where NumPy puts them (in place when the advanced
    indices are adjacent, first otherwise). Python ints out of range raise IndexError;
    integer arrays are data, so out-of-range entries are clamped (as in JAX). Boolean masks
    must be concrete (the result's shape depends on their values).
    """
    o = as_operand(x)
    shp = o.shape
    entries = [_classify_index(k) for k in (key if isinstance(key, tuple) else (key,))]
    if builtins.sum(1 for kind, _ in entries if kind == "ellipsis") > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    consumed = builtins.sum(v.ndim if kind == "mask" else 1 for kind, v in entries
                            if kind in ("slice", "int", "array", "mask"))
    if consumed > len(shp):
        raise IndexError(f"too many indices for array: array is {len(shp)}-dimensional, but {consumed} were indexed")
    fill = [("slice", builtins.slice(None))] * (len(shp) - consumed)
    ell = next((i for i, (kind, _) in enumerate(entries) if kind == "ellipsis"), None)
    # One (kind, value) per axis of x with the new axes inserted; ``boundary`` is where an
    # ellipsis stood: advanced indices on both sides of it are never adjacent (NumPy's rule).
    per_axis: list[tuple[str, Any]] = []
    new_axes: list[int] = []
    boundary = None
    d = 0  # the axis of x the next entry indexes
    for kind, v in entries + ([] if ell is not None else fill):
        if kind == "ellipsis":
            boundary = len(per_axis)
            per_axis.extend(fill)
            d += len(fill)
        elif kind in ("none", "bool0"):
            new_axes.append(len(per_axis))
            # A 0-d bool adds an axis indexed by [0] (True) or [] (False), as NumPy does.
            per_axis.append(("slice", builtins.slice(None)) if kind == "none" else
                            ("array", np.zeros(int(v), dtype=np.int64)))
        elif kind == "mask":
            if v.shape != shp[d:d + v.ndim]:
                raise IndexError(f"boolean index of shape {list(v.shape)} does not match the indexed "
                                 f"dimensions {list(shp[d:d + v.ndim])} of an array of shape {list(shp)}")
            per_axis.extend(("array", i.astype(np.int64)) for i in np.nonzero(v))
            d += v.ndim
        else:
            if kind == "int" and not -shp[d] <= v < shp[d]:
                raise IndexError(f"index {v} is out of bounds for axis {d} with size {shp[d]}")
            per_axis.append((kind, v))
            d += 1
    val = operand_value(o)
    if new_axes:
        val = expand_dims(val, tuple(new_axes))
    vshape = shape(val)
    has_array = builtins.any(kind == "array" for kind, _ in per_axis)
    # With any integer array present, ints are advanced indices too (they broadcast as 0-d).
    adv = [i for i, (kind, _) in enumerate(per_axis) if kind == "array" or (kind == "int" and has_array)]
    # Basic part: slices and (when no arrays) ints, as one strided slice then a squeeze.
    starts, sizes, steps, drop = [], [], [], []
    for ax, (kind, v) in enumerate(per_axis):
        n = vshape[ax]
        if kind == "slice":
            start, stop, step = v.indices(n)
            size = len(range(start, stop, step))
            # An empty slice touches nothing: give it a start and step the slice rule accepts.
            starts.append(start if size else 0)
            sizes.append(size)
            steps.append(step if size else 1)
        elif kind == "int" and not has_array:
            starts.append(v % n)
            sizes.append(1)
            steps.append(1)
            drop.append(ax)
        else:
            starts.append(0)
            sizes.append(n)
            steps.append(1)
    if (tuple(starts), tuple(sizes), tuple(steps)) != ((0,) * len(vshape), tuple(vshape), (1,) * len(vshape)):
        val = bind("slice", [as_operand(val)], {"start": tuple(starts), "size": tuple(sizes), "step": tuple(steps)},
                   weak=o.weak)
    if drop:
        val = squeeze(val, tuple(drop))
    if not adv:
        return val
    adjacent = (adv == list(range(adv[0], adv[0] + len(adv)))
                and not (boundary is not None and adv[0] < boundary <= adv[-1]))
    return _advanced_index(val, [per_axis[i][1] for i in adv], adv, adjacent)


def _advanced_index(val: Any, idx_keys: list[Any], dims: list[int], adjacent: bool) -> Any:
    """Gather with integer-array indices on ``dims`` (after basic slicing), NumPy placement."""
    vshape = shape(val)
    idx_ops = [_index_operand(k, "index") for k in idx_keys]
    bshape = _broadcast_shape([o.shape for o in idx_ops])
    rest = [d for d in range(len(vshape)) if d not in dims]
    if adjacent:
        out_shape = (tuple(vshape[d] for d in rest[:dims[0]]) + bshape + tuple(vshape[d] for d in rest[dims[0]:]))
    else:
        out_shape = bshape + tuple(vshape[d] for d in rest)
    if builtins.any(vshape[d] == 0 for d in dims):
        if math.prod(bshape):
            d = next(d for d in dims if vshape[d] == 0)
            raise IndexError(f"index is out of bounds for axis {d} with size 0")
        return full(out_shape, 0, as_operand(val).dtype)  # nothing selected from nothing
    moved = transpose(val, dims + rest)
    flat_n = math.prod(vshape[d] for d in dims)
    moved = reshape(moved, (flat_n,) + tuple(vshape[d] for d in rest))
    parts = [astype(broadcast_to(clip(operand_value(_normalize_index(o, vshape[d])), 0, vshape[d] - 1), bshape), int64)
             for d, o in zip(dims, idx_ops)]
    linear = flat_index(parts, [vshape[d] for d in dims])
    r = bind("gather", [as_operand(moved), as_operand(linear)], {"axis": 0})
    if adjacent and dims[0] > 0:
        nb = len(bshape)
        perm = list(range(nb, nb + dims[0])) + list(range(nb)) + list(range(nb + dims[0], nb + len(rest)))
        r = transpose(r, perm)
    return r


def _broadcast_shape(shapes: list[tuple[int, ...]]) -> tuple[int, ...]:
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        raise IndexError("shape mismatch: indexing arrays could not be broadcast together with shapes "
                         + " ".join(str(list(s)) for s in shapes)) from None


def index_along(x: Any, axis: int, key: Any) -> Any:
    """``x[..., key, ...]`` with ``key`` on ``axis`` (a slice or an int)."""
    idx = [builtins.slice(None)] * ndim(x)
    idx[axis] = key
    return getitem(x, tuple(idx))


@numpy_counterpart
def select(condlist: Sequence[ArrayLike], choicelist: Sequence[ArrayLike], default: ArrayLike = 0) -> Any:
    """Elementwise, the choice of the first condition that holds (``default`` where none does),
    as ``np.select``; conditions must be bool arrays; a Python number among the choices is
    weak (it does not widen a float32 choice), as in NumPy 2."""
    if len(condlist) != len(choicelist):
        raise bad_argument("select", f"condlist ({len(condlist)}) and choicelist ({len(choicelist)}) must have "
                           "the same length", ShapeError)
    if not len(condlist):
        raise bad_argument("select", "condlist must not be empty", ShapeError)
    choices = [as_operand(c, f"choicelist[{i}]") for i, c in enumerate(choicelist)]
    choices.append(as_operand(default, "default"))
    d = promote(*choices)
    conds = []
    for i, c in enumerate(condlist):
        o = as_operand(c, f"condlist[{i}]")
        if not o.dtype.is_bool:
            raise bad_argument("select", f"condlist[{i}] must be a bool array, got {o.aval}")
        conds.append(operand_value(o))
    out = operand_value(cast(choices[-1], d))
    for c, v in zip(reversed(conds), reversed(choices[:-1])):
        out = where(c, operand_value(cast(v, d)), out)
    shp = np.broadcast_shapes(*(shape(c) for c in conds), *(o.shape for o in choices))
    return broadcast_to(out, shp)
