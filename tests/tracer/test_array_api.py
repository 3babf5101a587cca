"""The NumPy-like surface (``flowjit/tracer/numpy/``) checked against NumPy itself.

Every check runs each function two ways, eagerly on NumPy arrays (``fj.sum(x)``) and traced
(``fj.function(lambda x: fj.sum(x))(x)``), and asks for NumPy's values, dtype and shape.
Integer index arrays out of range are clamped by design (as in JAX), so the generated
ones stay in range; Python ints out of range raise IndexError as in NumPy.
"""

from __future__ import annotations

import math
import operator
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import flowjit as fj
from flowjit.ir.errors import FlowjitTypeError
from flowjit.tracer.core import Tracer


@pytest.fixture(autouse=True, params=["interpreter", "llvm"])
def backend(request, monkeypatch, tmp_path_factory) -> str:
    """Every test here runs the traced program on the interpreter and compiled (the
    default backend), as users run it."""
    monkeypatch.setenv("FLOWJIT_BACKEND", request.param)
    monkeypatch.setenv("FLOWJIT_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "flowjit-cache"))
    return request.param


# The dtype grids below run whole on the interpreter and compiled on a sample that keeps
# every op and every dtype on one side (each compiled case is a cold compile of its own).
def compiled_sample(backend: str, keep: bool, why: str) -> None:
    """Skip a grid case on the compiled backend unless it is in the compiled sample."""
    if backend != "interpreter" and not keep:
        pytest.skip(f"compiled on a sample of the grid: {why}")


# The backend fixture is set once per test, which is what every example needs.
SETTINGS = settings(max_examples=100, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
MANY = settings(SETTINGS, max_examples=300)
DTYPES = [np.bool_, np.int8, np.int32, np.int64, np.uint8, np.uint32, np.uint64, np.float32, np.float64]
DTYPE_IDS = ["bool", "i8", "i32", "i64", "u8", "u32", "u64", "f32", "f64"]


# ---- helpers -----------------------------------------------------------------------------


def assert_same(out, expected, rtol: float = 1e-6, atol: float = 0.0, what: str = "") -> None:
    """``out`` has NumPy's dtype, shape and values (close for floats, exact otherwise)."""
    if isinstance(expected, (tuple, list)):
        assert isinstance(out, (tuple, list)) and len(out) == len(expected), what
        for o, e in zip(out, expected):
            assert_same(o, e, rtol, atol, what)
        return
    assert not isinstance(out, Tracer), what
    out = np.asarray(out)
    expected = np.asarray(expected)
    assert out.dtype == expected.dtype, f"{what}: dtype {out.dtype}, NumPy gives {expected.dtype}"
    assert out.shape == expected.shape, f"{what}: shape {out.shape}, NumPy gives {expected.shape}"
    if expected.dtype.kind == "f":
        np.testing.assert_allclose(out, expected, rtol=rtol, atol=atol, equal_nan=True, err_msg=what)
    else:
        np.testing.assert_array_equal(out, expected, err_msg=what)


def numpy_result(np_fn, *args):
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return np_fn(*args)


def check(fn, np_fn, *args, traced=None, rtol: float = 1e-6, atol: float = 0.0) -> None:
    """``fn(*args)`` eagerly and ``fj.function(traced or fn)(*args)`` both equal ``np_fn(*args)``."""
    expected = numpy_result(np_fn, *args)
    assert_same(fn(*args), expected, rtol, atol, "eager")
    assert_same(fj.function(traced or fn)(*args), expected, rtol, atol, "traced")


def sample(rng: np.random.Generator, shape, dtype, low: float = -3, high: float = 3) -> np.ndarray:
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.integers(0, 2, shape).astype(bool)
    if dtype.kind == "i":
        return rng.integers(int(low), int(high) + 1, shape).astype(dtype)
    if dtype.kind == "u":
        return rng.integers(max(0, int(low)), int(high) + 1, shape).astype(dtype)
    return rng.uniform(low, high, shape).astype(dtype)


# ---- elementwise: binary operators, promotion and weak scalars ----------------------------

OPS = {
    "add": (fj.add, operator.add, np.add),
    "sub": (fj.subtract, operator.sub, np.subtract),
    "mul": (fj.multiply, operator.mul, np.multiply),
    "div": (fj.divide, operator.truediv, np.true_divide),
    "floordiv": (fj.floor_divide, operator.floordiv, np.floor_divide),
    "mod": (fj.mod, operator.mod, np.mod),
    "pow": (fj.power, operator.pow, np.power),
    "lt": (fj.less, operator.lt, np.less),
    "le": (fj.less_equal, operator.le, np.less_equal),
    "gt": (fj.greater, operator.gt, np.greater),
    "ge": (fj.greater_equal, operator.ge, np.greater_equal),
    "eq": (fj.equal, operator.eq, np.equal),
    "ne": (fj.not_equal, operator.ne, np.not_equal),
    "maximum": (fj.maximum, None, np.maximum),
    "minimum": (fj.minimum, None, np.minimum),
}
# NumPy raises on these of two bools (floor division, modulo and power of bools are int8).
BOOL_UNSUPPORTED = {"sub"}


def _operands(rng, name: str, da, db):
    a = sample(rng, (3, 1, 4), da)
    b = sample(rng, (5, 1), db)
    if name in ("div", "floordiv", "mod"):
        # Integer division by zero is backend-defined; keep both sides non-zero.
        a = a if np.dtype(da).kind == "b" else np.where(a == 0, 2, a).astype(da)
        b = b if np.dtype(db).kind == "b" else np.where(b == 0, 2, b).astype(db)
    if name == "pow":
        if np.dtype(db).kind == "i":
            b = np.abs(b).astype(db)  # NumPy rejects negative integer powers
        if np.dtype(da).kind == "f":
            a = np.abs(a).astype(da) + np.asarray(0.5, da)
    return a, b


@pytest.mark.parametrize("name", list(OPS))
@pytest.mark.parametrize("da", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("db", [np.bool_, np.int32, np.uint8, np.float32, np.float64],
                         ids=["bool", "i32", "u8", "f32", "f64"])
def test_binary_arrays(name, da, db, backend) -> None:
    compiled_sample(backend, db in (np.bool_, np.float64) or da is db, "every left dtype, bool and f64 on the right")
    fj_fn, op, np_fn = OPS[name]
    both_bool = np.dtype(da) == np.bool_ and np.dtype(db) == np.bool_
    a, b = _operands(np.random.default_rng(0), name, da, db)
    op = op or fj_fn
    if both_bool and name in BOOL_UNSUPPORTED:
        # NumPy raises: so does flowjit, naming the op.
        with pytest.raises((TypeError, ValueError)):
            fj_fn(a, b)
        with pytest.raises((TypeError, ValueError)):
            fj.function(lambda x, y: op(x, y))(a, b)
        return
    check(fj_fn, np_fn, a, b, traced=lambda x, y: op(x, y))
    # A NumPy array on the left of a Tracer: NumPy defers to the Tracer's reflected operator.
    if name != "pow" and not (name == "sub" and np.bool_ in (da, db)):
        check(lambda x: fj_fn(b, x), lambda x: np_fn(b, x), a, traced=lambda x: op(b, x))


@pytest.mark.parametrize("name", ["add", "sub", "mul", "div", "floordiv", "mod", "pow", "lt", "eq", "maximum"])
@pytest.mark.parametrize("da", [np.int32, np.int64, np.float32, np.float64], ids=["i32", "i64", "f32", "f64"])
@pytest.mark.parametrize("scalar", [2, 3.5, True, np.float64(2.0), np.int32(3), np.float32(1.5)],
                         ids=["int", "float", "bool", "np.f64", "np.i32", "np.f32"])
def test_binary_scalars(name, da, scalar, backend) -> None:
    """Python scalars are weak (NEP 50), NumPy scalars strong; both sides, closed over and as arguments."""
    compiled_sample(backend, type(scalar) in (int, np.float32), "a weak Python int and a strong NumPy float32")
    fj_fn, op, np_fn = OPS[name]
    if name == "sub" and isinstance(scalar, bool):
        scalar = 2
    x = sample(np.random.default_rng(1), (2, 3), da, 1, 4)
    op = op or fj_fn
    check(lambda x: fj_fn(x, scalar), lambda x: np_fn(x, scalar), x, traced=lambda x: op(x, scalar))
    check(lambda x: fj_fn(scalar, x), lambda x: np_fn(scalar, x), x, traced=lambda x: op(scalar, x))
    # The scalar as a traced argument keeps its weakness (and a NumPy scalar its dtype).
    expected = numpy_result(np_fn, x, scalar)
    assert_same(fj.function(lambda x, s: op(x, s))(x, scalar), expected, what="scalar argument")


def test_explicit_dtypes_end_python_scalar_weakness() -> None:
    """A traced Python scalar is weak; astype, asarray, full and where give arrays of fixed dtype."""
    x = np.ones(3, np.float32)
    for f in (lambda x, s: fj.astype(s, np.float64) + x, lambda x, s: fj.asarray(s) + x,
              lambda x, s: fj.full(3, s) + x, lambda x, s: fj.where(x > 0, s, 1) + x, lambda x, s: s * 2 + x):
        expected = f(x, 2.0)
        assert_same(fj.function(f)(x, 2.0), expected)
    assert fj.function(lambda x, s: s * 2 + x)(x, 2.0).dtype == np.float32


@pytest.mark.parametrize("x_dtype, scalar, op, out_dtype", [
    (np.float32, 2.0, operator.mul, np.float32),
    (np.int32, 1, operator.add, np.int32),
    (np.int32, 2.5, operator.mul, np.float64),
    (np.int32, "array", operator.truediv, np.float64),
    (np.float32, np.float64(2), operator.mul, np.float64),
    (np.float32, 2, operator.truediv, np.float32),
    (np.int64, True, operator.add, np.int64),
    (np.bool_, 1, operator.add, np.int64),
    (np.bool_, 1.0, operator.mul, np.float64),
    (np.float16, 2.0, operator.mul, np.float16),
    (np.int32, np.int64(1), operator.add, np.int64),
])
def test_promotion_table(x_dtype, scalar, op, out_dtype) -> None:
    x = np.arange(1, 7).reshape(2, 3).astype(x_dtype)
    y = x if isinstance(scalar, str) else scalar
    out = fj.function(lambda x: op(x, y))(x)
    assert out.dtype == np.dtype(out_dtype)
    assert_same(out, op(x, y), rtol=1e-3)


def test_python_int_out_of_range_for_int32() -> None:
    x = np.arange(3, dtype=np.int32)
    big = 2**40
    with pytest.raises(OverflowError):
        fj.add(x, big)
    with pytest.raises(OverflowError):
        fj.function(lambda x: x + big)(x)
    # Comparisons stay exact, as in NumPy 2.
    check(lambda x: fj.less(x, big), lambda x: x < big, x, traced=lambda x: x < big)


@pytest.mark.parametrize("name", ["and", "or", "xor"])
def test_bool_bitwise(name) -> None:
    op = {"and": operator.and_, "or": operator.or_, "xor": operator.xor}[name]
    fj_fn = {"and": fj.logical_and, "or": fj.logical_or, "xor": fj.logical_xor}[name]
    rng = np.random.default_rng(2)
    a, b = sample(rng, (3, 4), bool), sample(rng, (4,), bool)
    check(fj_fn, op, a, b, traced=lambda x, y: op(x, y))
    check(lambda x: fj_fn(x, True), lambda x: op(x, True), a, traced=lambda x: op(x, True))
    check(lambda x: fj_fn(False, x), lambda x: op(False, x), a, traced=lambda x: op(False, x))
    check(fj.logical_not, np.logical_not, a, traced=lambda x: ~x)
    with pytest.raises(FlowjitTypeError, match=f"bitwise_{name}: x1 \\(float64\\) and x2 \\(float64\\)"):
        fj.function(lambda x: op(x, x))(np.arange(3.0))


UNARY = ["negative", "abs", "exp", "expm1", "log", "log1p", "sqrt", "sin", "cos", "tan", "tanh", "floor", "ceil",
         "rint", "round", "sign", "isnan", "isinf", "isfinite", "square", "reciprocal"]


@pytest.mark.parametrize("name", UNARY)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_unary(name, dtype) -> None:
    if dtype == np.bool_ and name in ("negative", "sign"):
        # NumPy raises: so does flowjit (square and reciprocal of bools are int8, as NumPy's).
        with pytest.raises((TypeError, ValueError)):
            getattr(fj, name)(np.array([True, False]))
        return
    low = 1 if name == "reciprocal" else 0.5 if name in ("log", "sqrt") else -3
    x = sample(np.random.default_rng(3), (3, 4), dtype, low, 3)
    if np.dtype(dtype).kind == "f":
        x.flat[:3] = [np.inf, -np.inf, np.nan] if name not in ("log", "sqrt") else [np.inf, np.nan, 0.0]
        x.flat[3:6] = [0.5, 1.5, -2.5] if name not in ("log", "sqrt", "reciprocal") else [0.5, 1.5, 2.5]
    np_fn = getattr(np, name)
    check(getattr(fj, name), np_fn, x, rtol=1e-6 if np.dtype(dtype).kind != "b" else 1e-3)
    if name in ("negative", "abs"):
        check(getattr(fj, name), np_fn, x, traced=operator.neg if name == "negative" else abs)


@pytest.mark.parametrize("decimals", [-2, -1, 0, 1, 3])
@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.float32, np.float64], ids=["i32", "i64", "f32", "f64"])
def test_round_decimals(decimals, dtype) -> None:
    rng = np.random.default_rng(4)
    x = (sample(rng, (4, 5), np.float64, -500, 500)).astype(dtype)
    if np.dtype(dtype).kind == "f":
        x.flat[:4] = [1.25, -2.675, 125.0, 0.5]
    else:
        x.flat[:4] = [125, -135, 150, 5]
    check(lambda x: fj.round(x, decimals), lambda x: np.round(x, decimals), x,
          traced=lambda x: x.round(decimals))


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_isinf_isnan_isfinite_on_any_dtype(dtype) -> None:
    x = sample(np.random.default_rng(5), (2, 3), dtype)
    for name in ("isinf", "isnan", "isfinite"):
        check(getattr(fj, name), getattr(np, name), x)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("to", DTYPES + [np.float16], ids=DTYPE_IDS + ["f16"])
def test_astype(dtype, to) -> None:
    x = sample(np.random.default_rng(6), (3, 4), dtype, -5, 5)
    check(lambda x: fj.astype(x, to), lambda x: x.astype(to), x, traced=lambda x: x.astype(to))


@pytest.mark.parametrize("bounds", [(0, 2), (-1.5, 1.5), (None, 1), (0.5, None), (np.float32(0), np.float32(1))])
@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.float32, np.float64], ids=["i32", "i64", "f32", "f64"])
def test_clip(bounds, dtype) -> None:
    x = sample(np.random.default_rng(7), (3, 4), dtype)
    lo, hi = bounds
    check(lambda x: fj.clip(x, lo, hi), lambda x: np.clip(x, lo, hi), x, traced=lambda x: x.clip(lo, hi))
    check(lambda x, h: fj.clip(x, x[0], h), lambda x, h: np.clip(x, x[0], h), x, np.full((3, 1), 1, dtype))


