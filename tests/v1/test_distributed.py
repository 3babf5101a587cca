"""The TensorFlow 1 spelling of distributed programs (``tf.train.ClusterSpec``, ``Server``,
``tf.device("/job:ps/task:0")``, ``replica_device_setter``, ``SyncReplicasOptimizer``)
over fj.distributed's cluster, on the test session's one Ray runtime."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import flowjit.v1 as tf

SPEC = {"ps": ["ps0:2222", "ps1:2222"], "worker": ["worker0:2222", "worker1:2222"]}


# ---- no cluster needed -----------------------------------------------------------------------------------------


def test_cluster_spec_api():
    spec = tf.train.ClusterSpec(SPEC)
    assert spec.jobs == ["ps", "worker"]
    assert spec.num_tasks("worker") == 2 and spec.task_indices("ps") == [0, 1]
    assert spec.task_address("worker", 1) == "worker1:2222"
    assert spec.as_dict() == SPEC and tf.train.ClusterSpec(spec) == spec and bool(spec)
    sparse = tf.train.ClusterSpec({"worker": {1: "w1:2222", 3: "w3:2222"}})
    assert sparse.as_dict() == {"worker": {1: "w1:2222", 3: "w3:2222"}}
    assert sparse.job_tasks("worker") == [None, "w1:2222", None, "w3:2222"]
    with pytest.raises(ValueError, match=r"No such job in cluster: 'chief' \(the jobs are \['ps', 'worker'\]\)"):
        spec.num_tasks("chief")
    with pytest.raises(ValueError, match=r"No task with index 2 in job 'ps' \(it has \[0, 1\]\)"):
        spec.task_address("ps", 2)
    with pytest.raises(TypeError, match="list of 'host:port'"):
        tf.train.ClusterSpec({"ps": "ps0:2222"})


def test_nested_device_names_merge_field_by_field():
    g = tf.Graph()
    with g.as_default():
        with tf.device("/job:worker/replica:0/task:1"):
            with tf.device("/device:CPU:0"):
                a = tf.constant(1.0)
            b = a + 1.0
            with tf.device(None):  # clears the enclosing blocks
                c = a * 2.0
        with tf.device(tf.DeviceSpec(job="ps", task=1)):
            d = a - 1.0
    assert (a.device, b.device, c.device, d.device) == (
        "/job:worker/replica:0/task:1/cpu:0", "/job:worker/replica:0/task:1", "", "/job:ps/task:1")
    with pytest.raises(ValueError, match=r"'/job:ps/tsk:0' is not a device name: cannot read 'tsk:0'"):
        with g.as_default(), tf.device("/job:ps/tsk:0"):
            pass


def test_replica_device_setter_places_variables_round_robin_and_ops_on_the_worker():
    g = tf.Graph()
    with g.as_default():
        with tf.device(tf.train.replica_device_setter(cluster=SPEC, worker_device="/job:worker/task:1")):
            vs = [tf.Variable(tf.zeros([n]), name=f"v{n}") for n in (1, 2, 3)]
            s = vs[0] + 1.0
            with tf.device("/job:ps/task:1"):  # an inner name wins, field by field
                pinned = tf.Variable(1.0, name="pinned")
            with tf.device("/cpu:0"):
                t = s * 2.0
            opt = tf.train.MomentumOptimizer(0.1, 0.9)
            opt.minimize(tf.reduce_sum(vs[2]) + pinned)
    assert [v.device for v in vs] == ["/job:ps/task:0", "/job:ps/task:1", "/job:ps/task:0"]
    assert pinned.device == "/job:ps/task:1"
    assert s.device == "/job:worker/task:1" and t.device == "/job:worker/task:1/cpu:0"
    assert opt.get_slot(vs[2], "momentum").device == "/job:ps/task:0"  # a slot lives beside its variable
    # Updates of a task's variable run on that task (the gradient travels, not the variable and its slots).
    updates = sorted((op.name, op.device) for op in g.get_operations() if op.type == "ApplyMomentum")
    assert updates == [("Momentum/update_pinned", "/job:ps/task:1"), ("Momentum/update_v3", "/job:ps/task:0")]
    # Greedy by bytes: the big variable fills task 0, the next two go to task 1.
    g = tf.Graph()
    with g.as_default():
        greedy = tf.train.GreedyLoadBalancingStrategy(2, tf.train.byte_size_load_fn)
        with tf.device(tf.train.replica_device_setter(ps_tasks=2, ps_strategy=greedy)):
            vs = [tf.Variable(tf.zeros([n]), name="v") for n in (100, 10, 10)]
    assert [v.device for v in vs] == ["/job:ps/task:0", "/job:ps/task:1", "/job:ps/task:1"]
    assert tf.train.replica_device_setter(ps_tasks=0) is None
    assert tf.train.replica_device_setter(cluster={"worker": ["w:1"]}) is None


def test_replica_device_setter_puts_other_ops_on_the_worker_job_by_default():
    """TensorFlow's worker_device defaults to "/job:worker": without it, the ops that are not
    variables go there (the exact strings of TF 1.15), an inner tf.device merging field by field."""
    g = tf.Graph()
    with g.as_default():
        with tf.device(tf.train.replica_device_setter(cluster=SPEC)):
            v1 = tf.Variable(1.0, name="v1")
            v2 = tf.Variable(2.0, name="v2")
            y = v1 + v2
            with tf.device("/task:1"):
                z = y * 2.0
            with tf.device("/cpu:0"):
                w = y - 1.0
        with tf.device(tf.train.replica_device_setter(ps_tasks=1, worker_device="")):
            u = tf.Variable(0.0, name="u") + 1.0  # an empty worker_device: no worker job
    assert (v1.device, v2.device) == ("/job:ps/task:0", "/job:ps/task:1")
    assert (y.device, z.device, w.device, u.device) == ("/job:worker", "/job:worker/task:1", "/job:worker/cpu:0", "")


def test_tensorflow_local_device_names_run_in_this_process():
    g = tf.Graph()
    with g.as_default():
        with tf.device("/job:localhost/replica:0/task:0/device:CPU:0"):
            z = tf.constant(3.0) * 2.0
    with tf.Session(graph=g) as sess:
        assert sess.run(z) == 6.0


def test_importing_flowjit_v1_does_not_import_ray():
    code = "import sys, flowjit.v1 as tf; tf.train.ClusterSpec({'ps': ['a:1']}); assert 'ray' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_a_task_device_without_a_cluster_says_how_to_start_one():
    g = tf.Graph()
    with g.as_default():
        with tf.device("/job:ps/task:0"):
            v = tf.Variable(1.0, name="v")
        init = tf.global_variables_initializer()
    with tf.Session(graph=g) as sess:
        with pytest.raises(tf.errors.InvalidArgumentError,
                           match=r"operation 'v/Initializer/Const'.*assigned to /job:ps/task:0 "
                                 r"\(/job:ps/task:0/cpu:0\), but the devices are cpu:0.*start a tf.train.Server"):
            sess.run(init)
    with tf.Session(graph=g, config=tf.ConfigProto(allow_soft_placement=True)) as sess:
        sess.run(init)
        assert sess.run(v) == 1.0


def test_a_session_target_must_be_a_running_server():
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"target='grpc://elsewhere:2222'.*no tf.train.Server "
                       "runs here"):
        tf.Session("grpc://elsewhere:2222")
    local = tf.train.Server.create_local_server()
    try:
        with tf.Session(local.target) as sess:
            assert sess.run(tf.constant(2.0) * 3.0) == 6.0
    finally:
        local.stop()
    with pytest.raises(tf.errors.InvalidArgumentError):
        tf.Session(local.target)


def test_a_server_for_another_task_starts_nothing_and_join_explains(capsys):
    ray_before = "ray" in sys.modules
    ps = tf.train.Server(SPEC, job_name="ps", task_index=1)
    assert ps.target == "grpc://ps1:2222" and ps.cluster is None and not ps.is_chief
    ps.join()  # returns
    assert "only the chief's process" in capsys.readouterr().err
    assert ("ray" in sys.modules) == ray_before  # nothing started
    with pytest.raises(ValueError, match=r"No task with index 5 in job 'worker'"):
        tf.train.Server(SPEC, job_name="worker", task_index=5)
    with pytest.raises(ValueError, match=r"also lists \['evaluator'\]"):
        tf.train.Server({**SPEC, "evaluator": ["e:1"]}, job_name="worker", task_index=0)


def test_sync_replicas_optimizer_arguments():
    with pytest.raises(ValueError, match=r"replicas_to_aggregate=0"):
        tf.train.SyncReplicasOptimizer(tf.train.GradientDescentOptimizer(0.1), replicas_to_aggregate=0)
    g = tf.Graph()
    with g.as_default():
        v = tf.Variable(1.0)
        opt = tf.train.SyncReplicasOptimizer(tf.train.GradientDescentOptimizer(0.1), 2)
        with pytest.raises(ValueError, match="needs global_step"):
            opt.minimize(v * v)


# ---- on a cluster ----------------------------------------------------------------------------------------------

fjd = pytest.importorskip("flowjit.distributed", exc_type=ImportError)  # Ray missing: the rest skips
from tests.distributed.conftest import ray_address  # noqa: E402, F401  (the session's one Ray runtime)


@pytest.fixture(scope="module")
def server(ray_address):  # noqa: F811
    with tf.train.Server(tf.train.ClusterSpec(SPEC), job_name="worker", task_index=0, config={"timeout": 30}) as s:
        yield s


def _batches(n, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, 16, 8)).astype(np.float32), rng.integers(0, 4, (n, 16)).astype(np.int32)


def _softmax_loss(x, y, w, b):
    return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=tf.matmul(x, w) + b))


def _in_graph_replicated(placed):
    """In-graph replication: the variables on the ps tasks (replica_device_setter), one
    tower per worker task, the towers' gradients averaged and applied by SGD."""
    g = tf.Graph()
    with g.as_default():
        tf.set_random_seed(3)
        with tf.device(tf.train.replica_device_setter(cluster=SPEC) if placed else None):
            w = tf.Variable(tf.random_normal([8, 4], stddev=0.5), name="w")
            b = tf.Variable(tf.zeros([4]), name="b")
        x = tf.placeholder(tf.float32, [2, None, 8])
        y = tf.placeholder(tf.int32, [2, None])
        opt = tf.train.GradientDescentOptimizer(0.5)
        towers = []
        for i in range(2):
            with tf.device(f"/job:worker/task:{i}" if placed else None):
                towers.append(opt.compute_gradients(_softmax_loss(x[i], y[i], w, b), [w, b]))
        mean = [(tf.add_n([t[k][0] for t in towers]) / 2.0, v) for k, v in enumerate([w, b])]
        train = opt.apply_gradients(mean)
        init = tf.global_variables_initializer()
    return g, init, train, x, y, [w, b]


