"""The model zoo (``bench/workloads/zoo.py``: MLP, CNN with batch norm and pooling, a pre-norm
transformer block, an embedding bag, an LSTM over scan), each as inference and as one Adam
training step, in flowjit against JAX jit, TensorFlow (XLA), torch eager and torch.compile.

Every library runs the same model body (zoo.py writes each model once against a numpy-like
namespace and a small adapter table). Six tables:

- steady state: the median time per call after warm-up, the columns alternated in rounds
  (``common.run_case``) so that a noisy neighbour touches every library alike; each
  library's first result is checked against flowjit's NumPy interpreter (inference: the
  logits; training: the first step's loss). "native" says whether flowjit ran the whole
  function as ONE native program, or names what kept it off that path (the executable's
  ``native_reason``, as ``fj.explain`` reports it).
- the same rows with two busy processes (``python -c "while True: pass"``, pinned to the
  bench's cores) started by the bench, and loaded/idle for each library: each row's
  loaded run right after its idle one, so that both see the machine in the same minutes.
- the first call in a new process (``python -m bench.workloads.models IMPL MODEL MODE``):
  cold (empty caches: ``FLOWJIT_CACHE_DIR``, JAX's persistent compilation cache,
  ``TORCHINDUCTOR_CACHE_DIR`` in a new temporary directory), then warm (another new process
  with the caches the cold one left), in three rounds that alternate the libraries, each
  cell the median round's (one round with ``--quick``): a single new process moved with the
  machine by 20% and more. Each ratio of these tables (flowjit/JAX, loaded/idle) is the
  median of the rounds' own ratios (``paired_ratio``): a round's processes run seconds
  apart, and the host's slow spells (a minute or more, both libraries 20-40% slower) then
  touch both sides of a ratio or neither, where the ratio of two medians could set one
  library's slow spell against the other's quiet rounds. The machine code of flowjit's own
  runtime beside the package (the native pool, the GEMMs over it, the programs' entry
  points: ``objcache.runtime_directory()``), compiled once per installation, stays, as
  Python's bytecode and jaxlib's prebuilt runtime do.
- the steady state of the warm new process, a library alone in its process: the median
  per call after the first two, the minor page faults per call and the CPU time per call
  (every thread's: at the same wall time, more CPU is more work or spinning, not waiting). The first table runs
  every library in one process, where one library's large frees raise glibc's mmap
  threshold for the others; alone, flowjit's mid-sized results once page-faulted every call.
- the same beside two busy processes: a third new process with the warm caches, started
  while two ``while True`` processes spin on the same cores (started for each round, right
  after its idle processes), and loaded/idle over the table before. The loaded table runs
  every library in the bench's one process, where the other libraries' thread pools share
  the cores' time too; here a library has the process to itself, as a user's job does.
- peak memory: the peak resident set (``VmHWM``; native memory included, which tracemalloc
  does not see) of the warm child after its first calls, and in parentheses
  what the calls added over the peak after import and setup. Not ``ru_maxrss``: Linux hands
  a child the forking parent's peak across fork and exec.

``--quick``: the zoo's small sizes, and the new-process tables for the MLP's inference only.
TensorFlow has no adapter in zoo.py: its column says so (or that it is not installed).
"""

from __future__ import annotations

import copy
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from bench.workloads import zoo
from bench.workloads.common import Case, Cell, Ctx, Row, Skip, fmt_time, run_case, short_error

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
IMPLS = (("fj", "flowjit"), ("jax", "JAX jit"), ("tf", "TensorFlow (XLA)"), ("torch", "torch eager"),
         ("compile", "torch.compile"))
