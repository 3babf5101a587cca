"""``tf.losses``: TensorFlow 1.x's loss functions (weighted, reduced to a scalar by default).

Each adds its loss to the ``LOSSES`` collection, as TensorFlow does, so
``tf.losses.get_total_loss()`` sums them (with the regularization losses).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from flowjit.tracer.numpy import namespace as fnp
from flowjit.v1 import nn, ops
from flowjit.v1.graph import GraphKeys, Tensor, get_default_graph


class Reduction:
    NONE = "none"
    SUM = "weighted_sum"
    MEAN = "weighted_mean"
    SUM_OVER_BATCH_SIZE = "weighted_sum_over_batch_size"
    SUM_BY_NONZERO_WEIGHTS = "weighted_sum_by_nonzero_weights"


def compute_weighted_loss(losses: Any, weights: Any = 1.0, scope: Any = None,
                          loss_collection: str = GraphKeys.LOSSES,
                          reduction: str = Reduction.SUM_BY_NONZERO_WEIGHTS) -> Tensor:
    """``losses * weights`` reduced as ``reduction`` says (TensorFlow's default: the sum over
    the count of nonzero weights, which is the mean with scalar weights)."""
    def fn(loss: Any, w: Any, reduction: str) -> Any:
        wl = fnp.multiply(loss, w)
        if reduction == Reduction.NONE:
            return wl
        total = fnp.sum(wl)
        if reduction == Reduction.SUM:
            return total
        if reduction == Reduction.MEAN:
            return fnp.divide(total, fnp.sum(fnp.multiply(fnp.ones_like(loss), w)))
        if reduction == Reduction.SUM_OVER_BATCH_SIZE:
            return fnp.divide(total, float(max(1, int(np.prod(fnp.shape(wl))))))
        nonzero = fnp.sum(fnp.astype(fnp.not_equal(fnp.multiply(fnp.ones_like(loss), w), 0), loss.dtype))
        return fnp.where(fnp.greater(nonzero, 0), fnp.divide(total, fnp.maximum(nonzero, 1)), 0)
    lt = ops.convert_to_tensor(losses)
    out = ops.apply("WeightedLoss", fn, [lt, ops.convert_to_tensor(weights, dtype_hint=lt.dtype)],
                    reduction=reduction)
    if loss_collection:
        get_default_graph().add_to_collection(loss_collection, out)
    return out


def mean_squared_error(labels: Any, predictions: Any, weights: Any = 1.0, scope: Any = None,
                       loss_collection: str = GraphKeys.LOSSES,
                       reduction: str = Reduction.SUM_BY_NONZERO_WEIGHTS) -> Tensor:
    """The mean of ``(labels - predictions) ** 2``."""
    return compute_weighted_loss(ops.squared_difference(predictions, labels), weights, scope, loss_collection,
                                 reduction)


def absolute_difference(labels: Any, predictions: Any, weights: Any = 1.0, scope: Any = None,
                        loss_collection: str = GraphKeys.LOSSES,
                        reduction: str = Reduction.SUM_BY_NONZERO_WEIGHTS) -> Tensor:
    return compute_weighted_loss(ops.abs(ops.subtract(predictions, labels)), weights, scope, loss_collection,
                                 reduction)


def softmax_cross_entropy(onehot_labels: Any, logits: Any, weights: Any = 1.0, label_smoothing: float = 0,
                          scope: Any = None, loss_collection: str = GraphKeys.LOSSES,
                          reduction: str = Reduction.SUM_BY_NONZERO_WEIGHTS) -> Tensor:
    labels = ops.convert_to_tensor(onehot_labels)
    if label_smoothing:
        n = labels.shape[-1]
        labels = ops.add(ops.multiply(labels, 1.0 - label_smoothing), label_smoothing / n)
    return compute_weighted_loss(nn.softmax_cross_entropy_with_logits(labels=labels, logits=logits), weights, scope,
                                 loss_collection, reduction)


def sparse_softmax_cross_entropy(labels: Any, logits: Any, weights: Any = 1.0, scope: Any = None,
                                 loss_collection: str = GraphKeys.LOSSES,
                                 reduction: str = Reduction.SUM_BY_NONZERO_WEIGHTS) -> Tensor:
    return compute_weighted_loss(nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits), weights,
                                 scope, loss_collection, reduction)


def sigmoid_cross_entropy(multi_class_labels: Any, logits: Any, weights: Any = 1.0, label_smoothing: float = 0,
                          scope: Any = None, loss_collection: str = GraphKeys.LOSSES,
                          reduction: str = Reduction.SUM_BY_NONZERO_WEIGHTS) -> Tensor:
    labels = ops.convert_to_tensor(multi_class_labels, dtype_hint=ops.convert_to_tensor(logits).dtype)
    if label_smoothing:
        labels = ops.add(ops.multiply(labels, 1.0 - label_smoothing), 0.5 * label_smoothing)
    return compute_weighted_loss(nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits), weights, scope,
                                 loss_collection, reduction)


def get_losses(scope: Any = None, loss_collection: str = GraphKeys.LOSSES) -> list[Tensor]:
    return get_default_graph().get_collection(loss_collection, scope)


def get_regularization_losses(scope: Any = None) -> list[Tensor]:
    return get_default_graph().get_collection(GraphKeys.REGULARIZATION_LOSSES, scope)


def get_total_loss(add_regularization_losses: bool = True, name: str = "total_loss") -> Tensor:
    """The sum of every collected loss (and regularization loss)."""
    losses = get_losses() + (get_regularization_losses() if add_regularization_losses else [])
    if not losses:
        raise ValueError("No losses were collected: build them with tf.losses.*")
    return ops.add_n(losses, name=name)
