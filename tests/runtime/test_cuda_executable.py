"""The CUDA executable's per-call state, checked under numba's CUDA simulator in a
subprocess (``sim_cuda_executable_cases.py``): numba reads ``NUMBA_ENABLE_CUDASIM`` once,
when first imported, and this process imported it already."""

from __future__ import annotations

from tests.codegen_cuda.test_cuda_backend import _env, _passed_or_skip, _pytest


def test_cuda_executable_cases_under_the_simulator(tmp_path):
    _passed_or_skip(_pytest("tests/runtime/sim_cuda_executable_cases.py", _env(tmp_path, NUMBA_ENABLE_CUDASIM="1")))
