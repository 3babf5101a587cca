"""The LLVM renderer: a loop-IR ``Kernel`` -> LLVM IR text of one module, and a thin
ctypes wrapper around its machine code. The IR builder itself is ``emit``, imported only
when a kernel is rendered (a warm process loads machine code without ``llvmlite.ir``).

The ABI of the kernel's entry (``symbol(kernel)``, ``fj_kernel_NAME`` for ``kernel.name``
NAME; the prefix keeps a kernel called ``cos`` from binding libm's ``cos`` to itself)::

    i32 fj_kernel_NAME(ptr buf_0, ..., ptr buf_m,   ; data of each "in" and "out" buffer in
                                                    ; kernel.buffers order (inputs first)
                       i64 dim_0_0, ..., i64 dim_m_r,  ; then every dimension of each
                                                    ; of those buffers, buffer by buffer
                       ptr temps)                   ; a kernel with temp buffers only

Buffers are row-major and contiguous with their natural alignment; strides come from the
dimensions, and each size variable is the dimension it names. It returns 0, or 1 when
the memory of its temp buffers could not be allocated (nothing ran). A kernel with temp
buffers takes their memory last: ``kernel_abi.temp_bytes`` bytes, each temp from the next
address that is a multiple of ``TEMP_ALIGN`` (a native program hands it a slice of its scratch
block, reused call after call); given NULL, it allocates them with ``calloc`` on entry and
frees them before it returns. The lowering uses no element of a temp before writing it,
so handed memory need not be zeroed. A kernel whose one top-level loop is parallel (``chunk_loop``) also
exports ``void fj_chunk_NAME(i64 lo, i64 hi, <the same arguments>)``, which runs iterations
[lo, hi) of that loop (its entry calls it over the whole range): ``CompiledKernel`` splits
large calls over ``parallel.pool()``; other parallel loops run serially. A loop the
lowering marks ``stream`` whose output is at least ``STREAM_MIN_BYTES`` stores whole cache
lines non-temporally (bench/run.py's streaming copy measures the bandwidth they reach).

Semantics are ``flowjit.lowering.scalar``'s, op by op: bool is ``i8`` in memory and ``i1``
in registers; float16 is ``half`` in registers and every op on it computes in float32 and
rounds back (float64 -> float16 rounds once); integers wrap; float->int casts give NumPy's
x86 result (INT_MIN for NaN and out-of-range values, never poison). Inputs and outputs are
``noalias`` unless the kernel declares an output may overwrite an input; then the loads
and stores of those two (and the loads of inputs) form an access group that each innermost
loop declares parallel, since lowering writes in place only at the index it read. The only
fast-math flag is ``reassoc`` on float sum and product accumulator updates in an innermost
loop of ``emit.REASSOCIATE_MIN_TRIPS`` trips or more (a shorter one adds in order, which every
IR pipeline keeps), so LLVM vectorizes reductions without changing any NaN or infinity; unless the kernel is rendered
with ``fastmath=True``: then every float arithmetic op,
comparison and math call of the kernel's own expressions carries ``fast``, and LLVM may
assume no NaN, infinity or signed zero and reassociate (the math ports' insides stay exact). Math intrinsics come from
``intrinsics.function`` (vectorizable ports) when it has the name, else from LLVM's
intrinsics or libm.
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import hashlib
import math
import os
import struct
import sys
from collections.abc import Callable, Sequence

import numpy as np

from flowjit.ir.dtypes import DType
from flowjit.ir.errors import BUG_REPORT, KernelCompileError
from flowjit.lowering import print_kernel, scalar
from flowjit.lowering.loops import (
    Kernel,
    as_parts,
)
from flowjit.lowering.verify import verify_kernel

# half_routines, scipy_functions: the float16 builtins and SciPy's functions generated code may
# call, their symbols' providers registered before a kernel calling them loads from the cache.
from . import half_routines, jit, objcache, parallel, scipy_functions  # noqa: F401
from .kernel_abi import chunk_loop, chunk_symbol, size_value, symbol
from .parallel import PARALLEL_MIN_ELEMENTS


class KernelRenderError(jit.LLVMCompileError, KernelCompileError):
    """The LLVM renderer could not render or LLVM rejected a kernel: names the kernel and
    the files its loop IR and LLVM IR were saved to."""


def render_kernel(kernel: Kernel, fastmath: bool = False, optimize: bool = True, inline: bool = True,
                  pool_parts: int = 1, dims: tuple[int, ...] | None = None, same: tuple = (),
                  native_ldexp: bool = False, native_fma: bool = False) -> str:
    """LLVM IR text of ``kernel`` as one C-ABI function named ``symbol(kernel)`` (the ABI is
    this module's docstring): what ``jit.load_source`` compiles (the object cache keys it
    by ``kernel_identity``, so a warm load never renders it). ``fastmath``: LLVM's ``fast``
    flags on the kernel's float ops. Not ``optimize``: its functions ``optnone`` (LLVM's
    optimizer skips them), for a kernel whose work is too small to pay for LLVM's time. Not
    ``inline``: its functions ``noinline`` (LLVM's inliner leaves them where they are).
    ``pool_parts`` > 1: its ``kernel_abi.pooled_loops`` run on the native pool
    (``flowjit_parallel_for``, on up to that many threads) when large enough, which a
    native program that links the pool asks for. ``dims``: every argument's dimensions in
    order, for a kernel only ever called with those: they are constants of its code, which
    its pooled loops' bodies (called by the pool through a pointer, so never inlined where
    the constants are) need to vectorize as the kernel does inlined at its shape. ``same``:
    (output, input) pairs of ``kernel.in_place`` that are one buffer at that call, read
    through one pointer (a scatter_add's copy of its operand onto itself then vanishes).
    ``native_ldexp``: the target scales by a power of two in one instruction
    (``HostTarget.native_ldexp``; the code is then for such CPUs only). ``native_fma``: the
    target has a fused multiply-add (``HostTarget.native_fma``), which divisions by a loop
    invariant then use (``invariant_division``; same results)."""
    from .emit import _Renderer  # llvmlite's IR builder: only a process that renders loads it
    return _Renderer(kernel, fastmath, optimize, inline, pool_parts, dims, same, native_ldexp,
                     native_fma).render()


def _save(kernel: Kernel, ir_text: str | None) -> str:
    paths = [objcache.save_failed(f"; loop IR of kernel {kernel.name}\n" + "".join(
        f"; {line}\n" for line in print_kernel(kernel).splitlines()))]
    if ir_text is not None:
        paths.append(objcache.save_failed(ir_text))
    return ", ".join(p for p in paths if p) or "(the cache directory is not writable)"


class CompiledKernel:
    """A kernel's machine code as a Python callable ``(inputs, outputs)`` of C-contiguous
    NumPy arrays of the kernel's dtypes (a complex array of the IR is taken as its parts,
    ``loops.as_parts``); ``address`` is the C entry point for a driver."""

    def __init__(self, kernel: Kernel, library: jit.Library):
        self.kernel = kernel
        self.library = library  # keeps the machine code alive
        self.address = library.address(symbol(kernel))
        args = self._args = [b for b in kernel.buffers if b.role != "temp"]
        self._dtypes = [b.dtype.np for b in args]
        self._ranks = [b.rank for b in args]
        # A kernel with temps is handed NULL for their memory: it allocates its own.
        self._given: tuple[None, ...] = (None,) if kernel.temps else ()
        ctypes_args = [ctypes.c_void_p] * len(args) + [ctypes.c_int64] * sum(self._ranks) + [ctypes.c_void_p] * len(
            self._given)
        self._fn = ctypes.CFUNCTYPE(ctypes.c_int32, *ctypes_args)(self.address)
        self._chunk = None
        split = chunk_loop(kernel)
        if split is not None:
            self._stop = split[1].stop   # the trip count, from the shapes at each call
            self._chunk = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_int64, *ctypes_args)(
                library.address(chunk_symbol(kernel)))

    def entry(self, shapes: Sequence[tuple[int, ...]], parallel: bool = True) -> Callable[..., int] | None:
        """The kernel's C entry as a ctypes function of (data pointers, then every
        dimension, then, for a kernel with temps, None: it allocates them), returning 1 when
        its temps could not be allocated, for a call on arrays of ``shapes`` (a complex
        array's with its parts' axis of 2) that needs none of this object's chunking: no
        parallel split at these sizes (or none wanted: ``parallel`` False). None: call the
        object itself."""
        if (parallel and self._chunk is not None
                and max(math.prod(s) for s in shapes) >= PARALLEL_MIN_ELEMENTS):
            return None
        arity = (len(shapes) * [ctypes.c_void_p] + sum(len(s) for s in shapes) * [ctypes.c_int64]
                 + [ctypes.c_void_p] * len(self._given))
        return ctypes.CFUNCTYPE(ctypes.c_int32, *arity)(self.address)

    def __call__(self, inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray]) -> None:
        arrays = [a if a.dtype.kind != "c" else as_parts(a) for a in (*inputs, *outputs)]
        if len(arrays) != len(self._dtypes):
            raise TypeError(f"kernel {self.kernel.name} takes {len(self._dtypes)} arrays, got {len(arrays)}")
        for a, dt, r in zip(arrays, self._dtypes, self._ranks):
            if a.dtype != dt or a.ndim != r or not a.flags.c_contiguous:
                raise TypeError(f"kernel {self.kernel.name}: expected a C-contiguous {dt} array of rank {r}, "
                                f"got {a.dtype} of shape {a.shape} (contiguous: {a.flags.c_contiguous})")
        flat = [*[a.ctypes.data for a in arrays], *[n for a in arrays for n in a.shape]]
        if self._chunk is None:
            if self._fn(*flat, *self._given):
                raise MemoryError(f"kernel {self.kernel.name}: out of memory for its temp buffers "
                                  f"(arrays of shapes {[a.shape for a in arrays]})")
            return
        trips = size_value(self.kernel, self._stop, {b.name: a.shape for b, a in zip(self._args, arrays)})
        n_elements = max(a.size for a in arrays)
        if n_elements < parallel.PARALLEL_MIN_ELEMENTS or trips < 2:
            self._fn(*flat)  # no temps (chunk_loop): always 0
        else:
            # The pool splits a range of at least its min_chunk per thread: run it over the
            # elements, each chunk taking the iterations whose first element it holds.
            per = max(1, n_elements // trips)
            chunk = self._chunk
            parallel.pool().run(lambda lo, hi, *a: chunk(-(-lo // per), -(-hi // per), *a), trips * per, *flat)


# The sources whose text decides the LLVM IR a kernel renders to (this renderer, its math
# ports, the scalar semantics, the loop IR and dtypes): their digest is part of a kernel's
# cache identity, so editing any of them makes old entries stale without a version to bump.
_RENDER_SOURCES = (__file__, *(os.path.join(os.path.dirname(__file__), f)
                               for f in ("emit.py", "intrinsics.py", "kernel_abi.py", "invariant_division.py",
                                         "row_prefetch.py")),
                   scalar.__file__,
                   sys.modules[Kernel.__module__].__file__, sys.modules[DType.__module__].__file__)


@functools.cache
def _sources_digest() -> str:
    h = hashlib.sha256()
    for path in _RENDER_SOURCES:
        with open(path, "rb") as f:
            h.update(f.read())
    return h.hexdigest()


# Each record class's field names, looked up once: ``dataclasses.fields`` per node had made
# the walk below 20-25 ms a kernel with a NaN (a tenth of compiling the registry's cases).
_RECORD_FIELDS: dict[type, tuple[str, ...]] = {}


def _nan_bits(x: object, out: list[str], seen: dict[int, tuple[object, tuple[str, ...]]]) -> None:
    """Append to ``out`` the bits of each NaN float in ``x`` (a loop-IR record, a tuple, a
    scalar), in the order repr writes them. ``seen``: each record walked so far (by id, kept
    alive) with its NaNs' bits: a kernel's trees share sub-expressions, which the walk had
    visited again at each use."""
    if isinstance(x, (float, np.floating)):
        if x != x:
            out.append(struct.pack("<d", float(x)).hex())
        return
    if isinstance(x, tuple):
        for v in x:
            _nan_bits(v, out, seen)
        return
    kind = type(x)
    names = _RECORD_FIELDS.get(kind)
    if names is None:
        record = dataclasses.is_dataclass(x) and not isinstance(x, type)
        names = _RECORD_FIELDS[kind] = tuple(f.name for f in dataclasses.fields(x)) if record else ()
    if not names:
        return
    known = seen.get(id(x))
    if known is not None:
        out.extend(known[1])
        return
    start = len(out)
    for name in names:
        _nan_bits(getattr(x, name), out, seen)
    seen[id(x)] = (x, tuple(out[start:]))


def _ident(kernel: Kernel) -> str:
    # repr writes every float exactly except NaN, whose sign and payload the rendered IR
    # keeps: a kernel with a NaN adds their bits, in the order its "nan"s are written.
    text = repr(kernel)
    if "nan" not in text:
        return text
    bits: list[str] = []
    _nan_bits(kernel, bits, {})
    return text + "\n" + ",".join(bits)


def kernel_identity(kernel: Kernel, fastmath: bool = False) -> str:
    """Text that identifies ``render_kernel(kernel, fastmath)`` without rendering it: the
    kernel's loop IR in full (floats by their bits), whether it is fast-math, and the digest
    of the sources the rendering depends on."""
    fast = " fastmath" if fastmath else ""
    # NumPy casts the constants (const()), so its version is part of the identity too.
    return f"; flowjit kernel {_sources_digest()} numpy{np.__version__}{fast}\n{_ident(kernel)}"


def compile_kernel(kernel: Kernel, target: jit.HostTarget | None = None, fastmath: bool = False) -> CompiledKernel:
    """``kernel`` rendered (with LLVM's ``fast`` flags on its float ops when ``fastmath``),
    compiled for ``target`` (the host) or loaded from the object cache, as a
    ``CompiledKernel``. The cache is keyed by ``kernel_identity``, so a warm load renders
    nothing. A rendering or LLVM failure raises KernelRenderError naming the kernel and the
    files its loop IR and LLVM IR were saved to."""
    rendered: list[str] = []

    def render() -> str:
        verify_kernel(kernel)  # a malformed kernel is our bug: say so before LLVM does
        host = target or jit.host_target()
        rendered.append(render_kernel(kernel, fastmath, native_ldexp=host.native_ldexp(), native_fma=host.native_fma()))
        return rendered[0]
    try:
        lib = jit.load_source(kernel_identity(kernel, fastmath), render, target, kernel.name)
    except Exception as e:
        raise KernelRenderError(
            f"the LLVM renderer failed on kernel {kernel.name!r}: {str(e).strip()[:2000]}; its loop IR and "
            f"LLVM IR are saved in {_save(kernel, rendered[0] if rendered else None)}"
            # jit's own error already says whose bug it is
            f"{'' if isinstance(e, jit.LLVMCompileError) else '. ' + BUG_REPORT}") from e
    return CompiledKernel(kernel, lib)


__all__ = ["CompiledKernel", "KernelRenderError", "compile_kernel", "kernel_identity", "render_kernel", "symbol"]
