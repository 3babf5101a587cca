"""Selection, insertion and set operations, the rest of ``jax.numpy``'s: ``argwhere``,
``flatnonzero``, ``extract``, ``compress``, ``choose``, ``piecewise``, ``put_along_axis``, ``put``,
``place``, ``fill_diagonal``, ``diagflat``, ``insert``, ``delete``, ``lexsort``, the 1-D set
operations (``union1d``, ``intersect1d``, ``setdiff1d``, ``setxor1d``), the index helpers (``ix_``,
``s_``, ``index_exp``, ``mgrid``, ``ogrid``), ``matvec`` and ``vecmat``, the dtype and shape
predicates (``broadcast_shapes``, ``promote_types``, ``issubdtype``, ``isscalar``, ``iterable``)
with NumPy's other dtype names (``single``, ``double``, ``int_``...) and abstract scalar classes
(``floating``, ``integer``...),
``bitwise_count``, ``unwrap``, ``vectorize`` and ``apply_along_axis``.

Each is a composite of fj's functions (``where``, ``take``, ``take_along_axis``, ``x.at[...]``,
``nonzero``, ``cumsum``, ``argsort``, ``vmap``), so it traces, compiles and differentiates as they do.
Results whose size depends on the values (``argwhere``, ``compress`` with a traced condition, the
set operations) are NumPy's on concrete arrays; on traced ones they take JAX's ``size=K`` (the first
K results, the rest ``fill_value``), and without it an error says so. As in JAX, the functions that
NumPy runs in place (``put``, ``place``, ``put_along_axis``, ``fill_diagonal``) need
``inplace=False`` and return the new array: flowjit's arrays are immutable. ``insert`` and
``delete`` take a static ``obj`` (an int, a slice or concrete indices), which fixes the result's
shape.
"""

from __future__ import annotations

import builtins
import math
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from flowjit.ir.dtypes import DType, complex64, complex128, float16, float32, float64, int64, uint64
from flowjit.ir.errors import FlowjitTypeError, ShapeError
from flowjit.tracer.core import Tracer, current_trace, user_location
from flowjit.tracer.function import TracedFunction
from flowjit.tracer.numpy import setops
from flowjit.tracer.numpy.conversion import astype
from flowjit.tracer.numpy.counterparts import numpy_counterpart
from flowjit.tracer.numpy.creation import full, zeros
from flowjit.tracer.numpy.index_update import at
from flowjit.tracer.numpy.indexing import scatter_add, take, take_along_axis
from flowjit.tracer.numpy.layout import (
    broadcast_arrays,
    broadcast_to,
    expand_dims,
    moveaxis,
    ravel,
    reshape,
    shape,
    squeeze,
    transpose,
)
from flowjit.tracer.numpy.logic import isin
from flowjit.tracer.numpy.manipulation import concatenate, stack
from flowjit.tracer.numpy.matrices import diag
from flowjit.tracer.numpy.operands import (
    ArrayLike,
    as_operand,
    bad_argument,
    check_size,
    concrete_array,
    known_array,
    needs_size,
    normalize_axis,
    operand_value,
    promote,
    refuse_out,
    static_int,
)
from flowjit.tracer.numpy.products import matmul
from flowjit.tracer.numpy.reductions import cumsum, diff, sum
from flowjit.tracer.numpy.sorting_searching import argsort, nonzero, searchsorted
from flowjit.tracer.numpy.ufuncs import (
    abs,
    add,
    bitwise_and,
    clip,
    conj,
    equal,
    greater,
    isnan,
    less,
    logical_and,
    logical_not,
    minimum,
    not_equal,
    remainder,
    right_shift,
    subtract,
    where,
)
from flowjit.tracer.transforms import vmap

__all__: list[str] = [
    "single", "double", "half", "csingle", "cdouble", "int_", "uint", "float_", "complex_", "generic", "number",
    "integer", "signedinteger", "unsignedinteger", "inexact", "floating", "complexfloating", "character",
    "flexible",
    "apply_along_axis", "argwhere", "bitwise_count", "broadcast_shapes", "choose", "compress", "delete", "diagflat",
    "extract", "fill_diagonal", "flatnonzero", "index_exp", "insert", "intersect1d", "isscalar", "issubdtype",
    "iterable", "ix_", "lexsort", "matvec", "mgrid", "ogrid", "piecewise", "place", "promote_types", "put",
    "put_along_axis", "s_", "setdiff1d", "setxor1d", "union1d", "unwrap", "vecmat", "vectorize",
]


# ----------------------------------------------------------------------------- helpers

def _not_inplace(fname: str, inplace: bool) -> None:
    if inplace:
        raise bad_argument(fname, f"flowjit's arrays are immutable, so it cannot modify one in place. Call "
                           f"fj.{fname}(..., inplace=False) (as JAX asks): it returns the updated array", ValueError)


def _as_bool(x: ArrayLike) -> Any:
    o = as_operand(x)
    return operand_value(o) if o.dtype.is_bool else not_equal(operand_value(o), 0)


def _dtype(x: ArrayLike) -> DType:
    return as_operand(x).dtype


def _common(a: ArrayLike, b: ArrayLike) -> tuple[Any, Any]:
    """a and b flattened and cast to their common dtype (what NumPy's concatenation gives)."""
    oa, ob = as_operand(a, "ar1"), as_operand(b, "ar2")
    d = promote(oa, ob)
    return astype(ravel(operand_value(oa)), d), astype(ravel(operand_value(ob)), d)


def _tile_to(v: Any, m: int) -> Any:
    """The 1-D v repeated cyclically to length m (NumPy's rule for put's and place's values)."""
    n = shape(v)[0]
    return take(v, np.arange(m) % n) if n != m else v


def _stable_lexsort(keys: Sequence[Any], axis: int) -> Any:
    """The stable lexicographic order of ``keys`` along ``axis`` (the last key primary)."""
    perm = argsort(keys[0], axis, stable=True)
    for k in keys[1:]:
        perm = take_along_axis(perm, argsort(take_along_axis(k, perm, axis), axis, stable=True), axis)
    return perm


def _distinct(values: Any, valid: Any, size: int) -> tuple[Any, Any, Any, Any]:
    """The first ``size`` distinct values of the 1-D ``values`` where ``valid`` holds, ascending
    (NaNs as one): (values, the first position of each in ``values``, which slots are found,
    how many are). Valid entries sort first, by value, stably; a run of equal ones starts a slot."""
    n = shape(values)[0]
    perm = _stable_lexsort([values, logical_not(valid)], 0)
    sv, ok = take(values, perm), take(valid, perm)
    if n > 1:
        later, earlier = take(sv, np.arange(1, n)), take(sv, np.arange(n - 1))
        differs = not_equal(later, earlier)
        if _dtype(values).is_inexact:
            differs = logical_and(differs, logical_not(logical_and(isnan(later), isnan(earlier))))
        starts = concatenate([np.ones(1, bool), differs])
    else:
        starts = np.ones(n, bool)
    first = logical_and(ok, starts)
    ones = astype(first, int64)
    slot = where(first, minimum(subtract(cumsum(ones), 1), size), size)
    pos = take(scatter_add(zeros(size + 1, np.int64), slot, np.arange(n)), np.arange(size))
    count = sum(ones)
    found = less(np.arange(size), count)
    return take(sv, pos), take(perm, pos), found, count