def test_in_graph_replication_on_the_tasks_equals_one_process_step_for_step(server):
    xs, ys = _batches(6)
    runs = {}
    for placed in (False, True):
        g, init, train, x, y, variables = _in_graph_replicated(placed)
        with tf.Session(server.target if placed else "", graph=g) as sess:
            sess.run(init)
            runs[placed] = []
            for step in range(3):
                sess.run(train, {x: xs[2 * step:2 * step + 2], y: ys[2 * step:2 * step + 2]})
                runs[placed].append([sess.run(v) for v in variables])
            if placed:
                # Each variable's value lives in its ps task's process; the chief holds a handle.
                held = [getattr(sess._state_of(v)._value, "__flowjit_resident__", None) for v in variables]
                assert held == ["/job:ps/task:0/cpu:0", "/job:ps/task:1/cpu:0"]
    for step, (got, want) in enumerate(zip(runs[True], runs[False])):
        for a, b in zip(got, want):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6, err_msg=f"step {step}")


def test_sync_replicas_applies_the_mean_of_the_aggregated_gradients(server):
    replicas = 3
    xs, ys = _batches(2 * replicas, seed=1)
    w0 = np.random.default_rng(2).normal(size=(8, 4)).astype(np.float32)

    def build(sync):
        g = tf.Graph()
        with g.as_default():
            setter = tf.train.replica_device_setter(cluster=SPEC, worker_device="/job:worker/task:0") if sync else None
            with tf.device(setter):
                step = tf.train.get_or_create_global_step()
                w, b = tf.Variable(w0, name="w"), tf.Variable(tf.zeros([4]), name="b")
                x, y = tf.placeholder(tf.float32, [None, 8]), tf.placeholder(tf.int32, [None])
                opt = tf.train.AdamOptimizer(0.1)
                if sync:
                    opt = tf.train.SyncReplicasOptimizer(opt, replicas_to_aggregate=replicas,
                                                         total_num_replicas=replicas)
                train = opt.minimize(_softmax_loss(x, y, w, b), global_step=step)
            init = tf.global_variables_initializer()
        return g, init, train, x, y, [w, b], step, opt

    g1, init1, train1, x1, y1, vars1, step1, sync_opt = build(True)
    g2, init2, train2, x2, y2, vars2, step2, _ = build(False)
    assert [a.device for a in sync_opt._accumulators] == [v.device for v in vars1]  # beside their variables
    hook = sync_opt.make_session_run_hook(is_chief=True)
    hook.begin()
    with tf.Session(server.target, graph=g1) as sess, tf.Session(graph=g2) as ref:
        sess.run(init1)
        hook.after_create_session(sess, None)
        ref.run(init2)
        for k in range(2):
            before = [sess.run(v) for v in vars1]
            for r in range(replicas):  # one replica's gradient per run, at the current parameters
                i = replicas * k + r
                sess.run(train1, {x1: xs[i], y1: ys[i]})
                if r < replicas - 1:
                    assert sess.run(step1) == k
                    for a, b in zip(vars1, before):
                        np.testing.assert_array_equal(sess.run(a), b)
            assert sess.run(step1) == k + 1
            # One Adam step on the mean of the replicas' gradients: the gradient of the mean
            # loss of their batches together (the batches are of one size).
            sl = slice(replicas * k, replicas * (k + 1))
            ref.run(train2, {x2: np.concatenate(xs[sl]), y2: np.concatenate(ys[sl])})
            for a, b in zip(vars1, vars2):
                np.testing.assert_allclose(sess.run(a), ref.run(b), rtol=1e-5, atol=1e-6, err_msg=f"update {k}")


