"""Placement: give every op a device.

``placement(fn, target)`` guarantees, for the top-level ops of ``fn``:

- an op the user placed (``with fj.device(...)``: its ``device`` is set when traced) keeps
  that device, which must exist and be able to run it, else PlacementError names the op,
  its line, the device and the devices that would work;
- a Variable stays where it was created: on the device of the ``fj.device`` block it was
  created in (``fn.arg_devices``), else on ``target.default`` (or, when that device cannot
  run its updates, the first device that can); an op reading it elsewhere gets a copy
  (partition's send/recv), never moves it;
- an update of a variable (a ``stateful`` op such as ``assign``) runs on the variable's
  device, wherever the block it was written in says (as TensorFlow runs an op on a
  resource where the resource lives): the new value is computed where its ops are placed
  and copied over; ops reading a variable that the user did not place go to its device;
- a constant the user did not place goes where its first reader runs (the partition
  pass copies it to any other reader's device, never sends it): having no inputs to move,
  it never drags its readers to a faster device;
- every other op goes, among the devices able to run it, where a simple cost model says:
  seconds to move its inputs from where they are (bytes over the link) plus seconds to
  compute it on that device (its work over the device's speed), plus, for a result the
  function returns, seconds to move it back to the default device, where the caller gets
  it; ties go to the device most of its input bytes are on, then to the default;
- an op owning blocks (cond, while, scan) runs on one device with everything inside it;
- arguments live on ``target.default`` unless ``fn.arg_devices`` says otherwise;
- with ``target.soft`` (TensorFlow's ``allow_soft_placement``), a device named for an op
  or a variable that does not exist or cannot run it is a wish, not an order: the op goes
  to the cheapest device that can run it, and a variable whose updates its device cannot
  run lives, with its updates, on the first device that can (its readers still run where
  they were placed); without it, PlacementError as above.

An unplaced op that would follow the variable it reads to a device that cannot run it
goes where the cost model says instead (following is the pass's preference, never the
user's order).

Where there are only CPU devices, a program with no placed op, no placed variable and the
default device ``cpu:0`` is returned as it is: every op stays unannotated (the
executable's device); with a GPU, the cost model sends heavy work there. Which devices
exist and which can run an op is the caller's knowledge (``DeviceTarget``), so this pass
never reaches into a backend.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from flowjit.ir.core import Function, Op, Value
from flowjit.ir.errors import FlowjitError
from flowjit.ir.printer import format_loc


class PlacementError(FlowjitError):
    """An op placed on a device that does not exist or cannot run it, or conflicting
    colocation constraints."""


# Rough speeds for the cost model: elements of work per second per device kind, and
# bytes per second between two devices (plus a fixed latency per transfer).
DEFAULT_SPEED = {"cpu": 1e9, "cuda": 5e10}
LINK_BYTES_PER_S = 1e10
TRANSFER_LATENCY_S = 2e-5
# Between the host and a GPU: pageable NumPy memory over PCIe. Measured on an H200 machine
# (bench/results/h200-2026-11-30-cuda.md, gelu_host): 128 MB in and out in 33-36 ms.
HOST_GPU_BYTES_PER_S = 4e9
# Between processes (devices of different tasks, /job:ps/task:0/cpu:0): an RPC, and a copy
# through the object store.
TASK_LINK_BYTES_PER_S = 1e9
TASK_TRANSFER_LATENCY_S = 5e-4


@dataclass(frozen=True)
class DeviceTarget:
    """What placement may choose from: the devices that exist, the default one (where
    arguments live and where unplaced work goes absent a better choice), and whether a
    device can run an op (the backends' answer). ``soft``: a named device that is missing
    or cannot run an op is overridden instead of raising PlacementError (see the module
    docstring)."""

    devices: tuple[str, ...]
    default: str = "cpu:0"
    feasible: Callable[[Op, str], bool] = lambda op, device: True
    speed: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_SPEED))
    soft: bool = False


def _where(op: Op) -> str:
    return f" at {format_loc(op.loc)}" if op.loc is not None else ""


def device_kind(device: str) -> str:
    """The kind of ``device`` ("cpu", "cuda"): the last component of a task's device name
    names it (/job:ps/task:0/cpu:0 is a cpu)."""
    return device.rpartition("/")[2].split(":")[0]



def _task(device: str) -> str:
    return device.rpartition("/")[0]


def _move_seconds(nbytes: int, src: str, dst: str) -> float:
    if _task(src) != _task(dst):
        return nbytes / TASK_LINK_BYTES_PER_S + TASK_TRANSFER_LATENCY_S
    if (device_kind(src) == "cpu") != (device_kind(dst) == "cpu"):
        return nbytes / HOST_GPU_BYTES_PER_S + TRANSFER_LATENCY_S
    return nbytes / LINK_BYTES_PER_S + TRANSFER_LATENCY_S


def _nbytes(v: Value) -> int:
    return v.type.size * v.type.dtype.itemsize


def _work(op: Op) -> float:
    """Elements of work: the results' sizes, times the contracted size for a library op."""
    n = sum(r.type.size for r in op.results)
    if op.primitive.kind == "opaque" and op.inputs and op.inputs[0].type.shape:
        n *= op.inputs[0].type.shape[-1]
    return float(n)


def _explicit_device(op: Op) -> str | None:
    """The device the user gave ``op`` or, for an op owning blocks, any op inside it."""
    if op.device:
        return op.device
    for b in op.blocks:
        for inner in b.walk():
            if inner.device:
                return inner.device
    return None


def placement(fn: Function, target: DeviceTarget) -> Function:
    """Set the device of every op of ``fn`` (see the module docstring)."""
    explicit = {op.id: _explicit_device(op) for op in fn.body.ops}
    placed_args = any(fn.arg_devices)
    only_cpus = all(device_kind(d) == "cpu" for d in target.devices)
    if not placed_args and not any(explicit.values()) and target.default == "cpu:0" and only_cpus:
        return fn

    def runs(op: Op, device: str) -> bool:
        return device in target.devices and target.feasible(op, device)

    def check(op: Op, device: str, why: str, variable: str | None = None) -> None:
        able = [d for d in target.devices if target.feasible(op, d)]
        # An update cannot move off its variable: the fix is where the variable is created.
        fix = f"; create Variable {variable} under fj.device({able[0]!r})" if variable and able else ""
        if device not in target.devices:
            raise PlacementError(f"{op.name}{_where(op)} is placed on {device} ({why}), which does not exist; "
                                 f"devices that can run it: {', '.join(able) or 'none'}{fix}")
        if not target.feasible(op, device):
            raise PlacementError(f"{op.name}{_where(op)} is placed on {device} ({why}), which has no kernel "
                                 f"for it; devices that can run it: {', '.join(able) or 'none'}{fix}")

    updates: dict[int, list[Op]] = {}
    for op in fn.body.ops:
        if op.primitive.kind == "stateful" and op.inputs:
            updates.setdefault(op.inputs[0].id, []).append(op)

    def home(a: Value, var: bool, d: str | None) -> str:
        # A variable that names no device (or, soft, names one that cannot hold it) lives
        # on the default one, unless that device cannot update it (no CUDA assign): then
        # where its updates can run, the host first.
        mine = updates.get(a.id, []) if var else []
        if d and not (target.soft and (d not in target.devices or not all(runs(u, d) for u in mine))):
            return d
        if all(runs(u, target.default) for u in mine):
            return target.default
        able = [t for t in target.devices if all(target.feasible(u, t) for u in mine)]
        return able[0] if able else target.default

    fn.arg_devices = [home(a, var, d) for a, var, d in zip(fn.args, fn.is_var, fn.arg_devices)]
    var_device = {a.id: d for a, var, d in zip(fn.args, fn.is_var, fn.arg_devices) if var}
    for a, d in zip(fn.args, fn.arg_devices):
        if d not in target.devices:
            raise PlacementError(f"argument %{a.name} lives on {d}, which does not exist; "
                                 f"devices: {', '.join(target.devices)}")
    device_of = {a.id: d for a, d in zip(fn.args, fn.arg_devices)}  # value id -> device holding it
    returned = {v.id for v in fn.returns}
    # Constants nobody placed follow their readers, so they are placed after them.
    following = [op for op in fn.body.ops if op.primitive.kind == "constant" and not op.inputs
                 and not op.blocks and not explicit[op.id]]
    free = {r.id for op in following for r in op.results}
    later = {op.id for op in following}

    for op in fn.body.ops:
        if op.id in later:
            continue
        want = explicit[op.id]
        updated = op.inputs[0] if op.primitive.kind == "stateful" and op.inputs else None
        variable = None
        if updated is not None and updated.id in var_device:
            variable = updated.name or "%?"
            want, why = var_device[updated.id], f"with Variable {variable}"
        elif want:
            why = "fj.device"
        else:
            why = ""
            reads = [var_device[v.id] for v in op.inputs if v.id in var_device and runs(op, var_device[v.id])]
            if reads:
                want, why = reads[0], "with the Variable it reads"
        if want and (variable or not target.soft or runs(op, want)):
            check(op, want, why, variable)
        else:
            want = _cheapest(op, device_of, target, free, returned)
        _set_device(op, want)
        for r in op.results:
            device_of[r.id] = want
    if following:
        top = {inner.id: t for t in fn.body.ops for b in t.blocks for inner in b.walk()}
        order = {t.id: k for k, t in enumerate(fn.body.ops)}
        for op in following:
            _place_with_readers(op, top, order, target)
    return fn


def _place_with_readers(op: Op, top: dict[int, Op], order: dict[int, int], target: DeviceTarget) -> None:
    """Put constant ``op`` on the device of the first top-level op reading it (``top``: the
    top-level op owning each nested op, which reads it for the ops inside; ``order``: each
    top-level op's position); read by no op, on the default device. Readers on other devices
    get a copy of it from the partition pass, never a transfer."""
    readers = sorted((top.get(user.id, user) for user, _ in op.result.uses), key=lambda t: order[t.id])
    op.device = (readers[0].device if readers else None) or target.default


def _cheapest(op: Op, device_of: dict[int, str], target: DeviceTarget, free: set[int] = frozenset(),
              returned: set[int] = frozenset()) -> str:
    """The feasible device where moving the inputs (those in ``free`` follow the op) plus
    computing the op, plus moving its results in ``returned`` to the default device, costs
    least."""
    here: dict[str, int] = {}
    for v in op.inputs:
        if v.id in free:
            continue
        d = device_of.get(v.id, target.default)
        here[d] = here.get(d, 0) + _nbytes(v)
    candidates = [d for d in dict.fromkeys([*here, target.default, *target.devices]) if target.feasible(op, d)]
    if not candidates:
        raise PlacementError(f"{op.name}{_where(op)}: no device of {', '.join(target.devices)} can run it")
    work = _work(op)
    home = sum(_nbytes(r) for r in op.results if r.id in returned)

    def cost(d: str) -> tuple[float, int, int]:
        move_s = sum(_move_seconds(n, src, d) for src, n in here.items() if src != d)
        if home and d != target.default:
            move_s += _move_seconds(home, d, target.default)
        compute_s = work / target.speed.get(device_kind(d), DEFAULT_SPEED["cpu"])
        return (move_s + compute_s, -here.get(d, 0), d != target.default)

    return min(candidates, key=cost)


def _set_device(op: Op, device: str) -> None:
    op.device = device
    for b in op.blocks:
        for inner in b.walk():
            inner.device = device
