"""Plain gradient descent and momentum (with Nesterov's variant)."""

from __future__ import annotations

from typing import Any

from flowjit.optim.optimizer import LearningRate, Optimizer
from flowjit.tracer.variables import Variable


class SGD(Optimizer):
    """``w -= lr * g``."""

    def update(self, var: Variable, g: Any, lr: Any, step: Any) -> None:
        var.assign(var.value - lr * g)


class Momentum(Optimizer):
    """``v = momentum * v - lr * g; w += v``; with ``nesterov``, ``w += momentum * v - lr * g``
    (TensorFlow's formulation; slot ``velocity``)."""

    slot_names = ("velocity",)

    def __init__(self, learning_rate: LearningRate, momentum: float = 0.9, nesterov: bool = False):
        super().__init__(learning_rate)
        self.momentum = momentum
        self.nesterov = nesterov

    def update(self, var: Variable, g: Any, lr: Any, step: Any) -> None:
        v = self.slot(var, "velocity")
        new_v = self.momentum * v.value - lr * g
        v.assign(new_v)
        var.assign(var.value + (self.momentum * new_v - lr * g if self.nesterov else new_v))
