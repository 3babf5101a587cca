"""The process behind one task of a cluster: a Ray actor that serves as a parameter server
(it holds its share of the variables and applies the optimizer to them) or as a worker (it
runs the compiled gradient of the loss on the batches it is given).

Arrays cross between tasks as Ray objects: a worker returns one object per parameter
server (its gradients for that server's variables), and the chief hands those references
straight to the servers, so gradients never pass through the chief's process.

A task that crashes is restarted by Ray as a fresh ``Task``: until the chief sets it up
again, every call of its role raises ``TaskNotSetUp`` (never a silent no-op on an empty
server), which is how the chief tells a restarted task from a live one.
"""

from __future__ import annotations

import copy
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from flowjit.checkpoint import CheckpointManager, restore, save
from flowjit.checkpoint.state import flatten
from flowjit.distributed.sparse import SparseTable, distinct_rows
from flowjit.optim import Optimizer
from flowjit.tracer.autodiff import value_and_grad
from flowjit.tracer.function import function
from flowjit.tracer.variables import Variable


def ray_get(ref: Any) -> Any:
    """``ray.get`` inside a task (Ray is imported only where a task runs)."""
    from flowjit.distributed._ray import ray
    return ray.get(ref)


class TaskNotSetUp(RuntimeError):
    """A call reached the task ``task`` while it has no role: its process was restarted after
    a crash (its state is gone) and the chief has not set it up again."""

    def __init__(self, task: str, what: str):
        super().__init__(task, what)  # both in args: the error pickles back to the chief whole
        self.task = task

    def __str__(self) -> str:
        return f"{self.task} {self.args[1]}: it was restarted and not set up again"


def checkpoint_path(directory: str, ps: int, step: int) -> str:
    """The file parameter server ``ps`` writes its checkpoint of ``step`` to, under ``directory``."""
    return os.fspath(CheckpointManager(os.path.join(directory, f"ps-{ps}")).path_for(step))


