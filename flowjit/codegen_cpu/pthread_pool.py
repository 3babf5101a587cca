"""A thread pool in native code, for parallel loops that generated code starts itself.

A program runs as one native call, so its parallel loops cannot come back to Python to
reach ``parallel.ChunkPool``. This module builds (with llvmlite.ir, compiled and cached
like any kernel) ``flowjit_parallel_for(fn, n, ctx, parts)``: it runs ``fn(start, stop,
ctx)`` over contiguous chunks of [0, n) on the calling thread and on up to ``parts - 1``
pthread workers, which sleep on a condition variable between calls. The address is
registered under that name (``jit.register_symbol``), so a generated module declares it
and calls it; Python reaches it through ctypes.

Made for a machine whose cores other processes share. The range is cut into more chunks
than threads (``OVERSPLIT`` a thread), and every thread, the caller first, claims the next
chunk with a compare-and-swap on one word until none is left: a worker that the scheduler
has not run yet takes nothing, the caller does its share, and the caller waits only for
chunks a running worker has claimed. It waits holding its core (the spin-wait hint, no
``sched_yield``, no sleep), yielding only to a worker that runs on its own CPU; a worker
between loops polls for the next one the same way for at most ``SPIN_NS``, then sleeps on
a condition variable. On Linux a worker about to sleep keeps off the CPU its caller last
started a loop on (``_avoid``) until it is woken. A loop of one chunk a thread (a coarse
loop) runs on the caller alone for a while after a worker was absent from one (``ABSENT_NS``).
A second caller while a loop runs (another thread, or a loop nested in a chunk) runs its
whole range on its own thread.
"""

from __future__ import annotations

import ctypes
import functools
import os
import platform
import threading
import time

from . import jit, objcache, parallel
from .parallel import OVERSPLIT, default_threads

SYMBOL = jit.PARALLEL_FOR_SYMBOL

# How long a worker polls for the program's next loop before sleeping on a condition
# variable (waking one asleep costs 30-60 us on the project machine). Each poll gives the
# CPU its spin-wait hint (24 ns a pause on the project machine's EPYC); every YIELD_EVERY-th
# also reads the clock and the thread's CPU.
#
# Neither the worker nor the caller waiting for its workers' chunks calls sched_yield, but
# to a thread of its loop on its own CPU, and the caller does not sleep. Beside two busy
# processes on two cores each yield gave the thread's turn to a busy process, and each sleep
# meant waiting for one to end its slice when woken (milliseconds), so a loop whose worker
# had lost its core in the middle of a chunk cost the caller a slice of somebody else's; the
# pool then had to run the loops after it on the caller alone for a while (a "rest"), which
# left a program that uses both cores idle on half of one: its loaded time about s / 0.45
# its idle time, s the speedup of its second thread, over 3x for s above 1.35 (the zoo's
# transformer at 2.98-3.38x, its LSTM's inference at 3.08-3.31x in the bench's shared
# process). Holding their cores, the caller and its worker run as two of the four busy
# threads, one on each core, and the program gets a core's worth of time wherever the
# kernel placed it: the zoo's shared-process rows 1.80-2.58x their idle time
# (bench/results/cpu2-2026-12-02-models-zen5-4.md), at 0.61-0.97 of a CPU where the rows
# past 3x in the runs before had had 0.51-0.65 (docs/performance.md, Shared CPUs).
SPIN_NS = 50_000
YIELD_EVERY = 16

# A coarse loop, one chunk a thread at most (the products blas.py splits in one piece a
# thread), gains little from a worker on a machine whose cores other processes hold: a
# worker that loses its core in the middle of its chunk leaves the caller none to take, so
# the caller waits out the other process's turn (the kernel's tick, 4 ms on the project
# machine, against the loop's tens of microseconds), and a worker polling for the next loop
# is a fourth runnable thread on two cores, which leaves the caller half of its core in
# 4 ms turns. The zoo's LSTM, whose only split loops are its per-step products (two pieces
# of about 20 us), ran its inference at 6.3-6.5 ms beside two busy processes (1.6-2.5 idle)
# in most fresh processes. So the pool judges each coarse loop it splits: the worker was
# absent when the caller waited for its chunk more than ABSENT_NS past twice its own
# chunks' time, or when a worker awake (polling, not asleep) for the loops took none of
# their chunks for ABSENT_NS. Then coarse loops run on the caller alone for
# COARSE_REST_MIN_NS, doubled up to COARSE_REST_MAX_NS while absences recur within
# COARSE_REST_MAX_NS of the last rest's end; the worker, given no loop, sleeps. Loops of
# more chunks keep splitting (the caller takes the chunks a late worker leaves), and
# resting every split loop so had left a program that uses both cores on half of one
# (above). ABSENT_NS is long enough that an idle machine's own daemons, which take a core
# for tens of microseconds now and then, rest the loops rarely (0-3 rests a second on the
# project machine, against 10-30 beside two busy processes). Measured (Zen 5, bench-like
# blocks after 0.15 s pauses, fresh processes, alternated with the pool without the rest):
# the LSTM's inference beside two busy processes 2.64-2.95 ms against 6.30-6.52, the
# transformer's 9.6-14.0 against 13.6-14.1, every other zoo row within its spread but the
# MLP's training step (1.02 ms against 0.71-0.83: its products rest on one thread too).
ABSENT_NS = 1_000_000
COARSE_REST_MIN_NS = 20_000_000
COARSE_REST_MAX_NS = 100_000_000

