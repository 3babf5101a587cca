"""Variables on the CPU read and trained on a simulated GPU, or a real one: run by
``test_placement.py`` in a subprocess with ``NUMBA_ENABLE_CUDASIM=1`` and
``FLOWJIT_CUDA_SIMULATOR_DEVICES=1`` (numba reads the first when it is imported), and by
``test_cuda_backend.py`` without them on a machine with a GPU; skipped anywhere else.

A Variable stays on the device it was created on: the ops placed on ``cuda:0`` read a
copy of it, and its ``assign`` runs where it lives, on ``cpu:0``.
"""

from __future__ import annotations

import os
import re

import numpy as np
import pytest

from tests.codegen_cuda.target import SIMULATED, require_cuda_target  # noqa: E402

if SIMULATED and os.environ.get("FLOWJIT_CUDA_SIMULATOR_DEVICES") != "1":
    pytest.skip("run by test_placement.py with NUMBA_ENABLE_CUDASIM=1 and one simulated device",
                allow_module_level=True)
require_cuda_target("test_placement.py")

import flowjit as fj  # noqa: E402
from flowjit.passes.placement import PlacementError  # noqa: E402
from tests.passes.variable_programs import (  # noqa: E402
    OPTIMIZERS,
    check_reader_elsewhere_gets_a_copy,
    check_training_elsewhere,
    check_v1_readers_elsewhere,
    op_devices,
)


def test_a_cpu_variable_read_on_the_gpu_stays_on_the_cpu():
    check_reader_elsewhere_gets_a_copy("cuda:0")


def test_an_update_written_on_the_gpu_is_computed_there_and_assigned_on_the_cpu():
    w = fj.Variable(np.zeros(4, np.float32), name="w")

    @fj.function
    def step(x):
        with fj.device("cuda:0"):
            w.assign_add(fj.exp(x) * 2)
        return w.value

    x = np.linspace(0, 1, 4, dtype=np.float32)
    fn = step.ir(x, stage="placement")
    assert op_devices(fn) == [("exp", "cuda:0"), ("mul", "cuda:0"), ("add", "cuda:0"), ("assign", "cpu:0")]
    step(x)
    np.testing.assert_allclose(step(x), 4 * np.exp(x), rtol=1e-6)
    np.testing.assert_allclose(w.numpy(), 4 * np.exp(x), rtol=1e-6)


@pytest.mark.parametrize("opt", sorted(OPTIMIZERS))
def test_a_training_step_on_the_gpu_trains_variables_that_live_on_the_cpu(opt):
    check_training_elsewhere("cuda:0", None, OPTIMIZERS[opt], rtol=2e-5)


def test_a_variable_created_on_the_gpu_that_cannot_be_updated_there_says_where_to_create_it():
    with fj.device("cuda:0"):
        w = fj.Variable(np.ones(3, np.float32), name="w")

    @fj.function
    def step(x):
        w.assign(w * x)
        return x

    with pytest.raises(PlacementError, match=r"assign at sim_variable_cases.py:\d+ is placed on cuda:0 \(with "
                                             r"Variable w\), which has no kernel for it; devices that can run it: "
                                             r"cpu:0; create Variable w under fj.device\('cpu:0'\)"):
        step(np.ones(3, np.float32))


def test_v1_tf_device_gpu_around_the_readers_of_a_cpu_variable():
    import flowjit.v1 as tf

    check_v1_readers_elsewhere(tf, "/gpu:0")


def test_a_variable_created_with_no_device_stays_on_the_cpu_when_the_default_device_cannot_update_it():
    # fj.function(device="cuda:0") makes cuda:0 where arguments live, but flowjit's CUDA
    # backend has no assign: a variable that names no device stays where its updates run.
    w = fj.Variable(np.ones(3, np.float32), name="w")
    c = fj.Variable(np.ones(3, np.float32), name="c")  # only read: it lives on the default device

    def step(x):
        y = w * x + c
        w.assign(w + 1)
        return y

    step = fj.function(step, device="cuda:0")
    x = np.full(3, 2, np.float32)
    fn = step.ir(x, stage="placement")
    assert fn.arg_devices == ["cuda:0", "cpu:0", "cuda:0"]
    assert [d for name, d in op_devices(fn) if name == "assign"] == ["cpu:0"]
    np.testing.assert_allclose(step(x), [3, 3, 3])
    np.testing.assert_allclose(step(x), [5, 5, 5])
    np.testing.assert_allclose(w.numpy(), [3, 3, 3])


def test_v1_tf_device_on_a_device_without_a_kernel_fails_as_fj_device_does():
    import flowjit.v1 as tf

    tf.reset_default_graph()
    x = tf.placeholder(tf.float32, [None, 4])
    with tf.device("/gpu:0"):
        c = tf.cumsum(x, axis=1)
    with tf.Session() as sess, pytest.raises(PlacementError) as v1_error:
        sess.run(c, {x: np.ones((2, 4), np.float32)})
    with pytest.raises(PlacementError) as fj_error, fj.device("cuda:0"):
        fj.function(lambda x: fj.cumsum(x, axis=1))(np.ones((2, 4), np.float32))
    for e in (v1_error, fj_error):
        assert re.fullmatch(r"cumsum at sim_variable_cases.py:\d+ is placed on cuda:0 \(fj.device\), which has no "
                            r"kernel for it; devices that can run it: cpu:0", str(e.value)), str(e.value)


