"""``tf.train``'s learning-rate schedules: a learning rate as a float32 tensor of the global
step, by TensorFlow 1.x's formulas (``tensorflow/python/training/learning_rate_decay.py``),
each one graph op whose value is recomputed from the step in every run.

``exponential_decay``, ``natural_exp_decay`` and ``inverse_time_decay`` decay by
``decay_rate`` every ``decay_steps`` (continuously, or in steps with ``staircase``);
``polynomial_decay`` goes from ``learning_rate`` to ``end_learning_rate`` over
``decay_steps`` (then stays, or restarts with a longer period with ``cycle``);
``cosine_decay`` follows half a cosine down to ``alpha`` of the rate; ``piecewise_constant``
takes ``values[i]`` while the step is at most ``boundaries[i]``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from flowjit.tracer.numpy import namespace as fnp
from flowjit.v1 import ops
from flowjit.v1.graph import Tensor


def _schedule(what: str, type: str, fn: Any, learning_rate: Any, global_step: Any, decay_steps: Any,
              name: str | None, **attrs: Any) -> Tensor:
    """The op of schedule ``what`` (its tf.train name), its step count checked."""
    if global_step is None:
        raise ValueError(f"tf.train.{what} needs global_step: pass tf.train.get_or_create_global_step()")
    # TensorFlow takes a float too (a count of batches per epoch times epochs).
    if isinstance(decay_steps, (bool, np.bool_)) or not isinstance(decay_steps, (int, float, np.integer, np.floating)) \
            or not decay_steps > 0:
        raise ValueError(f"tf.train.{what}(decay_steps={decay_steps!r}): give the number of steps, above 0")
    return ops.apply(type, fn, [ops.convert_to_tensor(learning_rate, dtype="float32"), global_step], name=name,
                     decay_steps=float(decay_steps), **attrs)


def _progress(step: Any, decay_steps: float, staircase: bool) -> Any:
    p = fnp.divide(fnp.astype(step, "float32"), np.float32(decay_steps))
    return fnp.floor(p) if staircase else p


def _per_period(what: str, type: str, learning_rate: Any, global_step: Any, decay_steps: float, decay_rate: float,
                staircase: bool, name: str | None, decayed: Any) -> Tensor:
    """A schedule of the periods elapsed, ``global_step / decay_steps`` (floored with
    ``staircase``): ``decayed(lr, decay_rate, periods)``."""
    def fn(lr: Any, step: Any, decay_steps: float, decay_rate: float, staircase: bool) -> Any:
        return decayed(lr, np.float32(decay_rate), _progress(step, decay_steps, staircase))
    return _schedule(what, type, fn, learning_rate, global_step, decay_steps, name, decay_rate=float(decay_rate),
                     staircase=bool(staircase))


def exponential_decay(learning_rate: Any, global_step: Any, decay_steps: float, decay_rate: float,
                      staircase: bool = False, name: str | None = None) -> Tensor:
    """``learning_rate * decay_rate ** (global_step / decay_steps)`` (the quotient floored
    with ``staircase``)."""
    return _per_period("exponential_decay", "ExponentialDecay", learning_rate, global_step, decay_steps, decay_rate,
                       staircase, name, lambda lr, rate, p: fnp.multiply(lr, fnp.power(rate, p)))


def natural_exp_decay(learning_rate: Any, global_step: Any, decay_steps: float, decay_rate: float,
                      staircase: bool = False, name: str | None = None) -> Tensor:
    """``learning_rate * exp(-decay_rate * global_step / decay_steps)`` (the quotient floored
    with ``staircase``)."""
    return _per_period("natural_exp_decay", "NaturalExpDecay", learning_rate, global_step, decay_steps, decay_rate,
                       staircase, name,
                       lambda lr, rate, p: fnp.multiply(lr, fnp.exp(fnp.negative(fnp.multiply(rate, p)))))


def inverse_time_decay(learning_rate: Any, global_step: Any, decay_steps: float, decay_rate: float,
                       staircase: bool = False, name: str | None = None) -> Tensor:
    """``learning_rate / (1 + decay_rate * global_step / decay_steps)`` (the quotient floored
    with ``staircase``)."""
    return _per_period("inverse_time_decay", "InverseTimeDecay", learning_rate, global_step, decay_steps, decay_rate,
                       staircase, name,
                       lambda lr, rate, p: fnp.divide(lr, fnp.add(np.float32(1.0), fnp.multiply(rate, p))))


def polynomial_decay(learning_rate: Any, global_step: Any, decay_steps: float, end_learning_rate: float = 0.0001,
                     power: float = 1.0, cycle: bool = False, name: str | None = None) -> Tensor:
    """``(learning_rate - end_learning_rate) * (1 - step / decay_steps) ** power +
    end_learning_rate`` with the step held at ``decay_steps`` once past it; with ``cycle``
    the period grows instead to the next multiple of ``decay_steps`` above the step."""
    def fn(lr: Any, step: Any, decay_steps: float, end: float, power: float, cycle: bool) -> Any:
        s = fnp.astype(step, "float32")
        period = np.float32(decay_steps)
        if cycle:   # TensorFlow's multiplier: 1 at step 0, then ceil(step / decay_steps)
            times = fnp.ceil(fnp.divide(s, period))
            period = fnp.multiply(period, fnp.where(fnp.equal(s, np.float32(0.0)), np.float32(1.0), times))
        else:
            s = fnp.minimum(s, period)
        left = fnp.power(fnp.subtract(np.float32(1.0), fnp.divide(s, period)), np.float32(power))
        return fnp.add(fnp.multiply(fnp.subtract(lr, np.float32(end)), left), np.float32(end))
    return _schedule("polynomial_decay", "PolynomialDecay", fn, learning_rate, global_step, decay_steps, name,
                     end=float(end_learning_rate), power=float(power), cycle=bool(cycle))


def cosine_decay(learning_rate: Any, global_step: Any, decay_steps: float, alpha: float = 0.0,
                 name: str | None = None) -> Tensor:
    """``learning_rate * ((1 - alpha) * 0.5 * (1 + cos(pi * step / decay_steps)) + alpha)``,
    the step held at ``decay_steps`` once past it (Loshchilov and Hutter's SGDR without
    restarts)."""
    def fn(lr: Any, step: Any, decay_steps: float, alpha: float) -> Any:
        s = fnp.minimum(fnp.astype(step, "float32"), np.float32(decay_steps))
        cosine = fnp.multiply(np.float32(0.5), fnp.add(np.float32(1.0), fnp.cos(
            fnp.multiply(np.float32(math.pi), fnp.divide(s, np.float32(decay_steps))))))
        return fnp.multiply(lr, fnp.add(fnp.multiply(np.float32(1.0 - alpha), cosine), np.float32(alpha)))
    return _schedule("cosine_decay", "CosineDecay", fn, learning_rate, global_step, decay_steps, name,
                     alpha=float(alpha))


def piecewise_constant(x: Any, boundaries: Sequence[Any], values: Sequence[Any], name: str | None = None) -> Tensor:
    """``values[0]`` while ``x <= boundaries[0]``, ``values[i]`` while ``boundaries[i - 1] <
    x <= boundaries[i]``, ``values[-1]`` past the last boundary: one more value than
    boundaries, boundaries increasing, the values all ints or all floats."""
    boundaries, values = list(boundaries), list(values)
    if len(values) != len(boundaries) + 1:
        raise ValueError(f"tf.train.piecewise_constant: {len(boundaries)} boundaries need {len(boundaries) + 1} "
                         f"values, got {len(values)}")
    if any(b >= a for a, b in zip(boundaries[1:], boundaries)):
        raise ValueError(f"tf.train.piecewise_constant: the boundaries must increase, got {boundaries}")
    kinds = {np.asarray(v).dtype.kind for v in values}
    if len(kinds) > 1:
        raise ValueError(f"tf.train.piecewise_constant: the values must be of one type, got {values}")
    dtype = "float32" if kinds <= {"f"} else "int32" if kinds <= {"i", "u", "b"} else None
    if dtype is None:
        raise ValueError(f"tf.train.piecewise_constant: the values must be numbers, got {values}")

    def fn(x: Any, boundaries: tuple, values: tuple, dtype: str) -> Any:
        out = np.asarray(values[-1], dtype)
        for b, v in zip(reversed(boundaries), reversed(values[:-1])):
            out = fnp.where(fnp.less_equal(x, fnp.astype(np.asarray(b), x.dtype)), np.asarray(v, dtype), out)
        return fnp.asarray(out, dtype=dtype)
    return ops.apply("PiecewiseConstant", fn, [x], name=name, boundaries=tuple(boundaries), values=tuple(values),
                     dtype=dtype)
