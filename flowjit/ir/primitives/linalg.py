"""Linear-algebra primitives: matmul and conv2d, the contractions backends hand to a library.

Both are ``opaque`` to fusion: a backend lowers them to a BLAS/cuDNN call or a hand-written
kernel rather than to a loop nest of scalar templates. A convolution decomposes (``defdecompose``)
into ``conv_patches``, a layout op gathering each output position's window (a kernel that fuses
with what produces the input), and one matmul of the patches by the filter; a grouped one
(``groups``: PyTorch's ``groups``, XLA's ``feature_group_count``) into a batch of those
products, one a group, and a depthwise one (one input channel a group) into the windows'
taps times the filter summed, a kernel of its own. Operands share one dtype (the
tracer inserts casts); f16 references accumulate in f32 and round once, as the kernels do.
conv2d follows TensorFlow's layout (NHWC input, HWIO filter) and its SAME/VALID padding;
``conv2d_padding`` is the one place that turns a padding attribute into explicit pads.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from flowjit.ir.dtypes import COMPLEX_DTYPES, FLOAT_DTYPES, NUMERIC_DTYPES, float16, float32, float64
from flowjit.ir.errors import ShapeError
from flowjit.ir.registry import attr, broadcast_shapes, declare, defdecompose, defvjp, same_dtype
from flowjit.ir.types import TensorType

Pads = tuple[tuple[int, int], tuple[int, int]]
# A depthwise convolution of up to this many taps (5x5) is one elementwise kernel adding the
# taps' products one by one; a larger one sums them over a taps axis (the expression would
# grow with the filter, and LLVM's time with it).
DEPTHWISE_TAPS_MAX = 25
# A grouped convolution (more than one channel a group) whose output channel sums at most
# this many products (KH*KW*C/G) is one loop-level kernel summing them, where a batch of
# G products was the BLAS on products too thin to run well: [25088, 72] by [72, 8] a
# group for 8 groups of 64 channels. It is the lowering's SUM_BLOCK: a float32 sum over
# middle axes of that many terms a cell adds in float32 (a longer one in float64, whose
# conversions cost the direct form what it wins).
GROUPED_DIRECT_TERMS = 128


def _acc_dtype(d: np.dtype) -> np.dtype:
    return np.dtype(np.float32) if d == float16.np else d


# ---- matmul -------------------------------------------------------------------------------
def _matmul_rule(in_types: Sequence[TensorType]) -> TensorType:
    a, b = in_types
    if a.ndim < 2 or b.ndim < 2:
        raise ShapeError(f"operands must have rank >= 2 ([..., m, k] @ [..., k, n]), got {a} and {b}")
    d = same_dtype(in_types)
    if a.shape[-1] != b.shape[-2]:
        raise ShapeError(f"contracted dimensions differ: {a} has k={a.shape[-1]}, "
                         f"{b} has k={b.shape[-2]}")
    try:
        batch = broadcast_shapes(a.shape[:-2], b.shape[:-2])
    except ShapeError:
        raise ShapeError(f"batch dimensions of {a} and {b} do not broadcast together") from None
    return TensorType(batch + (a.shape[-2], b.shape[-1]), d)


def _matmul_impl(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    acc = _acc_dtype(a.dtype)
    # f16 overflow to inf is the result, as NumPy gives it, not a warning.
    with np.errstate(all="ignore"):
        r = np.matmul(a.astype(acc, copy=False), b.astype(acc, copy=False))
        return np.asarray(r).astype(a.dtype, copy=False)


declare("matmul", kind="opaque", role="matrix_product", rule=_matmul_rule, impl=_matmul_impl, arity=2,
        dtypes=NUMERIC_DTYPES + COMPLEX_DTYPES, differentiable=True,
        doc="[..., m, k] @ [..., k, n] -> [..., m, n], batch dims broadcast as np.matmul; "
            "ints wrap")


def _matmul_decompose(e, a, b):
    # BLAS multiplies float32 and float64 (complex too, outside the native program): those
    # stay products. float16 is the float32 product rounded, as the reference computes it;
    # integers are the products summed over k in a kernel of their own, which wraps as
    # NumPy's integer matmul does and reads b's rows contiguously.
    d = a.type.dtype
    if d.is_complex or d.name in ("float32", "float64"):
        return None
    if d.is_float:
        return [e.cast(e.matmul(e.cast(a, dtype=float32), e.cast(b, dtype=float32)), dtype=d)]
    (m, k), n = a.type.shape[-2:], b.type.shape[-1]
    batch = broadcast_shapes(a.type.shape[:-2], b.type.shape[:-2])
    full = (*batch, m, k, n)
    terms = e.mul(e.broadcast_to(e.expand_dims(a, axes=(a.type.ndim,)), shape=full),
                  e.broadcast_to(e.expand_dims(b, axes=(b.type.ndim - 2,)), shape=full))
    return [e.reduce_sum(terms, axes=(len(full) - 2,))]


defdecompose("matmul", _matmul_decompose)


# ---- conv2d -------------------------------------------------------------------------------
def conv2d_padding(in_hw: Sequence[int], kernel_hw: Sequence[int], strides: Sequence[int],
                   dilation: Sequence[int], padding: str | Sequence[Sequence[int]]) -> Pads:
    """Explicit ``((top, bottom), (left, right))`` pads for a conv2d padding attribute.

    ``"VALID"`` pads nothing; ``"SAME"`` pads as TensorFlow does so that the output has
    ``ceil(in / stride)`` positions, the odd pixel going to the bottom/right; explicit
    pairs are returned as they are. Arguments are assumed already checked by the rule.
    """
    if isinstance(padding, str):
        if padding.upper() == "VALID":
            return ((0, 0), (0, 0))
        pads = []
        for n, k, s, d in zip(in_hw, kernel_hw, strides, dilation):
            out = -(-n // s)
            total = max((out - 1) * s + (k - 1) * d + 1 - n, 0)
            pads.append((total // 2, total - total // 2))
        return (pads[0], pads[1])
    (pt, pb), (pl, pr) = padding
    return ((int(pt), int(pb)), (int(pl), int(pr)))


def _conv2d_rule(in_types: Sequence[TensorType], *, strides: tuple[int, ...],
                 padding: str | tuple[tuple[int, int], ...],
                 dilation: tuple[int, ...], groups: int = 1) -> TensorType:
    x, w = in_types
    if x.ndim != 4:
        raise ShapeError(f"input must be NHWC (rank 4), got {x}")
    if w.ndim != 4:
        raise ShapeError(f"filter must be HWIO (rank 4), got {w}")
    d = same_dtype(in_types)
    if groups < 1:
        raise ShapeError(f"groups={groups} must be >= 1")
    if groups == 1 and w.shape[2] != x.shape[3]:
        raise ShapeError(f"filter {w} expects {w.shape[2]} input channels, input {x} has {x.shape[3]}")
    if groups > 1 and w.shape[2] * groups != x.shape[3]:
        raise ShapeError(f"filter {w} in {groups} groups expects {w.shape[2] * groups} input channels "
                         f"({w.shape[2]} a group), input {x} has {x.shape[3]}")
    if w.shape[3] % groups:
        raise ShapeError(f"filter {w}'s {w.shape[3]} output channels do not split into groups={groups}")
    if w.shape[0] < 1 or w.shape[1] < 1:
        raise ShapeError(f"filter {w} must have non-empty spatial dimensions")
    for name, vals in (("strides", strides), ("dilation", dilation)):
        if len(vals) != 2:
            raise ShapeError(f"{name}={vals} must have 2 entries (height, width)")
        if any(v < 1 for v in vals):
            raise ShapeError(f"{name}={vals} must be >= 1")
    if not isinstance(padding, str):
        if len(padding) != 2:
            raise ShapeError(f"padding={padding} must be SAME, VALID or 2 (low, high) pairs")
        if any(p < 0 for pair in padding for p in pair):
            raise ShapeError(f"padding={padding} must be non-negative")
    pads = conv2d_padding(x.shape[1:3], w.shape[:2], strides, dilation, padding)
    out = []
    for i, axis in enumerate(("height", "width")):
        padded = x.shape[1 + i] + pads[i][0] + pads[i][1]
        span = (w.shape[i] - 1) * dilation[i] + 1
        n = (padded - span) // strides[i] + 1
        if n < 0:
            raise ShapeError(f"filter {w} with dilation {dilation} spans {span} along {axis}, "
                             f"more than the padded input {x} ({padded}) allows")
        out.append(n)
    return TensorType((x.shape[0], out[0], out[1], w.shape[3]), d)


def _out_hw(in_hw: Sequence[int], kernel_hw: Sequence[int], strides: Sequence[int], dilation: Sequence[int],
            pads: Pads) -> tuple[int, int]:
    """The (OH, OW) output positions of a convolution window over the padded input (may be
    <= 0 where the window does not fit: the rule refuses those)."""
    return tuple((n + lo + hi - (k - 1) * d - 1) // s + 1
                 for n, k, s, d, (lo, hi) in zip(in_hw, kernel_hw, strides, dilation, pads))


def _window_taps(x: np.ndarray, kernel: Sequence[int], strides: Sequence[int], dilation: Sequence[int],
                 pads: Pads) -> np.ndarray:
    """Each output position's window of ``x`` [N, H, W, C]: [N, OH, KH, OW, KW, C], 0 where a
    tap falls in the padding. Index arithmetic into the unpadded input, so memory stays
    proportional to the output times the filter, whatever the pads are."""
    n, h, wd, c = x.shape
    (kh, kw), (sh, sw), (dh, dw) = kernel, strides, dilation
    (pt, pb), (pl, pr) = pads
    oh, ow = _out_hw((h, wd), kernel, strides, dilation, pads)
    if min(oh, ow) <= 0 or x.size == 0:
        return np.zeros((n, max(oh, 0), kh, max(ow, 0), kw, c), x.dtype)
    rows = np.arange(oh)[:, None] * sh + np.arange(kh)[None, :] * dh - pt  # [oh, kh]
    cols = np.arange(ow)[:, None] * sw + np.arange(kw)[None, :] * dw - pl  # [ow, kw]
    inside = (((rows >= 0) & (rows < h))[:, :, None, None]
              & ((cols >= 0) & (cols < wd))[None, None, :, :])  # [oh, kh, ow, kw]
    taps = x[:, np.clip(rows, 0, h - 1)[:, :, None, None], np.clip(cols, 0, wd - 1)[None, None, :, :], :]
    return np.where(inside[None, :, :, :, :, None], taps, x.dtype.type(0))


def _conv2d_impl(x: np.ndarray, w: np.ndarray, *, strides: tuple[int, ...],
                 padding: str | tuple[tuple[int, int], ...],
                 dilation: tuple[int, ...], groups: int = 1) -> np.ndarray:
    n, h, wd, _ = x.shape
    kh, kw, _, o = w.shape
    pads = conv2d_padding((h, wd), (kh, kw), strides, dilation, padding)
    oh, ow = _out_hw((h, wd), (kh, kw), strides, dilation, pads)
    acc = _acc_dtype(x.dtype)
    if oh == 0 or ow == 0 or o == 0 or x.size == 0:
        return np.zeros((n, oh, ow, o), dtype=x.dtype)
    patches = _window_taps(x.astype(acc, copy=False), (kh, kw), strides, dilation, pads)  # [n, oh, kh, ow, kw, c]
    with np.errstate(all="ignore"):
        if groups == 1:
            r = np.tensordot(patches, w.astype(acc, copy=False), axes=([2, 4, 5], [0, 1, 2]))
        else:  # group g: its input channels' taps times its filters (output channels g*O/G...)
            cg = w.shape[2]
            taps = patches.reshape(n, oh, kh, ow, kw, groups, cg)
            wg = w.astype(acc, copy=False).reshape(kh, kw, cg, groups, o // groups)
            r = np.einsum("nAkBlgc,klcgo->nABgo", taps, wg, optimize=True).reshape(n, oh, ow, o)
        return np.ascontiguousarray(r.astype(x.dtype, copy=False))


declare("conv2d", kind="opaque", role="convolution", rule=_conv2d_rule, impl=_conv2d_impl, arity=2,
        attrs={"strides": attr("ints", (1, 1)), "padding": attr("padding", "VALID"),
               "dilation": attr("ints", (1, 1)), "groups": attr("int", 1)},
        dtypes=FLOAT_DTYPES, differentiable=True,
        doc="2-D cross-correlation, NHWC input and HWIO filter -> [N, OH, OW, O]; padding "
            "SAME/VALID as TensorFlow, or explicit ((top, bottom), (left, right)); groups G: "
            "the input's channels and the filter's outputs cut into G groups, each convolved "
            "with its own (the filter's I is C/G)")


# ---- conv_patches ----------------------------------------------------------------------------
def _patches_rule(in_types: Sequence[TensorType], *, kernel: tuple[int, ...], strides: tuple[int, ...],
                  dilation: tuple[int, ...], pads: tuple[int, ...]) -> TensorType:
    (x,) = in_types
    if x.ndim != 4:
        raise ShapeError(f"input must be NHWC (rank 4), got {x}")
    if len(kernel) != 2 or len(strides) != 2 or len(dilation) != 2 or len(pads) != 4:
        raise ShapeError(f"kernel={kernel}, strides={strides}, dilation={dilation} need 2 entries and "
                         f"pads={pads} 4 (top, bottom, left, right)")
    if min(*kernel, *strides, *dilation) < 1 or min(pads) < 0:
        raise ShapeError(f"kernel, strides and dilation must be >= 1 and pads >= 0, got {kernel}, {strides}, "
                         f"{dilation}, {pads}")
    out = []
    for i in range(2):
        span = (kernel[i] - 1) * dilation[i] + 1
        n = (x.shape[1 + i] + pads[2 * i] + pads[2 * i + 1] - span) // strides[i] + 1
        if n < 0:
            raise ShapeError(f"a window of {span} does not fit the padded input {x} (pads {pads})")
        out.append(n)
    return x.with_shape((x.shape[0], out[0], out[1], kernel[0], kernel[1], x.shape[3]))


def _patches_impl(x: np.ndarray, *, kernel: tuple[int, ...], strides: tuple[int, ...],
                  dilation: tuple[int, ...], pads: tuple[int, ...]) -> np.ndarray:
    taps = _window_taps(x, kernel, strides, dilation, ((pads[0], pads[1]), (pads[2], pads[3])))
    return np.ascontiguousarray(taps.transpose(0, 1, 3, 2, 4, 5))


def _patches_reads(attrs: dict) -> int:
    """How many windows' taps an input element is, at most: along an axis, the taps t of a
    window at position j reach element i where j * stride + t * dilation = i, which holds
    for every stride / gcd(dilation, stride)-th tap at most."""
    return math.prod(max(1, -(-k * math.gcd(d, s) // s)) for k, s, d in
                     zip(attrs["kernel"], attrs.get("strides", (1, 1)), attrs.get("dilation", (1, 1))))


declare("conv_patches", kind="layout", role="patches", rule=_patches_rule, impl=_patches_impl, reads=_patches_reads,
        attrs={"kernel": attr("ints"), "strides": attr("ints", (1, 1)), "dilation": attr("ints", (1, 1)),
               "pads": attr("ints", (0, 0, 0, 0))},
        dtypes=FLOAT_DTYPES, differentiable=True,
        doc="each output position's window of an NHWC input: [N, OH, OW, KH, KW, C], 0 where a tap falls in "
            "the padding (pads: top, bottom, left, right); what conv2d decomposes into")


def _windows(e, x, kernel, strides, dilation, pads):
    """``x``'s windows [N, OH, OW, KH, KW, C] (``x`` itself, [N, H, W, C], for a 1x1 kernel
    that neither strides nor pads: the taps are the input as it is)."""
    if tuple(kernel) == (1, 1) and tuple(strides) == (1, 1) and tuple(pads) == (0, 0, 0, 0):
        return x
    return e.conv_patches(x, kernel=tuple(kernel), strides=tuple(strides), dilation=tuple(dilation),
                          pads=tuple(pads))


def _tap_range(n: int, out: int, stride: int, offset: int) -> tuple[int, int, int] | None:
    """Along one axis, the output positions ``i`` whose tap ``i * stride + offset`` falls
    inside an input of ``n``: ``(first, count, first input index)``, None when none does."""
    first = max(0, -(offset // stride))   # the first i with i * stride + offset >= 0
    end = min(out, (n - 1 - offset) // stride + 1) if n - 1 - offset >= 0 else 0
    if end <= first:
        return None
    return first, end - first, first * stride + offset


def _tap(e, x, rows, cols, strides, out_hw):
    """One tap of a convolution's windows, [N, OH, OW, C]: the input's entries it reads, a
    strided slice, padded with zeros where it falls outside (a slice and a pad of their own
    for each tap, which fuse into the kernel reading them: one padded copy of the input
    shared by the taps would be a kernel and a pass over memory of its own)."""
    n, _, _, c = x.type.shape
    (r0, rn, rx), (c0, cn, cx) = rows, cols
    t = e.slice(x, start=(0, rx, cx, 0), size=(n, rn, cn, c), step=(1, strides[0], strides[1], 1))
    high = (out_hw[0] - r0 - rn, out_hw[1] - c0 - cn)
    if (r0, c0) == (0, 0) and high == (0, 0):
        return t
    return e.pad(t, low=(0, r0, c0, 0), high=(0, high[0], high[1], 0), value=0.0)


def _conv2d_decompose(e, x, w, *, strides, padding, dilation, groups=1):
    # The windows' taps in the filter's (KH, KW, C) order, times the filter as a matrix: one
    # GEMM of [N*OH*OW, KH*KW*C] by [KH*KW*C, O]. A 1x1 convolution reads its input as it is.
    n, h, wd, c = x.type.shape
    kh, kw, cg, o = w.type.shape
    (pt, pb), (pl, pr) = conv2d_padding((h, wd), (kh, kw), strides, dilation, padding)
    pads = (pt, pb, pl, pr)
    if groups == 1:
        rows = _windows(e, x, (kh, kw), strides, dilation, pads)
        oh, ow = rows.type.shape[1:3]
        y = e.matmul(e.reshape(rows, shape=(n * oh * ow, kh * kw * c)), e.reshape(w, shape=(kh * kw * c, o)))
        return [e.reshape(y, shape=(n, oh, ow, o))]
    og = o // groups
    if cg == 1 and kh * kw <= DEPTHWISE_TAPS_MAX:
        # Depthwise: each channel's taps times its own filters, added up tap by tap, one
        # elementwise kernel summing in the dtype as written (a product of K=KH*KW a channel
        # would be a BLAS call per channel for nine multiply-adds a row; a sum over a taps
        # axis, a temp of the whole output).
        oh, ow = _out_hw((h, wd), (kh, kw), strides, dilation, ((pt, pb), (pl, pr)))
        full = (n, oh, ow, c, og)
        total = None
        for p in range(kh):
            rows = _tap_range(h, oh, strides[0], p * dilation[0] - pt)
            for q in range(kw):
                cols = _tap_range(wd, ow, strides[1], q * dilation[1] - pl)
                if rows is None or cols is None or n * c == 0:
                    continue  # the tap reads only padding
                tap = _tap(e, x, rows, cols, strides, (oh, ow))
                taps = e.slice(w, start=(p, q, 0, 0), size=(1, 1, 1, o), step=(1, 1, 1, 1))
                term = e.mul(e.broadcast_to(e.reshape(tap, shape=(n, oh, ow, c, 1)), shape=full),
                             e.broadcast_to(e.reshape(taps, shape=(1, 1, 1, c, og)), shape=full))
                total = term if total is None else e.add(total, term)
        if total is None:
            return [e.zeros(TensorType((n, oh, ow, o), x.type.dtype))]
        return [e.reshape(total, shape=(n, oh, ow, o))]
    if cg == 1:
        # A larger depthwise filter: the taps' products summed over the filter's two axes, in
        # its row-major order, two loops whose indices are the tap's row and column (over one
        # merged taps axis each index divided the merged one and took its remainder, a score
        # of scalar instructions a tap; the same time, steady and cold, and the same bits).
        # The batch stays an axis of its own, not folded into the rows: a library compiled for
        # any batch size needs the kernel's loops over it apart.
        rows = _windows(e, x, (kh, kw), strides, dilation, pads)
        oh, ow = rows.type.shape[1:3]
        full = (n, oh, ow, kh, kw, c, og)
        terms = e.mul(e.broadcast_to(e.reshape(rows, shape=(n, oh, ow, kh, kw, c, 1)), shape=full),
                      e.broadcast_to(e.reshape(w, shape=(1, 1, 1, kh, kw, c, og)), shape=full))
        return [e.reshape(e.reduce_sum(terms, axes=(3, 4), keepdims=False), shape=(n, oh, ow, o))]
    rows = _windows(e, x, (kh, kw), strides, dilation, pads)
    oh, ow = rows.type.shape[1:3]
    if kh * kw * cg <= GROUPED_DIRECT_TERMS and x.type.dtype in (float32, float64):
        # Each output channel's products summed over the filter's axes and its group's
        # channels, in one kernel (GROUPED_DIRECT_TERMS).
        full = (n, oh, ow, kh, kw, groups, cg, og)
        taps = e.broadcast_to(e.reshape(rows, shape=(n, oh, ow, kh, kw, groups, cg, 1)), shape=full)
        filters = e.reshape(e.transpose(e.reshape(w, shape=(kh, kw, cg, groups, og)), perm=(0, 1, 3, 2, 4)),
                            shape=(1, 1, 1, kh, kw, groups, cg, og))
        terms = e.mul(taps, e.broadcast_to(filters, shape=full))
        return [e.reshape(e.reduce_sum(terms, axes=(3, 4, 6), keepdims=False), shape=(n, oh, ow, o))]
    return [_grouped_products(e, rows, w, groups)]


def _grouped_products(e, rows, w, groups):
    """A grouped convolution of windows ``rows`` [N, OH, OW, KH, KW, C] by ``w`` [KH, KW,
    C/G, O] as a batch of G products: each group's taps moved to rows of their own, [G,
    N*OH*OW, KH*KW*C/G] (one kernel writing them from the input), times its filters. (Not the
    input's groups moved into its batch first, [G*N, H, W, C/G]: a library compiled for any
    batch size cannot index a batch axis of G*N.)"""
    n, oh, ow = rows.type.shape[:3]
    kh, kw, cg, o = w.type.shape
    og = o // groups
    m, k = n * oh * ow, kh * kw * cg
    rows = e.transpose(e.reshape(rows, shape=(n, oh, ow, kh, kw, groups, cg)), perm=(5, 0, 1, 2, 3, 4, 6))
    ws = e.reshape(e.transpose(e.reshape(w, shape=(kh, kw, cg, groups, og)), perm=(3, 0, 1, 2, 4)),
                   shape=(groups, k, og))
    y = e.matmul(e.reshape(rows, shape=(groups, m, k)), ws)  # [G, M, O/G]
    y = e.transpose(e.reshape(y, shape=(groups, n, oh, ow, og)), perm=(1, 2, 3, 0, 4))
    return e.reshape(y, shape=(n, oh, ow, o))


defdecompose("conv2d", _conv2d_decompose)


# ---- VJP rules (see Primitive) ------------------------------------------------------------
def _swap_last(e, v):
    n = v.type.ndim
    return e.transpose(v, perm=tuple(range(n - 2)) + (n - 1, n - 2))


def _matmul_vjp(e, g, y, a, b):
    # Batch dimensions broadcast as in np.matmul, so each cotangent is summed back.
    da = e.unbroadcast(e.matmul(g, _swap_last(e, b)), a.type)
    if a.type.ndim > 2 and b.type.ndim == 2:
        # A matrix applied to a batch (a dense layer on (B, T, D)): the batch's products
        # summed are one product over the rows of all of them, a^T g with a and g read as
        # (rows, K) and (rows, N). A batch of products then their sum wrote the batch's
        # partial results (8 x 1024 x 256 in the zoo transformer's MLP) and read them again.
        k, n = b.type.shape
        rows = math.prod(a.type.shape[:-1])
        db = e.matmul(_swap_last(e, e.reshape(a, shape=(rows, k))), e.reshape(g, shape=(rows, n)))
    else:
        db = e.unbroadcast(e.matmul(_swap_last(e, a), g), b.type)
    return [da, db]


defvjp("matmul", _matmul_vjp)


def _conv2d_vjp(e, g, y, x, w, *, strides, padding, dilation, groups=1):
    n, h, wd, c = x.type.shape
    kh, kw, cg, o = w.type.shape
    (pt, pb), (pl, pr) = conv2d_padding((h, wd), (kh, kw), strides, dilation, padding)
    oh, ow = g.type.shape[1:3]
    (sh, sw), (dh, dw) = strides, dilation
    span_h, span_w = (kh - 1) * dh + 1, (kw - 1) * dw + 1
    rest_h = h + pt + pb - ((oh - 1) * sh + span_h)  # input rows past the last window
    rest_w = wd + pl + pr - ((ow - 1) * sw + span_w)
    # dx: the transposed convolution. Spread g by the strides, pad by the filter's span,
    # correlate with the flipped filter (in/out channels swapped), crop the padding.
    gd = e.embed(e.embed(g, 1, 0, sh, (oh - 1) * sh + 1), 2, 0, sw, (ow - 1) * sw + 1)
    # Grouped, each group's filters flip within it: [KH, KW, O/G, G*C/G], group-major as x's channels.
    flipped = e.slice(w, start=(kh - 1, kw - 1, 0, 0), size=w.type.shape, step=(-1, -1, 1, 1))
    if groups == 1:
        flipped = e.transpose(flipped, perm=(0, 1, 3, 2))
    else:
        og = o // groups
        flipped = e.reshape(e.transpose(e.reshape(flipped, shape=(kh, kw, cg, groups, og)), perm=(0, 1, 4, 3, 2)),
                            shape=(kh, kw, og, groups * cg))
    low, high = (span_h - 1 - pt, span_w - 1 - pl), (span_h - 1 + rest_h - pb, span_w - 1 + rest_w - pr)

    def correlate(pads):
        if groups > 1 and o // groups > 1:
            # Grouped, more than one filter a group: the batch of products. Written as a
            # convolution it would be the direct form (GROUPED_DIRECT_TERMS), reading the
            # flipped filters across their channels (a stride of O/G floats an element) into
            # a temp: with 8 groups of 64 channels the gradient took 44 ms against 31.
            return _grouped_products(e, _windows(e, gd, (kh, kw), (1, 1), dilation, pads), flipped, groups)
        return e.conv2d(gd, flipped, strides=(1, 1), dilation=dilation, groups=groups,
                        padding=((pads[0], pads[1]), (pads[2], pads[3])))
    if min(*low, *high) >= 0:
        # The padded input's cotangent cropped to the input's rows and columns is the same
        # correlation with that much less padding: no rows computed to be thrown away.
        dx = correlate((low[0], high[0], low[1], high[1]))
    else:  # the forward's pads are wider than its filter's span: compute them, then crop
        dx_pad = correlate((span_h - 1, span_h - 1 + rest_h, span_w - 1, span_w - 1 + rest_w))
        dx = e.slice(dx_pad, start=(0, pt, pl, 0), size=(n, h, wd, c), step=(1, 1, 1, 1))
    # dw: each tap's input values times g, summed over every output position: the windows'
    # patches (as the forward reads them) transposed times g, one GEMM of [KH*KW*C, M] by
    # [M, O] that reads the patches in place (M = N*OH*OW).
    m = n * oh * ow
    if groups == 1:
        rows = e.reshape(_windows(e, x, (kh, kw), strides, dilation, (pt, pb, pl, pr)), shape=(m, kh * kw * c))
        dw = e.matmul(e.transpose(rows, perm=(1, 0)), e.reshape(g, shape=(m, o)))
        return [dx, e.reshape(dw, shape=(kh, kw, c, o))]
    # Grouped: group j's taps [KH*KW*C/G, M] times its cotangents [M, O/G], a batch of G
    # products; depthwise, each channel's taps times its cotangents summed over the rows.
    og, k = o // groups, kh * kw
    if cg == 1 and k <= DEPTHWISE_TAPS_MAX:
        # Depthwise: a sum over the batch and positions a tap, each tap read as the forward
        # reads it; the sums share one pass, which computes the cotangent once an element
        # (a sum over a taps axis recomputed it, and whatever made it, for every tap).
        parts = []
        full = (n, oh, ow, c, og)
        gs = e.reshape(g, shape=full)
        for p in range(kh):
            taps_r = _tap_range(h, oh, sh, p * dh - pt)
            for q in range(kw):
                taps_c = _tap_range(wd, ow, sw, q * dw - pl)
                if taps_r is None or taps_c is None or n * c * og == 0:
                    parts.append(e.zeros(TensorType((1, o), g.type.dtype)))
                    continue
                tap = e.broadcast_to(e.reshape(_tap(e, x, taps_r, taps_c, strides, (oh, ow)), shape=(n, oh, ow, c, 1)),
                                     shape=full)
                parts.append(e.reshape(e.reduce_sum(e.mul(tap, gs), axes=(0, 1, 2), keepdims=False), shape=(1, o)))
        return [dx, e.reshape(e.concatenate(*parts, axis=0), shape=(kh, kw, 1, o))]
    rows = _windows(e, x, (kh, kw), strides, dilation, (pt, pb, pl, pr))
    if cg == 1:
        # The filter's two axes kept apart, as the forward sums them (no division of a merged
        # taps index in the kernel's loops).
        full = (n, oh, ow, kh, kw, c, og)
        terms = e.mul(e.broadcast_to(e.reshape(rows, shape=(n, oh, ow, kh, kw, c, 1)), shape=full),
                      e.broadcast_to(e.reshape(g, shape=(n, oh, ow, 1, 1, c, og)), shape=full))
        return [dx, e.reshape(e.reduce_sum(terms, axes=(0, 1, 2), keepdims=False), shape=(kh, kw, 1, o))]
    taps = e.reshape(e.transpose(e.reshape(rows, shape=(m, k, groups, cg)), perm=(2, 1, 3, 0)),
                     shape=(groups, k * cg, m))
    gs = e.transpose(e.reshape(g, shape=(m, groups, og)), perm=(1, 0, 2))
    dw = e.reshape(e.matmul(taps, gs), shape=(groups, kh, kw, cg, og))
    return [dx, e.reshape(e.transpose(dw, perm=(1, 2, 3, 0, 4)), shape=(kh, kw, cg, o))]


defvjp("conv2d", _conv2d_vjp)


def _patches_vjp(e, g, y, x, *, kernel, strides, dilation, pads):
    # Each tap's cotangents go back to the input positions it read: spread by the strides
    # onto the padded input at the tap's offset, summed over the taps, the padding cropped.
    n, h, wd, c = x.type.shape
    (kh, kw), (sh, sw), (dh, dw) = kernel, strides, dilation
    pt, pb, pl, pr = pads
    oh, ow = g.type.shape[1:3]
    total = None
    for p in range(kh):
        for q in range(kw):
            tap = e.reshape(e.slice(g, start=(0, 0, 0, p, q, 0), size=(n, oh, ow, 1, 1, c), step=(1,) * 6),
                            shape=(n, oh, ow, c))
            spread = e.embed(e.embed(tap, 1, p * dh, sh, h + pt + pb), 2, q * dw, sw, wd + pl + pr)
            total = spread if total is None else e.add(total, spread)
    return [e.slice(total, start=(0, pt, pl, 0), size=(n, h, wd, c), step=(1, 1, 1, 1))]


defvjp("conv_patches", _patches_vjp)
