"""The batching pass (``fj.vmap``): a block rewritten to run on a batch of its arguments.

``batch_block`` walks a block's ops in order, mapping each of its Values to a Value of the
enclosing block and whether that Value carries the batch (always at axis 0). An op none of
whose inputs is batched is re-emitted as it is, so what does not depend on the example
(constants, iota, a draw from an unbatched key, work on closed-over weights) is computed
once; an op with a batched input goes through its batching rule (``flowjit.ir.batching``),
which emits ordinary ops. The result is plain IR: it fuses, differentiates and batches
again (nested vmap) like any other. A rule for an op owning blocks (cond, while, scan)
batches them through the hooks of ``_BatchEmitter`` (issue 25 plan, section 2.3).
"""

from __future__ import annotations

from collections.abc import Sequence

from flowjit.ir.batching import batch_op
from flowjit.ir.builder import Builder, Emitter
from flowjit.ir.core import Block, Value
from flowjit.ir.types import TensorType


class _BatchEmitter(Emitter):
    """The Emitter batching rules get here: with the hooks a rule of an op owning blocks
    needs to batch them (this layer's ``batch_block``, which the ir layer cannot import)."""

    def batch_block(self, block: Block, arg_types: Sequence[TensorType],
                    batched: Sequence[bool]) -> tuple[Block, list[bool]]:
        """A new block, with arguments of ``arg_types``, computing ``block`` batched; and
        which of its returns carry the batch."""
        new = Block([Value(t, name=a.name) for t, a in zip(arg_types, block.args)])
        outs, flags = batch_block(block, new, new.args, batched)
        new.set_returns(outs)
        return new, flags

    def batch_inline(self, block: Block, inputs: Sequence[Value],
                     batched: Sequence[bool]) -> tuple[list[Value], list[bool]]:
        """``block`` batched on ``inputs``, its ops appended where this Emitter emits."""
        return batch_block(block, self.builder.block, inputs, batched)


def batch_block(block: Block, outer: Block, inputs: Sequence[Value],
                batched: Sequence[bool]) -> tuple[list[Value], list[bool]]:
    """Append to ``outer`` the ops of ``block`` batched, given ``inputs`` (one Value of
    ``outer`` per argument of ``block``, those with ``batched`` set carrying the batch at
    axis 0) and return the values ``block`` returns with whether each is batched. Ops are
    stamped with their own source line and device, so a rule's ops and its errors point at
    the user's code."""
    if len(inputs) != len(block.args) or len(batched) != len(block.args):
        raise ValueError(f"batch_block: the block has {len(block.args)} arguments, got {len(inputs)} inputs "
                         f"and {len(batched)} batched flags")
    env: dict[int, tuple[Value, bool]] = {a.id: (v, bool(b)) for a, v, b in zip(block.args, inputs, batched)}
    for op in block.ops:
        xs, flags = zip(*(env[v.id] for v in op.inputs)) if op.inputs else ((), ())
        b = Builder(outer, loc=op.loc, device=op.device)
        if any(flags):
            outs, out_batched = batch_op(_BatchEmitter(b), op.primitive, xs, flags, op.attrs, op.loc, op.blocks)
        else:
            # The op's blocks move to the new op: the traced block is consumed by this pass.
            outs, out_batched = b.emit(op.primitive, xs, op.attrs, blocks=op.blocks), [False] * len(op.results)
        for r, v, f in zip(op.results, outs, out_batched):
            env[r.id] = (v, f)
    pairs = [env[v.id] for v in block.returns]
    return [v for v, _ in pairs], [f for _, f in pairs]
