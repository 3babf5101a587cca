"""flowjit.v1 state and training: variables and scopes, tf.gradients, cond and while_loop,
TF1's optimizers against NumPy references of their formulas, Saver, layers, examples."""

from __future__ import annotations

import os

import numpy as np
import pytest

import flowjit.v1 as tf
from tests.finite_differences import central_differences
from tests.v1 import load_example


@pytest.fixture(autouse=True)
def fresh_graph():
    tf.reset_default_graph()
    yield


# ---- variables -----------------------------------------------------------------------------------------------


def test_every_use_in_a_run_sees_the_value_the_run_started_with():
    v = tf.Variable(1.0, name="v")
    doubled = v * 2.0
    update = tf.assign(v, 10.0)
    with tf.Session() as sess:
        sess.run(v.initializer)
        assert sess.run([update, doubled]) == [10.0, 2.0]
        assert sess.run([doubled, update]) == [20.0, 10.0]


def test_two_updates_in_one_run_both_apply():
    v = tf.Variable(0, name="count")
    step = tf.group(tf.assign_add(v, 1), tf.assign_add(v, 10), v.assign_sub(3))
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        sess.run(step)
        sess.run(step)
        assert sess.run(v) == 16


def test_control_dependencies_order_a_read_after_an_update():
    v = tf.Variable(1.0)
    inc = tf.assign_add(v, 1.0)
    with tf.control_dependencies([inc]):
        after = tf.identity(v.read_value())
        also_after = v + 0.0  # a use of v under the dependency reads it after the update too
    before = v + 0.0
    with tf.Session() as sess:
        sess.run(v.initializer)
        assert sess.run(after) == 2.0
        assert sess.run([after, also_after]) == [3.0, 3.0]  # one update per run, read after it
        assert sess.run([before, inc]) == [3.0, 4.0]


def test_variables_in_collections_and_initialized_from_other_ops():
    w = tf.Variable(tf.random_normal([3, 4], stddev=0.1, seed=1), name="w")
    b = tf.Variable(tf.zeros([4]), name="b", trainable=False)
    w2 = tf.Variable(w.initialized_value() * 2.0, name="w2")
    assert tf.global_variables() == [w, b, w2] and tf.trainable_variables() == [w, w2]
    assert w.name == "w:0" and w.shape.as_list() == [3, 4] and w.initializer.name == "w/Assign"
    with tf.Session() as sess:
        assert sess.run(tf.report_uninitialized_variables()) == 3
        sess.run(tf.global_variables_initializer())
        np.testing.assert_allclose(sess.run(w2), 2 * sess.run(w))
        assert sess.run(tf.is_variable_initialized(b))


def test_get_variable_and_variable_scope_reuse():
    with tf.variable_scope("layer"):
        w = tf.get_variable("w", [3, 2])
        b = tf.get_variable("b", [2], initializer=tf.constant_initializer(0.5))
    assert w.name == "layer/w:0" and b.name == "layer/b:0"
    with pytest.raises(ValueError, match="already exists"):
        with tf.variable_scope("layer"):
            tf.get_variable("w", [3, 2])
    with tf.variable_scope("layer", reuse=True):
        assert tf.get_variable("w", [3, 2]) is w
        with pytest.raises(ValueError, match="does not exist"):
            tf.get_variable("missing", [1])
    with tf.variable_scope("layer", reuse=tf.AUTO_REUSE):
        assert tf.get_variable("b") is b
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        limit = np.sqrt(6 / 5)  # Glorot uniform, get_variable's default
        assert np.abs(sess.run(w)).max() <= limit and sess.run(b).tolist() == [0.5, 0.5]


# ---- gradients and control flow --------------------------------------------------------------------------------


