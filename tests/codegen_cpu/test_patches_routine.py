"""flowjit's compiled routine for a convolution's windows (``patches_routine``): byte for
byte the op's NumPy reference at every dtype, window, stride, dilation and padding, on the
calling thread and split over the pool; what a native program runs for a lone ``patches``
kernel, also when the program comes from the disk cache in a new process; and the C
library of ``flowjit compile`` keeps the kernel."""

from __future__ import annotations

import ctypes
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import flowjit as fj
from flowjit.codegen_cpu import patches_routine
from flowjit.ir.primitives.linalg import _patches_impl
from flowjit.tracer.core import bind

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# (kernel, strides, dilation, pads top/bottom/left/right): the zoo's 3x3 SAME; strided,
# dilated and lopsided pads; pads wider than the window (whole rows and columns of zeros);
# 1x1; a stride past the window (skipped input).
WINDOWS = [((3, 3), (1, 1), (1, 1), (1, 1, 1, 1)),
           ((3, 2), (2, 1), (1, 2), (0, 2, 1, 0)),
           ((5, 5), (2, 2), (2, 1), (3, 3, 4, 4)),
           ((7, 7), (1, 1), (1, 1), (9, 9, 9, 9)),
           ((1, 1), (1, 1), (1, 1), (0, 0, 0, 0)),
           ((2, 2), (3, 3), (1, 1), (0, 0, 0, 0)),
           ((2, 3), (1, 2), (3, 1), (2, 0, 0, 3))]


def _routine():
    return ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p,
                            *[ctypes.c_int64] * len(patches_routine.PARAMS))(patches_routine.routine())


def _run(f, x, window, parts):
    kernel, strides, dilation, pads = window
    ref = _patches_impl(x, kernel=kernel, strides=strides, dilation=dilation, pads=pads)
    out = np.full(ref.shape, 7, x.dtype)   # no byte of the fill may survive
    n, h, w, c = x.shape
    f(x.ctypes.data, out.ctypes.data, n, h, w, c * x.itemsize, *ref.shape[1:3], *kernel, *strides, *dilation,
      pads[0], pads[2], parts)
    return ref, out


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64, np.complex128])
@pytest.mark.parametrize("channels", [1, 3, 16, 17, 40])
def test_the_routine_is_the_references_bytes(dtype, channels):
    # Channel bytes from 2 (float16) to 640: each way of moving bytes (bytes, pairs of
    # 4 to 32, 64-byte blocks) at the runs' sizes, interior columns and edge ones.
    rng = np.random.default_rng(channels)
    f = _routine()
    for window in WINDOWS:
        x = rng.standard_normal((2, 6, 7, channels)).astype(dtype)
        for parts in (1, 2):
            ref, out = _run(f, x, window, parts)
            assert ref.shape == out.shape
            np.testing.assert_array_equal(out.view(np.uint8), ref.view(np.uint8), err_msg=f"{window} parts {parts}")


def test_long_runs_go_through_the_library_and_negative_zeros_stay():
    f = _routine()
    x = np.full((1, 4, 4, 1100), -0.0, np.float32)      # a window row of 3 * 4400 bytes
    x[0, 1, 2, 5] = np.nan
    ref, out = _run(f, x, WINDOWS[0], 1)
    np.testing.assert_array_equal(out.view(np.uint8), ref.view(np.uint8))


def test_an_empty_output_writes_nothing():
    f = _routine()
    x = np.ones((0, 5, 5, 2), np.float32)
    ref, out = _run(f, x, WINDOWS[0], 2)
    assert out.shape == ref.shape == (0, 5, 5, 3, 3, 2)


def test_the_edge_columns_loops_are_rendered_once_per_way_of_moving_a_tap():
    # The edge columns' loops were rendered inside each way of moving a window row, for both
    # edges: 98 copies, 447 KB of IR that LLVM took 17-20 s to compile, the first
    # convolution's wait after an installation. Now a function of their own: one copy per
    # way of moving a tap, as many as the rows' loops (one per way of moving a window row).
    text = patches_routine.build_module()
    rows = re.findall(r"^r\.head[0-9.]*:", text, re.M)
    edges = re.findall(r"^je\.head[0-9.]*:", text, re.M)
    assert len(rows) >= 2 and len(edges) == len(rows), (len(rows), len(edges))
    assert re.search(r'^define internal void @"fj_patches_edges"\(', text, re.M), "the edges' function"


