"""``flowjit_conv_patches``: a convolution's windows gathered into rows (the ``patches`` op,
im2col: [N, H, W, C] -> [N, OH, OW, KH, KW, C], 0 where a tap falls in the padding), as
flowjit's own code compiled once per installation, which a native program calls for a
kernel that is that op alone on a buffer (``program_plan.Patches``).

Why a routine and not the op's kernel: LLVM, as llvmlite ships it, spends 30-40 ms on each
such kernel (a six-deep nest, optimized again at every shape), the largest part of a
CNN's cold first call after its batch norms. The routine reads the shapes, strides,
dilation and padding at run time and moves bytes, so one compiled routine serves every
shape and dtype. For a dilation of 1 along W a window row's taps inside the input are one
contiguous run in the input and in the output: one copy per run, the padding's taps
zeroed around it. A run moves inline: under 64 bytes (a channel or two of float32, where
a library call would cost more than the bytes) as two overlapping moves of the widest
vector that fits, from 64 bytes as 64-byte moves; from ``LIBRARY_BYTES`` by
``memcpy``/``memset``. Rows (n, output row) are split over the native pool when the plan
gives more than one part.

The AOT C library keeps the op's kernel (its driver links no runtime of flowjit's)."""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable
from typing import Any

from . import jit, llvm_loops, objcache, pthread_pool  # pthread_pool provides flowjit_parallel_for
from .llvm_loops import counted_loop

# The versioned symbol a program's object code calls: a change of its arguments changes
# the name, so an object cached before it never calls this one.
SYMBOL = "flowjit_conv_patches_1"
# The routine's int64 arguments after the two pointers, in order (the plan's Patches step
# gives them; ``parts`` last).
PARAMS = ("n", "h", "w", "cb", "oh", "ow", "kh", "kw", "sh", "sw", "dh", "dw", "top", "left", "parts")
# Runs of this many bytes and more are copied by the C library's memcpy (its own loops
# for long copies); shorter ones inline.
LIBRARY_BYTES = 4096


