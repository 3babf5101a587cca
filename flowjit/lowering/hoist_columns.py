"""``hoist_columns``: a costly value of a loop nest that depends only on its innermost
index is computed once per index, into a temp, before the nest.

A fused kernel recomputes every value at every element of its loops. A value broadcast
along the outer axes, such as a batch norm's ``1 / sqrt(var / n + eps)`` per channel
over an NHWC array, is then a square root and two divisions per element where one per
channel would do (on the project's Xeon a 512-bit division issues every 8 cycles and a
square root every 12: the CNN's normalize-and-pool kernel ran at 15% of its memory
bound). LLVM's loop-invariant code motion cannot take it out: the value changes with the
inner index, so keeping it needs an array.

The pass finds, in each innermost loop nested in at least one other loop of a top-level
nest, the ``Let`` values that read only the innermost loop variable, names bound before the
nest and buffers the nest does not store to, and that contain a division or a math
intrinsic (``scalar.COSTLY``). Those of them that the rest of the loop body reads are
computed by a loop of their own before the nest (a ``temp`` of the inner extent each) and
read back from it; the values only they needed leave the body.

Guarantees: every value is computed by the same ops in the same order (results
bit-identical); the new loop runs only when every loop around the innermost one runs at
least once (it reads the same elements the nest would have, never an element of an empty
buffer); a nest whose bounds depend on its own names, with an outer loop counting down,
or whose innermost loop does not start at 0 with step 1, is left as it was.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable

from flowjit.ir.dtypes import bool_
from flowjit.lowering.loops import (
    INDEX,
    Accumulator,
    AccValue,
    Buffer,
    Const,
    Expr,
    If,
    Let,
    Load,
    Loop,
    Prim,
    Store,
    Var,
    children,
    expressions,
    free_names,
)
from flowjit.lowering.scalar import COSTLY


def hoist_columns(body: tuple, size_names: Iterable[str], fresh: Callable[[str], str]) -> tuple[tuple, list[Buffer]]:
    """``body`` (a kernel's statements) with the costly inner-only values of its nests
    computed before them (the module docstring), and the temps that now hold them.
    ``size_names``: the kernel's size variables (a temp's extent may read only these);
    ``fresh(prefix)``: a name not yet used in the kernel."""
    sizes = frozenset(size_names)
    out: list = []
    temps: list[Buffer] = []
    for s in body:
        if isinstance(s, Loop) and _has_inner_loop(s):
            before, s = _hoist_nest(s, sizes, fresh, temps)
            out.extend(before)
        out.append(s)
    return tuple(out), temps


def _has_inner_loop(s: Loop) -> bool:
    return any(isinstance(t, Loop) for t in s.body)


def _bound_names(body: tuple, out: set) -> set:
    for s in body:
        if isinstance(s, Loop):
            out.add(s.var)
            _bound_names(s.body, out)
        elif isinstance(s, (Let, Accumulator)):
            out.add(s.name)
        elif isinstance(s, If):
            _bound_names(s.then, out)
            _bound_names(s.orelse, out)
    return out


def _stored_buffers(body: tuple, out: set) -> set:
    for s in body:
        if isinstance(s, Store):
            out.add(s.buffer)
        elif isinstance(s, Loop):
            _stored_buffers(s.body, out)
        elif isinstance(s, If):
            _stored_buffers(s.then, out)
            _stored_buffers(s.orelse, out)
    return out


def _loads(e: Expr) -> Iterable[Load]:
    if isinstance(e, Load):
        yield e
    for c in children(e):
        yield from _loads(c)


def _costly(e: Expr) -> bool:
    return (isinstance(e, Prim) and e.op in COSTLY and e.dtype.is_float) or any(_costly(c) for c in children(e))


def _has_acc(e: Expr) -> bool:
    return isinstance(e, AccValue) or any(_has_acc(c) for c in children(e))


def _rename(e: Expr, names: dict[str, str]) -> Expr:
    if isinstance(e, Var) and e.name in names:
        return Var(names[e.name], e.dtype)
    if isinstance(e, Prim):
        return Prim(e.op, tuple(_rename(a, names) for a in e.args), e.dtype)
    if isinstance(e, Load):
        return Load(e.buffer, tuple(_rename(a, names) for a in e.index), e.dtype)
    return e


def _stmt_reads(s) -> set:
    """The names statement ``s`` reads (nested statements included)."""
    return {e.name for e in expressions((s,)) if isinstance(e, (Var, AccValue))}


def _hoist_nest(nest: Loop, sizes: frozenset, fresh: Callable[[str], str], temps: list[Buffer]) -> tuple[list, Loop]:
    inside = _bound_names((nest,), set())
    stored = _stored_buffers(nest.body, set())
    before: list = []

    def visit(loop: Loop, outer: tuple) -> Loop:
        if _has_inner_loop(loop):
            body = tuple(visit(s, (*outer, loop)) if isinstance(s, Loop) else s for s in loop.body)
            return dataclasses.replace(loop, body=body)
        extent = _factors(loop.stop, sizes)
        if not outer or loop.step != 1 or loop.start != Const(0, INDEX) or extent is None:
            return loop
        if any(o.step <= 0 or free_names(o.start) & inside or free_names(o.stop) & inside for o in outer):
            return loop
        only: dict[str, Let] = {}       # the body's Lets that read the inner index and outside names only
        costly: set[str] = set()
        varying: set[str] = {loop.var}  # those that change with the inner index (LLVM hoists the others)
        for s in loop.body:
            if not isinstance(s, Let) or _has_acc(s.value):
                continue
            reads = free_names(s.value)
            if any(ld.buffer in stored for ld in _loads(s.value)):
                continue
            if all(n == loop.var or n in only or n not in inside for n in reads):
                only[s.name] = s
                if _costly(s.value) or reads & costly:
                    costly.add(s.name)
                if reads & varying:
                    varying.add(s.name)
        costly &= varying
        if not costly:
            return loop
        read_elsewhere: set = set()
        for s in loop.body:
            if not (isinstance(s, Let) and s.name in only):
                read_elsewhere |= _stmt_reads(s)
        kept = [n for n in only if n in costly and n in read_elsewhere]
        if not kept:
            return loop
        # The Lets the kept values need, in body order, renamed for the loop before the nest.
        need: set = set()
        for n in reversed(list(only)):
            if n in kept or n in need:
                need |= free_names(only[n].value) & only.keys()
                need.add(n)
        var = fresh("c")
        names = {loop.var: var}
        pre: list = []
        for n, s in only.items():
            if n in need:
                names[n] = fresh("c")
                pre.append(Let(names[n], _rename(s.value, names)))
        replaced: dict[str, Load] = {}
        for n in kept:
            t = fresh("col")
            # A collapsed loop's extent is a product of sizes: the temp has them as its shape
            # (what a plan sizes temps by), read at its row-major offset as collapse_nests does.
            temps.append(Buffer(t, "temp", only[n].value.dtype, len(extent), extent))
            lead = (Const(0, INDEX),) * (len(extent) - 1)
            pre.append(Store(t, (*lead, Var(var, INDEX)), Var(names[n], only[n].value.dtype)))
            replaced[n] = Load(t, (*lead, Var(loop.var, INDEX)), only[n].value.dtype)
        compute = Loop(var, loop.start, loop.stop, 1, tuple(pre))
        runs = [Prim("lt", (o.start, o.stop), bool_) for o in outer
                if not (isinstance(o.start, Const) and isinstance(o.stop, Const) and o.start.value < o.stop.value)]
        cond = runs[0] if runs else None
        for r in runs[1:]:
            cond = Prim("and", (cond, r), bool_)
        before.append(If(cond, (compute,)) if cond is not None else compute)
        body = [Let(s.name, replaced[s.name]) if isinstance(s, Let) and s.name in replaced else s
                for s in loop.body]
        return dataclasses.replace(loop, body=_drop_unread(body, only.keys() - replaced.keys()))

    return before, visit(nest, ())


def _factors(e: Expr, sizes: frozenset) -> tuple | None:
    """``e`` as the factors of a product of size variables and constants, or None."""
    if isinstance(e, Const) or (isinstance(e, Var) and e.name in sizes):
        return (e,)
    if isinstance(e, Prim) and e.op == "mul":
        a, b = (_factors(x, sizes) for x in e.args)
        return a + b if a is not None and b is not None else None
    return None


def _drop_unread(body: list, candidates: set) -> tuple:
    """``body`` without the Lets named in ``candidates`` that nothing after them reads."""
    live: set = set()
    out: list = []
    for s in reversed(body):
        if isinstance(s, Let) and s.name in candidates and s.name not in live:
            continue
        live |= _stmt_reads(s)
        out.append(s)
    return tuple(reversed(out))
