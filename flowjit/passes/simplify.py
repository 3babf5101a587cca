"""``simplify``: algebraic identities that hold exactly, for every input.

Guarantee: after ``simplify(fn)`` the Function verifies and, on every input, returns the
same arrays as before: bit for bit for ints and bools, and for floats the same values
with the same sign of zero, infinities in the same places and NaN in the same places
(a NaN's sign and payload bits are not promised, as no IEEE operation promises them).
A rewrite never depends on input values, only on types, attributes and constants.

Which primitive each rule applies to is read from its declaration (``Primitive.identity``,
``idempotent``, ``self_value``, ``involution``, ``no_axes_identity``, ``role``), never from
its name; with today's declarations the rules are these.

What it rewrites (``c`` is a ``constant`` whose every element equals the value shown,
possibly seen through broadcast/reshape/transpose/slice ops; where the op's result has a
larger shape than the value that replaces it, a ``broadcast_to`` of that value is emitted):

- identities: ``x*1, 1*x, x/1, x**1 -> x``; ``x+0, 0+x -> x`` for ints and, for floats,
  only with a ``-0.0`` constant (``-0.0 + 0.0`` is ``+0.0``); ``x-0 -> x`` (for floats only
  with ``+0.0``: ``x - -0.0`` turns ``-0.0`` into ``+0.0``); ``x and true``, ``x or false``,
  ``x xor false -> x``;
- same operand twice: ``maximum/minimum/logical_and/logical_or(x, x) -> x``;
  ``select(p, x, x) -> x``; for ints and bools only (never floats: ``inf-inf`` is NaN and
  NaN compares unequal to itself) ``x-x -> 0``, ``xor(x, x) -> false``, ``x==x -> true`` and
  so on for the other comparisons;
- involutions: ``neg(neg(x))``, ``logical_not(logical_not(x)) -> x``;
- ``select`` with an all-true / all-false constant predicate -> that branch;
- ``cast`` to the input's own dtype -> input; ``cast(cast(x, d1), d2) -> cast(x, d2)``
  (or ``x`` when ``d2`` is x's dtype) when ``d1`` represents every value of x's dtype
  exactly (f16->f32->f64, i32->i64->f64, bool->anything); never when x is a float and
  ``d2`` an int (out-of-range float->int conversion is implementation defined);
- layout: transpose with the identity perm -> input; ``transpose(transpose(x))`` -> one
  transpose with the composed perm (or ``x``), except where the outer one swaps the last two
  axes for matrix products alone and the inner one is kept anyway (the swap is a view the
  BLAS reads in place, not a copy); a reshape, squeeze, expand_dims or
  broadcast_to to the input's own shape -> input; a chain of reshape/squeeze/expand_dims
  -> one reshape; ``broadcast_to(broadcast_to(x))`` -> one broadcast_to; a slice that
  covers its input in order -> input; ``slice(slice(x))`` -> one slice;
- a reduction over ``axes=()`` -> its input, for the dtypes in its ``no_axes_identity``
  (not a float ``reduce_sum``, whose reference starts from ``+0.0`` and so turns ``-0.0``
  into ``+0.0``);
- pads side by side: a binary elementwise ``f(pad(a), pad(b))`` whose pads fill with the
  same ``v`` and leave unpadded regions that meet along one axis -> ``pad(concatenate(f(a,
  v), f(v, b)))`` filled with ``f(v, v)``, ``f`` applied to each piece of an ``a`` or ``b``
  that is such a concatenate read by that pad alone (one flat concatenate of n pieces)
  (the gradient of a row split into slices: each element computed from the same two values,
  ``a + 0.0`` included, so ``-0.0`` still turns into ``+0.0``); a pad of no elements -> its
  input;
- broadcast of scalars: an elementwise op's input ``broadcast_to(s, shape)`` is replaced by
  ``s`` when the op's result type stays the same (the op broadcasts implicitly).

Rewrites are applied to a fixed point (bounded by ``MAX_ROUNDS`` sweeps). Only ops whose
result is used or returned are rewritten. Ops left dead are not erased (``prune`` does
that); the only ops this pass erases are ones it created and then did not use. Ops with
nested blocks and impure ops are never rewritten; nested blocks are simplified too, and
nothing moves across a block boundary. New ops get the location and device of the op they
replace.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

from flowjit.ir.builder import Builder
from flowjit.ir.core import Block, Function, Op, Value
from flowjit.ir.dtypes import DType
from flowjit.ir.errors import ShapeError
from flowjit.ir.primitives.layout import pad_fill, swaps_last_two_axes
from flowjit.ir.registry import Literal, Primitive, all_primitives

# Every primitive-specific fact this pass uses is a property of the declaration
# (``Primitive.identity``, ``idempotent``, ``self_value``, ``involution``,
# ``no_axes_identity``, ``role``, ``copies_elements``); see ``flowjit.ir.registry``.

# A safety bound on fixed-point sweeps; real programs settle in two or three.
MAX_ROUNDS = 64


def _prim_with_role(role: str) -> Primitive:
    """The one primitive declared with ``role``, for rules that must build such an op."""
    (p,) = [p for p in all_primitives() if p.role == role]
    return p


def _constant_prim() -> tuple[Primitive, str]:
    """The primitive that makes a constant, and the name of its literal attribute."""
    (p,) = [p for p in all_primitives() if p.kind == "constant"]
    (attr,) = [k for k, spec in p.attrs.items() if spec.kind == "literal"]
    return p, attr


def simplify(fn: Function) -> Function:
    """Apply the exact identities listed in the module docstring to a fixed point, in place."""
    s = _Simplifier(fn)
    for _ in range(MAX_ROUNDS):
        changed = False
        for op in list(fn.walk()):
            if op.parent is not None and s.live(op) and s.rewrite(op):
                changed = True
        if not changed:
            break
    return fn


class _Simplifier:
    def __init__(self, fn: Function):
        self.blocks: list[Block] = []
        self._collect(fn.body)
        self.returned = Counter(v.id for b in self.blocks for v in b.returns)

    def _collect(self, block: Block) -> None:
        self.blocks.append(block)
        for op in block.ops:
            for b in op.blocks:
                self._collect(b)

    # ---- bookkeeping -----------------------------------------------------------------
    def live(self, op: Op) -> bool:
        return any(r.uses or self.returned[r.id] for r in op.results)

    def replace(self, old: Value, new: Value) -> None:
        assert old.type == new.type, (old.type, new.type)
        old.replace_all_uses_with(new)
        if self.returned[old.id]:
            for b in self.blocks:
                if any(v is old for v in b.returns):
                    b.set_returns([new if v is old else v for v in b.returns])
            self.returned[new.id] += self.returned.pop(old.id)

    def emit(self, op: Op, prim: Primitive, inputs: list[Value], attrs: dict[str, Any]) -> Value | None:
        """``prim(inputs) {attrs}`` just before ``op`` (its loc and device), or None if ill-typed."""
        try:
            (v,) = Builder.before(op).emit(prim, inputs, attrs)
        except (ShapeError, ValueError):
            return None
        return v

    def forward(self, op: Op, x: Value) -> bool:
        """Replace ``op``'s result with ``x``, broadcast to the result's shape if need be."""
        out = op.result
        if x.type == out.type:
            self.replace(out, x)
            return True
        if x.dtype != out.dtype:
            return False
        b = self.emit(op, _prim_with_role("broadcast"), [x], {"shape": out.shape})
        if b is None:
            return False
        if b.type != out.type:  # cannot happen for a valid op; keep the promise anyway
            op.parent.erase(b.producer)
            return False
        self.replace(out, b)
        return True

    def forward_constant(self, op: Op, value: Any) -> bool:
        """Replace ``op``'s result with a splat of ``value`` (a scalar constant, broadcast)."""
        out = op.result
        lit = Literal(np.asarray(value).astype(out.dtype.np))
        prim, attr = _constant_prim()
        c = self.emit(op, prim, [], {attr: lit})
        if c is None:
            return False
        if not self.forward(op, c):
            op.parent.erase(c.producer)
            return False
        return True

    # ---- the rules -------------------------------------------------------------------
    def rewrite(self, op: Op) -> bool:
        p = op.primitive
        if op.blocks or not p.pure or len(op.results) != 1:
            return False
        changed = p.kind == "elementwise" and self.drop_broadcasts(op)
        if p.kind == "elementwise" and len(op.inputs) == 2 and self.join_pads(op):
            return True
        return self.replace_result(op) or changed

    def join_pads(self, op: Op) -> bool:
        """``f(pad(a), pad(b))`` of two pads with the same fill ``v`` whose unpadded regions
        lie side by side along one axis -> ``pad(concatenate(f(a, v), f(v, b)))`` filled with
        ``f(v, v)``: each element is computed by ``f`` from the same two values as before
        (what the gradient of a split into slices adds up, element by element). Where ``a``
        (or ``b``) is itself such a concatenate, ``f`` applies to each of its pieces and the
        result is one concatenate of them all."""
        out = op.result
        pads = [_producer(v) for v in op.inputs]
        if any(q is None or q.primitive.role != "constant_pad" for q in pads) \
                or any(v.type != out.type for v in op.inputs):
            return False
        d = out.dtype
        if d.is_complex:   # a pad's fill is a real number
            return False
        fills = [pad_fill(q.attrs["value"], d) for q in pads]
        if fills[0].tobytes() != fills[1].tobytes():
            return False
        regions = [[(lo, n - hi) for lo, hi, n in zip(q.attrs["low"], q.attrs["high"], out.shape)] for q in pads]
        differ = [k for k in range(out.type.ndim) if regions[0][k] != regions[1][k]]
        if len(differ) != 1:
            return False
        (k,) = differ
        (s0, e0), (s1, e1) = regions[0][k], regions[1][k]
        if e0 != s1 and e1 != s0:
            return False
        with np.errstate(all="ignore"):
            both = np.asarray(op.primitive.impl(fills[0], fills[0]))
        fill = float(both) if both.dtype == d.np and both.ndim == 0 else None
        if fill is None or pad_fill(fill, d).tobytes() != both.tobytes():
            return False
        prim, attr = _constant_prim()
        v = self.emit(op, prim, [], {attr: Literal(fills[0])})
        if v is None:
            return False

        def side(x: Value, first: bool) -> list[Value | None]:
            # f(x, v) or f(v, x); over each piece of x when x is a join along k that only
            # this pad reads, so that a gradient of n slices is one flat join of n pieces
            # (each element still computed from the same values) where nested joins had
            # become selects that computed every piece's elementwise work for every element.
            made = _producer(x)
            parts = (list(made.inputs) if made is not None and made.primitive.role == "join"
                     and made.attrs["axis"] % out.type.ndim == k and len(x.uses) == 1 else [x])
            return [self.emit(op, op.primitive, [p, v] if first else [v, p], op.attrs) for p in parts]
        left, right = side(pads[0].inputs[0], True), side(pads[1].inputs[0], False)
        pieces = right + left if e1 == s0 else left + right
        if None in pieces:
            return False
        joined = self.emit(op, _prim_with_role("join"), pieces, {"axis": k})
        if joined is None:
            return False
        low, high = list(pads[0].attrs["low"]), list(pads[0].attrs["high"])
        low[k], high[k] = min(s0, s1), out.shape[k] - max(e0, e1)
        new = self.emit(op, pads[0].primitive, [joined], {"low": tuple(low), "high": tuple(high), "value": fill})
        return new is not None and self._use(op, new)

    def rule_constant_pad(self, op: Op) -> bool:
        (x,) = op.inputs
        if x.type == op.result.type:
            return self.forward(op, x)
        return False

    def replace_result(self, op: Op) -> bool:
        """Try the rules that make ``op``'s result some other value; True if one did."""
        p = op.primitive
        ins = op.inputs
        # Identities are facts of real arithmetic: (1+0j) * z is not z where z has an infinite
        # part, nor is z + (-0-0j) when its imaginary part is -0.
        if len(ins) == 2 and p.identity is not None and not ins[0].dtype.is_complex:
            e = p.identity
            if is_splat(ins[1], e) and self.forward(op, ins[0]):
                return True
            if p.commutative and is_splat(ins[0], e) and self.forward(op, ins[1]):
                return True
        if len(ins) == 2 and ins[0] is ins[1]:
            if p.idempotent and self.forward(op, ins[0]):
                return True
            if p.self_value is not None and not ins[0].dtype.is_inexact \
                    and self.forward_constant(op, p.self_value):
                return True
        if len(ins) == 1 and p.involution:
            inner = _producer(ins[0])
            if inner is not None and inner.primitive is p and inner.attrs == op.attrs \
                    and self.forward(op, inner.inputs[0]):
                return True
        if p.kind == "reduction" and len(ins) == 1 and op.attrs.get("axes") == () \
                and op.result.type == ins[0].type and ins[0].dtype in p.no_axes_identity:
            return self.forward(op, ins[0])
        # Roles with no rewrite (join, constant_pad, kernel, ...) have no rule_ method.
        rule = getattr(self, f"rule_{p.role}", None) if p.role is not None else None
        return rule is not None and rule(op)

    def drop_broadcasts(self, op: Op) -> bool:
        """Elementwise ``f(broadcast_to(s), y) -> f(s, y)`` where the result type is unchanged."""
        changed = False
        for i, v in enumerate(op.inputs):
            b = _producer(v)
            if b is None or b.primitive.role != "broadcast":
                continue
            s = b.inputs[0]
            types = [t.type for t in op.inputs]
            types[i] = s.type
            try:
                inferred = op.primitive.infer(types, op.attrs)
            except ShapeError:
                continue
            if inferred == [r.type for r in op.results]:
                op.set_input(i, s)
                changed = True
        return changed

    def rule_choose(self, op: Op) -> bool:
        pred, a, b = op.inputs
        if a is b:
            return self.forward(op, a)
        if is_splat(pred, True):
            return self.forward(op, a)
        if is_splat(pred, False):
            return self.forward(op, b)
        return False

    def rule_convert(self, op: Op) -> bool:
        (x,) = op.inputs
        d2 = op.result.dtype
        if x.dtype == d2:
            return self.forward(op, x)
        inner = _producer(x)
        if inner is None or inner.primitive.role != "convert":
            return False
        (x0,) = inner.inputs
        d0, d1 = x0.dtype, x.dtype
        if not _exact_cast(d0, d1) or (d0.is_float and d2.is_int):
            return False
        if d0 == d2:
            return self.forward(op, x0)
        new = self.emit(op, op.primitive, [x0], op.attrs)
        return new is not None and self._use(op, new)

    def rule_permute_axes(self, op: Op) -> bool:
        (x,) = op.inputs
        perm = tuple(op.attrs["perm"])
        inner = _producer(x)
        if inner is not None and inner.primitive.role == "permute_axes":
            p1 = tuple(inner.attrs["perm"])
            composed = tuple(p1[i] for i in perm)
            if composed == tuple(range(len(composed))):
                return self.forward(op, inner.inputs[0])
            if self._read_in_place(op, x):
                return False
            new = self.emit(op, op.primitive, [inner.inputs[0]], {"perm": composed})
            return new is not None and self._use(op, new)
        if perm == tuple(range(len(perm))):
            return self.forward(op, x)
        return False

    def _read_in_place(self, op: Op, before: Value) -> bool:
        """Whether ``op``, a transpose of ``before`` (another transpose's result), swaps the
        last two axes for matrix products only (and transposes, which compose with it), and
        ``before`` is kept anyway: another op reads it, or will (a transpose of this swap
        composes back to it, as the product's gradient does). A CPU BLAS reads such a swap
        in place through its transpose flag, so composing the two would make a copy where
        there was none (attention's ``q @ k.swapaxes(-1, -2)`` of split heads); where
        ``before`` is read by the swap alone the composed transpose is kept, one copy either
        way (and one where a backend copies a transposed operand, as CUDA's does, not two)."""
        r = op.result
        users = [u for u, _ in r.uses]
        if not swaps_last_two_axes(op.attrs["perm"]) or self.returned[r.id] or not users or \
                not all(u.primitive.role in ("matrix_product", "permute_axes") for u in users):
            return False
        return (any(u is not op for u, _ in before.uses) or self.returned[before.id] > 0
                or any(u.primitive.role == "permute_axes" for u in users))

    def rule_row_major_reshape(self, op: Op) -> bool:
        (x,) = op.inputs
        if x.shape == op.result.shape:
            return self.forward(op, x)
        inner = _producer(x)
        if inner is not None and inner.primitive.role in ("row_major_reshape", "unit_axes_reshape"):
            x0 = inner.inputs[0]
            if x0.shape == op.result.shape:
                return self.forward(op, x0)
            new = self.emit(op, _prim_with_role("row_major_reshape"), [x0], {"shape": op.result.shape})
            return new is not None and self._use(op, new)
        return False

    rule_unit_axes_reshape = rule_row_major_reshape

    def rule_broadcast(self, op: Op) -> bool:
        (x,) = op.inputs
        if x.shape == op.result.shape:
            return self.forward(op, x)
        inner = _producer(x)
        if inner is not None and inner.primitive.role == "broadcast":
            x0 = inner.inputs[0]
            if x0.shape == op.result.shape:
                return self.forward(op, x0)
            new = self.emit(op, op.primitive, [x0], {"shape": op.result.shape})
            return new is not None and self._use(op, new)
        return False

    def rule_strided_window(self, op: Op) -> bool:
        (x,) = op.inputs
        if _whole_slice(x.shape, op.attrs):
            return self.forward(op, x)
        inner = _producer(x)
        if inner is None or inner.primitive.role != "strided_window":
            return False
        x0 = inner.inputs[0]
        start, size, step = [], [], []
        for b1, s1, b2, n2, s2 in zip(inner.attrs["start"], inner.attrs["step"], op.attrs["start"],
                                      op.attrs["size"], op.attrs["step"]):
            # result[i] = inner[b2 + i*s2] = x0[b1 + (b2 + i*s2)*s1]
            start.append(b1 + b2 * s1 if n2 > 0 else 0)
            step.append(s1 * s2 if n2 > 1 else 1)
            size.append(n2)
        attrs = {"start": tuple(start), "size": tuple(size), "step": tuple(step)}
        if _whole_slice(x0.shape, attrs) and x0.type == op.result.type:
            return self.forward(op, x0)
        new = self.emit(op, op.primitive, [x0], attrs)
        return new is not None and self._use(op, new)

    def _use(self, op: Op, new: Value) -> bool:
        """Replace ``op``'s result with ``new`` (built just before it) if the types agree."""
        if new.type != op.result.type:
            op.parent.erase(new.producer)
            return False
        self.replace(op.result, new)
        return True


