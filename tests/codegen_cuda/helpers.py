"""Shared by the CUDA backend's test modules: fused blocks from traced functions, the
interpreter's values at any op, and one block per registry primitive case.

Imports nothing of numba.cuda, so the simulator and the PTX cases can both use it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

import flowjit as fj
from flowjit.ir import Builder, new_function
from flowjit.ir import dtypes as fjd
from flowjit.ir.core import Block, Function, Op, Value
from flowjit.ir.interpreter import run_op
from flowjit.ir.registry import get
from flowjit.ir.types import TensorType
from flowjit.lowering import verify_kernel
from flowjit.lowering.loops import (
    INDEX,
    Accumulator,
    AccValue,
    Buffer,
    Const,
    If,
    Kernel,
    Let,
    Load,
    Loop,
    SizeVar,
    Store,
    Update,
    Var,
)
from flowjit.lowering.scalar import apply
from tests.registry.case import kernel_tolerance
from tests.registry.test_generic import _domain_inputs


def fused(f: Callable[..., Any], *args: np.ndarray) -> Function:
    """``f`` traced for ``args`` and lowered through the pipeline up to fusion."""
    return fj.function(f).ir(*args, stage="fused")


def fusion_ops(fn: Function) -> list[Op]:
    """The top-level fusion ops of ``fn``, in program order."""
    return [op for op in fn.body.ops if op.primitive.role == "kernel"]


def values_at(fn: Function, args: list[np.ndarray]) -> dict[int, np.ndarray]:
    """Every top-level value of ``fn`` on ``args`` as the interpreter computes it, by id."""
    env = {a.id: np.asarray(x) for a, x in zip(fn.args, args)}
    for op in fn.body.ops:
        for r, x in zip(op.results, run_op(op, [env[v.id] for v in op.inputs])):
            env[r.id] = x
    return env


def case_block(case) -> tuple[Block, Function, list[np.ndarray]]:
    """A fusion block holding the case's one op, a function running it as a fusion op, and
    the case's inputs (moved into the primitive's domain)."""
    prim = get(case.prim)
    arrays = case.make_inputs(np.random.default_rng(0))
    if prim.kind == "elementwise":
        arrays = _domain_inputs(prim, arrays)
    types = [TensorType(a.shape, a.dtype) for a in arrays]
    body = Block([Value(t) for t in types])
    body.set_returns(Builder(body).emit(prim, body.args, case.attrs))
    fn, b = new_function("k", types)
    fn.body.set_returns(b.emit("fusion", fn.args, {"name": case.prim}, blocks=[body]))
    return body, fn, arrays


def assert_matches(got: list[np.ndarray], want: list[np.ndarray]) -> None:
    """Same shapes and dtypes, values within ``kernel_tolerance`` (nan where nan)."""
    assert len(got) == len(want)
    for g, w in zip(got, want):
        g, w = np.asarray(g), np.asarray(w)
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, g.dtype, w.shape, w.dtype)
        if g.dtype.kind in "fc":
            np.testing.assert_allclose(g, w, equal_nan=True, **kernel_tolerance(g.dtype))
        else:
            np.testing.assert_array_equal(g, w)


def hand_built_kernel() -> Kernel:
    """A loop-IR kernel written by hand (verified), with statements today's lowering does
    not write: an If, a loop from 1 in steps of 2, an argmin updated under a condition, a
    top-level sum whose value a later nest reads. Input f32[n0, n1]; outputs f32[n0, n1],
    i64[n0], f32[], f32[n0]."""
    f32, f64 = fjd.float32, fjd.float64
    i, j, i2, j2, k, m, i3 = (Var(n, INDEX) for n in ("i", "j", "i2", "j2", "k", "m", "i3"))
    n0, n1 = Var("n0", INDEX), Var("n1", INDEX)
    t, u = Var("t", f32), Var("u", f32)
    body = (
        Loop("i", Const(0, INDEX), n0, 1, (
            Accumulator("best", "argmin", f32, Const(np.inf, f32)),
            Loop("j", Const(1, INDEX), n1, 2, (
                Let("t", Load("in0", (i, j), f32)),
                If(apply("gt", t, Const(-1.0, f32)), (Update("best", t, j),)),
            )),
            Store("out1", (i,), AccValue("best", INDEX)),
            If(apply("lt", Load("in0", (i, Const(0, INDEX)), f32), Const(-0.5, f32)),
               (Store("out1", (i,), Const(-1, INDEX)),)),
        )),
        Loop("i2", Const(0, INDEX), n0, 1, (Loop("j2", Const(0, INDEX), n1, 1, (
            Let("u", Load("in0", (i2, j2), f32)),
            If(apply("gt", u, Const(0.0, f32)), (Store("out0", (i2, j2), apply("mul", u, Const(2.0, f32))),),
               (Store("out0", (i2, j2), apply("neg", u)),)),
        )),)),
        Accumulator("total", "sum", f64, Const(0.0, f64)),
        Loop("k", Const(0, INDEX), n0, 1, (Loop("m", Const(0, INDEX), n1, 1, (
            Update("total", apply("cast", Load("in0", (k, m), f32), to=f64)),)),)),
        Let("s", apply("cast", AccValue("total", f64), to=f32)),
        Store("out2", (), Var("s", f32)),
        Loop("i3", Const(0, INDEX), n0, 1, (
            Store("out3", (i3,), apply("add", Var("s", f32), Load("in0", (i3, Const(0, INDEX)), f32))),)),
    )
    kernel = Kernel("by_hand", (Buffer("in0", "in", f32, 2), Buffer("out0", "out", f32, 2),
                                Buffer("out1", "out", INDEX, 1), Buffer("out2", "out", f32, 0),
                                Buffer("out3", "out", f32, 1)),
                    (SizeVar("n0", "in0", 0), SizeVar("n1", "in0", 1)), body)
    verify_kernel(kernel)
    return kernel


def mlp_loss(w1, b1, w2, x, y):
    """A classifier's loss: relu layer, linear layer, log-softmax cross-entropy."""
    h = fj.nn.relu(x @ w1 + b1)
    lp = fj.nn.log_softmax(h @ w2)
    return -fj.mean(fj.take_along_axis(lp, y[:, None], axis=1))


def train_step(w1, b1, w2, x, y):
    """The loss and its gradients: forward and backward kernels (row sums of the softmax
    backward, column sums of the bias gradient, selects of relu's)."""
    return fj.value_and_grad(mlp_loss, argnums=(0, 1, 2))(w1, b1, w2, x, y)


def train_inputs(rng: np.random.Generator) -> tuple[np.ndarray, ...]:
    f32 = np.float32
    return (rng.standard_normal((12, 16)).astype(f32) * 0.3, rng.standard_normal(16).astype(f32),
            rng.standard_normal((16, 5)).astype(f32) * 0.3, rng.standard_normal((8, 12)).astype(f32),
            rng.integers(0, 5, 8).astype(np.int32))
