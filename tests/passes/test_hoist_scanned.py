"""hoist_scanned: a scan step's product of its scanned slice and a loop constant becomes one
batched product before the loop; what depends on the carry stays; the same results."""

from __future__ import annotations

import numpy as np
import pytest

import flowjit as fj
from flowjit.ir import interpret, parse, verify
from flowjit.passes.hoist_scanned import hoist_scanned
from flowjit.passes.prune import prune
from flowjit.passes.sink_scanned import sink_scanned
from tests.finite_differences import central_differences

RNG = np.random.default_rng(3)

RNN = """func @f(%h0: f32[2,4], %xs: f32[5,2,3], %wx: f32[3,4], %wh: f32[4,4]) -> (f32[2,4], f32[5,2,4]) {
  %0, %1 = scan %h0, %xs, %wx, %wh {num_carry=1, num_xs=1, length=5, reverse=REVERSE} : f32[2,4], f32[5,2,4] {
    ^(%2: f32[2,4], %3: f32[2,3], %4: f32[3,4], %5: f32[4,4])
    %6 = constant {value=2.0} : f32[]
    %7 = mul %3, %6 : f32[2,3]
    %8 = matmul %7, %4 : f32[2,4]
    %9 = matmul %2, %5 : f32[2,4]
    %10 = add %8, %9 : f32[2,4]
    %11 = tanh %10 : f32[2,4]
    %12 = exp %3 : f32[2,3]
    %13 = reduce_sum %12 {axes=(1,), keepdims=true} : f32[2,1]
    %14 = mul %11, %13 : f32[2,4]
    return %11, %14
  }
  return %0, %1
}
"""


def _args():
    return [RNG.standard_normal(s).astype(np.float32) for s in ((2, 4), (5, 2, 3), (3, 4), (4, 4))]


@pytest.mark.parametrize("reverse", ["false", "true"])
def test_the_input_projection_leaves_the_loop_and_results_are_unchanged(reverse):
    text = RNN.replace("REVERSE", reverse)
    args = _args()
    want = interpret(parse(text), args)
    fn = prune(hoist_scanned(parse(text)))
    verify(fn)
    (scan,) = [op for op in fn.body.ops if op.name == "scan"]
    before = [op for op in fn.body.ops[:fn.body.ops.index(scan)] if op.name == "matmul"]
    assert len(before) == 1 and before[0].results[0].type.shape[0] in (5, 10), fn
    assert scan.attrs["num_xs"] == 2
    (body,) = scan.blocks
    # In the loop: the product with the carry, the slice's own cheap work (exp, sum).
    assert [op.name for op in body.ops].count("matmul") == 1
    assert "exp" in [op.name for op in body.ops] and "mul" in [op.name for op in body.ops]
    for got, exp in zip(interpret(fn, args), want):
        np.testing.assert_allclose(got, exp, rtol=1e-5, atol=1e-6)


def test_a_product_that_reads_the_carry_stays_in_the_loop():
    text = RNN.replace("REVERSE", "false").replace("%8 = matmul %7, %4", "%8 = matmul %2, %5 ")
    text = text.replace("%9 = matmul %2, %5", "%9 = matmul %2, %5")
    fn = hoist_scanned(parse(text))
    (scan,) = [op for op in fn.body.ops if op.name == "scan"]
    assert scan.attrs["num_xs"] == 1


def test_a_compiled_rnn_and_its_gradient_match_the_interpreter():
    def loss(wx, wh, xs):
        h, hs = fj.scan(lambda h, x: (fj.tanh(x @ wx + h @ wh),) * 2, fj.zeros((2, 4)), xs)
        return (hs ** 2).sum() + h.sum()

    args = [RNG.standard_normal((3, 4)) * 0.5, RNG.standard_normal((4, 4)) * 0.5, RNG.standard_normal((6, 2, 3))]
    step = fj.function(fj.value_and_grad(loss, argnums=(0, 1, 2)))
    (fused_scan,) = [op for op in step.ir(*args, stage="hoist_scanned").body.ops
                     if op.name == "scan" and not op.attrs["reverse"]]
    assert fused_scan.attrs["num_xs"] == 2
    got = step(*args)
    want = fj.function(fj.value_and_grad(loss, argnums=(0, 1, 2)), interpret=True)(*args)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-12)
    for g, w in zip(got[1], want[1]):
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12)


# ---- sink_scanned and prune's unused stacks ------------------------------------------------------
STACKED = """func @f(%h0: f32[2,4], %xs: f32[5,2,4], %w: f32[4,4], %v: f32[4,3]) -> (f32[2,4], f32[5,2,3]) {
  %0, %1, %2 = scan %h0, %xs, %w, %v {num_carry=1, num_xs=1, length=5, reverse=true} \
: f32[2,4], f32[5,2,3], f32[5,2,4] {
    ^(%3: f32[2,4], %4: f32[2,4], %5: f32[4,4], %6: f32[4,3])
    %7 = matmul %3, %5 : f32[2,4]
    %8 = add %7, %4 : f32[2,4]
    %9 = tanh %8 : f32[2,4]
    %10 = matmul %9, %6 : f32[2,3]
    %11 = exp %10 : f32[2,3]
    %12 = sin %9 : f32[2,4]
    return %9, %11, %12
  }
  return %0, %1
}
"""


