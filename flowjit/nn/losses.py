"""Losses and metrics: ``mse``, ``softmax_cross_entropy``, ``accuracy``.

Losses reduce to a scalar by default (``reduction="mean"``, as in Keras and PyTorch),
so ``fj.grad`` applies directly; ``"sum"`` and ``"none"`` are there too.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from flowjit.ir.dtypes import dtype as as_dtype
from flowjit.ir.errors import FlowjitTypeError
from flowjit.nn.functional import log_softmax
from flowjit.tracer.numpy import namespace as fnp


def _reduce(loss: Any, reduction: str, name: str) -> Any:
    if reduction == "mean":
        return fnp.mean(loss)
    if reduction == "sum":
        return fnp.sum(loss)
    if reduction == "none":
        return loss
    raise FlowjitTypeError(f"{name}: reduction must be 'mean', 'sum' or 'none', got {reduction!r}")


def mse(predictions: Any, targets: Any, reduction: str = "mean") -> Any:
    """Mean squared error ``(predictions - targets) ** 2`` (elementwise with ``"none"``)."""
    d = fnp.subtract(predictions, targets)
    return _reduce(d * d, reduction, "mse")


def _one_hot_mask(labels: Any, logits_shape: tuple[int, ...], name: str) -> Any:
    # Integer labels compare against the class index, so the loss stays elementwise
    # work that fuses with the log-softmax (no gather, no scatter in the gradient).
    if tuple(fnp.shape(labels)) != tuple(logits_shape[:-1]):
        raise FlowjitTypeError(f"{name}: integer labels of shape {list(fnp.shape(labels))} must have the logits' "
                               f"shape without the class axis, {list(logits_shape[:-1])}")
    classes = fnp.iota("int32", logits_shape, len(logits_shape) - 1)
    return fnp.equal(classes, fnp.expand_dims(fnp.astype(labels, "int32"), -1))


def softmax_cross_entropy(logits: Any, labels: Any, reduction: str = "mean") -> Any:
    """Cross-entropy of ``softmax(logits)`` (classes on the last axis) against ``labels``.

    ``labels`` are integer class indices (shape of logits without the last axis) or
    probabilities / one-hot rows (the logits' shape). Computed through ``log_softmax``,
    so large logits neither overflow nor give NaN.
    """
    shape = tuple(fnp.shape(logits))
    if not shape:
        raise FlowjitTypeError("softmax_cross_entropy: logits must have a class axis, got a scalar")
    logp = log_softmax(logits, axis=-1)
    label_dtype = as_dtype(labels.dtype if hasattr(labels, "dtype") else np.asarray(labels).dtype)
    if label_dtype.is_float:
        if tuple(fnp.shape(labels)) != shape:
            raise FlowjitTypeError(f"softmax_cross_entropy: probability labels of shape {list(fnp.shape(labels))} "
                                   f"must match the logits' shape {list(shape)} (or pass integer class indices)")
        per_example = -fnp.sum(labels * logp, axis=-1)
    else:
        mask = _one_hot_mask(labels, shape, "softmax_cross_entropy")
        per_example = -fnp.sum(fnp.where(mask, logp, fnp.zeros_like(logp)), axis=-1)
    return _reduce(per_example, reduction, "softmax_cross_entropy")


def accuracy(logits: Any, labels: Any) -> Any:
    """Fraction of rows whose largest logit is the label (integer indices or one-hot rows)."""
    shape = tuple(fnp.shape(logits))
    if tuple(fnp.shape(labels)) == shape:
        labels = fnp.argmax(labels, axis=-1)
    predicted = fnp.argmax(logits, axis=-1)
    return fnp.mean(fnp.astype(fnp.equal(predicted, fnp.astype(labels, predicted.dtype)), "float32"))
