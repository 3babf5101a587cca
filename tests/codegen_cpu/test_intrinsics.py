"""flowjit.codegen_cpu.intrinsics: the loop IR's math intrinsics in LLVM IR, compiled
through codegen_cpu.jit in the loop the renderer emits (``out[i] = f(x[i])``), against
the correctly rounded results and NumPy at ulp_references' bounds, on special values, and for
vector code without libm calls in the optimized loop."""

from __future__ import annotations

import ctypes
import math
import re
import subprocess
import sys

import numpy as np
import pytest
from llvmlite import ir

# half_routines: the float16 conversions LLVM calls by name, registered on import (as the
# renderer's import does): this file run alone had none, and its float16 test failed to link.
from flowjit.codegen_cpu import half_routines, intrinsics, jit  # noqa: F401
from flowjit.lowering.scalar import INTRINSICS, LIBRARY_FUNCTIONS, OPS

from . import modules
from .ulp_references import (
    EXTENDED,
    MAX_ULP_EXACT,
    MAX_ULP_EXACT64,
    MAX_ULP_NUMPY32,
    TANH32_ULP,
    grid32,
    grid64,
    reference,
    ulp_distance,
)

I64 = ir.IntType(64)
LLVM_TYPES = {np.float16: ir.HalfType(), np.float32: ir.FloatType(), np.float64: ir.DoubleType()}
SHORT = {np.float16: "f16", np.float32: "f32", np.float64: "f64"}
PORTED = ("exp", "expm1", "log", "log1p", "tanh", "erf", "sin", "cos", "cbrt")
# Float intrinsics of the loop IR left to libm: no vectorizable version is written.
LIBM_ONLY = {"pow"}
# hypot: glibc's formulas inline, float32's (and float16's) and float64's.
LIBM_ONLY_NAMES: set[str] = set()


