"""Fit y = 0.1 x + 0.3 (plus noise) with Variables, fj.grad and SGD, as in the TensorFlow
paper's first example.

The training step is one ``@fj.function``: it reads the Variables W and b, takes the
gradient of the mean squared error with respect to them and applies the SGD update in
place. Prints the loss as it falls and the fitted W and b (about 0.1 and 0.3).

    python examples/linear_regression.py [--steps 200] [--lr 0.5]
"""

from __future__ import annotations

import argparse

import numpy as np

import flowjit as fj


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--lr", type=float, default=0.5)
    parser.add_argument("--samples", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    rng = np.random.default_rng(args.seed)
    x = rng.random(args.samples).astype(np.float32)
    y = (0.1 * x + 0.3 + 0.01 * rng.standard_normal(args.samples)).astype(np.float32)

    W = fj.Variable(rng.uniform(-1, 1, size=(1,)).astype(np.float32), name="W")
    b = fj.Variable(np.zeros(1, np.float32), name="b")
    opt = fj.optim.SGD(args.lr)

    @fj.function
    def train_step(x, y):
        return opt.minimize(lambda: fj.nn.mse(W * x + b, y), [W, b])

    for step in range(1, args.steps + 1):
        loss = train_step(x, y)
        if step == 1 or step % max(args.steps // 10, 1) == 0:
            print(f"step {step:4d}  loss {float(loss):.6f}  W {W.numpy()[0]:+.4f}  b {b.numpy()[0]:+.4f}")
    w_fit, b_fit = float(W.numpy()[0]), float(b.numpy()[0])
    print(f"fitted W = {w_fit:.4f} (true 0.1), b = {b_fit:.4f} (true 0.3)")
    return {"W": w_fit, "b": b_fit, "loss": float(loss)}


if __name__ == "__main__":
    main()
