"""NumPy's everyday functions beyond the array API's core (``roll``, ``diag``, ``linspace``,
``hypot``...), written on the registry's primitives: traced, compiled and differentiated as
the primitives they are made of, and what NumPy's own functions trace as on traced arrays.

Signatures, dtypes and shapes are NumPy 2's. Shapes, axes, counts and shifts must be static
(Python numbers), as the result's shape depends on them; array arguments may be traced.
Where NumPy's function is not differentiable at a point, the gradient is the one JAX gives
(``hypot`` at (0, 0) and ``sinc`` at 0: 0; ``logaddexp`` at a tie: half to each side).
"""

from __future__ import annotations

import builtins
import math
import operator
from collections.abc import Sequence
from typing import Any

import numpy as np

from flowjit.ir.dtypes import DType, bool_, float16, float32, float64, int64
from flowjit.ir.dtypes import dtype as as_dtype
from flowjit.ir.errors import FlowjitTypeError, ShapeError
from flowjit.tracer import array_api as fj
from flowjit.tracer.array_api import (
    _cast,
    _float_dtype,
    _op,
    _promote,
    _strong,
    _sum_dtype,
    _value,
    cumulative,
    numpy_counterpart,
)
from flowjit.tracer.control_flow import scan
from flowjit.tracer.core import Operand, Tracer, user_location
from flowjit.tracer.custom_gradients import custom_jvp

ArrayLike = Any

__all__: list[str] = [
    "append", "array_split", "atleast_1d", "atleast_2d", "atleast_3d", "average", "c_", "cbrt", "column_stack",
    "copysign", "cross", "cumprod", "deg2rad", "degrees", "diag", "diagonal", "diff", "dsplit", "dstack", "exp2",
    "flip", "fliplr", "flipud", "fmax", "fmin", "geomspace", "heaviside", "hsplit", "hstack", "hypot", "kron",
    "linspace", "log10", "log2", "logaddexp", "logaddexp2", "logspace", "meshgrid", "nan_to_num", "ptp", "r_",
    "rad2deg", "radians", "repeat", "roll", "rot90", "select", "sinc", "tile", "trace", "tril", "triu", "vsplit",
    "vstack", "broadcast_arrays", "unstack", "cumulative_prod", "count_nonzero", "isclose", "allclose",
    "iscomplexobj", "isrealobj", "iscomplex", "isreal", "real_if_close", "fabs", "inner", "rollaxis", "row_stack",
    "gradient",
]

_NO_VALUE = np._NoValue  # NumPy's "argument not given" (np.diff's prepend=, np.average's keepdims=)


def _fail(fn: str, message: str, exc: type[Exception] = FlowjitTypeError) -> Exception:
    """The error for a bad argument of ``fn``: it names the function and the user's line."""
    return exc(f"{fn}: {message} (at {user_location()})")


def _static_int(fn: str, name: str, v: Any) -> int:
    if isinstance(v, Tracer):
        raise _fail(fn, f"{name} must be a static Python int (the result's shape depends on it), got traced {v.aval}")
    try:
        return operator.index(v)
    except TypeError:
        raise _fail(fn, f"{name} must be an integer, got {v!r}") from None


def _axis(fn: str, axis: Any, ndim: int, name: str = "axis") -> int:
    a = _static_int(fn, name, axis)
    if not -ndim <= a < ndim:
        raise _fail(fn, f"{name}={a} is out of bounds for an array of rank {ndim}", ShapeError)
    return a % ndim


def _index(x: Any, axis: int, key: Any) -> Any:
    """``x[..., key, ...]`` with ``key`` on ``axis`` (a slice or an int)."""
    idx = [builtins.slice(None)] * fj.ndim(x)
    idx[axis] = key
    return fj.getitem(x, tuple(idx))


# ---- elementwise ---------------------------------------------------------------------------


def _floats(*xs: ArrayLike) -> tuple[DType, list[Any]]:
    """The inputs promoted together and to NumPy's float dtype for a transcendental function."""
    ops = [_op(x, f"x{i + 1}") for i, x in enumerate(xs)]
    d = _float_dtype(_promote(*ops))
    return d, [_value(_cast(o, d)) for o in ops]


def _in_double(fn: Any, d: DType, *xs: Any) -> Any:
    # float16 and float32 compute in float64 and round once, which makes a composite of
    # several roundings (log(x) / ln 2) as accurate as NumPy's single libm call.
    if d in (float16, float32):
        return fj.astype(fn(*[fj.astype(x, float64) for x in xs]), d)
    return fn(*xs)


def _ufunc(fn: Any) -> Any:
    """Register ``fn`` as the counterpart of NumPy's ufunc of the same name."""
    return numpy_counterpart(fn)


@_ufunc
def hypot(x1: ArrayLike, x2: ArrayLike) -> Any:
    """``sqrt(x1**2 + x2**2)`` elementwise without overflow, as ``np.hypot``; its gradient at
    (0, 0) is 0 (JAX's choice), and +-inf in either input gives inf."""
    d, (a, b) = _floats(x1, x2)

    def scaled(a: Any, b: Any) -> Any:
        a, b = fj.absolute(a), fj.absolute(b)
        # One select for both, not maximum and minimum: at a tie those both send their
        # gradient to a, and b's derivative (b / hypot) would be lost.
        first = fj.logical_or(fj.greater_equal(a, b), fj.isnan(a))  # a NaN is the big one: it propagates
        big, small = fj.where(first, a, b), fj.where(first, b, a)
        ratio = fj.divide(small, fj.where(big == 0, 1, big))
        r = fj.where(big == 0, big, fj.multiply(big, fj.sqrt(fj.add(1, fj.multiply(ratio, ratio)))))
        return fj.where(fj.logical_or(fj.isinf(a), fj.isinf(b)), np.inf, r)

    return _in_double(scaled, d, a, b)


@_ufunc
def logaddexp(x1: ArrayLike, x2: ArrayLike) -> Any:
    """``log(exp(x1) + exp(x2))`` elementwise without overflow, as ``np.logaddexp``; at a tie
    the gradient is split half and half (the true derivative), infinities of one sign stay."""
    _, (a, b) = _floats(x1, x2)
    return _logaddexp_e(a, b)


@_ufunc
def logaddexp2(x1: ArrayLike, x2: ArrayLike) -> Any:
    """``log2(2**x1 + 2**x2)`` elementwise without overflow, as ``np.logaddexp2``."""
    _, (a, b) = _floats(x1, x2)
    return _logaddexp_2(a, b)


def _logaddexp(a: Any, b: Any, softplus: Any) -> Any:
    same = fj.equal(a, b)
    # At a tie (also inf == inf) the larger is both halves.
    big = fj.where(same, fj.add(fj.multiply(a, 0.5), fj.multiply(b, 0.5)), fj.maximum(a, b))
    gap = fj.where(same, 0, fj.subtract(a, b))
    r = fj.add(big, softplus(fj.negative(fj.absolute(gap))))
    return fj.where(fj.logical_or(fj.isnan(a), fj.isnan(b)), fj.add(a, b), r)


def _with_smooth_derivative(value: Any, weight: Any) -> Any:
    """``value(a, b)`` (the overflow-safe form, whose max and |a - b| have kinks at a tie)
    with the derivative ``ta * w + tb * (1 - w)``, ``w = weight(a - out)`` the share of
    ``a``: smooth everywhere, so second derivatives at a tie are right (JAX does the same)."""

    @custom_jvp
    def f(a: Any, b: Any) -> Any:
        return value(a, b)

    @f.defjvp
    def f_jvp(primals: tuple, tangents: tuple) -> tuple:
        (a, b), (ta, tb) = primals, tangents
        out = f(a, b)
        # weight(a - out) is 1/2 at a tie too, and smooth there; only inf == inf needs it given
        w = fj.where(fj.logical_and(fj.equal(a, b), fj.isinf(a)), 0.5, weight(fj.subtract(a, out)))
        return out, fj.add(fj.multiply(ta, w), fj.multiply(tb, fj.subtract(1.0, w)))
    return f


