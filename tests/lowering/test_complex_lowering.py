"""Complex values through the loop IR: each complex op lowered as pairs of floats, run by
the evaluator and by the compiled kernel (llvm), against NumPy on random values and on
every pairing of special parts (signed zeros, infinities, NaN, huge and tiny), 0-d and
broadcast; fused chains and sums end to end; kernels that hold no complex scalar."""

from __future__ import annotations

import itertools
import math
import warnings
from collections.abc import Callable

import numpy as np
import pytest

import flowjit as fj
from flowjit.codegen_cpu.render import compile_kernel
from flowjit.ir import interpret, new_function, verify
from flowjit.ir.registry import Literal, get
from flowjit.ir.types import TensorType
from flowjit.lowering import evaluate, lower_block, print_kernel, verify_kernel
from flowjit.lowering.loops import expressions

CDTYPES = (np.complex64, np.complex128)
_PARTS = (0.0, -0.0, 1.0, -1.0, 2.5, -3.0, np.inf, -np.inf, np.nan, 1e-30, 1e30)


def special(dtype) -> np.ndarray:
    """Every complex number whose parts are two of ``_PARTS`` (121 values)."""
    re, im = np.array(list(itertools.product(_PARTS, _PARTS)), np.finfo(dtype).dtype).T
    z = np.empty(re.shape, dtype)
    z.real, z.imag = re, im
    return z


def random(dtype, shape, seed) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.normal(size=shape) * 3 + 1j * rng.normal(size=shape) * 3).astype(dtype)


def pairs(dtype) -> tuple[np.ndarray, np.ndarray]:
    """Every pairing of two special values, and random values after them."""
    s = special(dtype)
    a, b = (x.reshape(-1) for x in np.meshgrid(s, s, indexing="ij"))
    return np.concatenate([a, random(dtype, 200, 1)]), np.concatenate([b, random(dtype, 200, 2)])


def same_bits(got: np.ndarray, want: np.ndarray) -> None:
    """Equal values, the sign of a zero included; NaN where NaN (any sign)."""
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, got.dtype, want.shape, want.dtype)
    parts = (got.real, got.imag, want.real, want.imag) if got.dtype.kind == "c" else (got, None, want, None)
    for g, w in ((parts[0], parts[2]), (parts[1], parts[3])):
        if g is None:
            continue
        if g.dtype.kind != "f":
            np.testing.assert_array_equal(g, w)
            continue
        nan = np.isnan(w)
        bad = (np.isnan(g) != nan) | (~nan & ((g != w) | (np.signbit(g) != np.signbit(w))))
        assert not bad.any(), f"{bad.sum()} differ, e.g. {g[bad][:4]} for {w[bad][:4]}"


def build(body: Callable, types: list[TensorType]):
    """A function of ``types`` whose body ``body(builder, *args)`` returns its values."""
    fn, b = new_function("f", types, [f"x{i}" for i in range(len(types))])
    outs = body(b, *fn.args)
    fn.body.set_returns(list(outs) if isinstance(outs, (list, tuple)) else [outs])
    verify(fn)
    return fn


def op(name: str, **attrs) -> Callable:
    return lambda b, *xs: b.emit(get(name), list(xs), attrs)[0]


def run_both(fn, arrays: list[np.ndarray]) -> tuple[list[np.ndarray], list[np.ndarray], str]:
    """The kernel of ``fn``'s body evaluated and compiled on ``arrays``, and its listing."""
    kernel = lower_block(fn.body, "cx")
    verify_kernel(kernel)
    for e in expressions(kernel.body):  # no complex scalar reaches a renderer
        assert not e.dtype.is_complex, e
    assert all(not b.dtype.is_complex for b in kernel.buffers)
    outs = [[np.zeros(v.type.shape, v.type.dtype.np) for v in fn.body.returns] for _ in range(2)]
    evaluate(kernel, arrays, outs[0])
    compile_kernel(kernel)(arrays, outs[1])
    return outs[0], outs[1], print_kernel(kernel)


def check_exact(fn, arrays: list[np.ndarray], want: list[np.ndarray]) -> None:
    evaluated, compiled, text = run_both(fn, arrays)
    assert "c64" not in text and "c128" not in text, text
    for e, c, w in zip(evaluated, compiled, want):
        same_bits(e, w)
        same_bits(c, w)


def _np_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        return a / b


BINARY = {"add": np.add, "sub": np.subtract, "div": _np_div, "eq": np.equal, "ne": np.not_equal}


@pytest.mark.parametrize("dtype", CDTYPES)
@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_ops_are_numpys_bits(name, dtype):
    # div: NumPy's Smith algorithm, reciprocal and all, so even inf/nan/zero divisors agree.
    a, b = pairs(dtype)
    t = TensorType(a.shape, dtype)
    with np.errstate(all="ignore"):
        check_exact(build(op(name), [t, t]), [a, b], [BINARY[name](a, b)])


