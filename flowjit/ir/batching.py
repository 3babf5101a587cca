"""Batching (vmap) rules: how an op runs on operands that carry an extra leading batch axis.

A rule is ``rule(e, xs, batched, **attrs) -> (outs, out_batched)`` (see ``Primitive``): the
batch axis is always axis 0 of a batched operand, and a rule emits ordinary ops with the
Emitter ``e``, so a batched program is plain IR that fuses and differentiates as any other.
Most rules are derived here from what the registry declares (kind, role, attrs); a primitive
declares its own with ``defbatch`` only where no property says enough. ``batch_op`` is what
the batching pass calls for one op; an op none of this covers raises ``BatchingError``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from flowjit.ir.builder import Builder, Emitter
from flowjit.ir.core import Block, Value
from flowjit.ir.errors import BatchingError
from flowjit.ir.registry import Literal, Primitive, all_primitives, defbatch, get, normalize_axes, normalize_axis
from flowjit.ir.types import TensorType

BatchRule = Callable[..., tuple[list[Value], list[bool]]]

# Kinds whose ops cannot be batched by a rule of this layer, and why (the error's advice).
UNBATCHABLE_KINDS = {
    "random": "draws from a key, and one key gives one draw: split the key outside fj.vmap and map over "
              "the keys' leading axis once keys shaped [..., 2] are accepted, or pass the key unbatched "
              "(in_axes=None) so every example shares the draw",
    "stateful": "updates a Variable, which is state shared by every example: assign outside fj.vmap",
    "transfer": "is created by placement after tracing and cannot be batched; batch the program before "
                "placing it",
    "control": "owns blocks in a way no batching rule covers: move it outside fj.vmap",
}


def _size(xs: Sequence[Value], batched: Sequence[bool]) -> int:
    return next(x.type.shape[0] for x, b in zip(xs, batched) if b)


def _rank(x: Value, b: bool) -> int:
    """The per-example rank of ``x``."""
    return x.type.ndim - (1 if b else 0)


def _lift(e: Emitter, x: Value, b: bool, size: int) -> Value:
    """``x`` with the batch at axis 0: an unbatched operand broadcast to ``size`` copies."""
    return x if b else e.broadcast_to(x, shape=(size, *x.type.shape))


def _emit(e: Emitter, p: Primitive, xs: Sequence[Value], attrs: dict[str, Any]) -> list[Value]:
    return e.builder.emit(p, xs, attrs)


def _rule_unbatched(p: Primitive) -> BatchRule:
    # An op without operands (constant, iota) is the same for every example.
    def rule(e: Emitter, xs: Sequence[Value], batched: Sequence[bool], **attrs: Any):
        outs = _emit(e, p, xs, attrs)
        return outs, [False] * len(outs)
    return rule


def _rule_elementwise(p: Primitive) -> BatchRule:
    # A batched operand of lower per-example rank gets unit axes after its batch axis, so
    # NumPy's right-aligned broadcast lines its own axes up; unbatched operands broadcast as they are.
    def rule(e: Emitter, xs: Sequence[Value], batched: Sequence[bool], **attrs: Any):
        r = max(_rank(x, b) for x, b in zip(xs, batched))
        ins = [e.expand_dims(x, axes=tuple(range(1, 1 + r - _rank(x, b))))
               if b and _rank(x, b) < r else x for x, b in zip(xs, batched)]
        return _emit(e, p, ins, attrs), [True]
    return rule


def _rule_axes(p: Primitive) -> BatchRule:
    def rule(e: Emitter, xs: Sequence[Value], batched: Sequence[bool], *, axes: Sequence[int], **attrs: Any):
        (x,) = xs
        shifted = tuple(a + 1 for a in normalize_axes(axes, _rank(x, True)))
        return _emit(e, p, [x], {**attrs, "axes": shifted}), [True]
    return rule


def _rule_axis(p: Primitive) -> BatchRule:
    def rule(e: Emitter, xs: Sequence[Value], batched: Sequence[bool], *, axis: int, **attrs: Any):
        (x,) = xs
        outs = _emit(e, p, [x], {**attrs, "axis": normalize_axis(axis, _rank(x, True)) + 1})
        return outs, [True] * len(outs)
    return rule


def _rule_leading(p: Primitive) -> BatchRule:
    # Ops that already map over their operands' leading dimensions (NumPy's linalg batching,
    # fft over trailing axes): operands without the batch get it by broadcasting, since these
    # ops need equal batch dimensions.
    def rule(e: Emitter, xs: Sequence[Value], batched: Sequence[bool], **attrs: Any):
        size = _size(xs, batched)
        outs = _emit(e, p, [_lift(e, x, b, size) for x, b in zip(xs, batched)], attrs)
        return outs, [True] * len(outs)
    return rule


def _rule_matrix_product(p: Primitive) -> BatchRule:
    # matmul broadcasts batch dimensions (its operands are matrices, rank >= 2), so an
    # unbatched operand is not copied: a batched one only needs unit axes after the batch
    # axis until both have as many per-example batch dimensions.
    def rule(e: Emitter, xs: Sequence[Value], batched: Sequence[bool], **attrs: Any):
        def nbatch(x: Value, f: bool) -> int:
            return x.type.ndim - (3 if f else 2)
        (a, b), (fa, fb) = xs, batched
        if fa and not fb and b.type.ndim == 2:
            # A batch of rows times one matrix is one 2-D product over all the rows: no batched
            # gemm, so the program keeps to the native 2-D matmul (per-example forward passes).
            s = a.type.shape
            y = e.matmul(e.reshape(a, shape=(int(np.prod(s[:-1])), s[-1])), b)
            return [e.reshape(y, shape=(*s[:-1], b.type.shape[-1]))], [True]
        nb = max(nbatch(x, f) for x, f in zip(xs, batched))
        ins = [e.expand_dims(x, axes=tuple(range(1, 1 + nb - nbatch(x, f)))) if f and nbatch(x, f) < nb else x
               for x, f in zip(xs, batched)]
        if a.type.shape[-1] == 1 and a.type.dtype == b.type.dtype:
            # A contraction over one element is a broadcast product (the per-example outer
            # products x_i^T g_i of weight gradients), which fuses instead of a batched gemm.
            return [e.mul(*ins)], [True]
        return _emit(e, p, ins, attrs), [True]
    return rule


def _role_rule(p: Primitive) -> BatchRule | None:
    role = p.role

    def rule(e: Emitter, xs: Sequence[Value], batched: Sequence[bool], **attrs: Any):
        size = _size(xs, batched)
        if role == "join":
            axis = normalize_axis(attrs["axis"], _rank(xs[0], batched[0])) + 1
            ins = [_lift(e, x, b, size) for x, b in zip(xs, batched)]
            return _emit(e, p, ins, {**attrs, "axis": axis}), [True]
        (x,) = xs
        if role == "broadcast":
            shape = attrs["shape"]
            missing = len(shape) - _rank(x, True)
            if missing:
                x = e.expand_dims(x, axes=tuple(range(1, 1 + missing)))
            new = {"shape": (size, *shape)}
        elif role == "row_major_reshape":
            new = {"shape": (size, *attrs["shape"])}
        elif role == "permute_axes":
            r = _rank(x, True)
            new = {"perm": (0, *(normalize_axis(a, r) + 1 for a in attrs["perm"]))}
        elif role == "unit_axes_reshape":
            # A negative axis counts from the end, which the batch axis does not move.
            new = {"axes": tuple(a + 1 if a >= 0 else a for a in attrs["axes"])}
        elif role == "strided_window":
            new = {"start": (0, *attrs["start"]), "size": (size, *attrs["size"]), "step": (1, *attrs["step"])}
        elif role == "constant_pad":
            new = {"low": (0, *attrs["low"]), "high": (0, *attrs["high"])}
        else:
            raise AssertionError(role)
        return _emit(e, p, [x], {**attrs, **new}), [True]

    known = ("join", "broadcast", "row_major_reshape", "permute_axes", "unit_axes_reshape", "strided_window",
             "constant_pad")
    return rule if role in known else None


def generic_rule(p: Primitive) -> BatchRule | None:
    """The batching rule derived from ``p``'s declared properties, or None when they say too
    little (the primitive then needs ``defbatch``, or cannot be batched)."""
    if p.role == "branch":
        return _rule_branch(p)
    if p.role == "scan_loop":
        return _rule_scan(p)
    if p.role == "while_loop":
        return _rule_while(p)
    if p.role == "custom_vjp":
        return _rule_custom_vjp(p)
    if p.kind in UNBATCHABLE_KINDS:
        return None
    if p.arity == 0:
        return _rule_unbatched(p)
    if p.kind == "elementwise":
        return _rule_elementwise(p)
    if p.role == "matrix_product":
        return _rule_matrix_product(p)
    if p.maps_leading_dims:
        return _rule_leading(p)
    rule = _role_rule(p) if p.role is not None else None
    if rule is not None:
        return rule
    if p.arity == 1 and p.attrs.get("axes") is not None and p.attrs["axes"].kind == "ints":
        return _rule_axes(p)
    if p.arity == 1 and p.attrs.get("axis") is not None and p.attrs["axis"].kind == "int":
        return _rule_axis(p)
    return None


def batch_rule(p: Primitive) -> BatchRule | None:
    """``p``'s batching rule: its declared one (``defbatch``), else the generic one, else None."""
    return p.batch or generic_rule(p)