_logaddexp_e = _with_smooth_derivative(lambda a, b: _logaddexp(a, b, lambda t: fj.log1p(fj.exp(t))), fj.exp)
_logaddexp_2 = _with_smooth_derivative(
    lambda a, b: _logaddexp(a, b, lambda t: fj.multiply(fj.log1p(exp2(t)), 1 / math.log(2))), lambda t: exp2(t))


def _nan_aware(pick: Any):
    def fn(x1: ArrayLike, x2: ArrayLike) -> Any:
        a, b = _op(x1, "x1"), _op(x2, "x2")
        d = _promote(a, b)
        av, bv = _value(_cast(a, d)), _value(_cast(b, d))
        r = pick(av, bv)
        if not d.is_float:
            return r
        return fj.where(fj.isnan(bv), av, fj.where(fj.isnan(av), bv, r))
    return fn


def fmax(x1: ArrayLike, x2: ArrayLike) -> Any:
    """Elementwise maximum that ignores a NaN (returns the other input), as ``np.fmax``."""
    return _nan_aware(fj.maximum)(x1, x2)


def fmin(x1: ArrayLike, x2: ArrayLike) -> Any:
    """Elementwise minimum that ignores a NaN (returns the other input), as ``np.fmin``."""
    return _nan_aware(fj.minimum)(x1, x2)


_ufunc(fmax)
_ufunc(fmin)


@_ufunc
def exp2(x: ArrayLike) -> Any:
    """``2**x`` elementwise, as ``np.exp2`` (ints give float64)."""
    d, (a,) = _floats(x)
    if d in (float16, float32):
        # exp(x ln 2) in float64 errs by |x| ulps of float64, far below float32's rounding,
        # and exp is vectorized where pow is a libm call per element.
        return fj.astype(fj.exp(fj.multiply(fj.astype(a, float64), math.log(2))), d)
    return fj.power(fj.astype(2, d), a)


@_ufunc
def log2(x: ArrayLike) -> Any:
    """Base-2 logarithm elementwise, as ``np.log2`` (float64 within an ulp or two of NumPy's;
    float32 computed in float64 and rounded once)."""
    d, (a,) = _floats(x)
    return _in_double(lambda v: fj.divide(fj.log(v), math.log(2)), d, a)


@_ufunc
def log10(x: ArrayLike) -> Any:
    """Base-10 logarithm elementwise, as ``np.log10`` (float64 within an ulp or two of NumPy's)."""
    d, (a,) = _floats(x)
    return _in_double(lambda v: fj.divide(fj.log(v), math.log(10)), d, a)


def _scale(x: ArrayLike, num: float, den: float) -> Any:
    d, (a,) = _floats(x)
    # NumPy multiplies by the constant num / den rounded in the array's own dtype.
    c = d.np.type(num) / d.np.type(den) if d != float16 else np.float32(num) / np.float32(den)
    return fj.multiply(a, fj.astype(c, d))


@_ufunc
def degrees(x: ArrayLike) -> Any:
    """Radians to degrees elementwise, as ``np.degrees``."""
    return _scale(x, 180.0, np.pi)


@_ufunc
def radians(x: ArrayLike) -> Any:
    """Degrees to radians elementwise, as ``np.radians``."""
    return _scale(x, np.pi, 180.0)


rad2deg = numpy_counterpart(degrees, "rad2deg")
deg2rad = numpy_counterpart(radians, "deg2rad")


@_ufunc
def cbrt(x: ArrayLike) -> Any:
    """Real cube root elementwise, ``sign(x) * |x|**(1/3)``; negative inputs give negative
    roots, -0.0 gives -0.0 (float32 is computed in float64 and rounded once). At 0, where the
    derivative is infinite (JAX gives inf), the gradient is 0, not the NaN of 0 * inf."""
    d, (a,) = _floats(x)

    def root(v: Any) -> Any:
        zero = fj.equal(v, 0)
        # exp(log|v| / 3) (vectorized, where pow is a libm call per element) and one Newton
        # step y - (y - |v| / y**2) / 3, which leaves an ulp of error and whose derivative in
        # v is cbrt's own. Log never sees 0, so the branch where() discards has a finite
        # derivative; v * 0 keeps the sign of a zero, and an infinity is its own root.
        m = fj.where(zero, 1, fj.absolute(v))
        y = fj.exp(fj.divide(fj.log(m), 3))
        y = fj.subtract(y, fj.divide(fj.subtract(y, fj.divide(m, fj.multiply(y, y))), 3))
        r = fj.where(fj.isinf(v), v, fj.multiply(fj.sign(v), y))
        return fj.where(zero, fj.multiply(v, 0), r)
    return _in_double(root, d, a)


@numpy_counterpart
def sinc(x: ArrayLike) -> Any:
    """``sin(pi x) / (pi x)`` elementwise, 1 at 0 (gradient 0 there), as ``np.sinc``."""
    o = _op(x)
    # NumPy's where(x == 0, 1e-20, x) makes bools float64, not float16 as a ufunc would.
    a = _value(_cast(o, float64 if o.dtype.is_bool else _float_dtype(o.dtype)))
    y = fj.multiply(np.pi, fj.where(fj.equal(a, 0), 1.0e-20, a))  # NumPy's own guard
    return fj.divide(fj.sin(y), y)


@_ufunc
def heaviside(x1: ArrayLike, x2: ArrayLike) -> Any:
    """The Heaviside step: 0 for x1 < 0, x2 at 0, 1 for x1 > 0, NaN for NaN, as ``np.heaviside``."""
    _, (a, b) = _floats(x1, x2)
    step = fj.where(fj.less(a, 0), 0, fj.where(fj.greater(a, 0), 1, b))
    return fj.where(fj.isnan(a), a, step)


@_ufunc
def copysign(x1: ArrayLike, x2: ArrayLike) -> Any:
    """``|x1|`` with the sign of x2 elementwise, as ``np.copysign``; -0.0 counts as negative.
    The sign bit of a NaN in x2 cannot be read here: a NaN x2 counts as positive."""
    _, (a, b) = _floats(x1, x2)
    # atan2(-0.0, -1) is -pi and atan2(+0.0, -1) is +pi: the sign bit of a zero, with no warning.
    negative = fj.where(fj.equal(b, 0), fj.less(fj.arctan2(b, -1), 0), fj.less(b, 0))
    m = fj.absolute(a)
    return fj.where(negative, fj.negative(m), m)


@numpy_counterpart
def nan_to_num(x: ArrayLike, copy: bool = True, nan: float = 0.0, posinf: float | None = None,
               neginf: float | None = None) -> Any:
    """NaN, +inf and -inf replaced by ``nan``, ``posinf`` and ``neginf`` (default: the dtype's
    largest and smallest finite values), as ``np.nan_to_num``; integer arrays are returned as is."""
    o = _op(x)
    if not o.dtype.is_float:
        return _value(o)
    info = np.finfo(o.dtype.np)
    v = _value(o)
    r = fj.where(fj.isnan(v), nan, v)
    r = fj.where(fj.equal(v, np.inf), info.max if posinf is None else posinf, r)
    return fj.where(fj.equal(v, -np.inf), info.min if neginf is None else neginf, r)


# ---- diagonals and triangles -----------------------------------------------------------------


@numpy_counterpart
def diagonal(a: ArrayLike, offset: int = 0, axis1: int = 0, axis2: int = 1) -> Any:
    """The ``offset``-th diagonal of the planes (axis1, axis2), appended as the last axis, as
    ``np.diagonal`` (a strided slice of the flattened planes, so it fuses and its gradient is a pad)."""
    o = _op(a, "a")
    n = len(o.shape)
    if n < 2:
        raise _fail("diagonal", f"a must have at least two dimensions, got shape {list(o.shape)}", ShapeError)
    offset = _static_int("diagonal", "offset", offset)
    ax1, ax2 = _axis("diagonal", axis1, n, "axis1"), _axis("diagonal", axis2, n, "axis2")
    if ax1 == ax2:
        raise _fail("diagonal", f"axis1 and axis2 cannot be the same (both {ax1})", ShapeError)
    x = fj.moveaxis(_value(o), (ax1, ax2), (-2, -1))
    rows, cols = o.shape[ax1], o.shape[ax2]
    size = builtins.max(0, builtins.min(rows, cols - offset) if offset >= 0 else builtins.min(rows + offset, cols))
    flat = fj.reshape(x, fj.shape(x)[:-2] + (rows * cols,))
    if size == 0:
        return _index(flat, n - 2, builtins.slice(0, 0))
    start = offset if offset >= 0 else -offset * cols
    return _index(flat, n - 2, builtins.slice(start, start + (size - 1) * (cols + 1) + 1, cols + 1))


