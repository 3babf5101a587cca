"""Serve the digits MLP: train it, compile it with a symbolic batch dimension, publish it
into a model repository, serve it over HTTP, send predictions, push a second version under
load without a failed request, and read the server's metrics.

    python examples/serving/serve_digits.py [--epochs 3] [--seconds 4] [--out build/serving]

The same from a shell (after the script wrote build/serving/v1):

    flowjit push --force build/serving/v1 build/serving/models/digits   # --force: no BLESSING.json
    flowjit serve build/serving/models --port 8500
    flowjit loadtest http://127.0.0.1:8500 --model digits --concurrency 1,8,32 --seconds 5
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import threading
import urllib.request

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))   # examples/ for these two
from digits import batches, load  # noqa: E402
from mnist_mlp import build_model, classifier_steps  # noqa: E402

import flowjit as fj  # noqa: E402
from flowjit.serving import Server, push  # noqa: E402
from flowjit.serving.loadtest import run_level  # noqa: E402


def train_and_export(epochs: int, seed: int, out: str) -> str:
    """Train the 64-128-128-10 MLP for ``epochs`` and export its softmax for f32[B,64] into
    ``out`` (one library for every batch size)."""
    x_train, y_train, _, _ = load()
    model = build_model(seed)
    train_step, _ = classifier_steps(model, fj.optim.Adam(2e-3))
    rng = np.random.default_rng(seed)
    for _ in range(epochs):
        for x, y in batches(x_train, y_train, 64, rng):
            train_step(x, y)

    def predict(x):
        return fj.nn.softmax(model(x), axis=-1)
    fj.export(predict, fj.ShapeDtype(("B", 64), "f32"), path=out, name="digits")
    return out


def post(url: str, body: dict) -> tuple[str, dict]:
    """POST JSON; the answering version and the decoded body."""
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req) as r:
        return r.headers["X-Model-Version"], json.load(r)


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=4.0, help="seconds of load around the second push")
    parser.add_argument("--out", default="build/serving")
    args = parser.parse_args(argv)

    shutil.rmtree(args.out, ignore_errors=True)
    models = os.path.join(args.out, "models")
    v1 = train_and_export(args.epochs, 0, os.path.join(args.out, "v1"))
    # No BLESSING.json here: `flowjit validate` writes one; --force pushes without it.
    push(v1, os.path.join(models, "digits"), force=True)
    _, _, x_test, y_test = load()

    with Server(models, max_batch_size=64, poll_seconds=0.2) as server:
        print(f"serving {models} on {server.url}")
        version, answer = post(f"{server.url}/v1/models/digits:predict", {"instances": x_test.tolist()})
        accuracy = float(np.mean(np.argmax(answer["predictions"], axis=1) == y_test))
        print(f"version {version}: test accuracy {accuracy:.2%} over {len(x_test)} instances in one request")

        # Push version 2 (trained longer) while 16 clients keep requests outstanding.
        v2 = train_and_export(args.epochs + 2, 1, os.path.join(args.out, "v2"))
        body = json.dumps({"instances": x_test[:4].tolist()}).encode()
        timer = threading.Timer(args.seconds / 2, push, args=(v2, os.path.join(models, "digits")),
                                kwargs={"force": True})
        timer.start()
        load_result = run_level(server.url, "digits", 16, args.seconds, body)
        timer.join()
        print(f"under load: {load_result['ok']} answers, {load_result['failed']} failed, versions "
              f"{load_result['versions']}, {load_result['throughput']:.0f} req/s, p99 {load_result['p99']:.1f} ms")
        version, answer = post(f"{server.url}/v1/models/digits:predict", {"instances": x_test.tolist()})
        accuracy2 = float(np.mean(np.argmax(answer["predictions"], axis=1) == y_test))
        print(f"version {version}: test accuracy {accuracy2:.2%}")

        with urllib.request.urlopen(f"{server.url}/metrics") as r:
            metrics = r.read().decode()
        for line in metrics.splitlines():
            if line.startswith(("flowjit_serving_requests_total", "flowjit_serving_batch_size_sum",
                                "flowjit_serving_batch_size_count", "flowjit_serving_reloads_total",
                                "flowjit_serving_version{")):
                print("  " + line)
    return {"test_accuracy": accuracy, "test_accuracy_v2": accuracy2, "failed": load_result["failed"],
            "versions": len(load_result["versions"])}


if __name__ == "__main__":
    main()
