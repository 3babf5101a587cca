"""LLVM IR of a loop-IR ``Kernel``, built with llvmlite's IR builder: the renderer behind
``render.render_kernel`` (whose docstring states the ABI and the semantics). It lives apart
from ``render`` so that loading cached kernels, which renders nothing, never imports
``llvmlite.ir``; ``render`` imports it on the first kernel it renders."""

from __future__ import annotations

from collections.abc import Callable

import llvmlite.ir as ir
import numpy as np

from flowjit.ir.dtypes import DType, float16, float32, float64
from flowjit.ir.dtypes import bool_ as fj_bool
from flowjit.ir.records import compile_records, record
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
    expressions,
    free_names,
    loop_count,
    subexpressions,
    substitute_lets,
    walk_statements,
)
from flowjit.lowering.tile_transpose import block_lets, block_reads, lanes_vectors, moves_evenly

from . import intrinsics, invariant_division, medium_trig, row_prefetch, scipy_functions
from .half_routines import round_to_odd_f32
from .ir_text import module_text
from .jit import PARALLEL_FOR_SYMBOL, UNROLL_ANALYSED_TRIPS, UNROLL_THRESHOLD
from .kernel_abi import (
    CHUNK_BYTES,
    POOLED_LOOP_MIN_WORK,
    PREFETCH_BYTES,
    STREAM_MIN_BYTES,
    TEMP_ALIGN,
    chunk_loop,
    chunk_symbol,
    disjuncts,
    next_multiple,
    pooled_loops,
    streamable,
    symbol,
)

