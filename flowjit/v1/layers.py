"""``tf.layers``: Dense, Conv2D, Conv2DTranspose, SeparableConv2D, pooling, Flatten, Dropout and
BatchNormalization layers over ``get_variable``.

A layer creates its variables on first call inside ``tf.variable_scope(<layer name>)``,
so ``tf.layers.dense(x, 10, name="logits")`` owns ``logits/kernel`` and ``logits/bias``
(Glorot-uniform kernel, zero bias: TensorFlow's defaults), and a second call with the
same name and ``reuse=True`` shares them.
"""

from __future__ import annotations

import abc
import re
from collections.abc import Callable
from typing import Any

import numpy as np

import flowjit.nn as fjnn
from flowjit.v1 import nn, ops
from flowjit.v1.control_flow import cond
from flowjit.v1.graph import GraphKeys, Tensor, get_default_graph
from flowjit.v1.variables import Variable, get_variable, ones_initializer, variable_scope, zeros_initializer


def _pair(v: Any) -> tuple[int, int]:
    return (int(v), int(v)) if isinstance(v, (int, np.integer)) else tuple(int(a) for a in v)


def _layer_name(base: str) -> str:
    g = get_default_graph()
    counts = g.__dict__.setdefault("_layer_counts", {})
    n = counts.get(base, 0)
    counts[base] = n + 1
    return base if n == 0 else f"{base}_{n}"


class Layer(abc.ABC):
    """A callable layer; ``variables``/``trainable_variables`` list what it created."""

    def __init__(self, name: str | None = None, trainable: bool = True, _reuse: Any = None, **kwargs: Any):
        self._given_name = name
        self.name = name
        self.trainable = trainable
        self._reuse = _reuse
        self.variables: list[Variable] = []
        self.built = False
        # The variables' dtype: the first inputs' when they are floating point, as in
        # TensorFlow (float64 inputs get float64 weights); float32 otherwise.
        self.dtype: Any = None

    @property
    def trainable_variables(self) -> list[Variable]:
        return [v for v in self.variables if v.trainable]

    @property
    def weights(self) -> list[Variable]:
        return list(self.variables)

    def add_weight(self, name: str, shape: Any, dtype: Any = None, initializer: Any = None, regularizer: Any = None,
                   trainable: bool = True) -> Variable:
        v = get_variable(name, shape, dtype=dtype or self.dtype, initializer=initializer, regularizer=regularizer,
                         trainable=trainable and self.trainable)
        if v not in self.variables:
            self.variables.append(v)
        return v

    def build(self, input_shape: Any) -> None:
        pass

    @abc.abstractmethod
    def call(self, inputs: Tensor, **kwargs: Any) -> Any:
        """The layer's output for ``inputs`` (its variables built)."""

    def __call__(self, inputs: Any, *args: Any, **kwargs: Any) -> Any:
        if self.name is None:
            self.name = _layer_name(self._default_name())
        x = ops.convert_to_tensor(inputs)
        with variable_scope(self.name, reuse=self._reuse if not self.built else True):
            if not self.built:
                if self.dtype is None and x.dtype.is_float:
                    self.dtype = x.dtype
                self.build(x.shape)
                self.built = True
            return self.call(x, *args, **kwargs)

    def _default_name(self) -> str:
        return re.sub(r"(?<!^)(?=[A-Z])", "_", type(self).__name__).lower()

    apply = __call__