HEAD = dict(IMPLS)
MODES = ("inference", "train")
CHILD_CALLS = 3          # calls after the first two in a child, before its peak RSS is read
NEW_PROCESS_ROUNDS = (1, 3)   # rounds of new processes (quick, full): each cell is the median round's
ALONE_S = (0.1, 0.4)     # and calls for this long (quick, full): the steady state of a process of its own
TIMEOUT_S = 900
TITLES = {"steady": "Model zoo: steady state (median per call, no load added)",
          "loaded": "Model zoo: steady state with two busy processes on the same cores",
          "first": "Model zoo: first call in a new process (cold: empty caches; warm: the caches the cold one left; "
                   "flowjit/JAX: the median of the rounds' ratios)",
          "alone": "Model zoo: steady state in a process of its own (the warm new process: median per call "
                   "after the first two; in parentheses: minor page faults per call; then the process's CPU "
                   "time per call, every thread, its mean over the calls; flowjit/JAX: the median of the "
                   "rounds' ratios)",
          "alone_loaded": "Model zoo: steady state in a process of its own beside two busy processes (a third "
                          "new process with the warm caches, started with two `while True` processes on the same "
                          "cores right after each round's idle ones: median per call after the first two, and its "
                          "CPU time per call; loaded/idle over the table above, the median of the rounds' ratios)",
          "memory": "Model zoo: peak memory of a new process (peak RSS, VmHWM, after the first calls; in "
                    "parentheses: over the peak after import and setup)"}


@dataclass
class ModelRow(Row):
    table: str = ""                   # a key of TITLES
    model: str = ""
    mode: str = ""
    native: str = ""                  # flowjit: "yes", or what keeps it off the native path
    fj_jax: list[str] = field(default_factory=list)   # flowjit/JAX ratio cells of this table


# ---- one library, one model, one mode ----------------------------------------------------------
# A setup returns (call, reset, native): call() runs once and returns a finished result (the
# logits, or a training step's loss), reset() puts the initial parameters back (training),
# native() is flowjit's "native" cell ("" for the others).
Setup = tuple[Callable[[], Any], Callable[[], None], Callable[[], str]]


def _native(g: Any, args: tuple) -> str:
    """'yes' when ``g`` (an fj.function) runs on ``args`` as one native program, else why not."""
    try:
        exe = g._lookup(args, {})[0].executable
    except Exception as e:              # an internal that moved: say so, do not fail the row
        return f"unknown ({short_error(e)})"
    if getattr(exe, "_program", None) is not None:
        return "yes"
    reason = getattr(exe, "native_reason", "") or f"no ({type(exe).__name__})"
    return f"no: {reason}"


def setup(impl: str, model: str, mode: str, quick: bool, module: Any = None) -> Setup:
    params, (x, y) = zoo.init(model, quick), zoo.batch(model, quick)
    opt = zoo.adam_state(params)
    train = mode == "train"
    if impl == "fj":
        import flowjit as fj
        L = zoo.lib("flowjit")
        # The training step donates the parameters and the Adam state, as JAX's does below.
        g = fj.function(zoo.train_step(L, model), donate_argnums=(0, 1)) if train else \
            fj.function(zoo.predict(L, model))
        if not train:
            return (lambda: g(params, x)), (lambda: None), (lambda: _native(g, (params, x)))
        state: dict[str, Any] = {}

        def reset() -> None:   # copies: a step overwrites the arrays it is given
            state["p"], state["s"] = copy.deepcopy(params), copy.deepcopy(opt)

        def call() -> Any:
            state["p"], state["s"], loss = g(state["p"], state["s"], x, y)
            return loss
        reset()
        return call, reset, lambda: _native(g, (state["p"], state["s"], x, y))
    if impl == "jax":
        jax = module
        L = zoo.lib("jax")
        dx, dy = jax.device_put(x), jax.device_put(y)
        if not train:
            f = jax.jit(zoo.predict(L, model))
            dp = jax.device_put(params)
            return (lambda: f(dp, dx).block_until_ready()), (lambda: None), (lambda: "")
        f = jax.jit(zoo.train_step(L, model), donate_argnums=(0, 1))
        state = {}

        def reset() -> None:
            state["p"], state["s"] = jax.device_put(params), jax.device_put(opt)
            jax.block_until_ready((state["p"], state["s"]))

        def call() -> Any:
            state["p"], state["s"], loss = f(state["p"], state["s"], dx, dy)
            return loss.block_until_ready()
        reset()
        return call, reset, lambda: ""
    if impl in ("torch", "compile"):
        torch = module
        L = zoo.lib("torch")
        tx, ty = torch.from_numpy(x), torch.from_numpy(y)
        fn = zoo.train_step(L, model) if train else zoo.predict(L, model)
        f = torch.compile(fn) if impl == "compile" else fn
        if not train:
            tp = {k: torch.from_numpy(v) for k, v in params.items()}

            def infer() -> Any:
                with torch.no_grad():
                    return f(tp, tx)
            return infer, (lambda: None), (lambda: "")
        state = {}

        def reset() -> None:
            state["p"] = {k: torch.from_numpy(v.copy()) for k, v in params.items()}
            state["s"] = {"t": torch.tensor(0.0), "m": {k: torch.zeros_like(v) for k, v in state["p"].items()},
                          "v": {k: torch.zeros_like(v) for k, v in state["p"].items()}}

        def call() -> Any:
            state["p"], state["s"], loss = f(state["p"], state["s"], tx, ty)
            return loss.detach()
        reset()
        return call, reset, lambda: ""
    if impl == "tf":
        raise Skip("no TensorFlow adapter in zoo.py")
    raise ValueError(f"unknown implementation {impl!r}")