# ---- helpers ---------------------------------------------------------------------------------
def _producer(v: Value) -> Op | None:
    """The op defining ``v`` if the rules may look through it (pure, no blocks, one result)."""
    op = v.producer
    if op is None or op.blocks or not op.primitive.pure or len(op.results) != 1:
        return None
    return op


def _literal_of(op: Op) -> np.ndarray | None:
    if op.primitive.kind != "constant":
        return None
    for k, spec in op.primitive.attrs.items():
        if spec.kind == "literal" and isinstance(op.attrs.get(k), Literal):
            return op.attrs[k].array
    return None


def is_splat(v: Value, value: Any) -> bool:
    """Whether every element of ``v`` is ``value`` cast to v's dtype, known from constants.

    Compared by bytes, so ``-0.0`` and ``+0.0`` differ. Sees through ops that only copy
    elements (broadcast, reshape, transpose, slice).
    """
    op = _producer(v)
    for _ in range(1000):  # chains are short; the bound only guards odd programs
        if op is None:
            return False
        arr = _literal_of(op)
        if arr is not None:
            if arr.size == 0:
                return True
            with np.errstate(all="ignore"):
                target = np.asarray(value).astype(arr.dtype)
            return bool((arr.reshape(-1).view(np.uint8).reshape(arr.size, -1)
                         == target.reshape(1).view(np.uint8)).all())
        if not op.primitive.copies_elements:
            return False
        op = _producer(op.inputs[0])
    return False


