"""``fj.profile``: a Chrome trace of compiles, calls and each native step, on each device."""

from __future__ import annotations

import json

import numpy as np
import pytest

import flowjit as fj
from flowjit.runtime import hooks


def mlp(x, w1, w2):
    h = fj.nn.relu(x @ w1)
    return fj.nn.softmax(h @ w2, axis=-1).sum(axis=0), fj.fori_loop(0, 10, lambda i, v: v * 0.5 + 1.0, h.sum())


def inputs():
    rng = np.random.default_rng(0)
    return (rng.standard_normal((64, 32)).astype(np.float32), rng.standard_normal((32, 16)).astype(np.float32),
            rng.standard_normal((16, 8)).astype(np.float32))


def test_a_trace_of_compiles_calls_and_native_steps(tmp_path):
    f = fj.function(mlp)
    args = inputs()
    want = f(*args)  # compiled before: the profile then sees the profiling build's compile only
    path = tmp_path / "trace.json"
    with fj.profile(path):
        assert hooks.SLOW_PATH[0]
        for _ in range(3):
            got = f(*args)
    assert not hooks.SLOW_PATH[0]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-6)
    trace = json.loads(path.read_text())["traceEvents"]
    spans = [e for e in trace if e["ph"] == "X"]
    cats = [e["cat"] for e in spans]
    assert cats.count("call") == 3 and cats.count("gemm") == 6 and cats.count("loop") == 3
    assert cats.count("compile") == 1 and "kernel" in cats
    assert {e["args"]["name"] for e in trace if e["ph"] == "M"} == {"cpu:0"}
    calls = [e for e in spans if e["cat"] == "call"]
    for e in spans:
        assert e["dur"] >= 0 and e["ts"] >= 0
        if e["cat"] in ("kernel", "gemm", "loop"):  # each native step inside one of the calls
            assert any(c["ts"] <= e["ts"] and e["ts"] + e["dur"] <= c["ts"] + c["dur"] + 1e-3 for c in calls), e
    kernel = next(e for e in spans if e["cat"] == "kernel")
    assert "test_profiler.py" in kernel["args"]["lines"]
    gemm = next(e for e in spans if e["cat"] == "gemm")
    assert gemm["name"] == "matmul" and gemm["args"]["flops"] == 2 * 64 * 32 * 16
    assert {e["name"] for e in spans if e["cat"] == "loop"} == {"while"}
    # Named as flowjit explain names them: the fused program's kernels by their fusion names.
    names = {op.attrs["name"] for op in f.ir(*args, stage="fused").body.ops if op.primitive.role == "kernel"}
    assert {e["name"] for e in spans if e["cat"] == "kernel"} == names


def test_the_trace_event_format_field_by_field(tmp_path):
    f = fj.function(mlp)
    args = inputs()
    f(*args)
    with fj.profile(tmp_path / "t.json"):
        f(*args)
        f(*args)
    doc = json.loads((tmp_path / "t.json").read_text())
    assert set(doc) == {"traceEvents", "displayTimeUnit"}
    events = doc["traceEvents"]
    for e in events:
        assert e["ph"] in ("X", "M") and isinstance(e["pid"], int) and isinstance(e["tid"], int)
        if e["ph"] == "M":
            assert e["name"] == "process_name" and isinstance(e["args"]["name"], str)
            continue
        assert set(e) == {"name", "cat", "ph", "pid", "tid", "ts", "dur", "args"}
        assert isinstance(e["ts"], float) and isinstance(e["dur"], float) and e["dur"] >= 0
    spans = [e for e in events if e["ph"] == "X"]
    assert [e["ts"] for e in spans] == sorted(e["ts"] for e in spans)
    # Microseconds: the two calls together take less than the profile's length in us.
    assert 0 < sum(e["dur"] for e in spans if e["cat"] == "call") < 1e6
    # Per thread, spans nest: each one that starts inside another ends inside it too.
    for tid in {e["tid"] for e in spans}:
        open_ends: list[float] = []
        for e in (e for e in spans if e["tid"] == tid):
            while open_ends and e["ts"] >= open_ends[-1]:
                open_ends.pop()
            end = e["ts"] + e["dur"]
            assert not open_ends or end <= open_ends[-1] + 1e-3, e
            open_ends.append(end)


