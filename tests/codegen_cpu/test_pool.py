"""The pools on a shared machine: the native pool (``pthread_pool``: chunks claimed by whichever
thread is running, the caller first), the Python chunk pool (the same scheme), and the BLAS
products split over the native pool. Correctness only: every element of a range done exactly
once, with 1..N parts, beside busy processes, with nested and concurrent callers, each product
equal to NumPy's and the BLAS's thread count as it was. Their speed is bench's
(``python -m bench.workloads.contention``), never a test's."""

from __future__ import annotations

import contextlib
import ctypes
import itertools
import os
import subprocess
import sys
import threading
import time
import uuid

import numpy as np
import pytest

from flowjit.codegen_cpu import blas, blas_functions, load, native_pool
from flowjit.codegen_cpu.blas import blas_threads
from flowjit.codegen_cpu.parallel import OVERSPLIT, ChunkPool
from flowjit.codegen_cpu.pthread_pool import NativePool

from . import modules

P = ctypes.c_void_p
I64 = ctypes.c_int64
CHUNK = ctypes.CFUNCTYPE(None, I64, I64, P)
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@contextlib.contextmanager
def busy(n: int = 2):
    """``n`` processes spinning on this machine's cores for the length of the block."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        yield
    finally:
        for p in procs:
            p.kill()
            p.wait(timeout=30)


class Recorder:
    """A native chunk function (a ctypes callback: it takes the GIL the pool's caller
    released) that records each ``(start, stop, thread)`` it is called with; ``inner`` runs
    in each chunk after recording it."""

    def __init__(self, inner=None):
        self.calls: list[tuple[int, int, int]] = []
        self.inner = inner
        self.fn = CHUNK(self._chunk)
        self.address = ctypes.cast(self.fn, P).value

    def _chunk(self, start, stop, ctx):
        self.calls.append((start, stop, threading.get_ident()))
        if self.inner is not None:
            self.inner(start, stop)

    def assert_tiles(self, n: int) -> None:
        """The chunks cover [0, n) exactly once."""
        spans = sorted((a, b) for a, b, _ in self.calls if b > a)
        assert [a for a, _ in spans] == [0, *(b for _, b in spans)][:len(spans)], spans
        assert (spans[-1][1] if spans else 0) == n


@pytest.mark.parametrize("parts", [1, 2, 3, 5, 64])
@pytest.mark.parametrize("n", [0, 1, 2, 7, 8, 9, 1000, 1 << 20])
def test_the_native_pool_runs_every_element_once_with_any_parts(n, parts):
    pool = native_pool()
    rec = Recorder()
    coarse_rest = pool.coarse_rest() > 0
    pool.run(rec.address, n, 0, parts)
    rec.assert_tiles(n)
    threads = {t for *_, t in rec.calls}
    assert len(threads) <= min(parts, pool.workers + 1)
    alone = [(0, n, threading.get_ident())]  # the caller's thread, in one piece
    if parts <= 1 or n <= 1 or pool.workers == 0:
        assert rec.calls == alone
    else:  # more chunks than threads, so a thread that is not scheduled is no one's wait
        chunks = min(n, min(parts, pool.workers + 1) * OVERSPLIT)
        # a coarse loop (a chunk a thread) during a rest after a straggler runs alone
        assert len(rec.calls) == chunks or (coarse_rest and n <= min(parts, pool.workers + 1)
                                            and rec.calls == alone)


def test_after_a_worker_straggles_the_next_loop_is_split_all_the_same():
    # A worker that loses its core in the middle of a chunk makes its caller wait for it; the
    # pool used to run the loops after that on the caller alone for a while, which left a
    # program beside two busy processes on half a core (3x and more its idle time). The
    # caller now holds its core while it waits, and the next loop is cut into chunks again.
    pool = native_pool()
    if pool.workers == 0:
        pytest.skip("FLOWJIT_NUM_THREADS=1: no workers")
    caller = threading.get_ident()
    started = threading.Event()

    def chunk(start, stop):
        if threading.get_ident() != caller:  # a worker: it loses its core for 200 ms
            started.set()
            time.sleep(0.2)
        else:  # the caller's chunks wait for a worker to hold one
            started.wait(5)

    rec = Recorder(chunk)
    pool.run(rec.address, 1 << 16, 0)
    rec.assert_tiles(1 << 16)
    assert started.is_set(), "no worker took part"
    split = Recorder()
    pool.run(split.address, 1 << 16, 0)
    split.assert_tiles(1 << 16)
    assert len(split.calls) == min(1 << 16, (pool.workers + 1) * OVERSPLIT)


def _coarse_split(pool: NativePool, worker_chunk=None) -> Recorder:
    """A coarse loop (a chunk a thread) whose caller's chunk waits for a worker to start
    one (5 s at most), so that a split loop has each thread's; ``worker_chunk`` runs in the
    worker's."""
    caller = threading.get_ident()
    started = threading.Event()

    def chunk(start, stop):
        if threading.get_ident() != caller:
            started.set()
            if worker_chunk is not None:
                worker_chunk()
        elif stop - start == 1:
            started.wait(5)

    rec = Recorder(chunk)
    pool.run(rec.address, pool.workers + 1, 0)
    rec.assert_tiles(pool.workers + 1)
    return rec


