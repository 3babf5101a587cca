"""The CUDA renderer: a loop-IR ``Kernel`` (``flowjit.lowering``) -> numba.cuda kernel
functions (Python source written from the loop IR's data structures) and their launches.

The kernel's top-level statements become launches, in order (a launch boundary is the
grid-wide barrier between them):

- ``elements``: a top-level loop nest whose innermost body has no loop or accumulator.
  Its loops whose iterations touch disjoint elements of every buffer the nest writes
  (``_parallel_vars``) are flattened into one index that the whole grid strides over, a
  thread per element; the others run inside, per thread, in their order (a column sum
  into a temp buffer: a thread per column, its rows in a loop, the sum in a register;
  with fewer than ``COLUMN_THREADS`` columns, a block per column instead, its threads
  splitting the rows: ``columns``, chosen at run time by ``Launch.only_if``). Consecutive elements
  nests that do not read what the other writes share one launch; a launch that would
  take more than ``PARAM_BYTES`` of parameters is split by outputs.
- ``rows``: a nest whose body has loops or accumulators (softmax, layernorm, a row's
  argmax): its leading parallel loops give the rows, a thread block per row (grid-stride
  over rows); the block's threads run the row's body together (``_Writer.uniform``).
- ``single``: what is neither (a 0-d output, the statements that touch a top-level
  accumulator): the same cooperative code in one block.
- ``grid``: a reduction over everything, when its statements start with the accumulators
  and a loop over independent iterations updating them: the iterations spread over up
  to ``compile.GRID_BLOCKS`` blocks (a block per iteration whose threads split its loops,
  or a thread per iteration when they have too few), one partial result per block in a
  ``partial_name`` array, which the single launch after it combines first.

Inside a block, statements run "uniformly" (every thread computes every ``Let``; a store
of a row's value is thread 0's) and a loop whose iterations are independent is split
over the threads (a strided loop; a perfect nest of such loops as one flat index). When
its iterations have loops of their own, the choice is made at run time: with enough
inner iterations for the block (``SPLIT_INNER``), the threads go through the iterations
together and split the inner loops (adjacent threads read adjacent elements), else each
takes whole iterations. An accumulator updated in a split loop holds a partial result
per thread; the first read of its value combines the partials with a tree in shared memory (``scalar.combine``; argmax
and argmin by value, then position, so the first winner wins as in NumPy), and its value
is then the same in every thread. ``cuda.syncthreads()`` separates statements where one
thread may read or write what another wrote or read before. A value computed in one
launch and needed by a later one (a ``single`` launch's sum read by an elementwise nest) travels in
a one-element scratch array; sizes are int64 arguments read from the shapes at run time,
so one source serves every batch size.

Scalar semantics are ``flowjit.lowering.scalar``'s, op by op: every op is one line binding
a local of its dtype (numba would widen int32 arithmetic and float32 literals, so both
are spelled with their NumPy type), float->int casts give NumPy's x86 result for NaN and
out-of-range values, integer division truncates as the vocabulary says, and the math
intrinsics are libdevice's on a GPU and NumPy's scalar functions under the simulator
(``PRELUDE``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from flowjit.ir.dtypes import DType, int32, int64
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
                "axis_index", "constant_pad", "join")

# Math intrinsics the simulator computes with NumPy functions of other names (the rest: np.<name>).
_SIMULATOR_MATH = {"erf": "_erf", "atan2": "np.arctan2", "pow": "np.power", "asin": "np.arcsin",
                   "acos": "np.arccos", "atan": "np.arctan", "asinh": "np.arcsinh", "acosh": "np.arccosh",
                   "atanh": "np.arctanh"}
_MATH = sorted(scalar.INTRINSICS - {"ipow"})  # ipow is written inline (a loop)

PRELUDE = f'''\
# Generated by flowjit from the loop IR: numba.cuda kernels (see flowjit.codegen_cuda.render).
import math
import numpy as np
from numba import cuda
from numba.core import config

# Each intrinsic of flowjit.lowering.scalar as NAME_f32 and NAME_f64.
if config.ENABLE_CUDASIM:
    # The simulator runs this module as Python, thread by thread: NumPy's scalar functions
    # keep float32 in float32 and give inf or nan where math's raise, as the GPU does.
    def _erf(x):
        return type(x)(math.erf(x))
{"".join(f"    {op}_f32 = {op}_f64 = {_SIMULATOR_MATH.get(op, 'np.' + op)}{chr(10)}" for op in _MATH)}\
else:
    # libdevice: rint rounds half to even, as np.rint.
    from numba.cuda import libdevice
{"".join(f"    {op}_f32, {op}_f64 = libdevice.{op}f, libdevice.{op}{chr(10)}" for op in _MATH)}\
'''

_ARITH = {"add": "+", "sub": "-", "mul": "*"}
_CMP = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
_LOGIC = {"and": "&", "or": "|", "xor": "^"}
_ARG_KINDS = ("argmax", "argmin")


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


def _nested(s: object) -> tuple:
    if isinstance(s, Loop):
        return s.body
    if isinstance(s, If):
        return s.then + s.orelse
    return ()


def _statements(body: Iterable) -> Iterator:
    """Every statement of ``body``, nested ones included."""
    for s in body:
        yield s
        yield from _statements(_nested(s))


def _subexprs(e: Expr) -> Iterator[Expr]:
    yield e
    for c in children(e):
        yield from _subexprs(c)


def _all_exprs(body: Iterable) -> Iterator[Expr]:
    for s in _statements(body):
        for e in _exprs_of(s):
            yield from _subexprs(e)


@dataclass
class _Effects:
    """What a list of statements reads, writes, binds and updates."""

    loads: set
    stores: set
    bound: set
    updated: set
    read_accs: set
    names: set  # every variable and accumulator name its expressions use


def _effects(body: Iterable) -> _Effects:
    fx = _Effects(set(), set(), set(), set(), set(), set())
    body = tuple(body)
    for s in _statements(body):
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


def _substitute(e: Expr, defs: dict) -> Expr:
    """``e`` with the ``Let`` names of ``defs`` replaced by their (substituted) values."""
    if isinstance(e, Var) and e.name in defs:
        return _substitute(defs[e.name], defs)
    if isinstance(e, Prim):
        return Prim(e.op, tuple(_substitute(a, defs) for a in e.args), e.dtype)
    if isinstance(e, Load):
        return Load(e.buffer, tuple(_substitute(a, defs) for a in e.index), e.dtype)
    return e


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


def _injective(e: Expr, v: str, inside: set, spans: dict) -> bool:
    """Whether distinct values of ``v`` give distinct values of ``e`` whatever the other
    names of ``inside`` (bound in the loops being split) hold: ``e`` is ``c * v`` plus
    ``c_u * u`` for loop variables ``u`` of constant range (``spans``: their largest
    minus smallest value) with ``|c| > sum |c_u| * span_u`` (a blocked sum's ``rb * 128 +
    rj``), plus a rest fixed for the whole region."""
    lin = _linear(e, inside | {v})
    if lin is None or not lin.get(v):
        return False
    spread = 0
    for u, c in lin.items():
        if u != v and c:
            if u not in spans:
                return False
            spread += abs(c) * spans[u]
    return spread < abs(lin[v])


def _parallel_vars(loop_vars: list, region: tuple) -> set:
    """The loop variables of ``loop_vars`` whose iterations touch disjoint elements of every
    buffer ``region`` (a tuple of statements, the loops included) stores into: for each
    such buffer, one dimension at which every access in the region has the same index,
    injective in the variable (``_injective``)."""
    fx = _effects(region)
    defs = {s.name: s.value for s in _statements(region) if isinstance(s, Let)}
    accesses: dict[str, list] = {b: [] for b in fx.stores}
    for s in _statements(region):
        if isinstance(s, Store):
            accesses[s.buffer].append(tuple(_substitute(i, defs) for i in s.index))
    for e in _all_exprs(region):
        if isinstance(e, Load) and e.buffer in accesses:
            accesses[e.buffer].append(tuple(_substitute(i, defs) for i in e.index))
    spans = {s.var: int(s.stop.value) - int(s.start.value) - 1 for s in _statements(region)
             if isinstance(s, Loop) and isinstance(s.start, Const) and isinstance(s.stop, Const) and s.step == 1}
    out = set()
    for v in loop_vars:
        ok = True
        for idxs in accesses.values():
            rank = len(idxs[0])
            if not any(all(len(ix) == rank and ix[p] == idxs[0][p] for ix in idxs)
                       and _injective(idxs[0][p], v, fx.bound, spans) for p in range(rank)):
                ok = False
                break
        if ok:
            out.add(v)
    return out


@dataclass
class _Nest:
    """A perfect loop nest: ``loops[k]``'s body is ``lets[k]`` then ``loops[k + 1]`` (the last
    loop's: ``lets[-1]`` then ``inner``)."""

    loops: list
    lets: list
    inner: tuple