@pytest.mark.parametrize("dtype", CDTYPES)
def test_mul_is_the_four_product_formula(dtype):
    # NumPy's plain loop; its AVX-512 loop fuses the products (FMA), so it may differ from
    # both in the last bit: checked against the formula exactly, against np.multiply closely.
    a, b = pairs(dtype)
    t = TensorType(a.shape, dtype)
    with np.errstate(all="ignore"):
        want = np.empty_like(a)
        want.real = a.real * b.real - a.imag * b.imag
        want.imag = a.real * b.imag + a.imag * b.real
        check_exact(build(op("mul"), [t, t]), [a, b], [want])
        finite = np.isfinite(want)
        np.testing.assert_allclose(want[finite], (a * b)[finite], rtol=4 * np.finfo(dtype).eps, atol=1e-300)


UNARY = {"neg": np.negative, "conj": np.conj, "real": np.real, "imag": np.imag, "sign": np.sign,
         "isnan": np.isnan, "isfinite": np.isfinite,
         # NumPy's complex absolute is hypot (its AVX-512 loop rounds its own way: checked
         # against libm's hypot, the C loop's).
         "abs": lambda z: np.hypot(z.real, z.imag)}


@pytest.mark.parametrize("dtype", CDTYPES)
@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_ops_are_numpys_bits(name, dtype):
    z = np.concatenate([special(dtype), random(dtype, 100, 3)])
    with np.errstate(all="ignore"):
        want = np.asarray(UNARY[name](z))
        check_exact(build(op(name), [TensorType(z.shape, dtype)]), [z], [want])
    if name == "abs":
        np.testing.assert_allclose(want, np.abs(z), rtol=2 * np.finfo(dtype).eps)


def test_sign_at_its_special_points_is_numpys():
    z = np.array([0j, complex(-0.0, -0.0), complex(np.inf, 0), complex(-np.inf, 5), complex(3, -np.inf),
                  complex(np.inf, np.inf), complex(np.nan, 1), complex(np.nan, np.inf), 3 - 4j])
    got = fj.function(lambda z: fj.sign(z))(z)
    same_bits(got, np.sign(z))
    same_bits(got[:2], np.zeros(2, np.complex128))  # +0 parts, not 0 * z


CASTS = [(np.complex64, np.complex128), (np.complex128, np.complex64), (np.float32, np.complex64),
         (np.float64, np.complex64), (np.int32, np.complex128), (np.bool_, np.complex64),
         (np.complex64, np.float32), (np.complex128, np.float32), (np.complex128, np.int64),
         (np.complex64, np.bool_)]


@pytest.mark.parametrize("src,dst", CASTS, ids=[f"{np.dtype(s).name}-{np.dtype(d).name}" for s, d in CASTS])
def test_casts_are_astypes(src, dst):
    z = np.concatenate([special(np.complex128), random(np.complex128, 50, 4)])
    if np.dtype(src).kind == "c":
        x = z.astype(src)
    else:
        x = np.nan_to_num(z.real) if np.dtype(src).kind in "iub" else z.real
        with np.errstate(all="ignore"):
            x = x.astype(src) if np.dtype(src).kind != "b" else x != 0
    x = x[np.isfinite(x)] if np.dtype(dst).kind in "iu" else x  # NaN to int: each platform's own
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", np.exceptions.ComplexWarning)
        want = x.astype(dst)
    check_exact(build(op("cast", dtype=fj.dtype(dst)), [TensorType(x.shape, x.dtype)]), [x], [want])


@pytest.mark.parametrize("dtype", (np.float32, np.float64))
def test_complex_of_parts_keeps_signed_zeros_and_infinities(dtype):
    s = special(np.complex128)
    re, im = s.real.astype(dtype), s.imag.astype(dtype)
    t = TensorType(re.shape, dtype)
    want = np.empty(re.shape, np.result_type(dtype, np.complex64))
    want.real, want.imag = re, im
    check_exact(build(op("complex"), [t, t]), [re, im], [want])


def test_select_chooses_both_parts():
    a, b = random(np.complex64, 30, 5), random(np.complex64, 30, 6)
    pred = a.real > 0
    t = TensorType(a.shape, np.complex64)
    check_exact(build(op("select"), [TensorType(a.shape, np.bool_), t, t]), [pred, a, b], [np.where(pred, a, b)])


@pytest.mark.parametrize("dtype", CDTYPES)
def test_zero_d_and_broadcast_operands(dtype):
    z0 = np.array(1.5 - 2j, dtype)
    col, row = random(dtype, (3, 1), 7), random(dtype, (4,), 8)
    fn = build(lambda b, x, c, r: [op("mul")(b, x, x), op("div")(b, c, r), op("add")(b, c, x)],
               [TensorType((), dtype), TensorType((3, 1), dtype), TensorType((4,), dtype)])
    want = interpret(fn, [z0, col, row])
    check_exact(fn, [z0, col, row], want)
    same_bits(want[1], col / row)


