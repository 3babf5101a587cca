"""The IR as a picture (flowjit/ir/dot.py): DOT text, rendered by Graphviz's own dot."""

from __future__ import annotations

import shutil
import sys

import numpy as np
import pytest

import flowjit as fj
from flowjit.cli import main
from flowjit.ir.dot import GraphvizMissing, to_dot, to_svg

graphviz = pytest.importorskip("graphviz")  # the test extra installs it
needs_dot = pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz's dot is not installed (.ci/run does)")


def fused(f, *args):
    return fj.function(f).ir(*args, stage="fused")


@needs_dot
def test_fusions_are_clusters_and_dot_renders_them():
    def f(x, w):
        h = fj.tanh(x @ w + 1.0)
        return fj.nn.softmax(h, axis=-1)
    fn = fused(f, np.ones((4, 3), np.float32), np.ones((3, 5), np.float32))
    text = to_dot(fn)
    assert text.startswith('digraph "f" {') and text.count("subgraph cluster_") == 1
    assert "label=\"matmul\\nf32[4,5]" in text and "fusion: add_tanh" in text and "test_dot.py:" in text
    svg = to_svg(fn)
    assert svg.lstrip().startswith("<?xml") and "<svg" in svg and "reduce_max" in svg


@needs_dot
def test_devices_are_colours_and_send_recv_edges_are_marked(monkeypatch):
    monkeypatch.setenv("FLOWJIT_CPU_DEVICES", "2")

    def f(x):
        with fj.device("cpu:1"):
            y = fj.exp(x) * 2
        return y + x
    fn = fj.function(f).ir(np.ones(8), stage="partition")
    text = to_dot(fn)
    assert "send/recv" in text and "style=\"dashed\"" in text
    assert "cluster_legend" in text and "cpu:1" in text
    assert "<svg" in to_svg(fn)


@needs_dot
def test_control_flow_blocks_are_nested_clusters():
    def f(x):
        return fj.fori_loop(0, 3, lambda i, v: v * 0.5 + 1.0, x), fj.cond(x.sum() > 0, lambda a: a * 2,
                                                                          lambda a: a - 1, x)
    text = to_dot(fused(f, np.ones(4)))
    assert text.count("label=\"block 0\"") == 2 and "label=\"block 1\"" in text
    assert "<svg" in to_svg(fused(f, np.ones(4)))


@needs_dot
def test_flowjit_ir_draws_dot_and_svg(tmp_path, capsys):
    src = tmp_path / "prog.py"
    src.write_text("import flowjit as fj\n\ndef f(x):\n    return fj.exp(x).sum(axis=-1)\n")
    assert main(["ir", f"{src}:f", "--arg", "f32[4,8]", "--stage", "fused", "--format", "dot"]) == 0
    assert capsys.readouterr().out.startswith('digraph "f" {')
    assert main(["ir", f"{src}:f", "--arg", "f32[4,8]", "--format", "svg"]) == 0
    assert "<svg" in capsys.readouterr().out


def test_svg_without_dot_says_what_to_install(monkeypatch):
    monkeypatch.setenv("PATH", "")
    with pytest.raises(GraphvizMissing, match="apt-get install graphviz"):
        to_svg(fused(lambda x: x + 1, np.ones(3)))


def test_dot_text_needs_no_graphviz(monkeypatch):
    monkeypatch.setitem(sys.modules, "graphviz", None)  # the package not installed
    fn = fused(lambda x: fj.exp(x) + 1, np.ones(3))
    assert to_dot(fn).startswith('digraph "_lambda_" {')
    with pytest.raises(GraphvizMissing, match=r"pip install 'flowjit\[viz\]'"):
        to_svg(fn)


@needs_dot
def test_a_program_with_a_cond_a_scan_and_two_devices(monkeypatch):
    monkeypatch.setenv("FLOWJIT_CPU_DEVICES", "2")

    def f(x, xs):
        with fj.device("cpu:1"):
            y = fj.cond(x.sum() > 0, lambda a: a * 2, lambda a: a - 1, fj.exp(x))
        c, ys = fj.scan(lambda c, t: (c + t, c.sum()), y, xs)
        return c, ys
    fn = fj.function(f).ir(np.ones(4), np.ones((3, 4)), stage="fused")
    text = to_dot(fn)
    assert "send/recv" in text and text.count("label=\"block ") == 3 and "cpu:1" in text
    parsed = graphviz.Source(text).pipe(format="dot").decode()  # dot parses it and lays it out
    assert "send/recv" in parsed
    assert "<svg" in to_svg(fn)


@needs_dot
def test_flowjit_explain_draws_svg_and_writes_a_trace(tmp_path, capsys):
    import json
    src = tmp_path / "prog.py"
    src.write_text("import flowjit as fj\n\ndef f(x, w):\n    return fj.nn.softmax(fj.tanh(x @ w), axis=-1)\n")
    args = ["--arg", "f32[16,8]", "--arg", "f32[8,4]"]
    assert main(["explain", f"{src}:f", *args, "--format", "svg"]) == 0
    assert "<svg" in capsys.readouterr().out
    trace = tmp_path / "trace.json"
    assert main(["explain", f"{src}:f", *args, "--run", "--trace", str(trace)]) == 0
    out = capsys.readouterr().out
    events = [e for e in json.loads(trace.read_text())["traceEvents"] if e["ph"] == "X"]
    kernels = {e["name"] for e in events if e["cat"] == "kernel"}
    assert sum(e["cat"] == "call" for e in events) == 5 and kernels and all(k in out for k in kernels)
    assert not any(e["cat"] == "compile" for e in events)  # compiled before the recording
