"""Programs placed on a cluster's tasks: each task compiles and runs its partition of a
program, and values cross processes through Ray (TensorFlow's cross-process Send/Recv).

A program with ops under ``fj.device("/job:ps/task:1")`` is placed and partitioned by the
usual passes; the runtime (``MultiDeviceExecutable``) hands the partition of a task's
device to that device's ``TaskHost`` (registered by the ``Cluster``), which sends its IR
text to the task once (the task parses and compiles it, and keeps it) and then starts one
run per step. Inside a step:

- a value for a task is pushed to it (an actor call carrying the array: Ray moves an array
  of 100 KiB or more through its object store, so the task reads it in place);
- a value for the calling process is kept by the task until the caller pulls it (the
  caller is not an actor, so no one can push to it);
- every wait is bounded by the cluster's timeout; a failure on one task cancels the step on
  every task and in the caller, and is raised in the caller with the task, the op and the
  user's line.

A Variable created under ``fj.device("/job:ps/task:0")`` lives on that task: the first
program updating it moves its value there, and from then on the caller holds a
``ResidentArray``, a handle; the program's next calls pass the handle, so the parameter
never travels, only the values the program sends. ``np.asarray(var)`` and ``var.numpy()``
fetch it.
"""

from __future__ import annotations

import collections
import hashlib
import os
import threading
import uuid
import weakref
from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any

import numpy as np

from flowjit.distributed._ray import ray
from flowjit.ir.core import Function
from flowjit.ir.errors import FlowjitError
from flowjit.ir.parser import parse
from flowjit.ir.printer import print_function
from flowjit.runtime import rendezvous
from flowjit.runtime.executable import Executable
from flowjit.runtime.multi_device import describe_op
from flowjit.runtime.rendezvous import Rendezvous, StepCancelled

TRANSFER_GROUP = "transfer"
# Calls that must run while a partition runs on the task (deliveries, pulls, cancels):
# Ray runs them on threads of their own; the task's other calls keep their order.
CONCURRENCY_GROUPS = {TRANSFER_GROUP: 16}


class RemoteStepError(FlowjitError):
    """A step of a placed program that failed on a task, or could not reach it."""


class _Resident:
    """An argument the task holds already: a reference to its ``key``."""

    def __init__(self, key: str):
        self.key = key


class _ResidentResult:
    """A result the task keeps (a variable's update): its key, shape and dtype."""

    def __init__(self, key: str, shape: tuple[int, ...], dtype: str):
        self.key, self.shape, self.dtype = key, shape, dtype


class _HostedPartition:
    """A partition compiled in a task: its executable, where its sends go, and which of its
    results are variable updates (result index -> the argument it updates)."""

    def __init__(self, function: Function, backend: str | None, fastmath: bool, device: str, peers: dict[str, Any]):
        self.device = device
        self.updates: dict[int, int | None] = {}
        arg_index = {a.id: i for i, a in enumerate(function.args)}
        for k, v in enumerate(function.returns):
            op = v.producer
            if op is not None and op.primitive.role == "variable_update":
                self.updates[k] = arg_index.get(op.inputs[0].id)
        self.pushes = {op.attrs["key"]: peers[op.attrs["dst"]] for op in function.body.walk()
                       if op.primitive.role == "send" and op.attrs["dst"] in peers}
        # A virtual device of a task is one core, as in this process (its Ray CPU).
        self.executable = Executable(function, backend or os.environ.get("FLOWJIT_BACKEND") or "llvm", device,
                                     fastmath=fastmath, parallel=False)


