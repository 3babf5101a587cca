"""Every kernel of a fused program as loop IR: what ``flowjit ir --stage loops`` prints."""

from __future__ import annotations

import re

from flowjit.ir.core import Block, Function
from flowjit.ir.records import compile_records, record
from flowjit.lowering.loops import Kernel
from flowjit.lowering.lower import Unsupported, lower_block
from flowjit.lowering.printer import print_kernel
from flowjit.lowering.verify import verify_kernel


@record
class LoopProgram:
    """The kernels of a fused Function, in program order (nested blocks included): each
    a (fusion op name, user lines, Kernel or the reason it has none)."""

    name: str
    kernels: tuple

    def __str__(self) -> str:
        out = [f"# loops of @{self.name}: {len(self.kernels)} kernel(s)"]
        for name, lines, kernel in self.kernels:
            out.append("")
            out.append(f"# {name}" + (f" ({lines})" if lines else ""))
            out.append(print_kernel(kernel).rstrip("\n") if isinstance(kernel, Kernel)
                       else f"# not lowered: {kernel}")
        return "\n".join(out) + "\n"


compile_records()


def loop_program(fn: Function) -> LoopProgram:
    """Lower and verify every ``fusion`` op's block of the fused ``fn`` as the CPU compiles
    it (nests collapsed, ``lower_block``; an op the loop IR cannot express yet is listed
    with the reason instead)."""
    kernels: list = []

    def walk(block: Block) -> None:
        for op in block.ops:
            if op.primitive.role == "kernel":
                name = op.attrs["name"]
                try:
                    kernel = lower_block(op.blocks[0], _identifier(name, len(kernels)), collapse=True)
                    verify_kernel(kernel)
                except Unsupported as e:
                    kernel = str(e)
                kernels.append((name, op.attrs.get("lines", ""), kernel))
                continue
            for b in op.blocks:
                walk(b)

    walk(fn.body)
    return LoopProgram(fn.name, tuple(kernels))


def _identifier(name: str, k: int) -> str:
    return f"k{k}_" + re.sub(r"\W+", "_", name)[:48]
