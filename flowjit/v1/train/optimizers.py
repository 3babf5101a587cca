"""``tf.train.*Optimizer``: TensorFlow 1.x's update rules, defaults and slot names, as graph ops.

``minimize(loss)`` is ``apply_gradients(compute_gradients(loss))``: ``tf.gradients`` of the
loss with respect to each variable, then one ``Apply<Name>`` op per variable whose
compute reads the variable and its slots and assigns their new values (as TensorFlow's
fused ``ApplyAdam``... kernels do), grouped into the returned op. In a compiled run the
updates of all variables fuse into a few kernels like any flowjit training step.

The formulas are TensorFlow 1.x's, which differ from ``flowjit.optim`` (PyTorch's) in
places programs of that generation depend on: Adam folds the bias corrections into the
step size and adds epsilon outside the square root of the uncorrected v; RMSProp starts
its mean square at ones and adds epsilon inside the root; Adagrad starts its
accumulator at 0.1 and has no epsilon. Slots are Variables named
``<variable>/<optimizer name>[_k]`` (``W/Adam``, ``W/Adam_1``), created by
``apply_gradients``: run ``tf.global_variables_initializer()`` after building the optimizer.
"""

from __future__ import annotations

import abc
import contextlib
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from flowjit.tracer.numpy import namespace as fnp
from flowjit.v1 import ops
from flowjit.v1.control_flow import group
from flowjit.v1.device_spec import names_task
from flowjit.v1.gradients import gradients
from flowjit.v1.graph import GraphKeys, Operation, Tensor, get_default_graph
from flowjit.v1.variables import Variable, assign_add, trainable_variables

GATE_NONE, GATE_OP, GATE_GRAPH = 0, 1, 2


