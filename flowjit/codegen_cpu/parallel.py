"""Chunked parallel loops: a native ``f(start, stop, args...)`` run over pieces of [0, n)
on a small persistent pool of threads.

The workers are Python threads that call the native function through ctypes, which
releases the GIL for the length of the foreign call, so the chunks run at once; only the
hand-off (a SimpleQueue put and get per worker) holds the GIL. That hand-off costs tens
of microseconds, so a call over fewer than ``PARALLEL_MIN_ELEMENTS`` elements runs on the
caller's thread alone and pays nothing for the pool.

As in the native pool (``pthread_pool``), the range is cut into ``OVERSPLIT`` chunks a
thread and each thread, the caller first, takes the next chunk until none is left: on a
machine whose cores other processes share, a worker that is not scheduled takes nothing,
and the caller waits only for chunks a running worker holds.
"""

from __future__ import annotations

import itertools
import os
import queue
import threading
from collections.abc import Callable
from typing import Any

# Measured on the 2-core project machine (python -m tests.codegen_cpu.bench_parallel: float32
# y += x + 1, 2 threads, every call split): the hand-off costs 28-46 us a call; one thread
# takes 10 us for 1e5 elements, 47 us for 3e5 (pool 63-73 us), 128 us for 5e5 (pool 95-118),
# 265 us for 1e6 (pool 165), 2.84 ms for 1e7 (pool 1.43). Two threads first win between 3e5
# and 5e5 elements of the cheapest loop; a loop doing more work per element (exp, tanh) wins
# sooner, so a caller that knows its cost per element passes its own ``min_elements``.
# (Generated code uses pthread_pool instead: its hand-off is 0.5 us while workers poll.)
PARALLEL_MIN_ELEMENTS = 1 << 19

# Pieces smaller than this are not worth a thread's wake-up.
_MIN_CHUNK = 1 << 14

# Chunks a loop is cut into per thread taking part (here and in the native pool): a worker
# that starts late, or loses its core in the middle, holds up the caller by at most one chunk
# (1/8 of the loop on 2 cores).
OVERSPLIT = 4


def default_threads() -> int:
    """``FLOWJIT_NUM_THREADS`` if set, else the CPUs this process may run on."""
    env = os.environ.get("FLOWJIT_NUM_THREADS")
    if env:
        return max(1, int(env))
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


class _Loop:
    """One ``ChunkPool.run``: its chunks, handed out in order to whichever thread asks."""

    def __init__(self, fn: Callable[..., Any], n: int, args: tuple, chunks: int) -> None:
        self.fn, self.n, self.args, self.chunks = fn, n, args, chunks
        self._next = itertools.count()   # next() is atomic under the GIL
        self._done = 0
        self._finished = threading.Condition(threading.Lock())
        self.error: BaseException | None = None

    def work(self) -> None:
        """Take chunks and run them until none is left."""
        for i in self._next:
            if i >= self.chunks:
                return
            try:
                self.fn(self.n * i // self.chunks, self.n * (i + 1) // self.chunks, *self.args)
            except BaseException as e:  # the caller raises it, once every chunk is done
                if self.error is None:
                    self.error = e
            with self._finished:
                self._done += 1
                if self._done == self.chunks:
                    self._finished.notify()

    def wait(self) -> None:
        """Until every chunk is done (all are taken once the caller's ``work`` returns)."""
        with self._finished:
            self._finished.wait_for(lambda: self._done == self.chunks)


class ChunkPool:
    """``nthreads - 1`` daemon workers plus the calling thread; ``run`` cuts [0, n) into
    contiguous chunks of at least ``min_chunk`` elements, up to ``OVERSPLIT`` a thread, which
    the threads take in turn, and returns when all are done."""

    def __init__(self, nthreads: int, min_chunk: int = _MIN_CHUNK) -> None:
        self.nthreads = max(1, nthreads)
        self.min_chunk = max(1, min_chunk)
        # A forked child has none of the workers: its calls run on its own thread.
        self._pid = os.getpid()
        self._inboxes: list[queue.SimpleQueue] = []
        # One parallel call at a time; a second caller (another thread, or a nested call)
        # runs its range on its own thread instead of waiting.
        self._busy = threading.Lock()
        for i in range(self.nthreads - 1):
            inbox: queue.SimpleQueue = queue.SimpleQueue()
            threading.Thread(target=self._work, args=(inbox,), daemon=True,
                             name=f"flowjit-chunk-{i}").start()
            self._inboxes.append(inbox)

    @staticmethod
    def _work(inbox: queue.SimpleQueue) -> None:
        while True:
            inbox.get().work()

    def run(self, fn: Callable[..., Any], n: int, *args: Any) -> None:
        """Call ``fn(start, stop, *args)`` over chunks covering [0, n) exactly once."""
        most = max(1, n // self.min_chunk)
        parts = min(self.nthreads, most)
        if parts == 1 or self._pid != os.getpid() or not self._busy.acquire(blocking=False):
            fn(0, n, *args)
            return
        try:
            loop = _Loop(fn, n, args, min(most, parts * OVERSPLIT))
            for inbox in self._inboxes[:parts - 1]:
                inbox.put(loop)
            loop.work()
            loop.wait()
            if loop.error is not None:
                raise loop.error
        finally:
            self._busy.release()


_pool: ChunkPool | None = None
_pool_lock = threading.Lock()


def pool() -> ChunkPool:
    """The process's chunk pool, started on first use (and again in a forked child) with
    ``default_threads()`` threads."""
    global _pool
    if _pool is None or _pool._pid != os.getpid():
        with _pool_lock:
            if _pool is None or _pool._pid != os.getpid():
                _pool = ChunkPool(default_threads())
    return _pool


def run_chunked(fn: Callable[..., Any], n: int, *args: Any,
                min_elements: int = PARALLEL_MIN_ELEMENTS) -> None:
    """Run native ``fn(start, stop, *args)`` over [0, n): on the pool when n is at least
    ``min_elements``, else as one call on this thread (no hand-off cost)."""
    if n < min_elements:
        fn(0, n, *args)
    else:
        pool().run(fn, n, *args)
