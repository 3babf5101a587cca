"""Elementwise primitives: unary math, binary arithmetic, comparisons, select and cast.

Binary and ternary ops broadcast their inputs as NumPy does and require one dtype (the
tracer inserts casts), so the IR stays explicit about every conversion. Templates are
scalar Python expressions over ``a, b, c`` using the names in ``SCALAR_FUNCTIONS``.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence

import numpy as np

from flowjit.ir.dtypes import (
    ALL_DTYPES,
    COMPLEX_DTYPES,
    FLOAT_DTYPES,
    INEXACT_DTYPES,
    INT_DTYPES,
    NUMERIC_DTYPES,
    REAL_DTYPES,
    DType,
    bool_,
    float16,
    float32,
    float64,
)
from flowjit.ir.dtypes import dtype as as_dtype
from flowjit.ir.errors import ShapeError
from flowjit.ir.registry import attr, broadcast_shapes, declare, defvjp, same_dtype
from flowjit.ir.types import TensorType

# The functions a scalar template may call; every backend provides each of them.
SCALAR_FUNCTIONS = (
    "abs", "sign", "exp", "expm1", "log", "log1p", "sqrt", "sin", "cos", "tanh", "erf",
    "floor", "ceil", "rint", "isnan", "isfinite", "floordiv", "mod", "pow", "maximum",
    "minimum", "atan2", "hypot", "cbrt", "cast", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh",
    "trunc", "signbit", "nextafter", "lshift", "rshift", "real", "imag", "conj", "complex",
)
# The numbers, complex included: what arithmetic takes.
_ARITHMETIC = NUMERIC_DTYPES + COMPLEX_DTYPES


def _real_part_dtype(d: DType) -> DType:
    return d.real_dtype


def _elementwise_rule(out_dtype: DType | Callable[[DType], DType] | None = None) -> Callable[..., TensorType]:
    # out_dtype: a fixed dtype (comparisons: bool), a function of the input dtype (abs of a
    # complex is its real dtype), or None for the input dtype.
    def rule(in_types: Sequence[TensorType], **attrs) -> TensorType:
        d = same_dtype(in_types)
        shape = broadcast_shapes(*(t.shape for t in in_types))
        return TensorType(shape, out_dtype(d) if _is_dtype_rule(out_dtype) else out_dtype or d)
    return rule


def _is_dtype_rule(out: object) -> bool:
    # A function of the input dtype, not a fixed dtype (a DType is callable too: fj.int64(x)).
    return callable(out) and not isinstance(out, DType)


def _of_dtype(fn: Callable[..., np.ndarray], out: Callable[[DType], DType]) -> Callable[..., np.ndarray]:
    def impl(*xs):
        with np.errstate(all="ignore"):
            return np.asarray(fn(*xs)).astype(out(as_dtype(xs[0].dtype)).np, copy=False)
    return impl


def _quiet(fn: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
    # Invalid inputs (log of a negative, 0/0) give NaN/Inf as in NumPy, without warnings.
    def impl(*xs, **attrs):
        with np.errstate(all="ignore"):
            return fn(*xs, **attrs)
    impl.__name__ = getattr(fn, "__name__", "impl")
    return impl


def _same(fn: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
    # NumPy keeps the input dtype for these; the asarray turns 0-d results back into arrays.
    def impl(*xs):
        with np.errstate(all="ignore"):
            return np.asarray(fn(*xs)).astype(xs[0].dtype, copy=False)
    return impl


def _unary(name: str, fn, template, dtypes=FLOAT_DTYPES, domain=None, out=None, diff=True,
           **facts):
    impl = _of_dtype(fn, out) if _is_dtype_rule(out) else _quiet(fn) if out is not None else _same(fn)
    declare(name, kind="elementwise", rule=_elementwise_rule(out), arity=1, impl=impl, template=template,
            dtypes=dtypes, domain=domain, differentiable=diff, **facts)


def _binary(name: str, fn, template, dtypes=NUMERIC_DTYPES, domain=None, out=None,
            commutative=False, diff=True, **facts):
    # ``facts``: the algebraic facts of ``Primitive`` (identity, idempotent, self_value).
    impl = _of_dtype(fn, out) if _is_dtype_rule(out) else _quiet(fn) if out is not None else _same(fn)
    declare(name, kind="elementwise", rule=_elementwise_rule(out), arity=2, impl=impl, template=template,
            dtypes=dtypes, domain=domain, commutative=commutative, differentiable=diff, **facts)


def _logistic(x: np.ndarray) -> np.ndarray:
    # Stable on both tails: exp only ever sees a non-positive argument.
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e))


_erf_scalar = np.frompyfunc(math.erf, 1, 1)


def _erf(x: np.ndarray) -> np.ndarray:
    return np.asarray(_erf_scalar(x.astype(np.float64)), dtype=np.float64)


def _int_pow(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    # NumPy raises for an integer to a negative power; we define it as C does for
    # 1 / a**-b in integers: 1 for a == 1, +-1 for a == -1, else 0 (and 0 ** -n == 0).
    if not np.issubdtype(a.dtype, np.signedinteger):
        return np.power(a, b)  # floats, complex, and unsigned ints (never a negative power)
    a, b = np.broadcast_arrays(a, b)
    neg = b < 0
    safe = np.power(a, np.where(neg, 0, b))
    inv = np.where(a == 1, 1, np.where(a == -1, np.where(b % 2 == 0, 1, -1), 0))
    return np.where(neg, inv, safe)


def _int_safe(fn):
    # Integer division by zero is 0 in NumPy (with a warning); keep that, quietly.
    def impl(a, b):
        with np.errstate(all="ignore"):
            return fn(a, b)
    return impl


# ---- unary --------------------------------------------------------------------------
_unary("neg", np.negative, "-a", dtypes=_ARITHMETIC, involution=True)
_unary("abs", np.abs, "abs(a)", dtypes=_ARITHMETIC, out=_real_part_dtype)  # |z| of a complex is real
_unary("sign", np.sign, "sign(a)", dtypes=_ARITHMETIC)  # z / |z| of a complex (0 at 0)
_unary("exp", np.exp, "exp(a)", dtypes=INEXACT_DTYPES)
_unary("expm1", np.expm1, "expm1(a)", dtypes=INEXACT_DTYPES)
_unary("log", np.log, "log(a)", domain="positive", dtypes=INEXACT_DTYPES)
_unary("log1p", np.log1p, "log1p(a)", domain="gt_minus_one", dtypes=INEXACT_DTYPES)
_unary("sqrt", np.sqrt, "sqrt(a)", domain="positive", dtypes=INEXACT_DTYPES)
_unary("rsqrt", lambda x: 1 / np.sqrt(x), "1 / sqrt(a)", domain="positive")
_unary("sin", np.sin, "sin(a)", dtypes=INEXACT_DTYPES)
_unary("cos", np.cos, "cos(a)", dtypes=INEXACT_DTYPES)
_unary("tanh", np.tanh, "tanh(a)", dtypes=INEXACT_DTYPES)
_unary("logistic", _logistic, "1 / (1 + exp(-a))")
_unary("erf", _erf, "erf(a)")
# Outside its domain (|x| > 1 for asin, acos, atanh; x < 1 for acosh) the result is NaN,
# as in NumPy and the array API; atanh(+-1) is +-inf.
_unary("asin", np.arcsin, "asin(a)", domain="unit", dtypes=INEXACT_DTYPES)
_unary("acos", np.arccos, "acos(a)", domain="unit", dtypes=INEXACT_DTYPES)
_unary("atan", np.arctan, "atan(a)", dtypes=INEXACT_DTYPES)
_unary("sinh", np.sinh, "sinh(a)", dtypes=INEXACT_DTYPES)
_unary("cosh", np.cosh, "cosh(a)", dtypes=INEXACT_DTYPES)
_unary("asinh", np.arcsinh, "asinh(a)", dtypes=INEXACT_DTYPES)
_unary("acosh", np.arccosh, "acosh(a)", domain="ge_one", dtypes=INEXACT_DTYPES)
_unary("atanh", np.arctanh, "atanh(a)", domain="unit", dtypes=INEXACT_DTYPES)
def cbrt_reference(x: np.ndarray) -> np.ndarray:
    """The real cube root as the compiled code gives it: float16 and float32 through float64,
    rounded once (NumPy's own float32 loop is not exact: 2.9999998 for 27)."""
    x = np.asarray(x)
    if x.dtype in (np.float16, np.float32):
        return np.cbrt(x.astype(np.float64)).astype(x.dtype)
    return np.cbrt(x)


_unary("cbrt", cbrt_reference, "cbrt(a)")  # the real cube root: cbrt(-8) is -2
_unary("floor", np.floor, "floor(a)", diff=False)
_unary("ceil", np.ceil, "ceil(a)", diff=False)
_unary("round", np.rint, "rint(a)", diff=False)  # half to even, as np.round
_unary("trunc", np.trunc, "trunc(a)", diff=False)
_unary("isnan", np.isnan, "isnan(a)", out=bool_, diff=False, dtypes=INEXACT_DTYPES)
_unary("isfinite", np.isfinite, "isfinite(a)", out=bool_, diff=False, dtypes=INEXACT_DTYPES)
_unary("signbit", np.signbit, "signbit(a)", out=bool_, diff=False)  # true for -0.0 and a negative NaN
_unary("logical_not", np.logical_not, "not a", dtypes=(bool_,), out=bool_, diff=False,
       involution=True)

# ---- binary -------------------------------------------------------------------------
# x + 0.0 turns -0.0 into +0.0, x + -0.0 is exact; x - -0.0 turns -0.0 into +0.0, x - 0.0 is exact.
_binary("add", np.add, "a + b", dtypes=_ARITHMETIC, commutative=True, identity=-0.0)
_binary("sub", np.subtract, "a - b", dtypes=_ARITHMETIC, identity=0.0, self_value=0)
_binary("mul", np.multiply, "a * b", dtypes=_ARITHMETIC, commutative=True, identity=1)
_binary("div", np.true_divide, "a / b", dtypes=INEXACT_DTYPES, domain="nonzero_rhs", identity=1)
_binary("floor_div", _int_safe(np.floor_divide), "floordiv(a, b)", domain="nonzero_rhs", diff=False)
_binary("mod", _int_safe(np.mod), "mod(a, b)", domain="nonzero_rhs")
_binary("pow", _int_pow, "pow(a, b)", dtypes=_ARITHMETIC, domain="pow", identity=1)
_binary("maximum", np.maximum, "maximum(a, b)", commutative=True, idempotent=True)
_binary("minimum", np.minimum, "minimum(a, b)", commutative=True, idempotent=True)
_binary("atan2", np.arctan2, "atan2(a, b)", dtypes=FLOAT_DTYPES)
# C's hypot: |a + ib| without overflow or underflow; inf where either is inf (even beside a
# quiet NaN), NaN beside a signaling one.
_binary("hypot", np.hypot, "hypot(a, b)", dtypes=FLOAT_DTYPES, commutative=True)
# The next float after a toward b. Not float16: kernels compute float16 in float32, whose
# neighbour rounds back to a.
_binary("nextafter", np.nextafter, "nextafter(a, b)", dtypes=(float32, float64), diff=False)
# The last field is ``x op x`` for ints and bools.
for _name, _fn, _op, _commutative, _self in (
        ("eq", np.equal, "==", True, True), ("ne", np.not_equal, "!=", True, False),
        ("lt", np.less, "<", False, False), ("le", np.less_equal, "<=", False, True),
        ("gt", np.greater, ">", False, False), ("ge", np.greater_equal, ">=", False, True)):
    # Complex numbers are equal or not, but unordered (NumPy's lexicographic order is not the standard's).
    _binary(_name, _fn, f"a {_op} b", dtypes=ALL_DTYPES if _name in ("eq", "ne") else REAL_DTYPES, out=bool_,
            commutative=_commutative, diff=False, self_value=_self)
_binary("logical_and", np.logical_and, "a and b", dtypes=(bool_,), out=bool_, commutative=True, diff=False,
        identity=True, idempotent=True)
_binary("logical_or", np.logical_or, "a or b", dtypes=(bool_,), out=bool_, commutative=True, diff=False,
        identity=False, idempotent=True)
_binary("logical_xor", np.logical_xor, "a != b", dtypes=(bool_,), out=bool_, commutative=True, diff=False,
        identity=False, self_value=False)

# Bitwise ops of ints (and of bools, where they are the logical ones). A shift by a
# negative amount or by the width or more gives NumPy's answer: 0, or -1 for a negative
# number shifted right.
_BITWISE_DTYPES = (bool_,) + INT_DTYPES
_binary("bitwise_and", np.bitwise_and, "a & b", dtypes=_BITWISE_DTYPES, commutative=True, diff=False,
        idempotent=True)
_binary("bitwise_or", np.bitwise_or, "a | b", dtypes=_BITWISE_DTYPES, commutative=True, diff=False,
        idempotent=True)
_binary("bitwise_xor", np.bitwise_xor, "a ^ b", dtypes=_BITWISE_DTYPES, commutative=True, diff=False)
_unary("bitwise_not", np.invert, {"b": "not a", "i": "~a"}, dtypes=_BITWISE_DTYPES, diff=False, involution=True)
_binary("left_shift", np.left_shift, "lshift(a, b)", dtypes=INT_DTYPES, diff=False)
_binary("right_shift", np.right_shift, "rshift(a, b)", dtypes=INT_DTYPES, diff=False)


# ---- complex parts ----------------------------------------------------------------------
def _complex(re: np.ndarray, im: np.ndarray) -> np.ndarray:
    # Not re + 1j * im: 1j * -0.0 has imaginary part +0.0, and 1j * inf is nan+infj.
    re, im = np.broadcast_arrays(re, im)
    out = np.empty(re.shape, as_dtype(re.dtype).complex_dtype.np)
    out.real, out.imag = re, im
    return out


_unary("real", np.real, "real(a)", dtypes=COMPLEX_DTYPES, out=_real_part_dtype)
_unary("imag", np.imag, "imag(a)", dtypes=COMPLEX_DTYPES, out=_real_part_dtype)
_unary("conj", np.conj, "conj(a)", dtypes=COMPLEX_DTYPES, involution=True)
_binary("complex", _complex, "complex(a, b)", dtypes=(float32, float64), out=lambda d: d.complex_dtype)


# ---- select and cast ------------------------------------------------------------------
def _select_rule(in_types: Sequence[TensorType]) -> TensorType:
    pred, a, b = in_types
    if pred.dtype != bool_:
        raise ShapeError(f"predicate must be bool, got {pred}")
    d = same_dtype([a, b])
    return TensorType(broadcast_shapes(pred.shape, a.shape, b.shape), d)


def _select_impl(pred: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.asarray(np.where(pred, a, b)).astype(a.dtype, copy=False)


declare("select", kind="elementwise", rule=_select_rule, impl=_select_impl, arity=3,
        template="b if a else c", role="choose", doc="where(pred, a, b): a where pred is true, else b")


def _cast_rule(in_types: Sequence[TensorType], *, dtype: DType) -> TensorType:
    return in_types[0].with_dtype(dtype)


def _cast_impl(x: np.ndarray, *, dtype: DType) -> np.ndarray:
    # complex -> real drops the imaginary part, as astype does; the tracer's astype warns
    # (once, at the user's line), the reference that runs every call does not.
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", np.exceptions.ComplexWarning)
        return np.asarray(x).astype(dtype.np)


declare("cast", kind="elementwise", rule=_cast_rule, impl=_cast_impl, arity=1,
        attrs={"dtype": attr("dtype")}, template="cast(a)", role="convert",
        doc="convert to dtype as ndarray.astype does (float to int truncates toward zero)")


# ---- VJP rules ------------------------------------------------------------------------
# vjp(e, g, y, *xs): the cotangents of the inputs given the cotangent g of the result y
# (see Primitive). Binary ops broadcast, so each cotangent is summed back to its input's
# shape. Where a function is not differentiable (abs at 0, a max tie), the rule takes the
# value the frameworks take (docs/transforms.md lists them).
def _unary_vjp(name: str, rule) -> None:
    defvjp(name, lambda e, g, y, x: [rule(e, g, y, x)])


_unary_vjp("neg", lambda e, g, y, x: e.neg(g))
def _abs_vjp(e, g, y, x):
    if not x.type.dtype.is_complex:
        return e.mul(g, e.sign(x))
    # JAX's convention (the transpose of the JVP): the gradient of |z| is conj(z) / |z|, 0 at 0.
    # Written as a division, not sign(z) (whose derivative is declared 0), so it differentiates again.
    safe = e.cast(e.select(e.eq(y, e.const(0, y)), e.const(1, y), y), dtype=x.type.dtype)
    return e.mul(e.cast(g, dtype=x.type.dtype), e.conj(e.div(x, safe)))


_unary_vjp("abs", _abs_vjp)
_unary_vjp("sign", lambda e, g, y, x: e.mul(g, e.const(0, x)))
_unary_vjp("exp", lambda e, g, y, x: e.mul(g, y))
_unary_vjp("expm1", lambda e, g, y, x: e.mul(g, e.add(y, e.const(1, y))))
_unary_vjp("log", lambda e, g, y, x: e.div(g, x))
_unary_vjp("log1p", lambda e, g, y, x: e.div(g, e.add(x, e.const(1, x))))
_unary_vjp("sqrt", lambda e, g, y, x: e.div(g, e.mul(y, e.const(2, y))))
_unary_vjp("rsqrt", lambda e, g, y, x: e.mul(g, e.mul(e.const(-0.5, y), e.div(y, x))))
_unary_vjp("sin", lambda e, g, y, x: e.mul(g, e.cos(x)))
_unary_vjp("cos", lambda e, g, y, x: e.neg(e.mul(g, e.sin(x))))
_unary_vjp("tanh", lambda e, g, y, x: e.mul(g, e.sub(e.const(1, y), e.mul(y, y))))
_unary_vjp("logistic", lambda e, g, y, x: e.mul(g, e.mul(y, e.sub(e.const(1, y), y))))
_unary_vjp("erf", lambda e, g, y, x: e.mul(g, e.mul(e.const(2 / math.sqrt(math.pi), x), e.exp(e.neg(e.mul(x, x))))))



def _one_minus_square(e, x):
    # (1 - x)(1 + x): exact where 1 - x*x loses the digits near |x| = 1.
    one = e.const(1, x)
    return e.mul(e.sub(one, x), e.add(one, x))


# At the ends of their domains the derivatives are infinite (asin and acos at +-1, acosh at
# 1, atanh at +-1), as in NumPy's formulas and JAX: the gradient there is +-inf, not NaN.
_unary_vjp("asin", lambda e, g, y, x: e.div(g, e.sqrt(_one_minus_square(e, x))))
_unary_vjp("acos", lambda e, g, y, x: e.neg(e.div(g, e.sqrt(_one_minus_square(e, x)))))
_unary_vjp("atan", lambda e, g, y, x: e.div(g, e.add(e.const(1, x), e.mul(x, x))))
_unary_vjp("sinh", lambda e, g, y, x: e.mul(g, e.cosh(x)))
_unary_vjp("cosh", lambda e, g, y, x: e.mul(g, e.sinh(x)))
_unary_vjp("asinh", lambda e, g, y, x: e.div(g, e.sqrt(e.add(e.mul(x, x), e.const(1, x)))))
_unary_vjp("acosh", lambda e, g, y, x: e.div(g, e.sqrt(e.mul(e.sub(x, e.const(1, x)), e.add(x, e.const(1, x))))))
_unary_vjp("atanh", lambda e, g, y, x: e.div(g, _one_minus_square(e, x)))


def _binary_vjp(name: str, da, db) -> None:
    def rule(e, g, y, a, b):
        return [e.unbroadcast(da(e, g, y, a, b), a.type), e.unbroadcast(db(e, g, y, a, b), b.type)]
    defvjp(name, rule)


_binary_vjp("add", lambda e, g, y, a, b: g, lambda e, g, y, a, b: g)
_binary_vjp("sub", lambda e, g, y, a, b: g, lambda e, g, y, a, b: e.neg(g))
_binary_vjp("mul", lambda e, g, y, a, b: e.mul(g, b), lambda e, g, y, a, b: e.mul(g, a))
_binary_vjp("div", lambda e, g, y, a, b: e.div(g, b), lambda e, g, y, a, b: e.neg(e.mul(g, e.div(y, b))))
_binary_vjp("mod", lambda e, g, y, a, b: g, lambda e, g, y, a, b: e.neg(e.mul(g, e.floor_div(a, b))))
def _pow_db(e, g, y, a, b):
    # d(a**b)/db = log(a) * a**b, taken as 0 where a == 0 (as JAX does).
    zero = e.eq(a, e.const(0, a))
    return e.mul(g, e.select(zero, e.const(0, a), e.mul(e.log(e.select(zero, e.const(1, a), a)), y)))


def _pow_da(e, g, y, a, b):
    # d(a**b)/da = b * a**(b-1), taken as 0 where b == 0 (as JAX does): x ** 0.0 is the
    # constant 1, whose gradient at x = 0 is 0, not 0 * inf. The untaken branch's exponent
    # is 1 there too, so differentiating this again gives 0 * finite, not NaN.
    zero = e.eq(b, e.const(0, b))
    exponent = e.select(zero, e.const(1, b), e.sub(b, e.const(1, b)))
    return e.mul(g, e.select(zero, e.const(0, b), e.mul(b, e.pow(a, exponent))))


_binary_vjp("pow", _pow_da, _pow_db)
def _winner_share(e, g, wins, tie):
    # The gradient where this input wins, half of it at a tie (as JAX and PyTorch split it),
    # none where it loses: so maximum(x, x) gives each side half, and hypot-like compositions
    # keep both derivatives.
    return e.select(wins, g, e.select(tie, e.mul(g, e.const(0.5, g)), e.const(0, g)))


_binary_vjp("maximum", lambda e, g, y, a, b: _winner_share(e, g, e.gt(a, b), e.eq(a, b)),
            lambda e, g, y, a, b: _winner_share(e, g, e.lt(a, b), e.eq(a, b)))
_binary_vjp("minimum", lambda e, g, y, a, b: _winner_share(e, g, e.lt(a, b), e.eq(a, b)),
            lambda e, g, y, a, b: _winner_share(e, g, e.gt(a, b), e.eq(a, b)))
def _cbrt_vjp(e, g, y, x):
    # 1 / (3 y^2): 0 at 0, where the derivative is infinite (JAX gives inf), and at an infinity
    # (the limit). Only a finite nonzero y reaches the quotient (others divide by 1): an
    # untaken 1 / inf or 1 / 0 would send NaN into the second derivative.
    # float16 and float32 take the slope from x's root in float64, rounded once (1/(3 y y) of
    # the rounded y in float32 had been up to 4 ulp off).
    d = y.type.dtype
    wide = e.cbrt(e.cast(x, dtype=float64)) if d in (float16, float32) else y
    normal = e.logical_and(e.ne(wide, e.const(0, wide)), e.isfinite(wide))
    safe = e.select(normal, wide, e.const(1, wide))
    slope = e.div(e.const(1, wide), e.mul(e.const(3, wide), e.mul(safe, safe)))
    slope = e.select(normal, slope, e.select(e.isnan(wide), wide, e.const(0, wide)))
    return e.mul(g, e.cast(slope, dtype=d) if wide is not y else slope)


_unary_vjp("cbrt", _cbrt_vjp)


def _hypot_da(e, g, y, a, b):
    # a / hypot(a, b), of a and b scaled by a power of two s (exact) when the larger is past
    # 2^(E/2) or below 2^(-E/2) (E the dtype's largest exponent): there a / y had been
    # a / inf = 0 on finite inputs, and the second derivative took 1 / y = inf of a subnormal
    # y. 0 at (0, 0) (a subgradient; JAX 0.10 gives 0.5, PyTorch NaN); at an infinite a the
    # limit sign(a), 0 at an infinite b (NaN in both). Non-finite inputs reach no quotient
    # (0 there): an untaken inf / inf would send NaN into the second derivative.
    half = np.finfo(a.type.dtype.np).maxexp // 2
    finite = e.logical_and(e.isfinite(a), e.isfinite(b))
    zero, one = e.const(0, a), e.const(1, a)
    a0, b0 = e.select(finite, a, zero), e.select(finite, b, zero)
    m = e.maximum(e.abs(a0), e.abs(b0))
    s = e.select(e.gt(m, e.const(2.0 ** half, a)), e.const(2.0 ** -half, a),
                 e.select(e.lt(m, e.const(2.0 ** -half, a)), e.const(2.0 ** half, a), one))
    u = e.mul(a0, s)
    h = e.hypot(u, e.mul(b0, s))
    ratio = e.div(u, e.select(e.eq(h, zero), one, h))
    # a NaN: sign(NaN); a finite beside a NaN b: NaN; beside an infinite b: 0.
    limit = e.select(e.isfinite(a), e.select(e.isnan(b), b, zero), e.sign(a))
    return e.mul(g, e.select(finite, ratio, limit))


_binary_vjp("hypot", _hypot_da, lambda e, g, y, a, b: _hypot_da(e, g, y, b, a))
_binary_vjp("atan2", lambda e, g, y, a, b: e.mul(g, e.div(b, e.add(e.mul(a, a), e.mul(b, b)))),
            lambda e, g, y, a, b: e.neg(e.mul(g, e.div(a, e.add(e.mul(a, a), e.mul(b, b))))))


def _select_vjp(e, g, y, pred, a, b):
    zero = e.const(0, g)
    return [None, e.unbroadcast(e.select(pred, g, zero), a.type), e.unbroadcast(e.select(pred, zero, g), b.type)]


defvjp("select", _select_vjp)
# A cast's cotangent casts back; none flows into an integer or bool input. A real input
# cast to complex takes the real part (JAX's convert_element_type transpose).
def _cast_vjp(e, g, y, x, dtype):
    d = x.type.dtype
    if not d.is_inexact:
        return [None]
    if d.is_float and g.type.dtype.is_complex:
        g = e.real(g)
    return [e.cast(g, dtype=d)]


defvjp("cast", _cast_vjp)
# The parts: real and imag take a real cotangent back into the complex plane, conj is its
# own transpose, complex(re, im) splits the cotangent as (real(g), -imag(g)) (JAX's).
_unary_vjp("real", lambda e, g, y, x: e.cast(g, dtype=x.type.dtype))
_unary_vjp("imag", lambda e, g, y, x: e.complex(e.const(0, g), e.neg(g)))
_unary_vjp("conj", lambda e, g, y, x: e.conj(g))
_binary_vjp("complex", lambda e, g, y, a, b: e.real(g), lambda e, g, y, a, b: e.neg(e.imag(g)))
