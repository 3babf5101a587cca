"""Decompose: each op whose primitive declares a decomposition (``Primitive.decompose``) is
replaced by it, at any depth of blocks.

Guarantees: the Function computes the same results (a decomposition is the op written in
other primitives, checked against its reference by the registry tests); no op of a
primitive with a decomposition is left, those a decomposition emitted included, but those
whose rule declined them (a matmul of
float32 or float64, which BLAS computes); each new op carries the replaced op's source line
and device; what a decomposition computes that nothing reads (the cipher's second word
where a draw uses one) is pruned. Runs before placement, so the ops it makes are placed and fused like any
other: a convolution becomes its windows' patches (a kernel that fuses with its input's
producer) and one GEMM, which every code generator has.
"""

from __future__ import annotations

from flowjit.ir.builder import Builder, Emitter
from flowjit.ir.core import Block, Function
from flowjit.passes.placement import DeviceTarget, device_kind
from flowjit.passes.prune import prune


def _decompose_block(block: Block, own_kernels: bool, fixed_sizes: bool) -> int:
    count = 0
    for op in list(block.ops):
        for inner in op.blocks:
            count += _decompose_block(inner, own_kernels, fixed_sizes)
        rule = op.primitive.decompose
        if rule is None:
            continue
        e = Emitter(Builder.before(op), own_kernels=own_kernels, fixed_sizes=fixed_sizes)
        outs = rule(e, *op.inputs, **op.attrs)
        if outs is None:  # the rule declined (emitting nothing): the op has a kernel of its own
            continue
        count += 1
        for r, v in zip(op.results, outs):
            r.replace_all_uses_with(v)
        block.set_returns([outs[r.index] if r.producer is op else r for r in block.returns])
        block.erase(op)
    return count


def decompose(fn: Function, target: DeviceTarget | None = None, fixed_sizes: bool = True) -> Function:
    """``fn`` with every op that declares a decomposition replaced by its decomposition. A
    rule may keep an op that the lowering gives a kernel of its own (``Emitter.own_kernels``)
    when every device of ``target`` is a CPU (the default); other devices' code generators
    get the decomposition. ``fixed_sizes=False``: ``fn`` is one of the traces of a symbolic
    dimension's sizes that an ahead-of-time compile unifies, and the rules keep their
    forms' row counts proportional to the traced ones (``Emitter.fixed_sizes``)."""
    own_kernels = target is None or all(device_kind(d) == "cpu" for d in target.devices)
    changed = False
    # Again while a round replaced something: a decomposition may emit ops with decompositions
    # of their own (gammainc_grad_a's sums read lgamma and digamma).
    while _decompose_block(fn.body, own_kernels, fixed_sizes):
        changed = True
    return prune(fn) if changed else fn
