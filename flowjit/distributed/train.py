"""Data-parallel training on a ``Cluster``: workers compute gradients, parameter servers
apply them, the chief (this process) decides which gradients count, when the servers
checkpoint, and what to redo when a task crashes."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

from flowjit.checkpoint import CheckpointManager
from flowjit.distributed._ray import ray
from flowjit.distributed.cluster import Cluster, ClusterError
from flowjit.distributed.tasks import TaskNotSetUp, checkpoint_path

_log = logging.getLogger("flowjit.distributed")

# The chief's index of complete checkpoints, beside the servers' ps-<p>/ directories.
INDEX = "checkpoint.json"

# Recoveries in a row that redo nothing before a parameter server that keeps failing is an error.
_MAX_FUTILE_RECOVERIES = 3


@dataclasses.dataclass
class TrainResult:
    """What ``train`` did: the final ``params`` (name -> array), the loss of each applied step
    (sync: the mean over the gradients aggregated; async: the worker's loss), the number of
    updates applied, the gradients ``dropped`` (stragglers' in sync, over-stale ones in
    async, and those of parameters a server's crash undid), the ``staleness`` of each applied
    async gradient, the rows of data in the applied gradients, the wall time, and the tasks
    whose gradients made each update.

    ``steps`` is the version of the final parameters, counting from the start of training:
    a run restored from the checkpoint of step ``start_step`` applied ``steps - start_step``
    updates, and ``losses``, ``contributors`` and ``staleness`` describe those (after a
    parameter server's crash, the updates it undid are dropped from them and redone).
    Faults: ``worker_failures`` gradients lost to a worker's crash, ``rejoin_seconds`` for
    each restarted worker (from the chief noticing the crash to the worker answering, set up
    again), ``ps_failures`` parameter-server crashes and the ``steps_lost`` to them.
    ``checkpoints`` lists the steps of the complete checkpoints written, and
    ``checkpoint_seconds`` the time each took (the slowest server's write). ``grad_bytes``:
    for each update, the bytes of the gradients it aggregated (a sparse table's (ids, rows),
    not its size)."""

    params: dict[str, np.ndarray]
    losses: list[float]
    steps: int
    dropped: int
    staleness: list[int]
    samples: int
    seconds: float
    contributors: list[tuple[str, ...]]
    start_step: int = 0
    worker_failures: int = 0
    rejoin_seconds: list[float] = dataclasses.field(default_factory=list)
    ps_failures: int = 0
    steps_lost: int = 0
    checkpoints: list[int] = dataclasses.field(default_factory=list)
    checkpoint_seconds: list[float] = dataclasses.field(default_factory=list)
    grad_bytes: list[int] = dataclasses.field(default_factory=list)

    @property
    def samples_per_second(self) -> float:
        return self.samples / self.seconds if self.seconds else 0.0

    @property
    def worker_restarts(self) -> int:
        """Workers that crashed, were restarted and rejoined the training."""
        return len(self.rejoin_seconds)


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


def checkpoint_index(directory: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The index ``train`` keeps in ``directory``: ``{"step": the latest complete checkpoint
    (None before the first), "steps": the complete ones kept, "layout": the variables each
    parameter server holds}``, or None when there is none. A step counts as complete only
    when every server's file of it is written: the chief writes the index after those."""
    try:
        with open(os.path.join(directory, INDEX)) as f:
            return json.load(f)
    except FileNotFoundError:
        return None


def _write_index(directory: str, index: dict[str, Any]) -> None:
    # A temporary file renamed onto the index: a reader (or a chief restarted after a crash)
    # sees the previous index or the new one, never a torn one.
    path = os.path.join(directory, INDEX)
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(index, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _batches(data: Iterable[Any]) -> Iterable[tuple[np.ndarray, ...]]:
    for b in data:
        yield tuple(np.asarray(a) for a in b) if isinstance(b, (tuple, list)) else (np.asarray(b),)


class _TaskLost(ClusterError):
    """A call failed because the process of the task ``task`` is gone (crashed, restarting,
    or restarted without its state); a ClusterError for whoever does not recover from it."""

    def __init__(self, task: str, message: str):
        super().__init__(message)
        self.task = task


def _lost_task(error: BaseException, actors: Mapping[str, str], caller: str) -> str | None:
    """The task whose lost process made a call to ``caller`` fail with ``error``, or None when
    the call failed otherwise. A call whose argument came from a dead task (a worker given a
    crashed server's parameters) fails with that task's error, so the actor id decides."""
    if isinstance(error, ray.exceptions.RayActorError):
        return actors.get(getattr(error, "actor_id", None) or "", caller)
    cause = getattr(error, "cause", None)
    if isinstance(cause, TaskNotSetUp):
        return cause.task
    return None


def _get(named: list[tuple[str, Any]], timeout: float, what: str, actors: Mapping[str, str] | None = None) -> list:
    """The values of the references in ``named`` (task name, reference), each waited on for at
    most ``timeout`` seconds; a failure names the task and the error it raised there (a
    ``_TaskLost`` when the task's process is gone)."""
    out = []
    for task, ref in named:
        try:
            out.append(ray.get(ref, timeout=timeout))
        except ray.exceptions.GetTimeoutError as e:
            raise ClusterError(f"{what}: {task} did not answer within {timeout:g} s") from e
        except (ray.exceptions.RayActorError, ray.exceptions.RayTaskError) as e:
            lost = _lost_task(e, actors or {}, task)
            if lost is not None:
                raise _TaskLost(lost, f"{what}: {lost} is gone ({type(e).__name__}): {e}") from e
            cause = getattr(e, "cause", None) or e
            raise ClusterError(f"{what}: {task} failed: {type(cause).__name__}: {cause}") from e
    return out


def _discard(refs: Iterable[Any]) -> None:
    """Read the errors of references whose call failed, so that Ray does not log each one as
    an error nobody handled when it forgets them (a crashed worker's gradients)."""
    for ref in refs:
        with contextlib.suppress(Exception):  # the error is what is expected there
            ray.get(ref, timeout=0)


def train(cluster: Cluster, loss_fn: Callable[..., Any], variables: Mapping[str, Any], optimizer: Any,
          data: Iterable[Any], steps: int, mode: str = "sync", backup: int = 0, staleness: int | None = None,
          placement: str = "round_robin", timeout: float | None = None, *,
          checkpoint_dir: str | os.PathLike[str] | None = None, checkpoint_every_steps: int | None = None,
          checkpoint_every_seconds: float | None = None, checkpoints_to_keep: int | None = 3,
          restore: bool = False, on_step: Callable[[int, TrainResult], Any] | None = None,
          sparse: Mapping[str, int] | None = None) -> TrainResult:
    """Train ``variables`` (name -> initial array) to minimize ``loss_fn(params, *batch)``
    (``params`` a dict like ``variables``; picklable: a module-level function) until the
    parameters reach version ``steps``; see the package docstring for the modes, the
    checkpoints and the faults survived. ``optimizer`` is an ``fj.optim`` optimizer that has
    not run yet (each parameter server gets a copy for its variables) or a function making
    one; ``data`` yields batches (a tuple of arrays, one batch per gradient; training ends
    early when it runs out). With ``checkpoint_dir`` the servers checkpoint every
    ``checkpoint_every_steps`` updates and/or ``checkpoint_every_seconds`` and at the end,
    keeping the newest ``checkpoints_to_keep``; ``restore=True`` resumes from the latest
    complete checkpoint there (when there is one). ``on_step(step, result)`` runs in this
    process after each update (``result`` is the run so far, ``params`` left empty).
    ``sparse={"emb": 0}``: the variable ``emb`` is an embedding table that ``loss_fn`` reads
    only as rows indexed by the batch's array 0; its gradients travel as (ids, rows) and its
    server updates just those rows (``flowjit.distributed.sparse``)."""
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
    for what, every in (("checkpoint_every_steps", checkpoint_every_steps),
                        ("checkpoint_every_seconds", checkpoint_every_seconds)):
        if every is not None and (checkpoint_dir is None or every <= 0):
            raise ValueError(f"train({what}={every!r}): a positive interval, with checkpoint_dir= to write to")
    if restore and checkpoint_dir is None:
        raise ValueError("train(restore=True) resumes from the checkpoints in checkpoint_dir=; give it")
    if checkpoints_to_keep is not None and checkpoints_to_keep < 1:
        raise ValueError(f"train(checkpoints_to_keep={checkpoints_to_keep!r}): 1 or more, or None to keep all")
    timeout = cluster.timeout if timeout is None else float(timeout)
    values = {n: np.asarray(getattr(v, "numpy", lambda v=v: v)()) for n, v in variables.items()}
    sparse = dict(sparse or {})
    for n, k in sparse.items():
        if n not in values:
            raise ValueError(f"train(sparse={{{n!r}: {k!r}}}): no variable {n!r}; the variables are {list(values)}")
        if not isinstance(k, int) or k < 0 or values[n].ndim < 1:
            raise ValueError(f"train(sparse={{{n!r}: {k!r}}}): give the position in each batch of the integer ids "
                             f"indexing the rows of {n!r} (shape {values[n].shape})")
    layout = place_variables({n: v.size for n, v in values.items()}, len(cluster.ps_tasks), placement)
    start = None
    if checkpoint_dir is not None:
        checkpoint_dir = os.fspath(checkpoint_dir)
        os.makedirs(checkpoint_dir, exist_ok=True)
        index = checkpoint_index(checkpoint_dir) if restore else None
        if index is not None and index["step"] is not None:
            if index["layout"] != layout:
                raise ClusterError(f"train(restore=True): the checkpoints in {checkpoint_dir} hold the variables "
                                   f"{index['layout']} on {len(index['layout'])} parameter servers, this run places "
                                   f"{layout} (placement={placement!r}): use the cluster, variables and placement they "
                                   "were written with")
            start = int(index["step"])
        else:  # a fresh run: whatever an earlier run left in the directory is no checkpoint of this one
            _write_index(checkpoint_dir, {"step": None, "steps": [], "layout": layout})
    run = _Run(cluster, loss_fn, optimizer, values, layout, iter(_batches(data)), timeout,
               _Checkpoints(checkpoint_dir, checkpoint_every_steps, checkpoint_every_seconds, checkpoints_to_keep),
               on_step, sparse)
    run.setup(start)
    while True:
        try:
            if mode == "sync":
                run.sync(steps, num_workers - backup)
            else:
                run.async_(steps, staleness)
            params = run.finish()
            break
        except _TaskLost as e:
            if e.task not in run.ps_names:
                raise
            run.recover(e)
    return run.result({n: params[n] for n in values})


@dataclasses.dataclass
class _Checkpoints:
    directory: str | None
    every_steps: int | None
    every_seconds: float | None
    keep: int | None


@dataclasses.dataclass
class _Dispatched:
    worker: int
    refs: list[Any]  # (meta, grads for server 0, grads for server 1, ...)
    batch: tuple[np.ndarray, ...]
    generation: int  # the servers' setup it was computed against


class _Run:
    """The chief's state through one ``train`` call."""

    def __init__(self, cluster: Cluster, loss_fn: Callable[..., Any], optimizer: Any, values: dict[str, np.ndarray],
                 layout: list[list[str]], batches: Any, timeout: float, checkpoints: _Checkpoints,
                 on_step: Callable[[int, TrainResult], Any] | None, sparse: dict[str, int]):
        self.cluster, self.loss_fn, self.optimizer, self.values = cluster, loss_fn, optimizer, values
        self.sparse = sparse
        self.grad_bytes: list[int] = []
        self.layout, self.batches, self.timeout = layout, batches, timeout
        self.ckpt, self.on_step = checkpoints, on_step
        self.num_ps = len(layout)
        self.ps_names = [f"/job:ps/task:{p}" for p in range(self.num_ps)]
        self.worker_names = [f"/job:worker/task:{w}" for w in range(len(cluster.worker_tasks))]
        # Ray names the dead actor of a failed call by its id; these are ids Ray keeps across restarts.
        self.actors = {cluster.task(n)._actor_id.hex(): n for n in self.ps_names + self.worker_names}
        self.version = self.start_step = 0  # the version of the parameters: updates applied so far
        self.generation = 0  # bumped when the servers are set up again: older gradients are void
        self.losses: list[float] = []
        self.staleness: list[int] = []
        self.contributors: list[tuple[str, ...]] = []
        self.dropped = self.samples = 0
        self.requeued: list[tuple[np.ndarray, ...]] = []  # batches of gradients lost to a crash, handed out first
        self.exhausted = False
        self.busy: dict[int, _Dispatched] = {}  # sync: worker -> a dropped gradient still computing
        self.inflight: dict[Any, _Dispatched] = {}  # async: meta reference -> the gradient
        self.rejoining: dict[int, tuple[str, Any, float]] = {}  # worker -> (phase, reference, since)
        self.gone: set[int] = set()  # workers Ray will not restart
        self.worker_failures = self.ps_failures = self.steps_lost = self.futile = 0
        self.rejoin_seconds: list[float] = []
        self.pending_saves: list[tuple[int, list[Any]]] = []
        self.complete: list[int] = []  # complete checkpoints of this run (or the one it resumed), oldest first
        self.checkpoint_seconds: list[float] = []
        self.written: list[int] = []
        self.started = self.last_save = time.perf_counter()

    # ---- setup, results ------------------------------------------------------------------
    def setup(self, step: int | None) -> None:
        """Set up every server (from the checkpoint of ``step``, or the initial values) and
        every worker; the parameters are then of version ``step`` (0). A task still restarting
        from a crash before this run is waited for (a server) or rejoins later (a worker)."""
        for name in self.ps_names:
            self.cluster.wait_ready(name, self.timeout)
        self.setup_servers(step)
        self.start_step = self.version
        if step is not None:
            self.complete.append(step)
        setups = [self.setup_worker(task) for task in self.cluster.worker_tasks]
        for w, (name, ref) in enumerate(zip(self.worker_names, setups)):
            try:
                _get([(name, ref)], self.timeout, "setting up the workers", self.actors)
            except _TaskLost as e:
                if e.task != name:
                    raise
                self.worker_failed(w, None, e)
        self.started = self.last_save = time.perf_counter()

    def setup_worker(self, task: Any) -> Any:
        return task.setup_worker.remote(self.loss_fn, self.layout, self.sparse, self.cluster.ps_tasks)

    def setup_servers(self, step: int | None) -> None:
        _get([(name, ps.setup_ps.remote(names, [self.values[n] for n in names], self.optimizer,
                                        None if step is None else checkpoint_path(self.ckpt.directory, p, step),
                                        [n for n in names if n in self.sparse]))
              for p, (name, ps, names) in enumerate(zip(self.ps_names, self.cluster.ps_tasks, self.layout))],
             self.timeout, "setting up the parameter servers"
             + ("" if step is None else f" from the checkpoint of step {step} in {self.ckpt.directory}"), self.actors)
        self.version = step or 0
        self.pull()

    def result(self, params: dict[str, np.ndarray]) -> TrainResult:
        return TrainResult(params, self.losses, self.version, self.dropped, self.staleness, self.samples,
                           time.perf_counter() - self.started, self.contributors, self.start_step,
                           self.worker_failures, self.rejoin_seconds, self.ps_failures, self.steps_lost,
                           self.written, self.checkpoint_seconds, self.grad_bytes)

    def finish(self) -> dict[str, np.ndarray]:
        """The final checkpoint (when checkpointing) and the final parameters."""
        if self.ckpt.directory is not None and self.version not in self.complete + [s for s, _ in self.pending_saves]:
            self.save()
        self.settle_saves(block=True)
        shards = _get(list(zip(self.ps_names, (ps.ps_values.remote() for ps in self.cluster.ps_tasks))), self.timeout,
                      "reading the parameters", self.actors)
        params = {n: v for names, shard in zip(self.layout, shards)
                  for n, v in zip([n for n in names if n not in self.sparse], shard)}
        for p, names in enumerate(self.layout):
            for n in names:
                if n in self.sparse:
                    (params[n],) = _get([(self.ps_names[p], self.cluster.ps_tasks[p].ps_table.remote(n))],
                                        self.timeout, f"reading the table {n}", self.actors)
        return params

    # ---- parameters, updates, checkpoints -------------------------------------------------
    def pull(self) -> None:
        # A server runs one caller's calls in order, so this read sees every update sent before it.
        self.params = [ps.ps_values.remote() for ps in self.cluster.ps_tasks]

    def dispatch(self, w: int) -> _Dispatched | None:
        """Start worker ``w`` on the next batch at the current parameters, or None when the data
        has run out."""
        batch = self.requeued.pop(0) if self.requeued else next(self.batches, None)
        if batch is None:
            self.exhausted = True
            return None
        task = self.cluster.worker_tasks[w]
        refs = task.grad.options(num_returns=1 + self.num_ps).remote(self.version, batch, *self.params)
        return _Dispatched(w, list(refs), batch, self.generation)

    def outcome(self, d: _Dispatched, what: str) -> dict[str, Any] | None:
        """The meta of a landed gradient, or None when its worker crashed (then it is
        restarting: the chief has it rejoin, and its batch goes to another worker) or it was
        computed from parameters a server's crash undid."""
        name = self.worker_names[d.worker]
        try:
            (meta,) = _get([(name, d.refs[0])], self.timeout, what, self.actors)
            return meta
        except _TaskLost as e:
            _discard(d.refs[1:])
            if e.task != name and d.generation != self.generation:
                self.dropped += 1  # given the parameters of a server whose crash was recovered from already
                return None
            if e.task != name:
                raise  # a server's crash: its caller recovers
            self.worker_failed(d.worker, d.batch, e)
            return None

    def apply(self, grads: list[list[Any]]) -> None:
        """Send each server its share of ``grads`` (one reference list per worker), wait for the
        update, then checkpoint when due and call ``on_step``."""
        _get([(name, ps.ps_apply.remote(*[g[1 + p] for g in grads]))
              for p, (name, ps) in enumerate(zip(self.ps_names, self.cluster.ps_tasks))], self.timeout,
             f"update {self.version + 1}", self.actors)
        self.version += 1
        self.futile = 0
        self.pull()

    def updated(self) -> None:
        """After an update is recorded: checkpoints due, and the user's callback."""
        self.settle_saves(block=False)
        now = time.perf_counter()
        if self.ckpt.directory is not None and (
                (self.ckpt.every_steps and self.version % self.ckpt.every_steps == 0)
                or (self.ckpt.every_seconds and now - self.last_save >= self.ckpt.every_seconds)):
            self.save()
        if self.on_step is not None:
            self.on_step(self.version, self.result({}))

    def save(self) -> None:
        # Sent after the pull: each server answers the workers' read first, then writes while
        # they compute, and applies the next update only after the write (its calls run in order).
        step = self.version
        self.pending_saves.append((step, [ps.ps_save.remote(checkpoint_path(self.ckpt.directory, p, step), step)
                                          for p, ps in enumerate(self.cluster.ps_tasks)]))
        self.last_save = time.perf_counter()

    def settle_saves(self, block: bool, tolerant: bool = False) -> None:
        """Index the checkpoints every server has written, oldest first; ``block`` waits for all
        (bounded by the timeout). ``tolerant`` (after a crash) drops the unfinished ones."""
        while self.pending_saves:
            step, refs = self.pending_saves[0]
            done, _ = ray.wait(refs, num_returns=len(refs), timeout=self.timeout if block else 0)
            if len(done) < len(refs) and not tolerant:
                if block:
                    raise ClusterError(f"the checkpoint of step {step}: {len(refs) - len(done)} parameter servers "
                                       f"did not finish writing it within {self.timeout:g} s")
                return
            self.pending_saves.pop(0)
            try:
                seconds = _get(list(zip(self.ps_names, refs)), self.timeout, f"the checkpoint of step {step}",
                               self.actors) if len(done) == len(refs) else None
            except _TaskLost:
                if not tolerant:
                    raise
                seconds = None
            if seconds is None:
                for _, later in [(step, refs), *self.pending_saves]:
                    _discard(later)
                self.pending_saves.clear()  # a later step cannot be complete without this one's servers
                return
            self.checkpoint_seconds.append(max(seconds))
            self.written.append(step)
            self.complete.append(step)
            self.index()

    def index(self) -> None:
        """Write the index naming the complete checkpoints, then delete the servers' files of
        the ones no longer kept (and of unfinished or earlier runs' older than those)."""
        keep = self.complete if self.ckpt.keep is None else self.complete[-self.ckpt.keep:]
        self.complete = list(keep)
        _write_index(self.ckpt.directory, {"step": keep[-1], "steps": keep, "layout": self.layout})
        protected = {checkpoint_path(self.ckpt.directory, p, s) for p in range(self.num_ps)
                     for s in keep + [s for s, _ in self.pending_saves]}
        for p in range(self.num_ps):
            for path in CheckpointManager(os.path.join(self.ckpt.directory, f"ps-{p}")).checkpoints:
                if os.fspath(path) not in protected:
                    path.unlink(missing_ok=True)

    # ---- faults ----------------------------------------------------------------------------
    def worker_failed(self, w: int, batch: tuple[np.ndarray, ...] | None, error: BaseException) -> None:
        """Worker ``w``'s process is gone: hand its batch to another worker and have it rejoin
        once Ray has restarted it."""
        self.worker_failures += 1
        if batch is not None:
            self.requeued.append(batch)
        self.busy.pop(w, None)
        raised = error.__cause__ or error
        how = "restarted, its state lost" if isinstance(getattr(raised, "cause", None), TaskNotSetUp) \
            else type(raised).__name__
        _log.warning("%s crashed (%s); training goes on without it while it restarts", self.worker_names[w], how)
        self.rejoining[w] = ("ping", self.cluster.worker_tasks[w].ping.remote(), time.perf_counter())

    def free(self, w: int) -> bool:
        return w not in self.busy and w not in self.rejoining and w not in self.gone

    def progress(self, timeout: float, needed: int) -> None:
        """Wait up to ``timeout`` seconds for a dropped gradient to land or a restarting worker
        to answer, and take in all that has: a worker whose dropped gradient landed is free
        again; a restarted one is set up and, once that is done, has rejoined."""
        refs = {d.refs[0]: ("busy", w) for w, d in self.busy.items()}
        refs.update({ref: (phase, w) for w, (phase, ref, _) in self.rejoining.items()})
        if not refs:
            return
        done, _ = ray.wait(list(refs), num_returns=1, timeout=timeout)
        if done:
            done, _ = ray.wait(list(refs), num_returns=len(refs), timeout=0)
        for ref in done:
            phase, w = refs[ref]
            name = self.worker_names[w]
            if phase == "busy":
                d = self.busy.pop(w)
                try:
                    ray.get(ref, timeout=self.timeout)
                except ray.exceptions.RayActorError as e:
                    _discard(d.refs[1:])
                    if _lost_task(e, self.actors, name) == name:
                        self.worker_failed(w, None, e)
                except ray.exceptions.RayTaskError:
                    _discard(d.refs[1:])  # a gradient dropped anyway; a lasting fault shows in the next one
                continue
            since = self.rejoining[w][2]
            try:
                ray.get(ref, timeout=self.timeout)
            except ray.exceptions.ActorDiedError as e:  # restarts used up
                del self.rejoining[w]
                self.gone.add(w)
                left = len(self.worker_names) - len(self.gone)
                if left < needed:
                    raise ClusterError(f"{name} died and Ray will not restart it (max_restarts spent): training "
                                       f"needs {needed} workers and {left} are left") from e
                _log.warning("%s died and Ray will not restart it; training goes on with %d workers", name, left)
                continue
            except (ray.exceptions.RayActorError, ray.exceptions.RayTaskError):
                time.sleep(0.02)  # still restarting (or restarted again): ask again
                self.rejoining[w] = ("ping", self.cluster.worker_tasks[w].ping.remote(), since)
                continue
            if phase == "ping":
                task = self.cluster.worker_tasks[w]
                self.rejoining[w] = ("setup", self.setup_worker(task), since)
            else:
                del self.rejoining[w]
                self.cluster.wait_ready(name, self.timeout)  # records its new process for cluster.kill
                self.rejoin_seconds.append(time.perf_counter() - since)

    def wait_for_workers(self, needed: int, what: str) -> None:
        """Until ``needed`` workers are free: stragglers done, crashed ones back; bounded."""
        deadline = time.perf_counter() + self.timeout
        self.progress(0, needed)
        while sum(map(self.free, range(len(self.worker_names)))) < needed:
            left = deadline - time.perf_counter()
            if left <= 0 or not (self.busy or self.rejoining):
                raise ClusterError(
                    f"{what}: {needed} free workers needed, and after {self.timeout:g} s "
                    f"{[self.worker_names[w] for w in self.busy]} were still computing dropped gradients and "
                    f"{[self.worker_names[w] for w in self.rejoining]} had not come back from a crash")
            self.progress(left, needed)

    def recover(self, lost: _TaskLost) -> None:
        """A parameter server crashed: wait for it to restart, set every server up again from
        the latest complete checkpoint (or the initial values) and go on from its step."""
        self.ps_failures += 1
        failed_at = self.version
        self.settle_saves(block=False, tolerant=True)  # a server's finished writes outlive it
        step = self.complete[-1] if self.complete else None
        for attempt in range(_MAX_FUTILE_RECOVERIES):
            try:
                for name in self.ps_names:
                    self.cluster.wait_ready(name, self.timeout)
                self.setup_servers(step)
                break
            except _TaskLost as again:
                lost = again
        else:
            raise ClusterError(f"{lost.task} kept failing while the parameter servers were set up again: {lost}")
        self.futile += 1
        if self.futile > _MAX_FUTILE_RECOVERIES:
            raise ClusterError(f"{lost.task} failed {self.futile} times in a row with no update in between: {lost}")
        self.generation += 1  # gradients in flight are of parameters that no longer exist
        self.steps_lost += failed_at - self.version
        kept = self.version - self.start_step
        for record in (self.losses, self.contributors, self.staleness, self.grad_bytes):
            del record[kept:]
        source = (f"the checkpoint of step {step} in {self.ckpt.directory}" if step is not None
                  else "the initial values (no checkpoint yet)")
        raised = lost.__cause__ or lost
        _log.warning("%s crashed at update %d (%s); every parameter server restored from %s: %d updates lost",
                     lost.task, failed_at, type(raised).__name__, source, failed_at - self.version)

    # ---- the two modes -------------------------------------------------------------------
    def sync(self, steps: int, needed: int) -> None:
        while self.version < steps:
            self.wait_for_workers(needed, f"step {self.version + 1}")
            inflight: dict[int, _Dispatched] = {}
            for w in range(len(self.worker_names)):
                if self.free(w) and (d := self.dispatch(w)) is not None:
                    inflight[w] = d
            if len(inflight) < needed:
                self.requeued[:0] = [d.batch for d in inflight.values()]
                return  # out of data
            pending = {d.refs[0]: d for d in inflight.values()}
            metas: dict[int, dict[str, Any]] = {}
            deadline = time.perf_counter() + self.timeout
            try:
                while len(metas) < needed and pending:
                    ready, _ = ray.wait(list(pending), num_returns=1, timeout=max(0.0, deadline - time.perf_counter()))
                    if not ready:
                        raise ClusterError(f"step {self.version + 1}: {len(metas)} of the {needed} gradients needed "
                                           f"arrived within {self.timeout:g} s")
                    d = pending.pop(ready[0])
                    if (meta := self.outcome(d, f"step {self.version + 1}'s gradient")) is not None:
                        metas[d.worker] = meta
            finally:  # gradients not waited for: their workers sit out until they land
                for d in pending.values():
                    self.busy[d.worker] = d
                    self.dropped += 1
            if len(metas) < needed:  # crashes left too few: this step starts over
                self.dropped += len(metas)
                continue
            ms = [metas[w] for w in sorted(metas)]
            if any(m["version"] != self.version for m in ms):  # by construction; a stale gradient is never applied
                raise ClusterError(f"step {self.version + 1}: a gradient of an older version reached the aggregation")
            self.apply([inflight[w].refs for w in sorted(metas)])
            self.losses.append(float(np.mean([m["loss"] for m in ms])))
            self.grad_bytes.append(sum(m["grad_bytes"] for m in ms))
            self.samples += sum(m["rows"] for m in ms)
            self.contributors.append(tuple(m["task"] for m in ms))
            self.updated()

    def async_(self, steps: int, staleness: int | None) -> None:
        deadline = time.perf_counter() + self.timeout  # for the next gradient; restarting workers do not extend it
        while self.version < steps:
            self.progress(0, 1)
            running = {d.worker for d in self.inflight.values()}
            for w in range(len(self.worker_names)):
                if (self.free(w) and w not in running and not self.exhausted
                        and self.version + len(self.inflight) < steps and (d := self.dispatch(w)) is not None):
                    self.inflight[d.refs[0]] = d
            if not self.inflight:
                if self.exhausted or not self.rejoining:
                    return  # out of data
                self.wait_for_workers(1, f"update {self.version + 1}")
                deadline = time.perf_counter() + self.timeout
                continue
            rejoins = [ref for _, ref, _ in self.rejoining.values()]
            ready, _ = ray.wait(list(self.inflight) + rejoins, num_returns=1,
                                timeout=max(0.0, deadline - time.perf_counter()))
            if not ready:
                raise ClusterError(f"update {self.version + 1}: no gradient arrived within {self.timeout:g} s")
            if ready[0] not in self.inflight:
                continue  # a restarting worker answered: the loop's progress() takes it in
            deadline = time.perf_counter() + self.timeout
            d = self.inflight.pop(ready[0])
            meta = self.outcome(d, f"update {self.version + 1}'s gradient")
            if meta is None:
                continue
            lag = self.version - meta["version"]
            if d.generation != self.generation or (staleness is not None and lag > staleness):
                self.dropped += 1
                continue
            self.apply([d.refs])
            self.losses.append(meta["loss"])
            self.grad_bytes.append(meta["grad_bytes"])
            self.staleness.append(lag)
            self.samples += meta["rows"]
            self.contributors.append((meta["task"],))
            self.updated()
