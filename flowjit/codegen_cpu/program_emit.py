"""The LLVM IR of a native program (``program.ProgramPlan``): its steps (``fj_steps``,
called through ``fj_steps_v`` by the CPython entry points every program shares,
``program_glue``), a function per control block, and every kernel linked into the same
module with internal linkage; for the JIT, a second module of the kernels split over the
pool and about half the others. Imported only when a program is not in the object cache,
so a warm process never builds IR."""

from __future__ import annotations

import dataclasses
import functools
import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import llvmlite.ir as ir
import numpy as np

from flowjit.ir.errors import BUG_REPORT
from flowjit.lowering.loops import Prim, expressions, loop_count
from flowjit.lowering.printer import print_kernel
from flowjit.lowering.scalar import INTRINSICS
from flowjit.lowering.verify import verify_kernel

from . import jit, kernel_abi, render
from .ir_text import module_text
from .llvm_loops import counted_loop
from .patches_routine import PARAMS as PATCHES_PARAMS
from .patches_routine import SYMBOL as PATCHES_SYMBOL
from .program_glue import own_buffers, steps_entry
from .program_plan import (
    BLAS_PARALLEL_MIN_WORK,
    COMPLEX_GEMMS,
    GEMM_SLOTS,
    NO_TRANS,
    ROW_MAJOR,
    SCRATCH_ALIGN,
    T_BLAS_ENTER,
    T_BLAS_LEAVE,
    T_FIXED,
    T_PROFILE,
    TRANS,
    Affine,
    BlockPlan,
    ControlCall,
    ConvGemm,
    Copy,
    Gemm,
    KernelCall,
    Lapack,
    Patches,
    ProgramPlan,
    links_pool,
    pooled_batch,
    pooled_call,
    walk_steps,
)
from .pthread_pool import build_module

I1, I8, I32, I64 = ir.IntType(1), ir.IntType(8), ir.IntType(32), ir.IntType(64)
F32, F64 = ir.FloatType(), ir.DoubleType()
I8P = I8.as_pointer()
VOID = ir.VoidType()
CLOCK_MONOTONIC = 1   # Linux's clockid_t for the clock time.monotonic_ns reads
# A kernel of this many loops or more is compiled behind a function of its own (never
# inlined) in the steps' module too: inlined, LLVM's time on the steps grows faster than
# the kernels'. The zoo CNN's training step, whose batch-norm kernels have 18-40 loops: its
# steps' module 410 -> ~330 ms, its cold call 556-571 -> 471-482 ms; the MLP's, the
# transformer's, the LSTM's and the embedding model's cold calls unchanged (their kernels
# under 16 loops, or already apart).
OWN_FUNCTION_LOOPS = 16
# A kernel of this many loops or more that the plan runs at one shape is never inlined
# (``noinline``): inlined, LLVM optimizes its body twice, once as a function of its own and
# again inside its caller, while IPSCCP still folds the constant dimensions of its one call
# into it, so the machine code is as specialized. The zoo's cold calls, fresh processes
# alternated: CNN inference 94-98 -> 81-83 ms, its training step 430-436 -> 401-405, the
# MLP's training step 167-170 -> 141-147, the LSTM's 278-280 -> 252-263; every zoo row's steady state
# within 1.5% (in one process, alternated). Below it, or for a kernel at several shapes
# (each caller specializes its copy), inlining stays: every kernel noinline made the
# embedding model's training step 5-7% and the LSTM's inference 5% slower.
NOINLINE_LOOPS = 6
# A kernel whose every step reads and writes at most TINY_ELEMENTS elements a buffer, in at most TINY_LOOPS
# loops, with no math intrinsic (the logits layer's bias add of every zoo model), is
# compiled without LLVM's optimizer (``optnone``): LLVM's O3 took ~6 ms of a cold call for
# the CNN's [32, 10] add, unoptimized it runs 0.15 us longer a call ([128, 10]: 0.44 us;
# an element costs ~0.35 ns more).
TINY_ELEMENTS = 2048
TINY_LOOPS = 2
# A loop whose carries take at most this many bytes together (a few scalars, a short vector)
# keeps each at one address: the body writes the next values into the second copy, which is
# copied back at the end of the iteration, and the blocks' kernels are optimized in the
# steps' module (never optnone, never in the second module), so LLVM inlines them into the
# loop and keeps the carries in registers. Larger carries swap between their two copies,
# which copies nothing. fori_loop's v * 0.5 + 1 over 100,000 iterations (the Zen 5 machine,
# fresh processes alternated): 0.46-0.47 -> 0.152-0.154 ms, JAX's 0.33; its cold call 121-123
# -> 123-127 ms.
COPY_BACK_BYTES = 256
# LLVM's time for a kernel in a module, in characters of loop IR (``_Driver.weight``): alone
# in a module, at no fixed shape, the zoo's kernels took about 7 ms + 1.7 ms a loop + 13 us a
# character of loop IR (within 21% at the median of 20 kernels); a math intrinsic (exp,
# tanh: a polynomial) some 4 ms more. The steps' own function is the first module's work
# before any kernel: the zoo MLP's (three GEMMs, no kernel) 7 ms, about a kernel's own.
KERNEL_WEIGHT = 540
LOOP_WEIGHT = 130
INTRINSIC_WEIGHT = 300
STEPS_WEIGHT = KERNEL_WEIGHT

