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

from flowjit.ir.core import Op, Value
from flowjit.ir.dtypes import DType
from flowjit.ir.primitives.layout import pad_fill


def np_type(d: DType) -> str:
    """The NumPy scalar type of ``d`` as source (``np.float32``)."""
    return "np.bool_" if d.is_bool else f"np.{d.name}"


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


def cast_expr(expr: str, src: DType | None, dst: DType) -> str:
    """``expr`` converted to ``dst`` as ``ndarray.astype`` does (``src``: its dtype when known)."""
    if dst.is_bool:
        return f"({expr} != 0)" if src is not None and not src.is_bool else f"bool({expr})"
    if src is not None and src.is_float and dst.is_int and (dst.itemsize < 4 or dst.is_unsigned):
        # NumPy's C casts on x86: a narrow int through int32, uint32 through int64 (low bits
        # kept, so -1.0 is 2**32 - 1), uint64 through int64 below 2**63 and above it of x - 2**63.
        if dst.is_unsigned and dst.itemsize == 8:
            e = atom(expr)
            return (f"(np.uint64(np.int64({e})) if not {e} >= 9.223372036854775808e18 else "
                    f"(np.uint64(np.int64({e} - 9.223372036854775808e18)) ^ np.uint64(9223372036854775808)))")
        via = "np.int64" if dst.itemsize == 4 else "np.int32"
        return f"{np_type(dst)}({via}({expr}))"
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


def clamp(expr: str, n: str) -> str:
    """``expr`` clamped to ``[0, n)`` as source, naming ``expr`` once: a pad of a pad reads
    a clamp of a clamp, and an index written out more than once grows as a power of the
    depth. The value is made an int64 first: a prange index is unsigned in numba's
    parallel loops, and min and max of it with the signed size would unify to float64,
    which no array takes as an index."""
    return f"min(max(np.int64({expr}), 0), {n} - 1)"


def layout_expression(op: Op, idx: list[str], value: Callable[[Value, list[str]], str],
                      dim: Callable[[int], str],
                      clamp: Callable[[str, str], str] = clamp) -> str | None:
    """The value of layout op ``op`` at index ``idx`` as source, for either emitter:
    ``value(x, index)`` reads an operand at an index, ``dim(n)`` names a size and
    ``clamp(index, size)`` keeps an index in bounds (an emitter without min and max gives
    its own). A layout op
    only rewrites the index: transpose permutes it, a slice scales and shifts it, a reshape
    goes through the linear index (or keeps it when only size-1 axes change), pad and
    concatenate read clamped indices and select. None for a role it has no rule for."""
    role = op.primitive.role
    out = op.results[0].type
    x = op.inputs[0] if op.inputs else None
    a = op.attrs
    if role == "broadcast":
        return value(x, broadcast_index(idx, out.shape, x.type.shape))
    if role == "permute_axes":
        src = [""] * len(idx)
        for k, p in enumerate(a["perm"]):
            src[p % len(idx)] = idx[k]
        return value(x, src)
    squeezed = x is not None and [n for n in out.shape if n != 1] == [n for n in x.type.shape if n != 1]
    if role == "unit_axes_reshape" or (role == "row_major_reshape" and squeezed):
        # Only size-1 axes added or removed: the same index, no division.
        return value(x, unit_axes_index(idx, out.shape, x.type.shape))
    if role == "row_major_reshape":
        return value(x, reshape_index(idx, out.shape, x.type.shape, dim))
    if role == "strided_window":
        return value(x, [affine(s, st, i) for s, st, i in zip(a["start"], a["step"], idx)])
    if role == "axis_index":
        return cast_expr(idx[a["dimension"] % out.ndim], None, out.dtype)
    if role == "constant_pad":
        fill = literal(pad_fill(a["value"], out.dtype), out.dtype)
        if x.type.size == 0:
            return fill
        conds, src = [], []
        for k, (lo, n) in enumerate(zip(a["low"], x.type.shape)):
            j = f"({idx[k]} - {lo})" if lo else idx[k]
            conds.append(f"0 <= {j} < {dim(n)}")
            # Clamped, so the read stays in bounds where the fill is taken.
            src.append(clamp(j, dim(n)))
        inner = value(x, src)
        return f"({inner} if ({' and '.join(conds) or 'True'}) else {fill})"
    if role == "join":
        axis = a["axis"] % out.ndim
        sizes: list[str] = []  # the sizes of the parts so far, along the axis
        pieces = []
        for part in op.inputs:
            n = part.type.shape[axis]
            if n:
                src = list(idx)
                offset = " + ".join(sizes) or "0"
                src[axis] = clamp(f"{idx[axis]} - ({offset})", dim(n))
                pieces.append((f"({' + '.join([*sizes, dim(n)])})", value(part, src)))
                sizes.append(dim(n))
        expr = pieces[-1][1]
        for end, piece in reversed(pieces[:-1]):
            expr = f"({piece} if {idx[axis]} < {end} else {expr})"
        return expr
    return None