def _smallest_or_zero(vals: Any, count: Any) -> Any:
    """JAX's default fill of intersect1d and setxor1d: the smallest result (0 when none)."""
    return where(greater(count, 0), take(vals, 0), astype(0, _dtype(vals)))


# ----------------------------------------------------------------------------- nonzero family

def argwhere(a: ArrayLike, *, size: int | None = None, fill_value: Any = None) -> Any:
    """The indices of a's non-zero elements as an int64 array of shape (N, a.ndim), one row
    per element in row-major order, as ``np.argwhere``. On a traced ``a`` it takes JAX's
    ``size=K``: K rows, those past the last non-zero element filled with ``fill_value``
    (default 0; one value, or one per axis)."""
    arr = concrete_array("argwhere", a)
    if size is None:
        if arr is None:
            raise needs_size("argwhere", a, "how many elements are non-zero, and so the output shape,",
                           "fj.argwhere(x, size=K, fill_value=-1)")
        return np.argwhere(arr).astype(np.int64)
    check_size("argwhere", size)
    o = as_operand(a, "a")
    if not o.shape:
        return full((size, 0), 0, np.int64)
    return stack(nonzero(operand_value(o), size=size, fill_value=fill_value), axis=1)


def flatnonzero(a: ArrayLike, *, size: int | None = None, fill_value: Any = None) -> Any:
    """The int64 indices of the non-zero elements of ``a`` flattened, as ``np.flatnonzero``; on
    a traced ``a`` it takes JAX's ``size=K`` (the first K, the rest ``fill_value``, default 0)."""
    arr = concrete_array("flatnonzero", a)
    if size is None:
        if arr is None:
            raise needs_size("flatnonzero", a, "how many elements are non-zero, and so the output shape,",
                           "fj.flatnonzero(x, size=K, fill_value=-1)")
        return np.flatnonzero(arr).astype(np.int64)
    check_size("flatnonzero", size)
    return nonzero(ravel(a), size=size, fill_value=fill_value)[0]


def _compress(fname: str, condition: ArrayLike, a: ArrayLike, axis: int | None, size: int | None,
              fill_value: Any) -> Any:
    co, ao = as_operand(condition, "condition"), as_operand(a, "a")
    if len(co.shape) != 1:
        raise bad_argument(fname, f"condition must be 1-D, got shape {list(co.shape)}", ShapeError)
    if axis is None:
        x, ax = ravel(operand_value(ao)), 0
    else:
        x, ax = operand_value(ao), normalize_axis(fname, axis, len(ao.shape))
    xs = tuple(shape(x))
    n = xs[ax]
    if size is not None:
        check_size(fname, size)
    c = known_array(condition)
    if c is not None:
        c = c.astype(bool)
        if c.size > n and c[n:].any():
            raise bad_argument(fname, f"condition ({c.size} entries) is True past the {n} entries of axis {ax} of a "
                               f"(shape {list(xs)}): it selects nothing there; shorten it to {n}", IndexError)
        keep = np.flatnonzero(c[:n])
        if size is None:
            arr = concrete_array(fname, a)
            if arr is not None:
                return np.compress(c, arr, axis)
            return take(x, keep, axis=ax)
        got = take(x, keep[:size], axis=ax) if keep.size else None
        pad = size - min(size, keep.size)
        if not pad:
            return got
        filler = full(xs[:ax] + (pad,) + xs[ax + 1:], astype(fill_value, ao.dtype), ao.dtype)
        return filler if got is None else concatenate([got, filler], axis=ax)
    if size is None:
        raise needs_size(fname, condition, "how many entries the condition selects, and so the output shape,",
                       f"fj.{fname}(condition, a, size=K, fill_value=0)", "condition")
    cb = _as_bool(condition)
    m = co.shape[0]
    if m > n:
        cb = take(cb, np.arange(n))  # entries past the axis select nothing (NumPy raises when True)
    elif m < n:
        cb = concatenate([cb, np.zeros(n - m, bool)])
    out_shape = xs[:ax] + (size,) + xs[ax + 1:]
    if n == 0:
        return full(out_shape, astype(fill_value, ao.dtype), ao.dtype)
    idx = nonzero(cb, size=size, fill_value=0)[0]
    found = less(np.arange(size), sum(astype(cb, int64)))
    found = reshape(found, tuple(size if d == ax else 1 for d in range(len(xs))))
    return where(found, take(x, idx, axis=ax), astype(fill_value, ao.dtype))


def compress(condition: ArrayLike, a: ArrayLike, axis: int | None = None, *, size: int | None = None,
             fill_value: Any = 0, out: Any = None) -> Any:
    """The slices of ``a`` along ``axis`` (a flattened when None) where the 1-D ``condition``
    holds, as ``np.compress``. A concrete condition (even with a traced ``a``) fixes the result's
    size; a traced one needs JAX's ``size=K``: the first K selected slices, the rest
    ``fill_value``. Differentiable in ``a`` (a gather)."""
    refuse_out("compress", out)
    return _compress("compress", condition, a, axis, size, fill_value)


def extract(condition: ArrayLike, arr: ArrayLike, *, size: int | None = None, fill_value: Any = 0) -> Any:
    """The elements of ``arr`` (flattened) where ``condition`` (flattened) is non-zero, as
    ``np.extract``; a traced condition needs JAX's ``size=K`` (the rest ``fill_value``)."""
    return _compress("extract", ravel(condition), ravel(arr), 0, size, fill_value)


# ----------------------------------------------------------------------------- choose, piecewise

