"""Where the CUDA cases run: under numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``, what
CI has: no GPU) or on a real GPU (numba-cuda and cupy with a driver). The case modules
(``sim_cases.py``, ``sim_cuda_executable_cases.py``, ``sim_variable_cases.py``) call
``require_cuda_target`` before importing anything that loads numba.cuda, and name their
second device with ``other_device``: the simulator's one device stands for every index,
while a machine with one GPU has only ``cuda:0``.
"""

from __future__ import annotations

import pytest
from numba.core import config

SIMULATED = bool(config.ENABLE_CUDASIM)


def require_cuda_target(runner: str) -> None:
    """Skip the calling module (at import) unless its kernels can run here: the simulator
    is on and numba has a CUDA target to simulate, or numba's CUDA target finds a GPU.
    ``runner`` names the test that runs the module in a subprocess, for the skip reason."""
    try:
        from numba import cuda
    except ImportError as e:  # a numba without its built-in CUDA target needs numba-cuda
        pytest.skip(f"numba has no CUDA target ({e}); install numba-cuda", allow_module_level=True)
    if SIMULATED:
        return
    try:
        available = cuda.is_available()
    except Exception:  # a driver that fails to initialise is no GPU to test on
        available = False
    if not available:
        pytest.skip(f"run by {runner}: with NUMBA_ENABLE_CUDASIM=1, or without it on a machine with a GPU",
                    allow_module_level=True)


def other_device() -> int:
    """A device ordinal besides 0 where there is one: 1 under the simulator (its one device
    answers to every index), else the last GPU numba's CUDA target lists."""
    if SIMULATED:
        return 1
    from numba import cuda
    return len(cuda.gpus) - 1
