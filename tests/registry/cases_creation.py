"""Registry cases for ``constant`` and ``iota``."""

from __future__ import annotations

import numpy as np

from flowjit.ir.registry import Literal
from tests.registry.case import Case


def _const(value: np.ndarray) -> Case:
    return Case("constant", [], {"value": Literal(value)}, lambda v=value: v,
                id=f"constant-{value.dtype}-{value.shape}")


CASES = [
    _const(np.array(2.5, np.float32)),
    _const(np.array([[1, -2], [3, 4]], np.int32)),
    _const(np.array([True, False])),
    _const(np.arange(40, dtype=np.float64).reshape(5, 8) / 7),  # printed as base64
    _const(np.array([np.nan, -0.0, np.inf], np.float16)),
    _const(np.zeros((0, 3), np.int64)),
    Case("iota", [], {"shape": (3, 4), "dimension": 0, "dtype": "i32"},
         lambda: np.broadcast_to(np.arange(3, dtype=np.int32)[:, None], (3, 4)), id="iota-rows"),
    Case("iota", [], {"shape": (3, 4), "dimension": -1, "dtype": "f32"},
         lambda: np.broadcast_to(np.arange(4, dtype=np.float32), (3, 4)), id="iota-cols-f32"),
    Case("iota", [], {"shape": (5,), "dtype": "i64"}, lambda: np.arange(5), id="iota-1d"),
]