class Optimizer(abc.ABC):
    """The base of TF1 optimizers: subclasses declare ``slots`` (name -> initial value) and
    ``_apply(ev, var, g, slots, hyper)``, which assigns new values through ``ev``."""

    GATE_NONE, GATE_OP, GATE_GRAPH = GATE_NONE, GATE_OP, GATE_GRAPH
    # (slot name, initial value as a function of the optimizer) in TF's slot order
    slot_specs: tuple[tuple[str, Callable[[Any], float]], ...] = ()

    def __init__(self, use_locking: bool, name: str):
        self._use_locking = use_locking
        self._name = name
        self._slots: dict[str, dict[Variable, Variable]] = {}
        self._non_slot: dict[str, Variable] = {}

    def get_name(self) -> str:
        return self._name

    # ---- the public TF1 API -----------------------------------------------------------------------------------
    def compute_gradients(self, loss: Any, var_list: Sequence[Variable] | None = None, gate_gradients: int = GATE_OP,
                          aggregation_method: Any = None, colocate_gradients_with_ops: bool = False,
                          grad_loss: Any = None) -> list[tuple[Tensor | None, Variable]]:
        """``[(gradient, variable), ...]`` for ``var_list`` (default: the trainable variables);
        a gradient is None where the loss does not depend on the variable."""
        vars_ = list(var_list) if var_list is not None else trainable_variables()
        if not vars_:
            raise ValueError("No variables to optimize.")
        loss_t = ops.convert_to_tensor(loss)
        grads = gradients(loss_t, vars_, grad_ys=grad_loss)
        return list(zip(grads, vars_))

    def apply_gradients(self, grads_and_vars: Sequence[tuple[Any, Variable]], global_step: Variable | None = None,
                        name: str | None = None) -> Operation:
        """An op that applies each gradient to its variable (and increments ``global_step``)."""
        pairs = [(g, v) for g, v in grads_and_vars]
        if not any(g is not None for g, _ in pairs):
            raise ValueError(f"No gradients provided for any variable, check your graph for ops that do not "
                             f"support gradients, between variables {[v.name for _, v in pairs]} and the loss")
        graph = get_default_graph()
        updates: list[Operation] = []
        with graph.name_scope(name or self._name):
            hyper = self._hyper_tensors()
            for g, var in pairs:
                if g is None:
                    continue
                g_t = ops.convert_to_tensor(g)
                slots = {s: self._get_or_make_slot(var, s, init(self)) for s, init in self.slot_specs}
                updates.append(self._update_op(var, g_t, slots, hyper))
            finish = self._finish(updates, hyper)
            if global_step is None:
                return group(*finish, name=name or self._name)
            with graph.control_dependencies(finish):
                return assign_add(global_step, 1, name=name or self._name).op

    def minimize(self, loss: Any, global_step: Variable | None = None, var_list: Sequence[Variable] | None = None,
                 gate_gradients: int = GATE_OP, aggregation_method: Any = None,
                 colocate_gradients_with_ops: bool = False, name: str | None = None, grad_loss: Any = None
                 ) -> Operation:
        """The op that takes one step on ``loss`` (compute_gradients, then apply_gradients)."""
        gv = self.compute_gradients(loss, var_list, grad_loss=grad_loss)
        return self.apply_gradients(gv, global_step=global_step, name=name)

    def get_slot(self, var: Variable, name: str) -> Variable | None:
        return self._slots.get(name, {}).get(var)

    def get_slot_names(self) -> list[str]:
        return sorted(self._slots)

    def variables(self) -> list[Variable]:
        return [*self._non_slot.values(), *(v for d in self._slots.values() for v in d.values())]

    # ---- internals
    def _hyper(self) -> dict[str, Any]:
        """The hyperparameters as Python numbers or tensors (learning_rate may be a tensor)."""
        return {}

    def _hyper_tensors(self) -> dict[str, Tensor]:
        return {k: ops.convert_to_tensor(v, dtype="float32") if not isinstance(v, Tensor) else v
                for k, v in self._hyper().items()}

    def _get_or_make_slot(self, var: Variable, slot: str, initial: float) -> Variable:
        table = self._slots.setdefault(slot, {})
        if var not in table:
            graph = var.graph
            k = list(dict(self.slot_specs)).index(slot)
            with graph.name_scope(None), graph.name_scope(var.op.name + "/"), graph.control_dependencies(None), \
                    graph.device(None), graph.device(var.device):  # a slot lives beside its variable
                table[var] = Variable(ops.constant(initial, dtype=var.dtype, shape=var.shape.as_list()),
                                      trainable=False, name=self._slot_variable_name(slot, k))
        return table[var]

    def _slot_variable_name(self, slot: str, k: int) -> str:
        """The name of slot ``slot`` (the ``k``-th of ``slot_specs``) beside its variable:
        TensorFlow's ``<var>/<optimizer name>``, ``<var>/<optimizer name>_1``..."""
        return self._name if k == 0 else f"{self._name}_{k}"

    def _non_slot_variable(self, name: str, initial: float) -> Variable:
        if name not in self._non_slot:
            graph = get_default_graph()
            with graph.name_scope(None), graph.control_dependencies(None):
                self._non_slot[name] = Variable(np.float32(initial), trainable=False, name=name)
        return self._non_slot[name]

    def _update_op(self, var: Variable, g: Tensor, slots: dict[str, Variable], hyper: dict[str, Tensor]) -> Operation:
        names = list(hyper)

        def compute(ev: Any, op: Operation, xs: list[Any]) -> list[Any]:
            h = {n: fnp.astype(x, var.dtype) for n, x in zip(names, xs[1:])}
            self._apply(ev, var, fnp.astype(xs[0], var.dtype), slots, h)
            return []

        graph = var.graph
        # A variable on a cluster's task is updated there, as TensorFlow colocates updates:
        # the gradient travels once instead of the variable and its slots both ways. On this
        # process's devices the update's arithmetic goes where the op's block says.
        remote = names_task(var.device)
        with graph.device(None) if remote else contextlib.nullcontext(), \
                graph.device(var.device) if remote else contextlib.nullcontext():
            return graph.create_op(f"Apply{type(self).__name__.replace('Optimizer', '')}", [g, *hyper.values()],
                                   compute, name=f"update_{var.op.name.replace('/', '_')}", outputs=[])

    @abc.abstractmethod
    def _apply(self, ev: Any, var: Variable, g: Any, slots: dict[str, Variable], h: dict[str, Any]) -> None:
        """Assign ``var`` (and its slots, through ``ev``) their values after one step."""

    def _finish(self, updates: list[Operation], hyper: dict[str, Tensor]) -> list[Operation]:
        return updates


def _read(ev: Any, v: Variable) -> Any:
    return ev.read_variable(v)


