"""flowjit.v1 graphs and sessions: fetch structures, feeds, pruning, the compile cache, and
the errors TensorFlow 1.x users rely on."""

from __future__ import annotations

import collections
import re

import numpy as np
import pytest

import flowjit as fj
import flowjit.v1 as tf
from tests.passes.variable_programs import check_v1_readers_elsewhere


@pytest.fixture(autouse=True)
def fresh_graph():
    tf.reset_default_graph()
    yield


def test_placeholder_with_unknown_batch_runs_each_fed_shape():
    x = tf.placeholder(tf.float32, [None, 3], name="x")
    w = tf.constant(np.arange(6, dtype=np.float32).reshape(3, 2))
    y = tf.nn.relu(tf.matmul(x, w) - 4.0)
    assert y.shape.as_list() == [None, 2] and y.dtype == tf.float32
    with tf.Session() as sess:
        for n in (1, 5):
            xs = np.random.default_rng(n).standard_normal((n, 3)).astype(np.float32)
            np.testing.assert_allclose(sess.run(y, {x: xs}), np.maximum(xs @ np.arange(6).reshape(3, 2) - 4, 0),
                                       rtol=1e-5, atol=1e-5)


def test_fetch_structures_come_back_in_the_same_shape():
    Pair = collections.namedtuple("Pair", "a b")
    a = tf.constant(2.0, name="a")
    b = a * 3.0
    op = tf.no_op()
    with tf.Session() as sess:
        out = sess.run({"x": [a, (b, op)], "p": Pair(a, b)})
        assert out["x"][0] == 2.0 and out["x"][1][0] == 6.0 and out["x"][1][1] is None
        assert isinstance(out["p"], Pair) and out["p"].b == 6.0
        assert sess.run("a:0") == 2.0 and sess.run(b.name) == 6.0
        assert sess.run(op) is None


def test_any_tensor_can_be_fed_and_its_producer_does_not_run():
    calls = []
    x = tf.placeholder(tf.float32, [2])
    side = tf.py_func(lambda v: (calls.append(1), v * 10)[1], [x], tf.float32)
    y = side + 1.0
    with tf.Session() as sess:
        np.testing.assert_allclose(sess.run(y, {side: [1.0, 2.0]}), [2.0, 3.0])
        assert calls == []  # the fed tensor's producer (and its placeholder) were pruned
        np.testing.assert_allclose(sess.run(y, {x: [1.0, 2.0]}), [11.0, 21.0])
        assert calls == [1]


def test_pruning_runs_only_what_the_fetches_need():
    x = tf.placeholder(tf.float32, [])
    counter_a = tf.Variable(0, name="counter_a")
    counter_b = tf.Variable(0, name="counter_b")
    with tf.control_dependencies([tf.assign_add(counter_a, 1)]):
        branch_a = tf.identity(x * 2.0)
    with tf.control_dependencies([tf.assign_add(counter_b, 1)]):
        branch_b = tf.identity(x * 3.0)
    calls = []
    branch_c = tf.py_func(lambda v: (calls.append(1), v)[1], [x], tf.float32)
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        for _ in range(3):
            assert sess.run(branch_a, {x: 1.0}) == 2.0
        assert sess.run([counter_a, counter_b]) == [3, 0]  # branch_b never ran
        assert calls == []
        sess.run(branch_b, {x: 1.0})
        sess.run(branch_c, {x: 1.0})
        assert sess.run([counter_a, counter_b]) == [3, 1] and calls == [1]


def test_feeding_the_same_shapes_again_compiles_nothing():
    x = tf.placeholder(tf.float32, [None, 4])
    w = tf.Variable(tf.ones([4, 2]))
    loss = tf.reduce_mean(tf.square(tf.matmul(x, w)))
    train = tf.train.GradientDescentOptimizer(0.01).minimize(loss)
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        known = set(sess._plans)
        xs = np.ones((8, 4), np.float32)
        sess.run((train, loss), {x: xs})
        plans = dict(sess._plans)
        before = fj.cache_stats()  # both backends' modules
        programs = [s.program for k, p in plans.items() if k not in known for s in p.steps]
        traces = [p.trace_count for p in programs]
        for _ in range(5):
            sess.run((train, loss), {x: xs + 1})
        assert fj.cache_stats()["compiled"] == before["compiled"]
        assert fj.cache_stats()["loaded"] == before["loaded"]
        assert [p.trace_count for p in programs] == traces == [1]
        assert sess._plans.keys() == plans.keys()
        sess.run((train, loss), {x: np.ones((3, 4), np.float32)})  # a new batch size traces once more
        assert [p.trace_count for p in programs] == [2]


