"""matmul 1024 x 1024 x 1024 float32, GFLOP/s."""

from __future__ import annotations

from bench.workloads import defs
from bench.workloads.common import Case, Ctx, Row, run_case, standard_builders


def run(ctx: Ctx) -> list[Row]:
    n = 128 if ctx.quick else 1024
    args = defs.inputs("matmul", (n, n, n))
    case = Case("matmul", f"matmul {n}^3", standard_builders(ctx, "matmul", args),
                reference=defs.reference("matmul", args), tol=1e-4, flops=2 * n**3, unit="ms")
    return [run_case(case, ctx)]
