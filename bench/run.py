"""flowjit against NumPy, JAX, TensorFlow and PyTorch: ``python -m bench`` or ``python bench/run.py``.

    python -m bench                        # every workload, full sizes
    python -m bench --quick                # small sizes: a smoke run
    python -m bench --only gelu,softmax --repeat 20
    python -m bench --peers fj,numpy,jax   # leave columns out (torch.compile is slow to compile)
    python -m bench --record               # also write bench/results/<host>-<date>.md
    python -m bench.compare BASE [HEAD]    # flowjit at two commits, timed side by side


Workloads: bandwidth (the machine's copy and triad GB/s, the limit for elementwise work),
gelu, softmax, layernorm, transpose, spectrum, rotary (a RoPE table: cos and sin),
depthwise (a MobileNet 3x3 depthwise convolution),
conv (a ResNet layer's 3x3 convolution and its gradient), dispatch, matmul, compile (first-call latency, cold and warm),
mlp_step (one SGD training step of an MLP 784-256-256-10, batch 256; then its first step
in a new process, cold and from the disk caches), loop, aot (a library built by ``fj.export``:
from process start to the first result in a C program and in Python with ``fj.load_compiled``,
against the JIT's and JAX's first calls, and its steady state against the JIT's; needs ``cc``),
distributed (``fj.distributed.train`` on a local Ray runtime: steps/s and samples/s for 1, 2
and 4 workers, sync and async, and sync with a slowed worker; skipped without Ray), sendrecv
(a 4 KB and a 4 MB array to a worker task and back: flowjit's placed call against Ray's
put/get and an actor's round trip; skipped without Ray), remat_memory (the measured peak memory
and steps/s of one deep-MLP training step with and without ``fj.remat``, each row a new
process, against ``jax.checkpoint``), models (the model zoo of ``bench/workloads/zoo.py``: an MLP, a CNN
with batch norm, a transformer block, an embedding bag and an LSTM over scan, inference and one Adam
step each, against JAX jit and torch: steady state idle and beside two busy processes, first calls
cold and warm in new processes, peak memory, and whether flowjit ran each as one native program).
Each cell is the median over ``--repeat`` samples after warm-up (``±`` the interquartile
range); the ratio is flowjit's median (compiled for the CPU: loop IR -> llvmlite) over the
fastest peer's (above 1: flowjit is slower); ``%BW`` is bytes read+written per second as a
fraction of the bandwidth of a copy timed in the same rounds as the row (the machine's
bandwidth swings while the run goes on); that copy streams its stores (non-temporal, as
flowjit's large outputs and glibc's memcpy do: bench/streaming.py), so %BW is a fraction of
what the machine's memory can take.
Threads: 2 everywhere (FLOWJIT_NUM_THREADS for flowjit's pool, OMP/MKL/OpenBLAS, TensorFlow's
intra- and inter-op pools, torch.set_num_threads); change with ``--threads``. This module
imports only the standard library at the top, so the thread settings are in the environment
before NumPy, JAX or torch load. A peer (JAX, TensorFlow as ``tf.function(jit_compile=True)``,
torch) is imported only when its column runs, and its cells say "skipped" when it is not
installed (``pip install -e .[bench]``).
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import os
import platform
import re
import socket
import subprocess
import sys
import time
import traceback

if __package__ in (None, ""):          # run as a script: make ``bench`` importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "bench", "results")
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
               "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS", "FLOWJIT_NUM_THREADS")


def parse_args(argv: list[str] | None):
    from bench.workloads import NAMES
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="workloads: " + ", ".join(NAMES))
    p.add_argument("--only", default="", help="comma-separated workloads to run (default: all)")
    p.add_argument("--repeat", type=int, default=None, help="timed samples per cell (default 10; 3 with --quick)")
    p.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    p.add_argument("--record", action="store_true", help="write the table to bench/results/<host>-<date>.md")
    p.add_argument("--peers", default="",
                   help="comma-separated columns to run: fj,interp,numpy,jax,tf,torch,compile "
                        "(fj: flowjit compiled, interp: its interpreter)")
    p.add_argument("--threads", type=int, default=2, help="threads for every library (default 2)")
    args = p.parse_args(argv)
    only = [w.strip() for w in args.only.split(",") if w.strip()]
    bad = [w for w in only if w not in NAMES]
    if bad:
        p.error(f"unknown workload(s) {', '.join(bad)}; choose from {', '.join(NAMES)}")
    args.only = only or list(NAMES)
    from bench.workloads.common import COLUMNS
    keys = [k for k, _ in COLUMNS]
    peers = [c.strip() for c in args.peers.split(",") if c.strip()]
    bad = [c for c in peers if c not in keys]
    if bad:
        p.error(f"unknown column(s) {', '.join(bad)}; choose from {', '.join(keys)}")
    args.peers = tuple(peers or keys)
    if args.repeat is None:
        args.repeat = 3 if args.quick else 10
    if args.repeat < 1:
        p.error("--repeat must be at least 1")
    return args


def set_threads(n: int) -> None:
    for var in THREAD_VARS:
        os.environ[var] = str(n)
    # Idle OpenMP threads (torch's, OpenBLAS's) sleep instead of spinning: on a shared
    # 2-core machine a spinning pool starves whatever runs next (seen: 8 ms per parallel region).
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    if "numpy" in sys.modules:
        print("bench: NumPy was imported before the thread settings; they may use more threads",
              file=sys.stderr)


class Load:
    """CPU time used by other processes (and stolen by the hypervisor) while a span ran."""

    def __init__(self):
        self.start = self._read()

    @staticmethod
    def _read() -> tuple[float, float, float, float]:
        busy = steal = 0.0
        try:
            with open("/proc/stat") as f:
                v = [int(x) for x in f.readline().split()[1:]]
            tick = os.sysconf("SC_CLK_TCK")
            busy = (v[0] + v[1] + v[2] + v[5] + v[6]) / tick
            steal = (v[7] if len(v) > 7 else 0) / tick
        except (OSError, ValueError, IndexError):
            pass
        t = os.times()
        return time.perf_counter(), busy, steal, t.user + t.system + t.children_user + t.children_system

    def others(self) -> str:
        """'NN% of the machine' used by others since construction (steal too when there was any)."""
        end = self._read()
        wall, busy, steal, ours = (e - s for e, s in zip(end, self.start))
        cores = os.cpu_count() or 1
        if wall <= 0 or busy <= 0:
            return "unknown"
        text = f"{100 * max(busy - ours, 0.0) / (wall * cores):.0f}%"
        if steal > 0.01 * wall * cores:
            text += f" (+{100 * steal / (wall * cores):.0f}% stolen)"
        return text


# ---- the machine ------------------------------------------------------------------------------
def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def host_name() -> str:
    name = os.environ.get("BENCH_HOST") or socket.gethostname()
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", name)
    # Generic or container-generated names say nothing about the machine.
    if not name or name in ("vm", "localhost") or re.fullmatch(r"[0-9a-f]{12,}", name):
        return "cpu2"
    return name


def git_commit() -> str:
    try:
        out = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, timeout=10)
        commit = out.stdout.strip() or "unknown"
        dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--", "flowjit"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return commit + (" (flowjit/ has uncommitted changes)" if dirty else "")
    except Exception:
        return "unknown"


def blas_core() -> str:
    """Which OpenBLAS kernels flowjit's products (and NumPy's, the same library) run, and
    the OPENBLAS_CORETYPE the run was given."""
    try:
        from flowjit.codegen_cpu import blas
        blas.blas_functions()
        core = blas.OPENBLAS_CORE
    except Exception:
        return "unknown"
    if not core:
        return "not an OpenBLAS"
    was = f" (restarted from {core['was']})" if "was" in core else ""
    given = os.environ.get("OPENBLAS_CORETYPE")
    advice = f" ({core['advice']})" if "advice" in core else ""
    return f"OpenBLAS {core['core']} kernels{was}{advice}" + (f"; OPENBLAS_CORETYPE={given}" if given else "")


def machine(ctx) -> list[str]:
    try:
        affinity = len(os.sched_getaffinity(0))
    except AttributeError:
        affinity = os.cpu_count()
    try:
        with open("/proc/meminfo") as f:
            mem = f"{int(f.readline().split()[1]) / 2**20:.1f} GiB"
    except (OSError, ValueError, IndexError):
        mem = "unknown"
    versions = ", ".join(f"{m} {ctx.version(m)}" for m in ("flowjit", "numpy", "llvmlite", "jax", "torch",
                                                           "tensorflow"))
    return [f"- CPU: {cpu_model()}; {os.cpu_count()} logical cores ({affinity} usable); memory {mem}",
            f"- OS: {platform.platform()}; Python {platform.python_version()}",
            f"- Versions: {versions}",
            f"- flowjit commit: {git_commit()}",
            f"- BLAS: {blas_core()}",
            f"- Threads: {ctx.threads} ({', '.join(THREAD_VARS[:3])}, FLOWJIT_NUM_THREADS, torch.set_num_threads); "
            f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', '')}; "
            "JAX/XLA uses its default pool (all usable cores)"
            + (f"; TensorFlow: {ctx.threads} intra-op and {ctx.threads} inter-op threads" if "tf" in ctx.columns
               else "")]


# ---- tables -----------------------------------------------------------------------------------
def table(headers: list[str], rows: list[list[str]]) -> list[str]:
    def esc(s: str) -> str:
        return s.replace("|", "\\|").replace("\n", " ")
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    out += ["| " + " | ".join(esc(c) for c in r) + " |" for r in rows]
    return out


# Workloads whose columns are not the peers': their module's render(ctx, rows) draws their tables.
OWN_TABLES = ("aot", "distributed", "sendrecv", "remat_memory", "serving", "models")


def render(ctx, rows) -> list[str]:
    from bench.workloads import bandwidth
    from bench.workloads.common import COLUMNS
    lines: list[str] = []
    bw_rows = [r for r in rows if r.workload == "bandwidth"]
    own = {w: [r for r in rows if r.workload == w] for w in OWN_TABLES}   # each renders its own tables
    main_rows = [r for r in rows if r.workload not in ("bandwidth", *OWN_TABLES)]
    if bw_rows:
        lines += ["### Memory bandwidth (bytes read + written per second)", ""]
        bw_columns = bandwidth.columns(ctx)
        lines += table(["workload"] + [h for _, h in bw_columns],
                       [[r.label] + [r.cells[k].text if k in r.cells else "—" for k, _ in bw_columns]
                        for r in bw_rows])
        lines.append("")
    if ctx.copy_gbps:
        lines += [f"Copy bandwidth: {ctx.copy_gbps:.1f} GB/s (streaming copy: LLVM IR with non-temporal stores "
                  f"through llvmlite, {ctx.threads} threads, into an existing buffer). Each %BW divides by the same "
                  "copy timed in that row's rounds (column \"copy, same rounds\").", ""]
    if main_rows:
        cols = [(k, h) for k, h in COLUMNS if k in ctx.columns]
        heads = ["workload"] + [h for _, h in cols] + ["flowjit/best peer", "%BW flowjit", "%BW best peer",
                                                        "copy, same rounds"]
        lines += ["### flowjit against its peers (median per call)", ""]
        lines += table(heads, [[r.label] + [r.cells[k].text if k in r.cells else "—" for k, _ in cols]
                               + [r.ratio or "—", r.bw_fj or "—", r.bw_best or "—",
                                  f"{r.copy_gbps:.1f} GB/s" if r.copy_gbps else "—"] for r in main_rows])
        lines.append("")
    for name, mine in own.items():
        if mine:
            lines += importlib.import_module(f"bench.workloads.{name}").render(ctx, mine)
    notes = [f"- {r.label}: {r.note}" for r in rows if r.note]
    if notes:
        lines += ["Notes:", ""] + notes + [""]
    return lines


def render_errors(ctx) -> list[str]:
    if not ctx.errors:
        return []
    lines = ["### Errors", ""]
    for row, col, text in ctx.errors:
        lines += [f"{row} / {col}:", "", "```", text[-3000:], "```", ""]
    return lines


# ---- main -------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    set_threads(args.threads)
    from bench.workloads import NEEDS_BANDWIDTH
    from bench.workloads.common import Ctx, Row, short_error
    ctx = Ctx(quick=args.quick, repeat=args.repeat, columns=args.peers, threads=args.threads,
              gap_s=0.02 if args.quick else 0.15)
    started = datetime.datetime.now()
    t_start = time.perf_counter()
    rows: list[Row] = []
    todo = list(args.only)
    load_all = Load()
    loads: list[str] = []
    if any(w in NEEDS_BANDWIDTH for w in todo) and "bandwidth" not in todo:
        todo.insert(0, "_copy")
    for name in todo:
        ctx.log(f"bench: {name}")
        load = Load()
        try:
            if name == "_copy":
                from bench.workloads.bandwidth import measure_copy
                measure_copy(ctx)
                continue
            module = importlib.import_module(f"bench.workloads.{name}")
            rows += module.run(ctx)
        except Exception as e:          # a workload that fails as a whole: one row with its error
            ctx.errors.append((name, "all", traceback.format_exc()))
            ctx.log(f"bench: {name} failed: {short_error(e)}")
            rows.append(Row(name, name, note=f"ERROR {short_error(e)}"))
        loads.append(f"{name.lstrip('_')} {load.others()}")
    elapsed = time.perf_counter() - t_start
    header = [f"# flowjit benchmarks, {started:%Y-%m-%d %H:%M}", "",
              f"`python -m bench {' '.join(argv if argv is not None else sys.argv[1:])}`".replace(" `", "`"),
              f"(repeat {ctx.repeat}{', quick sizes' if ctx.quick else ''}; took {elapsed:.0f} s)", ""]
    load_line = [f"- Load from other processes during the run: {load_all.others()} of the machine "
                 f"(per workload: {', '.join(loads)}); load average at the end "
                 f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}"]
    if any(w in ("compile", "mlp_step", "aot") for w in todo):
        from bench.workloads.compile import bytecode_line
        load_line.append(bytecode_line())
    lines = header + machine(ctx) + load_line + [""] + render(ctx, rows)
    explain = ["Cells: median time per call over the timed samples, after warm-up (the first call compiles "
               "and is checked against a float64 NumPy reference); ± is the interquartile range over the median. "
               "flowjit/best peer: flowjit's median over the fastest of NumPy, JAX jit, TensorFlow (XLA), torch "
               "eager and torch.compile (above 1: flowjit is slower). %BW: bytes read + "
               "written per second over the bandwidth of the streaming copy (non-temporal stores, "
               "bench/streaming.py) timed in the same rounds as the row's columns.", ""]
    text = "\n".join(lines + explain + render_errors(ctx))
    print(text)
    if args.record:
        os.makedirs(RESULTS, exist_ok=True)
        path = os.path.join(RESULTS, f"{host_name()}-{started:%Y-%m-%d}.md")
        with open(path, "w") as f:
            f.write(text.rstrip() + "\n")
        print(f"bench: recorded {os.path.relpath(path, os.getcwd())}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
