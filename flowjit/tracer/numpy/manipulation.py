"""Arrays joined, split and rearranged: ``concatenate`` (``concat``), ``stack`` and its
``vstack``/``hstack``/``dstack``/``column_stack`` forms, ``append``, ``r_`` and ``c_``; ``split``
and ``array_split``/``hsplit``/``vsplit``/``dsplit``, ``unstack``; ``flip``, ``roll``, ``rot90``,
``repeat``, ``tile`` and ``pad``. Counts, shifts and split points are static."""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from typing import Any

import numpy as np

from flowjit.ir.errors import AxisError, FlowjitTypeError, ShapeError
from flowjit.tracer.core import Operand, Tracer, bind, user_location
from flowjit.tracer.numpy.conversion import astype
from flowjit.tracer.numpy.counterparts import numpy_counterpart
from flowjit.tracer.numpy.indexing import getitem, index_along, take
from flowjit.tracer.numpy.layout import (
    atleast_1d,
    atleast_2d,
    atleast_3d,
    broadcast_to,
    expand_dims,
    moveaxis,
    ndim,
    ravel,
    reshape,
    shape,
    swapaxes,
    transpose,
)
from flowjit.tracer.numpy.operands import (
    ArrayLike,
    apply,
    as_operand,
    bad_argument,
    cast,
    normalize_axes,
    normalize_axis,
    operand_value,
    promote,
    static_int,
    strong,
)

__all__: list[str] = [
    "append", "array_split", "c_", "column_stack", "concat", "concatenate", "dsplit", "dstack", "flip", "fliplr",
    "flipud", "hsplit", "hstack", "pad", "r_", "repeat", "roll", "rot90", "row_stack", "split", "stack", "tile",
    "unstack", "vsplit", "vstack",
]


def concatenate(arrays: Sequence[ArrayLike], axis: int | None = 0) -> Any:
    """Join arrays along an existing axis (flattened first when ``axis`` is None)."""
    ops = [as_operand(a, f"arrays[{i}]") for i, a in enumerate(arrays)]
    if not ops:
        raise FlowjitTypeError("concatenate needs at least one array")
    if axis is None:
        ops = [as_operand(ravel(operand_value(o))) for o in ops]
        axis = 0
    d = promote(*ops)
    return apply("concatenate", [cast(o, d) for o in ops], {"axis": axis})


def stack(arrays: Sequence[ArrayLike], axis: int = 0) -> Any:
    """Join arrays of one shape along a new axis."""
    if not len(arrays):
        raise FlowjitTypeError("stack needs at least one array")
    shapes = [list(shape(a)) for a in arrays]
    if any(s != shapes[0] for s in shapes):
        raise ShapeError(f"all input arrays must have the same shape, got {', '.join(map(str, shapes))}", op="stack")
    return concatenate([expand_dims(a, axis) for a in arrays], axis=axis)


# The modes whose padding copies elements of the array: np.pad of an axis' positions gives
# the position each padded element is read from.
COPYING_PAD_MODES = ("edge", "reflect", "symmetric", "wrap")


