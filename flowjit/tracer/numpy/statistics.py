"""Order statistics, correlation and histograms: ``median``, ``quantile``, ``percentile`` and
their NaN-ignoring forms (``nanmedian``, ``nanquantile``, ``nanpercentile``); ``cov`` and
``corrcoef``; ``histogram``, ``histogram_bin_edges``, ``bincount`` and ``digitize``.

Order statistics sort the reduced axes (``fj.sort``, so their gradient reaches the elements
picked, through the sorting permutation) and interpolate between neighbours with NumPy's own
index arithmetic and rounding (so the same bits), for every ``method`` NumPy has without
weights: ``'linear'`` (the default), ``'lower'``, ``'higher'``, ``'nearest'``, ``'midpoint'``
and the Hyndman & Fan ones (``'inverted_cdf'``, ``'averaged_inverted_cdf'``,
``'closest_observation'``, ``'interpolated_inverted_cdf'``, ``'hazen'``, ``'weibull'``,
``'median_unbiased'``, ``'normal_unbiased'``). ``q`` may be a
scalar, a static array or a traced one; the result has q's shape before the reduced one. A
NaN in a slice makes its statistic NaN; the ``nan*`` forms skip NaNs, counting per slice
while the program runs (an all-NaN or empty slice gives NaN, as jax.numpy's).

Counts are static shapes: ``bincount`` of a traced array needs JAX's ``length=``, and
``histogram`` a static number of bins (its range, edges and weights may be traced)."""

from __future__ import annotations

import builtins
import math
from typing import Any

import numpy as np

from flowjit.ir.dtypes import DType, float16, float32, float64, int64
from flowjit.ir.dtypes import dtype as as_dtype
from flowjit.ir.errors import FlowjitTypeError, ShapeError
from flowjit.tracer.core import Tracer, user_location
from flowjit.tracer.numpy.conversion import astype
from flowjit.tracer.numpy.counterparts import numpy_counterpart
from flowjit.tracer.numpy.creation import full, zeros
from flowjit.tracer.numpy.indexing import index_along, scatter_add, take, take_along_axis
from flowjit.tracer.numpy.layout import expand_dims, moveaxis, ndim, ravel, reshape, shape, squeeze, transpose
from flowjit.tracer.numpy.manipulation import concatenate, flip
from flowjit.tracer.numpy.matrices import diagonal
from flowjit.tracer.numpy.operands import (
    ArrayLike,
    as_operand,
    bad_argument,
    cast,
    known_array,
    normalize_axes,
    operand_value,
    promote,
    refuse_out,
    static_int,
    strong,
)
from flowjit.tracer.numpy.products import matmul
from flowjit.tracer.numpy.ranges import linspace
from flowjit.tracer.numpy.reductions import average, diff, max, mean, min, sum
from flowjit.tracer.numpy.sorting_searching import searchsorted, sort
from flowjit.tracer.numpy.ufuncs import (
    add,
    ceil,
    clip,
    conj,
    divide,
    equal,
    floor,
    floor_divide,
    greater_equal,
    imag,
    isnan,
    less_equal,
    logical_and,
    logical_not,
    maximum,
    minimum,
    multiply,
    real,
    remainder,
    rint,
    sqrt,
    subtract,
    where,
)

__all__: list[str] = [
    "bincount", "corrcoef", "cov", "digitize", "histogram", "histogram2d", "histogram_bin_edges", "histogramdd",
    "median", "nanmedian",
    "nanpercentile", "nanquantile", "percentile", "quantile",
]

# NumPy's methods without weights, by how they pick: a whole index, or two neighbours and a weight.
_DISCRETE = ("lower", "higher", "nearest", "inverted_cdf", "closest_observation")
# The continuous Hyndman & Fan methods: virtual index n q + alpha + q (1 - alpha - beta) - 1.
_HYNDMAN_FAN = {"interpolated_inverted_cdf": (0.0, 1.0), "hazen": (0.5, 0.5), "weibull": (0.0, 0.0),
                "median_unbiased": (1 / 3.0, 1 / 3.0), "normal_unbiased": (3 / 8.0, 3 / 8.0)}
_METHODS = ("linear", "midpoint", "averaged_inverted_cdf", *_DISCRETE, *_HYNDMAN_FAN)


# ---- order statistics ------------------------------------------------------------------------



