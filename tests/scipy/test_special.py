"""fj.scipy.special against scipy.special (values, eager and compiled), its first and second
derivatives against central finite differences, jax.scipy.special where JAX has the function,
the incomplete gamma functions' derivative in their order, and the refused derivative with
respect to the other order parameters."""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
import scipy.special as ss

import flowjit as fj
from flowjit.ir.errors import AutodiffError, ShapeError
from flowjit.ir.primitives.special import POLYGAMMA_MAX_ORDER, _polygamma_series
from flowjit.ir.registry import get
from tests.registry.cases_special import gammainc_order_derivative

S = fj.scipy.special
EPS = 1e-6
X = np.linspace(0.35, 3.7, 7)  # inside every unary function's domain below, after the maps
UNIT = np.linspace(-0.9, 0.9, 7)

# name -> (fj function, scipy function, argument)
UNARY = {
    "gammaln": (S.gammaln, ss.gammaln, X),
    "digamma": (S.digamma, ss.digamma, X),
    "psi": (S.psi, ss.psi, X),
    "gamma": (S.gamma, ss.gamma, X),
    "rgamma": (S.rgamma, ss.rgamma, X),
    "erf": (S.erf, ss.erf, UNIT * 3),
    "erfc": (S.erfc, ss.erfc, UNIT * 3),
    "erfinv": (S.erfinv, ss.erfinv, UNIT),
    "erfcinv": (S.erfcinv, ss.erfcinv, UNIT + 1),
    "ndtr": (S.ndtr, ss.ndtr, UNIT * 4),
    "ndtri": (S.ndtri, ss.ndtri, (UNIT + 1) / 2),
    "log_ndtr": (S.log_ndtr, ss.log_ndtr, np.linspace(-9, 5, 7)),
    "logit": (S.logit, ss.logit, (UNIT + 1) / 2),
    "expit": (S.expit, ss.expit, UNIT * 5),
    "entr": (S.entr, ss.entr, X),
    "j0": (S.j0, ss.j0, X * 5),
    "j1": (S.j1, ss.j1, X * 5),
    "y0": (S.y0, ss.y0, X * 5),
    "y1": (S.y1, ss.y1, X * 5),
    "i0": (S.i0, ss.i0, X * 5),
    "i1": (S.i1, ss.i1, X * 5),
    "i0e": (S.i0e, ss.i0e, UNIT * 8 + 0.3),  # away from the kink of exp(-|x|) at 0
    "i1e": (S.i1e, ss.i1e, X * 5),
    "factorial": (S.factorial, lambda n: ss.factorial(n, exact=False), X),
}
# Functions with orders, differentiated in x (the last argument): (fj, scipy, orders, x).
ORDERED = {
    "gammainc": (S.gammainc, ss.gammainc, (1.7,), X),
    "gammaincc": (S.gammaincc, ss.gammaincc, (3,), X),
    "betainc": (S.betainc, ss.betainc, (1.3, 2.6), (UNIT + 1) / 2),
    "polygamma": (S.polygamma, ss.polygamma, (2,), X),
    "jn": (S.jn, ss.jn, (2,), X * 5),
    "yn": (S.yn, ss.yn, (3,), X * 5),
    "jv": (S.jv, ss.jv, (1.5,), X * 5),
    "yv": (S.yv, ss.yv, (0.5,), X * 5),
    "iv": (S.iv, ss.iv, (2.5,), X * 5),
    "ive": (S.ive, ss.ive, (4.0,), np.linspace(-6, 6, 6)),
}


def _fd(f, x):
    return (f(x + EPS) - f(x - EPS)) / (2 * EPS)


@pytest.mark.parametrize("name", UNARY)
def test_unary_values_and_two_derivatives(name):
    f, ref, x = UNARY[name]
    np.testing.assert_allclose(f(x), ref(x), rtol=1e-12, atol=1e-14)
    d1 = fj.grad(lambda x: f(x).sum())
    np.testing.assert_allclose(d1(x), _fd(ref, x), rtol=1e-6, atol=1e-7)
    d2 = fj.grad(lambda x: d1(x).sum())
    np.testing.assert_allclose(d2(x), _fd(d1, x), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ORDERED)
def test_ordered_values_and_two_derivatives_in_x(name):
    f, ref, orders, x = ORDERED[name]
    np.testing.assert_allclose(f(*orders, x), ref(*orders, x), rtol=1e-12, atol=1e-14)
    d1 = fj.grad(lambda x: f(*orders, x).sum())
    np.testing.assert_allclose(d1(x), _fd(lambda x: ref(*orders, x), x), rtol=1e-6, atol=1e-7)
    d2 = fj.grad(lambda x: d1(x).sum())
    np.testing.assert_allclose(d2(x), _fd(d1, x), rtol=1e-5, atol=1e-6)


