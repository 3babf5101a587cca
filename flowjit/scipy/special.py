"""``fj.scipy.special``: scipy.special's functions (as ``jax.scipy.special``) over traced arrays.

The gamma, error-function and Bessel families are primitives (``flowjit/ir/primitives/special.py``)
whose reference is scipy.special; the rest is composed here from them and ``fj.*`` where the
composition is exact (``beta = exp(betaln)``, ``logsumexp`` from max/exp/log/sum). Every
function differentiates to any order with respect to its argument ``x``; the derivative with
respect to an order parameter has no closed form: ``gammainc``'s and ``gammaincc``'s in ``a``
is summed (once: ``gammainc_grad_a``), as JAX's; ``betainc``'s in ``a`` and ``b`` and a Bessel
function's in ``v`` are refused with an error, as in JAX. Inputs follow
NumPy's promotion: integers become float64; float16 is computed in float32.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from flowjit.ir.dtypes import float16, float32, float64
from flowjit.ir.primitives.special import J1_DERIVATIVE_SERIES
from flowjit.nn.functional import sigmoid
from flowjit.tracer.core import Tracer
from flowjit.tracer.custom_gradients import custom_jvp, stop_gradient
from flowjit.tracer.numpy import namespace as fnp
from flowjit.tracer.numpy.operands import apply as _apply
from flowjit.tracer.numpy.operands import as_operand as _op
from flowjit.tracer.numpy.operands import cast as _cast
from flowjit.tracer.numpy.operands import float_dtype as _float_dtype
from flowjit.tracer.numpy.operands import promote as _promote
from flowjit.tracer.numpy.protocols import register_ufuncs

ArrayLike = Any

__all__ = [
    "beta", "betainc", "betaln", "digamma", "entr", "erf", "erfc", "erfcinv", "erfinv", "expit", "factorial",
    "gamma", "gammainc", "gammaincc", "gammaln", "gammasgn", "i0", "i0e", "i1", "i1e", "iv", "ive", "j0", "j1",
    "jn", "jv", "kl_div", "log_ndtr", "log_softmax", "logit", "logsumexp", "multigammaln", "ndtr", "ndtri",
    "polygamma", "psi", "rel_entr", "rgamma", "softmax", "xlog1py", "xlogy", "y0", "y1", "yn", "yv",
]


def _special(prim: str, orders: tuple[ArrayLike, ...], x: ArrayLike, **attrs: Any) -> Any:
    """``prim(*orders, x)`` in x's float dtype (after promotion with float orders); integer
    orders stay integers, float16 is computed in float32 and rounded back."""
    ops = [_op(v, "order") for v in orders]
    ox = _op(x, "x")
    floats = [o for o in ops if not (o.dtype.is_int or o.dtype.is_bool)]
    d = _float_dtype(_promote(*floats, ox))
    work = float32 if d == float16 else d
    ins = [o if o.dtype.is_int else _cast(o, work) for o in ops] + [_cast(ox, work)]
    y = _apply(prim, ins, attrs)
    return y if work == d else fnp.astype(y, d)


# ---- the gamma family ----------------------------------------------------------------------
def gammaln(x: ArrayLike) -> Any:
    """``log|Gamma(x)|`` elementwise, as ``scipy.special.gammaln``; its derivative is digamma."""
    return _special("lgamma", (), x)


def polygamma(n: int, x: ArrayLike) -> Any:
    """The ``n``-th derivative of digamma at ``x`` (``n = 0``: digamma), as
    ``scipy.special.polygamma``; ``n`` must be a concrete non-negative integer (an attribute of
    the op), and the derivative in ``x`` is ``polygamma(n + 1, x)``."""
    if isinstance(n, Tracer):
        raise TypeError("fj.scipy.special.polygamma: n must be a concrete integer (a Python int or a NumPy "
                        "integer), not a traced value; the order selects the function")
    arr = np.asarray(n)
    if arr.size != 1 or not np.all(arr == np.floor(arr)) or arr.reshape(-1)[0] < 0:
        raise ValueError(f"fj.scipy.special.polygamma: n must be one non-negative integer, got {n!r}")
    return _special("polygamma", (), x, n=int(arr.reshape(-1)[0]))


def digamma(x: ArrayLike) -> Any:
    """The logarithmic derivative of Gamma, ``Gamma'(x) / Gamma(x)``, as ``scipy.special.digamma``."""
    return polygamma(0, x)


