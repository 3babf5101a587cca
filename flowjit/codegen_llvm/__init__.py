"""Machine code from LLVM IR through llvmlite: the host target, an O3 JIT, an object cache
on disk, thread pools for chunked parallel loops (one in Python, one in native code), and
BLAS entry points from NumPy's own OpenBLAS. It imports llvmlite and ``flowjit.ir`` only
(never numba or SciPy), so a process that runs cached kernels starts without either."""

from .blas import BlasFunction, blas_functions
from .jit import HostTarget, Library, LLVMCompileError, compile_object, host_target, load, optimize, timings
from .objcache import stats as cache_stats
from .parallel import PARALLEL_MIN_ELEMENTS, ChunkPool, default_threads, pool, run_chunked
from .pthread_pool import NATIVE_PARALLEL_MIN_ELEMENTS, NativePool, native_pool

__all__ = [
    "BlasFunction", "ChunkPool", "HostTarget", "LLVMCompileError", "Library",
    "NATIVE_PARALLEL_MIN_ELEMENTS", "NativePool", "PARALLEL_MIN_ELEMENTS", "blas_functions",
    "cache_stats", "compile_object", "default_threads", "host_target", "load", "native_pool",
    "optimize", "pool", "run_chunked", "timings",
]
