"""The derivatives of the regularized incomplete gamma function P(a, x) in its order ``a``, and
of a gamma sample in its shape, written once for any array namespace.

Neither has a closed form. As XLA's ``IgammaGradA`` and ``RandomGammaGrad`` (after Cephes'
``igam``), the function and its ``a``-derivative are summed together: the power series of P
where ``x <= 1`` or ``x <= a``, Legendre's continued fraction of ``Q = 1 - P`` elsewhere,
each term's derivative carried beside the term until the derivative stops changing by more
than float64's epsilon (at most ``MAX_TERMS`` terms). A gamma sample's derivative is the
implicit one (Figurnov, Mohamed and Mnih, 2018): the sample ``x`` of shape ``a`` at a fixed
quantile moves by ``dx/da = -(dP/da) / (dP/dx)``, in which the factor ``x**a e**-x / Gamma(a)``
common to both cancels, so it stays finite where that factor underflows.

The caller passes the array functions down (``ops``: NumPy's, or flowjit's traced ones from
the tracer layer) and ``loop(cond, body, state)``, which applies ``body`` while ``cond``
holds (a Python while over NumPy arrays, or a compiled while loop). Arithmetic and
comparisons are the arrays' own operators. Inputs are float64 arrays of one shape.

The tracer, a layer above, traces the sums with its own ops and while loops into a block and
hands down how (``provide_traced_derivative``): ``gammainc_grad_a``'s decomposition inlines
that block, so a program differentiating ``P`` in its order stays native.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from flowjit.ir.core import Block
from flowjit.ir.types import TensorType

MAX_TERMS = 2000
_EPS = float(np.finfo(np.float64).eps)


@dataclass(frozen=True)
class ArrayOps:
    """The elementwise and reduction functions the sums need, from one array library."""

    where: Callable[[Any, Any, Any], Any]
    log: Callable[[Any], Any]
    exp: Callable[[Any], Any]
    absolute: Callable[[Any], Any]
    any: Callable[[Any], Any]
    logical_and: Callable[[Any, Any], Any]
    logical_or: Callable[[Any, Any], Any]
    logical_not: Callable[[Any], Any]
    isnan: Callable[[Any], Any]
    digamma: Callable[[Any], Any]
    lgamma: Callable[[Any], Any]


def _unfinished(ops: ArrayOps) -> Callable[[tuple], Any]:
    """A sum's loop condition: a term budget left and an element still ``on`` (its state's
    first two entries)."""
    return lambda s: ops.logical_and(s[0] < MAX_TERMS, ops.any(s[1]))


def _series(ops: ArrayOps, loop: Callable, a: Any, x: Any, on: Any) -> tuple[Any, Any]:
    """P's power series ``sum_k x**k / ((a+1)...(a+k))`` and its a-derivative, where ``on``."""
    zero = x * 0.0
    one = zero + 1.0

    def body(s: tuple) -> tuple:
        i, on, r, c, ans, dc, dans = s
        r1 = r + 1.0
        dc1 = dc * (x / r1) - c * x / (r1 * r1)
        dans1 = dans + dc1
        c1 = c * (x / r1)
        ans1 = ans + c1
        keep = ops.logical_and(on, ops.absolute(dc1 / dans1) > _EPS)
        return (i + 1, keep, ops.where(on, r1, r), ops.where(on, c1, c), ops.where(on, ans1, ans),
                ops.where(on, dc1, dc), ops.where(on, dans1, dans))

    s = loop(_unfinished(ops), body, (np.int32(0), on, a + zero, one, one, zero, zero))
    return s[4], s[6]