def pad(x: ArrayLike, pad_width: Any, mode: str = "constant", constant_values: float = 0,
        reflect_type: str = "even") -> Any:
    """Pad as ``np.pad``: with a constant (``mode="constant"``, or ``"empty"``, whose values
    are unspecified and here zeros), or with the array's own elements (``"edge"``,
    ``"reflect"``, ``"symmetric"``, ``"wrap"``: along each axis one gather of the positions
    NumPy's pad reads, so the gradient adds back into them).

    ``pad_width`` is an int, a ``(before, after)`` pair, or one int or pair per axis.
    """
    if mode in COPYING_PAD_MODES:
        if reflect_type != "even":
            raise FlowjitTypeError(f"pad: reflect_type={reflect_type!r} is not supported; only 'even' (the "
                                   "default) is")
        o = as_operand(x)
        widths = _pad_widths(pad_width, len(o.shape))
        out = operand_value(o)
        for axis, (low, high) in enumerate(widths):
            if low or high:
                if o.shape[axis] == 0:
                    raise ShapeError(f"pad: mode {mode!r} cannot pad the empty axis {axis} of {o.shape}", op="pad")
                positions = np.pad(np.arange(o.shape[axis]), (low, high), mode=mode)
                out = take(out, positions, axis=axis)
        return out
    if mode == "empty":
        mode = "constant"
    if mode != "constant":
        raise FlowjitTypeError(f"pad: mode {mode!r} is not supported; it is one of 'constant', 'empty', "
                               f"{', '.join(map(repr, COPYING_PAD_MODES))}")
    o = as_operand(x)
    pw = _pad_widths(pad_width, len(o.shape))
    if isinstance(constant_values, Tracer):
        raise FlowjitTypeError("pad: constant_values must be a static number")
    return bind("pad", [o], {"low": tuple(int(v) for v in pw[:, 0]), "high": tuple(int(v) for v in pw[:, 1]),
                             "value": float(constant_values)}, weak=o.weak)


def _pad_widths(pad_width: Any, n: int) -> np.ndarray:
    """``pad_width`` as an [n, 2] array of (before, after) per axis, checked."""
    pw = np.asarray(pad_width)
    if pw.dtype.kind not in "iu" or pw.ndim > 2 or (pw.ndim >= 1 and pw.shape[-1] not in (1, 2)):
        raise FlowjitTypeError(f"pad: pad_width={pad_width!r} must be an int, a pair, or one int or pair per axis")
    try:
        pw = np.broadcast_to(pw.astype(np.int64), (n, 2))
    except ValueError:
        raise FlowjitTypeError(f"pad: pad_width={pad_width!r} does not fit an array of rank {n}") from None
    if (pw < 0).any():
        raise FlowjitTypeError(f"pad: pad_width={pad_width!r} must be non-negative")
    return pw


def split(x: ArrayLike, indices_or_sections: Any, axis: int = 0) -> list[Any]:
    """Split ``x`` along ``axis`` into equal sections or at the given indices."""
    o = as_operand(x)
    n = o.shape[axis]
    if isinstance(indices_or_sections, int):
        if n % indices_or_sections:
            raise ShapeError(f"axis of size {n} does not divide into {indices_or_sections} sections", op="split")
        step = n // indices_or_sections
        bounds = list(range(0, n + 1, step))
    else:
        bounds = [0, *indices_or_sections, n]
    out = []
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        idx = [builtins.slice(None)] * len(o.shape)
        idx[axis] = builtins.slice(lo, hi)
        out.append(getitem(operand_value(o), tuple(idx)))
    return out


def concat(arrays: Sequence[ArrayLike], /, *, axis: int | None = 0) -> Any:
    """The arrays joined along ``axis`` (the array API's name for ``concatenate``)."""
    return concatenate(arrays, axis=axis)


@numpy_counterpart
def flip(m: ArrayLike, axis: Any = None) -> Any:
    """``m`` reversed along ``axis`` (every axis when None), as ``np.flip``."""
    v = operand_value(as_operand(m, "m"))
    idx = [builtins.slice(None)] * ndim(v)
    for a in normalize_axes("flip", axis, ndim(v)):
        idx[a] = builtins.slice(None, None, -1)
    return getitem(v, tuple(idx)) if idx else v


@numpy_counterpart
def fliplr(m: ArrayLike) -> Any:
    """``m`` reversed along axis 1 (left/right), as ``np.fliplr``; m must be at least 2-D."""
    if ndim(m) < 2:
        raise bad_argument("fliplr", f"m must be at least 2-D, got shape {list(shape(m))}", ShapeError)
    return flip(m, 1)


