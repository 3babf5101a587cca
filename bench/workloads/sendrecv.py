"""Cross-process Send/Recv (issue 23 item 7): what moving an array to a cluster's task and
back costs through flowjit, against Ray's own ``put``/``get`` and a hand-written Ray actor.

Payloads: float32 arrays of 1024 elements (4 KB) and 1,048,576 elements (4 MB), on a local
Ray runtime (``fj.distributed.init_local``, or the one this process already runs) with a
``Cluster(ps=1, workers=1)``. Columns, each the median over single calls timed one by one
(``±`` the interquartile range over the median):

- flowjit, placed: an ``fj.function`` computing ``x + 1`` under
  ``fj.device("/job:worker/task:0")``, called from this process: one step sends ``x`` to
  the task (a push, an actor call), the task runs its partition and the result comes back
  (the caller is not an actor, so the task's result returns with its run call); result
  checked against ``x + 1``;
- flowjit, not placed: the same function with no placement, in this process;
- flowjit transfers: placed minus not placed, what the two cross-process transfers (and the
  step's bookkeeping around them) cost;
- Ray put+get: ``ray.get(ray.put(x))`` in this process (the object store alone: no other
  process, no task);
- Ray actor round trip: ``ray.get(actor.echo.remote(x))`` on an actor whose ``echo``
  returns ``x + 1``, what a hand-written Ray program pays for the same movement and work
  (its result is a read-only view of the object store for large arrays: flowjit hands back
  a writable array of its own, so the 4 MB row includes one copy Ray's does not);
- flowjit / Ray actor: the placed call's median over the actor round trip's (above 1:
  flowjit is slower).

Columns alternate in rounds (``--repeat`` rounds, 50 calls a column each; 5 calls in quick
mode), a short pause before each block, so that a noisy neighbour touches every column
alike. Every task is a process on this machine's cores: read the figures with the core
count and the load in the machine lines. Skipped, with a note, when Ray (the
``distributed`` extra) is missing.
"""

from __future__ import annotations

import statistics
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

import numpy as np

from bench.workloads.common import Cell, Ctx, Row, fmt_time, short_error

TITLE = "Cross-process Send/Recv on Ray (x + 1 on a worker task and back, median per call)"
COLUMNS = (("placed", "flowjit, placed on the task"), ("local", "flowjit, not placed"),
           ("transfers", "flowjit transfers (placed − not placed)"), ("putget", "Ray put+get"),
           ("actor", "Ray actor round trip"), ("ratio", "flowjit / Ray actor"))
TIMED = ("placed", "local", "putget", "actor")
PAYLOADS = (("4 KB", 1024), ("4 MB", 1 << 20))
WORKER = "/job:worker/task:0"


def add_one_on_worker(x: Any) -> Any:
    """``x + 1`` placed on the worker task (traced while the cluster is open)."""
    import flowjit as fj
    with fj.device(WORKER):
        return x + 1


def add_one(x: Any) -> Any:
    """``x + 1`` in this process."""
    return x + 1


class Echo:
    """The hand-written Ray peer: an actor returning what it is sent, plus one."""

    def echo(self, x: np.ndarray) -> np.ndarray:
        return x + 1


def _thunks(ray: Any, actor: Any, x: np.ndarray) -> dict[str, Callable[[], Any]]:
    import flowjit as fj
    placed, local = fj.function(add_one_on_worker), fj.function(add_one)
    return {"placed": lambda: placed(x), "local": lambda: local(x),
            "putget": lambda: ray.get(ray.put(x)), "actor": lambda: ray.get(actor.echo.remote(x))}