@pytest.fixture(scope="module", autouse=True)
def cache_dir(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FLOWJIT_CACHE_DIR", str(tmp_path_factory.mktemp("objcache")))
        yield


def loop_module(name: str, dtype: type, native_ldexp: bool = False, native_fma: bool = False) -> str:
    """``void k(T* x0[, T* x1], T* out, i64 n)``: out[i] = f(x0[i][, x1[i]]), f the
    intrinsic ``name`` -- the shape of an elementwise kernel of the renderer."""
    ty = LLVM_TYPES[dtype]
    mod = ir.Module(f"intrinsic_{name}")
    arity = OPS[name.split(".")[0]][0]
    fn = ir.Function(mod, ir.FunctionType(ir.VoidType(), [ty.as_pointer()] * (arity + 1) + [I64]), "k")
    *ins, out, n = fn.args
    for p in (*ins, out):
        p.add_attribute("noalias")
    f = intrinsics.function(mod, name, native_ldexp, native_fma)

    def body(b, i):
        args = [b.load(b.gep(p, [i], inbounds=True)) for p in ins]
        b.store(b.call(f, args), b.gep(out, [i], inbounds=True))

    modules._loop(fn, ir.Constant(I64, 0), n, body).ret_void()
    return str(mod)


def run(op: str, *xs: np.ndarray, native_ldexp: bool = False, native_fma: bool = False) -> np.ndarray:
    """op (an intrinsic without its dtype) over arrays of one float dtype, compiled."""
    dtype = xs[0].dtype.type
    lib = jit.load(loop_module(f"{op}.{SHORT[dtype]}", dtype, native_ldexp, native_fma))
    xs = tuple(np.ascontiguousarray(x) for x in xs)
    out = np.empty_like(xs[0])
    k = lib.function("k", None, [ctypes.c_void_p] * (len(xs) + 1) + [ctypes.c_int64])
    k(*(x.ctypes.data for x in xs), out.ctypes.data, out.size)
    return out


x32 = pytest.fixture(grid32, scope="module", name="x32")
x64 = pytest.fixture(grid64, scope="module", name="x64")


def domain(op: str, x: np.ndarray) -> np.ndarray:
    """The inputs where the function is real (the rest is checked as nan apart)."""
    if op == "log":
        return np.abs(x)
    if op == "log1p":
        return np.where(x < -1, -x, x)
    return x


def exact(op: str, x: np.ndarray) -> np.ndarray:
    """Correctly rounded references (but for rare double roundings)."""
    if op != "log1p":
        return reference(op, x)
    with np.errstate(all="ignore"):
        wide = x.astype(np.float64 if x.dtype == np.float32 else np.longdouble)
        return np.log1p(wide).astype(x.dtype)


def ulps(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """ulp_references' ulp distance, and float16's on the same integer views."""
    if a.dtype != np.float16:
        return ulp_distance(a, b)
    ia, ib = (np.where(v < 0, -(v & 0x7FFF), v) for v in (x.view(np.int16).astype(np.int64) for x in (a, b)))
    an, bn = np.isnan(a), np.isnan(b)
    return np.where(an & bn, 0, np.where(an | bn, 1 << 40, np.abs(ia - ib)))


def worst(got: np.ndarray, want: np.ndarray, x: np.ndarray) -> tuple[int, str]:
    d = ulps(got, want)
    i = int(np.argmax(d))
    return int(d[i]), f"at x={x[i]!r}: got {got[i]!r}, want {want[i]!r}"


# Bounds: ulp_references' (the ports' measured maxima); log1p's measured here.
BOUND32 = {"tanh": (TANH32_ULP, TANH32_ULP + 1), "log1p": (1, 2)}  # (vs exact, vs NumPy float32)


@pytest.mark.parametrize("op", PORTED)
def test_float32_accuracy(op, x32):
    x = domain(op, x32)
    got = run(op, x)
    bound, numpy_bound = BOUND32.get(op, (MAX_ULP_EXACT, MAX_ULP_NUMPY32))
    d, where = worst(got, exact(op, x), x)
    assert d <= bound, f"{op}.f32: {d} ulp from the correctly rounded result {where}"
    if op != "erf":  # NumPy has float32 loops of the others
        with np.errstate(all="ignore"):
            want = getattr(np, op)(x)
        d, where = worst(got, want, x)
        assert d <= numpy_bound, f"{op}.f32: {d} ulp from NumPy's float32 {where}"


@pytest.mark.parametrize("op", PORTED)
def test_float64_accuracy(op, x64):
    x = domain(op, x64)
    d, where = worst(run(op, x), exact(op, x), x)
    assert d <= MAX_ULP_EXACT64, f"{op}.f64: {d} ulp from the correctly rounded result {where}"


@pytest.mark.skipif(not EXTENDED, reason="the float64 references need an 80-bit long double")
def test_tanh64_from_one_is_within_an_ulp():
    # 1 - 2 / (expm1(2|x|) + 2) from |x| = 1 (glibc's split): the quotient is below a quarter,
    # so its rounding reaches the result a quarter as large. -t / (t + 2), t = expm1(-2|x|),
    # had been 2 ulp from the correctly rounded result on 4% of [1, 22].
    r = np.random.default_rng(41)
    x = np.concatenate([r.uniform(1, 22, 100000), -r.uniform(1, 22, 20000), [1.0, -1.0, np.nextafter(1.0, 0)]])
    d, where = worst(run("tanh", x), exact("tanh", x), x)
    assert d <= 1, f"tanh.f64: {d} ulp from the correctly rounded result {where}"


@pytest.mark.skipif(not EXTENDED, reason="the float64 references need an 80-bit long double")
def test_cbrt64_is_correctly_rounded_but_near_ties():
    # Newton's inverse cube root, then one correction from the exact residual x - t^3: at most
    # 1 ulp, and off the correctly rounded root on under 0.1% of doubles of every exponent
    # (glibc's, NumPy's, on 0.6%; fdlibm's, without the correction, on 8%).
    r = np.random.default_rng(43)
    x = r.normal(size=200000) * 10.0 ** r.integers(-320, 308, 200000)
    x = np.concatenate([x, np.array([1, 0x800, 0xFFFFFFFFFFFFF, 0x10000000000000], np.uint64).view(np.float64),
                        [np.finfo(np.float64).max, -27.0, 8.0, 1e-300, 2.0 ** -900, 2.0 ** 900]])
    got, want = run("cbrt", x), exact("cbrt", x)
    d = ulps(got, want)
    assert d.max() <= 1, worst(got, want, x)
    assert np.mean(d > 0) < 1e-3, np.mean(d > 0)
    np.testing.assert_array_equal(got[-5:-3], [-3.0, 2.0])


@pytest.mark.skipif(not EXTENDED, reason="the float64 references need an 80-bit long double")
@pytest.mark.parametrize("op", ["sinh", "asinh", "acosh"])
def test_hyperbolic_functions_within_two_ulp_across_their_branches(op):
    # asinh and acosh take one log1p whatever the branch (near 1 or 2, up to BIG = 2^28, past
    # it), sinh one division: every branch and both neighbours of each switch, to the largest
    # floats, within 2 ulp of the correctly rounded result (float32: of float64's rounded).
    r = np.random.default_rng(47)
    lo = 1.0 if op == "acosh" else -30.0
    switches = [1.0, 2.0, 22.0, 2.0 ** 28, 9.0, 2.0 ** 14, 709.0, 710.0]
    near = [np.nextafter(s, d) for s in switches for d in (0.0, np.inf)] + switches
    x = np.concatenate([r.uniform(lo, 30, 100000), 10.0 ** r.uniform(-12, 308, 100000), near,
                        1.0 + 10.0 ** r.uniform(-16, 0, 20000), [np.finfo(np.float64).max]])
    if op == "acosh":
        x = x[x >= 1.0]
    elif op == "sinh":
        x = x[np.abs(x) < 711.0]
    for dtype in (np.float64, np.float32):
        with np.errstate(over="ignore"):
            xs = x.astype(dtype)
            xs = xs[np.isfinite(xs)]
            wide = xs.astype(np.longdouble if dtype == np.float64 else np.float64)
            want = getattr(np, {"asinh": "arcsinh", "acosh": "arccosh"}.get(op, op))(wide).astype(dtype)
        got = run(op, xs)
        d, where = worst(got, want, xs)
        assert d <= 2, f"{op}.{SHORT[dtype]}: {d} ulp {where}"
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan])
    with np.errstate(invalid="ignore"):
        want = getattr(np, {"asinh": "arcsinh", "acosh": "arccosh"}.get(op, op))(specials)
    got = run(op, specials)
    np.testing.assert_array_equal(got, want)
    number = ~np.isnan(want)   # a NaN's sign is noise
    np.testing.assert_array_equal(np.signbit(got[number]), np.signbit(want[number]))


