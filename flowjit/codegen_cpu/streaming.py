"""Streaming (non-temporal) stores for the large elementwise kernels flowjit generates.

A loop that stores normally reads every output cache line from memory before writing it
(read-for-ownership): three memory streams where a copy moves two. glibc's ``memcpy``
avoids that above a size with non-temporal stores, which write whole lines around the
caches, and copies four pages at a time, interleaved, so that the hardware prefetcher
keeps four read streams in flight. The generated kernels do the same for a 1-D
elementwise output from ``STREAM_MIN_BYTES``: each parallel iteration owns four pages of
the output; for each 64-byte line of them in turn it computes the line's elements into
a 64-byte stack chunk (``stack_chunk32``/``stack_chunk64``, which LLVM keeps in vector
registers) and stores the chunk with one aligned ``!nontemporal`` vector store
(``stream_chunk``). The elements before the output's first 64-byte boundary and after
the last full four pages are stored normally; ``stream_fence`` orders the streamed
stores before the kernel returns (they are weakly ordered on x86). Each line of every
input is prefetched one block ahead (``prefetch_line``): the hardware's L2 streamer
starts over at each page, and a loop busy computing does not issue its loads early
enough without the hint.

Measured on the 2-core Sapphire Rapids VM this was written on (``python -m bench.stores``:
2**24 float32, 2 threads, alternated with a copy, medians of 41, several runs): ``x * 3``
went from 57-61% of copy bandwidth (plain stores) to 68-85% (streamed) and 85-86%
(streamed and prefetched, with the output at the input's offset in its cache line, which
the buffer pool now arranges); gelu with ``fastmath`` and its rational tanh (the float32
tanh of every kernel since) from 56-60% to 62-77% and then 84-90%; gelu with the 1 ulp
tanh flowjit had before, bound by its arithmetic, from 47-50% to 56-57%.

Below the threshold an output may still be in the caches when the next kernel reads it,
which streaming stores would forfeit.
"""

from __future__ import annotations

from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.core.errors import TypingError
from numba.extending import intrinsic
from numba.np.arrayobj import populate_array

# Output size from which a 1-D elementwise kernel streams its stores: the outputs of the
# bench's gelu (64 MiB) stream; a 16 MiB softmax output (a reduction, never streamed)
# would fit this machine's 105 MiB L3.
STREAM_MIN_BYTES = 32 << 20
CHUNK_BYTES = 64  # one cache line; an AVX-512 register
PAGE_BYTES = 4096
PAGES = 4  # pages streamed at once, interleaved line by line (as glibc's memcpy does)
# How far ahead the streamed loop prefetches its inputs, in elements of the output: one
# block of four pages, the lines the thread reads next. The L2 streamer stops at each 4 KiB
# page and ramps up again on the next, so a loop that computes between its loads falls
# behind memory; software prefetches keep the reads in flight (0 turns them off).
PREFETCH_BLOCKS = 1


def _chunk(width_bits: int):
    itemsize = width_bits // 8
    dtype = types.float32 if width_bits == 32 else types.float64
    arrty = types.Array(dtype, 1, "C")
    count = CHUNK_BYTES // itemsize

    @intrinsic
    def stack_chunk(typingctx):
        def codegen(context, builder, sig, args):
            elem = ir.FloatType() if width_bits == 32 else ir.DoubleType()
            slot = cgutils.alloca_once(builder, ir.ArrayType(elem, count))
            slot.align = CHUNK_BYTES
            intp = context.get_value_type(types.intp)
            ary = context.make_array(arrty)(context, builder)
            populate_array(ary, data=builder.bitcast(slot, elem.as_pointer()),
                           shape=[ir.Constant(intp, count)], strides=[ir.Constant(intp, itemsize)],
                           itemsize=ir.Constant(intp, itemsize), meminfo=None)
            return ary._getvalue()

        return arrty(), codegen

    stack_chunk.__doc__ = (f"A {CHUNK_BYTES}-byte, {CHUNK_BYTES}-aligned stack array of {count} "
                           f"float{width_bits}s (no allocation: the loop body's registers).")
    return stack_chunk


