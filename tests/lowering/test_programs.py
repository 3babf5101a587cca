"""Fused programs lowered to the loop IR: every kernel of a traced program, verified,
printed and evaluated against the reference interpreter's run of its fusion block."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import flowjit as fj
from flowjit.ir.interpreter import run_op
from flowjit.lowering import evaluate, lower_block, print_kernel, verify_kernel
from tests.random_programs import random_program
from tests.registry.case import kernel_tolerance
from tests.test_programs import ZERO_D_REDUCTIONS, nested_pads, program_inputs, programs, run_program

# The evaluator steps through every scalar op in Python: kernels past this many elements
# are lowered and verified, not evaluated.
EVALUATE_MAX_ELEMENTS = 4000


def check_fused(f, *inputs: np.ndarray) -> int:
    """Run the fused program of ``f`` op by op with the interpreter; lower every fusion
    block, verify and print it, and evaluate it on the block's inputs against the
    interpreter's results. Returns the number of kernels evaluated."""
    fused = fj.function(f).ir(*inputs, stage="fused")
    env = {a.id: np.asarray(x) for a, x in zip(fused.args, inputs)}
    evaluated = 0
    for op in fused.body.ops:
        args = [env[v.id] for v in op.inputs]
        results = run_op(op, args)
        for r, x in zip(op.results, results):
            env[r.id] = x
        if op.primitive.role != "kernel":
            continue
        kernel = lower_block(op.blocks[0], op.attrs["name"], collapse=True)
        verify_kernel(kernel)
        text = print_kernel(kernel)
        if sum(math.prod(v.type.shape) for v in [*op.inputs, *op.results]) > EVALUATE_MAX_ELEMENTS:
            continue
        got = [np.zeros(r.type.shape, r.type.dtype.np) for r in op.results]
        evaluate(kernel, args, got)
        for g, w in zip(got, results):
            np.testing.assert_allclose(g, w, equal_nan=True, err_msg=text, **kernel_tolerance(w.dtype))
        evaluated += 1
    return evaluated


def test_random_programs_lower_and_evaluate_as_the_interpreter():
    evaluated = 0
    for seed in range(150):
        program = random_program(seed)
        try:
            evaluated += check_fused(program.function(fj), *program.inputs())
        except AssertionError as e:
            raise AssertionError(f"{program}\n{e}") from None
    assert evaluated >= 150  # most programs' kernels are small enough to evaluate


@pytest.mark.parametrize("name", sorted(ZERO_D_REDUCTIONS))
def test_zero_d_reductions(name):
    f, (shape, dtype) = ZERO_D_REDUCTIONS[name]
    x = np.asarray(np.random.default_rng(0).standard_normal(shape)).astype(dtype)
    assert check_fused(f, x) >= 1


def test_nested_pads_stay_small():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    check_fused(nested_pads(8), x)
    kernel_text = print_kernel(lower_block(fj.function(nested_pads(8)).ir(x, stage="fused").body.ops[0].blocks[0]))
    assert len(kernel_text.splitlines()) < 200


@settings(max_examples=120, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(programs(), st.integers(0, 2**31 - 1))
def test_hypothesis_programs_lower_and_evaluate_as_the_interpreter(program, seed):
    short, in_shapes, steps, n_out = program
    inputs = program_inputs(short, in_shapes, seed)
    check_fused(lambda *xs: run_program(steps, xs, n_out, traced=True), *inputs)


def _compiled_matches_interpreted(f, *args):
    got = fj.function(f)(*args)
    want = fj.function(f, interpret=True)(*args)
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, w.shape)
        np.testing.assert_array_equal(g, w)


def test_a_join_of_parts_all_empty_along_its_axis():
    # Every part of the concatenation is empty along the axis: the lowering took the last
    # part's piece of an empty list (IndexError); the result is empty and never read.
    def f(a):
        v = fj.broadcast_to(a, (1, 3))[2::2]  # shape (0, 3)
        return fj.log1p(v + v), fj.concatenate([v, v], axis=0)
    _compiled_matches_interpreted(f, np.ones(3, np.float32))


