"""The loop IR's printer, verifier and scalar vocabulary on small hand-built kernels."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from flowjit.ir.dtypes import bool_, dtype, float32, float64, int32, int64
from flowjit.ir.registry import get
from flowjit.ir.types import TensorType
from flowjit.lowering import LoopIRError, evaluate, print_kernel, verify_kernel
from flowjit.lowering.evaluate import _ev
from flowjit.lowering.loops import (
    Accumulator,
    AccValue,
    Buffer,
    Kernel,
    Let,
    Load,
    Loop,
    Prim,
    SizeVar,
    Store,
    Update,
    Var,
)
from flowjit.lowering.scalar import apply, constant, expand

I = int64  # noqa: E741


def row_sum_kernel(body_override=None) -> Kernel:
    """out0[i] = sum_j in0[i, j] * 2."""
    i, j, n0, n1 = Var("i", I), Var("j", I), Var("n0", I), Var("n1", I)
    inner = (Let("t", apply("mul", Load("in0", (i, j), float32), constant(2, float32))),
             Update("acc", Var("t", float32)))
    body = (Loop("i", constant(0, I), n0, 1, (
        Accumulator("acc", "sum", float64, constant(0, float64)),
        Loop("j", constant(0, I), n1, 1, inner),
        Store("out0", (i,), apply("cast", AccValue("acc", float64), to=float32)),
    ), parallel=True),)
    return Kernel("row_sum", (Buffer("in0", "in", float32, 2), Buffer("out0", "out", float32, 1)),
                  (SizeVar("n0", "in0", 0), SizeVar("n1", "in0", 1)), body_override or body)


def test_printer_writes_one_statement_per_line_nested_by_indentation():
    assert print_kernel(row_sum_kernel()) == """\
kernel row_sum(in in0: f32[2], out out0: f32[1]):
  n0 = in0.shape[0]
  n1 = in0.shape[1]
  parallel for i in 0..n0:
    acc acc: sum f64 = 0.0:f64
    for j in 0..n1:
      t: f32 = (in0[i, j] * 2.0:f32)
      acc <- t
    out0[i] = f32(acc.value)
