"""NumPy's own functions on traced arrays (flowjit.tracer.numpy.protocols: ``__array_ufunc__``
and ``__array_function__``): ``np.tanh(x)``, ``np.sum(x, axis=1)``, ``ndarray + x``...
inside ``fj.function`` trace as the fj function of the same name, so they must give
exactly what the fj spelling gives; what flowjit lacks fails with an error naming the
NumPy function and the user's line."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import flowjit as fj
from flowjit.ir.errors import FlowjitTypeError

X = np.random.default_rng(0).uniform(0.25, 2.0, (3, 4))
Y = np.random.default_rng(1).uniform(-2.0, 2.0, (3, 4))

UNARY = ["tanh", "exp", "expm1", "log", "log1p", "sqrt", "sin", "cos", "tan", "absolute", "negative",
         "sign", "floor", "ceil", "rint", "square", "reciprocal", "isnan", "isfinite", "isinf"]
BINARY = ["add", "subtract", "multiply", "divide", "true_divide", "floor_divide", "remainder", "power",
          "maximum", "minimum", "arctan2", "equal", "not_equal", "less", "less_equal", "greater",
          "greater_equal"]


def same(np_version, fj_version, *args, interpret=False):
    """The NumPy spelling, traced and compiled (or interpreted), gives bit for bit what the
    fj spelling gives."""
    got = fj.function(np_version, interpret=interpret)(*args)
    want = fj.function(fj_version, interpret=interpret)(*args)
    if isinstance(want, (tuple, list)):
        assert len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            np.testing.assert_array_equal(g, w)
    else:
        np.testing.assert_array_equal(got, want)
        assert np.asarray(got).dtype == np.asarray(want).dtype
    return got


@pytest.mark.parametrize("name", UNARY)
def test_unary_ufuncs(name):
    got = same(lambda x: getattr(np, name)(x), lambda x: getattr(fj, name)(x), X)
    np.testing.assert_allclose(got, getattr(np, name)(X), rtol=1e-12)


@pytest.mark.parametrize("name", BINARY)
def test_binary_ufuncs_with_an_ndarray_on_either_side(name):
    ufunc, fn = getattr(np, name), getattr(fj, name)
    same(lambda x: ufunc(Y, x), lambda x: fn(Y, x), X)
    got = same(lambda x: ufunc(x, Y), lambda x: fn(x, Y), X)
    with np.errstate(all="ignore"):
        np.testing.assert_allclose(got, ufunc(X, Y), rtol=1e-12)


def test_operators_with_an_ndarray_on_the_left():
    m = np.ones((4, 2))
    mask = Y > 0
    same(lambda x: (Y + x, Y - x, Y * x, Y / x, Y ** x, Y < x, Y == x, m.T @ x.T),
         lambda x: (fj.add(Y, x), fj.subtract(Y, x), fj.multiply(Y, x), fj.divide(Y, x), fj.power(Y, x),
                    fj.less(Y, x), fj.equal(Y, x), fj.matmul(m.T, x.T)), X)
    same(lambda x: (mask & (x > 1), mask | (x > 1), mask ^ (x > 1), ~(x > 1)),
         lambda x: (fj.logical_and(mask, x > 1), fj.logical_or(mask, x > 1), fj.logical_xor(mask, x > 1),
                    fj.logical_not(x > 1)), X)
    same(lambda x: np.float32(2) * x + np.int64(1), lambda x: fj.multiply(np.float32(2), x) + np.int64(1),
         X.astype(np.float32))


def test_reductions_and_ufunc_methods():
    same(lambda x: (np.sum(x, axis=1), np.mean(x), np.max(x, axis=0, keepdims=True), np.amin(x),
                    np.prod(x, axis=1), np.var(x, ddof=1), np.std(x, axis=0), np.argmax(x, axis=1),
                    np.any(x > 1.5), np.all(x > 0, axis=0), np.cumsum(x, axis=1)),
         lambda x: (fj.sum(x, axis=1), fj.mean(x), fj.max(x, axis=0, keepdims=True), fj.min(x),
                    fj.prod(x, axis=1), fj.var(x, ddof=1), fj.std(x, axis=0), fj.argmax(x, axis=1),
                    fj.any(x > 1.5), fj.all(x > 0, axis=0), fj.cumsum(x, axis=1)), X)
    # ufunc.reduce's axis defaults to 0, np.sum's to None
    got = same(lambda x: (np.add.reduce(x), np.maximum.reduce(x, axis=None), np.multiply.outer(x[0], x[1])),
               lambda x: (fj.sum(x, axis=0), fj.max(x), fj.reshape(x[0], (4, 1)) * x[1]), X)
    np.testing.assert_allclose(got[2], np.multiply.outer(X[0], X[1]))


def test_shape_and_array_functions():
    w = np.arange(8.0).reshape(4, 2)
    same(lambda x: (np.reshape(x, (4, 3)), np.reshape(x, (2, 6)), np.transpose(x), np.concatenate([x, Y]),
                    np.stack([x, Y], axis=1), np.where(x > 1, x, Y), np.clip(x, 0.5, 1.5), np.expand_dims(x, 0),
                    np.squeeze(x[None]), np.moveaxis(x, 0, 1), np.swapaxes(x, 0, 1), np.dot(x, w),
                    np.einsum("ij,jk->ik", x, w), np.tensordot(x, w, axes=1), np.take(x, np.array([2, 0]), axis=1),
                    np.round(x, 1), np.zeros_like(x), np.pad(x, 1)),
         lambda x: (fj.reshape(x, (4, 3)), fj.reshape(x, (2, 6)), fj.transpose(x), fj.concatenate([x, Y]),
                    fj.stack([x, Y], axis=1), fj.where(x > 1, x, Y), fj.clip(x, 0.5, 1.5), fj.expand_dims(x, 0),
                    fj.squeeze(x[None]), fj.moveaxis(x, 0, 1), fj.swapaxes(x, 0, 1), fj.dot(x, w),
                    fj.einsum("ij,jk->ik", x, w), fj.tensordot(x, w, axes=1), fj.take(x, np.array([2, 0]), axis=1),
                    fj.round(x, 1), fj.zeros_like(x), fj.pad(x, 1)), X)
    a, b = fj.function(lambda x: np.split(x, 2, axis=1))(X)
    np.testing.assert_array_equal(a, X[:, :2])
    np.testing.assert_array_equal(b, X[:, 2:])
    # NumPy's own implementation where it only reads attributes
    assert fj.function(lambda x: x * np.size(x) * np.ndim(x) * np.shape(x)[1])(X)[0, 0] == X[0, 0] * 12 * 2 * 4


@pytest.mark.skipif(np.lib.NumpyVersion(np.__version__) < "2.1.0", reason="np.reshape(shape=), np.astype: NumPy 2.1")
@pytest.mark.parametrize("mode", ["edge", "reflect", "symmetric", "wrap", "empty"])
def test_pad_modes_match_numpy_and_their_gradients_add_back(mode):
    # The copying modes are a gather per axis of the positions np.pad reads (widths past the
    # axis reflect again, as NumPy's); the gradient adds each padded element's cotangent into
    # the element it copies. "empty" pads with zeros (NumPy leaves them unspecified).
    x = np.arange(12.0, dtype=np.float32).reshape(3, 4)
    want_mode = "constant" if mode == "empty" else mode
    for widths in (2, ((1, 2), (0, 3)), ((5, 0), (7, 1))):
        np.testing.assert_array_equal(fj.function(lambda x: np.pad(x, widths, mode=mode))(x),
                                      np.pad(x, widths, mode=want_mode))
    widths = ((1, 4), (2, 1))
    w = np.arange(float(np.prod(np.pad(x, widths).shape)), dtype=np.float32).reshape(np.pad(x, widths).shape)
    grad = fj.function(fj.grad(lambda x: (fj.pad(x, widths, mode=mode) * w).sum()))(x)
    extra = {"constant_values": -1} if mode == "empty" else {}   # -1: a zero, read from nowhere
    rows = np.pad(np.arange(3), widths[0], mode=want_mode, **extra)
    cols = np.pad(np.arange(4), widths[1], mode=want_mode, **extra)
    want = np.zeros_like(x)
    for i, r in enumerate(rows):
        for j, c in enumerate(cols):
            if r >= 0 and c >= 0:
                want[r, c] += w[i, j]
    np.testing.assert_array_equal(grad, want)
    report = fj.explain(lambda x: fj.pad(x, widths, mode=mode), x, run=True)
    assert report.driver == "one native call (the whole program)"


def test_numpy_keyword_names_map_to_fj_parameters():
    same(lambda x: (np.reshape(x, shape=(2, 6)), np.sum(a=x, axis=1), np.astype(x, np.float32)),
         lambda x: (fj.reshape(x, (2, 6)), fj.sum(x, axis=1), fj.astype(x, np.float32)), X)
    with pytest.raises(FlowjitTypeError, match=r"np\.sum\(\.\.\., out=\).*immutable"):
        fj.function(lambda x: np.sum(x, out=np.empty(())))(X)  # not renamed to keepdims


def test_gradients_flow_through_numpy_calls():
    def loss_np(w, x):
        return np.sum(np.tanh(x @ w) ** 2) + np.mean(np.exp(-w))

    def loss_fj(w, x):
        return fj.sum(fj.tanh(x @ w) ** 2) + fj.mean(fj.exp(-w))

    w = np.random.default_rng(2).standard_normal((4, 2))
    same(fj.grad(loss_np), fj.grad(loss_fj), w, X)


def test_variables_in_numpy_calls():
    v = fj.Variable(np.full(4, 0.5), name="v")

    def f(x):
        return np.tanh(v) + Y * v + np.sum(v) + np.concatenate([v, x[0]])[:4]

    want = np.tanh(0.5) + Y * 0.5 + 2.0 + 0.5
    np.testing.assert_allclose(fj.function(f)(X), want, rtol=1e-12)
    # outside a trace NumPy computes on the value, and will not write into a Variable
    np.testing.assert_allclose(np.tanh(v), np.tanh(np.full(4, 0.5)))
    with pytest.raises(FlowjitTypeError, match=r"v\.assign\(np\.add\(\.\.\.\)\)"):
        np.add(X[0], 1, out=v)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(UNARY[:9] + ["add", "multiply", "maximum", "subtract"]), min_size=1, max_size=6),
       st.integers(0, 2 ** 32 - 1))
def test_random_numpy_programs_trace_like_their_fj_spelling(names, seed):
    """A chain of NumPy calls, each unary one on |v| + 0.5 (inside every domain), each binary
    one against a constant ndarray on the left: the same program as the fj chain, so the
    interpreter gives the same bits (interpreted: compiling 60 programs is the slow part)."""
    c = np.random.default_rng(seed).uniform(-1, 1, (3, 4))

    def chain(lib):
        def f(x):
            v = x
            for name in names:
                fn = getattr(lib, name)
                v = fn(c, v) if name in BINARY else fn(lib.absolute(v) + 0.5)
            return v
        return f

    x = np.random.default_rng(seed + 1).uniform(-1, 1, (3, 4))
    same(chain(np), chain(fj), x, interpret=True)


def test_what_flowjit_lacks_names_the_numpy_function_and_the_line():
    # (np.spacing, np.polyfit and np.histogramdd, the examples here before, have counterparts now)
    with pytest.raises(FlowjitTypeError, match=r"np\.isnat on a traced array \(f64\[3,4\]\) at "
                                               r"test_numpy_functions\.py:\d+"):
        fj.function(lambda x: np.isnat(x))(X)
    with pytest.raises(FlowjitTypeError, match=r"np\.einsum_path on a traced array at test_numpy_functions"):
        fj.function(lambda x: np.einsum_path("ij->i", x))(X)
    # NumPy's Python between the call and the dispatch (array_str calls array2string):
    # still the user's line, not NumPy's
    with pytest.raises(FlowjitTypeError, match=r"np\.array2string on a traced array at test_numpy_functions"):
        fj.function(lambda x: np.array_str(x))(X)
    with pytest.raises(FlowjitTypeError, match=r"np\.add\.accumulate"):
        fj.function(lambda x: np.add.accumulate(x))(X)
    with pytest.raises(FlowjitTypeError, match=r"np\.sum\(\.\.\., where=\).*takes x, axis, dtype, keepdims"):
        fj.function(lambda x: np.sum(x, where=x > 1))(X)
    with pytest.raises(FlowjitTypeError, match=r"np\.exp\(\.\.\., out=\.\.\.\).*cannot be written"):
        fj.function(lambda x: np.exp(x, out=np.empty((3, 4))))(X)

    def in_place(x):
        a = np.zeros((3, 4))
        a += x  # NumPy's in-place add writes into a: impossible for a traced x
        return a

    with pytest.raises(FlowjitTypeError, match=r"`a \+= x`.*Write `a = a \+ x`"):
        fj.function(in_place)(X)


def test_var_past_its_count_is_inf_as_numpys_and_a_complex_mean_compiles_for_any_batch(tmp_path):
    # NumPy divides by max(n - ddof, 0); a complex mean's count is a complex value's parts.
    x = np.arange(6.0).reshape(2, 3)
    for ddof in (3, 4):
        np.testing.assert_array_equal(fj.function(lambda v: fj.var(v, axis=1, ddof=ddof))(x), [np.inf, np.inf])

    def f(v):
        return fj.real(fj.mean(fj.astype(v, np.complex64) * (1 + 2j), axis=1))

    fj.export(f, fj.ShapeDtype(("B", 4), "f32"), path=tmp_path, name="f")
    xx = np.random.default_rng(0).random((5, 4)).astype(np.float32)
    np.testing.assert_allclose(fj.load_compiled(tmp_path)(xx), np.real((xx * (1 + 2j)).mean(axis=1)), rtol=1e-6)


def test_a_scalar_argument_beside_a_strided_array():
    # A strided array sends every argument through np.ascontiguousarray, which made a 0-d
    # learning rate 1-d.
    f = fj.function(lambda v, lr: v * lr)
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    np.testing.assert_array_equal(f(x[:, ::2], 0.5), x[:, ::2] * 0.5)
    np.testing.assert_array_equal(f(np.asfortranarray(x), np.float32(2)), x * 2)