class GradientDescentOptimizer(Optimizer):
    """``var -= learning_rate * g``."""

    def __init__(self, learning_rate: Any, use_locking: bool = False, name: str = "GradientDescent"):
        super().__init__(use_locking, name)
        self._lr = learning_rate

    def _hyper(self) -> dict[str, Any]:
        return {"lr": self._lr}

    def _apply(self, ev: Any, var: Variable, g: Any, slots: dict[str, Variable], h: dict[str, Any]) -> None:
        ev.assign_variable(var, fnp.subtract(_read(ev, var), fnp.multiply(h["lr"], g)))


class MomentumOptimizer(Optimizer):
    """``accum = momentum * accum + g; var -= lr * accum`` (Nesterov: ``var -= lr * (g + momentum * accum)``)."""

    slot_specs = (("momentum", lambda self: 0.0),)

    def __init__(self, learning_rate: Any, momentum: Any, use_locking: bool = False, name: str = "Momentum",
                 use_nesterov: bool = False):
        super().__init__(use_locking, name)
        self._lr, self._momentum, self._nesterov = learning_rate, momentum, use_nesterov

    def _hyper(self) -> dict[str, Any]:
        return {"lr": self._lr, "momentum": self._momentum}

    def _apply(self, ev: Any, var: Variable, g: Any, slots: dict[str, Variable], h: dict[str, Any]) -> None:
        acc = fnp.add(fnp.multiply(h["momentum"], _read(ev, slots["momentum"])), g)
        ev.assign_variable(slots["momentum"], acc)
        step = fnp.add(g, fnp.multiply(h["momentum"], acc)) if self._nesterov else acc
        ev.assign_variable(var, fnp.subtract(_read(ev, var), fnp.multiply(h["lr"], step)))


class AdagradOptimizer(Optimizer):
    """``accum += g**2; var -= lr * g / sqrt(accum)`` (accumulator starts at 0.1)."""

    slot_specs = (("accumulator", lambda self: self._initial),)

    def __init__(self, learning_rate: Any, initial_accumulator_value: float = 0.1, use_locking: bool = False,
                 name: str = "Adagrad"):
        if initial_accumulator_value <= 0.0:
            raise ValueError(f"initial_accumulator_value must be positive: {initial_accumulator_value}")
        super().__init__(use_locking, name)
        self._lr, self._initial = learning_rate, initial_accumulator_value

    def _hyper(self) -> dict[str, Any]:
        return {"lr": self._lr}

    def _apply(self, ev: Any, var: Variable, g: Any, slots: dict[str, Variable], h: dict[str, Any]) -> None:
        acc = fnp.add(_read(ev, slots["accumulator"]), fnp.square(g))
        ev.assign_variable(slots["accumulator"], acc)
        ev.assign_variable(var, fnp.subtract(_read(ev, var), fnp.multiply(h["lr"], fnp.multiply(g, fnp.rsqrt(acc)))))


def _shrink(v: Any, l1: Any, l2: Any, lr: Any) -> Any:
    """The proximal step of l1 and l2 regularization: ``sign(v) * max(|v| - lr*l1, 0) / (1 + lr*l2)``."""
    kept = fnp.maximum(fnp.subtract(fnp.abs(v), fnp.multiply(lr, l1)), 0)
    return fnp.divide(fnp.multiply(fnp.sign(v), kept), fnp.add(1, fnp.multiply(lr, l2)))


class ProximalGradientDescentOptimizer(Optimizer):
    """A gradient step then the proximal step of l1 and l2 regularization (FOBOS):
    ``v = var - lr*g; var = sign(v) * max(|v| - lr*l1, 0) / (1 + lr*l2)``."""

    def __init__(self, learning_rate: Any, l1_regularization_strength: float = 0.0,
                 l2_regularization_strength: float = 0.0, use_locking: bool = False,
                 name: str = "ProximalGradientDescent"):
        super().__init__(use_locking, name)
        self._lr, self._l1, self._l2 = learning_rate, l1_regularization_strength, l2_regularization_strength

    def _hyper(self) -> dict[str, Any]:
        return {"lr": self._lr, "l1": self._l1, "l2": self._l2}

    def _apply(self, ev: Any, var: Variable, g: Any, slots: dict[str, Variable], h: dict[str, Any]) -> None:
        step = fnp.subtract(_read(ev, var), fnp.multiply(h["lr"], g))
        ev.assign_variable(var, _shrink(step, h["l1"], h["l2"], h["lr"]))


