"""Reductions over axes and the accumulations along one: ``sum``, ``prod``, ``max``, ``min``,
``any``, ``all``, ``argmax``, ``argmin``, ``count_nonzero``, ``allclose``; ``mean``, ``var``, ``std``,
``average``, ``ptp``; ``cumsum``, ``cumprod`` and the array API's ``cumulative_sum`` and
``cumulative_prod``; and the differences ``diff`` and ``gradient``. Where NumPy widens a sum of
int32 or bool to int64, so do these."""

from __future__ import annotations

import builtins
import math
from typing import Any

import numpy as np

from flowjit.ir.dtypes import DType, float16, float32, float64, int64, uint64
from flowjit.ir.dtypes import dtype as as_dtype
from flowjit.ir.errors import FlowjitTypeError, ShapeError
from flowjit.tracer.control_flow import scan
from flowjit.tracer.core import Operand, bind, user_location
from flowjit.tracer.numpy.conversion import astype
from flowjit.tracer.numpy.counterparts import numpy_counterpart
from flowjit.tracer.numpy.creation import full
from flowjit.tracer.numpy.indexing import index_along
from flowjit.tracer.numpy.layout import broadcast_to, moveaxis, ndim, ravel, reshape, shape, transpose
from flowjit.tracer.numpy.manipulation import concatenate
from flowjit.tracer.numpy.operands import (
    ArrayLike,
    as_operand,
    bad_argument,
    cast,
    normalize_axes,
    normalize_axis,
    operand_value,
    promote,
    static_int,
    strong,
    to_bool,
)
from flowjit.tracer.numpy.ufuncs import (
    absolute,
    add,
    divide,
    isclose,
    maximum,
    multiply,
    negative,
    not_equal,
    sqrt,
    square,
    subtract,
    where,
)

__all__: list[str] = [
    "all", "allclose", "amax", "amin", "any", "argmax", "argmin", "average", "count_nonzero", "cumprod", "cumsum",
    "cumulative_prod", "cumulative_sum", "diff", "gradient", "max", "mean", "min", "prod", "ptp", "std", "sum", "var",
]


def _axes(o: Operand, axis: Any) -> tuple[int, ...]:
    n = len(o.shape)
    if axis is None:
        return tuple(range(n))
    if isinstance(axis, (int, np.integer)):
        return (int(axis),)
    return tuple(int(a) for a in axis)


def _sum_dtype(d: DType) -> DType:
    # NumPy accumulates bool and the narrower ints in the platform integer (int64 here),
    # unsigned ints in the platform's unsigned one.
    if d.is_unsigned:
        return uint64
    return int64 if d.is_bool or d.is_int else d


def _reduce(prim: str, x: ArrayLike, axis: Any, keepdims: bool, dtype: Any = None) -> Any:
    o = as_operand(x)
    d = as_dtype(dtype) if dtype is not None else None
    if d is not None:
        o = cast(o, d)
    return bind(prim, [o], {"axes": _axes(o, axis), "keepdims": bool(keepdims)})


def sum(x: ArrayLike, axis: Any = None, dtype: Any = None, keepdims: bool = False) -> Any:  # noqa: A001
    """Sum over ``axis`` (all axes when None); ints and bools accumulate in int64."""
    return _reduce("reduce_sum", x, axis, keepdims, dtype or _sum_dtype(as_operand(x).dtype))


def prod(x: ArrayLike, axis: Any = None, dtype: Any = None, keepdims: bool = False) -> Any:
    """Product over ``axis``; ints and bools accumulate in int64."""
    return _reduce("reduce_prod", x, axis, keepdims, dtype or _sum_dtype(as_operand(x).dtype))


def max(x: ArrayLike, axis: Any = None, keepdims: bool = False) -> Any:  # noqa: A001
    """Maximum over ``axis``; NaN propagates."""
    return _reduce("reduce_max", x, axis, keepdims)


def min(x: ArrayLike, axis: Any = None, keepdims: bool = False) -> Any:  # noqa: A001
    """Minimum over ``axis``; NaN propagates."""
    return _reduce("reduce_min", x, axis, keepdims)


amax, amin = max, min


def any(x: ArrayLike, axis: Any = None, keepdims: bool = False) -> Any:  # noqa: A001
    """Whether any element over ``axis`` is true (non-zero)."""
    o = to_bool(as_operand(x))
    return bind("reduce_any", [o], {"axes": _axes(o, axis), "keepdims": bool(keepdims)})