def test_after_a_coarse_loop_straggles_coarse_loops_run_on_the_caller_for_a_while():
    # A loop of a chunk a thread (a product split in one piece a thread) leaves the caller no
    # chunk to take from a worker that lost its core in the middle of its own: the caller
    # waits out another process's slice. After one straggled, such loops run on the caller
    # alone for a rest; loops of more chunks keep splitting, and after the rest coarse loops
    # split again.
    pool = native_pool()
    if pool.workers == 0:
        pytest.skip("FLOWJIT_NUM_THREADS=1: no workers")
    deadline = time.monotonic() + 5
    while pool.coarse_rest() > 0 and time.monotonic() < deadline:   # another test's rest
        time.sleep(0.01)
    first = _coarse_split(pool, lambda: time.sleep(0.05))  # the worker is away 50 ms
    assert len({t for *_, t in first.calls}) == 2, first.calls
    left = pool.coarse_rest()
    assert left > 0
    caller = threading.get_ident()
    resting = Recorder()
    pool.run(resting.address, pool.workers + 1, 0)
    if left > 0.005:  # (not a test process descheduled past the rest's end in between)
        assert resting.calls == [(0, pool.workers + 1, caller)]
    fine = Recorder()
    pool.run(fine.address, 1 << 16, 0)
    fine.assert_tiles(1 << 16)
    assert len(fine.calls) == (pool.workers + 1) * OVERSPLIT
    while pool.coarse_rest() > 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert pool.coarse_rest() == 0
    again = _coarse_split(pool)
    assert len(again.calls) == pool.workers + 1 and len({t for *_, t in again.calls}) == 2, again.calls


@pytest.mark.skipif(sys.platform != "linux" or len(os.sched_getaffinity(0)) < 2, reason="sched_setaffinity")
def test_coarse_loops_rest_when_the_worker_polls_on_a_cpu_it_cannot_get():
    # A worker awake for the next loop that takes none of a coarse loop's chunks for a
    # millisecond has no core (here: it shares the caller's one CPU); the coarse loops then
    # run on the caller alone, and the worker goes to sleep instead of polling.
    code = """
import ctypes, os, time
from flowjit.codegen_cpu import native_pool
pool = native_pool()
assert len(os.sched_getaffinity(0)) == 1 and pool.workers == 1
def spin(start, stop, ctx):
    t = time.perf_counter()
    while time.perf_counter() - t < 50e-6 * (stop - start):
        pass
fn = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p)(spin)
address = ctypes.cast(fn, ctypes.c_void_p).value
deadline = time.monotonic() + 10
while pool.coarse_rest() == 0 and time.monotonic() < deadline:
    pool.run(address, 2, 0)
print("rest", pool.coarse_rest())
"""
    env = {**os.environ, "FLOWJIT_NUM_THREADS": "2"}
    cpu = min(os.sched_getaffinity(0))
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True,
                         timeout=300, preexec_fn=lambda: os.sched_setaffinity(0, {cpu}))
    assert out.returncode == 0, out.stderr
    assert float(out.stdout.split()[-1]) > 0, out.stdout


