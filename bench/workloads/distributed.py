"""Distributed training (issue 23): ``fj.distributed.train`` of a 64-64-10 tanh MLP (Adam,
32 rows a gradient, random float32 inputs and labels: throughput does not depend on the
data) on a local Ray runtime, 2 parameter-server tasks and 1, 2 or 4 worker tasks, sync
and async; then sync on the largest cluster with its last worker slowed 5x, with 0 and 1
backup workers.

Each cluster first runs a short warm-up ``train`` (the workers and servers compile their
programs; later ``train`` calls load them from the disk cache). A cell is the median over
the runs (1 in quick mode, up to 3 otherwise) of ``TrainResult``: updates applied over its
wall time (steps/s) and rows in the applied gradients over the same time (samples/s, what
a step's aggregated gradients cover: in sync, ``workers - backup`` batches a step).
"Slowed 5x": the worker sleeps 4x the fault-free sync step time of that cluster before
each gradient, so each of its gradients takes at least five fault-free steps.

Every task is a process and all share this machine's cores, so with more tasks than cores
the workers contend with the servers and the chief: read the scaling with the core count
in the machine line. Skipped, with a note, when Ray (the ``distributed`` extra) is missing.
"""

from __future__ import annotations

import statistics
import sys
from typing import Any

import numpy as np

from bench.workloads.common import Cell, Ctx, Row

COLUMNS = (("steps", "steps/s"), ("samples", "samples/s"), ("scale", "samples/s vs 1 worker"),
           ("dropped", "gradients dropped / step"), ("stale", "staleness max"))
TITLE = "Distributed training on Ray (fj.distributed.train, 2 ps tasks, median per run)"
PS = 2
ROWS_PER_GRADIENT = 32
HIDDEN = 64


def mlp_loss(params: dict[str, Any], x: Any, y: Any) -> Any:
    """Mean softmax cross-entropy of the 64-HIDDEN-10 tanh MLP (module level: it travels to the workers)."""
    import flowjit as fj
    h = fj.tanh(x @ params["w1"] + params["b1"])
    return fj.nn.softmax_cross_entropy(h @ params["w2"] + params["b2"], y)


def mlp_params() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {"w1": (rng.normal(size=(64, HIDDEN)) / 8.0).astype(np.float32), "b1": np.zeros(HIDDEN, np.float32),
            "w2": (rng.normal(size=(HIDDEN, 10)) / np.sqrt(HIDDEN)).astype(np.float32),
            "b2": np.zeros(10, np.float32)}


def batches(seed: int = 0):
    """Endless batches drawn one at a time from a fixed pool of 1024 random rows (never materialize it)."""
    rng = np.random.default_rng(seed)
    x = rng.random((1024, 64), dtype=np.float32)
    y = rng.integers(0, 10, 1024).astype(np.int32)
    while True:
        i = rng.integers(0, len(x) - ROWS_PER_GRADIENT)
        yield x[i:i + ROWS_PER_GRADIENT], y[i:i + ROWS_PER_GRADIENT]


def _train(fjd: Any, cluster: Any, steps: int, mode: str, backup: int = 0) -> Any:
    import flowjit as fj
    return fjd.train(cluster, mlp_loss, mlp_params(), fj.optim.Adam(0.01), batches(), steps=steps, mode=mode,
                     backup=backup)


def _measure(fjd: Any, cluster: Any, steps: int, runs: int, mode: str, backup: int = 0) -> dict[str, float]:
    """Median steps/s and samples/s over ``runs`` runs, the mean of dropped gradients a step, the largest staleness."""
    results = [_train(fjd, cluster, steps, mode, backup) for _ in range(runs)]
    return {"steps": statistics.median(r.steps / r.seconds for r in results),
            "samples": statistics.median(r.samples_per_second for r in results),
            "dropped": statistics.mean(r.dropped / max(r.steps, 1) for r in results),
            "stale": max((max(r.staleness, default=0) for r in results), default=0)}


def _row(label: str, m: dict[str, float], base: float | None, note: str = "") -> Row:
    row = Row("distributed", label, note=note)
    row.cells["steps"] = Cell(seconds=1 / m["steps"], text=f"{m['steps']:.1f}")
    row.cells["samples"] = Cell(seconds=1 / m["samples"], text=f"{m['samples']:,.0f}")
    row.cells["scale"] = Cell(text=f"{m['samples'] / base:.2f}x" if base else "—")
    row.cells["dropped"] = Cell(text=f"{m['dropped']:.2f}")
    row.cells["stale"] = Cell(text=str(int(m["stale"])) if label.startswith("async") else "—")
    return row


def run(ctx: Ctx) -> list[Row]:
    try:
        import flowjit.distributed as fjd  # before Ray: it keeps the local runtime on loopback
    except ImportError as e:
        return [Row("distributed", "distributed training", note=f"skipped: {e}")]
    fjd.ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the workers may not import bench
    worker_counts = (1, 2) if ctx.quick else (1, 2, 4)
    steps = 20 if ctx.quick else 200
    runs = 1 if ctx.quick else max(1, min(ctx.repeat, 3))
    started = not fjd.ray.is_initialized()
    if started:
        fjd.init_local(PS + max(worker_counts))
    rows: list[Row] = []
    base: dict[str, float] = {}
    try:
        for n in worker_counts:
            with fjd.Cluster(ps=PS, workers=n) as cluster:
                ctx.log(f"bench: distributed, {n} worker(s)")
                _train(fjd, cluster, 3, "sync")  # compile on every task
                for mode in ("sync", "async"):
                    m = _measure(fjd, cluster, steps, runs, mode)
                    base.setdefault(mode, m["samples"])
                    rows.append(_row(f"{mode}, {n} worker{'s' if n > 1 else ''}", m, base[mode]))
                    if mode == "sync":
                        step_s = 1 / m["steps"]  # the fault-free sync step, which the slowed worker is 5x of
                if n == max(worker_counts):
                    cluster.slow_worker(n - 1, 4 * step_s)
                    for backup in (0, 1):
                        m = _measure(fjd, cluster, steps, runs, "sync", backup)
                        rows.append(_row(f"sync, {n} workers, one slowed 5x, {backup} backup", m, base["sync"],
                                         note=f"worker {n - 1} sleeps {4e3 * step_s:.1f} ms before each gradient "
                                              f"(4x the fault-free sync step)" if backup == 0 else ""))
    finally:
        if started:
            fjd.ray.shutdown()
    return rows


def render(ctx: Ctx, rows: list[Row]) -> list[str]:
    """The workload's table (called by ``bench/run.py``)."""
    from bench.run import table
    lines = [f"### {TITLE}", ""]
    lines += table(["workload"] + [h for _, h in COLUMNS],
                   [[r.label] + [r.cells[k].text if k in r.cells else "—" for k, _ in COLUMNS] for r in rows])
    return lines + [""]
