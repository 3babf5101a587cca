"""``tf.train.ExponentialMovingAverage`` (flowjit.v1.train.moving_averages): shadows that
follow their variables by TensorFlow 1.x's recurrence, restored into a model by a Saver, and
moved once per aggregated update by ``SyncReplicasOptimizer(variable_averages=...)``."""

from __future__ import annotations

import numpy as np
import pytest

import flowjit.v1 as tf


def _recurrence(values, decay, num_updates=None, start=0.0):
    """The shadow after each value, in float64: TensorFlow's update rule."""
    shadow, out = start, []
    for k, v in enumerate(values):
        d = decay if num_updates is None else min(decay, (1 + num_updates[k]) / (10 + num_updates[k]))
        shadow = shadow - (1 - d) * (shadow - v)
        out.append(shadow)
    return out


def _regression_graph(decay=0.9, use_step=True):
    tf.reset_default_graph()
    tf.set_random_seed(0)
    step = tf.train.get_or_create_global_step()
    w = tf.Variable(np.array([1.0, -2.0], np.float32), name="w")
    b = tf.Variable(np.float32(0.5), name="b")
    x = tf.placeholder(tf.float32, [None, 2])
    y = tf.placeholder(tf.float32, [None])
    loss = tf.reduce_mean((tf.reduce_sum(x * w, axis=1) + b - y) ** 2)
    update = tf.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=step)
    ema = tf.train.ExponentialMovingAverage(decay, num_updates=step if use_step else None)
    with tf.control_dependencies([update]):
        train = ema.apply([w, b])
    return step, w, b, x, y, ema, train


def _batches(n, seed=0):
    rng = np.random.default_rng(seed)
    xs = rng.normal(size=(n, 8, 2)).astype(np.float32)
    return xs, (xs @ np.array([0.5, 1.5], np.float32) - 1.0).astype(np.float32)


@pytest.mark.parametrize("use_step", [True, False])
def test_the_shadows_follow_the_variables_after_each_step(use_step):
    step, w, b, x, y, ema, train = _regression_graph(use_step=use_step)
    xs, ys = _batches(6)
    assert ema.average(w).name == "w/ExponentialMovingAverage:0" == ema.average_name(w) + ":0"
    assert not ema.average(w).trainable and ema.average(w) not in tf.trainable_variables()
    assert tf.moving_average_variables() == [w, b]
    seen_w, seen_b = [], []
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        np.testing.assert_array_equal(sess.run(ema.average(w)), [1.0, -2.0])   # the variable's initial value
        for xb, yb in zip(xs, ys):
            sess.run(train, {x: xb, y: yb})
            seen_w.append(sess.run(w).astype(np.float64))
            seen_b.append(float(sess.run(b)))
            got_w, got_b = sess.run([ema.average(w), ema.average(b)])
        assert sess.run(step) == 6
    steps = list(range(1, 7)) if use_step else None
    np.testing.assert_allclose(got_w, _recurrence(seen_w, 0.9, steps, np.array([1.0, -2.0]))[-1], rtol=1e-5)
    np.testing.assert_allclose(got_b, _recurrence(seen_b, 0.9, steps, 0.5)[-1], rtol=1e-5)


def test_a_saver_of_variables_to_restore_loads_the_averages_into_the_model(tmp_path):
    step, w, b, x, y, ema, train = _regression_graph()
    xs, ys = _batches(4, seed=1)
    assert sorted(ema.variables_to_restore()) == ["b/ExponentialMovingAverage", "global_step",
                                                  "w/ExponentialMovingAverage"]
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        for xb, yb in zip(xs, ys):
            sess.run(train, {x: xb, y: yb})
        averages = sess.run([ema.average(w), ema.average(b)])
        trained = sess.run(w)
        path = tf.train.Saver().save(sess, str(tmp_path / "model"), global_step=step)
    assert not np.allclose(averages[0], trained)
    # An evaluation graph: the model alone, its variables loaded from the shadows.
    tf.reset_default_graph()
    step = tf.train.get_or_create_global_step()
    w = tf.Variable(np.zeros(2, np.float32), name="w")
    b = tf.Variable(np.float32(0.0), name="b")
    restore = tf.train.ExponentialMovingAverage(0.9).variables_to_restore()
    assert restore == {"w/ExponentialMovingAverage": w, "b/ExponentialMovingAverage": b, "global_step": step}
    with tf.Session() as sess:
        tf.train.Saver(restore).restore(sess, path)
        np.testing.assert_array_equal(sess.run(w), averages[0])
        np.testing.assert_array_equal(sess.run(b), averages[1])
        assert sess.run(step) == 4


