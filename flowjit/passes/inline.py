"""Inline the ops that only carry a derivative rule or a remat region.

Once tracing is over, every derivative has been emitted as ordinary ops, so:

- an op whose role is ``custom_vjp`` is nothing but its primal outputs: its results are
  pointed at the matching inputs and it is erased (its bwd block goes with it; the
  residual ops nothing else reads are left for ``prune``);
- a ``name_tag`` (``fj.checkpoint_name``) is its input;
- a ``call`` (``fj.remat``) is its block's ops, cloned in its place.

``inline_calls`` runs first in the pipeline and does all of it except the ``call`` ops
that recompute a forward inside a backward with ``prevent_cse`` set: those stay opaque
through CSE, which would otherwise merge the recomputation with the forward ops it
repeats (and keep the forward's values alive until the backward, the memory remat is
there to save). ``inline_remat`` inlines them after the pipeline's last CSE, then prunes
what a recomputation computed that nothing reads (the cotangent of an input nothing
differentiates). Either way the Function computes the same results.
"""

from __future__ import annotations

from collections.abc import Callable

from flowjit.ir.core import Block, Function, Op, Value, clone_ops_into
from flowjit.passes.prune import prune


def _replace(block: Block, op: Op, values: list[Value]) -> None:
    """Point every use of ``op``'s results (and the block's returns) at ``values``, then erase it."""
    for r, v in zip(op.results, values):
        r.replace_all_uses_with(v)
    block.set_returns([values[r.index] if r.producer is op else r for r in block.returns])
    block.erase(op)


def _inline_call(block: Block, op: Op) -> None:
    scratch = Block()
    outs = clone_ops_into(op.blocks[0], scratch, list(op.inputs))
    at = block.ops.index(op)
    for k, new in enumerate(scratch.ops):
        block.insert(at + k, new)
    _replace(block, op, outs)


def _inline_block(block: Block, wanted: Callable[[Op], bool]) -> int:
    count = 0
    for op in list(block.ops):
        for b in op.blocks:
            count += _inline_block(b, wanted)
        if not wanted(op):
            continue
        role = op.primitive.role
        if role == "custom_vjp":
            _replace(block, op, op.inputs[:op.attrs["num_out"]])
        elif role == "name_tag":
            _replace(block, op, op.inputs[:1])
        else:
            _inline_call(block, op)
        count += 1
    return count


def _late(op: Op) -> bool:
    return op.primitive.role == "call" and op.attrs["recompute"] and op.attrs["prevent_cse"]


def _early(op: Op) -> bool:
    return op.primitive.role in ("custom_vjp", "name_tag", "call") and not _late(op)


def inline_calls(fn: Function) -> Function:
    """``fn`` with every ``custom_vjp`` op and ``name_tag`` replaced by its inputs and every
    ``call`` but the recomputations CSE must not see replaced by its block, at any depth."""
    _inline_block(fn.body, _early)
    return fn


def inline_remat(fn: Function) -> Function:
    """``fn`` with the remaining ``call`` ops (recomputations with ``prevent_cse``) replaced by
    their blocks, at any depth, then pruned; unchanged when there are none."""
    if not _inline_block(fn.body, _late):
        return fn
    return prune(fn)
