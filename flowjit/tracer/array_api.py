"""The NumPy-like surface: ``fj.exp``, ``fj.where``, ``fj.einsum``... and Tracer operators.

Every function accepts Tracers, NumPy arrays, Python scalars and rectangular lists; inside
a trace it records IR, outside it computes at once (through the same primitives, so the
two agree). Dtypes follow NumPy 2: arrays promote with ``np.result_type``, Python scalars
are weak, integer true division and transcendental functions of integers give float64.
Where NumPy widens a sum of int32 or bool to int64, so do these.
"""

from __future__ import annotations

import builtins
import contextlib
import functools
import inspect
import math
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from flowjit.ir.dtypes import (
    DType,
    bool_,
    default_float,
    float16,
    float32,
    float64,
    int8,
    int64,
    promote_types,
    register_constructor,
    uint64,
)
from flowjit.ir.dtypes import dtype as as_dtype
from flowjit.ir.errors import AxisError, FlowjitTypeError, ShapeError, TracerError
from flowjit.tracer.core import Operand, Tracer, bind, host_array_from_dlpack, operand, user_location
from flowjit.tracer.core import device as device_block

ArrayLike = Any

# ---- operand helpers --------------------------------------------------------------------


def _op(x: ArrayLike, name: str = "x") -> Operand:
    return x if isinstance(x, Operand) else operand(x, name)


def _value(o: Operand) -> Any:
    """Back from an Operand to what users hold: a Tracer or an ndarray."""
    return o.tracer if o.tracer is not None else o.array


def _cast(o: Operand, d: DType, check: bool = True) -> Operand:
    if o.dtype == d:
        return o
    if o.tracer is None:
        if check and not _fits(o, d):
            # NumPy 2 (NEP 50) refuses a Python int that the array's dtype cannot hold.
            raise OverflowError(f"Python integer {int(o.array)} out of bounds for {d.name}")
        with np.errstate(all="ignore"):
            return Operand(None, np.asarray(o.array).astype(d.np), o.weak)
    return _op_result(bind("cast", [o], {"dtype": d}, weak=o.weak))


def _fits(o: Operand, d: DType) -> bool:
    """False for a concrete weak Python int that ``d`` (an integer dtype) cannot represent."""
    if not (o.weak and o.tracer is None and o.dtype.is_int and d.is_int):
        return True
    info = np.iinfo(d.np)
    return builtins.bool(np.all((o.array >= info.min) & (o.array <= info.max)))


def _op_result(x: Any) -> Operand:
    return operand(x)


def _strong(o: Operand) -> Operand:
    """``o`` as an array of fixed dtype: an explicit dtype (astype, full) ends Python-scalar weakness."""
    if not o.weak:
        return o
    if o.tracer is not None:
        return Operand(Tracer(o.tracer.value, o.tracer.trace, False), None, False)
    return Operand(None, o.array, False)


def _promote(*ops: Operand) -> DType:
    return promote_types([o.dtype for o in ops], [o.weak for o in ops])


def _float_dtype(d: DType) -> DType:
    # NumPy computes transcendental functions of bool in float16 and of ints in float64.
    if d.is_bool:
        return float16
    return default_float(d)


def _apply(prim: str, ops: Sequence[Operand], attrs: dict | None = None) -> Any:
    weak = builtins.all(o.weak for o in ops)
    return bind(prim, list(ops), attrs or {}, weak=weak)


def _unary_float(prim: str):
    def fn(x: ArrayLike) -> Any:
        o = _op(x)
        return _apply(prim, [_cast(o, _float_dtype(o.dtype))])
    fn.__name__ = prim
    fn.__doc__ = f"Elementwise ``{prim}``; integer and bool inputs are promoted to float as in NumPy."
    return fn


def _unary_same(prim: str, bool_identity: bool = False):
    def fn(x: ArrayLike) -> Any:
        o = _op(x)
        if bool_identity and o.dtype.is_bool:
            return _value(o)  # np.abs of bool is the bool itself
        return _apply(prim, [o])
    fn.__name__ = prim
    fn.__doc__ = f"Elementwise ``{prim}``, keeping the input dtype."
    return fn


def _binary(prim: str, float_only: bool = False, bool_prim: str | None = None):
    def fn(x: ArrayLike, y: ArrayLike) -> Any:
        a, b = _op(x, "x"), _op(y, "y")
        d = _promote(a, b)
        if float_only:
            # True division of bools and ints is float64 in NumPy (exp of bool or int8 is float16).
            d = float64 if (d.is_bool or d.is_int) and prim == "div" else _float_dtype(d)
        elif d.is_bool and bool_prim is not None:
            # NumPy's bool loops: + and maximum are logical or, * and minimum logical and.
            return _apply(bool_prim, [_cast(a, d), _cast(b, d)])
        elif d.is_bool and prim in ("floor_div", "mod", "pow"):
            d = int8  # NumPy has no bool loop for these: its first match is int8's
        return _apply(prim, [_cast(a, d), _cast(b, d)])
    fn.__name__ = prim
    fn.__doc__ = f"Elementwise ``{prim}`` with NumPy broadcasting and dtype promotion."
    return fn


def _compare(prim: str):
    def fn(x: ArrayLike, y: ArrayLike) -> Any:
        a, b = _op(x, "x"), _op(y, "y")
        d = _promote(a, b)
        if not (_fits(a, d) and _fits(b, d)):
            d = int64  # NumPy 2 compares a huge Python int with an int32 array exactly
        return bind(prim, [_cast(a, d), _cast(b, d)])
    fn.__name__ = prim
    fn.__doc__ = f"Elementwise comparison ``{prim}``; the result is bool."
    return fn


def _to_bool(o: Operand) -> Operand:
    if o.dtype == bool_:
        return o
    return _op_result(bind("ne", [o, _cast(Operand(None, np.asarray(0), True), o.dtype)]))


def _logical(prim: str):
    def fn(x: ArrayLike, y: ArrayLike) -> Any:
        return bind(prim, [_to_bool(_op(x, "x")), _to_bool(_op(y, "y"))])
    fn.__name__ = prim
    fn.__doc__ = f"Elementwise ``{prim}`` of the truth values of x and y."
    return fn


# ---- elementwise ---------------------------------------------------------------------------

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


def nextafter(x1: ArrayLike, x2: ArrayLike) -> Any:
    """The next representable float after x1 toward x2, elementwise (integers promote to
    float64, as in NumPy); float32 and float64 only."""
    a, b = _op(x1, "x1"), _op(x2, "x2")
    d = _float_dtype(_promote(a, b))
    if d not in (float32, float64):
        raise FlowjitTypeError(f"nextafter: x1 and x2 promote to {d.name} at {user_location()}; nextafter takes "
                               "float32 or float64 (cast float16 and bool inputs with .astype(fj.float32))")
    return _apply("nextafter", [_cast(a, d), _cast(b, d)])
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
        a, b = _op(x1, "x1"), _op(x2, "x2")
        d = _promote(a, b)
        if d.is_float:
            raise FlowjitTypeError(
                f"{name}: x1 ({a.dtype.name}) and x2 ({b.dtype.name}) promote to {d.name} at {user_location()}; "
                f"{name} takes integer{' or bool' if bool_prim else ''} arrays (cast with .astype(fj.int64))")
        if d.is_bool:
            if bool_prim is not None:
                return bind(bool_prim, [_cast(a, d), _cast(b, d)])
            d = int8  # NumPy shifts bools as int8, its first integer loop
        return _apply(prim, [_cast(a, d), _cast(b, d)])
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
    o = _op(x, "x")
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
    return bind("logical_not", [_to_bool(_op(x))])


def _rounding(prim: str):
    def fn(x: ArrayLike) -> Any:
        o = _op(x)
        if not o.dtype.is_float:
            return _value(o)  # integers and bools are already whole, as in NumPy 2
        return _apply(prim, [o])
    fn.__name__ = prim
    fn.__doc__ = f"Elementwise ``{prim}``; integer and bool inputs are returned unchanged, as in NumPy 2."
    return fn


floor = _rounding("floor")
ceil = _rounding("ceil")
trunc = _rounding("trunc")


