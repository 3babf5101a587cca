"""Native forms of the ops real models use (issue 33): each program here runs as ONE native
call (no per-op NumPy path), and gives the interpreter's results, gradients included."""

from __future__ import annotations

import numpy as np
import pytest

import flowjit as fj
from flowjit.ir.interpreter import interpret
from flowjit.lowering.printer import print_kernel
from flowjit.tracer.pytree import flatten


def _native_call(fn, *args):
    """``fn`` compiled and run twice (the second call through the native driver), checked to
    be one native program; its result."""
    f = fj.function(fn)
    f(*args)
    out = f(*args)
    (entry,) = f._cache.values()
    exe = entry.executable
    assert exe._program is not None, exe.native_reason
    return out, entry


def _interpreted(entry, *args):
    return interpret(entry.function, [np.asarray(a) for a in flatten(list(args))[0]])


def _check(fn, *args, rtol=1e-5, atol=1e-6):
    out, entry = _native_call(fn, *args)
    ref = _interpreted(entry, *args)
    outs = flatten(out)[0]
    assert len(outs) == len(ref)
    for o, r in zip(outs, ref):
        np.testing.assert_allclose(np.asarray(o), r, rtol=rtol, atol=atol)
    return out


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.complex64])
def test_gather_clamps_out_of_range_ids_and_fuses_with_its_consumer(dtype):
    rng = np.random.default_rng(0)
    table = (rng.standard_normal((50, 8)) * 10).astype(dtype)
    ids = rng.integers(-60, 70, (6, 4)).astype(np.int64)
    out = _check(lambda t, i: fj.take(t, i, axis=0).sum(axis=1), table, ids)
    wrapped = np.where(ids < 0, ids + 50, ids)               # NumPy's negative ids, then JAX's clamp
    np.testing.assert_allclose(out, table[np.clip(wrapped, 0, 49)].sum(axis=1), rtol=1e-5)


def test_gather_along_an_inner_axis_of_a_computed_value():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3, 7, 5)).astype(np.float32)
    ids = np.array([[6, 0], [2, 99]], np.int32)
    out = _check(lambda x, i: fj.take(fj.exp(x), i, axis=1) * 2.0, x, ids)
    np.testing.assert_allclose(out, np.exp(x)[:, np.clip(ids, 0, 6)] * 2.0, rtol=1e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64, np.complex128])
def test_scatter_add_accumulates_repeated_ids_in_order(dtype):
    rng = np.random.default_rng(2)
    base = (rng.standard_normal((10, 3)) * 4).astype(dtype)
    ids = np.array([[1, 1, 9], [1, -5, 40]], np.int64)   # 1 three times; -5 is 5; 40 clamped
    updates = (rng.standard_normal((2, 3, 3)) * 4).astype(dtype)
    out = _check(lambda b, i, u: fj.scatter_add(b, i, u, axis=0) + b, base, ids, updates)
    want = base.copy()
    np.add.at(want, np.clip(np.where(ids < 0, ids + 10, ids), 0, 9), updates)
    np.testing.assert_allclose(out, want + base, rtol=1e-6)


def test_an_embedding_bag_and_its_gradient_are_one_native_program_each():
    rng = np.random.default_rng(3)
    table = rng.standard_normal((1000, 16)).astype(np.float32)
    ids = rng.integers(0, 1000, (32, 5)).astype(np.int32)
    ids[0, :3] = 7                                           # repeated ids add their gradients
    w = rng.standard_normal((16, 4)).astype(np.float32)

    def loss(table, w, ids):
        return fj.mean(fj.tanh(fj.take(table, ids, axis=0).mean(axis=1) @ w) ** 2)

    _check(loss, table, w, ids)
    (gt, gw) = _check(fj.grad(loss, argnums=(0, 1)), table, w, ids, rtol=1e-4, atol=1e-6)
    h = np.tanh(table[ids].mean(1) @ w)
    dz = (2 * h / h.size) * (1 - h * h)
    dbag = dz @ w.T / ids.shape[1]
    want = np.zeros_like(table)
    np.add.at(want, ids, np.repeat(dbag[:, None, :], ids.shape[1], axis=1))
    np.testing.assert_allclose(gt, want, rtol=1e-4, atol=1e-7)


