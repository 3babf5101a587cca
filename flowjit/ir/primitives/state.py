"""State: ``assign``, the explicit update of a Variable.

A Variable enters a Function as an argument marked ``var``; ``%new = assign %w, %value``
says that when the call finishes the variable holds ``%value`` (its result is that new
value, so later ops and the runtime can refer to it). It is ``stateful``: never merged,
never pruned, never fused; the runtime rebinds the variable to the result's buffer.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from flowjit.ir.errors import ShapeError
from flowjit.ir.registry import declare
from flowjit.ir.types import TensorType


def _assign_rule(in_types: Sequence[TensorType]) -> TensorType:
    var, value = in_types
    if var != value:
        raise ShapeError(f"a variable of type {var} cannot be assigned a value of type {value}: "
                         "variables keep their shape and dtype (cast or reshape the value)")
    return var


def _assign_impl(var: np.ndarray, value: np.ndarray) -> np.ndarray:
    return value  # the variable's new buffer; the runtime copies it if it aliases an input


declare("assign", kind="stateful", role="variable_update", rule=_assign_rule, impl=_assign_impl, arity=2,
        differentiable=False, doc="assign(var, value): the variable's value once the call finishes")