psi = digamma


def gammasgn(x: ArrayLike) -> Any:
    """The sign of ``Gamma(x)`` (NaN at the poles -1, -2, ...; 1 at 0), as ``scipy.special.gammasgn``."""
    x = _op(x, "x")
    x = _cast(x, _float_dtype(x.dtype))
    xv = x.tracer if x.tracer is not None else x.array
    fl = fnp.floor(xv)
    negative_sign = fnp.where(fnp.equal(fnp.mod(fl, 2), 0), 1.0, -1.0)
    inner = fnp.where(fnp.equal(fl, xv), math.nan, negative_sign)
    return fnp.astype(fnp.where(fnp.greater_equal(xv, 0), 1.0, inner), x.dtype)


def gamma(x: ArrayLike) -> Any:
    """The gamma function, ``gammasgn(x) * exp(gammaln(x))``, as ``scipy.special.gamma``."""
    return gammasgn(x) * fnp.exp(gammaln(x))


def rgamma(x: ArrayLike) -> Any:
    """``1 / Gamma(x)``, zero at the poles, as ``scipy.special.rgamma``."""
    s = gammasgn(x)
    return fnp.where(fnp.isnan(s), 0.0, s * fnp.exp(-gammaln(x)))


def factorial(n: ArrayLike) -> Any:
    """``n!`` as ``Gamma(n + 1)`` (0 for negative n), as ``scipy.special.factorial(n, exact=False)``."""
    g = gamma(fnp.add(n, 1))
    return fnp.where(fnp.less(n, 0), fnp.zeros_like(g), g)


def multigammaln(a: ArrayLike, d: int) -> Any:
    """The log of the multivariate gamma function of dimension ``d`` (a concrete int), as
    ``scipy.special.multigammaln``: ``d(d-1)/4 log(pi) + sum_j gammaln(a - j/2)``, j < d."""
    if isinstance(d, Tracer) or int(d) != d or d < 1:
        raise ValueError(f"fj.scipy.special.multigammaln: d must be a concrete positive integer, got {d!r}")
    d = int(d)
    total = gammaln(a)
    for j in range(1, d):
        total = total + gammaln(fnp.subtract(a, j / 2))
    return total + d * (d - 1) / 4 * math.log(math.pi)


def betaln(a: ArrayLike, b: ArrayLike) -> Any:
    """``log|B(a, b)|``, ``gammaln(a) + gammaln(b) - gammaln(a + b)``, as ``scipy.special.betaln``."""
    return gammaln(a) + gammaln(b) - gammaln(fnp.add(a, b))


def beta(a: ArrayLike, b: ArrayLike) -> Any:
    """The beta function ``Gamma(a) Gamma(b) / Gamma(a + b)``, as ``scipy.special.beta``."""
    s = gammasgn(a) * gammasgn(b) * gammasgn(fnp.add(a, b))
    return s * fnp.exp(betaln(a, b))


def gammainc(a: ArrayLike, x: ArrayLike) -> Any:
    """The regularized lower incomplete gamma function ``P(a, x)``, as ``scipy.special.gammainc``;
    differentiable in ``x`` and (once) in ``a``."""
    return _special("gammainc", (a,), x)


def gammaincc(a: ArrayLike, x: ArrayLike) -> Any:
    """The regularized upper incomplete gamma function ``Q(a, x) = 1 - P(a, x)``, as
    ``scipy.special.gammaincc``; differentiable in ``x`` and (once) in ``a``."""
    return _special("gammaincc", (a,), x)


def betainc(a: ArrayLike, b: ArrayLike, x: ArrayLike) -> Any:
    """The regularized incomplete beta function ``I_x(a, b)``, as ``scipy.special.betainc``;
    differentiable in ``x`` only."""
    return _special("betainc", (a, b), x)