def choose(a: ArrayLike, choices: Any, out: Any = None, mode: str = "raise") -> Any:
    """``choices[a[i]][i]`` at each position i of the broadcast of ``a`` and the choices, as
    ``np.choose``. ``mode='raise'`` checks that a's indices lie in [0, n), which needs a concrete
    ``a`` (as in JAX); in a traced function pass ``mode='clip'`` (clamp into range) or ``'wrap'``
    (modulo n). Differentiable in the choices (a gather)."""
    refuse_out("choose", out)
    if mode not in ("raise", "clip", "wrap"):
        raise bad_argument("choose", f"mode={mode!r}; allowed 'raise', 'clip' or 'wrap'", ValueError)
    ao = as_operand(a, "a")
    if not (ao.dtype.is_int or ao.dtype.is_bool):
        raise bad_argument("choose", f"a must hold integer indices, got {ao.aval}")
    chs = [choices[i] for i in range(shape(choices)[0])] if isinstance(choices, (Tracer, np.ndarray)) \
        else list(choices)
    k = len(chs)
    if k == 0:
        raise bad_argument("choose", "choices is empty: there is nothing to choose from", ValueError)
    arr = concrete_array("choose", a)
    chosen = [concrete_array("choose", c) for c in chs]
    if arr is not None and builtins.all(c is not None for c in chosen):
        return np.choose(arr, chosen, mode=mode)
    idx = astype(operand_value(ao), int64)
    if mode == "raise":
        a_static = known_array(a)
        if a_static is None:
            raise FlowjitTypeError(
                f"choose(mode='raise') on a traced index array ({ao.aval}) at {user_location()}: whether its "
                f"indices are in [0, {k}) is known only when the program runs. Pass mode='clip' or mode='wrap' "
                "(as JAX asks)")
        if a_static.size and (int(a_static.min()) < 0 or int(a_static.max()) >= k):
            raise bad_argument("choose", f"invalid entry in choice array: a has indices outside [0, {k}); pass "
                               "mode='clip' or 'wrap' to bring them in", ValueError)
    elif mode == "clip":
        idx = clip(idx, 0, k - 1)
    else:
        idx = remainder(idx, k)
    parts = broadcast_arrays(idx, *chs)
    return squeeze(take_along_axis(stack(parts[1:]), expand_dims(parts[0], 0), 0), 0)


def _conditions(x: Any, condlist: Any) -> list[Any]:
    """NumPy's reading of piecewise's condlist: one condition, or a sequence of them."""
    nd = len(shape(x))
    if isinstance(condlist, (Tracer, np.ndarray)):
        if len(shape(condlist)) <= nd or not shape(condlist):
            return [condlist]
        return [condlist[i] for i in range(shape(condlist)[0])]
    if isinstance(condlist, (bool, np.bool_)):
        return [condlist]
    seq = list(condlist)
    if seq and nd and not isinstance(seq[0], (list, tuple, np.ndarray, Tracer)):
        return [condlist]
    return seq


def piecewise(x: ArrayLike, condlist: Any, funclist: Sequence[Any], *args: Any, **kw: Any) -> Any:
    """``funclist[i]`` where ``condlist[i]`` holds (a later condition wins), 0 elsewhere, in x's
    dtype, as ``np.piecewise``; an extra last entry of funclist applies where no condition holds.
    Entries are callables ``f(x, *args, **kw)`` or constants. Traced, every function runs on all
    of x and ``where`` picks (as JAX's): the gradient flows through the chosen branch."""
    xo = as_operand(x, "x")
    xv = operand_value(xo)
    conds = _conditions(xv, condlist)
    n = len(conds)
    funcs = list(funclist)
    if len(funcs) not in (n, n + 1):
        raise bad_argument("piecewise", f"with {n} condition(s), either {n} or {n + 1} functions are expected, got "
                           f"{len(funcs)}", ValueError)
    arr = concrete_array("piecewise", xv)
    static = [concrete_array("piecewise", c) for c in conds]
    if arr is not None and builtins.all(c is not None for c in static):
        return np.piecewise(arr, condlist, funcs, *args, **kw)
    conds = [_as_bool(c) for c in conds]
    if len(funcs) == n + 1:
        rest = logical_not(conds[0]) if n else np.ones(xo.shape, bool)
        for c in conds[1:]:
            rest = logical_and(rest, logical_not(c))
        conds.append(rest)
    y = zeros(xo.shape, xo.dtype)
    for c, f in zip(conds, funcs):
        v = f(xv, *args, **kw) if callable(f) else f
        y = where(c, astype(v, xo.dtype), y)
    return y


# ----------------------------------------------------------------------------- functional updates

def put_along_axis(arr: ArrayLike, indices: ArrayLike, values: ArrayLike, axis: int | None, inplace: bool = True,
                   *, mode: str | None = None) -> Any:
    """``arr`` with ``values`` put at ``indices`` along ``axis`` (the flattened arr when None),
    as ``np.put_along_axis``, returned (JAX's form: pass ``inplace=False``). ``indices`` has
    arr's rank; ``mode`` is ``x.at[...].set``'s (default: out-of-range updates are dropped;
    NumPy raises on concrete ones). Differentiable in arr and values."""
    _not_inplace("put_along_axis", inplace)
    ao, io = as_operand(arr, "arr"), as_operand(indices, "indices")
    if not io.dtype.is_int:
        raise bad_argument("put_along_axis", f"indices must be integers, got {io.aval}")
    if axis is None:
        if len(io.shape) != 1:
            raise bad_argument("put_along_axis", f"with axis=None, indices must be 1-D, got shape {list(io.shape)}",
                               ShapeError)
        flat = at(ravel(operand_value(ao)))[operand_value(io)].set(values, mode=mode)
        return reshape(flat, ao.shape)
    ax = normalize_axis("put_along_axis", axis, len(ao.shape))
    if len(io.shape) != len(ao.shape):
        raise bad_argument("put_along_axis", f"indices (shape {list(io.shape)}) must have the rank of arr (shape "
                           f"{list(ao.shape)})", ShapeError)
    nd = len(ao.shape)
    key = tuple(operand_value(io) if d == ax else
                np.arange(ao.shape[d]).reshape(tuple(-1 if e == d else 1 for e in range(nd))) for d in range(nd))
    return at(operand_value(ao))[key].set(values, mode=mode)


def put(a: ArrayLike, ind: ArrayLike, v: ArrayLike, mode: str | None = None, *, inplace: bool = True) -> Any:
    """``a`` with its flattened elements at ``ind`` replaced by ``v`` (repeated cyclically to
    ind's length), as ``np.put``, returned (JAX's form: pass ``inplace=False``). ``mode``: None
    drops out-of-range indices (JAX's default), 'clip' clamps them, 'wrap' wraps them, 'raise'
    checks them (concrete ``ind`` only). A repeated index takes its last value."""
    _not_inplace("put", inplace)
    if mode not in (None, "raise", "clip", "wrap"):
        raise bad_argument("put", f"mode={mode!r}; allowed None, 'raise', 'clip' or 'wrap'", ValueError)
    ao, io = as_operand(a, "a"), as_operand(ind, "ind")
    if not (io.dtype.is_int or (io.tracer is None and np.asarray(io.array).size == 0)):
        raise bad_argument("put", f"ind must be integers, got {io.aval}")
    size = math.prod(ao.shape)
    flat_ind = astype(ravel(operand_value(io)), int64)
    flat_v = ravel(v)
    m, nv = shape(flat_ind)[0], shape(flat_v)[0]
    if not size or not m or not nv:
        return operand_value(ao)
    flat_v = take(flat_v, np.arange(m)) if nv > m else _tile_to(flat_v, m)
    if mode == "raise":
        ind_static = known_array(ind)
        if ind_static is None:
            raise FlowjitTypeError(
                f"put(mode='raise') on traced indices ({io.aval}) at {user_location()}: whether they are in range "
                "is known only when the program runs. Pass mode=None (drop), 'clip' or 'wrap'")
        if int(ind_static.min()) < -size or int(ind_static.max()) >= size:
            raise bad_argument("put", f"index out of range for an array of {size} elements; pass mode='clip' or "
                               "'wrap'", IndexError)
    elif mode == "clip":
        flat_ind = clip(flat_ind, 0, size - 1)
    elif mode == "wrap":
        flat_ind = remainder(flat_ind, size)
    return reshape(at(ravel(operand_value(ao)))[flat_ind].set(flat_v), ao.shape)


