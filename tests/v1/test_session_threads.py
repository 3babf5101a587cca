"""``Session.run`` from many threads at once, as TensorFlow allows: on a cold kernel cache
every fetch right and each segment traced once per fed shape; concurrent updates of a
variable none lost."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import flowjit.v1 as tf
from tests.concurrency import THREADS, fresh_constant, hammer


@pytest.fixture(autouse=True)
def fresh_graph_and_cold_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("FLOWJIT_CACHE_DIR", str(tmp_path / "cache"))
    tf.reset_default_graph()


def _traces(sess: tf.Session) -> list[int]:
    return [step.program.trace_count for plan in sess._plans.values() for step in plan.steps
            if getattr(step, "program", None) is not None]


def test_fetches_from_8_threads_on_a_cold_cache_trace_once_per_fed_shape():
    salt = fresh_constant()
    x = tf.placeholder(tf.float64, [None, 3])
    w = tf.constant(np.linspace(0.1, 1, 6).reshape(3, 2))
    y = tf.reduce_sum(tf.tanh(tf.matmul(x, w) * salt), axis=1)
    batches = [1, 2, 3, 5]
    with tf.Session() as sess:
        def call(t: int, i: int) -> None:
            xs = np.full((batches[(t + i) % 4], 3), t + 0.5)
            np.testing.assert_allclose(sess.run(y, {x: xs}),
                                       np.tanh(xs @ np.linspace(0.1, 1, 6).reshape(3, 2) * salt).sum(axis=1),
                                       rtol=1e-12)

        errors = hammer(call, 40)
        assert not errors, errors
        assert _traces(sess) == [len(batches)]


def test_different_fetches_from_threads_each_planned_and_traced_once():
    salt = fresh_constant()
    x = tf.placeholder(tf.float64, [4])
    a = tf.exp(x) * salt
    b = tf.reduce_max(a)
    c = a - b
    fetches = [a, b, c, [a, c]]
    xs = np.linspace(0, 1, 4)
    want = {0: np.exp(xs) * salt, 1: (np.exp(xs) * salt).max()}
    want[2] = want[0] - want[1]
    with tf.Session() as sess:
        def call(t: int, i: int) -> None:
            k = (t + i) % 4
            out = sess.run(fetches[k], {x: xs})
            if k == 3:
                np.testing.assert_allclose(out[0], want[0], rtol=1e-12)
                np.testing.assert_allclose(out[1], want[2], rtol=1e-12)
            else:
                np.testing.assert_allclose(out, want[k], rtol=1e-12)

        errors = hammer(call, 20)
        assert not errors, errors
        assert len(sess._plans) == 4 and _traces(sess) == [1, 1, 1, 1]


def test_updates_from_threads_are_none_lost():
    v = tf.Variable(np.zeros(3), name="v")
    x = tf.placeholder(tf.float64, [3])
    salt = fresh_constant()
    inc = tf.assign_add(v, x * salt)
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        errors = hammer(lambda t, i: sess.run(inc, {x: np.ones(3)}), 25)
        assert not errors, errors
        np.testing.assert_allclose(sess.run(v), np.full(3, THREADS * 25 * salt), rtol=1e-12)


def test_training_steps_from_threads(monkeypatch):
    # Variables on two devices: every thread's step crosses devices with send/recv.
    monkeypatch.setenv("FLOWJIT_CPU_DEVICES", "2")
    salt = fresh_constant()
    x = tf.placeholder(tf.float32, [None, 4])
    with tf.device("/cpu:1"):
        w = tf.Variable(tf.ones([4, 3]), name="w")
        h = tf.matmul(x, w) * salt
    y = tf.reduce_sum(h)
    train = tf.train.GradientDescentOptimizer(0.001).minimize(y)
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        errors = hammer(lambda t, i: sess.run(train, {x: np.ones((1 + (t + i) % 2, 4), np.float32)}), 10)
        assert not errors, errors
        # dy/dw = salt * the rows fed: each thread feeds 1 row 5 times and 2 rows 5 times.
        np.testing.assert_allclose(sess.run(w), np.full((4, 3), 1 - 0.001 * salt * THREADS * 15), rtol=1e-5)


def test_a_read_only_fetch_does_not_wait_for_a_running_update():
    # As in TensorFlow, runs that only read go on while another thread's step updates
    # variables (which runs one at a time per session): here a step holding the session's
    # update lock, for as long as the read takes.
    v = tf.Variable(np.arange(3.0), name="v")
    y = v * fresh_constant()
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        want = sess.run(y)  # traced and compiled
        got = []
        with sess._run_lock:
            reader = threading.Thread(target=lambda: got.append(sess.run(y)), daemon=True)
            reader.start()
            reader.join(timeout=60)
        assert got and np.array_equal(got[0], want)
