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

An argument within the bound by its own last operations needs no check (``bounded``: an
interval evaluation following integer types' ranges through casts, shifts, ors and ands,
then products and sums with constants): a normal draw's ``2 pi * f64(53 random bits) *
2**-53`` takes the medium form unversioned.

Measured on the Xeon machine (2026-12-03, fresh processes alternated): a RoPE table,
``concatenate([cos(a), sin(a)], -1)`` of 8192x64 float32 angles, 1.6-2.1 -> 0.68-0.73 ms;
2**20 float32 normal draws 6.2-6.8 -> 3.2-3.3 ms.
"""

from __future__ import annotations

import numpy as np

from flowjit.codegen_cpu.intrinsics import MEDIUM
from flowjit.codegen_cpu.invariant_division import recomputable, written_out
from flowjit.ir.dtypes import DType, float32, float64
from flowjit.lowering.loops import Const, Let, Loop, Prim, Store, Update, Var, expressions, walk_statements

# The medium reduction's bound (fdlibm's 2**20 pi/2 truncated): the bits of its magnitude in
# each dtype, which the largest argument's bits must not pass (float16 sines, computed in
# float32, are not versioned: their loop's fast version keeps both reductions for them).
MEDIUM_BITS = {float32: int(np.float32(MEDIUM).view(np.uint32)), float64: int(np.float64(MEDIUM).view(np.uint64))}
OPS = ("sin", "cos")
MAX_ARGUMENT_NODES = 8
# The shortest loop versioned when it runs once over a constant count known when it is
# rendered: below it the full reductions cost less than the check pass and the second copy
# of the loop cost LLVM to compile (~2 ms of a cold call a loop).
MIN_TRIPS = 256
# How deep ``bounded`` follows an argument's operations (a normal draw's angle is five
# operations past the cipher's bits), and the margin it keeps below the bound (the interval
# is computed in Python floats, each float operation of the kernel rounding once more).
MAX_BOUND_DEPTH = 12
BOUND_MARGIN = 0.5


def kernel_lets(body: tuple) -> dict:
    """Each ``Let`` name of ``body`` (nested statements included) bound once, to its value:
    what ``bounded`` follows an argument's names through."""
    lets: dict = {}
    twice: set = set()
    for st in walk_statements(body):
        if isinstance(st, Let) and st.name in lets:
            twice.add(st.name)
        elif isinstance(st, Let):
            lets[st.name] = st.value
    for name in twice:
        lets.pop(name, None)
    return lets


_MANTISSA_BITS = {2: 11, 4: 24, 8: 53}


def _full_range(d: DType) -> tuple[float, float] | None:
    if d.is_bool:
        return 0.0, 1.0
    if d.is_int:
        bits = 8 * d.itemsize
        return (0.0, 2.0 ** bits - 1) if d.is_unsigned else (-(2.0 ** (bits - 1)), 2.0 ** (bits - 1) - 1)
    return None


def _interval(e, lets: dict, depth: int) -> tuple[float, float] | None:
    """An interval holding every value of ``e`` (integers as floats, exactly below 2**53 and
    rounded outward past it only through the margin), or None: an integer's type's range
    when nothing better is known, a float's only through operations on such ranges and
    constants (a loaded float may be anything, a NaN included)."""
    d = e.dtype
    full = _full_range(d)
    if isinstance(e, Const):
        v = float(e.value)
        return (v, v) if np.isfinite(v) else None
    if isinstance(e, Var) and e.name in lets and depth > 0:
        return _interval(lets[e.name], lets, depth - 1) or full
    if not isinstance(e, Prim) or depth <= 0:
        return full
    args = [_interval(a, lets, depth - 1) for a in e.args]
    got = _prim_interval(e, args)
    if got is None:
        return full
    if full is not None and (got[0] < full[0] or got[1] > full[1]):
        return full       # an integer operation that may wrap: anything in its type
    if d.is_inexact:      # the kernel rounds the result: an ulp of the largest bound outward
        ulp = max(abs(got[0]), abs(got[1])) * 2.0 ** (1 - _MANTISSA_BITS[d.itemsize]) + 2.0 ** -1000
        return got[0] - ulp, got[1] + ulp
    return got