def _nest(loop: Loop) -> _Nest:
    loops, lets = [loop], []
    while True:
        body = loops[-1].body
        n = next((k for k, s in enumerate(body) if not isinstance(s, Let)), len(body))
        lets.append(body[:n])
        rest = body[n:]
        if len(rest) == 1 and isinstance(rest[0], Loop):
            loops.append(rest[0])
            continue
        return _Nest(loops, lets, rest)


def _rectangular(loop: Loop, bound: set) -> bool:
    return not ((free_names(loop.start) | free_names(loop.stop)) & bound)


def _work(body: tuple, bound: set) -> Expr | None:
    """The iterations of the loops in ``body`` (nested ones multiplied through), as an
    expression of names bound outside ``bound``; None when a loop's bounds use one."""
    total: Expr = Const(0, INDEX)
    for s in body:
        if isinstance(s, Loop):
            inner = _work(s.body, bound)
            if inner is None or not _rectangular(s, bound):
                return None
            trips = apply("max", _trip_expr(s), Const(0, INDEX))
            total = apply("add", total, apply("mul", trips, apply("max", inner, Const(1, INDEX))))
        elif isinstance(s, If):
            a, b = _work(s.then, bound), _work(s.orelse, bound)
            if a is None or b is None:
                return None
            total = apply("add", total, apply("max", a, b))
    return total


def _simple(body: tuple) -> bool:
    """No loop and no accumulator in ``body``: straight-line code for one thread."""
    return not any(isinstance(s, (Loop, Accumulator, Update)) for s in _statements(body))


# ---- phases: the launches of a kernel -----------------------------------------------------------
@dataclass
class _Phase:
    kind: str                 # "elements", "rows", "columns", "single", "grid"
    stmts: list               # top-level statements (for elements: loops; in-order Lets in single)
    nests: list               # elements: (nest, parallel vars) per loop; rows: (nest, row depth)
    owned: set                # top-level Let and accumulator names computed here
    merged: tuple = ()        # single after a grid launch: the Accumulators it combines first


def _grid_splits(ph: _Phase) -> list[_Phase]:
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
        used = _effects([t for t in before if not isinstance(t, Accumulator)])
        # Declarations nothing before the loop touches wait for their own launch.
        late = [t for t in before if isinstance(t, Accumulator) and t.name not in accs
                and t.name not in used.updated | used.read_accs]
        pre = [t for t in before if not (isinstance(t, Accumulator) and (t.name in accs or t in late))]
        # An accumulator of the statements before the loop lives in their launch's block.
        if _effects(stmts[m + 1:]).updated & ({t.name for t in pre if isinstance(t, Accumulator)}
                                              | {a.name for a in ph.merged}):
            continue
        declared = {t.name for t in pre if isinstance(t, (Let, Accumulator))}
        pre_owned = (declared | {a.name for a in ph.merged}) & ph.owned
        out = [_Phase("single", pre, [], pre_owned, ph.merged)] if pre or ph.merged else []
        grid = [t for t in before if isinstance(t, Accumulator) and t.name in accs]
        out.append(_Phase("grid", [*grid, loop], [], set(accs)))
        rest = _Phase("single", late + stmts[m + 1:], [], ph.owned - pre_owned, tuple(grid))
        return out + _grid_splits(rest)
    return [ph]


def _grid_accumulators(before: list, loop: object) -> set | None:
    """The accumulators ``loop`` updates when it can be a grid launch after ``before``:
    all declared there (at the kind's identity; argmax's start is never read) and touched
    by nothing else there, its iterations independent, its bounds fixed."""
    if not isinstance(loop, Loop):
        return None
    fx = _effects((loop,))
    accs = fx.updated - fx.bound
    decls = {t.name: t for t in before if isinstance(t, Accumulator)}
    if not accs or not accs <= decls.keys() or fx.read_accs & accs or not _rectangular(loop, fx.bound):
        return None
    if any(decls[a].kind not in _ARG_KINDS and decls[a].start != scalar.start_value(decls[a].kind, decls[a].dtype)
           for a in accs):
        return None
    others = _effects([t for t in before if not (isinstance(t, Accumulator) and t.name in accs)])
    if (others.updated | others.read_accs) & accs or loop.var not in _parallel_vars([loop.var], (loop,)):
        return None
    return accs


def partial_name(acc: str, position: bool = False) -> str:
    """The parameter name of the array of per-block results of accumulator ``acc`` of a
    grid launch (``position``: of an argmax's positions)."""
    return f"_g_{_ident(acc)}{'_p' if position else ''}"


def _classify(s: object, top_accs: set) -> tuple:
    """The phase kind of top-level statement ``s`` and its nest information."""
    if not isinstance(s, Loop):
        return "single", None
    fx = _effects((s,))
    if fx.updated & top_accs:
        return "single", None
    nest = _nest(s)
    bound = fx.bound
    vars_ = [lp.var for lp in nest.loops]
    par = _parallel_vars(vars_, (s,))
    if _simple(nest.inner):
        if all(_rectangular(lp, bound) for lp in nest.loops):
            chosen = [v for v in vars_ if v in par]
            if chosen:
                return "elements", (nest, chosen)
        return "single", None
    depth = 0
    while depth < len(vars_) and vars_[depth] in par and _rectangular(nest.loops[depth], bound):
        depth += 1
    return ("rows", (nest, depth)) if depth else ("single", None)


def _phases(k: Kernel) -> tuple[list, dict]:
    """The launches of ``k`` as phases, and the floating top-level Lets (name -> Let):
    those computed again by each launch that needs them."""
    top_accs = {s.name for s in k.body if isinstance(s, Accumulator)}
    kinds = [("let", None) if isinstance(s, Let) else _classify(s, top_accs) for s in k.body]
    # The statements touching one top-level accumulator run in one launch (its partial
    # results live in one block's registers).
    for acc in top_accs:
        touching = [n for n, s in enumerate(k.body) if not isinstance(s, Let)
                    and (acc in _effects((s,)).updated or (isinstance(s, Accumulator) and s.name == acc))]
        for n in range(touching[0], touching[-1] + 1):
            if kinds[n][0] != "let":
                kinds[n] = ("single", None)
    phases: list[_Phase] = []
    floating: dict = {}
    for s, (kind, info) in zip(k.body, kinds):
        last = phases[-1] if phases else None
        if kind == "let":
            # A Let reading what a single launch computes (its accumulators, Lets, stores)
            # is computed there, in order (later launches load it from scratch); any other,
            # by each launch that needs it, first.
            fx = _effects((s,))
            if last is not None and last.kind == "single" and (
                    fx.names & last.owned or fx.loads & _effects(last.stmts).stores):
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
        phases.append(_Phase(kind, [s], [info] if info is not None else [], owned))
    return phases, floating


