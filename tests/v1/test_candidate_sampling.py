"""tf.nn's candidate sampling (word2vec's training): the samplers' distributions and expected
counts, sharded embedding lookups, nce_loss and sampled_softmax_loss against TensorFlow's
formulas written in NumPy, and a word2vec-style model that learns with nce_loss."""

from __future__ import annotations

import numpy as np
import pytest

import flowjit.v1 as tf


def _log_uniform(c, range_max):
    c = np.asarray(c, np.float64)
    return np.log((c + 2) / (c + 1)) / np.log(range_max + 1)


def test_log_uniform_draws_follow_zipf_and_unique_draws_have_no_repeats():
    tf.reset_default_graph()
    labels = tf.constant(np.array([[3], [7]], np.int64))
    many, true_count, count = tf.nn.log_uniform_candidate_sampler(labels, 1, 4000, False, 50, seed=3)
    unique, u_true, u_count = tf.nn.log_uniform_candidate_sampler(labels, 1, 30, True, 50, seed=4)
    assert many.shape.as_list() == [4000] and true_count.shape.as_list() == [2, 1]
    with tf.Session() as sess:
        draws, tc, sc = sess.run([many, true_count, count])
        # Without uniqueness, a class's expected count is its probability times the draws.
        np.testing.assert_allclose(tc[:, 0], 4000 * _log_uniform([3, 7], 50), rtol=1e-6)
        np.testing.assert_allclose(sc, 4000 * _log_uniform(draws, 50), rtol=1e-6)
        freq = np.bincount(draws, minlength=50) / 4000
        p = _log_uniform(np.arange(50), 50)
        assert draws.min() >= 0 and draws.max() < 50
        assert np.abs(freq - p).max() < 0.03, (freq[:5], p[:5])
        for _ in range(3):
            u, ut, uc = sess.run([unique, u_true, u_count])
            assert len(set(u.tolist())) == 30 and u.min() >= 0 and u.max() < 50
            # -expm1(tries * log1p(-p)) for one whole number of tries, the same for every class
            # (read back from the rarest class, whose count float32 keeps best).
            rare = np.argmax(u)
            tries = round(float(np.log1p(-uc[rare]) / np.log1p(-_log_uniform(u[rare], 50))))
            assert tries >= 30
            np.testing.assert_allclose(uc, -np.expm1(tries * np.log1p(-_log_uniform(u, 50))), rtol=1e-5)
            np.testing.assert_allclose(ut[:, 0], -np.expm1(tries * np.log1p(-_log_uniform([3, 7], 50))), rtol=1e-5)


def test_uniform_sampler_and_its_refusals():
    tf.reset_default_graph()
    labels = tf.constant(np.array([[1, 2]], np.int64))
    s, tc, sc = tf.nn.uniform_candidate_sampler(labels, 2, 10, True, 10)
    with tf.Session() as sess:
        drawn, t, c = sess.run([s, tc, sc])
    assert sorted(drawn.tolist()) == list(range(10))          # all ten, each once
    assert np.all(t > 0) and np.all(t <= 1) and np.allclose(c, c[0])
    with pytest.raises(ValueError, match="num_sampled=11 unique classes cannot be drawn from range_max=10"):
        tf.nn.uniform_candidate_sampler(labels, 2, 11, True, 10)
    with pytest.raises(ValueError, match=r"true_classes must be \[batch_size, num_true=1\]"):
        tf.nn.uniform_candidate_sampler(labels, 1, 3, True, 10)


@pytest.mark.parametrize("strategy", ["mod", "div"])
def test_a_sharded_embedding_lookup_reads_each_id_from_its_shard(strategy):
    tf.reset_default_graph()
    table = np.arange(11 * 2, dtype=np.float32).reshape(11, 2)
    if strategy == "mod":
        shards = [table[k::3] for k in range(3)]
    else:   # 11 rows on 3 shards: 4, 4, 3
        shards = [table[0:4], table[4:8], table[8:11]]
    ids = np.array([[0, 10], [5, 4], [3, 8]], np.int64)
    got = tf.nn.embedding_lookup([tf.constant(s) for s in shards], tf.constant(ids), partition_strategy=strategy)
    with tf.Session() as sess:
        np.testing.assert_array_equal(sess.run(got), table[ids])


def _sampled_logits(w, b, labels, x, sampled, true_count, sampled_count, remove_hits):
    """TensorFlow's _compute_sampled_logits, in NumPy."""
    true_logits = np.einsum("bd,btd->bt", x, w[labels]) + b[labels] - np.log(true_count)
    sampled_logits = x @ w[sampled].T + b[sampled] - np.log(sampled_count)
    if remove_hits:
        hits = (labels[:, :, None] == sampled[None, None, :]).any(axis=1)
        sampled_logits = np.where(hits, sampled_logits - np.finfo(np.float32).max, sampled_logits)
    logits = np.concatenate([true_logits, sampled_logits], 1)
    targets = np.concatenate([np.full(true_logits.shape, 1 / labels.shape[1]), np.zeros(sampled_logits.shape)], 1)
    return logits, targets


