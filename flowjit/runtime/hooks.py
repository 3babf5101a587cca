"""What sends a call of an ``fj.function`` down its slow path.

The dispatch fast path (``TracedFunction.__call__``) hands a call straight to the
program's native builtin. It may do so only while no thread is tracing, numerics are not
checked and no profiler records: ``SLOW_PATH[0]`` is true while any of these holds, so the
fast path reads one list element and calls nothing. The modules that switch these on
(``tracer.core``, ``flowjit.debug``, ``runtime.profiler``) say so with ``set_reason``.
"""

from __future__ import annotations

import threading

SLOW_PATH = [False]
_reasons: dict[str, int] = {}
_lock = threading.Lock()


def set_reason(name: str, count: int) -> None:
    """Record that ``name`` (a trace count, numerics checks, a profiler) now wants the slow
    path ``count`` times over (0: not at all)."""
    with _lock:
        _reasons[name] = count
        SLOW_PATH[0] = any(_reasons.values())


def add_reason(name: str, delta: int) -> None:
    """``set_reason`` by a difference: for nested scopes (traces) on several threads."""
    with _lock:
        _reasons[name] = _reasons.get(name, 0) + delta
        SLOW_PATH[0] = any(_reasons.values())
