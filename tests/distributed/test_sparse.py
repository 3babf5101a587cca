"""Sparse (ids, rows) updates of embedding tables: the server's row-wise update equals the
dense one for SGD and is lazy for Adam; in training, the bytes moved per step follow the
batch, not the table."""

from __future__ import annotations

import numpy as np
import pytest

import flowjit as fj
from flowjit.distributed.sparse import SparseTable, distinct_rows


def test_distinct_rows_renumbers_the_ids():
    ids = np.array([[7, 3], [7, 9]], np.int32)
    uniq, inv = distinct_rows(ids)
    assert uniq.tolist() == [3, 7, 9] and inv.dtype == np.int32 and inv.tolist() == [[1, 0], [1, 2]]
    np.testing.assert_array_equal(uniq[inv], ids)
    with pytest.raises(TypeError, match="must be integers"):
        distinct_rows(np.ones(3, np.float32))


def test_sgd_on_rows_equals_the_dense_update():
    rng = np.random.default_rng(0)
    table = rng.normal(size=(50, 4)).astype(np.float32)
    t = SparseTable("emb", table, fj.optim.SGD(0.5))
    ids1, rows1 = np.array([3, 7, 3]), rng.normal(size=(3, 4)).astype(np.float32)
    ids2, rows2 = np.array([7, 40]), rng.normal(size=(2, 4)).astype(np.float32)
    t.apply([(ids1, rows1), (ids2, rows2)], scale=0.5, step=1)
    dense = np.zeros_like(table)
    np.add.at(dense, ids1, rows1)
    np.add.at(dense, ids2, rows2)
    np.testing.assert_allclose(t.table.numpy(), table - 0.5 * 0.5 * dense, rtol=1e-6)


def test_adam_on_rows_is_lazy():
    rng = np.random.default_rng(1)
    table = rng.normal(size=(30, 3)).astype(np.float32)
    t = SparseTable("emb", table, fj.optim.Adam(0.1))
    w, m, v = table.astype(np.float64), np.zeros((30, 3)), np.zeros((30, 3))
    for step in (1, 2, 3):
        ids = rng.integers(0, 30, 5)
        rows = rng.normal(size=(5, 3)).astype(np.float32)
        t.apply([(ids, rows)], scale=1.0, step=step)
        g = np.zeros((30, 3))
        np.add.at(g, ids, rows)
        u = np.unique(ids)  # only the rows looked up move, with their slots
        m[u] = 0.9 * m[u] + 0.1 * g[u]
        v[u] = 0.999 * v[u] + 0.001 * g[u] ** 2
        w[u] -= 0.1 * (m[u] / (1 - 0.9 ** step)) / (np.sqrt(v[u] / (1 - 0.999 ** step)) + 1e-8)
        np.testing.assert_allclose(t.table.numpy(), w, rtol=2e-5, atol=1e-6)
        np.testing.assert_allclose(t.slots["m"].numpy(), m, rtol=2e-5, atol=1e-7)
    assert sorted(t.state()) == ["emb", "emb/m", "emb/v"]
