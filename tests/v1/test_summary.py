"""tf.summary in a v1 program: summary ops evaluate to serialized Summary protos, merge_all
merges them, and FileWriter writes them and the graph where TensorBoard's reader finds them."""

from __future__ import annotations

import numpy as np
import pytest

import flowjit.v1 as tf

pytest.importorskip("tensorboardX")
event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")


@pytest.fixture(autouse=True)
def fresh_graph():
    tf.reset_default_graph()
    yield
    tf.reset_default_graph()


def test_a_training_loop_logs_scalars_histograms_and_its_graph(tmp_path):
    x = tf.placeholder(tf.float32, [None, 2], name="x")
    y = tf.placeholder(tf.float32, [None, 1], name="y")
    with tf.name_scope("model"):
        W = tf.Variable(tf.zeros([2, 1]), name="W")
        pred = tf.matmul(x, W)
    loss = tf.reduce_mean(tf.square(pred - y))
    train = tf.train.GradientDescentOptimizer(0.1).minimize(loss)
    tf.summary.scalar("loss", loss)
    tf.summary.histogram("W", W)
    merged = tf.summary.merge_all()
    xs = np.array([[1, 0], [0, 1]], np.float32)
    ys = np.array([[1], [2]], np.float32)
    losses = []
    with tf.Session() as sess, tf.summary.FileWriter(str(tmp_path), sess.graph) as writer:
        sess.run(tf.global_variables_initializer())
        for step in range(3):
            summary, value, _ = sess.run([merged, loss, train], {x: xs, y: ys})
            writer.add_summary(summary, step)
            losses.append(value)
        # The summaries run after the step's one compiled program, which they do not split.
        plan = list(sess._plans.values())[-1]
        assert [getattr(s, "type", "Segment") for s in plan.steps] == ["Segment", "MergeSummary"]
    acc = event_accumulator.EventAccumulator(str(tmp_path), size_guidance={"histograms": 0})
    acc.Reload()
    # The summary holds the loss the same run computed (before that step's update).
    assert [(e.step, e.value) for e in acc.Scalars("loss")] == [(k, pytest.approx(float(v))) for k, v in
                                                                enumerate(losses)]
    assert losses[0] > losses[-1]
    assert [e.step for e in acc.Histograms("W")] == [0, 1, 2]
    assert acc.Histograms("W")[0].histogram_value.max == 0.0
    nodes = {n.name: n for n in acc.Graph().node}
    assert nodes["x"].op == "Placeholder" and nodes["model/MatMul"].op == "MatMul"
    assert nodes["model/MatMul"].input[0] == "x"
    assert nodes["loss"].op == "ScalarSummary" and nodes["MergeSummary"].input == ["loss", "W"]


def test_a_summary_value_is_a_serialized_proto():
    from tensorboardX.proto.summary_pb2 import Summary
    c = tf.constant(2.5)
    s1 = tf.summary.scalar("a", c)
    s2 = tf.summary.scalar("b", c * 2)
    merged = tf.summary.merge([s1, s2])
    with tf.Session() as sess:
        one, both = sess.run([s1, merged])
    assert [(v.tag, v.simple_value) for v in Summary.FromString(one.item()).value] == [("a", 2.5)]
    assert [(v.tag, v.simple_value) for v in Summary.FromString(both.item()).value] == [("a", 2.5), ("b", 5.0)]


def test_a_tiny_value_survives(tmp_path):
    # A float32 whose top byte is zero ends the serialized proto with a zero byte, which
    # NumPy's bytes dtype would strip.
    s = tf.summary.scalar("tiny", tf.constant(np.float32(1e-40)))
    with tf.Session() as sess, tf.summary.FileWriter(str(tmp_path)) as writer:
        writer.add_summary(sess.run(s), 0)
    acc = event_accumulator.EventAccumulator(str(tmp_path))
    acc.Reload()
    assert acc.Scalars("tiny")[0].value == pytest.approx(1e-40, rel=1e-3)


def test_merge_all_without_summaries_is_none_and_merge_rejects_other_tensors():
    assert tf.summary.merge_all() is None
    with pytest.raises(TypeError, match="not a summary"):
        tf.summary.merge([tf.constant(1.0)])


def test_a_scalar_summary_of_a_vector_names_the_op():
    s = tf.summary.scalar("v", tf.constant([1.0, 2.0]))
    with tf.Session() as sess, pytest.raises(ValueError, match="'v'.*shape \\(2,\\).*ScalarSummary op 'v'"):
        sess.run(s)


def test_tf_summary_proto_for_values_computed_in_python(tmp_path):
    with tf.summary.FileWriter(str(tmp_path)) as writer:
        writer.add_summary(tf.Summary(value=[tf.Summary.Value(tag="eval/accuracy", simple_value=0.75)]), 3)
    acc = event_accumulator.EventAccumulator(str(tmp_path))
    acc.Reload()
    assert [(e.step, e.value) for e in acc.Scalars("eval/accuracy")] == [(3, 0.75)]


def test_the_graph_shows_simple_attributes():
    from flowjit.v1.summary import graph_to_graph_def
    x = tf.placeholder(tf.float32, [None, 2], name="x")
    tf.transpose(x * 3.0, [1, 0])
    nodes = {n.name: n for n in graph_to_graph_def(tf.get_default_graph()).node}
    assert nodes["transpose"].attr["perm"].s == b"(1, 0)"
    const = next(n for n in nodes.values() if n.op == "Const")
    assert const.attr["value"].s == b"3."  # NumPy's text of the constant
    assert [d.size for d in nodes["x"].attr["_output_shapes"].list.shape[0].dim] == [-1, 2]