I1, I8, I16, I32, I64 = ir.IntType(1), ir.IntType(8), ir.IntType(16), ir.IntType(32), ir.IntType(64)
# The fewest trips of an innermost loop whose float sums and products LLVM may reassociate
# (vectorize, adding the lanes pairwise at the end); a loop of fewer sums in order. The
# order must be the same whichever IR pipeline optimizes the module: O3's unrolls a loop of
# a few trips whole into adds in order where the quick tier's (jit.QUICK_PIPELINE, no
# unrolling) vectorized it, 1 ulp apart (rows of 3 to 10 floats did). A loop LLVM unrolls
# whole costs at most UNROLL_THRESHOLD (two or more a trip: a load and an add) or has at
# most UNROLL_ANALYSED_TRIPS trips; a loop of more trips vectorizes alike in both.
REASSOCIATE_MIN_TRIPS = max(UNROLL_THRESHOLD // 2, UNROLL_ANALYSED_TRIPS) + 1
F16, F32, F64 = ir.HalfType(), ir.FloatType(), ir.DoubleType()
# LLVM integers carry no sign: an unsigned dtype shares its width's type, and the
# instructions (icmp ult, udiv, zext, uitofp) say how the bits are read.
class _DistinctNode(ir.MDValue):
    """A ``distinct !{...}`` metadata node: an access group, or a loop ID (whose first
    operand is the node itself, as LLVM requires of one). Compared and hashed by identity,
    as LLVM keeps distinct nodes apart."""

    def __init__(self, module: ir.Module, operands: tuple = ()):
        super().__init__(module, operands, name=str(len(module.metadata)))

    def descr(self, buf: list) -> None:
        buf.append("distinct ")
        super().descr(buf)

    __eq__ = object.__eq__
    __ne__ = object.__ne__
    __hash__ = object.__hash__


_REG = {"bool": I1, "i8": I8, "i16": I16, "i32": I32, "i64": I64, "u8": I8, "u16": I16, "u32": I32, "u64": I64,
        "f16": F16, "f32": F32, "f64": F64}
_MEM = {**_REG, "bool": I8}
_FCMP = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
# Intrinsics that are LLVM intrinsics (exact, inlined or one instruction), and the libm
# function of the others (suffix "f" for float32).
_LLVM_INTRINSIC = {"sqrt": "llvm.sqrt", "floor": "llvm.floor", "ceil": "llvm.ceil", "rint": "llvm.rint",
                   "fabs": "llvm.fabs", "copysign": "llvm.copysign", "trunc": "llvm.trunc"}
_LIBM = {"exp": "exp", "expm1": "expm1", "log": "log", "log1p": "log1p", "sin": "sin", "cos": "cos",
         "tanh": "tanh", "erf": "erf", "atan2": "atan2", "pow": "pow", "asin": "asin", "acos": "acos",
         "atan": "atan", "sinh": "sinh", "cosh": "cosh", "asinh": "asinh", "acosh": "acosh", "atanh": "atanh",
         "hypot": "hypot", "cbrt": "cbrt"}


def _nan_flagged(acc: Accumulator) -> bool:
    """Whether float max/min accumulator ``acc`` runs NaN-blind with a "NaN seen" flag."""
    return acc.kind in ("max", "min") and acc.dtype in (float32, float64)


def _reg(d: DType) -> ir.Type:
    return _REG[d.short]


def _lanes(d: DType, side: int) -> ir.VectorType:
    """A vector of ``side`` lanes of ``d``'s register type."""
    return ir.VectorType(_reg(d), side)


def _mem(d: DType) -> ir.Type:
    return _MEM[d.short]


class _Renderer:
    def __init__(self, k: Kernel, fastmath: bool = False, optimize: bool = True, inline: bool = True,
                 pool_parts: int = 1, dims: tuple[int, ...] | None = None, same: tuple = (),
                 native_ldexp: bool = False, native_fma: bool = False):
        self.k = k
        self.native_ldexp = native_ldexp
        self.native_fma = native_fma
        # While a loop's fast version renders: (divisor, dtype) -> (its value, 1/it) (invariant_division)
        self.dividing: dict = {}
        # While a loop's fast version renders: its sines and cosines take the medium reduction alone (medium_trig)
        self.trig_medium = False
        # The kernel's Let bindings, which medium_trig follows to bound a sine's argument
        # (collected when the first sine renders: most kernels hold none)
        self._lets: dict | None = None
        # The blocked loops of a row loop that prefetch the next row: id(loop) -> row_prefetch.Prefetch's
        self.prefetching: dict = {}
        self.pool_parts = pool_parts
        self.const_dims = dims
        self.same = same
        self.pooled = [id(s) for s in pooled_loops(k)] if pool_parts > 1 else []
        self.noalias: set[str] = set()   # the buffers whose pointers are noalias (temps too)
        self.fastmath = ("fast",) if fastmath else ()
        self.optimize = optimize
        self.inline = inline
        self.module = ir.Module(name=k.name)
        self.args = [b for b in k.buffers if b.role != "temp"]
        self.helpers: dict[str, ir.Function] = {}
        self.itemsize = {b.name: b.dtype.itemsize for b in k.buffers}

    def function(self, name: str, body: tuple, bounds: tuple = ()) -> None:
        """Define function ``name`` running ``body``; ``bounds``: names of leading i64
        arguments bound in the body (a chunk entry's lo and hi)."""
        k, args = self.k, self.args
        ptr_types = [_mem(b.dtype).as_pointer() for b in args]
        dim_types = [I64 for b in args for _ in range(b.rank)]
        ret = ir.VoidType() if bounds else I32
        temp_bufs = k.temps   # never in a chunk entry (kernel_abi.chunk_loop)
        # An entry with temps takes their memory (kernel_abi.temp_bytes), or NULL to allocate its own.
        given_type = [I8.as_pointer()] if temp_bufs else []
        self.fn = ir.Function(self.module, ir.FunctionType(ret, [I64] * len(bounds) + ptr_types + dim_types
                                                           + given_type), name=name)
        self.fn.attributes.add("nounwind")
        if not self.optimize:
            # LLVM's optimizer skips the function, and code generation takes its fast path.
            self.fn.attributes.add("noinline")
            self.fn.attributes.add("optnone")
        if not self.inline:
            self.fn.attributes.add("noinline")
        # LLVM prefers 256-bit vectors on AVX-512 CPUs; kernels bound by arithmetic (gelu's
        # tanh) run 1.15-1.4x faster at 512 (measured on the AVX-512 machines). Elsewhere
        # (AVX2, AArch64) it changes nothing. A string attribute llvmlite does not validate.
        set.add(self.fn.attributes, '"prefer-vector-width"="512"')
        env = {}
        for n, a in zip(bounds, self.fn.args):
            a.name, env[n] = n, a
        params = self.fn.args[len(bounds):]
        # An output the kernel may write over one of its inputs shares memory with it; any
        # other buffer is the only way to its memory (a read-only input aliasing another
        # read-only input breaks no noalias promise).
        aliased = {n for names in k.in_place for n in names}
        overwrites = dict(zip((b.name for b in k.outputs), k.in_place))
        for b, a in zip(args, params):
            a.name = b.name
            if (not aliased if b.role == "in" else not overwrites.get(b.name)):
                a.add_attribute("noalias")
                self.noalias.add(b.name)
        self.noalias |= {t.name for t in temp_bufs}
        # An output written over an input (in place) is read and written at the same index
        # only (lowering's promise), so no iteration of any loop depends on another through
        # them; without noalias LLVM checks for overlap at run time and, finding the two
        # equal, runs the scalar loop (a GELU in place: 15x slower). Their loads and stores,
        # and the loads of inputs nothing writes, form an access group every innermost loop
        # declares parallel (LLVM takes the promise only for a loop all of whose accesses
        # are in the group: one storing elsewhere keeps its run-time check).
        self.in_place = aliased | {n for n, names in overwrites.items() if names}
        self.read_only = {b.name for b in args if b.role == "in"}
        self.access_group = _DistinctNode(self.module) if self.in_place else None
        self.loop_carries = False
        self.loop_vars: set[str] = set()   # the enclosing loops' variables (not names bound to values)
        self.edge_tile = False             # rendering a block tile's edge loops (block_loop)
        # While an innermost loop of float sums renders: whether they may reassociate
        # (``sums_by_trips``), None outside one.
        self.reassociate: bool | None = None
        entry = self.fn.append_basic_block("entry")
        self.alloca_builder = ir.IRBuilder(entry)
        body_block = self.fn.append_basic_block("body")
        self.b = ir.IRBuilder(body_block)
        self.ptrs: dict[str, ir.Value] = {b.name: a for b, a in zip(args, params)}
        for written, read in self.same:   # one buffer at the only call: one pointer, as inlined there
            self.ptrs[read] = self.ptrs[written]
        self.dims: dict[str, list] = {}
        rest = iter(params[len(args):])
        known = iter(self.const_dims) if self.const_dims is not None else None
        for b in args:
            self.dims[b.name] = []
            for d in range(b.rank):
                a = next(rest)
                a.name = f"{b.name}_d{d}"
                self.dims[b.name].append(a if known is None else ir.Constant(I64, next(known)))
        self.accs: dict[str, tuple] = {}
        self.memo: dict = {}
        env.update({s.name: self.dims[s.buffer][s.dim] for s in k.sizes})
        free = self._libc("free", ir.VoidType(), [I8.as_pointer()])
        temps: list[ir.Value] = []
        owned: ir.Value | None = None   # whether the kernel allocated its temps itself
        if temp_bufs:
            counts = []
            for t in temp_bufs:
                dims = [self.expr(n, env) for n in t.shape]
                self.memo = {}
                count = ir.Constant(I64, 1)
                for n in dims:
                    count = self.b.mul(count, n)
                counts.append(count)
                self.dims[t.name] = dims
            given = self.fn.args[-1]
            given.name = "temps"
            # The caller's scratch slice overlaps none of the kernel's arguments (the plan
            # keeps it apart from every buffer alive at the step), as calloc's did.
            given.add_attribute("noalias")
            own, carve = self.fn.append_basic_block("own_temps"), self.fn.append_basic_block("given_temps")
            joined = self.fn.append_basic_block("temps_ready")
            self.b.cbranch(self.b.icmp_unsigned("==", given, ir.Constant(given.type, None)), own, carve)
            self.b.position_at_end(carve)
            # Each temp from the next address that is a multiple of TEMP_ALIGN, wherever the
            # slice starts (a plan symbolic in a batch dimension places it at any multiple of 4).
            start = self.b.ptrtoint(given, I64)
            carved, at = [], start
            for t, count in zip(temp_bufs, counts):
                at = next_multiple(self.b, at, TEMP_ALIGN)
                carved.append(self.b.gep(given, [self.b.sub(at, start)], inbounds=True))
                at = self.b.add(at, self.b.mul(count, ir.Constant(I64, max(1, t.dtype.itemsize))))
            self.b.branch(joined)
            self.b.position_at_end(own)
            calloc = self._libc("calloc", I8.as_pointer(), [I64, I64])
            raws = [self.b.call(calloc, [count, ir.Constant(I64, max(1, t.dtype.itemsize))])
                    for t, count in zip(temp_bufs, counts)]
            # Out of memory: free what was allocated, return 1 (free(NULL) is a no-op).
            failed = ir.Constant(I1, 0)
            for raw in raws:
                failed = self.b.or_(failed, self.b.icmp_unsigned("==", raw, ir.Constant(raw.type, None)))
            bail, go = self.fn.append_basic_block("no_memory"), self.fn.append_basic_block("run")
            self.b.cbranch(failed, bail, go)
            self.b.position_at_end(bail)
            for raw in raws:
                self.b.call(free, [raw])
            self.b.ret(ir.Constant(I32, 1))
            self.b.position_at_end(go)
            self.b.branch(joined)
            self.b.position_at_end(joined)
            for c, raw in zip(carved, raws):
                temps.append(self.b.phi(I8.as_pointer()))
                temps[-1].add_incoming(c, carve)
                temps[-1].add_incoming(raw, go)
            owned = self.b.phi(I1)
            owned.add_incoming(ir.Constant(I1, 0), carve)
            owned.add_incoming(ir.Constant(I1, 1), go)
            for t, raw in zip(temp_bufs, temps):
                self.ptrs[t.name] = self.b.bitcast(raw, _mem(t.dtype).as_pointer())
        for s in body:
            if id(s) in self.pooled and not bounds:
                self.pool_loop(s, env)
            else:
                self.stmts((s,), env)
        if temps:   # the memory it allocated itself, not the caller's
            release, done = self.fn.append_basic_block("free_temps"), self.fn.append_basic_block("done")
            self.b.cbranch(owned, release, done)
            self.b.position_at_end(release)
            for raw in temps:
                self.b.call(free, [raw])
            self.b.branch(done)
            self.b.position_at_end(done)
        if bounds:
            self.b.ret_void()
        else:
            self.b.ret(ir.Constant(I32, 0))
        self.alloca_builder.branch(body_block)

    def render(self) -> str:
        split = chunk_loop(self.k)
        if split is None:
            self.function(symbol(self.k), self.k.body)
        else:
            pos, loop = split
            chunked = Loop(loop.var, Var("$lo", INDEX), Var("$hi", INDEX), 1, loop.body, stream=loop.stream)
            body = self.k.body[:pos] + (chunked,) + self.k.body[pos + 1:]
            self.function(chunk_symbol(self.k), body, ("$lo", "$hi"))
            # One copy of the body: the whole call is the chunk [0, stop) (inlined, it
            # would be compiled twice).
            self.chunk_fn = self.fn
            self.fn.attributes.add("noinline")
            self.function(symbol(self.k), (_WholeRange(loop.stop),))
        return module_text(self.module)

    def pool_loop(self, s: Loop, env: dict) -> None:
        """Top-level parallel loop ``s`` run by ``flowjit_parallel_for`` over its trips, on up
        to ``pool_parts`` threads once its work reaches POOLED_LOOP_MIN_WORK (else on this
        thread, through the same call): its body becomes a function of the chunk's bounds
        and of every pointer, dimension and bound value the kernel holds at the loop (the
        same noalias promises as the kernel's), behind a wrapper of the pool's signature
        that reads them from a context on this function's stack."""
        b = self.b
        self.memo = {}
        start, stop = self.expr(s.start, env), self.expr(s.stop, env)
        zero = ir.Constant(I64, 0)
        trips = b.sub(stop, start)
        trips = b.select(b.icmp_signed(">", trips, zero), trips, zero)
        # An iteration's work as the first one's: loops whose bounds read the loop's variable
        # (a chunk's rows) count too.
        work = b.mul(trips, self.inner_work(s.body, {**env, s.var: start}))
        # What the body reads from the kernel: constants (a kernel rendered at its dims)
        # stay constants of the body's code; the rest are its arguments, read from the context.
        ptrs = [(n, p) for n, p in self.ptrs.items() if not n.startswith("$")]
        dims = [(n, d) for n, ds in self.dims.items() if not n.startswith("$") for d in ds]
        bound = [(n, v) for n, v in env.items() if isinstance(v, ir.Value)]
        values = [start, *(p for _, p in ptrs), *(d for _, d in dims), *(v for _, v in bound)]
        # One field per distinct value: an input and the output written over it (``same``)
        # stay one pointer in the body, so that LLVM still sees a copy onto itself.
        fields = list({id(v): v for v in values if not isinstance(v, ir.Constant)}.values())
        name = f"{self.fn.name}.pool{self.pooled.index(id(s))}"
        body_fn = ir.Function(self.module, ir.FunctionType(ir.VoidType(), [I64, I64, *(f.type for f in fields)]),
                              name=name)
        body_fn.linkage = "internal"
        for attr in self.fn.attributes:
            set.add(body_fn.attributes, attr)   # string attributes too, which llvmlite does not validate
        lo, hi, *params = body_fn.args
        param_of = {id(f): a for f, a in zip(fields, params)}
        first, *inside = [v if isinstance(v, ir.Constant) else param_of[id(v)] for v in values]
        for (n, _), a in zip(ptrs, inside):
            if n in self.noalias:
                a.name = n
                a.add_attribute("noalias")
        saved = (self.fn, self.b, self.alloca_builder, self.ptrs, self.dims, self.accs, self.memo, self.loop_vars)
        self.fn, self.accs, self.memo, self.loop_vars = body_fn, {}, {}, set()
        self.alloca_builder = ir.IRBuilder(body_fn.append_basic_block("entry"))
        body_block = body_fn.append_basic_block("body")
        self.b = ir.IRBuilder(body_block)
        self.ptrs = {n: a for (n, _), a in zip(ptrs, inside)}
        self.dims = {}
        rest = iter(inside[len(ptrs):])
        for n, _ in dims:
            self.dims.setdefault(n, []).append(next(rest))
        inner = {n: next(rest) for n, _ in bound}
        inner["$lo"], inner["$hi"] = self.b.add(first, lo), self.b.add(first, hi)
        self.stmts((Loop(s.var, Var("$lo", INDEX), Var("$hi", INDEX), 1, s.body, stream=s.stream),), inner)
        self.b.ret_void()
        self.alloca_builder.branch(body_block)
        self.fn, self.b, self.alloca_builder, self.ptrs, self.dims, self.accs, self.memo, self.loop_vars = saved

        context = ir.LiteralStructType([f.type for f in fields])
        chunk_ty = ir.FunctionType(ir.VoidType(), [I64, I64, I8.as_pointer()])
        wrap = ir.Function(self.module, chunk_ty, name=f"{name}.chunk")
        wrap.linkage = "internal"
        wrap.attributes.add("nounwind")
        w = ir.IRBuilder(wrap.append_basic_block("entry"))
        at = w.bitcast(wrap.args[2], context.as_pointer())
        w.call(body_fn, [wrap.args[0], wrap.args[1], *(
            w.load(w.gep(at, [ir.Constant(I32, 0), ir.Constant(I32, i)], inbounds=True)) for i in range(len(fields)))])
        w.ret_void()
        ctx = self.alloca_builder.alloca(context, name=f"{s.var}.context")
        for i, f in enumerate(fields):
            b.store(f, b.gep(ctx, [ir.Constant(I32, 0), ir.Constant(I32, i)], inbounds=True))
        parts = b.select(b.icmp_signed(">=", work, ir.Constant(I64, POOLED_LOOP_MIN_WORK)),
                         ir.Constant(I64, self.pool_parts), ir.Constant(I64, 1))
        pfor = self._libc(PARALLEL_FOR_SYMBOL, ir.VoidType(), [chunk_ty.as_pointer(), I64, I8.as_pointer(), I64])
        b.call(pfor, [wrap, trips, b.bitcast(ctx, I8.as_pointer()), parts])

    def inner_work(self, body: tuple, env: dict) -> ir.Value:
        """The iterations of the loops nested in ``body`` (summed over sequential loops,
        multiplied through nests) whose bounds are known before it or read the variables of
        loops around them in it (at their first iteration: a tile's rows), at least 1: an
        estimate of one iteration's work, computed with ``env``."""
        b = self.b
        total = ir.Constant(I64, 1)
        for s in body:
            if isinstance(s, If):   # one branch runs: the larger's work (a loop and its interior version)
                then, orelse = self.inner_work(s.then, env), self.inner_work(s.orelse, env)
                total = b.add(total, b.select(b.icmp_signed(">", then, orelse), then, orelse))
            if not isinstance(s, Loop) or not (free_names(s.start) | free_names(s.stop)) <= env.keys():
                continue
            first, last = self.expr(s.start, env), self.expr(s.stop, env)
            n = b.sub(last, first) if s.step > 0 else b.sub(first, last)
            n = b.select(b.icmp_signed(">", n, ir.Constant(I64, 0)), n, ir.Constant(I64, 0))
            total = b.add(total, b.mul(n, self.inner_work(s.body, {**env, s.var: first})))
        return total

    def _libc(self, name: str, ret: ir.Type, args: list) -> ir.Function:
        fn = self.module.globals.get(name)
        if fn is None:
            fn = ir.Function(self.module, ir.FunctionType(ret, args), name=name)
        return fn

    def slot(self, t: ir.Type, name: str) -> ir.Value:
        return self.alloca_builder.alloca(t, name=name)

    # ---- statements -----------------------------------------------------------------------
    def stmts(self, body: tuple, env: dict) -> None:
        for s in body:
            self.memo = {}
            if isinstance(s, Loop):
                self.loop(s, env)
            elif isinstance(s, Let):
                env[s.name] = self.expr(s.value, env)
            elif isinstance(s, Store):
                self.freeze_reread(s, env)
                st = self.b.store(self.to_mem(self.expr(s.value, env), s.value.dtype),
                                  self.address(s.buffer, s.index, env), align=max(1, self.itemsize[s.buffer]))
                self.grouped(st, s.buffer, s.index)
            elif isinstance(s, _StreamLine):
                self.stream_line(s, env)
            elif isinstance(s, _WholeRange):
                self.b.call(self.chunk_fn, [ir.Constant(I64, 0), self.expr(s.stop, env), *self.fn.args])
            elif isinstance(s, Accumulator):
                self.declare(s, env)
            elif isinstance(s, Update):
                self.update(s, env)
            elif isinstance(s, If):
                cond = self.expr(s.cond, env)
                with self.b.if_else(cond) as (then, orelse):
                    with then:
                        self.stmts(s.then, dict(env))
                    with orelse:
                        self.stmts(s.orelse, dict(env))
            else:
                raise TypeError(f"not a loop-IR statement: {s!r}")

    def loop(self, s: Loop, env: dict) -> None:
        if self.reassociate is None and self.reassociable_sums(s):
            self.sums_by_trips(s, env)
            return
        if s.stream and streamable(self.k, s):
            self.stream_loop(s, env)
            return
        if s.block and self.optimize and not self.dividing:
            self.block_loop(s, env)
            return
        if s.lanes and not self.dividing and lanes_vectors(s):
            self.lanes_loop(s, env)
            return
        if self.native_fma and self.optimize and not self.fastmath and not self.dividing and s.step == 1:
            divs = invariant_division.divisions(s)
            if divs and not self.runs_once(s, env):
                self.versioned_division_loop(s, env, divs)
                return
        if self.optimize and not self.dividing and not self.trig_medium and s.step == 1:
            args = medium_trig.arguments(s, self.lets())
            if args and not self.runs_once(s, env, medium_trig.MIN_TRIPS):
                self.versioned_trig_loop(s, env, args)
                return
        if self.optimize:
            self.prefetching.update(row_prefetch.plan(s))
        self.plain_loop(s, env)

    def block_loop(self, s: Loop, env: dict) -> None:
        """A transposing tile's row loop (``Loop.block``): a full tile, ``s.block`` rows by
        ``s.block`` columns, as vectors (``vector_block``); an edge tile as its loops."""
        inner = s.body[-1]
        b, side = self.b, ir.Constant(I64, s.block)
        self.memo = {}
        i0, i1 = self.expr(s.start, env), self.expr(s.stop, env)
        j0, j1 = self.expr(inner.start, env), self.expr(inner.stop, env)
        full = b.and_(b.icmp_signed("==", b.sub(i1, i0), side), b.icmp_signed("==", b.sub(j1, j0), side))
        # Vectors of a register's width: 16 four-byte lanes where the target has AVX-512F
        # (``native_ldexp`` is exactly that, ``HostTarget.native_ldexp``), else 8: on an AVX2
        # target 16-lane shuffles took a float32 4096x1024 transpose from 2.1 ms (scalar
        # tiles) to 3.7 and its first call 20 -> 150 ms of LLVM; the tile is then four blocks.
        width = min(s.block, 16 if self.native_ldexp else 8)
        reads = block_reads(s, inner)
        assert reads is not None, "a block tile the pass could not have marked"
        with b.if_else(full, likely=True) as (then, orelse):
            with then:
                for bi in range(0, s.block, width):
                    for bj in range(0, s.block, width):
                        self.vector_block(s, inner, env, b.add(i0, ir.Constant(I64, bi)) if bi else i0,
                                          b.add(j0, ir.Constant(I64, bj)) if bj else j0, width, reads)
            with orelse:
                # An edge tile's loops, rarely run: unrolled (and the unrolled stores made
                # scatters) they took a float32 transpose's LLVM time from 47 to 65 ms.
                self.memo = {}
                self.edge_tile = True
                self.plain_loop(s, dict(env))
                self.edge_tile = False
        self.memo = {}

    def vector_block(self, s: Loop, inner: Loop, env: dict, i0: ir.Value, j0: ir.Value, side: int,
                     reads: dict[Load, str]) -> None:
        """The ``side`` rows from ``i0`` and ``side`` columns from ``j0`` of a full tile of ``s``
        (its last statement ``inner`` over the columns): per row, a vector over the
        columns of every value, and one store of it. A load along the rows is read as a
        vector per tile column, and the square of them transposed in registers; one along
        the columns as a vector per row; one the column does not move as an element per
        row, broadcast (``reads``: ``block_reads``'s). Every load comes before every store, which the
        tiling pass allows: an output is read only at the element the same iteration
        stores."""
        b = self.b
        lets = block_lets(s, inner)

        def lanes(d: DType) -> ir.VectorType:
            return _lanes(d, side)

        def address(buffer: str, index: tuple, r: int, k: int) -> ir.Value:
            at = dict(env)
            at[s.var] = b.add(i0, ir.Constant(I64, r)) if r else i0
            at[inner.var] = b.add(j0, ir.Constant(I64, k)) if k else j0
            self.memo = {}
            return self.address(buffer, index, at)

        def addresses(buffer: str, index: tuple, along_rows: bool) -> list:
            """The element's address at each tile row (or, not ``along_rows``, each tile
            column): the first plus a multiple of one step where every index moves by a
            constant step (affine in the variable), else each computed."""
            var = s.var if along_rows else inner.var
            if not all(moves_evenly(e, var) for e in index):
                return [address(buffer, index, *((n, 0) if along_rows else (0, n))) for n in range(side)]
            first = address(buffer, index, 0, 0)
            second = address(buffer, index, *((1, 0) if along_rows else (0, 1)))
            step = b.sub(b.ptrtoint(second, I64), b.ptrtoint(first, I64))   # in bytes
            base = b.bitcast(first, I8.as_pointer())
            return [first] + [b.bitcast(b.gep(base, [b.mul(step, ir.Constant(I64, n))]), first.type)
                              for n in range(1, side)]

        def vectors(load: Load, along_rows: bool) -> list:
            out = []
            for ptr in addresses(load.buffer, load.index, along_rows):
                v = b.load(b.bitcast(ptr, lanes(load.dtype).as_pointer()), align=load.dtype.itemsize)
                self.grouped(v, load.buffer, load.index)
                out.append(v)
            return out

        def splat(x: ir.Value, d: DType) -> ir.Value:
            return self.splat(x, d, side)

        loaded: dict[Load, list] = {}
        for load, how in reads.items():
            if how == "row":
                loaded[load] = vectors(load, True)
            elif how == "column":
                loaded[load] = _transposed(b, vectors(load, False))
            else:
                at = [b.load(p, align=load.dtype.itemsize) for p in addresses(load.buffer, load.index, True)]
                loaded[load] = [splat(x, load.dtype) for x in at]
        stored = {x: addresses(x.buffer, tuple(substitute_lets(e, lets) for e in x.index), True)
                  for x in inner.body if isinstance(x, Store)}
        for r in range(side):
            values: dict[str, ir.Value] = {}

            def value(e: Expr) -> ir.Value:
                if isinstance(e, Const):
                    return ir.Constant(lanes(e.dtype), [self.const(e.value, e.dtype)] * side)
                if isinstance(e, Var):
                    return values[e.name]
                if isinstance(e, Load):
                    return loaded[Load(e.buffer, tuple(substitute_lets(x, lets) for x in e.index), e.dtype)][r]
                assert isinstance(e, Prim), e
                return self.prim(e.op, [value(a) for a in e.args], [a.dtype for a in e.args], e.dtype)

            for x in (*s.body[:-1], *inner.body):
                if isinstance(x, Let) and x.value.dtype != INDEX:
                    values[x.name] = value(x.value)
                elif isinstance(x, Store):
                    ptr = b.bitcast(stored[x][r], lanes(x.value.dtype).as_pointer())
                    st = b.store(value(x.value), ptr, align=max(1, self.itemsize[x.buffer]))
                    self.grouped(st, x.buffer, x.index)
        self.memo = {}

    def lanes_loop(self, s: Loop, env: dict) -> None:
        """A loop of ``s.lanes`` iterations (``Loop.lanes``, ``lanes_vectors``) as one vector
        of that many lanes per value: every load and store of a lane-wide index one vector
        access from the element at the loop's start, every other value a scalar broadcast.
        Emitted here rather than left to LLVM's loop vectorizer, whose time on the FFT
        kernel's stages was most of the kernel's cold compile."""
        b = self.b
        side = s.lanes
        self.memo = {}
        at_start = {**env, s.var: self.expr(s.start, env)}

        def lanes(d: DType) -> ir.VectorType:
            return _lanes(d, side)

        def splat(x: ir.Value, d: DType) -> ir.Value:
            return self.splat(x, d, side)

        values: dict[str, ir.Value] = {}
        memo: dict = {}

        def value(e: Expr) -> ir.Value:
            if s.var not in free_names(e) and not any(isinstance(x, Var) and x.name in values
                                                      for x in subexpressions(e)):
                return splat(self.expr(e, env), e.dtype)
            if isinstance(e, Var):
                return values[e.name]
            if e in memo:
                return memo[e]
            if isinstance(e, Load):
                ptr = b.bitcast(self.address(e.buffer, e.index, at_start), lanes(e.dtype).as_pointer())
                out = b.load(ptr, align=max(1, e.dtype.itemsize))
                self.grouped(out, e.buffer, e.index)
            else:
                assert isinstance(e, Prim), e
                out = self.prim(e.op, [value(a) for a in e.args], [a.dtype for a in e.args], e.dtype)
            memo[e] = out
            return out

        for x in s.body:
            if isinstance(x, Let):
                values[x.name] = value(x.value)
            else:
                ptr = b.bitcast(self.address(x.buffer, x.index, at_start), lanes(x.value.dtype).as_pointer())
                st = b.store(value(x.value), ptr, align=max(1, self.itemsize[x.buffer]))
                self.grouped(st, x.buffer, x.index)
        self.memo = {}

    def splat(self, x: ir.Value, d: DType, side: int) -> ir.Value:
        """Scalar ``x`` of dtype ``d`` in every one of ``side`` lanes."""
        b = self.b
        one = b.insert_element(ir.Constant(_lanes(d, side), ir.Undefined), x, ir.Constant(I32, 0))
        return b.shuffle_vector(one, ir.Constant(_lanes(d, side), ir.Undefined),
                                ir.Constant(ir.VectorType(I32, side), [0] * side))

    def reassociable(self, acc: Accumulator) -> bool:
        """Whether accumulator ``acc``'s updates may be reassociated: a float sum or product
        (not float16's, not under fastmath, whose own flags say so): NumPy's semantics allow
        partial sums per vector lane."""
        return acc.kind in ("sum", "prod") and acc.dtype.is_float and acc.dtype != float16 and not self.fastmath

    def reassociable_sums(self, s: Loop) -> bool:
        """Whether ``s`` is an innermost loop updating a reassociable accumulator."""
        inside = list(walk_statements(s.body))
        return not any(isinstance(x, Loop) for x in inside) and any(
            isinstance(x, Update) and x.name in self.accs and self.reassociable(self.accs[x.name][0]) for x in inside)

    def sums_by_trips(self, s: Loop, env: dict) -> None:
        """Innermost loop ``s`` of float sums with them reassociable where it runs
        REASSOCIATE_MIN_TRIPS trips or more, in order where fewer: one version where its
        bounds are constants, else both behind a test of its trip count (which LLVM folds
        where inlining makes them constants)."""
        start, stop = self.expr(s.start, env), self.expr(s.stop, env)
        least = REASSOCIATE_MIN_TRIPS * abs(s.step)
        try:
            if isinstance(start, ir.Constant) and isinstance(stop, ir.Constant):
                self.reassociate = (stop.constant - start.constant) * (1 if s.step > 0 else -1) >= least
                self.memo = {}
                self.loop(s, env)
                return
            span = self.b.sub(stop, start) if s.step > 0 else self.b.sub(start, stop)
            many = self.b.icmp_signed(">=", span, ir.Constant(I64, least))
            with self.b.if_else(many) as (then, few):
                for reassociate, branch in ((True, then), (False, few)):
                    with branch:
                        self.reassociate = reassociate
                        self.memo = {}
                        self.loop(s, dict(env))
        finally:
            self.reassociate = None
            self.memo = {}

    def runs_once(self, s: Loop, env: dict, least: int | None = None) -> bool:
        """Whether ``s`` runs once in its kernel (no loop encloses it) over a number of
        iterations known when it is rendered (below ``least`` where given:
        ``medium_trig.MIN_TRIPS``): what versioning it saves costs less than the two loops
        more it gives LLVM to compile (``invariant_division``)."""
        if self.loop_vars:
            return False
        ends = [env.get(e.name) if isinstance(e, Var) else self.const(e.value, e.dtype) if isinstance(e, Const)
                else None for e in (s.start, s.stop)]
        if not all(isinstance(v, ir.Constant) for v in ends):
            return False
        return least is None or (ends[1].constant - ends[0].constant) // s.step < least

    def lets(self) -> dict:
        """The kernel's ``Let`` bindings (``medium_trig.kernel_lets``), collected once."""
        if self._lets is None:
            self._lets = medium_trig.kernel_lets(self.k.body)
        return self._lets

    def check_pass(self, s: Loop, env: dict, stop: ir.Value, tag: str, starts: list,
                   step: Callable[[dict, list], list]) -> list:
        """A first pass over loop ``s``'s iterations from its start to ``stop`` that only
        computes: integer values carried from ``starts`` (``(type, initial)`` pairs), each
        iteration's new ones ``step(env with the loop's index, current values)``. Returns
        the values after the pass (a versioned loop's check: ``versioned_*_loop``)."""
        b = self.b
        start = self.expr(s.start, env)
        pre = b.block
        head, body, done = (self.fn.append_basic_block(f"{s.var}.{tag}{x}") for x in ("", ".body", ".done"))
        b.branch(head)
        b.position_at_end(head)
        i = b.phi(I64, name=f"{s.var}.{tag}")
        i.add_incoming(start, pre)
        values = []
        for t, initial in starts:
            values.append(b.phi(t))
            values[-1].add_incoming(ir.Constant(t, initial), pre)
        b.cbranch(b.icmp_signed("<", i, stop), body, done)
        b.position_at_end(body)
        self.memo = {}
        carries = self.loop_carries
        news = step({**env, s.var: i}, list(values))
        self.loop_carries = carries
        i.add_incoming(b.add(i, ir.Constant(I64, 1), flags=["nsw"]), b.block)
        for v, new in zip(values, news):
            v.add_incoming(new, b.block)
        b.branch(head)
        b.position_at_end(done)
        self.memo = {}
        return values

    def two_versions(self, s: Loop, env: dict, ok: ir.Value, fast: Callable[[bool], None]) -> None:
        """Loop ``s`` as its fast version where ``ok``, else as written: ``fast(True)`` sets
        the renderer up for the fast version before it renders, ``fast(False)`` after."""
        with self.b.if_else(ok) as (then, written):
            with then:
                fast(True)
                self.memo = {}
                self.plain_loop(s, dict(env))
                fast(False)
            with written:
                self.memo = {}
                self.plain_loop(s, dict(env))
        self.memo = {}

    def _unsigned(self, extreme: str, a: ir.Value, c: ir.Value) -> ir.Value:
        """``llvm.umin`` or ``llvm.umax`` (``extreme``) of integers ``a`` and ``c``."""
        t = a.type
        return self.b.call(self._libc(f"llvm.{extreme}.i{t.width}", t, [t, t]), [a, c])

    def versioned_division_loop(self, s: Loop, env: dict, divs: tuple) -> None:
        """Loop ``s`` twice over: a pass that checks its dividends and divisors against
        ``invariant_division.WINDOW``, then ``s`` with Markstein's division when they all
        qualify, else ``s`` as written (see ``invariant_division``); a loop of more than
        ``MAX_TRIPS`` iterations skips the check and runs as written."""
        b = self.b
        self.memo = {}
        start, stop = self.expr(s.start, env), self.expr(s.stop, env)
        # A longer loop (a flat one over a whole array, Adam's update) would read its
        # dividends from memory twice: it runs as written, and checks nothing.
        trips = b.sub(stop, start)
        short = b.icmp_signed("<=", trips, ir.Constant(I64, invariant_division.MAX_TRIPS))
        if not self.loop_vars:
            # A loop that runs once is not versioned where its count is a constant once its
            # kernel is inlined at its call (see ``invariant_division``): LLVM folds this to
            # false there, and its loop passes (the vectorizer's, the unroller's) never see
            # the check or the second copy.
            known = b.call(self._libc("llvm.is.constant.i64", ir.IntType(1), [I64]), [trips])
            short = b.and_(short, b.not_(known))
        types = sorted({d.dtype for d in divs}, key=lambda d: d.itemsize)
        ints = {d: ir.IntType(8 * d.itemsize) for d in types}

        def step(inner: dict, values: list) -> list:
            news = dict(zip(types, zip(values[::2], values[1::2])))
            for div in divs:
                t = ints[div.dtype]
                mask = invariant_division.window_bits(div.dtype)[0]
                for dividend in div.dividends:
                    mag = b.and_(b.bitcast(self.expr(dividend, inner), t), ir.Constant(t, mask))
                    lo, hi = news[div.dtype]
                    # zero wraps to the top of the unsigned range, out of the minimum's way
                    news[div.dtype] = (self._unsigned("umin", lo, b.sub(mag, ir.Constant(t, 1))),
                                       self._unsigned("umax", hi, mag))
            return [v for d in types for v in news[d]]
        values = self.check_pass(s, env, b.select(short, stop, start), "check",
                                 [(ints[d], x) for d in types for x in (-1, 0)], step)
        ok = short
        for d, lo, hi in zip(types, values[::2], values[1::2]):
            t = ints[d]
            _, low, high = invariant_division.window_bits(d)
            ok = b.and_(ok, b.and_(b.icmp_unsigned(">=", lo, ir.Constant(t, low - 1)),
                                   b.icmp_unsigned("<=", hi, ir.Constant(t, high))))
        dividing = {}
        for div in divs:
            t = ints[div.dtype]
            _, low, high = invariant_division.window_bits(div.dtype)
            sv = self.expr(div.divisor, env)
            # the sign bit left in: a negative divisor takes the divider (see markstein)
            ok = b.and_(ok, b.icmp_unsigned("<=", b.sub(b.bitcast(sv, t), ir.Constant(t, low)),
                                            ir.Constant(t, high - low)))
            dividing[(div.divisor, div.dtype)] = sv

        def fast(on: bool) -> None:
            self.dividing = ({k: (v, b.fdiv(ir.Constant(v.type, 1.0), v)) for k, v in dividing.items()}
                             if on else {})
        self.two_versions(s, env, ok, fast)

    def versioned_trig_loop(self, s: Loop, env: dict, args: tuple) -> None:
        """Loop ``s`` twice over: a pass taking the largest magnitude (as bits) of its sines'
        and cosines' arguments, then ``s`` with the medium reduction alone when every one is
        at most ``medium_trig.MEDIUM`` (NaN and the infinities are not), else ``s`` as
        written (see ``medium_trig``)."""
        b = self.b
        self.memo = {}
        stop = self.expr(s.stop, env)
        types = sorted({d for _, d in args}, key=lambda d: d.itemsize)
        ints = {d: ir.IntType(8 * d.itemsize) for d in types}

        def step(inner: dict, values: list) -> list:
            largest = dict(zip(types, values))
            for arg, d in args:
                t = ints[d]
                mag = b.and_(b.bitcast(self.expr(arg, inner), t), ir.Constant(t, invariant_division.magnitude_mask(d)))
                largest[d] = self._unsigned("umax", largest[d], mag)
            return [largest[d] for d in types]
        values = self.check_pass(s, env, stop, "trig", [(ints[d], 0) for d in types], step)
        ok = ir.Constant(I1, 1)
        for d, largest in zip(types, values):
            ok = b.and_(ok, b.icmp_unsigned("<=", largest, ir.Constant(ints[d], medium_trig.MEDIUM_BITS[d])))

        def fast(on: bool) -> None:
            self.trig_medium = on
        self.two_versions(s, env, ok, fast)

    def markstein(self, a: ir.Value, s: ir.Value, y: ir.Value) -> ir.Value:
        """``a / s`` correctly rounded from ``y = 1/s`` (correctly rounded) with two fused
        multiply-adds, for ``a`` and positive ``s`` within ``invariant_division.WINDOW``.
        ``q' = q - (q*s - a)*y`` rather than ``q + (a - q*s)*y`` (the same real number, so
        the same rounding) because its last sum keeps a zero dividend's sign for a positive
        divisor: ``-0 + -0`` where the other form adds ``+0`` to ``-0`` and gets ``+0``; a
        negative divisor would lose ``+0``'s sign the same way, so the check sends it to the
        divider rather than every quotient paying a compare and a blend."""
        b = self.b
        fma = self._libc(f"llvm.fma.{'f32' if a.type == F32 else 'f64'}", a.type, [a.type] * 3)
        q = b.fmul(a, y)
        residual = b.call(fma, [q, s, b.fneg(a)])
        return b.call(fma, [b.fneg(residual), y, q])

    def plain_loop(self, s: Loop, env: dict) -> None:
        start, stop = self.expr(s.start, env), self.expr(s.stop, env)
        pre = self.b.block
        header = self.fn.append_basic_block(f"{s.var}.head")
        body = self.fn.append_basic_block(f"{s.var}.body")
        done = self.fn.append_basic_block(f"{s.var}.done")
        self.b.branch(header)
        self.b.position_at_end(header)
        i = self.b.phi(I64, name=s.var)
        i.add_incoming(start, pre)
        going = self.b.icmp_signed("<" if s.step > 0 else ">", i, stop)
        self.b.cbranch(going, body, done)
        self.b.position_at_end(body)
        inner = dict(env)
        inner[s.var] = i
        for ahead in self.prefetching.get(id(s), ()):
            self.row_ahead(ahead, inner)
        self.loop_carries = False
        self.loop_vars.add(s.var)
        self.stmts(s.body, inner)
        self.loop_vars.discard(s.var)
        nxt = self.b.add(i, ir.Constant(I64, s.step), flags=["nsw"])
        i.add_incoming(nxt, self.b.block)
        latch = self.b.branch(header)
        hints = []
        if self.access_group is not None and not self.loop_carries and loop_count(s.body) == 0:
            hints.append(self.module.add_metadata(["llvm.loop.parallel_accesses", self.access_group]))
        if s.scalar:
            hints.append(self.module.add_metadata(["llvm.loop.vectorize.enable", I1(0)]))
        if s.lanes:
            # Whole, before LLVM's full unroll of a short loop turns it into scalars first.
            hints += [self.module.add_metadata(["llvm.loop.vectorize.enable", I1(1)]),
                      self.module.add_metadata(["llvm.loop.vectorize.width", ir.Constant(ir.IntType(32), s.lanes)]),
                      self.module.add_metadata(["llvm.loop.unroll.disable"])]
        if self.edge_tile:
            hints.append(self.module.add_metadata(["llvm.loop.unroll.disable"]))
        if hints:
            loop_id = _DistinctNode(self.module)
            loop_id.operands = (loop_id, *hints)
            latch.set_metadata("llvm.loop", loop_id)
        self.b.position_at_end(done)

    def freeze_reread(self, s: Store, env: dict) -> None:
        """Read frozen what store ``s`` reads back from its own cell (a max pool's running
        maximum, ``out = select(out > v, out, v)``). LLVM's x86 back end turns a select
        between such a load and a new value, stored back, into a masked store, which on a
        CPU without AVX-512 is ``vmaskmovps``, microcoded on AMD's cores: the zoo CNN's
        second batch norm, ReLU and max pool (64 channels, where the window's running
        maxima are not kept in registers) took 317 us a call on Zen 3 against 204 for the
        first (32 channels, twice the elements), 124 us read frozen (the zoo CNN's
        inference 2.68-2.76 -> 2.40-2.53 ms). A freeze is no instruction: a blend and a
        plain store instead. Only a select's operand: a sum stored back keeps its plain
        load, which LLVM's reductions recognize."""
        reread = {a for e in subexpressions(s.value) if isinstance(e, Prim) and e.op == "select"
                  for a in e.args[1:] if isinstance(a, Load) and a.buffer == s.buffer and a.index == s.index}
        for e in reread:
            if not e.dtype.is_bool:
                v = self.expr(e, env)   # the load, rendered once
                frozen = ir.Instruction(self.b.block, v.type, "freeze", [v])
                self.b._insert(frozen)
                self.memo[e] = frozen

    def grouped(self, access: ir.Instruction, buffer: str, index: tuple) -> None:
        """Put a load or store of an in-place buffer, or a load of an input, in the kernel's
        access group. An in-place access at an index computed from data (a scatter's ids)
        can meet another iteration's: the loop it is in then declares nothing."""
        if self.access_group is None:
            return
        if buffer in self.in_place and not all(isinstance(i, Const) or (isinstance(i, Var) and i.name in self.loop_vars)
                                               for i in index):
            self.loop_carries = True
        if buffer in self.in_place or buffer in self.read_only:
            access.set_metadata("llvm.access.group", self.access_group)

    def stream_loop(self, s: Loop, env: dict) -> None:
        """A ``stream`` loop over [start, stop) whose output is at least STREAM_MIN_BYTES:
        the elements before the output's first 64-byte line stored normally, then each
        whole line computed into a stack chunk (which LLVM keeps in a vector register) and
        stored with one aligned ``!nontemporal`` store while the inputs are prefetched
        ahead, then the rest normally; a fence orders the streamed stores before return."""
        b = self.b
        *work, store = s.body
        size = self.itemsize[store.buffer]
        width = CHUNK_BYTES // size
        start, stop = self.expr(s.start, env), self.expr(s.stop, env)
        self.memo = {}
        big = b.icmp_signed(">=", b.mul(self.dims[store.buffer][0], ir.Constant(I64, size)),
                            ir.Constant(I64, STREAM_MIN_BYTES))
        address = b.ptrtoint(b.gep(self.ptrs[store.buffer], [start]), I64)
        to_line = b.udiv(b.and_(b.neg(address), ir.Constant(I64, CHUNK_BYTES - 1)), ir.Constant(I64, size))
        head = b.select(big, b.select(b.icmp_signed("<", b.add(start, to_line), stop), b.add(start, to_line), stop),
                        stop)
        lines = b.sdiv(b.sub(stop, head), ir.Constant(I64, width))
        tail = b.add(head, b.mul(lines, ir.Constant(I64, width)))
        chunk = self.alloca_builder.alloca(ir.ArrayType(_mem(store.value.dtype), width), name="chunk")
        chunk.align = CHUNK_BYTES
        self.ptrs["$chunk"] = self.alloca_builder.bitcast(chunk, _mem(store.value.dtype).as_pointer())
        self.dims["$chunk"], self.itemsize["$chunk"] = [ir.Constant(I64, width)], size
        bounds = {"$start": start, "$head": head, "$lines": lines, "$tail": tail, "$stop": stop}
        inner = {**env, **bounds}
        v = {n: Var(n, INDEX) for n in (*bounds, "$line", "$base", "$j")}
        c = Const
        element = (Let(s.var, scalar.apply("add", v["$base"], v["$j"])), *work,
                   Store("$chunk", (v["$j"],), store.value))
        line = (Let("$base", scalar.apply("add", v["$head"], scalar.apply("mul", v["$line"], c(width, INDEX)))),
                Loop("$j", c(0, INDEX), c(width, INDEX), 1, element),
                _StreamLine(store.buffer, v["$base"], width,
                            tuple(sorted({e.buffer for e in expressions(s.body) if isinstance(e, Load)}))))
        self.stmts((Loop(s.var, v["$start"], v["$head"], 1, s.body),
                    Loop("$line", c(0, INDEX), v["$lines"], 1, line),
                    Loop(s.var, v["$tail"], v["$stop"], 1, s.body)), inner)
        with b.if_then(big):
            b.fence("seq_cst")  # streamed stores are weakly ordered (sfence/mfence on x86)

    def stream_line(self, s: _StreamLine, env: dict) -> None:
        b = self.b
        base = env[s.base.name]
        vec = ir.VectorType(self.ptrs["$chunk"].type.pointee, s.width)
        value = b.load(b.bitcast(self.ptrs["$chunk"], vec.as_pointer()), align=CHUNK_BYTES)
        target = b.bitcast(b.gep(self.ptrs[s.buffer], [base], inbounds=True), vec.as_pointer())
        st = b.store(value, target, align=CHUNK_BYTES)
        st.set_metadata("nontemporal", self.module.add_metadata([ir.Constant(I32, 1)]))
        prefetch = self.prefetch()
        for name in s.inputs:
            ahead = b.add(base, ir.Constant(I64, PREFETCH_BYTES // self.itemsize[name]))
            # no inbounds: a prefetch past the end of the buffer is allowed (a hint, no fault)
            address = b.bitcast(b.gep(self.ptrs[name], [ahead]), I8.as_pointer())
            b.call(prefetch, [address, ir.Constant(I32, 0), ir.Constant(I32, 3), ir.Constant(I32, 1)])

    def row_ahead(self, p: row_prefetch.Prefetch, env: dict) -> None:
        """Prefetch the lines of the next row that this block of ``p``'s loop reads in the
        current one (``row_prefetch``). No ``inbounds``: past the last row is only a hint."""
        b = self.b
        saved = self.memo
        self.memo = {}
        nxt = b.add(env[p.row], ir.Constant(I64, 1))
        line = max(1, 64 // self.itemsize[p.buffer])
        for j in range(0, p.block, line):
            col = self.expr(p.column, {**env, p.lane: ir.Constant(I64, j)})
            self.memo = {}
            at = b.add(b.mul(nxt, self.dims[p.buffer][1]), col)
            address = b.bitcast(b.gep(self.ptrs[p.buffer], [at]), I8.as_pointer())
            b.call(self.prefetch(), [address, ir.Constant(I32, 0), ir.Constant(I32, 3), ir.Constant(I32, 1)])
        self.memo = saved

    def prefetch(self) -> ir.Function:
        fn = self.module.globals.get("llvm.prefetch.p0")
        if fn is None:
            fn = ir.Function(self.module, ir.FunctionType(ir.VoidType(), [I8.as_pointer(), I32, I32, I32]),
                             name="llvm.prefetch.p0")
        return fn

    def declare(self, s: Accumulator, env: dict) -> None:
        if s.name not in self.accs:
            arg = s.kind in ("argmax", "argmin")
            # Started at the kind's extreme with position 0, a first element that does not
            # win equals the start, and its position (the lowering's linear index over the
            # reduced axes) is 0: no "found" flag on the loop's critical path.
            flagged = arg and s.start != scalar.start_value(s.kind, s.dtype)
            # A float max/min keeps "a NaN was seen" beside its NaN-blind maxnum/minnum.
            slots = (self.slot(_reg(s.dtype), s.name),
                     self.slot(I64, f"{s.name}.pos") if arg else None,
                     self.slot(I1, f"{s.name}.found") if flagged or _nan_flagged(s) else None)
            self.accs[s.name] = (s, *slots)
        _, value, pos, found = self.accs[s.name]
        start = self.expr(s.start, env)
        self.b.store(start, value)
        if pos is not None:
            self.b.store(ir.Constant(I64, 0), pos)
        if found is not None:
            self.b.store(self.b.fcmp_unordered("uno", start, start) if _nan_flagged(s) else ir.Constant(I1, 0), found)

    def update(self, s: Update, env: dict) -> None:
        decl, value, pos, found = self.accs[s.name]
        current = AccValue(f"{s.name}", decl.dtype)
        self.memo[("acc", s.name)] = self.b.load(value)
        if decl.kind in ("argmax", "argmin"):
            v = self.expr(s.value, env)
            # Branches, not selects: the loop then carries no data dependency through the
            # compares (a new best is rare after the first elements, the branches predict),
            # which runs 3-4x faster on data that is not sorted. Each test of arg_wins'
            # disjunction is a branch of its own, which LLVM does not fold back to selects.
            where = self.expr(s.position, env)
            then = self.fn.append_basic_block(f"{s.name}.wins")
            after = self.fn.append_basic_block(f"{s.name}.next")
            tests = disjuncts(scalar.arg_wins(decl.kind, current, Var("$v", decl.dtype)))
            if found is not None:
                tests.insert(0, scalar.apply("not", Var("$found", fj_bool)))
            inner = {**env, "$v": v, "$found": self.b.load(found) if found is not None else None}
            for k, test in enumerate(tests):
                nxt = after if k == len(tests) - 1 else self.fn.append_basic_block(f"{s.name}.test{k + 1}")
                self.b.cbranch(self.expr(test, inner), then, nxt).set_weights([1, 64])
                self.b.position_at_end(nxt)
            self.b.position_at_end(then)
            self.b.store(v, value)
            self.b.store(where, pos)
            if found is not None:
                self.b.store(ir.Constant(I1, 1), found)
            self.b.branch(after)
            self.b.position_at_end(after)
            return
        if _nan_flagged(decl) and s.value.dtype == decl.dtype:
            # NumPy's max propagates NaN. llvm.maximum does too but costs six instructions a
            # vector on x86 (it orders signed zeros and tests NaN at every step); maxnum under
            # nnan nsz is one vmaxps, and the NaN test becomes an or-reduction of unordered
            # self-compares (the flag the accumulator's reader selects NaN by). Only which of
            # two equal zeros a reduction returns may differ from NumPy's, whose own
            # order-dependent answer is no better defined.
            t = _reg(decl.dtype)
            fn = self.module.declare_intrinsic(f"llvm.{decl.kind}num", [t], ir.FunctionType(t, [t, t]))
            v = self.expr(s.value, env)
            self.b.store(self.b.call(fn, [self.memo[("acc", s.name)], v], fastmath=("nnan", "nsz")), value)
            self.b.store(self.b.or_(self.b.load(found), self.b.fcmp_unordered("uno", v, v)), found)
            return
        new = self.expr(scalar.combine(decl.kind, current, s.value), env)
        if self.reassociate and self.reassociable(decl):
            # Partial sums per vector lane: the one place NumPy's semantics allow
            # reassociation (an innermost loop of enough trips: sums_by_trips).
            new.flags.append("reassoc")
        self.b.store(new, value)

    # ---- expressions ----------------------------------------------------------------------
    def address(self, buffer: str, index: tuple, env: dict) -> ir.Value:
        dims = self.dims[buffer]
        lin = None
        for k, e in enumerate(index):
            i = self.expr(e, env)
            lin = i if lin is None else self.b.add(self.b.mul(lin, dims[k]), i)
        return self.b.gep(self.ptrs[buffer], [lin if lin is not None else ir.Constant(I64, 0)], inbounds=True)

    def expr(self, e: Expr, env: dict) -> ir.Value:
        if isinstance(e, Var):
            return env[e.name]
        if isinstance(e, Const):
            return self.const(e.value, e.dtype)
        key = ("acc", e.name) if isinstance(e, AccValue) else e
        found = self.memo.get(key)
        if found is None:
            found = self.memo[key] = self._expr(e, env)
        return found

    def _expr(self, e: Expr, env: dict) -> ir.Value:
        if isinstance(e, Load):
            d = e.dtype
            v = self.b.load(self.address(e.buffer, e.index, env), align=max(1, d.itemsize))
            self.grouped(v, e.buffer, e.index)
            return self.b.icmp_unsigned("!=", v, ir.Constant(I8, 0)) if d.is_bool else v
        if isinstance(e, AccValue):
            decl, value, pos, found = self.accs[e.name]
            if _nan_flagged(decl):
                nan = ir.Constant(_reg(decl.dtype), float("nan"))
                return self.b.select(self.b.load(found), nan, self.b.load(value))
            return self.b.load(pos if pos is not None else value)
        assert isinstance(e, Prim), e
        if self.dividing and e.op == "div" and (e.args[1], e.dtype) in self.dividing:
            return self.markstein(self.expr(e.args[0], env), *self.dividing[(e.args[1], e.dtype)])
        args = [self.expr(a, env) for a in e.args]
        medium = self.trig_medium
        if (e.op in medium_trig.OPS and e.dtype in medium_trig.MEDIUM_BITS and not medium
                and medium_trig.bounded(e.args[0], self.lets())):
            self.trig_medium = True   # an argument within the bound by construction (a normal draw's angle)
        try:
            return self.prim(e.op, args, [a.dtype for a in e.args], e.dtype)
        finally:
            self.trig_medium = medium

    def const(self, value: object, d: DType) -> ir.Constant:
        if d.is_bool:
            return ir.Constant(I1, int(bool(value)))
        if d.is_int:
            # Unsigned values above the signed range are written as their two's complement.
            bits = np.asarray(value).astype(d.np).astype(np.dtype(f"i{d.itemsize}"))
            return ir.Constant(_reg(d), int(bits))
        return ir.Constant(_reg(d), float(np.asarray(value).astype(d.np)))

    def to_mem(self, v: ir.Value, d: DType) -> ir.Value:
        return self.b.zext(v, I8) if d.is_bool else v

    def prim(self, op: str, args: list, types: list, d: DType) -> ir.Value:
        """Scalar op ``op`` of the vocabulary on ``args`` (of dtypes ``types``) giving ``d``:
        its row of ``CODE_FOR_OP``, float16 widened to float32 around it."""
        src = types[-1] if op == "select" else types[0]
        if src == float16 and op not in ("cast", "select"):
            # float16 computes in float32 and rounds after every op (NumPy's half loops); a
            # float64 algorithm's in float64, rounded once (intrinsics.F16_FROM_F64).
            b = self.b
            wd, wt = (float64, F64) if op in intrinsics.F16_FROM_F64 else (float32, F32)
            wide = [b.fpext(a, wt) if t == float16 else a for a, t in zip(args, types)]
            r = self.prim(op, wide, [wd if t == float16 else t for t in types], wd if d == float16 else d)
            return b.fptrunc(r, F16) if d == float16 else r
        render = CODE_FOR_OP.get(op)
        if render is None:
            raise KeyError(f"the LLVM renderer has no rendering of op {op!r}")
        return render(self, args, src, d)

    def fcmp(self, op: str, args: list, src: DType) -> ir.Value:
        """A comparison: ordered for floats (false for NaN) but ``ne`` (true for NaN)."""
        b, fm = self.b, self.fastmath
        if src.is_float:
            return (b.fcmp_unordered("!=", *args, flags=fm) if op == "ne"
                    else b.fcmp_ordered(_FCMP[op], *args, flags=fm))
        return self.icmp(src)(_FCMP[op], *args)

    def arith(self, op: str, args: list, src: DType) -> ir.Value:
        """add, sub or mul: ``f``-prefixed (with the fast-math flags) for floats."""
        return self._fast(getattr(self.b, "f" + op)(*args)) if src.is_float else getattr(self.b, op)(*args)

    def icmp(self, d: DType) -> Callable[..., ir.Value]:
        """The builder's integer compare that reads ``d``'s bits (bool and unsigned as unsigned)."""
        return self.b.icmp_unsigned if d.is_bool or d.is_unsigned else self.b.icmp_signed

    def _fast(self, v: ir.Instruction) -> ir.Instruction:
        # llvmlite's fadd/fsub/fmul/fdiv/frem take no flags argument; their flags list does.
        v.flags.extend(self.fastmath)
        return v

    def cast(self, v: ir.Value, src: DType, d: DType) -> ir.Value:
        b = self.b
        if src.is_int and d.is_int:
            if d.itemsize > src.itemsize:
                return (b.zext if src.is_unsigned else b.sext)(v, _reg(d))
            return b.trunc(v, _reg(d)) if d.itemsize < src.itemsize else v
        if src.is_int:  # int -> float
            to_float = b.uitofp if src.is_unsigned else b.sitofp
            if d == float16:
                return b.fptrunc(to_float(v, F32), F16)
            return to_float(v, _reg(d))
        if d.is_float:
            if d.itemsize > src.itemsize:
                return b.fpext(v, _reg(d))
            if src == float64 and d == float16:
                return b.fptrunc(round_to_odd_f32(b, v), F16)
            return b.fptrunc(v, _reg(d))
        # float -> int, as NumPy's C casts compile on x86: a narrow int converts through
        # int32 (uint32 through int64) and keeps the low bits; NaN and out of range give
        # INT_MIN of the conversion's width (cvttsd2si); uint64 converts v - 2**63 above 2**63.
        if src == float16:
            v, src = b.fpext(v, F32), float32
        if d.is_unsigned and d.itemsize == 8:
            top = ir.Constant(_reg(src), float(2 ** 63))
            low = self.to_signed(v, src, 64)
            high = b.xor(self.to_signed(b.fsub(v, top), src, 64), ir.Constant(I64, -(2 ** 63)))
            return b.select(b.fcmp_unordered("<", v, top), low, high)
        bits = 64 if d.is_unsigned and d.itemsize == 4 else max(32, d.itemsize * 8)
        r = self.to_signed(v, src, bits)
        return b.trunc(r, _reg(d)) if d.itemsize * 8 < bits else r

    def to_signed(self, v: ir.Value, src: DType, bits: int) -> ir.Value:
        """Float ``v`` truncated to a signed integer of ``bits``, INT_MIN when NaN or out of
        range as cvttsd2si gives (fptosi alone would be poison there)."""
        b, t = self.b, ir.IntType(bits)
        lo, hi = ir.Constant(_reg(src), -float(2 ** (bits - 1))), ir.Constant(_reg(src), float(2 ** (bits - 1)))
        ok = b.and_(b.fcmp_ordered(">=", v, lo), b.fcmp_ordered("<", v, hi))
        safe = b.select(ok, v, ir.Constant(_reg(src), 0.0))
        return b.select(ok, b.fptosi(safe, t), ir.Constant(t, -(2 ** (bits - 1))))

    def intrinsic(self, op: str, d: DType) -> ir.Function:
        """The function computing intrinsic ``op`` of float dtype ``d``: the vectorizable
        port of ``intrinsics`` when it has one, else LLVM's intrinsic or libm's function."""
        medium = self.trig_medium and op in medium_trig.OPS and d in medium_trig.MEDIUM_BITS
        name = f"{op}.{d.short}" + (".medium" if medium else "")
        fn = self.helpers.get(name)
        if fn is not None:
            return fn
        fn = intrinsics.function(self.module, f"{op}.{d.short}", self.native_ldexp, self.native_fma, medium)
        if fn is None:
            t = _reg(d)
            arity = scalar.OPS[op][0]
            if op in _LLVM_INTRINSIC:
                fn = self.module.declare_intrinsic(_LLVM_INTRINSIC[op], [t], ir.FunctionType(t, [t] * arity))
            else:
                fn = self._libc(_LIBM[op] + ("f" if d == float32 else ""), t, [t] * arity)
        self.helpers[name] = fn
        return fn

    def library_function(self, op: str, d: DType) -> ir.Function:
        """An internal function of library function ``op`` (``scalar.LIBRARY_FUNCTIONS``) of
        float dtype ``d``: SciPy's C function called in float64 (``scipy_functions``), a
        float32's operands widened and its result rounded, as SciPy's float32 loops do."""
        name = f"flowjit.scipy.{op}.{d.short}"
        fn = self.helpers.get(name)
        if fn is not None:
            return fn
        t, arity = _reg(d), scalar.LIBRARY_FUNCTIONS[op]
        # cython's cpdef entry point takes a last int, skip_dispatch, which a module-level function ignores
        callee = self._libc(scipy_functions.symbol(op), F64, [F64] * arity + [I32])
        fn = ir.Function(self.module, ir.FunctionType(t, [t] * arity), name=name)
        fn.linkage = "internal"
        fn.attributes.add("alwaysinline")
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        args = [a if d == float64 else b.fpext(a, F64) for a in fn.args]
        y = b.call(callee, [*args, ir.Constant(I32, 0)])
        b.ret(y if d == float64 else b.fptrunc(y, t))
        self.helpers[name] = fn
        return fn

    def ipow(self, d: DType) -> ir.Function:
        """An internal function of integer power with the scalar reference's rules
        (square and multiply; a negative exponent as C's 1 / a**-b; unsigned exponents are
        never negative)."""
        name = f"flowjit.ipow.{d.short}"
        fn = self.helpers.get(name)
        if fn is not None:
            return fn
        t = _reg(d)
        fn = ir.Function(self.module, ir.FunctionType(t, [t, t]), name=name)
        fn.linkage = "internal"
        fn.attributes.add("alwaysinline")
        a, e = fn.args
        entry, neg, loop, done = (fn.append_basic_block(n) for n in ("entry", "neg", "loop", "done"))
        b = ir.IRBuilder(entry)
        zero, one, minus = ir.Constant(t, 0), ir.Constant(t, 1), ir.Constant(t, -1)
        b.cbranch(b.icmp_signed("<", e, zero) if not d.is_unsigned else ir.Constant(I1, 0), neg, loop)
        b.position_at_end(neg)
        even = b.icmp_signed("==", b.and_(e, one), zero)
        b.ret(b.select(b.icmp_signed("==", a, one), one,
                       b.select(b.icmp_signed("==", a, minus), b.select(even, one, minus), zero)))
        b.position_at_end(loop)
        base, exp, acc = b.phi(t), b.phi(t), b.phi(t)
        for phi, v in ((base, a), (exp, e), (acc, one)):
            phi.add_incoming(v, entry)
        acc2 = b.select(b.icmp_signed("!=", b.and_(exp, one), zero), b.mul(acc, base), acc)
        exp2 = (b.lshr if d.is_unsigned else b.ashr)(exp, one)
        base2 = b.mul(base, base)
        for phi, v in ((base, base2), (exp, exp2), (acc, acc2)):
            phi.add_incoming(v, loop)
        b.cbranch(b.icmp_signed("==", exp2, zero), done, loop)
        b.position_at_end(done)
        b.ret(acc2)
        # exp == 0 on entry: the loop runs once with acc2 = acc (bit 0 clear) = 1.
        self.helpers[name] = fn
        return fn


@record
class _StreamLine:
    """The renderer's own statement: store the stack chunk as line ``base`` of ``buffer``
    (non-temporal) and prefetch ``inputs`` ahead."""

    buffer: str
    base: Var
    width: int
    inputs: tuple


@record
class _WholeRange:
    """The renderer's own statement: call the chunk entry over [0, ``stop``)."""

    stop: Expr


compile_records()


def _transposed(b: ir.IRBuilder, rows: list) -> list:
    """The columns of the square whose rows are ``rows`` (n vectors of n lanes, n a power of
    two): log2(n) rounds, each interleaving row k with row k + n/2, lower halves then upper."""
    n = len(rows)
    masks = [ir.Constant(ir.VectorType(I32, n), [x for m in half for x in (m, m + n)])
             for half in (range(n // 2), range(n // 2, n))]
    for _ in range(n.bit_length() - 1):
        rows = [b.shuffle_vector(rows[k], rows[k + n // 2], mask) for k in range(n // 2) for mask in masks]
    return rows


def _by_signedness(signed: str, unsigned: str) -> Callable[[_Renderer, list, DType, DType], ir.Value]:
    return lambda r, a, src, d: getattr(r.b, unsigned if src.is_unsigned else signed)(*a)


def _math(op: str) -> Callable[[_Renderer, list, DType, DType], ir.Value]:
    return lambda r, a, src, d: r.b.call(r.intrinsic(op, d), a, fastmath=r.fastmath)


# The scalar vocabulary (flowjit.lowering.scalar.OPS) in LLVM IR: one row per op, a function
# of (renderer, operands, operand dtype, result dtype). The math intrinsics are one row each
# too: the vectorizable ports of ``intrinsics`` where there is one, else LLVM's or libm's.
CODE_FOR_OP: dict[str, Callable[[_Renderer, list, DType, DType], ir.Value]] = {
    "add": lambda r, a, src, d: r.arith("add", a, src),
    "sub": lambda r, a, src, d: r.arith("sub", a, src),
    "mul": lambda r, a, src, d: r.arith("mul", a, src),
    "neg": lambda r, a, src, d: r.b.fneg(a[0], flags=r.fastmath) if src.is_float else r.b.neg(a[0]),
    "div": lambda r, a, src, d: r._fast(r.b.fdiv(*a)),
    "idiv": _by_signedness("sdiv", "udiv"),
    "irem": _by_signedness("srem", "urem"),
    "min": lambda r, a, src, d: r.b.select(r.icmp(src)("<", *a), *a),
    "max": lambda r, a, src, d: r.b.select(r.icmp(src)(">", *a), *a),
    **{op: (lambda op: lambda r, a, src, d: r.fcmp(op, a, src))(op) for op in _FCMP},
    "and": lambda r, a, src, d: r.b.and_(*a),
    "or": lambda r, a, src, d: r.b.or_(*a),
    "xor": lambda r, a, src, d: r.b.xor(*a),
    "not": lambda r, a, src, d: r.b.not_(a[0]),
    "shl": lambda r, a, src, d: r.b.shl(*a),
    "shr": _by_signedness("ashr", "lshr"),
    "select": lambda r, a, src, d: r.b.select(*a),
    "cast": lambda r, a, src, d: r.cast(a[0], src, d),
    "fmod": lambda r, a, src, d: r._fast(r.b.frem(*a)),
    "ipow": lambda r, a, src, d: r.b.call(r.ipow(d), a),
    **{op: _math(op) for op in sorted(scalar.INTRINSICS - {"fmod", "ipow"} - set(scalar.LIBRARY_FUNCTIONS))},
    **{op: (lambda op: lambda r, a, src, d: r.b.call(r.library_function(op, d), a))(op)
       for op in scalar.LIBRARY_FUNCTIONS},
}
