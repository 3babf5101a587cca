"""The NumPy reference interpreter: runs a Function op by op with each primitive's ``impl``.

It is the correctness oracle: compiled backends are tested against it, and it is what
``fj.function(interpret=True)`` runs. It favours obvious correctness over speed.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from flowjit.ir.core import Block, Function
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


def run_block(block: Block, args: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Run the ops of ``block`` with its arguments bound to ``args``; return its returns."""
    env: dict[int, np.ndarray] = {a.id: x for a, x in zip(block.args, args)}
    for op in block.ops:
        ins = [env[v.id] for v in op.inputs]
        out = op.primitive.impl(*ins, **op.attrs)
        outs = out if isinstance(out, (tuple, list)) else (out,)
        for r, x in zip(op.results, outs):
            env[r.id] = np.asarray(x)
    return [env[v.id] for v in block.returns]