def _split_phase(ph: _Phase) -> tuple[_Phase, _Phase] | None:
    """An elements phase as two: its nests in halves, or its one nest's outputs (None when
    it stores one output)."""
    if len(ph.stmts) > 1:
        h = len(ph.stmts) // 2
        return (_Phase("elements", ph.stmts[:h], ph.nests[:h], set()),
                _Phase("elements", ph.stmts[h:], ph.nests[h:], set()))
    halves = _split_outputs(ph.stmts[0])
    if halves is None:
        return None
    return tuple(_Phase("elements", [lp], [_classify(lp, set())[1]], set()) for lp in halves)


def _split_outputs(loop: Loop) -> tuple[Loop, Loop] | None:
    """A nest with straight-line innermost code as two nests storing half its outputs each,
    each keeping only the Lets its stores need."""
    nest = _nest(loop)
    units = [s for s in nest.inner if not isinstance(s, Let)]
    if len(units) < 2:
        return None
    defs = {s.name: s.value for body in (*nest.lets, nest.inner) for s in body if isinstance(s, Let)}

    def rebuild(kept: list) -> Loop:
        need, stack = set(), list(_effects(kept).names)
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
    out, stack = {}, list(_effects((s,)).names)
    while stack:
        n = stack.pop()
        if n in floating and n not in out:
            out[n] = floating[n]
            stack.extend(free_names(floating[n].value))
    return list(out.values())


def _per_thread(nest: _Nest, chosen: list, k: int = 0) -> tuple:
    """What one thread of an elements launch runs: the nest without its ``chosen`` loops
    (their variables are bound from the thread's element), the others as loops."""
    rest = nest.lets[k] + (_per_thread(nest, chosen, k + 1) if k + 1 < len(nest.loops) else nest.inner)
    lp = nest.loops[k]
    return rest if lp.var in chosen else (dataclasses.replace(lp, body=rest),)


_REGISTER_KINDS = ("sum", "prod", "max", "min", "any", "all")


def _register_candidate(loop: Loop) -> tuple | None:
    """(the store, the accumulator kind, the value combined) when ``loop`` accumulates into
    one buffer element (see ``_Renderer.in_registers``), else None."""
    fx = _effects((loop,))
    for b in sorted(fx.stores):
        stores = [s for s in _statements((loop,)) if isinstance(s, Store) and s.buffer == b]
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


def _replace_stmt(s: object, old: object, new: object) -> object:
    """Statement ``s`` with statement ``old`` (the same object) inside it replaced by ``new``."""
    if s is old:
        return new
    if isinstance(s, Loop):
        return dataclasses.replace(s, body=tuple(_replace_stmt(c, old, new) for c in s.body))
    if isinstance(s, If):
        return dataclasses.replace(s, then=tuple(_replace_stmt(c, old, new) for c in s.then),
                                   orelse=tuple(_replace_stmt(c, old, new) for c in s.orelse))
    return s


def _independent(earlier: list, later: tuple) -> bool:
    """Whether ``later`` (statements and the Lets they read) neither reads nor writes what
    ``earlier`` writes, nor writes what it reads: then one launch can run both."""
    a, b = _effects(earlier), _effects(later)
    return not (b.loads & a.stores or b.stores & (a.loads | a.stores))


# ---- source -------------------------------------------------------------------------------------
def _np(d: DType) -> str:
    return "np.bool_" if d.is_bool else f"np.{d.name}"


def literal(value: object, d: DType) -> str:
    """A constant of dtype ``d`` as source that numba and the simulator type as ``d``."""
    v = scalar.np_scalar(value, d)
    if d.is_bool:
        return "True" if v else "False"
    if d.is_float:
        if math.isnan(v):
            return f"{_np(d)}(np.nan)"
        if math.isinf(v):
            return f"{_np(d)}({'' if v > 0 else '-'}np.inf)"
        return f"{_np(d)}({float(v)!r})"
    n = int(v)
    if d == INDEX:
        # A bare literal is int64 to numba; the most negative one is not a literal.
        return str(n) if n > -(1 << 63) else "(np.int64(-9223372036854775807) - 1)"
    return f"{_np(d)}({n})"


def _wrap(text: str, d: DType) -> str:
    """``text`` (integer arithmetic) kept in dtype ``d``: numba computes int32 in int64."""
    return f"{_np(d)}({text})" if d.is_int and d.itemsize < 8 else text


def _ident(name: str) -> str:
    """A loop-IR name as a Python identifier (the renderer's own names start with ``_``)."""
    if name.startswith("_"):
        return name
    safe = "".join(ch if ch.isalnum() else "_" for ch in name)
    return safe if safe.isidentifier() else "v" + safe


