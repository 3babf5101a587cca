"""The scalar vocabulary, declared once for every renderer.

``OPS`` is the instruction set of loop-IR expressions: arithmetic, comparisons, logic,
select, cast and named math intrinsics, each with its typing rule and a NumPy reference
(``reference``, what the evaluator runs and what a renderer must reproduce). A renderer
implements exactly these ops, per dtype (``tanh`` of a float32 is ``tanh.f32``); it never
sees a primitive's name.

``expand`` turns an elementwise primitive's registry ``template`` (a scalar Python
expression over ``a, b, c``) into an expression over ``OPS``: the template's functions
(``floordiv``, ``maximum``, ``sign``, ...) are defined below in terms of the instruction
set, with NumPy's rules (integer division by zero gives 0, maximum propagates NaN, float
floor division and modulo as ``npy_divmod``). ``combine`` and ``arg_wins`` give the step of
each accumulator kind.

The vocabulary is real: a complex value is a *pair* of expressions of its real dtype (re, im)
inside the lowering (``expand`` takes and returns pairs for complex operands and results), so
no renderer ever sees a complex scalar. Complex arithmetic is NumPy's loops written over the
parts (``CFUNCTIONS``); a template function with no complex definition raises
``Unsupported``, and its kernel runs its ops' NumPy references.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Callable, Sequence
from functools import cache

import numpy as np

from flowjit.ir.dtypes import DType, bool_, dtype, float16, float32, float64, int64
from flowjit.ir.primitives.elementwise import cbrt_reference
from flowjit.lowering.loops import Const, Expr, Prim

# A complex value inside the lowering: its real and imaginary parts, each of the real dtype.
Pair = tuple


class Unsupported(Exception):
    """An op the loop IR has no lowering for (the runtime runs its kernel another way)."""

# Op name -> (arity, operand dtype kinds, result rule). Kinds: "f" float, "i" int (signed or
# unsigned: a renderer reads an unsigned dtype's compares, division and casts as unsigned), "b" bool.
# Result rule: "same" (the first operand's dtype), "bool", "cast" (the dtype given).
_ARITH = ("f", "i")
OPS: dict[str, tuple[int, str, str]] = {
    "add": (2, "fi", "same"), "sub": (2, "fi", "same"), "mul": (2, "fi", "same"),
    "neg": (1, "fi", "same"),
    "div": (2, "f", "same"),          # IEEE division
    "idiv": (2, "i", "same"),         # truncating; the divisor is never 0 nor (MIN, -1)
    "irem": (2, "i", "same"),         # truncating remainder, same precondition
    "min": (2, "i", "same"), "max": (2, "i", "same"),  # index arithmetic (clamps)
    "eq": (2, "fib", "bool"), "ne": (2, "fib", "bool"),  # ne is true for NaN operands
    "lt": (2, "fib", "bool"), "le": (2, "fib", "bool"),  # ordered: false for NaN
    "gt": (2, "fib", "bool"), "ge": (2, "fib", "bool"),
    "and": (2, "ib", "same"), "or": (2, "ib", "same"), "xor": (2, "ib", "same"),  # bitwise on ints
    "not": (1, "ib", "same"),
    "shl": (2, "i", "same"), "shr": (2, "i", "same"),  # 0 <= b < width; shr is arithmetic for signed
    "select": (3, "fib", "same2"),    # (bool cond, a, b): a where cond, else b
    "cast": (1, "fi", "cast"),        # ndarray.astype between numbers: float->int truncates
                                      # (bool never: apply writes x != 0 and select(x, 1, 0))
    # Math intrinsics, one per float width (the CPU renderer's are codegen_cpu.intrinsics).
    "exp": (1, "f", "same"), "expm1": (1, "f", "same"), "log": (1, "f", "same"),
    "log1p": (1, "f", "same"), "sqrt": (1, "f", "same"), "sin": (1, "f", "same"),
    "cos": (1, "f", "same"), "tanh": (1, "f", "same"), "erf": (1, "f", "same"),
    "atan2": (2, "f", "same"), "pow": (2, "f", "same"), "floor": (1, "f", "same"),
    "ceil": (1, "f", "same"), "rint": (1, "f", "same"),  # rint: round half to even
    "trunc": (1, "f", "same"), "asin": (1, "f", "same"), "acos": (1, "f", "same"),
    "atan": (1, "f", "same"), "sinh": (1, "f", "same"), "cosh": (1, "f", "same"),
    "asinh": (1, "f", "same"), "acosh": (1, "f", "same"), "atanh": (1, "f", "same"),
    "nextafter": (2, "f", "same"),
    "fabs": (1, "f", "same"), "fmod": (2, "f", "same"), "copysign": (2, "f", "same"),
    "hypot": (2, "f", "same"),        # C's hypot: |a + ib| without overflow, inf if either is inf
    "cbrt": (1, "f", "same"),         # the real cube root: negative for a negative a
    "ipow": (2, "i", "same"),         # integer power; a negative exponent as C's 1 / a**-b
}
# Special functions no renderer writes itself: the CPU's calls SciPy's C function of the name
# (codegen_cpu.scipy_functions), in float64 (float32 operands widened and the result rounded,
# as SciPy's float32 loops do). name -> arity, the order parameters first.
LIBRARY_FUNCTIONS: dict[str, int] = {"gammainc": 2, "gammaincc": 2, "betainc": 3, "jv": 2, "yv": 2, "iv": 2,
                                     "ive": 2}
OPS.update({name: (arity, "f", "same") for name, arity in LIBRARY_FUNCTIONS.items()})
# Ops of many cycles an element on every CPU: a division or a square root issues once every
# 4-16 cycles, a math function is tens of instructions. A pass computes them once where a
# value repeats (lowering.hoist_columns); cheap ones (a compare, fabs) are not worth a load.
COSTLY = frozenset(("div", "exp", "expm1", "log", "log1p", "sqrt", "sin", "cos", "tanh", "erf", "atan2",
                    "pow", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "fmod", "hypot",
                    "cbrt", *LIBRARY_FUNCTIONS))
# Ops of one instruction a vector on every CPU: an expression of these over loads costs less
# to compute again than a division (codegen_cpu.invariant_division's check pass recomputes
# its loop's dividends).
CHEAP = frozenset(("add", "sub", "mul", "neg", "fabs", "min", "max"))
# The ops printed and rendered as calls with a dtype suffix (``tanh.f32``).
INTRINSICS = frozenset(("exp", "expm1", "log", "log1p", "sqrt", "sin", "cos", "tanh", "erf", "atan2",
                        "pow", "floor", "ceil", "rint", "fabs", "fmod", "copysign", "ipow", "trunc",
                        "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "nextafter",
                        "hypot", "cbrt", *LIBRARY_FUNCTIONS))

# Intrinsics whose result is exact (a renderer's and NumPy's agree): folded over constants.
EXACT = frozenset(("fabs", "trunc", "floor", "ceil", "rint", "copysign"))

# "assign": the accumulator takes each value combined into it (a complex product's parts,
# each computed from both: a recurrence, so no renderer splits or reassociates it).
ACCUMULATOR_KINDS = ("sum", "prod", "max", "min", "any", "all", "argmax", "argmin", "assign")


def kind_of(d: DType) -> str:
    """``d``'s kind letter in ``OPS``: "f", "i" or "b" (a complex dtype has none: its values
    are pairs of floats before they reach an op)."""
    if d.is_complex:
        raise TypeError(f"a {d} scalar in the loop IR: complex values are lowered as pairs of {d.real_dtype}")
    return "f" if d.is_float else "i" if d.is_int else "b"


def result_dtype(op: str, args: Sequence[Expr], to: DType | None = None) -> DType:
    """The dtype of ``op`` over ``args`` (``to``: a cast's target)."""
    rule = OPS[op][2]
    if rule == "bool":
        return bool_
    if rule == "cast":
        assert to is not None
        return to
    if rule == "same2":
        return args[1].dtype
    return args[0].dtype


def _const_value(e: Expr) -> object | None:
    return e.value if isinstance(e, Const) else None


def apply(op: str, *args: Expr, to: DType | None = None) -> Expr:
    """``op(*args)`` as an expression, folding constants and no-op arithmetic."""
    d = result_dtype(op, args, to)
    if op == "cast":
        src = args[0].dtype
        if src == d:
            return args[0]
        # Conversions to and from bool are comparisons and selects, so a renderer's cast
        # is only ever between numbers.
        if d.is_bool:
            return apply("ne", args[0], constant(0, src))
        if src.is_bool:
            return apply("select", args[0], constant(1, d), constant(0, d))
    if all(isinstance(a, Const) for a in args) and (op not in INTRINSICS or op in EXACT):
        return Const(to_python(reference(op, d)(*[np_scalar(a.value, a.dtype) for a in args]), d), d)
    if d.is_int and op in ("add", "sub", "mul") and len(args) == 2:
        x, y = args
        if op in ("add", "sub") and _const_value(y) == 0:
            return x
        if op == "add" and _const_value(x) == 0:
            return y
        if op == "mul" and _const_value(y) == 1:
            return x
        if op == "mul" and _const_value(x) == 1:
            return y
        if op == "mul" and (_const_value(x) == 0 or _const_value(y) == 0):
            return Const(0, d)
    if op in ("idiv",) and _const_value(args[1]) == 1:
        return args[0]
    if op == "select" and isinstance(args[0], Const):
        return args[1] if args[0].value else args[2]
    if op == "select" and args[1] == args[2]:
        return args[1]
    return Prim(op, tuple(args), d)


def constant(value: object, d: DType) -> Const | Pair:
    """A constant of dtype ``d`` (of a complex ``d``: the pair of its parts' constants)."""
    if d.is_complex:
        z = np_scalar(value, d)
        return constant(z.real, d.real_dtype), constant(z.imag, d.real_dtype)
    return Const(to_python(np_scalar(value, d), d), d)


def np_scalar(value: object, d: DType) -> np.generic:
    """``value`` as a NumPy scalar of ``d``."""
    with np.errstate(all="ignore"):
        return bare_scalar(value, d)


@cache
def _scalar_type(d: DType) -> type:
    return d.np.type


def bare_scalar(value: object, d: DType) -> np.generic:
    """``np_scalar(value, d)`` without an ``np.errstate`` of its own (``bare_reference``)."""
    # The evaluator converts every constant and op result (10^7 of them in a test file of
    # complex functions), so a value already of ``d``'s scalar type is returned as it is, and
    # a Python float, bool or int of ``d``'s kind goes through the scalar type's constructor,
    # which rounds as ``astype`` does; anything else (an int out of range, which ``astype``
    # wraps, or a NaN made an int) takes ``astype``.
    t = _scalar_type(d)
    kind = type(value)
    if kind is t:
        return value  # type: ignore[return-value]
    if (kind is float and d.is_float) or kind is bool or (kind is int and d.is_int):
        try:
            return t(value)
        except (OverflowError, ValueError):
            pass
    return np.asarray(value).astype(d.np)[()]


def to_python(v: object, d: DType) -> object:
    """A NumPy scalar as the Python value a ``Const`` holds."""
    if d.is_bool:
        return bool(v)
    if d.is_int:
        return int(v)
    return float(v)


# ---- NumPy references of the ops (the evaluator's semantics) ---------------------------------
def _ipow(a: np.generic, b: np.generic) -> np.generic:
    if b < 0:
        return type(a)(1 if a == 1 else (0 if a != -1 else (1 if b % 2 == 0 else -1)))
    return np.power(a, b)


def _erf(x: np.generic) -> np.generic:
    return type(x)(math.erf(float(x)))


def _trunc_div(a: np.generic, b: np.generic) -> np.generic:
    q = abs(int(a)) // abs(int(b))
    return np_scalar(q if (a < 0) == (b < 0) else -q, _dtype_of(a))


def _trunc_rem(a: np.generic, b: np.generic) -> np.generic:
    return np_scalar(int(a) - int(_trunc_div(a, b)) * int(b), _dtype_of(a))


def _dtype_of(x: np.generic) -> DType:
    return dtype(x.dtype)


_REFERENCE: dict[str, Callable] = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "neg": np.negative,
    "div": np.true_divide, "idiv": _trunc_div, "irem": _trunc_rem, "min": min, "max": max,
    "eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal, "gt": np.greater,
    "ge": np.greater_equal, "and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor,
    "not": np.invert, "shl": np.left_shift, "shr": np.right_shift, "select": lambda c, a, b: a if c else b,
    "exp": np.exp, "expm1": np.expm1, "log": np.log, "log1p": np.log1p, "sqrt": np.sqrt,
    "sin": np.sin, "cos": np.cos, "tanh": np.tanh, "erf": _erf, "atan2": np.arctan2,
    "pow": np.power, "floor": np.floor, "ceil": np.ceil, "rint": np.rint, "fabs": np.fabs,
    "fmod": np.fmod, "copysign": np.copysign, "ipow": _ipow, "trunc": np.trunc,
    "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan, "sinh": np.sinh, "cosh": np.cosh,
    "asinh": np.arcsinh, "acosh": np.arccosh, "atanh": np.arctanh, "nextafter": np.nextafter,
    "hypot": np.hypot, "cbrt": cbrt_reference,
}


