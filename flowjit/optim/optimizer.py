"""``Optimizer``: the base of every update rule in ``flowjit.optim``.

An optimizer keeps its state in Variables: a step counter (``iterations``) and, per
trained variable, the slots its rule needs (created on first use, zeros of the
variable's type). ``apply_gradients`` works eagerly and inside ``@fj.function``; in a
traced step the updates of all parameters are ordinary ops that fuse into kernels, and
the variables are rebound to the results when the step finishes.
"""

from __future__ import annotations

import abc
import contextlib
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from flowjit.tracer.autodiff import value_and_grad
from flowjit.tracer.core import device
from flowjit.tracer.numpy import namespace as fj
from flowjit.tracer.variables import Variable

LearningRate = float | Callable[[Any], Any]


class Optimizer(abc.ABC):
    """Subclasses implement ``update(var, grad, lr, step)``: assign the new value (and slots).
    ``learning_rate`` is a number or a callable of the step (1 on the first update)."""

    # The slots ``update`` keeps per variable; a checkpoint restores slots by these names.
    slot_names: tuple[str, ...] = ()

    def __init__(self, learning_rate: LearningRate):
        self.learning_rate = learning_rate
        self.iterations = Variable(np.int64(0), name="iterations", trainable=False)
        self._slots: dict[tuple[int, str], Variable] = {}

    def slot(self, var: Variable, name: str) -> Variable:
        """The slot ``name`` of ``var`` (zeros of its type, created on first use)."""
        key = (id(var), name)
        if name not in self.slot_names:
            raise ValueError(f"{type(self).__name__} declares the slots {self.slot_names}, not {name!r}")
        if key not in self._slots:
            slot = Variable(np.zeros(var.shape, var.dtype.np), name=f"{var.name}/{name}", trainable=False)
            slot.device = var.device  # slots live with their variable, as TF colocates them
            self._slots[key] = slot
        return self._slots[key]

    def slots(self) -> dict[str, Variable]:
        """Every slot variable by name (for checkpoints)."""
        return {v.name: v for v in self._slots.values()}

    def apply_gradients(self, grads_and_vars: Iterable[tuple[Any, Variable]]) -> None:
        """Update each variable from its gradient (None: skipped), then count the step."""
        step = self.iterations.value + 1
        for g, var in grads_and_vars:
            if g is None:
                continue
            if not var.trainable:
                raise ValueError(f"{var.name} is not trainable")
            # A variable's update runs on its device: only its gradient crosses over.
            with device(var.device) if var.device else contextlib.nullcontext():
                t = fj.astype(step, var.dtype)
                lr = self.learning_rate(t) if callable(self.learning_rate) else self.learning_rate
                self.update(var, fj.astype(g, var.dtype), fj.astype(fj.asarray(lr), var.dtype), t)
        self.iterations.assign(step)

    def minimize(self, loss: Callable[[], Any], var_list: Iterable[Variable]) -> Any:
        """Differentiate ``loss()`` with respect to ``var_list``, apply the update, return the loss."""
        var_list = list(var_list)
        value, grads = value_and_grad(loss, variables=var_list)()
        self.apply_gradients(zip(grads, var_list))
        return value

    @abc.abstractmethod
    def update(self, var: Variable, g: Any, lr: Any, step: Any) -> None:
        """Assign ``var`` (and its slots) their values after one step with gradient ``g``."""
