"""Division by a loop-invariant divisor without the divider, still correctly rounded.

A row's normalisation (softmax's ``e / e.sum()``, a batch norm's ``(x - mean) / std``)
divides every element of an innermost loop by one value. ``vdivps`` is slow: on the
project's AVX-512 Xeon it was half of softmax's time (4096x1024 float32, one thread, the row
in cache: 489 ns a row, 324 with no division at all). LLVM may not turn the division into a
product by the reciprocal, which is not IEEE division (an ulp off now and then). Markstein's
correction is: with ``y = 1/s`` correctly rounded (one division, outside the loop),
``q = a*y``, ``r = fma(-q, s, a)`` (exact) and ``q' = fma(r, y, q)``, ``q'`` is ``a/s``
correctly rounded (Markstein 1990; Muller et al., Handbook of Floating-Point Arithmetic,
thm. 5.7) as long as nothing overflows or underflows: ``r`` exact needs ``a`` well above the
subnormals and ``q'`` must be a normal number. So the loop is versioned: a first pass over
the loop's dividends (recomputed: only dividends built of loads and the vocabulary's cheap
operations, ``scalar.CHEAP``, qualify) checks that each is zero or within ``WINDOW``
binades of 1 and finite, and that the divisor is within them too and positive; then the
loop runs with Markstein's three operations, written so that a zero dividend keeps its sign
over a positive divisor with no select (``emit._Renderer.markstein``), else as written.
Measured there (the same rows, two threads, with ``row_prefetch``): softmax 1.07 -> 0.79
ms, the check costing 0.03-0.05.

Only a loop of at most ``MAX_TRIPS`` iterations (a row: its dividends stay in the cache
between the two passes) is checked; a longer one runs as written, and so does one that
runs once in its kernel (no loop around it) over a constant count: known when it is
rendered (a kernel rendered at its dims), or once LLVM has inlined the kernel at its shape
(the check asks ``llvm.is.constant`` of the count, which folds there). Such a loop would
save a few microseconds of divisions a call (at most MAX_TRIPS of them), where the check
pass and the second copy cost LLVM milliseconds of a cold call (an embedding bag's mean
over its 256x64 cells: the zoo's cold inference 53 -> 58-61 ms versioned, its steady time
the same). A divisor
qualifies when the loop cannot change it: it reads no buffer and no accumulator the loop
updates, and no name the loop binds. The check pass only reads, so the loop's stores
happen once, in whichever version runs.
"""

from __future__ import annotations

from flowjit.ir.dtypes import DType, float32, float64
from flowjit.ir.records import record
from flowjit.lowering.loops import (
    AccValue,
    Const,
    Expr,
    Let,
    Load,
    Loop,
    Prim,
    Store,
    Update,
    Var,
    expressions,
    free_names,
    subexpressions,
)
from flowjit.lowering.scalar import CHEAP

# |a| in [2**-WINDOW, 2**WINDOW] (or zero) and |s| in it: q = a/s lies within 2**(2*WINDOW)
# of 1, a normal number of either format with room to spare, and r = a - q*s (about
# 2**-24 |a| or 2**-53 |a|) is normal too, so exact.
WINDOW = {float32: 60, float64: 500}
# The longest loop checked: its dividends must still be in the cache (L2) when the loop
# proper reads them again. Adam's update over a 50,000x64 table, one loop of 3.2M elements
# a chunk, is bound by memory: reading its moments twice would cost more than its divisions.
MAX_TRIPS = 16384
MAX_DIVIDEND_NODES = 8


@record
class Division:
    """The divisions of a loop by ``divisor`` (as written in the loop, the key the renderer
    matches) whose dividends, with the loop's ``Let`` names substituted, are ``dividends``."""

    divisor: Expr
    dividends: tuple
    dtype: DType


def recomputable(e: Expr) -> bool:
    """Whether ``e`` (written out: ``written_out``) is loads and the vocabulary's cheap
    operations only, so a check pass may compute it a second time."""
    if isinstance(e, Prim):
        return e.op in CHEAP and all(recomputable(a) for a in e.args)
    return isinstance(e, (Const, Var, Load, AccValue))


def written_out(e: Expr, lets: dict, budget: list) -> Expr | None:
    """``e`` with the loop's ``Let`` names replaced by their values (``substitute_lets``),
    or None once it has more than ``budget[0]`` nodes. Bounded as it goes: a name read by
    several others (a random draw's hash rounds) is written out once for each reader, so the
    whole expression can be exponentially larger than the loop's body."""
    if isinstance(e, Var) and e.name in lets:
        return written_out(lets[e.name], lets, budget)
    budget[0] -= 1
    if budget[0] < 0:
        return None
    if isinstance(e, (Prim, Load)):
        args = []
        for a in (e.args if isinstance(e, Prim) else e.index):
            a = written_out(a, lets, budget)
            if a is None:
                return None
            args.append(a)
        return Prim(e.op, tuple(args), e.dtype) if isinstance(e, Prim) else Load(e.buffer, tuple(args), e.dtype)
    return e


def divisions(loop: Loop) -> tuple[Division, ...]:
    """The divisions of innermost ``loop`` worth versioning: float32 or float64 ``div``
    whose divisor the loop cannot change and whose dividends are cheap to compute twice.
    Empty when the loop nests another, branches, or has none."""
    if not all(isinstance(s, (Let, Store, Update)) for s in loop.body):
        return ()
    lets = {s.name: s.value for s in loop.body if isinstance(s, Let)}
    bound = {loop.var, *lets} | {s.name for s in loop.body if isinstance(s, Update)}
    found: dict = {}
    for e in expressions(loop.body):
        if not (isinstance(e, Prim) and e.op == "div" and e.dtype in WINDOW):
            continue
        divisor = e.args[1]
        if free_names(divisor) & bound or any(isinstance(x, Load) for x in subexpressions(divisor)):
            continue
        dividend = written_out(e.args[0], lets, [MAX_DIVIDEND_NODES])
        if dividend is None or not recomputable(dividend):
            return ()     # that division stays: the loop keeps the divider anyway
        found.setdefault((divisor, e.dtype), {})[dividend] = None
    return tuple(Division(d, tuple(ds), t) for (d, t), ds in found.items())


def magnitude_mask(d: DType) -> int:
    """The bits of a float of dtype ``d`` below its sign bit (a check pass's magnitudes)."""
    return (1 << (8 * d.itemsize - 1)) - 1


def window_bits(d: DType) -> tuple[int, int, int]:
    """(mask of the magnitude bits, bits of 2**-WINDOW, bits of 2**WINDOW) of float dtype ``d``."""
    w = WINDOW[d]
    if d == float32:
        return magnitude_mask(d), (127 - w) << 23, (127 + w) << 23
    return magnitude_mask(d), (1023 - w) << 52, (1023 + w) << 52