class _Writer:
    """Writes one kernel function: statements in thread mode (every thread runs its own
    copy) or uniform mode (a block's threads run them together, see the module doc)."""

    def __init__(self, r: _Renderer, fname: str, owned: set):
        self.r = r
        self.fname = fname
        self.lines: list[str] = []
        self.level = 1
        self.arrays: set[str] = set()
        self.sizes: set[str] = set()
        self.shared: dict[str, str] = {}
        self.memo: dict = {}
        self.state: dict[str, str] = {}  # accumulator -> "identity", "uniform" or "partial"
        self.decl: dict[str, Accumulator] = {}
        self.written: set[str] = set()  # buffers written since the last barrier (uniform mode)
        self.read: set[str] = set()
        self.owned = owned

    # ---- lines ------------------------------------------------------------------------------
    def emit(self, line: str) -> None:
        self.lines.append("    " * self.level + line)

    def fresh(self, prefix: str = "_x") -> str:
        self.r.counter += 1
        return f"{prefix}{self.r.counter}"

    def block(self, head: str, body) -> None:
        """``head:`` then what ``body()`` emits, indented (``pass`` when nothing)."""
        self.emit(head + ":")
        self.level += 1
        n = len(self.lines)
        saved = self.memo
        self.memo = dict(saved)
        body()
        self.memo = saved
        if len(self.lines) == n:
            self.emit("pass")
        self.level -= 1

    # ---- expressions ------------------------------------------------------------------------
    def atom(self, e: Expr) -> str:
        """``e`` as a literal or the name of a local holding it (emitting what it takes)."""
        if isinstance(e, Const):
            return literal(e.value, e.dtype)
        if isinstance(e, Var):
            return self.var(e.name)
        if isinstance(e, AccValue):
            return self.acc_value(e.name)
        return self.bind(self.fresh(), e)

    def bind(self, name: str, e: Expr) -> str:
        """Emit ``name = e`` (``e`` a load or an op), or return the local already holding ``e``."""
        found = self.memo.get(e)
        if found is not None:
            return found
        text = self.load(e) if isinstance(e, Load) else self.prim(e)
        self.emit(f"{name} = {text}")
        self.memo[e] = name
        return name

    def let(self, s: Let) -> None:
        name = _ident(s.name)
        if isinstance(s.value, (Load, Prim)) and s.value not in self.memo:
            self.bind(name, s.value)
        else:
            self.emit(f"{name} = {self.atom(s.value)}")

    def named(self, e: Expr) -> str:
        """``e`` as the name of a local (a literal is bound to one)."""
        text = self.atom(e)
        if text.isidentifier():
            return text
        name = self.fresh()
        self.emit(f"{name} = {text}")
        return name

    def var(self, name: str) -> str:
        if name in self.r.size_names:
            self.sizes.add(name)
        return _ident(name)

    def acc_value(self, name: str) -> str:
        if name in self.r.top_accs and name not in self.owned:
            return f"_v_{_ident(name)}"  # loaded from its scratch at the top of the function
        decl = self.decl[name]
        if decl.kind in _ARG_KINDS:
            p = f"_p_{_ident(name)}"
            return f"({p} if {p} >= 0 else 0)"  # no element: position 0, as the evaluator
        return _ident(name)

    def buffer(self, name: str) -> str:
        self.arrays.add(name)
        return _ident(name)

    def index(self, buffer: str, index: tuple) -> str:
        parts = [self.atom(i) for i in index]
        return f"{self.buffer(buffer)}[{', '.join(parts) if parts else '0'}]"  # 0-d: one element

    def load(self, e: Load) -> str:
        return self.index(e.buffer, e.index)

    def prim(self, e: Prim) -> str:
        """Scalar op ``e`` of the vocabulary as Python source: its row of ``CODE_FOR_OP``."""
        render = CODE_FOR_OP.get(e.op)
        if render is None:
            raise UnsupportedOp(f"the CUDA renderer has no rendering of scalar op {e.op!r}")
        src = e.args[-1].dtype if e.op == "select" else e.args[0].dtype
        return render(self, [self.atom(a) for a in e.args], e, src, e.dtype)

    def cast(self, a: str, src: DType, d: DType) -> str:
        if d.is_float:
            return f"{_np(d)}({a})"
        if src.is_int:
            # Through int64: the simulator's Python ints do not wrap into a narrower type.
            return f"{_np(d)}(np.int64({a}))" if d.itemsize < src.itemsize else f"{_np(d)}({a})"
        # float -> int as NumPy's C casts on x86 (the GPU's cvt saturates): a narrow int
        # through int32, uint32 through int64, keeping the low bits; uint64 of x - 2**63 above 2**63.
        if d.is_unsigned and d.itemsize == 8:
            top = literal(float(2 ** 63), src)
            high = f"np.uint64({self.to_signed(f'({a} - {top})', src, 64)}) ^ np.uint64({2 ** 63})"
            return f"np.uint64({self.to_signed(a, src, 64)}) if not {a} >= {top} else ({high})"
        bits = 64 if d.is_unsigned and d.itemsize == 4 else max(32, d.itemsize * 8)
        r = self.to_signed(a, src, bits)
        return f"{_np(d)}({r})" if bits > d.itemsize * 8 else r

    def to_signed(self, a: str, src: DType, bits: int) -> str:
        """Float ``a`` truncated to a signed int of ``bits``; NaN and out of range give INT_MIN."""
        t = int64 if bits == 64 else int32
        lo, hi = literal(-float(2 ** (bits - 1)), src), literal(float(2 ** (bits - 1)), src)
        return f"({_np(t)}({a}) if ({a} >= {lo}) and ({a} < {hi}) else {literal(-(2 ** (bits - 1)), t)})"

    def int_division(self, op: str, exprs: tuple, args: list, d: DType) -> str:
        a, b = args
        if d.is_unsigned or all(self.r.nonnegative(x) for x in exprs):
            return _wrap(f"{a} {'//' if op == 'idiv' else '%'} {b}", d)
        # Python's // floors; the vocabulary's idiv truncates (the divisor is never 0).
        q = self.fresh()
        self.emit(f"{q} = {_wrap(f'{a} // {b}', d)}")
        t = self.fresh()
        self.emit(f"{t} = {_wrap(f'{q} + 1', d)} if ({a} - {q} * {b} != 0) and (({a} < 0) != ({b} < 0)) else {q}")
        return t if op == "idiv" else _wrap(f"{a} - {t} * {b}", d)

    def ipow(self, args: list, d: DType) -> str:
        a, b = args
        one, zero = literal(1, d), literal(0, d)
        r, base, n = self.fresh(), self.fresh(), self.fresh()
        self.emit(f"{r} = {one}")
        self.emit(f"{base} = {a}")
        self.emit(f"{n} = {b}")

        def negative():
            # C's 1 / a**-b: 1 for a == 1, +-1 for a == -1, else 0.
            minus = literal(-1, d)
            self.emit(f"{r} = {one} if {a} == {one} else (({one} if {n} % 2 == 0 else {minus}) "
                      f"if {a} == {minus} else {zero})")

        def positive():
            def step():
                self.emit(f"if {n} % 2 != 0:")
                self.emit(f"    {r} = {_wrap(f'{r} * {base}', d)}")
                self.emit(f"{base} = {_wrap(f'{base} * {base}', d)}")
                self.emit(f"{n} = {_wrap(f'{n} // 2', d)}")
            self.block(f"while {n} > 0", step)

        if d.is_unsigned:
            positive()
        else:
            self.block(f"if {n} < 0", negative)
            self.block("else", positive)
        return r

    # ---- statements, one thread -------------------------------------------------------------
    def thread(self, body: tuple) -> None:
        """``body`` run by each thread on its own (inside a split loop or an element)."""
        for s in body:
            self.memo_scope_reset()
            if isinstance(s, Let):
                self.let(s)
            elif isinstance(s, Store):
                value = self.atom(s.value)
                self.emit(f"{self.index(s.buffer, s.index)} = {value}")
            elif isinstance(s, Accumulator):
                self.declare(s)
            elif isinstance(s, Update):
                self.update(s)
            elif isinstance(s, If):
                cond = self.atom(s.cond)
                self.block(f"if {cond}", lambda s=s: self.thread(s.then))
                if s.orelse:
                    self.block("else", lambda s=s: self.thread(s.orelse))
            elif isinstance(s, Loop):
                self.block(self.range_head(s), lambda s=s: self.thread(s.body))
            else:
                raise UnsupportedOp(f"not a loop-IR statement: {s!r}")

    def memo_scope_reset(self) -> None:
        # A value computed by an earlier statement may sit in a branch or loop that did not
        # run: each statement computes its own (as the LLVM renderer does).
        self.memo = {}

    def range_head(self, s: Loop) -> str:
        start, stop = self.atom(s.start), self.atom(s.stop)
        step = f", {s.step}" if s.step != 1 else ""
        return f"for {_ident(s.var)} in range({start}, {stop}{step})"

    def declare(self, s: Accumulator) -> None:
        self.decl[s.name] = s
        # "identity": every thread holds the kind's start, so it is already a partial result.
        start = s.kind in _ARG_KINDS or s.start == scalar.start_value(s.kind, s.dtype)
        self.state[s.name] = "identity" if start else "uniform"
        self.emit(f"{_ident(s.name)} = {self.atom(s.start)}")
        if s.kind in _ARG_KINDS:
            self.emit(f"_p_{_ident(s.name)} = -1")  # no element seen yet

    def update(self, s: Update, guard: str | None = None) -> None:
        """One step of accumulator ``s.name`` (by thread 0 alone when ``guard``)."""
        decl = self.decl[s.name]
        name = _ident(s.name)
        if decl.kind in _ARG_KINDS:
            v = self.named(s.value)
            pos = self.atom(s.position)
            wins = self.atom(scalar.arg_wins(decl.kind, Var(name, decl.dtype), Var(v, decl.dtype)))
            cond = f"(_p_{name} < 0 or {wins})"
            head = f"if {guard} and {cond}" if guard else f"if {cond}"

            def take():
                self.emit(f"{name} = {v}")
                self.emit(f"_p_{name} = {pos}")
            self.block(head, take)
            return
        new = self.atom(scalar.combine(decl.kind, Var(name, decl.dtype), s.value))
        if guard:
            self.emit(f"if {guard}:")
            self.emit(f"    {name} = {new}")
        else:
            self.emit(f"{name} = {new}")

    # ---- statements, a block together -------------------------------------------------------
    def uniform(self, body: tuple) -> None:
        """``body`` run by a block's threads together (module doc): Lets by all, stores of a
        row's value by thread 0, independent loops split over the threads."""
        for s in body:
            self.memo_scope_reset()
            fx = _effects((s,))
            merge = self.partial_merge(s)
            self.combine(sorted(a for a in fx.read_accs - fx.updated
                                if self.state.get(a) == "partial" and a != merge))
            self.barrier_before(fx)
            if isinstance(s, Let):
                self.let(s)
                if s.name in self.owned:
                    self.spill(s.name, _ident(s.name))
            elif isinstance(s, Store):
                value = self.atom(s.value)
                target = self.index(s.buffer, s.index)
                self.emit("if _tid == 0:")
                self.emit(f"    {target} = {value}")
            elif isinstance(s, Accumulator):
                self.declare(s)
            elif isinstance(s, Update):
                if merge is not None:
                    self.to_partial([s.name])
                    self.update(s)
                elif self.state[s.name] in ("uniform", "identity"):
                    self.state[s.name] = "uniform"
                    self.update(s)
                else:
                    self.update(s, guard="_tid == 0")
            elif isinstance(s, If):
                self.to_partial(sorted(fx.updated & set(self.decl)))
                cond = self.atom(s.cond)
                self.block(f"if {cond}", lambda s=s, fx=fx: self.branch(s.then, fx))
                self.block("else", lambda s=s, fx=fx: self.branch(s.orelse, fx))
            elif isinstance(s, Loop):
                self.loop(s, fx)
            else:
                raise UnsupportedOp(f"not a loop-IR statement: {s!r}")
            self.written |= fx.stores & self.r.written_buffers
            self.read |= fx.loads & self.r.written_buffers

    def branch(self, body: tuple, fx: _Effects) -> None:
        self.uniform(body)
        self.to_partial(sorted(fx.updated & set(self.decl)))

    def partial_merge(self, s: object) -> str | None:
        """The accumulator whose per-thread partials ``s`` folds into another's: ``acc <-
        cast(part.value)`` of the same kind with ``part`` partial (a block of a float32 sum
        into the float64 total) needs no combining first."""
        if not isinstance(s, Update) or s.name not in self.decl:
            return None
        v = s.value
        if isinstance(v, Prim) and v.op == "cast":
            v = v.args[0]
        if not isinstance(v, AccValue) or self.state.get(v.name) != "partial":
            return None
        kind, part = self.decl[s.name].kind, self.decl[v.name].kind
        return v.name if kind == part and kind not in _ARG_KINDS else None

    def barrier_before(self, fx: _Effects) -> None:
        if fx.loads & self.written or fx.stores & (self.written | self.read):
            self.sync()

    def sync(self) -> None:
        self.emit("cuda.syncthreads()")
        self.written, self.read = set(), set()

    def to_partial(self, accs: list) -> None:
        """Make uniform accumulators partial: thread 0 keeps the value, the others restart
        from the kind's identity (their results are combined later)."""
        for a in accs:
            if self.state.get(a) == "identity":
                self.state[a] = "partial"
            if self.state.get(a) != "uniform":
                continue
            decl = self.decl[a]
            name = _ident(a)
            if decl.kind in _ARG_KINDS:
                self.emit("if _tid != 0:")
                self.emit(f"    _p_{name} = -1")
            elif decl.kind in ("sum", "prod"):  # the idempotent kinds need no reset
                self.emit("if _tid != 0:")
                self.emit(f"    {name} = {literal(scalar.start_value(decl.kind, decl.dtype).value, decl.dtype)}")
            self.state[a] = "partial"

    def combine(self, accs: list) -> None:
        """Combine the partial results of ``accs`` over the block's threads: a tree in
        shared memory; every thread then holds the result."""
        if not accs:
            return
        slots = []  # (accumulator, shared value array, shared position array or None)
        counts: dict[str, int] = {}
        for a in accs:
            decl = self.decl[a]
            arrays = []
            for d in (decl.dtype, INDEX) if decl.kind in _ARG_KINDS else (decl.dtype,):
                k = counts.get(d.short, 0)
                counts[d.short] = k + 1
                sh = f"_sh_{d.short}_{k}"
                self.shared[sh] = _np(d)
                arrays.append(sh)
            slots.append((a, arrays[0], arrays[1] if len(arrays) > 1 else None))
        for a, sv, sp in slots:
            self.emit(f"{sv}[_tid] = {_ident(a)}")
            if sp:
                self.emit(f"{sp}[_tid] = _p_{_ident(a)}")
        self.emit("cuda.syncthreads()")
        s = self.fresh("_s")
        self.emit(f"{s} = _nt // 2")

        def level():
            def pair():
                self.memo = {}
                for a, sv, sp in slots:
                    decl = self.decl[a]
                    x, y = self.fresh("_l"), self.fresh("_r")
                    self.emit(f"{x} = {sv}[_tid]")
                    self.emit(f"{y} = {sv}[_tid + {s}]")
                    if sp is None:
                        c = self.atom(scalar.combine(decl.kind, Var(x, decl.dtype), Var(y, decl.dtype)))
                        self.emit(f"{sv}[_tid] = {c}")
                        continue
                    px, py = self.fresh("_lp"), self.fresh("_rp")
                    self.emit(f"{px} = {sp}[_tid]")
                    self.emit(f"{py} = {sp}[_tid + {s}]")
                    wins = self.atom(_arg_better(decl.kind, Var(x, decl.dtype), Var(px, INDEX),
                                                 Var(y, decl.dtype), Var(py, INDEX)))

                    def take(sv=sv, sp=sp, y=y, py=py):
                        self.emit(f"{sv}[_tid] = {y}")
                        self.emit(f"{sp}[_tid] = {py}")
                    self.block(f"if {wins}", take)
            self.block(f"if _tid < {s}", pair)
            self.emit("cuda.syncthreads()")
            self.emit(f"{s} = {s} // 2")
        self.block(f"while {s} > 0", level)
        for a, sv, sp in slots:
            self.emit(f"{_ident(a)} = {sv}[0]")
            if sp:
                self.emit(f"_p_{_ident(a)} = {sp}[0]")
            self.state[a] = "uniform"
        self.sync()  # every thread has read the result before the arrays are written again

    def loop(self, s: Loop, fx: _Effects) -> None:
        inner = _effects(s.body)
        outer_updated = sorted(fx.updated & set(self.decl))
        splittable = not (inner.read_accs & fx.updated & set(self.decl))
        nest = _nest(s)
        bound = fx.bound
        par = _parallel_vars([lp.var for lp in nest.loops], (s,)) if splittable else set()
        depth = 0
        while (depth < len(nest.loops) and nest.loops[depth].var in par
               and _rectangular(nest.loops[depth], bound)):
            depth += 1
        self.to_partial(outer_updated)
        if depth == 0:
            self.serial(s, fx, outer_updated)
            return
        inner = nest.loops[depth - 1].body
        work = _work(inner, bound) if any(isinstance(x, Loop) for x in _statements(inner)) else None
        if work is None:
            self.split(nest, depth)
            return
        # Each iteration has loops of its own (a row of a sum over two axes): with enough
        # work in them for the block, split those instead (its threads then read adjacent
        # elements); else give each thread whole iterations.
        enough = self.atom(apply("ge", apply("mul", work, Const(SPLIT_INNER, INDEX)), Var("_nt", INDEX)))
        written, read = self.written, self.read
        self.block(f"if {enough}", lambda: self.serial(s, fx, outer_updated))
        self.written, written = written, self.written
        self.read, read = read, self.read
        self.block("else", lambda: self.split(nest, depth))
        self.written |= written
        self.read |= read

    def serial(self, s: Loop, fx: _Effects, outer_updated: list) -> None:
        """Loop ``s`` run by every thread, every iteration; what it splits is inside."""
        def body():
            self.written |= fx.stores & self.r.written_buffers
            self.read |= fx.loads & self.r.written_buffers
            self.uniform(s.body)
            self.to_partial(outer_updated)
        self.block(self.range_head(s), body)

    def split(self, nest: _Nest, depth: int) -> None:
        """The first ``depth`` loops of ``nest`` as one index space the threads stride over."""
        loops = nest.loops[:depth]
        counts = [self.trip(lp) for lp in loops]
        total = self.product(counts)
        j = self.fresh("_j")

        def body():
            self.decompose(j, loops, counts)
            for k in range(depth - 1):
                self.thread(nest.lets[k])
            self.thread(loops[-1].body)
        self.block(f"for {j} in range(_tid, {total}, _nt)", body)

    # ---- index spaces ------------------------------------------------------------------------
    def trip(self, lp: Loop) -> str:
        """The trip count of loop ``lp`` (0 for an empty range), as a local."""
        n = host_value(_trip_expr(lp), {})
        if n is not None:
            return str(max(n, 0))
        start, stop = self.atom(lp.start), self.atom(lp.stop)
        n = self.fresh("_n")
        span = f"{stop} - {start}" if lp.step == 1 else f"({stop} - {start} + {lp.step - 1}) // {lp.step}"
        self.emit(f"{n} = {span} if {stop} > {start} else 0")
        return n

    def product(self, counts: list) -> str:
        if len(counts) == 1:
            return counts[0]
        t = self.fresh("_n")
        self.emit(f"{t} = {' * '.join(counts)}")
        return t

    def decompose(self, linear: str, loops: list, counts: list) -> None:
        """Bind each loop's variable to its part of row-major index ``linear``."""
        rest = linear
        for k in range(len(loops) - 1, -1, -1):
            lp = loops[k]
            part = rest if k == 0 else f"{rest} % {counts[k]}"
            start = self.atom(lp.start)
            scaled = part if lp.step == 1 else f"({part}) * {lp.step}"
            self.emit(f"{_ident(lp.var)} = {start} + {scaled}" if start != "0" else f"{_ident(lp.var)} = {scaled}")
            if k:
                q = self.fresh("_q")
                self.emit(f"{q} = {rest} // {counts[k]}")
                rest = q

    # ---- scratch between launches -------------------------------------------------------------
    def spill(self, name: str, value: str) -> None:
        if name in self.r.scratch:
            self.emit("if _tid == 0:")
            self.emit(f"    {self.buffer(scratch_name(name))}[0] = {value}")

    def grid(self, accs: list, loop: Loop) -> None:
        """Accumulators ``accs`` and the loop updating them, its iterations spread over the
        grid's blocks (each block's threads running one iteration together); then each
        block's results, combined, stored at its index of the partial arrays."""
        for a in accs:
            self.declare(a)
        names = [a.name for a in accs]
        fx = _effects((loop,))
        self.to_partial(names)
        trips = self.trip(loop)
        it = self.fresh("_it")

        def bind_var():
            start = self.atom(loop.start)
            scaled = f"{it} * {loop.step}" if loop.step != 1 else it
            self.emit(f"{_ident(loop.var)} = {scaled}" if start == "0" else f"{_ident(loop.var)} = {start} + {scaled}")

        def together():  # a block per iteration, its threads splitting the iteration's loops
            def body():
                # Iterations touch disjoint elements (_grid_accumulators): what one stored,
                # another never reads, so an iteration starts with no barrier.
                bind_var()
                self.uniform(loop.body)
                self.to_partial(names)
            self.block(f"for {it} in range(cuda.blockIdx.x, {trips}, cuda.gridDim.x)", body)

        def alone():  # a thread per iteration, over the whole grid
            def body():
                bind_var()
                self.thread(loop.body)
            self.block(f"for {it} in range(cuda.blockIdx.x * _nt + _tid, {trips}, cuda.gridDim.x * _nt)", body)

        work = _work(loop.body, fx.bound)
        if work is None or host_value(work, {}) == 0:
            alone()
        else:
            # As a split loop's (Writer.loop): iterations with enough inner work for a block
            # are a block's each, else a thread's.
            enough = self.atom(apply("ge", apply("mul", work, Const(SPLIT_INNER, INDEX)), Var("_nt", INDEX)))
            self.block(f"if {enough}", together)
            self.block("else", alone)
        self.combine(names)
        for a in accs:
            self.emit("if _tid == 0:")
            self.emit(f"    {self.partial(a.name, a.dtype)}[cuda.blockIdx.x] = {_ident(a.name)}")
            if a.kind in _ARG_KINDS:
                self.emit(f"    {self.partial(a.name, INDEX, True)}[cuda.blockIdx.x] = _p_{_ident(a.name)}")

    def partial(self, acc: str, d: DType, position: bool = False) -> str:
        name = partial_name(acc, position)
        self.r.partials[name] = d
        return self.buffer(name)

    def merge_partials(self, accs: tuple) -> None:
        """Declare ``accs`` and fold the grid launch's per-block results into them, the
        threads splitting the blocks (so they end partial, combined when read)."""
        if not accs:
            return
        for a in accs:
            self.declare(a)
        k = self.fresh("_k")

        def body():
            for a in accs:
                name = _ident(a.name)
                v = self.fresh("_b")
                self.emit(f"{v} = {self.partial(a.name, a.dtype)}[{k}]")
                if a.kind not in _ARG_KINDS:
                    self.emit(f"{name} = {self.atom(scalar.combine(a.kind, Var(name, a.dtype), Var(v, a.dtype)))}")
                    continue
                p = self.fresh("_bp")
                self.emit(f"{p} = {self.partial(a.name, INDEX, True)}[{k}]")
                wins = self.atom(_arg_better(a.kind, Var(name, a.dtype), Var(f"_p_{name}", INDEX),
                                             Var(v, a.dtype), Var(p, INDEX)))

                def take(name=name, v=v, p=p):
                    self.emit(f"{name} = {v}")
                    self.emit(f"_p_{name} = {p}")
                self.block(f"if {wins}", take)
        self.block(f"for {k} in range(_tid, {GRID_BLOCKS_ARG}, _nt)", body)
        for a in accs:
            self.state[a.name] = "partial"

    def finish_owned(self) -> None:
        """Write the accumulators this launch owns that later launches read to scratch."""
        accs = sorted(a for a in self.owned if a in self.r.top_accs and a in self.r.scratch)
        self.combine([a for a in accs if self.state.get(a) == "partial"])
        for a in accs:
            self.spill(a, self.acc_value(a))


