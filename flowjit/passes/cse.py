"""Common subexpression elimination.

``cse(fn)`` merges ops that compute the same thing. Two ops are equal when they have the
same primitive, the same inputs (the same SSA values; for a ``commutative`` primitive in
any order), equal attributes (compared exactly: ``0.0`` and ``-0.0`` differ, NaNs equal
bit for bit; array literals by dtype, shape and bytes, so equal constants merge), the
same device and the same result types. The source location is not compared: the kept op
is the first one, with its own location.

Guarantees:

* every op that is equal to an earlier op *dominating* it is erased and its results are
  replaced everywhere (uses and block returns) by the earlier op's results. An op
  dominates another when it comes before it in the same block. Nested blocks are isolated
  from above (they see only their own arguments; see ``Primitive`` and the verifier), so
  each block is deduplicated on its own: nothing inside a block is replaced by an op
  outside it, nor the other way round, nor across sibling blocks;
* ops of impure primitives (``not prim.pure``: random draws, stateful updates) and ops
  owning blocks are never merged nor used as replacements; the ops inside their blocks
  are still deduplicated, within the scopes above;
* no op is created, moved or reordered; function and block arguments are untouched;
  ops that become dead are not erased beyond the merged duplicates (``prune`` does that);
* one run reaches a fixed point: chains of duplicates (``a+b`` twice, then ``exp`` of
  each) merge fully, so running ``cse`` again changes nothing.

The Function computes exactly (bit for bit) the same results afterwards, since merged ops
apply the same deterministic primitive to the same values.
"""

from __future__ import annotations

from typing import Any

from flowjit.ir.core import Block, Function, Op, Value


def attr_key(v: Any) -> Any:
    """A hashable key equal for two attribute values exactly when they are interchangeable.

    Floats are keyed by their bits (``0.0`` vs ``-0.0``, NaN == NaN); tuples elementwise;
    a ``Literal`` by itself (its equality is dtype, shape and bytes); the type is part of
    the key so ``True``, ``1`` and ``1.0`` stay apart.
    """
    if isinstance(v, float):
        return (float, v.hex())
    if isinstance(v, (tuple, list)):
        return (type(v), tuple(attr_key(x) for x in v))
    return (type(v), v)


def _op_key(op: Op, position: dict[int, int]) -> tuple[Any, ...]:
    ins = [v.id for v in op.inputs]
    if op.primitive.commutative:
        ins.sort(key=lambda i: position[i])
    attrs = tuple(sorted((k, attr_key(v)) for k, v in op.attrs.items()))
    return (op.primitive, tuple(ins), attrs, op.device,
            tuple(r.type for r in op.results))


def _mergeable(op: Op) -> bool:
    return op.primitive.pure and not op.blocks


class _Cse:
    def __init__(self) -> None:
        # Program-order position of every value seen so far: the stable key that orders
        # the inputs of commutative ops.
        self.position: dict[int, int] = {}
        self.replaced: dict[int, Value] = {}
        self.dead: list[Op] = []
        self.blocks: list[Block] = []

    def see(self, v: Value) -> None:
        self.position.setdefault(v.id, len(self.position))

    def run_block(self, block: Block) -> None:
        # Blocks are isolated from above: each has its own table of ops seen so far.
        table: dict[tuple[Any, ...], Op] = {}
        self.blocks.append(block)
        for a in block.args:
            self.see(a)
        for op in block.ops:
            for v in op.inputs:  # values defined outside this function (never in verified IR)
                self.see(v)
            for b in op.blocks:
                self.run_block(b)
            if _mergeable(op):
                key = _op_key(op, self.position)
                rep = table.get(key)
                if rep is not None:
                    for r, new in zip(op.results, rep.results):
                        r.replace_all_uses_with(new)
                        self.replaced[r.id] = new
                    self.dead.append(op)
                    continue
                table[key] = op
            for r in op.results:
                self.see(r)


def cse(fn: Function) -> Function:
    """Merge every pure, block-free op into an equal op that dominates it (see module doc)."""
    state = _Cse()
    state.run_block(fn.body)
    if not state.dead:
        return fn
    for block in state.blocks:
        if any(v.id in state.replaced for v in block.returns):
            block.set_returns([state.replaced.get(v.id, v) for v in block.returns])
    dead = {id(op) for op in state.dead}
    for op in state.dead:
        op.drop_inputs()
    for block in state.blocks:
        if any(id(op) in dead for op in block.ops):
            kept = [op for op in block.ops if id(op) not in dead]
            block.ops[:] = kept
    for op in state.dead:
        op.parent = None
    return fn
