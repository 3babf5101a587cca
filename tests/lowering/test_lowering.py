"""Decisions the lowering takes: parallel outer loops, in-place outputs, hoisting, sizes."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import flowjit as fj
from flowjit.ir import new_function
from flowjit.ir.dtypes import complex64, float32
from flowjit.ir.registry import Literal, all_primitives, get
from flowjit.ir.types import TensorType
from flowjit.lowering import Unsupported, lower_block, print_kernel, verify_kernel
from flowjit.lowering import scalar as loop_scalar
from flowjit.lowering.loops import Loop, Store, Var
from flowjit.lowering.lower import PARALLEL_MIN_ELEMENTS, PARALLEL_MIN_WORK
from flowjit.lowering.printer import print_expr
from flowjit.lowering.scalar import expand


def kernel_of(f, *inputs):
    fused = fj.function(f).ir(*inputs, stage="fused")
    (op,) = [op for op in fused.body.ops if op.primitive.role == "kernel"]
    k = lower_block(op.blocks[0], "k", collapse=True)
    verify_kernel(k)
    return k


def test_the_outer_loop_is_parallel_from_the_threshold_on():
    big = fj.ShapeDtype((PARALLEL_MIN_ELEMENTS // 512, 512), np.float32)
    small = fj.ShapeDtype((PARALLEL_MIN_ELEMENTS // 512 - 1, 512), np.float32)
    for x, parallel in ((big, True), (small, False)):
        (outer,) = kernel_of(lambda a: fj.exp(a) + 1.0, x).body
        assert isinstance(outer, Loop) and outer.parallel is parallel
        assert not any(isinstance(s, Loop) and s.parallel for s in outer.body)


def test_a_nest_whose_leading_axes_are_1_splits_its_first_longer_axis():
    # A batch of 1 ([1, T, D]): the loop of the axis of 1 is inlined, and the parallel mark
    # goes to the next one (an elementwise kernel over [1, 2048, 1024] had run on one
    # thread, 0.46 ms against 0.24 on two; a softmax over [1, 4096, 1024] 1.75 against 0.89).
    big = fj.ShapeDtype((1, PARALLEL_MIN_ELEMENTS // 512, 512), np.float32)
    (index, outer) = kernel_of(lambda a: fj.exp(a) + 1.0, big).body
    assert isinstance(outer, Loop) and outer.parallel, print_kernel(kernel_of(lambda a: fj.exp(a) + 1.0, big))
    rows = fj.ShapeDtype((1, 1, PARALLEL_MIN_ELEMENTS // 512, 512), np.float32)
    assert any(isinstance(st, Loop) and st.parallel for st in kernel_of(lambda a: fj.nn.softmax(a), rows).body)
    assert any(isinstance(st, Loop) and st.parallel
               for st in kernel_of(lambda a: fj.exp(a).sum(axis=-1), fj.ShapeDtype((1, 2048, 256), np.float32)).body)
    # A sum over a middle axis keeping the last (a leading reduction) splits its first
    # longer kept axis too.
    lead = fj.ShapeDtype((1, 300, 2, 1024), np.float32)
    assert any(isinstance(st, Loop) and st.parallel for st in kernel_of(lambda a: a.sum(axis=2) * 2.0, lead).body)
    y = np.random.default_rng(14).standard_normal((1, 300, 2, 1024)).astype(np.float32)
    np.testing.assert_allclose(fj.function(lambda a: a.sum(axis=2) * 2.0)(y), y.sum(axis=2) * 2.0, rtol=1e-6, atol=1e-6)
    x = np.random.default_rng(13).standard_normal((1, 1024, 512)).astype(np.float32)
    np.testing.assert_allclose(fj.function(lambda a: fj.nn.softmax(a))(x),
                               np.exp(x - x.max(-1, keepdims=True)) / np.exp(x - x.max(-1, keepdims=True)).sum(
                                   -1, keepdims=True), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(fj.function(lambda a: fj.exp(a).sum(axis=-1))(x), np.exp(x).sum(-1), rtol=1e-5)


def test_an_output_may_overwrite_an_input_read_only_at_its_own_index():
    x = np.ones((3, 4), np.float32)
    assert kernel_of(lambda a, b: a * 2.0 + b, x, x).in_place == (("in0", "in1"),)
    # A transposed read takes other elements than the one written.
    sq = np.ones((4, 4), np.float32)
    assert kernel_of(lambda a, b: a * 2.0 + b.T, sq, sq).in_place == (("in0",),)


def test_each_output_of_several_may_overwrite_the_inputs_its_nest_reads_at_its_index():
    def adam(p, m, g, b, mb):   # two shapes: two nests in one kernel
        m2, mb2 = 0.9 * m + g, 0.9 * mb + b
        return p - m2, m2, mb2
    x, row = np.ones((3, 4), np.float32), np.ones((5,), np.float32)
    k = kernel_of(adam, x, x, x, row, row)
    rank = {b.name: b.rank for b in k.inputs}
    # each output: every input of its own nest (all read at its index), none of the other's
    for out, names in zip(k.outputs, k.in_place):
        assert len(names) == (3 if out.rank == 2 else 2) and {rank[n] for n in names} == {out.rank}
        assert f"{out.name} may overwrite {', '.join(names)}" in print_kernel(k)


def test_an_output_stored_before_a_later_store_reads_the_input_does_not_overwrite_it():
    from flowjit.ir.dtypes import float32
    from flowjit.ir.types import TensorType
    from flowjit.lowering.loops import INDEX, Load, Var
    from flowjit.lowering.lower import _overwritable
    i = (Var("i", INDEX),)
    body = (Loop("i", fj.lowering.loops.Const(0, INDEX), fj.lowering.loops.Const(4, INDEX), 1,
                 (Store("out0", i, Load("in1", i, float32)), Store("out1", i, Load("in0", i, float32)))),)
    t = TensorType((4,), float32)
    reads = {"in0": (t, {i}), "in1": (t, {i})}
    # out0 is written before out1's store reads in0: only out1 may overwrite in0.
    assert _overwritable(body, reads, [t, t]) == (("in1",), ("in0", "in1"))


def test_one_kernel_serves_every_batch_size():
    def f(x):
        return fj.tanh(x).sum(axis=-1)
    texts = {print_kernel(kernel_of(f, np.ones((n, 8), np.float32))) for n in (2, 3, 50)}
    assert len(texts) == 1, texts


def test_a_row_reduction_is_computed_once_per_row():
    def softmax(x):
        e = fj.exp(x - x.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)
    text = print_kernel(kernel_of(softmax, np.ones((4, 6), np.float32)))
    lines = text.splitlines()
    row = next(k for k, line in enumerate(lines) if line.strip().startswith("for i"))
    inner = next(k for k, line in enumerate(lines) if line.strip().startswith("for i") and k > row)
    # Both accumulators are declared in the row loop, before the element loop.
    assert all(row < k < inner for k, line in enumerate(lines) if line.strip().startswith("acc "))


def test_a_pad_checks_and_clamps_only_the_sides_it_pads():
    from tests.lowering.test_programs import check_fused

    # A convolution tap: rows padded above, columns below, batch and channels not at all.
    def tap(x):
        return fj.pad(x, ((0, 0), (1, 0), (0, 2), (0, 0))) * 2.0
    x = np.random.default_rng(0).standard_normal((2, 5, 6, 3)).astype(np.float32)
    text = print_kernel(kernel_of(tap, x))
    read = next(line for line in text.splitlines() if "in0[" in line)
    index = read[read.index("in0[") + 4:read.index("]", read.index("in0["))].split(", ")
    # batch and channels read at their loops' own variables (no clamp: contiguous loads)
    assert index[0].startswith("i") and index[3].startswith("i"), read
    assert text.count("max(") == 1 and text.count("min(") == 1, text   # one side each
    assert check_fused(tap, x) == 1


@settings(max_examples=25, deadline=None, derandomize=True)
@given(st.lists(st.tuples(st.integers(1, 4), st.integers(0, 2), st.integers(0, 2)), min_size=1, max_size=4),
       st.floats(-3, 3, allow_nan=False))
def test_compiled_pads_of_any_sides_give_numpys(axes, value):
    # Each axis: its size and its low and high pads, zero on either side or both.
    shape = tuple(n for n, _, _ in axes)
    widths = tuple((lo, hi) for _, lo, hi in axes)
    x = np.random.default_rng(len(axes)).standard_normal(shape).astype(np.float32)
    got = fj.function(lambda a: fj.pad(a, widths, constant_values=value) + 1.0)(x)
    np.testing.assert_array_equal(got, np.pad(x, widths, constant_values=np.float32(value)) + np.float32(1.0))


def test_softmax_stores_its_exponentials_in_the_output_and_reads_them_back():
    from tests.lowering.test_programs import check_fused

    def softmax(x):
        e = fj.exp(x - x.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)
    x = np.random.default_rng(0).standard_normal((3, 300)).astype(np.float32)
    text = print_kernel(kernel_of(softmax, x))
    element_loop = text[text.rindex("for i"):]
    assert text.count("exp.f32(") == 2  # the blocks of 128 and the rest, not the element loop
    assert "exp.f32(" not in element_loop and "= out0[" in element_loop
    assert kernel_of(softmax, x).in_place == ((),)  # the stored row is written ahead of the reads
    assert check_fused(softmax, x) == 1


def test_a_reduction_over_leading_axes_fills_a_temp_in_row_major_order():
    from tests.lowering.test_programs import check_fused

    def f(x, w):
        return (x * w).sum(axis=0) + 1.0, fj.max(x, axis=(0, 1), keepdims=True)
    rng = np.random.default_rng(1)
    x, w = rng.standard_normal((6, 5, 4)).astype(np.float32), rng.standard_normal(4).astype(np.float32)
    text = print_kernel(kernel_of(f, x, w))
    # The max, returned with keepdims, accumulates in its output; the float64 sum in a temp.
    assert text.count("temp cols") == 1 and ": f64[n1, n2]" in text and ": f32[n2]" not in text
    # The innermost loop of the filling runs along the last (kept, contiguous) axis.
    assert check_fused(f, x, w) == 1


def test_reductions_over_the_same_leading_axes_that_read_none_of_each_other_share_one_pass():
    # A batch norm's gradient: sum(dy) and sum(dy * xhat) over the batch, and a third sum that
    # reads the first. The two independent ones fill their temps in one pass over the input
    # (each recomputing its input's elementwise chain had made a pass each: the zoo CNN's
    # training step 6.9 -> 6.6 ms); the dependent one still comes after.
    from tests.lowering.test_programs import check_fused

    def f(x, y):
        e = fj.exp(x)
        s1 = (e * y).sum(axis=0)
        s2 = e.sum(axis=0)
        return s1 + s2, (e * s1).sum(axis=0)
    rng = np.random.default_rng(2)
    x, y = rng.standard_normal((16, 8)).astype(np.float32), rng.standard_normal((16, 8)).astype(np.float32)
    k = kernel_of(f, x, y)
    text = print_kernel(k)
    assert text.count("temp cols") == 3, text

    def accumulated(stmt) -> list[str]:   # the temps a nest adds into
        if isinstance(stmt, Loop):
            return [name for s in stmt.body for name in accumulated(s)]
        return [stmt.buffer] if isinstance(stmt, Store) and stmt.buffer in print_expr(stmt.value) else []
    passes = [names for stmt in k.body if (names := accumulated(stmt))]
    assert [len(p) for p in passes] == [2, 1], text
    assert check_fused(f, x, y) == 1


def test_a_reduction_that_is_the_kernels_output_accumulates_in_it():
    # A max pool's window reduction keeps the last axis and is the kernel's output as it is:
    # it accumulates in the output, with no temp of the output's size and no copy of it.
    # Where the accumulator is wider (a float32 sum over the first axis, in float64) or the
    # output holds other elements (a reshape merging axes), the temp stays; keepdims, axes
    # of 1 only, accumulates in the output too.
    from tests.lowering.test_programs import check_fused
    rng = np.random.default_rng(4)
    x = rng.standard_normal((6, 5, 4)).astype(np.float32)
    x[0, 0, 1] = np.nan
    pooled = [lambda a: fj.max(a, axis=(0, 1)), lambda a: fj.min(a, axis=0),
              lambda a: fj.max(a.reshape(3, 2, 5, 4), axis=1),
              lambda a: (fj.max(a, axis=0), fj.max(a, axis=0) * 2.0),
              lambda a: (a.astype(np.float64)).sum(axis=0), lambda a: fj.max(a, axis=0, keepdims=True)]
    for f in pooled:
        text = print_kernel(kernel_of(f, x))
        assert "temp cols" not in text, text
        stores = [line.strip() for line in text.splitlines() if line.strip().startswith("out0[")]
        assert all("out0[" in line.split("=", 1)[1] or "inf" in line or "0.0" in line for line in stores), text
        assert check_fused(f, x) == 1
    for f in (lambda a: a.sum(axis=0), lambda a: fj.max(a, axis=0).reshape(20)):
        assert "temp cols" in print_kernel(kernel_of(f, x))
        assert check_fused(f, x) == 1
    got = fj.function(lambda a: fj.max(a.reshape(3, 2, 5, 4), axis=1) + 0.0)(x)
    np.testing.assert_array_equal(got, np.max(x.reshape(3, 2, 5, 4), axis=1))


def test_a_reduction_returned_but_for_axes_of_one_accumulates_in_the_output():
    # A 7x7 depthwise convolution sums its 49 taps over the filter's axes and returns the sum
    # without the filters' multiplier axis of 1: the sum accumulates in the output at the
    # same element's index there (no temp of the output's size, no copy of it). A reshape
    # that merges axes keeps the temp.
    from tests.lowering.test_programs import check_fused
    rng = np.random.default_rng(9)
    x = rng.standard_normal((2, 5, 3, 4)).astype(np.float32)
    for f in (lambda a: a.sum(axis=1)[:, None], lambda a: a.reshape(2, 5, 3, 4, 1).sum(axis=1).reshape(2, 3, 4),
              lambda a: fj.max(a, axis=2)[:, :, None, :], lambda a: a.sum(axis=1, keepdims=True),
              lambda a: (a.sum(axis=1)[..., None], a[:, :, :, None] * 2.0)):
        text = print_kernel(kernel_of(f, x))
        assert "temp cols" not in text, text
        stores = [line.strip() for line in text.splitlines() if line.strip().startswith("out0[")]
        assert all("out0[" in line.split("=", 1)[1] or "inf" in line or "0.0" in line for line in stores), text
        assert check_fused(f, x) == 1
    assert "temp cols" in print_kernel(kernel_of(lambda a: a.sum(axis=1).reshape(2, 12), x))
    w = rng.standard_normal((7, 7, 4, 1)).astype(np.float32)
    img = rng.standard_normal((2, 9, 8, 4)).astype(np.float32)

    def conv(a, k):
        return fj.nn.depthwise_conv2d(a, k, strides=1, padding="SAME")
    assert "temp" not in print_kernel(kernel_of(conv, img, w))
    assert check_fused(conv, img, w) == 1
    padded = np.pad(img, ((0, 0), (3, 3), (3, 3), (0, 0)))
    want = sum(padded[:, p:p + 9, q:q + 8, :] * w[p, q, :, 0] for p in range(7) for q in range(7))
    np.testing.assert_allclose(fj.function(conv)(img, w), want, rtol=1e-5, atol=1e-5)


def test_a_power_of_one_or_zero_is_its_base_or_one_not_a_call_of_pow():
    # The gradient of x ** 2 (a squared error, a variance) is 2 * x ** 1: a pow per element
    # in the loop IR (and in what `flowjit ir` shows and each renderer is given), which only
    # LLVM's own folding took out. pow(x, 1) is x and pow(x, 0) is 1 for every x (C99
    # F.9.4.4; NaN, infinities and -0 included), as NumPy's power gives them.
    x = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, -2.5, 3e38, 1e-45], np.float32)
    # x ** 2's gradient is 2 * x ** 1, x ** 1's is 1 * x ** 0, and so is x ** 2's second.
    for f in (fj.grad(lambda a: (a ** 2).sum()), fj.grad(lambda a: (a ** 1).sum()),
              fj.grad(lambda a: fj.grad(lambda b: (b ** 2).sum())(a).sum())):
        text = print_kernel(kernel_of(f, x))
        assert "pow" not in text, text
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(fj.function(fj.grad(lambda a: (a ** 2).sum()))(x), 2 * x)
    np.testing.assert_array_equal(fj.function(fj.grad(lambda a: (a ** 1).sum()))(x), np.power(x, np.float32(0)))
    for n in (1.0, 0.0):
        got = fj.function(lambda a, n=n: a ** n)(x)
        np.testing.assert_array_equal(got, np.power(x, np.float32(n)))
        assert np.array_equal(np.signbit(got), np.signbit(np.power(x, np.float32(n))))


def test_a_large_depthwise_filter_sums_its_taps_over_two_loops_one_per_filter_axis():
    # Past DEPTHWISE_TAPS_MAX taps a depthwise convolution sums its taps' products over the
    # filter's two axes, in the filter's row-major order: two loops, their indices the tap's
    # row and column as they are, where over one merged taps axis every index divided the
    # merged one and took its remainder.
    from flowjit.ir.primitives.linalg import DEPTHWISE_TAPS_MAX
    from tests.lowering.test_programs import check_fused
    rng = np.random.default_rng(10)
    for (kh, kw), strides, dilation in (((7, 7), 1, 1), ((6, 5), (2, 1), (1, 2))):
        assert kh * kw > DEPTHWISE_TAPS_MAX
        w = rng.standard_normal((kh, kw, 3, 1)).astype(np.float32)
        img = rng.standard_normal((2, 11, 10, 3)).astype(np.float32)

        def conv(a, k, strides=strides, dilation=dilation):
            return fj.nn.depthwise_conv2d(a, k, strides=strides, padding="SAME", dilations=dilation)
        text = print_kernel(kernel_of(conv, img, w))
        assert " // " not in text and " % " not in text, text
        assert len([line for line in text.splitlines() if line.strip().startswith("for r")]) == 2, text
        # The filter's gradient, a sum over the batch and positions a tap, keeps the two axes too.
        filter_grad = fj.grad(lambda k, a: (conv(a, k) ** 2).sum())
        fused = fj.function(filter_grad).ir(w, img, stage="fused")
        texts = [print_kernel(lower_block(op.blocks[0], "k", collapse=True))
                 for op in fused.body.ops if op.primitive.role == "kernel"]
        assert texts and not any(" % " in t for t in texts), texts
        assert check_fused(conv, img, w) == 1
        # In the filter's order, each product and sum rounded to float32: NumPy's adds in turn.
        sh, sw = (strides, strides) if isinstance(strides, int) else strides
        dh, dw = (dilation, dilation) if isinstance(dilation, int) else dilation
        oh, ow = -(-11 // sh), -(-10 // sw)
        ph = max((oh - 1) * sh + (kh - 1) * dh + 1 - 11, 0)
        pw = max((ow - 1) * sw + (kw - 1) * dw + 1 - 10, 0)
        padded = np.pad(img, ((0, 0), (ph // 2, ph - ph // 2), (pw // 2, pw - pw // 2), (0, 0)))
        want = sum(padded[:, p * dh:p * dh + (oh - 1) * sh + 1:sh, q * dw:q * dw + (ow - 1) * sw + 1:sw, :]
                   * w[p, q, :, 0] for p in range(kh) for q in range(kw))
        np.testing.assert_array_equal(fj.function(conv)(img, w), want)


def test_a_reduction_over_middle_axes_keeping_the_last_fills_a_temp_along_the_last_axis():
    # A mean over a bag of embedding rows, or over time: reducing each column on its own
    # strode through memory (5x NumPy's time for a mean over axis 1 of f32[64,512,256]).
    from tests.lowering.test_programs import check_fused

    def f(x):
        return x.mean(axis=1), fj.max(x, axis=(0, 2), keepdims=True), x.sum(axis=(1, 3), keepdims=True)
    x = np.random.default_rng(3).standard_normal((3, 5, 4, 6)).astype(np.float32)
    long = np.random.default_rng(3).standard_normal((3, 130, 4, 6)).astype(np.float32)
    k = kernel_of(lambda a: a.mean(axis=1), long)
    text = print_kernel(k)
    assert "temp cols" in text and ": f64[n0, n2, n3]" in text
    fill = text[text.index("for r"):]
    # The filling's innermost loop is over the last axis, read contiguously.
    innermost = [line.strip() for line in fill.splitlines() if line.strip().startswith("for ")][-1]
    assert innermost.startswith("for i") and "n3" in innermost, text
    assert check_fused(f, x) == 1
    for axes in ((1,), (0, 2), (1, 2)):
        got = fj.function(lambda a, axes=axes: a.sum(axis=axes))(x)
        np.testing.assert_allclose(got, x.sum(axis=axes, dtype=np.float64), rtol=1e-6, atol=1e-6)


def test_a_short_float32_sum_over_middle_axes_adds_in_float32_as_a_block_of_a_row_sum_does():
    # A 7x7 depthwise filter's 49 taps, a bag of 20 embedding rows: at most SUM_BLOCK
    # elements a cell, added in float32 in order (a float64 accumulator's conversions were
    # most of a 7x7 depthwise's time); more than SUM_BLOCK, or over the first axis (a batch,
    # whose size an AOT library leaves open), or of float64, or a product: as before.
    from flowjit.lowering.lower import SUM_BLOCK

    rng = np.random.default_rng(8)

    def accumulator(f, *shapes, dtype=np.float32):
        text = print_kernel(kernel_of(f, *(rng.standard_normal(s).astype(dtype) for s in shapes)))
        return "f32" if "cols" not in text or ": f32[" in text.split("temp cols", 1)[1].splitlines()[0] else "f64"
    assert accumulator(lambda a: a.sum(axis=1) * 2.0, (3, SUM_BLOCK, 4)) == "f32"
    assert accumulator(lambda a: a.sum(axis=(1, 2)) * 2.0, (3, 8, 16, 4)) == "f32"
    assert accumulator(lambda a: a.sum(axis=1) * 2.0, (3, SUM_BLOCK + 1, 4)) == "f64"
    assert accumulator(lambda a: a.sum(axis=0) * 2.0, (6, 4)) == "f64"
    assert accumulator(lambda a: a.prod(axis=1) * 2.0, (3, 5, 4)) == "f64"
    assert "f32" not in print_kernel(kernel_of(lambda a: a.sum(axis=1) * 2.0,
                                               rng.standard_normal((3, 5, 4))))
    # The sum is the kernel's output as it is: it accumulates there, with no temp.
    assert "temp cols" not in print_kernel(kernel_of(lambda a: a.sum(axis=1), rng.standard_normal((3, 5, 4)).astype(
        np.float32)))
    for shape, axes in (((4, 49, 33), 1), ((2, 7, 7, 40), (1, 2)), ((5, 20, 3, 17), 1), ((3, 5, 4), 1)):
        x = (rng.standard_normal(shape) * 100).astype(np.float32)
        got = fj.function(lambda a, axes=axes: a.sum(axis=axes))(x)
        want = x.astype(np.float64).sum(axis=axes)
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-3)
        # In order, in float32: NumPy's own order for a reduction over a middle axis.
        np.testing.assert_allclose(got, x.sum(axis=axes), rtol=1e-6, atol=1e-4)


def test_the_cells_of_a_large_reduction_result_start_in_a_parallel_loop():
    # A sum over middle axes starts its cells at 0 in a pass before its nest: over a 7x7
    # depthwise convolution's 32x28x28x128 output, 12.8 MB on one thread (its forward
    # 7.3-7.8 -> 6.4-6.5 ms split). From PARALLEL_MIN_ELEMENTS cells the pass is split.
    big = np.random.default_rng(15).standard_normal((PARALLEL_MIN_ELEMENTS // 4096, 5, 4096)).astype(np.float32)
    for x, parallel in ((big, True), (big[1:], False)):
        k = kernel_of(lambda a: a.sum(axis=1), x)
        fill = k.body[0]
        assert isinstance(fill, Loop) and isinstance(fill.body[-1], Store), print_kernel(k)
        assert fill.parallel is parallel and not fill.stream, print_kernel(k)
        np.testing.assert_array_equal(fj.function(lambda a: a.sum(axis=1))(x), x.sum(axis=1))
    # A sum over a long first axis fills its parts inside its parallel block loop: that fill
    # stays a plain loop there (review by helper-47), and no fill streams past the cache
    # (the nest reads its cells back at once).
    k = kernel_of(lambda a: a.sum(axis=0), fj.ShapeDtype((512, PARALLEL_MIN_ELEMENTS), np.float32))
    fill, blocks = k.body[0], next(s for s in k.body if isinstance(s, Loop) and s.var.startswith("rb"))
    assert fill.parallel and not fill.stream, print_kernel(k)
    assert blocks.parallel and not any(isinstance(s, Loop) and s.parallel for s in blocks.body), print_kernel(k)


def test_a_row_reduction_of_a_large_input_splits_its_rows_though_its_result_is_small():
    # A sum of exponentials over 4096 rows of 1024 writes 4096 values but computes 4M: its
    # row loop is parallel, which the native program splits over its pool from 2**19
    # elements of the kernel's largest buffer (one thread took 1.0 ms, two 0.5). A smaller
    # input's stays serial, and the CUDA lowering (no ``collapse``) is left as it was.
    rows = PARALLEL_MIN_WORK // 256

    def f(x, m):
        return fj.exp(x - m).sum(axis=-1)
    big = (fj.ShapeDtype((rows, 256), np.float32), fj.ShapeDtype((rows, 1), np.float32))
    small = (fj.ShapeDtype((rows // 2, 256), np.float32), fj.ShapeDtype((rows // 2, 1), np.float32))
    (nest,) = kernel_of(f, *big).body
    assert nest.parallel, print_kernel(kernel_of(f, *big))
    assert not kernel_of(f, *small).body[0].parallel
    (op,) = [op for op in fj.function(f).ir(*big, stage="fused").body.ops if op.primitive.role == "kernel"]
    assert not lower_block(op.blocks[0], "k", collapse=False).body[0].parallel
    x = np.random.default_rng(12).standard_normal((rows, 256)).astype(np.float32)
    m = x.max(axis=-1, keepdims=True)
    np.testing.assert_allclose(fj.function(f)(x, m), np.exp(x - m).sum(axis=-1), rtol=1e-5)
    np.testing.assert_allclose(fj.function(lambda a: a.max(axis=1))(x), x.max(axis=1))


def test_a_large_one_d_elementwise_loop_is_marked_for_streaming_stores():
    n = PARALLEL_MIN_ELEMENTS
    x = fj.ShapeDtype((n,), np.float32)
    (loop,) = kernel_of(lambda a, b: a * 2.0 + b, x, x).body
    assert loop.parallel and loop.stream
    assert "parallel streaming for" in print_kernel(kernel_of(lambda a, b: a * 2.0 + b, x, x))
    # An input read at another index (reversed) keeps the cache.
    (loop,) = kernel_of(lambda a: a * 2.0 + a[::-1], x).body
    assert loop.parallel and not loop.stream
    # Two dimensions: not the streaming shape.
    (loop,) = kernel_of(lambda a: a * 2.0, fj.ShapeDtype((n // 512, 512), np.float32)).body
    assert not loop.stream


def test_an_output_is_stored_after_every_value_that_reads_a_row_stored_in_it():
    # Random program 101: the exponentials of the row sum were stored in out0, which the
    # element loop then overwrote with its own value before reading them back.
    from tests.lowering.test_programs import check_fused

    def f(x):
        v1 = fj.exp(fj.tanh(x)) / fj.sum(fj.exp(fj.tanh(x)), axis=-1, keepdims=True)
        return fj.exp(fj.tanh(x[::-1])), fj.cos(v1)
    x = np.random.default_rng(2).standard_normal(20)
    assert check_fused(f, x) == 1


def test_an_op_the_loop_ir_cannot_express_is_named():
    from flowjit.ir import new_function
    from flowjit.ir.registry import Literal, get
    from flowjit.ir.types import TensorType
    from flowjit.lowering import Unsupported

    fn, b = new_function("f", [TensorType((3,), np.float32)], ["x"])
    (c,) = b.emit(get("constant"), [], {"value": Literal(np.arange(3, dtype=np.float32))})
    fn.body.set_returns(b.emit(get("add"), [fn.args[0], c], {}))
    with pytest.raises(Unsupported, match="constant: a constant of 3 elements inside a kernel"):
        lower_block(fn.body)


def test_a_complex_function_with_no_loop_lowering_is_named():
    # Every elementwise primitive of complex values lowers; a template function with no
    # definition over the parts (erf) is named.
    for p in all_primitives():
        if p.kind != "elementwise":
            continue
        try:
            fn, b = new_function("f", [TensorType((3,), np.complex64)], ["z"])
            fn.body.set_returns(b.emit(p, [fn.args[0]], {}))
        except Exception:   # not a unary op of complex values
            continue
        lower_block(fn.body)
    z = (Var("re", float32), Var("im", float32))
    with pytest.raises(Unsupported, match=r"erf of complex values"):
        expand("erf(a)", [z], complex64)


def test_an_axis_of_one_opens_no_loop():
    # A reduction's kept axes of 1 (batch norm's statistics, keepdims) are stored at index 0,
    # not inside loops of one iteration, whose only cost is LLVM's time on them.
    from flowjit.lowering.loops import loop_count
    from tests.lowering.test_programs import check_fused

    def f(x):
        mu = fj.mean(x, axis=(0, 1, 2), keepdims=True)
        d = x - mu
        return d, fj.mean(d * d, axis=(0, 1, 2), keepdims=True)
    x = np.random.default_rng(2).standard_normal((3, 4, 5, 6)).astype(np.float32)
    k = kernel_of(f, x)

    def loops(body):
        for s in body:
            if isinstance(s, Loop):
                yield s
                yield from loops(s.body)
    assert all(s.stop.value != 1 for s in loops(k.body) if hasattr(s.stop, "value")), print_kernel(k)
    # Six loops of the six nests' N, H and W gone too (lowering.collapse: 18 -> 9); one more
    # computes the mean's division once per channel before the centering nest (hoist_columns).
    assert loop_count(k.body) == 10, print_kernel(k)
    assert check_fused(f, x) == 1


def test_a_nest_over_leading_axes_read_as_one_position_is_one_loop():
    # Batch norm's statistics: the nests over N, H and W (the output stored at [n, h, w, c],
    # the GEMM's rows read at their row-major position) each one loop over N*H*W. The
    # reshape's source is read at ((n*H + h)*W + w)*C + c, the channel loop inside the nest:
    # that is the collapsed position times C plus c (14 loops before, 10).
    from flowjit.lowering.loops import loop_count
    from tests.lowering.test_programs import check_fused

    def f(x2):
        x = fj.reshape(x2, (3, 4, 5, 6))
        d = x - fj.mean(x, axis=(0, 1, 2), keepdims=True)
        return d, fj.mean(d * d, axis=(0, 1, 2), keepdims=True)
    x2 = np.random.default_rng(3).standard_normal((60, 6)).astype(np.float32)
    k = kernel_of(f, x2)
    text = print_kernel(k)
    assert "0..((n" in text and "out0[0, 0, " in text, text
    assert loop_count(k.body) == 10 and " * 6) + i" in text, text
    assert not any(isinstance(s, Loop) and isinstance(s.body[0], Loop) and s.body[0].stop == s.stop
                   for s in k.body if isinstance(s, Loop) and s.body), text
    assert check_fused(f, x2) == 1
    got = fj.function(f)(x2)
    x = x2.reshape(3, 4, 5, 6)
    d = x - x.mean(axis=(0, 1, 2), keepdims=True)
    np.testing.assert_allclose(got[0], d, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[1], (d * d).mean(axis=(0, 1, 2), keepdims=True), rtol=1e-5, atol=1e-6)


def test_a_nest_whose_variables_are_read_apart_stays_a_nest():
    # A transpose reads the nest's axes in another order: no position to collapse into.
    from flowjit.lowering.loops import loop_count
    from tests.lowering.test_programs import check_fused

    def f(x):
        return fj.transpose(x, (1, 0, 2)) * 2.0
    x = np.random.default_rng(4).standard_normal((3, 4, 5)).astype(np.float32)
    k = kernel_of(f, x)
    assert loop_count(k.body) == 3 and "0..((n" not in print_kernel(k), print_kernel(k)
    assert check_fused(f, x) == 1


def _inner_loops(k):
    (outer,) = k.body
    return [s for s in outer.body if isinstance(s, Loop)]


def test_pieces_of_a_join_that_compute_a_value_in_common_run_as_one_loop():
    # cos(a) | sin(a): one loop storing both pieces at each column, a computed once.
    def rotary(pos, freq):
        a = pos[:, None] * freq[None, :]
        return fj.concatenate([fj.cos(a), fj.sin(a)], axis=-1)
    pos, freq = np.arange(6, dtype=np.float32), np.linspace(0.1, 1.0, 4).astype(np.float32)
    (loop,) = _inner_loops(kernel_of(rotary, pos, freq))
    assert [type(s) for s in loop.body].count(Store) == 2
    a = (pos[:, None] * freq[None, :]).astype(np.float64)   # correctly rounded, as flowjit's
    want = np.concatenate([np.cos(a), np.sin(a)], -1).astype(np.float32)
    np.testing.assert_array_equal(fj.function(rotary)(pos, freq), want)


def test_pieces_of_a_join_with_nothing_in_common_or_other_widths_keep_a_loop_each():
    x, y = np.ones((3, 4), np.float32), np.ones((3, 5), np.float32)
    # nothing computed in common (a shared input is read, not computed)
    assert len(_inner_loops(kernel_of(lambda a: fj.concatenate([a * 2.0, a + 3.0], axis=-1), x))) == 2
    # a value in common, but other widths
    assert len(_inner_loops(kernel_of(
        lambda a, b: fj.concatenate([fj.exp(a) * 2.0, fj.exp(a)[:, :1] + b], axis=-1), x, y))) == 2
    # a slice of a shared value is read at other columns in each piece: not shared
    e = np.ones((3, 8), np.float32)
    assert len(_inner_loops(kernel_of(
        lambda a: fj.concatenate([fj.exp(a)[:, :4] * 2.0, fj.exp(a)[:, 4:] + 1.0], axis=-1), e))) == 2


def test_a_value_that_folds_to_a_constant_is_lowered_once(monkeypatch):
    # x * 0 of ints folds to the constant 0 in the lowering; each level below reads the one
    # above twice. A folded value had not been remembered, so each use lowered its producers
    # again: 2^levels expansions (a binomial sampler's chain did not finish lowering).
    levels = 14
    fn, b = new_function("f", [TensorType((4,), np.int64)], ["x"])
    zero = b.emit(get("constant"), [], {"value": Literal(np.array(0, np.int64))})[0]
    v = b.emit(get("mul"), [fn.args[0], zero], {})[0]
    for _ in range(levels):
        v = b.emit(get("add"), [v, v], {})[0]
    fn.body.set_returns([v])
    calls = []
    expand = loop_scalar.expand
    monkeypatch.setattr(loop_scalar, "expand", lambda *a, **k: calls.append(1) or expand(*a, **k))
    kernel = lower_block(fn.body)
    assert len(calls) == levels + 1, len(calls)
    assert "0" in print_kernel(kernel)
