"""More of TensorFlow 1.x's ops and tf.metrics (flowjit.v1.ops, flowjit.v1.nn,
flowjit.v1.metrics), each against NumPy: top_k, gather_nd, unsorted_segment_sum,
sequence_mask, check_numerics, local response normalization, conv2d_transpose (the
gradient of conv2d, checked by the adjoint identity), swish, zero_fraction, and the
streaming metrics."""

from __future__ import annotations

import numpy as np
import pytest

import flowjit.v1 as tf


def _run(fetches, feed=None):
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        sess.run(tf.local_variables_initializer())
        return sess.run(fetches, feed)


def test_top_k_gather_nd_and_segment_sums():
    tf.reset_default_graph()
    x = np.array([[1.0, 5.0, 3.0, 5.0], [0.0, -1.0, 2.0, 1.0]], np.float32)
    values, indices = tf.nn.top_k(tf.constant(x), k=2)
    params = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    picked = tf.gather_nd(tf.constant(params), tf.constant([[0, 1], [1, 2], [0, 0]]))
    points = tf.gather_nd(tf.constant(params), tf.constant([[[1, 0, 3]], [[0, 2, 1]]]))
    seg = tf.unsorted_segment_sum(tf.constant(np.arange(10, dtype=np.float32).reshape(5, 2)),
                                  tf.constant([2, 0, 2, 1, 2]), num_segments=4)
    v, i, p, q, s = _run([values, indices, picked, points, seg])
    np.testing.assert_array_equal(v, [[5, 5], [2, 1]])
    np.testing.assert_array_equal(i, [[1, 3], [2, 3]])
    assert i.dtype == np.int32
    np.testing.assert_array_equal(p, [params[0, 1], params[1, 2], params[0, 0]])
    np.testing.assert_array_equal(q, [[params[1, 0, 3]], [params[0, 2, 1]]])
    np.testing.assert_array_equal(s, [[2, 3], [6, 7], [0 + 4 + 8, 1 + 5 + 9], [0, 0]])


def test_gradients_of_gather_nd_and_segment_sum_scatter_back():
    tf.reset_default_graph()
    p = tf.Variable(np.ones((3, 2), np.float32))
    loss = tf.reduce_sum(tf.gather_nd(p, [[0, 1], [0, 1], [2, 0]])) + \
        tf.reduce_sum(tf.unsorted_segment_sum(p, [1, 1, 0], 2) * tf.constant([[1.0, 2.0], [3.0, 4.0]]))
    g = _run(tf.gradients(loss, p)[0])
    np.testing.assert_array_equal(g, [[3, 4 + 2], [3, 4], [1 + 1, 2]])


def test_sequence_mask_and_check_numerics():
    tf.reset_default_graph()
    lengths = tf.placeholder(tf.int32, [3])
    mask = tf.sequence_mask(lengths, maxlen=4)
    floats = tf.sequence_mask(tf.constant([1, 3]), dtype=tf.float32)
    x = tf.placeholder(tf.float32, [2])
    checked = tf.check_numerics(x * 2.0, "doubled")
    m, f = _run([mask, floats], {lengths: [0, 2, 4]})
    np.testing.assert_array_equal(m, [[0, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 1]])
    assert m.dtype == bool
    np.testing.assert_array_equal(f, [[1, 0, 0], [1, 1, 1]])
    with tf.Session() as sess:
        np.testing.assert_array_equal(sess.run(checked, {x: [1, 2]}), [2, 4])
        with pytest.raises(tf.errors.InvalidArgumentError, match="doubled : Tensor had NaN values"):
            sess.run(checked, {x: [1, np.nan]})
        with pytest.raises(tf.errors.InvalidArgumentError, match="doubled : Tensor had Inf values"):
            sess.run(checked, {x: [np.inf, 0]})
    with pytest.raises(TypeError, match="give maxlen"):
        tf.sequence_mask(lengths)


def test_local_response_normalization_swish_and_zero_fraction():
    tf.reset_default_graph()
    x = np.random.default_rng(0).normal(size=(2, 3, 3, 7)).astype(np.float32)
    out, sw, zf = _run([tf.nn.lrn(tf.constant(x), depth_radius=2, bias=2.0, alpha=1e-2, beta=0.75),
                        tf.nn.swish(tf.constant(x)), tf.nn.zero_fraction(tf.constant([0.0, 1.0, 0.0, 3.0]))])
    xd = x.astype(np.float64)
    want = np.empty_like(xd)
    for c in range(7):
        s = (xd[..., max(0, c - 2):c + 3] ** 2).sum(-1)
        want[..., c] = xd[..., c] / (2.0 + 1e-2 * s) ** 0.75
    np.testing.assert_allclose(out, want, rtol=1e-5)
    np.testing.assert_allclose(sw, xd / (1 + np.exp(-xd)), rtol=1e-5, atol=1e-7)
    assert zf == pytest.approx(0.5)


