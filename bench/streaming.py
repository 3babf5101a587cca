"""The bench's reference copy and triad: float32 loops with non-temporal (streaming) stores,
compiled from LLVM IR with llvmlite and split over threads, into an existing buffer.

A loop with ordinary stores reads every output cache line before writing it
(read-for-ownership), so it moves three streams where a copy needs two, and a kernel that
streams its stores (flowjit's large elementwise outputs, glibc's large ``memcpy``) can beat
it: %BW against such a copy read 149-172% for gelu. This copy writes whole 64-byte lines
around the caches with one aligned ``!nontemporal`` vector store each (plain stores only
before the output's first 64-byte boundary and after its last full line), then ``sfence``,
so %BW divides by what streaming can reach on this machine. Like glibc's ``memcpy`` it
moves four pages at a time, a line of each in turn, so that four read streams are in
flight (a page-by-page loop runs one, and the hardware prefetcher stops at each page).

Measured on the 2-core Xeon, 2026-11-25, under a neighbour's load (one process, 2**25
float32, 2 threads unless said, medians of 21 alternated calls): this copy 30.4 GB/s;
numba's prange loop with plain stores 19.7 GB/s; glibc's ``memcpy`` (``ctypes.memmove``)
split over 2 threads 14.9 GB/s; ``np.copyto`` (1 thread) 13.1 GB/s; this copy on 1 thread
24.6 GB/s. The triad: streamed 25.7 GB/s, numba's plain 21.4 GB/s.
Four pages interleaved against one page at a time: ahead in each of three runs (30.0 against
25.5 GB/s in the quietest).

Each thread gets a contiguous share of the elements (cut at 64-byte lines) and runs it in
one ctypes call, which releases the GIL; the shares run on a persistent thread pool.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np

LINE = 16   # float32 elements in a 64-byte cache line
PAGE = 1024  # float32 elements in a 4 KiB page
PAGES = 4    # pages streamed at once, interleaved line by line (as glibc's memcpy does)

# One kernel per operation: ``out[i] = <expr>`` over float32 inputs ``in0, in1, ...`` and a
# float scalar ``s``: (arity, instructions, result). Each is written once over LLVM values of
# either type ``{t}`` (a <16 x float> line or a float element); ``{s}`` is the scalar, splat
# for lines; ``{m}`` a temporary. A copy stores its input as loaded (no arithmetic: -0.0 and
# NaN payloads survive).
OPS = {"copy": (1, [], "{in0}"),
       "triad": (2, ["{m} = fmul {t} {in1}, {s}", "{r} = fadd {t} {in0}, {m}"], "{r}")}

_IR = """
define void @{name}(float* noalias %out, {params}, float %s, i64 %n) nounwind {{
entry:
  %addr = ptrtoint float* %out to i64
  %gap = sub i64 64, %addr
  %gapbytes = and i64 %gap, 63
  %head.want = lshr i64 %gapbytes, 2
  %head.short = icmp ult i64 %n, %head.want
  %head = select i1 %head.short, i64 %n, i64 %head.want
  %rest = sub i64 %n, %head
  %lines = lshr i64 %rest, 4
  %lines.elems = shl i64 %lines, 4
  %body.end = add i64 %head, %lines.elems
  %blocks = udiv i64 %lines, {block_lines}
  %blocks.elems = mul i64 %blocks, {block_elems}
  %block.end = add i64 %head, %blocks.elems
  %sv.0 = insertelement <16 x float> undef, float %s, i32 0
  %sv = shufflevector <16 x float> %sv.0, <16 x float> undef, <16 x i32> zeroinitializer
  br label %head.loop
{head_loop}
block.loop:
  %b = phi i64 [%head, %head.loop], [%b.next, %block.next]
  %block.more = icmp ult i64 %b, %block.end
  br i1 %block.more, label %block.line, label %body.loop
block.line:
  %l = phi i64 [0, %block.loop], [%l.next, %block.line]
  %l.elems = shl i64 %l, 4
  %x = add i64 %b, %l.elems
{vector_pages}
  %l.next = add i64 %l, 1
  %l.more = icmp ult i64 %l.next, {page_lines}
  br i1 %l.more, label %block.line, label %block.next
block.next:
  %b.next = add i64 %b, {block_elems}
  br label %block.loop
{body_loop}
{tail_loop}
done:
  {fence}
  ret void
}}