def place(arr: ArrayLike, mask: ArrayLike, vals: ArrayLike, *, inplace: bool = True) -> Any:
    """``arr`` with the elements where ``mask`` holds replaced, in order, by ``vals`` (repeated
    cyclically), as ``np.place``, returned (JAX's form: pass ``inplace=False``). Works on traced
    arrays: each selected element takes ``vals[(its rank among the selected) % len(vals)]``."""
    _not_inplace("place", inplace)
    ao, mo = as_operand(arr, "arr"), as_operand(mask, "mask")
    if tuple(mo.shape) != tuple(ao.shape):
        raise bad_argument("place", f"mask (shape {list(mo.shape)}) must have arr's shape {list(ao.shape)}",
                           ShapeError)
    flat_vals = ravel(vals)
    nv = shape(flat_vals)[0]
    mb = ravel(_as_bool(mask))
    if nv == 0:
        m = known_array(mask)
        if m is not None and not m.any():
            return operand_value(ao)
        raise bad_argument("place", "vals is empty: there is nothing to place where mask holds" +
                           ("" if m is not None else " (mask is traced, so it may hold)"), ValueError)
    if not math.prod(ao.shape):
        return operand_value(ao)
    rank = remainder(subtract(cumsum(astype(mb, int64)), 1), nv)
    picked = take(astype(flat_vals, ao.dtype), clip(rank, 0, nv - 1))
    return reshape(where(mb, picked, ravel(operand_value(ao))), ao.shape)


def fill_diagonal(a: ArrayLike, val: ArrayLike, wrap: bool = False, *, inplace: bool = True) -> Any:
    """``a`` with its main diagonal set to ``val`` (repeated cyclically), as
    ``np.fill_diagonal``, returned (JAX's form: pass ``inplace=False``). A tall 2-D ``a`` with
    ``wrap=True`` restarts the diagonal every ncols + 1 rows; an N-D ``a`` needs equal sides."""
    _not_inplace("fill_diagonal", inplace)
    ao = as_operand(a, "a")
    s = tuple(ao.shape)
    if len(s) < 2:
        raise bad_argument("fill_diagonal", f"a must be at least 2-D, got shape {list(s)}", ShapeError)
    size = math.prod(s)
    if len(s) == 2:
        step = s[1] + 1
        end = size if wrap else s[1] * s[1]
    else:
        if len(set(s)) != 1:
            raise bad_argument("fill_diagonal", f"all dimensions of a must be of equal length, got shape {list(s)}",
                               ShapeError)
        step = 1 + int(np.cumprod(s[:-1]).sum())
        end = size
    positions = np.arange(size)[:end:step]
    if not positions.size:
        return operand_value(ao)
    values = ravel(val)
    if shape(values)[0] == 0:
        return operand_value(ao)
    values = _tile_to(values, positions.size) if shape(values)[0] <= positions.size \
        else take(values, np.arange(positions.size))
    return reshape(at(ravel(operand_value(ao)))[positions].set(values), s)


def diagflat(v: ArrayLike, k: int = 0) -> Any:
    """A 2-D array with ``v`` flattened on its k-th diagonal, zeros elsewhere, as ``np.diagflat``."""
    return diag(ravel(v), static_int("diagflat", "k", k))


# ----------------------------------------------------------------------------- insert, delete

def _static_obj(fname: str, obj: Any) -> Any:
    if isinstance(obj, slice):
        return obj
    o = as_operand(obj, "obj")
    if o.tracer is not None:
        raise FlowjitTypeError(
            f"{fname} with traced obj ({o.aval}) at {user_location()}: the positions decide the result's shape, "
            "which flowjit fixes when tracing. Pass obj as a Python int, a slice or concrete indices")
    return np.asarray(o.array)


def insert(arr: ArrayLike, obj: Any, values: ArrayLike, axis: int | None = None) -> Any:
    """``arr`` with ``values`` inserted before the positions ``obj`` along ``axis`` (arr flattened
    when None), as ``np.insert``. ``obj`` is static (an int, a slice or concrete indices; the
    result's shape depends on it); ``values`` may be traced and is cast to arr's dtype. One
    gather from arr and values, so it differentiates in both."""
    idx = _static_obj("insert", obj)
    arr_c, vals_c = concrete_array("insert", arr), concrete_array("insert", values)
    if arr_c is not None and vals_c is not None:
        return np.insert(arr_c, obj, vals_c, axis)
    ao = as_operand(arr, "arr")
    if axis is None:
        x, ax = ravel(operand_value(ao)), 0
    else:
        x, ax = operand_value(ao), normalize_axis("insert", axis, len(ao.shape))
    xs = tuple(shape(x))
    n = xs[ax]
    v = astype(values, ao.dtype)
    vs = tuple(shape(v))
    if len(vs) < len(xs):
        v = reshape(v, (1,) * (len(xs) - len(vs)) + vs)
    if isinstance(idx, slice):
        idx = np.arange(*idx.indices(n))
    elif idx.dtype == bool:
        if idx.ndim != 1:
            raise bad_argument("insert", f"a boolean obj must be 1-D, got shape {list(idx.shape)}", ValueError)
        idx = np.flatnonzero(idx)
    elif idx.ndim > 1:
        raise bad_argument("insert", f"obj must be an int or 1-D indices, got shape {list(idx.shape)}", ValueError)
    if idx.size == 1:
        # NumPy's rule for one index: values is a block inserted before it (a scalar index
        # counts values' first axis as the inserted one).
        i = int(idx.item())
        if not -n <= i <= n:
            raise bad_argument("insert", f"index {i} is out of bounds for axis {ax} with size {n}", IndexError)
        i = i + n if i < 0 else i
        if idx.ndim == 0:
            v = moveaxis(v, 0, ax)
        k = shape(v)[ax]
        block = broadcast_to(v, xs[:ax] + (k,) + xs[ax + 1:])
        order = np.concatenate([np.arange(i), n + np.arange(k), np.arange(i, n)])
    else:
        pos = idx.astype(np.int64).ravel()
        if pos.size and (pos.min() < -n or pos.max() > n):
            raise bad_argument("insert", f"an index of obj is out of bounds for axis {ax} with size {n}", IndexError)
        pos = np.where(pos < 0, pos + n, pos)
        k = pos.size
        new = pos.copy()
        new[np.argsort(pos, kind="stable")] += np.arange(k)
        block = broadcast_to(v, xs[:ax] + (k,) + xs[ax + 1:])
        order = np.empty(n + k, np.int64)
        old = np.ones(n + k, bool)
        old[new] = False
        order[new] = n + np.arange(k)
        order[old] = np.arange(n)
    if not k:
        return x
    return take(concatenate([x, block], axis=ax), order, axis=ax)


