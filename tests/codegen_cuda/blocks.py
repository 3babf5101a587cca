"""The CUDA backend's tests start from fusion blocks; the backend starts from the loop IR the
runtime lowers them to. These helpers lower a block (or a fused Function) the way the
runtime does (``flowjit.lowering.backend``) and hand it to the backend's own entry points.
Importing this module imports numba.cuda (through flowjit.codegen_cuda)."""

from __future__ import annotations

from flowjit.codegen_cuda import (
    CudaExecutable,
    CudaKernel,
    CudaKernelCompileError,
    CudaKernelPlan,
    UnsupportedOp,
    plan_kernel,
    static_reason,
)
from flowjit.codegen_cuda.compile import load_plan
from flowjit.codegen_cuda.render import module_source
from flowjit.ir.core import Block, Function
from flowjit.ir.errors import KernelCompileError
from flowjit.lowering import Unsupported
from flowjit.lowering.backend import kernel_symbol, lower_fusion, lower_program


def plan_block(block: Block, name: str, lines: str = "") -> CudaKernelPlan:
    """``block`` lowered and rendered for CUDA; UnsupportedOp when the backend refuses it."""
    reason = static_reason(block)
    if reason:
        raise UnsupportedOp(reason)
    try:
        kernel = lower_fusion(block, name, lines, kernel_symbol(name, set()))
    except Unsupported as e:
        raise UnsupportedOp(str(e)) from None
    return plan_kernel(kernel, name, lines)


def supported(block: Block) -> str | None:
    """Why the CUDA backend cannot run ``block`` as one kernel (None: it can)."""
    try:
        plan_block(block, "check")
    except (UnsupportedOp, CudaKernelCompileError, KernelCompileError) as e:
        return str(e)
    return None


def compile_block(block: Block, name: str, lines: str = "") -> CudaKernel:
    """``block``'s CUDA kernel, loaded (numba compiles it at its first launch)."""
    return load_plan(plan_block(block, name, lines), name, lines, [a.type for a in block.args],
                     [v.type for v in block.returns])


def block_source(block: Block, name: str) -> str:
    """The numba.cuda module source of ``block``'s kernel."""
    return module_source(plan_block(block, name))


def cuda_executable(function: Function, device: str) -> CudaExecutable:
    """A fused Function on ``device``, lowered as the runtime lowers a CUDA partition."""
    return CudaExecutable(lower_program(function, single_ops=True), device)
