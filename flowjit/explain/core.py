"""``fj.explain``: a program's kernels, the bytes and FLOPs of each, the bound that limits
it, and why fusion stopped where it did.

The kernels are the top-level ops of the fused program in execution order (the order the
native driver runs them): fusion ops (one kernel each), matmuls (one BLAS call each), the
other ops that run alone (a random draw, a gather, a transfer between devices), and
control ops with the kernels of their blocks listed after them (each block fused as the
runtime fuses it, as a program of its own). Constants, Variable updates (the new value
is rebound, nothing moves) and the transposes and reshapes that fold into a BLAS call do
no work and are left out.

For each: bytes read (each distinct input once) and written (each output once): the
least a kernel can move; FLOPs (elementwise and reduction ops times the elements each
touches; a matmul 2*m*n*k); the bound that applies (memory bandwidth for kernels, BLAS for
matmul: the larger of its FLOPs at the BLAS rate and its bytes at the bandwidth), with
the machine's limits from ``flowjit.explain.bounds``; and the time that bound predicts.

``run=True`` also measures. Each value of the program is computed once by the NumPy
reference interpreter (on the arrays given, or on random ones for ``ShapeDtype``
arguments). Each kernel is then compiled alone from its loop IR
(``codegen_cpu.render.compile_kernel``) and timed on those values, called through its C
entry as the native driver calls it (through the Python driver's chunk pool where it
splits a large loop; a call from Python costs about a microsecond more than the
driver's); each matmul is timed as NumPy's matmul (the OpenBLAS the program calls) on its
operands, and other ops as their NumPy reference. Each time is the median of repeated
runs, with the fraction of the bound (predicted over measured: 1.0 runs at the bound,
above 1.0 the data came from cache). The whole program is timed too (the compiled
function, its median); a kernel timed alone does not pay for what the program around it
evicts from cache, nor gain from what it leaves there. The kernels of a control op's
blocks are timed on the values of each block's first run (a loop's first iteration, the
branch a cond takes); a block that never runs is not timed.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from flowjit.codegen_cpu.program_plan import ConvGemm, value_names
from flowjit.explain.bounds import machine_bounds
from flowjit.explain.report import BoundaryReport, Explanation, KernelReport
from flowjit.ir.core import Function, Op
from flowjit.ir.interpreter import run_block, run_op
from flowjit.passes.fusion import boundaries_of
from flowjit.runtime.executable import STAGES, lower
from flowjit.tracer.function import ShapeDtype, TracedFunction, function

# A kernel is timed until this much time has passed (at least MIN_RUNS, at most MAX_RUNS).
TIME_BUDGET_S = 0.2
MIN_RUNS, MAX_RUNS = 5, 200
# Kinds of top-level op that do no work of their own in the compiled program.
_NO_WORK = ("constant", "layout", "stateful")


def explain(f: Callable[..., Any], *args: Any, run: bool = False, stage: str = "fused",
            **kwargs: Any) -> Explanation:
    """Explain how ``f`` (an ``fj.function`` or a plain function) runs on ``args`` (arrays
    or ``fj.ShapeDtype``): its kernels in execution order with their ops, the user's
    lines, bytes read and written, FLOPs, the bound that applies and the time it
    predicts, then every fusion boundary with the reason the fusion pass recorded.
    ``run=True`` also times each kernel and the whole program (see the module docstring).
    ``stage``: a pipeline stage before ``fused`` lists each op as a step of its own (what
    the program would move unfused; nothing is timed then)."""
    if stage not in STAGES:
        raise ValueError(f"fj.explain: unknown stage {stage!r}; available: {', '.join(STAGES)}")
    traced = f if isinstance(f, TracedFunction) else function(f)
    entry, leaves = traced._lookup(args, kwargs)
    program = traced.ir(*args, stage=stage, **kwargs)
    assert isinstance(program, Function)
    bounds = machine_bounds()
    fused = stage == "fused"
    report = Explanation(program.name, [f"{a.name or f'arg{i}'}: {a.type}" + (" var" if v else "")
                                         for i, (a, v) in enumerate(zip(program.args, program.is_var))],
                         stage, "", [], [], bounds.to_json())
    blocks: dict[int, list[tuple[Function, str]]] = {}
    _describe(program, report, "", fused, bounds, blocks)
    if not fused:
        report.notes.append(f"stage {stage!r}: before fusion, each op is a step of its own (not timed)")
    exe = entry.executable
    if run and fused:
        values = [_concrete(x) if isinstance(x, ShapeDtype) else np.asarray(x) for x in leaves]
        values += [np.asarray(v._value) for v in entry.variables]
        _measure(program, report, values, blocks)
        for k in report.kernels:
            if k.block and k.measured_s is None and not k.note:
                k.note = "not timed: its block did not run"
        report.measured_s = _median(lambda: exe(values))  # outputs only: no Variable is rebound
    if fused:
        _blocked_convolutions(program, report, exe, bounds)
    report.driver = _driver(exe)
    report.bytes_moved = sum(k.bytes_read + k.bytes_written for k in report.kernels)
    report.flops = sum(k.flops for k in report.kernels)
    report.predicted_s = sum(k.predicted_s or 0.0 for k in report.kernels)
    return report


def _driver(exe: Any) -> str:
    """How a call runs the program, as far as it is known before compiling it."""
    backend = getattr(exe, "backend", "")
    if hasattr(exe, "partitions"):
        return f"one program per device ({', '.join(exe.devices)}), run concurrently"
    if backend != "llvm":
        return f"the {backend} backend"
    if getattr(exe, "_program", None) is not None:
        return "one native call (the whole program)"
    if getattr(exe, "native_reason", ""):
        return f"the Python driver, kernel by kernel ({exe.native_reason})"
    return "the llvm backend (not called yet: run=True compiles and times it)"


def _describe(program: Function, report: Explanation, block: str, fused: bool, bounds: Any,
              blocks: dict[int, list[tuple[Function, str]]]) -> None:
    """Add the steps and boundaries of ``program`` (in ``block``) to ``report``; the fused
    blocks of its control ops, with their names, go to ``blocks`` by op id."""
    for b in boundaries_of(program):
        report.boundaries.append(BoundaryReport(**dataclasses.asdict(b), block=block))
    for op in program.body.ops:
        if not _does_work(op, fused):
            continue
        index = len(report.kernels) + 1
        report.kernels.append(_kernel(op, index, block, bounds))
        if op.primitive.kind == "control" and op.primitive.role != "kernel" and fused:
            blocks[op.id] = [(fn, f"{block}{op.name}#{index}.{k}/") for k, fn in enumerate(_fused_blocks(program, op))]
            for fn, name in blocks[op.id]:
                _describe(fn, report, name, fused, bounds, blocks)


def _blocked_convolutions(program: Function, report: Explanation, exe: Any, bounds: Any) -> None:
    """Where the native program runs a convolution's windows and their product as one
    ``ConvGemm`` step (``codegen_cpu.program_plan``: the windows made in cache a block of
    output rows at a time, each block multiplied as it is made), say so on both rows: the
    windows are never written to memory, and the product reads the image instead. Known
    once the program is compiled (``run=True``, or a call before); the top level only."""
    plan = getattr(getattr(exe, "_program", None), "plan", None)
    products = {s.gemm.c for s in getattr(plan, "steps", ()) if isinstance(s, ConvGemm)}
    if not products:
        return
    names = value_names(program.body)
    made_by = {r.id: op for op in program.body.ops for r in op.results}
    working = [op for op in program.body.ops if _does_work(op)]
    row_of = dict(zip((op.id for op in working), (k for k in report.kernels if not k.block)))
    for op in working:
        if op.primitive.role != "matrix_product" or names[op.results[0].id] not in products:
            continue
        windows = made_by.get(op.inputs[0].id)
        while windows is not None and windows.primitive.kind == "layout":   # reshapes, a swap of axes
            windows = made_by.get(windows.inputs[0].id)
        if windows is None or windows.id not in row_of:
            continue
        made, product = row_of[windows.id], row_of[op.id]
        image = sum(_nbytes(v.type) for v in {v.id: v for v in windows.inputs}.values())
        product.bytes_read += image - made.bytes_written
        product.bound, product.predicted_s = _blas_bound(product.flops, product.bytes_read + product.bytes_written,
                                                         bounds)
        product.fraction_of_bound = (product.predicted_s / product.measured_s if product.measured_s else None)
        product.note = (f"runs blocked with #{made.index}'s windows (one step of the native program): "
                        "a block of output rows' windows made in cache, then multiplied on one BLAS thread"
                        + ("; timed here as one BLAS call over the whole windows" if product.measured_s else ""))
        made.bytes_read = made.bytes_written = 0
        made.bound, made.predicted_s, made.measured_s, made.fraction_of_bound = "-", None, None, None
        made.note = (f"made a block at a time inside #{product.index}'s product, never written whole: "
                     "counted and timed there")


def _does_work(op: Op, fused: bool = True) -> bool:
    """Whether ``op`` is a step of the report (``_NO_WORK``: before fusion, layout ops too)."""
    return op.primitive.kind not in (_NO_WORK if fused else ("constant", "stateful")) or bool(op.blocks)


def _blas_bound(flops: int, nbytes: int, bounds: Any) -> tuple[str, float]:
    """A BLAS call's bound and the time it predicts: the larger of its FLOPs at the BLAS
    rate and its bytes at the memory bandwidth."""
    compute_s, memory_s = flops / bounds.gemm_flops, nbytes / bounds.bandwidth
    return ("blas" if compute_s >= memory_s else "memory"), max(compute_s, memory_s)


def _fused_blocks(program: Function, op: Op) -> list[Function]:
    """The blocks of control op ``op`` fused as the runtime fuses them (each a program)."""
    out = []
    for k, block in enumerate(op.blocks):
        sub = Function(f"{program.name}.{op.name}{k}", block).clone()
        for inner in sub.walk():
            inner.device = None
        fn = lower(sub, "fused")
        assert isinstance(fn, Function)
        out.append(fn)
    return out


def _nbytes(t: Any) -> int:
    return math.prod(t.shape) * t.dtype.np.itemsize


def _flops(op: Op) -> int:
    """Elementwise ops times their elements, reductions times their input's elements,
    matmul 2*m*n*k, a kernel the sum of its ops'."""
    kind = op.primitive.kind
    if op.primitive.role == "kernel":
        return sum(_flops(inner) for inner in op.blocks[0].ops)
    if kind == "elementwise":
        return math.prod(op.results[0].type.shape)
    if kind == "reduction":
        return math.prod(op.inputs[0].type.shape)
    if op.primitive.role == "matrix_product":
        return 2 * math.prod(op.results[0].type.shape) * op.inputs[0].type.shape[-1]
    return 0


