"""Quality metrics of a model's outputs against labels: accuracy, log loss, AUC, MSE, MAE,
or a user's function ``FILE.py:FUNC`` (``func(outputs, labels) -> float``).

Each raises ValidateError when it does not apply to the outputs (say, AUC of ten classes,
or MSE of class scores against class labels)."""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .errors import ValidateError


@dataclass(frozen=True)
class Metric:
    """A metric by name, the function computing it, and whether higher is better."""

    name: str
    compute: Callable[[np.ndarray, np.ndarray], float]
    higher_is_better: bool


def _classes(outputs: np.ndarray, labels: np.ndarray, name: str) -> tuple[np.ndarray, np.ndarray]:
    """Class scores as (N, C) (a single score column for a binary model) and integer labels."""
    whole = labels.dtype.kind != "f" or bool(np.all(np.isfinite(labels) & (labels == np.round(labels))))
    if labels.ndim != 1 or not whole:
        raise ValidateError(f"{name} needs one integer class label per example, got labels of {labels.dtype}"
                            f"{list(labels.shape[1:])}")
    if outputs.ndim == 2 and outputs.shape[1] == 1:
        outputs = outputs[:, 0]
    if outputs.ndim == 1:
        outputs = outputs[:, None]
    if outputs.ndim != 2 or outputs.shape[0] != labels.shape[0]:
        raise ValidateError(f"{name} needs outputs of one score per class per example, got outputs of shape "
                            f"{list(outputs.shape)} for {labels.shape[0]} labels")
    return outputs.astype(np.float64), labels.astype(np.int64)


def _probabilities(scores: np.ndarray) -> np.ndarray:
    """Rows of probabilities: as they are when they already are, else a softmax of logits
    (one column: the probability of class 1, else a sigmoid)."""
    if scores.shape[1] == 1:
        p = scores[:, 0]
        p = p if (p.min() >= 0 and p.max() <= 1) else 1 / (1 + np.exp(-p))
        return np.stack([1 - p, p], axis=1)
    if scores.min() >= 0 and np.allclose(scores.sum(axis=1), 1, atol=1e-3):
        return scores
    e = np.exp(scores - scores.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def accuracy(outputs: np.ndarray, labels: np.ndarray) -> float:
    """The fraction of examples whose highest-scoring class (or score > 0.5 for one score
    column) is the label."""
    scores, y = _classes(outputs, labels, "accuracy")
    predicted = (scores[:, 0] > 0.5).astype(np.int64) if scores.shape[1] == 1 else scores.argmax(axis=1)
    return float((predicted == y).mean())


def log_loss(outputs: np.ndarray, labels: np.ndarray) -> float:
    """The mean negative log probability of the label (outputs: probabilities or logits)."""
    scores, y = _classes(outputs, labels, "log_loss")
    p = _probabilities(scores)
    if y.min() < 0 or y.max() >= p.shape[1]:
        raise ValidateError(f"log_loss: labels run from {y.min()} to {y.max()}, the outputs have {p.shape[1]} classes")
    return float(-np.log(np.clip(p[np.arange(len(y)), y], 1e-12, 1)).mean())


def auc(outputs: np.ndarray, labels: np.ndarray) -> float:
    """The area under the ROC curve of a binary model (Mann-Whitney's U from SciPy's ranks)."""
    from scipy.stats import rankdata
    scores, y = _classes(outputs, labels, "auc")
    if scores.shape[1] > 2 or not set(np.unique(y)) <= {0, 1}:
        raise ValidateError(f"auc applies to binary models (labels 0 and 1, one or two score columns); got "
                            f"{scores.shape[1]} score columns and labels {sorted(set(np.unique(y).tolist()))[:5]}")
    s = scores[:, -1]
    pos = y == 1
    n1, n0 = int(pos.sum()), int((~pos).sum())
    if n1 == 0 or n0 == 0:
        raise ValidateError("auc needs examples of both classes in the data")
    ranks = rankdata(s)
    return float((ranks[pos].sum() - n1 * (n1 + 1) / 2) / (n1 * n0))


def _regression(outputs: np.ndarray, labels: np.ndarray, name: str) -> tuple[np.ndarray, np.ndarray]:
    out = outputs[:, 0] if outputs.ndim == 2 and outputs.shape[1] == 1 and labels.ndim == 1 else outputs
    if out.shape != labels.shape:
        raise ValidateError(f"{name} compares outputs with labels of the same shape; got outputs {list(outputs.shape)} "
                            f"and labels {list(labels.shape)}")
    return out.astype(np.float64), labels.astype(np.float64)


def mse(outputs: np.ndarray, labels: np.ndarray) -> float:
    """The mean squared error."""
    o, y = _regression(outputs, labels, "mse")
    return float(((o - y) ** 2).mean())


def mae(outputs: np.ndarray, labels: np.ndarray) -> float:
    """The mean absolute error."""
    o, y = _regression(outputs, labels, "mae")
    return float(np.abs(o - y).mean())


BUILTIN = {"accuracy": Metric("accuracy", accuracy, True), "log_loss": Metric("log_loss", log_loss, False),
           "auc": Metric("auc", auc, True), "mse": Metric("mse", mse, False), "mae": Metric("mae", mae, False)}


def get_metric(spec: str, higher_is_better: bool = True) -> Metric:
    """A built-in metric by name, or ``FILE.py:FUNC`` (``higher_is_better`` says which way
    is better for it)."""
    if spec in BUILTIN:
        return BUILTIN[spec]
    path, sep, func = spec.rpartition(":")
    if not sep or not path.endswith(".py"):
        raise ValidateError(f"unknown metric {spec!r}: use {', '.join(BUILTIN)}, or FILE.py:FUNCTION for your own "
                            "(func(outputs, labels) -> float)")
    if not os.path.isfile(path):
        raise ValidateError(f"metric {spec!r}: no such file {path}")
    mod_spec = importlib.util.spec_from_file_location(f"_flowjit_metric_{os.path.basename(path)[:-3]}", path)
    assert mod_spec is not None and mod_spec.loader is not None
    module = importlib.util.module_from_spec(mod_spec)
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    try:
        mod_spec.loader.exec_module(module)
    except Exception as e:
        raise ValidateError(f"metric {spec!r}: {path} failed to import: {type(e).__name__}: {e}") from None
    finally:
        sys.path.pop(0)
    fn = getattr(module, func, None)
    if not callable(fn):
        raise ValidateError(f"metric {spec!r}: {path} has no function {func!r}")

    def compute(outputs: np.ndarray, labels: np.ndarray) -> float:
        try:
            return float(fn(outputs, labels))
        except Exception as e:
            raise ValidateError(f"metric {spec!r} does not apply to these outputs: {type(e).__name__}: {e}") from None
    return Metric(func, compute, higher_is_better)
