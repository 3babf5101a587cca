"""lowering.hoist_columns: a nest's costly values that depend only on its innermost index
are computed once per index before the nest, with the same results."""

from __future__ import annotations

import numpy as np

import flowjit as fj
from flowjit.ir.dtypes import float32
from flowjit.lowering import evaluate, print_kernel, verify_kernel
from flowjit.lowering.hoist_columns import hoist_columns
from flowjit.lowering.loops import INDEX, Buffer, Const, If, Kernel, Let, Load, Loop, Prim, SizeVar, Store, Var
from tests.lowering.test_lowering import kernel_of
from tests.lowering.test_programs import check_fused

EPS = 1e-5


def normalize(x, v, g):
    # a batch norm's output: a square root and a division per channel
    return x / fj.sqrt(v / 100.0 + EPS) * g


def _innermost(body):
    for s in body:
        if isinstance(s, Loop):
            inner = list(_innermost(s.body))
            yield from inner if inner else [s]
        elif isinstance(s, If):
            yield from _innermost(s.then)


def _ops(e, out):
    if isinstance(e, Prim):
        out.add(e.op)
        for a in e.args:
            _ops(a, out)
    return out


def test_a_per_channel_square_root_is_computed_once_per_channel():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((6, 7, 5)).astype(np.float32)
    v = (rng.random(5) + 0.5).astype(np.float32)
    g = rng.standard_normal(5).astype(np.float32)
    k = kernel_of(normalize, x, v, g)
    text = print_kernel(k)
    assert len(k.temps) == 1, text
    ops: set = set()
    for s in list(_innermost(k.body))[-1].body:
        if isinstance(s, (Let, Store)):
            _ops(s.value, ops)
    assert "sqrt" not in ops and "div" in ops, text   # x / s stays: it reads x
    assert check_fused(normalize, x, v, g) == 1
    # The same IEEE operations in the same order: bit-identical to the interpreter.
    want = fj.function(normalize, backend="interpreter")(x, v, g)
    np.testing.assert_array_equal(fj.function(normalize)(x, v, g), want)


def test_no_element_of_an_empty_outer_axis_is_read():
    v = np.ones(5, np.float32)
    g = np.ones(5, np.float32)
    x = np.zeros((0, 7, 5), np.float32)
    k = kernel_of(normalize, x, v, g)
    assert any(isinstance(s, If) for s in k.body), print_kernel(k)
    assert fj.function(normalize)(x, v, g).shape == (0, 7, 5)


def _nest(inner_body: tuple) -> Kernel:
    """for i in 0..n0: for j in 0..n1: <inner_body>, over in0: f32[n1], out0: f32[n0, n1]."""
    bufs = (Buffer("in0", "in", float32, 1), Buffer("out0", "out", float32, 2))
    sizes = (SizeVar("n1", "in0", 0), SizeVar("n0", "out0", 0))
    body = (Loop("i", Const(0, INDEX), Var("n0", INDEX), 1,
                 (Loop("j", Const(0, INDEX), Var("n1", INDEX), 1, inner_body),)),)
    return Kernel("k", bufs, sizes, body)


def _fresh():
    n = [0]

    def fresh(prefix):
        n[0] += 1
        return f"{prefix}_h{n[0]}"
    return fresh


I, J = Var("i", INDEX), Var("j", INDEX)


def _hoisted(k: Kernel) -> Kernel:
    body, temps = hoist_columns(k.body, [s.name for s in k.sizes], _fresh())
    out = Kernel(k.name, k.buffers + tuple(temps), k.sizes, body)
    verify_kernel(out)
    return out


def test_the_hoisted_kernel_evaluates_as_the_original():
    t = Prim("sqrt", (Load("in0", (J,), float32),), float32)
    k = _nest((Let("a", t), Store("out0", (I, J), Prim("div", (Var("a", float32), Const(3.0, float32)), float32))))
    h = _hoisted(k)
    assert len(h.temps) == 1 and "sqrt" not in print_kernel(h).split("for i in")[1], print_kernel(h)
    x = np.array([1.0, 4.0, 9.0, 2.0], np.float32)
    want, got = np.zeros((3, 4), np.float32), np.zeros((3, 4), np.float32)
    evaluate(k, [x], [want])
    evaluate(h, [x], [got])
    np.testing.assert_array_equal(got, want)


def test_values_the_nest_writes_or_that_do_not_vary_stay_in_it():
    # reads out0, which the nest stores to: its value changes as the nest runs
    reads_output = Prim("sqrt", (Load("out0", (Const(0, INDEX), J), float32),), float32)
    k = _nest((Let("a", reads_output), Store("out0", (I, J), Var("a", float32))))
    assert _hoisted(k).body == k.body
    # the same for every element: LLVM keeps it in a register
    constant = Prim("sqrt", (Load("in0", (Const(0, INDEX),), float32),), float32)
    k = _nest((Let("a", constant), Store("out0", (I, J), Var("a", float32))))
    assert _hoisted(k).body == k.body
    # cheap: a load is no cheaper than a multiply
    cheap = Prim("mul", (Load("in0", (J,), float32), Const(2.0, float32)), float32)
    k = _nest((Let("a", cheap), Store("out0", (I, J), Var("a", float32))))
    assert _hoisted(k).body == k.body
