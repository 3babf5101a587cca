"""The inverse trigonometric and hyperbolic functions, sinh, cosh, trunc and signbit
(issue 24), and ``asarray(copy=)``: against NumPy compiled and on the
interpreter, with the array API's IEEE special cases, their dtypes, gradients against
finite differences, NumPy's own functions on traced arrays, and bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest

import flowjit as fj
from flowjit.ir.errors import FlowjitTypeError
from tests.finite_differences import central_differences

# fj name -> NumPy function; the standard's names (asin) and NumPy's (arcsin) are one function.
FUNCTIONS = {
    "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan, "sinh": np.sinh, "cosh": np.cosh,
    "asinh": np.arcsinh, "acosh": np.arccosh, "atanh": np.arctanh, "trunc": np.trunc, "signbit": np.signbit,
}
NUMPY_NAMES = {"arcsin": "asin", "arccos": "acos", "arctan": "atan", "arcsinh": "asinh", "arccosh": "acosh",
               "arctanh": "atanh"}
# Ordinary values, the ends of each domain, past them, and IEEE's specials.
VALUES = np.array([-800, -30, -2, -1.5, -1, -0.999, -0.5, -1e-8, -0.0, 0.0, 1e-8, 0.3, 0.5, 0.999, 1, 1.5,
                   2, 7.25, 30, 800, np.inf, -np.inf, np.nan, -np.nan, 2.5e-310])


def _all(x):
    return tuple(getattr(fj, name)(x) for name in FUNCTIONS)


def _compare(got, want, dtype):
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, want.dtype, got.shape, want.shape)
    if want.dtype.kind != "f":
        np.testing.assert_array_equal(got, want)
        return
    # Within the registry's kernel tolerance, with NaN where NumPy has NaN and signed zeros kept.
    rtol = {np.float16: 1e-3, np.float32: 2e-6, np.float64: 1e-13}[dtype]
    np.testing.assert_allclose(got, want, rtol=rtol, atol=0, equal_nan=True)
    np.testing.assert_array_equal(np.signbit(got[want == 0]), np.signbit(want[want == 0]))


@pytest.mark.parametrize("backend", ["llvm", "interpret"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_against_numpy_with_special_values(backend, dtype):
    options = {"interpret": True} if backend == "interpret" else {"backend": backend}
    f = fj.function(_all, **options)
    x = VALUES.astype(dtype)
    with np.errstate(all="ignore"):
        want = [fn(x) for fn in FUNCTIONS.values()]
    for name, g, w in zip(FUNCTIONS, f(x), want, strict=True):
        try:
            _compare(g, w, dtype)
        except AssertionError as e:
            raise AssertionError(f"{name} {np.dtype(dtype).name} on {backend}") from e


def _accuracy_inputs(dtype) -> np.ndarray:
    """Wide random ranges, and both sides of every switch of the llvm ports' formulas."""
    rng = np.random.default_rng(5)
    switches = np.array([0.5, 0.3466, 1, 2, 9, 22, 88, 88.72, 89.4, 709, 709.78, 710.4, 2.0 ** 14, 2.0 ** 28])
    around = np.concatenate([switches * (1 + k * np.finfo(dtype).eps) for k in range(-3, 4)])
    x = np.concatenate([rng.uniform(-1, 1, 4000), rng.uniform(-30, 30, 4000), rng.standard_normal(4000) * 1e-4,
                        np.exp(rng.uniform(-80, 700 if dtype == np.float64 else 88, 4000)), around])
    x = x.astype(dtype)
    return np.concatenate([x, -x])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_llvm_accuracy_within_two_ulp(dtype):
    """The llvm backend's own sinh, cosh, asinh, acosh and atanh (and libm's asin, acos,
    atan) against a wider reference: at most 2 ulp from the exact result, as NumPy's."""
    wide = np.float64 if dtype == np.float32 else np.longdouble
    if dtype == np.float64 and np.finfo(np.longdouble).nmant <= 52:
        pytest.skip("long double is double here: no wider reference")
    x = _accuracy_inputs(dtype)
    f = fj.function(lambda x: tuple(getattr(fj, n)(x) for n in _DIFFERENTIABLE), backend="llvm")
    with np.errstate(all="ignore"):
        for name, got in zip(_DIFFERENTIABLE, f(x), strict=True):
            exact = FUNCTIONS[name](x.astype(wide))
            finite = np.isfinite(exact) & (np.abs(exact) <= np.finfo(dtype).max)
            ulp = np.spacing(np.abs(exact[finite]).astype(dtype)).astype(wide)
            err = np.abs(got[finite].astype(wide) - exact[finite]) / ulp
            assert err.max() <= 2, (name, float(err.max()), x[finite][np.argmax(err)])
            np.testing.assert_array_equal(np.isnan(got), np.isnan(exact), err_msg=name)
            huge = ~finite & ~np.isnan(exact)  # past the dtype's range: +-inf, as the exact value rounds
            np.testing.assert_array_equal(got[huge], exact[huge].astype(dtype))