def delete(arr: ArrayLike, obj: Any, axis: int | None = None) -> Any:
    """``arr`` without the entries ``obj`` along ``axis`` (arr flattened when None), as
    ``np.delete``. ``obj`` is static (an int, a slice, concrete indices or a boolean mask):
    the result's shape depends on it. A gather of the kept entries (differentiable)."""
    idx = _static_obj("delete", obj)
    arr_c = concrete_array("delete", arr)
    if arr_c is not None:
        return np.delete(arr_c, obj, axis)
    ao = as_operand(arr, "arr")
    if axis is None:
        x, ax = ravel(operand_value(ao)), 0
    else:
        x, ax = operand_value(ao), normalize_axis("delete", axis, len(ao.shape))
    n = shape(x)[ax]
    try:
        keep = np.delete(np.arange(n), obj if isinstance(obj, (slice, list, tuple, int, np.ndarray)) else idx)
    except IndexError as e:
        raise bad_argument("delete", f"{e} (arr of shape {list(ao.shape)})", IndexError) from None
    return take(x, keep, axis=ax)


def lexsort(keys: Any, axis: int = -1) -> Any:
    """The int64 indices that sort by several keys along ``axis``, the last key primary, as
    ``np.lexsort`` (stable: ties keep their order). ``keys`` is a sequence of arrays of one
    shape, or an array whose first axis runs over the keys. A stable argsort per key."""
    ks = [keys[i] for i in range(shape(keys)[0])] if isinstance(keys, (Tracer, np.ndarray)) else list(keys)
    if not ks:
        raise bad_argument("lexsort", "need at least one key", ValueError)
    shapes = {tuple(shape(k)) for k in ks}
    if len(shapes) != 1:
        raise bad_argument("lexsort", f"all keys need the same shape, got {sorted(shapes)}", ShapeError)
    s = shapes.pop()
    if not s:
        raise bad_argument("lexsort", "the keys are 0-d: there is no axis to sort along", ShapeError)
    ax = normalize_axis("lexsort", axis, len(s))
    return _stable_lexsort(ks, ax)


# ----------------------------------------------------------------------------- 1-D set operations

def union1d(ar1: ArrayLike, ar2: ArrayLike, *, size: int | None = None, fill_value: Any = None) -> Any:
    """The sorted distinct values of ``ar1`` and ``ar2`` (flattened), as ``np.union1d``; traced,
    it takes JAX's ``size=K`` (as ``unique``: the rest ``fill_value``, default the smallest)."""
    a1, a2 = concrete_array("union1d", ar1), concrete_array("union1d", ar2)
    if size is None:
        if a1 is None or a2 is None:
            raise needs_size("union1d", ar1 if a1 is None else ar2, "how many distinct values there are, and so "
                           "the output shape,", "fj.union1d(a, b, size=K)")
        return np.union1d(a1, a2)
    check_size("union1d", size)
    c1, c2 = _common(ar1, ar2)
    return setops.unique(concatenate([c1, c2]), size=size, fill_value=fill_value)


def intersect1d(ar1: ArrayLike, ar2: ArrayLike, assume_unique: bool = False, return_indices: bool = False, *,
                size: int | None = None, fill_value: Any = None) -> Any:
    """The sorted distinct values in both ``ar1`` and ``ar2`` (flattened), as
    ``np.intersect1d``, with ``return_indices`` the first position of each in either. Traced,
    it takes JAX's ``size=K``: past the last common value, values are ``fill_value`` (default
    the smallest common value) and indices ar1.size and ar2.size."""
    a1, a2 = concrete_array("intersect1d", ar1), concrete_array("intersect1d", ar2)
    if size is None:
        if a1 is None or a2 is None:
            raise needs_size("intersect1d", ar1 if a1 is None else ar2, "how many values the arrays share, and so "
                           "the output shape,", "fj.intersect1d(a, b, size=K)")
        out = np.intersect1d(a1, a2, assume_unique, return_indices)
        return tuple(np.asarray(r, np.int64) if i else r for i, r in enumerate(out)) if return_indices else out
    check_size("intersect1d", size)
    c1, c2 = _common(ar1, ar2)
    n1, n2 = shape(c1)[0], shape(c2)[0]
    d = _dtype(c1)
    if not n1 or not n2:
        fill = 0 if fill_value is None else fill_value
        vals = full((size,), astype(fill, d), d)
        return (vals, full((size,), n1, np.int64), full((size,), n2, np.int64)) if return_indices else vals
    vals, pos1, found, count = _distinct(c1, isin(c1, c2), size)
    fill = _smallest_or_zero(vals, count) if fill_value is None else astype(fill_value, d)
    out = where(found, vals, fill)
    if not return_indices:
        return out
    perm2 = argsort(c2, stable=True)
    at2 = minimum(searchsorted(take(c2, perm2), vals), n2 - 1)
    return out, where(found, pos1, n1), where(found, take(perm2, at2), n2)


def setdiff1d(ar1: ArrayLike, ar2: ArrayLike, assume_unique: bool = False, *, size: int | None = None,
              fill_value: Any = None) -> Any:
    """The sorted distinct values of ``ar1`` not in ``ar2`` (flattened; with ``assume_unique``,
    ar1's values not in ar2 in their order), as ``np.setdiff1d``. Traced, it takes JAX's
    ``size=K``: the rest ``fill_value`` (default 0, as JAX's)."""
    a1, a2 = concrete_array("setdiff1d", ar1), concrete_array("setdiff1d", ar2)
    if size is None:
        if a1 is None or a2 is None:
            raise needs_size("setdiff1d", ar1 if a1 is None else ar2, "how many values of ar1 are not in ar2, and so "
                           "the output shape,", "fj.setdiff1d(a, b, size=K, fill_value=0)")
        return np.setdiff1d(a1, a2, assume_unique)
    check_size("setdiff1d", size)
    x = ravel(ar1)
    d = _dtype(x)
    fill = astype(0 if fill_value is None else fill_value, d)
    if not shape(x)[0]:
        return full((size,), fill, d)
    keep = isin(x, ravel(ar2), invert=True)
    if assume_unique:
        return _compress("setdiff1d", keep, x, 0, size, fill)
    vals, _, found, _ = _distinct(x, keep, size)
    return where(found, vals, fill)


