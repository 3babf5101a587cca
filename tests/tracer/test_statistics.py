"""NaN-aware reductions (flowjit.tracer.numpy.nan_reductions) and order statistics,
correlation and histograms (flowjit.tracer.numpy.statistics): each against NumPy eagerly,
compiled and as NumPy's own function on a traced array; all-NaN slices and gradients against
jax.numpy; one bad argument per family.

Functions are batched by family into one traced program each, so the file compiles a few
programs rather than one per function."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import flowjit as fj
from flowjit.ir.errors import FlowjitError
from tests.numpy_agreement import agree

RNG = np.random.default_rng(7)
A = RNG.normal(size=(3, 4, 5))
AN = A.copy()
AN[0, 1, :] = np.nan   # an all-NaN slice along the last axis
AN[1, 2, 3] = np.nan
AN[2, 0, ::2] = np.nan
B = RNG.normal(size=(3, 6))
AI = RNG.integers(-20, 20, size=(3, 4, 5))
METHODS = ("linear", "lower", "higher", "nearest", "midpoint", "inverted_cdf", "averaged_inverted_cdf",
           "closest_observation", "interpolated_inverted_cdf", "hazen", "weibull", "median_unbiased", "normal_unbiased")


@pytest.fixture(scope="module")
def jnp():
    jax = pytest.importorskip("jax")
    was = jax.config.read("jax_enable_x64")
    jax.config.update("jax_enable_x64", True)
    import jax.numpy
    yield jax.numpy
    jax.config.update("jax_enable_x64", was)


def _numpy(family, *args):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)   # NumPy's all-NaN and empty-slice warnings
        return family(np, *args)


def _check(family, *args, exact=False, protocol=True):
    """family(np, ...) against family(fj, ...) eagerly, compiled, and family(np, ...) traced."""
    want = _numpy(family, *args)
    agree(family(fj, *args), want, f"{family.__name__} eager", exact=True)
    agree(fj.function(lambda *a: family(fj, *a))(*args), want, f"{family.__name__} compiled", exact=exact)
    if protocol:
        agree(fj.function(lambda *a: family(np, *a))(*args), want, f"{family.__name__} as np.*", exact=exact)


def _nan_reductions(m, a, an, ai):
    a32 = an.astype(np.float32)
    return (m.nansum(an), m.nansum(an, axis=1), m.nansum(an, axis=(0, 2), keepdims=True), m.nansum(ai, axis=0),
            m.nanprod(an, axis=2), m.nanprod(ai > 0, axis=1), m.nanmean(an, axis=2), m.nanmean(an, axis=(0, 1)),
            m.nanmean(a32, axis=-1, keepdims=True), m.nanmean(ai, axis=1), m.nanvar(an, axis=2), m.nanvar(an, ddof=1),
            m.nanvar(an, axis=(1, 2), keepdims=True), m.nanstd(an, axis=2, ddof=1), m.nanstd(a32, axis=0),
            m.nanmax(an, axis=2), m.nanmin(an, axis=(0, 2)), m.nanmax(an), m.nanmin(a32, axis=1, keepdims=True),
            m.nanmax(ai, axis=1), m.nanargmax(an, axis=1), m.nanargmin(an, axis=0), m.nanargmax(an),
            m.nanargmin(ai, axis=2), m.nanargmax(an, axis=0, keepdims=True), m.nancumsum(an, axis=2),
            m.nancumsum(an), m.nancumprod(an, axis=1), m.nancumsum(ai, axis=0), m.nancumprod(a32, axis=2))


def test_nan_reductions_match_numpy():
    _check(_nan_reductions, A, AN, AI)


def test_all_nan_slices_follow_jax_numpy(jnp):
    """An all-NaN slice: NaN without a warning for max/min/mean/var/std, 0 and 1 for sum and
    product, -1 for nanargmax/nanargmin (NumPy raises), NaN for the order statistics."""
    x = np.array([[np.nan, np.nan, np.nan], [1.0, np.nan, 3.0]])

    def family(m, x):
        return (m.nanmax(x, axis=1), m.nanmin(x, axis=1), m.nanargmax(x, axis=1), m.nanargmin(x, axis=1),
                m.nanmean(x, axis=1), m.nanvar(x, axis=1), m.nanstd(x, axis=1), m.nansum(x, axis=1),
                m.nanprod(x, axis=1), m.nanmedian(x, axis=1), m.nanquantile(x, 0.3, axis=1),
                m.nanpercentile(x, np.array([10, 90]), axis=1), m.nanvar(x[1], ddof=2), m.nanvar(x[1], ddof=3))
    want = [np.asarray(w) for w in family(jnp, x)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        eager = family(fj, x)
    compiled = fj.function(lambda x: family(fj, x))(x)
    for got in (eager, compiled):
        for g, w in zip(got, want):
            np.testing.assert_allclose(np.asarray(g), w, rtol=1e-12)
    assert eager[2].dtype == np.int64 and list(eager[2]) == [-1, 2]


def _order_statistics(m, a, an, ai):
    return (m.median(a), m.median(a, axis=1), m.median(a[..., :4], axis=-1, keepdims=True), m.median(a, axis=(0, 2)),
            m.median(an, axis=2), m.median(ai, axis=0), m.median(a.astype(np.float32), axis=1),
            m.nanmedian(an, axis=2), m.nanmedian(an, axis=(0, 1), keepdims=True), m.nanmedian(an), m.nanmedian(ai),
            m.quantile(a, 0.3), m.quantile(a, np.array([0.0, 0.25, 0.5, 1.0]), axis=1),
            m.quantile(a, [0.2, 0.9], axis=(0, 2), keepdims=True), m.quantile(an, 0.5, axis=2),
            m.quantile(ai, 0.4, axis=2), m.quantile(ai, 0.4, axis=2, method="lower"),
            m.quantile(a.astype(np.float32), 0.7, axis=0, method="nearest"),
            m.nanquantile(an, 0.3, axis=2), m.nanquantile(an, [0.1, 0.6], axis=-1, method="higher"),
            m.nanquantile(an, 0.45, axis=(1, 2), method="midpoint"), m.percentile(a, 30, axis=1),
            m.percentile(a, [5, 50, 95]), m.nanpercentile(an, 65, axis=2, method="hazen"),
            m.nanpercentile(an.astype(np.float32), [25, 75], axis=0, keepdims=True))


def test_order_statistics_match_numpy():
    _check(_order_statistics, A, AN, AI, exact=True)


@pytest.mark.parametrize("method", METHODS)
def test_every_quantile_method_gives_numpy_bits(method):
    """Eagerly (through the same primitives as compiled code): every method, dtype and q kind,
    the same bits and dtype as NumPy's."""
    for x in (A, A.astype(np.float32), AI, AN):
        for q in (0.3, 1, np.float32(0.7), np.array([0.0, 0.5, 1.0]), np.array([0.1, 0.9], np.float32)):
            for axis in (None, 1, (0, 2)):
                for fn in (("quantile", "nanquantile") if np.isnan(x).any() else ("quantile",)):
                    want = _numpy(lambda m: getattr(m, fn)(x, q, axis=axis, method=method))
                    got = getattr(fj, fn)(x, q, axis=axis, method=method)
                    assert got.dtype == want.dtype and got.shape == np.shape(want), (fn, x.dtype, q, axis)
                    np.testing.assert_array_equal(got, want, err_msg=f"{fn} {x.dtype} q={q} axis={axis}")


