"""Leading reductions of large inputs (lowering.lower's ``leading_reduction``): one whose
first axis is kept (a max pool's batch) has its outer loop parallel; one whose first axis is
reduced fills a row of partial results for each of a fixed number of blocks of that axis in
parallel, then combines the rows in block order (the same result on any number of threads)."""

from __future__ import annotations

import numpy as np

import flowjit as fj
from flowjit.lowering import print_kernel
from flowjit.lowering.loops import INDEX, Const, Loop
from flowjit.lowering.lower import LEADING_PARTS, LEADING_PARTS_MIN_ELEMENTS
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


def test_a_large_reduction_over_the_first_axis_sums_fixed_blocks_in_parallel_then_in_order():
    # A batch norm's statistics over 2**21 elements or more: sums over the rows keeping the
    # channels. The rows are cut into LEADING_PARTS blocks fixed by the shape (not by the
    # threads), each block's partial sums filled by a parallel loop, then added in block
    # order: the same result on any number of threads. Below the threshold they stay one
    # serial pass (the blocks' nests cost LLVM more at a first call than they win there).

    def f(x):
        c = x - x.mean(axis=0)
        return c, (c * c).sum(axis=0)
    rows = LEADING_PARTS_MIN_ELEMENTS // 8
    k = kernel_of(f, fj.ShapeDtype((rows, 8), np.float32))
    text = print_kernel(k)
    # the sums of the mean, then those of the squares, each a nest of parallel blocks
    assert sum(isinstance(s, Loop) and s.parallel and s.stop == Const(LEADING_PARTS, INDEX)
               for s in k.body) == 2, text
    assert text.count(f"f64[{LEADING_PARTS}, n1]") == 2, text
    small = print_kernel(kernel_of(f, fj.ShapeDtype((rows - 1, 8), np.float32)))
    assert f"[{LEADING_PARTS}," not in small, small
    top = kernel_of(lambda x: x.max(axis=0), fj.ShapeDtype((rows, 8), np.float32))
    assert f"f32[{LEADING_PARTS}, n1]" in print_kernel(top)
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((rows + 13, 8)) * 10 + 3).astype(np.float32)
    c, ss = fj.function(f)(x)
    c64 = x.astype(np.float64) - x.astype(np.float64).mean(0)
    np.testing.assert_allclose(c, c64, rtol=1e-6, atol=1e-5)
    np.testing.assert_allclose(ss, (c64 * c64).sum(0), rtol=1e-6)
    np.testing.assert_array_equal(fj.function(lambda x: x.max(axis=0))(x), x.max(axis=0))


def test_a_sum_over_the_first_two_axes_splits_the_first_and_matches_numpy():
    shape = (64, LEADING_PARTS_MIN_ELEMENTS // (64 * 24) + 1, 24)
    x = np.random.default_rng(4).standard_normal(shape).astype(np.float32)
    k = kernel_of(lambda x: x.sum(axis=(0, 1)), x)
    assert sum(s.parallel for s in _top_loops(k)) == 1, print_kernel(k)
    np.testing.assert_allclose(fj.function(lambda x: x.sum(axis=(0, 1)))(x),
                               x.astype(np.float64).sum(axis=(0, 1)), rtol=1e-6, atol=1e-5)


def test_the_blocks_are_cut_by_the_shape_and_added_in_order():
    # Bit for bit the f64 sums of LEADING_PARTS blocks of ceil(n / LEADING_PARTS) rows, each
    # row added in turn, then the blocks in turn: no thread count or chunking enters.
    n = LEADING_PARTS_MIN_ELEMENTS // 8 + 13
    x = (np.random.default_rng(5).standard_normal((n, 8)) * 1e3).astype(np.float32)
    per = -(-n // LEADING_PARTS)
    blocks = [np.cumsum(x[k * per:(k + 1) * per].astype(np.float64), axis=0)[-1] for k in range(LEADING_PARTS)]
    want = np.cumsum(np.stack(blocks), axis=0)[-1].astype(np.float32)
    np.testing.assert_array_equal(fj.function(lambda x: x.sum(axis=0))(x), want)
