"""Special functions (``fj.scipy.special``): the gamma and error function families and Bessel
functions, as opaque primitives whose reference is ``scipy.special``.

No backend has a scalar template of its own for them, so they are ``opaque``: the incomplete
gamma and beta functions and the Bessel functions of any order run as SciPy's C function called
per element in a kernel of their own (role ``scalar_function``: their template names the loop
IR's library function, ``lowering.scalar.LIBRARY_FUNCTIONS``); the others' reference runs on the
Python driver, but for ``lgamma``, ``polygamma`` (of orders up to ``POLYGAMMA_MAX_ORDER``), real
``erfc``, ``erfinv``, ``ndtri``, ``log_ndtr`` and the Bessel functions of orders 0 and 1
(``bessel_i0e``, ``bessel_i1e``, ``bessel_j0``, ``bessel_j1``, ``bessel_y0``, ``bessel_y1``), which declare
decompositions into elementwise ops (the end of this module) and so compile into the native
program. Each VJP is written
with primitives of this module and ``elementwise``, so a gradient differentiates again
(``lgamma' = polygamma(0)``, ``polygamma(n)' = polygamma(n+1)``, ``J_v' = (J_{v-1} - J_{v+1}) / 2``,
...). The functions of two or three inputs take their
order parameters first (``gammainc(a, x)``, ``betainc(a, b, x)``, ``bessel_jv(v, x)``), in any
real dtype (integer orders stay integers). The derivative of the incomplete gamma functions in
their order ``a`` has no closed form and is summed by ``gammainc_grad_a`` (a series or a
continued fraction, ``flowjit/ir/incomplete_gamma.py``), as JAX's ``igamma_grad_a``, which
decomposes into those sums as while loops (the block the tracer traces and hands down); that of
betainc and the Bessel functions in theirs, as JAX's, is refused: the VJP raises where the pass
wants it (the order depends on a differentiated value), and gives none otherwise. They
broadcast as elementwise ops do and batch with the elementwise rule.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import Any

import numpy as np

from flowjit.ir.batching import _rule_elementwise
from flowjit.ir.dtypes import INT_DTYPES, complex64, complex128, float32, float64
from flowjit.ir.errors import AutodiffError, ShapeError
from flowjit.ir.incomplete_gamma import ArrayOps, gammainc_derivative_a, python_loop, traced_derivative_a
from flowjit.ir.registry import attr, broadcast_shapes, declare, defbatch, defdecompose, defvjp, get
from flowjit.ir.types import TensorType

SPECIAL_DTYPES = (float32, float64)
# Order parameters (gammainc's a, a Bessel function's v) may also be integers.
_ORDER_DTYPES = INT_DTYPES + SPECIAL_DTYPES


def _rule(in_types: Sequence[TensorType], **attrs: Any) -> TensorType:
    # The last input is the argument x, whose dtype is the result's; orders before it
    # broadcast with it and, when float, share its dtype.
    x = in_types[-1]
    if not x.dtype.is_inexact:
        raise ShapeError(f"the argument must be float32 or float64, got {x}; cast it with .astype()")
    for t in in_types[:-1]:
        if t.dtype.is_float and t.dtype != x.dtype:
            raise ShapeError(f"a float order must have the argument's dtype, got {t} and {x}; cast one with .astype()")
    return TensorType(broadcast_shapes(*(t.shape for t in in_types)), x.dtype)


def _reference(name: str, fn: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
    def impl(*xs: np.ndarray, **attrs: Any) -> np.ndarray:
        import scipy.special  # noqa: F401  (imported on first use: it costs 0.1 s)
        with np.errstate(all="ignore"):
            out = fn(*[x.astype(np.float64) if x.dtype.kind == "f" else x for x in xs], **attrs)
        return np.asarray(out).astype(xs[-1].dtype, copy=False)
    impl.__name__ = f"_{name}_impl"
    return impl


def _declare(name: str, fn: Callable[..., np.ndarray], arity: int, doc: str, complex_too: bool = False,
             no_derivative: str = "", scalar_function: str | None = None, **attrs: Any) -> None:
    # complex_too: the reference (and the VJP, a holomorphic function's g * f'(z), JAX's
    # convention) also take complex arguments. scalar_function: the loop IR's function of the
    # op's element (lowering.scalar.LIBRARY_FUNCTIONS: SciPy's C function of it, which the CPU
    # code calls per element in a kernel of the op's own), its orders cast to x's dtype.
    dtypes = SPECIAL_DTYPES if arity == 1 else _ORDER_DTYPES
    template = None
    if scalar_function is not None:
        operands = [f"cast({v})" for v in "abc"[:arity - 1]] + ["abc"[arity - 1]]
        template = f"{scalar_function}({', '.join(operands)})"
    declare(name, kind="opaque", rule=_rule, impl=_reference(name, fn), arity=arity,
            dtypes=dtypes + ((complex64, complex128) if complex_too else ()), attrs=attrs, doc=doc,
            no_derivative=no_derivative, template=template, role="scalar_function" if template else None)
    p = get(name)
    defbatch(name, _rule_elementwise(p))


def _sp(name: str) -> Callable[..., np.ndarray]:
    def fn(*xs: np.ndarray) -> np.ndarray:
        import scipy.special
        return getattr(scipy.special, name)(*xs)
    return fn


def _numpy_ops() -> ArrayOps:
    import scipy.special
    return ArrayOps(where=np.where, log=np.log, exp=np.exp, absolute=np.abs, any=np.any,
                    logical_and=np.logical_and, logical_or=np.logical_or, logical_not=np.logical_not,
                    isnan=np.isnan, digamma=scipy.special.digamma, lgamma=scipy.special.gammaln)


def _gammainc_grad_a(a: np.ndarray, x: np.ndarray) -> np.ndarray:
    a, x = np.broadcast_arrays(np.asarray(a, np.float64), np.asarray(x, np.float64))
    return gammainc_derivative_a(_numpy_ops(), python_loop, a, x)


def _polygamma(x: np.ndarray, *, n: int) -> np.ndarray:
    import scipy.special
    return scipy.special.psi(x) if n == 0 else scipy.special.polygamma(n, x)


_declare("lgamma", _sp("gammaln"), 1, "log|Gamma(x)| (scipy.special.gammaln)")
_declare("polygamma", _polygamma, 1, "the n-th derivative of digamma (n = 0: digamma itself)",
         n=attr("int", 0))
_declare("erfc", _sp("erfc"), 1, "1 - erf(x), accurate where erf(x) is near 1; also of complex z",
         complex_too=True)
_declare("erfinv", _sp("erfinv"), 1, "the inverse of erf on (-1, 1)")
_declare("ndtri", _sp("ndtri"), 1, "the inverse of the standard normal CDF on (0, 1)")
_declare("log_ndtr", _sp("log_ndtr"), 1, "log of the standard normal CDF, accurate in both tails")
_declare("gammainc", _sp("gammainc"), 2, "the regularized lower incomplete gamma function P(a, x)",
         scalar_function="gammainc")
_declare("gammaincc", _sp("gammaincc"), 2, "the regularized upper incomplete gamma function Q(a, x)",
         scalar_function="gammaincc")
_declare("gammainc_grad_a", _gammainc_grad_a, 2, "dP(a, x)/da, the lower regularized incomplete gamma "
         "function's derivative in its order (-dQ/da): a series or a continued fraction summed with it",
         no_derivative="the incomplete gamma function's second derivative in its order is not summed "
                       "(JAX's igamma_grad_a has none either)")
_declare("betainc", _sp("betainc"), 3, "the regularized incomplete beta function I_x(a, b)", scalar_function="betainc")
_declare("bessel_jv", _sp("jv"), 2, "the Bessel function of the first kind J_v(x)", scalar_function="jv")
_declare("bessel_yv", _sp("yv"), 2, "the Bessel function of the second kind Y_v(x)", scalar_function="yv")
_declare("bessel_iv", _sp("iv"), 2, "the modified Bessel function of the first kind I_v(x)", scalar_function="iv")
_declare("bessel_ive", _sp("ive"), 2, "I_v(x) * exp(-|x|), which does not overflow", scalar_function="ive")
# Orders 0 and 1 of ive, as JAX's lax.bessel_i0e and bessel_i1e: closed in their derivatives
# (i0e' and i1e' are written in i0e and i1e), decomposed into elementwise ops.
_declare("bessel_i0e", _sp("i0e"), 1, "I_0(x) * exp(-|x|) (scipy.special.i0e)")
_declare("bessel_i1e", _sp("i1e"), 1, "I_1(x) * exp(-|x|) (scipy.special.i1e)")
# Orders 0 and 1 of jv and yv (scipy's j0, j1, y0, y1), decomposed likewise.
_declare("bessel_j0", _sp("j0"), 1, "the Bessel function of the first kind of order 0 (scipy.special.j0)")
_declare("bessel_j1", _sp("j1"), 1, "the Bessel function of the first kind of order 1 (scipy.special.j1)")
_declare("bessel_y0", _sp("y0"), 1, "the Bessel function of the second kind of order 0 (scipy.special.y0)")
_declare("bessel_y1", _sp("y1"), 1, "the Bessel function of the second kind of order 1 (scipy.special.y1)")


# ---- VJP rules -------------------------------------------------------------------------------
def _no_order_gradient(e: Any, fn: str, param: str, v: Any) -> None:
    """None (no cotangent) for an order parameter no differentiated value reaches (the pass says
    which, ``Emitter.wants``); else the error JAX gives."""
    if not v.type.dtype.is_inexact or not e.wants(v):
        return None
    where = f" at {e.builder.loc}" if e.builder.loc else ""
    raise AutodiffError(f"{fn}{where} has no derivative with respect to its order parameter {param} (no closed "
                        f"form; JAX refuses it too); differentiate only with respect to x, or pass "
                        f"fj.stop_gradient({param})")


def _order_as(e: Any, v: Any, like: Any) -> Any:
    return v if v.type.dtype == like.type.dtype else e.cast(v, dtype=like.type.dtype)


def _unary_vjp(name: str, derivative: Callable[..., Any]) -> None:
    # derivative(e, y, x, **attrs): dy/dx elementwise.
    defvjp(name, lambda e, g, y, x, **attrs: [e.mul(g, derivative(e, y, x, **attrs))])


_unary_vjp("lgamma", lambda e, y, x: e.polygamma(x, n=0))
_unary_vjp("polygamma", lambda e, y, x, *, n: e.polygamma(x, n=n + 1))
_unary_vjp("bessel_i0e", lambda e, y, x: e.sub(e.bessel_i1e(x), e.mul(e.sign(x), y)))


# Near 0 the derivatives of i1e and j1 are their series (x / c loses digits to the
# cancellation of i1e(x) - x i1e'(x) in its own derivative, eps / |x| of it): i1e' = 1/2 - |x|
# + 15 x^2 / 16 - 7 |x|^3 / 12 below 1e-4 (the next term 35 x^4 / 128), J_1' = sum_k (-1)^k
# (2k + 1) x^2k / (2^(2k+1) k! (k+1)!) below 0.1 (five terms, within 1e-20). Their own
# derivatives follow.
_I1E_SERIES_BELOW = 1e-4
_J1_DERIVATIVE_SERIES_BELOW = 0.1


def _j_power_series(order: int, terms: int) -> tuple[float, ...]:
    """J_n(x) / x^n's power series in s = x^2, (-s/4)^k / (k! (k + n)!) (/ 2 for J_1), highest
    power first."""
    return tuple((-1) ** k / (2 ** order * 4 ** k * math.factorial(k) * math.factorial(k + order))
                 for k in reversed(range(terms)))


# J_1' = d/dx x sum c_k x^2k = sum (2k + 1) c_k x^2k; I_1''s coefficients are their magnitudes
# (fj.scipy.special's i1).
J1_DERIVATIVE_SERIES = tuple((2 * k + 1) * c for k, c in zip(reversed(range(5)), _j_power_series(1, 5)))


def _i1e_derivative(e: Any, y: Any, x: Any) -> Any:
    # I_1' = I_0 - I_1 / x, less the scale's own -sign(x) i1e.
    z = e.abs(x)
    near = e.lt(z, e.const(_I1E_SERIES_BELOW, x))
    safe = e.select(near, e.const(1.0, x), x)
    d = e.sub(e.bessel_i0e(x), e.mul(y, e.add(e.sign(x), e.div(e.const(1.0, x), safe))))
    series = e.add(e.const(0.5, x), e.mul(z, _poly(e, z, (-7 / 12, 15 / 16, -1.0))))
    return e.select(near, series, d)


_unary_vjp("bessel_i1e", _i1e_derivative)
_unary_vjp("bessel_j0", lambda e, y, x: e.neg(e.bessel_j1(x)))
_unary_vjp("bessel_y0", lambda e, y, x: e.neg(e.bessel_y1(x)))


def _j1_derivative(e: Any, y: Any, x: Any) -> Any:
    # J_1' = J_0 - J_1 / x.
    near = e.lt(e.abs(x), e.const(_J1_DERIVATIVE_SERIES_BELOW, x))
    d = e.sub(e.bessel_j0(x), e.div(y, e.select(near, e.const(1.0, x), x)))
    return e.select(near, _poly(e, e.mul(x, x), J1_DERIVATIVE_SERIES), d)


def _y1_derivative(e: Any, y: Any, x: Any) -> Any:
    # Y_1' = Y_0 - Y_1 / x; +inf at 0 (Y_1 ~ -2 / (pi x)), where that is -inf - (-inf).
    d = e.sub(e.bessel_y0(x), e.div(y, x))
    return e.select(e.eq(x, e.const(0.0, x)), e.const(math.inf, x), d)


_unary_vjp("bessel_j1", _j1_derivative)
_unary_vjp("bessel_y1", _y1_derivative)
_unary_vjp("erfc", lambda e, y, x: e.mul(e.const(-2 / math.sqrt(math.pi), x), e.exp(e.neg(e.mul(x, x)))))
_unary_vjp("erfinv", lambda e, y, x: e.mul(e.const(math.sqrt(math.pi) / 2, x), e.exp(e.mul(y, y))))
_unary_vjp("ndtri", lambda e, y, x: e.mul(e.const(math.sqrt(2 * math.pi), x),
                                          e.exp(e.mul(e.const(0.5, y), e.mul(y, y)))))
# d/dx log Phi(x) = phi(x) / Phi(x) = exp(-x^2/2 - log Phi(x)) / sqrt(2 pi): stable in both tails.
_unary_vjp("log_ndtr", lambda e, y, x: e.mul(e.const(1 / math.sqrt(2 * math.pi), x),
                                             e.exp(e.sub(e.mul(e.const(-0.5, x), e.mul(x, x)), y))))


def _gammainc_density(e: Any, a: Any, x: Any) -> Any:
    # d/dx P(a, x) = x^(a-1) e^(-x) / Gamma(a), in logs so it neither overflows nor underflows early.
    a = _order_as(e, a, x)
    one = e.const(1, x)
    return e.exp(e.sub(e.sub(e.mul(e.sub(a, one), e.log(x)), x), e.lgamma(a)))


def _gammainc_order(e: Any, g: Any, a: Any, x: Any, sign: float) -> Any:
    # The cotangent of a float order: g * dP/da (sign 1) or g * dQ/da = -g * dP/da (sign -1).
    if not a.type.dtype.is_inexact or not e.wants(a):
        return None
    d = e.gammainc_grad_a(a, x)
    return e.unbroadcast(e.mul(g, d if sign > 0 else e.neg(d)), a.type)


def _gammainc_vjp(e, g, y, a, x):
    return [_gammainc_order(e, g, a, x, 1.0), e.unbroadcast(e.mul(g, _gammainc_density(e, a, x)), x.type)]


def _gammaincc_vjp(e, g, y, a, x):
    return [_gammainc_order(e, g, a, x, -1.0),
            e.unbroadcast(e.neg(e.mul(g, _gammainc_density(e, a, x))), x.type)]


def _betainc_vjp(e, g, y, a, b, x):
    # d/dx I_x(a, b) = x^(a-1) (1-x)^(b-1) / B(a, b).
    na, nb = _no_order_gradient(e, "betainc", "a", a), _no_order_gradient(e, "betainc", "b", b)
    a, b = _order_as(e, a, x), _order_as(e, b, x)
    one = e.const(1, x)
    log_beta = e.sub(e.add(e.lgamma(a), e.lgamma(b)), e.lgamma(e.add(a, b)))
    log_d = e.sub(e.add(e.mul(e.sub(a, one), e.log(x)), e.mul(e.sub(b, one), e.log1p(e.neg(x)))), log_beta)
    return [na, nb, e.unbroadcast(e.mul(g, e.exp(log_d)), x.type)]


def _bessel_vjp(name: str, fn: str, sign: float, scaled: bool = False) -> None:
    # The recurrences: C_v'(x) = (C_{v-1}(x) + sign * C_{v+1}(x)) / 2 (J, Y: sign -1; I: +1);
    # ``scaled``: the function is I_v(x) * exp(-|x|).
    def rule(e, g, y, v, x):
        nv = _no_order_gradient(e, fn, "v", v)
        one = e.const(1, v)
        below, above = getattr(e, name)(e.sub(v, one), x), getattr(e, name)(e.add(v, one), x)
        d = e.mul(e.const(0.5, x), e.add(below, e.mul(e.const(sign, x), above)))
        if scaled:
            # ive = iv * exp(-|x|): the scale's own derivative, -sign(x) * ive.
            d = e.sub(d, e.mul(e.sign(x), y))
        return [nv, e.unbroadcast(e.mul(g, d), x.type)]
    defvjp(name, rule)


defvjp("gammainc", _gammainc_vjp)
defvjp("gammaincc", _gammaincc_vjp)
defvjp("betainc", _betainc_vjp)
_bessel_vjp("bessel_jv", "jv", -1.0)
_bessel_vjp("bessel_yv", "yv", -1.0)
_bessel_vjp("bessel_iv", "iv", 1.0)
_bessel_vjp("bessel_ive", "ive", 1.0, scaled=True)


# ---- decompositions: lgamma and digamma in elementwise primitives ------------------------------
# Written in ops every code generator has, so a program using them (a Poisson or binomial draw,
# a Poisson likelihood, a gamma draw's derivative in its shape) stays one native program and
# they fuse into their neighbours' kernels. Both are computed in float64 and rounded once to
# the argument's dtype. lgamma is Cephes' ``lgam`` (the arithmetic scipy.special.gammaln
# does): Stirling's series from 13 on, below it a shift onto [2, 3) (a product of at most ten
# factors) and a rational function there; ``log(pi / |sin(pi x)|) - lgamma(1 - x)`` for
# negative x. digamma is the asymptotic series from 10 on and a sum of at most ten ``1 / x``
# terms below, reflected for negative x. Unrolled, each shift step is a select, no loop.

# Stirling's series of log Gamma: 1/(12x) - 1/(360x^3) + ..., as Cephes' coefficients
# (highest power of 1/x^2 first), and its rational function of t = x - 2 on [2, 3).
_LGAMMA_STIRLING = (8.11614167470508450300e-4, -5.95061904284301438324e-4, 7.93650340457716943945e-4,
                    -2.77777777730099687205e-3, 8.33333333333331927722e-2)
_LGAMMA_NUM = (-1.37825152569120859100e3, -3.88016315134637840924e4, -3.31612992738871184744e5,
               -1.16237097492762307383e6, -1.72173700820839662146e6, -8.53555664245765465627e5)
_LGAMMA_DEN = (1.0, -3.51815701436523470549e2, -1.70642106651881159223e4, -2.20528590553854454839e5,
               -1.13933444367982507207e6, -2.53252307177582951285e6, -2.01889141433532773231e6)
# digamma's asymptotic series: psi(x) ~ log x - 1/(2x) - sum_k B_2k / (2k x^2k), k = 1..7, the
# Bernoulli numbers' fractions highest power first.
_DIGAMMA_SERIES = tuple(float(b) for b in (1 / 12, -691 / 32760, 1 / 132, -1 / 240, 1 / 252, -1 / 120, 1 / 12))
_SHIFTS = 10


def _poly(e: Any, t: Any, coefficients: Sequence[float]) -> Any:
    # Horner's rule, the highest power first.
    acc = e.const(coefficients[0], t)
    for c in coefficients[1:]:
        acc = e.add(e.mul(acc, t), e.const(c, t))
    return acc


# sin(y) / y's Taylor series in y^2 (1/(2k+1)!, signs alternating), highest power first: to
# y^22 it is within 1e-18 of sin for |y| <= pi/2. A polynomial, not libm's sin, so that the
# loop around it vectorizes (a scalar call in a kernel keeps every lane of it scalar).
_SIN_SERIES = tuple((-1) ** k / math.factorial(2 * k + 1) for k in range(11, -1, -1))


def _sin_pi(e: Any, r: Any) -> Any:
    """sin(pi r) for r in [-1/2, 1/2]."""
    y = e.mul(e.const(math.pi, r), r)
    return e.mul(y, _poly(e, e.mul(y, y), _SIN_SERIES))


def _reduced(e: Any, x: Any) -> Any:
    # x - round(x), in [-1/2, 1/2]: sin(pi x) = +-sin(pi r), exactly for any x.
    return e.sub(x, e.round(x))


def _as_float64(e: Any, x: Any) -> Any:
    return x if x.type.dtype == float64 else e.cast(x, dtype=float64)


def _rounded_like(e: Any, y: Any, x: Any) -> Any:
    return y if x.type.dtype == float64 else e.cast(y, dtype=x.type.dtype)


def _lgamma_decompose(e, x):
    x64 = _as_float64(e, x)
    zero, one = e.const(0.0, x64), e.const(1.0, x64)
    negative = e.lt(x64, zero)
    w = e.select(negative, e.sub(one, x64), x64)            # > 0 (>= 1 where x < 0)
    small = e.lt(w, e.const(13.0, x64))
    # below 13: Gamma(w) = z Gamma(u), u moved onto [2, 3) one step at a time
    u, z = e.select(small, w, e.const(2.5, x64)), one
    for _ in range(_SHIFTS):
        down = e.ge(u, e.const(3.0, x64))
        u = e.select(down, e.sub(u, one), u)
        z = e.select(down, e.mul(z, u), z)
    for _ in range(2):
        up = e.lt(u, e.const(2.0, x64))
        z = e.select(up, e.div(z, u), z)
        u = e.select(up, e.add(u, one), u)
    t = e.sub(u, e.const(2.0, x64))
    near = e.add(e.log(e.abs(z)), e.div(e.mul(t, _poly(e, t, _LGAMMA_NUM)), _poly(e, t, _LGAMMA_DEN)))
    # from 13: Stirling's series
    big = e.select(small, e.const(13.0, x64), w)
    far = e.add(e.sub(e.mul(e.sub(big, e.const(0.5, x64)), e.log(big)), big), e.const(0.91893853320467274178, x64))
    far = e.add(far, e.div(_poly(e, e.div(one, e.mul(big, big)), _LGAMMA_STIRLING), big))
    at_w = e.select(small, near, far)
    # x < 0: log|Gamma(x)| = log(pi / |sin(pi x)|) - log Gamma(1 - x); the poles (|sin| 0) are inf
    reflected = e.sub(e.sub(e.const(math.log(math.pi), x64), e.log(e.abs(_sin_pi(e, _reduced(e, x64))))), at_w)
    y = e.select(negative, reflected, at_w)
    y = e.select(e.eq(e.abs(x64), e.const(math.inf, x64)), x64, y)     # +-inf, as scipy's gammaln
    return [_rounded_like(e, y, x)]


def _digamma_decompose(e, x, *, n):
    if n != 0:
        return _polygamma_decompose(e, x, n=n)
    x64 = _as_float64(e, x)
    zero, one = e.const(0.0, x64), e.const(1.0, x64)
    negative = e.lt(x64, zero)
    s = e.select(negative, e.sub(one, x64), x64)             # psi(x) = psi(1 - x) - pi / tan(pi x)
    shifted = zero
    for _ in range(_SHIFTS):
        low = e.lt(s, e.const(float(_SHIFTS), x64))
        shifted = e.select(low, e.add(shifted, e.div(one, s)), shifted)
        s = e.select(low, e.add(s, one), s)
    inv2 = e.div(one, e.mul(s, s))
    y = e.sub(e.sub(e.sub(e.log(s), e.div(e.const(0.5, x64), s)), e.mul(inv2, _poly(e, inv2, _DIGAMMA_SERIES))),
              shifted)
    r = _reduced(e, x64)       # tan(pi x) = tan(pi r); cos(pi r) = sin(pi (1/2 - |r|))
    cos_pi = _sin_pi(e, e.sub(e.const(0.5, x64), e.abs(r)))
    reflected = e.sub(y, e.div(e.mul(e.const(math.pi, x64), cos_pi), _sin_pi(e, r)))
    pole = e.logical_and(negative, e.eq(r, zero))              # negative integers: NaN, as scipy
    y = e.select(negative, e.select(pole, e.const(math.nan, x64), reflected), y)
    return [_rounded_like(e, y, x)]


# polygamma of order n >= 1: psi^(n)(x) = (-1)^(n+1) n! zeta(n+1, x). For x > 0, shifted up
# to z >= _polygamma_series(n)[0] one select at a time (each step adds n! / x^(n+1)), then
# the asymptotic series (-1)^(n+1) [(n-1)!/z^n + n!/(2 z^(n+1)) + sum_k B_2k (2k+n-1)!/(2k)!
# / z^(2k+n)], its terms taken until the next is below 2^-60 of the first. For x < 0 the
# reflection psi^(n)(x) = (-1)^n psi^(n)(1 - x) - pi^(n+1) P_n(cot(pi x)), P_0(c) = c and
# P_(k+1)(c) = -(1 + c^2) P_k'(c) (d^n/dx^n cot(pi x) = pi^n P_n(cot(pi x))): scipy sums
# zeta(n+1, x) from x upwards there, |x| terms. At 0, the negative integers and -inf: scipy's
# infinity, +inf for odd n, -inf for even n.
# Orders past POLYGAMMA_MAX_ORDER keep scipy's: a choice (the series would serve to about 100,
# its shift bound 30 at 60), made because each step of the shift is a select and a power, and
# no model asks for such orders.
POLYGAMMA_MAX_ORDER = 40
_POLYGAMMA_MAX_TERMS = 32   # Bernoulli numbers to B_64 (exact fractions, 3 ms once a process)


@functools.cache
def _bernoulli(m: int) -> tuple:
    """B_0 .. B_m, exact (B_1 = -1/2)."""
    b = [Fraction(1)]
    for k in range(1, m + 1):
        b.append(-sum(math.comb(k + 1, j) * b[j] for j in range(k) if b[j]) / (k + 1))
    return tuple(b)


@functools.cache
def _polygamma_series(n: int) -> tuple[float, tuple[float, ...]]:
    """The shift bound z of order ``n``'s asymptotic series and its coefficients B_2k (2k+n-1)!
    / (2k)! (k = 1..K, highest first, for Horner's rule in 1/z^2), from the smallest z (a
    multiple of 5, from 10) at which the terms fall below 2^-60 of (n-1)!."""
    b = _bernoulli(2 * _POLYGAMMA_MAX_TERMS)
    c = [b[2 * k] * math.factorial(2 * k + n - 1) / math.factorial(2 * k) for k in range(1, _POLYGAMMA_MAX_TERMS + 1)]
    first = math.factorial(n - 1)
    for z in range(10, 400, 5):
        for k, ck in enumerate(c):
            if abs(float(ck)) / z ** (2 * k + 2) < 2.0 ** -60 * first:
                return float(z), tuple(float(v) for v in reversed(c[:k]))
    raise AssertionError(f"no asymptotic series for polygamma of order {n}")


def _cot_derivative(n: int) -> tuple[float, ...]:
    """P_n's coefficients, highest power first: d^n/dx^n cot(pi x) = pi^n P_n(cot(pi x))."""
    p = [0, 1]                                        # P_0(c) = c, lowest power first
    for _ in range(n):
        d = [k * p[k] for k in range(1, len(p))]      # P'
        q = [0] * (len(d) + 2)
        for k, v in enumerate(d):                     # -(1 + c^2) P'
            q[k] -= v
            q[k + 2] -= v
        p = q
    return tuple(float(v) for v in reversed(p))