def setxor1d(ar1: ArrayLike, ar2: ArrayLike, assume_unique: bool = False, *, size: int | None = None,
             fill_value: Any = None) -> Any:
    """The sorted distinct values in exactly one of ``ar1`` and ``ar2`` (flattened), as
    ``np.setxor1d``. Traced, it takes JAX's ``size=K``: the rest ``fill_value`` (default the
    smallest such value, as JAX's)."""
    a1, a2 = concrete_array("setxor1d", ar1), concrete_array("setxor1d", ar2)
    if size is None:
        if a1 is None or a2 is None:
            raise needs_size("setxor1d", ar1 if a1 is None else ar2, "how many values lie in exactly one array, and "
                           "so the output shape,", "fj.setxor1d(a, b, size=K)")
        return np.setxor1d(a1, a2, assume_unique)
    check_size("setxor1d", size)
    c1, c2 = _common(ar1, ar2)
    d = _dtype(c1)
    both = concatenate([c1, c2])
    if not shape(both)[0]:
        return full((size,), astype(0 if fill_value is None else fill_value, d), d)
    valid = concatenate([isin(c1, c2, invert=True), isin(c2, c1, invert=True)])
    vals, _, found, count = _distinct(both, valid, size)
    fill = _smallest_or_zero(vals, count) if fill_value is None else astype(fill_value, d)
    return where(found, vals, fill)


# ----------------------------------------------------------------------------- index helpers

def ix_(*args: ArrayLike) -> tuple[Any, ...]:
    """An open mesh from 1-D sequences, as ``np.ix_``: the i-th of N arrays has shape 1 on every
    axis but the i-th, so ``x[fj.ix_(rows, cols)]`` picks the cross product. Boolean sequences
    become their non-zero positions (concrete only); integer ones may be traced."""
    out = []
    for k, a in enumerate(args):
        o = as_operand(a, f"args[{k}]")
        if len(o.shape) != 1:
            raise bad_argument("ix_", f"cross index must be 1 dimensional, got shape {list(o.shape)} for argument {k}",
                               ShapeError)
        v = operand_value(o)
        if o.dtype.is_bool:
            if o.tracer is not None:
                raise FlowjitTypeError(f"ix_ with a traced boolean argument ({o.aval}) at {user_location()}: its "
                                       "count of True, and so the shape, depends on the values. Pass integer "
                                       "indices, e.g. fj.nonzero(mask, size=K)[0]")
            v = np.flatnonzero(np.asarray(o.array))
        elif o.tracer is None and np.asarray(o.array).size == 0:
            v = np.asarray(o.array).astype(np.int64)
        elif not o.dtype.is_int:
            raise bad_argument("ix_", f"arguments must be integer or boolean sequences, got {o.aval}", IndexError)
        out.append(reshape(v, tuple(-1 if j == k else 1 for j in range(len(args)))))
    return tuple(out)


s_ = np.s_
"""NumPy's ``np.s_``: ``fj.s_[1:3, ::2]`` is the index tuple ``(slice(1, 3), slice(None, None, 2))``."""

index_exp = np.index_exp
"""NumPy's ``np.index_exp``: as ``s_``, but always a tuple."""


class _Grid:
    """NumPy's ``mgrid`` (dense) or ``ogrid`` (open): index with slices of static numbers."""

    def __init__(self, grid: Any, name: str) -> None:
        self._grid, self._name = grid, name

    def __getitem__(self, key: Any) -> Any:
        parts = key if isinstance(key, tuple) else (key,)
        for p in parts:
            for b in ((p.start, p.stop, p.step) if isinstance(p, slice) else (p,)):
                if isinstance(b, Tracer):
                    raise FlowjitTypeError(
                        f"{self._name}[...] with a traced bound ({b.aval}) at {user_location()}: the bounds fix "
                        f"the grid's shape, which flowjit fixes when tracing. Use Python numbers (fj.arange and "
                        f"fj.meshgrid take traced offsets added afterwards)")
        return self._grid[key]

    def __repr__(self) -> str:
        return f"fj.{self._name}"


mgrid = _Grid(np.mgrid, "mgrid")
"""NumPy's ``np.mgrid``: ``fj.mgrid[0:3, 0:4]`` is the dense (2, 3, 4) grid (int64; a complex
step ``5j`` means 5 points, float64), a NumPy constant."""

ogrid = _Grid(np.ogrid, "ogrid")
"""NumPy's ``np.ogrid``: as ``mgrid``, but one array per axis, open (sides 1 elsewhere)."""


# ----------------------------------------------------------------------------- products

def matvec(x1: ArrayLike, x2: ArrayLike, /) -> Any:
    """The matrix-vector product over the last two axes of ``x1`` and the last of ``x2``, the
    other axes broadcast, as NumPy 2.2's ``np.matvec`` gufunc ``(m,n),(n)->(m)``."""
    o1, o2 = as_operand(x1, "x1"), as_operand(x2, "x2")
    if len(o1.shape) < 2 or len(o2.shape) < 1 or o1.shape[-1] != o2.shape[-1]:
        raise bad_argument("matvec", f"x1 must be (..., m, n) and x2 (..., n), got shapes {list(o1.shape)} and "
                           f"{list(o2.shape)}", ShapeError)
    return squeeze(matmul(operand_value(o1), expand_dims(operand_value(o2), -1)), -1)


def vecmat(x1: ArrayLike, x2: ArrayLike, /) -> Any:
    """The vector-matrix product of the conjugate of ``x1`` (last axis) with ``x2`` (last two
    axes), the other axes broadcast, as NumPy 2.2's ``np.vecmat`` gufunc ``(n),(n,m)->(m)``."""
    o1, o2 = as_operand(x1, "x1"), as_operand(x2, "x2")
    if len(o1.shape) < 1 or len(o2.shape) < 2 or o1.shape[-1] != o2.shape[-2]:
        raise bad_argument("vecmat", f"x1 must be (..., n) and x2 (..., n, m), got shapes {list(o1.shape)} and "
                           f"{list(o2.shape)}", ShapeError)
    v = operand_value(o1)
    if o1.dtype.is_complex:
        v = conj(v)
    return squeeze(matmul(expand_dims(v, -2), operand_value(o2)), -2)


# ----------------------------------------------------------------------------- dtype and shape predicates

def _np_dtype(t: Any) -> Any:
    return t.np if isinstance(t, DType) else t


def broadcast_shapes(*shapes: Any) -> tuple[int, ...]:
    """The shape that arrays of ``shapes`` broadcast to, as ``np.broadcast_shapes`` (a tuple)."""
    try:
        return tuple(int(d) for d in np.broadcast_shapes(*shapes))
    except ValueError as e:
        raise bad_argument("broadcast_shapes", f"{e}", ShapeError) from None


def promote_types(type1: Any, type2: Any) -> np.dtype:
    """The smallest dtype both ``type1`` and ``type2`` cast to safely, as ``np.promote_types``
    (NumPy's dtype; fj's dtypes are accepted)."""
    return np.promote_types(_np_dtype(type1), _np_dtype(type2))


