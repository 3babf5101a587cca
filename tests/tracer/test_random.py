"""fj.random's derived draws: gumbel and categorical (the Gumbel-max trick), compiled, against
their distributions and the interpreter's bits."""

from __future__ import annotations

import numpy as np
import pytest

import flowjit as fj


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_gumbel_has_the_standard_gumbel_moments_and_no_infinity(dtype):
    x = np.asarray(fj.function(lambda k: fj.random.gumbel(k, (400_000,), dtype))(fj.random.key(2)))
    assert x.dtype == np.dtype(dtype) and np.isfinite(x).all()
    # mean: Euler's gamma; variance pi^2/6 (standard error of the mean 0.002)
    assert abs(x.mean() - np.euler_gamma) < 0.01 and abs(x.var() - np.pi ** 2 / 6) < 0.03


def test_categorical_draws_with_softmax_probabilities_and_never_an_impossible_class():
    p = np.array([[0.1, 0.2, 0.7, 0.0], [0.25, 0.25, 0.25, 0.25]])
    with np.errstate(divide="ignore"):
        logits = np.log(p) + 3.0                                  # unnormalized, -inf for p = 0
    draw = fj.function(lambda k, lg: fj.random.categorical(k, lg[:, None, :], shape=(2, 50_000)))
    s = np.asarray(draw(fj.random.key(0), logits))
    assert s.shape == (2, 50_000) and s.dtype == np.int32
    freq = np.stack([np.bincount(r, minlength=4) / 50_000 for r in s])
    assert freq[0, 3] == 0
    np.testing.assert_allclose(freq, p, atol=0.01)
    # The compiled draw is the interpreter's, bit for bit.
    interpreted = fj.function(lambda k, lg: fj.random.categorical(k, lg[:, None, :], shape=(2, 50_000)),
                              interpret=True)
    np.testing.assert_array_equal(s, np.asarray(interpreted(fj.random.key(0), logits)))


def test_categorical_along_another_axis_and_a_shape_that_does_not_fit():
    logits = np.zeros((4, 5))
    assert np.asarray(fj.random.categorical(fj.random.key(1), logits, axis=0)).shape == (5,)
    assert np.asarray(fj.random.categorical(fj.random.key(1), logits)).max() < 5
    with pytest.raises(fj.FlowjitTypeError, match=r"shape \[3\] does not take the logits' batch shape \[4\]"):
        fj.random.categorical(fj.random.key(1), logits, shape=(3,))


# ---- JAX's distributions (jax.random's names and signatures) ---------------------------------
N = 20_000
stats = pytest.importorskip("scipy.stats")