def test_a_session_run_is_compiled_into_fused_kernels():
    x = tf.placeholder(tf.float32, [None, 16])
    y = tf.nn.softmax(x * 2.0 + 1.0)
    with tf.Session() as sess:
        sess.run(y, {x: np.zeros((4, 16), np.float32)})
        (plan,) = sess._plans.values()
        (seg,) = plan.steps
        fused = seg.program.ir(fj.ShapeDtype((4, 16), "float32"), stage="fused")
    kernels = [op for op in fused.body.ops if op.primitive.name == "fusion"]
    assert len(kernels) == 1  # scale, shift and the whole softmax in one kernel


def test_ir_ops_carry_the_line_that_built_the_graph():
    x = tf.placeholder(tf.float32, [3])
    y = tf.exp(x)  # built here
    line = y.op.location.line
    with tf.Session() as sess:
        sess.run(y, {x: np.zeros(3, np.float32)})
        (plan,) = sess._plans.values()
        fn = plan.steps[0].program.ir(fj.ShapeDtype((3,), "float32"))
    assert any(op.loc is not None and op.loc.line == line for op in fn.body.ops)


def test_an_unfed_placeholder_is_named_only_when_needed():
    x = tf.placeholder(tf.float32, [None, 784], name="images")
    unused = tf.placeholder(tf.float32, [2], name="unused")
    y = tf.reduce_sum(x)
    z = tf.constant(1.0) + 1.0
    with tf.Session() as sess:
        assert sess.run(z) == 2.0  # `unused` and `images` are not needed
        with pytest.raises(tf.errors.InvalidArgumentError, match=r"placeholder tensor 'images'.*\(\?, 784\)"):
            sess.run(y)
        del unused


def test_reading_an_uninitialized_variable_names_it():
    v = tf.Variable(tf.zeros([3]), name="weights")
    with tf.Session() as sess:
        with pytest.raises(tf.errors.FailedPreconditionError, match="uninitialized value weights"):
            sess.run(v + 1.0)
        sess.run(v.initializer)
        np.testing.assert_array_equal(sess.run(v + 1.0), [1, 1, 1])
    with tf.Session() as other:  # each session has its own state
        with pytest.raises(tf.errors.FailedPreconditionError):
            other.run(v)


def test_fed_values_of_the_wrong_shape_or_dtype_are_rejected():
    x = tf.placeholder(tf.float32, [None, 3], name="x")
    i = tf.placeholder(tf.int32, [2], name="i")
    with tf.Session() as sess:
        with pytest.raises(tf.errors.InvalidArgumentError, match=r"shape \(2, 4\).*'x:0'.*\(\?, 3\)"):
            sess.run(x, {x: np.zeros((2, 4))})
        with pytest.raises(tf.errors.InvalidArgumentError, match=r"float64 to i:0"):
            sess.run(i, {i: np.array([0.5, 1.5])})
        np.testing.assert_array_equal(sess.run(i, {i: [1, 2]}), [1, 2])  # Python ints are fine
        assert sess.run(x, {x: np.ones((1, 3))}).dtype == np.float32  # float64 converts to float32


def test_tensors_of_another_graph_are_refused():
    other = tf.Graph()
    with other.as_default():
        foreign = tf.constant(1.0)
    mine = tf.constant(2.0)
    with tf.Session() as sess:
        with pytest.raises(ValueError, match="another tf.Graph"):
            sess.run(foreign)
        with pytest.raises(ValueError, match="another graph"):
            mine + foreign
        with tf.Session(graph=other) as s2:
            assert s2.run(foreign) == 1.0


