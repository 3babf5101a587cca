"""The FFT kernel (``flowjit.lowering.fourier``): a transform of the last axis over enough
rows stays one ``fft`` op that lowers to a Stockham FFT on blocks of rows, compiled into the
native program; against NumPy's pocketfft and the interpreter for every fft type the kernel
takes (fft, ifft, rfft, irfft), both precisions, batches that are not a multiple of a block, multi-axis transforms
whose last axis it runs, and gradients through it. Lengths, row counts and types it does not
take keep the decomposition into products."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import flowjit as fj
from flowjit.ir.dtypes import complex64, float32
from flowjit.ir.primitives.fft import KERNEL_MIN_ROWS, kernel_transform
from flowjit.ir.types import TensorType
from flowjit.lowering import evaluate, print_kernel
from flowjit.lowering.fourier import MAX_RADIX4_STAGES, fourier_kernel
from flowjit.lowering.loops import (
    INDEX,
    Load,
    Loop,
    Prim,
    SizeVar,
    Store,
    Var,
    expressions,
    subexpressions,
    walk_statements,
)
from flowjit.lowering.lower import lower_block


def _complex(rng, shape, dtype):
    return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)


def _tolerance(dtype) -> float:
    return 2e-6 if np.dtype(dtype) in (np.float32, np.complex64) else 1e-13


def _ops(f, *args) -> list[str]:
    return [op.name for op in f.ir(*args, stage="fused").body.ops]


def transform_pair(fft_type: str, n: int):
    """flowjit's transform of ``fft_type`` (an irfft to ``n`` samples) and NumPy's."""
    if fft_type == "irfft":
        return (lambda a: fj.fft.irfft(a, n=n)), (lambda a: np.fft.irfft(a, n=n))
    return getattr(fj.fft, fft_type), getattr(np.fft, fft_type)


def _close(got, want, dtype):
    scale = max(1.0, float(np.abs(want).max()))
    np.testing.assert_allclose(got, want, rtol=0, atol=_tolerance(dtype) * scale)


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
@pytest.mark.parametrize("shape", [(4, 2), (5, 8), (17, 32), (3, 6, 64), (33, 128), (16, 2048)])
def test_fft_and_ifft_of_the_last_axis_run_the_kernel_and_match_numpy(dtype, shape):
    x = _complex(np.random.default_rng(sum(shape)), shape, dtype)
    f = fj.function(lambda a: (fj.fft.fft(a), fj.fft.ifft(a)))
    got, inv = f(x)
    assert _ops(f, x).count("fft") == 2                # the ops kept, no products
    assert "native driver" in f.kernels(x)
    assert got.dtype == x.dtype and inv.dtype == x.dtype
    _close(got, np.fft.fft(x.astype(np.complex128)), dtype)
    _close(inv, np.fft.ifft(x.astype(np.complex128)), dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(4, 4), (5, 16), (17, 64), (2, 8, 256), (256, 1024), (20, 8192)])
def test_rfft_of_the_last_axis_runs_the_kernel_and_matches_numpy(dtype, shape):
    x = np.random.default_rng(sum(shape)).standard_normal(shape).astype(dtype)
    f = fj.function(lambda a: fj.abs(fj.fft.rfft(a)) ** 2)
    g = fj.function(lambda a: fj.fft.rfft(a))
    assert _ops(g, x) == ["fft"]
    want = np.fft.rfft(x.astype(np.float64))
    got = g(x)
    assert got.shape == want.shape and got.dtype == np.result_type(dtype, np.complex64)
    _close(got, want, dtype)
    _close(f(x), np.abs(want) ** 2, dtype)
    np.testing.assert_allclose(got, fj.function(lambda a: fj.fft.rfft(a), interpret=True)(x),
                               rtol=0, atol=_tolerance(dtype) * max(1.0, float(np.abs(want).max())))


def test_multi_axis_transforms_run_their_last_axis_in_the_kernel():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((6, 12, 64)).astype(np.float32)
    z = _complex(rng, (6, 10, 32), np.complex128)
    _close(fj.function(lambda a: fj.fft.rfft2(a))(x), np.fft.rfft2(x.astype(np.float64)), np.float32)
    _close(fj.function(lambda a: fj.fft.fft2(a))(z), np.fft.fft2(z), np.complex128)
    _close(fj.function(lambda a: fj.fft.ifftn(a))(z), np.fft.ifftn(z), np.complex128)
    # irfft2: the leading axis by products, the last by the kernel
    spec = np.fft.rfft2(x.astype(np.float64)).astype(np.complex64)
    irfft2 = fj.function(lambda a: fj.fft.irfft2(a, s=(12, 64)))
    _close(irfft2(spec), np.fft.irfft2(spec.astype(np.complex128), s=(12, 64)), np.float32)
    assert "fft" in _ops(irfft2, spec)


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
@pytest.mark.parametrize("shape,n", [((4, 3), 4), ((37, 5), 8), ((16, 257), 512), ((4, 4, 1025), 2048)])
def test_irfft_of_the_last_axis_runs_the_kernel_and_matches_numpy(dtype, shape, n):
    # The first and last terms' imaginary parts are not zero here: pocketfft ignores them.
    x = _complex(np.random.default_rng(n), shape, dtype)
    f = fj.function(lambda a: fj.fft.irfft(a, n=n))
    assert _ops(f, x) == ["fft"]
    got = f(x)
    want = np.fft.irfft(x.astype(np.complex128), n=n)
    assert got.shape == want.shape and got.dtype == np.dtype(dtype).type(0).real.dtype
    _close(got, want, dtype)
    np.testing.assert_allclose(got, fj.function(lambda a: fj.fft.irfft(a, n=n), interpret=True)(x),
                               rtol=0, atol=_tolerance(dtype) * max(1.0, float(np.abs(want).max())))


@pytest.mark.parametrize("fft_type,shape,n", [
    ("fft", (1, 1024), 1024), ("ifft", (4, 4096), 4096), ("fft", (1, 65536), 65536),   # past KERNEL_MAX_LENGTH
    ("fft", (16, 65536), 65536), ("rfft", (8, 65536), 65536),   # past FOUR_STEP_MAX_ELEMENTS, rows share the twiddles
    ("fft", (2, 3, 128), 128), ("rfft", (1, 8192), 8192), ("rfft", (3, 256), 256), ("irfft", (2, 513), 1024)])
def test_long_transforms_of_few_rows_run_as_four_steps_of_batches(fft_type, shape, n):
    # Fewer rows than a block's lanes: two fft ops of shorter lengths over more rows, each the
    # kernel's (a long lone row would fill one lane of sixteen).
    rng = np.random.default_rng(n)
    x = rng.standard_normal(shape).astype(np.float32) if fft_type == "rfft" else _complex(rng, shape, np.complex64)
    transform, reference = transform_pair(fft_type, n)
    f = fj.function(transform)
    ffts = [op for op in f.ir(x, stage="fused").body.ops if op.name == "fft"]
    assert len(ffts) == 2 and all(kernel_transform(op.inputs[0].type, op.attrs["fft_type"],
                                                   op.attrs["fft_lengths"]) for op in ffts)
    assert math.prod(op.attrs["fft_lengths"][0] for op in ffts) == (n // 2 if "rfft" in fft_type else n)
    want = reference(x.astype(np.float64 if fft_type == "rfft" else np.complex128))
    _close(f(x), want, np.complex64)
    _close(fj.function(transform, interpret=True)(x), want, np.complex64)


@pytest.mark.parametrize("fft_type,shape,n,how", [
    ("fft", (4, 384), 384, "split"), ("ifft", (2, 3, 48), 48, "split"), ("rfft", (8, 768), 768, "split"),
    ("irfft", (5, 385), 768, "split"), ("fft", (3, 97), 97, "bluestein"), ("rfft", (6, 4099), 4099, "bluestein"),
    ("ifft", (2, 1031), 1031, "bluestein")])
def test_lengths_that_are_not_powers_of_two_run_their_transforms_in_the_kernel(fft_type, shape, n, how):
    # A length with a power of two of 16 or more as a factor: the odd part's DFT one product,
    # the power of two's transforms the kernel's; a prime above DFT_RADIX: Bluestein's two
    # power-of-two transforms, the kernel's.
    rng = np.random.default_rng(n)
    x = rng.standard_normal(shape) if fft_type == "rfft" else _complex(rng, shape, np.complex128)
    transform, reference = transform_pair(fft_type, n)
    f = fj.function(transform)
    ffts = [op for op in f.ir(x, stage="fused").body.ops if op.name == "fft"]
    assert ffts and all(kernel_transform(op.inputs[0].type, op.attrs["fft_type"], op.attrs["fft_lengths"])
                        for op in ffts)
    # (the kernel's transforms may themselves run in four steps: one op each, or two)
    assert len(ffts) >= (2 if how == "bluestein" else 1)
    _close(f(x), reference(x), np.complex128)


@pytest.mark.parametrize("fft_type,shape,n,dtype", [
    ("rfft", (8, 768), 768, np.float32), ("rfft", (2, 3, 96), 96, np.float64), ("rfft", (4, 1280), 1280, np.float32),
    ("irfft", (6, 385), 768, np.complex64), ("irfft", (2, 3, 49), 96, np.complex128)])
def test_a_split_real_transform_reads_its_terms_in_order(fft_type, shape, n, dtype):
    # An rfft or irfft whose half length splits at a power of two: the terms are transposed
    # before the kernel's transforms (split in time), so the kernel after them reads every
    # term at an affine index. Split in frequency, the untangling read the transposed
    # spectrum at k % r and k // r: gathers, 0.19 of rfft(f32[256, 768])'s 0.27 ms.
    rng = np.random.default_rng(n)
    x = rng.standard_normal(shape).astype(dtype) if fft_type == "rfft" else _complex(rng, shape, dtype)
    transform, reference = transform_pair(fft_type, n)
    fused = fj.function(transform).ir(x, stage="fused")
    kernels = [lower_block(op.blocks[0], "k", collapse=True) for op in fused.body.ops if op.primitive.role == "kernel"]
    assert kernels and any(op.name == "fft" for op in fused.body.ops)
    for k in kernels:
        accesses = [s for s in walk_statements(k.body) if isinstance(s, Store)]
        accesses += [e for e in expressions(k.body) if isinstance(e, Load)]
        ops = {e.op for a in accesses for i in a.index for e in subexpressions(i) if isinstance(e, Prim)}
        assert not ops & {"idiv", "irem"}, print_kernel(k)
    want = reference(x.astype(np.float64 if fft_type == "rfft" else np.complex128))
    _close(fj.function(transform)(x), want, dtype)
    _close(fj.function(transform, interpret=True)(x), want, dtype)


def test_bluesteins_padded_length_and_its_transforms_without_a_transpose():
    # A prime's convolution pads to the least power of two or r * p (r = 3, 5, 7) the kernel
    # takes as rows; padded to r * p, the forward transform leaves its terms transposed and
    # the inverse takes them so: no transpose op, every index affine, NumPy's result.
    from flowjit.ir.primitives.fft import _bluestein_length
    assert _bluestein_length(4099, (32,), complex64) == 10240          # 5 x 2048 < 16384
    assert _bluestein_length(1031, (16,), complex64) == 2560           # 5 x 512 < 4096
    assert _bluestein_length(97, (64,), complex64) == 224              # 7 x 32 (3 x 64 < 193)
    assert _bluestein_length(61, (64,), complex64) == 128              # 160, 192, 224 are longer
    assert _bluestein_length(4099, (1,), complex64) == 16384           # 5 rows: four steps' order
    rng = np.random.default_rng(7)
    for fft_type, x in (("fft", _complex(rng, (16, 1031), np.complex64)),
                        ("rfft", rng.standard_normal((8, 2, 1031)).astype(np.float64))):
        transform, reference = transform_pair(fft_type, 1031)
        fused = fj.function(transform).ir(x, stage="fused")
        names = [op.name for op in fused.body.ops]
        assert "fft" in names and not any("transpose" in name for name in names), names
        for op in fused.body.ops:
            if op.primitive.role == "kernel":
                k = lower_block(op.blocks[0], "k", collapse=True)
                ops = {e.op for e in expressions(k.body) if isinstance(e, Prim)}
                assert not ops & {"idiv", "irem"}, print_kernel(k)
        want = reference(x.astype(np.complex128 if fft_type == "fft" else np.float64))
        _close(fj.function(transform)(x), want, x.dtype)


@pytest.mark.parametrize("shape", [(2, 4099), (3, 1031), (2, 3, 37), (5, 33), (4, 1001)])
def test_an_odd_length_rfft_transforms_two_real_rows_as_one_complex_row(shape):
    # Row j is the real part and row half + j the imaginary part of one complex transform,
    # untangled after (a real row cast to complex spent half its transform on zeros); an odd
    # count of rows gets a zero row.
    rng = np.random.default_rng(shape[-1])
    x = rng.standard_normal(shape)
    n, rows = shape[-1], math.prod(shape[:-1])
    f = fj.function(fj.fft.rfft)
    packed = [op.result.type.shape for op in f.ir(x.astype(np.float32), stage="decompose").body.ops
              if op.name == "complex"]
    assert packed == [(-(-rows // 2), n)], packed
    for dtype in (np.float32, np.float64):
        want = np.fft.rfft(x)
        got = f(x.astype(dtype))
        assert got.dtype == (np.complex64 if dtype == np.float32 else np.complex128)
        _close(got, want, got.dtype)
        _close(fj.function(fj.fft.rfft, interpret=True)(x.astype(dtype)), want, got.dtype)

    def loss(a):
        return fj.sum(fj.abs(fj.fft.rfft(a)) ** 2 * fj.arange(n // 2 + 1))
    np.testing.assert_allclose(fj.function(fj.grad(loss))(x), fj.function(fj.grad(loss), interpret=True)(x),
                               rtol=1e-9, atol=1e-9 * n * n)


def test_four_steps_stop_where_their_transposes_cost_more_than_products():
    from flowjit.ir.primitives.fft import FOUR_STEP_MAX_ELEMENTS, FOUR_STEP_MAX_LENGTH, _four_steps_apply
    assert _four_steps_apply(TensorType((1, FOUR_STEP_MAX_ELEMENTS), complex64))
    assert not _four_steps_apply(TensorType((2, FOUR_STEP_MAX_ELEMENTS), complex64))
    assert not _four_steps_apply(TensorType((1, 32), complex64))          # short: products
    assert not _four_steps_apply(TensorType((16, 4096), complex64))       # the kernel's as it is
    # over several rows the twiddles are shared: up to FOUR_STEP_MAX_LENGTH the four steps
    assert _four_steps_apply(TensorType((16, 1 << 16), complex64))
    assert _four_steps_apply(TensorType((8, FOUR_STEP_MAX_LENGTH), complex64))
    assert not _four_steps_apply(TensorType((1, 1 << 20), complex64))
    assert not _four_steps_apply(TensorType((4, 2 * FOUR_STEP_MAX_LENGTH), complex64))


def test_gradients_through_the_kernel_match_the_interpreter():
    x = np.random.default_rng(4).standard_normal((8, 64))

    def loss(a):
        z = fj.fft.fft(a.astype(np.complex128)) * 2j
        back = fj.fft.irfft(fj.fft.rfft(a) * (1 + 0.5j), n=64)
        return (fj.sum(fj.abs(fj.fft.rfft(a * 1.5)) ** 2) + fj.sum(fj.real(fj.fft.ifft(z)))
                + fj.sum(back * fj.sin(a)))
    g = fj.function(fj.grad(loss))(x)
    want = fj.function(fj.grad(loss), interpret=True)(x)
    np.testing.assert_allclose(g, want, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("shape,fft_type,lengths,taken", [
    ((4, 8), "fft", (8,), True),
    ((4, 64), "fft", (64,), False),           # fewer than KERNEL_FULL_ROWS of a long one: four steps
    ((16, 64), "fft", (64,), True),
    ((3, 8), "fft", (8,), False),             # fewer rows than KERNEL_MIN_ROWS
    ((4, 12), "fft", (12,), True),            # 3 x 4: a radix-3 stage, then radix 4
    ((4, 22), "fft", (22,), False),           # a factor 11: no stage of its own
    ((16, 1000), "fft", (1000,), True),       # 5^3 x 8
    ((4, 1000), "fft", (1000,), False),       # fewer than KERNEL_FULL_ROWS
    ((16, 96), "fft", (96,), False),          # 3 x 32 over few rows: split at its power of two
    ((64, 96), "fft", (96,), True),           # ... over KERNEL_MIXED_MIN_ROWS: the kernel
    ((4, 1), "fft", (1,), False),
    ((4, 4, 8), "fft", (4, 8), False),        # two axes: the op is decomposed, its last axis the kernel's
    ((4, 16), "rfft", (16,), True),
    ((4, 2), "rfft", (2,), False),            # one complex point
    ((4, 10), "rfft", (10,), True),           # five complex points
    ((4, 26), "rfft", (26,), False),          # thirteen
    ((4, 9), "irfft", (16,), True),
    ((4, 9), "irfft", (17,), False),          # an odd length
    ((4, 7), "irfft", (12,), True),           # half of it 3 x 2
    ((4, 12), "irfft", (22,), False),         # half of it 11
    ((4, 2), "irfft", (2,), False),           # one complex point
])
def test_which_transforms_the_kernel_takes(shape, fft_type, lengths, taken):
    d = float32 if fft_type == "rfft" else complex64
    assert kernel_transform(TensorType(shape, d), fft_type, lengths) is taken
    assert KERNEL_MIN_ROWS == 4


@pytest.mark.parametrize("n", [45, 100, 384, 1000, 2401, 6000])
@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_lengths_of_factors_2_3_5_and_7_run_in_the_kernel(n, dtype):
    # One fft op (the kernel's stages of radix 3, 5, 7, then 4 and 2) over enough rows for the
    # kernel, forward and inverse, and the real transforms of twice the length; before, a
    # length such as 1000 (an odd part above DFT_RADIX) ran as products by DFT matrices in
    # the rows layout: fft of c64[1024, 1000] 3.8 ms, in the kernel 1.0-1.2.
    rng = np.random.default_rng(n)
    z = _complex(rng, (64, n), dtype)
    x = rng.standard_normal((64, 2 * n)).astype(np.float32 if dtype == np.complex64 else np.float64)
    for transform, arg, want in [(fj.fft.fft, z, np.fft.fft(z.astype(np.complex128))),
                                 (fj.fft.ifft, z, np.fft.ifft(z.astype(np.complex128))),
                                 (fj.fft.rfft, x, np.fft.rfft(x.astype(np.float64)))]:
        f = fj.function(transform)
        assert _ops(f, arg) == ["fft"]
        _close(f(arg), want, dtype)
    spectrum = np.fft.rfft(x.astype(np.float64)).astype(dtype)
    f = fj.function(lambda y: fj.fft.irfft(y, n=2 * n))
    assert _ops(f, spectrum) == ["fft"]
    _close(f(spectrum), x, dtype)


def test_transforms_the_kernel_does_not_take_still_match_numpy():
    rng = np.random.default_rng(5)
    for shape in [(3, 8), (4, 22), (6, 11), (4, 1000)]:
        z = _complex(rng, shape, np.complex128)
        f = fj.function(lambda a: fj.fft.fft(a))
        assert "fft" not in _ops(f, z)
        _close(f(z), np.fft.fft(z), np.complex128)


def test_the_stage_loop_covers_every_length_the_kernel_takes():
    from flowjit.ir.primitives.fft import KERNEL_MAX_LENGTH
    assert 4 ** MAX_RADIX4_STAGES * 2 >= KERNEL_MAX_LENGTH


@pytest.mark.parametrize("fft_type", ["fft", "ifft", "rfft", "irfft"])
@pytest.mark.parametrize("n", [2, 8, 16, 32, 3, 12, 15, 35, 63])
def test_the_kernel_as_loop_ir_computes_the_transform(fft_type, n):
    """The loop IR itself, run by the loop-IR evaluator (what every code generator renders):
    one kernel for every length, its sizes read from the buffers."""
    rows = 5
    count = [0]

    def fresh(p):
        count[0] += 1
        return f"{p}{count[0]}"
    d = float32 if fft_type == "rfft" else complex64
    sizes = (SizeVar("n0", "in0", 0), SizeVar("n1", "in0", 1), SizeVar("n2", "out0", 1))
    if fft_type == "irfft":   # n + 1 terms in, 2n samples out
        x = _complex(np.random.default_rng(n), (rows, n + 1), np.complex64)
        k = fourier_kernel("f", "in0", [Var("n0", INDEX), Var("n1", INDEX)], Var("n2", INDEX), d, fft_type, sizes,
                           fresh)
        out = np.zeros((rows, 2 * n), np.float32)
        evaluate(k, [x.view(np.float32).reshape(rows, n + 1, 2)], [out])
        _close(out, np.fft.irfft(x.astype(np.complex128), n=2 * n), np.complex64)
        return
    k = fourier_kernel("f", "in0", [Var("n0", INDEX), Var("n1", INDEX)], Var("n2", INDEX), d, fft_type, sizes, fresh)
    # the butterflies run whole vectors of lanes, the copies in square tiles
    loops = [s for s in walk_statements(k.body) if isinstance(s, Loop)]
    assert any(s.lanes == 16 for s in loops) and any(s.block == 16 for s in loops)
    rng = np.random.default_rng(n)
    if fft_type == "rfft":
        x = rng.standard_normal((rows, 2 * n)).astype(np.float32)
        want = np.fft.rfft(x.astype(np.float64))
        parts_in = x
    else:
        x = _complex(rng, (rows, n), np.complex64)
        want = (np.fft.fft if fft_type == "fft" else np.fft.ifft)(x.astype(np.complex128))
        parts_in = x.view(np.float32).reshape(rows, n, 2)
    out = np.zeros(want.shape + (2,), np.float32)
    evaluate(k, [parts_in], [out])
    _close(out[..., 0] + 1j * out[..., 1], want, np.complex64)


@settings(max_examples=30, deadline=None, derandomize=True)
@given(fft_type=st.sampled_from(["fft", "ifft", "rfft", "irfft"]), double=st.booleans(),
       lead=st.lists(st.integers(1, 7), min_size=0, max_size=2), log_n=st.integers(1, 12),
       form=st.sampled_from(["power", "plus one", "times three", "prime", "smooth"]))
def test_random_transforms_match_numpy(fft_type, double, lead, log_n, form):
    """Whatever runs them (the kernel, four steps of it, a split at a power of two,
    Bluestein's convolution, or products), every transform type at random batches and
    lengths (powers of two, their neighbours, three times them, primes) matches NumPy."""
    n = {"power": 1 << log_n, "plus one": (1 << log_n) + 1, "times three": 3 << log_n,
         "prime": (37, 97, 257, 1031, 4099)[log_n % 5],
         "smooth": 2 ** (log_n // 3) * (3, 5, 7, 9, 15, 25, 35, 125)[log_n % 8]}[form]
    shape = (*lead, n)
    rng = np.random.default_rng(n + len(lead))
    real, cplx = (np.float64, np.complex128) if double else (np.float32, np.complex64)
    if fft_type == "rfft":
        x = rng.standard_normal(shape).astype(real)
    elif fft_type == "irfft":
        x = _complex(rng, (*lead, n // 2 + 1), cplx)
    else:
        x = _complex(rng, shape, cplx)
    transform, reference = transform_pair(fft_type, n)
    want = reference(x.astype(np.float64 if fft_type == "rfft" else np.complex128))
    got = fj.function(transform)(x)
    assert got.shape == want.shape
    scale = max(1.0, float(np.abs(want).max()))
    # products by DFT matrices round more than butterflies: a length's worth of terms
    tol = (1e-12 if double else 4e-6) * max(1.0, math.log2(n))
    np.testing.assert_allclose(got, want, rtol=0, atol=tol * scale)


def test_a_leading_axis_the_kernel_takes_is_moved_last_for_it():
    # fft2, rfft2, irfft2 and a transform of a leading axis: the axis transposed last, the
    # kernel, transposed back; before, products by DFT matrices in the rows layout (rfft2 of
    # f32[8, 256, 256] 0.92 ms, now 0.51; fft2 of c64[256, 256] 0.23-0.28 -> 0.14).
    rng = np.random.default_rng(11)
    z = _complex(rng, (64, 96), np.complex64)
    x = rng.standard_normal((4, 64, 96)).astype(np.float32)
    spectrum = np.fft.rfft2(x.astype(np.float64)).astype(np.complex64)
    cases = [(fj.fft.fft2, z, np.fft.fft2(z.astype(np.complex128)), 2),
             (lambda a: fj.fft.ifft(a, axis=0), z, np.fft.ifft(z.astype(np.complex128), axis=0), 1),
             (fj.fft.rfft2, x, np.fft.rfft2(x.astype(np.float64)), 2),
             (lambda s: fj.fft.irfft2(s, s=(64, 96)), spectrum, x, 2)]
    for transform, arg, want, transforms in cases:
        f = fj.function(transform)
        ops = _ops(f, arg)
        assert ops.count("fft") == transforms and "matmul" not in ops, ops
        _close(f(arg), want, np.complex64)
