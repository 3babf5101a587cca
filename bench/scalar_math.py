"""flowjit's float32 scalar math (flowjit.codegen_cpu.scalar_math) against libm: each
function in a numba loop over 2**22 float32 beside the same loop calling ``math.<name>``
(libm in float64, rounded), best of ``--repeat`` runs. The suite checks these functions'
accuracy and that their loops vectorize; their speed is measured here, never asserted.

    python -m bench.scalar_math [--repeat 5]
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np
from numba import njit

from flowjit.codegen_cpu import scalar_math as sm

N = 1 << 22
OURS = {"tanh": sm.tanh32, "exp": sm.exp32, "expm1": sm.expm1_32, "log": sm.log32, "erf": sm.erf32}


def loop(f):
    """A compiled loop writing ``f(a[i])`` to ``out[i]``."""
    @njit(error_model="numpy")
    def run(a, out):
        for i in range(a.size):
            out[i] = f(a[i])
    return run


def best_time(run, x, out, repeat: int) -> float:
    run(x, out)  # compile
    best = math.inf
    for _ in range(repeat):
        t = time.perf_counter()
        run(x, out)
        best = min(best, time.perf_counter() - t)
    return best


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=5)
    args = p.parse_args()
    rng = np.random.default_rng(0)
    normal = (rng.standard_normal(N) * 3).astype(np.float32)
    positive = np.abs(normal) + np.float32(1e-3)  # log's domain
    out = np.empty(N, np.float32)
    print(f"| function, {N} float32 | flowjit ms | math.<name> ms | speedup |")
    print("|---|---|---|---|")
    for name, ours in OURS.items():
        x = positive if name == "log" else normal
        t_ours = best_time(loop(ours), x, out, args.repeat)
        t_libm = best_time(loop(getattr(math, name)), x, out, args.repeat)
        print(f"| {name} | {t_ours * 1e3:.2f} | {t_libm * 1e3:.2f} | {t_libm / t_ours:.1f}x |")


if __name__ == "__main__":
    main()
