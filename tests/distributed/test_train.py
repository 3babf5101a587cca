"""fj.distributed.train: sync equals single-process training step for step, backup workers
drop a straggler's gradients, async trains the digits MLP, and bad arguments are refused."""

from __future__ import annotations

import itertools
import time

import numpy as np
import pytest

import flowjit as fj
from tests.distributed import models

fjd = pytest.importorskip("flowjit.distributed", exc_type=ImportError)  # Ray missing: skip
fjd.ray.cloudpickle.register_pickle_by_value(models)  # the workers cannot import the tests package


def single_process(params, optimizer, steps):
    """The same training in this process: each step one gradient on the given batch."""
    variables = {n: fj.Variable(v, name=n) for n, v in params.items()}
    value_and_grad = fj.value_and_grad(models.mlp_loss)

    @fj.function
    def apply(*grads):
        optimizer.apply_gradients(zip(grads, variables.values()))

    losses = []
    for x, y in steps:
        loss, g = value_and_grad({n: v.numpy() for n, v in variables.items()}, x, y)
        apply(*[g[n] for n in variables])
        losses.append(float(loss))
    return losses, {n: v.numpy() for n, v in variables.items()}


def test_sync_without_backup_equals_single_process_training_step_for_step(ray_address):
    x, y, _, _ = models.digits()
    params = models.mlp_params(64, 16, 10)
    steps, workers, rows = 6, 3, 20
    data = list(itertools.islice(models.batches(x, y, rows), steps * workers))
    with fjd.Cluster(ps=2, workers=workers) as cluster:
        r = fjd.train(cluster, models.mlp_loss, params, fj.optim.Adam(0.01), data, steps=steps, mode="sync")
    # One single-process step per sync step, on the concatenation of the workers' batches:
    # the mean loss's gradient is the mean of the workers' gradients.
    merged = [tuple(np.concatenate(parts) for parts in zip(*data[s * workers:(s + 1) * workers])) for s in range(steps)]
    losses, final = single_process(params, fj.optim.Adam(0.01), merged)
    assert r.steps == steps and r.dropped == 0 and r.samples == steps * workers * rows
    assert all(len(c) == workers for c in r.contributors)
    np.testing.assert_allclose(r.losses, losses, rtol=2e-5)
    for n in params:
        np.testing.assert_allclose(r.params[n], final[n], rtol=1e-4, atol=1e-6, err_msg=n)
    assert not np.allclose(r.params["w1"], params["w1"])  # it did train


def test_sync_with_a_backup_worker_drops_a_stragglers_gradients(ray_address):
    x, y, _, _ = models.digits()
    params = models.mlp_params(64, 16, 10)
    steps, delay = 8, 1.0
    with fjd.Cluster(ps=1, workers=3) as cluster:
        cluster.slow_worker(2, delay)
        start = time.perf_counter()
        r = fjd.train(cluster, models.mlp_loss, params, fj.optim.SGD(0.1), models.batches(x, y, 32), steps=steps,
                      mode="sync", backup=1)
        seconds = time.perf_counter() - start
    assert r.steps == steps and r.dropped >= 1
    # Every update averaged two gradients, none of them the straggler's, and the run did
    # not wait for it step after step.
    assert all(len(c) == 2 and "/job:worker/task:2" not in c for c in r.contributors), r.contributors
    assert seconds < steps * delay, seconds
    assert r.losses[-1] < r.losses[0]


def test_async_trains_the_digits_mlp(ray_address):
    x, y, xt, yt = models.digits()
    with fjd.Cluster(ps=2, workers=4) as cluster:
        r = fjd.train(cluster, models.mlp_loss, models.mlp_params(64, 32, 10), fj.optim.Adam(0.01),
                      models.batches(x, y, 32), steps=800, mode="async", staleness=4)
    accuracy = np.mean(np.argmax(models.mlp_logits(r.params, xt), 1) == yt)
    assert accuracy >= 0.95, accuracy
    assert r.steps == 800 and len(r.staleness) == 800 and max(r.staleness) <= 4
    # Several workers contributed, each with gradients of parameters a few updates old.
    assert len({c for (c,) in r.contributors}) == 4 and max(r.staleness) >= 1


def test_variables_spread_over_the_parameter_servers():
    sizes = {"a": 10, "b": 1000, "c": 500, "d": 400}
    assert fjd.place_variables(sizes, 2) == [["a", "c"], ["b", "d"]]
    assert fjd.place_variables(sizes, 2, "by_size") == [["b"], ["c", "d", "a"]]
    with pytest.raises(ValueError, match="placement='nearest'"):
        fjd.place_variables(sizes, 2, "nearest")


def test_bad_arguments(ray_address):
    params = models.mlp_params(64, 16, 10)
    with fjd.Cluster(ps=1, workers=2) as cluster:
        for kwargs, message in [({"backup": 2}, r"backup=2.*2 workers"), ({"mode": "hogwild"}, r"mode='hogwild'"),
                                ({"mode": "async", "backup": 1}, r"backup workers are a sync notion"),
                                ({"staleness": 3}, r"staleness=3")]:
            with pytest.raises(ValueError, match=message):
                fjd.train(cluster, models.mlp_loss, params, fj.optim.SGD(0.1), [], steps=1, **kwargs)


def test_a_failing_gradient_names_the_task_and_the_error(ray_address):
    x, y, _, _ = models.digits()
    params = models.mlp_params(63, 16, 10)  # one input feature short of the data's 64
    with fjd.Cluster(ps=1, workers=2) as cluster:
        for mode in ("sync", "async"):
            with pytest.raises(fjd.ClusterError, match=r"(?s)/job:worker/task:[01].*matmul.*64.*63") as e:
                fjd.train(cluster, models.mlp_loss, params, fj.optim.SGD(0.1), models.batches(x, y, 8), steps=2,
                          mode=mode)
            assert "models.py" in str(e.value)  # the user's line


def test_a_gradient_that_never_comes_times_out(ray_address):
    x, y, _, _ = models.digits()
    with fjd.Cluster(ps=1, workers=2) as cluster:
        cluster.slow_worker(1, 3.0)
        with pytest.raises(fjd.ClusterError, match=r"step 1: 1 of the 2 gradients needed arrived within 0.5 s"):
            fjd.train(cluster, models.mlp_loss, models.mlp_params(64, 16, 10), fj.optim.SGD(0.1),
                      models.batches(x, y, 8), steps=2, timeout=0.5)


@pytest.mark.slow
def test_a_backup_worker_keeps_the_step_rate_of_the_fault_free_run(ray_address):
    x, y, _, _ = models.digits()
    params = models.mlp_params(64, 32, 10)

    def seconds_a_step(cluster, backup):
        r = fjd.train(cluster, models.mlp_loss, params, fj.optim.SGD(0.1), models.batches(x, y, 32), steps=40,
                      backup=backup)
        return r.seconds / r.steps

    with fjd.Cluster(ps=2, workers=4) as cluster:
        seconds_a_step(cluster, 0)  # compiles
        fault_free = seconds_a_step(cluster, 0)
        cluster.slow_worker(3, 0.1)
        with_backup = seconds_a_step(cluster, 1)
        without = seconds_a_step(cluster, 0)
    # Without a backup every step waits for the straggler; with one, steps go at about the
    # fault-free rate (a loaded CI machine gets some slack).
    assert without > 0.1 and with_backup < max(3 * fault_free, 0.05), (fault_free, with_backup, without)