def test_a_constant_a_pad_and_a_join_of_complex_values():
    z = random(np.complex128, (2, 3), 9)

    def body(b, x):
        c = b.emit(get("constant"), [], {"value": Literal(np.array(2 - 1j))})[0]
        y = op("mul")(b, x, op("broadcast_to", shape=(2, 3))(b, c))
        padded = op("pad", low=(1, 0), high=(0, 2), value=0.5)(b, y)
        return op("concatenate", axis=0)(b, padded, op("pad", low=(0, 0), high=(0, 2), value=-1.0)(b, x))
    fn = build(body, [TensorType((2, 3), np.complex128)])
    want = interpret(fn, [z])
    check_exact(fn, [z], want)
    same_bits(want[0][0], np.full(5, 0.5 + 0j))


@pytest.mark.parametrize("dtype", CDTYPES)
@pytest.mark.parametrize("axes,keepdims", [((0, 1), False), ((1,), False), ((0,), True), ((), False)])
def test_a_complex_sum_is_two_float_sums(dtype, axes, keepdims):
    z = random(dtype, (7, 130), 10)
    fn = build(op("reduce_sum", axes=axes, keepdims=keepdims), [TensorType(z.shape, dtype)])
    evaluated, compiled, text = run_both(fn, [z])
    want = np.sum(z, axis=axes, keepdims=keepdims) if axes else z
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == np.complex64 else dict(rtol=1e-13, atol=1e-13)
    for got in (evaluated, compiled):
        np.testing.assert_allclose(got[0], want, **tol)
        assert got[0].dtype == dtype
    if axes:
        assert text.count("acc") >= 2 and "c64" not in text and "c128" not in text, text


@pytest.mark.parametrize("dtype", CDTYPES)
@pytest.mark.parametrize("axes,keepdims", [((0, 1), False), ((1,), False), ((0,), True), ((), False)])
def test_a_complex_product_is_numpys_four_products_in_order(dtype, axes, keepdims):
    # Two "assign" accumulators: each step computes both parts from both (NumPy's four
    # products), so the product runs in NumPy's order; complex128 along the last axis is
    # NumPy's bits, complex64 accumulates in float64 parts (as a float32 product does). The
    # specials: every pairing of signed zeros, infinities and NaN in a row of 11.
    z = random(dtype, (7, 33), 3) * 0.4
    fn = build(op("reduce_prod", axes=axes, keepdims=keepdims), [TensorType(z.shape, dtype)])
    evaluated, compiled, text = run_both(fn, [z])
    want = np.prod(z, axis=axes, keepdims=keepdims) if axes else z * (1 + 0j)
    for got in (evaluated[0], compiled[0]):
        assert got.dtype == dtype
        if dtype == np.complex128 and axes != (0,):
            same_bits(got, want)
        else:
            np.testing.assert_allclose(got, want, rtol=4 * np.finfo(dtype).eps)
    if axes:
        assert "assign" in text and "c64" not in text and "c128" not in text, text
    s = special(dtype).reshape(11, 11)
    with np.errstate(all="ignore"):
        want = np.prod(s, axis=1)
    for got in run_both(build(op("reduce_prod", axes=(1,)), [TensorType(s.shape, dtype)]), [s])[:2]:
        same_bits(got[0], want)


def executable(f):
    return f._cache[next(iter(f._cache))].executable


@pytest.mark.parametrize("dtype", CDTYPES)
def test_fused_chains_of_complex_ops_run_natively(dtype):
    z, w = random(dtype, (64, 33), 11), random(dtype, (64, 33), 12)

    f = fj.function(lambda z, w: z * w + fj.conj(z))
    got = f(z, w)
    assert got.dtype == dtype
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == np.complex64 else dict(rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got, z * w + np.conj(z), **tol)
    exe = executable(f)
    assert exe.fallbacks == {} and exe._program is not None, (exe.fallbacks, exe.native_reason)

    g = fj.function(lambda z, w: fj.prod(z * 0.5, axis=1) * fj.sum(w, axis=1) + fj.arcsin(z[:, 0]) ** w[:, 1])
    np.testing.assert_allclose(g(z, w), np.prod(z * 0.5, axis=1) * np.sum(w, axis=1) + np.arcsin(z[:, 0]) ** w[:, 1],
                               **tol)
    exe = executable(g)
    assert exe.fallbacks == {} and exe._program is not None, (exe.fallbacks, exe.native_reason)


