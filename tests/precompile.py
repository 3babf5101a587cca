"""Compile the kernels of many test programs at once, as a suite on a cold cache wants."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import pytest

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


@contextmanager
def suite_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """``FLOWJIT_CACHE_DIR`` when set, else the session's kernel cache (shared with
    tests/codegen_cpu): cold in a fresh run, as on CI's clean clone."""
    with pytest.MonkeyPatch.context() as mp:
        if not os.environ.get("FLOWJIT_CACHE_DIR"):
            mp.setenv("FLOWJIT_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "flowjit-cache"))
        yield
