"""Functions of sampled sequences: piecewise-linear interpolation (``interp``), integration by
the trapezoidal rule (``trapezoid``), flat differences (``ediff1d``), discrete convolution and
correlation of 1-D sequences (``convolve``, ``correlate``) and the dot product of flattened
arrays (``vdot``).

Each follows NumPy's formula in NumPy's order of operations, so results match NumPy's to the
last bit or two (``interp`` computes its slope first, as NumPy's C loop does;
``convolve``/``correlate`` are one matrix-vector product of the sliding windows, which sums in
another order than NumPy's dot). Lengths are static; values, sample points and kernels may be
traced, and gradients flow to all of them."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from flowjit.ir.dtypes import float64
from flowjit.ir.errors import ShapeError
from flowjit.tracer.numpy.conversion import astype
from flowjit.tracer.numpy.counterparts import numpy_counterpart
from flowjit.tracer.numpy.indexing import index_along, take
from flowjit.tracer.numpy.layout import ravel, reshape, shape
from flowjit.tracer.numpy.manipulation import concatenate, flip, pad
from flowjit.tracer.numpy.operands import (
    ArrayLike,
    as_operand,
    bad_argument,
    cast,
    normalize_axis,
    operand_value,
    promote,
)
from flowjit.tracer.numpy.products import dot, matmul
from flowjit.tracer.numpy.reductions import diff, sum
from flowjit.tracer.numpy.sorting_searching import argsort, searchsorted
from flowjit.tracer.numpy.ufuncs import (
    absolute,
    add,
    clip,
    conj,
    divide,
    equal,
    greater,
    isnan,
    less,
    logical_and,
    multiply,
    remainder,
    subtract,
    where,
)

__all__: list[str] = [
    "convolve", "correlate", "ediff1d", "interp", "trapezoid", "vdot",
]


@numpy_counterpart
def interp(x: ArrayLike, xp: ArrayLike, fp: ArrayLike, left: ArrayLike = None, right: ArrayLike = None,
           period: ArrayLike = None) -> Any:
    """The piecewise-linear interpolant through the points (xp, fp) at ``x``, as ``np.interp``:
    ``xp`` increasing and 1-D, ``fp`` of its length; below xp[0] it is ``left`` (default
    fp[0]), above xp[-1] ``right`` (default fp[-1]); with ``period`` the points repeat with that
    period (and left/right are unused). float64, as NumPy's; a NaN x gives NaN. The gradient
    reaches x (the slope), xp and fp, as jax.numpy.interp's."""
    xo, xpo, fpo = as_operand(x, "x"), as_operand(xp, "xp"), as_operand(fp, "fp")
    if fpo.dtype.is_complex:
        raise bad_argument("interp", "complex fp is not supported; interpolate fj.real(fp) and fj.imag(fp) apart")
    if len(xpo.shape) != 1 or len(fpo.shape) != 1:
        raise bad_argument("interp", f"xp and fp must be 1-D, got shapes {list(xpo.shape)} and {list(fpo.shape)}",
                           ShapeError)
    if xpo.shape != fpo.shape:
        raise bad_argument("interp", f"fp and xp are not of the same length ({fpo.shape[0]} and {xpo.shape[0]})",
                           ShapeError)
    if xpo.shape[0] == 0:
        raise bad_argument("interp", "array of sample points is empty", ShapeError)
    xv, xpv, fpv = (astype(operand_value(o), float64) for o in (xo, xpo, fpo))
    if period is not None:
        po = as_operand(period, "period")
        if po.tracer is None and float(po.array) == 0:
            raise bad_argument("interp", "period must be a non-zero value", ShapeError)
        p = absolute(astype(period, float64))
        left = right = None
        xv, xpv = remainder(xv, p), remainder(xpv, p)
        order = argsort(xpv)
        xpv, fpv = take(xpv, order), take(fpv, order)
        head, tail = slice(None, 1), slice(-1, None)
        xpv = concatenate([subtract(index_along(xpv, 0, tail), p), xpv, add(index_along(xpv, 0, head), p)])
        fpv = concatenate([index_along(fpv, 0, tail), fpv, index_along(fpv, 0, head)])
    n = shape(xpv)[0]
    first, last = index_along(fpv, 0, 0), index_along(fpv, 0, -1)
    lval = first if left is None else astype(left, float64)
    rval = last if right is None else astype(right, float64)
    x0, xn = index_along(xpv, 0, 0), index_along(xpv, 0, -1)
    if n == 1:  # NumPy's loop for one point: a NaN x is neither below nor above it
        return where(less(xv, x0), lval, where(greater(xv, x0), rval, first))
    # NumPy's binary search: j with xp[j] <= x < xp[j + 1]; its loop computes the slope first.
    j = clip(subtract(searchsorted(xpv, xv, side="right"), 1), 0, n - 2)
    xa, xb = take(xpv, j), take(xpv, add(j, 1))
    ya, yb = take(fpv, j), take(fpv, add(j, 1))
    dx = subtract(xb, xa)
    slope = divide(subtract(yb, ya), where(equal(dx, 0), 1, dx))  # dx is 0 only where unused
    r = add(multiply(slope, subtract(xv, xa)), ya)
    # A NaN from one side (an infinite fp) is tried from the other, as NumPy does.
    r = where(isnan(r), add(multiply(slope, subtract(xv, xb)), yb), r)
    r = where(logical_and(isnan(r), equal(ya, yb)), ya, r)
    r = where(equal(xv, xa), ya, r)
    r = where(equal(xv, xn), last, r)
    r = where(greater(xv, xn), rval, where(less(xv, x0), lval, r))
    return where(isnan(xv), xv, r)


