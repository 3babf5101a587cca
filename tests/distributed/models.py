"""The models the distributed tests train: module-level functions (workers unpickle them),
sent by value since the workers cannot import the tests package."""

from __future__ import annotations

import numpy as np

import flowjit as fj


def mlp_loss(params, x, y):
    """Mean softmax cross-entropy of a one-hidden-layer tanh MLP."""
    h = fj.tanh(x @ params["w1"] + params["b1"])
    return fj.nn.softmax_cross_entropy(h @ params["w2"] + params["b2"], y)


def mlp_logits(params, x):
    return np.tanh(x @ params["w1"] + params["b1"]) @ params["w2"] + params["b2"]


def mlp_params(inputs, hidden, classes, seed=0):
    rng = np.random.default_rng(seed)
    return {"w1": (rng.normal(size=(inputs, hidden)) / np.sqrt(inputs)).astype(np.float32),
            "b1": np.zeros(hidden, np.float32),
            "w2": (rng.normal(size=(hidden, classes)) / np.sqrt(hidden)).astype(np.float32),
            "b2": np.zeros(classes, np.float32)}


def digits():
    """sklearn's digits, scaled to [0, 1]: (x_train, y_train, x_test, y_test), a fixed split."""
    from sklearn.datasets import load_digits
    d = load_digits()
    x, y = (d.data / 16.0).astype(np.float32), d.target.astype(np.int32)
    order = np.random.default_rng(0).permutation(len(x))
    x, y = x[order], y[order]
    return x[:1400], y[:1400], x[1400:], y[1400:]


def batches(x, y, size, seed=0):
    """Endless shuffled batches of ``size`` rows (whole batches only)."""
    rng = np.random.default_rng(seed)
    while True:
        order = rng.permutation(len(x))
        for i in range(0, len(x) - size + 1, size):
            yield x[order[i:i + size]], y[order[i:i + size]]


def embedding_loss(params, ids, y):
    """Mean softmax cross-entropy of a bag of embeddings: the mean of the rows ``ids`` names
    (``[batch, bag]``), then a linear layer."""
    h = fj.mean(fj.take(params["emb"], ids, axis=0), axis=1)
    return fj.nn.softmax_cross_entropy(h @ params["w"] + params["b"], y)


def embedding_params(rows, dim, classes, seed=0):
    rng = np.random.default_rng(seed)
    return {"emb": (rng.normal(size=(rows, dim)) * 0.1).astype(np.float32),
            "w": (rng.normal(size=(dim, classes)) / np.sqrt(dim)).astype(np.float32),
            "b": np.zeros(classes, np.float32)}


def embedding_batches(rows, batch, bag, classes, seed=0):
    """Endless batches of ids (``[batch, bag]`` int32, drawn from all ``rows``) and labels."""
    rng = np.random.default_rng(seed)
    while True:
        yield rng.integers(0, rows, (batch, bag)).astype(np.int32), rng.integers(0, classes, batch).astype(np.int32)
