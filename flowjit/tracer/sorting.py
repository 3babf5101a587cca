"""Sorting and searching: ``sort``, ``argsort``, ``searchsorted``, ``partition``, ``unique``
and ``nonzero`` (where shapes are static).

``argsort`` and ``sort`` bind the registry's primitives of those names (NumPy's sorts, opaque);
sort's gradient scatters each element's cotangent back to where the element came from, through
argsort. argsort is stable unless asked otherwise (the array API standard's ``stable=True``):
equal elements keep their order, ascending or descending.
The ``unique`` family's result sizes depend on the values, which a traced program does not
know: on concrete arrays they are NumPy's; on traced ones they take JAX's ``size=K`` (the first
K distinct values, padded with ``fill_value``), and without it an error says so; ``nonzero``
likewise (JAX's ``size=``: the first K indices).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from flowjit.ir.errors import FlowjitTypeError, ShapeError
from flowjit.tracer import array_api as xp
from flowjit.tracer.array_api import ArrayLike, Operand, _op, _value, numpy_counterpart
from flowjit.tracer.core import bind, current_trace, user_location

__all__: list[str] = [
    "argpartition", "argsort", "nonzero", "partition", "searchsorted", "sort", "unique", "unique_all",
    "unique_counts", "unique_inverse", "unique_values",
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
    o = _op(a, "a")
    if axis is None:
        return _op(xp.ravel(_value(o))), 0
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
    return sort(_value(o), ax)


def argpartition(a: ArrayLike, kth: Any, axis: int | None = -1, kind: str = "introselect",
                 order: Any = None) -> Any:
    """Indices that ``partition`` ``a`` (see ``partition``: a full stable argsort)."""
    o, ax = _sort_operand("argpartition", a, axis, None, order, None, False)
    _check_kth("argpartition", o, ax, kth)
    return argsort(_value(o), ax)


# Past this many comparisons (a.size * v.size), a binary search (log2 a.size gathers of v's
# size) costs less than comparing every v with every element of a (one fused kernel).
_COMPARE_ALL_LIMIT = 1 << 16


def _goes_before(a: Any, v: Any, side: str, floats: bool) -> Any:
    """Whether element a sorts before a v inserted on ``side`` (NaN last, as NumPy sorts it)."""
    before = xp.less(a, v) if side == "left" else xp.less_equal(a, v)
    if not floats:
        return before
    nan_v = xp.isnan(v)
    return xp.logical_or(before, nan_v if side == "right" else xp.logical_and(nan_v, xp.logical_not(xp.isnan(a))))


def searchsorted(a: ArrayLike, v: ArrayLike, side: str = "left", sorter: ArrayLike = None) -> Any:
    """Where each element of ``v`` would go in the sorted 1-D ``a`` to keep it sorted: the first
    such index (``side='left'``) or the last (``'right'``); int64 of v's shape. NaN sorts last,
    as in NumPy. Small inputs compare every pair in one kernel; large ones binary-search."""
    if side not in ("left", "right"):
        raise FlowjitTypeError(f"searchsorted: side={side!r}; allowed 'left' or 'right' (at {user_location()})")
    ao, vo = _op(a, "a"), _op(v, "v")
    if len(ao.shape) != 1:
        raise ShapeError(f"a must be 1-D, got shape {list(ao.shape)}", op="searchsorted", loc=user_location())
    n = ao.shape[0]
    if n == 0:
        return xp.zeros(vo.shape, np.int64)
    av = _value(ao) if sorter is None else xp.take(_value(ao), sorter)
    floats = xp._promote(ao, vo).is_float
    if n * max(1, int(np.prod(vo.shape))) <= _COMPARE_ALL_LIMIT:
        before = _goes_before(av, xp.expand_dims(_value(vo), -1), side, floats)
        return xp.sum(xp.astype(before, np.int64), axis=-1)
    lo, hi = xp.zeros(vo.shape, np.int64), xp.full(vo.shape, n, np.int64)
    for _ in range(n.bit_length()):  # ceil(log2(n + 1)) halvings of [lo, hi)
        mid = xp.floor_divide(xp.add(lo, hi), 2)
        right = xp.logical_and(_goes_before(xp.take(av, xp.minimum(mid, n - 1)), _value(vo), side, floats),
                               xp.less(mid, hi))
        lo, hi = xp.where(right, xp.add(mid, 1), lo), xp.where(right, hi, mid)
    return lo


# ---- unique: sizes that depend on the data, static with size= ------------------------------------------------------


class UniqueAllResult(NamedTuple):
    """The array API's ``unique_all`` result."""

    values: Any
    indices: Any
    inverse_indices: Any
    counts: Any


class UniqueCountsResult(NamedTuple):
    """The array API's ``unique_counts`` result."""

    values: Any
    counts: Any


class UniqueInverseResult(NamedTuple):
    """The array API's ``unique_inverse`` result."""

    values: Any
    inverse_indices: Any