@numpy_counterpart
def flipud(m: ArrayLike) -> Any:
    """``m`` reversed along axis 0 (up/down), as ``np.flipud``; m must be at least 1-D."""
    if ndim(m) < 1:
        raise bad_argument("flipud", "m must be at least 1-D, got a 0-d array", ShapeError)
    return flip(m, 0)


@numpy_counterpart
def roll(a: ArrayLike, shift: Any, axis: Any = None) -> Any:
    """``a`` with elements shifted cyclically by static ``shift`` along ``axis`` (of the
    flattened array when None), as ``np.roll``; shift and axis may be matching sequences."""
    v = operand_value(as_operand(a, "a"))
    if axis is None:
        return reshape(roll(ravel(v), shift, 0), shape(v))
    shifts = np.asarray(shift) if not isinstance(shift, Tracer) else shift
    if isinstance(shifts, Tracer) or shifts.dtype.kind not in "iu":
        raise bad_argument("roll", f"shift must be static integers, got {shift!r:.60}")
    try:
        pairs = np.broadcast(shifts, np.asarray(axis))
    except ValueError:
        raise bad_argument("roll", f"shift={shift!r} and axis={axis!r} do not match in length", ShapeError) from None
    if pairs.nd > 1:
        raise bad_argument("roll", "shift and axis must be ints or 1-D sequences", ShapeError)
    total = [0] * ndim(v)
    for s, ax in pairs:
        total[normalize_axis("roll", ax, ndim(v))] += int(s)
    for ax, s in enumerate(total):
        n = shape(v)[ax]
        if n and s % n:
            s %= n
            v = concatenate([index_along(v, ax, builtins.slice(n - s, None)),
                             index_along(v, ax, builtins.slice(0, n - s))], axis=ax)
    return v


@numpy_counterpart
def rot90(m: ArrayLike, k: int = 1, axes: Sequence[int] = (0, 1)) -> Any:
    """``m`` rotated by 90 degrees k times in the plane of ``axes`` (from the first axis
    towards the second), as ``np.rot90``."""
    v = operand_value(as_operand(m, "m"))
    n = ndim(v)
    axes = tuple(axes)
    if len(axes) != 2:
        raise bad_argument("rot90", f"axes must be two axes, got {axes!r}", ShapeError)
    a0, a1 = normalize_axis("rot90", axes[0], n, "axes[0]"), normalize_axis("rot90", axes[1], n, "axes[1]")
    if a0 == a1:
        raise bad_argument("rot90", f"axes must be different, got {axes!r}", ShapeError)
    k = static_int("rot90", "k", k) % 4
    if k == 0:
        return v
    if k == 2:
        return flip(flip(v, a0), a1)
    perm = list(range(n))
    perm[a0], perm[a1] = perm[a1], perm[a0]
    return transpose(flip(v, a1), perm) if k == 1 else flip(transpose(v, perm), a1)


@numpy_counterpart
def repeat(a: ArrayLike, repeats: Any, axis: int | None = None) -> Any:
    """Each element of ``a`` repeated ``repeats`` times (static: an int, or one count per
    element along ``axis``), as ``np.repeat``; the flattened array when axis is None."""
    v = operand_value(as_operand(a, "a"))
    if axis is None:
        v, axis = ravel(v), 0
    ax = normalize_axis("repeat", axis, ndim(v))
    if isinstance(repeats, Tracer):
        raise bad_argument("repeat", "repeats must be static integers (the result's length depends on them)")
    reps = np.asarray(repeats)
    n = shape(v)[ax]
    if reps.dtype.kind not in "iu" or reps.ndim > 1 or (reps.ndim == 1 and len(reps) not in (1, n)):
        raise bad_argument("repeat", f"repeats must be an int or {n} ints (one per element along axis {ax}), "
                           f"got {repeats!r:.60}", ShapeError)
    if (reps < 0).any():
        raise bad_argument("repeat", f"repeats must be non-negative, got {repeats!r:.60}", ShapeError)
    if reps.ndim == 0 or len(reps) == 1:
        r = int(reps.reshape(-1)[0])
        shp = shape(v)
        wide = broadcast_to(expand_dims(v, ax + 1), shp[:ax + 1] + (r,) + shp[ax + 1:])
        return reshape(wide, shp[:ax] + (n * r,) + shp[ax + 1:])
    return take(v, np.repeat(np.arange(n), reps), axis=ax)


