"""Numerical ranges: ``arange``, ``linspace``, ``logspace``, ``geomspace`` and ``meshgrid``."""

from __future__ import annotations

from typing import Any

import numpy as np

from flowjit.ir.dtypes import dtype as as_dtype
from flowjit.ir.dtypes import float16, float32, float64
from flowjit.ir.errors import FlowjitTypeError, ShapeError
from flowjit.tracer.core import Tracer
from flowjit.tracer.numpy.conversion import astype
from flowjit.tracer.numpy.counterparts import numpy_counterpart
from flowjit.tracer.numpy.creation import full, iota
from flowjit.tracer.numpy.layout import broadcast_to, expand_dims, moveaxis, ndim, ravel, reshape, shape
from flowjit.tracer.numpy.manipulation import concatenate
from flowjit.tracer.numpy.operands import (
    ArrayLike,
    as_operand,
    bad_argument,
    cast,
    normalize_axis,
    on_device,
    operand_value,
    promote,
    static_int,
    strong,
)
from flowjit.tracer.numpy.ufuncs import add, divide, equal, floor, log10, multiply, power, sign, subtract, where

__all__: list[str] = [
    "arange", "geomspace", "linspace", "logspace", "meshgrid",
]


def arange(start: Any, stop: Any = None, step: Any = 1, dtype: Any = None, *, device: Any = None) -> Any:
    """Evenly spaced values in [start, stop) for static Python numbers, as ``np.arange``."""
    if device is not None:
        with on_device(device):
            return arange(start, stop, step, dtype)
    if stop is None:
        start, stop = 0, start
    for name, v in (("start", start), ("stop", stop), ("step", step)):
        if isinstance(v, Tracer):
            raise FlowjitTypeError(f"arange: {name} must be a static number (the length of the "
                                   "result must be known while tracing)")
    ref = np.arange(start, stop, step, dtype=None if dtype is None else as_dtype(dtype).np)
    d = as_dtype(ref.dtype)
    n = len(ref)
    if n <= 1:
        return full((n,), ref[0] if n else 0, d)
    # NumPy fills ``first + i * delta`` in the result dtype, with first and first + step
    # converted to it first (so a float step with an int dtype gives NumPy's odd sequence).
    c = float32 if d == float16 else d
    first, delta = ref[0].astype(c.np), (ref[1].astype(c.np) - ref[0].astype(c.np))
    return astype(add(multiply(iota(c, (n,)), delta), first), d)


@numpy_counterpart
def meshgrid(*xi: ArrayLike, copy: bool = True, sparse: bool = False, indexing: str = "xy") -> list[Any]:
    """Coordinate arrays from 1-D coordinate vectors, as ``np.meshgrid`` (``indexing`` 'xy':
    the first two outputs' axes swapped, as for images; 'ij': matrix indexing); a list, as
    the array API standard and JAX give (NumPy gives a tuple)."""
    if indexing not in ("xy", "ij"):
        raise bad_argument("meshgrid", f"indexing must be 'xy' or 'ij', got {indexing!r}", ShapeError)
    nd = len(xi)
    flat = [ravel(x) for x in xi]
    shapes = [[1] * nd for _ in xi]
    for i, x in enumerate(flat):
        shapes[i][i] = shape(x)[0]
    if indexing == "xy" and nd > 1:
        shapes[0][:2], shapes[1][:2] = shapes[0][1::-1], shapes[1][1::-1]
    out = [reshape(x, tuple(s)) for x, s in zip(flat, shapes)]
    if not sparse:
        # Each axis's size is the one coordinate vector's that runs along it (0 included).
        full = [shape(x)[0] for x in flat]
        if indexing == "xy" and nd > 1:
            full[:2] = full[1::-1]
        out = [broadcast_to(x, tuple(full)) for x in out]
    return out


@numpy_counterpart
def linspace(start: ArrayLike, stop: ArrayLike, num: int = 50, endpoint: bool = True, retstep: bool = False,
             dtype: Any = None, axis: int = 0, *, device: Any = None) -> Any:
    """``num`` evenly spaced values from start to stop (stop included when ``endpoint``), as
    ``np.linspace``; start and stop may be (traced) arrays, or complex, giving one sequence
    per element along ``axis``, and the gradient flows to both; ``device`` places it (the
    array API's keyword, an ``fj.device`` block)."""
    with on_device(device):
        return _linspace(start, stop, num, endpoint, retstep, dtype, axis)


