"""A NumPy evaluator of the loop IR: slow (a Python step per scalar op), for small shapes.

It is the oracle that tests the lowering before any renderer exists: each op runs as
``scalar.reference`` declares, in its own dtype, so a kernel evaluated here computes what a
correct renderer's machine code computes (up to the intrinsics' last-ulp differences).
"""

from __future__ import annotations

import collections
import math
from collections.abc import Mapping, Sequence

import numpy as np

from flowjit.ir.dtypes import int64
from flowjit.lowering import scalar
from flowjit.lowering.loops import (
    Accumulator,
    AccValue,
    Const,
    Expr,
    If,
    Kernel,
    Let,
    Load,
    Loop,
    Prim,
    Store,
    Update,
    Var,
    as_parts,
)


class _Acc:
    __slots__ = ("kind", "dtype", "value", "position", "found")

    def __init__(self, kind, dtype, value):
        self.kind, self.dtype, self.value = kind, dtype, value
        self.position, self.found = np.int64(0), False


def evaluate(k: Kernel, inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray]) -> None:
    """Run kernel ``k`` on ``inputs``, writing into ``outputs`` (arrays of the IR's dtypes
    and shapes, in the kernel's order; a complex one is read and written as its parts)."""
    arrays = {}
    for b, a in zip(k.inputs, inputs):
        arrays[b.name] = as_parts(np.asarray(a))
    for b, a in zip(k.outputs, outputs):
        arrays[b.name] = as_parts(a)
    env: dict = {s.name: np.int64(arrays[s.buffer].shape[s.dim]) for s in k.sizes}
    for b in k.buffers:
        if b.role == "temp":
            arrays[b.name] = np.zeros([int(_ev(n, env, {}, arrays)) for n in b.shape], b.dtype.np)
    with np.errstate(all="ignore"):
        _run(k.body, env, {}, arrays)


def _run(body: tuple, env: dict, accs: dict, arrays: dict) -> None:
    for s in body:
        if isinstance(s, Loop):
            start, stop = int(_ev(s.start, env, accs, arrays)), int(_ev(s.stop, env, accs, arrays))
            for i in range(start, stop, s.step):
                inner = dict(env)
                inner[s.var] = np.int64(i)
                _run(s.body, inner, dict(accs), arrays)
        elif isinstance(s, Let):
            env[s.name] = _ev(s.value, env, accs, arrays)
        elif isinstance(s, Store):
            idx = tuple(int(_ev(i, env, accs, arrays)) for i in s.index)
            a = arrays[s.buffer]
            a[np.unravel_index(_offset(idx, a.shape), a.shape)] = _ev(s.value, env, accs, arrays)
        elif isinstance(s, Accumulator):
            accs[s.name] = _Acc(s.kind, s.dtype, _ev(s.start, env, accs, arrays))
        elif isinstance(s, Update):
            acc = accs[s.name]
            v = _ev(s.value, env, accs, arrays)
            if acc.kind in ("argmax", "argmin"):
                wins = scalar.arg_wins(acc.kind, Const(scalar.to_python(acc.value, acc.dtype), acc.dtype),
                                       Const(scalar.to_python(v, acc.dtype), acc.dtype))
                if not acc.found or _ev(wins, env, accs, arrays):
                    acc.value, acc.found = v, True
                    acc.position = _ev(s.position, env, accs, arrays)
            else:
                step = scalar.combine(acc.kind, Const(scalar.to_python(acc.value, acc.dtype), acc.dtype),
                                      Const(scalar.to_python(v, s.value.dtype), s.value.dtype))
                acc.value = _ev(step, env, accs, arrays)
        elif isinstance(s, If):
            _run(s.then if _ev(s.cond, env, accs, arrays) else s.orelse, env, accs, arrays)
        else:
            raise TypeError(f"not a loop-IR statement: {s!r}")


def _ev(e: Expr, env: dict, accs: dict, arrays: dict, memo: dict | None = None):
    # ``memo``: each operation's value in this evaluation, by identity: an expression is a
    # DAG (a complex power's squarings read each part of the last square twice per product),
    # which a walk of its tree would evaluate exponentially often.
    if isinstance(e, Const):
        return scalar.bare_scalar(e.value, e.dtype)
    if isinstance(e, Var):
        return env[e.name]
    if isinstance(e, Load):
        idx = tuple(int(_ev(i, env, accs, arrays)) for i in e.index)
        a = arrays[e.buffer]
        return a[np.unravel_index(_offset(idx, a.shape), a.shape)]
    if isinstance(e, AccValue):
        acc = accs[e.name]
        return acc.position if acc.kind in ("argmax", "argmin") else acc.value
    assert isinstance(e, Prim)
    memo = {} if memo is None else memo
    key = id(e)
    if key in memo:
        return memo[key]
    args = [_ev(a, env, accs, arrays, memo) for a in e.args]
    value = (args[1] if args[0] else args[2]) if e.op == "select" else scalar.bare_reference(e.op, e.dtype)(*args)
    memo[key] = value
    return value


def evaluate_index(e: Expr, env: Mapping[str, int]) -> int | None:
    """The value of index expression ``e`` with the variables of ``env`` (any other variable
    0: a loop around it at its first iteration), as the renderer computes it; None when ``e``
    reads a buffer or an accumulator (a pass's question about addresses, not values)."""
    values = collections.defaultdict(lambda: np.int64(0), {k: np.int64(v) for k, v in env.items()})
    try:
        with np.errstate(all="ignore"):
            return int(_ev(e, values, {}, {}))
    except (KeyError, ZeroDivisionError):
        return None


__all__ = ["evaluate", "evaluate_index", "int64"]


def _offset(idx: tuple, shape: tuple) -> int:
    """The row-major offset of ``idx`` in an array of ``shape``, as the renderer computes it
    (Horner's sum). Each index must lie in its dimension, but one after a run of zeros may
    run on through the dimensions of those zeros (a collapsed nest indexes ``[p, 0, 0, f]``
    with ``f`` below the product of the three, ``lowering.collapse``): an index out of its
    place raises, as NumPy's would."""
    off = 0
    for d, (i, n) in enumerate(zip(idx, shape)):
        if not 0 <= i < n:
            z = 0
            while z < d and idx[d - z - 1] == 0:
                z += 1
            if not (z and 0 <= i < n * math.prod(shape[d - z:d])):
                raise IndexError(f"index {idx} is outside an array of shape {shape}")
        off = off * n + i
    if not 0 <= off < max(1, math.prod(shape)):
        raise IndexError(f"index {idx} is outside an array of shape {shape}")
    return off
