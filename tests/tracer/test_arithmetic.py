"""Arithmetic composites (flowjit.tracer.numpy.arithmetic: fmod, divmod, modf, float_power,
ldexp, frexp, gcd, lcm, around) and truth tests (flowjit.tracer.numpy.logic: isin, array_equal,
array_equiv, isposinf, isneginf) against NumPy bit for bit, eagerly, compiled and as NumPy's
own functions on traced arrays, special values and every float dtype included."""

from __future__ import annotations

import numpy as np
import pytest

import flowjit as fj
from flowjit.ir.errors import FlowjitError
from tests.numpy_agreement import agree

RNG = np.random.default_rng(5)
SPECIAL = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 5e-324, -3e-310, 1.7e308, 2.0 ** -1022, 1.0, 0.5, 2.0 ** 1023])
X = np.concatenate([RNG.normal(size=20) * 10, SPECIAL])
Y = np.concatenate([RNG.normal(size=20) * 3, [1.0, 2.0, 3.0, -2.0, 1.5, 1.0, 2.0, 0.0, np.inf, -np.inf, np.nan, 7.0]])
K = np.resize(np.array([0, 1, -1, 5, -1074, -1080, 1023, 1024, 2000, -2000, -149, -126, 127, 128, -20, 20]), X.size)
XI = RNG.integers(-50, 50, size=24)
YI = RNG.integers(-20, 20, size=24)


def _floats(m, x, y, k):
    out = []
    for d in (np.float64, np.float32, np.float16):
        xd, yd = x.astype(d), y.astype(d)
        out += [m.fmod(xd, yd), *m.frexp(xd), m.ldexp(xd, k), *m.divmod(xd, yd), *m.modf(xd)]
    return (*out, m.ldexp(np.full(4, 1.5), np.array([-1074, -1075, -1022, 1024])),
            m.ldexp(np.full(2, 1.5, np.float32), np.array([-149, -150])), m.ldexp(np.arange(3), 2),
            *m.frexp(np.arange(-2, 3)), *m.modf(np.arange(-2, 3)), m.float_power(x, 2),
            m.float_power(x.astype(np.float32), -1), m.float_power(np.arange(1, 4), -2), m.around(x, 1),
            m.around(x.astype(np.float32)), m.isposinf(x), m.isneginf(x), m.isposinf(k))


def _integers(m, xi, yi):
    out = []
    for d in (np.int64, np.int32, np.int16, np.int8, np.uint8):
        a, b = xi.astype(d), yi.astype(d)
        out += [m.fmod(a, b), m.gcd(a, b), m.lcm(a, b)]
    return (*out, m.gcd(xi, 12), m.lcm(np.int64(4), yi), m.gcd(0, 0), m.fmod(xi > 0, yi > 0), *m.divmod(xi, yi))


def _logic(m, x, xi, yi):
    r = np.round(x[:20])
    return (m.isin(xi, yi), m.isin(xi, yi, invert=True), m.isin(r, np.array([1.0, -2.0, np.nan, 7.0])),
            m.isin(xi.reshape(4, 6), yi[:5].reshape(5, 1)), m.isin(xi, yi, kind="sort"), m.isin(r, xi),
            m.isin(x, []), m.array_equal(x, x), m.array_equal(x, x, equal_nan=True), m.array_equal(xi, yi),
            m.array_equal(xi, xi[:3]), m.array_equal(xi, xi.astype(np.float32)),
            m.array_equiv(xi[:6], np.tile(xi[:6], 2).reshape(2, 6)), m.array_equiv(xi, xi[:3]),
            m.array_equiv(xi[0], xi[:1]))


@pytest.mark.parametrize("family,args", [(_floats, (X, Y, K)), (_integers, (XI, YI)), (_logic, (X, XI, YI))])
def test_match_numpy_bit_for_bit(family, args):
    with np.errstate(all="ignore"):   # NumPy's overflow warnings (casting the specials to float16...)
        want = family(np, *args)
        agree(family(fj, *args), want, f"{family.__name__} eager", signed_zeros=True)
        agree(fj.function(lambda *a: family(fj, *a))(*args), want, f"{family.__name__} compiled", signed_zeros=True)
        agree(fj.function(lambda *a: family(np, *a))(*args), want, f"{family.__name__} as np.*", signed_zeros=True)


def test_isin_sorts_large_inputs():
    """Past 2**16 pairs isin sorts the test elements and binary-searches them: the same answer."""
    e = RNG.integers(0, 5000, size=400)
    t = RNG.integers(0, 5000, size=300).astype(np.float64)
    t[::7] = np.nan
    got = fj.function(lambda e, t: (fj.isin(e, t), fj.isin(e, t, invert=True)))(e, t)
    np.testing.assert_array_equal(got[0], np.isin(e, t))
    np.testing.assert_array_equal(got[1], np.isin(e, t, invert=True))


def test_fmod_gradient_matches_jax():
    jax = pytest.importorskip("jax")
    x, y = X[:20], Y[:20]

    def f(m, x, y):
        return (m.fmod(x, y) * np.arange(20.0)).sum()

    for argnum in (0, 1):
        want = jax.grad(lambda *a: f(jax.numpy, *a), argnums=argnum)(x.astype(np.float32), y.astype(np.float32))
        got = fj.grad(lambda *a: f(fj, *a), argnums=argnum)(x.astype(np.float32), y.astype(np.float32))
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_bad_arguments_name_the_function_and_the_line():
    cases = [
        (lambda x, i: fj.gcd(x, i), r"gcd: the arguments must be integers, got float64"),
        (lambda x, i: fj.ldexp(x, x), r"ldexp: x2 must be integers"),
        (lambda x, i: fj.isin(x, i, kind="table"), r"isin: kind='table'"),
        (lambda x, i: fj.frexp(x * 1j), r"frexp: complex numbers have no frexp"),
    ]
    for fn, message in cases:
        with pytest.raises(FlowjitError, match=message) as info:
            fj.function(fn)(X, XI)
        assert "test_arithmetic.py:" in str(info.value), str(info.value)