@pytest.mark.skipif(sys.platform != "linux" or len(os.sched_getaffinity(0)) < 2, reason="sched_setaffinity")
def test_loops_finish_when_the_caller_and_its_worker_share_one_cpu():
    # The caller waits for its workers' chunks spinning on its core; a worker on that same
    # core (a process confined to one CPU) gets it because the caller yields to a worker it
    # finds there. Loops whose every chunk is real work in native code, 2 threads on 1 CPU.
    code = """
import os, numpy as np, flowjit as fj
from flowjit.codegen_cpu import native_pool
assert len(os.sched_getaffinity(0)) == 1 and native_pool().workers == 1
f = fj.function(lambda a: fj.exp(a) * 2 + 1)
x = np.linspace(-1, 1, 1 << 21, dtype=np.float32)
for _ in range(200):
    y = f(x)
np.testing.assert_allclose(y, np.exp(x) * 2 + 1, rtol=1e-6)
print("ok")
"""
    env = {**os.environ, "FLOWJIT_NUM_THREADS": "2"}
    cpu = min(os.sched_getaffinity(0))
    # Confined before it starts: every thread of the process (the pool's worker too) inherits it.
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120,
                         preexec_fn=lambda: os.sched_setaffinity(0, {cpu}))
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


@pytest.mark.skipif(sys.platform != "linux" or len(os.sched_getaffinity(0)) < 2,
                    reason="sched_getcpu, and two CPUs to tell apart")
def test_a_worker_woken_on_its_callers_cpu_runs_its_chunks_on_another():
    # After an idle spell the woken worker was often placed on its caller's CPU, and both
    # stayed there for a whole block of calls: split loops ran at one thread's speed (a
    # softmax's 15 calls after a 150 ms pause: 2.4 ms each in about half the blocks, 1.2 ms
    # in the others, on the project's 2-vCPU Xeon). The worker now sleeps off its caller's CPU,
    # and one woken on its caller's CPU all the same (the caller moved while it slept: about a
    # third of the loops on Zen 5, where the worker shared its caller's CPU or ran every chunk
    # while the caller waited) steps off it.
    pool = native_pool()
    if pool.workers == 0:
        pytest.skip("FLOWJIT_NUM_THREADS=1: no workers")
    record = load(modules.cpu_recorder("cpu_recorder")).address("record")
    n = 2000
    cpus, tids = np.zeros(n, np.int32), np.zeros(n, np.int32)
    ctx = (ctypes.c_int64 * 3)(cpus.ctypes.data, tids.ctypes.data, 200)  # 0.3-0.6 ms a loop
    caller = threading.get_native_id()
    # Until the worker has taken part in 15 loops: on a noisy host (another VM's burst) a
    # worker woken late finds every chunk taken, which says nothing about where it ran
    # (8 of 30 once in a suite run, 15 or more in every run alone).
    shared, joined, tries = 0, 0, 0
    while joined < 15 and tries < 120:
        tries += 1
        time.sleep(0.03)  # long past the workers' spin: they sleep, to be woken by the loop
        pool.run(record, n, ctypes.addressof(ctx), 2)
        mine = tids == caller
        if mine.all():
            continue  # the worker took no chunk (one on the caller's CPU gets none)
        joined += 1
        # A loop whose every chunk the worker ran is one where it preempted its caller.
        shared += bool(not mine.any() or np.isin(cpus[~mine], cpus[mine][:1]).any())
    assert joined == 15, f"the worker took part in {joined} of {tries} loops"
    assert shared <= 2, f"the worker ran on the caller's first CPU in {shared} of {joined} loops"