# (name, the draw, scipy's distribution): a Kolmogorov-Smirnov test of N compiled draws from
# a fixed key (deterministic; p above 1e-3), and the same draw on the interpreter.
CONTINUOUS = [
    ("exponential", lambda k: fj.random.exponential(k, (N,)), stats.expon()),
    ("laplace", lambda k: fj.random.laplace(k, (N,)), stats.laplace()),
    ("logistic", lambda k: fj.random.logistic(k, (N,), fj.float64), stats.logistic()),
    ("cauchy", lambda k: fj.random.cauchy(k, (N,)), stats.cauchy()),
    ("truncated_normal", lambda k: fj.random.truncated_normal(k, -0.5, 2.0, (N,)), stats.truncnorm(-0.5, 2.0)),
    ("gamma", lambda k: fj.random.gamma(k, 2.5, (N,)), stats.gamma(2.5)),
    ("gamma_below_one", lambda k: fj.random.gamma(k, 0.3, (N,), fj.float64), stats.gamma(0.3)),
    ("beta", lambda k: fj.random.beta(k, 2.0, 0.5, (N,)), stats.beta(2.0, 0.5)),
    ("chisquare", lambda k: fj.random.chisquare(k, 3.0, (N,)), stats.chi2(3.0)),
    ("t", lambda k: fj.random.t(k, 4.0, (N,)), stats.t(4.0)),
    ("uniform_bounds", lambda k: fj.random.uniform(k, (N,), minval=-3.0, maxval=2.5), stats.uniform(-3.0, 5.5)),
    ("generalized_normal", lambda k: fj.random.generalized_normal(k, 2.0, (N,)), stats.gennorm(2.0)),
    ("generalized_normal_p1", lambda k: fj.random.generalized_normal(k, 1.0, (N,), fj.float64), stats.gennorm(1.0)),
    ("generalized_normal_p4", lambda k: fj.random.generalized_normal(k, 4.0, (N,)), stats.gennorm(4.0)),
    ("lognormal", lambda k: fj.random.lognormal(k, 0.7, (N,)), stats.lognorm(0.7)),
    ("pareto", lambda k: fj.random.pareto(k, 3.0, (N,)), stats.pareto(3.0)),
    ("weibull_min", lambda k: fj.random.weibull_min(k, 2.0, 1.5, (N,)), stats.weibull_min(1.5, scale=2.0)),
    ("rayleigh", lambda k: fj.random.rayleigh(k, 1.5, (N,)), stats.rayleigh(scale=1.5)),
    ("maxwell", lambda k: fj.random.maxwell(k, (N,)), stats.maxwell()),
    ("wald", lambda k: fj.random.wald(k, 0.8, (N,)), stats.invgauss(0.8)),
    ("triangular", lambda k: fj.random.triangular(k, -1.0, 0.5, 2.0, (N,)), stats.triang(0.5, loc=-1.0, scale=3.0)),
    ("f", lambda k: fj.random.f(k, 5.0, 8.0, (N,)), stats.f(5.0, 8.0)),
    ("loggamma", lambda k: fj.random.loggamma(k, 2.5, (N,)), stats.loggamma(2.5)),
    ("loggamma_below_one", lambda k: fj.random.loggamma(k, 0.05, (N,), fj.float64), stats.loggamma(0.05)),
]


@pytest.mark.parametrize(("name", "draw", "law"), CONTINUOUS, ids=[c[0] for c in CONTINUOUS])
def test_each_distribution_draws_its_law_and_compiles_to_the_interpreters_values(name, draw, law):
    key = fj.random.key(11)
    x = np.asarray(fj.function(draw)(key))
    assert x.shape == (N,) and np.isfinite(x).all()
    assert stats.kstest(x, law.cdf).pvalue > 1e-3, name
    # The compiled program's values are the interpreter's (its transcendental functions
    # to a few ulps of NumPy's).
    tol = 1e-5 if x.dtype == np.float32 else 1e-12
    np.testing.assert_allclose(x, np.asarray(fj.function(draw, interpret=True)(key)), rtol=tol, atol=tol)


def test_a_truncated_normal_stays_inside_its_open_interval():
    x = np.asarray(fj.function(lambda k: fj.random.truncated_normal(k, -2.0, 2.0, (N,)))(fj.random.key(3)))
    assert (x > -2.0).all() and (x < 2.0).all()
    assert abs(x.var() - stats.truncnorm(-2, 2).var()) < 0.03


def test_gamma_broadcasts_its_shapes_and_each_element_follows_its_own():
    a = np.array([0.2, 1.0, 7.5], np.float32)
    x = np.asarray(fj.function(lambda k, a: fj.random.gamma(k, a, (N, 3)))(fj.random.key(4), a))
    assert x.shape == (N, 3) and (x > 0).all()
    for j in range(3):
        assert stats.kstest(x[:, j], stats.gamma(a[j]).cdf).pvalue > 1e-3




