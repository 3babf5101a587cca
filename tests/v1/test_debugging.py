"""tf.assert_* and tf.Print: host ops that check and print values when they run."""

from __future__ import annotations

import numpy as np
import pytest

import flowjit.v1 as tf


def test_assertions_pass_silently_and_fail_naming_the_condition_values_and_line():
    tf.reset_default_graph()
    x = tf.placeholder(tf.float32, [None])
    checks = [tf.assert_positive(x, message="x must be positive"), tf.assert_less(x, 10.0),
              tf.assert_equal(tf.shape(x)[0], 3)]
    with tf.control_dependencies(checks):
        y = tf.identity(x * 2)
    with tf.Session() as sess:
        np.testing.assert_array_equal(sess.run(y, {x: [1.0, 2.0, 3.0]}), [2.0, 4.0, 6.0])
        with pytest.raises(tf.errors.InvalidArgumentError,
                           match=r"x must be positive Condition x > 0 did not hold element-wise: "
                                 r"x \(Placeholder:0\) = \[1.0 -2.0 3.0\] \(tf.assert_positive 'assert_positive' "
                                 r"created at test_debugging.py:\d+\)"):
            sess.run(y, {x: [1.0, -2.0, 3.0]})
        with pytest.raises(tf.errors.InvalidArgumentError, match=r"Condition x < y did not hold.*y \(.*\) = \[10.0\]"):
            sess.run(y, {x: [1.0, 20.0, 3.0]})
        with pytest.raises(tf.errors.InvalidArgumentError, match=r"Condition x == y .* = \[2\]"):
            sess.run(y, {x: [1.0, 2.0]})


@pytest.mark.parametrize("assertion, good, bad", [
    (tf.assert_non_negative, [0.0, 1.0], [0.0, -1.0]),
    (tf.assert_negative, [-1.0], [0.0]),
    (tf.assert_non_positive, [0.0, -3.0], [0.5]),
])
def test_each_sign_assertion(assertion, good, bad):
    tf.reset_default_graph()
    x = tf.placeholder(tf.float32, [None])
    check = assertion(x)
    with tf.Session() as sess:
        sess.run(check, {x: good})
        with pytest.raises(tf.errors.InvalidArgumentError, match="did not hold"):
            sess.run(check, {x: bad})


def test_assert_rank_checks_a_known_rank_when_built_and_an_unknown_one_when_run():
    tf.reset_default_graph()
    with pytest.raises(ValueError, match=r"Tensor Const:0 must have rank 2; its shape is \(3,\)"):
        tf.assert_rank(tf.constant([1, 2, 3]), 2)
    x = tf.placeholder(tf.float32)
    check = tf.assert_rank(x, 2)
    with tf.Session() as sess:
        sess.run(check, {x: np.ones((2, 2))})
        with pytest.raises(tf.errors.InvalidArgumentError, match=r"rank\(x\) == 2"):
            sess.run(check, {x: np.ones(3)})


def test_print_passes_its_input_through_and_writes_its_first_n_runs(capfd):
    tf.reset_default_graph()
    x = tf.placeholder(tf.float32, [None])
    y = tf.Print(x, [x, tf.reduce_sum(x)], message="x, sum: ", first_n=2, summarize=2) * 10
    with tf.Session() as sess:
        for k in range(3):
            np.testing.assert_array_equal(sess.run(y, {x: [1.0, 2.0, 3.0 + k]}), [10.0, 20.0, 30.0 + 10 * k])
    err = capfd.readouterr().err.splitlines()
    assert err == ["x, sum: [1.0 2.0...][6.0]", "x, sum: [1.0 2.0...][7.0]"]
