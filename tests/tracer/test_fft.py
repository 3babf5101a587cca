"""fj.fft, the array API's fft extension: every function against numpy.fft eagerly and compiled
(where the compiled program spells it np.fft.<name>, which must trace as fj.fft.<name>), the
gradients against finite differences in JAX's complex convention (df/dx - i df/dy for a real
loss), and the errors for a bad n, norm, axis or dtype. Checks are batched into a few compiled
programs, so the file runs in seconds."""

from __future__ import annotations

import os

import numpy as np
import pytest

import flowjit as fj
from flowjit.ir.errors import AxisError, FlowjitTypeError, ShapeError
from flowjit.tracer.core import bind
from tests.finite_differences import central_differences
from tests.passes.test_autodiff_complex import fd_grad

RNG = np.random.default_rng(24)
HERE = os.path.basename(__file__)


def _array(shape, dtype):
    x = RNG.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        x = x + 1j * RNG.standard_normal(shape)
    return x.astype(dtype)


# (function, input dtype, input shape, kwargs): odd and even lengths, n shorter and longer than
# the axis, each norm, negative axes, every dtype the function allows.
NORMS = ("backward", "ortho", "forward")
ONE_D = [
    (name, dt, shape, kw)
    for name, dts in (("fft", ("c64", "c128", "f32", "f64")), ("ifft", ("c64", "c128", "f64")),
                      ("rfft", ("f32", "f64")), ("ihfft", ("f32", "f64")),
                      ("irfft", ("c64", "c128")), ("hfft", ("c64", "c128")))
    for dt in dts
    for shape, kw in (((3, 8), {}), ((7,), {"n": 5}), ((3, 6), {"n": 9, "axis": 0}),
                      ((4, 5), {"n": 4, "axis": -2}), ((2, 7), {"n": 10, "axis": -1}))
] + [
    (name, dt, (5, 6), {"norm": norm, "n": n})
    for name, dt in (("fft", "c128"), ("ifft", "c64"), ("rfft", "f64"), ("irfft", "c128"), ("hfft", "c64"),
                     ("ihfft", "f32"))
    for norm in NORMS for n in (7, 8)
]
N_D = [
    (name, dt, shape, kw)
    for name, dts in (("fftn", ("c64", "c128", "f64")), ("ifftn", ("c64", "c128")), ("rfftn", ("f32", "f64")),
                      ("irfftn", ("c64", "c128")))
    for dt in dts
    for shape, kw in (((4, 6), {}), ((3, 4, 5), {"axes": (0, -1), "s": (5, 3)}),
                      ((3, 4, 5), {"axes": (-1, 0)}), ((2, 3, 4), {"axes": (1, 2), "s": (-1, 7)}),
                      ((3, 5), {"s": (4, 6), "axes": (0, 1), "norm": "ortho"}),
                      ((4, 4), {"axes": (1,), "norm": "forward"}))
]
SHIFTS = [(name, "f64", shape, kw) for name in ("fftshift", "ifftshift")
          for shape, kw in (((5,), {}), ((4, 7), {}), ((4, 7), {"axes": 1}), ((3, 4, 5), {"axes": (0, -1)}))]
CASES = ONE_D + N_D + SHIFTS
INPUTS = [_array(shape, {"c64": np.complex64, "c128": np.complex128, "f32": np.float32,
                         "f64": np.float64}[dt]) for _, dt, shape, _ in CASES]


def _tolerance(dtype):
    return {"rtol": 2e-5, "atol": 2e-5} if dtype in (np.complex64, np.float32) else {"rtol": 1e-12, "atol": 1e-12}


def _check(got, want, label):
    assert got.shape == want.shape and got.dtype == want.dtype, (label, got.shape, got.dtype, want.shape, want.dtype)
    np.testing.assert_allclose(got, want, err_msg=label, **_tolerance(want.dtype))


def test_every_function_matches_numpy_eagerly():
    for (name, dt, shape, kw), x in zip(CASES, INPUTS, strict=True):
        _check(np.asarray(getattr(fj.fft, name)(x, **kw)), getattr(np.fft, name)(x, **kw), f"{name} {dt} {kw}")


