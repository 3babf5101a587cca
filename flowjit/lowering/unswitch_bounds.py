"""``unswitch_bounds``: an innermost loop whose selects test conditions the loop does not
change runs in two versions, one where all those conditions hold, with no select.

A padded convolution tap or pooling window reads ``cond ? x[clamped] : fill``, where
``cond`` asks whether the tap's row and column fall inside the input: it depends on the
output position (outer loops) only, not on the channel the innermost loop walks. LLVM
vectorizes the channel loop, and then makes each such select of a vector load on a scalar
condition a branch around the load (CodeGenPrepare), a test and a jump per tap per vector,
while its loop unswitching takes out a few conditions at most. Measured on the AMD host
(depthwise, 2 threads): a 5x5 over 16x56x56x32 took 1.04 ns an output with SAME padding
against 0.81 with VALID (no selects); a 3x3 over 32x56x56x64, 0.49 against 0.44.

The pass finds, in each innermost loop of plain statements (lets, stores, accumulator
updates), the atoms of its selects' conditions (split at ``and``) that read no name the
loop binds and no buffer or accumulator. Where at least ``MIN_SELECTS`` selects test such
atoms (a window of 16 taps or more: for fewer, the compile time of the loop's second copy
costs more than it wins), the loop becomes ``if all atoms: <the loop with them true, its selects folded>
else: <the loop as it was>``; most positions of an image are its interior, where every
tap is inside.

Guarantees: each version computes what the loop computed, by the same operations in the
same order where it runs (the fast one only where its atoms hold, so each of its folded
selects takes the value the select would have taken); the fast version's names (its
variable and lets) are new, so each name is still bound once in the kernel; a loop with a
nested loop or branch, a parallel one, one with a renderer's hint (``block``, ``lanes``),
one of more than ``MAX_STATEMENTS`` statements and one with more than ``MAX_ATOMS`` atoms
is left as it was.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from flowjit.lowering.loops import (
    Const,
    Expr,
    If,
    Let,
    Load,
    Loop,
    Prim,
    Store,
    Update,
    Var,
    free_names,
    own_expressions,
    subexpressions,
)
from flowjit.lowering.scalar import apply

# The operations an atom may hold: none traps, whatever its operands.
_SAFE = frozenset(("add", "sub", "mul", "neg", "min", "max", "lt", "le", "gt", "ge", "eq", "ne", "and", "or", "not",
                   "select"))
# Fewer selects on invariant conditions than this: the loop stays as it is. The second copy
# costs LLVM's time at a cold call (a 5x5 depthwise convolution's first call 75-80 -> 108-111
# ms, its gradient's 244-255 -> 307-364 on the AMD host), which a few taps do not win back:
# a 3x3 (8 selects) ran 0.91-0.96x its time and a 3x3 SAME max pool's gradient 0.94x, each
# for 10-30% more at its first call; a 5x5 (24 selects) 0.80-0.84x.
MIN_SELECTS = 16
# A loop of more statements than this stays as it is: LLVM's time for its second copy grows
# with it, its branches' share of its work shrinks (a 3x3 SAME max pool's gradient, which
# recomputes each window's max at every tap: 612 statements, 0.94x its time for 414 ms at
# its first call against 298).
MAX_STATEMENTS = 256
# More distinct conditions than this (a 9x9 window has 4 kinds of them a tap row and
# column at most, 36): the loop stays as it is.
MAX_ATOMS = 64


def unswitch_bounds(body: tuple, fresh: Callable[[str], str]) -> tuple:
    """``body`` (a kernel's statements) with each innermost loop whose selects test
    conditions it does not change split into the version where they all hold and the loop
    as it was (the module docstring). ``fresh(prefix)``: a name not yet used in the kernel."""
    return _visit_all(body, fresh, {})


def _visit_all(body: tuple, fresh: Callable[[str], str], outer: dict[str, Expr]) -> tuple:
    # ``outer``: the lets bound around (and before) each statement, name -> value.
    outer = dict(outer)
    out = []
    for s in body:
        if isinstance(s, Let):
            outer[s.name] = s.value
        out.append(_visit(s, fresh, outer))
    return tuple(out)


def _visit(s, fresh: Callable[[str], str], outer: dict[str, Expr]):
    if isinstance(s, If):
        return dataclasses.replace(s, then=_visit_all(s.then, fresh, outer), orelse=_visit_all(s.orelse, fresh, outer))
    if not isinstance(s, Loop) or s.block:   # a transposing tile's rows: the renderer's own shape
        return s
    if any(isinstance(t, (Loop, If)) for t in s.body):
        return dataclasses.replace(s, body=_visit_all(s.body, fresh, outer))
    return _unswitched(s, fresh, outer)


def _unclamped(value: Expr, atoms: dict) -> Expr | None:
    """The index that ``value``, a clamp into [0, n) (``max(e, 0)``, ``min(e, n - 1)`` or
    both), keeps as it is where ``atoms`` hold (``e >= 0``, ``e < n``); None where it may
    move it."""
    if not isinstance(value, Prim) or value.op not in ("max", "min"):
        return None
    e, bound = value.args
    inner = _unclamped(e, atoms)
    e = e if inner is None else inner
    # The atoms as the lowering writes a padded read's checks (``apply``, which folds n - 1 + 1
    # back to a literal n).
    one = Const(1, bound.dtype)
    if value.op == "max":
        held = bound == Const(0, bound.dtype) and apply("ge", e, bound) in atoms
    else:
        n = bound.args[0] if isinstance(bound, Prim) and bound.op == "sub" and bound.args[1] == one \
            else apply("add", bound, one)
        held = apply("lt", e, n) in atoms
    return e if held else None


def _atoms(cond: Expr) -> list[Expr]:
    if isinstance(cond, Prim) and cond.op == "and" and cond.dtype.is_bool:
        return _atoms(cond.args[0]) + _atoms(cond.args[1])
    return [cond]


def _invariant(e: Expr, bound: set[str]) -> bool:
    """Whether ``e`` reads no name of ``bound`` and is safe to compute before the loop, which
    may run no iteration: integer index arithmetic and comparisons only (an integer division
    by a size that is 0 when the loop is empty would trap there; a float comparison may be
    poison under fast math, undefined as a branch's condition), no load or accumulator."""
    def safe(x: Expr) -> bool:
        if isinstance(x, (Var, Const)):   # a bool name may hold a float comparison
            return x.dtype.is_int
        return isinstance(x, Prim) and x.op in _SAFE and (x.dtype.is_int or x.dtype.is_bool)
    return not (free_names(e) & bound) and all(safe(x) for x in subexpressions(e))


def _unswitched(loop: Loop, fresh: Callable[[str], str], outer: dict[str, Expr]):
    if loop.parallel or loop.block or loop.lanes or not all(isinstance(t, (Let, Store, Update)) for t in loop.body):
        return loop
    bound = {loop.var} | {t.name for t in loop.body if isinstance(t, Let)}
    atoms: dict[Expr, None] = {}
    selects = 0
    for t in loop.body:
        for e in own_expressions(t):
            for x in subexpressions(e):
                if isinstance(x, Prim) and x.op == "select":
                    mine = [a for a in _atoms(x.args[0]) if _invariant(a, bound)]
                    selects += bool(mine)
                    atoms.update(dict.fromkeys(mine))
    if selects < MIN_SELECTS or len(atoms) > MAX_ATOMS or len(loop.body) > MAX_STATEMENTS:
        return loop
    true = Const(True, next(iter(atoms)).dtype)
    names = {loop.var: fresh("inner")} | {t.name: fresh("fast") for t in loop.body if isinstance(t, Let)}

    memo: dict[Expr, Expr] = {}

    def fast(e: Expr) -> Expr:
        # Memoized: a value read twice stays one node (the evaluator's and LLVM's sharing).
        got = memo.get(e)
        if got is None:
            got = memo[e] = folded(e)
        return got

    def folded(e: Expr) -> Expr:
        if e in atoms:
            return true
        if isinstance(e, Var) and e.name in copies:
            return copies[e.name]
        if isinstance(e, Var) and e.name in names:
            return Var(names[e.name], e.dtype)
        if isinstance(e, Var) and e.name in outer:
            # An index clamped outside the loop that the atoms keep in range: the index
            # itself, so the taps' addresses are one base apart by constants.
            index = _unclamped(outer[e.name], atoms)
            return e if index is None else fast(index)
        if isinstance(e, Prim):
            args = tuple(fast(a) for a in e.args)
            if e.op == "and" and e.dtype.is_bool:   # a known-true side drops out
                if args[0] == true:
                    return args[1]
                if args[1] == true:
                    return args[0]
            if e.op == "select" and args[0] == true:
                return args[1]
            return Prim(e.op, args, e.dtype)
        if isinstance(e, Load):
            return Load(e.buffer, tuple(fast(a) for a in e.index), e.dtype)
        return e

    copies: dict[str, Expr] = {}   # a let whose select folded to a name or a literal: that value
    body = []
    for t in loop.body:
        if isinstance(t, Let):
            value = fast(t.value)
            if isinstance(value, (Var, Const)):
                copies[t.name] = value
            else:
                body.append(Let(names[t.name], value))
        elif isinstance(t, Store):
            body.append(Store(t.buffer, tuple(fast(i) for i in t.index), fast(t.value)))
        else:
            body.append(Update(t.name, fast(t.value), None if t.position is None else fast(t.position)))
    inside = None
    for a in atoms:
        inside = a if inside is None else Prim("and", (inside, a), a.dtype)
    quick = dataclasses.replace(loop, var=names[loop.var], body=tuple(body))
    return If(inside, (quick,), (loop,))
