"""``fold_shapes``: values that depend only on a shape become literals.

An ``element_count`` op (a mean's divisor: how many elements lie along some axes) depends
only on its input's type, which a traced program fixes; this pass replaces each with a
``constant`` op holding that count, so a kernel divides by a literal as it would by
``x.sum() / n`` written by hand. A program compiled once for every size of a symbolic
dimension (``flowjit compile --arg f32[B,...]``) runs the pipeline without this pass, so its
kernels read the count from the sizes they are given.

Guarantees: the program computes the same values (the count is what the op's reference
computes from the same type); the constants are inserted where the ops were, with their
location and device, and the ops are erased; nothing else changes. Nested blocks are
folded too, each inside its block.
"""

from __future__ import annotations

import numpy as np

from flowjit.ir.builder import Builder
from flowjit.ir.core import Block, Function
from flowjit.ir.registry import Literal


def fold_shapes(fn: Function) -> Function:
    """Replace every shape-only value (``element_count``) with its literal (module docstring)."""
    _fold_block(fn.body)
    return fn


def _fold_block(block: Block) -> None:
    for op in list(block.ops):
        for b in op.blocks:
            _fold_block(b)
        if op.primitive.role != "element_count":
            continue
        (x,) = op.inputs
        shaped = np.broadcast_to(np.zeros((), x.type.dtype.np), x.type.shape)   # no memory: the shape is read
        value = op.primitive.impl(shaped, **op.attrs)
        (c,) = Builder.before(op).emit("constant", [], {"value": Literal(np.asarray(value))})
        op.result.replace_all_uses_with(c)
        block.set_returns([c if v is op.result else v for v in block.returns])
        block.erase(op)