def _concrete(fname: str, x: ArrayLike) -> np.ndarray | None:
    """x as a NumPy array when it is concrete (no trace running); None when traced."""
    o = _op(x, "x")
    if o.tracer is not None or current_trace() is not None:
        return None
    return np.asarray(o.array)


def _no_size(fname: str, x: ArrayLike) -> FlowjitTypeError:
    return FlowjitTypeError(
        f"{fname} on a traced array ({_op(x, 'x').aval}) at {user_location()}: the number of distinct values "
        "depends on the data, and flowjit's arrays have shapes fixed when tracing. Pass size=K (as JAX's "
        "unique): the first K distinct values, the rest filled with fill_value; or call it outside the traced "
        "function")


def _check_size(fname: str, size: Any) -> None:
    if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 1:
        raise FlowjitTypeError(f"{fname}: size={size!r} must be a positive int (at {user_location()})")


class _Runs(NamedTuple):
    values: Any   # [size]: the distinct values ascending, fill_value past the last
    index: Any    # [size]: the first position of each in x flattened
    inverse: Any  # x.shape: the slot of each element of x
    counts: Any   # [size]: how many elements each has (0 past the last)


def _runs(x: ArrayLike, size: int, fill_value: Any) -> _Runs:
    """The first ``size`` distinct values of x (NaNs as one, as NumPy's equal_nan) with static
    shapes: sort, mark where a run of equal values starts, and scatter each run to its slot
    (slot ``size``, sliced off, takes those past the first ``size``)."""
    o = _op(x, "x")
    n = int(np.prod(o.shape))
    if n == 0:
        raise ShapeError(f"x of shape {list(o.shape)} is empty: there is no value to fill the {size} slots with",
                         op="unique", loc=user_location())
    flat = xp.ravel(_value(o))
    perm = bind("argsort", [_op(flat)], {"axis": 0, "descending": False, "stable": True})
    sv = xp.take(flat, perm)
    differs = xp.not_equal(xp.take(sv, np.arange(1, n)), xp.take(sv, np.arange(n - 1)))
    if o.dtype.is_float:
        both_nan = xp.logical_and(xp.isnan(xp.take(sv, np.arange(1, n))), xp.isnan(xp.take(sv, np.arange(n - 1))))
        differs = xp.logical_and(differs, xp.logical_not(both_nan))
    first = xp.concatenate([np.ones(1, bool), differs])
    run = xp.subtract(xp.cumsum(xp.astype(first, np.int64)), 1)
    slot = xp.minimum(run, size)

    def per_slot(updates: Any, at: Any) -> Any:
        total = xp.scatter_add(xp.zeros(size + 1, np.int64), at, updates)
        return xp.take(total, np.arange(size))

    first_pos = per_slot(xp.where(first, np.arange(n), 0), xp.where(first, slot, size))
    counts = per_slot(np.ones(n, np.int64), slot)
    fill = xp.take(sv, 0) if fill_value is None else xp.astype(fill_value, o.dtype)
    values = xp.where(xp.greater(counts, 0), xp.take(sv, first_pos), fill)
    inverse = xp.reshape(xp.scatter_add(xp.zeros(n, np.int64), perm, run), o.shape)
    return _Runs(values, xp.take(perm, first_pos), inverse, counts)


def unique(ar: ArrayLike, return_index: bool = False, return_inverse: bool = False, return_counts: bool = False,
           axis: int | None = None, *, equal_nan: bool = True, sorted: bool = True,  # noqa: A002
           size: int | None = None, fill_value: Any = None) -> Any:
    """``np.unique`` (x flattened; ``axis`` and ``equal_nan=False`` only on concrete arrays). On a
    traced array it needs ``size=K`` (JAX's): the first K distinct values ascending, slots past
    the last distinct value filled with ``fill_value`` (default: the smallest value), count 0."""
    arr = _concrete("unique", ar)
    if size is None:
        if arr is None:
            raise _no_size("unique", ar)
        return np.unique(arr, return_index, return_inverse, return_counts, axis, equal_nan=equal_nan)
    _check_size("unique", size)
    if axis is not None or not equal_nan:
        raise FlowjitTypeError(f"unique(..., size=): axis={axis!r} and equal_nan={equal_nan!r} are not supported "
                               f"with size; allowed axis=None, equal_nan=True (at {user_location()})")
    r = _runs(ar, size, fill_value)
    extra = [v for v, on in ((r.index, return_index), (r.inverse, return_inverse), (r.counts, return_counts)) if on]
    return (r.values, *extra) if extra else r.values


def unique_values(x: ArrayLike, *, size: int | None = None, fill_value: Any = None) -> Any:
    """The array API's ``unique_values``; a traced x needs ``size=`` (see ``unique``)."""
    return _unique_family("unique_values", x, size, fill_value, lambda r: r.values,
                          lambda a: np.unique(a))


