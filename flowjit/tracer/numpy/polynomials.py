"""Polynomials as coefficient arrays, highest power first (NumPy's ``polyval``, ``polyadd``,
``polysub``, ``polymul``, ``polyder``, ``polyint``, ``polydiv``, ``poly``, ``polyfit``,
``roots``); the window functions (``bartlett``, ``blackman``, ``hamming``, ``hanning``,
``kaiser``) with the modified Bessel function ``i0``; and a few array utilities NumPy keeps
beside them (``sort_complex``, ``trim_zeros``, ``resize``, ``spacing``, ``packbits``,
``unpackbits``, ``fromfunction``, ``apply_over_axes``).

Each is a composite of fj's functions in NumPy's order of operations, so eager results match
NumPy's, compiled ones within rounding, and gradients come from the parts (``i0``'s, and so
``kaiser``'s in ``beta``, is a custom JVP: Cephes' series for I1). Degrees, window lengths
and shapes are static. Where NumPy's result has a size (or dtype) that depends on the values
(``roots``' stripped zeros, ``polydiv``'s trimmed remainder, ``trim_zeros``), concrete arrays
get NumPy's result and traced ones JAX's static form (``roots(p, strip_zeros=False)``, the
untrimmed remainder) or, for ``trim_zeros``, an error that says so."""

from __future__ import annotations

import math
import operator
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from flowjit.ir.dtypes import complex64, complex128, float32, float64, int32, uint8
from flowjit.ir.errors import FlowjitTypeError, ShapeError
from flowjit.ir.primitives.special import I0E_FAR, I0E_NEAR, I1E_FAR, I1E_NEAR
from flowjit.tracer import linalg
from flowjit.tracer.core import Tracer, user_location
from flowjit.tracer.custom_gradients import custom_jvp
from flowjit.tracer.numpy.arithmetic import frexp, ldexp
from flowjit.tracer.numpy.array_construction import vander
from flowjit.tracer.numpy.conversion import astype
from flowjit.tracer.numpy.counterparts import numpy_counterpart
from flowjit.tracer.numpy.creation import ones, zeros, zeros_like
from flowjit.tracer.numpy.index_tricks import indices
from flowjit.tracer.numpy.indexing import getitem, index_along, take, take_along_axis
from flowjit.tracer.numpy.layout import atleast_1d, expand_dims, ndim, ravel, reshape, shape, transpose
from flowjit.tracer.numpy.manipulation import concatenate, pad, stack
from flowjit.tracer.numpy.matrices import eye
from flowjit.tracer.numpy.operands import (
    ArrayLike,
    Operand,
    as_operand,
    bad_argument,
    concrete_array,
    normalize_axis,
    operand_value,
    promote,
    shape_tuple,
    static_int,
    strong,
)
from flowjit.tracer.numpy.products import dot, outer
from flowjit.tracer.numpy.reductions import sum
from flowjit.tracer.numpy.sequences import convolve
from flowjit.tracer.numpy.sorting_searching import argsort, sort
from flowjit.tracer.numpy.ufuncs import (
    absolute,
    add,
    bitwise_and,
    cos,
    divide,
    equal,
    exp,
    imag,
    isfinite,
    less,
    less_equal,
    logical_and,
    maximum,
    multiply,
    negative,
    nextafter,
    not_equal,
    real,
    right_shift,
    sqrt,
    subtract,
    where,
)

__all__: list[str] = [
    "apply_over_axes", "bartlett", "blackman", "fromfunction", "hamming", "hanning", "i0", "kaiser", "packbits",
    "poly", "polyadd", "polyder", "polydiv", "polyfit", "polyint", "polymul", "polysub", "polyval", "resize",
    "roots", "sort_complex", "spacing", "trim_zeros", "unpackbits",
]


# ---- polynomials ---------------------------------------------------------------------------

def _array(x: ArrayLike, name: str) -> Operand:
    """x as NumPy's ``asarray`` makes it: a Python scalar becomes an array of fixed dtype."""
    return strong(as_operand(x, name))


def _coefficients(fname: str, x: ArrayLike, name: str) -> Any:
    """The 1-D coefficient array ``atleast_1d(x)`` (highest power first)."""
    o = _array(x, name)
    if len(o.shape) > 1:
        raise bad_argument(fname, f"{name} must be a 1-D array of coefficients (highest power first), got shape "
                           f"{list(o.shape)}", ShapeError)
    return atleast_1d(operand_value(o))


def _length(x: Any) -> int:
    return int(shape(x)[0])


