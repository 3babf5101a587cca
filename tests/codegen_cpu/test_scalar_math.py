"""Accuracy, special values and vectorization of flowjit.codegen_cpu.scalar_math.

Accuracy is the distance in units in the last place (ulp) between our result and a
reference, counted on the integer views of the floats (so subnormals count, and -0 and
+0 are the same point; signs of zero are checked separately). float32 references are
NumPy's float64 functions rounded to float32 (correctly rounded but for rare double
roundings) and NumPy's own float32 functions; float64 references are NumPy on long
double (80-bit on x86) and ``math.erf``.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
from numba import njit, prange

from flowjit.codegen_cpu import scalar_math as sm

F32_NAMES = {"exp": sm.exp32, "expm1": sm.expm1_32, "log": sm.log32, "tanh": sm.tanh32,
             "logistic": sm.logistic32, "erf": sm.erf32}
F64_NAMES = {"exp": sm.exp64, "expm1": sm.expm1_64, "log": sm.log64, "tanh": sm.tanh64,
             "logistic": sm.logistic64, "erf": sm.erf64}


def _compiles_with_fma() -> bool:
    """Whether numba targets a CPU with fused multiply-adds (the host's, or the one
    NUMBA_CPU_NAME / NUMBA_CPU_FEATURES name)."""
    from llvmlite import binding
    from numba.core import config
    if config.CPU_FEATURES is not None:
        return "+fma" in config.CPU_FEATURES
    return config.CPU_NAME in (None, "host") and bool(binding.get_host_cpu_features().get("fma"))


# Largest ulp distance to the correctly rounded result we allow (the docstring of
# scalar_math states the measured maxima: 1, or 2 for logistic and tanh64) ...
MAX_ULP_EXACT = 2
# ... and to NumPy's float32 functions (the brief: 4).
MAX_ULP_NUMPY32 = 4
# ... but tanh32, XLA's kind of rational, is 5 ulp from exact and 6 from NumPy, one more on a
# CPU without FMA (scalar_math).
TANH32_ULP = 5 if _compiles_with_fma() else 6

EXTENDED = np.finfo(np.longdouble).nmant > 52  # else the float64 references are only float64
MAX_ULP_EXACT64 = MAX_ULP_EXACT if EXTENDED else 4

_loops: dict = {}


def _loop(fn):
    """A compiled elementwise loop over fn, the way generated kernels call these functions."""
    if fn not in _loops:
        @njit(error_model="numpy")
        def loop(a, out):
            for i in range(a.size):
                out[i] = fn(a[i])

        _loops[fn] = loop
    return _loops[fn]


def apply(fn, x):
    out = np.empty_like(x)
    _loop(fn)(x, out)
    return out


def ulp_distance(a, b):
    """|a - b| in ulps via the integer views; both nan: 0, one nan: huge."""
    a = np.asarray(a)
    b = np.asarray(b)
    assert a.dtype == b.dtype
    ity, mask = (np.int32, 0x7FFFFFFF) if a.dtype == np.float32 else (np.int64, 0x7FFFFFFFFFFFFFFF)
    ia = a.view(ity).astype(np.int64)
    ib = b.view(ity).astype(np.int64)
    ia = np.where(ia < 0, -(ia & mask), ia)  # monotonic: -0 and +0 both map to 0
    ib = np.where(ib < 0, -(ib & mask), ib)
    with np.errstate(over="ignore"):
        same_side = (ia >= 0) == (ib >= 0)
        d = np.where(same_side, np.abs(ia - ib), np.abs(ia) + np.abs(ib))
    d = np.where(d < 0, np.iinfo(np.int64).max, d)  # overflowed: opposite huge values
    an, bn = np.isnan(a), np.isnan(b)
    return np.where(an & bn, 0, np.where(an | bn, np.iinfo(np.int64).max, d))


_erf_vec = np.vectorize(math.erf, otypes=[np.float64])


def reference(name, x):
    """The reference values in x's dtype."""
    with np.errstate(all="ignore"):
        if x.dtype == np.float32:
            xd = x.astype(np.float64)
            if name == "erf":
                return _erf_vec(xd).astype(np.float32)
            if name == "logistic":
                return (1.0 / (1.0 + np.exp(-xd))).astype(np.float32)
            return getattr(np, name)(xd).astype(np.float32)
        if name == "erf":
            return _erf_vec(x)
        xl = x.astype(np.longdouble)
        if name == "logistic":
            return (1 / (1 + np.exp(-xl))).astype(np.float64)
        return getattr(np, name)(xl).astype(np.float64)


