"""``tf.nn.rnn_cell`` and ``tf.nn.dynamic_rnn`` (flowjit.v1.rnn_cell, flowjit.v1.rnn), with
``tf.scan``, ``map_fn`` and the folds they build on: each cell's step against its NumPy
formula, a dynamic_rnn against the same cell unrolled by static_rnn and against NumPy,
rows masked past their lengths, and gradients through the loop against finite differences."""

from __future__ import annotations

import numpy as np
import pytest

import flowjit.v1 as tf


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


def _np_lstm(xs, w, b, units, forget_bias=1.0, c=None, h=None):
    """NumPy's BasicLSTMCell over xs [time, batch, depth]: (outputs, (c, h))."""
    batch = xs.shape[1]
    c = np.zeros((batch, units)) if c is None else c
    h = np.zeros((batch, units)) if h is None else h
    outs = []
    for x in xs:
        i, j, f, o = np.split(np.concatenate([x, h], 1) @ w + b, 4, axis=1)
        c = c * _sigmoid(f + forget_bias) + _sigmoid(i) * np.tanh(j)
        h = np.tanh(c) * _sigmoid(o)
        outs.append(h)
    return np.stack(outs), (c, h)


def _np_gru(xs, wg, bg, wc, bc, units):
    h = np.zeros((xs.shape[1], units))
    outs = []
    for x in xs:
        r, u = np.split(_sigmoid(np.concatenate([x, h], 1) @ wg + bg), 2, axis=1)
        cand = np.tanh(np.concatenate([x, r * h], 1) @ wc + bc)
        h = u * h + (1 - u) * cand
        outs.append(h)
    return np.stack(outs), h


def _values(sess, variables):
    return [sess.run(v).astype(np.float64) for v in variables]


