"""``hoist_scanned``: the work a scan's step does on its scanned slice alone, done for every
step at once before the loop.

In an RNN's step ``z = x_t @ Wx + h @ Wh``, the product ``x_t @ Wx`` reads only the step's
slice of the scanned input and a loop constant: it does not depend on the carry, so all
the steps' products are one product of the stacked inputs, ``xs @ Wx`` (a GEMM of
``length`` times the rows, which the BLAS and the thread pool run near their peak, where a
step's small product runs at a fraction of it). This is the input projection that cuDNN's
RNNs hoist the same way.

An op of a scan's body is *step-only* when it is pure, owns no blocks, reads at least one
scanned slice (or a step-only value) and otherwise only loop constants and literal
constants. The pass hoists every step-only op of an expensive kind (``opaque``: products,
convolutions, linear algebra) together with the step-only ops that feed it, batched over
the scan's length with their vmap rules (``flowjit.ir.batching``); each of their values
the loop still reads becomes a new scanned input, sliced back per step. Cheap step-only
ops that feed no expensive one stay in the loop, fused into its kernels.

Guarantees: the program computes the same values (a batched op computes, at each step's
index, what the op computed on that step's slice); the carry, the loop's results and
every op that depends on the carry are untouched; a loop whose step-only work a vmap rule
cannot batch is left as it is. Loops nested in blocks are handled inside out.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from flowjit.ir.builder import Builder
from flowjit.ir.core import Block, Function, Op, Value, clone_op_into
from flowjit.ir.errors import BatchingError
from flowjit.passes.batching import batch_block
from flowjit.passes.hoist import rewrite_loops

# Kinds of step-only ops worth a loop of their own over every step.
EXPENSIVE_KINDS = frozenset({"opaque"})


def hoist_scanned(fn: Function) -> Function:
    """Hoist each scan's expensive step-only work out of the loop (see the module docstring)."""
    rewrite_loops(fn.body, _hoist_loop)
    return fn


def _hoist_loop(block: Block, scan: Op) -> None:
    loop = scan.primitive.loop
    if loop.scanned is None or scan.attrs[loop.scanned] == 0 or len(scan.blocks) != 1:
        return
    (body,) = scan.blocks
    k, first = loop.num_carry(scan.attrs), loop.first_constant(scan.attrs)
    scanned = {a.id for a in body.args[k:first]}
    constant = {a.id for a in body.args[first:]}
    literal: set[int] = set()           # results of ops without inputs (constants)
    step_only: set[int] = set()
    for op in body.ops:
        if op.blocks or not op.primitive.pure:
            continue
        ins = [v.id for v in op.inputs]
        if not ins:
            literal.update(r.id for r in op.results)
        elif any(i in scanned or i in step_only for i in ins) and all(
                i in scanned or i in step_only or i in constant or i in literal for i in ins):
            step_only.update(r.id for r in op.results)
    hoisted: list[Op] = []
    wanted: set[int] = set()
    for op in reversed(body.ops):
        results = {r.id for r in op.results}
        if results & step_only and (op.primitive.kind in EXPENSIVE_KINDS or results & wanted):
            hoisted.append(op)
            wanted.update(v.id for v in op.inputs)
    if not any(op.primitive.kind in EXPENSIVE_KINDS for op in hoisted):
        return
    hoisted.reverse()
    members = {id(op) for op in hoisted}
    crossing = [r for op in hoisted for r in op.results
                if any(id(u) not in members for u, _ in r.uses) or any(r is v for v in body.returns)]
    # The hoisted ops batched over the steps into a scratch block, moved before the loop.
    position = {a.id: i for i, a in enumerate(body.args)}
    made = batched_over_steps(hoisted, crossing, lambda v: (scan.inputs[position[v.id]], v.id in scanned))
    if made is None:
        return
    scratch, outs = made
    at = block.ops.index(scan)
    for i, op in enumerate(scratch.ops):
        block.insert(at + i, op)
    # The loop reads each crossing value as a new scanned slice.
    new_args = [Value(r.type, name=r.name) for r in crossing]
    for r, a in zip(crossing, new_args):
        r.replace_all_uses_with(a)
    body.set_returns([new_args[crossing.index(v)] if v in crossing else v for v in body.returns])
    body.args[first:first] = new_args
    for op in reversed(hoisted):
        if not any(r.uses for r in op.results):
            body.erase(op)
    inputs = [*scan.inputs[:first], *outs, *scan.inputs[first:]]
    attrs = {**scan.attrs, loop.scanned: scan.attrs[loop.scanned] + len(outs)}
    outer = Builder(block, index=block.ops.index(scan), loc=scan.loc, device=scan.device)
    new = outer.emit(scan.primitive, inputs, attrs, blocks=scan.blocks)
    for old, nv in zip(scan.results, new):
        old.replace_all_uses_with(nv)
    block.set_returns([new[scan.results.index(v)] if v in scan.results else v for v in block.returns])
    scan.blocks = []
    block.erase(scan)


def batched_over_steps(ops: Sequence[Op], returns: Sequence[Value],
                       source: Callable[[Value], tuple[Value, bool]]) -> tuple[Block, list[Value]] | None:
    """``ops`` of a loop's step (in block order) batched over the steps with their vmap
    rules, for a pass that moves them out of the loop: copied into a block of their own over
    what they read from outside themselves (literal constants copied in; for any other value
    ``source`` gives the value of the enclosing block standing for it and whether that one
    holds every step along axis 0), then batched into a scratch block whose ops the caller
    inserts where it wants. Returns the scratch block and the batched ``returns``, or None,
    leaving nothing behind, when a vmap rule cannot batch them."""
    made = {r.id for op in ops for r in op.results}
    reads: dict[int, Value] = {}
    for op in ops:
        for v in op.inputs:
            if v.id not in made:
                reads.setdefault(v.id, v)
    literals = [v for v in reads.values() if v.producer is not None and not v.producer.inputs]
    args = [v for v in reads.values() if v not in literals]
    sub = Block([Value(v.type, name=v.name) for v in args])
    mapping = {v.id: a for v, a in zip(args, sub.args)}
    for op in [*dict.fromkeys(v.producer for v in literals), *ops]:
        clone_op_into(op, sub, mapping)
    sub.set_returns([mapping[v.id] for v in returns])
    outer = [source(v) for v in args]
    scratch = Block()
    try:
        outs, batched = batch_block(sub, scratch, [v for v, _ in outer], [b for _, b in outer])
    except BatchingError:
        outs, batched = [], [False]
    if not all(batched) or len(outs) != len(returns):
        for op in scratch.ops:
            op.drop_inputs()
        return None
    return scratch, outs