SPECIAL64 = [0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 5e-324, -5e-324, 2.2250738585072014e-308, 1e-310,
             1e-300, -1e-300, 1e-20, -1e-20, 1e-8, 0.5, 0.84375, 1.0, 1.25, 2.857142857142857, 6.0, 20.0, 28.0,
             88.72283935546875, 88.7228, 103.97, -103.97, 104.0, -104.0, 709.782712893384, 709.79, -708.4,
             -745.13321910194122, -745.2, 1e300, -1e300, 1.7976931348623157e308, -1.7976931348623157e308]


def grid32():
    """Every 4099th float32 bit pattern (both signs, subnormals, inf, nan) plus dense ranges."""
    sweep = np.arange(0, 2**32, 4099, dtype=np.uint64).astype(np.uint32).view(np.float32)
    rng = np.random.default_rng(32)
    with np.errstate(over="ignore"):
        special = np.array(SPECIAL64, np.float32)
    return np.concatenate([
        sweep, special,
        np.linspace(-10, 10, 200_001, dtype=np.float32),
        np.linspace(-110, 110, 100_001, dtype=np.float32),
        (rng.standard_normal(100_000) * 3).astype(np.float32),
        np.float32(10) ** rng.uniform(-40, 38, 100_000).astype(np.float32),
    ])


def grid64():
    rng = np.random.default_rng(64)
    bits = rng.integers(0, 2**63, 300_000, dtype=np.int64).view(np.float64)
    mags = 10.0 ** rng.uniform(-320, 308, 200_000)
    return np.concatenate([
        bits, -bits[:100_000], mags, -mags[:100_000], np.array(SPECIAL64),
        np.linspace(-10, 10, 200_001), np.linspace(-750, 750, 100_001),
        rng.standard_normal(100_000) * 3,
    ])


@pytest.fixture(scope="module")
def x32():
    return grid32()


@pytest.fixture(scope="module")
def x64():
    return grid64()


def _domain(name, x):
    return np.abs(x) if name == "log" else x  # log: the negative half is checked as nan below


@pytest.mark.parametrize("name", list(F32_NAMES))
def test_float32_accuracy(name, x32):
    x = _domain(name, x32)
    got = apply(F32_NAMES[name], x)
    assert got.dtype == np.float32
    d = ulp_distance(got, reference(name, x))
    i = int(np.argmax(d))
    bound, numpy_bound = (TANH32_ULP, TANH32_ULP + 1) if name == "tanh" else (MAX_ULP_EXACT, MAX_ULP_NUMPY32)
    assert d[i] <= bound, f"{name}32({x[i]!r}) = {got[i]!r}, want {reference(name, x[i:i + 1])[0]!r}"
    if name in ("exp", "expm1", "log", "tanh"):  # NumPy has float32 loops of these
        with np.errstate(all="ignore"):
            want = getattr(np, name)(x)
        d = ulp_distance(got, want)
        i = int(np.argmax(d))
        assert d[i] <= numpy_bound, f"{name}32({x[i]!r}) = {got[i]!r}, NumPy float32 gives {want[i]!r}"


# Kernels compiled with ``fastmath`` call the same functions under LLVM's fast flags
# (contraction, reciprocals, no signed zeros): tanh32's bound must hold there too.
_FAST_FLAGS = {"contract", "arcp", "afn", "nsz"}  # flowjit.codegen_cpu.compile.FASTMATH


@njit(error_model="numpy", fastmath=_FAST_FLAGS)
def _fast_tanh_loop(a, out):
    for i in range(a.size):
        out[i] = sm.tanh32(a[i])