class ProximalAdagradOptimizer(Optimizer):
    """Adagrad's step then the proximal step of l1 and l2 regularization at Adagrad's rate:
    ``accum += g**2; r = lr / sqrt(accum); v = var - r*g; var = sign(v) * max(|v| - r*l1, 0)
    / (1 + r*l2)`` (accumulator starts at 0.1)."""

    slot_specs = (("accumulator", lambda self: self._initial),)

    def __init__(self, learning_rate: Any, initial_accumulator_value: float = 0.1,
                 l1_regularization_strength: float = 0.0, l2_regularization_strength: float = 0.0,
                 use_locking: bool = False, name: str = "ProximalAdagrad"):
        if initial_accumulator_value <= 0.0:
            raise ValueError(f"initial_accumulator_value must be positive: {initial_accumulator_value}")
        super().__init__(use_locking, name)
        self._lr, self._initial = learning_rate, initial_accumulator_value
        self._l1, self._l2 = l1_regularization_strength, l2_regularization_strength

    def _hyper(self) -> dict[str, Any]:
        return {"lr": self._lr, "l1": self._l1, "l2": self._l2}

    def _apply(self, ev: Any, var: Variable, g: Any, slots: dict[str, Variable], h: dict[str, Any]) -> None:
        acc = fnp.add(_read(ev, slots["accumulator"]), fnp.square(g))
        ev.assign_variable(slots["accumulator"], acc)
        rate = fnp.multiply(h["lr"], fnp.rsqrt(acc))
        step = fnp.subtract(_read(ev, var), fnp.multiply(rate, g))
        ev.assign_variable(var, _shrink(step, h["l1"], h["l2"], rate))


class FtrlOptimizer(Optimizer):
    """Follow-the-regularized-leader (McMahan et al. 2013; wide linear models' optimizer), as
    TensorFlow's ApplyFtrl: ``n = accum + g**2; linear += g' - (n**-p - accum**-p) / lr * var;
    var = (clip(linear, -l1, l1) - linear) / (n**-p / lr + 2*l2); accum = n`` with p the
    learning rate power (-0.5) and g' the gradient plus ``2 * l2_shrinkage * var``. Slots
    ``<var>/Ftrl`` (accum, from ``initial_accumulator_value``) and ``<var>/Ftrl_1`` (linear)."""

    slot_specs = (("accum", lambda self: self._initial), ("linear", lambda self: 0.0))

    def __init__(self, learning_rate: Any, learning_rate_power: float = -0.5, initial_accumulator_value: float = 0.1,
                 l1_regularization_strength: float = 0.0, l2_regularization_strength: float = 0.0,
                 use_locking: bool = False, name: str = "Ftrl", accum_name: str | None = None,
                 linear_name: str | None = None, l2_shrinkage_regularization_strength: float = 0.0):
        if learning_rate_power > 0.0:
            raise ValueError(f"learning_rate_power must be <= 0, got {learning_rate_power}")
        if initial_accumulator_value < 0.0:
            raise ValueError(f"initial_accumulator_value must be >= 0, got {initial_accumulator_value}")
        for what, value in (("l1", l1_regularization_strength), ("l2", l2_regularization_strength),
                            ("l2_shrinkage", l2_shrinkage_regularization_strength)):
            if value < 0.0:
                raise ValueError(f"{what}_regularization_strength must be >= 0, got {value}")
        super().__init__(use_locking, name)
        self._lr, self._power, self._initial = learning_rate, float(learning_rate_power), initial_accumulator_value
        self._l1, self._l2 = l1_regularization_strength, l2_regularization_strength
        self._shrinkage = l2_shrinkage_regularization_strength
        self._accum_name, self._linear_name = accum_name, linear_name

    def _slot_variable_name(self, slot: str, k: int) -> str:
        given = self._accum_name if slot == "accum" else self._linear_name
        return given or super()._slot_variable_name(slot, k)

    def _hyper(self) -> dict[str, Any]:
        return {"lr": self._lr, "l1": self._l1, "l2": self._l2, "shrinkage": self._shrinkage}

    def _apply(self, ev: Any, var: Variable, g: Any, slots: dict[str, Variable], h: dict[str, Any]) -> None:
        accum, linear, w = _read(ev, slots["accum"]), _read(ev, slots["linear"]), _read(ev, var)
        new = fnp.add(accum, fnp.square(g))

        def scaled(a: Any) -> Any:   # a ** -power: sqrt(a) for TensorFlow's default
            return fnp.sqrt(a) if self._power == -0.5 else fnp.power(a, -self._power)
        g_shrunk = fnp.add(g, fnp.multiply(fnp.multiply(2.0, h["shrinkage"]), w))
        linear = fnp.add(linear, fnp.subtract(g_shrunk, fnp.multiply(fnp.divide(fnp.subtract(scaled(new),
                                                                                         scaled(accum)), h["lr"]), w)))
        numer = fnp.subtract(fnp.clip(linear, fnp.negative(h["l1"]), h["l1"]), linear)
        denom = fnp.add(fnp.divide(scaled(new), h["lr"]), fnp.multiply(2.0, h["l2"]))
        ev.assign_variable(slots["accum"], new)
        ev.assign_variable(slots["linear"], linear)
        ev.assign_variable(var, fnp.divide(numer, denom))


