"""Model parallelism: a two-layer network whose layers sit on two devices, trained on
scikit-learn's digits.

Layer 1 (64 -> 256, relu) lives on the first device and layer 2 (256 -> 10) on the
second: their Variables are created under ``fj.device`` and each layer is called under
it, so its forward ops, their gradients and the optimizer's updates (and its slots) run
there. The
placement pass puts every op on a device, the partition pass cuts the edges between
devices into send/recv pairs (printed below), and each call of the training step runs
the two partitions on their own threads (or GPUs), exchanging activations forward and
gradients backward.

Devices: two GPUs when there are two, else virtual CPU devices
(``FLOWJIT_CPU_DEVICES``, set to 3 here when unset: the host ``cpu:0`` feeds the batch,
``cpu:1`` and ``cpu:2`` hold the layers).

    python examples/model_parallel.py [--epochs 10] [--print-ir]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

os.environ.setdefault("FLOWJIT_CPU_DEVICES", "3")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import digits  # noqa: E402

import flowjit as fj  # noqa: E402


def layer_devices() -> tuple[str, str]:
    """Two GPUs when present, else two virtual CPUs beside the host's cpu:0."""
    gpus = [str(d) for d in fj.devices() if d.kind == "cuda"]
    if len(gpus) >= 2:
        return gpus[0], gpus[1]
    cpus = [str(d) for d in fj.devices() if d.kind == "cpu"]
    if len(cpus) < 3:
        raise SystemExit("model_parallel needs FLOWJIT_CPU_DEVICES >= 3 (or two GPUs)")
    return cpus[1], cpus[2]


def main(argv: list[str] | None = None) -> dict[str, float]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--print-ir", action="store_true", help="print the partitioned training step")
    p.add_argument("--quiet", action="store_true")
    args = p.parse_args(argv)

    first, second = layer_devices()
    x_train, y_train, x_test, y_test = digits.load()
    keys = fj.random.split(fj.random.key(0), 2)
    with fj.device(first):
        hidden = fj.nn.Dense(64, 256, fj.nn.relu, key=keys[0], name="hidden")
    with fj.device(second):
        logits = fj.nn.Dense(256, 10, key=keys[1], name="logits")
    params = [*hidden.trainable_variables, *logits.trainable_variables]
    opt = fj.optim.Momentum(args.lr, 0.9)

    def model(x):
        # Each layer's ops run on its device; their gradients follow them.
        with fj.device(first):
            h = hidden(x)
        with fj.device(second):
            return logits(h)

    def loss_fn(x, y):
        with fj.device(second):  # the loss next to the logits: only the labels cross over
            return fj.nn.softmax_cross_entropy(model(x), y)

    @fj.function
    def train_step(x, y):
        return opt.minimize(lambda: loss_fn(x, y), params)

    @fj.function
    def evaluate(x, y):
        return fj.nn.accuracy(model(x), y)

    xb, yb = x_train[:args.batch_size], y_train[:args.batch_size]
    if args.print_ir:
        print(train_step.ir(xb, yb, stage="partition"))
    sends = [op for op in train_step.ir(xb, yb, stage="partition").body.ops if op.name == "send"]
    if not args.quiet:
        print(f"layers on {first} and {second}; {len(sends)} send/recv pairs per step")

    rng = np.random.default_rng(0)
    start = time.perf_counter()
    steps = 0
    for epoch in range(1, args.epochs + 1):
        for x, y in digits.batches(x_train, y_train, args.batch_size, rng):
            loss = train_step(x, y)
            steps += 1
        if not args.quiet:
            print(f"epoch {epoch:3d}  loss {float(loss):.4f}  test accuracy {float(evaluate(x_test, y_test)):.3f}")
    seconds = time.perf_counter() - start
    acc = float(evaluate(x_test, y_test))
    if not args.quiet:
        print(f"test accuracy {acc:.3f}; {steps / seconds:.0f} steps/s (first step's compile included)")
    return {"test_accuracy": acc, "pairs": len(sends)}


if __name__ == "__main__":
    main()
