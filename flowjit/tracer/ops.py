"""``fj.ops``: ``jax.ops``' segment reductions, traced, compiled and differentiated.

``segment_sum(data, segment_ids, num_segments)`` is ``out[segment_ids[i]] += data[i]`` over a
result of ``num_segments`` rows (a graph network's messages summed per node, a ragged batch
pooled per example); ``segment_prod``, ``segment_max`` and ``segment_min`` combine the same
way. Each is one scatter (``scatter_add``, ``scatter_mul``, ``scatter_max``, ``scatter_min``:
one native kernel) into a fill of the combine's identity, so an empty segment holds 0, 1,
the dtype's lowest (-inf) or highest (inf), as in JAX. ``segment_ids`` has the shape of
``data``'s leading axes (JAX's one axis, or any number as TensorFlow's
``unsorted_segment_sum``); an id outside ``[0, num_segments)``, negative ones
included, is dropped, as JAX's default ``mode``; ``mode="clip"`` clamps it into range
instead. ``num_segments`` must be a Python int when ``segment_ids`` is traced (the result's
shape depends on it); with concrete ids it defaults to ``max(segment_ids) + 1``.
``indices_are_sorted``, ``unique_indices`` and ``bucket_size`` only promise or tune
something in JAX and are accepted and ignored. Gradients: a sum's is a gather, a product's
the product of the segment's other elements (through zeros too), and a max's or min's is
shared equally by the elements that attain it (JAX's rule).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from flowjit.ir.errors import FlowjitTypeError
from flowjit.tracer.core import Tracer, user_location
from flowjit.tracer.numpy.creation import full
from flowjit.tracer.numpy.index_update import extreme_value
from flowjit.tracer.numpy.indexing import scatter_add, scatter_max, scatter_min, scatter_mul
from flowjit.tracer.numpy.layout import reshape
from flowjit.tracer.numpy.operands import ArrayLike, as_operand, operand_value
from flowjit.tracer.numpy.ufuncs import clip, greater_equal, less, logical_and, where

__all__: list[str] = ["segment_max", "segment_min", "segment_prod", "segment_sum"]


def _identity(kind: str, dtype: Any) -> Any:
    """What an empty segment holds, and what a dropped element is combined as."""
    if kind == "sum":
        return -0.0 if dtype.is_inexact else 0  # x + -0.0 is x; a fill of +0.0 starts the sums
    if kind == "prod":
        return 1
    return extreme_value(dtype, kind == "min")


def _segment(kind: str, scatter: Callable[..., Any], data: ArrayLike, segment_ids: ArrayLike,
             num_segments: int | None, mode: str | None) -> Any:
    name = f"fj.ops.segment_{kind}"
    d = as_operand(data, "data")
    ids = as_operand(segment_ids, "segment_ids")
    if not ids.dtype.is_int:
        raise FlowjitTypeError(f"{name} at {user_location()}: segment_ids must be integers, got {ids.dtype}")
    lead = tuple(ids.shape)
    if tuple(d.shape[:len(lead)]) != lead:
        raise FlowjitTypeError(f"{name} at {user_location()}: segment_ids of shape {list(lead)} must be the "
                               f"leading axes of data, of shape {list(d.shape)}")
    if mode not in (None, "drop", "fill", "clip", "promise_in_bounds"):
        raise FlowjitTypeError(f"{name}(mode={mode!r}) at {user_location()}: mode is one of 'drop', 'fill', "
                               "'clip' and 'promise_in_bounds'")
    if num_segments is None:
        if isinstance(operand_value(ids), Tracer):
            raise FlowjitTypeError(f"{name} at {user_location()}: num_segments is needed when segment_ids are "
                                   "traced (the result's shape depends on it); pass num_segments=<int>")
        concrete = np.asarray(operand_value(ids))
        num_segments = int(concrete.max()) + 1 if concrete.size else 0
    n = int(num_segments)
    rest = tuple(d.shape[len(lead):])
    if n == 0:
        return full((0, *rest), 0, d.dtype)
    x = operand_value(d)
    i = operand_value(ids)
    identity = _identity(kind, d.dtype)
    out = full((n, *rest), identity if kind in ("prod", "max", "min") else 0, d.dtype)
    if mode in ("clip", "promise_in_bounds"):
        return scatter(out, clip(i, 0, n - 1), x, axis=0)
    inside = logical_and(greater_equal(i, 0), less(i, n))
    x = where(reshape(inside, lead + (1,) * len(rest)), x, full((), identity, d.dtype))
    # Negative ids are dropped, not counted from the end: the scatter sees them clamped to
    # row 0 with the identity as their update.
    return scatter(out, clip(i, 0, n - 1), x, axis=0)


def segment_sum(data: ArrayLike, segment_ids: ArrayLike, num_segments: int | None = None,
                indices_are_sorted: bool = False, unique_indices: bool = False,
                bucket_size: int | None = None, mode: str | None = None) -> Any:
    """The sum of ``data``'s rows in each segment: ``out[s] = sum of data[i] where
    segment_ids[i] == s``, 0 for an empty segment (``jax.ops.segment_sum``)."""
    return _segment("sum", scatter_add, data, segment_ids, num_segments, mode)


def segment_prod(data: ArrayLike, segment_ids: ArrayLike, num_segments: int | None = None,
                 indices_are_sorted: bool = False, unique_indices: bool = False,
                 bucket_size: int | None = None, mode: str | None = None) -> Any:
    """The product of ``data``'s rows in each segment, 1 for an empty segment
    (``jax.ops.segment_prod``)."""
    return _segment("prod", scatter_mul, data, segment_ids, num_segments, mode)


def segment_max(data: ArrayLike, segment_ids: ArrayLike, num_segments: int | None = None,
                indices_are_sorted: bool = False, unique_indices: bool = False,
                bucket_size: int | None = None, mode: str | None = None) -> Any:
    """The maximum of ``data``'s rows in each segment, NaN propagating; the dtype's lowest
    value (-inf for floats) for an empty segment (``jax.ops.segment_max``)."""
    return _segment("max", scatter_max, data, segment_ids, num_segments, mode)


def segment_min(data: ArrayLike, segment_ids: ArrayLike, num_segments: int | None = None,
                indices_are_sorted: bool = False, unique_indices: bool = False,
                bucket_size: int | None = None, mode: str | None = None) -> Any:
    """The minimum of ``data``'s rows in each segment, NaN propagating; the dtype's highest
    value (inf for floats) for an empty segment (``jax.ops.segment_min``)."""
    return _segment("min", scatter_min, data, segment_ids, num_segments, mode)
