"""The compile progress line: drawn on a terminal once compiling has lasted DELAY_S,
never where stderr is not a terminal, and never for compiles shorter than that."""

from __future__ import annotations

import io
import time

import numpy as np
import pytest

import flowjit as fj
from flowjit.runtime import progress

pytest.importorskip("tqdm")


class FakeTerminal(io.StringIO):
    """stderr as a terminal (what tqdm and the progress line ask), recording what is drawn."""

    def isatty(self) -> bool:
        return True


@pytest.fixture
def terminal(monkeypatch):
    """A function making stderr a FakeTerminal (called in the test itself: pytest's output
    capture sets sys.stderr again between a fixture's setup and the test)."""
    monkeypatch.delenv("FLOWJIT_PROGRESS", raising=False)
    monkeypatch.setattr(progress, "_BURST", progress._Burst())  # no burst left over from another test

    def use() -> FakeTerminal:
        term = FakeTerminal()
        monkeypatch.setattr("sys.stderr", term)
        return term

    return use


def _deep_step(layers: int, width: int):
    ws = [fj.Variable(np.full((width, width), 0.01, np.float32)) for _ in range(layers)]
    opt = fj.optim.Adam(1e-3)

    def loss(x):
        for w in ws:
            x = fj.tanh(x @ w)
        return fj.mean(fj.square(x))

    return fj.function(lambda x: opt.minimize(lambda: loss(x), ws)), np.ones((4, width), np.float32)


def test_a_long_compile_draws_the_line_and_clears_it(terminal, monkeypatch, tmp_path):
    term = terminal()
    monkeypatch.setenv("FLOWJIT_CACHE_DIR", str(tmp_path))  # a cold compile
    monkeypatch.setattr(progress, "DELAY_S", 0.05)
    monkeypatch.setattr(progress, "REFRESH_S", 0.02)
    step, x = _deep_step(8, 24)
    step(x)
    drawn = term.getvalue()
    assert "flowjit: compiling _lambda_ (" in drawn and " kernels)" in drawn
    assert drawn.startswith("\r") and drawn.endswith("\r")  # drawn in place, then cleared (leave=False)
    # The line is gone once the compile ends: a later call draws nothing more.
    term.truncate(0)
    term.seek(0)
    step(x)
    time.sleep(0.1)
    assert term.getvalue() == ""


def test_a_burst_counts_the_programs_done(terminal, monkeypatch):
    term = terminal()
    monkeypatch.setattr(progress, "DELAY_S", 0.05)
    with progress.compiling("first", 3):
        pass
    with progress.compiling("second", 1):
        time.sleep(0.5)
    drawn = term.getvalue()
    assert "flowjit: compiling second (1 kernel); 1 program (3 kernels) done" in drawn
    assert "first (3" not in drawn  # done before the line appeared


def test_a_short_compile_draws_nothing(terminal):
    term = terminal()
    with progress.compiling("quick", 5):
        time.sleep(0.05)
    time.sleep(0.05)
    assert term.getvalue() == ""


def test_no_terminal_no_line_no_thread(monkeypatch):
    plain = io.StringIO()
    monkeypatch.setattr("sys.stderr", plain)
    monkeypatch.delenv("FLOWJIT_PROGRESS", raising=False)
    monkeypatch.setattr(progress, "DELAY_S", 0.0)
    monkeypatch.setattr(progress, "_BURST", progress._Burst())
    with progress.compiling("anything", 5):
        time.sleep(0.05)
    assert plain.getvalue() == "" and progress._BURST.thread is None


def test_flowjit_progress_0_turns_it_off_on_a_terminal(terminal, monkeypatch):
    term = terminal()
    monkeypatch.setenv("FLOWJIT_PROGRESS", "0")
    monkeypatch.setattr(progress, "DELAY_S", 0.0)
    with progress.compiling("anything", 5):
        time.sleep(0.05)
    assert term.getvalue() == ""