class _Driver:
    def __init__(self, plan: ProgramPlan, blas_int_bits: int, profile: bool = False, clear_upper: bool = False):
        self.plan = plan
        # The target has AVX: the vector registers' upper halves are cleared after each library
        # call (``after_library_call``).
        self.clear_upper = clear_upper
        self.profile = profile
        self.module = ir.Module(name=f"program_{plan.name}")
        self.int_bits = blas_int_bits
        self.declared: dict[str, ir.Function] = {}
        # The second module of a JIT program (None: one module, as an AOT library is): the
        # wrappers of split kernels and their chunks, compiled beside the steps' module.
        self.part: ir.Module | None = None
        self.part_declared: dict[str, ir.Function] = {}
        self.kernels_in: dict[str, dict[str, Any]] = {"main": {}, "part": {}}
        # Kernels that differ only in name (two layers of one width: the same bias and ReLU)
        # are one kernel, defined once; a kernel run more than once at one shape is compiled
        # once, behind one function of its buffers (``fj_at_N``/``fj_split_N``) every such
        # step calls: LLVM's time is per kernel compiled (a small loop's ~10 ms), not per step.
        self.canon: dict[str, Any] = {}
        self.canon_of: dict[int, Any] = {}   # id(kernel) -> canonical (the plan holds every kernel)
        self.shapes = Counter(self.shape_key(s) for s in walk_steps(plan.steps) if isinstance(s, KernelCall))
        tiny: dict[str, bool] = {}
        for s in walk_steps(plan.steps):
            if isinstance(s, KernelCall):
                k = self.canonical(s.kernel)
                tiny[k.name] = tiny.get(k.name, True) and _tiny(s)
        # The kernels of a loop over small carries: optimized, and in the steps' module.
        looped = [x for s in walk_steps(plan.steps) if isinstance(s, ControlCall) and copies_back(s)
                  for block in s.blocks for x in walk_steps(block.steps) if isinstance(x, KernelCall)]
        self.looped = frozenset(id(self.canonical(x.kernel)) for x in looped)
        looped_names = {self.canonical(x.kernel).name for x in looped}
        self.unoptimized = frozenset(name for name, small in tiny.items() if small and name not in looped_names)
        self.not_inlined = self.kernels_at_one_shape(NOINLINE_LOOPS)
        self.home = self.homes()
        self.shared: dict[tuple, tuple[str, bool]] = {}
        # Kernels rendered at constant dims with their pooled loops on the pool (at_dims):
        # (kernel name, dims, same) -> the rendering's name.
        self.pooled_name: dict[tuple, str] = {}
        self.n_results = sum(b.kind == "result" and not b.shares for b in plan.buffers)
        # The run-time value of the symbolic dimension B of a unified plan (an i64 of the
        # function being built); None: every size is a constant.
        self.batch: ir.Value | None = None

    @staticmethod
    def weight(kernel: Any) -> int:
        """A kernel's share of LLVM's time, roughly, in characters of loop IR: a kernel's
        own (KERNEL_WEIGHT), each loop's (LOOP_WEIGHT), each math intrinsic's
        (INTRINSIC_WEIGHT) and its loop IR's text."""
        return (KERNEL_WEIGHT + LOOP_WEIGHT * loop_count(kernel.body) + INTRINSIC_WEIGHT * len(_intrinsics(kernel))
                + len(print_kernel(kernel)))

    def canonical(self, kernel: Any) -> Any:
        """The first kernel of the plan whose loop IR equals ``kernel``'s but for its name."""
        # By the kernel object first: its identity text is the whole loop IR. The text, not
        # the records' equality: 0.0 == -0.0 in Python, and a kernel with either is another.
        found = self.canon_of.get(id(kernel))
        if found is None:
            text = render.kernel_identity(dataclasses.replace(kernel, name=""))
            found = self.canon_of[id(kernel)] = self.canon.setdefault(text, kernel)
        return found

    def shape_key(self, step: KernelCall) -> tuple | None:
        """What makes two steps one compiled function: the kernel (``canonical``'s, by
        identity: a kernel's hash walks its loop IR), its constant dimensions, whether its
        temps come from the scratch block, and whether it is split over the pool; None for
        a step whose dimensions depend on B."""
        if not all(isinstance(d, int) for d in step.dims):
            return None
        return id(self.canonical(step.kernel)), step.dims, bool(step.temps), step.split is not None

    def kernels_at_one_shape(self, loops: int) -> frozenset[str]:
        """The canonical kernels of ``loops`` loops or more that every step runs at one
        constant shape (``shape_key``: one function at that shape, so one call, whose
        constants IPSCCP folds), by name; not a kernel at a shape of B (each step calls
        it itself)."""
        calls: dict[str, tuple[Any, set]] = {}
        for s in walk_steps(self.plan.steps):
            if isinstance(s, KernelCall):
                k = self.canonical(s.kernel)
                calls.setdefault(k.name, (k, set()))[1].add(self.shape_key(s))
        return frozenset(name for name, (k, keys) in calls.items()
                         if len(keys) == 1 and None not in keys and loop_count(k.body) >= loops)

    def homes(self) -> dict[tuple, str]:
        """The module of each kernel at a shape run on the calling thread (by ``shape_key``):
        the heaviest first, each to the module with less weight so far (the split kernels'
        in the second; the steps' own function in the first: the zoo MLP's steps, three GEMMs
        and no kernel, cost about what its bias and ReLU kernel does, 7 against 9 ms, so that
        one kernel goes to the second module). In step order, the CNN's two batch-norm apply
        kernels, the heavier, went to the first module together (65 against 52 ms)."""
        weights: dict[str, int] = {}     # by canonical kernel: one kernel may run at several shapes
        seen: set[tuple] = set()
        units: dict[tuple, int] = {}
        cost = {"main": STEPS_WEIGHT, "part": 0}
        for s in walk_steps(self.plan.steps):
            key = self.shape_key(s) if isinstance(s, KernelCall) and not s.routine else None
            if key is None or key in seen:
                continue
            seen.add(key)
            k = self.canonical(s.kernel)
            if k.name not in weights:
                weights[k.name] = 0 if k.name in self.unoptimized else self.weight(k)
            if s.split is not None:   # always in the second module
                cost["part"] += weights[k.name]
            else:
                units[key] = weights[k.name]
        home = {}
        for key, w in sorted(units.items(), key=lambda kw: -kw[1]):
            # A kernel left out of LLVM's optimization (weight 0) has nothing to overlap: in
            # a second module of its own it cost that module's set-up (small programs' cold
            # calls 10.5-12.5 -> 9.6-11.8 ms with it in the first, four alternated rounds).
            home[key] = "part" if w and cost["part"] < cost["main"] and key[0] not in self.looped else "main"
            cost[home[key]] += w
        return home

    def value(self, b: ir.IRBuilder, x: Any, ty: ir.IntType = I64) -> ir.Value:
        """``x`` (an int, or an ``Affine`` of B) as a value of type ``ty``."""
        if not isinstance(x, Affine):
            return ir.Constant(ty, x)
        if self.batch is None:
            raise ValueError(f"{x!r} depends on B, which this entry point does not take")
        v = b.add(b.mul(self.batch, ir.Constant(I64, x.a)), ir.Constant(I64, x.b))
        return v if ty.width == 64 else b.trunc(v, ty)

    def extern(self, name: str, ret: ir.Type, args: list[ir.Type], part: bool = False) -> ir.Function:
        """Function ``name`` declared once in the steps' module (or the second, ``part``)."""
        module, declared = (self.part, self.part_declared) if part else (self.module, self.declared)
        fn = declared.get(name)
        if fn is None:
            fn = declared[name] = ir.Function(module, ir.FunctionType(ret, args), name)
        return fn

    def at_dims(self, kernel: Any, dims: tuple[int, ...], same: tuple) -> Any:
        """``kernel`` renamed for its rendering at constant ``dims``, with the in-place pairs
        ``same`` that are one buffer at the call, and its pooled loops on the pool
        (``render_kernel(pool_parts=, dims=, same=)``; ``self.pooled`` maps the name to the
        two): the bodies the pool calls through a pointer see what the kernel inlined at its
        call does. One such kernel per kernel, dims and pairs."""
        key = (kernel.name, dims, same)
        name = self.pooled_name.setdefault(key, f"{kernel.name}_at{len(self.pooled_name)}")
        return dataclasses.replace(kernel, name=name)

    @property
    def pooled(self) -> dict[str, tuple[tuple[int, ...], tuple]]:
        """The kernels ``at_dims`` renamed: name -> (dims, same), what ``_link`` renders them at."""
        return {name: (dims, same) for (_, dims, same), name in self.pooled_name.items()}

    def place(self, kernel: Any, part: bool) -> None:
        """Link ``kernel`` into the second module (``part``) or the steps' one."""
        where = "part" if part else "main"
        if kernel.name in self.kernels_in[where]:
            return
        self.kernels_in[where][kernel.name] = kernel

    @staticmethod
    def table(b: ir.IRBuilder, tab: ir.Value, i: int) -> ir.Value:
        return b.load(b.gep(tab, [ir.Constant(I64, i)], inbounds=True))

    def render(self) -> str:
        """The steps' module: ``fj_steps`` (the plan's steps, kernels inlined at their shapes)
        behind ``fj_steps_v``, which the entry points every program shares call
        (``program_glue``: the argument checks, the results, the scratch block, the GIL)."""
        steps_entry(self.steps_function(), own_buffers(self.plan), self.module)
        return module_text(self.module)

    def steps_function(self) -> ir.Function:
        """``i32 fj_steps(tab, scratch, args..., results...)``: the program's steps (0, or 1
        when a kernel's temps could not be allocated), taking the data pointer of each
        argument and result the shared entry points (``program_glue``) checked or made, in
        ``own_buffers`` order; the kernels inline here with their shapes known."""
        plan = self.plan
        own = own_buffers(plan)
        fn = ir.Function(self.module, ir.FunctionType(I32, [I64.as_pointer(), I8P] + [I8P] * len(own)), "fj_steps")
        fn.linkage = "internal"
        tab, scratch, *ptrs = fn.args
        return self.body(fn, plan, tab, scratch, {buf.name: p for buf, p in zip(own, ptrs)}, self.profile)

    def body(self, fn: ir.Function, plan: ProgramPlan | BlockPlan, tab: ir.Value, scratch: ir.Value,
             bufs: dict[str, ir.Value], profile: bool = False) -> ir.Function:
        """Fill ``fn`` (``fj_steps`` or a block's function) with ``plan``'s steps, returning
        0, or 1 when a kernel's temps could not be allocated: ``bufs`` holds the buffers
        ``fn`` is handed; the constants come from ``tab``, the intermediates from
        ``scratch``. ``profile``: CLOCK_MONOTONIC before and after each step."""
        if isinstance(plan.scratch_bytes, int) and plan.scratch_bytes > 0 and isinstance(scratch, ir.Argument):
            # Its caller never runs the steps without the block: a kernel inlined here with
            # its temps in the block then drops the path that callocs them (LLVM's time).
            scratch.add_attribute("nonnull")
        # The entry block holds the allocas only (a split kernel's context, a profile's
        # timespec are placed at its start, which would move the instructions under a
        # builder there); the steps follow in a block of their own.
        entry = ir.IRBuilder(fn.append_basic_block("entry"))
        status = entry.alloca(I32)
        body = fn.append_basic_block("steps")
        entry.branch(body)
        b = ir.IRBuilder(body)
        bufs = dict(bufs)
        for buf in plan.buffers:  # with no scratch (every intermediate empty), no address is read
            if buf.shares:
                continue
            if buf.kind == "const":
                bufs[buf.name] = b.inttoptr(self.table(b, tab, T_FIXED + 2 * self.n_results + buf.slot), I8P)
            elif buf.kind == "scratch":
                bufs[buf.name] = b.gep(scratch, [self.value(b, buf.slot)], inbounds=True)
        for buf in plan.buffers:
            if buf.shares:
                bufs[buf.name] = bufs[buf.shares]
        b.store(ir.Constant(I32, 0), status)
        done = fn.append_basic_block("steps_done")
        if profile:
            stamps = b.inttoptr(self.table(b, tab, T_PROFILE), I64.as_pointer())
            for i, step in enumerate(plan.steps):
                self.stamp(b, stamps, 2 * i)
                self.steps(b, fn, tab, [step], bufs, status, done)
                self.stamp(b, stamps, 2 * i + 1)
        else:
            self.steps(b, fn, tab, plan.steps, bufs, status, done)
        b.branch(done)
        b.position_at_end(done)
        b.ret(b.load(status))
        return fn

    def steps(self, b: ir.IRBuilder, fn: ir.Function, tab: ir.Value, steps: Sequence[Any],
              bufs: dict[str, ir.Value], status: ir.Value, done: ir.Block) -> None:
        """Emit ``steps`` at ``b`` in ``fn``: on a kernel's out-of-memory, ``status`` is set
        to 1 and control goes to ``done``."""
        for step in steps:
            if isinstance(step, KernelCall):
                self.kernel_call(b, fn, step, bufs, status, done)
            elif isinstance(step, Gemm):
                self.gemm(b, tab, step, bufs)
            elif isinstance(step, Copy):
                self.copy(b, bufs[step.dst], bufs[step.src], step.nbytes)
            elif isinstance(step, Lapack):
                self.lapack(b, fn, step, bufs, status, done)
            elif isinstance(step, Patches):
                routine = self.extern(PATCHES_SYMBOL, VOID, [I8P, I8P] + [I64] * len(PATCHES_PARAMS))
                b.call(routine, [bufs[step.x], bufs[step.out], *(self.value(b, v) for v in step.arguments())])
            elif isinstance(step, ConvGemm):
                self.conv_gemm(b, tab, step, bufs)
            else:
                self.control(b, fn, tab, step, bufs, status, done)

    def stamp(self, b: ir.IRBuilder, stamps: ir.Value, index: int) -> None:
        """``stamps[index]`` = CLOCK_MONOTONIC now, in nanoseconds (time.monotonic_ns's clock)."""
        timespec = ir.LiteralStructType([I64, I64])
        allocas = ir.IRBuilder(b.function.entry_basic_block)
        allocas.position_at_start(b.function.entry_basic_block)
        ts = allocas.alloca(timespec)
        b.call(self.extern("clock_gettime", I32, [I32, I8P]), [ir.Constant(I32, CLOCK_MONOTONIC), b.bitcast(ts, I8P)])
        zero = ir.Constant(I32, 0)
        sec = b.load(b.gep(ts, [zero, zero], inbounds=True))
        nsec = b.load(b.gep(ts, [zero, ir.Constant(I32, 1)], inbounds=True))
        now = b.add(b.mul(sec, ir.Constant(I64, 1_000_000_000)), nsec)
        b.store(now, b.gep(stamps, [ir.Constant(I64, index)], inbounds=True))

    def copy(self, b: ir.IRBuilder, dst: ir.Value, src: ir.Value, nbytes: Any) -> None:
        if nbytes != 0:
            memcpy = self.extern("memcpy", I8P, [I8P, I8P, I64])
            b.call(memcpy, [dst, src, self.value(b, nbytes)])

    def fresh(self, base: str) -> str:
        self.count = getattr(self, "count", 0) + 1
        return f"{base}{self.count}"

    def check(self, b: ir.IRBuilder, fn: ir.Function, rc: ir.Value, status: ir.Value, done: ir.Block) -> None:
        """Go on when ``rc`` is 0; else set ``status`` and go to ``done``."""
        go_on = fn.append_basic_block(self.fresh("ok"))
        failed = fn.append_basic_block(self.fresh("oom"))
        b.cbranch(b.icmp_signed("==", rc, ir.Constant(I32, 0)), go_on, failed)
        b.position_at_end(failed)
        b.store(ir.Constant(I32, 1), status)
        b.branch(done)
        b.position_at_end(go_on)

    def call_block(self, b: ir.IRBuilder, block: ir.Function, args: list[ir.Value]) -> ir.Value:
        """A call of block function ``block``, handing it B where sizes depend on it."""
        return b.call(block, [*args, self.batch] if self.batch is not None else args)

    def block_function(self, plan: BlockPlan) -> ir.Function:
        """``i32 fj_block_NAME(tab, scratch, args..., outs...[, B])`` running the block's
        steps: 0, or 1 when a kernel's temps could not be allocated. B (the symbolic
        dimension of a unified plan) comes last where the caller has it."""
        name = f"fj_block_{plan.name}"
        found = self.declared.get(name)
        if found is not None:
            return found
        symbolic = [I64] if self.batch is not None else []
        fn = ir.Function(self.module, ir.FunctionType(I32, [I64.as_pointer(), I8P] + [I8P] * (len(plan.args)
                                                                                         + len(plan.outs))
                                                      + symbolic), name)
        fn.linkage = "internal"
        self.declared[name] = fn
        outer = self.batch
        if symbolic:
            self.batch = fn.args[-1]
            self.batch.name = "B"
        try:
            return self._block_body(fn, plan)
        finally:
            self.batch = outer

    def _block_body(self, fn: ir.Function, plan: BlockPlan) -> ir.Function:
        tab, scratch, *params = fn.args[:2 + len(plan.args) + len(plan.outs)]
        return self.body(fn, plan, tab, scratch, dict(zip([*plan.args, *plan.outs], params)))

    def control(self, b: ir.IRBuilder, fn: ir.Function, tab: ir.Value, c: ControlCall, bufs: dict[str, ir.Value],
                status: ir.Value, done: ir.Block) -> None:
        # Its scratch from the next multiple of SCRATCH_ALIGN (the plan leaves that much room):
        # laid out for a symbolic batch it follows buffers whose sizes are not multiples of it.
        start = b.ptrtoint(bufs[c.temp], I64)
        pad = b.sub(kernel_abi.next_multiple(b, start, SCRATCH_ALIGN), start)
        temp = b.gep(bufs[c.temp], [pad], inbounds=True)   # a GEP keeps what LLVM knows of the block

        def at(offset: Any) -> ir.Value:
            return b.gep(temp, [self.value(b, offset)], inbounds=True)
        inner = at(c.block_offset)
        blocks = [self.block_function(p) for p in c.blocks]
        ins = [bufs[n] for n in c.inputs]
        outs = [bufs[n] for n in c.outputs]
        if c.role == "branch":
            index = b.load(b.bitcast(ins[0], I32.as_pointer()))
            last = ir.Constant(I32, len(blocks) - 1)
            index = b.select(b.icmp_signed("<", index, ir.Constant(I32, 0)), ir.Constant(I32, 0), index)
            index = b.select(b.icmp_signed(">", index, last), last, index)
            after = fn.append_basic_block(self.fresh("branch_end"))
            cases = [fn.append_basic_block(self.fresh("branch")) for _ in blocks]
            sw = b.switch(index, cases[-1])
            for k, (case, block) in enumerate(zip(cases, blocks)):
                sw.add_case(ir.Constant(I32, k), case)
                b.position_at_end(case)
                self.check(b, fn, self.call_block(b, block, [tab, inner, *ins[1:], *outs]), status, done)
                b.branch(after)
            b.position_at_end(after)
            return
        nc = c.num_carry
        sizes = carry_sizes(c)
        first = [at(o) for o, _ in c.carry_offsets]
        second = [at(o) for _, o in c.carry_offsets]
        for dst, src, n in zip(first, ins[:nc], sizes):
            self.copy(b, dst, src, n)
        head = fn.append_basic_block(self.fresh("loop"))
        exit_ = fn.append_basic_block(self.fresh("loop_end"))
        before = b.block
        b.branch(head)
        b.position_at_end(head)
        parity = b.phi(I1)
        n = b.phi(I64)
        parity.add_incoming(ir.Constant(I1, 0), before)
        n.add_incoming(ir.Constant(I64, 0), before)
        fixed = copies_back(c)
        if fixed:
            cur, new = first, second
        else:
            cur = [b.select(parity, y, x) for x, y in zip(first, second)]
            new = [b.select(parity, x, y) for x, y in zip(first, second)]
        if c.role == "while_loop":
            cond, body = blocks
            rest = ins[nc:]
            if c.maximum_iterations >= 0:
                go = fn.append_basic_block(self.fresh("loop_go"))
                b.cbranch(b.icmp_signed("<", n, ir.Constant(I64, c.maximum_iterations)), go, exit_)
                b.position_at_end(go)
            flag = at(c.flag_offset)
            self.check(b, fn, self.call_block(b, cond, [tab, inner, *cur, *rest, flag]), status, done)
            go = fn.append_basic_block(self.fresh("loop_body"))
            b.cbranch(b.icmp_unsigned("!=", b.load(flag), ir.Constant(I8, 0)), go, exit_)
            b.position_at_end(go)
            self.check(b, fn, self.call_block(b, body, [tab, inner, *cur, *rest, *new]), status, done)
        else:  # scan_loop
            (body,) = blocks
            go = fn.append_basic_block(self.fresh("loop_body"))
            length = self.value(b, c.length)
            b.cbranch(b.icmp_signed("<", n, length), go, exit_)
            b.position_at_end(go)
            t = b.sub(b.sub(length, ir.Constant(I64, 1)), n) if c.reverse else n
            xs = ins[nc:nc + c.num_xs]
            rest = ins[nc + c.num_xs:]
            row = [c.blocks[0].buffer(a).nbytes for a in c.blocks[0].args[nc:nc + c.num_xs]]
            out_row = [c.blocks[0].buffer(o).nbytes for o in c.blocks[0].outs[nc:]]
            x_t = [b.gep(x, [b.mul(t, self.value(b, r))], inbounds=True) for x, r in zip(xs, row)]
            y_t = [b.gep(y, [b.mul(t, self.value(b, r))], inbounds=True) for y, r in zip(outs[nc:], out_row)]
            self.check(b, fn, self.call_block(b, body, [tab, inner, *cur, *x_t, *rest, *new, *y_t]), status, done)
        if fixed:
            for dst, src, size in zip(cur, new, sizes):
                self.copy(b, dst, src, size)
        parity.add_incoming(b.not_(parity), b.block)
        n.add_incoming(b.add(n, ir.Constant(I64, 1)), b.block)
        b.branch(head)
        b.position_at_end(exit_)
        for dst, src, size in zip(outs[:nc], cur, sizes):
            self.copy(b, dst, src, size)

    def kernel_call(self, b: ir.IRBuilder, fn: ir.Function, step: KernelCall, bufs: dict[str, ir.Value],
                    status: ir.Value, done: ir.Block) -> None:
        ptrs = [bufs[name] for name in step.buffers]
        dims = [self.value(b, d) for d in step.dims]
        if step.routine:
            # flowjit's routine (fourier_routine), linked from the runtime: the kernel's ABI,
            # its temps in the scratch block or NULL (it allocates them).
            given = [b.bitcast(bufs[step.temps], I8P) if step.temps else ir.Constant(I8P, None)]
            callee = self.extern(kernel_abi.symbol(step.kernel), I32, [I8P] * len(ptrs) + [I64] * len(dims) + [I8P])
            rc = b.call(callee, ptrs + dims + given)
            if not step.temps:
                self.check(b, fn, rc, status, done)
            return
        kernel = self.canonical(step.kernel)
        key = self.shape_key(step)
        if pooled_call(self.plan.threads, step):
            args = [b for b in kernel.buffers if b.role != "temp"]
            same = tuple((o.name, i) for o, reads in zip(kernel.outputs, kernel.in_place) for i in reads
                         if ptrs[args.index(kernel.buffer(i))] is ptrs[args.index(o)])
            kernel = self.at_dims(kernel, step.dims, same)
        if step.split is None:
            # A kernel with temps is handed their memory in the scratch block (or NULL: it
            # allocates its own), after its dimensions.
            given = [] if not kernel.temps else [
                b.bitcast(bufs[step.temps], I8P) if step.temps else ir.Constant(I8P, None)]
            # The temps' slice is an argument of the function at the shape; NULL (the kernel
            # callocs them) a constant of it, so that LLVM drops the path it does not take.
            passed = given if step.temps else []
            n_ptrs = len(ptrs) + len(passed)
            at_shape = self.shared.get(key) if key is not None else None
            if at_shape is None:
                entry_ty = ir.FunctionType(I32, [I8P] * len(ptrs) + [I64] * len(dims) + [I8P] * len(given))
                part = self.part is not None and key is not None and self.home.get(key) == "part"
                if part or (key is not None and (step.temps or self.shapes[key] > 1
                                                 or loop_count(kernel.body) >= OWN_FUNCTION_LOOPS)):
                    # Behind a function of the buffers alone that calls it at its shape (inlined
                    # there, as it would be into the steps): in the second module; or, for a
                    # kernel whose temps are a slice of the scratch block or one run at this
                    # shape by other steps too, a function of the steps' own, never inlined
                    # (whose argument for the temps is noalias); and so is a kernel of
                    # OWN_FUNCTION_LOOPS loops or more. Inlined into the steps, temps
                    # would be one more address in the scratch block to LLVM, whose alias
                    # queries against the kernel's scratch operands cost the CNN's module of
                    # steps 74 -> 84 ms of LLVM (calloc's memory was an object of its own).
                    self.place(kernel, part=part)
                    callee = self.extern(kernel_abi.symbol(kernel), I32, entry_ty.args, part=part)
                    name = self.fresh("fj_at_")
                    at = ir.Function(self.part if part else self.module, ir.FunctionType(I32, [I8P] * n_ptrs), name)
                    if not part:
                        at.linkage = "internal"
                        at.attributes.add("noinline")
                    for attr in ("noalias", "nonnull") if passed else ():   # nonnull: the calloc path drops
                        at.args[len(ptrs)].add_attribute(attr)
                    w = ir.IRBuilder(at.append_basic_block("entry"))
                    w.ret(w.call(callee, [*at.args[:len(ptrs)], *dims, *(at.args[len(ptrs):] if passed else given)]))
                    at_shape = self.shared[key] = (name, part)
                else:
                    self.place(kernel, part=False)
                    rc = b.call(self.extern(kernel_abi.symbol(kernel), I32, entry_ty.args), ptrs + dims + given)
            if at_shape is not None:
                name, part = at_shape
                callee = self.extern(name, I32, [I8P] * n_ptrs) if part else self.module.get_global(name)
                rc = b.call(callee, ptrs + passed)
            if given and not step.temps:
                self.check(b, fn, rc, status, done)
            return
        # Split over the native pool: a context of the buffers' addresses, and a wrapper
        # that runs the chunk entry over the rows [lo, hi) the pool hands it. With constant
        # sizes the wrapper and the kernel go to the second module (self.part).
        trips, parts = step.split
        apart = self.part is not None and key is not None
        wrapped = self.shared.get(key) if key is not None else None
        if wrapped is None:
            self.place(kernel, part=apart)
            chunk = self.extern(kernel_abi.chunk_symbol(kernel), VOID,
                                [I64, I64] + [I8P] * len(ptrs) + [I64] * len(dims), part=apart)
            name = self.fresh("fj_split_")
            wrap = ir.Function(self.part if apart else self.module, ir.FunctionType(VOID, [I64, I64, I8P]), name)
            if not apart:
                wrap.linkage = "internal"
            lo, hi, ctx = wrap.args
            w = ir.IRBuilder(wrap.append_basic_block("entry"))
            table = w.bitcast(ctx, I8P.as_pointer())
            loaded = [w.load(w.gep(table, [ir.Constant(I64, i)], inbounds=True)) for i in range(len(ptrs))]
            w.call(chunk, [lo, hi, *loaded, *dims])
            w.ret_void()
            if key is not None:
                self.shared[key] = (name, apart)
        else:
            name, apart = wrapped
        # The steps' module calls a wrapper of the second by name.
        wrap = self.extern(name, VOID, [I64, I64, I8P]) if apart else self.module.get_global(name)
        self.parallel_for(b, wrap, self.value(b, trips), ptrs, parts)

    def parallel_for(self, b: ir.IRBuilder, wrap: ir.Value, trips: ir.Value, ptrs: Sequence[ir.Value],
                     parts: int) -> None:
        """A call of the native pool's ``flowjit_parallel_for`` running ``wrap(lo, hi, ctx)``
        over [0, trips) on up to ``parts`` threads, ``ctx`` an array of ``ptrs`` (i8*) in the
        function's frame."""
        allocas = ir.IRBuilder(b.function.entry_basic_block)
        allocas.position_at_start(b.function.entry_basic_block)
        ctx_mem = allocas.alloca(ir.ArrayType(I8P, len(ptrs)))
        for i, p in enumerate(ptrs):
            b.store(p, b.gep(ctx_mem, [ir.Constant(I32, 0), ir.Constant(I32, i)], inbounds=True))
        pfor = self.extern(jit.PARALLEL_FOR_SYMBOL, VOID, [wrap.type, I64, I8P, I64])
        b.call(pfor, [wrap, trips, b.bitcast(ctx_mem, I8P), ir.Constant(I64, parts)])

    def lapack(self, b: ir.IRBuilder, fn: ir.Function, step: Lapack, bufs: dict[str, ir.Value],
               status: ir.Value, done: ir.Block) -> None:
        """A call of the step's wrapper (``lapack.build_wrapper``, linked in by ``_link``);
        its 1 (no memory for pivots) is a kernel's out-of-memory."""
        sizes = ([step.batch, step.m, step.n] if step.role in ("singular_values", "orthogonal_triangular") else
                 [step.batch, step.n, *([step.k] if step.role == "solve" else [])])
        ptrs = [bufs[name] for name in (*step.inputs, *step.outputs)]
        from .lapack import Routine

        wrapper = self.extern(Routine.of(step).symbol, I32, [I8P] * len(ptrs) + [I64] * len(sizes))
        result = b.call(wrapper, [*ptrs, *(self.value(b, x) for x in sizes)])
        self.after_library_call(b)
        self.check(b, fn, result, status, done)

    def after_library_call(self, b: ir.IRBuilder) -> None:
        """``vzeroupper`` where the target has AVX. OpenBLAS returns from its AVX-512 kernels
        with the vector registers' upper halves in use, and LLVM cannot know: every
        legacy-SSE instruction after it then pays for that state (glibc's hypot has no AVX
        build: a complex128 abs after a zgemm took 140 ns an element, 7 without), in this
        program's libm calls and in the caller's code after it returns."""
        if self.clear_upper:
            module = b.function.module
            fn = module.globals.get("llvm.x86.avx.vzeroupper")
            if fn is None:
                fn = ir.Function(module, ir.FunctionType(VOID, []), "llvm.x86.avx.vzeroupper")
            b.call(fn, [])

    # Whether a batch of small products may run over the native pool (pooled_batch); a C
    # library keeps its BLAS's own threading, which the pool's threads would multiply.
    pools_batches = True

    def gemm(self, b: ir.IRBuilder, tab: ir.Value, g: Gemm, bufs: dict[str, ir.Value]) -> None:
        if not g.batch:
            self.one_gemm(b, tab, g, bufs[g.a], bufs[g.b], bufs[g.c])
            return
        total = ir.Constant(I64, 1)
        for d in g.batch:
            total = b.mul(total, self.value(b, d))
        if not (self.pools_batches and pooled_batch(self.plan.threads, g)):
            self.products(b, tab, g, bufs[g.a], bufs[g.b], bufs[g.c], None, total, one_thread=True)
            return
        # Over the pool: a context of the operands' and the table's addresses, and a function
        # that runs the products [lo, hi) the pool hands it; the BLAS on one thread meanwhile.
        wrap = ir.Function(self.module, ir.FunctionType(VOID, [I64, I64, I8P]), self.fresh("fj_gemms_"))
        wrap.linkage = "internal"
        lo, hi, ctx = wrap.args
        w = ir.IRBuilder(wrap.append_basic_block("entry"))
        slots = w.bitcast(ctx, I8P.as_pointer())
        a_ptr, b_ptr, c_ptr, table = (w.load(w.gep(slots, [ir.Constant(I64, i)], inbounds=True)) for i in range(4))
        self.products(w, w.bitcast(table, tab.type), g, a_ptr, b_ptr, c_ptr, lo, hi, one_thread=False)
        w.ret_void()
        threads_back = self.blas_one_thread(b, tab, ir.Constant(I64, 0))
        self.parallel_for(b, wrap, total, (bufs[g.a], bufs[g.b], bufs[g.c], b.bitcast(tab, I8P)), self.plan.threads)
        threads_back()

    def conv_gemm(self, b: ir.IRBuilder, tab: ir.Value, s: ConvGemm, bufs: dict[str, ir.Value]) -> None:
        """``s``'s lanes over the native pool (program_plan.ConvGemm): each runs its blocks,
        the windows of a block's output rows into its slot by the patches routine (the image
        as one image of that many output rows, the padding on top moved up by the rows
        before), then the block's product on one BLAS thread: into its rows of the result,
        or, windows read transposed, added to its lane's sum; the lanes' sums then added in
        lane order into the result."""
        p, g = s.patches, s.gemm
        n, h, w, c = p.shape
        oh, ow = p.out_hw
        itemsize = np.dtype(g.dtype).itemsize
        per_image, blocks, lanes, block_rows = oh // s.rows, s.blocks, s.lanes, s.rows * ow
        const = functools.partial(ir.Constant, I64)
        summed = g.trans_a
        if summed:   # c[k, n] += windows[block rows, k].T @ b[block rows, n]
            block = Gemm(g.a, g.b, g.c, True, False, g.m, g.n, block_rows, g.dtype)
            b_block_bytes, c_block_bytes = block_rows * g.n * itemsize, 0
        else:        # c[block rows, n] = windows[block rows, k] @ b[k, n]
            block = Gemm(g.a, g.b, g.c, False, False, block_rows, g.n, g.k, g.dtype)
            b_block_bytes, c_block_bytes = 0, block_rows * g.n * itemsize
        wrap = ir.Function(self.module, ir.FunctionType(VOID, [I64, I64, I8P]), self.fresh("fj_conv_lanes_"))
        wrap.linkage = "internal"
        lo, hi, ctx = wrap.args
        wb = ir.IRBuilder(wrap.append_basic_block("entry"))
        slots = wb.bitcast(ctx, I8P.as_pointer())
        x_ptr, b_ptr, c_ptr, scratch, table = (wb.load(wb.gep(slots, [const(i)], inbounds=True)) for i in range(5))
        routine = self.extern(PATCHES_SYMBOL, VOID, [I8P, I8P] + [I64] * len(PATCHES_PARAMS))
        fixed = dict(zip(PATCHES_PARAMS, p.arguments()), n=1, oh=s.rows, parts=1)
        scalar = _GEMM_SCALAR["sgemm" if g.dtype == "float32" else "dgemm"]

        def lane(k: ir.Value) -> None:
            slot = wb.gep(scratch, [wb.mul(k, const(s.slot_bytes + s.sum_bytes))], inbounds=True)
            into = wb.gep(slot, [const(s.slot_bytes)], inbounds=True) if s.sum_bytes else c_ptr
            first = wb.udiv(wb.mul(k, const(blocks)), const(lanes))
            last = wb.udiv(wb.mul(wb.add(k, const(1)), const(blocks)), const(lanes))

            def run(t: ir.Value) -> None:
                image = wb.udiv(t, const(per_image))
                row = wb.mul(wb.urem(t, const(per_image)), const(s.rows))
                x_image = wb.gep(x_ptr, [wb.mul(image, const(h * w * c * p.itemsize))], inbounds=True)
                top = wb.sub(const(p.top_left[0]), wb.mul(row, const(p.strides[0])))
                wb.call(routine, [x_image, slot, *(top if name == "top" else const(fixed[name])
                                                   for name in PATCHES_PARAMS)])
                b_at = wb.gep(b_ptr, [wb.mul(t, const(b_block_bytes))], inbounds=True)
                c_at = wb.gep(into, [wb.mul(t, const(c_block_bytes))], inbounds=True)
                beta = (wb.select(wb.icmp_unsigned("==", t, first), ir.Constant(scalar, 0.0), ir.Constant(scalar, 1.0))
                        if summed else None)
                self.one_gemm(wb, wb.bitcast(table, tab.type), block, slot, b_at, c_at, one_thread=False, beta=beta)
            counted_loop(wb, last, "block", run, start=first)
        counted_loop(wb, hi, "lane", lane, start=lo)
        wb.ret_void()
        threads_back = self.blas_one_thread(b, tab, const(0))
        self.parallel_for(b, wrap, const(lanes), (bufs[p.x], bufs[g.b], bufs[g.c], bufs[p.out], b.bitcast(tab, I8P)),
                          self.plan.threads)
        threads_back()
        if summed and s.sum_bytes:
            self.add_lane_sums(b, s, bufs[p.out], bufs[g.c], scalar)

    def add_lane_sums(self, b: ir.IRBuilder, s: ConvGemm, scratch: ir.Value, c_ptr: ir.Value, scalar: ir.Type) -> None:
        """``c`` = the sum of a summed ConvGemm's lane sums, in lane order."""
        const = functools.partial(ir.Constant, I64)
        count = s.gemm.m * s.gemm.n
        ptr = scalar.as_pointer()

        def lane_sum(k: int | ir.Value) -> ir.Value:
            at = b.add(b.mul(k if isinstance(k, ir.Value) else const(k), const(s.slot_bytes + s.sum_bytes)),
                       const(s.slot_bytes))
            return b.bitcast(b.gep(scratch, [at], inbounds=True), ptr)
        self.copy(b, c_ptr, b.bitcast(lane_sum(0), I8P), count * np.dtype(s.gemm.dtype).itemsize)
        c = b.bitcast(c_ptr, ptr)

        def add(k: ir.Value) -> None:
            src = lane_sum(k)

            def element(i: ir.Value) -> None:
                at = b.gep(c, [i], inbounds=True)
                b.store(b.fadd(b.load(at), b.load(b.gep(src, [i], inbounds=True))), at)
            counted_loop(b, const(count), "sum", element)
        counted_loop(b, const(s.lanes), "lane_sum", add, start=const(1))

    def products(self, b: ir.IRBuilder, tab: ir.Value, g: Gemm, a: ir.Value, b_: ir.Value, c: ir.Value,
                 start: ir.Value | None, stop: ir.Value, one_thread: bool) -> None:
        """Products [start, stop) of the batch ``g`` (start None: 0): one per position of
        the batch dimensions, the operands' element offsets from the position's digits (a
        stride of 0 broadcasts), c's blocks in order."""
        itemsize = np.dtype(g.dtype).itemsize
        block = b.mul(self.value(b, g.m), self.value(b, g.n))

        def at(ptr: ir.Value, elements: ir.Value) -> ir.Value:
            return b.gep(ptr, [b.mul(elements, ir.Constant(I64, itemsize))], inbounds=True)

        def product(t: ir.Value) -> None:
            rest, off_a, off_b = t, ir.Constant(I64, 0), ir.Constant(I64, 0)
            for d in reversed(range(len(g.batch))):
                size = self.value(b, g.batch[d])
                digit = b.urem(rest, size)
                rest = b.udiv(rest, size)
                off_a = b.add(off_a, b.mul(digit, self.value(b, g.stride_a[d])))
                off_b = b.add(off_b, b.mul(digit, self.value(b, g.stride_b[d])))
            self.one_gemm(b, tab, g, at(a, off_a), at(b_, off_b), at(c, b.mul(t, block)), one_thread)
        counted_loop(b, stop, "batch", product, start=start)

    def one_gemm(self, b: ir.IRBuilder, tab: ir.Value, g: Gemm, a_ptr: ir.Value, b_ptr: ir.Value,
                 c_ptr: ir.Value, one_thread: bool = True, beta: ir.Value | None = None) -> None:
        """One product of ``g``'s sizes from ``a_ptr`` and ``b_ptr`` into ``c_ptr``; a small
        one sets the BLAS to one thread around it unless not ``one_thread`` (the caller has).
        ``beta``: what ``c`` is scaled by before the product is added (a real gemm's; 0 when
        None: c is written)."""
        symbolic = any(isinstance(x, Affine) for x in (g.m, g.n, g.k))
        if not symbolic and (g.m == 0 or g.n == 0):
            return
        itemsize = np.dtype(g.dtype).itemsize
        memset = self.extern("memset", I8P, [I8P, I32, I64])
        if not symbolic and g.k == 0:  # an empty sum: zeros
            b.call(memset, [c_ptr, ir.Constant(I32, 0), ir.Constant(I64, g.m * g.n * itemsize)])
            return
        it = ir.IntType(self.int_bits)
        if g.dtype in COMPLEX_GEMMS:  # alpha and beta by address
            routine = COMPLEX_GEMMS[g.dtype]
            alpha, beta = self.complex_constant(g.dtype, 1.0), self.complex_constant(g.dtype, 0.0)
        else:
            routine = "sgemm" if g.dtype == "float32" else "dgemm"
            alpha = ir.Constant(_GEMM_SCALAR[routine], 1.0)
            beta = ir.Constant(_GEMM_SCALAR[routine], 0.0) if beta is None else beta
        fn = b.inttoptr(self.table(b, tab, GEMM_SLOTS[routine]), _gemm_type(routine, it).as_pointer())
        m, n, k = (self.value(b, x) for x in (g.m, g.n, g.k))
        after = None
        if symbolic:  # the sizes are known at run time: an empty product is skipped, an empty sum zeros
            fn_ = b.function
            zero = ir.Constant(I64, 0)
            call, zeros, after = (fn_.append_basic_block(self.fresh(x)) for x in ("gemm", "gemm_zeros", "gemm_end"))
            empty = b.or_(b.icmp_signed("==", m, zero), b.icmp_signed("==", n, zero))
            test_k = fn_.append_basic_block(self.fresh("gemm_k"))
            b.cbranch(empty, after, test_k)
            b.position_at_end(test_k)
            b.cbranch(b.icmp_signed("==", k, zero), zeros, call)
            b.position_at_end(zeros)
            b.call(memset, [c_ptr, ir.Constant(I32, 0), b.mul(b.mul(m, n), ir.Constant(I64, itemsize))])
            b.branch(after)
            b.position_at_end(call)

        def at_least_one(v: ir.Value) -> ir.Value:
            one = ir.Constant(I64, 1)
            v = b.select(b.icmp_signed("<", v, one), one, v)
            return v if self.int_bits == 64 else b.trunc(v, it)

        def narrow(v: ir.Value) -> ir.Value:
            return v if self.int_bits == 64 else b.trunc(v, it)
        lda = m if g.trans_a else k
        ldb = k if g.trans_b else n
        trans = [ir.Constant(I32, TRANS if t else NO_TRANS) for t in (g.trans_a, g.trans_b)]
        threads_back = self.blas_one_thread(b, tab, b.mul(b.mul(m, n), k)) if one_thread else (lambda: None)
        b.call(fn, [ir.Constant(I32, ROW_MAJOR), *trans, narrow(m), narrow(n), narrow(k), alpha,
                    a_ptr, at_least_one(lda), b_ptr, at_least_one(ldb), beta, c_ptr, at_least_one(n)])
        self.after_library_call(b)
        threads_back()
        if after is not None:
            b.branch(after)
            b.position_at_end(after)

    def complex_constant(self, dtype: str, real: float) -> ir.Value:
        """The address of a module constant holding ``real + 0j`` of ``dtype``."""
        name = f"fj_{dtype}_{'one' if real else 'zero'}"
        g = self.module.globals.get(name)
        if g is None:
            part = F32 if dtype == "complex64" else F64
            g = ir.GlobalVariable(self.module, ir.ArrayType(part, 2), name)
            g.initializer = ir.Constant(g.type.pointee, [ir.Constant(part, real), ir.Constant(part, 0.0)])
            g.global_constant, g.linkage = True, "internal"
        return g.bitcast(I8P)

    def blas_one_thread(self, b: ir.IRBuilder, tab: ir.Value, work: ir.Value) -> Callable[[], None]:
        """Before a gemm of ``work`` multiply-adds: when it is below BLAS_PARALLEL_MIN_WORK
        and the table holds the gemms' bracket (``blas.product_bracket``), its entry, which
        sets the BLAS to one thread. Returns what to emit after the gemm: the bracket's exit,
        which sets back the count the first product in found."""
        enter = self.table(b, tab, T_BLAS_ENTER)
        small = b.and_(b.icmp_signed("<", work, ir.Constant(I64, BLAS_PARALLEL_MIN_WORK)),
                       b.icmp_unsigned("!=", enter, ir.Constant(I64, 0)))
        fnty = ir.FunctionType(VOID, [])

        def call(slot: int) -> None:
            fn_ = b.function
            go, end = fn_.append_basic_block(self.fresh("blas_threads")), fn_.append_basic_block(self.fresh("blas_end"))
            b.cbranch(small, go, end)
            b.position_at_end(go)
            b.call(b.inttoptr(self.table(b, tab, slot), fnty.as_pointer()), [])
            b.branch(end)
            b.position_at_end(end)

        call(T_BLAS_ENTER)
        return lambda: call(T_BLAS_LEAVE)


