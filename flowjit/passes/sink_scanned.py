"""``sink_scanned``: the expensive work a scan's step does only to produce a stacked output,
done for every step at once after the loop.

The reverse scan of an RNN's gradient computes each step's input gradient ``dx_t = dz_t @
Wx.T`` only to stack it: nothing else in the step reads it. All the steps' products are
then one product of the stacked ``dz``, ``dZ @ Wx.T``, a GEMM of ``length`` times the rows
(near the BLAS's peak, where each step's small product runs at a fraction of it). The loop
stacks the values that product reads instead (``dz_t``), and the product runs after it.
This is ``hoist_scanned`` turned around.

An op of a scan's body *only feeds outputs* when it is pure, owns no blocks and every use
of its results is by such ops or as a stacked output (never the carry). The pass sinks the
ops that only feed outputs and are of an expensive kind (``opaque``: products, convolutions,
linear algebra), with the ops that only feed outputs downstream of them; what they read
from the step (values computed in it, or the carry entering it) becomes a new stacked
output, scanned inputs and loop constants are read from the loop's own inputs. After the
loop the sunk ops run batched over the steps with their vmap rules
(``flowjit.ir.batching``); their stacked outputs replace the loop's.

Guarantees: the program computes the same values (a batched op computes, at each step's
index, what the op computed in that step, and a stacked output holds each step's value at
its index whichever way the loop runs); the carry and every op the carry depends on are
untouched; a scan whose sunk work a vmap rule cannot batch is left as it is. Loops nested
in blocks are handled inside out.
"""

from __future__ import annotations

from flowjit.ir.builder import Builder
from flowjit.ir.core import Block, Function, Op, Value
from flowjit.ir.errors import BatchingError
from flowjit.ir.types import TensorType
from flowjit.passes.batching import batch_block
from flowjit.passes.hoist import rewrite_loops
from flowjit.passes.hoist_scanned import EXPENSIVE_KINDS
from flowjit.passes.prune import prune


def sink_scanned(fn: Function) -> Function:
    """Sink each scan's expensive output-only work out of the loop (see the module docstring);
    then prune, since a sunk output nothing reads (the gradient of data) dies with its stack."""
    rewrite_loops(fn.body, _sink_loop)
    return prune(fn)


def _sink_loop(block: Block, scan: Op) -> None:
    loop = scan.primitive.loop
    if loop.scanned is None or len(scan.blocks) != 1:
        return
    (body,) = scan.blocks
    k, first = loop.num_carry(scan.attrs), loop.first_constant(scan.attrs)
    carried = {v.id for v in body.returns[:k]}
    stacked = {v.id for v in body.returns[k:]}
    # Ops that only feed stacked outputs, found from the last op back.
    feeds: set[int] = set()
    members: dict[int, Op] = {}
    for op in reversed(body.ops):
        if op.blocks or not op.primitive.pure or not op.inputs:
            continue
        if all(r.id not in carried and all(id(u) in members for u, _ in r.uses)
               and (r.uses or r.id in stacked) for r in op.results):
            members[id(op)] = op
            feeds.update(r.id for r in op.results)
    # The expensive ones and those downstream of them.
    sunk: dict[int, Op] = {}
    for op in body.ops:
        if id(op) in members and (op.primitive.kind in EXPENSIVE_KINDS
                                  or any(v.producer is not None and id(v.producer) in sunk for v in op.inputs)):
            sunk[id(op)] = op
    if not any(op.primitive.kind in EXPENSIVE_KINDS for op in sunk.values()):
        return
    ops = [op for op in body.ops if id(op) in sunk]
    made = {r.id for op in ops for r in op.results}
    position = {a.id: i for i, a in enumerate(body.args)}
    # What the sunk ops read from outside themselves: a scanned slice or a loop constant (the
    # loop's own input), a literal constant (copied), or a value of the step (stacked anew).
    reads: list[Value] = []
    for op in ops:
        for v in op.inputs:
            if v.id not in made and all(v is not r for r in reads):
                reads.append(v)
    literals = [v for v in reads if v.producer is not None and not v.producer.inputs]
    fresh = [v for v in reads if v not in literals and not (k <= position.get(v.id, -1))]
    outputs = [i for i, v in enumerate(body.returns[k:]) if v.id in made]
    sub_args = [v for v in reads if v not in literals]
    sub = Block([Value(v.type, name=v.name) for v in sub_args])
    mapping = {v.id: a for v, a in zip(sub_args, sub.args)}
    for v in literals:
        op = v.producer
        c = Op(op.primitive, [], op.attrs, [r.type for r in op.results], op.device, op.loc)
        mapping.update({r.id: cr for r, cr in zip(op.results, c.results)})
        sub.append(c)
    for op in ops:
        c = Op(op.primitive, [mapping[v.id] for v in op.inputs], op.attrs, [r.type for r in op.results],
               op.device, op.loc)
        mapping.update({r.id: cr for r, cr in zip(op.results, c.results)})
        sub.append(c)
    sub.set_returns([mapping[body.returns[k + i].id] for i in outputs])
    # Batched over the steps first, on stand-ins for the stacks the loop will make, so a
    # scan whose sunk ops no vmap rule batches is left untouched.
    length = scan.results[k + outputs[0]].type.shape[0]   # the steps: a stacked output's leading axis
    stand_in = {v.id: Value(TensorType((length, *v.type.shape), v.type.dtype), name=v.name) for v in fresh}
    inputs = [stand_in[v.id] if v.id in stand_in else scan.inputs[position[v.id]] for v in sub_args]
    scratch = Block()
    try:
        outs, batched = batch_block(sub, scratch, inputs, [v.id in stand_in or position[v.id] < first
                                                           for v in sub_args])
    except BatchingError:
        outs, batched = [], [False]
    if not all(batched) or len(outs) != len(outputs):
        for op in scratch.ops:
            op.drop_inputs()
        return
    # The loop, stacking what the sunk ops read from the step instead of their outputs.
    kept = [i for i in range(len(body.returns) - k) if i not in outputs]
    body.set_returns([*body.returns[:k], *(body.returns[k + i] for i in kept), *fresh])
    for op in reversed(ops):
        body.erase(op)
    outer = Builder(block, index=block.ops.index(scan), loc=scan.loc, device=scan.device)
    new = outer.emit(scan.primitive, list(scan.inputs), scan.attrs, blocks=scan.blocks)
    for v, made_stack in zip(fresh, new[k + len(kept):]):
        stand_in[v.id].replace_all_uses_with(made_stack)
    at = block.ops.index(new[0].producer) + 1
    for i, op in enumerate(scratch.ops):
        block.insert(at + i, op)
    replaced = {**{i: new[i] for i in range(k)}, **{k + i: new[k + j] for j, i in enumerate(kept)},
                **{k + i: out for i, out in zip(outputs, outs)}}
    for i, old in enumerate(scan.results):
        old.replace_all_uses_with(replaced[i])
    block.set_returns([replaced[scan.results.index(v)] if v in scan.results else v for v in block.returns])
    scan.blocks = []
    block.erase(scan)
