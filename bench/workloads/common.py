"""What every workload shares: the columns, cells and rows, the peers, and the timing loop.

A ``Case`` maps each column to a builder; a builder sets up (jit, moves inputs) and returns a
thunk that runs the work once and returns its result, finished (JAX results blocked on). The
first call of each thunk compiles and is checked against the float64 NumPy reference; then
the columns are timed in rounds (each round: a short pause so that the thread pools of the
column before go idle, one untimed call, then its share of the samples, column after column),
so that a noisy neighbour touches every column alike. A cell's value is
the median over all samples; ``iqr`` is the interquartile range relative to that median.

A row that moves a known number of bytes also times the bandwidth workload's copy
(``Ctx.copy``) in its rounds, and its %BW divides by that copy's bandwidth: on a shared
machine the bandwidth swings (2x within minutes on the VM this was written on), so a copy
timed minutes earlier in its own workload misstates the fraction.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

# (key, header). ``fj`` is flowjit compiled for the CPU (its one CPU backend, ``llvm``: loop IR
# -> llvmlite, one native function per program), ``interp`` its NumPy interpreter; the ratio
# compares ``fj`` with the fastest peer.
COLUMNS = (("fj", "flowjit"), ("interp", "flowjit (interp)"),
           ("numpy", "NumPy"), ("jax", "JAX jit"), ("tf", "TensorFlow (XLA)"), ("torch", "torch eager"),
           ("compile", "torch.compile"))
BACKENDS = {"fj": "llvm", "interp": "interpreter"}   # flowjit's columns: key -> fj.function(backend=)
HEADERS = dict(COLUMNS)
PEERS = ("numpy", "jax", "tf", "torch", "compile")
# The module each peer's column needs (imported only when that column runs).
PEER_MODULES = {"jax": "jax", "tf": "tensorflow", "torch": "torch", "compile": "torch"}
COPY_KEY = "_copy"   # the copy timed alongside a %BW row's columns; never a column itself


class Skip(Exception):
    """A column that cannot run here (a peer not installed); the message says why."""


def short_error(e: BaseException) -> str:
    """One line for a table cell: the exception's type and the first line of its message."""
    text = str(e).strip()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    first = lines[0] if lines else ""
    return f"{type(e).__name__}: {first}" if first else type(e).__name__


@dataclass
class Cell:
    seconds: float | None = None      # median seconds per call
    iqr: float | None = None          # interquartile range / median
    text: str = ""                    # what the table shows
    error: str | None = None          # full error text (for the errors section)
    skipped: bool = False
    cpus: float | None = None         # the process's CPU time over the wall time of the timed calls

    @property
    def ok(self) -> bool:
        return self.seconds is not None and self.error is None


@dataclass
class Row:
    workload: str
    label: str
    cells: dict[str, Cell] = field(default_factory=dict)
    ratio: str = ""                   # flowjit over the best peer
    bw_fj: str = ""
    bw_best: str = ""
    note: str = ""
    copy_gbps: float | None = None    # the copy timed in this row's rounds, for its %BW