def test_composed_functions_of_two_arguments():
    a, b = np.array([1.2, 2.5, 4.0]), np.array([[0.7], [3.1]])
    for f, ref in ((S.beta, ss.beta), (S.betaln, ss.betaln)):
        np.testing.assert_allclose(f(a, b), ref(a, b), rtol=1e-12)
        for i in (0, 1):
            got = fj.grad(lambda a, b: f(a, b).sum(), argnums=i)(a, b)
            fd = _fd(lambda t: ref(t, b).sum(axis=0), a) if i == 0 else _fd(lambda t: ref(a, t).sum(axis=1,
                                                                                                    keepdims=True), b)
            np.testing.assert_allclose(got, fd, rtol=1e-6)
    x, y = np.array([0.0, 0.5, 2.0]), np.array([0.0, 3.0, 0.25])
    np.testing.assert_allclose(S.xlogy(x, y), ss.xlogy(x, y))
    np.testing.assert_allclose(S.xlog1py(x, y - 1), ss.xlog1py(x, y - 1))
    for f, ref in ((S.rel_entr, ss.rel_entr), (S.kl_div, ss.kl_div)):
        u, w = np.array([0.0, 0.0, 0.5, 2.0, -1.0, 1.0]), np.array([0.0, 3.0, 0.25, 1.0, 1.0, -1.0])
        np.testing.assert_allclose(f(u, w), ref(u, w), rtol=1e-13)
        got = fj.grad(lambda u: f(u, w[2:4]).sum())(u[2:4])
        np.testing.assert_allclose(got, _fd(lambda u: ref(u, w[2:4]), u[2:4]), rtol=1e-6)
    m = np.array([[1.0, -2.0, 30.0], [0.5, 0.25, -4.0]])
    for axis in (None, 0, 1):
        np.testing.assert_allclose(S.softmax(m, axis=axis), ss.softmax(m, axis=axis), rtol=1e-12, atol=1e-300)
        np.testing.assert_allclose(S.log_softmax(m, axis=axis), ss.log_softmax(m, axis=axis), rtol=1e-12,
                                   atol=1e-14)
    for d in (1, 2, 3):
        np.testing.assert_allclose(S.multigammaln(np.array([4.2, 5.5]), d), ss.multigammaln(np.array([4.2, 5.5]), d),
                                   rtol=1e-12)


def test_erf_and_erfc_of_complex_arguments_and_their_holomorphic_vjp():
    z = np.array([0.3 + 0.1j, -1.2 + 0.5j, 2.0 - 0.3j])
    np.testing.assert_allclose(S.erfc(z), ss.erfc(z), rtol=1e-13)
    np.testing.assert_allclose(S.erf(z), ss.erf(z), rtol=1e-13, atol=1e-15)
    assert S.erfc(z.astype(np.complex64)).dtype == np.complex64
    # JAX's convention for a holomorphic f, as fj.exp's: the VJP of g is g * f'(z).
    g = np.array([1.0, 0.5 - 2j, 1j])
    _, back = fj.vjp(S.erfc, z)
    (got,) = back(g)
    h = 1e-6
    np.testing.assert_allclose(got, g * (ss.erfc(z + h) - ss.erfc(z - h)) / (2 * h), rtol=1e-7)


def test_gammasgn_and_rgamma_at_negative_arguments_and_poles():
    x = np.array([-2.5, -1.5, -0.5, -2.0, -1.0, 0.0, 0.5, 7.0])
    np.testing.assert_array_equal(S.gammasgn(x), ss.gammasgn(x))
    np.testing.assert_allclose(S.rgamma(x), ss.rgamma(x), rtol=1e-12, atol=1e-300)
    np.testing.assert_allclose(S.gamma(x[:3]), ss.gamma(x[:3]), rtol=1e-12)


@pytest.mark.parametrize("axis", [None, 0, 1, (0, 1)])
@pytest.mark.parametrize("keepdims", [False, True])
def test_logsumexp_matches_scipy(axis, keepdims):
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((3, 4)) * 30, rng.standard_normal((3, 4))
    np.testing.assert_allclose(S.logsumexp(a, axis=axis, keepdims=keepdims),
                               ss.logsumexp(a, axis=axis, keepdims=keepdims), rtol=1e-12)
    got, sign = S.logsumexp(a, axis=axis, b=b, keepdims=keepdims, return_sign=True)
    want, want_sign = ss.logsumexp(a, axis=axis, b=b, keepdims=keepdims, return_sign=True)
    np.testing.assert_allclose(got, want, rtol=1e-12)
    np.testing.assert_array_equal(sign, want_sign)
    g = fj.grad(lambda a: S.logsumexp(a, axis=axis, b=np.abs(b), keepdims=keepdims).sum())(a)
    np.testing.assert_allclose(g, _fd_array(lambda a: ss.logsumexp(a, axis=axis, b=np.abs(b)).sum(), a), rtol=1e-5,
                               atol=1e-8)


def _fd_array(f, a):
    out = np.zeros_like(a)
    for i in np.ndindex(a.shape):
        d = np.zeros_like(a)
        d[i] = EPS
        out[i] = (f(a + d) - f(a - d)) / (2 * EPS)
    return out