def _kernel(op: Op, index: int, block: str, bounds: Any) -> KernelReport:
    role, kind = op.primitive.role, op.primitive.kind
    inputs = list({v.id: v for v in op.inputs}.values())
    read = sum(_nbytes(v.type) for v in inputs)
    written = sum(_nbytes(r.type) for r in op.results)
    flops = _flops(op)
    if role == "kernel":
        name, what = op.attrs.get("name", op.name), "kernel"
        ops = [inner.name for inner in op.blocks[0].ops if inner.primitive.kind != "constant"]
        lines = op.attrs.get("lines", "")
    else:
        name, ops, lines = op.name, [op.name], str(op.loc) if op.loc is not None else ""
        what = {"opaque": "blas" if role == "matrix_product" else "library", "random": "random",
                "transfer": "transfer", "control": "control"}.get(kind, "op")
    memory_s = (read + written) / bounds.bandwidth
    if (op.device or "").startswith("cuda"):
        return KernelReport(index, name, what, ops, lines, op.device or "", [str(r.type) for r in op.results],
                            read, written, flops, "-", None, block=block,
                            note="on a CUDA device: this machine's CPU bounds do not apply, and it is not timed")
    if what == "control":
        bound, predicted = "its blocks", None
    elif what == "blas":
        bound, predicted = _blas_bound(flops, read + written, bounds)
    else:
        bound, predicted = "memory", memory_s
    return KernelReport(index, name, what, ops, lines, op.device or "", [str(r.type) for r in op.results],
                        read, written, flops, bound, predicted, block=block)


