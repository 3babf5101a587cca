"""scikit-learn's bundled 8x8 handwritten digits (1797 images, no download), split into
a training and a test set, and shuffled mini-batches of them, for the digits examples."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np


def load(test_fraction: float = 0.2, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(x_train, y_train, x_test, y_test)``: pixels scaled to [0, 1] as float32 rows of
    64, labels as int32; the split is a fixed permutation of ``seed``."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    y = digits.target.astype(np.int32)
    order = np.random.default_rng(seed).permutation(len(x))
    n_test = int(len(x) * test_fraction)
    test, train = order[:n_test], order[n_test:]
    return x[train], y[train], x[test], y[test]


def batches(x: np.ndarray, y: np.ndarray, batch_size: int, rng: np.random.Generator) -> Iterator[tuple]:
    """Shuffled mini-batches of one epoch; the last partial batch is dropped, so every
    step has the same shape and the training step is traced once."""
    order = rng.permutation(len(x))
    for start in range(0, len(x) - batch_size + 1, batch_size):
        idx = order[start:start + batch_size]
        yield x[idx], y[idx]
