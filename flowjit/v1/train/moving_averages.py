"""``tf.train.ExponentialMovingAverage``: shadow copies of variables (or tensors) that follow
them with an exponential moving average, as TensorFlow 1.x keeps them for evaluation.

``apply(var_list)`` makes one shadow variable per variable, named ``<variable>/<name>``
(``w/ExponentialMovingAverage``) beside it (its device), not trainable, starting at the
variable's initial value, and returns the op that moves every shadow toward its variable:
``shadow -= (1 - decay) * (shadow - value)``. With ``num_updates`` (the global step, say)
the decay is ``min(decay, (1 + num_updates) / (10 + num_updates))``, so the first updates
follow the variable closely. A tensor's shadow starts at zero, and with ``zero_debias`` its
average is divided by ``1 - decay ** updates`` as Adam corrects its moments.
``variables_to_restore()`` names each averaged variable by its shadow's name, so a
``tf.train.Saver`` built on it loads the averages into the model's own variables.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from flowjit.v1 import ops
from flowjit.v1.control_flow import group
from flowjit.v1.graph import GraphKeys, Operation, Tensor, get_default_graph
from flowjit.v1.variables import Variable, assign, assign_add, assign_sub, global_variables, trainable_variables

_FLOATS = ("float16", "float32", "float64")


class ExponentialMovingAverage:
    """Exponential moving averages of variables or tensors (the module docstring)."""

    def __init__(self, decay: float, num_updates: Any = None, zero_debias: bool = False,
                 name: str = "ExponentialMovingAverage"):
        decay = float(decay)
        if not 0.0 <= decay <= 1.0:
            raise ValueError(f"ExponentialMovingAverage(decay={decay!r}): the decay is the weight each update "
                             "keeps of the old average, between 0 and 1 (TensorFlow's examples use 0.999 or 0.9999)")
        self._decay = decay
        self._num_updates = num_updates
        self._zero_debias = bool(zero_debias)
        self._name = name
        self._averages: dict[Any, Variable] = {}
        # A tensor's zero-debiased average: its biased shadow and its update count.
        self._debias: dict[Any, tuple[Variable, Variable]] = {}

    @property
    def name(self) -> str:
        """The suffix of the shadows' names (``w/<name>``) and the apply op's name."""
        return self._name

    def average_name(self, var: Variable | Tensor) -> str:
        """The name of ``var``'s shadow (also the key ``variables_to_restore`` gives it):
        ``<its op name>/<name>``, whether or not ``apply`` made it yet."""
        return f"{var.op.name}/{self._name}"

    def average(self, var: Variable | Tensor) -> Variable | None:
        """The shadow variable holding ``var``'s average; None when ``apply`` was not given it."""
        return self._averages.get(var)

    def apply(self, var_list: Sequence[Variable | Tensor] | None = None) -> Operation:
        """Make the shadows of ``var_list`` (default: every trainable variable) and return the
        op that updates them all; run it after each training step (``tf.control_dependencies``
        on the train op). A variable or tensor given twice, here or in an earlier ``apply``, is
        an error, as is one that is not float16, float32 or float64."""
        items = list(trainable_variables() if var_list is None else var_list)
        for v in items:
            if not isinstance(v, (Variable, Tensor)):
                raise TypeError(f"ExponentialMovingAverage.apply: {v!r} is neither a tf.Variable nor a tensor")
            if v.dtype.name not in _FLOATS:
                raise TypeError(f"ExponentialMovingAverage.apply: the variables must be float16, float32 or "
                                f"float64; {v.name} is {v.dtype.name}")
            if v in self._averages:
                raise ValueError(f"ExponentialMovingAverage.apply: a moving average is already kept for {v.name}")
        graph = get_default_graph()
        for v in items:
            with graph.name_scope(None), graph.name_scope(v.op.name + "/"), graph.control_dependencies(None), \
                    graph.device(None), graph.device(v.device):   # a shadow lives beside what it follows
                start = v.initial_value if isinstance(v, Variable) else ops.zeros(v.shape.as_list(), v.dtype)
                self._averages[v] = Variable(start, trainable=False, name=self._name)
                if isinstance(v, Tensor) and self._zero_debias:
                    self._debias[v] = (Variable(ops.zeros(v.shape.as_list(), v.dtype), trainable=False,
                                                name=self._name + "_biased"),
                                       Variable(np.float32(0.0), trainable=False, name=self._name + "_local_step"))
            if isinstance(v, Variable):
                graph.add_to_collection(GraphKeys.MOVING_AVERAGE_VARIABLES, v)
        with graph.name_scope(self._name):
            decay = ops.constant(self._decay, dtype="float32")
            if self._num_updates is not None:
                n = ops.cast(self._num_updates, "float32")
                decay = ops.minimum(decay, (1.0 + n) / (10.0 + n))
            updates = [self._update(v, decay) for v in items]
            return group(*updates, name=self._name)

    def _update(self, v: Variable | Tensor, decay: Tensor) -> Any:
        shadow = self._averages[v]
        value = ops.convert_to_tensor(v)   # a variable read after the control dependencies in effect
        keep = ops.cast(decay, v.dtype.name)
        if v not in self._debias:
            return assign_sub(shadow, (shadow.value() - value) * (1.0 - keep))
        # TensorFlow's zero debiasing: a biased average from zero and the updates counted,
        # the average being the biased one over 1 - decay ** count.
        biased, count = self._debias[v]
        new_biased = assign_sub(biased, (biased.value() - value) * (1.0 - keep))
        new_count = assign_add(count, np.float32(1.0))
        scale = 1.0 - ops.cast(ops.pow(decay, new_count), v.dtype.name)
        return assign(shadow, new_biased / scale)

    def variables_to_restore(self, moving_avg_variables: Sequence[Variable] | None = None) -> dict[str, Variable]:
        """The ``var_list`` of a ``tf.train.Saver`` that loads the averages into the model's
        variables: each variable of ``moving_avg_variables`` (default: the graph's moving
        average variables and trainable variables) under its shadow's name, every other global
        variable under its own name (the shadows themselves left out)."""
        graph = get_default_graph()
        if moving_avg_variables is None:
            moving_avg_variables = [*graph.get_collection(GraphKeys.MOVING_AVERAGE_VARIABLES), *trainable_variables()]
        averaged = list(dict.fromkeys(moving_avg_variables))
        names: dict[str, Variable] = {self.average_name(v): v for v in averaged}
        shadows = {id(s) for s in self._averages.values()} | {id(s) for pair in self._debias.values() for s in pair}
        for v in global_variables():
            if v not in averaged and id(v) not in shadows:
                names.setdefault(v.op.name, v)
        return names


def moving_average_variables(scope: str | None = None) -> list[Variable]:
    """The variables an ``ExponentialMovingAverage.apply`` averages (``tf.moving_average_variables``)."""
    return get_default_graph().get_collection(GraphKeys.MOVING_AVERAGE_VARIABLES, scope)