def test_gradients_match_finite_differences():
    x = tf.placeholder(tf.float64, [3, 4])
    w = tf.Variable(np.random.default_rng(0).standard_normal((4, 2)), name="w")
    y = tf.reduce_sum(tf.tanh(tf.matmul(x, w)) ** 2) + tf.reduce_mean(tf.exp(x))
    gx, gw = tf.gradients(y, [x, w])
    xs = np.random.default_rng(1).standard_normal((3, 4))
    with tf.Session() as sess:
        sess.run(w.initializer)
        wv = sess.run(w)
        got_x, got_w = sess.run([gx, gw], {x: xs})

    def f(xv, wv):
        return float(np.sum(np.tanh(xv @ wv) ** 2) + np.mean(np.exp(xv)))
    np.testing.assert_allclose(got_x, central_differences(f, [xs, wv], 0), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(got_w, central_differences(f, [xs, wv], 1), rtol=1e-6, atol=1e-8)


def test_gradients_none_when_unconnected_and_stopped_by_stop_gradient():
    a = tf.placeholder(tf.float32, [])
    b = tf.placeholder(tf.float32, [])
    y = a * a + tf.stop_gradient(b * a)
    ga, gb = tf.gradients(y, [a, b])
    assert gb is None
    (gsum,) = tf.gradients([a * 2.0, a * 3.0], [a])
    (gweighted,) = tf.gradients(a * a, [a], grad_ys=tf.constant(0.5))
    with tf.Session() as sess:
        assert sess.run([ga, gsum, gweighted], {a: 3.0, b: 5.0}) == [6.0 + 5.0 * 0 + 0, 5.0, 3.0]


def test_cond_runs_one_branch_and_differentiates_it():
    x = tf.placeholder(tf.float32, [])
    p = tf.placeholder(tf.bool, [])
    y = tf.cond(p, lambda: x * x, lambda: x * 3.0)
    (g,) = tf.gradients(y, [x])
    with tf.Session() as sess:
        assert sess.run([y, g], {x: 4.0, p: True}) == [16.0, 8.0]
        assert sess.run([y, g], {x: 4.0, p: False}) == [12.0, 3.0]
    pair = tf.cond(x > 0.0, lambda: (x, x + 1.0), lambda: (x - 1.0, x))
    with tf.Session() as sess:
        assert [float(v) for v in sess.run(pair, {x: -2.0})] == [-3.0, -2.0]
    with pytest.raises(TypeError, match="different structures or dtypes"):
        tf.cond(p, lambda: x, lambda: (x, x))


def test_case_picks_the_first_true_predicate():
    x = tf.placeholder(tf.int32, [])
    r = tf.case([(x < 0, lambda: tf.constant(-1)), (x < 10, lambda: tf.constant(1))], default=lambda: tf.constant(2))
    with tf.Session() as sess:
        assert [int(sess.run(r, {x: v})) for v in (-5, 5, 50)] == [-1, 1, 2]


def test_while_loop_and_its_gradient_with_maximum_iterations():
    s = tf.placeholder(tf.float32, [])
    i, v = tf.while_loop(lambda i, v: i < 5, lambda i, v: (i + 1, v * s), [tf.constant(0), tf.constant(1.0)],
                         maximum_iterations=10)
    (g,) = tf.gradients(v, [s])
    with tf.Session() as sess:
        out = sess.run([i, v, g], {s: 1.5})
    assert out[0] == 5 and np.isclose(out[1], 1.5 ** 5) and np.isclose(out[2], 5 * 1.5 ** 4)
    n = tf.while_loop(lambda k: k < 100, lambda k: k * 2, tf.constant(1))
    with tf.Session() as sess:
        assert sess.run(n) == 128


# ---- optimizers against NumPy references of TF1's formulas -----------------------------------------------------


def _tf1_reference(name: str, w: np.ndarray, grads: list[np.ndarray], lr: float) -> np.ndarray:
    w = w.astype(np.float64).copy()
    s1, s2 = np.zeros_like(w), np.zeros_like(w)
    if name in ("adagrad", "proximal_adagrad", "ftrl", "ftrl_l1_l2_shrinkage"):
        s1 += 0.1
    if name == "rmsprop":
        s1 += 1.0
    l1, l2, shrink = (0.05, 0.2, 0.1) if name in ("proximal_sgd", "proximal_adagrad", "ftrl_l1_l2_shrinkage") \
        else (0.0, 0.0, 0.0)
    for t, g in enumerate(grads, start=1):
        if name == "sgd":
            w -= lr * g
        elif name == "momentum":
            s1 = 0.9 * s1 + g
            w -= lr * s1
        elif name == "nesterov":
            s1 = 0.9 * s1 + g
            w -= lr * (g + 0.9 * s1)
        elif name == "adagrad":
            s1 += g * g
            w -= lr * g / np.sqrt(s1)
        elif name == "adadelta":
            s1 = 0.95 * s1 + 0.05 * g * g
            upd = np.sqrt(s2 + 1e-8) / np.sqrt(s1 + 1e-8) * g
            s2 = 0.95 * s2 + 0.05 * upd * upd
            w -= lr * upd
        elif name == "rmsprop":
            s1 = 0.9 * s1 + 0.1 * g * g
            s2 = 0.5 * s2 + lr * g / np.sqrt(s1 + 1e-10)
            w -= s2
        elif name == "proximal_sgd":
            v = w - lr * g
            w = np.sign(v) * np.maximum(np.abs(v) - lr * l1, 0) / (1 + lr * l2)
        elif name == "proximal_adagrad":
            s1 += g * g
            r = lr / np.sqrt(s1)
            v = w - r * g
            w = np.sign(v) * np.maximum(np.abs(v) - r * l1, 0) / (1 + r * l2)
        elif name.startswith("ftrl"):   # TensorFlow's ApplyFtrl(V2), learning_rate_power -0.5
            n = s1 + g * g
            s2 += g + 2 * shrink * w - (np.sqrt(n) - np.sqrt(s1)) / lr * w
            w = np.where(np.abs(s2) > l1, (np.sign(s2) * l1 - s2) / (np.sqrt(n) / lr + 2 * l2), 0.0)
            s1 = n
        elif name == "adam":
            lr_t = lr * np.sqrt(1 - 0.999 ** t) / (1 - 0.9 ** t)
            s1 = 0.9 * s1 + 0.1 * g
            s2 = 0.999 * s2 + 0.001 * g * g
            w -= lr_t * s1 / (np.sqrt(s2) + 1e-8)
    return w


OPTIMIZERS = {
    "sgd": lambda lr: tf.train.GradientDescentOptimizer(lr),
    "momentum": lambda lr: tf.train.MomentumOptimizer(lr, 0.9),
    "nesterov": lambda lr: tf.train.MomentumOptimizer(lr, 0.9, use_nesterov=True),
    "adagrad": lambda lr: tf.train.AdagradOptimizer(lr),
    "adadelta": lambda lr: tf.train.AdadeltaOptimizer(lr),
    "rmsprop": lambda lr: tf.train.RMSPropOptimizer(lr, momentum=0.5),
    "adam": lambda lr: tf.train.AdamOptimizer(lr),
    "proximal_sgd": lambda lr: tf.train.ProximalGradientDescentOptimizer(lr, 0.05, 0.2),
    "proximal_adagrad": lambda lr: tf.train.ProximalAdagradOptimizer(lr, l1_regularization_strength=0.05,
                                                                     l2_regularization_strength=0.2),
    "ftrl": lambda lr: tf.train.FtrlOptimizer(lr),
    "ftrl_l1_l2_shrinkage": lambda lr: tf.train.FtrlOptimizer(lr, l1_regularization_strength=0.05,
                                                              l2_regularization_strength=0.2,
                                                              l2_shrinkage_regularization_strength=0.1),
}


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_optimizer_follows_tensorflow_1_formulas(name):
    rng = np.random.default_rng(0)
    w0 = rng.standard_normal((3, 2)).astype(np.float32)
    targets = [rng.standard_normal((3, 2)).astype(np.float32) for _ in range(4)]
    w = tf.Variable(w0, name="w")
    target = tf.placeholder(tf.float32, [3, 2])
    loss = 0.5 * tf.reduce_sum(tf.square(w - target))  # gradient: w - target
    step = tf.train.get_or_create_global_step()
    train = OPTIMIZERS[name](0.1).minimize(loss, global_step=step)
    grads = []
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        for t in targets:
            grads.append(sess.run(w).astype(np.float64) - t)
            sess.run(train, {target: t})
        got, steps = sess.run([w, step])
    expect = _tf1_reference(name, w0, grads, 0.1)
    np.testing.assert_allclose(got, expect, rtol=2e-5, atol=2e-6)
    assert steps == len(targets)


def test_adam_slots_are_named_as_tensorflow_names_them():
    w = tf.Variable(tf.zeros([2]), name="w")
    opt = tf.train.AdamOptimizer()
    opt.minimize(tf.reduce_sum(w * w))
    names = sorted(v.op.name for v in tf.global_variables())
    assert names == ["beta1_power", "beta2_power", "w", "w/Adam", "w/Adam_1"]
    assert opt.get_slot(w, "m").op.name == "w/Adam" and opt.get_slot_names() == ["m", "v"]


def test_minimize_with_no_gradient_says_so():
    w = tf.Variable(1.0)
    c = tf.Variable(2.0, name="c")
    with pytest.raises(ValueError, match="No gradients provided"):
        tf.train.GradientDescentOptimizer(0.1).minimize(c * 1.0, var_list=[w])


def test_exponential_decay_schedule():
    step = tf.train.get_or_create_global_step()
    lr = tf.train.exponential_decay(0.1, step, 10, 0.5, staircase=True)
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        assert np.isclose(sess.run(lr), 0.1)
        step.load(25, sess)
        assert np.isclose(sess.run(lr), 0.025)


# ---- Saver ------------------------------------------------------------------------------------------------------


def test_saver_round_trip_max_to_keep_and_latest_checkpoint(tmp_path):
    w = tf.Variable(tf.random_normal([4, 3], seed=3), name="w")
    b = tf.Variable(tf.zeros([3]), name="b")
    inc = tf.assign_add(b, tf.ones([3]))
    saver = tf.train.Saver(max_to_keep=2)
    prefix = str(tmp_path / "model.ckpt")
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        paths = []
        for step in range(3):
            sess.run(inc)
            paths.append(saver.save(sess, prefix, global_step=step))
        w_saved, b_saved = sess.run([w, b])
    assert paths == [f"{prefix}-{k}" for k in range(3)]
    assert not os.path.exists(paths[0]) and os.path.exists(paths[1])  # max_to_keep=2
    assert tf.train.latest_checkpoint(str(tmp_path)) == paths[2]
    assert tf.train.get_checkpoint_state(str(tmp_path)).all_model_checkpoint_paths == paths[1:]
    with tf.Session() as sess:
        saver.restore(sess, paths[2])
        np.testing.assert_array_equal(sess.run(w), w_saved)
        np.testing.assert_array_equal(sess.run(b), [3, 3, 3])
        saver.restore(sess, paths[1])
        np.testing.assert_array_equal(sess.run(b), [2, 2, 2])
    del b_saved
    from flowjit import checkpoint
    arrays, meta = checkpoint.load(paths[2])  # an ordinary fj.checkpoint file
    assert sorted(arrays) == ["b", "w"] and meta["step"] == 2


def test_a_saver_of_some_variables_restores_them_from_a_checkpoint_holding_more(tmp_path):
    # TensorFlow's restore reads the variables of its var_list and ignores the file's others
    # (an inference graph restoring a checkpoint written with its optimizer's slots).
    w = tf.Variable(tf.ones([2]), name="w")
    loss = tf.reduce_sum(w * w)
    train = tf.train.AdamOptimizer(0.1).minimize(loss)
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        sess.run(train)
        trained = sess.run(w)
        path = tf.train.Saver().save(sess, str(tmp_path / "full"))
    tf.reset_default_graph()
    w = tf.Variable(tf.zeros([2]), name="w")
    with tf.Session() as sess:
        tf.train.Saver([w]).restore(sess, path)
        np.testing.assert_array_equal(sess.run(w), trained)


def test_saver_refuses_a_mismatched_or_missing_checkpoint(tmp_path):
    w = tf.Variable(tf.zeros([2]), name="w")
    with tf.Session() as sess:
        sess.run(w.initializer)
        path = tf.train.Saver().save(sess, str(tmp_path / "a"))
    tf.reset_default_graph()
    w = tf.Variable(tf.zeros([3]), name="w")
    extra = tf.Variable(tf.zeros([1]), name="extra")
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        with pytest.raises(tf.errors.NotFoundError, match=r"(?s)missing in file: extra.*shape of w"):
            tf.train.Saver().restore(sess, path)
        np.testing.assert_array_equal(sess.run(w), [0, 0, 0])  # nothing was restored
        with pytest.raises(tf.errors.NotFoundError, match="does not exist"):
            tf.train.Saver().restore(sess, str(tmp_path / "nope"))
    del extra


# ---- layers, losses, nn ---------------------------------------------------------------------------------------


def test_dense_layers_and_their_variables():
    x = tf.placeholder(tf.float32, [None, 5])
    h = tf.layers.dense(x, 4, activation=tf.nn.relu)
    y = tf.layers.dense(h, 2, name="out")
    assert [v.op.name for v in tf.trainable_variables()] == ["dense/kernel", "dense/bias", "out/kernel", "out/bias"]
    assert y.shape.as_list() == [None, 2]
    xs = np.random.default_rng(0).standard_normal((3, 5)).astype(np.float32)
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        k1, b1, k2, b2 = sess.run(tf.trainable_variables())
        np.testing.assert_allclose(sess.run(y, {x: xs}), np.maximum(xs @ k1 + b1, 0) @ k2 + b2, rtol=1e-5, atol=1e-5)


def test_losses_and_cross_entropies_match_numpy():
    logits = np.array([[2.0, 1.0, -1.0], [0.5, 0.5, 3.0]], np.float32)
    labels = np.array([0, 2], np.int32)
    onehot = np.eye(3, dtype=np.float32)[labels]
    logp = logits - np.log(np.exp(logits).sum(1, keepdims=True))
    sparse = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
    dense = tf.nn.softmax_cross_entropy_with_logits_v2(labels=onehot, logits=logits)
    mse = tf.losses.mean_squared_error(labels=np.ones((2, 3), np.float32), predictions=logits)
    sig = tf.nn.sigmoid_cross_entropy_with_logits(labels=onehot, logits=logits)
    with tf.Session() as sess:
        got = sess.run([sparse, dense, mse, sig, tf.losses.get_total_loss()])
    np.testing.assert_allclose(got[0], -logp[[0, 1], labels], rtol=1e-5)
    np.testing.assert_allclose(got[1], -logp[[0, 1], labels], rtol=1e-5)
    np.testing.assert_allclose(got[2], np.mean((logits - 1) ** 2), rtol=1e-5)
    np.testing.assert_allclose(got[3], np.maximum(logits, 0) - logits * onehot + np.log1p(np.exp(-np.abs(logits))),
                               rtol=1e-5)
    np.testing.assert_allclose(got[4], got[2], rtol=1e-6)


def test_dropout_keeps_the_expected_fraction_and_scales():
    x = tf.ones([100000])
    keep = tf.placeholder(tf.float32, [])
    y = tf.nn.dropout(x, keep)
    with tf.Session() as sess:
        a = sess.run(y, {keep: 0.8})
        b = sess.run(y, {keep: 0.8})
        assert np.all(sess.run(y, {keep: 1.0}) == 1.0)
    assert abs((a > 0).mean() - 0.8) < 0.01 and np.allclose(a[a > 0], 1.25)
    assert not np.array_equal(a, b)


def test_conv_and_pool_layers_shapes():
    x = tf.placeholder(tf.float32, [None, 8, 8, 1])
    c = tf.layers.conv2d(x, 4, 3, padding="same", activation=tf.nn.relu)
    p = tf.layers.max_pooling2d(c, 2, 2)
    f = tf.layers.flatten(p)
    assert c.shape.as_list() == [None, 8, 8, 4] and f.shape.as_list() == [None, 64]
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        assert sess.run(f, {x: np.ones((2, 8, 8, 1), np.float32)}).shape == (2, 64)


# ---- examples ---------------------------------------------------------------------------------------------------


def test_v1_linear_regression_example_converges(capsys):
    result = load_example("linear_regression").main(["--steps", "101"])
    assert abs(result["W"] - 0.1) < 0.005 and abs(result["b"] - 0.3) < 0.005
    assert "fitted W" in capsys.readouterr().out


def test_v1_mlp_digits_example_trains_saves_and_restores(tmp_path, capsys):
    pytest.importorskip("sklearn")
    result = load_example("mlp_digits").main(["--epochs", "6", "--checkpoint-dir", str(tmp_path)])
    assert result["test_accuracy"] > 0.9
    assert os.path.exists(result["checkpoint"]) and "restored test accuracy" in capsys.readouterr().out


def test_batch_normalization_layer_trains_with_batch_statistics_and_moves_its_averages():
    # tf.layers.batch_normalization: batch statistics while training, the update ops in
    # UPDATE_OPS moving the averages by 1 - momentum (the fused kernel's unbiased variance
    # for NHWC inputs), the moving statistics at inference; a training placeholder chooses.
    tf.reset_default_graph()
    rng = np.random.default_rng(0)
    x0 = rng.normal(2.0, 3.0, size=(4, 3, 3, 2))
    x = tf.placeholder(tf.float64, [None, 3, 3, 2])
    training = tf.placeholder(tf.bool, [])
    y = tf.layers.batch_normalization(x, momentum=0.9, training=training, name="bn")
    names = sorted(v.name for v in tf.global_variables())
    assert names == ["bn/beta:0", "bn/gamma:0", "bn/moving_mean:0", "bn/moving_variance:0"]
    assert sorted(v.name for v in tf.trainable_variables()) == ["bn/beta:0", "bn/gamma:0"]
    updates = tf.get_collection(tf.GraphKeys.UPDATE_OPS)
    assert len(updates) == 2
    mean, var = x0.mean(axis=(0, 1, 2)), x0.var(axis=(0, 1, 2))
    n = x0.size // 2
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        out, _ = sess.run([y, updates], {x: x0, training: True})
        np.testing.assert_allclose(out, (x0 - mean) / np.sqrt(var + 1e-3), rtol=1e-10)
        mm, mv = sess.run(["bn/moving_mean:0", "bn/moving_variance:0"])
        np.testing.assert_allclose(mm, 0.1 * mean, rtol=1e-10)
        np.testing.assert_allclose(mv, 0.9 + 0.1 * var * n / (n - 1), rtol=1e-10)
        # Not training: the moving statistics normalize, and the update ops leave them be.
        out, _ = sess.run([y, updates], {x: x0, training: False})
        np.testing.assert_allclose(out, (x0 - mm) / np.sqrt(mv + 1e-3), rtol=1e-10)
        np.testing.assert_allclose(sess.run("bn/moving_mean:0"), mm, rtol=0)


def test_batch_normalization_of_dense_features_uses_the_biased_variance_and_trains_in_a_model():
    tf.reset_default_graph()
    rng = np.random.default_rng(1)
    x0 = rng.normal(size=(16, 5)) * 4 + 1
    y0 = (x0[:, :1] > 1).astype(np.float64)
    x = tf.placeholder(tf.float64, [None, 5])
    t = tf.placeholder(tf.float64, [None, 1])
    h = tf.layers.batch_normalization(x, momentum=0.5, training=True)
    logits = tf.layers.dense(h, 1)
    loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=t, logits=logits))
    with tf.control_dependencies(tf.get_collection(tf.GraphKeys.UPDATE_OPS)):
        train = tf.train.GradientDescentOptimizer(0.5).minimize(loss)
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        first = sess.run(loss, {x: x0, t: y0})
        for _ in range(50):
            sess.run(train, {x: x0, t: y0})
        assert sess.run(loss, {x: x0, t: y0}) < 0.5 * first
        # Fifty updates at momentum 0.5: the averages are the batch's (biased) statistics.
        mm, mv = sess.run(["batch_normalization/moving_mean:0", "batch_normalization/moving_variance:0"])
        np.testing.assert_allclose(mm, x0.mean(axis=0), rtol=1e-9)
        np.testing.assert_allclose(mv, x0.var(axis=0), rtol=1e-9)