def batch_op(e: Emitter, p: Primitive, xs: Sequence[Value], batched: Sequence[bool], attrs: dict[str, Any],
             loc: object = None, blocks: Sequence[Block] = ()) -> tuple[list[Value], list[bool]]:
    """Emit ``p(xs) {attrs}`` batched (at least one of ``xs`` batched at axis 0) and return its
    results, each with whether it carries the batch; BatchingError if ``p`` has no rule. An op
    owning ``blocks`` passes them on to its rule, which batches them through ``e``'s hooks
    (``e.batch_block``, ``e.batch_inline``: the batching pass's Emitter has them)."""
    rule = batch_rule(p)
    if rule is None:
        raise _no_rule(p, xs, batched, loc)
    extra = {"blocks": list(blocks)} if blocks else {}
    return rule(e, list(xs), list(batched), **p.normalize_attrs(attrs), **extra)


def _describe(xs: Sequence[Value], batched: Sequence[bool]) -> str:
    return ", ".join(f"{x.type} ({'batched' if b else 'unbatched'})" for x, b in zip(xs, batched)) or "none"


def _no_rule(p: Primitive, xs: Sequence[Value], batched: Sequence[bool], loc: object) -> BatchingError:
    why = UNBATCHABLE_KINDS.get(p.kind, "has no batching rule: declare one next to the primitive with "
                                        "flowjit.ir.registry.defbatch, or compute it outside fj.vmap")
    at = f"\n  at {loc}" if loc is not None else ""
    return BatchingError(f"{p.name}: not supported under fj.vmap: it {why} (operands: "
                         f"{_describe(xs, batched)}){at}")


