"""NumPy's everyday composites (roll, diag, linspace... in flowjit.tracer.numpy): each function against NumPy
compiled and interpreted, NumPy's own spelling (``np.roll`` on a traced array) traced as
flowjit's, gradients against central differences, and one bad argument per family.

Functions are batched by family into one traced program each, so the suite compiles a few
programs rather than one per function."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

import flowjit as fj
from flowjit.ir.errors import FlowjitError
from tests.finite_differences import central_differences

RNG = np.random.default_rng(0)
A = RNG.normal(size=(3, 4))
B = RNG.normal(size=(3, 4))
V = RNG.normal(size=4)
C = RNG.normal(size=(2, 3, 4))
ARGS = (A, B, V, C)


def _elementwise(m, a, b, v, c):
    z = a * (a > 0.5)  # exact zeros for sinc, heaviside, copysign
    return (m.hypot(a, b), m.hypot(a.astype(np.float32), 2), m.logaddexp(a, b), m.logaddexp2(a, b),
            m.logaddexp(a, a), m.fmax(a, b), m.fmin(a, b), m.exp2(a), m.exp2(a.astype(np.float32)),
            m.log2(m.abs(a)), m.log10(m.abs(b)), m.log2(m.abs(a).astype(np.float32)), m.degrees(a),
            m.radians(b), m.rad2deg(a.astype(np.float32)), m.deg2rad(b), m.cbrt(a), m.cbrt(b.astype(np.float32)),
            m.sinc(z), m.heaviside(z, b), m.copysign(a, b), m.copysign(3.0, -z), m.nan_to_num(a))


def _nan_cases(m, a, b, v, c):
    n = m.where(a > 0.5, np.nan, m.where(a < -0.8, np.inf, m.where(a < -0.5, -np.inf, a)))
    return (m.fmax(n, b), m.fmin(b, n), m.fmax(n, n), m.fmax(m.astype(a > 0, np.int32), 1),
            m.nan_to_num(n), m.nan_to_num(n, nan=-1.0, posinf=7.0, neginf=-7.0), m.nan_to_num(n.astype(np.float32)),
            m.logaddexp(n, b), m.logaddexp(n, n), m.hypot(n, b), m.heaviside(n, b), m.exp2(n), m.sinc(n))


def _diagonals(m, a, b, v, c):
    return (m.diag(v), m.diag(v, 2), m.diag(v, -1), m.diag(a), m.diag(a, 2), m.diag(a, -2), m.diag(a, 9),
            m.diagonal(c), m.diagonal(c, 1, 2, 1), m.diagonal(c, -1, -1, 0), m.trace(a), m.trace(c, 1, 1, 2),
            m.trace(a > 0), m.tril(a), m.tril(c, -1), m.triu(a, 1), m.triu(c, -2), m.tril(v), m.triu(a > 0))


def _rearranging(m, a, b, v, c):
    return (m.roll(c, 5), m.roll(a, -1, 1), m.roll(c, (1, -2), (0, 2)), m.roll(c, 2, (0, 1)), m.rot90(a),
            m.rot90(c, 2, (1, 2)), m.rot90(c, -1, (2, 0)), m.flip(c), m.flip(c, (0, 2)), m.flip(a, -1),
            m.fliplr(a), m.flipud(v), m.repeat(a, 2), m.repeat(a, 3, 1), m.repeat(a, [1, 0, 2], 0), m.tile(v, 2),
            m.tile(a, (2, 1, 3)), m.tile(c, (2, 2)), m.append(a, b), m.append(a, b[:1], 0), m.append(v, 1.5),
            m.kron(a, v), m.kron(a[:2, :2], b[:2]), m.kron(2.0, v), m.cross(c[..., :3], c[..., 1:]),
            m.cross(a[:, :3], v[:3]), m.cross(a[:3, :3], b[:3, 1:], axisa=0, axisb=0, axisc=0),
            m.cross(a[:, 1:], a[:, :3]), m.cross(a[:, 2:], b[:, 2:]), *m.meshgrid(v, v[:3]),
            *m.meshgrid(v, a[0], v[:2], indexing="ij"), *m.meshgrid(v, v[:2], sparse=True))


def _stacking(m, a, b, v, c):
    return (m.vstack([v, a, b]), m.vstack((c, c)), m.hstack([a, b]), m.hstack([v, v[:2]]), m.dstack([a, b]),
            m.dstack([v, v]), m.column_stack([v[:3], a, b[:, 0]]), m.atleast_1d(a[0, 0]), m.atleast_2d(v),
            *m.atleast_3d(v, a, c), m.atleast_3d(a[0, 0]), m.vstack([v, v], dtype=np.float32),
            *m.array_split(c, 3, axis=2), *m.array_split(v, [1, 3, 9]), *m.hsplit(a, 2), *m.hsplit(v, [1]),
            *m.vsplit(c, 2), *m.dsplit(c, [1, 3]), *m.array_split(a, 2, axis=-1))


def _sequences(m, a, b, v, c):
    return (m.linspace(0, 1, 7), m.linspace(-2.5, 3, 4, endpoint=False), *m.linspace(1.0, 2.0, 5, retstep=True),
            m.linspace(v, 2 * v, 5), m.linspace(a[0, 0], b, 3, axis=-1), m.linspace(0, 10, 6, dtype=np.int32),
            m.linspace(v[0], v[1], 1), m.linspace(0.0, 1.0, 0), m.linspace(v.astype(np.float32), 1, 3),
            m.logspace(0, 2, 5), m.logspace(v, 1, 3, base=2.0), m.logspace(np.float32(0), np.float32(2), 4, base=2),
            m.logspace(0, 1, 3, base=v[:2] + 3, axis=-1), m.geomspace(1, 1000, 4), m.geomspace(-1, -100, 5,
                                                                                           endpoint=False),
            m.geomspace(m.abs(v) + 1, 8.0, 3), m.geomspace(2, 3, 4, dtype=np.float32))


def _statistics(m, a, b, v, c):
    return (m.diff(a), m.diff(c, 2, 1), m.diff(v, prepend=0.0, append=v[:2]), m.diff(a, axis=0, prepend=b[:1]),
            m.diff(a > 0), m.diff(v, 0), m.select([a > 0.5, a < -0.5], [a, b], default=-1.0),
            m.select([a > 0], [v]), m.select([a > 0, b > 0], [1, a.astype(np.float32)]), m.average(a),
            m.average(a, axis=1, weights=v), m.average(c, axis=(0, 2), weights=m.abs(c[:, 0]) + 1),
            *m.average(c, weights=c + 3, returned=True), *m.average(a, axis=0, returned=True),
            m.average(a, 1, b + 3, keepdims=True), m.ptp(a), m.ptp(c, axis=(0, 2), keepdims=True),
            m.cumprod(a, axis=1), m.cumprod(c), m.cumprod(c, axis=0), m.cumprod(a.astype(np.int32) + 2, axis=1),
            m.cumprod(v, dtype=np.float32))


def _calculus_and_comparisons(m, a, b, v, c):
    n = m.where(a > 0.5, np.nan, m.where(a < -0.8, np.inf, a))
    return (m.gradient(v), m.gradient(v, 0.5), *m.gradient(c), *m.gradient(a, 2.0, axis=(1, 0)),
            m.gradient(a, axis=-1, edge_order=2), *m.gradient(a, m.cumsum(m.abs(v[:3])) + v[3], m.abs(v) + 1.0),
            m.isclose(a, a + 1e-9), m.isclose(n, n), m.isclose(n, n, equal_nan=True), m.isclose(a, b, atol=1.0),
            m.allclose(a, a * (1 + 1e-7)), m.allclose(a, b), m.iscomplex(a), m.isreal(a), m.fabs(a),
            m.fabs(a > 0), m.inner(a, b), m.inner(v, 2.0), m.inner(c, a), m.rollaxis(c, 2), m.rollaxis(c, 0, 3),
            m.rollaxis(c, -1, 1), m.row_stack([v, a]))


FAMILIES = {"calculus_and_comparisons": _calculus_and_comparisons,
            "elementwise": _elementwise, "nan_cases": _nan_cases, "diagonals": _diagonals,
            "rearranging": _rearranging, "stacking": _stacking, "sequences": _sequences,
            "statistics": _statistics}


def _numpy(fn, *args):
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # NumPy 2's 2-component cross products
        return fn(np, *args)


def _assert_same(got, want, rtol=1e-12):
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        g, w = np.asarray(g), np.asarray(w)
        assert (g.shape, g.dtype) == (w.shape, w.dtype), f"result {i}: {g.shape} {g.dtype}, NumPy {w.shape} {w.dtype}"
        # NumPy's float32 functions are not all correctly rounded: an ulp either way.
        tol = rtol if w.dtype != np.float32 else min(rtol * 1e6, 3e-7)
        np.testing.assert_allclose(g, w, rtol=tol, atol=1e-14, err_msg=f"result {i}")


@pytest.mark.parametrize("family", FAMILIES)
def test_family_against_numpy_compiled_and_interpreted(family):
    fn = FAMILIES[family]
    want = _numpy(fn, *ARGS)
    for interpret in (False, True):
        got = fj.function(lambda *xs: fn(fj, *xs), interpret=interpret)(*ARGS)
        _assert_same(got, want)


@pytest.mark.parametrize("family", FAMILIES)
def test_numpy_spelling_traces_as_flowjit(family):
    # np.roll(x, 1) on traced x runs fj.roll (registered with numpy_counterpart): the same program.
    fn = FAMILIES[family]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        got = fj.function(lambda *xs: fn(np, *xs))(*ARGS)
    # (a call with no traced argument, np.geomspace(1, 1000, 4), is NumPy's own: ulps apart)
    _assert_same(got, fj.function(lambda *xs: fn(fj, *xs))(*ARGS), rtol=1e-15)


def test_logaddexp_second_derivative_at_a_tie():
    # d2/da2 logaddexp(a, b) = w (1 - w), w = sigmoid(a - b): 1/4 at a tie (the overflow-safe
    # form's max and |a - b| have kinks there, so the derivative is declared on its own).
    for f, scale in ((fj.logaddexp, 1.0), (fj.logaddexp2, math.log(2))):
        d2 = fj.grad(fj.grad(f))(0.4, 0.4)
        np.testing.assert_allclose(d2, 0.25 * scale, rtol=1e-12)
        np.testing.assert_allclose(fj.grad(fj.grad(f), argnums=1)(0.4, 0.4), -0.25 * scale, rtol=1e-12)
    np.testing.assert_array_equal(fj.grad(fj.logaddexp, argnums=(0, 1))(np.inf, np.inf), [0.5, 0.5])


def test_hypot_gradient_at_a_tie():
    # x / hypot and y / hypot, each (both went to x before: the autograd suite's hypot(a, a)).
    np.testing.assert_allclose(fj.grad(fj.hypot, argnums=(0, 1))(2.0, 2.0), [2 ** -0.5, 2 ** -0.5], rtol=1e-15)
    np.testing.assert_allclose(fj.grad(lambda a: fj.sum(fj.hypot(a, a)))(V), np.sqrt(2) * np.sign(V), rtol=1e-15)


@pytest.mark.parametrize("interpret", [False, True])
def test_hypot_is_numpy_bits(interpret):
    # C's hypot (glibc's, which NumPy calls): the composition big * sqrt(1 + (small/big)**2)
    # had been 1-2 ulp away on about 1% of random pairs, and inf beside a signaling NaN.
    r = np.random.default_rng(11)
    x = r.normal(size=20000) * 10.0 ** r.integers(-300, 300, 20000)
    y = r.normal(size=20000) * 10.0 ** r.integers(-300, 300, 20000)
    x[:5000] = r.normal(size=5000)
    y[:5000] = r.normal(size=5000)
    snan64 = np.array([0x7FF4000000000000], np.uint64).view(np.float64)
    snan32 = np.array([0x7FA00000], np.uint32).view(np.float32)
    x, y = np.concatenate([x, snan64, [np.inf]]), np.concatenate([y, [np.inf], snan64])
    with np.errstate(over="ignore", invalid="ignore"):
        x32, y32 = x.astype(np.float32), y.astype(np.float32)   # the cast quiets a NaN
    x32[-2], y32[-1] = snan32[0], snan32[0]
    got = fj.function(lambda *xs: [fj.hypot(*xs[:2]), fj.hypot(*xs[2:])], interpret=interpret)(x, y, x32, y32)
    with np.errstate(invalid="ignore"):
        want = np.hypot(x, y), np.hypot(x32, y32)
    assert np.isnan(want[0][-2:]).all() and np.isnan(want[1][-2:]).all()
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("interpret", [False, True])
def test_hypot_gradient_where_hypot_overflows_or_underflows(interpret):
    # x / hypot(x, y) of the inputs scaled by a power of two: where hypot overflows on finite
    # inputs the quotient had been x / inf = 0, and where it is subnormal the second
    # derivative took 1/y (inf) and gave inf - inf; at an infinite input the untaken
    # quotient inf / inf sent NaN into the second derivative.
    def f(a, b):
        return fj.sum(fj.hypot(a, b))

    grad = fj.function(fj.grad(f, argnums=(0, 1)), interpret=interpret)
    for dtype, big in ((np.float16, 60000.0), (np.float32, 3e38), (np.float64, 1.7e308)):
        a = np.array([big, big, -big], dtype)
        b = np.array([big, big / 2, big / 4], dtype)
        a64, b64 = a.astype(np.float64) / big, b.astype(np.float64) / big
        want = a64 / np.hypot(a64, b64), b64 / np.hypot(a64, b64)
        for g, w in zip(grad(a, b), want, strict=True):
            np.testing.assert_allclose(g, w, rtol=2e-3 if dtype == np.float16 else 1e-6)
    tiny = np.array([1e-320, 5e-324, -1e-310])
    ga, gb = grad(tiny, tiny)
    np.testing.assert_allclose(ga, np.sign(tiny) * 2 ** -0.5, rtol=1e-15)
    second = fj.function(fj.grad(lambda a, b: fj.sum(fj.grad(f)(a, b)), argnums=(0, 1)), interpret=interpret)
    d2a, d2b = second(np.array([1e-310, 5e-309, 6e-309, np.inf, np.inf, -np.inf, 3.0]),
                      np.array([0.0, 0.0, 0.0, 0.0, 1.0, np.inf, 4.0]))
    # d2/da2 = b^2 / y^3 and d2/da db = -a b / y^3: 0 at b = 0 and at an infinity (the limit)
    np.testing.assert_allclose(d2a, [0, 0, 0, 0, 0, 0, 16 / 125], atol=1e-15)
    np.testing.assert_allclose(d2b, [0, 0, 0, 0, 0, 0, -12 / 125], atol=1e-15)


def test_hypot_takes_numpys_argument_names():
    np.testing.assert_array_equal(fj.hypot(x1=A, x2=B), np.hypot(A, B))


def test_cbrt_in_float16_and_float32_is_float64s_rounded_once_everywhere():
    # Eager, interpreted, folded and compiled alike (NumPy's own float32 loop gives
    # 2.9999998 for cbrt(27)); float16 rounded once from float64, not through float32,
    # whose root can land on a float16 midpoint (2.658: 1.38525391 rounds to 1.385, not
    # 1.386); the gradient in float64 rounded once (float32's 1/(3 y y) had been 4 ulp off).
    x = np.float32([27, -27, 3.0])
    want = np.cbrt(x.astype(np.float64)).astype(np.float32)
    for got in (fj.cbrt(x), fj.function(fj.cbrt, interpret=True)(x), fj.function(fj.cbrt)(x),
                fj.function(lambda: fj.cbrt(np.float32([27, -27, 3.0])))()):
        np.testing.assert_array_equal(got, want)
    h = np.arange(1 << 16, dtype=np.uint16).view(np.float16)
    h = h[np.isfinite(h)]
    want16 = np.cbrt(h.astype(np.float64)).astype(np.float16)
    for got in (fj.function(fj.cbrt)(h), fj.function(fj.cbrt, interpret=True)(h)):
        np.testing.assert_array_equal(got, want16)
    grads = fj.function(fj.grad(lambda v: fj.sum(fj.cbrt(v))))(np.float32([3.0, 0.7, 1e-30]))
    x64 = np.float64([3.0, 0.7, 1e-30]).astype(np.float32).astype(np.float64)
    np.testing.assert_array_equal(grads, (1 / (3 * np.cbrt(x64) ** 2)).astype(np.float32))


def test_value_dependent_and_static_answers_as_numpy():
    z = np.array([1 + 1e-20j, 2 - 0j])
    assert fj.real_if_close(z).dtype == np.float64 and fj.real_if_close(z + 1e-3j).dtype == np.complex128
    assert fj.iscomplexobj(z) and fj.isrealobj(A) and not fj.iscomplexobj(A)
    np.testing.assert_array_equal(fj.iscomplex(np.array([1 + 0j, 2 + 1j])), [False, True])
    np.testing.assert_array_equal(fj.where([True, False, True])[0], [0, 2])  # one argument: nonzero
    with pytest.raises(FlowjitError, match="real_if_close.*fj.real"):
        fj.function(fj.real_if_close)(z)
    with pytest.raises(FlowjitError, match="fabs.*complex"):
        fj.fabs(z)
    # np.gradient is differentiable: its gradient against finite differences.
    g = fj.grad(lambda x: fj.sum(fj.gradient(x, 0.3) ** 2))(V)
    np.testing.assert_allclose(g, central_differences(lambda x: np.sum(np.gradient(x, 0.3) ** 2), [V], 0, 1e-6),
                               rtol=1e-6)


def test_eager_calls_compute_at_once():
    # Outside a trace the composites run on NumPy arrays through the same primitives.
    for family in ("diagonals", "sequences"):
        _assert_same(FAMILIES[family](fj, *ARGS), _numpy(FAMILIES[family], *ARGS))


def test_r_and_c_index_objects():
    x = np.arange(3.0)

    def build(m, v, a):
        return (m.r_[1:4, 0, v, 0:1:5j], m.r_[v, v * 2], m.c_[v, v], m.c_[a, a, a], m.r_["0,2,0", v, v],
                m.r_["-1", a, a], m.r_["0,2", v, a[:1]], m.c_[0:2:3j, v], m.r_[v, 2], m.r_[np.float32(1), v])
    a = np.ones((2, 3))
    want = build(np, x, a)
    _assert_same(build(fj, x, a), want)
    for interpret in (False, True):
        _assert_same(fj.function(lambda v, a: build(fj, v, a), interpret=interpret)(x, a), want)
    assert fj.function(lambda v: fj.r_[v, 2])(x.astype(np.float32)).dtype == np.float32  # a Python scalar is weak


SPECIAL = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 5e-324, 1e308, -1e308, 2.5, -3.0, 1e-300])
UNARY = ("exp2", "log2", "log10", "degrees", "radians", "cbrt", "sinc", "nan_to_num")
BINARY = ("hypot", "logaddexp", "logaddexp2", "fmax", "fmin", "heaviside", "copysign")


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_special_values_as_numpy(dtype):
    # Zeros of both signs, infinities, NaN, subnormals and extremes, every pair for binary
    # functions: the same values and signs as NumPy, compiled and interpreted.
    with np.errstate(over="ignore"):  # 1e308 is inf in float32
        x, y = (g.ravel().astype(dtype) for g in np.meshgrid(SPECIAL, SPECIAL))

    def run(m, x, y):
        return [getattr(m, n)(x) for n in UNARY] + [getattr(m, n)(x, y) for n in BINARY]
    want = _numpy(run, x, y)
    for interpret in (False, True):
        got = fj.function(lambda x, y: run(fj, x, y), interpret=interpret)(x, y)
        for name, g, w in zip(UNARY + BINARY, got, want, strict=True):
            same = np.isclose(g, w, rtol=3e-7 if dtype == np.float32 else 1e-13, atol=0)
            # A NaN's sign is noise, and so is the zero C's fmax picks from 0.0 and -0.0.
            noise = np.isnan(g) & np.isnan(w) | ((x == 0) & (y == 0) & (g == 0) if name in ("fmax", "fmin") else False)
            same = (same & (np.signbit(g) == np.signbit(w))) | noise
            assert same.all(), f"{name}: x={x[~same]} y={y[~same]} gives {g[~same]}, NumPy {w[~same]}"


# ---- gradients -------------------------------------------------------------------------------------


def _differentiable(m, a, b, v, c):
    # Away from kinks (ties, zeros): every float result of every differentiable family.
    return (m.hypot(a, b), m.logaddexp(a, b), m.logaddexp2(a, b), m.fmax(a, b), m.fmin(a, b), m.exp2(a),
            m.log2(m.abs(a)), m.log10(m.abs(b)), m.degrees(a), m.radians(b), m.cbrt(a), m.sinc(a),
            m.copysign(a, b), m.nan_to_num(a), m.diag(v, 1), m.diag(a), m.trace(c, 1, 1, 2), m.tril(c, -1),
            m.triu(a, 1), m.roll(c, (1, -2), (0, 2)), m.rot90(c, 1, (1, 2)), m.flip(a, 0), m.repeat(a, [1, 0, 2], 0),
            m.repeat(v, 2), m.tile(a, (2, 1, 3)), m.append(a, b), m.kron(a[:2, :2], b[:2]),
            m.cross(c[..., :3], c[..., 1:]), m.cross(a[:, 2:], b[:, 2:]), *m.meshgrid(v, a[0]),
            m.vstack([v, a]), m.hstack([a, b]), m.column_stack([v[:3], a]), m.dstack([a, b]),
            *m.array_split(c, 3, axis=2), m.linspace(v, b[0], 5), m.logspace(v, 1, 3, base=2.0),
            m.geomspace(m.abs(v) + 1, 8.0, 4), m.diff(c, 2, 1), m.diff(v, prepend=0.0),
            m.select([a > 0.5, a < -0.5], [a, b], default=v), m.average(a, axis=1, weights=m.abs(v) + 1),
            m.average(c, weights=m.abs(c) + 1), m.ptp(c, axis=(0, 2)), m.cumprod(a, axis=1), m.cumprod(c),
            m.r_[v, 0.5, a[0]], m.c_[v, a[1]], *m.atleast_3d(v, a))


def test_gradients_against_finite_differences():
    outs = _numpy(_differentiable, *ARGS)
    weights = [RNG.normal(size=np.shape(o)) for o in outs]

    def loss(m):
        def f(*xs):
            return sum((m.sum(o * w) for o, w in zip(_differentiable(m, *xs), weights)), start=0.0)
        return f

    grads = fj.grad(loss(fj), argnums=(0, 1, 2, 3))(*ARGS)
    for i, g in enumerate(grads):
        want = central_differences(lambda *xs: _numpy(lambda m, *ys: loss(m)(*ys), *xs), ARGS, i)
        np.testing.assert_allclose(g, want, rtol=1e-6, atol=1e-6, err_msg=f"argument {i}")


def test_gradients_stay_finite_where_the_function_is():
    zero = np.zeros(3)
    g = fj.grad(lambda x, y: fj.sum(fj.hypot(x, y)), argnums=(0, 1))(zero, zero)
    np.testing.assert_array_equal(g, [zero, zero])  # a subgradient at (0, 0) (JAX 0.10: 0.5 each)
    np.testing.assert_array_equal(fj.grad(lambda x: fj.sum(fj.sinc(x)))(zero), zero)
    np.testing.assert_array_equal(fj.grad(lambda x: fj.sum(fj.cbrt(x)))(zero), zero)  # not 0 * inf
    # At an infinity the derivative's limit, 0 (JAX's), not the NaN of inf / inf.
    edges = np.array([-np.inf, -8.0, np.inf, 8.0], np.float32)
    for f in (fj.function(fj.grad(lambda x: fj.sum(fj.cbrt(x)))),
              fj.function(fj.grad(lambda x: fj.sum(fj.cbrt(x))), interpret=True)):
        np.testing.assert_allclose(f(edges), [0.0, 1 / 12, 0.0, 1 / 12], rtol=1e-6)
    x = np.array([0.5, -1.0, 3.0])
    ga, gb = fj.grad(lambda a, b: fj.sum(fj.logaddexp(a, b)), argnums=(0, 1))(x, x)
    np.testing.assert_allclose([ga, gb], [np.full(3, 0.5)] * 2)  # a tie splits the gradient
    ga, gb = fj.grad(lambda a, b: fj.sum(fj.logaddexp2(a, b)), argnums=(0, 1))(x, x)
    np.testing.assert_allclose([ga, gb], [np.full(3, 0.5)] * 2)
    with_zero = np.array([2.0, 0.0, 3.0, 4.0])  # cumprod through a zero: the true derivative
    g = fj.grad(lambda v: fj.sum(fj.cumprod(v)))(with_zero)
    np.testing.assert_allclose(g, central_differences(lambda v: np.cumprod(v).sum(), [with_zero], 0), rtol=1e-6)


# ---- bad arguments -------------------------------------------------------------------------------


BAD = [
    (lambda x: fj.diag(x[None]), "diag: v must be 1-D or 2-D"),
    (lambda x: fj.diagonal(x, 0, 1, 1), "diagonal: axis1 and axis2 cannot be the same"),
    (lambda x: fj.tril(x[0, 0]), "tril: m must be at least 1-D"),
    (lambda x: fj.roll(x, x[0, 0]), "roll: shift must be static integers"),
    (lambda x: fj.roll(x, (1, 2, 3), (0, 1)), "roll: shift=(1, 2, 3) and axis=(0, 1) do not match"),
    (lambda x: fj.rot90(x, 1, (0, 0)), "rot90: axes must be different"),
    (lambda x: fj.flip(x, 3), "flip: axis=3 is out of bounds for an array of rank 2"),
    (lambda x: fj.repeat(x, [1, 2], axis=0), "repeat: repeats must be an int or 3 ints"),
    (lambda x: fj.tile(x, (-1,)), "tile: reps must be non-negative"),
    (lambda x: fj.cross(x, x), "cross: vectors must have 2 or 3 components, got 4 and 4"),
    (lambda x: fj.cross(x > 0, x > 0), "cross: bool vectors have no cross product"),
    (lambda x: fj.meshgrid(x, indexing="xx"), "meshgrid: indexing must be 'xy' or 'ij'"),
    (lambda x: fj.vsplit(x[0], 2), "vsplit: ary must have at least 2 dimensions"),
    (lambda x: fj.hsplit(x, 3), "hsplit: an axis of size 4 does not split into 3 equal sections"),
    (lambda x: fj.array_split(x, 0), "array_split: the number of sections must be larger than 0"),
    (lambda x: fj.linspace(0, x, -1), "linspace: num must be non-negative"),
    (lambda x: fj.linspace(0, x, x[0, 0]), "linspace: num must be a static Python int"),
    (lambda x: fj.geomspace(0, 1, 3), "geomspace: start must be non-zero"),
    (lambda x: fj.diff(x, -1), "diff: the order n must be non-negative"),
    (lambda x: fj.select([x], [x]), "select: condlist[0] must be a bool array"),
    (lambda x: fj.select([x > 0], []), "select: condlist (1) and choicelist (0) must have the same length"),
    (lambda x: fj.average(x, weights=x[0]), "average: weights of shape [4] differ from a's [3, 4]: give axis"),
    (lambda x: fj.average(x, axis=0, weights=x[0]), "average: weights of shape [4] must match"),
    (lambda x: fj.ptp(x > 0), "ptp: a bool array has no range"),
    (lambda x: fj.r_["r", x], "r_: directive 'r' is not supported"),
    (lambda x: fj.c_["0"], "c_: needs at least one slice, scalar or array"),
]


@pytest.mark.parametrize("bad, message", BAD, ids=[m.split(":")[0] + str(i) for i, (_, m) in enumerate(BAD)])
def test_bad_arguments_name_the_function_argument_and_line(bad, message):
    with pytest.raises(FlowjitError) as info:
        fj.function(bad)(A)
    text = str(info.value)
    assert message in text
    assert "test_numpy_extras.py" in text  # the user's line


def test_bad_arguments_through_numpy_spelling():
    with pytest.raises(FlowjitError, match=r"roll: shift must be static integers.*test_numpy_extras\.py"):
        fj.function(lambda x: np.roll(x, x[0, 0]))(A)


# ---- dtypes ------------------------------------------------------------------------------------

DTYPE_CASES = {
    **{n: (lambda n: lambda m, x: getattr(m, n)(x))(n)
       for n in ("exp2", "log2", "log10", "degrees", "radians", "cbrt", "sinc", "nan_to_num")},
    **{n: (lambda n: lambda m, x: (getattr(m, n)(x, x[::-1]), getattr(m, n)(x, 2)))(n)
       for n in ("hypot", "logaddexp", "logaddexp2", "fmax", "fmin", "heaviside", "copysign")},
    "diag": lambda m, x: m.diag(x), "trace": lambda m, x: m.trace(x), "tril": lambda m, x: m.tril(x),
    "roll": lambda m, x: m.roll(x, 1), "repeat": lambda m, x: m.repeat(x, 2), "tile": lambda m, x: m.tile(x, 2),
    "kron": lambda m, x: m.kron(x, x), "cross": lambda m, x: m.cross(x[:, :3], x[:, 1:]),
    "diff": lambda m, x: m.diff(x), "ptp": lambda m, x: m.ptp(x), "cumprod": lambda m, x: m.cumprod(x),
    "average": lambda m, x: m.average(x, axis=0, weights=x[:, 0]), "select": lambda m, x: m.select([x > 0], [x], 1),
    "vstack": lambda m, x: m.vstack([x, x]), "r_": lambda m, x: m.r_[x[0], 1], "c_": lambda m, x: m.c_[x[0], x[1]],
    "linspace": lambda m, x: m.linspace(x[0], x[1], 3), "logspace": lambda m, x: m.logspace(x[0], 2, 3),
    "meshgrid": lambda m, x: m.meshgrid(x[0], x[1]), "append": lambda m, x: m.append(x, 1),
}


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int32, np.bool_])
def test_dtypes_follow_numpy(dtype):
    # Ints and bools promote as NumPy's functions do (float64 mostly; float16 for a bool
    # ufunc; int64 sums), float32 and float16 stay. Where NumPy refuses a dtype, so does fj.
    x = (A * 3).astype(dtype)
    names, want = [], []
    for name, fn in DTYPE_CASES.items():
        try:
            want.append(_numpy(fn, x))
            names.append(name)
        except TypeError:
            with pytest.raises(FlowjitError, match=name):
                fj.function(lambda x: fn(fj, x))(x)
    got = fj.function(lambda x: [DTYPE_CASES[n](fj, x) for n in names])(x)
    for name, g, w in zip(names, got, want, strict=True):
        g, w = (g, w) if isinstance(w, (tuple, list)) else ([g], [w])
        for gi, wi in zip(g, w, strict=True):
            gi, wi = np.asarray(gi), np.asarray(wi)
            assert (gi.dtype, gi.shape) == (wi.dtype, wi.shape), name
            tol = {np.float16: 2e-3, np.float32: 3e-7}.get(wi.dtype.type, 1e-12)
            np.testing.assert_allclose(gi.astype(float), wi.astype(float), rtol=tol, atol=1e-12, err_msg=name)


# ---- einsum's '...' and diagonals (canonical_einsum, the rewrite fj.einsum is to call first) ----

EINSUMS = [("ii", "s"), ("ii->i", "s"), ("bii->b", "d"), ("iij->j", "t"), ("i...i", "u"), ("ij,jk", "s", "s"),
           ("...ij,...jk->...ik", "b", "c"), ("...ij,...jk", "e", "c4"), ("ij...,jk...->ik...", "s", "w"),
           ("i...->...", "b"), ("...i,...i", "b", "b"), ("...", "s"), ("ij,ij->", "s", "s"), ("ijk->kji", "b")]


def test_einsum_ellipsis_and_repeated_indices_as_numpy():
    from flowjit.tracer.numpy.products import canonical_einsum
    r = np.random.default_rng(3)
    arrays = {"s": r.normal(size=(3, 3)), "d": r.normal(size=(4, 3, 3)), "t": r.normal(size=(3, 3, 2)),
              "u": r.normal(size=(3, 4, 3)), "b": r.normal(size=(2, 3, 4)), "c": r.normal(size=(2, 4, 5)),
              "e": r.normal(size=(1, 3, 4)), "c4": r.normal(size=(2, 4, 5)), "w": r.normal(size=(3, 2, 5))}
    ops = [[arrays[k] for k in case[1:]] for case in EINSUMS]
    flat = [a for o in ops for a in o]

    def run(*xs):
        out, i = [], 0
        for (spec, *names) in EINSUMS:
            s, vals = canonical_einsum(spec, xs[i:i + len(names)])
            out.append(fj.einsum(s, *vals))
            i += len(names)
        return out
    want = [np.einsum(case[0], *o) for case, o in zip(EINSUMS, ops)]
    _assert_same(fj.function(run)(*flat), want)
    _assert_same(run(*flat), want)  # eagerly
    # The gradient of a trace through the diagonal: the identity.
    def trace(x):
        spec, vals = canonical_einsum("ii", [x])
        return fj.einsum(spec, *vals)
    g = fj.grad(trace)(arrays["s"])
    np.testing.assert_array_equal(g, np.eye(3))
    with pytest.raises(FlowjitError, match=r"einsum: the '\.\.\.' dimensions \[\[2\], \[3\]\] do not broadcast"):
        canonical_einsum("...i,...i", [arrays["b"][:, 0], arrays["s"]])
    with pytest.raises(FlowjitError, match="einsum: index 'i' repeated in 'ii' has sizes 3 and 4"):
        canonical_einsum("ii", [arrays["b"][0]])


def test_ndarray_methods_on_traced_arrays():
    def run(x):
        return x.diagonal(), x.diagonal(1), x.repeat(2), x.repeat([1, 2, 0], axis=0), \
            x.cumprod(), x.cumprod(1)
    _assert_same(fj.function(run)(A), run(A))


def test_float32_composites_are_correctly_rounded():
    # Computed in float64 and rounded once: each float32 result is the float64 function's
    # value rounded (NumPy's own float32 loops miss it by an ulp for a third of cbrt's inputs).
    r = np.random.default_rng(4)
    x = np.concatenate([r.uniform(-10, 10, 5000), 10.0 ** r.uniform(-30, 30, 5000)]).astype(np.float32)
    y = r.permutation(x)
    e = r.uniform(-120, 120, 10000).astype(np.float32)
    got = fj.function(lambda x, y, e: (fj.cbrt(x), fj.exp2(e), fj.log2(fj.abs(x)), fj.log10(fj.abs(x)),
                                       fj.hypot(x, y)))(x, y, e)
    x64, y64 = x.astype(np.float64), y.astype(np.float64)
    want = (np.cbrt(x64), np.exp2(e.astype(np.float64)), np.log2(np.abs(x64)), np.log10(np.abs(x64)),
            np.hypot(x64, y64))
    for name, g, w in zip(("cbrt", "exp2", "log2", "log10", "hypot"), got, want, strict=True):
        assert g.dtype == np.float32
        assert np.mean(g == w.astype(np.float32)) >= 0.9999, name


def test_fj_einsum_takes_ellipses_and_repeated_indices_as_numpy_does():
    rng = np.random.default_rng(3)
    a, b = rng.normal(size=(3, 4, 4)), rng.normal(size=(3, 4, 5))
    cases = [("ii->", (a[0],)), ("ii->i", (a[0],)), ("...ij,...jk->...ik", (a, b)), ("bii->b", (a,)), ("...ii", (a,)),
             ("i...,i...->...", (b, b))]
    for spec, ops in cases:
        got = fj.function(lambda *o, spec=spec: fj.einsum(spec, *o))(*ops)
        np.testing.assert_allclose(got, np.einsum(spec, *ops), rtol=1e-12, err_msg=spec)
        assert np.asarray(fj.function(lambda *o, spec=spec: np.einsum(spec, *o))(*ops)).shape == np.einsum(
            spec, *ops).shape
    np.testing.assert_allclose(fj.grad(lambda x: fj.einsum("ii->", x))(a[0]), np.eye(4))


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64, np.int8, np.uint8, np.int64, np.bool_])
def test_sinc_is_one_at_zero_in_every_dtype(dtype):
    # NumPy's old guard, where(x == 0, 1e-20, x), is 0 in float16 (sin(0)/0: NaN); NumPy 2.4
    # takes the type's epsilon. Integers and bools give float64, as pi * x does.
    x = np.array([0, 1, 3, 0, 2]).astype(dtype)
    want_dtype = dtype if np.issubdtype(dtype, np.floating) else np.float64
    for interpret in (False, True):
        got = fj.function(fj.sinc, interpret=interpret)(x)
        assert got.dtype == want_dtype
        np.testing.assert_array_equal(got[[0, 3]], [1, 1])
        np.testing.assert_allclose(got, np.sinc(x.astype(want_dtype)), rtol=1e-3 if dtype == np.float16 else 1e-6,
                                   atol=1e-3 if dtype == np.float16 else 1e-12)


@pytest.mark.parametrize("interpret", [False, True])
def test_gradients_at_infinities_and_zeros(interpret):
    # logaddexp at +inf: a - out was inf - inf (NaN); the share of the infinite one is 1,
    # half each where both are. fmod at x1 = 0: through |x1| its derivative was 0, not 1.
    a = np.array([np.inf, 1.0, np.inf, -np.inf, -np.inf, 1.0])
    b = np.array([1.0, np.inf, np.inf, -np.inf, 2.0, 2.0])
    for f in (fj.logaddexp, fj.logaddexp2):
        ga, gb = fj.function(fj.grad(lambda a, b: fj.sum(f(a, b)), argnums=(0, 1)), interpret=interpret)(a, b)
        share = np.exp2(-1.0) / (1 + np.exp2(-1.0)) if f is fj.logaddexp2 else 1 / (1 + np.e)
        np.testing.assert_allclose(ga, [1, 0, 0.5, 0.5, 0, share], rtol=1e-12)
        np.testing.assert_allclose(ga + gb, np.ones(6), rtol=1e-12)
    # hypot: x / hypot(x, y), at an infinite x its limit sign(x) (not inf / inf), at (0, 0) 0.
    ga, gb = fj.function(fj.grad(lambda a, b: fj.sum(fj.hypot(a, b)), argnums=(0, 1)), interpret=interpret)(
        a, np.array([1.0, -np.inf, np.inf, -np.inf, 0.0, -0.0]))
    np.testing.assert_array_equal(ga, [1, 0, 1, -1, -1, 1])
    np.testing.assert_array_equal(gb, [0, -1, 1, -1, 0, 0])
    x, y = np.array([0.0, -0.0, 1.5, -2.5, 7.0]), np.array([2.0, 2.0, -1.0, 0.7, 2.0])
    gx, gy = fj.function(fj.grad(lambda x, y: fj.sum(fj.fmod(x, y)), argnums=(0, 1)), interpret=interpret)(x, y)
    np.testing.assert_array_equal(gx, np.ones(5))
    np.testing.assert_array_equal(gy, -np.trunc(x / y))