def test_quantile_of_a_traced_q():
    q = np.array([0.2, 0.5, 0.95])
    f = fj.function(lambda a, an, q: (fj.quantile(a, q, axis=1), fj.nanquantile(an, q, axis=2, method="nearest"),
                                      fj.percentile(a, q * 100, axis=0, keepdims=True)))
    got = f(A, AN, q)
    want = _numpy(lambda m: (m.quantile(A, q, axis=1), m.nanquantile(AN, q, axis=2, method="nearest"),
                             m.percentile(A, q * 100, axis=0, keepdims=True)))
    agree(got, want, "traced q", exact=False)


def test_empty_slices_give_nan():
    e = np.zeros((2, 0))
    for fn in (fj.median, fj.nanmedian):
        np.testing.assert_array_equal(fn(e, axis=1), [np.nan, np.nan])
    np.testing.assert_array_equal(fj.quantile(e, [0.5], axis=1), [[np.nan, np.nan]])
    assert fj.median(np.zeros((0, 3)), axis=1).shape == (0,)


def _correlation_and_histograms(m, b, w, xi):
    length = {} if m is np else {"length": 45}
    return (m.cov(b), m.cov(b, rowvar=False, bias=True), m.cov(b[0], b[1]), m.cov(b, ddof=2),
            m.cov(b, fweights=xi[0] % 3, aweights=np.abs(w[1])), m.cov(b, aweights=np.abs(w[0])),
            m.cov(b.astype(np.float32)), m.corrcoef(b), m.corrcoef(b[0], b[2]), m.corrcoef(b[:2].T, rowvar=False),
            *m.histogram(b), *m.histogram(b, bins=4, range=(-1.0, 1.0)), *m.histogram(b, bins=3, weights=np.abs(w)),
            *m.histogram(b, bins=np.array([-2.0, -0.5, 0.0, 0.3, 2.0]), density=True),
            *m.histogram(b.astype(np.float32), bins=5), *m.histogram(xi, bins=6), m.histogram_bin_edges(w, 4),
            m.bincount(np.abs(xi[0]), minlength=45, **length),
            m.bincount(np.abs(xi[1]), weights=w[0], minlength=45, **length),
            m.digitize(b, np.array([-1.0, 0.0, 0.5, 2.0])), m.digitize(b, np.array([2.0, 0.0, -1.0]), right=True),
            m.digitize(xi, np.array([-5, 0, 5])))


