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

An *accumulator* is a carry the step only adds to (``c = c + m``, with any elementwise op a
reduction folds with): a weight's gradient summed over the steps, ``dW += h_t.T @ dz_t``.
When its summand ``m`` is such sunk work, the carry becomes a loop constant and after the
loop ``c = c0 + sum_t m_t``; a sum of products is one product of the steps' rows joined
along the contracted axis (``[p, T*r] @ [T*r, q]``, one GEMM where the loop ran T small ones;
when each step's left matrix is a transpose, ``h_t.T``, the left operand is the stack's rows
``[T*r, p]`` transposed, which the BLAS reads in place).

Guarantees: the program computes the same values (a batched op computes, at each step's
index, what the op computed in that step, and a stacked output holds each step's value at
its index whichever way the loop runs), except that an accumulator's terms are added in
another order (floats may differ in the last bits, as any reassociating compiler's); every
other carry and every op it depends on are untouched; a scan whose sunk work a vmap rule
cannot batch is left as it is. Loops nested in blocks are handled inside out.
"""

from __future__ import annotations

import re
from typing import Any

from flowjit.ir.builder import Builder
from flowjit.ir.core import Block, Function, Op, Value
from flowjit.ir.registry import all_primitives
from flowjit.ir.types import TensorType
from flowjit.passes.hoist import rewrite_loops
from flowjit.passes.hoist_scanned import EXPENSIVE_KINDS, batched_over_steps
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
    accumulators = _accumulators(body, k)        # carry index -> (the update op, its summand)
    updates = {id(op) for op, _ in accumulators.values()}
    carried = {v.id for v in body.returns[:k]}
    stacked = {v.id for v in body.returns[k:]} | {m.id for _, m in accumulators.values()}
    # Ops that only feed stacked outputs (or an accumulator's summand), from the last op back.
    members: dict[int, Op] = {}
    for op in reversed(body.ops):
        if op.blocks or not op.primitive.pure or not op.inputs or id(op) in updates:
            continue
        if all(r.id not in carried and all(id(u) in members or id(u) in updates for u, _ in r.uses)
               and (r.uses or r.id in stacked) for r in op.results):
            members[id(op)] = op
    # The expensive ones and those downstream of them.
    sunk: dict[int, Op] = {}
    for op in body.ops:
        if id(op) in members and (op.primitive.kind in EXPENSIVE_KINDS
                                  or any(v.producer is not None and id(v.producer) in sunk for v in op.inputs)):
            sunk[id(op)] = op
    if not any(op.primitive.kind in EXPENSIVE_KINDS for op in sunk.values()):
        return
    # And the ops only they read (a transpose of the step's slice): batched, no stack of it.
    for op in reversed(body.ops):
        if id(op) in members and id(op) not in sunk and all(r.uses and all(id(u) in sunk for u, _ in r.uses)
                                                              for r in op.results):
            sunk[id(op)] = op
    ops = [op for op in body.ops if id(op) in sunk]
    made = {r.id for op in ops for r in op.results}
    position = {a.id: i for i, a in enumerate(body.args)}
    length = _length(scan, k, first)
    if length is None:
        return
    # What the sunk ops read from the step (not a scanned slice, a loop constant or a
    # literal) is stacked anew: batched first on stand-ins for those stacks, so a scan whose
    # sunk ops no vmap rule batches is left untouched.
    fresh: list[Value] = []
    for op in ops:
        for v in op.inputs:
            literal = v.producer is not None and not v.producer.inputs
            if v.id not in made and position.get(v.id, -1) < k and not literal and all(v is not f for f in fresh):
                fresh.append(v)
    outputs = [i for i, v in enumerate(body.returns[k:]) if v.id in made]
    sums = [i for i, (_, m) in accumulators.items() if m.id in made]
    stand_in = {v.id: Value(TensorType((length, *v.type.shape), v.type.dtype), name=v.name) for v in fresh}

    def source(v: Value) -> tuple[Value, bool]:
        if v.id in stand_in:
            return stand_in[v.id], True
        return scan.inputs[position[v.id]], position[v.id] < first
    batched = batched_over_steps(ops, [*(body.returns[k + i] for i in outputs), *(accumulators[i][1] for i in sums)],
                                 source)
    if batched is None:
        return
    scratch, outs = batched
    # The loop, stacking what the sunk ops read from the step instead of their outputs; an
    # accumulator passes its carry through, its summands summed after the loop.
    kept = [i for i in range(len(body.returns) - k) if i not in outputs]
    staying = [i for i in range(k) if i not in sums]
    body.set_returns([*(body.returns[i] for i in staying), *(body.returns[k + i] for i in kept), *fresh])
    how = {i: (accumulators[i][0].primitive, accumulators[i][0].attrs,
               accumulators[i][0].inputs[0] is body.args[i]) for i in sums}
    for i in sums:
        body.erase(accumulators[i][0])
    for op in reversed(ops):
        body.erase(op)
    # An accumulator's carry now enters and leaves each step unchanged: a loop constant.
    moved = [body.args[i] for i in sums]
    body.args[:] = [a for i, a in enumerate(body.args) if i not in sums] + moved
    inputs = [v for i, v in enumerate(scan.inputs) if i not in sums] + [scan.inputs[i] for i in sums]
    k2 = len(staying)
    at = block.ops.index(scan)
    outer = Builder(block, index=at, loc=scan.loc, device=scan.device)
    new = outer.emit(scan.primitive, inputs, {**scan.attrs, loop.carry: k2}, blocks=scan.blocks)
    for v, made_stack in zip(fresh, new[k2 + len(kept):]):
        stand_in[v.id].replace_all_uses_with(made_stack)
    for j, op in enumerate(scratch.ops):
        block.insert(at + 1 + j, op)
    after = Builder(block, index=at + 1 + len(scratch.ops), loc=scan.loc, device=scan.device)
    totals = {i: _sum_over_steps(after, how[i], scan.inputs[i], out) for i, out in zip(sums, outs[len(outputs):])}
    carried_on = {i: new[j] for j, i in enumerate(staying)}
    replaced = {**{i: totals[i] if i in totals else carried_on[i] for i in range(k)},
                **{k + i: new[k2 + j] for j, i in enumerate(kept)},
                **{k + i: out for i, out in zip(outputs, outs)}}
    for i, old in enumerate(scan.results):
        old.replace_all_uses_with(replaced[i])
    block.set_returns([replaced[scan.results.index(v)] if v in scan.results else v for v in block.returns])
    scan.blocks = []
    block.erase(scan)


def _accumulators(body: Block, k: int) -> dict[int, tuple[Op, Value]]:
    """The carries a step only adds to: carry ``i`` whose next value is ``c op m`` with ``op``
    an elementwise op some reduction folds with (``reduce_sum``'s ``acc + v`` for ``a + b``),
    the carry read by nothing else and its next value by nothing but the loop. Maps ``i`` to
    the op and the summand ``m``."""
    found: dict[int, tuple[Op, Value]] = {}
    returned = {v.id for v in body.returns}
    for i in range(k):
        arg, new = body.args[i], body.returns[i]
        op = new.producer
        if op is None or _folding(op.primitive) is None or len(op.inputs) != 2 or arg not in op.inputs:
            continue
        m = op.inputs[1] if op.inputs[0] is arg else op.inputs[0]
        if m is arg or len(arg.uses) != 1 or new.uses or len(m.uses) != 1 or m.id in returned \
                or m.type != arg.type or sum(v is new for v in body.returns) != 1:
            continue
        found[i] = (op, m)
    return found


def _folding(p: Any) -> Any:
    """The reduction primitive that folds values with elementwise primitive ``p``: the one
    whose ``reducer`` combines ``acc`` and ``v`` as ``p``'s template combines ``a`` and ``b``."""
    if p.kind != "elementwise" or not isinstance(p.template, str) or not p.commutative:
        return None
    combine = re.sub(r"\bb\b", "v", re.sub(r"\ba\b", "acc", p.template))
    for r in all_primitives():
        if r.kind == "reduction" and r.reducer is not None and r.reducer[1] == combine:
            return r
    return None


def _length(scan: Op, k: int, first: int) -> int | None:
    """The number of steps: a scanned input's or a stacked result's leading axis."""
    for v in [*scan.inputs[k:first], *scan.results[k:]]:
        return v.type.shape[0]
    return None


def _sum_over_steps(b: Builder, update: tuple[Any, dict, bool], carry: Value, summands: Value) -> Value:
    """``carry op (sum of summands over their leading axis)`` after the loop (``update``: the
    op's primitive, attributes and whether the carry was its first operand); a sum of
    products ``a_t @ c_t`` is one product of the steps' rows joined (``_stacked_product``)."""
    prim, attrs, carry_first = update
    total = _stacked_product(b, summands)
    if total is None:
        total = b.op(_folding(prim).name, summands, axes=(0,))
    return b.emit(prim, [carry, total] if carry_first else [total, carry], attrs)[0]


def _stacked_product(b: Builder, summands: Value) -> Value | None:
    """``sum_t a_t @ c_t`` as one product when ``summands`` is the batched product of two
    stacks [T, p, r] and [T, r, q] (an accumulator of matrix products, as a weight's gradient
    over the steps): [p, T*r] @ [T*r, q], the steps' rows joined along the contracted axis
    (the left one a transpose read in place when each ``a_t`` is a transposed matrix)."""
    op = summands.producer
    if op is None or op.primitive.role != "matrix_product" or summands.type.ndim != 3:
        return None
    x, y = op.inputs
    if x.type.ndim != 3 or y.type.ndim != 3:
        return None
    t, p, r = x.type.shape
    q = y.type.shape[2]
    made = x.producer
    if made is not None and made.primitive.role == "permute_axes" and tuple(made.attrs["perm"]) == (0, 2, 1):
        # Each step's matrix transposed (h_t.T of a weight's gradient): the joined rows are
        # the stack's rows [T*r, p] transposed, a matrix the BLAS reads in place, where
        # transposing the whole stack [p, T, r] would copy it.
        lhs = b.op("transpose", b.op("reshape", made.inputs[0], shape=(t * r, p)), perm=(1, 0))
    else:
        lhs = b.op("reshape", b.op("transpose", x, perm=(1, 0, 2)), shape=(p, t * r))
    return b.op(op.primitive.name, lhs, b.op("reshape", y, shape=(t * r, q)))
