"""The power spectrum |rfft(x)|^2 along the last axis, in every library's own FFT: of (256, 1024)
float32, a batch of rows (what a spectrogram or a spectral loss computes), and of one long
signal of 65,536 float32 samples. flowjit's runs the FFT kernel over blocks of rows in its native
program; one long row runs as the four steps of batches of shorter transforms
(docs/native.md, The FFT kernel)."""

from __future__ import annotations

from bench.workloads import defs
from bench.workloads.common import Case, Ctx, Row, run_case, standard_builders


def run(ctx: Ctx) -> list[Row]:
    shapes = [(16, 256), (1, 4096)] if ctx.quick else [(256, 1024), (1, 65536)]
    rows = []
    for shape in shapes:
        args = defs.inputs("spectrum", shape)
        case = Case("spectrum", f"spectrum f32[{shape[0]},{shape[1]}]", standard_builders(ctx, "spectrum", args),
                    reference=defs.reference("spectrum", args),
                    note="abs(rfft(x))**2; torch eager: torch.fft.rfft")
        rows.append(run_case(case, ctx))
    return rows
