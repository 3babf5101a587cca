"""The CUDA launch planner: which launches a loop-IR ``Kernel`` becomes and how each is
sized (see ``render``'s docstring for the launch kinds): its loop nests walked, the
iterations that touch disjoint elements found (``parallel_vars``), the top-level
statements grouped into phases, and reductions over everything split into grid launches.
``Launch`` and ``CudaKernelPlan`` are what the renderer returns and the executable runs."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from flowjit.ir.dtypes import DType
from flowjit.ir.errors import FlowjitError
from flowjit.lowering import scalar
from flowjit.lowering.loops import (
    INDEX,
    Accumulator,
    AccValue,
    Const,
    Expr,
    If,
    Kernel,
    Let,
    Load,
    Loop,
    Prim,
    Store,
    Update,
    Var,
    children,
    free_names,
    substitute_lets,
    walk_statements,
)
from flowjit.lowering.scalar import apply

# The most threads of a cooperative (rows or single) launch: the size of its shared arrays.
SHARED = 256
# The most kernel parameter bytes a launch takes: CUDA's limit on every GPU and toolkit
# (32 KiB needs Volta and CUDA 12.1). A kernel needing more runs op by op.
PARAM_BYTES = 4096
# A loop whose iterations have loops inside is split over a block's threads only when the
# inner loops have fewer than 1/SPLIT_INNER as many iterations as the block has threads:
# else the threads split the inner loops (adjacent threads, adjacent elements), idle
# threads costing less than reads that do not coalesce.
SPLIT_INNER = 4
# The argument of a single launch after a grid launch: how many blocks that one ran.
GRID_BLOCKS_ARG = "_gblocks"
# A nest of per-thread column sums (elements with a loop accumulating into a register)
# with fewer columns than this runs as a block per column whose threads split the rows;
# with more, a thread per column (adjacent threads read adjacent columns). A guess: no GPU
# was at hand to measure the crossing.
COLUMN_THREADS = 2048
# The layout roles lowering.lower has index rules for (what a CUDA device can run).
LAYOUT_ROLES = ("broadcast", "permute_axes", "unit_axes_reshape", "row_major_reshape", "strided_window",
                "axis_index", "constant_pad", "join", "gather", "patches")

ARG_KINDS = ("argmax", "argmin")


class UnsupportedOp(FlowjitError):
    """A kernel the CUDA renderer has no code for (``supported`` returns the reason); the
    executable then runs the block's ops one kernel each."""


@dataclass(frozen=True)
class Launch:
    """One kernel function of a rendered kernel and how its grid is sized.

    ``kind``: "elements" (a thread per item: ``items`` is one product of trip counts per
    loop nest, the grid covers the largest), "rows" (a block per item of ``items[0]``),
    "grid" (blocks splitting ``items[0]`` iterations, their number then passed to the
    next launch as ``GRID_BLOCKS_ARG``) or "single" (one block). ``cols``: the iterations
    of each loop a block's threads run together (its thread count follows the largest).
    ``arrays``: buffer names it takes (kernel buffers, temps, scratch, partials), then
    ``sizes``: size variables it takes as int64. Counts are loop-IR expressions over the
    size variables. ``only_if``: a bool expression
    over them; the launch runs only when it holds (one of two ways to run one nest).
    """

    fname: str
    kind: str
    arrays: tuple[str, ...]
    sizes: tuple[str, ...]
    items: tuple = ()
    cols: tuple = ()
    only_if: Expr | None = None


@dataclass(frozen=True)
class CudaKernelPlan:
    """A kernel rendered for CUDA: its loop IR, the source of its functions (without
    ``PRELUDE``), their launches in order, the scratch arrays (name, dtype) that carry
    values from one launch to the next, and the arrays (name, dtype) of one result per
    block of a grid launch (as many as ``compile.GRID_BLOCKS``)."""

    name: str
    kernel: Kernel
    source: str
    launches: tuple[Launch, ...]
    scratch: tuple[tuple[str, DType], ...] = ()
    partials: tuple[tuple[str, DType], ...] = ()


