"""Index arithmetic and literals for generated kernel source, shared by every backend's emitter.

A kernel's loops name the index of the value they compute, one source expression per
dimension; these functions map it to the index of an operand (broadcast, size-1 axes,
row-major reshape), write a linear index or a product of sizes, and simplify the
expressions the registry's scalar templates produce. They return Python source text that
the CPU (numba) and CUDA (numba.cuda) emitters both compile.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence

import numpy as np

from flowjit.ir.core import Value
from flowjit.ir.dtypes import DType

_NP_NAMES = {"bool": "np.bool_", "int32": "np.int32", "int64": "np.int64", "float16": "np.float16",
             "float32": "np.float32", "float64": "np.float64"}


def np_type(d: DType) -> str:
    """The NumPy scalar type of ``d`` as source (``np.float32``)."""
    return _NP_NAMES[d.name]


def literal(value: object, d: DType) -> str:
    """A scalar literal of dtype ``d`` as source; inf and nan spelled through NumPy."""
    v = np.asarray(value).astype(d.np)[()]
    if d.is_bool:
        return "True" if v else "False"
    if d.is_float:
        if np.isnan(v):
            return f"{np_type(d)}(np.nan)"
        if np.isinf(v):
            return f"{np_type(d)}({'' if v > 0 else '-'}np.inf)"
        return f"{np_type(d)}({float(v)!r})"
    return f"{np_type(d)}({int(v)})"


_POW_CONST = re.compile(r"\bpow\((\w+), np\.(?:float|int)\d+\((-?\d+)(?:\.0)?\)\)")


def scalar_constant(v: Value) -> object | None:
    """The value of ``v`` when a constant op makes it and it holds one element."""
    op = v.producer
    if op is None or op.primitive.kind != "constant":
        return None
    arr = op.attrs["value"].array
    return arr.reshape(-1)[0] if arr.size == 1 else None


def broadcast_index(idx: list[str], out_shape: tuple[int, ...], in_shape: tuple[int, ...]) -> list[str]:
    """The index of an operand of ``in_shape`` broadcast (NumPy rules) to ``out_shape``."""
    off = len(out_shape) - len(in_shape)
    return ["0" if n == 1 and out_shape[k + off] != 1 else idx[k + off] for k, n in enumerate(in_shape)]


def unit_axes_index(idx: list[str], out_shape: tuple[int, ...], in_shape: tuple[int, ...]) -> list[str]:
    """The operand index when only size-1 axes were added or removed (squeeze, expand_dims)."""
    kept = [i for i, n in zip(idx, out_shape) if n != 1]
    it = iter(kept)
    return ["0" if n == 1 else next(it) for n in in_shape]


def product(sizes: Sequence[int], dim: Callable[[int], str] = str) -> str:
    """The product of ``sizes`` as source (sizes of 1 left out)."""
    return " * ".join(dim(n) for n in sizes if n != 1) or "1"


def linear_index(idx: list[str], shape: tuple[int, ...] | list[int], dim: Callable[[int], str] = str) -> str:
    """The row-major linear index of ``idx`` into ``shape``; ``dim`` writes a size."""
    shape = list(shape)
    terms = []
    for k, (i, n) in enumerate(zip(idx, shape)):
        if n != 1:
            rest = [m for m in shape[k + 1:] if m != 1]
            terms.append(f"{atom(i)} * {product(rest, dim)}" if rest else i)
    return " + ".join(terms) or "0"


def reshape_index(idx: list[str], out_shape: tuple[int, ...], in_shape: tuple[int, ...],
                  dim: Callable[[int], str] = str) -> list[str]:
    """The operand index of a row-major reshape: through the linear index."""
    if math.prod(in_shape) <= 1:
        return ["0"] * len(in_shape)
    lin = f"({linear_index(idx, out_shape, dim)})"
    src = []
    leading = True  # the first axis of size > 1 needs no modulo
    for k, n in enumerate(in_shape):
        if n == 1:
            src.append("0")
            continue
        rest = [m for m in in_shape[k + 1:] if m != 1]
        part = f"({lin} // {atom(product(rest, dim))})" if rest else lin
        src.append(part if leading else f"({part} % {dim(n)})")
        leading = False
    return src


def atom(expr: str) -> str:
    """``expr`` safe to use as an operand of any operator: parenthesized unless it is a name or number."""
    return expr if re.fullmatch(r"\w+", expr) else f"({expr})"


def reduce_strength(expr: str) -> str:
    """``pow(x, n)`` with a literal integer 2 <= n <= 4 as multiplies (libm's pow is a call
    that keeps the loop from vectorizing; gelu's ``x**3`` is the common case)."""
    def repl(m: re.Match) -> str:
        n = int(m.group(2))
        if not 2 <= n <= 4:
            return m.group(0)
        x = m.group(1)
        return f"({x} * {x})" if n == 2 else f"({x} * {x} * {x})" if n == 3 else f"(({x} * {x}) * ({x} * {x}))"
    return _POW_CONST.sub(repl, expr)
