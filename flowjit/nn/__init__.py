"""``fj.nn``: activations, normalization, pooling, losses, initializers and layers.

Everything here is ordinary fj code over the primitive registry: it runs eagerly,
traces inside ``@fj.function``, fuses, and differentiates like user code.
"""

from flowjit.nn import initializers
from flowjit.nn.attention import dot_product_attention
from flowjit.nn.conv import conv1d, conv2d, conv2d_transpose, depthwise_conv2d, separable_conv2d
from flowjit.nn.functional import (
    celu,
    dropout,
    elu,
    gelu,
    glu,
    hard_sigmoid,
    hard_silu,
    hard_swish,
    hard_tanh,
    identity,
    layer_norm,
    leaky_relu,
    log1mexp,
    log_sigmoid,
    log_softmax,
    logmeanexp,
    logsumexp,
    mish,
    one_hot,
    relu,
    relu6,
    selu,
    sigmoid,
    silu,
    soft_sign,
    softmax,
    softplus,
    sparse_plus,
    sparse_sigmoid,
    squareplus,
    standardize,
    swish,
    tanh,
)
from flowjit.nn.layers import Conv2D, Dense, Layer, Sequential
from flowjit.nn.losses import accuracy, mse, softmax_cross_entropy
from flowjit.nn.pooling import avg_pool, max_pool

__all__ = ["initializers", "relu", "gelu", "sigmoid", "softmax", "log_softmax", "logsumexp", "layer_norm",
           "dropout", "Dense", "Conv2D", "Sequential", "Layer", "mse", "softmax_cross_entropy", "accuracy",
           "max_pool", "avg_pool", "conv1d", "conv2d", "conv2d_transpose", "depthwise_conv2d", "separable_conv2d",
           "dot_product_attention", "celu", "elu", "glu", "hard_sigmoid", "hard_silu", "hard_swish", "hard_tanh",
           "identity", "leaky_relu", "log1mexp", "log_sigmoid", "logmeanexp", "mish", "one_hot", "relu6", "selu",
           "silu", "soft_sign", "softplus", "sparse_plus", "sparse_sigmoid", "squareplus", "standardize", "swish",
           "tanh"]