@pytest.mark.parametrize("da", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("db", [np.int32, np.float32, "int", "float"])
def test_where(da, db) -> None:
    rng = np.random.default_rng(8)
    c = sample(rng, (3, 1), bool)
    a = sample(rng, (4,), da)
    b = {"int": 2, "float": 2.5}.get(db) if isinstance(db, str) else sample(rng, (3, 4), db)
    check(lambda c, a: fj.where(c, a, b), lambda c, a: np.where(c, a, b), c, a)
    check(lambda a: fj.where(a, 1, 0), lambda a: np.where(a, 1, 0), a)
    check(lambda a: fj.where(a, 1.5, 0), lambda a: np.where(a, 1.5, 0), a)


# ---- reductions ----------------------------------------------------------------------------

REDUCTIONS = ["sum", "prod", "max", "min", "mean", "var", "std", "any", "all", "argmax", "argmin", "cumsum"]
AXES = [None, 0, 1, -1, (0, 2), (-1, 0), ()]


def _reduce_ok(name: str, axis) -> bool:
    if name in ("argmax", "argmin", "cumsum"):
        return axis is None or isinstance(axis, int)
    return True


def _reduce_call(mod, name, axis, keepdims):
    if name == "cumsum":
        return lambda x: mod.cumsum(x, axis=axis)
    return lambda x: getattr(mod, name)(x, axis=axis, keepdims=keepdims)


@pytest.mark.parametrize("name", REDUCTIONS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_reductions_grid(name, dtype, backend) -> None:
    compiled_sample(backend, dtype in (np.bool_, np.int8, np.uint64, np.float32, np.float64),
                    "bool, the narrowest and widest ints, both floats")
    rng = np.random.default_rng(9)
    x = sample(rng, (3, 4, 2), dtype, -2, 2) if name != "prod" else sample(rng, (3, 4, 2), dtype, 0.5, 1.5)
    if name == "prod" and np.dtype(dtype).kind == "i":
        x = sample(rng, (3, 4, 2), dtype, -2, 2)
    for axis in AXES:
        if not _reduce_ok(name, axis):
            continue
        for keepdims in ([False] if name == "cumsum" else [False, True]):
            f = _reduce_call(fj, name, axis, keepdims)
            check(f, _reduce_call(np, name, axis, keepdims), x, atol=1e-12 if name in ("var", "std") else 0)


@st.composite
def reduction_case(draw):
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=0, max_size=4)))
    name = draw(st.sampled_from(REDUCTIONS))
    dtype = draw(st.sampled_from(DTYPES))
    n = len(shape)
    if name in ("argmax", "argmin", "cumsum") or n == 0:
        axis = draw(st.one_of(st.none(), st.integers(-n, n - 1))) if n else None
    else:
        axis = draw(st.one_of(st.none(), st.integers(-n, n - 1),
                              st.lists(st.integers(0, n - 1), unique=True).map(tuple)))
    keepdims = draw(st.booleans()) if name != "cumsum" else False
    seed = draw(st.integers(0, 2**16))
    return shape, name, dtype, axis, keepdims, seed


