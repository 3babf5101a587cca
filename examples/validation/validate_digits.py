"""Validation before a push, end to end on scikit-learn's digits (no download):

1. statistics of the training data and a schema inferred from them (``flowjit validate
   stats`` and ``schema``);
2. the clean held-out split passes; a corrupted batch (a pixel shifted by 3 standard
   deviations, 5% NaN in another, a pixel with two values per example, a label never seen)
   is caught, each fault with its feature and kind (``flowjit validate data``);
3. a softmax regression trained with flowjit, compiled (``fj.export``), validated against a
   threshold (``flowjit validate model``: canary process, accuracy, equivalence with the
   interpreter) and pushed as version 1 of ``MODELS/digits`` (``flowjit push``);
4. a better one validated against the served version and pushed as version 2;
5. a worse one (trained on 40 examples) refused: NOT_BLESSED, and push refuses it;
6. skew in production: each pushed model carries the schema of its input (``schema.json``,
   inferred with ``--manifest``), so ``flowjit serve`` checks every request against it and
   counts anomalies in ``flowjit_serving_anomalies_total``: clean requests count none, a
   shifted pixel and NaNs are counted by feature and kind, and the requests are served.

Run: ``python examples/validation/validate_digits.py [--out build/validation]``.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
from pathlib import Path
from typing import Any

import numpy as np

import flowjit as fj
from flowjit.cli import main as flowjit


def load_digits(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(x_train, y_train, x_heldout, y_heldout)``: pixels scaled to [0, 1], a fixed split."""
    from sklearn.datasets import load_digits as sklearn_digits
    d = sklearn_digits()
    x, y = (d.data / 16).astype(np.float32), d.target.astype(np.int64)
    order = np.random.default_rng(seed).permutation(len(y))
    train, held = order[:1300], order[1300:]
    return x[train], y[train], x[held], y[held]


def save_table(path: Path, x: np.ndarray, y: np.ndarray) -> Path:
    """The digits as a table of named features: pixel_0 ... pixel_63 and label."""
    np.savez(path, label=y, **{f"pixel_{i}": x[:, i] for i in range(x.shape[1])})
    return path


def train(x: np.ndarray, y: np.ndarray, steps: int, lr: float = 0.5) -> tuple[np.ndarray, np.ndarray]:
    """Softmax regression by full-batch gradient descent, each step one compiled program."""
    @fj.function
    def step(W, b, x, y):
        def loss(W, b):
            return fj.nn.softmax_cross_entropy(x @ W + b, y)
        gW, gb = fj.grad(loss, argnums=(0, 1))(W, b)
        return W - lr * gW, b - lr * gb

    W, b = np.zeros((x.shape[1], 10), np.float32), np.zeros(10, np.float32)
    for _ in range(steps):
        W, b = step(W, b, x, y)
    return np.asarray(W), np.asarray(b)


def compile_model(W: np.ndarray, b: np.ndarray, directory: Path) -> Path:
    """The model as a compiled artifact taking any batch of 64-pixel rows."""
    weights, bias = fj.Variable(W, name="W"), fj.Variable(b, name="b")

    def predict(x):
        return x @ weights + bias
    fj.export(predict, fj.ShapeDtype(("B", 64), np.float32), path=directory, name="digits")
    return directory


def add_schema(directory: Path, stats: Path) -> None:
    """Write the schema of the model's input into its artifact (``schema.json``, which
    ``flowjit push`` copies and ``flowjit serve`` checks requests against): inferred from
    the statistics of the training data, the input's name, type and shape from the manifest."""
    flowjit(["validate", "schema", str(stats), "--manifest", str(directory / "digits.json"),
             "-o", str(directory / "schema.json")])


