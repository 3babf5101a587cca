"""A rotary position embedding's table (RoPE, as LLaMA-style transformers compute it each
call): ``concatenate([cos(a), sin(a)], -1)`` of the angles ``a = pos[:, None] * inv_freq``,
8192 positions by 64 frequencies, float32. Its cost is the sines and cosines, not memory: the
fraction of copy bandwidth says how far a library's trigonometric functions are from free.
flowjit's sin and cos are its own vector code (``codegen_cpu/intrinsics.py``); until
2026-12-03 they were libm's scalar calls.
"""

from __future__ import annotations

import numpy as np

from bench.workloads import defs
from bench.workloads.common import Case, Ctx, Row, run_case, standard_builders


def run(ctx: Ctx) -> list[Row]:
    positions, half = (256, 16) if ctx.quick else (8192, 64)
    args = defs.inputs("rotary", (positions, half))
    # The angles as every library computes them (one float32 product: at 8191 rad its rounding
    # moves a cosine by 2e-4), their cosines and sines in float64.
    angle = (args[0][:, None] * args[1][None, :]).astype(np.float64)
    reference = np.concatenate([np.cos(angle), np.sin(angle)], axis=-1).astype(np.float32)
    case = Case("rotary", f"rotary table cos|sin f32[{positions},{2 * half}]",
                standard_builders(ctx, "rotary", args), reference=reference,
                bytes_moved=4 * positions * 2 * half,
                note="written once per library: angles, cos and sin, concatenated (torch eager: the same ops)")
    return [run_case(case, ctx)]