def all(x: ArrayLike, axis: Any = None, keepdims: bool = False) -> Any:  # noqa: A001
    """Whether every element over ``axis`` is true (non-zero)."""
    o = to_bool(as_operand(x))
    return bind("reduce_all", [o], {"axes": _axes(o, axis), "keepdims": bool(keepdims)})


def mean(x: ArrayLike, axis: Any = None, dtype: Any = None, keepdims: bool = False) -> Any:
    """Arithmetic mean over ``axis``; ints give float64, float16 accumulates in float32."""
    o = as_operand(x)
    out_d = as_dtype(dtype) if dtype is not None else (o.dtype if o.dtype.is_inexact else float64)
    acc = float32 if out_d == float16 else out_d
    # An integer dtype sums in that dtype, wrapping, and divides in float64, as NumPy does
    # (its true_divide by the count; a count in int8 would wrap too).
    total = sum(astype(operand_value(o), acc), axis=axis, dtype=acc, keepdims=keepdims)
    return astype(divide(total, element_count(o, axis, acc if acc.is_inexact else float64)), out_d)


def element_count(x: ArrayLike, axis: Any, dtype: Any) -> Any:
    """How many elements of ``x`` lie along ``axis`` (all axes when None), a 0-d value of
    ``dtype``: the divisor of a mean, read from the shape when the program runs (so a
    library compiled for every batch size divides a mean over the batch by its batch)."""
    o = as_operand(x)
    if not o.shape:
        return as_dtype(dtype).np.type(1)
    return bind("element_count", [o], {"axes": _axes(o, axis), "dtype": as_dtype(dtype)})


def var(x: ArrayLike, axis: Any = None, dtype: Any = None, ddof: int = 0, keepdims: bool = False, *,
        correction: float | None = None) -> Any:
    """Variance over ``axis`` with ``ddof`` delta degrees of freedom (``correction``: the
    array API's name for it)."""
    ddof = ddof if correction is None else correction
    o = as_operand(x)
    out_d = as_dtype(dtype) if dtype is not None else (o.dtype if o.dtype.is_inexact else float64)
    xf = astype(operand_value(o), out_d)
    centered = subtract(xf, mean(xf, axis=axis, keepdims=True))
    # Of a complex array NumPy's variance is real: the mean of |x - mean|^2.
    squares = square(absolute(centered)) if out_d.is_complex else square(centered)
    n = element_count(o, axis, out_d.real_dtype)
    if ddof:   # NumPy divides by max(n - ddof, 0): inf or NaN past the count
        n = maximum(subtract(n, out_d.real_dtype.np.type(ddof)), out_d.real_dtype.np.type(0))
    return divide(sum(squares, axis=axis, keepdims=keepdims), n)


def std(x: ArrayLike, axis: Any = None, dtype: Any = None, ddof: int = 0, keepdims: bool = False, *,
        correction: float | None = None) -> Any:
    """Standard deviation over ``axis`` (``correction``: the array API's name for ``ddof``).
    Where the variance is 0 (a single element, a constant row) the gradient is 0, not the
    0 * inf of sqrt's derivative there."""
    v = var(x, axis=axis, dtype=dtype, ddof=ddof, keepdims=keepdims, correction=correction)
    nonzero = not_equal(v, 0)  # NaN too: its std stays NaN
    return where(nonzero, sqrt(where(nonzero, v, 1)), 0)


def _arg_reduce(prim: str, x: ArrayLike, axis: Any, keepdims: bool) -> Any:
    o = as_operand(x)
    if axis is None:
        flat = as_operand(ravel(operand_value(o)))
        r = bind(prim, [flat], {"axis": 0})
        return reshape(r, (1,) * len(o.shape)) if keepdims else r
    return bind(prim, [o], {"axis": int(axis), "keepdims": bool(keepdims)})


def argmax(x: ArrayLike, axis: int | None = None, keepdims: bool = False) -> Any:
    """Index of the maximum along ``axis`` (of the flattened array when None), as int64."""
    return _arg_reduce("argmax", x, axis, keepdims)


def argmin(x: ArrayLike, axis: int | None = None, keepdims: bool = False) -> Any:
    """Index of the minimum along ``axis`` (of the flattened array when None), as int64."""
    return _arg_reduce("argmin", x, axis, keepdims)


