"""The one interface below fusion: what the runtime hands a device's code generator.

The runtime lowers every fusion op of a fused program to loop IR once (``lower_program``),
its control ops' blocks included, and hands the result, a ``LoweredProgram``, to the
backend of the device the program runs on. A backend (``flowjit.codegen_cpu.backend``,
``flowjit.codegen_cuda.backend``) implements ``Backend``: which ops its device can run
(``why_not``, asked by placement), one kernel compiled (``compile_kernel``, for a driver
that calls kernels one by one), and the whole program compiled (``compile_program``),
returning a ``Program`` the runtime calls, or raising ``NoProgram`` saying why the program
has no whole-program form on that device (then the runtime's driver calls the kernels).

Nothing here knows a target: adding a backend is a module implementing ``Backend`` and one
entry in the runtime's table of backends by device kind.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from flowjit.ir.core import Block, Function, Op, Value
from flowjit.ir.errors import BUG_REPORT, KernelCompileError
from flowjit.ir.types import TensorType
from flowjit.lowering.loops import Kernel
from flowjit.lowering.lower import OWN_KERNEL_ROLES, Unsupported, lower_block

# Op kinds a kernel computes: a fusible op left outside every fusion (a transpose that only
# a matmul reads) lowers as a kernel of its own when a backend asks for single ops.
FUSIBLE_KINDS = ("elementwise", "layout", "reduction")


class NoProgram(Exception):
    """A program with no whole-program form on a backend; the message says which op or
    value stops it (``explain`` and ``fj.function(...).kernels`` show it)."""


@dataclass
class LoweredProgram:
    """A fused Function ready for a backend: ``kernels`` maps the id of each op lowered to
    loop IR (every fusion op the lowering can express; with ``single_ops``, fusible ops
    outside fusions too) to its Kernel, ``refused`` names each fusion op the lowering could
    not express and why (its ops run their NumPy references), and ``blocks`` maps each
    control op's id to its blocks, lowered alike. ``op_by_op(op)`` lowers a fusion op's
    block op by op, for a backend that cannot launch the fused kernel (CUDA's parameter
    limit), once, when first asked."""

    function: Function
    kernels: dict[int, Kernel] = field(default_factory=dict)
    refused: dict[str, str] = field(default_factory=dict)
    blocks: dict[int, list[LoweredProgram]] = field(default_factory=dict)
    unfused: dict[int, LoweredProgram] = field(default_factory=dict)
    taken: set[str] = field(default_factory=set)
    flat_indices: bool = False

    def op_by_op(self, op: Op) -> LoweredProgram:
        """Fusion op ``op``'s block as a program of its own whose fusible ops are each a
        kernel (symbols unique with this program's)."""
        if op.id not in self.unfused:
            name = op.attrs.get("name", op.name)
            block = Function(f"{self.function.name}.{name}", op.blocks[0]).clone()
            self.unfused[op.id] = lower_program(block, single_ops=True, taken=self.taken,
                                                flat_indices=self.flat_indices)
        return self.unfused[op.id]


def kernel_symbol(name: str, taken: set[str]) -> str:
    """A C identifier for kernel ``name`` unique among ``taken`` (which it joins): the
    kernels of one program link into one module."""
    symbol = "".join(c if c.isalnum() else "_" for c in name)[:48]
    unique, n = symbol, 1
    while unique in taken:
        n += 1
        unique = f"{symbol}_{n}"
    taken.add(unique)
    return unique


def single_op_block(op: Op) -> Block:
    """A block holding a copy of ``op`` alone, its inputs the block's arguments: how a
    fusible op outside any fusion is lowered as a kernel."""
    block = Block([Value(v.type, name=v.name) for v in op.inputs])
    copy = Op(op.primitive, list(block.args), op.attrs, [r.type for r in op.results], op.device, op.loc)
    block.append(copy)
    block.set_returns(list(copy.results))
    return block


def lower_fusion(block: Block, name: str, lines: str, symbol: str, collapse: bool = False) -> Kernel:
    """Fusion block ``block`` (the op named ``name``, from the user's ``lines``) as a kernel
    called ``symbol``. ``Unsupported`` when the loop IR cannot express it (its ops then run
    their references); any other failure is flowjit's bug, raised as KernelCompileError
    naming the kernel, its ops and the lines. ``collapse``: as ``lower_block``'s."""
    try:
        return lower_block(block, symbol, collapse)
    except Unsupported:
        raise
    except Exception as e:
        ops = ", ".join(op.name for op in block.ops)
        where = f" from {lines}" if lines else ""
        raise KernelCompileError(f"kernel {name}{where} (ops {ops}) failed to lower to loop IR: "
                                 f"{type(e).__name__}: {e}; {BUG_REPORT}") from e


def lower_program(function: Function, single_ops: bool = False, taken: set[str] | None = None,
                  flat_indices: bool = False) -> LoweredProgram:
    """``function``'s top-level fusion ops lowered to loop IR (each once, symbols unique in
    the program), and fusible ops outside fusions too when ``single_ops``. Control ops'
    blocks are not lowered here: the runtime compiles each block as a program of its own and
    fills ``blocks`` with their LoweredPrograms. ``flat_indices``: the backend's
    (``Backend.flat_indices``), whether nests may be collapsed (``lower_block``)."""
    taken = set() if taken is None else taken
    lowered = LoweredProgram(function, taken=taken, flat_indices=flat_indices)
    for op in function.body.ops:
        if op.primitive.role == "kernel":
            name = op.attrs.get("name", op.name)
            try:
                lowered.kernels[op.id] = lower_fusion(op.blocks[0], name, op.attrs.get("lines", ""),
                                                      kernel_symbol(name, taken), flat_indices)
            except Unsupported as e:
                lowered.refused[name] = str(e)
        elif ((single_ops and op.primitive.kind in FUSIBLE_KINDS) or op.primitive.role in OWN_KERNEL_ROLES) \
                and not op.blocks:
            try:
                lowered.kernels[op.id] = lower_fusion(single_op_block(op), op.name,
                                                      str(op.loc) if op.loc is not None else "",
                                                      kernel_symbol(op.name, taken), flat_indices)
            except Unsupported as e:
                lowered.refused[op.name] = str(e)
    return lowered


class Program(Protocol):
    """A whole program compiled for one device: ``call_list(*arrays)`` runs it and returns
    its results in order; ``describe()`` is what ``flowjit ir --stage kernels`` prints;
    ``hot()`` is called once its second call has returned (the CPU backend then makes its
    full code on another thread: codegen_cpu.jit's tiers)."""

    def call_list(self, *arrays: Any) -> list[Any]: ...

    def describe(self) -> str: ...

    def hot(self) -> None: ...


class Backend(Protocol):
    """A device kind's code generator, as the runtime uses it."""

    kind: str             # the device kind it compiles for: "cpu", "cuda"
    single_ops: bool      # whether fusible ops outside fusions are handed to it as kernels
    host_driver: bool     # whether the runtime's host driver may call its kernels one by one
    flat_indices: bool    # whether its kernels read a buffer by its row-major offset alone (lower_block)

    def why_not(self, op: Op) -> str | None:
        """Why ``op`` cannot run on this backend's devices (None: it can)."""
        ...

    def compile_kernel(self, kernel: Kernel, in_types: list[TensorType], out_types: list[TensorType], *,
                       fastmath: bool = False) -> Any:
        """One loop-IR kernel compiled for arrays of ``in_types`` and ``out_types``. A
        ``host_driver`` backend returns an object called as ``(inputs, outputs)`` whose
        ``entry(shapes, parallel)`` is its C entry (or None: call the object)."""
        ...

    def compile_program(self, program: LoweredProgram, device: str, *, fastmath: bool = False,
                        parallel: bool = True, pool_empty: Callable[..., Any] | None = None,
                        pool_min_bytes: int = 1 << 20, profile: bool = False) -> Program:
        """``program`` compiled as one whole program for ``device``; ``NoProgram`` when it
        has no such form here. ``pool_empty(shape, dtype)``: the runtime's allocator for
        host results from ``pool_min_bytes``; ``profile``: a build that times its steps
        (``profiled_steps()`` after a call), where the backend can."""
        ...
