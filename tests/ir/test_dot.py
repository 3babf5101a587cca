"""The IR as a picture (flowjit/ir/dot.py): DOT text, rendered by Graphviz's own dot."""

from __future__ import annotations

import re
import shutil
import sys
from collections import Counter

import numpy as np
import pytest

import flowjit as fj
from flowjit.cli import main
from flowjit.ir.dot import GraphvizMissing, to_dot, to_svg
from flowjit.ir.printer import print_function
from flowjit.ir.registry import all_primitives

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
    assert "= matmul\\nf32[4,5]" in text and "= fusion: add_tanh" in text and "test_dot.py:" in text
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
    assert text.count("label=\"body\"") == 1 and text.count("label=\"cond\"") == 1
    assert "label=\"branch 0 (false)\"" in text and "label=\"branch 1 (true)\"" in text
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
    assert "send/recv" in text and "cpu:1" in text
    assert [text.count(f'label="{name}"') for name in ("branch 0 (false)", "branch 1 (true)", "body")] == [1, 1, 1]
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


# ---- the picture says what the text says (issue 36) ---------------------------------------------

def edges(text):
    """(tail, head, label) of every edge of the DOT text."""
    return [(m[1], m[2], m[4]) for m in re.finditer(r'^\s*(\w+) -> (\w+)( \[.*?label="([^"]*)")?', text, re.M)]


def labels(text):
    return re.findall(r'label="((?:[^"\\]|\\.)*)"', text)


def test_control_blocks_are_labelled_by_their_role():
    def f(x, xs):
        a = fj.cond(x.sum() > 0, lambda v: v * 2, lambda v: v - 1, x)
        b = fj.while_loop(lambda v: v.sum() < 10, lambda v: v + 1.0, x)
        c, ys = fj.scan(lambda c, t: (c + t, c.sum()), x, xs)
        d = fj.switch(1, [lambda v: v, lambda v: v + 1, lambda v: v * 3], x)
        return a, b, c, ys, d
    text = to_dot(fused(f, np.ones(4), np.ones((3, 4))))
    blocks = re.findall(r'label="([^"]*)"\s*style="dashed"', text)  # the clusters of blocks
    assert sorted(blocks) == sorted(["branch 0 (false)", "branch 1 (true)", "cond", "body", "body",
                                     "branch 0", "branch 1", "branch 2"])
    assert "block " not in text


def test_every_primitive_owning_blocks_declares_their_names():
    owners = [p for p in all_primitives() if p.num_blocks]
    assert {p.name for p in owners} >= {"cond", "while", "scan", "fusion", "call", "custom_vjp_call"}
    for p in owners:
        count = p.num_blocks if p.num_blocks > 0 else 3
        names = p.block_labels(count)
        assert len(names) == count and len(set(names)) == count, p.name
        assert not any(name.startswith("block ") for name in names), f"{p.name} declares no block names"
    assert all_primitives()[0].block_labels(0) == []
    cond = next(p for p in owners if p.name == "cond")
    assert cond.block_labels(2) == ["branch 0 (false)", "branch 1 (true)"]


def test_constants_show_their_value_short_or_elided():
    def f(x):
        return x * 2.5 + np.arange(100.0)
    text = to_dot(fused(f, np.ones(100)))
    consts = [t for t in labels(text) if "= constant" in t]
    assert any(re.match(r"%\d+ = constant 2.5\\nf64\[\]", t) for t in consts), consts
    assert any(re.match(r"%\d+ = constant \[0.0, 1.0, 2.0, 3.0, \.\.\.\]\\nf64\[100\]", t) for t in consts), consts
    assert "b64" not in text and max(len(t) for t in consts) < 80


def test_nodes_carry_the_ssa_names_of_the_text_form():
    def f(x, w):
        h = fj.tanh(x @ w)
        return fj.cond(h.sum() > 0, lambda a: a * 2, lambda a: a - 1, h), fj.linalg.eigh(w @ w.T)
    fn = fused(f, np.ones((2, 3)), np.ones((3, 3)))
    text, printed = to_dot(fn), print_function(fn)
    node_labels = labels(text)
    ops = re.findall(r"^\s*(%[\d%, ]+) = (\w+)", printed, re.M)
    assert len(ops) > 8 and any(prim == "eigh" and "," in names for names, prim in ops)
    for names, prim in ops:  # every op, top level or in a block, under its names in the text
        assert sum(t.startswith(f"{names} = {prim}") for t in node_labels) == 1, (names, prim)
    lines = printed.splitlines()
    block_args = 0
    for i, line in enumerate(lines):
        if line.strip().startswith("^(") and "= fusion" not in lines[i - 1]:  # a fusion's are the values outside
            for name, typ in re.findall(r"(%\d+): (\w+\[[\d,]*\])", line):
                assert f"{name}: {typ}" in node_labels, (name, typ)
                block_args += 1
    assert block_args == 2  # the cond's two branches
    assert "%x: f64[2,3]" in node_labels and "%w: f64[3,3]" in node_labels
    results = re.search(r"^  return (.*)$", printed, re.M)[1].split(", ")
    assert [t.split("\\n")[0] for t in node_labels if t.startswith("result")] == [
        f"result {j}: {name}" for j, name in enumerate(results)]


def test_an_op_reading_one_value_twice_draws_one_labelled_edge():
    text = to_dot(fused(lambda x: (x * x, x @ x), np.ones((3, 3))))
    counted = Counter((a, b) for a, b, _ in edges(text))
    assert counted and max(counted.values()) == 1, counted
    twice = [(a, b, label) for a, b, label in edges(text) if label]
    assert len(twice) == 2 and all(label == "\u00d72" for _, _, label in twice), twice
