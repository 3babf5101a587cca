"""Elementwise functions, NumPy's ufuncs: arithmetic, powers, exponentials and logarithms,
trigonometric and hyperbolic functions, rounding, comparisons, logical and bitwise
operations, complex parts, floating-point tests, ``clip`` and the three-argument ``where``
(``fj.where``, which also takes the one-argument form, is ``sorting_searching.where``).
The array API's names (``pow``, ``atan2``, ``asin``...) sit beside NumPy's.

Dtypes follow NumPy 2: arrays promote with ``np.result_type``, Python scalars are weak,
integer true division and transcendental functions of integers give float64 (of bools
float16). Where NumPy's function is not differentiable at a point, the gradient is a finite
choice (``hypot`` at (0, 0) and ``sinc`` at 0: 0, where JAX 0.10 gives 0.5 and 0; ``logaddexp``
at a tie: half to each side, as JAX).
"""

from __future__ import annotations

import builtins
import math
from typing import Any

import numpy as np

from flowjit.ir.dtypes import DType, bool_, float16, float32, float64, int8, int64
from flowjit.ir.errors import FlowjitTypeError
from flowjit.tracer.core import bind, user_location
from flowjit.tracer.custom_gradients import custom_jvp
from flowjit.tracer.numpy.conversion import asarray, astype
from flowjit.tracer.numpy.counterparts import numpy_counterpart
from flowjit.tracer.numpy.creation import full_like, zeros, zeros_like
from flowjit.tracer.numpy.layout import shape
from flowjit.tracer.numpy.operands import (
    ArrayLike,
    apply,
    as_operand,
    bad_argument,
    cast,
    fits,
    float_dtype,
    operand_value,
    promote,
    to_bool,
)

__all__: list[str] = [
    "abs", "absolute", "acos", "acosh", "add", "angle", "arccos", "arccosh", "arcsin", "arcsinh", "arctan", "arctan2",
    "arctanh", "asin", "asinh", "atan", "atan2", "atanh", "bitwise_and", "bitwise_invert", "bitwise_left_shift",
    "bitwise_not", "bitwise_or", "bitwise_right_shift", "bitwise_xor", "cbrt", "ceil", "clip", "conj", "conjugate",
    "copysign", "cos", "cosh", "deg2rad", "degrees", "divide", "equal", "erf", "exp", "exp2", "expm1", "fabs",
    "floor", "floor_divide", "fmax", "fmin", "greater", "greater_equal", "heaviside", "hypot", "imag", "invert",
    "isclose", "iscomplex", "iscomplexobj", "isfinite", "isinf", "isnan", "isreal", "isrealobj", "left_shift", "less",
    "less_equal", "log", "log10", "log1p", "log2", "logaddexp", "logaddexp2", "logical_and", "logical_not",
    "logical_or", "logical_xor", "logistic", "maximum", "minimum", "mod", "multiply", "nan_to_num", "negative",
    "nextafter", "not_equal", "positive", "pow", "power", "rad2deg", "radians", "real", "real_if_close", "reciprocal",
    "remainder", "right_shift", "rint", "round", "rsqrt", "sign", "signbit", "sin", "sinc", "sinh", "sqrt", "square",
    "subtract", "tan", "tanh", "true_divide", "trunc",
]


def _unary_float(prim: str):
    def fn(x: ArrayLike) -> Any:
        o = as_operand(x)
        return apply(prim, [cast(o, float_dtype(o.dtype))])
    fn.__name__ = prim
    fn.__doc__ = f"Elementwise ``{prim}``; integer and bool inputs are promoted to float as in NumPy."
    return fn


def _unary_same(prim: str, bool_identity: bool = False):
    def fn(x: ArrayLike) -> Any:
        o = as_operand(x)
        if bool_identity and o.dtype.is_bool:
            return operand_value(o)  # np.abs of bool is the bool itself
        return apply(prim, [o])
    fn.__name__ = prim
    fn.__doc__ = f"Elementwise ``{prim}``, keeping the input dtype."
    return fn


