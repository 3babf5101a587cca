"""``fj.random``: stateless, counter-based random numbers from explicit keys, as in JAX.

A key is an int32 array of shape (2,). The same key always gives the same numbers, so
split a key (``split``) to get independent streams instead of reusing it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from flowjit.ir.dtypes import dtype as as_dtype
from flowjit.ir.dtypes import float32, float64, int32, uint32
from flowjit.ir.errors import FlowjitTypeError
from flowjit.ir.primitives.random import key_from_seed
from flowjit.tracer import linalg
from flowjit.tracer.control_flow import scan, while_loop
from flowjit.tracer.core import Tracer, bind, current_trace
from flowjit.tracer.custom_gradients import custom_vjp, stop_gradient
from flowjit.tracer.incomplete_gamma import lgamma as _lgamma
from flowjit.tracer.incomplete_gamma import sample_shape_derivative as _shape_derivative
from flowjit.tracer.numpy import (
    conversion,
    creation,
    indexing,
    layout,
    manipulation,
    matrices,
    products,
    reductions,
    sorting_searching,
    ufuncs,
)


def key(seed: int) -> np.ndarray:
    """A new key from an integer seed (a concrete Python or NumPy int)."""
    if isinstance(seed, Tracer):
        raise FlowjitTypeError("fj.random.key needs a concrete int seed; pass keys, not seeds, into "
                               "traced functions")
    return key_from_seed(int(seed))


PRNGKey = key


def _check_key(k: Any) -> Any:
    shape = layout.shape(k)
    if shape != (2,):
        raise FlowjitTypeError(f"a random key must have shape (2,), got {list(shape)}; make one with "
                               "fj.random.key(seed)")
    return conversion.astype(k, int32)


def split(k: Any, num: int = 2) -> Any:
    """``num`` new independent keys, as an array of shape (num, 2)."""
    return bind("random_split", [_check_key(k)], {"num": int(num)})


def _float_dtype(dtype: Any, what: str) -> Any:
    d = as_dtype(dtype)
    if not d.is_float:
        raise FlowjitTypeError(f"{what}: dtype must be a float dtype, got {d}")
    return d


def _shape(shape: Any) -> tuple[int, ...]:
    return (int(shape),) if isinstance(shape, int) else tuple(int(s) for s in shape)


def _draw_shape(shape: Any, *params: Any) -> tuple[int, ...]:
    """A draw's shape: ``shape`` where given, else its parameters' shapes broadcast."""
    if shape is not None:
        return _shape(shape)
    return tuple(np.broadcast_shapes(*(layout.shape(conversion.asarray(v)) for v in params)))


def uniform(k: Any, shape: Any = (), dtype: Any = float32, minval: Any = 0.0, maxval: Any = 1.0) -> Any:
    """Uniform floats in [minval, maxval)."""
    d = _float_dtype(dtype, "uniform")
    u = bind("random_uniform", [_check_key(k)], {"shape": _shape(shape), "dtype": d})
    if isinstance(minval, (int, float)) and isinstance(maxval, (int, float)) and (minval, maxval) == (0, 1):
        return u
    # In the draw's dtype, as jax.random.uniform computes it (bounds as arrays of it: a
    # float64 bound would make eager and traced code round the product differently), and
    # never below minval where rounding would put it.
    lo, hi = conversion.astype(minval, d), conversion.astype(maxval, d)
    return ufuncs.maximum(lo, ufuncs.add(ufuncs.multiply(u, ufuncs.subtract(hi, lo)), lo))


def normal(k: Any, shape: Any = (), dtype: Any = float32) -> Any:
    """Standard normal floats."""
    d = _float_dtype(dtype, "normal")
    return bind("random_normal", [_check_key(k)], {"shape": _shape(shape), "dtype": d})


def bernoulli(k: Any, p: Any = 0.5, shape: Any = None) -> Any:
    """Booleans that are true with probability ``p`` (broadcast to ``shape``)."""
    shp = layout.shape(p) if shape is None else _shape(shape)
    return ufuncs.less(uniform(k, shp, float32), p)


def gumbel(k: Any, shape: Any = (), dtype: Any = float32) -> Any:
    """Standard Gumbel floats, ``-log(-log(u))`` of uniforms in [tiny, 1) (never infinite)."""
    d = _float_dtype(dtype, "gumbel")
    u = uniform(k, shape, d, minval=float(np.finfo(d.np).tiny), maxval=1.0)
    return ufuncs.negative(ufuncs.log(ufuncs.negative(ufuncs.log(u))))


def categorical(k: Any, logits: Any, axis: int = -1, shape: Any = None) -> Any:
    """Indices drawn along ``axis`` with probabilities ``softmax(logits)`` (unnormalized log
    probabilities; -inf: never), by the Gumbel-max trick, as ``jax.random.categorical``:
    int32 of ``logits``' shape without ``axis``, or of ``shape``, to which that batch shape
    broadcasts (several draws per row: ``logits[:, None, :]`` with shape ``(rows, n)``)."""
    lg = conversion.asarray(logits)
    nd = len(layout.shape(lg))
    ax = axis % nd if nd else 0
    lg = layout.moveaxis(lg, ax, -1)
    batch = tuple(layout.shape(lg)[:-1])
    out = batch if shape is None else _shape(shape)
    try:
        fits = tuple(np.broadcast_shapes(batch, out)) == out
    except ValueError:
        fits = False
    if not fits:
        raise FlowjitTypeError(f"categorical: shape {list(out)} does not take the logits' batch shape {list(batch)} "
                               f"(the logits without axis {axis}); it must broadcast to it")
    d = lg.dtype if as_dtype(lg.dtype).is_float else float32
    noise = gumbel(k, (*out, layout.shape(lg)[-1]), d)
    return conversion.astype(reductions.argmax(ufuncs.add(noise, lg), axis=-1), int32)


def randint(k: Any, shape: Any, minval: int, maxval: int, dtype: Any = int32) -> Any:
    """Uniform integers in [minval, maxval)."""
    u = uniform(k, shape, float64)
    span = ufuncs.subtract(maxval, minval)
    r = ufuncs.add(ufuncs.floor(ufuncs.multiply(u, span)), minval)
    return conversion.astype(ufuncs.minimum(r, ufuncs.subtract(maxval, 1)), dtype)


def fold_in(k: Any, data: Any) -> Any:
    """A new key from ``k`` and an integer ``data`` (a step number, a worker's index; traced
    or not): the same pair always gives the same key, different data independent ones
    (``jax.random.fold_in``). Data is taken modulo 2**32."""
    d = conversion.asarray(data)
    if not as_dtype(d.dtype).is_int and as_dtype(d.dtype).name != "bool":
        raise FlowjitTypeError(f"fold_in: data must be an integer, got {d.dtype}")
    if layout.shape(d) != ():
        raise FlowjitTypeError(f"fold_in: data must be one integer, got shape {list(layout.shape(d))}")
    if isinstance(data, (int, np.integer)):
        d = np.asarray(np.uint32(int(data) % 2**32).view(np.int32))
    return bind("random_fold_in", [_check_key(k), conversion.astype(d, int32)], {})


def _tiny(d: Any) -> float:
    return float(np.finfo(d.np).tiny)


def exponential(k: Any, shape: Any = (), dtype: Any = float32) -> Any:
    """Standard exponential floats, ``-log1p(-u)`` of uniforms in [0, 1)."""
    d = _float_dtype(dtype, "exponential")
    return ufuncs.negative(ufuncs.log1p(ufuncs.negative(uniform(k, shape, d))))


def laplace(k: Any, shape: Any = (), dtype: Any = float32) -> Any:
    """Standard Laplace floats (density ``exp(-|x|) / 2``), from uniforms in (-1, 1)."""
    d = _float_dtype(dtype, "laplace")
    u = uniform(k, shape, d, minval=float(np.nextafter(d.np.type(-1), d.np.type(0))), maxval=1.0)
    return ufuncs.multiply(ufuncs.negative(ufuncs.sign(u)), ufuncs.log1p(ufuncs.negative(ufuncs.absolute(u))))


def logistic(k: Any, shape: Any = (), dtype: Any = float32) -> Any:
    """Standard logistic floats, ``log(u / (1 - u))`` of uniforms in [tiny, 1)."""
    d = _float_dtype(dtype, "logistic")
    u = uniform(k, shape, d, minval=_tiny(d), maxval=1.0)
    return ufuncs.subtract(ufuncs.log(u), ufuncs.log1p(ufuncs.negative(u)))


def cauchy(k: Any, shape: Any = (), dtype: Any = float32) -> Any:
    """Standard Cauchy floats, ``tan(pi * (u - 1/2))`` of uniforms in [eps, 1) (finite)."""
    d = _float_dtype(dtype, "cauchy")
    u = uniform(k, shape, d, minval=float(np.finfo(d.np).eps), maxval=1.0)
    return ufuncs.tan(ufuncs.multiply(ufuncs.subtract(u, 0.5), np.pi))


def rademacher(k: Any, shape: Any = (), dtype: Any = int32) -> Any:
    """-1 or 1 with equal probability."""
    b = bernoulli(k, 0.5, shape)
    return conversion.astype(ufuncs.subtract(ufuncs.multiply(conversion.astype(b, int32), 2), 1), dtype)


def truncated_normal(k: Any, lower: Any, upper: Any, shape: Any = None, dtype: Any = float32) -> Any:
    """Standard normal floats conditioned on ``lower < x < upper`` (broadcast to ``shape``), by
    the inverse CDF of uniforms between the bounds' CDFs, clipped inside the open interval
    (``jax.random.truncated_normal``; initializers draw from (-2, 2))."""
    d = _float_dtype(dtype, "truncated_normal")
    lo, hi = conversion.astype(lower, d), conversion.astype(upper, d)
    shp = _draw_shape(shape, lo, hi)
    root2 = np.sqrt(2.0)
    a = bind("erf", [ufuncs.divide(lo, d.np.type(root2))], {})
    b = bind("erf", [ufuncs.divide(hi, d.np.type(root2))], {})
    u = ufuncs.add(a, ufuncs.multiply(uniform(k, shp, d), ufuncs.subtract(b, a)))
    x = ufuncs.multiply(bind("erfinv", [conversion.astype(u, d)], {}), d.np.type(root2))
    inf = d.np.type(np.inf)
    return ufuncs.clip(x, ufuncs.nextafter(lo, inf), ufuncs.nextafter(hi, -inf))


def _population(a: Any, axis: int) -> tuple[Any, int]:
    """``a`` as the array to draw along ``axis`` from (an int: its arange), and that axis."""
    if isinstance(a, (int, np.integer)):
        return np.arange(int(a)), 0
    arr = conversion.asarray(a)
    nd = len(layout.shape(arr))
    if nd == 0:
        raise FlowjitTypeError("permutation/choice: x must be an int or an array with at least one axis")
    return arr, axis % nd


def permutation(k: Any, x: Any, axis: int = 0, independent: bool = False) -> Any:
    """``x`` shuffled along ``axis`` (an int ``x``: a permutation of ``arange(x)``), as
    ``jax.random.permutation``: the order of float64 uniforms (53 bits: ties as good as
    never); ``independent``: each slice along the axis shuffled with its own order."""
    arr, ax = _population(x, axis)
    n = layout.shape(arr)[ax]
    if independent:
        order = sorting_searching.argsort(uniform(k, layout.shape(arr), float64), axis=ax)
        return indexing.take_along_axis(arr, order, axis=ax)
    return indexing.take(arr, sorting_searching.argsort(uniform(k, (n,), float64)), axis=ax)


def choice(k: Any, a: Any, shape: Any = (), replace: bool = True, p: Any = None, axis: int = 0) -> Any:
    """Elements of ``a`` along ``axis`` (an int ``a``: of ``arange(a)``) in an array of
    ``shape``, with probabilities ``p`` (uniform when None), with or without replacement, as
    ``jax.random.choice``: with it, uniform integers or categorical draws of ``log(p)``;
    without, the first of a permutation or of the Gumbel-perturbed ``log(p)`` sorted (each a
    draw without replacement in proportion to p)."""
    arr, ax = _population(a, axis)
    n = layout.shape(arr)[ax]
    out = _shape(shape)
    size = int(np.prod(out, dtype=np.int64))
    if not replace and size > n:
        raise FlowjitTypeError(f"choice: cannot take {size} elements from {n} without replacement")
    if n == 0 and size:
        raise FlowjitTypeError("choice: a has no elements to choose from")
    probs = None if p is None else conversion.asarray(p)
    logp = None if probs is None else ufuncs.log(conversion.astype(probs, float64 if as_dtype(probs.dtype) == float64
                                                                  else float32))
    if replace:
        idx = randint(k, out, 0, n) if logp is None else categorical(k, logp, shape=out)
    else:
        keys = uniform(k, (n,), float64) if logp is None else ufuncs.negative(ufuncs.add(gumbel(k, (n,), logp.dtype),
                                                                                        logp))
        idx = layout.reshape(sorting_searching.argsort(keys)[:size], out)
    return indexing.take(arr, idx, axis=ax)


def _with_shape_gradient(alpha: Any, x: Any, log_space: bool) -> Any:
    """``x`` (gamma samples of shapes ``alpha``, or their logs), carrying the implicit derivative
    in ``alpha`` that the rejection loop which drew them cannot give: the loop draws from
    ``stop_gradient(alpha)``, and ``x`` comes back as a function of ``alpha`` whose VJP is
    ``g * dx/da`` (``/ x`` in log space). ``x`` is closed over, not an argument, so no
    cotangent reaches the loop."""
    if current_trace() is None:   # no derivative outside a trace
        return x

    def samples(alpha: Any) -> Any:
        return x

    def bwd(res: Any, g: Any) -> tuple[Any]:
        alpha, x = res
        if log_space:
            # d log x / da = (dx/da) / x at x = exp(log x), the smallest normal float where that is 0.
            x = ufuncs.exp(conversion.astype(x, float64))
            x = ufuncs.where(ufuncs.equal(x, 0.0), float(np.finfo(np.float64).tiny), x)
            d = ufuncs.divide(_shape_derivative(alpha, x), x)
        else:
            d = _shape_derivative(alpha, x)
        return (conversion.astype(ufuncs.multiply(g, d), alpha.dtype),)

    moved = custom_vjp(samples)
    moved.defvjp(lambda alpha: (x, (alpha, x)), bwd)
    return moved(alpha)


def _gamma_draw(k: Any, a: Any, shape: Any, d: Any) -> tuple[Any, Any, Any, Any, Any]:
    """Marsaglia and Tsang's draw for ``gamma``: the accepted values of shape ``a`` (``a + 1``
    where ``a < 1``), the uniforms that boost those, ``a`` broadcast, ``stop_gradient`` of it
    (what the draw reads: no cotangent reaches its loop), and where it is below 1."""
    alpha = conversion.astype(a, d)
    shp = _draw_shape(shape, alpha)
    alpha = layout.broadcast_to(alpha, shp)
    drawn_from = stop_gradient(alpha)
    small = ufuncs.less(drawn_from, 1)
    boosted = ufuncs.where(small, ufuncs.add(drawn_from, 1), drawn_from)
    dd = ufuncs.subtract(boosted, d.np.type(1 / 3))
    c = ufuncs.divide(1, ufuncs.sqrt(ufuncs.multiply(dd, 9)))
    kb, kloop = split(k)

    def cond(state: Any) -> Any:
        return ufuncs.logical_not(reductions.all(state[1]))

    def body(state: Any) -> Any:
        i, done, value = state
        kx, ku = split(fold_in(kloop, i))
        x = normal(kx, shp, d)
        v = ufuncs.power(ufuncs.add(1, ufuncs.multiply(c, x)), 3)
        u = uniform(ku, shp, d, minval=_tiny(d), maxval=1.0)
        positive = ufuncs.greater(v, 0)
        log_v = ufuncs.log(ufuncs.where(positive, v, 1))
        bound = ufuncs.add(ufuncs.multiply(ufuncs.multiply(x, x), 0.5),
                           ufuncs.multiply(dd, ufuncs.add(ufuncs.subtract(1, v), log_v)))
        accept = ufuncs.logical_and(positive, ufuncs.less(ufuncs.log(u), bound))
        take = ufuncs.logical_and(accept, ufuncs.logical_not(done))
        return (ufuncs.add(i, 1), ufuncs.logical_or(done, accept),
                ufuncs.where(take, conversion.astype(ufuncs.multiply(dd, v), d), value))

    init = (np.int32(0), creation.zeros(shp, bool), creation.zeros(shp, d))
    _, _, value = while_loop(cond, body, init)
    return value, uniform(kb, shp, d, minval=_tiny(d), maxval=1.0), alpha, drawn_from, small


def gamma(k: Any, a: Any, shape: Any = None, dtype: Any = float32) -> Any:
    """Gamma floats of shape ``a`` (scale 1; broadcast to ``shape``), by Marsaglia and Tsang's
    rejection (2000) with every element drawn again until all are accepted, in one compiled
    while loop, each round's normals and uniforms from the key folded with the round; for
    ``a < 1`` a draw of ``a + 1`` times ``u ** (1 / a)``. Differentiable in ``a`` as
    ``jax.random.gamma``: each sample moves with ``a`` at its fixed quantile (the implicit
    reparameterization, ``dx/da = -(dP/da) / (dP/dx)``), so beta, dirichlet, chisquare, t and
    f draws are too."""
    d = _float_dtype(dtype, "gamma")
    value, u, alpha, drawn_from, small = _gamma_draw(k, a, shape, d)
    boost = ufuncs.power(u, ufuncs.divide(1, drawn_from))
    x = conversion.astype(ufuncs.where(small, ufuncs.multiply(value, boost), value), d)
    return _with_shape_gradient(alpha, x, log_space=False)


def loggamma(k: Any, a: Any, shape: Any = None, dtype: Any = float32) -> Any:
    """The log of gamma floats of shape ``a``, as ``jax.random.loggamma``: for ``a < 1`` the
    log of the draw of ``a + 1`` plus ``log(u) / a``, finite where the gamma draw itself
    would underflow to 0 (``a`` of 0.01 and below in float32); differentiable in ``a`` as
    ``gamma`` is."""
    d = _float_dtype(dtype, "loggamma")
    value, u, alpha, drawn_from, small = _gamma_draw(k, a, shape, d)
    boost = ufuncs.where(small, ufuncs.divide(ufuncs.log(u), drawn_from), 0)
    y = conversion.astype(ufuncs.add(ufuncs.log(value), boost), d)
    return _with_shape_gradient(alpha, y, log_space=True)


def multinomial(k: Any, n: Any, p: Any, shape: Any = None, dtype: Any = float32) -> Any:
    """Multinomial counts of ``n`` trials over the outcomes along ``p``'s last axis, as
    ``jax.random.multinomial``: ``shape`` is the batch shape before that axis (default
    ``p.shape[:-1]``, ``n`` broadcast to it), the result ``shape + p.shape[-1:]`` floats of
    ``dtype``. The conditional binomial method, one ``binomial`` draw an outcome in one scan
    over the outcomes: the trials not yet placed with the outcome's share of the probability
    not yet used (``p`` need not sum to 1: the last outcome with probability left takes the
    trials left)."""
    d = _float_dtype(dtype, "multinomial")
    prob = conversion.astype(p, float64)
    pshape = tuple(layout.shape(prob))
    if not pshape:
        raise FlowjitTypeError("multinomial: p needs an axis of outcomes (its last), got a scalar; "
                               "pass the probabilities of two or more outcomes along the last axis")
    batch = _shape(shape) if shape is not None else \
        tuple(np.broadcast_shapes(pshape[:-1], layout.shape(conversion.asarray(n))))
    prob = layout.moveaxis(layout.broadcast_to(prob, (*batch, pshape[-1])), -1, 0)
    left = manipulation.flip(reductions.cumsum(manipulation.flip(prob, 0), axis=0), 0)   # p[i] + ... + p[-1]
    share = ufuncs.clip(ufuncs.divide(prob, ufuncs.where(ufuncs.greater(left, 0.0), left, 1.0)), 0.0, 1.0)

    def place(trials: Any, outcome: Any) -> Any:
        ratio, key_i = outcome
        count = binomial(key_i, trials, ratio, dtype=float64)
        return ufuncs.subtract(trials, count), count

    _, counts = scan(place, layout.broadcast_to(conversion.astype(n, float64), batch), (share, split(k, pshape[-1])))
    return conversion.astype(layout.moveaxis(counts, 0, -1), d)


def beta(k: Any, a: Any, b: Any, shape: Any = None, dtype: Any = float32) -> Any:
    """Beta(a, b) floats (broadcast to ``shape``), ``x / (x + y)`` of gamma draws."""
    d = _float_dtype(dtype, "beta")
    shp = _draw_shape(shape, a, b)
    ka, kb = split(k)
    x, y = gamma(ka, layout.broadcast_to(conversion.astype(a, d), shp), dtype=d), \
        gamma(kb, layout.broadcast_to(conversion.astype(b, d), shp), dtype=d)
    return ufuncs.divide(x, ufuncs.add(x, y))


def dirichlet(k: Any, alpha: Any, shape: Any = None, dtype: Any = float32) -> Any:
    """Dirichlet draws over ``alpha``'s last axis (``shape`` the batch shape before it):
    gamma draws normalized to sum to 1."""
    d = _float_dtype(dtype, "dirichlet")
    al = conversion.astype(alpha, d)
    batch = tuple(layout.shape(al)[:-1]) if shape is None else _shape(shape)
    g = gamma(k, layout.broadcast_to(al, (*batch, layout.shape(al)[-1])), dtype=d)
    return ufuncs.divide(g, reductions.sum(g, axis=-1, keepdims=True))


def chisquare(k: Any, df: Any, shape: Any = None, dtype: Any = float32) -> Any:
    """Chi-squared floats of ``df`` degrees of freedom: twice a gamma of ``df / 2``."""
    d = _float_dtype(dtype, "chisquare")
    return ufuncs.multiply(gamma(k, ufuncs.divide(conversion.astype(df, d), 2), shape, d), 2)


def t(k: Any, df: Any, shape: Any = None, dtype: Any = float32) -> Any:
    """Student's t floats of ``df`` degrees of freedom: a normal over the root of a
    chi-squared's ``/ df``."""
    d = _float_dtype(dtype, "t")
    dfa = conversion.astype(df, d)
    shp = _draw_shape(shape, dfa)
    kn, kg = split(k)
    g = gamma(kg, ufuncs.divide(layout.broadcast_to(dfa, shp), 2), dtype=d)
    return ufuncs.multiply(normal(kn, shp, d), ufuncs.sqrt(ufuncs.divide(dfa, ufuncs.multiply(g, 2))))