def _continued_fraction(ops: ArrayOps, loop: Callable, a: Any, x: Any, on: Any) -> tuple[Any, Any]:
    """Legendre's continued fraction of ``Q / (x**a e**-x / Gamma(a))`` and its a-derivative,
    where ``on``; the convergents' numerators and denominators rescaled as they grow."""
    zero = x * 0.0
    y = 1.0 - a
    z = x + y + 1.0
    pkm1, qkm1 = x + 1.0, z * x
    ans = pkm1 / qkm1
    dqkm1 = zero - x
    dans = (zero - ans * dqkm1) / qkm1

    def body(s: tuple) -> tuple:
        i, on, c, y, z, pkm2, qkm2, pkm1, qkm1, dpkm2, dqkm2, dpkm1, dqkm1, ans, dans = s
        c1, y1, z1 = c + 1.0, y + 1.0, z + 2.0
        yc = y1 * c1
        pk = pkm1 * z1 - pkm2 * yc
        qk = qkm1 * z1 - qkm2 * yc
        nonzero = qk != 0.0
        safe_qk = ops.where(nonzero, qk, 1.0)
        ans1 = ops.where(nonzero, pk / safe_qk, ans)
        dpk = dpkm1 * z1 - pkm1 - dpkm2 * yc + pkm2 * c1
        dqk = dqkm1 * z1 - qkm1 - dqkm2 * yc + qkm2 * c1
        dans1 = ops.where(nonzero, (dpk - ans1 * dqk) / safe_qk, dans)
        moved = ops.where(nonzero, ops.absolute(dans1 - dans), 1.0)
        scale = ops.where(ops.absolute(pk) > 1.0 / _EPS, _EPS, 1.0)
        new = (c1, y1, z1, pkm1 * scale, qkm1 * scale, pk * scale, qk * scale, dpkm1 * scale, dqkm1 * scale,
               dpk * scale, dqk * scale, ans1, dans1)
        old = (c, y, z, pkm2, qkm2, pkm1, qkm1, dpkm2, dqkm2, dpkm1, dqkm1, ans, dans)
        keep = ops.logical_and(on, moved > _EPS)
        return (i + 1, keep, *(ops.where(on, n, o) for n, o in zip(new, old)))

    s = loop(_unfinished(ops), body, (np.int32(0), on, zero, y, z, zero + 1.0, x + zero, pkm1, qkm1, zero, zero,
                                      zero, dqkm1, ans, dans))
    return s[13], s[14]


def _derivative(ops: ArrayOps, loop: Callable, a: Any, x: Any, sample: bool) -> Any:
    nan = ops.logical_or(ops.isnan(a), ops.isnan(x))
    at_zero = x == 0.0
    domain = ops.logical_or(x < 0.0, a <= 0.0)
    off = ops.logical_or(ops.logical_or(nan, at_zero), domain)
    by_fraction = ops.logical_and(x > 1.0, x > a)
    # Inputs the sums do not take get values they converge on at once, then their own result.
    safe_x = ops.where(off, 1.0, x)
    safe_a = ops.where(off, 1.0, a)
    log_x = ops.log(safe_x)
    s_ans, s_dans = _series(ops, loop, safe_a, safe_x, ops.logical_not(ops.logical_or(off, by_fraction)))
    f_ans, f_dans = _continued_fraction(ops, loop, safe_a, safe_x, ops.logical_and(ops.logical_not(off), by_fraction))
    s_inner = s_dans + s_ans * (log_x - ops.digamma(safe_a + 1.0))
    f_inner = f_dans + f_ans * (log_x - ops.digamma(safe_a))
    if sample:
        out = ops.where(by_fraction, f_inner * safe_x, (0.0 - s_inner) * safe_x / safe_a)
    else:
        ax = ops.exp(safe_a * log_x - safe_x - ops.lgamma(safe_a))
        out = ops.where(by_fraction, (0.0 - ax) * f_inner, ax * s_inner / safe_a)
    out = ops.where(at_zero, 0.0, out)
    return ops.where(ops.logical_or(nan, domain), np.nan, out)


def gammainc_derivative_a(ops: ArrayOps, loop: Callable, a: Any, x: Any) -> Any:
    """``dP(a, x) / da`` elementwise (``-dQ/da``): 0 at ``x = 0``, NaN outside ``a > 0``,
    ``x >= 0``."""
    return _derivative(ops, loop, a, x, sample=False)


def gamma_sample_derivative(ops: ArrayOps, loop: Callable, a: Any, x: Any) -> Any:
    """``dx / da`` of a gamma sample ``x`` of shape ``a`` (scale 1) at its fixed quantile
    ``P(a, x)``: 0 at ``x = 0`` (a sample that underflowed), NaN outside ``a > 0``."""
    return _derivative(ops, loop, a, x, sample=True)


def python_loop(cond: Callable[[Any], Any], body: Callable[[Any], Any], state: Any) -> Any:
    """``loop`` for NumPy arrays: ``body`` applied while ``cond`` holds."""
    while cond(state):
        state = body(state)
    return state


# The tracer's builder of ``gammainc_grad_a``'s block (``provide_traced_derivative``): None
# until the tracer is imported, and then the op has no decomposition (the reference runs it).
_traced_derivative: Callable[[TensorType, TensorType], Block] | None = None


def provide_traced_derivative(build: Callable[[TensorType, TensorType], Block]) -> None:
    """Register ``build(a_type, x_type)``: a block of two arguments (``a``, ``x``) returning
    ``dP(a, x)/da`` broadcast and in ``x``'s dtype, the sums traced as compiled while loops
    (the tracer passes it down; this layer cannot trace)."""
    global _traced_derivative
    _traced_derivative = build


def traced_derivative_a(a: TensorType, x: TensorType) -> Block | None:
    """The block ``provide_traced_derivative`` registered builds for ``a`` and ``x``, or None
    where none is registered."""
    return None if _traced_derivative is None else _traced_derivative(a, x)
