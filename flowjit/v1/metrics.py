"""``tf.metrics``: streaming metrics, each a pair ``(value, update_op)`` over local
variables (``<name>/total``, ``<name>/count``) that ``tf.local_variables_initializer()``
resets: run ``update_op`` on each batch, then read ``value``, the metric over every batch
since, as TensorFlow 1.x's evaluation loops do. A metric with nothing counted yet is 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from flowjit.tracer.numpy import namespace as fnp
from flowjit.v1 import ops
from flowjit.v1.graph import GraphKeys, Tensor, get_default_graph
from flowjit.v1.variables import Variable, assign_add, variable_scope


def _local(name: str) -> Variable:
    return Variable(np.float32(0.0), trainable=False, name=name,
                    collections=[GraphKeys.LOCAL_VARIABLES, GraphKeys.METRIC_VARIABLES])


def _ratio(total: Any, count: Any) -> Tensor:
    return ops.apply("DivNoNan", lambda a, b: fnp.where(fnp.equal(b, 0), fnp.zeros_like(a), fnp.divide(a, b)),
                     [total, count])


def _add_to(collections: Sequence[str] | None, value: Any) -> None:
    for key in collections or ():
        get_default_graph().add_to_collection(key, value)


def mean(values: Any, weights: Any = None, metrics_collections: Sequence[str] | None = None,
         updates_collections: Sequence[str] | None = None, name: str | None = None) -> tuple[Tensor, Tensor]:
    """The (``weights``-weighted) mean of every value given to ``update_op`` so far."""
    with variable_scope(name, default_name="mean"):
        total, count = _local("total"), _local("count")
        v = ops.cast(ops.convert_to_tensor(values), "float32")
        if weights is None:
            n = ops.cast(ops.size(v), "float32")
        else:
            w = ops.apply("BroadcastWeights", lambda w, v: fnp.broadcast_to(fnp.astype(w, "float32"),
                                                                           fnp.shape(v)), [weights, v])
            v, n = v * w, ops.reduce_sum(w)
        new_total = assign_add(total, ops.reduce_sum(v))
        new_count = assign_add(count, n)
        value, update = _ratio(total, count), _ratio(new_total, new_count)
    _add_to(metrics_collections, value)
    _add_to(updates_collections, update)
    return value, update


def accuracy(labels: Any, predictions: Any, weights: Any = None, metrics_collections: Sequence[str] | None = None,
             updates_collections: Sequence[str] | None = None, name: str | None = None) -> tuple[Tensor, Tensor]:
    """The fraction of ``predictions`` equal to ``labels`` (weighted by ``weights``)."""
    hit = ops.cast(ops.equal(ops.convert_to_tensor(predictions), ops.cast(labels, ops.convert_to_tensor(
        predictions).dtype)), "float32")
    return mean(hit, weights, metrics_collections, updates_collections, name or "accuracy")


def _mean_error(error: Any, labels: Any, predictions: Any, weights: Any, metrics_collections: Any,
                updates_collections: Any, name: str) -> tuple[Tensor, Tensor]:
    diff = ops.subtract(ops.cast(labels, "float32"), ops.cast(predictions, "float32"))
    return mean(error(diff), weights, metrics_collections, updates_collections, name)


def mean_squared_error(labels: Any, predictions: Any, weights: Any = None,
                       metrics_collections: Sequence[str] | None = None,
                       updates_collections: Sequence[str] | None = None,
                       name: str | None = None) -> tuple[Tensor, Tensor]:
    """The mean of ``(labels - predictions) ** 2`` over every batch so far."""
    return _mean_error(ops.square, labels, predictions, weights, metrics_collections, updates_collections,
                       name or "mean_squared_error")


def mean_absolute_error(labels: Any, predictions: Any, weights: Any = None,
                        metrics_collections: Sequence[str] | None = None,
                        updates_collections: Sequence[str] | None = None,
                        name: str | None = None) -> tuple[Tensor, Tensor]:
    """The mean of ``|labels - predictions|`` over every batch so far."""
    return _mean_error(ops.abs, labels, predictions, weights, metrics_collections, updates_collections,
                       name or "mean_absolute_error")