def _scipy(name: str) -> Callable[..., np.generic]:
    @cache
    def ufunc() -> Callable[..., np.generic]:
        import scipy.special  # on first use: it costs 0.1 s, and few kernels call it
        return getattr(scipy.special, name)

    return lambda *xs: ufunc()(*(np.float64(x) for x in xs))


_REFERENCE.update({name: _scipy(name) for name in LIBRARY_FUNCTIONS})


@cache
def reference(op: str, d: DType) -> Callable[..., np.generic]:
    """The NumPy reference of ``op`` with result dtype ``d``: what every renderer computes."""
    bare = bare_reference(op, d)

    def run(*xs: np.generic) -> np.generic:
        with np.errstate(all="ignore"):
            return bare(*xs)
    return run


@cache
def bare_reference(op: str, d: DType) -> Callable[..., np.generic]:
    """``reference(op, d)`` without an ``np.errstate`` of its own, for a caller that ignores
    floating-point errors around many calls (the loop IR's evaluator): entering one per
    scalar op was a third of a kernel's evaluation."""
    if op == "cast":
        return lambda x: bare_scalar(x, d)
    fn = _REFERENCE[op]
    t = _scalar_type(d)

    def run(*xs: np.generic) -> np.generic:
        r = fn(*xs)
        return r if type(r) is t else bare_scalar(r, d)
    return run


# ---- the template functions, defined over OPS ------------------------------------------------
def _zero(d: DType) -> Const:
    return constant(0, d)


def _isnan(a: Expr) -> Expr:
    return apply("ne", a, a)


def _abs(a: Expr) -> Expr:
    if a.dtype.is_float:
        return apply("fabs", a)
    if a.dtype.is_unsigned:
        return a
    return apply("select", apply("lt", a, _zero(a.dtype)), apply("neg", a), a)


def _sign(a: Expr) -> Expr:
    d = a.dtype
    if d.is_unsigned:
        return apply("select", apply("gt", a, _zero(d)), constant(1, d), _zero(d))
    rest = apply("select", apply("eq", a, _zero(d)), _zero(d), a) if d.is_float else _zero(d)  # NaN stays NaN
    return apply("select", apply("gt", a, _zero(d)), constant(1, d), apply("select", apply("lt", a, _zero(d)),
                                                                           constant(-1, d), rest))


def _int_divmod(a: Expr, b: Expr) -> tuple[Expr, Expr]:
    """NumPy's integer floor division and modulo: 0 for a zero divisor; b == -1 handled
    apart so the truncating division never sees (MIN, -1)."""
    d = a.dtype
    zero, one = _zero(d), constant(1, d)
    if d.is_unsigned:  # truncation is floor, and there is no (MIN, -1)
        safe = apply("select", apply("eq", b, zero), one, b)
        by_zero = apply("eq", b, zero)
        return (apply("select", by_zero, zero, apply("idiv", a, safe)),
                apply("select", by_zero, zero, apply("irem", a, safe)))
    special = apply("or", apply("eq", b, zero), apply("eq", b, constant(-1, d)))
    safe = apply("select", special, one, b)
    q, r = apply("idiv", a, safe), apply("irem", a, safe)
    fix = apply("and", apply("ne", r, zero), apply("ne", apply("lt", r, zero), apply("lt", safe, zero)))
    q = apply("sub", q, apply("select", fix, one, zero))
    r = apply("add", r, apply("select", fix, safe, zero))
    q = apply("select", apply("eq", b, zero), zero,
              apply("select", apply("eq", b, constant(-1, d)), apply("neg", a), q))
    return q, apply("select", special, zero, r)