# alpha's and beta's type in each CBLAS gemm: the complex ones take them by address.
_GEMM_SCALAR = {"sgemm": F32, "dgemm": F64, "cgemm": I8P, "zgemm": I8P}


def _gemm_type(routine: str, it: ir.IntType) -> ir.FunctionType:
    """``cblas_<routine>``'s type with C ints ``it``."""
    fl = _GEMM_SCALAR[routine]
    return ir.FunctionType(VOID, [I32, I32, I32, it, it, it, fl, I8P, it, I8P, it, fl, I8P, it])


def _intrinsics(kernel: Any) -> set[str]:
    """The math intrinsics (``scalar.INTRINSICS``: exp, tanh, sqrt...) ``kernel`` computes."""
    return {e.op for e in expressions(kernel.body) if isinstance(e, Prim) and e.op in INTRINSICS}


def copies_back(c: ControlCall) -> bool:
    """Whether loop ``c`` keeps each carry at one address, copying the body's next values back
    every iteration (carries of at most COPY_BACK_BYTES together, at constant sizes); a
    branch has no carries."""
    if c.role == "branch":
        return False
    sizes = carry_sizes(c)
    return all(isinstance(n, int) for n in sizes) and sum(sizes) <= COPY_BACK_BYTES


def carry_sizes(c: ControlCall) -> list[Any]:
    """The bytes of each carry of loop ``c`` (an int, or an ``Affine`` of B)."""
    return [c.blocks[-1].buffer(n).nbytes for n in c.blocks[-1].args[:c.num_carry]]