def multivariate_normal(k: Any, mean: Any, cov: Any, shape: Any = None, dtype: Any = float32) -> Any:
    """Normal vectors of ``mean`` (``[..., n]``) and covariance ``cov`` (``[..., n, n]``,
    symmetric positive definite), ``mean + L @ z`` with ``L`` its Cholesky factor;
    ``shape``: the batch shape (default: mean's and cov's broadcast)."""
    d = _float_dtype(dtype, "multivariate_normal")
    m, cv = conversion.astype(mean, d), conversion.astype(cov, d)
    n = layout.shape(m)[-1]
    if tuple(layout.shape(cv)[-2:]) != (n, n):
        raise FlowjitTypeError(f"multivariate_normal: cov of shape {list(layout.shape(cv))} for a mean of {n}: "
                               f"it must end in ({n}, {n})")
    batch = tuple(np.broadcast_shapes(layout.shape(m)[:-1], layout.shape(cv)[:-2])) if shape is None \
        else _shape(shape)
    z = normal(k, (*batch, n, 1), d)
    return ufuncs.add(m, layout.reshape(products.matmul(linalg.cholesky(cv), z), (*batch, n)))


def orthogonal(k: Any, n: int, shape: Any = (), dtype: Any = float32) -> Any:
    """Orthogonal ``n x n`` matrices (in a batch of ``shape``), uniform over the group (Haar):
    the Q of a normal matrix's QR with each column's sign made that of R's diagonal."""
    d = _float_dtype(dtype, "orthogonal")
    q, r = linalg.qr(normal(k, (*_shape(shape), int(n), int(n)), d))
    signs = ufuncs.sign(matrices.diagonal(r, axis1=-2, axis2=-1))
    return ufuncs.multiply(q, layout.expand_dims(ufuncs.where(ufuncs.equal(signs, 0), 1, signs), -2))


