"""Data-parallel training on a ``Cluster``: workers compute gradients, parameter servers
apply them, the chief (this process) decides which gradients count."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

from flowjit.distributed._ray import ray
from flowjit.distributed.cluster import Cluster, ClusterError


@dataclasses.dataclass
class TrainResult:
    """What ``train`` did: the final ``params`` (name -> array), the loss of each applied step
    (sync: the mean over the gradients aggregated; async: the worker's loss), the number of
    updates applied, the gradients ``dropped`` (stragglers' in sync, over-stale ones in
    async), the ``staleness`` of each applied async gradient, the rows of data in the
    applied gradients, the wall time, and the tasks whose gradients made each update."""

    params: dict[str, np.ndarray]
    losses: list[float]
    steps: int
    dropped: int
    staleness: list[int]
    samples: int
    seconds: float
    contributors: list[tuple[str, ...]]

    @property
    def samples_per_second(self) -> float:
        return self.samples / self.seconds if self.seconds else 0.0


def place_variables(sizes: Mapping[str, int], num_ps: int, policy: str = "round_robin") -> list[list[str]]:
    """Which variables each of ``num_ps`` parameter servers holds: ``round_robin`` in the order
    given, or ``by_size``: largest first, each on the server holding the fewest elements."""
    layout: list[list[str]] = [[] for _ in range(num_ps)]
    if policy == "round_robin":
        for i, name in enumerate(sizes):
            layout[i % num_ps].append(name)
    elif policy == "by_size":
        load = [0] * num_ps
        for name in sorted(sizes, key=lambda n: -sizes[n]):
            p = load.index(min(load))
            layout[p].append(name)
            load[p] += sizes[name]
    else:
        raise ValueError(f"placement={policy!r}: use 'round_robin' or 'by_size'")
    return layout


def _batches(data: Iterable[Any]) -> Iterable[tuple[np.ndarray, ...]]:
    for b in data:
        yield tuple(np.asarray(a) for a in b) if isinstance(b, (tuple, list)) else (np.asarray(b),)


def _get(named: list[tuple[str, Any]], timeout: float, what: str) -> list[Any]:
    """The values of the references in ``named`` (task name, reference), each waited on for at
    most ``timeout`` seconds; a failure names the task and the error it raised there."""
    out = []
    for task, ref in named:
        try:
            out.append(ray.get(ref, timeout=timeout))
        except ray.exceptions.GetTimeoutError as e:
            raise ClusterError(f"{what}: {task} did not answer within {timeout:g} s") from e
        except ray.exceptions.RayTaskError as e:
            cause = getattr(e, "cause", None) or e
            raise ClusterError(f"{what}: {task} failed: {type(cause).__name__}: {cause}") from e
        except ray.exceptions.RayActorError as e:
            raise ClusterError(f"{what}: {task} is gone ({type(e).__name__}): {e}") from e
    return out


def train(cluster: Cluster, loss_fn: Callable[..., Any], variables: Mapping[str, Any], optimizer: Any,
          data: Iterable[Any], steps: int, mode: str = "sync", backup: int = 0, staleness: int | None = None,
          placement: str = "round_robin", timeout: float | None = None) -> TrainResult:
    """Train ``variables`` (name -> initial array) to minimize ``loss_fn(params, *batch)``
    (``params`` a dict like ``variables``; picklable: a module-level function) for ``steps``
    updates; see the package docstring for the modes. ``optimizer`` is an ``fj.optim``
    optimizer that has not run yet (each parameter server gets a copy for its variables) or
    a function making one; ``data`` yields batches (a tuple of arrays, one batch per
    gradient; training ends early when it runs out)."""
    if mode not in ("sync", "async"):
        raise ValueError(f"train(mode={mode!r}): use 'sync' or 'async'")
    num_workers = len(cluster.worker_tasks)
    if not 0 <= backup < num_workers:
        raise ValueError(f"train(backup={backup}): the cluster has {num_workers} workers, so backup must be "
                         f"between 0 and {num_workers - 1} (at least one gradient per step)")
    if mode == "async" and backup:
        raise ValueError("train(mode='async', backup=...): backup workers are a sync notion; async applies every "
                         "gradient (bound how stale with staleness=)")
    if staleness is not None and (mode != "async" or staleness < 0):
        raise ValueError(f"train(staleness={staleness!r}): a bound for mode='async', 0 or more")
    timeout = cluster.timeout if timeout is None else float(timeout)
    values = {n: np.asarray(getattr(v, "numpy", lambda v=v: v)()) for n, v in variables.items()}
    layout = place_variables({n: v.size for n, v in values.items()}, len(cluster.ps_tasks), placement)
    servers = zip(cluster.ps_tasks, layout)
    _get([(f"/job:ps/task:{p}", ps.setup_ps.remote(names, [values[n] for n in names], optimizer))
          for p, (ps, names) in enumerate(servers)]
         + [(f"/job:worker/task:{w}", task.setup_worker.remote(loss_fn, layout))
            for w, task in enumerate(cluster.worker_tasks)], timeout, "setting up the tasks")
    run = _Run(cluster, layout, iter(_batches(data)), timeout)
    start = time.perf_counter()
    (run.sync if mode == "sync" else run.async_)(steps, backup, staleness)
    shards = _get([(f"/job:ps/task:{p}", ps.ps_values.remote()) for p, ps in enumerate(cluster.ps_tasks)], timeout,
                  "reading the parameters")
    params = {n: v for names, shard in zip(layout, shards) for n, v in zip(names, shard)}
    return TrainResult({n: params[n] for n in values}, run.losses, run.version, run.dropped, run.staleness,
                       run.samples, time.perf_counter() - start, run.contributors)


class _Run:
    """The chief's state through one ``train`` call."""

    def __init__(self, cluster: Cluster, layout: list[list[str]], batches: Any, timeout: float):
        self.cluster, self.batches, self.timeout = cluster, batches, timeout
        self.num_ps = len(layout)
        self.version = 0  # updates applied so far: the version of the parameters
        self.losses: list[float] = []
        self.staleness: list[int] = []
        self.contributors: list[tuple[str, ...]] = []
        self.dropped = self.samples = 0
        self.pull()

    def pull(self) -> None:
        # A server runs one caller's calls in order, so this read sees every update sent before it.
        self.params = [ps.ps_values.remote() for ps in self.cluster.ps_tasks]

    def dispatch(self, w: int) -> list[Any] | None:
        """Start worker ``w`` on the next batch at the current parameters: its (meta, grads...)
        references, or None when the data has run out."""
        batch = next(self.batches, None)
        if batch is None:
            return None
        task = self.cluster.worker_tasks[w]
        refs = task.grad.options(num_returns=1 + self.num_ps).remote(self.version, batch, *self.params)
        return list(refs)

    def apply(self, grads: list[list[Any]]) -> None:
        """Send each server its share of ``grads`` (one reference list per worker), wait for the update."""
        _get([(f"/job:ps/task:{p}", ps.ps_apply.remote(*[g[1 + p] for g in grads]))
              for p, ps in enumerate(self.cluster.ps_tasks)], self.timeout, f"update {self.version + 1}")
        self.version += 1
        self.pull()

    def sync(self, steps: int, backup: int, staleness: int | None) -> None:
        needed = len(self.cluster.worker_tasks) - backup
        busy: dict[int, Any] = {}  # worker -> meta reference of a straggler's gradient, dropped when it lands
        for _ in range(steps):
            if busy:  # stragglers still computing cannot start this step: free the ones done, wait if too few
                must = needed - (len(self.cluster.worker_tasks) - len(busy))
                done, _ = ray.wait(list(busy.values()), num_returns=len(busy), timeout=0)
                if len(done) < must:
                    done, _ = ray.wait(list(busy.values()), num_returns=must, timeout=self.timeout)
                    if len(done) < must:
                        raise ClusterError(f"step {self.version + 1}: {must} stragglers needed for it did not finish "
                                           f"within {self.timeout:g} s")
                busy = {w: r for w, r in busy.items() if r not in done}
            inflight = {}
            for w in range(len(self.cluster.worker_tasks)):
                if w not in busy and (refs := self.dispatch(w)) is not None:
                    inflight[w] = refs
            if len(inflight) < needed:
                return  # out of data
            metas = {refs[0]: w for w, refs in inflight.items()}
            ready, _ = ray.wait(list(metas), num_returns=needed, timeout=self.timeout)
            if len(ready) < needed:
                raise ClusterError(f"step {self.version + 1}: {len(ready)} of the {needed} gradients needed arrived "
                                   f"within {self.timeout:g} s")
            chosen = sorted(metas[r] for r in ready)
            ms = _get([(f"/job:worker/task:{w}", inflight[w][0]) for w in chosen], self.timeout,
                      f"step {self.version + 1}'s gradient")
            if any(m["version"] != self.version for m in ms):  # by construction; a stale gradient is never applied
                raise ClusterError(f"step {self.version + 1}: a gradient of an older version reached the aggregation")
            for w, refs in inflight.items():
                if w not in chosen:
                    busy[w] = refs[0]
                    self.dropped += 1
            self.apply([inflight[w] for w in chosen])
            self.losses.append(float(np.mean([m["loss"] for m in ms])))
            self.samples += sum(m["rows"] for m in ms)
            self.contributors.append(tuple(m["task"] for m in ms))

    def async_(self, steps: int, backup: int, staleness: int | None) -> None:
        inflight: dict[Any, list[Any]] = {}  # meta reference -> the gradient's references
        workers: dict[Any, int] = {}  # meta reference -> the worker computing it
        for w in range(min(steps, len(self.cluster.worker_tasks))):
            if (refs := self.dispatch(w)) is not None:
                inflight[refs[0]], workers[refs[0]] = refs, w
        while self.version < steps and inflight:
            ready, _ = ray.wait(list(inflight), num_returns=1, timeout=self.timeout)
            if not ready:
                raise ClusterError(f"update {self.version + 1}: no gradient arrived within {self.timeout:g} s")
            refs, w = inflight.pop(ready[0]), workers.pop(ready[0])
            (meta,) = _get([(f"/job:worker/task:{w}", ready[0])], self.timeout, f"update {self.version + 1}'s gradient")
            lag = self.version - meta["version"]
            if staleness is not None and lag > staleness:
                self.dropped += 1
            else:
                self.apply([refs])
                self.losses.append(meta["loss"])
                self.staleness.append(lag)
                self.samples += meta["rows"]
                self.contributors.append((meta["task"],))
            if self.version + len(inflight) < steps and (new := self.dispatch(w)) is not None:
                inflight[new[0]], workers[new[0]] = new, w
