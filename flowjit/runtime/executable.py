"""``Executable``: a Function prepared to run, and the one place that runs programs.

``compile_function`` runs the pass pipeline (unless asked to interpret the traced program
as it is) and prepares the result. By default (backend ``llvm``) every fusion op is
lowered to loop IR (``flowjit.lowering``) and, on the first call, the whole program is
compiled by ``flowjit.codegen_cpu`` into one native function (``program.py``: kernels,
BLAS calls and loops), or, when some op has no native form, each kernel is compiled and a
Python driver calls them. The Python driver follows a memory plan (``memory_plan.py``)
and a flat list of steps. Results never alias the caller's arguments or the program's constants, so a
caller may mutate what it gets back.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from flowjit.ir.core import Function, Op
from flowjit.ir.interpreter import run_block, run_op
from flowjit.passes.pipeline import DEFAULT_PIPELINE, Pipeline, PipelineResult
from flowjit.passes.placement import DeviceTarget
from flowjit.runtime.buffers import POOL, POOL_MIN_BYTES
from flowjit.runtime.memory_plan import plan_memory
from flowjit.runtime.profiler import PROFILER, Profile
from flowjit.runtime.progress import compiling

if TYPE_CHECKING:
    from flowjit.lowering import LoopProgram

# The pipeline's stages, ``.ir(stage=...)`` shows each as a Function.
STAGES = ("traced", *DEFAULT_PIPELINE.names, "fused")
# What ``.ir(stage=...)`` and ``flowjit ir --stage`` can show: the stages, then the fused
# program's kernels as loop IR.
IR_STAGES = (*STAGES, "loops")


BACKENDS = ("interpreter", "llvm")
# Compiles in milliseconds, runs a program as one native call.
DEFAULT_BACKEND = "llvm"
# The backends that compile fused kernels (the others interpret the program).
COMPILED_BACKENDS = ("llvm",)


def check_backend(backend: str) -> None:
    """Raise ValueError for a backend name this build has not got; ``numba`` (the CPU
    backend flowjit once had) is answered with what replaced it."""
    if backend == "numba":
        raise ValueError("backend 'numba' is gone: the CPU backend is llvmlite's ('llvm', the default; "
                         "flowjit.codegen_cpu); drop backend= or FLOWJIT_BACKEND=numba")
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; available: {', '.join(BACKENDS)}")


@dataclass
class LLVMKernel:
    """A fusion op's kernel through the loop IR and LLVM: ``compiled`` is called as
    ``compiled(inputs, outputs)`` with arrays of the op's exact shapes (a 0-d value as a
    0-d array); ``in_place`` the input positions its one output may be written into."""

    kernel: Any            # flowjit.lowering.Kernel
    compiled: Any          # flowjit.codegen_cpu.render.CompiledKernel
    in_place: tuple[int, ...]
    out_specs: list[tuple[tuple[int, ...], np.dtype]]

    def entry(self, shapes: Sequence[tuple[int, ...]], parallel: bool = True) -> Callable[..., int] | None:
        """The kernel's C entry as a ctypes function of (data pointers, then every
        dimension), returning 1 when its temps could not be allocated, for a call on arrays
        of ``shapes`` that needs none of ``compiled``'s chunking: no parallel split at these
        sizes (or none wanted: ``parallel`` False). None: call ``compiled``."""
        import ctypes

        from flowjit.codegen_cpu import render
        from flowjit.codegen_cpu.parallel import PARALLEL_MIN_ELEMENTS
        if (parallel and render.chunk_loop(self.kernel) is not None
                and max(math.prod(s) for s in shapes) >= PARALLEL_MIN_ELEMENTS):
            return None
        arity = len(shapes) * [ctypes.c_void_p] + sum(len(s) for s in shapes) * [ctypes.c_int64]
        return ctypes.CFUNCTYPE(ctypes.c_int32, *arity)(self.compiled.address)


def _out_of_memory(kernel: str) -> None:
    raise MemoryError(f"kernel {kernel}: out of memory for its temp buffers")


def _contiguous(x: np.ndarray, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
    # An LLVM kernel reads raw memory: a C-contiguous array of exactly the traced dtype and
    # shape (an argument or a view may be strided, a NumPy reference may return a scalar or
    # another dtype). Unlike np.ascontiguousarray this keeps 0-d 0-d.
    if type(x) is np.ndarray and x.dtype == dtype and x.shape == shape and x.flags.c_contiguous:
        return x
    y = np.ascontiguousarray(x, dtype=dtype).reshape(np.shape(x))
    if y.shape != shape:
        raise ValueError(f"a kernel compiled for an array of shape {shape} got one of shape {y.shape}: "
                         f"call the function with the shapes it was traced for")
    return y


@dataclass
class Step:
    """One top-level op as the runtime runs it: a compiled kernel or the op's NumPy reference."""

    op: Op
    kernel: Any            # CompiledKernel or None
    ins: list[int]         # input slots
    outs: list[int]        # result slots
    free: list[int]        # slots released after it (the memory plan)
    into: int | None       # input position the kernel writes its output into

    @property
    def device(self) -> str | None:
        """Where this step runs (the op's device; None: the Executable's)."""
        return self.op.device