@pytest.mark.parametrize("draw", [
    lambda k: fj.random.poisson(k, np.array([3.0, 40.0]), (64, 2)),
    lambda k: fj.random.binomial(k, np.array([5.0, 500.0]), 0.3, (64, 2)),
    lambda k: fj.random.multinomial(k, 20.0, np.array([0.2, 0.3, 0.5]), shape=(64,)),
    lambda k: fj.grad(lambda a: fj.random.gamma(k, a, (64,)).sum())(2.5),
    lambda k: fj.random.truncated_normal(k, -2.0, 1.0, (64,)),
], ids=["poisson", "binomial", "multinomial", "gamma-derivative", "truncated-normal"])
def test_draws_using_special_functions_run_as_one_native_program(draw):
    # lgamma (the rejection samplers' bounds), digamma (the gamma draw's derivative) and erfinv
    # (the truncated normal's inverse CDF) are decomposed into elementwise ops, so these stay
    # on the native path.
    f = fj.function(draw)
    out = f(fj.random.key(23))
    (entry,) = f._cache.values()
    assert entry.executable._program is not None, entry.executable.native_reason
    np.testing.assert_array_equal(np.asarray(f(fj.random.key(23))), np.asarray(out))

def test_gamma_draws_move_with_their_shape_at_a_fixed_quantile():
    # The implicit derivative (as jax.random.gamma): each sample's dx/da is the central
    # difference of scipy's inverse of P(a, .) at that sample's quantile, on both sides of
    # the a < 1 boost and of the series / continued-fraction switch; the interpreter agrees.
    special = pytest.importorskip("scipy.special")
    a = np.array([0.2, 0.3, 1.0, 2.5, 7.0, 40.0, 300.0])
    key = fj.random.key(21)
    x = np.asarray(fj.function(lambda k, a: fj.random.gamma(k, a, dtype=fj.float64))(key, a))
    grad = fj.grad(lambda a, k: fj.random.gamma(k, a, dtype=fj.float64).sum())
    got = np.asarray(fj.function(grad)(a, key))
    q, h = special.gammainc(a, x), 1e-5 * a
    np.testing.assert_allclose(got, (special.gammaincinv(a + h, q) - special.gammaincinv(a - h, q)) / (2 * h),
                               rtol=1e-6)
    np.testing.assert_allclose(np.asarray(fj.function(grad, interpret=True)(a, key)), got, rtol=1e-12)
    # A scalar shape broadcast to many draws gets their sum; float32 draws a float32 gradient.
    g32 = fj.grad(lambda a: fj.random.gamma(key, a, (4,)).sum())(np.float32(2.0))
    assert g32.dtype == np.float32 and np.isfinite(g32)


@pytest.mark.parametrize("a", [0.4, 3.0])
def test_the_mean_gradients_of_gamma_beta_and_loggamma_draws_are_their_laws(a):
    # Over 20,000 draws: d mean(gamma(a)) / da -> dE[x]/da = 1; beta(a, 2)'s -> 2 / (a + 2)**2;
    # loggamma's -> trigamma(a) (E[log x] = digamma(a)), within 4 standard errors of the
    # per-draw derivatives (each draw given its own copy of a); a scalar a gets their mean.
    special = pytest.importorskip("scipy.special")
    key = fj.random.key(22)
    for draw, want in [(lambda a: fj.random.gamma(key, a, (N,), fj.float64), 1.0),
                       (lambda a: fj.random.beta(key, a, 2.0, (N,), fj.float64), 2 / (a + 2) ** 2),
                       (lambda a: fj.random.loggamma(key, a, (N,), fj.float64), special.polygamma(1, a))]:
        per_draw = np.asarray(fj.function(fj.grad(lambda a: draw(a).sum()))(np.full(N, a)))
        assert abs(per_draw.mean() - want) < 4 * per_draw.std() / np.sqrt(N), (per_draw.mean(), want)
        np.testing.assert_allclose(fj.function(fj.grad(lambda a: draw(a).mean()))(a), per_draw.mean(), rtol=1e-9)


def test_dirichlet_rows_sum_to_one_with_the_dirichlet_means():
    alpha = np.array([1.0, 2.0, 5.0])
    x = np.asarray(fj.function(lambda k: fj.random.dirichlet(k, alpha, (N,), fj.float64))(fj.random.key(5)))
    np.testing.assert_allclose(x.sum(axis=-1), 1.0, rtol=1e-12)
    np.testing.assert_allclose(x.mean(axis=0), alpha / alpha.sum(), atol=0.01)


