"""Train an MLP on handwritten digits with flowjit: compiled training step, a progress
bar, a checkpoint each epoch, and ``--resume``.

The data are scikit-learn's bundled 8x8 digits (no download; MNIST's little sibling).
The model is 64-128-128-10 with ReLU, trained with Adam on the softmax cross-entropy;
the whole step (forward, gradients, update of every parameter and slot) is one
``@fj.function``, traced once and compiled to fused native kernels. Each epoch ends
with a checkpoint (``fj.checkpoint``, safetensors, atomic, checksummed, the last three
kept); ``--resume`` continues from the latest one that verifies (a damaged newer one is
skipped with a warning). Prints test accuracy and samples/s;
``--logdir DIR`` also writes TensorBoard summaries (loss, test accuracy, step time, the
training step's fused graph) for ``tensorboard --logdir DIR``.

    python examples/mnist_mlp.py [--epochs 20] [--batch-size 64] [--resume] [--logdir runs/mlp]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from digits import batches, load
from tqdm import tqdm

import flowjit as fj


def build_model(seed: int) -> fj.nn.Sequential:
    """64-128-128-10 with ReLU; names are fixed so checkpoints match across runs."""
    keys = [int(k) for k in np.random.default_rng(seed).integers(0, 2**31, 3)]
    return fj.nn.Sequential([
        fj.nn.Dense(64, 128, fj.nn.relu, key=keys[0], name="hidden1"),
        fj.nn.Dense(128, 128, fj.nn.relu, key=keys[1], name="hidden2"),
        fj.nn.Dense(128, 10, key=keys[2], name="logits"),
    ], name="mlp")


def classifier_steps(model: fj.nn.Layer, opt: fj.optim.Optimizer):
    """The compiled training step (softmax cross-entropy, one optimizer update of every
    trainable variable; returns the loss) and the compiled test accuracy of ``model``."""

    @fj.function
    def train_step(x, y):
        return opt.minimize(lambda: fj.nn.softmax_cross_entropy(model(x), y), model.trainable_variables)

    @fj.function
    def evaluate(x, y):
        return fj.nn.accuracy(model(x), y)

    return train_step, evaluate


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--checkpoint-dir", default="checkpoints/mnist_mlp")
    parser.add_argument("--resume", action="store_true", help="continue from the latest checkpoint")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.add_argument("--logdir", help="write TensorBoard summaries (loss, accuracy, step time, graph) here")
    args = parser.parse_args(argv)

    x_train, y_train, x_test, y_test = load(seed=args.seed)
    model = build_model(args.seed)
    opt = fj.optim.Adam(args.lr)
    state = {"model": model.variables, "optimizer": opt}
    manager = fj.checkpoint.CheckpointManager(args.checkpoint_dir, max_to_keep=3)

    first_epoch = 1
    if args.resume:
        meta = manager.restore(state)
        if meta is None:
            print(f"no checkpoint in {args.checkpoint_dir}: starting from scratch")
        else:
            first_epoch = meta["step"] + 1
            print(f"resumed from {meta['path']} (epoch {meta['step']}, step {int(opt.iterations.numpy())})")

    train_step, evaluate = classifier_steps(model, opt)
    rng = np.random.default_rng(args.seed + first_epoch)
    steps_per_epoch = len(x_train) // args.batch_size
    first_step_s, steady_s, steady_samples = None, 0.0, 0
    acc = float("nan")
    log = fj.summary.create_writer(args.logdir) if args.logdir else None
    for epoch in range(first_epoch, args.epochs + 1):
        bar = tqdm(batches(x_train, y_train, args.batch_size, rng), total=steps_per_epoch,
                   desc=f"epoch {epoch}/{args.epochs}", disable=args.quiet, leave=False)
        for i, (x, y) in enumerate(bar):
            t0 = time.perf_counter()
            loss = train_step(x, y)
            dt = time.perf_counter() - t0
            if first_step_s is None:
                first_step_s = dt  # trace + compile (or load from the disk cache) + run
                if log:
                    log.graph(train_step, x, y)
            else:
                steady_s += dt
                steady_samples += len(x)
            bar.set_postfix(loss=f"{float(loss):.4f}", refresh=False)
            if log:
                step = (epoch - 1) * steps_per_epoch + i
                log.scalar("train/loss", loss, step)
                log.scalar("train/step_time_ms", dt * 1e3, step)
        acc = float(evaluate(x_test, y_test))
        manager.save(state, step=epoch, metadata={"test_accuracy": acc})
        print(f"epoch {epoch:3d}  loss {float(loss):.4f}  test accuracy {acc:.2%}")
        if log:
            log.scalar("test/accuracy", acc, epoch * steps_per_epoch)
            log.flush()
    if log:
        log.close()

    speed = steady_samples / steady_s if steady_s else float("nan")
    print(f"test accuracy {acc:.2%}; {speed:,.0f} samples/s in steady state; "
          f"first step {first_step_s if first_step_s is not None else float('nan'):.2f} s (trace + compile)")
    return {"test_accuracy": acc, "samples_per_s": speed}


if __name__ == "__main__":
    main()