def _time(ctx: Ctx, label: str, thunks: dict[str, Callable[[], Any]], x: np.ndarray) -> dict[str, Any]:
    """Per-call samples of each thunk (or the error that stopped it), in alternating rounds."""
    want = {"placed": x + 1, "local": x + 1, "putget": x, "actor": x + 1}
    ready: dict[str, Callable[[], Any]] = {}
    out: dict[str, Any] = {}
    for key, thunk in thunks.items():
        ctx.log(f"  {label}: {key}: warm-up")
        try:
            for _ in range(3):        # the first call compiles (on the task too) or starts the actor
                got = thunk()
            if not np.array_equal(np.asarray(got), want[key]):
                raise AssertionError(f"WRONG result: {key} returned {np.asarray(got)[:4]}..., "
                                     f"expected {want[key][:4]}...")
            ready[key] = thunk
            out[key] = []
        except Exception as e:
            ctx.errors.append((label, key, traceback.format_exc().strip()))
            out[key] = e
    calls = 5 if ctx.quick else 50
    for _ in range(max(1, ctx.repeat)):
        for key, thunk in list(ready.items()):
            time.sleep(ctx.gap_s)
            try:
                thunk()
                for _ in range(calls):
                    t0 = time.perf_counter()
                    thunk()
                    out[key].append(time.perf_counter() - t0)
            except Exception as e:
                ctx.errors.append((label, key, traceback.format_exc().strip()))
                out[key] = e
                del ready[key]
    return out


def _row(label: str, samples: dict[str, Any]) -> Row:
    row = Row("sendrecv", label)
    for key, xs in samples.items():
        if isinstance(xs, BaseException):
            row.cells[key] = Cell(text=f"ERROR {short_error(xs)[:100]}", error=str(xs))
            continue
        med = statistics.median(xs)
        q = statistics.quantiles(xs, n=4) if len(xs) >= 2 else [med, med, med]
        iqr = (q[2] - q[0]) / med if med > 0 else 0.0
        row.cells[key] = Cell(seconds=med, iqr=iqr, text=f"{fmt_time(med, 'ms')} ±{100 * iqr:.0f}%")
    placed, local, actor = (row.cells.get(k) for k in ("placed", "local", "actor"))
    if placed is not None and placed.ok and local is not None and local.ok:
        row.cells["transfers"] = Cell(seconds=placed.seconds - local.seconds,
                                      text=fmt_time(placed.seconds - local.seconds, "ms"))
    if placed is not None and placed.ok and actor is not None and actor.ok:
        row.cells["ratio"] = Cell(text=f"{placed.seconds / actor.seconds:.2f}x")
    return row


def run(ctx: Ctx) -> list[Row]:
    try:
        import flowjit.distributed as fjd  # before Ray: it keeps the local runtime on loopback
    except ImportError as e:
        return [Row("sendrecv", "cross-process Send/Recv", note=f"skipped: {e}")]
    ray = fjd.ray
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the actor's class: tasks may not import bench
    started = not ray.is_initialized()
    if started:
        fjd.init_local(2)
    rows: list[Row] = []
    try:
        with fjd.Cluster(ps=1, workers=1):
            actor = ray.remote(Echo).options(num_cpus=0).remote()
            for label, n in PAYLOADS:
                ctx.log(f"bench: sendrecv, {label}")
                x = np.random.default_rng(0).random(n, dtype=np.float32)
                rows.append(_row(f"{label} (f32[{n}])", _time(ctx, label, _thunks(ray, actor, x), x)))
            ray.kill(actor)
    finally:
        if started:
            ray.shutdown()
    return rows


def render(ctx: Ctx, rows: list[Row]) -> list[str]:
    """The workload's table (called by ``bench/run.py``)."""
    from bench.run import table
    lines = [f"### {TITLE}", ""]
    lines += table(["payload"] + [h for _, h in COLUMNS],
                   [[r.label] + [r.cells[k].text if k in r.cells else "—" for k, _ in COLUMNS] for r in rows])
    try:
        import ray
        version = ray.__version__
    except ImportError:
        version = "not installed"
    return lines + ["", f"Ray {version}; a local runtime, 1 ps and 1 worker task (processes on this machine). "
                        "placed: an fj.function with x + 1 under fj.device('/job:worker/task:0') (x pushed to the "
                        "task, the result back with the task's run); transfers: placed − not placed; Ray actor round "
                        "trip: ray.get(actor.echo.remote(x)), echo returning x + 1.", ""]
