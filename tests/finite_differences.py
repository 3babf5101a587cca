"""Central finite differences, the reference every gradient test compares against."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np


def central_differences(f: Callable[..., float], args: Sequence[np.ndarray], i: int, eps: float = 1e-6) -> np.ndarray:
    """d f(*args) / d args[i], element by element: (f(x + eps) - f(x - eps)) / (2 eps)."""
    out = np.zeros_like(args[i])
    for idx in np.ndindex(args[i].shape):
        plus = [np.array(a, copy=True) for a in args]
        minus = [np.array(a, copy=True) for a in args]
        plus[i][idx] += eps
        minus[i][idx] -= eps
        out[idx] = (f(*plus) - f(*minus)) / (2 * eps)
    return out
