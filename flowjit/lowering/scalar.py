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
"""

from __future__ import annotations

import ast
import math
from collections.abc import Callable, Sequence
from functools import cache

import numpy as np

from flowjit.ir.dtypes import DType, bool_, float16, float32, float64, int64
from flowjit.lowering.loops import Const, Expr, Prim

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
                                      # (bool never: P writes x != 0 and select(x, 1, 0))
    # Math intrinsics, one per float width (the LLVM renderer ports scalar_math's algorithms).
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
    "ipow": (2, "i", "same"),         # integer power; a negative exponent as C's 1 / a**-b
}
# The ops printed and rendered as calls with a dtype suffix (``tanh.f32``).
INTRINSICS = frozenset(("exp", "expm1", "log", "log1p", "sqrt", "sin", "cos", "tanh", "erf", "atan2",
                        "pow", "floor", "ceil", "rint", "fabs", "fmod", "copysign", "ipow", "trunc",
                        "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "nextafter"))

ACCUMULATOR_KINDS = ("sum", "prod", "max", "min", "any", "all", "argmax", "argmin")


def kind_of(d: DType) -> str:
    """``d``'s kind letter in ``OPS``: "f", "i" or "b"."""
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


def P(op: str, *args: Expr, to: DType | None = None) -> Expr:
    """``op(*args)`` as an expression, folding constants and no-op arithmetic."""
    d = result_dtype(op, args, to)
    if op == "cast":
        src = args[0].dtype
        if src == d:
            return args[0]
        # Conversions to and from bool are comparisons and selects, so a renderer's cast
        # is only ever between numbers.
        if d.is_bool:
            return P("ne", args[0], C(0, src))
        if src.is_bool:
            return P("select", args[0], C(1, d), C(0, d))
    if all(isinstance(a, Const) for a in args) and op not in INTRINSICS:
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


def C(value: object, d: DType) -> Const:
    """A constant of dtype ``d``."""
    return Const(to_python(np_scalar(value, d), d), d)


def np_scalar(value: object, d: DType) -> np.generic:
    """``value`` as a NumPy scalar of ``d``."""
    with np.errstate(all="ignore"):
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
    from flowjit.ir.dtypes import dtype
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
}


@cache
def reference(op: str, d: DType) -> Callable[..., np.generic]:
    """The NumPy reference of ``op`` with result dtype ``d``: what every renderer computes."""
    if op == "cast":
        return lambda x: np_scalar(x, d)
    fn = _REFERENCE[op]

    def run(*xs: np.generic) -> np.generic:
        with np.errstate(all="ignore"):
            return np_scalar(fn(*xs), d)
    return run


# ---- the template functions, defined over OPS ------------------------------------------------
def _zero(d: DType) -> Const:
    return C(0, d)


def _isnan(a: Expr) -> Expr:
    return P("ne", a, a)


def _abs(a: Expr) -> Expr:
    if a.dtype.is_float:
        return P("fabs", a)
    if a.dtype.is_unsigned:
        return a
    return P("select", P("lt", a, _zero(a.dtype)), P("neg", a), a)


def _sign(a: Expr) -> Expr:
    d = a.dtype
    if d.is_unsigned:
        return P("select", P("gt", a, _zero(d)), C(1, d), _zero(d))
    rest = P("select", P("eq", a, _zero(d)), _zero(d), a) if d.is_float else _zero(d)  # NaN stays NaN
    return P("select", P("gt", a, _zero(d)), C(1, d), P("select", P("lt", a, _zero(d)), C(-1, d), rest))


def _int_divmod(a: Expr, b: Expr) -> tuple[Expr, Expr]:
    """NumPy's integer floor division and modulo: 0 for a zero divisor; b == -1 handled
    apart so the truncating division never sees (MIN, -1)."""
    d = a.dtype
    zero, one = _zero(d), C(1, d)
    if d.is_unsigned:  # truncation is floor, and there is no (MIN, -1)
        safe = P("select", P("eq", b, zero), one, b)
        by_zero = P("eq", b, zero)
        return P("select", by_zero, zero, P("idiv", a, safe)), P("select", by_zero, zero, P("irem", a, safe))
    special = P("or", P("eq", b, zero), P("eq", b, C(-1, d)))
    safe = P("select", special, one, b)
    q, r = P("idiv", a, safe), P("irem", a, safe)
    fix = P("and", P("ne", r, zero), P("ne", P("lt", r, zero), P("lt", safe, zero)))
    q = P("sub", q, P("select", fix, one, zero))
    r = P("add", r, P("select", fix, safe, zero))
    q = P("select", P("eq", b, zero), zero, P("select", P("eq", b, C(-1, d)), P("neg", a), q))
    return q, P("select", special, zero, r)