@pytest.mark.parametrize("fastmath", [False, True], ids=["plain", "fastmath"])
def test_tanh32_bound_and_special_values_under_both_flag_sets(x32, fastmath):
    def tanh(x):
        if not fastmath:
            return apply(sm.tanh32, x)
        out = np.empty_like(x)
        _fast_tanh_loop(x, out)
        return out

    got = tanh(x32)
    d = ulp_distance(got, reference("tanh", x32))
    i = int(np.argmax(d))
    assert d[i] <= TANH32_ULP, f"tanh32({x32[i]!r}) = {got[i]!r}, {d[i]} ulp"
    assert ulp_distance(got, np.tanh(x32)).max() <= TANH32_ULP + 1  # NumPy's is 1 ulp off at most
    # exactly odd, and +-1 past 9.01 and at +-inf; nan and signed zeros pass through
    finite = x32[np.isfinite(x32)]
    assert np.array_equal(tanh(-finite), -tanh(finite))
    x = np.array([np.nan, 0.0, -0.0, 1e-30, -1e-40, 9.02, -30.0, np.inf, -np.inf], np.float32)
    want = np.array([np.nan, 0.0, -0.0, 1e-30, -1e-40, 1.0, -1.0, 1.0, -1.0], np.float32)
    got = tanh(x)
    np.testing.assert_array_equal(got, want)
    assert np.array_equal(np.signbit(got[1:3]), [False, True])
    assert (np.abs(tanh(np.linspace(-12, 12, 100001).astype(np.float32))) <= 1).all()


# Exhaustive float32 check, every one of the 2**32 inputs, of the functions the last
# numerical change of scalar_math touched (logistic32 calls exp32); the grid above samples
# them. The bounds are the maxima the scalar_math docstring states.
_EXHAUSTIVE = {"exp": (1, 3), "tanh": (TANH32_ULP, TANH32_ULP + 1), "logistic": (2, None),  # vs exact, vs NumPy
               "tanh, fastmath": (TANH32_ULP, TANH32_ULP + 1)}


@njit(inline="always")
def _ordered(y):
    """A float32's bits as an integer that orders like the float (-0 and +0 both 0)."""
    i = np.int64(np.float32(y).view(np.int32))
    return -(i & 0x7FFFFFFF) if i < 0 else i


@njit(inline="always")
def _ulps(y, want):
    if want != want or y != y:
        return 0 if (want != want and y != y) else 1 << 40
    return abs(_ordered(y) - _ordered(want))


def _exhaustive_scan(fn, exact, flags):
    """max ulp distance from ``exact`` (float64, rounded to float32) over bit patterns [lo, hi)."""
    @njit(parallel=True, error_model="numpy", fastmath=flags)
    def scan(lo, hi):
        chunks = 4096
        step = (hi - lo + chunks - 1) // chunks
        worst = np.zeros(chunks, np.int64)
        where = np.zeros(chunks, np.int64)
        for c in prange(chunks):
            for b in range(lo + c * step, min(lo + (c + 1) * step, hi)):
                x = np.uint32(b).view(np.float32)
                d = _ulps(fn(x), np.float32(exact(np.float64(x))))
                if d > worst[c]:
                    worst[c] = d
                    where[c] = b
        k = np.argmax(worst)
        return worst[k], where[k]

    return scan


def _parallel_loop(fn, flags):
    @njit(parallel=True, error_model="numpy", fastmath=flags)
    def loop(a, out):
        for i in prange(a.size):
            out[i] = fn(a[i])

    return loop


@njit(parallel=True, error_model="numpy")
def _max_ulps(got, want):
    blocks = 1024
    step = (got.size + blocks - 1) // blocks
    worst = np.zeros(blocks, np.int64)
    for c in prange(blocks):
        for i in range(c * step, min((c + 1) * step, got.size)):
            worst[c] = max(worst[c], _ulps(got[i], want[i]))
    return worst.max()


@njit
def _exact_exp(x):
    return math.exp(x)


@njit
def _exact_tanh(x):
    return math.tanh(x)


@njit
def _exact_logistic(x):
    return 1.0 / (1.0 + math.exp(-x))