{fence_decl}
!0 = !{{i32 1}}
"""


def _body(op: str, index: str, vector: bool) -> str:
    """The loads, the expression and the store of one element (or one line) at ``index``."""
    arity, expr, result = OPS[op]
    t = "<16 x float>" if vector else "float"
    sfx = f".{index[1:]}{'v' if vector else ''}"
    lines, names = [], {"t": t, "s": "%sv" if vector else "%s", "m": f"%m{sfx}", "r": f"%r{sfx}"}
    for a in range(arity):
        p, v = f"%p{a}{sfx}", f"%in{a}{sfx}"
        lines.append(f"  {p} = getelementptr inbounds float, float* %in{a}, i64 {index}")
        if vector:
            lines.append(f"  {p}.v = bitcast float* {p} to {t}*")
            lines.append(f"  {v} = load {t}, {t}* {p}.v, align 4")
        else:
            lines.append(f"  {v} = load float, float* {p}, align 4")
        names[f"in{a}"] = v
    lines += ["  " + e.format(**names) for e in expr]
    value = result.format(**names)
    lines.append(f"  %o{sfx} = getelementptr inbounds float, float* %out, i64 {index}")
    if vector:
        lines.append(f"  %o{sfx}.v = bitcast float* %o{sfx} to {t}*")
        lines.append(f"  store {t} {value}, {t}* %o{sfx}.v, align 64, !nontemporal !0")
    else:
        lines.append(f"  store float {value}, float* %o{sfx}, align 4")
    return "\n".join(lines)


def _loop(name: str, var: str, start: str, before: str, end: str, step: int, body: str, after: str) -> str:
    """The IR of ``for var in range(start, end, step): body`` as blocks ``<name>.loop`` and
    ``<name>.step``, entered from block ``before`` and leaving to block ``after``."""
    return (f"{name}.loop:\n  {var} = phi i64 [{start}, %{before}], [{var}.next, %{name}.step]\n"
            f"  %{name}.more = icmp ult i64 {var}, {end}\n"
            f"  br i1 %{name}.more, label %{name}.step, label %{after}\n"
            f"{name}.step:\n{body}\n  {var}.next = add i64 {var}, {step}\n  br label %{name}.loop")


def _pages(op: str, pages: int) -> str:
    """One line of each of ``pages`` consecutive pages, at ``%x`` in the first."""
    out = []
    for p in range(pages):
        out.append(f"  %x{p} = add i64 %x, {p * PAGE}")
        out.append(_body(op, f"%x{p}", True))
    return "\n".join(out)


def kernel_ir(op: str, triple: str = "x86_64", pages: int = PAGES) -> str:
    """The LLVM IR of ``stream_<op>(out, in0, ..., s, n)`` for a CPU of ``triple``: streamed
    stores are weakly ordered on x86, so the kernel ends with ``sfence`` there (a full fence
    elsewhere) before its caller reads the output."""
    arity = OPS[op][0]
    x86 = triple.startswith(("x86_64", "i386", "i686"))
    return _IR.format(fence="call void @llvm.x86.sse.sfence()" if x86 else "fence seq_cst",
                      fence_decl="declare void @llvm.x86.sse.sfence()" if x86 else "", name=f"stream_{op}",
                      params=", ".join(f"float* noalias readonly %in{a}" for a in range(arity)),
                      head_loop=_loop("head", "%i", "0", "entry", "%head", 1, _body(op, "%i", False), "block.loop"),
                      body_loop=_loop("body", "%j", "%b", "block.loop", "%body.end", LINE, _body(op, "%j", True),
                                      "tail.loop"),
                      tail_loop=_loop("tail", "%k", "%j", "body.loop", "%n", 1, _body(op, "%k", False), "done"),
                      vector_pages=_pages(op, pages),
                      page_lines=PAGE // LINE, block_lines=pages * PAGE // LINE, block_elems=pages * PAGE)


_jit: dict[str, object] = {}


def _compiled(op: str) -> Callable:
    """The native ``stream_<op>`` as a ctypes function, compiled for the host CPU once into
    one MCJIT engine (which owns the target machine; modules added to it live as long)."""
    key = f"fn_{op}"
    if key not in _jit:
        import llvmlite.binding as llvm
        if "engine" not in _jit:
            llvm.initialize_native_target()
            llvm.initialize_native_asmprinter()
            machine = llvm.Target.from_default_triple().create_target_machine(
                cpu=llvm.get_host_cpu_name(), features=llvm.get_host_cpu_features().flatten(), opt=3)
            _jit["engine"] = llvm.create_mcjit_compiler(llvm.parse_assembly(""), machine)
        module = llvm.parse_assembly(kernel_ir(op, llvm.get_process_triple()))
        module.triple = llvm.get_process_triple()
        module.verify()
        engine = _jit["engine"]
        engine.add_module(module)
        engine.finalize_object()
        arity = OPS[op][0]
        proto = ctypes.CFUNCTYPE(None, *([ctypes.c_void_p] * (1 + arity)), ctypes.c_float, ctypes.c_int64)
        _jit[key] = proto(engine.get_function_address(f"stream_{op}"))
    return _jit[key]


class Streamer:
    """``out[:] = op(inputs, s)`` with streaming stores, each call split over ``threads``
    threads of a persistent pool (shares cut at 64-byte lines of ``out``)."""

    def __init__(self, op: str, threads: int):
        self.fn = _compiled(op)
        self.threads = max(1, threads)
        self.pool = ThreadPoolExecutor(self.threads) if self.threads > 1 else None

    def __call__(self, out: np.ndarray, *inputs: np.ndarray, s: float = 0.0) -> np.ndarray:
        arrays = (out, *inputs)
        if out.ndim != 1 or any(a.shape != out.shape or a.dtype != np.float32 or not a.flags.c_contiguous
                                or not a.flags.aligned for a in arrays):
            raise ValueError(f"Streamer: contiguous, aligned 1-D float32 arrays of one shape, got "
                             f"{', '.join(f'{a.dtype}{list(a.shape)}' for a in arrays)}")
        n = out.shape[0]
        ptrs = [a.ctypes.data for a in arrays]
        head = (-ptrs[0] % 64) // 4
        body = max(n - head, 0)
        cuts = [0] + [min(n, head + body * t // self.threads // LINE * LINE) for t in range(1, self.threads)] + [n]

        def part(lo: int, hi: int) -> None:
            self.fn(*(p + 4 * lo for p in ptrs), s, hi - lo)
        if self.pool is None:
            part(0, n)
        else:
            for f in [self.pool.submit(part, lo, hi) for lo, hi in zip(cuts[:-1], cuts[1:])]:
                f.result()
        return out