def _binary(prim: str, float_only: bool = False, bool_prim: str | None = None):
    def fn(x: ArrayLike, y: ArrayLike) -> Any:
        a, b = as_operand(x, "x"), as_operand(y, "y")
        d = promote(a, b)
        if float_only:
            # True division of bools and ints is float64 in NumPy (exp of bool or int8 is float16).
            d = float64 if (d.is_bool or d.is_int) and prim == "div" else float_dtype(d)
        elif d.is_bool and bool_prim is not None:
            # NumPy's bool loops: + and maximum are logical or, * and minimum logical and.
            return apply(bool_prim, [cast(a, d), cast(b, d)])
        elif d.is_bool and prim in ("floor_div", "mod", "pow"):
            d = int8  # NumPy has no bool loop for these: its first match is int8's
        return apply(prim, [cast(a, d), cast(b, d)])
    fn.__name__ = prim
    fn.__doc__ = f"Elementwise ``{prim}`` with NumPy broadcasting and dtype promotion."
    return fn


def _compare(prim: str):
    def fn(x: ArrayLike, y: ArrayLike) -> Any:
        a, b = as_operand(x, "x"), as_operand(y, "y")
        d = promote(a, b)
        if not (fits(a, d) and fits(b, d)):
            d = int64  # NumPy 2 compares a huge Python int with an int32 array exactly
        return bind(prim, [cast(a, d), cast(b, d)])
    fn.__name__ = prim
    fn.__doc__ = f"Elementwise comparison ``{prim}``; the result is bool."
    return fn


def _logical(prim: str):
    def fn(x: ArrayLike, y: ArrayLike) -> Any:
        return bind(prim, [to_bool(as_operand(x, "x")), to_bool(as_operand(y, "y"))])
    fn.__name__ = prim
    fn.__doc__ = f"Elementwise ``{prim}`` of the truth values of x and y."
    return fn


exp = _unary_float("exp")
expm1 = _unary_float("expm1")
log = _unary_float("log")
log1p = _unary_float("log1p")
sqrt = _unary_float("sqrt")
rsqrt = _unary_float("rsqrt")
sin = _unary_float("sin")
cos = _unary_float("cos")
tanh = _unary_float("tanh")
logistic = _unary_float("logistic")
erf = _unary_float("erf")
# The inverse trigonometric and hyperbolic functions under both the array API's names and
# NumPy's (np.arcsin on a traced array finds ``arcsin`` here).
asin = arcsin = _unary_float("asin")
acos = arccos = _unary_float("acos")
atan = arctan = _unary_float("atan")
sinh = _unary_float("sinh")
cosh = _unary_float("cosh")
asinh = arcsinh = _unary_float("asinh")
acosh = arccosh = _unary_float("acosh")
atanh = arctanh = _unary_float("atanh")
negative = _unary_same("neg")
sign = _unary_same("sign")
absolute = _unary_same("abs", bool_identity=True)
abs = absolute  # noqa: A001 - NumPy's name

add = _binary("add", bool_prim="logical_or")
subtract = _binary("sub")
multiply = _binary("mul", bool_prim="logical_and")
true_divide = divide = _binary("div", float_only=True)
floor_divide = _binary("floor_div")
mod = remainder = _binary("mod")
maximum = _binary("maximum", bool_prim="logical_or")
minimum = _binary("minimum", bool_prim="logical_and")
arctan2 = _binary("atan2", float_only=True)
_hypot = _binary("hypot", float_only=True)


def hypot(x1: ArrayLike, x2: ArrayLike) -> Any:
    """``sqrt(x1**2 + x2**2)`` elementwise without overflow or underflow: C's hypot, as
    ``np.hypot``; inf where either input is infinite. Its gradient at (0, 0) is 0, and in an
    infinite input that input's sign (the limit), where JAX and PyTorch give NaN."""
    return _hypot(x1, x2)


def nextafter(x1: ArrayLike, x2: ArrayLike) -> Any:
    """The next representable float after x1 toward x2, elementwise (integers promote to
    float64, as in NumPy); float32 and float64 only."""
    a, b = as_operand(x1, "x1"), as_operand(x2, "x2")
    d = float_dtype(promote(a, b))
    if d not in (float32, float64):
        raise FlowjitTypeError(f"nextafter: x1 and x2 promote to {d.name} at {user_location()}; nextafter takes "
                               "float32 or float64 (cast float16 and bool inputs with .astype(fj.float32))")
    return apply("nextafter", [cast(a, d), cast(b, d)])