@numpy_counterpart
def polyval(p: ArrayLike, x: ArrayLike) -> Any:
    """The polynomial with coefficients ``p`` (highest power first; p[i] may be arrays that
    broadcast with x) at ``x``, as ``np.polyval``: Horner's rule from ``zeros_like(x)``, in the
    dtype NumPy's gives (x's promoted with p's; int stays int). Differentiable in p and x."""
    po, xo = _array(p, "p"), _array(x, "x")
    if len(po.shape) == 0:
        raise bad_argument("polyval", "p must be at least 1-D (the coefficients, highest power first), got a 0-d "
                           "array; wrap a constant polynomial as [c]", ShapeError)
    pv, xv = operand_value(po), operand_value(xo)
    y = zeros_like(xv)
    for i in range(po.shape[0]):
        y = add(multiply(y, xv), getitem(pv, i))
    return y


def _aligned(fname: str, a1: ArrayLike, a2: ArrayLike) -> tuple[Any, Any]:
    """a1 and a2 as 1-D coefficient arrays of one length, the shorter padded with leading zeros."""
    v1, v2 = _coefficients(fname, a1, "a1"), _coefficients(fname, a2, "a2")
    d = _length(v2) - _length(v1)
    if d > 0:
        v1 = pad(v1, (d, 0))
    elif d < 0:
        v2 = pad(v2, (-d, 0))
    return v1, v2


@numpy_counterpart
def polyadd(a1: ArrayLike, a2: ArrayLike) -> Any:
    """The sum of two polynomials (1-D coefficient arrays, highest power first), as
    ``np.polyadd``: the shorter is padded with leading zeros; the dtype is the two's promoted."""
    v1, v2 = _aligned("polyadd", a1, a2)
    return add(v1, v2)


@numpy_counterpart
def polysub(a1: ArrayLike, a2: ArrayLike) -> Any:
    """The difference ``a1 - a2`` of two polynomials (1-D coefficient arrays, highest power
    first), as ``np.polysub``: the shorter is padded with leading zeros."""
    v1, v2 = _aligned("polysub", a1, a2)
    return subtract(v1, v2)


@numpy_counterpart
def polymul(a1: ArrayLike, a2: ArrayLike) -> Any:
    """The product of two polynomials (1-D coefficient arrays, highest power first), as
    ``np.polymul``: their full convolution, of length ``len(a1) + len(a2) - 1``."""
    v1, v2 = _coefficients("polymul", a1, "a1"), _coefficients("polymul", a2, "a2")
    for name, v in (("a1", v1), ("a2", v2)):
        if _length(v) == 0:
            raise bad_argument("polymul", f"{name} is empty; give at least one coefficient ([0] for the zero "
                               "polynomial)", ShapeError)
    return convolve(v1, v2)


def _order(fname: str, m: Any, what: str, other: str) -> int:
    k = static_int(fname, "m", m)
    if k < 0:
        raise bad_argument(fname, f"the order of the {what} m={k} must be non-negative (see {other})")
    return k


@numpy_counterpart
def polyder(p: ArrayLike, m: int = 1) -> Any:
    """The ``m``-th derivative of the polynomial ``p`` (1-D, highest power first), as
    ``np.polyder``: ``len(p) - m`` coefficients (none once m reaches the degree + 1); each step
    multiplies by an int64 ``arange``, so ints stay ints (int64) and float32 becomes float64, as
    NumPy's. Differentiable in p."""
    k = _order("polyder", m, "derivative", "polyint")
    pv = _coefficients("polyder", p, "p")
    for _ in range(k):
        n = _length(pv) - 1
        pv = multiply(index_along(pv, 0, slice(None, -1)), np.arange(n, 0, -1))
    return pv


@numpy_counterpart
def polyint(p: ArrayLike, m: int = 1, k: ArrayLike = None) -> Any:
    """The ``m``-th antiderivative of the polynomial ``p`` (1-D, highest power first), as
    ``np.polyint``: each step divides by the powers and appends an integration constant, ``k[i]``
    for step i (k a scalar, one value for all steps, or at least m values; zeros by default).
    The result is float64 (complex128 for complex p or k), as NumPy's; differentiable in p and k."""
    n = _order("polyint", m, "integral", "polyder")
    ko = _array(np.zeros(n, float) if k is None else k, "k")
    if len(ko.shape) > 1:
        raise bad_argument("polyint", f"k must be a scalar or a 1-D array, got shape {list(ko.shape)}", ShapeError)
    kv = atleast_1d(operand_value(ko))
    if _length(kv) == 1 and n > 1:
        kv = multiply(getitem(kv, 0), np.ones(n, float))
    if _length(kv) < n:
        raise bad_argument("polyint", f"k has {_length(kv)} values for m={n} integrations; k must be a scalar or a "
                           "rank-1 array of length 1 or >= m", ShapeError)
    pv = _coefficients("polyint", p, "p")
    for i in range(n):
        pv = concatenate([divide(pv, np.arange(_length(pv), 0, -1)), reshape(getitem(kv, i), (1,))])
    return pv


