"""A TF1-style MLP on scikit-learn's 8x8 digits: placeholders with a `None` batch
dimension, ``tf.layers.dense``, sparse softmax cross-entropy, Adam, and
``sess.run((train, loss), feed_dict=...)`` per mini-batch; a ``tf.train.Saver``
checkpoint at the end, restored into a fresh session to evaluate.

    python examples/v1/mlp_digits.py [--epochs 30] [--checkpoint-dir checkpoints/v1_mlp]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

import flowjit.v1 as tf

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # examples/digits.py
import digits  # noqa: E402


def build(hidden: int, lr: float, seed: int) -> dict:
    tf.reset_default_graph()
    tf.set_random_seed(seed)
    x = tf.placeholder(tf.float32, [None, 64], name="x")
    y_ = tf.placeholder(tf.int32, [None], name="labels")
    h = tf.layers.dense(x, hidden, activation=tf.nn.relu, name="hidden")
    logits = tf.layers.dense(h, 10, name="logits")
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y_, logits=logits))
    global_step = tf.train.get_or_create_global_step()
    train = tf.train.AdamOptimizer(lr).minimize(loss, global_step=global_step)
    correct = tf.equal(tf.argmax(logits, 1, output_type=tf.int32), y_)
    accuracy = tf.reduce_mean(tf.cast(correct, tf.float32))
    return {"x": x, "y": y_, "loss": loss, "train": train, "accuracy": accuracy, "step": global_step,
            "init": tf.global_variables_initializer(), "saver": tf.train.Saver(max_to_keep=2)}


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--checkpoint-dir", default="checkpoints/v1_mlp")
    args = parser.parse_args(argv)

    x_train, y_train, x_test, y_test = digits.load(seed=args.seed)
    g = build(args.hidden, args.lr, args.seed)
    rng = np.random.default_rng(args.seed)
    with tf.Session() as sess:
        sess.run(g["init"])
        start = time.perf_counter()
        seen = 0
        for epoch in range(1, args.epochs + 1):
            losses = []
            for xb, yb in digits.batches(x_train, y_train, args.batch_size, rng):
                _, loss_value = sess.run((g["train"], g["loss"]), feed_dict={g["x"]: xb, g["y"]: yb})
                losses.append(loss_value)
                seen += len(xb)
            if epoch == 1 or epoch % max(args.epochs // 5, 1) == 0 or epoch == args.epochs:
                acc = sess.run(g["accuracy"], feed_dict={g["x"]: x_test, g["y"]: y_test})
                print(f"epoch {epoch:3d}  loss {np.mean(losses):.4f}  test accuracy {acc:.3f}")
        speed = seen / (time.perf_counter() - start)
        path = g["saver"].save(sess, os.path.join(args.checkpoint_dir, "model.ckpt"), global_step=g["step"])
    # A fresh session knows nothing until the checkpoint is restored into it.
    with tf.Session() as sess:
        g["saver"].restore(sess, tf.train.latest_checkpoint(args.checkpoint_dir))
        test_acc = float(sess.run(g["accuracy"], feed_dict={g["x"]: x_test, g["y"]: y_test}))
    print(f"saved {path}; restored test accuracy {test_acc:.3f}; {speed:,.0f} samples/s")
    return {"test_accuracy": test_acc, "loss": float(np.mean(losses)), "checkpoint": path}


if __name__ == "__main__":
    main()
