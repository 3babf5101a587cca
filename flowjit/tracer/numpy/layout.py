"""One array's shape and axes: ``reshape``, ``ravel``, ``transpose`` (``permute_dims``,
``matrix_transpose``), ``swapaxes``, ``moveaxis``, ``rollaxis``, ``squeeze``, ``expand_dims``,
``broadcast_to`` (``broadcast_arrays``), ``atleast_1d/2d/3d``, ``shape`` and ``ndim``."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from flowjit.ir.errors import FlowjitTypeError, ShapeError
from flowjit.tracer.core import Tracer, bind, user_location
from flowjit.tracer.numpy.counterparts import numpy_counterpart
from flowjit.tracer.numpy.operands import (
    ArrayLike,
    as_operand,
    bad_argument,
    normalize_axis,
    operand_value,
    shape_tuple,
    static_int,
    strong,
)

__all__: list[str] = [
    "atleast_1d", "atleast_2d", "atleast_3d", "broadcast_arrays", "broadcast_to", "expand_dims", "matrix_transpose",
    "moveaxis", "ndim", "permute_dims", "ravel", "reshape", "rollaxis", "shape", "squeeze", "swapaxes", "transpose",
]


def shape(x: ArrayLike) -> tuple[int, ...]:
    """The static shape of ``x``."""
    return as_operand(x).shape


def ndim(x: ArrayLike) -> int:
    """The rank of ``x``."""
    return len(as_operand(x).shape)


def _resolve_shape(old: tuple[int, ...], new: Any) -> tuple[int, ...]:
    new = shape_tuple(new)
    size = math.prod(old)
    if new.count(-1) > 1:
        raise ShapeError(f"only one dimension may be -1, got {new}", op="reshape")
    if -1 in new:
        known = math.prod(d for d in new if d != -1)
        if known == 0 or size % known:
            raise ShapeError(f"cannot reshape {list(old)} into {list(new)}", op="reshape")
        new = tuple(size // known if d == -1 else d for d in new)
    return new


def reshape(x: ArrayLike, shape: Any, *more: int, copy: bool | None = None) -> Any:
    """``x`` with a new shape of the same size; one dimension may be -1. ``copy`` is the
    array API's: a traced value is immutable, so only ``copy=True`` on a concrete array
    changes anything (the result is then never a view of x)."""
    if copy and not isinstance(x, Tracer):
        x = np.array(x, copy=True)
    o = as_operand(x)
    target = (shape,) + more if more else shape
    new = _resolve_shape(o.shape, target)
    if new == o.shape:
        return operand_value(o)
    return bind("reshape", [o], {"shape": new}, weak=o.weak)


def ravel(x: ArrayLike) -> Any:
    """``x`` flattened to one dimension (row-major)."""
    return reshape(x, -1)


def transpose(x: ArrayLike, axes: Any = None) -> Any:
    """Permute the dimensions of ``x`` (reversed when ``axes`` is None)."""
    o = as_operand(x)
    n = len(o.shape)
    perm = tuple(range(n))[::-1] if axes is None else tuple(int(a) % n if n else int(a) for a in axes)
    if perm == tuple(range(n)):
        return operand_value(o)
    return bind("transpose", [o], {"perm": perm}, weak=o.weak)


def swapaxes(x: ArrayLike, axis1: int, axis2: int) -> Any:
    """``x`` with two axes exchanged."""
    n = ndim(x)
    perm = list(range(n))
    a, b = axis1 % n, axis2 % n
    perm[a], perm[b] = perm[b], perm[a]
    return transpose(x, perm)


def moveaxis(x: ArrayLike, source: Any, destination: Any) -> Any:
    """``x`` with axes ``source`` moved to positions ``destination`` (ints or sequences)."""
    n = ndim(x)
    src = [source] if isinstance(source, (int, np.integer)) else list(source)
    dst = [destination] if isinstance(destination, (int, np.integer)) else list(destination)
    if len(src) != len(dst):
        raise FlowjitTypeError(f"moveaxis: source {source} and destination {destination} must have the same length")
    for a in src + dst:
        if not -n <= int(a) < n:
            raise FlowjitTypeError(f"moveaxis: axis {a} is out of range for rank {n}")
    src = [int(a) % n for a in src]
    dst = [int(a) % n for a in dst]
    if len(set(src)) != len(src) or len(set(dst)) != len(dst):
        raise FlowjitTypeError(f"moveaxis: repeated axis in source {source} or destination {destination}")
    perm = [i for i in range(n) if i not in src]
    for d, a in sorted(zip(dst, src)):
        perm.insert(d, a)
    return transpose(x, perm)


def squeeze(x: ArrayLike, axis: Any = None) -> Any:
    """Remove size-1 dimensions (all of them, or those in ``axis``)."""
    o = as_operand(x)
    if axis is None:
        axes = tuple(i for i, d in enumerate(o.shape) if d == 1)
    else:
        axes = (axis,) if isinstance(axis, int) else tuple(axis)
    if not axes:
        return operand_value(o)
    return bind("squeeze", [o], {"axes": axes}, weak=o.weak)


def expand_dims(x: ArrayLike, axis: Any) -> Any:
    """Insert size-1 dimensions at ``axis`` (positions in the result)."""
    o = as_operand(x)
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    return bind("expand_dims", [o], {"axes": axes}, weak=o.weak)


def broadcast_to(x: ArrayLike, shape: Any) -> Any:
    """``x`` broadcast to ``shape`` as ``np.broadcast_to`` (a new array, not a view)."""
    o = as_operand(x)
    target = shape_tuple(shape)
    if o.shape == target:
        return operand_value(o)
    return bind("broadcast_to", [o], {"shape": target}, weak=o.weak)


def permute_dims(x: ArrayLike, /, axes: Sequence[int]) -> Any:
    """``x`` with its axes in the order ``axes`` (the array API's name for ``transpose``)."""
    return transpose(x, tuple(axes))


def matrix_transpose(x: ArrayLike, /) -> Any:
    """The last two axes of ``x`` swapped (a stack of matrices transposed)."""
    o = as_operand(x)
    if len(o.shape) < 2:
        raise FlowjitTypeError(f"matrix_transpose: x has shape {list(o.shape)} at {user_location()}; it needs at "
                               "least 2 dimensions")
    return swapaxes(operand_value(o), -1, -2)


def _at_least(fn: str, arys: Sequence[ArrayLike], grow: Any) -> Any:
    out = []
    for i, a in enumerate(arys):
        v = operand_value(strong(as_operand(a, f"arys[{i}]")))
        out.append(reshape(v, grow(shape(v))))
    return out[0] if len(out) == 1 else tuple(out)


@numpy_counterpart
def atleast_1d(*arys: ArrayLike) -> Any:
    """Each input viewed with at least one dimension (a scalar becomes shape (1,)), as ``np.atleast_1d``."""
    return _at_least("atleast_1d", arys, lambda s: s or (1,))


@numpy_counterpart
def atleast_2d(*arys: ArrayLike) -> Any:
    """Each input with at least two dimensions ((N,) becomes (1, N)), as ``np.atleast_2d``."""
    return _at_least("atleast_2d", arys, lambda s: (1,) * (2 - len(s)) + s if len(s) < 2 else s)


@numpy_counterpart
def atleast_3d(*arys: ArrayLike) -> Any:
    """Each input with at least three dimensions ((N,) becomes (1, N, 1), (M, N) becomes
    (M, N, 1)), as ``np.atleast_3d``."""
    def grow(s: tuple[int, ...]) -> tuple[int, ...]:
        return {0: (1, 1, 1), 1: (1,) + s + (1,), 2: s + (1,)}.get(len(s), s)
    return _at_least("atleast_3d", arys, grow)


@numpy_counterpart
def broadcast_arrays(*arrays: ArrayLike) -> list[Any]:
    """The arrays broadcast against each other, as a list (the array API's and NumPy 2's)."""
    shape = np.broadcast_shapes(*[tuple(as_operand(a, f"arrays[{i}]").shape) for i, a in enumerate(arrays)])
    return [broadcast_to(a, shape) for a in arrays]


@numpy_counterpart
def rollaxis(a: ArrayLike, axis: int, start: int = 0) -> Any:
    """``axis`` moved to lie before position ``start``, as ``np.rollaxis``."""
    v = operand_value(as_operand(a, "a"))
    n = ndim(v)
    ax = normalize_axis("rollaxis", axis, n)
    st = static_int("rollaxis", "start", start)
    if not -n <= st <= n:
        raise bad_argument("rollaxis", f"start={st} is out of bounds for an array of rank {n}", ShapeError)
    st %= n + 1
    if ax < st:
        st -= 1
    return v if ax == st else moveaxis(v, ax, st)
