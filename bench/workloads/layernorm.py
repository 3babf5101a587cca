"""layernorm (no scale or shift, eps 1e-5) over the last axis of (4096, 1024) float32."""

from __future__ import annotations

from bench.workloads import defs
from bench.workloads.common import Case, Ctx, Row, run_case, standard_builders


def run(ctx: Ctx) -> list[Row]:
    shape = (64, 256) if ctx.quick else (4096, 1024)
    args = defs.inputs("layernorm", shape)
    n = shape[0] * shape[1]
    case = Case("layernorm", f"layernorm f32[{shape[0]},{shape[1]}]", standard_builders(ctx, "layernorm", args),
                reference=defs.reference("layernorm", args), bytes_moved=2 * 4 * n,
                note="torch eager: F.layer_norm")
    return [run_case(case, ctx)]
