"""Measures the chunk pool against one thread (not collected by pytest): run
``python -m tests.codegen_llvm.bench_parallel``. It prints the time of y += x + 1 over n
float32 on the caller's thread, on the pool, and the bare ctypes call of an empty range,
for the figures behind PARALLEL_MIN_ELEMENTS in flowjit/codegen_llvm/parallel.py."""

from __future__ import annotations

import ctypes
import time

import numpy as np

from flowjit.codegen_llvm import ChunkPool, default_threads, load

from . import modules


def best(fn, reps: int) -> float:
    """The fastest of ``reps`` timed calls of ``fn()``, in microseconds (after a warm-up)."""
    fn()
    out = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        out = min(out, time.perf_counter() - t)
    return out * 1e6


def main() -> None:
    f = load(modules.chunk_add("bench_parallel")).function(
        "chunk_add", None, [ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p])
    p = ChunkPool(default_threads(), min_chunk=1)  # split every call, to see its cost
    print(f"threads {p.nthreads}; empty ctypes call {best(lambda: f(0, 0, 0, 0), 2000):.2f} us")
    for n in (1_000, 100_000, 300_000, 500_000, 1_000_000, 10_000_000):
        x, y = np.ones(n, np.float32), np.zeros(n, np.float32)
        args = (x.ctypes.data, y.ctypes.data)
        reps = 2000 if n <= 100_000 else 200 if n <= 1_000_000 else 20
        one = best(lambda: f(0, n, *args), reps)
        par = best(lambda: p.run(f, n, *args), reps)
        print(f"n={n:>10,}  1 thread {one:10.1f} us   pool {par:10.1f} us   ratio {par / one:5.2f}")
    # the hand-off alone: a range split in pieces that do no work
    print(f"pool hand-off, no work: {best(lambda: p.run(lambda a, b: None, 1 << 20), 2000):.1f} us")


if __name__ == "__main__":
    main()