equal = _compare("eq")
not_equal = _compare("ne")
less = _compare("lt")
less_equal = _compare("le")
greater = _compare("gt")
greater_equal = _compare("ge")
logical_and = _logical("logical_and")
logical_or = _logical("logical_or")
logical_xor = _logical("logical_xor")


def _bitwise(prim: str, name: str, bool_prim: str | None):
    def fn(x1: ArrayLike, x2: ArrayLike) -> Any:
        a, b = as_operand(x1, "x1"), as_operand(x2, "x2")
        d = promote(a, b)
        if d.is_float:
            raise FlowjitTypeError(
                f"{name}: x1 ({a.dtype.name}) and x2 ({b.dtype.name}) promote to {d.name} at {user_location()}; "
                f"{name} takes integer{' or bool' if bool_prim else ''} arrays (cast with .astype(fj.int64))")
        if d.is_bool:
            if bool_prim is not None:
                return bind(bool_prim, [cast(a, d), cast(b, d)])
            d = int8  # NumPy shifts bools as int8, its first integer loop
        return apply(prim, [cast(a, d), cast(b, d)])
    fn.__name__ = name
    fn.__doc__ = (f"Elementwise ``{name}`` of integers (NumPy's ``{name}``; the array API's "
                  f"``bitwise_{name.removeprefix('bitwise_')}``) with NumPy's promotion.")
    return fn


bitwise_and = _bitwise("bitwise_and", "bitwise_and", "logical_and")
bitwise_or = _bitwise("bitwise_or", "bitwise_or", "logical_or")
bitwise_xor = _bitwise("bitwise_xor", "bitwise_xor", "logical_xor")
# A shift by a negative amount or by the width or more gives 0 (-1 for a negative x1
# shifted right), as NumPy does; the standard leaves it undefined.
left_shift = bitwise_left_shift = _bitwise("left_shift", "left_shift", None)
right_shift = bitwise_right_shift = _bitwise("right_shift", "right_shift", None)


def invert(x: ArrayLike) -> Any:
    """Elementwise bitwise not (``~x``): of a bool its logical not, of an int its bits
    flipped (``~x == -x - 1`` for signed ints)."""
    o = as_operand(x, "x")
    if o.dtype.is_float:
        raise FlowjitTypeError(f"invert: x is {o.dtype.name} at {user_location()}; invert (~) takes integer or "
                               f"bool arrays")
    return bind("logical_not" if o.dtype.is_bool else "bitwise_not", [o])


bitwise_not = bitwise_invert = invert


def power(x: ArrayLike, y: ArrayLike) -> Any:
    """``x ** y`` elementwise; an integer to a negative integer power is 0 (or +-1 for +-1)."""
    return _binary("pow")(x, y)


def logical_not(x: ArrayLike) -> Any:
    """Elementwise logical not of the truth value of x."""
    return bind("logical_not", [to_bool(as_operand(x))])


def _rounding(prim: str):
    def fn(x: ArrayLike) -> Any:
        o = as_operand(x)
        if not o.dtype.is_float:
            return operand_value(o)  # integers and bools are already whole, as in NumPy 2
        return apply(prim, [o])
    fn.__name__ = prim
    fn.__doc__ = f"Elementwise ``{prim}``; integer and bool inputs are returned unchanged, as in NumPy 2."
    return fn


floor = _rounding("floor")
ceil = _rounding("ceil")
trunc = _rounding("trunc")


def signbit(x: ArrayLike) -> Any:
    """Whether the sign bit is set, elementwise: true for -0.0, -inf and a NaN with its sign
    bit set (as ``np.signbit``); for integers ``x < 0``, for bools false."""
    o = as_operand(x)
    if o.dtype.is_float:
        return bind("signbit", [o])
    if o.dtype.is_bool:
        return full_like(operand_value(o), False, dtype=bool_)
    return less(operand_value(o), 0)


def rint(x: ArrayLike) -> Any:
    """Round half to even, as ``np.rint``: ints give float64 and bools float16, as in NumPy."""
    o = as_operand(x)
    return apply("round", [cast(o, float_dtype(o.dtype))])