# The claim word: the loop's epoch (the low 32 bits of its generation), its chunk count and
# the next chunk to hand out, so that one compare-and-swap checks all three.
_EPOCH_SHIFT, _COUNT_SHIFT, _FIELD = 32, 16, 0xFFFF
MAX_CHUNKS = _FIELD

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
# starts at 2**19. (Those are the pool of fixed pieces, one a thread. With chunks claimed, a
# split loop whose worker gets no core costs what one thread does: 3e5 elements beside two
# busy processes, 24 us split and 24 on one thread, where the fixed pieces took 46 against 23.)
NATIVE_PARALLEL_MIN_ELEMENTS = 1 << 19


def _pause_hint() -> tuple[str, tuple[int, ...]]:
    """The intrinsic (and its i32 arguments) of this machine CPU's spin-wait hint: the module
    is built for the host. Empty: none known."""
    machine = platform.machine().lower()
    if machine in ("x86_64", "amd64", "i686", "i386"):
        return "llvm.x86.sse2.pause", ()
    if machine in ("aarch64", "arm64"):
        return "llvm.aarch64.hint", (1,)  # YIELD
    return "", ()


# Linux's cpu_set_t: 1024 CPUs, a bit each.
_CPU_SET_BYTES = 128

# Workers whose CPU the caller checks before it yields (indices modulo this): the check is
# a hint, and a machine with more workers shares the slots.
_TRACKED_WORKERS = 16