@numpy_counterpart
def tile(A: ArrayLike, reps: Any) -> Any:
    """``A`` repeated ``reps`` times along each axis, as ``np.tile`` (the result's rank is the
    larger of A's and len(reps))."""
    v = operand_value(as_operand(A, "A"))
    reps = tuple(reps) if isinstance(reps, (tuple, list)) else (reps,)
    reps = tuple(static_int("tile", "reps", r) for r in reps)
    if builtins.any(r < 0 for r in reps):
        raise bad_argument("tile", f"reps must be non-negative, got {reps!r}", ShapeError)
    shp = shape(v)
    nd = builtins.max(len(shp), len(reps))
    shp = (1,) * (nd - len(shp)) + shp
    reps = (1,) * (nd - len(reps)) + reps
    interleaved = tuple(x for s in shp for x in (1, s))
    wide = broadcast_to(reshape(v, interleaved), tuple(x for s, r in zip(shp, reps) for x in (r, s)))
    return reshape(wide, tuple(s * r for s, r in zip(shp, reps)))


@numpy_counterpart
def append(arr: ArrayLike, values: ArrayLike, axis: int | None = None) -> Any:
    """``values`` appended to ``arr`` along ``axis`` (both flattened when None), as ``np.append``."""
    # NumPy makes both arrays first: a Python number appended is an int64 or float64 array.
    arr, values = operand_value(strong(as_operand(arr, "arr"))), operand_value(strong(as_operand(values, "values")))
    if axis is None:
        return concatenate([ravel(arr), ravel(values)], axis=0)
    return concatenate([arr, values], axis=axis)


def _stacked(fn: str, tup: Sequence[ArrayLike], dtype: Any, arrays: list[Any], axis: int) -> Any:
    if not arrays:
        raise bad_argument(fn, "needs at least one array")
    if dtype is not None:
        arrays = [astype(a, dtype) for a in arrays]
    return concatenate(arrays, axis=axis)


def _as_list(x: Any) -> list[Any]:
    return list(x) if isinstance(x, tuple) else [x]


@numpy_counterpart
def vstack(tup: Sequence[ArrayLike], *, dtype: Any = None, casting: str = "same_kind") -> Any:
    """Arrays stacked as rows (1-D arrays become rows), as ``np.vstack``."""
    return _stacked("vstack", tup, dtype, _as_list(atleast_2d(*tup)) if len(tup) else [], 0)


@numpy_counterpart
def hstack(tup: Sequence[ArrayLike], *, dtype: Any = None, casting: str = "same_kind") -> Any:
    """Arrays joined column-wise (1-D arrays end to end), as ``np.hstack``."""
    arrs = _as_list(atleast_1d(*tup)) if len(tup) else []
    return _stacked("hstack", tup, dtype, arrs, 0 if arrs and ndim(arrs[0]) == 1 else 1)


@numpy_counterpart
def dstack(tup: Sequence[ArrayLike]) -> Any:
    """Arrays stacked along a third axis, as ``np.dstack``."""
    return _stacked("dstack", tup, None, _as_list(atleast_3d(*tup)) if len(tup) else [], 2)


@numpy_counterpart
def column_stack(tup: Sequence[ArrayLike]) -> Any:
    """1-D arrays as the columns of a 2-D array (2-D arrays as they are), as ``np.column_stack``."""
    cols = []
    for i, a in enumerate(tup):
        v = operand_value(strong(as_operand(a, f"tup[{i}]")))
        cols.append(transpose(reshape(v, (1,) * (2 - ndim(v)) + shape(v))) if ndim(v) < 2 else v)
    return _stacked("column_stack", tup, None, cols, 1)