@MANY
@given(reduction_case())
def test_reductions_random_shapes(case) -> None:
    shape, name, dtype, axis, keepdims, seed = case
    x = sample(np.random.default_rng(seed), shape, dtype, -2, 2)
    atol = 1e-12
    if x.dtype.kind == "f":
        # A compiled sum adds in another order than NumPy's pairwise sum: its error is bounded
        # by n eps sum|x| (a cancelling float32 sum of 8 values differed by 5e-7 of 0.1).
        atol = max(atol, 2 * x.size * float(np.finfo(x.dtype).eps) * float(np.abs(x).astype(np.float64).sum()))
    check(_reduce_call(fj, name, axis, keepdims), _reduce_call(np, name, axis, keepdims), x, atol=atol)


def test_reductions_of_empty_axes() -> None:
    x = np.zeros((0, 3), np.int32)
    for name in ("sum", "prod", "any", "all"):
        check(_reduce_call(fj, name, 0, False), _reduce_call(np, name, 0, False), x)
    for name in ("max", "argmax"):
        with pytest.raises(ValueError):
            getattr(fj, name)(x, axis=0)
        with pytest.raises(ValueError):
            fj.function(lambda x: getattr(fj, name)(x, axis=0))(x)


def test_reduction_dtype_arguments() -> None:
    x = np.arange(12, dtype=np.int32).reshape(3, 4)
    check(lambda x: fj.sum(x, dtype=np.int32), lambda x: np.sum(x, dtype=np.int32), x)
    check(lambda x: fj.mean(x, axis=0, dtype=np.float32), lambda x: np.mean(x, axis=0, dtype=np.float32), x)
    check(lambda x: fj.var(x, ddof=1), lambda x: np.var(x, ddof=1), x)
    check(lambda x: fj.std(x, axis=1, ddof=1, keepdims=True), lambda x: np.std(x, axis=1, ddof=1, keepdims=True), x)
    check(lambda x: fj.cumsum(x, axis=1, dtype=np.float32), lambda x: np.cumsum(x, axis=1, dtype=np.float32), x)
    h = np.linspace(-1, 1, 12).astype(np.float16)
    check(fj.mean, np.mean, h, rtol=1e-3)


# ---- linear algebra --------------------------------------------------------------------------

MATMUL_SHAPES = [((3, 4), (4, 5)), ((4,), (4, 5)), ((3, 4), (4,)), ((4,), (4,)), ((2, 3, 4), (4, 5)),
                 ((5, 1, 3, 4), (2, 4, 6)), ((4,), (2, 4, 3)), ((2, 3, 4), (4,)), ((1, 3, 4), (7, 4, 2))]


@pytest.mark.parametrize("sa, sb", MATMUL_SHAPES)
@pytest.mark.parametrize("da, db", [(np.float64, np.float64), (np.float32, np.float32), (np.int32, np.int32),
                                    (np.int32, np.float32), (np.bool_, np.bool_), (np.int64, np.bool_)])
def test_matmul(sa, sb, da, db) -> None:
    rng = np.random.default_rng(10)
    a, b = sample(rng, sa, da), sample(rng, sb, db)
    check(fj.matmul, np.matmul, a, b, traced=lambda x, y: x @ y)


def test_matmul_rejects_scalars() -> None:
    with pytest.raises(FlowjitTypeError):
        fj.matmul(np.ones(3), 2.0)


@pytest.mark.parametrize("sa, sb", [((3, 4), (4, 5)), ((4,), (4,)), ((2, 3, 4), (4,)), ((2, 3, 4), (5, 4, 2)),
                                    ((), (3, 2)), ((3, 2), ()), ((4,), (4, 3))])