def test_a_compiled_loop_adds_each_element_once_beside_busy_processes():
    drive = load(modules.parallel_driver("pool_busy", 8)).function("driver", None, [P, P, I64])
    with busy(2):
        for n in (1, 3, 100_003, 1 << 20, 3_000_017):
            x = np.arange(n, dtype=np.float32)
            y = np.zeros_like(x)
            for _ in range(5):
                drive(x.ctypes.data, y.ctypes.data, n)
            np.testing.assert_array_equal(y, 5 * (x + 1))  # an element done twice would be off


def test_a_batch_of_small_products_over_the_pool_is_exact_beside_busy_processes():
    # The batch's products are the pool's chunks: whichever thread runs takes the next one.
    import flowjit as fj
    rng = np.random.default_rng(9)
    a = rng.integers(-8, 8, (32, 128, 64)).astype(np.float32)   # products exact in float32
    b = rng.integers(-8, 8, (1, 64, 128)).astype(np.float32)
    f = fj.function(lambda a, b: a @ b)
    want = np.matmul(a, b)
    np.testing.assert_array_equal(f(a, b), want)
    with busy(2):
        for _ in range(10):
            np.testing.assert_array_equal(f(a, b), want)


def test_a_loop_nested_in_a_chunk_runs_whole_on_that_chunks_thread():
    pool = native_pool()
    inner: list[Recorder] = []

    def nested(start, stop):
        rec = Recorder()
        inner.append(rec)
        pool.run(rec.address, 1000, 0)   # the pool is busy with the outer loop
        rec.assert_tiles(1000)
        assert rec.calls == [(0, 1000, threading.get_ident())]

    outer = Recorder(nested)
    pool.run(outer.address, 1 << 16, 0)
    outer.assert_tiles(1 << 16)
    assert len(inner) == len(outer.calls)


