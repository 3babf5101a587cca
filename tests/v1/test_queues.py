"""Queues, Coordinator, QueueRunner and the TF1 input pipelines behave as in TensorFlow 1.x.

Blocking is checked without timing races: a test waits (with a deadline) until the
blocked op has lined up in the queue, then acts, and every thread is joined with a
timeout, so a bug fails a test instead of hanging the suite.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import flowjit.v1 as tf
from flowjit.v1 import errors
from flowjit.v1.queues import FIFOQueue, PaddingFIFOQueue, RandomShuffleQueue
from flowjit.v1.train.coordinator import Coordinator
from flowjit.v1.train.input import batch, limit_epochs, range_input_producer, shuffle_batch, slice_input_producer
from flowjit.v1.train.queue_runner import QueueRunner, add_queue_runner, start_queue_runners
from tests.v1 import load_example

JOIN_TIMEOUT = 10.0


@pytest.fixture(autouse=True)
def _graph(request):
    """Each test builds into a graph of its own (the example resets the global one itself)."""
    if request.node.name in _OWN_GRAPH:
        yield None
        return
    with tf.Graph().as_default() as g:
        yield g


_OWN_GRAPH = {"test_queue_input_example_converges"}


def _state(sess, q):
    """The session's contents of ``q`` (made by running ``size()`` first)."""
    sess.run(q.size())
    return sess.resource(q.queue_ref, lambda: None)


def _wait_until(predicate, what, timeout=JOIN_TIMEOUT):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting until {what}")
        time.sleep(0.001)


class _Runner(threading.Thread):
    """Runs ``sess.run(fetch)`` in a thread; ``result`` or ``error`` afterwards."""

    def __init__(self, sess, fetch, feed_dict=None):
        super().__init__(daemon=True)
        self.sess, self.fetch, self.feed_dict = sess, fetch, feed_dict
        self.result = self.error = None
        self.start()

    def run(self):
        try:
            self.result = self.sess.run(self.fetch, self.feed_dict)
        except BaseException as e:  # noqa: BLE001 - reported to the test
            self.error = e

    def finish(self):
        self.join(JOIN_TIMEOUT)
        assert not self.is_alive(), "the op is still blocked"
        return self


# ---- queues ----------------------------------------------------------------------------------------------------


def test_fifo_order_and_size():
    q = FIFOQueue(10, tf.float32, shapes=[[]])
    x = tf.placeholder(tf.float32, [None])
    enq_many = q.enqueue_many([x])
    enq_one = q.enqueue(42.0)
    deq = q.dequeue()
    size = q.size()
    assert size.dtype == tf.int32 and size.shape == []
    with tf.Session() as sess:
        assert sess.run(size) == 0
        sess.run(enq_many, {x: [1.0, 2.0, 3.0]})
        sess.run(enq_one)
        assert sess.run(size) == 4
        assert [float(sess.run(deq)) for _ in range(4)] == [1.0, 2.0, 3.0, 42.0]
        assert sess.run(size) == 0


def test_enqueue_blocks_while_full():
    q = FIFOQueue(2, tf.int32, shapes=[[]])
    v = tf.placeholder(tf.int32, [])
    enq = q.enqueue(v)
    deq = q.dequeue()
    with tf.Session() as sess:
        sess.run(enq, {v: 1})
        sess.run(enq, {v: 2})
        state = _state(sess, q)
        blocked = _Runner(sess, enq, {v: 3})
        _wait_until(lambda: len(state.enq_line) == 1, "the third enqueue waits")
        assert blocked.is_alive() and sess.run(q.size()) == 2
        assert sess.run(deq) == 1  # makes room: the waiting enqueue completes
        assert blocked.finish().error is None
        assert [int(sess.run(deq)) for _ in range(2)] == [2, 3]


def test_dequeue_blocks_until_an_element_arrives():
    q = FIFOQueue(4, tf.float32, shapes=[[2]])
    deq = q.dequeue()
    with tf.Session() as sess:
        state = _state(sess, q)
        waiting = _Runner(sess, deq)
        _wait_until(lambda: len(state.deq_line) == 1, "the dequeue waits")
        sess.run(q.enqueue([[5.0, 6.0]]))
        np.testing.assert_array_equal(waiting.finish().result, [5.0, 6.0])


