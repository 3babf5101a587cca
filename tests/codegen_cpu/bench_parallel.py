"""Measures the chunk pools against one thread (not collected by pytest): run
``python -m tests.codegen_cpu.bench_parallel``. It prints the time of y += x + 1 over n
float32 on the caller's thread, on the Python pool (every call split), and through a
generated driver calling the native pool in one piece and split, for the figures behind
PARALLEL_MIN_ELEMENTS in flowjit/codegen_cpu/parallel.py."""

from __future__ import annotations

import ctypes
import time

import numpy as np

from flowjit.codegen_cpu import ChunkPool, default_threads, load

from . import modules


def best(fn, reps: int, pause: float = 0.0) -> float:
    """The fastest of ``reps`` timed calls of ``fn()``, in microseconds (after a warm-up),
    sleeping ``pause`` seconds before each (long enough, the pool's workers are asleep)."""
    fn()
    out = float("inf")
    for _ in range(reps):
        if pause:
            time.sleep(pause)
        t = time.perf_counter()
        fn()
        out = min(out, time.perf_counter() - t)
    return out * 1e6


def main() -> None:
    f = load(modules.chunk_add("bench_parallel")).function(
        "chunk_add", None, [ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p])
    sig = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
    whole = load(modules.parallel_driver("bench_whole", 1)).function("driver", None, sig)
    split = load(modules.parallel_driver("bench_split", default_threads())).function("driver", None, sig)
    p = ChunkPool(default_threads(), min_chunk=1)  # split every call, to see its cost
    print(f"threads {p.nthreads}; empty ctypes call {best(lambda: f(0, 0, 0, 0), 2000):.2f} us")
    for n in (1_000, 100_000, 300_000, 500_000, 1_000_000, 10_000_000):
        x, y = np.ones(n, np.float32), np.zeros(n, np.float32)
        args = (x.ctypes.data, y.ctypes.data)
        reps = 2000 if n <= 100_000 else 200 if n <= 1_000_000 else 20
        one = best(lambda: f(0, n, *args), reps)
        par = best(lambda: p.run(f, n, *args), reps)
        nat1 = best(lambda: whole(*args, n), reps)
        nat = best(lambda: split(*args, n), reps)
        asleep = best(lambda: split(*args, n), 20, pause=0.002)
        print(f"n={n:>10,}  1 thread {one:9.1f} us  python pool {par:9.1f} us ({par / one:5.2f})"
              f"  native 1 piece {nat1:9.1f} us  native split {nat:9.1f} us ({nat / one:5.2f})"
              f"  native split, workers asleep {asleep:9.1f} us")
    # the hand-off alone: a range split in pieces that do no work
    print(f"pool hand-off, no work: {best(lambda: p.run(lambda a, b: None, 1 << 20), 2000):.1f} us")


if __name__ == "__main__":
    main()
