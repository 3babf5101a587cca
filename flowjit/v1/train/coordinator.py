"""``tf.train.Coordinator``: stop a group of threads together and report the first error.

Threads poll ``should_stop()``; any of them (or the main thread) calls ``request_stop()``,
passing the exception that made it stop if any. ``join()`` waits for the threads, gives
them a grace period once a stop is requested, and re-raises the first exception reported.
As in TensorFlow 1.x, an ``OutOfRangeError`` (an input pipeline running out) counts as a
clean stop and is not re-raised, unless ``clean_stop_exception_types`` says otherwise.
All methods are thread-safe.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from types import TracebackType
from typing import Any

from flowjit.v1 import errors

__all__ = ["Coordinator"]

ExcInfo = tuple[type[BaseException], BaseException, TracebackType | None]


class Coordinator:
    """A coordinator of threads (``tf.train.Coordinator``)."""

    def __init__(self, clean_stop_exception_types: Iterable[type[BaseException]] | None = None):
        if clean_stop_exception_types is None:
            clean_stop_exception_types = (errors.OutOfRangeError,)
        self._clean_stop_exception_types = tuple(clean_stop_exception_types)
        self._lock = threading.Lock()
        self._stop_event = threading.Event()
        self._exc_info_to_raise: ExcInfo | None = None
        self._joined = False
        self._registered_threads: set[threading.Thread] = set()

    def _exc_info(self, ex: Any) -> ExcInfo | None:
        """``ex`` (an exception or an ``exc_info`` triple) as a triple, or None for a clean stop."""
        if ex is None:
            return None
        if isinstance(ex, tuple):
            if len(ex) != 3 or not isinstance(ex[1], BaseException):
                raise ValueError(f"request_stop(ex=...) takes an exception or a sys.exc_info() triple, got {ex!r}")
            info: ExcInfo = ex
        elif isinstance(ex, BaseException):
            info = (type(ex), ex, ex.__traceback__)
        else:
            raise ValueError(f"request_stop(ex=...) takes an exception or a sys.exc_info() triple, got {ex!r}")
        if isinstance(info[1], self._clean_stop_exception_types):
            return None
        return info

    def request_stop(self, ex: Any = None) -> None:
        """Ask every thread to stop. ``ex`` (an exception or ``sys.exc_info()``) is recorded
        for ``join()`` to re-raise if it is the first one and not a clean-stop type; after
        ``join()`` it is raised at once, since nobody would see it otherwise."""
        with self._lock:
            info = self._exc_info(ex)
            if self._joined and info is not None:
                raise info[1].with_traceback(info[2])
            if not self._stop_event.is_set():
                if info is not None and self._exc_info_to_raise is None:
                    self._exc_info_to_raise = info
                self._stop_event.set()

    def clear_stop(self) -> None:
        """Forget the stop request and its exception, so the coordinator can be used again."""
        with self._lock:
            self._joined = False
            self._exc_info_to_raise = None
            if self._stop_event.is_set():
                self._stop_event.clear()

    def should_stop(self) -> bool:
        """Whether a stop was requested."""
        return self._stop_event.is_set()

    @contextlib.contextmanager
    def stop_on_exception(self) -> Iterator[None]:
        """Run the ``with`` body; an exception in it requests a stop (with that exception)
        instead of propagating: ``with coord.stop_on_exception(): while not coord.should_stop(): ...``."""
        try:
            yield
        except BaseException:
            self.request_stop(ex=sys.exc_info())

    def wait_for_stop(self, timeout: float | None = None) -> bool:
        """Block until a stop is requested (or ``timeout`` seconds pass); whether it was."""
        return self._stop_event.wait(timeout)

    def register_thread(self, thread: threading.Thread) -> None:
        """Add a thread for ``join()`` to wait for when it is called without ``threads``."""
        with self._lock:
            self._registered_threads.add(thread)

    def join(self, threads: Iterable[threading.Thread] | None = None, stop_grace_period_secs: float = 120,
             ignore_live_threads: bool = False) -> None:
        """Wait until the threads (the given ones and the registered ones) end or a stop is
        requested; then give them ``stop_grace_period_secs`` to end. Re-raises the first
        exception passed to ``request_stop``; else raises RuntimeError naming the threads
        still running after the grace period (unless ``ignore_live_threads``)."""
        with self._lock:
            group = set(self._registered_threads)
        if threads is not None:
            group |= set(threads)
        group_list = sorted(group, key=lambda t: t.name)
        # Wake on a stop request at once; poll the threads' ends (threading has no wait-any).
        while any(t.is_alive() for t in group_list) and not self._stop_event.wait(0.01):
            pass
        deadline = time.monotonic() + max(0.0, float(stop_grace_period_secs))
        for t in group_list:
            if t.is_alive() and t.ident is not None:
                t.join(max(0.0, deadline - time.monotonic()))
        stragglers = [t.name for t in group_list if t.is_alive()]
        with self._lock:
            self._joined = True
            self._registered_threads = set()
            info = self._exc_info_to_raise
        if info is not None:
            raise info[1].with_traceback(info[2])
        if stragglers and not ignore_live_threads:
            raise RuntimeError(f"Coordinator stopped with threads still running after the {stop_grace_period_secs} s "
                               f"grace period: {' '.join(stragglers)}; they must check coord.should_stop() (or pass "
                               "ignore_live_threads=True)")

    @property
    def joined(self) -> bool:
        """Whether ``join()`` has returned (or raised)."""
        return self._joined

    def raise_requested_exception(self) -> None:
        """Re-raise the exception passed to ``request_stop``, if any."""
        with self._lock:
            info = self._exc_info_to_raise
        if info is not None:
            raise info[1].with_traceback(info[2])
