"""softmax over the last axis of (4096, 1024) float32."""

from __future__ import annotations

from bench.workloads import defs
from bench.workloads.common import Case, Ctx, Row, run_case, standard_builders


def run(ctx: Ctx) -> list[Row]:
    shape = (64, 256) if ctx.quick else (4096, 1024)
    args = defs.inputs("softmax", shape)
    n = shape[0] * shape[1]
    case = Case("softmax", f"softmax f32[{shape[0]},{shape[1]}]", standard_builders(ctx, "softmax", args),
                reference=defs.reference("softmax", args), bytes_moved=2 * 4 * n,
                note="torch eager: torch.softmax")
    return [run_case(case, ctx)]