class Executable:
    """A program ready to run on ``device`` with ``backend``; call it with a list of arrays.

    With the ``llvm`` backend (the default) the program runs as one native function when
    it has one (``native_reason`` says why not), else each fusion op as a loop-IR kernel
    compiled through llvmlite (both on the first call). In the
    Python driver a kernel the generator cannot compile (``fallbacks`` says why) and every
    other op run their NumPy reference, so matmul goes to NumPy's BLAS; ``memory_plan``
    says which of its buffers are released early and which kernels write in place. The
    ``interpreter`` backend runs the program on the NumPy interpreter.
    """

    def __init__(self, function: Function, backend: str = "llvm", device: str = "cpu:0",
                 pipeline: PipelineResult | None = None, fastmath: bool = False, parallel: bool = True):
        check_backend(backend)
        self.fastmath = fastmath
        # False: kernels run on the calling thread only (a virtual CPU device is one core).
        self.parallel = parallel
        self.function = function
        self.backend = backend
        self.device = device
        self.pipeline = pipeline
        self._dtypes = [a.type.dtype.np for a in function.args]
        self.kernels: dict[int, Any] = {}
        self.fallbacks: dict[str, str] = {}
        self._driver: Any = None
        self._driver_one: Any = None  # the driver returning its one result bare (no list)
        self._program: Any = None     # llvm: the whole program as one native function, if it has one
        self._compiled = False        # llvm: kernels or the program compiled
        self._profiled: Any = None    # llvm: the native program's profiling build (runtime.profiler)
        self._profile_lock = threading.Lock()  # one profiled call at a time writes its stamps
        self.native_reason = ""       # llvm: why the program has none
        # The first call compiles the kernels and builds the driver; callers on other
        # threads wait for it (later calls read _driver only: no lock on their path).
        self._first_call = threading.Lock()
        # Control ops (cond, while, scan) run their primitive's reference with each block
        # compiled as an Executable of its own (fused kernels, driver); see _compile_blocks.
        self.control: dict[int, Callable[..., Any]] = {}
        self.control_blocks: dict[int, list[Executable]] = {}  # the compiled blocks of each
        if backend in COMPILED_BACKENDS:
            self._compile_kernels()
            self._compile_blocks()
        self.memory_plan = plan_memory(function, {i: k.in_place for i, k in self.kernels.items()})
        plan = self.memory_plan
        self._n_slots = len(plan.slots)
        self._steps = [Step(op, self.kernels.get(op.id), [plan.slots[v.id] for v in op.inputs],
                            [plan.slots[r.id] for r in op.results], plan.free_after[i], plan.write_into[i])
                       for i, op in enumerate(function.body.ops)]
        self._returns = [plan.slots[v.id] for v in function.returns]
        # A result made by a kernel is a fresh buffer; any other may alias an argument or a
        # constant and is checked (and copied) on the way out.
        made_by_kernel = {r.id for op in function.body.ops if op.id in self.kernels for r in op.results}
        self._check_alias = [v.id not in made_by_kernel for v in function.returns]

    def _compile_kernels(self) -> None:
        # Lowered now, compiled on the first call (or by the program around them).
        from flowjit.lowering import Unsupported, lower_block
        names: set[str] = set()
        for op in self.function.body.ops:
            if op.primitive.role != "kernel":
                continue
            name = op.attrs.get("name", op.name)
            symbol = "".join(c if c.isalnum() else "_" for c in name)[:48]
            # Kernel symbols are unique within a program: its kernels link into one module.
            unique, n = symbol, 1
            while unique in names:
                n += 1
                unique = f"{symbol}_{n}"
            names.add(unique)
            try:
                kernel = lower_block(op.blocks[0], unique)
            except Unsupported as e:
                self.fallbacks[name] = str(e)
                continue
            positions = {b.name: j for j, b in enumerate(kernel.inputs)}
            # The Python driver writes only a kernel's one output into an input.
            in_place = (tuple(sorted(positions[n] for n in kernel.in_place[0]))
                        if len(kernel.outputs) == 1 and kernel.in_place else ())
            self.kernels[op.id] = LLVMKernel(kernel, None, in_place,
                                             [(tuple(r.type.shape), r.type.dtype.np) for r in op.results])

    def _block_source(self) -> Any:
        """This block's lowered program, for the native program around it (llvm)."""
        from flowjit.codegen_cpu.program_plan import BlockSource
        return BlockSource(self.function, {i: k.kernel for i, k in self.kernels.items()},
                           {i: [r._block_source() for r in rs] for i, rs in self.control_blocks.items()})

    def _compile_llvm(self) -> None:
        """Compile the whole program as one native function (codegen_cpu.program) when
        every op has a native form; otherwise ``native_reason`` says why not and each
        kernel is compiled for the Python driver (its blocks compile on their first run)."""
        if self._compiled:
            return
        with compiling(self.function.name, len(self.kernels)):  # a progress line on a terminal, past 1 s
            self._compile_llvm_now()

    def _compile_llvm_now(self) -> None:
        from flowjit.codegen_cpu.parallel import default_threads
        from flowjit.codegen_cpu.program import compile_program
        from flowjit.codegen_cpu.program_plan import NotNative, plan_program
        from flowjit.codegen_cpu.render import KernelRenderError, compile_kernel
        try:
            source = self._block_source()
            plan, constants = plan_program(self.function, source.kernels, self.parallel,
                                           default_threads() if self.parallel else 1, source.blocks)
            self._program = compile_program(plan, constants, POOL.empty, POOL_MIN_BYTES, fastmath=self.fastmath)
        except NotNative as e:
            self.native_reason = str(e)
        except KernelRenderError as e:
            op = next((op for op in self.function.walk() if op.id in self.kernels
                       and getattr(e, "kernel", None) in (self.kernels[op.id].kernel.name,)), None)
            raise KernelRenderError(f"kernel {op.attrs.get('name', op.name)} from {op.attrs.get('lines', '?')}: "
                                    f"{e}" if op is not None else str(e)) from e
        if self._program is None:
            for op in self.function.body.ops:
                k = self.kernels.get(op.id)
                if k is None:
                    continue
                try:
                    k.compiled = compile_kernel(k.kernel, fastmath=self.fastmath)
                except KernelRenderError as e:
                    raise KernelRenderError(f"kernel {op.attrs.get('name', op.name)} from "
                                            f"{op.attrs.get('lines', '?')}: {e}") from e
        self._compiled = True

    def _compile_blocks(self) -> None:
        for op in self.function.body.ops:
            if op.primitive.kind != "control" or op.primitive.role == "kernel" or not op.blocks:
                continue
            runners = []
            for k, block in enumerate(op.blocks):
                sub = Function(f"{self.function.name}.{op.name}{k}", block).clone()
                for inner in sub.walk():  # a block runs on the thread (device) of its owner
                    inner.device = None
                runners.append(compile_function(sub, backend=self.backend, fastmath=self.fastmath,
                                                parallel=self.parallel))
            self.control_blocks[op.id] = runners
            # Loops run inside the native program, or step in Python when it has no native form.
            self.control[op.id] = functools.partial(op.primitive.impl, blocks=runners, **op.attrs)

    def run(self, *arrays: np.ndarray) -> list[np.ndarray]:
        """Run on arrays that already have the argument dtypes (the dispatch fast path)."""
        prof = PROFILER[0]
        if prof is not None:
            return self._run_profiled(prof, arrays)
        return self._run(*arrays)

    def _run(self, *arrays: np.ndarray) -> list[np.ndarray]:
        if self.backend not in COMPILED_BACKENDS:
            out = run_block(self.function.body, list(arrays))
            return [self._own(x, arrays) for x in out]
        if self._driver is None:
            with self._first_call:
                if self._driver is None:
                    self._compile_llvm()
                    if self._program is not None:
                        if len(self._returns) == 1:
                            self._driver_one = self._program.call_one
                        self._driver = self._program.call_list
                    else:
                        self._driver = self._make_driver()
        return self._driver(*arrays)

    def _run_profiled(self, prof: Profile, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
        # The compile, the call, and each top-level step of a native program (its profiling
        # build, compiled on the first profiled call) on this executable's device.
        name, device = self.function.name, self.device
        if not self._compiled:
            start = time.monotonic_ns()
            with self._first_call:
                self._compile_llvm()
            prof.record(f"compile {name}", "compile", start, time.monotonic_ns(), device,
                        {"native": self._program is not None, "why not native": self.native_reason})
        if self._program is None:
            start = time.monotonic_ns()
            out = self._run(*arrays)
            prof.record(f"{name} ({self.backend}, Python driver)", "program", start, time.monotonic_ns(), device)
            return out
        with self._profile_lock:
            if self._profiled is None:
                from flowjit.codegen_cpu.program import compile_program
                start = time.monotonic_ns()
                self._profiled = compile_program(self._program.plan, self._program._constants, POOL.empty,
                                                 POOL_MIN_BYTES, fastmath=self.fastmath, profile=True)
                prof.record(f"compile {name} (profiling build)", "compile", start, time.monotonic_ns(), device)
            start = time.monotonic_ns()
            out = self._profiled.call_list(*arrays)
            end = time.monotonic_ns()
            stamps = self._profiled.stamps.tolist()
        prof.record(f"call {name}", "call", start, end, device)
        # The plan's top-level steps are its kernel, matmul and control ops, in order.
        stepping = [op for op in self.function.body.ops if op.id in self.kernels or op.primitive.role ==
                    "matrix_product" or (op.blocks and op.primitive.kind == "control")]
        for i, (step, op) in enumerate(zip(self._profiled.plan.steps, stepping)):
            cat, args = self._describe_step(step)
            lines = op.attrs.get("lines") or (str(op.loc) if op.loc is not None else "")
            prof.record(op.attrs.get("name", op.name), cat, stamps[2 * i], stamps[2 * i + 1], device,
                        {"lines": lines, **args})
        return out

    @staticmethod
    def _describe_step(step: Any) -> tuple[str, dict[str, Any]]:
        """A native step's category and details for the profiler (its name is its op's, as
        ``flowjit explain`` names it)."""
        from flowjit.codegen_cpu.program_plan import ControlCall, Gemm, KernelCall
        if isinstance(step, KernelCall):
            return "kernel", {"threads": step.split[1]} if step.split else {}
        if isinstance(step, Gemm):
            return "gemm", {"flops": 2 * step.m * step.n * step.k, "m": step.m, "n": step.n, "k": step.k}
        if isinstance(step, ControlCall):
            return "loop", {"blocks": len(step.blocks)}
        return "step", {}

    def kernel_listing(self) -> str:
        """The generated source of every kernel (prelude left out; the loop IR of an llvm
        kernel) and of the driver, as ``flowjit ir --stage kernels`` prints it."""
        parts = []
        for op in self.function.body.ops:
            if op.primitive.role != "kernel":
                continue
            name, lines = op.attrs.get("name", op.name), op.attrs.get("lines", "")
            k = self.kernels.get(op.id)
            if k is None:
                why = self.fallbacks.get(name, f"the {self.backend} backend")
                parts.append(f"# kernel {name} ({lines}): runs on the interpreter: {why}\n")
            else:
                from flowjit.lowering import print_kernel
                parts.append(f"# kernel {name} ({lines}), loop IR\n{print_kernel(k.kernel).strip()}\n")
        if self.backend in COMPILED_BACKENDS:
            parts.append("# driver: one call of the program\n" + self.driver_source())
        return "\n".join(parts)

    def driver_source(self) -> str:
        """The driver a call runs: the native program's plan (llvm), or the Python source
        of the driver, one line per step of the memory plan."""
        if self.backend in COMPILED_BACKENDS:
            with self._first_call:
                self._compile_llvm()
        if self._program is not None:
            return self._program.plan.describe() + "\n"
        return self._driver_source()[0]

    def _driver_source(self) -> tuple[str, dict[str, Any]]:
        # Straight-line code: each kernel's entry called directly on arrays from
        # the buffer pool, NumPy references for the other ops, and `del` where the memory
        # plan releases a buffer. A call costs the kernels' dispatches and little else.
        env: dict[str, Any] = {"empty": POOL.empty, "np_empty": np.empty, "run_op": run_op, "own": self._own,
                               "contiguous": _contiguous, "out_of_memory": _out_of_memory}
        made_by_kernel = {r.id for st in self._steps if st.kernel is not None for r in st.op.results}
        names = {s: f"v{s}" for s in range(self._n_slots)}
        returned = {v.id for v in self.function.returns}
        args = [names[self.memory_plan.slots[a.id]] for a in self.function.args]
        lines = [f"def driver({', '.join(args)}):"]
        line_ops: dict[int, Op] = {}  # driver line number -> the op it runs, for error reports
        for i, st in enumerate(self._steps):
            first = len(lines)  # this step's lines are the driver's lines first + 1 ...
            ins = [names[s] for s in st.ins]
            outs = [names[s] for s in st.outs]
            k = st.kernel
            # A returned value must not alias another result: those keep the copying reference.
            view = (_as_view(st.op) if k is None and st.op.results and st.op.results[0].id not in returned
                    else None)
            if view is not None:
                env[f"view{i}"] = view
                lines.append(f"    {outs[0]} = view{i}({ins[0]})")
            elif st.op.id in self.control:
                env[f"control{i}"] = self.control[st.op.id]
                lines.append(f"    {', '.join(outs)}, = control{i}({', '.join(ins)})")
            elif k is None:
                env[f"op{i}"] = st.op
                call = f"run_op(op{i}, [{', '.join(ins)}])"
                lines.append(f"    {', '.join(outs)}, = {call}" if outs else f"    {call}")
            else:
                env[f"k{i}"] = k.compiled
                pointer = ""  # what the call takes of each output: the array, or its data pointer
                # An llvm kernel takes the op's exact shapes (0-d stays 0-d); a value no
                # kernel made may be strided and is made contiguous (bound to a name, so
                # it lives through the call).
                call_ins = []
                for n, v in zip(ins, st.op.inputs):
                    if v.id not in made_by_kernel:
                        if f"c{n}" not in call_ins:  # an op may read one value twice
                            env[f"t{n}"] = (v.type.dtype.np, tuple(v.type.shape))
                            lines.append(f"    c{n} = contiguous({n}, *t{n})")
                        n = f"c{n}"
                    call_ins.append(n)
                # A complex array is its parts to the kernel: one more dimension, of 2.
                shapes = [(*v.type.shape, *((2,) if v.type.dtype.is_complex else ()))
                          for v in (*st.op.inputs, *st.op.results)]
                entry = k.entry(shapes, self.parallel)
                if entry is None:
                    ins_tuple = f"({', '.join(call_ins)},)" if call_ins else "()"
                    template = f"    k{i}({ins_tuple}, ({{}},))"
                else:
                    # Shapes are fixed per trace: the dimensions are constants of the line.
                    env[f"k{i}"] = entry
                    pointer = ".ctypes.data"
                    dims = "".join(f", {d}" for shape in shapes for d in shape)
                    template = f"    k{i}({', '.join([*(f'{n}.ctypes.data' for n in call_ins), '{}'])}{dims})"
                    if any(b.role == "temp" for b in k.kernel.buffers):
                        template = template.replace("    k", "    if k", 1) + f": out_of_memory({k.kernel.name!r})"
                if st.into is not None:
                    lines.append(template.format(ins[st.into] + pointer))
                    lines.append(f"    {outs[0]} = {ins[st.into]}")
                else:
                    lines.extend(self._allocations(i, ins, outs, st, k.out_specs, env))
                    lines.append(template.format(", ".join(n + pointer for n in outs)))
            line_ops.update((n, st.op) for n in range(first + 1, len(lines) + 1))
            dead = [names[s] for s in st.free if names[s] not in args]  # the caller holds the arguments
            dead += list(dict.fromkeys(n for n in call_ins if n.startswith("cv"))) if k is not None else []
            if dead:
                lines.append(f"    del {', '.join(dead)}")
        rets = [f"own({names[s]}, ({', '.join(args)}{',' if len(args) == 1 else ''}))" if check else names[s]
                for s, check in zip(self._returns, self._check_alias)]
        lines.append(f"    return [{', '.join(rets)}]")
        env["__line_ops__"] = line_ops
        return "\n".join(lines) + "\n", env

    @staticmethod
    def _allocations(i: int, ins: list[str], outs: list[str], st: Step, specs: Sequence[tuple], env: dict[str, Any]
                     ) -> list[str]:
        """The driver lines allocating step ``i``'s outputs (``specs``: shape and dtype of each)."""
        lines = []
        for j, (n, (shape, dtype)) in enumerate(zip(outs, specs)):
            env[f"d{i}_{j}"] = dtype
            # The shape is fixed per signature: small buffers skip the pool.
            small = math.prod(shape) * np.dtype(dtype).itemsize < POOL_MIN_BYTES
            # A large output lines up with the first input it maps element for element.
            like = next((m for m, v in zip(ins, st.op.inputs) if tuple(v.type.shape) == tuple(shape)
                         and v.type.dtype.np.itemsize == np.dtype(dtype).itemsize), None)
            alloc = (f"np_empty({shape!r}, d{i}_{j})" if small else
                     f"empty({shape!r}, d{i}_{j}{f', {like}' if like else ''})")
            lines.append(f"    {n} = {alloc}")
        return lines

    def _make_driver(self) -> Any:
        source, env = self._driver_source()
        self._line_ops = env["__line_ops__"]
        filename = f"<flowjit driver {self.function.name}>"
        exec(compile(source, filename, "exec"), env)
        if len(self._returns) == 1:
            # Same lines (so failing_op maps them alike), the one result returned bare.
            head, last = source.rstrip("\n").rsplit("\n", 1)
            one = head + "\n" + last.replace("return [", "return (").rstrip("]") + ")\n"
            env_one = dict(env)
            exec(compile(one.replace("def driver(", "def driver_one(", 1), filename, "exec"), env_one)
            self._driver_one = env_one["driver_one"]
        return env["driver"]

    def direct_call(self) -> Callable[..., np.ndarray] | None:
        """After the first call, a function of the argument arrays (already of the argument
        dtypes) that runs the program and returns its one result: the driver itself, for
        the dispatch fast path. None before the first call, for a program with several
        results, or on the interpreter backend."""
        return self._driver_one if self._driver is not None else None

    def failing_op(self, error: BaseException) -> Op | None:
        """The op of this program that raised ``error`` (from its traceback), if any."""
        op = None
        tb = error.__traceback__
        while tb is not None:
            code = tb.tb_frame.f_code
            if code.co_filename == f"<flowjit driver {self.function.name}>":
                op = getattr(self, "_line_ops", {}).get(tb.tb_lineno, op)
            tb = tb.tb_next
        return op

    @staticmethod
    def _own(x: np.ndarray, arrays: Sequence[np.ndarray]) -> np.ndarray:
        # A result that is (a view of) an argument or a constant is copied, so a caller may
        # mutate what it gets back.
        if not x.flags.writeable or any(np.may_share_memory(x, a) for a in arrays):
            return np.array(x)
        return x

    def __call__(self, args: Sequence[object]) -> list[np.ndarray]:
        return self.run(*[np.asarray(a).astype(d, copy=False) for a, d in zip(args, self._dtypes)])


def disabled_passes(passes: Mapping[str, bool] | Iterable[str] | None, pipeline: Pipeline = DEFAULT_PIPELINE
                    ) -> set[str]:
    """The passes to skip for a ``passes=`` option: a mapping ``{"cse": False}``, or the
    collection of pass names to run (every other pass is skipped)."""
    if passes is None:
        return set()
    names = set(pipeline.names)
    if isinstance(passes, Mapping):
        unknown = set(passes) - names
        chosen = {n for n, on in passes.items() if not on}
    else:
        wanted = set(passes)
        unknown = wanted - names
        chosen = names - wanted
    if unknown:
        raise ValueError(f"unknown pass(es) {sorted(unknown)}; the pipeline is {pipeline}")
    return chosen


def lower(function: Function, stage: str, passes: Mapping[str, bool] | Iterable[str] | None = None,
          pipeline: Pipeline = DEFAULT_PIPELINE, device: str | None = None, soft: bool = False
          ) -> Function | LoopProgram:
    """``function`` after pipeline ``stage`` (a pass name, or ``traced``/``fused``), placed
    as ``compile_function`` places it; for ``loops`` the fused program's kernels as loop IR."""
    if stage == "traced":
        return function
    if stage == "loops":
        from flowjit.lowering import loop_program  # only for inspection: not on import's path
        return loop_program(lower(function, "fused", passes, pipeline, device, soft))
    stop = "fusion" if stage == "fused" else stage
    return pipeline.run(function, disable=disabled_passes(passes, pipeline), stop_after=stop,
                        target=_target(device, soft)).function


def _target(device: str | None, soft: bool) -> DeviceTarget:
    from flowjit.runtime.devices import device_target
    target = device_target(device)
    return dataclasses.replace(target, soft=True) if soft else target


def _as_view(op: Op) -> Callable[[np.ndarray], np.ndarray] | None:
    """A transpose or reshape left outside the kernels (fusion does so when only library
    calls read it) runs as a NumPy view: its reference copies, but the memory plan never
    writes into a value a layout op read, so the view stays valid."""
    role = op.primitive.role
    if role == "permute_axes":
        perm = tuple(op.attrs["perm"])
        return lambda x: x.transpose(perm)
    if role in ("row_major_reshape", "unit_axes_reshape"):
        shape = op.results[0].type.shape
        return lambda x: x.reshape(shape)
    return None


def compile_function(function: Function, interpret: bool = False, device: str | None = None,
                     passes: Mapping[str, bool] | Iterable[str] | None = None,
                     pipeline: Pipeline = DEFAULT_PIPELINE, backend: str | None = None,
                     fastmath: bool = False, parallel: bool = True, soft: bool = False) -> Any:
    """Prepare ``function`` to run: the traced program as it is when ``interpret`` (the
    unfused debug mode), else the output of the pass pipeline on ``backend`` (default
    ``FLOWJIT_BACKEND`` or ``llvm``: lower the fused kernels to loop IR and compile them
    through llvmlite, with LLVM's ``fast`` flags on float ops when ``fastmath``;
    ``interpreter`` runs the optimized program on the NumPy interpreter). ``device`` is the
    default device (``cpu:0``): where arguments live and unplaced ops go. A program placed
    on other devices than ``cpu:0`` becomes a ``MultiDeviceExecutable``: one partition per
    device, run concurrently. ``soft`` (TensorFlow's soft placement): an op whose
    ``fj.device`` cannot run it runs on the cheapest device that can, instead of raising
    PlacementError."""
    if interpret:
        return Executable(function, "interpreter", device or "cpu:0")
    target = _target(device, soft)
    result = pipeline.run(function, disable=disabled_passes(passes, pipeline), target=target)
    chosen = backend or os.environ.get("FLOWJIT_BACKEND") or DEFAULT_BACKEND
    check_backend(chosen)
    placed = {op.device for op in result.function.body.ops} | set(result.function.arg_devices)
    if placed - {None, "cpu:0"}:
        from flowjit.runtime.multi_device import MultiDeviceExecutable
        return MultiDeviceExecutable(result.function, chosen, target.default, result, fastmath=fastmath)
    return Executable(result.function, chosen, target.default, result, fastmath=fastmath, parallel=parallel)