def test_multivariate_normal_has_its_mean_and_covariance():
    mean, cov = np.array([1.0, -2.0, 0.5]), np.array([[2.0, 0.6, 0.0], [0.6, 1.0, -0.3], [0.0, -0.3, 0.5]])
    x = np.asarray(fj.function(lambda k: fj.random.multivariate_normal(k, mean, cov, (N,), fj.float64))(
        fj.random.key(6)))
    assert x.shape == (N, 3)
    np.testing.assert_allclose(x.mean(axis=0), mean, atol=0.05)
    np.testing.assert_allclose(np.cov(x.T), cov, atol=0.06)
    with pytest.raises(fj.FlowjitTypeError, match=r"must end in \(3, 3\)"):
        fj.random.multivariate_normal(fj.random.key(0), mean, np.eye(2))


def test_orthogonal_matrices_are_orthogonal_and_not_all_alike():
    q = np.asarray(fj.function(lambda k: fj.random.orthogonal(k, 5, (3,), fj.float64))(fj.random.key(7)))
    assert q.shape == (3, 5, 5)
    np.testing.assert_allclose(q @ np.swapaxes(q, -1, -2), np.broadcast_to(np.eye(5), q.shape), atol=1e-12)
    assert np.abs(q[0] - q[1]).max() > 0.1


def test_rademacher_is_minus_one_or_one_evenly():
    x = np.asarray(fj.function(lambda k: fj.random.rademacher(k, (N,)))(fj.random.key(8)))
    assert set(np.unique(x)) == {-1, 1} and x.dtype == np.int32 and abs(x.mean()) < 0.03


def test_fold_in_keys_are_deterministic_independent_and_take_traced_data():
    key = fj.random.key(0)
    a, b = np.asarray(fj.random.fold_in(key, 1)), np.asarray(fj.random.fold_in(key, 2))
    assert a.shape == (2,) and a.dtype == np.int32 and not np.array_equal(a, b)
    np.testing.assert_array_equal(a, np.asarray(fj.random.fold_in(key, 1)))
    np.testing.assert_array_equal(np.asarray(fj.random.fold_in(key, 2**32 + 1)), a)   # modulo 2**32
    np.testing.assert_array_equal(np.asarray(fj.random.fold_in(key, -1)),
                                  np.asarray(fj.random.fold_in(key, 2**32 - 1)))
    traced = fj.function(lambda k, i: fj.random.fold_in(k, i))
    np.testing.assert_array_equal(np.asarray(traced(key, np.int32(2))), b)
    # Streams from folded keys look independent: the draws of step 0 and step 1.
    u = np.stack([np.asarray(fj.random.uniform(fj.random.fold_in(key, i), (N,))) for i in range(2)])
    assert abs(np.corrcoef(u)[0, 1]) < 0.03
    with pytest.raises(fj.FlowjitTypeError, match="must be an integer"):
        fj.random.fold_in(key, 1.5)


def test_permutation_shuffles_an_axis_or_each_slice():
    key = fj.random.key(9)
    p = np.asarray(fj.function(lambda k: fj.random.permutation(k, 50))(key))
    assert sorted(p.tolist()) == list(range(50)) and p.tolist() != list(range(50))
    x = np.arange(24.0).reshape(4, 6)
    cols = np.asarray(fj.function(lambda k, x: fj.random.permutation(k, x, axis=1))(key, x))
    assert sorted(map(tuple, cols.T.tolist())) == sorted(map(tuple, x.T.tolist()))   # whole columns moved
    rows = np.asarray(fj.function(lambda k, x: fj.random.permutation(k, x, axis=1, independent=True))(key, x))
    for r, orig in zip(rows, x):
        assert sorted(r.tolist()) == orig.tolist()
    assert len({tuple(np.argsort(r)) for r in rows}) > 1                        # each row its own order