PACKAGE = {"jax": "jax", "tf": "tensorflow", "torch": "torch", "compile": "torch"}


def reference(model: str, quick: bool) -> tuple[np.ndarray, np.ndarray]:
    """flowjit's NumPy interpreter on the model: the logits (inference's reference) and the
    first training step's loss, the cross entropy of those logits computed in float64."""
    import flowjit as fj
    params, (x, y) = zoo.init(model, quick), zoo.batch(model, quick)
    logits = np.asarray(fj.function(zoo.predict(zoo.lib("flowjit"), model), backend="interpreter")(params, x))
    z = logits.astype(np.float64)
    z = z - z.max(axis=-1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(axis=-1, keepdims=True))
    return logits, np.asarray(-np.mean(logp[np.arange(len(y)), y]), np.float32)


# ---- the child: first calls and memory in a new process ----------------------------------------
def _peak_rss() -> int:
    """This process's peak resident set, bytes: ``VmHWM``, the high-water mark of its own
    address space. ``getrusage(RUSAGE_SELF).ru_maxrss`` is not: Linux carries the forking
    parent's peak across fork and exec into it (a child of a 470 MiB bench reports at least
    470 MiB). ``ru_maxrss`` where there is no /proc."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024   # KiB on Linux


def child_main(argv: list[str]) -> int:
    """``IMPL MODEL MODE quick|full``: import, set up, first call, second call, then calls for
    ALONE_S (at least CHILD_CALLS); one JSON line with the times (the later calls' median),
    their page faults per call, the peak RSS after setup and at the end, flowjit's native cell."""
    impl, model, mode, size = argv
    try:
        t0 = time.perf_counter()
        module = None
        if impl == "jax":
            from bench.workloads.first_call import _jax
            module = _jax()
        elif impl in ("torch", "compile"):
            from bench.workloads.first_call import _torch
            module = _torch()
        call, _, native = setup(impl, model, mode, size == "quick", module)
        import_s = time.perf_counter() - t0
        rss_setup = _peak_rss()
        t0 = time.perf_counter()
        call()
        first_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        call()
        second_s = time.perf_counter() - t0
        # The steady state of a process running one library alone: what the steady-state
        # table, every library in one process, cannot show (one library's large frees raise
        # glibc's mmap threshold for all: flowjit's mid-sized results page-faulted every call
        # alone, 2x an MLP step's time, and not in the bench's own process).
        times: list[float] = []
        before = resource.getrusage(resource.RUSAGE_SELF)
        until = time.perf_counter() + ALONE_S[size == "full"]
        while len(times) < CHILD_CALLS or time.perf_counter() < until:
            t0 = time.perf_counter()
            call()
            times.append(time.perf_counter() - t0)
        after = resource.getrusage(resource.RUSAGE_SELF)
        faults = after.ru_minflt - before.ru_minflt
        # Every thread's CPU time a call: a call that took longer beside busy processes but
        # no more CPU waited for a core; one that took more CPU did more work (or spun).
        cpu = (after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime) / len(times)
        out = {"import_s": import_s, "first_s": first_s, "second_s": second_s, "rss_setup": rss_setup,
               "rss_peak": _peak_rss(), "native": native(), "alone_s": float(np.median(times)),
               "faults": faults / len(times), "cpu_s": cpu}
        if impl == "fj":
            import flowjit as fj
            out["cache"] = fj.cache_stats()
        print(json.dumps(out))
        return 0
    except Exception as e:
        print(json.dumps({"error": short_error(e), "traceback": traceback.format_exc()}))
        return 1


def _cpu(res: dict) -> str:
    """A child's CPU time a call, as its cell shows it after the time (none from a child
    that did not report it)."""
    return f" · {fmt_time(res['cpu_s'], 'ms')} CPU" if "cpu_s" in res else ""


def child(ctx: Ctx, impl: str, model: str, mode: str, cache: str) -> dict:
    from bench.workloads.compile import run_child
    return run_child(ctx, cache, "bench.workloads.models", [impl, model, mode, "quick" if ctx.quick else "full"])


# ---- busy processes ----------------------------------------------------------------------------
class Busy:
    """``n`` processes spinning ``while True: pass`` on this process's cores, until ``stop()``."""

    def __init__(self, n: int = 2):
        try:
            cores = sorted(os.sched_getaffinity(0))
        except AttributeError:
            cores = []
        self.procs = []
        try:
            for _ in range(n):
                p = subprocess.Popen([sys.executable, "-c", "while True: pass"])
                self.procs.append(p)
                if cores:
                    try:
                        os.sched_setaffinity(p.pid, cores)
                    except OSError:
                        pass
        except BaseException:
            self.stop()   # the ones already spinning
            raise
        time.sleep(0.2)

    def stop(self) -> None:
        for p in self.procs:
            p.kill()
        for p in self.procs:
            p.wait(timeout=30)
        self.procs = []


# ---- the workload ------------------------------------------------------------------------------
def columns(ctx: Ctx) -> tuple[tuple[str, str], ...]:
    return tuple((k, h) for k, h in IMPLS if k in ctx.columns)


def _builders(ctx: Ctx, model: str, mode: str, natives: dict) -> dict[str, Callable[[], Callable[[], Any]]]:
    """Each column's builder; a built setup is kept, so the loaded rounds reuse the compiled
    functions (each build after the first resets the training state and returns the same call)."""
    built: dict[str, Setup] = {}

    def builder(impl: str) -> Callable[[], Callable[[], Any]]:
        def build() -> Callable[[], Any]:
            if impl not in built:
                module = ctx.module(PACKAGE[impl]) if impl in PACKAGE else None
                call, reset, native = setup(impl, model, mode, ctx.quick, module)
                call()                                   # compiles
                t0 = time.perf_counter()
                for _ in range(5):                       # steady state can take more than one call
                    call()
                    if time.perf_counter() - t0 > 1.0:
                        break
                if impl == "fj":
                    natives[(model, mode)] = native()
                built[impl] = (call, reset, native)
            call, reset, _ = built[impl]
            reset()                                      # the harness's first call is step 1 again
            return call
        return build
    return {k: builder(k) for k, _ in columns(ctx)}


def _steady(ctx: Ctx, table: str, model: str, mode: str, builders: dict, ref: np.ndarray | None) -> ModelRow:
    label = f"{zoo.describe(model, ctx.quick)}, {mode}"
    tol = 1e-3 if mode == "inference" else 1e-4
    case = Case("models", label, builders, reference=ref, tol=tol, unit="ms")
    base = run_case(case, ctx, target_s=0.02 if ctx.quick else 0.1, columns=columns(ctx))
    for cell in base.cells.values():
        if cell.ok and cell.cpus is not None:
            cell.text += f" · {cell.cpus:.2f} CPU"
    return ModelRow("models", label, cells=base.cells, table=table, model=model, mode=mode)


def _ratio(a: Cell | None, b: Cell | None) -> str:
    if a is None or b is None or not a.ok or not b.ok:
        return "—"
    return f"{a.seconds / b.seconds:.2f}x"


def run(ctx: Ctx) -> list[Row]:
    quick = ctx.quick
    pairs = [(m, mode) for m in zoo.MODELS for mode in MODES]
    natives: dict[tuple[str, str], str] = {}
    builders = {pair: _builders(ctx, *pair, natives) for pair in pairs}
    refs: dict[tuple[str, str], np.ndarray | None] = {}
    for model in zoo.MODELS:
        try:
            refs[(model, "inference")], refs[(model, "train")] = reference(model, quick)
        except Exception:
            ctx.errors.append((model, "reference (flowjit interpreter)", traceback.format_exc()))
            refs[(model, "inference")] = refs[(model, "train")] = None
    rows: list[ModelRow] = []
    for pair in pairs:
        # Each row idle, then at once beside two busy processes: the machine's speed drifts
        # over minutes (a shared host), and loaded/idle compares the same minutes. With
        # every idle row first, an LSTM's 1.65 ms idle stood against its loaded time in a
        # slower phase, where it took 2.35-2.58 ms idle.
        ctx.log(f"bench: models, {pair[0]} {pair[1]}")
        idle = _steady(ctx, "steady", *pair, builders[pair], refs[pair])
        idle.native = natives.get(pair, "—")
        idle.fj_jax = [_ratio(idle.cells.get("fj"), idle.cells.get("jax"))]
        rows.append(idle)
        busy = Busy(2)
        try:
            ctx.log(f"bench: models, {pair[0]} {pair[1]}, two busy processes")
            row = _steady(ctx, "loaded", *pair, builders[pair], refs[pair])
        finally:
            busy.stop()
        for key, cell in list(row.cells.items()):
            row.cells[key + "/idle"] = Cell(text=_ratio(cell, idle.cells.get(key)))
        row.fj_jax = [_ratio(row.cells.get("fj"), row.cells.get("jax"))]
        rows.append(row)
    del builders
    rows += new_process_rows(ctx, [pairs[0]] if quick else pairs)
    return rows


def _middle(runs: list[dict], key: str) -> dict:
    """The run whose ``key`` is the median of ``runs`` (the upper middle of an even count)."""
    return sorted(runs, key=lambda r: r[key])[len(runs) // 2]


def paired_ratio(a: dict[int, dict], b: dict[int, dict], key: str) -> str:
    """The median over the rounds both ran of ``a[round][key] / b[round][key]``: two
    processes of one round ran seconds apart, where the machine's slow spells (a minute or
    more: the host's other load on the vCPUs' cores) touched both or neither; the cells'
    medians come from rounds apart, so their ratio can pit a slow spell against a quiet one.
    "—" when no round has both."""
    rounds = sorted(set(a) & set(b))
    ratios = [a[r][key] / b[r][key] for r in rounds if b[r][key] > 0]
    if not ratios:
        return "—"
    return f"{float(np.median(ratios)):.2f}x"


def new_process_rows(ctx: Ctx, pairs: list[tuple[str, str]]) -> list[ModelRow]:
    """The first-call, process-of-its-own and memory tables: per library a cold and a warm
    child (torch eager compiles nothing: one child), each pair in a new temporary cache
    directory, then, beside two busy processes started for it, a warm child per library, for
    NEW_PROCESS_ROUNDS rounds that alternate the libraries. Each cell is the median round's;
    each ratio (flowjit/JAX, loaded/idle) the median of the rounds' own (``paired_ratio``)."""
    first_rows: list[ModelRow] = []
    alone_rows: list[ModelRow] = []
    memory_rows: list[ModelRow] = []
    rounds = NEW_PROCESS_ROUNDS[not ctx.quick]
    for model, mode in pairs:
        label = f"{zoo.describe(model, ctx.quick)}, {mode}"
        first = ModelRow("models", label, table="first", model=model, mode=mode)
        memory = ModelRow("models", label, table="memory", model=model, mode=mode)
        alone = ModelRow("models", label, table="alone", model=model, mode=mode)
        # Each library beside two busy processes with no other library's threads in its process:
        # the loaded table runs every library in the bench's one process, where JAX's and
        # torch's thread pools run too (idle or spinning) and share the cores' time.
        loaded = ModelRow("models", label, table="alone_loaded", model=model, mode=mode)
        runnable: list[tuple[str, str]] = []
        for impl, head in columns(ctx):
            try:
                if impl in PACKAGE:
                    ctx.module(PACKAGE[impl])
                if impl == "tf":
                    raise Skip("no TensorFlow adapter in zoo.py")
                runnable.append((impl, head))
            except Skip as e:
                for r in (first, alone, loaded, memory):
                    r.cells[impl] = Cell(text=f"skipped: {e}", skipped=True)
        # (library, which) -> round -> the child's results
        runs: dict[tuple[str, str], dict[int, dict]] = {}
        caches: list[str] = []

        def run(impl: str, head: str, which: str, cache: str, round_: int) -> None:
            ctx.log(f"  {label}: {head}: new process, {which}")
            res = child(ctx, impl, model, mode, cache)
            if "error" in res:
                ctx.errors.append((label, f"{head}, new process ({which})", res.get("traceback") or res["error"]))
                target = loaded if which == "loaded" else first
                target.cells[impl if which == "loaded" else f"{impl}:{which}"] = Cell(
                    text=f"ERROR {res['error'][:100]}", error=res["error"])
                return
            runs.setdefault((impl, which), {})[round_] = res
        try:
            for round_ in range(rounds):
                last_cache: dict[str, str] = {}
                for impl, head in runnable:
                    cache = tempfile.mkdtemp(prefix=f"bench_models_{impl}_")
                    caches.append(cache)
                    last_cache[impl] = cache
                    for which in (("cold",) if impl == "torch" else ("cold", "warm")):
                        run(impl, head, which, cache, round_)
                # Right after the round's idle processes, so that its loaded/idle compares
                # processes seconds apart (the steady tables' rows do the same).
                busy = Busy(2)
                try:
                    for impl, head in runnable:
                        run(impl, head, "loaded", last_cache[impl], round_)
                finally:
                    busy.stop()
        finally:
            for cache in caches:
                shutil.rmtree(cache, ignore_errors=True)

        def steady_runs(impl: str) -> dict[int, dict]:   # torch eager: its one child
            return runs.get((impl, "cold" if impl == "torch" else "warm"), {})
        for impl, _ in runnable:
            # A round that failed keeps its ERROR cell (its traceback is in ctx.errors).
            for which in ("cold", "warm"):
                if runs.get((impl, which)) and f"{impl}:{which}" not in first.cells:
                    res = _middle(list(runs[impl, which].values()), "first_s")
                    first.cells[f"{impl}:{which}"] = Cell(
                        seconds=res["first_s"], text=f"{fmt_time(res['first_s'], 'ms')} "
                                                     f"(2nd {fmt_time(res['second_s'], 'ms')})")
            warm = list(steady_runs(impl).values())
            if warm:
                res = _middle(warm, "alone_s")
                alone.cells[impl] = Cell(seconds=res["alone_s"], text=f"{fmt_time(res['alone_s'], 'ms')} "
                                                                      f"({res['faults']:.0f}){_cpu(res)}")
                res = _middle(warm, "rss_peak")
                memory.cells[impl] = Cell(seconds=res["rss_peak"],
                                          text=f"{res['rss_peak'] / 2**20:.0f} MiB "
                                               f"(+{(res['rss_peak'] - res['rss_setup']) / 2**20:.0f} MiB)")
                if impl == "fj" and "cache" in warm[-1]:
                    c = warm[-1]["cache"]
                    first.note = f"flowjit warm: compiled {c['compiled']}, loaded {c['loaded']} from disk"
            if runs.get((impl, "loaded")) and impl in alone.cells and impl not in loaded.cells:
                res = _middle(list(runs[impl, "loaded"].values()), "alone_s")
                loaded.cells[impl] = Cell(seconds=res["alone_s"], text=fmt_time(res["alone_s"], "ms") + _cpu(res))
                loaded.cells[impl + "/idle"] = Cell(text=paired_ratio(runs[impl, "loaded"], steady_runs(impl),
                                                                      "alone_s"))

        def fj_jax(row: ModelRow, suffix: str, which: str, key: str) -> str:
            # No ratio where either cell is missing or an ERROR (as ``_ratio``).
            if not all((c := row.cells.get(impl + suffix)) is not None and c.ok for impl in ("fj", "jax")):
                return "—"
            return paired_ratio(runs.get(("fj", which), {}), runs.get(("jax", which), {}), key)
        first.fj_jax = [fj_jax(first, ":cold", "cold", "first_s"), fj_jax(first, ":warm", "warm", "first_s")]
        memory.fj_jax = [fj_jax(memory, "", "warm", "rss_peak")]
        alone.fj_jax = [fj_jax(alone, "", "warm", "alone_s")]
        loaded.fj_jax = [fj_jax(loaded, "", "loaded", "alone_s")]
        first_rows.append(first)
        alone_rows += [alone, loaded]
        memory_rows.append(memory)
    return first_rows + alone_rows + memory_rows


# ---- the tables --------------------------------------------------------------------------------
def render(ctx: Ctx, rows: list[Row]) -> list[str]:
    """The workload's six tables (called by ``bench/run.py``)."""
    from bench.run import table
    mine = [r for r in rows if isinstance(r, ModelRow)]

    def ran(key: str) -> bool:
        return any(not c.skipped for r in mine for k, c in r.cells.items() if k == key or k.startswith(key + ":"))
    cols = tuple((k, h) for k, h in columns(ctx) if ran(k))
    skipped = {h: c.text for k, h in columns(ctx) if not ran(k) for r in mine for c in [r.cells.get(k)] if c}
    lines: list[str] = []

    def text(r: Row, key: str) -> str:
        return r.cells[key].text if key in r.cells else "—"

    def body(kind: str) -> list[ModelRow]:
        return [r for r in rows if isinstance(r, ModelRow) and r.table == kind]

    def loaded_table(kind: str) -> list[str]:
        heads = [x for _, h in cols for x in (h, "loaded/idle")]
        return [f"### {TITLES[kind]}", "", *table(
            ["model", *heads, "flowjit/JAX"],
            [[r.label, *[x for k, _ in cols for x in (text(r, k), text(r, k + "/idle"))], *r.fj_jax]
             for r in body(kind)]), ""]

    failed = [r for r in rows if not isinstance(r, ModelRow)]
    if body("steady"):
        lines += [f"### {TITLES['steady']}", ""]
        lines += table(["model", *[h for _, h in cols], "flowjit/JAX", "native (flowjit)"],
                       [[r.label, *[text(r, k) for k, _ in cols], *r.fj_jax, r.native] for r in body("steady")])
        lines.append("")
    if body("loaded"):
        lines += loaded_table("loaded")
    if body("first"):
        keys = [(f"{k}:{w}", f"{h} {w}") for k, h in cols for w in ("cold", "warm") if k != "torch" or w == "cold"]
        keys = [(k, "torch eager" if k == "torch:cold" else h) for k, h in keys]
        lines += [f"### {TITLES['first']}", ""]
        lines += table(["model", *[h for _, h in keys], "flowjit/JAX cold", "flowjit/JAX warm"],
                       [[r.label, *[text(r, k) if k in r.cells or k.split(":")[0] not in r.cells
                                    else text(r, k.split(":")[0]) for k, _ in keys], *r.fj_jax]
                        for r in body("first")])
        lines.append("")
    if body("alone"):
        lines += [f"### {TITLES['alone']}", ""]
        lines += table(["model", *[h for _, h in cols], "flowjit/JAX"],
                       [[r.label, *[text(r, k) for k, _ in cols], *r.fj_jax] for r in body("alone")])
        lines.append("")
    if body("alone_loaded"):
        lines += loaded_table("alone_loaded")
    if body("memory"):
        lines += [f"### {TITLES['memory']}", ""]
        lines += table(["model", *[h for _, h in cols], "flowjit/JAX"],
                       [[r.label, *[text(r, k) for k, _ in cols], *r.fj_jax] for r in body("memory")])
        lines.append("")
    if skipped:
        lines += ["Not run: " + "; ".join(f"{h} ({text})" for h, text in skipped.items()) + ".", ""]
    if rows and not failed:
        lines += ["Models (bench/workloads/zoo.py, each written once for every library): inference is the "
                  "model's logits; train is one Adam step (softmax cross entropy, the library's own autodiff). "
                  "Each column's first result is checked against flowjit's interpreter (logits; the first step's "
                  "loss). flowjit/JAX: flowjit's median over JAX jit's (in the new-process tables, the median of "
                  "the rounds' ratios). native: whether flowjit ran the function "
                  "as one native program, or what kept it on the Python driver. loaded/idle: the library's median "
                  "beside two busy processes over its idle median (in the new-process table, the median of the "
                  "rounds' ratios). CPU (steady and loaded tables): the bench "
                  "process's CPU time (every thread) over the wall time of the library's timed calls: beside "
                  "two busy processes on two cores a fair share is one core for a program with two runnable "
                  "threads, and between half a core and one for a program running on one thread, "
                  "depending on where the kernel placed it. First calls: import and setup excluded, "
                  "the second call in parentheses.", ""]
    return lines


if __name__ == "__main__":
    raise SystemExit(child_main(sys.argv[1:]))
