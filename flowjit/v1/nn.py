"""``tf.nn``: activations, softmax and cross-entropies, convolution, pooling, dropout and more.

Each is a graph op over ``fj.nn`` (or ``fj.*``), with TensorFlow 1.x's signatures:
``softmax_cross_entropy_with_logits(labels=..., logits=...)`` returns the per-example
loss, computed through ``log_softmax`` (exact for large logits); ``dropout`` takes
``keep_prob`` and draws a new mask on every run.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import flowjit.nn as fjnn
from flowjit.ir.errors import FlowjitTypeError
from flowjit.nn.conv import conv2d_arguments
from flowjit.tracer import random as fjrandom
from flowjit.tracer.numpy import namespace as fnp
from flowjit.tracer.numpy.sorting_searching import top_k as fj_top_k
from flowjit.v1 import candidate_sampling, ops, rnn_cell  # noqa: F401  (tf.nn.rnn_cell)
from flowjit.v1.candidate_sampling import (  # noqa: F401  (tf.nn's)
    compute_accidental_hits,
    log_uniform_candidate_sampler,
    uniform_candidate_sampler,
)
from flowjit.v1.graph import Operation, Tensor
from flowjit.v1.ops import apply, convert_to_tensor, sigmoid, tanh  # noqa: F401  (tf.nn.sigmoid, tf.nn.tanh)
from flowjit.v1.rnn import bidirectional_dynamic_rnn, dynamic_rnn, static_rnn  # noqa: F401  (tf.nn's)


def relu(features: Any, name: str | None = None) -> Tensor:
    """max(x, 0)."""
    return apply("Relu", fjnn.relu, [features], name=name)


def relu6(features: Any, name: str | None = None) -> Tensor:
    """min(max(x, 0), 6)."""
    return apply("Relu6", lambda x: fnp.minimum(fnp.maximum(x, 0), 6), [features], name=name)


def elu(features: Any, name: str | None = None) -> Tensor:
    """x if x > 0 else exp(x) - 1."""
    return apply("Elu", lambda x: fnp.where(fnp.greater(x, 0), x, fnp.expm1(fnp.minimum(x, 0))), [features],
                 name=name)


def selu(features: Any, name: str | None = None) -> Tensor:
    a, s = 1.6732632423543772, 1.0507009873554805
    return apply("Selu", lambda x: fnp.multiply(s, fnp.where(fnp.greater(x, 0), x,
                                                              fnp.multiply(a, fnp.expm1(fnp.minimum(x, 0))))),
                 [features], name=name)


def leaky_relu(features: Any, alpha: float = 0.2, name: str | None = None) -> Tensor:
    return apply("LeakyRelu", lambda x, alpha: fnp.where(fnp.greater(x, 0), x, fnp.multiply(alpha, x)), [features],
                 name=name, alpha=float(alpha))


def softplus(features: Any, name: str | None = None) -> Tensor:
    return ops.softplus(features, name)


def softsign(features: Any, name: str | None = None) -> Tensor:
    return apply("Softsign", lambda x: fnp.divide(x, fnp.add(fnp.abs(x), 1)), [features], name=name)


def gelu(features: Any, approximate: bool = False, name: str | None = None) -> Tensor:
    return apply("Gelu", lambda x, approximate: fjnn.gelu(x, approximate=approximate), [features], name=name,
                 approximate=approximate)


def softmax(logits: Any, axis: int = -1, name: str | None = None, dim: int | None = None) -> Tensor:
    """exp(x) / sum(exp(x)) along ``axis`` (the last by default)."""
    return apply("Softmax", lambda x, axis: fjnn.softmax(x, axis=axis), [logits], name=name,
                 axis=dim if dim is not None else axis)


def log_softmax(logits: Any, axis: int = -1, name: str | None = None, dim: int | None = None) -> Tensor:
    return apply("LogSoftmax", lambda x, axis: fjnn.log_softmax(x, axis=axis), [logits], name=name,
                 axis=dim if dim is not None else axis)


def _need(labels: Any, logits: Any, name: str) -> None:
    if labels is None or logits is None:
        raise ValueError(f"{name} needs labels=... and logits=... (keyword arguments, as in TensorFlow)")


def softmax_cross_entropy_with_logits(_sentinel: Any = None, labels: Any = None, logits: Any = None, dim: int = -1,
                                      name: str | None = None, axis: int | None = None) -> Tensor:
    """Per-example cross-entropy of softmax(logits) against probability ``labels`` (same shape)."""
    if _sentinel is not None:
        raise ValueError("softmax_cross_entropy_with_logits takes only keyword arguments (labels=..., logits=...)")
    _need(labels, logits, "softmax_cross_entropy_with_logits")
    ax = axis if axis is not None else dim

    def fn(lab: Any, lg: Any, axis: int) -> Any:
        return fnp.negative(fnp.sum(fnp.multiply(lab, fjnn.log_softmax(lg, axis=axis)), axis=axis))
    lab_t, lg_t = ops._tensors(labels, logits)
    return apply("SoftmaxCrossEntropyWithLogits", fn, [lab_t, lg_t], name=name, axis=ax)


softmax_cross_entropy_with_logits_v2 = softmax_cross_entropy_with_logits


def sparse_softmax_cross_entropy_with_logits(_sentinel: Any = None, labels: Any = None, logits: Any = None,
                                             name: str | None = None) -> Tensor:
    """Per-example cross-entropy of softmax(logits) against integer class ``labels``."""
    if _sentinel is not None:
        raise ValueError("sparse_softmax_cross_entropy_with_logits takes only keyword arguments")
    _need(labels, logits, "sparse_softmax_cross_entropy_with_logits")
    lab, lg = convert_to_tensor(labels), convert_to_tensor(logits)
    if lab.dtype.is_float:
        raise FlowjitTypeError(f"sparse_softmax_cross_entropy_with_logits: labels must be integers, got {lab.dtype}; "
                               "for one-hot or probability labels use softmax_cross_entropy_with_logits")
    return apply("SparseSoftmaxCrossEntropyWithLogits",
                 lambda y, z: fjnn.softmax_cross_entropy(z, y, reduction="none"), [lab, lg], name=name)


def sigmoid_cross_entropy_with_logits(_sentinel: Any = None, labels: Any = None, logits: Any = None,
                                      name: str | None = None) -> Tensor:
    """Elementwise ``max(x, 0) - x * z + log(1 + exp(-|x|))`` for logits x, labels z."""
    _need(labels, logits, "sigmoid_cross_entropy_with_logits")

    def fn(z: Any, x: Any) -> Any:
        softplus_neg_abs = fnp.log1p(fnp.exp(fnp.negative(fnp.abs(x))))
        return fnp.add(fnp.subtract(fnp.maximum(x, 0), fnp.multiply(x, z)), softplus_neg_abs)
    lab_t, lg_t = ops._tensors(labels, logits)
    return apply("SigmoidCrossEntropyWithLogits", fn, [lab_t, lg_t], name=name)


def l2_loss(t: Any, name: str | None = None) -> Tensor:
    """sum(t ** 2) / 2."""
    return apply("L2Loss", lambda x: fnp.multiply(fnp.sum(fnp.square(x)), 0.5), [t], name=name)


def l2_normalize(x: Any, axis: Any = None, epsilon: float = 1e-12, name: str | None = None, dim: Any = None) -> Tensor:
    ax = axis if axis is not None else dim
    return apply("L2Normalize", lambda v, axis, eps: fnp.multiply(
        v, fnp.rsqrt(fnp.maximum(fnp.sum(fnp.square(v), axis=axis, keepdims=True), eps))), [x], name=name,
        axis=ops._axis(ax, None), eps=float(epsilon))


def bias_add(value: Any, bias: Any, data_format: str | None = None, name: str | None = None) -> Tensor:
    """value + bias, the bias along the last (channel) axis."""
    if data_format not in (None, "NHWC", "N...C"):
        raise FlowjitTypeError(f"bias_add: data_format={data_format!r}; flowjit uses channels-last (NHWC)")
    return apply("BiasAdd", fnp.add, [value, bias], name=name)


def xw_plus_b(x: Any, weights: Any, biases: Any, name: str | None = None) -> Tensor:
    """``matmul(x, weights) + biases`` (a dense layer's affine part)."""
    return bias_add(ops.matmul(x, weights), biases, name=name or "xw_plus_b")


def moments(x: Any, axes: Any, shift: Any = None, name: str | None = None, keep_dims: bool = False,
            keepdims: bool | None = None) -> tuple[Tensor, Tensor]:
    """(mean, variance) of ``x`` over ``axes``."""
    keep = bool(keepdims if keepdims is not None else keep_dims)

    def fn(v: Any, axes: tuple, keep: bool) -> list[Any]:
        m = fnp.mean(v, axis=axes, keepdims=True)
        var = fnp.mean(fnp.square(fnp.subtract(v, m)), axis=axes, keepdims=keep)
        return [m if keep else fnp.squeeze(m, axes), var]
    return tuple(apply("Moments", fn, [x], name=name, num_outputs=2, axes=tuple(axes), keep=keep))


def batch_normalization(x: Any, mean: Any, variance: Any, offset: Any, scale: Any, variance_epsilon: float,
                        name: str | None = None) -> Tensor:
    """``scale * (x - mean) / sqrt(variance + eps) + offset`` (offset/scale may be None)."""
    inputs = [x, mean, variance] + [t for t in (offset, scale) if t is not None]
    has_off, has_scale = offset is not None, scale is not None

    def fn(v: Any, m: Any, var: Any, *rest: Any, eps: float) -> Any:
        y = fnp.multiply(fnp.subtract(v, m), fnp.rsqrt(fnp.add(var, eps)))
        rest = list(rest)
        off = rest.pop(0) if has_off else None
        if has_scale:
            y = fnp.multiply(y, rest.pop(0))
        return fnp.add(y, off) if off is not None else y
    return apply("BatchNorm", fn, inputs, name=name, eps=float(variance_epsilon))


def dropout(x: Any, keep_prob: Any = None, noise_shape: Any = None, seed: Any = None, name: str | None = None,
            rate: Any = None) -> Tensor:
    """Zero each element with probability ``1 - keep_prob`` and scale the rest by ``1/keep_prob``;
    a new mask on every run (``keep_prob`` may be a placeholder, e.g. 1.0 at test time)."""
    if keep_prob is None:
        if rate is None:
            raise ValueError("tf.nn.dropout needs keep_prob (or rate)")
        keep_prob = ops.subtract(1.0, rate)
    xt = convert_to_tensor(x)
    kp = convert_to_tensor(keep_prob, dtype_hint=xt.dtype)
    graph = xt.graph

    def compute(ev: Any, op: Operation, xs: list[Any]) -> list[Any]:
        v, k = xs
        shape = tuple(fnp.shape(v)) if noise_shape is None else tuple(int(s) for s in noise_shape)
        keep = fnp.less(fjrandom.uniform(ev.random_key(op), shape, "float32"), k)
        return [fnp.where(keep, fnp.divide(v, k), fnp.zeros_like(v))]

    op = graph.create_op("Dropout", [xt, kp], compute, name=name or "dropout", attrs={"seed": seed})
    return op.outputs[0]


def _padding(padding: Any) -> Any:
    if isinstance(padding, str):
        return padding.upper()
    return padding


def conv2d(input: Any, filter: Any = None, strides: Any = None, padding: Any = None, use_cudnn_on_gpu: bool = True,
           data_format: str = "NHWC", dilations: Any = None, name: str | None = None,
           filters: Any = None) -> Tensor:
    """2-D convolution of NHWC ``input`` with an HWIO ``filter`` (TensorFlow 2 calls it
    ``filters``): ``fj.nn.conv2d`` in the graph, with its arguments checked here, so a
    bad ``strides``, ``padding`` or ``data_format`` fails where the graph is built."""
    x, w = ops._tensors(input, filter if filter is not None else filters)
    shapes = f" of input {x.shape.as_list()} and filters {w.shape.as_list()}"
    st, pad, dil = conv2d_arguments(strides, padding, data_format, dilations, shapes)
    if not isinstance(pad, str):
        pad = ((0, 0), *pad, (0, 0))  # back to TensorFlow's NHWC pairs, which fj.nn.conv2d takes
    return apply("Conv2D", lambda x, k, st, pad, dil: fjnn.conv2d(x, k, st, pad, dilations=dil), [x, w], name=name,
                 st=st, pad=pad, dil=dil)


def depthwise_conv2d(input: Any, filter: Any, strides: Any, padding: Any, rate: Any = None, name: str | None = None,
                     data_format: str | None = None, dilations: Any = None) -> Tensor:
    """Each input channel convolved with its own filters (MobileNet's depthwise step):
    ``filter`` [KH, KW, C, multiplier] gives C*multiplier channels, channel c's in
    c*multiplier...; ``rate`` (TensorFlow 1's name) or ``dilations`` the dilation;
    ``fj.nn.depthwise_conv2d`` in the graph, a grouped convolution of C groups."""
    x, w = ops._tensors(input, filter)
    shapes = f" of input {x.shape.as_list()} and filter {w.shape.as_list()}"
    dil = dilations if dilations is not None else rate
    st, pad, dil = conv2d_arguments(strides, padding, data_format or "NHWC", dil, shapes)
    if not isinstance(pad, str):
        pad = ((0, 0), *pad, (0, 0))
    return apply("DepthwiseConv2dNative",
                 lambda x, k, st, pad, dil: fjnn.depthwise_conv2d(x, k, st, pad, dilations=dil), [x, w],
                 name=name, st=st, pad=pad, dil=dil)


def separable_conv2d(input: Any, depthwise_filter: Any, pointwise_filter: Any, strides: Any, padding: Any,
                     rate: Any = None, name: str | None = None, data_format: str | None = None,
                     dilations: Any = None) -> Tensor:
    """A depthwise convolution (``depthwise_filter`` [KH, KW, C, multiplier], with
    ``strides`` and ``rate``) then a 1x1 one (``pointwise_filter`` [1, 1, C*multiplier,
    out]) mixing its channels, as ``tf.nn.separable_conv2d``."""
    x = ops._tensors(input)[0]
    with x.graph.name_scope(name or "separable_conv2d"):
        y = depthwise_conv2d(input, depthwise_filter, strides, padding, rate=rate, data_format=data_format,
                             dilations=dilations, name="depthwise")
        return conv2d(y, pointwise_filter, strides=[1, 1, 1, 1], padding="VALID", name="pointwise")


def _pool(type: str, fn: Any, value: Any, ksize: Any, strides: Any, padding: str, data_format: str,
          name: str | None) -> Tensor:
    if data_format != "NHWC":
        raise FlowjitTypeError(f"{type}: data_format={data_format!r}; flowjit uses NHWC")
    win = tuple(ksize)[1:3] if len(tuple(ksize)) == 4 else tuple(ksize)
    st = tuple(strides)[1:3] if len(tuple(strides)) == 4 else tuple(strides)
    return apply(type, lambda x, win, st, pad: fn(x, win, st, pad), [value], name=name, win=win, st=st,
                 pad=padding.upper())


def max_pool(value: Any, ksize: Any, strides: Any, padding: str, data_format: str = "NHWC",
             name: str | None = None) -> Tensor:
    """The maximum over windows of NHWC ``value`` (``ksize``/``strides`` as [1, h, w, 1])."""
    return _pool("MaxPool", fjnn.max_pool, value, ksize, strides, padding, data_format, name)


def avg_pool(value: Any, ksize: Any, strides: Any, padding: str, data_format: str = "NHWC",
             name: str | None = None) -> Tensor:
    """The mean over windows of NHWC ``value``."""
    return _pool("AvgPool", fjnn.avg_pool, value, ksize, strides, padding, data_format, name)


def embedding_lookup(params: Any, ids: Any, partition_strategy: str = "mod", name: str | None = None,
                     validate_indices: bool = True, max_norm: Any = None) -> Tensor:
    """Rows of ``params`` at ``ids``; ``params`` one tensor or a list of shards of one table
    (each a variable of its own, as a sharded embedding's are), split as
    ``partition_strategy`` says: "mod" (row i in shard i % P at i // P) or "div" (the
    shards consecutive ranges of rows, the first ones a row longer where P does not divide
    the rows)."""
    shards = list(params) if isinstance(params, (list, tuple)) else [params]
    if len(shards) == 1:
        return ops.gather(shards[0], ids, name=name)
    if partition_strategy not in ("mod", "div"):
        raise ValueError(f"tf.nn.embedding_lookup: partition_strategy={partition_strategy!r} must be 'mod' or 'div'")
    tensors = ops._tensors(*shards)
    sizes = [t.shape.as_list()[0] for t in tensors]
    if None in sizes:
        raise ValueError(f"tf.nn.embedding_lookup: sharded params need static row counts, got {sizes}")

    def fn(i: Any, *tables: Any, strategy: str, sizes: tuple) -> Any:
        i = fnp.astype(i, "int64")
        p, total = len(tables), sum(sizes)
        if strategy == "mod":
            shard, row = fnp.remainder(i, p), fnp.floor_divide(i, p)
        else:
            big, extra = total // p + 1, total % p   # the first `extra` shards hold `big` rows
            small = max(big - 1, 1)                 # (a divisor where no shard is short of rows)
            low = i < big * extra
            shard = fnp.where(low, fnp.floor_divide(i, big), extra + fnp.floor_divide(i - big * extra, small))
            row = fnp.where(low, fnp.remainder(i, big), fnp.remainder(i - big * extra, small))
        out = fnp.take(tables[0], row, axis=0)
        for k in range(1, p):
            here = fnp.reshape(fnp.equal(shard, k), (*fnp.shape(i), *[1] * (len(fnp.shape(out)) - len(fnp.shape(i)))))
            out = fnp.where(here, fnp.take(tables[k], row, axis=0), out)
        return out
    return ops.apply("GatherSharded", fn, [ids, *tensors], name=name, strategy=partition_strategy,
                     sizes=tuple(sizes))


def _sampled_logits(weights: Any, biases: Any, labels: Any, inputs: Any, num_sampled: int, num_classes: int,
                    num_true: int, sampled_values: Any, remove_accidental_hits: bool, partition_strategy: str,
                    seed: Any) -> tuple[Tensor, Tensor]:
    """TensorFlow's ``_compute_sampled_logits``: the logits of each row's true classes and of
    the sampled ones, each less the log of its expected count, and their targets (1/num_true
    for the true classes, 0 for the sampled)."""
    (labels,) = ops._tensors(labels)
    labels = labels if labels.dtype.name == "int64" else ops.cast(labels, "int64")
    if sampled_values is None:
        sampled_values = log_uniform_candidate_sampler(labels, num_true, num_sampled, True, num_classes, seed=seed)
    sampled, true_expected, sampled_expected = (ops.stop_gradient(v) for v in sampled_values)
    true_w = embedding_lookup(weights, labels, partition_strategy=partition_strategy)     # [batch, num_true, dim]
    true_b = embedding_lookup(biases, labels, partition_strategy=partition_strategy)      # [batch, num_true]
    sampled_w = embedding_lookup(weights, sampled, partition_strategy=partition_strategy)  # [num_sampled, dim]
    sampled_b = embedding_lookup(biases, sampled, partition_strategy=partition_strategy)
    true_logits = ops.reduce_sum(ops.expand_dims(inputs, 1) * true_w, axis=2) + true_b
    sampled_logits = ops.matmul(inputs, sampled_w, transpose_b=True) + sampled_b
    if remove_accidental_hits:
        hit = ops.apply("AccidentalHits", candidate_sampling.accidental_hit_mask, [labels, sampled])
        sampled_logits = ops.where(hit, sampled_logits + float(-np.finfo(np.float32).max), sampled_logits)
    true_logits = true_logits - ops.log(true_expected)
    sampled_logits = sampled_logits - ops.log(sampled_expected)
    logits = ops.concat([true_logits, sampled_logits], 1)
    targets = ops.concat([ops.ones_like(true_logits) / float(num_true), ops.zeros_like(sampled_logits)], 1)
    return logits, targets


def nce_loss(weights: Any, biases: Any, labels: Any, inputs: Any, num_sampled: int, num_classes: int,
             num_true: int = 1, sampled_values: Any = None, remove_accidental_hits: bool = False,
             partition_strategy: str = "mod", name: str = "nce_loss") -> Tensor:
    """Noise-contrastive estimation's loss a row (word2vec's): ``weights`` [num_classes,
    dim] (or its shards), ``biases`` [num_classes], ``labels`` [batch, num_true] class ids,
    ``inputs`` [batch, dim]; ``num_sampled`` classes drawn (log-uniform, without repeats)
    unless ``sampled_values`` gives a sampler's three outputs. The sigmoid cross entropy of
    the true and sampled logits (each less the log of its expected count) against 1/num_true
    and 0, summed over a row: [batch] losses."""
    with ops._tensors(inputs)[0].graph.name_scope(name):
        logits, targets = _sampled_logits(weights, biases, labels, inputs, num_sampled, num_classes, num_true,
                                          sampled_values, remove_accidental_hits, partition_strategy, None)
        return ops.reduce_sum(sigmoid_cross_entropy_with_logits(labels=targets, logits=logits), axis=1)


def sampled_softmax_loss(weights: Any, biases: Any, labels: Any, inputs: Any, num_sampled: int, num_classes: int,
                         num_true: int = 1, sampled_values: Any = None, remove_accidental_hits: bool = True,
                         partition_strategy: str = "mod", name: str = "sampled_softmax_loss",
                         seed: Any = None) -> Tensor:
    """The softmax cross entropy over each row's true classes and ``num_sampled`` drawn ones
    (a large vocabulary's training loss), arguments as ``nce_loss``'s; a drawn class that is
    the row's own true class is left out of its row (``remove_accidental_hits``). [batch]
    losses."""
    with ops._tensors(inputs)[0].graph.name_scope(name):
        logits, targets = _sampled_logits(weights, biases, labels, inputs, num_sampled, num_classes, num_true,
                                          sampled_values, remove_accidental_hits, partition_strategy, seed)
        return softmax_cross_entropy_with_logits_v2(labels=ops.stop_gradient(targets), logits=logits)


def in_top_k(predictions: Any, targets: Any, k: int, name: str | None = None) -> Tensor:
    """Whether each target class is among the k largest predictions of its row."""
    def fn(p: Any, t: Any, k: int) -> Any:
        target = fnp.take_along_axis(p, fnp.expand_dims(fnp.astype(t, "int32"), -1), axis=-1)
        better = fnp.sum(fnp.astype(fnp.greater(p, target), "int32"), axis=-1)
        return fnp.less(better, k)
    return apply("InTopK", fn, [predictions, targets], name=name, k=int(k))


def top_k(input: Any, k: int = 1, sorted: bool = True, name: str | None = None) -> tuple[Tensor, Tensor]:
    """The ``k`` largest entries of each row (last axis) of ``input``, largest first, and
    their indices (int32); ties keep the lower index first."""
    values, indices = ops.apply("TopKV2", lambda x, k: _top_k(x, k), [input], name=name, num_outputs=2, k=int(k))
    return values, indices


def _top_k(x: Any, k: int) -> tuple[Any, Any]:
    values, indices = fj_top_k(x, k)
    return values, fnp.astype(indices, "int32")


def swish(features: Any, name: str | None = None) -> Tensor:
    """``x * sigmoid(x)`` (SiLU)."""
    return apply("Swish", lambda x: fnp.multiply(x, fnp.logistic(x)), [features], name=name)


def zero_fraction(value: Any, name: str | None = None) -> Tensor:
    """The fraction of ``value``'s entries that are zero (float32), as a sparsity summary."""
    return apply("ZeroFraction", lambda x: fnp.mean(fnp.astype(fnp.equal(x, 0), "float32")), [value], name=name)


def local_response_normalization(input: Any, depth_radius: int = 5, bias: float = 1.0, alpha: float = 1.0,
                                 beta: float = 0.5, name: str | None = None) -> Tensor:
    """AlexNet's local response normalization over the channels of NHWC ``input``:
    ``x / (bias + alpha * s) ** beta``, ``s`` the sum of squares of the channels within
    ``depth_radius`` of each (fewer at the edges)."""
    def fn(x: Any, r: int, bias: float, alpha: float, beta: float) -> Any:
        sq = fnp.square(x)
        c = fnp.shape(x)[-1]
        padded = fnp.pad(sq, [(0, 0)] * (fnp.ndim(x) - 1) + [(r, r)])
        total = sum(padded[..., k:k + c] for k in range(2 * r + 1))
        return fnp.divide(x, fnp.power(fnp.add(bias, fnp.multiply(alpha, total)), beta))
    return apply("LRN", fn, [input], name=name, r=int(depth_radius), bias=float(bias), alpha=float(alpha),
                 beta=float(beta))


lrn = local_response_normalization


def conv2d_transpose(value: Any, filter: Any = None, output_shape: Any = None, strides: Any = None,
                     padding: str = "SAME", data_format: str = "NHWC", name: str | None = None,
                     filters: Any = None, dilations: Any = None) -> Tensor:
    """The transpose of ``tf.nn.conv2d`` (its gradient with respect to its input, a
    "deconvolution"): ``value`` [batch, h, w, out_channels] and ``filter`` [fh, fw,
    out_channels, in_channels] (conv2d's HWIO filter of the forward convolution) give
    ``output_shape``, the forward convolution's input shape (static)."""
    x, w = ops._tensors(value, filter if filter is not None else filters)
    if output_shape is None:
        raise ValueError("tf.nn.conv2d_transpose needs output_shape: the shape of the convolution's input")
    out_shape = tuple(ops._static_ints(output_shape, "tf.nn.conv2d_transpose's output_shape"))
    shapes = f" of output {list(out_shape)} and filters {w.shape.as_list()}"
    st, pad, dil = conv2d_arguments(strides, padding, data_format, dilations, shapes)
    if not isinstance(pad, str):
        pad = ((0, 0), *pad, (0, 0))

    return apply("Conv2DBackpropInput",
                 lambda v, k, out_shape, st, pad, dil: fjnn.conv2d_transpose(v, k, out_shape, st, pad, dilations=dil),
                 [x, w], name=name, out_shape=out_shape, st=st, pad=pad, dil=dil)


def conv1d(value: Any = None, filters: Any = None, stride: Any = None, padding: Any = None,
           use_cudnn_on_gpu: bool | None = None, data_format: str | None = None, name: str | None = None,
           input: Any = None, dilations: Any = None) -> Tensor:
    """1-D convolution of ``value`` [batch, width, channels] with ``filters`` [width,
    channels, out] (``tf.nn.conv1d``; TensorFlow 2 names the first argument ``input``):
    ``fj.nn.conv1d`` in the graph, a 2-D convolution over one row."""
    x, w = ops._tensors(value if value is not None else input, filters)
    fmt = data_format or "NWC"
    pad = padding if isinstance(padding, str) else tuple(tuple(p) for p in padding)
    return apply("Conv1D", lambda x, k, st, pad, fmt, dil: fjnn.conv1d(x, k, st, pad, fmt, dilations=dil), [x, w],
                 name=name, st=stride, pad=pad, fmt=fmt, dil=dilations)
