"""gelu (tanh form) on N = 2**24 float32: one read and one write per element.

A second row times flowjit with ``fastmath=True`` (LLVM's ``fast`` flags on the float ops: it
may contract the multiplies and adds around the tanh into multiply-adds); its peer cells are
the first row's. flowjit's
float32 tanh is a rational function either way (5 ulp, the form XLA uses on CPUs).
"""

from __future__ import annotations

from bench.workloads import defs
from bench.workloads.common import (
    BACKENDS,
    PEERS,
    Case,
    Cell,
    Ctx,
    Row,
    fill_ratios,
    fj_builder,
    run_case,
    standard_builders,
)


def run(ctx: Ctx) -> list[Row]:
    n = 1 << 16 if ctx.quick else 1 << 24
    args = defs.inputs("gelu", (n,))
    reference = defs.reference("gelu", args)
    case = Case("gelu", f"gelu f32[{n}]", standard_builders(ctx, "gelu", args),
                reference=reference, bytes_moved=2 * 4 * n,
                note="torch eager: F.gelu(approximate='tanh'); NumPy evaluates x**3 on float32 as a general "
                     "power (slow); JAX lowers it to multiplies")
    row = run_case(case, ctx)
    if "fj" not in ctx.columns:
        return [row]
    fast_case = Case("gelu", f"gelu f32[{n}], flowjit fastmath=True",
                     {"fj": fj_builder(defs.FJ["gelu"], BACKENDS["fj"], args, fastmath=True)},
                     reference=reference, bytes_moved=2 * 4 * n,
                     note="multiply-adds contracted; the peers' cells are the row above's")
    fast = run_case(fast_case, ctx)
    for key in PEERS:
        if key in row.cells:
            fast.cells[key] = row.cells[key]
    fast.cells.setdefault("interp", Cell(text="—", skipped=True))     # the interpreter has no fastmath
    fill_ratios(fast, ctx, fast_case.bytes_moved)
    return [row, fast]