class AdadeltaOptimizer(Optimizer):
    """``accum = rho*accum + (1-rho)*g**2; update = sqrt(accum_update + eps) / sqrt(accum + eps) * g;
    accum_update = rho*accum_update + (1-rho)*update**2; var -= lr * update``."""

    slot_specs = (("accum", lambda self: 0.0), ("accum_update", lambda self: 0.0))

    def __init__(self, learning_rate: Any = 0.001, rho: Any = 0.95, epsilon: Any = 1e-8, use_locking: bool = False,
                 name: str = "Adadelta"):
        super().__init__(use_locking, name)
        self._lr, self._rho, self._eps = learning_rate, rho, epsilon

    def _hyper(self) -> dict[str, Any]:
        return {"lr": self._lr, "rho": self._rho, "eps": self._eps}

    def _apply(self, ev: Any, var: Variable, g: Any, slots: dict[str, Variable], h: dict[str, Any]) -> None:
        rho, eps = h["rho"], h["eps"]
        acc = fnp.add(fnp.multiply(rho, _read(ev, slots["accum"])), fnp.multiply(fnp.subtract(1, rho), fnp.square(g)))
        upd = fnp.multiply(fnp.divide(fnp.sqrt(fnp.add(_read(ev, slots["accum_update"]), eps)),
                                      fnp.sqrt(fnp.add(acc, eps))), g)
        ev.assign_variable(slots["accum"], acc)
        ev.assign_variable(slots["accum_update"], fnp.add(fnp.multiply(rho, _read(ev, slots["accum_update"])),
                                                          fnp.multiply(fnp.subtract(1, rho), fnp.square(upd))))
        ev.assign_variable(var, fnp.subtract(_read(ev, var), fnp.multiply(h["lr"], upd)))


class RMSPropOptimizer(Optimizer):
    """``ms = decay*ms + (1-decay)*g**2`` (ms starts at ones); ``mom = momentum*mom + lr*g/sqrt(ms + eps)``;
    ``var -= mom``; centered: the denominator is ``sqrt(ms - mg**2 + eps)``, ``mg`` the mean gradient."""

    slot_specs = (("rms", lambda self: 1.0), ("momentum", lambda self: 0.0), ("mg", lambda self: 0.0))

    def __init__(self, learning_rate: Any, decay: Any = 0.9, momentum: Any = 0.0, epsilon: Any = 1e-10,
                 use_locking: bool = False, centered: bool = False, name: str = "RMSProp"):
        super().__init__(use_locking, name)
        self._lr, self._decay, self._momentum, self._eps, self._centered = learning_rate, decay, momentum, \
            epsilon, centered
        if not centered:
            self.slot_specs = self.slot_specs[:2]

    def _hyper(self) -> dict[str, Any]:
        return {"lr": self._lr, "decay": self._decay, "momentum": self._momentum, "eps": self._eps}

    def _apply(self, ev: Any, var: Variable, g: Any, slots: dict[str, Variable], h: dict[str, Any]) -> None:
        decay = h["decay"]
        ms = fnp.add(fnp.multiply(decay, _read(ev, slots["rms"])), fnp.multiply(fnp.subtract(1, decay), fnp.square(g)))
        ev.assign_variable(slots["rms"], ms)
        denom = ms
        if self._centered:
            mg = fnp.add(fnp.multiply(decay, _read(ev, slots["mg"])), fnp.multiply(fnp.subtract(1, decay), g))
            ev.assign_variable(slots["mg"], mg)
            denom = fnp.subtract(ms, fnp.square(mg))
        mom = fnp.add(fnp.multiply(h["momentum"], _read(ev, slots["momentum"])),
                      fnp.multiply(h["lr"], fnp.multiply(g, fnp.rsqrt(fnp.add(denom, h["eps"])))))
        ev.assign_variable(slots["momentum"], mom)
        ev.assign_variable(var, fnp.subtract(_read(ev, var), mom))


