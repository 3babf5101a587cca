"""Times the JIT's steps in fresh processes (not collected by pytest): run
``python -m tests.codegen_cpu.bench_jit``. A cold process (empty cache) and a warm one
(the same module cached) each print import, target init, optimize, codegen and load
times in milliseconds for the small y = x*2 + 1 module."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

_CHILD = r"""
import json, time
t0 = time.perf_counter()
import flowjit.codegen_cpu as c
t1 = time.perf_counter()
from tests.codegen_cpu import modules
text = modules.axpb("bench_jit")
c.host_target()
t2 = time.perf_counter()
lib = c.load(text)
lib.address("axpb")
t3 = time.perf_counter()
print(json.dumps({"import_ms": (t1 - t0) * 1e3, "first_load_total_ms": (t3 - t2) * 1e3,
                  **c.timings, **c.cache_stats()}))
"""


def main() -> None:
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with tempfile.TemporaryDirectory() as d:
        env = dict(os.environ, FLOWJIT_CACHE_DIR=d, PYTHONPATH=root)
        for label in ("cold", "warm", "warm"):
            out = subprocess.run([sys.executable, "-c", _CHILD], env=env, check=True,
                                 capture_output=True, text=True).stdout
            row = json.loads(out)
            print(label, {k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()})


if __name__ == "__main__":
    main()
