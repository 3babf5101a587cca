"""Reverse-mode autodiff as IR to IR: gradients are ordinary ops built by the VJP rules.

``backward`` walks a region of a block's ops in reverse from the values to differentiate,
asks each op's primitive for its VJP rule (declared with the primitive, see
``Primitive``) and appends the emitted ops to the block, summing cotangents where a value
has several users. ``grad_function`` applies it to a whole Function.

Guarantees: the forward ops are not changed; the appended ops are ordinary primitives
(checked by their shape rules as they are built), so the result can be verified,
optimized, fused, compiled, and differentiated again; an op of a non-differentiable
primitive (comparisons, integer ops, random draws) and any integer or bool value pass
no gradient (their cotangent is zero); an op of a differentiable primitive without a
VJP rule raises AutodiffError naming it and the user's line.
"""

from __future__ import annotations

from collections.abc import Sequence

from flowjit.ir.builder import Builder, Emitter
from flowjit.ir.core import Block, Function, Op, Value
from flowjit.ir.errors import AutodiffError

__all__ = ["AutodiffError", "backward", "grad_function"]


def _differentiable(v: Value) -> bool:
    return v.type.dtype.is_inexact


def _active(ops: Sequence[Op], wrt: Sequence[Value]) -> set[int]:
    """The ids of ``wrt`` and of every value of ``ops`` computed from them through differentiable ops."""
    active = {v.id for v in wrt}
    for op in ops:
        if op.primitive.differentiable and any(x.id in active for x in op.inputs):
            active.update(r.id for r in op.results)
    return active


def backward(block: Block, ops: Sequence[Op], outputs: Sequence[Value], seeds: Sequence[Value],
             wrt: Sequence[Value]) -> list[Value]:
    """Append to ``block`` the ops computing the cotangents of ``wrt`` given cotangents
    ``seeds`` of ``outputs``, through ``ops`` (the forward region, in program order);
    a value of ``wrt`` nothing in the region reaches gets zeros."""
    ct: dict[int, Value] = {}
    builder = Builder(block)
    # Rules of ops that own blocks differentiate those blocks through e.backward: the ir
    # layer cannot import this pass, so the pass hands itself down.
    e = Emitter(builder, backward=backward, active=_active(ops, wrt))

    def add(v: Value, g: Value | None) -> None:
        if g is None or not _differentiable(v):
            return
        if g.type != v.type:
            raise AutodiffError(f"internal: cotangent {g.type} for a value of type {v.type}")
        prev = ct.get(v.id)
        ct[v.id] = g if prev is None else builder.op("add", prev, g)

    for v, s in zip(outputs, seeds):
        add(v, s)
    for op in reversed(list(ops)):
        cts = [ct.get(r.id) for r in op.results]
        if all(c is None for c in cts):
            continue
        p = op.primitive
        if not p.differentiable or not any(_differentiable(x) for x in op.inputs):
            continue
        if p.vjp is None:
            where = f" at {op.loc}" if op.loc else ""
            why = p.no_derivative or "its VJP rule is not written yet"
            raise AutodiffError(f"no gradient for {p.name}{where}: {why}")
        builder.loc, builder.device = op.loc, op.device
        if op.blocks or len(op.results) != 1:  # control flow, eigh, svd: every result's cotangent
            gs = [c if c is not None else e.zeros(r.type) for c, r in zip(cts, op.results)]
            grads = p.vjp(e, gs, op.results, *op.inputs, blocks=op.blocks, **op.attrs)
        else:
            grads = p.vjp(e, cts[0], op.results[0], *op.inputs, **op.attrs)
        for x, gx in zip(op.inputs, grads):
            add(x, gx)
    builder.loc = None
    return [ct[v.id] if v.id in ct else e.zeros(v.type) for v in wrt]


def grad_function(fn: Function, argnums: Sequence[int] = (0,), output: int = 0) -> Function:
    """A copy of ``fn`` that also returns the gradient of its result ``output`` (a float
    scalar) with respect to arguments ``argnums``, appended to its results."""
    g = fn.clone()
    body = g.body
    out = body.returns[output]
    if out.type.shape != () or not out.type.dtype.is_float:
        raise AutodiffError(f"grad needs a float scalar result, got {out.type}; use vjp for other results")
    seed = Emitter(Builder(body)).const(1, out)
    grads = backward(body, [op for op in body.ops if op is not seed.producer], [out], [seed],
                     [body.args[i] for i in argnums])
    body.set_returns(list(body.returns) + grads)
    return g
