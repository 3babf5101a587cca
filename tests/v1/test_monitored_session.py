"""``tf.train.MonitoredTrainingSession``: initialization or restore, hooks around each run,
stopping at a step, checkpoints by the chief, and an exhausted input ending the loop."""

from __future__ import annotations

import numpy as np
import pytest

import flowjit.v1 as tf


def _linear_model():
    step = tf.train.get_or_create_global_step()
    w = tf.Variable(0.0, name="w")
    x = tf.placeholder(tf.float32, [None])
    loss = tf.reduce_mean(tf.square(w * x - 2.0 * x))
    train = tf.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=step)
    return step, w, x, loss, train


class _Recorder(tf.train.SessionRunHook):
    """Fetches the loss beside every run and counts the calls."""

    def __init__(self, loss):
        self.loss, self.calls, self.losses = loss, [], []

    def begin(self):
        self.calls.append("begin")

    def after_create_session(self, session, coord):
        self.calls.append("after_create_session")

    def before_run(self, run_context):
        return tf.train.SessionRunArgs(self.loss)

    def after_run(self, run_context, run_values):
        self.losses.append(float(run_values.results))

    def end(self, session):
        self.calls.append("end")


def test_it_trains_until_the_last_step_with_hooks_and_resumes_from_its_checkpoint(tmp_path):
    xs = np.arange(1, 5, dtype=np.float32)
    g = tf.Graph()
    with g.as_default():
        step, w, x, loss, train = _linear_model()
        recorder = _Recorder(loss)
        with tf.train.MonitoredTrainingSession(checkpoint_dir=str(tmp_path), save_checkpoint_steps=2,
                                               hooks=[recorder, tf.train.StopAtStepHook(last_step=5)]) as sess:
            runs = 0
            while not sess.should_stop():
                assert sess.run(train, {x: xs}) is None
                runs += 1
        assert runs == 5 and recorder.calls == ["begin", "after_create_session", "end"]
        assert recorder.losses == sorted(recorder.losses, reverse=True) and len(recorder.losses) == 5
        assert tf.train.latest_checkpoint(str(tmp_path)).endswith("model.ckpt-5")
        with pytest.raises(RuntimeError, match="finalized"):
            tf.constant(1.0)  # as TensorFlow: the graph is finalized
    # A new session restores the newest checkpoint and goes on from step 5.
    g = tf.Graph()
    with g.as_default():
        step, w, x, loss, train = _linear_model()
        with tf.train.MonitoredTrainingSession(checkpoint_dir=str(tmp_path),
                                               hooks=[tf.train.StopAtStepHook(num_steps=3)]) as sess:
            assert sess.run(step) == 5
            w5 = sess.run(w)
            while not sess.should_stop():
                sess.run(train, {x: xs})
            assert sess.run(step) == 8 and abs(sess.run(w) - 2.0) < abs(w5 - 2.0)


def test_an_exhausted_input_ends_the_loop_quietly():
    g = tf.Graph()
    with g.as_default():
        data = tf.train.limit_epochs(tf.constant([1.0, 2.0]), num_epochs=3)
        total = tf.Variable(0.0)
        add = tf.assign_add(total, tf.reduce_sum(data))
        seen = []
        with tf.train.MonitoredTrainingSession() as sess:
            while not sess.should_stop():
                seen.append(float(sess.run(add)))
        assert seen == [3.0, 6.0, 9.0]


def test_hook_arguments_are_checked():
    with pytest.raises(ValueError, match="exactly one of num_steps and last_step"):
        tf.train.StopAtStepHook()
    g = tf.Graph()
    with g.as_default():
        tf.Variable(1.0)
        with pytest.raises(RuntimeError, match="needs a global step"):
            tf.train.MonitoredTrainingSession(hooks=[tf.train.StopAtStepHook(last_step=1)])