def test_nce_and_sampled_softmax_losses_are_tensorflows_formulas_with_their_gradients():
    tf.reset_default_graph()
    rng = np.random.default_rng(0)
    w0 = rng.normal(size=(20, 4))
    b0 = rng.normal(size=20)
    x0 = rng.normal(size=(3, 4))
    labels = np.array([[2, 5], [7, 1], [0, 5]], np.int64)
    sampled = np.array([5, 9, 11, 3], np.int64)                 # 5: an accidental hit of rows 0 and 2
    true_count, sampled_count = rng.uniform(0.1, 1, (3, 2)), rng.uniform(0.1, 1, 4)
    w, b, x = tf.Variable(w0), tf.Variable(b0), tf.constant(x0)
    values = (tf.constant(sampled), tf.constant(true_count), tf.constant(sampled_count))
    nce = tf.nn.nce_loss(w, b, tf.constant(labels), x, 4, 20, num_true=2, sampled_values=values)
    soft = tf.nn.sampled_softmax_loss(w, b, tf.constant(labels), x, 4, 20, num_true=2, sampled_values=values)
    assert nce.shape.as_list() == [3] and nce.op.name.startswith("nce_loss/")
    grads = tf.gradients(tf.reduce_sum(nce) + tf.reduce_sum(soft), [w, b])
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        got_nce, got_soft, (gw, gb) = sess.run([nce, soft, grads])

    def losses(w, b):
        logits, targets = _sampled_logits(w, b, labels, x0, sampled, true_count, sampled_count, False)
        z = np.maximum(logits, 0) - logits * targets + np.log1p(np.exp(-np.abs(logits)))
        logits, targets = _sampled_logits(w, b, labels, x0, sampled, true_count, sampled_count, True)
        m = logits.max(axis=1, keepdims=True)
        soft = -(targets * (logits - m - np.log(np.exp(logits - m).sum(axis=1, keepdims=True)))).sum(axis=1)
        return z.sum(axis=1), soft
    want_nce, want_soft = losses(w0, b0)
    np.testing.assert_allclose(got_nce, want_nce, rtol=1e-10)
    np.testing.assert_allclose(got_soft, want_soft, rtol=1e-10)
    eps = 1e-6
    for (i, j) in [(2, 1), (5, 0), (9, 3), (13, 2)]:            # true, hit, sampled, untouched rows
        up, down = w0.copy(), w0.copy()
        up[i, j] += eps
        down[i, j] -= eps
        fd = (sum(map(np.sum, losses(up, b0))) - sum(map(np.sum, losses(down, b0)))) / (2 * eps)
        assert gw[i, j] == pytest.approx(fd, rel=1e-5, abs=1e-8)
    assert gb[13] == 0 and gb[2] != 0


def test_word2vec_skip_gram_with_nce_loss_learns_its_pairs():
    # word2vec_basic.py's model: embeddings, an NCE layer, SGD; pairs of words that always
    # co-occur end up predicting each other.
    tf.reset_default_graph()
    tf.set_random_seed(0)
    vocab, dim, batch = 40, 8, 32
    inputs = tf.placeholder(tf.int32, [batch])
    labels = tf.placeholder(tf.int32, [batch, 1])
    embeddings = tf.Variable(tf.random_uniform([vocab, dim], -1.0, 1.0))
    nce_weights = tf.Variable(tf.truncated_normal([vocab, dim], stddev=1.0 / np.sqrt(dim)))
    nce_biases = tf.Variable(tf.zeros([vocab]))
    embed = tf.nn.embedding_lookup(embeddings, inputs)
    loss = tf.reduce_mean(tf.nn.nce_loss(weights=nce_weights, biases=nce_biases, labels=labels, inputs=embed,
                                         num_sampled=8, num_classes=vocab))
    train = tf.train.GradientDescentOptimizer(0.5).minimize(loss)
    rng = np.random.default_rng(1)
    partner = np.arange(vocab) ^ 1                               # word 2k goes with 2k + 1
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        first = []
        for step in range(300):
            words = rng.integers(0, vocab, batch)
            value, _ = sess.run([loss, train], {inputs: words, labels: partner[words][:, None]})
            first.append(value)
        logits = sess.run(tf.matmul(embeddings, nce_weights, transpose_b=True) + nce_biases)
    assert np.mean(first[-20:]) < 0.5 * np.mean(first[:20])
    assert np.mean(logits.argmax(axis=1) == partner) > 0.9


def test_compute_accidental_hits_lists_each_sampled_class_that_is_a_rows_own():
    tf.reset_default_graph()
    labels = tf.placeholder(tf.int64, [None, 2])
    rows, cols, weights = tf.nn.compute_accidental_hits(labels, tf.constant(np.array([4, 9, 1], np.int64)), 2)
    with tf.Session() as sess:
        r, c, w = sess.run([rows, cols, weights], {labels: [[1, 2], [3, 5], [9, 4]]})
    assert r.tolist() == [0, 2, 2] and c.tolist() == [2, 0, 1]
    assert r.dtype == np.int32 and c.dtype == np.int64 and np.all(w == -np.finfo(np.float32).max)
