"""The CPU backend as the runtime uses it: ``flowjit.lowering.backend.Backend`` for ``cpu``
devices.

A lowered program compiles as one native function (``program_plan`` plans it, ``program``
compiles it with its kernels in one module): ``compile_program`` raises ``NoProgram``
(``NotNative``) when some op has no native form, and the runtime's Python driver then calls
each kernel ``compile_kernel`` made (``render.CompiledKernel``: callable on arrays, with
``entry`` for a driver that passes pointers). Every op can run on a CPU device: what no
kernel computes runs its NumPy reference on the host.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from flowjit.ir.core import Op
from flowjit.ir.types import TensorType
from flowjit.lowering.backend import LoweredProgram
from flowjit.lowering.loops import Kernel

from . import render
from .parallel import default_threads
from .program import NativeProgram, compile_program
from .program_plan import plan_program


class CpuBackend:
    """The CPU's code generator (llvmlite): see the module docstring."""

    kind = "cpu"
    single_ops = False   # a transpose or reshape outside fusions is a view or folded into its reader
    host_driver = True
    flat_indices = True  # a load or store is at its buffer's row-major offset (Horner's sum, unchecked)

    def why_not(self, op: Op) -> str | None:
        """None: a CPU device runs every op (a kernel, a BLAS call or its NumPy reference)."""
        return None

    def compile_kernel(self, kernel: Kernel, in_types: list[TensorType], out_types: list[TensorType], *,
                       fastmath: bool = False) -> render.CompiledKernel:
        """``kernel`` compiled (or loaded from the object cache) as a ``CompiledKernel``:
        shape-generic, so the types only say what it will be called on."""
        return render.compile_kernel(kernel, fastmath=fastmath)

    def compile_program(self, program: LoweredProgram, device: str, *, fastmath: bool = False,
                        parallel: bool = True, pool_empty: Callable[..., np.ndarray] | None = None,
                        pool_min_bytes: int = 1 << 20, profile: bool = False) -> NativeProgram:
        """``program`` as one native function (``NotNative`` when some op has none); large
        results from ``pool_empty`` (the runtime's buffer pool) from ``pool_min_bytes``;
        ``profile``: a build that times each top-level step."""
        plan, constants = plan_program(program.function, program.kernels, parallel,
                                       default_threads() if parallel else 1, program.blocks, routines=True)
        return compile_program(plan, constants, pool_empty, pool_min_bytes, fastmath=fastmath, profile=profile)


BACKEND: Any = CpuBackend()
