"""fj.distributed.train checkpoints and faults: every parameter server writes its variables and
optimizer state, the chief indexes complete steps and a run resumes from them; a worker that
crashes is dropped and rejoins, a parameter server that crashes is restored from the last
checkpoint with the steps lost reported, and a task Ray will not restart fails fast, named."""

from __future__ import annotations

import itertools
import json
import os
import time

import numpy as np
import pytest

import flowjit as fj
from tests.distributed import models

fjd = pytest.importorskip("flowjit.distributed", exc_type=ImportError)  # Ray missing: skip
fjd.ray.cloudpickle.register_pickle_by_value(models)  # the workers cannot import the tests package

PARAMS = models.mlp_params(64, 16, 10)


def full_loss(params, x, y):
    """The mean cross-entropy of ``params`` on all of ``x``, in NumPy."""
    logits = models.mlp_logits(params, x)
    logits = logits - logits.max(1, keepdims=True)
    return float(np.mean(np.log(np.exp(logits).sum(1)) - logits[np.arange(len(y)), y]))


def kill_at(cluster, schedule):
    """An on_step callback killing the task ``schedule[step]`` after that step, then waiting
    for Ray to restart it (1-2 s: without the wait, a short run would end before the restarted
    task answers, and its crash would never be seen)."""
    def on_step(step, result):
        if step in schedule:
            name = schedule.pop(step)
            cluster.kill(name)
            cluster.wait_ready(name)
    return on_step


def test_checkpoints_hold_every_servers_variables_and_optimizer_state_and_a_run_resumes_from_them(ray_address,
                                                                                                 tmp_path):
    x, y, _, _ = models.digits()
    data = list(itertools.islice(models.batches(x, y, 16), 20))  # 10 steps of 2 workers, in order
    with fjd.Cluster(ps=2, workers=2) as cluster:
        whole = fjd.train(cluster, models.mlp_loss, PARAMS, fj.optim.Adam(0.01), data, steps=10)
        first = fjd.train(cluster, models.mlp_loss, PARAMS, fj.optim.Adam(0.01), data[:12], steps=6,
                          checkpoint_dir=tmp_path, checkpoint_every_steps=2, checkpoints_to_keep=2)
        # Step 6 is the last one (written at the end anyway), 2 and 4 on the way; two are kept.
        assert first.checkpoints == [2, 4, 6] and len(first.checkpoint_seconds) == 3
        assert sorted(os.listdir(tmp_path)) == ["checkpoint.json", "ps-0", "ps-1"]
        for p in (0, 1):
            assert sorted(os.listdir(tmp_path / f"ps-{p}")) == ["ckpt-4.safetensors", "ckpt-6.safetensors"]
        index = fjd.checkpoint_index(tmp_path)
        assert index == {"step": 6, "steps": [4, 6], "layout": [["w1", "w2"], ["b1", "b2"]]}
        # Each file is its server's whole state at step 6: variables, Adam's slots, iterations.
        for p, ps in enumerate(cluster.ps_tasks):
            held = fjd.ray.get(ps.ps_state.remote())
            saved, meta = fj.checkpoint.load(tmp_path / f"ps-{p}" / "ckpt-6.safetensors")
            assert meta["step"] == 6 and sorted(saved) == sorted(held)
            assert {n for n in saved if n.endswith("/m")} and int(saved["optimizer/iterations"]) == 6
            for name in held:
                np.testing.assert_array_equal(saved[name], held[name], err_msg=name)
        # Resumed: the servers start from the files, and the next 4 steps on the next batches
        # end where the uninterrupted run did.
        rest = fjd.train(cluster, models.mlp_loss, PARAMS, fj.optim.Adam(0.01), data[12:], steps=10,
                         checkpoint_dir=tmp_path, restore=True)
    assert rest.start_step == 6 and rest.steps == 10 and len(rest.losses) == 4
    np.testing.assert_allclose(first.losses + rest.losses, whole.losses, rtol=1e-6)
    for n in PARAMS:
        np.testing.assert_allclose(rest.params[n], whole.params[n], rtol=1e-5, atol=1e-7, err_msg=n)
    assert rest.checkpoints == [10] and fjd.checkpoint_index(tmp_path)["steps"] == [6, 10]


