"""Compile the kernels of many test programs at once, as a suite on a cold cache wants."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import pytest


def trace_and_precompile(calls: Iterable[tuple[Any, Sequence[Any]]]) -> int:
    """Trace each ``fj.function`` for its arguments (building its executable, running
    nothing; the CPU backend compiles a program in milliseconds at its first call); returns
    how many kernel steps there were. A program that fails to trace is left for its test to
    report."""
    steps = 0
    for f, args in calls:
        try:
            entry, _ = f._lookup(tuple(args), {})
        except Exception:
            continue
        kernels = [st for st in entry.executable._steps if st.kernel is not None]
        steps += len(kernels)
    return steps


@contextmanager
def suite_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """``FLOWJIT_CACHE_DIR`` when set, else the session's kernel cache (shared with
    tests/codegen_cpu): cold in a fresh run, as on CI's clean clone."""
    with pytest.MonkeyPatch.context() as mp:
        if not os.environ.get("FLOWJIT_CACHE_DIR"):
            mp.setenv("FLOWJIT_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "flowjit-cache"))
        yield