def scratch_name(name: str) -> str:
    """The parameter name of the scratch array carrying top-level value ``name``."""
    return f"_s_{_ident(name)}"


def _trip_expr(lp: Loop) -> Expr:
    if lp.step == 1:
        return apply("sub", lp.stop, lp.start)
    span = apply("add", apply("sub", lp.stop, lp.start), Const(lp.step - 1, INDEX))
    return apply("idiv", span, Const(lp.step, INDEX))


def _arg_better(kind: str, v1: Expr, p1: Expr, v2: Expr, p2: Expr) -> Expr:
    """Whether (value v2, position p2) beats (v1, p1) in an argmax/argmin tree: a found
    element (position >= 0) beats none, then ``scalar.arg_wins`` (a NaN wins), then on a
    tie of values (or of two NaNs) the smaller position: the first winner, as NumPy."""
    zero = Const(0, INDEX)
    found2, none1 = apply("ge", p2, zero), apply("lt", p1, zero)
    wins = scalar.arg_wins(kind, v1, v2)
    if v1.dtype.is_float:
        tie = apply("or", apply("eq", v2, v1), apply("and", apply("ne", v1, v1), apply("ne", v2, v2)))
    else:
        tie = apply("eq", v2, v1)
    earlier = apply("and", tie, apply("lt", p2, p1))
    return apply("and", found2, apply("or", none1, apply("or", wins, earlier)))