def _until_all_done(at: int) -> Any:
    """A while loop's condition: some element of the state's ``at``-th array is not done."""
    return lambda state: ufuncs.logical_not(reductions.all(state[at]))


def _hormann_uniforms(k: Any, shape: tuple[int, ...]) -> tuple[Any, Any, Any, Any]:
    """One round's draws of Hörmann's transformed rejection (PTRS, BTRS): ``u`` uniform on
    [-1/2, 1/2), ``v`` on [tiny, 1), ``us = 1/2 - |u|``, and ``us`` kept off 0 for the
    divisions by it."""
    ku, kv = split(k)
    u = ufuncs.subtract(uniform(ku, shape, float64), 0.5)
    v = uniform(kv, shape, float64, minval=float(np.finfo(np.float64).tiny), maxval=1.0)
    us = ufuncs.subtract(0.5, ufuncs.absolute(u))
    return u, v, us, ufuncs.maximum(us, 1e-300)


# Rates from which poisson draws by transformed rejection (below: by multiplying uniforms).
POISSON_REJECTION_RATE = 10.0


def poisson(k: Any, lam: Any, shape: Any = None, dtype: Any = int32) -> Any:
    """Poisson integers of rate ``lam`` (broadcast to ``shape``), as ``jax.random.poisson``:
    below POISSON_REJECTION_RATE by Knuth's product of uniforms (the count of factors
    before it falls under ``exp(-lam)``), from it by Hörmann's transformed rejection with
    squeeze (PTRS, 1993, as NumPy draws them); every element drawn again until all are
    done, each in one compiled while loop. A rate of 0 gives 0."""
    rate = conversion.astype(lam, float64)
    shp = _draw_shape(shape, rate)
    rate = layout.broadcast_to(rate, shp)
    small = ufuncs.less(rate, POISSON_REJECTION_RATE)
    k_small, k_large = split(k)

    def knuth_body(state: Any) -> Any:
        i, count, product, done = state
        u = uniform(fold_in(k_small, i), shp, float64)
        product = ufuncs.where(done, product, ufuncs.multiply(product, u))
        finished = ufuncs.logical_or(done, ufuncs.less_equal(product, ufuncs.exp(ufuncs.negative(rate))))
        return ufuncs.add(i, 1), ufuncs.where(finished, count, ufuncs.add(count, 1)), product, finished

    _, counts, _, _ = while_loop(_until_all_done(3), knuth_body, (np.int32(0), creation.zeros(shp, int32),
                                                          creation.ones(shp, float64), ufuncs.logical_not(small)))
    # PTRS's constants, for rates from POISSON_REJECTION_RATE (others take 10, unused).
    lr = ufuncs.where(small, POISSON_REJECTION_RATE, rate)
    log_rate = ufuncs.log(lr)
    b = ufuncs.add(0.931, ufuncs.multiply(2.53, ufuncs.sqrt(lr)))
    a = ufuncs.add(-0.059, ufuncs.multiply(0.02483, b))
    inv_alpha = ufuncs.add(1.1239, ufuncs.divide(1.1328, ufuncs.subtract(b, 3.4)))
    vr = ufuncs.subtract(0.9277, ufuncs.divide(3.6224, ufuncs.subtract(b, 2.0)))

    def ptrs_body(state: Any) -> Any:
        i, value, done = state
        u, v, us, us_safe = _hormann_uniforms(fold_in(k_large, i), shp)
        draw = ufuncs.floor(ufuncs.add(ufuncs.multiply(ufuncs.add(ufuncs.divide(ufuncs.multiply(2.0, a), us_safe), b),
                                                       u), ufuncs.add(lr, 0.43)))
        squeeze = ufuncs.logical_and(ufuncs.greater_equal(us, 0.07), ufuncs.less_equal(v, vr))
        rejected = ufuncs.logical_or(ufuncs.less(draw, 0),
                                     ufuncs.logical_and(ufuncs.less(us, 0.013), ufuncs.greater(v, us)))
        lhs = ufuncs.subtract(ufuncs.add(ufuncs.log(v), ufuncs.log(inv_alpha)),
                              ufuncs.log(ufuncs.add(ufuncs.divide(a, ufuncs.multiply(us_safe, us_safe)), b)))
        rhs = ufuncs.subtract(ufuncs.subtract(ufuncs.multiply(draw, log_rate), lr),
                              _lgamma(ufuncs.add(ufuncs.maximum(draw, 0.0), 1.0)))
        passes = ufuncs.logical_and(ufuncs.logical_not(rejected), ufuncs.less_equal(lhs, rhs))
        accept = ufuncs.logical_or(squeeze, passes)
        take = ufuncs.logical_and(accept, ufuncs.logical_not(done))
        return ufuncs.add(i, 1), ufuncs.where(take, draw, value), ufuncs.logical_or(done, accept)

    _, large, _ = while_loop(_until_all_done(2), ptrs_body, (np.int32(0), creation.zeros(shp, float64), small))
    return conversion.astype(ufuncs.where(small, counts, large), dtype)


