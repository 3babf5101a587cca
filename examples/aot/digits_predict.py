"""Train the digits MLP, then compile its predict function ahead of time into a C shared
library (``fj.export``, what ``flowjit compile`` does) that ``main.c`` and Python both run.

Writes into ``--out`` (default ``build/``): ``libpredict.so``, ``predict.h``,
``predict.json``, ``predict.safetensors`` (the trained weights, which the library takes as
arguments) and the test set as raw arrays for the C program (``test_x.f32``: float32
rows of 64 pixels, ``test_y.i32``: int32 labels). Then it loads the library back with
``fj.load_compiled`` (ctypes, no compiler) and checks it predicts what the JIT predicts.

    python examples/aot/digits_predict.py [--epochs 10] [--out build]
    make -C examples/aot          # the same, then main.c built with cc and run

(``fj.export(..., freeze=True)``, ``flowjit compile --freeze``, would compile the weights
into the library instead: a C caller then passes the images alone.)
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))   # examples/ for these two
from digits import batches, load  # noqa: E402
from mnist_mlp import build_model, classifier_steps  # noqa: E402

import flowjit as fj  # noqa: E402


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--out", default="build")
    parser.add_argument("--cpu", default="x86-64-v3", help="x86-64-v3 (portable) or native")
    args = parser.parse_args(argv)

    x_train, y_train, x_test, y_test = load()
    model = build_model(0)
    train_step, evaluate = classifier_steps(model, fj.optim.Adam(2e-3))
    rng = np.random.default_rng(0)
    for _ in range(args.epochs):
        for x, y in batches(x_train, y_train, 64, rng):
            train_step(x, y)

    @fj.function
    def predict(x):
        return fj.argmax(model(x), axis=1).astype(fj.int32)

    built = fj.export(predict, x_test, path=args.out, cpu=args.cpu)
    x_test.tofile(os.path.join(args.out, "test_x.f32"))
    y_test.tofile(os.path.join(args.out, "test_y.i32"))

    compiled = fj.load_compiled(built.manifest)
    labels = compiled(x_test)
    assert np.array_equal(labels, predict(x_test)), "the library and the JIT disagree"
    accuracy = float(np.mean(labels == y_test))
    print(f"wrote {built.library} ({os.path.getsize(built.library)} bytes) for {args.cpu}; "
          f"test accuracy {accuracy:.2%} from Python (fj.load_compiled), as the JIT")
    return {"test_accuracy": accuracy}


if __name__ == "__main__":
    main()