def test_kernels_beside_a_host_callback_run_on_the_python_driver():
    # The native program has no host callback: the Python driver calls the kernels, passing
    # each complex array's trailing dimension of parts.
    a = random(np.complex128, (5, 8), 13)

    def want(a):
        return np.conj(np.fft.fft(a * 2)) * 2 + np.fft.fft(a * 2).real

    def host_fft(z):
        return fj.pure_callback(np.fft.fft, fj.ShapeDtype(z.shape, z.dtype), z)
    f = fj.function(lambda a: fj.conj(host_fft(a * 2)) * 2 + host_fft(a * 2).real)
    np.testing.assert_allclose(f(a), want(a), rtol=1e-13)
    np.testing.assert_allclose(f(a), want(a), rtol=1e-13)  # the built driver
    exe = executable(f)
    assert exe._program is None and exe.fallbacks == {} and exe.kernels, (exe.native_reason, exe.fallbacks)


def test_kernels_beside_a_complex_matmul_run_in_the_native_program():
    a, b = random(np.complex128, (5, 4), 13), random(np.complex128, (4, 6), 14)
    f = fj.function(lambda a, b: fj.conj(a @ b) * 2 + (a @ b).real)
    np.testing.assert_allclose(f(a, b), np.conj(a @ b) * 2 + (a @ b).real, rtol=1e-13)
    np.testing.assert_allclose(f(a, b), np.conj(a @ b) * 2 + (a @ b).real, rtol=1e-13)
    assert executable(f)._program is not None


def test_a_large_elementwise_kernel_splits_over_threads_as_parts():
    z, w = random(np.complex64, 1 << 19, 15), random(np.complex64, 1 << 19, 16)
    f = fj.function(lambda z, w: z * w - z / w)
    with np.errstate(all="ignore"):
        np.testing.assert_allclose(f(z, w), z * w - z / w, rtol=1e-5, atol=1e-5)


def test_a_complex_update_in_place_and_zero_d_result():
    z = random(np.complex64, (), 17)
    f = fj.function(lambda z: (z * z + 1j, fj.abs(z)))
    got = f(z)
    same_bits(got[1], np.hypot(z.real, z.imag))
    np.testing.assert_allclose(got[0], z * z + 1j, rtol=1e-6)
    assert got[0].shape == () and got[0].dtype == np.complex64


# The standard's complex special cases (2024.12) for exp and log: (a, b, re, im, parts the
# standard leaves the sign of unspecified: their magnitude is checked).
_INF, _NAN, _PI = np.inf, np.nan, np.pi
SPECIAL_CASES = {
    "exp": [(0.0, 0.0, 1.0, 0.0, ""), (-0.0, 0.0, 1.0, 0.0, ""), (2.0, _INF, _NAN, _NAN, ""),
            (2.0, _NAN, _NAN, _NAN, ""), (_INF, 0.0, _INF, 0.0, ""),
            (-_INF, 1.0, 0.0 * np.cos(1.0), 0.0 * np.sin(1.0), ""), (-_INF, 3.0, 0.0 * np.cos(3.0), 0.0, ""),
            (_INF, 1.0, _INF, _INF, ""), (_INF, 3.0, -_INF, _INF, ""), (-_INF, _INF, 0.0, 0.0, "reim"),
            (_INF, _INF, _INF, _NAN, "re"), (-_INF, _NAN, 0.0, 0.0, "reim"), (_INF, _NAN, _INF, _NAN, "re"),
            (_NAN, 0.0, _NAN, 0.0, ""), (_NAN, 2.0, _NAN, _NAN, ""), (_NAN, _NAN, _NAN, _NAN, "")],
    "log": [(-0.0, 0.0, -_INF, _PI, ""), (0.0, 0.0, -_INF, 0.0, ""), (2.0, _INF, _INF, _PI / 2, ""),
            (2.0, _NAN, _NAN, _NAN, ""), (-_INF, 2.0, _INF, _PI, ""), (_INF, 2.0, _INF, 0.0, ""),
            (-_INF, _INF, _INF, 3 * _PI / 4, ""), (_INF, _INF, _INF, _PI / 4, ""), (_INF, _NAN, _INF, _NAN, ""),
            (-_INF, _NAN, _INF, _NAN, ""), (_NAN, 2.0, _NAN, _NAN, ""), (_NAN, _INF, _INF, _NAN, ""),
            (_NAN, _NAN, _NAN, _NAN, "")],
}


@pytest.mark.parametrize("dtype", CDTYPES)
@pytest.mark.parametrize("name", sorted(SPECIAL_CASES))
def test_exp_and_log_meet_the_standards_special_cases(name, dtype):
    cases = SPECIAL_CASES[name]
    z = np.empty(len(cases), dtype)
    z.real, z.imag = [c[0] for c in cases], [c[1] for c in cases]
    evaluated, compiled, _ = run_both(build(op(name), [TensorType(z.shape, dtype)]), [z])
    for got in (evaluated[0], compiled[0]):
        for (a, b, re, im, unsigned), g in zip(cases, got):
            for part, want, which in ((g.real, re, "re"), (g.imag, im, "im")):
                if np.isnan(want):
                    assert np.isnan(part), (name, a, b, g)
                    continue
                if which in unsigned:
                    part, want = abs(part), abs(want)
                np.testing.assert_allclose(part, want, rtol=2 * np.finfo(dtype).eps, err_msg=f"{name}({a}, {b})")
                assert np.signbit(part) == np.signbit(want), (name, a, b, g)


