"""Polynomials, windows and bits (flowjit.tracer.numpy.polynomials) against NumPy eagerly,
compiled and as NumPy's own functions on traced arrays; where NumPy's result depends on the
values (roots, polydiv's remainder, trim_zeros), the traced forms and their errors; gradients
against jax.numpy's and SciPy's i1."""

from __future__ import annotations

import numpy as np
import pytest

import flowjit as fj
from flowjit.ir.errors import FlowjitError
from tests.numpy_agreement import agree

RNG = np.random.default_rng(11)
P = RNG.normal(size=5)
X = RNG.normal(size=7)
PI = np.array([3, -2, 0, 5], np.int32)
Y2 = RNG.normal(size=(7, 2))
W = RNG.uniform(0.5, 2.0, size=7)
A = RNG.normal(size=(4, 4))
C = np.array([3 + 1j, 1 + 2j, 1 + 1j, 2 - 1j, np.nan, 1 + np.nan * 1j, 1 - 1j, -0.5 + 0j])
SP = np.array([0.0, -0.0, 1.0, -1.0, 3.5, -1e300, np.inf, -np.inf, np.nan, 5e-324, np.finfo(float).max])
H16 = np.array([0, -0.0, 1, 3, -1, -3, 65504, -65504, 6e-8, 1e-5, -2 ** -14, 1000, np.inf, np.nan], np.float16)
BITS = RNG.integers(0, 2, size=(3, 11))
BYTES = RNG.integers(0, 256, size=(2, 3)).astype(np.uint8)
XS = np.concatenate([np.linspace(-30, 30, 37), [8.0, -8.0, 7.75, 8.25, 0.0, 1e-300, 700.0, np.nan, np.inf]])



def _arithmetic(m, p, x, pi):
    p32, x32 = p.astype(np.float32), x.astype(np.float32)
    return (m.polyval(p, x), m.polyval(pi, x32), m.polyval(p32, x32), m.polyval(pi, pi), m.polyval(p32, 2.0),
            m.polyadd(p, x), m.polyadd(pi, p32[:2]), m.polysub(x[:2], p), m.polysub(pi, pi[:3]),
            m.polymul(p, x), m.polymul(pi, pi[:2]), m.polymul(p32, x32[:3]),
            m.polyder(p), m.polyder(p, 2), m.polyder(p, 0), m.polyder(p, 7), m.polyder(pi), m.polyder(p32, 2),
            m.polyint(p), m.polyint(pi, 2, k=5.0), m.polyint(p, 3, k=[1.0, 2.0, 3.0]), m.polyint(p32, 0),
            m.polyint(pi))


def _fits(m, x, y, y2, w, a, pi):
    c, cov = m.polyfit(x, y2, 2, cov=True)
    return (m.poly(x), m.poly(pi), m.poly(a), m.poly(x.astype(np.float32)),
            m.polyfit(x, y, 3), m.polyfit(x, y, 2, w=w), m.polyfit(x, y2, 1), m.polyfit(x.astype(np.float32),
                                                                                       y.astype(np.float32), 2),
            c, cov, *m.polyfit(x, y, 2, full=True)[:2], m.polyfit(x, y, 2, cov="unscaled")[1])


def _utilities(m, c, sp, h16, bits, by, a3):
    out = [m.sort_complex(c), m.sort_complex(c.real.astype(np.float32)), m.sort_complex(bits.astype(np.int8)),
           m.sort_complex(c.reshape(2, 4)), m.resize(bits, (4, 9)), m.resize(c, 3), m.resize(by[:0], (2, 2)),
           m.spacing(sp), m.spacing(sp.astype(np.float32)), m.spacing(h16), m.spacing(bits.astype(np.int8) - 1),
           m.spacing(bits.astype(np.int16)), m.apply_over_axes(m.sum, a3, [0, 2]), m.apply_over_axes(m.mean, a3, -1)]
    for axis in (None, 0, 1):
        for order in ("big", "little"):
            out += [m.packbits(bits, axis=axis, bitorder=order), m.packbits(bits > 0, axis=axis, bitorder=order)]
            for count in (None, 3, -2, 30):
                out.append(m.unpackbits(by, axis=axis, count=count, bitorder=order))
    return tuple(out)


