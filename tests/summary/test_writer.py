"""fj.summary writes event files that TensorBoard's own reader reads back: scalars,
histograms and a program's graph (its ops, op types, kernels as name scopes)."""

from __future__ import annotations

import sys

import numpy as np
import pytest

import flowjit as fj

pytest.importorskip("tensorboardX")
event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")


def read(logdir):
    acc = event_accumulator.EventAccumulator(str(logdir), size_guidance={"histograms": 0, "scalars": 0})
    acc.Reload()
    return acc


def test_scalars_and_histograms_read_back(tmp_path):
    with fj.summary.create_writer(tmp_path) as w:
        for step in range(3):
            w.scalar("loss", np.float32(1.0 / (step + 1)), step)
            w.histogram("weights", np.arange(10, dtype=np.float32) * step, step)
        w.scalar("lr", 0.5, 7)
    acc = read(tmp_path)
    assert [(e.step, e.value) for e in acc.Scalars("loss")] == [(0, 1.0), (1, 0.5), (2, pytest.approx(1 / 3))]
    assert [(e.step, e.value) for e in acc.Scalars("lr")] == [(7, 0.5)]
    hist = acc.Histograms("weights")
    assert [e.step for e in hist] == [0, 1, 2]
    last = hist[-1].histogram_value
    assert (last.min, last.max, last.num, last.sum) == (0.0, 18.0, 10.0, 90.0)


def test_a_fused_program_as_a_graph(tmp_path):
    @fj.function
    def f(x, w, b):
        return fj.sum(fj.nn.relu(x @ w + b) * 2.0)

    args = (np.ones((4, 3), np.float32), np.ones((3, 5), np.float32), np.ones(5, np.float32))
    with fj.summary.create_writer(tmp_path) as w:
        w.graph(f, *args)
    graph = read(tmp_path).Graph()
    nodes = {n.name: n for n in graph.node}
    assert {n.op for n in graph.node} >= {"Argument", "matmul", "add", "le", "select", "mul", "reduce_sum", "Result"}
    # The kernel is a name scope holding its ops; the matmul stays outside it.
    (kernel,) = {n.name.split("/")[0] for n in graph.node if n.name.startswith("kernel")}
    assert kernel == "kernel1_add_le_select_mul_reduce_sum"
    assert nodes[f"{kernel}/add"].input == ["matmul", "inputs/b"]
    assert nodes["matmul"].input == ["inputs/x", "inputs/w"]
    assert nodes["outputs/result0"].input == [f"{kernel}/reduce_sum"]
    shape = nodes["matmul"].attr["_output_shapes"].list.shape[0]
    assert [d.size for d in shape.dim] == [4, 5]
    assert nodes["matmul"].attr["T"].type == 1  # DT_FLOAT
    assert nodes["matmul"].device == "cpu:0"
    assert nodes["matmul"].attr["_source"].s.decode().startswith("test_writer.py:")


def test_traced_stage_variables_and_control_flow(tmp_path):
    v = fj.Variable(np.zeros(3, np.float32), name="v")

    @fj.function
    def g(x):
        v.assign(v + x)
        return fj.cond(fj.sum(x) > 0, lambda y: y * 2.0, lambda y: y - 1.0, x)

    x = np.ones(3, np.float32)
    with fj.summary.create_writer(tmp_path) as w:
        w.graph(g, x, stage="traced")
    graph = read(tmp_path).Graph()
    ops = [n.op for n in graph.node]
    assert "Variable" in ops and "cond" in ops and "BlockArgument" in ops
    cond = next(n for n in graph.node if n.op == "cond")
    branches = [{n.op for n in graph.node if n.name.startswith(f"{cond.name}_blocks/block{k}/")} for k in (0, 1)]
    assert {"mul", "sub"} <= branches[0] | branches[1] and "mul" not in branches[0] & branches[1]


def test_bad_values_name_the_summary(tmp_path):
    with fj.summary.create_writer(tmp_path) as w:
        with pytest.raises(ValueError, match="'loss'.*shape \\(3,\\)"):
            w.scalar("loss", np.zeros(3), 0)
        with pytest.raises(ValueError, match="'w'.*NaN"):
            w.histogram("w", np.array([1.0, np.nan]), 0)
        with pytest.raises(ValueError, match="'e'.*no values"):
            w.histogram("e", np.zeros(0), 0)
    with pytest.raises(ValueError, match="closed summary writer"):
        w.scalar("loss", 1.0, 1)


def test_missing_tensorboardx_names_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorboardX", None)
    with pytest.raises(ImportError, match=r"pip install 'flowjit\[viz\]'"):
        fj.summary.create_writer(tmp_path)


def test_import_flowjit_does_not_import_tensorboardx():
    import subprocess
    out = subprocess.run([sys.executable, "-c", "import sys, flowjit; print('tensorboardX' in sys.modules)"],
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
