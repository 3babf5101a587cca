"""flowjit.scipy.stats: every function against scipy.stats (and jax.scipy.stats where it has
it), on broadcast arguments and off the support, compiled with fj.function, with gradients to
second order against finite differences in the arguments autograd's suite differentiates."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.stats as ss

import flowjit as fj
from flowjit.scipy import stats as S
from tests.scipy.grad_checks import check_grads

rng = np.random.default_rng(3)
R, U = rng.standard_normal, rng.uniform


def _pos(shape, low=1.1):
    return R(shape) ** 2 + low


def _spd(d):
    m = R((d, d))
    return m.T @ m + np.eye(d)


# (distribution, function, arguments, differentiated argnums)
CASES = [
    ("norm", f, [R((4, 3)), R((1, 3)), _pos((4, 1))], [0, 1, 2]) for f in ("pdf", "logpdf", "cdf", "logcdf", "sf",
                                                                               "logsf")
] + [
    ("norm", "ppf", [U(0.05, 0.95, 4), R(4), _pos(4)], [0, 1, 2]),
    ("t", "pdf", [R((4, 3)), _pos((1, 3), 2.1), R((4, 3)), _pos((4, 1), 2.1)], [0, 1, 2, 3]),
    ("t", "logpdf", [R((4, 3)), _pos((1, 3), 2.1), R((4, 3)), _pos((4, 1), 2.1)], [0, 1, 2, 3]),
    ("t", "cdf", [R((4, 3)), _pos((1, 3), 2.1), R((4, 3)), _pos((4, 1), 2.1)], [0, 2, 3]),
    ("t", "logcdf", [R((4, 3)), _pos((1, 3), 2.1), R((4, 3)), _pos((4, 1), 2.1)], [0, 2, 3]),
    ("poisson", "pmf", [np.round(R((4, 3)) ** 2), _pos((4, 1))], [1]),
    ("poisson", "logpmf", [np.round(R((4, 3)) ** 2), _pos((4, 1))], [1]),
    ("poisson", "cdf", [np.round(R((4, 3)) ** 2), _pos((4, 1))], [1]),
    ("chi2", "pdf", [_pos(4), np.array([1.0, 2.0, 3.0, 4.5])], [0, 1]),
    ("chi2", "logpdf", [_pos(4), np.array([1.0, 2.0, 3.0, 4.5])], [0, 1]),
    ("chi2", "cdf", [_pos(4), np.array([1.0, 2.0, 3.0, 4.5])], [0]),
    ("gamma", "pdf", [_pos(4), _pos(4)], [0, 1]),
    ("gamma", "logpdf", [_pos(4), _pos(4), 0.3, 1.7], [0, 1, 2, 3]),
    ("gamma", "cdf", [_pos(4), _pos(4), 0.3, 1.7], [0, 2, 3]),
    ("beta", "pdf", [U(0, 1, 4), _pos(4), _pos(4)], [0, 1, 2]),
    ("beta", "logpdf", [U(0, 1, 4), _pos(4), _pos(4)], [0, 1, 2]),
    ("beta", "cdf", [U(0, 1, 4), _pos(4), _pos(4)], [0]),
]


def _ids(case):
    return f"{case[0]}.{case[1]}"


@pytest.mark.parametrize("case", CASES, ids=[_ids(c) for c in CASES])
def test_values(case):
    dist, name, args, _ = case
    want = getattr(getattr(ss, dist), name)(*args)
    fn = getattr(getattr(S, dist), name)
    np.testing.assert_allclose(np.asarray(fn(*args)), want, rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(np.asarray(fj.function(fn)(*args)), want, rtol=1e-10, atol=1e-13)


@pytest.mark.parametrize("case", CASES, ids=[_ids(c) for c in CASES])
def test_gradients(case):
    dist, name, args, argnums = case
    check_grads(getattr(getattr(S, dist), name), args, argnums, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("dist,name,args", [
    ("norm", "logpdf", [np.array([-np.inf, 0.0, 40.0])]),
    ("norm", "logcdf", [np.array([-40.0, 0.0, 40.0])]),
    ("norm", "logsf", [np.array([-40.0, 0.0, 40.0])]),
    ("t", "logcdf", [np.array([-1e3, 0.0, 1e3]), 3.0]),
    ("poisson", "logpmf", [np.array([-1.0, 1.5, 0.0, 3.0]), 2.0]),
    ("poisson", "cdf", [np.array([-1.0, 1.5, 0.0, 3.0]), 2.0]),
    ("chi2", "logpdf", [np.array([-1.0, 0.0, 2.0]), np.array([3.0, 2.0, 1.0])]),
    ("gamma", "cdf", [np.array([-1.0, 0.0, 2.0]), 2.0]),
    ("beta", "logpdf", [np.array([-0.5, 0.0, 0.5, 1.0, 1.5]), 2.0, 3.0]),
    ("beta", "cdf", [np.array([-0.5, 0.0, 0.5, 1.0, 1.5]), 2.0, 3.0]),
])
def test_edges_and_off_support(dist, name, args):
    got = getattr(getattr(S, dist), name)(*args)
    np.testing.assert_allclose(np.asarray(got), getattr(getattr(ss, dist), name)(*args), rtol=1e-10)


def test_gradient_finite_off_support():
    # The masked branch must not leak NaN into the gradient of the points on the support.
    g = fj.grad(lambda x: fj.sum(S.gamma.pdf(x, 2.5)))(np.array([-1.0, 0.5, 2.0]))
    assert np.all(np.isfinite(np.asarray(g))) and np.asarray(g)[0] == 0


ALPHA = U(0, 1, 4) ** 2 + 1.2
X_DIR = ss.dirichlet.rvs(ALPHA, size=1, random_state=4)[0]


@pytest.mark.parametrize("name", ["pdf", "logpdf"])
def test_dirichlet(name):
    fn, ref = getattr(S.dirichlet, name), getattr(ss.dirichlet, name)
    np.testing.assert_allclose(np.asarray(fn(X_DIR, ALPHA)), ref(X_DIR, ALPHA), rtol=1e-10)
    xs = ss.dirichlet.rvs(ALPHA, size=3, random_state=5).T
    np.testing.assert_allclose(np.asarray(fn(xs, ALPHA)), ref(xs, ALPHA), rtol=1e-10)
    np.testing.assert_allclose(np.asarray(fn(xs[:-1], ALPHA)), ref(xs[:-1], ALPHA), rtol=1e-10)
    check_grads(lambda x, a: fn(x / fj.sum(x), a), [X_DIR, ALPHA], [0, 1], rtol=1e-4)


MEAN, COV = R(4), _spd(4)


def _sym(c):
    return 0.5 * (c + fj.swapaxes(c, -1, -2))


@pytest.mark.parametrize("name", ["pdf", "logpdf"])
@pytest.mark.parametrize("x", [R(4), R((5, 4))], ids=["point", "batch"])
def test_multivariate_normal(name, x):
    fn, ref = getattr(S.multivariate_normal, name), getattr(ss.multivariate_normal, name)
    np.testing.assert_allclose(np.asarray(fn(x, MEAN, COV)), ref(x, MEAN, COV), rtol=1e-10)
    np.testing.assert_allclose(np.asarray(fj.function(fn)(x, MEAN, COV)), ref(x, MEAN, COV), rtol=1e-10)
    check_grads(lambda x, m, c: fn(x, m, _sym(c)), [x, MEAN, COV], [0, 1, 2], rtol=1e-4)


def test_multivariate_normal_cov_forms():
    x = R(3)
    for mean, cov in [(np.zeros(3), 2.0), (None, _spd(3)), (np.ones(3), np.array([1.0, 2.0, 3.0]))]:
        np.testing.assert_allclose(np.asarray(S.multivariate_normal.logpdf(x, mean, cov)),
                                   ss.multivariate_normal.logpdf(x, mean, cov), rtol=1e-10)
    xs = R(6)  # dimension 1: each entry is a point
    np.testing.assert_allclose(np.asarray(S.multivariate_normal.logpdf(xs, 0.5, 2.0)),
                               ss.multivariate_normal.logpdf(xs, 0.5, 2.0), rtol=1e-10)


def test_multivariate_normal_singular():
    cov = np.zeros((4, 4))
    cov[0, 0] = cov[1, 1] = 1
    mean = np.concatenate([R(2), np.zeros(2)])
    on = np.concatenate([R(2), mean[2:]])
    off = on + np.array([0, 0, 0.5, 0])
    for name in ("pdf", "logpdf"):
        fn, ref = getattr(S.multivariate_normal, name), getattr(ss.multivariate_normal, name)
        for x in (on, off):
            np.testing.assert_allclose(np.asarray(fn(x, mean, cov, allow_singular=True)),
                                       ref(x, mean, cov, allow_singular=True), rtol=1e-10)

        def f(x, m, fn=fn):
            return fn(fj.concatenate([x[:2], m[2:]]), m, cov, allow_singular=True)

        check_grads(f, [on, mean], [0, 1], rtol=1e-4)
    np.testing.assert_allclose(np.asarray(S.multivariate_normal.entropy(mean, cov, allow_singular=True)),
                               ss.multivariate_normal(mean, cov, allow_singular=True).entropy(), rtol=1e-10)


def test_multivariate_normal_entropy():
    np.testing.assert_allclose(np.asarray(S.multivariate_normal.entropy(MEAN, COV)),
                               ss.multivariate_normal.entropy(MEAN, COV), rtol=1e-10)
    check_grads(lambda m, c: S.multivariate_normal.entropy(m, _sym(c)), [10 * MEAN, COV], [0, 1], rtol=1e-4)


def test_against_jax(jax_x64):
    jst = pytest.importorskip("jax.scipy.stats")
    x, loc, scale = R(5), R(5), _pos(5)
    for name in ("pdf", "logpdf", "cdf", "logcdf", "sf", "logsf"):
        np.testing.assert_allclose(np.asarray(getattr(S.norm, name)(x, loc, scale)),
                                   np.asarray(getattr(jst.norm, name)(x, loc, scale)), rtol=1e-8)
    np.testing.assert_allclose(np.asarray(S.t.logpdf(x, 3.5, loc, scale)),
                               np.asarray(jst.t.logpdf(x, 3.5, loc, scale)), rtol=1e-8)
    xm = R((3, 4))
    np.testing.assert_allclose(np.asarray(S.multivariate_normal.logpdf(xm, MEAN, COV)),
                               np.asarray(jst.multivariate_normal.logpdf(xm, MEAN, COV)), rtol=1e-8)


def test_bad_input():
    with pytest.raises(fj.ShapeError, match="cov must be"):
        S.multivariate_normal.logpdf(np.zeros(3), np.zeros(3), np.eye(2))
    with pytest.raises(fj.ShapeError, match="x must hold 3"):
        S.dirichlet.logpdf(np.ones(5) / 5, np.ones(3))