def test_a_product_that_only_feeds_a_stacked_output_runs_once_after_the_loop():
    args = [RNG.standard_normal(s).astype(np.float32) for s in ((2, 4), (5, 2, 4), (4, 4), (4, 3))]
    want = interpret(parse(STACKED), args)
    fn = sink_scanned(parse(STACKED))
    verify(fn)
    (scan,) = [op for op in fn.body.ops if op.name == "scan"]
    (body,) = scan.blocks
    assert [op.name for op in body.ops].count("matmul") == 1          # the carry's product stays
    after = fn.body.ops[fn.body.ops.index(scan) + 1:]
    assert [op.name for op in after].count("matmul") == 1 and "exp" in [op.name for op in after]
    # The unused stacked sin is gone from the loop (prune), with the op making it.
    assert "sin" not in [op.name for op in body.ops] and len(scan.results) == 2
    for got, exp in zip(interpret(fn, args), want):
        np.testing.assert_allclose(got, exp, rtol=1e-5, atol=1e-6)


def test_prune_drops_a_stacked_output_nothing_reads():
    text = STACKED.replace("return %0, %1\n", "return %0\n").replace(
        ") -> (f32[2,4], f32[5,2,3]) {", ") -> (f32[2,4]) {")
    fn = prune(parse(text))
    verify(fn)
    (scan,) = [op for op in fn.body.ops if op.name == "scan"]
    assert len(scan.results) == 1 and [op.name for op in scan.blocks[0].ops] == ["matmul", "add", "tanh"]


def _rnn_loss(w, u, xs):
    h, hs = fj.scan(lambda h, x: (fj.tanh(h @ w + x @ u),) * 2, fj.zeros((3, 4)), xs)
    return (hs ** 2).sum()


def _rnn_args(seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((4, 4)) * 0.5, rng.standard_normal((2, 4)) * 0.5, rng.standard_normal((7, 3, 2))]


def test_a_weight_gradient_summed_over_the_steps_is_one_product_after_the_loop():
    # d W = sum_t h_t.T @ dz_t accumulates in the reverse scan's carry; after sink_scanned
    # the carry is a loop constant and the sum one product of the stacked rows.
    loss, args = _rnn_loss, _rnn_args(5)
    step = fj.function(fj.grad(loss, argnums=(0, 1)))
    before = step.ir(*args, stage="hoist_scanned")
    after = step.ir(*args, stage="sink_scanned")
    (rev_before,) = [op for op in before.body.ops if op.name == "scan" and op.attrs["reverse"]]
    (rev_after,) = [op for op in after.body.ops if op.name == "scan" and op.attrs["reverse"]]
    assert rev_after.attrs["num_carry"] == rev_before.attrs["num_carry"] - 2     # d w, d u
    tail = after.body.ops[after.body.ops.index(rev_after) + 1:]
    products = [op for op in tail if op.name == "matmul"]
    assert sorted(op.results[0].type.shape for op in products) == [(2, 4), (4, 4)]
    assert all(op.inputs[1].type.shape[0] == 7 * 3 for op in products)    # the steps' rows joined
    want = fj.function(fj.grad(loss, argnums=(0, 1)), interpret=True)(*args)
    for g, w in zip(step(*args), want):
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12)
    for i, g in enumerate(step(*args)):
        np.testing.assert_allclose(g, central_differences(loss, args, i), rtol=1e-6, atol=1e-8)


def test_a_weight_gradient_reads_the_stacked_rows_transposed_in_place():
    # dWx = sum_t x_t.T @ dz_t over the scanned inputs [T, B, I]: the joined product's left
    # operand [I, T*B] is the rows [T*B, I] transposed, which the BLAS reads in place; a 3-D
    # transpose of the stack had copied all T*B*I elements every step of training (the zoo
    # LSTM's three transposes: 0.36 of its 8.5 ms).
    loss, args = _rnn_loss, _rnn_args(6)
    step = fj.function(fj.grad(loss, argnums=(0, 1)))
    after = step.ir(*args, stage="sink_scanned")
    (rev,) = [op for op in after.body.ops if op.name == "scan" and op.attrs["reverse"]]
    products = [op for op in after.body.ops[after.body.ops.index(rev) + 1:] if op.name == "matmul"]
    assert len(products) == 2
    for op in products:
        lhs = op.inputs[0].producer
        assert lhs.name == "transpose" and lhs.attrs["perm"] == (1, 0), lhs
        assert lhs.inputs[0].producer.name == "reshape" and lhs.inputs[0].producer.inputs[0].type.ndim == 3
    from flowjit.codegen_cpu.program_plan import Gemm, KernelCall, walk_steps
    step(*args)
    (entry,) = step._cache.values()
    plan = entry.executable._program.plan
    gemms = [s for s in walk_steps(plan.steps) if isinstance(s, Gemm) and s.k == 7 * 3]
    assert len(gemms) == 2 and all(g.trans_a for g in gemms)
    assert not [s for s in walk_steps(plan.steps) if isinstance(s, KernelCall) and "transpose" in s.kernel.name
                and 7 in s.dims]
    want = fj.function(fj.grad(loss, argnums=(0, 1)), interpret=True)(*args)
    for g, w in zip(step(*args), want):
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12)
