"""A generated kernel that fails to compile is flowjit's bug: the error says so, names the
kernel and its ops, and points at the generated source, which is on disk to read."""

from __future__ import annotations

import os

import numpy as np
import pytest

from flowjit.codegen_cpu.compile import PRELUDE, CompiledKernel, KernelCompileError, _load, warm, write_source
from flowjit.ir.types import TensorType


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("FLOWJIT_CACHE_DIR", str(tmp_path))


def test_a_kernel_numba_rejects_is_reported_as_a_flowjit_bug_with_its_source():
    # numba cannot type a call of a Python builtin it does not support on arrays
    body = "def k_broken(in0, out0):\n    out0[0] = sorted(in0)\n    return 0\n"
    source = PRELUDE + body + "\n\nk_broken = njit(cache=CACHE, nogil=True)(k_broken)\n"
    path, text = write_source(source)
    kernel = CompiledKernel("broken", text, path, None, [TensorType((1,), "f32")], (), "k_broken")
    _load(kernel)
    with pytest.raises(KernelCompileError) as info:
        warm(kernel, [np.ones(3, np.float32)], "add from model.py:3")
    message = str(info.value)
    assert "kernel broken (add from model.py:3) failed to compile" in message
    assert "bug in flowjit" in message
    shown = message.rsplit("generated source: ", 1)[1]
    assert shown == path and os.path.exists(shown)