def test_graph_names_scopes_and_lookup():
    with tf.name_scope("layer"):
        a = tf.constant(1.0, name="c")
        b = tf.constant(2.0, name="c")
        with tf.name_scope("inner"):
            s = tf.add(a, b, name="sum")
    with tf.name_scope("layer"):
        d = tf.constant(3.0, name="c")
    assert [a.name, b.name, s.name, d.name] == ["layer/c:0", "layer/c_1:0", "layer/inner/sum:0", "layer_1/c:0"]
    g = tf.get_default_graph()
    assert g.get_tensor_by_name("layer/inner/sum:0") is s
    assert g.get_operation_by_name("layer/c") is a.op


def test_shapes_are_checked_when_the_graph_is_built():
    a = tf.placeholder(tf.float32, [2, 3])
    b = tf.placeholder(tf.float32, [4, 5])
    with pytest.raises(fj.ShapeError, match=r"(?s)matmul.*building MatMul op"):
        tf.matmul(a, b)
    c = tf.placeholder(tf.float32, [None, 3])
    assert tf.reshape(c, [-1]).shape.as_list() == [None]
    assert tf.reduce_mean(c, axis=0).shape.as_list() == [3]


def test_a_runtime_shape_error_names_the_op():
    a = tf.placeholder(tf.float32, [None, 3])
    b = tf.placeholder(tf.float32, [None, 3])
    c = a + b
    with tf.Session() as sess:
        with pytest.raises(fj.ShapeError, match=r"(?s)do not broadcast.*Add op 'Add'"):
            sess.run(c, {a: np.ones((2, 3)), b: np.ones((4, 3))})


def test_eval_and_run_use_the_default_session():
    x = tf.placeholder(tf.float32, [])
    y = x * 2.0
    v = tf.Variable(1.0)
    with tf.Session():
        tf.global_variables_initializer().run()
        assert y.eval({x: 3.0}) == 6.0 and v.eval() == 1.0
    sess = tf.InteractiveSession()
    try:
        v.initializer.run()
        assert (v * 5.0).eval() == 5.0
    finally:
        sess.close()
    with pytest.raises(ValueError, match="needs a session"):
        y.eval({x: 1.0})


def test_a_closed_session_refuses_to_run():
    sess = tf.Session()
    sess.close()
    with pytest.raises(RuntimeError, match="closed Session"):
        sess.run(tf.constant(1.0))


def test_random_ops_draw_anew_each_run_and_repeat_with_a_graph_seed():
    def draws():
        tf.reset_default_graph()
        tf.set_random_seed(7)
        u = tf.random_uniform([1000], -2.0, 3.0)
        n = tf.random_normal([1000], 1.0, 2.0)
        t = tf.truncated_normal([4000], 0.0, 0.5)
        with tf.Session() as sess:
            first = sess.run([u, n, t])
            second = sess.run(u)
        return first, second
    (u, n, t), u2 = draws()
    (u_again, n_again, _), _ = draws()
    assert u.min() >= -2.0 and u.max() < 3.0 and abs(u.mean() - 0.5) < 0.15
    assert abs(n.mean() - 1.0) < 0.2 and abs(n.std() - 2.0) < 0.2
    assert np.abs(t).max() < 1.0 and 0.4 < t.std() / 0.5 < 0.95  # truncated at two standard deviations
    assert not np.array_equal(u, u2)  # a new draw per run
    np.testing.assert_array_equal(u, u_again)  # the same sequence with the same graph seed
    np.testing.assert_array_equal(n, n_again)


def test_py_func_errors_surface_as_unknown_error():
    x = tf.constant([1.0])
    bad = tf.py_func(lambda v: 1 / 0, [x], tf.float32, name="divide")
    with tf.Session() as sess:
        with pytest.raises(tf.errors.UnknownError, match="ZeroDivisionError.*'divide'"):
            sess.run(bad)


