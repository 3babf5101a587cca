"""Ahead of time (issue 21): a function compiled by ``fj.export`` into a C library, against
the JIT and JAX, from process start to the first result, and in steady state.

The functions: an MLP's predict (784-256-256-10 ReLU layers, batch 256, the argmax of the
logits as int32 labels: the digits example's shape), gelu on f32[256,1024], and, in steady
state only, ``x + 1`` on f32[8] (what a call costs around the native code). Each is
exported once (``cpu="native"``, as the JIT compiles; the library's thread pool capped by
``FLOWJIT_NUM_THREADS``, its matmuls on NumPy's OpenBLAS with ``OPENBLAS_NUM_THREADS``: both
``--threads``), and a C program generated from the library's header is built with ``cc``.

First table: new processes, each timed from just before the parent starts it (its
``time.monotonic()``) to the child's reading of the same clock (CLOCK_MONOTONIC) with the
first result in hand; the median over ``--repeat`` processes (at most 5, columns
alternated; the range in parentheses):
- C program: reads the inputs (raw files), calls the entry point once (``scratch`` NULL);
- Python, ``fj.load_compiled``: ``import flowjit``, load the library, one call;
- the JIT (llvm, the default backend) cold: an empty ``FLOWJIT_CACHE_DIR`` (trace, compile,
  run); warm: a second process with the cache the cold one left;
- JAX jit, cold and warm (its persistent compilation cache, every entry kept).
Every child's result is checked against a float64 NumPy reference (labels: every one
whose two largest logits differ by more than 1e-4 must match). A last row gives the floor:
an empty C program, and Python importing NumPy alone.

Second table: the same library through ``fj.load_compiled`` in this process, against the
JIT (``fj.function``, llvm) and JAX, timed as every other workload (median per call after
warm-up); the C column is the generated C program calling the entry point back to back on
the same buffers (its own clock; half its samples before the Python columns, half after),
so ``load_compiled`` minus C is what the Python call adds: argument checks, a new result
array, ctypes (about 4 µs on ``x + 1``, where the JIT's dispatch is 0.4 µs), and, with
threads, whatever keeping the library's pool threads busy back to back saves the C loop.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from bench.workloads import aot_child
from bench.workloads.common import Case, Cell, Ctx, Row, check, fmt_time, run_case

CHILD = os.path.abspath(aot_child.__file__)
TIMEOUT_S = 600
MAX_PROCESSES = 5
TIE_GAP = 1e-4         # labels whose two largest float64 logits are closer than this are not checked

# (key, header) of the two tables.
FIRST_COLUMNS = (("c", "C program"), ("aot", "Python, fj.load_compiled"), ("llvm_cold", "JIT cold (llvm)"),
                 ("llvm_warm", "JIT warm disk cache"), ("jax_cold", "JAX jit cold"), ("jax_warm", "JAX jit warm cache"),
                 ("vs_jit", "load_compiled / JIT warm"), ("vs_jax", "load_compiled / JAX warm"))
STEADY_COLUMNS = (("c", "C, entry point in a loop"), ("aot", "fj.load_compiled"), ("llvm", "JIT (llvm)"),
                  ("jax", "JAX jit"), ("vs_jit", "load_compiled / JIT"), ("ctypes", "load_compiled − C"))
FIRST_TITLE = "Ahead of time: process start to first result (new processes)"
STEADY_TITLE = "Ahead of time: steady state (median per call)"


def sizes(ctx: Ctx) -> dict[str, tuple[int, ...]]:
    """Each function's size: the MLP's (batch, widths...), gelu's and add1's shapes."""
    if ctx.quick:
        return {"mlp": (64, 784, 64, 64, 10), "gelu": (64, 256), "add1": (8,)}
    return {"mlp": (256, 784, 256, 256, 10), "gelu": (256, 1024), "add1": (8,)}


def describe(name: str, size: tuple[int, ...]) -> str:
    if name == "mlp":
        return f"MLP predict {'-'.join(map(str, size[1:]))} b{size[0]}"
    return f"{'x+1' if name == 'add1' else name} f32[{','.join(map(str, size))}]"


def fmt_short(seconds: float, unit: str) -> str:
    """``fmt_time``, with nanoseconds below 0.1 µs (a C call on 8 floats) and a sign."""
    if abs(seconds) < 1e-7:
        return f"{seconds * 1e9:.1f} ns"
    return ("-" if seconds < 0 else "") + fmt_time(abs(seconds), unit)


def c_compiler() -> list[str] | None:
    """The C compiler the export links with: ``CC`` (with its flags), else cc, gcc or clang."""
    env = shlex.split(os.environ.get("CC", ""))
    if env:
        return env if shutil.which(env[0]) else None
    found = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    return [found] if found else None


# ---- the problems -----------------------------------------------------------------------------
def problem(name: str, size: tuple[int, ...]) -> tuple[np.ndarray, list[np.ndarray]]:
    """``x`` and the parameters (the MLP's ``[W1, b1, ...]``; none otherwise)."""
    from bench.workloads import defs, mlp_step
    if name == "mlp":
        params, x, _ = mlp_step.problem(size)
        return x, params
    if name == "gelu":
        return defs.inputs("gelu", size)[0], []
    return np.arange(size[0], dtype=np.float32), []


def checker(name: str, x: np.ndarray, params: list[np.ndarray]) -> Any:
    """A function of a result: None when it matches the float64 NumPy reference, else why not."""
    if name == "gelu":
        from bench.workloads import defs
        ref = defs.reference("gelu", [x])
        return lambda out: check(out, ref, 1e-4)
    if name == "add1":
        ref = x + 1
        return lambda out: check(out, ref, 0.0)
    h = x.astype(np.float64)
    n = len(params) // 2
    for i in range(n):
        h = h @ params[2 * i].astype(np.float64) + params[2 * i + 1]
        if i < n - 1:
            h = np.maximum(h, 0)
    top2 = np.sort(h, axis=1)[:, -2:]
    sure = top2[:, 1] - top2[:, 0] > TIE_GAP * max(float(np.max(np.abs(h))), 1e-30)
    labels = np.argmax(h, axis=1).astype(np.int32)

    def check_labels(out: Any) -> str | None:
        got = np.asarray(out)
        if got.shape != labels.shape or got.dtype != labels.dtype:
            return f"WRONG result {got.dtype}{list(got.shape)}, expected int32{list(labels.shape)}"
        wrong = int(np.sum((got != labels) & sure))
        return f"WRONG: {wrong} of {labels.size} labels differ from the float64 reference" if wrong else None
    return check_labels


# ---- building ---------------------------------------------------------------------------------
@dataclass
class Built:
    """A function exported into ``directory/build``, its inputs under ``directory/data`` and
    the C program ``directory/run_c`` that calls it."""

    name: str
    size: tuple[int, ...]
    directory: str
    manifest: dict[str, Any]
    function: Any               # the plain function flowjit traces
    x: np.ndarray
    params: list[np.ndarray]
    check: Any
    note: str


def c_program(manifest: dict[str, Any]) -> str:
    """A C program that reads each argument from ``DIR/data/<c_name>.bin``, calls the entry
    point once, prints ``first <CLOCK_MONOTONIC seconds>`` and writes each result to
    ``DIR/out-c-<c_name>.bin``; with ``SAMPLES TARGET_S`` it then prints SAMPLES lines
    ``sample <seconds per call>``, each over back-to-back calls for about TARGET_S seconds."""
    name, up = manifest["name"], manifest["name"].upper()

    def nbytes(side: str, c_name: str) -> str:
        return f"sizeof *{side}.{c_name} * {up}_{c_name.upper()}_SIZE"
    loads = "\n".join(f'    in.{a["c_name"]} = load(dir, "{a["c_name"]}", {nbytes("in", a["c_name"])});'
                      for a in manifest["args"])
    allocs = "\n".join(f'    out.{r["c_name"]} = malloc({nbytes("out", r["c_name"])} + 1);'
                       for r in manifest["results"])
    saves = "\n".join(f'    save(dir, "{r["c_name"]}", out.{r["c_name"]}, {nbytes("out", r["c_name"])});'
                      for r in manifest["results"])
    return f"""/* Generated by bench/workloads/aot.py: calls lib{name}.so as a C program would. */
#define _POSIX_C_SOURCE 200809L
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "{name}.h"

static double now(void) {{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}}

static void *load(const char *dir, const char *name, size_t bytes) {{
    char path[4096];
    snprintf(path, sizeof path, "%s/data/%s.bin", dir, name);
    FILE *f = fopen(path, "rb");
    void *data = malloc(bytes + 1);
    if (!f || !data || fread(data, 1, bytes, f) != bytes) {{
        fprintf(stderr, "cannot read %zu bytes from %s\\n", bytes, path);
        exit(2);
    }}
    fclose(f);
    return data;
}}

static void save(const char *dir, const char *name, const void *data, size_t bytes) {{
    char path[4096];
    snprintf(path, sizeof path, "%s/out-c-%s.bin", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, bytes, f) != bytes || fclose(f)) {{
        fprintf(stderr, "cannot write %s\\n", path);
        exit(2);
    }}
}}

int main(int argc, char **argv) {{
    if (argc != 2 && argc != 4) {{
        fprintf(stderr, "usage: %s DIR [SAMPLES TARGET_S]\\n", argv[0]);
        return 2;
    }}
    const char *dir = argv[1];
    {name}_args in;
    {name}_results out;
{loads}
{allocs}
    int rc = {name}(&in, &out, NULL);
    double first = now();
    if (rc != {up}_OK) {{
        fprintf(stderr, "{name} failed with code %d\\n", rc);
        return 1;
    }}
    printf("first %.9f\\n", first);
    fflush(stdout);
{saves}
    if (argc == 4) {{
        int samples = atoi(argv[2]);
        double target = atof(argv[3]), t0 = now();
        {name}(&in, &out, NULL);
        double one = now() - t0;
        long inner = one > 0 ? (long)(target / one) : 100000;
        inner = inner < 1 ? 1 : inner > 100000 ? 100000 : inner;
        for (int s = 0; s < samples; s++) {{
            t0 = now();
            for (long i = 0; i < inner; i++) rc |= {name}(&in, &out, NULL);
            printf("sample %.9e\\n", (now() - t0) / (double)inner);
        }}
        if (rc != {up}_OK) return 1;
    }}
    return 0;
}}
"""


def build(ctx: Ctx, name: str, size: tuple[int, ...], root: str, cc: list[str]) -> Built:
    """Export ``name`` at ``size`` into ``root/name``, write its inputs, build its C program."""
    import flowjit as fj
    directory = os.path.join(root, name)
    data = os.path.join(directory, "data")
    os.makedirs(data)
    x, params = problem(name, size)
    np.save(os.path.join(data, "x.npy"), x)
    for i, p in enumerate(params):
        np.save(os.path.join(data, f"param{i}.npy"), p)
    function = aot_child.flowjit_function(name, params)
    t0 = time.perf_counter()
    exported = fj.export(function, x, path=os.path.join(directory, "build"), cpu="native")
    export_s = time.perf_counter() - t0
    with open(exported.manifest) as f:
        manifest = json.load(f)
    saved: dict[str, np.ndarray] = {}
    if exported.weights is not None:
        import safetensors.numpy
        saved = safetensors.numpy.load_file(str(exported.weights))
    for a in manifest["args"]:
        value = x if a["kind"] == "argument" else saved[a["name"]]
        np.ascontiguousarray(value).tofile(os.path.join(data, f"{a['c_name']}.bin"))
    source = os.path.join(directory, "run_c.c")
    with open(source, "w") as f:
        f.write(c_program(manifest))
    lib_dir = os.path.dirname(exported.library)
    t0 = time.perf_counter()
    p = subprocess.run([*cc, "-O2", "-std=c11", "-Wall", "-Werror", f"-I{lib_dir}", "-o",
                        os.path.join(directory, "run_c"), source, f"-L{lib_dir}", f"-l{manifest['name']}",
                        f"-Wl,-rpath,{lib_dir}"], capture_output=True, text=True, timeout=TIMEOUT_S)
    if p.returncode != 0:
        raise RuntimeError(f"cc failed on the bench's C program for {name}: {p.stderr.strip()[-2000:]}")
    cc_s = time.perf_counter() - t0
    note = (f"fj.export {export_s * 1e3:.0f} ms, cc of the C program {cc_s * 1e3:.0f} ms; "
            f"library {os.path.getsize(exported.library) / 1024:.0f} KiB for {manifest['cpu']['name']}")
    return Built(name, size, directory, manifest, function, x, params, checker(name, x, params), note)


# ---- new processes ----------------------------------------------------------------------------
def spawn(cmd: list[str], env: dict[str, str]) -> dict[str, Any]:
    """Start ``cmd``; the seconds from just before its start to its ``first`` reading (and
    ``imported``, for a Python child), or ``error``."""
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {TIMEOUT_S} s"}
    readings: dict[str, Any] = {}
    for line in p.stdout.splitlines():
        if line.startswith("{"):
            readings.update(json.loads(line))
        elif line.startswith("first "):
            readings["first"] = float(line.split()[1])
        elif line.startswith("sample "):
            readings.setdefault("samples", []).append(float(line.split()[1]))
    if p.returncode != 0 or "first" not in readings:
        tail = (p.stderr.strip().splitlines() or [f"exit {p.returncode}, no output"])[-1]
        return {"error": f"exit {p.returncode}: {tail}", "traceback": p.stderr[-4000:]}
    out = {"first_s": readings["first"] - t0}
    if "imported" in readings:
        out["import_s"] = readings["imported"] - t0
    if "samples" in readings:
        out["samples"] = readings["samples"]
    return out


def result_of(built: Built, key: str) -> np.ndarray:
    """The result a child wrote (the C program's raw, the others' ``.npy``)."""
    if key == "c":
        r = built.manifest["results"][0]
        path = os.path.join(built.directory, f"out-c-{r['c_name']}.bin")
        return np.fromfile(path, dtype=np.dtype(r["dtype"])).reshape(r["shape"])
    return np.load(os.path.join(built.directory, f"out-{key.split('_')[0]}.npy"))


def first_result_rows(ctx: Ctx, builds: list[Built], root: str) -> list[Row]:
    """One row per function: each column's processes, alternated, ``--repeat`` of each (at
    most 5); then the floor row."""
    from bench.workloads.compile import child_env
    keys = ["c", "aot"]
    if "fj" in ctx.columns:
        keys += ["llvm_cold", "llvm_warm"]
    has_jax = "jax" in ctx.columns and importlib.util.find_spec("jax") is not None
    if has_jax:
        keys += ["jax_cold", "jax_warm"]
    skipped = {"jax_cold", "jax_warm"} if "jax" in ctx.columns and not has_jax else set()
    base = child_env()
    base["BENCH_THREADS"] = str(ctx.threads)
    processes = max(1, min(ctx.repeat, MAX_PROCESSES))
    headers = dict(FIRST_COLUMNS)
    rows = []
    for built in builds:
        row = Row("aot", f"first result, {describe(built.name, built.size)}")
        row.cells.update({k: Cell(text="skipped: jax not installed", skipped=True) for k in skipped})
        samples: dict[str, list[float]] = {k: [] for k in keys}
        imports: dict[str, list[float]] = {}
        left_in_cache: list[int] = []
        for _ in range(processes):
            caches = {k: tempfile.mkdtemp(prefix=f"bench_aot_{k}_", dir=root) for k in ("aot", "llvm", "jax")}
            for key in keys:
                if key not in samples:        # failed before
                    continue
                env = dict(base, FLOWJIT_CACHE_DIR=caches["llvm" if key.startswith("llvm") else "aot"],
                           BENCH_JAX_CACHE_DIR=caches["jax"])
                impl = key.split("_")[0]
                cmd = ([os.path.join(built.directory, "run_c"), built.directory] if key == "c"
                       else [sys.executable, CHILD, impl, built.name, built.directory])
                ctx.log(f"  {row.label}: {headers[key]}: new process")
                res = spawn(cmd, env)
                wrong = None if "error" in res else built.check(result_of(built, key))
                if "error" in res or wrong:
                    error = res.get("error") or wrong
                    ctx.errors.append((row.label, headers[key], res.get("traceback") or error))
                    ctx.log(f"  {row.label}: {headers[key]}: {error}")
                    row.cells[key] = Cell(text=f"ERROR {error[:100]}", error=error)
                    del samples[key]
                    continue
                samples[key].append(res["first_s"])
                if "import_s" in res:
                    imports.setdefault(key, []).append(res["import_s"])
            left_in_cache.append(sum(len(files) for _, _, files in os.walk(caches["aot"])))
            for path in caches.values():
                shutil.rmtree(path, ignore_errors=True)
        for key, xs in samples.items():
            med = statistics.median(xs)
            text = fmt_time(med, "ms")
            if len(xs) > 1:
                text += f" ({min(xs) * 1e3:.3g}-{max(xs) * 1e3:.3g} ms)"
            row.cells[key] = Cell(seconds=med, text=text)
        for key, other in (("vs_jit", "llvm_warm"), ("vs_jax", "jax_warm")):
            a, b = row.cells.get("aot"), row.cells.get(other)
            if a is not None and a.ok and b is not None and b.ok:
                row.cells[key] = Cell(text=f"{a.seconds / b.seconds:.2f}x")
        split = "; ".join(f"{headers[k]}: imports done at {statistics.median(v) * 1e3:.0f} ms"
                          for k, v in imports.items())
        row.note = (f"median of {processes} process(es) per column, columns alternated; {split}; "
                    f"files fj.load_compiled and the C program left in an empty FLOWJIT_CACHE_DIR: "
                    f"{max(left_in_cache, default=0)}; {built.note}")
        rows.append(row)
    rows.append(floor_row(ctx, builds[0], base, processes))
    return rows


def floor_row(ctx: Ctx, built: Built, env: dict[str, str], processes: int) -> Row:
    """The cost of starting a process at all: a C program that reads the clock and exits,
    Python importing NumPy and nothing else (``aot_child.py numpy``)."""
    row = Row("aot", "floor: start a process, print the clock")
    source = os.path.join(built.directory, "empty.c")
    with open(source, "w") as f:
        f.write("#define _POSIX_C_SOURCE 200809L\n#include <stdio.h>\n#include <time.h>\n"
                "int main(void) {\n    struct timespec t;\n    clock_gettime(CLOCK_MONOTONIC, &t);\n"
                '    printf("first %.9f\\n", (double)t.tv_sec + 1e-9 * (double)t.tv_nsec);\n    return 0;\n}\n')
    exe = os.path.join(built.directory, "empty")
    cc = c_compiler() or ["cc"]
    p = subprocess.run([*cc, "-O2", "-o", exe, source], capture_output=True, text=True, timeout=TIMEOUT_S)
    cmds = {"aot": [sys.executable, CHILD, "numpy", built.name, built.directory]}
    if p.returncode == 0:
        cmds["c"] = [exe]
    samples: dict[str, list[float]] = {k: [] for k in cmds}
    for _ in range(processes):
        for key, cmd in cmds.items():
            res = spawn(cmd, env)
            if "error" not in res:
                samples[key].append(res["first_s"])
    for key, xs in samples.items():
        if xs:
            row.cells[key] = Cell(seconds=statistics.median(xs), text=fmt_time(statistics.median(xs), "ms"))
    row.note = "C: an empty C program; Python: `python aot_child.py numpy` (the interpreter, site, `import numpy`)"
    return row


# ---- steady state -----------------------------------------------------------------------------
def steady_row(ctx: Ctx, built: Built) -> Row:
    """The library through ``fj.load_compiled`` against the JIT and JAX in this process, and
    the C program's own loop."""
    import flowjit as fj
    x, params = built.x, built.params

    def aot():
        f = fj.load_compiled(os.path.join(built.directory, "build"))
        return lambda: f(x)

    def jit():
        g = fj.function(built.function, backend="llvm")
        return lambda: g(x)

    def jax_call():
        jax = ctx.module("jax")
        g = aot_child.jax_function(jax, built.name, params)
        xd = jax.device_put(x)
        return lambda: g(xd).block_until_ready()

    builders: dict[str, Any] = {"aot": aot}
    if "fj" in ctx.columns:
        builders["llvm"] = jit
    if "jax" in ctx.columns:
        builders["jax"] = jax_call
    unit = "us" if built.name == "add1" else "ms"
    note = ("each Python call checks its arguments, allocates its result and crosses ctypes; the JIT's "
            "dispatch is one dict lookup" if built.name == "add1" else
            "C: calls back to back on the same buffers, so the library's pool threads are still spinning "
            "when the next call comes (a gap of a few µs between calls, a Python call's own cost, lets them "
            "sleep, and the next call wakes them); the Python columns allocate a result per call")
    case = Case("aot", f"steady, {describe(built.name, built.size)}", builders, unit=unit, note=note)
    timed = tuple((k, h) for k, h in STEADY_COLUMNS if k in builders)
    # The C loop runs before and after the Python columns (half its samples each), so that a
    # busy spell of the shared machine lands on the C column and the others alike.
    cmd = [os.path.join(built.directory, "run_c"), built.directory, str(max(1, (ctx.repeat + 1) // 2)),
           str(0.02 if ctx.quick else 0.05)]
    c_runs = [spawn(cmd, dict(os.environ))]
    row = _checked(ctx, case, built, timed)
    ctx.log(f"  {row.label}: C program loop")
    c_runs.append(spawn(cmd, dict(os.environ)))
    failed = [r for r in c_runs if "error" in r or not r.get("samples")]
    if failed:
        error = failed[0].get("error", "no samples")
        ctx.errors.append((row.label, "C", failed[0].get("traceback") or error))
        c = Cell(text=f"ERROR {error[:100]}", error=error)
    else:
        xs = [t for r in c_runs for t in r["samples"]]
        med = statistics.median(xs)
        q = statistics.quantiles(xs, n=4) if len(xs) >= 2 else [med, med, med]
        c = Cell(seconds=med, iqr=(q[2] - q[0]) / med if med > 0 else 0.0)
        c.text = fmt_short(med, unit) + (f" ±{100 * c.iqr:.0f}%" if len(xs) >= 3 else "")
    row.cells["c"] = c
    a, j = row.cells.get("aot"), row.cells.get("llvm")
    if a is not None and a.ok and j is not None and j.ok:
        row.cells["vs_jit"] = Cell(text=f"{a.seconds / j.seconds:.2f}x")
    if a is not None and a.ok and c.ok:
        row.cells["ctypes"] = Cell(text=fmt_short(a.seconds - c.seconds, unit))
    return row


def _checked(ctx: Ctx, case: Case, built: Built, columns: tuple[tuple[str, str], ...]) -> Row:
    """``run_case`` with each column's first result checked by ``built.check`` (the labels'
    check is not a tolerance against one array, which is all ``Case.reference`` holds)."""
    def checked(builder: Any) -> Any:
        def build():
            thunk = builder()
            wrong = built.check(np.asarray(thunk()))
            if wrong:
                raise ValueError(wrong)
            return thunk
        return build
    case.builders = {k: checked(b) for k, b in case.builders.items()}
    return run_case(case, ctx, columns=columns)


# ---- the workload -----------------------------------------------------------------------------
def run(ctx: Ctx) -> list[Row]:
    cc = c_compiler()
    if cc is None:
        return [Row("aot", "aot", note="skipped: no C compiler (cc, gcc or clang; or set CC): fj.export links "
                                       "the library with it")]
    root = tempfile.mkdtemp(prefix="bench_aot_")
    try:
        builds = []
        for name, size in sizes(ctx).items():
            ctx.log(f"  aot: export {describe(name, size)}")
            builds.append(build(ctx, name, size, root, cc))
        rows = first_result_rows(ctx, [b for b in builds if b.name != "add1"], root)
        return rows + [steady_row(ctx, b) for b in builds]
    finally:
        shutil.rmtree(root, ignore_errors=True)


def render(ctx: Ctx, rows: list[Row]) -> list[str]:
    """The workload's two tables (called by ``bench/run.py``)."""
    from bench.run import table
    lines: list[str] = []
    for title, columns, prefix in ((FIRST_TITLE, FIRST_COLUMNS, ("first", "floor")),
                                   (STEADY_TITLE, STEADY_COLUMNS, ("steady",))):
        mine = [r for r in rows if r.label.startswith(prefix)]
        if not mine:
            continue
        lines += [f"### {title}", ""]
        lines += table(["workload"] + [h for _, h in columns],
                       [[r.label] + [r.cells[k].text if k in r.cells else "—" for k, _ in columns] for r in mine])
        lines.append("")
    return lines