# ---- the renderer ---------------------------------------------------------------------------------
class _Renderer:
    def __init__(self, k: Kernel, name: str):
        self.k = k
        self.name = name
        self.counter = 0
        self.size_names = {s.name for s in k.sizes}
        self.top_accs = {s.name: s for s in k.body if isinstance(s, Accumulator)}
        self.top_lets = {s.name: s for s in k.body if isinstance(s, Let)}
        self.written_buffers = {b.name for b in k.buffers if b.role != "in"}
        self.lets = {s.name: s.value for s in _statements(k.body) if isinstance(s, Let)}
        self.scratch: dict[str, DType] = {}
        self.partials: dict[str, DType] = {}
        self._nonneg: dict[str, bool] = {}
        self.functions = 0

    def nonnegative(self, e: Expr) -> bool:
        """Whether int expression ``e`` is never negative: sizes, loop variables (loops
        start at a non-negative index), and sums, products and quotients of those."""
        if isinstance(e, Const):
            return e.value >= 0
        if isinstance(e, Var):
            if e.name in self.size_names or e.name in self.loop_vars:
                return True
            if e.name in self.lets:
                if e.name not in self._nonneg:
                    self._nonneg[e.name] = False  # a cycle (never in SSA) is not proof
                    self._nonneg[e.name] = self.nonnegative(self.lets[e.name])
                return self._nonneg[e.name]
            return False
        if isinstance(e, Prim) and e.op in ("add", "mul", "idiv", "irem", "min", "max"):
            if e.op == "max":
                return any(self.nonnegative(a) for a in e.args)
            return all(self.nonnegative(a) for a in e.args)
        if isinstance(e, Prim) and e.op == "select":
            return self.nonnegative(e.args[1]) and self.nonnegative(e.args[2])
        return False

    def plan(self) -> CudaKernelPlan:
        k = self.k
        self.loop_vars: set = set()
        self.loop_vars = {s.var for s in _statements(k.body) if isinstance(s, Loop)
                          and self.nonnegative(s.start)}
        phases, floating = _phases(k)
        phases = [part for ph in phases for part in _grid_splits(ph)]
        owner = {n: i for i, ph in enumerate(phases) for n in ph.owned}
        needs = [self.needed(ph, floating, owner, i) for i, ph in enumerate(phases)]
        for i, (lets, accs) in enumerate(needs):
            for n in (*lets, *accs):
                if n in owner and owner[n] != i:
                    self.scratch[n] = self.value_dtype(n)
        functions, launches = [], []
        for i, ph in enumerate(phases):
            for source, launch in self.render_phase(ph, needs[i], floating, owner, i):
                functions.append(source)
                launches.append(launch)
        return CudaKernelPlan(self.name, k, "\n\n".join(functions), tuple(launches), tuple(self.scratch.items()),
                              tuple(self.partials.items()))

    def render_phase(self, ph: _Phase, needs: tuple, floating: dict, owner: dict, i: int) -> list:
        """The (source, launch) of phase ``i``: one, or for an elements phase whose launch
        would take more than ``PARAM_BYTES`` of parameters, as many as it takes (its
        nests, then its outputs, split in halves)."""
        self.functions += 1
        w = _Writer(self, f"{self.name}_{ph.kind[0]}{self.functions}", ph.owned)
        source, launch = self.function(w, ph, *needs, floating, owner, i)
        size = self.param_bytes(launch)
        if size <= PARAM_BYTES:
            columns = self.columns_phase(ph)
            if columns is None:
                return [(source, launch)]
            # Few columns: a block per column, its threads splitting the column's loop.
            alt, count = columns
            (alt_source, alt_launch), = self.render_phase(alt, needs, floating, owner, i)
            many = apply("ge", count, Const(COLUMN_THREADS, INDEX))
            return [(source, dataclasses.replace(launch, only_if=many)),
                    (alt_source, dataclasses.replace(alt_launch, only_if=apply("not", many)))]
        halves = _split_phase(ph) if ph.kind == "elements" else None
        if halves is None:
            raise UnsupportedOp(f"kernel {self.k.name}: launch {launch.fname} takes {size} bytes of parameters, "
                                f"more than CUDA's {PARAM_BYTES}")
        return [part for half in halves
                for part in self.render_phase(half, self.needed(half, floating, owner, i), floating, owner, i)]

    def columns_phase(self, ph: _Phase) -> tuple[_Phase, Expr] | None:
        """For an elements phase of one nest whose threads each accumulate in a loop (a
        column sum, ``in_registers``): the same nest as a block per element, and the
        number of elements (None when that is not the phase or its count is not known
        before the launch)."""
        if ph.kind != "elements" or len(ph.nests) != 1:
            return None
        nest, chosen = ph.nests[0]
        program = self.in_registers(_per_thread(nest, chosen))
        count: Expr = Const(1, INDEX)
        for lp in nest.loops:
            if lp.var in chosen:
                count = apply("mul", count, apply("max", _trip_expr(lp), Const(0, INDEX)))
        if not any(isinstance(s, Accumulator) for s in program) or host_value(
                count, {s.name: 1 for s in self.k.sizes}) is None:
            return None
        return _Phase("columns", ph.stmts, [(nest, chosen, program)], set()), count

    def param_bytes(self, launch: Launch) -> int:
        """numba passes an array as 5 words and 2 per dimension, a size as one word."""
        ranks = {b.name: b.rank for b in self.k.buffers}
        return sum(8 * (5 + 2 * max(ranks.get(a, 1), 1)) for a in launch.arrays) + 8 * len(launch.sizes)

    def value_dtype(self, name: str) -> DType:
        if name in self.top_lets:
            return self.top_lets[name].value.dtype
        acc = self.top_accs[name]
        return INDEX if acc.kind in _ARG_KINDS else acc.dtype

    def needed(self, ph: _Phase, floating: dict, owner: dict, i: int) -> tuple[list, list]:
        """The top-level Lets (in kernel order) and accumulators phase ``i`` uses but does
        not compute in order itself: floating Lets it computes first, and values of other
        launches it loads from scratch."""
        lets: set = set()
        accs: set = set()
        stack = list(_effects(ph.stmts).names)
        while stack:
            n = stack.pop()
            if n in ph.owned:
                continue
            if n in self.top_lets:
                if owner.get(n) == i or n in lets:
                    continue
                lets.add(n)
                if n in floating:
                    stack.extend(free_names(floating[n].value))
            elif n in self.top_accs and owner.get(n) != i:
                accs.add(n)
        order = [s.name for s in self.k.body if isinstance(s, Let) and s.name in lets]
        return order, sorted(accs)

    def function(self, w: _Writer, ph: _Phase, lets: list, accs: list, floating: dict, owner: dict, i: int):
        prologue: list[str] = []
        for a in accs:  # values of other launches' accumulators
            prologue.append(f"_v_{_ident(a)} = {w.buffer(scratch_name(a))}[0]")
        for n in lets:
            if n in floating:
                w.lines, saved = [], w.lines
                w.memo = {}
                w.let(floating[n])
                prologue += [line[4:] for line in w.lines]
                w.lines = saved
            else:
                prologue.append(f"{_ident(n)} = {w.buffer(scratch_name(n))}[0]")
        items: tuple = ()
        if ph.kind == "elements":
            w.emit("_start = cuda.grid(1)")
            w.emit("_step = cuda.gridsize(1)")
            all_items = []
            for loop, (nest, chosen) in zip(ph.stmts, ph.nests):
                all_items.append(self.elements(w, nest, chosen))
            items = tuple(all_items)
        else:
            w.emit("_tid = cuda.threadIdx.x")
            w.emit("_nt = cuda.blockDim.x")
            mark = len(w.lines)
            if ph.kind == "rows":
                nest, depth = ph.nests[0]
                items = (self.rows(w, nest, depth),)
            elif ph.kind == "columns":
                items = (self.columns(w, *ph.nests[0]),)
            elif ph.kind == "grid":
                items = ((_trip_expr(ph.stmts[-1]),),)
                w.grid(ph.stmts[:-1], ph.stmts[-1])
            else:
                w.merge_partials(ph.merged)
                w.uniform(tuple(ph.stmts))
                w.finish_owned()
            shared = [f"    {n} = cuda.shared.array({SHARED}, {t})" for n, t in sorted(w.shared.items())]
            w.lines[mark:mark] = shared
        arrays = tuple(b.name for b in self.k.buffers if b.name in w.arrays)
        arrays += tuple(scratch_name(n) for n in self.scratch if scratch_name(n) in w.arrays)
        arrays += tuple(n for n in self.partials if n in w.arrays)
        sizes = tuple(s.name for s in self.k.sizes if s.name in w.sizes)
        sizes += (GRID_BLOCKS_ARG,) if ph.merged else ()
        head = f"def {w.fname}({', '.join([_ident(a) for a in arrays] + [_ident(s) for s in sizes])}):"
        body = [head] + ["    " + line for line in prologue] + w.lines
        launch = Launch(w.fname, "rows" if ph.kind == "columns" else ph.kind, arrays, sizes, items, self.cols(ph))
        return "\n".join(body) + "\n", launch

    def cols(self, ph: _Phase) -> tuple:
        """For a block's launch: the iterations of each loop of the body its threads run
        together (a row's body), the block sized by the largest (a blocked sum's 128 and
        its rest count as the row they cover)."""
        if ph.kind == "elements":
            return ()
        if ph.kind == "columns":
            body = ph.nests[0][2]
        elif ph.kind == "grid":
            body = ph.stmts[-1].body
        else:
            body = ph.stmts if ph.kind == "single" else ph.nests[0][0].loops[ph.nests[0][1] - 1].body
        works = (_work((s,), set()) for s in body if isinstance(s, (Loop, If)))
        return tuple((w,) for w in works if w is not None)

    def elements(self, w: _Writer, nest: _Nest, chosen: list) -> tuple:
        """A grid-stride loop over the nest's parallel loops, the others run per thread."""
        loops = [lp for lp in nest.loops if lp.var in chosen]
        w.memo = {}
        counts = [w.trip(lp) for lp in loops]
        total = w.product(counts)
        e = w.fresh("_e")

        def body():
            w.decompose(e, loops, counts)
            w.thread(self.in_registers(_per_thread(nest, chosen)))
        w.block(f"for {e} in range(_start, {total}, _step)", body)
        return tuple(_trip_expr(lp) for lp in loops)

    def in_registers(self, body: tuple) -> tuple:
        """``body`` (one thread's statements) with each top-level loop that accumulates into
        one element of a buffer (``b[i] = combine(b[i], v)`` every iteration, ``i`` fixed
        for the loop, ``b`` read nowhere else in it: a column sum into its temp) doing so
        in an accumulator: read once before the loop, stored once after, where the GPU
        would otherwise load and store ``b[i]`` every iteration."""
        out: list = []
        for s in body:
            found = _register_candidate(s) if isinstance(s, Loop) else None
            if found is None:
                out.append(s)
                continue
            store, kind, v = found
            self.counter += 1
            acc = f"_reg{self.counter}"
            d = self.k.buffer(store.buffer).dtype
            out += [Accumulator(acc, kind, d, Load(store.buffer, store.index, d)),
                    _replace_stmt(s, store, Update(acc, v)),
                    Store(store.buffer, store.index, AccValue(acc, d))]
        return tuple(out)

    def columns(self, w: _Writer, nest: _Nest, chosen: list, program: tuple) -> tuple:
        """A block per element of the nest's ``chosen`` loops, its threads running one
        thread's ``program`` of an elements launch together (splitting its loop)."""
        loops = [lp for lp in nest.loops if lp.var in chosen]
        counts = [w.trip(lp) for lp in loops]
        total = w.product(counts)

        def body():
            w.decompose("_row", loops, counts)
            w.uniform(program)
        w.block(f"for _row in range(cuda.blockIdx.x, {total}, cuda.gridDim.x)", body)
        return tuple(_trip_expr(lp) for lp in loops)

    def rows(self, w: _Writer, nest: _Nest, depth: int) -> tuple:
        """A block per row (the nest's first ``depth`` loops), its body run together."""
        loops = nest.loops[:depth]
        counts = [w.trip(lp) for lp in loops]
        total = w.product(counts)

        def body():
            w.decompose("_row", loops, counts)
            for k in range(depth - 1):
                w.thread(nest.lets[k])
            w.uniform(loops[-1].body)
        w.block(f"for _row in range(cuda.blockIdx.x, {total}, cuda.gridDim.x)", body)
        return tuple(_trip_expr(lp) for lp in loops)