def test_every_function_matches_numpy_compiled_spelled_as_numpy():
    @fj.function
    def everything(*xs):
        # np.fft.<name> on a traced array reaches fj.fft.<name> (NumPy's __array_function__).
        return tuple(getattr(np.fft, name)(x, **kw) for (name, _, _, kw), x in zip(CASES, xs, strict=True))

    outs = everything(*INPUTS)
    for (name, dt, shape, kw), x, got in zip(CASES, INPUTS, outs, strict=True):
        _check(np.asarray(got), getattr(np.fft, name)(x, **kw), f"compiled {name} {dt} {kw}")
    assert str(everything.ir(*INPUTS)).count("= fft ") == len(CASES) - len(SHIFTS)


def test_frequencies_match_numpy_eager_and_traced():
    for n in (1, 4, 7):
        for d in (1.0, 0.25):
            np.testing.assert_array_equal(fj.fft.fftfreq(n, d), np.fft.fftfreq(n, d))
            np.testing.assert_array_equal(fj.fft.rfftfreq(n, d=d), np.fft.rfftfreq(n, d))
    f32 = fj.fft.fftfreq(6, d=0.5, dtype=fj.float32)
    assert f32.dtype == np.float32 and np.allclose(f32, np.fft.fftfreq(6, 0.5))
    assert fj.fft.rfftfreq(5, dtype="float32", device="cpu").dtype == np.float32

    @fj.function
    def traced(d):  # d traced: the frequencies follow it
        return fj.fft.fftfreq(5, d), fj.fft.rfftfreq(8, d=d)

    a, b = traced(np.float64(0.1))
    np.testing.assert_allclose(a, np.fft.fftfreq(5, 0.1), rtol=1e-15)
    np.testing.assert_allclose(b, np.fft.rfftfreq(8, 0.1), rtol=1e-15)


def test_round_trips_keep_precision():
    x = _array((4, 9), np.float32)
    spec = fj.fft.rfft(x)
    assert spec.dtype == np.complex64
    back = fj.fft.irfft(spec, n=9)
    assert back.dtype == np.float32
    np.testing.assert_allclose(back, x, rtol=1e-5, atol=1e-5)
    z = _array((3, 4, 5), np.complex128)
    np.testing.assert_allclose(fj.fft.ifftn(fj.fft.fftn(z, norm="ortho"), norm="ortho"), z, rtol=1e-13, atol=1e-13)


# ---- gradients -----------------------------------------------------------------------------------

GRADS = [  # (function, input dtype kind, input shape, kwargs)
    ("fft", "c", (3, 5), {"n": 4}),
    ("fft", "c", (4,), {"n": 7, "norm": "ortho"}),
    ("ifft", "c", (2, 6), {"axis": 0, "norm": "forward"}),
    ("fftn", "c", (3, 4), {"axes": (-1, 0), "s": (5, 3)}),
    ("ifftn", "c", (3, 4), {}),
    ("rfft", "r", (2, 6), {}),            # even n: DC and Nyquist are single terms
    ("rfft", "r", (7,), {"n": 5}),        # odd n: only DC is
    ("rfftn", "r", (3, 5), {"norm": "ortho"}),
    ("irfft", "c", (2, 4), {}),           # n = 6, even
    ("irfft", "c", (4,), {"n": 7}),       # odd
    ("irfftn", "c", (3, 4), {"s": (3, 5), "axes": (0, 1)}),
    ("hfft", "c", (5,), {"n": 8, "norm": "forward"}),
    ("ihfft", "r", (6,), {"n": 5}),
    ("fftshift", "c", (3, 5), {}),
]


def _grad_case(k):
    name, kind, shape, kw = GRADS[k]
    rng = np.random.default_rng(k)
    x = rng.standard_normal(shape) + (1j * rng.standard_normal(shape) if kind == "c" else 0)
    out_shape = np.shape(getattr(np.fft, name)(x, **kw))
    w = rng.standard_normal(out_shape) + 1j * rng.standard_normal(out_shape)

    def loss(x):
        return fj.sum(fj.real(w * getattr(fj.fft, name)(x, **kw)))

    def loss_np(x):
        return np.sum(np.real(w * getattr(np.fft, name)(x, **kw)))

    if kind == "c":
        want = fd_grad(loss_np, x)
    else:
        want = central_differences(loss_np, [x], 0)
    return loss, x, want


