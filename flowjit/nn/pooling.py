"""Pooling over the spatial axes of NHWC arrays: ``max_pool`` and ``avg_pool``.

Both follow TensorFlow's ``tf.nn.max_pool2d``/``avg_pool2d``: ``window`` and
``strides`` are ints or (h, w) pairs, ``padding`` is ``"VALID"`` or ``"SAME"``, and
average pooling with ``"SAME"`` divides by the number of real (unpadded) elements.
A non-overlapping window that tiles the input becomes one reshape and one reduction;
other windows take the max or sum of the window's strided slices, which fuse into
one elementwise kernel. Average pooling differentiates through those ops; max pooling has
a rule of its own (``custom_vjp``) that gives each window's cotangent to its first
maximum, as TensorFlow, PyTorch and ``lax.reduce_window`` do, where the ops' own rules
(``max``'s, ``maximum``'s) would share it among tied maxima.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from flowjit.ir.errors import FlowjitTypeError
from flowjit.tracer.autodiff import vjp
from flowjit.tracer.custom_gradients import custom_vjp
from flowjit.tracer.numpy import namespace as fnp


def _pair(v: Any, what: str) -> tuple[int, int]:
    if isinstance(v, int):
        return (v, v)
    t = tuple(int(a) for a in v)
    if len(t) != 2:
        raise FlowjitTypeError(f"pool: {what} must be an int or an (h, w) pair, got {v!r}")
    return t


def _geometry(shape: tuple[int, ...], window: Any, strides: Any, padding: str, name: str):
    if len(shape) != 4:
        raise FlowjitTypeError(f"{name}: input must be NHWC (4-D), got shape {list(shape)}")
    win = _pair(window, "window")
    st = _pair(strides if strides is not None else window, "strides")
    if padding not in ("VALID", "SAME"):
        raise FlowjitTypeError(f"{name}: padding must be 'VALID' or 'SAME', got {padding!r}")
    pads, out = [], []
    for size, w, s in zip(shape[1:3], win, st):
        if padding == "VALID":
            if size < w:
                raise FlowjitTypeError(f"{name}: window {win} is larger than the input's spatial shape "
                                       f"{list(shape[1:3])} with padding 'VALID'")
            n = (size - w) // s + 1
            pads.append((0, 0))
        else:
            n = math.ceil(size / s)
            total = max((n - 1) * s + w - size, 0)
            pads.append((total // 2, total - total // 2))
        out.append(n)
    return win, st, pads, out


def _window_slices(x: Any, win, st, out) -> list[Any]:
    return [x[:, i:i + st[0] * (out[0] - 1) + 1:st[0], j:j + st[1] * (out[1] - 1) + 1:st[1], :]
            for i in range(win[0]) for j in range(win[1])]


def max_pool(x: Any, window: Any, strides: Any = None, padding: str = "VALID") -> Any:
    """Maximum over each ``window`` of an NHWC array (``strides`` default to ``window``).
    Its gradient goes to the first maximum of each window in row-major order (a NaN, which
    the maximum propagates, counts as one), as TensorFlow's, PyTorch's and
    ``lax.reduce_window``'s do, not shared among tied maxima (``fj.max``'s rule, like
    ``jnp.max``'s)."""
    shape = tuple(fnp.shape(x))
    win, st, pads, out = _geometry(shape, window, strides, padding, "max_pool")
    padded = tuple(tuple(p) for p in pads) if any(p != (0, 0) for p in pads) else None
    if padded:
        x = fnp.pad(x, ((0, 0), pads[0], pads[1], (0, 0)), constant_values=-np.inf)
    return _pool_max(tuple(win), tuple(st), tuple(out), padded, x)


def _tiled(x: Any, win, st, out) -> Any | None:
    """``x`` (padded) as (n, out_h, win_h, out_w, win_w, c) when its windows tile it; else None."""
    n, h, w, c = fnp.shape(x)
    if tuple(win) != tuple(st) or (h, w) != (out[0] * win[0], out[1] * win[1]):
        return None
    return fnp.reshape(x, (n, out[0], win[0], out[1], win[1], c))


