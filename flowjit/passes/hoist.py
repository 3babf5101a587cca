"""``hoist_invariants``: move loop-invariant ops out of the blocks of loops (``while``,
``scan``: the primitives that declare a ``loop``, see ``flowjit.ir.registry.Loop``).

An op in a loop's block is invariant when each of its inputs is a loop constant (a
block argument the loop passes unchanged every iteration: the trailing inputs after the
carried and scanned ones, as the primitive's ``loop`` declares) or the result of another
invariant op.
Such ops run once, before the loop, in the enclosing block; their results become new
loop constants (new trailing inputs of the loop op, and new arguments of each of its
blocks). Constants an invariant op reads are copied out with it, and stay inside for
the loop's other users: kernels take them as literals.

Guarantees: the program computes the same values (an invariant op computes the same
thing every iteration, and every op is a function of its inputs: random ops take their
keys as inputs); ops owning blocks and ``stateful`` ops are never moved; a loop that
runs zero times now computes the hoisted ops once anyway, which is harmless for pure
ops. Loops nested in blocks are handled inside out.
"""

from __future__ import annotations

from collections.abc import Callable

from flowjit.ir.builder import Builder
from flowjit.ir.core import Block, Function, Op, Value


def hoist_invariants(fn: Function) -> Function:
    """Hoist loop-invariant ops of every loop in ``fn`` (see the module docstring)."""
    rewrite_loops(fn.body, _hoist_loop)
    return fn


def rewrite_loops(block: Block, rewrite: Callable[[Block, Op], None]) -> None:
    """Call ``rewrite(block, loop)`` for every loop op (a primitive declaring a ``loop``) in
    ``block`` and the blocks nested in it, inner loops first; ``rewrite`` may replace the
    loop op and add ops before it."""
    for op in list(block.ops):
        for b in op.blocks:
            rewrite_loops(b, rewrite)
        if op.primitive.loop is not None:
            rewrite(block, op)


def _hoist_loop(block: Block, loop: Op) -> None:
    first = loop.primitive.loop.first_constant(loop.attrs)
    plans = []  # per block: its invariant ops, in order
    for body in loop.blocks:
        invariant = {a.id for a in body.args[first:]}
        ops = []
        for op in body.ops:
            if not op.blocks and op.primitive.kind != "stateful" and all(v.id in invariant for v in op.inputs):
                ops.append(op)  # constants too: a hoisted op may read them
                invariant.update(r.id for r in op.results)
        plans.append(ops if any(op.inputs for op in ops) else [])
    if not any(plans):
        return
    outer = Builder(block, index=block.ops.index(loop), loc=loop.loc, device=loop.device)
    new_inputs: list[Value] = []
    for body, ops in zip(loop.blocks, plans):
        if not ops:
            continue
        # The invariant ops again, before the loop, on the loop's own inputs.
        mapping = {a.id: v for a, v in zip(body.args, loop.inputs)}
        for op in ops:
            for r, nr in zip(op.results, outer.emit(op.primitive, [mapping[v.id] for v in op.inputs], op.attrs,
                                                     loc=op.loc)):
                mapping[r.id] = nr
        members = {id(op) for op in ops}
        # What the loop still reads; a constant stays inside for its other users instead.
        used_later = [r for op in ops if op.inputs for r in op.results
                      if any(id(u) not in members for u, _ in r.uses) or any(r is v for v in body.returns)]
        for r in used_later:
            new_inputs.append(mapping[r.id])
            # Every block of the loop takes the hoisted value as a new trailing argument.
            for b in loop.blocks:
                arg = Value(r.type, name=r.name)
                b.args.append(arg)
                if b is body:
                    r.replace_all_uses_with(arg)
                    b.set_returns([arg if v is r else v for v in b.returns])
        for op in reversed(ops):
            if not any(r.uses or any(r is v for v in body.returns) for r in op.results):
                body.erase(op)
    new = outer.emit(loop.primitive, [*loop.inputs, *new_inputs], loop.attrs, blocks=loop.blocks)
    for old, nv in zip(loop.results, new):
        old.replace_all_uses_with(nv)
        block.set_returns([nv if v is old else v for v in block.returns])
    loop.blocks = []
    block.erase(loop)