def test_logsumexp_of_all_minus_infinity_and_ints():
    a = np.full((2, 3), -np.inf)
    np.testing.assert_array_equal(S.logsumexp(a, axis=1), ss.logsumexp(a, axis=1))
    np.testing.assert_allclose(S.logsumexp(np.arange(5)), ss.logsumexp(np.arange(5)), rtol=1e-12)


def test_compiled_matches_eager_and_keeps_float32():
    x = np.linspace(0.4, 3.0, 8).astype(np.float32)

    @fj.function
    def f(x):
        return (S.gammaln(x) + S.digamma(x) + S.erfc(x) + S.gammainc(2, x) + S.j0(x) + S.ive(1, x)
                + S.log_ndtr(x) + S.betainc(2.0, 3.0, x / 4) + S.logsumexp(x))

    got = f(x)
    assert got.dtype == np.float32
    want = (ss.gammaln(x) + ss.digamma(x) + ss.erfc(x) + ss.gammainc(2, x) + ss.j0(x) + ss.ive(1, x)
            + ss.log_ndtr(x) + ss.betainc(2.0, 3.0, x / 4) + ss.logsumexp(x))
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-5)
    g = fj.function(fj.grad(lambda x: (S.gammaln(x) * S.i1(x)).sum()))(x.astype(np.float64))
    np.testing.assert_allclose(g, _fd(lambda x: ss.gammaln(x) * ss.i1(x), x.astype(np.float64)), rtol=1e-6)


def test_vmap_over_the_argument_and_the_order():
    x = np.linspace(0.5, 4.0, 6).reshape(2, 3)
    n = np.array([1, 3])
    got = fj.vmap(lambda n, x: S.jn(n, x))(n, x)
    np.testing.assert_allclose(got, ss.jn(n[:, None], x), rtol=1e-12)


def test_a_float_order_traced_but_not_differentiated_gives_the_derivative_in_x():
    # The order is an argument of the traced program, as a fitted distribution's shape; no
    # derivative flows to it, so none is refused (JAX's symbolic zero tangents).
    x, a = np.array([0.5, 1.5, 4.0]), np.array([1.5, 2.5, 0.7])
    want = _fd(lambda x: ss.gammainc(a, x), x)
    f = fj.function(lambda a, x: fj.grad(lambda x: S.gammainc(a, x).sum())(x))
    np.testing.assert_allclose(f(a, x), want, rtol=1e-6)
    np.testing.assert_allclose(fj.function(fj.grad(lambda x, a: S.gammainc(a, x).sum()))(x, a), want, rtol=1e-6)
    _, tangent = fj.jvp(lambda x: S.gammainc(a, x), (x,), (np.ones(3),))
    np.testing.assert_allclose(tangent, want, rtol=1e-6)



def _native(f, *args):
    f(*args)
    (entry,) = f._cache.values()
    assert entry.executable._program is not None, entry.executable.native_reason
    return f(*args)


def test_gammaln_digamma_erfc_and_erfinv_compile_into_the_native_program_at_scipys_values():
    # Decomposed into elementwise ops (Cephes' lgam: Stirling from 13, a rational function on
    # [2, 3) after a shift, reflection below 0; digamma's asymptotic series after a shift):
    # within 1e-12 of scipy over positive, negative and huge arguments, at the zeros of
    # gammaln (1 and 2), at the poles (inf; digamma NaN at negative integers, -inf at 0) and
    # at the infinities, in float64 and float32, and fused into one native program. erfc (and
    # ndtr on it) likewise: 1 - erf below 1, Cephes' rational functions times exp(-x^2) above,
    # into its underflow (from |x| about 27) and at the infinities.
    rng = np.random.default_rng(5)
    x = np.concatenate([rng.uniform(1e-3, 30, 2000), rng.uniform(-30, 0, 1000), np.exp(rng.uniform(-30, 50, 1000)),
                        [1.0, 2.0, 1 + 1e-9, 2 - 1e-9, 0.5, 12.999, 13.0, 13.001, 1e-300, 0.0, -1.0, -2.5, -40.5,
                         np.inf, -np.inf, np.nan]])
    for f, ref in ((S.gammaln, ss.gammaln), (S.digamma, ss.digamma), (S.erfc, ss.erfc), (S.ndtr, ss.ndtr)):
        got = _native(fj.function(lambda x: f(x) * 1.0), x)
        np.testing.assert_allclose(got, ref(x), rtol=1e-12, atol=1e-13, equal_nan=True)
        x32 = x[np.abs(x) < 1e30].astype(np.float32)
        got32 = fj.function(f)(x32)
        assert got32.dtype == np.float32
        np.testing.assert_allclose(got32, ref(x32.astype(np.float64)).astype(np.float32), rtol=2e-5, atol=1e-6,
                                   equal_nan=True)
    # erfinv: Giles' polynomials then four Newton steps (on log erfc in the tails), to 1e-16
    # from +-1; +-1 give +-inf, outside [-1, 1] NaN.
    tails = 1 - np.logspace(-16, -1, 200)
    u = np.concatenate([rng.uniform(-1, 1, 2000), tails, -tails, [0.0, 0.5, -0.5, 1.0, -1.0, 1.5, np.nan]])
    np.testing.assert_allclose(_native(fj.function(lambda u: S.erfinv(u) * 1.0), u), ss.erfinv(u), rtol=1e-12,
                               atol=1e-13, equal_nan=True)
    u32 = rng.uniform(-0.999, 0.999, 500).astype(np.float32)
    np.testing.assert_allclose(fj.function(S.erfinv)(u32), ss.erfinv(u32.astype(np.float64)).astype(np.float32),
                               rtol=2e-5, atol=1e-6)
    # Their derivatives (digamma, trigamma) differentiate through.
    np.testing.assert_allclose(fj.function(fj.grad(lambda x: S.gammaln(x).sum()))(x[:50]), ss.digamma(x[:50]),
                               rtol=1e-12, atol=1e-13)

