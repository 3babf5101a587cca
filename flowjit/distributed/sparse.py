"""Sparse updates of large embedding tables: gradients travel as (indices, rows).

The TensorFlow paper's argument against a dense key-value parameter store: a step of a
model with a 1,000,000-row embedding touches the few rows its batch looks up, so that is all
that should move. ``train(..., sparse={"emb": 0})`` declares that the table ``emb`` is read
by ``loss_fn`` only through rows indexed by the batch's array 0 (``params["emb"][ids]`` or
``fj.take(params["emb"], ids, axis=0)``, ids used for nothing else). Then, per gradient:

1. the worker takes the distinct ids of its batch (``np.unique``) and pulls just those rows
   from the parameter server holding the table;
2. it runs the compiled value-and-gradient of the unchanged ``loss_fn`` on those rows as the
   table and the ids renumbered into them, so the gradient with respect to the table is the
   rows' gradient, ``[distinct ids, dim]``: it sends (ids, rows), never a dense table;
3. the server sums the workers' rows per id (``np.add.at``), scales them as the dense
   gradients are (the mean over the workers aggregated), and applies its optimizer to those
   rows only, with the optimizer's own compiled update run on the gathered rows and their
   slots, then scatters them back.

Rows no batch touched keep their value and their slots: an optimizer with state (momentum,
Adam) updates lazily, as TensorFlow's ``LazyAdamOptimizer`` and PyTorch's ``SparseAdam`` do;
for plain SGD this is exactly the dense update. Shapes vary with the number of distinct ids,
so the server pads the rows to the next power of two (at least 16) and compiles once per
size.
"""

from __future__ import annotations

import pickle
from collections.abc import Sequence
from typing import Any

import numpy as np

from flowjit.optim import Optimizer
from flowjit.tracer.function import function
from flowjit.tracer.variables import Variable


def distinct_rows(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct ids of a batch (sorted, int64) and the batch's ids renumbered into them
    (same shape and dtype as ``ids``)."""
    ids = np.asarray(ids)
    if ids.dtype.kind not in "iu":
        raise TypeError(f"sparse: the ids indexing an embedding must be integers, got {ids.dtype}")
    uniq, inverse = np.unique(ids.reshape(-1), return_inverse=True)
    return uniq.astype(np.int64), inverse.reshape(ids.shape).astype(ids.dtype)


def _bucket(k: int) -> int:
    return max(16, 1 << max(0, k - 1).bit_length())


class SparseTable:
    """A parameter server's embedding table (a Variable ``name``) and its optimizer state,
    updated row by row from (ids, rows) gradients."""

    def __init__(self, name: str, value: np.ndarray, optimizer: Any):
        value = np.asarray(value)
        if value.ndim < 1:
            raise ValueError(f"sparse table {name!r}: an embedding has rows; got a scalar")
        self.table = Variable(np.array(value), name=name)
        # An optimizer of its own for the gathered rows (the server's dense one keeps its
        # slots for the dense variables), with the same settings.
        self.optimizer: Optimizer = pickle.loads(pickle.dumps(optimizer)) if isinstance(optimizer, Optimizer) \
            else optimizer()
        self.slots = {s: Variable(np.zeros_like(value), name=f"{name}/{s}", trainable=False)
                      for s in self.optimizer.slot_names}
        self._compiled: dict[int, tuple[Variable, Any]] = {}

    def rows(self, ids: np.ndarray) -> np.ndarray:
        """The table's rows ``ids`` (a copy)."""
        return self.table._value[np.asarray(ids, dtype=np.int64)]

    def _program(self, size: int) -> tuple[Variable, Any]:
        if size not in self._compiled:
            rows = Variable(np.zeros((size, *self.table.shape[1:]), self.table.dtype.np), name=self.table.name)
            for s in self.optimizer.slot_names:
                self.optimizer.slot(rows, s)
            opt = self.optimizer

            def apply(g: Any) -> None:
                opt.apply_gradients([(g, rows)])

            self._compiled[size] = (rows, function(apply))
        return self._compiled[size]

    def apply(self, grads: Sequence[tuple[np.ndarray, np.ndarray]], scale: float, step: int) -> None:
        """Apply the sum of the (ids, rows) gradients ``grads`` times ``scale`` as the
        optimizer's update number ``step`` (1 for the first), to the rows they name."""
        ids = np.concatenate([np.asarray(i, np.int64).reshape(-1) for i, _ in grads])
        if ids.size == 0:
            return
        width = self.table.shape[1:]
        rows = np.concatenate([np.asarray(r).reshape(-1, *width) for _, r in grads])
        uniq, inverse = np.unique(ids, return_inverse=True)
        g = np.zeros((len(uniq), *width), rows.dtype)
        np.add.at(g, inverse, rows)
        if scale != 1.0:
            g *= g.dtype.type(scale)
        k = len(uniq)
        size = _bucket(k)
        var, program = self._program(size)

        def padded(a: np.ndarray) -> np.ndarray:
            out = np.zeros((size, *width), self.table.dtype.np)
            out[:k] = a
            return out

        var.assign(padded(self.table._value[uniq]))
        for s, slot in self.slots.items():
            self.optimizer.slot(var, s).assign(padded(slot._value[uniq]))
        self.optimizer.iterations.assign(step - 1)
        program(padded(g))
        self.table._value[uniq] = var.numpy()[:k]
        for s, slot in self.slots.items():
            slot._value[uniq] = self.optimizer.slot(var, s).numpy()[:k]

    def state(self) -> dict[str, Variable]:
        """The table and its slots, for checkpoints (``emb``, ``emb/m``, ...)."""
        return {self.table.name: self.table, **{v.name: v for v in self.slots.values()}}
