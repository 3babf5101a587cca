"""The CUDA backend as the runtime uses it: ``flowjit.lowering.backend.Backend`` for
``cuda`` devices.

A lowered program (fusible ops outside fusions lowered too) becomes a ``CudaExecutable``:
its kernels rendered from the runtime's loop IR, matmul through cuBLAS, constants uploaded
once. It compiles as a whole or raises ``CudaUnsupportedError`` naming an op the device
cannot run; the host never calls its kernels one by one (``host_driver`` False).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from flowjit.codegen_cuda.compile import CudaKernel, compile_kernel
from flowjit.codegen_cuda.executable import CudaExecutable, why_not
from flowjit.ir.core import Op
from flowjit.ir.types import TensorType
from flowjit.lowering.backend import LoweredProgram
from flowjit.lowering.loops import Kernel


class CudaBackend:
    """The CUDA code generator (numba.cuda kernels, cupy for memory and cuBLAS)."""

    kind = "cuda"
    single_ops = True    # a transpose outside fusions runs as a kernel of its own
    host_driver = False
    flat_indices = False  # numba's arrays index dimension by dimension

    def why_not(self, op: Op) -> str | None:
        """Why ``op`` cannot run on a CUDA device (``executable.why_not``)."""
        return why_not(op)

    def compile_kernel(self, kernel: Kernel, in_types: list[TensorType], out_types: list[TensorType], *,
                       fastmath: bool = False) -> CudaKernel:
        """``kernel`` alone, launched on arrays of ``in_types`` into new arrays of
        ``out_types`` (the runtime compiles whole programs here; this is for a tool that
        times one kernel)."""
        return compile_kernel(kernel, kernel.name, in_types, out_types)

    def compile_program(self, program: LoweredProgram, device: str, *, fastmath: bool = False,
                        parallel: bool = True, pool_empty: Callable[..., np.ndarray] | None = None,
                        pool_min_bytes: int = 1 << 20, profile: bool = False) -> CudaExecutable:
        """``program`` as a CudaExecutable on ``device`` (the host's buffer pool, threads and
        profiling build do not apply to a GPU)."""
        return CudaExecutable(program, device)


BACKEND: Any = CudaBackend()
