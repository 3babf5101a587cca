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
    plans: dict = {}
    with np.errstate(all="ignore"):
        for b in k.buffers:
            if b.role == "temp":
                arrays[b.name] = np.zeros([int(_ev(n, env, {}, arrays, plans)) for n in b.shape], b.dtype.np)
        _run(k.body, env, {}, arrays, plans)


def _run(body: tuple, env: dict, accs: dict, arrays: dict, plans: dict) -> None:
    for s in body:
        if isinstance(s, Loop):
            start, stop = int(_ev(s.start, env, accs, arrays, plans)), int(_ev(s.stop, env, accs, arrays, plans))
            for i in range(start, stop, s.step):
                inner = dict(env)
                inner[s.var] = np.int64(i)
                _run(s.body, inner, dict(accs), arrays, plans)
        elif isinstance(s, Let):
            env[s.name] = _ev(s.value, env, accs, arrays, plans)
        elif isinstance(s, Store):
            idx = tuple(int(_ev(i, env, accs, arrays, plans)) for i in s.index)
            a = arrays[s.buffer]
            a[np.unravel_index(_offset(idx, a.shape), a.shape)] = _ev(s.value, env, accs, arrays, plans)
        elif isinstance(s, Accumulator):
            accs[s.name] = _Acc(s.kind, s.dtype, _ev(s.start, env, accs, arrays, plans))
        elif isinstance(s, Update):
            acc = accs[s.name]
            v = _ev(s.value, env, accs, arrays, plans)
            # The combining expressions are built afresh each step (of constants): evaluated
            # without a plan kept for them.
            if acc.kind in ("argmax", "argmin"):
                wins = scalar.arg_wins(acc.kind, Const(scalar.to_python(acc.value, acc.dtype), acc.dtype),
                                       Const(scalar.to_python(v, acc.dtype), acc.dtype))
                if not acc.found or _ev(wins, env, accs, arrays):
                    acc.value, acc.found = v, True
                    acc.position = _ev(s.position, env, accs, arrays, plans)
            else:
                step = scalar.combine(acc.kind, Const(scalar.to_python(acc.value, acc.dtype), acc.dtype),
                                      Const(scalar.to_python(v, s.value.dtype), s.value.dtype))
                acc.value = _ev(step, env, accs, arrays)
        elif isinstance(s, If):
            _run(s.then if _ev(s.cond, env, accs, arrays, plans) else s.orelse, env, accs, arrays, plans)
        else:
            raise TypeError(f"not a loop-IR statement: {s!r}")


def _ev(e: Expr, env: dict, accs: dict, arrays: dict, plans: dict | None = None):
    # ``plans``: each expression's plan (``_plan``) by identity, with the expression, which
    # keeps its identity from being reused while the plan is kept.
    kept = plans.get(id(e)) if plans is not None else None
    if kept is None:
        kept = (e, _plan(e))
        if plans is not None:
            plans[id(e)] = kept
    vals: list = []
    for step in kept[1]:
        vals.append(step(vals, env, accs, arrays))
    return vals[-1]


def _plan(root: Expr) -> list:
    """``root`` as steps in evaluation order, each node of its DAG once (a complex power's
    squarings read each part of the last square twice per product: a walk of the tree
    would evaluate it exponentially often), each step a function of the values before it
    (by position), the variables, the accumulators and the arrays. A constant is converted
    once, here; an op calls its reference without an ``np.errstate`` of its own
    (``scalar.bare_reference``: the caller ignores floating-point errors around the kernel)."""
    steps: list = []
    slot: dict[int, int] = {}

    def visit(e: Expr) -> int:
        key = id(e)
        if key in slot:
            return slot[key]
        if isinstance(e, Const):
            value = scalar.bare_scalar(e.value, e.dtype)
            step = lambda vals, env, accs, arrays: value  # noqa: E731
        elif isinstance(e, Var):
            name = e.name
            step = lambda vals, env, accs, arrays: env[name]  # noqa: E731
        elif isinstance(e, Load):
            step = _load_step(e.buffer, [visit(i) for i in e.index])
        elif isinstance(e, AccValue):
            step = _acc_step(e.name)
        else:
            assert isinstance(e, Prim)
            step = _prim_step(e.op, e.dtype, [visit(a) for a in e.args])
        slot[key] = len(steps)
        steps.append(step)
        return slot[key]
    visit(root)
    return steps


def _load_step(buffer: str, index: list[int]):
    def step(vals, env, accs, arrays):
        a = arrays[buffer]
        return a[np.unravel_index(_offset(tuple(int(vals[i]) for i in index), a.shape), a.shape)]
    return step


def _acc_step(name: str):
    def step(vals, env, accs, arrays):
        acc = accs[name]
        return acc.position if acc.kind in ("argmax", "argmin") else acc.value
    return step


def _prim_step(op: str, d, args: list[int]):
    if op == "select":
        c, a, b = args
        return lambda vals, env, accs, arrays: vals[a] if vals[c] else vals[b]
    fn = scalar.bare_reference(op, d)
    if len(args) == 1:
        (a,) = args
        return lambda vals, env, accs, arrays: fn(vals[a])
    if len(args) == 2:
        a, b = args
        return lambda vals, env, accs, arrays: fn(vals[a], vals[b])
    return lambda vals, env, accs, arrays: fn(*[vals[i] for i in args])


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
