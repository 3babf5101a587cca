"""First-call latency: gelu and softmax in a new process with empty caches (cold), then again in
another new process with the caches the first one left on disk (warm start).

Each cell is the time of the first call after import and setup (tracing, compiling and one
run), measured in a subprocess (``first_call.py``); the second call's time follows in
parentheses, so the compile cost is about their difference. flowjit's kernels are cached
under ``FLOWJIT_CACHE_DIR``, torch.compile's under ``TORCHINDUCTOR_CACHE_DIR``, JAX uses
its persistent compilation cache, and TensorFlow its persistent XLA cache
(``--tf_xla_persistent_cache_directory`` in ``TF_XLA_FLAGS``); the interpreter compiles nothing and has no disk cache.
NumPy and torch eager compile nothing and have no cell here. A last row times ``import
flowjit`` (and ``import jax``, ``import tensorflow``, ``import torch``) alone in new processes.

Every child runs with Python's bytecode cache on (``PYTHONDONTWRITEBYTECODE`` removed from its
environment), and flowjit's and the bench's sources are compiled to ``__pycache__`` once before
the first child: a machine that sets ``PYTHONDONTWRITEBYTECODE=1`` would otherwise recompile
every flowjit module edited since its ``.pyc`` was written in each new process (about 30 ms
of a first call), a cost no user with a normal Python pays.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

from bench.workloads.common import COLUMNS, HEADERS, Cell, Ctx, Row, Skip, fill_ratios, fmt_time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
IMPLS = ("fj", "interp", "jax", "tf", "compile")
PACKAGE = {"fj": "flowjit", "interp": "flowjit", "jax": "jax", "tf": "tensorflow",
           "compile": "torch"}
TIMEOUT_S = 600


def bytecode_line() -> str:
    """The header line that says how the new processes treat Python's bytecode cache."""
    mine = os.environ.get("PYTHONDONTWRITEBYTECODE")
    setting = f"PYTHONDONTWRITEBYTECODE={mine} here, removed from their environment" if mine else \
        "PYTHONDONTWRITEBYTECODE unset here too"
    return (f"- New processes (first calls, imports): Python's bytecode cache on ({setting}); flowjit's "
            "and the bench's sources compiled to __pycache__ before the first one")


_compiled: list[bool] = []