def _concrete(spec: Any) -> np.ndarray:
    """An array for a ``ShapeDtype`` argument: small random floats; integers and booleans
    zero (a valid index and a valid label)."""
    dtype = np.dtype(spec.dtype.np if hasattr(spec.dtype, "np") else spec.dtype)
    if dtype.kind == "f":
        return (np.random.default_rng(0).standard_normal(spec.shape) * 0.1).astype(dtype)
    return np.zeros(spec.shape, dtype)


def _median(run: Callable[[], object]) -> float:
    run()  # compiles (or loads) and warms the caches
    times: list[float] = []
    spent = 0.0
    while len(times) < MIN_RUNS or (spent < TIME_BUDGET_S and len(times) < MAX_RUNS):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
        spent += times[-1]
    return float(np.median(times))


def _measure(program: Function, report: Explanation, args: Sequence[np.ndarray],
             blocks: dict[int, list[tuple[Function, str]]], block: str = "") -> list[np.ndarray]:
    """Compute every value of ``program`` (in ``block``) with the interpreter, time each
    of its steps in ``report`` on its values (see the module docstring), and return its
    results. A control op runs its reference with a ``_FirstRun`` per block, so the
    kernels of a block are timed on the values of its first run."""
    env: dict[int, np.ndarray] = {a.id: np.asarray(x, a.type.dtype.np) for a, x in zip(program.args, args)}
    sent: dict[Any, np.ndarray] = {}
    steps = iter([k for k in report.kernels if k.block == block])
    for op in program.body.ops:
        ins = [env[v.id] for v in op.inputs]
        if op.primitive.kind == "transfer":  # both sides run here: the value moves through a dict
            outs = [sent[op.attrs["key"]]] if op.results else []
            if not op.results:
                sent[op.attrs["key"]] = ins[0]
        elif op.id in blocks:
            runners = [_FirstRun(fn, name, report, blocks) for fn, name in blocks[op.id]]
            outs = list(op.primitive.impl(*ins, blocks=runners, **op.attrs))
        else:
            outs = run_op(op, ins)
        for r, x in zip(op.results, outs):
            env[r.id] = np.asarray(x, r.type.dtype.np).reshape(r.type.shape)
        if not _does_work(op):
            continue
        k = next(steps)
        timer = _timer(op, ins)
        if timer is None:
            k.note = k.note or ("its blocks' kernels are timed on their first run" if op.id in blocks
                                else "not timed")
            continue
        k.measured_s = _median(timer)
        if k.predicted_s is not None and k.measured_s > 0:
            k.fraction_of_bound = k.predicted_s / k.measured_s
    return [env[v.id] for v in program.returns]


