"""Leading reductions of large inputs (lowering.lower's ``leading_reduction``): a sum whose
first axis is reduced runs in a fixed number of parts, a parallel loop of partial sums added
in part order; one whose first axis is kept has its outer loop parallel."""

from __future__ import annotations

import numpy as np

import flowjit as fj
from flowjit.lowering import evaluate, print_kernel
from flowjit.lowering.loops import Const, Loop
from flowjit.lowering.lower import PARALLEL_MIN_ELEMENTS, REDUCTION_CHUNKS
from tests.lowering.test_lowering import kernel_of


def column_sums(x):
    return x.sum(axis=(0, 1))


def _top_loops(k):
    return [s for s in k.body if isinstance(s, Loop)]


def test_a_large_sum_over_the_first_axis_runs_in_parts_added_in_order():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((37, PARALLEL_MIN_ELEMENTS // (37 * 24) + 1, 24)).astype(np.float32)
    k = kernel_of(column_sums, x)
    text = print_kernel(k)
    parts = [t for t in k.temps if t.shape[0] == Const(REDUCTION_CHUNKS, t.shape[0].dtype)]
    assert len(parts) == 1 and parts[0].rank == 2, text
    assert [s.parallel for s in _top_loops(k)].count(True) == 1, text
    # 37 rows in 16 parts of 2 or 3: each row summed once (the evaluator runs the parts in order).
    got = [np.zeros(24, np.float32)]
    evaluate(k, [x], got)
    np.testing.assert_allclose(got[0], x.astype(np.float64).sum(axis=(0, 1)), rtol=1e-6)
    compiled = fj.function(column_sums)(x)
    np.testing.assert_allclose(compiled, x.astype(np.float64).sum(axis=(0, 1)), rtol=1e-6)


def test_a_small_sum_and_a_max_stay_one_serial_pass():
    x = np.ones((4, 8, 24), np.float32)
    assert not any(s.parallel for s in _top_loops(kernel_of(column_sums, x)))
    big = np.ones((64, PARALLEL_MIN_ELEMENTS // (64 * 24) + 1, 24), np.float32)
    k = kernel_of(lambda x: x.max(axis=(0, 1)), big)
    assert all(t.shape[0] != Const(REDUCTION_CHUNKS, t.shape[0].dtype) for t in k.temps), print_kernel(k)
    assert not any(s.parallel for s in _top_loops(k)), print_kernel(k)


def test_a_windowed_max_keeping_the_first_axis_splits_its_outer_loop():
    # A 2x2 max pool of NHWC: the batch is kept, so each of its iterations writes its own
    # cells and the outer loop is parallel once the input is large.
    def pool(x):
        n, h, w, c = x.shape
        return x.reshape(n, h // 2, 2, w // 2, 2, c).max(axis=(2, 4))
    x = np.random.default_rng(1).standard_normal((32, 28, 28, 32)).astype(np.float32)
    k = kernel_of(pool, x)
    assert any(s.parallel for s in _top_loops(k)), print_kernel(k)
    got = fj.function(pool)(x)
    np.testing.assert_array_equal(got, x.reshape(32, 14, 2, 14, 2, 32).max(axis=(2, 4)))