# NumPy's other names for the dtypes (jnp's too), and its abstract scalar classes, the
# hierarchy ``issubdtype`` walks: ``fj.issubdtype(x.dtype, fj.floating)``.
single, double, half, csingle, cdouble = float32, float64, float16, complex64, complex128
int_, uint, float_, complex_ = int64, uint64, float64, complex128
generic, number, integer, signedinteger, unsignedinteger = (np.generic, np.number, np.integer, np.signedinteger,
                                                            np.unsignedinteger)
inexact, floating, complexfloating, character, flexible = (np.inexact, np.floating, np.complexfloating,
                                                           np.character, np.flexible)


def issubdtype(arg1: Any, arg2: Any) -> bool:
    """Whether dtype ``arg1`` is ``arg2`` or below it in NumPy's hierarchy (``np.floating``,
    ``np.integer``...), as ``np.issubdtype``; fj's dtypes are accepted."""
    return builtins.bool(np.issubdtype(_np_dtype(arg1), _np_dtype(arg2)))


def isscalar(element: Any) -> bool:
    """Whether ``element`` is a scalar (a Python or NumPy number, bool, str or bytes), as
    ``np.isscalar``: arrays, 0-d ones and traced ones included, are not (JAX's says True for
    0-d arrays)."""
    return not isinstance(element, Tracer) and builtins.bool(np.isscalar(element))


def iterable(y: Any) -> bool:
    """Whether ``y`` can be iterated, as ``np.iterable``: a traced or concrete array of rank at
    least 1, a sequence; not a 0-d array or a number."""
    if isinstance(y, Tracer):
        return len(shape(y)) > 0
    return builtins.bool(np.iterable(y))


# ----------------------------------------------------------------------------- elementwise

_M1, _M2, _M4 = 0x5555555555555555, 0x3333333333333333, 0x0F0F0F0F0F0F0F0F


def bitwise_count(x: ArrayLike, /) -> Any:
    """The number of 1 bits in each element's absolute value, uint8, as NumPy 2's
    ``np.bitwise_count`` (integers and bools). A branch-free popcount of 64-bit words."""
    o = as_operand(x, "x")
    if not (o.dtype.is_int or o.dtype.is_bool):
        raise bad_argument("bitwise_count", f"x must hold integers or bools, got {o.aval}")
    v = operand_value(o)
    if o.dtype.is_bool:
        return astype(v, np.uint8)
    bits = o.dtype.np.itemsize * 8
    if o.dtype.np.kind == "i":
        # |min| wraps to min itself; its low `bits` bits are 2**(bits-1): one bit, as NumPy counts.
        # (Masked rather than cast through uint{bits}: a cast of a cast may fold into one.)
        v = astype(abs(v), np.uint64)
        if bits < 64:
            v = bitwise_and(v, (1 << bits) - 1)
    else:
        v = astype(v, np.uint64)
    v = subtract(v, bitwise_and(right_shift(v, 1), _M1))
    v = add(bitwise_and(v, _M2), bitwise_and(right_shift(v, 2), _M2))
    v = bitwise_and(add(v, right_shift(v, 4)), _M4)
    v = add(v, right_shift(v, 8))
    v = add(v, right_shift(v, 16))
    v = add(v, right_shift(v, 32))
    return astype(bitwise_and(v, 0x7F), np.uint8)


def unwrap(p: ArrayLike, discont: ArrayLike | None = None, axis: int = -1, *,
           period: ArrayLike = 2 * math.pi) -> Any:
    """``p`` with jumps between neighbours along ``axis`` larger than ``discont`` (default
    period/2) replaced by their complement modulo ``period``, as ``np.unwrap`` (NumPy's rule at
    the boundary; integer p with an integer period stays integer). Differentiable: the
    corrections are piecewise constant."""
    o = as_operand(p, "p")
    if not o.shape:
        raise bad_argument("unwrap", f"p must be at least 1-D, got {o.aval}", ShapeError)
    ax = normalize_axis("unwrap", axis, len(o.shape))
    x = operand_value(o)
    n = o.shape[ax]
    if n < 2:
        return x
    dd = diff(x, axis=ax)
    po = as_operand(period, "period")
    dtype = promote(as_operand(dd), po)
    if dtype.is_int:
        interval_high, rem = divmod(period, 2)
        ambiguous = rem == 0
    else:
        interval_high, ambiguous = period / 2, True
    discont = period / 2 if discont is None else discont
    interval_low = -interval_high
    ddmod = add(remainder(subtract(dd, interval_low), period), interval_low)
    if ambiguous:
        ddmod = where(logical_and(equal(ddmod, interval_low), greater(dd, 0)), interval_high, ddmod)
    correct = where(less(abs(dd), discont), 0, subtract(ddmod, dd))
    head = take(x, np.arange(1), axis=ax)
    tail = add(take(x, np.arange(1, n), axis=ax), cumsum(correct, axis=ax))
    return concatenate([astype(head, dtype), astype(tail, dtype)], axis=ax)


# ----------------------------------------------------------------------------- vectorize, apply_along_axis

_DIMS = r"\(\s*(?:\w+(?:\s*,\s*\w+)*)?\s*\)"
_SIGNATURE = re.compile(rf"^\s*{_DIMS}(?:\s*,\s*{_DIMS})*\s*->\s*{_DIMS}(?:\s*,\s*{_DIMS})*\s*$")


def _parse_signature(signature: str) -> tuple[list[tuple[str, ...]], list[tuple[str, ...]]]:
    if not _SIGNATURE.match(signature):
        raise bad_argument("vectorize", f"signature={signature!r} is not a gufunc signature such as "
                           "'(n),(n)->()' or '(m,n)->(n),(m)'", ValueError)
    ins, outs = signature.split("->")
    return _core_dims(ins), _core_dims(outs)


def _core_dims(side: str) -> list[tuple[str, ...]]:
    return [tuple(re.findall(r"\w+", g)) for g in re.findall(r"\(([^)]*)\)", side)]


def _map_leaves(fn: Callable[[Any], Any], tree: Any) -> Any:
    if isinstance(tree, tuple):
        return tuple(_map_leaves(fn, t) for t in tree)
    if isinstance(tree, list):
        return [_map_leaves(fn, t) for t in tree]
    return fn(tree)


def _map_flat(fn: Callable[..., Any], args: Sequence[Any], loop: tuple[int, ...],
              cores: Sequence[tuple[int, ...]]) -> Any:
    """``fn`` over the loop positions of ``args`` (each broadcast to loop + its core shape):
    the loop axes flattened into one batch axis, ``vmap`` over it, and the outputs' batch axis
    unflattened."""
    if not loop:
        return fn(*args)
    count = math.prod(loop)
    if count == 0:
        raise bad_argument("vectorize", f"a loop dimension is 0 (loop shape {list(loop)}): there is no example to "
                           "run the function on to learn its output shape", ValueError)
    flat = [reshape(broadcast_to(a, loop + c), (count,) + c) for a, c in zip(args, cores)]
    out = vmap(fn)(*flat)
    return _map_leaves(lambda r: reshape(r, loop + tuple(shape(r))[1:]), out)