def test_choice_with_and_without_replacement_and_probabilities():
    key = fj.random.key(10)
    picked = np.asarray(fj.function(lambda k: fj.random.choice(k, 20, (20,), replace=False))(key))
    assert sorted(picked.tolist()) == list(range(20))
    p = np.array([0.1, 0.0, 0.6, 0.3])
    draws = np.asarray(fj.function(lambda k, p: fj.random.choice(k, 4, (N,), p=p))(key, p))
    np.testing.assert_allclose(np.bincount(draws, minlength=4) / N, p, atol=0.015)
    # Without replacement in proportion to p: the impossible element never, the likeliest first most often.
    firsts = [int(np.asarray(fj.random.choice(fj.random.fold_in(key, i), 4, (3,), replace=False, p=p))[0])
              for i in range(300)]
    counts = np.bincount(firsts, minlength=4)
    assert counts[1] == 0 and counts.argmax() == 2
    rows = np.arange(12).reshape(4, 3)
    taken = np.asarray(fj.random.choice(key, rows, (2,), replace=False))
    assert taken.shape == (2, 3) and all(any((t == r).all() for r in rows) for t in taken)
    with pytest.raises(fj.FlowjitTypeError, match="cannot take 5 elements from 4 without replacement"):
        fj.random.choice(key, 4, (5,), replace=False)


@pytest.mark.parametrize("lam", [0.7, 4.0, 10.0, 37.0, 1000.0])
def test_poisson_counts_follow_the_poisson_law_on_both_sides_of_the_method_switch(lam):
    # Knuth's product below POISSON_REJECTION_RATE, transformed rejection from it: a
    # chi-squared test of N compiled draws against the Poisson pmf (bins of expected count
    # 5 or more, the tails pooled), and the interpreter's counts exactly.
    key = fj.random.key(12)
    draw = fj.function(lambda k: fj.random.poisson(k, lam, (N,)))
    x = np.asarray(draw(key))
    assert x.dtype == np.int32 and x.min() >= 0
    np.testing.assert_array_equal(x, np.asarray(fj.function(lambda k: fj.random.poisson(k, lam, (N,)),
                                                            interpret=True)(key)))
    law = stats.poisson(lam)
    lo, hi = int(law.ppf(1e-4)), int(law.ppf(1 - 1e-4))
    edges = np.arange(lo, hi + 1)
    observed = np.array([(x <= lo).sum(), *[(x == v).sum() for v in edges[1:-1]], (x >= hi).sum()])
    expected = N * np.array([law.cdf(lo), *law.pmf(edges[1:-1]), law.sf(hi - 1)])
    keep = expected >= 5
    observed, expected = observed[keep], expected[keep] * observed[keep].sum() / expected[keep].sum()
    assert stats.chisquare(observed, expected).pvalue > 1e-3


def test_poisson_of_rates_in_an_array_and_of_zero():
    lam = np.array([0.0, 0.5, 12.0, 250.0])
    x = np.asarray(fj.function(lambda k, l: fj.random.poisson(k, l, (N, 4)))(fj.random.key(13), lam))
    assert (x[:, 0] == 0).all()
    np.testing.assert_allclose(x.mean(axis=0), lam, rtol=0.03, atol=0.02)
    np.testing.assert_allclose(x.var(axis=0), lam, rtol=0.06, atol=0.02)


def _chi_squared_pvalue(x: np.ndarray, law) -> float:
    """A chi-squared test of integer draws against a discrete law (bins of expected count
    5 or more, the tails pooled)."""
    lo, hi = int(law.ppf(1e-4)), int(law.ppf(1 - 1e-4))
    if hi <= lo + 1:
        lo, hi = lo - 1, hi + 1
    edges = np.arange(lo, hi + 1)
    observed = np.array([(x <= lo).sum(), *[(x == v).sum() for v in edges[1:-1]], (x >= hi).sum()])
    expected = len(x) * np.array([law.cdf(lo), *law.pmf(edges[1:-1]), law.sf(hi - 1)])
    keep = expected >= 5
    observed, expected = observed[keep], expected[keep] * observed[keep].sum() / expected[keep].sum()
    return stats.chisquare(observed, expected).pvalue


@pytest.mark.parametrize(("n", "p"), [(5, 0.3), (40, 0.2), (60, 0.1), (100, 0.4), (50, 0.8), (1000, 0.02),
                                      (30, 0.999), (2000, 0.5)])