@pytest.mark.parametrize("dtype", CDTYPES)
@pytest.mark.parametrize("name", ("exp", "log"))
def test_exp_and_log_are_numpys_on_special_and_random_values(name, dtype):
    # NumPy's are glibc's cexp and clog: the same specials bit for bit, finite values within
    # a few ulp.
    rng = np.random.default_rng(18)
    r = random(dtype, 3000, 19) * np.exp(rng.uniform(-6, 6, 3000))
    near_one = np.exp(1j * rng.uniform(-4, 4, 1000)) * (1 + rng.uniform(-1e-3, 1e-3, 1000))
    z = np.concatenate([r, near_one]).astype(dtype)
    z = np.concatenate([special(dtype), z])
    fn = getattr(np, name)
    with np.errstate(all="ignore"):
        want = fn(z)
    evaluated, compiled, text = run_both(build(op(name), [TensorType(z.shape, dtype)]), [z])
    assert "c64" not in text and "c128" not in text
    eps = np.finfo(dtype).eps
    for got in (evaluated[0], compiled[0]):
        for g, w in ((got.real, want.real), (got.imag, want.imag)):
            exact = ~np.isfinite(w) | (w == 0)
            same_bits(g[exact], w[exact])
        finite = np.isfinite(want) & (want != 0)
        np.testing.assert_allclose(got[finite], want[finite], rtol=8 * eps, atol=8 * eps)


@pytest.mark.parametrize("dtype", CDTYPES)
def test_exp_rescales_past_the_overflow_of_exp_a_as_glibc(dtype):
    # glibc's cexp (NumPy's): where exp(a) overflows, cos b and sin b are first multiplied by
    # exp(t) (t the whole part of the largest exp argument), up to twice: exp(710 + 1.5i) is
    # 1.58e307 + inf i, not inf + inf i. Angles near pi/2 and 0 make the tiny parts.
    rng = np.random.default_rng(31)
    f = np.finfo(dtype).dtype.type
    t = math.floor((np.finfo(dtype).maxexp - 1) * math.log(2))
    tiny = math.log10(np.finfo(dtype).tiny)
    re = np.concatenate([rng.uniform(t - 3, t + 40, 2000), rng.uniform(t - 3, 3 * t + 3, 1000)])
    im = np.concatenate([rng.uniform(-4, 4, 500), math.pi / 2 + rng.uniform(-1e-3, 1e-3, 1500),
                         rng.choice([-1, 1], 1000) * 10.0 ** rng.uniform(tiny, -3, 1000)])
    z = np.empty(3000, dtype)
    z.real, z.imag = re.astype(f), im.astype(f)
    with np.errstate(all="ignore"):
        want = np.exp(z)
    assert np.isfinite(want.real).sum() > 300 and np.isfinite(want.imag).sum() > 300
    evaluated, compiled, _ = run_both(build(op("exp"), [TensorType(z.shape, dtype)]), [z])
    eps = np.finfo(dtype).eps
    for got in (evaluated[0], compiled[0]):
        for g, w in ((got.real, want.real), (got.imag, want.imag)):
            exact = ~np.isfinite(w) | (w == 0)
            same_bits(g[exact], w[exact])
            finite = ~exact
            np.testing.assert_allclose(g[finite], w[finite], rtol=8 * eps, atol=0)


# Past exp's and the hyperbolic functions' overflow and around the switch to their scaled
# form (log of the largest float), tanh's switch (44 and 355), and the largest floats (sqrt's
# scaling).
_LARGE = (19.9, 20.5, -25.0, 44.5, 89.0, 300.0, 360.0, -400.0, 709.0, 710.2, -711.0, 1000.0, 1e300, -1.7e308)
GLIBC_FUNCTIONS = ("sqrt", "sin", "cos", "sinh", "cosh", "tanh", "expm1", "log1p")


