"""The CUDA renderer: a loop-IR ``Kernel`` (``flowjit.lowering``) -> numba.cuda kernel
functions (Python source written from the loop IR's data structures) and their launches.
``Renderer`` drives the two halves: ``launch_plan`` (which launches, how each is sized) and
``writer`` (the source of each launch's function, the scalar vocabulary's table).

The kernel's top-level statements become launches, in order (a launch boundary is the
grid-wide barrier between them):

- ``elements``: a top-level loop nest whose innermost body has no loop or accumulator.
  Its loops whose iterations touch disjoint elements of every buffer the nest writes
  (``parallel_vars``) are flattened into one index that the whole grid strides over, a
  thread per element; the others run inside, per thread, in their order (a column sum
  into a temp buffer: a thread per column, its rows in a loop, the sum in a register;
  with fewer than ``COLUMN_THREADS`` columns, a block per column instead, its threads
  splitting the rows: ``columns``, chosen at run time by ``Launch.only_if``). Consecutive elements
  nests that do not read what the other writes share one launch; a launch that would
  take more than ``PARAM_BYTES`` of parameters is split by outputs.
- ``rows``: a nest whose body has loops or accumulators (softmax, layernorm, a row's
  argmax): its leading parallel loops give the rows, a thread block per row (grid-stride
  over rows); the block's threads run the row's body together (``Writer.uniform``).
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
(``writer.PRELUDE``).
"""

from __future__ import annotations

import dataclasses

from flowjit.codegen_cuda.launch_plan import (
    ARG_KINDS,
    COLUMN_THREADS,
    GRID_BLOCKS_ARG,
    PARAM_BYTES,
    SHARED,
    CudaKernelPlan,
    Launch,
    LoopNest,
    Phase,
    UnsupportedOp,
    effects_of,
    grid_splits,
    host_value,
    inner_work,
    per_thread,
    phases_of,
    python_name,
    register_candidate,
    replace_statement,
    split_phase,
    trip_count,
    walk_statements,
)
from flowjit.codegen_cuda.writer import PRELUDE, Writer, scratch_name
from flowjit.ir.dtypes import DType
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
    free_names,
)
from flowjit.lowering.scalar import apply