def round(x: ArrayLike, decimals: int = 0) -> Any:  # noqa: A001 - NumPy's name
    """Round half to even to ``decimals`` places, as ``np.round`` (and with its dtypes).

    Integers stay integers (unchanged unless ``decimals`` is negative); bools give float16.
    Like NumPy, it scales by a power of ten, rounds, and scales back.
    """
    decimals = int(decimals)
    o = as_operand(x)
    if o.dtype.is_int and decimals >= 0:
        return operand_value(o)
    if decimals == 0:
        return rint(operand_value(o))
    if o.dtype.is_bool:
        raise FlowjitTypeError(f"round: decimals={decimals} on a bool array is not supported; cast it first")
    f = float(10.0 ** builtins.abs(decimals))
    xf = operand_value(cast(o, float64)) if o.dtype.is_int else operand_value(o)
    if decimals > 0:
        r = divide(rint(multiply(xf, f)), f)
    else:
        r = multiply(rint(divide(xf, f)), f)
    return astype(r, o.dtype) if o.dtype.is_int else r


def _float_predicate(prim: str, default: bool):
    def fn(x: ArrayLike) -> Any:
        o = as_operand(x)
        if not o.dtype.is_inexact:
            return full_like(operand_value(o), default, dtype=bool_)
        return bind(prim, [o])
    fn.__name__ = prim
    fn.__doc__ = f"Elementwise ``{prim}`` (constant for integer inputs)."
    return fn


isnan = _float_predicate("isnan", False)
isfinite = _float_predicate("isfinite", True)


def real(x: ArrayLike) -> Any:
    """The real part, elementwise: of a complex array its float part (complex64: float32),
    of a real array the array itself."""
    o = as_operand(x)
    return bind("real", [o]) if o.dtype.is_complex else operand_value(o)


def imag(x: ArrayLike) -> Any:
    """The imaginary part, elementwise; zeros of the same dtype for a real array."""
    o = as_operand(x)
    return bind("imag", [o]) if o.dtype.is_complex else zeros_like(operand_value(o))


def conj(x: ArrayLike) -> Any:
    """The complex conjugate, elementwise; a real array is its own conjugate."""
    o = as_operand(x)
    return bind("conj", [o]) if o.dtype.is_complex else operand_value(o)


conjugate = conj


def angle(z: ArrayLike, deg: bool = False) -> Any:
    """The argument of each complex number, ``atan2(imag, real)``, in radians (degrees
    with ``deg=True``), as ``np.angle``: a float array."""
    o = as_operand(z, "z")
    a = arctan2(imag(operand_value(o)), real(operand_value(o)))
    return multiply(a, 180 / math.pi) if deg else a


def isinf(x: ArrayLike) -> Any:
    """Elementwise test for +-inf."""
    return logical_not(logical_or(isfinite(x), isnan(x)))


def square(x: ArrayLike) -> Any:
    """``x * x`` elementwise."""
    o = as_operand(x)
    if o.dtype.is_bool:
        o = cast(o, int8)  # NumPy's square of a bool is int8
    return multiply(operand_value(o), operand_value(o))


def reciprocal(x: ArrayLike) -> Any:
    """``1 / x`` elementwise; as ``np.reciprocal``, integers stay integers (1 / x truncated:
    1 for 1, -1 for -1, 0 for larger magnitudes and for 0) and floats keep their dtype."""
    o = as_operand(x)
    if o.dtype.is_bool:
        o = cast(o, int8)  # NumPy's reciprocal of a bool is int8
    if o.dtype.is_unsigned:
        return astype(equal(operand_value(o), 1), o.dtype)  # 1 / x truncated: 1 only for 1
    if o.dtype.is_int:
        return power(operand_value(o), -1)
    return divide(1.0, operand_value(o))


def tan(x: ArrayLike) -> Any:
    """Elementwise tangent, as sin / cos (computed in float32 for float16, then rounded); of
    a complex number -i tanh(iz)."""
    o = as_operand(x)
    d = float_dtype(o.dtype)
    if d.is_complex:
        # tan(z) = -i tanh(iz), with the multiplications by i as exact swaps of the parts:
        # sin(z) / cos(z) is inf / inf = NaN where tan(z) is +-i (a large imaginary part).
        z = operand_value(o)
        w = tanh(bind("complex", [negative(imag(z)), real(z)]))
        return bind("complex", [imag(w), negative(real(w))])
    xf = operand_value(cast(o, float32 if d == float16 else d))
    return astype(divide(sin(xf), cos(xf)), d)


