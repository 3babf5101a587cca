"""``tf.random``: TensorFlow 1.13+'s namespace of the random ops (``tf.random.normal`` is
``tf.random_normal``...), with ``categorical`` in TensorFlow 2's signature."""

from __future__ import annotations

from typing import Any

from flowjit.v1.candidate_sampling import log_uniform_candidate_sampler, uniform_candidate_sampler
from flowjit.v1.graph import Tensor
from flowjit.v1.ops import multinomial, random_gamma, random_normal, random_uniform, set_random_seed, truncated_normal
from flowjit.v1.train.input import random_shuffle

normal = random_normal
uniform = random_uniform
gamma = random_gamma
shuffle = random_shuffle
set_seed = set_random_seed


def categorical(logits: Any, num_samples: int, dtype: Any = None, seed: Any = None, name: str | None = None) -> Tensor:
    """``num_samples`` class indices for each row of ``logits`` [batch, classes], drawn with
    probabilities ``softmax(logits)`` (``tf.random.categorical``: ``tf.multinomial``, int64
    unless ``dtype``)."""
    return multinomial(logits, num_samples, seed=seed, name=name, output_dtype=dtype or "int64")


__all__ = ["categorical", "gamma", "log_uniform_candidate_sampler", "normal", "set_random_seed", "set_seed", "shuffle",
           "truncated_normal", "uniform", "uniform_candidate_sampler"]
