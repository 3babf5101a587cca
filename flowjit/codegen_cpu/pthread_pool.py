"""A thread pool in native code, for parallel loops that generated code starts itself.

A program runs as one native call, so its parallel loops cannot come back to Python to
reach ``parallel.ChunkPool``. This module builds (with llvmlite.ir, compiled and cached
like any kernel) ``flowjit_parallel_for(fn, n, ctx, parts)``: it runs
``fn(start, stop, ctx)`` over ``parts`` contiguous pieces of [0, n), one on the calling
thread and the rest on pthread workers that sleep on a condition variable between calls.
The address is registered under that name (``jit.register_symbol``), so a generated module
declares it and calls it; Python reaches it through ctypes. A second caller while a loop
runs (another thread, or a nested loop) runs its whole range on its own thread.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import threading

from . import jit
from .parallel import default_threads

SYMBOL = jit.PARALLEL_FOR_SYMBOL

# Polls of a shared word before sleeping on a condition variable (tens of microseconds in
# all): a worker stays awake this long after a loop, for the program's next loop.
SPIN = 1 << 15

# Measured on the 2-core project machine (python -m tests.codegen_cpu.bench_parallel,
# float32 y += x + 1, 1 worker + the caller; best of many calls): with the worker still
# polling after the previous loop, a split call costs 0.5 us more than one thread (1.0 us
# against 0.5 at n=1e3) and wins from about 5e4 elements (1e5: 5.6 us against 9.8; 3e5:
# 15 against 48; 1e7: 1.42 ms against 2.76). A worker asleep costs 30-60 us to wake (3e5:
# 76-86 us against 48-50; 5e5: 98-105 against 128-131), so a loop that may be the first
# of its call wins from about 4e5. Loops shorter than this run whole on the caller's thread.
# Calls from Python come microseconds apart, long enough for the worker to sleep: gelu on
# 2**18 float32s in a C loop took 43 us a call on 2 threads back to back, 98-105 us with
# 10-100 us between calls, 78 us on one thread (bench aot, 2026-11-25), so the split
# starts at 2**19.
NATIVE_PARALLEL_MIN_ELEMENTS = 1 << 19


def build_module() -> str:
    """The LLVM IR text of the pool: ``flowjit_pool_start(i64 workers) -> i32`` (0 or the
    first pthread error) and ``flowjit_parallel_for(fn, i64 n, i8* ctx, i64 parts)``."""
    # Imported here: a process that loads the pool from the object cache builds no IR.
    from llvmlite import ir
    I8P = ir.IntType(8).as_pointer()
    I32, I64 = ir.IntType(32), ir.IntType(64)
    VOID = ir.VoidType()
    CHUNK_FN = ir.FunctionType(VOID, [I64, I64, I8P])
    # pthread_mutex_t and pthread_cond_t are opaque: 40 and 48 bytes on glibc x86-64, 64 and
    # 48 on macOS; 128 bytes aligned to 64 covers both, and keeps them off each other's cache line.
    _OPAQUE = ir.ArrayType(ir.IntType(8), 128)
    mod = ir.Module("flowjit_native_pool")

    def glob(name, ty, init=None, align=8):
        g = ir.GlobalVariable(mod, ty, name)
        g.initializer = init if init is not None else ir.Constant(ty, None)
        g.align = align
        g.linkage = "internal"
        return g

    def ext(name, ret, args):
        return ir.Function(mod, ir.FunctionType(ret, args), name)

    mutex, busy = glob("mutex", _OPAQUE, align=64), glob("busy", _OPAQUE, align=64)
    work, done = glob("work", _OPAQUE, align=64), glob("done", _OPAQUE, align=64)
    gen, pending, nworkers = glob("gen", I64), glob("pending", I64), glob("nworkers", I64)
    job_fn, job_ctx = glob("job_fn", CHUNK_FN.as_pointer()), glob("job_ctx", I8P)
    job_n, job_parts = glob("job_n", I64), glob("job_parts", I64)

    mutex_init = ext("pthread_mutex_init", I32, [I8P, I8P])
    cond_init = ext("pthread_cond_init", I32, [I8P, I8P])
    lock, unlock = ext("pthread_mutex_lock", I32, [I8P]), ext("pthread_mutex_unlock", I32, [I8P])
    trylock = ext("pthread_mutex_trylock", I32, [I8P])
    wait = ext("pthread_cond_wait", I32, [I8P, I8P])
    broadcast, signal = ext("pthread_cond_broadcast", I32, [I8P]), ext("pthread_cond_signal", I32, [I8P])
    worker_ty = ir.FunctionType(I8P, [I8P])
    create = ext("pthread_create", I32, [I64.as_pointer(), I8P, worker_ty.as_pointer(), I8P])

    def p(b, g):
        return b.bitcast(g, I8P)

    # The shared words are read and written under the mutex; atomic accesses keep LLVM from
    # reusing a value across the pthread calls (it may prove an internal global unchanged by them).
    def ld(b, g):
        return b.load_atomic(g, "acquire", 8)

    def st(b, v, g):
        b.store_atomic(v, g, "release", 8)

    def spin(b, fn, ready, label):
        """Poll ``ready(b)`` up to SPIN times before going on to the sleeping path: a wake-up
        through the condition variable costs 25-30 us on the project machine."""
        head, loop, after = b.block, fn.append_basic_block(f"{label}_spin"), fn.append_basic_block(label)
        b.branch(loop)
        b.position_at_end(loop)
        k = b.phi(I64)
        k.add_incoming(ir.Constant(I64, 0), head)
        k1 = b.add(k, ir.Constant(I64, 1))
        k.add_incoming(k1, loop)
        b.cbranch(b.or_(ready(b), b.icmp_signed(">=", k1, ir.Constant(I64, SPIN))), after, loop)
        b.position_at_end(after)

    def bounds(b, n, idx, parts):  # [n*idx/parts, n*(idx+1)/parts)
        lo = b.sdiv(b.mul(n, idx), parts)
        hi = b.sdiv(b.mul(n, b.add(idx, ir.Constant(I64, 1))), parts)
        return lo, hi

    # worker(arg): arg is its piece index (1..workers) cast to a pointer
    worker = ir.Function(mod, worker_ty, "flowjit_pool_worker")
    worker.linkage = "internal"
    entry, top, sleep, woke, run, skip = (worker.append_basic_block(s) for s in
                                          ("entry", "top", "sleep", "woke", "run", "skip"))
    b = ir.IRBuilder(entry)
    idx = b.ptrtoint(worker.args[0], I64)
    b.branch(top)
    b.position_at_end(top)
    seen = b.phi(I64)
    seen.add_incoming(ir.Constant(I64, 0), entry)
    spin(b, worker, lambda b: b.icmp_signed("!=", ld(b, gen), seen), "take")
    b.call(lock, [p(b, mutex)])
    b.branch(sleep)
    b.position_at_end(sleep)  # wait while no new generation (also absorbs spurious wake-ups)
    fresh = b.icmp_signed("!=", ld(b, gen), seen)
    b.cbranch(fresh, woke, b.append_basic_block("wait"))
    b.position_at_end(worker.blocks[-1])
    b.call(wait, [p(b, work), p(b, mutex)])
    b.branch(sleep)
    b.position_at_end(woke)
    now = ld(b, gen)
    fn, ctx, n, parts = ld(b, job_fn), ld(b, job_ctx), ld(b, job_n), ld(b, job_parts)
    b.call(unlock, [p(b, mutex)])
    b.cbranch(b.icmp_signed("<", idx, parts), run, skip)
    b.position_at_end(run)
    lo, hi = bounds(b, n, idx, parts)
    b.call(fn, [lo, hi, ctx])
    b.branch(skip)
    b.position_at_end(skip)
    b.call(lock, [p(b, mutex)])
    left = b.sub(ld(b, pending), ir.Constant(I64, 1))
    st(b, left, pending)
    last, cont = b.append_basic_block("last"), b.append_basic_block("cont")
    b.cbranch(b.icmp_signed("==", left, ir.Constant(I64, 0)), last, cont)
    b.position_at_end(last)
    b.call(signal, [p(b, done)])
    b.branch(cont)
    b.position_at_end(cont)
    b.call(unlock, [p(b, mutex)])
    seen.add_incoming(now, cont)
    b.branch(top)

    # flowjit_pool_after_fork(): a forked child has none of the workers (and may have copied
    # a mutex held), so its loops run on its one thread from then on.
    child = ir.Function(mod, ir.FunctionType(VOID, []), "flowjit_pool_after_fork")
    b = ir.IRBuilder(child.append_basic_block("entry"))
    for g in (nworkers, pending):
        st(b, ir.Constant(I64, 0), g)
    for g in (mutex, busy):
        b.call(mutex_init, [p(b, g), ir.Constant(I8P, None)])
    for g in (work, done):
        b.call(cond_init, [p(b, g), ir.Constant(I8P, None)])
    b.ret_void()

    # flowjit_pool_start(workers)
    start = ir.Function(mod, ir.FunctionType(I32, [I64]), "flowjit_pool_start")
    entry, init, loop, body, fail, out = (start.append_basic_block(s) for s in
                                          ("entry", "init", "loop", "body", "fail", "out"))
    b = ir.IRBuilder(entry)
    tid = b.alloca(I64)
    # a second start (the module loaded again in this process) leaves the running pool be
    b.cbranch(b.icmp_signed("==", ld(b, nworkers), ir.Constant(I64, 0)), init, out)
    b.position_at_end(init)
    null = ir.Constant(I8P, None)
    for g in (mutex, busy):
        b.call(mutex_init, [p(b, g), null])
    for g in (work, done):
        b.call(cond_init, [p(b, g), null])
    b.branch(loop)
    b.position_at_end(loop)
    i = b.phi(I64)
    i.add_incoming(ir.Constant(I64, 0), init)
    b.cbranch(b.icmp_signed("<", i, start.args[0]), body, out)
    b.position_at_end(body)
    err = b.call(create, [tid, null, worker, b.inttoptr(b.add(i, ir.Constant(I64, 1)), I8P)])
    nxt = b.add(i, ir.Constant(I64, 1))
    st(b, nxt, nworkers)  # the workers that exist so far take part
    i.add_incoming(nxt, body)
    b.cbranch(b.icmp_signed("==", err, ir.Constant(I32, 0)), loop, fail)
    b.position_at_end(fail)
    b.ret(err)
    b.position_at_end(out)
    b.ret(ir.Constant(I32, 0))

    # flowjit_parallel_for(fn, n, ctx, parts)
    pf = ir.Function(mod, ir.FunctionType(VOID, [CHUNK_FN.as_pointer(), I64, I8P, I64]), SYMBOL)
    fn, n, ctx, parts = pf.args
    entry, alone, claim, spread, gather, waiting, finish = (pf.append_basic_block(s) for s in (
        "entry", "alone", "claim", "spread", "gather", "waiting", "finish"))
    b = ir.IRBuilder(entry)
    workers = ld(b, nworkers)
    one = ir.Constant(I64, 1)
    small = b.or_(b.icmp_signed("<=", parts, one), b.icmp_signed("==", workers, ir.Constant(I64, 0)))
    b.cbranch(small, alone, claim)
    b.position_at_end(alone)
    b.call(fn, [ir.Constant(I64, 0), n, ctx])
    b.ret_void()
    b.position_at_end(claim)
    got = b.call(trylock, [p(b, busy)])
    b.cbranch(b.icmp_signed("!=", got, ir.Constant(I32, 0)), alone, spread)
    b.position_at_end(spread)
    most = b.add(workers, one)
    k = b.select(b.icmp_signed("<", parts, most), parts, most)
    b.call(lock, [p(b, mutex)])
    for g, v in ((job_fn, fn), (job_ctx, ctx), (job_n, n), (job_parts, k), (pending, workers)):
        st(b, v, g)
    st(b, b.add(ld(b, gen), one), gen)
    b.call(broadcast, [p(b, work)])
    b.call(unlock, [p(b, mutex)])
    lo, hi = bounds(b, n, ir.Constant(I64, 0), k)
    b.call(fn, [lo, hi, ctx])
    spin(b, pf, lambda b: b.icmp_signed("==", ld(b, pending), ir.Constant(I64, 0)), "collect")
    b.call(lock, [p(b, mutex)])
    b.branch(gather)
    b.position_at_end(gather)
    b.cbranch(b.icmp_signed("==", ld(b, pending), ir.Constant(I64, 0)), finish, waiting)
    b.position_at_end(waiting)
    b.call(wait, [p(b, done), p(b, mutex)])
    b.branch(gather)
    b.position_at_end(finish)
    b.call(unlock, [p(b, mutex)])
    b.call(unlock, [p(b, busy)])
    b.ret_void()
    return str(mod)


class NativePool:
    """The started pool: ``address`` of ``flowjit_parallel_for`` (also registered under
    that name for generated code), ``workers`` threads besides the caller's."""

    def __init__(self, workers: int) -> None:
        # Keyed by this file's text, which decides the module: a warm process builds no IR.
        self._lib = jit.load_source(f"; flowjit native pool {_source_digest()}", build_module,
                                    name="flowjit_native_pool")
        err = self._lib.function("flowjit_pool_start", ctypes.c_int32, [ctypes.c_int64])(workers)
        if err:
            raise OSError(err, f"pthread_create failed starting flowjit's native pool of {workers} "
                               "threads; set FLOWJIT_NUM_THREADS=1 to run without one")
        self.workers = workers
        self._after_fork = self._lib.function("flowjit_pool_after_fork", None, [])
        # Only the forking thread lives on in a child (os.fork, multiprocessing): without
        # this its first split loop would wait forever for workers that are not there.
        os.register_at_fork(after_in_child=self._forked)
        self.address = self._lib.address(SYMBOL)
        jit.register_symbol(SYMBOL, self.address)
        self._call = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p,
                                      ctypes.c_int64)(self.address)

    def _forked(self) -> None:
        self._after_fork()
        self.workers = 0

    def run(self, fn_address: int, n: int, ctx: int, parts: int | None = None) -> None:
        """Run native ``void fn(i64 start, i64 stop, i8* ctx)`` over [0, n) in ``parts``
        pieces (default: every worker and the caller) with the GIL released."""
        self._call(fn_address, n, ctx, self.workers + 1 if parts is None else parts)


@functools.cache
def _source_digest() -> str:
    with open(__file__, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


_pool: NativePool | None = None
_lock = threading.Lock()


def native_pool() -> NativePool:
    """The process's native pool, started on first use with ``default_threads() - 1``
    workers (the caller's thread takes the first piece)."""
    global _pool
    if _pool is None:
        with _lock:
            if _pool is None:
                _pool = NativePool(default_threads() - 1)
    return _pool


jit.provide_symbol(SYMBOL, native_pool)
