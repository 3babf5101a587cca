"""flowjit.validate.live: the schema's checks on one request's arrays are the data
validator's own, and a schema that does not fit the model's inputs is refused."""

from __future__ import annotations

import json

import numpy as np
import pytest

from flowjit.validate import LiveCheck, ValidateError, infer_schema, statistics, validate_data
from flowjit.validate.live import summarize

INPUTS = [("x", "float32", [8]), ("plan", "int64", [])]


@pytest.fixture(scope="module")
def schema(tmp_path_factory):
    rng = np.random.default_rng(0)
    path = tmp_path_factory.mktemp("live") / "train.npz"
    np.savez(path, x=rng.random((500, 8), dtype=np.float32), plan=rng.integers(0, 3, 500),
             label=rng.integers(0, 2, 500))
    return infer_schema(statistics(path))


def _batch(rows=16, seed=1):
    rng = np.random.default_rng(seed)
    return {"x": rng.random((rows, 8), dtype=np.float32), "plan": rng.integers(0, 3, rows)}


@pytest.mark.parametrize("fault, expected", [
    ("clean", set()),
    ("shift", {("x", "out_of_range")}),
    ("nan", {("x", "nan")}),
    ("inf", {("x", "inf")}),                      # the range is of the finite values
    ("new_value", {("plan", "new_value")}),
    ("both", {("x", "nan"), ("plan", "new_value")}),
])
def test_a_request_shows_what_validate_data_shows_of_the_same_rows(schema, tmp_path, fault, expected):
    batch = _batch()
    if fault == "shift":
        batch["x"][:, 3] += 3 * 0.29          # 3 standard deviations of a uniform [0, 1) feature
    if fault in ("nan", "both"):
        batch["x"][2, 5] = np.nan
    if fault == "inf":
        batch["x"][0, 0] = -np.inf
    if fault in ("new_value", "both"):
        batch["plan"][4] = 7
    found = LiveCheck(schema, INPUTS, "the schema").check([batch["x"], batch["plan"]])
    assert {(a.feature, a.kind) for a in found} == expected
    np.savez(tmp_path / "batch.npz", label=np.zeros(16, np.int64), **batch)
    report = validate_data(tmp_path / "batch.npz", schema)
    assert [a for a in report.anomalies if a.kind != "drift"] == found


def test_the_summary_agrees_with_the_statistics(tmp_path):
    x = np.random.default_rng(2).normal(size=(40, 3)).astype(np.float32)
    x[1, 1], x[2, 2], x[3, 0] = np.nan, np.inf, np.nan
    np.savez(tmp_path / "x.npz", x=x)
    full = statistics(tmp_path / "x.npz")["features"]["x"]
    s = summarize(x, "float", False)
    for key in ("shape", "examples", "values", "missing", "inf", "min", "max"):
        assert s[key] == full[key], key
    k = np.array([3, 1, 3, 3])
    assert summarize(k, "int", True)["value_counts"] == [(1, 1), (3, 3)]
    assert "min" not in summarize(np.full((2, 2), np.nan, np.float32), "float", False)


def test_the_checks_cover_the_inputs_alone_and_say_what_they_look_for(schema):
    check = LiveCheck(schema, INPUTS, "the schema")
    assert check.series() == [("x", "nan"), ("x", "inf"), ("x", "out_of_range"), ("plan", "new_value")]
    loose = json.loads(json.dumps(schema))
    for f in loose["features"]:
        f.pop("domain", None)
        f["nan"] = f["inf"] = True
    assert LiveCheck(loose, INPUTS, "the schema").series() == []


@pytest.mark.parametrize("inputs, words", [
    ([("x", "float32", [8]), ("age", "float32", [])], ["no feature 'age'", '{"name": "age", "type": "float"']),
    ([("x", "int32", [8]), ("plan", "int64", [])], ["'x' is float[8]", "int32[8]", '"type": "int"']),
    ([("x", "float32", [9]), ("plan", "int64", [])], ["'x' is float[8]", "float32[9]", '"shape": [9]']),
])
def test_a_schema_that_does_not_fit_the_inputs_is_refused(schema, inputs, words):
    with pytest.raises(ValidateError) as e:
        LiveCheck(schema, inputs, "the schema models/m/1/schema.json")
    for w in ["models/m/1/schema.json", *words]:
        assert w in str(e.value)


def test_a_schema_file_that_does_not_parse_is_refused_naming_it(tmp_path):
    path = tmp_path / "schema.json"
    path.write_text("{not json")
    with pytest.raises(ValidateError, match=f"{path} is not valid JSON"):
        LiveCheck.from_file(path, INPUTS)


@pytest.mark.parametrize("domain, values, new", [
    ([0, 1, 2], [0, 2, 1], False),
    ([0, 1, 2], [0, 3], True),           # past the max of a domain of every integer between
    ([0, 5, 9], [0, 9, 5], False),
    ([0, 5, 9], [0, 3, 9], True),        # inside a sparse domain's range, not in it
    ([False, True], [True, False], False),
])
def test_a_new_categorical_value_is_caught_in_a_dense_or_a_sparse_domain(domain, values, new):
    kind = "bool" if isinstance(domain[0], bool) else "int"
    schema = {"format": "flowjit-schema-1", "features": [
        {"name": "k", "type": kind, "shape": [], "kind": "categorical", "domain": {"values": domain}}]}
    found = LiveCheck(schema, [("k", "bool" if kind == "bool" else "int32", [])], "s").check(
        [np.array(values, bool if kind == "bool" else np.int32)])
    assert [(a.feature, a.kind) for a in found] == ([("k", "new_value")] if new else [])