def _tiny(step: KernelCall) -> bool:
    """Whether ``step``'s kernel, at the step's sizes, is too small to pay for LLVM's
    optimizer (TINY_ELEMENTS, TINY_LOOPS)."""
    k = step.kernel
    if step.split is not None or step.temps or not all(isinstance(d, int) for d in step.dims):
        return False
    if loop_count(k.body) > TINY_LOOPS or _intrinsics(k):
        return False
    # Every buffer's elements, inputs too: a reduction writes few elements of many it reads
    # (from helper-21's review: fj.max of a (64, 6000) array took 2.8 ms unoptimized, 0.03 ms).
    dims = iter(step.dims)
    sizes = [math.prod(next(dims) for _ in range(b.rank)) for b in k.buffers if b.role != "temp"]
    return max(sizes, default=0) <= TINY_ELEMENTS


def _link(plan: ProgramPlan, driver_ir: str, fastmath: bool = False, sgemm_symbol: str = "",
          blas_int_bits: int = 64, kernels: Sequence[Any] | None = None, lapack: bool = True,
          unoptimized: frozenset[str] = frozenset(), not_inlined: frozenset[str] = frozenset(),
          pooled: Mapping[str, tuple[tuple[int, ...], tuple]] | None = None, native_ldexp: bool = False,
          native_fma: bool = False) -> str:
    """The driver and the kernels of ``plan`` (``kernels``; by default every one) as one
    module's IR text: the kernels' definitions internal, so LLVM may inline them and drops
    what nothing calls; with the wrapper of each LAPACK op the plan runs (calling the
    LAPACKE routines of the library whose sgemm is ``sgemm_symbol``) unless not ``lapack``;
    the kernels named in ``unoptimized`` left out of LLVM's optimization (``_tiny``), those
    in ``not_inlined`` never inlined (``NOINLINE_LOOPS``), those in ``pooled`` rendered at
    its dims with their pooled loops on the pool (``_Driver.at_dims``)."""
    import llvmlite.binding as llvm

    pooled = pooled or {}
    if kernels is None:
        kernels = list({s.kernel.name: s.kernel for s in walk_steps(plan.steps)
                        if isinstance(s, KernelCall) and not s.routine}.values())
    with jit._llvm_lock:
        module = llvm.parse_assembly(driver_ir)
        entries: set[str] = set()
        calls = [s for s in walk_steps(plan.steps) if isinstance(s, Lapack)] if lapack else []
        if calls:   # only a plan with LAPACK calls imports their wrappers' builder
            from .lapack import Routine, build_wrapper
        for r in dict.fromkeys(Routine.of(s) for s in calls):
            wrapper = llvm.parse_assembly(build_wrapper(r, sgemm_symbol, blas_int_bits))
            wrapper.verify()
            entries.add(r.symbol)
            module.link_in(wrapper)
        for kernel in kernels:
            text = None
            try:
                verify_kernel(kernel)  # a malformed kernel is our bug: say so before LLVM does
                text = render.render_kernel(kernel, fastmath=fastmath, optimize=kernel.name not in unoptimized,
                                            # at its dims, a pooled kernel gains nothing inlined
                                            inline=kernel.name not in not_inlined and kernel.name not in pooled,
                                            pool_parts=plan.threads if kernel.name in pooled else 1,
                                            dims=pooled[kernel.name][0] if kernel.name in pooled else None,
                                            same=pooled[kernel.name][1] if kernel.name in pooled else (),
                                            native_ldexp=native_ldexp, native_fma=native_fma)
                kmod = llvm.parse_assembly(text)
                kmod.verify()
            except Exception as e:
                error = render.KernelRenderError(
                    f"the LLVM renderer failed on kernel {kernel.name!r}: {str(e).strip()[:2000]}; its loop IR "
                    f"and LLVM IR are saved in {render._save(kernel, text)}"
                    f"{'' if isinstance(e, jit.LLVMCompileError) else '. ' + BUG_REPORT}")
                error.kernel = kernel.name
                raise error from e
            own = {kernel_abi.symbol(kernel), kernel_abi.chunk_symbol(kernel)}
            entries |= own
            for g in [*kmod.functions, *kmod.global_variables]:
                if not g.is_declaration and g.name not in own:
                    g.linkage = "internal"
            module.link_in(kmod)
        for f in module.functions:
            if f.name in entries and not f.is_declaration:
                f.linkage = "internal"
        return str(module)