def signbit(x: ArrayLike) -> Any:
    """Whether the sign bit is set, elementwise: true for -0.0, -inf and a NaN with its sign
    bit set (as ``np.signbit``); for integers ``x < 0``, for bools false."""
    o = _op(x)
    if o.dtype.is_float:
        return bind("signbit", [o])
    if o.dtype.is_bool:
        return full_like(_value(o), False, dtype=bool_)
    return less(_value(o), 0)


def rint(x: ArrayLike) -> Any:
    """Round half to even, as ``np.rint``: ints give float64 and bools float16, as in NumPy."""
    o = _op(x)
    return _apply("round", [_cast(o, _float_dtype(o.dtype))])


def round(x: ArrayLike, decimals: int = 0) -> Any:  # noqa: A001 - NumPy's name
    """Round half to even to ``decimals`` places, as ``np.round`` (and with its dtypes).

    Integers stay integers (unchanged unless ``decimals`` is negative); bools give float16.
    Like NumPy, it scales by a power of ten, rounds, and scales back.
    """
    decimals = int(decimals)
    o = _op(x)
    if o.dtype.is_int and decimals >= 0:
        return _value(o)
    if decimals == 0:
        return rint(_value(o))
    if o.dtype.is_bool:
        raise FlowjitTypeError(f"round: decimals={decimals} on a bool array is not supported; cast it first")
    f = float(10.0 ** builtins.abs(decimals))
    xf = _value(_cast(o, float64)) if o.dtype.is_int else _value(o)
    if decimals > 0:
        r = divide(rint(multiply(xf, f)), f)
    else:
        r = multiply(rint(divide(xf, f)), f)
    return astype(r, o.dtype) if o.dtype.is_int else r


def _float_predicate(prim: str, default: bool):
    def fn(x: ArrayLike) -> Any:
        o = _op(x)
        if not o.dtype.is_inexact:
            return full_like(_value(o), default, dtype=bool_)
        return bind(prim, [o])
    fn.__name__ = prim
    fn.__doc__ = f"Elementwise ``{prim}`` (constant for integer inputs)."
    return fn


isnan = _float_predicate("isnan", False)
isfinite = _float_predicate("isfinite", True)


def real(x: ArrayLike) -> Any:
    """The real part, elementwise: of a complex array its float part (complex64: float32),
    of a real array the array itself."""
    o = _op(x)
    return bind("real", [o]) if o.dtype.is_complex else _value(o)


def imag(x: ArrayLike) -> Any:
    """The imaginary part, elementwise; zeros of the same dtype for a real array."""
    o = _op(x)
    return bind("imag", [o]) if o.dtype.is_complex else zeros_like(_value(o))


def conj(x: ArrayLike) -> Any:
    """The complex conjugate, elementwise; a real array is its own conjugate."""
    o = _op(x)
    return bind("conj", [o]) if o.dtype.is_complex else _value(o)


conjugate = conj


def angle(z: ArrayLike, deg: bool = False) -> Any:
    """The argument of each complex number, ``atan2(imag, real)``, in radians (degrees
    with ``deg=True``), as ``np.angle``: a float array."""
    o = _op(z, "z")
    a = arctan2(imag(_value(o)), real(_value(o)))
    return multiply(a, 180 / math.pi) if deg else a


def isinf(x: ArrayLike) -> Any:
    """Elementwise test for +-inf."""
    return logical_not(logical_or(isfinite(x), isnan(x)))


def square(x: ArrayLike) -> Any:
    """``x * x`` elementwise."""
    o = _op(x)
    if o.dtype.is_bool:
        o = _cast(o, int8)  # NumPy's square of a bool is int8
    return multiply(_value(o), _value(o))


def reciprocal(x: ArrayLike) -> Any:
    """``1 / x`` elementwise; as ``np.reciprocal``, integers stay integers (1 / x truncated:
    1 for 1, -1 for -1, 0 for larger magnitudes and for 0) and floats keep their dtype."""
    o = _op(x)
    if o.dtype.is_bool:
        o = _cast(o, int8)  # NumPy's reciprocal of a bool is int8
    if o.dtype.is_unsigned:
        return astype(equal(_value(o), 1), o.dtype)  # 1 / x truncated: 1 only for 1
    if o.dtype.is_int:
        return power(_value(o), -1)
    return divide(1.0, _value(o))


def tan(x: ArrayLike) -> Any:
    """Elementwise tangent, as sin / cos (computed in float32 for float16, then rounded); of
    a complex number -i tanh(iz)."""
    o = _op(x)
    d = _float_dtype(o.dtype)
    if d.is_complex:
        # tan(z) = -i tanh(iz), with the multiplications by i as exact swaps of the parts:
        # sin(z) / cos(z) is inf / inf = NaN where tan(z) is +-i (a large imaginary part).
        z = _value(o)
        w = tanh(bind("complex", [negative(imag(z)), real(z)]))
        return bind("complex", [imag(w), negative(real(w))])
    xf = _value(_cast(o, float32 if d == float16 else d))
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


def where(condition: ArrayLike, x: ArrayLike = None, y: ArrayLike = None) -> Any:
    """``x`` where ``condition`` holds, else ``y`` (broadcast); with neither, the indices
    where ``condition`` holds, ``fj.nonzero(condition)`` (as NumPy; a traced condition then
    needs ``fj.nonzero``'s ``size=``, the number of indices being data-dependent)."""
    if x is None and y is None:
        from flowjit.tracer.sorting import nonzero
        return nonzero(condition)
    if x is None or y is None:
        raise FlowjitTypeError("fj.where: give both x and y, or neither (then it is fj.nonzero(condition))")
    c = _to_bool(_op(condition, "condition"))
    a, b = _op(x, "x"), _op(y, "y")
    d = _promote(a, b)
    return bind("select", [c, _cast(a, d), _cast(b, d)])  # an array, as np.where gives


def astype(x: ArrayLike, dtype: Any, /, *, copy: bool = True, device: Any = None) -> Any:
    """``x`` converted to ``dtype`` (truncating toward zero from float to int). With
    ``copy=False`` a concrete array already of ``dtype`` is returned as it is (the array
    API's meaning); ``device`` places the conversion (``fj.device``)."""
    o = _op(x)
    d = as_dtype(dtype)
    if not copy and o.tracer is None and o.dtype == d and isinstance(x, np.ndarray):
        return x
    if o.dtype.is_complex and not d.is_complex and not d.is_bool:
        # NumPy's warning, once at the user's line (the compiled cast then runs quietly).
        warnings.warn(f"astype: casting {o.dtype.name} to {d.name} discards the imaginary part "
                      f"(at {user_location()}); take fj.real(x) first to say so", np.exceptions.ComplexWarning,
                      stacklevel=2)
    with _on(device):
        out = _value(_strong(_cast(o, d, check=False)))
    if isinstance(out, np.ndarray) and isinstance(x, np.ndarray) and np.may_share_memory(out, x):
        out = out.copy()  # copy=True: never x's own memory
    return out


# ---- creation ------------------------------------------------------------------------------


def _shape_tuple(shape: Any) -> tuple[int, ...]:
    if isinstance(shape, (int, np.integer)):
        return (int(shape),)
    return tuple(int(s) for s in shape)


def asarray(x: ArrayLike, dtype: Any = None, copy: bool | None = None, *, device: Any = None) -> Any:
    """``x`` as an array (a Tracer stays one), optionally converted to ``dtype``, on ``device``
    (as ``fj.device``, like the other creation functions).

    ``copy`` has the array API's meaning: True always returns a new array, False never
    copies and raises ValueError where it would have to (a list, a Python or NumPy scalar,
    another dtype), None copies only where it must. A traced value is immutable, so for it
    only the dtype decides whether ``copy=False`` is possible.
    """
    if device is not None:
        with _on(device):
            return asarray(x, dtype, copy)
    if copy is not None and not isinstance(copy, (bool, np.bool_)):
        raise FlowjitTypeError(f"asarray: copy={copy!r} at {user_location()}; copy must be True, False "
                               "or None")
    target = as_dtype(dtype) if dtype is not None else None
    read = getattr(type(x), "__flowjit_value__", None)
    value = read(x) if read is not None else x
    if copy is False and not isinstance(value, Tracer):
        try:  # NumPy decides whether the object's memory can be used as it is
            if isinstance(value, (list, tuple)):  # a new array, whatever it holds (Tracers too)
                raise ValueError
            if hasattr(value, "__dlpack__") and not hasattr(value, "__array__"):
                value = host_array_from_dlpack(value, "asarray", copy=False)
            value = np.asarray(value, dtype=target.np if target is not None else None, copy=False)
        except ValueError:
            raise ValueError(
                f"asarray(copy=False) at {user_location()}: a {type(value).__name__} cannot become an array "
                f"{'of ' + target.name + ' ' if target is not None else ''}without a copy; pass copy=None "
                "(copy only if needed) or copy=True") from None
    o = _op(value)
    if target is not None and target != o.dtype:
        if copy is False:
            raise ValueError(f"asarray(copy=False) at {user_location()}: converting {o.dtype.name} to "
                             f"{target.name} needs a copy; pass copy=None or copy=True")
        o = _cast(o, target)
    elif copy and o.tracer is None and not isinstance(value, (bool, int, float, list, tuple)):
        o = Operand(None, np.array(o.array, copy=True), o.weak)  # it may be x's own memory
    return _value(_strong(o))