def test_sinh_near_one_keeps_its_dividend():
    # (2t - t*t/(t+1)) / 2 with one division of t*t, not t * (t/(t+1)): the extra rounding
    # had made sinh(0.8675998776900513) 2 ulp off (and complex sinh, 5 ulp).
    x = np.array([0.8675998776900513])
    assert ulps(run("sinh", x), exact("sinh", x))[0] <= 1


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_special_values(dtype):
    nan, inf = np.nan, np.inf
    tiny = np.finfo(dtype).smallest_subnormal
    cases = {
        "exp": [(nan, nan), (0.0, 1.0), (-0.0, 1.0), (inf, inf), (-inf, 0.0), (1e5, inf), (-1e5, 0.0)],
        "expm1": [(nan, nan), (0.0, 0.0), (-0.0, -0.0), (inf, inf), (-inf, -1.0), (-100.0, -1.0),
                  (1e-30, 1e-30), (1e5, inf)],
        "log": [(nan, nan), (0.0, -inf), (-0.0, -inf), (inf, inf), (-inf, nan), (-1.0, nan), (1.0, 0.0),
                (-1e-30, nan)],
        "log1p": [(nan, nan), (0.0, 0.0), (-0.0, -0.0), (inf, inf), (-inf, nan), (-1.0, -inf), (-1.5, nan),
                  (tiny, tiny), (-tiny, -tiny), (1e-30, 1e-30), (-1e-30, -1e-30)],
        "tanh": [(nan, nan), (0.0, 0.0), (-0.0, -0.0), (inf, 1.0), (-inf, -1.0), (30.0, 1.0), (-30.0, -1.0),
                 (1e-30, 1e-30)],
        "erf": [(nan, nan), (0.0, 0.0), (-0.0, -0.0), (inf, 1.0), (-inf, -1.0), (10.0, 1.0), (-10.0, -1.0)],
        "sin": [(nan, nan), (0.0, 0.0), (-0.0, -0.0), (inf, nan), (-inf, nan), (tiny, tiny), (-tiny, -tiny),
                (1e-30, 1e-30)],
        "cos": [(nan, nan), (0.0, 1.0), (-0.0, 1.0), (inf, nan), (-inf, nan), (tiny, 1.0), (1e-30, 1.0)],
    }
    for op, pairs in cases.items():
        x = np.array([p[0] for p in pairs], dtype)
        want = np.array([p[1] for p in pairs], dtype)
        got = run(op, x)
        np.testing.assert_array_equal(got, want, err_msg=f"{op}.{SHORT[dtype]}")
        number = ~np.isnan(want)   # a NaN's sign means nothing (x86's default NaN has it set)
        assert np.array_equal(np.signbit(got[number]), np.signbit(want[number])), f"{op}.{SHORT[dtype]}: sign of {x}"
    # the overflow threshold of exp, and its subnormal results (not flushed to zero)
    top, above = (88.72283, 88.72284) if dtype == np.float32 else (709.782712893383, 709.782712893385)
    assert np.isfinite(run("exp", np.array([top], dtype))[0]) and np.isinf(run("exp", np.array([above], dtype))[0])
    sub = run("exp", np.array([-103.0 if dtype == np.float32 else -744.0], dtype))[0]
    assert 0 < sub < np.finfo(dtype).tiny


