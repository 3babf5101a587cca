"""Train a small convolutional network on handwritten digits with flowjit.

The 8x8 digits of scikit-learn (no download) go through two 3x3 convolutions with ReLU
and 2x2 max pooling (8x8 -> 4x4 -> 2x2), then a dense layer to the 10 classes; Adam on
the softmax cross-entropy. The training step, convolution gradients included, is one
``@fj.function``. Prints the loss, the test accuracy and samples/s; ``--logdir DIR``
also writes them (and each step's time) as TensorBoard summaries.

    python examples/cnn_digits.py [--epochs 15] [--batch-size 64] [--logdir runs/cnn]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from digits import batches, load
from mnist_mlp import classifier_steps
from tqdm import tqdm

import flowjit as fj


class ConvNet(fj.nn.Layer):
    """conv 3x3 (16) - pool 2 - conv 3x3 (32) - pool 2 - dense (10), over NHWC 8x8x1."""

    def __init__(self, seed: int):
        keys = [int(k) for k in np.random.default_rng(seed).integers(0, 2**31, 3)]
        self.conv1 = fj.nn.Conv2D(1, 16, 3, activation=fj.nn.relu, kernel_init=fj.nn.initializers.he_normal,
                                  key=keys[0], name="conv1")
        self.conv2 = fj.nn.Conv2D(16, 32, 3, activation=fj.nn.relu, kernel_init=fj.nn.initializers.he_normal,
                                  key=keys[1], name="conv2")
        self.dense = fj.nn.Dense(2 * 2 * 32, 10, key=keys[2], name="logits")

    def __call__(self, x):
        x = fj.reshape(x, (-1, 8, 8, 1))
        x = fj.nn.max_pool(self.conv1(x), 2)
        x = fj.nn.max_pool(self.conv2(x), 2)
        return self.dense(fj.reshape(x, (x.shape[0], -1)))


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=15)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.add_argument("--logdir", help="write TensorBoard summaries (loss, accuracy, step time) here")
    args = parser.parse_args(argv)

    x_train, y_train, x_test, y_test = load(seed=args.seed)
    model = ConvNet(args.seed)
    opt = fj.optim.Adam(args.lr)

    train_step, evaluate = classifier_steps(model, opt)
    rng = np.random.default_rng(args.seed)
    steps_per_epoch = len(x_train) // args.batch_size
    seconds, samples, acc = 0.0, 0, float("nan")
    log = fj.summary.create_writer(args.logdir) if args.logdir else None
    for epoch in range(1, args.epochs + 1):
        bar = tqdm(batches(x_train, y_train, args.batch_size, rng), total=steps_per_epoch,
                   desc=f"epoch {epoch}/{args.epochs}", disable=args.quiet, leave=False)
        for step, (x, y) in enumerate(bar):
            t0 = time.perf_counter()
            loss = train_step(x, y)
            dt = time.perf_counter() - t0
            if epoch > 1 or step > 0:  # the first step traces and compiles
                seconds += dt
                samples += len(x)
            bar.set_postfix(loss=f"{float(loss):.4f}", refresh=False)
            if log:
                log.scalar("train/loss", loss, (epoch - 1) * steps_per_epoch + step)
                log.scalar("train/step_time_ms", dt * 1e3, (epoch - 1) * steps_per_epoch + step)
        acc = float(evaluate(x_test, y_test))
        print(f"epoch {epoch:3d}  loss {float(loss):.4f}  test accuracy {acc:.2%}")
        if log:
            log.scalar("test/accuracy", acc, epoch * steps_per_epoch)
    if log:
        log.close()
    speed = samples / seconds if seconds else float("nan")
    print(f"test accuracy {acc:.2%}; {speed:,.0f} samples/s in steady state")
    return {"test_accuracy": acc, "samples_per_s": speed}


if __name__ == "__main__":
    main()