def test_correlation_and_histograms_match_numpy():
    rng = np.random.default_rng(2)
    w = rng.normal(size=(3, 6))
    xi = rng.integers(-40, 40, size=(3, 6))
    _check(_correlation_and_histograms, B, w, xi, protocol=False)   # np.bincount has no length=


def test_bincount_and_histogram_on_traced_arrays():
    """A traced bincount takes JAX's length= (values past it dropped, negative ones counted
    as 0); without it the error names the function, the array and the fix. Values outside a
    histogram's range are not counted; its range may be traced."""
    x = np.array([0, 3, 3, 7, -2, 1])
    got = fj.function(lambda x: fj.bincount(x, length=5))(x)
    np.testing.assert_array_equal(got, [2, 1, 0, 2, 0])
    with pytest.raises(FlowjitError, match=r"bincount on a traced array \(i64\[6\]\) at test_statistics.py:\d+.*"
                                           r"length=N"):
        fj.function(lambda x: fj.bincount(x))(x)
    v = np.array([-3.0, 0.1, 0.2, 0.9, 1.0, 5.0, np.nan])
    counts, edges = fj.function(lambda v, lo, hi: fj.histogram(v, bins=2, range=(lo, hi)))(v, 0.0, 1.0)
    np.testing.assert_array_equal(counts, [2, 2])
    np.testing.assert_array_equal(edges, [0.0, 0.5, 1.0])


def test_gradients_match_jax(jnp):
    an = AN[:, :, 0].T   # (4, 3) with NaNs
    a = A[0]
    w = np.random.default_rng(1).normal(size=(4, 5))
    cases = {
        "nanmean": (lambda m, x: m.nansum(m.nanmean(x, axis=0) * np.array([1.0, 2.0, 3.0])), an),
        "nansum": (lambda m, x: m.nansum(x * 2.0 + 1.0), an),
        "nanvar": (lambda m, x: m.nanvar(x, axis=0, ddof=1).sum(), an),
        "nanstd": (lambda m, x: m.nanstd(x, axis=0).sum(), an),
        "nanmax": (lambda m, x: m.nanmax(x, axis=0).sum() - m.nanmin(x, axis=0).sum(), an),
        "median": (lambda m, x: (m.median(x, axis=1) * np.arange(4.0)).sum() + m.median(x[:, :4]), a),
        "nanmedian": (lambda m, x: m.nanmedian(x, axis=0).sum(), an),
        "quantile": (lambda m, x: (m.quantile(x, np.array([0.1, 0.45, 0.9]), axis=0) * w[:3]).sum(), a),
        "nanquantile": (lambda m, x: m.nanquantile(x, 0.3, axis=0).sum(), an),
        "percentile": (lambda m, x: m.percentile(x, 37.0) + m.percentile(x, 50.0, axis=1).sum(), a),
        "cov": (lambda m, x: (m.cov(x) * w[:, :4]).sum() + (m.corrcoef(x) * w[:, 1:]).sum(), a),
    }
    for name, (f, x) in cases.items():
        want = np.asarray(jnp_grad(jnp, f)(x))
        np.testing.assert_allclose(fj.grad(lambda x: f(fj, x))(x), want, rtol=1e-10, atol=1e-12, err_msg=name)
    f, x = cases["quantile"]
    np.testing.assert_allclose(fj.function(fj.grad(lambda x: f(fj, x)))(x), np.asarray(jnp_grad(jnp, f)(x)),
                               rtol=1e-10, atol=1e-12)