def test_log_and_log1p_below_their_domain_are_nan(x32, x64):
    for x in (x32, x64):
        neg = -np.abs(x[np.isfinite(x) & (x != 0)])
        assert np.isnan(run("log", neg)).all()
        assert np.isnan(run("log1p", neg[neg < -1])).all()


def test_odd_functions_are_exactly_odd(x32, x64):
    for x in (x32, x64):
        x = x[np.isfinite(x)]
        for op in ("tanh", "erf", "sin"):
            assert np.array_equal(run(op, -x), -run(op, x)), op
        assert np.array_equal(run("cos", -x), run("cos", x))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_llvm_intrinsic_wrappers_match_numpy(dtype, x32, x64):
    x = (x32 if dtype == np.float32 else x64)[::7]
    y = np.roll(x, 1)
    with np.errstate(all="ignore"):
        for op, want in (("sqrt", np.sqrt(x)), ("floor", np.floor(x)), ("ceil", np.ceil(x)),
                         ("rint", np.rint(x)), ("fabs", np.fabs(x)), ("copysign", np.copysign(x, y)),
                         ("fmod", np.fmod(x, y))):
            got = run(op, x, y) if op in ("copysign", "fmod") else run(op, x)
            np.testing.assert_array_equal(got, want, err_msg=op)
            assert np.array_equal(np.signbit(got), np.signbit(want)), op


def test_float32_hypot_is_glibcs_bits(x32):
    """float32's hypot inline gives NumPy's (glibc's hypotf) bits over pairs of the grid, with
    infinities beating NaN as C's hypot, so a complex64 abs vectorizes and still equals NumPy's."""
    x = x32[::3]
    with np.errstate(all="ignore"):
        pairs = [(x, np.roll(x, 1)), (x, np.roll(x, 7) * np.float32(1e-20)), (x, np.full_like(x, np.inf)),
                 (np.full_like(x, np.nan), x), (np.full_like(x, -np.inf), np.full_like(x, np.nan))]
    for a, b in pairs:
        with np.errstate(all="ignore"):
            want = np.hypot(a, b)
        got = run("hypot", a, b)
        assert np.array_equal(got, want, equal_nan=True), worst(got, want, a)


