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
bool value, carry no tangent (zero). A primitive may declare its own forward rule
(``defjvp``): ``cond``, ``scan`` and ``while`` do, each becoming one op over primals and
tangents that replaces the original (its results are the same Values, so nothing that
read them changes), so the work is done once and a while needs no bound, as in JAX. Other
ops owning blocks go through the transposition; a custom_vjp function's tangent is the
transpose of the user's bwd, and a custom_jvp function's tangent is the user's jvp rule
(its reverse mode is that rule transposed, so transposing again gives it back).
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


def _elementwise_jvp(e: Emitter, op: Op, ts: list[Value | None]) -> Value | None:
    """The tangent of a real elementwise op, or None where this shortcut does not apply.
    Its Jacobian with respect to each input is diagonal once the inputs are broadcast to
    the result's shape, so it is its own transpose: the VJP rule, run on the inputs
    broadcast and with the broadcast tangent as the cotangent, gives that input's term of
    the JVP directly, with no transposition (a third of the ops)."""
    (y,) = op.results
    if any(v.type.dtype.is_complex for v in (*op.inputs, y)) or \
            any(t is not None and t.type.dtype != y.type.dtype for t in ts):
        return None

    def wide(v: Value) -> Value:
        return v if v.type.shape == y.type.shape else e.broadcast_to(v, shape=y.type.shape)
    xs = [wide(x) for x in op.inputs]
    e.active = (e.active or set()) | {x.id for x, t in zip(xs, ts) if t is not None}
    total = None
    for i, t in enumerate(ts):
        if t is None:
            continue
        g = op.primitive.vjp(e, wide(t), y, *xs, **op.attrs)[i]
        if g is None:
            continue
        if g.type != y.type:
            return None
        total = g if total is None else e.add(total, g)
    return total if total is not None else e.zeros(y.type)


def _op_jvp(block: Block, e: Emitter, op: Op, ts: list[Value | None]) -> list[Value | None]:
    """The tangents of ``op``'s results given ``ts`` (one tangent or None per input): the
    transpose of the op's VJP rule, run on placeholder cotangents (real elementwise ops
    take the shortcut of ``_elementwise_jvp``). The rule is told which inputs carry a
    tangent (``Emitter.wants``)."""
    prev, e.active = e.active, {x.id for x, t in zip(op.inputs, ts) if t is not None}
    try:
        return _transposed_vjp(block, e, op, ts)
    finally:
        e.active = prev


def _transposed_vjp(block: Block, e: Emitter, op: Op, ts: list[Value | None]) -> list[Value | None]:
    p = op.primitive
    if p.kind == "elementwise" and not op.blocks and len(op.results) == 1:
        t = _elementwise_jvp(e, op, ts)
        if t is not None:
            return [t if _inexact(op.results[0]) else None]
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


def _take_over(op: Op, outs: Sequence[Value]) -> None:
    """Make the op producing ``outs`` (a JVP rule's loop over primals and tangents) produce
    ``op``'s result Values in their place, and unlink ``op``: every use of its results,
    including the tracer's handles on them, now reads the one loop."""
    for r, o in zip(op.results, outs):
        new = o.producer
        if new is None or o.type != r.type:
            raise AutodiffError(f"internal: the JVP rule of {op.name} returned {o} for its result {r}")
        o.replace_all_uses_with(r)
        new.results[o.index] = r
        r.producer, r.index = new, o.index
    op.drop_inputs()
    op.parent = None


def jvp(block: Block, ops: Sequence[Op], wrt: Sequence[Value], tangents: Sequence[Value],
        outputs: Sequence[Value], replace: bool = True) -> list[Value]:
    """Append to ``block`` the ops computing the tangents of ``outputs`` given tangents
    ``tangents`` of ``wrt``, through ``ops`` (the region, in program order); an output
    nothing in the region connects to ``wrt`` gets zeros of its type. Each op's tangent ops
    are placed right after it, and an op whose JVP rule computes its results again with
    their tangents (``cond``, ``scan``, ``while``) is replaced by that rule's op. With
    ``replace=False`` (the region lies before other ops, or in another block: a tangent
    given later, as ``fj.linearize`` does) the region is left as it is and the tangent ops
    stay appended at the end, a rule's op computing its primal results again.
    """
    tan: dict[int, Value] = {}
    for v, t in zip(wrt, tangents):
        if t.type != v.type:
            raise AutodiffError(f"internal: tangent {t.type} for a value of type {v.type}")
        if _inexact(v):
            tan[v.id] = t
    builder = Builder(block)
    e = Emitter(builder, backward=backward, jvp=jvp)
    before = list(block.ops)
    groups: dict[int, list[Op]] = {}
    dropped: set[int] = set()
    for op in list(ops):
        ts = [tan.get(x.id) for x in op.inputs]  # only inexact values carry one
        p = op.primitive
        if not p.differentiable or all(t is None for t in ts):
            continue
        where = f" at {op.loc}" if op.loc else ""
        if p.vjp is None and p.jvp is None:
            raise AutodiffError(f"no forward-mode derivative for {p.name}{where}: " + (
                p.no_derivative or "it is derived from the VJP rule, which is not written yet"))
        builder.loc, builder.device = op.loc, op.device
        mark = len(block.ops)
        if p.jvp is not None:
            outs, tys = p.jvp(e, ts, op.results, *op.inputs, blocks=op.blocks, **op.attrs)
            if outs is not None and replace:
                _take_over(op, outs)
                dropped.add(op.id)
        else:
            try:
                tys = _op_jvp(block, e, op, ts)
            except AutodiffError as err:
                if not op.blocks:
                    raise
                raise AutodiffError(f"fj.jvp (forward mode) through {p.name}{where}: its forward-mode derivative "
                                    f"is derived from its reverse-mode one for now, which failed: {err}") from None
        groups[op.id] = block.ops[mark:]
        for r, t in zip(op.results, tys):
            if t is not None:
                tan[r.id] = t
    builder.loc = None
    result = [tan[v.id] if v.id in tan else e.zeros(v.type) for v in outputs]
    if not replace:
        return result
    # Tangent ops were appended at the end; each group moves right after its op, where
    # everything it reads is defined, so an op that took over another's results (a rule's
    # loop) defines them before the region's later ops read them.
    grouped = {o.id for g in groups.values() for o in g}
    known = {o.id for o in before}
    order: list[Op] = []
    for o in before:
        if o.id not in dropped:
            order.append(o)
        order.extend(groups.get(o.id, ()))
    order.extend(o for o in block.ops if o.id not in grouped and o.id not in known)
    block.ops[:] = order
    return result