def unique_counts(x: ArrayLike, *, size: int | None = None, fill_value: Any = None) -> UniqueCountsResult:
    """The array API's ``unique_counts``; a traced x needs ``size=`` (see ``unique``)."""
    return _unique_family("unique_counts", x, size, fill_value, lambda r: UniqueCountsResult(r.values, r.counts),
                          lambda a: UniqueCountsResult(*np.unique(a, return_counts=True)))


def unique_inverse(x: ArrayLike, *, size: int | None = None, fill_value: Any = None) -> UniqueInverseResult:
    """The array API's ``unique_inverse`` (inverse_indices has x's shape); a traced x needs
    ``size=`` (see ``unique``)."""
    def numpy(a: np.ndarray) -> UniqueInverseResult:
        values, inverse = np.unique(a, return_inverse=True)
        return UniqueInverseResult(values, inverse.reshape(a.shape))
    return _unique_family("unique_inverse", x, size, fill_value,
                          lambda r: UniqueInverseResult(r.values, r.inverse), numpy)


def unique_all(x: ArrayLike, *, size: int | None = None, fill_value: Any = None) -> UniqueAllResult:
    """The array API's ``unique_all``; a traced x needs ``size=`` (see ``unique``)."""
    def numpy(a: np.ndarray) -> UniqueAllResult:
        values, index, inverse, counts = np.unique(a, return_index=True, return_inverse=True, return_counts=True)
        return UniqueAllResult(values, index, inverse.reshape(a.shape), counts)
    return _unique_family("unique_all", x, size, fill_value,
                          lambda r: UniqueAllResult(r.values, r.index, r.inverse, r.counts), numpy)


def _unique_family(fname: str, x: ArrayLike, size: Any, fill_value: Any, pick: Any, numpy: Any) -> Any:
    arr = _concrete(fname, x)
    if size is None:
        if arr is None:
            raise _no_size(fname, x)
        return numpy(arr)
    _check_size(fname, size)
    return pick(_runs(x, size, fill_value))


# ---- nonzero: a size that depends on the data, static with size= ------------------------------------------------


def nonzero(x: ArrayLike, /, *, size: int | None = None, fill_value: Any = None) -> tuple[Any, ...]:
    """The indices of x's non-zero elements, one int64 array per axis, in row-major order (the
    standard's and NumPy's ``nonzero``; NaN is non-zero). On a concrete array it is NumPy's. How
    many there are depends on the values, which a traced program does not know: traced, it
    takes JAX's ``size=K`` (the first K indices, slots past the last filled with ``fill_value``,
    one int or one per axis, default 0). A 0-d x raises, as in NumPy and the standard."""
    o = _op(x, "x")
    if not o.shape:
        raise ShapeError(f"x is 0-d ({o.aval}): nonzero needs at least one axis; use fj.atleast_1d(x) first",
                         op="nonzero", loc=user_location())
    arr = _concrete("nonzero", x)
    if size is None:
        if arr is None:
            raise FlowjitTypeError(
                f"nonzero on a traced array ({o.aval}) at {user_location()}: how many elements are non-zero, and "
                "so the output shape, depends on the values, and flowjit's arrays have shapes fixed when tracing. "
                "Pass size=K (as JAX's nonzero): the first K indices, the rest filled with fill_value (default 0), "
                "e.g. fj.nonzero(x, size=K, fill_value=-1); or call it outside the traced function")
        return tuple(i.astype(np.int64) for i in np.nonzero(arr))
    _check_size("nonzero", size)
    fills = fill_value if isinstance(fill_value, (tuple, list)) else (0 if fill_value is None else fill_value,) * len(
        o.shape)
    if len(fills) != len(o.shape):
        raise FlowjitTypeError(f"nonzero: fill_value={fill_value!r} has {len(fills)} values for a {len(o.shape)}-D "
                               f"x; allowed: 1 value, or one per axis ({len(o.shape)}) (at {user_location()})")
    n = int(np.prod(o.shape))
    if n == 0:
        return tuple(xp.full((size,), f, np.int64) for f in fills)
    mask = xp.ravel(xp.not_equal(_value(o), False if o.dtype.is_bool else 0))
    # Each non-zero element's place among them is the running count; slot `size` (sliced off)
    # takes those past the first `size`, and the zeros.
    place = xp.subtract(xp.cumsum(xp.astype(mask, np.int64)), 1)
    slot = xp.where(mask, xp.minimum(place, size), size)
    flat = xp.take(xp.scatter_add(xp.zeros(size + 1, np.int64), slot, np.arange(n)), np.arange(size))
    found = xp.less(np.arange(size), xp.sum(xp.astype(mask, np.int64)))
    strides = np.cumprod((1, *o.shape[:0:-1]))[::-1]
    return tuple(xp.where(found, xp.remainder(xp.floor_divide(flat, int(st)), dim), xp.astype(f, np.int64))
                 for st, dim, f in zip(strides, o.shape, fills, strict=True))


for _name in __all__:
    numpy_counterpart(globals()[_name])