@pytest.mark.slow
@pytest.mark.parametrize("name", list(_EXHAUSTIVE))
def test_float32_exhaustive(name):
    """All 2**32 float32 inputs against the float64 function rounded to float32 (math's
    double precision libm: correctly rounded to float32 but for rare double roundings),
    and against NumPy's float32 loop where NumPy has one; 2-5 minutes each on 2 cores."""
    bound, numpy_bound = _EXHAUSTIVE[name]
    fast = name.endswith(", fastmath")  # compiled with the flags of fastmath kernels
    flags = _FAST_FLAGS if fast else False
    name = name.removesuffix(", fastmath")
    fn = F32_NAMES[name]
    exact = {"exp": _exact_exp, "tanh": _exact_tanh, "logistic": _exact_logistic}[name]
    worst, at = _exhaustive_scan(fn, exact, flags)(0, 1 << 32)
    x = np.uint32(at).view(np.float32)
    assert worst <= bound, f"{name}32({x!r}): {worst} ulp from the correctly rounded result"
    if numpy_bound is not None:
        chunk = 1 << 26
        loop = _parallel_loop(fn, flags)
        got = np.empty(chunk, np.float32)
        for lo in range(0, 1 << 32, chunk):
            x = np.arange(lo, lo + chunk, dtype=np.uint32).view(np.float32)
            with np.errstate(all="ignore"):
                want = getattr(np, name)(x)
            loop(x, got)
            worst = _max_ulps(got, want)
            assert worst <= numpy_bound, f"{name}32 differs from NumPy float32 by {worst} ulp near {x[0]!r}"


@pytest.mark.parametrize("name", list(F64_NAMES))
def test_float64_accuracy(name, x64):
    x = _domain(name, x64)
    got = apply(F64_NAMES[name], x)
    assert got.dtype == np.float64
    want = reference(name, x)
    d = ulp_distance(got, want)
    i = int(np.argmax(d))
    assert d[i] <= MAX_ULP_EXACT64, f"{name}64({x[i]!r}) = {got[i]!r}, want {want[i]!r}"


def _check(fn, dtype, cases):
    x = np.array([c[0] for c in cases], dtype)
    got = apply(fn, x)
    for xi, gi, (_, want) in zip(x, got, cases, strict=True):
        want = dtype(want)
        if np.isnan(want):
            assert np.isnan(gi), (fn, xi, gi)
        else:
            assert gi == want and np.signbit(gi) == np.signbit(want), (fn, xi, gi, want)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_special_values(dtype):
    is32 = dtype == np.float32
    fns = F32_NAMES if is32 else F64_NAMES
    nan, inf = np.nan, np.inf
    common = [(nan, nan), (0.0, 0.0), (-0.0, -0.0)]
    _check(fns["tanh"], dtype, common + [(inf, 1.0), (-inf, -1.0), (30.0, 1.0), (-30.0, -1.0), (1e-30, 1e-30)])
    _check(fns["erf"], dtype, common + [(inf, 1.0), (-inf, -1.0), (10.0, 1.0), (-10.0, -1.0)])
    _check(fns["expm1"], dtype, common + [(inf, inf), (-inf, -1.0), (-100.0, -1.0), (1e-30, 1e-30),
                                          (1e5, inf)])
    _check(fns["exp"], dtype, [(nan, nan), (0.0, 1.0), (-0.0, 1.0), (inf, inf), (-inf, 0.0), (1e5, inf),
                               (-1e5, 0.0)])
    _check(fns["log"], dtype, [(nan, nan), (0.0, -inf), (-0.0, -inf), (inf, inf), (-inf, nan), (-1.0, nan),
                               (1.0, 0.0), (-1e-30, nan)])
    _check(fns["logistic"], dtype, [(nan, nan), (0.0, 0.5), (-0.0, 0.5), (inf, 1.0), (-inf, 0.0), (1e5, 1.0),
                                    (-1e5, 0.0)])
    # overflow / underflow thresholds of exp, and the subnormal tail of logistic
    top, small = (88.72283, 88.72284) if is32 else (709.782712893383, 709.782712893385)
    assert np.isfinite(apply(fns["exp"], np.array([top], dtype))[0])
    assert np.isinf(apply(fns["exp"], np.array([small], dtype))[0])
    tiny_in = -100.0 if is32 else -740.0
    tiny = apply(fns["logistic"], np.array([tiny_in], dtype))[0]
    assert 0 < tiny == apply(fns["exp"], np.array([tiny_in], dtype))[0]
    sub = apply(fns["exp"], np.array([-103.0 if is32 else -744.0], dtype))[0]
    assert 0 < sub < np.finfo(dtype).tiny  # a subnormal result, not flushed
    assert apply(fns["exp"], np.array([-104.0 if is32 else -746.0], dtype))[0] == 0
    # log of subnormals
    t = np.array([np.finfo(dtype).smallest_subnormal, np.finfo(dtype).tiny / 3], dtype)
    d = ulp_distance(apply(fns["log"], t), np.log(t.astype(np.longdouble)).astype(dtype))
    assert d.max() <= 1