@numpy_counterpart
def polydiv(u: ArrayLike, v: ArrayLike, *, trim_leading_zeros: bool | None = None) -> tuple[Any, Any]:
    """``(q, r)`` with ``u == polyadd(polymul(q, v), r)`` (1-D, highest power first), by NumPy's
    long division, in the inexact dtype of u and v promoted. NumPy drops the remainder's leading
    (near-)zeros, a length that depends on the values: by default (None) concrete inputs get
    NumPy's trimmed remainder and traced ones JAX's untrimmed one (u's length);
    ``trim_leading_zeros=False`` never trims, ``True`` trims (concrete inputs only)."""
    uv = add(_coefficients("polydiv", u, "u"), 0.0)
    vv = add(_coefficients("polydiv", v, "v"), 0.0)
    m, n = _length(uv) - 1, _length(vv) - 1
    if n < 0 or m < 0:
        raise bad_argument("polydiv", f"u and v need at least one coefficient each, got lengths {m + 1} and {n + 1}",
                           ShapeError)
    d = promote(as_operand(uv), as_operand(vv))
    scale = divide(1.0, getitem(vv, 0))
    r = astype(uv, d)
    qs = []
    for k in range(m - n + 1):
        q_k = multiply(scale, getitem(r, k))
        qs.append(q_k)
        r = subtract(r, pad(multiply(q_k, vv), (k, m - n - k)))
    q = astype(stack(qs), d) if qs else zeros((1,), d)
    concrete = concrete_array("polydiv", u) is not None and concrete_array("polydiv", v) is not None
    if trim_leading_zeros is None:
        trim_leading_zeros = concrete
    if trim_leading_zeros:
        if not concrete:
            raise FlowjitTypeError(
                f"polydiv(..., trim_leading_zeros=True) on traced arrays at {user_location()}: how many leading "
                "zeros the remainder has depends on the data, and flowjit's arrays have shapes fixed when tracing; "
                "leave it False (the remainder keeps u's length) or divide outside the traced function")
        ra = np.asarray(r)
        while np.allclose(ra[0], 0, rtol=1e-14) and ra.shape[-1] > 1:
            ra = ra[1:]
        r = ra
    return q, r


def _inexact_1d(o: Operand) -> Any:
    """A 1-D array of roots in NumPy's ``mintypecode``: float32, float64, complex64 and complex128
    kept, anything else float64."""
    keep = (float32, float64, complex64, complex128)
    return astype(operand_value(o), o.dtype if o.dtype in keep else float64)


def _conjugate_pairs(roots: np.ndarray) -> bool:
    r = np.asarray(roots, complex)
    return bool(np.all(np.sort(r) == np.sort(r.conjugate())))


@numpy_counterpart
def poly(seq_of_zeros: ArrayLike) -> Any:
    """The coefficients (highest power first, leading 1) of the monic polynomial with the given
    roots, as ``np.poly``; of a non-empty square matrix, its characteristic polynomial (through
    ``fj.linalg.eigvals``), real for a real matrix. Complex roots give a real result when they are
    conjugate pairs; that test needs the values, so a traced complex input keeps the complex
    result (JAX's). No roots give ``1.0``. Differentiable in the roots."""
    o = _array(seq_of_zeros, "seq_of_zeros")
    sh = o.shape if o.shape else (1,)
    if len(sh) == 2 and sh[0] == sh[1] and sh[0] != 0:
        z = linalg.eigvals(operand_value(o))
    elif len(sh) == 1:
        z = _inexact_1d(o)
        z = atleast_1d(z)
    else:
        raise bad_argument("poly", f"seq_of_zeros must be a 1-D array of roots or a non-empty square matrix, got "
                           f"shape {list(o.shape)}", ShapeError)
    n = _length(z)
    if n == 0:
        return 1.0
    a: Any = ones((1,), as_operand(z).dtype)
    for i in range(n):
        a = subtract(pad(a, (0, 1)), multiply(pad(a, (1, 0)), getitem(z, i)))
    if len(sh) == 2 and not o.dtype.is_complex:
        return real(a)   # a real matrix's eigenvalues come in conjugate pairs
    if as_operand(a).dtype.is_complex and concrete_array("poly", a) is not None and _conjugate_pairs(np.asarray(z)):
        return real(a)
    return a