class Dense(Layer):
    """``activation(inputs @ kernel + bias)`` over the last axis."""

    def __init__(self, units: int, activation: Callable[[Tensor], Tensor] | None = None, use_bias: bool = True,
                 kernel_initializer: Any = None, bias_initializer: Any = None, kernel_regularizer: Any = None,
                 bias_regularizer: Any = None, activity_regularizer: Any = None, kernel_constraint: Any = None,
                 bias_constraint: Any = None, trainable: bool = True, name: str | None = None, **kwargs: Any):
        super().__init__(name=name, trainable=trainable, **kwargs)
        self.units = int(units)
        self.activation = activation
        self.use_bias = use_bias
        self.kernel_initializer = kernel_initializer
        self.bias_initializer = bias_initializer or zeros_initializer()
        self.kernel_regularizer, self.bias_regularizer = kernel_regularizer, bias_regularizer

    def build(self, input_shape: Any) -> None:
        last = input_shape.as_list()[-1]
        if last is None:
            raise ValueError(f"Dense {self.name}: the last dimension of the inputs must be known, got {input_shape}")
        self.kernel = self.add_weight("kernel", [last, self.units], initializer=self.kernel_initializer,
                                      regularizer=self.kernel_regularizer)
        self.bias = self.add_weight("bias", [self.units], initializer=self.bias_initializer,
                                    regularizer=self.bias_regularizer) if self.use_bias else None

    def call(self, inputs: Tensor) -> Tensor:
        rank = inputs.shape.ndims
        if rank is not None and rank > 2:
            y = ops.tensordot(inputs, self.kernel, [[rank - 1], [0]])
        else:
            y = ops.matmul(inputs, self.kernel)
        if self.bias is not None:
            y = nn.bias_add(y, self.bias)
        return self.activation(y) if self.activation is not None else y


def dense(inputs: Any, units: int, activation: Any = None, use_bias: bool = True, kernel_initializer: Any = None,
          bias_initializer: Any = None, kernel_regularizer: Any = None, bias_regularizer: Any = None,
          activity_regularizer: Any = None, kernel_constraint: Any = None, bias_constraint: Any = None,
          trainable: bool = True, name: str | None = None, reuse: Any = None) -> Tensor:
    """A fully connected layer applied to ``inputs`` (``tf.layers.dense``)."""
    return Dense(units, activation, use_bias, kernel_initializer, bias_initializer, kernel_regularizer,
                 bias_regularizer, trainable=trainable, name=name, _reuse=reuse)(inputs)


class Conv2D(Layer):
    """2-D convolution over NHWC inputs with an HWIO kernel (+ bias, activation)."""

    def __init__(self, filters: int, kernel_size: Any, strides: Any = (1, 1), padding: str = "valid",
                 data_format: str = "channels_last", dilation_rate: Any = (1, 1), activation: Any = None,
                 use_bias: bool = True, kernel_initializer: Any = None, bias_initializer: Any = None,
                 kernel_regularizer: Any = None, bias_regularizer: Any = None, trainable: bool = True,
                 name: str | None = None, **kwargs: Any):
        super().__init__(name=name, trainable=trainable, **kwargs)
        if data_format != "channels_last":
            raise ValueError(f"Conv2D: data_format={data_format!r}; flowjit uses channels_last")
        self.filters, self.kernel_size, self.strides = int(filters), _pair(kernel_size), _pair(strides)
        self.padding, self.dilation_rate, self.activation, self.use_bias = padding.upper(), _pair(dilation_rate), \
            activation, use_bias
        self.kernel_initializer = kernel_initializer
        self.bias_initializer = bias_initializer or zeros_initializer()
        self.kernel_regularizer, self.bias_regularizer = kernel_regularizer, bias_regularizer

    def build(self, input_shape: Any) -> None:
        channels = input_shape.as_list()[-1]
        self.kernel = self.add_weight("kernel", [*self.kernel_size, channels, self.filters],
                                      initializer=self.kernel_initializer, regularizer=self.kernel_regularizer)
        self.bias = self.add_weight("bias", [self.filters], initializer=self.bias_initializer,
                                    regularizer=self.bias_regularizer) if self.use_bias else None

    def call(self, inputs: Tensor) -> Tensor:
        y = nn.conv2d(inputs, self.kernel, strides=[1, *self.strides, 1], padding=self.padding,
                      dilations=[1, *self.dilation_rate, 1])
        if self.bias is not None:
            y = nn.bias_add(y, self.bias)
        return self.activation(y) if self.activation is not None else y


def conv2d(inputs: Any, filters: int, kernel_size: Any, strides: Any = (1, 1), padding: str = "valid",
           data_format: str = "channels_last", dilation_rate: Any = (1, 1), activation: Any = None,
           use_bias: bool = True, kernel_initializer: Any = None, bias_initializer: Any = None,
           kernel_regularizer: Any = None, bias_regularizer: Any = None, trainable: bool = True,
           name: str | None = None, reuse: Any = None, **kwargs: Any) -> Tensor:
    return Conv2D(filters, kernel_size, strides, padding, data_format, dilation_rate, activation, use_bias,
                  kernel_initializer, bias_initializer, kernel_regularizer, bias_regularizer, trainable, name,
                  _reuse=reuse)(inputs)