def _bessel(m, x):
    return (m.i0(x), m.i0(x.astype(np.float32)), m.i0(np.array([0, 3, -7, 12], np.int64)),
            m.i0(np.array([0.5, 9.0], np.float16)), m.i0(2.5))


A3 = RNG.integers(-5, 5, size=(2, 3, 4))
FAMILIES = [(_arithmetic, (P, X, PI), False), (_fits, (X, P[0] + X ** 2, Y2, W, A, PI), False),
            (_utilities, (C, SP, H16, BITS, BYTES, A3), True), (_bessel, (XS,), False)]


@pytest.mark.parametrize("family,args,exact", FAMILIES, ids=lambda f: getattr(f, "__name__", ""))
def test_match_numpy(family, args, exact):
    with np.errstate(invalid="ignore", over="ignore"):
        want = family(np, *args)
        agree(family(fj, *args), want, f"{family.__name__} eager", exact=exact or family is _bessel)
        agree(fj.function(lambda *a: family(fj, *a))(*args), want, f"{family.__name__} compiled", exact=exact)
        agree(fj.function(lambda *a: family(np, *a))(*args), want, f"{family.__name__} as np.*", exact=exact)


def test_windows_match_numpy():
    def windows(m, beta):
        return (*(getattr(m, name)(n) for name in ("bartlett", "blackman", "hamming", "hanning")
                  for n in (0, 1, 2, 5, 8, 7.0)), m.kaiser(9, beta), m.kaiser(1, beta), m.kaiser(0, beta),
                m.kaiser(6, 14.0))
    want = windows(np, 3.5)
    agree(windows(fj, 3.5), want, "windows eager", exact=False)
    agree(fj.function(lambda b: windows(fj, b))(3.5), want, "windows compiled", exact=False)
    agree([fj.function(lambda b: fj.kaiser(10, b))(np.float32(2.0))], [np.kaiser(10, np.float32(2.0))], "kaiser f32")