def test_dot(sa, sb) -> None:
    rng = np.random.default_rng(11)
    a, b = sample(rng, sa, np.float64), sample(rng, sb, np.float64)
    check(fj.dot, np.dot, a, b, traced=lambda x, y: x.dot(y))
    ai, bi = sample(rng, sa, np.int32), sample(rng, sb, np.int32)
    check(fj.dot, np.dot, ai, bi)


@pytest.mark.parametrize("sa, sb, axes", [
    ((2, 3, 4), (3, 4, 5), 2), ((2, 3, 4), (4, 5), 1), ((2, 3), (4, 5), 0), ((2, 3, 4), (3, 4, 2), ([1, 2], [0, 1])),
    ((2, 3, 4), (4, 2), ([2], [0])), ((2, 3, 4), (3, 2, 2), ([1], [0])), ((2, 3, 4), (4, 3, 5), ([1, 2], [1, 0])),
    ((2, 3, 4), (5, 3), (1, 1)), ((2, 3, 4), (2, 3, 4), 3), ((3, 4), (2, 4), (-1, -1)),
])
def test_tensordot(sa, sb, axes) -> None:
    rng = np.random.default_rng(12)
    a, b = sample(rng, sa, np.float64), sample(rng, sb, np.float32)
    check(lambda x, y: fj.tensordot(x, y, axes), lambda x, y: np.tensordot(x, y, axes), a, b)


@pytest.mark.parametrize("sa, sb", [((3,), (4,)), ((2, 3), (4,)), ((), (3,)), ((2, 2), (3, 1))])
def test_outer(sa, sb) -> None:
    rng = np.random.default_rng(13)
    check(fj.outer, np.outer, sample(rng, sa, np.float32), sample(rng, sb, np.int32))


EINSUMS = [
    ("ij,jk->ik", [(3, 4), (4, 5)]), ("ij,jk", [(3, 4), (4, 5)]), ("ij,jk->ki", [(3, 4), (4, 5)]),
    ("ij->ji", [(3, 4)]), ("ij", [(3, 4)]), ("ji", [(3, 4)]), ("ba", [(3, 4)]), ("ij->", [(3, 4)]),
    ("ijk->j", [(2, 3, 4)]), ("ijk->kij", [(2, 3, 4)]), ("i,i->", [(4,), (4,)]), ("i,i", [(4,), (4,)]),
    ("i,j->ij", [(3,), (4,)]), ("i,j", [(3,), (4,)]), ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("bij,bjk->kb", [(2, 3, 4), (2, 4, 5)]), ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]),
    ("i,j,k->ijk", [(2,), (3,), (4,)]), ("ij,ij,ij->i", [(3, 4), (3, 4), (3, 4)]), ("ab,ab->a", [(3, 4), (3, 4)]),
    ("ab,ab", [(3, 4), (3, 4)]), ("abc,c->ab", [(2, 3, 4), (4,)]), ("ijk,kj", [(2, 3, 4), (4, 3)]),
    ("ab,cd->abcd", [(2, 3), (4, 5)]), ("b i , i j -> b j", [(2, 3), (3, 4)]),
    ("ijk,kl,lm->ijm", [(2, 3, 4), (4, 5), (5, 2)]), ("bhqd,bhkd->bhqk", [(2, 3, 4, 5), (2, 3, 6, 5)]),
]


@pytest.mark.parametrize("sub, shapes", EINSUMS, ids=[s for s, _ in EINSUMS])
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int32, np.bool_], ids=["f64", "f32", "i32", "bool"])
def test_einsum(sub, shapes, dtype) -> None:
    rng = np.random.default_rng(14)
    ops = [sample(rng, s, dtype) for s in shapes]
    check(lambda *o: fj.einsum(sub, *o), lambda *o: np.einsum(sub, *o), *ops, atol=1e-6)


def test_einsum_diagonals_ellipses_and_bad_specs() -> None:
    np.testing.assert_allclose(fj.einsum("ii->i", np.arange(9.0).reshape(3, 3)), [0.0, 4.0, 8.0])
    x = np.arange(18.0).reshape(2, 3, 3)
    np.testing.assert_allclose(fj.einsum("...ij->...ji", x), np.einsum("...ij->...ji", x))
    with pytest.raises(Exception, match=r"einsum: 2 operand specs"):
        fj.einsum("ij,jk->ik", np.ones((2, 2)))
    with pytest.raises(Exception, match=r"einsum"):
        fj.einsum("ijk->k", np.ones((2, 2)))


# ---- layout ----------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(-1,), (4, -1), (2, -1, 2), (24,), (-1, 1, 4), [6, 4], (2, 3, 4)])
def test_reshape(shape) -> None:
    x = np.arange(24.0).reshape(2, 3, 4)
    check(lambda x: fj.reshape(x, shape), lambda x: np.reshape(x, shape), x, traced=lambda x: x.reshape(shape))
    check(lambda x: fj.reshape(x, *shape), lambda x: np.reshape(x, shape), x, traced=lambda x: x.reshape(*shape))


def test_reshape_edges() -> None:
    check(lambda x: fj.reshape(x, (1, 1)), lambda x: np.reshape(x, (1, 1)), np.float32(3.5))
    check(lambda x: fj.reshape(x, ()), lambda x: np.reshape(x, ()), np.ones((1, 1)))
    check(lambda x: fj.reshape(x, -1), lambda x: np.reshape(x, -1), np.int32(4))
    check(lambda x: fj.reshape(x, (0, 5)), lambda x: np.reshape(x, (0, 5)), np.ones((0, 3)))
    check(fj.ravel, np.ravel, np.arange(6).reshape(2, 3), traced=lambda x: x.ravel())
    for shape in ((4, -1), (-1, -1), (4, 2)):
        with pytest.raises(ValueError):
            fj.reshape(np.ones(6), shape)
        with pytest.raises(ValueError):
            fj.function(lambda x: x.reshape(shape))(np.ones(6))
    with pytest.raises(ValueError):
        fj.split(np.ones(6), 4)


@pytest.mark.parametrize("axes", [None, (1, 0, 2), (2, 0, 1), (-1, 0, 1), (0, 1, 2)])
def test_transpose(axes) -> None:
    x = np.arange(24).reshape(2, 3, 4).astype(np.int32)
    check(lambda x: fj.transpose(x, axes), lambda x: np.transpose(x, axes), x)
    check(lambda x: fj.transpose(x, axes), lambda x: np.transpose(x, axes), x,
          traced=lambda x: x.transpose(axes) if axes is not None else x.transpose())
    if axes is not None:
        check(lambda x: fj.transpose(x, axes), lambda x: np.transpose(x, axes), x,
              traced=lambda x: x.transpose(*axes))
    check(lambda x: fj.transpose(x), lambda x: x.T, x, traced=lambda x: x.T)


@pytest.mark.parametrize("a1, a2", [(0, 1), (0, -1), (2, 2), (-3, 1)])
def test_swapaxes(a1, a2) -> None:
    x = np.arange(24.0).reshape(2, 3, 4)
    check(lambda x: fj.swapaxes(x, a1, a2), lambda x: np.swapaxes(x, a1, a2), x,
          traced=lambda x: x.swapaxes(a1, a2))


