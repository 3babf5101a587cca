"""Functions of sampled sequences (flowjit.tracer.numpy.sequences: interp, trapezoid, ediff1d,
convolve, correlate, vdot) against NumPy eagerly, compiled and as NumPy's own functions on
traced arrays; their gradients against jax.numpy's."""

from __future__ import annotations

import numpy as np
import pytest

import flowjit as fj
from flowjit.ir.errors import FlowjitError
from tests.numpy_agreement import agree

RNG = np.random.default_rng(3)
XP = np.sort(RNG.uniform(-3, 3, size=8))
FP = RNG.normal(size=8)
XQ = np.concatenate([RNG.uniform(-4, 4, size=20), XP[:3], [np.nan, XP[-1], XP[0]]])
Y = RNG.normal(size=(3, 6))
YI = RNG.integers(-9, 9, size=(3, 6))
C = RNG.normal(size=5) + 1j * RNG.normal(size=5)


def _interpolation(m, x, xp, fp):
    fp_inf = np.where(np.arange(8) == 3, np.inf, fp)
    return (m.interp(x, xp, fp), m.interp(x, xp, fp, left=-9.0, right=9.0), m.interp(x, xp, fp, period=2.5),
            m.interp(x, xp, fp_inf), m.interp(x.astype(np.float32), xp, fp.astype(np.float32)),
            m.interp(x, xp[:1], fp[:1]),
            m.interp(x[:3], np.array([0.0, 1.0, 1.0, 2.0]), np.array([1.0, 2.0, 3.0, 4.0])))


def _integration(m, y, yi):
    return (m.trapezoid(y), m.trapezoid(y, dx=0.3, axis=0), m.trapezoid(y, x=np.arange(6.0) ** 2),
            m.trapezoid(y, x=np.cumsum(np.abs(y), axis=1), axis=1), m.trapezoid(yi), m.ediff1d(y),
            m.ediff1d(yi, to_begin=[-1, -2], to_end=7), m.ediff1d(y[0], to_end=np.array([1.5])))


def _convolution(m, y, yi, c):
    out = []
    for mode in ("full", "same", "valid"):
        out += [m.convolve(y[0], y[1, :3], mode), m.convolve(y[1, :2], y[2], mode), m.convolve(y[0], y[1], mode),
                m.correlate(y[0], y[1, :3], mode), m.correlate(y[0, :4], y[2], mode),
                m.convolve(yi[0], yi[1, :2], mode), m.correlate(c, c[:3], mode), m.correlate(c[:2], c, mode)]
    return (*out, m.vdot(y, yi), m.vdot(y[0], y[1]), m.vdot(c, c[::-1]), m.vdot(yi, yi))


@pytest.mark.parametrize("family,args,exact", [
    (_interpolation, (XQ, XP, FP), True), (_integration, (Y, YI), False), (_convolution, (Y, YI, C), False)])
def test_match_numpy(family, args, exact):
    want = family(np, *args)
    agree(family(fj, *args), want, f"{family.__name__} eager", exact=exact)
    agree(fj.function(lambda *a: family(fj, *a))(*args), want, f"{family.__name__} compiled", exact=exact)
    agree(fj.function(lambda *a: family(np, *a))(*args), want, f"{family.__name__} as np.*", exact=exact)


def test_gradients_match_jax():
    jax = pytest.importorskip("jax")
    was = jax.config.read("jax_enable_x64")
    jax.config.update("jax_enable_x64", True)
    try:
        x = RNG.uniform(-2.5, 2.5, size=6)   # off the sample points, where both are smooth
        cases = [
            (lambda m, x, xp, fp: (m.interp(x, xp, fp) * np.arange(1.0, 7.0)).sum(), (x, XP, FP), (0, 1, 2)),
            (lambda m, a, b: m.vdot(a, b) + m.vdot(a[0], b[1]), (Y, Y[::-1]), (0, 1)),
            (lambda m, a, b: (m.convolve(a, b) * np.arange(8.0)).sum() + (m.correlate(a, b, "same") ** 2).sum(),
             (Y[0], Y[1, :3]), (0, 1)),
            (lambda m, y, x: m.trapezoid(y * y, x=x), (Y[0], np.cumsum(np.abs(Y[1]))), (0, 1)),
        ]
        for f, args, argnums in cases:
            for k in argnums:
                want = jax.grad(lambda *a: f(jax.numpy, *a), argnums=k)(*args)
                got = fj.grad(lambda *a: f(fj, *a), argnums=k)(*args)
                np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
        f, args, _ = cases[0]
        np.testing.assert_allclose(fj.function(fj.grad(lambda *a: f(fj, *a)))(*args),
                                   jax.grad(lambda *a: f(jax.numpy, *a))(*args), rtol=1e-10, atol=1e-12)
    finally:
        jax.config.update("jax_enable_x64", was)


def test_bad_arguments_name_the_function_and_the_line():
    cases = [
        (lambda y: fj.interp(y, y[0], y[1, :3]), r"interp: fp and xp are not of the same length"),
        (lambda y: fj.interp(y, y[0], y[1] * 1j), r"interp: complex fp is not supported"),
        (lambda y: fj.interp(y, y[0], y[1], period=0), r"interp: period must be a non-zero value"),
        (lambda y: fj.convolve(y, y[0]), r"convolve: a and v must be 1-D"),
        (lambda y: fj.correlate(y[0], y[1], mode="wide"), r"correlate: mode='wide'"),
        (lambda y: fj.vdot(y, y[0]), r"vdot: a of shape \[3, 6\] and b of shape \[6\]"),
        (lambda y: fj.trapezoid(y, x=y[0, :4]), r"trapezoid: x of length 4 for y's axis 1 of length 6"),
        (lambda y: fj.ediff1d(y > 0), r"ediff1d: bools have no difference"),
    ]
    for fn, message in cases:
        with pytest.raises(FlowjitError, match=message) as info:
            fj.function(fn)(Y)
        assert "test_sequences.py:" in str(info.value), str(info.value)
