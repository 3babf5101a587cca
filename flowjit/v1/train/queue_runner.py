"""``tf.train.QueueRunner``: threads that keep a queue filled by running its enqueue ops.

``create_threads(sess, coord)`` starts (or returns) one thread per enqueue op, each running
its op in a loop until the coordinator asks to stop or the op fails with one of
``queue_closed_exception_types`` (by default ``OutOfRangeError``: an upstream queue or
``limit_epochs`` ran out). When the last of them ends that way, the runner closes the
queue, so its consumers drain it and then see ``OutOfRangeError``. With a coordinator, one
more thread waits for the stop request and cancels the queue's pending enqueues, so no
runner thread stays blocked on a full queue. Any other exception in a runner thread goes
to ``coord.request_stop(e)`` (and is re-raised by ``coord.join()``); without a coordinator
it is recorded in ``exceptions_raised`` and re-raised in the thread.

``add_queue_runner`` registers a runner in the graph's ``QUEUE_RUNNERS`` collection and
``start_queue_runners`` starts every registered runner for a session, as in TensorFlow 1.x.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Sequence
from typing import Any

from flowjit.v1 import errors
from flowjit.v1.default_session import get_default_session
from flowjit.v1.graph import GraphKeys, Operation, get_default_graph

__all__ = ["QueueRunner", "add_queue_runner", "start_queue_runners"]

_log = logging.getLogger("flowjit.v1.queue_runner")


class QueueRunner:
    """Holds a queue's enqueue ops and runs each in its own thread (``tf.train.QueueRunner``).

    ``close_op`` (default ``queue.close()``) runs when every enqueue thread has ended because
    the input ran out; ``cancel_op`` (default ``queue.close(cancel_pending_enqueues=True)``)
    runs when the coordinator asks to stop.
    """

    def __init__(self, queue: Any = None, enqueue_ops: Sequence[Operation] | None = None, close_op: Any = None,
                 cancel_op: Any = None, queue_closed_exception_types: Sequence[type[BaseException]] | None = None,
                 queue_runner_def: Any = None, import_scope: str | None = None):
        if queue_runner_def is not None:
            raise errors.UnimplementedError(None, None, "QueueRunner(queue_runner_def=...): flowjit graphs are not "
                                            "serialized as "
                                      "protocol buffers; build the QueueRunner from its queue and ops")
        if queue is None or not enqueue_ops:
            raise ValueError("QueueRunner needs a queue and a non-empty list of enqueue ops")
        self._queue = queue
        self._enqueue_ops = list(enqueue_ops)
        self._close_op = close_op if close_op is not None else queue.close()
        self._cancel_op = cancel_op if cancel_op is not None else queue.close(cancel_pending_enqueues=True)
        if queue_closed_exception_types is None:
            queue_closed_exception_types = (errors.OutOfRangeError,)
        self._queue_closed_exception_types = tuple(queue_closed_exception_types)
        if not self._queue_closed_exception_types or not all(
                isinstance(t, type) and issubclass(t, BaseException) for t in self._queue_closed_exception_types):
            raise TypeError("queue_closed_exception_types must be a non-empty sequence of exception classes, got "
                            f"{queue_closed_exception_types!r}")
        self._lock = threading.Lock()
        # How many enqueue threads still run, per session (a session may be dropped meanwhile).
        self._runs_per_session: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()
        self._exceptions_raised: list[BaseException] = []

    @property
    def queue(self) -> Any:
        return self._queue

    @property
    def enqueue_ops(self) -> list[Operation]:
        return list(self._enqueue_ops)

    @property
    def close_op(self) -> Any:
        return self._close_op

    @property
    def cancel_op(self) -> Any:
        return self._cancel_op

    @property
    def queue_closed_exception_types(self) -> tuple[type[BaseException], ...]:
        return self._queue_closed_exception_types

    @property
    def exceptions_raised(self) -> list[BaseException]:
        """Exceptions the runner threads raised when they ran without a coordinator."""
        return list(self._exceptions_raised)

    @property
    def name(self) -> str:
        """The name of the queue this runner fills."""
        return self._queue.name

    def _run(self, sess: Any, enqueue_op: Any, coord: Any) -> None:
        decremented = False
        try:
            while True:
                if coord is not None and coord.should_stop():
                    break
                try:
                    sess.run(enqueue_op)
                except self._queue_closed_exception_types:
                    # The input ran out: the last thread to see it closes the queue, so that
                    # its consumers drain what is left and then see OutOfRangeError.
                    with self._lock:
                        self._runs_per_session[sess] -= 1
                        decremented = True
                        last = self._runs_per_session[sess] == 0
                    if last:
                        try:
                            sess.run(self._close_op)
                        except Exception as e:  # the session closed meanwhile: nothing left to close
                            _log.debug("QueueRunner %s: ignored %r closing the queue", self.name, e)
                    return
        except Exception as e:
            if coord is not None:
                coord.request_stop(e)
            else:
                _log.error("Exception in QueueRunner %s: %s", self.name, e)
                with self._lock:
                    self._exceptions_raised.append(e)
                raise
        finally:
            if not decremented:
                with self._lock:
                    self._runs_per_session[sess] -= 1

    def _close_on_stop(self, sess: Any, coord: Any) -> None:
        coord.wait_for_stop()
        try:
            sess.run(self._cancel_op)
        except Exception as e:  # the session is closed already: its queues are cancelled with it
            _log.debug("QueueRunner %s: ignored %r cancelling the queue", self.name, e)

    def create_threads(self, sess: Any, coord: Any = None, daemon: bool = False,
                       start: bool = False) -> list[threading.Thread]:
        """The threads that run the enqueue ops in ``sess`` (plus, with ``coord``, the one
        that cancels the queue on a stop request), registered with ``coord``, started if
        ``start``. Returns [] if threads for ``sess`` already run."""
        with self._lock:
            if self._runs_per_session.get(sess, 0) > 0:
                return []
            self._runs_per_session[sess] = len(self._enqueue_ops)
            self._exceptions_raised = []
        threads = [threading.Thread(target=self._run, args=(sess, op, coord), name=f"QueueRunner-{self.name}-{i}")
                   for i, op in enumerate(self._enqueue_ops)]
        if coord is not None:
            threads.append(threading.Thread(target=self._close_on_stop, args=(sess, coord),
                                            name=f"QueueRunnerThread-{self.name}"))
        for t in threads:
            if coord is not None:
                coord.register_thread(t)
            t.daemon = daemon
            if start:
                t.start()
        return threads

    def __repr__(self) -> str:
        return f"<QueueRunner for '{self.name}' with {len(self._enqueue_ops)} enqueue op(s)>"


def add_queue_runner(qr: QueueRunner, collection: str = GraphKeys.QUEUE_RUNNERS) -> None:
    """Register ``qr`` in the default graph's ``collection``, for ``start_queue_runners``."""
    get_default_graph().add_to_collection(collection, qr)


def start_queue_runners(sess: Any = None, coord: Any = None, daemon: bool = True, start: bool = True,
                        collection: str = GraphKeys.QUEUE_RUNNERS) -> list[threading.Thread]:
    """Create (and by default start) the threads of every QueueRunner in the graph's
    ``collection`` for ``sess`` (default: the default session); returns them all, for
    ``coord.join(threads)``."""
    if sess is None:
        sess = get_default_session()
        if sess is None:
            raise ValueError("Cannot start queue runners: no default session is registered; call it inside "
                             "`with tf.Session() as sess:` or pass sess=...")
    threads: list[threading.Thread] = []
    for qr in sess.graph.get_collection(collection):
        threads.extend(qr.create_threads(sess, coord=coord, daemon=daemon, start=start))
    return threads