def test_binomial_counts_follow_the_binomial_law_on_both_sides_of_the_method_switch(n, p):
    # Geometric waiting times below a mean n * min(p, 1 - p) of 10, transformed rejection
    # from it; p above 1/2 drawn as n minus the count of the other outcome.
    key = fj.random.key(14)
    draw = fj.function(lambda k: fj.random.binomial(k, n, p, (N,)))
    x = np.asarray(draw(key))
    assert x.dtype == np.float32 and x.min() >= 0 and x.max() <= n and (x == np.round(x)).all()
    np.testing.assert_array_equal(x, np.asarray(fj.function(lambda k: fj.random.binomial(k, n, p, (N,)),
                                                            interpret=True)(key)))
    assert _chi_squared_pvalue(x, stats.binom(n, p)) > 1e-3


def test_binomial_of_counts_and_probabilities_in_arrays_and_at_the_edges():
    n = np.array([0.0, 7.0, 7.0, 12.0, 500.0])
    p = np.array([0.5, 0.0, 1.0, 0.5, 0.3])
    x = np.asarray(fj.function(lambda k, n, p: fj.random.binomial(k, n, p, (N, 5), fj.float64))(
        fj.random.key(15), n, p))
    assert x.dtype == np.float64 and (x[:, 0] == 0).all() and (x[:, 1] == 0).all() and (x[:, 2] == 7).all()
    np.testing.assert_allclose(x.mean(axis=0), n * p, rtol=0.02, atol=1e-9)
    np.testing.assert_allclose(x.var(axis=0), n * p * (1 - p), rtol=0.06, atol=1e-9)
    shaped = fj.function(lambda k: fj.random.binomial(k, np.full((3, 1), 10.0), np.array([0.2, 0.9])))
    assert np.asarray(shaped(fj.random.key(16))).shape == (3, 2)



def test_multinomial_counts_place_every_trial_with_the_multinomial_law():
    # One binomial an outcome in a scan over the outcomes: every row sums to n, an outcome of
    # probability 0 gets none, the counts have the multinomial's means and covariances
    # (n p_i (1 - p_i), -n p_i p_j), a joint chi-squared test over a small n's outcomes
    # passes, and the compiled draw is the interpreter's.
    p = np.array([0.1, 0.0, 0.25, 0.15, 0.5])
    draw = fj.function(lambda k, n, p: fj.random.multinomial(k, n, p, shape=(N,)))
    x = np.asarray(draw(fj.random.key(17), 40.0, p))
    assert x.shape == (N, 5) and x.dtype == np.float32 and (x == np.round(x)).all() and x.min() >= 0
    assert (x.sum(axis=1) == 40).all() and (x[:, 1] == 0).all()
    np.testing.assert_allclose(x.mean(axis=0), 40 * p, rtol=0.02, atol=1e-9)
    np.testing.assert_allclose(np.cov(x.T), 40 * (np.diag(p) - np.outer(p, p)), rtol=0.08, atol=0.03)
    np.testing.assert_array_equal(x, np.asarray(fj.function(
        lambda k, n, p: fj.random.multinomial(k, n, p, shape=(N,)), interpret=True)(fj.random.key(17), 40.0, p)))
    small = np.asarray(draw(fj.random.key(18), 3.0, np.array([0.2, 0.3, 0.5])))
    outcomes, observed = np.unique(small, axis=0, return_counts=True)
    expected = N * stats.multinomial(3, [0.2, 0.3, 0.5]).pmf(outcomes)
    assert len(outcomes) == 10 and stats.chisquare(observed, expected).pvalue > 1e-3


