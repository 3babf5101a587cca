"""Reading checkpoints without a Saver: NewCheckpointReader, list_variables, load_variable,
and init_from_checkpoint (a pretrained model's layers loaded by the initializer, a new
head initialized as written)."""

from __future__ import annotations

import numpy as np
import pytest

import flowjit.v1 as tf


def _pretrained(tmp_path):
    """A checkpoint of a two-layer model (body/w, body/b, head/w) and an Adam slot."""
    tf.reset_default_graph()
    rng = np.random.default_rng(0)
    with tf.variable_scope("body"):
        w = tf.get_variable("w", initializer=rng.normal(size=(3, 4)).astype(np.float32))
        b = tf.get_variable("b", initializer=np.arange(4, dtype=np.float32))
    head = tf.get_variable("head/w", initializer=np.ones((4, 2), np.float32))
    slot = tf.Variable(np.zeros(3, np.float64), name="body/w/Adam")
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        path = tf.train.Saver().save(sess, str(tmp_path / "model.ckpt"), global_step=7)
        values = dict(zip(["body/w", "body/b", "head/w", "body/w/Adam"], sess.run([w, b, head, slot])))
    return path, values


def test_a_reader_lists_shapes_and_dtypes_and_reads_one_tensor(tmp_path):
    path, values = _pretrained(tmp_path)
    assert tf.train.list_variables(str(tmp_path)) == [("body/b", [4]), ("body/w", [3, 4]), ("body/w/Adam", [3]),
                                                      ("head/w", [4, 2])]
    reader = tf.train.NewCheckpointReader(path)
    assert reader.get_variable_to_shape_map()["body/w"] == [3, 4]
    assert reader.get_variable_to_dtype_map()["body/w/Adam"] == tf.float64
    assert reader.has_tensor("head/w") and not reader.has_tensor("head/b")
    np.testing.assert_array_equal(reader.get_tensor("body/w"), values["body/w"])
    np.testing.assert_array_equal(tf.train.load_variable(str(tmp_path), "body/b:0"), values["body/b"])
    assert reader.debug_string().splitlines()[0] == b"body/b (DT_FLOAT) [4]"
    with pytest.raises(tf.errors.NotFoundError, match="Key head/b not found in checkpoint"):
        reader.get_tensor("head/b")
    with pytest.raises(tf.errors.NotFoundError, match="failed to find any matching files"):
        tf.train.load_checkpoint(str(tmp_path / "missing.ckpt"))


def test_init_from_checkpoint_loads_a_scope_into_another_and_leaves_the_rest_to_its_initializer(tmp_path):
    path, values = _pretrained(tmp_path)
    tf.reset_default_graph()
    with tf.variable_scope("encoder"):
        w = tf.get_variable("w", [3, 4])
        b = tf.get_variable("b", [4])
    new_head = tf.get_variable("classifier/w", initializer=np.full((4, 5), 0.5, np.float32))
    tf.train.init_from_checkpoint(str(tmp_path), {"body/": "encoder/"})
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        got_w, got_b, got_head = sess.run([w, b, new_head])
    np.testing.assert_array_equal(got_w, values["body/w"])
    np.testing.assert_array_equal(got_b, values["body/b"])
    np.testing.assert_array_equal(got_head, np.full((4, 5), 0.5))


def test_init_from_checkpoint_by_name_and_its_refusals(tmp_path):
    path, values = _pretrained(tmp_path)
    tf.reset_default_graph()
    h = tf.get_variable("h", [4, 2])
    tf.train.init_from_checkpoint(path, {"head/w": h})
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        np.testing.assert_array_equal(sess.run(h), values["head/w"])
    tf.reset_default_graph()
    tf.get_variable("h", [2, 2])
    with pytest.raises(ValueError, match=r"'head/w' is float32\[4, 2\] in the checkpoint, variable 'h' is "
                                         r"float32\[2, 2\]"):
        tf.train.init_from_checkpoint(path, {"head/w": "h"})
    with pytest.raises(ValueError, match=r"tensor 'head/h' is not found in .*model.ckpt-7 \(for variable 'h'\)"):
        tf.train.init_from_checkpoint(path, {"head/": "/"})
    with pytest.raises(ValueError, match="the graph has no variable named 'nope'"):
        tf.train.init_from_checkpoint(path, {"head/w": "nope"})