@numpy_counterpart
def diag(v: ArrayLike, k: int = 0) -> Any:
    """The k-th diagonal of a 2-D array, or a 2-D array with a 1-D v on its k-th diagonal, as ``np.diag``."""
    o = _op(v, "v")
    k = _static_int("diag", "k", k)
    if len(o.shape) == 2:
        return diagonal(_value(o), k)
    if len(o.shape) != 1:
        raise _fail("diag", f"v must be 1-D or 2-D, got shape {list(o.shape)}", ShapeError)
    n = o.shape[0] + builtins.abs(k)
    padded = fj.pad(_value(o), (0, builtins.abs(k)))
    # Row r holds v[r] at column r + k (k >= 0); column c holds v[c] at row c - k (k < 0).
    spread = fj.expand_dims(padded, 1 if k >= 0 else 0)
    return fj.where(fj.eye(n, n, k, dtype=bool), spread, fj.zeros((), o.dtype))


@numpy_counterpart
def trace(a: ArrayLike, offset: int = 0, axis1: int = 0, axis2: int = 1, dtype: Any = None) -> Any:
    """Sum along a diagonal, as ``np.trace`` (ints and bools sum in int64)."""
    d = diagonal(a, offset, axis1, axis2)
    return fj.sum(d, axis=-1, dtype=dtype)


def _triangle(fn: str, m: ArrayLike, k: Any, lower: bool) -> Any:
    o = _op(m, "m")
    if not o.shape:
        raise _fail(fn, "m must be at least 1-D (a 1-D m is taken as the rows of a square matrix)", ShapeError)
    k = _static_int(fn, "k", k)
    rows, cols = (o.shape[-2], o.shape[-1]) if len(o.shape) >= 2 else (o.shape[0], o.shape[0])
    r, c = fj.iota(int64, (rows, cols), 0), fj.iota(int64, (rows, cols), 1)
    keep = fj.less_equal(c, fj.add(r, k)) if lower else fj.greater_equal(c, fj.add(r, k))
    return fj.where(keep, _value(o), fj.zeros((), o.dtype))


@numpy_counterpart
def tril(m: ArrayLike, k: int = 0) -> Any:
    """``m`` with the elements above the k-th diagonal zeroed (on the last two axes), as ``np.tril``."""
    return _triangle("tril", m, k, True)


@numpy_counterpart
def triu(m: ArrayLike, k: int = 0) -> Any:
    """``m`` with the elements below the k-th diagonal zeroed (on the last two axes), as ``np.triu``."""
    return _triangle("triu", m, k, False)


# ---- rearranging -----------------------------------------------------------------------------


def _axes(fn: str, axis: Any, ndim: int) -> tuple[int, ...]:
    if axis is None:
        return tuple(range(ndim))
    axes = (axis,) if not isinstance(axis, (tuple, list)) else tuple(axis)
    out = tuple(_axis(fn, a, ndim) for a in axes)
    if len(set(out)) != len(out):
        raise _fail(fn, f"repeated axis in axis={axis!r}", ShapeError)
    return out


@numpy_counterpart
def flip(m: ArrayLike, axis: Any = None) -> Any:
    """``m`` reversed along ``axis`` (every axis when None), as ``np.flip``."""
    v = _value(_op(m, "m"))
    idx = [builtins.slice(None)] * fj.ndim(v)
    for a in _axes("flip", axis, fj.ndim(v)):
        idx[a] = builtins.slice(None, None, -1)
    return fj.getitem(v, tuple(idx)) if idx else v


@numpy_counterpart
def fliplr(m: ArrayLike) -> Any:
    """``m`` reversed along axis 1 (left/right), as ``np.fliplr``; m must be at least 2-D."""
    if fj.ndim(m) < 2:
        raise _fail("fliplr", f"m must be at least 2-D, got shape {list(fj.shape(m))}", ShapeError)
    return flip(m, 1)


@numpy_counterpart
def flipud(m: ArrayLike) -> Any:
    """``m`` reversed along axis 0 (up/down), as ``np.flipud``; m must be at least 1-D."""
    if fj.ndim(m) < 1:
        raise _fail("flipud", "m must be at least 1-D, got a 0-d array", ShapeError)
    return flip(m, 0)


@numpy_counterpart
def roll(a: ArrayLike, shift: Any, axis: Any = None) -> Any:
    """``a`` with elements shifted cyclically by static ``shift`` along ``axis`` (of the
    flattened array when None), as ``np.roll``; shift and axis may be matching sequences."""
    v = _value(_op(a, "a"))
    if axis is None:
        return fj.reshape(roll(fj.ravel(v), shift, 0), fj.shape(v))
    shifts = np.asarray(shift) if not isinstance(shift, Tracer) else shift
    if isinstance(shifts, Tracer) or shifts.dtype.kind not in "iu":
        raise _fail("roll", f"shift must be static integers, got {shift!r:.60}")
    try:
        pairs = np.broadcast(shifts, np.asarray(axis))
    except ValueError:
        raise _fail("roll", f"shift={shift!r} and axis={axis!r} do not match in length", ShapeError) from None
    if pairs.nd > 1:
        raise _fail("roll", "shift and axis must be ints or 1-D sequences", ShapeError)
    total = [0] * fj.ndim(v)
    for s, ax in pairs:
        total[_axis("roll", ax, fj.ndim(v))] += int(s)
    for ax, s in enumerate(total):
        n = fj.shape(v)[ax]
        if n and s % n:
            s %= n
            v = fj.concatenate([_index(v, ax, builtins.slice(n - s, None)), _index(v, ax, builtins.slice(0, n - s))],
                               axis=ax)
    return v


@numpy_counterpart
def rot90(m: ArrayLike, k: int = 1, axes: Sequence[int] = (0, 1)) -> Any:
    """``m`` rotated by 90 degrees k times in the plane of ``axes`` (from the first axis
    towards the second), as ``np.rot90``."""
    v = _value(_op(m, "m"))
    n = fj.ndim(v)
    axes = tuple(axes)
    if len(axes) != 2:
        raise _fail("rot90", f"axes must be two axes, got {axes!r}", ShapeError)
    a0, a1 = _axis("rot90", axes[0], n, "axes[0]"), _axis("rot90", axes[1], n, "axes[1]")
    if a0 == a1:
        raise _fail("rot90", f"axes must be different, got {axes!r}", ShapeError)
    k = _static_int("rot90", "k", k) % 4
    if k == 0:
        return v
    if k == 2:
        return flip(flip(v, a0), a1)
    perm = list(range(n))
    perm[a0], perm[a1] = perm[a1], perm[a0]
    return fj.transpose(flip(v, a1), perm) if k == 1 else flip(fj.transpose(v, perm), a1)