def test_minimize_under_control_dependencies_differentiates_the_variables():
    # TF1's batch-norm idiom: the training op built under the update ops' control
    # dependencies. A variable converted there is a fresh read, which the loss, built
    # before, does not use: every gradient was None ("No gradients provided").
    tf.reset_default_graph()
    x = tf.placeholder(tf.float64, [None, 2])
    w = tf.Variable(np.ones((2, 1)))
    count = tf.Variable(0.0, dtype=tf.float64)
    loss = tf.reduce_sum(tf.matmul(x, w) ** 2)
    with tf.control_dependencies([count.assign_add(1.0)]):
        (grad,) = tf.gradients(loss, [w])
        train = tf.train.GradientDescentOptimizer(0.1).minimize(loss)
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        g = sess.run(grad, {x: [[1.0, 2.0]]})
        np.testing.assert_allclose(g, [[6.0], [12.0]])
        sess.run(train, {x: [[1.0, 2.0]]})
        np.testing.assert_allclose(sess.run(w), [[0.4], [-0.2]])
        assert sess.run(count) >= 1.0      # the dependency ran with the training op


def test_gradients_flow_through_every_read_of_a_variable():
    # A use of a variable under tf.control_dependencies is a read of its own (after the
    # dependencies ran); TensorFlow differentiates through every read of a variable, as
    # through the variable. A loss using both a read made there and the shared one: the
    # gradient with respect to the variable was None (the fresh read was not the variable),
    # or only the shared read's part.
    tf.reset_default_graph()
    w = tf.Variable(np.array([1.0, 2.0]))
    counter = tf.Variable(0.0, dtype=tf.float64)
    with tf.control_dependencies([counter.assign_add(1.0)]):
        after = w * 3.0                      # a fresh read
    (only_fresh,) = tf.gradients(tf.reduce_sum(after ** 2), [w])
    (both,) = tf.gradients(tf.reduce_sum(after ** 2) + tf.reduce_sum(w * w), w)
    hess = tf.hessians(tf.reduce_sum(after ** 2), w)[0]
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        g1, g2, h = sess.run([only_fresh, both, hess])
    np.testing.assert_allclose(g1, 18.0 * np.array([1.0, 2.0]))
    np.testing.assert_allclose(g2, 20.0 * np.array([1.0, 2.0]))
    np.testing.assert_allclose(h, 18.0 * np.eye(2))



