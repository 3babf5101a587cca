"""``collapse_nests``: a perfect nest of loops over leading axes becomes one loop.

The lowering writes a loop per axis of an output (or of a reduction): a batch norm's
statistics over an NHWC array loop over N, H and W, then C. Where the nest's variables
are read only together, as one row-major position, the nest is one loop over the product
of its extents: every load and store indexes the nest's axes in order at consecutive
positions of a buffer whose dimensions there are the loops' extents, and every other use
is an index binding (``Let``) of exactly their row-major position (a reshape's
linearized index). A load ``x[i, j, k, c]`` becomes ``x[0, 0, f, c]`` (the buffer's linear
offset is the same, the renderer's Horner sum never checking an index against its
dimension) and the binding ``l = (i * (H * W) + j * W) + k`` becomes ``l = f``.

Why: LLVM's time on a kernel grows with its loops (its loop passes walk each one; about
1.7 ms a loop on the machines measured, see docs/performance.md), and one long loop
splits and vectorizes better than three short ones.

Guarantees: the kernel computes the same values at the shapes it was lowered for (the
conditions are checked on the concrete sizes); a nest is collapsed only from its
outermost loop inward, with its start 0 and step 1, no loop but the outermost parallel
(the collapsed loop keeps that flag) and none streaming; any other use of a nest variable
leaves the nest as it was (the longest collapsible outer part of it is taken).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from flowjit.lowering import loops
from flowjit.lowering.loops import INDEX, Accumulator, Const, Expr, If, Let, Load, Loop, Prim, Store, Update, Var


class _Unused(Exception):
    """A nest variable is used some other way than the row-major position (no collapse)."""


def collapse_nests(body: tuple, shapes: Mapping[str, Sequence[int]], sizes: Mapping[str, int]) -> tuple:
    """``body`` (a kernel's statements) with its collapsible nests collapsed (the module
    docstring); ``shapes``: each buffer's concrete dimensions; ``sizes``: each size
    variable's value."""
    return _Collapser(shapes, sizes).body(body)


class _Collapser:
    def __init__(self, shapes: Mapping[str, Sequence[int]], sizes: Mapping[str, int]):
        self.shapes = shapes
        self.sizes = sizes

    def value(self, e: Expr) -> int | None:
        """The int value of a size expression (constants and size variables), else None."""
        if isinstance(e, Const):
            return int(e.value)
        if isinstance(e, Var):
            return self.sizes.get(e.name)
        return None

    def body(self, stmts: tuple) -> tuple:
        out = []
        for s in stmts:
            if isinstance(s, Loop):
                s = self.nest(s)
                s = dataclasses.replace(s, body=self.body(s.body))
            elif isinstance(s, If):
                s = dataclasses.replace(s, then=self.body(s.then), orelse=self.body(s.orelse))
            out.append(s)
        return tuple(out)

    def nest(self, outer: Loop) -> Loop:
        chain = [outer]
        while (len(chain[-1].body) == 1 and isinstance(chain[-1].body[0], Loop)
               and not chain[-1].body[0].parallel):
            chain.append(chain[-1].body[0])
        ok = [lp for lp in chain if lp.start == Const(0, INDEX) and lp.step == 1 and not lp.stream
              and self.value(lp.stop) is not None]
        for k in range(len(chain), 1, -1):
            if any(lp not in ok for lp in chain[:k]):
                continue
            try:
                return self.collapse(chain[:k])
            except _Unused:
                continue
        return outer

    def collapse(self, chain: list[Loop]) -> Loop:
        names = [lp.var for lp in chain]
        extents = [self.value(lp.stop) for lp in chain]
        f = Var(f"{names[0]}_{names[-1]}", INDEX)
        # The row-major weight of each variable: the product of the extents inside it.
        weights = {v: math.prod(extents[j + 1:]) for j, v in enumerate(names)}
        rewrite = _Rewrite(names, extents, weights, f, self.shapes, self.value)
        body = rewrite.stmts(chain[-1].body)
        stop: Expr = chain[0].stop
        for lp in chain[1:]:
            stop = Prim("mul", (stop, lp.stop), INDEX)
        return Loop(f.name, Const(0, INDEX), stop, 1, body, chain[0].parallel)


