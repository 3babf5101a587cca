"""A convolution's windows multiplied a block of output rows at a time (``program_plan.
ConvGemm``): the plan takes a Patches step whose windows only its product reads, from
CONV_BLOCKED_MIN_BYTES of them; the blocks' results are the whole product's at every
window, stride, dilation, padding and dtype, on one lane and on many; windows another op
reads are still written whole; the profiler names the fused step after its product."""

from __future__ import annotations

import json

import numpy as np
import pytest

import flowjit as fj
from flowjit.codegen_cpu import program_plan
from flowjit.codegen_cpu.program_plan import ConvGemm, plan_program

# (kernel, strides, dilation, padding): the zoo's 3x3 SAME; strided VALID; dilated; a 5x5
# strided SAME; a stride past the window; explicit lopsided pads wider than the window.
WINDOWS = [((3, 3), (1, 1), (1, 1), "SAME"),
           ((3, 2), (2, 1), (1, 1), "VALID"),
           ((3, 3), (1, 1), (2, 3), "SAME"),
           ((5, 5), (2, 2), (1, 1), "SAME"),
           ((2, 2), (3, 3), (1, 1), "VALID"),
           ((3, 3), (1, 2), (1, 1), ((4, 0), (1, 5)))]


@pytest.fixture
def blocked(monkeypatch):
    """Every convolution's windows blocked, a block of few rows: many blocks and lanes."""
    monkeypatch.setattr(program_plan, "CONV_BLOCKED_MIN_BYTES", 0)
    monkeypatch.setattr(program_plan, "CONV_BLOCK_BYTES", 1024)


def _plan_text(f, *args) -> str:
    (entry,) = f._cache.values()
    exe = entry.executable
    assert exe._program is not None, exe.native_reason
    return exe._program.describe()


def _conv(kernel, strides, dilation, padding):
    def body(x, w):
        return fj.conv2d(x, w, strides=strides, padding=padding, dilation=dilation) * 0.5
    return body


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("window", WINDOWS)
def test_blocks_of_windows_give_the_whole_products_result(blocked, window, dtype):
    kernel, strides, dilation, padding = window
    rng = np.random.default_rng(len(str(window)))
    # 7 images of 11x9: output rows whose count has few divisors, more blocks than lanes.
    x = rng.standard_normal((7, 11, 9, 3)).astype(dtype)
    w = rng.standard_normal((*kernel, 3, 5)).astype(dtype)
    body = _conv(*window)
    f = fj.function(body)
    got = f(x, w)
    plan = _plan_text(f, x, w)
    assert "conv gemm" in plan and "patches routine" not in plan, plan
    want = fj.function(body, backend="interpreter")(x, w)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


def test_one_lane_runs_every_block_and_blocks_divide_an_images_rows(blocked):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((3, 10, 10, 4)).astype(np.float32)
    w = rng.standard_normal((3, 3, 4, 6)).astype(np.float32)
    f = fj.function(_conv((3, 3), (1, 1), (1, 1), "SAME"))
    f(x, w)
    exe = next(iter(f._cache.values())).executable
    for threads, lanes in ((1, 1), (2, 2 * program_plan.OVERSPLIT)):
        plan, _ = plan_program(exe.function, exe.lowered.kernels, True, threads, exe.lowered.blocks, routines=True)
        (step,) = [s for s in plan.steps if isinstance(s, ConvGemm)]
        # 10 output rows of 10 x 36 float32s (1440 bytes a row): one row fits 1024 bytes at
        # most, and 1 divides 10.
        assert step.rows == 1 and step.blocks == 30 and step.lanes == lanes
        assert step.slot_bytes >= 1440 and step.slot_bytes % program_plan.SCRATCH_ALIGN == 0
    # A block of as many rows as divide the image's and fit (5 of 10 in 8 KiB).
    program_plan.CONV_BLOCK_BYTES = 8192
    plan, _ = plan_program(exe.function, exe.lowered.kernels, True, 2, exe.lowered.blocks, routines=True)
    (step,) = [s for s in plan.steps if isinstance(s, ConvGemm)]
    assert step.rows == 5 and step.blocks == 6


