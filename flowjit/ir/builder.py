"""``Builder``: the one way new ops enter a block.

The tracer drives it while tracing user code and VJP rules drive it while building
gradients, so every op anywhere is created through the same checks: attributes are
validated and canonicalized by the primitive's schema and result types come from its
rule; a rule's ShapeError leaves here naming the op and the user's line.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from flowjit.ir.core import Block, Function, Op, SourceLoc, Value, clone_ops_into
from flowjit.ir.errors import AutodiffError, ShapeError
from flowjit.ir.registry import Literal, Primitive, get
from flowjit.ir.types import TensorType


class Builder:
    """Appends ops to ``block``; ``loc`` and ``device`` are stamped on each new op."""

    def __init__(self, block: Block, loc: SourceLoc | None = None, device: str | None = None,
                 index: int | None = None):
        self.block = block
        self.loc = loc
        self.device = device
        self.index = index  # insertion point; None appends at the end

    @classmethod
    def before(cls, op: Op) -> Builder:
        """A builder that inserts just before ``op``, with its location and device."""
        assert op.parent is not None
        return cls(op.parent, op.loc, op.device, op.parent.ops.index(op))

    def emit(self, prim: Primitive | str, inputs: Sequence[Value], attrs: dict[str, Any] | None = None,
             loc: SourceLoc | None = None, blocks: Sequence[Block] = ()) -> list[Value]:
        """Append ``prim(inputs) {attrs}`` (owning ``blocks``) and return its results."""
        p = get(prim) if isinstance(prim, str) else prim
        loc = loc or self.loc
        try:
            canon = p.normalize_attrs(attrs or {})
            types = p.infer([v.type for v in inputs], canon, blocks)
        except ShapeError as e:
            raise e.with_location(p.name, loc) from None
        op = Op(p, list(inputs), canon, types, device=self.device, loc=loc, blocks=list(blocks))
        if self.index is None:
            self.block.append(op)
        else:
            self.block.insert(self.index, op)
            self.index += 1
        return op.results

    def op(self, prim: Primitive | str, *inputs: Value, **attrs: Any) -> Value:
        """Append a single-result op and return its result."""
        (r,) = self.emit(prim, inputs, attrs)
        return r

    def inline(self, block: Block, args: Sequence[Value]) -> list[Value]:
        """Copies of ``block``'s ops, its arguments replaced by ``args``, placed as ``emit``
        places an op, each (and each op of their nested blocks) with this builder's line
        and device; returns what ``block`` returns."""
        scratch = Block()
        outs = clone_ops_into(block, scratch, list(args))
        for op in scratch.ops:
            _restamp(op, self.loc, self.device)
            if self.index is None:
                self.block.append(op)
            else:
                self.block.insert(self.index, op)
                self.index += 1
        return outs


def _restamp(op: Op, loc: SourceLoc | None, device: str | None) -> None:
    op.loc, op.device = loc, device
    for b in op.blocks:
        for inner in b.ops:
            _restamp(inner, loc, device)


class Emitter:
    """The builder VJP rules write with: ``e.mul(a, b)``, ``e.reduce_sum(x, axes=(0,))``
    emit one op of that primitive and return its result; ``const``, ``zeros`` and
    ``unbroadcast`` cover what almost every rule needs. Every op goes through
    ``Builder.emit``, so a gradient is ordinary, checked IR (and can be differentiated
    again). ``backward`` differentiates a nested block (the rules of ``cond``, ``while``
    and ``scan`` need it); the autodiff pass, which sits above this layer, passes it in, as the
    forward pass passes ``jvp`` for the forward-mode rules of the same ops."""

    def __init__(self, builder: Builder, backward: Callable[..., list[Value]] | None = None,
                 jvp: Callable[..., list[Value]] | None = None, active: set[int] | None = None,
                 own_kernels: bool = False, fixed_sizes: bool = True):
        self.builder = builder
        # Whether the ops emitted run where the lowering's kernels of their own run (the CPU
        # code generator, ahead of time too): a decomposition may then keep an op that has
        # one (an fft the FFT kernel takes) instead of writing it in other primitives.
        self.own_kernels = own_kernels
        # False where the program is traced at several sizes of a symbolic dimension for one
        # plan (``flowjit compile --arg f32[B,...]``), whose buffers' sizes must be lines in
        # it: a decomposition then keeps every count of rows it makes proportional to the
        # traced one (no rows paired into half as many, no padding to an even count).
        self.fixed_sizes = fixed_sizes
        self._backward = backward
        self._jvp = jvp
        # The ids of the values a differentiated value reaches, when the pass knows them.
        self.active = active

    def wants(self, v: Value) -> bool:
        """Whether the pass running a rule needs the derivative through ``v``: False for a value
        no differentiated value reaches. A rule with no derivative for an input (gammainc's order
        ``a``) refuses it only where it is wanted, as JAX, whose zero tangents are symbolic."""
        return self.active is None or v.id in self.active

    def backward(self, block: Block, ops: Sequence[Op], outputs: Sequence[Value], seeds: Sequence[Value],
                 wrt: Sequence[Value]) -> list[Value]:
        """Append to ``block`` the ops computing the cotangents of ``wrt`` given cotangents
        ``seeds`` of ``outputs``, through ``ops`` (``flowjit.passes.autodiff.backward``)."""
        if self._backward is None:
            raise AutodiffError("internal: a VJP rule differentiates a block, but its Emitter was made "
                                "without the autodiff pass's backward (Emitter(builder, backward=...))")
        return self._backward(block, ops, outputs, seeds, wrt)

    def jvp(self, block: Block, ops: Sequence[Op], wrt: Sequence[Value], tangents: Sequence[Value],
            outputs: Sequence[Value]) -> list[Value]:
        """Append to ``block`` the ops computing the tangents of ``outputs`` given ``tangents``
        of ``wrt``, through ``ops`` (``flowjit.passes.forward.jvp``; JVP rules of ops owning
        blocks need it, and the forward pass hands it down)."""
        if self._jvp is None:
            raise AutodiffError("internal: a JVP rule differentiates a block, but its Emitter was made "
                                "without the forward pass's jvp (Emitter(builder, jvp=...))")
        return self._jvp(block, ops, wrt, tangents, outputs)

    def __getattr__(self, name: str) -> Any:
        try:
            prim = get(name)
        except KeyError:
            raise AttributeError(name) from None
        return lambda *inputs, **attrs: self.builder.op(prim, *inputs, **attrs)

    def const(self, value: Any, like: Value) -> Value:
        """A 0-d constant of ``like``'s dtype (elementwise ops broadcast it)."""
        return self.builder.op("constant", value=Literal(np.asarray(value, like.type.dtype.np)))

    def zeros(self, t: TensorType) -> Value:
        """Zeros of type ``t``."""
        z = self.builder.op("constant", value=Literal(np.zeros((), t.dtype.np)))
        return z if t.shape == () else self.builder.op("broadcast_to", z, shape=t.shape)

    def unbroadcast(self, g: Value, t: TensorType) -> Value:
        """``g`` summed over the axes along which a value of type ``t`` was broadcast to
        ``g``'s shape (NumPy rules), so the result has type ``t``'s shape."""
        if g.type.shape == t.shape:
            return g
        lead = g.type.ndim - t.ndim
        axes = tuple(range(lead)) + tuple(lead + i for i, n in enumerate(t.shape)
                                          if n == 1 and g.type.shape[lead + i] != 1)
        s = self.builder.op("reduce_sum", g, axes=axes, keepdims=False) if axes else g
        return s if s.type.shape == t.shape else self.builder.op("reshape", s, shape=t.shape)

    def broadcast_back(self, g: Value, t: TensorType, axes: Sequence[int], keepdims: bool) -> Value:
        """A reduction's result (or cotangent) ``g`` over ``axes`` of a ``t``, broadcast back to ``t``."""
        if not keepdims:
            kept = [n if i not in axes else 1 for i, n in enumerate(t.shape)]
            g = self.builder.op("reshape", g, shape=tuple(kept))
        return g if g.type.shape == t.shape else self.builder.op("broadcast_to", g, shape=t.shape)


    def embed(self, g: Value, axis: int, start: int, step: int, n: int) -> Value:
        """``g`` (size m along ``axis``) placed at positions start, start+step, ... of an
        axis of n zeros (the transpose of a strided slice; step >= 1)."""
        op = self.builder.op
        m = g.type.shape[axis]
        shape = g.type.shape
        nd = g.type.ndim
        if step > 1:  # interleave step-1 zeros after each element
            g = op("expand_dims", g, axes=(axis + 1,))
            high = [0] * (nd + 1)
            high[axis + 1] = step - 1
            g = op("pad", g, low=(0,) * (nd + 1), high=tuple(high), value=0.0)
            g = op("reshape", g, shape=shape[:axis] + (m * step,) + shape[axis + 1:])
        low, high = [0] * nd, [0] * nd
        low[axis] = start
        high[axis] = max(0, n - start - g.type.shape[axis])
        g = op("pad", g, low=tuple(low), high=tuple(high), value=0.0)
        if g.type.shape[axis] > n:
            size = list(g.type.shape)
            size[axis] = n
            g = op("slice", g, start=(0,) * nd, size=tuple(size), step=(1,) * nd)
        return g


def new_function(name: str, arg_types: Sequence[TensorType], arg_names: Sequence[str] | None = None,
                 is_var: Sequence[bool] | None = None) -> tuple[Function, Builder]:
    """An empty Function with the given arguments and a Builder positioned in its body."""
    names = list(arg_names) if arg_names is not None else [f"a{i}" for i in range(len(arg_types))]
    block = Block([Value(t, name=n) for t, n in zip(arg_types, names)])
    fn = Function(name, block, list(is_var) if is_var is not None else None)
    return fn, Builder(block)