class Task:
    """One task, ``/job:<job>/task:<index>``; its role is set by ``setup_ps`` or ``setup_worker``."""

    def __init__(self, name: str):
        self.name = name
        self.delay = 0.0
        self._vars: list[Any] = []
        self._optimizer: Optimizer | None = None
        self._apply: Callable[..., Any] | None = None
        self._value_and_grad: Callable[..., Any] | None = None
        self._layout: list[list[str]] = []
        self._names: list[str] = []
        self._tables: dict[str, SparseTable] = {}
        self._sparse: dict[str, tuple[int, int]] = {}
        self._servers: list[Any] = []

    def ping(self) -> tuple[str, int]:
        """The task's name and process id (the cluster waits on this to know the task runs)."""
        return self.name, os.getpid()

    def set_delay(self, seconds: float) -> None:
        """Sleep ``seconds`` before each gradient: a straggler, for tests and benchmarks."""
        self.delay = float(seconds)

    # ---- parameter server ---------------------------------------------------------------
    def setup_ps(self, names: Sequence[str], values: Sequence[np.ndarray], optimizer: Any,
                 checkpoint: str | None = None, sparse: Sequence[str] = ()) -> int:
        """Hold ``values`` as Variables named ``names`` and compile their optimizer update; with
        ``checkpoint`` (a file ``ps_save`` wrote), the variables and the optimizer's state
        (slots, iterations) come from it instead. The variables named in ``sparse`` are
        embedding tables updated by rows (``SparseTable``). Returns the optimizer's iterations."""
        self._names = list(names)
        self._vars = [Variable(np.array(v), name=n) for n, v in zip(names, values) if n not in sparse]
        # A copy: Ray hands a task the arrays of its arguments read-only (zero-copy from its
        # object store), and restoring a checkpoint assigns the optimizer's Variables in place.
        opt = copy.deepcopy(optimizer) if isinstance(optimizer, Optimizer) else optimizer()
        self._optimizer = opt
        self._tables = {n: SparseTable(n, v, optimizer) for n, v in zip(names, values) if n in sparse}
        if checkpoint is not None:
            restore(checkpoint, self._state())
        variables = self._vars

        def apply(*grads: Any) -> None:
            opt.apply_gradients(zip(grads, variables))

        self._apply = function(apply)
        return int(opt.iterations.numpy())

    def _state(self) -> dict[str, Any]:
        if self._optimizer is None:
            raise TaskNotSetUp(self.name, "holds no variables")
        state: dict[str, Any] = {"params": self._vars, "optimizer": self._optimizer}
        if self._tables:  # sparse/<table>, sparse/<table>/<slot>
            state["sparse"] = [v for t in self._tables.values() for v in t.state().values()]
        return state

    def ps_values(self) -> tuple[np.ndarray, ...]:
        """The current values of this server's dense variables, in ``setup_ps``'s order (the
        sparse tables' rows come by ``ps_rows``)."""
        return tuple(v.numpy() for v in self._state()["params"])

    def ps_rows(self, name: str, ids: np.ndarray) -> np.ndarray:
        """The rows ``ids`` of the sparse table ``name``."""
        self._state()
        return self._tables[name].rows(ids)

    def ps_table(self, name: str) -> np.ndarray:
        """The whole sparse table ``name`` (at the end of training)."""
        self._state()
        return self._tables[name].table.numpy()

    def ps_apply(self, *shards: Sequence[Any]) -> None:
        """Apply the mean of the gradients ``shards`` (one tuple per worker, in this server's
        variable order; a sparse table's entry is its (ids, rows)) with the optimizer: one
        update, whatever the number of workers."""
        state = self._state()
        n = len(shards)
        step = int(self._optimizer.iterations.numpy()) + 1
        dense = []
        for i, name in enumerate(self._names):
            if name in self._tables:
                self._tables[name].apply([s[i] for s in shards], 1.0 / n, step)
            else:
                dense.append(shards[0][i] if n == 1 else
                             np.sum([s[i] for s in shards], axis=0, dtype=shards[0][i].dtype) / n)
        if state["params"]:
            self._apply(*dense)  # counts the step
        elif self._tables:
            self._optimizer.iterations.assign(step)

    def ps_save(self, path: str, step: int) -> float:
        """Write this server's variables and optimizer state (``params/<name>``,
        ``optimizer/iterations``, ``optimizer/<name>/<slot>``) to ``path`` atomically, as the
        checkpoint of ``step``; the seconds it took."""
        start = time.perf_counter()
        save(path, self._state(), step=step, metadata={"task": self.name})
        return time.perf_counter() - start

    def ps_state(self) -> dict[str, np.ndarray]:
        """Every array a checkpoint of this server holds, by its name there (for tests and tools)."""
        return {name: v.numpy() for name, v in flatten(self._state()).variables.items()}

    # ---- worker --------------------------------------------------------------------------
    def setup_worker(self, loss_fn: Callable[..., Any], layout: Sequence[Sequence[str]],
                     sparse: dict[str, int] | None = None, servers: Sequence[Any] = ()) -> None:
        """Compile (on first use, once per batch shape) the value and gradient of ``loss_fn(params,
        *batch)``; ``layout[p]`` names the variables parameter server ``p`` holds. ``sparse``
        maps an embedding table to the batch array whose ids index it: its rows are pulled
        from its server (``servers``, the servers' actors) and its gradient sent as (ids, rows)."""
        self._value_and_grad = value_and_grad(loss_fn)
        self._layout = [list(names) for names in layout]
        home = {n: p for p, names in enumerate(layout) for n in names}
        self._sparse = {n: (k, home[n]) for n, k in (sparse or {}).items()}
        self._servers = list(servers)

    def grad(self, version: int, batch: Sequence[np.ndarray], *shards: Sequence[np.ndarray]) -> tuple:
        """The loss and gradient on ``batch`` at the parameters ``shards`` (one tuple per server,
        all of version ``version``): ``(meta, grads for server 0, grads for server 1, ...)``."""
        if self._value_and_grad is None:
            raise TaskNotSetUp(self.name, "has no loss to differentiate")
        start = time.perf_counter()
        if self.delay:
            time.sleep(self.delay)
        dense = [[n for n in names if n not in self._sparse] for names in self._layout]
        params = {n: v for names, shard in zip(dense, shards) for n, v in zip(names, shard)}
        batch = list(batch)
        rows = len(batch[0]) if batch else 0
        # A sparse table's rows: those the batch's ids name, the ids renumbered into them.
        distinct: dict[int, np.ndarray] = {}
        for k in dict.fromkeys(k for k, _ in self._sparse.values()):
            distinct[k], batch[k] = distinct_rows(batch[k])
        pulls = {n: self._servers[p].ps_rows.remote(n, distinct[k]) for n, (k, p) in self._sparse.items()}
        for n, ref in pulls.items():
            params[n] = ray_get(ref)
        value, g = self._value_and_grad(params, *batch)
        out = tuple(tuple((distinct[self._sparse[n][0]], np.asarray(g[n])) if n in self._sparse else np.asarray(g[n])
                          for n in names) for names in self._layout)
        sent = sum(a.nbytes for shard in out for x in shard for a in (x if isinstance(x, tuple) else (x,)))
        meta = {"version": version, "loss": float(value), "task": self.name, "rows": rows,
                "seconds": time.perf_counter() - start, "grad_bytes": sent,
                "pulled_bytes": sum(params[n].nbytes for n in self._sparse)}
        return (meta, *out)