# ---- walking the loop IR -----------------------------------------------------------------------
def _exprs_of(s: object) -> Iterator[Expr]:
    """The expressions of statement ``s`` itself (not of the statements nested in it)."""
    if isinstance(s, Loop):
        yield from (s.start, s.stop)
    elif isinstance(s, Let):
        yield s.value
    elif isinstance(s, Store):
        yield from (*s.index, s.value)
    elif isinstance(s, Accumulator):
        yield s.start
    elif isinstance(s, Update):
        yield s.value
        if s.position is not None:
            yield s.position
    elif isinstance(s, If):
        yield s.cond


def _subexprs(e: Expr) -> Iterator[Expr]:
    yield e
    for c in children(e):
        yield from _subexprs(c)


def _all_exprs(body: Iterable) -> Iterator[Expr]:
    for s in walk_statements(body):
        for e in _exprs_of(s):
            yield from _subexprs(e)


@dataclass
class Effects:
    """What a list of statements reads, writes, binds and updates."""

    loads: set
    stores: set
    bound: set
    updated: set
    read_accs: set
    names: set  # every variable and accumulator name its expressions use


def effects_of(body: Iterable) -> Effects:
    fx = Effects(set(), set(), set(), set(), set(), set())
    body = tuple(body)
    for s in walk_statements(body):
        if isinstance(s, Store):
            fx.stores.add(s.buffer)
        elif isinstance(s, Loop):
            fx.bound.add(s.var)
        elif isinstance(s, (Let, Accumulator)):
            fx.bound.add(s.name)
        elif isinstance(s, Update):
            fx.updated.add(s.name)
    for e in _all_exprs(body):
        if isinstance(e, Load):
            fx.loads.add(e.buffer)
        elif isinstance(e, AccValue):
            fx.read_accs.add(e.name)
            fx.names.add(e.name)
        elif isinstance(e, Var):
            fx.names.add(e.name)
    return fx


def _linear(e: Expr, names: set) -> dict | None:
    """``e`` as ``{name: c}`` over the names of ``names`` it uses (``e`` is the sum of
    ``c * name`` and a rest that uses none of them); None when it is not linear in them."""
    if isinstance(e, Var) and e.name in names:
        return {e.name: 1}
    if isinstance(e, Prim) and e.op in ("add", "sub"):
        a, b = (_linear(x, names) for x in e.args)
        if a is None or b is None:
            return None
        sign = 1 if e.op == "add" else -1
        return {n: a.get(n, 0) + sign * b.get(n, 0) for n in a.keys() | b.keys()}
    if isinstance(e, Prim) and e.op == "mul":
        x, y = e.args
        if isinstance(y, Const):
            x, y = y, x
        if isinstance(x, Const):
            lin = _linear(y, names)
            return None if lin is None else {n: c * int(x.value) for n, c in lin.items()}
    return None if free_names(e) & names else {}


def _injective(e: Expr, vs: tuple, inside: set, spans: dict) -> bool:
    """Whether distinct values of the variables ``vs`` (together) give distinct values of
    ``e`` whatever the other names of ``inside`` (bound in the loops being split) hold:
    ``e`` is a sum of ``c_u * u`` plus a rest fixed for the whole region, and for each
    ``v`` of ``vs``, ``|c_v| > sum |c_u| * span_u`` over the other names ``u`` except the
    variables of ``vs`` with a larger ``|c|`` (``spans``: the largest minus the smallest
    value of a loop variable of constant range). For one variable: ``c * v`` beside
    smaller terms; for a blocked sum's ``rb * 128 + rj``, both ``rb`` and ``(rb, rj)``."""
    lin = _linear(e, inside | set(vs))
    if lin is None or not all(lin.get(v) for v in vs):
        return False
    for v in vs:
        spread = 0
        for u, c in lin.items():
            if u == v or not c or (u in vs and abs(c) > abs(lin[v])):
                continue
            if u not in spans:
                return False
            spread += abs(c) * spans[u]
        if spread >= abs(lin[v]):
            return False
    return True


