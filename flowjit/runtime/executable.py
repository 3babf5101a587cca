"""``Executable``: a Function prepared to run, and the one place that runs programs.

``compile_function`` runs the pass pipeline (unless asked to interpret the traced program
as it is) and prepares the result. Until the CPU code generator lands, the optimized and
fused program runs on the reference interpreter (a fusion op runs its block). Results
never alias the caller's arguments or the program's constants, so a caller may mutate
what it gets back.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from flowjit.ir.core import Function
from flowjit.ir.interpreter import run_block, run_op
from flowjit.passes.pipeline import DEFAULT_PIPELINE, Pipeline, PipelineResult
from flowjit.runtime.buffers import POOL

# What ``.ir(stage=...)`` and ``flowjit ir --stage`` can show.
STAGES = ("traced", *DEFAULT_PIPELINE.names, "fused")


BACKENDS = ("interpreter", "numba")


class Executable:
    """A program ready to run on ``device`` with ``backend``; call it with a list of arrays.

    With the ``numba`` backend each fusion op runs as a compiled kernel (compiled on the
    first call); a kernel the generator cannot compile (``fallbacks`` says why) and every
    other op run their NumPy reference, so matmul goes to NumPy's BLAS.
    """

    def __init__(self, function: Function, backend: str = "interpreter", device: str = "cpu:0",
                 pipeline: PipelineResult | None = None):
        if backend not in BACKENDS:
            raise ValueError(f"unknown backend {backend!r}; available: {', '.join(BACKENDS)}")
        self.function = function
        self.backend = backend
        self.device = device
        self.pipeline = pipeline
        self._dtypes = [a.type.dtype.np for a in function.args]
        self.kernels: dict[int, object] = {}
        self.fallbacks: dict[str, str] = {}
        self._warmed: set[int] = set()
        if backend == "numba":
            self._compile_kernels()

    def _compile_kernels(self) -> None:
        from flowjit.codegen_cpu import compile_kernel
        from flowjit.codegen_cpu.kernel_source import UnsupportedOp
        for op in self.function.body.ops:
            if op.primitive.role == "kernel":
                try:
                    self.kernels[op.id] = compile_kernel(op.blocks[0], op.attrs.get("name", op.name))
                except UnsupportedOp as e:
                    self.fallbacks[op.attrs.get("name", op.name)] = str(e)

    def _run_compiled(self, arrays: list[np.ndarray]) -> list[np.ndarray]:
        from flowjit.codegen_cpu.compile import warm
        env = {a.id: x for a, x in zip(self.function.args, arrays)}
        for op in self.function.body.ops:
            ins = [env[v.id] for v in op.inputs]
            kernel = self.kernels.get(op.id)
            if kernel is not None:
                if op.id not in self._warmed:
                    warm(kernel, ins, f"{op.attrs['name']} from {op.attrs['lines']}")
                    self._warmed.add(op.id)
                outs = kernel(*ins, alloc=POOL.empty)
            else:
                outs = run_op(op, ins)
            for r, x in zip(op.results, outs):
                env[r.id] = x
        return [env[v.id] for v in self.function.returns]

    def __call__(self, args: Sequence[object]) -> list[np.ndarray]:
        arrays = [np.asarray(a).astype(d, copy=False) for a, d in zip(args, self._dtypes)]
        if self.backend == "numba":
            out = self._run_compiled(arrays)
        else:
            out = run_block(self.function.body, arrays)
        # A result that is (a view of) an argument or a constant is copied first.
        return [np.array(x) if not x.flags.writeable or any(np.may_share_memory(x, a) for a in arrays) else x
                for x in out]


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
          pipeline: Pipeline = DEFAULT_PIPELINE) -> Function:
    """``function`` after pipeline ``stage`` (a pass name, or ``traced``/``fused``)."""
    if stage == "traced":
        return function
    stop = "fusion" if stage == "fused" else stage
    return pipeline.run(function, disable=disabled_passes(passes, pipeline), stop_after=stop).function


def compile_function(function: Function, interpret: bool = False, device: str = "cpu:0",
                     passes: Mapping[str, bool] | Iterable[str] | None = None,
                     pipeline: Pipeline = DEFAULT_PIPELINE, backend: str | None = None) -> Executable:
    """Prepare ``function`` to run: the traced program as it is when ``interpret`` (the
    unfused debug mode), else the output of the pass pipeline on ``backend`` (default
    ``FLOWJIT_BACKEND`` or the interpreter; ``numba`` compiles the fused kernels)."""
    if interpret:
        return Executable(function, "interpreter", device)
    result = pipeline.run(function, disable=disabled_passes(passes, pipeline))
    chosen = backend or os.environ.get("FLOWJIT_BACKEND") or "interpreter"
    return Executable(result.function, chosen, device, result)
