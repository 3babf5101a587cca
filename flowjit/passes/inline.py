"""Inline the ops that only carry a user's derivative rule (role ``custom_vjp``).

Once tracing is over, every derivative has been emitted as ordinary ops, so an op whose
role is ``custom_vjp`` is nothing but its primal outputs: ``inline_calls`` points each use
of its results at the matching input and erases it (its bwd block goes with it; the
residual ops nothing else reads are left for ``prune``). It runs first in the pipeline,
so simplify, CSE and fusion see only ordinary ops. The Function computes the same results.
"""

from __future__ import annotations

from flowjit.ir.core import Block, Function


def _inline_block(block: Block) -> None:
    for op in list(block.ops):
        for b in op.blocks:
            _inline_block(b)
        if op.primitive.role != "custom_vjp":
            continue
        outs = op.inputs[:op.attrs["num_out"]]
        for r, v in zip(op.results, outs):
            r.replace_all_uses_with(v)
        block.set_returns([outs[r.index] if r.producer is op else r for r in block.returns])
        block.erase(op)


def inline_calls(fn: Function) -> Function:
    """``fn`` with every ``custom_vjp`` op, at any depth, replaced by its primal outputs."""
    _inline_block(fn.body)
    return fn