def _float_divmod(a: Expr, b: Expr) -> tuple[Expr, Expr]:
    """NumPy's ``npy_divmod`` for floats (division by zero gives a / b and fmod's NaN)."""
    d = a.dtype
    zero, one, half = _zero(d), constant(1, d), constant(0.5, d)
    mod = apply("fmod", a, b)
    div = apply("div", apply("sub", a, mod), b)
    fix = apply("and", apply("ne", mod, zero), apply("ne", apply("lt", b, zero), apply("lt", mod, zero)))
    mod2 = apply("select", fix, apply("add", mod, b), apply("select", apply("ne", mod, zero), mod,
                                                            apply("copysign", zero, b)))
    div = apply("select", fix, apply("sub", div, one), div)
    fl = apply("floor", div)
    fl = apply("select", apply("gt", apply("sub", div, fl), half), apply("add", fl, one), fl)
    q = apply("select", apply("ne", div, zero), fl, apply("copysign", zero, apply("div", a, b)))
    by_zero = apply("eq", b, zero)
    return apply("select", by_zero, apply("div", a, b), q), apply("select", by_zero, apply("fmod", a, b), mod2)


def _floordiv(a: Expr, b: Expr) -> Expr:
    return (_float_divmod if a.dtype.is_float else _int_divmod)(a, b)[0]


def _mod(a: Expr, b: Expr) -> Expr:
    return (_float_divmod if a.dtype.is_float else _int_divmod)(a, b)[1]


def _pow(a: Expr, b: Expr) -> Expr:
    if not a.dtype.is_float:
        return apply("ipow", a, b)
    # x**2..x**4 as multiplies (gelu's x**3): pow is a call that keeps a loop scalar. x**1 is x
    # and x**0 is 1 whatever x (C99 F.9.4.4: NaN, infinities and -0 too), as NumPy gives them:
    # x**2's gradient is 2 * x**1.
    n = _const_value(b)
    if n == 1.0:
        return a
    if n == 0.0:
        return Const(1.0, a.dtype)
    if n in (2.0, 3.0, 4.0):
        sq = apply("mul", a, a)
        return sq if n == 2 else apply("mul", sq, a) if n == 3 else apply("mul", sq, sq)
    return apply("pow", a, b)


def maximum(a: Expr, b: Expr) -> Expr:
    """np.maximum: NaN propagates (a NaN ``a`` wins, else ``b``'s NaN loses every compare);
    of equal operands ``b`` (``maximum(0.0, -0.0)`` is -0.0, as NumPy)."""
    if a.dtype.is_bool:
        return apply("or", a, b)
    win = apply("gt", a, b)
    return apply("select", apply("or", win, _isnan(a)) if a.dtype.is_float else win, a, b)


def minimum(a: Expr, b: Expr) -> Expr:
    """np.minimum, NaN-propagating as ``maximum``."""
    if a.dtype.is_bool:
        return apply("and", a, b)
    win = apply("lt", a, b)
    return apply("select", apply("or", win, _isnan(a)) if a.dtype.is_float else win, a, b)


def _isfinite(a: Expr) -> Expr:
    if not a.dtype.is_float:
        return constant(True, bool_)
    return apply("lt", apply("fabs", a), constant(math.inf, a.dtype))


def _isinf(a: Expr) -> Expr:
    return apply("eq", apply("fabs", a), constant(math.inf, a.dtype))


def _signbit(a: Expr) -> Expr:
    # copysign carries the sign bit of -0.0 and of a negative NaN, which a compare misses.
    return apply("lt", apply("copysign", constant(1, a.dtype), a), _zero(a.dtype))


def _shift_ok(b: Expr) -> Expr:
    width = b.dtype.itemsize * 8
    in_range = apply("lt", b, constant(width, b.dtype))
    return in_range if b.dtype.is_unsigned else apply("and", apply("ge", b, _zero(b.dtype)), in_range)


def _lshift(a: Expr, b: Expr) -> Expr:
    """np.left_shift: 0 for a shift by a negative amount or by the width or more."""
    ok = _shift_ok(b)
    return apply("select", ok, apply("shl", a, apply("select", ok, b, _zero(b.dtype))), _zero(a.dtype))


def _rshift(a: Expr, b: Expr) -> Expr:
    """np.right_shift: past the width, -1 for a negative ``a`` and 0 otherwise."""
    ok = _shift_ok(b)
    negative = apply("lt", a, _zero(a.dtype))
    fill = _zero(a.dtype) if a.dtype.is_unsigned else apply("select", negative, constant(-1, a.dtype), _zero(a.dtype))
    return apply("select", ok, apply("shr", a, apply("select", ok, b, _zero(b.dtype))), fill)


def _intrinsic(name: str) -> Callable[..., Expr]:
    return lambda *xs: apply(name, *xs)


# Template function name -> its definition over OPS (arguments already typed expressions).
FUNCTIONS: dict[str, Callable[..., Expr]] = {
    "abs": _abs, "sign": _sign, "isnan": _isnan, "isfinite": _isfinite, "floordiv": _floordiv,
    "mod": _mod, "pow": _pow, "maximum": maximum, "minimum": minimum, "signbit": _signbit,
    "lshift": _lshift, "rshift": _rshift,
    **{n: _intrinsic(n) for n in ("exp", "expm1", "log", "log1p", "sqrt", "sin", "cos", "tanh", "erf",
                                   "floor", "ceil", "rint", "atan2", "trunc", "asin", "acos", "atan",
                                   "sinh", "cosh", "asinh", "acosh", "atanh", "nextafter", "hypot", "cbrt",
                                   *LIBRARY_FUNCTIONS)},
}

# ---- complex values as pairs of floats -----------------------------------------------------
def is_pair(x: object) -> bool:
    """Whether ``x`` is a complex value of the lowering (a pair of real expressions)."""
    return isinstance(x, tuple)


def pair_dtype(x: Pair) -> DType:
    """The complex dtype of pair ``x``."""
    return x[0].dtype.complex_dtype


def as_pair(x: Expr | Pair) -> Pair:
    """``x`` as a complex pair (a real ``x`` gets an imaginary part +0)."""
    return x if is_pair(x) else (x, _zero(x.dtype))


def choose(cond: Expr, a: Expr | Pair, b: Expr | Pair) -> Expr | Pair:
    """``select(cond, a, b)`` of two reals or two complex pairs (part by part)."""
    if is_pair(a) or is_pair(b):
        a, b = as_pair(a), as_pair(b)
        return apply("select", cond, a[0], b[0]), apply("select", cond, a[1], b[1])
    return apply("select", cond, a, b)


def convert(x: Expr | Pair, to: DType) -> Expr | Pair:
    """``x.astype(to)`` for real and complex ``x`` and ``to``, as NumPy casts: complex ->
    real drops the imaginary part, complex -> bool is true unless both parts are 0."""
    if is_pair(x):
        if to.is_complex:
            return apply("cast", x[0], to=to.real_dtype), apply("cast", x[1], to=to.real_dtype)
        if to.is_bool:
            return apply("or", apply("ne", x[0], _zero(x[0].dtype)), apply("ne", x[1], _zero(x[1].dtype)))
        return apply("cast", x[0], to=to)
    if to.is_complex:
        return apply("cast", x, to=to.real_dtype), _zero(to.real_dtype)
    return apply("cast", x, to=to)


def cadd(a: Pair, b: Pair) -> Pair:
    """``a + b`` of two complex pairs."""
    return apply("add", a[0], b[0]), apply("add", a[1], b[1])


def csub(a: Pair, b: Pair) -> Pair:
    """``a - b`` of two complex pairs."""
    return apply("sub", a[0], b[0]), apply("sub", a[1], b[1])


def cmul(a: Pair, b: Pair) -> Pair:
    """``a * b`` of two complex pairs: NumPy's four products."""
    # NumPy's loop: the four products, no recovery of infinities from NaN (C99 Annex G's).
    (ar, ai), (br, bi) = a, b
    return apply("sub", apply("mul", ar, br), apply("mul", ai, bi)), apply("add", apply("mul", ar, bi),
                                                                           apply("mul", ai, br))