def render_program(plan: ProgramPlan, blas_int_bits: int, fastmath: bool = False, profile: bool = False,
                   sgemm_symbol: str = "", lazy: bool = False, native_ldexp: bool = False,
                   native_fma: bool = False, clear_upper: bool = False) -> list[Any]:
    """The LLVM IR text of ``plan``'s modules: the driver, the steps and the kernels they
    call inline (with LLVM's ``fast`` flags on their float ops when ``fastmath``; its
    LAPACK ops call the library whose CBLAS sgemm is ``sgemm_symbol``), then, when the plan
    has a kernel to spare, a second module: the kernels split over the pool with the
    wrappers the pool calls (``fj_split_N``) and about half the others by the length of
    their loop IR, each behind ``fj_at_N`` (its buffers; its shape constant), both called
    by name from the first. ``jit`` compiles the two at once on two threads, LLVM's
    optimization being most of a cold call. ``lazy``: the first module, when there is a
    second, as a function rendering its text, which ``jit.compile_objects`` calls while the
    second compiles (linking the first's kernels is most of the rendering). ``native_ldexp``,
    ``native_fma``, ``clear_upper``: the target's (``HostTarget.native_ldexp``, ``native_fma``,
    ``has_avx``)."""
    driver = _Driver(plan, blas_int_bits, profile, clear_upper)
    driver.part = ir.Module(name=f"program_{plan.name}_split")
    steps = driver.render()

    def main() -> str:
        return _link(plan, steps, fastmath, sgemm_symbol, blas_int_bits, list(driver.kernels_in["main"].values()),
                     unoptimized=driver.unoptimized, not_inlined=driver.not_inlined, pooled=driver.pooled,
                     native_ldexp=native_ldexp, native_fma=native_fma)
    if not driver.kernels_in["part"]:
        return [main()]
    part = _link(plan, module_text(driver.part), fastmath, kernels=list(driver.kernels_in["part"].values()),
                 lapack=False, unoptimized=driver.unoptimized, not_inlined=driver.not_inlined, pooled=driver.pooled,
                 native_ldexp=native_ldexp, native_fma=native_fma)
    return [main if lazy else main(), part]