@pytest.mark.parametrize("dtype", CDTYPES)
@pytest.mark.parametrize("name", GLIBC_FUNCTIONS)
def test_complex_roots_trigonometric_and_hyperbolic_functions_are_numpys(name, dtype):
    # NumPy's sqrt, sin, cos, sinh, cosh and tanh are glibc's (csqrt, csin...): their special
    # values bit for bit (the signs the standard leaves open included), finite values within a
    # few ulp of |z|; expm1 and log1p are NumPy's own formulas, written the same way.
    with np.errstate(over="ignore"):   # complex64's largest parts: infinities
        parts = np.array([*_PARTS, *_LARGE], np.finfo(dtype).dtype)
    re, im = (x.reshape(-1) for x in np.meshgrid(parts, parts))
    grid = np.empty(re.shape, dtype)
    grid.real, grid.imag = re, im
    z = np.concatenate([grid, random(dtype, 2000, 23) * np.exp(np.random.default_rng(24).uniform(-5, 5, 2000))])
    z = z.astype(dtype)
    with np.errstate(all="ignore"):
        want = getattr(np, name)(z)
    evaluated, compiled, text = run_both(build(op(name), [TensorType(z.shape, dtype)]), [z])
    assert "c64" not in text and "c128" not in text
    eps = np.finfo(dtype).eps
    tiny = np.finfo(dtype).tiny
    for got in (evaluated[0], compiled[0]):
        for g, w in ((got.real, want.real), (got.imag, want.imag)):
            exact = ~np.isfinite(w) | (w == 0)
            same_bits(g[exact], w[exact])
        finite = np.isfinite(want) & (np.abs(want) > 1e3 * tiny)   # not the subnormals' few bits
        np.testing.assert_allclose(got[finite], want[finite], rtol=16 * eps, atol=0)


@pytest.mark.parametrize("dtype", CDTYPES)
@pytest.mark.parametrize("name", ("sqrt", "sin", "cos", "sinh", "cosh"))
def test_subnormal_parts_keep_their_bits(name, dtype):
    # sqrt of parts below twice the smallest normal float scales them up first ((|a| + |z|) / 2
    # lost their bits: sqrt(5e-324j) was 0 + inf i); a subnormal factor of cosh(x) meets it in
    # one product until cosh overflows, then is not halved before it meets the exponential
    # (sinh(1000 + 5e-324i) had an imaginary part 0, sinh(inf + 5e-324i) one of NaN).
    info = np.finfo(dtype)
    rng = np.random.default_rng(27)
    small = info.tiny * np.exp2(-rng.uniform(0, info.nmant, 300)) * rng.choice([-1, 1], 300)
    with np.errstate(over="ignore"):
        big = np.array([0.5, 3.0, 25.0, 80.0, 400.0, 1000.0, np.inf], info.dtype)
    z = np.concatenate([small + 1j * small[::-1], 1j * small, small + 0j,
                        *(x + 1j * small[:20] for x in big), *(small[:20] + 1j * x for x in big)]).astype(dtype)
    with np.errstate(all="ignore"):
        want = getattr(np, name)(z)
    evaluated, compiled, _ = run_both(build(op(name), [TensorType(z.shape, dtype)]), [z])
    for got in (evaluated[0], compiled[0]):
        for g, w in ((got.real, want.real), (got.imag, want.imag)):
            exact = ~np.isfinite(w) | (w == 0)
            same_bits(g[exact], w[exact])
            # within 16 ulp, and a subnormal result (fewer bits) within two of its own spacing
            tol = 16 * info.eps * np.abs(w[~exact]) + 2 * np.spacing(info.dtype.type(0))
            off = np.abs(g[~exact] - w[~exact]) > tol
            assert not off.any(), (name, z[~exact][off][:4])


def compiled_only(fn, arrays: list[np.ndarray]) -> list[np.ndarray]:
    """The kernel of ``fn``'s body compiled and run on ``arrays`` (the evaluator walks a long
    expression element by element in Python: too slow for thousands of elements)."""
    kernel = lower_block(fn.body, "cx")
    outs = [np.zeros(v.type.shape, v.type.dtype.np) for v in fn.body.returns]
    compile_kernel(kernel)(arrays, outs)
    return outs


