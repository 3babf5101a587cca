"""Chunked parallel loops: a native ``f(start, stop, args...)`` run over pieces of [0, n)
on a small persistent pool of threads.

The workers are Python threads that call the native function through ctypes, which
releases the GIL for the length of the foreign call, so the chunks run at once; only the
hand-off (a SimpleQueue put and get per worker) holds the GIL. That hand-off costs tens
of microseconds, so a call over fewer than ``PARALLEL_MIN_ELEMENTS`` elements runs on the
caller's thread alone and pays nothing for the pool.
"""

from __future__ import annotations

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


def default_threads() -> int:
    """``FLOWJIT_NUM_THREADS`` if set, else the CPUs this process may run on."""
    env = os.environ.get("FLOWJIT_NUM_THREADS")
    if env:
        return max(1, int(env))
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


class ChunkPool:
    """``nthreads - 1`` daemon workers plus the calling thread; ``run`` splits [0, n) into
    at most ``nthreads`` contiguous chunks of at least ``min_chunk`` elements and returns
    when all are done."""

    def __init__(self, nthreads: int, min_chunk: int = _MIN_CHUNK) -> None:
        self.nthreads = max(1, nthreads)
        self.min_chunk = max(1, min_chunk)
        # A forked child has none of the workers: its calls run on its own thread.
        self._pid = os.getpid()
        self._inboxes: list[queue.SimpleQueue] = []
        self._done: queue.SimpleQueue = queue.SimpleQueue()
        # One parallel call at a time; a second caller (another thread, or a nested call)
        # runs its range on its own thread instead of waiting.
        self._busy = threading.Lock()
        for i in range(self.nthreads - 1):
            inbox: queue.SimpleQueue = queue.SimpleQueue()
            threading.Thread(target=self._work, args=(inbox,), daemon=True,
                             name=f"flowjit-chunk-{i}").start()
            self._inboxes.append(inbox)

    def _work(self, inbox: queue.SimpleQueue) -> None:
        while True:
            fn, start, stop, args = inbox.get()
            try:
                fn(start, stop, *args)
                self._done.put(None)
            except BaseException as e:  # handed to the caller, which raises it
                self._done.put(e)

    def run(self, fn: Callable[..., Any], n: int, *args: Any) -> None:
        """Call ``fn(start, stop, *args)`` over chunks covering [0, n) exactly once."""
        parts = min(self.nthreads, max(1, n // self.min_chunk))
        if parts == 1 or self._pid != os.getpid() or not self._busy.acquire(blocking=False):
            fn(0, n, *args)
            return
        try:
            bounds = [n * i // parts for i in range(parts + 1)]
            for i in range(1, parts):
                self._inboxes[i - 1].put((fn, bounds[i], bounds[i + 1], args))
            error: BaseException | None = None
            try:
                fn(0, bounds[1], *args)
            except BaseException as e:
                error = e
            for _ in range(parts - 1):  # wait for every chunk, even after a failure
                got = self._done.get()
                if got is not None and error is None:
                    error = got
            if error is not None:
                raise error
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