def _binary(symbol: str, wrap: bool = True) -> Callable[[_Writer, list[str], Prim, DType, DType], str]:
    def render(w: _Writer, a: list[str], e: Prim, src: DType, d: DType) -> str:
        return _wrap(f"{a[0]} {symbol} {a[1]}", d) if wrap else f"{a[0]} {symbol} {a[1]}"
    return render


# The scalar vocabulary (flowjit.lowering.scalar.OPS) as numba.cuda Python source: one row per
# op, a function of (writer, operand sources, the expression, operand dtype, result dtype).
# Math intrinsics call ``NAME_f32``/``NAME_f64``, which ``PRELUDE`` binds to libdevice on a
# GPU and to NumPy's scalar functions under the simulator.
CODE_FOR_OP: dict[str, Callable[[_Writer, list[str], Prim, DType, DType], str]] = {
    "add": _binary("+"), "sub": _binary("-"), "mul": _binary("*"),
    "neg": lambda w, a, e, src, d: _wrap(f"-{a[0]}", d),
    "div": _binary("/", wrap=False),
    "idiv": lambda w, a, e, src, d: w.int_division("idiv", e.args, a, d),
    "irem": lambda w, a, e, src, d: w.int_division("irem", e.args, a, d),
    "min": lambda w, a, e, src, d: f"{a[0]} if {a[0]} < {a[1]} else {a[1]}",
    "max": lambda w, a, e, src, d: f"{a[0]} if {a[0]} > {a[1]} else {a[1]}",
    **{op: _binary(symbol, wrap=False) for op, symbol in _CMP.items()},
    **{op: _binary(symbol, wrap=False) for op, symbol in _LOGIC.items()},
    "not": lambda w, a, e, src, d: f"not {a[0]}" if d.is_bool else _wrap(f"~{a[0]}", d),
    "shl": _binary("<<"),   # the shift is in range: the template's guard
    "shr": _binary(">>"),
    "select": lambda w, a, e, src, d: f"{a[1]} if {a[0]} else {a[2]}",
    "cast": lambda w, a, e, src, d: w.cast(a[0], src, d),
    "ipow": lambda w, a, e, src, d: w.ipow(a, d),
    **{op: (lambda op: lambda w, a, e, src, d: f"{op}_{d.short}({', '.join(a)})")(op) for op in _MATH},
}


