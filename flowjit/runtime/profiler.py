"""A timeline profiler in Chrome's trace-event format (what Perfetto and chrome://tracing
open).

``with fj.profile("trace.json") as p:`` records, while the block runs, every call of an
``fj.function`` program: its compile, the call itself, and inside a native program each
step (kernel, BLAS gemm, loop, copy) with its device, thread, start and duration. The
native steps are timed by the program itself: a profiling build of it (compiled on its
first profiled call, and cached like any program) reads ``CLOCK_MONOTONIC`` around each
top-level step into a buffer the runtime reads after the call. A program without a native
form (the Python driver) is one event. While no profile is active nothing is recorded and
a call takes its usual path (``runtime.hooks``): the profiler costs nothing then.
"""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from flowjit.runtime import hooks

# The active profile, or None.
PROFILER: list[Profile | None] = [None]


@dataclass
class Event:
    """One span of the timeline: ``cat`` is ``compile``, ``call``, ``kernel``, ``gemm``,
    ``loop``, ``copy`` or ``program``; times in nanoseconds of ``time.monotonic_ns``."""

    name: str
    cat: str
    start_ns: int
    end_ns: int
    device: str
    thread: int
    args: dict[str, Any] = field(default_factory=dict)


class Profile:
    """The events recorded while it is active (``events``); written as a Chrome trace to
    ``path`` when the ``with`` block ends (or by ``write``)."""

    def __init__(self, path: str | os.PathLike[str] | None = None):
        self.path = path
        self.events: list[Event] = []
        self._lock = threading.Lock()
        self.start_ns = 0

    def __enter__(self) -> Profile:
        if PROFILER[0] is not None:
            raise RuntimeError("fj.profile: another profile is already recording; end it first")
        self.start_ns = time.monotonic_ns()
        PROFILER[0] = self
        hooks.set_reason("profile", 1)
        return self

    def __exit__(self, *exc: object) -> None:
        PROFILER[0] = None
        hooks.set_reason("profile", 0)
        if self.path is not None:
            self.write(self.path)

    def record(self, name: str, cat: str, start_ns: int, end_ns: int, device: str = "cpu:0",
               args: dict[str, Any] | None = None) -> None:
        """Add one span (on the calling thread)."""
        with self._lock:
            self.events.append(Event(name, cat, start_ns, end_ns, device, threading.get_ident(), args or {}))

    def trace_events(self) -> list[dict[str, Any]]:
        """The events as Chrome trace events: one process per device, one track per thread,
        microseconds from the profile's start."""
        devices = sorted({e.device for e in self.events})
        pid = {d: i + 1 for i, d in enumerate(devices)}
        out: list[dict[str, Any]] = [{"name": "process_name", "ph": "M", "pid": pid[d], "tid": 0,
                                      "args": {"name": d}} for d in devices]
        for e in sorted(self.events, key=lambda e: (e.start_ns, -e.end_ns)):
            out.append({"name": e.name, "cat": e.cat, "ph": "X", "pid": pid[e.device], "tid": e.thread,
                        "ts": (e.start_ns - self.start_ns) / 1e3, "dur": max(e.end_ns - e.start_ns, 0) / 1e3,
                        "args": e.args})
        return out

    def write(self, path: str | os.PathLike[str]) -> None:
        """Write the trace as JSON (Chrome's trace-event format)."""
        with open(path, "w") as f:
            json.dump({"traceEvents": self.trace_events(), "displayTimeUnit": "ms"}, f)


def profile(path: str | os.PathLike[str] | None = None) -> Profile:
    """A profile to use as ``with fj.profile("trace.json") as p:``: every compile, call and
    native step of flowjit programs inside the block, written to ``path`` (Chrome's
    trace-event format: open it in Perfetto or chrome://tracing) when it ends; ``p.events``
    holds them as data."""
    return Profile(path)