def _reduced_last(fname: str, a: ArrayLike, axis: Any) -> tuple[Any, tuple[int, ...], tuple[int, ...]]:
    """a with the axes to reduce moved last and merged into one (all of them when ``axis`` is
    None), the shape of the axes kept, and the shape ``keepdims=True`` gives."""
    o = as_operand(a, "a")
    if o.dtype.is_complex:
        raise bad_argument(fname, f"complex numbers are not ordered ({o.aval}); take the statistic of their abs or "
                           "real part")
    nd = len(o.shape)
    v = operand_value(o)
    if axis is None:
        return reshape(v, (math.prod(o.shape),)), (), (1,) * nd
    axes = normalize_axes(fname, axis, nd)
    kept = [i for i in range(nd) if i not in axes]
    kept_shape = tuple(o.shape[i] for i in kept)
    v = reshape(transpose(v, kept + list(axes)), kept_shape + (math.prod(o.shape[i] for i in axes),))
    return v, kept_shape, tuple(1 if i in axes else o.shape[i] for i in range(nd))


def _pick(s: Any, idx: Any) -> Any:
    """s[..., idx] per slice: s of shape K + (n,), idx of shape (m,) + K (or (m,) + 1s, the
    same positions in every slice); the result has shape (m,) + K."""
    k = ndim(s) - 1
    if k == 0:
        return take(s, reshape(idx, (-1,)))
    return moveaxis(take_along_axis(s, moveaxis(idx, 0, -1), -1), -1, 0)


def _lerp(a: Any, b: Any, t: Any, d: DType | None) -> Any:
    """a + (b - a) t as NumPy's quantiles compute it (from b's side when t >= 0.5), so the
    same bits; its derivative is 1 - t in a and t in b. ``d``: the dtype a weak (Python
    scalar) q leaves the weights in, rounded there after they are computed in q's."""
    from_b = greater_equal(t, 0.5)
    t_rest = subtract(1, t)
    if d is not None:
        t, t_rest = astype(t, d), astype(t_rest, d)
    diff = subtract(b, a)
    return where(from_b, subtract(b, multiply(diff, t_rest)), add(a, multiply(diff, t)))


def _is_weak(q: ArrayLike) -> bool:
    """Whether q is a Python scalar, whose weights NumPy rounds to a float array's dtype."""
    return type(q) in (int, float)


def _check_q(fname: str, q: ArrayLike, top: int) -> None:
    arr = known_array(q)
    if arr is not None and arr.size and not bool(np.all((arr >= 0) & (arr <= top))):
        what = "Percentiles" if top == 100 else "Quantiles"
        raise bad_argument(fname, f"{what} must be in the range [0, {top}], got q={arr.tolist()!r}", ShapeError)


def _minus_one(n: Any) -> Any:
    """n - 1, a Python int (weak, as NumPy's count) for a static n."""
    return n - 1 if isinstance(n, int) else subtract(n, 1)


def _virtual_index(method: str, n: Any, q: Any) -> Any:
    """Where ``method`` reads the sorted slice of n values for q, as NumPy computes it (a whole
    index for the discrete methods, before clipping)."""
    if method in ("linear", "midpoint", "lower", "higher", "nearest"):
        vi = multiply(_minus_one(n), q)
        return {"lower": floor, "higher": ceil, "nearest": rint}.get(method, lambda v: v)(vi)
    if method in _HYNDMAN_FAN:
        alpha, beta = _HYNDMAN_FAN[method]
        return subtract(add(multiply(n, q), add(alpha, multiply(q, 1 - alpha - beta))), 1)
    if method == "averaged_inverted_cdf":
        return subtract(multiply(n, q), 1)
    # inverted_cdf and closest_observation: the next index, or the previous one when the
    # virtual index is whole (closest_observation: and its previous one is odd).
    vi = subtract(multiply(n, q), 1) if method == "inverted_cdf" else subtract(subtract(multiply(n, q), 1), 0.5)
    prev = floor(vi)
    take_prev = equal(subtract(vi, prev), 0)
    if method == "closest_observation":
        take_prev = logical_and(take_prev, equal(remainder(prev, 2), 1))
    return where(take_prev, prev, add(prev, 1))


