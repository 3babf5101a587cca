"""Reference values and ulp distances for the CPU backend's math intrinsics: float32
references are NumPy's float64 functions rounded to float32 (correctly rounded but for rare
double roundings), float64 references NumPy on long double (80-bit on x86) and
``math.erf``; the bounds are the measured maxima of the ports in codegen_cpu.intrinsics.

Accuracy is the distance in units in the last place (ulp) on the integer views of the floats
(so subnormals count, and -0 and +0 are the same point; signs of zero are checked apart)."""

from __future__ import annotations

import math

import numpy as np
from llvmlite import binding


def _host_has_fma() -> bool:
    return bool(binding.get_host_cpu_features().get("fma"))


# Largest ulp distance to the correctly rounded result (the ports' measured maxima: 1, or 2
# for tanh64) ...
MAX_ULP_EXACT = 2
# ... and to NumPy's float32 functions.
MAX_ULP_NUMPY32 = 4
# ... but tanh32, XLA's kind of rational, is 5 ulp from exact and 6 from NumPy, one more on a
# CPU without FMA.
TANH32_ULP = 5 if _host_has_fma() else 6

EXTENDED = np.finfo(np.longdouble).nmant > 52  # else the float64 references are only float64
MAX_ULP_EXACT64 = MAX_ULP_EXACT if EXTENDED else 4


def ulp_distance(a, b):
    """|a - b| in ulps via the integer views; both nan: 0, one nan: huge."""
    a = np.asarray(a)
    b = np.asarray(b)
    assert a.dtype == b.dtype
    ity, mask = (np.int32, 0x7FFFFFFF) if a.dtype == np.float32 else (np.int64, 0x7FFFFFFFFFFFFFFF)
    ia = a.view(ity).astype(np.int64)
    ib = b.view(ity).astype(np.int64)
    ia = np.where(ia < 0, -(ia & mask), ia)  # monotonic: -0 and +0 both map to 0
    ib = np.where(ib < 0, -(ib & mask), ib)
    with np.errstate(over="ignore"):
        same_side = (ia >= 0) == (ib >= 0)
        d = np.where(same_side, np.abs(ia - ib), np.abs(ia) + np.abs(ib))
    d = np.where(d < 0, np.iinfo(np.int64).max, d)  # overflowed: opposite huge values
    an, bn = np.isnan(a), np.isnan(b)
    return np.where(an & bn, 0, np.where(an | bn, np.iinfo(np.int64).max, d))


_erf_vec = np.vectorize(math.erf, otypes=[np.float64])


def reference(name, x):
    """The reference values in x's dtype."""
    with np.errstate(all="ignore"):
        if x.dtype == np.float32:
            xd = x.astype(np.float64)
            if name == "erf":
                return _erf_vec(xd).astype(np.float32)
            if name == "logistic":
                return (1.0 / (1.0 + np.exp(-xd))).astype(np.float32)
            return getattr(np, name)(xd).astype(np.float32)
        if name == "erf":
            return _erf_vec(x)
        xl = x.astype(np.longdouble)
        if name == "logistic":
            return (1 / (1 + np.exp(-xl))).astype(np.float64)
        return getattr(np, name)(xl).astype(np.float64)


SPECIAL64 = [0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 5e-324, -5e-324, 2.2250738585072014e-308, 1e-310,
             1e-300, -1e-300, 1e-20, -1e-20, 1e-8, 0.5, 0.84375, 1.0, 1.25, 2.857142857142857, 6.0, 20.0, 28.0,
             88.72283935546875, 88.7228, 103.97, -103.97, 104.0, -104.0, 709.782712893384, 709.79, -708.4,
             -745.13321910194122, -745.2, 1e300, -1e300, 1.7976931348623157e308, -1.7976931348623157e308]


def grid32():
    """Every 4099th float32 bit pattern (both signs, subnormals, inf, nan) plus dense ranges."""
    sweep = np.arange(0, 2**32, 4099, dtype=np.uint64).astype(np.uint32).view(np.float32)
    rng = np.random.default_rng(32)
    with np.errstate(over="ignore"):
        special = np.array(SPECIAL64, np.float32)
    return np.concatenate([
        sweep, special,
        np.linspace(-10, 10, 200_001, dtype=np.float32),
        np.linspace(-110, 110, 100_001, dtype=np.float32),
        (rng.standard_normal(100_000) * 3).astype(np.float32),
        np.float32(10) ** rng.uniform(-40, 38, 100_000).astype(np.float32),
    ])


def grid64():
    rng = np.random.default_rng(64)
    bits = rng.integers(0, 2**63, 300_000, dtype=np.int64).view(np.float64)
    mags = 10.0 ** rng.uniform(-320, 308, 200_000)
    return np.concatenate([
        bits, -bits[:100_000], mags, -mags[:100_000], np.array(SPECIAL64),
        np.linspace(-10, 10, 200_001), np.linspace(-750, 750, 100_001),
        rng.standard_normal(100_000) * 3,
    ])