def test_float64_hypot_is_glibcs_bits(x64):
    """float64's hypot inline is glibc's (2.35 on: the root of the sum of squares and one
    correction, scaled past 2^511 and below 2^-459), NumPy's bits: on pairs of the grid, of
    values 16 decades apart, around the scaling bounds and the subnormals, and the specials."""
    x = x64[::3]
    rng = np.random.default_rng(9)
    edges = np.array([2.0 ** 511, 2.0 ** -511, 2.0 ** -54, 2.0 ** -1022, 5e-324, 1.7e308, 0.0, -0.0, 3.0], np.float64)
    e, f = (v.reshape(-1) for v in np.meshgrid(edges, edges))
    with np.errstate(all="ignore"):
        pairs = [(x, np.roll(x, 1)), (x, np.roll(x, 7) * 1e-16), (x, np.full_like(x, np.inf)),
                 (np.full_like(x, np.nan), x), (np.full_like(x, -np.inf), np.full_like(x, np.nan)), (e, f),
                 (rng.normal(size=4000) * 2.0 ** -520, rng.normal(size=4000) * 2.0 ** -530),
                 # the smaller in [2^-511, 2^-508], the ratio near 1: glibc scales below 2^-459
                 (np.exp2(rng.uniform(-511, -508, 4000)), np.exp2(rng.uniform(-511, -508, 4000))),
                 (rng.normal(size=4000) * 2.0 ** 520, rng.normal(size=4000) * 2.0 ** 500)]
    for a, b in pairs:
        with np.errstate(all="ignore"):
            want = np.hypot(a, b)
        got = run("hypot", a, b)
        assert np.array_equal(got, want, equal_nan=True), worst(got, want, a)


def test_float16_computes_in_float32_as_numpy():
    """Every float16 input: within 1 ulp of NumPy's float16 loops (both round a float32
    result once; tanh32's 5 ulp can flip that rounding), exact for the exact functions."""
    x = np.arange(1 << 16, dtype=np.uint16).view(np.float16)
    for op in (*PORTED, "sqrt", "floor", "rint", "fabs"):
        xs = domain(op, x)
        with np.errstate(all="ignore"):
            want = math_erf16(xs) if op == "erf" else getattr(np, op)(xs)
        d, where = worst(run(op, xs), want, xs)
        assert d <= (0 if op in ("sqrt", "floor", "rint", "fabs") else 1), f"{op}.f16: {d} ulp {where}"


def math_erf16(x: np.ndarray) -> np.ndarray:
    return np.array([math.erf(v) for v in x.astype(np.float64)]).astype(np.float32).astype(np.float16)


_VECTOR = re.compile(r"<\d+ x (half|float|double)>")
_CALL = re.compile(r"call [^@\n]*@\"?([\w.]+)")


@pytest.mark.parametrize("name", sorted(n for n in intrinsics.NAMES if not n.startswith("fmod")))
def test_loops_vectorize_without_libm(name):
    """The optimized loop has vector code and calls nothing but LLVM intrinsics (fmod is
    LLVM's frem: a libm fmod call, left out)."""
    d = {"f16": np.float16, "f32": np.float32, "f64": np.float64}[name.split(".")[1]]
    text = str(jit.optimize(loop_module(name, d)))
    assert _VECTOR.search(text), f"{name}: no vector code"
    calls = {c for c in _CALL.findall(text) if not c.startswith("llvm.")}
    assert not calls, f"{name}: calls {calls}"