def test_polygamma_of_order_one_and_up_compiles_into_the_native_program():
    # Shifted up to the asymptotic series' bound, reflected through cot's derivatives below 0:
    # within 1e-13 of mpmath (150 digits: scipy sums zeta(n + 1, x) from a negative x upwards,
    # terms of +-2^(n+1) at x = -40.5 cancelling to 1e-12, and keeps few digits there), at
    # scipy's values at the poles (0, the negative integers, -inf: +inf for odd n, -inf for
    # even), the infinities, NaN and past float64's range; float32 rounded once; trigamma as
    # digamma's derivative in one native program.
    rng = np.random.default_rng(11)
    x = np.concatenate([rng.uniform(1e-3, 30, 60), rng.uniform(-30, 0, 60), np.exp(rng.uniform(-30, 36, 30)),
                        [-40.5, -2.5, -0.5, -1e-8, 1e-8, 0.5, 1.0]])
    for n in (1, 2, 3, 7, 20, 40):
        bound = _polygamma_series(n)[0]
        at = np.concatenate([x, [bound - 1e-9, bound, bound + 1e-9, bound - 1]])
        got = _native(fj.function(lambda v, n=n: S.polygamma(n, v) * 1.0), at)
        with mpmath.workdps(150):
            want = np.array([float(mpmath.polygamma(n, mpmath.mpf(float(v)))) for v in at])
        np.testing.assert_allclose(got, want, rtol=1e-13, err_msg=f"order {n}")
        edges = np.array([0.0, -0.0, -1.0, -7.0, np.inf, -np.inf, np.nan, 1e-300, -1e-300, 1e300])
        np.testing.assert_array_equal(_native(fj.function(lambda v, n=n: S.polygamma(n, v) * 1.0), edges),
                                      ss.polygamma(n, edges), err_msg=f"order {n}")
    x32 = x[np.abs(x) < 30].astype(np.float32)
    got32 = fj.function(lambda v: S.polygamma(2, v))(x32)
    assert got32.dtype == np.float32
    np.testing.assert_array_equal(got32, fj.function(lambda v: S.polygamma(2, v))(x32.astype(np.float64))
                                  .astype(np.float32))
    positive = x[x > 0]
    np.testing.assert_allclose(_native(fj.function(fj.grad(lambda v: S.digamma(v).sum())), positive),
                               ss.polygamma(1, positive), rtol=1e-13)


def test_polygamma_past_the_native_orders_runs_scipys_on_the_python_driver():
    f = fj.function(lambda v: S.polygamma(POLYGAMMA_MAX_ORDER + 1, v) * 1.0)
    x = np.array([0.5, 3.0, 40.0])
    np.testing.assert_allclose(f(x), ss.polygamma(POLYGAMMA_MAX_ORDER + 1, x), rtol=1e-14)
    (entry,) = f._cache.values()
    assert entry.executable._program is None and "polygamma" in entry.executable.native_reason


def test_ndtri_compiles_into_the_native_program_at_scipys_values():
    # Cephes' ndtri, as scipy's: a rational function in (p - 1/2)^2 on [exp(-2), 1 - exp(-2)],
    # sqrt(-2 log p) and one of two rational functions in its reciprocal in the tails (p from
    # 1e-300 and 1 - p from 1e-16); 0 and 1 give -inf and inf, outside [0, 1] and NaN give NaN.
    # norm.ppf is ndtri; its derivative sqrt(2 pi) exp(x^2 / 2) differentiates through.
    rng = np.random.default_rng(11)
    p = np.concatenate([rng.uniform(0, 1, 3000), 10.0 ** -rng.uniform(0, 300, 1000),
                        1 - 10.0 ** -rng.uniform(0, 16, 1000),
                        [0.5, math.exp(-2), 1 - math.exp(-2), 1e-300, 5e-324, 0.0, 1.0, -0.1, 1.1, np.nan]])
    got = _native(fj.function(lambda p: S.ndtri(p) * 1.0), p)
    with np.errstate(invalid="ignore"):
        want = ss.ndtri(p)
    np.testing.assert_allclose(got, want, rtol=1e-14, atol=0, equal_nan=True)
    p32 = rng.uniform(1e-6, 1 - 1e-6, 500).astype(np.float32)
    got32 = fj.function(S.ndtri)(p32)
    assert got32.dtype == np.float32
    np.testing.assert_allclose(got32, ss.ndtri(p32.astype(np.float64)).astype(np.float32), rtol=2e-6)
    u = rng.uniform(0.01, 0.99, 50)
    np.testing.assert_allclose(_native(fj.function(fj.grad(lambda p: S.ndtri(p).sum())), u),
                               math.sqrt(2 * math.pi) * np.exp(ss.ndtri(u) ** 2 / 2), rtol=1e-12)