def _quantile(fname: str, a: ArrayLike, q: ArrayLike, axis: Any, method: str, keepdims: bool,
              nan_aware: bool, weak: bool) -> Any:
    if method not in _METHODS:
        raise bad_argument(fname, f"method={method!r}; allowed: {', '.join(map(repr, _METHODS))} (weights= is not "
                           "supported)")
    o = as_operand(a, "a")
    discrete = method in _DISCRETE
    if o.dtype.is_bool and not discrete:
        raise bad_argument(fname, f"method={method!r} interpolates, which bools cannot (NumPy refuses boolean "
                           f"subtract); cast a to a number, or use one of {', '.join(map(repr, _DISCRETE))}")
    qo = as_operand(q, "q")
    if qo.dtype.is_complex:
        raise bad_argument(fname, f"q must be real, got {qo.aval}")
    # NumPy computes the virtual index in q's dtype (float64 for a Python float); the weights
    # of a Python scalar q are weak, so a float array's dtype is the result's. A whole q
    # (0 or 1) reads a whole index with 'linear'.
    qd = qo.dtype
    whole = not qd.is_inexact and method == "linear"
    if not qd.is_inexact and not whole:
        qd = float64
    x, kept, keep = _reduced_last(fname, o, axis)
    n = shape(x)[-1]
    q_shape = tuple(qo.shape)
    out_shape = q_shape + (keep if keepdims else kept)
    floats = o.dtype.is_float
    if n == 0:  # nothing to pick (NumPy raises an IndexError): NaN, as a mean of nothing
        d = o.dtype if (discrete or whole or weak) and floats else promote(strong(o), cast(qo, qd))
        return full(out_shape, np.nan, d if d.is_inexact else float64)
    s = sort(x, axis=-1)  # NaN last
    qv = reshape(operand_value(strong(cast(qo, qd))), (math.prod(q_shape),) + (1,) * len(kept))
    if nan_aware and floats:
        count: Any = sum(astype(logical_not(isnan(s)), int64), axis=-1)  # the kept shape
        n_q: Any = count if whole else astype(count, qd)
        last: Any = subtract(count, 1)
    else:
        count, n_q, last = None, n, n - 1
    vi = _virtual_index(method, n_q, qv)
    if discrete or whole:
        out = _pick(s, clip(astype(vi, int64), 0, maximum(last, 0)))
    else:
        below = floor(vi)
        above_all = greater_equal(vi, _minus_one(n_q))
        lo = where(above_all, last, maximum(astype(below, int64), 0))
        hi = where(above_all, last, maximum(add(astype(below, int64), 1), 0))
        gamma = subtract(vi, below)
        if method == "midpoint":  # halfway, unless the virtual index is a whole one
            gamma = astype(where(equal(gamma, 0), 0.0, 0.5), qd)
        elif method == "averaged_inverted_cdf":  # the next one, or halfway at a whole index
            gamma = astype(where(equal(gamma, 0), 0.5, 1.0), qd)
        out = _lerp(_pick(s, lo), _pick(s, hi), gamma, o.dtype if weak and floats else None)
    if floats:
        nan = equal(count, 0) if count is not None else isnan(index_along(s, ndim(s) - 1, -1))
        out = where(nan, np.nan, out)
    return reshape(out, out_shape)


@numpy_counterpart
def quantile(a: ArrayLike, q: ArrayLike, axis: Any = None, out: None = None, overwrite_input: bool = False,
             method: str = "linear", keepdims: bool = False) -> Any:
    """The ``q``-th quantiles (q in [0, 1]) of ``a`` over ``axis`` (all axes when None; an int
    or a tuple), as ``np.quantile``: the sorted slice read at the virtual index
    ``(n - 1) * q``, interpolated by ``method``: 'linear' (the default), 'lower', 'higher',
    'nearest', 'midpoint' or another of NumPy's methods without weights. The result has q's
    shape followed by the reduced shape; a NaN in a slice makes its quantiles NaN. Dtypes are
    NumPy's: ints give float64 (their own dtype with the methods that pick an element), a
    Python float q keeps a float array's dtype."""
    refuse_out("quantile", out)
    _check_q("quantile", q, 1)
    return _quantile("quantile", a, q, axis, method, keepdims, False, _is_weak(q))


@numpy_counterpart
def nanquantile(a: ArrayLike, q: ArrayLike, axis: Any = None, out: None = None, overwrite_input: bool = False,
                method: str = "linear", keepdims: bool = False) -> Any:
    """``quantile`` of the elements of each slice that are not NaN, as ``np.nanquantile``: the
    virtual index is ``(count - 1) * q`` with each slice's own count of non-NaN elements,
    counted while the program runs; an all-NaN slice gives NaN."""
    refuse_out("nanquantile", out)
    _check_q("nanquantile", q, 1)
    return _quantile("nanquantile", a, q, axis, method, keepdims, True, _is_weak(q))


def _percent(fname: str, q: ArrayLike) -> Any:
    _check_q(fname, q, 100)
    return divide(q, 100)


@numpy_counterpart
def percentile(a: ArrayLike, q: ArrayLike, axis: Any = None, out: None = None, overwrite_input: bool = False,
               method: str = "linear", keepdims: bool = False) -> Any:
    """The ``q``-th percentiles (q in [0, 100]) of ``a`` over ``axis``, as ``np.percentile``:
    ``quantile`` of q / 100 (in q's dtype, as NumPy 2 divides it)."""
    refuse_out("percentile", out)
    return _quantile("percentile", a, _percent("percentile", q), axis, method, keepdims, False, _is_weak(q))