@pytest.mark.parametrize("a_shape, b_shape", [
    ((4, 3, 5, 6), (3, 6, 2)),       # b broadcast along the leading axis
    ((4, 1, 5, 6), (3, 6, 2)),       # both broadcast: a stride of 0 on each side
    ((4, 3, 5, 6), (6, 2)),          # rows folded into one product
    ((6, 2), (3, 2, 5)),             # a 2-D a against a batch of b
    ((2, 0, 3, 4), (4, 5)),          # an empty batch
])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_batched_matmul_broadcasts_its_batch_dimensions(a_shape, b_shape, dtype):
    rng = np.random.default_rng(4)
    a = rng.standard_normal(a_shape).astype(dtype)
    b = rng.standard_normal(b_shape).astype(dtype)
    out, entry = _native_call(lambda a, b: a @ b, a, b)
    np.testing.assert_allclose(out, np.matmul(a, b), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("a_shape, b_shape, a_t", [
    ((32, 128, 64), (32, 64, 128), False),      # attention's scores: 32 heads' products
    ((4, 1, 96, 80), (9, 80, 72), False),       # a stride of 0 on each side
    ((36, 64, 96), (36, 64, 112), True),         # a read transposed in place
])
def test_a_batch_of_small_products_runs_over_the_pool_and_matches_numpy(a_shape, b_shape, a_t):
    # Each product is below the size the gemm cuts over the pool itself; together they are
    # above it, so the batch's products are the pool's chunks (each on one BLAS thread;
    # beside busy processes: codegen_cpu/test_pool.py).
    from flowjit.codegen_cpu import native_pool
    rng = np.random.default_rng(8)
    a = rng.standard_normal(a_shape).astype(np.float32)
    b = rng.standard_normal(b_shape).astype(np.float32)
    fn = (lambda a, b: fj.swapaxes(a, -1, -2) @ b) if a_t else (lambda a, b: a @ b)
    want = np.matmul(np.swapaxes(a, -1, -2) if a_t else a, b.astype(np.float64))
    out, entry = _native_call(fn, a, b)
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)
    plan = entry.executable._program.describe()
    if native_pool().workers:
        assert "x batch" in plan and "threads" in plan.split("x batch")[1].splitlines()[0], plan


def test_a_swap_of_the_last_two_axes_is_read_in_place_by_the_gemm():
    rng = np.random.default_rng(5)
    q, k = rng.standard_normal((2, 3, 8, 4)), rng.standard_normal((2, 3, 8, 4))
    out, entry = _native_call(lambda q, k: fj.swapaxes(q, -1, -2) @ k + 1.0, q, k)
    np.testing.assert_allclose(out, np.swapaxes(q, -1, -2) @ k + 1.0, rtol=1e-12)
    plan = entry.executable._program.describe()
    assert "gemm" in plan and ".T @" in plan and "transpose" not in plan.split("gemm")[0], plan


