"""Programs placed on a cluster's tasks (``fj.device("/job:worker/task:1")``): partitions
compiled and run in the tasks' processes, Send/Recv between processes through Ray,
variables living on their task, failures cancelling the step everywhere."""

from __future__ import annotations

import numpy as np
import pytest

import flowjit as fj

fjd = pytest.importorskip("flowjit.distributed", exc_type=ImportError)  # Ray missing: skip


@pytest.fixture(scope="module")
def cluster(ray_address):
    with fjd.Cluster(ps=1, workers=2, timeout=30) as c:
        yield c


def mlp_params(seed=0):
    rng = np.random.default_rng(seed)
    return {"w1": rng.normal(size=(8, 16)).astype(np.float32) / 3, "b1": np.zeros(16, np.float32),
            "w2": rng.normal(size=(16, 4)).astype(np.float32) / 4, "b2": np.zeros(4, np.float32)}


def make_step(params, devices):
    """An SGD step of a two-layer MLP: layer k's variables and ops on ``devices[k]`` (None:
    unplaced), the loss and its gradient in the calling process unless placed."""
    def on(d):
        return fj.device(d) if d else _nothing()

    with on(devices[0]):
        w1, b1 = fj.Variable(params["w1"], name="w1"), fj.Variable(params["b1"], name="b1")
    with on(devices[1]):
        w2, b2 = fj.Variable(params["w2"], name="w2"), fj.Variable(params["b2"], name="b2")
    variables = [w1, b1, w2, b2]

    def loss(ps, x, y):
        with on(devices[0]):
            h = fj.tanh(x @ ps[0] + ps[1])
        with on(devices[1]):
            logits = h @ ps[2] + ps[3]
        return fj.nn.softmax_cross_entropy(logits, y)

    @fj.function
    def step(x, y):
        value, grads = fj.value_and_grad(loss)(variables, x, y)
        for v, g in zip(variables, grads):
            v.assign(v - 0.5 * g)
        return value

    return step, variables


class _nothing:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return None


def test_a_model_parallel_step_over_two_worker_tasks_equals_one_process(cluster):
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=(32, 8)).astype(np.float32), rng.integers(0, 4, 32).astype(np.int32)
    params = mlp_params()
    local, local_vars = make_step(params, [None, None])
    remote, remote_vars = make_step(params, ["/job:worker/task:0", "/job:worker/task:1"])
    for _ in range(5):
        np.testing.assert_allclose(float(remote(x, y)), float(local(x, y)), rtol=1e-5)
    for a, b in zip(remote_vars, local_vars):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6, err_msg=a.name)
    # The partition pass cut the program between the tasks: each task's layer runs there.
    fn = remote.ir(x, y, stage="partition")
    devices = {op.device for op in fn.body.ops}
    assert {"/job:worker/task:0/cpu:0", "/job:worker/task:1/cpu:0"} <= devices
    assert any(op.name == "send" and op.attrs["dst"] == "/job:worker/task:1/cpu:0" for op in fn.body.ops)
    # The variables live on their tasks: the caller holds handles, and reads fetch them.
    assert [a.__flowjit_resident__ for a in (v._value for v in remote_vars)] == [
        "/job:worker/task:0/cpu:0"] * 2 + ["/job:worker/task:1/cpu:0"] * 2


def test_a_variable_on_the_ps_stays_there_between_steps(cluster):
    with fj.device("/job:ps/task:0"):
        w = fj.Variable(np.ones((4, 3), np.float32), name="w")

    @fj.function
    def step(x):
        with fj.device("/job:worker/task:0"):
            h = fj.tanh(x @ w)
        with fj.device("/job:worker/task:1"):
            s = fj.sum(h * 2.0)
        w.assign(w - 0.1 * s)
        return s

    x = np.arange(8, dtype=np.float32).reshape(2, 4) / 8
    got = [float(step(x)) for _ in range(3)]
    ref, want = np.ones((4, 3), np.float32), []
    for _ in range(3):
        want.append(float(np.sum(np.tanh(x @ ref) * 2.0)))
        ref = ref - np.float32(0.1) * np.float32(want[-1])
    np.testing.assert_allclose(got, want, rtol=1e-5)
    handle = w._value
    assert handle.__flowjit_resident__ == "/job:ps/task:0/cpu:0" and handle.shape == (4, 3)
    step(x)
    assert w._value is handle  # updated in place on the task: the same handle
    np.testing.assert_allclose(np.asarray(w), w.numpy())
    w.assign(np.zeros((4, 3), np.float32))  # set from here: sent with the next call
    assert float(step(x)) == 0.0 and np.all(w.numpy() == 0)


