"""``merge_loops``: one loop where two run the same steps on the same inputs.

Reverse mode through a scan runs its body forward a second time, in a scan that also stacks
the residuals its reverse pass reads (``flowjit.ir.loop_residuals``); that scan returns the
original's results first. CSE cannot merge the two (ops owning blocks are never merged,
and their results differ), so the forward loop would run twice per training step. This
pass finds, in each block, two loop ops (primitives declaring a ``loop``) of the same
primitive with the same inputs and attributes where every block of one computes the other
block's results as its first results, and keeps only the larger: its first results stand
for the smaller one's.

Blocks are compared structurally: block arguments by position, ops by primitive,
attributes (as CSE compares them), device, result types and inputs (in any order for a
commutative primitive). Impure ops and ops owning blocks inside the loops match nothing,
so loops holding them are never merged.

Guarantees: the program computes the same values bit for bit (the kept loop's first
results come from the same ops applied to the same values); when the larger loop comes
second it moves up to the smaller one's place, where all its inputs (the same values) are
defined; loops with side effects are never merged; the smaller loop is erased, nothing
else is created or reordered. Loops nested in blocks are handled inside out.
"""

from __future__ import annotations

from typing import Any

from flowjit.ir.core import Block, Function, Op
from flowjit.passes.cse import attr_key
from flowjit.passes.prune import has_side_effects


def merge_loops(fn: Function) -> Function:
    """Merge loops that run the same steps on the same inputs (see the module docstring)."""
    _merge_in_block(fn.body)
    return fn


def _numbering(block: Block, table: dict[Any, int]) -> dict[int, int]:
    """A number per value of ``block``, equal for two values of blocks numbered with the
    same ``table`` exactly when the same ops compute them from the same arguments."""
    num: dict[int, int] = {}
    for i, a in enumerate(block.args):
        num[a.id] = table.setdefault(("arg", i, a.type), len(table))
    for op in block.ops:
        if op.blocks or not op.primitive.pure or any(v.id not in num for v in op.inputs):
            for r in op.results:
                num[r.id] = table.setdefault(("unique", r.id), len(table))
            continue
        ins = [num[v.id] for v in op.inputs]
        if op.primitive.commutative:
            ins.sort()
        key = (op.primitive.name, tuple(ins), tuple(sorted((k, attr_key(v)) for k, v in op.attrs.items())),
               op.device, tuple(r.type for r in op.results))
        for j, r in enumerate(op.results):
            num[r.id] = table.setdefault((key, j), len(table))
    return num


def _extends(big: Op, small: Op) -> bool:
    """Whether ``big`` computes ``small``'s results as its first results."""
    if (big.primitive is not small.primitive or len(big.results) < len(small.results)
            or [v.id for v in big.inputs] != [v.id for v in small.inputs]
            or len(big.blocks) != len(small.blocks)
            or {k: attr_key(v) for k, v in big.attrs.items()} != {k: attr_key(v) for k, v in small.attrs.items()}
            or [r.type for r in big.results[:len(small.results)]] != [r.type for r in small.results]):
        return False
    for bb, sb in zip(big.blocks, small.blocks):
        if len(bb.returns) < len(sb.returns):
            return False
        table: dict[Any, int] = {}
        nb, ns = _numbering(bb, table), _numbering(sb, table)
        if any(nb[x.id] != ns[y.id] for x, y in zip(bb.returns, sb.returns)):
            return False
    return True


def _merge_in_block(block: Block) -> None:
    for op in block.ops:
        for b in op.blocks:
            _merge_in_block(b)
    loops = [op for op in block.ops if op.primitive.loop is not None and not has_side_effects(op)]
    gone: set[int] = set()
    for i, first in enumerate(loops):
        for second in loops[i + 1:]:
            if id(first) in gone or id(second) in gone:
                continue
            if _extends(second, first):
                block.ops.remove(second)
                block.ops.insert(block.ops.index(first), second)
                _replace(block, first, second)
                gone.add(id(first))
            elif _extends(first, second):
                _replace(block, second, first)
                gone.add(id(second))


def _replace(block: Block, old: Op, new: Op) -> None:
    """Point every use of ``old``'s results at ``new``'s first results and erase ``old``."""
    mapping = {r.id: n for r, n in zip(old.results, new.results)}
    for r, n in zip(old.results, new.results):
        r.replace_all_uses_with(n)
    block.set_returns([mapping.get(v.id, v) for v in block.returns])
    block.erase(old)
