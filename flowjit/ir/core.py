"""The SSA graph: ``Value``, ``Op``, ``Block`` and ``Function``.

Every Value is defined exactly once, by an Op or as a Block argument, and knows its
uses, so passes can replace a value everywhere in O(uses). An Op carries its primitive,
inputs, static attributes, results, an optional device and the user's source line.
Blocks own ops in program order; nested blocks (control flow, fusion) hang off ops.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from flowjit.ir.printer import print_function
from flowjit.ir.types import TensorType

if TYPE_CHECKING:
    from flowjit.ir.registry import Primitive

_ids = itertools.count()


@dataclass(frozen=True)
class SourceLoc:
    """The user's source line an op came from."""

    file: str
    line: int

    def __str__(self) -> str:
        return f"{os.path.basename(self.file)}:{self.line}"


class Value:
    """An SSA value: defined once (by ``producer`` or as a block argument), used many times."""

    __slots__ = ("type", "producer", "index", "uses", "name", "id")

    def __init__(self, type: TensorType, producer: Op | None = None, index: int = 0,
                 name: str | None = None):
        self.type = type
        self.producer = producer
        self.index = index
        self.uses: list[tuple[Op, int]] = []
        self.name = name
        self.id = next(_ids)

    @property
    def shape(self) -> tuple[int, ...]:
        return self.type.shape

    @property
    def dtype(self):
        return self.type.dtype

    def replace_all_uses_with(self, other: Value) -> None:
        """Point every use of this value at ``other`` instead."""
        for op, i in list(self.uses):
            op.set_input(i, other)

    def __repr__(self) -> str:
        return f"Value({self.name or self.id}: {self.type})"


class Op:
    """One operation: ``results = primitive(inputs) {attrs}`` on ``device``."""

    __slots__ = ("primitive", "inputs", "attrs", "results", "device", "loc", "blocks", "parent", "id")

    def __init__(self, primitive: Primitive, inputs: list[Value], attrs: dict[str, Any],
                 result_types: list[TensorType], device: str | None = None,
                 loc: SourceLoc | None = None, blocks: list[Block] | None = None):
        self.primitive = primitive
        self.inputs: list[Value] = []
        self.attrs = dict(attrs)
        self.results = [Value(t, self, i) for i, t in enumerate(result_types)]
        self.device = device
        self.loc = loc
        self.blocks = list(blocks or [])
        self.parent: Block | None = None
        self.id = next(_ids)
        for v in inputs:
            self._add_input(v)

    @property
    def name(self) -> str:
        return self.primitive.name

    @property
    def result(self) -> Value:
        (r,) = self.results
        return r

    def _add_input(self, v: Value) -> None:
        v.uses.append((self, len(self.inputs)))
        self.inputs.append(v)

    def set_input(self, i: int, v: Value) -> None:
        """Replace input ``i`` with ``v``, keeping both values' use lists right."""
        old = self.inputs[i]
        old.uses.remove((self, i))
        self.inputs[i] = v
        v.uses.append((self, i))

    def drop_inputs(self) -> None:
        """Remove this op from its inputs' use lists (before erasing it)."""
        for i, v in enumerate(self.inputs):
            v.uses.remove((self, i))
        self.inputs = []

    def __repr__(self) -> str:
        return f"Op({self.name}, {[r.type for r in self.results]})"


class Block:
    """A straight-line list of ops with arguments and returned values."""

    def __init__(self, args: list[Value] | None = None):
        self.args: list[Value] = list(args or [])
        self.ops: list[Op] = []
        self.returns: list[Value] = []

    def append(self, op: Op) -> Op:
        op.parent = self
        self.ops.append(op)
        return op

    def insert(self, index: int, op: Op) -> Op:
        """Insert ``op`` at position ``index`` of this block."""
        op.parent = self
        self.ops.insert(index, op)
        return op

    def erase(self, op: Op) -> None:
        """Remove ``op``, whose results must be unused, and drop it from its inputs' uses."""
        for r in op.results:
            if r.uses or any(v is r for v in self.returns):
                raise ValueError(f"cannot erase {op.name}: its result is still used")
        op.drop_inputs()
        self.ops.remove(op)
        op.parent = None

    def set_returns(self, values: list[Value]) -> None:
        self.returns = list(values)

    def walk(self) -> Iterator[Op]:
        """Every op of this block and of the blocks nested in its ops, in program order."""
        for op in self.ops:
            yield op
            for b in op.blocks:
                yield from b.walk()


