"""``Executable``: a Function prepared to run on one device, the one path below fusion.

Every fusion op is lowered to loop IR once (``flowjit.lowering.backend.lower_program``,
control ops' blocks as programs of their own) and the result is handed to the code
generator of the device's kind (``code_generators``) through one interface: the whole
program compiled by ``compile_program`` (the CPU's one native function: kernels, BLAS
calls and loops; CUDA's launches), or, when the backend says it has no whole-program form
(``NoProgram``) and its kernels can be called from the host, each kernel compiled by
``compile_kernel`` and called by a Python driver that follows a memory plan
(``memory_plan.py``) and a flat list of steps. Results never alias the caller's arguments
or the program's constants, so a caller may mutate what it gets back.

``compile_single_device`` runs the pass pipeline and makes the Executable; placed programs
spanning devices go through ``dispatch.compile_function``.
"""

from __future__ import annotations

import contextlib
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
from flowjit.ir.errors import KernelCompileError
from flowjit.ir.interpreter import run_block, run_op
from flowjit.passes.pipeline import DEFAULT_PIPELINE, Pipeline, PipelineResult
from flowjit.passes.placement import DeviceTarget
from flowjit.runtime.buffers import POOL, POOL_MIN_BYTES
from flowjit.runtime.code_generators import code_generator
from flowjit.runtime.collection import collection_deferred
from flowjit.runtime.devices import device_target
from flowjit.runtime.memory_plan import plan_memory
from flowjit.runtime.profiler import PROFILER, Profile
from flowjit.runtime.progress import compiling

if TYPE_CHECKING:  # the loop IR loads with the first compile, not with `import flowjit`
    from flowjit.lowering.backend import LoweredProgram
    from flowjit.lowering.listing import LoopProgram
    from flowjit.lowering.loops import Kernel

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