# ---- the C-ABI library (ahead of time) ------------------------------------------------------

# Return codes of a library's entry point (flowjit.aot writes them into its header).
C_OK, C_ERR_NOMEM, C_ERR_ALIGN, C_ERR_NULL, C_ERR_SIZE = 0, 1, 2, 3, 4
SC_NPROCESSORS_ONLN = 84   # sysconf's name for the CPUs online, on Linux


class _CDriver(_Driver):
    """The plan's steps behind a plain C entry: what the CPython driver reads from its
    table at run time (BLAS routines, constants) are link-time constants here, the BLAS
    routines called by symbol and the constants global data of the module."""

    pools_batches = False

    def __init__(self, plan: ProgramPlan, constants: Sequence[np.ndarray], name: str, blas: dict[str, str],
                 blas_int_bits: int, frozen: dict[str, np.ndarray], symbolic: bool = False,
                 clear_upper: bool = False):
        super().__init__(plan, blas_int_bits, clear_upper=clear_upper)
        self.name = name
        self.symbolic = symbolic
        self.slots: dict[int, ir.Constant] = {}
        const_base = T_FIXED + 2 * self.n_results
        for k, c in enumerate(constants):
            self.slots[const_base + k] = self.data(f"fj_const_{k}", c).ptrtoint(I64)
        self.frozen = {arg: self.data(f"fj_frozen_{arg}", value) for arg, value in frozen.items()}
        it = ir.IntType(blas_int_bits)
        # A library keeps its BLAS's own threading (its caller may set it: OPENBLAS_NUM_THREADS).
        self.slots[T_BLAS_ENTER] = self.slots[T_BLAS_LEAVE] = ir.Constant(I64, 0)
        for routine, slot in GEMM_SLOTS.items():
            if routine in blas:
                fnty = _gemm_type(routine, it)
                self.slots[slot] = self.extern(blas[routine], fnty.return_type, list(fnty.args)).ptrtoint(I64)

    def table(self, b: ir.IRBuilder, tab: ir.Value, i: int) -> ir.Value:  # type: ignore[override]
        return self.slots[i]

    def data(self, symbol: str, array: np.ndarray) -> ir.GlobalVariable:
        """``array``'s bytes as read-only data of the module, aligned as scratch is."""
        data = np.ascontiguousarray(array).tobytes()
        g = ir.GlobalVariable(self.module, ir.ArrayType(I8, max(len(data), 1)), symbol)
        g.initializer = ir.Constant(g.type.pointee, bytearray(data or b"\0"))
        g.global_constant, g.linkage, g.align = True, "internal", SCRATCH_ALIGN
        return g

    def pool_once(self) -> ir.GlobalVariable:
        """The ``pthread_once_t`` (an int, 0 before) that starts the pool once per process."""
        g = ir.GlobalVariable(self.module, I32, "fj_pool_once")
        g.initializer, g.linkage = ir.Constant(I32, 0), "internal"
        return g

    def pool_start(self) -> ir.Function:
        """``fj_pool_start()``: start the library's native pool (pthread_pool's module,
        linked in) with a worker per CPU but the caller's, ``FLOWJIT_NUM_THREADS`` capping
        the threads; a forked child runs its loops on its one thread."""
        fn = ir.Function(self.module, ir.FunctionType(VOID, []), "fj_pool_start")
        fn.linkage = "internal"
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        getenv = self.extern("getenv", I8P, [I8P])
        text = bytearray(b"FLOWJIT_NUM_THREADS\0")
        name = ir.GlobalVariable(self.module, ir.ArrayType(I8, len(text)), "fj_threads_variable")
        name.initializer, name.global_constant, name.linkage = ir.Constant(name.type.pointee, text), True, "internal"
        env = b.call(getenv, [b.bitcast(name, I8P)])
        set_, unset, go = (fn.append_basic_block(x) for x in ("set", "unset", "go"))
        b.cbranch(b.icmp_unsigned("==", b.ptrtoint(env, I64), ir.Constant(I64, 0)), unset, set_)
        b.position_at_end(set_)
        wanted = b.call(self.extern("atol", I64, [I8P]), [env])
        b.branch(go)
        b.position_at_end(unset)
        cpus = b.call(self.extern("sysconf", I64, [I32]), [ir.Constant(I32, SC_NPROCESSORS_ONLN)])
        b.branch(go)
        b.position_at_end(go)
        n = b.phi(I64)
        n.add_incoming(wanted, set_)
        n.add_incoming(cpus, unset)
        workers = b.sub(n, ir.Constant(I64, 1))
        workers = b.select(b.icmp_signed("<", workers, ir.Constant(I64, 0)), ir.Constant(I64, 0), workers)
        # A pthread_create failure leaves the workers made so far: loops split over fewer.
        b.call(self.extern("flowjit_pool_start", I32, [I64]), [workers])
        after_fork = self.extern("flowjit_pool_after_fork", VOID, [])
        hook = ir.FunctionType(VOID, []).as_pointer()
        b.call(self.extern("pthread_atfork", I32, [hook] * 3), [ir.Constant(hook, None), ir.Constant(hook, None),
                                                                 after_fork])
        b.ret_void()
        return fn

    def render_c(self, digest: str) -> str:
        plan = self.plan
        params = [I8P.as_pointer(), I8P.as_pointer(), I8P] + ([I64] if self.symbolic else [])
        fn = ir.Function(self.module, ir.FunctionType(I32, params), self.name)
        ins, outs, given = fn.args[:3]
        if self.symbolic:
            self.batch = fn.args[3]
            self.batch.name = "B"

        for a in (ins, outs):
            a.add_attribute("noalias")
        entry = fn.append_basic_block("entry")
        b = ir.IRBuilder(entry)
        null_arg = fn.append_basic_block("null_argument")
        misaligned = fn.append_basic_block("misaligned")
        if any(isinstance(s, KernelCall) and s.split for s in walk_steps(plan.steps)):
            once = self.extern("pthread_once", I32, [I32.as_pointer(), ir.FunctionType(VOID, []).as_pointer()])
            b.call(once, [self.pool_once(), self.pool_start()])

        def refuse_if(cond: ir.Value, where: ir.Block) -> None:
            ok = fn.append_basic_block("ok")
            b.cbranch(cond, where, ok)
            b.position_at_end(ok)

        def is_null(p: ir.Value) -> ir.Value:
            return b.icmp_unsigned("==", b.ptrtoint(p, I64), ir.Constant(I64, 0))
        refuse_if(b.or_(is_null(ins), is_null(outs)), null_arg)
        if self.symbolic:
            negative = fn.append_basic_block("negative_size")
            refuse_if(b.icmp_signed("<", self.batch, ir.Constant(I64, 0)), negative)
        bufs: dict[str, ir.Value] = {}
        passed = [name for name in plan.args if name not in self.frozen]
        for i, name in enumerate(passed):
            p = b.load(b.gep(ins, [ir.Constant(I64, i)], inbounds=True))
            refuse_if(is_null(p), null_arg)
            bufs[name] = p
        for name, g in self.frozen.items():
            bufs[name] = b.bitcast(g, I8P)
        first_position: dict[str, ir.Value] = {}
        repeats: list[tuple[str, ir.Value]] = []
        for j, name in enumerate(plan.results):
            p = b.load(b.gep(outs, [ir.Constant(I64, j)], inbounds=True))
            refuse_if(is_null(p), null_arg)
            if name in first_position:
                repeats.append((name, p))   # the same value returned twice: copied at the end
            else:
                first_position[name] = bufs[name] = p
        for buf in plan.buffers:
            if buf.kind == "const":
                bufs[buf.name] = b.inttoptr(self.table(b, None, T_FIXED + 2 * self.n_results + buf.slot), I8P)

        # Scratch: the caller's (aligned), or this call's own from the heap.
        scratch = None
        owned = None
        status = b.alloca(I32)
        b.store(ir.Constant(I32, C_OK), status)
        if plan.scratch_bytes != 0:
            size = self.value(b, plan.scratch_bytes)
            size = b.and_(b.add(size, ir.Constant(I64, SCRATCH_ALIGN - 1)), ir.Constant(I64, -SCRATCH_ALIGN))
            # B = 0 leaves nothing to allocate; aligned_alloc of 0 bytes may return NULL.
            size = b.select(b.icmp_signed("<", size, ir.Constant(I64, SCRATCH_ALIGN)), ir.Constant(I64, SCRATCH_ALIGN),
                            size)
            allocate, check_align, have = (fn.append_basic_block(x) for x in ("allocate", "check_align", "scratch"))
            b.cbranch(is_null(given), allocate, check_align)
            b.position_at_end(check_align)
            off = b.and_(b.ptrtoint(given, I64), ir.Constant(I64, SCRATCH_ALIGN - 1))
            b.cbranch(b.icmp_unsigned("!=", off, ir.Constant(I64, 0)), misaligned, have)
            b.position_at_end(allocate)
            fresh = b.call(self.extern("aligned_alloc", I8P, [I64, I64]), [ir.Constant(I64, SCRATCH_ALIGN), size])
            nomem = fn.append_basic_block("scratch_nomem")
            b.cbranch(is_null(fresh), nomem, have)
            b.position_at_end(nomem)
            b.ret(ir.Constant(I32, C_ERR_NOMEM))
            b.position_at_end(have)
            scratch = b.phi(I8P)
            scratch.add_incoming(given, check_align)
            scratch.add_incoming(fresh, allocate)
            owned = b.phi(I8P)
            owned.add_incoming(ir.Constant(I8P, None), check_align)
            owned.add_incoming(fresh, allocate)
        # With no scratch (every intermediate empty), no address is read.
        bufs.update({buf.name: b.gep(scratch, [self.value(b, buf.slot)], inbounds=True) if scratch is not None
                     else ir.Constant(I8P, None) for buf in plan.buffers if buf.kind == "scratch" and not buf.shares})
        bufs.update({buf.name: bufs[buf.shares] for buf in plan.buffers if buf.shares})  # homes are never shared
        done = fn.append_basic_block("steps_done")
        self.steps(b, fn, ir.Constant(I64.as_pointer(), None), plan.steps, bufs, status, done)
        for name, p in repeats:
            self.copy(b, p, bufs[name], plan.buffer(name).nbytes)
        b.branch(done)
        b.position_at_end(done)
        if owned is not None:
            b.call(self.extern("free", VOID, [I8P]), [owned])
        b.ret(b.load(status))
        b.position_at_end(null_arg)
        b.ret(ir.Constant(I32, C_ERR_NULL))
        b.position_at_end(misaligned)
        b.ret(ir.Constant(I32, C_ERR_ALIGN))
        if self.symbolic:
            b.position_at_end(negative)
            b.ret(ir.Constant(I32, C_ERR_SIZE))

        # The manifest's digest, which a loader compares with the manifest it reads.
        text = bytearray(digest.encode() + b"\0")
        g = ir.GlobalVariable(self.module, ir.ArrayType(I8, len(text)), f"{self.name}_digest")
        g.initializer = ir.Constant(g.type.pointee, text)
        g.global_constant = True
        return module_text(self.module)