@numpy_counterpart
def repeat(a: ArrayLike, repeats: Any, axis: int | None = None) -> Any:
    """Each element of ``a`` repeated ``repeats`` times (static: an int, or one count per
    element along ``axis``), as ``np.repeat``; the flattened array when axis is None."""
    v = _value(_op(a, "a"))
    if axis is None:
        v, axis = fj.ravel(v), 0
    ax = _axis("repeat", axis, fj.ndim(v))
    if isinstance(repeats, Tracer):
        raise _fail("repeat", "repeats must be static integers (the result's length depends on them)")
    reps = np.asarray(repeats)
    n = fj.shape(v)[ax]
    if reps.dtype.kind not in "iu" or reps.ndim > 1 or (reps.ndim == 1 and len(reps) not in (1, n)):
        raise _fail("repeat", f"repeats must be an int or {n} ints (one per element along axis {ax}), "
                    f"got {repeats!r:.60}", ShapeError)
    if (reps < 0).any():
        raise _fail("repeat", f"repeats must be non-negative, got {repeats!r:.60}", ShapeError)
    if reps.ndim == 0 or len(reps) == 1:
        r = int(reps.reshape(-1)[0])
        shp = fj.shape(v)
        wide = fj.broadcast_to(fj.expand_dims(v, ax + 1), shp[:ax + 1] + (r,) + shp[ax + 1:])
        return fj.reshape(wide, shp[:ax] + (n * r,) + shp[ax + 1:])
    return fj.take(v, np.repeat(np.arange(n), reps), axis=ax)


@numpy_counterpart
def tile(A: ArrayLike, reps: Any) -> Any:
    """``A`` repeated ``reps`` times along each axis, as ``np.tile`` (the result's rank is the
    larger of A's and len(reps))."""
    v = _value(_op(A, "A"))
    reps = tuple(reps) if isinstance(reps, (tuple, list)) else (reps,)
    reps = tuple(_static_int("tile", "reps", r) for r in reps)
    if builtins.any(r < 0 for r in reps):
        raise _fail("tile", f"reps must be non-negative, got {reps!r}", ShapeError)
    shp = fj.shape(v)
    nd = builtins.max(len(shp), len(reps))
    shp = (1,) * (nd - len(shp)) + shp
    reps = (1,) * (nd - len(reps)) + reps
    interleaved = tuple(x for s in shp for x in (1, s))
    wide = fj.broadcast_to(fj.reshape(v, interleaved), tuple(x for s, r in zip(shp, reps) for x in (r, s)))
    return fj.reshape(wide, tuple(s * r for s, r in zip(shp, reps)))


@numpy_counterpart
def append(arr: ArrayLike, values: ArrayLike, axis: int | None = None) -> Any:
    """``values`` appended to ``arr`` along ``axis`` (both flattened when None), as ``np.append``."""
    # NumPy makes both arrays first: a Python number appended is an int64 or float64 array.
    arr, values = _value(_strong(_op(arr, "arr"))), _value(_strong(_op(values, "values")))
    if axis is None:
        return fj.concatenate([fj.ravel(arr), fj.ravel(values)], axis=0)
    return fj.concatenate([arr, values], axis=axis)


@numpy_counterpart
def kron(a: ArrayLike, b: ArrayLike) -> Any:
    """The Kronecker product: blocks of b scaled by each element of a, as ``np.kron``."""
    x, y = _value(_op(a, "a")), _value(_op(b, "b"))
    sa, sb = fj.shape(x), fj.shape(y)
    if not sa or not sb:
        return fj.multiply(x, y)
    nd = builtins.max(len(sa), len(sb))
    sa, sb = (1,) * (nd - len(sa)) + sa, (1,) * (nd - len(sb)) + sb
    xa = fj.reshape(x, tuple(q for s in sa for q in (s, 1)))
    yb = fj.reshape(y, tuple(q for s in sb for q in (1, s)))
    return fj.reshape(fj.multiply(xa, yb), tuple(p * q for p, q in zip(sa, sb)))


@numpy_counterpart
def cross(a: ArrayLike, b: ArrayLike, axisa: int = -1, axisb: int = -1, axisc: int = -1,
          axis: int | None = None) -> Any:
    """The cross product of vectors of 3 (or 2, taken with z = 0) components along ``axisa``
    and ``axisb``, the result's vectors along ``axisc``, as ``np.cross``."""
    if axis is not None:
        axisa = axisb = axisc = axis
    x, y = _op(a, "a"), _op(b, "b")
    if not x.shape or not y.shape:
        raise _fail("cross", f"a and b must be at least 1-D, got shapes {list(x.shape)} and {list(y.shape)}",
                    ShapeError)
    d = _promote(x, y)
    if d.is_bool:
        raise _fail("cross", "bool vectors have no cross product (NumPy refuses boolean subtract); cast them first")
    u = fj.moveaxis(_value(_cast(x, d)), _axis("cross", axisa, len(x.shape), "axisa"), -1)
    w = fj.moveaxis(_value(_cast(y, d)), _axis("cross", axisb, len(y.shape), "axisb"), -1)
    na, nb = fj.shape(u)[-1], fj.shape(w)[-1]
    if na not in (2, 3) or nb not in (2, 3):
        raise _fail("cross", f"vectors must have 2 or 3 components, got {na} and {nb}", ShapeError)
    # A missing third component is zero: its products are left out (NumPy's own formulas).
    ca = [u[..., i] if i < na else None for i in range(3)]
    cb = [w[..., i] if i < nb else None for i in range(3)]

    def minor(i: int, j: int) -> Any:
        plus = fj.multiply(ca[i], cb[j]) if ca[i] is not None and cb[j] is not None else None
        minus = fj.multiply(ca[j], cb[i]) if ca[j] is not None and cb[i] is not None else None
        if minus is None:
            return plus
        return fj.negative(minus) if plus is None else fj.subtract(plus, minus)

    if na == 2 and nb == 2:
        return minor(0, 1)
    c = fj.stack([minor(1, 2), minor(2, 0), minor(0, 1)], axis=-1)
    return fj.moveaxis(c, -1, _axis("cross", axisc, fj.ndim(c), "axisc"))


@numpy_counterpart
def meshgrid(*xi: ArrayLike, copy: bool = True, sparse: bool = False, indexing: str = "xy") -> list[Any]:
    """Coordinate arrays from 1-D coordinate vectors, as ``np.meshgrid`` (``indexing`` 'xy':
    the first two outputs' axes swapped, as for images; 'ij': matrix indexing); a list, as
    the array API standard and JAX give (NumPy gives a tuple)."""
    if indexing not in ("xy", "ij"):
        raise _fail("meshgrid", f"indexing must be 'xy' or 'ij', got {indexing!r}", ShapeError)
    nd = len(xi)
    flat = [fj.ravel(x) for x in xi]
    shapes = [[1] * nd for _ in xi]
    for i, x in enumerate(flat):
        shapes[i][i] = fj.shape(x)[0]
    if indexing == "xy" and nd > 1:
        shapes[0][:2], shapes[1][:2] = shapes[0][1::-1], shapes[1][1::-1]
    out = [fj.reshape(x, tuple(s)) for x, s in zip(flat, shapes)]
    if not sparse:
        # Each axis's size is the one coordinate vector's that runs along it (0 included).
        full = [fj.shape(x)[0] for x in flat]
        if indexing == "xy" and nd > 1:
            full[:2] = full[1::-1]
        out = [fj.broadcast_to(x, tuple(full)) for x in out]
    return out


# ---- stacking and splitting ----------------------------------------------------------------------


def _at_least(fn: str, arys: Sequence[ArrayLike], grow: Any) -> Any:
    out = []
    for i, a in enumerate(arys):
        v = _value(_strong(_op(a, f"arys[{i}]")))
        out.append(fj.reshape(v, grow(fj.shape(v))))
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


def _stacked(fn: str, tup: Sequence[ArrayLike], dtype: Any, arrays: list[Any], axis: int) -> Any:
    if not arrays:
        raise _fail(fn, "needs at least one array")
    if dtype is not None:
        arrays = [fj.astype(a, dtype) for a in arrays]
    return fj.concatenate(arrays, axis=axis)


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
    return _stacked("hstack", tup, dtype, arrs, 0 if arrs and fj.ndim(arrs[0]) == 1 else 1)


@numpy_counterpart
def dstack(tup: Sequence[ArrayLike]) -> Any:
    """Arrays stacked along a third axis, as ``np.dstack``."""
    return _stacked("dstack", tup, None, _as_list(atleast_3d(*tup)) if len(tup) else [], 2)


