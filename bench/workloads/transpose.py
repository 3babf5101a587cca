"""A transpose into a new array, x.T + 1 of (4096, 1024) float32 written row-major: what a
layout change (NHWC to NCHW, a head swap, an FFT's axis moves) costs each library. Read and
written once, so its limit is the copy's bandwidth."""

from __future__ import annotations

from bench.workloads import defs
from bench.workloads.common import Case, Ctx, Row, run_case, standard_builders


def run(ctx: Ctx) -> list[Row]:
    shape = (128, 256) if ctx.quick else (4096, 1024)
    args = defs.inputs("transpose", shape)
    n = shape[0] * shape[1]
    case = Case("transpose", f"transpose f32[{shape[0]},{shape[1]}]", standard_builders(ctx, "transpose", args),
                reference=defs.reference("transpose", args), bytes_moved=2 * 4 * n,
                note="x.T + 1, row-major result; NumPy: np.add(x.T, 1, order='C'); torch: .contiguous()")
    return [run_case(case, ctx)]