class _Rewrite:
    """The statements of a nest's innermost body with the nest's variables replaced by
    their one position ``f``; raises ``_Unused`` where that cannot be done."""

    def __init__(self, names: list[str], extents: list[int], weights: dict[str, int], f: Var,
                 shapes: Mapping[str, Sequence[int]], value: Callable[[Expr], int | None]):
        self.names, self.extents, self.weights, self.f = names, extents, weights, f
        self.shapes, self.value = shapes, value

    def stmts(self, stmts: tuple) -> tuple:
        return tuple(self.stmt(s) for s in stmts)

    def stmt(self, s: Any) -> Any:
        if isinstance(s, Let):
            if self.is_position(s.value):
                return Let(s.name, self.f)
            scaled = self.scaled_position(s.value)
            return Let(s.name, scaled if scaled is not None else self.expr(s.value))
        if isinstance(s, Store):
            return Store(s.buffer, self.index(s.buffer, s.index), self.expr(s.value))
        if isinstance(s, Loop):
            return dataclasses.replace(s, start=self.expr(s.start), stop=self.expr(s.stop), body=self.stmts(s.body))
        if isinstance(s, If):
            return If(self.expr(s.cond), self.stmts(s.then), self.stmts(s.orelse))
        if isinstance(s, Accumulator):
            return dataclasses.replace(s, start=self.expr(s.start))
        if isinstance(s, Update):
            return Update(s.name, self.expr(s.value), None if s.position is None else self.expr(s.position))
        raise _Unused(f"a statement {type(s).__name__}")

    def expr(self, e: Expr) -> Expr:
        if isinstance(e, Var):
            if e.name in self.names:
                raise _Unused(e.name)
            return e
        if isinstance(e, Load):
            return Load(e.buffer, self.index(e.buffer, e.index), e.dtype)
        if isinstance(e, Prim):
            return Prim(e.op, tuple(self.expr(a) for a in e.args), e.dtype)
        return e

    def index(self, buffer: str, index: tuple) -> tuple:
        """``index`` with the nest's variables, in order at consecutive positions over the
        buffer's dimensions of their extents, as zeros then ``f``."""
        run = tuple(Var(v, INDEX) for v in self.names)
        k = len(run)
        for p in range(len(index) - k + 1):
            if tuple(index[p:p + k]) == run:
                dims = self.shapes.get(buffer)
                if dims is None or list(dims[p + 1:p + k]) != self.extents[1:]:
                    raise _Unused(f"{buffer}'s dimensions")
                zeros = tuple(Const(0, INDEX) for _ in range(k - 1))
                return tuple(self.expr(i) for i in index[:p]) + zeros + (self.f,) + tuple(
                    self.expr(i) for i in index[p + k:])
        return tuple(self.expr(i) for i in index)

    def is_position(self, e: Expr) -> bool:
        """Whether ``e`` is exactly the variables' row-major position: an affine sum of
        them, each times its weight, and nothing else."""
        terms = self.affine(e)
        return terms is not None and terms == self.weights

    def scaled_position(self, e: Expr) -> Expr | None:
        """``f * c + rest`` where ``e`` is the variables' row-major position times ``c`` plus
        terms that read none of them: the linear index of a reshape's source read inside
        the nest (``l = ((n * (H*W*C) + h * (W*C)) + w * C) + c``, the loop over ``c``
        inside the nest), which becomes ``l = f * C + c``; else None."""
        split = self.split(e, 1)
        if split is None:
            return None
        coefficients, rest = split
        c = coefficients.get(self.names[-1], 0)
        if c < 1 or coefficients != {v: c * w for v, w in self.weights.items()}:
            return None
        out: Expr = self.f if c == 1 else Prim("mul", (self.f, Const(c, INDEX)), INDEX)
        for sign, term in rest:
            out = Prim("add" if sign > 0 else "sub", (out, term), INDEX)
        return out

    def split(self, e: Expr, sign: int) -> tuple[dict[str, int], list[tuple[int, Expr]]] | None:
        """``e`` times ``sign`` as its nest variables' coefficients and the signed terms of
        its sum that read none of them; None when a term reads them other than linearly."""
        if not self.reads(e):
            return {}, [(sign, e)]
        if isinstance(e, Prim) and e.dtype == INDEX and e.op in ("add", "sub"):
            a = self.split(e.args[0], sign)
            b = self.split(e.args[1], sign if e.op == "add" else -sign)
            if a is None or b is None:
                return None
            coefficients = dict(a[0])
            for v, w in b[0].items():
                coefficients[v] = coefficients.get(v, 0) + w
            return {v: w for v, w in coefficients.items() if w}, a[1] + b[1]
        terms = self.affine(e)
        if terms is None:
            return None
        constant = terms.pop(None, 0)
        return ({v: sign * w for v, w in terms.items()},
                [(sign, Const(constant, INDEX))] if constant else [])

    def reads(self, e: Expr) -> bool:
        """Whether ``e`` reads a variable of the nest."""
        if isinstance(e, Var):
            return e.name in self.names
        return any(self.reads(a) for a in loops.children(e))

    def affine(self, e: Expr) -> dict[str | None, int] | None:
        """``e`` as {variable: coefficient, None: constant} over the nest's variables, the
        size expressions by their values; None when it is not such a sum."""
        if isinstance(e, Const) and e.dtype == INDEX:
            return {None: int(e.value)} if e.value else {}
        if isinstance(e, Var):
            if e.name in self.names:
                return {e.name: 1}
            v = self.value(e)
            return None if v is None else ({None: v} if v else {})
        if isinstance(e, Prim) and e.dtype == INDEX and e.op in ("add", "sub", "mul"):
            a, b = (self.affine(x) for x in e.args)
            if a is None or b is None:
                return None
            if e.op == "mul":
                if set(a) <= {None}:
                    a, b = b, a
                if not set(b) <= {None}:
                    return None
                c = b.get(None, 0)
                out = {key: c * w for key, w in a.items()}
            else:
                sign = 1 if e.op == "add" else -1
                out = dict(a)
                for key, w in b.items():
                    out[key] = out.get(key, 0) + sign * w
            return {key: w for key, w in out.items() if w}
        return None
