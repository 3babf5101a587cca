"""Scaled dot-product attention, ``jax.nn.dot_product_attention``'s arguments and results.

Written with ``fj.einsum`` over the heads, so the two products are batched matrix
products on the native path, and the masking and softmax between them fuse into the
kernels around them.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from flowjit.ir.errors import FlowjitTypeError
from flowjit.nn.functional import softmax
from flowjit.tracer.core import user_location
from flowjit.tracer.numpy import namespace as fnp


def _grouped(t: Any, name: str, batch: int, heads: int, groups: int, q_len: int, kv_len: int) -> Any:
    """A bias or mask broadcastable to [B, N, T, S] as [B, K, G, T, S] (N = K * G)."""
    shp = tuple(fnp.shape(t))
    full = (batch, heads * groups, q_len, kv_len)
    if len(shp) > 4 or any(d not in (1, f) for d, f in zip(shp[::-1], full[::-1])):
        raise FlowjitTypeError(f"dot_product_attention at {user_location()}: {name} of shape {list(shp)} does not "
                               f"broadcast to [batch, heads, query length, key length] = {list(full)}")
    t = fnp.reshape(t, (1,) * (4 - len(shp)) + shp)
    b, n = fnp.shape(t)[:2]
    if n == 1:
        return fnp.reshape(t, (b, 1, 1, *fnp.shape(t)[2:]))
    return fnp.reshape(t, (b, heads, groups, *fnp.shape(t)[2:]))


def dot_product_attention(query: Any, key: Any, value: Any, bias: Any = None, mask: Any = None, *,
                          scale: float | None = None, is_causal: bool = False, query_seq_lengths: Any = None,
                          key_value_seq_lengths: Any = None, local_window_size: int | tuple[int, int] | None = None,
                          implementation: str | None = None) -> Any:
    """``softmax(query @ key^T * scale + bias, masked) @ value`` per head, as
    ``jax.nn.dot_product_attention``: ``query`` [B, T, N, H] (or [T, N, H]), ``key`` and
    ``value`` [B, S, K, H] with K dividing N (grouped-query attention: each key head serves
    N / K query heads). ``bias`` adds to and ``mask`` (True: attend) selects the logits,
    each broadcastable to [B, N, T, S]; ``is_causal`` lets query i see keys 0..i,
    ``local_window_size=(left, right)`` keys i-left..i+right, and the sequence lengths
    ([B] integers) hide the padding of each batch row (padded query rows give zeros).
    ``scale`` defaults to 1/sqrt(H). A masked logit is a large finite negative, so a row
    with every key masked attends to all of them evenly, as in JAX. Logits and the softmax
    are at least float32."""
    if implementation not in (None, "xla"):
        raise FlowjitTypeError(f"dot_product_attention(implementation={implementation!r}) at {user_location()}: "
                               "flowjit has one implementation; leave implementation out")
    query, key, value = fnp.asarray(query), fnp.asarray(key), fnp.asarray(value)
    unbatched = len(fnp.shape(query)) == 3
    if unbatched:
        query, key, value = query[None], key[None], value[None]
        if query_seq_lengths is not None or key_value_seq_lengths is not None:
            raise FlowjitTypeError("dot_product_attention: sequence lengths need batched inputs [B, T, N, H]")
    shapes = [list(fnp.shape(t)) for t in (query, key, value)]
    if any(len(s) != 4 for s in shapes) or fnp.shape(key) != fnp.shape(value) or shapes[0][0] != shapes[1][0] \
            or shapes[0][3] != shapes[1][3] or shapes[0][2] % shapes[1][2]:
        raise FlowjitTypeError(f"dot_product_attention at {user_location()}: query {shapes[0]}, key {shapes[1]} "
                               f"and value {shapes[2]} must be [B, T, N, H], [B, S, K, H] and [B, S, K, H] with "
                               "the same B and H and K dividing N")
    batch, q_len, heads, depth = fnp.shape(query)
    kv_len, kv_heads = fnp.shape(key)[1:3]
    groups = heads // kv_heads
    logits_dtype = np.promote_types(np.result_type(np.dtype(query.dtype), np.dtype(key.dtype)), np.float32)
    q = fnp.reshape(query, (batch, q_len, kv_heads, groups, depth))
    logits = fnp.einsum("btkgh,bskh->bkgts", q, key).astype(logits_dtype)
    logits = logits * (1.0 / math.sqrt(depth) if scale is None else scale)
    if bias is not None:
        logits = logits + _grouped(fnp.asarray(bias), "bias", batch, kv_heads, groups, q_len, kv_len)
    keep = None if mask is None else _grouped(fnp.asarray(mask, dtype=bool), "mask", batch, kv_heads, groups,
                                              q_len, kv_len)
    rows = np.arange(q_len)[:, None]
    cols = np.arange(kv_len)[None, :]
    static = np.ones((q_len, kv_len), bool)
    if is_causal:
        static &= cols <= rows
    if local_window_size is not None:
        left, right = (local_window_size, local_window_size) if isinstance(local_window_size, int) \
            else local_window_size
        static &= (cols >= rows - left) & (cols <= rows + right)
    if not static.all():
        keep = static if keep is None else fnp.logical_and(keep, static)
    if query_seq_lengths is not None or key_value_seq_lengths is not None:
        inside = True
        if query_seq_lengths is not None:
            inside = fnp.logical_and(inside, rows < fnp.reshape(fnp.asarray(query_seq_lengths), (batch, 1, 1)))
        if key_value_seq_lengths is not None:
            inside = fnp.logical_and(inside, cols < fnp.reshape(fnp.asarray(key_value_seq_lengths), (batch, 1, 1)))
        inside = fnp.reshape(inside, (batch, 1, 1) + tuple(fnp.shape(inside)[1:]))
        keep = inside if keep is None else fnp.logical_and(keep, inside)
    if keep is not None:
        # JAX's large negative: finite, so a row of masked logits stays a softmax (even).
        large_negative = -0.7 * min(float(np.finfo(logits_dtype).max), float(np.finfo(np.float32).max))
        logits = fnp.where(keep, logits, large_negative)
    probs = softmax(logits, axis=-1).astype(value.dtype)
    out = fnp.reshape(fnp.einsum("bkgts,bskh->btkgh", probs, value), (batch, q_len, heads, depth))
    if query_seq_lengths is not None:
        padded = np.arange(q_len)[None, :] < fnp.reshape(fnp.asarray(query_seq_lengths), (batch, 1))
        out = out * fnp.reshape(padded, (batch, q_len, 1, 1)).astype(out.dtype)
    return out[0] if unbatched else out