def _two_device_model():
    x = tf.placeholder(tf.float32, [None, 4])
    with tf.device("/cpu:1"):
        w = tf.Variable(tf.ones([4, 3]), name="w")
        h = tf.nn.relu(tf.matmul(x, w))
    with tf.device("/device:CPU:0"):
        y = tf.reduce_sum(h * 2.0)
    return x, w, y, tf.train.GradientDescentOptimizer(0.1).minimize(y)


def _executables(sess):
    return [e.executable for plan in sess._plans.values() for step in plan.steps
            if hasattr(step, "program") for e in step.program._cache.values()]


def test_tf_device_places_ops_and_variables_on_those_devices(monkeypatch, capsys):
    monkeypatch.setenv("FLOWJIT_CPU_DEVICES", "2")
    x, w, y, train = _two_device_model()
    xs = np.ones((2, 4), np.float32)
    with tf.Session(config=tf.ConfigProto(log_device_placement=True)) as sess:
        sess.run(tf.global_variables_initializer())
        assert sess.run(y, {x: xs}) == 48.0
        sess.run(train, {x: xs})  # dy/dw = 2 * x^T 1 = 4: w = 1 - 0.4
        np.testing.assert_allclose(sess.run(y, {x: xs}), 2 * 6 * 4 * 0.6, rtol=1e-6)
        assert sess._state_of(w).device == "cpu:1"
        both = [e for e in _executables(sess) if sorted(getattr(e, "devices", [])) == ["cpu:0", "cpu:1"]]
        assert both  # the forward pass and the training step: MatMul on cpu:1, Sum on cpu:0
        ir = str(both[-1].function)
        assert "@cpu:1" in ir and "send %" in ir
    log = capsys.readouterr().err
    assert "MatMul: (MatMul): cpu:1" in log and "Sum: (Sum): cpu:0" in log
    # Where each op was placed, once per compiled program: the update assigns on w's
    # device, its arithmetic goes where the cost model sends it; a NoOp leaves no op.
    assert re.search(r"^GradientDescent/update_w: \(ApplyGradientDescent\): (cpu:0, )?cpu:1$", log, re.M), log
    assert "init: (NoOp): placed by flowjit" in log
    assert log.count("MatMul: (MatMul)") == 2, log  # the forward program and the training step's


def test_a_missing_device_fails_unless_soft_placement_is_allowed(monkeypatch, capsys):
    monkeypatch.delenv("FLOWJIT_CPU_DEVICES", raising=False)
    x, w, y, train = _two_device_model()
    xs = np.ones((2, 4), np.float32)
    with tf.Session() as sess:
        with pytest.raises(tf.errors.InvalidArgumentError,
                           match=r"Cannot assign a device for operation 'ones'.*assigned to cpu:1, but this "
                                 r"process has cpu:0\. FLOWJIT_CPU_DEVICES=N.*allow_soft_placement=True"):
            sess.run(tf.global_variables_initializer())
    config = tf.ConfigProto(allow_soft_placement=True, intra_op_parallelism_threads=2,
                            gpu_options=tf.GPUOptions(allow_growth=True), log_device_placement=True)
    with tf.Session(config=config) as sess:
        sess.run(tf.global_variables_initializer())
        assert sess.run(y, {x: xs}) == 48.0
        sess.run(train, {x: xs})
        np.testing.assert_allclose(sess.run(y, {x: xs}), 28.8, rtol=1e-6)
    log = capsys.readouterr().err
    assert "MatMul: (MatMul): placed by flowjit" in log and "cpu:1" not in log, log  # not where it asked
    with pytest.raises(TypeError, match="unknown fields.*allow_soft_placment"):
        tf.ConfigProto(allow_soft_placment=True)


@pytest.mark.parametrize("variable_on", [None, "/cpu:0"])
def test_tf_device_around_the_readers_leaves_the_variable_where_it_was_created(monkeypatch, variable_on):
    # As fj.device: the variable and its update stay on its device (cpu:0); the readers
    # and the gradient run on cpu:1 with a copy of it.
    monkeypatch.setenv("FLOWJIT_CPU_DEVICES", "2")
    check_v1_readers_elsewhere(tf, "/cpu:1", variable_on)