def test_callers_on_many_threads_at_once_each_get_their_whole_range_beside_busy_processes():
    drive = load(modules.parallel_driver("pool_callers", 4)).function("driver", None, [P, P, I64])
    n = 300_007
    xs = [(np.arange(n) % 1000 * k).astype(np.float32) for k in range(6)]  # sums exact in float32
    ys = [np.zeros(n, np.float32) for _ in xs]

    def call(x, y):
        for _ in range(20):
            drive(x.ctypes.data, y.ctypes.data, n)

    with busy(2):
        threads = [threading.Thread(target=call, args=(x, y)) for x, y in zip(xs, ys)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    for x, y in zip(xs, ys):
        np.testing.assert_array_equal(y, 20 * (x + 1))


@pytest.mark.parametrize("nthreads", [1, 2, 3, 8])
@pytest.mark.parametrize("n", [0, 5, (1 << 14) + 1, 300_001, 1 << 20])
def test_the_python_chunk_pool_runs_every_element_once(nthreads, n):
    pool, calls = ChunkPool(nthreads), []
    pool.run(lambda a, b: calls.append((a, b)), n)
    spans = sorted(calls)
    assert [a for a, _ in spans] == [0, *(b for _, b in spans)][:len(spans)] and spans[-1][1] == n
    assert len(spans) <= max(1, min(n // (1 << 14), nthreads * OVERSPLIT))


def test_the_python_chunk_pool_beside_busy_processes_and_concurrent_callers():
    pool = ChunkPool(2, min_chunk=1000)
    results: dict[int, list] = {}

    def call(k):
        for _ in range(10):
            calls: list = []
            pool.run(lambda a, b: calls.append((a, b)), 100_000 + k)
            results.setdefault(k, []).append(sorted(calls))

    with busy(2):
        threads = [threading.Thread(target=call, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    for k, runs in results.items():
        for spans in runs:
            assert [a for a, _ in spans] == [0] + [b for _, b in spans[:-1]] and spans[-1][1] == 100_000 + k


# ---- products over the pool -------------------------------------------------------------------
@pytest.fixture(scope="module")
def gemms():
    found = blas_functions()
    if not found or blas_threads() is None:
        pytest.skip("no CBLAS library with a thread control flowjit knows")
    if native_pool().workers == 0:
        pytest.skip("FLOWJIT_NUM_THREADS=1: no pool to split products over")
    return found


def _gemm(fn, ct):
    it = ctypes.c_int64 if fn.int_bits == 64 else ctypes.c_int32
    return ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_int, ctypes.c_int, it, it, it, ct, P, it, P, it, ct, P, it)


@pytest.mark.parametrize("routine, dtype, ct", [("sgemm", np.float32, ctypes.c_float),
                                                 ("dgemm", np.float64, ctypes.c_double),
                                                 ("cgemm", np.complex64, P), ("zgemm", np.complex128, P)])
def test_a_large_product_through_the_pool_matches_numpy_and_leaves_the_blas_threads(gemms, routine, dtype, ct):
    # A complex product too: its library threads, left to themselves, straggled beside busy
    # processes (an FFT's 32x4096x32 complex64 product took 15-27 ms a call against 0.12).
    if blas.missing_routines(gemms, [routine]):
        pytest.skip(f"the CBLAS library has no {routine}")
    fn = gemms[routine]
    assert fn.address != fn.routine  # the pool's gemm, in front of the library's
    gemm = _gemm(fn, ct)(fn.address)
    before = blas_threads().get()
    rng = np.random.default_rng(3)
    complex_ = np.dtype(dtype).kind == "c"
    scalars = [np.array([v], dtype) for v in (1.5 - 0.5j, 0.0)] if complex_ else []
    alpha, beta = (s.ctypes.data for s in scalars) if complex_ else (1.5, 0.0)

    def draw(shape):
        x = rng.standard_normal(shape)
        return (x + 1j * rng.standard_normal(shape) if complex_ else x).astype(dtype)
    # tall (rows split), wide (columns split), square, a remainder, below the split size
    for (m, n, k), ta, tb in itertools.product([(1000, 300, 129), (200, 900, 333), (4096, 64, 64),
                                                (513, 517, 40), (64, 128, 64)], (False, True), (False, True)):
        a = draw((k, m) if ta else (m, k))
        b = draw((n, k) if tb else (k, n))
        c = np.full((m, n), np.nan, dtype)
        gemm(101, 112 if ta else 111, 112 if tb else 111, m, n, k, alpha, a.ctypes.data, a.shape[1],
             b.ctypes.data, b.shape[1], beta, c.ctypes.data, n)
        want = (1.5 - 0.5j if complex_ else 1.5) * (a.T if ta else a).astype(np.complex128) @ (b.T if tb else b)
        np.testing.assert_allclose(c, want, rtol=1e-4, atol=1e-4 * np.sqrt(k), err_msg=f"{m}x{n}x{k} {ta} {tb}")
        assert blas_threads().get() == before


def test_products_from_many_threads_beside_busy_processes(gemms):
    fn = gemms["sgemm"]
    gemm = _gemm(fn, ctypes.c_float)(fn.address)
    before = blas_threads().get()
    rng = np.random.default_rng(4)
    problems = [(rng.standard_normal((384, 256)).astype(np.float32), rng.standard_normal((256, 320)).astype(np.float32))
                for _ in range(4)]
    outs = [np.zeros((384, 320), np.float32) for _ in problems]

    def call(a, b, c):
        for _ in range(5):
            gemm(101, 111, 111, 384, 320, 256, 1.0, a.ctypes.data, 256, b.ctypes.data, 320, 0.0, c.ctypes.data, 320)

    with busy(2):
        threads = [threading.Thread(target=call, args=(a, b, c)) for (a, b), c in zip(problems, outs)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    for (a, b), c in zip(problems, outs):
        np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)
    assert blas_threads().get() == before


class StandInGemms:
    """A 32-bit gemm module of its own, in front of a CBLAS stand-in that records what each
    piece is asked for (``pieces``) and a thread setter that records each count (``counts``),
    apart from the process's module, which calls the real library."""

    def __init__(self, one_piece: int, inner=None):
        text = blas.build_gemm_module(32).replace("flowjit_pool_gemms", f"test_gemms_{uuid.uuid4().hex}", 1)
        self.lib = load(text)
        i32, f32 = ctypes.c_int32, ctypes.c_float
        gemm_ty = ctypes.CFUNCTYPE(None, i32, i32, i32, i32, i32, i32, f32, P, i32, P, i32, f32, P, i32)
        self.pieces, self.counts = [], []
        def piece(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc):
            self.pieces.append((m, n, k, c))
            if inner is not None:
                inner()

        self._routine = gemm_ty(piece)
        self.threads = 3   # the library's count as its getter reports it
        def set_threads(n):
            self.counts.append(n)
            self.threads = n

        self._set_threads = ctypes.CFUNCTYPE(None, ctypes.c_int)(set_threads)
        self._get_threads = ctypes.CFUNCTYPE(ctypes.c_int)(lambda: self.threads)
        address = ctypes.cast(self._routine, P).value
        self.lib.function("flowjit_gemms_set_blas", None, [P] * 6 + [I64, I64])(
            address, address, None, None, ctypes.cast(self._set_threads, P).value,
            ctypes.cast(self._get_threads, P).value, 3, one_piece)
        self.gemm = gemm_ty(self.lib.address("flowjit_sgemm32"))


def test_the_32_bit_gemm_cuts_c_into_pieces_that_tile_it():
    if native_pool().workers == 0:
        pytest.skip("FLOWJIT_NUM_THREADS=1: no pool to cut products over")
    standin = StandInGemms(one_piece=0)
    gemm, pieces, counts = standin.gemm, standin.pieces, standin.counts
    c = np.zeros((1000, 1000), np.float32)
    # tall: pieces of rows (C's rows are 300 floats apart); wide: of columns
    for m, n, k, axis in ((1000, 300, 129, 0), (300, 1000, 129, 1)):
        pieces.clear()
        counts.clear()
        gemm(101, 111, 111, m, n, k, 1.0, None, k, None, n, 0.0, c.ctypes.data, n)
        spans = sorted(((p[3] - c.ctypes.data) // (4 * (n if axis == 0 else 1)), p[axis]) for p in pieces)
        assert len(pieces) > 1 and all(p[1 - axis] == (m, n)[1 - axis] and p[2] == k for p in pieces), pieces
        assert [a for a, _ in spans] == [0, *(a + size for a, size in spans)][:len(spans)], spans
        assert sum(size for _, size in spans) == (m, n)[axis]
        assert counts == [1, 3]  # the library on one thread for the pieces, then as it was
    pieces.clear()
    counts.clear()
    gemm(101, 111, 111, 64, 128, 64, 1.0, None, 64, None, 128, 0.0, c.ctypes.data, 128)  # small: as it is
    gemm(102, 111, 111, 1000, 300, 129, 1.0, None, 1000, None, 129, 0.0, c.ctypes.data, 1000)  # column-major too
    assert [p[:3] for p in pieces] == [(64, 128, 64), (1000, 300, 129)] and counts == [], (pieces, counts)
    gemm(101, 111, 111, 64, 64, 1 << 16, 1.0, None, 1 << 16, None, 64, 0.0, c.ctypes.data, 64)  # narrow, deep
    assert [p[:3] for p in pieces[2:]] == [(64, 64, 1 << 16)] and counts == [], (pieces, counts)


def test_with_no_workers_the_gemm_runs_every_product_on_one_blas_thread():
    # one_piece: the module of a pool without workers (FLOWJIT_NUM_THREADS=1). The small and
    # the narrow deep products would go to the library as they are (its own threads) without it.
    standin = StandInGemms(one_piece=1)
    gemm, pieces, counts = standin.gemm, standin.pieces, standin.counts
    c = np.zeros((1000, 1000), np.float32)
    for m, n, k in ((64, 128, 64), (64, 64, 1 << 16), (1000, 300, 129), (4096, 64, 64)):
        pieces.clear()
        counts.clear()
        gemm(101, 111, 111, m, n, k, 1.0, None, k, None, n, 0.0, c.ctypes.data, n)
        if len(pieces) == 1:   # a split product may still be cut when this process's pool has workers
            assert pieces[0][:3] == (m, n, k) and pieces[0][3] == c.ctypes.data
        assert sum(p[0] if m >= n else p[1] for p in pieces) == max(m, n) and counts == [1, 3], (pieces, counts)
    pieces.clear()
    counts.clear()
    gemm(102, 111, 111, 1000, 300, 129, 1.0, None, 1000, None, 129, 0.0, c.ctypes.data, 1000)  # column-major: as it is
    assert [p[:3] for p in pieces] == [(1000, 300, 129)] and counts == [], (pieces, counts)
    # The count set back is the one the library had when the product came, not when loaded:
    # a user's threadpoolctl (2 threads), or OPENBLAS_NUM_THREADS=1 (left alone)
    for now, want in ((2, [1, 2]), (1, [])):
        standin.threads = now
        counts.clear()
        gemm(101, 111, 111, 64, 128, 64, 1.0, None, 64, None, 128, 0.0, c.ctypes.data, 128)
        assert counts == want, (now, counts)


def test_products_on_many_threads_leave_the_blas_count_as_they_found_it():
    # The first product in reads the library's count and sets one thread, the last out sets the
    # count back; a first product reading the count between another's last decrement and its
    # setting back would keep the one thread for good, were the two not under one lock.
    standin = StandInGemms(one_piece=1, inner=lambda: time.sleep(0.0002 * (threading.get_ident() % 3)))
    c = np.zeros((64, 128), np.float32)

    def products():
        for _ in range(150):
            standin.gemm(101, 111, 111, 64, 128, 64, 1.0, None, 64, None, 128, 0.0, c.ctypes.data, 128)

    threads = [threading.Thread(target=products) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert standin.threads == 3 and standin.counts[-1] == 3, standin.counts[-10:]


def test_a_child_forked_during_a_product_gets_the_blas_threads_back():
    # The product holds the library at one thread; a child forked then runs no product, so
    # the module's after-fork hook (registered with os.register_at_fork for the process's
    # module) sets the count back. Called here in the parent, as the child would.
    inside, leave = threading.Event(), threading.Event()
    standin = StandInGemms(one_piece=1, inner=lambda: (inside.set(), leave.wait(10)))
    after_fork = standin.lib.function("flowjit_gemms_after_fork", None, [])
    after_fork()
    assert standin.counts == []   # no product running: the count is left as it is
    c = np.zeros((64, 64), np.float32)
    t = threading.Thread(target=standin.gemm, args=(101, 111, 111, 64, 64, 64, 1.0, None, 64, None, 64, 0.0,
                                                     c.ctypes.data, 64))
    t.start()
    try:
        assert inside.wait(10)
        assert standin.counts == [1]
        after_fork()
        assert standin.counts == [1, 3]
    finally:
        leave.set()
        t.join()


def test_with_one_thread_every_product_runs_on_one_blas_thread(tmp_path):
    # FLOWJIT_NUM_THREADS=1 means one thread for the BLAS too: with the library's own threads
    # a product collapsed beside busy processes (they wait for each other on cores they lack).
    code = ("import numpy as np\n"
            "from flowjit.codegen_cpu import blas_functions\n"
            "from flowjit.codegen_cpu.blas import blas_threads\n"
            "import flowjit as fj\n"
            "f = blas_functions()\n"
            "if f and blas_threads() is not None:\n"
            "    assert all(r.address != r.routine for r in f.values()), f\n"
            "    before = blas_threads().get()\n"
            "    rng = np.random.default_rng(0)\n"
            "    for shape in ((64, 128, 64), (300, 200, 100), (1024, 512, 256)):\n"
            "        a = rng.standard_normal(shape[:2]).astype(np.float32)\n"
            "        b = rng.standard_normal(shape[1:]).astype(np.float32)\n"
            "        got = fj.function(lambda a, b: a @ b)(a, b)\n"
            "        np.testing.assert_allclose(got, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)\n"
            "    assert blas_threads().get() == before, (blas_threads().get(), before)\n"
            "print('ok')\n")
    env = dict(os.environ, PYTHONPATH=ROOT, FLOWJIT_NUM_THREADS="1", FLOWJIT_CACHE_DIR=str(tmp_path))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-3000:]