@pytest.mark.parametrize("dtype", CDTYPES)
def test_pow_is_numpys(dtype):
    # NumPy's npy_cpow: an integer exponent below 100 in magnitude by binary powering, bit for
    # bit (1 + 0i first, 1/z^n by its division); others glibc's cpow, exp(b log a) with C's
    # multiplication, whose special values (an infinity recovered from NaN) are glibc's. The
    # evaluator (NumPy's exp and log) on every 97th.
    ints = np.arange(-101, 102).astype(dtype)
    base = random(dtype, 40, 5)
    a_int, b_int = np.repeat(base, len(ints)), np.tile(ints, len(base))
    a_special, b_special = pairs(dtype)
    a = np.concatenate([a_int, a_special, random(dtype, 3000, 7)]).astype(dtype)
    b = np.concatenate([b_int, b_special, random(dtype, 3000, 8) * 0.3]).astype(dtype)
    pick = np.r_[0:len(a):97]
    compiled = compiled_only(build(op("pow"), [TensorType(a.shape, dtype)] * 2), [a, b])[0]
    kernel = lower_block(build(op("pow"), [TensorType(pick.shape, dtype)] * 2).body, "cx")
    evaluated = [np.zeros(pick.shape, dtype)]
    evaluate(kernel, [a[pick], b[pick]], evaluated)
    with np.errstate(all="ignore"):
        want = np.power(a, b)
        exponent = b * np.log(np.where(a == 0, 1, a))
    eps = np.finfo(dtype).eps
    small = np.zeros(a.shape, bool)
    small[:len(a_int)] = np.abs(b_int.real) < 100
    for got, at in ((compiled, slice(None)), (evaluated[0], pick)):
        w, e = want[at], exponent[at]
        same_bits(got[small[at]], w[small[at]])
        # An angle past 1/eps has no right bit (the last bit of log decides the sine's sign).
        angle_lost = np.abs(e.imag) > 1 / eps
        for g, wp in ((got.real, w.real), (got.imag, w.imag)):
            exact = (~np.isfinite(wp) | (wp == 0)) & ~angle_lost
            same_bits(g[exact], wp[exact])
        finite = np.isfinite(w) & np.isfinite(got) & (w != 0)
        # exp(b log a) carries log's rounding times |b log a| into the result.
        scale = np.maximum(1, np.nan_to_num(np.abs(e), nan=1, posinf=1))[finite]
        assert np.all(np.abs(got[finite] - w[finite]) <= 16 * eps * np.abs(w[finite]) * scale)


def test_a_power_names_its_squares():
    # Seven squarings written as one expression would be a tree of 4^7 nodes a part: each
    # square and product is a let, so the kernel's text stays small and hashes quickly.
    t = TensorType((5,), np.complex128)
    kernel = lower_block(build(op("pow"), [t, t]).body, "cx")
    assert len(print_kernel(kernel)) < 20_000
    assert len(repr(kernel)) < 200_000


def test_a_power_runs_in_the_native_program():
    z, w = random(np.complex128, (16, 8), 31), random(np.complex128, (16, 8), 32)
    f = fj.function(lambda z, w: z ** w + z ** 3)
    np.testing.assert_allclose(f(z, w), z ** w + z ** 3, rtol=1e-12)
    exe = executable(f)
    assert exe.fallbacks == {} and exe._program is not None, (exe.fallbacks, exe.native_reason)


def test_a_constant_integer_power_keeps_only_its_products():
    # The exponent's selects fold and drop_dead_lets takes the exp-and-log branch away: z**3
    # is two complex products (and the zero base's check), no call.
    t = TensorType((5,), np.complex64)
    three = lambda b: b.emit(get("constant"), [], {"value": Literal(np.array(3, np.complex64))})[0]  # noqa: E731
    fn = build(lambda b, z: op("pow")(b, z, three(b)), [t])
    text = print_kernel(lower_block(fn.body, "cx"))
    assert not any(f in text for f in ("exp", "log", "sin", "cos", "atan2", "hypot")), text
    z = random(np.complex64, 5, 41)
    check_exact(fn, [z], [z ** np.complex64(3)])


INVERSE = {"asin": np.arcsin, "acos": np.arccos, "atan": np.arctan, "asinh": np.arcsinh, "acosh": np.arccosh,
           "atanh": np.arctanh}


def _inverse_inputs(dtype) -> np.ndarray:
    """Every pairing of special, large and branch-cut parts (both zeros and both NaNs), random
    values over 16 decades, values next to the branch points 1 and i and tiny ones, and
    subnormal parts beside ones from 0.5 to infinity."""
    info = np.finfo(dtype)
    with np.errstate(over="ignore"):
        parts = np.array([*_PARTS, *_LARGE, 0.5, -0.9, 1.5, 1e-10, -1e-300, -np.nan], info.dtype)
    re, im = (x.reshape(-1) for x in np.meshgrid(parts, parts))
    grid = np.empty(re.shape, dtype)
    grid.real, grid.imag = re, im
    rng = np.random.default_rng(27)
    small = info.tiny * np.exp2(-rng.uniform(0, info.nmant, 100)) * rng.choice([-1, 1], 100)
    with np.errstate(over="ignore"):
        big = np.array([0.5, 1.0, -1.0, 3.0, 25.0, 1e10, 1e30, info.max / 2, np.inf], info.dtype)
    sub = [small + 1j * small[::-1], *(x + 1j * small[:10] for x in big), *(small[:10] + 1j * x for x in big)]
    spread = random(dtype, 3000, 23) * np.exp(np.random.default_rng(24).uniform(-8, 8, 3000))
    near = [1 + 1e-7 * random(dtype, 300, 5), 1j + 1e-7 * random(dtype, 300, 6), 1e-20 * random(dtype, 300, 7)]
    return np.concatenate([grid, spread, *near, *sub]).astype(dtype)