class _FirstRun:
    """A control op's block as its reference runs it (a callable on the argument list):
    the first run times the block's kernels (``_measure``), every run computes its
    results with the interpreter. ``function`` is the fused block (a scan reads it)."""

    def __init__(self, function: Function, name: str, report: Explanation,
                 blocks: dict[int, list[tuple[Function, str]]]):
        self.function, self.name, self.report, self.blocks = function, name, report, blocks
        self.runs = 0

    def __call__(self, args: list[np.ndarray]) -> list[np.ndarray]:
        self.runs += 1
        if self.runs == 1:
            return _measure(self.function, self.report, args, self.blocks, self.name)
        return run_block(self.function.body, args)


def _kernel_timer(op: Op, ins: list[np.ndarray]) -> Callable[[], object] | None:
    """The kernel of fusion op ``op`` compiled alone and called on ``ins``: through its C
    entry with the pointers and dimensions bound once (as the native driver calls it) when
    it runs on one thread at these sizes, else through the chunk pool."""
    # The loop IR and render (llvmlite) load on the first timed kernel, as on the first
    # compile (``import flowjit``, which imports this module, loads neither).
    from flowjit.codegen_cpu import parallel, render
    from flowjit.lowering import Unsupported, lower_block
    from flowjit.lowering.loops import as_parts
    try:
        kernel = lower_block(op.blocks[0], "explain_kernel", collapse=True)   # as the CPU compiles it
    except Unsupported:
        return None
    compiled = render.compile_kernel(kernel)
    arrays = [np.ascontiguousarray(x, v.type.dtype.np).reshape(v.type.shape) for x, v in zip(ins, op.inputs)]
    arrays += [np.empty(r.type.shape, r.type.dtype.np) for r in op.results]
    if (render.chunk_loop(kernel) is not None
            and max(a.size for a in arrays) >= parallel.PARALLEL_MIN_ELEMENTS):
        n = len(op.inputs)
        return lambda: compiled(arrays[:n], arrays[n:])
    # The entry reads a complex array as its parts (a trailing axis of 2), as the program passes it.
    parts = [as_parts(a) for a in arrays]
    entry = compiled.entry([a.shape for a in parts], parallel=False)
    # A kernel with temps is handed None for them: it allocates its own.
    flat = [*(a.ctypes.data for a in parts), *(d for a in parts for d in a.shape),
            *([None] if kernel.temps else [])]
    return lambda: (arrays, entry(*flat))  # the arrays live as long as the timer


def _timer(op: Op, ins: list[np.ndarray]) -> Callable[[], object] | None:
    """A function running ``op`` alone on ``ins`` as the compiled program would, or None."""
    role, kind = op.primitive.role, op.primitive.kind
    if (op.device or "").startswith("cuda"):
        return None
    if role == "kernel":
        return _kernel_timer(op, ins)
    if role == "matrix_product":
        out = np.empty(op.results[0].type.shape, op.results[0].type.dtype.np)
        return lambda: np.matmul(ins[0], ins[1], out=out)
    if kind in ("control", "transfer"):
        return None
    return lambda: run_op(op, ins)