def _exact_cast(src: DType, dst: DType) -> bool:
    """Whether ``dst`` holds every value of ``src`` exactly (so the cast loses nothing)."""
    if src == dst or src.is_bool:
        return True
    if dst.is_bool:
        return False
    if src.is_int:
        signed = np.issubdtype(src.np, np.signedinteger)
        if dst.is_int:
            # a negative value has no unsigned image; an unsigned one needs a wider signed type
            if signed != np.issubdtype(dst.np, np.signedinteger):
                return not signed and dst.itemsize > src.itemsize
            return dst.itemsize >= src.itemsize
        return np.finfo(dst.np).nmant + 1 >= 8 * src.itemsize - signed
    if src.is_complex:   # to a real type the imaginary part is dropped
        return dst.is_complex and dst.itemsize >= src.itemsize
    return dst.is_float and np.finfo(dst.np).nmant >= np.finfo(src.np).nmant and \
        np.finfo(dst.np).maxexp >= np.finfo(src.np).maxexp


def _whole_slice(shape: tuple[int, ...], attrs: dict[str, Any]) -> bool:
    """Whether a slice with ``attrs`` of an input of ``shape`` is that input, in order."""
    if tuple(attrs["size"]) != tuple(shape):
        return False
    return all(d <= 1 or (b == 0 and s == 1) for d, b, s in zip(shape, attrs["start"], attrs["step"]))
