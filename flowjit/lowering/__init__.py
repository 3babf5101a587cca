"""The loop-level IR between fusion and machine code.

Each ``fusion`` block becomes a ``Kernel``: loop nests whose bounds are size variables read
from the buffers' shapes at run time, loads and stores with per-dimension index
expressions, reductions with explicit accumulators, and scalar expressions over one
vocabulary (``scalar``). Renderers (LLVM, CUDA) turn a Kernel into code; ``evaluate`` runs
one in NumPy as the oracle that tests the lowering before any renderer exists.
"""

from flowjit.lowering.evaluate import evaluate
from flowjit.lowering.listing import LoopProgram, loop_program
from flowjit.lowering.loops import Kernel
from flowjit.lowering.lower import Unsupported, lower_block
from flowjit.lowering.printer import print_kernel
from flowjit.lowering.verify import LoopIRError, verify_kernel

__all__ = ["Kernel", "LoopIRError", "LoopProgram", "Unsupported", "evaluate", "loop_program", "lower_block",
           "print_kernel", "verify_kernel"]
