"""Matrix and vector products: ``matmul``, ``dot``, ``tensordot``, ``inner``, ``outer``,
``kron``, ``cross``, ``einsum`` (lowered to transposes, sums and matmuls) and ``conv2d``.
``vecdot`` is in ``flowjit.tracer.linalg`` (the standard's linalg extension)."""

from __future__ import annotations

import builtins
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from flowjit.ir.dtypes import int64
from flowjit.ir.errors import FlowjitTypeError, ShapeError
from flowjit.tracer.core import bind
from flowjit.tracer.numpy.counterparts import numpy_counterpart
from flowjit.tracer.numpy.layout import (
    broadcast_to,
    expand_dims,
    moveaxis,
    ndim,
    ravel,
    reshape,
    shape,
    squeeze,
    transpose,
)
from flowjit.tracer.numpy.manipulation import stack
from flowjit.tracer.numpy.matrices import diagonal
from flowjit.tracer.numpy.operands import (
    ArrayLike,
    as_operand,
    bad_argument,
    cast,
    float_dtype,
    normalize_axis,
    operand_value,
    promote,
)
from flowjit.tracer.numpy.reductions import sum
from flowjit.tracer.numpy.ufuncs import multiply, negative, not_equal, subtract

__all__: list[str] = [
    "conv2d", "cross", "dot", "einsum", "inner", "kron", "matmul", "outer", "tensordot",
]


def matmul(a: ArrayLike, b: ArrayLike) -> Any:
    """Matrix product with NumPy's rules: batch dims broadcast, 1-D operands promoted and dropped."""
    x, y = as_operand(a, "a"), as_operand(b, "b")
    if not x.shape or not y.shape:
        raise FlowjitTypeError(f"matmul: operands must be at least 1-D, got {x.aval} and {y.aval}; "
                               "use * for scalars")
    d = promote(x, y)
    if d.is_bool:
        # NumPy's bool matmul is an or of ands: count the true products, then test for any.
        return not_equal(matmul(operand_value(cast(x, int64)), operand_value(cast(y, int64))), 0)
    x, y = cast(x, d), cast(y, d)
    xv, yv = operand_value(x), operand_value(y)
    if len(x.shape) == 1:
        xv = expand_dims(xv, 0)
    if len(y.shape) == 1:
        yv = expand_dims(yv, 1)
    r = bind("matmul", [as_operand(xv), as_operand(yv)])
    drop = ([-2] if len(x.shape) == 1 else []) + ([-1] if len(y.shape) == 1 else [])
    return squeeze(r, tuple(drop)) if drop else r


def tensordot(a: ArrayLike, b: ArrayLike, axes: Any = 2) -> Any:
    """Sum products over the given axes of a and b, as ``np.tensordot``."""
    x, y = as_operand(a, "a"), as_operand(b, "b")
    if isinstance(axes, int):
        ax_a = list(range(len(x.shape) - axes, len(x.shape)))
        ax_b = list(range(axes))
    else:
        ax_a, ax_b = ([axes[0]] if isinstance(axes[0], int) else list(axes[0]),
                      [axes[1]] if isinstance(axes[1], int) else list(axes[1]))
    ax_a = [i % len(x.shape) for i in ax_a]
    ax_b = [i % len(y.shape) for i in ax_b]
    free_a = [i for i in range(len(x.shape)) if i not in ax_a]
    free_b = [i for i in range(len(y.shape)) if i not in ax_b]
    k = math.prod(x.shape[i] for i in ax_a)
    xa = reshape(transpose(operand_value(x), free_a + ax_a), (math.prod(x.shape[i] for i in free_a), k))
    yb = reshape(transpose(operand_value(y), ax_b + free_b), (k, math.prod(y.shape[i] for i in free_b)))
    return reshape(matmul(xa, yb), [x.shape[i] for i in free_a] + [y.shape[i] for i in free_b])


def dot(a: ArrayLike, b: ArrayLike) -> Any:
    """``np.dot``: scalars multiply, otherwise sum over a's last and b's second-to-last axis."""
    x, y = as_operand(a, "a"), as_operand(b, "b")
    if not x.shape or not y.shape:
        return multiply(a, b)
    return tensordot(a, b, axes=([-1], [-2 if len(y.shape) > 1 else 0]))


