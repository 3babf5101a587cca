"""Leading reductions of large inputs (lowering.lower's ``leading_reduction``): one whose
first axis is kept (a max pool's batch) has its outer loop parallel; one whose first axis is
reduced stays one serial pass (its cells are updated by every row)."""

from __future__ import annotations

import numpy as np

import flowjit as fj
from flowjit.lowering import print_kernel
from flowjit.lowering.loops import Loop
from flowjit.lowering.lower import PARALLEL_MIN_ELEMENTS
from tests.lowering.test_lowering import kernel_of


def _top_loops(k):
    return [s for s in k.body if isinstance(s, Loop)]


def test_a_windowed_max_keeping_the_first_axis_splits_its_outer_loop():
    # A 2x2 max pool of NHWC: the batch is kept, so each of its iterations writes its own
    # cells and the outer loop is parallel once the input is large.
    def pool(x):
        n, h, w, c = x.shape
        return x.reshape(n, h // 2, 2, w // 2, 2, c).max(axis=(2, 4))
    x = np.random.default_rng(1).standard_normal((32, 28, 28, 32)).astype(np.float32)
    k = kernel_of(pool, x)
    assert any(s.parallel for s in _top_loops(k)), print_kernel(k)
    assert not any(s.parallel for s in _top_loops(kernel_of(pool, x[:4]))), "small: one thread"
    got = fj.function(pool)(x)
    np.testing.assert_array_equal(got, x.reshape(32, 14, 2, 14, 2, 32).max(axis=(2, 4)))


def test_a_sum_over_the_first_axis_stays_serial():
    x = np.ones((64, PARALLEL_MIN_ELEMENTS // (64 * 24) + 1, 24), np.float32)
    k = kernel_of(lambda x: x.sum(axis=(0, 1)), x)
    assert not any(s.parallel for s in _top_loops(k)), print_kernel(k)
    np.testing.assert_allclose(fj.function(lambda x: x.sum(axis=(0, 1)))(x), x.sum(axis=(0, 1)), rtol=1e-6)