def clip(x: ArrayLike, /, min: ArrayLike = None, max: ArrayLike = None, *,  # noqa: A002
         a_min: ArrayLike = None, a_max: ArrayLike = None) -> Any:
    """Limit x to [min, max] elementwise; either bound may be None (``a_min=``/``a_max=``:
    NumPy's older names for them)."""
    a_min = a_min if min is None else min
    a_max = a_max if max is None else max
    if a_min is not None:
        x = maximum(x, a_min)
    if a_max is not None:
        x = minimum(x, a_max)
    return x


def where(condition: ArrayLike, x: ArrayLike, y: ArrayLike) -> Any:
    """``x`` where ``condition`` holds, else ``y`` (broadcast): an array, as ``np.where`` gives.
    ``fj.where`` (``sorting_searching.where``) also takes the condition alone."""
    c = to_bool(as_operand(condition, "condition"))
    a, b = as_operand(x, "x"), as_operand(y, "y")
    d = promote(a, b)
    return bind("select", [c, cast(a, d), cast(b, d)])


# ---- the array API's names for what NumPy calls otherwise --------------------------------


def pow(x1: ArrayLike, x2: ArrayLike, /) -> Any:  # noqa: A001
    """``x1 ** x2`` elementwise (the array API's name for ``power``)."""
    return power(x1, x2)


def atan2(x1: ArrayLike, x2: ArrayLike, /) -> Any:
    """The angle of the point (x2, x1) (the array API's name for ``arctan2``)."""
    return arctan2(x1, x2)


def positive(x: ArrayLike, /) -> Any:
    """``+x``: the value itself, as an array."""
    return asarray(x)


# ---- NumPy's composites, written on the functions above ----------------------------------


def _floats(*xs: ArrayLike) -> tuple[DType, list[Any]]:
    """The inputs promoted together and to NumPy's float dtype for a transcendental function."""
    ops = [as_operand(x, f"x{i + 1}") for i, x in enumerate(xs)]
    d = float_dtype(promote(*ops))
    return d, [operand_value(cast(o, d)) for o in ops]


def _in_double(fn: Any, d: DType, *xs: Any) -> Any:
    # float16 and float32 compute in float64 and round once, which makes a composite of
    # several roundings (log(x) / ln 2) as accurate as NumPy's single libm call.
    if d in (float16, float32):
        return astype(fn(*[astype(x, float64) for x in xs]), d)
    return fn(*xs)


def _ufunc(fn: Any) -> Any:
    """Register ``fn`` as the counterpart of NumPy's ufunc of the same name."""
    return numpy_counterpart(fn)


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
    same = equal(a, b)
    # At a tie (also inf == inf) the larger is both halves.
    big = where(same, add(multiply(a, 0.5), multiply(b, 0.5)), maximum(a, b))
    gap = where(same, 0, subtract(a, b))
    r = add(big, softplus(negative(absolute(gap))))
    return where(logical_or(isnan(a), isnan(b)), add(a, b), r)


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
        # weight(a - out) is 1/2 at a tie too, and smooth there. Where a is the result (a
        # is +inf, or b is -inf or too small to count) a - out is inf - inf or 0: a's
        # share is 1, or 1/2 where b is the result too (inf == inf).
        w = where(equal(a, out), where(equal(b, out), 0.5, 1.0), weight(subtract(a, out)))
        return out, add(multiply(ta, w), multiply(tb, subtract(1.0, w)))
    return f


_logaddexp_e = _with_smooth_derivative(lambda a, b: _logaddexp(a, b, lambda t: log1p(exp(t))), exp)
_logaddexp_2 = _with_smooth_derivative(
    lambda a, b: _logaddexp(a, b, lambda t: multiply(log1p(exp2(t)), 1 / math.log(2))), lambda t: exp2(t))