def test_negative_log_is_nan(x32, x64):
    for x, fn in ((x32, sm.log32), (x64, sm.log64)):
        neg = -np.abs(x[np.isfinite(x) & (x != 0)])
        assert np.isnan(apply(fn, neg)).all()


def test_odd_functions_are_exactly_odd(x32, x64):
    for x, fns in ((x32, F32_NAMES), (x64, F64_NAMES)):
        x = x[np.isfinite(x)]
        for name in ("tanh", "erf"):
            assert np.array_equal(apply(fns[name], -x), -apply(fns[name], x)), name
        # logistic(-x) = 1 - logistic(x) up to rounding
        lo, hi = apply(fns["logistic"], -x), apply(fns["logistic"], x)
        assert np.allclose(lo + hi, 1, rtol=0, atol=4 * np.finfo(x.dtype).eps)


def test_generic_dispatch():
    @njit(error_model="numpy")
    def call(x):
        return sm.exp(x), sm.expm1(x), sm.log(x), sm.tanh(x), sm.logistic(x), sm.erf(x)

    for value, fns in ((np.float32(0.75), F32_NAMES), (0.75, F64_NAMES)):
        got = call(value)
        for g, name in zip(got, ("exp", "expm1", "log", "tanh", "logistic", "erf"), strict=True):
            assert g == apply(fns[name], np.array([value], type(value)))[0], name
    float32, float64 = (sig.return_type.dtype for sig in call.nopython_signatures)
    assert (str(float32), str(float64)) == ("float32", "float64")  # computed in the argument's precision

    @njit(error_model="numpy")
    def call_int(x):
        return sm.exp(x)

    # integers and booleans go to the float64 versions, like math does
    assert call_int(np.int32(2)) == apply(sm.exp64, np.array([2.0]))[0]
    assert call_int(True) == apply(sm.exp64, np.array([1.0]))[0]
    # outside jitted code: NumPy
    assert sm.tanh(np.float32(0.5)) == np.tanh(np.float32(0.5))
    assert sm.erf(0.5) == math.erf(0.5)
    assert sm.logistic(np.float32(-100)) > 0 and sm.logistic(1e5) == 1.0


_LIBM_CALL = re.compile(r"call [^\n]*@\"?(llvm\.)?(exp|expm1|log|tanh|erf)f?(\.f(32|64))?\"?\(")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_loops_vectorize(dtype):
    """The optimized loop has a vector body and calls no libm function, also under numba's
    default error model (whose division checks would otherwise keep it scalar)."""
    fns = F32_NAMES if dtype == np.float32 else F64_NAMES
    scalar = "float" if dtype == np.float32 else "double"
    x = np.linspace(0.1, 2, 64).astype(dtype)
    for name, fn in fns.items():
        for loop in (_loop(fn), _default_error_model_loop(fn)):
            out = np.empty_like(x)
            loop(x, out)
            llvm = loop.inspect_llvm(loop.signatures[0])
            assert re.search(rf"<\d+ x {scalar}>", llvm), f"{name}: no vector code"
            assert not _LIBM_CALL.search(llvm), f"{name}: calls libm"


def _default_error_model_loop(fn):
    @njit
    def loop(a, out):
        for i in range(a.size):
            out[i] = fn(a[i])

    return loop
