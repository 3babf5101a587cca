"""``tf.gradients``: symbolic derivatives as one graph op, computed by flowjit's reverse mode.

``gradients(ys, xs)`` adds a ``Gradients`` op whose outputs are d(sum of ys)/dx for each
x. When it runs, it re-evaluates the part of the graph between ``xs`` and ``ys`` as a
function of fresh values of ``xs`` under ``fj.vjp``, so the derivative is the VJP rules'
ordinary IR in the same compiled program (CSE merges the repeated forward ops with the
originals). An ``x`` that no ``y`` depends on gets None, as in TensorFlow;
``stop_gradient`` blocks the path through it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from flowjit.ir.errors import FlowjitTypeError
from flowjit.tracer import array_api as fnp
from flowjit.tracer.autodiff import vjp
from flowjit.v1 import ops
from flowjit.v1.graph import Operation, Tensor


def _between(xs: Sequence[Tensor], ys: Sequence[Tensor]) -> tuple[set[Operation], set[Tensor]]:
    """The ops on a path from some x to some y (not through stop_gradient), and the xs reached."""
    upstream: set[Operation] = set()
    stack = [y.op for y in ys]
    while stack:
        op = stack.pop()
        if op in upstream:
            continue
        upstream.add(op)
        if op.type != "StopGradient":
            stack.extend(t.op for t in op.inputs)
    x_set = set(xs)
    between: set[Operation] = set()
    reached: set[Tensor] = set()
    # Creation order is a topological order: one forward sweep marks what depends on an x.
    depends: set[Tensor] = set(xs)
    ops_sorted = sorted(upstream, key=lambda o: o.id)
    for op in ops_sorted:
        if op.type == "StopGradient":
            continue
        if any(t in depends for t in op.inputs):
            if set(op.outputs) & x_set:
                continue
            between.add(op)
            depends.update(op.outputs)
    for y in ys:
        if y in x_set:
            reached.add(y)
    for op in between:
        reached.update(t for t in op.inputs if t in x_set)
    return between, reached


def gradients(ys: Any, xs: Any, grad_ys: Any = None, name: str = "gradients", colocate_gradients_with_ops: bool = False,
              gate_gradients: bool = False, aggregation_method: Any = None, stop_gradients: Any = None) -> list[Any]:
    """d(sum(ys))/dx for each x in ``xs`` (tensors or Variables), weighted by ``grad_ys``
    (default ones); None for an x the ys do not depend on."""
    ys_l = [ops.convert_to_tensor(y) for y in (ys if isinstance(ys, (list, tuple)) else [ys])]
    xs_l = [ops.convert_to_tensor(x) for x in (xs if isinstance(xs, (list, tuple)) else [xs])]
    if grad_ys is None:
        gys: list[Tensor] = []
    else:
        gys = [ops.convert_to_tensor(g, dtype=y.dtype) for g, y in
               zip(grad_ys if isinstance(grad_ys, (list, tuple)) else [grad_ys], ys_l)]
    for x in xs_l:
        if not x.dtype.is_float:
            raise FlowjitTypeError(f"tf.gradients with respect to {x.name} of dtype {x.dtype}: only float tensors "
                                   "have gradients")
    if stop_gradients is not None:
        raise FlowjitTypeError("tf.gradients(stop_gradients=...) is not supported: wrap the tensors in "
                               "tf.stop_gradient instead")
    between, reached = _between(xs_l, ys_l)
    live = [x for x in xs_l if x in reached]
    if not live:
        return [None] * len(xs_l)
    local = frozenset(between)
    ny, nx = len(ys_l), len(live)

    def compute(ev: Any, op: Operation, vals: list[Any]) -> list[Any]:
        # vals[:ny] are the ys: inputs so they (and what they need) run first.
        x_vals, seeds = vals[ny:ny + nx], vals[ny + nx:]

        def forward(*fresh: Any) -> list[Any]:
            child = ev.child(dict(zip(live, fresh)), local)
            return [child.value(y) for y in ys_l]

        outs, pullback = vjp(forward, *x_vals)
        cts = list(seeds) if seeds else [fnp.ones_like(o) for o in outs]
        return list(pullback(cts))

    graph = ys_l[0].graph
    op = graph.create_op("Gradients", [*ys_l, *live, *gys], compute, name=name,
                         outputs=[(x._shape, x.dtype) for x in live])
    by_x = dict(zip(live, op.outputs))
    return [by_x.get(x) for x in xs_l]