def test_enqueue_many_dequeue_many_and_up_to_shapes():
    q = FIFOQueue(100, [tf.float32, tf.int32], shapes=[[3], []])
    xs = np.arange(30, dtype=np.float32).reshape(10, 3)
    enq = q.enqueue_many([xs, np.arange(10, dtype=np.int32)])
    a, b = q.dequeue_many(4)
    assert a.shape == [4, 3] and b.shape == [4] and a.dtype == tf.float32 and b.dtype == tf.int32
    c, d = q.dequeue_up_to(4)
    assert c.shape.as_list() == [None, 3] and d.shape.as_list() == [None]
    e, f = q.dequeue()
    assert e.shape == [3] and f.shape == []
    n = tf.placeholder(tf.int32, [])
    g, _ = q.dequeue_many(n)
    assert g.shape.as_list() == [None, 3]
    with tf.Session() as sess:
        sess.run(enq)
        va, vb = sess.run([a, b])
        np.testing.assert_array_equal(va, xs[:4])
        np.testing.assert_array_equal(vb, [0, 1, 2, 3])
        np.testing.assert_array_equal(sess.run(g, {n: 2}), xs[4:6])
        sess.run(q.close())
        vc, vd = sess.run([c, d])  # 4 remain: a full batch even when closed
        np.testing.assert_array_equal(vd, [6, 7, 8, 9])
        with pytest.raises(errors.OutOfRangeError):
            sess.run(c)


def test_dequeue_many_larger_than_capacity_is_filled_as_elements_arrive():
    q = FIFOQueue(2, tf.int32, shapes=[[]])
    x = tf.placeholder(tf.int32, [None])
    enq = q.enqueue_many(x)
    deq = q.dequeue_many(5)
    with tf.Session() as sess:
        producer = _Runner(sess, enq, {x: np.arange(5)})
        np.testing.assert_array_equal(sess.run(deq), np.arange(5))
        assert producer.finish().error is None


def test_close_drains_then_out_of_range():
    q = FIFOQueue(10, tf.int32, shapes=[[]])
    enq = q.enqueue_many([[1, 2, 3]])
    deq, deq2, upto = q.dequeue(), q.dequeue_many(2), q.dequeue_up_to(5)
    with tf.Session() as sess:
        sess.run(enq)
        assert not sess.run(q.is_closed())
        sess.run(q.close())
        assert sess.run(q.is_closed())
        with pytest.raises(errors.CancelledError, match="is closed"):
            sess.run(q.enqueue(4))
        np.testing.assert_array_equal(sess.run(deq2), [1, 2])
        with pytest.raises(errors.OutOfRangeError, match="requested 2, current size 1"):
            sess.run(deq2)  # leaves the last element in the queue
        np.testing.assert_array_equal(sess.run(upto), [3])
        with pytest.raises(errors.OutOfRangeError):
            sess.run(upto)
        with pytest.raises(errors.OutOfRangeError):
            sess.run(deq)


def test_close_wakes_blocked_dequeue_with_out_of_range():
    q = FIFOQueue(10, tf.int32, shapes=[[]])
    with tf.Session() as sess:
        state = _state(sess, q)
        waiting = _Runner(sess, q.dequeue_many(3))
        sess.run(q.enqueue(7))
        _wait_until(lambda: len(state.deq_line) == 1 and not state.items, "the dequeue holds the one element")
        sess.run(q.close())
        assert isinstance(waiting.finish().error, errors.OutOfRangeError)
        assert sess.run(q.dequeue()) == 7  # put back, not lost


def test_close_with_cancel_pending_enqueues():
    q = FIFOQueue(1, tf.int32, shapes=[[]])
    enq = q.enqueue(1)
    with tf.Session() as sess:
        sess.run(enq)
        state = _state(sess, q)
        pending = _Runner(sess, enq)
        _wait_until(lambda: len(state.enq_line) == 1, "the enqueue waits")
        sess.run(q.close())  # a plain close leaves it pending
        assert pending.is_alive()
        sess.run(q.close(cancel_pending_enqueues=True))
        assert isinstance(pending.finish().error, errors.CancelledError)
        assert sess.run(q.dequeue()) == 1


