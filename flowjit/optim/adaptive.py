"""Per-coordinate step sizes: Adagrad, Adadelta, RMSProp, Adam and AdamW (PyTorch's
formulations: ``eps`` is added outside the square root, Adam's bias corrections apply to
the moments)."""

from __future__ import annotations

from typing import Any

from flowjit.optim.optimizer import LearningRate, Optimizer
from flowjit.tracer.numpy import namespace as fj
from flowjit.tracer.variables import Variable


class Adagrad(Optimizer):
    """``acc += g**2; w -= lr * g / (sqrt(acc) + eps)`` (slot ``accumulator``)."""

    slot_names = ("accumulator",)

    def __init__(self, learning_rate: LearningRate = 0.01, eps: float = 1e-10):
        super().__init__(learning_rate)
        self.eps = eps

    def update(self, var: Variable, g: Any, lr: Any, step: Any) -> None:
        acc = self.slot(var, "accumulator")
        a = acc.value + g * g
        acc.assign(a)
        var.assign(var.value - lr * g / (fj.sqrt(a) + self.eps))


class Adadelta(Optimizer):
    """``acc = rho*acc + (1-rho)*g**2; d = sqrt(acc_d + eps) / sqrt(acc + eps) * g;
    acc_d = rho*acc_d + (1-rho)*d**2; w -= lr * d`` (slots ``accumulator``, ``delta``)."""

    slot_names = ("accumulator", "delta")

    def __init__(self, learning_rate: LearningRate = 1.0, rho: float = 0.9, eps: float = 1e-6):
        super().__init__(learning_rate)
        self.rho, self.eps = rho, eps

    def update(self, var: Variable, g: Any, lr: Any, step: Any) -> None:
        acc, acc_d = self.slot(var, "accumulator"), self.slot(var, "delta")
        a = self.rho * acc.value + (1 - self.rho) * g * g
        d = fj.sqrt(acc_d.value + self.eps) / fj.sqrt(a + self.eps) * g
        acc.assign(a)
        acc_d.assign(self.rho * acc_d.value + (1 - self.rho) * d * d)
        var.assign(var.value - lr * d)


class RMSProp(Optimizer):
    """``ms = rho*ms + (1-rho)*g**2; w -= lr * g / (sqrt(ms) + eps)`` (slot ``mean_square``)."""

    slot_names = ("mean_square",)

    def __init__(self, learning_rate: LearningRate = 0.01, rho: float = 0.99, eps: float = 1e-8):
        super().__init__(learning_rate)
        self.rho, self.eps = rho, eps

    def update(self, var: Variable, g: Any, lr: Any, step: Any) -> None:
        ms = self.slot(var, "mean_square")
        m = self.rho * ms.value + (1 - self.rho) * g * g
        ms.assign(m)
        var.assign(var.value - lr * g / (fj.sqrt(m) + self.eps))


class Adam(Optimizer):
    """``m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g**2;
    w -= lr * (m / (1-b1**t)) / (sqrt(v / (1-b2**t)) + eps)`` (slots ``m``, ``v``);
    ``weight_decay`` adds ``wd * w`` to the gradient (L2, as torch.optim.Adam)."""

    slot_names = ("m", "v")

    def __init__(self, learning_rate: LearningRate = 1e-3, beta1: float = 0.9, beta2: float = 0.999,
                 eps: float = 1e-8, weight_decay: float = 0.0):
        super().__init__(learning_rate)
        self.beta1, self.beta2, self.eps, self.weight_decay = beta1, beta2, eps, weight_decay

    def update(self, var: Variable, g: Any, lr: Any, step: Any) -> None:
        if self.weight_decay:
            g = g + self.weight_decay * var.value
        self._adam(var, g, lr, step, var.value)

    def _adam(self, var: Variable, g: Any, lr: Any, step: Any, w: Any) -> None:
        m_slot, v_slot = self.slot(var, "m"), self.slot(var, "v")
        m = self.beta1 * m_slot.value + (1 - self.beta1) * g
        v = self.beta2 * v_slot.value + (1 - self.beta2) * g * g
        m_slot.assign(m)
        v_slot.assign(v)
        m_hat = m / (1 - self.beta1 ** step)
        v_hat = v / (1 - self.beta2 ** step)
        var.assign(w - lr * m_hat / (fj.sqrt(v_hat) + self.eps))


class AdamW(Adam):
    """Adam with decoupled weight decay: ``w *= 1 - lr * weight_decay`` before the Adam step
    (as torch.optim.AdamW; default ``weight_decay=0.01``)."""

    def __init__(self, learning_rate: LearningRate = 1e-3, beta1: float = 0.9, beta2: float = 0.999,
                 eps: float = 1e-8, weight_decay: float = 0.01):
        super().__init__(learning_rate, beta1, beta2, eps, weight_decay)

    def update(self, var: Variable, g: Any, lr: Any, step: Any) -> None:
        self._adam(var, g, lr, step, var.value * (1 - lr * self.weight_decay))