@numpy_counterpart
def nanpercentile(a: ArrayLike, q: ArrayLike, axis: Any = None, out: None = None, overwrite_input: bool = False,
                  method: str = "linear", keepdims: bool = False) -> Any:
    """``percentile`` of the elements that are not NaN, as ``np.nanpercentile``: ``nanquantile``
    of q / 100."""
    refuse_out("nanpercentile", out)
    return _quantile("nanpercentile", a, _percent("nanpercentile", q), axis, method, keepdims, True, _is_weak(q))


def _mean_of_two(a: Any, b: Any) -> Any:
    """(a + b) / 2 as ``np.mean`` of the two computes it (float16 in float32, ints in float64)."""
    d = as_operand(a).dtype
    acc = float32 if d == float16 else (d if d.is_inexact else float64)
    r = divide(add(astype(a, acc), astype(b, acc)), 2)
    return astype(r, d) if d.is_inexact else r


@numpy_counterpart
def median(a: ArrayLike, axis: Any = None, out: None = None, overwrite_input: bool = False,
           keepdims: bool = False) -> Any:
    """The median of ``a`` over ``axis`` (all axes when None; an int or a tuple), as
    ``np.median``: the middle element of each sorted slice, or the mean of the middle two
    (ints and bools give float64); a NaN in a slice makes its median NaN, an empty slice gives
    NaN. The gradient goes to the middle element, or half to each of the middle two."""
    refuse_out("median", out)
    o = as_operand(a, "a")
    x, kept, keep = _reduced_last("median", o, axis)
    n = shape(x)[-1]
    out_shape = keep if keepdims else kept
    if n == 0:
        return full(out_shape, np.nan, o.dtype if o.dtype.is_inexact else float64)
    s = sort(x, axis=-1)
    last = ndim(s) - 1
    if n % 2:
        r = index_along(s, last, n // 2)
        r = r if o.dtype.is_inexact else astype(r, float64)
    else:
        r = _mean_of_two(index_along(s, last, n // 2 - 1), index_along(s, last, n // 2))
    if o.dtype.is_float:
        r = where(isnan(index_along(s, last, -1)), np.nan, r)
    return reshape(r, out_shape)


@numpy_counterpart
def nanmedian(a: ArrayLike, axis: Any = None, out: None = None, overwrite_input: bool = False,
              keepdims: bool = False) -> Any:
    """The median of the elements of each slice that are not NaN, as ``np.nanmedian``: the
    middle one or the mean of the middle two of each slice's own count (counted while the
    program runs); an all-NaN slice gives NaN. Ints and bools give ``median``'s."""
    refuse_out("nanmedian", out)
    o = as_operand(a, "a")
    if not o.dtype.is_float:
        return median(a, axis=axis, keepdims=keepdims)
    x, kept, keep = _reduced_last("nanmedian", o, axis)
    out_shape = keep if keepdims else kept
    if shape(x)[-1] == 0:
        return full(out_shape, np.nan, o.dtype)
    s = sort(x, axis=-1)
    count = sum(astype(logical_not(isnan(s)), int64), axis=-1)
    lo, hi = floor_divide(subtract(count, 1), 2), floor_divide(count, 2)
    pair = _pick(s, concatenate([expand_dims(lo, 0), expand_dims(hi, 0)]))
    first, second = index_along(pair, 0, 0), index_along(pair, 0, 1)
    r = where(equal(lo, hi), first, _mean_of_two(first, second))
    return reshape(where(equal(count, 0), np.nan, r), out_shape)


# ---- covariance and correlation ---------------------------------------------------------------


def _rows(fname: str, name: str, x: ArrayLike, rowvar: bool, d: DType) -> Any:
    """x as a 2-D float array of variables in rows (np.cov's ``array(m, ndmin=2)`` and transpose)."""
    o = as_operand(x, name)
    if len(o.shape) > 2:
        raise bad_argument(fname, f"{name} has more than 2 dimensions (shape {list(o.shape)}); give one variable "
                           "per row (or column, with rowvar=False)", ShapeError)
    v = astype(operand_value(o), d)
    if len(o.shape) < 2:
        v = reshape(v, (1, math.prod(o.shape)))
    elif not rowvar:
        v = transpose(v)
    return v


def _check_weights(fname: str, name: str, w: ArrayLike, n: int, integral: bool) -> Any:
    o = as_operand(w, name)
    if len(o.shape) != 1 or o.shape[0] != n:
        raise bad_argument(fname, f"{name} of shape {list(o.shape)} must be 1-D with one weight per observation "
                           f"({n})", ShapeError)
    if integral and not (o.dtype.is_int or o.dtype.is_bool):
        raise bad_argument(fname, f"{name} must be integers (frequencies), got {o.aval}")
    arr = known_array(w)
    if arr is not None and bool(np.any(arr < 0)):
        raise bad_argument(fname, f"{name} cannot be negative", ShapeError)
    return operand_value(o)


@numpy_counterpart
def cov(m: ArrayLike, y: ArrayLike = None, rowvar: bool = True, bias: bool = False, ddof: int | None = None,
        fweights: ArrayLike = None, aweights: ArrayLike = None, *, dtype: Any = None) -> Any:
    """The covariance matrix of the variables in the rows of ``m`` (columns with
    ``rowvar=False``), and of ``y``'s when given, as ``np.cov``: normalized by N - 1, by N
    with ``bias=True``, by N - ``ddof`` when given; ``fweights`` (integer frequencies) and
    ``aweights`` (observation weights) may be traced. The result is float64 unless ``dtype``
    says otherwise (NumPy's result_type(m, y, float64)); a single variable gives a 0-d array.
    Zero degrees of freedom give inf or NaN, as NumPy's (which also warns)."""
    ops = [as_operand(m, "m")] + ([as_operand(y, "y")] if y is not None else [])
    d = as_dtype(dtype) if dtype is not None else promote(*[strong(o) for o in ops], as_operand(np.zeros(())))
    if ddof is not None and ddof != int(ddof):
        raise bad_argument("cov", f"ddof must be an integer, got {ddof!r}")
    x = _rows("cov", "m", m, rowvar, d)
    if shape(x)[0] == 0:
        return np.zeros((0, 0), d.np)
    if y is not None:
        y_shape = as_operand(y, "y").shape
        # NumPy leaves a y of one row as it is, even with rowvar=False.
        yv = _rows("cov", "y", y, rowvar or len(y_shape) < 2 or y_shape[0] == 1, d)
        if shape(yv)[1] != shape(x)[1]:
            raise bad_argument("cov", f"m and y have {shape(x)[1]} and {shape(yv)[1]} observations; they must have "
                               "the same number", ShapeError)
        x = concatenate([x, yv], axis=0)
    if ddof is None:
        ddof = 0 if bias else 1
    ddof = int(ddof)
    n = shape(x)[1]
    w = None
    if fweights is not None:
        w = astype(_check_weights("cov", "fweights", fweights, n, True), float64)
    aw = None
    if aweights is not None:
        aw = astype(_check_weights("cov", "aweights", aweights, n, False), float64)
        w = aw if w is None else multiply(w, aw)
    if w is None:
        avg = mean(x, axis=1)
        fact: Any = float(n - ddof)
    else:
        avg, w_sum = average(x, axis=1, weights=w, returned=True)
        w_sum = index_along(w_sum, 0, 0)
        if ddof == 0:
            fact = w_sum
        elif aw is None:
            fact = subtract(w_sum, ddof)
        else:
            fact = subtract(w_sum, divide(multiply(ddof, sum(multiply(w, aw))), w_sum))
    fact = where(less_equal(fact, 0), 0.0, fact)
    xc = subtract(x, expand_dims(avg, 1))
    xt = transpose(xc if w is None else multiply(xc, w))
    c = matmul(xc, conj(xt) if d.is_complex else xt)
    c = multiply(c, astype(divide(1, fact), d.real_dtype if d.is_complex else d))
    return squeeze(c)


@numpy_counterpart
def corrcoef(x: ArrayLike, y: ArrayLike = None, rowvar: bool = True, *, dtype: Any = None) -> Any:
    """Pearson correlation coefficients of the variables in the rows of ``x`` (and ``y``), as
    ``np.corrcoef``: ``cov`` divided by the outer product of the standard deviations, clipped
    to [-1, 1]. A single variable gives c / c (1, or NaN for a constant one)."""
    c = cov(x, y, rowvar, dtype=dtype)
    if ndim(c) == 0:
        return divide(c, c)
    sd = sqrt(real(diagonal(c)))
    c = divide(divide(c, expand_dims(sd, 1)), expand_dims(sd, 0))
    if as_operand(c).dtype.is_complex:
        return add(clip(real(c), -1, 1), multiply(clip(imag(c), -1, 1), 1j))
    return clip(c, -1, 1)


# ---- histograms --------------------------------------------------------------------------------


def _bin_count(fname: str, bins: Any) -> int | None:
    """The number of equal bins when ``bins`` is one (None when it gives the edges)."""
    if isinstance(bins, str):
        raise bad_argument(fname, f"bins={bins!r}: estimators of the bin count are not supported; give a number of "
                           "bins or the edges")
    if isinstance(bins, Tracer) or np.ndim(bins) != 0:
        return None
    count = static_int(fname, "bins", bins)
    if count < 1:
        raise bad_argument(fname, f"bins={count} must be a positive integer", ShapeError)
    return count


@numpy_counterpart
def histogram_bin_edges(a: ArrayLike, bins: Any = 10, range: Any = None,  # noqa: A002
                        weights: ArrayLike = None) -> Any:
    """The edges of ``histogram``'s bins, as ``np.histogram_bin_edges``: ``bins`` itself when
    it is the edges (1-D, increasing), else ``bins + 1`` equally spaced edges over ``range``
    (default: a's minimum and maximum; traced values are fine), widened by 0.5 each side when
    the range is empty. Ints give float64 edges; floats their own dtype."""
    return _bin_edges("histogram_bin_edges", a, bins, range)


def _bin_edges(fname: str, a: ArrayLike, bins: Any, range: Any) -> Any:  # noqa: A002
    count = _bin_count(fname, bins)
    o = as_operand(a, "a")
    if count is None:
        e = as_operand(bins, "bins")
        if len(e.shape) != 1 or e.shape[0] < 1:
            raise bad_argument(fname, f"bins as edges must be a non-empty 1-D array, got shape "
                               f"{list(e.shape)}", ShapeError)
        arr = known_array(bins)
        if arr is not None and bool(np.any(arr[1:] < arr[:-1])):
            raise bad_argument(fname, "bins must increase monotonically, when an array", ShapeError)
        return operand_value(e)
    flat = ravel(operand_value(o))
    if range is None:
        if math.prod(o.shape) == 0:
            lo, hi = as_operand(0.0), as_operand(1.0)
        else:
            lo, hi = as_operand(min(flat)), as_operand(max(flat))
            arr = known_array(o)
            if arr is not None and not np.all(np.isfinite([arr.min(), arr.max()])):
                raise bad_argument(fname, f"autodetected range of [{arr.min()}, {arr.max()}] is not "
                                   "finite: give range=, or drop the NaNs and infinities", ShapeError)
    else:
        if len(range) != 2:
            raise bad_argument(fname, f"range={range!r} must be a pair (min, max)", ShapeError)
        lo, hi = as_operand(range[0], "range"), as_operand(range[1], "range")
        if lo.tracer is None and hi.tracer is None:
            if float(lo.array) > float(hi.array):
                raise bad_argument(fname, f"range={range!r}: max must be larger than min",
                                   ShapeError)
            if not (np.isfinite(lo.array) and np.isfinite(hi.array)):
                raise bad_argument(fname, f"range={range!r} is not finite", ShapeError)
    d = promote(lo, hi, strong(o))
    if not d.is_float:
        d = float64
    first, last = operand_value(cast(lo, d)), operand_value(cast(hi, d))
    empty = equal(first, last)
    first, last = where(empty, subtract(first, 0.5), first), where(empty, add(last, 0.5), last)
    return linspace(first, last, count + 1, dtype=d)


@numpy_counterpart
def histogram(a: ArrayLike, bins: Any = 10, range: Any = None, density: bool | None = None,  # noqa: A002
              weights: ArrayLike = None) -> tuple[Any, Any]:
    """The histogram of ``a`` (flattened) and its bin edges, as ``np.histogram``: ``bins``
    equal bins over ``range`` (see ``histogram_bin_edges``; a static count, or the edges
    themselves), each holding the values from its left edge up to the next (the last one
    including its right edge); values outside, and NaN, are not counted. Counts are int64,
    or sums of ``weights`` in their dtype; ``density=True`` divides by the total and the bin
    widths (float64)."""
    edges = _bin_edges("histogram", a, bins, range)
    flat = ravel(operand_value(as_operand(a, "a")))
    nb = shape(edges)[0] - 1
    # searchsorted's right side is the bin from each left edge; the last edge closes the last bin.
    # Slot 0 takes the values below, slot nb + 1 those above and the NaNs; both are sliced off.
    slot = searchsorted(edges, flat, side="right")
    slot = where(equal(flat, index_along(edges, 0, -1)), nb, slot)
    if weights is None:
        counts = scatter_add(zeros(nb + 2, int64), slot, full(shape(slot), 1, int64))
        out_d = int64
    else:
        w = as_operand(weights, "weights")
        if w.shape != as_operand(a, "a").shape:
            raise bad_argument("histogram", f"weights of shape {list(w.shape)} must have a's shape "
                               f"{list(as_operand(a, 'a').shape)}", ShapeError)
        out_d = w.dtype
        acc = float64 if out_d.is_float else out_d  # NumPy's bincount adds in float64
        counts = scatter_add(zeros(nb + 2, acc), slot, astype(ravel(operand_value(w)), acc))
    counts = astype(index_along(counts, 0, builtins.slice(1, nb + 1)), out_d)
    if density:
        widths = astype(diff(edges), float64)
        counts = divide(divide(counts, widths), sum(counts))
    return counts, edges


@numpy_counterpart
def histogramdd(sample: Any, bins: Any = 10, range: Any = None, density: bool | None = None,  # noqa: A002
                weights: ArrayLike = None) -> tuple[Any, list[Any]]:
    """The D-dimensional histogram of ``sample`` (N points as an (N, D) array, or a sequence of
    D arrays of N values) and its edges, as ``np.histogramdd``: per dimension ``bins`` is a
    static count or the edges (one for all, or a sequence), ``range`` a (min, max) pair or
    None, binned as ``histogram`` bins (the last bin closed); points outside any range, and
    NaN, are not counted. Counts are float64 (sums of ``weights``); ``density=True`` divides by
    the total and the bins' volumes."""
    return _histogramdd("histogramdd", sample, bins, range, density, weights)


def _histogramdd(fname: str, sample: Any, bins: Any, range: Any, density: bool | None,  # noqa: A002
                 weights: ArrayLike) -> tuple[Any, list[Any]]:
    if isinstance(sample, (list, tuple)):
        columns = [ravel(operand_value(as_operand(c, "sample"))) for c in sample]
    else:
        o = as_operand(sample, "sample")
        if len(o.shape) > 2:
            raise bad_argument(fname, f"sample must be (N, D) or a sequence of D arrays, got shape "
                               f"{list(o.shape)}", ShapeError)
        v = operand_value(o) if len(o.shape) == 2 else reshape(operand_value(o), (-1, 1))
        columns = [index_along(v, 1, k) for k in builtins.range(shape(v)[1])]
    dims = len(columns)
    n = shape(columns[0])[0] if columns else 0
    if any(shape(c)[0] != n for c in columns):
        raise bad_argument(fname, f"the sample's {dims} arrays must have one length, got "
                           f"{[shape(c)[0] for c in columns]}", ShapeError)
    if isinstance(bins, (list, tuple)) or ndim(bins) > 0:   # one entry per dimension, as NumPy
        if len(bins) != dims:
            raise bad_argument(fname, f"bins has {len(bins)} entries for a {dims}-dimensional sample: give one "
                               "count or one array of edges per dimension", ShapeError)
        bins_of = [bins[k] for k in builtins.range(dims)]
    else:
        bins_of = [bins] * dims
    ranges = [None] * dims if range is None else list(range)
    if len(ranges) != dims:
        raise bad_argument(fname, f"range has {len(ranges)} entries for a {dims}-dimensional sample", ShapeError)
    edges, slots, sizes = [], [], []
    for c, b, r in zip(columns, bins_of, ranges):
        if r is not None and len(r) == 2:   # NumPy's linspace of the range's Python numbers: float64 edges
            r = tuple(np.float64(v) if isinstance(v, (int, float)) else v for v in r)
        e = _bin_edges(fname, c, b, r)
        nb = shape(e)[0] - 1
        # as histogram: slot 0 below the first edge, nb + 1 above the last (and NaN)
        slot = searchsorted(e, c, side="right")
        slots.append(where(equal(c, index_along(e, 0, -1)), nb, slot))
        edges.append(e)
        sizes.append(nb + 2)
    flat = zeros(shape(slots[0]) if slots else (0,), int64)
    for slot, size in zip(slots, sizes):
        flat = add(multiply(flat, size), astype(slot, int64))
    if weights is None:
        values = full(shape(flat), 1.0, float64)
    else:
        w = as_operand(weights, "weights")
        if tuple(w.shape) != (n,):
            raise bad_argument(fname, f"weights of shape {list(w.shape)} must hold one value per point ({n})",
                               ShapeError)
        values = astype(operand_value(w), float64)
    counts = reshape(scatter_add(zeros(math.prod(sizes), float64), flat, values), tuple(sizes))
    for k, size in enumerate(sizes):
        counts = index_along(counts, k, builtins.slice(1, size - 1))
    if density:
        total = sum(counts)
        for k, e in enumerate(edges):
            widths = astype(diff(e), float64)
            counts = divide(counts, reshape(widths, tuple(-1 if j == k else 1 for j in builtins.range(dims))))
        counts = divide(counts, total)
    return counts, edges


@numpy_counterpart
def histogram2d(x: ArrayLike, y: ArrayLike, bins: Any = 10, range: Any = None,  # noqa: A002
                density: bool | None = None, weights: ArrayLike = None) -> tuple[Any, Any, Any]:
    """The 2-D histogram of the points (x, y) and its edges, as ``np.histogram2d``: ``bins`` a
    count or edges for both, or one of each per axis (``[nx, ny]``, ``[xedges, yedges]``);
    see ``histogramdd``."""
    if (len(bins) if isinstance(bins, (list, tuple)) or ndim(bins) > 0 else 1) not in (1, 2):
        bins = [bins, bins]   # the edges of both axes, as NumPy reads a sequence of another length
    counts, (xedges, yedges) = _histogramdd("histogram2d", [x, y], bins, range, density, weights)
    return counts, xedges, yedges


@numpy_counterpart
def bincount(x: ArrayLike, weights: ArrayLike = None, minlength: int = 0, *, length: int | None = None) -> Any:
    """How many times each value 0, 1, ... occurs in the 1-D non-negative integer array ``x``
    (or the sum of ``weights`` at each, in float64), as ``np.bincount``, with at least
    ``minlength`` slots. The result's length depends on x's values: a concrete x gives
    NumPy's (max(x) + 1); a traced one needs ``length=`` (JAX's), which then fixes it: values
    past it are dropped and negative ones count as 0, as in JAX."""
    o = as_operand(x, "x")
    if len(o.shape) != 1:
        raise bad_argument("bincount", f"x must be 1-D, got shape {list(o.shape)}", ShapeError)
    if not (o.dtype.is_int or o.dtype.is_bool):
        raise bad_argument("bincount", f"x must hold integers, got {o.aval}; cast it with .astype(int)")
    minlength = static_int("bincount", "minlength", minlength)
    if minlength < 0:
        raise bad_argument("bincount", f"minlength={minlength} must be non-negative", ShapeError)
    if length is None:
        arr = known_array(o)
        if arr is None:
            raise FlowjitTypeError(
                f"bincount on a traced array ({o.aval}) at {user_location()}: the result's length is max(x) + 1, "
                "which depends on the values, and flowjit's arrays have shapes fixed when tracing. Pass length=N "
                "(as JAX's bincount): N slots, values past them dropped")
        if arr.size and int(arr.min()) < 0:
            raise bad_argument("bincount", "x must not hold negative values", ShapeError)
        length = builtins.max(minlength, int(arr.max()) + 1 if arr.size else 0)
    else:
        length = static_int("bincount", "length", length)
        if length < 0:
            raise bad_argument("bincount", f"length={length} must be non-negative", ShapeError)
    xv = astype(operand_value(o), int64)
    slot = minimum(maximum(xv, 0), length)  # slot `length`, sliced off, takes the values past the end
    if weights is None:
        total = scatter_add(zeros(length + 1, int64), slot, full(shape(slot), 1, int64))
    else:
        w = as_operand(weights, "weights")
        if w.shape != o.shape:
            raise bad_argument("bincount", f"weights of shape {list(w.shape)} must have x's shape {list(o.shape)}",
                               ShapeError)
        total = scatter_add(zeros(length + 1, float64), slot, astype(operand_value(w), float64))
    return index_along(total, 0, builtins.slice(0, length))


@numpy_counterpart
def digitize(x: ArrayLike, bins: ArrayLike, right: bool = False) -> Any:
    """The index of the bin each element of ``x`` falls in, as ``np.digitize``: for
    increasing ``bins``, i such that bins[i - 1] <= x < bins[i] (``right=True``: bins[i - 1] <
    x <= bins[i]), 0 below and len(bins) above; decreasing bins count from the other end.
    Concrete bins must be monotonic (else NumPy's error); traced ones are taken as increasing
    when bins[-1] >= bins[0], as in JAX. int64 of x's shape."""
    b = as_operand(bins, "bins")
    if len(b.shape) != 1:
        raise bad_argument("digitize", f"bins must be 1-D, got shape {list(b.shape)}", ShapeError)
    if as_operand(x, "x").dtype.is_complex:
        raise bad_argument("digitize", "x may not be complex")
    side = "left" if right else "right"
    n = b.shape[0]
    bv = operand_value(b)
    up = lambda: searchsorted(bv, x, side=side)  # noqa: E731
    down = lambda: subtract(n, searchsorted(flip(bv), x, side=side))  # noqa: E731
    if n == 0:
        return zeros(as_operand(x, "x").shape, int64)
    arr = known_array(b)
    if arr is not None:
        d = np.diff(arr)
        if bool(np.all(d >= 0)):
            return up()
        if bool(np.all(d <= 0)):
            return down()
        raise bad_argument("digitize", "bins must be monotonically increasing or decreasing", ShapeError)
    return where(greater_equal(index_along(bv, 0, -1), index_along(bv, 0, 0)), up(), down())