@pytest.mark.parametrize("op", ["exp", "tanh"])
def test_without_fma_the_multiply_adds_split_and_bounds_hold(op, x32):
    """On a CPU without FMA (sandybridge), ``llvm.fmuladd`` becomes a multiply and an add,
    not a libm ``fmaf`` call per element, and the unfused bounds hold: exp32's 1
    ulp, tanh32's 6 (7 from NumPy)."""
    target = jit.host_target("sandybridge")
    text = loop_module(f"{op}.f32", np.float32)
    optimized = str(jit.optimize(text, target))
    assert _VECTOR.search(optimized) and not {c for c in _CALL.findall(optimized) if not c.startswith("llvm.")}
    assert b"fmaf" not in jit.compile_object(text, target)  # no libm symbol in the machine code
    x = x32
    out = np.empty_like(x)
    lib = jit.load(text, target)
    lib.function("k", None, [ctypes.c_void_p] * 2 + [ctypes.c_int64])(x.ctypes.data, out.ctypes.data, x.size)
    bound = {"exp": (MAX_ULP_EXACT, MAX_ULP_NUMPY32), "tanh": (6, 7)}[op]
    d, where = worst(out, exact(op, x), x)
    assert d <= bound[0], f"{op}.f32 unfused: {d} ulp {where}"
    with np.errstate(all="ignore"):
        d, where = worst(out, getattr(np, op)(x), x)
    assert d <= bound[1], f"{op}.f32 unfused: {d} ulp from NumPy {where}"


def test_sin_and_cos_of_large_arguments_reduce_exactly(x64):
    """Past fdlibm's medium range (2**20 pi/2) the Payne-Hanek reduction: within 1 ulp of the
    correctly rounded result up to the largest double; where x is nearest a multiple of pi/2
    (6381956970095103 * 2**797, the closest of all doubles) the reduction's double-double sum
    leaves an absolute error below 1e-31, not a relative one."""
    rng = np.random.default_rng(5)
    mags = np.concatenate([10.0 ** rng.uniform(6.2, 308, 100_000), np.array([1647098.9, 1647099.0, 1647099.5, 2.0**84,
                                                                              2.0**84 * 1.5, 1.7976931348623157e308])])
    x = np.concatenate([mags, -mags])
    for op in ("sin", "cos"):
        d, where = worst(run(op, x), exact(op, x), x)
        assert d <= 1, f"{op}.f64: {d} ulp from the correctly rounded result {where}"
    worst_case = np.array([6381956970095103 * 2.0**797])
    for op in ("sin", "cos"):
        assert abs(run(op, worst_case)[0] - exact(op, worst_case)[0]) < 1e-31, op


def test_sin_and_cos_give_the_same_bits_with_and_without_fma(x32, x64):
    """The reduction's exact products are one fma where the target fuses, else Dekker's: the
    same bits either way (so a library compiled for another CPU agrees with the JIT's)."""
    for x in (x32, x64):
        for op in ("sin", "cos"):
            got, want = run(op, x, native_fma=True), run(op, x)
            assert np.array_equal(got.view(f"u{x.itemsize}"), want.view(f"u{x.itemsize}")), (
                f"{op}.{SHORT[x.dtype.type]}: {worst(got, want, x)}")


def test_float32_sin_and_cos_are_float64s_rounded(x32):
    """float32 picks its three table rows by selects where float64 gathers from 31: the same
    reduction, so the float32 result is the float64 one rounded once."""
    for op in ("sin", "cos"):
        got = run(op, x32)
        with np.errstate(invalid="ignore"):   # NaN's payload through the cast
            want = run(op, x32.astype(np.float64)).astype(np.float32)
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), worst(got, want, x32)


@pytest.mark.parametrize("op", PORTED)
def test_scaling_by_native_ldexp_gives_the_same_bits(op, x32, x64):
    """With ``native_ldexp`` (AVX-512's vscalef) exp's last step is one ldexp: every port gives
    the same bits as with the two exact power-of-two factors, subnormal and overflowing
    results included (on a CPU without AVX-512 the ldexp is libm's, as exact). A NaN keeps
    its sign and payload; exp's carries its NaN through the arithmetic, which quiets a
    signalling one (as NumPy's exp does; the two-factor forms too)."""
    for x in (domain(op, x32), domain(op, x64)):
        got, want = run(op, x, native_ldexp=True), run(op, x)
        u = f"u{x.itemsize}"
        quiet = np.array(1 << (22 if x.itemsize == 4 else 51), u)   # the quiet bit of a NaN
        nan = np.isnan(want)
        bits_got, bits_want = got.view(u).copy(), want.view(u).copy()
        bits_got[nan] |= quiet
        bits_want[nan] |= quiet
        assert np.array_equal(bits_got, bits_want), f"{op}.{SHORT[x.dtype.type]}: {worst(got, want, x)}"