array = asarray


def _on(device: Any) -> Any:
    """The ``fj.device`` block of a creation function's ``device=`` (none for None)."""
    return contextlib.nullcontext() if device is None else device_block(device)


def full(shape: Any, fill_value: ArrayLike, dtype: Any = None, *, device: Any = None) -> Any:
    """An array of ``shape`` filled with ``fill_value`` (on ``device``, as ``fj.device``)."""
    o = _op(fill_value, "fill_value")
    d = as_dtype(dtype) if dtype is not None else o.dtype
    with _on(device):
        return broadcast_to(_value(_strong(_cast(o, d))), _shape_tuple(shape))


def zeros(shape: Any, dtype: Any = None, *, device: Any = None) -> Any:
    """An array of zeros (float64 by default, as NumPy)."""
    return full(shape, 0, float64 if dtype is None else dtype, device=device)


def ones(shape: Any, dtype: Any = None, *, device: Any = None) -> Any:
    """An array of ones (float64 by default, as NumPy)."""
    return full(shape, 1, float64 if dtype is None else dtype, device=device)


def empty(shape: Any, dtype: Any = None, *, device: Any = None) -> Any:
    """An array of ``shape`` whose values do not matter (zeros: a traced program has no
    uninitialized memory to hand out)."""
    return zeros(shape, dtype, device=device)


def full_like(x: ArrayLike, fill_value: ArrayLike, dtype: Any = None, *, device: Any = None) -> Any:
    """An array shaped like ``x`` filled with ``fill_value`` (x's dtype unless given)."""
    o = _op(x)
    return full(o.shape, fill_value, dtype if dtype is not None else o.dtype, device=device)


def zeros_like(x: ArrayLike, dtype: Any = None, *, device: Any = None) -> Any:
    """Zeros shaped like ``x``."""
    return full_like(x, 0, dtype, device=device)


def ones_like(x: ArrayLike, dtype: Any = None, *, device: Any = None) -> Any:
    """Ones shaped like ``x``."""
    return full_like(x, 1, dtype, device=device)


def empty_like(x: ArrayLike, dtype: Any = None, *, device: Any = None) -> Any:
    """An array like ``x`` whose values do not matter (zeros, as ``empty``)."""
    return full_like(x, 0, dtype, device=device)


def iota(dtype: Any, shape: Any, dimension: int = 0) -> Any:
    """The index along ``dimension`` at each position of an array of ``shape``."""
    return bind("iota", [], {"shape": _shape_tuple(shape), "dimension": dimension, "dtype": as_dtype(dtype)})


def arange(start: Any, stop: Any = None, step: Any = 1, dtype: Any = None, *, device: Any = None) -> Any:
    """Evenly spaced values in [start, stop) for static Python numbers, as ``np.arange``."""
    if device is not None:
        with _on(device):
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


def eye(N: int, M: int | None = None, k: int = 0, dtype: Any = None, *, device: Any = None) -> Any:
    """A 2-D array with ones on the k-th diagonal (float64 by default). ``k`` is any int: a
    diagonal outside the array (even past int64) leaves it all zeros, as NumPy's."""
    M = N if M is None else M
    if not isinstance(k, Tracer):
        if not isinstance(k, (int, np.integer)):
            raise FlowjitTypeError(f"eye: k={k!r} at {user_location()}; k (the diagonal's offset) must be an "
                                   "int: 0 the main diagonal, > 0 above it, < 0 below")
        if not -N < k < M:  # no element on that diagonal; int64 arithmetic could not hold k
            return zeros((N, M), dtype, device=device)
    with _on(device):
        rows = iota(int64, (N, M), 0)
        cols = iota(int64, (N, M), 1)
        return astype(equal(add(rows, k), cols), float64 if dtype is None else dtype)


# ---- layout --------------------------------------------------------------------------------


def shape(x: ArrayLike) -> tuple[int, ...]:
    """The static shape of ``x``."""
    return _op(x).shape


def ndim(x: ArrayLike) -> int:
    """The rank of ``x``."""
    return len(_op(x).shape)