def jnp_grad(jnp, f):
    """jax.grad of f written against jax.numpy."""
    import jax
    return jax.grad(lambda x: f(jnp, x))


def test_bad_arguments_name_the_function_and_the_line():
    cases = [
        (lambda x: fj.quantile(x, 1.5), r"quantile: Quantiles must be in the range \[0, 1\]"),
        (lambda x: fj.percentile(x, -5), r"percentile: Percentiles must be in the range \[0, 100\]"),
        (lambda x: fj.quantile(x, 0.5, method="fancy"), r"quantile: method='fancy'; allowed: 'linear'"),
        (lambda x: fj.median(x, axis=3), r"median: axis=3 is out of bounds"),
        (lambda x: fj.quantile(x > 0, 0.5), r"quantile: method='linear' interpolates, which bools cannot"),
        (lambda x: fj.nanmax(x, out=x), r"nanmax: out= is not supported"),
        (lambda x: fj.histogram(x, bins="auto"), r"histogram: bins='auto'"),
        (lambda x: fj.histogram(x, range=(2.0, 1.0)), r"histogram: range=\(2.0, 1.0\): max must be larger"),
        (lambda x: fj.cov(x[None]), r"cov: m has more than 2 dimensions"),
        (lambda x: fj.digitize(x[0], np.array([0.0, 2.0, 1.0])), r"digitize: bins must be monotonically"),
        (lambda x: fj.bincount(x[0]), r"bincount: x must hold integers"),
    ]
    for fn, message in cases:
        with pytest.raises(FlowjitError, match=message) as info:
            fj.function(fn)(B)
        assert "test_statistics.py:" in str(info.value), str(info.value)


HIST2D_CASES = [dict(), dict(bins=5), dict(bins=[3, 4]), dict(bins=np.linspace(-2, 2, 6)),
                dict(bins=[np.array([-1.0, 0.0, 1.0]), 4]), dict(range=[(-1, 1), (0, 2)]), dict(density=True),
                dict(density=True, bins=(4, 6))]


@pytest.mark.parametrize("kw", HIST2D_CASES, ids=[str(k) for k in HIST2D_CASES])
def test_histogram2d_is_numpys_eagerly_and_compiled(kw):
    rng = np.random.default_rng(0)
    x, y, w = rng.standard_normal(200), rng.standard_normal(200), rng.random(200)
    for weights in (None, w):
        want = np.histogram2d(x, y, weights=weights, **kw)
        for got in (fj.histogram2d(x, y, weights=weights, **kw),
                    fj.function(lambda a, b, v: fj.histogram2d(a, b, weights=v, **kw))(x, y, weights)):
            for g, e in zip(got, want):
                np.testing.assert_allclose(g, e, rtol=1e-12)
                assert np.asarray(g).dtype == e.dtype


@pytest.mark.parametrize("kw", [dict(), dict(bins=(2, 3, 4)), dict(bins=4, density=True),
                                dict(range=[(-1, 1)] * 3), dict(bins=[np.array([-1.0, 0.0, 2.0]), 3, 2])])
def test_histogramdd_is_numpys_and_traces_as_np_histogramdd(kw):
    s = np.random.default_rng(1).standard_normal((100, 3)).astype(np.float32)
    want = np.histogramdd(s, **kw)
    got = fj.function(lambda a: np.histogramdd(a, **kw))(s)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-6)
    assert got[0].dtype == want[0].dtype
    for g, e in zip(got[1], want[1]):
        np.testing.assert_allclose(g, e, rtol=1e-6)
        assert g.dtype == e.dtype


def test_histogramdd_says_what_its_bins_must_be():
    s = np.zeros((10, 3))
    with pytest.raises(fj.ShapeError, match=r"histogramdd: .*bins has 2 entries for a 3-dimensional sample"):
        fj.histogramdd(s, bins=[2, 3])
