"""flowjit.v1's user gradients: ``tf.custom_gradient``, ``tf.RegisterGradient`` with
``Graph.gradient_override_map`` and ``tf.no_gradient``, each against hand-computed values
or finite differences, through ``tf.cond``, ``tf.while_loop``, second order and the
optimizers, and the errors TensorFlow raises."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import flowjit.v1 as tf
from tests.finite_differences import central_differences

_names = itertools.count()


@pytest.fixture(autouse=True)
def fresh_graph():
    tf.reset_default_graph()
    yield


def unique(name: str) -> str:
    """A gradient name no other test registered (the registry is process-wide, as TF's)."""
    return f"{name}_{next(_names)}"


@tf.custom_gradient
def log1pexp(x):
    # TensorFlow's documentation example: a stable gradient for log(1 + e^x).
    e = tf.exp(x)

    def grad(dy):
        return dy * (1 - 1 / (1 + e))
    return tf.log(1 + e), grad


def run(fetches, feed=None, init=False):
    with tf.Session() as sess:
        if init:
            sess.run(tf.global_variables_initializer())
        return sess.run(fetches, feed)


# ---- tf.custom_gradient --------------------------------------------------------------------------------------


def test_log1pexp_gradient_is_stable_at_100_where_the_plain_one_is_nan():
    x = tf.constant(100.0)
    custom = tf.gradients(log1pexp(x), x)[0]
    plain = tf.gradients(tf.log(1 + tf.exp(x)), x)[0]
    got_custom, got_plain = run([custom, plain])
    assert got_custom == 1.0
    assert np.isnan(got_plain)


def test_log1pexp_value_and_gradient_match_finite_differences():
    xs = np.array([-3.0, -0.5, 0.0, 1.5, 4.0])
    x = tf.placeholder(tf.float64, [5])
    y = log1pexp(x)
    dx = tf.gradients(tf.reduce_sum(y), x)[0]
    got_y, got_dx = run([y, dx], {x: xs})
    np.testing.assert_allclose(got_y, np.log1p(np.exp(xs)), rtol=1e-12)
    want = central_differences(lambda v: float(np.sum(np.log1p(np.exp(v)))), [xs], 0)
    np.testing.assert_allclose(got_dx, want, rtol=1e-6)


def test_the_user_gradient_is_used_not_the_forward_ops_derivative():
    # A straight-through estimator: forward rounds, backward passes dy through unchanged.
    @tf.custom_gradient
    def straight_through_round(x):
        return tf.round(x), lambda dy: dy

    x = tf.placeholder(tf.float32, [3])
    y = straight_through_round(x) * tf.constant([1.0, 2.0, 3.0])
    dx = tf.gradients(tf.reduce_sum(y), x)[0]
    got_y, got_dx = run([y, dx], {x: np.array([0.4, 1.6, -2.2], np.float32)})
    np.testing.assert_array_equal(got_y, [0.0, 4.0, -6.0])
    np.testing.assert_array_equal(got_dx, [1.0, 2.0, 3.0])


def test_second_order_through_a_custom_gradient():
    # d/dx of the custom gradient sigmoid(x) = 1 - 1/(1+e^x) is sigmoid(x)(1 - sigmoid(x)).
    xs = np.array([-2.0, 0.0, 0.7, 3.0])
    x = tf.placeholder(tf.float64, [4])
    dx = tf.gradients(tf.reduce_sum(log1pexp(x)), x)[0]
    d2 = tf.gradients(tf.reduce_sum(dx), x)[0]
    got_dx, got_d2 = run([dx, d2], {x: xs})
    s = 1 / (1 + np.exp(-xs))
    np.testing.assert_allclose(got_dx, s, rtol=1e-12)
    np.testing.assert_allclose(got_d2, s * (1 - s), rtol=1e-12)


def test_second_order_follows_the_user_gradient_not_the_forward():
    # f(x) = x^3 with the (wrong on purpose) gradient dy * 5 x^2: the second derivative is 10 x.
    @tf.custom_gradient
    def cube(x):
        return x * x * x, lambda dy: dy * 5.0 * x * x

    x = tf.placeholder(tf.float64, [3])
    dx = tf.gradients(tf.reduce_sum(cube(x)), x)[0]
    d2 = tf.gradients(tf.reduce_sum(dx), x)[0]
    xs = np.array([1.0, -2.0, 0.5])
    got_dx, got_d2 = run([dx, d2], {x: xs})
    np.testing.assert_allclose(got_dx, 5 * xs ** 2)
    np.testing.assert_allclose(got_d2, 10 * xs)


def test_several_inputs_and_outputs_and_grad_ys():
    @tf.custom_gradient
    def pair(a, b):
        def grad(d_sum, d_prod):
            return d_sum + d_prod * b, d_sum + d_prod * a
        return (a + b, a * b), grad

    a = tf.placeholder(tf.float64, [2])
    b = tf.placeholder(tf.float64, [2])
    s, p = pair(a, b)
    loss = tf.reduce_sum(tf.sin(s) + p * p)
    ga, gb = tf.gradients(loss, [a, b])
    weighted = tf.gradients([s, p], [a], grad_ys=[tf.constant([1.0, 2.0], tf.float64),
                                                  tf.constant([3.0, 4.0], tf.float64)])[0]
    av, bv = np.array([0.3, -1.2]), np.array([2.0, 0.5])
    got_a, got_b, got_w = run([ga, gb, weighted], {a: av, b: bv})

    def f(x, y):
        return float(np.sum(np.sin(x + y) + (x * y) ** 2))
    np.testing.assert_allclose(got_a, central_differences(f, [av, bv], 0), rtol=1e-6)
    np.testing.assert_allclose(got_b, central_differences(f, [av, bv], 1), rtol=1e-6)
    np.testing.assert_allclose(got_w, [1.0 + 3.0 * bv[0], 2.0 + 4.0 * bv[1]])


def test_a_none_gradient_leaves_the_input_unreached_as_tensorflow():
    # TF's tf.gradients gives None for an x reached only through None gradients (an
    # optimizer then skips its variable); another path gives it its gradient.
    @tf.custom_gradient
    def first(a, b):
        return a * b, lambda dy: (dy * b, None)

    name = unique("SecondOnly")
    tf.RegisterGradient(name)(lambda op, grad: (None, grad * 7.0))
    a = tf.placeholder(tf.float32, [2])
    b = tf.placeholder(tf.float32, [2])
    y = tf.reduce_sum(first(a, b))
    ga, gb = tf.gradients(y, [a, b])
    assert gb is None
    gb2 = tf.gradients(y + tf.reduce_sum(b * b), b)[0]
    with tf.get_default_graph().gradient_override_map({"Mul": name}):
        z = tf.reduce_sum(tf.multiply(a, b))
    za, zb = tf.gradients(z, [a, b])
    assert za is None
    feed = {a: np.ones(2, np.float32), b: np.array([3.0, 4.0], np.float32)}
    got_a, got_b2, got_zb = run([ga, gb2, zb], feed)
    np.testing.assert_array_equal(got_a, [3.0, 4.0])
    np.testing.assert_array_equal(got_b2, [6.0, 8.0])
    np.testing.assert_array_equal(got_zb, [7.0, 7.0])


def test_grad_fn_with_variables_returns_their_gradients():
    w = tf.Variable(np.array([1.0, 2.0, 3.0], np.float32), name="w")
    u = tf.Variable(np.array([0.5, 0.5, 0.5], np.float32), name="u")
    seen = []

    @tf.custom_gradient
    def scale(x):
        def grad(dy, variables=None):
            seen.append(list(variables))
            return dy * w * 10.0, [dy * u * 1000.0, dy * x * 100.0]
        return x * w + u, grad

    x = tf.placeholder(tf.float32, [3])
    y = scale(x)
    assert seen == [[u, w]]  # sorted by name, as TensorFlow passes them
    gx, gw, gu = tf.gradients(tf.reduce_sum(y), [x, w, u])
    xs = np.array([1.0, 2.0, -1.0], np.float32)
    got = run([y, gx, gw, gu], {x: xs}, init=True)
    np.testing.assert_array_equal(got[0], xs * [1, 2, 3] + 0.5)
    np.testing.assert_array_equal(got[1], [10.0, 20.0, 30.0])
    np.testing.assert_array_equal(got[2], xs * 100.0)
    np.testing.assert_array_equal(got[3], [500.0, 500.0, 500.0])


def test_an_optimizer_trains_with_the_custom_variable_gradient():
    w = tf.Variable(np.array([1.0, 2.0], np.float32), name="w")

    @tf.custom_gradient
    def halved_gradient(x):
        def grad(dy, variables):
            return dy * w, [0.5 * dy * x]
        return x * w, grad

    x = tf.constant([3.0, -1.0])
    loss = tf.reduce_sum(halved_gradient(x))
    step = tf.train.GradientDescentOptimizer(0.1).minimize(loss)
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        sess.run(step)
        np.testing.assert_allclose(sess.run(w), [1.0 - 0.1 * 1.5, 2.0 + 0.1 * 0.5], rtol=1e-6)


def test_custom_gradient_inside_a_cond_branch():
    x = tf.placeholder(tf.float32, [])
    p = tf.placeholder(tf.bool, [])
    y = tf.cond(p, lambda: log1pexp(x), lambda: x * 3.0)
    dx = tf.gradients(y, x)[0]
    assert run(dx, {x: 100.0, p: True}) == 1.0
    assert run(dx, {x: 100.0, p: False}) == 3.0


def test_custom_gradient_inside_a_while_loop_body():
    # Forward doubles each step; the user's gradient halves: three steps give 8x forward, 1/8 backward.
    @tf.custom_gradient
    def double(v):
        return v * 2.0, lambda dy: dy * 0.5

    x = tf.placeholder(tf.float32, [2])
    _, y = tf.while_loop(lambda i, v: i < 3, lambda i, v: (i + 1, double(v)), [tf.constant(0), x],
                         maximum_iterations=5)
    dx = tf.gradients(tf.reduce_sum(y * y), x)[0]
    xs = np.array([1.0, -2.0], np.float32)
    got_y, got_dx = run([y, dx], {x: xs})
    np.testing.assert_array_equal(got_y, 8 * xs)
    np.testing.assert_allclose(got_dx, 2 * (8 * xs) / 8)


# ---- tf.RegisterGradient and gradient_override_map -----------------------------------------------------------


def test_override_of_square_uses_the_registered_gradient():
    name = unique("Square3x")

    @tf.RegisterGradient(name)
    def _square_3x(op, grad):
        assert op.get_attr("T") == tf.float32  # what TF's gradient functions read
        return grad * 3.0 * op.inputs[0]

    g = tf.get_default_graph()
    x = tf.placeholder(tf.float32, [3])
    with g.gradient_override_map({"Square": name}):
        y = tf.square(x)
    plain = tf.square(x)  # made after the block: the mapping is gone
    assert y.op.get_attr("_gradient_op_type") == name.encode()
    with pytest.raises(ValueError, match="_gradient_op_type"):
        plain.op.get_attr("_gradient_op_type")
    dy = tf.gradients(tf.reduce_sum(y), x)[0]
    dplain = tf.gradients(tf.reduce_sum(plain), x)[0]
    xs = np.array([1.0, 2.0, -1.0], np.float32)
    got_y, got_dy, got_plain = run([y, dy, dplain], {x: xs})
    np.testing.assert_array_equal(got_y, xs * xs)
    np.testing.assert_array_equal(got_dy, 3 * xs)
    np.testing.assert_array_equal(got_plain, 2 * xs)


def test_registered_gradient_second_order_and_op_outputs():
    # The gradient reads op.outputs: d(x^2)/dx given as 2 * y / x; its derivative in x is 2.
    name = unique("SquareFromOutput")

    @tf.RegisterGradient(name)
    def _square_from_output(op, grad):
        return grad * 2.0 * op.outputs[0] / op.inputs[0]

    x = tf.placeholder(tf.float64, [3])
    with tf.get_default_graph().gradient_override_map({"Square": name}):
        y = tf.square(x)
    dx = tf.gradients(tf.reduce_sum(y), x)[0]
    d2 = tf.gradients(tf.reduce_sum(dx), x)[0]
    xs = np.array([1.5, -2.0, 0.25])
    got_dx, got_d2 = run([dx, d2], {x: xs})
    np.testing.assert_allclose(got_dx, 2 * xs)
    np.testing.assert_allclose(got_d2, [2.0, 2.0, 2.0])


def test_override_inside_cond_and_while_bodies():
    name = unique("SquareTimes10")

    @tf.RegisterGradient(name)
    def _square_10(op, grad):
        return grad * 10.0

    g = tf.get_default_graph()
    x = tf.placeholder(tf.float32, [])
    p = tf.placeholder(tf.bool, [])

    def squared():
        with g.gradient_override_map({"Square": name}):
            return tf.square(x)
    yc = tf.cond(p, squared, lambda: x * 2.0)
    dc = tf.gradients(yc, x)[0]

    def body(i, v):
        with g.gradient_override_map({"Square": name}):
            return i + 1, tf.square(v)
    _, yw = tf.while_loop(lambda i, v: i < 2, body, [tf.constant(0), x], maximum_iterations=2)
    dw = tf.gradients(yw, x)[0]
    assert run(dc, {x: 3.0, p: True}) == 10.0
    assert run(dc, {x: 3.0, p: False}) == 2.0
    got_y, got_dw = run([yw, dw], {x: 3.0})
    assert got_y == 81.0 and got_dw == 100.0


def test_override_to_a_built_in_gradient_straight_through_sign_and_round():
    # TF1's straight-through estimator: {"Sign": "Identity"} borrows Identity's gradient.
    g = tf.get_default_graph()
    x = tf.placeholder(tf.float32, [3])
    with g.gradient_override_map({"Sign": "Identity", "Round": "Identity", "Exp": "Sin"}):
        b = tf.sign(x)
        r = tf.round(x * 4.0)
        e = tf.exp(x)
    db, dr, de = (tf.gradients(tf.reduce_sum(t * tf.constant([1.0, 2.0, 3.0])), x)[0] for t in (b, r, e))
    xs = np.array([0.3, -1.2, 2.0], np.float32)
    got = run([b, db, dr, de], {x: xs})
    np.testing.assert_array_equal(got[0], [1.0, -1.0, 1.0])
    np.testing.assert_array_equal(got[1], [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(got[2], [4.0, 8.0, 12.0])
    np.testing.assert_allclose(got[3], np.cos(xs) * [1, 2, 3], rtol=1e-6)


def test_built_in_names_are_taken_and_arity_must_match():
    with pytest.raises(KeyError, match="Registering two gradient with name 'Square'"):
        tf.RegisterGradient("Square")(lambda op, grad: grad)
    x = tf.placeholder(tf.float32, [3])
    with tf.get_default_graph().gradient_override_map({"Square": "Add"}):
        y = tf.square(x)
    with pytest.raises(ValueError, match=r"maps Square \(1 input\) to the built-in gradient of Add, which takes 2"):
        tf.gradients(y, x)


def test_no_gradient_stops_the_path():
    name = unique("NoGradSquare")
    tf.no_gradient(name)
    x = tf.placeholder(tf.float32, [2])
    with tf.get_default_graph().gradient_override_map({"Square": name}):
        y = tf.square(x)
    assert tf.gradients(tf.reduce_sum(y), x) == [None]
    with tf.get_default_graph().gradient_override_map({"Square": "StopGradient"}):
        assert tf.gradients(tf.square(x), x) == [None]
    both = tf.gradients(tf.reduce_sum(y + 3.0 * x), x)[0]
    np.testing.assert_array_equal(run(both, {x: np.array([1.0, 2.0], np.float32)}), [3.0, 3.0])
    assert tf.NotDifferentiable is tf.no_gradient


def test_py_func_with_an_overridden_gradient():
    # TF1's recipe for a differentiable py_func: the forward runs in Python, the gradient
    # is the registered one, chained with the graph ops before and after it.
    name = unique("PyCube")

    @tf.RegisterGradient(name)
    def _cube_grad(op, dy):
        return dy * 3.0 * tf.square(op.inputs[0])

    x = tf.placeholder(tf.float32, [3])
    with tf.get_default_graph().gradient_override_map({"PyFunc": name}):
        h = tf.py_func(lambda v: v ** 3, [x * 2.0], tf.float32)
    y = tf.reduce_sum(tf.sin(h))
    dx = tf.gradients(y, x)[0]
    xs = np.array([0.1, -0.3, 0.5], np.float32)
    got_y, got_dx = run([y, dx], {x: xs})
    np.testing.assert_allclose(got_y, np.sum(np.sin((2 * xs) ** 3)), rtol=1e-6)
    np.testing.assert_allclose(got_dx, np.cos((2 * xs) ** 3) * 3 * (2 * xs) ** 2 * 2, rtol=1e-5)


def test_py_func_mapped_to_identity_is_a_straight_through_estimator():
    x = tf.placeholder(tf.float32, [3])
    with tf.get_default_graph().gradient_override_map({"PyFunc": "Identity"}):
        q = tf.py_func(lambda v: np.round(v * 4) / 4, [x], tf.float32)
    dx = tf.gradients(tf.reduce_sum(q * x), x)[0]
    xs = np.array([0.3, -0.6, 0.9], np.float32)
    qs = np.round(xs * 4) / 4
    got_q, got_dx = run([q, dx], {x: xs})
    np.testing.assert_array_equal(got_q, qs)
    np.testing.assert_allclose(got_dx, qs + xs, rtol=1e-6)


def test_py_func_without_a_gradient_is_not_differentiable_as_in_tensorflow():
    x = tf.placeholder(tf.float32, [3])
    h = tf.py_func(lambda v: v ** 3, [x], tf.float32)
    assert tf.gradients(tf.reduce_sum(h), x) == [None]
    both = tf.gradients(tf.reduce_sum(h) + tf.reduce_sum(x), x)[0]
    np.testing.assert_array_equal(run(both, {x: np.ones(3, np.float32)}), [1.0, 1.0, 1.0])


def test_stop_gradient_stops_inside_cond_branches_and_loop_bodies():
    # It stopped only at the top level: in a branch or a body it passed gradients through.
    x = tf.placeholder(tf.float32, [])
    p = tf.placeholder(tf.bool, [])
    yc = tf.cond(p, lambda: tf.stop_gradient(x * x) + x, lambda: x)
    dc = tf.gradients(yc, x)[0]
    _, yw = tf.while_loop(lambda i, v: i < 2, lambda i, v: (i + 1, tf.stop_gradient(v) * v),
                          [tf.constant(0), x], maximum_iterations=2)
    dw = tf.gradients(yw, x)[0]
    assert run(dc, {x: 3.0, p: True}) == 1.0
    # v1 = sg(x) x, v2 = sg(v1) v1: dv2/dx = v1 * sg(x) = 9 * 3.
    assert run([yw, dw], {x: 3.0}) == [81.0, 27.0]


# ---- errors -----------------------------------------------------------------------------------------------------


def test_registering_a_name_twice_is_a_key_error():
    name = unique("Twice")
    tf.RegisterGradient(name)(lambda op, grad: grad)
    with pytest.raises(KeyError, match=f"Registering two gradient with name '{name}'"):
        tf.RegisterGradient(name)(lambda op, grad: grad)
    with pytest.raises(KeyError, match=f"Registering two gradient with name '{name}'"):
        tf.no_gradient(name)
    with pytest.raises(TypeError, match="op_type must be a string"):
        tf.RegisterGradient(3)


def test_an_override_to_an_unregistered_name_is_a_lookup_error_in_tf_gradients():
    x = tf.placeholder(tf.float32, [2])
    with tf.get_default_graph().gradient_override_map({"Square": "NeverRegistered"}):
        y = tf.square(x)
    with pytest.raises(LookupError, match=r"No gradient defined for operation 'Square' \(op type: Square\).*"
                                          r"'NeverRegistered'.*tf.RegisterGradient"):
        tf.gradients(y, x)
    with pytest.raises(TypeError, match="mapping op types to gradient names"):
        with tf.get_default_graph().gradient_override_map({"Square": 3}):
            pass


def test_an_unregistered_override_off_the_path_is_not_looked_up():
    # As in TF, only ops between xs and ys need a gradient: here the branch's Square reads w.
    x = tf.placeholder(tf.float32, [])
    w = tf.placeholder(tf.float32, [])
    p = tf.placeholder(tf.bool, [])

    def branch():
        with tf.get_default_graph().gradient_override_map({"Square": "NeverRegistered"}):
            return tf.square(w) * x
    y = tf.cond(p, branch, lambda: x)
    dx = tf.gradients(y, x)[0]
    assert run(dx, {x: 2.0, w: 3.0, p: True}) == 9.0
    with pytest.raises(LookupError, match="NeverRegistered"):
        tf.gradients(y, w)


def test_registered_gradient_with_the_wrong_count_names_the_gradient():
    name = unique("TwoForOne")
    tf.RegisterGradient(name)(lambda op, grad: [grad, grad])
    x = tf.placeholder(tf.float32, [2])
    with tf.get_default_graph().gradient_override_map({"Square": name}):
        y = tf.square(x)
    with pytest.raises(ValueError, match=f"Num gradients 2 generated by the gradient '{name}'.*num inputs 1"):
        tf.gradients(y, x)


def test_custom_gradient_errors():
    w = tf.Variable(1.0, name="w")

    @tf.custom_gradient
    def no_variables_kwarg(x):
        return x * w, lambda dy: dy * w

    with pytest.raises(TypeError, match=r"grad_fn must accept a keyword argument 'variables'.*w:0"):
        no_variables_kwarg(tf.constant(2.0))

    @tf.custom_gradient
    def too_many(x):
        return x * 2.0, lambda dy: (dy, dy)

    with pytest.raises(ValueError, match=r"Num gradients 2 generated by grad_fn of too_many.*num inputs 1"):
        too_many(tf.constant(2.0))

    @tf.custom_gradient
    def no_grad_fn(x):
        return x * 2.0

    with pytest.raises(TypeError, match=r"returns \(y, grad_fn\); no_grad_fn returned Tensor"):
        no_grad_fn(tf.constant(2.0))
    with pytest.raises(ValueError, match="keywords arguments only when eager execution"):
        log1pexp(x=tf.constant(1.0))
