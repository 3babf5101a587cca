"""What `flowjit explain` says about an MLP training step: its kernels, the bytes and time
of each against this machine's bounds, and why fusion stopped where it did.

The step is a 784-256-10 ReLU MLP trained with Adam on the softmax cross-entropy, one
``@fj.function`` (forward, gradients and the update of every parameter and slot). Run
this file, or the same from the command line:

    python examples/explain_mlp.py [--batch 256] [--run] [--format json]
    flowjit explain examples/explain_mlp.py:train_step --arg f32[256,784] --arg i32[256] --run
"""

from __future__ import annotations

import argparse
import json

import numpy as np

import flowjit as fj
from flowjit.explain import Explanation

model = fj.nn.Sequential([
    fj.nn.Dense(784, 256, fj.nn.relu, key=0, name="hidden"),
    fj.nn.Dense(256, 10, key=1, name="logits"),
], name="mlp")
opt = fj.optim.Adam(1e-3)


@fj.function
def train_step(x, y):
    return opt.minimize(lambda: fj.nn.softmax_cross_entropy(model(x), y), model.trainable_variables)


def main(argv: list[str] | None = None) -> Explanation:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--run", action="store_true", help="also time each kernel")
    parser.add_argument("--format", default="text", choices=("text", "json"))
    args = parser.parse_args(argv)
    found = fj.explain(train_step, fj.ShapeDtype((args.batch, 784), np.float32),
                       fj.ShapeDtype((args.batch,), np.int32), run=args.run)
    print(json.dumps(found.to_json(), indent=2) if args.format == "json" else found)
    return found


if __name__ == "__main__":
    main()
