"""Backend-neutral index arithmetic and literals for generated kernel source.

The index arithmetic both emitters share lives in ``flowjit.ir.index_source``; what is
here differs from the CPU emitter's: literals, casts, extremes and affine indices written
for numba.cuda.
"""

from __future__ import annotations

import re

import numpy as np

from flowjit.ir.dtypes import DType
from flowjit.ir.index_source import (
    atom,
    literal,
    np_type,
)


def cast_expr(expr: str, src: DType | None, dst: DType) -> str:
    """``expr`` converted to ``dst`` as ``ndarray.astype`` does (``src``: its dtype when known)."""
    if dst.is_bool:
        return f"({expr} != 0)" if src is not None and not src.is_bool else f"bool({expr})"
    return f"{np_type(dst)}({expr})"


def affine(start: int, step: int, i: str) -> str:
    """``start + step * i`` as source, without the terms that are no-ops."""
    i = atom(i)
    if step == 1:
        return i if start == 0 else f"({i} + {start})"
    return f"({start} + {step} * {i})" if start else f"({step} * {i})"


def lowest(d: DType) -> str:
    """The smallest value of ``d`` as source (a max reduction's start)."""
    return "-np.inf" if d.is_float else str(np.iinfo(d.np).min) if d.is_int else "False"


def highest(d: DType) -> str:
    """The largest value of ``d`` as source (a min reduction's start)."""
    return "np.inf" if d.is_float else str(np.iinfo(d.np).max) if d.is_int else "True"


_NUMBER = re.compile(r"(?<![\w.])(\d+(?:\.\d*)?)(?![\w.])")
_POW_CONST = re.compile(r"\bpow\((\w+), np\.(?:float|int)\d+\((-?\d+)(?:\.0)?\)\)")


def typed_numbers(template: str, d: DType) -> str:
    """A registry scalar template with its bare number literals given float dtype ``d``:
    numba would otherwise compute ``1 / x`` of a float32 in float64 (on a GPU, at a
    fraction of the float32 rate)."""
    if not d.is_float or d.name == "float16":
        return template
    return _NUMBER.sub(lambda m: literal(float(m.group(1)), d), template)