def test_float32_exp_carries_a_nan_through_its_two_factors_without_a_compare():
    """On AVX2 (Zen 3) float32 exp scales by two power-of-two factors multiplied as floats,
    which a NaN goes through as a NaN: no ordered/unordered compare and blend at the end
    (adding n into the polynomial's bits, as it had, could make a number of a NaN)."""
    asm = jit.compile_assembly(loop_module("exp.f32", np.float32, native_fma=True), jit.host_target("znver3"))
    assert "vfmadd" in asm and not re.search(r"vcmp(un)?ordps", asm), asm


def test_float64_exp_carries_a_nan_through_its_two_factors_without_a_compare():
    """Float64 exp on AVX2 makes its two power-of-two factors from the magic roundings' bits
    (integer adds and shifts, defined for a NaN) where it had converted n with ``fptosi``
    (poison for a NaN), so it selected a NaN argument to 0 before and back after: no
    ordered/unordered compare and blend, no float-to-integer conversion."""
    asm = jit.compile_assembly(loop_module("exp.f64", np.float64, native_fma=True), jit.host_target("znver3"))
    assert "vfmadd" in asm and not re.search(r"vcmp(un)?ordpd|vcvttpd2dq", asm), asm


@pytest.mark.parametrize("cpu,native", [("skylake-avx512", True), ("x86-64-v4", True), ("x86-64-v3", False),
                                        ("znver3", False)])
def test_native_ldexp_only_where_llvm_makes_it_one_instruction(cpu, native):
    """A named CPU with AVX-512F renders exp's scaling as ldexp, which its machine code does
    in vscalefps (no libm ldexpf); a CPU without it keeps the integer-add scaling."""
    target = jit.host_target(cpu)
    assert target.native_ldexp() is native
    if native:
        obj = jit.compile_object(loop_module("exp.f32", np.float32, native_ldexp=True), target)
        assert b"ldexp" not in obj


def test_function_is_defined_once_internal_and_inlined():
    mod = ir.Module("once")
    f = intrinsics.function(mod, "tanh.f32")
    assert intrinsics.function(mod, "tanh.f32") is f
    assert f.name == "fj.tanh.f32" and f.linkage == "internal" and "alwaysinline" in f.attributes
    assert [str(t) for t in f.function_type.args] == ["float"] and str(f.function_type.return_type) == "float"
    h = intrinsics.function(mod, "exp.f16")  # defines and calls exp.f32 once
    assert str(h.function_type.return_type) == "half" and intrinsics.function(mod, "exp.f32").name == "fj.exp.f32"
    assert str(mod).count("define internal float @\"fj.tanh.f32\"") == 1


def test_unported_names_are_none():
    mod = ir.Module("none")
    for name in ("pow.f32", "pow.f64", "ipow.i64", "logistic.f32", "exp.i32", "tanh", "sin.i32"):
        assert intrinsics.function(mod, name) is None, name
    assert not mod.globals


def test_every_float_intrinsic_is_ported_or_left_to_libm():
    """A new float intrinsic in the loop IR gets a port here, or joins the libm list (but the
    library functions, SciPy's C code: codegen_cpu.scipy_functions)."""
    floats = {op for op in INTRINSICS if "f" in OPS[op][1]} - set(LIBRARY_FUNCTIONS)
    ported = {n.split(".")[0] for n in intrinsics.NAMES}
    assert floats - ported == LIBM_ONLY
    assert ({f"{op}.{d}" for op in floats - LIBM_ONLY for d in ("f16", "f32", "f64")} - LIBM_ONLY_NAMES
            == intrinsics.NAMES)