def _float_divmod(a: Expr, b: Expr) -> tuple[Expr, Expr]:
    """NumPy's ``npy_divmod`` for floats (division by zero gives a / b and fmod's NaN)."""
    d = a.dtype
    zero, one, half = _zero(d), C(1, d), C(0.5, d)
    mod = P("fmod", a, b)
    div = P("div", P("sub", a, mod), b)
    fix = P("and", P("ne", mod, zero), P("ne", P("lt", b, zero), P("lt", mod, zero)))
    mod2 = P("select", fix, P("add", mod, b), P("select", P("ne", mod, zero), mod, P("copysign", zero, b)))
    div = P("select", fix, P("sub", div, one), div)
    fl = P("floor", div)
    fl = P("select", P("gt", P("sub", div, fl), half), P("add", fl, one), fl)
    q = P("select", P("ne", div, zero), fl, P("copysign", zero, P("div", a, b)))
    by_zero = P("eq", b, zero)
    return P("select", by_zero, P("div", a, b), q), P("select", by_zero, P("fmod", a, b), mod2)


def _floordiv(a: Expr, b: Expr) -> Expr:
    return (_float_divmod if a.dtype.is_float else _int_divmod)(a, b)[0]


def _mod(a: Expr, b: Expr) -> Expr:
    return (_float_divmod if a.dtype.is_float else _int_divmod)(a, b)[1]


def _pow(a: Expr, b: Expr) -> Expr:
    if not a.dtype.is_float:
        return P("ipow", a, b)
    # x**2..x**4 as multiplies (gelu's x**3): pow is a call that keeps a loop scalar.
    n = _const_value(b)
    if n in (2.0, 3.0, 4.0):
        sq = P("mul", a, a)
        return sq if n == 2 else P("mul", sq, a) if n == 3 else P("mul", sq, sq)
    return P("pow", a, b)


def maximum(a: Expr, b: Expr) -> Expr:
    """np.maximum: NaN propagates (a NaN ``a`` wins, else ``b``'s NaN loses every compare);
    of equal operands ``b`` (``maximum(0.0, -0.0)`` is -0.0, as NumPy)."""
    if a.dtype.is_bool:
        return P("or", a, b)
    win = P("gt", a, b)
    return P("select", P("or", win, _isnan(a)) if a.dtype.is_float else win, a, b)


def minimum(a: Expr, b: Expr) -> Expr:
    """np.minimum, NaN-propagating as ``maximum``."""
    if a.dtype.is_bool:
        return P("and", a, b)
    win = P("lt", a, b)
    return P("select", P("or", win, _isnan(a)) if a.dtype.is_float else win, a, b)


def _isfinite(a: Expr) -> Expr:
    if not a.dtype.is_float:
        return C(True, bool_)
    return P("lt", P("fabs", a), C(math.inf, a.dtype))


def _signbit(a: Expr) -> Expr:
    # copysign carries the sign bit of -0.0 and of a negative NaN, which a compare misses.
    return P("lt", P("copysign", C(1, a.dtype), a), _zero(a.dtype))


def _shift_ok(b: Expr) -> Expr:
    width = b.dtype.itemsize * 8
    in_range = P("lt", b, C(width, b.dtype))
    return in_range if b.dtype.is_unsigned else P("and", P("ge", b, _zero(b.dtype)), in_range)


def _lshift(a: Expr, b: Expr) -> Expr:
    """np.left_shift: 0 for a shift by a negative amount or by the width or more."""
    ok = _shift_ok(b)
    return P("select", ok, P("shl", a, P("select", ok, b, _zero(b.dtype))), _zero(a.dtype))


def _rshift(a: Expr, b: Expr) -> Expr:
    """np.right_shift: past the width, -1 for a negative ``a`` and 0 otherwise."""
    ok = _shift_ok(b)
    fill = _zero(a.dtype) if a.dtype.is_unsigned else P("select", P("lt", a, _zero(a.dtype)), C(-1, a.dtype),
                                                          _zero(a.dtype))
    return P("select", ok, P("shr", a, P("select", ok, b, _zero(b.dtype))), fill)


def _intrinsic(name: str) -> Callable[..., Expr]:
    return lambda *xs: P(name, *xs)


# Template function name -> its definition over OPS (arguments already typed expressions).
FUNCTIONS: dict[str, Callable[..., Expr]] = {
    "abs": _abs, "sign": _sign, "isnan": _isnan, "isfinite": _isfinite, "floordiv": _floordiv,
    "mod": _mod, "pow": _pow, "maximum": maximum, "minimum": minimum, "signbit": _signbit,
    "lshift": _lshift, "rshift": _rshift,
    **{n: _intrinsic(n) for n in ("exp", "expm1", "log", "log1p", "sqrt", "sin", "cos", "tanh", "erf",
                                   "floor", "ceil", "rint", "atan2", "trunc", "asin", "acos", "atan",
                                   "sinh", "cosh", "asinh", "acosh", "atanh", "nextafter")},
}

