"""User-defined derivatives: ``stop_gradient`` and ``custom_vjp_call``.

- ``%y = stop_gradient %x``: ``x`` itself, through which no cotangent flows (an
  elementwise copy, declared non-differentiable, so ``backward`` passes it nothing).
- ``%out... = custom_vjp_call %out..., %res..., %args..., %c... {num_out=k, num_res=r,
  name=f} { bwd }``: the results are the first ``k`` inputs (the primal outputs, computed by
  ordinary ops before it); its VJP inlines ``bwd``, which takes the ``r`` residuals, the
  cotangents of the ``k`` outputs and the captures ``c``, and returns one cotangent per
  argument. The outputs and residuals get no cotangent through it, so the user's rule
  replaces the derivative of the ops that computed them. The block is traced when the
  user calls the function (``flowjit/tracer/custom_gradients.py``), so the IR stays
  printable, parseable and cacheable; the ``inline_calls`` pass replaces the op by its
  inputs before the pipeline's first pass, so fusion never sees it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from flowjit.ir.dtypes import ALL_DTYPES
from flowjit.ir.errors import ShapeError
from flowjit.ir.registry import attr, declare, defvjp, same_dtype
from flowjit.ir.types import TensorType


def _stop_gradient_rule(in_types: Sequence[TensorType]) -> TensorType:
    (t,) = in_types
    return TensorType(t.shape, same_dtype(in_types))


declare("stop_gradient", kind="elementwise", rule=_stop_gradient_rule, arity=1,
        impl=lambda x: np.array(x, copy=True), template="a", dtypes=ALL_DTYPES, differentiable=False,
        doc="stop_gradient(x): x, with a zero derivative (no cotangent flows through it)")


def _types(values: Sequence[Any]) -> str:
    return "(" + ", ".join(str(v.type if hasattr(v, "type") else v) for v in values) + ")"


def _custom_vjp_rule(in_types: Sequence[TensorType], *, blocks: Sequence[Any], num_out: int, num_res: int,
                     name: str) -> list[TensorType]:
    (bwd,) = blocks
    if num_out < 0 or num_res < 0 or num_out + num_res > len(in_types):
        raise ShapeError(f"custom_vjp_call of {name}: num_out={num_out}, num_res={num_res} with "
                         f"{len(in_types)} inputs")
    outs = list(in_types[:num_out])
    res = list(in_types[num_out:num_out + num_res])
    n_args = len(bwd.returns)
    args = list(in_types[num_out + num_res:num_out + num_res + n_args])
    caps = list(in_types[num_out + num_res + n_args:])
    want = res + outs + caps
    if [a.type for a in bwd.args] != want:
        raise ShapeError(f"custom_vjp_call of {name}: the bwd block takes {_types(bwd.args)}, but the op passes "
                         f"{_types(want)} (residuals, output cotangents, captures)")
    if [v.type for v in bwd.returns] != args:
        raise ShapeError(f"custom_vjp_call of {name}: the bwd block returns {_types(bwd.returns)}, one cotangent "
                         f"per argument {_types(args)}")
    return outs


def _custom_vjp_impl(*inputs: np.ndarray, blocks: Sequence[Any], num_out: int, num_res: int,
                     name: str) -> tuple[np.ndarray, ...]:
    return tuple(inputs[:num_out])


declare("custom_vjp_call", kind="control", role="custom_vjp", rule=_custom_vjp_rule, impl=_custom_vjp_impl,
        arity=None, num_blocks=1,
        attrs={"num_out": attr("int"), "num_res": attr("int"), "name": attr("str", "")},
        doc="custom_vjp_call(outs..., residuals..., args..., captures...): the outputs, differentiated by "
            "the bwd block")


def _custom_vjp_vjp(e: Any, gs: Sequence[Any], ys: Sequence[Any], *inputs: Any, blocks: Sequence[Any],
                    num_out: int, num_res: int, name: str) -> list:
    from flowjit.ir.core import Block, clone_ops_into
    (bwd,) = blocks
    n_args = len(bwd.returns)
    res = list(inputs[num_out:num_out + num_res])
    caps = list(inputs[num_out + num_res + n_args:])
    # Cloned apart, then placed where the builder stands (it may insert mid-block).
    scratch = Block()
    grads = clone_ops_into(bwd, scratch, res + list(gs) + caps)
    b = e.builder
    for op in scratch.ops:
        if b.index is None:
            b.block.append(op)
        else:
            b.block.insert(b.index, op)
            b.index += 1
    # Outputs, residuals and captures are constants for the user's rule.
    return [None] * (num_out + num_res) + list(grads) + [None] * len(caps)


defvjp("custom_vjp_call", _custom_vjp_vjp)