def test_array_api_special_cases():
    """The cases the standard lists for each function (outside a domain: NaN)."""
    inf, nan = math.inf, math.nan
    cases = {
        "asin": [(2.0, nan), (-1.5, nan), (0.0, 0.0), (-0.0, -0.0), (1.0, math.pi / 2)],
        "acos": [(2.0, nan), (-1.5, nan), (1.0, 0.0), (-1.0, math.pi)],
        "atan": [(0.0, 0.0), (-0.0, -0.0), (inf, math.pi / 2), (-inf, -math.pi / 2)],
        "sinh": [(0.0, 0.0), (-0.0, -0.0), (inf, inf), (-inf, -inf)],
        "cosh": [(0.0, 1.0), (-0.0, 1.0), (inf, inf), (-inf, inf)],
        "asinh": [(0.0, 0.0), (-0.0, -0.0), (inf, inf), (-inf, -inf)],
        "acosh": [(0.5, nan), (-inf, nan), (1.0, 0.0), (inf, inf)],
        "atanh": [(1.5, nan), (-2.0, nan), (1.0, inf), (-1.0, -inf), (0.0, 0.0), (-0.0, -0.0)],
        "trunc": [(-0.5, -0.0), (2.7, 2.0), (-2.7, -2.0), (inf, inf), (-inf, -inf)],
        "signbit": [(-0.0, True), (0.0, False), (-nan, True), (nan, False), (-inf, True), (3.0, False)],
    }
    # By bit pattern: a set would take -0.0 for 0.0, and NaN and -NaN for one another.
    keys = list(dict.fromkeys(np.float64(x).tobytes() for pairs in cases.values() for x, _ in pairs))
    xs = [np.frombuffer(k, np.float64)[0] for k in keys]
    f = fj.function(_all)
    for dtype in (np.float32, np.float64):
        out = dict(zip(FUNCTIONS, f(np.array(xs, dtype))))
        for name, pairs in cases.items():
            for x, want in pairs:
                got = out[name][keys.index(np.float64(x).tobytes())]
                if isinstance(want, bool):
                    assert bool(got) == want, (name, x, got)
                elif math.isnan(want):
                    assert np.isnan(got), (name, x, got)
                else:
                    assert got == np.asarray(want, dtype) and np.signbit(got) == np.signbit(want), (name, x, got)


def test_dtypes_follow_numpy():
    """Integers give float64 and bools float16 (as NumPy); trunc keeps integers; signbit of
    an integer is x < 0."""
    ints = np.array([-3, 0, 2], np.int32)
    bools = np.array([True, False])

    @fj.function
    def f(i, b):
        return fj.asinh(i), fj.cosh(b), fj.trunc(i), fj.trunc(b), fj.signbit(i), fj.signbit(b)

    got = f(ints, bools)
    want = (np.arcsinh(ints), np.cosh(bools), np.trunc(ints), np.trunc(bools), np.signbit(ints), np.signbit(bools))
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype, (g.dtype, w.dtype)
        np.testing.assert_allclose(g, w, rtol=1e-3)


def test_numpy_functions_trace_on_traced_arrays():
    x = np.array([-0.75, -0.1, 0.2, 0.6], np.float32)
    y = x * 4

    @fj.function
    def f(x, y):
        return (np.arcsin(x), np.arccos(x), np.arctan(y), np.sinh(y), np.cosh(y), np.arcsinh(y),
                np.arccosh(np.abs(y) + 1), np.arctanh(x), np.trunc(y), np.signbit(x))

    want = (np.arcsin(x), np.arccos(x), np.arctan(y), np.sinh(y), np.cosh(y), np.arcsinh(y),
            np.arccosh(np.abs(y) + 1), np.arctanh(x), np.trunc(y), np.signbit(x))
    for g, w in zip(f(x, y), want, strict=True):
        assert g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=2e-6)
    for numpy_name, name in NUMPY_NAMES.items():
        assert getattr(fj, numpy_name) is getattr(fj, name)