def _split_at(fn: str, ary: ArrayLike, points: Sequence[int], axis: int) -> list[Any]:
    v = operand_value(as_operand(ary, "ary"))
    return [index_along(v, axis, builtins.slice(lo, hi)) for lo, hi in zip(points[:-1], points[1:])]


def _division_points(fn: str, n: int, indices_or_sections: Any, equal: bool) -> list[int]:
    if isinstance(indices_or_sections, Tracer):
        raise bad_argument(fn, "indices_or_sections must be static (the pieces' shapes depend on it)")
    if isinstance(indices_or_sections, (Sequence, np.ndarray)):
        return [0, *(static_int(fn, "indices_or_sections", i) for i in indices_or_sections), n]
    k = static_int(fn, "indices_or_sections", indices_or_sections)
    if k <= 0:
        raise bad_argument(fn, f"the number of sections must be larger than 0, got {k}", ShapeError)
    if equal and n % k:
        raise bad_argument(fn, f"an axis of size {n} does not split into {k} equal sections; use array_split",
                           ShapeError)
    each, extra = divmod(n, k)
    return [0, *np.cumsum([each + 1] * extra + [each] * (k - extra)).tolist()]


def _split(fn: str, ary: ArrayLike, indices_or_sections: Any, axis: int, equal: bool) -> list[Any]:
    o = as_operand(ary, "ary")
    ax = normalize_axis(fn, axis, len(o.shape))
    return _split_at(fn, operand_value(o), _division_points(fn, o.shape[ax], indices_or_sections, equal), ax)


@numpy_counterpart
def array_split(ary: ArrayLike, indices_or_sections: Any, axis: int = 0) -> list[Any]:
    """``ary`` split along ``axis`` into k nearly equal pieces (the first n % k one longer) or
    at the given indices, as ``np.array_split``."""
    return _split("array_split", ary, indices_or_sections, axis, equal=False)


def _split_dims(fn: str, ary: ArrayLike, least: int) -> int:
    n = ndim(ary)
    if n < least:
        raise bad_argument(fn, f"ary must have at least {least} dimension{'s' if least > 1 else ''}, "
                           f"got shape {list(shape(ary))}", ShapeError)
    return n


@numpy_counterpart
def hsplit(ary: ArrayLike, indices_or_sections: Any) -> list[Any]:
    """``ary`` split column-wise (axis 1, or 0 for 1-D), into equal sections or at indices, as ``np.hsplit``."""
    n = _split_dims("hsplit", ary, 1)
    return _split("hsplit", ary, indices_or_sections, 1 if n > 1 else 0, equal=True)


@numpy_counterpart
def vsplit(ary: ArrayLike, indices_or_sections: Any) -> list[Any]:
    """``ary`` split row-wise (axis 0; at least 2-D), as ``np.vsplit``."""
    _split_dims("vsplit", ary, 2)
    return _split("vsplit", ary, indices_or_sections, 0, equal=True)


@numpy_counterpart
def dsplit(ary: ArrayLike, indices_or_sections: Any) -> list[Any]:
    """``ary`` split depth-wise (axis 2; at least 3-D), as ``np.dsplit``."""
    _split_dims("dsplit", ary, 3)
    return _split("dsplit", ary, indices_or_sections, 2, equal=True)


