"""Sorting and searching: ``sort``, ``argsort``, ``top_k``, ``partition``, ``argpartition``,
``searchsorted``, ``nonzero`` and ``where``.

``argsort`` and ``sort`` bind the registry's primitives of those names (opaque; compiled, a
native merge sort each; ``top_k`` is a descending argsort's first positions and a gather);
sort's gradient scatters each element's cotangent back to where the element came from, through
argsort. argsort is stable unless asked otherwise (the array API standard's ``stable=True``):
equal elements keep their order, ascending or descending. ``nonzero``'s result size depends on
the values, which a traced program does not know: on concrete arrays it is NumPy's; on traced
ones it takes JAX's ``size=K`` (the first K indices), and without it an error says so.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from flowjit.ir.errors import FlowjitTypeError, ShapeError
from flowjit.tracer.core import Operand, bind, user_location
from flowjit.tracer.numpy import ufuncs
from flowjit.tracer.numpy.conversion import astype
from flowjit.tracer.numpy.counterparts import numpy_counterpart
from flowjit.tracer.numpy.creation import full, zeros
from flowjit.tracer.numpy.indexing import scatter_add, take, take_along_axis
from flowjit.tracer.numpy.layout import expand_dims, ravel
from flowjit.tracer.numpy.operands import (
    ArrayLike,
    as_operand,
    check_size,
    concrete_array,
    needs_size,
    operand_value,
    promote,
)
from flowjit.tracer.numpy.reductions import cumsum, sum
from flowjit.tracer.numpy.ufuncs import (
    add,
    floor_divide,
    isnan,
    less,
    less_equal,
    logical_and,
    logical_not,
    logical_or,
    minimum,
    not_equal,
    remainder,
    subtract,
)

__all__: list[str] = [
    "argpartition", "argsort", "nonzero", "partition", "searchsorted", "sort", "top_k", "where",
]


_KINDS = (None, "quicksort", "mergesort", "heapsort", "stable")


def _sort_operand(fname: str, a: ArrayLike, axis: Any, kind: Any, order: Any, stable: Any,
                  descending: Any) -> tuple[Operand, int]:
    """The operand to sort and the normalized axis (axis None: a flattened), after checking
    the keywords against what NumPy and the standard allow."""
    if kind not in _KINDS:
        raise FlowjitTypeError(f"{fname}: kind={kind!r}; allowed: {', '.join(map(repr, _KINDS))} "
                               f"(flowjit's sort is always stable) (at {user_location()})")
    if order is not None:
        raise FlowjitTypeError(f"{fname}: order={order!r}: flowjit has no structured arrays; sort by a key "
                               f"with argsort instead (at {user_location()})")
    if stable not in (None, True, False) or not isinstance(descending, (bool, np.bool_)):
        raise FlowjitTypeError(f"{fname}: stable and descending must be True or False, got stable={stable!r}, "
                               f"descending={descending!r} (at {user_location()})")
    o = as_operand(a, "a")
    if axis is None:
        return as_operand(ravel(operand_value(o))), 0
    if not isinstance(axis, (int, np.integer)) or isinstance(axis, bool):
        raise FlowjitTypeError(f"{fname}: axis={axis!r} must be an int or None (at {user_location()})")
    n = len(o.shape)
    if not -n <= axis < n:
        raise ShapeError(f"axis {axis} is out of range for an array of shape {list(o.shape)}"
                         + (" (a 0-d array has nothing to sort; pass axis=None)" if n == 0 else ""),
                         op=fname, loc=user_location())
    return o, int(axis) % n


def argsort(a: ArrayLike, axis: int | None = -1, kind: str | None = None, order: Any = None, *,
            stable: bool | None = None, descending: bool = False) -> Any:
    """int64 indices that sort ``a`` along ``axis`` (flattened when None), stably unless
    ``stable=False`` or ``kind='quicksort'``/``'heapsort'`` (then NumPy's faster default sort):
    equal elements keep their order, in ``descending`` order too. NaN sorts last (first when
    descending)."""
    o, ax = _sort_operand("argsort", a, axis, kind, order, stable, descending)
    # Stable unless asked otherwise (the array API's default; NumPy's is kind='quicksort').
    unstable = stable is False or (stable is None and kind in ("quicksort", "heapsort"))
    return bind("argsort", [o], {"axis": ax, "descending": bool(descending), "stable": not unstable})


def sort(a: ArrayLike, axis: int | None = -1, kind: str | None = None, order: Any = None, *,
         stable: bool | None = None, descending: bool = False) -> Any:
    """``a`` sorted along ``axis`` (flattened when None), ascending or ``descending``; the
    gradient sends each cotangent back through the sorting permutation."""
    o, ax = _sort_operand("sort", a, axis, kind, order, stable, descending)
    return bind("sort", [o], {"axis": ax, "descending": bool(descending)})


def _check_kth(fname: str, o: Operand, ax: int, kth: Any) -> None:
    ks = [kth] if isinstance(kth, (int, np.integer)) else kth
    n = o.shape[ax]
    if (isinstance(kth, bool) or not isinstance(ks, Sequence | np.ndarray)
            or not all(isinstance(k, (int, np.integer)) and -n <= k < n for k in ks)):
        raise FlowjitTypeError(f"{fname}: kth={kth!r} must be an int or ints in [-{n}, {n}) for axis {ax} of "
                               f"shape {list(o.shape)} (at {user_location()})")


def partition(a: ArrayLike, kth: Any, axis: int | None = -1, kind: str = "introselect", order: Any = None) -> Any:
    """``np.partition``: the element at each ``kth`` position is where a sort puts it, smaller
    ones before, larger after. flowjit sorts fully, which meets that contract (NumPy leaves the
    order within each side unspecified)."""
    o, ax = _sort_operand("partition", a, axis, None, order, None, False)
    _check_kth("partition", o, ax, kth)
    return sort(operand_value(o), ax)


def argpartition(a: ArrayLike, kth: Any, axis: int | None = -1, kind: str = "introselect",
                 order: Any = None) -> Any:
    """Indices that ``partition`` ``a`` (see ``partition``: a full stable argsort)."""
    o, ax = _sort_operand("argpartition", a, axis, None, order, None, False)
    _check_kth("argpartition", o, ax, kth)
    return argsort(operand_value(o), ax)


def top_k(a: ArrayLike, k: int) -> tuple[Any, Any]:
    """The ``k`` largest elements of ``a`` along its last axis, largest first, and their int64
    positions, as ``jax.lax.top_k`` (and ``torch.topk``): equal elements in the order of
    their positions, NaN counted the largest. The first ``k`` positions of a stable
    descending argsort, then those elements; its gradient reaches the chosen elements."""
    o, ax = _sort_operand("top_k", a, -1, None, None, None, False)
    n = o.shape[ax]
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 0 <= k <= n:
        raise FlowjitTypeError(f"top_k: k={k!r} must be an int in [0, {n}] for the last axis of shape "
                               f"{list(o.shape)} (at {user_location()})")
    x = operand_value(o)
    if k == 0 or math.prod(o.shape) == 0:  # nothing to pick (a gather from an empty axis has no element)
        shape = (*o.shape[:-1], int(k))
        return full(shape, 0, o.dtype), full(shape, 0, np.int64)
    positions = argsort(x, -1, descending=True)[..., :int(k)]
    return take_along_axis(x, positions, -1), positions


# Past this many comparisons (a.size * v.size), a binary search (log2 a.size gathers of v's
# size) costs less than comparing every v with every element of a (one fused kernel).
_COMPARE_ALL_LIMIT = 1 << 16


def _goes_before(a: Any, v: Any, side: str, floats: bool) -> Any:
    """Whether element a sorts before a v inserted on ``side`` (NaN last, as NumPy sorts it)."""
    before = less(a, v) if side == "left" else less_equal(a, v)
    if not floats:
        return before
    nan_v = isnan(v)
    return logical_or(before, nan_v if side == "right" else logical_and(nan_v, logical_not(isnan(a))))


def searchsorted(a: ArrayLike, v: ArrayLike, side: str = "left", sorter: ArrayLike = None) -> Any:
    """Where each element of ``v`` would go in the sorted 1-D ``a`` to keep it sorted: the first
    such index (``side='left'``) or the last (``'right'``); int64 of v's shape. NaN sorts last,
    as in NumPy. Small inputs compare every pair in one kernel; large ones binary-search."""
    if side not in ("left", "right"):
        raise FlowjitTypeError(f"searchsorted: side={side!r}; allowed 'left' or 'right' (at {user_location()})")
    ao, vo = as_operand(a, "a"), as_operand(v, "v")
    if len(ao.shape) != 1:
        raise ShapeError(f"a must be 1-D, got shape {list(ao.shape)}", op="searchsorted", loc=user_location())
    n = ao.shape[0]
    if n == 0:
        return zeros(vo.shape, np.int64)
    av = operand_value(ao) if sorter is None else take(operand_value(ao), sorter)
    floats = promote(ao, vo).is_float
    if n * max(1, int(np.prod(vo.shape))) <= _COMPARE_ALL_LIMIT:
        before = _goes_before(av, expand_dims(operand_value(vo), -1), side, floats)
        return sum(astype(before, np.int64), axis=-1)
    lo, hi = zeros(vo.shape, np.int64), full(vo.shape, n, np.int64)
    for _ in range(n.bit_length()):  # ceil(log2(n + 1)) halvings of [lo, hi)
        mid = floor_divide(add(lo, hi), 2)
        right = logical_and(_goes_before(take(av, minimum(mid, n - 1)), operand_value(vo), side, floats),
                            less(mid, hi))
        lo, hi = where(right, add(mid, 1), lo), where(right, hi, mid)
    return lo


def nonzero(x: ArrayLike, /, *, size: int | None = None, fill_value: Any = None) -> tuple[Any, ...]:
    """The indices of x's non-zero elements, one int64 array per axis, in row-major order (the
    standard's and NumPy's ``nonzero``; NaN is non-zero). On a concrete array it is NumPy's. How
    many there are depends on the values, which a traced program does not know: traced, it
    takes JAX's ``size=K`` (the first K indices, slots past the last filled with ``fill_value``,
    one int or one per axis, default 0). A 0-d x raises, as in NumPy and the standard."""
    o = as_operand(x, "x")
    if not o.shape:
        raise ShapeError(f"x is 0-d ({o.aval}): nonzero needs at least one axis; use fj.atleast_1d(x) first",
                         op="nonzero", loc=user_location())
    arr = concrete_array("nonzero", x)
    if size is None:
        if arr is None:
            raise needs_size("nonzero", x, "how many elements are non-zero, and so the output shape,",
                             "fj.nonzero(x, size=K, fill_value=-1)")
        return tuple(i.astype(np.int64) for i in np.nonzero(arr))
    check_size("nonzero", size)
    fills = fill_value if isinstance(fill_value, (tuple, list)) else (0 if fill_value is None else fill_value,) * len(
        o.shape)
    if len(fills) != len(o.shape):
        raise FlowjitTypeError(f"nonzero: fill_value={fill_value!r} has {len(fills)} values for a {len(o.shape)}-D "
                               f"x; allowed: 1 value, or one per axis ({len(o.shape)}) (at {user_location()})")
    n = int(np.prod(o.shape))
    if n == 0:
        return tuple(full((size,), f, np.int64) for f in fills)
    mask = ravel(not_equal(operand_value(o), False if o.dtype.is_bool else 0))
    # Each non-zero element's place among them is the running count; slot `size` (sliced off)
    # takes those past the first `size`, and the zeros.
    place = subtract(cumsum(astype(mask, np.int64)), 1)
    slot = where(mask, minimum(place, size), size)
    flat = take(scatter_add(zeros(size + 1, np.int64), slot, np.arange(n)), np.arange(size))
    found = less(np.arange(size), sum(astype(mask, np.int64)))
    strides = np.cumprod((1, *o.shape[:0:-1]))[::-1]
    return tuple(where(found, remainder(floor_divide(flat, int(st)), dim), astype(f, np.int64))
                 for st, dim, f in zip(strides, o.shape, fills, strict=True))


def where(condition: ArrayLike, x: ArrayLike = None, y: ArrayLike = None) -> Any:
    """``x`` where ``condition`` holds, else ``y`` (broadcast); with neither, the indices
    where ``condition`` holds, ``fj.nonzero(condition)`` (as NumPy; a traced condition then
    needs ``fj.nonzero``'s ``size=``, the number of indices being data-dependent)."""
    if x is None and y is None:
        return nonzero(condition)
    if x is None or y is None:
        raise FlowjitTypeError("fj.where: give both x and y, or neither (then it is fj.nonzero(condition))")
    return ufuncs.where(condition, x, y)  # an array, as np.where gives


for _fn in (argpartition, argsort, nonzero, partition, searchsorted, sort):
    numpy_counterpart(_fn)
