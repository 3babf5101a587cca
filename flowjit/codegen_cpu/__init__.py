"""The CPU backend: each fusion block becomes a numba kernel compiled from generated
source, cached on disk by the hash of that source."""

from flowjit.codegen_cpu.compile import CompiledKernel, compile_kernel, kernel_stats

__all__ = ["CompiledKernel", "compile_kernel", "kernel_stats"]