def test_restore_refuses_checkpoints_of_another_layout(ray_address, tmp_path):
    x, y, _, _ = models.digits()
    with fjd.Cluster(ps=2, workers=1) as cluster:
        fjd.train(cluster, models.mlp_loss, PARAMS, fj.optim.SGD(0.1), models.batches(x, y, 8), steps=1,
                  checkpoint_dir=tmp_path)
        with pytest.raises(fjd.ClusterError, match=r"hold the variables .* on 2 parameter servers.*by_size"):
            fjd.train(cluster, models.mlp_loss, PARAMS, fj.optim.SGD(0.1), models.batches(x, y, 8), steps=2,
                      checkpoint_dir=tmp_path, restore=True, placement="by_size")
        with pytest.raises(ValueError, match=r"checkpoint_every_steps=3.*checkpoint_dir="):
            fjd.train(cluster, models.mlp_loss, PARAMS, fj.optim.SGD(0.1), [], steps=1, checkpoint_every_steps=3)
        with pytest.raises(ValueError, match=r"restore=True.*checkpoint_dir="):
            fjd.train(cluster, models.mlp_loss, PARAMS, fj.optim.SGD(0.1), [], steps=1, restore=True)


def test_checkpoints_every_t_seconds(ray_address, tmp_path):
    x, y, _, _ = models.digits()
    with fjd.Cluster(ps=1, workers=1) as cluster:
        cluster.slow_worker(0, 0.05)  # a step takes a little over 50 ms
        r = fjd.train(cluster, models.mlp_loss, PARAMS, fj.optim.SGD(0.1), models.batches(x, y, 8), steps=10,
                      checkpoint_dir=tmp_path, checkpoint_every_seconds=0.25)
    # About one every five steps (the time is checked after each update), and the last.
    assert 2 <= len(r.checkpoints) <= 6 and r.checkpoints[-1] == 10, r.checkpoints


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_worker_that_crashes_is_dropped_and_rejoins(ray_address, mode):
    x, y, _, _ = models.digits()
    with fjd.Cluster(ps=1, workers=3) as cluster:
        # Each gradient takes 30 ms or more, so the 36 steps after the crash last over a second,
        # ten times what the restarted worker needs to rejoin and compile (unslowed, the run
        # could end first on a slow machine; its restarted process has no delay set).
        for w in range(3):
            cluster.slow_worker(w, 0.03)
        r = fjd.train(cluster, models.mlp_loss, PARAMS, fj.optim.Adam(0.01), models.batches(x, y, 32), steps=40,
                      mode=mode, backup=1 if mode == "sync" else 0,
                      on_step=kill_at(cluster, {3: "/job:worker/task:1"}))
    assert r.steps == 40 and len(r.losses) == 40
    assert r.worker_failures >= 1 and r.worker_restarts >= 1 and r.ps_failures == 0
    # It rejoined: its gradients count again after the crash (its first one compiles, and a
    # backup worker's place lets the others go on without it meanwhile).
    assert any("/job:worker/task:1" in c for c in r.contributors[4:]), r.contributors


def test_sync_without_a_backup_waits_for_the_crashed_worker_to_rejoin(ray_address):
    x, y, _, _ = models.digits()
    with fjd.Cluster(ps=1, workers=2) as cluster:
        r = fjd.train(cluster, models.mlp_loss, PARAMS, fj.optim.SGD(0.1), models.batches(x, y, 16), steps=8,
                      on_step=kill_at(cluster, {3: "/job:worker/task:1"}))
    # Every update still averages both workers' gradients: the step after the crash waited.
    assert r.steps == 8 and r.worker_failures == 1 and r.worker_restarts == 1
    assert all(c == ("/job:worker/task:0", "/job:worker/task:1") for c in r.contributors), r.contributors
    assert r.samples == 8 * 2 * 16 and r.dropped == 1  # the crashed step's surviving gradient


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_parameter_server_that_crashes_is_restored_from_the_last_checkpoint(ray_address, tmp_path, mode):
    x, y, _, _ = models.digits()
    with fjd.Cluster(ps=2, workers=2) as cluster:
        r = fjd.train(cluster, models.mlp_loss, PARAMS, fj.optim.Adam(0.01), models.batches(x, y, 32), steps=15,
                      mode=mode, checkpoint_dir=tmp_path, checkpoint_every_steps=5,
                      on_step=kill_at(cluster, {12: "/job:ps/task:1"}))
    # Killed after step 12: back to the checkpoint of step 10, steps 11 and 12 redone.
    assert r.ps_failures == 1 and r.steps_lost == 2
    assert r.steps == 15 and len(r.losses) == 15 and len(r.contributors) == 15
    assert fjd.checkpoint_index(tmp_path)["step"] == 15 and r.checkpoints == [5, 10, 15]
    assert r.losses[-1] < r.losses[0]