def _stored_accesses(region: tuple) -> tuple[list, set, dict]:
    """For each buffer ``region`` stores into, the indices of every access to it (Lets
    substituted); the names bound in the region; the spans of its constant loops."""
    fx = effects_of(region)
    defs = {s.name: s.value for s in walk_statements(region) if isinstance(s, Let)}
    accesses: dict[str, list] = {b: [] for b in fx.stores}
    for s in walk_statements(region):
        if isinstance(s, Store):
            accesses[s.buffer].append(tuple(substitute_lets(i, defs) for i in s.index))
    for e in _all_exprs(region):
        if isinstance(e, Load) and e.buffer in accesses:
            accesses[e.buffer].append(tuple(substitute_lets(i, defs) for i in e.index))
    spans = {s.var: int(s.stop.value) - int(s.start.value) - 1 for s in walk_statements(region)
             if isinstance(s, Loop) and isinstance(s.start, Const) and isinstance(s.stop, Const) and s.step == 1}
    return list(accesses.values()), fx.bound, spans


def _disjoint(vs: tuple, accesses: list, bound: set, spans: dict) -> bool:
    for idxs in accesses:
        rank = len(idxs[0])
        if not any(all(len(ix) == rank and ix[p] == idxs[0][p] for ix in idxs)
                   and _injective(idxs[0][p], vs, bound, spans) for p in range(rank)):
            return False
    return True


def parallel_vars(loop_vars: list, region: tuple) -> set:
    """The loop variables of ``loop_vars`` whose iterations touch disjoint elements of every
    buffer ``region`` (a tuple of statements, the loops included) stores into: for each
    such buffer, one dimension at which every access in the region has the same index,
    injective in the variable (``_injective``)."""
    found = _stored_accesses(region)
    return {v for v in loop_vars if _disjoint((v,), *found)}


def jointly_parallel(loop_vars: list, region: tuple) -> bool:
    """Whether distinct values of ``loop_vars`` taken together (one flat index space split
    over threads) touch disjoint elements of every buffer ``region`` stores into: as
    ``parallel_vars``, injective in the variables together."""
    return _disjoint(tuple(loop_vars), *_stored_accesses(region))


@dataclass
class LoopNest:
    """A perfect loop nest: ``loops[k]``'s body is ``lets[k]`` then ``loops[k + 1]`` (the last
    loop's: ``lets[-1]`` then ``inner``)."""

    loops: list
    lets: list
    inner: tuple


def loop_nest(loop: Loop) -> LoopNest:
    loops, lets = [loop], []
    while True:
        body = loops[-1].body
        n = next((k for k, s in enumerate(body) if not isinstance(s, Let)), len(body))
        lets.append(body[:n])
        rest = body[n:]
        if len(rest) == 1 and isinstance(rest[0], Loop):
            loops.append(rest[0])
            continue
        return LoopNest(loops, lets, rest)


def rectangular(loop: Loop, bound: set) -> bool:
    return not ((free_names(loop.start) | free_names(loop.stop)) & bound)


def inner_work(body: tuple, bound: set) -> Expr | None:
    """The iterations of the loops in ``body`` (nested ones multiplied through), as an
    expression of names bound outside ``bound``; None when a loop's bounds use one."""
    total: Expr = Const(0, INDEX)
    for s in body:
        if isinstance(s, Loop):
            inner = inner_work(s.body, bound)
            if inner is None or not rectangular(s, bound):
                return None
            trips = apply("max", trip_count(s), Const(0, INDEX))
            total = apply("add", total, apply("mul", trips, apply("max", inner, Const(1, INDEX))))
        elif isinstance(s, If):
            a, b = inner_work(s.then, bound), inner_work(s.orelse, bound)
            if a is None or b is None:
                return None
            total = apply("add", total, apply("max", a, b))
    return total


def _simple(body: tuple) -> bool:
    """No loop and no accumulator in ``body``: straight-line code for one thread."""
    return not any(isinstance(s, (Loop, Accumulator, Update)) for s in walk_statements(body))


