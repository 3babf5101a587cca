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


fjd = pytest.importorskip("flowjit.distributed", exc_type=ImportError)  # Ray missing: skip the training tests
from tests.distributed import models  # noqa: E402

fjd.ray.cloudpickle.register_pickle_by_value(models)  # the workers cannot import the tests package


def dense_training(params, batches, lr):
    """The same SGD steps in this process with the dense gradient of the whole table."""
    value_and_grad = fj.value_and_grad(models.embedding_loss)
    p = {n: v.copy() for n, v in params.items()}
    losses = []
    for ids, y in batches:
        loss, g = value_and_grad(p, ids, y)
        p = {n: p[n] - np.float32(lr) * np.asarray(g[n]) for n in p}
        losses.append(float(loss))
    return losses, p


def test_sync_with_a_sparse_table_equals_dense_single_process_sgd(ray_address):
    import itertools
    params = models.embedding_params(1000, 8, 5)
    steps, workers = 5, 2
    data = list(itertools.islice(models.embedding_batches(1000, 16, 3, 5), steps * workers))
    with fjd.Cluster(ps=2, workers=workers) as cluster:
        r = fjd.train(cluster, models.embedding_loss, params, fj.optim.SGD(0.5), data, steps=steps,
                      sparse={"emb": 0}, placement="by_size")
    merged = [tuple(np.concatenate(parts) for parts in zip(*data[s * workers:(s + 1) * workers])) for s in range(steps)]
    losses, final = dense_training(params, merged, 0.5)
    np.testing.assert_allclose(r.losses, losses, rtol=1e-5)
    for n in params:
        np.testing.assert_allclose(r.params[n], final[n], rtol=1e-5, atol=1e-6, err_msg=n)
    touched = np.unique(np.concatenate([ids.ravel() for ids, _ in data]))
    untouched = np.setdiff1d(np.arange(1000), touched)
    np.testing.assert_array_equal(r.params["emb"][untouched], params["emb"][untouched])
    assert not np.allclose(r.params["emb"][touched], params["emb"][touched])


def test_bytes_per_step_follow_the_batch_not_a_million_row_table(ray_address):
    rows, dim = 1_000_000, 16
    params = models.embedding_params(rows, dim, 4)
    table_bytes = params["emb"].nbytes  # 64 MB
    sent = {}
    with fjd.Cluster(ps=1, workers=1) as cluster:
        for batch in (32, 128):
            r = fjd.train(cluster, models.embedding_loss, params, fj.optim.Adam(0.01),
                          models.embedding_batches(rows, batch, 4, 4, seed=batch), steps=3, sparse={"emb": 0})
            sent[batch] = float(np.median(r.grad_bytes))
            assert r.params["emb"].shape == (rows, dim) and r.steps == 3
    # (ids, rows) for ~4 * batch distinct ids: a few tens of KB against the 64 MB table.
    assert sent[128] < table_bytes / 500
    assert 3.0 < sent[128] / sent[32] < 5.0


def test_a_sparse_table_is_checkpointed_and_restored_with_its_slots(ray_address, tmp_path):
    import itertools
    params = models.embedding_params(500, 4, 3)
    data = list(itertools.islice(models.embedding_batches(500, 8, 2, 3), 6))
    with fjd.Cluster(ps=1, workers=1) as cluster:
        whole = fjd.train(cluster, models.embedding_loss, params, fj.optim.Adam(0.05), data, steps=6, sparse={"emb": 0})
        fjd.train(cluster, models.embedding_loss, params, fj.optim.Adam(0.05), data[:4], steps=4, sparse={"emb": 0},
                  checkpoint_dir=tmp_path)
        state = fjd.ray.get(cluster.ps_tasks[0].ps_state.remote(), timeout=30)
        assert {"sparse/emb", "sparse/emb/m", "sparse/emb/v"} <= set(state)
        rest = fjd.train(cluster, models.embedding_loss, params, fj.optim.Adam(0.05), data[4:], steps=6,
                         sparse={"emb": 0}, checkpoint_dir=tmp_path, restore=True)
    assert rest.start_step == 4 and rest.steps == 6
    for n in params:
        np.testing.assert_allclose(rest.params[n], whole.params[n], rtol=1e-6, atol=1e-7, err_msg=n)