@pytest.mark.parametrize("src, dst", [(0, 2), (2, 0), (-1, 0), (0, -1), (1, 1), (1, -2), ((0, 1), (2, 0)),
                                      ([0], [-1]), ((0, 2), (1, 0)), ((0, 1, 2), (2, 0, 1))])
def test_moveaxis(src, dst) -> None:
    x = np.arange(24.0).reshape(2, 3, 4)
    check(lambda x: fj.moveaxis(x, src, dst), lambda x: np.moveaxis(x, src, dst), x)


@pytest.mark.parametrize("axis", [None, 0, 2, (0, 2), -2, (-4,), ()])
def test_squeeze(axis) -> None:
    x = np.arange(6.0).reshape(1, 3, 1, 2)
    check(lambda x: fj.squeeze(x, axis), lambda x: np.squeeze(x, axis), x, traced=lambda x: x.squeeze(axis))


@pytest.mark.parametrize("axis", [0, -1, 3, (0, 2), (-1, -2), (0, 4)])
def test_expand_dims(axis) -> None:
    x = np.arange(24.0).reshape(2, 3, 4)
    check(lambda x: fj.expand_dims(x, axis), lambda x: np.expand_dims(x, axis), x)
    check(lambda x: fj.expand_dims(x, 0), lambda x: np.expand_dims(x, 0), np.float32(1))


@pytest.mark.parametrize("shape", [(2, 3, 4), (5, 2, 3, 4), (3, 4), (1, 3, 4)])
def test_broadcast_to(shape) -> None:
    x = np.arange(12).reshape(1, 3, 4).astype(np.int32)
    if len(shape) < 3:
        x = x[0]
    check(lambda x: fj.broadcast_to(x, shape), lambda x: np.broadcast_to(x, shape), x)
    check(lambda x: fj.broadcast_to(x, (2, 3)), lambda x: np.broadcast_to(x, (2, 3)), np.float32(2))
    check(lambda x: fj.broadcast_to(x, 3), lambda x: np.broadcast_to(x, 3), np.ones(1))


@pytest.mark.parametrize("axis", [0, 1, -1, None])
def test_concatenate_and_stack(axis) -> None:
    rng = np.random.default_rng(15)
    a, b, c = sample(rng, (2, 3, 4), np.float32), sample(rng, (2, 3, 4), np.int32), sample(rng, (2, 3, 4), bool)
    check(lambda x, y: fj.concatenate([x, y], axis), lambda x, y: np.concatenate([x, y], axis), a, b)
    check(lambda x, y, z: fj.concatenate((x, y, z), axis), lambda x, y, z: np.concatenate((x, y, z), axis), c, b, c)
    check(lambda x: fj.concatenate([x, 2 * x], axis), lambda x: np.concatenate([x, 2 * x], axis), b)
    ax = 0 if axis is None else axis
    check(lambda x, y: fj.stack([x, y], ax), lambda x, y: np.stack([x, y], ax), a, b)
    for ax in (3, -2, -4):
        check(lambda x, y: fj.stack([x, y, x], ax), lambda x, y: np.stack([x, y, x], ax), a, c)


def test_concatenate_and_stack_edges() -> None:
    s = np.float64(3.5)
    check(lambda x: fj.stack([x, x, x]), lambda x: np.stack([x, x, x]), s)
    check(lambda x: fj.concatenate([x, x], None), lambda x: np.concatenate([x, x], None), s)
    check(lambda x: fj.concatenate([x, x[:0]], 0), lambda x: np.concatenate([x, x[:0]], 0), np.ones((2, 3)))
    with pytest.raises(FlowjitTypeError):
        fj.concatenate([])


@pytest.mark.parametrize("sections", [2, [1], [1, 3], [0, 5], [3, 1], [-1], [2, 2]])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_split(sections, axis) -> None:
    x = np.arange(4 * 4 * 6.0).reshape(4, 4, 6)
    check(lambda x: tuple(fj.split(x, sections, axis)), lambda x: tuple(np.split(x, sections, axis)), x)


@pytest.mark.parametrize("pad_width", [1, (1, 2), ((1, 0), (0, 2), (3, 1)), [[1, 2]], ((0, 0),) * 3,
                                       ((1,), (2,), (0,)), [2]])
@pytest.mark.parametrize("value", [0, 1.5, -2])
@pytest.mark.parametrize("dtype", [np.int32, np.float32, np.bool_], ids=["i32", "f32", "bool"])
def test_pad(pad_width, value, dtype) -> None:
    x = sample(np.random.default_rng(16), (2, 3, 4), dtype)
    check(lambda x: fj.pad(x, pad_width, constant_values=value),
          lambda x: np.pad(x, pad_width, constant_values=value), x)


def test_pad_rejects_the_modes_it_lacks() -> None:
    np.testing.assert_array_equal(fj.pad(np.arange(3.0), 2, mode="reflect"), np.pad(np.arange(3.0), 2, mode="reflect"))
    for mode, kw in (("linear_ramp", {}), ("mean", {}), ("reflect", {"reflect_type": "odd"})):
        with pytest.raises(FlowjitTypeError):
            fj.pad(np.ones(3), 1, mode=mode, **kw)


# ---- gathers -----------------------------------------------------------------------------------


@pytest.mark.parametrize("indices", [1, -1, [0, 2, -1], [[1, 0], [2, -2]], np.array(2, np.int32),
                                     np.array([[0], [1]], np.int64)])
@pytest.mark.parametrize("axis", [None, 0, 1, -1])
def test_take(indices, axis) -> None:
    x = np.arange(3 * 3 * 4.0).reshape(3, 3, 4)
    check(lambda x: fj.take(x, indices, axis=axis), lambda x: np.take(x, indices, axis=axis), x,
          traced=lambda x: x.take(indices, axis=axis))
    i = np.asarray(indices)
    check(lambda x, i: fj.take(x, i, axis=axis), lambda x, i: np.take(x, i, axis=axis), x, i)


def test_take_clamps_out_of_range() -> None:
    x = np.arange(5.0)
    idx = np.array([-7, 9, 2])
    expected = x[np.clip(np.where(idx < 0, idx + 5, idx), 0, 4)]
    assert_same(fj.take(x, idx), expected)
    assert_same(fj.function(lambda x, i: fj.take(x, i))(x, idx), expected)


@pytest.mark.parametrize("axis", [0, 1, 2, -1])
def test_take_along_axis(axis) -> None:
    rng = np.random.default_rng(17)
    x = sample(rng, (2, 3, 4), np.float64)
    idx = np.argsort(x, axis=axis)
    for i in (idx, np.take(idx, [0], axis=axis), -1 - idx, idx.astype(np.int32)):
        check(lambda x, i: fj.take_along_axis(x, i, axis), lambda x, i: np.take_along_axis(x, i, axis), x, i)
    check(lambda x: fj.take_along_axis(x, fj.argmax(x, axis=axis, keepdims=True), axis),
          lambda x: np.take_along_axis(x, np.argmax(x, axis=axis, keepdims=True), axis), x)


def test_take_along_axis_broadcast_and_none() -> None:
    x = np.arange(24.0).reshape(2, 3, 4)
    for i in (np.array([[[0, 1, 2, 0]]]), np.array([[[0], [1], [2], [1], [0]]])):
        check(lambda x, i: fj.take_along_axis(x, i, 1), lambda x, i: np.take_along_axis(x, i, 1), x, i)
    check(lambda x, i: fj.take_along_axis(x, i, None), lambda x, i: np.take_along_axis(x, i, None), x,
          np.array([0, 5, 23, -1]))


