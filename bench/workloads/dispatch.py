"""Dispatch: f(x) = x + 1 on 8 float32 elements, microseconds per call (batched timing)."""

from __future__ import annotations

from bench.workloads import defs
from bench.workloads.common import Case, Ctx, Row, run_case, standard_builders


def run(ctx: Ctx) -> list[Row]:
    args = defs.inputs("dispatch", (8,))
    case = Case("dispatch", "dispatch x+1 f32[8]", standard_builders(ctx, "dispatch", args),
                reference=defs.reference("dispatch", args), unit="us",
                note="JAX, TensorFlow and torch take arrays already on their device (a TensorFlow tensor made "
                     "with tf.constant); flowjit and NumPy take NumPy arrays; TensorFlow's cell is a call of the "
                     "tf.function(jit_compile=True), traced once (its eager x + 1 dispatches faster)")
    return [run_case(case, ctx, target_s=0.01 if ctx.quick else 0.05)]