class AxisConcatenator:
    """``fj.r_[...]`` and ``fj.c_[...]``: slices, scalars and arrays (traced ones too) joined
    along an axis, as NumPy's index objects; ``start:stop:step`` is an arange, ``start:stop:nj``
    (a complex step) a linspace of n points, and a leading string ``'axis[,ndmin[,trans1d]]'``
    sets the axis, the least rank and where a 1-D item's axis goes. Matrix directives ('r',
    'c') are not supported."""

    def __init__(self, axis: int = 0, ndmin: int = 1, trans1d: int = -1, name: str = "r_"):
        self.axis, self.ndmin, self.trans1d, self.name = axis, ndmin, trans1d, name

    def __getitem__(self, key: Any) -> Any:
        items = key if isinstance(key, tuple) else (key,)
        axis, ndmin, trans1d = self.axis, self.ndmin, self.trans1d
        if items and isinstance(items[0], str):
            try:
                vec = [int(x) for x in items[0].split(",")]
            except ValueError:
                raise bad_argument(self.name, f"directive {items[0]!r} is not supported: give 'axis[,ndmin[,trans1d]]' "
                                   "as integers (matrix directives 'r' and 'c' are NumPy's np.matrix)") from None
            axis, ndmin, trans1d = (vec + [ndmin, trans1d][len(vec) - 1:])[:3]
            items = items[1:]
        objs: list[Operand] = []
        for k, item in enumerate(items):
            if isinstance(item, builtins.slice):
                start = 0 if item.start is None else item.start
                step = 1 if item.step is None else item.step
                if isinstance(step, (complex, np.complexfloating)):
                    seq = np.linspace(start, item.stop, num=int(builtins.abs(step)))
                else:
                    seq = np.arange(start, item.stop, step)
                o = Operand(None, seq, False)
                if ndmin > 1:
                    o = as_operand(reshape(seq, (1,) * (ndmin - 1) + seq.shape))
                    if trans1d != -1:
                        o = as_operand(swapaxes(operand_value(o), -1, trans1d))
            elif isinstance(item, str):
                raise bad_argument(self.name, f"a string ({item!r}) may only come first, as the directive")
            else:
                o = as_operand(item, f"{self.name}[{k}]")
                nd = len(o.shape)
                if nd < ndmin:
                    v = reshape(operand_value(o), (1,) * (ndmin - nd) + o.shape)
                    if trans1d != -1 and nd:
                        # NumPy's rule: the item's own axes move to position trans1d.
                        k2, k1 = ndmin - nd, trans1d + (ndmin - nd + 1 if trans1d < 0 else 0)
                        order = list(range(ndmin))
                        v = transpose(v, order[:k1] + order[k2:] + order[k1:k2])
                    o = _keep_weak(v, o.weak)
            objs.append(o)
        if not objs:
            raise bad_argument(self.name, "needs at least one slice, scalar or array to join", ShapeError)
        d = promote(*objs)
        parts = [operand_value(strong(cast(o, d))) for o in objs]
        return concatenate(parts, axis=axis)

    def __len__(self) -> int:
        return 0


def _keep_weak(v: Any, weak: bool) -> Operand:
    # A Python scalar stays weak through the reshape, so it promotes as NumPy's r_ lets it.
    o = as_operand(v)
    if o.tracer is not None:
        return Operand(Tracer(o.tracer.value, o.tracer.trace, weak), None, weak)
    return Operand(None, o.array, weak)


r_ = AxisConcatenator(0, name="r_")
c_ = AxisConcatenator(-1, ndmin=2, trans1d=0, name="c_")


@numpy_counterpart
def unstack(x: ArrayLike, /, *, axis: int = 0) -> tuple[Any, ...]:
    """The slices of ``x`` along ``axis``, as a tuple of arrays of one dimension fewer."""
    o = as_operand(x, "x")
    if not -len(o.shape) <= axis < len(o.shape):
        raise AxisError(f"unstack: axis {axis} is out of range for rank {len(o.shape)} (at {user_location()})")
    v = moveaxis(operand_value(o), axis, 0)
    return tuple(v[i] for i in range(o.shape[axis]))


@numpy_counterpart
def row_stack(tup: Sequence[ArrayLike], *, dtype: Any = None, casting: str = "same_kind") -> Any:
    """``vstack`` under NumPy's older name."""
    return vstack(tup, dtype=dtype, casting=casting)
