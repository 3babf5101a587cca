"""A depthwise 3x3 convolution (MobileNet's), SAME, of (32, 56, 56, 64) float32 NHWC: each
channel with its own filter. Read and written once in flowjit's kernel (the nine taps come
from cache), so its limit is the copy's bandwidth; XLA's CPU convolution has no depthwise
form of its own."""

from __future__ import annotations

from bench.workloads import defs
from bench.workloads.common import Case, Ctx, Row, run_case, standard_builders


def run(ctx: Ctx) -> list[Row]:
    shape = (2, 8, 8, 16) if ctx.quick else (32, 56, 56, 64)
    args = defs.inputs("depthwise", shape)
    n = args[0].size
    case = Case("depthwise", f"depthwise conv 3x3 SAME f32[{','.join(map(str, shape))}]",
                standard_builders(ctx, "depthwise", args), reference=defs.reference("depthwise", args),
                bytes_moved=2 * 4 * n,
                note="fj.nn.depthwise_conv2d; JAX: conv_general_dilated(feature_group_count=C); "
                     "torch: F.conv2d(groups=C) on the channels-last view; NumPy: nine taps added")
    return [run_case(case, ctx)]
