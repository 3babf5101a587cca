"""flowjit validate stats | schema | data on real files: the digits data with planted
faults, every dataset format, bad input, and statistics in bounded memory."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import flowjit as fj
from flowjit.cli import main
from flowjit.validate import ValidateError, infer_schema, load_schema, statistics, validate_data

FAULTY = "pixel_20"


def _save(path, X, y, **extra):
    cols = {f"pixel_{i}": X[:, i] for i in range(X.shape[1])}
    cols["label"] = y
    cols.update(extra)
    np.savez(path, **cols)
    return path


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    """The digits data as a table of 64 pixel features and a label: a training split, a
    clean held-out split, and the held-out split with each planted fault."""
    from sklearn.datasets import load_digits
    d = load_digits()
    X, y = d.data.astype(np.float32), d.target.astype(np.int64)
    order = np.random.default_rng(0).permutation(len(y))
    tr, te = order[:1200], order[1200:]
    root = tmp_path_factory.mktemp("digits")
    files = {"train": _save(root / "train.npz", X[tr], y[tr]), "clean": _save(root / "clean.npz", X[te], y[te])}
    stats = statistics(files["train"])
    rng = np.random.default_rng(1)
    shifted = X[te].copy()
    shifted[:, 20] += 3 * stats["features"][FAULTY]["std"]
    files["shift"] = _save(root / "shift.npz", shifted, y[te])
    nan = X[te].copy()
    nan[rng.random(len(te)) < 0.05, 30] = np.nan
    files["nan"] = _save(root / "nan.npz", nan, y[te])
    wide = {f"pixel_{i}": X[te][:, i] for i in range(64)}
    wide["pixel_5"] = np.stack([X[te][:, 5]] * 2, axis=1)   # one value per example became two
    np.savez(root / "shape.npz", label=y[te], **wide)
    files["shape"] = root / "shape.npz"
    labels = y[te].copy()
    labels[rng.random(len(te)) < 0.05] = 10
    files["new_value"] = _save(root / "new_value.npz", X[te], labels)
    return root, files, stats, infer_schema(stats)


def _found(report):
    return {(a.feature, a.kind) for a in report.anomalies}


def test_the_clean_split_reports_nothing(digits):
    _, files, stats, schema = digits
    report = validate_data(files["clean"], schema, stats)
    assert report.ok, report.table()
    assert max(report.drift.values()) < 0.1


@pytest.mark.parametrize("fault, expected", [
    ("shift", {(FAULTY, "drift"), (FAULTY, "out_of_range")}),
    ("nan", {("pixel_30", "nan")}),
    ("shape", {("pixel_5", "shape")}),
    ("new_value", {("label", "new_value")}),
])
def test_each_planted_fault_is_reported_with_its_feature_and_kind(digits, fault, expected):
    _, files, stats, schema = digits
    report = validate_data(files[fault], schema, stats)
    assert _found(report) == expected, report.table()
    for a in report.anomalies:
        assert a.fix and a.expected and a.seen


def test_statistics_of_the_digits(digits):
    _, _, stats, schema = digits
    s = stats["features"]["pixel_20"]
    assert stats["examples"] == 1200 and s["examples"] == 1200 and s["missing"] == 0
    assert s["min"] == 0 and s["max"] == 16 and sum(s["histogram"]["counts"]) == 1200
    assert s["quantiles"]["0.01"] <= s["quantiles"]["0.5"] <= s["quantiles"]["0.99"]
    label = stats["features"]["label"]
    assert label["distinct"] == 10 and sum(c for _, c in label["value_counts"]) == 1200
    by_name = {f["name"]: f for f in schema["features"]}
    assert by_name["label"]["kind"] == "categorical" and by_name["label"]["domain"]["values"] == list(range(10))
    assert by_name["pixel_20"]["kind"] == "numeric" and by_name["pixel_20"]["nan"] is False


def test_the_command_line_writes_stats_and_schema_and_exits_1_on_anomalies(digits, tmp_path, capsys):
    _, files, _, _ = digits
    stats, schema = tmp_path / "stats.json", tmp_path / "schema.json"
    assert main(["validate", "stats", str(files["train"]), "-o", str(stats)]) == 0
    assert main(["validate", "schema", str(stats), "-o", str(schema)]) == 0
    assert load_schema(schema)["features"][0]["name"] == "pixel_0"
    assert main(["validate", "data", str(files["clean"]), "--schema", str(schema), "--baseline", str(stats)]) == 0
    assert "no anomalies" in capsys.readouterr().out
    assert main(["validate", "data", str(files["shift"]), "--schema", str(schema), "--baseline", str(stats),
                 "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["anomalous"] and {a["feature"] for a in report["anomalies"]} == {FAULTY}
    assert main(["validate", "data", str(files["nan"]), "--schema", str(schema)]) == 1
    out = capsys.readouterr().out
    assert "pixel_30" in out and "nan" in out and '"nan": true' in out


def test_every_format_gives_the_same_statistics(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.csv  # noqa: F401 (pa.csv)
    import pyarrow.parquet  # noqa: F401 (pa.parquet)
    rng = np.random.default_rng(0)
    n = 500
    x = rng.normal(size=n)
    x[::50] = np.nan
    k = rng.integers(0, 4, n)
    colour = np.array(["red", "green", "blue"])[rng.integers(0, 3, n)]
    table = pa.table({"x": x, "k": k, "colour": colour})
    pa.parquet.write_table(table, tmp_path / "t.parquet", row_group_size=100)
    pa.csv.write_csv(table, tmp_path / "t.csv")
    (tmp_path / "folder").mkdir()
    np.save(tmp_path / "folder" / "x.npy", x)
    np.save(tmp_path / "folder" / "k.npy", k)
    np.save(tmp_path / "folder" / "colour.npy", colour)
    np.savez_compressed(tmp_path / "t.npz", x=x, k=k, colour=colour)
    found = [statistics(tmp_path / p, chunk_bytes=2000) for p in ("t.parquet", "t.csv", "folder", "t.npz")]
    for s in found:
        f = s["features"]
        assert s["examples"] == n
        assert f["x"]["missing"] == 10 and f["x"]["mean"] == pytest.approx(np.nanmean(x))
        assert f["x"]["std"] == pytest.approx(np.nanstd(x)) and f["x"]["min"] == np.nanmin(x)
        assert f["k"]["distinct"] == 4 and f["colour"]["distinct"] == 3 and f["colour"]["kind"] == "string"
        assert dict(map(tuple, f["colour"]["value_counts"])) == dict(zip(*np.unique(colour, return_counts=True)))
    schema = infer_schema(found[0])
    assert {f["name"]: f["kind"] for f in schema["features"]} == {"x": "numeric", "k": "categorical",
                                                                  "colour": "categorical"}
    other = tmp_path / "other.csv"
    other.write_text("x,k,colour\n0.5,1,red\n0.1,2,purple\n")
    report = validate_data(other, schema)
    assert _found(report) == {("colour", "new_value")}
    assert '"purple"' in report.anomalies[0].seen


def _fails(argv, capsys, *needles):
    assert main(argv) == 2
    err = capsys.readouterr().err
    for n in needles:
        assert n in err, err
    return err


def test_bad_input_is_one_error_naming_the_file_exit_2_nothing_written(digits, tmp_path, capsys):
    _, files, _, _ = digits
    out = tmp_path / "out.json"
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"not a zip file")
    _fails(["validate", "stats", str(bad), "-o", str(out)], capsys, str(bad), "not a NumPy .npz")
    csv = tmp_path / "bad.csv"
    csv.write_text("a,b\n1,2\n3\n")
    _fails(["validate", "stats", str(csv), "-o", str(out)], capsys, str(csv), "does not parse")
    _fails(["validate", "stats", str(tmp_path / "none.npz"), "-o", str(out)], capsys, "no such file")
    _fails(["validate", "schema", str(bad), "-o", str(out)], capsys, str(bad))
    schema = tmp_path / "schema.json"
    schema.write_text("{not json")
    _fails(["validate", "data", str(files["clean"]), "--schema", str(schema)], capsys, str(schema), "not valid JSON")
    twice = {"format": "flowjit-schema-1", "features": [{"name": "a", "type": "float", "shape": []}] * 2}
    schema.write_text(json.dumps(twice))
    _fails(["validate", "data", str(files["clean"]), "--schema", str(schema)], capsys, str(schema), "'a' twice")
    assert not out.exists()
    with pytest.raises(ValidateError, match="different numbers of examples"):
        np.savez(tmp_path / "ragged.npz", a=np.zeros(3), b=np.zeros(4))
        statistics(tmp_path / "ragged.npz")


def test_a_feature_the_schema_lacks_is_bad_input_exit_2_naming_the_file_and_the_feature(digits, tmp_path, capsys):
    _, files, stats, schema = digits
    path = tmp_path / "schema.json"
    path.write_text(json.dumps(schema))
    extra = tmp_path / "extra.npz"
    with np.load(files["clean"]) as clean:
        np.savez(extra, **clean, age=np.zeros(len(clean["label"]), np.float32))
    assert main(["validate", "data", str(extra), "--schema", str(path), "--json"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1, (out, err)
    for words in (str(extra), "'age'", str(path), '"name": "age"'):
        assert words in err, err
    with pytest.raises(ValidateError, match=r"feature 'age' \(float\[\]\) is not in the schema"):
        validate_data(extra, schema, stats)

def test_fj_validate_loads_on_first_use_and_import_flowjit_loads_no_pyarrow():
    prog = ("import sys, flowjit as fj\n"
            "print('pyarrow' in sys.modules, 'flowjit.validate' in sys.modules)\n"
            "fj.validate.statistics\n"
            "print('pyarrow' in sys.modules, 'flowjit.validate' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", prog], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False", "False", "True"]
    assert fj.validate.statistics is statistics


MEMORY_PROBE = """
import resource, sys
import numpy as np
import flowjit.validate as v
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
s = v.statistics(sys.argv[1], chunk_bytes=int(sys.argv[2]))
grew = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base
print(s["examples"], s["features"]["x"]["mean"], grew * 1024)
"""


def _bounded(tmp_path, rows, limit):
    """Statistics of a folder dataset ``10 * limit`` bytes big, computed in a fresh process
    whose peak memory grows by less than ``limit`` bytes."""
    folder = tmp_path / "big"
    folder.mkdir()
    width = 16
    path = folder / "x.npy"
    arr = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(rows, width))
    step = 1 << 16
    total = 0.0
    for start in range(0, rows, step):
        block = np.arange(start, min(rows, start + step), dtype=np.float64)[:, None] % 1000
        arr[start:start + len(block)] = block
        total += float(block.sum()) * width
    arr.flush()
    del arr
    size = os.path.getsize(path)
    assert size >= 10 * limit
    done = subprocess.run([sys.executable, "-c", MEMORY_PROBE, str(folder), str(limit // 6)], capture_output=True,
                          text=True, check=True)
    examples, mean, grew = done.stdout.split()
    assert int(examples) == rows
    assert float(mean) == pytest.approx(total / (rows * width), rel=1e-9)
    assert int(grew) < limit, f"peak memory grew by {int(grew) >> 20} MiB reading {size >> 20} MiB"


def test_statistics_stream_in_bounded_memory(tmp_path):
    # 240 MiB of data, 24 MiB of memory: statistics are complete and memory stays bounded.
    _bounded(tmp_path, rows=(240 << 20) // 64, limit=24 << 20)


@pytest.mark.slow
def test_statistics_of_a_dataset_ten_times_a_larger_memory_limit(tmp_path):
    _bounded(tmp_path, rows=(2 << 30) // 64, limit=200 << 20)