def test_a_failure_on_one_task_cancels_the_step_and_names_task_op_and_line(cluster):
    @fj.function
    def step(x):
        with fj.device("/job:worker/task:0"):
            a = fj.tanh(x) * 3.0
        with fj.device("/job:worker/task:1"):
            big = fj.cumsum(fj.broadcast_to(x[0], (2**38,)))  # 1 TiB: the task cannot allocate it
        with fj.device("/job:worker/task:0"):
            b = a + big[-1]  # waits for task 1's value: the step must be cancelled, not hang
        return b

    for _ in range(2):
        with pytest.raises((MemoryError, OSError)) as info:
            step(np.ones(3, np.float32))
        note = "\n".join(getattr(info.value, "__notes__", []))
        assert "on task /job:worker/task:1" in note and "test_placement.py:" in note, note


def test_a_device_of_a_task_that_does_not_exist(cluster):
    with pytest.raises(fj.DeviceError, match=r"no device /job:worker/task:5/cpu:0; the devices are .*"
                                             r"/job:worker/task:1/cpu:0.*the open cluster's tasks"):
        fj.device("/job:worker/task:5")
    with pytest.raises(fj.DeviceError, match=r"'/job:ps' is not a device name"):
        fj.device("/job:ps")


def test_task_devices_exist_while_their_cluster_is_open(cluster, ray_address):
    with fjd.Cluster(ps=2, workers=1) as inner:  # two open clusters: the latest one's names win
        assert "/job:ps/task:1/cpu:0" in [d.name for d in fj.devices()]
        with fj.device("/job:ps/task:1"):
            w = fj.Variable(np.ones(2, np.float32))

        @fj.function
        def bump():
            w.assign(w + 1.0)
            return w.value * 1.0

        np.testing.assert_allclose(bump(), [2.0, 2.0])
        assert w._value.host.actor is inner.task("/job:ps/task:1")
    names = [d.name for d in fj.devices()]
    assert "/job:ps/task:1/cpu:0" not in names and "/job:ps/task:0/cpu:0" in names  # the outer one's again
    with pytest.raises(fj.DeviceError, match=r"no device /job:ps/task:1/cpu:0.*the open cluster's tasks"):
        fj.device("/job:ps/task:1")
    with pytest.raises(Exception, match=r"cluster is closed"):
        w.numpy()


def test_replica_device_setter_spreads_variables_over_the_ps_tasks(ray_address):
    from flowjit.distributed.device_setter import replica_device_setter
    with fjd.Cluster(ps=2, workers=1) as c:
        with fj.device(replica_device_setter(c)):
            vs = [fj.Variable(np.zeros(n, np.float32), name=f"v{n}") for n in (100, 10, 10, 1)]
        assert [v.device for v in vs] == ["/job:ps/task:0/cpu:0", "/job:ps/task:1/cpu:0"] * 2
        with fj.device(replica_device_setter(c, strategy="by_size", worker_device="/job:worker/task:0")) as d:
            vs = [fj.Variable(np.zeros(n, np.float32), name=f"v{n}") for n in (100, 10, 10, 1)]
            assert d == "/job:worker/task:0/cpu:0"
            with fj.device("cpu:0"):  # an inner name wins, as in TensorFlow
                local = fj.Variable(np.zeros(3, np.float32))
        assert [v.device for v in vs] == ["/job:ps/task:0/cpu:0"] + ["/job:ps/task:1/cpu:0"] * 3
        assert local.device == "cpu:0"

        @fj.function
        def step(x):
            with fj.device(replica_device_setter(c, worker_device="/job:worker/task:0")):
                y = x * 2.0
            for v in vs:
                v.assign(v + fj.sum(y))
            return y

        np.testing.assert_allclose(step(np.ones(2, np.float32)), [2.0, 2.0])
        assert [float(v.numpy()[0]) for v in vs] == [4.0] * 4
        fn = step.ir(np.ones(2, np.float32), stage="partition")
        assert any(op.device == "/job:worker/task:0/cpu:0" and op.name != "recv" for op in fn.body.ops)
    with pytest.raises(ValueError, match="strategy='nearest'"):
        replica_device_setter(ps_tasks=2, strategy="nearest")


def test_a_restarted_task_compiles_its_partition_again_and_a_lost_variable_is_named(ray_address):
    with fjd.Cluster(ps=1, workers=1, timeout=30) as c:
        with fj.device("/job:ps/task:0"):
            w = fj.Variable(np.ones(3, np.float32), name="w")

        @fj.function
        def f(x):
            with fj.device("/job:worker/task:0"):
                y = fj.tanh(x) * 2.0
            return y + 1.0

        @fj.function
        def g(x):
            w.assign(w * x)
            return w.value + 0.0

        x = np.full(3, 0.5, np.float32)
        want = np.tanh(x) * 2 + 1
        np.testing.assert_allclose(f(x), want, rtol=1e-6)
        np.testing.assert_allclose(g(x), [0.5] * 3)
        for name in ("/job:worker/task:0", "/job:ps/task:0"):
            c.kill(name)
            c.wait_ready(name)
        np.testing.assert_allclose(f(x), want, rtol=1e-6)  # the new process compiled it again
        with pytest.raises(Exception, match=r"/job:ps/task:0 holds no array .*restarted"):
            g(x)  # w's value lived in the process that died