def _prim_interval(e: Prim, args: list) -> tuple[float, float] | None:
    op, d = e.op, e.dtype
    if any(a is None for a in args):
        return None
    if op == "cast":
        # an integer's value, or a float widened; a float made an integer or narrowed: unknown
        src = e.args[0].dtype
        return args[0] if src.is_int or src.is_bool or (d.is_inexact and d.itemsize >= src.itemsize) else None
    if op in ("add", "sub", "mul", "min", "max"):
        (a0, a1), (b0, b1) = args
        if op == "add":
            return a0 + b0, a1 + b1
        if op == "sub":
            return a0 - b1, a1 - b0
        if op == "min":
            return min(a0, b0), min(a1, b1)
        if op == "max":
            return max(a0, b0), max(a1, b1)
        ps = (a0 * b0, a0 * b1, a1 * b0, a1 * b1)
        return min(ps), max(ps)
    if op == "neg":
        return -args[0][1], -args[0][0]
    if op == "fabs":
        lo, hi = args[0]
        return (0.0 if lo <= 0 <= hi else min(abs(lo), abs(hi))), max(abs(lo), abs(hi))
    if op == "select":
        return min(args[1][0], args[2][0]), max(args[1][1], args[2][1])
    if not (d.is_int and d.is_unsigned) or any(lo < 0 for lo, _ in args):
        return None
    if op in ("shl", "shr"):
        c = int(e.args[1].value) if isinstance(e.args[1], Const) else -1
        if not 0 <= c < 8 * d.itemsize:
            return None
        lo, hi = args[0]
        return (lo * 2.0 ** c, hi * 2.0 ** c) if op == "shl" else (float(int(lo) >> c), float(int(hi) >> c))
    top = 2.0 ** max(int(hi).bit_length() for _, hi in args) - 1
    if op == "or":
        return max(lo for lo, _ in args), top
    if op == "and":
        return 0.0, min(hi for _, hi in args)
    if op == "xor":
        return 0.0, top
    return None


def bounded(e, lets: dict) -> bool:
    """Whether argument ``e`` is within the medium bound by the operations it is computed
    with alone (``_interval``: a normal draw's ``2 pi * f64(bits) * 2**-53``), so its sine
    takes the medium reduction with no check."""
    got = _interval(e, lets, MAX_BOUND_DEPTH)
    return got is not None and max(abs(got[0]), abs(got[1])) <= BOUND_MARGIN * MEDIUM


def arguments(loop: Loop, lets: dict | None = None) -> tuple[tuple, ...]:
    """``(argument, dtype)`` of each float32 or float64 sine and cosine of innermost ``loop``
    (the argument with the loop's ``Let`` names written out), when every one of them is cheap
    to compute twice; empty when one is not, when the loop nests another or branches, or
    has none. A sine whose argument is ``bounded`` (following the kernel's ``lets``) needs
    no check and is left out."""
    if not all(isinstance(s, (Let, Store, Update)) for s in loop.body):
        return ()
    known = lets or {}
    lets = {s.name: s.value for s in loop.body if isinstance(s, Let)}
    found: dict = {}
    for e in expressions(loop.body):
        if not (isinstance(e, Prim) and e.op in OPS and e.dtype in MEDIUM_BITS) or bounded(e.args[0], known):
            continue
        arg = written_out(e.args[0], lets, [MAX_ARGUMENT_NODES])
        if arg is None or not recomputable(arg):
            return ()     # that sine keeps both reductions: no version without it
        found[(arg, e.dtype)] = None
    return tuple(found)


__all__ = ["MEDIUM", "MEDIUM_BITS", "OPS", "arguments", "bounded", "kernel_lets"]
