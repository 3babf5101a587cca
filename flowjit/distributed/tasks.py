"""The process behind one task of a cluster: a Ray actor that serves as a parameter server
(it holds its share of the variables and applies the optimizer to them) or as a worker (it
runs the compiled gradient of the loss on the batches it is given).

Arrays cross between tasks as Ray objects: a worker returns one object per parameter
server (its gradients for that server's variables), and the chief hands those references
straight to the servers, so gradients never pass through the chief's process.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from flowjit.optim import Optimizer
from flowjit.tracer.autodiff import value_and_grad
from flowjit.tracer.function import function
from flowjit.tracer.variables import Variable


class Task:
    """One task, ``/job:<job>/task:<index>``; its role is set by ``setup_ps`` or ``setup_worker``."""

    def __init__(self, name: str):
        self.name = name
        self.delay = 0.0
        self._vars: list[Any] = []
        self._apply: Callable[..., Any] | None = None
        self._value_and_grad: Callable[..., Any] | None = None

    def ping(self) -> tuple[str, int]:
        """The task's name and process id (the cluster waits on this to know the task runs)."""
        return self.name, os.getpid()

    def set_delay(self, seconds: float) -> None:
        """Sleep ``seconds`` before each gradient: a straggler, for tests and benchmarks."""
        self.delay = float(seconds)

    # ---- parameter server ---------------------------------------------------------------
    def setup_ps(self, names: Sequence[str], values: Sequence[np.ndarray], optimizer: Any) -> None:
        """Hold ``values`` as Variables named ``names`` and compile their optimizer update."""
        self._vars = [Variable(np.array(v), name=n) for n, v in zip(names, values)]
        opt = optimizer if isinstance(optimizer, Optimizer) else optimizer()
        variables = self._vars

        def apply(*grads: Any) -> None:
            opt.apply_gradients(zip(grads, variables))

        self._apply = function(apply)

    def ps_values(self) -> tuple[np.ndarray, ...]:
        """The current values of this server's variables, in ``setup_ps``'s order."""
        return tuple(v.numpy() for v in self._vars)

    def ps_apply(self, *shards: Sequence[np.ndarray]) -> None:
        """Apply the mean of the gradients ``shards`` (one tuple per worker, in this server's
        variable order) with the optimizer: one update, whatever the number of workers."""
        if not self._vars:
            return
        n = len(shards)
        grads = [shards[0][i] if n == 1 else np.sum([s[i] for s in shards], axis=0, dtype=shards[0][i].dtype) / n
                 for i in range(len(self._vars))]
        self._apply(*grads)

    # ---- worker --------------------------------------------------------------------------
    def setup_worker(self, loss_fn: Callable[..., Any], layout: Sequence[Sequence[str]]) -> None:
        """Compile (on first use, once per batch shape) the value and gradient of ``loss_fn(params,
        *batch)``; ``layout[p]`` names the variables parameter server ``p`` holds."""
        self._value_and_grad = value_and_grad(loss_fn)
        self._layout = [list(names) for names in layout]

    def grad(self, version: int, batch: Sequence[np.ndarray], *shards: Sequence[np.ndarray]) -> tuple:
        """The loss and gradient on ``batch`` at the parameters ``shards`` (one tuple per server,
        all of version ``version``): ``(meta, grads for server 0, grads for server 1, ...)``."""
        start = time.perf_counter()
        if self.delay:
            time.sleep(self.delay)
        params = {n: v for names, shard in zip(self._layout, shards) for n, v in zip(names, shard)}
        value, g = self._value_and_grad(params, *batch)
        meta = {"version": version, "loss": float(value), "task": self.name, "rows": len(batch[0]) if batch else 0,
                "seconds": time.perf_counter() - start}
        out = tuple(tuple(np.asarray(g[n]) for n in names) for names in self._layout)
        return (meta, *out)
