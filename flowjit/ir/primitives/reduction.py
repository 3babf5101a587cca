"""Reduction primitives: ops that combine the elements along some axes into one.

reduce_sum, reduce_prod, reduce_max, reduce_min, reduce_any and reduce_all fold a set of
axes (``axes=()`` folds none and is the identity); argmax and argmin pick the index of the
extreme along one axis; cumsum keeps every partial sum along one axis. Results keep the
input dtype (NumPy widens integer sums; we do not), except argmax/argmin which give i64.
Axes attributes accept negative values, counted from the end; the rules check them
against the rank and the IR keeps what the caller wrote.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from flowjit.ir.dtypes import COMPLEX_DTYPES, INT_DTYPES, NUMERIC_DTYPES, DType, bool_, float16, int32, int64
from flowjit.ir.errors import ShapeError
from flowjit.ir.registry import attr, declare, defvjp, normalize_axes, normalize_axis
from flowjit.ir.types import TensorType

_ORDERED_DTYPES = NUMERIC_DTYPES + (bool_,)


def _axes_of(axes: Sequence[int], x: TensorType) -> tuple[int, ...]:
    try:
        return normalize_axes(axes, x.ndim)
    except ShapeError as e:
        raise type(e)(f"{e.reason} (axes={tuple(axes)}, input {x})") from None


def _axis_of(axis: int, x: TensorType) -> int:
    try:
        return normalize_axis(axis, x.ndim)
    except ShapeError as e:
        raise type(e)(f"{e.reason} (input {x})") from None


def _reduced_shape(x: TensorType, axes: tuple[int, ...], keepdims: bool) -> tuple[int, ...]:
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(x.shape))
    return tuple(d for i, d in enumerate(x.shape) if i not in axes)


def _no_empty(x: TensorType, axes: tuple[int, ...]) -> None:
    # NumPy has no identity for max/min/argmax over nothing; reject it before run time.
    empty = [a for a in axes if x.shape[a] == 0]
    if empty:
        raise ShapeError(f"cannot reduce {x} over axis {empty[0]} of size 0 (no identity)")


# ---- axes reductions ----------------------------------------------------------------------
def _reduce_rule(empty_ok: bool, out_dtype: DType | None = None) -> Callable[..., TensorType]:
    def rule(in_types: Sequence[TensorType], *, axes: tuple[int, ...], keepdims: bool) -> TensorType:
        (x,) = in_types
        ax = _axes_of(axes, x)
        if not empty_ok:
            _no_empty(x, ax)
        return TensorType(_reduced_shape(x, ax, keepdims), out_dtype or x.dtype)
    return rule


def _accumulating(fn: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
    # Sum-like reductions: dtype= stops NumPy widening ints (they wrap, as in the compiled
    # code); f16 accumulates in f32 and is rounded once at the end, the most exact answer.
    def impl(x: np.ndarray, *, axes: tuple[int, ...], keepdims: bool) -> np.ndarray:
        acc = np.float32 if x.dtype == float16.np else x.dtype
        with np.errstate(all="ignore"):
            r = fn(x, axis=tuple(axes), keepdims=keepdims, dtype=acc)
        return np.asarray(r).astype(x.dtype, copy=False)
    return impl


def _selecting(fn: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
    def impl(x: np.ndarray, *, axes: tuple[int, ...], keepdims: bool) -> np.ndarray:
        with np.errstate(all="ignore"):
            r = fn(x, axis=tuple(axes), keepdims=keepdims)
        return np.asarray(r).astype(x.dtype, copy=False)
    return impl


_AXES_ATTRS = {"axes": attr("ints"), "keepdims": attr("bool", False)}


def _count_rule(in_types: Sequence[TensorType], *, axes: tuple[int, ...], dtype: DType) -> TensorType:
    (x,) = in_types
    normalize_axes(axes, x.ndim)
    return TensorType((), dtype)


def _count_impl(x: np.ndarray, *, axes: tuple[int, ...], dtype: DType) -> np.ndarray:
    return np.asarray(int(np.prod([x.shape[a] for a in normalize_axes(axes, x.ndim)], dtype=np.int64)),
                      dtype=dtype.np)


# A mean divides by it rather than by a literal, so a program compiled once for every batch
# size (flowjit compile --arg f32[B,...]) divides a mean over the batch by the B it is given.
declare("element_count", kind="layout", role="element_count", rule=_count_rule, impl=_count_impl, arity=1,
        attrs={"axes": attr("ints"), "dtype": attr("dtype")}, differentiable=False,
        doc="the number of elements of x along axes, a 0-d value of dtype (x's elements are not read)")

# Over axes=() each reduction is its input, except a float sum: its reference starts from
# +0.0, which turns -0.0 into +0.0.
declare("reduce_sum", kind="reduction", reducer=("0", "acc + v"), rule=_reduce_rule(True), impl=_accumulating(np.sum),
        attrs=_AXES_ATTRS, arity=1, dtypes=NUMERIC_DTYPES + COMPLEX_DTYPES, differentiable=True,
        no_axes_identity=INT_DTYPES,
        doc="sum over axes in the input dtype (ints wrap); 0 over an empty axis")
declare("reduce_prod", kind="reduction", reducer=("1", "acc * v"), rule=_reduce_rule(True), impl=_accumulating(np.prod),
        attrs=_AXES_ATTRS, arity=1, dtypes=NUMERIC_DTYPES + COMPLEX_DTYPES, differentiable=True,
        no_axes_identity=NUMERIC_DTYPES,  # of a complex, NumPy's product with 1+0j turns -0j into +0j
        doc="product over axes in the input dtype (ints wrap); 1 over an empty axis")
declare("reduce_max", kind="reduction", reducer=("lowest", "maximum(acc, v)"),
        rule=_reduce_rule(False), impl=_selecting(np.max),
        attrs=_AXES_ATTRS, arity=1, dtypes=_ORDERED_DTYPES, differentiable=True,
        no_axes_identity=_ORDERED_DTYPES, doc="maximum over axes; NaN propagates; an empty axis is an error")
declare("reduce_min", kind="reduction", reducer=("highest", "minimum(acc, v)"),
        rule=_reduce_rule(False), impl=_selecting(np.min),
        attrs=_AXES_ATTRS, arity=1, dtypes=_ORDERED_DTYPES, differentiable=True,
        no_axes_identity=_ORDERED_DTYPES, doc="minimum over axes; NaN propagates; an empty axis is an error")
declare("reduce_any", kind="reduction", reducer=("False", "acc or v"),
        rule=_reduce_rule(True, bool_), impl=_selecting(np.any),
        attrs=_AXES_ATTRS, arity=1, dtypes=(bool_,), differentiable=False,
        no_axes_identity=(bool_,), doc="logical or over axes; false over an empty axis")
declare("reduce_all", kind="reduction", reducer=("True", "acc and v"),
        rule=_reduce_rule(True, bool_), impl=_selecting(np.all),
        attrs=_AXES_ATTRS, arity=1, dtypes=(bool_,), differentiable=False,
        no_axes_identity=(bool_,), doc="logical and over axes; true over an empty axis")


# ---- argmax / argmin ------------------------------------------------------------------------
def _arg_rule(in_types: Sequence[TensorType], *, axis: int, keepdims: bool) -> TensorType:
    (x,) = in_types
    a = _axis_of(axis, x)
    _no_empty(x, (a,))
    return TensorType(_reduced_shape(x, (a,), keepdims), int64)


def _arg_impl(fn: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
    def impl(x: np.ndarray, *, axis: int, keepdims: bool) -> np.ndarray:
        return np.asarray(fn(x, axis=axis, keepdims=keepdims)).astype(np.int64, copy=False)
    return impl


_ARG_ATTRS = {"axis": attr("int"), "keepdims": attr("bool", False)}

declare("argmax", kind="reduction", reducer=("arg", ">"), rule=_arg_rule, impl=_arg_impl(np.argmax), attrs=_ARG_ATTRS,
        arity=1, dtypes=_ORDERED_DTYPES, differentiable=False,
        doc="i64 index of the maximum along axis; first on ties; a NaN counts as the maximum")
declare("argmin", kind="reduction", reducer=("arg", "<"), rule=_arg_rule, impl=_arg_impl(np.argmin), attrs=_ARG_ATTRS,
        arity=1, dtypes=_ORDERED_DTYPES, differentiable=False,
        doc="i64 index of the minimum along axis; first on ties; a NaN counts as the minimum")


# ---- cumsum -------------------------------------------------------------------------------
def _cumsum_rule(in_types: Sequence[TensorType], *, axis: int, reverse: bool) -> TensorType:
    (x,) = in_types
    _axis_of(axis, x)
    return x


def _cumsum_impl(x: np.ndarray, *, axis: int, reverse: bool) -> np.ndarray:
    # As reduce_sum: ints wrap in their own width, f16 accumulates in f32.
    acc = np.float32 if x.dtype == float16.np else x.dtype
    if reverse:
        x = np.flip(x, axis)
    with np.errstate(all="ignore"):
        r = np.cumsum(x, axis=axis, dtype=acc)
    if reverse:
        r = np.flip(r, axis)
    return np.array(r, dtype=x.dtype, order="C")


# A scan keeps the input's shape, so fusion treats it as opaque rather than as a reduction.
declare("cumsum", kind="opaque", role="cumulative_sum", rule=_cumsum_rule, impl=_cumsum_impl,
        attrs={"axis": attr("int"), "reverse": attr("bool", False)}, arity=1,
        dtypes=NUMERIC_DTYPES + COMPLEX_DTYPES, differentiable=True,
        doc="running sum along axis in the input dtype; reverse=True sums from the end")


# ---- VJP rules (see Primitive) --------------------------------------------------------------
def _axes(x, axes):
    return normalize_axes(axes, x.type.ndim)


def _sum_vjp(e, g, y, x, *, axes, keepdims):
    return [e.broadcast_back(g, x.type, _axes(x, axes), keepdims)]


def _prod_vjp(e, g, y, x, *, axes, keepdims):
    # The product of the other elements, through zeros too (``y / x`` is 0/0 there), as
    # PyTorch's rule: ``p / x`` with p the product of the nonzero elements where the group
    # has no zero; ``p`` at a group's only zero; 0 elsewhere (two zeros leave none nonzero).
    ax = _axes(x, axes)
    t = x.type
    zero = e.eq(x, e.const(0, x))
    x1 = e.select(zero, e.const(1, x), x)
    p = e.broadcast_to(e.reduce_prod(x1, axes=tuple(ax), keepdims=True), shape=t.shape)
    zeros = e.broadcast_to(e.reduce_sum(e.cast(zero, dtype=int32), axes=tuple(ax), keepdims=True), shape=t.shape)
    none = e.eq(zeros, e.const(0, zeros))
    only = e.logical_and(zero, e.eq(zeros, e.const(1, zeros)))
    others = e.select(zero, p, e.div(p, x1))
    gb = e.broadcast_back(g, t, ax, keepdims)
    return [e.select(e.logical_or(none, only), e.mul(gb, others), e.zeros(t))]


def _extreme_vjp(e, g, y, x, *, axes, keepdims):
    # The cotangent is shared equally by the elements that attain the max (min).
    ax = _axes(x, axes)
    hit = e.cast(e.eq(x, e.broadcast_back(y, x.type, ax, keepdims)), dtype=x.type.dtype)
    count = e.reduce_sum(hit, axes=tuple(ax), keepdims=True)
    share = e.div(e.broadcast_back(g, x.type, ax, keepdims), e.broadcast_to(count, shape=x.type.shape))
    return [e.mul(share, hit)]


defvjp("reduce_sum", _sum_vjp)
defvjp("reduce_prod", _prod_vjp)
defvjp("reduce_max", _extreme_vjp)
defvjp("reduce_min", _extreme_vjp)
defvjp("cumsum", lambda e, g, y, x, axis, reverse: [e.cumsum(g, axis=axis, reverse=not reverse)])