# ---- rules declared by hand ----------------------------------------------------------

def _flatten_axis(e: Emitter, x: Value, axis: int) -> Value:
    """Batched ``x`` (B, pre..., n, post...) as (B*n, pre..., post...): the batch folded into ``axis``."""
    r = x.type.ndim
    perm = (0, axis + 1, *(i for i in range(1, r) if i != axis + 1))
    x = e.transpose(x, perm=perm) if perm != tuple(range(r)) else x
    s = x.type.shape
    return e.reshape(x, shape=(s[0] * s[1], *s[2:]))


def _offset_indices(e: Emitter, indices: Value, n: int) -> Value:
    """Batched ``indices`` clamped to [0, n) as gather does, plus ``b * n`` for example b, in i64."""
    idx = e.cast(indices, dtype="i64")
    lo = e.constant(value=Literal(np.asarray(0, np.int64)))
    hi = e.constant(value=Literal(np.asarray(max(n - 1, 0), np.int64)))
    idx = e.minimum(e.maximum(idx, lo), hi)
    b = e.iota(shape=idx.type.shape, dimension=0, dtype="i64")
    return e.add(idx, e.mul(b, e.constant(value=Literal(np.asarray(n, np.int64)))))


def _gather_rule(e: Emitter, xs: Sequence[Value], batched: Sequence[bool], *, axis: int):
    (x, indices), (bx, bi) = xs, batched
    rx = _rank(x, bx)
    axis = normalize_axis(axis, rx)
    if not bi:
        return [e.gather(x, indices, axis=axis + 1)], [True]
    ni = indices.type.ndim - 1
    if not bx:
        # The batch lands where the gathered axis was; move it to the front.
        y = e.gather(x, indices, axis=axis)
        r = y.type.ndim
        perm = (axis, *range(axis), *range(axis + 1, r))
        return [e.transpose(y, perm=perm) if perm != tuple(range(r)) else y], [True]
    n = x.type.shape[axis + 1]
    y = e.gather(_flatten_axis(e, x, axis), _offset_indices(e, indices, n), axis=0)
    # y is (B, *ishape, pre..., post...); the op's layout is (B, pre..., *ishape, post...).
    pre = tuple(range(1 + ni, 1 + ni + axis))
    perm = (0, *pre, *range(1, 1 + ni), *range(1 + ni + axis, y.type.ndim))
    return [e.transpose(y, perm=perm) if perm != tuple(range(y.type.ndim)) else y], [True]