def test_take_empty() -> None:
    x = np.arange(5.0)
    check(lambda x: fj.take(x, []), lambda x: np.take(x, np.array([], dtype=np.int64)), x)
    e = np.zeros((2, 0))
    check(lambda x: fj.take(x, [], axis=1), lambda x: np.take(x, np.array([], dtype=np.int64), axis=1), e)
    with pytest.raises(IndexError):
        fj.take(e, [0], axis=1)


MISC = [
    ("matmul empty k", lambda x, y: fj.matmul(x, y), np.matmul, (np.ones((3, 0)), np.ones((0, 4)))),
    ("matmul empty m", lambda x, y: fj.matmul(x, y), np.matmul, (np.ones((0, 3)), np.ones((3, 4)))),
    ("dot empty", lambda x, y: fj.dot(x, y), np.dot, (np.ones((0,)), np.ones((0,)))),
    ("scalar index", lambda x, i: fj.getitem(x, i), lambda x, i: x[i], (np.arange(12).reshape(3, 4), np.int64(1))),
    ("0-d array index twice", lambda x, i: fj.getitem(x, (i, i)), lambda x, i: x[i, i],
     (np.arange(12).reshape(3, 4), np.array(2))),
    ("column index", lambda x, i: fj.getitem(x, (slice(None), i)), lambda x, i: x[:, i],
     (np.arange(12).reshape(3, 4), np.array([[1], [3]], np.int32))),
    ("negative traced index", lambda x, i: fj.getitem(x, i), lambda x, i: x[i],
     (np.arange(5.0), np.array([-1, -5, 0]))),
    ("uint8 index", lambda x: fj.getitem(x, np.array([0, 2], np.uint8)), lambda x: x[np.array([0, 2], np.uint8)],
     (np.arange(5.0),)),
    ("sum of a Python int", lambda: fj.sum(3), lambda: np.sum(3), ()),
    ("mean of 0-d", fj.mean, np.mean, (np.float32(3),)),
    ("cumsum of 0-d", fj.cumsum, np.cumsum, (np.float32(3),)),
    ("argmax of 0-d", fj.argmax, np.argmax, (np.float32(3),)),
    ("argmax nan", lambda x: fj.argmax(x, 0), lambda x: np.argmax(x, 0), (np.array([1, np.nan, 3]),)),
    ("max nan", fj.max, np.max, (np.array([1, np.nan, 3]),)),
    ("maximum nan", lambda x: fj.maximum(x, 2.0), lambda x: np.maximum(x, 2.0), (np.array([1, np.nan, 3]),)),
    ("clip nan", lambda x: fj.clip(x, 0, 2), lambda x: np.clip(x, 0, 2), (np.array([1, np.nan, 3]),)),
    ("mod negative ints", lambda x: fj.mod(x, 3), lambda x: np.mod(x, 3), (np.array([-5, 5, -1]),)),
    ("mod negative floats", lambda x: fj.mod(x, -3.0), lambda x: np.mod(x, -3.0), (np.array([-5, 5, -1.5]),)),
    ("floordiv negative", lambda x: fj.floor_divide(x, -3.0), lambda x: x // -3.0, (np.array([-5, 5, -1.5]),)),
    ("int ** float", lambda x: fj.power(x, 0.5), lambda x: x ** 0.5, (np.array([4, 9], np.int32),)),
    ("int ** int", lambda x: fj.power(x, 2), lambda x: x ** 2, (np.array([4, 9], np.int32),)),
    ("int rpow", lambda x: fj.power(2, x), lambda x: 2 ** x, (np.array([4, 9], np.int32),)),
    ("float rpow", lambda x: fj.power(2.0, x), lambda x: 2.0 ** x, (np.array([4, 9], np.int32),)),
    ("f16 + float", lambda x: fj.add(x, 1.5), lambda x: x + 1.5, (np.array([4, 9], np.float16),)),
    ("f16 + i32", fj.add, np.add, (np.array([4, 9], np.float16), np.array([4, 9], np.int32))),
    ("sign", fj.sign, np.sign, (np.array([-0.0, np.nan, -2, 3]),)),
    ("sqrt of negative", fj.sqrt, np.sqrt, (np.array([-1.0, 4]),)),
    ("logical_and of numbers", lambda x: fj.logical_and(x, 1.5), lambda x: np.logical_and(x, 1.5),
     (np.array([0, 2, -1]),)),
    ("any of nan", fj.any, np.any, (np.array([0, np.nan]),)),
    ("concatenate lists", lambda: fj.concatenate([[1, 2], [3.5]]), lambda: np.concatenate([[1, 2], [3.5]]), ()),
    ("stack lists", lambda: fj.stack([[1, 2], [3, 4]], 1), lambda: np.stack([[1, 2], [3, 4]], 1), ()),
    ("eye k past the edge", lambda: fj.eye(3, k=5), lambda: np.eye(3, k=5), ()),
    ("var of f32 far from 0", fj.var, np.var, ((np.arange(1000, dtype=np.float32) / 7) + 1000,)),
    ("outer of bools", fj.outer, np.outer, (np.array([True, False]), np.array([False, True, True]))),
    ("dot of bools", fj.dot, np.dot, (np.array([True, False]), np.array([True, False]))),
    ("round f16", lambda x: fj.round(x, 1), lambda x: np.round(x, 1), (np.array([1.25, 2.35], np.float16),)),
    ("round bool", fj.round, np.round, (np.array([True, False]),)),
    ("round tiny and huge", lambda x: fj.round(x, 2), lambda x: np.round(x, 2), (np.array([-0.001, 0.005, 1e300]),)),
    ("tan f16", fj.tan, np.tan, (np.array([0.5, 1.0, -1.2], np.float16),)),
]


@pytest.mark.parametrize("fn, np_fn, args", [c[1:] for c in MISC], ids=[c[0] for c in MISC])
def test_misc(fn, np_fn, args) -> None:
    check(fn, np_fn, *args, rtol=1e-6 if not any(np.asarray(a).dtype == np.float16 for a in args) else 1e-3)


# ---- indexing ----------------------------------------------------------------------------------


@st.composite
def index_case(draw):
    """A shape (rank 0..4), and a NumPy index into it with every integer in range."""
    shape = tuple(draw(st.lists(st.integers(0, 4), min_size=0, max_size=4)))
    n = len(shape)
    # Index arrays share one broadcast shape; each takes it with some dims made 1 or dropped.
    bshape = tuple(draw(st.lists(st.integers(1, 3), min_size=0, max_size=2)))

    def array_shape():
        s = [d if draw(st.booleans()) else 1 for d in bshape]
        return tuple(s[draw(st.integers(0, len(s))):])

    entries = []
    for d in shape:
        kinds = ["full", "slice"] + (["int", "array"] if d > 0 else [])
        kind = draw(st.sampled_from(kinds))
        if kind == "full":
            entries.append(slice(None))
        elif kind == "slice":
            bound = st.one_of(st.none(), st.integers(-d - 3, d + 3))
            step = draw(st.sampled_from([None, -3, -2, -1, 1, 2, 3]))
            entries.append(slice(draw(bound), draw(bound), step))
        elif kind == "int":
            i = draw(st.integers(-d, d - 1))
            entries.append(np.int64(i) if draw(st.booleans()) else i)
        else:
            ashape = array_shape()
            vals = np.asarray(draw(st.lists(st.integers(-d, d - 1), min_size=math.prod(ashape),
                                            max_size=math.prod(ashape))), dtype=np.int64).reshape(ashape)
            form = draw(st.sampled_from(["list", "i64", "i32"]))
            entries.append(vals.tolist() if form == "list" and ashape else vals.astype(form.replace("i", "int"))
                           if form != "list" else vals)
    # Ellipsis stands for a (possibly empty) run of axes; without one, a trailing run may be left out.
    if draw(st.booleans()):
        i = draw(st.integers(0, n))
        j = draw(st.integers(i, n))
        entries = entries[:i] + [Ellipsis] + entries[j:]
    else:
        entries = entries[:draw(st.integers(0, n))]
    for _ in range(draw(st.integers(0, 2))):
        entries.insert(draw(st.integers(0, len(entries))), None)
    if draw(st.integers(0, 9)) == 0:
        # A 0-d bool is an index array of shape (1,) or (0,); (0,) only broadcasts alone.
        alone = not any(isinstance(k, (list, np.ndarray)) for k in entries)
        entries.insert(draw(st.integers(0, len(entries))), draw(st.booleans()) if alone else True)
    key = tuple(entries) if len(entries) != 1 or draw(st.booleans()) else entries[0]
    return shape, key


def _split_arrays(key):
    """The key with its NumPy index arrays replaced by placeholders, and those arrays."""
    entries = key if isinstance(key, tuple) else (key,)
    arrays = [k for k in entries if isinstance(k, np.ndarray)]
    marked = tuple(("arg", i) if isinstance(k, np.ndarray) else k
                   for i, k in zip(np.cumsum([isinstance(k, np.ndarray) for k in entries]) - 1, entries))

    def rebuild(idx):
        out = tuple(idx[k[1]] if isinstance(k, tuple) else k for k in marked)
        return out if isinstance(key, tuple) else out[0]
    return rebuild, arrays


@MANY
@given(index_case(), st.sampled_from([np.float64, np.int32, np.bool_]))
def test_getitem_matches_numpy(case, dtype) -> None:
    shape, key = case
    x = (np.arange(math.prod(shape)).reshape(shape) % 7).astype(dtype)
    expected = x[key]
    assert_same(fj.getitem(x, key), expected, what=f"eager x{list(shape)}[{key!r}]")
    assert_same(fj.function(lambda x: x[key])(x), expected, what=f"traced x{list(shape)}[{key!r}]")
    # Index arrays as traced arguments too.
    rebuild, arrays = _split_arrays(key)
    if arrays:
        f = fj.function(lambda x, *idx: x[rebuild(idx)])
        assert_same(f(x, *arrays), expected, what=f"traced indices x{list(shape)}[{key!r}]")


@st.composite
def mask_case(draw):
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=3)))
    start = draw(st.integers(0, len(shape) - 1))
    stop = draw(st.integers(start + 1, len(shape)))
    mask = np.asarray(draw(st.lists(st.booleans(), min_size=math.prod(shape[start:stop]),
                                    max_size=math.prod(shape[start:stop])))).reshape(shape[start:stop])
    key = (slice(None),) * start + (mask if draw(st.booleans()) else mask.tolist(),)
    if draw(st.booleans()) and stop < len(shape):
        key = key + (draw(st.integers(-shape[stop], shape[stop] - 1)),)
    if draw(st.booleans()):
        key = (None,) + key
    return shape, key


