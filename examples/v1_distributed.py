"""A classic TensorFlow 1 distributed training program (the shape of TF's mnist_replica.py)
on scikit-learn's 8x8 digits, run by flowjit with the import line changed.

The TF1 program: a ``tf.train.ClusterSpec`` of ps and worker hosts, a ``tf.train.Server``
for this task, the model's variables spread over the ps tasks by
``tf.train.replica_device_setter`` and its ops on this worker's task, Adam wrapped in a
``tf.train.SyncReplicasOptimizer`` (``--sync-replicas``), and a ``tf.Session(server.target)``
loop until ``global_step`` reaches ``--train-steps``.

How flowjit launches it: run ONLY the chief (``--job-name worker --task-index 0``, the
default). Its Server starts every ps and worker task of the ClusterSpec as a Ray actor on a
local runtime (``--address`` / ``FLOWJIT_RAY_ADDRESS`` joins a Ray cluster instead); the
host:port strings are names only. The variables live in the ps tasks' processes and the
forward and backward pass run in worker task 0's. With ``--sync-replicas`` each
``sess.run(train_step)`` contributes one replica's gradient and every
``--replicas-to-aggregate``-th run applies their mean (the replicas take turns in the
chief; for concurrent workers with backup workers see examples/distributed_digits.py). A
process started with ``--job-name ps`` returns from ``server.join()`` saying so.

    python examples/v1_distributed.py [--sync-replicas] [--replicas-to-aggregate 2] [--train-steps 200]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from digits import batches, load

import flowjit.v1 as tf


def build(cluster: tf.train.ClusterSpec, task_index: int, args: argparse.Namespace) -> dict:
    """The replicated model: variables on the ps tasks, ops on this worker."""
    num_workers = cluster.num_tasks("worker")
    tf.set_random_seed(args.seed)
    with tf.device(tf.train.replica_device_setter(worker_device=f"/job:worker/task:{task_index}",
                                                  ps_device="/job:ps", cluster=cluster)):
        global_step = tf.train.get_or_create_global_step()
        x = tf.placeholder(tf.float32, [None, 64], name="x")
        y_ = tf.placeholder(tf.int32, [None], name="labels")
        hid_w = tf.Variable(tf.truncated_normal([64, args.hidden_units], stddev=1.0 / 8), name="hid_w")
        hid_b = tf.Variable(tf.zeros([args.hidden_units]), name="hid_b")
        sm_w = tf.Variable(tf.truncated_normal([args.hidden_units, 10], stddev=1.0 / np.sqrt(args.hidden_units)),
                           name="sm_w")
        sm_b = tf.Variable(tf.zeros([10]), name="sm_b")
        hid = tf.nn.relu(tf.nn.xw_plus_b(x, hid_w, hid_b))
        logits = tf.nn.xw_plus_b(hid, sm_w, sm_b)
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y_, logits=logits))
        opt = tf.train.AdamOptimizer(args.learning_rate)
        hook = None
        if args.sync_replicas:
            opt = tf.train.SyncReplicasOptimizer(opt, replicas_to_aggregate=args.replicas_to_aggregate or num_workers,
                                                 total_num_replicas=num_workers, name="digits_sync_replicas")
        train_step = opt.minimize(loss, global_step=global_step)
        if args.sync_replicas:
            hook = opt.make_session_run_hook(is_chief=task_index == 0)
        correct = tf.equal(tf.argmax(logits, 1, output_type=tf.int32), y_)
        accuracy = tf.reduce_mean(tf.cast(correct, tf.float32))
    return {"x": x, "y": y_, "loss": loss, "train": train_step, "step": global_step, "accuracy": accuracy,
            "hook": hook, "init": tf.global_variables_initializer(), "devices": [v.device for v in
                                                                              tf.trainable_variables()]}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ps-hosts", default="localhost:2222,localhost:2223")
    parser.add_argument("--worker-hosts", default="localhost:2224,localhost:2225")
    parser.add_argument("--job-name", default="worker", choices=["ps", "worker"])
    parser.add_argument("--task-index", type=int, default=0)
    parser.add_argument("--sync-replicas", action="store_true")
    parser.add_argument("--replicas-to-aggregate", type=int, default=None, help="default: the number of workers")
    parser.add_argument("--train-steps", type=int, default=200, help="updates (global steps) to apply")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--hidden-units", type=int, default=64)
    parser.add_argument("--learning-rate", type=float, default=0.01)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--address", default=None, help="a Ray cluster to join (else FLOWJIT_RAY_ADDRESS, else local)")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)

    cluster = tf.train.ClusterSpec({"ps": args.ps_hosts.split(","), "worker": args.worker_hosts.split(",")})
    server = tf.train.Server(cluster, job_name=args.job_name, task_index=args.task_index,
                             config={"address": args.address} if args.address else None)
    if args.job_name == "ps":
        server.join()
        return {}
    x_train, y_train, x_test, y_test = load(seed=args.seed)
    tf.reset_default_graph()
    model = build(cluster, args.task_index, args)
    print(f"variables on {', '.join(model['devices'])}; ops on /job:worker/task:{args.task_index}")
    rng = np.random.default_rng(args.seed)
    runs, step = 0, 0
    start = time.perf_counter()
    try:
        with tf.Session(server.target) as sess:
            sess.run(model["init"])
            if model["hook"] is not None:
                model["hook"].after_create_session(sess, None)
            while step < args.train_steps:
                for xb, yb in batches(x_train, y_train, args.batch_size, rng):
                    _, loss, step = sess.run((model["train"], model["loss"], model["step"]),
                                             feed_dict={model["x"]: xb, model["y"]: yb})
                    runs += 1
                    if not args.quiet and runs % 50 == 0:
                        print(f"run {runs:4d}  global step {step:4d}  loss {loss:.4f}")
                    if step >= args.train_steps:
                        break
            elapsed = time.perf_counter() - start
            step = int(sess.run(model["step"]))  # a run's fetch of it read the value before its update
            acc = float(sess.run(model["accuracy"], feed_dict={model["x"]: x_test, model["y"]: y_test}))
    finally:
        server.stop()
    print(f"{step} updates from {runs} runs of the train op in {elapsed:.1f} s "
          f"({runs * args.batch_size / elapsed:,.0f} samples/s)")
    print(f"accuracy {acc:.3f}")
    return {"test_accuracy": acc, "steps": int(step), "runs": runs, "devices": model["devices"]}


if __name__ == "__main__":
    main()