def test_multinomial_broadcasts_n_over_the_batch_and_takes_unnormalized_probabilities():
    n = np.array([[0.0], [7.0], [1000.0]])
    p = np.array([[2.0, 6.0, 0.0], [1.0, 1.0, 2.0]])       # weights: the shares are p / p.sum()
    x = np.asarray(fj.function(lambda k: fj.random.multinomial(k, n, p, dtype=fj.float64))(fj.random.key(19)))
    assert x.shape == (3, 2, 3) and x.dtype == np.float64
    np.testing.assert_array_equal(x.sum(axis=-1), np.broadcast_to(n, (3, 2)))
    assert (x[0] == 0).all() and (x[:, 0, 2] == 0).all()
    batch = np.asarray(fj.function(lambda k: fj.random.multinomial(k, 10.0, p, shape=(4, 2)))(fj.random.key(20)))
    assert batch.shape == (4, 2, 3) and (batch.sum(axis=-1) == 10).all()
    with pytest.raises(fj.FlowjitTypeError, match="axis of outcomes"):
        fj.function(lambda k: fj.random.multinomial(k, 5.0, 0.5))(fj.random.key(0))

def test_bits_are_the_uniform_draws_words_and_every_bit_is_a_fair_coin():
    key = fj.random.key(17)
    words = np.asarray(fj.function(lambda k: fj.random.bits(k, (N,)))(key))
    assert words.dtype == np.uint32
    u = np.asarray(fj.function(lambda k: fj.random.uniform(k, (N,), fj.float64))(key))
    np.testing.assert_array_equal(words, np.floor(u * 2.0 ** 32).astype(np.uint32))
    for dtype, width in ((fj.uint8, 8), (fj.uint16, 16), (fj.uint32, 32), (fj.uint64, 64)):
        x = np.asarray(fj.function(lambda k, d=dtype: fj.random.bits(k, (N,), d))(key))
        assert x.dtype == np.dtype(f"uint{width}")
        ones = np.array([((x >> np.array(b, x.dtype)) & np.array(1, x.dtype)).mean() for b in range(width)])
        assert np.abs(ones - 0.5).max() < 0.02, (width, ones)   # 4.5 standard errors
    with pytest.raises(fj.FlowjitTypeError, match="unsigned integers"):
        fj.random.bits(key, (2,), fj.int32)


@pytest.mark.parametrize(("d", "p"), [(3, 2.0), (2, 1.0), (5, 2.0)])
def test_ball_points_are_uniform_in_the_unit_ball(d, p):
    x = np.asarray(fj.function(lambda k: fj.random.ball(k, d, p, (N,)))(fj.random.key(18)))
    assert x.shape == (N, d) and x.dtype == np.float32
    r = (np.abs(x.astype(np.float64)) ** p).sum(axis=1) ** (1 / p)
    assert r.max() <= 1 + 1e-6
    # uniform in the ball: the norm's d-th power is uniform on [0, 1], and no direction is favoured
    assert stats.kstest(r ** d, "uniform").pvalue > 1e-3
    np.testing.assert_allclose(x.mean(axis=0), 0, atol=0.02)


def test_geometric_trials_follow_the_geometric_law():
    key = fj.random.key(19)
    x = np.asarray(fj.function(lambda k: fj.random.geometric(k, 0.3, (N,)))(key))
    assert x.dtype == np.int32 and x.min() >= 1
    np.testing.assert_array_equal(x, np.asarray(fj.function(lambda k: fj.random.geometric(k, 0.3, (N,)),
                                                            interpret=True)(key)))
    assert _chi_squared_pvalue(x, stats.geom(0.3)) > 1e-3


def test_double_sided_maxwell_and_a_loggamma_whose_gamma_would_underflow():
    key = fj.random.key(20)
    x = np.asarray(fj.function(lambda k: fj.random.double_sided_maxwell(k, 1.0, 2.0, (N,)))(key))
    assert stats.kstest(np.abs(x - 1) / 2, stats.maxwell().cdf).pvalue > 1e-3 and abs((x > 1).mean() - 0.5) < 0.02
    # a = 0.001: a float32 gamma draw is 0 nearly always; its log stays finite
    logs = np.asarray(fj.function(lambda k: fj.random.loggamma(k, 0.001, (N,)))(key))
    draws = np.asarray(fj.function(lambda k: fj.random.gamma(k, 0.001, (N,)))(key))
    assert np.isfinite(logs).all() and (draws == 0).mean() > 0.5