class PartitionHost:
    """The methods a task's actor has to run partitions of placed programs; mixed into the
    actor class with the training roles (``Task``)."""

    def _host_state(self) -> None:
        if not hasattr(self, "_partitions"):
            self._partitions: dict[str, _HostedPartition] = {}
            self._resident: dict[str, np.ndarray] = {}
            self._steps: dict[str, Rendezvous] = {}
            self._ended: collections.deque[str] = collections.deque(maxlen=4096)
            self._steps_lock = threading.Lock()
            self._ran: set[str] = set()  # steps whose run here finished (values may wait to be pulled)

    def _step(self, step: str, timeout: float) -> Rendezvous | None:
        """The rendezvous of ``step`` (made on first use); None for a step already over."""
        self._host_state()
        with self._steps_lock:
            r = self._steps.get(step)
            if r is None:
                if step in self._ended:
                    return None
                r = self._steps[step] = Rendezvous(timeout=timeout)
            return r

    def _end_step(self, step: str) -> None:
        with self._steps_lock:
            self._steps.pop(step, None)
            self._ran.discard(step)
            self._ended.append(step)

    def _maybe_end(self, step: str, r: Rendezvous) -> None:
        # A step is over here once its run has finished and the caller pulled every value
        # sent for it.
        with self._steps_lock:
            if step in self._ran and not r.pending() and self._steps.get(step) is r:
                del self._steps[step]
                self._ran.discard(step)
                self._ended.append(step)

    def prepare_partition(self, part_id: str, text: str, backend: str | None, fastmath: bool,
                          peers: dict[str, Any]) -> str:
        """Parse and compile the partition ``text`` (IR text) under ``part_id``, once; its
        sends to the devices in ``peers`` (device -> actor) are pushed there."""
        self._host_state()
        if part_id not in self._partitions:
            fn = parse(text)
            device = next((op.device for op in fn.body.ops if op.device), f"{self.name}/cpu:0")
            self._partitions[part_id] = _HostedPartition(fn, backend, fastmath, device, peers)
        return part_id

    def run_partition(self, part_id: str, source: list[Any], step: str, args: Sequence[Any], timeout: float,
                      early: dict[str, Any] | None = None) -> list[Any]:
        """Run one step of the partition ``part_id`` on ``args`` (arrays, or references to
        arrays this task holds), its recvs of the keys in ``early`` given those values; its
        results, variable updates kept here. ``source`` holds a Ray reference to the
        partition's ``prepare_partition`` arguments, read only by a task that lacks it (one
        restarted since: it compiles the partition again)."""
        self._host_state()
        if part_id not in self._partitions:
            from flowjit.distributed._ray import ray
            self.prepare_partition(*ray.get(source[0], timeout=timeout))
        part = self._partitions[part_id]
        r = self._step(step, timeout)
        if r is None:
            raise StepCancelled(f"step {step} on {self.name}: cancelled before it started")
        r.timeout = timeout
        for key, value in (early or {}).items():
            r.send(key, value)
        for key, peer in part.pushes.items():
            r.remote_send[key] = lambda v, peer=peer, key=key: peer.deliver.remote(step, key, v)
        lost = [a.key for a in args if isinstance(a, _Resident) and a.key not in self._resident]
        if lost:
            self._end_step(step)
            raise RemoteStepError(f"{self.name} holds no array for {len(lost)} of this program's Variables living "
                                  "there: the task restarted since and their values died with its process; assign "
                                  "them again (or restore a checkpoint) before calling the program")
        values = [self._resident[a.key] if isinstance(a, _Resident) else a for a in args]
        try:
            with rendezvous.active(r):
                outs = part.executable.run(*values)
        except BaseException as e:
            r.cancel(e)
            if not isinstance(e, StepCancelled):
                op = part.executable.failing_op(e) if hasattr(part.executable, "failing_op") else None
                e.add_note(f"flowjit: on task {self.name} (device {part.device}){describe_op(op)}")
            self._end_step(step)
            raise
        with self._steps_lock:
            self._ran.add(step)
        self._maybe_end(step, r)
        results: list[Any] = []
        for k, x in enumerate(outs):
            if k in part.updates:
                j = part.updates[k]
                key = args[j].key if j is not None and isinstance(args[j], _Resident) else uuid.uuid4().hex
                self._resident[key] = np.asarray(x)
                results.append(_ResidentResult(key, tuple(x.shape), np.asarray(x).dtype.str))
            else:
                results.append(np.asarray(x))
        return results

    @ray.method(concurrency_group=TRANSFER_GROUP)
    def deliver(self, step: str, key: str, value: Any) -> None:
        """A value a send of another process made for this task's recv of ``key``."""
        r = self._step(step, timeout=None)
        if r is not None:
            r.send(key, value)

    @ray.method(concurrency_group=TRANSFER_GROUP)
    def take(self, step: str, key: str, timeout: float) -> Any:
        """The value this task's send of ``key`` made for the caller, waiting for it."""
        r = self._step(step, timeout)
        if r is None:
            raise StepCancelled(f"pull {key!r} from {self.name}: step {step} is over (cancelled)")
        value = r.recv(key)
        self._maybe_end(step, r)
        return value

    @ray.method(concurrency_group=TRANSFER_GROUP)
    def cancel_step(self, step: str, why: str) -> None:
        """Cancel ``step`` here: its waiting recvs and pulls raise StepCancelled."""
        r = self._step(step, timeout=None)
        if r is not None:
            r.cancel(StepCancelled(why))
            self._end_step(step)

    @ray.method(concurrency_group=TRANSFER_GROUP)
    def resident_value(self, key: str) -> np.ndarray:
        """The array held under ``key``."""
        self._host_state()
        if key not in self._resident:
            raise RemoteStepError(f"{self.name} holds no array {key} (the task restarted since?)")
        return self._resident[key]

    @ray.method(concurrency_group=TRANSFER_GROUP)
    def free_resident(self, keys: Sequence[str]) -> None:
        """Forget the arrays held under ``keys`` (their handles are gone)."""
        self._host_state()
        for key in keys:
            self._resident.pop(key, None)


