"""``tf.nn``'s candidate sampling: the samplers of word2vec's and a large softmax's training
(``log_uniform_candidate_sampler``, ``uniform_candidate_sampler``) and
``compute_accidental_hits``; the two losses built on them, ``nce_loss`` and
``sampled_softmax_loss``, are in ``flowjit.v1.nn``.

A sampler is one random op with TensorFlow 1.x's three outputs: ``num_sampled`` classes drawn
from its distribution over [0, range_max), and the expected number of times each true class and
each sampled one would have been drawn. With ``unique=True`` it draws as TensorFlow's does, one
class at a time, rejecting those it already has (a loop in the compiled program), and the
expected count of a class of probability p is ``-expm1(tries * log1p(-p))`` for the ``tries``
the draw took (``p * num_sampled`` where no draw was rejected). Draws differ from TensorFlow's
(another generator); their distribution and the counts' formulas are its.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from flowjit.ir.dtypes import dtype as as_dtype
from flowjit.tracer import random as fjrandom
from flowjit.tracer.control_flow import while_loop
from flowjit.tracer.numpy import namespace as fnp
from flowjit.v1 import ops
from flowjit.v1.graph import Operation, Tensor


def _log_uniform_draw(u: Any, range_max: int) -> Any:
    # TensorFlow's LogUniformSampler: exp(u * log(range_max + 1)) - 1, truncated.
    v = fnp.floor(fnp.exp(fnp.multiply(u, float(np.log1p(range_max))))) - 1
    return fnp.astype(fnp.clip(v, 0, range_max - 1), "int64")


def _log_uniform_probability(c: Any, range_max: int) -> Any:
    c = fnp.astype(c, "float64")
    return fnp.divide(fnp.log(fnp.divide(c + 2.0, c + 1.0)), float(np.log1p(range_max)))


def _uniform_draw(u: Any, range_max: int) -> Any:
    return fnp.astype(fnp.clip(fnp.floor(fnp.multiply(u, float(range_max))), 0, range_max - 1), "int64")


def _uniform_probability(c: Any, range_max: int) -> Any:
    return fnp.full(fnp.shape(c), 1.0 / range_max, "float64")


_DISTRIBUTIONS = {"LogUniformCandidateSampler": (_log_uniform_draw, _log_uniform_probability),
                  "UniformCandidateSampler": (_uniform_draw, _uniform_probability)}


def _sample(key: Any, true_classes: Any, kind: str, num_sampled: int, unique: bool, range_max: int) -> list[Any]:
    draw, probability = _DISTRIBUTIONS[kind]
    if not unique:
        sampled = draw(fjrandom.uniform(key, (num_sampled,), "float64"), range_max)
        tries = fnp.asarray(num_sampled, "int64")
    else:
        slots = fnp.arange(num_sampled, dtype="int64")

        def body(carry: tuple) -> tuple:
            found, tries, sampled, k = carry
            keys = fjrandom.split(k)
            c = draw(fjrandom.uniform(keys[1], (), "float64"), range_max)
            seen = fnp.any(fnp.logical_and(slots < found, fnp.equal(sampled, c)))
            sampled = fnp.where(fnp.logical_and(fnp.equal(slots, found), fnp.logical_not(seen)), c, sampled)
            return found + fnp.where(seen, 0, 1), tries + 1, sampled, keys[0]

        start = (fnp.asarray(0, "int64"), fnp.asarray(0, "int64"), fnp.zeros((num_sampled,), "int64"), key)
        _, tries, sampled, _ = while_loop(lambda carry: carry[0] < num_sampled, body, start)

    def expected(c: Any) -> Any:
        p = probability(c, range_max)
        n = fnp.astype(tries, "float64")
        rejected = -fnp.expm1(fnp.multiply(n, fnp.log1p(-p)))
        return fnp.astype(fnp.where(tries == num_sampled, p * float(num_sampled), rejected), "float32")

    return [sampled, expected(true_classes), expected(sampled)]


def _sampler(kind: str, what: str, true_classes: Any, num_true: int, num_sampled: int, unique: bool,
             range_max: int, seed: Any, name: str | None) -> tuple[Tensor, Tensor, Tensor]:
    if range_max < 1 or num_sampled < 0:
        raise ValueError(f"{what}: range_max={range_max} must be >= 1 and num_sampled={num_sampled} >= 0")
    if unique and num_sampled > range_max:
        raise ValueError(f"{what}: num_sampled={num_sampled} unique classes cannot be drawn from range_max="
                         f"{range_max}; draw at most range_max, or pass unique=False")
    (labels,) = ops._tensors(true_classes)
    if labels.shape.ndims != 2 or labels.shape.as_list()[1] != num_true:
        raise ValueError(f"{what}: true_classes must be [batch_size, num_true={num_true}], got {labels.shape}")
    g = labels.graph

    def compute(ev: Any, op: Operation, xs: list[Any]) -> list[Any]:
        return _sample(ev.random_key(op), xs[0], kind, num_sampled, unique, range_max)

    batch = labels.shape.as_list()[0]
    op = g.create_op(kind, [labels], compute, name=name, attrs={"seed": seed},
                     outputs=[((num_sampled,), as_dtype("int64")), ((batch, num_true), as_dtype("float32")),
                              ((num_sampled,), as_dtype("float32"))])
    return op.outputs[0], op.outputs[1], op.outputs[2]


def log_uniform_candidate_sampler(true_classes: Any, num_true: int, num_sampled: int, unique: bool,
                                  range_max: int, seed: Any = None, name: str | None = None
                                  ) -> tuple[Tensor, Tensor, Tensor]:
    """``num_sampled`` classes of [0, range_max) drawn with the log-uniform (Zipfian)
    distribution P(c) = log((c + 2) / (c + 1)) / log(range_max + 1), for classes sorted by
    decreasing frequency (word2vec's vocabulary), without repeats when ``unique``; with the
    expected counts of ``true_classes`` [batch, num_true] and of the sampled ones."""
    return _sampler("LogUniformCandidateSampler", "tf.nn.log_uniform_candidate_sampler", true_classes, num_true,
                    num_sampled, unique, range_max, seed, name)


def uniform_candidate_sampler(true_classes: Any, num_true: int, num_sampled: int, unique: bool, range_max: int,
                              seed: Any = None, name: str | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """As ``log_uniform_candidate_sampler``, every class of [0, range_max) equally likely."""
    return _sampler("UniformCandidateSampler", "tf.nn.uniform_candidate_sampler", true_classes, num_true,
                    num_sampled, unique, range_max, seed, name)


def accidental_hit_mask(true_classes: Any, sampled: Any) -> Any:
    """[batch, num_sampled]: whether each sampled class is one of the row's true classes."""
    return fnp.any(fnp.equal(fnp.expand_dims(true_classes, 2), fnp.reshape(sampled, (1, 1, -1))), axis=1)


def compute_accidental_hits(true_classes: Any, sampled_candidates: Any, num_true: int, seed: Any = None,
                            name: str | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """Where a sampled class is one of a row's true classes: (row indices int32, sampled
    positions int64, weights -FLT_MAX), in row-major order. Its length depends on the data:
    only a session's run gives it (a host op), as TensorFlow's does."""
    labels, sampled = ops._tensors(true_classes, sampled_candidates)

    def host(ev: Any, op: Operation, xs: list[Any]) -> list[Any]:
        t, s = (np.asarray(x) for x in xs)
        rows, cols = np.nonzero((t[:, :, None] == s.reshape(1, 1, -1)).any(axis=1))
        return [rows.astype(np.int32), cols.astype(np.int64), np.full(rows.shape, -np.finfo(np.float32).max,
                                                                      np.float32)]

    op = labels.graph.create_op("ComputeAccidentalHits", [labels, sampled], host, name=name, host=True,
                                outputs=[((None,), as_dtype("int32")), ((None,), as_dtype("int64")),
                                         ((None,), as_dtype("float32"))])
    return op.outputs[0], op.outputs[1], op.outputs[2]
