"""gelu (tanh form) on N = 2**24 float32: one read and one write per element."""

from __future__ import annotations

from bench.workloads import defs
from bench.workloads.common import Case, Ctx, Row, run_case, standard_builders


def run(ctx: Ctx) -> list[Row]:
    n = 1 << 16 if ctx.quick else 1 << 24
    args = defs.inputs("gelu", (n,))
    case = Case("gelu", f"gelu f32[{n}]", standard_builders(ctx, "gelu", args),
                reference=defs.reference("gelu", args), bytes_moved=2 * 4 * n,
                note="torch eager: F.gelu(approximate='tanh'); NumPy evaluates x**3 on float32 as a general "
                     "power (slow); JAX lowers it to multiplies")
    return [run_case(case, ctx)]