def _nan_aware(pick: Any):
    def fn(x1: ArrayLike, x2: ArrayLike) -> Any:
        a, b = as_operand(x1, "x1"), as_operand(x2, "x2")
        d = promote(a, b)
        av, bv = operand_value(cast(a, d)), operand_value(cast(b, d))
        r = pick(av, bv)
        if not d.is_float:
            return r
        return where(isnan(bv), av, where(isnan(av), bv, r))
    return fn


def fmax(x1: ArrayLike, x2: ArrayLike) -> Any:
    """Elementwise maximum that ignores a NaN (returns the other input), as ``np.fmax``."""
    return _nan_aware(maximum)(x1, x2)


def fmin(x1: ArrayLike, x2: ArrayLike) -> Any:
    """Elementwise minimum that ignores a NaN (returns the other input), as ``np.fmin``."""
    return _nan_aware(minimum)(x1, x2)


_ufunc(fmax)
_ufunc(fmin)


@_ufunc
def exp2(x: ArrayLike) -> Any:
    """``2**x`` elementwise, as ``np.exp2`` (ints give float64)."""
    d, (a,) = _floats(x)
    if d in (float16, float32):
        # exp(x ln 2) in float64 errs by |x| ulps of float64, far below float32's rounding,
        # and exp is vectorized where pow is a libm call per element.
        return astype(exp(multiply(astype(a, float64), math.log(2))), d)
    return power(astype(2, d), a)


@_ufunc
def log2(x: ArrayLike) -> Any:
    """Base-2 logarithm elementwise, as ``np.log2`` (float64 within an ulp or two of NumPy's;
    float32 computed in float64 and rounded once)."""
    d, (a,) = _floats(x)
    return _in_double(lambda v: divide(log(v), math.log(2)), d, a)


@_ufunc
def log10(x: ArrayLike) -> Any:
    """Base-10 logarithm elementwise, as ``np.log10`` (float64 within an ulp or two of NumPy's)."""
    d, (a,) = _floats(x)
    return _in_double(lambda v: divide(log(v), math.log(10)), d, a)


def _scale(x: ArrayLike, num: float, den: float) -> Any:
    d, (a,) = _floats(x)
    # NumPy multiplies by the constant num / den rounded in the array's own dtype.
    c = d.np.type(num) / d.np.type(den) if d != float16 else np.float32(num) / np.float32(den)
    return multiply(a, astype(c, d))


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


_cbrt = _unary_float("cbrt")


def cbrt(x: ArrayLike) -> Any:
    """The real cube root elementwise, as ``np.cbrt``: negative inputs give negative roots,
    -0.0 gives -0.0, correctly rounded (float16 and float32 through float64, rounded once).
    At 0, where the derivative is infinite (JAX gives inf), the gradient is 0, not the NaN of
    0 * inf; at an infinity it is the derivative's limit, 0, as JAX's."""
    return _cbrt(x)


@numpy_counterpart
def sinc(x: ArrayLike) -> Any:
    """``sin(pi x) / (pi x)`` elementwise, 1 at 0 (gradient 0 there), as ``np.sinc`` (NumPy
    2.4's form: integers and bools become float64 as ``pi * x`` does, and a zero is replaced
    by the float type's epsilon, not 1e-20, which is 0 in float16 and gave NaN there)."""
    y = multiply(np.pi, x)
    d = as_operand(y).dtype
    eps = float(np.finfo(d.np).eps) if d.is_float else 1.0e-20
    y = where(equal(y, 0), eps, y)
    return divide(sin(y), y)


@_ufunc
def heaviside(x1: ArrayLike, x2: ArrayLike) -> Any:
    """The Heaviside step: 0 for x1 < 0, x2 at 0, 1 for x1 > 0, NaN for NaN, as ``np.heaviside``."""
    _, (a, b) = _floats(x1, x2)
    step = where(less(a, 0), 0, where(greater(a, 0), 1, b))
    return where(isnan(a), a, step)


@_ufunc
def copysign(x1: ArrayLike, x2: ArrayLike) -> Any:
    """``|x1|`` with the sign of x2 elementwise, as ``np.copysign``; -0.0 counts as negative.
    The sign bit of a NaN in x2 cannot be read here: a NaN x2 counts as positive."""
    _, (a, b) = _floats(x1, x2)
    # atan2(-0.0, -1) is -pi and atan2(+0.0, -1) is +pi: the sign bit of a zero, with no warning.
    is_negative = where(equal(b, 0), less(arctan2(b, -1), 0), less(b, 0))
    m = absolute(a)
    return where(is_negative, negative(m), m)


