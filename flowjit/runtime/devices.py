"""The devices a program can run on: ``cpu:0``, virtual CPUs and CUDA GPUs.

``cpu:0`` always exists. ``FLOWJIT_CPU_DEVICES=N`` makes N CPU devices ``cpu:0`` ..
``cpu:N-1`` (as XLA's host device count does): each runs its part of a program on its own
thread, single-threaded, so partitioning and concurrency are testable without a GPU.
``cuda:K`` is listed for each GPU the CUDA backend finds (``flowjit.codegen_cuda``).
The list is read when asked, so a test may change the variable before it traces.
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys
from dataclasses import dataclass

from flowjit.ir.core import Op
from flowjit.ir.errors import FlowjitError
from flowjit.passes.placement import DeviceTarget

_NAME = re.compile(r"(cpu|cuda):(\d+)")


class DeviceError(FlowjitError):
    """A device name that is malformed or names no device of this process."""


@dataclass(frozen=True)
class Device:
    """One device: its kind (``cpu`` or ``cuda``) and index; ``str()`` is its name."""

    kind: str
    index: int

    @property
    def name(self) -> str:
        return f"{self.kind}:{self.index}"

    def __str__(self) -> str:
        return self.name

    def __eq__(self, other: object) -> bool:
        if isinstance(other, str):
            return self.name == other
        return isinstance(other, Device) and (self.kind, self.index) == (other.kind, other.index)

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
    return importlib.util.find_spec("cupy") is None


def devices() -> list[Device]:
    """Every device of this process, CPUs first: ``[cpu:0, ...]`` then ``[cuda:0, ...]``."""
    out = [Device("cpu", i) for i in range(cpu_device_count())]
    out += [parse_device(n) for n in _cuda_names()]
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
    text = name.strip().lower().lstrip("/")
    text = text.removeprefix("device:")
    if text in ("cpu", "cuda", "gpu"):
        text += ":0"
    text = text.replace("gpu:", "cuda:")
    m = _NAME.fullmatch(text)
    if m is None:
        raise DeviceError(f"{name!r} is not a device name; devices are named like 'cpu:0', 'cpu:1', 'cuda:0'")
    return Device(m.group(1), int(m.group(2)))


def check_device(name: object) -> Device:
    """The existing device named ``name``, or DeviceError listing the devices there are."""
    d = parse_device(name)
    names = device_names()
    if d.name not in names:
        hint = " (set FLOWJIT_CPU_DEVICES=N for N virtual CPU devices)" if d.kind == "cpu" else ""
        raise DeviceError(f"no device {d.name}; this process has {', '.join(names)}{hint}")
    return d


def feasible(op: Op, device: str) -> bool:
    """Whether ``device`` has a kernel for ``op``: a CPU runs every op (compiled kernels
    or the NumPy reference); a CUDA device what the CUDA backend can compile."""
    if device.startswith("cpu:"):
        return True
    try:
        from flowjit.codegen_cuda import feasible as cuda_feasible
    except ImportError:
        return False
    return bool(cuda_feasible(op))


def device_target(default: str | None = None) -> DeviceTarget:
    """The placement target of this process: its devices, ``default`` (``cpu:0`` when
    None; it must exist) and the backends' feasibility."""
    names = device_names()
    chosen = check_device(default).name if default is not None else "cpu:0"
    return DeviceTarget(names, chosen, feasible)