@numpy_counterpart
def polyfit(x: ArrayLike, y: ArrayLike, deg: int, rcond: float | None = None, full: bool = False,
            w: ArrayLike = None, cov: bool | str = False) -> Any:
    """The least-squares polynomial of degree ``deg`` through the points (x, y), coefficients
    highest power first, as ``np.polyfit``: y 1-D, or 2-D for one fit per column; ``w`` weights
    the residuals; columns of the Vandermonde matrix scaled to unit norm, then
    ``fj.linalg.lstsq`` (relative cutoff ``rcond``, default ``len(x) * eps``).
    ``full=True`` gives ``(c, residuals, rank, singular_values, rcond)``, ``cov=True`` (or
    'unscaled') ``(c, covariance)``. Differentiable in y, w and x. NumPy's warning for a
    rank-deficient fit is given on concrete inputs only."""
    order = static_int("polyfit", "deg", deg) + 1
    if order < 1:
        raise bad_argument("polyfit", f"deg={order - 1}: expected deg >= 0")
    xo, yo = as_operand(add(operand_value(_array(x, "x")), 0.0)), as_operand(add(operand_value(_array(y, "y")), 0.0))
    if len(xo.shape) != 1:
        raise bad_argument("polyfit", f"x must be a 1-D vector, got shape {list(xo.shape)}", ShapeError)
    if xo.shape[0] == 0:
        raise bad_argument("polyfit", "x is empty; give at least one point", ShapeError)
    if len(yo.shape) not in (1, 2):
        raise bad_argument("polyfit", f"y must be 1-D or 2-D (one fit per column), got shape {list(yo.shape)}",
                           ShapeError)
    if xo.shape[0] != yo.shape[0]:
        raise bad_argument("polyfit", f"x of length {xo.shape[0]} and y of shape {list(yo.shape)}: expected x and y "
                           "to have the same length", ShapeError)
    npts = xo.shape[0]
    if rcond is None:
        rcond = npts * float(np.finfo(xo.dtype.np).eps)
    lhs = vander(operand_value(xo), order)
    rhs = operand_value(yo)
    if w is not None:
        wo = as_operand(add(operand_value(_array(w, "w")), 0.0))
        if len(wo.shape) != 1:
            raise bad_argument("polyfit", f"w must be a 1-D array of weights, got shape {list(wo.shape)}",
                               ShapeError)
        if wo.shape[0] != yo.shape[0]:
            raise bad_argument("polyfit", f"w of length {wo.shape[0]} for {yo.shape[0]} points: expected w and y to "
                               "have the same length", ShapeError)
        wcol = reshape(operand_value(wo), (npts, 1))
        lhs = astype(multiply(lhs, wcol), as_operand(lhs).dtype)
        rhs = astype(multiply(rhs, wcol if len(yo.shape) == 2 else operand_value(wo)), yo.dtype)
    scale = sqrt(sum(multiply(lhs, lhs), axis=0))
    lhs = divide(lhs, scale)
    c, resids, rank, s = linalg.lstsq(lhs, rhs, rcond)
    c = transpose(divide(transpose(c), scale))
    if not full and isinstance(rank, np.ndarray | np.generic) and concrete_array("polyfit", rank) is not None \
            and int(rank) != order:
        warnings.warn("Polyfit may be poorly conditioned", np.exceptions.RankWarning, stacklevel=2)
    if full:
        return c, resids, rank, s, rcond
    if not cov:
        return c
    vbase = divide(linalg.inv(dot(transpose(lhs), lhs)), outer(scale, scale))
    if cov == "unscaled":
        fac: Any = 1
    else:
        if npts <= order:
            raise bad_argument("polyfit", f"{npts} points for deg={order - 1}: the number of data points must exceed "
                               "deg + 1 to scale the covariance matrix (or pass cov='unscaled')", ShapeError)
        fac = divide(resids, npts - order)
    if len(yo.shape) == 1:
        return c, multiply(vbase, fac)
    return c, multiply(expand_dims(vbase, 2), fac)


def _companion_eigvals(p: Any) -> Any:
    """The eigenvalues of the companion matrix of the 1-D p (length N >= 2, p[0] != 0)."""
    n = _length(p)
    first = reshape(divide(negative(index_along(p, 0, slice(1, None))), getitem(p, 0)), (1, n - 1))
    a = concatenate([first, eye(n - 2, n - 1, dtype=as_operand(p).dtype.np)], axis=0)
    return linalg.eigvals(a)


def _complex_of(o: Operand) -> Any:
    return np.dtype(complex64.np) if o.dtype in (float32, complex64) else np.dtype(complex128.np)


