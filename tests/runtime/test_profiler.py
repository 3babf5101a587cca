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
    assert next(e for e in spans if e["cat"] == "gemm")["args"]["flops"] == 2 * 64 * 32 * 16


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


def test_one_profile_at_a_time():
    with fj.profile():
        with pytest.raises(RuntimeError, match="another profile"):
            with fj.profile():
                pass
    assert not hooks.SLOW_PATH[0]