def live_anomalies(models: Path, clean: np.ndarray, corrupted: np.ndarray, rows: int = 60) -> dict[str, Any]:
    """Serve ``models``, send ``clean`` then ``corrupted`` in requests of ``rows`` rows, and
    read the anomaly counters of /metrics after each: ``{"clean": {...}, "corrupted": {...}}``,
    each ``{"feature/kind": requests}``, and the statuses of the answers."""
    import urllib.request

    from flowjit.serving import Server

    def metrics(url: str) -> dict[str, float]:
        with urllib.request.urlopen(f"{url}/metrics") as r:
            text = r.read().decode()
        found = {}
        for labels, value in re.findall(r"^flowjit_serving_anomalies_total\{(.*)\} (\S+)$", text, re.M):
            named = dict(re.findall(r'(\w+)="([^"]*)"', labels))
            found[f"{named['feature']}/{named['kind']}"] = float(value)
        return found

    out: dict[str, Any] = {"statuses": set(), "requests": -(-len(corrupted) // rows)}
    with Server(models, poll_seconds=0.2) as server:
        for name, x in (("clean", clean), ("corrupted", corrupted)):
            for start in range(0, len(x), rows):
                body = json.dumps({"instances": x[start:start + rows].tolist()}).encode()
                req = urllib.request.Request(f"{server.url}/v1/models/digits:predict", data=body,
                                             headers={"Content-Type": "application/json"})
                with urllib.request.urlopen(req) as r:
                    out["statuses"].add(r.status)
            out[name] = metrics(server.url)
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the whole path; returns what each step found."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="build/validation", help="the directory to work in (emptied first)")
    args = p.parse_args(argv)
    out = Path(args.out)
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    x, y, xh, yh = load_digits()
    result: dict[str, Any] = {}

    print("== 1. statistics and schema of the training data")
    save_table(out / "train.npz", x, y)
    flowjit(["validate", "stats", str(out / "train.npz"), "-o", str(out / "stats.json")])
    flowjit(["validate", "schema", str(out / "stats.json"), "-o", str(out / "schema.json")])
    stats = json.loads((out / "stats.json").read_text())

    print("\n== 2. the held-out split, clean and corrupted")
    save_table(out / "heldout.npz", xh, yh)
    check = ["--schema", str(out / "schema.json"), "--baseline", str(out / "stats.json")]
    result["clean_status"] = flowjit(["validate", "data", str(out / "heldout.npz"), *check])
    bad = {f"pixel_{i}": xh[:, i].copy() for i in range(64)}
    bad["pixel_20"] += 3 * stats["features"]["pixel_20"]["std"]           # a shifted feature
    rng = np.random.default_rng(1)
    bad["pixel_30"][rng.random(len(yh)) < 0.05] = np.nan                  # 5% NaN
    bad["pixel_5"] = np.stack([bad["pixel_5"], bad["pixel_5"]], axis=1)    # a wrong shape
    labels = yh.copy()
    labels[:5] = 10                                                        # a label never seen
    np.savez(out / "corrupted.npz", label=labels, **bad)
    result["corrupted_status"] = flowjit(["validate", "data", str(out / "corrupted.npz"), *check])
    report = fj.validate.validate_data(out / "corrupted.npz", fj.validate.load_schema(out / "schema.json"), stats)
    result["caught"] = sorted({(a.feature, a.kind) for a in report.anomalies})

    print("\n== 3. a model trained, compiled, validated against a threshold, pushed")
    np.savez(out / "model_heldout.npz", x=xh, label=yh)
    np.savez(out / "model_train.npz", x=x, label=y)        # the model's view of the data: x, one row per example
    flowjit(["validate", "stats", str(out / "model_train.npz"), "-o", str(out / "model_stats.json")])
    held = ["--data", str(out / "model_heldout.npz")]
    models = out / "MODELS" / "digits"
    first = compile_model(*train(x, y, steps=40), out / "first")
    add_schema(first, out / "model_stats.json")
    result["first_status"] = flowjit(["validate", "model", str(first), *held, "--min", "0.85"])
    flowjit(["push", str(first), str(models)])

    print("\n== 4. a better model, against the served version")
    second = compile_model(*train(x, y, steps=300), out / "second")
    add_schema(second, out / "model_stats.json")
    result["second_status"] = flowjit(["validate", "model", str(second), *held, "--min", "0.85",
                                       "--baseline", str(models), "--max-drop", "0.01", "--slice", "label"])
    flowjit(["push", str(second), str(models)])

    print("\n== 5. a worse model (trained on 40 examples) is refused")
    worse = compile_model(*train(x[:40], y[:40], steps=300), out / "worse")
    result["worse_status"] = flowjit(["validate", "model", str(worse), *held, "--min", "0.9",
                                      "--baseline", str(models), "--max-drop", "0.01"])
    result["worse_push_status"] = flowjit(["push", str(worse), str(models)])
    result["versions"] = sorted(int(v.name) for v in models.iterdir() if v.name.isdigit())
    result["accuracy"] = {name: json.loads((out / name / "BLESSING.json").read_text())["metric"]["value"]
                          for name in ("first", "second", "worse")}
    print(f"\nserved versions: {result['versions']}; accuracy: "
          + ", ".join(f"{k} {v:.3f}" for k, v in result["accuracy"].items()))

    print("\n== 6. skew in production: live requests checked against the served version's schema")
    live_bad = xh.copy()
    live_bad[:, 20] += 3 * x[:, 20].std()                                  # the same faults, in live requests
    live_bad[rng.random(len(yh)) < 0.05, 30] = np.nan
    result["live"] = live_anomalies(out / "MODELS", xh, live_bad)
    for phase in ("clean", "corrupted"):
        counted = {k: v for k, v in result["live"][phase].items() if v} or "none"
        print(f"flowjit_serving_anomalies_total after the {phase} requests: {counted}")
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
