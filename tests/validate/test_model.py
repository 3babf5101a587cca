"""flowjit validate model on real compiled artifacts: a good model blessed, one below the
threshold or worse than the baseline refused, a library that crashes in the canary, one
whose answers differ from the interpreter's, model repository versions, and bad input."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess

import numpy as np
import pytest

import flowjit as fj
from flowjit.cli import main
from flowjit.validate import BLESSING, ValidateError, get_metric, infer_schema, statistics, validate_model


def _export(directory, W, b, scale=1.0):
    Wv, bv = fj.Variable(W, name="W"), fj.Variable(b, name="b")

    def predict(x):
        return x @ Wv + bv * scale
    fj.export(predict, fj.ShapeDtype(("B", 64), np.float32), path=directory, name="digits")
    return directory


def _fit(X, y):
    from sklearn.linear_model import LogisticRegression
    clf = LogisticRegression(max_iter=300).fit(X, y)
    return clf.coef_.T.astype(np.float32), clf.intercept_.astype(np.float32)


def _set_manifest(directory, **changes):
    path = directory / "digits.json"
    m = json.loads(path.read_text())
    m.update(changes)
    path.write_text(json.dumps(m, indent=2))


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """Held-out digits and compiled models: good, worse (trained on 40 examples), one whose
    library aborts, one whose library computes something else than its IR."""
    from sklearn.datasets import load_digits
    d = load_digits()
    X, y = (d.data / 16).astype(np.float32), d.target.astype(np.int64)
    order = np.random.default_rng(0).permutation(len(y))
    tr, te = order[:1200], order[1200:]
    root = tmp_path_factory.mktemp("models")
    np.savez(root / "heldout.npz", x=X[te], label=y[te])
    W, b = _fit(X[tr], y[tr])
    good = _export(root / "good", W, b)
    worse = _export(root / "worse", *_fit(X[tr][:40], y[tr][:40]))
    # A library computing x @ W + 1.5 b, kept with the IR of x @ W + b: a miscompile.
    differs = _export(root / "differs", W, b, scale=1.5)
    ir = (good / "digits.ir").read_text()
    (differs / "digits.ir").write_text(ir)
    _set_manifest(differs, ir={**json.loads((differs / "digits.json").read_text())["ir"],
                               "sha256": hashlib.sha256(ir.encode()).hexdigest()})
    # A library whose entry aborts the process, and one whose entry never returns (their
    # digests match, so they load).
    crash = _planted(good, root / "crash", "abort();")
    hang = _planted(good, root / "hang", "for (;;) pause();")
    return {"root": root, "data": root / "heldout.npz", "good": good, "worse": worse, "differs": differs,
            "crash": crash, "hang": hang, "W": W, "b": b}


def _planted(good, directory, body):
    """A copy of the artifact ``good`` whose library's entry runs the C statement ``body``."""
    shutil.copytree(good, directory)
    digest = json.loads((directory / "digits.json").read_text())["digest"]
    source = directory.parent / f"{directory.name}.c"
    source.write_text('#include <stdint.h>\n#include <stdlib.h>\n#include <unistd.h>\n'
                      f'const char digits_digest[65] = "{digest}";\n'
                      f'int32_t digits(const void *in, void *out, void *scratch, int64_t n) {{ {body} return 0; }}\n')
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(directory / "libdigits.so"), str(source)], check=True)
    _set_manifest(directory, library_sha256=hashlib.sha256((directory / "libdigits.so").read_bytes()).hexdigest())
    return directory


_NO_BLESSING = shutil.ignore_patterns(BLESSING)


def _blessing(directory):
    return json.loads((directory / BLESSING).read_text())


def _failed(report):
    return {c.name for c in report.checks if not c.passed}


def test_a_good_model_is_blessed_with_the_manifest_digest(models, capsys):
    good = models["good"]
    assert main(["validate", "model", str(good), "--data", str(models["data"]), "--metric", "accuracy",
                 "--min", "0.95", "--slice", "label", "--min", "0.9"]) == 0
    out = capsys.readouterr().out
    assert "BLESSED" in out and "equivalence" in out
    blessing = _blessing(good)
    assert blessing["verdict"] == "BLESSED"
    assert blessing["digest"] == json.loads((good / "digits.json").read_text())["digest"]
    assert {c["name"] for c in blessing["checks"]} >= {"canary", "finite_outputs", "threshold", "equivalence",
                                                        "threshold[label=3]"}
    assert all(c["passed"] for c in blessing["checks"]) and blessing["metric"]["value"] > 0.95
    assert blessing["created"].endswith("+00:00") and len(blessing["slices"]) == 10


