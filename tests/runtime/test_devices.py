"""Devices and the multi-device executor: ``fj.devices``, ``fj.device``, partitioned
programs run on one thread per virtual CPU device, and a failing partition cancels the
step on every device."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

import flowjit as fj
from flowjit.codegen_cpu import jit
from flowjit.ir.registry import get
from flowjit.runtime import devices as devices_module
from flowjit.runtime.multi_device import MultiDeviceExecutable


@pytest.fixture
def four_cpus(monkeypatch):
    monkeypatch.setenv("FLOWJIT_CPU_DEVICES", "4")


def _two_branches(x, y):
    with fj.device("cpu:1"):
        a = fj.tanh(x) * 2
    with fj.device("cpu:2"):
        b = fj.exp(y) + 1
    return a @ b + x


def _inputs(n=8, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, n)).astype(np.float32), rng.standard_normal((n, n)).astype(np.float32)


def test_devices_lists_cpu0_and_the_virtual_cpus(monkeypatch):
    monkeypatch.delenv("FLOWJIT_CPU_DEVICES", raising=False)
    assert [str(d) for d in fj.devices() if d.kind == "cpu"] == ["cpu:0"]
    monkeypatch.setenv("FLOWJIT_CPU_DEVICES", "3")
    assert [str(d) for d in fj.devices() if d.kind == "cpu"] == ["cpu:0", "cpu:1", "cpu:2"]
    assert fj.devices()[1] == "cpu:1"


def test_device_names_are_checked_when_the_block_is_entered(four_cpus):
    with pytest.raises(fj.DeviceError, match=r"no device cpu:9; the devices are cpu:0, cpu:1, cpu:2, cpu:3"):
        fj.device("cpu:9")
    with pytest.raises(fj.DeviceError, match="not a device name"):
        fj.device("tpu:0")
    assert fj.device("/device:CPU:1").name == "cpu:1"  # TF's spelling


def test_a_partitioned_program_matches_the_interpreter_and_runs_on_device_threads(four_cpus):
    x, y = _inputs()
    f = fj.function(_two_branches)
    want = fj.function(_two_branches, interpret=True)(x, y)
    for _ in range(3):  # the first call compiles, later ones run the drivers
        np.testing.assert_allclose(f(x, y), want, rtol=1e-5, atol=1e-5)
    entry = next(iter(f._cache.values()))
    assert isinstance(entry.executable, MultiDeviceExecutable)
    assert sorted(entry.executable.devices) == ["cpu:0", "cpu:1", "cpu:2"]
    names = {t.name for t in threading.enumerate()}
    assert {"flowjit-cpu:1", "flowjit-cpu:2"} <= names


def test_a_new_shape_retraces_and_each_partition_recompiles_for_it(four_cpus):
    f = fj.function(_two_branches)
    for n in (4, 16):
        x, y = _inputs(n, seed=n)
        np.testing.assert_allclose(f(x, y), fj.function(_two_branches, interpret=True)(x, y), rtol=1e-5, atol=1e-5)
    assert f.trace_count == 2


def test_function_device_places_everything_there(four_cpus):
    f = fj.function(lambda x: fj.exp(x) + 1, device="cpu:3")
    x = np.arange(6, dtype=np.float32)
    np.testing.assert_allclose(f(x), np.exp(x) + 1, rtol=1e-6)
    fused = f.ir(x, stage="fused")
    assert {op.device for op in fused.body.ops} == {"cpu:3"} and fused.arg_devices == ["cpu:3"]
    with pytest.raises(fj.DeviceError, match="no device cpu:4"):
        fj.function(lambda x: x, device="cpu:4")


def test_variables_created_under_a_device_are_updated_there(four_cpus):
    with fj.device("cpu:2"):
        w = fj.Variable(np.ones(4, np.float32), name="w")
    assert w.device == "cpu:2"

    @fj.function
    def step(x):
        w.assign(w * 0.5 + x)
        return (w * x).sum()

    x = np.arange(4, dtype=np.float32)
    got = step(x)
    np.testing.assert_allclose(w.numpy(), 0.5 + x)
    np.testing.assert_allclose(got, ((0.5 + x) * x).sum(), rtol=1e-6)
    fn = step.ir(x, stage="partition")
    (assign,) = [op for op in fn.body.ops if op.name == "assign"]
    assert assign.device == "cpu:2"
    assert "%w: f32[4] var @cpu:2" in str(fn)


def test_a_failing_partition_cancels_the_step_on_every_device(four_cpus, monkeypatch):
    x, y = _inputs()
    f = fj.function(_two_branches)
    want = f(x, y)
    f(x, y)                             # hot: its programs' full code is made (tiers)
    assert jit.wait_for_upgrades(120)   # by threads of the tiers', not the step's
    # The threads that exist now, not their count: one that ends meanwhile (an earlier test's)
    # is no leak (5 == 6 on a clean clone's suite run, when the check was a count).
    before = set(threading.enumerate())

    def boom(*args, **kwargs):
        raise ValueError("matmul exploded")

    monkeypatch.setattr(get("matmul"), "impl", boom)
    for _ in range(2):  # cpu:0 waits in a recv for the matmul's result: it must not hang
        with pytest.raises(ValueError, match="matmul exploded") as info:
            f(x, y)
        note = "\n".join(getattr(info.value, "__notes__", []))
        assert "on device cpu:1, op matmul (test_devices.py:" in note, note
    monkeypatch.undo()
    np.testing.assert_allclose(f(x, y), want)  # the next step runs normally
    leaked = [t.name for t in threading.enumerate() if t not in before]
    assert not leaked, leaked  # no thread per step, none leaked


def test_first_call_failure_names_the_op_too(four_cpus, monkeypatch):
    x, y = _inputs(6)

    def boom(*args, **kwargs):
        raise RuntimeError("no BLAS today")

    monkeypatch.setattr(get("matmul"), "impl", boom)
    with pytest.raises(RuntimeError, match="no BLAS today") as info:
        fj.function(_two_branches)(x, y)
    assert any("on device cpu:1, op matmul" in n for n in info.value.__notes__)


LIST_DEVICES = """
import sys
import flowjit as fj
names = [d.name for d in fj.devices()]
print(names, "flowjit.codegen_cuda" in sys.modules)
"""


@pytest.mark.skipif(importlib.util.find_spec("cupy") is not None, reason="cupy is installed: a GPU may be there")
def test_listing_devices_without_cupy_imports_no_cuda_backend():
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_ENABLE_CUDASIM", "FLOWJIT_CUDA_SIMULATOR_DEVICES")}
    out = subprocess.run([sys.executable, "-c", LIST_DEVICES], capture_output=True, text=True, check=True, env=env)
    assert out.stdout.split() == ["['cpu:0']", "False"]
    # The simulator asked for in the environment still lists its devices.
    env.update(NUMBA_ENABLE_CUDASIM="1", FLOWJIT_CUDA_SIMULATOR_DEVICES="2")
    out = subprocess.run([sys.executable, "-c", LIST_DEVICES], capture_output=True, text=True, check=True, env=env)
    assert out.stdout.split() == ["['cpu:0',", "'cuda:0',", "'cuda:1']", "True"]


def test_a_device_equals_its_name_and_cpu_0_equals_numpys_cpu():
    from flowjit.runtime.devices import Device
    d = Device("cpu", 0)
    assert d == "cpu:0" and d == "cpu" and "cpu" == d and np.zeros(2).device == d
    assert Device("cpu", 1) != "cpu" and Device("cpu", 0, "/job:ps/task:0") != "cpu"
    assert fj.__array_namespace_info__().default_device() == np.asarray(fj.from_dlpack(np.ones(2))).device


def test_a_compile_does_not_search_the_path_for_cupy_each_time(monkeypatch):
    # Whether cupy is installed was looked up on sys.path at every trace (0.28 ms a compile,
    # 52,000 stat calls in one test file); an installation does not change under a process.
    # (The lookup happens only while numba is not loaded and the simulator not asked for.)
    monkeypatch.delitem(sys.modules, "numba", raising=False)
    monkeypatch.delenv("NUMBA_ENABLE_CUDASIM", raising=False)
    devices_module.device_names()
    searched = []
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: searched.append(name) or real(name, *a))
    for _ in range(3):
        devices_module.device_names()
    assert "cupy" not in searched