def test_log_ndtr_compiles_into_the_native_program_at_scipys_values():
    # scipy's three ranges: -ndtr(-x) (log1p's first term) above 6, log(ndtr(x)) down to -20,
    # the asymptotic series in 1/x^2 below it; far into both tails, at the range ends and at the
    # infinities (0 and -inf), NaN through; the derivative differentiates through.
    rng = np.random.default_rng(13)
    x = np.concatenate([rng.uniform(-30, 10, 3000), -np.exp(rng.uniform(0, 300, 500) * math.log(10) / 100),
                        np.exp(rng.uniform(0, 4, 300)), [6.0, 6.0 + 1e-12, -20.0, -20.0 - 1e-12, 0.0, 40.0,
                                                         -1e300, np.inf, -np.inf, np.nan]])
    # Far in the upper tail (ndtr(-x) below 1e-100) both are 1e-13 and more from the truth, in
    # opposite directions: x / sqrt(2)'s rounding, squared in exp(-x^2 / 2).
    np.testing.assert_allclose(_native(fj.function(lambda x: S.log_ndtr(x) * 1.0), x), ss.log_ndtr(x),
                               rtol=1e-12, atol=1e-300, equal_nan=True)   # subnormal where scipy gives -0
    x32 = rng.uniform(-30, 10, 500).astype(np.float32)
    np.testing.assert_allclose(fj.function(S.log_ndtr)(x32), ss.log_ndtr(x32.astype(np.float64)).astype(np.float32),
                               rtol=2e-6)
    u = rng.uniform(-25, 8, 50)
    np.testing.assert_allclose(_native(fj.function(fj.grad(lambda x: S.log_ndtr(x).sum())), u),
                               np.exp(-u * u / 2 - ss.log_ndtr(u)) / math.sqrt(2 * math.pi), rtol=1e-11)


def test_the_modified_bessel_functions_of_order_0_and_1_compile_into_the_native_program():
    # i0e and i1e (JAX's bessel_i0e, bessel_i1e) decomposed into Cephes' Chebyshev series: scipy's
    # bits in float64 and float32 over both series (|x| <= 8 and beyond), both signs, the
    # infinities, NaN, subnormals; i0 and i1 are exp(|x|) times them, in float64 (a few ulps
    # from scipy's order of operations past 8), so float32 overflows where I_n does, not exp.
    rng = np.random.default_rng(7)
    x = np.concatenate([rng.uniform(-30, 30, 400), rng.uniform(-1e4, 1e4, 20),
                        [0.0, -0.0, 8.0, -8.0, np.nextafter(8.0, 9.0), 1e300, np.inf, -np.inf, np.nan, 1e-300, 5e-324,
                         700.0, 709.0, 710.0, -710.0]])
    for f, ref in ((S.i0e, ss.i0e), (S.i1e, ss.i1e), (lambda v: S.ive(0, v), ss.i0e),
                   (lambda v: S.ive(1, v), ss.i1e)):
        np.testing.assert_array_equal(_native(fj.function(lambda v, f=f: f(v) * 1.0), x), ref(x))
        with np.errstate(over="ignore"):   # 1e300 and 1e4 in float32: inf
            x32 = x.astype(np.float32)
        np.testing.assert_array_equal(_native(fj.function(lambda v, f=f: f(v)), x32), ref(x32))
    for f, ref in ((S.i0, ss.i0), (S.i1, ss.i1), (lambda v: S.iv(0, v), ss.i0), (lambda v: S.iv(1.0, v), ss.i1)):
        got = _native(fj.function(lambda v, f=f: f(v) * 1.0), x)
        np.testing.assert_allclose(got, ref(x), rtol=2e-15, atol=0)
        assert got.dtype == np.float64
        with np.errstate(over="ignore"):
            x32 = np.array([-89.0, -3.0, 0.0, 2.5, 12.0, 89.0, 90.0], np.float32)
            np.testing.assert_allclose(_native(fj.function(lambda v, f=f: f(v)), x32), ref(x32), rtol=3e-7)
    # An order given as a NumPy float keeps iv's general form and its dtype promotion (float64
    # of a float32 x, as scipy's); integer x promotes to float64, as scipy's.
    x32 = np.array([0.5, 3.0, 9.0], np.float32)
    for f in (S.iv, S.ive, S.jv, S.yv):
        got = fj.function(lambda v, f=f: f(np.float64(0.0), v))(x32)
        assert got.dtype == np.float64 == ss.iv(np.float64(0.0), x32).dtype
    for f, ref in ((S.i0, ss.i0), (S.i1, ss.i1), (S.i0e, ss.i0e), (lambda v: S.iv(0, v), ss.i0)):
        np.testing.assert_allclose(fj.function(lambda v, f=f: f(v))(np.arange(4)), ref(np.arange(4)), rtol=2e-15)
        np.testing.assert_allclose(f(3), ref(3), rtol=2e-15)
        # complex x: refused naming the primitive (scipy.special's i0 of complex is not real)
        with pytest.raises(ShapeError, match=r"does not accept dtype c128"):
            fj.function(lambda v, f=f: f(v))(np.array([1 + 1j]))


