"""``tf.train``'s learning-rate schedules (flowjit.v1.train.learning_rate_decay): each one's
value at the global step against TensorFlow 1.x's formula, computed here in float64."""

from __future__ import annotations

import math

import numpy as np
import pytest

import flowjit.v1 as tf

STEPS = [0, 1, 7, 10, 15, 20, 33]


def _values(make, steps=STEPS):
    tf.reset_default_graph()
    step = tf.train.get_or_create_global_step()
    lr = make(step)
    out = []
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        for s in steps:
            step.load(s, sess)
            out.append(sess.run(lr))
    assert all(np.asarray(v).dtype == np.float32 for v in out)
    return np.array(out, np.float64)


@pytest.mark.parametrize("staircase", [False, True])
def test_exponential_natural_exp_and_inverse_time_decay(staircase):
    def p(s):
        return math.floor(s / 10) if staircase else s / 10
    cases = [(tf.train.exponential_decay, lambda s: 0.1 * 0.5 ** p(s)),
             (tf.train.natural_exp_decay, lambda s: 0.1 * math.exp(-0.5 * p(s))),
             (tf.train.inverse_time_decay, lambda s: 0.1 / (1 + 0.5 * p(s)))]
    for schedule, want in cases:
        got = _values(lambda step, schedule=schedule: schedule(0.1, step, 10, 0.5, staircase=staircase))
        np.testing.assert_allclose(got, [want(s) for s in STEPS], rtol=1e-6, err_msg=schedule.__name__)


@pytest.mark.parametrize("cycle", [False, True])
def test_polynomial_decay(cycle):
    def want(s, lr=0.1, end=0.01, power=2.0, steps=10):
        if cycle:
            steps = steps * (1 if s == 0 else math.ceil(s / steps))
        else:
            s = min(s, steps)
        return (lr - end) * (1 - s / steps) ** power + end
    got = _values(lambda step: tf.train.polynomial_decay(0.1, step, 10, 0.01, power=2.0, cycle=cycle))
    np.testing.assert_allclose(got, [want(s) for s in STEPS], rtol=1e-6)
    # the default end rate and power: a straight line to 0.0001
    got = _values(lambda step: tf.train.polynomial_decay(0.1, step, 20))
    np.testing.assert_allclose(got, [(0.1 - 1e-4) * (1 - min(s, 20) / 20) + 1e-4 for s in STEPS], rtol=1e-6)


def test_cosine_decay():
    got = _values(lambda step: tf.train.cosine_decay(0.1, step, 20, alpha=0.1))
    want = [0.1 * (0.9 * 0.5 * (1 + math.cos(math.pi * min(s, 20) / 20)) + 0.1) for s in STEPS]
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_piecewise_constant_takes_each_value_up_to_and_at_its_boundary():
    got = _values(lambda step: tf.train.piecewise_constant(step, [10, 20], [1.0, 0.5, 0.1]))
    np.testing.assert_array_equal(got.astype(np.float32), np.float32([1.0, 1.0, 1.0, 1.0, 0.5, 0.5, 0.1]))
    tf.reset_default_graph()
    x = tf.placeholder(tf.int64, [])
    ints = tf.train.piecewise_constant(x, [3], [7, 9])
    with tf.Session() as sess:
        assert [int(sess.run(ints, {x: v})) for v in (2, 3, 4)] == [7, 7, 9]
        assert sess.run(ints, {x: 4}).dtype == np.int32


def test_a_learning_rate_schedule_drives_an_optimizer():
    tf.reset_default_graph()
    step = tf.train.get_or_create_global_step()
    w = tf.Variable(np.float32(0.0))
    lr = tf.train.piecewise_constant(step, [1], [1.0, 0.1])
    train = tf.train.GradientDescentOptimizer(lr).minimize(-w, global_step=step)   # dL/dw = -1
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        for _ in range(4):
            sess.run(train)
        assert np.isclose(sess.run(w), 1.0 + 1.0 + 0.1 + 0.1)   # the rate of the step before each update


def test_what_the_schedules_refuse():
    tf.reset_default_graph()
    step = tf.train.get_or_create_global_step()
    with pytest.raises(ValueError, match=r"exponential_decay needs global_step"):
        tf.train.exponential_decay(0.1, None, 10, 0.5)
    with pytest.raises(ValueError, match=r"polynomial_decay\(decay_steps=0\).*above 0"):
        tf.train.polynomial_decay(0.1, step, 0)
    with pytest.raises(ValueError, match=r"2 boundaries need 3 values, got 2"):
        tf.train.piecewise_constant(step, [1, 2], [0.1, 0.2])
    with pytest.raises(ValueError, match=r"boundaries must increase"):
        tf.train.piecewise_constant(step, [5, 2], [0.1, 0.2, 0.3])
    with pytest.raises(ValueError, match=r"of one type"):
        tf.train.piecewise_constant(step, [5], [1, 0.5])