class vectorize:  # noqa: N801 - NumPy's name
    """``pyfunc`` applied over the broadcast of its array arguments, as ``np.vectorize`` and
    ``jnp.vectorize``, without a Python loop: the loop axes flattened and mapped with
    ``fj.vmap``, so it traces, compiles and differentiates. Without ``signature`` pyfunc sees
    scalars; with one (``'(n),(n)->()'``) each argument's last axes are its core dimensions.
    ``excluded`` names positions or keywords passed through unmapped (a decorator:
    ``@fj.vectorize`` or ``fj.vectorize(f, signature=...)``)."""

    def __init__(self, pyfunc: Callable[..., Any], *, excluded: Iterable[int | str] = frozenset(),
                 signature: str | None = None) -> None:
        self.pyfunc = pyfunc
        self.excluded = frozenset(excluded)
        self.signature = signature
        self._parsed = None if signature is None else _parse_signature(signature)
        self.__name__ = getattr(pyfunc, "__name__", "vectorized")
        self.__doc__ = getattr(pyfunc, "__doc__", None)
        self._compiled: TracedFunction | None = None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        # Outside a trace, one fj.function per vectorize object, the excluded arguments
        # static, so a second call of a signature reuses its program instead of tracing the
        # fresh closure _map builds each call (NumPy's vectorize is called in loops).
        if current_trace() is None:
            layout = self._layout(args, kwargs)
            if layout is not None:
                if self._compiled is None:
                    self._compiled = TracedFunction(self._from_layout, static_argnums=(1,))
                mapped = [a for i, a in enumerate(args) if i not in self.excluded]
                mapped += [kwargs[k] for k in layout[2]]
                return self._compiled(tuple(np.asarray(a) if isinstance(a, (list, tuple)) else a
                                            for a in mapped), layout)
        return self._map(args, kwargs)

    def _layout(self, args: tuple, kwargs: dict[str, Any]) -> tuple | None:
        """Where each argument goes and the excluded ones' values, hashable as a static
        argument; None when an excluded value cannot be hashed."""
        layout = (len(args), tuple((i, args[i]) for i in range(len(args)) if i in self.excluded),
                  tuple(sorted(k for k in kwargs if k not in self.excluded)),
                  tuple(sorted((k, v) for k, v in kwargs.items() if k in self.excluded)))
        try:
            hash(layout)
        except TypeError:
            return None
        return layout

    def _from_layout(self, mapped: tuple, layout: tuple) -> Any:
        n_args, excluded_pos, mapped_kw, excluded_kw = layout
        values = iter(mapped)
        fixed = dict(excluded_pos)
        args = [fixed[i] if i in fixed else next(values) for i in range(n_args)]
        kwargs = dict(excluded_kw)
        kwargs.update((k, next(values)) for k in mapped_kw)
        return self._map(tuple(args), kwargs)

    def _map(self, args: tuple, kwargs: dict[str, Any]) -> Any:
        mapped_pos = [i for i in range(len(args)) if i not in self.excluded]
        mapped_kw = [k for k in kwargs if k not in self.excluded]
        arrays = [args[i] for i in mapped_pos] + [kwargs[k] for k in mapped_kw]
        n_pos = len(mapped_pos)

        def call(*vals: Any) -> Any:
            full_args = list(args)
            for i, v in zip(mapped_pos, vals[:n_pos]):
                full_args[i] = v
            kw = dict(kwargs)
            kw.update(zip(mapped_kw, vals[n_pos:]))
            return self.pyfunc(*full_args, **kw)

        shapes = [tuple(shape(a)) for a in arrays]
        if self._parsed is None:
            cores: list[tuple[int, ...]] = [()] * len(arrays)
            loops = shapes
        else:
            in_dims, _ = self._parsed
            if len(in_dims) != len(arrays):
                raise bad_argument("vectorize", f"signature {self.signature!r} has {len(in_dims)} inputs, the call "
                                   f"maps {len(arrays)} argument(s)", ValueError)
            sizes: dict[str, int] = {}
            cores, loops = [], []
            for k, (s, dims) in enumerate(zip(shapes, in_dims)):
                if len(s) < len(dims):
                    raise bad_argument("vectorize", f"argument {k} of shape {list(s)} has fewer axes than its core "
                                       f"dimensions {dims} in signature {self.signature!r}", ShapeError)
                core = s[len(s) - len(dims):]
                for name, size in zip(dims, core):
                    if sizes.setdefault(name, size) != size:
                        raise bad_argument("vectorize", f"core dimension {name!r} is {sizes[name]} in one argument "
                                           f"and {size} in argument {k} (signature {self.signature!r})", ShapeError)
                cores.append(core)
                loops.append(s[:len(s) - len(dims)])
        try:
            loop = tuple(int(d) for d in np.broadcast_shapes(*loops)) if loops else ()
        except ValueError:
            raise bad_argument("vectorize", f"the arguments' loop shapes {[list(s) for s in loops]} do not "
                               "broadcast", ShapeError) from None
        return _map_flat(call, arrays, loop, cores)


def apply_along_axis(func1d: Callable[..., Any], axis: int, arr: ArrayLike, *args: Any, **kwargs: Any) -> Any:
    """``func1d`` applied to every 1-D slice of ``arr`` along ``axis``, as
    ``np.apply_along_axis``: the result's axes from func1d's output replace ``axis``. The slices
    are mapped with ``fj.vmap`` (no Python loop), so it traces and differentiates."""
    o = as_operand(arr, "arr")
    nd = len(o.shape)
    ax = normalize_axis("apply_along_axis", axis, nd)
    moved = moveaxis(operand_value(o), ax, -1)
    loop = tuple(shape(moved))[:-1]
    if math.prod(loop) == 0:
        raise bad_argument("apply_along_axis", f"cannot apply along axis {ax} when an iteration dimension is 0 "
                           f"(arr of shape {list(o.shape)})", ValueError)
    out = _map_flat(lambda v: func1d(v, *args, **kwargs), [moved], loop, [(o.shape[ax],)])
    core = len(shape(out)) - len(loop)
    # out is loop + core; the core axes go where `axis` was.
    pre = list(range(ax))
    order = pre + [len(loop) + i for i in range(core)] + list(range(ax, len(loop)))
    return transpose(out, order) if order != list(range(len(order))) else out


for _fn in (apply_along_axis, argwhere, bitwise_count, choose, compress, delete, diagflat, extract, fill_diagonal,
            flatnonzero, insert, intersect1d, ix_, lexsort, matvec, piecewise, place, put, put_along_axis, setdiff1d,
            setxor1d, union1d, unwrap, vecmat):
    numpy_counterpart(_fn)
