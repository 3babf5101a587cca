"""Cases for the random primitives: split, fold_in, uniform and normal draws from explicit keys.

Random values have no independent NumPy formula, so each ``expect`` rebuilds the result
element by element from scalar ``threefry2x32`` calls (itself checked against the
published known-answer vectors in test_random_rules.py) and plain Python arithmetic.
"""

from __future__ import annotations

import math

import numpy as np

from flowjit.ir.primitives.random import key_from_seed, threefry2x32
from tests.registry.case import Case

_NP = {"f16": np.float16, "f32": np.float32, "f64": np.float64}


def _words(key: np.ndarray) -> tuple[int, int]:
    k = [int(w) & 0xFFFFFFFF for w in key.tolist()]
    return k[0], k[1]


def _block(key: np.ndarray, stream: int, i: int) -> tuple[int, int]:
    k0, k1 = _words(key)
    y0, y1 = threefry2x32(k0, k1, stream, i)
    return int(y0), int(y1)


def _u53(w0: int, w1: int) -> float:
    return ((w0 << 21) | (w1 >> 11)) * 2.0**-53


def _to_i32(w: int) -> int:
    return w - 2**32 if w >= 2**31 else w


def _expect_split(num: int):
    def expect(key: np.ndarray) -> np.ndarray:
        rows = [[_to_i32(w) for w in _block(key, 2, j)] for j in range(num)]
        return np.array(rows, dtype=np.int32).reshape(num, 2)
    return expect


def _expect_uniform(shape: tuple[int, ...], dt: str):
    def value(a0: int, a1: int) -> float:
        if dt == "f64":
            return _u53(a0, a1)
        if dt == "f32":
            return (a0 >> 8) / 2**24
        return (a0 >> 21) / 2**11

    def expect(key: np.ndarray) -> np.ndarray:
        n = math.prod(shape)
        vals = [value(*_block(key, 0, i)) for i in range(n)]
        return np.array(vals, dtype=_NP[dt]).reshape(shape)
    return expect


def _expect_normal(shape: tuple[int, ...], dt: str):
    def expect(key: np.ndarray) -> np.ndarray:
        n = math.prod(shape)
        vals = []
        for i in range(n):
            u1 = 1.0 - _u53(*_block(key, 0, i))
            u2 = _u53(*_block(key, 1, i))
            vals.append(math.sqrt(-2.0 * math.log(u1)) * math.cos(2.0 * math.pi * u2))
        return np.array(vals, dtype=np.float64).astype(_NP[dt]).reshape(shape)
    return expect


def _random_key(rng: np.random.Generator) -> np.ndarray:
    return rng.integers(-2**31, 2**31, size=2).astype(np.int32)


_KEYS = {
    "zero": np.zeros(2, dtype=np.int32),
    "seed42": key_from_seed(42),
    "neg": np.array([-1, -123456789], dtype=np.int32),
    "rand": _random_key,
}

CASES: list[Case] = []

for _kname, _key in _KEYS.items():
    for _num in (1, 3, 7):
        CASES.append(Case("random_split", [_key], {"num": _num}, _expect_split(_num),
                          id=f"split-{_kname}-{_num}"))

def _expect_fold_in(key: np.ndarray, data: np.ndarray) -> np.ndarray:
    return np.array([_to_i32(w) for w in _block(key, 3, int(data) & 0xFFFFFFFF)], dtype=np.int32)


for _kname, _key in _KEYS.items():
    for _data in (0, 1, 12345, -1, -2**31):
        CASES.append(Case("random_fold_in", [_key, np.array(_data, dtype=np.int32)], {}, _expect_fold_in,
                          id=f"fold_in-{_kname}-{_data}"))

_SHAPES = [(), (1,), (5,), (2, 3), (0,), (3, 0, 2), (2, 2, 3)]

for _dt in ("f16", "f32", "f64"):
    for _shape in _SHAPES:
        for _kname in ("seed42", "rand"):
            CASES.append(Case("random_uniform", [_KEYS[_kname]], {"shape": _shape, "dtype": _dt},
                              _expect_uniform(_shape, _dt), id=f"uniform-{_dt}-{_shape}-{_kname}"))
            CASES.append(Case("random_normal", [_KEYS[_kname]], {"shape": _shape, "dtype": _dt},
                              _expect_normal(_shape, _dt), id=f"normal-{_dt}-{_shape}-{_kname}"))
    for _kname in ("zero", "neg"):
        CASES.append(Case("random_uniform", [_KEYS[_kname]], {"shape": (4,), "dtype": _dt},
                          _expect_uniform((4,), _dt), id=f"uniform-{_dt}-{_kname}"))
        CASES.append(Case("random_normal", [_KEYS[_kname]], {"shape": (4,), "dtype": _dt},
                          _expect_normal((4,), _dt), id=f"normal-{_dt}-{_kname}"))
