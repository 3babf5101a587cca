"""Skew in production: a served version that carries a schema (``schema.json``, copied by
``flowjit push``) has every request's inputs checked against it, and the anomalies counted
per feature and kind in /metrics; requests are served all the same. A version without a
schema counts nothing."""

from __future__ import annotations

import io
import json
import re
import shutil
import time

import numpy as np
import pytest

import flowjit as fj
from flowjit.cli import main
from flowjit.serving import Server, push
from flowjit.validate import infer_schema, statistics
from tests.serving.helpers import bless, export_mlp, get, npy, post

RNG = np.random.default_rng(3)
TRAIN_X = RNG.random((600, 8), dtype=np.float32)       # uniform [0, 1): the schema's range is [-0.5, 1.5]
TRAIN_PLAN = RNG.integers(0, 3, 600)


def export_scores(path):
    """A model of two inputs, x f32[B,8] and plan i64[B] (categorical: 0, 1 or 2)."""
    w = fj.Variable(np.random.default_rng(0).standard_normal((8, 3)).astype(np.float32), name="W")

    def predict(x, plan):
        return x @ w + plan[:, None].astype(np.float32)
    fj.export(predict, fj.ShapeDtype(("B", 8), "f32"), fj.ShapeDtype(("B",), "i64"), path=path, name="scores")
    return path


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory):
    """The scores model with the schema of its training data in ``schema.json``, and the MLP
    without a schema, both blessed."""
    root = tmp_path_factory.mktemp("skew")
    np.savez(root / "train.npz", x=TRAIN_X, plan=TRAIN_PLAN, label=RNG.integers(0, 2, 600))
    stats = statistics(root / "train.npz")
    scores = export_scores(root / "scores")
    manifest = json.loads((scores / "scores.json").read_text())
    (scores / "schema.json").write_text(json.dumps(infer_schema(stats, manifest), indent=2))
    bless(scores)
    plain = export_mlp(root / "plain", 1)
    bless(plain)
    return {"scores": scores, "plain": plain, "stats": stats, "root": root}


@pytest.fixture
def models(tmp_path, artifacts):
    push(artifacts["scores"], tmp_path / "models" / "scores", log=lambda s: None)
    push(artifacts["plain"], tmp_path / "models" / "plain", log=lambda s: None)
    return tmp_path / "models"


def _series(url):
    """``{(name, frozenset of label items): value}`` of the anomaly and checked series."""
    _, body = get(f"{url}/metrics")
    found = {}
    for line in body.decode().splitlines():
        m = re.match(r"(flowjit_serving_(?:anomalies|checked_requests)_total)\{(.*)\} (\S+)$", line)
        if m:
            labels = frozenset(re.findall(r'(\w+)="([^"]*)"', m.group(2)))
            found[(m.group(1), labels)] = float(m.group(3))
    return found


def _anomalies(url, model="scores"):
    """``{(feature, kind): count}`` of ``model``'s version 1."""
    out = {}
    for (name, labels), value in _series(url).items():
        d = dict(labels)
        if name == "flowjit_serving_anomalies_total" and d["model"] == model:
            assert d["version"] == "1"
            out[(d["feature"], d["kind"])] = value
    return out


def _checked(url, model="scores"):
    return sum(v for (name, labels), v in _series(url).items()
               if name == "flowjit_serving_checked_requests_total" and dict(labels)["model"] == model)


def _instances(x, plan):
    return {"instances": [{"x": row, "plan": p} for row, p in zip(x.tolist(), plan.tolist())]}