def _powi(e: Any, x: Any, k: int) -> Any:
    """x^k, k >= 1: the square of x^(k // 2), times x for odd k (multiplies, where a float
    ``pow`` past the fourth power is a libm call that keeps its loop scalar)."""
    if k == 1:
        return x
    half = _powi(e, x, k // 2)
    square = e.mul(half, half)
    return e.mul(square, x) if k % 2 else square


def _polygamma_decompose(e, x, *, n):
    if n > POLYGAMMA_MAX_ORDER:
        return None   # scipy's polygamma (the shift bound, a select a step, grows with the order)
    bound, series = _polygamma_series(n)
    x64 = _as_float64(e, x)
    zero, one = e.const(0.0, x64), e.const(1.0, x64)
    negative = e.lt(x64, zero)
    s = e.select(negative, e.sub(one, x64), x64)
    shifted = zero                                     # sum of 1/(x+k)^(n+1) over the shifts
    for _ in range(int(bound)):
        low = e.lt(s, e.const(bound, x64))
        shifted = e.select(low, e.add(shifted, _powi(e, e.div(one, s), n + 1)), shifted)
        s = e.select(low, e.add(s, one), s)
    inv = e.div(one, s)
    tail = e.add(e.const(float(math.factorial(n - 1)), x64), e.mul(e.const(math.factorial(n) / 2, x64), inv))
    inv2 = e.mul(inv, inv)
    tail = e.add(tail, e.mul(inv2, _poly(e, inv2, series)))
    for _ in range(n):   # tail / z^n a factor at a time: no power of 1/z underflows before the result does
        tail = e.mul(tail, inv)
    magnitude = e.add(e.mul(e.const(float(math.factorial(n)), x64), shifted), tail)
    y = magnitude if n % 2 else e.neg(magnitude)      # (-1)^(n+1)
    # x < 0: (-1)^n psi^(n)(1 - x) - pi^(n+1) P_n(cot(pi x)), cot(pi x) = cos(pi r) / sin(pi r)
    r = _reduced(e, x64)
    cot = e.div(_sin_pi(e, e.sub(e.const(0.5, x64), e.abs(r))), _sin_pi(e, r))
    reflected = e.sub(y if n % 2 == 0 else e.neg(y),
                      e.mul(e.const(math.pi ** (n + 1), x64), _poly(e, cot, _cot_derivative(n))))
    pole = e.logical_and(e.le(x64, zero), e.eq(x64, e.round(x64)))
    y = e.select(pole, e.const(math.inf if n % 2 else -math.inf, x64), e.select(negative, reflected, y))
    return [_rounded_like(e, y, x)]


# erfc's rational functions of |x| (Cephes' ndtr.c, the arithmetic scipy.special.erfc does):
# exp(-x^2) P(|x|) / Q(|x|) on [1, 8), R / S from 8 on (Q and S with a leading 1).
_ERFC_P = (2.46196981473530512524e-10, 5.64189564831068821977e-1, 7.46321056442269912687e0,
           4.86371970985681366614e1, 1.96520832956077098242e2, 5.26445194995477358631e2,
           9.34528527171957607540e2, 1.02755188689515710272e3, 5.57535335369399327526e2)
_ERFC_Q = (1.0, 1.32281951154744992508e1, 8.67072140885989742329e1, 3.54937778887819891062e2,
           9.75708501743205489753e2, 1.82390916687909736289e3, 2.24633760818710981792e3,
           1.65666309194161350182e3, 5.57535340817727675546e2)
_ERFC_R = (5.64189583547755073984e-1, 1.27536670759978104416e0, 5.01905042251180477414e0,
           6.16021097993053585195e0, 7.40974269950448939160e0, 2.97886665372100240670e0)
_ERFC_S = (1.0, 2.26052863220117276590e0, 9.39603524938001434673e0, 1.20489539808096656605e1,
           1.70814450747565897222e1, 9.60896809063285878198e0, 3.36907645100081516050e0)


def _erfc_ratio(e: Any, a: Any) -> Any:
    """erfc(a) / exp(-a^2) for a >= 1: P/Q below 8, R/S from there."""
    return e.select(e.lt(a, e.const(8.0, a)), e.div(_poly(e, a, _ERFC_P), _poly(e, a, _ERFC_Q)),
                    e.div(_poly(e, a, _ERFC_R), _poly(e, a, _ERFC_S)))


def _erfc_decompose(e, x):
    if x.type.dtype.is_complex:
        return None   # complex arguments keep scipy's erfc
    x64 = _as_float64(e, x)
    one = e.const(1.0, x64)
    a = e.abs(x64)
    # |x| < 1: 1 - erf(x) (no cancellation there: erfc is in (0.15, 1.85))
    inner = e.sub(one, e.erf(x64))
    # |x| >= 1: exp(-x^2) P/Q or R/S, reflected (2 - erfc(|x|)) for negative x; exp underflows
    # to 0 from |x| about 27, where erfc is 0 (or 2) in float64 too.
    tail = e.mul(e.exp(e.neg(e.mul(x64, x64))), _erfc_ratio(e, a))
    tail = e.select(e.lt(x64, e.const(0.0, x64)), e.sub(e.const(2.0, x64), tail), tail)
    y = e.select(e.lt(a, one), inner, tail)
    # +-inf: 0 and 2 (P/Q of inf is NaN)
    y = e.select(e.eq(a, e.const(math.inf, x64)), e.select(e.lt(x64, e.const(0.0, x64)), e.const(2.0, x64),
                                                             e.const(0.0, x64)), y)
    return [_rounded_like(e, y, x)]


# erfinv up to |x| = 0.9: Giles' single-precision polynomial (2010) in w - 2.5, w = -log(1 - x^2),
# highest power first, then two Newton steps on erf (within 1e-15 of scipy); beyond, from ndtri.
_ERFINV_CENTRE = (2.81022636e-08, 3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087,
                  -0.00125372503, -0.00417768164, 0.246640727, 1.50140941)


def _erfinv_decompose(e, x):
    x64 = _as_float64(e, x)
    one = e.const(1.0, x64)
    a = e.abs(x64)
    w = e.neg(e.log(e.mul(e.sub(one, a), e.add(one, a))))
    z = e.mul(_poly(e, e.sub(w, e.const(2.5, x64)), _ERFINV_CENTRE), a)

    def density(z):
        return e.mul(e.const(2 / math.sqrt(math.pi), x64), e.exp(e.neg(e.mul(z, z))))
    # |x| <= 0.9: the guess is within 1e-7, and two steps on erf reach float64's precision
    inner = z
    for _ in range(2):
        inner = e.sub(inner, e.div(e.sub(e.erf(inner), a), density(inner)))
    # beyond: erfinv(|x|) = -ndtri((1 - |x|) / 2) / sqrt(2), whose argument is exact there
    # (Sterbenz), ndtri's tail rational functions within 1e-16 (a Newton step on erf would
    # overshoot the steep tail; four on log erfc had taken erfinv's 1e5 values 3.9 ms, now 2.5)
    half_rest = e.mul(e.sub(one, a), e.const(0.5, x64))
    tail = e.mul(_ndtri_decompose(e, half_rest)[0], e.const(-1 / math.sqrt(2), x64))
    z = e.select(e.gt(a, e.const(0.9, x64)), tail, inner)
    z = e.select(e.eq(a, one), e.const(math.inf, x64), z)                  # +-1: +-inf
    return [_rounded_like(e, e.select(e.lt(x64, e.const(0.0, x64)), e.neg(z), z), x)]


# Cephes' ndtri (scipy's): on [exp(-2), 1 - exp(-2)] (p - 1/2) + (p - 1/2) r^2 P0(r^2)/Q0(r^2)
# times sqrt(2 pi); in the tails x = sqrt(-2 log y), y the smaller of p and 1 - p, and
# x - log(x)/x - P(z)/Q(z) z with z = 1/x, (P1, Q1) below x = 8 and (P2, Q2) from there. Highest
# power first; each Q monic.
_NDTRI_P0 = (-5.99633501014107895267e1, 9.80010754185999661536e1, -5.66762857469070293439e1,
             1.39312609387279679503e1, -1.23916583867381258016e0)
_NDTRI_Q0 = (1.0, 1.95448858338141759834e0, 4.67627912898881538453e0, 8.63602421390890590575e1,
             -2.25462687854119370527e2, 2.00260212380060660359e2, -8.20372256168333339912e1,
             1.59056225126211695515e1, -1.18331621121330003142e0)
_NDTRI_P1 = (4.05544892305962419923e0, 3.15251094599893866154e1, 5.71628192246421288162e1,
             4.40805073893200834700e1, 1.46849561928858024014e1, 2.18663306850790267539e0,
             -1.40256079171354495875e-1, -3.50424626827848203418e-2, -8.57456785154685413611e-4)
_NDTRI_Q1 = (1.0, 1.57799883256466749731e1, 4.53907635128879210584e1, 4.13172038254672030440e1,
             1.50425385692907503408e1, 2.50464946208309415979e0, -1.42182922854787788574e-1,
             -3.80806407691578277194e-2, -9.33259480895457427372e-4)
_NDTRI_P2 = (3.23774891776946035970e0, 6.91522889068984211695e0, 3.93881025292474443415e0,
             1.33303460815807542389e0, 2.01485389549179081538e-1, 1.23716634817820021358e-2,
             3.01581553508235416007e-4, 2.65806974686737550832e-6, 6.23974539184983293730e-9)
_NDTRI_Q2 = (1.0, 6.02427039364742014255e0, 3.67983563856160859403e0, 1.37702099489081330271e0,
             2.16236993594496635890e-1, 1.34204006088543189037e-2, 3.28014464682127739104e-4,
             2.89247864745380683936e-6, 6.79019408009981274425e-9)
_EXP_M2 = 0.13533528323661269189   # exp(-2)


def _ndtri_decompose(e, p):
    p64 = _as_float64(e, p)
    zero, one = e.const(0.0, p64), e.const(1.0, p64)
    upper = e.gt(p64, e.const(1 - _EXP_M2, p64))
    y = e.select(upper, e.sub(one, p64), p64)           # exact: p > 1/2 there
    r = e.sub(y, e.const(0.5, p64))
    r2 = e.mul(r, r)
    centre = e.mul(e.add(r, e.mul(r, e.div(e.mul(r2, _poly(e, r2, _NDTRI_P0)), _poly(e, r2, _NDTRI_Q0)))),
                   e.const(math.sqrt(2 * math.pi), p64))
    x = e.sqrt(e.mul(e.const(-2.0, p64), e.log(y)))
    z = e.div(one, x)
    ratio = e.select(e.lt(x, e.const(8.0, p64)), e.div(_poly(e, z, _NDTRI_P1), _poly(e, z, _NDTRI_Q1)),
                     e.div(_poly(e, z, _NDTRI_P2), _poly(e, z, _NDTRI_Q2)))
    tail = e.sub(e.sub(x, e.div(e.log(x), x)), e.mul(z, ratio))
    tail = e.select(upper, tail, e.neg(tail))
    out = e.select(e.gt(y, e.const(_EXP_M2, p64)), centre, tail)
    inf = e.const(math.inf, p64)
    out = e.select(e.eq(p64, zero), e.neg(inf), e.select(e.eq(p64, one), inf, out))
    outside = e.logical_or(e.lt(p64, zero), e.gt(p64, one))
    return [_rounded_like(e, e.select(outside, e.const(math.nan, p64), out), p)]


# log_ndtr as scipy's: log1p(-ndtr(-x)) above 0, log(ndtr(x)) down to -20, below it the
# asymptotic series log Phi(x) = -x^2/2 - log(-x) - log(2 pi)/2 + log(1 + sum_i (-1)^i
# (2i - 1)!! / x^(2i)), twelve terms (the thirteenth below 1e-21 there), highest power first.
_LOG_NDTR_SERIES = tuple(float((-1) ** i * math.prod(range(1, 2 * i, 2))) for i in range(12, 0, -1)) + (1.0,)


def _log_ndtr_decompose(e, x):
    x64 = _as_float64(e, x)
    # ndtr(-|x|) = erfc(|x| / sqrt(2)) / 2: ndtr(-x) above 0, ndtr(x) below (one erfc for both)
    smaller = e.mul(e.const(0.5, x64), _erfc_decompose(e, e.mul(e.abs(x64), e.const(1 / math.sqrt(2), x64)))[0])
    # above 0: log1p(-ndtr(-x)), as scipy's (log(ndtr(x)) would lose ndtr(-x)'s digits in
    # 1 - ndtr(-x), and -ndtr(-x) alone is off by ndtr(-x) / 2 relatively: 5e-10 at 6)
    upper = e.log1p(e.neg(smaller))
    middle = e.log(smaller)
    series = _poly(e, e.div(e.const(1.0, x64), e.mul(x64, x64)), _LOG_NDTR_SERIES)
    lower = e.add(e.sub(e.mul(e.const(-0.5, x64), e.mul(x64, x64)), e.log(e.neg(x64))),
                  e.sub(e.log(series), e.const(0.5 * math.log(2 * math.pi), x64)))
    y = e.select(e.gt(x64, e.const(0.0, x64)), upper,
                 e.select(e.gt(x64, e.const(-20.0, x64)), middle, lower))
    return [_rounded_like(e, y, x)]


# Cephes' Chebyshev coefficients for exp(-x) I0(x): on [0, 8] in x/2 - 2, and on (8, inf) for
# exp(-x) sqrt(x) I0(x) in 32/x - 2 (Cephes' i0.c, as NumPy's i0 uses them).
I0E_NEAR = (
    -4.41534164647933937950e-18, 3.33079451882223809783e-17, -2.43127984654795469359e-16,
    1.71539128555513303061e-15, -1.16853328779934516808e-14, 7.67618549860493561688e-14,
    -4.85644678311192946090e-13, 2.95505266312963983461e-12, -1.72682629144155570723e-11,
    9.67580903537323691224e-11, -5.18979560163526290666e-10, 2.65982372468238665035e-9,
    -1.30002500998624804212e-8, 6.04699502254191894932e-8, -2.67079385394061173391e-7,
    1.11738753912010371815e-6, -4.41673835845875056359e-6, 1.64484480707288970893e-5,
    -5.75419501008210370398e-5, 1.88502885095841655729e-4, -5.76375574538582365885e-4,
    1.63947561694133579842e-3, -4.32430999505057594430e-3, 1.05464603945949983183e-2,
    -2.37374148058994688156e-2, 4.93052842396707084878e-2, -9.49010970480476444210e-2,
    1.71620901522208775349e-1, -3.04682672343198398683e-1, 6.76795274409476084995e-1,
)
I0E_FAR = (
    -7.23318048787475395456e-18, -4.83050448594418207126e-18, 4.46562142029675999901e-17,
    3.46122286769746109310e-17, -2.82762398051658348494e-16, -3.42548561967721913462e-16,
    1.77256013305652638360e-15, 3.81168066935262242075e-15, -9.55484669882830764870e-15,
    -4.15056934728722208663e-14, 1.54008621752140982691e-14, 3.85277838274214270114e-13,
    7.18012445138366623367e-13, -1.79417853150680611778e-12, -1.32158118404477131188e-11,
    -3.14991652796324136454e-11, 1.18891471078464383424e-11, 4.94060238822496958910e-10,
    3.39623202570838634515e-9, 2.26666899049817806459e-8, 2.04891858946906374183e-7,
    2.89137052083475648297e-6, 6.88975834691682398426e-5, 3.36911647825569408990e-3,
    8.04490411014108831608e-1,
)


# Cephes' coefficients for exp(-x) I1(x) / x on [0, 8] in x/2 - 2, and for exp(-x) sqrt(x) I1(x)
# on (8, inf) in 32/x - 2 (Cephes' i1.c): the derivative of i0.
I1E_NEAR = (
    2.77791411276104639959e-18, -2.11142121435816608115e-17, 1.55363195773620046921e-16,
    -1.10559694773538630805e-15, 7.60068429473540693410e-15, -5.04218550472791168711e-14,
    3.22379336594557470981e-13, -1.98397439776494371520e-12, 1.17361862988909016308e-11,
    -6.66348972350202774223e-11, 3.62559028155211703701e-10, -1.88724975172282928790e-9,
    9.38153738649577178388e-9, -4.44505912879632808065e-8, 2.00329475355213526229e-7,
    -8.56872026469545474066e-7, 3.47025130813767847674e-6, -1.32731636560394358279e-5,
    4.78156510755005422638e-5, -1.61760815825896745588e-4, 5.12285956168575772895e-4,
    -1.51357245063125314899e-3, 4.15642294431288815669e-3, -1.05640848946261981558e-2,
    2.47264490306265168283e-2, -5.29459812080949914269e-2, 1.02643658689847095384e-1,
    -1.76416518357834055153e-1, 2.52587186443633654823e-1,
)
I1E_FAR = (
    7.51729631084210481353e-18, 4.41434832307170791151e-18, -4.65030536848935832153e-17,
    -3.20952592199342395980e-17, 2.96262899764595013876e-16, 3.30820231092092828324e-16,
    -1.88035477551078244854e-15, -3.81440307243700780478e-15, 1.04202769841288027642e-14,
    4.27244001671195135429e-14, -2.10154184277266431302e-14, -4.08355111109219731823e-13,
    -7.19855177624590851209e-13, 2.03562854414708950722e-12, 1.41258074366137813316e-11,
    3.25260358301548823856e-11, -1.89749581235054123450e-11, -5.58974346219658380687e-10,
    -3.83538038596423702205e-9, -2.63146884688951950684e-8, -2.51223623787020892529e-7,
    -3.88256480887769039346e-6, -1.10588938762623716291e-4, -9.76109749136146840777e-3,
    7.78576235018280120474e-1,
)


def _chebyshev(e: Any, t: Any, coefficients: Sequence[float]) -> Any:
    """Cephes' ``chbevl``: the Chebyshev series of these coefficients (highest first) at ``t``
    in [-2, 2], by Clenshaw's recurrence in its order of operations (scipy's bits)."""
    b0, b1, b2 = e.const(coefficients[0], t), e.const(0.0, t), e.const(0.0, t)
    for c in coefficients[1:]:
        b2, b1 = b1, b0
        b0 = e.add(e.sub(e.mul(t, b1), b2), e.const(c, t))
    return e.mul(e.const(0.5, t), e.sub(b0, b2))


def _split_at_8(e: Any, x: Any) -> tuple[Any, Any, Any, Any, Any]:
    """x in float64, |x|, whether |x| <= 8, and |x| where so (else 0) and where not (else 8): a
    Bessel function's near and far forms each on arguments where it is finite (the other
    branch's select)."""
    x64 = _as_float64(e, x)
    z = e.abs(x64)
    small = e.le(z, e.const(8.0, x64))
    return x64, z, small, e.select(small, z, e.const(0.0, x64)), e.select(small, e.const(8.0, x64), z)


def _scaled_bessel(e: Any, x: Any, near: Sequence[float], far: Sequence[float], odd: bool) -> Any:
    # exp(-|x|) I_n(|x|): the near series on [0, 8] (times |x| for I_1), the far one divided by
    # sqrt(|x|) beyond; each on arguments where it is finite (the other branch's select).
    x64, z, small, zn, zf = _split_at_8(e, x)
    y_near = _chebyshev(e, e.sub(e.div(zn, e.const(2.0, x64)), e.const(2.0, x64)), near)
    if odd:
        y_near = e.mul(y_near, zn)
    y_far = e.div(_chebyshev(e, e.sub(e.div(e.const(32.0, x64), zf), e.const(2.0, x64)), far), e.sqrt(zf))
    y = e.select(small, y_near, y_far)
    if odd:
        y = e.select(e.lt(x64, e.const(0.0, x64)), e.neg(y), y)
    return _rounded_like(e, y, x)


def _i0e_decompose(e, x):
    return [_scaled_bessel(e, x, I0E_NEAR, I0E_FAR, odd=False)]


def _i1e_decompose(e, x):
    return [_scaled_bessel(e, x, I1E_NEAR, I1E_FAR, odd=True)]


# J_0, J_1, Y_0 and Y_1 (scipy's j0, j1, y0, y1): Chebyshev series fitted to mpmath's functions
# (tests/scipy/test_bessel_tables.py computes them again), highest first for ``_chebyshev``.
# On [2, 8] (a power series below 2), in s = x^2 (16 t = s - 32, t in [-2, 2]): J_n = x^n (x -
# j1)(x + j1)(x - j2)(x + j2)(s - j3^2) Jn_NEAR(s), j1 < j2 < j3 its first three zeros (each a
# float64 and the rest of it, Jn_ZEROS): x - j1 exact near j1, so J keeps its relative accuracy
# at its zeros (scipy's Cephes does not: it subtracts x^2), and the third zero flattens the
# series' range, whose rounding is of its largest terms. Y_0 = 2/pi log(x) J_0 + Y0_NEAR(s), Y_1
# = 2/pi (log(x) J_1 - 1/x) + x Y1_NEAR(s), each near series an entire function of s. From 8 on,
# Hankel's form: with chi = x - (2n + 1) pi / 4, J_n = sqrt(2 / (pi x)) (P_n cos chi - Q_n sin
# chi), Y_n = sqrt(2 / (pi x)) (P_n sin chi + Q_n cos chi), P_n and x Q_n / 8 series in 256 /
# x^2 - 2. On [0, 8] J within 4.5e-16 of the truth, 1 ulp at the median and at its zeros
# (scipy's 3.3e-16, and 1e15 ulps at the zeros), Y within 1e-15 where |Y| <= 1 and relatively
# beyond (scipy's 1.2e-15; near Y's zeros, as scipy's, the accuracy is absolute); from 8 on as
# scipy's, both taking cos and sin of x - (2n + 1) pi / 4 rounded.
J0_ZEROS = ((2.404825557695773, -1.176691651530894e-16), (5.520078110286311, 8.088597146146722e-17),
            (8.653727912911013, -2.92812607320779e-16))
J1_ZEROS = ((3.8317059702075125, -1.5269184090088067e-16), (7.015586669815619, -9.414165653410389e-17),
            (10.173468135062722, 4.482162274768888e-16))
J0_NEAR = (
    -4.190889631931292e-23, 2.944153449430916e-21, -1.8254143152188351e-19, 9.903132380228728e-18,
    -4.654628053852989e-16, 1.8735723318054736e-14, -6.370558956177209e-13, 1.799863023385093e-11,
    -4.140375614344942e-10, 7.558465121356463e-09, -1.0588155950196776e-07, 1.086700486952261e-06,
    -7.631650837510544e-06, 3.275539238265576e-05, -6.837824934687584e-05,
)
J1_NEAR = (
    8.49851937094241e-23, -5.585912398144852e-21, 3.2237947605492447e-19, -1.618220820699693e-17,
    6.987055292740725e-16, -2.561199020659572e-14, 7.845621917440618e-13, -1.9697009660487488e-11,
    3.9542097799456666e-10, -6.145000881067649e-09, 7.067369727478163e-08, -5.623691032268321e-07,
    2.762287685049543e-06, -6.56677731440147e-06,
)
Y0_NEAR = (
    3.9032584173475982e-19, -2.6977881152566837e-17, 1.6434898714919468e-15, -8.747341203310769e-14,
    4.02633081830612e-12, -1.5837552541812015e-10, 5.248794787330516e-09, -1.44072332740187e-07,
    3.206532537654801e-06, -5.632079141056987e-05, 0.0007531135932577742, -0.007287962479552079,
    0.04719668959576339, -0.17730201278114358, 0.26156734625504663, 0.17903431407718265, -0.2744743055297453,
    -0.06629222640656988,
)
Y1_NEAR = (
    1.1198518333682237e-20, -8.224911372021585e-19, 5.34668038572867e-17, -3.0511859694473254e-15,
    1.51429151205002e-13, -6.4651518414115946e-12, 2.344337905911516e-10, -7.11055004989928e-09,
    1.7707804556154404e-07, -3.53808001868935e-06, 5.505982873338744e-05, -0.0006414551451326356,
    0.005289897544167113, -0.028328123944594365, 0.08445197259652346, -0.09591204536083074,
    -0.01608717304766875, 0.005076026471483563,
)
P0_FAR = (
    5.468082783259038e-19, -2.880866169482871e-18, 1.6305919233744186e-17, -1.0011513723467786e-16,
    6.748072215733873e-16, -5.069034095935236e-15, 4.3265957431549404e-14, -4.3045788699253914e-13,
    5.168262387349193e-12, -7.86409137723707e-11, 1.6306464635151382e-09, -5.1705945376060975e-08,
    3.0751847875194745e-06, -0.0005365220468132117, 1.9989206986950374,
)
Q0_FAR = (
    6.843227394638251e-21, -2.9211627152642775e-20, 1.3091448717220122e-19, -6.191115787358145e-19,
    3.1082440486738143e-18, -1.6686065214378146e-17, 9.662128970303257e-17, -6.09993013164005e-16,
    4.255225040245461e-15, -3.336328185322427e-14, 3.006145125351706e-13, -3.206747420996635e-12,
    4.2201219046687385e-11, -7.27191593686632e-10, 1.7972457247968992e-08, -7.414498411060647e-07,
    6.838519942611649e-05, -0.031111709210674018,
)
P1_FAR = (
    -5.772421654987453e-19, 3.0492991197665872e-18, -1.7312313216116335e-17, 1.0667689114335412e-16,
    -7.221180842274018e-16, 5.452674896044717e-15, -4.6842237839904895e-14, 4.699195515230542e-13,
    -5.704863640395645e-12, 8.816898659582339e-11, -1.8718907491063067e-09, 6.177633960644299e-08,
    -3.987284300488908e-06, 0.0008989898330859408, 2.0018060817200274,
)
Q1_FAR = (
    3.0657415400328895e-20, -1.3765771484849487e-19, 6.524081149589261e-19, -3.2834519872981614e-18,
    1.767635548776479e-17, -1.0269147531823243e-16, 6.508282957783384e-16, -4.5612523950772974e-15,
    3.5967765829165294e-14, -3.2643156743279e-13, 3.5152187949686082e-12, -4.686363688176945e-11,
    8.229193327650554e-10, -2.0959781384083424e-08, 9.138615257955454e-07, -9.62772354915708e-05,
    0.09355557413907065,
)

# J_0 and J_1 / x below 2: their power series in s; 14 terms are within 1e-20 there.
_J0_TAYLOR, _J1_TAYLOR = _j_power_series(0, 14), _j_power_series(1, 14)


def _with_zeros(e: Any, z: Any, t: Any, order: int) -> Any:
    """J_n(z) / z^n on [2, 8] (``t`` = z^2 / 16 - 2): its three zeros' factors times the series."""
    (a1, b1), (a2, b2), (a3, _) = (J0_ZEROS, J1_ZEROS)[order]
    y = _chebyshev(e, t, (J0_NEAR, J1_NEAR)[order])
    for a, b in ((a1, b1), (a2, b2)):
        y = e.mul(y, e.mul(e.sub(e.sub(z, e.const(a, z)), e.const(b, z)), e.add(z, e.const(a, z))))
    return e.mul(y, e.sub(e.mul(z, z), e.const(a3 * a3, z)))


def _bessel_jy(e: Any, x: Any, kind: str, order: int) -> Any:
    x64, z, small, zn, zf = _split_at_8(e, x)
    t = e.sub(e.div(e.mul(zn, zn), e.const(16.0, x64)), e.const(2.0, x64))
    two_over_pi = e.const(2 / math.pi, x64)
    # Below 2 the power series (Clenshaw's recurrence loses up to 4 ulps near its interval's end,
    # J_0(0) 1 + 2^-52); J_1 = x J1_NEAR(s) is odd: x itself, so that -0.0 gives -0.0 as scipy's.
    series = e.select(e.lt(z, e.const(2.0, x64)), _poly(e, e.mul(zn, zn), (_J0_TAYLOR, _J1_TAYLOR)[order]),
                      _with_zeros(e, zn, t, order))
    if order == 0:
        j = series
    else:
        j = e.mul(series, e.select(small, x64, e.const(0.0, x64)) if kind == "j" else zn)
    if kind == "j":
        near = j
    elif order == 0:
        near = e.add(e.mul(two_over_pi, e.mul(e.log(zn), j)), _chebyshev(e, t, Y0_NEAR))
    else:
        near = e.add(e.mul(two_over_pi, e.sub(e.mul(e.log(zn), j), e.div(e.const(1.0, x64), zn))),
                     e.mul(zn, _chebyshev(e, t, Y1_NEAR)))
    u = e.sub(e.div(e.const(256.0, x64), e.mul(zf, zf)), e.const(2.0, x64))
    p = _chebyshev(e, u, (P0_FAR, P1_FAR)[order])
    q = e.mul(_chebyshev(e, u, (Q0_FAR, Q1_FAR)[order]), e.div(e.const(8.0, x64), zf))
    chi = e.sub(zf, e.const((2 * order + 1) * math.pi / 4, x64))
    cos, sin = e.cos(chi), e.sin(chi)
    wave = e.sub(e.mul(p, cos), e.mul(q, sin)) if kind == "j" else e.add(e.mul(p, sin), e.mul(q, cos))
    far = e.mul(e.sqrt(e.div(two_over_pi, zf)), wave)
    negative = e.lt(x64, e.const(0.0, x64))
    if kind == "j" and order == 1:
        far = e.select(negative, e.neg(far), far)
    y = e.select(small, near, far)
    if kind == "y":   # NaN below 0, as scipy's; Y_1(0) = -inf (log(0) J_1(0) is 0 * -inf)
        if order == 1:
            y = e.select(e.eq(x64, e.const(0.0, x64)), e.const(-math.inf, x64), y)
        y = e.select(negative, e.const(math.nan, x64), y)
    return _rounded_like(e, y, x)


def _gammainc_grad_a_decompose(e: Any, a: Any, x: Any) -> list[Any] | None:
    # The sums as the tracer traces them (compiled while loops, flowjit/ir/incomplete_gamma.py):
    # declined (the reference on the Python driver) where no tracer registered its builder.
    block = traced_derivative_a(a.type, x.type)
    return None if block is None else e.builder.inline(block, [a, x])


defdecompose("gammainc_grad_a", _gammainc_grad_a_decompose)
defdecompose("bessel_i0e", _i0e_decompose)
defdecompose("bessel_i1e", _i1e_decompose)
for _kind in ("j", "y"):
    for _order in (0, 1):
        defdecompose(f"bessel_{_kind}{_order}", lambda e, x, kind=_kind, order=_order: [_bessel_jy(e, x, kind, order)])
defdecompose("lgamma", _lgamma_decompose)
defdecompose("erfinv", _erfinv_decompose)
defdecompose("ndtri", _ndtri_decompose)
defdecompose("log_ndtr", _log_ndtr_decompose)
defdecompose("erfc", _erfc_decompose)
defdecompose("polygamma", _digamma_decompose)