def test_gradients_match_finite_differences_eagerly_and_compiled():
    cases = [_grad_case(k) for k in range(len(GRADS))]
    for (name, _, _, kw), (loss, x, want) in zip(GRADS, cases, strict=True):
        got = fj.grad(loss)(x)
        assert got.dtype == x.dtype, (name, got.dtype)
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7, err_msg=f"{name} {kw}")

    @fj.function
    def all_grads(*xs):
        return tuple(fj.grad(loss)(x) for (loss, _, _), x in zip(cases, xs, strict=True))

    for (name, _, _, kw), (_, x, want), got in zip(GRADS, cases, all_grads(*[c[1] for c in cases]), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7, err_msg=f"compiled {name} {kw}")


def test_second_derivative_through_rfft():
    # The VJP is ordinary IR: grad of grad works (rfft's transpose is an irfft, and back).
    x = np.random.default_rng(5).standard_normal(6)

    def f(x):
        return fj.sum(fj.abs(fj.fft.rfft(x)) ** 2)   # Parseval: a quadratic form in x

    hvp = fj.grad(lambda x: fj.sum(fj.grad(f)(x) * x))(x)   # (H + H^T) x / ... = 2 H x here
    g = lambda x: fj.grad(f)(x)  # noqa: E731
    eps = 1e-6
    want = np.array([(np.sum(g(x + eps * e) * x) - np.sum(g(x - eps * e) * x)) / (2 * eps) for e in np.eye(6)])
    np.testing.assert_allclose(hvp, want + g(x), rtol=1e-5, atol=1e-6)


# ---- errors ---------------------------------------------------------------------------------------


def _raises(exc, fn, pattern):
    """fn() raises exc naming the pattern and this file's line, eagerly and inside fj.function."""
    with pytest.raises(exc, match=pattern) as e:
        fn(np.ones((4, 6), np.complex128))
    assert HERE in str(e.value), str(e.value)
    with pytest.raises(exc, match=pattern) as e:
        fj.function(fn)(np.ones((4, 6), np.complex128))
    assert HERE in str(e.value), str(e.value)


def test_bad_arguments_name_the_function_the_argument_and_what_is_allowed():
    _raises(ShapeError, lambda x: fj.fft.fft(x, n=0), r"fft\.fft: n=0 .*allowed: an int >= 1")
    _raises(ShapeError, lambda x: fj.fft.ifft(x, n=-3), r"fft\.ifft: n=-3 .*allowed: an int >= 1")
    _raises(ShapeError, lambda x: fj.fft.irfft(x[:, :1]), r"fft\.irfft: n \(2 \* \(m - 1\).*=0")
    _raises(ShapeError, lambda x: fj.fft.fft(x, norm="unitary"),
            r"fft\.fft: norm='unitary' .*allowed: 'backward' \(the default\), 'ortho', 'forward'")
    _raises(AxisError, lambda x: fj.fft.hfft(x, axis=2), r"fft\.hfft: axis=2 .*rank 2; allowed: -2 to 1")
    _raises(AxisError, lambda x: fj.fft.fftn(x, axes=(0, -3)), r"fft\.fftn: axes=-3 .*allowed: -2 to 1")
    _raises(ShapeError, lambda x: fj.fft.ifftn(x, axes=(1, -1)), r"fft\.ifftn: axes=\(1, -1\) repeats an axis")
    _raises(ShapeError, lambda x: fj.fft.fftn(x, s=(3, 4), axes=(0,)), r"fft\.fftn: s=\(3, 4\) and axes=\(0,\)")
    _raises(ShapeError, lambda x: fj.fft.irfftn(x, s=(0, 4), axes=(0, 1)), r"fft\.irfftn: s=0")
    _raises(FlowjitTypeError, lambda x: fj.fft.rfft(x), r"fft\.rfft: x has dtype complex128; allowed: a real")
    _raises(FlowjitTypeError, lambda x: fj.fft.ihfft(x), r"fft\.ihfft: x has dtype complex128")
    _raises(FlowjitTypeError, lambda x: fj.fft.fft(x, n=2.5), r"fft\.fft: n must be an integer, got 2.5")
    with pytest.raises(FlowjitTypeError, match=r"fft\.fftfreq: dtype=int32 is not allowed; allowed: a real floating"):
        fj.fft.fftfreq(4, dtype=fj.int32)
    with pytest.raises(ShapeError, match=r"fft\.rfftfreq: n=0"):
        fj.fft.rfftfreq(0)