def test_below_the_threshold_is_not_blessed_with_the_reason(models, capsys):
    worse = models["worse"]
    assert main(["validate", "model", str(worse), "--data", str(models["data"]), "--min", "0.95", "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["verdict"] == "NOT_BLESSED"
    blessing = _blessing(worse)
    assert blessing["verdict"] == "NOT_BLESSED"
    failed = [c for c in blessing["checks"] if not c["passed"]]
    assert [c["name"] for c in failed] == ["threshold"] and "at least 0.95" in failed[0]["detail"]


def test_worse_than_the_baseline_by_more_than_max_drop_is_not_blessed(models):
    report = validate_model(models["worse"], models["data"], baseline=models["good"], max_drop=0.01)
    assert report.verdict == "NOT_BLESSED" and _failed(report) == {"baseline"}
    detail = next(c.detail for c in report.checks if c.name == "baseline")
    assert "against the baseline's" in detail and "worse by" in detail
    assert report.metric["baseline_value"] > report.metric["value"]
    # The good one against itself as the served version: no worse, blessed.
    again = validate_model(models["good"], models["data"], baseline=models["good"], max_drop=0.01, minimum=0.95)
    assert again.blessed, again.table()
    assert _blessing(models["good"])["baseline"]["digest"] == _blessing(models["good"])["digest"]


def test_a_library_that_crashes_in_the_canary_is_refused_and_the_validator_survives(models):
    report = validate_model(models["crash"], models["data"], minimum=0.9)
    assert report.verdict == "NOT_BLESSED"
    canary = next(c for c in report.checks if c.name == "canary")
    assert not canary.passed and "SIGABRT" in canary.detail
    assert _blessing(models["crash"])["verdict"] == "NOT_BLESSED"


def test_a_library_that_differs_from_the_interpreter_is_refused(models):
    report = validate_model(models["differs"], models["data"])
    assert "equivalence" in _failed(report)
    detail = next(c.detail for c in report.checks if c.name == "equivalence")
    assert "differs from the interpreter's" in detail
    # A tolerance wide enough to accept a difference of 1.5 b - b accepts it: the check measures.
    loose = validate_model(models["differs"], models["data"], atol=10.0, write=False)
    assert "equivalence" not in _failed(loose)


def test_model_repository_versions_as_candidate_and_baseline(models, tmp_path):
    repo = tmp_path / "MODELS" / "digits"
    shutil.copytree(models["good"], repo / "1", ignore=_NO_BLESSING)
    shutil.copytree(models["worse"], repo / "2-staging")   # not a version number: ignored
    candidate = tmp_path / "candidate"
    shutil.copytree(models["good"], candidate, ignore=_NO_BLESSING)
    report = validate_model(candidate, models["data"], baseline=repo, max_drop=0.0)
    assert report.blessed and report.baseline is not None and report.baseline.directory == repo / "1"
    report = validate_model(repo / "1", models["data"], minimum=0.5)
    assert report.blessed and (repo / "1" / BLESSING).is_file()


def test_metrics():
    labels = np.array([0, 1, 1, 0])
    scores = np.array([0.1, 0.8, 0.25, 0.3])
    assert get_metric("accuracy").compute(scores, labels) == 0.75
    assert get_metric("auc").compute(scores, labels) == 0.75
    probs = np.stack([1 - scores, scores], axis=1)
    expected = -np.mean(np.log([0.9, 0.8, 0.25, 0.7]))
    assert get_metric("log_loss").compute(probs, labels) == pytest.approx(expected)
    assert get_metric("log_loss").compute(np.log(probs), labels) == pytest.approx(expected)  # logits
    assert get_metric("mse").compute(scores, labels.astype(float)) == pytest.approx(np.mean((scores - labels) ** 2))
    assert get_metric("mae").compute(scores[:, None], labels) == pytest.approx(np.mean(np.abs(scores - labels)))
    with pytest.raises(ValidateError, match="auc applies to binary"):
        get_metric("auc").compute(np.zeros((4, 3)), np.array([0, 1, 2, 0]))


def test_a_user_metric(models, tmp_path):
    (tmp_path / "mine.py").write_text("import numpy as np\n"
                                      "def top2(outputs, labels):\n"
                                      "    best = np.argsort(outputs, axis=1)[:, -2:]\n"
                                      "    return float((best == labels[:, None]).any(axis=1).mean())\n")
    report = validate_model(models["good"], models["data"], metric=f"{tmp_path / 'mine.py'}:top2", minimum=0.97,
                            write=False)
    assert report.blessed and report.metric["name"] == "top2" and report.metric["value"] >= 0.97


def test_bad_input_exits_2_and_writes_nothing(models, tmp_path, capsys):
    data = str(models["data"])
    not_model = tmp_path / "empty"
    not_model.mkdir()
    assert main(["validate", "model", str(not_model), "--data", data]) == 2
    assert "is not a compiled model" in capsys.readouterr().err
    candidate = tmp_path / "candidate"
    shutil.copytree(models["good"], candidate, ignore=_NO_BLESSING)
    for argv, needle in [
        (["--data", data, "--metric", "mse", "--max", "1"], "mse compares outputs with labels of the same shape"),
        (["--data", data, "--metric", "accuracy", "--max", "1"], "give --min"),
        (["--data", data, "--metric", "nope"], "unknown metric 'nope'"),
        (["--data", data, "--slice", "colour"], "no feature 'colour'"),
        (["--data", str(tmp_path / "missing.npz")], "no such file"),
    ]:
        assert main(["validate", "model", str(candidate), *argv]) == 2, argv
        err = capsys.readouterr().err
        assert needle in err, err
        assert not (candidate / BLESSING).exists()
    np.savez(tmp_path / "renamed.npz", pixels=np.zeros((4, 64), np.float32), label=np.zeros(4, np.int64))
    assert main(["validate", "model", str(candidate), "--data", str(tmp_path / "renamed.npz")]) == 2
    assert "no feature 'x', which the model digits takes" in capsys.readouterr().err
    assert not (candidate / BLESSING).exists()


def test_a_manifest_seeds_the_schema(models, tmp_path):
    np.savez(tmp_path / "train.npz", x=np.random.default_rng(0).random((50, 64), np.float32),
             label=np.arange(50) % 10)
    manifest = json.loads((models["good"] / "digits.json").read_text())
    schema = infer_schema(statistics(tmp_path / "train.npz"), manifest)
    x = next(f for f in schema["features"] if f["name"] == "x")
    assert x["shape"] == [64] and x["type"] == "float"


def test_validate_then_push_end_to_end(models, tmp_path, capsys):
    # flowjit push (the serving issue's) publishes only what flowjit validate blessed.
    repo = tmp_path / "MODELS" / "digits"
    data = str(models["data"])
    good, worse = tmp_path / "good", tmp_path / "worse"
    shutil.copytree(models["good"], good, ignore=_NO_BLESSING)
    shutil.copytree(models["worse"], worse, ignore=_NO_BLESSING)
    assert main(["push", str(good), str(repo)]) == 2          # not validated yet
    assert "BLESSING.json" in capsys.readouterr().err
    assert main(["validate", "model", str(good), "--data", data, "--min", "0.95"]) == 0
    assert main(["push", str(good), str(repo)]) == 0
    assert (repo / "1" / "READY").is_file() and (repo / "1" / "digits.ir").is_file()
    # The worse one against the served version: refused, and push refuses it.
    assert main(["validate", "model", str(worse), "--data", data, "--min", "0.5", "--baseline", str(repo),
                 "--max-drop", "0.01"]) == 1
    assert "FAIL  baseline" in capsys.readouterr().out
    assert main(["push", str(worse), str(repo)]) == 2
    assert "NOT_BLESSED" in capsys.readouterr().err
    assert sorted(p.name for p in repo.iterdir()) == ["1"]
    # One no worse than the served version is blessed and pushed as version 2.
    better = tmp_path / "better"
    shutil.copytree(models["good"], better, ignore=_NO_BLESSING)
    assert main(["validate", "model", str(better), "--data", data, "--min", "0.95", "--baseline", str(repo),
                 "--max-drop", "0.01"]) == 0
    assert main(["push", str(better), str(repo)]) == 0
    assert (repo / "2" / "READY").is_file()


def test_a_library_that_hangs_is_refused_at_the_timeout(models):
    report = validate_model(models["hang"], models["data"], timeout=3, write=False)
    canary = next(c for c in report.checks if c.name == "canary")
    assert not canary.passed and "did not finish within 3 s" in canary.detail


def test_nan_outputs_and_a_slow_candidate_fail_their_checks(models, tmp_path):
    W = fj.Variable(models["W"], name="W")

    def predict(x):
        return fj.log(x @ W - 1e6)        # NaN everywhere
    fj.export(predict, fj.ShapeDtype(("B", 64), np.float32), path=tmp_path / "nan", name="digits")
    report = validate_model(tmp_path / "nan", models["data"], baseline=models["good"], max_latency_ratio=0.0,
                            latency_slack_s=0.0, write=False)
    failed = _failed(report)
    assert {"finite_outputs", "latency"} <= failed and "equivalence" not in failed
    assert "hold NaN or Inf" in next(c.detail for c in report.checks if c.name == "finite_outputs")


def test_a_frozen_library_of_one_batch_size(models, tmp_path):
    # Variables compiled in (their values kept beside the IR for the interpreter) and a
    # library taking exactly 100 examples: the canary pads the last batch.
    W, b = fj.Variable(models["W"], name="W"), fj.Variable(models["b"], name="b")

    def predict(x):
        return fj.tanh(x @ W + b)
    fj.export(predict, np.zeros((100, 64), np.float32), path=tmp_path / "frozen", name="digits", freeze=True)
    assert (tmp_path / "frozen" / "digits.ir.safetensors").is_file()
    report = validate_model(tmp_path / "frozen", models["data"], minimum=0.9, rtol=1e-5, atol=1e-6)
    assert report.blessed, report.table()
    assert "on 100 examples" in next(c.detail for c in report.checks if c.name == "equivalence")
