"""The devices a program can run on: ``cpu:0``, virtual CPUs and CUDA GPUs.

``cpu:0`` always exists. ``FLOWJIT_CPU_DEVICES=N`` makes N CPU devices ``cpu:0`` ..
``cpu:N-1`` (as XLA's host device count does): each runs its part of a program on its own
thread, single-threaded, so partitioning and concurrency are testable without a GPU.
``cuda:K`` is listed for each GPU the CUDA backend finds (``flowjit.codegen_cuda``).
The list is read when asked, so a test may change the variable before it traces.

Devices of other processes. A task of a cluster (``fj.distributed``) runs programs in a
process of its own; its device is named as in TensorFlow, ``/job:ps/task:1/cpu:0``
(``/job:ps/task:1`` and ``/job:ps/replica:0/task:1/device:CPU:0`` name it too). Those
names exist while a cluster has registered them (``register_remote_devices``), with the
``RemoteHost`` that runs a partition there; this layer never imports the cluster's engine.
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from functools import cache
from typing import Any, Protocol

from flowjit.ir.core import Function, Op
from flowjit.ir.errors import FlowjitError
from flowjit.passes.placement import DeviceTarget
from flowjit.runtime.code_generators import code_generator

_NAME = re.compile(r"(cpu|cuda):(\d+)")
# /job:<job>[/replica:<r>]/task:<t>[/<device>]: TensorFlow's full device names.
_TASK = re.compile(r"/job:([a-z_][a-z0-9_-]*)(?:/replica:\d+)?/task:(\d+)(?:/(.*))?")


class DeviceError(FlowjitError):
    """A device name that is malformed or names no device of this process."""


@dataclass(frozen=True)
class Device:
    """One device: its kind (``cpu`` or ``cuda``), index and, for a device of another
    process, its task (``/job:ps/task:1``); ``str()`` is its name."""

    kind: str
    index: int
    task: str | None = None

    @property
    def name(self) -> str:
        local = f"{self.kind}:{self.index}"
        return f"{self.task}/{local}" if self.task else local

    def __str__(self) -> str:
        return self.name

    def __eq__(self, other: object) -> bool:
        if isinstance(other, str):
            # A bare kind names index 0, as fj.device("cpu") does; NumPy's arrays say "cpu".
            return self.name == other or (other == self.kind and self.index == 0 and self.task is None)
        return isinstance(other, Device) and (self.kind, self.index, self.task) == (other.kind, other.index, other.task)

    def __hash__(self) -> int:
        return hash(self.name)


def cpu_device_count() -> int:
    """How many CPU devices there are: ``FLOWJIT_CPU_DEVICES`` (at least 1)."""
    raw = os.environ.get("FLOWJIT_CPU_DEVICES", "1").strip() or "1"
    try:
        n = int(raw)
    except ValueError:
        raise DeviceError(f"FLOWJIT_CPU_DEVICES={raw!r} is not a number of devices") from None
    if n < 1:
        raise DeviceError(f"FLOWJIT_CPU_DEVICES={n}: there is always at least cpu:0")
    return n


def _cuda_names() -> list[str]:
    if _no_cuda_possible():
        return []
    try:
        from flowjit.codegen_cuda.memory import cuda_devices
    except ImportError:  # numba-cuda (the `cuda` extra) is not installed
        return []
    return list(cuda_devices())


def _no_cuda_possible() -> bool:
    """True when the CUDA backend would surely list no device: numba is not loaded (so its
    simulator cannot be on but by the environment), the simulator is not asked for, and
    cupy, which a real GPU needs, is not installed. Then the backend is not imported at all
    (3 ms of every process's first compile)."""
    if "numba" in sys.modules or os.environ.get("NUMBA_ENABLE_CUDASIM", "0").strip() not in ("", "0"):
        return False
    return not _cupy_installed()


@cache
def _cupy_installed() -> bool:
    # Looked up once: the search of sys.path took 0.28 ms of every trace.
    return importlib.util.find_spec("cupy") is not None


def devices() -> list[Device]:
    """Every device: this process's, CPUs first (``[cpu:0, ...]`` then ``[cuda:0, ...]``),
    then those of the registered remote tasks."""
    out = [Device("cpu", i) for i in range(cpu_device_count())]
    out += [parse_device(n) for n in _cuda_names()]
    out += [parse_device(n) for n in _remote_hosts]
    return out


def device_names() -> tuple[str, ...]:
    """The names of ``devices()``."""
    return tuple(d.name for d in devices())


def parse_device(name: object) -> Device:
    """``"cpu:1"``, ``"cuda"`` (index 0) or a ``Device`` as a Device; DeviceError otherwise.
    The name need not exist (``check_device`` says whether it does)."""
    if isinstance(name, Device):
        return name
    if not isinstance(name, str):
        raise DeviceError(f"a device is named by a string such as 'cpu:1', got {type(name).__name__}")
    task = None
    if name.strip().lower().startswith("/job:"):
        m = _TASK.fullmatch(name.strip().lower())
        if m is None:
            raise DeviceError(f"{name!r} is not a device name; a task's device is named like '/job:ps/task:0' "
                              "or '/job:worker/task:1/cpu:0'")
        local = parse_device(m.group(3) or "cpu:0")
        if local.kind != "cpu":
            raise DeviceError(f"{name!r}: a task's devices are its CPU ('/job:{m.group(1)}/task:{m.group(2)}/cpu:0'); "
                              "GPUs of other processes are not supported yet")
        return Device(local.kind, local.index, f"/job:{m.group(1)}/task:{m.group(2)}")
    text = name.strip().lower().lstrip("/")
    text = text.removeprefix("device:")
    if text in ("cpu", "cuda", "gpu"):
        text += ":0"
    text = text.replace("gpu:", "cuda:")
    m = _NAME.fullmatch(text)
    if m is None:
        raise DeviceError(f"{name!r} is not a device name; devices are named like 'cpu:0', 'cpu:1', 'cuda:0'")
    return Device(m.group(1), int(m.group(2)), task)


def check_device(name: object) -> Device:
    """The existing device named ``name``, or DeviceError listing the devices there are."""
    d = parse_device(name)
    names = device_names()
    if d.name not in names:
        hint = " (set FLOWJIT_CPU_DEVICES=N for N virtual CPU devices)" if d.kind == "cpu" else ""
        if d.task:
            hint = (" (a task's device exists while its fj.distributed.Cluster is open)" if not _remote_hosts else
                    f" (the open cluster's tasks: {', '.join(sorted({parse_device(n).task for n in _remote_hosts}))})")
        raise DeviceError(f"no device {d.name}; the devices are {', '.join(names)}{hint}")
    return d


def feasible(op: Op, device: str) -> bool:
    """Whether ``device`` can run ``op``, as the code generator of its kind says
    (``Backend.why_not``): a CPU runs every op (compiled kernels or the NumPy reference), a
    CUDA device what the CUDA backend can compile; a remote task's device is a CPU's."""
    if device in _remote_hosts:
        return True
    try:
        generator = code_generator(device)
    except ImportError:  # the device kind's backend is not installed (numba-cuda, the cuda extra)
        return False
    return generator.why_not(op) is None


def device_target(default: str | None = None) -> DeviceTarget:
    """The placement target of this process: its devices, ``default`` (``cpu:0`` when
    None; it must exist) and the backends' feasibility."""
    names = device_names()
    chosen = check_device(default).name if default is not None else "cpu:0"
    return DeviceTarget(names, chosen, feasible)


# ---- devices of other processes --------------------------------------------------------

class RemoteHost(Protocol):
    """What runs partitions on a device of another process; a cluster registers one per
    task device (``fj.distributed`` implements it on Ray). A step is named by a string
    that the caller makes unique; each method's waits are bounded by the host's timeout."""

    device: str

    def compile(self, function: Function) -> Any:
        """Compile a partition (placed, partitioned, fused) there, once; a handle for ``run``."""

    def run(self, compiled: Any, step: str, args: Sequence[Any], early: Mapping[str, Any]) -> Future:
        """Start one step of a compiled partition on ``args``, with the values of ``early``
        (key -> value) delivered to its recvs at once; a Future of its results."""

    def push(self, step: str, key: str, value: Any) -> None:
        """Hand ``value`` to that process's ``recv`` of ``key`` in ``step``."""

    def pull(self, step: str, key: str) -> Any:
        """The value that process's ``send`` of ``key`` in ``step`` made for this one."""

    def cancel(self, step: str, why: str) -> None:
        """Cancel ``step`` there: its waiting ``recv``s raise."""


# The registered clusters' hosts, the latest last: a name two open clusters share (both
# have /job:ps/task:0) means the latest one's task until it closes.
_registered: list[Mapping[str, RemoteHost]] = []
_remote_hosts: dict[str, RemoteHost] = {}


def _merge() -> None:
    _remote_hosts.clear()
    for hosts in _registered:
        _remote_hosts.update(hosts)


def register_remote_devices(hosts: Mapping[str, RemoteHost]) -> None:
    """Make the devices ``hosts`` names (``/job:ps/task:0/cpu:0`` -> its host) exist for
    placement and execution, until ``unregister_remote_devices(hosts)``; where an open
    cluster has the same names, these take over until they are unregistered."""
    for name in hosts:
        if parse_device(name).name != name:
            raise DeviceError(f"register_remote_devices: {name!r} is not a canonical task device name")
    _registered.append(hosts)
    _merge()


def unregister_remote_devices(hosts: Mapping[str, RemoteHost]) -> None:
    """Forget the remote devices of ``hosts`` (their cluster closed)."""
    for i, h in enumerate(_registered):
        if h is hosts:
            del _registered[i]
            break
    _merge()


def remote_host(device: str) -> RemoteHost | None:
    """The host of a remote device, or None for a device of this process."""
    return _remote_hosts.get(device)