def test_hessians_are_second_derivatives_of_the_summed_ys():
    tf.reset_default_graph()
    x = tf.placeholder(tf.float64, [3])
    w = tf.Variable(np.array([[1.0, 2.0], [0.5, -1.0], [3.0, 0.0]]))
    unused = tf.Variable(np.ones(2))
    y = tf.reduce_sum(tf.sin(x) * x) + tf.reduce_sum(tf.matmul(tf.reshape(x, [1, 3]), w) ** 3)
    hx, hw, none = tf.hessians(y, [x, w, unused])
    assert hx.shape.as_list() == [3, 3] and hw.shape.as_list() == [3, 2, 3, 2] and none is None
    x0 = np.array([0.3, -0.2, 0.7])
    w0 = np.array([[1.0, 2.0], [0.5, -1.0], [3.0, 0.0]])
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        got_x, got_w = sess.run([hx, hw], {x: x0})
    # d2/dx2 of sum(sin(x) x) is diag(2 cos x - x sin x); of sum((x W)^3), 6 W diag(x W) W^T.
    u = x0 @ w0
    np.testing.assert_allclose(got_x, np.diag(2 * np.cos(x0) - x0 * np.sin(x0)) + 6 * (w0 * u) @ w0.T, rtol=1e-12)
    # d2/dW2 of sum((x W)^3): 6 u_j x_i x_k where the columns agree.
    want_w = np.einsum("i,k,j,jl->ijkl", x0, x0, 6 * u, np.eye(2))
    np.testing.assert_allclose(got_w, want_w, rtol=1e-12, atol=1e-14)


def test_ftrl_slots_are_named_as_tensorflow_names_them_or_as_given():
    w = tf.Variable(tf.zeros([2]), name="w")
    v = tf.Variable(tf.zeros([2]), name="v")
    tf.train.FtrlOptimizer(0.1).minimize(tf.reduce_sum(w * w), var_list=[w])
    tf.train.FtrlOptimizer(0.1, accum_name="n", linear_name="z").minimize(tf.reduce_sum(v * v), var_list=[v])
    names = sorted(x.op.name for x in tf.global_variables())
    assert names == ["v", "v/n", "v/z", "w", "w/Ftrl", "w/Ftrl_1"]
    with pytest.raises(ValueError, match="learning_rate_power must be <= 0"):
        tf.train.FtrlOptimizer(0.1, learning_rate_power=0.5)

