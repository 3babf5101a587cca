"""``fj.nn``: activations, normalization, pooling, losses, initializers and layers.

Everything here is ordinary fj code over the primitive registry: it runs eagerly,
traces inside ``@fj.function``, fuses, and differentiates like user code.
"""

from flowjit.nn import initializers
from flowjit.nn.conv import conv2d
from flowjit.nn.functional import dropout, gelu, layer_norm, log_softmax, logsumexp, relu, sigmoid, softmax
from flowjit.nn.layers import Conv2D, Dense, Layer, Sequential
from flowjit.nn.losses import accuracy, mse, softmax_cross_entropy
from flowjit.nn.pooling import avg_pool, max_pool

__all__ = ["initializers", "relu", "gelu", "sigmoid", "softmax", "log_softmax", "logsumexp", "layer_norm",
           "dropout", "Dense", "Conv2D", "Sequential", "Layer", "mse", "softmax_cross_entropy", "accuracy",
           "max_pool", "avg_pool", "conv2d"]