def _patches(x, **attrs):
    return bind("conv_patches", [x], {"kernel": (3, 3), **attrs})


def _plan(f, *args):
    f(*args)
    (entry,) = f._cache.values()
    exe = entry.executable
    assert exe._program is not None, exe.native_reason
    return exe._program.describe()


def test_a_lone_patches_kernel_runs_the_routine_and_a_fused_one_stays_a_kernel():
    x = np.random.default_rng(1).standard_normal((4, 9, 8, 5)).astype(np.float32)
    attrs = {"strides": (2, 1), "dilation": (1, 2), "pads": (1, 2, 0, 3)}
    f = fj.function(lambda x: _patches(x, **attrs))
    plan = _plan(f, x)
    assert "patches routine" in plan and "fj_kernel" not in plan, plan
    np.testing.assert_array_equal(f(x), _patches_impl(x, kernel=(3, 3), **attrs))
    # Fused with what makes its input, the patches stay in their kernel.
    g = fj.function(lambda x: _patches(fj.tanh(x), **attrs))
    plan = _plan(g, x)
    assert "patches routine" not in plan and "conv_patches" in plan, plan
    np.testing.assert_allclose(g(x), _patches_impl(np.tanh(x), kernel=(3, 3), **attrs), rtol=1e-6, atol=1e-6)


CHILD = r"""
import json, sys
import numpy as np
import flowjit as fj
x = np.arange(2 * 5 * 6 * 3, dtype=np.float64).reshape(2, 5, 6, 3)
w = np.linspace(-1, 1, 3 * 3 * 3 * 4).reshape(3, 3, 3, 4)
y = fj.function(lambda x, w: fj.conv2d(x, w, padding="SAME"))(x, w)
print(json.dumps({"y": y.tolist(), "stats": fj.cache_stats()}))
"""


def test_a_program_loaded_from_the_cache_in_a_new_process_finds_the_routine(tmp_path):
    # The regression: a warm process links the program's object without rendering it, so
    # the routine must be provided without the renderer's import.
    env = dict(os.environ, PYTHONPATH=ROOT, FLOWJIT_CACHE_DIR=str(tmp_path / "cache"),
               FLOWJIT_RUNTIME_DIR=str(tmp_path / "runtime"))
    outs = []
    for _ in range(2):
        run = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=300)
        assert run.returncode == 0, run.stderr[-3000:]
        outs.append(json.loads(run.stdout))
    assert outs[0]["stats"]["compiled"] >= 1 and outs[1]["stats"]["compiled"] == 0, outs
    x = np.arange(2 * 5 * 6 * 3, dtype=np.float64).reshape(2, 5, 6, 3)
    w = np.linspace(-1, 1, 3 * 3 * 3 * 4).reshape(3, 3, 3, 4)
    ref = np.einsum("nhwpqc,pqco->nhwo", _patches_impl(x, kernel=(3, 3), strides=(1, 1), dilation=(1, 1),
                                                           pads=(1, 1, 1, 1)), w)
    for out in outs:
        np.testing.assert_allclose(np.array(out["y"]), ref, rtol=1e-12, atol=1e-12)


def test_the_c_library_keeps_the_kernel():
    from flowjit.codegen_cpu.program_plan import plan_program
    f = fj.function(lambda x: _patches(x, pads=(1, 1, 1, 1)))
    x = np.ones((2, 5, 5, 3), np.float32)
    f(x)
    (entry,) = f._cache.values()
    exe = entry.executable
    plan, _ = plan_program(exe.function, exe.lowered.kernels, False, 1, exe.lowered.blocks)
    assert "patches routine" not in plan.describe() and "conv_patches" in plan.describe()