@numpy_counterpart
def trapezoid(y: ArrayLike, x: ArrayLike = None, dx: ArrayLike = 1.0, axis: int = -1) -> Any:
    """The integral of the samples ``y`` along ``axis`` by the trapezoidal rule, as
    ``np.trapezoid``: ``sum(d * (y[1:] + y[:-1]) / 2)`` with d the spacing ``dx`` or the
    differences of the sample points ``x`` (1-D, along the axis; or of y's shape)."""
    yo = as_operand(y, "y")
    nd = len(yo.shape)
    if nd == 0:
        raise bad_argument("trapezoid", "y must be at least 1-D, got a 0-d array", ShapeError)
    ax = normalize_axis("trapezoid", axis, nd)
    yv = operand_value(yo)
    if x is None:
        d: Any = dx
    else:
        xo = as_operand(x, "x")
        xv = operand_value(xo)
        if len(xo.shape) == 1:
            if xo.shape[0] != yo.shape[ax]:
                raise bad_argument("trapezoid", f"x of length {xo.shape[0]} for y's axis {ax} of length "
                                   f"{yo.shape[ax]}; give one sample point per value", ShapeError)
            d = reshape(diff(xv), tuple(-1 if i == ax else 1 for i in range(nd)))
        else:
            d = diff(xv, axis=ax)
    s = add(index_along(yv, ax, slice(1, None)), index_along(yv, ax, slice(None, -1)))
    return sum(divide(multiply(d, s), 2.0), axis=ax)


@numpy_counterpart
def ediff1d(ary: ArrayLike, to_end: ArrayLike = None, to_begin: ArrayLike = None) -> Any:
    """The differences of consecutive elements of the flattened ``ary``, with ``to_begin``
    and ``to_end`` (flattened) before and after, as ``np.ediff1d``; in ary's dtype, into which
    the extras must cast safely within their kind."""
    o = as_operand(ary, "ary")
    if o.dtype.is_bool:
        raise bad_argument("ediff1d", "bools have no difference (NumPy refuses boolean subtract); cast ary first")
    flat = ravel(operand_value(o))
    n = shape(flat)[0]
    out = subtract(index_along(flat, 0, slice(1, None)), index_along(flat, 0, slice(None, max(n - 1, 0))))
    extras = {}
    for name, extra in (("to_begin", to_begin), ("to_end", to_end)):
        if extra is None:
            continue
        e = as_operand(extra, name)
        if not np.can_cast(e.dtype.np, o.dtype.np, casting="same_kind"):
            raise bad_argument("ediff1d", f"dtype of `{name}` ({e.dtype.name}) must be compatible with the input "
                               f"ary ({o.dtype.name}) under the `same_kind` rule")
        extras[name] = ravel(operand_value(cast(e, o.dtype, check=False)))
    if not extras:
        return out
    return concatenate([p for p in (extras.get("to_begin"), out, extras.get("to_end")) if p is not None])