def _cdiv(a: Pair, b: Pair) -> Pair:
    """NumPy's complex division (Smith's algorithm, multiplying by the reciprocal ``scl``
    as NumPy does, so the results are NumPy's bits); a zero divisor gives the parts
    divided by +0 (inf or NaN), as NumPy."""
    (ar, ai), (br, bi) = a, b
    d = ar.dtype
    zero, one = _zero(d), constant(1, d)
    abr, abi = apply("fabs", br), apply("fabs", bi)
    rat1 = apply("div", bi, br)
    scl1 = apply("div", one, apply("add", br, apply("mul", bi, rat1)))
    rat2 = apply("div", br, bi)
    scl2 = apply("div", one, apply("add", bi, apply("mul", br, rat2)))
    by_zero = apply("and", apply("eq", abr, zero), apply("eq", abi, zero))
    re = apply("select", by_zero, apply("div", ar, abr), apply("mul", apply("add", ar, apply("mul", ai, rat1)), scl1))
    im = apply("select", by_zero, apply("div", ai, abi), apply("mul", apply("sub", ai, apply("mul", ar, rat1)), scl1))
    real_larger = apply("ge", abr, abi)  # false when either is NaN: the second branch, as NumPy's
    return (apply("select", real_larger, re, apply("mul", apply("add", apply("mul", ar, rat2), ai), scl2)),
            apply("select", real_larger, im, apply("mul", apply("sub", apply("mul", ai, rat2), ar), scl2)))


def _csign(a: Pair) -> Pair:
    """NumPy's complex sign: z / |z|; 0 at 0 (+0 parts); NaN parts when |z| is NaN or both
    parts are infinite; the unit toward an infinite part otherwise."""
    re, im = a
    d = re.dtype
    zero, one, nan, inf = _zero(d), constant(1, d), constant(math.nan, d), constant(math.inf, d)
    h = apply("hypot", re, im)
    inf_re, inf_im = _isinf(re), _isinf(im)
    unit_re = apply("select", apply("gt", re, zero), one, constant(-1, d))
    unit_im = apply("select", apply("gt", im, zero), one, constant(-1, d))
    at_inf = (apply("select", inf_re, apply("select", inf_im, nan, unit_re), zero),
              apply("select", inf_re, apply("select", inf_im, nan, zero), unit_im))
    parts = []
    for k, x in enumerate((re, im)):
        finite = apply("select", apply("eq", h, zero), zero, apply("div", x, h))
        parts.append(apply("select", _isnan(h), nan, apply("select", apply("eq", h, inf), at_inf[k], finite)))
    return parts[0], parts[1]


def _cexp(a: Pair) -> Pair:
    """exp(a + ib) = exp(a)·(cos b + i sin b), then the standard's special cases (C99 Annex
    G's cexp) where that formula's inf·0 or inf·NaN says otherwise. As glibc's cexp (NumPy's),
    past t, the whole part of the largest exp argument, cos b and sin b are first multiplied
    by exp(t) and t taken from a, up to twice; past 3t the largest float stands for exp(a):
    exp(710 + 1.5i) is 1.58e307 + inf i, where exp(a) alone overflows."""
    re, im = a
    d = re.dtype
    zero, nan, inf = _zero(d), constant(math.nan, d), constant(math.inf, d)
    info = np.finfo(d.np)
    t = math.floor((info.maxexp - 1) * math.log(2))
    past, exp_t = constant(t, d), constant(float(np.asarray(math.exp(t), d.np)), d)
    cos_b, sin_b, rest = apply("cos", im), apply("sin", im), re
    for _ in range(2):
        over = apply("gt", rest, past)
        rest = apply("select", over, apply("sub", rest, past), rest)
        cos_b = apply("select", over, apply("mul", cos_b, exp_t), cos_b)
        sin_b = apply("select", over, apply("mul", sin_b, exp_t), sin_b)
    e = apply("select", apply("gt", rest, past), constant(float(info.max), d), apply("exp", rest))
    out_re, out_im = apply("mul", e, cos_b), apply("mul", e, sin_b)
    a_nan, b_zero, b_finite = _isnan(re), apply("eq", im, zero), _isfinite(im)
    rules = [  # (condition, re, im): the first that holds wins
        # b = ±0: im is b
        (apply("and", b_zero, apply("not", apply("or", a_nan, apply("eq", re, constant(-math.inf, d))))), out_re, im),
        (apply("and", _isfinite(re), apply("not", b_finite)), nan, nan),
        # glibc's sign
        (apply("and", apply("eq", re, constant(-math.inf, d)), apply("not", b_finite)), zero,
         apply("copysign", zero, im)),
        (apply("and", apply("eq", re, inf), apply("not", b_finite)), inf, nan),
        (apply("and", a_nan, b_zero), nan, im),
        (a_nan, nan, nan),
    ]
    return _first_rule(rules, out_re, out_im)


def _clog(a: Pair) -> Pair:
    """log(a + ib) = (log|z|, atan2(b, a)); near |z| = 1, where log(hypot) loses digits,
    the real part is log1p((M - 1)(M + 1) + m²)/2 (M, m: the larger and smaller |part|).
    Where |z| would overflow, or the parts are below 2^(mantissa digits) times the smallest
    normal float (hypot of subnormals keeps few bits), log|z| is that of z scaled by a power
    of two (exact), plus the power's log, as glibc's clog. hypot and atan2's IEEE rules give
    every special case of the standard."""
    re, im = a
    d = re.dtype
    info = np.finfo(d.np)
    ar, ai = apply("fabs", re), apply("fabs", im)
    big, small = apply("select", apply("ge", ar, ai), ar, ai), apply("select", apply("ge", ar, ai), ai, ar)
    huge = apply("gt", big, constant(info.max / 2, d))
    k = info.nmant + 2
    tiny = apply("lt", big, constant(2.0 ** k * float(info.tiny), d))
    scale = apply("select", huge, constant(0.25, d), apply("select", tiny, constant(2.0 ** k, d), constant(1, d)))
    h = apply("hypot", apply("mul", re, scale), apply("mul", im, scale))
    power = apply("select", huge, constant(math.log(4), d), apply("select", tiny, constant(-k * math.log(2), d),
                                                                   _zero(d)))
    one = constant(1, d)
    near = apply("and", apply("gt", h, constant(0.7, d)), apply("lt", h, constant(1.4, d)))
    close = apply("mul", constant(0.5, d), apply("log1p", apply("add", apply("mul", apply("sub", big, one),
                                                                             apply("add", big, one)),
                                                apply("mul", small, small))))
    far = apply("add", apply("log", h), power)
    return apply("select", apply("and", near, apply("eq", power, _zero(d))), close, far), apply("atan2", im, re)


def _hyperbolic_times(s: Expr, x: Expr, odd: bool) -> Expr:
    """``s * sinh(x)`` (``odd``) or ``s * cosh(x)`` without the hyperbolic function's overflow
    where the product is finite: past log of the largest float both are ``exp(|x|) / 2`` to the
    last bit, taken as ``(s exp(|x|/2)) (exp(|x|/2) / 2)`` (glibc scales likewise; a subnormal
    ``s`` is not halved first). ``s`` = 0 gives ``s`` (its
    sign times the factor's), not 0 * inf."""
    d = s.dtype
    ax = apply("fabs", x)
    h = apply("exp", apply("mul", ax, constant(0.5, d)))
    far = apply("mul", apply("mul", s, h), apply("mul", constant(0.5, d), h))
    near = apply("mul", s, apply("sinh" if odd else "cosh", x))
    if odd:
        far = apply("copysign", far, apply("mul", s, apply("copysign", constant(1, d), x)))
        s = apply("mul", s, apply("copysign", constant(1, d), x))
    # Past log of the largest float cosh(x) overflows; below it one product, as glibc's.
    out = apply("select", apply("gt", ax, constant(math.log(float(np.finfo(d.np).max)), d)), far, near)
    return apply("select", apply("eq", s, _zero(d)), s, out)


def _first_rule(rules: list[tuple[Expr, Expr, Expr]], re: Expr, im: Expr) -> Pair:
    """``(re, im)`` but where one of ``rules`` (condition, re, im) holds: the first that does."""
    for cond, r, i in reversed(rules):
        re, im = apply("select", cond, r, re), apply("select", cond, i, im)
    return re, im


def _special_cases(a: Pair) -> tuple[Expr, ...]:
    """The classes of a complex argument's parts the hyperbolic functions' special values
    turn on: x NaN, x infinite, x zero, y finite, y zero."""
    x, y = a
    return (_isnan(x), _isinf(x), apply("eq", x, _zero(x.dtype)), _isfinite(y),
            apply("eq", y, _zero(y.dtype)))