def _linspace(start: ArrayLike, stop: ArrayLike, num: int, endpoint: bool, retstep: bool, dtype: Any,
              axis: int) -> Any:
    num = static_int("linspace", "num", num)
    if num < 0:
        raise bad_argument("linspace", f"num must be non-negative, got {num}", ShapeError)
    a, b = as_operand(start, "start"), as_operand(stop, "stop")
    d = promote(a, b)
    dt = d if d.is_inexact else float64
    lo, hi = operand_value(strong(cast(a, dt))), operand_value(strong(cast(b, dt)))
    delta = subtract(hi, lo)
    nd = ndim(delta)
    div = num - 1 if endpoint else num
    y = reshape(iota(dt, (num,)), (num,) + (1,) * nd)
    if div > 0:
        step = divide(delta, astype(div, dt))
        # NumPy's rule for a step that underflows to 0: scale by delta after dividing.
        y = where(equal(step, 0), multiply(divide(y, astype(div, dt)), delta), multiply(y, step))
    else:
        step = full(shape(delta), np.nan, dt)
        y = multiply(y, delta)
    y = add(y, lo)
    if endpoint and num > 1:
        last = expand_dims(broadcast_to(hi, shape(y)[1:]), 0)
        y = concatenate([y[:-1], last], axis=0)
    if axis != 0:
        y = moveaxis(y, 0, normalize_axis("linspace", axis, ndim(y)))
    if dtype is not None:
        out = as_dtype(dtype)
        y = astype(floor(y) if out.is_int else y, out)
    return (y, step) if retstep else y


@numpy_counterpart
def logspace(start: ArrayLike, stop: ArrayLike, num: int = 50, endpoint: bool = True, base: ArrayLike = 10.0,
             dtype: Any = None, axis: int = 0) -> Any:
    """``base ** linspace(start, stop)``, as ``np.logspace``: a Python number base keeps the
    sequence's dtype; an array base broadcasts with start and stop (its axis goes at ``axis``)."""
    if isinstance(base, (int, float)) or not ndim(base):
        return _power(base, linspace(start, stop, num=num, endpoint=endpoint, axis=axis), dtype)
    shp = np.broadcast_shapes(shape(start), shape(stop), shape(base))
    start, stop, base = (reshape(v, (1,) * (len(shp) - ndim(v)) + shape(v)) for v in (start, stop, base))
    y = linspace(start, stop, num=num, endpoint=endpoint, axis=axis)
    return _power(expand_dims(base, normalize_axis("logspace", axis, ndim(y))), y, dtype)


def _power(base: ArrayLike, y: Any, dtype: Any) -> Any:
    r = power(base, y)
    return r if dtype is None else astype(r, dtype)


@numpy_counterpart
def geomspace(start: ArrayLike, stop: ArrayLike, num: int = 50, endpoint: bool = True, dtype: Any = None,
              axis: int = 0) -> Any:
    """``num`` values spaced evenly on a log scale from start to stop (both non-zero, of one
    sign), as ``np.geomspace``: float64 unless ``dtype``; the ends are start and stop exactly."""
    num = static_int("geomspace", "num", num)
    for name, v in (("start", start), ("stop", stop)):
        o = as_operand(v, name)
        if o.tracer is None and np.any(o.array == 0):
            raise bad_argument("geomspace", f"{name} must be non-zero (a geometric sequence cannot include zero)",
                               ShapeError)
    lo = astype(start, float64)
    hi = astype(stop, float64)
    sgn = sign(lo)
    lo, hi = divide(lo, sgn), divide(hi, sgn)
    r = logspace(log10(lo), log10(hi), num=num, endpoint=endpoint, base=10.0)
    if num > 0:
        ends = [expand_dims(broadcast_to(lo, shape(r)[1:]), 0)]
        mid = r[1:]
        if num > 1 and endpoint:
            mid = r[1:-1]
        parts = ends + [mid] + ([expand_dims(broadcast_to(hi, shape(r)[1:]), 0)]
                                if num > 1 and endpoint else [])
        r = concatenate(parts, axis=0)
    r = multiply(r, sgn)
    if axis != 0:
        r = moveaxis(r, 0, normalize_axis("geomspace", axis, ndim(r)))
    return r if dtype is None else astype(r, dtype)