def test_monitored_training_session_on_the_server_target_with_the_sync_replicas_hook(server):
    xs, ys = _batches(6, seed=4)
    g = tf.Graph()
    with g.as_default():
        with tf.device(tf.train.replica_device_setter(cluster=SPEC, worker_device="/job:worker/task:0")):
            step = tf.train.get_or_create_global_step()
            w, b = tf.Variable(tf.zeros([8, 4]), name="w"), tf.Variable(tf.zeros([4]), name="b")
            x, y = tf.placeholder(tf.float32, [None, 8]), tf.placeholder(tf.int32, [None])
            opt = tf.train.SyncReplicasOptimizer(tf.train.GradientDescentOptimizer(0.5), replicas_to_aggregate=2,
                                                 total_num_replicas=2)
            train = opt.minimize(_softmax_loss(x, y, w, b), global_step=step)
        hooks = [opt.make_session_run_hook(is_chief=True), tf.train.StopAtStepHook(last_step=3)]
        runs = 0
        with tf.train.MonitoredTrainingSession(master=server.target, is_chief=True, hooks=hooks) as sess:
            while not sess.should_stop():
                sess.run(train, {x: xs[runs], y: ys[runs]})
                runs += 1
            assert sess.run(step) == 3 and runs == 6  # two replicas' gradients per update
            assert np.abs(sess.run(w)).sum() > 0