_MODES = ("full", "same", "valid")


def _sliding(fname: str, a: Any, v: Any, mode: str) -> Any:
    """``out[k] = sum_j a_padded[k + j] v[j]`` for the longer a (NumPy's ``_pyarray_correlate``):
    zeros padded as ``mode`` says, all the windows gathered at once and multiplied by v."""
    n, m = shape(a)[0], shape(v)[0]
    left, right = {"full": (m - 1, m - 1), "same": (m // 2, m - 1 - m // 2), "valid": (0, 0)}[mode]
    ap = pad(a, (left, right)) if left or right else a
    length = n + left + right - m + 1
    windows = take(ap, np.arange(length)[:, None] + np.arange(m)[None, :])
    d = as_operand(windows).dtype
    if d.is_inexact:
        return matmul(windows, v)
    return astype(sum(multiply(windows, v), axis=-1), d)


def _pair(fname: str, a: ArrayLike, v: ArrayLike, mode: str) -> tuple[Any, Any]:
    if mode not in _MODES:
        raise bad_argument(fname, f"mode={mode!r}; allowed {', '.join(map(repr, _MODES))}")
    ao, vo = as_operand(a, "a"), as_operand(v, "v")
    if len(ao.shape) != 1 or len(vo.shape) != 1:
        raise bad_argument(fname, f"a and v must be 1-D, got shapes {list(ao.shape)} and {list(vo.shape)}",
                           ShapeError)
    for name, o in (("a", ao), ("v", vo)):
        if o.shape[0] == 0:
            raise bad_argument(fname, f"{name} cannot be empty", ShapeError)
    d = promote(ao, vo)
    return operand_value(cast(ao, d)), operand_value(cast(vo, d))


@numpy_counterpart
def correlate(a: ArrayLike, v: ArrayLike, mode: str = "valid") -> Any:
    """The cross-correlation of the 1-D sequences a and v, ``c[k] = sum_n a[n + k] conj(v[n])``,
    as ``np.correlate``: ``mode`` 'valid' (default: where they overlap fully), 'same' (a's
    length when longer) or 'full'. When v is the longer, NumPy's convention: the correlation of
    v with a, reversed."""
    av, vv = _pair("correlate", a, v, mode)
    if as_operand(vv).dtype.is_complex:
        vv = conj(vv)
    if shape(av)[0] >= shape(vv)[0]:
        return _sliding("correlate", av, vv, mode)
    return flip(_sliding("correlate", vv, av, mode))


@numpy_counterpart
def convolve(a: ArrayLike, v: ArrayLike, mode: str = "full") -> Any:
    """The discrete linear convolution of the 1-D sequences a and v, ``c[k] = sum_n a[n] v[k -
    n]``, as ``np.convolve``: ``mode`` 'full' (default: length len(a) + len(v) - 1), 'same' (the
    longer's length, centred) or 'valid' (where they overlap fully)."""
    av, vv = _pair("convolve", a, v, mode)
    if shape(vv)[0] > shape(av)[0]:
        av, vv = vv, av
    return _sliding("convolve", av, flip(vv), mode)


@numpy_counterpart
def vdot(a: ArrayLike, b: ArrayLike) -> Any:
    """The dot product of a and b flattened, conjugating a, as ``np.vdot``: they must have as
    many elements; a 0-d result."""
    ao, bo = as_operand(a, "a"), as_operand(b, "b")
    if math.prod(ao.shape) != math.prod(bo.shape):
        raise bad_argument("vdot", f"a of shape {list(ao.shape)} and b of shape {list(bo.shape)} have "
                           f"{math.prod(ao.shape)} and {math.prod(bo.shape)} elements; vectors must have the same "
                           "length", ShapeError)
    av = ravel(operand_value(ao))
    if ao.dtype.is_complex:
        av = conj(av)
    return dot(av, ravel(operand_value(bo)))