def test_importing_it_imports_neither_numba_nor_scipy():
    code = "import sys, flowjit.codegen_cpu.intrinsics; print(sorted({'numba', 'scipy'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


# Every float32 input: the bounds of the grid tests, vs the float64 function rounded to
# float32 and vs NumPy's float32 loop. NumPy has no erf (math.erf per element would take
# hours): erf32's reference is erf.f64 (1 ulp in float64, checked above) rounded.
EXHAUSTIVE = {"exp": (MAX_ULP_EXACT, 3), "expm1": (MAX_ULP_EXACT, 3), "log": (MAX_ULP_EXACT, 4),
              "log1p": BOUND32["log1p"], "tanh": (TANH32_ULP, TANH32_ULP + 1), "erf": (MAX_ULP_EXACT, None)}


@pytest.mark.slow
@pytest.mark.parametrize("op", list(EXHAUSTIVE))
def test_float32_exhaustive(op):
    """All 2**32 float32 inputs in chunks of 2**24 (ulps counted where the bits differ);
    a few minutes each on 2 cores."""
    bounds = EXHAUSTIVE[op]
    worst_seen = [0, 0]
    for lo in range(0, 1 << 32, 1 << 24):
        x = np.arange(lo, lo + (1 << 24), dtype=np.uint32).view(np.float32)
        got = run(op, x)
        with np.errstate(all="ignore"):
            if op == "erf":
                wants = (run("erf", x.astype(np.float64)).astype(np.float32), None)
            else:
                wants = (getattr(np, op)(x.astype(np.float64)).astype(np.float32), getattr(np, op)(x))
        for k, (want, bound, what) in enumerate(zip(wants, bounds, ("the correctly rounded result", "NumPy's float32"),
                                                    strict=True)):
            if want is None:
                continue
            at = np.flatnonzero(got.view(np.int32) != want.view(np.int32))
            if at.size:
                d, where = worst(got[at], want[at], x[at])
                assert d <= bound, f"{op}.f32: {d} ulp from {what} {where}"
                worst_seen[k] = max(worst_seen[k], d)
    vs_numpy = f", {worst_seen[1]} from NumPy" if bounds[1] is not None else ""
    print(f"{op}.f32 over all float32: {worst_seen[0]} ulp from exact{vs_numpy}")


def test_atan2_is_fdlibms_on_the_atan_port():
    # float32 through float64, rounded once: correctly rounded on these (NumPy's own SIMD
    # float32 arctan2 is up to 3 ulp off); float64 within an ulp of the correctly rounded
    # value (fdlibm's bound); every IEEE special value bit for bit, signs included.
    rng = np.random.default_rng(5)
    for dt in (np.float32, np.float64):
        tiny = np.finfo(dt).smallest_subnormal
        parts = np.array([0.0, -0.0, 1.0, -1.0, 2.5, -3.0, np.inf, -np.inf, np.nan, 1e-30, -1e30, tiny,
                          np.finfo(dt).max], dt)
        y, x = (v.reshape(-1) for v in np.meshgrid(parts, parts))
        n = 20000
        y = np.concatenate([y, rng.normal(size=n) * np.exp(rng.uniform(-40, 40, n)), rng.normal(size=n)]).astype(dt)
        x = np.concatenate([x, rng.normal(size=n) * np.exp(rng.uniform(-40, 40, n)), rng.normal(size=n)]).astype(dt)
        got = run("atan2", y, x)
        wide = np.longdouble if dt == np.float64 else np.float64
        with np.errstate(all="ignore"):
            ref = np.arctan2(y.astype(wide), x.astype(wide)).astype(dt)
            special = ~np.isfinite(y) | ~np.isfinite(x) | (y == 0) | (x == 0)
            want = np.arctan2(y, x)
        assert ulp_distance(got, ref).max() <= (0 if dt == np.float32 else 1), dt
        g, w = got[special], want[special]
        assert np.array_equal(g, w, equal_nan=True) and np.array_equal(np.signbit(g), np.signbit(w)), dt
