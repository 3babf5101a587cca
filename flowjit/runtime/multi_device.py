"""``MultiDeviceExecutable``: a placed, partitioned program run on several devices at once.

The program (after placement, partition and fusion) is split into one subfunction per
device (``split_by_device``); each is compiled for its device (CPU: an ``Executable``
whose kernels run single-threaded, one core per virtual device; CUDA: a
``CudaExecutable``). One call is one step: each partition runs on its device's worker
thread, values cross devices through the step's ``Rendezvous``, and the call returns
when every partition has finished. When one partition fails, the step is cancelled on
every device (their waiting ``recv``s raise ``StepCancelled``), every thread finishes,
and the failure is raised with a note naming the device and the op.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any

import numpy as np

from flowjit.ir.core import Function, Op
from flowjit.ir.printer import format_loc
from flowjit.passes.partition import Partition, split_by_device
from flowjit.passes.pipeline import PipelineResult
from flowjit.runtime import rendezvous
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

    @staticmethod
    def _compile(part: Partition, backend: str, fastmath: bool) -> Any:
        if part.device.startswith("cuda:"):
            from flowjit.codegen_cuda import CudaExecutable
            return CudaExecutable(part.function, part.device)
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
                    e.add_note(f"flowjit: on device {part.device}{_describe(op)}")
                raise

    def run(self, *arrays: Any) -> list[np.ndarray]:
        """Run one step on arrays that already have the argument dtypes; the results as
        NumPy arrays, in the program's order."""
        step = Rendezvous()
        futures = []
        with _submit_lock:
            for part, exe in self.partitions:
                args = [arrays[i] for i in part.arg_positions]
                futures.append(worker(part.device).submit(
                    lambda part=part, exe=exe, args=args: self._run_partition(part, exe, args, step)))
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
        return [Executable._own(x, arrays) for x in results]

    def __call__(self, args: Sequence[object]) -> list[np.ndarray]:
        return self.run(*[np.asarray(a).astype(d, copy=False) for a, d in zip(args, self._dtypes)])

    def kernel_listing(self) -> str:
        """Each partition's kernels and driver, headed by its device."""
        parts = []
        for part, exe in self.partitions:
            listing = exe.kernel_listing() if hasattr(exe, "kernel_listing") else ""
            parts.append(f"# ---- partition on {part.device}\n{listing}")
        return "\n".join(parts)


def _describe(op: Op | None) -> str:
    if op is None:
        return ""
    where = f" ({format_loc(op.loc)})" if op.loc is not None else ""
    name = op.attrs.get("name", op.name) if op.primitive.role == "kernel" else op.name
    return f", op {name}{where}"
