"""Helpers of the tests that call one program from many threads at once."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable

THREADS = 8


def fresh_constant() -> float:
    """A float constant no earlier program of this process used: a program built with it
    has kernel sources (so module names in sys.modules) of its own, cold in this process
    as well as on disk."""
    return 1.0 + (time.monotonic_ns() % 999_983) / 1e7


def hammer(call: Callable[[int, int], None], calls: int, threads: int = THREADS, timeout_s: float = 240) -> Counter:
    """Run ``call(thread, i)`` ``calls`` times on each of ``threads`` threads, all started at
    once; the errors raised, counted by type and message. Fails when some call has not
    returned after ``timeout_s`` (a deadlock)."""
    errors: Counter = Counter()
    start = threading.Barrier(threads)

    def work(t: int) -> None:
        start.wait()
        for i in range(calls):
            try:
                call(t, i)
            except Exception as e:  # counted, so the test reports every kind of failure
                errors[f"{type(e).__name__}: {str(e)[:200]}"] += 1

    # Daemons, so a deadlock fails the test instead of hanging the process at its exit.
    workers = [threading.Thread(target=work, args=(t,), daemon=True) for t in range(threads)]
    for th in workers:
        th.start()
    deadline = time.monotonic() + timeout_s
    for th in workers:
        th.join(timeout=max(deadline - time.monotonic(), 0))
    assert not any(th.is_alive() for th in workers), "a call never returned (deadlock)"
    return errors
