"""NumPy's arithmetic ufuncs that ``ufuncs`` has no primitive for, composed exactly from it:
remainders (``fmod``, ``divmod``, ``modf``), powers and exponents (``float_power``, ``ldexp``,
``frexp``), integer divisors (``gcd``, ``lcm``) and ``around`` (``round``'s other name).

Results are NumPy's bit for bit: ``fmod`` is ``remainder`` of the magnitudes with x1's sign;
``frexp`` and ``ldexp`` scale by exact powers of two in float64 and round once; ``gcd`` runs
Euclid's algorithm in a while loop until every pair is done."""

from __future__ import annotations

from typing import Any

from flowjit.ir.dtypes import DType, complex128, float64, int8, int32, int64
from flowjit.tracer.control_flow import while_loop
from flowjit.tracer.custom_gradients import custom_jvp
from flowjit.tracer.numpy.conversion import astype
from flowjit.tracer.numpy.counterparts import numpy_counterpart
from flowjit.tracer.numpy.layout import broadcast_arrays
from flowjit.tracer.numpy.operands import ArrayLike, as_operand, bad_argument, cast, float_dtype, operand_value, promote
from flowjit.tracer.numpy.reductions import any
from flowjit.tracer.numpy.ufuncs import (
    absolute,
    add,
    clip,
    divide,
    equal,
    floor,
    floor_divide,
    greater,
    greater_equal,
    isfinite,
    isinf,
    less,
    log2,
    logical_and,
    maximum,
    multiply,
    negative,
    not_equal,
    power,
    remainder,
    round,
    signbit,
    subtract,
    trunc,
    where,
)

__all__: list[str] = [
    "around", "divmod", "float_power", "fmod", "frexp", "gcd", "lcm", "ldexp", "modf",
]

around = numpy_counterpart(round, "around")


def _promoted(fname: str, x1: ArrayLike, x2: ArrayLike) -> tuple[DType, Any, Any]:
    a, b = as_operand(x1, "x1"), as_operand(x2, "x2")
    d = promote(a, b)
    return d, operand_value(cast(a, d)), operand_value(cast(b, d))


@custom_jvp
def _float_fmod(a: Any, b: Any) -> Any:
    m = remainder(absolute(a), absolute(b))
    return where(signbit(a), negative(m), m)


@_float_fmod.defjvp
def _float_fmod_jvp(primals: tuple, tangents: tuple) -> tuple:
    # x1 - trunc(x1 / x2) * x2 differentiated, as JAX: through |x1| the derivative in x1
    # was 0 at x1 = 0 (abs's kink), where fmod's is 1.
    (a, b), (ta, tb) = primals, tangents
    return _float_fmod(a, b), subtract(ta, multiply(trunc(divide(a, b)), tb))


@numpy_counterpart
def fmod(x1: ArrayLike, x2: ArrayLike) -> Any:
    """The remainder of x1 / x2 truncated toward zero (C's ``fmod``), with x1's sign, as
    ``np.fmod`` (``remainder`` takes x2's). Floats: ``remainder(|x1|, |x2|)`` carries x1's
    sign, which is C's fmod exactly (NaN for x2 = 0 or an infinite x1, x1 for an infinite
    x2); ints: 0 for x2 = 0, as NumPy's. The gradient is JAX's: 1 in x1, -trunc(x1 / x2) in x2."""
    d, a, b = _promoted("fmod", x1, x2)
    if d.is_complex:
        raise bad_argument("fmod", "complex numbers have no fmod (NumPy refuses them)")
    if d.is_float:
        return _float_fmod(a, b)
    if d.is_bool:
        d, a, b = int8, astype(a, int8), astype(b, int8)  # NumPy's first loop for bools is int8's
    m = remainder(a, b)
    if d.is_unsigned:
        return m
    # remainder has x2's sign; where the signs differ, fmod's is one x2 closer to zero.
    differ = not_equal(less(a, 0), less(b, 0))
    return where(logical_and(not_equal(m, 0), differ), subtract(m, b), m)


@numpy_counterpart
def divmod(x1: ArrayLike, x2: ArrayLike) -> tuple[Any, Any]:  # noqa: A001
    """``(floor_divide(x1, x2), remainder(x1, x2))``, as ``np.divmod``."""
    return floor_divide(x1, x2), remainder(x1, x2)


@numpy_counterpart
def modf(x: ArrayLike) -> tuple[Any, Any]:
    """The fractional and integral parts of x, both with x's sign, as ``np.modf``: ``x -
    trunc(x)`` (exact) and ``trunc(x)``; an infinity gives (+-0, +-inf), NaN (NaN, NaN). Ints
    give float64, bools float16."""
    o = as_operand(x, "x")
    if o.dtype.is_complex:
        raise bad_argument("modf", "complex numbers have no modf (NumPy refuses them)")
    v = astype(operand_value(o), float_dtype(o.dtype))
    whole = trunc(v)
    frac = absolute(where(isinf(v), 0.0, subtract(v, whole)))
    return where(signbit(v), negative(frac), frac), whole


@numpy_counterpart
def float_power(x1: ArrayLike, x2: ArrayLike) -> Any:
    """x1 ** x2 in at least float64 (complex128 for complex inputs), as ``np.float_power``:
    float32 and ints are raised in float64, so a negative integer power of an int is a
    fraction, not 0."""
    d, a, b = _promoted("float_power", x1, x2)
    target = complex128 if d.is_complex else float64
    return power(astype(a, target), astype(b, target))


