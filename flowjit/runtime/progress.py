"""A progress line on the terminal while flowjit compiles for longer than a second.

The default backend compiles a program's kernels into one LLVM module on its first call:
rendering the kernels is a few percent of that time (0.08 s of 1.25 s for a 44-kernel
Adam step), LLVM's optimization and code generation of the module the rest, in one call
that reports no progress of its own. So the line counts what can be counted -- the
programs of a burst of compiles (a v1 session's segments, an ``fj.function`` called with
new signatures, a train and an eval step) and their kernels -- and names the program
being compiled, with the time so far:

    flowjit: compiling train_step (44 kernels); 2 programs (61 kernels) done [00:03]

It appears once a burst has lasted ``DELAY_S`` and disappears when the last compile in
flight ends; compiles that start within ``BURST_GAP_S`` of the previous one's end belong
to its burst. Only where stderr is a terminal (``FLOWJIT_PROGRESS=0`` turns it off there,
``=1`` on anywhere) and tqdm is installed; elsewhere ``compiling`` costs a clock read and
starts no thread. A process whose programs all load from the disk cache draws nothing:
a load takes milliseconds.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import sys
import threading
import time
from collections.abc import Iterator
from typing import IO, Any

DELAY_S = 1.0        # a burst shorter than this draws nothing
BURST_GAP_S = 1.0    # a compile starting this soon after the last one ended continues its burst
REFRESH_S = 0.25     # how often the clock on the line moves while LLVM works


def _stream() -> IO[str] | None:
    """stderr when a line should be drawn on it (a terminal, or forced by FLOWJIT_PROGRESS=1)."""
    setting = os.environ.get("FLOWJIT_PROGRESS", "")
    stream = sys.stderr
    if setting == "0" or stream is None:
        return None
    if setting == "1":
        return stream
    try:
        return stream if stream.isatty() else None
    except (AttributeError, ValueError):  # a replaced or closed stderr
        return None


class _Burst:
    """The compiles in flight and the ones done since the burst began; one per process."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.inflight: dict[int, tuple[str, int]] = {}
        self.tokens = itertools.count()
        self.start = 0.0
        self.last_end = -float("inf")
        self.done_programs = 0
        self.done_kernels = 0
        self.stream: IO[str] | None = None
        self.bar: Any = None
        self.thread: threading.Thread | None = None

    def begin(self, name: str, kernels: int, stream: IO[str]) -> int:
        with self.cond:
            now = time.perf_counter()
            if not self.inflight and now - self.last_end > BURST_GAP_S:
                self.start, self.done_programs, self.done_kernels = now, 0, 0
            self.stream = stream
            token = next(self.tokens)
            self.inflight[token] = (name, kernels)
            if self.thread is None:
                self.thread = threading.Thread(target=self._watch, name="flowjit-progress", daemon=True)
                self.thread.start()
            self.cond.notify()
            return token

    def end(self, token: int) -> None:
        with self.cond:
            _, kernels = self.inflight.pop(token)
            self.done_programs += 1
            self.done_kernels += kernels
            self.last_end = time.perf_counter()
            if self.inflight:
                self._draw()
            elif self.bar is not None:
                self.bar.close()  # leave=False: the line is cleared, the user's output follows
                self.bar = None

    def text(self) -> str:
        now = ", ".join(f"{name} ({kernels} kernel{'s' * (kernels != 1)})" for name, kernels in self.inflight.values())
        done = (f"; {self.done_programs} program{'s' * (self.done_programs != 1)} ({self.done_kernels} kernels) done"
                if self.done_programs else "")
        return f"flowjit: compiling {now}{done}"

    def _draw(self) -> None:
        if self.bar is None:
            try:
                from tqdm import tqdm
            except ImportError:  # tqdm is optional: no line
                return
            # delay: no line drawn before its clock is set back to the burst's start (tqdm's
            # clock, on time.time(), starts now); refresh() draws it, and with the delay
            # reset close() clears it.
            self.bar = tqdm(total=None, file=self.stream, leave=False, bar_format="{desc} [{elapsed}]",
                            desc=self.text(), delay=1)
            self.bar.start_t -= time.perf_counter() - self.start
            self.bar.delay = 0
        self.bar.set_description_str(self.text(), refresh=True)

    def _watch(self) -> None:
        with self.cond:
            while True:
                if not self.inflight:
                    self.cond.wait()
                    continue
                wait = self.start + DELAY_S - time.perf_counter()
                if wait <= 0:
                    self._draw()
                    wait = REFRESH_S
                self.cond.wait(wait)


_BURST = _Burst()


@contextlib.contextmanager
def compiling(name: str, kernels: int) -> Iterator[None]:
    """Around the compile of program ``name`` (``kernels`` kernels): on a terminal, the
    progress line shows it once the burst of compiles it belongs to has lasted DELAY_S."""
    stream = _stream()
    if stream is None:
        yield
        return
    token = _BURST.begin(name, kernels, stream)
    try:
        yield
    finally:
        _BURST.end(token)