@SETTINGS
@given(mask_case())
def test_getitem_boolean_masks(case) -> None:
    shape, key = case
    x = np.arange(math.prod(shape), dtype=np.float32).reshape(shape)
    expected = x[key]
    assert_same(fj.getitem(x, key), expected, what=f"x{list(shape)}[{key!r}]")
    assert_same(fj.function(lambda x: x[key])(x), expected, what=f"traced x{list(shape)}[{key!r}]")


@pytest.mark.parametrize("key", [
    (slice(None), 0, [0, 1]), (slice(None), [0, 1], Ellipsis, [0, 1]), ([0, 1], Ellipsis, 1), (Ellipsis, [0, 1], 1),
    (0, None, [0, 1]), ([0, 1], None, 0), (None, slice(None), [[0], [1]], [1, 2]), (True,), (False,),
    (0, True), (slice(None), True, [1, 0]), ([1, 0], Ellipsis, True), (np.array(True),), ([],), (np.array(1),),
    (Ellipsis, None), (), (slice(None, None, -1), [1, 0]), ([[0, 1], [1, 0]], slice(1, None), [[0], [2]]),
])
def test_getitem_placements(key) -> None:
    x = np.arange(5 * 2 * 3).reshape(5, 2, 3).astype(np.float32)
    expected = x[key]
    assert_same(fj.getitem(x, key), expected)
    assert_same(fj.function(lambda x: x[key])(x), expected)


def test_getitem_empty_selections() -> None:
    x = np.zeros((0, 3))
    for key in ((np.array([], dtype=np.int64),), ([],), (slice(None), [0, 2]), (slice(None), 1)):
        check(lambda x: fj.getitem(x, key), lambda x: x[key], x, traced=lambda x: x[key])


@pytest.mark.parametrize("key", [3, -4, (0, 3), (slice(None), -4), (Ellipsis, 5), ([0, 1], 3), (0, 0, 0, 0)])
def test_getitem_errors(key) -> None:
    x = np.zeros((3, 3, 3))
    with pytest.raises(IndexError):
        x[key]
    with pytest.raises(IndexError):
        fj.getitem(x, key)
    with pytest.raises(IndexError):
        fj.function(lambda x: x[key])(x)


def test_getitem_other_errors() -> None:
    x = np.zeros((3, 4))
    with pytest.raises(IndexError):
        fj.getitem(x, (Ellipsis, Ellipsis))
    with pytest.raises(IndexError):
        fj.getitem(x, np.array([True, False]))  # mask of the wrong shape
    with pytest.raises(IndexError):
        fj.getitem(x, ([0, 1], [0, 1, 2]))  # index arrays that do not broadcast
    with pytest.raises(FlowjitTypeError, match="boolean mask"):
        fj.function(lambda x: x[x > 0])(x)
    with pytest.raises(IndexError):
        fj.function(lambda x, i: x[i])(x, np.array([0.5]))


def test_getitem_clamps_out_of_range_arrays() -> None:
    x = np.arange(12).reshape(3, 4)
    assert_same(fj.function(lambda x, i: x[i, -1])(x, np.array([5, -9])), x[[2, 0], -1])


# ---- creation ----------------------------------------------------------------------------------


@pytest.mark.parametrize("args", [(5,), (2, 7), (2, 7, 2), (7, 2, -1), (0,), (5, 2), (1.5,), (0.5, 3, 0.5),
                                  (1, 2.5), (-3, 3), (10, 0, -3), (0, 1, 0.1), (np.int32(4),)])
def test_arange(args) -> None:
    check(lambda: fj.arange(*args), lambda: np.arange(*args))
    for dtype in (np.int32, np.float32):
        check(lambda: fj.arange(*args, dtype=dtype), lambda: np.arange(*args, dtype=dtype))