def outer(a: ArrayLike, b: ArrayLike) -> Any:
    """Outer product of two arrays, flattened first."""
    return multiply(expand_dims(ravel(a), 1), expand_dims(ravel(b), 0))


def _repeats_an_index(subscripts: str) -> bool:
    ins = subscripts.replace(" ", "").partition("->")[0]
    return builtins.any(len(set(s)) != len(s) for s in ins.split(","))


def einsum(subscripts: str, *operands: ArrayLike) -> Any:
    """Einstein summation over one or more operands, lowered to transposes, sums and matmuls.

    Supports explicit (``'ij,jk->ik'``) and implicit output, any number of operands
    (contracted left to right), ``...`` and indices repeated within one operand (its
    diagonal: ``'ii->'`` is a trace), as NumPy's.
    """
    if "..." in subscripts or _repeats_an_index(subscripts):
        subscripts, operands = canonical_einsum(subscripts, operands)
        operands = tuple(operands)
    spec = subscripts.replace(" ", "")
    ins, _, out = spec.partition("->")
    in_specs = ins.split(",")
    if len(in_specs) != len(operands):
        raise FlowjitTypeError(f"einsum: {len(in_specs)} operand specs for {len(operands)} operands")
    if "->" not in spec:
        counts = {c: ins.replace(",", "").count(c) for c in set(ins.replace(",", ""))}
        out = "".join(sorted(c for c, n in counts.items() if n == 1))
    ops = []
    in_ops = [as_operand(x, f"operands[{i}]") for i, x in enumerate(operands)]
    d = promote(*in_ops)
    if d.is_bool:
        # NumPy's bool einsum is an or of ands: count the true products, then test for any.
        return not_equal(einsum(subscripts, *[operand_value(cast(o, int64)) for o in in_ops]), 0)
    for s, o in zip(in_specs, in_ops):
        o = cast(o, d)
        if len(s) != len(o.shape):
            raise FlowjitTypeError(f"einsum: spec {s!r} has {len(s)} indices for operand of shape {list(o.shape)}")
        ops.append((s, operand_value(o)))
    s0, acc = ops[0]
    for i, (s1, y) in enumerate(ops[1:], 1):
        later = set(out) | set("".join(s for s, _ in ops[i + 1:]))
        keep = "".join(c for c in dict.fromkeys(s0 + s1) if c in later)
        acc, s0 = _einsum_pair(s0, acc, s1, y, keep), keep
    # Sum what the output does not keep, then order as the output asks.
    summed = tuple(i for i, c in enumerate(s0) if c not in out)
    if summed:
        acc = sum(acc, axis=summed, dtype=d)  # einsum keeps the dtype (no int64 widening)
        s0 = "".join(c for c in s0 if c in out)
    return transpose(acc, [s0.index(c) for c in out]) if s0 != out else acc


def _einsum_pair(sa: str, a: Any, sb: str, b: Any, keep: str) -> Any:
    # Sum indices only one side has and nobody needs, then batch-matmul the rest.
    def presum(s: str, x: Any, other: str) -> tuple[str, Any]:
        drop = tuple(i for i, c in enumerate(s) if c not in other and c not in keep)
        if drop:
            x = sum(x, axis=drop, dtype=as_operand(x).dtype)
            s = "".join(c for c in s if c in other or c in keep)
        return s, x
    sa, a = presum(sa, a, sb)
    sb, b = presum(sb, b, sa)
    batch = [c for c in sa if c in sb and c in keep]
    contract = [c for c in sa if c in sb and c not in keep]
    free_a = [c for c in sa if c not in sb]
    free_b = [c for c in sb if c not in sa]
    da = dict(zip(sa, shape(a)))
    db = dict(zip(sb, shape(b)))
    for c in batch + contract:
        if da[c] != db[c]:
            raise FlowjitTypeError(f"einsum: index {c!r} has size {da[c]} in one operand and {db[c]} in the other")
    m = math.prod(da[c] for c in free_a)
    n = math.prod(db[c] for c in free_b)
    k = math.prod(da[c] for c in contract)
    bshape = [da[c] for c in batch]
    a2 = reshape(transpose(a, [sa.index(c) for c in batch + free_a + contract]), bshape + [m, k])
    b2 = reshape(transpose(b, [sb.index(c) for c in batch + contract + free_b]), bshape + [k, n])
    r = reshape(matmul(a2, b2), bshape + [da[c] for c in free_a] + [db[c] for c in free_b])
    rs = "".join(batch + free_a + free_b)
    return transpose(r, [rs.index(c) for c in keep]) if rs != keep else r