def bits(k: Any, shape: Any = (), dtype: Any = uint32) -> Any:
    """Uniform random bits as unsigned integers of ``dtype`` (uint8, uint16, uint32 or
    uint64), as ``jax.random.bits``: a uint32 element is the first word of the key's
    threefry2x32 block for it (the top 32 of the 53 bits of ``uniform``'s float64, which
    are exact in it), narrower ones its top bits; a uint64 puts the words of two split
    keys side by side."""
    d = as_dtype(dtype)
    if not d.is_unsigned:
        raise FlowjitTypeError(f"fj.random.bits draws unsigned integers (uint8, uint16, uint32, uint64), "
                               f"not {d.name}: pass one of those as dtype")
    shp = _shape(shape)
    if d.itemsize == 8:
        high, low = (conversion.astype(bits(part, shp, uint32), d) for part in split(k))
        return ufuncs.bitwise_or(ufuncs.left_shift(high, conversion.astype(32, d)), low)
    u = uniform(k, shp, float64)
    return conversion.astype(ufuncs.floor(ufuncs.multiply(u, float(2 ** (8 * d.itemsize)))), d)


def generalized_normal(k: Any, p: float, shape: Any = (), dtype: Any = float32) -> Any:
    """Floats of the generalized normal law of power ``p`` (density proportional to
    ``exp(-|x|**p)``; ``p`` 2 is a normal of variance 1/2, 1 a Laplace), as
    ``jax.random.generalized_normal``: a Rademacher sign times ``gamma(1/p) ** (1/p)``."""
    d = _float_dtype(dtype, "generalized_normal")
    shp = _shape(shape)
    kg, ks = split(k)
    g = gamma(kg, creation.full(shp, 1.0 / p, d), dtype=d)
    return ufuncs.multiply(rademacher(ks, shp, d), ufuncs.power(g, conversion.astype(1.0 / p, d)))