# ---- error functions and the normal distribution -------------------------------------------
def erf(x: ArrayLike) -> Any:
    """The error function, as ``scipy.special.erf`` (``fj.erf``); of a complex ``z``, ``1 - erfc(z)``."""
    if _op(x, "x").dtype.is_complex:
        return 1 - erfc(x)
    return fnp.erf(x)


def erfc(x: ArrayLike) -> Any:
    """``1 - erf(x)``, accurate where ``erf(x)`` is near 1, as ``scipy.special.erfc``; also of complex ``z``."""
    return _special("erfc", (), x)


def erfinv(x: ArrayLike) -> Any:
    """The inverse of erf on ``(-1, 1)``, as ``scipy.special.erfinv``."""
    return _special("erfinv", (), x)


def ndtri(p: ArrayLike) -> Any:
    """The inverse of the standard normal CDF on ``(0, 1)``, as ``scipy.special.ndtri``."""
    return _special("ndtri", (), p)


def erfcinv(x: ArrayLike) -> Any:
    """The inverse of erfc on ``(0, 2)``, ``-ndtri(x / 2) / sqrt(2)``, as ``scipy.special.erfcinv``."""
    return ndtri(fnp.multiply(x, 0.5)) * (-1 / math.sqrt(2))


def ndtr(x: ArrayLike) -> Any:
    """The standard normal CDF, ``erfc(-x / sqrt(2)) / 2``, as ``scipy.special.ndtr``."""
    return erfc(fnp.multiply(x, -1 / math.sqrt(2))) * 0.5


def log_ndtr(x: ArrayLike) -> Any:
    """The log of the standard normal CDF, accurate in both tails, as ``scipy.special.log_ndtr``."""
    return _special("log_ndtr", (), x)


# ---- logistic, entropy, logsumexp ----------------------------------------------------------
def expit(x: ArrayLike) -> Any:
    """The logistic sigmoid ``1 / (1 + exp(-x))``, as ``scipy.special.expit``."""
    return sigmoid(x)


def logit(p: ArrayLike) -> Any:
    """The inverse of expit, ``log(p / (1 - p))``, as ``scipy.special.logit``."""
    return fnp.log(p) - fnp.log1p(fnp.negative(p))


def xlogy(x: ArrayLike, y: ArrayLike) -> Any:
    """``x * log(y)``, 0 where ``x == 0`` (whatever y), as ``scipy.special.xlogy``."""
    prod = fnp.multiply(x, fnp.log(y))
    return fnp.where(fnp.equal(x, 0), fnp.zeros_like(prod), prod)


def xlog1py(x: ArrayLike, y: ArrayLike) -> Any:
    """``x * log1p(y)``, 0 where ``x == 0``, as ``scipy.special.xlog1py``."""
    prod = fnp.multiply(x, fnp.log1p(y))
    return fnp.where(fnp.equal(x, 0), fnp.zeros_like(prod), prod)


def entr(x: ArrayLike) -> Any:
    """The elementwise entropy ``-x log(x)`` (0 at 0, -inf below), as ``scipy.special.entr``."""
    neg = fnp.negative(xlogy(x, x))
    return fnp.where(fnp.less(x, 0), fnp.full_like(neg, -math.inf), neg)


def rel_entr(x: ArrayLike, y: ArrayLike) -> Any:
    """``x log(x / y)`` for positive x and y, 0 where ``x == 0 <= y``, inf elsewhere, as
    ``scipy.special.rel_entr``."""
    terms = fnp.multiply(x, fnp.log(fnp.divide(x, y)))
    inside = fnp.logical_and(fnp.greater(x, 0), fnp.greater(y, 0))
    at_zero = fnp.logical_and(fnp.equal(x, 0), fnp.greater_equal(y, 0))
    return fnp.where(inside, terms, fnp.where(at_zero, fnp.zeros_like(terms), fnp.full_like(terms, math.inf)))


def kl_div(x: ArrayLike, y: ArrayLike) -> Any:
    """``x log(x / y) - x + y`` for positive x and y, y where ``x == 0 <= y``, inf elsewhere, as
    ``scipy.special.kl_div``."""
    r = rel_entr(x, y)
    return r - fnp.where(fnp.isinf(r), fnp.zeros_like(r), fnp.subtract(x, y))