# ---- phases: the launches of a kernel -----------------------------------------------------------
@dataclass
class Phase:
    kind: str                 # "elements", "rows", "columns", "single", "grid"
    stmts: list               # top-level statements (for elements: loops; in-order Lets in single)
    nests: list               # elements: (nest, parallel vars) per loop; rows: (nest, row depth)
    owned: set                # top-level Let and accumulator names computed here
    merged: tuple = ()        # single after a grid launch: the Accumulators it combines first


def grid_splits(ph: Phase) -> list[Phase]:
    """A single phase with a loop over independent iterations that updates accumulators
    declared before it and touched by nothing in between (a sum over everything), as
    launches: the statements before the loop (single), the loop as a grid launch (its
    iterations over many blocks, each block's partial results into ``partial_name``
    arrays), and the statements after it (single, combining those results first), split
    again at its next such loop. Other phases as they are."""
    if ph.kind != "single":
        return [ph]
    stmts = list(ph.stmts)
    for m, loop in enumerate(stmts):
        accs = _grid_accumulators(stmts[:m], loop)
        if accs is None:
            continue
        before = stmts[:m]
        used = effects_of([t for t in before if not isinstance(t, Accumulator)])
        # Declarations nothing before the loop touches wait for their own launch.
        late = [t for t in before if isinstance(t, Accumulator) and t.name not in accs
                and t.name not in used.updated | used.read_accs]
        pre = [t for t in before if not (isinstance(t, Accumulator) and (t.name in accs or t in late))]
        # An accumulator of the statements before the loop lives in their launch's block.
        if effects_of(stmts[m + 1:]).updated & ({t.name for t in pre if isinstance(t, Accumulator)}
                                              | {a.name for a in ph.merged}):
            continue
        declared = {t.name for t in pre if isinstance(t, (Let, Accumulator))}
        pre_owned = (declared | {a.name for a in ph.merged}) & ph.owned
        out = [Phase("single", pre, [], pre_owned, ph.merged)] if pre or ph.merged else []
        grid = [t for t in before if isinstance(t, Accumulator) and t.name in accs]
        out.append(Phase("grid", [*grid, loop], [], set(accs)))
        rest = Phase("single", late + stmts[m + 1:], [], ph.owned - pre_owned, tuple(grid))
        return out + grid_splits(rest)
    return [ph]


def _grid_accumulators(before: list, loop: object) -> set | None:
    """The accumulators ``loop`` updates when it can be a grid launch after ``before``:
    all declared there (at the kind's identity; argmax's start is never read) and touched
    by nothing else there, its iterations independent, its bounds fixed."""
    if not isinstance(loop, Loop):
        return None
    fx = effects_of((loop,))
    accs = fx.updated - fx.bound
    decls = {t.name: t for t in before if isinstance(t, Accumulator)}
    if not accs or not accs <= decls.keys() or fx.read_accs & accs or not rectangular(loop, fx.bound):
        return None
    if any(decls[a].kind not in ARG_KINDS and decls[a].start != scalar.start_value(decls[a].kind, decls[a].dtype)
           for a in accs):
        return None
    others = effects_of([t for t in before if not (isinstance(t, Accumulator) and t.name in accs)])
    if (others.updated | others.read_accs) & accs or loop.var not in parallel_vars([loop.var], (loop,)):
        return None
    return accs


def partial_name(acc: str, position: bool = False) -> str:
    """The parameter name of the array of per-block results of accumulator ``acc`` of a
    grid launch (``position``: of an argmax's positions)."""
    return f"_g_{python_name(acc)}{'_p' if position else ''}"


def _classify(s: object, top_accs: set) -> tuple:
    """The phase kind of top-level statement ``s`` and its nest information."""
    if not isinstance(s, Loop):
        return "single", None
    fx = effects_of((s,))
    if fx.updated & top_accs:
        return "single", None
    nest = loop_nest(s)
    bound = fx.bound
    vars_ = [lp.var for lp in nest.loops]
    par = parallel_vars(vars_, (s,))
    if _simple(nest.inner):
        if all(rectangular(lp, bound) for lp in nest.loops):
            chosen = [v for v in vars_ if v in par]
            if chosen:
                return "elements", (nest, chosen)
        return "single", None
    depth = 0
    while depth < len(vars_) and vars_[depth] in par and rectangular(nest.loops[depth], bound):
        depth += 1
    return ("rows", (nest, depth)) if depth else ("single", None)


