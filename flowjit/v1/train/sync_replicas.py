"""``tf.train.SyncReplicasOptimizer``: synchronous replicated training, the TF1 spelling.

In TensorFlow each worker process runs the train op on its own batch; the gradients go to
accumulators beside the variables on the parameter servers, and once
``replicas_to_aggregate`` have arrived the chief applies their mean with the wrapped
optimizer, advances ``global_step`` and releases the workers; gradients computed on older
parameters are dropped.

In flowjit one process, the chief, runs the program (see ``flowjit.v1.train.distributed``),
so the replicas take turns: each ``sess.run(train_op, feed_dict)`` contributes ONE
replica's gradient, computed at the current parameters on the batch fed, and adds it to
the accumulators (Variables colocated with their variable: on its ps task). The run that
brings the count to ``replicas_to_aggregate`` also applies the wrapped optimizer to the
MEAN of the accumulated gradients, advances ``global_step`` by one and clears the
accumulators; with ``variable_averages`` (a ``tf.train.ExponentialMovingAverage``) it then
moves the averages of ``variables_to_average`` (default: the trainable variables) once.
So ``replicas_to_aggregate`` runs on as many batches equal one step of the wrapped
optimizer on the mean gradient, and no gradient is ever stale. Replicas do not run
concurrently, so there are no backup workers (``total_num_replicas`` above
``replicas_to_aggregate`` changes nothing): concurrent data-parallel training with backup
workers is ``fj.distributed.train``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from flowjit.v1 import ops
from flowjit.v1.control_flow import group, no_op
from flowjit.v1.graph import Operation, Tensor, get_default_graph
from flowjit.v1.train.monitored_session import SessionRunHook
from flowjit.v1.train.optimizers import Optimizer
from flowjit.v1.variables import Variable, assign, assign_add, global_variables, report_uninitialized_variables


class SyncReplicasOptimizer(Optimizer):
    """Aggregate the gradients of ``replicas_to_aggregate`` runs of the train op, then apply
    their mean with ``opt`` (see the module doc for how replicas run in flowjit)."""

    def __init__(self, opt: Optimizer, replicas_to_aggregate: int, total_num_replicas: int | None = None,
                 variable_averages: Any = None, variables_to_average: Any = None, use_locking: bool = False,
                 name: str = "sync_replicas"):
        if total_num_replicas is None:
            total_num_replicas = replicas_to_aggregate
        for what, n in (("replicas_to_aggregate", replicas_to_aggregate), ("total_num_replicas", total_num_replicas)):
            if not isinstance(n, (int, np.integer)) or n < 1:
                raise ValueError(f"SyncReplicasOptimizer({what}={n!r}): give a whole number of replicas, at least 1")
        if variable_averages is not None and not hasattr(variable_averages, "apply"):
            raise TypeError(f"SyncReplicasOptimizer(variable_averages={variable_averages!r}): give a "
                            "tf.train.ExponentialMovingAverage (or None)")
        super().__init__(use_locking, name)
        self._variable_averages = variable_averages
        self._variables_to_average = None if variables_to_average is None else list(variables_to_average)
        self._opt = opt
        self._replicas_to_aggregate = int(replicas_to_aggregate)
        self._total_num_replicas = int(total_num_replicas)
        self._accumulators: list[Variable] = []
        self._count: Variable | None = None
        self._apply_op: Operation | None = None
        self._chief_init_op: Operation | None = None
        self.local_step_init_op: Operation | None = None
        self.ready_for_local_init_op: Tensor | None = None

    def compute_gradients(self, *args: Any, **kwargs: Any) -> list[tuple[Tensor | None, Variable]]:
        """The wrapped optimizer's ``compute_gradients``."""
        return self._opt.compute_gradients(*args, **kwargs)

    def apply_gradients(self, grads_and_vars: Sequence[tuple[Any, Variable]], global_step: Variable | None = None,
                        name: str | None = None) -> Operation:
        """The train op: add these gradients to the accumulators; on the
        ``replicas_to_aggregate``-th run, apply their mean with the wrapped optimizer
        (advancing ``global_step``) and clear them."""
        pairs = [(g, v) for g, v in grads_and_vars if g is not None]
        if not pairs:
            raise ValueError("SyncReplicasOptimizer.apply_gradients: no gradient is given for any variable "
                             f"({[v.name for _, v in grads_and_vars]})")
        if global_step is None:
            raise ValueError("SyncReplicasOptimizer.apply_gradients needs global_step (it counts the updates "
                             "applied): pass tf.train.get_or_create_global_step()")
        if self._apply_op is not None:
            raise ValueError("SyncReplicasOptimizer.apply_gradients was called already: one optimizer aggregates "
                             "one train op's gradients; make another for another train op")
        graph = get_default_graph()
        r = self._replicas_to_aggregate
        adds = []
        with graph.name_scope(name or self._name):
            for g, var in pairs:
                # Colocated with its variable (its ps task): only the gradient travels.
                with graph.device(None), graph.device(var.device):
                    with graph.control_dependencies(None):
                        acc = Variable(ops.zeros(var.shape.as_list(), var.dtype), trainable=False,
                                       name=var.op.name.replace("/", "_") + "_grad_accum")
                    adds.append(assign_add(acc, ops.convert_to_tensor(g), name="accumulate"))
                self._accumulators.append(acc)
            with graph.device(None), graph.device(global_step.device):
                with graph.control_dependencies(None):
                    self._count = Variable(np.int64(0), trainable=False, name="accumulated")
                with graph.control_dependencies(adds):
                    count = assign_add(self._count, np.int64(1), name="count")
            means = []
            for acc, (_, var) in zip(self._accumulators, pairs):
                with graph.device(None), graph.device(var.device):
                    means.append(ops.divide(acc.value(), ops.constant(r, dtype=var.dtype)))
            update = self._opt.apply_gradients(list(zip(means, [v for _, v in pairs])), global_step=global_step)
            with graph.control_dependencies([update]):
                clear = [self._clear(acc) for acc in self._accumulators]
                clear.append(assign(self._count, np.int64(0)).op)
                if self._variable_averages is not None:
                    # As TensorFlow's chief does: the averages move once per aggregated update,
                    # reading the variables after it.
                    clear.append(self._variable_averages.apply(self._variables_to_average))
            self._apply_op = group(*clear, name="apply_mean")
            self._chief_init_op = group(*[self._clear(acc) for acc in self._accumulators],
                                        assign(self._count, np.int64(0)).op, name="chief_init")
            self.local_step_init_op = no_op(name="local_step_init")
            self.ready_for_local_init_op = report_uninitialized_variables(global_variables())
            apply_op, replicas = self._apply_op, r

            def maybe_apply(session: Any, op: Operation, xs: list[Any]) -> list[Any]:
                # The run that completes the aggregation applies it: a second, compiled run.
                if int(xs[0]) >= replicas:
                    session.run(apply_op)
                return []

            return graph.create_op("SyncReplicasApply", [count], maybe_apply, name=name or "train", host=True,
                                   outputs=[], attrs={"replicas_to_aggregate": r})

    def _clear(self, acc: Variable) -> Operation:
        graph = acc.graph
        with graph.device(None), graph.device(acc.device):
            return assign(acc, ops.zeros(acc.shape.as_list(), acc.dtype)).op

    @property
    def chief_init_op(self) -> Operation:
        """Clears the accumulators (run by the chief's session hook)."""
        if self._chief_init_op is None:
            raise ValueError("SyncReplicasOptimizer.chief_init_op exists after apply_gradients (or minimize)")
        return self._chief_init_op

    def get_init_tokens_op(self, num_tokens: int = -1) -> Operation:
        """A no-op: the replicas take turns in the chief, so no worker waits for a token."""
        return no_op(name="sync_init_tokens")

    def make_session_run_hook(self, is_chief: bool, num_tokens: int = -1) -> SyncReplicasHook:
        """The hook a training loop runs: the chief's clears the accumulators when its session starts."""
        return SyncReplicasHook(self, is_chief)

    def get_slot(self, var: Variable, name: str) -> Variable | None:
        return self._opt.get_slot(var, name)

    def get_slot_names(self) -> list[str]:
        return self._opt.get_slot_names()

    def variables(self) -> list[Variable]:
        return [*self._opt.variables(), *self._accumulators, *([self._count] if self._count is not None else [])]

    def _apply(self, ev: Any, var: Variable, g: Any, slots: dict[str, Variable], h: dict[str, Any]) -> None:
        raise AssertionError("SyncReplicasOptimizer applies through the optimizer it wraps")


class SyncReplicasHook(SessionRunHook):
    """``SyncReplicasOptimizer.make_session_run_hook(is_chief)``: the chief's clears the
    accumulators once its session exists (``MonitoredTrainingSession(hooks=[...])``)."""

    def __init__(self, optimizer: SyncReplicasOptimizer, is_chief: bool):
        self._optimizer, self._is_chief = optimizer, is_chief

    def begin(self) -> None:
        self._optimizer.chief_init_op  # noqa: B018 - raises when apply_gradients has not run

    def after_create_session(self, session: Any, coord: Any = None) -> None:
        if self._is_chief:
            session.run(self._optimizer.chief_init_op)
