"""Streaming stores and prefetches against plain stores in flowjit's large 1-D elementwise
kernels (flowjit.codegen_cpu.streaming): gelu (default and fastmath) and ``x * 3`` on
2**24 float32, each compiled three times -- with the streaming threshold out of reach
(plain stores), streamed without prefetches, and with the defaults (streamed and
prefetched) -- and timed alternately with the bench's 2-thread streaming copy of 2**25
floats (bench/streaming.py, the copy %BW divides by) in the same rounds, so each fraction
of copy bandwidth compares kernels measured under the same load.

    python -m bench.stores [--repeat 41]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import flowjit as fj
from bench.streaming import Streamer
from bench.workloads import defs
from flowjit.codegen_cpu import streaming

N = 1 << 24


def times3(x):
    return x * 3


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=41)
    args = p.parse_args()
    copy = Streamer("copy", 2)  # the bench's own copy, the one %BW divides by
    x = (np.random.default_rng(0).standard_normal(N) * 3).astype(np.float32)
    defaults = streaming.STREAM_MIN_BYTES, streaming.PREFETCH_BLOCKS
    builds = {"plain stores": (1 << 62, 0), "streamed stores": (defaults[0], 0),
              "streamed stores + prefetch": defaults}
    fns = {}
    for build, (threshold, ahead) in builds.items():
        # Both settings are written into the kernel source when it is generated (first call).
        streaming.STREAM_MIN_BYTES, streaming.PREFETCH_BLOCKS = threshold, ahead
        gelu = defs.FJ["gelu"]
        for name, f, fast in (("gelu", gelu, False), ("gelu, fastmath", gelu, True), ("x * 3", times3, False)):
            g = fj.function(f, fastmath=fast)
            g(x)
            fns[f"{name}, {build}"] = g
    streaming.STREAM_MIN_BYTES, streaming.PREFETCH_BLOCKS = defaults
    src = np.ones(2 * N, np.float32)
    dst = np.empty_like(src)
    copy(dst, src)
    samples: dict[str, list[float]] = {k: [] for k in [*fns, "copy"]}
    for _ in range(args.repeat):
        for k, g in fns.items():
            t = time.perf_counter()
            y = g(x)
            samples[k].append(time.perf_counter() - t)
            del y  # back to the pool, as a caller dropping the result
        t = time.perf_counter()
        copy(dst, src)
        samples["copy"].append(time.perf_counter() - t)
    gbps = 2 * src.nbytes / statistics.median(samples["copy"])
    print(f"copy bandwidth {gbps / 1e9:.1f} GB/s (2-thread streaming copy of {2 * N} float32, same rounds)")
    print("| kernel | median | of copy bandwidth |\n|---|---|---|")
    for k, v in samples.items():
        if k != "copy":
            m = statistics.median(v)
            print(f"| {k} | {m * 1e3:.2f} ms | {2 * x.nbytes / m / gbps:.0%} |")


if __name__ == "__main__":
    main()
