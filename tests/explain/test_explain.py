"""fj.explain and `flowjit explain` (issue 22, part 1): the kernels in execution order with
their bytes, FLOPs, bounds and times, and the fusion boundaries with their reasons."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

import flowjit as fj
from flowjit.cli import main
from flowjit.explain import bounds
from flowjit.passes.fusion import REASONS
from tests.explain.test_fusion_reasons import MLP_ARGS, gelu, mlp_step, on_two_devices

S = fj.ShapeDtype
F32 = np.float32


def test_gelu_is_one_kernel_whose_bytes_and_flops_are_exact():
    e = fj.explain(gelu, S((256, 128), F32))
    (k,) = e.kernels
    assert (k.kind, k.name, k.bound) == ("kernel", "mul_pow_add_tanh", "memory")
    assert k.ops == ["mul", "pow", "mul", "add", "mul", "tanh", "add", "mul"]
    assert k.bytes_read == k.bytes_written == 256 * 128 * 4
    assert k.flops == 8 * 256 * 128
    assert k.predicted_s == pytest.approx(2 * 256 * 128 * 4 / e.machine["bandwidth"])
    assert k.lines == "test_fusion_reasons.py:18"
    assert e.boundaries == [] and e.bytes_moved == 2 * 256 * 128 * 4
    assert "none: every fusible op joined a kernel" in str(e)


def test_mlp_step_lists_the_matmuls_and_kernels_with_the_boundaries():
    e = fj.explain(mlp_step, *MLP_ARGS)
    kinds = [k.kind for k in e.kernels]
    assert kinds.count("blas") == 5 and kinds.count("kernel") == 5  # 2 forward, 3 backward
    first = e.kernels[0]
    assert (first.kind, first.flops, first.bytes_read, first.bytes_written) == (
        "blas", 2 * 64 * 16 * 32, (64 * 32 + 32 * 16) * 4, 64 * 16 * 4)
    assert first.predicted_s == pytest.approx(max(first.flops / e.machine["gemm_flops"],
                                                  (first.bytes_read + first.bytes_written) / e.machine["bandwidth"]))
    codes = {b.code for b in e.boundaries}
    assert {"library_call", "reduction_mismatch", "cycle"} <= codes
    data = json.loads(json.dumps(e.to_json()))
    assert data["kernels"][0]["name"] == "matmul" and len(data["boundaries"]) == len(e.boundaries)


def test_run_times_each_kernel_and_the_program():
    e = fj.explain(mlp_step, *MLP_ARGS, run=True)
    assert e.measured_s is not None and e.measured_s > 0
    for k in e.kernels:
        assert k.measured_s is not None and k.measured_s > 0, k
        assert k.fraction_of_bound == pytest.approx(k.predicted_s / k.measured_s)
    assert e.driver == "one native call (the whole program)"
    assert "measured" in str(e) and "(median)" in str(e)


def test_run_times_a_complex_kernel():
    # A complex buffer reaches a kernel as its parts (a trailing axis of 2): the timer of a
    # kernel alone must hand it over so, as the program does (it crashed the process).
    x = (np.arange(6.0) + 1j).astype(np.complex64).reshape(3, 2)
    e = fj.explain(lambda x: (x * 2).T.reshape(3, 2).T, x, run=True)
    assert [k.kind for k in e.kernels] == ["kernel"]
    assert e.kernels[0].measured_s is not None and e.kernels[0].measured_s > 0


def test_run_does_not_update_variables():
    w = fj.Variable(np.ones((8, 8), F32))

    def step(x):
        w.assign(w - 0.1 * (x @ w))
        return fj.sum(w)
    fj.explain(step, np.ones((8, 8), F32), run=True)
    assert (np.asarray(w.value) == 1).all()


def test_control_flow_lists_the_blocks_kernels():
    def f(x):
        y = fj.exp(x)
        z = fj.cond(fj.sum(y) > 0, lambda v: v * 2 + 1, lambda v: v - 1, y)
        return z + 1
    e = fj.explain(f, S((8, 4), F32), run=True)
    rows = [(k.block, k.name, k.kind) for k in e.kernels]
    assert rows == [("", "exp_reduce_sum_gt_cast", "kernel"), ("", "cond", "control"),
                    ("cond#2.0/", "sub", "kernel"), ("cond#2.1/", "mul_add", "kernel"), ("", "add", "kernel")]
    assert e.kernels[1].measured_s is None and e.kernels[0].measured_s is not None
    # The branch taken (the sum of exp is positive) is timed on the values it ran on.
    assert e.kernels[3].measured_s is not None and e.kernels[2].note == "not timed: its block did not run"
    assert [(b.producer, b.consumer, b.code) for b in e.boundaries if not b.block] == [
        ("exp_reduce_sum_gt_cast", "cond", "control"), ("cond", "add", "control")]


def test_the_kernels_of_a_loop_body_are_timed_on_its_first_iteration():
    def f(x, w):
        def body(h, xt):
            h = fj.tanh(h @ w + xt)
            return h, fj.sum(h)
        h, ys = fj.scan(body, fj.zeros((4, 16), F32), x)
        return fj.sum(h) + fj.sum(ys)
    e = fj.explain(f, S((10, 4, 16), F32), S((16, 16), F32), run=True)
    inside = [k for k in e.kernels if k.block]
    assert [(k.block, k.kind) for k in inside] == [("scan#1.0/", "blas"), ("scan#1.0/", "kernel")]
    assert all(k.measured_s is not None for k in inside)
    assert inside[0].flops == 2 * 4 * 16 * 16


def test_a_device_change_is_explained(monkeypatch):
    monkeypatch.setenv("FLOWJIT_CPU_DEVICES", "2")
    e = fj.explain(on_two_devices, S((8, 4), F32), run=True)
    assert [(k.name, k.kind, k.device) for k in e.kernels] == [
        ("exp", "kernel", "cpu:0"), ("send", "transfer", "cpu:0"), ("recv", "transfer", "cpu:1"),
        ("mul_add", "kernel", "cpu:1")]
    assert {b.code for b in e.boundaries} == {"device_change"}
    assert e.kernels[3].measured_s is not None


def test_an_earlier_stage_lists_each_op_alone():
    e = fj.explain(gelu, S((256, 128), F32), stage="simplify")
    assert [k.name for k in e.kernels] == ["mul", "pow", "mul", "add", "mul", "tanh", "add", "mul"]
    assert e.bytes_moved > 8 * 256 * 128 * 4 and e.boundaries == []
    with pytest.raises(ValueError, match="unknown stage 'loops'"):
        fj.explain(gelu, S((4,), F32), stage="loops")


def test_the_bounds_are_measured_once_and_kept(tmp_path, monkeypatch):
    monkeypatch.setenv("FLOWJIT_CACHE_DIR", str(tmp_path))
    before = bounds.measurements[0]
    first = bounds.machine_bounds()
    assert bounds.measurements[0] == before + 1
    assert first.path.startswith(str(tmp_path)) and first.bandwidth > 0 and first.gemm_flops > 0
    assert "y = x + 1" in first.method and "matmul" in first.method
    again = bounds.machine_bounds()
    assert bounds.measurements[0] == before + 1 and again == first
    fj.explain(gelu, S((4,), F32))
    assert bounds.measurements[0] == before + 1


PROGRAM = """
import flowjit as fj

