"""Sines and cosines of a loop whose arguments are all in the medium range: one reduction.

``intrinsics``' sine and cosine compute both argument reductions for every element, fdlibm's
medium one and Payne and Hanek's, and a select keeps one: branch-free, so a loop holding a
sine vectorizes. Most programs never pass the medium bound (2**20 pi/2: a RoPE table's
angles, a phase, an angle from a uniform draw), and there the large reduction is half of a
float32 sine's time and, in float64, a gather from the table of 1/(2 pi)'s bits. So the loop
is versioned, as ``invariant_division`` versions a loop's divisions: a first pass over the
loop's sine and cosine arguments (recomputed: only arguments built of loads and the
vocabulary's cheap operations qualify) takes the largest magnitude's bits, and when every
argument is at most the bound (NaN and the infinities are not: their bits are above it) the
loop runs with the medium reduction alone (``intrinsics.function(..., medium=True)``: the
same bits there), else as written. The check pass only reads, so the loop's stores happen
once, in whichever version runs.

Measured on the Xeon machine (2026-12-03, fresh processes alternated): a RoPE table,
``concatenate([cos(a), sin(a)], -1)`` of 8192x64 float32 angles, 1.6-2.1 -> 0.8-0.9 ms.
"""

from __future__ import annotations

import numpy as np

from flowjit.codegen_cpu.intrinsics import MEDIUM
from flowjit.codegen_cpu.invariant_division import recomputable, written_out
from flowjit.ir.dtypes import DType, float32, float64
from flowjit.lowering.loops import Let, Loop, Prim, Store, Update, expressions

# The medium reduction's bound (fdlibm's 2**20 pi/2 truncated): the bits of its magnitude in
# each dtype, which the largest argument's bits must not pass (float16 sines, computed in
# float32, are not versioned: their loop's fast version keeps both reductions for them).
MEDIUM_BITS = {float32: int(np.float32(MEDIUM).view(np.uint32)), float64: int(np.float64(MEDIUM).view(np.uint64))}
OPS = ("sin", "cos")
MAX_ARGUMENT_NODES = 8


def arguments(loop: Loop) -> tuple[tuple, ...]:
    """``(argument, dtype)`` of each float32 or float64 sine and cosine of innermost ``loop``
    (the argument with the loop's ``Let`` names written out), when every one of them is cheap
    to compute twice; empty when one is not, when the loop nests another or branches, or
    has none."""
    if not all(isinstance(s, (Let, Store, Update)) for s in loop.body):
        return ()
    lets = {s.name: s.value for s in loop.body if isinstance(s, Let)}
    found: dict = {}
    for e in expressions(loop.body):
        if not (isinstance(e, Prim) and e.op in OPS and e.dtype in MEDIUM_BITS):
            continue
        arg = written_out(e.args[0], lets, [MAX_ARGUMENT_NODES])
        if arg is None or not recomputable(arg):
            return ()     # that sine keeps both reductions: no version without it
        found[(arg, e.dtype)] = None
    return tuple(found)


def magnitude_mask(d: DType) -> int:
    """The bits of a float of dtype ``d`` below its sign bit."""
    return (1 << (8 * d.itemsize - 1)) - 1


__all__ = ["MEDIUM", "MEDIUM_BITS", "OPS", "arguments", "magnitude_mask"]