class Function:
    """A named top-level block: the unit the tracer produces and the compiler consumes.

    ``is_var[i]`` marks argument ``i`` as a Variable the function may update in place;
    ``arg_devices[i]`` is the device argument ``i`` lives on (None: the function's default
    device; a Variable created under ``fj.device`` lives there); ``donated[i]``, argument
    ``i`` as donated (``fj.function(donate_argnums=...)``): a compiled program may write a
    result over its array.
    """

    def __init__(self, name: str, body: Block, is_var: list[bool] | None = None,
                 arg_devices: list[str | None] | None = None, donated: list[bool] | None = None):
        self.name = name
        self.body = body
        self.is_var = list(is_var) if is_var is not None else [False] * len(body.args)
        self.arg_devices = list(arg_devices) if arg_devices is not None else [None] * len(body.args)
        self.donated = list(donated) if donated is not None else [False] * len(body.args)

    @property
    def args(self) -> list[Value]:
        return self.body.args

    @property
    def returns(self) -> list[Value]:
        return self.body.returns

    @property
    def arg_types(self) -> list[TensorType]:
        return [a.type for a in self.body.args]

    @property
    def result_types(self) -> list[TensorType]:
        return [v.type for v in self.body.returns]

    def walk(self) -> Iterator[Op]:
        return self.body.walk()

    def clone(self) -> Function:
        """A deep copy: new Values and Ops with the same types, attrs, devices and locations."""
        mapping: dict[int, Value] = {}
        return Function(self.name, _clone_block(self.body, mapping), list(self.is_var), list(self.arg_devices),
                        list(self.donated))

    def __str__(self) -> str:
        return print_function(self)

    def __repr__(self) -> str:
        args = ", ".join(map(str, self.arg_types))
        results = ", ".join(map(str, self.result_types))
        return f"Function(@{self.name}: ({args}) -> ({results}))"


def _clone_block(block: Block, mapping: dict[int, Value]) -> Block:
    new = Block([Value(a.type, name=a.name) for a in block.args])
    new.set_returns(clone_ops_into(block, new, new.args, mapping))
    return new


def free_values(ops: Sequence[Op], returns: Sequence[Value] = ()) -> list[Value]:
    """The Values that ``ops`` (and the blocks nested in them) read, or ``returns`` names,
    without defining them, in first-use order: what a region built apart needs from
    outside it before it can be moved into another block (as captures)."""
    defined: set[int] = set()
    free: dict[int, Value] = {}

    def visit(ops: Sequence[Op]) -> None:
        for op in ops:
            for v in op.inputs:
                if v.id not in defined:
                    free.setdefault(v.id, v)
            for b in op.blocks:
                defined.update(a.id for a in b.args)
                visit(b.ops)
                for v in b.returns:
                    if v.id not in defined:
                        free.setdefault(v.id, v)
            defined.update(r.id for r in op.results)

    visit(ops)
    for v in returns:
        if v.id not in defined:
            free.setdefault(v.id, v)
    return list(free.values())


def clone_ops_into(block: Block, dest: Block, args: list[Value], mapping: dict[int, Value] | None = None
                   ) -> list[Value]:
    """Append copies of ``block``'s ops to ``dest``, with ``block``'s arguments replaced by
    ``args``; return what ``block`` returns, as values of ``dest`` (inlining a block)."""
    mapping = {} if mapping is None else mapping
    for a, b in zip(block.args, args):
        mapping[a.id] = b
    for op in block.ops:
        clone_op_into(op, dest, mapping)
    return [mapping.get(v.id, v) for v in block.returns]


def clone_op_into(op: Op, dest: Block, mapping: dict[int, Value]) -> Op:
    """Append to ``dest`` a copy of ``op`` (its blocks copied too) reading ``mapping``'s
    value in place of each input it maps (others as they are); map ``op``'s results to the
    copy's. Returns the copy."""
    # Nested blocks may use values of this block, so map inputs first, then clone blocks.
    inputs = [mapping.get(v.id, v) for v in op.inputs]
    blocks = [_clone_block(b, mapping) for b in op.blocks]
    c = Op(op.primitive, inputs, op.attrs, [r.type for r in op.results], op.device, op.loc, blocks)
    for r, cr in zip(op.results, c.results):
        mapping[r.id] = cr
    dest.append(c)
    return c