def _scatter_rule(name: str) -> Callable[..., Any]:
    """The vmap rule of scatter primitive ``name``: every scatter (add, mul, max, min) batches
    alike, emitting its own primitive."""
    def rule(e: Emitter, xs: Sequence[Value], batched: Sequence[bool], *, axis: int):
        scatter = getattr(e, name)
        (operand, indices, updates), (bo, bi, bu) = xs, batched
        axis = normalize_axis(axis, _rank(operand, bo))
        size = _size(xs, batched)
        if not bi:
            operand = _lift(e, operand, bo, size)
            updates = _lift(e, updates, bu, size)
            return [scatter(operand, indices, updates, axis=axis + 1)], [True]
        operand, updates = _lift(e, operand, bo, size), _lift(e, updates, bu, size)
        ni = indices.type.ndim - 1
        n = operand.type.shape[axis + 1]
        flat = _flatten_axis(e, operand, axis)
        # updates (B, pre..., *ishape, post...) -> (B, *ishape, pre..., post...) to match a gather on axis 0.
        ru = updates.type.ndim
        perm = (0, *range(1 + axis, 1 + axis + ni), *range(1, 1 + axis), *range(1 + axis + ni, ru))
        u = e.transpose(updates, perm=perm) if perm != tuple(range(ru)) else updates
        u = e.reshape(u, shape=(size * u.type.shape[1], *u.type.shape[2:])) if ni else u
        idx = _offset_indices(e, indices, n)
        idx = e.reshape(idx, shape=(idx.type.shape[0] * idx.type.shape[1], *idx.type.shape[2:])) if ni else idx
        if not ni:  # one index per example: the updates lose the gathered axis
            u = e.reshape(u, shape=(size, *u.type.shape[1:]))
        y = scatter(flat, idx, u, axis=0)
        # Undo _flatten_axis: (B*n, pre..., post...) -> (B, pre..., n, post...).
        y = e.reshape(y, shape=(size, n, *y.type.shape[1:]))
        r = y.type.ndim
        perm = (0, *range(2, 2 + axis), 1, *range(2 + axis, r))
        return [e.transpose(y, perm=perm) if perm != tuple(range(r)) else y], [True]
    return rule