stack_chunk32 = _chunk(32)
stack_chunk64 = _chunk(64)


@intrinsic
def stream_chunk(typingctx, out, start, chunk):
    """Store ``chunk`` (a stack chunk) into ``out[start:start + len(chunk)]`` with one
    non-temporal vector store; ``out``'s data at ``start`` must be 64-byte aligned."""
    if not (isinstance(out, types.Array) and isinstance(chunk, types.Array) and out.dtype == chunk.dtype
            and out.dtype in (types.float32, types.float64) and isinstance(start, types.Integer)):
        raise TypingError("stream_chunk(out, start, chunk): float32 or float64 arrays of one dtype")

    def codegen(context, builder, sig, args):
        outv, startv, chunkv = args
        o = context.make_array(sig.args[0])(context, builder, outv)
        c = context.make_array(sig.args[2])(context, builder, chunkv)
        elem = context.get_value_type(sig.args[0].dtype)
        vec = ir.VectorType(elem, CHUNK_BYTES // context.get_abi_sizeof(elem))
        value = builder.load(builder.bitcast(c.data, vec.as_pointer()), align=CHUNK_BYTES)
        start = context.cast(builder, startv, sig.args[1], types.intp)
        target = builder.bitcast(builder.gep(o.data, [start]), vec.as_pointer())
        store = builder.store(value, target, align=CHUNK_BYTES)
        store.set_metadata("nontemporal", builder.module.add_metadata([ir.Constant(ir.IntType(32), 1)]))
        return context.get_dummy_value()

    return types.none(out, start, chunk), codegen


@intrinsic
def prefetch_line(typingctx, arr, index):
    """Prefetch the cache line holding ``arr[index]`` into all cache levels (a hint: no
    load, no fault, so ``index`` may lie past the end of ``arr``)."""
    if not (isinstance(arr, types.Array) and isinstance(index, types.Integer)):
        raise TypingError("prefetch_line(arr, index): an array and an integer")

    def codegen(context, builder, sig, args):
        a = context.make_array(sig.args[0])(context, builder, args[0])
        i = context.cast(builder, args[1], sig.args[1], types.intp)
        i8p = ir.IntType(8).as_pointer()
        i32 = ir.IntType(32)
        # no ``inbounds``: the address may lie past the array, which a prefetch allows
        address = builder.bitcast(builder.gep(a.data, [i]), i8p)
        signature = ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32])
        fn = builder.module.declare_intrinsic("llvm.prefetch", [i8p], signature)
        # read (0), highest locality (3: prefetcht0; the non-temporal hint was 1.5-2x slower), data (1)
        builder.call(fn, [address, ir.Constant(i32, 0), ir.Constant(i32, 3), ir.Constant(i32, 1)])
        return context.get_dummy_value()

    return types.none(arr, index), codegen


@intrinsic
def stream_fence(typingctx):
    """Order the streaming stores before what follows (``sfence`` on x86; a full fence
    elsewhere)."""
    def codegen(context, builder, sig, args):
        if builder.module.triple.startswith(("x86_64", "i686", "i386")):
            fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), []),
                                                "llvm.x86.sse.sfence")
            builder.call(fn, [])
        else:
            builder.fence("seq_cst")
        return context.get_dummy_value()

    return types.none(), codegen


@njit(inline="always")
def stream_head(out):
    """The number of elements of ``out`` before its first 64-byte boundary (stored
    normally), or -1 when that boundary falls inside an element."""
    gap = (CHUNK_BYTES - out.ctypes.data % CHUNK_BYTES) % CHUNK_BYTES
    if gap % out.itemsize:
        return -1
    return gap // out.itemsize
