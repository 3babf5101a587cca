"""Train the digits MLP data-parallel on a cluster of parameter servers and workers
(``fj.distributed`` on Ray): the replicated training of the TensorFlow paper.

The variables of a 64-H-10 tanh MLP are spread over the ``--ps`` parameter-server tasks;
each of the ``--workers`` worker tasks compiles the loss's value and gradient once and
computes gradients on the batches the chief (this process) hands it; the servers apply
Adam. ``--mode sync`` averages the first ``workers - backup`` gradients of each step and
drops the stragglers' (backup workers); ``--mode async`` applies each gradient as it
lands, dropping those more than ``--staleness`` updates old. ``--slow-worker MS`` makes the
last worker sleep MS milliseconds before each gradient, to see backup workers at work.
With no ``--address`` a local Ray runtime on loopback is started (and shut down at the
end); with one, the Ray cluster there is joined.

Faults and checkpoints: ``--kill-worker-every K`` kills a worker (drawn with ``--seed``)
after every K updates, as a crash would, and waits for Ray to restart it (1-2 s, so that a
short run sees the rejoin); the chief has it rejoin, while sync steps go on with the other
workers (give ``--backup 1`` or more). ``--checkpoint-dir
DIR`` has the parameter servers checkpoint every ``--checkpoint-every`` updates and at the
end; ``--restore`` resumes from the latest complete checkpoint there.

The progress bar counts the updates applied (``train``'s ``on_step`` callback, which also
does the killing). The run ends with the test accuracy and the samples per second of the
gradients applied (the workers' first gradient, which compiles, included).

    python examples/distributed_digits.py --ps 2 --workers 4 --backup 1 --mode sync [--slow-worker 100]
        [--kill-worker-every 50] [--checkpoint-dir /tmp/digits-ckpt [--restore]]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from typing import Any

import numpy as np
from digits import load
from tqdm import tqdm

import flowjit as fj


def mlp_loss(params: dict[str, Any], x: Any, y: Any) -> Any:
    """Mean softmax cross-entropy of the one-hidden-layer tanh MLP (a module-level function:
    it travels to the workers)."""
    h = fj.tanh(x @ params["w1"] + params["b1"])
    return fj.nn.softmax_cross_entropy(h @ params["w2"] + params["b2"], y)


def mlp_params(hidden: int, seed: int) -> dict[str, np.ndarray]:
    """Initial weights of the 64-``hidden``-10 MLP (scaled normal), zero biases."""
    rng = np.random.default_rng(seed)
    return {"w1": (rng.normal(size=(64, hidden)) / 8.0).astype(np.float32),
            "b1": np.zeros(hidden, np.float32),
            "w2": (rng.normal(size=(hidden, 10)) / np.sqrt(hidden)).astype(np.float32),
            "b2": np.zeros(10, np.float32)}


def accuracy(params: dict[str, np.ndarray], x: np.ndarray, y: np.ndarray) -> float:
    logits = np.tanh(x @ params["w1"] + params["b1"]) @ params["w2"] + params["b2"]
    return float(np.mean(np.argmax(logits, 1) == y))


def endless_batches(x: np.ndarray, y: np.ndarray, size: int, seed: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Shuffled whole batches of ``size`` rows, epoch after epoch, made one at a time as the
    chief asks (never materialize this: it does not end)."""
    rng = np.random.default_rng(seed)
    while True:
        order = rng.permutation(len(x))
        for i in range(0, len(x) - size + 1, size):
            yield x[order[i:i + size]], y[order[i:i + size]]


