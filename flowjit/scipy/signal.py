"""``flowjit.scipy.signal``: convolution as scipy.signal has it, generalized as autograd's.

``convolve`` is a composition of flowjit ops (zero padding, one gather of sliding windows per
convolved axis, one einsum), so it traces, compiles and differentiates to any order with the
gradients of those ops: no convolution primitive and no hand-written VJP.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from flowjit.ir.errors import ShapeError
from flowjit.tracer.core import user_location
from flowjit.tracer.numpy import namespace as fnp
from flowjit.tracer.numpy import namespace as npx
from flowjit.tracer.numpy.operands import ArrayLike

__all__ = ["convolve"]

_MODES = ("full", "valid", "same")


def _window(n_a: int, n_b: int, mode: str) -> tuple[int, int]:
    """(first index into the full convolution, output length) of ``mode`` along one axis,
    ``n_a`` and ``n_b`` being the lengths of in1 and in2 there (scipy's 'same' is in1-sized)."""
    if mode == "full":
        return 0, n_a + n_b - 1
    if mode == "same":
        return (n_b - 1) // 2, n_a
    return min(n_a, n_b) - 1, abs(n_a - n_b) + 1


def _axes_list(axes: Any, ndim: int, what: str) -> list[int]:
    out = [int(a) % ndim if ndim else int(a) for a in axes]
    if len(set(out)) != len(out):
        raise ShapeError(f"convolve: {what} {list(axes)} repeats an axis (at {user_location()})")
    return out


def convolve(in1: ArrayLike, in2: ArrayLike, mode: str = "full", method: str = "auto",
             axes: Sequence[Sequence[int]] | None = None,
             dot_axes: Sequence[Sequence[int]] | None = None) -> Any:
    """Convolve ``in1`` with ``in2`` as ``scipy.signal.convolve`` (``mode`` 'full', 'valid' or
    'same'; ``method`` is accepted and ignored), generalized as ``autograd.scipy.signal.convolve``:
    ``axes=(axes1, axes2)`` pairs the convolved axes of the two arrays (default: all of them, which
    needs equal ndim), ``dot_axes=(d1, d2)`` pairs axes that are summed over as in ``tensordot``;
    the result's axes are in1's other axes, then in2's other axes, then the convolved ones."""
    if mode not in _MODES:
        raise ValueError(f"convolve: mode {mode!r} is not one of {_MODES} (at {user_location()})")
    a, b = fnp.asarray(in1), fnp.asarray(in2)
    if dot_axes is None:
        dot_axes = ((), ())
    if axes is None:
        if a.ndim != b.ndim:
            raise ShapeError(f"convolve: in1 {tuple(a.shape)} and in2 {tuple(b.shape)} must have the same "
                             f"number of dimensions, or pass axes=(axes1, axes2) (at {user_location()})")
        axes = (range(a.ndim), range(b.ndim))
    conv_a, conv_b = _axes_list(axes[0], a.ndim, "axes[0]"), _axes_list(axes[1], b.ndim, "axes[1]")
    dot_a, dot_b = _axes_list(dot_axes[0], a.ndim, "dot_axes[0]"), _axes_list(dot_axes[1], b.ndim, "dot_axes[1]")
    if len(conv_a) != len(conv_b) or len(dot_a) != len(dot_b):
        raise ShapeError(f"convolve: axes {axes} and dot_axes {dot_axes} must pair as many axes of in1 as "
                         f"of in2 (at {user_location()})")
    for i, j in zip(dot_a, dot_b):
        if a.shape[i] != b.shape[j]:
            raise ShapeError(f"convolve: dot axis {i} of in1 {tuple(a.shape)} and {j} of in2 {tuple(b.shape)} "
                             f"differ in length (at {user_location()})")
    sizes = [(a.shape[i], b.shape[j]) for i, j in zip(conv_a, conv_b)]
    if mode == "valid" and not (all(x >= y for x, y in sizes) or all(x <= y for x, y in sizes)):
        raise ValueError(f"convolve: in mode 'valid' one of in1 {tuple(a.shape)} and in2 {tuple(b.shape)} "
                         f"must be at least as long as the other along every convolved axis {axes} "
                         f"(at {user_location()})")
    windows = [_window(x, y, mode) for x, y in sizes]

    # The full convolution is symmetric: out[n] = sum_j flip(F)[j] * pad(G)[n + j]. The array with
    # the fewer kernel positions is the filter F, so the gathered windows of G are smallest.
    swap = np.prod([y for _, y in sizes]) > np.prod([x for x, _ in sizes])
    g, f = (b, a) if swap else (a, b)
    conv_g, conv_f = (conv_b, conv_a) if swap else (conv_a, conv_b)
    dot_g, dot_f = (dot_b, dot_a) if swap else (dot_a, dot_b)

    letters = iter("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
    sub_a = [next(letters) for _ in range(a.ndim)]
    sub_b = [next(letters) for _ in range(b.ndim)]
    for i, j in zip(dot_a, dot_b):
        sub_b[j] = sub_a[i]
    sub_g, sub_f = (sub_b, sub_a) if swap else (sub_a, sub_b)
    pad_width = [(0, 0)] * g.ndim
    for ig, jf in zip(conv_g, conv_f):
        pad_width[ig] = (f.shape[jf] - 1, f.shape[jf] - 1)
    g = fnp.pad(g, pad_width)
    if conv_f:
        f = npx.flip(f, axis=tuple(conv_f))
    # Each gather turns one convolved axis of G into (kernel position, output position); going
    # from the last axis to the first keeps the positions of the axes not gathered yet.
    expanded = [[s] for s in sub_g]
    for k in sorted(range(len(conv_g)), key=lambda k: -conv_g[k]):
        ig, jf = conv_g[k], conv_f[k]
        start, length = windows[k]
        idx = np.arange(f.shape[jf])[:, None] + np.arange(start, start + length)[None, :]
        g = fnp.take(g, idx, axis=ig)
        n = next(letters)
        expanded[ig] = [sub_f[jf], n]
    out_conv = [expanded[ig][1] for ig in conv_g]
    dot_set = {sub_a[i] for i in dot_a}
    ignore_a = [s for i, s in enumerate(sub_a) if i not in conv_a and s not in dot_set]
    ignore_b = [s for j, s in enumerate(sub_b) if j not in conv_b and s not in dot_set]
    sub_gx = "".join(s for axis in expanded for s in axis)
    spec = f"{sub_gx},{''.join(sub_f)}->{''.join(ignore_a + ignore_b + out_conv)}"
    return fnp.einsum(spec, g, f)