def test_compiles_and_python_driver_programs_and_devices(tmp_path, monkeypatch):
    monkeypatch.setenv("FLOWJIT_CPU_DEVICES", "2")

    def two_devices(x):
        with fj.device("cpu:1"):
            y = fj.exp(x) * 2
        return y + x

    f, g = fj.function(two_devices), fj.function(lambda x: fj.cumsum(x * 2, axis=0))
    x = np.linspace(-1, 1, 16)
    with fj.profile() as p:
        np.testing.assert_allclose(f(x), np.exp(x) * 2 + x)
        np.testing.assert_allclose(g(x), np.cumsum(x * 2))
    cats = [e.cat for e in p.events]
    assert cats.count("compile") >= 2  # each program compiles inside the profile
    assert {e.device for e in p.events} >= {"cpu:0", "cpu:1"}
    assert any(e.cat == "program" and "Python driver" in e.name for e in p.events)
    transfers = [e for e in p.events if e.cat == "transfer"]
    assert {e.name.split()[0] for e in transfers} == {"send", "recv"}
    assert all(e.args["bytes"] == x.nbytes for e in transfers)
    sends = {e.device for e in transfers if e.name.startswith("send")}
    assert sends == {"cpu:0", "cpu:1"}  # x goes to cpu:1, y comes back


def test_one_profile_at_a_time():
    with fj.profile():
        with pytest.raises(RuntimeError, match="another profile"):
            with fj.profile():
                pass
    assert not hooks.SLOW_PATH[0]


def test_functions_of_several_arguments_are_profiled_on_every_call():
    f = fj.function(lambda a, b: fj.tanh(a) * b)
    a, b = np.ones(4), np.ones(4)
    for _ in range(3):
        f(a, b)  # the third call goes straight to the native builtin
    with fj.profile() as p:
        for _ in range(4):
            f(a, b)
    assert sum(e.cat == "call" for e in p.events) == 4


def test_a_convolutions_windows_run_by_flowjits_routine_are_a_kernel_span(tmp_path):
    # The patches op alone in its kernel runs as flowjit's routine (a Patches step), still
    # its kernel op's span (from the review of f5255da: it was a "step").
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 8, 8, 3)).astype(np.float32)
    w = rng.standard_normal((3, 3, 3, 4)).astype(np.float32)
    f = fj.function(lambda x, w: fj.maximum(fj.conv2d(x, w, padding="SAME"), 0.0).sum())
    f(x, w)
    assert "patches routine" in next(iter(f._cache.values())).executable._program.describe()
    path = tmp_path / "trace.json"
    with fj.profile(path):
        f(x, w)
    spans = [e for e in json.loads(path.read_text())["traceEvents"] if e["ph"] == "X"]
    names = {op.attrs["name"] for op in f.ir(x, w, stage="fused").body.ops if op.primitive.role == "kernel"}
    assert {e["name"] for e in spans if e["cat"] == "kernel"} == names


def test_an_interpreted_program_is_profiled_as_one_span():
    # An eager fj.scan (outside fj.function) runs through the interpreter, which has no code
    # generator: under a profile it had raised AttributeError ('NoneType' object has no
    # attribute 'compile_program').
    xs = np.arange(6.0)
    f = fj.function(lambda x: x * 2 + 1, backend="interpreter")
    with fj.profile() as p:
        carry, ys = fj.scan(lambda c, x: (c + x, c * x), 0.0, xs)
        np.testing.assert_allclose(f(xs), xs * 2 + 1)
    np.testing.assert_allclose(carry, xs.sum())
    np.testing.assert_allclose(ys, np.concatenate([[0.0], np.cumsum(xs)[:-1]]) * xs)
    programs = [e for e in p.events if e.cat == "program"]
    assert len(programs) == 2 and all("interpreter" in e.name for e in programs)
    assert not any(e.cat == "compile" for e in p.events)  # nothing is compiled