def phases_of(k: Kernel) -> tuple[list, dict]:
    """The launches of ``k`` as phases, and the floating top-level Lets (name -> Let):
    those computed again by each launch that needs them."""
    top_accs = {s.name for s in k.body if isinstance(s, Accumulator)}
    kinds = [("let", None) if isinstance(s, Let) else _classify(s, top_accs) for s in k.body]
    # The statements touching one top-level accumulator run in one launch (its partial
    # results live in one block's registers).
    for acc in top_accs:
        touching = [n for n, s in enumerate(k.body) if not isinstance(s, Let)
                    and (acc in effects_of((s,)).updated or (isinstance(s, Accumulator) and s.name == acc))]
        for n in range(touching[0], touching[-1] + 1):
            if kinds[n][0] != "let":
                kinds[n] = ("single", None)
    phases: list[Phase] = []
    floating: dict = {}
    for s, (kind, info) in zip(k.body, kinds):
        last = phases[-1] if phases else None
        if kind == "let":
            # A Let reading what a single launch computes (its accumulators, Lets, stores)
            # is computed there, in order (later launches load it from scratch); any other,
            # by each launch that needs it, first.
            fx = effects_of((s,))
            if last is not None and last.kind == "single" and (
                    fx.names & last.owned or fx.loads & effects_of(last.stmts).stores):
                last.stmts.append(s)
                last.owned.add(s.name)
            else:
                floating[s.name] = s
            continue
        owned = {s.name} if isinstance(s, Accumulator) else set()
        if kind == "single" and last is not None and last.kind == "single":
            last.stmts.append(s)
            last.owned |= owned
            continue
        if (kind == "elements" and last is not None and last.kind == "elements"
                and _independent(last.stmts, (s, *_lets_used(s, floating)))):
            last.stmts.append(s)
            last.nests.append(info)
            continue
        phases.append(Phase(kind, [s], [info] if info is not None else [], owned))
    return phases, floating


def split_phase(ph: Phase) -> tuple[Phase, Phase] | None:
    """An elements phase as two: its nests in halves, or its one nest's outputs (None when
    it stores one output)."""
    if len(ph.stmts) > 1:
        h = len(ph.stmts) // 2
        return (Phase("elements", ph.stmts[:h], ph.nests[:h], set()),
                Phase("elements", ph.stmts[h:], ph.nests[h:], set()))
    halves = _split_outputs(ph.stmts[0])
    if halves is None:
        return None
    return tuple(Phase("elements", [lp], [_classify(lp, set())[1]], set()) for lp in halves)


def _split_outputs(loop: Loop) -> tuple[Loop, Loop] | None:
    """A nest with straight-line innermost code as two nests storing half its outputs each,
    each keeping only the Lets its stores need."""
    nest = loop_nest(loop)
    units = [s for s in nest.inner if not isinstance(s, Let)]
    if len(units) < 2:
        return None
    defs = {s.name: s.value for body in (*nest.lets, nest.inner) for s in body if isinstance(s, Let)}

    def rebuild(kept: list) -> Loop:
        need, stack = set(), list(effects_of(kept).names)
        while stack:
            n = stack.pop()
            if n not in need:
                need.add(n)
                if n in defs:
                    stack.extend(free_names(defs[n]))
        kept_ids = {id(s) for s in kept}
        body: tuple = tuple(s for s in nest.inner if (s.name in need if isinstance(s, Let) else id(s) in kept_ids))
        for k in range(len(nest.loops) - 1, -1, -1):
            lets = tuple(s for s in nest.lets[k] if s.name in need)
            body = (dataclasses.replace(nest.loops[k], body=lets + body),)
        return body[0]
    h = len(units) // 2
    return rebuild(units[:h]), rebuild(units[h:])