@pytest.mark.parametrize("dtype", CDTYPES)
@pytest.mark.parametrize("name", sorted(INVERSE))
def test_inverse_trigonometric_and_hyperbolic_functions_are_numpys(name, dtype):
    # Kahan's formulas over glibc's special values (NumPy calls glibc's casin, cacos...):
    # every special value bit for bit, the signs of zeros and infinities that pick a branch
    # cut's side included; finite values within 8 ulp of |result| (2.7 measured); log(2z)
    # past the square root of the largest float, where the products would overflow. The
    # evaluator on every 37th.
    z = _inverse_inputs(dtype)
    with np.errstate(all="ignore"):
        want = INVERSE[name](z)
    compiled = compiled_only(build(op(name), [TensorType(z.shape, dtype)]), [z])[0]
    pick = np.r_[0:len(z):37]
    kernel = lower_block(build(op(name), [TensorType(pick.shape, dtype)]).body, "cx")
    evaluated = [np.zeros(pick.shape, dtype)]
    evaluate(kernel, [z[pick]], evaluated)
    info = np.finfo(dtype)
    for got, w in ((compiled, want), (evaluated[0], want[pick])):
        for g, wp in ((got.real, w.real), (got.imag, w.imag)):
            exact = ~np.isfinite(wp) | (wp == 0)
            same_bits(g[exact], wp[exact])
            # A finite part beside a NaN or infinite one (acosh(0 + NaN i) = NaN + i pi/2).
            beside = np.isfinite(wp) & (wp != 0) & ~np.isfinite(w)
            np.testing.assert_allclose(g[beside], wp[beside], rtol=8 * info.eps, atol=0)
        finite = np.isfinite(w) & (np.abs(w) > 1e3 * info.tiny)
        np.testing.assert_allclose(got[finite], w[finite], rtol=8 * info.eps, atol=0)


@pytest.mark.parametrize("dtype", CDTYPES)
@pytest.mark.parametrize("name", sorted(INVERSE))
def test_each_part_of_an_inverse_function_is_accurate_over_the_whole_range(name, dtype):
    # Part by part, not only within ulps of |result|: acos of a huge z near the real axis had
    # taken pi/2 - Re(asin z), which cancels (0 where 2.5e-21 is right).
    info = np.finfo(dtype)
    rng = np.random.default_rng(31)
    n = 4000
    scale = np.exp(rng.uniform(np.log(info.tiny) / 2, np.log(info.max) / 1.01, (2, n)))
    z = (rng.normal(size=n) * scale[0] + 1j * rng.normal(size=n) * scale[1]).astype(dtype)
    z = np.concatenate([z, (z.real + 1j * z.real * 1e-15).astype(dtype)])
    with np.errstate(all="ignore"):
        want = INVERSE[name](z)
    got = compiled_only(build(op(name), [TensorType(z.shape, dtype)]), [z])[0]
    for g, w in ((got.real, want.real), (got.imag, want.imag)):
        ok = np.isfinite(w) & (np.abs(w) > 1e3 * info.tiny)
        np.testing.assert_allclose(g[ok], w[ok], rtol=16 * info.eps, atol=0)


def test_two_constants_differing_in_a_zeros_sign_stay_two():
    # Const(0.0) == Const(-0.0) as floats compare: the lowering's memo had given z ** (2.5 + 0j)
    # and z ** (2.5 - 0j) one set of lets (the second power's imaginary part lost its sign),
    # and select(c, -0.0, 0.0) folded to -0.0.
    z = np.array([complex(1.0, -0.0), complex(-1.0, -0.0)])
    c = np.complex128(2.5 + 0j)
    f = fj.function(lambda z: (z ** c, z ** np.conj(c)))
    for got, want in zip(f(z), (z ** c, z ** np.conj(c))):
        same_bits(got, want)
    x = np.array([1.0, -1.0])
    same_bits(fj.function(lambda x: fj.where(x > 0, -0.0, 0.0))(x), np.where(x > 0, -0.0, 0.0))


@pytest.mark.parametrize("dtype", CDTYPES)
def test_log_and_pow_of_huge_and_subnormal_bases(dtype):
    # log|z| scales z by a power of two where |z| would overflow (inf had been the real part)
    # or the parts are subnormal (hypot of subnormals keeps few bits: 16% off as a power).
    info = np.finfo(dtype)
    big, small = info.max / 1.5, info.smallest_subnormal
    z = np.array([complex(big, big), complex(-big, big / 3), complex(small, small), complex(small * 7, -small),
                  complex(info.tiny / 3, info.tiny / 5), complex(big, small)], dtype)
    got = fj.function(fj.log)(z)
    np.testing.assert_allclose(got, np.log(z), rtol=4 * info.eps)
    # The power carries log's rounding times |w log z| (about 44 here) into its result.
    got = fj.function(lambda z: z ** np.asarray(0.5, dtype))(z)
    np.testing.assert_allclose(got, np.power(z, dtype(0.5)), rtol=16 * info.eps * 0.5 * np.abs(np.log(z)).max())
