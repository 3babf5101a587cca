"""Layers that hold their parameters as Variables: ``Dense``, ``Conv2D``, ``Sequential``.

A layer is called like a function (eagerly or inside ``@fj.function``); its
``variables`` list what an optimizer trains and a checkpoint saves. Variable names are
``<layer>/kernel`` and ``<layer>/bias`` with layer names made unique per class
(``dense``, ``dense_1``, ...), as in Keras, so checkpoints keep stable names.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from flowjit.ir.dtypes import float32
from flowjit.ir.errors import FlowjitTypeError
from flowjit.nn import initializers
from flowjit.tracer import random
from flowjit.tracer.numpy import namespace as fnp
from flowjit.tracer.variables import Variable

Initializer = Callable[[Any, tuple[int, ...], Any], np.ndarray]
_counters: dict[str, itertools.count] = defaultdict(itertools.count)


def _unique_name(base: str) -> str:
    n = next(_counters[base])
    return base if n == 0 else f"{base}_{n}"


def _as_key(key: Any) -> Any:
    # An int seeds a key; None draws a fresh seed, as PyTorch's unseeded layers do.
    if key is None:
        return random.key(int(np.random.SeedSequence().entropy % (2**31)))
    if isinstance(key, (int, np.integer)):
        return random.key(int(key))
    return key


class Layer:
    """The base of layers: ``variables`` gathers the Variables among its attributes,
    in the order they were set, including those of sub-layers and lists of them."""

    name: str

    @property
    def variables(self) -> list[Variable]:
        found: list[Variable] = []

        def visit(obj: Any) -> None:
            if isinstance(obj, Variable):
                if not any(obj is v for v in found):
                    found.append(obj)
            elif isinstance(obj, Layer):
                for value in vars(obj).values():
                    visit(value)
            elif isinstance(obj, (list, tuple)):
                for item in obj:
                    visit(item)

        for value in vars(self).values():
            visit(value)
        return found

    @property
    def trainable_variables(self) -> list[Variable]:
        return [v for v in self.variables if v.trainable]

    def __call__(self, x: Any) -> Any:
        raise NotImplementedError


class Dense(Layer):
    """``activation(x @ kernel + bias)`` with a kernel of shape ``(in_features, out_features)``."""

    def __init__(self, in_features: int, out_features: int, activation: Callable[[Any], Any] | None = None,
                 use_bias: bool = True, kernel_init: Initializer = initializers.glorot_uniform,
                 bias_init: Initializer = initializers.zeros, key: Any = None, name: str | None = None,
                 dtype: Any = float32):
        self.name = name or _unique_name("dense")
        k_kernel, k_bias = np.asarray(random.split(_as_key(key)))
        self.kernel = Variable(kernel_init(k_kernel, (in_features, out_features), dtype), name=f"{self.name}/kernel")
        self.bias = (Variable(bias_init(k_bias, (out_features,), dtype), name=f"{self.name}/bias")
                     if use_bias else None)
        self.activation = activation

    def __call__(self, x: Any) -> Any:
        if fnp.shape(x)[-1:] != self.kernel.shape[:1]:
            raise FlowjitTypeError(f"{self.name}: input of shape {list(fnp.shape(x))} does not match the kernel "
                                   f"{list(self.kernel.shape)}: the last axis must be {self.kernel.shape[0]}")
        y = fnp.matmul(x, self.kernel)
        if self.bias is not None:
            y = y + self.bias
        return self.activation(y) if self.activation is not None else y


class Conv2D(Layer):
    """2-D convolution of NHWC inputs with an HWIO kernel, then bias and activation;
    ``padding`` is ``"SAME"`` (the default here) or ``"VALID"``. ``groups`` (Keras's and
    PyTorch's) splits the channels into that many groups, each convolved with its own
    filters: the kernel is [KH, KW, in_channels / groups, out_channels], and groups equal
    to in_channels is a depthwise convolution (MobileNet's)."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int | tuple[int, int],
                 strides: int | tuple[int, int] = 1, padding: str = "SAME", dilation: int | tuple[int, int] = 1,
                 activation: Callable[[Any], Any] | None = None, use_bias: bool = True,
                 kernel_init: Initializer = initializers.glorot_uniform, bias_init: Initializer = initializers.zeros,
                 key: Any = None, name: str | None = None, dtype: Any = float32, groups: int = 1):
        self.name = name or _unique_name("conv2d")
        if groups < 1 or in_channels % groups or out_channels % groups:
            raise ValueError(f"Conv2D {self.name}: groups={groups} must divide in_channels={in_channels} and "
                             f"out_channels={out_channels}")
        kh, kw = (kernel_size, kernel_size) if isinstance(kernel_size, int) else kernel_size
        k_kernel, k_bias = np.asarray(random.split(_as_key(key)))
        self.kernel = Variable(kernel_init(k_kernel, (kh, kw, in_channels // groups, out_channels), dtype),
                               name=f"{self.name}/kernel")
        self.groups = groups
        self.bias = (Variable(bias_init(k_bias, (out_channels,), dtype), name=f"{self.name}/bias")
                     if use_bias else None)
        self.strides, self.padding, self.dilation = strides, padding, dilation
        self.activation = activation

    def __call__(self, x: Any) -> Any:
        y = fnp.conv2d(x, self.kernel, strides=self.strides, padding=self.padding, dilation=self.dilation,
                       groups=self.groups)
        if self.bias is not None:
            y = y + self.bias
        return self.activation(y) if self.activation is not None else y


class Sequential(Layer):
    """Layers (or any callables) applied in order."""

    def __init__(self, layers: Iterable[Callable[[Any], Any]], name: str | None = None):
        self.name = name or _unique_name("sequential")
        self.layers = list(layers)

    def __call__(self, x: Any) -> Any:
        for layer in self.layers:
            x = layer(x)
        return x