# Inputs inside every function's domain (acosh's shifted past 1), away from its ends.
_X = np.random.default_rng(0).uniform(-0.9, 0.9, (2, 3))
_DIFFERENTIABLE = ("asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh")


def _input(name):
    return _X * 3 + 4 if name == "acosh" else _X * 3 if name in ("atan", "sinh", "cosh", "asinh") else _X


@pytest.mark.parametrize("name", _DIFFERENTIABLE)
def test_gradient_matches_finite_differences(name):
    fn = getattr(fj, name)
    w = np.random.default_rng(1).standard_normal(_X.shape)

    def loss(x):
        return fj.sum(fn(x) * w)

    x = _input(name)
    got = fj.function(fj.grad(loss))(x)
    fd = central_differences(lambda x: float(np.sum(FUNCTIONS[name](x) * w)), [x], 0)
    np.testing.assert_allclose(got, fd, rtol=1e-6, atol=1e-8)
    # The derivative's derivative, compiled: d/dx of sum(f'(x))
    second = fj.function(fj.grad(lambda x: fj.sum(fj.grad(lambda z: fj.sum(fn(z)))(x))))(x)
    first = fj.grad(lambda z: fj.sum(fn(z)))
    fd2 = central_differences(lambda x: float(np.sum(first(x))), [x], 0)
    np.testing.assert_allclose(second, fd2, rtol=1e-5, atol=1e-6)


def test_gradient_at_the_ends_of_the_domain_is_infinite():
    """asin' and acos' at +-1, acosh' at 1 and atanh' at +-1 are infinite, as in NumPy's
    formulas and JAX (not NaN); inside the domain near an end they stay finite and exact."""
    ends = np.array([-1.0, 1.0])
    g = fj.function(fj.grad(lambda x: fj.sum(fj.asin(x))))(ends)
    np.testing.assert_array_equal(g, [np.inf, np.inf])
    g = fj.function(fj.grad(lambda x: fj.sum(fj.acos(x))))(ends)
    np.testing.assert_array_equal(g, [-np.inf, -np.inf])
    g = fj.function(fj.grad(lambda x: fj.sum(fj.atanh(x))))(ends)
    np.testing.assert_array_equal(g, [np.inf, np.inf])
    g = fj.function(fj.grad(lambda x: fj.sum(fj.acosh(x))))(np.array([1.0]))
    np.testing.assert_array_equal(g, [np.inf])
    near = np.array([1 - 2.0 ** -40])  # 1 - x*x would lose most digits here
    g = fj.function(fj.grad(lambda x: fj.sum(fj.atanh(x))))(near)
    np.testing.assert_allclose(g, 1 / ((1 - near) * (1 + near)), rtol=1e-15)


def test_trunc_and_signbit_have_zero_gradient():
    x = np.array([-1.5, 0.25, 2.5])
    g = fj.function(fj.grad(lambda x: fj.sum(fj.trunc(x) * x + fj.where(fj.signbit(x), x, 2 * x))))(x)
    np.testing.assert_allclose(g, np.trunc(x) + np.where(np.signbit(x), 1, 2))


def test_bad_input_names_the_argument():
    with pytest.raises(FlowjitTypeError, match="str"):
        fj.asin("0.5")
    with pytest.raises(FlowjitTypeError, match="ragged"):
        fj.atanh([[0.5], [0.1, 0.2]])


# ---- asarray(copy=) --------------------------------------------------------------------


def test_asarray_copy_none_copies_only_if_needed():
    a = np.arange(6.0)
    assert fj.asarray(a) is a
    assert fj.asarray(a, dtype=np.float64) is a
    b = fj.asarray(a, dtype="float32")
    assert b.dtype == np.float32 and not np.shares_memory(a, b)
    np.testing.assert_array_equal(fj.asarray([1, 2]), np.array([1, 2]))


