"""The ``unique`` family (NumPy's ``unique``, the array API's ``unique_values``,
``unique_counts``, ``unique_inverse``, ``unique_all``). Their result sizes depend on the values,
which a traced program does not know: on concrete arrays they are NumPy's; on traced ones they
take JAX's ``size=K`` (the first K distinct values, padded with ``fill_value``), and without it
an error says so."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from flowjit.ir.errors import FlowjitTypeError, ShapeError
from flowjit.tracer.core import bind, user_location
from flowjit.tracer.numpy.conversion import astype
from flowjit.tracer.numpy.counterparts import numpy_counterpart
from flowjit.tracer.numpy.creation import zeros
from flowjit.tracer.numpy.indexing import scatter_add, take
from flowjit.tracer.numpy.layout import ravel, reshape
from flowjit.tracer.numpy.manipulation import concatenate
from flowjit.tracer.numpy.operands import (
    ArrayLike,
    as_operand,
    check_size,
    concrete_array,
    needs_size,
    operand_value,
)
from flowjit.tracer.numpy.reductions import cumsum
from flowjit.tracer.numpy.ufuncs import greater, isnan, logical_and, logical_not, minimum, not_equal, subtract, where

__all__: list[str] = [
    "unique", "unique_all", "unique_counts", "unique_inverse", "unique_values",
]


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


class _Runs(NamedTuple):
    values: Any   # [size]: the distinct values ascending, fill_value past the last
    index: Any    # [size]: the first position of each in x flattened
    inverse: Any  # x.shape: the slot of each element of x
    counts: Any   # [size]: how many elements each has (0 past the last)


def _runs(x: ArrayLike, size: int, fill_value: Any) -> _Runs:
    """The first ``size`` distinct values of x (NaNs as one, as NumPy's equal_nan) with static
    shapes: sort, mark where a run of equal values starts, and scatter each run to its slot
    (slot ``size``, sliced off, takes those past the first ``size``)."""
    o = as_operand(x, "x")
    n = int(np.prod(o.shape))
    if n == 0:
        raise ShapeError(f"x of shape {list(o.shape)} is empty: there is no value to fill the {size} slots with",
                         op="unique", loc=user_location())
    flat = ravel(operand_value(o))
    perm = bind("argsort", [as_operand(flat)], {"axis": 0, "descending": False, "stable": True})
    sv = take(flat, perm)
    differs = not_equal(take(sv, np.arange(1, n)), take(sv, np.arange(n - 1)))
    if o.dtype.is_float:
        both_nan = logical_and(isnan(take(sv, np.arange(1, n))), isnan(take(sv, np.arange(n - 1))))
        differs = logical_and(differs, logical_not(both_nan))
    first = concatenate([np.ones(1, bool), differs])
    run = subtract(cumsum(astype(first, np.int64)), 1)
    slot = minimum(run, size)

    def per_slot(updates: Any, at: Any) -> Any:
        total = scatter_add(zeros(size + 1, np.int64), at, updates)
        return take(total, np.arange(size))

    first_pos = per_slot(where(first, np.arange(n), 0), where(first, slot, size))
    counts = per_slot(np.ones(n, np.int64), slot)
    fill = take(sv, 0) if fill_value is None else astype(fill_value, o.dtype)
    values = where(greater(counts, 0), take(sv, first_pos), fill)
    inverse = reshape(scatter_add(zeros(n, np.int64), perm, run), o.shape)
    return _Runs(values, take(perm, first_pos), inverse, counts)


def unique(ar: ArrayLike, return_index: bool = False, return_inverse: bool = False, return_counts: bool = False,
           axis: int | None = None, *, equal_nan: bool = True, sorted: bool = True,  # noqa: A002
           size: int | None = None, fill_value: Any = None) -> Any:
    """``np.unique`` (x flattened; ``axis`` and ``equal_nan=False`` only on concrete arrays). On a
    traced array it needs ``size=K`` (JAX's): the first K distinct values ascending, slots past
    the last distinct value filled with ``fill_value`` (default: the smallest value), count 0."""
    arr = concrete_array("unique", ar)
    if size is None:
        if arr is None:
            raise needs_size("unique", ar, "the number of distinct values", "fj.unique(x, size=K)",
                             depends="the data")
        return np.unique(arr, return_index, return_inverse, return_counts, axis, equal_nan=equal_nan)
    check_size("unique", size)
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
    arr = concrete_array(fname, x)
    if size is None:
        if arr is None:
            raise needs_size(fname, x, "the number of distinct values", f"fj.{fname}(x, size=K)",
                             depends="the data")
        return numpy(arr)
    check_size(fname, size)
    return pick(_runs(x, size, fill_value))


for _fn in (unique, unique_all, unique_counts, unique_inverse, unique_values):
    numpy_counterpart(_fn)