@numpy_counterpart
def roots(p: ArrayLike, *, strip_zeros: bool = True) -> Any:
    """The roots of the polynomial with coefficients ``p`` (1-D, highest power first), as
    ``np.roots``: the eigenvalues of its companion matrix. By default leading zeros are dropped
    and each trailing zero is a root at 0 appended last; the result is real when every root is,
    else complex. Both depend on the values, so a traced p needs ``strip_zeros=False`` (JAX's):
    p[0] must be non-zero, and the result is always complex, ``len(p) - 1`` roots."""
    o = _array(p, "p")
    if len(o.shape) > 1:
        raise bad_argument("roots", f"p must be a 1-D (rank-1) array of coefficients, got shape {list(o.shape)}",
                           ShapeError)
    pv = astype(atleast_1d(operand_value(o)), o.dtype if o.dtype.is_inexact else float64)
    po = as_operand(pv)
    if not strip_zeros:
        if _length(pv) < 2:
            return np.zeros((0,), _complex_of(po))
        return _companion_eigvals(pv)
    arr = concrete_array("roots", p)
    if arr is None:
        raise FlowjitTypeError(
            f"roots on a traced array ({o.aval}) at {user_location()}: how many leading and trailing zeros p has, "
            "and so how many roots it has and whether they are all real, depends on the data, and flowjit's "
            "arrays have shapes and dtypes fixed when tracing. Pass strip_zeros=False (as JAX's roots): p[0] must "
            "then be non-zero, and all len(p) - 1 roots come back complex; or call it outside the traced function")
    pa = np.asarray(pv)
    nonzero = np.nonzero(pa)[0]
    if len(nonzero) == 0:
        return np.array([])
    trailing = len(pa) - int(nonzero[-1]) - 1
    pa = pa[int(nonzero[0]):int(nonzero[-1]) + 1]
    if len(pa) > 1:
        r = np.asarray(_companion_eigvals(pa))
        if not po.dtype.is_complex and np.all(r.imag == 0):
            r = r.real
    else:
        r = np.array([])
    return np.concatenate([r, np.zeros(trailing, r.dtype)])


# ---- windows and i0 ------------------------------------------------------------------------

def _window_length(fname: str, M: Any) -> float:
    if isinstance(M, Tracer):
        raise bad_argument(fname, f"M must be a static Python number (the window's length), got traced {M.aval}")
    try:
        return float(np.array([0.0, M])[1])
    except (TypeError, ValueError):
        raise bad_argument(fname, f"M must be a number (the window's length), got {M!r}") from None


def _cosine_window(fname: str, M: Any, terms: Sequence[float]) -> Any:
    """``terms[0] + terms[1] cos(pi n / (M-1)) + terms[2] cos(2 pi n / (M-1))`` at
    ``n = 1-M, 3-M, ..., M-1`` in NumPy's order of operations (float64)."""
    m = _window_length(fname, M)
    if m < 1:
        return np.array([], float)
    if m == 1:
        return np.ones(1, float)
    n = np.arange(1 - m, m, 2)
    out: Any = add(terms[0], multiply(terms[1], cos(divide(multiply(np.pi, n), m - 1))))
    if len(terms) > 2:
        out = add(out, multiply(terms[2], cos(divide(multiply(2.0 * np.pi, n), m - 1))))
    return out


@numpy_counterpart
def bartlett(M: int) -> Any:
    """The Bartlett (triangular) window of ``M`` points, as ``np.bartlett``: float64, peak 1 in
    the middle, zero at both ends; empty for M < 1."""
    m = _window_length("bartlett", M)
    if m < 1:
        return np.array([], float)
    if m == 1:
        return np.ones(1, float)
    n = np.arange(1 - m, m, 2)
    return where(less_equal(n, 0), add(1, divide(n, m - 1)), subtract(1, divide(n, m - 1)))


@numpy_counterpart
def blackman(M: int) -> Any:
    """The Blackman window of ``M`` points, ``0.42 + 0.5 cos(pi n/(M-1)) + 0.08 cos(2 pi
    n/(M-1))``, as ``np.blackman`` (float64; empty for M < 1)."""
    return _cosine_window("blackman", M, (0.42, 0.5, 0.08))


@numpy_counterpart
def hamming(M: int) -> Any:
    """The Hamming window of ``M`` points, ``0.54 + 0.46 cos(pi n/(M-1))``, as ``np.hamming``
    (float64; empty for M < 1)."""
    return _cosine_window("hamming", M, (0.54, 0.46))


@numpy_counterpart
def hanning(M: int) -> Any:
    """The Hann window of ``M`` points, ``0.5 + 0.5 cos(pi n/(M-1))``, as ``np.hanning``
    (float64; empty for M < 1)."""
    return _cosine_window("hanning", M, (0.5, 0.5))


