"""A ResNet layer's 3x3 convolution, SAME, 64 to 64 channels on (32, 56, 56, 64) float32 NHWC:
its forward and its gradient (of ``sum(conv(x, w) ** 2)`` with respect to the input and the
filter, both computed; the filter's checked). Each cell's GFLOP/s counts the convolution's
flops, 2 * M * K * N for M output positions, K = 9 * C and N filters (the gradient's: three
such products). The limit is the BLAS's: the note gives the rate of one image's product (its
windows made beforehand, in cache: M = 56 * 56) in NumPy's ``matmul`` on the bench's threads,
and flowjit's fraction of it. PyTorch runs oneDNN's direct convolution; XLA's CPU
convolution is Eigen's."""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from bench.workloads.common import Case, Ctx, Row, fj_builder, np_builder, run_case

PAD = 1   # SAME for a 3x3 window at stride 1


def _windows(x: np.ndarray) -> np.ndarray:
    """x's 3x3 windows [N, H, W, 3, 3, C], zeros in the padding (NumPy's sliding views)."""
    padded = np.pad(x, ((0, 0), (PAD, PAD), (PAD, PAD), (0, 0)))
    view = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(1, 2))   # [N, H, W, C, 3, 3]
    return view.transpose(0, 1, 2, 4, 5, 3)


def np_conv(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    n, h, wd, c = x.shape
    return (np.ascontiguousarray(_windows(x)).reshape(n * h * wd, 9 * c) @ w.reshape(9 * c, -1)).reshape(n, h, wd, -1)


def np_conv_grads(x: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """d/dx and d/dw of sum(conv(x, w) ** 2), as a NumPy user writes them: the filter's
    gradient the windows by the output's gradient, the input's a correlation of the output's
    gradient with the flipped, transposed filter."""
    n, h, wd, c = x.shape
    g = 2 * np_conv(x, w)
    dw = (np.ascontiguousarray(_windows(x)).reshape(n * h * wd, 9 * c).T @ g.reshape(n * h * wd, -1)).reshape(w.shape)
    dx = np_conv(g, np.ascontiguousarray(w[::-1, ::-1].transpose(0, 1, 3, 2)))
    return dx, dw


def _fj_functions() -> tuple[Any, Any]:
    import flowjit as fj

    def conv(x, w):
        return fj.conv2d(x, w, padding="SAME")

    def grads(x, w):
        return fj.grad(lambda x, w: fj.sum(fj.conv2d(x, w, padding="SAME") ** 2), argnums=(0, 1))(x, w)
    return conv, grads


def _fj_grads_builder(grads: Any, args: list) -> Any:
    def build():
        import flowjit as fj
        f = fj.function(grads)
        return lambda: f(*args)[1]
    return build


def _jax_builder(ctx: Ctx, grad: bool, args: list) -> Any:
    def build():
        jax = ctx.module("jax")
        jnp = jax.numpy

        def conv(x, w):
            return jax.lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
        f = jax.jit(jax.grad(lambda x, w: jnp.sum(conv(x, w) ** 2), argnums=(0, 1)) if grad else conv)
        dev = [jax.device_put(a) for a in args]

        def call():
            out = jax.block_until_ready(f(*dev))
            return out[1] if grad else out
        return call
    return build


def _torch_builder(ctx: Ctx, grad: bool, args: list, compiled: bool) -> Any:
    def build():
        torch = ctx.module("torch")
        F = torch.nn.functional

        def conv(x, w):
            # NHWC data read as channels-last NCHW (no copy), the HWIO filter as OIHW.
            return F.conv2d(x.permute(0, 3, 1, 2), w.permute(3, 2, 0, 1), padding=PAD).permute(0, 2, 3, 1)

        def grads(x, w):
            x, w = x.detach().requires_grad_(), w.detach().requires_grad_()
            dx, dw = torch.autograd.grad((conv(x, w) ** 2).sum(), (x, w))
            return dw
        f = grads if grad else conv
        if compiled:
            f = torch.compile(f)
        ts = [torch.from_numpy(a) for a in args]

        def call():
            if grad:
                return f(*ts)
            with torch.no_grad():
                return f(*ts)
        return call
    return build


def _blas_rate(x: np.ndarray, w: np.ndarray, repeat: int) -> float:
    """GFLOP/s of one image's forward product as one float32 GEMM on its windows, made
    beforehand: the BLAS's rate on operands in cache, which a convolution's GEMMs can reach."""
    _, h, wd, c = x.shape
    a = np.ascontiguousarray(_windows(x[:1])).reshape(h * wd, 9 * c)
    b = w.reshape(9 * c, -1)
    out = np.empty((a.shape[0], b.shape[1]), np.float32)
    times = []
    for _ in range(max(20, 10 * repeat)):
        t0 = time.perf_counter()
        np.matmul(a, b, out=out)
        times.append(time.perf_counter() - t0)
    return 2 * a.shape[0] * a.shape[1] * b.shape[1] / float(np.median(times)) / 1e9


def run(ctx: Ctx) -> list[Row]:
    shape = (2, 8, 8, 16) if ctx.quick else (32, 56, 56, 64)
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape).astype(np.float32)
    w = (rng.standard_normal((3, 3, shape[-1], shape[-1])) / np.sqrt(9 * shape[-1])).astype(np.float32)
    args = [x, w]
    x64, w64 = x.astype(np.float64), w.astype(np.float64)
    flops = 2 * x.size * 9 * w.shape[-1]
    rate = _blas_rate(x, w, ctx.repeat)
    fj_conv, fj_grads = _fj_functions()
    label = f"conv 3x3 SAME {shape[-1]}->{w.shape[-1]} f32[{','.join(map(str, shape))}]"
    rows = []
    for grad in (False, True):
        builders = {"fj": _fj_grads_builder(fj_grads, args) if grad else fj_builder(fj_conv, "llvm", args),
                    "numpy": np_builder((lambda x, w: np_conv_grads(x, w)[1]) if grad else np_conv, args),
                    "jax": _jax_builder(ctx, grad, args),
                    "torch": _torch_builder(ctx, grad, args, compiled=False),
                    "compile": _torch_builder(ctx, grad, args, compiled=True)}
        reference = (np_conv_grads(x64, w64)[1] if grad else np_conv(x64, w64)).astype(np.float32)
        case = Case("conv", f"{label}{', gradient' if grad else ''}", builders, reference=reference,
                    flops=3 * flops if grad else flops,
                    note=f"blas limit: one image's product as one sgemm on its windows, {rate:.0f} GFLOP/s; "
                         + ("the input's and the filter's gradients (the filter's checked)" if grad else
                            "fj.conv2d; JAX: lax.conv_general_dilated; torch: F.conv2d on the channels-last view"))
        row = run_case(case, ctx)
        cell = row.cells.get("fj")
        if cell is not None and cell.ok:
            row.note += f"; flowjit at {case.flops / cell.seconds / 1e9 / rate:.0%} of the limit"
        rows.append(row)
    return rows
