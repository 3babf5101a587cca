"""Compile the kernels of many test programs at once, as a suite on a cold cache wants."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from flowjit.codegen_cpu.compile import precompile
from flowjit.runtime.executable import _signature


def trace_and_precompile(calls: Iterable[tuple[Any, Sequence[Any]]]) -> int:
    """Trace each ``fj.function`` for its arguments (building its executable, running
    nothing) and compile every cold kernel of them all on two cores (``precompile``), so
    a test's first call only loads its kernels; returns how many kernel steps there were.
    A program that fails to trace is left for its test to report."""
    pending = []
    for f, args in calls:
        try:
            entry, _ = f._lookup(tuple(args), {})
        except Exception:
            continue
        pending += [(st.kernel, _signature(st)) for st in entry.executable._steps if st.kernel is not None]
    precompile(pending)
    return len(pending)