@pytest.mark.parametrize("padding,strides", [("SAME", 2), ("VALID", 1), ("VALID", 2)])
def test_conv2d_transpose_is_the_adjoint_of_conv2d(padding, strides):
    # <conv2d(x, w), y> == <x, conv2d_transpose(y, w)> for every x and y: the transpose's definition.
    tf.reset_default_graph()
    rng = np.random.default_rng(1)
    x = rng.normal(size=(2, 7, 6, 3)).astype(np.float64)
    w = rng.normal(size=(3, 2, 3, 4)).astype(np.float64)
    forward = tf.nn.conv2d(tf.constant(x), tf.constant(w), strides=[1, strides, strides, 1], padding=padding)
    y = rng.normal(size=forward.shape.as_list())
    back = tf.nn.conv2d_transpose(tf.constant(y), tf.constant(w), output_shape=list(x.shape),
                                  strides=[1, strides, strides, 1], padding=padding)
    assert back.shape.as_list() == list(x.shape)
    f, b = _run([forward, back])
    assert np.sum(f * y) == pytest.approx(np.sum(x * b), rel=1e-10)


def test_depthwise_and_separable_conv2d_are_grouped_convolutions_with_tensorflows_channel_order():
    tf.reset_default_graph()
    rng = np.random.default_rng(2)
    x = rng.normal(size=(2, 6, 5, 3))
    dw = rng.normal(size=(3, 3, 3, 2))     # channel multiplier 2
    pw = rng.normal(size=(1, 1, 6, 4))
    depth = tf.nn.depthwise_conv2d(tf.constant(x), tf.constant(dw), [1, 1, 1, 1], "SAME", rate=[2, 1])
    sep = tf.nn.separable_conv2d(tf.constant(x), tf.constant(dw), tf.constant(pw), [1, 2, 2, 1], "VALID")
    assert depth.shape.as_list() == [2, 6, 5, 6] and sep.shape.as_list() == [2, 2, 2, 4]
    assert sep.op.name.startswith("separable_conv2d/")
    d, s = _run([depth, sep])
    # Channel c*2 + m: input channel c with filter m, each convolved alone.
    for c in range(3):
        for m in range(2):
            one = tf.nn.conv2d(tf.constant(x[..., c:c + 1]), tf.constant(dw[:, :, c:c + 1, m:m + 1]),
                               [1, 1, 1, 1], "SAME", dilations=[1, 2, 1, 1])
            np.testing.assert_allclose(d[..., c * 2 + m], _run([one])[0][..., 0], rtol=1e-10, atol=1e-12)
    strided = tf.nn.depthwise_conv2d(tf.constant(x), tf.constant(dw), [1, 2, 2, 1], "VALID")
    want = np.einsum("nhwc,co->nhwo", _run([strided])[0], pw[0, 0])
    np.testing.assert_allclose(s, want, rtol=1e-10, atol=1e-12)


def test_conv1d_is_a_convolution_over_one_row():
    tf.reset_default_graph()
    rng = np.random.default_rng(4)
    x = rng.normal(size=(2, 9, 3))
    w = rng.normal(size=(3, 3, 5))
    y = tf.nn.conv1d(tf.constant(x), tf.constant(w), stride=2, padding="SAME")
    row = tf.nn.conv2d(tf.constant(x[:, None]), tf.constant(w[None]), [1, 1, 2, 1], "SAME")
    assert y.shape.as_list() == [2, 5, 5]
    got, want = _run([y, row])
    np.testing.assert_allclose(got, want[:, 0], rtol=1e-12)


