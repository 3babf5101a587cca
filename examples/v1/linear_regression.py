"""Fit y = 0.1 x + 0.3 with TensorFlow 1.x's Graph/Session API: the first program of the
TensorFlow white paper and of every TF1 tutorial, with only its import line changed.

The graph (placeholders, Variables, a mean-squared-error loss and a gradient descent
step) is built first; ``Session.run`` then compiles the part each fetch needs with
flowjit once, and every later step reuses the compiled program.

    python examples/v1/linear_regression.py [--steps 201]
"""

from __future__ import annotations

import argparse

import numpy as np

import flowjit.v1 as tf


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=201)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    # Made-up data: 100 points on y = x * 0.1 + 0.3.
    rng = np.random.default_rng(args.seed)
    x_data = rng.random(100).astype(np.float32)
    y_data = x_data * 0.1 + 0.3

    tf.reset_default_graph()
    x = tf.placeholder(tf.float32, [None], name="x")
    y_ = tf.placeholder(tf.float32, [None], name="y_")
    W = tf.Variable(tf.random_uniform([1], -1.0, 1.0, seed=args.seed), name="W")
    b = tf.Variable(tf.zeros([1]), name="b")
    y = W * x + b

    loss = tf.reduce_mean(tf.square(y - y_))
    optimizer = tf.train.GradientDescentOptimizer(0.5)
    train = optimizer.minimize(loss)
    init = tf.global_variables_initializer()

    with tf.Session() as sess:
        sess.run(init)
        for step in range(args.steps):
            _, loss_value = sess.run((train, loss), feed_dict={x: x_data, y_: y_data})
            if step % 20 == 0:
                print(f"step {step:4d}  loss {loss_value:.8f}  W {sess.run(W)[0]:+.4f}  b {sess.run(b)[0]:+.4f}")
        w_fit, b_fit = float(sess.run(W)[0]), float(sess.run(b)[0])
    print(f"fitted W = {w_fit:.4f} (true 0.1), b = {b_fit:.4f} (true 0.3)")
    return {"W": w_fit, "b": b_fit, "loss": float(loss_value)}


if __name__ == "__main__":
    main()