def test_session_close_cancels_blocked_dequeue():
    q = FIFOQueue(3, tf.float32, shapes=[[]])
    sess = tf.Session()
    state = _state(sess, q)
    waiting = _Runner(sess, q.dequeue())
    _wait_until(lambda: len(state.deq_line) == 1, "the dequeue waits")
    sess.close()
    assert isinstance(waiting.finish().error, errors.CancelledError)


def test_queues_are_per_session_and_shared_by_name():
    q = FIFOQueue(3, tf.int32, shapes=[[]])
    a = FIFOQueue(3, tf.int32, shapes=[[]], shared_name="shared")
    b = FIFOQueue(3, tf.int32, shapes=[[]], shared_name="shared")
    with tf.Session() as s1, tf.Session() as s2:
        s1.run(q.enqueue(1))
        assert s1.run(q.size()) == 1 and s2.run(q.size()) == 0
        s1.run(a.enqueue(5))
        assert s1.run(b.dequeue()) == 5


def test_random_shuffle_queue_gives_a_permutation():
    tf.set_random_seed(1)
    q = RandomShuffleQueue(50, 0, tf.int32, shapes=[[]], seed=7)
    enq = q.enqueue_many([np.arange(50, dtype=np.int32)])
    deq = q.dequeue_many(50)
    orders = []
    for _ in range(2):
        with tf.Session() as sess:
            sess.run(enq)
            orders.append(sess.run(deq))
    assert sorted(orders[0]) == list(range(50))
    assert list(orders[0]) != list(range(50))
    np.testing.assert_array_equal(orders[0], orders[1])  # seeded: every session alike


def test_random_shuffle_queue_respects_min_after_dequeue():
    q = RandomShuffleQueue(10, 3, tf.int32, shapes=[[]], seed=3)
    deq = q.dequeue()
    with tf.Session() as sess:
        sess.run(q.enqueue_many([[0, 1, 2, 3, 4]]))
        got = [int(sess.run(deq)) for _ in range(2)]  # 5 -> 3 left
        state = _state(sess, q)
        waiting = _Runner(sess, deq)
        _wait_until(lambda: len(state.deq_line) == 1, "a dequeue that would leave 2 < 3 waits")
        assert sess.run(q.size()) == 3
        sess.run(q.close())  # once closed, min_after_dequeue no longer holds
        got.append(int(waiting.finish().result))
        got += [int(v) for v in sess.run(q.dequeue_up_to(10))]
    assert sorted(got) == [0, 1, 2, 3, 4]


def test_padding_fifo_queue_pads_each_batch():
    q = PaddingFIFOQueue(10, [tf.int32, tf.float32], shapes=[[None], []])
    v = tf.placeholder(tf.int32, [None])
    enq = q.enqueue([v, 1.5])
    a, b = q.dequeue_many(3)
    assert a.shape.as_list() == [3, None] and b.shape == [3]
    with tf.Session() as sess:
        for row in ([1, 2], [3], [4, 5, 6]):
            sess.run(enq, {v: row})
        va, vb = sess.run([a, b])
    np.testing.assert_array_equal(va, [[1, 2, 0], [3, 0, 0], [4, 5, 6]])
    np.testing.assert_array_equal(vb, [1.5, 1.5, 1.5])


def test_named_components():
    q = FIFOQueue(4, [tf.float32, tf.int32], shapes=[[2], []], names=["x", "label"])
    enq = q.enqueue({"x": [1.0, 2.0], "label": 3})
    out = q.dequeue()
    assert set(out) == {"x", "label"}
    with tf.Session() as sess:
        sess.run(enq)
        got = sess.run(out)
    np.testing.assert_array_equal(got["x"], [1.0, 2.0])
    assert got["label"] == 3
    with pytest.raises(ValueError, match="enqueue a dict"):
        q.enqueue([[1.0, 2.0], 3])


