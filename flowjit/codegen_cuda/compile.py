"""Compile a fusion block to numba.cuda kernels through its loop IR, and launch them.

The runtime lowers each fusion block to a loop-IR kernel once (``flowjit.lowering.backend``);
it is rendered here (``render.cuda_kernel_plan``) into a module written to
``FLOWJIT_CACHE_DIR/cuda_kernels/fjc_<hash of its source>.py`` and imported from there,
so a traceback or an error names a file the user can open, and numba's disk cache
(``cuda.jit(cache=True)``) keeps the compiled kernels next to it for the next process. Modules are kept by that
name in ``sys.modules``: a block whose source is the same (the same program at another
batch size) gets the same numba dispatchers and so the kernels they already compiled.
numba compiles a kernel at its first launch for the arguments' types; that first
launch turns any failure into a ``CudaKernelCompileError`` naming the fused ops, the
user's lines and the source file.
"""

from __future__ import annotations

import hashlib
import importlib.util
import math
import os
import sys
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from flowjit.codegen_cuda import memory
from flowjit.codegen_cuda.launch_plan import GRID_BLOCKS_ARG, SHARED, CudaKernelPlan, Launch, UnsupportedOp, host_value
from flowjit.codegen_cuda.render import cuda_kernel_plan, kernel_name, module_source
from flowjit.codegen_cuda.writer import scratch_name
from flowjit.ir.core import Block
from flowjit.ir.errors import BUG_REPORT, FlowjitError, FlowjitTypeError
from flowjit.ir.types import TensorType
from flowjit.lowering import Kernel
from flowjit.lowering.loops import as_parts

# Op kinds a kernel computes; anything else runs outside the kernels.
KERNEL_KINDS = ("elementwise", "layout", "reduction", "constant")

# Threads per block of an elementwise launch, and the most blocks a launch gets (the
# loops are grid-stride, so a larger array just takes more trips).
ELEMENT_THREADS = 256
MAX_BLOCKS = 4096
MAX_ROW_BLOCKS = 65535
# The most threads of a block per row. On an H200 (bench/results/h200-2026-11-30-cuda-2.md),
# softmax and layer norm over rows of 4096 took 0.62-0.64 ms a call with 128, 0.69 with 256
# and 0.86-0.88 with 512: more blocks resident per SM beat more threads per row.
ROW_THREADS = 128
# The most blocks a grid launch (a reduction over everything) spreads its iterations over:
# each writes one partial result, which the single-block launch after it combines.
GRID_BLOCKS = 256
# The simulator runs one Python thread per GPU thread: small blocks, few of them (a
# rows kernel's barriers cost the most there: 8 threads, three tree levels).
SIMULATOR_THREADS = 32
SIMULATOR_ROW_THREADS = 8
SIMULATOR_MAX_BLOCKS = 4

_stats = {"compiled": 0, "reused": 0, "launches": 0}
_stats_lock = threading.Lock()  # each device's partition launches from its own thread


def _count(key: str, n: int = 1) -> None:
    with _stats_lock:
        _stats[key] += n


class CudaKernelCompileError(FlowjitError):
    """numba.cuda failed on a generated kernel; the message names the fused ops, the
    user's lines and the saved source file."""


def kernel_stats() -> dict[str, int]:
    """How many CUDA kernels this process compiled (a source and argument types it had not
    launched before), reused (already compiled: the same program at another batch size),
    and how many kernel functions it launched."""
    return dict(_stats)