def test_the_primitive_checks_its_input():
    with pytest.raises(ShapeError, match=r"fft: fft takes a complex input"):
        bind("fft", [np.ones(4)], {"fft_type": "fft", "fft_lengths": (4,)})
    with pytest.raises(ShapeError, match=r"fft: the trailing axes of c128\[3,5\] must be \(3, 3\) \(fft_lengths"):
        bind("fft", [np.ones((3, 5), np.complex128)], {"fft_type": "irfft", "fft_lengths": (3, 5)})
    with pytest.raises(ShapeError, match=r"fft: fft_type 'dct' must be one of fft, ifft, rfft, irfft"):
        bind("fft", [np.ones(4, np.complex64)], {"fft_type": "dct", "fft_lengths": (4,)})


def test_numpys_two_dimensional_spellings():
    x = np.random.default_rng(5).standard_normal((3, 4, 6))
    z = x + 1j * x[::-1]
    f = fj.function(lambda x, z: (np.fft.fft2(z), np.fft.ifft2(z, s=(5, 3)), np.fft.rfft2(x, axes=(0, 2)),
                                  np.fft.irfft2(z, norm="ortho")))
    want = (np.fft.fft2(z), np.fft.ifft2(z, s=(5, 3)), np.fft.rfft2(x, axes=(0, 2)), np.fft.irfft2(z, norm="ortho"))
    for got in (f(x, z), (fj.fft.fft2(z), fj.fft.ifft2(z, s=(5, 3)), fj.fft.rfft2(x, axes=(0, 2)),
                          fj.fft.irfft2(z, norm="ortho"))):
        for g, w in zip(got, want, strict=True):
            assert g.dtype == w.dtype and g.shape == w.shape
            np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)


def test_transforms_run_in_the_native_program_and_ahead_of_time(tmp_path):
    # The fft primitive decomposes into DFT-matrix products, twiddles and transposes (radix
    # levels, Bluestein's for a prime above the radix): one native program, compiled ahead of
    # time too, with a spectral loss's gradient through rfft and irfft.
    x = _array((3, 74), np.float32)
    z = _array((2, 5, 37), np.complex64)

    def spectra(x, z):
        s = fj.fft.rfft(x)
        return s, fj.fft.irfft(s * 2, n=74), fj.fft.fftn(z, axes=(1, 2)), fj.fft.ifft(z, axis=-1)

    want = (np.fft.rfft(x), np.fft.irfft(np.fft.rfft(x) * 2, n=74), np.fft.fftn(z, axes=(1, 2)),
            np.fft.ifft(z, axis=-1))
    f = fj.function(spectra)
    for got, w in zip(f(x, z), want):
        np.testing.assert_allclose(got, w, rtol=2e-5, atol=2e-5 * np.abs(w).max())
    assert fj.explain(f, x, z, run=True).driver == "one native call (the whole program)"
    power = fj.grad(lambda x: (fj.abs(fj.fft.rfft(x)) ** 2).sum())
    loss = fj.function(power)
    np.testing.assert_allclose(loss(x), fj.function(power, interpret=True)(x), rtol=1e-4, atol=1e-3)
    assert fj.explain(loss, x, run=True).driver == "one native call (the whole program)"
    fj.export(spectra, x, z, path=tmp_path)
    for got, w in zip(fj.load_compiled(tmp_path)(x, z), want):
        np.testing.assert_allclose(got, w, rtol=2e-5, atol=2e-5 * np.abs(w).max())
