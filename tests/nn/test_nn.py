"""fj.nn: each function against a NumPy reference, eagerly and compiled; gradients
against finite differences; numerical stability; pooling against a direct loop; layers
and initializers."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import flowjit as fj
from flowjit.ir.errors import FlowjitTypeError
from tests.finite_differences import central_differences

RNG = np.random.default_rng(0)


def _np_softmax(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _np_log_softmax(x, axis=-1):
    s = x - x.max(axis=axis, keepdims=True)
    return s - np.log(np.exp(s).sum(axis=axis, keepdims=True))


def _np_gelu_exact(x):
    from math import erf

    return 0.5 * x * (1 + np.vectorize(erf)(x / np.sqrt(2)))


REFERENCES = [
    (fj.nn.relu, lambda x: np.maximum(x, 0)),
    (fj.nn.sigmoid, lambda x: 1 / (1 + np.exp(-x))),
    (fj.nn.gelu, lambda x: 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))),
    (lambda x: fj.nn.gelu(x, approximate=False), _np_gelu_exact),
    (fj.nn.softmax, _np_softmax),
    (lambda x: fj.nn.softmax(x, axis=0), lambda x: _np_softmax(x, axis=0)),
    (fj.nn.log_softmax, _np_log_softmax),
    (lambda x: fj.nn.logsumexp(x, axis=1), lambda x: np.log(np.exp(x).sum(axis=1))),
    (fj.nn.layer_norm, lambda x: (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)),
]


@pytest.mark.parametrize("fn,ref", REFERENCES, ids=lambda v: getattr(v, "__name__", ""))
@pytest.mark.parametrize("dtype,tol", [(np.float32, 2e-5), (np.float64, 1e-12)])
def test_functions_match_numpy_eagerly_and_compiled(fn, ref, dtype, tol):
    x = (RNG.standard_normal((6, 9)) * 3).astype(dtype)
    expected = ref(x.astype(np.float64))
    np.testing.assert_allclose(fn(x), expected, rtol=tol, atol=tol)
    np.testing.assert_allclose(fj.function(fn)(x), expected, rtol=tol, atol=tol)
    assert fj.function(fn)(x).dtype == dtype


def test_relu_passes_nan_through_and_its_gradient_at_zero_is_zero():
    # As jax.nn.relu and torch.relu: a NaN stays NaN (a NaN input must not look clean).
    x = np.array([np.nan, -np.inf, -1.0, -0.0, 0.0, 2.0, np.inf], np.float32)
    want = np.array([np.nan, 0, 0, 0, 0, 2, np.inf], np.float32)
    for relu in (fj.nn.relu, fj.function(fj.nn.relu), fj.function(fj.nn.relu, interpret=True)):
        np.testing.assert_array_equal(relu(x), want)
    grad = fj.function(fj.grad(lambda v: fj.nn.relu(v).sum()))(np.array([-1.0, 0.0, 3.0]))
    np.testing.assert_array_equal(grad, [0.0, 0.0, 1.0])


def test_softmax_family_is_stable_for_huge_logits():
    x = np.array([[1e4, 0.0, -1e4], [3e37, 3e37, -3e37]], np.float32)
    for softmax in (fj.nn.softmax, fj.function(fj.nn.softmax)):
        np.testing.assert_allclose(softmax(x), [[1, 0, 0], [0.5, 0.5, 0]])
    for log_softmax in (fj.nn.log_softmax, fj.function(fj.nn.log_softmax)):
        np.testing.assert_allclose(log_softmax(x), [[0, -1e4, -2e4], [-np.log(2), -np.log(2), -6e37]], rtol=1e-6)
    loss = fj.function(fj.nn.softmax_cross_entropy)(x[:1], np.array([1]))
    np.testing.assert_allclose(loss, 1e4, rtol=1e-6)


def test_layer_norm_scale_and_offset():
    x = RNG.standard_normal((4, 5)).astype(np.float32)
    g, b = RNG.standard_normal(5).astype(np.float32), RNG.standard_normal(5).astype(np.float32)
    ref = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-3) * g + b
    np.testing.assert_allclose(fj.function(lambda x, g, b: fj.nn.layer_norm(x, g, b, eps=1e-3))(x, g, b), ref,
                               rtol=1e-5, atol=1e-5)


# ---- losses ---------------------------------------------------------------------------------

def test_softmax_cross_entropy_integer_and_one_hot_labels_agree_with_numpy():
    logits = RNG.standard_normal((7, 5))
    labels = RNG.integers(0, 5, 7)
    one_hot = np.eye(5)[labels]
    ref = -_np_log_softmax(logits)[np.arange(7), labels]
    for lab in (labels, labels.astype(np.int32), one_hot):
        np.testing.assert_allclose(fj.nn.softmax_cross_entropy(logits, lab), ref.mean(), rtol=1e-12)
        np.testing.assert_allclose(fj.function(fj.nn.softmax_cross_entropy)(logits, lab), ref.mean(), rtol=1e-12)
    np.testing.assert_allclose(fj.nn.softmax_cross_entropy(logits, labels, reduction="none"), ref, rtol=1e-12)
    np.testing.assert_allclose(fj.nn.softmax_cross_entropy(logits, labels, reduction="sum"), ref.sum(), rtol=1e-12)


def test_softmax_cross_entropy_gradient_is_softmax_minus_one_hot():
    logits = RNG.standard_normal((6, 4))
    labels = RNG.integers(0, 4, 6)
    g = fj.function(fj.grad(fj.nn.softmax_cross_entropy))(logits, labels)
    np.testing.assert_allclose(g, (_np_softmax(logits) - np.eye(4)[labels]) / 6, rtol=1e-10, atol=1e-12)


def test_mse_and_its_gradient():
    p, t = RNG.standard_normal((3, 4)), RNG.standard_normal((3, 4))
    np.testing.assert_allclose(fj.function(fj.nn.mse)(p, t), ((p - t) ** 2).mean(), rtol=1e-12)
    np.testing.assert_allclose(fj.grad(fj.nn.mse)(p, t), 2 * (p - t) / p.size, rtol=1e-12)
    np.testing.assert_allclose(fj.nn.mse(p, t, reduction="none"), (p - t) ** 2)


def test_accuracy_with_indices_and_one_hot():
    logits = np.array([[0.1, 0.9], [0.8, 0.2], [0.3, 0.7], [0.6, 0.4]], np.float32)
    labels = np.array([1, 0, 0, 0])
    assert fj.function(fj.nn.accuracy)(logits, labels) == pytest.approx(0.75)
    assert fj.nn.accuracy(logits, np.eye(2)[labels]) == pytest.approx(0.75)


def test_loss_errors_say_what_is_wrong():
    with pytest.raises(FlowjitTypeError, match="shape without the class axis"):
        fj.nn.softmax_cross_entropy(np.zeros((3, 4)), np.zeros((4,), np.int64))
    with pytest.raises(FlowjitTypeError, match="must match the logits' shape"):
        fj.nn.softmax_cross_entropy(np.zeros((3, 4)), np.zeros((3, 3)))
    with pytest.raises(FlowjitTypeError, match="reduction"):
        fj.nn.mse(np.zeros(2), np.zeros(2), reduction="avg")


def test_a_loss_forward_pass_is_at_most_two_kernels():
    fn = fj.function(fj.nn.softmax_cross_entropy).ir(np.zeros((8, 10), np.float32), np.zeros(8, np.int32),
                                                      stage="fused")
    kernels = [op for op in fn.walk() if op.name == "fusion"]
    assert 1 <= len(kernels) <= 2, str(fn)


# ---- gradients by finite differences --------------------------------------------------------

def _finite_difference_check(f, x, tol=1e-6):
    np.testing.assert_allclose(fj.grad(f)(x), central_differences(f, [x], 0), rtol=tol, atol=tol)


@pytest.mark.parametrize("fn", [
    lambda x: fj.sum(fj.nn.gelu(x) ** 2),
    lambda x: fj.sum(fj.nn.gelu(x, approximate=False) * x),
    lambda x: fj.sum(fj.nn.log_softmax(x) * np.arange(4.0)),
    lambda x: fj.sum(fj.nn.softmax(x, axis=0) * np.arange(4.0)),
    lambda x: fj.sum(fj.nn.layer_norm(x) * np.arange(4.0)),
    lambda x: fj.nn.logsumexp(x),
    lambda x: fj.sum(fj.nn.sigmoid(x) ** 2),
    lambda x: fj.sum(fj.nn.max_pool(fj.reshape(x, (1, 3, 4, 1)), 2, 1) ** 2),
    lambda x: fj.sum(fj.nn.avg_pool(fj.reshape(x, (1, 3, 4, 1)), 2, 1, "SAME") ** 2),
])
def test_gradients_match_finite_differences(fn):
    x = np.random.default_rng(3).standard_normal((3, 4))
    _finite_difference_check(fn, x)


# ---- pooling --------------------------------------------------------------------------------

def _np_pool(x, window, strides, padding, kind):
    n, h, w, c = x.shape
    (wh, ww), (sh, sw) = window, strides
    if padding == "VALID":
        oh, ow, ph, pw = (h - wh) // sh + 1, (w - ww) // sw + 1, 0, 0
    else:
        oh, ow = -(-h // sh), -(-w // sw)
        ph, pw = max((oh - 1) * sh + wh - h, 0) // 2, max((ow - 1) * sw + ww - w, 0) // 2
    out = np.zeros((n, oh, ow, c))
    for i in range(oh):
        for j in range(ow):
            r0, c0 = i * sh - ph, j * sw - pw
            patch = x[:, max(r0, 0):r0 + wh, max(c0, 0):c0 + ww, :]
            out[:, i, j, :] = patch.max(axis=(1, 2)) if kind == "max" else patch.mean(axis=(1, 2))
    return out


@settings(max_examples=25, deadline=None)
@given(h=st.integers(1, 7), w=st.integers(1, 7), wh=st.integers(1, 3), ww=st.integers(1, 3),
       sh=st.integers(1, 3), sw=st.integers(1, 3), padding=st.sampled_from(["VALID", "SAME"]),
       kind=st.sampled_from(["max", "avg"]))
def test_pooling_matches_a_direct_loop(h, w, wh, ww, sh, sw, padding, kind):
    x = np.random.default_rng(h * 31 + w).standard_normal((2, h, w, 3))
    pool = fj.nn.max_pool if kind == "max" else fj.nn.avg_pool
    if padding == "VALID" and (h < wh or w < ww):
        with pytest.raises(FlowjitTypeError, match="larger than the input"):
            pool(x, (wh, ww), (sh, sw), padding)
        return
    got = pool(x, (wh, ww), (sh, sw), padding)
    np.testing.assert_allclose(got, _np_pool(x, (wh, ww), (sh, sw), padding, kind), rtol=1e-12)


def test_pooling_compiled_and_tiled_windows():
    # Its own generator: drawn from the module's, the input depended on which tests ran
    # before in the process (an average of four float32s near 1 that cancel to 0.0067 is
    # within float32's rounding of the sum, 3e-8, but not within 1e-6 of itself).
    x = np.random.default_rng(17).standard_normal((2, 8, 6, 3)).astype(np.float32)
    for pool, kind in ((fj.nn.max_pool, "max"), (fj.nn.avg_pool, "avg")):
        got = fj.function(lambda x: pool(x, 2))(x)
        np.testing.assert_allclose(got, _np_pool(x, (2, 2), (2, 2), "VALID", kind), rtol=1e-6, atol=1e-6)


def _np_max_pool_grad(x, window, strides, padding, g):
    # The gradient to each window's first maximum in row-major order (TensorFlow's,
    # PyTorch's and lax.reduce_window's rule), by a direct loop over the windows.
    n, h, w, c = x.shape
    (wh, ww), (sh, sw) = window, strides
    if padding == "VALID":
        ph = pw = 0
    else:
        ph, pw = max((g.shape[1] - 1) * sh + wh - h, 0) // 2, max((g.shape[2] - 1) * sw + ww - w, 0) // 2
    dx = np.zeros_like(x)
    for b in range(n):
        for k in range(c):
            for i in range(g.shape[1]):
                for j in range(g.shape[2]):
                    r0, q0 = i * sh - ph, j * sw - pw
                    rows, cols = range(max(r0, 0), min(r0 + wh, h)), range(max(q0, 0), min(q0 + ww, w))
                    cells = [(r, q) for r in rows for q in cols]
                    best = max(x[b, r, q, k] for r, q in cells)
                    r, q = next(cell for cell in cells if x[b, cell[0], cell[1], k] == best)
                    dx[b, r, q, k] += g[b, i, j, k]
    return dx


@pytest.mark.parametrize("window, strides, padding", [
    ((2, 2), (2, 2), "VALID"),     # tiles: one reshape and one reduction
    ((2, 2), (2, 2), "SAME"),      # padded to tile
    ((3, 3), (1, 1), "SAME"),      # overlapping windows
    ((2, 3), (2, 1), "VALID"),
])
def test_max_pool_gradient_goes_to_the_first_of_tied_maxima(window, strides, padding):
    # Mostly ties (0s and 1s, as after a ReLU): each window's cotangent goes whole to its
    # first maximum, compiled and eager, where fj.max's rule would share it among them.
    rng = np.random.default_rng(5)
    x = rng.integers(0, 2, (2, 5, 6, 3)).astype(np.float32)
    g = rng.standard_normal(fj.nn.max_pool(x, window, strides, padding).shape).astype(np.float32)

    def loss(x):
        return fj.sum(fj.nn.max_pool(x, window, strides, padding) * g)
    want = _np_max_pool_grad(x, window, strides, padding, g)
    np.testing.assert_allclose(fj.function(fj.grad(loss))(x), want, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(fj.grad(loss)(x), want, rtol=1e-6, atol=1e-6)


def test_max_pool_gradient_goes_to_a_nan_the_window_propagates():
    # A NaN is its window's maximum (max pooling propagates it): its position gets the
    # cotangent, as PyTorch's argmax does, and the window's other elements get none.
    x = np.zeros((1, 4, 4, 1), np.float32)
    x[0, 1, 1, 0] = np.nan
    x[0, 2, 3, 0] = np.nan
    x[0, 3, 2, 0] = np.nan
    for window, strides in (((2, 2), (2, 2)), ((3, 3), (1, 1))):
        g = np.ones(fj.nn.max_pool(x, window, strides, "SAME").shape, np.float32)
        dx = fj.function(fj.grad(lambda x: fj.sum(fj.nn.max_pool(x, window, strides, "SAME") * g)))(x)
        y = fj.nn.max_pool(x, window, strides, "SAME")
        assert np.isnan(dx).sum() == 0 and dx[~np.isnan(x)].sum() + dx[np.isnan(x)].sum() == y.size
        if window == (2, 2):
            np.testing.assert_array_equal(dx[0, :, :, 0], [[0, 0, 1, 0], [0, 1, 0, 0], [1, 0, 0, 1], [0, 0, 0, 0]])


@pytest.mark.parametrize("window, strides", [((3, 3), (3, 3)), ((3, 3), (1, 1))])
def test_max_pool_gradient_never_goes_to_padding(window, strides):
    # A window of real -infs beside SAME padding (-inf too) gives its cotangent to its
    # first real -inf, as TensorFlow's and PyTorch's never pick a padded position; the
    # padding is cut off, so picking it dropped the cotangent.
    x = np.full((1, 7, 7, 2), -np.inf, np.float32)
    x[0, 4:, 4:, 1] = np.arange(9, dtype=np.float32).reshape(3, 3)
    g = np.arange(1, fj.nn.max_pool(x, window, strides, "SAME").size + 1, dtype=np.float32)
    g = g.reshape(fj.nn.max_pool(x, window, strides, "SAME").shape)

    def loss(x):
        return fj.sum(fj.nn.max_pool(x, window, strides, "SAME") * g)
    want = _np_max_pool_grad(x, window, strides, "SAME", g)
    assert want.sum() == g.sum()
    np.testing.assert_array_equal(fj.function(fj.grad(loss))(x), want)
    np.testing.assert_array_equal(fj.grad(loss)(x), want)


def test_pooling_errors():
    with pytest.raises(FlowjitTypeError, match="NHWC"):
        fj.nn.max_pool(np.zeros((4, 4)), 2)
    with pytest.raises(FlowjitTypeError, match="larger than the input"):
        fj.nn.max_pool(np.zeros((1, 2, 2, 1)), 3)


# ---- dropout --------------------------------------------------------------------------------

def test_dropout_drops_at_the_rate_and_keeps_the_expectation():
    x = np.ones((200, 500), np.float32)
    key = fj.random.key(0)
    y = fj.function(lambda x, k: fj.nn.dropout(x, 0.25, k))(x, key)
    kept = y != 0
    assert abs(kept.mean() - 0.75) < 0.01
    np.testing.assert_allclose(y[kept], 1 / 0.75, rtol=1e-6)
    np.testing.assert_array_equal(fj.nn.dropout(x, 0.25, key), y)  # same key, same mask
    assert not np.array_equal(fj.nn.dropout(x, 0.25, fj.random.split(key)[0]), y)
    assert fj.nn.dropout(x, 0.25, key, deterministic=True) is x
    with pytest.raises(FlowjitTypeError, match="rate"):
        fj.nn.dropout(x, 1.0, key)


# ---- layers and initializers ----------------------------------------------------------------

def test_dense_layer_computes_and_names_its_variables():
    d = fj.nn.Dense(5, 3, activation=fj.nn.relu, key=1, name="fc")
    x = RNG.standard_normal((4, 5)).astype(np.float32)
    np.testing.assert_allclose(fj.function(lambda x: d(x))(x), np.maximum(x @ d.kernel.numpy() + d.bias.numpy(), 0),
                               rtol=1e-5, atol=1e-6)
    assert [v.name for v in d.variables] == ["fc/kernel", "fc/bias"]
    a, b = fj.nn.Dense(2, 2), fj.nn.Dense(2, 2)
    assert a.name != b.name
    with pytest.raises(FlowjitTypeError, match="last axis must be 5"):
        d(np.zeros((2, 4), np.float32))


def test_conv2d_layer_matches_conv2d():
    c = fj.nn.Conv2D(3, 4, 3, strides=2, padding="SAME", key=2)
    x = RNG.standard_normal((2, 7, 7, 3)).astype(np.float32)
    ref = fj.conv2d(x, c.kernel.numpy(), strides=2, padding="SAME") + c.bias.numpy()
    np.testing.assert_allclose(fj.function(lambda x: c(x))(x), ref, rtol=1e-5, atol=1e-5)
    assert c.kernel.shape == (3, 3, 3, 4)


def _np_conv2d_tf(x, w, strides, pads, dilations):
    """tf.nn.conv2d by a direct loop: NHWC x, HWIO w, explicit ((t, b), (l, r)) pads."""
    (sh, sw), (dh, dw) = strides, dilations
    xp = np.pad(x, ((0, 0), *pads, (0, 0)))
    kh, kw = (w.shape[0] - 1) * dh + 1, (w.shape[1] - 1) * dw + 1
    oh, ow = (xp.shape[1] - kh) // sh + 1, (xp.shape[2] - kw) // sw + 1
    out = np.zeros((x.shape[0], oh, ow, w.shape[3]), np.float64)
    for i in range(oh):
        for j in range(ow):
            patch = xp[:, i * sh:i * sh + kh:dh, j * sw:j * sw + kw:dw, :]
            out[:, i, j, :] = np.einsum("nhwc,hwco->no", patch, w)
    return out


def _same_pads(n, k, s, d):
    out = -(-n // s)
    total = max((out - 1) * s + (k - 1) * d + 1 - n, 0)
    return (total // 2, total - total // 2)


@pytest.mark.parametrize("strides, padding, dilations, want_strides, want_pads, want_dil", [
    (1, "VALID", None, (1, 1), ((0, 0), (0, 0)), (1, 1)),
    (2, "SAME", None, (2, 2), "SAME", (1, 1)),
    ([1, 2, 1, 1], "SAME", [1, 1, 1, 1], (2, 1), "SAME", (1, 1)),
    ((1, 2), "VALID", 2, (1, 2), ((0, 0), (0, 0)), (2, 2)),
    ([3], [[0, 0], [1, 2], [0, 1], [0, 0]], [2], (3, 3), ((1, 2), (0, 1)), (2, 2)),
    ([1, 1, 1, 1], "valid", [1, 2, 1, 1], (1, 1), ((0, 0), (0, 0)), (2, 1)),
])
def test_nn_conv2d_takes_tensorflows_arguments(strides, padding, dilations, want_strides, want_pads, want_dil):
    x = RNG.standard_normal((2, 9, 8, 3)).astype(np.float32)
    w = RNG.standard_normal((3, 2, 3, 4)).astype(np.float32)
    if want_pads == "SAME":
        want_pads = tuple(_same_pads(n, k, s, d) for n, k, s, d in zip(x.shape[1:3], w.shape[:2], want_strides,
                                                                       want_dil))
    want = _np_conv2d_tf(x.astype(np.float64), w.astype(np.float64), want_strides, want_pads, want_dil)
    got = fj.nn.conv2d(x, w, strides, padding, dilations=dilations)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    traced = fj.function(lambda x, w: fj.nn.conv2d(x, w, strides=strides, padding=padding, data_format="NHWC",
                                                   dilations=dilations))
    np.testing.assert_allclose(traced(x, w), want, rtol=1e-4, atol=1e-4)
    # The same op as fj.conv2d: one conv2d primitive in the traced program.
    assert [op.name for op in traced.ir(x, w).body.ops if op.name.startswith("conv")] == ["conv2d"]


@pytest.mark.parametrize("kwargs, message", [
    ({"data_format": "NCHW"}, r"data_format='NCHW' is not supported: flowjit's conv2d takes NHWC input.*"
                              r"fj.transpose\(x, \(0, 2, 3, 1\)\)"),
    ({"strides": [2, 1, 1, 1]}, r"strides=\[2, 1, 1, 1\] moves along the batch or channel dimension"),
    ({"strides": [1, 1, 1, 2]}, r"strides=\[1, 1, 1, 2\] moves along the batch or channel dimension"),
    ({"strides": [1, 1, 1]}, r"strides=\[1, 1, 1\] must be an int, 1, 2 or 4 values"),
    ({"dilations": [1, 2, 2, 2]}, r"dilations=\[1, 2, 2, 2\] moves along the batch or channel dimension"),
    ({"padding": "FULL"}, r"padding='FULL' must be 'SAME', 'VALID' or explicit pads"),
    ({"padding": [[1, 0], [1, 1], [1, 1], [0, 0]]}, r"pads the batch or channel dimension"),
    ({"padding": [[1, 1], [1, 1]]}, r"must be 'SAME', 'VALID' or four \(low, high\) pairs"),
])
def test_nn_conv2d_rejects_what_it_does_not_support_naming_the_shapes_and_line(kwargs, message):
    x, w = np.ones((1, 5, 5, 2), np.float32), np.ones((3, 3, 2, 4), np.float32)
    args = {"strides": 1, "padding": "SAME", **kwargs}
    with pytest.raises(ValueError, match=message) as info:
        fj.nn.conv2d(x, w, **args)
    text = str(info.value)
    assert text.startswith("conv2d of input [1, 5, 5, 2] and filters [3, 3, 2, 4]: "), text
    assert "\n  at " in text and "test_nn.py:" in text, text


def test_depthwise_and_separable_convolutions_are_tensorflows():
    # tf.nn.depthwise_conv2d: output channel c*M + m is input channel c convolved with
    # filter[:, :, c, m]; separable: that, then a 1x1 convolution.
    x = RNG.standard_normal((2, 7, 6, 3))
    dw = RNG.standard_normal((3, 2, 3, 2))
    pw = RNG.standard_normal((1, 1, 6, 4))
    pads = (_same_pads(7, 3, 2, 1), _same_pads(6, 2, 1, 2))
    want = np.concatenate([_np_conv2d_tf(x[..., c:c + 1], dw[:, :, c:c + 1, :], (2, 1), pads, (1, 2))
                           for c in range(3)], axis=-1)
    got = fj.function(lambda x, w: fj.nn.depthwise_conv2d(x, w, [1, 2, 1, 1], "SAME", dilations=[1, 2]))(x, dw)
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)
    sep = fj.function(lambda x, d, p: fj.nn.separable_conv2d(x, d, p, [1, 2, 1, 1], "SAME", dilations=[1, 2]))
    np.testing.assert_allclose(sep(x, dw, pw), np.einsum("nhwc,co->nhwo", want, pw[0, 0]), rtol=1e-10, atol=1e-10)

    def loss(x, d, p):
        return fj.sum(fj.tanh(fj.nn.separable_conv2d(x, d, p, 1, "VALID")))

    grads = fj.function(fj.grad(loss, argnums=(0, 1, 2)))(x, dw, pw)
    f = fj.function(loss, interpret=True)
    for i, g in enumerate(grads):
        np.testing.assert_allclose(g, central_differences(f, [x, dw, pw], i), rtol=1e-5, atol=1e-7)


def test_nn_conv2d_with_fewer_filter_channels_is_grouped_as_in_tensorflow_2():
    x = RNG.standard_normal((1, 5, 5, 4)).astype(np.float32)
    w = RNG.standard_normal((3, 3, 2, 6)).astype(np.float32)   # 4 channels / 2: two groups
    want = np.concatenate([_np_conv2d_tf(x[..., :2], w[..., :3], (1, 1), ((1, 1), (1, 1)), (1, 1)),
                           _np_conv2d_tf(x[..., 2:], w[..., 3:], (1, 1), ((1, 1), (1, 1)), (1, 1))], axis=-1)
    np.testing.assert_allclose(fj.nn.conv2d(x, w, 1, "SAME"), want, rtol=1e-4, atol=1e-4)
    layer = fj.nn.Conv2D(4, 6, 3, groups=2, key=1)
    assert layer.kernel.shape == (3, 3, 2, 6)
    np.testing.assert_allclose(fj.function(lambda x: layer(x))(x),
                               fj.nn.conv2d(x, layer.kernel.numpy(), 1, "SAME") + layer.bias.numpy(),
                               rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match=r"input's 4 channels are not a multiple of the filters' 3"):
        fj.nn.conv2d(x, RNG.standard_normal((3, 3, 3, 6)).astype(np.float32), 1, "SAME")
    with pytest.raises(ValueError, match="groups=3 must divide in_channels=4"):
        fj.nn.Conv2D(4, 6, 3, groups=3)


@pytest.mark.parametrize("stride, padding, dilations", [
    (1, "SAME", None), (2, "VALID", None), ([1, 2, 1], "SAME", [2]), (1, [[0, 0], [2, 1], [0, 0]], 1)])
def test_nn_conv1d_is_tensorflows(stride, padding, dilations):
    x = RNG.standard_normal((2, 11, 4))
    w = RNG.standard_normal((3, 4, 5))
    s = stride if isinstance(stride, int) else stride[1]
    d = 1 if dilations is None else dilations if isinstance(dilations, int) else dilations[0]
    pads = (((0, 0), _same_pads(11, 3, s, d)) if padding == "SAME" else ((0, 0), (0, 0)) if padding == "VALID"
            else ((0, 0), tuple(padding[1])))
    want = _np_conv2d_tf(x[:, None], w[None], (1, s), pads, (1, d))[:, 0]
    got = fj.function(lambda x, w: fj.nn.conv1d(x, w, stride, padding, dilations=dilations))(x, w)
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)

    def loss(x, w):
        return fj.sum(fj.tanh(fj.nn.conv1d(x, w, stride, padding, dilations=dilations)))

    gx, gw = fj.function(fj.grad(loss, argnums=(0, 1)))(x, w)
    f = fj.function(loss, interpret=True)
    np.testing.assert_allclose(gx, central_differences(f, [x, w], 0), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(gw, central_differences(f, [x, w], 1), rtol=1e-5, atol=1e-7)


def test_nn_conv1d_rejects_what_it_does_not_support_naming_the_shapes():
    x, w = np.ones((1, 5, 2), np.float32), np.ones((3, 2, 4), np.float32)
    with pytest.raises(ValueError, match=r"^conv1d of input \[1, 5, 2\] and filters \[3, 2, 4\]: data_format='NCW'"):
        fj.nn.conv1d(x, w, 1, "SAME", data_format="NCW")
    with pytest.raises(ValueError, match=r"stride=\[2, 1, 1\] must be a positive int, one value or \[1, s, 1\]"):
        fj.nn.conv1d(x, w, [2, 1, 1], "SAME")
    with pytest.raises(ValueError, match=r"padding=\[\[1, 1\], \[0, 0\], \[0, 0\]\] must be"):
        fj.nn.conv1d(x, w, 1, [[1, 1], [0, 0], [0, 0]])


def test_nn_conv2d_transpose_is_the_adjoint_of_conv2d_and_checks_its_output_shape():
    # <conv2d(x, w), y> == <x, conv2d_transpose(y, w)> for every x and y.
    x = RNG.standard_normal((2, 7, 6, 3))
    w = RNG.standard_normal((3, 2, 3, 4))
    for strides, padding in ((2, "SAME"), (1, "VALID"), ([1, 2, 3, 1], "VALID")):
        forward = np.asarray(fj.nn.conv2d(x, w, strides, padding))
        y = RNG.standard_normal(forward.shape)
        back = fj.function(lambda y, w: fj.nn.conv2d_transpose(y, w, x.shape, strides, padding))(y, w)
        assert back.shape == x.shape
        assert np.sum(forward * y) == pytest.approx(np.sum(x * np.asarray(back)), rel=1e-10)
    with pytest.raises(ValueError, match=r"output_shape \[2, 9, 6, 3\] .* gives \[2, 5, 3, 4\], not the input's "
                                         r"shape \[2, 4, 3, 4\]"):
        fj.nn.conv2d_transpose(np.ones((2, 4, 3, 4)), w, (2, 9, 6, 3), 2, "SAME")


def test_nn_conv2d_gradient_matches_finite_differences():
    x = RNG.standard_normal((1, 5, 4, 2))
    w = RNG.standard_normal((2, 3, 2, 3))

    def loss(x, w):
        return fj.sum(fj.tanh(fj.nn.conv2d(x, w, [1, 2, 1, 1], [[0, 0], [1, 0], [0, 2], [0, 0]])))

    gx, gw = fj.function(fj.grad(loss, argnums=(0, 1)))(x, w)
    f = fj.function(loss, interpret=True)
    np.testing.assert_allclose(gx, central_differences(f, [x, w], 0), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(gw, central_differences(f, [x, w], 1), rtol=1e-5, atol=1e-7)


def test_sequential_collects_variables_in_order_and_trains():
    model = fj.nn.Sequential([fj.nn.Dense(2, 8, fj.nn.relu, key=3), fj.nn.Dense(8, 1, key=4)])
    assert [v.shape for v in model.variables] == [(2, 8), (8,), (8, 1), (1,)]
    x = RNG.standard_normal((64, 2)).astype(np.float32)
    y = (x[:, :1] * 2 - x[:, 1:]).astype(np.float32)
    opt = fj.optim.Adam(0.05)
    step = fj.function(lambda x, y: opt.minimize(lambda: fj.nn.mse(model(x), y), model.trainable_variables))
    first = step(x, y)
    for _ in range(150):
        last = step(x, y)
    assert last < 0.05 * first


def test_initializers_have_the_stated_scale():
    key = fj.random.key(0)
    shape = (400, 600)
    lim = np.sqrt(6 / 1000)
    w = fj.nn.initializers.glorot_uniform(key, shape)
    assert w.dtype == np.float32 and np.abs(w).max() <= lim and np.abs(w).max() > 0.95 * lim
    assert abs(fj.nn.initializers.glorot_normal(key, shape).std() - np.sqrt(2 / 1000)) < 0.002
    assert abs(fj.nn.initializers.he_normal(key, shape).std() - np.sqrt(2 / 400)) < 0.002
    assert np.abs(fj.nn.initializers.he_uniform(key, shape)).max() <= np.sqrt(6 / 400)
    conv = fj.nn.initializers.he_normal(key, (3, 3, 16, 32), np.float64)
    assert conv.dtype == np.float64 and abs(conv.std() - np.sqrt(2 / 144)) < 0.01
    np.testing.assert_array_equal(fj.nn.initializers.glorot_uniform(key, shape), w)  # reproducible


def test_variance_scaling_and_the_jax_initializers_have_their_variance():
    init = fj.nn.initializers
    shape = (400, 600)
    for mode, n in (("fan_in", 400), ("fan_out", 600), ("fan_avg", 500)):
        for dist in ("truncated_normal", "normal", "uniform"):
            w = init.variance_scaling(2.0, mode, dist)(3, shape)
            assert w.shape == shape and w.dtype == np.float32
            assert abs(w.std() - np.sqrt(2.0 / n)) < 0.03 * np.sqrt(2.0 / n), (mode, dist)
            if dist == "truncated_normal":   # inside two standard deviations of the untruncated normal
                assert np.abs(w).max() < 2 * np.sqrt(2.0 / n) / init.TRUNCATED_STD
            if dist == "uniform":
                assert np.abs(w).max() <= np.sqrt(3 * 2.0 / n)
    assert abs(init.lecun_normal(0, (3, 3, 16, 32)).std() - np.sqrt(1 / 144)) < 0.004
    assert np.abs(init.lecun_uniform(0, shape)).max() <= np.sqrt(3 / 400)
    z = init.truncated_normal(0.5, -1.0, 1.5)(1, (N_INIT,), np.float64)
    assert z.dtype == np.float64 and z.min() > -0.5 and z.max() < 0.75
    assert abs(init.normal(0.1)(2, (N_INIT,)).std() - 0.1) < 0.003
    u = init.uniform(0.3)(2, (N_INIT,))
    assert u.min() >= 0 and u.max() < 0.3 and abs(u.mean() - 0.15) < 0.005
    np.testing.assert_array_equal(init.constant(0.25)(None, (2, 3)), np.full((2, 3), 0.25, np.float32))
    with pytest.raises(ValueError, match="mode must be"):
        init.variance_scaling(1.0, "fan_sum", "normal")


N_INIT = 20_000


@pytest.mark.parametrize(("shape", "column_axis"), [((64, 32), -1), ((32, 64), -1), ((3, 3, 16, 32), -1),
                                                    ((8, 20), 0)])
def test_orthogonal_initializer_gives_orthonormal_rows_or_columns(shape, column_axis):
    w = fj.nn.initializers.orthogonal(2.0, column_axis)(4, shape, np.float64)
    assert w.shape == shape
    m = np.moveaxis(w, column_axis, -1).reshape(-1, shape[column_axis]) / 2.0
    gram = m.T @ m if m.shape[0] >= m.shape[1] else m @ m.T
    np.testing.assert_allclose(gram, np.eye(len(gram)), atol=1e-12)
