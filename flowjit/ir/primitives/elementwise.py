"""Elementwise primitives: unary math, binary arithmetic, comparisons, select and cast.

Binary and ternary ops broadcast their inputs as NumPy does and require one dtype (the
tracer inserts casts), so the IR stays explicit about every conversion. Templates are
scalar Python expressions over ``a, b, c`` using the names in ``SCALAR_FUNCTIONS``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from flowjit.ir.dtypes import ALL_DTYPES, FLOAT_DTYPES, NUMERIC_DTYPES, DType, bool_
from flowjit.ir.registry import attr, broadcast_shapes, declare, same_dtype
from flowjit.ir.types import TensorType

# The functions a scalar template may call; every backend provides each of them.
SCALAR_FUNCTIONS = (
    "abs", "sign", "exp", "expm1", "log", "log1p", "sqrt", "sin", "cos", "tanh", "erf",
    "floor", "ceil", "rint", "isnan", "isfinite", "floordiv", "mod", "pow", "maximum",
    "minimum", "atan2", "cast",
)


def _elementwise_rule(out_dtype: DType | None = None) -> Callable[..., TensorType]:
    def rule(in_types: Sequence[TensorType], **attrs) -> TensorType:
        d = same_dtype(in_types)
        shape = broadcast_shapes(*(t.shape for t in in_types))
        return TensorType(shape, out_dtype or d)
    return rule


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
    declare(name, kind="elementwise", rule=_elementwise_rule(out), arity=1,
            impl=_quiet(fn) if out is not None else _same(fn), template=template,
            dtypes=dtypes, domain=domain, differentiable=diff, **facts)


def _binary(name: str, fn, template, dtypes=NUMERIC_DTYPES, domain=None, out=None,
            commutative=False, diff=True, **facts):
    # ``facts``: the algebraic facts of ``Primitive`` (identity, idempotent, self_value).
    declare(name, kind="elementwise", rule=_elementwise_rule(out), arity=2,
            impl=_quiet(fn) if out is not None else _same(fn), template=template,
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
    if not np.issubdtype(a.dtype, np.integer):
        return np.power(a, b)
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
_unary("neg", np.negative, "-a", dtypes=NUMERIC_DTYPES, involution=True)
_unary("abs", np.abs, "abs(a)", dtypes=NUMERIC_DTYPES)
_unary("sign", np.sign, "sign(a)", dtypes=NUMERIC_DTYPES)
_unary("exp", np.exp, "exp(a)")
_unary("expm1", np.expm1, "expm1(a)")
_unary("log", np.log, "log(a)", domain="positive")
_unary("log1p", np.log1p, "log1p(a)", domain="gt_minus_one")
_unary("sqrt", np.sqrt, "sqrt(a)", domain="positive")
_unary("rsqrt", lambda x: 1 / np.sqrt(x), "1 / sqrt(a)", domain="positive")
_unary("sin", np.sin, "sin(a)")
_unary("cos", np.cos, "cos(a)")
_unary("tanh", np.tanh, "tanh(a)")
_unary("logistic", _logistic, "1 / (1 + exp(-a))")
_unary("erf", _erf, "erf(a)")
_unary("floor", np.floor, "floor(a)", diff=False)
_unary("ceil", np.ceil, "ceil(a)", diff=False)
_unary("round", np.rint, "rint(a)", diff=False)  # half to even, as np.round
_unary("isnan", np.isnan, "isnan(a)", out=bool_, diff=False)
_unary("isfinite", np.isfinite, "isfinite(a)", out=bool_, diff=False)
_unary("logical_not", np.logical_not, "not a", dtypes=(bool_,), out=bool_, diff=False,
       involution=True)

# ---- binary -------------------------------------------------------------------------
# x + 0.0 turns -0.0 into +0.0, x + -0.0 is exact; x - -0.0 turns -0.0 into +0.0, x - 0.0 is exact.
_binary("add", np.add, "a + b", commutative=True, identity=-0.0)
_binary("sub", np.subtract, "a - b", identity=0.0, self_value=0)
_binary("mul", np.multiply, "a * b", commutative=True, identity=1)
_binary("div", np.true_divide, "a / b", dtypes=FLOAT_DTYPES, domain="nonzero_rhs", identity=1)
_binary("floor_div", _int_safe(np.floor_divide), "floordiv(a, b)", domain="nonzero_rhs", diff=False)
_binary("mod", _int_safe(np.mod), "mod(a, b)", domain="nonzero_rhs")
_binary("pow", _int_pow, "pow(a, b)", domain="pow", identity=1)
_binary("maximum", np.maximum, "maximum(a, b)", commutative=True, idempotent=True)
_binary("minimum", np.minimum, "minimum(a, b)", commutative=True, idempotent=True)
_binary("atan2", np.arctan2, "atan2(a, b)", dtypes=FLOAT_DTYPES)
# The last field is ``x op x`` for ints and bools.
for _name, _fn, _op, _commutative, _self in (
        ("eq", np.equal, "==", True, True), ("ne", np.not_equal, "!=", True, False),
        ("lt", np.less, "<", False, False), ("le", np.less_equal, "<=", False, True),
        ("gt", np.greater, ">", False, False), ("ge", np.greater_equal, ">=", False, True)):
    _binary(_name, _fn, f"a {_op} b", dtypes=ALL_DTYPES, out=bool_,
            commutative=_commutative, diff=False, self_value=_self)
_binary("logical_and", np.logical_and, "a and b", dtypes=(bool_,), out=bool_, commutative=True, diff=False,
        identity=True, idempotent=True)
_binary("logical_or", np.logical_or, "a or b", dtypes=(bool_,), out=bool_, commutative=True, diff=False,
        identity=False, idempotent=True)
_binary("logical_xor", np.logical_xor, "a != b", dtypes=(bool_,), out=bool_, commutative=True, diff=False,
        identity=False, self_value=False)


# ---- select and cast ------------------------------------------------------------------
def _select_rule(in_types: Sequence[TensorType]) -> TensorType:
    from flowjit.ir.errors import ShapeError
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
    with np.errstate(all="ignore"):
        return np.asarray(x).astype(dtype.np)


declare("cast", kind="elementwise", rule=_cast_rule, impl=_cast_impl, arity=1,
        attrs={"dtype": attr("dtype")}, template="cast(a)", role="convert",
        doc="convert to dtype as ndarray.astype does (float to int truncates toward zero)")