def test_the_bessel_functions_of_order_0_and_1_differentiate_near_zero():
    # I_0' = I_1 ~ x / 2: from its own rule, not the product rule's difference of two terms near
    # 1 (which left 1e-8 of relative error at x = 1e-8). i1e' and J_1' near 0 are their series
    # (1/2 - |x| + ..., 1/2 - 3 x^2 / 16 + ...), whose own derivatives (-sign(x), -3x/8) the
    # second derivative takes: x / c of the general rule loses eps / |x| to cancellation there.
    tiny = np.array([1e-8, -3e-5, 1e-3, 0.0])
    np.testing.assert_allclose(_native(fj.function(fj.grad(lambda v: S.i0(v).sum())), tiny), ss.i1(tiny), rtol=1e-14)
    at = np.array([0.0, 1e-300, -1e-17, 2e-16, 3e-9, 0.5, -9.0])
    want = ss.i0e(at) - ss.i1e(at) * (np.sign(at) + 1 / np.where(at == 0, 1, at))
    want[:5] = 0.5 - np.abs(at[:5])
    np.testing.assert_allclose(_native(fj.function(fj.grad(lambda v: S.i1e(v).sum())), at), want, rtol=1e-14)
    np.testing.assert_allclose(fj.grad(lambda v: S.i0e(v).sum())(at[3:]), ss.i1e(at[3:]) - np.sign(at[3:]) *
                               ss.i0e(at[3:]), rtol=1e-14)

    def second(f):
        return _native(fj.function(fj.grad(lambda v: fj.grad(lambda w: f(w).sum())(v).sum())), small)
    small = np.array([1e-300, -3e-16, 1e-12, 2e-8, -5e-5, 3e-3])
    def exact(fn, at_zero):   # mpmath's, but below 1e-15 (its step would cross 0) the leading term
        with mpmath.workdps(50):
            return [float(mpmath.diff(fn, mpmath.mpf(v), 2, h=abs(v) * 1e-12)) if abs(v) > 1e-15 else at_zero(v)
                    for v in small]
    np.testing.assert_allclose(second(S.i1e), exact(lambda v: mpmath.besseli(1, v) * mpmath.exp(-abs(v)),
                                                    lambda v: -np.sign(v)), rtol=1e-11)
    np.testing.assert_allclose(second(S.j1), exact(lambda v: mpmath.besselj(1, v), lambda v: -3 / 8 * v), rtol=1e-8)
    np.testing.assert_allclose(second(S.i1), exact(lambda v: mpmath.besseli(1, v), lambda v: 3 / 8 * v), rtol=1e-8)
    # Y_1' is +inf at 0 (Y_1 ~ -2 / (pi x)), not -inf - (-inf).
    assert fj.grad(lambda v: S.y1(v))(0.0) == np.inf