class Conv2DTranspose(Layer):
    """A transposed 2-D convolution (a "deconvolution": a convolution's gradient with respect
    to its input) over NHWC inputs, TensorFlow's kernel [KH, KW, filters, in_channels] (+ bias,
    activation); each spatial size ``in * stride`` ("same") or ``in * stride + max(kernel -
    stride, 0)`` ("valid"), as ``tf.layers.Conv2DTranspose`` computes it."""

    def __init__(self, filters: int, kernel_size: Any, strides: Any = (1, 1), padding: str = "valid",
                 data_format: str = "channels_last", activation: Any = None, use_bias: bool = True,
                 kernel_initializer: Any = None, bias_initializer: Any = None, kernel_regularizer: Any = None,
                 bias_regularizer: Any = None, trainable: bool = True, name: str | None = None, **kwargs: Any):
        super().__init__(name=name, trainable=trainable, **kwargs)
        if data_format != "channels_last":
            raise ValueError(f"Conv2DTranspose: data_format={data_format!r}; flowjit uses channels_last")
        self.filters, self.kernel_size, self.strides = int(filters), _pair(kernel_size), _pair(strides)
        self.padding, self.activation, self.use_bias = padding.upper(), activation, use_bias
        self.kernel_initializer = kernel_initializer
        self.bias_initializer = bias_initializer or zeros_initializer()
        self.kernel_regularizer, self.bias_regularizer = kernel_regularizer, bias_regularizer

    def build(self, input_shape: Any) -> None:
        channels = input_shape.as_list()[-1]
        self.kernel = self.add_weight("kernel", [*self.kernel_size, self.filters, channels],
                                      initializer=self.kernel_initializer, regularizer=self.kernel_regularizer)
        self.bias = self.add_weight("bias", [self.filters], initializer=self.bias_initializer,
                                    regularizer=self.bias_regularizer) if self.use_bias else None

    def call(self, inputs: Tensor) -> Tensor:
        shape = inputs.shape.as_list()
        if None in shape[1:3]:
            raise ValueError(f"Conv2DTranspose: the input's height and width must be known, got {shape}")
        size = [n * s + (max(k - s, 0) if self.padding == "VALID" else 0)
                for n, k, s in zip(shape[1:3], self.kernel_size, self.strides)]

        def transpose(v: Any, k: Any, size: Any, strides: Any, padding: str, filters: int) -> Any:
            return fjnn.conv2d_transpose(v, k, (v.shape[0], *size, filters), strides, padding)
        y = ops.apply("Conv2DBackpropInput", transpose, [inputs, self.kernel], size=tuple(size),
                      strides=self.strides, padding=self.padding, filters=self.filters)
        if self.bias is not None:
            y = nn.bias_add(y, self.bias)
        return self.activation(y) if self.activation is not None else y


def conv2d_transpose(inputs: Any, filters: int, kernel_size: Any, strides: Any = (1, 1), padding: str = "valid",
                     data_format: str = "channels_last", activation: Any = None, use_bias: bool = True,
                     kernel_initializer: Any = None, bias_initializer: Any = None, kernel_regularizer: Any = None,
                     bias_regularizer: Any = None, trainable: bool = True, name: str | None = None,
                     reuse: Any = None, **kwargs: Any) -> Tensor:
    """``tf.layers.conv2d_transpose``: a ``Conv2DTranspose`` layer applied to ``inputs``."""
    return Conv2DTranspose(filters, kernel_size, strides, padding, data_format, activation, use_bias,
                           kernel_initializer, bias_initializer, kernel_regularizer, bias_regularizer, trainable,
                           name, _reuse=reuse)(inputs)