@numpy_counterpart
def nan_to_num(x: ArrayLike, copy: bool = True, nan: float = 0.0, posinf: float | None = None,
               neginf: float | None = None) -> Any:
    """NaN, +inf and -inf replaced by ``nan``, ``posinf`` and ``neginf`` (default: the dtype's
    largest and smallest finite values), as ``np.nan_to_num``; integer arrays are returned as is."""
    o = as_operand(x)
    if not o.dtype.is_float:
        return operand_value(o)
    info = np.finfo(o.dtype.np)
    v = operand_value(o)
    r = where(isnan(v), nan, v)
    r = where(equal(v, np.inf), info.max if posinf is None else posinf, r)
    return where(equal(v, -np.inf), info.min if neginf is None else neginf, r)


@numpy_counterpart
def isclose(a: ArrayLike, b: ArrayLike, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False) -> Any:
    """Elementwise ``|a - b| <= atol + rtol * |b|`` (infinities close only to themselves,
    NaN close to NaN only with ``equal_nan``), as ``np.isclose``: a bool array."""
    x, y = operand_value(as_operand(a, "a")), operand_value(as_operand(b, "b"))
    if not as_operand(x).dtype.is_inexact:
        x = astype(x, float64)
    close = less_equal(abs(subtract(x, y)), add(atol, multiply(rtol, abs(y))))
    both_finite = logical_and(isfinite(x), isfinite(y))
    close = logical_or(logical_and(close, both_finite), logical_and(logical_not(both_finite), equal(x, y)))
    if equal_nan:
        close = logical_or(close, logical_and(isnan(x), isnan(y)))
    return close


@numpy_counterpart
def iscomplexobj(x: ArrayLike) -> bool:
    """Whether ``x`` has a complex dtype, as ``np.iscomplexobj`` (a Python bool: dtypes are static)."""
    return as_operand(x, "x").dtype.is_complex


@numpy_counterpart
def isrealobj(x: ArrayLike) -> bool:
    """Whether ``x`` does not have a complex dtype, as ``np.isrealobj``."""
    return not iscomplexobj(x)


@numpy_counterpart
def iscomplex(x: ArrayLike) -> Any:
    """Elementwise, whether the imaginary part is nonzero, as ``np.iscomplex`` (all False
    for a real array)."""
    v = operand_value(as_operand(x, "x"))
    return not_equal(imag(v), 0) if as_operand(v).dtype.is_complex else zeros(shape(v), dtype=bool_)


@numpy_counterpart
def isreal(x: ArrayLike) -> Any:
    """Elementwise, whether the imaginary part is zero, as ``np.isreal``."""
    return logical_not(iscomplex(x))


@numpy_counterpart
def real_if_close(a: ArrayLike, tol: float = 100) -> Any:
    """``a``'s real part when every imaginary part is within ``tol`` machine epsilons of
    zero, else ``a``, as ``np.real_if_close``. The result's dtype depends on the values, so
    a traced complex array is refused (take ``fj.real`` of it)."""
    o = as_operand(a, "a")
    if not o.dtype.is_complex:
        return operand_value(o)
    if o.tracer is not None:
        raise bad_argument("real_if_close", f"the result's dtype depends on the values of the traced {o.tracer.aval}; "
                           f"take fj.real(a) instead (at {user_location()})")
    arr = np.asarray(operand_value(o))
    if tol > 1:
        tol = np.finfo(arr.real.dtype).eps * tol
    return arr.real if bool(np.all(np.abs(arr.imag) < tol)) else arr


@numpy_counterpart
def fabs(x: ArrayLike) -> Any:
    """Elementwise absolute value of real numbers, as ``np.fabs`` (a float result; complex
    input is refused, as NumPy's is)."""
    o = as_operand(x, "x")
    if o.dtype.is_complex:
        raise bad_argument("fabs", "complex input is not supported (NumPy's fabs refuses it); use fj.abs")
    return abs(operand_value(o) if o.dtype.is_inexact else astype(operand_value(o), float_dtype(o.dtype)))
