"""A whole program as one native function: the driver of the llvm backend.

``plan_program`` turns a fused program (its top-level ops, with every kernel op already
lowered to loop IR) into a ``ProgramPlan``: the program's values as buffers (arguments,
results, constants, and intermediates at fixed offsets of one scratch block), and its
steps as kernel calls and BLAS ``gemm`` calls, with transposes and reshapes folded into
the calls that read them. ``compile_program`` renders the plan and its kernels into LLVM
modules (the steps with about half the kernels they call, internal, so LLVM inlines them
at their shapes; the others and the kernels split over the pool in a second module, which
``jit`` compiles at the same time on another thread), compiles them or loads them from the
object cache, and returns a ``NativeProgram`` whose ``call_list`` and ``call_one`` are
CPython builtins: a call checks its arguments in native code, allocates its results with
NumPy's own ``PyArray_Empty`` (large ones from the runtime's buffer pool), runs every step
with the GIL released when the work is large enough to matter, and returns the result list
or the one result. Nothing in a call goes through Python unless an argument is not what
the program was traced for (strided, another dtype, a subclass): the builtin then hands
the call to ``NativeProgram.convert``, which makes the arguments contiguous (or raises the
shape error) and calls it again.

A program has a plan when each top-level op is a kernel, a 2-D float32/float64 matmul, a
constant, a variable's update, or a transpose/reshape that only those read, and each
result is made by a kernel or a matmul; any other program (a LAPACK routine, an FFT, a Python callback, a
result that is an argument) keeps the per-kernel Python driver.

The native code reads NumPy arrays through the ABI NumPy keeps for compiled extensions
(``PyArrayObject_fields`` and ``PyArray_Descr``'s leading fields, the C-API table's
``PyArray_Empty``); ``tests/codegen_cpu/test_program.py`` checks those offsets against
NumPy itself.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import math
import os
import sys
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

try:
    from numpy._core import _multiarray_umath
except ImportError:  # NumPy 1.x
    from numpy.core import _multiarray_umath  # type: ignore[no-redef]

from flowjit.ir.errors import BUG_REPORT
from flowjit.lowering.loops import Accumulator, walk_statements

# patches_routine, scipy_functions: their providers must be registered before a program calling
# them loads from the cache.
from . import jit, patches_routine, program_glue, render, scipy_functions  # noqa: F401
from .blas import blas_functions, missing_routines, product_bracket
from .program_plan import (
    COMPLEX_GEMMS,
    GEMM_SLOTS,
    METH_FASTCALL,
    PYARRAY_EMPTY,
    T_BLAS_ENTER,
    T_BLAS_LEAVE,
    T_DESC,
    T_EMPTY,
    T_FALLBACK_LIST,
    T_FALLBACK_ONE,
    T_FIXED,
    T_NDARRAY,
    T_PROFILE,
    T_STEPS,
    Affine,
    Buffer,
    ControlCall,
    ConvGemm,
    Gemm,
    KernelCall,
    Lapack,
    NotNative,
    Patches,
    ProgramPlan,
    plan_program,
    unify_plans,
    walk_steps,
)
from .pthread_pool import native_pool  # noqa: F401  (registers the pool's symbol for linking)

# ---- loading ---------------------------------------------------------------------------------

class _MethodDef(ctypes.Structure):
    _fields_ = [("ml_name", ctypes.c_void_p), ("ml_meth", ctypes.c_void_p), ("ml_flags", ctypes.c_int),
                ("ml_doc", ctypes.c_char_p)]


_DEF_WORDS = ctypes.sizeof(_MethodDef) // 8   # a PyMethodDef in the table's int64 words


class _Table(np.ndarray):
    """A program's table: the int64 words its builtins read through ``self`` (program_glue),
    then the builtins' method definitions and names, in its own memory, and ``program``,
    the NativeProgram whose objects and code its words point at. A builtin holds its
    ``self``, so one that outlives the program object (the dispatch fast path's cache of a
    TracedFunction being collected) still runs, and the collector, visiting it, reads its
    definition's flags from live memory: when the definitions were ctypes structures of the
    program object, a collection that freed them first left the builtin reading freed
    memory for its flags, and the collector then could follow a pointer from there (the
    likely cause of the suite's rare segfaults "Garbage-collecting" in
    tests/tracer/test_fft.py: tests/codegen_cpu/test_program.py shows the read under
    Python's debug allocator)."""

    program: Any


_new_builtin = ctypes.pythonapi.PyCFunction_NewEx
_new_builtin.restype = ctypes.py_object
_new_builtin.argtypes = [ctypes.c_void_p, ctypes.py_object, ctypes.py_object]


@functools.cache
def _array_api() -> int:
    """The address of NumPy's C-API function table (what ``import_array`` reads)."""
    m = _multiarray_umath
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    return get(m._ARRAY_API, None)


def _pyarray_empty() -> int:
    return ctypes.c_void_p.from_address(_array_api() + PYARRAY_EMPTY * ctypes.sizeof(ctypes.c_void_p)).value


@functools.cache
def _sources_digest() -> str:
    h = hashlib.sha256()
    for name in ("program.py", "program_plan.py", "program_emit.py", "program_glue.py", "lapack.py",
                 "patches_routine.py", "llvm_loops.py"):
        with open(os.path.join(os.path.dirname(__file__), name), "rb") as f:
            h.update(f.read())
    return h.hexdigest()[:16]


class NativeProgram:
    """A compiled program: ``call_list(*arrays)`` returns the result list and
    ``call_one(*arrays)`` the one result (CPython builtins); ``plan`` is what they run."""

    def __init__(self, plan: ProgramPlan, constants: list[np.ndarray], library: jit.Library,
                 pool_empty: Callable[..., np.ndarray] | None, pool_min_bytes: int, profile: bool = False,
                 render: Callable[[], Any] | None = None):
        self.plan = plan
        # The function that rendered the library's module: a quick library renders its full
        # code with it when the program is hot (the library holds it weakly).
        self._render = render
        # A profiling build writes CLOCK_MONOTONIC nanoseconds before and after each
        # top-level step here (runtime.profiler reads them after the call).
        self.stamps = np.zeros(2 * len(plan.steps) if profile else 0, np.int64)
        self.library = library        # the machine code lives as long as this object
        self._constants = constants
        self._args = [plan.buffer(n) for n in plan.args]
        blas = {}
        if any(isinstance(s, (Gemm, ConvGemm)) for s in walk_steps(plan.steps)):
            blas = blas_functions()
        results = [b for b in plan.buffers if b.kind == "result" and not b.shares]
        self._keep: list[Any] = []    # objects whose addresses the table holds
        names = [f"{plan.name}_{which}".encode() + b"\0" for which in ("list", "one")]
        defs_at = T_FIXED + 2 * len(results) + len(constants)
        names_at = defs_at + _DEF_WORDS * len(names)
        table = np.zeros(names_at + sum(-(-len(n) // 8) for n in names), np.int64).view(_Table)
        table[T_FALLBACK_LIST] = self._ref(self.convert_list)
        table[T_FALLBACK_ONE] = self._ref(self.convert_one)
        table[T_EMPTY] = _pyarray_empty()
        table[T_NDARRAY] = id(np.ndarray)
        for name, slot in GEMM_SLOTS.items():
            if name in blas:
                table[slot] = blas[name].address
        bracket = product_bracket() if blas else None
        if bracket is not None:  # small products run on one BLAS thread (program_emit.blas_one_thread)
            table[T_BLAS_ENTER], table[T_BLAS_LEAVE] = bracket
        for b in results:
            table[T_FIXED + 2 * b.slot] = self._ref(np.dtype(b.dtype))
            if pool_empty is not None and b.nbytes >= pool_min_bytes:
                table[T_FIXED + 2 * b.slot + 1] = self._ref(functools.partial(pool_empty, b.shape, np.dtype(b.dtype)))
        for k, c in enumerate(constants):
            table[T_FIXED + 2 * len(results) + k] = c.ctypes.data
        if profile:
            table[T_PROFILE] = self.stamps.ctypes.data
        # The entry points every program shares check the arguments against this and call
        # the program's steps (program_glue).
        self._descriptor = program_glue.descriptor(plan)
        table[T_DESC] = self._descriptor.ctypes.data
        table[T_STEPS] = library.address(program_glue.STEPS_SYMBOL)
        self._table = table
        # A quick library (tiered code generation, jit.QUICK_CODEGEN_LEVEL): its full code
        # replaces it in the table when emitted; it stays alive for a call still running it.
        self._retired: list[jit.Library] = []
        if library.codegen_level != jit.OPT_LEVEL:
            # Weakly: the library stays in the process's table, and a program never hot
            # (never upgraded) must not stay with it, its plan and constants.
            me = weakref.ref(self)

            def upgraded(full: jit.Library) -> None:
                program = me()
                if program is not None:
                    program._upgrade(full)
            library.when_upgraded(upgraded)
        table.program = self
        self._defs = []
        at = names_at
        for k, (which, address) in enumerate(zip(("list", "one"), program_glue.entry_points())):
            ctypes.memmove(table.ctypes.data + 8 * at, names[k], len(names[k]))
            d = _MethodDef.from_buffer(table, 8 * (defs_at + _DEF_WORDS * k))
            d.ml_name, d.ml_meth, d.ml_flags, d.ml_doc = table.ctypes.data + 8 * at, address, METH_FASTCALL, None
            at += -(-len(names[k]) // 8)
            self._defs.append(d)
            setattr(self, f"call_{which}", _new_builtin(ctypes.addressof(d), table, None))

    def hot(self) -> None:
        """The program's second call has returned: a quick library's full code is now
        made on another thread (``jit.Library.upgrade_now``), rendered by this program's
        function where the library's first one is gone."""
        self.library.upgrade_now(self._render)

    def _upgrade(self, full: jit.Library) -> None:
        # One aligned 8-byte store: each call reads the steps' address once, at its start.
        self._retired.append(self.library)
        self.library = full
        self._render = None
        self._table[T_STEPS] = full.address(program_glue.STEPS_SYMBOL)

    def _ref(self, obj: object) -> int:
        self._keep.append(obj)
        return id(obj)

    def _converted(self, arrays: Sequence[Any]) -> list[np.ndarray]:
        if len(arrays) != len(self._args):
            raise TypeError(f"program {self.plan.name} takes {len(self._args)} arrays, got {len(arrays)}")
        out = []
        for x, b in zip(arrays, self._args):
            # np.ascontiguousarray makes a 0-d array 1-d: a scalar is contiguous as it is.
            y = np.asarray(x, dtype=b.dtype) if np.ndim(x) == 0 else np.ascontiguousarray(x, dtype=b.dtype)
            y = y if type(y) is np.ndarray else np.array(y)
            if y.shape != b.shape:
                raise ValueError(f"program {self.plan.name}, compiled for an array of shape {b.shape} got one of "
                                 f"shape {y.shape}: call the function with the shapes it was traced for")
            out.append(y)
        if all(x is y for x, y in zip(arrays, out)):
            raise TypeError(f"program {self.plan.name}: its native driver refused arrays it was traced for "
                            f"({[(y.dtype, y.shape, y.flags.c_contiguous) for y in out]}); {BUG_REPORT}")
        return out

    def convert_list(self, *arrays: Any) -> list[np.ndarray]:
        """The call with arguments made what the program takes (contiguous, its dtypes)."""
        return self.call_list(*self._converted(arrays))

    def convert_one(self, *arrays: Any) -> np.ndarray:
        """As ``convert_list``, for ``call_one``."""
        return self.call_one(*self._converted(arrays))

    def describe(self) -> str:
        """The plan as text: what ``flowjit ir --stage kernels`` prints as the driver."""
        return self.plan.describe()

    def profiled_steps(self) -> list[tuple[str, dict[str, Any], int, int]]:
        """After a call of a profiling build, each top-level step as (category, details,
        start ns, end ns): kernels with their thread split, gemms with their flops, loops."""
        stamps = self.stamps.tolist()
        return [(*describe_step(step), stamps[2 * i], stamps[2 * i + 1]) for i, step in enumerate(self.plan.steps)]


def describe_step(step: Any) -> tuple[str, dict[str, Any]]:
    """A plan step's category and details for the profiler (its name is its op's, as
    ``flowjit explain`` names it; ``ops``: how many of the program's ops it runs, where
    more than one)."""
    if isinstance(step, KernelCall):
        return "kernel", {"threads": step.split[1]} if step.split else {}
    if isinstance(step, Gemm):
        return "gemm", {"flops": 2 * step.m * step.n * step.k, "m": step.m, "n": step.n, "k": step.k}
    if isinstance(step, ControlCall):
        return "loop", {"blocks": len(step.blocks)}
    if isinstance(step, Lapack):
        return "lapack", {"routines": "/".join(step.routines()), "matrices": step.batch, "n": step.n}
    if isinstance(step, ConvGemm):
        g = step.gemm
        return "gemm", {"flops": 2 * g.m * g.n * g.k, "m": g.m, "n": g.n, "k": g.k, "blocks": step.blocks,
                        "routine": "patches", "ops": 2}
    if isinstance(step, Patches):   # a kernel's op, run by flowjit's routine
        return "kernel", {"routine": "patches", **({"threads": step.parts} if step.parts > 1 else {})}
    return "step", {}


# The most elements a program's kernels may touch (the largest operand of each, summed) for
# its quick code to come from LLVM's O0 pipeline (``quick_unoptimized``): code about ten
# times slower than O3's for the calls before the upgrade (the MLP's inference, 67,000
# elements: its first run 0.4 -> 0.9 ms, against 7 ms less to compile).
QUICK_UNOPTIMIZED_MAX_ELEMENTS = 1 << 17


def quick_unoptimized(plan: ProgramPlan) -> bool:
    """Whether ``plan``'s quick code (tiered code generation) may skip LLVM's IR pipeline
    (``jit.UNOPTIMIZED_PIPELINE``): no loop (a loop's body would run unoptimized at every
    trip), no float accumulator in any of its kernels (a reassociable sum, a max under
    ``nsz``: the order LLVM's vectorizer chooses is part of their bits; without them every
    pipeline computes the same bits), and at most QUICK_UNOPTIMIZED_MAX_ELEMENTS elements."""
    steps = walk_steps(plan.steps)
    if any(isinstance(s, ControlCall) for s in steps):
        return False
    calls = [s for s in steps if isinstance(s, KernelCall) and not s.routine]
    for s in calls:
        for st in walk_statements(s.kernel.body):
            if isinstance(st, Accumulator) and (st.dtype.is_float or st.dtype.is_complex):
                return False
    elements = sum(max((math.prod(plan.buffer(b).shape) for b in s.buffers), default=0) for s in calls)
    return elements <= QUICK_UNOPTIMIZED_MAX_ELEMENTS


def compile_program(plan: ProgramPlan, constants: list[np.ndarray],
                    pool_empty: Callable[..., np.ndarray] | None = None, pool_min_bytes: int = 1 << 20,
                    target: jit.HostTarget | None = None, fastmath: bool = False,
                    profile: bool = False) -> NativeProgram:
    """``plan`` compiled (its driver and kernels in two modules compiled at once: the steps,
    and the kernels split over the pool) or loaded from the object
    cache, keyed by the driver's IR and every kernel's identity, so a warm load renders
    no kernel. Large results come from ``pool_empty(shape, dtype)`` (from
    ``pool_min_bytes``), the others from ``PyArray_Empty``. ``profile``: a build that
    times each top-level step into ``NativeProgram.stamps`` (``runtime.profiler``)."""
    int_bits, sgemm = 64, ""
    # Routines the program calls by name (LAPACK's, the complex gemms), not through the table.
    routines = [r for s in walk_steps(plan.steps) if isinstance(s, Lapack) for r in s.routines()]
    routines += ["get_nancheck", "set_nancheck"] if routines else []
    routines += [COMPLEX_GEMMS[s.dtype] for s in walk_steps(plan.steps) if isinstance(s, Gemm)
                 and s.dtype in COMPLEX_GEMMS]
    if routines or any(isinstance(s, (Gemm, ConvGemm)) for s in walk_steps(plan.steps)):
        found = blas_functions()
        if not found:
            raise NotNative("no CBLAS library found for matmul" if not routines else
                            "no BLAS library found, whose LAPACK the program's linear algebra calls")
        int_bits = found["sgemm"].int_bits
        if routines:
            missing = missing_routines(found, sorted(set(routines)))
            if missing:
                raise NotNative(f"{found['sgemm'].library} has no {', '.join(missing)}")
            sgemm = found["sgemm"].symbol
    # A routine's kernel (fourier_routine) is not the program's: its name holds its identity's digest.
    kernels = {s.kernel.name: s.kernel for s in walk_steps(plan.steps) if isinstance(s, KernelCall) and not s.routine}
    # What decides the module: the plan (kernels by name), the sources that render it, the
    # BLAS integer width, the byte order and NumPy (its type numbers), then each kernel.
    head = (f"; flowjit program {_sources_digest()} blas{int_bits} {sys.byteorder} numpy{np.__version__}"
            f"{' profile' if profile else ''}{f' lapack {sgemm}' if sgemm else ''}")
    identity = "\n".join([head, repr(plan), *(render.kernel_identity(k, fastmath) for k in kernels.values())])

    def render_module() -> list[Any]:
        # llvmlite's IR builder loads only when a program is rendered: a process that loads
        # its programs from the object cache never imports it.
        from .program_emit import render_program
        host = target or jit.host_target()
        return render_program(plan, int_bits, fastmath, profile, sgemm, lazy=True,
                              native_ldexp=host.native_ldexp(), native_fma=host.native_fma(),
                              clear_upper=host.has_avx())
    try:
        # Tiered unless the code must be the same from the first call on: a profiling build
        # times it, and LLVM's fast flags let its two code generators round differently.
        lib = jit.load_source(identity, render_module, target, f"program_{plan.name}",
                              tiered_codegen=not (profile or fastmath),
                              quick_pipeline=jit.UNOPTIMIZED_PIPELINE if quick_unoptimized(plan) else None)
    except render.KernelRenderError:
        raise
    except jit.LLVMCompileError as e:
        raise render.KernelRenderError(f"the native driver of program {plan.name!r} failed: {e}") from e
    return NativeProgram(plan, constants, lib, pool_empty, pool_min_bytes, profile,
                         render_module if lib.codegen_level != jit.OPT_LEVEL else None)


__all__ = ["Affine", "Buffer", "Gemm", "KernelCall", "NativeProgram", "NotNative", "ProgramPlan", "compile_program",
           "plan_program", "unify_plans"]
