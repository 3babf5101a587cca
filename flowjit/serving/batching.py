"""Adaptive batching of one served version's requests along its batch dimension.

Requests queue on the server's event loop; a batch takes as many as fit the current batch
size cap, waits for more at most the batch timeout, concatenates them along the batch
dimension, runs the library once (a symbolic batch dimension runs any size with no
padding), and splits the outputs back. A cheap batch runs on the loop itself, a costly one
on the version's own thread; requests parsed meanwhile form the next batch.

With a latency objective (``slo_s``) the rule is a fitted cost model (as BentoML's) with
Clipper's multiplicative decrease on a miss: the batch time is modelled as ``a * rows + b``,
fitted by least squares on the warm-up runs at several batch sizes (calibrated at load on
this machine, so it starts right) and refitted on the batches served. The cap is the
largest batch whose predicted time is at most half the objective (a request may wait for
one batch and run in the next), lowered by 10% when a batch's oldest request missed the
objective and raised by one after each full batch that met it. The wait for more requests
ends when the oldest request's deadline less the predicted batch time comes. A request
whose predicted completion (the queue ahead of it in batches of the cap) is past its
deadline is refused at once with 503 and a Retry-After; a request that is already late when
its batch forms is answered 503 rather than late (Clipper: a late answer is worse than
none). A full queue answers 429 with a Retry-After.

Why the cost model rather than AIMD alone: flowjit runs every batch size with the same
compiled library, so the time of a batch size is measured at load before any request; AIMD
would have to discover it by missing the objective under live traffic.
"""

from __future__ import annotations

import asyncio
import collections
import math
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .model import LoadedVersion, fit_cost


class Overloaded(Exception):
    """The server refuses a request now: ``status`` 503 (it would miss its deadline) or 429
    (the queue is full), with ``retry_after`` seconds."""

    def __init__(self, status: int, message: str, retry_after: float):
        super().__init__(message)
        self.status = status
        self.retry_after = max(1, math.ceil(retry_after))


class _Item:
    """A queued request: its arrays and rows, what it waits on (an asyncio future, or any
    object with a future's ``done``, ``set_result`` and ``set_exception``), when it came,
    its deadline and (once its batch forms) its time in the queue."""

    __slots__ = ("arrays", "rows", "future", "arrival", "deadline", "queued_s")

    def __init__(self, arrays: list[np.ndarray], rows: int, future: Any, arrival: float, deadline: float | None):
        self.arrays, self.rows, self.future, self.arrival, self.deadline = arrays, rows, future, arrival, deadline
        self.queued_s = 0.0


@dataclass
class BatchStats:
    """What one batch did, for metrics: rows, seconds of compute, and each request's seconds
    in the queue."""

    rows: int
    compute_s: float
    queue_s: list[float] = field(default_factory=list)


