"""examples/aot: the Makefile trains the digits MLP, builds its predict function as a C
library and runs main.c on it; C and Python (fj.load_compiled) agree on the accuracy."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest

EXAMPLE = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "examples", "aot")


@pytest.mark.skipif(shutil.which("make") is None or shutil.which("cc") is None, reason="no make or cc")
def test_the_c_program_classifies_as_python_does(tmp_path):
    pytest.importorskip("sklearn")
    shutil.copytree(EXAMPLE, tmp_path / "aot", ignore=shutil.ignore_patterns("build", "main"))
    # digits_predict.py finds examples/ (digits.py, mnist_mlp.py) beside its own folder.
    for name in ("digits.py", "mnist_mlp.py"):
        shutil.copy(os.path.join(os.path.dirname(EXAMPLE), name), tmp_path / name)
    out = subprocess.run(["make", "-C", str(tmp_path / "aot"), "EPOCHS=3", f"PYTHON={sys.executable}"],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    python = re.search(r"test accuracy (\d+\.\d+)% from Python", out.stdout)
    c = re.search(r"test accuracy (\d+\.\d+)% \((\d+) of 359\) from C", out.stdout)
    assert python and c, out.stdout
    assert python.group(1) == c.group(1) and float(c.group(1)) > 90
