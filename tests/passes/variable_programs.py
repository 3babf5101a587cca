"""Programs whose Variables live on one device and are read, updated and trained on
another: shared by ``test_placement.py`` (virtual CPUs) and ``sim_variable_cases.py``
(a simulated GPU), each check asserting the device of every op and the values."""

from __future__ import annotations

import contextlib

import numpy as np

import flowjit as fj


def op_devices(fn):
    """(name, device) of each op that computes, in program order (transfers and constants left out)."""
    return [(op.name, op.device) for op in fn.body.ops if op.name not in ("send", "recv", "constant")]


def check_reader_elsewhere_gets_a_copy(device: str) -> fj.Variable:
    """A Variable created on the CPU, read under ``fj.device(device)``, assigned outside:
    it stays on cpu:0 with its assign, and the reader on ``device`` gets a copy."""
    w = fj.Variable(np.ones(3, np.float32), name="w")

    @fj.function
    def step(x):
        with fj.device(device):
            y = w * x
        w.assign(w + 1)
        return y

    x = np.full(3, 2, np.float32)
    fn = step.ir(x, stage="placement")
    assert op_devices(fn) == [("mul", device), ("add", "cpu:0"), ("assign", "cpu:0")]
    assert fn.arg_devices == ["cpu:0", "cpu:0"]
    np.testing.assert_allclose(step(x), [2, 2, 2])
    np.testing.assert_allclose(step(x), [4, 4, 4])
    np.testing.assert_allclose(w.numpy(), [3, 3, 3])
    assert step.trace_count == 1
    return step


def check_training_elsewhere(device: str, where: str | None, make_opt, rtol: float = 1e-6) -> None:
    """A training step computed under ``fj.device(device)`` on Variables created under
    ``where`` (None: no block, so cpu:0) trains as the same step with no device does,
    its assigns on cpu:0 and its matmul on ``device``."""
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(8, 5)).astype(np.float32), rng.normal(size=(8, 2)).astype(np.float32)
    w0 = rng.normal(size=(5, 2)).astype(np.float32)

    def train(compute_on):
        with fj.device(where) if where else contextlib.nullcontext():
            w, b = fj.Variable(w0, name="w"), fj.Variable(np.zeros(2, np.float32), name="b")
            opt = make_opt()

        def step(x, y):
            with fj.device(compute_on) if compute_on else contextlib.nullcontext():
                return opt.minimize(lambda: fj.mean(fj.square(x @ w + b - y)), [w, b])

        step = fj.function(step)
        return step, [float(step(x, y)) for _ in range(3)], w.numpy(), b.numpy()

    step, losses, w, b = train(device)
    _, want_losses, want_w, want_b = train(None)
    assert losses[2] < losses[0]
    np.testing.assert_allclose(losses, want_losses, rtol=rtol)
    np.testing.assert_allclose(w, want_w, rtol=rtol, atol=rtol / 10)
    np.testing.assert_allclose(b, want_b, rtol=rtol, atol=rtol / 10)
    fn = step.ir(x, y, stage="placement")
    devices = op_devices(fn)
    assert {d for name, d in devices if name == "assign"} == {"cpu:0"}, devices
    assert ("matmul", device) in devices
    assert all(d == "cpu:0" for d, var in zip(fn.arg_devices, fn.is_var) if var)


OPTIMIZERS = {"sgd": lambda: fj.optim.SGD(0.1), "adam": lambda: fj.optim.Adam(0.01)}


def check_v1_readers_elsewhere(tf, readers_on: str, variable_on: str | None = None) -> None:
    """flowjit.v1 (passed as ``tf``): a variable created under ``tf.device(variable_on)``
    (None: no device, so cpu:0), read and trained under ``tf.device(readers_on)``, stays
    on cpu:0 with its assign while the forward and backward pass run on ``readers_on``."""
    tf.reset_default_graph()
    x = tf.placeholder(tf.float32, [None, 4])
    with tf.device(variable_on):
        w = tf.Variable(tf.ones([4, 3]), name="w")
    with tf.device(readers_on):
        y = tf.reduce_sum(tf.nn.relu(tf.matmul(x, w)) * 2.0)
        train = tf.train.GradientDescentOptimizer(0.1).minimize(y)
    xs = np.ones((2, 4), np.float32)
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        assert sess.run(y, {x: xs}) == 48.0
        sess.run(train, {x: xs})  # dy/dw = 2 * x^T 1 = 4: w = 1 - 0.4
        np.testing.assert_allclose(sess.run(y, {x: xs}), 2 * 6 * 4 * 0.6, rtol=1e-6)
        np.testing.assert_allclose(sess.run(w), np.full((4, 3), 0.6), rtol=1e-6)
        assert sess._state_of(w).device in (None, "cpu:0")
        programs = [e.executable.function for plan in sess._plans.values() for step in plan.steps
                    if hasattr(step, "program") for e in step.program._cache.values()]
    (step,) = [fn for fn in programs if "assign" in str(fn) and "matmul" in str(fn)]
    devices = op_devices(step)
    on = readers_on.lstrip("/").replace("gpu", "cuda")  # flowjit's name of the device
    assert [d for name, d in devices if name == "assign"] == ["cpu:0"], devices
    assert {d for name, d in devices if name != "assign"} == {on}, devices
    assert step.arg_devices[step.is_var.index(True)] == "cpu:0"
