"""The CUDA backend: each fusion block's loop IR (lowered once by the runtime) is rendered to
numba.cuda kernels (grid-stride loops, shared-memory block reductions; ``render``), matmul
goes to cuBLAS through cupy (or a tiled numba.cuda kernel without cupy), and
``CudaExecutable`` runs a fused Function on one ``cuda:K`` device. Everything runs under
numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``) where no GPU is present;
``FLOWJIT_CUDA_SIMULATOR_DEVICES=N`` then makes ``cuda_devices()`` report N devices.

Importing this package imports neither numba.cuda nor cupy: they load on first use.
"""

from flowjit.codegen_cuda.compile import (
    CudaKernel,
    CudaKernelCompileError,
    compile_kernel,
    kernel_stats,
    launch_config,
    plan_kernel,
    static_reason,
)
from flowjit.codegen_cuda.executable import (
    LIBRARY_CALLS,
    CudaExecutable,
    CudaUnsupportedError,
    feasible,
    why_not,
)
from flowjit.codegen_cuda.launch_plan import CudaKernelPlan, Launch, UnsupportedOp
from flowjit.codegen_cuda.memory import (
    CudaDeviceError,
    copy,
    cuda_devices,
    device_index,
    empty,
    is_device_array,
    matmul,
    on_device,
    simulator,
    to_device,
    to_host,
    uses_cupy,
)
from flowjit.codegen_cuda.render import cuda_kernel_plan

__all__ = [
    "LIBRARY_CALLS", "CudaDeviceError", "CudaExecutable", "CudaKernel", "CudaKernelCompileError", "CudaKernelPlan",
    "CudaUnsupportedError", "Launch", "UnsupportedOp", "compile_kernel", "copy", "cuda_devices", "cuda_kernel_plan",
    "device_index", "empty", "feasible", "is_device_array", "kernel_stats", "launch_config", "matmul", "on_device",
    "plan_kernel", "simulator", "static_reason", "to_device", "to_host", "uses_cupy", "why_not",
]
