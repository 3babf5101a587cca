"""examples/validation: the whole path on the digits data runs and reaches its verdicts."""

from __future__ import annotations

import importlib.util
import os

import pytest

EXAMPLE = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "examples",
                       "validation", "validate_digits.py")


def test_the_validation_example(tmp_path, capsys):
    pytest.importorskip("sklearn")
    spec = importlib.util.spec_from_file_location("validate_digits_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    result = module.main(["--out", str(tmp_path / "work")])
    assert result["clean_status"] == 0 and result["corrupted_status"] == 1
    assert result["caught"] == [("label", "new_value"), ("pixel_20", "drift"), ("pixel_20", "out_of_range"),
                                ("pixel_30", "nan"), ("pixel_5", "shape")]
    assert result["first_status"] == 0 and result["second_status"] == 0
    assert result["worse_status"] == 1 and result["worse_push_status"] == 2
    assert result["versions"] == [1, 2]
    assert result["accuracy"]["second"] > result["accuracy"]["first"] > result["accuracy"]["worse"]
    assert "refusing to push" in capsys.readouterr().err
    live = result["live"]
    assert live["statuses"] == {200}                      # anomalies are counted, requests served
    assert set(live["clean"]) == {"x/nan", "x/inf", "x/out_of_range"} and not any(live["clean"].values())
    assert live["corrupted"]["x/out_of_range"] == live["requests"] and live["corrupted"]["x/inf"] == 0
    assert 1 <= live["corrupted"]["x/nan"] <= live["requests"]