def test_the_bessel_functions_of_order_0_and_1_compile_into_the_native_program():
    # j0, j1, y0, y1 (and jv, jn, yv, yn of the orders 0 and 1 given as numbers) decomposed into
    # Chebyshev series fitted to mpmath's (tests/scipy/test_bessel_tables.py), power series
    # below 2: on [0, 8] within 5e-16 of the truth for J (and a few ulps at its zeros, where
    # scipy's Cephes loses its relative accuracy), 1.5e-15 for Y (absolute where |y| <= 1,
    # relative beyond; scipy's 1.2e-15); Hankel's form from 8 on as
    # scipy's (the same cos and sin of x - (2n+1) pi / 4 rounded, so the same values at 1e16
    # and 1e300, within an ulp); scipy's values at 0 (J_0(0) exactly 1), -0.0, the infinities, NaN,
    # subnormals and below 0 (Y: NaN); float32 rounded once from float64.
    rng = np.random.default_rng(11)
    near = np.concatenate([np.linspace(0, 8, 801)[1:], rng.uniform(0, 8, 200), [1e-300, 1e-8, 0.8935769662791675, 8.0]])
    zeros = {0: [2.404825557695773, 5.520078110286311], 1: [3.8317059702075125, 7.015586669815619]}
    with mpmath.workdps(30):
        for kind, order, f, ref in (("j", 0, S.j0, ss.j0), ("j", 1, S.j1, ss.j1), ("y", 0, S.y0, ss.y0),
                                    ("y", 1, S.y1, ss.y1)):
            def g(f=f):
                return fj.function(lambda v: f(v) * 1.0)
            truth = np.array([float((mpmath.besselj if kind == "j" else mpmath.bessely)(order, mpmath.mpf(v)))
                              for v in near])
            got = _native(g(), near)
            scale = np.maximum(np.abs(truth), 1.0)   # absolute where |y| <= 1, relative beyond
            assert np.max(np.abs(got - truth) / scale) < (5e-16 if kind == "j" else 1.5e-15), f"{kind}{order}"
            if kind == "j":   # relative accuracy at the zeros: the nearest floats to the first two
                at = np.array([v for z in zeros[order] for v in (np.nextafter(z, 0), z, np.nextafter(z, 9))])
                exact = np.array([float(mpmath.besselj(order, mpmath.mpf(v))) for v in at])
                np.testing.assert_allclose(_native(g(), at), exact, rtol=8 * np.finfo(float).eps)
            x = np.concatenate([-near, rng.uniform(8, 60, 200), rng.uniform(60, 1e4, 50),
                                [0.0, -0.0, np.inf, -np.inf, np.nan, 5e-324, 1e16, 1e17, 1e300]])
            want = ref(x)
            got = _native(g(), x)
            np.testing.assert_allclose(got[np.abs(x) > 8], want[np.abs(x) > 8], rtol=1e-14, atol=1e-16)
            np.testing.assert_array_equal(got[-9:-3], want[-9:-3])   # 0, -0.0, the infinities, NaN, 5e-324
            assert np.signbit(got[-8]) == np.signbit(want[-8])          # j1(-0.0) is -0.0
            x32 = x[:-4].astype(np.float32)
            np.testing.assert_allclose(_native(fj.function(lambda v, f=f: f(v)), x32), ref(x32), rtol=1e-6,
                                       atol=1e-7)
    for f, ref in ((lambda v: S.jv(0, v), ss.j0), (lambda v: S.jn(1, v), ss.j1), (lambda v: S.yv(0.0, v), ss.y0),
                   (lambda v: S.yn(np.int64(1), v), ss.y1)):
        np.testing.assert_allclose(_native(fj.function(lambda v, f=f: f(v) * 1.0), near), ref(near), rtol=1e-13,
                                   atol=1e-15)
    # J_1'(0) = 1/2, also within epsilon of 0 (j1(x) / x underflows there); J_0' = -J_1.
    at = np.array([0.0, 1e-300, -1e-17, 0.5, 9.0])
    np.testing.assert_allclose(_native(fj.function(fj.grad(lambda v: S.j1(v).sum())), at),
                               [0.5, 0.5, 0.5, *(ss.j0(at[3:]) - ss.j1(at[3:]) / at[3:])], rtol=1e-14)
    np.testing.assert_allclose(_native(fj.function(fj.grad(lambda v: S.j0(v).sum())), at), -ss.j1(at), rtol=1e-14,
                               atol=1e-300)


def test_the_incomplete_gamma_functions_differentiate_in_their_order():
    # dP/da has no closed form: a series (x <= 1 or x <= a) or a continued fraction
    # (elsewhere) summed with the function, as JAX's igamma_grad_a; Q's is its negative.
    # Both branches, small and large orders, x far in the tail (P's derivative 1e-10).
    a = np.array([0.01, 0.3, 0.5, 1.5, 2.5, 3.0, 10.0, 40.0, 150.0])
    x = np.array([0.5, 0.1, 0.3, 2.0, 0.4, 30.0, 12.0, 38.0, 160.0])
    want = gammainc_order_derivative(a, x)   # extrapolated differences of scipy's P or Q
    got = fj.function(fj.grad(lambda a, x: S.gammainc(a, x).sum()))(a, x)
    np.testing.assert_allclose(got, want, rtol=1e-7, atol=1e-15)
    np.testing.assert_allclose(fj.grad(lambda a: S.gammaincc(a, x).sum())(a), -want, rtol=1e-7, atol=1e-15)
    _, tangent = fj.jvp(lambda a: S.gammainc(a, x), (a,), (np.ones(len(a)),))
    np.testing.assert_allclose(tangent, want, rtol=1e-7, atol=1e-15)
    # A scalar order broadcast over x sums its cotangents; float32 too.
    one = fj.grad(lambda a: S.gammainc(a, x).sum())(1.5)
    np.testing.assert_allclose(one, gammainc_order_derivative(1.5, x).sum(), rtol=1e-7)
    f32 = fj.grad(lambda a: S.gammainc(a, x.astype(np.float32)).sum())(np.float32(1.5))
    assert f32.dtype == np.float32 and np.isclose(f32, one, rtol=1e-5)
    # At x = 0 the derivative is 0; outside the domain it is NaN, as the function's value.
    edge = fj.grad(lambda a: S.gammainc(a, np.array([0.0, -1.0])).sum())(2.0)
    assert np.isnan(edge)
    np.testing.assert_array_equal(fj.grad(lambda a: S.gammainc(a, np.array([0.0, 0.0])).sum())(2.0), 0.0)
    # The derivative's own derivative in the order is not summed: the error says so.
    with pytest.raises(AutodiffError, match="gammainc_grad_a .*second derivative in its order"):
        fj.grad(fj.grad(lambda a: S.gammainc(a, 2.0)))(1.5)