def _hyperbolic(a: Pair, odd: bool) -> Pair:
    """sinh(x + iy) = sinh(x) cos(y) + i cosh(x) sin(y) (``odd``) or cosh(x + iy) = cosh(x)
    cos(y) + i sinh(x) sin(y), and glibc's special values (C99 Annex G's; a real part +inf
    where it leaves the sign open)."""
    x, y = a
    d = x.dtype
    nan, inf = constant(math.nan, d), constant(math.inf, d)
    x_nan, x_inf, x_zero, y_finite, y_zero = _special_cases(a)
    y_other = apply("not", y_finite)
    rules = [(x_nan, nan, apply("select", y_zero, y, nan)),
             (apply("and", x_inf, y_zero), x if odd else inf,
              y if odd else apply("mul", y, apply("copysign", constant(1, d), x))),
             (apply("and", x_inf, y_other), inf, nan),
             (apply("and", x_zero, y_other), x, nan) if odd else
             (y_other, nan, apply("select", x_zero, _zero(d), nan))]
    return _first_rule(rules, _hyperbolic_times(apply("cos", y), x, odd),
                       _hyperbolic_times(apply("sin", y), x, not odd))


def _csinh(a: Pair) -> Pair:
    return _hyperbolic(a, True)


def _ccosh(a: Pair) -> Pair:
    return _hyperbolic(a, False)


def _csin(a: Pair) -> Pair:
    """sin(z) = -i sinh(iz), as C99 defines it (and so its special values)."""
    x, y = _csinh((apply("neg", a[1]), a[0]))
    # b infinite and a infinite or NaN: glibc's csin gives +inf (the standard leaves the sign open).
    inf = constant(math.inf, a[0].dtype)
    open_sign = apply("and", apply("not", _isfinite(a[0])), apply("eq", apply("fabs", a[1]), inf))
    return y, apply("select", open_sign, inf, apply("neg", x))


def _ccos(a: Pair) -> Pair:
    """cos(z) = cosh(iz), as C99 defines it (and so its special values)."""
    return _ccosh((apply("neg", a[1]), a[0]))


def _ctanh(a: Pair) -> Pair:
    """tanh(a + ib) as glibc's: sinh(a) cosh(a) / D + i sin(b) cos(b) / D with D = sinh(a)^2 +
    cos(b)^2; past |a| = (largest exponent - 1) ln 2 / 2, where D would overflow,
    ±1 + 4i sin(b) cos(b) exp(-2|a|); and glibc's special values."""
    re, im = a
    d = re.dtype
    sin, cos = apply("sin", im), apply("cos", im)
    sh, ch = apply("sinh", re), apply("cosh", re)
    den = apply("add", apply("mul", sh, sh), apply("mul", cos, cos))
    sc = apply("mul", sin, cos)
    limit = (np.finfo(d.np).maxexp - 1) * math.log(2) / 2
    far = apply("gt", apply("fabs", re), constant(limit, d))
    tail = apply("mul", apply("mul", constant(4, d), sc),
                 apply("exp", apply("mul", constant(-2, d), apply("fabs", re))))
    x_nan, x_inf, x_zero, y_finite, y_zero = _special_cases(a)
    nan = constant(math.nan, d)
    past_one = apply("and", y_finite, apply("gt", apply("fabs", im), constant(1, d)))
    return _first_rule([
        (x_inf, apply("copysign", constant(1, d), re),
         apply("copysign", _zero(d), apply("select", past_one, sc, im))),
        (apply("and", x_nan, y_zero), re, im),
        (apply("or", x_nan, apply("not", y_finite)), apply("select", x_zero, re, nan), nan),
    ], apply("select", far, apply("copysign", constant(1, d), re), apply("div", apply("mul", sh, ch), den)),
        apply("select", far, tail, apply("div", sc, den)))


def _csqrt(a: Pair) -> Pair:
    """The principal square root, as glibc's csqrt: t = sqrt((|a| + |z|) / 2), then
    (t, (b / t) / 2) for a > 0 and (|b / t| / 2, ±t) with b's sign otherwise; parts scaled by 1/4
    (the root by 2) past a quarter of the largest float, where |a| + |z| would overflow, and up
    below twice the smallest normal one, where it would lose bits;
    sqrt(±0 + ib) for b = ±0 is +0 + ib; an infinite b gives (inf, b), a = +inf (inf, 0·b)
    or (inf, NaN), a = -inf (0, ±inf) or (NaN, ±inf), any other NaN (NaN, NaN)."""
    re, im = a
    d = re.dtype
    zero, two, inf, nan = _zero(d), constant(2, d), constant(math.inf, d), constant(math.nan, d)
    info = np.finfo(d.np)
    one, half = constant(1, d), constant(0.5, d)
    big = apply("or", apply("gt", apply("fabs", re), constant(info.max / 4, d)),
                apply("gt", apply("fabs", im), constant(info.max / 4, d)))
    # Both parts below twice the smallest normal: scaled up by 2^(2k), the root down by 2^k
    # (glibc's k = (mantissa digits + 1) // 2), or (|a| + |z|) / 2 loses their bits.
    k = (info.nmant + 2) // 2
    tiny = apply("and", apply("lt", apply("fabs", re), constant(2 * info.tiny, d)),
                 apply("lt", apply("fabs", im), constant(2 * info.tiny, d)))
    quarter, up = constant(0.25, d), constant(2.0 ** (2 * k), d)
    # Scaled down, a real part below 4x the smallest normal is 0 (glibc's).
    big_re = apply("select", apply("ge", apply("fabs", re), constant(4 * info.tiny, d)),
                   apply("mul", re, quarter), zero)
    sr = apply("select", big, big_re, apply("select", tiny, apply("mul", re, up), re))
    si = apply("select", big, apply("mul", im, quarter), apply("select", tiny, apply("mul", im, up), im))
    h = apply("hypot", sr, si)
    # glibc's order of operations: the root of half of |z| + |a|, the other part half of b
    # over it (2 Re Im = b), so the two agree bit for bit.
    positive = apply("gt", sr, zero)
    root = apply("sqrt", apply("mul", half, apply("add", h, apply("fabs", sr))))
    ratio = apply("div", si, root)
    # Scaled down with |b| / 4 below 1, the ratio is taken whole and the root scaled at once,
    # so that half of it does not underflow.
    whole = apply("and", big, apply("lt", apply("fabs", si), one))
    other = apply("select", whole, ratio, apply("mul", half, ratio))
    root = apply("select", whole, apply("mul", root, two), root)
    scale = apply("select", whole, one,
                  apply("select", big, two, apply("select", tiny, constant(2.0 ** -k, d), one)))
    root, other = apply("mul", root, scale), apply("mul", other, scale)
    out_re = apply("select", positive, root, apply("fabs", other))
    out_im = apply("copysign", apply("select", positive, other, root), im)
    both_zero = apply("and", apply("eq", re, zero), apply("eq", im, zero))
    im_inf = _isinf(im)
    re_nan, im_nan = _isnan(re), _isnan(im)
    rules = [  # (condition, re, im): the first that holds wins
        (both_zero, zero, im),
        (im_inf, inf, im),
        (apply("eq", re, inf), inf, apply("select", im_nan, nan, apply("copysign", zero, im))),
        (apply("eq", re, constant(-math.inf, d)), apply("select", im_nan, nan, zero), apply("copysign", inf, im)),
        (apply("or", re_nan, im_nan), nan, nan),
    ]
    return _first_rule(rules, out_re, out_im)


def _cexpm1(a: Pair) -> Pair:
    """NumPy's complex expm1: expm1(a) cos(b) - 2 sin(b/2)^2 + i exp(a) sin(b)."""
    re, im = a
    d = re.dtype
    h = apply("sin", apply("mul", im, constant(0.5, d)))
    return (apply("sub", apply("mul", apply("expm1", re), apply("cos", im)), apply("mul", constant(2, d),
                                                                                   apply("mul", h, h))),
            apply("mul", apply("exp", re), apply("sin", im)))


def _clog1p(a: Pair) -> Pair:
    """NumPy's complex log1p: log(hypot(a + 1, b)) + i atan2(b, a + 1) (its own formula,
    which does not keep the digits of a tiny z's real part: NumPy's bits)."""
    re, im = a
    r1 = apply("add", re, constant(1, re.dtype))
    return apply("log", apply("hypot", r1, im)), apply("atan2", im, r1)


