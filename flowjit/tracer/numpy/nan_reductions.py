"""NaN-aware reductions, NumPy's ``nan*`` functions: ``nansum``, ``nanprod``, ``nanmean``,
``nanvar``, ``nanstd``, ``nanmax``, ``nanmin``, ``nanargmax``, ``nanargmin``, ``nancumsum`` and
``nancumprod``.

Each is its plain reduction with every NaN replaced by the operation's identity (0 for sums, 1
for products, -inf or +inf for maxima and minima) and, for means and variances, the count of the
non-NaN elements as divisor; ints and bools hold no NaN and reduce as the plain functions do.
A slice that is all NaN gives jax.numpy's results, with no warning: NaN for ``nanmax``,
``nanmin``, ``nanmean``, ``nanvar`` and ``nanstd`` (as NumPy, which also warns), 0 for
``nansum``, 1 for ``nanprod`` and -1 for ``nanargmax`` and ``nanargmin`` (where NumPy raises).
Gradients are 0 at the NaNs and the plain reduction's elsewhere, as JAX's."""

from __future__ import annotations

from typing import Any

import numpy as np

from flowjit.ir.dtypes import dtype as as_dtype
from flowjit.ir.dtypes import int64
from flowjit.tracer.numpy.conversion import astype
from flowjit.tracer.numpy.counterparts import numpy_counterpart
from flowjit.tracer.numpy.operands import ArrayLike, as_operand, bad_argument, operand_value, refuse_out
from flowjit.tracer.numpy.reductions import all, argmax, argmin, cumprod, cumsum, max, mean, min, prod, sum, var
from flowjit.tracer.numpy.ufuncs import (
    absolute,
    divide,
    isnan,
    less_equal,
    logical_not,
    not_equal,
    sqrt,
    square,
    subtract,
    where,
)

__all__: list[str] = [
    "nanargmax", "nanargmin", "nancumprod", "nancumsum", "nanmax", "nanmean", "nanmin", "nanprod", "nanstd", "nansum",
    "nanvar",
]


def _has_nan(x: ArrayLike) -> bool:
    """Whether x's dtype can hold a NaN (floats and complex numbers)."""
    return as_operand(x, "a").dtype.is_inexact


def _filled(x: ArrayLike, fill: Any) -> Any:
    """x with each NaN replaced by ``fill``."""
    v = operand_value(as_operand(x, "a"))
    return where(isnan(v), fill, v)


@numpy_counterpart
def nansum(a: ArrayLike, axis: Any = None, dtype: Any = None, out: None = None, keepdims: bool = False) -> Any:
    """Sum over ``axis`` (all axes when None) treating NaN as 0, as ``np.nansum``: an all-NaN
    slice sums to 0; ints and bools accumulate in int64, as ``sum``'s."""
    refuse_out("nansum", out)
    v = _filled(a, 0) if _has_nan(a) else a
    return sum(v, axis=axis, dtype=dtype, keepdims=keepdims)


@numpy_counterpart
def nanprod(a: ArrayLike, axis: Any = None, dtype: Any = None, out: None = None, keepdims: bool = False) -> Any:
    """Product over ``axis`` treating NaN as 1, as ``np.nanprod``: an all-NaN slice gives 1."""
    refuse_out("nanprod", out)
    v = _filled(a, 1) if _has_nan(a) else a
    return prod(v, axis=axis, dtype=dtype, keepdims=keepdims)


def _extremum(fname: str, reduce: Any, fill: float, a: ArrayLike, axis: Any, keepdims: bool) -> Any:
    o = as_operand(a, "a")
    if not o.dtype.is_float:
        if o.dtype.is_complex:
            raise bad_argument(fname, f"complex numbers are not ordered ({o.aval}); reduce their abs or real part")
        return reduce(operand_value(o), axis=axis, keepdims=keepdims)
    v = operand_value(o)
    nan = isnan(v)
    r = reduce(where(nan, fill, v), axis=axis, keepdims=keepdims)
    return where(all(nan, axis=axis, keepdims=keepdims), np.nan, r)


@numpy_counterpart
def nanmax(a: ArrayLike, axis: Any = None, out: None = None, keepdims: bool = False) -> Any:
    """Maximum over ``axis`` ignoring NaN, as ``np.nanmax``; an all-NaN slice gives NaN (as
    jax.numpy's, without NumPy's RuntimeWarning)."""
    refuse_out("nanmax", out)
    return _extremum("nanmax", max, -np.inf, a, axis, keepdims)


@numpy_counterpart
def nanmin(a: ArrayLike, axis: Any = None, out: None = None, keepdims: bool = False) -> Any:
    """Minimum over ``axis`` ignoring NaN, as ``np.nanmin``; an all-NaN slice gives NaN."""
    refuse_out("nanmin", out)
    return _extremum("nanmin", min, np.inf, a, axis, keepdims)


def _arg_extremum(fname: str, arg: Any, fill: float, a: ArrayLike, axis: int | None, keepdims: bool) -> Any:
    o = as_operand(a, "a")
    if not o.dtype.is_float:
        return arg(operand_value(o), axis=axis, keepdims=keepdims)
    v = operand_value(o)
    nan = isnan(v)
    r = arg(where(nan, fill, v), axis=axis, keepdims=keepdims)
    return where(all(nan, axis=axis, keepdims=keepdims), -1, r)