def test_the_incomplete_gamma_functions_order_derivative_compiles_into_the_native_program():
    # gammainc_grad_a decomposes into its sums as compiled while loops (the tracer's block),
    # whose lgamma and digamma decompose in turn: the gradient is one native program, at the
    # NumPy reference's values (the same sums, in float64) for both branches, under vmap,
    # with a scalar order broadcast, and in float32.
    a = np.array([0.01, 0.3, 0.5, 1.5, 2.5, 3.0, 10.0, 40.0, 150.0])
    x = np.array([0.5, 0.1, 0.3, 2.0, 0.4, 30.0, 12.0, 38.0, 160.0])
    reference = get("gammainc_grad_a").impl
    got = _native(fj.function(fj.grad(lambda a, x: S.gammaincc(a, x).sum())), a, x)
    np.testing.assert_allclose(got, -reference(a, x), rtol=1e-13, atol=1e-300)
    grid = np.array([0.0, 1e-3, 0.9, 1.0, 5.0, 60.0])
    f = fj.function(lambda a, x: fj.vmap(fj.grad(lambda a: S.gammainc(a, x).sum()))(a))
    np.testing.assert_allclose(_native(f, np.array([0.7, 2.0, 25.0]), grid),
                               [reference(np.full(6, v), grid).sum() for v in (0.7, 2.0, 25.0)], rtol=1e-13)
    f32 = _native(fj.function(fj.grad(lambda a, x: S.gammainc(a, x).sum())), np.float32(1.5), x.astype(np.float32))
    assert f32.dtype == np.float32
    np.testing.assert_allclose(f32, reference(np.full(9, 1.5), x).sum(), rtol=1e-6)


def test_integer_order_traced_in_a_compiled_function():
    f = fj.function(lambda a, x: fj.grad(lambda x: S.gammaincc(a, x).sum())(x))
    x = np.array([0.5, 1.5, 4.0])
    np.testing.assert_allclose(f(np.array([2, 3, 1]), x), _fd(lambda x: ss.gammaincc([2, 3, 1], x), x), rtol=1e-6)


@pytest.mark.parametrize("fn, args, fname, param", [
    (lambda a, x: S.betainc(a, 2.0, x), (1.5, 0.3), "betainc", "a"),
    (lambda v, x: S.iv(v, x), (1.5, 2.0), "iv", "v"),
])
def test_the_derivative_in_an_order_is_refused_with_the_function_named(fn, args, fname, param):
    with pytest.raises(AutodiffError, match=rf"^{fname} at test_special.py:\d+ .*order parameter {param} .*"
                                            rf"stop_gradient\({param}\)"):
        fj.grad(fn)(*args)
    # What the message advises works: the order behind stop_gradient contributes no gradient.
    assert fj.grad(lambda a, x: fn(fj.stop_gradient(a), x) + a)(*args) == 1.0


def test_polygamma_needs_a_concrete_order():
    with pytest.raises(TypeError, match="polygamma: n must be a concrete integer"):
        fj.function(lambda n, x: S.polygamma(n, x))(np.array(1), np.array(2.0))
    with pytest.raises(ValueError, match="non-negative integer"):
        S.polygamma(1.5, 2.0)


JAX_NAMES = ["gammaln", "digamma", "gamma", "erf", "erfc", "erfinv", "ndtr", "ndtri", "log_ndtr", "logit",
             "expit", "entr", "i0", "i1", "i0e", "i1e", "factorial", "rgamma"]


@pytest.mark.parametrize("name", JAX_NAMES)
def test_against_jax_scipy_special(name, jax_x64):
    jax = jax_x64
    jsp = pytest.importorskip("jax.scipy.special")
    jf = getattr(jsp, name, None)
    if jf is None:
        pytest.skip(f"jax.scipy.special has no {name}")
    f, _, x = UNARY[name]
    np.testing.assert_allclose(f(x), np.asarray(jf(x)), rtol=1e-10, atol=1e-12)
    jg = jax.vmap(jax.grad(jf))(x)
    np.testing.assert_allclose(fj.grad(lambda x: f(x).sum())(x), np.asarray(jg), rtol=1e-9, atol=1e-12)
