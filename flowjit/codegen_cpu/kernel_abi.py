"""A CPU kernel's calling convention and streaming scheme, shared by the renderer that
emits kernels (``emit``), the code that loads and calls them (``render``) and the native
program that calls them from its driver (``program``, ``program_emit``): the symbols of a
kernel's entry and chunk entry, which of its loops runs as chunks over threads, and which
loops store whole cache lines non-temporally."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from flowjit.lowering.loops import (
    INDEX,
    Accumulator,
    AccValue,
    Const,
    Expr,
    Kernel,
    Let,
    Loop,
    Prim,
    Store,
    Update,
    Var,
    expressions,
    walk_statements,
)

# Streaming stores (measured when they were chosen: bench/results/cpu2-2026-11-24.md): outputs from
# 32 MiB, one 64-byte line per store, inputs prefetched 16 KiB ahead.
STREAM_MIN_BYTES = 32 << 20
CHUNK_BYTES = 64
PREFETCH_BYTES = 4 * 4096


def disjuncts(e: Expr) -> list:
    """The terms of ``e`` = ``a or b or ...``."""
    if isinstance(e, Prim) and e.op == "or":
        return disjuncts(e.args[0]) + disjuncts(e.args[1])
    return [e]


def streamable(k: Kernel, s: Loop) -> bool:
    """Whether ``stream`` loop ``s`` can stream: it ends storing a float32 or float64 into a
    1-D output at its own index (the lowering's hint promises the rest)."""
    store = s.body[-1] if s.body else None
    return (isinstance(store, Store) and store.index == (Var(s.var, INDEX),) and s.step == 1
            and k.buffer(store.buffer).role == "out" and k.buffer(store.buffer).rank == 1
            and store.value.dtype.itemsize in (4, 8) and store.value.dtype.is_float)


def chunk_loop(k: Kernel) -> tuple[int, Loop] | None:
    """The position and the loop of ``k``'s one parallel loop when the kernel can run as
    chunks of it: the loop is at the top level from 0 in steps of 1 to a size variable or
    a constant, everything else at the top level is a ``Let`` (recomputed per chunk), and
    the kernel has no temps (each chunk would fill its own)."""
    if k.temps:
        return None
    loops = [(n, s) for n, s in enumerate(k.body) if not isinstance(s, Let)]
    if len(loops) != 1:
        return None
    n, loop = loops[0]
    if (not isinstance(loop, Loop) or not loop.parallel or loop.step != 1 or loop.start != Const(0, INDEX)
            or not is_size(k, loop.stop)):
        return None
    return n, loop


# A kernel rendered for a pool (``render_kernel(pool_parts=P)``, the native program's kernels
# when it splits loops) runs each of its ``pooled_loops`` on the native pool once the loop's
# work (its trips times the trips of the loops nested in it whose bounds are known before it)
# reaches POOLED_LOOP_MIN_WORK: the program's own threshold for a kernel split as chunks
# (pthread_pool.NATIVE_PARALLEL_MIN_ELEMENTS), below which the pool's hand-off costs more
# than the second thread saves.
POOLED_LOOP_MIN_WORK = 1 << 19


def pooled_loops(k: Kernel) -> list[Loop]:
    """The top-level loops of ``k`` that a kernel rendered for a pool runs on it: those the
    lowering marked parallel, in steps of 1, that update no accumulator declared outside
    them; none when the program splits the whole kernel as chunks (``chunk_loop``)."""
    if chunk_loop(k) is not None:
        return []
    return [s for s in k.body if isinstance(s, Loop) and s.parallel and s.step == 1 and _owns_accumulators(s)]


def _owns_accumulators(loop: Loop) -> bool:
    nested = list(walk_statements(loop.body))
    declared = {s.name for s in nested if isinstance(s, Accumulator)}
    used = {s.name for s in nested if isinstance(s, Update)}
    return used | {e.name for e in expressions(loop.body) if isinstance(e, AccValue)} <= declared


def is_size(k: Kernel, e: Expr) -> bool:
    """Whether ``e`` is a size of ``k``: a constant, a size variable, a product of sizes (a
    collapsed nest's extent, ``lowering.collapse``), or a sum of sizes divided by a positive
    constant (a count of tiles, ``lowering.tile_transpose``)."""
    if isinstance(e, Const):
        return True
    if isinstance(e, Var):
        return any(s.name == e.name for s in k.sizes)
    if isinstance(e, Prim) and e.op == "idiv":
        return isinstance(e.args[1], Const) and int(e.args[1].value) > 0 and is_size(k, e.args[0])
    return isinstance(e, Prim) and e.op in ("mul", "add") and all(is_size(k, a) for a in e.args)


def size_value(k: Kernel, e: Expr, shapes: Mapping[str, Sequence[int]]) -> int:
    """The value of size ``e`` (``is_size``) of kernel ``k`` called on buffers of ``shapes``
    (buffer name -> its dimensions, a complex buffer's with its parts' 2)."""
    if isinstance(e, Const):
        return int(e.value)
    if isinstance(e, Var):
        s = next(s for s in k.sizes if s.name == e.name)
        return int(shapes[s.buffer][s.dim])
    values = [size_value(k, a, shapes) for a in e.args]
    if e.op == "idiv":
        return values[0] // values[1]
    return sum(values) if e.op == "add" else math.prod(values)


def chunk_symbol(kernel: Kernel) -> str:
    """The name of ``kernel``'s chunk entry (``chunk_loop``): ``fj_chunk_NAME(i64 lo, i64 hi,
    then the kernel's own arguments)`` runs iterations [lo, hi) of its parallel loop."""
    return f"fj_chunk_{kernel.name}"


def symbol(kernel: Kernel) -> str:
    """The name of ``kernel``'s function in its module (and its object code)."""
    return f"fj_kernel_{kernel.name}"


# A kernel with temp buffers takes their memory as one more argument, after the dimensions
# (or NULL: it allocates them): each starts at the next address that is a multiple of
# TEMP_ALIGN, in ``kernel.buffers`` order.
TEMP_ALIGN = 64


def next_multiple(b: Any, at: Any, align: int) -> Any:
    """The IR of integer ``at`` rounded up to a multiple of ``align`` (a power of two), built
    with llvmlite IRBuilder ``b``: where a kernel starts each temp in the slice it is given,
    and a loop step its scratch."""
    return b.and_(b.add(at, at.type(align - 1)), at.type(-align))


def temp_bytes(kernel: Kernel, sizes: dict[str, int]) -> int | None:
    """Bytes that hold ``kernel``'s temp buffers at the size variables' values ``sizes``:
    their bytes, plus TEMP_ALIGN for each, whose start the kernel rounds up to an address
    that is a multiple of it. Linear in the sizes, as a plan symbolic in a batch dimension
    needs (fitted at multiples of 64, the line must hold at every other size). None when a
    temp's shape is not sizes and constants."""
    total = 0
    for b in kernel.temps:
        count = 1
        for e in b.shape:
            if isinstance(e, Const):
                count *= int(e.value)
            elif isinstance(e, Var) and e.name in sizes:
                count *= sizes[e.name]
            else:
                return None
        total += count * max(1, b.dtype.itemsize)
    return total + TEMP_ALIGN * len(kernel.temps)