@numpy_counterpart
def column_stack(tup: Sequence[ArrayLike]) -> Any:
    """1-D arrays as the columns of a 2-D array (2-D arrays as they are), as ``np.column_stack``."""
    cols = []
    for i, a in enumerate(tup):
        v = _value(_strong(_op(a, f"tup[{i}]")))
        cols.append(fj.transpose(fj.reshape(v, (1,) * (2 - fj.ndim(v)) + fj.shape(v))) if fj.ndim(v) < 2 else v)
    return _stacked("column_stack", tup, None, cols, 1)


def _split_at(fn: str, ary: ArrayLike, points: Sequence[int], axis: int) -> list[Any]:
    v = _value(_op(ary, "ary"))
    return [_index(v, axis, builtins.slice(lo, hi)) for lo, hi in zip(points[:-1], points[1:])]


def _division_points(fn: str, n: int, indices_or_sections: Any, equal: bool) -> list[int]:
    if isinstance(indices_or_sections, Tracer):
        raise _fail(fn, "indices_or_sections must be static (the pieces' shapes depend on it)")
    if isinstance(indices_or_sections, (Sequence, np.ndarray)):
        return [0, *(_static_int(fn, "indices_or_sections", i) for i in indices_or_sections), n]
    k = _static_int(fn, "indices_or_sections", indices_or_sections)
    if k <= 0:
        raise _fail(fn, f"the number of sections must be larger than 0, got {k}", ShapeError)
    if equal and n % k:
        raise _fail(fn, f"an axis of size {n} does not split into {k} equal sections; use array_split",
                    ShapeError)
    each, extra = divmod(n, k)
    return [0, *np.cumsum([each + 1] * extra + [each] * (k - extra)).tolist()]


def _split(fn: str, ary: ArrayLike, indices_or_sections: Any, axis: int, equal: bool) -> list[Any]:
    o = _op(ary, "ary")
    ax = _axis(fn, axis, len(o.shape))
    return _split_at(fn, _value(o), _division_points(fn, o.shape[ax], indices_or_sections, equal), ax)


@numpy_counterpart
def array_split(ary: ArrayLike, indices_or_sections: Any, axis: int = 0) -> list[Any]:
    """``ary`` split along ``axis`` into k nearly equal pieces (the first n % k one longer) or
    at the given indices, as ``np.array_split``."""
    return _split("array_split", ary, indices_or_sections, axis, equal=False)


def _split_dims(fn: str, ary: ArrayLike, least: int) -> int:
    n = fj.ndim(ary)
    if n < least:
        raise _fail(fn, f"ary must have at least {least} dimension{'s' if least > 1 else ''}, "
                    f"got shape {list(fj.shape(ary))}", ShapeError)
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


# ---- sequences ---------------------------------------------------------------------------------


@numpy_counterpart
def linspace(start: ArrayLike, stop: ArrayLike, num: int = 50, endpoint: bool = True, retstep: bool = False,
             dtype: Any = None, axis: int = 0, *, device: Any = None) -> Any:
    """``num`` evenly spaced values from start to stop (stop included when ``endpoint``), as
    ``np.linspace``; start and stop may be (traced) arrays, or complex, giving one sequence
    per element along ``axis``, and the gradient flows to both; ``device`` places it (the
    array API's keyword, an ``fj.device`` block)."""
    with fj._on(device):
        return _linspace(start, stop, num, endpoint, retstep, dtype, axis)


def _linspace(start: ArrayLike, stop: ArrayLike, num: int, endpoint: bool, retstep: bool, dtype: Any,
              axis: int) -> Any:
    num = _static_int("linspace", "num", num)
    if num < 0:
        raise _fail("linspace", f"num must be non-negative, got {num}", ShapeError)
    a, b = _op(start, "start"), _op(stop, "stop")
    d = _promote(a, b)
    dt = d if d.is_inexact else float64
    lo, hi = _value(_strong(_cast(a, dt))), _value(_strong(_cast(b, dt)))
    delta = fj.subtract(hi, lo)
    nd = fj.ndim(delta)
    div = num - 1 if endpoint else num
    y = fj.reshape(fj.iota(dt, (num,)), (num,) + (1,) * nd)
    if div > 0:
        step = fj.divide(delta, fj.astype(div, dt))
        # NumPy's rule for a step that underflows to 0: scale by delta after dividing.
        y = fj.where(fj.equal(step, 0), fj.multiply(fj.divide(y, fj.astype(div, dt)), delta), fj.multiply(y, step))
    else:
        step = fj.full(fj.shape(delta), np.nan, dt)
        y = fj.multiply(y, delta)
    y = fj.add(y, lo)
    if endpoint and num > 1:
        last = fj.expand_dims(fj.broadcast_to(hi, fj.shape(y)[1:]), 0)
        y = fj.concatenate([y[:-1], last], axis=0)
    if axis != 0:
        y = fj.moveaxis(y, 0, _axis("linspace", axis, fj.ndim(y)))
    if dtype is not None:
        out = as_dtype(dtype)
        y = fj.astype(fj.floor(y) if out.is_int else y, out)
    return (y, step) if retstep else y


@numpy_counterpart
def logspace(start: ArrayLike, stop: ArrayLike, num: int = 50, endpoint: bool = True, base: ArrayLike = 10.0,
             dtype: Any = None, axis: int = 0) -> Any:
    """``base ** linspace(start, stop)``, as ``np.logspace``: a Python number base keeps the
    sequence's dtype; an array base broadcasts with start and stop (its axis goes at ``axis``)."""
    if isinstance(base, (int, float)) or not fj.ndim(base):
        return _power(base, linspace(start, stop, num=num, endpoint=endpoint, axis=axis), dtype)
    shp = np.broadcast_shapes(fj.shape(start), fj.shape(stop), fj.shape(base))
    start, stop, base = (fj.reshape(v, (1,) * (len(shp) - fj.ndim(v)) + fj.shape(v)) for v in (start, stop, base))
    y = linspace(start, stop, num=num, endpoint=endpoint, axis=axis)
    return _power(fj.expand_dims(base, _axis("logspace", axis, fj.ndim(y))), y, dtype)


def _power(base: ArrayLike, y: Any, dtype: Any) -> Any:
    r = fj.power(base, y)
    return r if dtype is None else fj.astype(r, dtype)


@numpy_counterpart
def geomspace(start: ArrayLike, stop: ArrayLike, num: int = 50, endpoint: bool = True, dtype: Any = None,
              axis: int = 0) -> Any:
    """``num`` values spaced evenly on a log scale from start to stop (both non-zero, of one
    sign), as ``np.geomspace``: float64 unless ``dtype``; the ends are start and stop exactly."""
    num = _static_int("geomspace", "num", num)
    for name, v in (("start", start), ("stop", stop)):
        o = _op(v, name)
        if o.tracer is None and np.any(o.array == 0):
            raise _fail("geomspace", f"{name} must be non-zero (a geometric sequence cannot include zero)",
                        ShapeError)
    lo = fj.astype(start, float64)
    hi = fj.astype(stop, float64)
    sign = fj.sign(lo)
    lo, hi = fj.divide(lo, sign), fj.divide(hi, sign)
    r = logspace(log10(lo), log10(hi), num=num, endpoint=endpoint, base=10.0)
    if num > 0:
        ends = [fj.expand_dims(fj.broadcast_to(lo, fj.shape(r)[1:]), 0)]
        mid = r[1:]
        if num > 1 and endpoint:
            mid = r[1:-1]
        parts = ends + [mid] + ([fj.expand_dims(fj.broadcast_to(hi, fj.shape(r)[1:]), 0)]
                                if num > 1 and endpoint else [])
        r = fj.concatenate(parts, axis=0)
    r = fj.multiply(r, sign)
    if axis != 0:
        r = fj.moveaxis(r, 0, _axis("geomspace", axis, fj.ndim(r)))
    return r if dtype is None else fj.astype(r, dtype)


# ---- differences, selections, statistics -----------------------------------------------------


