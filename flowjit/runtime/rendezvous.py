"""Per-step rendezvous: how ``send`` hands a value to the ``recv`` of the same key.

One call of a partitioned program is one step with one ``Rendezvous``. Each device's
thread makes it current (``active``) while it runs its partition; ``send`` stores a value
under its key (never blocks) and ``recv`` waits for it. When a partition fails, the
executor ``cancel``s the step: every waiting and later ``recv`` raises ``StepCancelled``
at once, so no device thread waits for a value that will never come.

A step spanning processes (devices of a cluster's tasks) routes the keys whose other side
is in another process: ``remote_send`` maps a key to a function handing the value over,
``remote_recv`` to one fetching it; ``timeout`` bounds every wait, as a peer that died
would otherwise be waited for forever.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from flowjit.ir.errors import FlowjitError
from flowjit.ir.primitives.transfer import set_channel
from flowjit.runtime.profiler import PROFILER


class StepCancelled(FlowjitError):
    """The step was cancelled because another device's partition failed."""


class Rendezvous:
    """The channels of one step: values by key, a condition to wait on, a cancel flag."""

    def __init__(self, in_order: bool = False, remote_send: dict[str, Callable[[Any], None]] | None = None,
                 remote_recv: dict[str, Callable[[], Any]] | None = None, timeout: float | None = None):
        # in_order: the program runs on this one thread, each send before its recv (the
        # interpreter outside an executor): a recv never waits, and a key sent again
        # (by the next run) replaces the value.
        self.in_order = in_order
        self._values: dict[str, Any] = {}
        self._cond = threading.Condition()
        self._cancelled: BaseException | None = None
        self.remote_send = remote_send or {}
        self.remote_recv = remote_recv or {}
        self.timeout = timeout

    def send(self, key: str, value: Any) -> None:
        """Make ``value`` available to the recv of ``key``."""
        if key in self.remote_send:
            self.remote_send[key](value)
            return
        with self._cond:
            if key in self._values and not self.in_order:
                raise FlowjitError(f"send: key {key!r} was sent twice in one step")
            self._values[key] = value
            self._cond.notify_all()

    def recv(self, key: str) -> Any:
        """The value sent under ``key``, waiting for it. The receiving device copies it
        into its own memory where it must (``to_host``, the CUDA backend's ``to_device``)."""
        if key in self.remote_recv:
            return self.remote_recv[key]()
        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        with self._cond:
            while key not in self._values and self._cancelled is None:
                if self.in_order:
                    raise FlowjitError(f"recv {key!r}: nothing was sent under this key; a partitioned program "
                                       "run on one thread must send each value before receiving it")
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise FlowjitError(f"recv {key!r}: nothing arrived within {self.timeout:g} s (the sender's "
                                       "task may have died or be stuck)")
                self._cond.wait(left)
            if self._cancelled is not None:
                raise StepCancelled(f"recv {key!r}: the step was cancelled "
                                    f"({type(self._cancelled).__name__} on another device)")
            return self._values.pop(key)

    def pending(self) -> int:
        """How many values were sent and not yet received."""
        with self._cond:
            return len(self._values)

    def cancel(self, why: BaseException) -> None:
        """Cancel the step: wake every waiting recv (they raise StepCancelled)."""
        with self._cond:
            if self._cancelled is None:
                self._cancelled = why
            self._cond.notify_all()


_local = threading.local()


class active:
    """Make ``rendezvous`` the current one of this thread inside a ``with`` block."""

    def __init__(self, rendezvous: Rendezvous):
        self.rendezvous = rendezvous

    def __enter__(self) -> Rendezvous:
        self.saved = getattr(_local, "current", None)
        _local.current = self.rendezvous
        return self.rendezvous

    def __exit__(self, *exc: object) -> None:
        _local.current = self.saved


def current() -> Rendezvous:
    """This thread's current rendezvous; one is made for a program run outside an
    executor (the interpreter runs a partitioned program in order: each send comes before
    its recv)."""
    r = getattr(_local, "current", None)
    if r is None:
        r = _local.current = Rendezvous(in_order=True)
    return r


def to_host(x: Any) -> np.ndarray:
    """``x`` as a NumPy array in host memory: a CUDA array (numba's or cupy's) is copied;
    an array resident in another process (a variable a task holds) stays a handle."""
    if isinstance(x, np.ndarray) or hasattr(x, "__flowjit_resident__"):
        return x
    if hasattr(x, "copy_to_host"):  # numba.cuda device array
        return x.copy_to_host()
    if hasattr(x, "get"):  # cupy array
        return x.get()
    return np.asarray(x)


def _device() -> str:
    # A partition runs on its device's worker thread, named flowjit-<device>.
    name = threading.current_thread().name
    return name.removeprefix("flowjit-") if name.startswith("flowjit-") else "cpu:0"


def _send(key: str, value: Any) -> None:
    prof = PROFILER[0]
    start = time.monotonic_ns() if prof is not None else 0
    current().send(key, value)
    if prof is not None:
        prof.record(f"send {key}", "transfer", start, time.monotonic_ns(), _device(),
                    {"bytes": int(getattr(value, "nbytes", 0))})


def _recv(key: str) -> np.ndarray:
    prof = PROFILER[0]
    start = time.monotonic_ns() if prof is not None else 0
    value = to_host(current().recv(key))
    if prof is not None:  # the span includes the wait for the sender
        prof.record(f"recv {key}", "transfer", start, time.monotonic_ns(), _device(), {"bytes": int(value.nbytes)})
    return value


# The send/recv primitives' references (the ir layer, below this one) reach the current
# step's rendezvous through this hook.
set_channel(_send, _recv)