class Batcher:
    """The queue of one served version, run on the server's event loop. ``await
    submit(arrays, rows)`` returns the request's outputs (a list of arrays, one per output)
    or raises Overloaded.

    A batch predicted to take less than ``inline_s`` (the GIL's switch interval, 5 ms, by
    default) runs on the event loop itself (a thread hand-off would cost more than the
    batch: the digits MLP runs 64 rows in about 50 µs); a longer one runs on the version's
    own thread (ctypes releases the GIL) while
    the loop parses the next requests. Requests parsed while a batch runs form the next one,
    so under load batches form with no wait at all."""

    def __init__(self, version: LoadedVersion, *, max_batch_size: int = 64, batch_timeout_s: float = 0.002,
                 slo_s: float | None = None, max_queue_rows: int | None = None, batching: bool = True,
                 adaptive_wait: bool = True, inline_s: float | None = None,
                 on_batch: Callable[[BatchStats], None] | None = None,
                 on_depth: Callable[[int], None] | None = None):
        self.version = version
        self.batching = batching and version.signature.batchable
        self.limit = max(1, max_batch_size if self.batching else 1)
        if version.signature.fixed is not None:
            self.limit = min(self.limit, version.signature.fixed)
        self.timeout_s = batch_timeout_s if self.batching else 0.0
        self.slo_s = slo_s
        self.adaptive_wait = adaptive_wait
        # Handing a batch to a thread costs up to one GIL switch interval (5 ms) while the loop
        # is busy parsing requests: a batch predicted to take less runs on the loop itself.
        self.inline_s = sys.getswitchinterval() if inline_s is None else inline_s
        self.max_queue_rows = max_queue_rows or max(8 * self.limit, 256)
        self.cost = version.cost
        self.cap = self._model_cap()
        self._on_batch = on_batch or (lambda s: None)
        self._on_depth = on_depth
        self._queue: collections.deque[_Item] = collections.deque()
        self._rows = 0
        self._closing = False
        self._running = False          # a batch is on the version's thread
        self._timer: asyncio.TimerHandle | asyncio.Handle | None = None
        self._busy_until = 0.0
        self._seen: collections.deque[tuple[int, float]] = collections.deque(maxlen=64)
        self._batches = 0
        self._pool: ThreadPoolExecutor | None = None

    # ---- the model of batch time --------------------------------------------------------

    def predict(self, rows: int) -> float:
        """Predicted seconds of one batch of ``rows``."""
        a, b = self.cost
        return a * rows + b

    def _model_cap(self) -> int:
        if not self.batching:
            return 1
        if self.slo_s is None:
            return self.limit
        a, b = self.cost
        budget = self.slo_s / 2 - b
        if budget <= 0:
            return 1
        return int(max(1, min(self.limit, budget / a if a > 0 else self.limit)))

    def _learn(self, rows: int, seconds: float, oldest_latency: float) -> None:
        self._seen.append((rows, seconds))
        self._batches += 1
        if self._batches % 32 == 0:
            distinct = {r for r, _ in self._seen}
            if len(distinct) >= 2:
                self.cost = fit_cost(list(self._seen))
            else:
                a, _ = self.cost
                self.cost = (a, max(0.0, float(np.mean([s - a * r for r, s in self._seen]))))
        if self.slo_s is None or not self.batching:
            return
        if oldest_latency > self.slo_s:
            self.cap = max(1, int(self.cap * 0.9))   # Clipper's multiplicative decrease on a miss
        elif rows >= self.cap:
            self.cap = min(self._model_cap(), self.cap + 1)

    # ---- requests -----------------------------------------------------------------------

    @property
    def depth(self) -> int:
        """Rows waiting in the queue."""
        return self._rows

    async def submit(self, arrays: list[np.ndarray], rows: int) -> list[np.ndarray]:
        """Queue a request of ``rows`` rows and wait for its outputs. Raises Overloaded
        (429) when the queue is full, or (503) when it is predicted to miss the objective."""
        now = time.perf_counter()
        deadline = self._admit(rows, now)
        if self._alone(rows):
            return self._run_alone(arrays, rows, now)
        loop = asyncio.get_running_loop()
        fut: asyncio.Future = loop.create_future()
        self._enqueue(loop, _Item(arrays, rows, fut, now, deadline))
        return await fut

    def offer(self, arrays: list[np.ndarray], rows: int, waiter: Any) -> list[np.ndarray] | None:
        """``submit`` for a caller on the loop without a coroutine (the server's predict fast
        path): the request's outputs when it ran at once (no batching, nothing queued), else
        None, and ``waiter`` (an object with an asyncio future's ``done``, ``set_result`` and
        ``set_exception``) gets them, or the error, when its batch has run. Raises Overloaded."""
        now = time.perf_counter()
        deadline = self._admit(rows, now)
        if not self.batching and self._alone(rows):
            return self._run_alone(arrays, rows, now)
        self._enqueue(asyncio.get_running_loop(), _Item(arrays, rows, waiter, now, deadline))
        return None

    def _admit(self, rows: int, now: float) -> float | None:
        """The deadline of a request of ``rows`` arriving ``now`` (None without an
        objective); raises Overloaded when it is refused."""
        if self._closing:
            raise Overloaded(503, f"version {self.version.version} of {self.version.model} is unloading", 1)
        if self._rows + rows > self.max_queue_rows and self._queue:
            wait = math.ceil(self._rows / max(self.cap, 1)) * self.predict(self.cap)
            raise Overloaded(429, f"the queue of {self.version.model} is full ({self._rows} rows waiting, at "
                                  f"most {self.max_queue_rows}): retry later", wait)
        if self.slo_s is None:
            return None
        deadline = now + self.slo_s
        ahead = math.ceil((self._rows + rows) / max(self.cap, 1))
        finish = max(now, self._busy_until) + ahead * self.predict(self.cap)
        if finish > deadline:
            raise Overloaded(503, f"{self.version.model} cannot answer within its latency objective of "
                                  f"{self.slo_s * 1e3:g} ms now ({self._rows} rows waiting): retry later",
                             finish - deadline)
        return deadline

    def _alone(self, rows: int) -> bool:
        # Without batching, a request finding nothing queued runs now, on the loop: a future
        # and a turn of the loop would cost more than the digits MLP's run.
        return not self.batching and not self._queue and not self._running and self.predict(rows) < self.inline_s

    def _run_alone(self, arrays: list[np.ndarray], rows: int, now: float) -> list[np.ndarray]:
        self._busy_until = now + self.predict(rows)
        t0 = time.perf_counter()
        outputs = self.version.run(arrays)
        t1 = time.perf_counter()
        self._learn(rows, t1 - t0, t1 - now)
        self._on_batch(BatchStats(rows, t1 - t0, [t0 - now]))
        return outputs

    def _enqueue(self, loop: asyncio.AbstractEventLoop, item: _Item) -> None:
        self._queue.append(item)
        self._rows += item.rows
        if self._on_depth is not None:
            self._on_depth(self._rows)
        self._schedule(loop)

    def _schedule(self, loop: asyncio.AbstractEventLoop) -> None:
        """Arrange the next batch: at once when the cap is reached, else after the wait."""
        if self._running or not self._queue:
            return
        if self._rows >= self.cap or self._closing:
            if self._timer is not None:
                self._timer.cancel()
            self._timer = loop.call_soon(self._flush, loop)
            return
        if self._timer is not None:
            return
        first = self._queue[0]
        wait = min(self.timeout_s, 2 * self.cost[1]) if self.adaptive_wait else self.timeout_s
        if first.deadline is not None:
            wait = min(wait, first.deadline - self.predict(self.cap) - first.arrival)
        left = first.arrival + wait - time.perf_counter()
        # The loop's timers wake no sooner than its poll's 1 ms resolution: a shorter wait is none.
        self._timer = loop.call_soon(self._flush, loop) if left < 1e-3 else loop.call_later(left, self._flush, loop)

    def _flush(self, loop: asyncio.AbstractEventLoop) -> None:
        self._timer = None
        if self._running or not self._queue:
            return
        batch, rows = [], 0
        while self._queue and (not batch or rows + self._queue[0].rows <= self.cap):
            item = self._queue.popleft()
            batch.append(item)
            rows += item.rows
        self._rows -= rows
        if self._on_depth is not None:
            self._on_depth(self._rows)
        now = time.perf_counter()
        live = []
        for item in batch:
            if item.future.done():        # the client went away
                continue
            if item.deadline is not None and now + self.predict(item.rows) > item.deadline:
                item.future.set_exception(Overloaded(
                    503, f"the request waited {(now - item.arrival) * 1e3:.1f} ms and would answer after its "
                         f"latency objective of {self.slo_s * 1e3:g} ms: retry later", 1))
            else:
                item.queued_s = now - item.arrival
                live.append(item)
        if not live:
            self._schedule(loop)
            return
        rows = sum(item.rows for item in live)
        arrays = live[0].arrays if len(live) == 1 else [
            np.concatenate([item.arrays[i] for item in live]) for i in range(len(live[0].arrays))]
        self._busy_until = now + self.predict(rows)
        if self.predict(rows) < self.inline_s:
            t0 = time.perf_counter()
            try:
                outputs = self.version.run(arrays)
            except Exception as e:  # the library failed: every request of the batch gets the error
                self._answer(live, None, e, rows, t0)
            else:
                self._answer(live, outputs, None, rows, t0)
            self._schedule(loop)
            return
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix=f"flowjit-{self.version.model}")
        self._running = True
        t0 = time.perf_counter()
        job = loop.run_in_executor(self._pool, self.version.run, arrays)

        def done(job: asyncio.Future) -> None:
            self._running = False
            error = job.exception()
            self._answer(live, None if error else job.result(), error, rows, t0)
            self._schedule(loop)
        job.add_done_callback(done)

    def _answer(self, batch: list[_Item], outputs: list[np.ndarray] | None, error: BaseException | None,
                rows: int, t0: float) -> None:
        t1 = time.perf_counter()
        start = 0
        for item in batch:
            if not item.future.done():    # done: its request was cancelled (the client went away)
                if error is not None:
                    item.future.set_exception(error)
                elif len(batch) == 1:
                    item.future.set_result(outputs)
                elif len(outputs) == 1:
                    item.future.set_result([outputs[0][start:start + item.rows]])
                else:
                    item.future.set_result([o[start:start + item.rows] for o in outputs])
            start += item.rows
        if error is None:
            self._learn(rows, t1 - t0, t1 - batch[0].arrival)
            self._on_batch(BatchStats(rows, t1 - t0, [item.queued_s for item in batch]))

    def close(self) -> None:
        """Stop taking requests (the server calls it once no request holds the version, so
        nothing is queued) and end the version's thread."""
        self._closing = True
        if self._pool is not None:
            self._pool.shutdown(wait=True)

    def describe(self) -> dict[str, Any]:
        """The batcher's state: cap, limit, wait, objective and cost model."""
        return {"batching": self.batching, "cap": self.cap, "max_batch_size": self.limit,
                "batch_timeout_ms": self.timeout_s * 1e3,
                "latency_slo_ms": None if self.slo_s is None else self.slo_s * 1e3,
                "cost_us": {"per_row": self.cost[0] * 1e6, "per_batch": self.cost[1] * 1e6}}