def _resolve_shape(old: tuple[int, ...], new: Any) -> tuple[int, ...]:
    new = _shape_tuple(new)
    size = math.prod(old)
    if new.count(-1) > 1:
        raise ShapeError(f"only one dimension may be -1, got {new}", op="reshape")
    if -1 in new:
        known = math.prod(d for d in new if d != -1)
        if known == 0 or size % known:
            raise ShapeError(f"cannot reshape {list(old)} into {list(new)}", op="reshape")
        new = tuple(size // known if d == -1 else d for d in new)
    return new


def reshape(x: ArrayLike, shape: Any, *more: int, copy: bool | None = None) -> Any:
    """``x`` with a new shape of the same size; one dimension may be -1. ``copy`` is the
    array API's: a traced value is immutable, so only ``copy=True`` on a concrete array
    changes anything (the result is then never a view of x)."""
    if copy and not isinstance(x, Tracer):
        x = np.array(x, copy=True)
    o = _op(x)
    target = (shape,) + more if more else shape
    new = _resolve_shape(o.shape, target)
    if new == o.shape:
        return _value(o)
    return bind("reshape", [o], {"shape": new}, weak=o.weak)


def ravel(x: ArrayLike) -> Any:
    """``x`` flattened to one dimension (row-major)."""
    return reshape(x, -1)


def transpose(x: ArrayLike, axes: Any = None) -> Any:
    """Permute the dimensions of ``x`` (reversed when ``axes`` is None)."""
    o = _op(x)
    n = len(o.shape)
    perm = tuple(range(n))[::-1] if axes is None else tuple(int(a) % n if n else int(a) for a in axes)
    if perm == tuple(range(n)):
        return _value(o)
    return bind("transpose", [o], {"perm": perm}, weak=o.weak)


def swapaxes(x: ArrayLike, axis1: int, axis2: int) -> Any:
    """``x`` with two axes exchanged."""
    n = ndim(x)
    perm = list(range(n))
    a, b = axis1 % n, axis2 % n
    perm[a], perm[b] = perm[b], perm[a]
    return transpose(x, perm)


def moveaxis(x: ArrayLike, source: Any, destination: Any) -> Any:
    """``x`` with axes ``source`` moved to positions ``destination`` (ints or sequences)."""
    n = ndim(x)
    src = [source] if isinstance(source, (int, np.integer)) else list(source)
    dst = [destination] if isinstance(destination, (int, np.integer)) else list(destination)
    if len(src) != len(dst):
        raise FlowjitTypeError(f"moveaxis: source {source} and destination {destination} must have the same length")
    for a in src + dst:
        if not -n <= int(a) < n:
            raise FlowjitTypeError(f"moveaxis: axis {a} is out of range for rank {n}")
    src = [int(a) % n for a in src]
    dst = [int(a) % n for a in dst]
    if len(set(src)) != len(src) or len(set(dst)) != len(dst):
        raise FlowjitTypeError(f"moveaxis: repeated axis in source {source} or destination {destination}")
    perm = [i for i in range(n) if i not in src]
    for d, a in sorted(zip(dst, src)):
        perm.insert(d, a)
    return transpose(x, perm)


def squeeze(x: ArrayLike, axis: Any = None) -> Any:
    """Remove size-1 dimensions (all of them, or those in ``axis``)."""
    o = _op(x)
    if axis is None:
        axes = tuple(i for i, d in enumerate(o.shape) if d == 1)
    else:
        axes = (axis,) if isinstance(axis, int) else tuple(axis)
    if not axes:
        return _value(o)
    return bind("squeeze", [o], {"axes": axes}, weak=o.weak)


def expand_dims(x: ArrayLike, axis: Any) -> Any:
    """Insert size-1 dimensions at ``axis`` (positions in the result)."""
    o = _op(x)
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    return bind("expand_dims", [o], {"axes": axes}, weak=o.weak)


def broadcast_to(x: ArrayLike, shape: Any) -> Any:
    """``x`` broadcast to ``shape`` as ``np.broadcast_to`` (a new array, not a view)."""
    o = _op(x)
    target = _shape_tuple(shape)
    if o.shape == target:
        return _value(o)
    return bind("broadcast_to", [o], {"shape": target}, weak=o.weak)


def concatenate(arrays: Sequence[ArrayLike], axis: int | None = 0) -> Any:
    """Join arrays along an existing axis (flattened first when ``axis`` is None)."""
    ops = [_op(a, f"arrays[{i}]") for i, a in enumerate(arrays)]
    if not ops:
        raise FlowjitTypeError("concatenate needs at least one array")
    if axis is None:
        ops = [_op(ravel(_value(o))) for o in ops]
        axis = 0
    d = _promote(*ops)
    return _apply("concatenate", [_cast(o, d) for o in ops], {"axis": axis})


def stack(arrays: Sequence[ArrayLike], axis: int = 0) -> Any:
    """Join arrays of one shape along a new axis."""
    if not len(arrays):
        raise FlowjitTypeError("stack needs at least one array")
    return concatenate([expand_dims(a, axis) for a in arrays], axis=axis)


def pad(x: ArrayLike, pad_width: Any, mode: str = "constant", constant_values: float = 0) -> Any:
    """Pad with a constant, as ``np.pad(..., mode="constant")``.

    ``pad_width`` is an int, a ``(before, after)`` pair, or one int or pair per axis.
    """
    if mode != "constant":
        raise FlowjitTypeError(f"pad: mode {mode!r} is not supported; only 'constant' is")
    o = _op(x)
    n = len(o.shape)
    pw = np.asarray(pad_width)
    if pw.dtype.kind not in "iu" or pw.ndim > 2 or (pw.ndim >= 1 and pw.shape[-1] not in (1, 2)):
        raise FlowjitTypeError(f"pad: pad_width={pad_width!r} must be an int, a pair, or one int or pair per axis")
    try:
        pw = np.broadcast_to(pw.astype(np.int64), (n, 2))
    except ValueError:
        raise FlowjitTypeError(f"pad: pad_width={pad_width!r} does not fit an array of rank {n}") from None
    if (pw < 0).any():
        raise FlowjitTypeError(f"pad: pad_width={pad_width!r} must be non-negative")
    if isinstance(constant_values, Tracer):
        raise FlowjitTypeError("pad: constant_values must be a static number")
    return bind("pad", [o], {"low": tuple(int(v) for v in pw[:, 0]), "high": tuple(int(v) for v in pw[:, 1]),
                             "value": float(constant_values)}, weak=o.weak)


def split(x: ArrayLike, indices_or_sections: Any, axis: int = 0) -> list[Any]:
    """Split ``x`` along ``axis`` into equal sections or at the given indices."""
    o = _op(x)
    n = o.shape[axis]
    if isinstance(indices_or_sections, int):
        if n % indices_or_sections:
            raise ShapeError(f"axis of size {n} does not divide into {indices_or_sections} sections", op="split")
        step = n // indices_or_sections
        bounds = list(range(0, n + 1, step))
    else:
        bounds = [0, *indices_or_sections, n]
    out = []
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        idx = [builtins.slice(None)] * len(o.shape)
        idx[axis] = builtins.slice(lo, hi)
        out.append(getitem(_value(o), tuple(idx)))
    return out


# ---- reductions ------------------------------------------------------------------------------


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
    o = _op(x)
    d = as_dtype(dtype) if dtype is not None else None
    if d is not None:
        o = _cast(o, d)
    return bind(prim, [o], {"axes": _axes(o, axis), "keepdims": bool(keepdims)})


def sum(x: ArrayLike, axis: Any = None, dtype: Any = None, keepdims: bool = False) -> Any:  # noqa: A001
    """Sum over ``axis`` (all axes when None); ints and bools accumulate in int64."""
    return _reduce("reduce_sum", x, axis, keepdims, dtype or _sum_dtype(_op(x).dtype))


def prod(x: ArrayLike, axis: Any = None, dtype: Any = None, keepdims: bool = False) -> Any:
    """Product over ``axis``; ints and bools accumulate in int64."""
    return _reduce("reduce_prod", x, axis, keepdims, dtype or _sum_dtype(_op(x).dtype))


def max(x: ArrayLike, axis: Any = None, keepdims: bool = False) -> Any:  # noqa: A001
    """Maximum over ``axis``; NaN propagates."""
    return _reduce("reduce_max", x, axis, keepdims)


def min(x: ArrayLike, axis: Any = None, keepdims: bool = False) -> Any:  # noqa: A001
    """Minimum over ``axis``; NaN propagates."""
    return _reduce("reduce_min", x, axis, keepdims)


amax, amin = max, min


def any(x: ArrayLike, axis: Any = None, keepdims: bool = False) -> Any:  # noqa: A001
    """Whether any element over ``axis`` is true (non-zero)."""
    o = _to_bool(_op(x))
    return bind("reduce_any", [o], {"axes": _axes(o, axis), "keepdims": bool(keepdims)})


def all(x: ArrayLike, axis: Any = None, keepdims: bool = False) -> Any:  # noqa: A001
    """Whether every element over ``axis`` is true (non-zero)."""
    o = _to_bool(_op(x))
    return bind("reduce_all", [o], {"axes": _axes(o, axis), "keepdims": bool(keepdims)})


def mean(x: ArrayLike, axis: Any = None, dtype: Any = None, keepdims: bool = False) -> Any:
    """Arithmetic mean over ``axis``; ints give float64, float16 accumulates in float32."""
    o = _op(x)
    out_d = as_dtype(dtype) if dtype is not None else (o.dtype if o.dtype.is_inexact else float64)
    acc = np.float32 if out_d == float16 else out_d
    n = math.prod(o.shape[a] for a in _axes(o, axis)) if o.shape else 1
    total = sum(astype(_value(o), acc), axis=axis, keepdims=keepdims)
    return astype(divide(total, as_dtype(acc).np.type(n)), out_d)


def var(x: ArrayLike, axis: Any = None, dtype: Any = None, ddof: int = 0, keepdims: bool = False, *,
        correction: float | None = None) -> Any:
    """Variance over ``axis`` with ``ddof`` delta degrees of freedom (``correction``: the
    array API's name for it)."""
    ddof = ddof if correction is None else correction
    o = _op(x)
    out_d = as_dtype(dtype) if dtype is not None else (o.dtype if o.dtype.is_inexact else float64)
    xf = astype(_value(o), out_d)
    centered = subtract(xf, mean(xf, axis=axis, keepdims=True))
    n = math.prod(o.shape[a] for a in _axes(o, axis)) if o.shape else 1
    # Of a complex array NumPy's variance is real: the mean of |x - mean|^2.
    squares = square(absolute(centered)) if out_d.is_complex else square(centered)
    return divide(sum(squares, axis=axis, keepdims=keepdims), out_d.real_dtype.np.type(n - ddof))


def std(x: ArrayLike, axis: Any = None, dtype: Any = None, ddof: int = 0, keepdims: bool = False, *,
        correction: float | None = None) -> Any:
    """Standard deviation over ``axis`` (``correction``: the array API's name for ``ddof``).
    Where the variance is 0 (a single element, a constant row) the gradient is 0, not the
    0 * inf of sqrt's derivative there."""
    v = var(x, axis=axis, dtype=dtype, ddof=ddof, keepdims=keepdims, correction=correction)
    nonzero = not_equal(v, 0)  # NaN too: its std stays NaN
    return where(nonzero, sqrt(where(nonzero, v, 1)), 0)


def _arg_reduce(prim: str, x: ArrayLike, axis: Any, keepdims: bool) -> Any:
    o = _op(x)
    if axis is None:
        flat = _op(ravel(_value(o)))
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
    o = _op(x)
    if axis is None:
        if len(o.shape) != 1:
            raise FlowjitTypeError(f"{name}: axis=None needs a 1-D array, got shape {list(o.shape)} at "
                                   f"{user_location()}; give axis=")
        axis = 0
    out = scan_fn(_value(o), axis=axis, dtype=dtype)
    if include_initial:
        axis = axis % len(o.shape)
        shape = list(o.shape)
        shape[axis] = 1
        out = concatenate([full(tuple(shape), initial, _op(out).dtype), out], axis=axis)
    return out


def cumulative_sum(x: ArrayLike, /, *, axis: int | None = None, dtype: Any = None,
                   include_initial: bool = False) -> Any:
    """The array API's cumulative sum: ``cumsum`` along ``axis`` (which a 1-D array may
    leave out), with a leading 0 when ``include_initial``."""
    return cumulative("cumulative_sum", cumsum, 0, x, axis, dtype, include_initial)


def cumsum(x: ArrayLike, axis: int | None = None, dtype: Any = None) -> Any:
    """Cumulative sum along ``axis`` (of the flattened array when None)."""
    o = _op(x)
    if axis is None:
        o, axis = _op(ravel(_value(o))), 0
    o = _cast(o, as_dtype(dtype) if dtype is not None else _sum_dtype(o.dtype))
    return bind("cumsum", [o], {"axis": int(axis)})


# ---- linear algebra ----------------------------------------------------------------------------


def matmul(a: ArrayLike, b: ArrayLike) -> Any:
    """Matrix product with NumPy's rules: batch dims broadcast, 1-D operands promoted and dropped."""
    x, y = _op(a, "a"), _op(b, "b")
    if not x.shape or not y.shape:
        raise FlowjitTypeError(f"matmul: operands must be at least 1-D, got {x.aval} and {y.aval}; "
                               "use * for scalars")
    d = _promote(x, y)
    if d.is_bool:
        # NumPy's bool matmul is an or of ands: count the true products, then test for any.
        return not_equal(matmul(_value(_cast(x, int64)), _value(_cast(y, int64))), 0)
    x, y = _cast(x, d), _cast(y, d)
    xv, yv = _value(x), _value(y)
    if len(x.shape) == 1:
        xv = expand_dims(xv, 0)
    if len(y.shape) == 1:
        yv = expand_dims(yv, 1)
    r = bind("matmul", [_op(xv), _op(yv)])
    drop = ([-2] if len(x.shape) == 1 else []) + ([-1] if len(y.shape) == 1 else [])
    return squeeze(r, tuple(drop)) if drop else r


def tensordot(a: ArrayLike, b: ArrayLike, axes: Any = 2) -> Any:
    """Sum products over the given axes of a and b, as ``np.tensordot``."""
    x, y = _op(a, "a"), _op(b, "b")
    if isinstance(axes, int):
        ax_a = list(range(len(x.shape) - axes, len(x.shape)))
        ax_b = list(range(axes))
    else:
        ax_a, ax_b = ([axes[0]] if isinstance(axes[0], int) else list(axes[0]),
                      [axes[1]] if isinstance(axes[1], int) else list(axes[1]))
    ax_a = [i % len(x.shape) for i in ax_a]
    ax_b = [i % len(y.shape) for i in ax_b]
    free_a = [i for i in range(len(x.shape)) if i not in ax_a]
    free_b = [i for i in range(len(y.shape)) if i not in ax_b]
    k = math.prod(x.shape[i] for i in ax_a)
    xa = reshape(transpose(_value(x), free_a + ax_a), (math.prod(x.shape[i] for i in free_a), k))
    yb = reshape(transpose(_value(y), ax_b + free_b), (k, math.prod(y.shape[i] for i in free_b)))
    return reshape(matmul(xa, yb), [x.shape[i] for i in free_a] + [y.shape[i] for i in free_b])


def dot(a: ArrayLike, b: ArrayLike) -> Any:
    """``np.dot``: scalars multiply, otherwise sum over a's last and b's second-to-last axis."""
    x, y = _op(a, "a"), _op(b, "b")
    if not x.shape or not y.shape:
        return multiply(a, b)
    return tensordot(a, b, axes=([-1], [-2 if len(y.shape) > 1 else 0]))


def outer(a: ArrayLike, b: ArrayLike) -> Any:
    """Outer product of two arrays, flattened first."""
    return multiply(expand_dims(ravel(a), 1), expand_dims(ravel(b), 0))


def _repeats_an_index(subscripts: str) -> bool:
    ins = subscripts.replace(" ", "").partition("->")[0]
    return builtins.any(len(set(s)) != len(s) for s in ins.split(","))


def einsum(subscripts: str, *operands: ArrayLike) -> Any:
    """Einstein summation over one or more operands, lowered to transposes, sums and matmuls.

    Supports explicit (``'ij,jk->ik'``) and implicit output, any number of operands
    (contracted left to right), ``...`` and indices repeated within one operand (its
    diagonal: ``'ii->'`` is a trace), as NumPy's.
    """
    if "..." in subscripts or _repeats_an_index(subscripts):
        from flowjit.tracer.numpy_extras import canonical_einsum  # (it builds on this module)
        subscripts, operands = canonical_einsum(subscripts, operands)
        operands = tuple(operands)
    spec = subscripts.replace(" ", "")
    ins, _, out = spec.partition("->")
    in_specs = ins.split(",")
    if len(in_specs) != len(operands):
        raise FlowjitTypeError(f"einsum: {len(in_specs)} operand specs for {len(operands)} operands")
    if "->" not in spec:
        counts = {c: ins.replace(",", "").count(c) for c in set(ins.replace(",", ""))}
        out = "".join(sorted(c for c, n in counts.items() if n == 1))
    ops = []
    in_ops = [_op(x, f"operands[{i}]") for i, x in enumerate(operands)]
    d = _promote(*in_ops)
    if d.is_bool:
        # NumPy's bool einsum is an or of ands: count the true products, then test for any.
        return not_equal(einsum(subscripts, *[_value(_cast(o, int64)) for o in in_ops]), 0)
    for s, o in zip(in_specs, in_ops):
        o = _cast(o, d)
        if len(s) != len(o.shape):
            raise FlowjitTypeError(f"einsum: spec {s!r} has {len(s)} indices for operand of shape {list(o.shape)}")
        ops.append((s, _value(o)))
    s0, acc = ops[0]
    for i, (s1, y) in enumerate(ops[1:], 1):
        later = set(out) | set("".join(s for s, _ in ops[i + 1:]))
        keep = "".join(c for c in dict.fromkeys(s0 + s1) if c in later)
        acc, s0 = _einsum_pair(s0, acc, s1, y, keep), keep
    # Sum what the output does not keep, then order as the output asks.
    summed = tuple(i for i, c in enumerate(s0) if c not in out)
    if summed:
        acc = sum(acc, axis=summed, dtype=d)  # einsum keeps the dtype (no int64 widening)
        s0 = "".join(c for c in s0 if c in out)
    return transpose(acc, [s0.index(c) for c in out]) if s0 != out else acc


def _einsum_pair(sa: str, a: Any, sb: str, b: Any, keep: str) -> Any:
    # Sum indices only one side has and nobody needs, then batch-matmul the rest.
    def presum(s: str, x: Any, other: str) -> tuple[str, Any]:
        drop = tuple(i for i, c in enumerate(s) if c not in other and c not in keep)
        if drop:
            x = sum(x, axis=drop, dtype=_op(x).dtype)
            s = "".join(c for c in s if c in other or c in keep)
        return s, x
    sa, a = presum(sa, a, sb)
    sb, b = presum(sb, b, sa)
    batch = [c for c in sa if c in sb and c in keep]
    contract = [c for c in sa if c in sb and c not in keep]
    free_a = [c for c in sa if c not in sb]
    free_b = [c for c in sb if c not in sa]
    da = dict(zip(sa, shape(a)))
    db = dict(zip(sb, shape(b)))
    for c in batch + contract:
        if da[c] != db[c]:
            raise FlowjitTypeError(f"einsum: index {c!r} has size {da[c]} in one operand and {db[c]} in the other")
    m = math.prod(da[c] for c in free_a)
    n = math.prod(db[c] for c in free_b)
    k = math.prod(da[c] for c in contract)
    bshape = [da[c] for c in batch]
    a2 = reshape(transpose(a, [sa.index(c) for c in batch + free_a + contract]), bshape + [m, k])
    b2 = reshape(transpose(b, [sb.index(c) for c in batch + contract + free_b]), bshape + [k, n])
    r = reshape(matmul(a2, b2), bshape + [da[c] for c in free_a] + [db[c] for c in free_b])
    rs = "".join(batch + free_a + free_b)
    return transpose(r, [rs.index(c) for c in keep]) if rs != keep else r


def conv2d(x: ArrayLike, w: ArrayLike, strides: Any = (1, 1), padding: Any = "VALID",
           dilation: Any = (1, 1)) -> Any:
    """2-D convolution of NHWC ``x`` with an HWIO filter ``w`` (TensorFlow's layout)."""
    a, b = _op(x, "x"), _op(w, "w")
    d = _float_dtype(_promote(a, b))
    if isinstance(strides, int):
        strides = (strides, strides)
    if isinstance(dilation, int):
        dilation = (dilation, dilation)
    return bind("conv2d", [_cast(a, d), _cast(b, d)],
                {"strides": tuple(strides), "padding": padding, "dilation": tuple(dilation)})


# ---- indexing ------------------------------------------------------------------------------------


def _normalize_index(i: Operand, n: int) -> Operand:
    """Negative indices count from the end; the gather clamps anything still out of range."""
    if i.tracer is None:
        arr = np.asarray(i.array)
        return Operand(None, np.where(arr < 0, arr + n, arr).astype(arr.dtype), False)
    neg = bind("lt", [i, _cast(Operand(None, np.asarray(0), True), i.dtype)])
    wrapped = bind("add", [i, _cast(Operand(None, np.asarray(n), True), i.dtype)])
    return _op(bind("select", [neg, wrapped, i]))


def _index_operand(i: ArrayLike, what: str) -> Operand:
    o = _op(i, what)
    if o.tracer is None and o.array.size == 0 and not o.dtype.is_int:
        return Operand(None, o.array.astype(np.int64), False)  # [] selects nothing, as in NumPy
    if o.dtype.is_bool or o.dtype.is_float:
        raise FlowjitTypeError(f"{what} must be integers, got {o.aval}")
    return o


def take(x: ArrayLike, indices: ArrayLike, axis: int | None = None) -> Any:
    """Elements of ``x`` at ``indices`` along ``axis`` (of the flattened array when None).

    Negative indices count from the end; indices still out of range are clamped (as in
    JAX), never an error at run time.
    """
    o = _op(x)
    if axis is None:
        o, axis = _op(ravel(_value(o))), 0
    n = len(o.shape)
    if not -n <= axis < n:
        raise AxisError(f"axis {axis} is out of range for {o.aval}", op="take")
    axis = axis % n
    idx = _index_operand(indices, "indices")
    if o.shape[axis] == 0:
        if math.prod(idx.shape):
            raise IndexError(f"cannot take from axis {axis} of {o.aval}: it is empty")
        return full(o.shape[:axis] + idx.shape + o.shape[axis + 1:], 0, o.dtype)  # nothing from nothing
    return bind("gather", [o, _normalize_index(idx, o.shape[axis])], {"axis": axis})


def take_along_axis(x: ArrayLike, indices: ArrayLike, axis: int | None = -1) -> Any:
    """``np.take_along_axis``: pick along ``axis`` with indices broadcast against x's other axes.

    ``axis=None`` works on the flattened x with 1-D indices. Out-of-range indices clamp.
    """
    o = _op(x)
    idx = _index_operand(indices, "indices")
    if axis is None:
        if len(idx.shape) != 1:
            raise FlowjitTypeError(f"take_along_axis: with axis=None indices must be 1-D, got {list(idx.shape)}")
        return take(_value(o), _value(idx))
    n = len(o.shape)
    if len(idx.shape) != n:
        raise FlowjitTypeError(f"take_along_axis: indices of shape {list(idx.shape)} must have the "
                               f"rank of x {list(o.shape)}")
    axis = axis % n
    out_shape = tuple(idx.shape[i] if i == axis else builtins.max(idx.shape[i], o.shape[i]) if idx.shape[i] == 1
                      else idx.shape[i] for i in range(n))
    i_ax = clip(_value(_normalize_index(idx, o.shape[axis])), 0, o.shape[axis] - 1)
    linear = None
    stride = 1
    for d in reversed(range(n)):
        part = broadcast_to(i_ax, out_shape) if d == axis else iota(idx.dtype, out_shape, d)
        term = multiply(part, stride) if stride != 1 else part
        linear = term if linear is None else add(linear, term)
        stride *= o.shape[d]
    return bind("gather", [_op(ravel(_value(o))), _op(linear)], {"axis": 0})


def scatter_add(x: ArrayLike, indices: ArrayLike, updates: ArrayLike, axis: int = 0) -> Any:
    """A copy of ``x`` with ``updates`` added at ``indices`` along ``axis`` (duplicates accumulate)."""
    o = _op(x)
    axis = axis % len(o.shape)
    idx = _normalize_index(_index_operand(indices, "indices"), o.shape[axis])
    u = _cast(_op(updates, "updates"), o.dtype)
    return bind("scatter_add", [o, idx, u], {"axis": axis})


def _classify_index(k: Any) -> tuple[str, Any]:
    """One entry of an index tuple as (kind, value): none, ellipsis, slice, int, bool0, mask or array."""
    if k is None:
        return "none", None
    if k is Ellipsis:
        return "ellipsis", None
    if isinstance(k, builtins.slice):
        for name in ("start", "stop", "step"):
            v = getattr(k, name)
            if isinstance(v, Tracer):
                raise FlowjitTypeError(f"slice {name} is a traced value ({v.aval}): slice bounds must be static "
                                       "(the result's shape depends on them); use fj.take or fj.where instead")
        return "slice", k
    if isinstance(k, (bool, np.bool_)):
        return "bool0", builtins.bool(k)
    if isinstance(k, (int, np.integer)):
        return "int", int(k)
    if isinstance(k, Tracer):
        if k.dtype == bool_:
            raise FlowjitTypeError("indexing with a traced boolean mask has a data-dependent shape; "
                                   "use fj.where(mask, x, 0) instead")
        if not k.dtype.is_int:
            raise IndexError(f"arrays used as indices must be of integer (or boolean) type, got {k.aval}")
        return "array", k
    try:
        arr = np.asarray(k)
    except ValueError:
        raise IndexError(f"index {k!r:.60} is a ragged sequence") from None
    if arr.dtype == np.bool_:
        return ("bool0", builtins.bool(arr)) if arr.ndim == 0 else ("mask", arr)
    if arr.size == 0 and arr.dtype.kind not in "iu":
        arr = arr.astype(np.int64)  # x[[]] selects nothing, as in NumPy
    if arr.dtype.kind not in "iu":
        raise IndexError(f"arrays used as indices must be of integer (or boolean) type, got {arr.dtype}")
    if arr.dtype not in (np.int32, np.int64):
        arr = arr.astype(np.int64)
    return "array", arr


def getitem(x: ArrayLike, key: Any) -> Any:
    """``x[key]`` with NumPy's basic and advanced (integer array) indexing.

    Ints, slices (any step), None, Ellipsis, integer arrays and concrete boolean masks
    (also 0-d ``True``/``False``) are supported; several integer arrays broadcast together,
    and their result dimensions go where NumPy puts them (in place when the advanced
    indices are adjacent, first otherwise). Python ints out of range raise IndexError;
    integer arrays are data, so out-of-range entries are clamped (as in JAX). Boolean masks
    must be concrete (the result's shape depends on their values).
    """
    o = _op(x)
    shp = o.shape
    entries = [_classify_index(k) for k in (key if isinstance(key, tuple) else (key,))]
    if builtins.sum(1 for kind, _ in entries if kind == "ellipsis") > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    consumed = builtins.sum(v.ndim if kind == "mask" else 1 for kind, v in entries
                            if kind in ("slice", "int", "array", "mask"))
    if consumed > len(shp):
        raise IndexError(f"too many indices for array: array is {len(shp)}-dimensional, but {consumed} were indexed")
    fill = [("slice", builtins.slice(None))] * (len(shp) - consumed)
    ell = next((i for i, (kind, _) in enumerate(entries) if kind == "ellipsis"), None)
    # One (kind, value) per axis of x with the new axes inserted; ``boundary`` is where an
    # ellipsis stood: advanced indices on both sides of it are never adjacent (NumPy's rule).
    per_axis: list[tuple[str, Any]] = []
    new_axes: list[int] = []
    boundary = None
    d = 0  # the axis of x the next entry indexes
    for kind, v in entries + ([] if ell is not None else fill):
        if kind == "ellipsis":
            boundary = len(per_axis)
            per_axis.extend(fill)
            d += len(fill)
        elif kind in ("none", "bool0"):
            new_axes.append(len(per_axis))
            # A 0-d bool adds an axis indexed by [0] (True) or [] (False), as NumPy does.
            per_axis.append(("slice", builtins.slice(None)) if kind == "none" else
                            ("array", np.zeros(int(v), dtype=np.int64)))
        elif kind == "mask":
            if v.shape != shp[d:d + v.ndim]:
                raise IndexError(f"boolean index of shape {list(v.shape)} does not match the indexed "
                                 f"dimensions {list(shp[d:d + v.ndim])} of an array of shape {list(shp)}")
            per_axis.extend(("array", i.astype(np.int64)) for i in np.nonzero(v))
            d += v.ndim
        else:
            if kind == "int" and not -shp[d] <= v < shp[d]:
                raise IndexError(f"index {v} is out of bounds for axis {d} with size {shp[d]}")
            per_axis.append((kind, v))
            d += 1
    val = _value(o)
    if new_axes:
        val = expand_dims(val, tuple(new_axes))
    vshape = shape(val)
    has_array = builtins.any(kind == "array" for kind, _ in per_axis)
    # With any integer array present, ints are advanced indices too (they broadcast as 0-d).
    adv = [i for i, (kind, _) in enumerate(per_axis) if kind == "array" or (kind == "int" and has_array)]
    # Basic part: slices and (when no arrays) ints, as one strided slice then a squeeze.
    starts, sizes, steps, drop = [], [], [], []
    for ax, (kind, v) in enumerate(per_axis):
        n = vshape[ax]
        if kind == "slice":
            start, stop, step = v.indices(n)
            size = len(range(start, stop, step))
            # An empty slice touches nothing: give it a start and step the slice rule accepts.
            starts.append(start if size else 0)
            sizes.append(size)
            steps.append(step if size else 1)
        elif kind == "int" and not has_array:
            starts.append(v % n)
            sizes.append(1)
            steps.append(1)
            drop.append(ax)
        else:
            starts.append(0)
            sizes.append(n)
            steps.append(1)
    if (tuple(starts), tuple(sizes), tuple(steps)) != ((0,) * len(vshape), tuple(vshape), (1,) * len(vshape)):
        val = bind("slice", [_op(val)], {"start": tuple(starts), "size": tuple(sizes), "step": tuple(steps)},
                   weak=o.weak)
    if drop:
        val = squeeze(val, tuple(drop))
    if not adv:
        return val
    adjacent = (adv == list(range(adv[0], adv[0] + len(adv)))
                and not (boundary is not None and adv[0] < boundary <= adv[-1]))
    return _advanced_index(val, [per_axis[i][1] for i in adv], adv, adjacent)


def _advanced_index(val: Any, idx_keys: list[Any], dims: list[int], adjacent: bool) -> Any:
    """Gather with integer-array indices on ``dims`` (after basic slicing), NumPy placement."""
    vshape = shape(val)
    idx_ops = [_index_operand(k, "index") for k in idx_keys]
    bshape = _broadcast_shape([o.shape for o in idx_ops])
    rest = [d for d in range(len(vshape)) if d not in dims]
    if adjacent:
        out_shape = (tuple(vshape[d] for d in rest[:dims[0]]) + bshape + tuple(vshape[d] for d in rest[dims[0]:]))
    else:
        out_shape = bshape + tuple(vshape[d] for d in rest)
    if builtins.any(vshape[d] == 0 for d in dims):
        if math.prod(bshape):
            d = next(d for d in dims if vshape[d] == 0)
            raise IndexError(f"index is out of bounds for axis {d} with size 0")
        return full(out_shape, 0, _op(val).dtype)  # nothing selected from nothing
    moved = transpose(val, dims + rest)
    flat_n = math.prod(vshape[d] for d in dims)
    moved = reshape(moved, (flat_n,) + tuple(vshape[d] for d in rest))
    linear = None
    stride = 1
    for d, o in zip(reversed(dims), reversed(idx_ops)):
        i = clip(_value(_normalize_index(o, vshape[d])), 0, vshape[d] - 1)
        i = astype(broadcast_to(i, bshape), int64)
        term = multiply(i, stride) if stride != 1 else i
        linear = term if linear is None else add(linear, term)
        stride *= vshape[d]
    r = bind("gather", [_op(moved), _op(linear)], {"axis": 0})
    if adjacent and dims[0] > 0:
        nb = len(bshape)
        perm = list(range(nb, nb + dims[0])) + list(range(nb)) + list(range(nb + dims[0], nb + len(rest)))
        r = transpose(r, perm)
    return r


def _broadcast_shape(shapes: list[tuple[int, ...]]) -> tuple[int, ...]:
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        raise IndexError("shape mismatch: indexing arrays could not be broadcast together with shapes "
                         + " ".join(str(list(s)) for s in shapes)) from None


# ---- Tracer methods and operators ------------------------------------------------------------


def _reflect(fn):
    return lambda self, other: fn(other, self)


_METHODS = {
    "__add__": add, "__radd__": _reflect(add),
    "__sub__": subtract, "__rsub__": _reflect(subtract),
    "__mul__": multiply, "__rmul__": _reflect(multiply),
    "__truediv__": divide, "__rtruediv__": _reflect(divide),
    "__floordiv__": floor_divide, "__rfloordiv__": _reflect(floor_divide),
    "__mod__": mod, "__rmod__": _reflect(mod),
    "__pow__": power, "__rpow__": _reflect(power),
    "__matmul__": matmul, "__rmatmul__": _reflect(matmul),
    "__lt__": less, "__le__": less_equal, "__gt__": greater, "__ge__": greater_equal,
    "__eq__": equal, "__ne__": not_equal,
    "__and__": bitwise_and, "__rand__": _reflect(bitwise_and),
    "__or__": bitwise_or, "__ror__": _reflect(bitwise_or),
    "__xor__": bitwise_xor, "__rxor__": _reflect(bitwise_xor),
    "__lshift__": left_shift, "__rlshift__": _reflect(left_shift),
    "__rshift__": right_shift, "__rrshift__": _reflect(right_shift),
    "__neg__": negative, "__pos__": lambda self: self, "__abs__": absolute, "__invert__": invert,
    "__getitem__": getitem,
    "reshape": reshape, "astype": astype, "transpose": lambda self, *axes: transpose(
        self, axes[0] if len(axes) == 1 and not isinstance(axes[0], int) else (axes or None)),
    "sum": sum, "mean": mean, "max": max, "min": min, "prod": prod, "var": var, "std": std,
    "argmax": argmax, "argmin": argmin, "any": any, "all": all, "cumsum": cumsum,
    "squeeze": squeeze, "ravel": ravel, "flatten": ravel, "clip": clip, "round": round, "dot": dot,
    "take": take, "swapaxes": swapaxes, "conj": conj, "conjugate": conj,
}


def _mT_error(x: Tracer) -> Any:
    raise FlowjitTypeError(f"x.mT of a traced array of shape {list(x.shape)} at {user_location()}: mT transposes "
                           "the last two axes, so the array needs at least 2 dimensions")


for _name, _fn in _METHODS.items():
    setattr(Tracer, _name, _fn)
Tracer.T = property(lambda self: transpose(self))  # type: ignore[attr-defined]
# The array API's matrix transpose: the last two axes swapped (a stack of matrices).
Tracer.mT = property(  # type: ignore[attr-defined]
    lambda self: swapaxes(self, -1, -2) if self.ndim >= 2 else _mT_error(self))
Tracer.real = property(real)  # type: ignore[attr-defined]
Tracer.imag = property(imag)  # type: ignore[attr-defined]
Tracer.__hash__ = None  # type: ignore[assignment]


# ---- the array API's names for what NumPy calls otherwise --------------------------------


def pow(x1: ArrayLike, x2: ArrayLike, /) -> Any:  # noqa: A001
    """``x1 ** x2`` elementwise (the array API's name for ``power``)."""
    return power(x1, x2)


def atan2(x1: ArrayLike, x2: ArrayLike, /) -> Any:
    """The angle of the point (x2, x1) (the array API's name for ``arctan2``)."""
    return arctan2(x1, x2)


def concat(arrays: Sequence[ArrayLike], /, *, axis: int | None = 0) -> Any:
    """The arrays joined along ``axis`` (the array API's name for ``concatenate``)."""
    return concatenate(arrays, axis=axis)


def permute_dims(x: ArrayLike, /, axes: Sequence[int]) -> Any:
    """``x`` with its axes in the order ``axes`` (the array API's name for ``transpose``)."""
    return transpose(x, tuple(axes))


def matrix_transpose(x: ArrayLike, /) -> Any:
    """The last two axes of ``x`` swapped (a stack of matrices transposed)."""
    o = _op(x)
    if len(o.shape) < 2:
        raise FlowjitTypeError(f"matrix_transpose: x has shape {list(o.shape)} at {user_location()}; it needs at "
                               "least 2 dimensions")
    return swapaxes(_value(o), -1, -2)


def positive(x: ArrayLike, /) -> Any:
    """``+x``: the value itself, as an array."""
    return asarray(x)


# ---- NumPy's own functions on traced arrays -------------------------------------------------
# Inside a traced function ``np.tanh(x)``, ``np.sum(x, axis=1)``, ``np.maximum.reduce(x)`` or
# ``an_ndarray + x`` trace as the fj function of the same name, through NumPy's two dispatch
# protocols (``__array_ufunc__``, and NEP 18's ``__array_function__``), so code written for
# NumPy runs under fj.function unchanged wherever flowjit has the operation (torch.compile
# traces NumPy code too). Names are NumPy's; where fj's differs, or the op is an operator:
_NUMPY_NAMES = {
    "amax": max, "amin": min, "around": round, "positive": lambda x: x,
}
# ``ufunc.reduce``: the reduction each binary ufunc folds into.
_UFUNC_REDUCTIONS = {"add": sum, "multiply": prod, "maximum": max, "minimum": min,
                     "logical_and": all, "logical_or": any}


# NumPy's functions that fj implements in other modules (numpy_extras, linalg, sorting...):
# each registers itself here (``numpy_counterpart``) so ``np.roll(x, 1)`` on a traced x traces.
NUMPY_COUNTERPARTS: dict[str, Any] = {}


def numpy_counterpart(fn: Any, name: str | None = None) -> Any:
    """Register ``fn`` as what NumPy's function ``name`` (default: fn's name; ``linalg.inv``
    for ``np.linalg.inv``) traces as on traced arrays; returns fn (a decorator)."""
    NUMPY_COUNTERPARTS[name or fn.__name__] = fn
    return fn


def _fj_counterpart(name: str) -> Any:
    """The fj function NumPy's function ``name`` traces as, or None."""
    fn = _NUMPY_NAMES.get(name) or NUMPY_COUNTERPARTS.get(name)
    if fn is None and not name.startswith("_"):
        fn = globals().get(name)
        if not (callable(fn) and getattr(fn, "__module__", None) == __name__):
            return None
    return fn


@functools.cache
def _parameters(fn: Any) -> tuple[frozenset[str], tuple[str, ...]] | None:
    """fn's parameter names and, in order, those that can be passed by position; None when
    it takes ``**kwargs`` or has no signature (the call itself then checks)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return None
    if builtins.any(p.kind == p.VAR_KEYWORD for p in params):
        return None
    return (frozenset(p.name for p in params),
            tuple(p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)))


def _call_as_numpy(fn: Any, label: str, args: Sequence[Any], kwargs: dict[str, Any], numpy_fn: Any = None) -> Any:
    """fn(*args, **kwargs), after checking that fn takes every keyword NumPy was given; a
    keyword named as in NumPy (``np.sum(a=x)``, ``np.reshape(x, shape=s)``) is renamed to
    fj's parameter at the same position."""
    ours = _parameters(fn) if kwargs else None
    if ours is not None:
        theirs = _parameters(numpy_fn) if numpy_fn is not None else None
        for k in [k for k in kwargs if k not in ours[0] and theirs is not None and k in theirs[1]]:
            i = theirs[1].index(k)
            # the same parameter under another name: NumPy has no parameter of fj's name
            if i < len(ours[1]) and ours[1][i] not in kwargs and ours[1][i] not in theirs[0]:
                kwargs[ours[1][i]] = kwargs.pop(k)
        unknown = [k for k in kwargs if k not in ours[0]]
        if unknown:
            names = ", ".join(f"{k}=" for k in unknown)
            why = " (traced arrays are immutable: out= has no meaning)" if "out" in unknown else ""
            raise FlowjitTypeError(
                f"{label}(..., {names}) on a traced array at {user_location()}: flowjit's {fn.__name__} "
                f"takes {', '.join(ours[1])}, not {names}{why}. Drop the keyword, or apply it outside "
                "the traced function")
    return fn(*args, **kwargs)


def _describe(values: Sequence[Any]) -> str:
    return ", ".join(str(v.aval) if isinstance(v, Tracer) else type(v).__name__ for v in values)


def _array_ufunc(self: Tracer, ufunc: np.ufunc, method: str, *inputs: Any, **kwargs: Any) -> Any:
    name = ufunc.__name__
    if kwargs.get("out") is not None:
        raise FlowjitTypeError(
            f"np.{name}(..., out=...) with a traced array ({_describe(inputs)}) at {user_location()}: a "
            "traced value cannot be written into a NumPy array (an in-place operator such as `a += x` on "
            f"an ndarray `a` does this too). Write `a = a + x`, or np.{name}(...) without out=")
    fn = _fj_counterpart(name)
    if method == "__call__" and fn is not None:
        return _call_as_numpy(fn, f"np.{name}", inputs, kwargs)
    if method == "reduce" and name in _UFUNC_REDUCTIONS:
        kwargs.setdefault("axis", 0)  # NumPy's default for ufunc.reduce (np.sum's is None)
        return _call_as_numpy(_UFUNC_REDUCTIONS[name], f"np.{name}.reduce", inputs, kwargs)
    if method == "outer" and fn is not None and len(inputs) == 2 and not kwargs:
        a, b = inputs
        return fn(reshape(a, tuple(shape(a)) + (1,) * ndim(b)), b)
    what = f"np.{name}" if method == "__call__" else f"np.{name}.{method}"
    hint = ("flowjit has no such elementwise op" if fn is None
            else f"flowjit traces np.{name}(...), np.{name}.outer and, for add, multiply, maximum, minimum, "
                 "logical_and and logical_or, .reduce")
    raise FlowjitTypeError(f"{what} on a traced array ({_describe(inputs)}) at {user_location()}: {hint}. "
                           "Write it with fj functions (README: the fj.* names), or apply it outside the "
                           "traced function")


def _array_function(self: Tracer, func: Any, types: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> Any:
    name = func.__name__
    module = getattr(func, "__module__", None) or "numpy"
    label = "np" + module.removeprefix("numpy") + "." + name  # np.sum, np.linalg.norm
    key = name if module == "numpy" else module.removeprefix("numpy.") + "." + name  # linalg.inv, fft.fft
    fn = (_fj_counterpart(key) or (_fj_counterpart(name) if module == "numpy.linalg" else None)
          if module in ("numpy", "numpy.linalg", "numpy.fft") else None)
    if fn is not None:
        return _call_as_numpy(fn, label, args, dict(kwargs), numpy_fn=func)
    implementation = getattr(func, "_implementation", None)
    if implementation is None:  # not a NumPy function: its own dispatch decides
        return NotImplemented
    try:  # NumPy's own code: works where it only uses the methods and attributes we have
        return implementation(*args, **kwargs)
    except TracerError as e:
        raise FlowjitTypeError(
            f"{label} on a traced array at {user_location()}: flowjit has no counterpart, and NumPy's {label} "
            "needs the array's values, which are not known while tracing. Write it with fj functions "
            "(README: the fj.* names), or apply it outside the traced function") from e


Tracer.__array_ufunc__ = _array_ufunc  # type: ignore[assignment]
Tracer.__array_function__ = _array_function  # type: ignore[attr-defined]


def _construct(x: Any, d: DType) -> Any:
    # fj.float32(x): as np.float32(x), any array-like converted; a traced value stays traced.
    return astype(asarray(x), d)


register_constructor(_construct)