class AdamOptimizer(Optimizer):
    """``lr_t = lr * sqrt(1 - beta2**t) / (1 - beta1**t); m = beta1*m + (1-beta1)*g;
    v = beta2*v + (1-beta2)*g**2; var -= lr_t * m / (sqrt(v) + epsilon)`` (slots ``m``, ``v``
    as ``<var>/Adam``, ``<var>/Adam_1``; the powers of beta1 and beta2 are the variables
    ``beta1_power``, ``beta2_power``, updated after every variable's step)."""

    slot_specs = (("m", lambda self: 0.0), ("v", lambda self: 0.0))

    def __init__(self, learning_rate: Any = 0.001, beta1: Any = 0.9, beta2: Any = 0.999, epsilon: Any = 1e-8,
                 use_locking: bool = False, name: str = "Adam"):
        super().__init__(use_locking, name)
        self._lr, self._beta1, self._beta2, self._eps = learning_rate, beta1, beta2, epsilon

    def _hyper(self) -> dict[str, Any]:
        return {"lr": self._lr, "beta1": self._beta1, "beta2": self._beta2, "eps": self._eps}

    def _hyper_tensors(self) -> dict[str, Tensor]:
        self._non_slot_variable("beta1_power", float(self._beta1))
        self._non_slot_variable("beta2_power", float(self._beta2))
        return super()._hyper_tensors()

    def _apply(self, ev: Any, var: Variable, g: Any, slots: dict[str, Variable], h: dict[str, Any]) -> None:
        b1, b2 = h["beta1"], h["beta2"]
        b1p = fnp.astype(_read(ev, self._non_slot["beta1_power"]), var.dtype)
        b2p = fnp.astype(_read(ev, self._non_slot["beta2_power"]), var.dtype)
        lr_t = fnp.divide(fnp.multiply(h["lr"], fnp.sqrt(fnp.subtract(1, b2p))), fnp.subtract(1, b1p))
        m = fnp.add(fnp.multiply(b1, _read(ev, slots["m"])), fnp.multiply(fnp.subtract(1, b1), g))
        v = fnp.add(fnp.multiply(b2, _read(ev, slots["v"])), fnp.multiply(fnp.subtract(1, b2), fnp.square(g)))
        ev.assign_variable(slots["m"], m)
        ev.assign_variable(slots["v"], v)
        ev.assign_variable(var, fnp.subtract(_read(ev, var),
                                             fnp.divide(fnp.multiply(lr_t, m), fnp.add(fnp.sqrt(v), h["eps"]))))

    def _finish(self, updates: list[Operation], hyper: dict[str, Tensor]) -> list[Operation]:
        graph = get_default_graph()
        p1, p2 = self._non_slot["beta1_power"], self._non_slot["beta2_power"]

        def compute(ev: Any, op: Operation, xs: list[Any]) -> list[Any]:
            ev.assign_variable(p1, fnp.multiply(_read(ev, p1), fnp.astype(xs[0], p1.dtype)))
            ev.assign_variable(p2, fnp.multiply(_read(ev, p2), fnp.astype(xs[1], p2.dtype)))
            return []

        with graph.control_dependencies(updates):
            fin = graph.create_op("UpdateBetaPowers", [hyper["beta1"], hyper["beta2"]], compute, name="update",
                                  outputs=[])
        return [fin]


# ---- global step and schedules ----------------------------------------------------------------------------------


def get_global_step(graph: Any = None) -> Variable | None:
    g = graph or get_default_graph()
    found = g.get_collection(GraphKeys.GLOBAL_STEP)
    return found[0] if found else None


def create_global_step(graph: Any = None) -> Variable:
    g = graph or get_default_graph()
    if get_global_step(g) is not None:
        raise ValueError("global_step already exists")
    with g.as_default(), g.name_scope(None), g.control_dependencies(None):
        step = Variable(np.int64(0), trainable=False, name="global_step",
                        collections=[GraphKeys.GLOBAL_VARIABLES, GraphKeys.GLOBAL_STEP])
    return step


def get_or_create_global_step(graph: Any = None) -> Variable:
    """The graph's ``global_step`` variable (an int64 counter), created on first use."""
    return get_global_step(graph) or create_global_step(graph)