@numpy_counterpart
def kaiser(M: int, beta: ArrayLike) -> Any:
    """The Kaiser window of ``M`` points with shape parameter ``beta``, ``i0(beta sqrt(1 - (2n/(M-1)
    - 1)**2)) / i0(beta)``, as ``np.kaiser`` (float64; empty for M < 1). ``beta`` may be traced,
    and the window is differentiable in it."""
    m = _window_length("kaiser", M)
    bo = as_operand(beta, "beta")
    if bo.dtype.is_complex:
        raise bad_argument("kaiser", f"beta must be real, got {bo.aval}")
    if len(bo.shape) != 0:
        raise bad_argument("kaiser", f"beta must be a scalar, got shape {list(bo.shape)}", ShapeError)
    b = astype(operand_value(bo), float64)
    if m == 1:
        return np.ones(1, float)
    n = np.arange(0, m)
    alpha = (m - 1) / 2.0
    t = np.sqrt(1 - ((n - alpha) / alpha) ** 2.0)
    return divide(i0(multiply(b, t)), i0(b))


def _chbevl(x: Any, coefficients: Sequence[float]) -> Any:
    """Cephes' ``chbevl``: the Chebyshev series with these coefficients (highest first) at x,
    by Clenshaw's recurrence, in NumPy's order of operations."""
    b0: Any = coefficients[0]
    b1: Any = 0.0
    b2: Any = 0.0
    for c in coefficients[1:]:
        b2, b1 = b1, b0
        b0 = add(subtract(multiply(x, b1), b2), c)
    return multiply(0.5, subtract(b0, b2))


def _branches(x: Any) -> tuple[Any, Any, Any]:
    """|x| <= 8, and |x| where that holds (else 0) and where it does not (else 8): each series
    on arguments where it is finite, so the other's gradient is never 0 * inf."""
    ax = absolute(x)
    small = less_equal(ax, 8.0)
    return small, where(small, ax, 0.0), where(small, 8.0, ax)


def _i0_series(x: Any) -> Any:
    """NumPy's i0 of the float x: ``exp(|x|)`` times Cephes' series for ``exp(-x) I0(x)``."""
    small, xa, xb = _branches(x)
    near = multiply(exp(xa), _chbevl(subtract(divide(xa, 2.0), 2), I0E_NEAR))
    far = divide(multiply(exp(xb), _chbevl(subtract(divide(32.0, xb), 2.0), I0E_FAR)), sqrt(xb))
    return where(small, near, far)


def _i1_series(x: Any) -> Any:
    """Cephes' i1 of the float x, odd (the near series is in x itself, so smooth through 0)."""
    small, xa, xb = _branches(x)
    near = multiply(multiply(_chbevl(subtract(divide(xa, 2.0), 2.0), I1E_NEAR), where(small, x, 0.0)), exp(xa))
    far = divide(multiply(exp(xb), _chbevl(subtract(divide(32.0, xb), 2.0), I1E_FAR)), sqrt(xb))
    return where(small, near, where(less(x, 0), negative(far), far))


@custom_jvp
def _i0_float(x: Any) -> Any:
    return _i0_series(x)


@_i0_float.defjvp
def _i0_float_jvp(primals: tuple, tangents: tuple) -> tuple:
    (x,), (t,) = primals, tangents
    return _i0_float(x), multiply(t, _i1_series(x))


@numpy_counterpart
def i0(x: ArrayLike) -> Any:
    """The modified Bessel function of the first kind of order 0, elementwise, as ``np.i0``:
    Cephes' Chebyshev expansions of ``exp(-|x|) I0(|x|)`` on [0, 8] and beyond (NumPy's
    coefficients and order of operations); float dtypes kept, others computed in float64;
    complex refused. Its derivative is ``I1(x)`` from Cephes' own series for it (a few ulps,
    also near 0, where the series' own derivative would lose digits to cancellation)."""
    o = as_operand(x, "x")
    if o.dtype.is_complex:
        raise bad_argument("i0", f"complex x is not supported (NumPy's i0 refuses complex values), got {o.aval}")
    xv = operand_value(o) if o.dtype.is_float else astype(operand_value(o), float64)
    # Concrete arrays compute at once (NumPy's bits); traced ones carry the derivative rule.
    return _i0_series(xv) if concrete_array("i0", xv) is not None else _i0_float(xv)


# ---- array utilities -----------------------------------------------------------------------

_SMALL_INTS = ("int8", "int16", "uint8", "uint16")


@numpy_counterpart
def sort_complex(a: ArrayLike) -> Any:
    """``a`` sorted along its last axis by real part, then imaginary part, as
    ``np.sort_complex``: always complex, complex64 for int8/int16/uint8/uint16 (and complex
    inputs' own dtype), else complex128; NaNs last, as NumPy orders them."""
    o = _array(a, "a")
    if len(o.shape) == 0:
        raise bad_argument("sort_complex", "a is 0-d; sort_complex sorts along the last axis of an array of rank >= 1",
                           ShapeError)
    v = operand_value(o)
    if o.dtype.is_complex:
        by_imag = take_along_axis(v, argsort(imag(v), axis=-1, stable=True), axis=-1)
        return take_along_axis(by_imag, argsort(real(by_imag), axis=-1, stable=True), axis=-1)
    return astype(sort(v, axis=-1), complex64 if o.dtype.name in _SMALL_INTS else complex128)


