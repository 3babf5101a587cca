"""Activations and normalization: ``relu``, ``gelu``, ``sigmoid``, ``softmax``,
``log_softmax``, ``layer_norm``, ``dropout``, and the rest of ``jax.nn``'s activations
(``silu``, ``softplus``, ``elu``, ``leaky_relu``, ``relu6``, ``one_hot``, ``standardize``...)
with JAX's values and JAX's derivatives at their kinks.

Each is ordinary fj code, so it traces into primitives that fuse (softmax and layer
norm become at most two kernels) and differentiates through their VJPs. Reductions
subtract the maximum first, so large inputs never overflow.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from flowjit.ir.errors import FlowjitTypeError
from flowjit.tracer import random
from flowjit.tracer.custom_gradients import custom_vjp, stop_gradient
from flowjit.tracer.numpy import namespace as fnp


def relu(x: Any) -> Any:
    """``max(x, 0)``; NaN stays NaN and the gradient at 0 is 0, as in JAX and PyTorch."""
    return fnp.where(fnp.less_equal(x, 0), fnp.zeros_like(x), x)


def sigmoid(x: Any) -> Any:
    """The logistic function ``1 / (1 + exp(-x))``."""
    return fnp.logistic(x)


def identity(x: Any) -> Any:
    """``x`` itself (``jax.nn.identity``)."""
    return fnp.asarray(x)


def tanh(x: Any) -> Any:
    """The hyperbolic tangent (``jax.nn.tanh``)."""
    return fnp.tanh(x)


def silu(x: Any) -> Any:
    """``x * sigmoid(x)``, the sigmoid linear unit (also ``swish``)."""
    return x * fnp.logistic(x)


swish = silu


def softplus(x: Any) -> Any:
    """``log(1 + exp(x))``, computed as ``logaddexp(x, 0)`` so large ``x`` gives ``x``."""
    return fnp.logaddexp(x, 0.0)


def log_sigmoid(x: Any) -> Any:
    """``log(sigmoid(x)) = -softplus(-x)``, finite for large negative ``x``."""
    return -softplus(-x)


def soft_sign(x: Any) -> Any:
    """``x / (|x| + 1)``."""
    return x / (fnp.abs(x) + 1.0)


def squareplus(x: Any, b: float = 4.0) -> Any:
    """``(x + sqrt(x**2 + b)) / 2``, a smooth ReLU without exponentials."""
    return (x + fnp.sqrt(x * x + b)) * 0.5


def mish(x: Any) -> Any:
    """``x * tanh(softplus(x))``."""
    return x * fnp.tanh(softplus(x))


def _negative_part(x: Any) -> Any:
    # The exponential branch sees 0 where x > 0, so a large positive x, whose cotangent
    # that branch does not take, cannot make its derivative inf (and the gradient nan).
    return fnp.where(x > 0, fnp.zeros_like(x), x)


def elu(x: Any, alpha: float = 1.0) -> Any:
    """``x`` where positive, else ``alpha * (exp(x) - 1)``; the derivative at 0 is ``alpha``."""
    return fnp.where(x > 0, x, alpha * fnp.expm1(_negative_part(x)))


def celu(x: Any, alpha: float = 1.0) -> Any:
    """``x`` where positive, else ``alpha * (exp(x / alpha) - 1)`` (continuously
    differentiable ELU)."""
    return fnp.where(x > 0, x, alpha * fnp.expm1(_negative_part(x) / alpha))


def selu(x: Any) -> Any:
    """``scale * elu(x, alpha)`` with the self-normalizing constants of Klambauer et al."""
    alpha = 1.6732632423543772848170429916717
    scale = 1.0507009873554804934193349852946
    return scale * elu(x, alpha)


def leaky_relu(x: Any, negative_slope: float = 1e-2) -> Any:
    """``x`` where ``x >= 0``, else ``negative_slope * x``; the derivative at 0 is 1."""
    return fnp.where(x >= 0, x, negative_slope * x)


def relu6(x: Any) -> Any:
    """``min(max(x, 0), 6)``; the derivative is 1 strictly inside (0, 6) and 0 elsewhere,
    also at 0, at 6 and at NaN (JAX's rule)."""
    inside = fnp.logical_and(x > 0, x < 6)
    return fnp.where(inside, x, stop_gradient(fnp.clip(x, 0, 6)))


def hard_tanh(x: Any) -> Any:
    """``x`` clipped to [-1, 1]; the derivative is 1 on [-1, 1] (edges included)."""
    return fnp.where(x > 1, fnp.ones_like(x), fnp.where(x < -1, -fnp.ones_like(x), x))


def hard_sigmoid(x: Any) -> Any:
    """``relu6(x + 3) / 6``, a piecewise-linear sigmoid."""
    return relu6(x + 3.0) / 6.0


def hard_silu(x: Any) -> Any:
    """``x * hard_sigmoid(x)`` (also ``hard_swish``)."""
    return x * hard_sigmoid(x)


hard_swish = hard_silu


def sparse_plus(x: Any) -> Any:
    """0 for ``x <= -1``, ``x`` for ``x >= 1``, and ``(x + 1)**2 / 4`` between."""
    return fnp.where(x <= -1, fnp.zeros_like(x), fnp.where(x >= 1, x, (x + 1.0) * (x + 1.0) * 0.25))


def sparse_sigmoid(x: Any) -> Any:
    """``clip(x + 1, 0, 2) / 2``, the derivative of ``sparse_plus``."""
    return 0.5 * fnp.clip(x + 1.0, 0.0, 2.0)


@custom_vjp
def log1mexp(x: Any) -> Any:
    """``log(1 - exp(-x))`` for ``x > 0``, accurate near 0 and for large ``x``
    (Mächler's two branches, split at log 2); its derivative is ``1 / expm1(x)`` everywhere
    (inf at 0), not the product of the branches' (NaN there)."""
    return fnp.where(x < 0.6931471805599453, fnp.log(-fnp.expm1(-x)), fnp.log1p(-fnp.exp(-x)))


log1mexp.defvjp(lambda x: (log1mexp(x), x), lambda x, g: (g / fnp.expm1(x),))


def glu(x: Any, axis: int = -1) -> Any:
    """Gated linear unit: ``a * sigmoid(b)`` where ``a`` and ``b`` are the two halves of
    ``x`` along ``axis``."""
    n = fnp.shape(x)[axis]
    if n % 2:
        raise FlowjitTypeError(f"glu: axis {axis} of an array of shape {list(fnp.shape(x))} has odd size {n}; "
                               "it is split into two equal halves (the value and its gate)")
    a, b = fnp.split(x, 2, axis=axis)
    return a * fnp.logistic(b)


def one_hot(x: Any, num_classes: int, *, dtype: Any = None, axis: int = -1) -> Any:
    """``x``'s integer classes as one-hot vectors of length ``num_classes`` along a new
    ``axis``; a class outside ``[0, num_classes)`` gives a row of zeros (as in JAX).
    ``dtype`` is float32 unless given (``jax.nn.one_hot``'s, so that the rows multiply
    float32 logits without promoting them)."""
    x = fnp.asarray(x)
    ndim = len(fnp.shape(x)) + 1
    if not -ndim <= axis < ndim:
        raise FlowjitTypeError(f"one_hot: axis {axis} is out of range for a result of {ndim} dimensions")
    axis %= ndim
    classes = fnp.arange(num_classes).reshape((num_classes,) + (1,) * (ndim - 1 - axis))
    hot = fnp.expand_dims(x, axis) == classes
    return fnp.asarray(hot, dtype=dtype if dtype is not None else np.float32)


def standardize(x: Any, axis: Any = -1, mean: Any = None, variance: Any = None, epsilon: float = 1e-5,
                where: Any = None, *, algorithm: str = "fast") -> Any:
    """``(x - mean) / sqrt(variance + epsilon)`` along ``axis``; the mean and variance are
    ``x``'s unless given. ``algorithm="fast"`` computes the variance as ``E[x**2] - mean**2``
    (JAX's default), ``"stable"`` as the mean of squared deviations."""
    if where is not None:
        raise FlowjitTypeError("standardize(where=...) is not supported: standardize fj.where(mask, x, 0) "
                               "with its own mean and variance instead")
    if algorithm not in ("fast", "stable"):
        raise FlowjitTypeError(f"standardize: algorithm is 'fast' or 'stable', got {algorithm!r}")
    if mean is None:
        mean = fnp.mean(x, axis=axis, keepdims=True)
    if variance is None:
        if algorithm == "fast":
            variance = fnp.mean(x * x, axis=axis, keepdims=True) - mean * mean
        else:
            centered = x - mean
            variance = fnp.mean(centered * centered, axis=axis, keepdims=True)
    return (x - mean) * fnp.rsqrt(variance + epsilon)


def gelu(x: Any, approximate: bool = True) -> Any:
    """Gaussian error linear unit; ``approximate=True`` (JAX's default) is the tanh form,
    ``False`` the exact ``x * Phi(x)`` (PyTorch's default)."""
    if approximate:
        return 0.5 * x * (1.0 + fnp.tanh(0.7978845608028654 * (x + 0.044715 * (x * x * x))))
    return 0.5 * x * (1.0 + fnp.erf(x * 0.7071067811865476))


def softmax(x: Any, axis: int = -1) -> Any:
    """``exp(x) / sum(exp(x))`` along ``axis``, computed from ``x - max(x)``."""
    e = fnp.exp(x - fnp.max(x, axis=axis, keepdims=True))
    return e / fnp.sum(e, axis=axis, keepdims=True)


def log_softmax(x: Any, axis: int = -1) -> Any:
    """``x - log(sum(exp(x)))`` along ``axis``, stable for large inputs."""
    shifted = x - fnp.max(x, axis=axis, keepdims=True)
    return shifted - fnp.log(fnp.sum(fnp.exp(shifted), axis=axis, keepdims=True))


def logmeanexp(x: Any, axis: Any = None, keepdims: bool = False) -> Any:
    """``log(mean(exp(x)))`` along ``axis``: ``logsumexp`` less the log of the count."""
    shp = fnp.shape(x)
    axes = range(len(shp)) if axis is None else (axis,) if isinstance(axis, int) else axis
    count = 1
    for a in axes:
        count *= shp[a]
    return logsumexp(x, axis=axis, keepdims=keepdims) - math.log(count)


def logsumexp(x: Any, axis: Any = None, keepdims: bool = False) -> Any:
    """``log(sum(exp(x)))`` along ``axis``, stable for large inputs."""
    m = fnp.max(x, axis=axis, keepdims=True)
    out = fnp.log(fnp.sum(fnp.exp(x - m), axis=axis, keepdims=True)) + m
    return out if keepdims else fnp.squeeze(out, axis=axis)


def layer_norm(x: Any, scale: Any = None, offset: Any = None, axis: int = -1, eps: float = 1e-5) -> Any:
    """Normalize ``x`` to zero mean and unit variance along ``axis``, then ``* scale + offset``.

    The variance is the biased one (divide by n), as in PyTorch's and Keras's layer norm.
    """
    mean = fnp.mean(x, axis=axis, keepdims=True)
    centered = x - mean
    var = fnp.mean(centered * centered, axis=axis, keepdims=True)
    y = centered * fnp.rsqrt(var + eps)
    if scale is not None:
        y = y * scale
    if offset is not None:
        y = y + offset
    return y


def dropout(x: Any, rate: float, key: Any, deterministic: bool = False) -> Any:
    """Zero each element with probability ``rate`` and scale the rest by ``1 / (1 - rate)``.

    The randomness comes from the explicit ``key`` (see ``fj.random``): split it for
    each step. ``deterministic=True`` (evaluation) returns ``x`` unchanged.
    """
    if not 0.0 <= rate < 1.0:
        raise FlowjitTypeError(f"dropout: rate must be in [0, 1), got {rate}")
    if deterministic or rate == 0.0:
        return x
    keep = random.bernoulli(key, 1.0 - rate, fnp.shape(x))
    return fnp.where(keep, x * (1.0 / (1.0 - rate)), fnp.zeros_like(x))