def _first_occurrence_rule(e: Emitter, xs: Sequence[Value], batched: Sequence[bool], *, size: int):
    # Example b's indices offset by b * size into one map of B * size slots; a slot's position
    # p = b * n + j (j within the example) comes back as j.
    (indices,) = xs
    if not batched[0]:
        return [e.first_occurrence(indices, size=size)], [False]
    batch = indices.type.shape[0]
    n = math.prod(indices.type.shape[1:])
    flat = e.reshape(_offset_indices(e, indices, size), shape=(batch * n,))
    slots = e.reshape(e.first_occurrence(flat, size=batch * size), shape=(batch, size))
    start = e.mul(e.iota(shape=(batch, size), dimension=0, dtype="i64"),
                  e.constant(value=Literal(np.asarray(n, np.int64))))
    none = e.constant(value=Literal(np.asarray(-1, np.int64)))
    found = e.ge(slots, e.constant(value=Literal(np.asarray(0, np.int64))))
    return [e.select(found, e.sub(slots, start), e.broadcast_to(none, shape=(batch, size)))], [True]


def _rule_branch(p: Primitive) -> BatchRule:
    # An unbatched index runs one branch for the whole batch: each branch is batched on its
    # own, and a result batched in any branch is broadcast in the others. A batched index
    # picks a branch per example, so every branch runs (inlined) and selects choose per
    # example, with the index clamped to the branches as the op does.
    def rule(e: Emitter, xs: Sequence[Value], batched: Sequence[bool], *, blocks: Sequence[Block]):
        (index, *ops), (bi, *bops) = xs, batched
        size = _size(xs, batched)
        if not bi:
            new = [e.batch_block(b, [x.type for x in ops], bops) for b in blocks]
            out_b = [any(fs) for fs in zip(*(f for _, f in new))]
            for block, flags in new:
                bb = Builder(block)
                block.set_returns([bb.op("broadcast_to", v, shape=(size, *v.type.shape)) if want and not f else v
                                   for v, f, want in zip(block.returns, flags, out_b)])
            return e.builder.emit(p, [index, *ops], {}, blocks=[b for b, _ in new]), out_b
        def const(k: int) -> Value:
            return e.constant(value=Literal(np.asarray(k, index.type.dtype.np)))

        def where(take: Value, a: Value, b: Value) -> Value:
            return e.select(e.reshape(take, shape=(size, *(1,) * (a.type.ndim - 1))), a, b)

        clamped = e.minimum(e.maximum(index, const(0)), const(len(blocks) - 1))
        outs: list[Value] = []
        for k, block in enumerate(blocks):
            take = e.eq(clamped, const(k))
            # Every branch runs, so where it is not taken its float inputs are stop_gradient
            # copies: a branch whose derivative is infinite there (sqrt at 0) puts no NaN
            # into the gradient (0 * inf), as JAX does (jax issue 1052).
            ins = [where(take, _lift(e, x, b, size), e.stop_gradient(_lift(e, x, b, size)))
                   if x.type.dtype.is_inexact else x for x, b in zip(ops, bops)]
            vals, flags = e.batch_inline(block, ins, [b or x.type.dtype.is_inexact for x, b in zip(ops, bops)])
            vals = [_lift(e, v, f, size) for v, f in zip(vals, flags)]
            outs = vals if k == 0 else [where(take, v, o) for v, o in zip(vals, outs)]
        return outs, [True] * len(outs)
    return rule


def _swap01(e: Emitter, x: Value) -> Value:
    return e.transpose(x, perm=(1, 0, *range(2, x.type.ndim)))