def kernel_in_place(kernel: Kernel) -> tuple[int, ...]:
    """The input positions the one output of ``kernel`` may be written into (the Python
    driver writes only a kernel's one output into an input)."""
    positions = {b.name: j for j, b in enumerate(kernel.inputs)}
    if len(kernel.outputs) != 1 or not kernel.in_place:
        return ()
    return tuple(sorted(positions[n] for n in kernel.in_place[0]))


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
    kernel: Kernel | None  # its loop IR, when it is a lowered kernel
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

    With the ``llvm`` backend (the default) the program is lowered once and compiled by the
    device's code generator: as one whole program when it has one (``native_reason`` says
    why not), else, on the CPU, each fusion op as a kernel the Python driver calls (on the
    first call; a CUDA program compiles at once). In the Python driver a fusion the
    lowering cannot express (``fallbacks`` says why) and every other op run their NumPy
    reference, so matmul goes to NumPy's BLAS; ``memory_plan`` says which of its buffers
    are released early and which kernels write in place. The ``interpreter`` backend runs
    the program on the NumPy interpreter.
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
        # The device's code generator (none for the interpreter), the program lowered for
        # it, each kernel's loop IR (op id -> Kernel) and, for the Python driver, each
        # kernel as the code generator compiled it.
        self.codegen = code_generator(device) if backend in COMPILED_BACKENDS else None
        self.lowered: LoweredProgram | None = None
        self.kernels: dict[int, Kernel] = {}
        self._compiled_kernels: dict[int, Any] = {}
        self.fallbacks: dict[str, str] = {}
        self._driver: Any = None
        self._driver_one: Any = None  # the driver returning its one result bare (no list)
        self._program: Any = None     # llvm: the whole program as the code generator compiled it, if it has one
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
            self._compile_blocks()
            self._lower()
        self.memory_plan = plan_memory(function, {i: kernel_in_place(k) for i, k in self.kernels.items()})
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

    def _lower(self) -> None:
        # Lowered now, compiled on the first call (or by the program around them); a
        # backend whose kernels the host cannot call compiles its program at once, so an op
        # its device cannot run fails here, when the program is made.
        from flowjit.lowering.backend import lower_program
        self.lowered = lower_program(self.function, single_ops=self.codegen.single_ops,
                                     flat_indices=self.codegen.flat_indices)
        self.lowered.blocks = {i: [r.lowered for r in rs] for i, rs in self.control_blocks.items()}
        self.kernels = self.lowered.kernels
        self.fallbacks = self.lowered.refused
        if not self.codegen.host_driver:
            self._compile_llvm()

    def _compile_llvm(self) -> None:
        """Compile the whole program as one native function (codegen_cpu.program) when
        every op has a native form; otherwise ``native_reason`` says why not and each
        kernel is compiled for the Python driver (its blocks compile on their first run)."""
        if self._compiled:
            return
        # a progress line on a terminal, past 1 s; the collector held back (runtime.collection)
        with compiling(self.function.name, len(self.kernels)), collection_deferred():
            self._compile_llvm_now()

    def _compile_llvm_now(self) -> None:
        from flowjit.lowering.backend import NoProgram
        try:
            self._program = self.codegen.compile_program(self.lowered, self.device, fastmath=self.fastmath,
                                                         parallel=self.parallel, pool_empty=POOL.empty,
                                                         pool_min_bytes=POOL_MIN_BYTES)
        except NoProgram as e:
            if not self.codegen.host_driver:
                raise
            self.native_reason = str(e)
        except KernelCompileError as e:
            op = next((op for op in self.function.walk() if op.id in self.kernels
                       and getattr(e, "kernel", None) == self.kernels[op.id].name), None)
            raise type(e)(f"kernel {op.attrs.get('name', op.name)} from {op.attrs.get('lines', '?')}: "
                          f"{e}" if op is not None else str(e)) from e
        if self._program is None:
            for op in self.function.body.ops:
                k = self.kernels.get(op.id)
                if k is None:
                    continue
                try:
                    self._compiled_kernels[op.id] = self.codegen.compile_kernel(
                        k, [v.type for v in op.inputs], [r.type for r in op.results], fastmath=self.fastmath)
                except KernelCompileError as e:
                    raise type(e)(f"kernel {op.attrs.get('name', op.name)} from "
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
                runners.append(compile_single_device(sub, backend=self.backend, fastmath=self.fastmath,
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
        first = None
        if self._driver is None:
            with self._first_call:
                if self._driver is None:
                    self._compile_llvm()
                    if self._program is not None:
                        if len(self._returns) == 1:
                            self._driver_one = self._program.call_one
                        first = self._program.call_list
                        self._driver = self._second_call
                    else:
                        self._driver = self._make_driver()
        if first is None:
            return self._driver(*arrays)
        return first(*arrays)

    def _second_call(self, *arrays: np.ndarray) -> list[np.ndarray]:
        # A native program's second call: once it returns the program is hot, and the
        # backend may finish its code on another thread (codegen_cpu's tiers); the calls
        # after it go straight to the program.
        self._driver = call = self._program.call_list
        try:
            return call(*arrays)
        finally:
            # Never in place of the call's results: the quick code stays if no upgrade starts.
            with contextlib.suppress(Exception):
                self._program.hot()

    def _run_profiled(self, prof: Profile, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
        # The compile, the call, and each top-level step of a native program (its profiling
        # build, compiled on the first profiled call) on this executable's device.
        name, device = self.function.name, self.device
        if self.backend not in COMPILED_BACKENDS:  # the interpreter: nothing to compile, no steps
            start = time.monotonic_ns()
            out = self._run(*arrays)
            prof.record(f"{name} ({self.backend})", "program", start, time.monotonic_ns(), device)
            return out
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
                start = time.monotonic_ns()
                self._profiled = self.codegen.compile_program(
                    self.lowered, self.device, fastmath=self.fastmath, parallel=self.parallel,
                    pool_empty=POOL.empty, pool_min_bytes=POOL_MIN_BYTES, profile=True)
                prof.record(f"compile {name} (profiling build)", "compile", start, time.monotonic_ns(), device)
            start = time.monotonic_ns()
            out = self._profiled.call_list(*arrays)
            end = time.monotonic_ns()
            steps = self._profiled.profiled_steps()
        prof.record(f"call {name}", "call", start, end, device)
        # The program's timed steps are its kernel, matmul and control ops, in order.
        stepping = [op for op in self.function.body.ops if op.id in self.kernels or op.primitive.role ==
                    "matrix_product" or (op.blocks and op.primitive.kind == "control")]
        # A step may run several of them (``"ops"`` in its details: a convolution's windows
        # and their product); it is named by the last, with each one's lines.
        at = 0
        for cat, args, begin, finish in steps:
            ran, args = stepping[at:at + args.get("ops", 1)], {k: v for k, v in args.items() if k != "ops"}
            at += len(ran)
            if not ran:
                break
            lines = "; ".join(filter(None, (o.attrs.get("lines") or (str(o.loc) if o.loc is not None else "")
                                            for o in ran)))
            prof.record(ran[-1].attrs.get("name", ran[-1].name), cat, begin, finish, device, {"lines": lines, **args})
        return out

    def kernel_listing(self) -> str:
        """The loop IR of every kernel and the driver (the whole program's plan, or the
        Python driver), as ``flowjit ir --stage kernels`` prints it; a program whose kernels
        the host does not call (CUDA) as its code generator describes it."""
        if self.codegen is not None and not self.codegen.host_driver:
            return self._program.describe()
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
                parts.append(f"# kernel {name} ({lines}), loop IR\n{print_kernel(k).strip()}\n")
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
            return self._program.describe() + "\n"
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
                compiled = self._compiled_kernels[st.op.id]
                env[f"k{i}"] = compiled
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
                entry = compiled.entry(shapes, self.parallel)
                if entry is None:
                    ins_tuple = f"({', '.join(call_ins)},)" if call_ins else "()"
                    template = f"    k{i}({ins_tuple}, ({{}},))"
                else:
                    # Shapes are fixed per trace: the dimensions are constants of the line.
                    env[f"k{i}"] = entry
                    pointer = ".ctypes.data"
                    dims = "".join(f", {d}" for shape in shapes for d in shape)
                    # None for a kernel's temps: it allocates them.
                    template = (f"    k{i}({', '.join([*(f'{n}.ctypes.data' for n in call_ins), '{}'])}{dims}"
                                f"{', None' if k.temps else ''})")
                    if k.temps:
                        template = template.replace("    k", "    if k", 1) + f": out_of_memory({k.name!r})"
                if st.into is not None:
                    lines.append(template.format(ins[st.into] + pointer))
                    lines.append(f"    {outs[0]} = {ins[st.into]}")
                else:
                    specs = [(tuple(r.type.shape), r.type.dtype.np) for r in st.op.results]
                    lines.extend(self._allocations(i, ins, outs, st, specs, env))
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
        """After the second call (a native program's) or the first (a Python driver's), a
        function of the argument arrays (already of the argument dtypes) that runs the
        program and returns its one result: the driver itself, for the dispatch fast path.
        None before, for a program with several results, or on the interpreter backend."""
        return self._driver_one if self._driver is not None and self._driver != self._second_call else None

    def failing_op(self, error: BaseException) -> Op | None:
        """The op of this program that raised ``error`` (from its traceback), if any."""
        program_op = getattr(self._program, "failing_op", None)
        if program_op is not None and program_op(error) is not None:
            return program_op(error)
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
    as ``dispatch.compile_function`` places it; for ``loops`` the fused program's kernels as loop IR."""
    if stage == "traced":
        return function
    if stage == "loops":
        from flowjit.lowering import loop_program
        return loop_program(lower(function, "fused", passes, pipeline, device, soft))
    stop = "fusion" if stage == "fused" else stage
    return pipeline.run(function, disable=disabled_passes(passes, pipeline), stop_after=stop,
                        target=_target(device, soft)).function


def _target(device: str | None, soft: bool) -> DeviceTarget:
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


def optimize(function: Function, device: str | None = None,
             passes: Mapping[str, bool] | Iterable[str] | None = None, pipeline: Pipeline = DEFAULT_PIPELINE,
             soft: bool = False) -> tuple[PipelineResult, DeviceTarget]:
    """``function`` through the pass pipeline for ``device`` (the default device), with the
    target it was placed for."""
    target = _target(device, soft)
    return pipeline.run(function, disable=disabled_passes(passes, pipeline), target=target), target


def chosen_backend(backend: str | None) -> str:
    """``backend``, else ``FLOWJIT_BACKEND``, else the default; ValueError if unknown."""
    chosen = backend or os.environ.get("FLOWJIT_BACKEND") or DEFAULT_BACKEND
    check_backend(chosen)
    return chosen


def compile_single_device(function: Function, device: str | None = None,
                          passes: Mapping[str, bool] | Iterable[str] | None = None,
                          pipeline: Pipeline = DEFAULT_PIPELINE, backend: str | None = None,
                          fastmath: bool = False, parallel: bool = True) -> Executable:
    """``function`` optimized and prepared as one Executable on ``device`` (a control op's
    block, which runs on the device of the op that owns it)."""
    result, target = optimize(function, device, passes, pipeline)
    return Executable(result.function, chosen_backend(backend), target.default, result, fastmath=fastmath,
                      parallel=parallel)
