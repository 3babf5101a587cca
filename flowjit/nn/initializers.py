"""Weight initializers: ``init(key, shape, dtype) -> np.ndarray``, as in ``jax.nn.initializers``.

Fans follow Keras: a 2-D ``(in, out)`` kernel has fan-in ``in`` and fan-out ``out``; a
convolution kernel ``(h, w, in, out)`` multiplies both by the receptive field ``h * w``.
The numbers come from ``fj.random`` with the explicit key (or an int seed), so a seed
reproduces a model.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from flowjit.ir.dtypes import dtype as as_dtype
from flowjit.ir.dtypes import float32
from flowjit.tracer import random

Shape = tuple[int, ...]


def _fans(shape: Shape) -> tuple[int, int]:
    if len(shape) < 2:
        n = shape[0] if shape else 1
        return n, n
    receptive = math.prod(shape[:-2])
    return shape[-2] * receptive, shape[-1] * receptive


def _key(key: Any) -> Any:
    return random.key(int(key)) if isinstance(key, (int, np.integer)) else key  # an int is a seed


def _uniform(key: Any, shape: Shape, dtype: Any, limit: float) -> np.ndarray:
    return np.asarray(random.uniform(_key(key), shape, dtype, -limit, limit))


def _normal(key: Any, shape: Shape, dtype: Any, std: float) -> np.ndarray:
    return np.asarray(random.normal(_key(key), shape, dtype) * as_dtype(dtype).np.type(std))


def zeros(key: Any, shape: Shape, dtype: Any = float32) -> np.ndarray:
    """All zeros (the usual bias initializer)."""
    return np.zeros(shape, as_dtype(dtype).np)


def ones(key: Any, shape: Shape, dtype: Any = float32) -> np.ndarray:
    """All ones (the usual layer-norm scale)."""
    return np.ones(shape, as_dtype(dtype).np)


def glorot_uniform(key: Any, shape: Shape, dtype: Any = float32) -> np.ndarray:
    """Uniform in ``±sqrt(6 / (fan_in + fan_out))`` (Glorot and Bengio, 2010; Keras's default)."""
    fan_in, fan_out = _fans(shape)
    return _uniform(key, shape, dtype, math.sqrt(6.0 / (fan_in + fan_out)))


def glorot_normal(key: Any, shape: Shape, dtype: Any = float32) -> np.ndarray:
    """Normal with standard deviation ``sqrt(2 / (fan_in + fan_out))``."""
    fan_in, fan_out = _fans(shape)
    return _normal(key, shape, dtype, math.sqrt(2.0 / (fan_in + fan_out)))


def he_uniform(key: Any, shape: Shape, dtype: Any = float32) -> np.ndarray:
    """Uniform in ``±sqrt(6 / fan_in)`` (He et al., 2015), for ReLU networks."""
    fan_in, _ = _fans(shape)
    return _uniform(key, shape, dtype, math.sqrt(6.0 / fan_in))


def he_normal(key: Any, shape: Shape, dtype: Any = float32) -> np.ndarray:
    """Normal with standard deviation ``sqrt(2 / fan_in)`` (He et al., 2015)."""
    fan_in, _ = _fans(shape)
    return _normal(key, shape, dtype, math.sqrt(2.0 / fan_in))


Initializer = Callable[..., np.ndarray]
# The standard deviation of a standard normal truncated to (-2, 2): variance_scaling divides
# by it so that its truncated draws have the variance asked for (as JAX and Keras do).
TRUNCATED_STD = 0.87962566103423978


def lecun_normal(key: Any, shape: Shape, dtype: Any = float32) -> np.ndarray:
    """Truncated normal (in two standard deviations) of variance ``1 / fan_in`` (LeCun et al.,
    1998; SELU networks); ``variance_scaling(1.0, "fan_in", "truncated_normal")``."""
    return variance_scaling(1.0, "fan_in", "truncated_normal")(key, shape, dtype)


def lecun_uniform(key: Any, shape: Shape, dtype: Any = float32) -> np.ndarray:
    """Uniform in ``±sqrt(3 / fan_in)``; ``variance_scaling(1.0, "fan_in", "uniform")``."""
    return variance_scaling(1.0, "fan_in", "uniform")(key, shape, dtype)


def variance_scaling(scale: float, mode: str, distribution: str) -> Initializer:
    """An initializer of variance ``scale / n``, ``n`` the fan-in, the fan-out or their mean
    (``mode``: "fan_in", "fan_out", "fan_avg"), drawn from ``distribution``: "truncated_normal"
    (a normal truncated to two standard deviations, scaled so that it has that variance),
    "normal" or "uniform" (in ``±sqrt(3 * variance)``), as ``jax.nn.initializers.
    variance_scaling`` (the glorot, he and lecun initializers are its cases)."""
    if mode not in ("fan_in", "fan_out", "fan_avg"):
        raise ValueError(f"variance_scaling: mode must be 'fan_in', 'fan_out' or 'fan_avg', got {mode!r}")
    if distribution not in ("truncated_normal", "normal", "uniform"):
        raise ValueError("variance_scaling: distribution must be 'truncated_normal', 'normal' or 'uniform', "
                         f"got {distribution!r}")

    def init(key: Any, shape: Shape, dtype: Any = float32) -> np.ndarray:
        fan_in, fan_out = _fans(tuple(shape))
        n = {"fan_in": fan_in, "fan_out": fan_out, "fan_avg": (fan_in + fan_out) / 2}[mode]
        variance = scale / max(n, 1)
        if distribution == "uniform":
            return _uniform(key, shape, dtype, math.sqrt(3 * variance))
        if distribution == "normal":
            return _normal(key, shape, dtype, math.sqrt(variance))
        return truncated_normal(math.sqrt(variance) / TRUNCATED_STD)(key, shape, dtype)
    return init


def truncated_normal(stddev: float = 1e-2, lower: float = -2.0, upper: float = 2.0) -> Initializer:
    """An initializer drawing ``stddev`` times a standard normal truncated to ``(lower, upper)``
    (``jax.nn.initializers.truncated_normal``)."""
    def init(key: Any, shape: Shape, dtype: Any = float32) -> np.ndarray:
        z = random.truncated_normal(_key(key), lower, upper, tuple(shape), dtype)
        return np.asarray(z * as_dtype(dtype).np.type(stddev))
    return init


def normal(stddev: float = 1e-2) -> Initializer:
    """An initializer drawing normals of standard deviation ``stddev``."""
    return lambda key, shape, dtype=float32: _normal(key, tuple(shape), dtype, stddev)


def uniform(scale: float = 1e-2) -> Initializer:
    """An initializer drawing uniforms in ``[0, scale)`` (``jax.nn.initializers.uniform``)."""
    return lambda key, shape, dtype=float32: np.asarray(random.uniform(_key(key), tuple(shape), dtype, 0.0, scale))


def constant(value: Any) -> Initializer:
    """An initializer filling every element with ``value``."""
    return lambda key, shape, dtype=float32: np.full(tuple(shape), value, as_dtype(dtype).np)


def orthogonal(scale: float = 1.0, column_axis: int = -1) -> Initializer:
    """An initializer of (semi-)orthogonal matrices times ``scale``: the shape seen as a matrix of
    ``shape[column_axis]`` columns by the product of the other axes as rows, the Q of a
    normal matrix's QR (Saxe et al., 2014; ``jax.nn.initializers.orthogonal``)."""
    def init(key: Any, shape: Shape, dtype: Any = float32) -> np.ndarray:
        shape = tuple(shape)
        if len(shape) < 2:
            raise ValueError(f"orthogonal: an initializer of matrices needs 2 axes or more, got shape {list(shape)}")
        axis = column_axis % len(shape)
        cols = shape[axis]
        rows = math.prod(shape) // cols
        n = max(rows, cols)
        q = np.asarray(random.orthogonal(_key(key), n, (), dtype))[:rows, :cols] * as_dtype(dtype).np.type(scale)
        rest = shape[:axis] + shape[axis + 1:]
        return np.moveaxis(q.reshape(*rest, cols), -1, axis)
    return init
