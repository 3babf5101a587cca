"""``flowjit.scipy.integrate.odeint``: an adaptive ODE solver that traces, compiles and
differentiates, as ``jax.experimental.ode.odeint`` and ``autograd.scipy.integrate.odeint``.

The solution is an explicit Runge-Kutta method (Dormand-Prince 5(4), error per step against
``atol + rtol * |y|``): a ``fj.scan`` over the output intervals whose body is one
``fj.while_loop`` of steps, stepping onto each output time instead of interpolating. A loop
with a data-dependent trip count has no reverse-mode derivative of its own, so ``odeint`` is
a ``fj.custom_vjp`` whose backward pass is the adjoint method: the adjoint state and the
parameters' cotangents are integrated backwards in time by ``odeint`` itself, so second
derivatives run the adjoint of the adjoint.
"""
from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from flowjit.ir.errors import ShapeError
from flowjit.tracer import pytree
from flowjit.tracer.autodiff import vjp
from flowjit.tracer.control_flow import scan, while_loop
from flowjit.tracer.core import user_location
from flowjit.tracer.custom_gradients import custom_vjp
from flowjit.tracer.numpy import namespace as fnp
from flowjit.tracer.numpy.operands import ArrayLike
from flowjit.tracer.numpy.operands import as_operand as _op
from flowjit.tracer.numpy.operands import float_dtype as _float_dtype

__all__ = ["odeint"]

# Dormand-Prince 5(4): nodes, stages, the 5th-order weights (also the last stage: first same as
# last) and the 5th minus 4th order weights, the local error estimate.
_C = (0.0, 1 / 5, 3 / 10, 4 / 5, 8 / 9, 1.0, 1.0)
_A = (
    (),
    (1 / 5,),
    (3 / 40, 9 / 40),
    (44 / 45, -56 / 15, 32 / 9),
    (19372 / 6561, -25360 / 2187, 64448 / 6561, -212 / 729),
    (9017 / 3168, -355 / 33, 46732 / 5247, 49 / 176, -5103 / 18656),
    (35 / 384, 0.0, 500 / 1113, 125 / 192, -2187 / 6784, 11 / 84),
)
_B5 = (35 / 384, 0.0, 500 / 1113, 125 / 192, -2187 / 6784, 11 / 84, 0.0)
_B4 = (5179 / 57600, 0.0, 7571 / 16695, 393 / 640, -92097 / 339200, 187 / 2100, 1 / 40)
_E = tuple(b5 - b4 for b5, b4 in zip(_B5, _B4))


# The state is a pytree of arrays (the adjoint system's is (y, adjoint, parameter cotangents)):
# each step works leaf by leaf. Packing the leaves into one vector and slicing them out again
# would give kernels that read slices of concatenations in each of a step's seven stages, and
# fusion recomputes such reads instead of sharing them.
def _tmap(fn: Callable[..., Any], *trees: Any) -> Any:
    return pytree.tree_map(fn, *trees)


def _combine(y: Any, dt: Any, weights: tuple[float, ...], ks: list[Any]) -> Any:
    acc = y
    for w, k in zip(weights, ks):
        if w != 0.0:
            acc = _tmap(lambda a, k, w=w: a + (dt * w) * k, acc, k)
    return acc


def _step(fun: Callable[[Any, Any], Any], y: Any, f0: Any, t: Any, dt: Any) -> tuple[Any, Any, Any]:
    """One Dormand-Prince step from (t, y) with f0 = fun(y, t): (y1, fun(y1, t + dt), error)."""
    ks = [f0]
    for c, a in zip(_C[1:], _A[1:]):
        ks.append(fun(_combine(y, dt, a, ks), t + c * dt))
    y1 = _combine(y, dt, _A[6], ks[:6])
    err = _combine(_tmap(fnp.zeros_like, y), dt, _E, ks)
    return y1, ks[6], err


def _rms(tree: Any) -> Any:
    """The root mean square of every element of every leaf."""
    leaves = pytree.flatten(tree)[0]
    total = sum(fnp.sum(x * x) for x in leaves)
    return fnp.sqrt(total / max(1, sum(int(np.prod(fnp.shape(x))) for x in leaves)))


