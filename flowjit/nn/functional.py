"""Activations and normalization: ``relu``, ``gelu``, ``sigmoid``, ``softmax``,
``log_softmax``, ``layer_norm``, ``dropout``.

Each is ordinary fj code, so it traces into primitives that fuse (softmax and layer
norm become at most two kernels) and differentiates through their VJPs. Reductions
subtract the maximum first, so large inputs never overflow.
"""

from __future__ import annotations

from typing import Any

from flowjit.ir.errors import FlowjitTypeError
from flowjit.tracer import random
from flowjit.tracer.numpy import namespace as fnp


def relu(x: Any) -> Any:
    """``max(x, 0)``; NaN stays NaN and the gradient at 0 is 0, as in JAX and PyTorch."""
    return fnp.where(fnp.less_equal(x, 0), fnp.zeros_like(x), x)


def sigmoid(x: Any) -> Any:
    """The logistic function ``1 / (1 + exp(-x))``."""
    return fnp.logistic(x)


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
