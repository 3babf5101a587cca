"""``MultiDeviceExecutable``: a placed, partitioned program run on several devices at once.

The program (after placement, partition and fusion) is split into one subfunction per
device (``split_by_device``); each is compiled for its device as an ``Executable``, through
that device kind's code generator (a CPU partition's kernels run single-threaded, one core
per virtual device). One call is one step: each partition runs on its device's worker
thread, values cross devices through the step's ``Rendezvous``, and the call returns
when every partition has finished. When one partition fails, the step is cancelled on
every device (their waiting ``recv``s raise ``StepCancelled``), every thread finishes,
and the failure is raised with a note naming the device and the op.

A partition on a device of another process (a cluster task's, ``/job:ps/task:0/cpu:0``)
is compiled and run there by the device's ``RemoteHost``: one call is one step on every
process at once, named by a step id; values cross processes by the hosts' ``push`` and
``pull`` under their send/recv keys; a failure anywhere cancels the step on every process.
Arguments that are resident handles (a Variable the task holds, see ``to_host``) go to the
task holding them as handles; anywhere else they are read.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import os
import queue
import threading
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any

import numpy as np

from flowjit.ir.core import Function, Op
from flowjit.ir.printer import format_loc
from flowjit.passes.partition import Partition, split_by_device
from flowjit.passes.pipeline import PipelineResult
from flowjit.runtime import rendezvous
from flowjit.runtime.devices import RemoteHost, remote_host
from flowjit.runtime.executable import Executable
from flowjit.runtime.rendezvous import Rendezvous, StepCancelled, to_host


class DeviceWorker:
    """The one thread of a device: runs the jobs given to it, in order, forever (a daemon
    thread per device per process, as XLA's host devices have; never one per call)."""

    def __init__(self, device: str):
        self.device = device
        self.jobs: queue.SimpleQueue[tuple[Callable[[], Any], Future]] = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._loop, name=f"flowjit-{device}", daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        while True:
            job, future = self.jobs.get()
            try:
                future.set_result(job())
            except BaseException as e:  # reported to the caller through the future
                future.set_exception(e)

    def submit(self, job: Callable[[], Any]) -> Future:
        """Run ``job`` on this device's thread; its result or exception comes in the Future."""
        future: Future = Future()
        self.jobs.put((job, future))
        return future


_workers: dict[str, DeviceWorker] = {}
_workers_lock = threading.Lock()
# Steps called from several threads queue their partitions on every device in one order:
# interleaved, device A could run step 1 while device B runs step 2, each waiting for the
# other's send (a deadlock). Held only while queueing, never while a step runs.
_submit_lock = threading.Lock()


def worker(device: str) -> DeviceWorker:
    """The worker thread of ``device`` (started on first use)."""
    with _workers_lock:
        w = _workers.get(device)
        if w is None:
            w = _workers[device] = DeviceWorker(device)
        return w


class MultiDeviceExecutable:
    """A partitioned program ready to run: call ``run(*arrays)`` as an ``Executable``.

    ``function`` is the whole placed program (with its send/recv pairs, as ``flowjit ir``
    shows it); ``partitions`` pairs each device's ``Partition`` with its executable.
    """

    def __init__(self, function: Function, backend: str = "llvm", default: str = "cpu:0",
                 pipeline: PipelineResult | None = None, fastmath: bool = False):
        self.function = function
        self.backend = backend
        self.device = default
        self.pipeline = pipeline
        self._dtypes = [a.type.dtype.np for a in function.args]
        parts = split_by_device(function.clone(), default)
        self.partitions: list[tuple[Partition, Any]] = [(p, self._compile(p, backend, fastmath)) for p in parts]
        self._n_results = len(function.returns)
        # The keys a partition of this process exchanges with another process: sends to
        # a remote device are pushed there, recvs from one pulled.
        self._hosts = {p.device: exe.host for p, exe in self.partitions if isinstance(exe, _RemotePartition)}
        self._pushes: list[tuple[str, RemoteHost]] = []
        self._pulls: list[tuple[str, RemoteHost]] = []
        # An argument sent to a task travels in the call starting the task's step: one actor
        # call instead of two (key, the argument's position, the task's device).
        self._early: list[tuple[str, int, str]] = []
        for part, exe in self.partitions:
            if isinstance(exe, _RemotePartition):
                continue
            arg_position = {a.id: part.arg_positions[j] for j, a in enumerate(part.function.args)}
            for op in part.function.body.walk():
                if op.primitive.role == "send" and op.attrs["dst"] in self._hosts:
                    if op.inputs[0].id in arg_position:
                        self._early.append((op.attrs["key"], arg_position[op.inputs[0].id], op.attrs["dst"]))
                    else:
                        self._pushes.append((op.attrs["key"], self._hosts[op.attrs["dst"]]))
                elif op.primitive.role == "recv" and op.attrs["src"] in self._hosts:
                    self._pulls.append((op.attrs["key"], self._hosts[op.attrs["src"]]))
        self._steps = itertools.count()
        self._id = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"

    @staticmethod
    def _compile(part: Partition, backend: str, fastmath: bool) -> Any:
        host = remote_host(part.device)
        if host is not None:
            return _RemotePartition(host, host.compile(part.function))
        # A CPU partition's kernels run on its one worker thread (a virtual CPU is one core).
        return Executable(part.function, backend, part.device, fastmath=fastmath, parallel=False)

    @property
    def devices(self) -> list[str]:
        """The devices this program runs on."""
        return [p.device for p, _ in self.partitions]

    def _run_partition(self, part: Partition, exe: Any, args: list[Any], step: Rendezvous) -> list[Any]:
        with rendezvous.active(step):
            try:
                return exe.run(*args)
            except BaseException as e:
                step.cancel(e)
                if not isinstance(e, StepCancelled):
                    op = exe.failing_op(e) if hasattr(exe, "failing_op") else None
                    e.add_note(f"flowjit: on device {part.device}{describe_op(op)}")
                raise

    def run(self, *arrays: Any) -> list[np.ndarray]:
        """Run one step on arrays that already have the argument dtypes; the results as
        NumPy arrays (a resident handle for a variable update a task keeps), in the
        program's order."""
        if not self._hosts:
            return self._run_local(arrays)
        step_id = f"{self._id}-{next(self._steps)}"
        sends: dict[str, Any] = {k: (lambda v, k=k, h=h: h.push(step_id, k, v)) for k, h in self._pushes}
        early: dict[str, dict[str, Any]] = {}
        for key, position, device in self._early:
            early.setdefault(device, {})[key] = to_local(arrays[position])
            sends[key] = _sent_early
        pulls = {k: (lambda k=k, h=h: h.pull(step_id, k)) for k, h in self._pulls}
        step = Rendezvous(remote_send=sends, remote_recv=pulls)
        futures = []
        with _submit_lock:
            for part, exe in self.partitions:
                if isinstance(exe, _RemotePartition):
                    args = [arrays[i] if _resident_on(arrays[i]) == part.device else to_local(arrays[i])
                            for i in part.arg_positions]
                    futures.append(exe.host.run(exe.compiled, step_id, args, early.get(part.device, {})))
                else:
                    args = [to_local(arrays[i]) for i in part.arg_positions]
                    futures.append(worker(part.device).submit(
                        lambda part=part, exe=exe, args=args: self._run_partition(part, exe, args, step)))
        # The first failure cancels the step everywhere, so no process waits for a value
        # that will never come; then every partition is waited for.
        done, pending = concurrent.futures.wait(futures, return_when=concurrent.futures.FIRST_EXCEPTION)
        failed = [f.exception() for f in done if f.exception() is not None]
        if failed and pending:
            step.cancel(failed[0])
            for host in self._hosts.values():
                host.cancel(step_id, f"{type(failed[0]).__name__} on another device")
        return self._collect(futures, arrays)

    def _run_local(self, arrays: Sequence[Any]) -> list[np.ndarray]:
        step = Rendezvous()
        futures = []
        with _submit_lock:
            for part, exe in self.partitions:
                args = [to_local(arrays[i]) for i in part.arg_positions]
                futures.append(worker(part.device).submit(
                    lambda part=part, exe=exe, args=args: self._run_partition(part, exe, args, step)))
        return self._collect(futures, arrays)

    def _collect(self, futures: list[Future], arrays: Sequence[Any]) -> list[np.ndarray]:
        results: list[Any] = [None] * self._n_results
        errors: list[BaseException] = []
        for (part, _), future in zip(self.partitions, futures):
            try:
                outs = future.result()
            except BaseException as e:  # every partition is waited for before raising
                errors.append(e)
                continue
            for k, x in zip(part.result_positions, outs):
                results[k] = to_host(x)
        if errors:
            real = [e for e in errors if not isinstance(e, StepCancelled)]
            raise (real or errors)[0]
        local = [a for a in arrays if not _resident_on(a)]
        return [x if _resident_on(x) else Executable._own(x, local) for x in results]

    def __call__(self, args: Sequence[object]) -> list[np.ndarray]:
        return self.run(*[a if _resident_on(a) else np.asarray(a).astype(d, copy=False)
                          for a, d in zip(args, self._dtypes)])

    def kernel_listing(self) -> str:
        """Each partition's kernels and driver, headed by its device."""
        parts = []
        for part, exe in self.partitions:
            listing = exe.kernel_listing() if hasattr(exe, "kernel_listing") else ""
            parts.append(f"# ---- partition on {part.device}\n{listing}")
        return "\n".join(parts)


def _sent_early(value: Any) -> None:
    """The send of an argument that went with the call starting its task's step."""


class _RemotePartition:
    """A partition compiled in another process: its host and the host's handle for it."""

    def __init__(self, host: RemoteHost, compiled: Any):
        self.host, self.compiled = host, compiled

    def kernel_listing(self) -> str:
        return f"(compiled in the process of {self.host.device})\n"


def _resident_on(x: Any) -> str | None:
    """The device holding ``x`` when it is a resident handle (an array another process keeps)."""
    return getattr(x, "__flowjit_resident__", None)


def to_local(x: Any) -> Any:
    """``x``, read into this process when it is a resident handle."""
    return np.asarray(x) if _resident_on(x) else x


def describe_op(op: Op | None) -> str:
    """``, op NAME (file:line)`` for an error note; empty for no op."""
    if op is None:
        return ""
    where = f" ({format_loc(op.loc)})" if op.loc is not None else ""
    name = op.attrs.get("name", op.name) if op.primitive.role == "kernel" else op.name
    return f", op {name}{where}"