def test_a_tensors_zero_debiased_average():
    tf.reset_default_graph()
    x = tf.placeholder(tf.float32, [3])
    m = 2.0 * x
    ema = tf.train.ExponentialMovingAverage(0.8, zero_debias=True)
    update = ema.apply([m])
    values = np.random.default_rng(2).normal(size=(5, 3)).astype(np.float32)
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        np.testing.assert_array_equal(sess.run(ema.average(m)), np.zeros(3))
        for k, v in enumerate(values, start=1):
            sess.run(update, {x: v})
            biased = _recurrence(2.0 * values[:k].astype(np.float64), 0.8)[-1]
            np.testing.assert_allclose(sess.run(ema.average(m)), biased / (1 - 0.8 ** k), rtol=1e-5)
    assert tf.moving_average_variables() == []     # a tensor's average is kept, but it is no variable


def test_what_it_refuses():
    tf.reset_default_graph()
    v = tf.Variable(np.float32(1.0), name="v")
    n = tf.Variable(np.int32(3), name="n")
    with pytest.raises(ValueError, match=r"decay=1.5.*between 0 and 1"):
        tf.train.ExponentialMovingAverage(1.5)
    ema = tf.train.ExponentialMovingAverage(0.99)
    with pytest.raises(TypeError, match=r"float16, float32 or float64; n:0 is int32"):
        ema.apply([n])
    ema.apply([v])
    with pytest.raises(ValueError, match=r"already kept for v:0"):
        ema.apply([v])
    with pytest.raises(TypeError, match=r"give a tf.train.ExponentialMovingAverage"):
        tf.train.SyncReplicasOptimizer(tf.train.GradientDescentOptimizer(0.1), 2, variable_averages=0.99)


def test_sync_replicas_moves_the_averages_once_per_aggregated_update():
    replicas = 2
    tf.reset_default_graph()
    step = tf.train.get_or_create_global_step()
    w = tf.Variable(np.array([1.0, -2.0], np.float32), name="w")
    b = tf.Variable(np.float32(0.5), name="b")
    x, y = tf.placeholder(tf.float32, [None, 2]), tf.placeholder(tf.float32, [None])
    loss = tf.reduce_mean((tf.reduce_sum(x * w, axis=1) + b - y) ** 2)
    ema = tf.train.ExponentialMovingAverage(0.9, num_updates=step)
    opt = tf.train.SyncReplicasOptimizer(tf.train.GradientDescentOptimizer(0.1), replicas_to_aggregate=replicas,
                                         variable_averages=ema, variables_to_average=[w])
    train = opt.minimize(loss, global_step=step)
    assert ema.average(b) is None
    hook = opt.make_session_run_hook(is_chief=True)
    hook.begin()
    xs, ys = _batches(4, seed=3)
    seen = []
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        hook.after_create_session(sess, None)
        for k in range(2):
            before = sess.run(ema.average(w))
            sess.run(train, {x: xs[2 * k], y: ys[2 * k]})
            np.testing.assert_array_equal(sess.run(ema.average(w)), before)   # no update applied yet
            sess.run(train, {x: xs[2 * k + 1], y: ys[2 * k + 1]})
            assert sess.run(step) == k + 1
            seen.append(sess.run(w).astype(np.float64))
        got = sess.run(ema.average(w))
    np.testing.assert_allclose(got, _recurrence(seen, 0.9, [1, 2], np.array([1.0, -2.0]))[-1], rtol=1e-5)
