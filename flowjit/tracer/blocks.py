"""Tracing Python functions into nested IR blocks, what ``fj.cond``/``fj.scan``, ``fj.custom_vjp``,
``fj.remat`` and ``fj.vmap`` share: a pytree's leaves as tracers of a trace, a function traced
into a sub-trace's block, and the captured values of several blocks made one argument list."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from flowjit.ir.core import Block, Value
from flowjit.tracer import pytree
from flowjit.tracer.core import Trace, Tracer, current_trace, materialize, operand, trace_context


def leaves_in(trace: Trace, tree: Any, what: str) -> tuple[list[Tracer], pytree.TreeDef]:
    """The leaves of ``tree`` as tracers of ``trace`` (arrays become constants)."""
    leaves, treedef = pytree.flatten(tree)
    out = []
    for k, x in enumerate(leaves):
        o = operand(x, f"{what} leaf {k}")
        out.append(Tracer(materialize(o, trace), trace, o.weak))
    return out, treedef


def trace_block(fn: Callable[..., Any], arg_tree: pytree.TreeDef, arg_leaves: Sequence[Tracer],
                name: str) -> tuple[Trace, list[Tracer], pytree.TreeDef]:
    """Trace ``fn`` on fresh arguments typed like ``arg_leaves`` into a block nested in the
    current trace; returns the sub-trace, its result leaves and their structure."""
    parent = current_trace()
    sub = Trace(Block(), name=name, parent=parent)
    args = [sub.new_arg(t.aval, t.value.name or f"a{k}", t.weak) for k, t in enumerate(arg_leaves)]
    with trace_context(sub):
        out = fn(*pytree.unflatten(arg_tree, args))
        leaves, out_tree = leaves_in(sub, out, f"the result of {name}")
    sub.block.set_returns([t.value for t in leaves])
    return sub, leaves, out_tree


def share_captures(subs: Sequence[Trace], explicit: int) -> list[Tracer]:
    """Give every block the same trailing arguments: the union of what each captured, in
    first-capture order (a block that does not read one gets an unused argument)."""
    outer: list[Tracer] = []
    seen: dict[int, int] = {}
    for sub in subs:
        for o, _ in sub.captures:
            if id(o.value) not in seen:
                seen[id(o.value)] = len(outer)
                outer.append(o)
    for sub in subs:
        mine = {id(o.value): inner for o, inner in sub.captures}
        extra = [mine.get(id(o.value)) or Value(o.aval, name=o.value.name) for o in outer]
        sub.block.args = sub.block.args[:explicit] + extra
    return outer