def _kahan_roots(bind: Callable[[Pair], Pair], a: Pair) -> tuple[Pair, Pair]:
    """sqrt(1 - z) and sqrt(1 + z), each part a let: 1 - z's imaginary part is -y (not 0 - y),
    so that a signed zero picks its side of a cut (Kahan)."""
    x, y = a
    one = constant(1, x.dtype)
    return bind(_csqrt((apply("sub", one, x), apply("neg", y)))), bind(_csqrt((apply("add", one, x), y)))


def _casin_parts(bind: Callable[[Pair], Pair], a: Pair) -> Pair:
    """asin(x + iy) by Kahan's formulas ("Branch cuts for complex elementary functions"):
    with A = sqrt(1 - z) and B = sqrt(1 + z) (1 - z's imaginary part -y, so that a signed
    zero picks its side of a cut), atan2(x, Re(A B)) + i asinh(Im(conj(A) B)); finite
    values only (past ``_HUGE`` the products overflow: the callers take log(2z) there)."""
    x, y = a
    (ar, ai), (br, bi) = _kahan_roots(bind, a)
    real = apply("fabs", apply("sub", apply("mul", ar, br), apply("mul", ai, bi)))   # >= 0; +0, not -0
    return apply("atan2", x, real), apply("asinh", apply("sub", apply("mul", ar, bi), apply("mul", ai, br)))


def _huge(a: Pair) -> Expr:
    """Whether either part of ``a`` is past the square root of the largest float over 4,
    where the inverse functions' formulas would overflow and 1/z^2 is below an ulp of
    their results: log(2z) there."""
    x, y = a
    big = constant(math.sqrt(float(np.finfo(x.dtype.np).max)) / 4, x.dtype)
    return apply("or", apply("gt", apply("fabs", x), big), apply("gt", apply("fabs", y), big))


def _casinh_far(a: Pair) -> Pair:
    """asinh(z) for a huge z: log(2|x| + 2i|y|) = log|z| + log 2 + i atan2(|y|, |x|), the
    signs of x and y given back (asinh is odd and commutes with conjugation)."""
    x, y = a
    d = x.dtype
    re, im = _log_twice(d, apply("fabs", x), apply("fabs", y))
    return apply("copysign", re, x), apply("copysign", im, y)


def _log_twice(d: DType, x: Expr, y: Expr) -> Pair:
    """log(2(x + iy)) for a huge x + iy: log((x + iy) / 4) + log 8, so that |z| does not
    overflow (the quarter is exact: a huge value is far from the subnormals)."""
    quarter = constant(0.25, d)
    re, im = _clog((apply("mul", x, quarter), apply("mul", y, quarter)))
    return apply("add", re, constant(math.log(8), d)), im


def _casinh(bind: Callable[[Pair], Pair], a: Pair, finite: Pair | None = None) -> Pair:
    """asinh(z) = -i asin(iz), as glibc's ``casinh`` (C99 Annex G's special values);
    ``finite``: the value to give where z is finite and not huge, in place of the formula's
    (a caller that takes those values from elsewhere spares its costly functions)."""
    x, y = a
    d = x.dtype
    if finite is None:
        p, q = _casin_parts(bind, (apply("neg", y), x))
        finite = q, apply("neg", p)
    re, im = finite
    far_re, far_im = _casinh_far(a)
    huge = _huge(a)
    nan, inf = constant(math.nan, d), constant(math.inf, d)
    x_inf, y_inf = _isinf(x), _isinf(y)
    x_nan, y_nan = _isnan(x), _isnan(y)
    y_zero = apply("eq", y, _zero(d))
    quarter, half = constant(math.pi / 4, d), constant(math.pi / 2, d)
    rules = [
        (apply("and", x_inf, y_inf), x, apply("copysign", quarter, y)),
        (apply("and", y_inf, apply("not", x_nan)), apply("copysign", inf, x), apply("copysign", half, y)),
        (apply("and", x_inf, y_nan), x, y),
        (x_inf, x, apply("copysign", _zero(d), y)),
        (apply("and", x_nan, y_inf), apply("copysign", inf, x), nan),   # glibc's: x's sign bit
        (apply("and", x_nan, y_zero), nan, y),
        (apply("or", x_nan, y_nan), nan, nan),
        (huge, far_re, far_im),
    ]
    return _first_rule(rules, re, im)


def _casin(bind: Callable[[Pair], Pair], a: Pair, finite: Pair | None = None) -> Pair:
    """asin(z) = -i asinh(iz), as glibc's ``casin``; ``finite`` as ``_casinh``'s."""
    x, y = a
    d = x.dtype
    p, q = _casinh(bind, (apply("neg", y), x), None if finite is None else (apply("neg", finite[1]), finite[0]))
    # glibc's casin takes a NaN part apart from casinh: z itself for x = 0, an infinity of
    # y's sign for an infinite part, else NaN.
    nan, inf = constant(math.nan, d), constant(math.inf, d)
    infinite = apply("or", _isinf(x), _isinf(y))
    return _first_rule([
        (apply("and", apply("or", _isnan(x), _isnan(y)), apply("eq", x, _zero(d))), x, y),
        (apply("and", apply("or", _isnan(x), _isnan(y)), infinite), nan, apply("copysign", inf, y)),
        (apply("or", _isnan(x), _isnan(y)), nan, nan),
    ], q, apply("neg", p))


def _cacos(bind: Callable[[Pair], Pair], a: Pair) -> Pair:
    """acos(z) by Kahan's formulas: 2 atan2(Re sqrt(1 - z), Re sqrt(1 + z)) + i asinh(Im(conj(sqrt(1 + z))
    sqrt(1 - z))); past ``_huge`` from log(2z); at special values pi/2 - asin(z) as glibc's
    ``cacos`` (a real part -0 made +0)."""
    x, y = a
    d = x.dtype
    (ar, ai), (br, bi) = _kahan_roots(bind, a)
    re = apply("mul", constant(2, d), apply("atan2", ar, br))
    im = apply("asinh", apply("sub", apply("mul", br, ai), apply("mul", bi, ar)))
    # Special values come from asin (its formula's values are not computed); past _huge,
    # -i log(2z) conjugated as acos is: atan2(|y|, x) - i copysign(log 2|z|, y) (pi/2 - Re asin
    # would cancel near the real axis).
    p, q = bind(_casin(bind, a, (_zero(d), _zero(d))))
    by_asin = apply("add", apply("sub", constant(math.pi / 2, d), p), _zero(d)), apply("neg", q)
    log_2z, _ = _log_twice(d, apply("fabs", x), apply("fabs", y))
    far = apply("atan2", apply("fabs", y), x), apply("neg", apply("copysign", log_2z, y))
    special = apply("or", apply("not", _isfinite(x)), apply("not", _isfinite(y)))
    return choose(special, by_asin, choose(_huge(a), far, (re, im)))


def _cacosh(bind: Callable[[Pair], Pair], a: Pair) -> Pair:
    """acosh(z) by Kahan's formulas: asinh(Re(conj(sqrt(z - 1)) sqrt(z + 1))) + 2i atan2(Im sqrt(z - 1),
    Re sqrt(z + 1)); past ``_huge`` log(2z), and glibc's ``cacosh``'s special values."""
    x, y = a
    d = x.dtype
    one = constant(1, d)
    cr, ci = bind(_csqrt((apply("sub", x, one), y)))
    dr, di = bind(_csqrt((apply("add", x, one), y)))
    re = apply("asinh", apply("add", apply("mul", cr, dr), apply("mul", ci, di)))
    im = apply("mul", constant(2, d), apply("atan2", ci, dr))
    far_re, far_im = _log_twice(d, x, y)
    nan, inf = constant(math.nan, d), constant(math.inf, d)
    x_inf, y_inf = _isinf(x), _isinf(y)
    x_nan, y_nan = _isnan(x), _isnan(y)
    pi = constant(math.pi, d)
    rules = [
        (apply("and", x_inf, y_inf), inf,
         apply("copysign", apply("select", apply("gt", x, _zero(d)), constant(math.pi / 4, d),
                                 constant(3 * math.pi / 4, d)), y)),
        (apply("and", y_inf, apply("not", x_nan)), inf, apply("copysign", constant(math.pi / 2, d), y)),
        (apply("and", x_inf, y_nan), inf, nan),
        (x_inf, inf, apply("copysign", apply("select", apply("gt", x, _zero(d)), _zero(d), pi), y)),
        (apply("and", x_nan, y_inf), inf, nan),
        (apply("and", apply("eq", x, _zero(d)), y_nan), nan, constant(math.pi / 2, d)),   # glibc's
        (apply("or", x_nan, y_nan), nan, nan),
        (_huge(a), far_re, far_im),
    ]
    return _first_rule(rules, re, im)