def test_a_basic_lstm_over_a_sequence_matches_numpy_and_its_unrolled_self():
    tf.reset_default_graph()
    tf.set_random_seed(1)
    x = tf.placeholder(tf.float32, [None, 6, 3])
    cell = tf.nn.rnn_cell.BasicLSTMCell(5)
    outputs, state = tf.nn.dynamic_rnn(cell, x, dtype=tf.float32)
    assert isinstance(state, tf.nn.rnn_cell.LSTMStateTuple)
    assert [v.name for v in cell.variables] == ["rnn/basic_lstm_cell/kernel:0", "rnn/basic_lstm_cell/bias:0"]
    assert outputs.shape.as_list() == [None, 6, 5]
    unrolled, ustate = tf.nn.static_rnn(cell, tf.unstack(x, axis=1), dtype=tf.float32)   # the same variables
    xv = np.random.default_rng(0).normal(size=(4, 6, 3)).astype(np.float32)
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        out, (c, h), un, (uc, uh) = sess.run([outputs, state, unrolled, ustate], {x: xv})
        w, b = _values(sess, cell.variables)
    want, (wc, wh) = _np_lstm(xv.transpose(1, 0, 2).astype(np.float64), w, b, 5)
    np.testing.assert_allclose(out, want.transpose(1, 0, 2), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(c, wc, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(h, wh, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.stack(un, 1), out, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(uc, c, rtol=1e-5, atol=1e-6)


def test_rows_past_their_length_give_zeros_and_keep_their_state():
    tf.reset_default_graph()
    x = tf.placeholder(tf.float32, [3, 5, 2])
    lengths = tf.placeholder(tf.int32, [3])
    cell = tf.nn.rnn_cell.GRUCell(4)
    outputs, state = tf.nn.dynamic_rnn(cell, x, sequence_length=lengths, dtype=tf.float32)
    xv = np.random.default_rng(1).normal(size=(3, 5, 2)).astype(np.float32)
    lv = np.array([5, 2, 0], np.int32)
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        out, h = sess.run([outputs, state], {x: xv, lengths: lv})
        wg, bg, wc, bc = _values(sess, cell.variables)
    assert [v.name.split("/", 1)[1] for v in cell.variables] == [
        "gru_cell/gates/kernel:0", "gru_cell/gates/bias:0", "gru_cell/candidate/kernel:0", "gru_cell/candidate/bias:0"]
    np.testing.assert_array_equal(bg, np.ones(8))   # TensorFlow's gates start open
    for row, n in enumerate(lv):
        want, last = _np_gru(xv[row:row + 1, :n].transpose(1, 0, 2).astype(np.float64), wg, bg, wc, bc, 4) \
            if n else (np.zeros((0, 1, 4)), np.zeros((1, 4)))
        np.testing.assert_allclose(out[row, :n], want[:, 0], rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(out[row, n:], 0.0)
        np.testing.assert_allclose(h[row], last[0], rtol=1e-5, atol=1e-6)


def test_a_stack_of_cells_and_an_lstm_with_peepholes_and_a_projection():
    tf.reset_default_graph()
    x = tf.placeholder(tf.float32, [2, 4, 3])
    cells = [tf.nn.rnn_cell.LSTMCell(5, use_peepholes=True, num_proj=2, cell_clip=0.5),
             tf.nn.rnn_cell.BasicRNNCell(3)]
    stack = tf.nn.rnn_cell.MultiRNNCell(cells)
    outputs, state = tf.nn.dynamic_rnn(stack, x, time_major=True, dtype=tf.float32)
    names = [v.name for v in stack.variables]
    lstm = ("kernel", "bias", "w_f_diag", "w_i_diag", "w_o_diag", "projection/kernel")
    assert names == [f"rnn/multi_rnn_cell/cell_0/lstm_cell/{n}:0" for n in lstm] + \
                    [f"rnn/multi_rnn_cell/cell_1/basic_rnn_cell/{n}:0" for n in ("kernel", "bias")]
    assert outputs.shape.as_list() == [2, 4, 3] and state[0].h.shape.as_list() == [4, 2]
    xv = np.random.default_rng(2).normal(size=(2, 4, 3)).astype(np.float32)
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        out, (s0, s1) = sess.run([outputs, state], {x: xv})
        w, b, wf, wi, wo, proj, w2, b2 = _values(sess, stack.variables)
    c, h, h2 = np.zeros((4, 5)), np.zeros((4, 2)), np.zeros((4, 3))
    for t in range(2):
        i, j, f, o = np.split(np.concatenate([xv[t], h], 1) @ w + b, 4, axis=1)
        c = np.clip(_sigmoid(f + wf * c + 1.0) * c + _sigmoid(i + wi * c) * np.tanh(j), -0.5, 0.5)
        h = (_sigmoid(o + wo * c) * np.tanh(c)) @ proj
        h2 = np.tanh(np.concatenate([h, h2], 1) @ w2 + b2)
        np.testing.assert_allclose(out[t], h2, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(s0.c, c, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(s1, h2, rtol=1e-5, atol=1e-6)


def test_gradients_through_dynamic_rnn_match_finite_differences():
    tf.reset_default_graph()
    tf.set_random_seed(3)
    x = tf.placeholder(tf.float64, [2, 3, 2])
    cell = tf.nn.rnn_cell.BasicLSTMCell(3, dtype=tf.float64)
    outputs, state = tf.nn.dynamic_rnn(cell, x, dtype=tf.float64)
    loss = tf.reduce_sum(outputs * outputs) + tf.reduce_sum(state.c)
    grads = tf.gradients(loss, cell.variables + [x])
    xv = np.random.default_rng(4).normal(size=(2, 3, 2))
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        got = sess.run(grads, {x: xv})
        w, b = _values(sess, cell.variables)

    def f(w, b, xv):
        out, (c, _) = _np_lstm(xv.transpose(1, 0, 2), w, b, 3)
        return (out * out).sum() + c.sum()
    eps = 1e-6
    for k, (arr, g) in enumerate(zip([w, b, xv], got)):
        want = np.zeros_like(arr)
        for idx in np.ndindex(arr.shape):
            up, down = [w.copy(), b.copy(), xv.copy()], [w.copy(), b.copy(), xv.copy()]
            up[k][idx] += eps
            down[k][idx] -= eps
            want[idx] = (f(*up) - f(*down)) / (2 * eps)
        np.testing.assert_allclose(g, want, rtol=1e-5, atol=1e-7)


def test_a_bidirectional_rnn_reads_each_row_backwards_within_its_length():
    tf.reset_default_graph()
    x = tf.placeholder(tf.float32, [2, 4, 2])
    lengths = tf.constant([4, 2])
    fw, bw = tf.nn.rnn_cell.BasicRNNCell(3, name="f"), tf.nn.rnn_cell.BasicRNNCell(3, name="b")
    (out_fw, out_bw), _ = tf.nn.bidirectional_dynamic_rnn(fw, bw, x, sequence_length=lengths, dtype=tf.float32)
    assert fw.variables[0].name == "bidirectional_rnn/fw/f/kernel:0"
    xv = np.random.default_rng(5).normal(size=(2, 4, 2)).astype(np.float32)
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        got = sess.run(out_bw, {x: xv})
        wk, wb = _values(sess, bw.variables)
    for row, n in enumerate([4, 2]):
        h, outs = np.zeros(3), []
        for t in reversed(range(n)):
            h = np.tanh(np.concatenate([xv[row, t], h]) @ wk + wb)
            outs.append(h)
        np.testing.assert_allclose(got[row, :n], outs[::-1], rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(got[row, n:], 0.0)
    with tf.Session() as sess:
        r = sess.run(tf.reverse_sequence(tf.constant([[1, 2, 3, 4], [5, 6, 7, 8]]), [3, 1], seq_axis=1, batch_axis=0))
    np.testing.assert_array_equal(r, [[3, 2, 1, 4], [5, 6, 7, 8]])


def test_scan_map_fn_and_the_folds():
    tf.reset_default_graph()
    x = tf.placeholder(tf.float32, [4, 2])
    w = tf.Variable(np.float32([2.0, 0.5]))
    running = tf.scan(lambda a, e: a * w + e, x, initializer=tf.zeros([2]))
    summed = tf.scan(lambda a, e: a + e, x)                # from the first element
    backwards = tf.scan(lambda a, e: a + e, x, reverse=True)
    squares = tf.map_fn(lambda e: tf.reduce_sum(e * e), x)
    pairs = tf.map_fn(lambda e: (e[0][0], e[1] * 2.0), (x, x))   # a nest of elems: a nest of rows
    left = tf.foldl(lambda a, e: a * 2.0 + e, x)
    right = tf.foldr(lambda a, e: a * 2.0 + e, x, initializer=tf.zeros([2]))
    grad = tf.gradients(tf.reduce_sum(running), w)[0]
    xv = np.random.default_rng(6).normal(size=(4, 2)).astype(np.float32)
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        r = sess.run([running, summed, backwards, squares, pairs, left, right, grad], {x: xv})
    xd, wv = xv.astype(np.float64), np.array([2.0, 0.5])
    a, want = np.zeros(2), []
    for e in xd:
        a = a * wv + e
        want.append(a)
    np.testing.assert_allclose(r[0], want, rtol=1e-5)
    np.testing.assert_allclose(r[1], np.cumsum(xd, 0), rtol=1e-5)
    np.testing.assert_allclose(r[2], np.cumsum(xd[::-1], 0)[::-1], rtol=1e-5)
    np.testing.assert_allclose(r[3], (xd * xd).sum(1), rtol=1e-5)
    np.testing.assert_allclose(r[4][0], xd[:, 0], rtol=1e-6)
    np.testing.assert_allclose(r[4][1], xd * 2, rtol=1e-6)
    np.testing.assert_allclose(r[5], ((xd[0] * 2 + xd[1]) * 2 + xd[2]) * 2 + xd[3], rtol=1e-5)
    np.testing.assert_allclose(r[6], ((xd[3] * 2 + xd[2]) * 2 + xd[1]) * 2 + xd[0], rtol=1e-5)
    # d/dw of the sum of the running values: through every step of the loop
    eps, base = 1e-6, np.sum(want)
    for i in range(2):
        a, total = np.zeros(2), 0.0
        wp = wv.copy()
        wp[i] += eps
        for e in xd:
            a = a * wp + e
            total += a.sum()
        np.testing.assert_allclose(r[7][i], (total - base) / eps, rtol=1e-3)


def test_what_the_loops_refuse():
    tf.reset_default_graph()
    with pytest.raises(ValueError, match="give initial_state or dtype"):
        tf.nn.dynamic_rnn(tf.nn.rnn_cell.BasicRNNCell(2), tf.zeros([1, 3, 2]))
    with pytest.raises(ValueError, match=r"inputs must be \[batch, time, depth\]"):
        tf.nn.dynamic_rnn(tf.nn.rnn_cell.BasicRNNCell(2), tf.zeros([3, 2]), dtype=tf.float32)
    with pytest.raises(TypeError, match=r"tf.scan: the function returns \['int32'\].*accumulator of \['float32'\]"):
        tf.scan(lambda a, e: tf.cast(a, tf.int32), tf.zeros([3]), initializer=tf.constant(0.0))