def test_attention_heads_and_its_gradient_are_one_native_program():
    rng = np.random.default_rng(6)
    B, T, H, D = 2, 16, 4, 8

    def attention(x, w):
        qkv = x @ w                                                   # [B, T, 3HD]
        q, k, v = (fj.transpose(qkv[..., i * H * D:(i + 1) * H * D].reshape(B, T, H, D), (0, 2, 1, 3))
                   for i in range(3))
        s = q @ fj.swapaxes(k, -1, -2) / float(np.sqrt(D))
        a = fj.exp(s - s.max(-1, keepdims=True))
        a = a / a.sum(-1, keepdims=True)
        return fj.transpose(a @ v, (0, 2, 1, 3)).reshape(B, T, H * D)

    x = rng.standard_normal((B, T, H * D)).astype(np.float32)
    w = (rng.standard_normal((H * D, 3 * H * D)) * 0.2).astype(np.float32)
    _check(attention, x, w, rtol=1e-4, atol=1e-5)
    _check(fj.grad(lambda x, w: (attention(x, w) ** 2).sum(), argnums=(0, 1)), x, w, rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("attrs", [
    {},
    {"padding": "SAME"},
    {"strides": (2, 2), "padding": "SAME"},
    {"dilation": (2, 1)},
    {"strides": (2, 3), "padding": ((1, 2), (0, 1))},
], ids=["valid", "same", "strided-same", "dilated", "strided-explicit-pads"])
def test_conv2d_and_both_its_gradients_are_one_native_program(attrs):
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 9, 8, 3)).astype(np.float32)
    w = rng.standard_normal((3, 3, 3, 4)).astype(np.float32)
    _check(lambda x, w: fj.conv2d(x, w, **attrs), x, w, rtol=1e-5, atol=1e-5)
    _check(fj.grad(lambda x, w: (fj.tanh(fj.conv2d(x, w, **attrs)) ** 2).sum(), argnums=(0, 1)), x, w,
           rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("groups, per_group, out, attrs", [
    (3, 2, 6, {"padding": "SAME"}),
    (2, 3, 4, {"strides": (2, 1), "dilation": (1, 2)}),
    (6, 1, 6, {"padding": "SAME"}),                                  # depthwise
    (6, 1, 12, {"strides": (2, 2), "padding": ((1, 0), (2, 1))}),    # depthwise, 2 filters a channel
], ids=["grouped-same", "grouped-strided-dilated", "depthwise", "depthwise-multiplier-strided"])
def test_grouped_and_depthwise_convolutions_and_their_gradients_are_one_native_program(groups, per_group, out,
                                                                                       attrs):
    rng = np.random.default_rng(11)
    x = rng.standard_normal((2, 9, 8, 6)).astype(np.float32)
    w = rng.standard_normal((3, 3, per_group, out)).astype(np.float32)
    y = _check(lambda x, w: fj.conv2d(x, w, groups=groups, **attrs), x, w, rtol=1e-5, atol=1e-5)
    # Each group is a convolution of its own channels with its own filters.
    og = out // groups
    parts = [np.asarray(fj.function(lambda x, w: fj.conv2d(x, w, **attrs))(
        x[..., g * per_group:(g + 1) * per_group], w[..., g * og:(g + 1) * og])) for g in range(groups)]
    np.testing.assert_allclose(np.asarray(y), np.concatenate(parts, axis=-1), rtol=1e-5, atol=1e-5)
    _check(fj.grad(lambda x, w: (fj.tanh(fj.conv2d(x, w, groups=groups, **attrs)) ** 2).sum(), argnums=(0, 1)),
           x, w, rtol=1e-4, atol=1e-4)


def _check_conv_gradients(attrs, x, w):
    """The gradients of sum(tanh(conv2d(x, w, **attrs))**2) (float64 ``x`` and ``w``) run as
    one native program, match the interpreter's, and central differences of the compiled loss."""
    from tests.finite_differences import central_differences

    def loss(x, w):
        return (fj.tanh(fj.conv2d(x, w, **attrs)) ** 2).sum()
    gx, gw = _check(fj.grad(loss, argnums=(0, 1)), x, w, rtol=1e-9, atol=1e-9)
    f = fj.function(loss)
    value = lambda x, w: float(f(x, w))      # noqa: E731
    np.testing.assert_allclose(gx, central_differences(value, (x, w), 0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(gw, central_differences(value, (x, w), 1), rtol=1e-5, atol=1e-6)


def test_a_large_depthwise_filter_and_its_gradients_are_one_native_program_and_match_finite_differences():
    # Past DEPTHWISE_TAPS_MAX taps (6x5 here) the taps' products are summed over the filter's
    # two axes; strided, dilated, SAME, two filters a channel. Gradients in float64 against
    # central differences of the compiled function itself.
    rng = np.random.default_rng(13)
    attrs = {"strides": (2, 1), "dilation": (1, 2), "padding": "SAME", "groups": 3}
    x = rng.standard_normal((1, 7, 9, 3))
    w = rng.standard_normal((6, 5, 1, 6))
    _check(lambda x, w: fj.conv2d(x, w, **attrs), x.astype(np.float32), w.astype(np.float32), rtol=1e-5, atol=1e-5)

    _check_conv_gradients(attrs, x, w)


def test_a_grouped_convolution_of_short_sums_is_one_kernel_and_a_long_one_a_batch_of_products():
    # A group's output channel sums KH*KW*C/G products: at most GROUPED_DIRECT_TERMS (the
    # lowering's SUM_BLOCK, a float32 sum that adds in float32), one kernel of them, no
    # product; more, a batch of G products. The gradient's input term stays the products.
    from flowjit.ir.primitives.linalg import GROUPED_DIRECT_TERMS
    from flowjit.lowering.lower import SUM_BLOCK
    assert GROUPED_DIRECT_TERMS == SUM_BLOCK
    rng = np.random.default_rng(14)
    x = rng.standard_normal((2, 7, 6, 8)).astype(np.float32)
    for cg, groups, direct in ((4, 2, True), (2, 4, True), (16, 2, False)):
        w = rng.standard_normal((3, 3, cg, 8)).astype(np.float32)
        xs = rng.standard_normal((2, 7, 6, cg * groups)).astype(np.float32)
        attrs = {"padding": "SAME", "strides": (2, 1), "groups": groups}
        _, entry = _native_call(lambda x, w: fj.conv2d(x, w, **attrs), xs, w)
        assert ("gemm" not in entry.executable._program.describe()) is direct, (cg, groups)
        y = _check(lambda x, w: fj.conv2d(x, w, **attrs), xs, w, rtol=1e-5, atol=1e-5)
        og = 8 // groups
        parts = [np.asarray(fj.function(lambda x, w: fj.conv2d(x, w, padding="SAME", strides=(2, 1)))(
            xs[..., g * cg:(g + 1) * cg], w[..., g * og:(g + 1) * og])) for g in range(groups)]
        np.testing.assert_allclose(np.asarray(y), np.concatenate(parts, axis=-1), rtol=1e-5, atol=1e-5)
    # float64: the gradients against central differences of the compiled function, with
    # pads on one side wider than the filter's span (the input term's crop) and strides.
    _check_conv_gradients({"padding": ((5, 1), (0, 2)), "strides": (2, 1), "dilation": (2, 1), "groups": 2},
                          x.astype(np.float64)[:1, :6, :5], rng.standard_normal((3, 2, 4, 6)))


def test_a_depthwise_convolution_is_one_kernel_of_taps_times_filters_not_a_product_per_channel():
    rng = np.random.default_rng(12)
    x = rng.standard_normal((2, 8, 8, 16)).astype(np.float32)
    w = rng.standard_normal((3, 3, 1, 16)).astype(np.float32)
    _, entry = _native_call(lambda x, w: fj.conv2d(x, w, padding="SAME", groups=16), x, w)
    assert "gemm" not in entry.executable._program.describe()


def test_a_convolution_is_patches_and_one_gemm_and_a_1x1_convolution_reads_its_input():
    rng = np.random.default_rng(8)
    x = rng.standard_normal((2, 6, 6, 4)).astype(np.float32)
    _, entry = _native_call(lambda x, w: fj.maximum(fj.conv2d(x, w, padding="SAME"), 0.0), x,
                            rng.standard_normal((3, 3, 4, 5)).astype(np.float32))
    plan = entry.executable._program.describe()
    assert "patches routine" in plan and plan.count("gemm") == 1, plan   # a lone patches kernel: the routine
    _, entry = _native_call(lambda x, w: fj.conv2d(x, w), x, rng.standard_normal((1, 1, 4, 5)).astype(np.float32))
    plan = entry.executable._program.describe()
    assert "patches" not in plan and plan.count("gemm") == 1, plan


@pytest.mark.parametrize("model", ["mlp", "cnn", "transformer", "embedding", "lstm"])
def test_every_zoo_model_and_its_training_step_is_one_native_program(model):
    """The bench's zoo (bench/workloads/zoo.py: batch norm, pooling, attention, layer norm,
    GELU, an embedding bag, an LSTM over a scan, an Adam step), at its quick sizes: inference
    and the training step each run as one native call and give the interpreter's results."""
    from bench.workloads import zoo
    L = zoo.lib("flowjit")
    params, (x, y) = zoo.init(model, quick=True), zoo.batch(model, quick=True)
    _check(zoo.predict(L, model), params, x, rtol=1e-4, atol=1e-5)
    new, _, loss = _check(zoo.train_step(L, model), params, zoo.adam_state(params), x, y, rtol=1e-3, atol=1e-5)
    assert np.isfinite(loss)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.complex64])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_cumsum_is_numpys_running_sum_bit_for_bit(dtype, axis):
    rng = np.random.default_rng(9)
    x = (rng.standard_normal((4, 5, 3)) * 3).astype(dtype)
    out, entry = _native_call(lambda x: fj.cumsum(x * 2, axis=axis), x)
    np.testing.assert_array_equal(out, _interpreted(entry, x)[0])
    grad = _check(fj.grad(lambda x: (fj.cumsum(x, axis=axis) ** 2).sum()), x.real.astype(np.float64))
    assert grad.shape == x.shape


def test_a_float16_cumsum_accumulates_in_float32_as_numpy():
    x = np.linspace(0, 1, 707).astype(np.float16).reshape(7, 101)
    out, _ = _native_call(lambda x: fj.cumsum(x, axis=1), x)
    np.testing.assert_array_equal(out, np.cumsum(x, axis=1, dtype=np.float32).astype(np.float16))
    # The gradient is a running sum from the end (cumsum's reverse form).
    g = x[:, :7].copy()
    out, entry = _native_call(lambda g: fj.vjp(lambda x: fj.cumsum(x, axis=1), g)[1](g)[0], g)
    np.testing.assert_array_equal(out, _interpreted(entry, g)[0])


def test_a_kernel_of_its_own_reading_a_reshaped_view_gets_the_views_shape():
    # a[0] is a slice (a kernel) then a reshape the cumsum reads as a view of the slice's
    # [1, 3] buffer: the cumsum's sizes are its own operand's, [3].
    x = np.random.default_rng(10).random((2, 3))
    out, _ = _native_call(lambda a: fj.cumsum(a[0], axis=0), x)
    np.testing.assert_array_equal(out, np.cumsum(x[0]))


@pytest.mark.parametrize("draw", ["uniform", "normal"])
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_random_draws_are_the_interpreters_bits_in_the_native_program(draw, dtype):
    key = fj.random.PRNGKey(42)
    out, entry = _native_call(lambda k: getattr(fj.random, draw)(k, (4, 300), dtype=dtype), key)
    want = _interpreted(entry, key)[0]
    if draw == "normal" and dtype == np.float64:   # log, cos and sqrt: ours against libm's, ulps apart
        np.testing.assert_allclose(out, want, rtol=1e-14, atol=1e-14)
    else:
        np.testing.assert_array_equal(out, want)
    keys, entry = _native_call(lambda k: fj.random.split(k, 5), key)
    np.testing.assert_array_equal(keys, _interpreted(entry, key)[0])


def test_dropout_draws_its_mask_inside_the_kernel_that_scales():
    key = fj.random.PRNGKey(7)
    x = np.random.default_rng(11).standard_normal((64, 128)).astype(np.float32)

    def dropout(k, x):
        return fj.where(fj.random.uniform(k, x.shape) < 0.9, x / 0.9, 0.0)
    out = _check(dropout, key, x)
    assert 0.85 < np.mean(out != 0) < 0.95
    report = fj.explain(dropout, key, x)
    assert len(report.kernels) == 1, [k.name for k in report.kernels]


def test_a_concatenation_along_the_last_axis_computes_each_piece_over_its_own_columns():
    x, y = np.random.default_rng(12).standard_normal((6, 8)), np.random.default_rng(13).standard_normal((6, 3))
    out, entry = _native_call(lambda x, y: fj.concatenate([fj.exp(x), y[:, :0], fj.tanh(y) * 2], axis=1), x, y)
    np.testing.assert_allclose(out, _interpreted(entry, x, y)[0], rtol=1e-14)   # exp, tanh: ulps from libm
    (kernel,) = entry.executable.lowered.kernels.values()
    # One loop per non-empty piece under the row loop; no select between the pieces.
    (rows,) = kernel.body
    assert len(rows.body) == 2 and "?" not in print_kernel(kernel), print_kernel(kernel)