def _catanh(bind: Callable[[Pair], Pair], a: Pair) -> Pair:
    """atanh(z) by Kahan's formulas over |x| (atanh is odd and commutes with conjugation, so
    the real part takes x's sign and the imaginary part does not turn on it): log1p(4|x| /
    ((1 - |x|)^2 + y^2)) / 4 + i atan2(2y, (1 - |x|)(1 + |x|) - y^2) / 2; near 1, where the
    sum of squares would underflow, (log 4|x| - 2 log hypot(1 - |x|, y)) / 4; past ``_huge``
    Re(1/z) + i pi/2 (with y's sign); glibc's ``catanh``'s special values."""
    x, y = a
    d = x.dtype
    one, two, zero = constant(1, d), constant(2, d), _zero(d)
    ax = apply("fabs", x)
    u = apply("sub", one, ax)
    den = apply("add", apply("mul", u, u), apply("mul", y, y))
    h = apply("hypot", u, y)
    near = apply("lt", h, constant(2.0 ** -(np.finfo(d.np).nmant // 2 + 1), d))
    re = apply("select", near,
               apply("mul", constant(0.25, d), apply("sub", apply("log", apply("mul", constant(4, d), ax)),
                                                      apply("mul", two, apply("log", h)))),
               apply("mul", constant(0.25, d), apply("log1p", apply("div", apply("mul", constant(4, d), ax), den))))
    re = apply("copysign", re, x)
    im = apply("mul", constant(0.5, d), apply("atan2", apply("mul", two, y),
                                              apply("sub", apply("mul", u, apply("add", one, ax)), apply("mul", y, y))))
    # Re(1/z) = x / |z|^2, scaled by the larger part so that |z|^2 does not overflow
    m = apply("select", apply("ge", apply("fabs", x), apply("fabs", y)), apply("fabs", x), apply("fabs", y))
    xs, ys = apply("div", x, m), apply("div", y, m)
    far_re = apply("div", apply("div", xs, apply("add", apply("mul", xs, xs), apply("mul", ys, ys))), m)
    half = constant(math.pi / 2, d)
    nan = constant(math.nan, d)
    x_inf, y_inf = _isinf(x), _isinf(y)
    x_nan, y_nan = _isnan(x), _isnan(y)
    rules = [
        (apply("or", x_inf, y_inf), apply("copysign", zero, x),
         apply("select", y_nan, nan, apply("copysign", half, y))),
        (apply("and", apply("eq", x, zero), y_nan), x, nan),
        (apply("or", x_nan, y_nan), nan, nan),
        (_huge(a), far_re, apply("copysign", half, y)),
    ]
    return _first_rule(rules, re, im)


def _catan(bind: Callable[[Pair], Pair], a: Pair) -> Pair:
    """atan(z) = -i atanh(iz), as glibc's ``catan``."""
    x, y = a
    p, q = _catanh(bind, (apply("neg", y), x))
    return q, apply("neg", p)


def _cmul_annex_g(bind: Callable[[Pair], Pair], a: Pair, b: Pair) -> Pair:
    """``a * b`` as C's complex multiplication (C99 Annex G, libgcc's ``__muldc3``): the four
    products, but where both parts come out NaN and a factor or a product is infinite, the
    infinite parts taken as +-1 and the NaN ones as +-0, and the products again times
    infinity (an infinite factor gives an infinity, not NaN). ``bind`` as ``_cpow``'s."""
    (ar, ai), (br, bi) = a, b
    d = ar.dtype
    zero, one, inf = _zero(d), constant(1, d), constant(math.inf, d)
    x, y = bind(cmul(a, b))
    unit = lambda v: apply("copysign", apply("select", _isinf(v), one, zero), v)  # noqa: E731
    zero_nan = lambda v: apply("select", _isnan(v), apply("copysign", zero, v), v)  # noqa: E731
    a_inf = apply("or", _isinf(ar), _isinf(ai))
    b_inf = apply("or", _isinf(br), _isinf(bi))
    products_inf = apply("or", apply("or", _isinf(apply("mul", ar, br)), _isinf(apply("mul", ai, bi))),
                         apply("or", _isinf(apply("mul", ar, bi)), _isinf(apply("mul", ai, br))))
    # libgcc's three steps in order: each rewrites the factors the step before left.
    a_inf, b_inf = bind((a_inf, b_inf))
    ar1, ai1 = bind((apply("select", a_inf, unit(ar), ar), apply("select", a_inf, unit(ai), ai)))
    br1, bi1 = bind((apply("select", a_inf, zero_nan(br), br), apply("select", a_inf, zero_nan(bi), bi)))
    br2, bi2 = bind((apply("select", b_inf, unit(br1), br1), apply("select", b_inf, unit(bi1), bi1)))
    ar2, ai2 = bind((apply("select", b_inf, zero_nan(ar1), ar1), apply("select", b_inf, zero_nan(ai1), ai1)))
    late = apply("and", apply("not", apply("or", a_inf, b_inf)), products_inf)
    ar3, ai3 = bind(tuple(apply("select", late, zero_nan(v), v) for v in (ar2, ai2)))
    br3, bi3 = bind(tuple(apply("select", late, zero_nan(v), v) for v in (br2, bi2)))
    rx, ry = cmul((ar3, ai3), (br3, bi3))
    recover = apply("and", apply("and", _isnan(x), _isnan(y)), apply("or", apply("or", a_inf, b_inf), products_inf))
    return (apply("select", recover, apply("mul", inf, rx), x), apply("select", recover, apply("mul", inf, ry), y))


def _cpow(bind: Callable[[Pair], Pair], a: Expr | Pair, b: Expr | Pair) -> Pair:
    """NumPy's complex power (its ``npy_cpow``): 1 for a zero exponent, 0 or NaN for a zero
    base, an integer exponent below 100 in magnitude by binary powering (its lowest bit
    first from 1 + 0i, 1/z^n by NumPy's division for a negative one; 1, 2 and 3 written
    out), else glibc's ``cpow``, exp(b log a). ``bind`` names each square and product: the
    parts of a square read both parts of the factor twice, so seven squarings written as one
    expression would be a tree of 4^7 nodes."""
    (ar, ai), (br, bi) = as_pair(a), as_pair(b)
    a = (ar, ai)
    d = ar.dtype
    zero, one, nan = _zero(d), constant(1, d), constant(math.nan, d)
    small = apply("and", apply("and", apply("eq", bi, zero), apply("eq", apply("trunc", br), br)),
                  apply("lt", apply("fabs", br), constant(100, d)))
    # A cast of a float outside int64's range has no defined value: only small ones are cast.
    n = apply("cast", apply("select", small, br, zero), to=int64)
    small, m = bind((small, apply("select", apply("lt", n, Const(0, int64)), apply("neg", n), n)))
    power, square = (one, zero), a
    for bit in range(7):   # |n| < 100 < 2^7
        has = apply("ne", apply("and", m, Const(1 << bit, int64)), Const(0, int64))
        power = bind(choose(has, cmul(power, square), power))
        if bit < 6:
            square = bind(cmul(square, square))
    power = choose(apply("lt", br, zero), _cdiv((one, zero), power), power)
    a2 = bind(cmul(a, a))
    fallback = _cexp(bind(_cmul_annex_g(bind, (br, bi), bind(_clog(a)))))
    is_n = lambda k: apply("and", small, apply("eq", br, constant(k, d)))  # noqa: E731
    three = cmul(a, a2)
    rules = [
        (apply("and", apply("eq", br, zero), apply("eq", bi, zero)), one, zero),
        (apply("and", apply("eq", ar, zero), apply("eq", ai, zero)),
         apply("select", apply("gt", br, zero), zero, nan), apply("select", apply("gt", br, zero), zero, nan)),
        (is_n(1), ar, ai),
        (is_n(2), *a2),
        (is_n(3), *three),
        (small, *power),
    ]
    return _first_rule(rules, *fallback)


# Template function name -> its definition over the parts of complex operands (a function
# of complex values not named here has no loop lowering: Unsupported).
CFUNCTIONS: dict[str, Callable[..., Expr | Pair]] = {
    "abs": lambda a: apply("hypot", a[0], a[1]),
    "sign": _csign,
    "isnan": lambda a: apply("or", _isnan(a[0]), _isnan(a[1])),
    "isfinite": lambda a: apply("and", _isfinite(a[0]), _isfinite(a[1])),
    "real": lambda a: a[0],
    "imag": lambda a: a[1],
    "conj": lambda a: (a[0], apply("neg", a[1])),
    "exp": _cexp,
    "log": _clog,
    "expm1": _cexpm1,
    "log1p": _clog1p,
    "sqrt": _csqrt,
    "sin": _csin,
    "cos": _ccos,
    "sinh": _csinh,
    "cosh": _ccosh,
    "tanh": _ctanh,
}
# Definitions that name intermediate values (the lowering's ``bind``: a let in the kernel),
# called with it first.
CFUNCTIONS_BINDING: dict[str, Callable[..., Pair]] = {"pow": _cpow, "asin": _casin, "acos": _cacos,
                                                       "atan": _catan, "asinh": _casinh, "acosh": _cacosh,
                                                       "atanh": _catanh}
_CBINOPS = {"add": cadd, "sub": csub, "mul": cmul, "div": _cdiv}

_BINOPS = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "div", ast.BitAnd: "and", ast.BitOr: "or",
           ast.BitXor: "xor"}
_CMPOPS = {ast.Eq: "eq", ast.NotEq: "ne", ast.Lt: "lt", ast.LtE: "le", ast.Gt: "gt", ast.GtE: "ge"}


def _binop(op: str, x: Expr | Pair, y: Expr | Pair) -> Expr | Pair:
    if not (is_pair(x) or is_pair(y)):
        return apply(op, x, y)
    x, y = as_pair(x), as_pair(y)
    if op in _CBINOPS:
        return _CBINOPS[op](x, y)
    if op == "eq":
        return apply("and", apply("eq", x[0], y[0]), apply("eq", x[1], y[1]))
    if op == "ne":
        return apply("or", apply("ne", x[0], y[0]), apply("ne", x[1], y[1]))
    raise Unsupported(f"{op} of complex values")


def _unbound(x: Pair) -> Pair:
    return x


def expand(template: str | dict, operands: Sequence[Expr | Pair], out: DType,
           names: Sequence[str] = "abc", bind: Callable[[Pair], Pair] = _unbound) -> Expr | Pair:
    """An elementwise primitive's registry ``template`` over ``operands``, as an expression
    over ``OPS`` with result dtype ``out``; the template names the operands ``names`` (a
    reducer's combine names them ``acc`` and ``v``). Number literals take the first operand's dtype;
    a ``cast(a)`` converts to ``out``. A complex operand is a pair of real expressions, and
    so is a complex result; raises ``Unsupported`` for a function of complex values with no
    definition in ``CFUNCTIONS`` or ``CFUNCTIONS_BINDING``. ``bind``: a pair as a pair of
    names bound to its parts (the lowering's let; by default the pair itself), which the
    definitions that repeat a value name it with."""
    first = operands[0]
    d = pair_dtype(first) if is_pair(first) else first.dtype
    if isinstance(template, dict):
        template = template[d.kind]
    bound = dict(zip(names, operands))

    def walk(node: ast.AST) -> Expr | Pair:
        if isinstance(node, ast.Name):
            return bound[node.id]
        if isinstance(node, ast.Constant):
            return constant(node.value, d)
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            return _binop(_BINOPS[type(node.op)], walk(node.left), walk(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            x = walk(node.operand)
            return (apply("neg", x[0]), apply("neg", x[1])) if is_pair(x) else apply("neg", x)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.Not, ast.Invert)):
            x = walk(node.operand)
            if is_pair(x):
                raise Unsupported("not of a complex value")
            return apply("not", x)
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _CMPOPS:
            return _binop(_CMPOPS[type(node.ops[0])], walk(node.left), walk(node.comparators[0]))
        if isinstance(node, ast.BoolOp):
            op = "and" if isinstance(node.op, ast.And) else "or"
            values = [walk(v) for v in node.values]
            e = values[0]
            for v in values[1:]:
                e = _binop(op, e, v)
            return e
        if isinstance(node, ast.IfExp):
            return choose(walk(node.test), walk(node.body), walk(node.orelse))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            args = [walk(a) for a in node.args]
            name = node.func.id
            if name == "cast":
                return convert(args[0], out)
            if name == "complex":
                return args[0], args[1]
            if any(is_pair(a) for a in args):
                if name in CFUNCTIONS_BINDING:
                    return CFUNCTIONS_BINDING[name](bind, *args)
                if name not in CFUNCTIONS:
                    raise Unsupported(f"{name} of complex values")
                return CFUNCTIONS[name](*args)
            if name in ("real", "conj"):  # of a real value: itself
                return args[0]
            return FUNCTIONS[name](*args)
        raise ValueError(f"scalar template {template!r}: cannot lower {ast.dump(node)}")

    return convert(walk(_parse(template)), out)


@cache
def _parse(template: str) -> ast.expr:
    # A program lowers the same few templates many times (the MLP step: 159 parses of a
    # handful); walk only reads the tree, so one parse per template serves them all.
    return ast.parse(template, mode="eval").body


# ---- accumulators -------------------------------------------------------------------------
def accumulator_dtype(kind: str, d: DType) -> DType:
    """The dtype a reduction of ``kind`` producing ``d`` accumulates in: float32 sums and
    products in float64 (blocks of float32 partial sums flush into it), float16 in float32;
    a complex sum in two accumulators of its parts' (complex64: two float64)."""
    d = d.real_dtype
    if kind in ("sum", "prod") and d == float32:
        return float64
    if kind in ("sum", "prod") and d == float16:
        return float32
    return d


def start_value(kind: str, d: DType) -> Const:
    """The start of an accumulator of ``kind`` over dtype ``d``."""
    if kind == "sum":
        return constant(0, d)
    if kind == "prod":
        return constant(1, d)
    if kind in ("max", "argmax"):
        return constant(-math.inf if d.is_float else (False if d.is_bool else np.iinfo(d.np).min), d)
    if kind in ("min", "argmin"):
        return constant(math.inf if d.is_float else (True if d.is_bool else np.iinfo(d.np).max), d)
    if kind == "assign":   # no identity: its declaration's start is the value until assigned
        return constant(0, d)
    return constant(kind == "all", bool_)


def combine(kind: str, acc: Expr, v: Expr) -> Expr:
    """One step of an accumulator of ``kind`` that is not an arg kind: its new value.
    Float sums and products may be reassociated by a renderer (partial sums per lane)."""
    v = apply("cast", v, to=acc.dtype)
    return {"sum": lambda: apply("add", acc, v), "prod": lambda: apply("mul", acc, v),
            "max": lambda: maximum(acc, v), "min": lambda: minimum(acc, v),
            "any": lambda: apply("or", acc, v), "all": lambda: apply("and", acc, v), "assign": lambda: v}[kind]()


def arg_wins(kind: str, best: Expr, v: Expr) -> Expr:
    """Whether ``v`` replaces ``best`` in an argmax/argmin (after the first element, which
    always does): it compares better, or it is the first NaN (NumPy: a NaN wins)."""
    better = apply("gt" if kind == "argmax" else "lt", v, best)
    if v.dtype.is_float:
        better = apply("or", better, apply("and", _isnan(v), apply("not", _isnan(best))))
    return better


REDUCER_KINDS = {("0", "acc + v"): "sum", ("1", "acc * v"): "prod", ("lowest", "maximum(acc, v)"): "max",
                 ("highest", "minimum(acc, v)"): "min", ("False", "acc or v"): "any",
                 ("True", "acc and v"): "all", ("arg", ">"): "argmax", ("arg", "<"): "argmin"}


def reducer_kind(reducer: tuple[str, str]) -> str:
    """The accumulator kind of a registry ``reducer`` declaration."""
    return REDUCER_KINDS[tuple(reducer)]


__all__ = ["OPS", "COSTLY", "CHEAP", "INTRINSICS", "LIBRARY_FUNCTIONS", "ACCUMULATOR_KINDS", "CFUNCTIONS",
           "CFUNCTIONS_BINDING", "apply",
           "constant",
           "cadd", "csub", "cmul", "Pair", "Unsupported",
           "as_pair",
           "choose", "convert", "is_pair", "pair_dtype", "expand", "combine", "arg_wins",
           "accumulator_dtype", "start_value", "reducer_kind", "reference", "int64"]