"""


def test_a_valid_kernel_verifies_and_evaluates():
    k = row_sum_kernel()
    verify_kernel(k)
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    out = np.zeros(3, np.float32)
    evaluate(k, [x], [out])
    np.testing.assert_array_equal(out, (x * 2).sum(axis=1))


def _broken(stmt) -> Kernel:
    n0 = Var("n0", I)
    return row_sum_kernel((Loop("i", constant(0, I), n0, 1, (stmt,)),))


@pytest.mark.parametrize("stmt, message", [
    (Store("out0", (Var("k", I),), constant(1.0, float32)), "k is used before it is defined"),
    (Store("in0", (Var("i", I), Var("i", I)), constant(1.0, float32)), "a store to in0, not an output or temp"),
    (Store("out0", (Var("i", I), Var("i", I)), constant(1.0, float32)), "out0 has rank 1, indexed with 2"),
    (Store("out0", (Var("i", I),), constant(1.0, float64)), "a f64 value stored into f32 out0"),
    (Update("acc", constant(1.0, float32)), "update of accumulator acc before its declaration"),
    (Let("x", Prim("add", (constant(1.0, float32), constant(1, I)), float32)), "add of mixed dtypes f32, i64"),
    (Let("x", Load("in0", (Var("i", I), constant(0.5, float32)), float32)), "an index of in0 is not int64"),
    (Let("i", constant(1, I)), "i is defined twice in one scope"),
    (Let("x", Prim("cast", (constant(1.0, float32),), bool_)), "a cast to bool"),
    (Let("x", AccValue("acc", float64)), "accumulator acc read before its declaration"),
])
def test_the_verifier_names_the_kernel_and_the_fault(stmt, message):
    with pytest.raises(LoopIRError, match=f"kernel row_sum: {message}"):
        verify_kernel(_broken(stmt))


def _eval(e):
    return _ev(e, {}, {}, {})


# Operands that hit every rule of the vocabulary: zeros of both signs, NaN, infinities,
# the integer extremes and -1 (the divisor whose quotient of MIN overflows).
FLOAT_VALUES = [0.0, -0.0, 1.0, -1.0, 2.5, -2.5, 3.0, -7.0, np.nan, np.inf, -np.inf, 1e-30]
INT_VALUES = [0, 1, -1, 2, -2, 7, -7, 10, -10]


@pytest.mark.parametrize("name", ["floor_div", "mod", "maximum", "minimum", "pow", "atan2", "sub", "div",
                                  "eq", "ne", "lt", "ge"])
@pytest.mark.parametrize("short", ["f32", "f64", "i32", "i64"])
def test_binary_vocabulary_matches_numpy_on_edge_values(name, short):
    prim, d = get(name), dtype(short)
    if d not in prim.dtypes:
        return
    values = FLOAT_VALUES if d.is_float else INT_VALUES + [int(np.iinfo(d.np).min), int(np.iinfo(d.np).max)]
    out = prim.rule([TensorType((), d)] * 2).dtype
    for a, b in itertools.product(values, values):
        if name == "pow" and d.is_int and b < 0:
            continue  # the registry defines it apart (C's 1 / a**-b), checked by the registry cases
        got = _eval(expand(prim.template, [constant(a, d), constant(b, d)], out))
        want = prim.impl(np.asarray(a, d.np), np.asarray(b, d.np))[()]
        assert got.dtype == want.dtype, (a, b)
        same = (np.isnan(want) and np.isnan(got)) if d.is_float and np.isnan(want) else got == want
        if d.is_float and want == 0 and got == 0:
            same = np.signbit(got) == np.signbit(want)
        assert same, f"{name}.{short}({a}, {b}) = {got}, NumPy {want}"


@pytest.mark.parametrize("name", ["sign", "abs", "isnan", "isfinite", "round", "floor", "neg"])
def test_unary_vocabulary_matches_numpy_on_edge_values(name):
    prim = get(name)
    for d in (float32, float64, int32, int64):
        if d not in prim.dtypes:
            continue
        out = bool_ if name in ("isnan", "isfinite") else d
        for a in (FLOAT_VALUES + [0.5, 1.5, -0.5, 2.5] if d.is_float else INT_VALUES):
            got = _eval(expand(prim.template, [constant(a, d)], out))
            want = prim.impl(np.asarray(a, d.np))[()]
            ok = (np.isnan(got) and np.isnan(want)) if d.is_float and out == d and np.isnan(want) else got == want
            if ok and out == d and d.is_float and want == 0:
                ok = np.signbit(got) == np.signbit(want)
            assert ok, f"{name}.{d.short}({a}) = {got}, NumPy {want}"


def test_transcendental_functions_are_named_calls_with_a_dtype():
    x = Var("x", float32)
    assert print_kernel(Kernel("k", (), (), (Let("y", expand(get("tanh").template, [x], float32)),))).splitlines()[1] \
        == "  y: f32 = tanh.f32(x)"
    # gelu's x**3: multiplies, not a pow call.
    assert expand(get("pow").template, [x, constant(3.0, float32)], float32) == apply("mul", apply("mul", x, x), x)


def test_the_verifier_checks_in_place_names():
    k = row_sum_kernel()
    bad = Kernel(k.name, k.buffers, k.sizes, k.body, (("in0",),))
    with pytest.raises(LoopIRError, match="kernel row_sum: out0 may not overwrite in0"):
        verify_kernel(bad)  # in0 has rank 2, out0 rank 1


def test_nodes_are_frozen_dataclasses_compared_by_class_and_value():
    import dataclasses

    from flowjit.lowering.loops import Const, If

    a, b = Var("a", int64), Var("a", int64)
    assert a == b and hash(a) == hash(b) and a is not b
    assert a != AccValue("a", int64)                      # same fields, another node
    assert Prim("add", (a, Const(1, int64)), int64) == Prim("add", (b, Const(1, int64)), int64)
    assert repr(Const(0.5, float32)) == "Const(value=0.5, dtype=fj.float32)"
    assert If(Var("c", bool_), ()) == If(Var("c", bool_), (), ())  # a default fills the field
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.name = "b"
    assert dataclasses.replace(a, name="b") == Var("b", int64)
    assert [f.name for f in dataclasses.fields(Loop)] == ["var", "start", "stop", "step", "body", "parallel", "stream",
                                                  "scalar", "block", "lanes"]
    assert len({Var("a", int64), Var("a", int64), Var("a", float32)}) == 2
