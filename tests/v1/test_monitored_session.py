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


# ---- the hooks TensorFlow's training loops use ------------------------------------------------------------------

def test_the_chief_writes_summaries_and_steps_per_second_into_its_checkpoint_dir(tmp_path):
    event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    xs = np.arange(1, 5, dtype=np.float32)
    g = tf.Graph()
    with g.as_default():
        step, w, x, loss, train = _linear_model()
        tf.summary.scalar("loss", loss)
        recorder = _Recorder(loss)
        with tf.train.MonitoredTrainingSession(checkpoint_dir=str(tmp_path), save_summaries_steps=2,
                                               log_step_count_steps=2, save_checkpoint_secs=None,
                                               hooks=[recorder, tf.train.StopAtStepHook(last_step=7)]) as sess:
            while not sess.should_stop():
                sess.run(train, {x: xs})
    tf.summary.FileWriterCache.clear()   # closes (flushes) the writers the hooks shared
    acc = event_accumulator.EventAccumulator(str(tmp_path))
    acc.Reload()
    # The loss summary, run beside the train op, at the first run and every second global
    # step, written at the step after its run; the speed every second step after the first.
    assert [e.step for e in acc.Scalars("loss")] == [1, 3, 5, 7]
    np.testing.assert_allclose([e.value for e in acc.Scalars("loss")], [recorder.losses[i] for i in (0, 2, 4, 6)],
                               rtol=1e-6)
    speeds = acc.Scalars("global_step/sec")
    assert [e.step for e in speeds] == [3, 5, 7] and all(e.value > 0 for e in speeds)


def test_no_summaries_without_a_directory_or_with_the_period_off(tmp_path):
    g = tf.Graph()
    with g.as_default():
        step, w, x, loss, train = _linear_model()
        tf.summary.scalar("loss", loss)
        with tf.train.MonitoredTrainingSession(checkpoint_dir=str(tmp_path), save_summaries_steps=0,
                                               log_step_count_steps=0, save_checkpoint_secs=None,
                                               hooks=[tf.train.StopAtStepHook(last_step=2)]) as sess:
            while not sess.should_stop():
                sess.run(train, {x: np.ones(2, np.float32)})
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("events.")]


def test_summaries_into_a_directory_need_a_global_step(tmp_path):
    g = tf.Graph()
    with g.as_default():
        tf.Variable(1.0)
        with pytest.raises(RuntimeError, match=r"SummarySaverHook needs a global step.*log_step_count_steps=0"):
            tf.train.MonitoredTrainingSession(checkpoint_dir=str(tmp_path))
        with tf.train.MonitoredTrainingSession(checkpoint_dir=str(tmp_path), save_summaries_steps=0,
                                               log_step_count_steps=0, save_checkpoint_secs=None):
            pass


def test_logging_tensor_hook_logs_every_n_runs_and_at_the_end(caplog):
    g = tf.Graph()
    with g.as_default():
        step, w, x, loss, train = _linear_model()
        hook = tf.train.LoggingTensorHook({"w": w, "step": step}, every_n_iter=2, at_end=True)
        with caplog.at_level("INFO", logger="flowjit.v1"):
            with tf.train.MonitoredTrainingSession(hooks=[hook, tf.train.StopAtStepHook(last_step=5)]) as sess:
                while not sess.should_stop():
                    sess.run(train, {x: np.ones(2, np.float32)})
    lines = [r.getMessage() for r in caplog.records if r.name == "flowjit.v1"]
    # runs 0, 2 and 4 (each line fetched beside its run: the step before its update), then the end
    assert [line.split(",")[0] for line in lines] == ["step = 0", "step = 2", "step = 4", "step = 5"]
    assert ", w = " in lines[0] and " sec)" not in lines[0] and lines[1].endswith(" sec)")
    with pytest.raises(ValueError, match="at_end and/or exactly one of every_n_iter and every_n_secs"):
        tf.train.LoggingTensorHook({"loss": loss})


@pytest.mark.parametrize("fail", [True, False])
def test_nan_tensor_hook_stops_training_at_a_nan_loss(fail):
    g = tf.Graph()
    with g.as_default():
        step, w, x, loss, train = _linear_model()
        runs = 0
        sess = tf.train.MonitoredTrainingSession(hooks=[tf.train.NanTensorHook(loss, fail_on_nan_loss=fail)])
        with sess:
            sess.run(train, {x: np.ones(2, np.float32)})
            if fail:
                with pytest.raises(tf.train.NanLossDuringTrainingError, match="NaN loss during training"):
                    sess.run(train, {x: np.array([np.nan], np.float32)})
            else:
                while not sess.should_stop():
                    sess.run(train, {x: np.array([np.nan], np.float32)})
                    runs += 1
        assert runs == (0 if fail else 1)


def test_second_or_step_timer():
    timer = tf.train.SecondOrStepTimer(every_steps=3)
    assert timer.should_trigger_for_step(5) and timer.update_last_triggered_step(5) == (None, None)
    assert not timer.should_trigger_for_step(5) and not timer.should_trigger_for_step(7)
    assert timer.should_trigger_for_step(8)
    seconds, steps = timer.update_last_triggered_step(8)
    assert seconds >= 0 and steps == 3 and timer.last_triggered_step() == 8
    with pytest.raises(ValueError, match="exactly one of every_secs and every_steps"):
        tf.train.SecondOrStepTimer()


def test_a_scaffolds_init_fn_runs_after_its_init_op():
    g = tf.Graph()
    with g.as_default():
        w = tf.Variable(1.0, name="w")
        seen = []
        def init_fn(scaffold, sess):
            seen.append(float(sess.run(w)))
            w.load(5.0, sess)
        scaffold = tf.train.Scaffold(init_fn=init_fn)
        with tf.train.MonitoredTrainingSession(scaffold=scaffold) as sess:
            assert sess.run(w) == 5.0
        assert seen == [1.0] and scaffold.summary_op is None   # the graph has no summaries