def test_device_scopes_are_recorded_on_ops():
    with tf.device("/gpu:1"):
        a = tf.constant(1.0)
        with tf.device("/job:worker/task:0/cpu:0"):
            b = a + 1.0
    c = b * 2.0
    # A task's device keeps its job and task (it names another process of a cluster).
    assert (a.device, b.device, c.device) == ("cuda:1", "/job:worker/task:0/cpu:0", "")


def test_chained_py_funcs_fetched_with_a_training_op():
    # The training op lands in a segment after both host ops and recomputes the forward
    # pass it differentiates: the placeholder it reads must reach that segment too.
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float32, [None, 3])
        w = tf.Variable(np.ones((3, 1), np.float32))
        loss = tf.reduce_mean(tf.matmul(x, w) ** 2)
        doubled = tf.py_func(lambda v: v * 2, [loss], tf.float32)
        plus_one = tf.py_func(lambda v: v + 1, [doubled], tf.float32)
        train = tf.train.GradientDescentOptimizer(0.1).minimize(loss)
        xs = np.arange(12, dtype=np.float32).reshape(4, 3) / 10
        with tf.Session(graph=g) as s:
            s.run(tf.global_variables_initializer())
            got, _ = s.run([plus_one, train], {x: xs})
            new_w = s.run(w)
    y = xs @ np.ones((3, 1), np.float32)
    np.testing.assert_allclose(got, np.mean(y ** 2) * 2 + 1, rtol=1e-6)
    grad = xs.T @ (2 * y / y.size)
    np.testing.assert_allclose(new_w, np.ones((3, 1)) - 0.1 * grad, rtol=1e-5)


def test_an_op_whose_compute_builds_graph_ops_is_refused_not_a_deadlock():
    # An op's compute runs on traced values while the graph adds the op; one that calls a
    # tf op (v1's own `range`, not builtins') used to wait forever on the graph's lock.
    import threading

    from flowjit.v1.ops import apply

    def compute(x):
        return x + tf.range(3)

    outcome: list = []

    def build():
        with tf.Graph().as_default():
            try:
                apply("Sneaky", compute, [tf.constant([1, 2, 3])])
                outcome.append(None)
            except Exception as e:  # noqa: BLE001 - the test reads it below
                outcome.append(e)

    worker = threading.Thread(target=build, daemon=True)
    worker.start()
    worker.join(30)
    assert not worker.is_alive(), "building the op hung"
    err = outcome[0]
    assert isinstance(err, RuntimeError)
    assert "added to the graph while Sneaky op" in str(err) and "fj." in str(err)


def test_random_gamma_and_the_tf_random_namespace():
    # tf.random_gamma: shape samples of each alpha (the result's shape ends in alpha's), rate
    # beta; new values each run; tf.random.* the same ops under TF 1.13's names.
    stats = pytest.importorskip("scipy.stats")
    tf.reset_default_graph()
    g = tf.random_gamma([4000], alpha=[0.5, 3.0], beta=2.0, dtype=tf.float64, seed=1)
    n = tf.random.normal([3], seed=2)
    c = tf.random.categorical(tf.constant([[0.0, 10.0]]), 5, seed=3)
    shuffled = tf.random.shuffle(tf.range(6), seed=4)
    with tf.Session() as sess:
        a, nv, cv, sv = sess.run([g, n, c, shuffled])
        b = sess.run(g)
    assert a.shape == (4000, 2) and a.dtype == np.float64 and not np.array_equal(a, b)
    for j, alpha in enumerate((0.5, 3.0)):
        assert stats.kstest(a[:, j], stats.gamma(alpha, scale=1 / 2.0).cdf).pvalue > 1e-3
    assert nv.shape == (3,) and cv.dtype == np.int64 and (cv == 1).all()
    assert sorted(sv.tolist()) == list(range(6))
    assert tf.random.uniform is tf.random_uniform and tf.random.truncated_normal is tf.truncated_normal
    with pytest.raises(ValueError, match="must be a float dtype"):
        tf.random_gamma([2], 1.0, dtype=tf.int32)
