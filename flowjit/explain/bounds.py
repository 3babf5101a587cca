"""The machine's limits that ``fj.explain`` holds each kernel to, measured once per machine.

Two short timings, through flowjit itself so they run as the programs do: a streaming
kernel (``y = x + 1`` over 64 MiB of float32, read once and written once, on the llvm
backend's native program with its thread pool) gives the memory bandwidth, bytes read plus
written over the best of several runs; a float32 matmul of 1024x1024 matrices (the BLAS
call a program makes, NumPy's OpenBLAS) gives the BLAS rate, 2*n**3 over the best run.
Together they take about a second. The result is kept as JSON in ``FLOWJIT_CACHE_DIR``
(default ``~/.cache/flowjit``) + ``machine/bounds-<key>.json``, keyed by the CPU model, the
number of CPUs and the NumPy version, so a later process reads it instead of measuring.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from flowjit.tracer.function import function

# Large enough to stream from memory past the last-level cache, short enough to take ~10 ms.
STREAM_ELEMENTS = 16 * 1024 * 1024
GEMM_N = 1024
REPEATS = 15
FORMAT = 1
# How many times this process measured (a test holds the cache to measuring once).
measurements = [0]


@dataclass(frozen=True)
class MachineBounds:
    """The limits of this machine: ``bandwidth`` bytes per second a streaming kernel
    moves (read plus written), ``gemm_flops`` float32 BLAS FLOPs per second; ``method``
    says how they were measured, ``cpu`` and ``threads`` what they were measured on, and
    ``path`` where they are kept."""

    bandwidth: float
    gemm_flops: float
    method: str
    cpu: str
    threads: int
    measured_at: str
    path: str

    def to_json(self) -> dict:
        """The bounds as a JSON-ready dict."""
        return dataclasses.asdict(self)


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def bounds_path() -> str:
    """Where this machine's bounds are kept (see the module docstring)."""
    identity = f"{FORMAT}|{platform.machine()}|{_cpu_model()}|{os.cpu_count()}|numpy{np.__version__}"
    key = hashlib.sha256(identity.encode()).hexdigest()[:16]
    from flowjit.codegen_cpu import objcache  # the CPU backend's cache directory, loaded when first timed
    return os.path.join(os.path.dirname(objcache.directory()), "machine", f"bounds-{key}.json")


def _best(run: Callable[[], object]) -> float:
    run()  # compiles, or loads from the disk cache, and touches the memory
    times = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return min(times)


def measure() -> MachineBounds:
    """Time the streaming kernel and the matmul now (see the module docstring)."""
    measurements[0] += 1
    x = np.ones(STREAM_ELEMENTS, np.float32)
    stream = function(lambda x: x + 1)
    seconds = _best(lambda: stream(x))
    bandwidth = 2 * x.nbytes / seconds
    a = np.random.default_rng(0).standard_normal((GEMM_N, GEMM_N)).astype(np.float32)
    gemm = function(lambda a, b: a @ b)
    flops = 2 * GEMM_N ** 3 / _best(lambda: gemm(a, a))
    method = (f"best of {REPEATS}: a flowjit kernel y = x + 1 over {x.nbytes >> 20} MiB of float32 "
              f"(bytes read + written / time), and a flowjit float32 matmul {GEMM_N}x{GEMM_N} @ {GEMM_N}x{GEMM_N} "
              f"(2*n^3 / time)")
    return MachineBounds(bandwidth, flops, method, _cpu_model(), os.cpu_count() or 1,
                         time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), bounds_path())


def machine_bounds(remeasure: bool = False) -> MachineBounds:
    """This machine's bounds: read from the cache file, or measured once and written there
    (``remeasure``: measure again and replace the file)."""
    path = bounds_path()
    if not remeasure:
        try:
            with open(path) as f:
                data = json.load(f)
            return MachineBounds(**{**data, "path": path})
        except (OSError, ValueError, TypeError):
            pass  # missing or unreadable: measure
    found = measure()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    temp = f"{path}.{os.getpid()}.tmp"
    with open(temp, "w") as f:
        json.dump(found.to_json(), f, indent=2)
    os.replace(temp, path)  # atomic: a concurrent reader sees the old file or the new one
    return found