@pytest.mark.parametrize("args", [(3,), (3, 4), (3, 4, 1), (4, 3, -1), (3, 3, 5), (0,)])
def test_eye(args) -> None:
    check(lambda: fj.eye(*args), lambda: np.eye(*args))
    check(lambda: fj.eye(*args, dtype=np.int32), lambda: np.eye(*args, dtype=np.int32))


@pytest.mark.parametrize("shape", [3, (2, 3), (), [0, 2]])
@pytest.mark.parametrize("dtype", [None, np.int32, np.bool_, np.float32])
def test_zeros_ones_full(shape, dtype) -> None:
    kw = {} if dtype is None else {"dtype": dtype}
    check(lambda: fj.zeros(shape, **kw), lambda: np.zeros(shape, **kw))
    check(lambda: fj.ones(shape, **kw), lambda: np.ones(shape, **kw))
    for value in (2, 2.5, True, np.float32(1.5), -1):
        if dtype == np.bool_ and value == -1:
            continue
        check(lambda: fj.full(shape, value, **kw), lambda: np.full(shape, value, **kw))


@pytest.mark.parametrize("dtype", [None, np.int32, np.float32])
@pytest.mark.parametrize("x_dtype", DTYPES, ids=DTYPE_IDS)
def test_like_creation(dtype, x_dtype) -> None:
    x = sample(np.random.default_rng(18), (2, 3), x_dtype)
    kw = {} if dtype is None else {"dtype": dtype}
    check(lambda x: fj.zeros_like(x, **kw), lambda x: np.zeros_like(x, **kw), x)
    check(lambda x: fj.ones_like(x, **kw), lambda x: np.ones_like(x, **kw), x)
    for value in (2, 2.5, True):
        check(lambda x: fj.full_like(x, value, **kw), lambda x: np.full_like(x, value, **kw), x)


def test_creation_from_traced_shapes() -> None:
    x = np.arange(6, dtype=np.int32).reshape(2, 3)
    check(lambda x: fj.zeros(x.shape) + x, lambda x: np.zeros(x.shape) + x, x)
    check(lambda x: fj.eye(x.shape[1]) @ x.T, lambda x: np.eye(x.shape[1]) @ x.T, x)
    check(lambda x: fj.arange(x.shape[1]) * x, lambda x: np.arange(x.shape[1]) * x, x)


# ---- the Tracer surface ------------------------------------------------------------------------


def test_tracer_surface() -> None:
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4) / 7
    seen = {}

    def f(x):
        seen.update(shape=x.shape, dtype=x.dtype, ndim=x.ndim, size=x.size, len=len(x), T=x.T.shape)
        return (x.T, x.reshape(4, -1), x.reshape((6, 4)), x.astype(np.int32), x.sum(), x.sum(axis=1),
                x.mean(axis=(0, 2)), x.max(), x.min(axis=-1, keepdims=True), x.argmax(), x.argmax(axis=1),
                x.argmin(axis=0), x.prod(axis=0), x.var(), x.std(axis=1), x.any(), x.all(axis=0),
                x.cumsum(axis=2), x.flatten(), +x, -x, abs(x), x[0, :, ::2])

    out = fj.function(f)(x)
    expected = (x.T, x.reshape(4, -1), x.reshape((6, 4)), x.astype(np.int32), x.sum(), x.sum(axis=1),
                x.mean(axis=(0, 2)), x.max(), x.min(axis=-1, keepdims=True), x.argmax(), x.argmax(axis=1),
                x.argmin(axis=0), x.prod(axis=0), x.var(), x.std(axis=1), x.any(), x.all(axis=0),
                x.cumsum(axis=2), x.flatten(), +x, -x, abs(x), x[0, :, ::2])
    assert_same(out, expected, rtol=1e-5)
    assert seen == dict(shape=(2, 3, 4), dtype=fj.float32, ndim=3, size=24, len=2, T=(4, 3, 2))
    assert list(fj.function(lambda x: tuple(x))(x[:, 0, 0])) == list(x[:, 0, 0])
    assert fj.shape(x) == (2, 3, 4) and fj.ndim(x) == 3


def test_tracer_rejects_concrete_use() -> None:
    x = np.ones(3)
    with pytest.raises(TypeError):
        fj.function(lambda x: 1 if x[0] > 0 else 0)(x)
    with pytest.raises(TypeError):
        fj.function(lambda x: {x: 1})(x)
    with pytest.raises(TypeError):
        fj.function(lambda x: x.__setitem__(0, 1.0))(x)


# ---- argument conversion -------------------------------------------------------------------------


def test_ragged_list_names_the_argument() -> None:
    with pytest.raises(FlowjitTypeError, match=r"\bx\b.*ragged"):
        fj.exp([[1, 2], [3]])
    with pytest.raises(FlowjitTypeError, match="ragged"):
        fj.function(lambda: fj.exp([[1, 2], [3]]))()
    with pytest.raises(FlowjitTypeError, match=r"\by\b.*ragged"):
        fj.add(np.ones(2), [[1, 2], [3]])


def test_lists_and_scalars_as_operands() -> None:
    check(lambda: fj.exp([[1, 2], [3, 4]]), lambda: np.exp([[1, 2], [3, 4]]))
    check(lambda: fj.add([1, 2], 1), lambda: np.add([1, 2], 1))
    check(lambda: fj.multiply(2, 3.5), lambda: np.multiply(2, 3.5))
    check(lambda: fj.sum([True, False, True]), lambda: np.sum([True, False, True]))
    with pytest.raises(FlowjitTypeError):
        fj.exp("abc")


def test_mT_swaps_the_last_two_axes_of_a_traced_array() -> None:
    x = np.arange(12.0).reshape(2, 2, 3)
    np.testing.assert_array_equal(fj.function(lambda a: a.mT)(x), x.mT)
    with pytest.raises(FlowjitTypeError, match=r"x\.mT of a traced array of shape \[3\] at test_array_api\.py:\d+"):
        fj.function(lambda a: a.mT)(np.ones(3))


def test_gradients_stay_finite_where_the_function_is():
    # x ** 0.0 is the constant 1 (gradient 0 at x = 0, not 0 * inf); the std of one element
    # or of a constant row is the constant 0 (gradient 0, not sqrt's 1 / 0 times 0).
    assert fj.grad(lambda x: x ** 0.0)(np.float64(0.0)) == 0.0
    assert fj.grad(fj.grad(lambda x: x ** 0.0))(np.float64(0.0)) == 0.0  # and again (it was NaN)
    np.testing.assert_array_equal(fj.grad(lambda x: fj.sum(x ** 2.0))(np.zeros(2)), [0.0, 0.0])
    np.testing.assert_array_equal(fj.grad(fj.std)(np.array([3.0])), [0.0])
    np.testing.assert_array_equal(fj.function(fj.grad(lambda x: fj.sum(fj.std(x, axis=1))))(np.ones((2, 3))),
                                  np.zeros((2, 3)))
    # Elsewhere the gradient is std's own: (x - mean) / (n std).
    x = np.array([1.0, 2.0, 4.0])
    np.testing.assert_allclose(fj.grad(fj.std)(x), (x - x.mean()) / (3 * x.std()), rtol=1e-12)
    assert np.isnan(fj.std(np.array([np.nan, 1.0])))