class SeparableConv2D(Layer):
    """A depthwise 2-D convolution (``depthwise_kernel`` [KH, KW, in, depth_multiplier], with
    the strides and dilation) then a 1x1 one (``pointwise_kernel`` [1, 1, in *
    depth_multiplier, filters]) mixing its channels (+ bias, activation), as
    ``tf.layers.SeparableConv2D``."""

    def __init__(self, filters: int, kernel_size: Any, strides: Any = (1, 1), padding: str = "valid",
                 data_format: str = "channels_last", dilation_rate: Any = (1, 1), depth_multiplier: int = 1,
                 activation: Any = None, use_bias: bool = True, depthwise_initializer: Any = None,
                 pointwise_initializer: Any = None, bias_initializer: Any = None,
                 depthwise_regularizer: Any = None, pointwise_regularizer: Any = None, bias_regularizer: Any = None,
                 trainable: bool = True, name: str | None = None, **kwargs: Any):
        super().__init__(name=name, trainable=trainable, **kwargs)
        if data_format != "channels_last":
            raise ValueError(f"SeparableConv2D: data_format={data_format!r}; flowjit uses channels_last")
        self.filters, self.kernel_size, self.strides = int(filters), _pair(kernel_size), _pair(strides)
        self.padding, self.dilation_rate, self.depth_multiplier = padding.upper(), _pair(dilation_rate), \
            int(depth_multiplier)
        self.activation, self.use_bias = activation, use_bias
        self.initializers = (depthwise_initializer, pointwise_initializer, bias_initializer or zeros_initializer())
        self.regularizers = (depthwise_regularizer, pointwise_regularizer, bias_regularizer)

    def build(self, input_shape: Any) -> None:
        channels = input_shape.as_list()[-1]
        self.depthwise_kernel = self.add_weight("depthwise_kernel", [*self.kernel_size, channels,
                                                                     self.depth_multiplier],
                                                initializer=self.initializers[0], regularizer=self.regularizers[0])
        self.pointwise_kernel = self.add_weight("pointwise_kernel", [1, 1, channels * self.depth_multiplier,
                                                                     self.filters],
                                                initializer=self.initializers[1], regularizer=self.regularizers[1])
        self.bias = self.add_weight("bias", [self.filters], initializer=self.initializers[2],
                                    regularizer=self.regularizers[2]) if self.use_bias else None

    def call(self, inputs: Tensor) -> Tensor:
        y = nn.separable_conv2d(inputs, self.depthwise_kernel, self.pointwise_kernel, strides=[1, *self.strides, 1],
                                padding=self.padding, rate=self.dilation_rate)
        if self.bias is not None:
            y = nn.bias_add(y, self.bias)
        return self.activation(y) if self.activation is not None else y


def separable_conv2d(inputs: Any, filters: int, kernel_size: Any, strides: Any = (1, 1), padding: str = "valid",
                     data_format: str = "channels_last", dilation_rate: Any = (1, 1), depth_multiplier: int = 1,
                     activation: Any = None, use_bias: bool = True, depthwise_initializer: Any = None,
                     pointwise_initializer: Any = None, bias_initializer: Any = None,
                     depthwise_regularizer: Any = None, pointwise_regularizer: Any = None,
                     bias_regularizer: Any = None, trainable: bool = True, name: str | None = None,
                     reuse: Any = None, **kwargs: Any) -> Tensor:
    """``tf.layers.separable_conv2d``: a ``SeparableConv2D`` layer applied to ``inputs``."""
    return SeparableConv2D(filters, kernel_size, strides, padding, data_format, dilation_rate, depth_multiplier,
                           activation, use_bias, depthwise_initializer, pointwise_initializer, bias_initializer,
                           depthwise_regularizer, pointwise_regularizer, bias_regularizer, trainable, name,
                           _reuse=reuse)(inputs)


class _Pooling2D(Layer):
    kind = "max"

    def __init__(self, pool_size: Any, strides: Any, padding: str = "valid", data_format: str = "channels_last",
                 name: str | None = None, **kwargs: Any):
        super().__init__(name=name, **kwargs)
        self.pool_size, self.strides, self.padding = _pair(pool_size), _pair(strides), padding.upper()

    def call(self, inputs: Tensor) -> Tensor:
        pool = nn.max_pool if self.kind == "max" else nn.avg_pool
        return pool(inputs, [1, *self.pool_size, 1], [1, *self.strides, 1], self.padding)