def source_dir() -> str | None:
    """Where generated kernel modules are kept: ``FLOWJIT_CACHE_DIR/cuda_kernels`` (by
    default under ``~/.cache/flowjit``); None when that is not writable."""
    base = os.environ.get("FLOWJIT_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "flowjit")
    path = os.path.join(base, "cuda_kernels")
    try:
        os.makedirs(path, exist_ok=True)
    except OSError:
        return None
    return path if os.access(path, os.W_OK) else None


_temp: list[str] = []
_import_lock = threading.RLock()
_first_launch_lock = threading.Lock()


def _temp_dir() -> str:
    if not _temp:
        _temp.append(tempfile.mkdtemp(prefix="flowjit_cuda_kernels_"))
    return _temp[0]


def write_source(source: str, directory: str | None = None) -> str:
    """Write a kernel module as ``fjc_<hash of its text>.py`` in ``directory`` (default
    ``source_dir()``, else a temporary one), once (rewritten when its contents differ),
    and return its path."""
    digest = hashlib.sha256(source.encode()).hexdigest()[:20]
    path = os.path.join(directory or source_dir() or _temp_dir(), f"fjc_{digest}.py")
    try:
        with open(path, encoding="utf-8") as f:
            if f.read() == source:
                return path
    except OSError:
        pass
    # A temporary file of this thread's own (threads and processes write at once), renamed
    # into place: atomic, another reader never sees half a file.
    fd, tmp = tempfile.mkstemp(prefix=f".fjc_{digest}.", suffix=".tmp", dir=os.path.dirname(path))
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(source)
    os.replace(tmp, path)
    return path


def import_source(path: str) -> Any:
    """Import the kernel module at ``path`` as ``flowjit_cuda_kernels.<its name>``, or take
    the one already imported (its dispatchers hold the kernels compiled so far)."""
    mod_name = "flowjit_cuda_kernels." + os.path.splitext(os.path.basename(path))[0]
    module = sys.modules.get(mod_name)
    if module is not None:
        return module
    with _import_lock:  # partitions on several devices load at once: one module, complete
        module = sys.modules.get(mod_name)
        if module is None:
            spec = importlib.util.spec_from_file_location(mod_name, path)
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            module._flowjit_signatures = set()  # argument types launched so far (kernel_stats)
            try:
                spec.loader.exec_module(module)
            except Exception as e:
                raise CudaKernelCompileError(f"generated CUDA source failed to load ({type(e).__name__}: {e}); "
                                             f"see {path}") from None
            sys.modules[mod_name] = module  # only once its code has run
    return module


def _count_of(product: tuple, sizes: dict[str, int]) -> int | None:
    values = [host_value(e, sizes) for e in product]
    return None if any(v is None for v in values) else max(0, math.prod(values))


def launch_config(launch: Launch, sizes: dict[str, int]) -> tuple[int, int]:
    """``(blocks, threads)`` for one launch at the size variables' values ``sizes``:
    elements launches cover their largest loop nest (up to ``MAX_BLOCKS`` blocks, then
    grid-stride); rows launches give each row a block (up to ``MAX_ROW_BLOCKS``), grid
    launches up to ``GRID_BLOCKS``, single launches one block, of a power of two threads
    (the tree reductions halve them), at most ``ROW_THREADS`` a row and ``SHARED`` else,
    enough for the longest loop the threads split. The simulator gets
    ``SIMULATOR_THREADS`` (``SIMULATOR_ROW_THREADS``) threads."""
    sim = memory.simulator()
    counts = [_count_of(p, sizes) for p in launch.items]
    if launch.kind == "elements":
        threads = SIMULATOR_THREADS if sim else ELEMENT_THREADS
        most = SIMULATOR_MAX_BLOCKS if sim else MAX_BLOCKS
        known = [c for c in counts if c is not None]
        blocks = most if len(known) < len(counts) else min(max(1, -(-max(known, default=1) // threads)), most)
        return blocks, threads
    cols = [c for c in (_count_of(p, sizes) for p in launch.cols) if c is not None]
    longest = max(cols, default=1)
    most = ROW_THREADS if launch.kind == "rows" else SHARED
    threads = SIMULATOR_ROW_THREADS if sim else min(most, max(32, 1 << max(longest - 1, 0).bit_length()))
    if launch.kind == "single":
        return 1, threads
    if launch.kind == "grid":
        most = SIMULATOR_MAX_BLOCKS if sim else GRID_BLOCKS
        if not launch.cols:  # iterations without loops: a thread each, as elements
            threads = SIMULATOR_THREADS if sim else ELEMENT_THREADS
        count = counts[0] if counts and counts[0] is not None else most * threads
        per_block = 1 if launch.cols else threads
        return min(max(1, -(-count // per_block)), most), threads
    rows = counts[0] if counts and counts[0] is not None else MAX_ROW_BLOCKS
    return min(max(1, rows), SIMULATOR_MAX_BLOCKS if sim else MAX_ROW_BLOCKS), threads


@dataclass
class CudaKernel:
    """A fusion block compiled for CUDA: call it with device arrays, get device arrays.

    ``launches`` are the kernel functions it runs, in order; ``ops`` names the fused ops
    and the user's lines for error messages.
    """

    name: str
    ops: str
    source: str
    path: str
    plan: CudaKernelPlan
    in_types: list[TensorType]
    out_types: list[TensorType]
    module: Any
    _warm: bool = field(default=False, repr=False)
    # The temps' shapes and the launches that run with their (blocks, threads), worked out
    # at the first call (the types, so the shapes, are this kernel's own): evaluating the
    # loop-IR expressions on the host took 40-110 us a call on a 2-core Xeon, as long as a
    # small kernel runs on a GPU.
    _shaped: tuple | None = field(default=None, repr=False)

    @property
    def launches(self) -> tuple[Launch, ...]:
        return self.plan.launches

    @property
    def kernel(self) -> Kernel:
        """The loop IR this kernel was rendered from."""
        return self.plan.kernel

    def __call__(self, *inputs: Any, alloc: Callable[..., Any] | None = None) -> list[Any]:
        """Launch the kernel functions on device arrays ``inputs`` on the current device;
        outputs come from ``alloc(shape, dtype)`` (default ``memory.empty``)."""
        alloc = alloc or memory.empty
        for i, (x, t) in enumerate(zip(inputs, self.in_types)):
            if x.shape != t.shape or x.dtype != t.dtype.np:
                raise FlowjitTypeError(
                    f"CUDA kernel {self.name} ({self.ops}) was compiled for input {i} as {t.dtype.np}"
                    f"{t.shape}, and called with {x.dtype}{tuple(x.shape)}: its outputs and launches are "
                    "sized for its own types; compile a kernel for these (flowjit's executables keep one "
                    "per argument signature)")
        # 0-d values travel as 1-element arrays: the generated code reads x[0]. A complex
        # array travels as its parts (the kernel's buffer has one more dimension, of 2).
        args = [as_parts(x) if t.dtype.is_complex else x.reshape(1) if not t.shape else x
                for x, t in zip(inputs, self.in_types)]
        made = [alloc(t.shape or (1,), t.dtype.np) for t in self.out_types]
        outs = [as_parts(o.reshape(t.shape)) if t.dtype.is_complex else o for o, t in zip(made, self.out_types)]
        if self._warm:
            self._launch(args, outs)
        else:
            self._first_launch(args, outs)
        return [o.reshape(()) if not t.shape else o for o, t in zip(made, self.out_types)]

    def _arrays(self, args: list[Any], outs: list[Any]) -> tuple[dict[str, Any], tuple]:
        """The device arrays of every buffer name (temps zeroed, scratch allocated) and the
        launches that run, each with its function, configuration and size arguments
        (``_shaped_at``, at the first call: the sizes are read from the arguments' shapes,
        which are this kernel's own types)."""
        k = self.plan.kernel
        arrays = dict(zip([b.name for b in k.inputs] + [b.name for b in k.outputs], [*args, *outs]))
        if self._shaped is None:
            self._shaped = self._shaped_at({s.name: int(arrays[s.buffer].shape[s.dim]) for s in k.sizes})
        temps, launches = self._shaped
        for name, shape, d in temps:
            arrays[name] = memory.zeros(shape, d)
        for name, d in self.plan.scratch:
            arrays[scratch_name(name)] = memory.empty((1,), d.np)
        for name, d in self.plan.partials:
            arrays[name] = memory.empty((GRID_BLOCKS,), d.np)
        return arrays, launches

    def _shaped_at(self, sizes: dict[str, int]) -> tuple[tuple, tuple]:
        """At the size variables' values ``sizes``: each temp's (name, shape, dtype), and
        each launch that runs as (launch, kernel function, blocks, threads, its size
        arguments: a single launch after a grid launch also gets that one's blocks)."""
        temps = tuple((b.name, tuple(host_value(n, sizes) for n in b.shape) or (1,), b.dtype.np)
                      for b in self.plan.kernel.buffers if b.role == "temp")
        sizes = dict(sizes)
        launches = []
        for launch in self.launches:
            if launch.only_if is not None and not host_value(launch.only_if, sizes):
                continue
            blocks, threads = launch_config(launch, sizes)
            fn = getattr(self.module, launch.fname)
            launches.append((launch, fn, blocks, threads, tuple(sizes[s] for s in launch.sizes)))
            if launch.kind == "grid":  # the single launch after it combines one result per block
                sizes[GRID_BLOCKS_ARG] = blocks
        return temps, tuple(launches)

    def _launch(self, args: list[Any], outs: list[Any]) -> None:
        arrays, launches = self._arrays(args, outs)
        with memory.launch_lock():
            for launch, fn, blocks, threads, size_args in launches:
                fn[blocks, threads](*[arrays[a] for a in launch.arrays], *size_args)
        _count("launches", len(launches))

    def _first_launch(self, args: list[Any], outs: list[Any]) -> None:
        # numba compiles each kernel function at its first launch with these argument
        # types; a failure there (or, in the simulator, while running) is reported with
        # the ops, the user's lines and the source file. First launches take one lock:
        # threads running one executable on a GPU would otherwise compile (and link) the
        # same kernel at once, which numba-cuda does not promise to survive.
        with _first_launch_lock:
            if self._warm:
                self._launch(args, outs)
                return
            signature = tuple((str(x.dtype), len(x.shape)) for x in [*args, *outs])
            seen = self.module._flowjit_signatures
            try:
                self._launch(args, outs)
            except Exception as e:
                raise compile_error(self, e) from None
            _count("reused" if signature in seen else "compiled")
            seen.add(signature)
            self._warm = True

    def ptx(self, cc: tuple[int, int] = (7, 5)) -> dict[str, str]:
        """The PTX of each kernel function for compute capability ``cc``, compiled for this
        block's argument types (C-contiguous arrays; 0-d ones as 1-element arrays; sizes
        int64). Needs numba's CUDA target and its NVVM library, not a GPU; not under the
        simulator."""
        if memory.simulator():
            raise CudaKernelCompileError("PTX needs numba's CUDA target; the simulator is on "
                                         "(NUMBA_ENABLE_CUDASIM=1)")
        from numba import cuda, types
        from numba.np.numpy_support import from_dtype
        k = self.plan.kernel
        arrays = {b.name: types.Array(from_dtype(b.dtype.np), max(b.rank, 1), "C") for b in k.buffers}
        arrays.update({scratch_name(n): types.Array(from_dtype(d.np), 1, "C") for n, d in self.plan.scratch})
        arrays.update({n: types.Array(from_dtype(d.np), 1, "C") for n, d in self.plan.partials})
        out = {}
        for launch in self.launches:
            fn = getattr(self.module, launch.fname)
            signature = tuple(arrays[a] for a in launch.arrays) + (types.int64,) * len(launch.sizes)
            try:
                out[launch.fname], _ = cuda.compile_ptx(fn.py_func, signature, cc=cc)
            except Exception as e:
                raise compile_error(self, e) from None
        return out


# numba-cuda 0.30 (in maintenance) registers an overload of np.row_stack, which NumPy 2.5
# removed, so none of its kernels compile beside NumPy 2.5.
NUMBA_CUDA_NUMPY_HINT = ("numba-cuda 0.30 does not run with NumPy 2.5 (NVIDIA/numba-cuda#907): "
                         "pip install 'numpy<2.5' (flowjit's cuda extra pins it)")


def _numba_failed_to_load(e: BaseException) -> bool:
    """Whether ``e`` was raised while one of numba's own modules was being imported (its
    CUDA target loads its typing registries at the first compile): the installation is
    broken, whatever kernel was being compiled."""
    tb = e.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        if code.co_name == "<module>" and f"{os.sep}numba{os.sep}" in code.co_filename:
            return True
        tb = tb.tb_next
    return False


def compile_error(kernel: CudaKernel, e: Exception) -> CudaKernelCompileError:
    """The error for kernel ``kernel`` failing with ``e``: ops, lines, the first lines of
    the cause (NVVM puts its log after a one-line summary) and the generated source file;
    when numba's CUDA target itself failed to load, that and how to mend the installation
    instead of a request for a flowjit bug report."""
    lines = [line.strip() for line in str(e).splitlines() if line.strip()][:3]
    cause = " | ".join(lines)
    cause = cause if len(cause) <= 400 else cause[:397] + "..."
    if _numba_failed_to_load(e):
        hint = NUMBA_CUDA_NUMPY_HINT if "row_stack" in cause else "reinstall numba-cuda to match numba and NumPy"
        return CudaKernelCompileError(f"CUDA kernel {kernel.ops} cannot be compiled: numba's CUDA target failed to "
                                      f"load ({type(e).__name__}: {cause}): {hint}")
    return CudaKernelCompileError(f"CUDA kernel {kernel.ops} failed to compile: {type(e).__name__}: {cause}; "
                                  f"{BUG_REPORT}; generated source: {kernel.path}")


def static_reason(block: Block) -> str | None:
    """Why the block cannot be compiled, from its types and op kinds alone (None: no
    such reason): float16, empty arrays, ops other than elementwise/layout/reduction/
    scalar constants."""
    for v in list(block.args) + [r for op in block.ops for r in op.results]:
        if v.type.dtype.name == "float16":
            return "float16 arithmetic is not compiled by the CUDA backend"
        if v.type.size == 0:
            return "an empty array"
    for op in block.ops:
        if op.blocks or op.primitive.kind not in KERNEL_KINDS:
            return f"{op.name} ({op.primitive.kind}) inside a kernel"
    return None


def plan_kernel(kernel: Kernel, name: str, lines: str = "") -> CudaKernelPlan:
    """``kernel`` (the loop IR the runtime lowered a fusion op named ``name`` to, from the
    user's ``lines``) rendered for CUDA. UnsupportedOp when the renderer cannot launch it
    (more parameters than CUDA allows); CudaKernelCompileError when the renderer fails
    (flowjit's bug)."""
    try:
        return cuda_kernel_plan(kernel, kernel_name(name))
    except UnsupportedOp:
        raise
    except Exception as e:
        where = f" from {lines}" if lines else ""
        raise CudaKernelCompileError(f"CUDA kernel {name}{where} failed to render: "
                                     f"{type(e).__name__}: {e}; {BUG_REPORT}") from e


def compile_kernel(kernel: Kernel, name: str, in_types: list[TensorType], out_types: list[TensorType],
                   lines: str = "") -> CudaKernel:
    """Render, write and import the CUDA kernel of loop-IR ``kernel`` (a fusion op named
    ``name``, from the user's ``lines``, taking arrays of ``in_types`` and returning arrays
    of ``out_types``). numba compiles it at its first call. Raises UnsupportedOp when it
    cannot be launched as one kernel, CudaKernelCompileError when the source fails to load."""
    return load_plan(plan_kernel(kernel, name, lines), name, lines, in_types, out_types)


def load_plan(plan: CudaKernelPlan, name: str, lines: str, in_types: list[TensorType],
              out_types: list[TensorType]) -> CudaKernel:
    """Write and import the module of a rendered kernel (``render.cuda_kernel_plan`` of any
    loop-IR kernel) as a ``CudaKernel`` taking arrays of ``in_types`` and returning arrays
    of ``out_types`` (the kernel's inputs and outputs, in order)."""
    # In the cache directory numba keeps each compiled kernel on disk too (a new process
    # loads it); in a temporary one that would be wasted.
    directory = source_dir()
    source = module_source(plan, cache=directory is not None)
    path = write_source(source, directory or _temp_dir())
    ops = f"{name} from {lines}" if lines else name
    try:
        module = import_source(path)
    except CudaKernelCompileError as e:
        raise CudaKernelCompileError(f"CUDA kernel {ops}: {e}") from None
    return CudaKernel(name, ops, source, path, plan, list(in_types), list(out_types), module)
