"""The machine's memory bandwidth: a copy of 2**25 float32 into an existing buffer, and the
triad a = b + s*c. GB/s count bytes read plus bytes written (8 per element for copy, 12 for
triad; write-allocate traffic is not counted).

The reference (first column; the copy every %BW divides by) streams its stores: LLVM IR
with ``!nontemporal`` vector stores, compiled with llvmlite and split over the run's threads
(``bench/streaming.py``). A loop with plain stores reads each output line before writing
it: a third stream that flowjit's large elementwise kernels (streamed stores) do not pay, so
%BW over such a copy (the numba prange loop this column once had beside it) read up to 172%
for gelu.

The peers show what the same operation costs each library: NumPy into the buffer (one
thread; ``np.copyto`` is glibc's ``memcpy``; the triad is two passes), torch into the
buffer, and TensorFlow (the triad compiled by XLA) and flowjit, which return a new array
each call (so their time includes allocating and first-touching the output).
"""

from __future__ import annotations

import numpy as np

from bench.workloads import defs
from bench.workloads.common import BACKENDS, Case, Ctx, Row, run_case

COLUMNS = (("stream", "streaming stores (llvmlite), into buffer"), ("numpy", "NumPy out= (1 thread)"),
           ("torch", "torch out="), ("tf", "TensorFlow (XLA), new array"), ("fj", "flowjit, new array"))
SCALE = np.float32(3.0)


def _arrays(n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1)
    b = rng.standard_normal(n).astype(np.float32)
    c = rng.standard_normal(n).astype(np.float32)
    return np.zeros(n, np.float32), b, c


def _stream(ctx: Ctx, op: str, a, *inputs):
    def build():
        from bench.streaming import Streamer
        k = Streamer(op, ctx.threads)
        return lambda: k(a, *inputs, s=float(SCALE))
    return build


def _torch(ctx: Ctx, a, b, c, op: str):
    def build():
        torch = ctx.module("torch")
        ta, tb, tc = (torch.from_numpy(x) for x in (a, b, c))
        if op == "copy":
            return lambda: ta.copy_(tb)
        return lambda: torch.add(tb, tc, alpha=float(SCALE), out=ta)
    return build


def _numpy_triad(a, b, c):
    def run():
        np.multiply(c, SCALE, out=a)
        np.add(a, b, out=a)
        return a
    return lambda: run


def _fj_triad(b, c, backend: str):
    def build():
        import flowjit as fj
        g = fj.function(defs.fj_triad, backend=backend)
        return lambda: g(b, c, float(SCALE))
    return build


def _tf_triad(ctx: Ctx, b, c):
    def build():
        from bench.workloads.defs import tf_jit
        tf = ctx.module("tensorflow")

        def triad(b, c):
            return b + SCALE * c
        g = tf_jit(tf, triad)
        tb, tc = tf.constant(b), tf.constant(c)
        return lambda: g(tb, tc)
    return build


def columns(ctx: Ctx) -> tuple[tuple[str, str], ...]:
    """The streaming copy always; the peers' and flowjit's columns as ``--peers`` says (a peer
    left out is never imported)."""
    return tuple((k, h) for k, h in COLUMNS if k == "stream" or k in ctx.columns)


def size(ctx: Ctx) -> int:
    return 1 << 20 if ctx.quick else 1 << 25


def copy_case(ctx: Ctx, a, b, only_stream: bool = False) -> Case:
    n = a.shape[0]
    builders = {"stream": _stream(ctx, "copy", a, b)}
    if not only_stream:
        builders.update(numpy=lambda: (lambda: (np.copyto(a, b), a)[1]),
                        torch=_torch(ctx, a, b, b, "copy"))
    return Case("bandwidth", f"copy f32[{n}]", builders, reference=b, tol=0.0, bytes_moved=8 * n,
                note="flowjit has no copy op (returning its argument copies it in NumPy)")


def _keep_copy(ctx: Ctx, a, b, row: Row) -> None:
    """The streaming copy's bandwidth, and the copy itself for the rows that report %BW to
    time in their own rounds."""
    cell = row.cells["stream"]
    ctx.copy_gbps = 8 * a.shape[0] / cell.seconds / 1e9 if cell.ok else None
    ctx.copy = (_stream(ctx, "copy", a, b)(), 8 * a.shape[0]) if cell.ok else None


def measure_copy(ctx: Ctx) -> Row:
    """Only the streaming copy (for %BW when the bandwidth workload is not selected)."""
    a, b, _ = _arrays(size(ctx))
    row = run_case(copy_case(ctx, a, b, only_stream=True), ctx, columns=COLUMNS[:1])
    _keep_copy(ctx, a, b, row)
    return row


def run(ctx: Ctx) -> list[Row]:
    n = size(ctx)
    a, b, c = _arrays(n)
    copy_row = run_case(copy_case(ctx, a, b), ctx, columns=columns(ctx))
    _keep_copy(ctx, a, b, copy_row)
    triad_ref = (b.astype(np.float64) + float(SCALE) * c.astype(np.float64)).astype(np.float32)
    triad = Case("bandwidth", f"triad f32[{n}]",
                 {"stream": _stream(ctx, "triad", a, b, c), "numpy": _numpy_triad(a, b, c),
                  "torch": _torch(ctx, a, b, c, "triad"), "tf": _tf_triad(ctx, b, c),
                  "fj": _fj_triad(b, c, BACKENDS["fj"])},
                 reference=triad_ref, tol=1e-6, bytes_moved=12 * n,
                 note="NumPy's triad is two passes (multiply, then add) over the buffer")
    return [copy_row, run_case(triad, ctx, columns=columns(ctx))]
