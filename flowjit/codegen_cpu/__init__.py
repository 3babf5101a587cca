"""The CPU backend: loop IR rendered to LLVM IR and compiled to machine code through
llvmlite: the host target, an O3 JIT, an object cache
on disk, thread pools for chunked parallel loops (one in Python, one in native code), and
BLAS entry points from NumPy's own OpenBLAS. It imports llvmlite and ``flowjit.ir`` only
(never numba or SciPy), so a process that runs cached kernels starts without either.

The names below load their module on first use (PEP 562): a warm process that only loads
cached kernels imports neither the pools, BLAS, nor llvmlite's IR builder."""

from __future__ import annotations

import importlib
from typing import Any

# name -> (module, attribute)
_EXPORTS = {
    "BlasFunction": ("blas", "BlasFunction"), "blas_functions": ("blas", "blas_functions"),
    "HostTarget": ("jit", "HostTarget"), "Library": ("jit", "Library"), "LLVMCompileError": ("jit", "LLVMCompileError"),
    "compile_object": ("jit", "compile_object"), "host_target": ("jit", "host_target"), "load": ("jit", "load"),
    "optimize": ("jit", "optimize"), "timings": ("jit", "timings"),
    "cache_stats": ("objcache", "stats"),
    "PARALLEL_MIN_ELEMENTS": ("parallel", "PARALLEL_MIN_ELEMENTS"), "ChunkPool": ("parallel", "ChunkPool"),
    "default_threads": ("parallel", "default_threads"), "pool": ("parallel", "pool"),
    "run_chunked": ("parallel", "run_chunked"),
    "NATIVE_PARALLEL_MIN_ELEMENTS": ("pthread_pool", "NATIVE_PARALLEL_MIN_ELEMENTS"),
    "NativePool": ("pthread_pool", "NativePool"), "native_pool": ("pthread_pool", "native_pool"),
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    where = _EXPORTS.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{where[0]}"), where[1])
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