def ball(k: Any, d: int, p: float = 2, shape: Any = (), dtype: Any = float32) -> Any:
    """Points uniform in the unit ``p``-norm ball of dimension ``d``, of shape ``(*shape,
    d)``, as ``jax.random.ball``: generalized normal coordinates scaled by the p-norm of
    them and an exponential draw together (Barthe, Guédon, Mendelson and Naor, 2005)."""
    dt = _float_dtype(dtype, "ball")
    shp = _shape(shape)
    kg, ke = split(k)
    g = generalized_normal(kg, p, (*shp, int(d)), dt)
    e = exponential(ke, shp, dt)
    norm = ufuncs.power(ufuncs.add(reductions.sum(ufuncs.power(ufuncs.absolute(g), conversion.astype(p, dt)),
                                                  axis=-1), e), conversion.astype(1.0 / p, dt))
    return ufuncs.divide(g, layout.expand_dims(norm, -1))


# Means n * min(p, 1 - p) from which binomial draws by transformed rejection (below: by
# counting geometric waiting times).
BINOMIAL_REJECTION_MEAN = 10.0


def binomial(k: Any, n: Any, p: Any, shape: Any = None, dtype: Any = float32) -> Any:
    """Binomial counts of ``n`` trials of success probability ``p`` (broadcast together and
    to ``shape``) as floats of ``dtype``, as ``jax.random.binomial``. With ``q`` the smaller
    of ``p`` and ``1 - p`` (the count of the other outcome taken from ``n`` where ``p`` is
    above 1/2): below a mean ``n * q`` of BINOMIAL_REJECTION_MEAN by the number of geometric
    waiting times (``ceil(log(u) / log(1 - q))`` trials each) that fit in ``n`` trials, from
    it by Hörmann's transformed rejection (BTRS, 1993, as TensorFlow and JAX draw them);
    every element drawn again until all are done, each in one compiled while loop."""
    d = _float_dtype(dtype, "binomial")
    count, prob = conversion.astype(n, float64), conversion.astype(p, float64)
    shp = _draw_shape(shape, count, prob)
    count, prob = layout.broadcast_to(count, shp), layout.broadcast_to(prob, shp)
    flipped = ufuncs.greater(prob, 0.5)
    q = ufuncs.where(flipped, ufuncs.subtract(1.0, prob), prob)
    small = ufuncs.less(ufuncs.multiply(count, q), BINOMIAL_REJECTION_MEAN)
    k_small, k_large = split(k)
    tiny = float(np.finfo(np.float64).tiny)
    log_q1 = ufuncs.log1p(ufuncs.negative(q))          # log(1 - q) <= 0; -0.0 for q = 0: no success

    def geometric_body(state: Any) -> Any:
        i, successes, trials, done = state
        u = uniform(fold_in(k_small, i), shp, float64, minval=tiny, maxval=1.0)
        trials = ufuncs.where(done, trials, ufuncs.add(trials, ufuncs.ceil(ufuncs.divide(ufuncs.log(u), log_q1))))
        finished = ufuncs.logical_or(done, ufuncs.greater(trials, count))
        return ufuncs.add(i, 1), ufuncs.where(finished, successes, ufuncs.add(successes, 1.0)), trials, finished

    _, counted, _, _ = while_loop(_until_all_done(3), geometric_body,
                                  (np.int32(0), creation.zeros(shp, float64), creation.zeros(shp, float64),
                                   ufuncs.logical_not(small)))
    # BTRS's constants, where the mean is BINOMIAL_REJECTION_MEAN or more (the others take
    # a count of 100 and q 1/2 there, unused).
    nn = ufuncs.where(small, 100.0, count)
    qq = ufuncs.where(small, 0.5, q)
    spq = ufuncs.sqrt(ufuncs.multiply(nn, ufuncs.multiply(qq, ufuncs.subtract(1.0, qq))))
    b = ufuncs.add(1.15, ufuncs.multiply(2.53, spq))
    a = ufuncs.add(ufuncs.add(-0.0873, ufuncs.multiply(0.0248, b)), ufuncs.multiply(0.01, qq))
    c = ufuncs.add(ufuncs.multiply(nn, qq), 0.5)
    vr = ufuncs.subtract(0.92, ufuncs.divide(4.2, b))
    alpha = ufuncs.multiply(ufuncs.add(2.83, ufuncs.divide(5.1, b)), spq)
    log_odds = ufuncs.log(ufuncs.divide(qq, ufuncs.subtract(1.0, qq)))
    m = ufuncs.floor(ufuncs.multiply(ufuncs.add(nn, 1.0), qq))
    h = ufuncs.add(_lgamma(ufuncs.add(m, 1.0)), _lgamma(ufuncs.add(ufuncs.subtract(nn, m), 1.0)))

    def btrs_body(state: Any) -> Any:
        i, value, done = state
        u, v, us, us_safe = _hormann_uniforms(fold_in(k_large, i), shp)
        draw = ufuncs.floor(ufuncs.add(ufuncs.multiply(ufuncs.add(ufuncs.divide(ufuncs.multiply(2.0, a), us_safe), b),
                                                       u), c))
        squeeze = ufuncs.logical_and(ufuncs.greater_equal(us, 0.07), ufuncs.less_equal(v, vr))
        outside = ufuncs.logical_or(ufuncs.less(draw, 0.0), ufuncs.greater(draw, nn))
        inside = ufuncs.minimum(ufuncs.maximum(draw, 0.0), nn)
        lhs = ufuncs.log(ufuncs.divide(ufuncs.multiply(v, alpha),
                                       ufuncs.add(ufuncs.divide(a, ufuncs.multiply(us_safe, us_safe)), b)))
        rhs = ufuncs.add(ufuncs.subtract(ufuncs.subtract(h, _lgamma(ufuncs.add(inside, 1.0))),
                                         _lgamma(ufuncs.add(ufuncs.subtract(nn, inside), 1.0))),
                         ufuncs.multiply(ufuncs.subtract(inside, m), log_odds))
        passes = ufuncs.logical_and(ufuncs.logical_not(outside), ufuncs.less_equal(lhs, rhs))
        accept = ufuncs.logical_or(ufuncs.logical_and(squeeze, ufuncs.logical_not(outside)), passes)
        take = ufuncs.logical_and(accept, ufuncs.logical_not(done))
        return ufuncs.add(i, 1), ufuncs.where(take, draw, value), ufuncs.logical_or(done, accept)

    _, rejected, _ = while_loop(_until_all_done(2), btrs_body, (np.int32(0), creation.zeros(shp, float64), small))
    drawn = ufuncs.where(small, counted, rejected)
    return conversion.astype(ufuncs.where(flipped, ufuncs.subtract(count, drawn), drawn), d)


