"""Partition: cut every edge between devices into a ``send``/``recv`` pair.

``partition(fn)`` takes a placed Function (every top-level op has a device, and
``fn.arg_devices`` says where each argument lives; see ``placement``) and guarantees:

- every value a top-level op on device ``d`` reads is defined on ``d``: a value made on
  another device ``s`` (or an argument living there) reaches ``d`` through ``send {key,
  dst=d} @s`` right after its definition and ``recv {key, src=s} @d`` just before its
  first reader on ``d``; one pair per (value, device), the key unique in the program;
- a constant read on another device is copied there instead (constants are free to
  duplicate and moving them would cost a transfer per call);
- in program order each send comes before its recv, so the partitioned program still
  runs in order on one thread (the interpreter), and split per device it runs on one
  thread per device without deadlock;
- results are left where they are made: the executor collects them from every device.

A program with no device set is returned unchanged. ``split_by_device`` then makes the
per-device subfunctions the executor compiles and runs.
"""

from __future__ import annotations

from dataclasses import dataclass

from flowjit.ir.builder import Builder
from flowjit.ir.core import Block, Function, Value


def _device_of(v: Value, fn: Function, arg_device: dict[int, str | None]) -> str | None:
    if v.producer is not None:
        return v.producer.device
    return arg_device.get(v.id)


def partition(fn: Function) -> Function:
    """Insert send/recv pairs on the cross-device edges of ``fn`` (see the module docstring)."""
    block = fn.body
    if not any(op.device for op in block.ops):
        return fn
    arg_device = {a.id: d for a, d in zip(fn.args, fn.arg_devices)}
    received: dict[tuple[int, str], Value] = {}
    sent_from: dict[int, int] = {}  # value id -> how many sends follow its definition
    count = 0
    for op in list(block.ops):
        dst = op.device
        for i, v in enumerate(op.inputs):
            src = _device_of(v, fn, arg_device)
            if src is None or dst is None or src == dst:
                continue
            local = received.get((v.id, dst))
            if local is None:
                producer = v.producer
                if producer is not None and producer.primitive.kind == "constant":
                    (local,) = Builder.before(op).emit(producer.primitive, [], producer.attrs, loc=producer.loc)
                    local.producer.device = dst
                else:
                    key = f"k{count}"
                    count += 1
                    _emit_send(block, v, key, src, dst, sent_from)
                    (local,) = Builder.before(op).emit(
                        "recv", [], {"key": key, "src": src, "shape": v.type.shape, "dtype": v.type.dtype},
                        loc=op.loc)
                    local.producer.device = dst
                received[(v.id, dst)] = local
            op.set_input(i, local)
    return fn


def _emit_send(block: Block, v: Value, key: str, src: str, dst: str, sent_from: dict[int, int]) -> None:
    """``send v`` on ``src`` right after v's definition (after earlier sends of v, so the
    keys stay in order), or at the top for an argument."""
    if v.producer is not None:
        index = block.ops.index(v.producer) + 1
        loc = v.producer.loc
    else:
        index = 0
        loc = None
    index += sent_from.get(v.id, 0)
    sent_from[v.id] = sent_from.get(v.id, 0) + 1
    b = Builder(block, loc=loc, device=src, index=index)
    b.emit("send", [v], {"key": key, "dst": dst})


@dataclass
class Partition:
    """The part of a partitioned program one device runs: a Function whose arguments are
    the program's arguments living on that device (``arg_positions`` in the program's
    argument list) and whose returns are the program's results it makes
    (``result_positions``)."""

    device: str
    function: Function
    arg_positions: list[int]
    result_positions: list[int]


def split_by_device(fn: Function, default: str) -> list[Partition]:
    """The per-device subfunctions of a partitioned ``fn`` (ops without a device run on
    ``default``), in order of first appearance. ``fn`` is consumed: its ops move into the
    subfunctions' blocks."""
    home = {a.id: d or default for a, d in zip(fn.args, fn.arg_devices)}
    for op in fn.body.ops:
        for r in op.results:
            home[r.id] = op.device or default
    devices = list(dict.fromkeys([*(home[a.id] for a in fn.args), *(op.device or default for op in fn.body.ops)]))
    parts = []
    for d in devices:
        positions = [i for i, a in enumerate(fn.args) if home[a.id] == d]
        body = Block([fn.args[i] for i in positions])
        for op in fn.body.ops:
            if (op.device or default) == d:
                body.append(op)
        results = [k for k, v in enumerate(fn.returns) if home[v.id] == d]
        body.set_returns([fn.returns[k] for k in results])
        sub = Function(f"{fn.name}.{d.replace(':', '')}", body, [fn.is_var[i] for i in positions],
                       [d] * len(positions), [fn.donated[i] for i in positions])
        parts.append(Partition(d, sub, positions, results))
    return parts
