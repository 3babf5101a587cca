"""The FFT kernels (``flowjit.lowering.fourier``) as flowjit's own code compiled once per
installation, which a native program calls for a kernel that is one ``fft`` op the kernel
takes (``fft.kernel_transform``), instead of compiling the kernel into the program.

Why: the FFT kernel reads every size at run time (its stages are a loop), so one rendering
serves every length and batch of a transform type, dtype and rank; but rendered into each
program, LLVM spent about 80 ms on it in every program's cold first call (an rfft's
spectrum took 145 ms cold against 68 ms with the DFT-matrix products it replaced). Here
each (type, dtype, rank, pool threads) is rendered once, without constant sizes, its object
code kept in ``objcache.runtime_directory()`` like the convolution's patches routine
(``patches_routine``), and linked into a process the first time a program calls it.

The routine's symbol is the kernel's entry (``kernel_abi.symbol``: the kernel ABI, its temps
handed in as a kernel's are), named with a digest of the kernel's identity, so a program
cached against one version of the kernel never calls another. The AOT C library keeps the
kernel in its own code (its driver links no runtime of flowjit's)."""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import hashlib
import itertools
from typing import Any

from flowjit.ir.dtypes import DType
from flowjit.lowering.fourier import fourier_kernel
from flowjit.lowering.loops import INDEX, Kernel, SizeVar, Var

from . import jit, kernel_abi, pthread_pool, render  # noqa: F401  (pthread_pool provides flowjit_parallel_for)

# The input buffer's name in the routine's kernel (a program's kernels name theirs by value).
SOURCE = "x"


@functools.cache
def routine_kernel(fft_type: str, dtype: DType, rank: int, threads: int) -> Kernel:
    """The FFT kernel of ``fft_type`` on a rank-``rank`` input of ``dtype`` with every size a
    variable (``SizeVar``s of its buffers), named for its routine: the transform type, dtype,
    rank, the pool threads its parallel loop may use and a digest of the kernel's identity."""
    sizes = tuple(SizeVar(f"size_d{d}", SOURCE, d) for d in range(rank)) + (SizeVar("size_terms", "out0", rank - 1),)
    counter = itertools.count()

    def fresh(prefix: str) -> str:
        return f"{prefix}{next(counter)}"
    dims = [Var(s.name, INDEX) for s in sizes[:rank]]
    base = f"fft_routine_{fft_type}_{dtype.name}_r{rank}_t{threads}"
    kernel = fourier_kernel(base, SOURCE, dims, Var("size_terms", INDEX), dtype, fft_type, sizes, fresh)
    digest = hashlib.sha256(render.kernel_identity(kernel).encode()).hexdigest()[:12]
    kernel = dataclasses.replace(kernel, name=f"{base}_{digest}")
    jit.provide_symbol(kernel_abi.symbol(kernel), functools.partial(_routine, kernel, threads))
    return kernel


def kernel_for(op: Any, threads: int) -> Kernel | None:
    """The routine's kernel for ``op`` when it is an ``fft`` the lowering gave the FFT kernel
    (an op of the ``fourier_transform`` role with a kernel is one); else None. Registers the
    routine's symbol for the programs that call it (compiled or loaded the first time one
    is linked). ``threads``: the plan's, which the routine's parallel loop may use."""
    if op.primitive.role != "fourier_transform" or op.blocks:
        return None
    x = op.inputs[0].type
    return routine_kernel(op.attrs["fft_type"], x.dtype, x.ndim, threads)


@functools.cache
def _routine(kernel: Kernel, threads: int) -> int:
    """The address of ``kernel``'s routine, compiled once per installation
    (``objcache.runtime_directory()``) and registered for generated code; kept for the life
    of the process."""
    def rendered() -> str:
        host = jit.host_target()
        return render.render_kernel(kernel, pool_parts=threads, native_ldexp=host.native_ldexp(),
                                    native_fma=host.native_fma())
    lib = jit.load_source(f"; flowjit fft routine t{threads}\n{render.kernel_identity(kernel)}", rendered,
                          name=kernel.name, runtime=True)
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(lib))
    address = lib.address(kernel_abi.symbol(kernel))
    jit.register_symbol(kernel_abi.symbol(kernel), address)
    return address