def lognormal(k: Any, sigma: Any = 1.0, shape: Any = None, dtype: Any = float32) -> Any:
    """Log-normal floats: ``exp(sigma * z)`` of standard normals (``jax.random.lognormal``)."""
    d = _float_dtype(dtype, "lognormal")
    sg = conversion.astype(sigma, d)
    shp = _draw_shape(shape, sg)
    return ufuncs.exp(ufuncs.multiply(normal(k, shp, d), sg))


def pareto(k: Any, b: Any, shape: Any = None, dtype: Any = float32) -> Any:
    """Pareto floats of shape ``b`` on [1, inf): ``exp(e / b)`` of standard exponentials."""
    d = _float_dtype(dtype, "pareto")
    bb = conversion.astype(b, d)
    shp = _draw_shape(shape, bb)
    return ufuncs.exp(ufuncs.divide(exponential(k, shp, d), bb))


def weibull_min(k: Any, scale: Any, concentration: Any, shape: Any = (), dtype: Any = float32) -> Any:
    """Weibull floats: ``scale * e ** (1 / concentration)`` of standard exponentials."""
    d = _float_dtype(dtype, "weibull_min")
    e = exponential(k, shape, d)
    return ufuncs.multiply(conversion.astype(scale, d),
                           ufuncs.power(e, ufuncs.divide(1, conversion.astype(concentration, d))))