@numpy_counterpart
def diff(a: ArrayLike, n: int = 1, axis: int = -1, prepend: ArrayLike = _NO_VALUE,
         append: ArrayLike = _NO_VALUE) -> Any:
    """The n-th discrete difference along ``axis`` (after joining ``prepend`` and ``append``;
    a scalar there is broadcast to one slice), as ``np.diff``; bools give ``!=``."""
    n = _static_int("diff", "n", n)
    if n < 0:
        raise _fail("diff", f"the order n must be non-negative, got {n}", ShapeError)
    v = _value(_op(a, "a"))
    if n == 0:
        return v
    if fj.ndim(v) == 0:
        raise _fail("diff", "a must be at least 1-D, got a 0-d array", ShapeError)
    ax = _axis("diff", axis, fj.ndim(v))
    parts = []
    for name, extra in (("prepend", prepend), ("append", append)):
        if extra is _NO_VALUE:
            continue
        e = _value(_strong(_op(extra, name)))
        if fj.ndim(e) == 0:
            shp = list(fj.shape(v))
            shp[ax] = 1
            e = fj.broadcast_to(e, tuple(shp))
        parts.append((name, e))
    if parts:
        v = fj.concatenate([e for k, e in parts if k == "prepend"] + [v] + [e for k, e in parts if k == "append"],
                           axis=ax)
    step = fj.not_equal if _op(v).dtype.is_bool else fj.subtract
    for _ in range(n):
        v = step(_index(v, ax, builtins.slice(1, None)), _index(v, ax, builtins.slice(None, -1)))
    return v


@numpy_counterpart
def select(condlist: Sequence[ArrayLike], choicelist: Sequence[ArrayLike], default: ArrayLike = 0) -> Any:
    """Elementwise, the choice of the first condition that holds (``default`` where none does),
    as ``np.select``; conditions must be bool arrays; a Python number among the choices is
    weak (it does not widen a float32 choice), as in NumPy 2."""
    if len(condlist) != len(choicelist):
        raise _fail("select", f"condlist ({len(condlist)}) and choicelist ({len(choicelist)}) must have "
                    "the same length", ShapeError)
    if not len(condlist):
        raise _fail("select", "condlist must not be empty", ShapeError)
    choices = [_op(c, f"choicelist[{i}]") for i, c in enumerate(choicelist)]
    choices.append(_op(default, "default"))
    d = _promote(*choices)
    conds = []
    for i, c in enumerate(condlist):
        o = _op(c, f"condlist[{i}]")
        if not o.dtype.is_bool:
            raise _fail("select", f"condlist[{i}] must be a bool array, got {o.aval}")
        conds.append(_value(o))
    out = _value(_cast(choices[-1], d))
    for c, v in zip(reversed(conds), reversed(choices[:-1])):
        out = fj.where(c, _value(_cast(v, d)), out)
    shp = np.broadcast_shapes(*(fj.shape(c) for c in conds), *(o.shape for o in choices))
    return fj.broadcast_to(out, shp)


@numpy_counterpart
def average(a: ArrayLike, axis: Any = None, weights: ArrayLike = None, returned: bool = False, *,
            keepdims: bool = False) -> Any:
    """The weighted mean over ``axis`` (``mean`` without weights), as ``np.average``; 1-D
    weights may give one weight per element along a single axis. ``returned=True`` also gives
    the sum of the weights. Weights that sum to zero give NaN (NumPy raises; traced weights
    cannot be checked while tracing)."""
    o = _op(a, "a")
    nd = len(o.shape)
    axes = None if axis is None else _axes("average", axis, nd)
    keepdims = False if keepdims is _NO_VALUE else bool(keepdims)
    if weights is None:
        avg = fj.mean(_value(o), axis=axes, keepdims=keepdims)
        if not returned:
            return avg
        count = math.prod(o.shape) // builtins.max(1, math.prod(fj.shape(avg)))
        return avg, fj.full(fj.shape(avg), count, _op(avg).dtype)
    w = _strong(_op(weights, "weights"))
    d = _promote(_strong(o), w)
    if not o.dtype.is_float:
        d = _promote(_strong(Operand(None, np.zeros((), d.np), False)), Operand(None, np.zeros(()), False))
    wv = _value(_cast(w, d))
    if w.shape != o.shape:
        if axes is None:
            raise _fail("average", f"weights of shape {list(w.shape)} differ from a's {list(o.shape)}: give axis",
                        ShapeError)
        if w.shape != tuple(o.shape[ax] for ax in axes):
            raise _fail("average", f"weights of shape {list(w.shape)} must match a's shape {list(o.shape)} "
                        f"along axis {axis}", ShapeError)
        wv = fj.transpose(wv, np.argsort(axes))
        wv = fj.reshape(wv, tuple(s if ax in axes else 1 for ax, s in enumerate(o.shape)))
    scl = fj.sum(wv, axis=axes, dtype=d, keepdims=keepdims)
    avg = fj.divide(fj.sum(fj.multiply(_value(_cast(o, d)), wv), axis=axes, keepdims=keepdims), scl)
    if not returned:
        return avg
    return avg, fj.broadcast_to(scl, fj.shape(avg))


@numpy_counterpart
def ptp(a: ArrayLike, axis: Any = None, keepdims: bool = False) -> Any:
    """The range (maximum - minimum) over ``axis``, as ``np.ptp``."""
    o = _op(a, "a")
    if o.dtype.is_bool:
        raise _fail("ptp", "a bool array has no range (NumPy refuses boolean subtract); cast it first")
    return fj.subtract(fj.max(_value(o), axis=axis, keepdims=keepdims), fj.min(_value(o), axis=axis,
                                                                                keepdims=keepdims))


@numpy_counterpart
def cumprod(a: ArrayLike, axis: int | None = None, dtype: Any = None) -> Any:
    """Cumulative product along ``axis`` (of the flattened array when None), as ``np.cumprod``
    (ints and bools in int64): a scan multiplying slice by slice in NumPy's order (so the
    same bits), whose gradient is exact also through zeros."""
    o = _op(a, "a")
    v = _value(o)
    if axis is None:
        v, axis = fj.ravel(v), 0
    ax = _axis("cumprod", axis, fj.ndim(v))
    v = fj.astype(v, as_dtype(dtype) if dtype is not None else _sum_dtype(o.dtype))
    if fj.shape(v)[ax] <= 1:
        return v
    # A log-step prefix product of shifted copies fuses into one kernel that recomputes
    # each step's producers at every shift (2**log2(n) times); the scan's loop does not.
    rows = fj.moveaxis(v, ax, 0)
    step = lambda c, r: (fj.multiply(c, r),) * 2  # noqa: E731
    _, out = scan(step, rows[0], rows[1:])
    return fj.moveaxis(fj.concatenate([rows[:1], out], axis=0), 0, ax)


# ndarray's methods of the same names (x.diagonal(), x.repeat(2), x.cumprod(1)); not
# x.trace(), as a Tracer's ``trace`` is the trace it belongs to.
for _method in (diagonal, repeat, cumprod):
    setattr(Tracer, _method.__name__, _method)