def conv2d(x: ArrayLike, w: ArrayLike, strides: Any = (1, 1), padding: Any = "VALID",
           dilation: Any = (1, 1), groups: int = 1) -> Any:
    """2-D convolution of NHWC ``x`` with an HWIO filter ``w`` (TensorFlow's layout).
    ``groups`` G cuts the input's channels and the filter's outputs into G groups, each
    convolved with its own filters (PyTorch's ``groups``, XLA's ``feature_group_count``):
    ``w`` is then [KH, KW, C/G, O], output channel j from group j // (O/G); G = C is a
    depthwise convolution."""
    a, b = as_operand(x, "x"), as_operand(w, "w")
    d = float_dtype(promote(a, b))
    if isinstance(strides, int):
        strides = (strides, strides)
    if isinstance(dilation, int):
        dilation = (dilation, dilation)
    return bind("conv2d", [cast(a, d), cast(b, d)],
                {"strides": tuple(strides), "padding": padding, "dilation": tuple(dilation),
                 "groups": int(groups)})


@numpy_counterpart
def kron(a: ArrayLike, b: ArrayLike) -> Any:
    """The Kronecker product: blocks of b scaled by each element of a, as ``np.kron``."""
    x, y = operand_value(as_operand(a, "a")), operand_value(as_operand(b, "b"))
    sa, sb = shape(x), shape(y)
    if not sa or not sb:
        return multiply(x, y)
    nd = builtins.max(len(sa), len(sb))
    sa, sb = (1,) * (nd - len(sa)) + sa, (1,) * (nd - len(sb)) + sb
    xa = reshape(x, tuple(q for s in sa for q in (s, 1)))
    yb = reshape(y, tuple(q for s in sb for q in (1, s)))
    return reshape(multiply(xa, yb), tuple(p * q for p, q in zip(sa, sb)))


@numpy_counterpart
def cross(a: ArrayLike, b: ArrayLike, axisa: int = -1, axisb: int = -1, axisc: int = -1,
          axis: int | None = None) -> Any:
    """The cross product of vectors of 3 (or 2, taken with z = 0) components along ``axisa``
    and ``axisb``, the result's vectors along ``axisc``, as ``np.cross``."""
    if axis is not None:
        axisa = axisb = axisc = axis
    x, y = as_operand(a, "a"), as_operand(b, "b")
    if not x.shape or not y.shape:
        raise bad_argument("cross", f"a and b must be at least 1-D, got shapes {list(x.shape)} and {list(y.shape)}",
                           ShapeError)
    d = promote(x, y)
    if d.is_bool:
        raise bad_argument("cross", "bool vectors have no cross product (NumPy refuses boolean subtract); cast them "
                           "first")
    u = moveaxis(operand_value(cast(x, d)), normalize_axis("cross", axisa, len(x.shape), "axisa"), -1)
    w = moveaxis(operand_value(cast(y, d)), normalize_axis("cross", axisb, len(y.shape), "axisb"), -1)
    na, nb = shape(u)[-1], shape(w)[-1]
    if na not in (2, 3) or nb not in (2, 3):
        raise bad_argument("cross", f"vectors must have 2 or 3 components, got {na} and {nb}", ShapeError)
    # A missing third component is zero: its products are left out (NumPy's own formulas).
    ca = [u[..., i] if i < na else None for i in range(3)]
    cb = [w[..., i] if i < nb else None for i in range(3)]

    def minor(i: int, j: int) -> Any:
        plus = multiply(ca[i], cb[j]) if ca[i] is not None and cb[j] is not None else None
        minus = multiply(ca[j], cb[i]) if ca[j] is not None and cb[i] is not None else None
        if minus is None:
            return plus
        return negative(minus) if plus is None else subtract(plus, minus)

    if na == 2 and nb == 2:
        return minor(0, 1)
    c = stack([minor(1, 2), minor(2, 0), minor(0, 1)], axis=-1)
    return moveaxis(c, -1, normalize_axis("cross", axisc, ndim(c), "axisc"))


