"""``flowjit ir`` prints the text form (which parses back) and JSON."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import flowjit as fj
from flowjit.cli import main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(ROOT, "examples", "linear_fit.py")
ARGS = ["--arg", "f32[8]", "--arg", "f32[]", "--arg", "f32[64,8]", "--arg", "f32[64]", "--arg", "f32[]"]


def test_ir_text(capsys):
    assert main(["ir", f"{EXAMPLE}:train_step", *ARGS]) == 0
    out = capsys.readouterr().out
    assert out.startswith("func @train_step(%w: f32[8], %b: f32[], %x: f32[64,8], %y: f32[64], %lr: f32[])")
    assert "matmul %x, %w : f32[64]" in out or "matmul" in out
    assert "# linear_fit.py:" in out
    assert str(fj.ir.parse(out)) == out


def test_ir_json(capsys):
    assert main(["ir", f"{EXAMPLE}:train_step", *ARGS, "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["name"] == "train_step"
    assert [a["type"] for a in data["args"]] == ["f32[8]", "f32[]", "f32[64,8]", "f32[64]", "f32[]"]
    names = {a["name"] for a in data["args"]}
    for op in data["ops"]:
        assert all(i in names for i in op["inputs"]), op
        names.update(op["results"])
        assert op["loc"]["file"].endswith("linear_fit.py")
    assert set(data["returns"]) <= names and len(data["result_types"]) == 3


def test_plain_function_and_bad_args(tmp_path, capsys):
    src = tmp_path / "prog.py"
    src.write_text("import flowjit as fj\n\ndef f(x, n):\n    return fj.exp(x) * n\n")
    assert main(["ir", f"{src}:f", "--arg", "f16[3]", "--arg", "i32[]"]) == 0
    out = capsys.readouterr().out
    assert "exp %x : f16[3]" in out and "prog.py:4" in out
    proc = subprocess.run([sys.executable, "-m", "flowjit.cli", "ir", f"{src}:f", "--arg", "q9[3]"],
                          capture_output=True, text=True)
    assert proc.returncode != 0 and "bad --arg 'q9[3]'" in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "flowjit.cli", "ir", f"{src}:nope"], capture_output=True, text=True)
    assert proc.returncode != 0 and "no function 'nope'" in proc.stderr


def test_console_script_is_installed():
    proc = subprocess.run(["flowjit", "--help"], capture_output=True, text=True)
    assert proc.returncode == 0 and "ir" in proc.stdout


def test_ir_stage_kernels_prints_the_generated_source(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("FLOWJIT_CACHE_DIR", str(tmp_path / "cache"))
    src = tmp_path / "prog.py"
    src.write_text("import flowjit as fj\n\ndef f(x, w):\n    return fj.tanh(x @ w + 1.0).sum(axis=-1)\n")
    args = ["ir", f"{src}:f", "--arg", "f32[16,8]", "--arg", "f32[8,4]", "--stage", "kernels"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "# kernel " in out and "prog.py:4" in out and "loop IR" in out and "tanh.f32(" in out
    # The whole program as one native function: the matmul a BLAS gemm inside it.
    assert "# driver" in out and "native driver f(" in out and "float32 gemm" in out
    assert "numba" not in out


def test_the_numba_backend_is_refused_saying_what_replaced_it(tmp_path, monkeypatch):
    monkeypatch.setenv("FLOWJIT_CACHE_DIR", str(tmp_path / "cache"))
    src = tmp_path / "prog.py"
    src.write_text("import flowjit as fj\n\ndef f(x):\n    return fj.tanh(x)\n")
    monkeypatch.setenv("FLOWJIT_BACKEND", "numba")
    with pytest.raises(ValueError, match="llvmlite"):
        main(["ir", f"{src}:f", "--arg", "f32[4]", "--stage", "kernels"])


def test_ir_stage_loops_prints_every_kernel_as_loop_ir(tmp_path, capsys):
    src = tmp_path / "prog.py"
    src.write_text("import flowjit as fj\n\ndef softmax(x):\n    e = fj.exp(x - x.max(axis=-1, keepdims=True))\n"
                   "    return e / e.sum(axis=-1, keepdims=True)\n")
    assert main(["ir", f"{src}:softmax", "--arg", "f32[4,300]", "--stage", "loops"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# loops of @softmax: 1 kernel(s)")
    assert "prog.py:4" in out and "kernel k0_" in out
    assert "n0 = in0.shape[0]" in out  # sizes are read at run time: any batch size
    assert "acc acc" in out and ": max f32 = -inf:f32" in out and ": sum f64 = 0.0:f64" in out
    assert "exp.f32(" in out and "out0[" in out
    with pytest.raises(SystemExit, match="--stage loops prints text only"):
        main(["ir", f"{src}:softmax", "--arg", "f32[4,300]", "--stage", "loops", "--format", "json"])


def test_ir_stage_loops_from_python_matches_the_cli(tmp_path, capsys):
    import numpy as np

    def f(x, y):
        return fj.tanh(x) * 2.0 + y, (x * y).sum()
    x = np.ones((3, 4), np.float32)
    loops = fj.function(f).ir(x, x, stage="loops")
    text = str(loops)
    assert len(loops.kernels) >= 1 and "tanh.f32(" in text and "out1[]" in text
    assert text.count("kernel k") == len(loops.kernels)


def test_ir_with_the_wrong_number_of_args_is_one_usage_line(tmp_path, capsys):
    src = tmp_path / "prog.py"
    src.write_text("def f(x, w):\n    return x @ w\n")
    for args in ([], ["--arg", "f32[2,3]"]):
        with pytest.raises(SystemExit) as info:
            main(["ir", f"{src}:f", *args])
        assert info.value.code == 2
        err = capsys.readouterr().err
        assert "f takes 2 argument(s)" in err and "(x, w)" in err and "Traceback" not in err
