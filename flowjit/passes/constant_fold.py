"""Constant folding with the NumPy reference implementations.

``constant_fold(fn, max_elements=MAX_FOLDED_ELEMENTS)`` evaluates, at compile time, every
op whose inputs are all results of ``constant`` ops (the primitive of kind
``"constant"``), and replaces it by ``constant`` ops holding its results.

Guarantees:

* an op is folded when its primitive is pure (so random draws and stateful ops never
  are), it owns no blocks, it is not itself a constant, every input is the result of a
  constant op (ops without inputs, such as ``iota``, qualify), and every result has at
  most ``max_elements`` elements (checked on the result types before evaluating, so a
  large ``iota`` or ``broadcast_to`` of a scalar stays an op);
* the op is evaluated with ``prim.impl(*arrays, **attrs)`` -- exactly what the reference
  interpreter runs -- with floating-point warnings (overflow, division by zero, invalid)
  silenced: the folded value is whatever NumPy gives, NaN, inf and -0.0 included, so the
  Function computes bit-identical results afterwards;
* if the impl raises, or returns something other than one array per result of exactly
  the result's shape and dtype, the op is left as it is;
* each folded op is replaced by one new constant op per result, inserted where the op
  was, with the op's ``loc`` and ``device``; uses and block returns move to the new
  constants and the folded op is erased;
* ops are visited in program order (nested blocks included, each fold staying inside its
  block), so chains of foldable ops fold fully in one run and a second run changes
  nothing;
* constants that become unused are left in place (``prune`` removes them).

Exactness: folded values are bit-identical to what the interpreter computes, and chains
are evaluated on the impls' own arrays (views included), as the interpreter does. The one
difference is layout: a folded view (``transpose``, ``broadcast_to``, ...) becomes a
C-contiguous literal, and NumPy's float *reductions* may round differently on a
contiguous array than on a strided view; so an op that is not folded (another input
is not constant) and whose impl accumulates over a folded view (``conv2d`` with a folded
filter, say) may change in the last bits. Elementwise ops are layout-independent.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import numpy as np

from flowjit.ir.core import Block, Function, Op, Value
from flowjit.ir.registry import Literal, Primitive, all_primitives

MAX_FOLDED_ELEMENTS = 1024
"""The default bound on the elements of each result of a folded op."""

CONSTANT_KIND = "constant"


def _constant_primitive() -> tuple[Primitive, str]:
    """The primitive of kind ``"constant"`` and the name of its array-literal attribute."""
    (prim,) = [p for p in all_primitives() if p.kind == CONSTANT_KIND]
    (name,) = [k for k, spec in prim.attrs.items() if spec.kind == "literal"]
    return prim, name


def _is_constant(v: Value) -> bool:
    return v.producer is not None and v.producer.primitive.kind == CONSTANT_KIND


def _evaluate(op: Op, arrays: Sequence[np.ndarray]) -> list[np.ndarray] | None:
    """The op's results from the NumPy reference, or None when it cannot be folded."""
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            out = op.primitive.impl(*arrays, **op.attrs)
    except Exception:  # an impl that rejects these values: leave the op to fail at run time
        return None
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    if len(outs) != len(op.results):
        return None
    results = []
    for r, x in zip(op.results, outs):
        a = np.asarray(x)
        if a.shape != r.type.shape or a.dtype != r.type.dtype.np:
            return None
        results.append(a)
    return results


class _Folder:
    def __init__(self, max_elements: int, fold_growing: bool = True):
        self.max_elements = max_elements
        self.fold_growing = fold_growing
        self.const, self.attr = _constant_primitive()
        self.values: dict[int, np.ndarray] = {}  # arrays of constant results, by value id
        self.replaced: dict[int, Value] = {}
        self.blocks: list[Block] = []

    def array(self, v: Value) -> np.ndarray:
        a = self.values.get(v.id)
        if a is None:
            p = v.producer
            assert p is not None
            a = np.asarray(p.primitive.impl(**p.attrs))
            self.values[v.id] = a
        return a

    def foldable(self, op: Op) -> bool:
        prim = op.primitive
        return (prim.pure and not op.blocks and prim.kind != CONSTANT_KIND and bool(op.results)
                and all(_is_constant(v) for v in op.inputs)
                and all(r.type.size <= self.max_elements for r in op.results)
                and (self.fold_growing or all(r.type.size <= sum(v.type.size for v in op.inputs)
                                              for r in op.results)))

    def make_constants(self, op: Op, results: list[np.ndarray]) -> list[Op] | None:
        new_ops = []
        for r, a in zip(op.results, results):
            attrs = self.const.normalize_attrs({self.attr: Literal(a)})
            if self.const.infer([], attrs) != [r.type]:
                return None
            new_ops.append(Op(self.const, [], attrs, [r.type], device=op.device, loc=op.loc))
        return new_ops

    def run_block(self, block: Block) -> None:
        self.blocks.append(block)
        new_list: list[Op] = []
        changed = False
        for op in list(block.ops):
            for b in op.blocks:
                self.run_block(b)
            folded = results = None
            if self.foldable(op):
                results = _evaluate(op, [self.array(v) for v in op.inputs])
                if results is not None:
                    folded = self.make_constants(op, results)
            if folded is None or results is None:
                new_list.append(op)
                continue
            changed = True
            for r, c, a in zip(op.results, folded, results):
                c.parent = block
                new_list.append(c)
                # Later folds see the impl's own array (a view keeps its strides), exactly
                # what the interpreter would hand them: NumPy's float sums depend on layout.
                self.values[c.result.id] = a
                r.replace_all_uses_with(c.result)
                self.replaced[r.id] = c.result
            op.drop_inputs()
            op.parent = None
        if changed:
            block.ops[:] = new_list


def constant_fold(fn: Function, max_elements: int = MAX_FOLDED_ELEMENTS, fold_growing: bool = True) -> Function:
    """Fold every pure op whose inputs are all constants into constants (see module doc).

    An op whose impl raises on these inputs (or returns a result of the wrong shape or
    dtype) is not folded and stays as it is; NumPy warnings during evaluation are silenced.
    ``fold_growing=False``: an op whose result has more elements than its inputs together
    (an ``iota``, a scalar broadcast to a shape) stays an op, so that a program compiled for
    every size of a dimension (``flowjit compile --arg f32[B,...]``) holds no array made
    from one size of it.
    """
    folder = _Folder(max_elements, fold_growing)
    folder.run_block(fn.body)
    if folder.replaced:
        for block in folder.blocks:
            if any(v.id in folder.replaced for v in block.returns):
                block.set_returns([folder.replaced.get(v.id, v) for v in block.returns])
    return fn