def build_module() -> str:
    """The LLVM IR text of ``SYMBOL`` and its row chunk (the module docstring)."""
    # Imported here: a process that loads the module from the object cache builds no IR.
    from llvmlite import ir

    I8, I32, I64 = ir.IntType(8), ir.IntType(32), ir.IntType(64)
    I8P, VOID = I8.as_pointer(), ir.VoidType()
    mod = ir.Module("flowjit_conv_patches")

    def const(v: int) -> Any:
        return ir.Constant(I64, v)

    memcpy = ir.Function(mod, ir.FunctionType(I8P, [I8P, I8P, I64]), "memcpy")
    memset = ir.Function(mod, ir.FunctionType(I8P, [I8P, I32, I64]), "memset")
    chunk_t = ir.FunctionType(VOID, [I64, I64, I8P])
    pfor = ir.Function(mod, ir.FunctionType(VOID, [chunk_t.as_pointer(), I64, I8P, I64]), jit.PARALLEL_FOR_SYMBOL)

    def internal(name: str, fty: Any) -> Any:
        fn = ir.Function(mod, fty, name)
        fn.linkage = "internal"
        # Short copies stay inline: LLVM would otherwise make the byte loop a call of memcpy.
        fn.attributes.add("nounwind")
        set.add(fn.attributes, '"no-builtins"')     # a string attribute llvmlite does not validate
        return fn

    # ---- the rows [lo, hi) of the output, (n, output row) flattened -------------------------
    chunk = internal("fj_patches_rows", chunk_t)
    # The columns [start, end) of output row r whose taps reach into the padding (or every
    # column, for a dilation other than 1 along W), tap by tap: a function of its own, its
    # moves chosen once per call by the channels' bytes. Rendered inside each of the window
    # row's seven ways of moving (``nest``), for both edges and each of a tap's seven ways,
    # the edge loops had 98 copies: 447 KB of IR that LLVM took 17-20 s to compile at O3,
    # the wait of the first convolution after an installation.
    edges_fn = internal("fj_patches_edges", ir.FunctionType(VOID, [I8P, I64, I64, I64]))
    edges_fn.attributes.add("noinline")

    def context(ctx: Any) -> tuple[Any, Any, dict[str, Any]]:
        """The input and output pointers and the parameters a chunk's context holds."""
        words = b.bitcast(ctx, I64.as_pointer())

        def word(k: int) -> Any:
            return b.load(b.gep(words, [const(k)], inbounds=True))
        return (b.inttoptr(word(0), I8P), b.inttoptr(word(1), I8P),
                {name: word(2 + k) for k, name in enumerate(PARAMS[:-1])})

    def move(width: int, d: Any, s_: Any | None, at: Any) -> None:
        ty = ir.VectorType(I8, width)
        v = ir.Constant(ty, None) if s_ is None else b.load(b.bitcast(b.gep(s_, [at]), ty.as_pointer()), align=1)
        b.store(v, b.bitcast(b.gep(d, [at]), ty.as_pointer()), align=1)

    def library(nbytes: Any) -> Callable[[Any, Any], None]:
        def body(d: Any, s_: Any | None) -> None:
            if s_ is None:
                b.call(memset, [d, ir.Constant(I32, 0), nbytes])
            else:
                b.call(memcpy, [d, s_, nbytes])
        return body

    def blocks(nbytes: Any) -> Callable[[Any, Any], None]:
        def body(d: Any, s_: Any | None) -> None:
            # The whole 64-byte blocks, then the last 64 bytes if some are left.
            counted_loop(b, b.lshr(nbytes, const(6)), "c", lambda c: move(64, d, s_, b.shl(c, const(6))))
            with b.if_then(b.icmp_unsigned("!=", b.and_(nbytes, const(63)), const(0))):
                move(64, d, s_, b.sub(nbytes, const(64)))
        return body

    def pair(width: int) -> Callable[[Any], Callable[[Any, Any], None]]:
        def of(nbytes: Any) -> Callable[[Any, Any], None]:
            def body(d: Any, s_: Any | None) -> None:
                move(width, d, s_, const(0))
                move(width, d, s_, b.sub(nbytes, const(width)))
            return body
        return of

    def single(nbytes: Any) -> Callable[[Any, Any], None]:
        def body(d: Any, s_: Any | None) -> None:
            def byte(i: Any) -> None:
                b.store(ir.Constant(I8, 0) if s_ is None else b.load(b.gep(s_, [i])), b.gep(d, [i]))
            counted_loop(b, nbytes, "byte", byte)
        return body

    # How ``nbytes`` move, the first whose least size it has: from LIBRARY_BYTES a library
    # call; from 64, 64-byte moves, the last ending at the end; below, two moves of the
    # widest vector that fits, one from each end (overlapping where the width does not
    # divide it); bytes under 4.
    ways = ((LIBRARY_BYTES, library), (64, blocks), (32, pair(32)), (16, pair(16)), (8, pair(8)), (4, pair(4)),
            (0, single))

    def choose(nbytes: Any, emit: Callable[[Callable[[Any], Callable[[Any, Any], None]]], None]) -> None:
        """``emit(way)`` once per way of moving, each behind its test of ``nbytes``: what
        ``emit`` makes is specialized to one way, chosen where ``choose`` is called (for a
        window row's runs, once per call of the routine's rows; for the edges' taps, once per
        call of ``fj_patches_edges``, an output row's edge columns on one side)."""
        done = b.append_basic_block("way.done")
        for least, way in ways:
            take, rest = b.append_basic_block(f"way.{least}"), b.append_basic_block(f"way.lt{least}")
            b.cbranch(b.icmp_unsigned(">=", nbytes, const(least)), take, rest)
            b.position_at_end(take)
            emit(way)
            b.branch(done)
            b.position_at_end(rest)
        b.unreachable()
        b.position_at_end(done)

    def repeat(way: Callable[[Any, Any], None], count: Any, dst: Any, dst_step: Any, src: Any | None,
               src_step: Any) -> None:
        """``count`` moves ``way``, the k-th to ``dst + k * dst_step`` from ``src + k * src_step``
        (zeros when ``src`` is None)."""
        counted_loop(b, count, "k", lambda k: way(b.gep(dst, [b.mul(k, dst_step)]),
                                                    None if src is None else b.gep(src, [b.mul(k, src_step)])))

    def clamp(v: Any, low: Any, high: Any) -> Any:
        v = b.select(b.icmp_signed("<", v, low), low, v)
        return b.select(b.icmp_signed(">", v, high), high, v)

    def ceil_div(a: Any, d: Any) -> Any:   # of a >= 0 (negative a: 0)
        return b.sdiv(b.add(b.select(b.icmp_signed("<", a, const(0)), const(0), a), b.sub(d, const(1))), d)

    def stop(last: Any, d: Any) -> Any:    # how many k >= 0 have k * d <= last
        return b.select(b.icmp_signed("<", last, const(0)), const(0), b.add(b.sdiv(last, d), const(1)))

    def values(ctx: Any) -> tuple[Any, ...]:
        """The context's pointers and parameters at ``b``, and a window row's and an output
        position's bytes."""
        x, out, p = context(ctx)
        h, w, cb, oh, ow, kh, kw, sh, sw, dh, dw, top, left = (
            p[k] for k in ("h", "w", "cb", "oh", "ow", "kh", "kw", "sh", "sw", "dh", "dw", "top", "left"))
        window_row = b.mul(kw, cb)                                   # bytes of one window row (KW taps)
        position = b.mul(kh, window_row)                             # bytes of one output position
        return (x, out, h, w, cb, oh, ow, kh, kw, sh, sw, dh, dw, top, left, window_row, position)

    def row_start(r: Any) -> tuple[Any, Any, Any]:
        """Output row r's image (its first input byte), its first output byte, and the input
        row of its first tap row (negative in the padding above)."""
        img = b.sdiv(r, oh)
        i = b.sub(r, b.mul(img, oh))
        image = b.gep(x, [b.mul(b.mul(b.mul(img, h), w), cb)], inbounds=True)
        out_row = b.gep(out, [b.mul(b.mul(r, ow), position)], inbounds=True)
        return image, out_row, b.sub(b.mul(i, sh), top)

    # ---- fj_patches_edges(ctx, r, start, end) ----------------------------------------------------
    b = ir.IRBuilder(edges_fn.append_basic_block("entry"))
    ctx_e, r_e, start_e, end_e = edges_fn.args
    (x, out, h, w, cb, oh, ow, kh, kw, sh, sw, dh, dw, top, left, window_row, position) = values(ctx_e)
    image, out_row, first_ih = row_start(r_e)

    def edge_columns(way_of_tap: Callable[[Any], Callable[[Any, Any], None]]) -> None:
        tap_way = way_of_tap(cb)

        def edge(j: Any) -> None:   # a column with taps in the padding, or any if dw != 1: tap by tap
            col0 = b.sub(b.mul(j, sw), left)
            at = b.gep(out_row, [b.mul(j, position)])

            def tap_row(q: Any) -> None:
                ih = b.add(first_ih, b.mul(q, dh))
                dst = b.gep(at, [b.mul(q, window_row)])
                with b.if_else(b.icmp_unsigned("<", ih, h)) as (in_rows, padding):
                    with in_rows:
                        src_row = b.gep(image, [b.mul(b.mul(ih, w), cb)])

                        def tap(t: Any) -> None:
                            iw = b.add(col0, b.mul(t, dw))
                            one = b.gep(dst, [b.mul(t, cb)])
                            with b.if_else(b.icmp_unsigned("<", iw, w)) as (in_cols, pad_col):
                                with in_cols:
                                    tap_way(one, b.gep(src_row, [b.mul(iw, cb)]))
                                with pad_col:
                                    tap_way(one, None)
                        counted_loop(b, kw, "t", tap)
                    with padding:   # a tap row in the padding: its KW taps' zeros
                        repeat(tap_way, kw, dst, cb, None, cb)
            counted_loop(b, kh, "q", tap_row)
        counted_loop(b, end_e, "je", edge, start=start_e)

    choose(cb, edge_columns)
    b.ret_void()

    # ---- fj_patches_rows(lo, hi, ctx) ------------------------------------------------------------
    b = ir.IRBuilder(chunk.append_basic_block("entry"))
    lo, hi, ctx = chunk.args
    (x, out, h, w, cb, oh, ow, kh, kw, sh, sw, dh, dw, top, left, window_row, position) = values(ctx)
    # Output columns whose KW taps all fall inside the input, [j_lo, j_hi) (every row's):
    # j * sw - left >= 0 from j_lo; j * sw - left + (kw - 1) * dw <= w - 1 before j_hi. Each
    # is one run of kw * cb bytes when dw is 1; with another dilation every column goes tap
    # by tap (as the edges do).
    unit_dw = b.icmp_signed("==", dw, const(1))
    j_lo = b.select(unit_dw, clamp(ceil_div(left, sw), const(0), ow), ow)
    j_hi = clamp(stop(b.sub(b.add(b.sub(w, const(1)), left), b.mul(b.sub(kw, const(1)), dw)), sw), j_lo, ow)
    j_hi = b.select(unit_dw, j_hi, ow)
    row_stride = b.mul(b.mul(dh, w), cb)            # input bytes from one tap row to the next

    def nest(way_of: Callable[[Any], Callable[[Any, Any], None]]) -> None:
        window = way_of(window_row)

        def row(r: Any) -> None:
            image, out_row, first_ih = row_start(r)
            # Tap rows inside the input, [q_lo, q_hi): i * sh + q * dh - top in [0, h).
            q_lo = clamp(ceil_div(b.neg(first_ih), dh), const(0), kh)
            q_hi = clamp(stop(b.sub(b.sub(h, const(1)), first_ih), dh), q_lo, kh)
            first_src = b.gep(image, [b.mul(b.mul(b.add(first_ih, b.mul(q_lo, dh)), w), cb)])

            def inner(q: Any, src: Any | None) -> None:
                # Tap row q of every interior column: one run of kw taps of the input's row
                # (from src; zeros where the row is padding). Tap rows outside, columns inside:
                # a window row of a channel or two is a few bytes, and three short loops per
                # column (the padding's rows above, the input's, below) had cost more than the
                # moves (a CNN's 3x3 patches of 32 channels at 63-75% of their memory bound).
                at = b.gep(out_row, [b.add(b.mul(j_lo, position), b.mul(q, window_row))])
                start = None if src is None else b.gep(src, [b.mul(b.sub(b.mul(j_lo, sw), left), cb)])
                repeat(window, b.sub(j_hi, j_lo), at, position, start, b.mul(sw, cb))

            def edges(start: Any, end: Any) -> None:
                with b.if_then(b.icmp_signed("<", start, end)):
                    b.call(edges_fn, [ctx, r, start, end])
            edges(const(0), j_lo)
            counted_loop(b, q_lo, "qa", lambda q: inner(q, None))
            counted_loop(b, q_hi, "q", lambda q: inner(q, b.gep(first_src, [b.mul(b.sub(q, q_lo), row_stride)])),
                         start=q_lo)
            counted_loop(b, kh, "qb", lambda q: inner(q, None), start=q_hi)
            edges(j_hi, ow)
        counted_loop(b, hi, "r", row, start=lo)

    choose(window_row, nest)
    b.ret_void()

    # ---- the entry: the arguments into a context, then the rows on the pool or here -------
    fn = ir.Function(mod, ir.FunctionType(VOID, [I8P, I8P] + [I64] * len(PARAMS)), SYMBOL)
    fn.attributes.add("nounwind")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    xa, oa, *vals = fn.args
    args = dict(zip(PARAMS, vals))
    ctx_mem = b.alloca(ir.ArrayType(I64, 2 + len(PARAMS) - 1))
    for k, v in enumerate([b.ptrtoint(xa, I64), b.ptrtoint(oa, I64), *vals[:-1]]):
        b.store(v, b.gep(ctx_mem, [ir.Constant(I32, 0), ir.Constant(I32, k)], inbounds=True))
    ctx_p = b.bitcast(ctx_mem, I8P)
    rows = b.mul(args["n"], args["oh"])
    with b.if_else(b.icmp_signed(">", args["parts"], const(1))) as (pool, here):
        with pool:
            b.call(pfor, [chunk, rows, ctx_p, args["parts"]])
        with here:
            b.call(chunk, [const(0), rows, ctx_p])
    b.ret_void()
    return str(mod)


@functools.cache
def _source_digest() -> str:
    # Its IR is this file's, with llvm_loops' loops, calling pthread_pool's parallel for.
    return objcache.source_digest(__file__, llvm_loops.__file__, pthread_pool.__file__)


@functools.cache
def routine() -> int:
    """The address of ``SYMBOL``, compiled once per installation
    (``objcache.runtime_directory()``) and registered for generated code; kept for the life
    of the process."""
    lib = jit.load_source(f"; flowjit conv patches {_source_digest()}", build_module,
                          name="flowjit_conv_patches", runtime=True)
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(lib))
    address = lib.address(SYMBOL)
    jit.register_symbol(SYMBOL, address)
    return address


jit.provide_symbol(SYMBOL, routine)