def canonical_einsum(subscripts: str, operands: Sequence[ArrayLike]) -> tuple[str, list[Any]]:
    """``(spec, operands)`` for ``fj.einsum`` with no ``...`` and no index repeated within an
    operand, meaning what ``np.einsum(subscripts, *operands)`` means: ``...`` becomes letters
    (the operands' ellipsis dimensions broadcast against each other, right-aligned, and lead
    an implicit output), and an index repeated in one operand takes that operand's diagonal
    (``'ii->'`` is a trace, ``'ii->i'`` a diagonal). The output is always explicit."""
    spec = subscripts.replace(" ", "")
    ins, arrow, out = spec.partition("->")
    in_specs = ins.split(",")
    if len(in_specs) != len(operands):
        raise bad_argument("einsum", f"{len(in_specs)} operand specs in {subscripts!r} for {len(operands)} operands")
    vals = [operand_value(as_operand(x, f"operands[{i}]")) for i, x in enumerate(operands)]
    used = set(spec) - set(",->.")
    for s in in_specs + [out]:
        if not builtins.all(c.isalpha() for c in s.replace("...", "", 1)):
            raise bad_argument("einsum", f"subscripts {subscripts!r}: each operand is letters with at most one '...'")
    free = [c for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz" if c not in used]
    # The ellipsis dimensions: as many as the largest count, broadcast right-aligned.
    counts = [ndim(v) - len(s.replace("...", "")) if "..." in s else 0 for s, v in zip(in_specs, vals)]
    for s, v, k in zip(in_specs, vals, counts):
        if k < 0 or ("..." not in s and len(s) != ndim(v)):
            raise bad_argument("einsum", f"spec {s!r} does not fit an operand of shape {list(shape(v))}", ShapeError)
    nell = builtins.max(counts, default=0)
    ell = "".join(free[:nell])
    shapes = [shape(v)[s.index("..."):s.index("...") + k] if "..." in s else () for s, v, k in
              zip(in_specs, vals, counts)]
    try:
        ell_shape = np.broadcast_shapes(*shapes)
    except ValueError:
        raise bad_argument("einsum", f"the '...' dimensions {[list(s) for s in shapes]} do not broadcast together",
                           ShapeError) from None
    specs = []
    for i, (s, v, k) in enumerate(zip(in_specs, vals, counts)):
        if "..." in s:
            p = s.index("...")
            letters = ell[nell - k:]
            if tuple(shape(v)[p:p + k]) != tuple(ell_shape[nell - k:]):  # a size-1 dimension broadcasts
                shp = shape(v)
                vals[i] = broadcast_to(v, shp[:p] + tuple(ell_shape[nell - k:]) + shp[p + k:])
            s = s[:p] + letters + s[p + 3:]
        specs.append(s)
    if arrow:
        out = out.replace("...", ell)
    else:
        joined = "".join(s.replace("...", "") for s in in_specs)
        out = ell + "".join(sorted(c for c in set(joined) if joined.count(c) == 1))
    # An index repeated within one operand: that operand's diagonal over the two axes.
    for i, s in enumerate(specs):
        while len(set(s)) != len(s):
            c = next(c for c in s if s.count(c) > 1)
            p, q = s.index(c), s.index(c, s.index(c) + 1)
            if shape(vals[i])[p] != shape(vals[i])[q]:
                raise bad_argument("einsum", f"index {c!r} repeated in {s!r} has sizes {shape(vals[i])[p]} and "
                                   f"{shape(vals[i])[q]}", ShapeError)
            vals[i] = diagonal(vals[i], 0, p, q)
            s = s[:p] + s[p + 1:q] + s[q + 1:] + c
        specs[i] = s
    if len(set(out)) != len(out) or not set(out) <= set("".join(specs)):
        raise bad_argument("einsum", f"output {out!r} of {subscripts!r} repeats an index or names one no operand has",
                           ShapeError)
    return ",".join(specs) + "->" + out, vals


@numpy_counterpart
def inner(a: ArrayLike, b: ArrayLike) -> Any:
    """The inner product over the last axes, as ``np.inner`` (a product for a 0-d operand)."""
    x, y = operand_value(as_operand(a, "a")), operand_value(as_operand(b, "b"))
    if ndim(x) == 0 or ndim(y) == 0:
        return multiply(x, y)
    return tensordot(x, y, axes=([-1], [-1]))