def cumulative(name: str, scan_fn: Any, initial: int, x: ArrayLike, axis: int | None, dtype: Any,
               include_initial: bool) -> Any:
    """The array API's cumulative functions (``cumulative_sum``, ``cumulative_prod``):
    ``scan_fn`` (cumsum, cumprod) along ``axis``, which a 1-D array may leave out, with a
    leading ``initial`` when ``include_initial``."""
    o = as_operand(x)
    if axis is None:
        if len(o.shape) != 1:
            raise FlowjitTypeError(f"{name}: axis=None needs a 1-D array, got shape {list(o.shape)} at "
                                   f"{user_location()}; give axis=")
        axis = 0
    out = scan_fn(operand_value(o), axis=axis, dtype=dtype)
    if include_initial:
        axis = axis % len(o.shape)
        shape = list(o.shape)
        shape[axis] = 1
        out = concatenate([full(tuple(shape), initial, as_operand(out).dtype), out], axis=axis)
    return out


def cumulative_sum(x: ArrayLike, /, *, axis: int | None = None, dtype: Any = None,
                   include_initial: bool = False) -> Any:
    """The array API's cumulative sum: ``cumsum`` along ``axis`` (which a 1-D array may
    leave out), with a leading 0 when ``include_initial``."""
    return cumulative("cumulative_sum", cumsum, 0, x, axis, dtype, include_initial)


def cumsum(x: ArrayLike, axis: int | None = None, dtype: Any = None) -> Any:
    """Cumulative sum along ``axis`` (of the flattened array when None)."""
    o = as_operand(x)
    if axis is None:
        o, axis = as_operand(ravel(operand_value(o))), 0
    o = cast(o, as_dtype(dtype) if dtype is not None else _sum_dtype(o.dtype))
    return bind("cumsum", [o], {"axis": int(axis)})


_NO_VALUE = np._NoValue  # NumPy's "argument not given" (np.diff's prepend=, np.average's keepdims=)


@numpy_counterpart
def diff(a: ArrayLike, n: int = 1, axis: int = -1, prepend: ArrayLike = _NO_VALUE,
         append: ArrayLike = _NO_VALUE) -> Any:
    """The n-th discrete difference along ``axis`` (after joining ``prepend`` and ``append``;
    a scalar there is broadcast to one slice), as ``np.diff``; bools give ``!=``."""
    n = static_int("diff", "n", n)
    if n < 0:
        raise bad_argument("diff", f"the order n must be non-negative, got {n}", ShapeError)
    v = operand_value(as_operand(a, "a"))
    if n == 0:
        return v
    if ndim(v) == 0:
        raise bad_argument("diff", "a must be at least 1-D, got a 0-d array", ShapeError)
    ax = normalize_axis("diff", axis, ndim(v))
    parts = []
    for name, extra in (("prepend", prepend), ("append", append)):
        if extra is _NO_VALUE:
            continue
        e = operand_value(strong(as_operand(extra, name)))
        if ndim(e) == 0:
            shp = list(shape(v))
            shp[ax] = 1
            e = broadcast_to(e, tuple(shp))
        parts.append((name, e))
    if parts:
        v = concatenate([e for k, e in parts if k == "prepend"] + [v] + [e for k, e in parts if k == "append"],
                        axis=ax)
    step = not_equal if as_operand(v).dtype.is_bool else subtract
    for _ in range(n):
        v = step(index_along(v, ax, builtins.slice(1, None)), index_along(v, ax, builtins.slice(None, -1)))
    return v


