"""``collapse_nests`` on hand-built kernels: which nests become one loop, and that the kernel
computes the same values after it."""

from __future__ import annotations

import numpy as np

from flowjit.ir.dtypes import float32, int64
from flowjit.lowering import evaluate, print_kernel, verify_kernel
from flowjit.lowering.collapse import collapse_nests
from flowjit.lowering.loops import Buffer, Kernel, Let, Load, Loop, Prim, SizeVar, Store, Var, loop_count
from flowjit.lowering.scalar import constant

I = int64  # noqa: E741
SHAPES = {"in0": (30,), "out0": (2, 3, 4)}
SIZES = {"n0": 30, "n1": 2, "n2": 3, "n3": 4}


def _nest(position, also_c: bool = True, also_i: bool = False) -> Kernel:
    """out0[i, j, c] = in0[position(i, j, c)] + in0[c] (a per-channel column, without
    ``also_c``) + in0[i] (with ``also_i``): a reshape's source read inside a nest over out0's
    axes, the loop over c inside those over i and j."""
    i, j, c = Var("i", I), Var("j", I), Var("c", I)
    value = Load("in0", (Var("l", I),), float32)
    if also_c:
        value = Prim("add", (value, Load("in0", (c,), float32)), float32)
    if also_i:
        value = Prim("add", (value, Load("in0", (i,), float32)), float32)
    inner = (Let("l", position(i, j, c)), Store("out0", (i, j, c), value))
    body = (Loop("i", constant(0, I), Var("n1", I), 1, (
        Loop("j", constant(0, I), Var("n2", I), 1, (
            Loop("c", constant(0, I), Var("n3", I), 1, inner),)),)),)
    return Kernel("nest", (Buffer("in0", "in", float32, 1), Buffer("out0", "out", float32, 3)),
                  (SizeVar("n0", "in0", 0), SizeVar("n1", "out0", 0), SizeVar("n2", "out0", 1),
                   SizeVar("n3", "out0", 2)), body)


def _add(*xs):
    out = xs[0]
    for x in xs[1:]:
        out = Prim("add", (out, x), I)
    return out


def _mul(a, b):
    return Prim("mul", (a, b), I)


def _collapsed(k: Kernel) -> Kernel:
    out = Kernel(k.name, k.buffers, k.sizes, collapse_nests(k.body, SHAPES, SIZES))
    verify_kernel(out)
    return out


def _same_values(k: Kernel, collapsed: Kernel) -> None:
    x = np.arange(30, dtype=np.float32) * 1.5
    want, got = np.zeros((2, 3, 4), np.float32), np.full((2, 3, 4), np.nan, np.float32)
    evaluate(k, [x], [want])
    evaluate(collapsed, [x], [got])
    np.testing.assert_array_equal(got, want)


def test_a_position_scaled_by_the_inner_extent_plus_the_inner_variable_collapses_the_outer_loops():
    # l = ((i * 12 + 1) + j * 4) + c: the position of (i, j) times 4, plus the offset and c.
    k = _nest(lambda i, j, c: _add(_mul(i, constant(12, I)), constant(1, I), _mul(j, constant(4, I)), c))
    out = _collapsed(k)
    assert loop_count(out.body) == 2, print_kernel(out)
    assert "l: i64 = (((i_j * 4) + 1) + c)" in print_kernel(out), print_kernel(out)
    _same_values(k, out)


def test_a_nest_whose_inner_variable_completes_the_position_is_one_loop():
    # c read only in the position (no column of its own): the whole nest is one loop, the
    # position's offset kept.
    k = _nest(lambda i, j, c: _add(_mul(i, constant(12, I)), constant(1, I), _mul(j, constant(4, I)), c),
              also_c=False)
    out = _collapsed(k)
    assert loop_count(out.body) == 1 and "l: i64 = (i_c + 1)" in print_kernel(out), print_kernel(out)
    _same_values(k, out)


def test_a_scaled_sum_and_a_subtracted_term_are_read_through():
    # l = (i * 3 + j) * 4 + c - (0 - 2): a sum of the nest's variables scaled, and a
    # subtraction of a term without them.
    k = _nest(lambda i, j, c: Prim("sub", (_add(_mul(_add(_mul(i, constant(3, I)), j), constant(4, I)), c),
                                           Prim("sub", (constant(0, I), constant(2, I)), I)), I))
    out = _collapsed(k)
    assert loop_count(out.body) == 2, print_kernel(out)
    _same_values(k, out)


def test_weights_that_are_not_the_row_major_ones_keep_the_nest():
    # i weighs half of j: (i, j) are not read as one row-major position, scaled or not.
    k = _nest(lambda i, j, c: _add(_mul(i, constant(4, I)), _mul(j, constant(8, I)), c))
    out = _collapsed(k)
    assert loop_count(out.body) == 3, print_kernel(out)
    _same_values(k, out)


def test_a_nest_variable_read_apart_from_the_position_keeps_the_nest():
    # i also indexes a load of its own (in0[i] added): no single position replaces it.
    k = _nest(lambda i, j, c: _add(_mul(_add(_mul(i, constant(3, I)), j), constant(4, I)), c), also_i=True)
    out = _collapsed(k)
    assert loop_count(out.body) == 3, print_kernel(out)
    _same_values(k, out)