def test_asarray_copy_true_always_copies():
    a = np.arange(6.0)
    for b in (fj.asarray(a, copy=True), fj.asarray(a, dtype=fj.float64, copy=True), fj.asarray(a[::2], copy=True),
              fj.asarray(a, dtype=fj.float32, copy=True)):
        assert not np.shares_memory(a, b)
    b = fj.asarray(a, copy=True)
    a[0] = 7
    assert b[0] == 0
    assert fj.asarray(3.5, copy=True) == 3.5


def test_asarray_copy_false_never_copies():
    a = np.arange(6.0)
    assert fj.asarray(a, copy=False) is a
    view = fj.asarray(a[1:], dtype=np.float64, copy=False)
    view[0] = -1
    assert a[1] == -1
    for x, kw in ((a, {"dtype": np.float32}), ([1.0, 2.0], {}), (2.0, {}), (np.float32(2), {})):
        with pytest.raises(ValueError, match=r"asarray\(copy=False\) at .*test_elementwise_extras.py"):
            fj.asarray(x, copy=False, **kw)


class _DLPackOnly:
    """A producer that speaks DLPack but not NumPy's __array__ (as a JAX or cupy array may)."""

    def __init__(self, a):
        self.a = a

    def __dlpack__(self, **kw):
        return self.a.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self.a.__dlpack_device__()


def test_asarray_of_a_dlpack_producer():
    a = np.arange(4.0)
    shared = fj.asarray(_DLPackOnly(a), copy=False)
    assert np.shares_memory(shared, a)
    assert not np.shares_memory(fj.asarray(_DLPackOnly(a), copy=True), a)


def test_asarray_copy_of_a_traced_value():
    """A traced value is immutable: any copy= keeps its values; copy=False with another
    dtype cannot hold (a conversion is a copy), and says so at the user's line."""
    @fj.function
    def f(x):
        return fj.asarray(x, copy=True) * 2, fj.asarray(x, copy=False) + 1, fj.asarray(x, dtype=fj.float32, copy=None)

    x = np.arange(3.0)
    y2, y1, y32 = f(x)
    np.testing.assert_array_equal(y2, x * 2)
    np.testing.assert_array_equal(y1, x + 1)
    assert y32.dtype == np.float32 and not np.shares_memory(y2, x)

    @fj.function
    def g(x):
        return fj.asarray(x, dtype=fj.float32, copy=False)

    with pytest.raises(ValueError, match=r"float64 to float32 needs a copy.*copy=None"):
        g(x)
    with pytest.raises(ValueError, match=r"a list cannot become an array without a copy"):
        fj.function(lambda x: fj.asarray([x, x], copy=False))(x)
    with pytest.raises(FlowjitTypeError, match="copy must be True, False or None"):
        fj.asarray(x, copy="yes")


# ---- nextafter -------------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["llvm", "interpret"])
def test_nextafter_against_numpy(backend):
    specials = [0.0, -0.0, 1.0, -1.0, 1e-310, -5e-324, 3.4028235e38, 1.7976931348623157e308, np.inf, -np.inf,
                np.nan, 2.5, -2.5]
    a, b = (np.array(v) for v in zip(*[(x, y) for x in specials for y in specials]))
    options = {"interpret": True} if backend == "interpret" else {"backend": backend}
    f = fj.function(fj.nextafter, **options)
    for dtype in (np.float32, np.float64):
        with np.errstate(all="ignore"):  # float64's largest overflows float32
            x, y = a.astype(dtype), b.astype(dtype)
            got, want = f(x, y), np.nextafter(x, y)
        assert got.dtype == want.dtype
        # bit for bit: the sign of zeros and every subnormal step counts
        np.testing.assert_array_equal(got.view(np.uint32 if dtype == np.float32 else np.uint64)[~np.isnan(want)],
                                      want.view(np.uint32 if dtype == np.float32 else np.uint64)[~np.isnan(want)])
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))


def test_nextafter_dtypes():
    got = fj.nextafter(np.array([1, 2], np.int32), 0)
    np.testing.assert_array_equal(got, np.nextafter(np.array([1, 2], np.int32), 0))
    assert got.dtype == np.float64
    with pytest.raises(FlowjitTypeError, match=r"nextafter: x1 and x2 promote to float16 at .*test_elementwise_extras"):
        fj.nextafter(np.ones(2, np.float16), np.float16(0))
