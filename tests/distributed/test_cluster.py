"""fj.distributed.Cluster: tasks as named Ray actors, their devices, joining by address, and
the errors for a bad address and a cluster too small."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from tests.distributed.conftest import SESSION_CPUS

fjd = pytest.importorskip("flowjit.distributed", exc_type=ImportError)  # Ray missing: skip


def test_tasks_are_named_actors_with_devices(ray_address):
    import flowjit as fj
    assert fj.distributed is fjd  # loaded on first use
    with fjd.Cluster(ps=2, workers=3) as cluster:
        assert cluster.devices() == ["/job:ps/task:0/cpu:0", "/job:ps/task:1/cpu:0", "/job:worker/task:0/cpu:0",
                                     "/job:worker/task:1/cpu:0", "/job:worker/task:2/cpu:0"]
        # Each task is a process of its own, and answers to its TF-style name.
        assert len(set(cluster.pids.values())) == 5 and os.getpid() not in cluster.pids.values()
        name, _ = fjd.ray.get(cluster.task("/job:worker/task:2").ping.remote(), timeout=30)
        assert name == "/job:worker/task:2"
        with pytest.raises(KeyError, match=r"/job:worker/task:7.*/job:worker/task:2"):
            cluster.task("/job:worker/task:7")
    assert cluster.address == ray_address and ray_address.startswith("127.0.0.1:")  # loopback only


def test_joins_a_cluster_by_its_address(ray_address):
    with fjd.Cluster(ps=1, workers=1, address=ray_address) as cluster:
        assert cluster.address == ray_address and len(cluster.devices()) == 2


def test_an_address_with_no_cluster_behind_it(ray_address):
    with pytest.raises(fjd.ClusterError, match=r"127\.0\.0\.1:1'\): no Ray cluster answers there"):
        fjd.Cluster(ps=1, workers=1, address="127.0.0.1:1")


def test_a_cluster_too_small_for_the_tasks(ray_address):
    with pytest.raises(fjd.ClusterError, match=rf"ps=4, workers=8\) needs 12 CPUs .* has {SESSION_CPUS}"):
        fjd.Cluster(ps=4, workers=8)
    with pytest.raises(ValueError, match=r"workers=0"):
        fjd.Cluster(ps=1, workers=0)


@pytest.mark.slow
def test_a_local_cluster_starts_its_own_runtime_and_ends_it():
    # Without a runtime in the process, the cluster starts one on loopback and shuts it down.
    prog = textwrap.dedent("""
        import flowjit as fj
        ray = fj.distributed.ray
        with fj.distributed.Cluster(ps=1, workers=2) as c:
            print(c.address, len(c.devices()), ray.cluster_resources()["CPU"])
        print(ray.is_initialized())
        """)
    out = subprocess.run([sys.executable, "-c", prog], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    first, second = out.stdout.split("\n")[:2]
    assert first.startswith("127.0.0.1:") and first.endswith(" 3 3.0") and second == "False"


def test_a_killed_task_is_restarted_with_its_state_reset(ray_address):
    with fjd.Cluster(ps=1, workers=1) as cluster:
        name = "/job:worker/task:0"
        fjd.ray.get(cluster.task(name).set_delay.remote(0.5), timeout=30)
        before = cluster.pids[name]
        cluster.kill(name)
        after = cluster.wait_ready(name, timeout=60)
        assert after != before and cluster.pids[name] == after
        assert fjd.ray.get(cluster.task(name).ping.remote(), timeout=30) == (name, after)
    with fjd.Cluster(ps=1, workers=1, max_restarts=0) as cluster:
        cluster.kill(name)
        with pytest.raises(fjd.ClusterError, match=r"/job:worker/task:0 died and Ray will not restart it"):
            cluster.wait_ready(name, timeout=30)