def test_polydiv_roots_and_poly_where_numpy_reads_the_values():
    u, v = np.array([1.0, -3, 0, 2, 5]), np.array([2.0, 1, -1])
    for a, b in ((u, v), (u.astype(np.int32), v), (u.astype(np.float32), v.astype(np.float32)), (v, u),
                 (np.array([1.0, 2, 1]), np.array([1.0, 1]))):
        q, r = np.polydiv(a, b)
        agree(fj.polydiv(a, b), (q, r), "polydiv eager", exact=False)
        fq, fr = fj.function(fj.polydiv)(a, b)                  # traced: JAX's untrimmed remainder
        agree([fq], [q], "polydiv compiled q", exact=False)
        assert fr.shape == np.atleast_1d(a).shape and fr.dtype == r.dtype
        np.testing.assert_allclose(fr[len(fr) - len(r):], r, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(fr[:len(fr) - len(r)], 0, atol=1e-6)
        np.testing.assert_array_equal(fj.polydiv(a, b, trim_leading_zeros=False)[1].shape, fr.shape)
    for p in (np.array([0, 0, 1.0, -3, 2, 0]), np.array([1.0, 0, 1]), np.array([2, -3, 1]), P, np.zeros(3),
              np.array([0, 5, 0]), np.array([1.0 + 1j, 2, 3]), np.array([1.0, -6, 11, -6], np.float32)):
        want, got = np.roots(p), fj.roots(p)
        assert np.asarray(got).dtype == want.dtype and got.shape == want.shape, (p, got, want)
        np.testing.assert_allclose(np.sort_complex(got), np.sort_complex(want), rtol=1e-5, atol=1e-12)
    got = fj.function(lambda p: fj.roots(p, strip_zeros=False))(P)
    assert got.dtype == np.complex128 and got.shape == (4,)
    np.testing.assert_allclose(np.sort_complex(got), np.sort_complex(np.roots(P)), rtol=1e-12)
    assert fj.roots(np.array([3.0]), strip_zeros=False).shape == (0,)
    z = np.array([1 + 2j, 1 - 2j, 3])
    assert fj.poly(z).dtype == np.float64 and fj.poly(z[:2] * 1j).dtype == np.complex128   # as NumPy's
    np.testing.assert_allclose(fj.function(fj.poly)(z), np.poly(z))                     # JAX's: stays complex
    assert fj.function(fj.poly)(z).dtype == np.complex128 and fj.poly(np.array([])) == 1.0


def test_trim_zeros_fromfunction_and_the_rank_warning():
    a = np.array([0, 0, 3, 0, 4, 0])
    b = np.zeros((4, 5))
    b[1, 2], b[2, 3] = 1, 2
    for args in ((a,), (a, "f"), (a, "B"), (b,), (b, "fb", -1), (np.zeros(3),)):
        np.testing.assert_array_equal(fj.trim_zeros(*args), np.trim_zeros(*args))
    f = lambda i, j, k=1: i * 10 + j * k  # noqa: E731
    for got in (fj.fromfunction(f, (3, 4), k=2), fj.function(lambda: fj.fromfunction(f, (3, 4), k=2))()):
        agree([got], [np.fromfunction(f, (3, 4), k=2)], "fromfunction")
    agree([fj.fromfunction(f, (2, 2), dtype=np.int32)], [np.fromfunction(f, (2, 2), dtype=np.int32)], "int")
    with pytest.warns(np.exceptions.RankWarning, match="poorly conditioned"):
        fj.polyfit(np.ones(5), X[:5], 2)


@pytest.fixture
def jax_x64():
    jax = pytest.importorskip("jax")
    was = jax.config.read("jax_enable_x64")
    jax.config.update("jax_enable_x64", True)
    yield jax
    jax.config.update("jax_enable_x64", was)


def test_gradients_match_jax(jax_x64):
    # (i0 and kaiser: against SciPy's i1 and finite differences below, faster than compiling JAX's)
    jax = jax_x64
    weights = np.arange(1.0, 5.0)
    cases = [
        (lambda m, p, x: (m.polyval(p, x) * x).sum(), (P, X)),
        (lambda m, z: (m.poly(z) * weights).sum(), (X[:3],)),
        (lambda m, u, v: sum((r * np.arange(1.0, r.size + 1)).sum() for r in m.polydiv(u, v)), (P, X[:3])),
        (lambda m, p, k: (m.polyint(m.polyder(p, 1), 2, k=k) ** 2).sum(), (P, np.array([1.0, 2.0]))),
    ]
    for f, args in cases:
        argnums = tuple(range(len(args)))
        want = jax.grad(lambda *a: f(jax.numpy, *a), argnums=argnums)(*args)
        for got in (fj.grad(lambda *a: f(fj, *a), argnums=argnums)(*args),
                    fj.function(fj.grad(lambda *a: f(fj, *a), argnums=argnums))(*args)):
            for g, w in zip(got, want):
                np.testing.assert_allclose(g, w, rtol=1e-9, atol=1e-12)


def _central_differences(f, x, h=1e-6):
    out = np.zeros_like(x)
    for i in range(x.size):
        e = np.zeros_like(x)
        e.flat[i] = h
        out.flat[i] = (f(x + e) - f(x - e)) / (2 * h)
    return out


def test_polyfit_gradients_match_finite_differences():
    # (jax.grad of jnp.polyfit fails in its SVD's derivative here, so central differences)
    weights = np.arange(1.0, 5.0)
    y = P[0] + X ** 2 + 0.1 * X ** 5
    cases = [(lambda y: (fj.polyfit(X, y, 3) * weights).sum(), y, 1e-9),     # linear in y
             (lambda y: (fj.polyfit(X, fj.stack([y, y ** 2], axis=1), 2, w=W) ** 2).sum(), y, 1e-6),
             (lambda w: (fj.polyfit(X, y, 2, w=w) ** 2).sum(), W, 1e-6)]
    for f, x, tol in cases:
        want = _central_differences(lambda v: float(f(v)), x)
        np.testing.assert_allclose(fj.grad(f)(x), want, rtol=tol, atol=tol)
        np.testing.assert_allclose(fj.function(fj.grad(f))(x), want, rtol=tol, atol=tol)


def test_the_derivative_of_i0_is_i1_to_a_few_ulps():
    special = pytest.importorskip("scipy.special")
    x = np.concatenate([np.linspace(-40, 40, 161), [1e-8, -1e-3, 7.999, 8.0, 8.001, 100.0, 600.0, 0.0]])
    got = fj.function(fj.grad(lambda x: fj.sum(fj.i0(x))))(x)
    want = special.i1(x)
    assert (np.abs(got - want) <= 4 * np.spacing(np.abs(want))).all()
    assert abs(fj.grad(fj.grad(fj.i0))(0.0) - 0.5) < 1e-15    # I1'(0) = 1/2
    kaiser = fj.function(fj.jacfwd(lambda b: fj.kaiser(7, b)))   # d window / d beta, each point
    for beta in (0.5, 3.5, 12.0):
        want = (np.kaiser(7, beta + 1e-6) - np.kaiser(7, beta - 1e-6)) / 2e-6
        np.testing.assert_allclose(kaiser(beta), want, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(fj.grad(lambda b: fj.sum(fj.kaiser(7, b) * np.arange(7.0)))(3.5),
                               (np.kaiser(7, 3.5 + 1e-6) - np.kaiser(7, 3.5 - 1e-6)) / 2e-6 @ np.arange(7.0), rtol=1e-7)


def test_refusals_name_the_function_and_the_line():
    traced = [
        (lambda p: fj.trim_zeros(p), r"trim_zeros on a traced array \(f64\[5\]\).*depends on the data"),
        (lambda p: fj.roots(p), r"roots on a traced array.*Pass strip_zeros=False"),
        (lambda p: fj.polydiv(p, p[:2], trim_leading_zeros=True), r"polydiv\(\.\.\., trim_leading_zeros=True\) on "
         r"traced arrays"),
        (lambda p: fj.poly(fj.reshape(p[:4], (2, 2))[:, :1]), r"poly: seq_of_zeros must be a 1-D array of roots or a "
         r"non-empty square matrix, got shape \[2, 1\]"),
        (lambda p: fj.polyder(p, -1), r"polyder: the order of the derivative m=-1 must be non-negative"),
        (lambda p: fj.polyint(p, 3, k=[1.0, 2.0]), r"polyint: k has 2 values for m=3"),
        (lambda p: fj.polyval(p[0], p), r"polyval: p must be at least 1-D"),
        (lambda p: fj.polyadd(fj.reshape(p[:4], (2, 2)), p), r"polyadd: a1 must be a 1-D array of coefficients"),
        (lambda p: fj.polyfit(p, p[:3], 1), r"polyfit: x of length 5 and y of shape \[3\]"),
        (lambda p: fj.polyfit(p, p, -1), r"polyfit: deg=-1: expected deg >= 0"),
        (lambda p: fj.polyfit(p, p, 4, cov=True), r"polyfit: 5 points for deg=4"),
        (lambda p: fj.packbits(p), r"packbits: a must be an integer or boolean array, got f64\[5\]"),
        (lambda p: fj.unpackbits(fj.astype(p, fj.int32)), r"unpackbits: a must be an array of unsigned bytes"),
        (lambda p: fj.unpackbits(fj.astype(p, fj.uint8), count=-41), r"unpackbits: count=-41 removes more"),
        (lambda p: fj.packbits(fj.astype(p, fj.int8), bitorder="middle"), r"packbits: bitorder='middle'"),
        (lambda p: fj.i0(p * 1j), r"i0: complex x is not supported"),
        (lambda p: fj.kaiser(p[0], 2.0), r"kaiser: M must be a static Python number"),
        (lambda p: fj.kaiser(4, p), r"kaiser: beta must be a scalar"),
        (lambda p: fj.resize(p, (2, -1)), r"resize: new_shape=\(2, -1\): all elements of new_shape must be"),
        (lambda p: fj.sort_complex(p[0]), r"sort_complex: a is 0-d"),
        (lambda p: fj.apply_over_axes(lambda a, ax: fj.sum(a), fj.reshape(p[:4], (2, 2)), 0),
         r"apply_over_axes: func returned an array of rank 0 for axis 0"),
        (lambda p: fj.trim_zeros(p, trim="x"), r"trim_zeros: trim='x'"),
    ]
    for fn, message in traced:
        with pytest.raises(FlowjitError, match=message) as info:
            fj.function(fn)(P)
        assert "test_numpy_polynomials.py:" in str(info.value), str(info.value)
