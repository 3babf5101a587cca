"""``fusion``: an op that owns a block of ops the fusion pass grouped into one kernel.

The block is isolated from above: its arguments are the op's inputs and its returns are
the op's results. ``name`` says what it computes (its ops, in order) and ``lines`` the
user lines it came from, so the fused IR stays readable.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from flowjit.ir.errors import ShapeError
from flowjit.ir.interpreter import run_block
from flowjit.ir.registry import attr, declare
from flowjit.ir.types import TensorType


def _fusion_rule(in_types: Sequence[TensorType], *, blocks: Sequence[Any], name: str, lines: str) -> list[TensorType]:
    (body,) = blocks
    arg_types = [a.type for a in body.args]
    if arg_types != list(in_types):
        raise ShapeError(f"block arguments ({', '.join(map(str, arg_types))}) differ from the inputs "
                         f"({', '.join(map(str, in_types))})")
    return [v.type for v in body.returns]


def _fusion_impl(*arrays: np.ndarray, blocks: Sequence[Any], name: str, lines: str) -> tuple[np.ndarray, ...]:
    return tuple(run_block(blocks[0], arrays))


declare("fusion", kind="control", role="kernel", rule=_fusion_rule, impl=_fusion_impl, arity=None, num_blocks=1,
        block_names=("kernel",),
        attrs={"name": attr("str"), "lines": attr("str", "")}, differentiable=False,
        doc="ops grouped into one kernel; runs its block")