def _first_step(fun: Callable[[Any, Any], Any], y0: Any, t0: Any, f0: Any, rtol: float, atol: float) -> Any:
    """Hairer, Norsett and Wanner's starting step: small enough that an Euler step's change of
    the slope stays within the tolerance (Solving ODEs I, II.4)."""
    scale = _tmap(lambda y: atol + fnp.abs(y) * rtol, y0)
    d0, d1 = _rms(_tmap(fnp.divide, y0, scale)), _rms(_tmap(fnp.divide, f0, scale))
    h0 = fnp.where(fnp.logical_or(d0 < 1e-5, d1 < 1e-5), fnp.full_like(d0, 1e-6), 0.01 * d0 / fnp.maximum(d1, 1e-300))
    f1 = fun(_tmap(lambda y, f: y + h0 * f, y0, f0), t0 + h0)
    d2 = _rms(_tmap(lambda a, b, s: (a - b) / s, f1, f0, scale)) / h0
    big = fnp.maximum(d1, d2)
    h1 = fnp.where(big <= 1e-15, fnp.maximum(fnp.full_like(h0, 1e-6), h0 * 1e-3),
                   (0.01 / fnp.maximum(big, 1e-300)) ** 0.2)
    return fnp.minimum(100 * h0, h1)


def _solve(fun: Callable[[Any, Any], Any], y0: Any, ts: Any, rtol: float, atol: float, mxstep: float,
           hmax: float) -> Any:
    """y at each of the increasing times ``ts`` for y' = fun(y, t), y(ts[0]) = y0 (a pytree; each
    leaf of the result gets a leading axis of length T): a scan over the output intervals whose
    body is one while_loop of steps, the last ending exactly on the interval's output time (one
    loop body to compile, whatever T)."""
    f0 = fun(y0, ts[0])
    first = _tmap(lambda y: fnp.expand_dims(y, 0), y0)
    if ts.shape[0] == 1:
        return first
    dt = _first_step(fun, y0, ts[0], f0, rtol, atol)

    def interval(carry: tuple, end: Any) -> tuple:
        def cond(state: tuple) -> Any:
            _, _, t, dt, n = state
            go = fnp.logical_and(t < end, dt > 0)
            return fnp.logical_and(go, n < mxstep) if math.isfinite(mxstep) else go

        def body(state: tuple) -> tuple:
            y, f, t, dt, n = state
            h = fnp.minimum(fnp.minimum(dt, end - t), hmax)
            last = h >= end - t
            y1, f1, err = _step(fun, y, f, t, h)
            ratio = _rms(_tmap(lambda e, a, b: e / (atol + rtol * fnp.maximum(fnp.abs(a), fnp.abs(b))), err, y, y1))
            ok = ratio <= 1
            # Grow by 0.9 ratio^(-1/5) within [0.2, 10]; never grow after a rejection.
            factor = fnp.clip(0.9 * fnp.maximum(ratio, 1e-10) ** -0.2, 0.2, 10.0)
            factor = fnp.where(ok, factor, fnp.minimum(factor, 1.0))
            t1 = fnp.where(last, end, t + h)
            keep = functools.partial(fnp.where, ok)
            return (_tmap(keep, y1, y), _tmap(keep, f1, f), keep(t1, t),
                    fnp.where(fnp.logical_and(ok, last), dt, h * factor), n + 1)

        y, f, t, dt, _ = while_loop(cond, body, (*carry, fnp.asarray(0)))
        return (y, f, t, dt), y

    _, ys = scan(interval, (y0, f0, ts[0], dt), ts[1:])
    return _tmap(lambda a, b: fnp.concatenate([a, b]), first, ys)


def _solution(func: Callable[..., Any], rtol: float, atol: float, mxstep: float, hmax: float, y0: Any, t: Any,
              *args: Any) -> Any:
    return _solve(lambda y, s: func(y, s, *args), y0, t, rtol, atol, mxstep, hmax)


# Reverse-mode derivatives to this order: a custom_vjp's backward pass is traced when its
# function is called, so each level of adjoint is traced (and compiled) with every call.
MAX_ORDER = 2


@functools.cache
def _odeint_at(level: int) -> Any:
    """The solver with the adjoint method as its derivative; the adjoint solve in its backward
    pass is the solver of the next level, a distinct custom_vjp (a rule that calls its own
    function gets the primal, undifferentiable here: a while_loop), so the backward pass
    differentiates again by the adjoint method, up to ``MAX_ORDER``; past it the solver is
    the bare loop, whose reverse-mode derivative is refused (a while_loop without a bound)."""
    if level >= MAX_ORDER:
        return _solution
    solver = custom_vjp(_solution, nondiff_argnums=(0, 1, 2, 3, 4))

    def fwd(func: Callable[..., Any], rtol: float, atol: float, mxstep: float, hmax: float, y0: Any, t: Any,
            *args: Any) -> tuple[Any, tuple]:
        # The saved solution comes from the next level, so the backward pass, which reads it,
        # differentiates through it by that level's adjoint (a rule's call of its own
        # function is the bare loop).
        ys = _odeint_at(level + 1)(func, rtol, atol, mxstep, hmax, y0, t, *args)
        return ys, (ys, t, args)

    def bwd(func: Callable[..., Any], rtol: float, atol: float, mxstep: float, hmax: float, res: tuple,
            g: Any) -> tuple:
        return _adjoint(_odeint_at(level + 1), func, (rtol, atol, mxstep, hmax), res, g)

    return solver.defvjp(fwd, bwd)