class MaxPooling2D(_Pooling2D):
    kind = "max"


class AveragePooling2D(_Pooling2D):
    kind = "avg"


def max_pooling2d(inputs: Any, pool_size: Any, strides: Any, padding: str = "valid",
                  data_format: str = "channels_last", name: str | None = None) -> Tensor:
    return MaxPooling2D(pool_size, strides, padding, data_format, name)(inputs)


def average_pooling2d(inputs: Any, pool_size: Any, strides: Any, padding: str = "valid",
                      data_format: str = "channels_last", name: str | None = None) -> Tensor:
    return AveragePooling2D(pool_size, strides, padding, data_format, name)(inputs)


class Flatten(Layer):
    """Reshape to (batch, everything else)."""

    def call(self, inputs: Tensor) -> Tensor:
        dims = inputs.shape.as_list()
        rest = dims[1:]
        if any(d is None for d in rest):
            raise ValueError(f"Flatten: the non-batch dimensions must be known, got {inputs.shape}")
        return ops.reshape(inputs, [-1, int(np.prod(rest))])


def flatten(inputs: Any, name: str | None = None) -> Tensor:
    return Flatten(name=name)(inputs)


class Dropout(Layer):
    """Dropout with ``rate`` (the fraction dropped) when ``training`` is true."""

    def __init__(self, rate: float = 0.5, noise_shape: Any = None, seed: Any = None, name: str | None = None,
                 **kwargs: Any):
        super().__init__(name=name, **kwargs)
        self.rate, self.noise_shape, self.seed = rate, noise_shape, seed

    def call(self, inputs: Tensor, training: Any = False) -> Tensor:
        if isinstance(training, bool):
            return nn.dropout(inputs, 1.0 - self.rate, self.noise_shape, self.seed) if training else inputs
        return cond(training, lambda: nn.dropout(inputs, 1.0 - self.rate, self.noise_shape, self.seed),
                    lambda: ops.identity(inputs))


def dropout(inputs: Any, rate: float = 0.5, noise_shape: Any = None, seed: Any = None, training: Any = False,
            name: str | None = None) -> Tensor:
    return Dropout(rate, noise_shape, seed, name)(inputs, training=training)