def gelu(x):
    return 0.5 * x * (1 + fj.tanh(0.7978845608 * (x + 0.044715 * x ** 3)))

def loss(x, w):
    return fj.sum(fj.nn.relu(x @ w))

RATE = 0.5
"""


@pytest.fixture
def program(tmp_path):
    path = tmp_path / "prog.py"
    path.write_text(PROGRAM)
    return str(path)


def test_cli_text_and_json(program, capsys):
    assert main(["explain", f"{program}:loss", "--arg", "f32[64,32]", "--arg", "f32[32,16]"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("loss(x: f32[64,32], w: f32[32,16]): 2 step(s), stage fused")
    assert "matmul" in out and "[library_call]" in out and "prog.py:8" in out
    assert main(["explain", f"{program}:gelu", "--arg", "f32[64,32]", "--format", "json", "--run"]) == 0
    data = json.loads(capsys.readouterr().out)
    (k,) = data["kernels"]
    assert k["bytes_read"] == 64 * 32 * 4 and k["measured_s"] > 0 and data["boundaries"] == []


def test_cli_bad_arguments_show_the_expected_form(program, capsys):
    with pytest.raises(SystemExit):
        main(["explain", f"{program}:loss", "--arg", "f32[64,32"])
    err = capsys.readouterr().err
    assert "bad --arg 'f32[64,32'" in err and "(x, w)" in err
    with pytest.raises(SystemExit):
        main(["explain", f"{program}:loss", "--arg", "f32[64,32]"])
    assert "loss takes 2 argument(s), got 1 --arg" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="has no function 'nope'"):
        main(["explain", f"{program}:nope", "--arg", "f32[4]"])
    with pytest.raises(SystemExit):
        main(["explain", f"{program}:RATE", "--arg", "f32[4]"])
    assert "expected FILE.py:FUNCTION naming a function" in capsys.readouterr().err


def test_the_mlp_training_step_example(capsys):
    examples = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "examples")
    e = main(["explain", os.path.join(examples, "explain_mlp.py") + ":train_step", "--arg", "f32[32,784]",
              "--arg", "i32[32]", "--format", "json"])
    assert e == 0
    data = json.loads(capsys.readouterr().out)
    assert sum(a.endswith(" var") for a in data["arguments"]) == 13  # 4 parameters, Adam's 8 slots and step
    assert [k["kind"] for k in data["kernels"]].count("blas") == 5
    assert all(b["consumer_op"] != "assign" for b in data["boundaries"])
    assert {b["code"] for b in data["boundaries"]} <= set(REASONS)


def test_a_kernel_on_a_cuda_device_is_not_held_to_the_cpus_bounds():
    from flowjit.explain.core import _kernel, _timer
    from flowjit.ir import new_function
    from flowjit.ir.dtypes import dtype
    from flowjit.ir.types import TensorType
    from flowjit.passes.fusion import fusion
    fn, b = new_function("on_gpu", [TensorType((4,), dtype("float32"))], ["x"])
    b.device = "cuda:0"
    fn.body.set_returns(b.emit("exp", fn.args))
    (op,) = fusion(fn).body.ops
    k = _kernel(op, 1, "", bounds.machine_bounds())
    assert (k.device, k.bound, k.predicted_s) == ("cuda:0", "-", None) and "CUDA" in k.note
    assert k.bytes_read == k.bytes_written == 16
    assert _timer(op, [np.ones(4, F32)]) is None


def _conv_relu(x, w):
    return fj.nn.relu(fj.nn.conv2d(x, w, (1, 1), "SAME"))


def test_a_blocked_convolution_is_one_step_whose_windows_never_reach_memory():
    # 4.5 MiB of windows (from program_plan.CONV_BLOCKED_MIN_BYTES): the native program
    # makes them a block of output rows at a time inside their product's step.
    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, 32, 32, 16)).astype(F32)
    w = rng.standard_normal((3, 3, 16, 32)).astype(F32)
    before = fj.explain(_conv_relu, x, w)        # not compiled yet: the fused program's view
    assert before.kernels[0].bytes_written == 8 * 32 * 32 * 9 * 16 * 4 and not before.kernels[1].note
    f = fj.function(_conv_relu)
    f(x, w)
    e = fj.explain(f, x, w)
    windows, product = e.kernels[0], e.kernels[1]
    assert (windows.ops, product.kind) == (["conv_patches"], "blas")
    assert windows.bytes_read == windows.bytes_written == 0 and windows.predicted_s is None
    assert "inside #2's product" in windows.note and "blocked with #1's windows" in product.note
    assert product.bytes_read == x.nbytes + w.nbytes and product.bytes_written == 8 * 32 * 32 * 32 * 4
    assert e.bytes_moved == before.bytes_moved - 2 * before.kernels[0].bytes_written - before.kernels[0].bytes_read \
        + x.nbytes
    timed = fj.explain(fj.grad(lambda w, x: (_conv_relu(x, w) ** 2).sum()), w, x, run=True)
    blocked = [k for k in timed.kernels if "blocked with" in k.note]
    assert len(blocked) == 2 and all(k.measured_s for k in blocked)   # the output and the filter's gradient
    assert all(k.measured_s is None for k in timed.kernels if "never written whole" in k.note)
    assert "never written whole" in str(timed)


def test_a_small_convolution_keeps_its_windows_kernel_in_explain():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 8, 8, 4)).astype(F32)      # 41 KiB of windows: not blocked
    w = rng.standard_normal((3, 3, 4, 8)).astype(F32)
    f = fj.function(_conv_relu)
    f(x, w)
    e = fj.explain(f, x, w)
    assert e.kernels[0].bytes_written == 2 * 8 * 8 * 9 * 4 * 4 and not any(k.note for k in e.kernels)