def softmax(x: ArrayLike, axis: Any = None) -> Any:
    """``exp(x) / sum(exp(x), axis)`` without overflow, as ``scipy.special.softmax``."""
    return fnp.exp(log_softmax(x, axis=axis))


def log_softmax(x: ArrayLike, axis: Any = None) -> Any:
    """``x - logsumexp(x, axis)``, as ``scipy.special.log_softmax``."""
    return fnp.subtract(x, logsumexp(x, axis=axis, keepdims=True))


def logsumexp(a: ArrayLike, axis: Any = None, b: ArrayLike | None = None, keepdims: bool = False,
              return_sign: bool = False) -> Any:
    """``log(sum(b * exp(a), axis))`` without overflow, as ``scipy.special.logsumexp``: the
    maximum is taken out first (its gradient stopped: the result does not depend on it). With
    ``return_sign`` it returns ``(log|s|, sign(s))``; otherwise a negative sum gives NaN."""
    o = _op(a, "a")
    a = fnp.astype(a, _float_dtype(o.dtype)) if not o.dtype.is_inexact else a
    m = stop_gradient(fnp.max(a, axis=axis, keepdims=True))
    m = fnp.where(fnp.isfinite(m), m, fnp.zeros_like(m))
    terms = fnp.exp(a - m)
    if b is not None:
        terms = terms * b
    s = fnp.sum(terms, axis=axis, keepdims=True)
    sign = fnp.sign(s)
    out = (fnp.log(fnp.abs(s)) if return_sign else fnp.log(s)) + m
    if not keepdims:
        axes = tuple(range(fnp.ndim(a))) if axis is None else axis
        out, sign = fnp.squeeze(out, axis=axes), fnp.squeeze(sign, axis=axes)
    return (out, sign) if return_sign else out


# ---- Bessel functions ----------------------------------------------------------------------
def _order_0_or_1(v: ArrayLike) -> int | None:
    """0 or 1 where ``v`` is that order as a Python or NumPy integer, or a Python float (which
    takes x's dtype), else None: those orders have primitives of their own. A NumPy float
    keeps the general form, whose result takes its dtype too, as SciPy's does."""
    if isinstance(v, (bool, np.floating)) or not isinstance(v, (int, float, np.integer)):
        return None
    return int(v) if v in (0, 1) else None


def _by_order(general: str, of_order: str, v: ArrayLike, x: ArrayLike) -> Any:
    # of_order: the name of the primitive of order 0 or 1 with a {} for the order.
    order = _order_0_or_1(v)
    return _special(general, (v,), x) if order is None else _special(of_order.format(order), (), x)


def jv(v: ArrayLike, x: ArrayLike) -> Any:
    """The Bessel function of the first kind ``J_v(x)``, as ``scipy.special.jv``; for orders 0
    and 1 given as numbers, ``j0(x)`` and ``j1(x)`` (scipy's j0 and j1)."""
    return _by_order("bessel_jv", "bessel_j{}", v, x)


def yv(v: ArrayLike, x: ArrayLike) -> Any:
    """The Bessel function of the second kind ``Y_v(x)``, as ``scipy.special.yv``; for orders 0
    and 1 given as numbers, ``y0(x)`` and ``y1(x)`` (scipy's y0 and y1)."""
    return _by_order("bessel_yv", "bessel_y{}", v, x)


def iv(v: ArrayLike, x: ArrayLike) -> Any:
    """The modified Bessel function of the first kind ``I_v(x)``, as ``scipy.special.iv``;
    for orders 0 and 1 given as numbers, ``i0(x)`` and ``i1(x)``."""
    order, ox = _order_0_or_1(v), _op(x, "x")
    if order is not None and not ox.dtype.is_complex:   # a complex x: the general form refuses it
        xf = fnp.astype(x, _float_dtype(_promote(ox)))   # _i0's derivative rule takes a float, as SciPy an int
        return _i0(xf) if order == 0 else _i1(xf)
    return _special("bessel_iv", (v,), x)