@numpy_counterpart
def trim_zeros(filt: ArrayLike, trim: str = "fb", axis: int | Sequence[int] | None = None) -> Any:
    """``filt`` without its leading ('f'), trailing ('b') or both ('fb', default) zeros, along
    ``axis`` (default all; NumPy 2.2's: the bounding box of the non-zero values), as
    ``np.trim_zeros``. Concrete arrays only: the result's size depends on the data."""
    if not isinstance(trim, str) or trim.lower() not in ("fb", "bf", "f", "b"):
        raise bad_argument("trim_zeros", f"trim={trim!r}; allowed 'f' (front), 'b' (back) or 'fb' (both)")
    arr = concrete_array("trim_zeros", filt)
    if arr is None:
        raise FlowjitTypeError(
            f"trim_zeros on a traced array ({as_operand(filt, 'filt').aval}) at {user_location()}: how many zeros "
            "it trims, and so the result's shape, depends on the data, and flowjit's arrays have shapes fixed "
            "when tracing; call it outside the traced function, or keep the shape and mask the zeros (fj.where)")
    return np.trim_zeros(arr, trim, axis)


@numpy_counterpart
def resize(a: ArrayLike, new_shape: int | Sequence[int]) -> Any:
    """An array of shape ``new_shape`` filled with ``a``'s elements (flattened, C order) repeated
    as often as needed, as ``np.resize`` (zeros when a or the new shape is empty)."""
    if isinstance(new_shape, Tracer):
        raise bad_argument("resize", f"new_shape must be static Python ints, got traced {new_shape.aval}")
    dims = shape_tuple(new_shape)
    if any(d < 0 for d in dims):
        raise bad_argument("resize", f"new_shape={dims}: all elements of new_shape must be non-negative", ShapeError)
    o = _array(a, "a")
    size, new_size = math.prod(o.shape), math.prod(dims)
    if size == 0 or new_size == 0:
        return zeros(dims, o.dtype)
    return reshape(take(ravel(operand_value(o)), np.arange(new_size) % size), dims)


@numpy_counterpart
def spacing(x: ArrayLike) -> Any:
    """The distance from each x to the adjacent float away from zero (negative for negative x),
    as the ufunc ``np.spacing``: ``nextafter(x, inf if x >= 0 else -inf) - x``; NaN at +-inf and NaN.
    NumPy's dtypes (int8, uint8 and bool give float16, int16 float32, wider ints float64). In
    float16 it is NumPy's half-precision loop, which differs: the positive distance to the next
    float towards +inf (computed from ``frexp``, as fj.nextafter takes float32 and float64 only)."""
    o = as_operand(x, "x")
    if not (o.dtype.is_float or o.dtype.is_int or o.dtype.is_bool):
        raise bad_argument("spacing", f"x must be real (float, int or bool), got {o.aval}")
    d = np.spacing(np.zeros((), o.dtype.np)).dtype if not o.weak else np.dtype(np.float64)
    xv = astype(operand_value(o), d)
    if d == np.float16:
        # NumPy's half-precision loop: the (positive) distance to the next float towards +inf.
        x32 = astype(xv, float32)
        mant, e = frexp(x32)
        down = astype(logical_and(less(x32, 0), equal(mant, -0.5)), int32)
        step = ldexp(np.float32(1), maximum(subtract(subtract(e, 11), down), -24))
        step = where(equal(x32, 0), 2.0 ** -24, step)
        step = where(equal(x32, float(np.finfo(np.float16).max)), np.inf, step)
        out = astype(step, d)
    else:
        out = subtract(nextafter(xv, astype(where(less(xv, 0), -np.inf, np.inf), d)), xv)   # -0.0 as 0.0, as NumPy's
    return where(isfinite(xv), out, np.nan)


def _bitorder(fname: str, bitorder: str) -> bool:
    if bitorder not in ("big", "little"):
        raise bad_argument(fname, f"bitorder={bitorder!r}; allowed 'big' (most significant bit first) or 'little'")
    return bitorder == "big"


def _bits_axis(fname: str, o: Operand, axis: Any) -> tuple[Any, int]:
    if axis is None:
        return ravel(operand_value(o)), 0
    return operand_value(o), normalize_axis(fname, axis, len(o.shape))


