"""Primitives that create values from nothing: ``constant`` and ``iota``."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from flowjit.ir.dtypes import COMPLEX_DTYPES, NUMERIC_DTYPES, DType
from flowjit.ir.dtypes import dtype as as_dtype
from flowjit.ir.errors import FlowjitTypeError, ShapeError
from flowjit.ir.registry import Literal, attr, declare, normalize_axis
from flowjit.ir.types import TensorType


def _constant_rule(in_types: Sequence[TensorType], *, value: Literal) -> TensorType:
    try:
        d = as_dtype(value.array.dtype)
    except FlowjitTypeError as e:
        raise ShapeError(str(e)) from None
    return TensorType(value.array.shape, d)


def _constant_impl(*, value: Literal) -> np.ndarray:
    return value.array


declare("constant", kind="constant", rule=_constant_rule, impl=_constant_impl, arity=0,
        attrs={"value": attr("literal")}, differentiable=False,
        doc="a literal array; its dtype and shape are the literal's")


def _iota_rule(in_types: Sequence[TensorType], *, shape: tuple[int, ...], dimension: int,
               dtype: DType) -> TensorType:
    if dtype not in NUMERIC_DTYPES + COMPLEX_DTYPES:
        raise ShapeError(f"dtype must be numeric, got {dtype}")
    if not shape:
        raise ShapeError("shape must have at least one dimension")
    normalize_axis(dimension, len(shape), "dimension")
    return TensorType(shape, dtype)


def _iota_impl(*, shape: tuple[int, ...], dimension: int, dtype: DType) -> np.ndarray:
    dim = dimension % len(shape)
    idx = np.arange(shape[dim], dtype=dtype.np)
    view = idx.reshape([-1 if i == dim else 1 for i in range(len(shape))])
    return np.ascontiguousarray(np.broadcast_to(view, shape))


declare("iota", kind="layout", role="axis_index", rule=_iota_rule, impl=_iota_impl, arity=0,
        attrs={"shape": attr("shape"), "dimension": attr("int", 0), "dtype": attr("dtype")},
        differentiable=False,
        doc="the index along `dimension` at every position of an array of `shape`")