def test_windows_another_op_reads_are_written_whole(blocked):
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 6, 6, 3)).astype(np.float32)
    w = rng.standard_normal((27, 4)).astype(np.float32)

    def body(x, w):
        from flowjit.tracer.core import bind
        windows = bind("conv_patches", [x], {"kernel": (3, 3), "pads": (1, 1, 1, 1)})
        return fj.matmul(windows.reshape(2, 6, 6, 27), w), windows
    f = fj.function(body)
    y, windows = f(x, w)
    plan = _plan_text(f, x, w)
    assert "conv gemm" not in plan and "patches routine" in plan, plan
    want_y, want_windows = fj.function(body, backend="interpreter")(x, w)
    np.testing.assert_array_equal(windows, want_windows)
    np.testing.assert_allclose(y, want_y, rtol=1e-5, atol=1e-5)


def test_small_windows_keep_the_patches_step():
    # Under CONV_BLOCKED_MIN_BYTES the windows are written whole (one routine call and one
    # product, no lanes).
    x = np.ones((2, 5, 5, 3), np.float32)
    w = np.ones((3, 3, 3, 2), np.float32)
    f = fj.function(_conv((3, 3), (1, 1), (1, 1), "SAME"))
    f(x, w)
    plan = _plan_text(f, x, w)
    assert "conv gemm" not in plan and "patches routine" in plan, plan


def test_the_profiler_names_the_fused_step_after_its_product(blocked, tmp_path):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 8, 8, 3)).astype(np.float32)
    w = rng.standard_normal((3, 3, 3, 4)).astype(np.float32)
    f = fj.function(lambda x, w: fj.maximum(fj.conv2d(x, w, padding="SAME"), 0.0).sum())
    f(x, w)
    assert "conv gemm" in _plan_text(f, x, w)
    path = tmp_path / "trace.json"
    with fj.profile(path):
        f(x, w)
    spans = [e for e in json.loads(path.read_text())["traceEvents"] if e["ph"] == "X" and e["cat"] != "call"]
    ops = [op for op in f.ir(x, w, stage="fused").body.ops
           if op.primitive.role in ("kernel", "matrix_product")]
    # The windows' kernel and the product are one span, the product's; the kernel after it
    # keeps its own name.
    assert [e["name"] for e in spans if e["cat"] in ("kernel", "gemm")] == [
        op.attrs.get("name", op.name) for op in ops[1:]]
    gemm = next(e for e in spans if e["cat"] == "gemm")
    assert gemm["args"]["blocks"] >= 2 and gemm["args"]["flops"] == 2 * 128 * 27 * 4


def _conv_cases():
    from tests.registry.test_generic import ALL_CASES
    return [c for c in ALL_CASES if c.prim == "conv2d"]


@pytest.mark.parametrize("case", _conv_cases(), ids=lambda c: c.id or c.prim)
def test_every_conv2d_registry_case_and_its_gradients_with_blocked_windows(blocked, case):
    # The registry's convolutions (strides, dilation, padding, groups, every float dtype)
    # with every windows' product blocked: the forward and both gradients against the
    # interpreter. A grouped convolution's windows are moved into rows first: not blocked.
    from flowjit.tracer.core import bind
    from tests.registry.test_compiled import case_function, case_inputs
    xs = case_inputs(case)
    if not np.issubdtype(xs[0].dtype, np.floating):
        pytest.skip("conv2d is defined on floats")
    tol = {np.dtype(np.float16): 2e-2, np.dtype(np.float32): 2e-4}.get(xs[0].dtype, 1e-10)
    f = case_function(case)
    np.testing.assert_allclose(f(*xs), case_function(case, backend="interpreter")(*xs), rtol=tol, atol=tol)

    def grads(x, w):
        return fj.grad(lambda x, w: fj.sum(bind("conv2d", [x, w], case.attrs) ** 2), argnums=(0, 1))(x, w)
    got = fj.function(grads)(*xs)
    want = fj.function(grads, backend="interpreter")(*xs)
    scale = max(float(np.abs(np.asarray(want[1], np.float64)).max(initial=0.0)), 1.0)
    for g, r in zip(got, want):
        np.testing.assert_allclose(g, r, rtol=tol, atol=tol * scale)


def test_the_registry_exercises_both_blocked_forms(blocked):
    from flowjit.tracer.core import bind
    from tests.registry.test_compiled import case_inputs
    case = next(c for c in _conv_cases() if not c.attrs.get("groups", 1) > 1
                and case_inputs(c)[0].dtype == np.float32)
    xs = case_inputs(case)
    f = fj.function(lambda x, w: fj.grad(lambda x, w: fj.sum(bind("conv2d", [x, w], case.attrs) ** 2),
                                         argnums=(0, 1))(x, w))
    f(*xs)
    plan = _plan_text(f, *xs)
    assert "conv gemm" in plan and ").T @" in plan, plan