# ---- the renderer ---------------------------------------------------------------------------------
class Renderer:
    def __init__(self, k: Kernel, name: str):
        self.k = k
        self.name = name
        self.counter = 0
        self.size_names = {s.name for s in k.sizes}
        self.top_accs = {s.name: s for s in k.body if isinstance(s, Accumulator)}
        self.top_lets = {s.name: s for s in k.body if isinstance(s, Let)}
        self.written_buffers = {b.name for b in k.buffers if b.role != "in"}
        self.lets = {s.name: s.value for s in walk_statements(k.body) if isinstance(s, Let)}
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
        self.loop_vars = {s.var for s in walk_statements(k.body) if isinstance(s, Loop)
                          and self.nonnegative(s.start)}
        phases, floating = phases_of(k)
        phases = [part for ph in phases for part in grid_splits(ph)]
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

    def render_phase(self, ph: Phase, needs: tuple, floating: dict, owner: dict, i: int) -> list:
        """The (source, launch) of phase ``i``: one, or for an elements phase whose launch
        would take more than ``PARAM_BYTES`` of parameters, as many as it takes (its
        nests, then its outputs, split in halves)."""
        self.functions += 1
        w = Writer(self, f"{self.name}_{ph.kind[0]}{self.functions}", ph.owned)
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
        halves = split_phase(ph) if ph.kind == "elements" else None
        if halves is None:
            raise UnsupportedOp(f"kernel {self.k.name}: launch {launch.fname} takes {size} bytes of parameters, "
                                f"more than CUDA's {PARAM_BYTES}")
        return [part for half in halves
                for part in self.render_phase(half, self.needed(half, floating, owner, i), floating, owner, i)]

    def columns_phase(self, ph: Phase) -> tuple[Phase, Expr] | None:
        """For an elements phase of one nest whose threads each accumulate in a loop (a
        column sum, ``in_registers``): the same nest as a block per element, and the
        number of elements (None when that is not the phase or its count is not known
        before the launch)."""
        if ph.kind != "elements" or len(ph.nests) != 1:
            return None
        nest, chosen = ph.nests[0]
        program = self.in_registers(per_thread(nest, chosen))
        count: Expr = Const(1, INDEX)
        for lp in nest.loops:
            if lp.var in chosen:
                count = apply("mul", count, apply("max", trip_count(lp), Const(0, INDEX)))
        if not any(isinstance(s, Accumulator) for s in program) or host_value(
                count, {s.name: 1 for s in self.k.sizes}) is None:
            return None
        return Phase("columns", ph.stmts, [(nest, chosen, program)], set()), count

    def param_bytes(self, launch: Launch) -> int:
        """numba passes an array as 5 words and 2 per dimension, a size as one word."""
        ranks = {b.name: b.rank for b in self.k.buffers}
        return sum(8 * (5 + 2 * max(ranks.get(a, 1), 1)) for a in launch.arrays) + 8 * len(launch.sizes)

    def value_dtype(self, name: str) -> DType:
        if name in self.top_lets:
            return self.top_lets[name].value.dtype
        acc = self.top_accs[name]
        return INDEX if acc.kind in ARG_KINDS else acc.dtype

    def needed(self, ph: Phase, floating: dict, owner: dict, i: int) -> tuple[list, list]:
        """The top-level Lets (in kernel order) and accumulators phase ``i`` uses but does
        not compute in order itself: floating Lets it computes first, and values of other
        launches it loads from scratch."""
        lets: set = set()
        accs: set = set()
        stack = list(effects_of(ph.stmts).names)
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

    def function(self, w: Writer, ph: Phase, lets: list, accs: list, floating: dict, owner: dict, i: int):
        prologue: list[str] = []
        for a in accs:  # values of other launches' accumulators
            prologue.append(f"_v_{python_name(a)} = {w.buffer(scratch_name(a))}[0]")
        for n in lets:
            if n in floating:
                w.lines, saved = [], w.lines
                w.memo = {}
                w.let(floating[n])
                prologue += [line[4:] for line in w.lines]
                w.lines = saved
            else:
                prologue.append(f"{python_name(n)} = {w.buffer(scratch_name(n))}[0]")
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
                items = ((trip_count(ph.stmts[-1]),),)
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
        head = f"def {w.fname}({', '.join([python_name(a) for a in arrays] + [python_name(s) for s in sizes])}):"
        body = [head] + ["    " + line for line in prologue] + w.lines
        launch = Launch(w.fname, "rows" if ph.kind == "columns" else ph.kind, arrays, sizes, items, self.cols(ph))
        return "\n".join(body) + "\n", launch

    def cols(self, ph: Phase) -> tuple:
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
        works = (inner_work((s,), set()) for s in body if isinstance(s, (Loop, If)))
        return tuple((w,) for w in works if w is not None)

    def elements(self, w: Writer, nest: LoopNest, chosen: list) -> tuple:
        """A grid-stride loop over the nest's parallel loops, the others run per thread."""
        loops = [lp for lp in nest.loops if lp.var in chosen]
        w.memo = {}
        counts = [w.trip(lp) for lp in loops]
        total = w.product(counts)
        e = w.fresh("_e")

        def body():
            w.decompose(e, loops, counts)
            w.thread(self.in_registers(per_thread(nest, chosen)))
        w.block(f"for {e} in range(_start, {total}, _step)", body)
        return tuple(trip_count(lp) for lp in loops)

    def in_registers(self, body: tuple) -> tuple:
        """``body`` (one thread's statements) with each top-level loop that accumulates into
        one element of a buffer (``b[i] = combine(b[i], v)`` every iteration, ``i`` fixed
        for the loop, ``b`` read nowhere else in it: a column sum into its temp) doing so
        in an accumulator: read once before the loop, stored once after, where the GPU
        would otherwise load and store ``b[i]`` every iteration."""
        out: list = []
        for s in body:
            found = register_candidate(s) if isinstance(s, Loop) else None
            if found is None:
                out.append(s)
                continue
            store, kind, v = found
            self.counter += 1
            acc = f"_reg{self.counter}"
            d = self.k.buffer(store.buffer).dtype
            out += [Accumulator(acc, kind, d, Load(store.buffer, store.index, d)),
                    replace_statement(s, store, Update(acc, v)),
                    Store(store.buffer, store.index, AccValue(acc, d))]
        return tuple(out)

    def columns(self, w: Writer, nest: LoopNest, chosen: list, program: tuple) -> tuple:
        """A block per element of the nest's ``chosen`` loops, its threads running one
        thread's ``program`` of an elements launch together (splitting its loop)."""
        loops = [lp for lp in nest.loops if lp.var in chosen]
        counts = [w.trip(lp) for lp in loops]
        total = w.product(counts)

        def body():
            w.decompose("_row", loops, counts)
            w.uniform(program)
        w.block(f"for _row in range(cuda.blockIdx.x, {total}, cuda.gridDim.x)", body)
        return tuple(trip_count(lp) for lp in loops)

    def rows(self, w: Writer, nest: LoopNest, depth: int) -> tuple:
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
        return tuple(trip_count(lp) for lp in loops)


def cuda_kernel_plan(kernel: Kernel, name: str | None = None) -> CudaKernelPlan:
    """``kernel`` (loop IR) rendered as numba.cuda functions (source without ``PRELUDE``)
    and their launches; UnsupportedOp when a launch needs more than ``PARAM_BYTES`` of
    parameters. Function names start with ``name`` (default: ``k_`` and the kernel's)."""
    return Renderer(kernel, name or kernel_name(kernel.name)).plan()


def kernel_name(name: str) -> str:
    """A Python identifier for a kernel called ``name``."""
    return "k_" + "".join(ch if ch.isalnum() else "_" for ch in name)[:48]


def module_source(plan: CudaKernelPlan, cache: bool = False) -> str:
    """The numba.cuda module of a plan: ``PRELUDE``, the kernel functions, and each made a
    ``cuda.jit`` kernel (compiled at its first launch for the arguments' types; with
    ``cache``, numba keeps the compiled code on disk next to the module's file)."""
    jits = "".join(f"\n{launch.fname} = cuda.jit({launch.fname}, cache={cache})\n" for launch in plan.launches)
    return PRELUDE + "\n\n" + plan.source + jits


__all__ = ["Renderer", "cuda_kernel_plan", "kernel_name", "module_source"]