_BINOPS = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "div", ast.BitAnd: "and", ast.BitOr: "or",
           ast.BitXor: "xor"}
_CMPOPS = {ast.Eq: "eq", ast.NotEq: "ne", ast.Lt: "lt", ast.LtE: "le", ast.Gt: "gt", ast.GtE: "ge"}


def expand(template: str | dict, operands: Sequence[Expr], out: DType) -> Expr:
    """An elementwise primitive's registry ``template`` over ``operands``, as an expression
    over ``OPS`` with result dtype ``out``. Number literals take the operands' dtype; a
    ``cast(a)`` converts to ``out``."""
    d = operands[0].dtype
    if isinstance(template, dict):
        template = template[d.kind]
    names = dict(zip("abc", operands))

    def walk(node: ast.AST) -> Expr:
        if isinstance(node, ast.Name):
            return names[node.id]
        if isinstance(node, ast.Constant):
            return C(node.value, d)
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            return P(_BINOPS[type(node.op)], walk(node.left), walk(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return P("neg", walk(node.operand))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.Not, ast.Invert)):
            return P("not", walk(node.operand))
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _CMPOPS:
            return P(_CMPOPS[type(node.ops[0])], walk(node.left), walk(node.comparators[0]))
        if isinstance(node, ast.BoolOp):
            op = "and" if isinstance(node.op, ast.And) else "or"
            values = [walk(v) for v in node.values]
            e = values[0]
            for v in values[1:]:
                e = P(op, e, v)
            return e
        if isinstance(node, ast.IfExp):
            return P("select", walk(node.test), walk(node.body), walk(node.orelse))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            args = [walk(a) for a in node.args]
            if node.func.id == "cast":
                return P("cast", args[0], to=out)
            return FUNCTIONS[node.func.id](*args)
        raise ValueError(f"scalar template {template!r}: cannot lower {ast.dump(node)}")

    return P("cast", walk(_parse(template)), to=out)


@cache
def _parse(template: str) -> ast.expr:
    # A program lowers the same few templates many times (the MLP step: 159 parses of a
    # handful); walk only reads the tree, so one parse per template serves them all.
    return ast.parse(template, mode="eval").body


# ---- accumulators -------------------------------------------------------------------------
def accumulator_dtype(kind: str, d: DType) -> DType:
    """The dtype a reduction of ``kind`` producing ``d`` accumulates in: float32 sums and
    products in float64 (blocks of float32 partial sums flush into it), float16 in float32."""
    if kind in ("sum", "prod") and d == float32:
        return float64
    if kind in ("sum", "prod") and d == float16:
        return float32
    return d


def start_value(kind: str, d: DType) -> Const:
    """The start of an accumulator of ``kind`` over dtype ``d``."""
    if kind == "sum":
        return C(0, d)
    if kind == "prod":
        return C(1, d)
    if kind in ("max", "argmax"):
        return C(-math.inf if d.is_float else (False if d.is_bool else np.iinfo(d.np).min), d)
    if kind in ("min", "argmin"):
        return C(math.inf if d.is_float else (True if d.is_bool else np.iinfo(d.np).max), d)
    return C(kind == "all", bool_)


def combine(kind: str, acc: Expr, v: Expr) -> Expr:
    """One step of an accumulator of ``kind`` that is not an arg kind: its new value.
    Float sums and products may be reassociated by a renderer (partial sums per lane)."""
    v = P("cast", v, to=acc.dtype)
    return {"sum": lambda: P("add", acc, v), "prod": lambda: P("mul", acc, v),
            "max": lambda: maximum(acc, v), "min": lambda: minimum(acc, v),
            "any": lambda: P("or", acc, v), "all": lambda: P("and", acc, v)}[kind]()


def arg_wins(kind: str, best: Expr, v: Expr) -> Expr:
    """Whether ``v`` replaces ``best`` in an argmax/argmin (after the first element, which
    always does): it compares better, or it is the first NaN (NumPy: a NaN wins)."""
    better = P("gt" if kind == "argmax" else "lt", v, best)
    if v.dtype.is_float:
        better = P("or", better, P("and", _isnan(v), P("not", _isnan(best))))
    return better


REDUCER_KINDS = {("0", "acc + v"): "sum", ("1", "acc * v"): "prod", ("lowest", "maximum(acc, v)"): "max",
                 ("highest", "minimum(acc, v)"): "min", ("False", "acc or v"): "any",
                 ("True", "acc and v"): "all", ("arg", ">"): "argmax", ("arg", "<"): "argmin"}


def reducer_kind(reducer: tuple[str, str]) -> str:
    """The accumulator kind of a registry ``reducer`` declaration."""
    return REDUCER_KINDS[tuple(reducer)]


__all__ = ["OPS", "INTRINSICS", "ACCUMULATOR_KINDS", "P", "C", "expand", "combine", "arg_wins",
           "accumulator_dtype", "start_value", "reducer_kind", "reference", "int64"]