def child_env() -> dict[str, str]:
    """The environment of a new bench process: the bench importable, and Python's bytecode
    cache on, with flowjit's and the bench's ``.pyc`` files up to date (compiled once per run),
    so that a child's time is not spent recompiling sources as no user's Python does."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([ROOT] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if not _compiled:
        spec = importlib.util.find_spec("flowjit")     # finds the package without importing it
        dirs = [os.path.dirname(spec.origin)] if spec and spec.origin else []
        subprocess.run([sys.executable, "-m", "compileall", "-q", *dirs, os.path.join(ROOT, "bench")],
                       env=env, capture_output=True, timeout=TIMEOUT_S)
        _compiled.append(True)
    return env


def sizes(ctx: Ctx) -> dict[str, tuple[int, ...]]:
    if ctx.quick:
        return {"gelu": (1 << 16,), "softmax": (64, 256)}
    return {"gelu": (1 << 24,), "softmax": (4096, 1024)}


def child(ctx: Ctx, impl: str, workload: str, size: tuple[int, ...], cache: str) -> dict:
    return run_child(ctx, cache, "bench.workloads.first_call", [impl, workload, ",".join(map(str, size))])


def run_child(ctx: Ctx, cache: str, module: str, args: list[str]) -> dict:
    """``python -m module *args`` in a new process whose compile caches (flowjit, TorchInductor,
    JAX, TensorFlow's XLA) live under ``cache``: the JSON object it prints last, or an
    ``error`` (with the traceback's tail) when it fails or times out."""
    env = child_env()
    env["FLOWJIT_CACHE_DIR"] = os.path.join(cache, "flowjit")
    env["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(cache, "inductor")
    env["BENCH_JAX_CACHE_DIR"] = os.path.join(cache, "jax")
    # TensorFlow's persistent XLA cache (compiled XLA programs; tracing is redone in each process)
    env["TF_XLA_FLAGS"] = " ".join(filter(None, [env.get("TF_XLA_FLAGS", ""),
                                                 f"--tf_xla_persistent_cache_directory={os.path.join(cache, 'tf')}"]))
    env["BENCH_THREADS"] = str(ctx.threads)
    cmd = [sys.executable, "-m", module, *args]
    try:
        p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {TIMEOUT_S} s"}
    for line in reversed(p.stdout.splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                break
    tail = (p.stderr.strip().splitlines() or ["no output"])[-1]
    return {"error": f"exit {p.returncode}: {tail}", "traceback": p.stderr[-4000:]}


def first_call_rows(ctx: Ctx, row_workload: str, label: str, workload: str, size: tuple[int, ...],
                    impls: tuple[str, ...] = IMPLS) -> tuple[Row, Row, list[str], dict[str, dict[str, str]]]:
    """The rows ``label, cold`` and ``label, warm disk cache``: ``workload`` at ``size`` run by
    ``first_call.py`` in a new process with empty caches, then in another with the caches the
    first one left. Returns them (ratios filled, notes empty), the import+setup times of the cold
    runs ("<column> <s> s"), and each mode's ("cold", "warm") child notes by column."""
    columns = [k for k, _ in COLUMNS if k in ctx.columns]
    headers = dict(COLUMNS)
    cold = Row(row_workload, f"{label}, cold")
    warm = Row(row_workload, f"{label}, warm disk cache")
    imports: list[str] = []
    notes: dict[str, dict[str, str]] = {"cold": {}, "warm": {}}
    for key in columns:
        if key not in impls:
            for r in (cold, warm):
                r.cells[key] = Cell(text="—", skipped=True)
            continue
        if PACKAGE[key] != "flowjit":
            try:
                ctx.module(PACKAGE[key])
            except Skip as e:
                for r in (cold, warm):
                    r.cells[key] = Cell(text=f"skipped: {e}", skipped=True)
                continue
        cache = tempfile.mkdtemp(prefix=f"bench_{key}_{workload}_")
        try:
            for r, mode in ((cold, "cold"), (warm, "warm")):
                ctx.log(f"  {r.label}: {headers[key]}: subprocess")
                res = child(ctx, key, workload, size, cache)
                if "error" in res:
                    ctx.errors.append((r.label, headers[key], res.get("traceback") or res["error"]))
                    ctx.log(f"  {r.label}: {headers[key]}: {res['error']}")
                    r.cells[key] = Cell(text=f"ERROR {res['error'][:100]}", error=res["error"])
                    continue
                r.cells[key] = Cell(seconds=res["first_s"],
                                    text=f"{fmt_time(res['first_s'], 'ms')} "
                                         f"(2nd {fmt_time(res['second_s'], 'ms')})")
                if mode == "cold":
                    imports.append(f"{headers[key]} {res['import_s']:.2f} s")
                if res.get("note"):
                    notes[mode][key] = res["note"]
        finally:
            shutil.rmtree(cache, ignore_errors=True)
    for r in (cold, warm):
        fill_ratios(r, ctx)
    return cold, warm, imports, notes


def run(ctx: Ctx) -> list[Row]:
    rows = []
    for workload, size in sizes(ctx).items():
        shape = ",".join(map(str, size))
        cold, warm, imports, notes = first_call_rows(ctx, "compile", f"first call {workload} f32[{shape}]",
                                                     workload, size)
        cold.note = "import+setup before the timed call: " + ", ".join(imports) if imports else ""
        for r, mode in ((cold, "cold"), (warm, "warm")):
            for key, note in notes[mode].items():
                r.note += ("; " if r.note else "") + f"{HEADERS[key]} {mode}: {note}"
        rows += [cold, warm]
    return rows + [import_row(ctx)]


# The import each column's first call pays in a new process (``import flowjit`` loads no
# compiler: llvmlite comes with the first compile).
IMPORTS = {"fj": "flowjit", "jax": "jax", "tf": "tensorflow", "torch": "torch"}
IMPORT_SRC = ("import sys, time; t0 = time.perf_counter(); import {0}; t = time.perf_counter() - t0; "
              "print(t, int('numba' in sys.modules))")


def import_row(ctx: Ctx) -> Row:
    """``import flowjit`` (and ``import jax``, ``import torch``) in new processes: the median
    over ``--repeat`` processes (at most 7), alternated between the modules."""
    columns = [k for k, _ in COLUMNS if k in ctx.columns]
    todo = [k for k in columns if k in IMPORTS]
    row = Row("compile", "import, new process")
    for key in columns:
        if key not in IMPORTS:
            row.cells[key] = Cell(text="—", skipped=True)
    for key in list(todo):
        if key != "fj":
            try:
                ctx.module(IMPORTS[key])
            except Skip as e:
                row.cells[key] = Cell(text=f"skipped: {e}", skipped=True)
                todo.remove(key)
    env = child_env()
    samples: dict[str, list[float]] = {k: [] for k in todo}
    numba_seen = False
    for _ in range(min(ctx.repeat, 7)):
        for key in list(samples):
            ctx.log(f"  {row.label}: import {IMPORTS[key]}")
            p = subprocess.run([sys.executable, "-c", IMPORT_SRC.format(IMPORTS[key])], cwd=ROOT, env=env,
                               capture_output=True, text=True, timeout=TIMEOUT_S)
            if p.returncode != 0:
                error = (p.stderr.strip().splitlines() or [f"exit {p.returncode}"])[-1]
                ctx.errors.append((row.label, HEADERS[key], p.stderr[-4000:] or error))
                row.cells[key] = Cell(text=f"ERROR {error[:100]}", error=error)
                del samples[key]
                continue
            seconds, numba = p.stdout.split()
            samples[key].append(float(seconds))
            numba_seen |= key == "fj" and numba == "1"
    for key, xs in samples.items():
        med = statistics.median(xs)
        row.cells[key] = Cell(seconds=med, text=f"{fmt_time(med, 'ms')} ({min(xs) * 1e3:.0f}-{max(xs) * 1e3:.0f} ms)")
    fill_ratios(row, ctx)
    if "fj" in samples:
        row.note = (f"median of {len(samples['fj'])} new processes (range in parentheses), modules alternated; "
                    f"`import flowjit` {'imports' if numba_seen else 'loads no'} numba; torch's cell is "
                    "`import torch` (torch.compile's too)")
    return row
