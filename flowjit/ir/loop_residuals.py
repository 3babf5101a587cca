"""Which values of a loop step's forward computation the reverse pass saves, and which it
computes again.

A scan's VJP runs each step's body backwards inside a reverse scan. The body's forward
values that its VJP reads (a gate's activation, the state entering the step, the product
of two matrices) either come from the forward scan, stacked there as extra outputs
(*residuals*), or are computed again in the reverse step. ``choose_residuals`` decides,
with the policy JAX's ``dots_saveable`` remat and cuDNN's RNNs share: what cheap
elementwise and layout ops make (one pass over memory, and fused into the reverse step's
kernel) is computed again, from the values that are expensive to make (products,
reductions, loops, anything else) or that only the forward pass has (the carry entering
the step), which are saved. A cheap op that combines saved values used nowhere else into
a result no larger than they are is saved in their place (the pre-activation ``x @ Wx +
h @ Wh + b`` is one saved array, not two products).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from flowjit.ir.core import Block, Op, Value

# Kinds of ops the reverse step computes again rather than saves: one pass over memory
# each, fused into the reverse step's kernels.
RECOMPUTED_KINDS = frozenset({"elementwise", "layout", "constant"})


@dataclass
class Residuals:
    """``saved``: the values of the reverse block the forward scan stacks for it, in block
    order; ``kept``: the ids of the ops the reverse block keeps: those on cotangents and
    the primal ones it computes again (it drops the others, whose values are saved or
    unused)."""

    saved: list[Value]
    kept: set[int]


def _recomputable(op: Op) -> bool:
    return op.primitive.kind in RECOMPUTED_KINDS and not op.blocks and op.primitive.pure


def _nbytes(v: Value) -> int:
    n = v.type.dtype.itemsize
    for d in v.type.shape:
        n *= d
    return n


def choose_residuals(block: Block, primal_args: Iterable[Value], free_args: Iterable[Value]) -> Residuals:
    """The residuals of ``block``, a reverse step whose arguments are the forward step's
    carry (``primal_args``: only the forward pass has them), the step's scanned slices and
    loop constants (``free_args``: the reverse step has them too) and cotangents (the rest).
    A value is *primal* when it is computed from primal and free arguments alone; the
    primal values that the cotangent computation reads (or the block returns) must be
    there, saved or computed again (see the module docstring)."""
    free = {v.id for v in free_args}
    primal = {v.id for v in primal_args} | free
    for op in block.ops:
        if all(v.id in primal for v in op.inputs) and op.primitive.pure:
            primal.update(r.id for r in op.results)
    frontier: dict[int, Value] = {}
    for op in block.ops:
        if not all(r.id in primal for r in op.results):
            for v in op.inputs:
                if v.id in primal:
                    frontier.setdefault(v.id, v)
    for v in block.returns:
        if v.id in primal:
            frontier.setdefault(v.id, v)

    def resolve(saved: dict[int, Value]) -> tuple[dict[int, Value], set[int]]:
        """The values to save (``saved`` kept) and the ops computed again, for the frontier."""
        out = dict(saved)
        again: set[int] = set()
        seen: set[int] = set()
        stack = list(frontier.values())
        while stack:
            v = stack.pop()
            if v.id in seen or v.id in free or v.id in out:
                continue
            seen.add(v.id)
            op = v.producer
            if op is None or not _recomputable(op):
                out[v.id] = v
                continue
            again.add(op.id)
            stack.extend(op.inputs)
        return out, again

    saved, again = resolve({})
    # Save one combined value instead of the saved values only it reads.
    changed = True
    while changed:
        changed = False
        readers: dict[int, set[int]] = {}
        for op in block.ops:
            if op.id in again or not all(r.id in primal for r in op.results):
                for v in op.inputs:
                    readers.setdefault(v.id, set()).add(op.id)
        returned = {v.id for v in block.returns}
        for op in block.ops:
            if op.id not in again or len(op.results) != 1 or op.primitive.kind != "elementwise":
                continue
            inputs = [v for v in op.inputs if v.id in saved]
            others_free = all(v.id in saved or v.id in free or
                              (v.producer is not None and not v.producer.inputs and _recomputable(v.producer))
                              for v in op.inputs)
            if not inputs or not others_free:
                continue
            if any(readers.get(v.id) != {op.id} or v.id in returned for v in inputs):
                continue
            if _nbytes(op.result) > sum(_nbytes(v) for v in inputs):
                continue
            kept = {i: v for i, v in saved.items() if all(i != x.id for x in inputs)}
            kept[op.result.id] = op.result
            saved, again = resolve(kept)
            changed = True
            break
    order = {v.id: i for i, v in enumerate(_values_in_order(block))}
    kept = again | {op.id for op in block.ops if not all(r.id in primal for r in op.results)}
    return Residuals(sorted(saved.values(), key=lambda v: order[v.id]), kept)


def _values_in_order(block: Block) -> Sequence[Value]:
    out = list(block.args)
    for op in block.ops:
        out.extend(op.results)
    return out