# ---- soft placement: an op the named device cannot run goes where it can -------------------------------


def _cumsum_after_exp(x):
    with fj.device("cuda:0"):
        return fj.cumsum(fj.exp(x), axis=1)


def test_soft_placement_moves_an_op_the_gpu_cannot_run_to_the_cpu_and_keeps_the_rest():
    x = np.linspace(0, 1, 8, dtype=np.float32).reshape(2, 4)
    step = fj.function(_cumsum_after_exp, soft_placement=True)
    assert op_devices(step.ir(x, stage="placement")) == [("exp", "cuda:0"), ("cumsum", "cpu:0")]
    np.testing.assert_allclose(step(x), np.cumsum(np.exp(x), axis=1), rtol=1e-6)
    with pytest.raises(PlacementError, match=r"cumsum at sim_variable_cases.py:\d+ is placed on cuda:0"):
        fj.function(_cumsum_after_exp)(x)  # hard placement, the default, still refuses


def test_soft_placement_moves_a_gpu_variable_whose_update_the_gpu_cannot_run():
    # TensorFlow's soft placement moves the variable with its update (colocation).
    with fj.device("cuda:0"):
        w = fj.Variable(np.ones(3, np.float32), name="w")

    def step(x):
        with fj.device("cuda:0"):
            y = fj.exp(x) * w
        w.assign(w + y)
        return y

    step = fj.function(step, soft_placement=True)
    x = np.zeros(3, np.float32)
    fn = step.ir(x, stage="placement")
    assert fn.arg_devices == ["cpu:0", "cpu:0"]
    assert op_devices(fn) == [("exp", "cuda:0"), ("mul", "cuda:0"), ("add", "cpu:0"), ("assign", "cpu:0")]
    np.testing.assert_allclose(step(x), [1, 1, 1])
    np.testing.assert_allclose(step(x), [2, 2, 2])
    np.testing.assert_allclose(w.numpy(), [4, 4, 4])


def test_v1_allow_soft_placement_runs_an_op_the_gpu_cannot_run_on_the_cpu_and_logs_it(capsys):
    import flowjit.v1 as tf

    tf.reset_default_graph()
    x = tf.placeholder(tf.float32, [None, 4])
    with tf.device("/gpu:0"):
        e = tf.exp(x)
        c = tf.cumsum(e, axis=1)
    xs = np.linspace(0, 1, 8, dtype=np.float32).reshape(2, 4)
    config = tf.ConfigProto(allow_soft_placement=True, log_device_placement=True)
    with tf.Session(config=config) as sess:
        np.testing.assert_allclose(sess.run(c, {x: xs}), np.cumsum(np.exp(xs), axis=1), rtol=1e-6)
        np.testing.assert_allclose(sess.run(c, {x: xs}), np.cumsum(np.exp(xs), axis=1), rtol=1e-6)
    log = capsys.readouterr().err
    assert re.search(r"^Exp: \(Exp\): cuda:0$", log, re.M), log
    assert re.search(r"^Cumsum: \(Cumsum\): cpu:0$", log, re.M), log
    assert log.count("Cumsum: (Cumsum)") == 1, log  # logged once, when the program is placed


def test_v1_a_gpu_variable_trained_with_soft_placement_lives_on_the_cpu():
    # The classic TF1 program: variables and model under /gpu:0. flowjit's CUDA backend has
    # no assign, so hard placement refuses (as fj.device does) and soft placement keeps
    # each variable, with its update, on the CPU while the model runs on the GPU.
    import flowjit.v1 as tf

    tf.reset_default_graph()
    x = tf.placeholder(tf.float32, [None, 4])
    with tf.device("/gpu:0"):
        w = tf.Variable(tf.ones([4, 3]), name="w")
        y = tf.reduce_sum(tf.nn.relu(tf.matmul(x, w)) * 2.0)
        train = tf.train.GradientDescentOptimizer(0.1).minimize(y)
    xs = np.ones((2, 4), np.float32)
    with tf.Session() as sess, pytest.raises(PlacementError, match=r"with Variable w.*create Variable w under "
                                                                   r"fj.device\('cpu:0'\)"):
        sess.run(tf.global_variables_initializer())
        sess.run(train, {x: xs})
    with tf.Session(config=tf.ConfigProto(allow_soft_placement=True)) as sess:
        sess.run(tf.global_variables_initializer())
        assert sess.run(y, {x: xs}) == 48.0
        sess.run(train, {x: xs})  # dy/dw = 2 * x^T 1 = 4: w = 1 - 0.4
        np.testing.assert_allclose(sess.run(y, {x: xs}), 2 * 6 * 4 * 0.6, rtol=1e-6)
        np.testing.assert_allclose(sess.run(w), np.full((4, 3), 0.6), rtol=1e-6)
        programs = [e.executable.function for plan in sess._plans.values() for step in plan.steps
                    if hasattr(step, "program") for e in step.program._cache.values()]
    (step,) = [fn for fn in programs if "assign" in str(fn) and "matmul" in str(fn)]
    devices = op_devices(step)
    assert [d for name, d in devices if name == "assign"] == ["cpu:0"], devices
    assert ("matmul", "cuda:0") in devices, devices
