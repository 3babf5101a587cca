"""Train a GRU over sequences with ``fj.scan``: is a sequence's sum positive?

Each example is a sequence of 12 numbers in [-1, 1]; the label says whether their sum is
positive. A GRU (16 units: update gate z, reset gate r, candidate n) reads the sequence
in one ``fj.scan``; a dense layer classifies the last state. The training step (the scan,
its gradient, a reverse scan over the saved states, and the Adam update) is one
``@fj.function``, and each scan runs as one native loop. Prints the loss and the test
accuracy (about 97%: sums near zero are hard to call); ``--logdir DIR`` also writes
them (and each step's time) as TensorBoard summaries.

    python examples/rnn_sequence.py [--steps 300] [--logdir runs/gru]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import flowjit as fj

LENGTH, HIDDEN = 12, 16


def make_data(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Sequences (time, batch, 1) and labels (batch,): 1 where the sum is positive."""
    x = rng.uniform(-1, 1, size=(LENGTH, n, 1)).astype(np.float32)
    return x, (x.sum(axis=(0, 2)) > 0).astype(np.int32)


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--logdir", help="write TensorBoard summaries (loss, accuracy, step time) here")
    args = parser.parse_args(argv)

    rng = np.random.default_rng(args.seed)
    init = fj.nn.initializers
    keys = [int(k) for k in rng.integers(0, 2**31, 3)]
    # The three gates' weights side by side: input (1, 3H), recurrent (H, 3H), bias (3H).
    W = fj.Variable(init.glorot_uniform(keys[0], (1, 3 * HIDDEN)), name="gru/W")
    U = fj.Variable(init.glorot_uniform(keys[1], (HIDDEN, 3 * HIDDEN)), name="gru/U")
    b = fj.Variable(np.zeros(3 * HIDDEN, np.float32), name="gru/b")
    head = fj.nn.Dense(HIDDEN, 2, key=keys[2], name="head")
    params = [W, U, b, *head.variables]
    opt = fj.optim.Adam(args.lr)

    def gru_cell(h, x):
        gx, gh = x @ W + b, h @ U
        z = fj.nn.sigmoid(gx[:, :HIDDEN] + gh[:, :HIDDEN])
        r = fj.nn.sigmoid(gx[:, HIDDEN:2 * HIDDEN] + gh[:, HIDDEN:2 * HIDDEN])
        n = fj.tanh(gx[:, 2 * HIDDEN:] + r * gh[:, 2 * HIDDEN:])
        return (1 - z) * n + z * h, None

    def logits(xs):
        h, _ = fj.scan(gru_cell, fj.zeros((xs.shape[1], HIDDEN), np.float32), xs)
        return head(h)

    @fj.function
    def train_step(xs, y):
        return opt.minimize(lambda: fj.nn.softmax_cross_entropy(logits(xs), y), params)

    @fj.function
    def accuracy(xs, y):
        return fj.nn.accuracy(logits(xs), y)

    x_test, y_test = make_data(1000, rng)
    log = fj.summary.create_writer(args.logdir) if args.logdir else None
    for step in range(1, args.steps + 1):
        xs, y = make_data(args.batch_size, rng)
        t0 = time.perf_counter()
        loss = train_step(xs, y)
        if log:
            log.scalar("train/step_time_ms", (time.perf_counter() - t0) * 1e3, step)
            log.scalar("train/loss", loss, step)
        if step % max(args.steps // 6, 1) == 0 or step == 1:
            acc = float(accuracy(x_test, y_test))
            print(f"step {step:4d}  loss {float(loss):.4f}  test accuracy {acc:.2%}")
            if log:
                log.scalar("test/accuracy", acc, step)
    acc = float(accuracy(x_test, y_test))
    print(f"test accuracy {acc:.2%}")
    if log:
        log.close()
    return {"test_accuracy": acc}


if __name__ == "__main__":
    main()
