"""flowjit.v1's spellings that must match TensorFlow's: ``tf.range``'s dtypes and
``tf.nn.conv2d``'s arguments (the same function as ``fj.nn.conv2d``)."""

from __future__ import annotations

import numpy as np
import pytest

import flowjit as fj
import flowjit.v1 as tf


@pytest.fixture(autouse=True)
def fresh_graph():
    tf.reset_default_graph()
    yield


@pytest.mark.parametrize("args, kwargs, dtype, want", [
    ((5,), {}, np.int32, np.arange(5)),
    ((1, 7, 2), {}, np.int32, [1, 3, 5]),
    ((5, 0, -2), {}, np.int32, [5, 3, 1]),
    ((3, 3), {}, np.int32, []),
    ((5.0,), {}, np.float32, np.arange(5)),
    ((0, 2, 0.5), {}, np.float32, np.arange(0, 2, 0.5)),
    ((1, 4.0), {}, np.float32, [1, 2, 3]),
    ((5,), {"dtype": tf.float32}, np.float32, np.arange(5)),
    ((5,), {"dtype": "int64"}, np.int64, np.arange(5)),
    ((0, 1, 0.25), {"dtype": tf.float64}, np.float64, np.arange(0, 1, 0.25)),
    ((np.int64(4),), {}, np.int64, np.arange(4)),
    ((np.float64(2),), {}, np.float64, [0, 1]),
    ((2, np.int64(5)), {}, np.int64, [2, 3, 4]),
])
def test_range_infers_dtypes_as_tensorflow_does(args, kwargs, dtype, want):
    r = tf.range(*args, **kwargs)
    assert r.dtype == tf.as_dtype(dtype) and r.shape.as_list() == [len(want)]
    with tf.Session() as sess:
        got = sess.run(r)
    assert got.dtype == dtype
    np.testing.assert_array_equal(got, np.asarray(want, dtype))


def test_range_takes_constant_tensors_and_names_what_it_cannot_take():
    with tf.Session() as sess:
        r = tf.range(tf.constant(2), tf.constant(6, tf.int64))
        assert r.dtype == tf.int64
        np.testing.assert_array_equal(sess.run(r), [2, 3, 4, 5])
    with pytest.raises(ValueError, match=r"tf.range: delta must not be 0"):
        tf.range(0, 4, 0)
    n = tf.placeholder(tf.int32, [])
    with pytest.raises(TypeError, match=r"tf.range: limit is the Tensor 'Placeholder:0'.*not a constant"):
        tf.range(n)


def test_nn_conv2d_is_fj_nn_conv2d_in_a_graph():
    rng = np.random.default_rng(0)
    xs = rng.standard_normal((2, 7, 6, 3)).astype(np.float32)
    ws = rng.standard_normal((3, 3, 3, 4)).astype(np.float32)
    x = tf.placeholder(tf.float32, [None, 7, 6, 3])
    forms = [([1, 2, 2, 1], "SAME", None), (1, "VALID", [1, 2, 1, 1]), ((2, 1), [[0, 0], [1, 1], [2, 0], [0, 0]], 1)]
    ys = [tf.nn.conv2d(x, ws, strides, padding, dilations=dil) for strides, padding, dil in forms]
    assert [y.shape.as_list() for y in ys] == [[None, 4, 3, 4], [None, 3, 4, 4], [None, 4, 6, 4]]
    with tf.Session() as sess:
        got = sess.run(ys, {x: xs})
    for g, (strides, padding, dil) in zip(got, forms):
        np.testing.assert_allclose(g, fj.nn.conv2d(xs, ws, strides, padding, dilations=dil), rtol=1e-6)


@pytest.mark.parametrize("kwargs, message", [
    ({"data_format": "NCHW"}, r"data_format='NCHW' is not supported"),
    ({"strides": [2, 1, 1, 1]}, r"strides=\[2, 1, 1, 1\] moves along the batch or channel dimension"),
    ({"padding": [[0, 0], [1, 1], [1, 1], [0, 1]]}, r"pads the batch or channel dimension"),
    ({"strides": None}, r"strides=None must be an int, 1, 2 or 4 values"),
    ({"padding": None}, r"padding=None must be 'SAME', 'VALID' or four"),
])
def test_nn_conv2d_errors_at_graph_construction_with_the_shapes_and_line(kwargs, message):
    x = tf.placeholder(tf.float32, [None, 5, 5, 2])
    w = tf.ones([3, 3, 2, 4])
    args = {"strides": [1, 1, 1, 1], "padding": "SAME", **kwargs}
    with pytest.raises(ValueError, match=message) as info:
        tf.nn.conv2d(x, w, **args)
    assert str(info.value).startswith("conv2d of input [None, 5, 5, 2] and filters [3, 3, 2, 4]: ")
    assert "test_tf_names.py:" in str(info.value)
