"""Logistic regression fed by a queue: TensorFlow 1.x's threaded input pipeline, with only
the import line changed.

A ``tf.FIFOQueue`` holds minibatches of examples. A ``tf.train.QueueRunner`` thread keeps it
full by running an enqueue op that draws a random minibatch from the data set (a compiled
gather of random rows, then the host-side enqueue); the training step dequeues a batch
and takes one gradient descent step on it, in the main thread, while the runner refills
the queue. A ``tf.train.Coordinator`` stops and joins the runner threads at the end.

The data: 2000 points in 4 dimensions, labelled by which side of a hyperplane they lie
on. Prints the loss as it falls and the accuracy over the whole data set (about 99%).

    python examples/v1/queue_input.py [--steps 600] [--batch-size 32] [--lr 0.5]
"""

from __future__ import annotations

import argparse

import numpy as np

import flowjit.v1 as tf


def make_data(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Points with standard normal features, labelled 1 on the positive side of a plane."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, 4)).astype(np.float32)
    w_true = np.array([1.5, -2.0, 1.0, 0.5], np.float32)
    y = (x @ w_true + 0.3 > 0).astype(np.float32)
    return x, y


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.5)
    parser.add_argument("--samples", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    x_data, y_data = make_data(args.samples, args.seed)

    tf.reset_default_graph()
    tf.set_random_seed(args.seed)

    # ---- the input pipeline: a queue of examples kept full by a runner thread ----------------
    with tf.name_scope("input"):
        features = tf.constant(x_data, name="features")
        labels = tf.constant(y_data, name="labels")
        rows = tf.random_uniform([args.batch_size], 0, args.samples, dtype=tf.int32)
        queue = tf.FIFOQueue(capacity=8 * args.batch_size, dtypes=[tf.float32, tf.float32], shapes=[[4], []])
        enqueue = queue.enqueue_many([tf.gather(features, rows), tf.gather(labels, rows)])
        tf.train.add_queue_runner(tf.train.QueueRunner(queue, [enqueue]))
        x, y_ = queue.dequeue_many(args.batch_size)

    # ---- the model -------------------------------------------------------------------------------------
    W = tf.Variable(tf.zeros([4, 1]), name="W")
    b = tf.Variable(tf.zeros([1]), name="b")
    logits = tf.reshape(tf.matmul(x, W) + b, [-1])
    loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=y_, logits=logits))
    train = tf.train.GradientDescentOptimizer(args.lr).minimize(loss)

    # Accuracy over the whole data set, on the constants (no queue involved).
    all_logits = tf.reshape(tf.matmul(features, W) + b, [-1])
    correct = tf.equal(tf.cast(tf.greater(all_logits, 0.0), tf.float32), labels)
    accuracy = tf.reduce_mean(tf.cast(correct, tf.float32))

    init = tf.global_variables_initializer()
    losses = []
    with tf.Session() as sess:
        sess.run(init)
        coord = tf.train.Coordinator()
        threads = tf.train.start_queue_runners(sess=sess, coord=coord)
        try:
            for step in range(args.steps):
                if coord.should_stop():
                    break
                _, loss_value = sess.run([train, loss])
                losses.append(float(loss_value))
                if step % max(args.steps // 10, 1) == 0 or step == args.steps - 1:
                    recent = np.mean(losses[-20:])
                    print(f"step {step:4d}  loss {loss_value:.4f}  (mean of the last 20: {recent:.4f})")
            acc = float(sess.run(accuracy))
        finally:
            coord.request_stop()
            coord.join(threads, stop_grace_period_secs=10)
        w_fit, b_fit = sess.run(W).ravel(), float(sess.run(b)[0])
    print(f"accuracy over all {args.samples} points: {acc:.4f}")
    print(f"fitted W = [{', '.join(f'{w:+.3f}' for w in w_fit)}], b = {b_fit:+.3f} "
          "(the plane's direction is (1.5, -2, 1, 0.5), offset 0.3)")
    return {"first_loss": float(np.mean(losses[:10])), "final_loss": float(np.mean(losses[-20:])),
            "accuracy": acc}


if __name__ == "__main__":
    main()