def _rule_scan(p: Primitive) -> BatchRule:
    # Which carries are batched is a fixpoint: a carry the body makes batched must enter
    # batched, which may batch others, so the body is batched again until nothing widens
    # (at most once per carry). Scanned inputs keep the scanned axis first (the batch moves
    # to axis 1, so each slice has it at 0), and batched ys come out (L, B, ...) and move back.
    def rule(e: Emitter, xs: Sequence[Value], batched: Sequence[bool], *, blocks: Sequence[Block],
             num_carry: int, num_xs: int, **attrs: Any):
        (body,), nc, nx = blocks, num_carry, num_xs
        size = _size(xs, batched)
        seq = [_swap01(e, x) if b else x for x, b in zip(xs[nc:nc + nx], batched[nc:nc + nx])]
        rest = [x.type for x in seq] + [x.type for x in xs[nc + nx:]]
        rest = [TensorType(t.shape[1:], t.dtype) for t in rest[:nx]] + rest[nx:]
        carry_b = list(batched[:nc])
        for _ in range(nc + 1):
            types = [TensorType((size, *x.type.shape), x.type.dtype) if cb and not b else x.type
                     for x, b, cb in zip(xs[:nc], batched[:nc], carry_b)]
            new, out_b = e.batch_block(body, types + rest, carry_b + list(batched[nc:]))
            widened = [cb or ob for cb, ob in zip(carry_b, out_b[:nc])]
            if widened == carry_b:
                break
            carry_b = widened
        bb = Builder(new)
        new.set_returns([bb.op("broadcast_to", v, shape=(size, *v.type.shape)) if k < nc and carry_b[k] and not f
                         else v for k, (v, f) in enumerate(zip(new.returns, out_b))])
        init = [_lift(e, x, b, size) if cb else x for x, b, cb in zip(xs[:nc], batched[:nc], carry_b)]
        outs = e.builder.emit(p, [*init, *seq, *xs[nc + nx:]], {"num_carry": nc, "num_xs": nx, **attrs},
                              blocks=[new])
        ys = [_swap01(e, y) if f else y for y, f in zip(outs[nc:], out_b[nc:])]
        return [*outs[:nc], *ys], [*carry_b, *out_b[nc:]]
    return rule


def _rule_while(p: Primitive) -> BatchRule:
    # The carries' batching is a fixpoint as for scan. A shared predicate runs one loop; a
    # batched one runs while any example's holds, and an example whose predicate is false
    # keeps its carry (a select per carry), so every carry is batched.
    def rule(e: Emitter, xs: Sequence[Value], batched: Sequence[bool], *, blocks: Sequence[Block],
             num_carry: int, maximum_iterations: int):
        (cond, body), nc = blocks, num_carry
        size = _size(xs, batched)
        carry_b, consts_b = list(batched[:nc]), list(batched[nc:])

        def types() -> list[TensorType]:
            return [TensorType((size, *x.type.shape), x.type.dtype) if cb and not b else x.type
                    for x, b, cb in zip(xs[:nc], batched[:nc], carry_b)] + [x.type for x in xs[nc:]]
        for _ in range(nc + 2):
            new_body, out_b = e.batch_block(body, types(), carry_b + consts_b)
            new_cond, (pred_b,) = e.batch_block(cond, types(), carry_b + consts_b)
            widened = [True] * nc if pred_b else [cb or ob for cb, ob in zip(carry_b, out_b)]
            if widened == carry_b:
                break
            carry_b = widened
        init = [_lift(e, x, b, size) if cb else x for x, b, cb in zip(xs[:nc], batched[:nc], carry_b)]
        attrs = {"num_carry": nc, "maximum_iterations": maximum_iterations}
        if pred_b:
            new_cond.set_returns([Builder(new_cond).op("reduce_any", new_cond.returns[0], axes=(0,))])
            new_body = Block([Value(t, name=a.name) for t, a in zip(types(), body.args)])
            inner = type(e)(Builder(new_body))
            (pred,), _ = inner.batch_inline(cond, new_body.args, carry_b + consts_b)
            stepped, flags = inner.batch_inline(body, new_body.args, carry_b + consts_b)
            keep = [inner.reshape(pred, shape=(size, *(1,) * (old.type.ndim - 1))) for old in new_body.args[:nc]]
            new_body.set_returns([inner.select(k, _lift(inner, v, f, size), old)
                                  for k, v, f, old in zip(keep, stepped, flags, new_body.args)])
        else:
            bb = Builder(new_body)
            new_body.set_returns([bb.op("broadcast_to", v, shape=(size, *v.type.shape)) if cb and not f else v
                                  for v, f, cb in zip(new_body.returns, out_b, carry_b)])
        outs = e.builder.emit(p, [*init, *xs[nc:]], attrs, blocks=[new_cond, new_body])
        return outs, carry_b
    return rule