def test_a_row_value_of_an_empty_input_is_bound_where_its_store_is():
    # Two outputs in one nest, (0,) stored per row of (0, 6): the empty input's read was
    # bound in the innermost loop, after the row's store that used it (the loop-IR verifier
    # refused the kernel: "t9 is used before it is defined").
    def f(x1, x2):
        return x1 - x1, fj.concatenate([x2, x2], axis=1)
    _compiled_matches_interpreted(f, np.zeros(0, np.float32), np.zeros((0, 3), np.float32))

    def g(x):
        v = fj.matmul(fj.tanh(x), fj.swapaxes(fj.tanh(x), -1, -2))  # (0, 0)
        w = v * fj.tanh(v)
        return fj.matmul(fj.tanh(w), fj.tanh(x)), w, w.reshape(-1)
    _compiled_matches_interpreted(g, np.zeros((0, 3)))


def test_a_reduction_over_no_axes_of_an_empty_value_reads_in_its_empty_loop():
    # Random program 1541 (the slow seeds), its gradient: a sum over no axes of an empty
    # reshape, whose every index is 0, had its accumulator at the kernel's top, outside the
    # loop over its (empty) result, and read element [0, 0] of an empty scratch buffer (a
    # segfault); the evaluator refuses that read.
    def f(x, e):
        v = fj.sum(e.reshape(2, -1), axis=())
        return x + 1, fj.cos(v).reshape(0, 3)
    def g(x, e):  # a sum over a leading axis: its column sums' read
        return x + 1, fj.cos(fj.sum(e.reshape(2, 0, 3) * 2, axis=0)).reshape(3, 0)
    for h in (f, g):
        assert check_fused(h, np.ones((4, 4)), np.zeros((0, 3))) >= 1
        _compiled_matches_interpreted(h, np.ones((4, 4)), np.zeros((0, 3)))

    def loss(x0, x1):
        v5 = x1.reshape(2, -1)
        v6 = fj.sum(v5, axis=())
        terms = (v6 - v6, v5, fj.transpose(x0))
        return sum(fj.sum(fj.sin(t) * float(k + 1)) for k, t in enumerate(terms))
    _compiled_matches_interpreted(fj.grad(loss, argnums=(0, 1)), np.ones((4, 4)), np.zeros((0, 3)))


def test_reductions_over_an_empty_axis_beside_a_row_result():
    # Random program 344: the search for the loop that runs no iteration met a scope whose
    # first statement was not its loop header.
    def f(x0):
        v1 = fj.sign(x0)
        v2 = fj.minimum(x0, v1)
        return fj.sum(v2, axis=(0, 1)), fj.sum(v2 * v1, axis=1)
    _compiled_matches_interpreted(f, np.zeros((2, 0), np.float32))


@pytest.mark.parametrize("widths", [(4, 4, 4), (4, 4, 3), (3, 4, 4), (0, 4, 4), (4, 0, 4)])
def test_a_join_whose_pieces_share_values_in_groups(widths):
    # Neighbouring pieces of one width computing a value in common run as one loop, each
    # stored at its own columns (the grouping skips empty pieces); the third piece reads
    # the shared value through a slice, and its gradient flows back through every piece.
    w0, w1, w2 = widths
    n = max(widths)

    def f(a, b):
        e = fj.exp(a[:, :n] * 0.5)
        return fj.concatenate([e[:, :w0] * 2.0, e[:, :w1] + b[:, :w1], fj.tanh(e)[:, n - w2:]], axis=-1)

    rng = np.random.default_rng(7)
    a, b = rng.standard_normal((5, n)), rng.standard_normal((5, n))
    loss = fj.grad(lambda a, b: fj.sum(fj.sin(f(a, b))), argnums=(0, 1))
    for fn in (f, loss):   # within an ulp: the compiled tanh and sin are flowjit's own ports
        got, want = fj.function(fn)(a, b), fj.function(fn, interpret=True)(a, b)
        for g, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,),
                        strict=True):
            assert g.shape == w.shape
            np.testing.assert_allclose(g, w, rtol=1e-15, atol=1e-15)