def test_streaming_metrics_accumulate_over_batches_until_reset():
    tf.reset_default_graph()
    labels = tf.placeholder(tf.int64, [None])
    predictions = tf.placeholder(tf.int64, [None])
    values = tf.placeholder(tf.float32, [None])
    acc, acc_update = tf.metrics.accuracy(labels, predictions)
    mean, mean_update = tf.metrics.mean(values, weights=tf.constant([1.0, 3.0]))
    mse, mse_update = tf.metrics.mean_squared_error(labels, predictions)
    assert [v.name for v in tf.local_variables()] == ["accuracy/total:0", "accuracy/count:0", "mean/total:0",
                                                      "mean/count:0", "mean_squared_error/total:0",
                                                      "mean_squared_error/count:0"]
    mae, mae_update = tf.metrics.mean_absolute_error(labels, predictions)
    with tf.Session() as sess:
        sess.run(tf.local_variables_initializer())
        assert sess.run(acc) == 0.0   # nothing counted yet
        assert sess.run(acc_update, {labels: [1, 2, 3], predictions: [1, 0, 3]}) == pytest.approx(2 / 3)
        sess.run([acc_update, mse_update, mae_update], {labels: [4, 1], predictions: [5, 4]})
        assert sess.run(acc) == pytest.approx(2 / 5)
        assert sess.run(mse) == pytest.approx((1 + 9) / 2)   # only the second batch updated it
        assert sess.run(mae) == pytest.approx((1 + 3) / 2)
        sess.run(mean_update, {values: [2.0, 4.0]})
        assert sess.run(mean) == pytest.approx((2.0 + 12.0) / 4.0)
        sess.run(tf.local_variables_initializer())
        assert sess.run(acc) == 0.0 and sess.run(mean) == 0.0


def test_multinomial_draws_each_row_from_its_softmax_anew_on_every_run():
    tf.reset_default_graph()
    logits = tf.placeholder(tf.float32, [None, 3])
    draws = tf.multinomial(logits, 4000, seed=3)
    assert draws.shape.as_list() == [None, 4000] and draws.dtype == tf.int64
    feed = {logits: np.log([[0.2, 0.3, 0.5], [1.0, 1e-30, 1e-30]])}
    with tf.Session() as sess:
        first, second = sess.run(draws, feed), sess.run(draws, feed)
    np.testing.assert_allclose(np.bincount(first[0], minlength=3) / 4000, [0.2, 0.3, 0.5], atol=0.03)
    assert (first[1] == 0).all() and (first != second).any()
    # A seeded op starts its sequence over in a new session, as TensorFlow's does.
    np.testing.assert_array_equal(_run([draws], feed)[0], first)


def test_layers_conv2d_transpose_and_separable_conv2d():
    # tf.layers' transposed and separable convolutions: TensorFlow's kernel shapes and names,
    # output sizes (a placeholder's unknown batch kept), the values of tf.nn's ops on the same
    # kernels, and gradients reaching every variable.
    tf.reset_default_graph()
    rng = np.random.default_rng(0)
    x = tf.placeholder(tf.float32, [None, 5, 6, 3])
    up = tf.layers.conv2d_transpose(x, 4, 3, strides=2, padding="valid", name="up")
    same = tf.layers.conv2d_transpose(x, 2, (2, 3), strides=(2, 1), padding="same", use_bias=False, name="same")
    sep = tf.layers.separable_conv2d(x, 5, 3, padding="same", depth_multiplier=2, activation=tf.nn.relu, name="sep")
    assert up.shape.as_list() == [None, 11, 13, 4] and same.shape.as_list() == [None, 10, 6, 2]
    assert sep.shape.as_list() == [None, 5, 6, 5]
    names = sorted(v.op.name for v in tf.trainable_variables())
    assert names == ["same/kernel", "sep/bias", "sep/depthwise_kernel", "sep/pointwise_kernel", "up/bias", "up/kernel"]
    kernel = tf.get_default_graph().get_tensor_by_name("up/kernel:0")
    assert kernel.shape.as_list() == [3, 3, 4, 3]
    loss = tf.reduce_sum(up ** 2) + tf.reduce_sum(same ** 2) + tf.reduce_sum(sep ** 2)
    grads = tf.gradients(loss, tf.trainable_variables())
    xv = rng.standard_normal((2, 5, 6, 3)).astype(np.float32)
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        u, s, p, gs, kv = sess.run([up, same, sep, grads, kernel], {x: xv})
        dk, pk, b = sess.run(["sep/depthwise_kernel:0", "sep/pointwise_kernel:0", "sep/bias:0"])
        want_up = sess.run(tf.nn.conv2d_transpose(tf.constant(xv), tf.constant(kv), [2, 11, 13, 4], [1, 2, 2, 1],
                                                  "VALID"))
        want_sep = sess.run(tf.nn.relu(tf.nn.separable_conv2d(tf.constant(xv), tf.constant(dk), tf.constant(pk),
                                                              [1, 1, 1, 1], "SAME") + b))
    assert u.shape == (2, 11, 13, 4) and s.shape == (2, 10, 6, 2) and p.shape == (2, 5, 6, 5)
    np.testing.assert_allclose(u, want_up, rtol=1e-5, atol=1e-5)      # zero bias at initialization
    np.testing.assert_allclose(p, want_sep, rtol=1e-5, atol=1e-5)
    assert all(g is not None and np.abs(g).sum() > 0 for g in gs)
