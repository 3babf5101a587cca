"""The NumPy reference interpreter: runs a Function op by op with each primitive's ``impl``.

It is the correctness oracle: compiled backends are tested against it, and it is what
``fj.function(interpret=True)`` runs. It favours obvious correctness over speed.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from flowjit.ir.core import Block, Function, Op
from flowjit.ir.errors import FlowjitTypeError


def interpret(fn: Function, args: Sequence[object]) -> list[np.ndarray]:
    """Run ``fn`` on ``args`` (arrays or scalars of the argument types); return its results."""
    if len(args) != len(fn.args):
        raise FlowjitTypeError(f"@{fn.name} takes {len(fn.args)} arguments, got {len(args)}")
    values = []
    for a, x in zip(fn.args, args):
        arr = np.asarray(x)
        if arr.shape != a.type.shape:
            raise FlowjitTypeError(f"@{fn.name}: argument %{a.name} must be {a.type}, got shape {arr.shape}")
        values.append(arr.astype(a.type.dtype.np, copy=False))
    return run_block(fn.body, values)


def run_op(op: Op, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Run one op with its NumPy reference on ``inputs``; return its results."""
    if op.blocks:
        out = op.primitive.impl(*inputs, blocks=op.blocks, **op.attrs)
    else:
        out = op.primitive.impl(*inputs, **op.attrs)
    return [np.asarray(x) for x in (out if isinstance(out, (tuple, list)) else (out,))]


def run_block(block: Block, args: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Run the ops of ``block`` with its arguments bound to ``args``; return its returns."""
    env: dict[int, np.ndarray] = {a.id: x for a, x in zip(block.args, args)}
    for op in block.ops:
        for r, x in zip(op.results, run_op(op, [env[v.id] for v in op.inputs])):
            env[r.id] = x
    return [env[v.id] for v in block.returns]
