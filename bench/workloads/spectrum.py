"""The power spectrum |rfft(x)|^2 along the last axis of (256, 1024) float32: a real FFT, what a
spectrogram or a spectral loss computes, in every library's own FFT (flowjit's as products by
small DFT matrices in its native program)."""

from __future__ import annotations

from bench.workloads import defs
from bench.workloads.common import Case, Ctx, Row, run_case, standard_builders


def run(ctx: Ctx) -> list[Row]:
    shape = (16, 256) if ctx.quick else (256, 1024)
    args = defs.inputs("spectrum", shape)
    case = Case("spectrum", f"spectrum f32[{shape[0]},{shape[1]}]", standard_builders(ctx, "spectrum", args),
                reference=defs.reference("spectrum", args),
                note="abs(rfft(x))**2; torch eager: torch.fft.rfft")
    return [run_case(case, ctx)]
