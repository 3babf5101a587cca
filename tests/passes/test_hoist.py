"""hoist_invariants: IR text in, IR text out, and the same results."""

from __future__ import annotations

import numpy as np

import flowjit as fj
from flowjit.ir import interpret, parse, print_function, verify
from flowjit.passes.hoist import hoist_invariants

WHILE = """func @f(%x: f32[4], %w: f32[4]) -> (f32[4]) {
  %0 = while %x, %w {num_carry=1, maximum_iterations=3} : f32[4] {
    ^(%1: f32[4], %2: f32[4])
    %3 = reduce_sum %1 {axes=(0,)} : f32[]
    %4 = constant {value=100.0} : f32[]
    %5 = lt %3, %4 : bool[]
    return %5
  } {
    ^(%6: f32[4], %7: f32[4])
    %8 = exp %7 : f32[4]
    %9 = constant {value=2.0} : f32[]
    %10 = mul %8, %9 : f32[4]
    %11 = add %6, %10 : f32[4]
    return %11
  }
  return %0
}
"""

HOISTED = """func @f(%x: f32[4], %w: f32[4]) -> (f32[4]) {
  %0 = exp %w : f32[4]
  %1 = constant {value=2.0} : f32[]
  %2 = mul %0, %1 : f32[4]
  %3 = while %x, %w, %2 {num_carry=1, maximum_iterations=3} : f32[4] {
    ^(%4: f32[4], %5: f32[4], %6: f32[4])
    %7 = reduce_sum %4 {axes=(0,)} : f32[]
    %8 = constant {value=100.0} : f32[]
    %9 = lt %7, %8 : bool[]
    return %9
  } {
    ^(%10: f32[4], %11: f32[4], %12: f32[4])
    %13 = add %10, %12 : f32[4]
    return %13
  }
  return %3
}
"""


def test_invariant_ops_move_before_the_loop_and_become_loop_constants():
    fn = hoist_invariants(parse(WHILE))
    verify(fn)
    assert print_function(fn) == HOISTED
    x, w = np.arange(4, dtype=np.float32), np.linspace(0, 1, 4).astype(np.float32)
    np.testing.assert_array_equal(interpret(fn, [x, w])[0], interpret(parse(WHILE), [x, w])[0])


def test_nothing_moves_when_every_op_reads_the_carry():
    text = WHILE.replace("%8 = exp %7", "%8 = exp %6")
    assert print_function(hoist_invariants(parse(text))) == print_function(parse(text))


def test_scan_bodies_are_hoisted_and_results_stay_the_same():
    w = np.random.default_rng(0).standard_normal((3, 3))
    xs = np.random.default_rng(1).standard_normal((5, 3))

    def f(xs, w):
        return fj.scan(lambda h, x: (fj.tanh(h @ (w * 2).T + x + fj.exp(w).sum()), h.sum()), fj.zeros(3), xs)

    hoisted = fj.function(f).ir(xs, w, stage="hoist_invariants")
    (scan,) = [op for op in hoisted.body.ops if op.name == "scan"]
    inside = [op.name for op in scan.blocks[0].ops]
    assert "exp" not in inside and "transpose" not in inside and inside.count("reduce_sum") == 1  # h.sum()
    for got, want in zip(fj.function(f)(xs, w), fj.function(f, interpret=True)(xs, w), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-12)
