"""Truth tests beyond the elementwise comparisons: whole-array equality (``array_equal``,
``array_equiv``), membership (``isin``) and the signed infinity tests (``isposinf``,
``isneginf``).

Whole-array tests give a 0-d bool array, as ``allclose`` does (traced inside a function;
``bool()`` of it outside one); arrays whose static shapes cannot match give NumPy's False at
once."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from flowjit.ir.errors import FlowjitTypeError
from flowjit.tracer.core import user_location
from flowjit.tracer.numpy.counterparts import numpy_counterpart
from flowjit.tracer.numpy.creation import full
from flowjit.tracer.numpy.indexing import take
from flowjit.tracer.numpy.layout import expand_dims, ravel, reshape
from flowjit.tracer.numpy.operands import ArrayLike, as_operand, bad_argument, cast, operand_value, promote
from flowjit.tracer.numpy.reductions import all, any
from flowjit.tracer.numpy.sorting_searching import searchsorted, sort
from flowjit.tracer.numpy.ufuncs import (
    equal,
    isinf,
    isnan,
    logical_and,
    logical_not,
    logical_or,
    minimum,
    signbit,
)

__all__: list[str] = [
    "array_equal", "array_equiv", "isin", "isneginf", "isposinf",
]


def _same(a: Any, b: Any, equal_nan: bool) -> Any:
    eq = equal(a, b)
    if equal_nan and (as_operand(a).dtype.is_inexact or as_operand(b).dtype.is_inexact):
        eq = logical_or(eq, logical_and(isnan(a), isnan(b)))
    return all(eq)


@numpy_counterpart
def array_equal(a1: ArrayLike, a2: ArrayLike, equal_nan: bool = False) -> Any:
    """Whether a1 and a2 have the same shape and elements, as ``np.array_equal`` (NaN equal to
    NaN with ``equal_nan=True``): a 0-d bool array, or False at once for different shapes."""
    x, y = as_operand(a1, "a1"), as_operand(a2, "a2")
    if x.shape != y.shape:
        return np.False_
    return _same(operand_value(x), operand_value(y), equal_nan)


@numpy_counterpart
def array_equiv(a1: ArrayLike, a2: ArrayLike) -> Any:
    """Whether a1 and a2 are equal after broadcasting to one shape, as ``np.array_equiv``: a
    0-d bool array, or False at once for shapes that do not broadcast."""
    x, y = as_operand(a1, "a1"), as_operand(a2, "a2")
    try:
        np.broadcast_shapes(x.shape, y.shape)
    except ValueError:
        return np.False_
    return _same(operand_value(x), operand_value(y), False)


# Past this many pairs (element.size * test_elements.size), sorting the test elements and
# binary-searching each element costs less than comparing every pair in one kernel.
_COMPARE_ALL_LIMIT = 1 << 16


@numpy_counterpart
def isin(element: ArrayLike, test_elements: ArrayLike, assume_unique: bool = False, invert: bool = False, *,
         kind: str | None = None) -> Any:
    """Whether each element of ``element`` is in ``test_elements`` (flattened; either may be
    traced), as ``np.isin``: a bool array of element's shape, negated with ``invert=True``.
    Values compare after promotion to one dtype; NaN is in nothing. Small inputs compare every
    pair; large ones sort the test elements and binary-search them (``kind``: 'sort' forces
    that, 'table' is refused, as JAX has no table either)."""
    if kind not in (None, "sort", "table"):
        raise bad_argument("isin", f"kind={kind!r}; allowed None or 'sort'")
    if kind == "table":
        raise FlowjitTypeError(f"isin: kind='table' builds a table over the range of the values, which a traced "
                               f"program does not know; use kind=None or 'sort' (at {user_location()})")
    e, t = as_operand(element, "element"), as_operand(test_elements, "test_elements")
    d = promote(e, t)
    ev, tv = operand_value(cast(e, d)), ravel(operand_value(cast(t, d)))
    n_e, n_t = math.prod(e.shape), math.prod(t.shape)
    if n_e == 0 or n_t == 0:
        return full(e.shape, bool(invert), bool)
    if kind is None and n_e * n_t <= _COMPARE_ALL_LIMIT:
        found = any(equal(expand_dims(ev, -1), tv), axis=-1)
    else:
        st = sort(tv)
        at = minimum(searchsorted(st, ravel(ev)), n_t - 1)
        found = reshape(equal(take(st, at), ravel(ev)), e.shape)
    return logical_not(found) if invert else found


def _infinity(fname: str, x: ArrayLike, negative: bool) -> Any:
    o = as_operand(x, "x")
    if o.dtype.is_complex:
        raise bad_argument(fname, "complex numbers have no sign of infinity (NumPy refuses them); test their real "
                           "and imaginary parts")
    v = operand_value(o)
    sign = signbit(v)
    return logical_and(isinf(v), sign if negative else logical_not(sign))


@numpy_counterpart
def isposinf(x: ArrayLike) -> Any:
    """Elementwise, whether x is +inf, as ``np.isposinf`` (all False for ints and bools)."""
    return _infinity("isposinf", x, False)


@numpy_counterpart
def isneginf(x: ArrayLike) -> Any:
    """Elementwise, whether x is -inf, as ``np.isneginf`` (all False for ints and bools)."""
    return _infinity("isneginf", x, True)