def _rule_custom_vjp(p: Primitive) -> BatchRule:
    # The user's bwd is batched like any block, on batched residuals, output cotangents and
    # captures. The arguments enter batched (broadcast where shared), so bwd's cotangents
    # are too: the broadcast's own VJP then sums a shared argument's over the examples.
    def rule(e: Emitter, xs: Sequence[Value], batched: Sequence[bool], *, blocks: Sequence[Block],
             num_out: int, num_res: int, **attrs: Any):
        (bwd,), k, r = blocks, num_out, num_res
        n, size = len(bwd.returns), _size(xs, batched)
        ins = [_lift(e, x, b, size) if k + r <= i < k + r + n else x for i, (x, b) in enumerate(zip(xs, batched))]
        flags = [b or k + r <= i < k + r + n for i, b in enumerate(batched)]
        order = [*range(k, k + r), *range(k), *range(k + r + n, len(ins))]  # bwd's (res, cts, captures)
        new, out_b = e.batch_block(bwd, [ins[i].type for i in order], [flags[i] for i in order])
        bb = Builder(new)
        new.set_returns([v if f else bb.op("broadcast_to", v, shape=(size, *v.type.shape))
                         for v, f in zip(new.returns, out_b)])
        outs = e.builder.emit(p, ins, {"num_out": k, "num_res": r, **attrs}, blocks=[new])
        return outs, list(flags[:k])
    return rule


def _conv2d_rule(e: Emitter, xs: Sequence[Value], batched: Sequence[bool], **attrs: Any):
    (x, w), (bx, bw) = xs, batched
    if not bw:
        s = x.type.shape  # (B, N, H, W, C): the batch folds into N
        y = e.conv2d(e.reshape(x, shape=(s[0] * s[1], *s[2:])), w, **attrs)
        return [e.reshape(y, shape=(s[0], s[1], *y.type.shape[1:]))], [True]
    # A batch of filters (an ensemble, per-example weights): the batch folds into the groups,
    # example-major, each example's channels its own groups: x [N, H, W, B*C], the filter
    # [KH, KW, C/G, B*O], the result [N, OH, OW, B*O] unfolded.
    b, (kh, kw, cg, o) = w.type.shape[0], w.type.shape[1:]
    if not bx:
        x = e.broadcast_to(e.expand_dims(x, axes=(0,)), shape=(b, *x.type.shape))
    _, n, h, wd, c = x.type.shape
    folded = e.reshape(e.transpose(x, perm=(1, 2, 3, 0, 4)), shape=(n, h, wd, b * c))
    filters = e.reshape(e.transpose(w, perm=(1, 2, 3, 0, 4)), shape=(kh, kw, cg, b * o))
    groups = attrs.pop("groups", 1)
    y = e.conv2d(folded, filters, groups=b * groups, **attrs)
    oh, ow = y.type.shape[1:3]
    return [e.transpose(e.reshape(y, shape=(n, oh, ow, b, o)), perm=(3, 0, 1, 2, 4))], [True]


def _patches_rule(e: Emitter, xs: Sequence[Value], batched: Sequence[bool], **attrs: Any):
    (x,) = xs
    s = x.type.shape  # (B, N, H, W, C): the batch folds into N
    y = e.conv_patches(e.reshape(x, shape=(s[0] * s[1], *s[2:])), **attrs)
    return [e.reshape(y, shape=(s[0], s[1], *y.type.shape[1:]))], [True]


def _element_count_rule(e: Emitter, xs: Sequence[Value], batched: Sequence[bool], *, axes: Sequence[int],
                        **attrs: Any):
    # Each example has the same count: the axes move past the batch, the result is shared.
    (x,) = xs
    shifted = tuple(a + 1 for a in normalize_axes(axes, x.type.ndim - 1))
    return _emit(e, get("element_count"), [x], {**attrs, "axes": shifted}), [False]


def _declare() -> None:
    defbatch("element_count", _element_count_rule)
    defbatch("gather", _gather_rule)
    for p in all_primitives():
        if p.role == "scatter":
            defbatch(p.name, _scatter_rule(p.name))
    defbatch("first_occurrence", _first_occurrence_rule)
    defbatch("conv2d", _conv2d_rule)
    defbatch("conv_patches", _patches_rule)


_declare()