@numpy_counterpart
def average(a: ArrayLike, axis: Any = None, weights: ArrayLike = None, returned: bool = False, *,
            keepdims: bool = False) -> Any:
    """The weighted mean over ``axis`` (``mean`` without weights), as ``np.average``; 1-D
    weights may give one weight per element along a single axis. ``returned=True`` also gives
    the sum of the weights. Weights that sum to zero give NaN (NumPy raises; traced weights
    cannot be checked while tracing)."""
    o = as_operand(a, "a")
    nd = len(o.shape)
    axes = None if axis is None else normalize_axes("average", axis, nd)
    keepdims = False if keepdims is _NO_VALUE else bool(keepdims)
    if weights is None:
        avg = mean(operand_value(o), axis=axes, keepdims=keepdims)
        if not returned:
            return avg
        count = math.prod(o.shape) // builtins.max(1, math.prod(shape(avg)))
        return avg, full(shape(avg), count, as_operand(avg).dtype)
    w = strong(as_operand(weights, "weights"))
    d = promote(strong(o), w)
    if not o.dtype.is_float:
        d = promote(strong(Operand(None, np.zeros((), d.np), False)), Operand(None, np.zeros(()), False))
    wv = operand_value(cast(w, d))
    if w.shape != o.shape:
        if axes is None:
            raise bad_argument("average", f"weights of shape {list(w.shape)} differ from a's {list(o.shape)}: give "
                               "axis", ShapeError)
        if w.shape != tuple(o.shape[ax] for ax in axes):
            raise bad_argument("average", f"weights of shape {list(w.shape)} must match a's shape {list(o.shape)} "
                               f"along axis {axis}", ShapeError)
        wv = transpose(wv, np.argsort(axes))
        wv = reshape(wv, tuple(s if ax in axes else 1 for ax, s in enumerate(o.shape)))
    scl = sum(wv, axis=axes, dtype=d, keepdims=keepdims)
    avg = divide(sum(multiply(operand_value(cast(o, d)), wv), axis=axes, keepdims=keepdims), scl)
    if not returned:
        return avg
    return avg, broadcast_to(scl, shape(avg))


@numpy_counterpart
def ptp(a: ArrayLike, axis: Any = None, keepdims: bool = False) -> Any:
    """The range (maximum - minimum) over ``axis``, as ``np.ptp``."""
    o = as_operand(a, "a")
    if o.dtype.is_bool:
        raise bad_argument("ptp", "a bool array has no range (NumPy refuses boolean subtract); cast it first")
    return subtract(max(operand_value(o), axis=axis, keepdims=keepdims),
                    min(operand_value(o), axis=axis, keepdims=keepdims))


@numpy_counterpart
def cumprod(a: ArrayLike, axis: int | None = None, dtype: Any = None) -> Any:
    """Cumulative product along ``axis`` (of the flattened array when None), as ``np.cumprod``
    (ints and bools in int64): a scan multiplying slice by slice in NumPy's order (so the
    same bits), whose gradient is exact also through zeros."""
    o = as_operand(a, "a")
    v = operand_value(o)
    if axis is None:
        v, axis = ravel(v), 0
    ax = normalize_axis("cumprod", axis, ndim(v))
    v = astype(v, as_dtype(dtype) if dtype is not None else _sum_dtype(o.dtype))
    if shape(v)[ax] <= 1:
        return v
    # A log-step prefix product of shifted copies fuses into one kernel that recomputes
    # each step's producers at every shift (2**log2(n) times); the scan's loop does not.
    rows = moveaxis(v, ax, 0)
    step = lambda c, r: (multiply(c, r),) * 2  # noqa: E731
    _, out = scan(step, rows[0], rows[1:])
    return moveaxis(concatenate([rows[:1], out], axis=0), 0, ax)


@numpy_counterpart
def cumulative_prod(x: ArrayLike, /, *, axis: int | None = None, dtype: Any = None,
                    include_initial: bool = False) -> Any:
    """The array API's cumulative product: ``cumprod`` along ``axis`` (which a 1-D array may
    leave out), with a leading 1 when ``include_initial``."""
    return cumulative("cumulative_prod", cumprod, 1, x, axis, dtype, include_initial)


@numpy_counterpart
def count_nonzero(x: ArrayLike, axis: Any = None, *, keepdims: bool = False) -> Any:
    """How many elements of ``x`` are not zero, over ``axis`` (all when None), as int64."""
    return sum(astype(not_equal(x, 0), int64), axis=axis, keepdims=keepdims)


@numpy_counterpart
def allclose(a: ArrayLike, b: ArrayLike, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False) -> Any:
    """Whether every element of ``a`` is close to ``b`` (``isclose``), as ``np.allclose``: a
    0-d bool array (traced inside a function; ``bool()`` of it outside one)."""
    return all(isclose(a, b, rtol, atol, equal_nan))


