"""The LLVM renderer (flowjit.codegen_llvm.render): every fusible registry case, random
fused programs and the 0-d reductions rendered, compiled and run against the reference
interpreter, plus the NaN, infinity and integer edges of max, min, floor_div, mod and cast."""

from __future__ import annotations

import math

import numpy as np
import pytest

import flowjit as fj
from flowjit.ir.interpreter import run_op
from flowjit.lowering import lower_block, print_kernel, verify_kernel
from tests.lowering.test_registry_cases import CASES, case_function
from tests.registry.case import kernel_tolerance
from tests.registry.test_generic import _tolerance


@pytest.fixture(autouse=True)
def _own_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("FLOWJIT_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "llvm-cache"))


def run_kernel(kernel, inputs, outputs_like):
    """Compile ``kernel`` and run it on ``inputs`` into fresh outputs shaped like ``outputs_like``."""
    from flowjit.codegen_llvm.render import compile_kernel
    got = [np.full(np.shape(w), 7, np.asarray(w).dtype) for w in outputs_like]
    compile_kernel(kernel)([np.asarray(x, order="C") for x in inputs], got)
    return got


def check_block(block, inputs, want, name):
    kernel = lower_block(block, name)
    verify_kernel(kernel)
    got = run_kernel(kernel, inputs, want)
    for g, w in zip(got, want):
        w = np.asarray(w)
        tol = _tolerance(w.dtype) if w.dtype == np.float16 else kernel_tolerance(w.dtype)
        np.testing.assert_allclose(g, w, equal_nan=True, err_msg=print_kernel(kernel), **tol)
        assert g.dtype == w.dtype


def test_every_fusible_registry_case_compiles_and_runs_as_the_interpreter():
    from flowjit.ir import interpret
    failures = []
    for case in CASES:
        fn, arrays = case_function(case)
        try:
            check_block(fn.body, arrays, interpret(fn, arrays), f"case_{case.prim}")
        except Exception as e:  # collected, so one run names every failing case
            failures.append(f"{case.id or case.prim}: {str(e)[:3000]}")
    assert not failures, f"{len(failures)} of {len(CASES)} cases:\n" + "\n\n".join(failures[:5])