def test_shapes_are_checked_at_build_and_run_time():
    q = FIFOQueue(4, tf.float32, shapes=[[3]], name="inputs")
    with pytest.raises(ValueError, match=r"inputs.*component 0.*\(2,\).*\(3,\)"):
        q.enqueue(tf.zeros([2]))
    with pytest.raises(TypeError, match="dtype"):
        q.enqueue(tf.zeros([3], dtype=tf.int32))
    p = tf.placeholder(tf.float32, None)
    enq = q.enqueue(p)
    with tf.Session() as sess:
        with pytest.raises(errors.InvalidArgumentError, match=r"'inputs' has shape \(4,\).*expects \(3,\)"):
            sess.run(enq, {p: np.zeros(4)})
        assert sess.run(q.size()) == 0
    with pytest.raises(ValueError, match="not fully defined"):
        FIFOQueue(4, tf.float32, shapes=[[None]])
    with pytest.raises(ValueError, match="min_after_dequeue"):
        RandomShuffleQueue(4, 4, tf.float32)


# ---- Coordinator --------------------------------------------------------------------------------------------


def test_coordinator_join_reraises_the_first_exception():
    coord = Coordinator()

    def worker(i):
        with coord.stop_on_exception():
            if i == 1:
                raise ValueError("worker 1 failed")
            coord.wait_for_stop(JOIN_TIMEOUT)

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(3)]
    for t in threads:
        t.start()
    with pytest.raises(ValueError, match="worker 1 failed"):
        coord.join(threads, stop_grace_period_secs=JOIN_TIMEOUT)
    assert coord.joined and coord.should_stop()
    coord.clear_stop()
    assert not coord.should_stop() and not coord.joined


def test_coordinator_out_of_range_is_a_clean_stop():
    coord = Coordinator()
    coord.request_stop(errors.OutOfRangeError(None, None, "done"))
    assert coord.should_stop() and coord.wait_for_stop(0)
    coord.join([], stop_grace_period_secs=0)
    coord.raise_requested_exception()  # nothing to raise


def test_coordinator_reports_stragglers():
    coord = Coordinator()
    release = threading.Event()
    t = threading.Thread(target=release.wait, args=(JOIN_TIMEOUT,), daemon=True)
    t.start()
    coord.register_thread(t)
    coord.request_stop()
    with pytest.raises(RuntimeError, match="threads still running"):
        coord.join(stop_grace_period_secs=0.01)
    release.set()
    t.join(JOIN_TIMEOUT)


# ---- QueueRunner and the input pipelines ------------------------------------------------------------------------


def test_queue_runner_fills_a_queue_for_a_compiled_step():
    q = FIFOQueue(8, tf.float32, shapes=[[3]])
    counter = tf.placeholder_with_default(np.ones(3, np.float32), [3])
    qr = QueueRunner(q, [q.enqueue(counter * 2.0)])
    total = tf.reduce_sum(q.dequeue_many(4) * 2)
    with tf.Session() as sess:
        coord = Coordinator()
        threads = qr.create_threads(sess, coord=coord, daemon=True, start=True)
        assert len(threads) == 2  # the enqueue thread and the one cancelling on stop
        assert qr.create_threads(sess, coord=coord) == []  # already running for this session
        for _ in range(5):
            assert sess.run(total) == pytest.approx(4 * 3 * 2.0 * 2)
        coord.request_stop()
        coord.join(threads, stop_grace_period_secs=JOIN_TIMEOUT)
        assert not any(t.is_alive() for t in threads)


def test_queue_runner_error_goes_to_the_coordinator():
    q = FIFOQueue(4, tf.float32, shapes=[[2]])
    bad = tf.placeholder(tf.float32, [2])  # never fed: every run fails
    add_queue_runner(QueueRunner(q, [q.enqueue(bad)]))
    with tf.Session() as sess:
        coord = Coordinator()
        threads = start_queue_runners(sess, coord)
        with pytest.raises(errors.InvalidArgumentError, match="must feed"):
            coord.join(threads, stop_grace_period_secs=JOIN_TIMEOUT)


