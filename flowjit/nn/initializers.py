"""Weight initializers: ``init(key, shape, dtype) -> np.ndarray``, as in ``jax.nn.initializers``.

Fans follow Keras: a 2-D ``(in, out)`` kernel has fan-in ``in`` and fan-out ``out``; a
convolution kernel ``(h, w, in, out)`` multiplies both by the receptive field ``h * w``.
The numbers come from ``fj.random`` with the explicit key (or an int seed), so a seed
reproduces a model.
"""

from __future__ import annotations

import math
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