class BatchNormalization(Layer):
    """Batch normalization (``tf.layers.BatchNormalization``) over ``axis`` (the channels):
    with ``training`` true, each batch's mean and variance normalize it, and the layer's
    update ops, put in ``tf.GraphKeys.UPDATE_OPS`` as TensorFlow's are (run them with the
    training op: ``with tf.control_dependencies(tf.get_collection(tf.GraphKeys.UPDATE_OPS))``),
    move ``moving_mean`` and ``moving_variance`` toward them by ``1 - momentum``; otherwise
    those moving statistics normalize. ``training`` may be a bool tensor (a placeholder): the
    update ops then move the statistics only where it is true. As TensorFlow's fused kernel
    (4-D inputs normalized over their last axis), the moving variance takes the batch's
    unbiased variance; other inputs take the biased one, as its unfused path does."""

    def __init__(self, axis: int = -1, momentum: float = 0.99, epsilon: float = 1e-3, center: bool = True,
                 scale: bool = True, beta_initializer: Any = None, gamma_initializer: Any = None,
                 moving_mean_initializer: Any = None, moving_variance_initializer: Any = None,
                 beta_regularizer: Any = None, gamma_regularizer: Any = None, trainable: bool = True,
                 name: str | None = None, fused: Any = None, **kwargs: Any):
        super().__init__(name=name, trainable=trainable, **kwargs)
        self.axis, self.momentum, self.epsilon = int(axis), float(momentum), float(epsilon)
        self.center, self.scale, self.fused = center, scale, fused
        self.beta_initializer = beta_initializer or zeros_initializer()
        self.gamma_initializer = gamma_initializer or ones_initializer()
        self.moving_mean_initializer = moving_mean_initializer or zeros_initializer()
        self.moving_variance_initializer = moving_variance_initializer or ones_initializer()
        self.beta_regularizer, self.gamma_regularizer = beta_regularizer, gamma_regularizer

    def build(self, input_shape: Any) -> None:
        dims = input_shape.as_list()
        axis = self.axis % len(dims)
        if dims[axis] is None:
            raise ValueError(f"BatchNormalization {self.name}: the dimension it normalizes (axis {self.axis}) must "
                             f"be known, got {input_shape}")
        n = [dims[axis]]
        self.gamma = self.add_weight("gamma", n, initializer=self.gamma_initializer,
                                     regularizer=self.gamma_regularizer) if self.scale else None
        self.beta = self.add_weight("beta", n, initializer=self.beta_initializer,
                                    regularizer=self.beta_regularizer) if self.center else None
        self.moving_mean = self.add_weight("moving_mean", n, initializer=self.moving_mean_initializer, trainable=False)
        self.moving_variance = self.add_weight("moving_variance", n, initializer=self.moving_variance_initializer,
                                               trainable=False)

    def call(self, inputs: Tensor, training: Any = False) -> Tensor:
        dims = inputs.shape.as_list()
        axis = self.axis % len(dims)
        reduce = [k for k in range(len(dims)) if k != axis]
        shape = [1] * len(dims)
        shape[axis] = dims[axis]

        def along(v: Any) -> Any:
            return v if axis == len(dims) - 1 or v is None else ops.reshape(v, shape)

        def normalized(mean: Any, variance: Any) -> Tensor:
            return nn.batch_normalization(inputs, along(mean), along(variance), along(self.beta), along(self.gamma),
                                          self.epsilon)
        if training is False:
            return normalized(self.moving_mean, self.moving_variance)
        mean, variance = nn.moments(inputs, reduce)
        unbiased = variance
        if (self.fused is not False) and len(dims) == 4 and axis == 3:
            count = ops.cast(ops.size(inputs) // ops.shape(inputs)[axis], variance.dtype)
            unbiased = variance * count / ops.maximum(count - 1.0, 1.0)
        rate: Any = 1.0 - self.momentum
        if training is not True:
            rate = ops.where(ops.cast(training, "bool"), ops.constant(rate, dtype=mean.dtype),
                             ops.constant(0.0, dtype=mean.dtype))
        updates = [self.moving_mean.assign_sub((self.moving_mean - mean) * rate),
                   self.moving_variance.assign_sub((self.moving_variance - unbiased) * rate)]
        for u in updates:
            get_default_graph().add_to_collection(GraphKeys.UPDATE_OPS, u)
        if training is True:
            return normalized(mean, variance)
        return cond(ops.cast(training, "bool"), lambda: normalized(mean, variance),
                    lambda: normalized(self.moving_mean, self.moving_variance))


def batch_normalization(inputs: Any, axis: int = -1, momentum: float = 0.99, epsilon: float = 1e-3,
                        center: bool = True, scale: bool = True, beta_initializer: Any = None,
                        gamma_initializer: Any = None, moving_mean_initializer: Any = None,
                        moving_variance_initializer: Any = None, beta_regularizer: Any = None,
                        gamma_regularizer: Any = None, training: Any = False, trainable: bool = True,
                        name: str | None = None, reuse: Any = None, fused: Any = None, **kwargs: Any) -> Tensor:
    """``tf.layers.batch_normalization``: a ``BatchNormalization`` layer applied to
    ``inputs``; its moving statistics' update ops go to ``tf.GraphKeys.UPDATE_OPS``."""
    return BatchNormalization(axis, momentum, epsilon, center, scale, beta_initializer, gamma_initializer,
                              moving_mean_initializer, moving_variance_initializer, beta_regularizer,
                              gamma_regularizer, trainable, name, fused, _reuse=reuse)(inputs, training=training)


__all__ = ["Layer", "Dense", "dense", "Conv2D", "conv2d", "Conv2DTranspose", "conv2d_transpose",
           "SeparableConv2D", "separable_conv2d", "MaxPooling2D", "max_pooling2d", "AveragePooling2D",
           "average_pooling2d", "Flatten", "flatten", "Dropout", "dropout", "BatchNormalization",
           "batch_normalization", "GraphKeys"]
