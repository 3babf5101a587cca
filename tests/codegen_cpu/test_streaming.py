"""Streaming stores of large 1-D elementwise kernels (flowjit.codegen_cpu.streaming): which
kernels stream, and that the streamed path (unaligned heads, four-page blocks, tails, in
place) stores exactly what the plain loop stores."""

from __future__ import annotations

import re

import numpy as np
import pytest
from numba import njit

import flowjit as fj
from flowjit.codegen_cpu import compile_kernel, streaming
from flowjit.codegen_cpu.kernel_source import PARALLEL_MIN_ELEMENTS
from flowjit.codegen_cpu.streaming import prefetch_line


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("FLOWJIT_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "flowjit-cache"))


def gelu(x):
    return 0.5 * x * (1 + fj.tanh(0.7978845608 * (x + 0.044715 * x ** 3)))


def fma_like(x, y):
    return x * y + x


def kernel(f, args, threshold, monkeypatch):
    """The compiled kernel of ``f``'s one fusion, generated with ``STREAM_MIN_BYTES = threshold``."""
    monkeypatch.setattr(streaming, "STREAM_MIN_BYTES", threshold)
    ops = fj.function(f).ir(*args, stage="fused").body.ops
    (fusion,) = [op for op in ops if op.name == "fusion"]
    return compile_kernel(fusion.blocks[0], f"stream_{f.__name__}")


def at_offset(n, dtype, offset):
    """An array of n elements starting ``offset`` elements after a 64-byte boundary."""
    raw = np.empty(n + 64, dtype)
    skip = (-raw.ctypes.data % 64) // raw.itemsize
    return raw[skip + offset:skip + offset + n]


def misaligned(n, dtype):
    """An array of n elements 2 bytes past an element boundary: stream_head gives -1 for it."""
    out = np.zeros(np.dtype(dtype).itemsize * n + 2, np.uint8)[2:].view(dtype)
    assert out.ctypes.data % out.itemsize == 2
    return out


# Past the parallel threshold, with two four-page blocks and a ragged tail.
N = PARALLEL_MIN_ELEMENTS + 2 * 4096 + 77


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("f", [gelu, fma_like], ids=lambda f: f.__name__)
def test_streamed_stores_equal_plain_stores(f, dtype, monkeypatch):
    rng = np.random.default_rng(7)
    args = [(rng.standard_normal(N) * 3).astype(dtype) for _ in range(f.__code__.co_argcount)]
    streamed = kernel(f, args, 0, monkeypatch)
    assert "stream_chunk(" in streamed.source and "stream_fence()" in streamed.source
    assert f"n0 * {np.dtype(dtype).itemsize} >= 0 else -1" in streamed.source  # the threshold it was made with
    want = misaligned(N, dtype)  # no 64-byte boundary between elements: the kernel's plain loop
    streamed.fn(*args, want)
    np.testing.assert_allclose(want, fj.function(f, interpret=True)(*args), rtol=1e-5 if dtype == np.float32 else 1e-12,
                               atol=1e-6 if dtype == np.float32 else 1e-14)
    for offset in (0, 1, 5, 64 // np.dtype(dtype).itemsize - 1):  # every head length
        out = at_offset(N, dtype, offset)
        out[:] = np.nan
        streamed.fn(*args, out)
        np.testing.assert_array_equal(out, want)
    # in place: the output is the first input (the memory plan does this when it dies)
    first = args[0].copy()
    streamed.fn(first, *args[1:], first)
    np.testing.assert_array_equal(first, want)


def test_an_output_misaligned_within_an_element_is_stored_plainly(monkeypatch):
    x = np.random.default_rng(8).standard_normal(N).astype(np.float32)
    k = kernel(fma_like, [x, x], 0, monkeypatch)
    out = misaligned(N, np.float32)
    k.fn(x, x, out)
    np.testing.assert_array_equal(out, x * x + x)


@pytest.mark.parametrize("f", [
    lambda x: x[::-1] * 2,                       # reads at another index than it writes
    lambda x: x.reshape(-1, 64) * 2,             # 2-D
    lambda x: (x * 2).astype(np.int32),          # an integer output
    lambda x: (x * 2, x + 1),                    # two outputs
], ids=["reversed", "2d", "int", "two_outputs"])
def test_only_one_dimensional_float_elementwise_kernels_stream(f, monkeypatch):
    monkeypatch.setattr(streaming, "STREAM_MIN_BYTES", 0)
    x = np.random.default_rng(9).standard_normal(N - 77).astype(np.float32)
    g = fj.function(f)
    assert "stream_chunk(" not in g.kernels(x)
    got, want = g(x), fj.function(f, interpret=True)(x)
    for a, b in zip(*((r,) if not isinstance(r, tuple) else r for r in (got, want)), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6)


def test_fj_function_streams_large_outputs(monkeypatch):
    """Through the runtime (pool buffers, the driver), a streamed kernel's result is right."""
    monkeypatch.setattr(streaming, "STREAM_MIN_BYTES", 1 << 20)
    x = np.random.default_rng(10).standard_normal(N).astype(np.float32)
    g = fj.function(gelu)
    assert "stream_chunk(" in g.kernels(x)
    np.testing.assert_allclose(g(x), fj.function(gelu, interpret=True)(x), rtol=1e-5, atol=1e-6)


def test_streamed_loops_prefetch_every_input_line_one_block_ahead(monkeypatch):
    monkeypatch.setattr(streaming, "STREAM_MIN_BYTES", 0)
    x32 = np.random.default_rng(11).standard_normal(N).astype(np.float32)
    x64 = x32.astype(np.float64)
    ahead = 4 * 4096 // 4  # one block of four pages, in float32 output elements

    def prefetches(f, *args):
        return sorted(re.findall(r"prefetch_line\((in\d), o\d+ \+ (\d+)\)", fj.function(f).kernels(*args)))

    assert prefetches(fma_like, x32, x32) == [("in0", str(ahead)), ("in1", str(ahead))]
    # a float64 input spans two lines for each line of the float32 output
    assert prefetches(lambda b: b.astype(np.float32) * 2, x64) == [("in0", str(ahead)), ("in0", str(ahead + 8))]
    monkeypatch.setattr(streaming, "PREFETCH_BLOCKS", 0)
    assert "prefetch_line(" not in fj.function(lambda a: a * 3).kernels(x32)


def test_prefetch_past_the_end_of_an_array_is_harmless():
    @njit
    def touch(a, i):
        prefetch_line(a, i)
        return a[0]

    a = np.ones(16, np.float32)
    assert touch(a, 1 << 22) == 1.0  # 16 MiB past the end: a hint, never a load