class ResidentArray:
    """An array a task holds (a Variable's value that lives there): ``np.asarray`` fetches
    it; shape and dtype are known here. The task forgets it when the last handle goes."""

    def __init__(self, host: TaskHost, key: str, shape: tuple[int, ...], dtype: str):
        self.host, self.key = host, key
        self.shape, self.dtype = tuple(shape), np.dtype(dtype)
        self.__flowjit_resident__ = host.device

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        value = self.host.fetch(self.key)
        return value if dtype is None else value.astype(dtype)

    def __repr__(self) -> str:
        return f"<ResidentArray {self.dtype}{list(self.shape)} on {self.host.device}>"

    def __del__(self) -> None:
        try:
            self.host.release(self.key)
        except Exception:  # noqa: BLE001 - the cluster or Ray may be gone at interpreter exit
            pass


class TaskHost:
    """The caller's side of a task's device: compiles partitions there, starts their runs,
    moves values to and from it (the runtime's ``RemoteHost``)."""

    def __init__(self, device: str, task: str, actor: Any, peers: dict[str, Any], timeout: float):
        self.device, self.task, self.actor, self.peers, self.timeout = device, task, actor, peers, timeout
        self._handles: weakref.WeakValueDictionary[str, ResidentArray] = weakref.WeakValueDictionary()
        self.closed = False

    def _get(self, ref: Any, what: str) -> Any:
        try:
            return ray.get(ref, timeout=self.timeout + 5.0)
        except ray.exceptions.GetTimeoutError as e:
            raise RemoteStepError(f"{what}: {self.task} did not answer within {self.timeout:g} s") from e
        except ray.exceptions.RayTaskError as e:
            raise _cause(e) from None
        except ray.exceptions.RayActorError as e:
            raise RemoteStepError(f"{what}: {self.task} is gone ({type(e).__name__})") from e

    def compile(self, function: Function) -> tuple[str, list[Any]]:
        """Send the partition's IR text to the task, which compiles it once; its id there, and
        the source a restarted task compiles it from again."""
        text = print_function(function)
        part_id = hashlib.sha256(text.encode()).hexdigest()[:20]
        prepare = (part_id, text, os.environ.get("FLOWJIT_BACKEND"), False, self.peers)
        self._get(self.actor.prepare_partition.remote(*prepare), f"compiling {function.name} on {self.task}")
        return part_id, [ray.put(prepare)]  # in a list: Ray passes the reference, not the value

    def run(self, compiled: tuple[str, list[Any]], step: str, args: Sequence[Any],
            early: dict[str, Any] | None = None) -> Future:
        """Start one step of the partition ``compiled`` (its recvs of ``early``'s keys given
        those values); a Future of its results."""
        sent = [_Resident(a.key) if isinstance(a, ResidentArray) and a.host is self else a for a in args]
        ref = self.actor.run_partition.remote(*compiled, step, sent, self.timeout, early or None)
        out: Future = Future()

        def finish(f: Future) -> None:
            try:
                results = f.result()
            except ray.exceptions.RayTaskError as e:
                out.set_exception(_cause(e))
            except ray.exceptions.RayActorError as e:
                out.set_exception(RemoteStepError(f"step {step}: {self.task} is gone ({type(e).__name__}): {e}"))
            except BaseException as e:  # noqa: BLE001 - handed to the caller through the future
                out.set_exception(e)
            else:
                out.set_result([self._handle(x) if isinstance(x, _ResidentResult) else x for x in results])

        ref.future().add_done_callback(finish)
        return out

    def _handle(self, r: _ResidentResult) -> ResidentArray:
        # One handle per key: the variable's old handle is its new one (updated in place).
        h = self._handles.get(r.key)
        if h is None:
            h = self._handles[r.key] = ResidentArray(self, r.key, r.shape, r.dtype)
        return h

    def push(self, step: str, key: str, value: Any) -> None:
        """Hand ``value`` to the task's recv of ``key`` (no wait: the task's recv waits)."""
        self.actor.deliver.remote(step, key, np.asarray(value))

    def pull(self, step: str, key: str) -> np.ndarray:
        """The value the task's send of ``key`` made for this process, waiting for it."""
        return np.asarray(self._get(self.actor.take.remote(step, key, self.timeout), f"recv {key!r} from {self.task}"))

    def cancel(self, step: str, why: str) -> None:
        """Cancel ``step`` on the task."""
        self.actor.cancel_step.remote(step, why)

    def fetch(self, key: str) -> np.ndarray:
        """The array the task holds under ``key``."""
        if self.closed:
            raise RemoteStepError(f"the value lives on {self.task}, whose cluster is closed")
        return self._get(self.actor.resident_value.remote(key), f"reading a value held by {self.task}")

    def release(self, key: str) -> None:
        """Let the task forget ``key``."""
        if not self.closed and ray.is_initialized():
            self.actor.free_resident.remote([key])


def _cause(e: Any) -> BaseException:
    """The exception a task raised, out of Ray's wrapper (with its notes: task, op, line)."""
    cause = getattr(e, "cause", None)
    return cause if isinstance(cause, BaseException) else RemoteStepError(str(e))
