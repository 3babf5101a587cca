"""Concurrency of partitions on virtual CPU devices: a program with two independent
branches (each a chain of elementwise kernels over 2**22 float32), placed on ``cpu:1``
and ``cpu:2``, against each branch run alone on its device. Each virtual device runs
its kernels on one thread, so on a 2-core machine the partitioned program should take
about as long as the slower branch, not the sum of both.

    python -m bench.devices [--repeat 15]

Prints medians and the ratio (partitioned two-branch time) / (sum of the branches' times);
below 1 means the branches ran concurrently.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("FLOWJIT_CPU_DEVICES", "3")

import numpy as np  # noqa: E402

import flowjit as fj  # noqa: E402

N = 1 << 22


def _branch(x):
    for _ in range(4):
        x = fj.tanh(x * 1.01 + 0.1)
    return x


def _on(device):
    def f(x):
        with fj.device(device):
            return _branch(x)
    return f


def _both(x, y):
    with fj.device("cpu:1"):
        a = _branch(x)
    with fj.device("cpu:2"):
        b = _branch(y)
    return a, b


def _median_ms(f, args, repeat: int) -> float:
    f(*args)
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        f(*args)
        times.append(time.perf_counter() - t)
    return 1e3 * statistics.median(times)


def main(argv: list[str] | None = None) -> dict[str, float]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeat", type=int, default=15)
    p.add_argument("--n", type=int, default=N)
    args = p.parse_args(argv)
    rng = np.random.default_rng(0)
    x, y = (rng.standard_normal(args.n).astype(np.float32) for _ in range(2))
    a = _median_ms(fj.function(_on("cpu:1")), (x,), args.repeat)
    b = _median_ms(fj.function(_on("cpu:2")), (y,), args.repeat)
    both = _median_ms(fj.function(_both), (x, y), args.repeat)
    ratio = both / (a + b)
    print(f"| program | median ms |\n|---|---|\n| branch on cpu:1 alone | {a:.1f} |\n"
          f"| branch on cpu:2 alone | {b:.1f} |\n| both, partitioned over cpu:1 and cpu:2 | {both:.1f} |\n\n"
          f"two-branch / sum of branches: {ratio:.2f} (below 1: the branches ran concurrently); "
          f"f32[{args.n}], {os.cpu_count()} cores")
    return {"alone_ms": a + b, "both_ms": both, "ratio": ratio}


if __name__ == "__main__":
    main()