def test_a_device_naming_a_task_the_cluster_lacks(server):
    g = tf.Graph()
    with g.as_default():
        with tf.device("/job:worker/task:7"):
            z = tf.constant(1.0, name="far") * 2.0
    with tf.Session(server.target, graph=g) as sess:
        with pytest.raises(tf.errors.InvalidArgumentError,
                           match=r"operation 'far'.*assigned to /job:worker/task:7 \(/job:worker/task:7/cpu:0\), "
                                 r"but the devices are .*/job:ps/task:0/cpu:0.*The open cluster's tasks are "
                                 r"/job:ps/task:0, /job:ps/task:1, /job:worker/task:0, /job:worker/task:1"):
            sess.run(z)


def test_a_server_joins_the_ray_cluster_at_flowjit_ray_address(ray_address, monkeypatch):  # noqa: F811
    monkeypatch.setenv("FLOWJIT_RAY_ADDRESS", "127.0.0.1:1")
    with pytest.raises(fjd.ClusterError, match=r"address='127.0.0.1:1'.*no Ray cluster answers there"):
        tf.train.Server(SPEC, job_name="worker", task_index=0)


def test_stopping_the_server_closes_its_cluster(ray_address):  # noqa: F811
    server = tf.train.Server({"ps": ["a:1"], "worker": ["b:1"]}, job_name="worker", task_index=0,
                             config={"timeout": 30})
    cluster = server.cluster
    assert sorted(cluster.devices()) == ["/job:ps/task:0/cpu:0", "/job:worker/task:0/cpu:0"]
    with tf.Session(server.target) as sess:
        assert sess.run(tf.constant(1.0) + 1.0) == 2.0
    server.stop()
    assert server.cluster is None and cluster._actors == {}  # its tasks are ended
    with pytest.raises(tf.errors.InvalidArgumentError, match="no tf.train.Server runs here|the servers running"):
        tf.Session(server.target)