def rayleigh(k: Any, scale: Any = 1.0, shape: Any = None, dtype: Any = float32) -> Any:
    """Rayleigh floats: ``scale * sqrt(2 e)`` of standard exponentials."""
    d = _float_dtype(dtype, "rayleigh")
    sc = conversion.astype(scale, d)
    shp = _draw_shape(shape, sc)
    return ufuncs.multiply(sc, ufuncs.sqrt(ufuncs.multiply(exponential(k, shp, d), 2)))


def maxwell(k: Any, shape: Any = (), dtype: Any = float32) -> Any:
    """Maxwell floats: the length of a vector of three standard normals."""
    d = _float_dtype(dtype, "maxwell")
    z = normal(k, (*_shape(shape), 3), d)
    return ufuncs.sqrt(reductions.sum(ufuncs.multiply(z, z), axis=-1))


def double_sided_maxwell(k: Any, loc: Any, scale: Any, shape: Any = (), dtype: Any = float32) -> Any:
    """``loc`` plus ``scale`` times a Maxwell float of a random sign."""
    d = _float_dtype(dtype, "double_sided_maxwell")
    km, ks = split(k)
    x = ufuncs.multiply(maxwell(km, shape, d), rademacher(ks, shape, d))
    return ufuncs.add(conversion.astype(loc, d), ufuncs.multiply(conversion.astype(scale, d), x))


