"""Forward-mode autodiff as IR to IR: the JVP of a traced region, op by op.

``jvp`` walks a region of a block's ops in program order, keeping a tangent per Value,
and appends the tangent ops after the region, where every primal Value is already
defined. Each op's JVP is derived from its VJP rule by transposition: the rule is run on
a placeholder cotangent ``u`` (zeros), and since what it emits is linear in ``u``,
``backward`` over those ops with respect to ``u``, seeded with the input tangents, gives
``J t``. So every primitive with a VJP rule has a JVP with no further declaration; the
placeholder and the ops that only fed the transposed ops are dead and removed by prune,
so the compiled result is the hand-written JVP (measured in
docs/plans/function-transforms.md, section 3.1).

Guarantees: the region's ops are not changed; the appended ops are ordinary primitives,
so the result can be verified, optimized, fused, compiled and differentiated again (jvp
of grad is a Hessian-vector product); a non-differentiable primitive, and an integer or
bool value, carry no tangent (zero). Ops that own blocks go the same way, which is
correct but not yet cheap: the JVP of a cond is a second cond that runs its branch's
forward again, of a scan a forward scan that saves the carries and two reverse scans (a
rule per op, one cond or scan over primals and tangents, is the follow-up); a while
needs ``maximum_iterations`` as in reverse mode (the error says so); a custom_vjp
function's tangent is the transpose of the user's bwd, and a custom_jvp function's
tangent is the user's jvp rule (its reverse mode is that rule transposed, so
transposing again gives it back).
"""

from __future__ import annotations

from collections.abc import Sequence

from flowjit.ir.builder import Builder, Emitter
from flowjit.ir.core import Block, Op, Value
from flowjit.ir.errors import AutodiffError
from flowjit.passes.autodiff import backward

__all__ = ["jvp"]


def _inexact(v: Value) -> bool:
    return v.type.dtype.is_inexact


def _op_jvp(block: Block, e: Emitter, op: Op, ts: list[Value | None]) -> list[Value | None]:
    """The tangents of ``op``'s results given ``ts`` (one tangent or None per input): the
    transpose of the op's VJP rule, run on placeholder cotangents."""
    p = op.primitive
    us = [e.zeros(r.type) for r in op.results]
    start = len(block.ops)
    if op.blocks or len(op.results) != 1:
        gxs = p.vjp(e, us, op.results, *op.inputs, blocks=op.blocks, **op.attrs)
    else:
        gxs = p.vjp(e, us[0], op.results[0], *op.inputs, **op.attrs)
    live = [(g, t) for g, t in zip(gxs, ts) if g is not None and t is not None]
    if not live:
        return [None] * len(op.results)
    # Only the ops that depend on a placeholder are transposed: the rest (the partials,
    # cos(x) for sin) are constants of the linear map, and transposing them would emit
    # dead derivatives of the primal computation.
    reached = {u.id for u in us}
    linear = []
    for o in block.ops[start:]:
        if any(x.id in reached for x in o.inputs):
            linear.append(o)
            reached.update(r.id for r in o.results)
    tys = backward(block, linear, [g for g, _ in live], [t for _, t in live], us)
    return [ty if _inexact(r) else None for ty, r in zip(tys, op.results)]


def jvp(block: Block, ops: Sequence[Op], wrt: Sequence[Value], tangents: Sequence[Value],
        outputs: Sequence[Value]) -> list[Value]:
    """Append to ``block`` the ops computing the tangents of ``outputs`` given tangents
    ``tangents`` of ``wrt``, through ``ops`` (the region, in program order); an output
    nothing in the region connects to ``wrt`` gets zeros of its type."""
    tan: dict[int, Value] = {}
    for v, t in zip(wrt, tangents):
        if t.type != v.type:
            raise AutodiffError(f"internal: tangent {t.type} for a value of type {v.type}")
        if _inexact(v):
            tan[v.id] = t
    builder = Builder(block)
    e = Emitter(builder, backward=backward)
    for op in list(ops):
        ts = [tan.get(x.id) for x in op.inputs]  # only inexact values carry one
        p = op.primitive
        if not p.differentiable or all(t is None for t in ts):
            continue
        where = f" at {op.loc}" if op.loc else ""
        if p.vjp is None:
            raise AutodiffError(f"no forward-mode derivative for {p.name}{where}: it is derived from the VJP "
                                "rule, which is not written yet")
        builder.loc, builder.device = op.loc, op.device
        try:
            tys = _op_jvp(block, e, op, ts)
        except AutodiffError as err:
            if not op.blocks:
                raise
            raise AutodiffError(f"fj.jvp (forward mode) through {p.name}{where}: its forward-mode derivative is "
                                f"derived from its reverse-mode one for now, which failed: {err}") from None
        for r, t in zip(op.results, tys):
            if t is not None:
                tan[r.id] = t
    builder.loc = None
    return [tan[v.id] if v.id in tan else e.zeros(v.type) for v in outputs]
