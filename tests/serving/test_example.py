"""examples/serving/serve_digits.py end to end, reduced: trains, serves, pushes under load."""

from __future__ import annotations

import os
import sys

import pytest

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "examples")


def test_the_serving_example_pushes_under_load_without_a_failed_request(tmp_path, capsys):
    pytest.importorskip("sklearn")
    sys.path.insert(0, os.path.join(EXAMPLES, "serving"))
    try:
        import serve_digits
    finally:
        sys.path.remove(os.path.join(EXAMPLES, "serving"))
    result = serve_digits.main(["--epochs", "2", "--seconds", "2", "--out", str(tmp_path / "out")])
    assert result["test_accuracy"] > 0.85 and result["failed"] == 0 and result["versions"] == 2
    assert "flowjit_serving_reloads_total" in capsys.readouterr().out