def test_a_parameter_server_crash_before_any_checkpoint_starts_over(ray_address, caplog):
    x, y, _, _ = models.digits()
    with fjd.Cluster(ps=1, workers=1) as cluster:
        r = fjd.train(cluster, models.mlp_loss, PARAMS, fj.optim.SGD(0.1), models.batches(x, y, 32), steps=5,
                      on_step=kill_at(cluster, {3: "/job:ps/task:0"}))
    assert r.ps_failures == 1 and r.steps_lost == 3 and r.steps == 5 and len(r.losses) == 5
    assert "/job:ps/task:0 crashed at update 3" in caplog.text and "the initial values" in caplog.text


@pytest.mark.parametrize("task", ["/job:worker/task:1", "/job:ps/task:0"])
def test_a_task_ray_will_not_restart_fails_fast_naming_it(ray_address, task):
    x, y, _, _ = models.digits()
    with fjd.Cluster(ps=1, workers=2, max_restarts=0, timeout=20) as cluster:
        start = time.perf_counter()
        with pytest.raises(fjd.ClusterError, match=rf"{task} died and Ray will not restart it"):
            fjd.train(cluster, models.mlp_loss, PARAMS, fj.optim.SGD(0.1), models.batches(x, y, 8), steps=10,
                      on_step=kill_at(cluster, {2: task}))
        assert time.perf_counter() - start < 10  # not the 20 s timeout


@pytest.mark.parametrize("kills", [(20,), pytest.param((15, 30, 45), marks=pytest.mark.slow)])
def test_sync_with_a_backup_worker_and_a_worker_killed_every_k_steps_ends_within_1_percent(ray_address, kills):
    x, y, _, _ = models.digits()
    data = itertools.repeat((x, y))  # every gradient on the whole set: the runs differ only by the faults
    rng = np.random.default_rng(0)
    with fjd.Cluster(ps=2, workers=3) as cluster:
        def train(on_step=None):
            return fjd.train(cluster, models.mlp_loss, models.mlp_params(64, 32, 10), fj.optim.Adam(0.01), data,
                             steps=60, backup=1, on_step=on_step)

        fault_free = train()
        schedule = {s: f"/job:worker/task:{rng.integers(3)}" for s in kills}
        faulty = train(kill_at(cluster, dict(schedule)))
    assert faulty.steps == fault_free.steps == 60
    assert faulty.worker_failures >= len(kills) and faulty.worker_restarts >= len(kills), faulty
    expected = full_loss(fault_free.params, x, y)
    assert abs(full_loss(faulty.params, x, y) - expected) <= 0.01 * expected
    assert expected < 0.5 * full_loss(models.mlp_params(64, 32, 10), x, y)  # it trained


def test_the_index_is_replaced_whole(ray_address, tmp_path):
    """A fresh run in a directory of an earlier one names no checkpoint until its own are complete."""
    (tmp_path / "checkpoint.json").write_text(json.dumps({"step": 99, "steps": [99], "layout": []}))
    x, y, _, _ = models.digits()
    seen = []
    with fjd.Cluster(ps=1, workers=1) as cluster:
        fjd.train(cluster, models.mlp_loss, PARAMS, fj.optim.SGD(0.1), models.batches(x, y, 8), steps=2,
                  checkpoint_dir=tmp_path, on_step=lambda step, r: seen.append(fjd.checkpoint_index(tmp_path)))
    assert seen[0]["step"] is None and fjd.checkpoint_index(tmp_path)["step"] == 2
    assert not [f for f in os.listdir(tmp_path) if f.startswith("checkpoint.json.tmp")]