def _adjoint(solver: Any, func: Callable[..., Any], options: tuple, res: tuple, g: Any) -> tuple:
    """The cotangents of (y0, t, *args) for the cotangent ``g`` of the solution ``ys``: the
    adjoint a = dL/dy integrated back from each output time to the one before (a reverse scan
    over the intervals)."""
    ys, t, args = res
    n = t.shape[0]
    args_bar = _tmap(fnp.zeros_like, args)
    if n == 1:
        return (_tmap(lambda x: x[0], g), fnp.zeros_like(t), *args_bar)

    # Backwards in time as forwards in s = -t: y' = -f, a' = a df/dy, args_bar' = a df/dargs.
    def aug(state: tuple, s: Any, *args: Any) -> tuple:
        y, adj, _ = state
        ydot, pull = vjp(lambda y, *p: func(y, -s, *p), y, *args)
        cts = pull(adj)
        return (_tmap(fnp.negative, ydot), cts[0], tuple(cts[1:]))

    def interval(carry: tuple, x: tuple) -> tuple:
        a, args_bar = carry
        y_i, t_i, t_before, g_i, g_before = x
        # Moving output time t[i] moves ys[i] along the trajectory, by func(ys[i], t[i]);
        # the later outputs stay (the trajectory does not depend on where it is sampled).
        t_bar = _dot(func(y_i, t_i, *args), g_i)
        states = solver(aug, *options, (y_i, a, args_bar), fnp.stack([-t_i, -t_before]), *args)
        _, a, args_bar = _tmap(lambda x: x[1], states)
        return (_tmap(fnp.add, a, g_before), args_bar), t_bar

    xs = (_tmap(lambda x: x[1:], ys), t[1:], t[:-1], _tmap(lambda x: x[1:], g), _tmap(lambda x: x[:-1], g))
    (a, args_bar), ts_bar = scan(interval, (_tmap(lambda x: x[n - 1], g), args_bar), xs, reverse=True)
    # Moving t[0] moves the solution after it by -func(y0, t0); ys[0] = y0 itself does not move.
    y0, g0 = _tmap(lambda x: x[0], ys), _tmap(lambda x: x[0], g)
    t0_bar = -_dot(func(y0, t[0], *args), _tmap(fnp.subtract, a, g0))
    return (a, fnp.concatenate([fnp.reshape(t0_bar, (1,)), ts_bar]), *args_bar)


def _dot(a: Any, b: Any) -> Any:
    """The sum of the elementwise products of two pytrees of one structure."""
    return sum(fnp.sum(x * y) for x, y in zip(pytree.flatten(a)[0], pytree.flatten(b)[0]))


def odeint(func: Callable[..., Any], y0: Any, t: ArrayLike, *args: Any, rtol: float = 1.4e-8,
           atol: float = 1.4e-8, mxstep: float = math.inf, hmax: float = math.inf) -> Any:
    """The solution of ``dy/dt = func(y, t, *args)``, ``y(t[0]) = y0``, at the increasing times
    ``t``, as ``jax.experimental.ode.odeint``: ``y0`` is an array or a pytree of them, and each
    leaf of the result has a leading axis of length ``len(t)``. Adaptive Dormand-Prince steps
    within ``rtol``/``atol``, at most ``mxstep`` steps per output interval, none longer than
    ``hmax``. Differentiable in reverse mode to second order by the adjoint method (the
    adjoint integrated by ``odeint`` itself) in ``y0``, ``t`` and ``args`` (arrays or pytrees
    of them); values that ``func`` closes over are constants to the derivative: pass them in
    ``args``. ``fj.vmap`` batches it; forward mode (``fj.jvp``) raises, as JAX's does (the
    adjoint is a reverse-mode rule)."""
    t = fnp.asarray(t)
    leaves = pytree.flatten(y0)[0]
    if not leaves:
        raise ShapeError(f"odeint: y0 has no arrays (at {user_location()})")
    d = _float_dtype(_op(fnp.asarray(leaves[0]), "y0").dtype)
    y0 = _tmap(lambda x: fnp.astype(fnp.asarray(x), d), y0)
    t = fnp.astype(t, d)
    if t.ndim != 1 or t.shape[0] < 1:
        raise ShapeError(f"odeint: t must be a 1-d array of output times, got shape {tuple(t.shape)} "
                         f"(at {user_location()})")
    args = _tmap(lambda x: fnp.astype(fnp.asarray(x), d), args)
    return _odeint_at(0)(func, float(rtol), float(atol), float(mxstep), float(hmax), y0, t, *args)
