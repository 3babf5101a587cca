"""merge_loops and the scan VJP's residuals: one forward loop per training step, the reverse
step reads saved products instead of computing them again, and the same results."""

from __future__ import annotations

import numpy as np

import flowjit as fj
from flowjit.ir import interpret, parse, verify
from flowjit.passes.merge_loops import merge_loops
from flowjit.passes.prune import prune
from tests.finite_differences import central_differences

RNG = np.random.default_rng(7)
H = 4


def _sigmoid(z):
    return 1.0 / (1.0 + fj.exp(-z))


def _lstm_loss(wx, wh, xs):
    def cell(carry, x):
        h, c = carry
        z = x @ wx + h @ wh
        i, f = _sigmoid(z[:, :H]), _sigmoid(z[:, H:2 * H])
        g, o = fj.tanh(z[:, 2 * H:3 * H]), _sigmoid(z[:, 3 * H:])
        c = f * c + i * g
        return (o * fj.tanh(c), c), None

    zeros = fj.zeros((2, H), xs.dtype)
    (h, _), _ = fj.scan(cell, (zeros, zeros), xs)
    return (h * h).sum()


def _args():
    return [RNG.standard_normal((3, 4 * H)) * 0.5, RNG.standard_normal((H, 4 * H)) * 0.5,
            RNG.standard_normal((5, 2, 3))]


def _scans(fn):
    return [op for op in fn.body.ops if op.name == "scan"]


def test_a_training_step_through_a_scan_runs_the_forward_loop_once():
    args = _args()
    step = fj.function(fj.value_and_grad(_lstm_loss, argnums=(0, 1)))
    fused = step.ir(*args, stage="prune")
    forward = [op for op in _scans(fused) if not op.attrs["reverse"]]
    assert len(forward) == 1, fused
    (loss, (gwx, gwh)) = step(*args)
    np.testing.assert_allclose(loss, _lstm_loss(*args), rtol=1e-12)
    for i, g in enumerate((gwx, gwh)):
        np.testing.assert_allclose(g, central_differences(_lstm_loss, args, i), rtol=1e-6, atol=1e-8)


def test_the_reverse_step_reads_saved_products_and_computes_gates_again():
    args = _args()
    fn = fj.function(fj.grad(_lstm_loss, argnums=(0, 1))).ir(*args, stage="prune")
    (fwd,) = [op for op in _scans(fn) if not op.attrs["reverse"]]
    (rev,) = [op for op in _scans(fn) if op.attrs["reverse"]]
    # Residuals: the carry entering each step (c, h) and the pre-activation z, one array.
    stacked = [r.type.shape for r in fwd.results[2:]]
    assert sorted(stacked) == sorted([(5, 2, H), (5, 2, H), (5, 2, 4 * H)]), stacked
    # The reverse step's products all read a cotangent: none recomputes x @ wx or h @ wh.
    (body,) = rev.blocks
    products = [op for op in body.ops if op.name == "matmul"]
    # dh, d wh, d wx; no dx: nothing asks for the inputs' gradient, and prune drops its stack.
    assert len(products) == 3, [str(op) for op in products]
    assert [op.name for op in body.ops].count("exp") == 3     # the gates' sigmoids, once each


SMALL_IN_BIG = """func @f(%x: f32[3], %w: f32[3]) -> (f32[3], f32[3], f32[4,3]) {
  %0 = scan %x, %w {num_carry=1, num_xs=0, length=4} : f32[3] {
    ^(%1: f32[3], %2: f32[3])
    %3 = mul %1, %2 : f32[3]
    %4 = sin %3 : f32[3]
    return %4
  }
  %5, %6 = scan %x, %w {num_carry=1, num_xs=0, length=4} : f32[3], f32[4,3] {
    ^(%7: f32[3], %8: f32[3])
    %9 = mul %8, %7 : f32[3]
    %10 = sin %9 : f32[3]
    %11 = cos %9 : f32[3]
    return %10, %11
  }
  return %0, %5, %6
}
"""


def test_the_larger_loop_stands_for_the_smaller_one_and_results_are_unchanged():
    fn = parse(SMALL_IN_BIG)
    x, w = RNG.standard_normal(3).astype(np.float32), RNG.standard_normal(3).astype(np.float32)
    want = interpret(fn, [x, w])
    out = prune(merge_loops(parse(SMALL_IN_BIG)))
    verify(out)
    assert len(_scans(out)) == 1
    for a, b in zip(interpret(out, [x, w]), want):
        np.testing.assert_array_equal(a, b)


def test_loops_that_differ_stay_apart():
    # Another input, another length, another step: nothing merges.
    for old, new in [("%5, %6 = scan %x, %w", "%5, %6 = scan %w, %x"),
                     ("length=4} : f32[3], f32[4,3]", "length=5} : f32[3], f32[5,3]"),
                     ("%10 = sin %9", "%10 = cos %9")]:
        text = SMALL_IN_BIG.replace(old, new)
        if "length=5" in new:
            text = text.replace("f32[4,3]) {", "f32[5,3]) {")
        fn = merge_loops(parse(text))
        verify(fn)
        assert len(_scans(fn)) == 2, new