def _window_max(win, st, out, pads, x: Any) -> Any:
    x6 = _tiled(x, win, st, out)
    if x6 is not None:
        return fnp.max(x6, axis=(2, 4))
    slices = _window_slices(x, win, st, out)
    result = slices[0]
    for s in slices[1:]:
        result = fnp.maximum(result, s)
    return result


def _pool_max_fwd(win, st, out, pads, x: Any) -> tuple[Any, Any]:
    y = _window_max(win, st, out, pads, x)
    return y, (x, y)


def _pool_max_bwd(win, st, out, pads, residuals: Any, g: Any) -> tuple[Any]:
    # Each window's first position (row-major) holding its maximum gets the window's
    # cotangent: the least position index among those equal to the maximum, or holding a
    # NaN (the maximum propagates it: a window with a NaN has NaN for its maximum). Padding
    # (``pads``: SAME's, static) holds nothing, so a window of -infs gives its cotangent to
    # its first real -inf, as TensorFlow's and PyTorch's do, not to padding that is cut off.
    x, y = residuals
    real = None
    if pads is not None:
        h, w = fnp.shape(x)[1:3]
        inner = np.zeros((h, w), bool)
        inner[pads[0][0]:h - pads[0][1], pads[1][0]:w - pads[1][1]] = True
        real = inner[None, :, :, None]

    def holds(v: Any, maximum: Any, real: np.ndarray | None) -> Any:
        held = (v == maximum) | fnp.isnan(v)
        return held if real is None else held & real

    k = win[0] * win[1]
    x6 = _tiled(x, win, st, out)
    if x6 is not None:
        position = np.arange(k, dtype=np.int32).reshape(1, 1, win[0], 1, win[1], 1)
        real6 = None if real is None else real.reshape(1, out[0], win[0], out[1], win[1], 1)
        at = fnp.where(holds(x6, fnp.expand_dims(y, (2, 4)), real6), position, np.int32(k))
        first = fnp.min(at, axis=(2, 4), keepdims=True)
        dx6 = fnp.where(position == first, fnp.expand_dims(g, (2, 4)), fnp.zeros((), g.dtype))
        return (fnp.reshape(dx6, fnp.shape(x)),)
    slices, pull = vjp(lambda x: _window_slices(x, win, st, out), x)
    reals = [None] * k if real is None else _window_slices(real, win, st, out)
    first = fnp.full(fnp.shape(y), k, np.int32)
    for p in reversed(range(k)):
        first = fnp.where(holds(slices[p], y, reals[p]), np.int32(p), first)
    zero = fnp.zeros((), g.dtype)
    return (pull([fnp.where(first == p, g, zero) for p in range(k)])[0],)


# The window geometry and the padding are static (nondiff): the rules take them first.
_pool_max = custom_vjp(_window_max, nondiff_argnums=(0, 1, 2, 3)).defvjp(_pool_max_fwd, _pool_max_bwd)


def avg_pool(x: Any, window: Any, strides: Any = None, padding: str = "VALID") -> Any:
    """Mean over each ``window`` of an NHWC array; with ``"SAME"`` padding only real
    elements count (TensorFlow's convention)."""
    shape = tuple(fnp.shape(x))
    win, st, pads, out = _geometry(shape, window, strides, padding, "avg_pool")
    padded = any(p != (0, 0) for p in pads)
    x6 = None if padded else _tiled(x, win, st, out)
    if x6 is not None:
        return fnp.mean(x6, axis=(2, 4))
    if padded:
        x = fnp.pad(x, ((0, 0), pads[0], pads[1], (0, 0)))
    slices = _window_slices(x, win, st, out)
    total = slices[0]
    for s in slices[1:]:
        total = total + s
    if not padded:
        return total * (1.0 / (win[0] * win[1]))
    # How many real elements each window covers: a static count, computed once here.
    ones = np.pad(np.ones(shape[1:3]), pads)
    counts = sum(ones[i:i + st[0] * (out[0] - 1) + 1:st[0], j:j + st[1] * (out[1] - 1) + 1:st[1]]
                 for i in range(win[0]) for j in range(win[1]))
    return total * fnp.astype((1.0 / counts)[None, :, :, None], total.dtype)
