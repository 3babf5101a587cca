"""``CudaExecutable``: a lowered program run on one CUDA device, and what a CUDA device can run.

The placement pass asks ``feasible(op)`` (or ``why_not(op)`` for the reason) whether an
op may be placed on a CUDA device; a partition placed there, once fused and lowered by the
runtime (``flowjit.lowering.backend.lower_program``, fusible ops outside fusions as
kernels of their own), becomes a ``CudaExecutable`` that runs its top-level ops in order:
fusion ops as kernels rendered from their loop IR (``compile.py``), library calls
(``LIBRARY_CALLS``, by role: matmul) through ``memory``, constants uploaded once, any
single elementwise/layout/reduction op left outside a fusion (a transpose that feeds a
matmul) as a one-op kernel, and the partition pass's ``send`` and ``recv`` through the
step's rendezvous (a received value is copied to this device). Inputs may be NumPy arrays
(copied to the device explicitly) or device arrays; outputs stay on the device.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from flowjit.codegen_cuda import memory
from flowjit.codegen_cuda.compile import CudaKernel, compile_kernel, static_reason
from flowjit.codegen_cuda.launch_plan import LAYOUT_ROLES, UnsupportedOp
from flowjit.codegen_cuda.writer import PRELUDE
from flowjit.ir.core import Op
from flowjit.ir.errors import FlowjitError, FlowjitTypeError
from flowjit.lowering import print_kernel
from flowjit.lowering.backend import LoweredProgram

# The roles of opaque primitives this backend has an implementation of: a library call
# (cuBLAS through cupy) or a hand-written kernel. Opaque means "no scalar template", so
# whether a backend can run one is the backend's own fact, kept here rather than in the
# registry; what the op computes is the registry's (its role), so a new primitive of the
# same role runs here with no change.
LIBRARY_CALLS: dict[str, Callable[..., Any]] = {"matrix_product": memory.matmul}


# The partition pass's cross-device edges: run through the primitives' own references
# (the step's rendezvous), a received value then copied into this device's memory.
TRANSFER_ROLES = ("send", "recv")


class CudaUnsupportedError(FlowjitError):
    """An op of a Function handed to the CUDA backend that it cannot run."""


def why_not(op: Op) -> str | None:
    """Why ``op`` cannot run on a CUDA device (None: it can), from the registry's
    declared properties: its kind, role, template and reducer, and its dtypes. Fusion ops
    can when their block compiles (``compile.supported``); opaque ops when the
    backend has a library call for them; random, stateful and control-flow ops never do
    (they run on the host)."""
    prim = op.primitive
    if prim.role in TRANSFER_ROLES:
        return None  # a copy between memories: any dtype, any shape
    values = [*op.inputs, *op.results]
    if any(v.type.dtype.name == "float16" for v in values):
        return "float16 is not compiled by the CUDA backend"
    if prim.role == "kernel":
        # A block the generator cannot launch as one kernel still runs, op by op (see
        # CudaExecutable): it can run when each of its ops can.
        reason = static_reason(op.blocks[0])
        if reason is None:
            return None
        inner = next((r for r in map(why_not, op.blocks[0].ops) if r is not None), None)
        return None if inner is None else reason
    if any(v.type.size == 0 for v in values):
        return "an empty array"
    if op.blocks:
        return f"{prim.name} ({prim.kind}) owns blocks: control flow runs on the host"
    if prim.kind == "constant":
        return None
    if prim.kind == "elementwise":
        return None if prim.template is not None or prim.role == "convert" else f"{prim.name} has no scalar template"
    if prim.kind == "layout":
        return None if prim.role in LAYOUT_ROLES else f"{prim.name} has no index rule (role {prim.role})"
    if prim.kind == "reduction":
        return None if prim.reducer is not None else f"{prim.name} declares no reducer"
    if prim.kind == "opaque":
        return None if prim.role in LIBRARY_CALLS else f"the CUDA backend has no kernel for {prim.name}"
    return f"{prim.kind} ops run on the host"


def feasible(op: Op) -> bool:
    """Whether ``op`` can run on a CUDA device (``why_not(op) is None``)."""
    return why_not(op) is None


def _describe(op: Op) -> str:
    types = ", ".join(str(v.type) for v in op.inputs)
    where = f" at {op.loc}" if op.loc is not None else ""
    return f"{op.name}({types}) [{op.primitive.kind}]{where}"


class CudaExecutable:
    """``function`` (fused, its ops placed on ``device``, e.g. ``"cuda:0"``) ready to run.

    Construction generates and loads every kernel (numba compiles each at its first
    launch) and raises CudaUnsupportedError naming the op, its primitive and the device
    for any op the backend cannot run. A fusion block the generator cannot compile as one
    kernel runs op by op (``unfused`` says which and why). ``run(*arrays)`` returns
    device arrays.
    """

    def __init__(self, program: LoweredProgram, device: str):
        function = program.function
        self.function = function
        self.device = device
        self.index = memory.device_index(device)
        self.kernels: dict[int, CudaKernel | CudaExecutable] = {}
        self._constants: dict[int, Any] = {}  # op id -> the constant's device array, once uploaded
        self.unfused: dict[str, str] = {}  # fusion name -> why its ops run one kernel each
        for op in function.body.ops:
            reason = why_not(op)
            if reason is not None:
                raise CudaUnsupportedError(f"{_describe(op)} cannot run on {device}: {reason}")
            kernel = program.kernels.get(op.id)
            in_types, out_types = [v.type for v in op.inputs], [r.type for r in op.results]
            if op.primitive.role == "kernel":
                name, lines = op.attrs.get("name", op.name), op.attrs.get("lines", "")
                reason = static_reason(op.blocks[0]) or program.refused.get(name)
                if reason is None:
                    try:
                        self.kernels[op.id] = compile_kernel(kernel, name, in_types, out_types, lines)
                    except UnsupportedOp as e:
                        reason = str(e)
                if reason is not None:
                    # The renderer cannot launch this block as one kernel (e.g. more
                    # parameters than CUDA allows): its ops run one kernel each.
                    self.unfused[name] = reason
                    self.kernels[op.id] = CudaExecutable(program.op_by_op(op), device)
            elif kernel is not None:
                self.kernels[op.id] = compile_kernel(kernel, op.name, in_types, out_types,
                                                     str(op.loc) if op.loc is not None else "")

    def _inputs(self, arrays: Sequence[Any]) -> list[Any]:
        args = self.function.args
        if len(arrays) != len(args):
            raise FlowjitTypeError(f"@{self.function.name} takes {len(args)} arguments, got {len(arrays)}")
        out = []
        for a, x in zip(args, arrays):
            if not memory.is_device_array(x):
                x = memory.to_device(np.asarray(x).astype(a.type.dtype.np, copy=False), self.index)
            if tuple(x.shape) != a.type.shape or np.dtype(x.dtype) != a.type.dtype.np:
                raise FlowjitTypeError(f"@{self.function.name}: argument %{a.name} must be {a.type}, "
                                       f"got {np.dtype(x.dtype)}{list(x.shape)}")
            out.append(x)
        return out

    def run(self, *arrays: Any) -> list[Any]:
        """Run on ``arrays`` (NumPy arrays, copied to the device, or device arrays of the
        argument types); return the results as device arrays. A result that is an
        argument or a constant is a copy, so the caller may write into what it gets."""
        with memory.on_device(self.index):
            env: dict[int, Any] = {a.id: x for a, x in zip(self.function.args, self._inputs(arrays))}
            self._run_ops(env)
            made = {r.id for op in self.function.body.ops if op.primitive.kind != "constant" for r in op.results}
            return [env[v.id] if v.id in made else memory.copy(env[v.id]) for v in self.function.returns]

    def _run_ops(self, env: dict[int, Any]) -> None:
        # The op being run is this frame's `op`: failing_op reads it from the traceback.
        for op in self.function.body.ops:
            ins = [env[v.id] for v in op.inputs]
            kernel = self.kernels.get(op.id)
            role = op.primitive.role
            if isinstance(kernel, CudaExecutable):
                outs = kernel.run(*ins)
            elif kernel is not None:
                outs = kernel(*ins)
            elif op.primitive.kind == "constant":
                outs = [self._constant(op)]
            elif role == "send":  # hands the device array over; the receiver copies it
                outs = op.primitive.impl(*ins, **op.attrs)
            elif role == "recv":  # the reference gives host memory: copy it here
                outs = [memory.to_device(op.primitive.impl(**op.attrs), self.index)]
            else:
                outs = [LIBRARY_CALLS[role](*ins)]
            for r, x in zip(op.results, outs):
                env[r.id] = x

    def failing_op(self, error: BaseException) -> Op | None:
        """The op of this program that the ``run`` raising ``error`` failed in (None when
        ``error`` did not come from one of its ops), for messages. Read from the error's
        traceback, so concurrent runs of one executable each name their own op."""
        tb = error.__traceback__
        while tb is not None:
            frame = tb.tb_frame
            if frame.f_code is CudaExecutable._run_ops.__code__ and frame.f_locals.get("self") is self:
                return frame.f_locals.get("op")
            tb = tb.tb_next
        return None

    def kernel_listing(self) -> str:
        """The loop IR and the generated source of every kernel (prelude left out), as
        ``flowjit ir --stage kernels`` prints it."""
        parts = []
        for op in self.function.body.ops:
            k = self.kernels.get(op.id)
            if isinstance(k, CudaExecutable):
                name = op.attrs.get("name", op.name)
                parts.append(f"# CUDA kernel {name}: one kernel per op ({self.unfused[name]})\n{k.kernel_listing()}")
            elif k is not None:
                lines = op.attrs.get("lines", "") if op.primitive.role == "kernel" else ""
                loops = "".join(f"#   {line}\n" for line in print_kernel(k.kernel).splitlines())
                parts.append(f"# CUDA kernel {k.name} ({lines}), {k.path}\n# its loop IR:\n{loops}"
                             f"{k.source[len(PRELUDE):].strip()}\n")
        return "\n".join(parts)

    def _constant(self, op: Op) -> Any:
        x = self._constants.get(op.id)
        if x is None:
            x = memory.to_device(op.attrs["value"].array, self.index)
            self._constants[op.id] = x
        return x

    def __call__(self, args: Sequence[Any]) -> list[Any]:
        """``run`` on a sequence of arguments (the CPU ``Executable``'s calling form)."""
        return self.run(*args)

    # The runtime's calling form of a compiled program (flowjit.lowering.backend.Program).
    def call_list(self, *arrays: Any) -> list[Any]:
        """``run``: the results as device arrays, in order."""
        return self.run(*arrays)

    def call_one(self, *arrays: Any) -> Any:
        """The one result of a one-result program."""
        return self.run(*arrays)[0]

    def describe(self) -> str:
        """Every kernel's loop IR and generated source (``kernel_listing``)."""
        return self.kernel_listing()

    def hot(self) -> None:
        """The second call has returned: nothing to finish (its kernels are compiled once)."""