def _avoid(mod, setaff):
    """``flowjit_pool_avoid(i64 cpu, i8* allowed) -> i1``: restrict the calling thread to the
    CPUs of ``allowed`` (a cpu_set_t, its mask when it started) but ``cpu``, which moves it
    off ``cpu`` at once and keeps it off while it sleeps; true when done (false: ``cpu`` is
    out of range or the only CPU allowed, or the call failed). ``setaff``: the module's
    declaration of ``sched_setaffinity``.

    Why: Linux woke a worker asleep between loops on the CPU of the thread that woke it,
    its caller, at times (on the project's 2-vCPU Xeon in about one block of calls in two,
    the other vCPU idle; a guest kernel may take an idle vCPU for a preempted one), and it
    waited there until the caller had run every chunk itself: the split loops at one
    thread's speed, call after call. Moving it once it runs did not last: the next wake-up
    placed it on the caller's CPU again. So a worker about to sleep calls this with the CPU
    its caller last started a loop on, and widens its mask again once woken (kept all the
    time, the restriction cost under load what it won idle, when the pool still yielded and
    slept on a machine whose cores other processes held: see SPIN_NS)."""
    from llvmlite import ir
    I1, I8, I32, I64 = ir.IntType(1), ir.IntType(8), ir.IntType(32), ir.IntType(64)
    mask_ty = ir.ArrayType(I8, _CPU_SET_BYTES)
    fn = ir.Function(mod, ir.FunctionType(I1, [I64, I8.as_pointer()]), "flowjit_pool_avoid")
    fn.linkage = "internal"
    entry, clear, moves, no = (fn.append_basic_block(s) for s in ("entry", "clear", "moves", "no"))
    b = ir.IRBuilder(entry)
    cpu, allowed = fn.args
    zero32 = ir.Constant(I32, 0)
    away = b.alloca(mask_ty)
    in_range = b.and_(b.icmp_signed(">=", cpu, ir.Constant(I64, 0)),
                      b.icmp_signed("<", cpu, ir.Constant(I64, 8 * _CPU_SET_BYTES)))
    b.cbranch(in_range, clear, no)
    b.position_at_end(clear)
    b.store(b.load(b.bitcast(allowed, mask_ty.as_pointer())), away)
    at = b.gep(away, [zero32, b.trunc(b.lshr(cpu, ir.Constant(I64, 3)), I32)], inbounds=True)
    bit = b.shl(ir.Constant(I8, 1), b.trunc(b.and_(cpu, ir.Constant(I64, 7)), I8))
    b.store(b.and_(b.load(at), b.xor(bit, ir.Constant(I8, -1))), at)
    words = b.bitcast(away, ir.ArrayType(I64, _CPU_SET_BYTES // 8).as_pointer())
    other = ir.Constant(I64, 0)
    for k in range(_CPU_SET_BYTES // 8):
        other = b.or_(other, b.load(b.gep(words, [zero32, ir.Constant(I32, k)], inbounds=True)))
    b.cbranch(b.icmp_unsigned("!=", other, ir.Constant(I64, 0)), moves, no)
    b.position_at_end(moves)
    moved = b.call(setaff, [zero32, ir.Constant(I64, _CPU_SET_BYTES), b.bitcast(away, I8.as_pointer())])
    b.ret(b.icmp_signed("==", moved, zero32))
    b.position_at_end(no)
    b.ret(ir.Constant(I1, 0))
    return fn


def build_module() -> str:
    """The LLVM IR text of the pool: ``flowjit_pool_start(i64 workers) -> i32`` (0 or the
    first pthread error), ``flowjit_pool_after_fork()`` and ``flowjit_parallel_for(fn, i64 n,
    i8* ctx, i64 parts)``."""
    # Imported here: a process that loads the pool from the object cache builds no IR.
    from llvmlite import ir
    I8P = ir.IntType(8).as_pointer()
    I1, I32, I64 = ir.IntType(1), ir.IntType(32), ir.IntType(64)
    VOID = ir.VoidType()
    CHUNK_FN = ir.FunctionType(VOID, [I64, I64, I8P])
    # pthread_mutex_t and pthread_cond_t are opaque: 40 and 48 bytes on glibc x86-64, 64 and
    # 48 on macOS; 128 bytes aligned to 64 covers both, and keeps them off each other's cache line.
    _OPAQUE = ir.ArrayType(ir.IntType(8), 128)
    mod = ir.Module("flowjit_native_pool")

    def const(v, ty=I64):
        return ir.Constant(ty, v)

    def glob(name, ty, init=None, align=8):
        g = ir.GlobalVariable(mod, ty, name)
        g.initializer = init if init is not None else ir.Constant(ty, None)
        g.align = align
        g.linkage = "internal"
        return g

    def ext(name, ret, args):
        return ir.Function(mod, ir.FunctionType(ret, args), name)

    mutex, busy = glob("mutex", _OPAQUE, align=64), glob("busy", _OPAQUE, align=64)
    work = glob("work", _OPAQUE, align=64)
    # The two words every thread writes, each on its own cache line.
    claim, finished = glob("claim", I64, align=64), glob("finished", I64, align=64)
    gen, nworkers = glob("gen", I64, align=64), glob("nworkers", I64)
    job_fn, job_ctx = glob("job_fn", CHUNK_FN.as_pointer()), glob("job_ctx", I8P)
    job_n, job_threads = glob("job_n", I64), glob("job_threads", I64)
    # The CPU each worker (by index, modulo the array) last claimed a chunk on.
    cpus_ty = ir.ArrayType(I64, _TRACKED_WORKERS)
    worker_cpus = glob("worker_cpus", cpus_ty, ir.Constant(cpus_ty, [-1] * _TRACKED_WORKERS), align=64)
    job_cpu = glob("job_cpu", I64, ir.Constant(I64, -1))  # the caller's CPU at the loop's start
    # until when coarse loops run on their caller alone (ABSENT_NS), and that rest's length
    solo_until, rest_ns = glob("solo_until", I64), glob("rest_ns", I64)
    absent_since = glob("absent_since", I64)  # the start of the first coarse loop a polling worker missed
    sleepers = glob("sleepers", I64)  # workers asleep on the condition variable

    mutex_init = ext("pthread_mutex_init", I32, [I8P, I8P])
    cond_init = ext("pthread_cond_init", I32, [I8P, I8P])
    lock, unlock = ext("pthread_mutex_lock", I32, [I8P]), ext("pthread_mutex_unlock", I32, [I8P])
    trylock = ext("pthread_mutex_trylock", I32, [I8P])
    wait = ext("pthread_cond_wait", I32, [I8P, I8P])
    broadcast = ext("pthread_cond_broadcast", I32, [I8P])
    sched_yield = ext("sched_yield", I32, [])
    linux = platform.system() == "Linux"
    getcpu = ext("sched_getcpu", I32, []) if linux else None
    worker_ty = ir.FunctionType(I8P, [I8P])
    create = ext("pthread_create", I32, [I64.as_pointer(), I8P, worker_ty.as_pointer(), I8P])
    hint, hint_args = _pause_hint()
    pause = ext(hint, VOID, [I32] * len(hint_args)) if hint else None

    def p(b, g):
        return b.bitcast(g, I8P)

    # now(): CLOCK_MONOTONIC in nanoseconds
    clock = ir.Function(mod, ir.FunctionType(I64, []), "flowjit_pool_now")
    clock.linkage = "internal"
    b = ir.IRBuilder(clock.append_basic_block("entry"))
    ts = b.alloca(ir.ArrayType(I64, 2))  # struct timespec: 64-bit seconds and nanoseconds
    b.call(ext("clock_gettime", I32, [I32, I8P]), [ir.Constant(I32, time.CLOCK_MONOTONIC), p(b, ts)])
    sec, nsec = (b.load(b.gep(ts, [ir.Constant(I32, 0), ir.Constant(I32, i)])) for i in (0, 1))
    b.ret(b.add(b.mul(sec, const(1_000_000_000)), nsec))

    # Shared words are atomic: LLVM may not reuse a value across the pthread calls (it could
    # prove an internal global unchanged by them), and readers outside the mutex see whole words.
    def ld(b, g):
        return b.load_atomic(g, "acquire", 8)

    def st(b, v, g):
        b.store_atomic(v, g, "release", 8)

    def await_(b, fn, ready, label, yields, cond=None, before_sleep=None, after_wake=None):
        """Poll ``ready(b)``, calling sched_yield every YIELD_EVERY polls where ``yields(b)``
        holds; with a ``cond``, for up to SPIN_NS, then sleep on it under the mutex until
        ``ready`` holds (the writer that makes it hold signals ``cond`` under the mutex),
        ``before_sleep(b)`` and ``after_wake(b)`` around the sleep."""
        began = b.call(clock, []) if cond is not None else None
        head = b.block
        loop, more, give, yield_, judged, after = (
            fn.append_basic_block(f"{label}_{x}") for x in ("spin", "more", "give", "yield", "judged", "ready"))
        b.branch(loop)
        b.position_at_end(loop)
        k = b.phi(I64)
        k.add_incoming(const(0), head)
        b.cbranch(ready(b), after, more)
        b.position_at_end(more)
        if pause is not None:
            b.call(pause, [ir.Constant(I32, a) for a in hint_args])
        k1 = b.add(k, const(1))
        k.add_incoming(k1, more)
        b.cbranch(b.icmp_unsigned("==", b.and_(k1, const(YIELD_EVERY - 1)), const(0)), give, loop)
        b.position_at_end(give)
        b.cbranch(yields(b), yield_, judged)
        b.position_at_end(yield_)
        b.call(sched_yield, [])
        b.branch(judged)
        b.position_at_end(judged)
        k.add_incoming(k1, judged)
        if cond is None:
            b.branch(loop)
            b.position_at_end(after)
            return
        asleep, check, nap, woken = (fn.append_basic_block(f"{label}_{x}")
                                     for x in ("asleep", "check", "wait", "woken"))
        b.cbranch(b.icmp_signed(">=", b.sub(b.call(clock, []), began), const(SPIN_NS)), asleep, loop)
        b.position_at_end(asleep)
        if before_sleep is not None:
            before_sleep(b)
        b.call(lock, [p(b, mutex)])
        b.atomic_rmw("add", sleepers, const(1), "acq_rel")
        b.branch(check)
        b.position_at_end(check)  # the loop also absorbs spurious wake-ups
        b.cbranch(ready(b), woken, nap)
        b.position_at_end(nap)
        b.call(wait, [p(b, cond), p(b, mutex)])
        b.branch(check)
        b.position_at_end(woken)
        b.atomic_rmw("sub", sleepers, const(1), "acq_rel")
        b.call(unlock, [p(b, mutex)])
        if after_wake is not None:
            after_wake(b)
        b.branch(after)
        b.position_at_end(after)

    # take(epoch, who) -> chunks run: claim chunks of the loop of ``epoch`` and run them
    # until none is left; ``who`` is 0 for the caller, a worker's index for a worker, which
    # records the CPU it claims each chunk on (``worker_cpus``).
    take = ir.Function(mod, ir.FunctionType(I64, [I64, I64]), "flowjit_pool_take")
    take.linkage = "internal"
    epoch, who = take.args
    entry, loop, try_, run, out = (take.append_basic_block(s) for s in ("entry", "loop", "try", "run", "out"))
    b = ir.IRBuilder(entry)
    b.branch(loop)
    b.position_at_end(loop)
    ran = b.phi(I64)
    ran.add_incoming(const(0), entry)
    w = ld(b, claim)
    count = b.and_(b.lshr(w, const(_COUNT_SHIFT)), const(_FIELD))
    nxt = b.and_(w, const(_FIELD))
    live = b.and_(b.icmp_unsigned("==", b.lshr(w, const(_EPOCH_SHIFT)), epoch), b.icmp_unsigned("<", nxt, count))
    b.cbranch(live, try_, out)
    b.position_at_end(try_)
    swapped = b.extract_value(b.cmpxchg(claim, w, b.add(w, const(1)), "acq_rel", "acquire"), 1)
    ran.add_incoming(ran, try_)
    b.cbranch(swapped, run, loop)
    b.position_at_end(run)
    if linux:
        mark, marked = take.append_basic_block("mark"), take.append_basic_block("marked")
        b.cbranch(b.icmp_signed(">", who, const(0)), mark, marked)
        b.position_at_end(mark)
        slot = b.gep(worker_cpus, [ir.Constant(I32, 0), b.and_(who, const(_TRACKED_WORKERS - 1))], inbounds=True)
        b.store_atomic(b.sext(b.call(getcpu, []), I64), slot, "release", 8)
        b.branch(marked)
        b.position_at_end(marked)
    # The chunk is claimed and not finished, so the loop (and its job words) stays as it is.
    fn, ctx, n = ld(b, job_fn), ld(b, job_ctx), ld(b, job_n)
    q, r = b.udiv(n, count), b.urem(n, count)  # chunk i: q elements, one more for the first r
    lo = b.add(b.mul(nxt, q), b.select(b.icmp_unsigned("<", nxt, r), nxt, r))
    hi = b.add(b.add(lo, q), b.zext(b.icmp_unsigned("<", nxt, r), I64))
    b.call(fn, [lo, hi, ctx])
    b.atomic_rmw("add", finished, const(1), "acq_rel")
    ran.add_incoming(b.add(ran, const(1)), b.block)
    b.branch(loop)
    b.position_at_end(out)
    b.ret(ran)

    # worker(arg): arg is its index (1..workers) cast to a pointer; it takes part in loops of
    # more threads than its index.
    worker = ir.Function(mod, worker_ty, "flowjit_pool_worker")
    worker.linkage = "internal"
    entry, top = worker.append_basic_block("entry"), worker.append_basic_block("top")
    b = ir.IRBuilder(entry)
    idx = b.ptrtoint(worker.args[0], I64)
    sleep_hooks = {}

    def on_callers_cpu(b):
        """Whether this thread runs on the CPU the caller started the loop on (Linux; else
        always, as no thread can tell)."""
        if not linux:
            return ir.Constant(I1, 1)
        return b.icmp_signed("==", b.sext(b.call(getcpu, []), I64), ld(b, job_cpu))

    if linux:
        # The CPUs it may run on, the CPU its caller last started a loop on (-1: none yet;
        # -2: it cannot tell its CPUs), and whether its sleep is restricted to the others.
        allowed = b.alloca(ir.ArrayType(ir.IntType(8), _CPU_SET_BYTES))
        allowed_p = b.bitcast(allowed, I8P)
        avoided, restricted = b.alloca(I64), b.alloca(I1)
        got = b.call(ext("sched_getaffinity", I32, [I32, I64, I8P]),
                     [ir.Constant(I32, 0), const(_CPU_SET_BYTES), allowed_p])
        b.store(b.select(b.icmp_signed("==", got, ir.Constant(I32, 0)), const(-1), const(-2)), avoided)
        b.store(ir.Constant(I1, 0), restricted)
        setaff = ext("sched_setaffinity", I32, [I32, I64, I8P])
        avoid = _avoid(mod, setaff)

        def before_sleep(b):
            b.store(b.call(avoid, [b.load(avoided), allowed_p]), restricted)

        def after_wake(b):
            # The caller may have moved while the worker slept: then the worker was kept off
            # the CPU the caller had left and woken on the one it runs on now (on two CPUs,
            # always so), where it preempted the caller or shared its CPU for the whole loop
            # (127 of 360 loops after 30 ms pauses on Zen 5, most of them with every chunk
            # run by the worker). So it steps off the caller's CPU before widening its mask
            # again (a thread that sets its own mask is moved at once; one whose mask widens
            # stays where it is).
            widen, step_off, wide = (worker.append_basic_block(s) for s in ("widen", "step_off", "wide"))
            reset = worker.append_basic_block("reset")
            b.cbranch(b.load(restricted), widen, wide)
            b.position_at_end(widen)
            caller_cpu = ld(b, job_cpu)
            on_it = b.icmp_signed("==", b.sext(b.call(getcpu, []), I64), caller_cpu)
            b.cbranch(on_it, step_off, reset)
            b.position_at_end(step_off)
            b.call(avoid, [caller_cpu, allowed_p])
            b.branch(reset)
            b.position_at_end(reset)
            b.call(setaff, [ir.Constant(I32, 0), const(_CPU_SET_BYTES), allowed_p])
            b.store(ir.Constant(I1, 0), restricted)
            b.branch(wide)
            b.position_at_end(wide)
        sleep_hooks = {"before_sleep": before_sleep, "after_wake": after_wake}
    b.branch(top)
    b.position_at_end(top)
    seen = b.phi(I64)
    seen.add_incoming(const(0), entry)
    await_(b, worker, lambda b: b.icmp_unsigned("!=", ld(b, gen), seen), "job", on_callers_cpu, work, **sleep_hooks)
    now = ld(b, gen)
    joins, back = worker.append_basic_block("joins"), worker.append_basic_block("back")
    b.cbranch(b.icmp_signed("<", idx, ld(b, job_threads)), joins, back)
    b.position_at_end(joins)
    if linux:
        was = b.load(avoided)
        b.store(b.select(b.icmp_signed("==", was, const(-2)), was, ld(b, job_cpu)), avoided)
    b.call(take, [b.and_(now, const(0xFFFFFFFF)), idx])
    b.branch(back)
    b.position_at_end(back)
    seen.add_incoming(now, back)
    b.branch(top)

    # flowjit_pool_after_fork(): a forked child has none of the workers (and may have copied
    # a mutex held), so its loops run on its one thread from then on.
    child = ir.Function(mod, ir.FunctionType(VOID, []), "flowjit_pool_after_fork")
    b = ir.IRBuilder(child.append_basic_block("entry"))
    for g in (nworkers, claim, finished, solo_until, rest_ns, absent_since, sleepers):
        st(b, const(0), g)
    for g in (mutex, busy):
        b.call(mutex_init, [p(b, g), ir.Constant(I8P, None)])
    b.call(cond_init, [p(b, work), ir.Constant(I8P, None)])
    b.ret_void()

    # flowjit_pool_start(workers)
    start = ir.Function(mod, ir.FunctionType(I32, [I64]), "flowjit_pool_start")
    entry, init, loop, body, fail, out = (start.append_basic_block(s) for s in
                                          ("entry", "init", "loop", "body", "fail", "out"))
    b = ir.IRBuilder(entry)
    tid = b.alloca(I64)
    # a second start (the module loaded again in this process) leaves the running pool be
    b.cbranch(b.icmp_signed("==", ld(b, nworkers), const(0)), init, out)
    b.position_at_end(init)
    null = ir.Constant(I8P, None)
    for g in (mutex, busy):
        b.call(mutex_init, [p(b, g), null])
    b.call(cond_init, [p(b, work), null])
    b.branch(loop)
    b.position_at_end(loop)
    i = b.phi(I64)
    i.add_incoming(const(0), init)
    b.cbranch(b.icmp_signed("<", i, start.args[0]), body, out)
    b.position_at_end(body)
    err = b.call(create, [tid, null, worker, b.inttoptr(b.add(i, const(1)), I8P)])
    nxt = b.add(i, const(1))
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
    entry, alone, owner, spread = (pf.append_basic_block(s) for s in ("entry", "alone", "owner", "spread"))
    b = ir.IRBuilder(entry)
    workers = ld(b, nworkers)
    one = const(1)
    small = b.or_(b.or_(b.icmp_signed("<=", parts, one), b.icmp_signed("<=", n, one)),
                  b.icmp_signed("==", workers, const(0)))
    coarse_check, rest_check = pf.append_basic_block("coarse"), pf.append_basic_block("rest_check")
    b.cbranch(small, alone, coarse_check)
    b.position_at_end(alone)
    b.call(fn, [const(0), n, ctx])
    b.ret_void()
    b.position_at_end(coarse_check)

    def smaller(x, y):
        return b.select(b.icmp_signed("<", x, y), x, y)
    threads = smaller(parts, b.add(workers, one))
    # one chunk a thread at most: alone while coarse loops rest (ABSENT_NS)
    coarse = b.icmp_signed("<=", n, threads)
    b.cbranch(coarse, rest_check, owner)
    b.position_at_end(rest_check)
    b.cbranch(b.icmp_signed("<", b.call(clock, []), ld(b, solo_until)), alone, owner)
    b.position_at_end(owner)
    got = b.call(trylock, [p(b, busy)])
    b.cbranch(b.icmp_signed("!=", got, ir.Constant(I32, 0)), alone, spread)
    b.position_at_end(spread)
    chunks = smaller(smaller(n, b.mul(threads, const(OVERSPLIT))), const(MAX_CHUNKS))
    for g, v in ((job_fn, fn), (job_ctx, ctx), (job_n, n), (job_threads, threads), (finished, const(0))):
        st(b, v, g)
    if linux:
        st(b, b.sext(b.call(getcpu, []), I64), job_cpu)
    awake = b.icmp_signed("<", ld(b, sleepers), workers)  # a worker polling for this loop
    b.call(lock, [p(b, mutex)])
    now = b.add(ld(b, gen), one)
    ep = b.and_(now, const(0xFFFFFFFF))
    # the claim word before the generation: a worker that sees the new generation finds its chunks
    st(b, b.or_(b.shl(ep, const(_EPOCH_SHIFT)), b.shl(chunks, const(_COUNT_SHIFT))), claim)
    st(b, now, gen)
    b.call(broadcast, [p(b, work)])
    b.call(unlock, [p(b, mutex)])
    began = b.call(clock, [])
    mine = b.call(take, [ep, const(0)])
    took = b.call(clock, [])

    def worker_on_my_cpu(b):
        """Whether a worker last claimed a chunk on the CPU the caller runs on: the one it
        yields to (that chunk cannot finish while the caller spins there)."""
        if not linux:
            return ir.Constant(I1, 1)
        mine = b.sext(b.call(getcpu, []), I64)
        found = ir.Constant(I1, 0)
        for i in range(1, _TRACKED_WORKERS):
            there = b.load_atomic(b.gep(worker_cpus, [ir.Constant(I32, 0), ir.Constant(I32, i)], inbounds=True),
                                  "acquire", 8)
            found = b.or_(found, b.and_(b.icmp_signed("<", const(i), b.add(workers, one)),
                                        b.icmp_signed("==", there, mine)))
        return found
    await_(b, pf, lambda b: b.icmp_unsigned("==", ld(b, finished), chunks), "collect", worker_on_my_cpu)
    b.call(unlock, [p(b, busy)])
    # The judgement of a coarse loop (ABSENT_NS): a worker absent starts a rest; a worker
    # that ran a chunk in time ends the absence that absent_since dates.
    judge, absent, kept_up, after = (pf.append_basic_block(x) for x in ("judge", "absent", "kept_up", "judged"))
    missed, first_miss, long_miss, absent_long, both_ran = (
        pf.append_basic_block(x) for x in ("missed", "first_miss", "long_miss", "absent_long", "both_ran"))
    b.cbranch(coarse, judge, after)
    b.position_at_end(judge)
    ended = b.call(clock, [])
    b.cbranch(b.icmp_signed("==", mine, chunks), missed, both_ran)
    b.position_at_end(missed)  # every chunk the caller's: absent if a worker was polling for it
    since = ld(b, absent_since)
    b.cbranch(awake, long_miss, after)
    b.position_at_end(long_miss)
    long_ago = b.icmp_signed(">", b.sub(ended, since), const(ABSENT_NS))
    b.cbranch(b.icmp_signed("==", since, const(0)), first_miss, absent_long)
    b.position_at_end(absent_long)
    b.cbranch(long_ago, absent, after)
    b.position_at_end(first_miss)
    st(b, began, absent_since)
    b.branch(after)
    b.position_at_end(both_ran)  # a worker ran a chunk: it straggled if the caller waited long for it
    per_chunk = b.sdiv(b.sub(took, began), b.select(b.icmp_signed(">", mine, const(0)), mine, const(1)))
    waited = b.sub(ended, took)
    late = b.icmp_signed(">", waited, b.add(b.mul(per_chunk, const(2)), const(ABSENT_NS)))
    b.cbranch(late, absent, kept_up)
    b.position_at_end(absent)
    # doubled while absences recur: within COARSE_REST_MAX_NS of the last rest's end
    recur = b.icmp_signed("<", b.sub(ended, ld(b, solo_until)), const(COARSE_REST_MAX_NS))
    longer = b.select(recur, b.mul(ld(b, rest_ns), const(2)), const(0))
    longer = b.select(b.icmp_signed("<", longer, const(COARSE_REST_MIN_NS)), const(COARSE_REST_MIN_NS), longer)
    longer = b.select(b.icmp_signed(">", longer, const(COARSE_REST_MAX_NS)), const(COARSE_REST_MAX_NS), longer)
    st(b, longer, rest_ns)
    st(b, b.add(ended, longer), solo_until)
    st(b, const(0), absent_since)
    b.branch(after)
    b.position_at_end(kept_up)
    st(b, const(0), absent_since)
    b.branch(after)
    b.position_at_end(after)
    b.ret_void()
    # flowjit_pool_coarse_rest() -> ns: how long coarse loops still run on their caller alone
    rest_left = ir.Function(mod, ir.FunctionType(I64, []), "flowjit_pool_coarse_rest")
    b = ir.IRBuilder(rest_left.append_basic_block("entry"))
    left = b.sub(ld(b, solo_until), b.call(clock, []))
    b.ret(b.select(b.icmp_signed(">", left, const(0)), left, const(0)))
    unoptimized(mod)
    return str(mod)


def unoptimized(mod) -> None:
    """Mark every function ``mod`` defines ``optnone`` (with ``noinline``, which LLVM requires
    alongside): code that waits and hands out work gains nothing from O3 but compile time,
    which every cold cache paid (the pool's module: 40 ms at O3, 17 ms so; blas.py's gemms:
    27 and 17 ms). Both modules are also generated at O0 (``jit.load_source(opt_level=0)``:
    the pool's 8.4 -> 3.1 ms, the gemms' 7.4 -> 3.7), and now compiled once per installation
    (``runtime=True``), not once per cache."""
    for f in mod.functions:
        if not f.is_declaration:
            f.attributes.add("noinline")
            f.attributes.add("optnone")


class NativePool:
    """The started pool: ``address`` of ``flowjit_parallel_for`` (also registered under
    that name for generated code), ``workers`` threads besides the caller's."""

    def __init__(self, workers: int) -> None:
        # Keyed by this file's text, which decides the module: a warm process builds no IR. It
        # is flowjit's own code, compiled once per installation (objcache.runtime_directory()).
        self._lib = jit.load_source(f"; flowjit native pool {_source_digest()}", build_module,
                                    name="flowjit_native_pool", opt_level=0, runtime=True)
        err = self._lib.function("flowjit_pool_start", ctypes.c_int32, [ctypes.c_int64])(workers)
        if err:
            raise OSError(err, f"pthread_create failed starting flowjit's native pool of {workers} "
                               "threads; set FLOWJIT_NUM_THREADS=1 to run without one")
        self.workers = workers
        # The workers are never joined, and one may still be polling in the pool's code while
        # the interpreter exits: the code must stay mapped, so this reference is never dropped.
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(self._lib))
        self._after_fork = self._lib.function("flowjit_pool_after_fork", None, [])
        # Only the forking thread lives on in a child (os.fork, multiprocessing): without
        # this its first split loop would wait forever for workers that are not there.
        os.register_at_fork(after_in_child=self._forked)
        self.address = self._lib.address(SYMBOL)
        jit.register_symbol(SYMBOL, self.address)
        self._call = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p,
                                      ctypes.c_int64)(self.address)
        self._coarse_rest = self._lib.function("flowjit_pool_coarse_rest", ctypes.c_int64, [])

    def _forked(self) -> None:
        self._after_fork()
        self.workers = 0

    def coarse_rest(self) -> float:
        """Seconds for which loops of one chunk a thread still run on their caller alone:
        the rest after a worker was absent from one (``ABSENT_NS``); 0 when none."""
        return self._coarse_rest() / 1e9

    def run(self, fn_address: int, n: int, ctx: int, parts: int | None = None) -> None:
        """Run native ``void fn(i64 start, i64 stop, i8* ctx)`` over chunks of [0, n) on at most
        ``parts`` threads (default: every worker and the caller) with the GIL released."""
        self._call(fn_address, n, ctx, self.workers + 1 if parts is None else parts)


@functools.cache
def _source_digest() -> str:
    return objcache.source_digest(__file__, parallel.__file__)   # its IR takes parallel's OVERSPLIT


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
