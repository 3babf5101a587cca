"""Fit a linear model y = X @ w + b by full-batch gradient descent, with flowjit.

The training step (predictions, loss and the hand-written gradient of the mean squared
error) is one ``@fj.function``: it is traced once into flowjit's SSA IR, printed, and
then run for every step. Prints the IR, the progress of the loss, the fitted parameters
next to the true ones, and the speed.

    python examples/linear_fit.py [--steps 300] [--features 8] [--samples 4096]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import flowjit as fj


@fj.function
def train_step(w, b, x, y, lr):
    """One gradient-descent step on the mean squared error; returns new (w, b) and the loss."""
    err = x @ w + b - y
    loss = fj.mean(err * err)
    n = x.shape[0]
    grad_w = 2.0 / n * (x.T @ err)
    grad_b = 2.0 / n * err.sum()
    return w - lr * grad_w, b - lr * grad_b, loss


def make_data(samples: int, features: int, seed: int = 0):
    """A synthetic regression problem with known weights and Gaussian noise."""
    rng = np.random.default_rng(seed)
    w_true = rng.uniform(-2, 2, size=features).astype(np.float32)
    b_true = np.float32(0.5)
    x = rng.standard_normal((samples, features)).astype(np.float32)
    y = x @ w_true + b_true + 0.01 * rng.standard_normal(samples).astype(np.float32)
    return x, y, w_true, b_true


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--features", type=int, default=8)
    parser.add_argument("--samples", type=int, default=4096)
    parser.add_argument("--lr", type=float, default=0.1)
    args = parser.parse_args(argv)

    x, y, w_true, b_true = make_data(args.samples, args.features)
    w = np.zeros(args.features, np.float32)
    b = np.zeros((), np.float32)

    print("The training step as flowjit IR (traced once, reused every step):\n")
    print(train_step.ir(w, b, x, y, args.lr))

    start = time.perf_counter()
    loss = float("nan")
    for step in range(1, args.steps + 1):
        w, b, loss = train_step(w, b, x, y, args.lr)
        if step % max(1, args.steps // 5) == 0 or step == 1:
            print(f"step {step:5d}  loss {float(loss):.6f}")
    elapsed = time.perf_counter() - start

    print("\nfitted  w:", np.array2string(w, precision=3), f" b: {float(b):.3f}")
    print("true    w:", np.array2string(w_true, precision=3), f" b: {float(b_true):.3f}")
    err = float(np.max(np.abs(w - w_true)))
    print(f"max |w - w_true| = {err:.4f};  {args.steps / elapsed:.0f} steps/s "
          f"({args.samples * args.steps / elapsed:,.0f} samples/s); traces: {train_step.trace_count}")
    return {"loss": float(loss), "max_weight_error": err, "bias": float(b)}


if __name__ == "__main__":
    main()