@dataclass
class Ctx:
    """The run's settings and the peers, imported on first use (an import error skips the peer)."""

    quick: bool = False
    repeat: int = 10
    columns: tuple[str, ...] = tuple(k for k, _ in COLUMNS)
    threads: int = 2
    gap_s: float = 0.15                       # idle before each column's block: pools stop spinning
    copy_gbps: float | None = None            # the streaming copy's bandwidth, for %BW
    copy: tuple[Callable[[], Any], int] | None = None   # (the copy, bytes it moves): timed in each %BW row
    errors: list[tuple[str, str, str]] = field(default_factory=list)   # (row, column, text)
    _modules: dict[str, Any] = field(default_factory=dict)

    def log(self, msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    def module(self, name: str) -> Any:
        """``jax``, ``tensorflow`` or ``torch`` (set up for ``threads`` threads), or raise Skip."""
        if name not in self._modules:
            try:
                if name == "torch":
                    import torch
                    torch.set_num_threads(self.threads)
                    mod: Any = torch
                elif name == "tensorflow":
                    mod = import_tensorflow(self.threads)
                elif name == "jax":
                    import jax
                    jax.config.update("jax_platforms", "cpu")
                    mod = jax
                else:
                    raise ImportError(f"unknown peer {name}")
            except Exception as e:  # ImportError, or a broken install
                mod = Skip(f"{name} not importable")
                mod.reason = short_error(e)  # type: ignore[attr-defined]
            self._modules[name] = mod
        mod = self._modules[name]
        if isinstance(mod, Skip):
            raise mod
        return mod

    def version(self, name: str) -> str:
        try:
            if name == "tensorflow" and "tf" not in self.columns:   # its version, without its 3 s import
                return _distribution_version("tensorflow-cpu", "tensorflow")
            if name in ("jax", "torch", "tensorflow"):
                return self.module(name).__version__
            mod = __import__(name)
            return getattr(mod, "__version__", "?")
        except Skip as e:
            return f"not importable ({getattr(e, 'reason', '')})"
        except Exception as e:
            return f"unavailable ({short_error(e)})"


def import_tensorflow(threads: int) -> Any:
    """TensorFlow on the CPU with ``threads`` threads for its ops and XLA's kernels (set
    before its runtime starts), its C++ info and warning logs off."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(threads)
    return tf


def _distribution_version(*names: str) -> str:
    from importlib import metadata
    for name in names:
        try:
            return f"{metadata.version(name)} ({name}; its column not run)"
        except metadata.PackageNotFoundError:
            pass
    return "not installed"


# ---- builders ---------------------------------------------------------------------------------
Builder = Callable[[], Callable[[], Any]]


def fj_builder(f: Callable, backend: str, args: list, **options: Any) -> Builder:
    def build():
        import flowjit as fj
        g = fj.function(f, backend=backend, **options)
        return lambda: g(*args)
    return build


def np_builder(f: Callable, args: list) -> Builder:
    return lambda: (lambda: f(*args))


def jax_builder(ctx: Ctx, f_name: str, args: list) -> Builder:
    def build():
        from bench.workloads.defs import jax_functions
        jax = ctx.module("jax")
        g = jax.jit(jax_functions(jax)[f_name])
        dev = [jax.device_put(a) for a in args]
        return lambda: g(*dev).block_until_ready()
    return build


def tf_builder(ctx: Ctx, f_name: str, args: list) -> Builder:
    def build():
        from bench.workloads.defs import tf_functions, tf_jit
        tf = ctx.module("tensorflow")
        g = tf_jit(tf, tf_functions(tf)[f_name])
        ts = [tf.constant(a) for a in args]
        return lambda: g(*ts)
    return build


def torch_builder(ctx: Ctx, f_name: str, args: list, compiled: bool) -> Builder:
    def build():
        from bench.workloads.defs import torch_functions
        torch = ctx.module("torch")
        eager, written = torch_functions(torch)
        g = torch.compile(written[f_name]) if compiled else eager[f_name]
        ts = [torch.from_numpy(a) for a in args]

        def call():
            with torch.no_grad():
                return g(*ts)
        return call
    return build


def standard_builders(ctx: Ctx, name: str, args: list) -> dict[str, Builder]:
    """Every column for a workload defined in ``defs`` under ``name``."""
    from bench.workloads import defs
    return {**{key: fj_builder(defs.FJ[name], backend, args) for key, backend in BACKENDS.items()},
            "numpy": np_builder(defs.NP[name], args),
            "jax": jax_builder(ctx, name, args),
            "tf": tf_builder(ctx, name, args),
            "torch": torch_builder(ctx, name, args, compiled=False),
            "compile": torch_builder(ctx, name, args, compiled=True)}


# ---- timing -----------------------------------------------------------------------------------
def to_numpy(out: Any) -> np.ndarray:
    if hasattr(out, "detach"):
        out = out.detach().numpy()
    return np.asarray(out)


def check(out: Any, ref: np.ndarray, tol: float) -> str | None:
    """None when ``out`` matches ``ref`` to ``tol`` (max error relative to max |ref|)."""
    got = to_numpy(out)
    if got.shape != ref.shape:
        return f"WRONG shape {got.shape}, expected {ref.shape}"
    if got.dtype != ref.dtype:
        return f"WRONG dtype {got.dtype}, expected {ref.dtype}"
    err = float(np.max(np.abs(got.astype(np.float64) - ref))) / max(float(np.max(np.abs(ref))), 1e-30)
    if not err <= tol:
        return f"WRONG: max error {err:.2e} of max |ref| (tolerance {tol:.0e})"
    return None


@dataclass
class Case:
    """One timed row."""

    workload: str
    label: str
    builders: dict[str, Builder]
    reference: np.ndarray | None = None
    tol: float = 1e-4
    bytes_moved: int | None = None     # read + write, for GB/s and %BW
    flops: int | None = None           # for GFLOP/s
    unit: str = "ms"                   # "ms" or "us"
    note: str = ""


def fmt_time(seconds: float, unit: str) -> str:
    if unit == "us" or seconds < 1e-4:
        return f"{seconds * 1e6:.2f} µs"
    if seconds >= 1:
        return f"{seconds:.2f} s"
    return f"{seconds * 1e3:.3g} ms"


def wait_for_full_code() -> None:
    """Let flowjit's programs made hot by the warm-up (their second call) finish their full
    code (codegen_cpu's tiers) before anything is timed: the steady state is the full
    code's, and no upgrade's thread runs beside the timed calls. Nothing where flowjit's
    JIT is not loaded."""
    jit = sys.modules.get("flowjit.codegen_cpu.jit")
    if jit is not None:
        jit.wait_for_upgrades(120)


def run_case(case: Case, ctx: Ctx, target_s: float = 0.02,
             columns: tuple[tuple[str, str], ...] | None = None) -> Row:
    """Warm up, check and time every column of ``case``; never raises. ``columns`` defaults to
    the main table's, less those left out with ``--peers``."""
    main_table = columns is None
    if columns is None:
        columns = tuple((k, h) for k, h in COLUMNS if k in ctx.columns)
    headers = dict(columns)
    row = Row(case.workload, case.label, note=case.note)
    ready: dict[str, tuple[Callable[[], Any], int]] = {}
    for key, header in columns:
        builder = case.builders.get(key)
        if builder is None:
            row.cells[key] = Cell(text="—", skipped=True)
            continue
        ctx.log(f"  {case.label}: {header}: warm-up")
        try:
            thunk = builder()
            out = thunk()                        # compiles
            if case.reference is not None:
                wrong = check(out, case.reference, case.tol)
                if wrong:
                    row.cells[key] = _error(ctx, row, headers[key], wrong, wrong)
                    continue
            del out
            t0 = time.perf_counter()
            thunk()
            one = time.perf_counter() - t0
            inner = max(1, min(100_000, round(target_s / max(one, 1e-9))))
            ready[key] = (thunk, inner)
        except Skip as e:
            row.cells[key] = Cell(text=f"skipped: {e}", skipped=True)
        except Exception as e:
            row.cells[key] = _error(ctx, row, headers[key], short_error(e), traceback.format_exc())
    wait_for_full_code()
    if main_table and case.bytes_moved and ctx.copy is not None:
        copy, _ = ctx.copy
        t0 = time.perf_counter()
        copy()
        ready[COPY_KEY] = (copy, max(1, round(target_s / max(time.perf_counter() - t0, 1e-9))))
    samples: dict[str, list[float]] = {k: [] for k in ready}
    # CPU seconds (every thread of this process) and wall seconds of each library's timed calls
    spent: dict[str, list[float]] = {k: [0.0, 0.0] for k in ready}
    rounds = min(3, ctx.repeat)
    shares = [ctx.repeat // rounds + (1 if r < ctx.repeat % rounds else 0) for r in range(rounds)]
    for share in shares:
        for key in list(ready):
            thunk, inner = ready[key]
            time.sleep(ctx.gap_s)
            try:
                thunk()
                for _ in range(share):
                    c0, t0 = time.process_time(), time.perf_counter()
                    for _ in range(inner):
                        thunk()
                    wall = time.perf_counter() - t0
                    samples[key].append(wall / inner)
                    spent[key][0] += time.process_time() - c0
                    spent[key][1] += wall
            except Exception as e:
                row.cells[key] = _error(ctx, row, headers.get(key, "copy"), short_error(e), traceback.format_exc())
                del ready[key]
    if COPY_KEY in ready and ctx.copy is not None:
        row.copy_gbps = ctx.copy[1] / statistics.median(samples.pop(COPY_KEY)) / 1e9
        del ready[COPY_KEY]
    for key in ready:
        xs = samples[key]
        med = statistics.median(xs)
        q = statistics.quantiles(xs, n=4) if len(xs) >= 2 else [med, med, med]
        cpu, wall = spent[key]
        cell = Cell(seconds=med, iqr=(q[2] - q[0]) / med if med > 0 else 0.0, cpus=cpu / wall if wall > 0 else None)
        text = fmt_time(med, case.unit)
        if len(xs) >= 3:
            text += f" ±{100 * cell.iqr:.0f}%"
        if case.bytes_moved:
            text += f" · {case.bytes_moved / med / 1e9:.1f} GB/s"
        if case.flops:
            text += f" · {case.flops / med / 1e9:.0f} GFLOP/s"
        cell.text = text
        row.cells[key] = cell
    if main_table:
        fill_ratios(row, ctx, case.bytes_moved)
    return row


def _error(ctx: Ctx, row: Row, header: str, short: str, full: str) -> Cell:
    ctx.errors.append((row.label, header, full.strip()))
    ctx.log(f"  {row.label}: {header}: {short}")
    return Cell(text=f"ERROR {short[:100]}", error=full)


def fill_ratios(row: Row, ctx: Ctx, bytes_moved: int | None = None) -> None:
    """flowjit over the best peer, and the fractions of copy bandwidth."""
    peers = [(row.cells[k].seconds, k) for k in PEERS if k in row.cells and row.cells[k].ok]
    best = min(peers) if peers else None
    fj = row.cells.get("fj")
    row.ratio = _ratio(fj, best)
    copy_gbps = row.copy_gbps or ctx.copy_gbps
    if bytes_moved and copy_gbps:
        def share(seconds: float) -> str:
            return f"{100 * bytes_moved / seconds / 1e9 / copy_gbps:.0f}%"
        if fj is not None and fj.ok:
            row.bw_fj = share(fj.seconds)
        if best is not None:
            row.bw_best = f"{share(best[0])} ({HEADERS[best[1]]})"


def _ratio(cell: Cell | None, best: tuple[float, str] | None) -> str:
    if best is None:
        return "— (no peer ran)"
    if cell is None or cell.skipped:
        return "—"
    if not cell.ok:
        return "— (flowjit failed)"
    return f"{cell.seconds / best[0]:.2f}x vs {HEADERS[best[1]]}"