def _lets_used(s: object, floating: dict) -> list:
    """The floating Lets statement ``s`` reads, directly or through one another."""
    out, stack = {}, list(effects_of((s,)).names)
    while stack:
        n = stack.pop()
        if n in floating and n not in out:
            out[n] = floating[n]
            stack.extend(free_names(floating[n].value))
    return list(out.values())


def per_thread(nest: LoopNest, chosen: list, k: int = 0) -> tuple:
    """What one thread of an elements launch runs: the nest without its ``chosen`` loops
    (their variables are bound from the thread's element), the others as loops."""
    rest = nest.lets[k] + (per_thread(nest, chosen, k + 1) if k + 1 < len(nest.loops) else nest.inner)
    lp = nest.loops[k]
    return rest if lp.var in chosen else (dataclasses.replace(lp, body=rest),)


_REGISTER_KINDS = ("sum", "prod", "max", "min", "any", "all")


def register_candidate(loop: Loop) -> tuple | None:
    """(the store, the accumulator kind, the value combined) when ``loop`` accumulates into
    one buffer element (see ``Renderer.in_registers``), else None."""
    fx = effects_of((loop,))
    for b in sorted(fx.stores):
        stores = [s for s in walk_statements((loop,)) if isinstance(s, Store) and s.buffer == b]
        loads = [e for e in _all_exprs((loop,)) if isinstance(e, Load) and e.buffer == b]
        if len(stores) != 1 or len(loads) != 1:
            continue
        store, load = stores[0], loads[0]
        if load.index != store.index or any(free_names(i) & fx.bound for i in store.index):
            continue
        for kind in _REGISTER_KINDS:
            for v in _subexprs(store.value):
                if v is not load and load not in _subexprs(v) and scalar.combine(kind, load, v) == store.value:
                    return store, kind, v
    return None


def replace_statement(s: object, old: object, new: object) -> object:
    """Statement ``s`` with statement ``old`` (the same object) inside it replaced by ``new``."""
    if s is old:
        return new
    if isinstance(s, Loop):
        return dataclasses.replace(s, body=tuple(replace_statement(c, old, new) for c in s.body))
    if isinstance(s, If):
        return dataclasses.replace(s, then=tuple(replace_statement(c, old, new) for c in s.then),
                                   orelse=tuple(replace_statement(c, old, new) for c in s.orelse))
    return s


def _independent(earlier: list, later: tuple) -> bool:
    """Whether ``later`` (statements and the Lets they read) neither reads nor writes what
    ``earlier`` writes, nor writes what it reads: then one launch can run both."""
    a, b = effects_of(earlier), effects_of(later)
    return not (b.loads & a.stores or b.stores & (a.loads | a.stores))


def host_value(e: Expr, sizes: dict) -> int | None:
    """Index (or bool) expression ``e`` evaluated on the host from the size variables'
    values (None when it reads anything else)."""
    if isinstance(e, Const):
        return int(e.value)
    if isinstance(e, Var):
        return sizes.get(e.name)
    if isinstance(e, Prim) and not e.dtype.is_float:
        args = [host_value(a, sizes) for a in e.args]
        if any(a is None for a in args):
            return None
        return int(scalar.reference(e.op, e.dtype)(*[scalar.np_scalar(a, x.dtype) for a, x in zip(args, e.args)]))
    return None


def python_name(name: str) -> str:
    """A loop-IR name as a Python identifier (the renderer's own names start with ``_``)."""
    if name.startswith("_"):
        return name
    safe = "".join(ch if ch.isalnum() else "_" for ch in name)
    return safe if safe.isidentifier() else "v" + safe


def trip_count(lp: Loop) -> Expr:
    if lp.step == 1:
        return apply("sub", lp.stop, lp.start)
    span = apply("add", apply("sub", lp.stop, lp.start), Const(lp.step - 1, INDEX))
    return apply("idiv", span, Const(lp.step, INDEX))