def _npz(**arrays):
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def test_live_requests_are_checked_and_anomalies_counted_by_feature_and_kind(models):
    with Server(models, poll_seconds=0.1) as server:
        url = f"{server.url}/v1/models/scores:predict"
        zero = {("x", "nan"): 0, ("x", "inf"): 0, ("x", "out_of_range"): 0, ("plan", "new_value"): 0}
        assert _anomalies(server.url) == zero and _checked(server.url) == 0   # what is checked, before any request
        x, plan = RNG.random((5, 8), dtype=np.float32), RNG.integers(0, 3, 5)
        for body, ctype in [(_instances(x, plan), "application/json"),
                            ({"inputs": {"x": x.tolist(), "plan": plan.tolist()}}, "application/json"),
                            (_npz(x=x, plan=plan), "application/x-npz")]:
            status, _, answer = post(url, body, ctype)
            assert status == 200, answer
        assert _anomalies(server.url) == zero and _checked(server.url) == 3

        shifted = x.copy()
        shifted[:, 3] += 3 * TRAIN_X[:, 3].std()                      # a feature shifted by 3 std
        nan = x.copy()
        nan[[0, 2, 4], 6] = np.nan                                    # 3 NaNs in one request: counted once
        inf = x.copy()
        inf[1, 1] = np.inf
        new = plan.copy()
        new[2] = 7                                                    # a plan never seen
        sent = [(_instances(shifted, plan), "application/json"), (_instances(nan, plan), "application/json"),
                (_npz(x=nan, plan=new), "application/x-npz"), (_instances(inf, plan), "application/json")]
        for body, ctype in sent:
            status, headers, answer = post(url, body, ctype)
            assert status == 200 and headers["X-Model-Version"] == "1", answer    # counted, not refused
        assert _anomalies(server.url) == {("x", "nan"): 2, ("x", "inf"): 1, ("x", "out_of_range"): 1,
                                          ("plan", "new_value"): 1}
        assert _checked(server.url) == 7

        # what the server refuses as bad input is refused as before, and not checked
        status, _, _ = post(url, {"instances": [{"x": [0.5] * 7, "plan": 1}]})
        assert status == 400 and _checked(server.url) == 7

        # the version without a schema is served and has no anomaly series at all
        status, _, _ = post(f"{server.url}/v1/models/plain:predict", {"instances": [[np.nan] * 64]})
        assert status == 200
        assert _anomalies(server.url, "plain") == {} and _checked(server.url, "plain") == 0
        assert not [k for k in _series(server.url) if ("model", "plain") in k[1]]


def test_push_refuses_a_schema_that_does_not_fit_the_model(tmp_path, artifacts, capsys):
    artifact = tmp_path / "scores"
    shutil.copytree(artifacts["scores"], artifact)
    schema = json.loads((artifact / "schema.json").read_text())
    schema["features"] = [f for f in schema["features"] if f["name"] != "plan"]
    (artifact / "schema.json").write_text(json.dumps(schema))
    target = tmp_path / "models" / "scores"
    assert main(["push", str(artifact), str(target), "--force"]) == 2
    err = capsys.readouterr().err
    assert f"{artifact}/schema.json" in err and "no feature 'plan'" in err and "--manifest" in err
    (artifact / "schema.json").write_text("{not json")
    assert main(["push", str(artifact), str(target)]) == 2
    assert "not valid JSON" in capsys.readouterr().err
    assert not target.exists() or not any(target.iterdir())


def test_a_version_whose_schema_broke_after_its_push_is_refused_and_the_old_one_serves(models, artifacts):
    with Server(models, poll_seconds=0.05) as server:
        broken = models / "scores" / ".broken"
        shutil.copytree(models / "scores" / "1", broken)
        (broken / "schema.json").write_text(json.dumps({"format": "flowjit-schema-1", "features": []}))
        broken.rename(models / "scores" / "2")       # edited by hand: its READY still names its manifest
        deadline = time.monotonic() + 20
        while 'flowjit_serving_version_refusals_total{model="scores"} 1.0' not in get(f"{server.url}/metrics")[1] \
                .decode():
            assert time.monotonic() < deadline, "version 2 was not refused"
            time.sleep(0.05)
        status, headers, _ = post(f"{server.url}/v1/models/scores:predict",
                                  _instances(TRAIN_X[:2], TRAIN_PLAN[:2]))
        assert status == 200 and headers["X-Model-Version"] == "1"


def test_a_binary_request_of_many_rows_is_checked_whole(models):
    with Server(models, poll_seconds=0.1) as server:
        x = RNG.random((64, 8), dtype=np.float32)
        x[63, 0] = 40.0
        status, _, _ = post(f"{server.url}/v1/models/plain:predict", npy(RNG.random((64, 64), dtype=np.float32)),
                            "application/x-npy")
        assert status == 200
        status, _, _ = post(f"{server.url}/v1/models/scores:predict", _npz(x=x, plan=RNG.integers(0, 3, 64)),
                            "application/x-npz")
        assert status == 200 and _anomalies(server.url)[("x", "out_of_range")] == 1