# ---- r_ and c_ ---------------------------------------------------------------------------------


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
                raise _fail(self.name, f"directive {items[0]!r} is not supported: give 'axis[,ndmin[,trans1d]]' "
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
                    o = _op(fj.reshape(seq, (1,) * (ndmin - 1) + seq.shape))
                    if trans1d != -1:
                        o = _op(fj.swapaxes(_value(o), -1, trans1d))
            elif isinstance(item, str):
                raise _fail(self.name, f"a string ({item!r}) may only come first, as the directive")
            else:
                o = _op(item, f"{self.name}[{k}]")
                nd = len(o.shape)
                if nd < ndmin:
                    v = fj.reshape(_value(o), (1,) * (ndmin - nd) + o.shape)
                    if trans1d != -1 and nd:
                        # NumPy's rule: the item's own axes move to position trans1d.
                        k2, k1 = ndmin - nd, trans1d + (ndmin - nd + 1 if trans1d < 0 else 0)
                        order = list(range(ndmin))
                        v = fj.transpose(v, order[:k1] + order[k2:] + order[k1:k2])
                    o = _keep_weak(v, o.weak)
            objs.append(o)
        if not objs:
            raise _fail(self.name, "needs at least one slice, scalar or array to join", ShapeError)
        d = _promote(*objs)
        parts = [_value(_strong(_cast(o, d))) for o in objs]
        return fj.concatenate(parts, axis=axis)

    def __len__(self) -> int:
        return 0


def _keep_weak(v: Any, weak: bool) -> Operand:
    # A Python scalar stays weak through the reshape, so it promotes as NumPy's r_ lets it.
    o = _op(v)
    if o.tracer is not None:
        return Operand(Tracer(o.tracer.value, o.tracer.trace, weak), None, weak)
    return Operand(None, o.array, weak)


r_ = AxisConcatenator(0, name="r_")
c_ = AxisConcatenator(-1, ndmin=2, trans1d=0, name="c_")


# ---- einsum's '...' and repeated indices -------------------------------------------------------


def canonical_einsum(subscripts: str, operands: Sequence[ArrayLike]) -> tuple[str, list[Any]]:
    """``(spec, operands)`` for ``fj.einsum`` with no ``...`` and no index repeated within an
    operand, meaning what ``np.einsum(subscripts, *operands)`` means: ``...`` becomes letters
    (the operands' ellipsis dimensions broadcast against each other, right-aligned, and lead
    an implicit output), and an index repeated in one operand takes that operand's diagonal
    (``'ii->'`` is a trace, ``'ii->i'`` a diagonal). The output is always explicit."""
    spec = subscripts.replace(" ", "")
    ins, arrow, out = spec.partition("->")
    in_specs = ins.split(",")
    if len(in_specs) != len(operands):
        raise _fail("einsum", f"{len(in_specs)} operand specs in {subscripts!r} for {len(operands)} operands")
    vals = [_value(_op(x, f"operands[{i}]")) for i, x in enumerate(operands)]
    used = set(spec) - set(",->.")
    for s in in_specs + [out]:
        if not builtins.all(c.isalpha() for c in s.replace("...", "", 1)):
            raise _fail("einsum", f"subscripts {subscripts!r}: each operand is letters with at most one '...'")
    free = [c for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz" if c not in used]
    # The ellipsis dimensions: as many as the largest count, broadcast right-aligned.
    counts = [fj.ndim(v) - len(s.replace("...", "")) if "..." in s else 0 for s, v in zip(in_specs, vals)]
    for s, v, k in zip(in_specs, vals, counts):
        if k < 0 or ("..." not in s and len(s) != fj.ndim(v)):
            raise _fail("einsum", f"spec {s!r} does not fit an operand of shape {list(fj.shape(v))}", ShapeError)
    nell = builtins.max(counts, default=0)
    ell = "".join(free[:nell])
    shapes = [fj.shape(v)[s.index("..."):s.index("...") + k] if "..." in s else () for s, v, k in
              zip(in_specs, vals, counts)]
    try:
        ell_shape = np.broadcast_shapes(*shapes)
    except ValueError:
        raise _fail("einsum", f"the '...' dimensions {[list(s) for s in shapes]} do not broadcast together",
                    ShapeError) from None
    specs = []
    for i, (s, v, k) in enumerate(zip(in_specs, vals, counts)):
        if "..." in s:
            p = s.index("...")
            letters = ell[nell - k:]
            if tuple(fj.shape(v)[p:p + k]) != tuple(ell_shape[nell - k:]):  # a size-1 dimension broadcasts
                shp = fj.shape(v)
                vals[i] = fj.broadcast_to(v, shp[:p] + tuple(ell_shape[nell - k:]) + shp[p + k:])
            s = s[:p] + letters + s[p + 3:]
        specs.append(s)
    if arrow:
        out = out.replace("...", ell)
    else:
        joined = "".join(s.replace("...", "") for s in in_specs)
        out = ell + "".join(sorted(c for c in set(joined) if joined.count(c) == 1))
    # An index repeated within one operand: that operand's diagonal over the two axes.
    for i, s in enumerate(specs):
        while len(set(s)) != len(s):
            c = next(c for c in s if s.count(c) > 1)
            p, q = s.index(c), s.index(c, s.index(c) + 1)
            if fj.shape(vals[i])[p] != fj.shape(vals[i])[q]:
                raise _fail("einsum", f"index {c!r} repeated in {s!r} has sizes {fj.shape(vals[i])[p]} and "
                            f"{fj.shape(vals[i])[q]}", ShapeError)
            vals[i] = diagonal(vals[i], 0, p, q)
            s = s[:p] + s[p + 1:q] + s[q + 1:] + c
        specs[i] = s
    if len(set(out)) != len(out) or not set(out) <= set("".join(specs)):
        raise _fail("einsum", f"output {out!r} of {subscripts!r} repeats an index or names one no operand has",
                    ShapeError)
    return ",".join(specs) + "->" + out, vals


# ---- the array API's names beyond NumPy's usual ones -------------------------------------


@numpy_counterpart
def broadcast_arrays(*arrays: ArrayLike) -> list[Any]:
    """The arrays broadcast against each other, as a list (the array API's and NumPy 2's)."""
    shape = np.broadcast_shapes(*[tuple(_op(a, f"arrays[{i}]").shape) for i, a in enumerate(arrays)])
    return [fj.broadcast_to(a, shape) for a in arrays]


@numpy_counterpart
def unstack(x: ArrayLike, /, *, axis: int = 0) -> tuple[Any, ...]:
    """The slices of ``x`` along ``axis``, as a tuple of arrays of one dimension fewer."""
    o = _op(x, "x")
    if not -len(o.shape) <= axis < len(o.shape):
        raise fj.AxisError(f"unstack: axis {axis} is out of range for rank {len(o.shape)} (at {user_location()})")
    v = fj.moveaxis(_value(o), axis, 0)
    return tuple(v[i] for i in range(o.shape[axis]))


@numpy_counterpart
def cumulative_prod(x: ArrayLike, /, *, axis: int | None = None, dtype: Any = None,
                    include_initial: bool = False) -> Any:
    """The array API's cumulative product: ``cumprod`` along ``axis`` (which a 1-D array may
    leave out), with a leading 1 when ``include_initial``."""
    return cumulative("cumulative_prod", cumprod, 1, x, axis, dtype, include_initial)


@numpy_counterpart
def count_nonzero(x: ArrayLike, axis: Any = None, *, keepdims: bool = False) -> Any:
    """How many elements of ``x`` are not zero, over ``axis`` (all when None), as int64."""
    return fj.sum(fj.astype(fj.not_equal(x, 0), fj.int64), axis=axis, keepdims=keepdims)



@numpy_counterpart
def isclose(a: ArrayLike, b: ArrayLike, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False) -> Any:
    """Elementwise ``|a - b| <= atol + rtol * |b|`` (infinities close only to themselves,
    NaN close to NaN only with ``equal_nan``), as ``np.isclose``: a bool array."""
    x, y = _value(_op(a, "a")), _value(_op(b, "b"))
    if not _op(x).dtype.is_inexact:
        x = fj.astype(x, float64)
    close = fj.less_equal(fj.abs(fj.subtract(x, y)), fj.add(atol, fj.multiply(rtol, fj.abs(y))))
    both_finite = fj.logical_and(fj.isfinite(x), fj.isfinite(y))
    close = fj.logical_or(fj.logical_and(close, both_finite), fj.logical_and(fj.logical_not(both_finite),
                                                                               fj.equal(x, y)))
    if equal_nan:
        close = fj.logical_or(close, fj.logical_and(fj.isnan(x), fj.isnan(y)))
    return close


@numpy_counterpart
def allclose(a: ArrayLike, b: ArrayLike, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False) -> Any:
    """Whether every element of ``a`` is close to ``b`` (``isclose``), as ``np.allclose``: a
    0-d bool array (traced inside a function; ``bool()`` of it outside one)."""
    return fj.all(isclose(a, b, rtol, atol, equal_nan))


@numpy_counterpart
def iscomplexobj(x: ArrayLike) -> bool:
    """Whether ``x`` has a complex dtype, as ``np.iscomplexobj`` (a Python bool: dtypes are static)."""
    return _op(x, "x").dtype.is_complex


@numpy_counterpart
def isrealobj(x: ArrayLike) -> bool:
    """Whether ``x`` does not have a complex dtype, as ``np.isrealobj``."""
    return not iscomplexobj(x)


@numpy_counterpart
def iscomplex(x: ArrayLike) -> Any:
    """Elementwise, whether the imaginary part is nonzero, as ``np.iscomplex`` (all False
    for a real array)."""
    v = _value(_op(x, "x"))
    return fj.not_equal(fj.imag(v), 0) if _op(v).dtype.is_complex else fj.zeros(fj.shape(v), dtype=bool_)


@numpy_counterpart
def isreal(x: ArrayLike) -> Any:
    """Elementwise, whether the imaginary part is zero, as ``np.isreal``."""
    return fj.logical_not(iscomplex(x))


@numpy_counterpart
def real_if_close(a: ArrayLike, tol: float = 100) -> Any:
    """``a``'s real part when every imaginary part is within ``tol`` machine epsilons of
    zero, else ``a``, as ``np.real_if_close``. The result's dtype depends on the values, so
    a traced complex array is refused (take ``fj.real`` of it)."""
    o = _op(a, "a")
    if not o.dtype.is_complex:
        return _value(o)
    if o.tracer is not None:
        raise _fail("real_if_close", f"the result's dtype depends on the values of the traced {o.tracer.aval}; "
                    f"take fj.real(a) instead (at {user_location()})")
    arr = np.asarray(_value(o))
    if tol > 1:
        tol = np.finfo(arr.real.dtype).eps * tol
    return arr.real if bool(np.all(np.abs(arr.imag) < tol)) else arr


@numpy_counterpart
def fabs(x: ArrayLike) -> Any:
    """Elementwise absolute value of real numbers, as ``np.fabs`` (a float result; complex
    input is refused, as NumPy's is)."""
    o = _op(x, "x")
    if o.dtype.is_complex:
        raise _fail("fabs", "complex input is not supported (NumPy's fabs refuses it); use fj.abs")
    return fj.abs(_value(o) if o.dtype.is_inexact else fj.astype(_value(o), _float_dtype(o.dtype)))


@numpy_counterpart
def inner(a: ArrayLike, b: ArrayLike) -> Any:
    """The inner product over the last axes, as ``np.inner`` (a product for a 0-d operand)."""
    x, y = _value(_op(a, "a")), _value(_op(b, "b"))
    if fj.ndim(x) == 0 or fj.ndim(y) == 0:
        return fj.multiply(x, y)
    return fj.tensordot(x, y, axes=([-1], [-1]))


@numpy_counterpart
def rollaxis(a: ArrayLike, axis: int, start: int = 0) -> Any:
    """``axis`` moved to lie before position ``start``, as ``np.rollaxis``."""
    v = _value(_op(a, "a"))
    n = fj.ndim(v)
    ax = _axis("rollaxis", axis, n)
    st = _static_int("rollaxis", "start", start)
    if not -n <= st <= n:
        raise _fail("rollaxis", f"start={st} is out of bounds for an array of rank {n}", ShapeError)
    st %= n + 1
    if ax < st:
        st -= 1
    return v if ax == st else fj.moveaxis(v, ax, st)


@numpy_counterpart
def row_stack(tup: Sequence[ArrayLike], *, dtype: Any = None, casting: str = "same_kind") -> Any:
    """``vstack`` under NumPy's older name."""
    return vstack(tup, dtype=dtype, casting=casting)


@numpy_counterpart
def gradient(f: ArrayLike, *varargs: Any, axis: Any = None, edge_order: int = 1) -> Any:
    """The gradient of ``f`` sampled on a grid, as ``np.gradient``: second-order central
    differences inside, first- or second-order (``edge_order``) one-sided ones at the
    edges; ``varargs`` gives the spacing, one scalar for every axis or one per axis (scalars
    or coordinate arrays of the axis's length). One array per axis, a tuple when there are
    several (NumPy 2)."""
    v = _value(_op(f, "f"))
    if not _op(v).dtype.is_inexact:
        v = fj.astype(v, float64)
    n = fj.ndim(v)
    axes = tuple(range(n)) if axis is None else (
        (_axis("gradient", axis, n),) if not isinstance(axis, (tuple, list)) else
        tuple(_axis("gradient", a, n) for a in axis))
    if len(varargs) == 0:
        spacing: list[Any] = [1.0] * len(axes)
    elif len(varargs) == 1 and fj.ndim(_value(_op(varargs[0]))) == 0:
        spacing = [varargs[0]] * len(axes)
    elif len(varargs) == len(axes):
        spacing = list(varargs)
    else:
        raise _fail("gradient", f"{len(varargs)} spacings for {len(axes)} axes: give one scalar, or one per axis")
    if edge_order not in (1, 2):
        raise _fail("gradient", f"edge_order must be 1 or 2, got {edge_order}", ShapeError)
    out = []
    for ax, h in zip(axes, spacing):
        size = fj.shape(v)[ax]
        if size < edge_order + 1:
            raise _fail("gradient", f"axis {ax} has {size} samples; at least edge_order + 1 = {edge_order + 1} are "
                        "needed", ShapeError)

        def at(key: Any) -> Any:
            return _index(v, ax, key)
        shape = [1] * n
        shape[ax] = -1
        hv = _value(_op(h, "spacing"))
        if fj.ndim(hv) == 0:
            inner_d = fj.divide(fj.subtract(at(builtins.slice(2, None)), at(builtins.slice(None, -2))),
                                fj.multiply(2.0, hv))
            if edge_order == 1:
                first = fj.divide(fj.subtract(at(builtins.slice(1, 2)), at(builtins.slice(0, 1))), hv)
                last = fj.divide(fj.subtract(at(builtins.slice(-1, None)), at(builtins.slice(-2, -1))), hv)
            else:
                first = fj.divide(fj.add(fj.add(fj.multiply(-1.5, at(builtins.slice(0, 1))),
                                                fj.multiply(2.0, at(builtins.slice(1, 2)))),
                                         fj.multiply(-0.5, at(builtins.slice(2, 3)))), hv)
                last = fj.divide(fj.add(fj.add(fj.multiply(0.5, at(builtins.slice(-3, -2))),
                                               fj.multiply(-2.0, at(builtins.slice(-2, -1)))),
                                        fj.multiply(1.5, at(builtins.slice(-1, None)))), hv)
        else:  # coordinates: NumPy's non-uniform second-order formula inside
            if fj.shape(hv) != (size,):
                raise _fail("gradient", f"the coordinates of axis {ax} have shape {fj.shape(hv)}, not ({size},)",
                            ShapeError)
            dx = fj.reshape(diff(hv), tuple(shape))
            d1, d2 = dx[tuple(builtins.slice(None, -1) if i == ax else builtins.slice(None) for i in range(n))], \
                dx[tuple(builtins.slice(1, None) if i == ax else builtins.slice(None) for i in range(n))]
            a_ = fj.negative(fj.divide(d2, fj.multiply(d1, fj.add(d1, d2))))
            b_ = fj.divide(fj.subtract(d2, d1), fj.multiply(d1, d2))
            c_ = fj.divide(d1, fj.multiply(d2, fj.add(d1, d2)))
            inner_d = fj.add(fj.add(fj.multiply(a_, at(builtins.slice(None, -2))),
                                    fj.multiply(b_, at(builtins.slice(1, -1)))),
                             fj.multiply(c_, at(builtins.slice(2, None))))
            if edge_order != 1:
                raise _fail("gradient", "edge_order=2 with coordinate arrays is not supported; use edge_order=1")
            first = fj.divide(fj.subtract(at(builtins.slice(1, 2)), at(builtins.slice(0, 1))),
                              _index(dx, ax, builtins.slice(0, 1)))
            last = fj.divide(fj.subtract(at(builtins.slice(-1, None)), at(builtins.slice(-2, -1))),
                             _index(dx, ax, builtins.slice(-1, None)))
        out.append(fj.concatenate([first, inner_d, last], axis=ax))
    return out[0] if len(out) == 1 else tuple(out)