def on_step(cluster: Any, bar: tqdm, kill_every: int, workers: int, seed: int) -> Any:
    """``train``'s per-update callback: tick ``bar`` and, every ``kill_every`` updates before
    the last, kill a worker drawn at random (seeded) as a crash would."""
    rng = np.random.default_rng(seed)

    def call(step: int, result: Any) -> None:
        bar.update(step - bar.n)  # a parameter server's crash sets the step back
        if kill_every and step % kill_every == 0 and step < bar.total:
            name = f"/job:worker/task:{rng.integers(workers)}"
            cluster.kill(name)
            # Ray's restart takes 1-2 s, longer than a short run's remaining steps here: wait
            # for it, so that the run sees the crash and the worker rejoin (train itself never
            # waits for a crashed worker while enough others are free).
            cluster.wait_ready(name)
            bar.write(f"killed {name} after update {step}; Ray restarted it")
    return call


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ps", type=int, default=2, help="parameter-server tasks")
    parser.add_argument("--workers", type=int, default=4, help="worker tasks")
    parser.add_argument("--backup", type=int, default=1, help="backup workers (sync): gradients dropped a step")
    parser.add_argument("--mode", choices=("sync", "async"), default="sync")
    parser.add_argument("--staleness", type=int, default=None,
                        help="async: drop gradients more than K updates old (default: as many as there are workers)")
    parser.add_argument("--slow-worker", type=float, default=0.0, metavar="MS",
                        help="the last worker sleeps MS milliseconds before each gradient")
    parser.add_argument("--steps", type=int, default=None, help="updates applied (default 300 sync, 600 async)")
    parser.add_argument("--batch", type=int, default=32, help="rows per gradient")
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--lr", type=float, default=None, help="Adam's learning rate (default 0.01 sync, 0.005 async)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--kill-worker-every", type=int, default=0, metavar="K",
                        help="kill a (seeded random) worker after every K updates")
    parser.add_argument("--checkpoint-dir", default=None, help="the parameter servers checkpoint here")
    parser.add_argument("--checkpoint-every", type=int, default=100, metavar="K",
                        help="with --checkpoint-dir: a checkpoint every K updates (and one at the end)")
    parser.add_argument("--restore", action="store_true", help="resume from the latest checkpoint in --checkpoint-dir")
    parser.add_argument("--address", default=None, help="host:port of a Ray cluster to join (default: a local one)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)
    backup = args.backup if args.mode == "sync" else 0
    # Asynchronous updates converge whatever the timing: on a busy machine the workers run
    # unevenly and their gradients grow stale (0.944 with 300 updates, no bound and sync's
    # rate, seen under load), so async takes twice the updates at half the rate and drops a
    # gradient more than one round of the workers old.
    if args.steps is None:
        args.steps = 600 if args.mode == "async" else 300
    if args.lr is None:
        args.lr = 0.005 if args.mode == "async" else 0.01
    if args.mode == "async" and args.staleness is None:
        args.staleness = args.workers

    import flowjit.distributed as fjd  # before anything imports Ray: it keeps a local runtime on loopback

    if __name__ != "__main__":  # imported (tests): the workers cannot import this module, so send it by value
        fjd.ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    x_train, y_train, x_test, y_test = load(seed=args.seed)
    with fjd.Cluster(ps=args.ps, workers=args.workers, address=args.address) as cluster:
        print(f"{cluster}: {', '.join(cluster.devices())}")
        if args.slow_worker:
            cluster.slow_worker(args.workers - 1, args.slow_worker / 1e3)
        with tqdm(desc=f"{args.mode} updates", total=args.steps, unit="step", disable=args.quiet,
                  leave=False) as bar:
            r = fjd.train(cluster, mlp_loss, mlp_params(args.hidden, args.seed), fj.optim.Adam(args.lr),
                          endless_batches(x_train, y_train, args.batch, args.seed), steps=args.steps,
                          mode=args.mode, backup=backup, staleness=args.staleness,
                          checkpoint_dir=args.checkpoint_dir, restore=args.restore,
                          checkpoint_every_steps=args.checkpoint_every if args.checkpoint_dir else None,
                          on_step=on_step(cluster, bar, args.kill_worker_every, args.workers, args.seed))
    acc = accuracy(r.params, x_test, y_test)
    stale = f", staleness max {max(r.staleness)}" if r.staleness else ""
    resumed = f" (resumed at {r.start_step})" if r.start_step else ""
    print(f"{r.steps} updates{resumed} in {r.seconds:.2f} s ({(r.steps - r.start_step) / r.seconds:.1f} steps/s), "
          f"loss {r.losses[0]:.4f} -> {r.losses[-1]:.4f}, {r.dropped} gradients dropped{stale}" if r.losses else
          f"{r.steps} updates{resumed}: none left to do")
    if r.worker_failures or r.ps_failures:
        rejoin = (f" (set up again {1e3 * np.mean(r.rejoin_seconds):.0f} ms after the chief noticed, on average)"
                  if r.rejoin_seconds else "")
        print(f"faults: {r.worker_failures} gradients lost to worker crashes, {r.worker_restarts} workers "
              f"rejoined{rejoin}; {r.ps_failures} parameter-server crashes, {r.steps_lost} updates redone")
    if r.checkpoints:
        print(f"checkpoints at steps {r.checkpoints} in {args.checkpoint_dir} "
              f"({1e3 * np.mean(r.checkpoint_seconds):.1f} ms each)")
    print(f"accuracy {acc:.3f}")
    print(f"throughput {r.samples_per_second:,.0f} samples/s")
    return {"test_accuracy": acc, "samples_per_s": r.samples_per_second, "steps": r.steps, "dropped": r.dropped,
            "start_step": r.start_step, "worker_failures": r.worker_failures, "worker_restarts": r.worker_restarts,
            "checkpoints": r.checkpoints}


if __name__ == "__main__":
    main()
