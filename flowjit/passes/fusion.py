"""Fusion: group elementwise, layout and reduction ops into ``fusion`` ops, one kernel each.

Guarantees, on a Function without nested blocks (nested blocks are left untouched):
- every op whose primitive kind is ``elementwise``, ``layout`` or ``reduction`` ends up
  inside exactly one ``fusion`` op; scalar constants they use are copied into each
  kernel that needs them; other ops (``opaque`` matmul/conv/gather, ``random``,
  ``stateful``, ``control``, large constants) stay outside;
- a group never needs its own result as an input (no cycles): an op joins the group of
  its users only when *all* its uses are in that group (or are returned);
- within a group every reduction has the same input shape (the group's loop shape) and
  the same axes, so "reduce, broadcast back, elementwise" chains such as softmax and
  layer norm become one kernel, and every op's result is no larger than that shape;
- a group never spans two devices; the fusion op keeps its ops' device;
- the program computes exactly what it computed before (the fusion op runs its block).
Each fusion op is named after its ops in program order and lists the user lines it came
from (``lines``), and sits where its last op stood.
"""

from __future__ import annotations

import math
from collections import defaultdict

from flowjit.ir.builder import Builder
from flowjit.ir.core import Block, Function, Op, Value

FUSIBLE_KINDS = ("elementwise", "layout", "reduction")
MAX_NAME_PARTS = 6


def _is_scalar_constant(op: Op) -> bool:
    return op.primitive.kind == "constant" and op.results[0].type.size <= 1


class _Group:
    """Ops being fused, with the loop shape and reduction axes every member must fit."""

    def __init__(self, root: Op):
        self.ops: list[Op] = []
        self.loop_size = 0
        self.reduce_shape: tuple[int, ...] | None = None
        self.reduce_axes: tuple[int, ...] | None = None
        self.device = root.device
        self.add(root)

    def accepts(self, op: Op) -> bool:
        if op.device != self.device:
            return False
        if op.primitive.kind == "reduction":
            shape = op.inputs[0].type.shape
            axes = _axes_of(op)
            if self.reduce_shape is None:
                return math.prod(shape) >= self.loop_size
            return shape == self.reduce_shape and axes == self.reduce_axes
        size = max([op.results[0].type.size] + [v.type.size for v in op.inputs])
        return size <= self.loop_size

    def add(self, op: Op) -> None:
        self.ops.append(op)
        if op.primitive.kind == "reduction":
            self.reduce_shape = op.inputs[0].type.shape
            self.reduce_axes = _axes_of(op)
        sizes = [r.type.size for r in op.results] + [v.type.size for v in op.inputs]
        self.loop_size = max([self.loop_size, *sizes])


def _axes_of(op: Op) -> tuple[int, ...]:
    """The axes a reduction reduces, normalized; from whichever axis attribute it declares."""
    ndim = len(op.inputs[0].type.shape)
    if "axes" in op.attrs:
        return tuple(sorted(a % ndim for a in op.attrs["axes"]))
    return (op.attrs["axis"] % ndim,)


def fusion(fn: Function) -> Function:
    """Group fusible ops of ``fn``'s body into ``fusion`` ops (see the module docstring)."""
    block = fn.body
    returned = {v.id for v in block.returns}
    group_of: dict[int, _Group] = {}
    groups: list[_Group] = []
    for op in reversed(block.ops):
        if op.primitive.kind not in FUSIBLE_KINDS or op.blocks:
            continue
        users = {id(u) for r in op.results for u, _ in r.uses}
        user_groups = {id(group_of[u]) if u in group_of else None for u in users}
        candidate = group_of.get(next(iter(users))) if len(user_groups) == 1 and None not in user_groups else None
        if candidate is not None and candidate.accepts(op):
            candidate.add(op)
            group_of[id(op)] = candidate
        else:
            g = _Group(op)
            groups.append(g)
            group_of[id(op)] = g
    for g in groups:
        _outline(fn, g, returned)
    _drop_unused_scalar_constants(block)
    return fn


def _outline(fn: Function, group: _Group, returned: set[int]) -> None:
    """Replace the ops of ``group`` with one fusion op owning them."""
    block = fn.body
    members = set(map(id, group.ops))
    position = {id(op): i for i, op in enumerate(block.ops)}
    ops = sorted(group.ops, key=lambda op: position[id(op)])
    inputs: list[Value] = []
    seen: set[int] = set()
    for op in ops:
        for v in op.inputs:
            producer = v.producer
            inside = producer is not None and id(producer) in members
            scalar_const = producer is not None and _is_scalar_constant(producer)
            if not inside and not scalar_const and v.id not in seen:
                seen.add(v.id)
                inputs.append(v)
    outputs = [r for op in ops for r in op.results
               if r.id in returned or any(id(u) not in members for u, _ in r.uses)]

    body = Block([Value(v.type, name=v.name) for v in inputs])
    mapping = {v.id: a for v, a in zip(inputs, body.args)}
    inner = Builder(body)
    for op in ops:
        for v in op.inputs:
            if v.id not in mapping:  # a scalar constant: copy it into the kernel
                (c,) = inner.emit(v.producer.primitive, [], v.producer.attrs, loc=v.producer.loc)
                mapping[v.id] = c
        results = inner.emit(op.primitive, [mapping[v.id] for v in op.inputs], op.attrs, loc=op.loc)
        for r, nr in zip(op.results, results):
            mapping[r.id] = nr
    body.set_returns([mapping[r.id] for r in outputs])

    last = ops[-1]
    outer = Builder(block, loc=ops[0].loc, device=last.device, index=position[id(last)] + 1)
    new = outer.emit("fusion", inputs, {"name": _name(ops), "lines": _lines(ops)}, blocks=[body])
    for old, nv in zip(outputs, new):
        old.replace_all_uses_with(nv)
        block.set_returns([nv if v is old else v for v in block.returns])
    for op in reversed(ops):
        block.erase(op)


def _name(ops: list[Op]) -> str:
    names = list(dict.fromkeys(op.name for op in ops))
    if len(names) > MAX_NAME_PARTS:
        return "_".join(names[:MAX_NAME_PARTS]) + f"_and_{len(names) - MAX_NAME_PARTS}_more"
    return "_".join(names)


def _lines(ops: list[Op]) -> str:
    by_file: dict[str, set[int]] = defaultdict(set)
    for op in ops:
        if op.loc is not None:
            by_file[str(op.loc).rsplit(":", 1)[0]].add(op.loc.line)
    return " ".join(f"{f}:{','.join(map(str, sorted(lines)))}" for f, lines in by_file.items())


def _drop_unused_scalar_constants(block: Block) -> None:
    returned = {v.id for v in block.returns}
    for op in reversed(list(block.ops)):
        if _is_scalar_constant(op) and not op.results[0].uses and op.results[0].id not in returned:
            block.erase(op)