def _pow2(k: Any) -> Any:
    """2.0 ** k for whole float64 k in [-1074, 1023], exactly."""
    return power(2.0, k)


def _frexp64(x: Any) -> tuple[Any, Any]:
    """(mantissa, exponent as float64) of the float64 x: x = m 2**e with 0.5 <= |m| < 1, and
    (x, 0) for 0, infinities and NaN. A first guess from log2, which may be one off either way,
    then one correction each way; the scalings are exact (powers of two on normal results)."""
    ordinary = logical_and(isfinite(x), not_equal(x, 0))
    ax = where(ordinary, absolute(x), 1.0)
    e = add(floor(log2(ax)), 1)
    # ax * 2**-e in two steps: 2**-e alone leaves float64's range for the largest and the subnormal x.
    half = floor(multiply(e, 0.5))
    m = multiply(multiply(ax, _pow2(negative(half))), _pow2(subtract(half, e)))
    big, small = greater_equal(m, 1.0), less(m, 0.5)
    m = where(big, multiply(m, 0.5), where(small, multiply(m, 2.0), m))
    e = where(big, add(e, 1), where(small, subtract(e, 1), e))
    m = where(signbit(x), negative(m), m)
    return where(ordinary, m, x), where(ordinary, e, 0.0)


@numpy_counterpart
def frexp(x: ArrayLike) -> tuple[Any, Any]:
    """Mantissa and int32 exponent, ``x = m * 2**e`` with 0.5 <= |m| < 1, as ``np.frexp``
    (0, infinities and NaN give themselves and 0; the mantissa keeps x's float dtype, ints give
    float64, bools float16). Exact, subnormals included."""
    o = as_operand(x, "x")
    if o.dtype.is_complex:
        raise bad_argument("frexp", "complex numbers have no frexp (NumPy refuses them)")
    d = float_dtype(o.dtype)
    m, e = _frexp64(astype(operand_value(o), float64))
    return astype(m, d), astype(e, int32)


@numpy_counterpart
def ldexp(x1: ArrayLike, x2: ArrayLike) -> Any:
    """x1 * 2**x2 for integer x2, as ``np.ldexp``, exactly rounded once: past the largest
    float it is inf, below the smallest subnormal 0 (so the product of x1 with an
    overflowing 2**x2 is never computed). x1's float dtype is kept (ints give float64, bools
    float16)."""
    a, b = as_operand(x1, "x1"), as_operand(x2, "x2")
    if a.dtype.is_complex:
        raise bad_argument("ldexp", "x1 may not be complex (NumPy refuses it)")
    if not (b.dtype.is_int or b.dtype.is_bool):
        raise bad_argument("ldexp", f"x2 must be integers, got {b.aval}; round it and cast it with .astype(int)")
    d = float_dtype(a.dtype)
    m, e = _frexp64(astype(operand_value(a), float64))
    # Past +-1100 every float64 result is inf or 0 already; clipping keeps the int sum in range.
    k = astype(clip(add(clip(astype(operand_value(b), int64), -4000, 4000), astype(e, int64)), -1100, 1100),
               float64)
    # m 2**k as two exact scalings and a last one that rounds: up, halves; down, first to 2**-1000
    # (m stays normal, so nothing rounds before the last step).
    first = where(greater(k, 0), subtract(k, floor(multiply(k, 0.5))), maximum(k, -1000.0))
    r = multiply(multiply(m, _pow2(first)), _pow2(subtract(k, first)))
    return astype(r, d)


def _integers(fname: str, x1: ArrayLike, x2: ArrayLike) -> tuple[Any, Any]:
    d, a, b = _promoted(fname, x1, x2)
    if not d.is_int:
        raise bad_argument(fname, f"the arguments must be integers, got {d.name}; NumPy's {fname} has no loop for "
                           "other types")
    a, b = broadcast_arrays(a, b)
    return a, b


def _gcd(a: Any, b: Any) -> Any:
    """Euclid's algorithm on non-negative a and b, until every pair has b == 0."""
    def step(c: tuple[Any, Any]) -> tuple[Any, Any]:
        x, y = c
        done = equal(y, 0)
        return where(done, x, y), where(done, y, remainder(x, where(done, 1, y)))

    g, _ = while_loop(lambda c: any(not_equal(c[1], 0)), step, (a, b))
    return g


@numpy_counterpart
def gcd(x1: ArrayLike, x2: ArrayLike) -> Any:
    """The greatest common divisor of |x1| and |x2| elementwise (integers), as ``np.gcd``;
    ``gcd(0, 0)`` is 0."""
    a, b = _integers("gcd", x1, x2)
    return _gcd(absolute(a), absolute(b))


@numpy_counterpart
def lcm(x1: ArrayLike, x2: ArrayLike) -> Any:
    """The least common multiple of |x1| and |x2| elementwise (integers), as ``np.lcm``: 0
    when either is 0; ``|x1 / gcd * x2|`` in the integers' own dtype, wrapping as NumPy's."""
    a, b = _integers("lcm", x1, x2)
    d = as_operand(a).dtype
    g = _gcd(absolute(a), absolute(b))
    if d.itemsize < 4:  # C computes a narrow int's product in int, then NumPy narrows the result
        a, b, g = astype(a, int64), astype(b, int64), astype(g, int64)
    r = where(equal(g, 0), 0, absolute(multiply(floor_divide(a, where(equal(g, 0), 1, g)), b)))
    return astype(r, d)