@numpy_counterpart
def packbits(a: ArrayLike, axis: int | None = None, bitorder: str = "big") -> Any:
    """The truth values of an integer or bool array packed 8 to a uint8 along ``axis`` (the
    flattened array for None), as ``np.packbits``: the axis padded with zeros to a multiple of 8;
    ``bitorder`` 'big' puts the first element in the most significant bit, 'little' in the least."""
    big = _bitorder("packbits", bitorder)
    o = as_operand(a, "a")
    if not (o.dtype.is_int or o.dtype.is_bool):
        raise bad_argument("packbits", f"a must be an integer or boolean array, got {o.aval}; compare floats "
                           "with a threshold first (a > 0)")
    v, ax = _bits_axis("packbits", o, axis)
    dims = tuple(shape(v))
    n = dims[ax]
    groups = -(-n // 8)
    bits = astype(not_equal(v, 0), uint8)
    if groups * 8 != n:
        bits = pad(bits, [(0, groups * 8 - n) if i == ax else (0, 0) for i in range(len(dims))])
    bits = reshape(bits, (*dims[:ax], groups, 8, *dims[ax + 1:]))
    weights = (1 << np.arange(7, -1, -1) if big else 1 << np.arange(8)).astype(np.uint8)
    weights = weights.reshape((8,) + (1,) * (len(dims) - ax - 1))
    return astype(sum(multiply(bits, weights), axis=ax + 1), uint8)


@numpy_counterpart
def unpackbits(a: ArrayLike, axis: int | None = None, count: int | None = None, bitorder: str = "big") -> Any:
    """The bits of a uint8 array, 8 elements (0 or 1, uint8) per byte along ``axis`` (the
    flattened array for None), as ``np.unpackbits``; ``count`` keeps the first count bits (zeros
    padded past the end), a negative count drops that many from the end."""
    big = _bitorder("unpackbits", bitorder)
    o = as_operand(a, "a")
    if o.dtype != uint8:
        raise bad_argument("unpackbits", f"a must be an array of unsigned bytes (uint8), got {o.aval}; cast it with "
                           ".astype(fj.uint8)")
    v, ax = _bits_axis("unpackbits", o, axis)
    dims = tuple(shape(v))
    shifts = (np.arange(7, -1, -1) if big else np.arange(8)).astype(np.uint8)
    shifts = shifts.reshape((8,) + (1,) * (len(dims) - ax - 1))
    bits = bitwise_and(right_shift(expand_dims(v, ax + 1), shifts), 1)
    total = dims[ax] * 8
    bits = reshape(bits, (*dims[:ax], total, *dims[ax + 1:]))
    if count is None:
        return bits
    c = static_int("unpackbits", "count", count)
    if c < -total:
        raise bad_argument("unpackbits", f"count={c} removes more than the {total} bits there are along the axis",
                           ShapeError)
    keep = c if c >= 0 else total + c
    if keep > total:
        return pad(bits, [(0, keep - total) if i == ax else (0, 0) for i in range(len(dims))])
    return index_along(bits, ax, slice(0, keep))


@numpy_counterpart
def fromfunction(function: Callable[..., Any], shape: Sequence[int], *, dtype: Any = float, like: Any = None,
                 **kwargs: Any) -> Any:
    """``function(*indices)`` with one array of coordinates per axis of ``shape`` (in ``dtype``,
    float64 by default), as ``np.fromfunction``: ``function`` is called once, on whole arrays,
    and its result returned as it is. ``like`` must be None."""
    if like is not None:
        raise bad_argument("fromfunction", "like= is not supported (it selects another array library); leave it None")
    dims = shape_tuple(shape)
    grid = indices(dims, dtype=dtype)
    return function(*(getitem(grid, i) for i in range(len(dims))), **kwargs)


@numpy_counterpart
def apply_over_axes(func: Callable[[Any, int], Any], a: ArrayLike, axes: int | Sequence[int]) -> Any:
    """``func(a, axis)`` applied for each axis in ``axes`` in turn, each result kept with a's
    rank (a dropped axis restored with length 1), as ``np.apply_over_axes``; func must keep the
    rank or drop exactly the axis."""
    o = _array(a, "a")
    val = operand_value(o)
    nd = len(o.shape)
    for axis in (axes,) if np.ndim(axes) == 0 else axes:
        ax = operator.index(axis)
        ax = nd + ax if ax < 0 else ax
        res = func(val, ax)
        if ndim(res) != ndim(val):
            res = expand_dims(res, ax)
            if ndim(res) != ndim(val):
                raise bad_argument("apply_over_axes", f"func returned an array of rank {ndim(res) - 1} for axis {ax} "
                                   f"of an array of rank {ndim(val)}; it must keep the rank or drop just that axis",
                                   ShapeError)
        val = res
    return val