def ive(v: ArrayLike, x: ArrayLike) -> Any:
    """``I_v(x) * exp(-|x|)``, which does not overflow, as ``scipy.special.ive``; for orders 0
    and 1 given as numbers, ``i0e(x)`` and ``i1e(x)``."""
    return _by_order("bessel_ive", "bessel_i{}e", v, x)


def _unscaled(prim: str, x: ArrayLike) -> Any:
    # exp(|x|) * prim(x) in float64, rounded to x's float dtype once: I_0 and I_1 overflow
    # float32 after exp(|x|) does (I_0(89) is 1.9e37).
    ox = _op(x, "x")
    d = _float_dtype(_promote(ox))
    x64 = _cast(ox, float64)
    y = fnp.exp(fnp.abs(x64)) * _apply(prim, [x64], {})
    return y if d == float64 else fnp.astype(y, d)


@custom_jvp
def _i0(x: Any) -> Any:
    return _unscaled("bessel_i0e", x)


@_i0.defjvp
def _i0_jvp(primals: tuple, tangents: tuple) -> tuple:
    # I_0' = I_1: not the product rule's difference of two terms near 1 (I_1(x) ~ x / 2 near 0).
    (x,), (t,) = primals, tangents
    return _i0(x), t * _i1(x)


@custom_jvp
def _i1(x: Any) -> Any:
    return _unscaled("bessel_i1e", x)


# I_1' near 0: its series 1/2 + 3x^2/16 + 5x^4/384 + ..., J_1''s without the signs (highest
# first), within 1e-20 below 0.1 (where the second derivative of I_0 - I_1 / x loses eps / x).
_I1_DERIVATIVE_SERIES = tuple(abs(c) for c in J1_DERIVATIVE_SERIES)


@_i1.defjvp
def _i1_jvp(primals: tuple, tangents: tuple) -> tuple:
    # I_1' = I_0 - I_1 / x, its series near 0: the product rule's terms of exp(|x|) i1e(x) cancel
    # there to eps, the second derivative's 3x/8 lost below 1e-12.
    (x,), (t,) = primals, tangents
    y = _i1(x)
    near = fnp.abs(x) < 0.1
    s = x * x
    series = 0.0
    for c in _I1_DERIVATIVE_SERIES:
        series = series * s + c
    return y, t * fnp.where(near, series, _i0(x) - y / fnp.where(near, 1.0, x))


def jn(n: ArrayLike, x: ArrayLike) -> Any:
    """``J_n(x)`` of integer order ``n``, as ``scipy.special.jn``."""
    return jv(n, x)


def yn(n: ArrayLike, x: ArrayLike) -> Any:
    """``Y_n(x)`` of integer order ``n``, as ``scipy.special.yn``."""
    return yv(n, x)


def j0(x: ArrayLike) -> Any:
    """``J_0(x)``, as ``scipy.special.j0``; its derivative is ``-j1(x)``."""
    return jv(0, x)


def j1(x: ArrayLike) -> Any:
    """``J_1(x)``, as ``scipy.special.j1``."""
    return jv(1, x)


def y0(x: ArrayLike) -> Any:
    """``Y_0(x)``, as ``scipy.special.y0``; its derivative is ``-y1(x)``."""
    return yv(0, x)


def y1(x: ArrayLike) -> Any:
    """``Y_1(x)``, as ``scipy.special.y1``."""
    return yv(1, x)


def i0(x: ArrayLike) -> Any:
    """``I_0(x)``, as ``scipy.special.i0``; its derivative is ``i1(x)``."""
    return iv(0, x)


def i1(x: ArrayLike) -> Any:
    """``I_1(x)``, as ``scipy.special.i1``."""
    return iv(1, x)


def i0e(x: ArrayLike) -> Any:
    """``I_0(x) exp(-|x|)``, as ``scipy.special.i0e``."""
    return ive(0, x)


def i1e(x: ArrayLike) -> Any:
    """``I_1(x) exp(-|x|)``, as ``scipy.special.i1e``."""
    return ive(1, x)


# scipy.special's ufuncs applied to a traced array inside fj.function trace as these.
register_ufuncs("scipy.special", {name: globals()[name] for name in __all__})
