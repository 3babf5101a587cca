"""The partition pass: exactly one send/recv pair per cross-device edge, shown in the
printed IR and parsed back; constants copied instead of sent; fusion never puts a recv
before its send."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import flowjit as fj
from flowjit.ir import interpret, parse, print_function


@pytest.fixture(autouse=True)
def four_cpus(monkeypatch):
    monkeypatch.setenv("FLOWJIT_CPU_DEVICES", "4")


def _edges(fn):
    sends = {op.attrs["key"]: op for op in fn.body.ops if op.name == "send"}
    recvs = {op.attrs["key"]: op for op in fn.body.ops if op.name == "recv"}
    assert sends.keys() == recvs.keys()
    return sorted((sends[k].device, recvs[k].device, recvs[k].results[0].type.shape) for k in sends)


def two_layers(x, w1, w2):
    with fj.device("cpu:1"):
        h = fj.nn.relu(x @ w1)
    with fj.device("cpu:2"):
        return fj.nn.softmax(h @ w2)


def _layer_inputs():
    rng = np.random.default_rng(0)
    return (rng.standard_normal((8, 5)).astype(np.float32), rng.standard_normal((5, 6)).astype(np.float32),
            rng.standard_normal((6, 3)).astype(np.float32))


def test_a_two_device_program_has_exactly_the_expected_cross_device_edges():
    f = fj.function(two_layers)
    fn = f.ir(*_layer_inputs(), stage="partition")
    # x and w1 go from the host (cpu:0) to layer 1, w2 to layer 2, h from layer 1 to
    # layer 2; the result stays on cpu:2, where the executor collects it.
    assert _edges(fn) == [("cpu:0", "cpu:1", (5, 6)), ("cpu:0", "cpu:1", (8, 5)),
                          ("cpu:0", "cpu:2", (6, 3)), ("cpu:1", "cpu:2", (8, 6))]
    text = print_function(fn)
    assert 'send %x {key="' in text and 'dst="cpu:1"} @cpu:0' in text
    assert print_function(parse(text)) == text
    np.testing.assert_allclose(f(*_layer_inputs()), fj.function(two_layers, interpret=True)(*_layer_inputs()),
                               rtol=1e-5, atol=1e-6)


def test_one_pair_per_value_and_device_and_constants_are_copied():
    big = np.arange(64, dtype=np.float32)

    def f(x):
        with fj.device("cpu:1"):
            a = x * big + 1
            b = x - big
        with fj.device("cpu:0"):
            return a * b + big

    fn = fj.function(f).ir(np.ones(64, np.float32), stage="partition")
    assert _edges(fn) == [("cpu:0", "cpu:1", (64,)), ("cpu:1", "cpu:0", (64,)), ("cpu:1", "cpu:0", (64,))]
    consts = [op.device for op in fn.body.ops if op.name == "constant" and op.results[0].type.shape == (64,)]
    assert sorted(consts) == ["cpu:0", "cpu:1"]


def test_the_partitioned_program_runs_in_order_on_the_interpreter():
    fn = fj.function(two_layers).ir(*_layer_inputs(), stage="partition")
    want = fj.function(two_layers, interpret=True)(*_layer_inputs())
    np.testing.assert_allclose(interpret(fn, list(_layer_inputs()))[0], want, rtol=1e-6)


def test_fusion_keeps_each_recv_after_its_send():
    # exp(x) and the final add both run on cpu:0 and loop alike, but fusing them would put
    # the send of exp(x) after the recv of c, which waits for it: a deadlock.
    def f(x):
        a = fj.exp(x)
        with fj.device("cpu:1"):
            c = a * 2
        return c + a

    x = np.linspace(-1, 1, 16).astype(np.float32)
    g = fj.function(f)
    fused = g.ir(x, stage="fused")
    order = {(op.name, op.attrs["key"]): i for i, op in enumerate(fused.body.ops) if op.name in ("send", "recv")}
    for (name, key), i in order.items():
        if name == "recv":
            assert order[("send", key)] < i, str(fused)
    result = {}
    t = threading.Thread(target=lambda: result.setdefault("y", g(x)), daemon=True)
    t.start()
    t.join(timeout=60)
    assert not t.is_alive(), "the partitioned program deadlocked"
    np.testing.assert_allclose(result["y"], np.exp(x) * 3, rtol=1e-6)