def geometric(k: Any, p: Any, shape: Any = None, dtype: Any = int32) -> Any:
    """The number of trials up to the first success of probability ``p`` (1, 2, ...):
    ``floor(log(u) / log(1 - p)) + 1`` of uniforms in [tiny, 1)."""
    pp = conversion.astype(p, float64)
    shp = _draw_shape(shape, pp)
    u = uniform(k, shp, float64, minval=float(np.finfo(np.float64).tiny), maxval=1.0)
    trials = ufuncs.add(ufuncs.floor(ufuncs.divide(ufuncs.log(u), ufuncs.log1p(ufuncs.negative(pp)))), 1)
    return conversion.astype(trials, dtype)


def wald(k: Any, mean: Any, shape: Any = None, dtype: Any = float32) -> Any:
    """Wald (inverse Gaussian) floats of ``mean`` and shape 1, by Michael, Schucany and
    Haas's transformation of a normal (1976): the smaller root of the quadratic its square
    gives, or ``mean**2`` over it, chosen by a uniform."""
    d = _float_dtype(dtype, "wald")
    mu = conversion.astype(mean, d)
    shp = _draw_shape(shape, mu)
    kn, ku = split(k)
    z = normal(kn, shp, d)
    y = ufuncs.multiply(z, z)
    my = ufuncs.multiply(mu, y)
    x = ufuncs.subtract(ufuncs.add(mu, ufuncs.multiply(ufuncs.multiply(mu, my), 0.5)),
                        ufuncs.multiply(ufuncs.multiply(mu, 0.5), ufuncs.sqrt(ufuncs.add(ufuncs.multiply(my, 4),
                                                                                          ufuncs.multiply(my, my)))))
    u = uniform(ku, shp, d)
    return ufuncs.where(ufuncs.less_equal(u, ufuncs.divide(mu, ufuncs.add(mu, x))), x,
                        ufuncs.divide(ufuncs.multiply(mu, mu), x))


def triangular(k: Any, left: Any, mode: Any, right: Any, shape: Any = None, dtype: Any = float32) -> Any:
    """Triangular floats on [left, right] peaking at ``mode``: its inverse CDF of uniforms."""
    d = _float_dtype(dtype, "triangular")
    lo, mo, hi = (conversion.astype(v, d) for v in (left, mode, right))
    shp = _draw_shape(shape, lo, mo, hi)
    u = uniform(k, shp, d)
    width = ufuncs.subtract(hi, lo)
    cut = ufuncs.divide(ufuncs.subtract(mo, lo), width)
    below = ufuncs.add(lo, ufuncs.sqrt(ufuncs.multiply(u, ufuncs.multiply(width, ufuncs.subtract(mo, lo)))))
    above = ufuncs.subtract(hi, ufuncs.sqrt(ufuncs.multiply(ufuncs.subtract(1, u),
                                                            ufuncs.multiply(width, ufuncs.subtract(hi, mo)))))
    return ufuncs.where(ufuncs.less(u, cut), below, above)


def f(k: Any, dfnum: Any, dfden: Any, shape: Any = None, dtype: Any = float32) -> Any:
    """F floats: the ratio of two chi-squared draws each over its degrees of freedom."""
    d = _float_dtype(dtype, "f")
    num, den = conversion.astype(dfnum, d), conversion.astype(dfden, d)
    shp = _draw_shape(shape, num, den)
    kn, kd = split(k)
    x = ufuncs.divide(chisquare(kn, layout.broadcast_to(num, shp), dtype=d), num)
    y = ufuncs.divide(chisquare(kd, layout.broadcast_to(den, shp), dtype=d), den)
    return ufuncs.divide(x, y)