@numpy_counterpart
def gradient(f: ArrayLike, *varargs: Any, axis: Any = None, edge_order: int = 1) -> Any:
    """The gradient of ``f`` sampled on a grid, as ``np.gradient``: second-order central
    differences inside, first- or second-order (``edge_order``) one-sided ones at the
    edges; ``varargs`` gives the spacing, one scalar for every axis or one per axis (scalars
    or coordinate arrays of the axis's length). One array per axis, a tuple when there are
    several (NumPy 2)."""
    v = operand_value(as_operand(f, "f"))
    if not as_operand(v).dtype.is_inexact:
        v = astype(v, float64)
    n = ndim(v)
    axes = tuple(range(n)) if axis is None else (
        (normalize_axis("gradient", axis, n),) if not isinstance(axis, (tuple, list)) else
        tuple(normalize_axis("gradient", a, n) for a in axis))
    if len(varargs) == 0:
        spacing: list[Any] = [1.0] * len(axes)
    elif len(varargs) == 1 and ndim(operand_value(as_operand(varargs[0]))) == 0:
        spacing = [varargs[0]] * len(axes)
    elif len(varargs) == len(axes):
        spacing = list(varargs)
    else:
        raise bad_argument("gradient", f"{len(varargs)} spacings for {len(axes)} axes: give one scalar, or one per "
                           "axis")
    if edge_order not in (1, 2):
        raise bad_argument("gradient", f"edge_order must be 1 or 2, got {edge_order}", ShapeError)
    out = []
    for ax, h in zip(axes, spacing):
        size = shape(v)[ax]
        if size < edge_order + 1:
            raise bad_argument("gradient", f"axis {ax} has {size} samples; at least edge_order + 1 = "
                               f"{edge_order + 1} are needed", ShapeError)

        def at(key: Any) -> Any:
            return index_along(v, ax, key)
        dx_shape = [1] * n
        dx_shape[ax] = -1
        hv = operand_value(as_operand(h, "spacing"))
        if ndim(hv) == 0:
            inner_d = divide(subtract(at(builtins.slice(2, None)), at(builtins.slice(None, -2))),
                             multiply(2.0, hv))
            if edge_order == 1:
                first = divide(subtract(at(builtins.slice(1, 2)), at(builtins.slice(0, 1))), hv)
                last = divide(subtract(at(builtins.slice(-1, None)), at(builtins.slice(-2, -1))), hv)
            else:
                first = divide(add(add(multiply(-1.5, at(builtins.slice(0, 1))),
                                       multiply(2.0, at(builtins.slice(1, 2)))),
                                   multiply(-0.5, at(builtins.slice(2, 3)))), hv)
                last = divide(add(add(multiply(0.5, at(builtins.slice(-3, -2))),
                                      multiply(-2.0, at(builtins.slice(-2, -1)))),
                                  multiply(1.5, at(builtins.slice(-1, None)))), hv)
        else:  # coordinates: NumPy's non-uniform second-order formula inside
            if shape(hv) != (size,):
                raise bad_argument("gradient", f"the coordinates of axis {ax} have shape {shape(hv)}, not ({size},)",
                                   ShapeError)
            dx = reshape(diff(hv), tuple(dx_shape))
            d1, d2 = dx[tuple(builtins.slice(None, -1) if i == ax else builtins.slice(None) for i in range(n))], \
                dx[tuple(builtins.slice(1, None) if i == ax else builtins.slice(None) for i in range(n))]
            a_ = negative(divide(d2, multiply(d1, add(d1, d2))))
            b_ = divide(subtract(d2, d1), multiply(d1, d2))
            c_ = divide(d1, multiply(d2, add(d1, d2)))
            inner_d = add(add(multiply(a_, at(builtins.slice(None, -2))),
                              multiply(b_, at(builtins.slice(1, -1)))),
                          multiply(c_, at(builtins.slice(2, None))))
            if edge_order != 1:
                raise bad_argument("gradient", "edge_order=2 with coordinate arrays is not supported; use edge_order=1")
            first = divide(subtract(at(builtins.slice(1, 2)), at(builtins.slice(0, 1))),
                           index_along(dx, ax, builtins.slice(0, 1)))
            last = divide(subtract(at(builtins.slice(-1, None)), at(builtins.slice(-2, -1))),
                          index_along(dx, ax, builtins.slice(-1, None)))
        out.append(concatenate([first, inner_d, last], axis=ax))
    return out[0] if len(out) == 1 else tuple(out)