@numpy_counterpart
def nanargmax(a: ArrayLike, axis: int | None = None, out: None = None, *, keepdims: bool = False) -> Any:
    """int64 index of the maximum along ``axis`` (of the flattened array when None) ignoring
    NaN, as ``np.nanargmax``; an all-NaN slice gives -1, as jax.numpy's (NumPy raises)."""
    refuse_out("nanargmax", out)
    return _arg_extremum("nanargmax", argmax, -np.inf, a, axis, keepdims)


@numpy_counterpart
def nanargmin(a: ArrayLike, axis: int | None = None, out: None = None, *, keepdims: bool = False) -> Any:
    """int64 index of the minimum along ``axis`` ignoring NaN, as ``np.nanargmin``; an
    all-NaN slice gives -1, as jax.numpy's (NumPy raises)."""
    refuse_out("nanargmin", out)
    return _arg_extremum("nanargmin", argmin, np.inf, a, axis, keepdims)


@numpy_counterpart
def nancumsum(a: ArrayLike, axis: int | None = None, dtype: Any = None, out: None = None) -> Any:
    """Cumulative sum along ``axis`` (of the flattened array when None) treating NaN as 0, as
    ``np.nancumsum``: the running total carries on past a NaN."""
    refuse_out("nancumsum", out)
    return cumsum(_filled(a, 0) if _has_nan(a) else a, axis=axis, dtype=dtype)


@numpy_counterpart
def nancumprod(a: ArrayLike, axis: int | None = None, dtype: Any = None, out: None = None) -> Any:
    """Cumulative product along ``axis`` treating NaN as 1, as ``np.nancumprod``."""
    refuse_out("nancumprod", out)
    return cumprod(_filled(a, 1) if _has_nan(a) else a, axis=axis, dtype=dtype)


def _count(v: Any, axis: Any, keepdims: bool) -> Any:
    """How many elements of v are not NaN, over ``axis``, as int64."""
    return sum(astype(logical_not(isnan(v)), int64), axis=axis, keepdims=keepdims)


@numpy_counterpart
def nanmean(a: ArrayLike, axis: Any = None, dtype: Any = None, out: None = None, keepdims: bool = False) -> Any:
    """Mean over ``axis`` of the elements that are not NaN, as ``np.nanmean`` (the sum with
    NaN as 0 over their count); an all-NaN slice gives NaN. Ints and bools give ``mean``'s
    float64."""
    refuse_out("nanmean", out)
    o = as_operand(a, "a")
    if not o.dtype.is_inexact:
        return mean(operand_value(o), axis=axis, dtype=dtype, keepdims=keepdims)
    d = as_dtype(dtype) if dtype is not None else o.dtype
    v = astype(operand_value(o), d)
    total = sum(where(isnan(v), 0, v), axis=axis, keepdims=keepdims)
    return divide(total, astype(_count(v, axis, keepdims), d.real_dtype if d.is_complex else d))


@numpy_counterpart
def nanvar(a: ArrayLike, axis: Any = None, dtype: Any = None, out: None = None, ddof: int = 0,
           keepdims: bool = False, *, correction: float | None = None) -> Any:
    """Variance over ``axis`` of the elements that are not NaN, with ``ddof`` delta degrees of
    freedom (``correction``: the array API's name), as ``np.nanvar``: the mean of the squared
    deviations from ``nanmean`` over (count - ddof). A slice with no more than ``ddof``
    non-NaN elements (an all-NaN one) gives NaN. Ints and bools give ``var``'s float64."""
    refuse_out("nanvar", out)
    ddof = ddof if correction is None else correction
    o = as_operand(a, "a")
    if not o.dtype.is_inexact:
        return var(operand_value(o), axis=axis, dtype=dtype, ddof=ddof, keepdims=keepdims)
    d = as_dtype(dtype) if dtype is not None else o.dtype
    rd = d.real_dtype if d.is_complex else d
    v = astype(operand_value(o), d)
    nan = isnan(v)
    count = _count(v, axis, True)
    avg = divide(sum(where(nan, 0, v), axis=axis, keepdims=True), astype(count, rd))
    centered = where(nan, 0, subtract(v, avg))  # where before the square: no NaN reaches the gradient
    squares = square(absolute(centered)) if d.is_complex else square(centered)
    dof = subtract(_count(v, axis, keepdims), ddof)
    bad = less_equal(dof, 0)
    total = sum(squares, axis=axis, keepdims=keepdims)
    return where(bad, np.nan, divide(total, astype(where(bad, 1, dof), rd)))


@numpy_counterpart
def nanstd(a: ArrayLike, axis: Any = None, dtype: Any = None, out: None = None, ddof: int = 0,
           keepdims: bool = False, *, correction: float | None = None) -> Any:
    """Standard deviation over ``axis`` of the elements that are not NaN, as ``np.nanstd``:
    the square root of ``nanvar``. Where the variance is 0 the gradient is 0, as ``std``'s."""
    v = nanvar(a, axis=axis, dtype=dtype, out=out, ddof=ddof, keepdims=keepdims, correction=correction)
    nonzero = not_equal(v, 0)  # NaN too: its std stays NaN
    return where(nonzero, sqrt(where(nonzero, v, 1)), 0)