def render_c_library(plan: ProgramPlan, constants: Sequence[np.ndarray], name: str, blas: dict[str, str],
                     blas_int_bits: int, digest: str, frozen: dict[int, np.ndarray] | None = None,
                     symbolic: bool = False, native_ldexp: bool = False, native_fma: bool = False,
                     clear_upper: bool = False) -> str:
    """The LLVM IR text of ``plan`` as a C library (``flowjit.aot``), every kernel linked in:
    ``int32_t NAME(void *const *in, void *const *out, void *scratch)`` takes a pointer per
    argument (C-contiguous, the traced shapes and dtypes, in ``plan.args`` order) and one
    per returned value (caller-allocated, ``plan.results`` order) and returns ``C_OK``,
    ``C_ERR_NOMEM`` (the scratch or a kernel's temps could not be allocated),
    ``C_ERR_ALIGN`` (``scratch`` not 64-byte aligned) or ``C_ERR_NULL`` (a NULL pointer).
    ``scratch``: ``plan.scratch_bytes`` bytes, or NULL for the call to allocate and free
    its own. ``constants`` become read-only data of the module and ``blas`` maps
    ``sgemm``/``dgemm`` to the CBLAS symbols to call (integers of ``blas_int_bits``); the
    module also exports ``char NAME_digest[]`` holding ``digest``. ``frozen`` (argument
    position -> value): arguments compiled in as read-only data, which ``in`` then skips
    (a trained model's weights). ``symbolic``: the plan's sizes are ``Affine`` in a
    dimension B (``program.unify_plans``), which the entry takes as a fourth argument,
    ``int64_t B``. ``native_ldexp``, ``native_fma``, ``clear_upper``: the target's (``HostTarget``'s
    ``native_ldexp``, ``native_fma``, ``has_avx``). No Python symbol, and
    threads may call the entry at once: the only state is the native pool a plan with
    split kernels links in (``pthread_pool``, internal to the library, started by the
    first call; a second caller while it runs a loop runs its loops on its own thread)."""
    frozen_args = {plan.args[i]: value for i, value in (frozen or {}).items()}
    driver = _CDriver(plan, constants, name, blas, blas_int_bits, frozen_args, symbolic, clear_upper)
    steps = driver.render_c(digest)
    # The kernels the steps call, as the driver placed them: a kernel rendered at its dims
    # (``_Driver.at_dims``) under a name of its own, once per shape it runs at.
    text = _link(plan, steps, sgemm_symbol=blas.get("sgemm", ""), blas_int_bits=blas_int_bits,
                 kernels=[*driver.kernels_in["main"].values(), *driver.kernels_in["part"].values()],
                 not_inlined=driver.not_inlined, pooled=driver.pooled, native_ldexp=native_ldexp,
                 native_fma=native_fma)
    if not links_pool(plan):
        return text
    import llvmlite.binding as llvm

    with jit._llvm_lock:
        module = llvm.parse_assembly(text)
        module.link_in(llvm.parse_assembly(build_module()))
        for f in module.functions:  # the pool is this library's own, not the process's
            if not f.is_declaration and f.name != name:
                f.linkage = "internal"
        return str(module)