def cuda_kernel_plan(kernel: Kernel, name: str | None = None) -> CudaKernelPlan:
    """``kernel`` (loop IR) rendered as numba.cuda functions (source without ``PRELUDE``)
    and their launches; UnsupportedOp when a launch needs more than ``PARAM_BYTES`` of
    parameters. Function names start with ``name`` (default: ``k_`` and the kernel's)."""
    return _Renderer(kernel, name or kernel_name(kernel.name)).plan()


def kernel_name(name: str) -> str:
    """A Python identifier for a kernel called ``name``."""
    return "k_" + "".join(ch if ch.isalnum() else "_" for ch in name)[:48]


def module_source(plan: CudaKernelPlan, cache: bool = False) -> str:
    """The numba.cuda module of a plan: ``PRELUDE``, the kernel functions, and each made a
    ``cuda.jit`` kernel (compiled at its first launch for the arguments' types; with
    ``cache``, numba keeps the compiled code on disk next to the module's file)."""
    jits = "".join(f"\n{launch.fname} = cuda.jit({launch.fname}, cache={cache})\n" for launch in plan.launches)
    return PRELUDE + "\n\n" + plan.source + jits


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


__all__ = ["GRID_BLOCKS_ARG", "LAYOUT_ROLES", "PARAM_BYTES", "PRELUDE", "SHARED", "CudaKernelPlan", "Launch",
           "UnsupportedOp", "cuda_kernel_plan", "host_value", "kernel_name", "literal", "module_source",
           "partial_name", "scratch_name"]