def test_limit_epochs():
    t = limit_epochs(tf.constant([1, 2]), num_epochs=2)
    with tf.Session() as sess:
        for _ in range(2):
            np.testing.assert_array_equal(sess.run(t), [1, 2])
        with pytest.raises(errors.OutOfRangeError):
            sess.run(t)
    with tf.Session() as sess:  # per session
        sess.run(t)


def test_slice_input_producer_and_batch_run_exactly_num_epochs():
    xs = np.arange(20, dtype=np.float32).reshape(10, 2)
    ys = np.arange(10, dtype=np.int32)
    x, y = slice_input_producer([xs, ys], num_epochs=3, shuffle=True, seed=5)
    assert x.shape == [2] and y.shape == []
    xb, yb = batch([x, y], batch_size=4)
    assert xb.shape == [4, 2] and yb.shape == [4]
    doubled = tf.reduce_sum(xb * 2, axis=1)
    seen = []
    with tf.Session() as sess:
        coord = Coordinator()
        threads = start_queue_runners(sess, coord)
        assert len(threads) == 4  # two runners, each an enqueue thread and a cancel thread
        with pytest.raises(errors.OutOfRangeError):
            while True:
                vx, vy, vd = sess.run([xb, yb, doubled])
                np.testing.assert_array_equal(vx, xs[vy])  # rows stay together
                np.testing.assert_allclose(vd, 2 * xs[vy].sum(axis=1))
                seen.extend(vy.tolist())
        coord.request_stop()
        coord.join(threads, stop_grace_period_secs=JOIN_TIMEOUT)
    assert len(seen) == 28  # 30 examples, 7 full batches; the 2 left are dropped
    assert all(seen.count(i) <= 3 for i in range(10))
    assert seen[:10] != list(range(10))  # shuffled


def test_batch_allow_smaller_final_batch_and_range_producer_without_shuffle():
    q = range_input_producer(5, num_epochs=1, shuffle=False)
    got = batch([q.dequeue()], batch_size=2, allow_smaller_final_batch=True)
    assert isinstance(got, tf.Tensor) and got.shape.as_list() == [None]
    with tf.Session() as sess:
        coord = Coordinator()
        threads = start_queue_runners(sess, coord)
        batches = []
        with pytest.raises(errors.OutOfRangeError):
            while True:
                batches.append(sess.run(got).tolist())
        coord.request_stop()
        coord.join(threads, stop_grace_period_secs=JOIN_TIMEOUT)
    assert batches == [[0, 1], [2, 3], [4]]


def test_shuffle_batch_dict_and_enqueue_many():
    data = {"x": np.arange(12, dtype=np.float32).reshape(6, 2), "y": np.arange(6, dtype=np.int32)}
    x, y = slice_input_producer([data["x"], data["y"]], num_epochs=2, shuffle=False)
    out = shuffle_batch({"x": x, "y": y}, batch_size=3, capacity=6, min_after_dequeue=2, seed=1, num_threads=2)
    assert set(out) == {"x", "y"} and out["x"].shape == [3, 2]
    many = batch([tf.constant(np.arange(6, dtype=np.int32).reshape(3, 2))], batch_size=5, enqueue_many=True)
    assert many.shape == [5, 2]
    ys = []
    with tf.Session() as sess:
        coord = Coordinator()
        threads = start_queue_runners(sess, coord)
        for _ in range(4):
            got = sess.run(out)
            np.testing.assert_array_equal(got["x"], data["x"][got["y"]])
            ys.extend(got["y"].tolist())
        assert sess.run(many).tolist() == [[0, 1], [2, 3], [4, 5], [0, 1], [2, 3]]
        coord.request_stop()
        coord.join(threads, stop_grace_period_secs=JOIN_TIMEOUT)
    assert sorted(ys) == sorted(list(range(6)) * 2)


# ---- the example ----------------------------------------------------------------------------------------------------

def test_queue_input_example_converges(capsys):
    result = load_example("queue_input").main(["--steps", "150"])
    assert result["final_loss"] < 0.5 * result["first_loss"]
    assert result["accuracy"] > 0.9
    assert "accuracy" in capsys.readouterr().out
