"""Arrays filled with a value: ``full``, ``zeros``, ``ones``, ``empty``, their ``*_like``
forms, and ``iota`` (the index along an axis). Numerical ranges are in ``ranges``, ``eye``
in ``matrices``."""

from __future__ import annotations

from typing import Any

from flowjit.ir.dtypes import dtype as as_dtype
from flowjit.ir.dtypes import float64
from flowjit.tracer.core import bind
from flowjit.tracer.numpy.layout import broadcast_to
from flowjit.tracer.numpy.operands import ArrayLike, as_operand, cast, on_device, operand_value, shape_tuple, strong

__all__: list[str] = [
    "empty", "empty_like", "full", "full_like", "iota", "ones", "ones_like", "zeros", "zeros_like",
]


def full(shape: Any, fill_value: ArrayLike, dtype: Any = None, *, device: Any = None) -> Any:
    """An array of ``shape`` filled with ``fill_value`` (on ``device``, as ``fj.device``)."""
    o = as_operand(fill_value, "fill_value")
    d = as_dtype(dtype) if dtype is not None else o.dtype
    with on_device(device):
        return broadcast_to(operand_value(strong(cast(o, d))), shape_tuple(shape))


def zeros(shape: Any, dtype: Any = None, *, device: Any = None) -> Any:
    """An array of zeros (float64 by default, as NumPy)."""
    return full(shape, 0, float64 if dtype is None else dtype, device=device)


def ones(shape: Any, dtype: Any = None, *, device: Any = None) -> Any:
    """An array of ones (float64 by default, as NumPy)."""
    return full(shape, 1, float64 if dtype is None else dtype, device=device)


def empty(shape: Any, dtype: Any = None, *, device: Any = None) -> Any:
    """An array of ``shape`` whose values do not matter (zeros: a traced program has no
    uninitialized memory to hand out)."""
    return zeros(shape, dtype, device=device)


def full_like(x: ArrayLike, fill_value: ArrayLike, dtype: Any = None, *, device: Any = None) -> Any:
    """An array shaped like ``x`` filled with ``fill_value`` (x's dtype unless given)."""
    o = as_operand(x)
    return full(o.shape, fill_value, dtype if dtype is not None else o.dtype, device=device)


def zeros_like(x: ArrayLike, dtype: Any = None, *, device: Any = None) -> Any:
    """Zeros shaped like ``x``."""
    return full_like(x, 0, dtype, device=device)


def ones_like(x: ArrayLike, dtype: Any = None, *, device: Any = None) -> Any:
    """Ones shaped like ``x``."""
    return full_like(x, 1, dtype, device=device)


def empty_like(x: ArrayLike, dtype: Any = None, *, device: Any = None) -> Any:
    """An array like ``x`` whose values do not matter (zeros, as ``empty``)."""
    return full_like(x, 0, dtype, device=device)


def iota(dtype: Any, shape: Any, dimension: int = 0) -> Any:
    """The index along ``dimension`` at each position of an array of ``shape``."""
    return bind("iota", [], {"shape": shape_tuple(shape), "dimension": dimension, "dtype": as_dtype(dtype)})
