"""The placement pass: user choices kept and checked, variables colocated with their
updates, blocks placed whole, the rest by the cost model; errors name the op, the device
and the devices that would work."""

from __future__ import annotations

import re

import numpy as np
import pytest

import flowjit as fj
from flowjit.ir import parse
from flowjit.passes.partition import partition
from flowjit.passes.placement import DeviceTarget, PlacementError, placement
from tests.codegen_cuda.test_cuda_backend import _env, _passed_or_skip, _pytest
from tests.passes.variable_programs import (
    OPTIMIZERS,
    check_reader_elsewhere_gets_a_copy,
    check_training_elsewhere,
    op_devices,
)

CPUS = DeviceTarget(("cpu:0", "cpu:1", "cpu:2", "cpu:3"))


@pytest.fixture(autouse=True)
def four_cpus(monkeypatch):
    monkeypatch.setenv("FLOWJIT_CPU_DEVICES", "4")


def _devices(fn):
    return [(op.name, op.device) for op in fn.body.ops]


def test_a_program_that_names_no_device_is_left_unplaced():
    fn = fj.function(lambda x: fj.exp(x) + 1).ir(np.ones(3, np.float32), stage="placement")
    assert {op.device for op in fn.body.ops} == {None} and fn.arg_devices == [None]


def test_user_choices_are_kept_and_unplaced_ops_follow_their_inputs():
    def f(x):
        with fj.device("cpu:2"):
            a = fj.exp(x)
        b = fj.tanh(a)  # its one input is on cpu:2: moving it would cost a transfer
        return b + x

    fn = fj.function(f).ir(np.ones(1000, np.float32), stage="placement")
    dev = {op.name: op.device for op in fn.body.ops}
    assert dev["exp"] == "cpu:2" and dev["tanh"] == "cpu:2"
    assert fn.arg_devices == ["cpu:0"]


def test_the_cost_model_moves_the_smaller_input():
    def f(big, small):
        with fj.device("cpu:1"):
            b = big * 2
        return (b + small).sum()  # 4 KB on cpu:1 against 4 bytes on cpu:0

    fn = fj.function(f).ir(np.ones((32, 32), np.float32), np.ones((), np.float32), stage="placement")
    assert dict(_devices(fn))["add"] == "cpu:1"


def test_the_cost_model_sends_heavy_work_to_a_faster_device():
    text = """func @f(%a: f32[512,512], %b: f32[512,512]) -> (f32[512,512]) {
  %0 = matmul %a, %b : f32[512,512]
  return %0
}"""
    gpu = DeviceTarget(("cpu:0", "cuda:0"))
    assert _devices(placement(parse(text), gpu)) == [("matmul", "cuda:0")]
    small = text.replace("512", "4")
    assert _devices(placement(parse(small), gpu)) == [("matmul", "cpu:0")]
    cpu_only = DeviceTarget(("cpu:0", "cuda:0"), feasible=lambda op, d: d.startswith("cpu"))
    assert _devices(placement(parse(text), cpu_only)) == [("matmul", "cpu:0")]


GPU = DeviceTarget(("cpu:0", "cuda:0"))


def test_a_small_program_with_a_constant_stays_on_the_cpu_beside_a_gpu():
    # tanh(x) * 3.0 on 32 floats: the constant 3.0, having no inputs to move, was placed on
    # the GPU (its one element computes faster there), and the mul followed it: a copy to
    # the GPU, a launch and a copy back for 32 multiplications.
    fn = fj.function(lambda x: fj.tanh(x) * 3.0).ir(np.ones((4, 8), np.float32), stage="decompose")
    assert {d for _, d in _devices(placement(fn, GPU))} == {"cpu:0"}


def test_a_constant_goes_where_its_first_reader_runs_and_is_copied_not_sent():
    text = """func @f(%a: f32[512,512], %b: f32[512,512], %x: f32[4]) -> (f32[512,512], f32[4]) {
  %0 = constant {value=2.0} : f32[]
  %1 = matmul %a, %b : f32[512,512]
  %2 = mul %1, %0 : f32[512,512]
  %3 = mul %x, %0 : f32[4]
  return %2, %3
}"""
    fn = placement(parse(text), GPU)
    assert _devices(fn) == [("constant", "cuda:0"), ("matmul", "cuda:0"), ("mul", "cuda:0"), ("mul", "cpu:0")]
    parts = partition(fn)
    assert not [op for op in parts.body.ops if op.primitive.role == "recv" and op.attrs["shape"] == ()]
    assert sorted(op.device for op in parts.body.ops if op.name == "constant") == ["cpu:0", "cuda:0"]


def test_a_result_the_caller_gets_back_counts_its_copy_home():
    # exp of 100,000 floats on a host at 5e8 elements a second: faster on the GPU counting
    # the copy there (120 against 200 us), slower once its result must come back (240).
    slow_host = DeviceTarget(("cpu:0", "cuda:0"), speed={"cpu": 5e8, "cuda": 5e10})
    text = """func @f(%x: f32[100000]) -> (f32[100000]) {
  %0 = exp %x : f32[100000]
  return %0
}"""
    assert _devices(placement(parse(text), slow_host)) == [("exp", "cpu:0")]
    summed = """func @f(%x: f32[100000]) -> (f32[]) {
  %0 = exp %x : f32[100000]
  %1 = reduce_sum %0 {axes=(0,)} : f32[]
  return %1
}"""
    assert _devices(placement(parse(summed), slow_host)) == [("exp", "cuda:0"), ("reduce_sum", "cuda:0")]


def test_elementwise_work_on_host_arrays_stays_on_the_host_beside_a_gpu():
    # A chain over 2**20 floats that arrive from and go back to the host: at the host-GPU
    # link's measured speed (pageable NumPy memory over PCIe, ~4 GB/s on an H200 machine)
    # the copies cost more than the work; a 512**3 matmul still pays for them.
    text = """func @f(%x: f32[1048576]) -> (f32[1048576]) {
  %0 = exp %x : f32[1048576]
  %1 = tanh %0 : f32[1048576]
  return %1
}"""
    assert {d for _, d in _devices(placement(parse(text), GPU))} == {"cpu:0"}


def test_a_device_that_does_not_exist_names_the_op_and_the_devices_that_would_work():
    fn = parse("""func @f(%x: f32[4]) -> (f32[4]) {
  %0 = exp %x : f32[4] @cpu:7  # model.py:12
  return %0
}""")
    with pytest.raises(PlacementError, match=r"exp at model.py:12 is placed on cpu:7 \(fj.device\), which does "
                                             r"not exist; devices that can run it: cpu:0, cpu:1, cpu:2, cpu:3"):
        placement(fn, CPUS)


def test_a_device_without_a_kernel_for_the_op_names_the_devices_that_have_one():
    fn = parse("""func @f(%x: f32[4]) -> (f32[4]) {
  %0 = exp %x : f32[4] @cpu:1  # model.py:3
  return %0
}""")
    target = DeviceTarget(CPUS.devices, feasible=lambda op, d: not (op.name == "exp" and d in ("cpu:1", "cpu:3")))
    with pytest.raises(PlacementError, match=r"exp at model.py:3 is placed on cpu:1 .*has no kernel for it; "
                                             r"devices that can run it: cpu:0, cpu:2"):
        placement(fn, target)


def test_a_variable_stays_where_it_was_created_and_its_reader_elsewhere_gets_a_copy():
    step = check_reader_elsewhere_gets_a_copy("cpu:1")
    text = str(step.ir(np.full(3, 2, np.float32), stage="partition"))
    assert re.search(r"send %w .*dst=\"?cpu:1", text) and "recv" in text, text


def test_an_update_placed_elsewhere_runs_on_its_variables_device():
    # As TensorFlow's resource ops: the new value is computed where the block says and
    # copied to the variable, whose assign runs where the variable lives.
    with fj.device("cpu:2"):
        w = fj.Variable(np.zeros(3, np.float32), name="w")

    @fj.function
    def step(x):
        with fj.device("cpu:1"):
            w.assign(w + x)
            w.assign_add(x * 2)
        return x

    x = np.ones(3, np.float32)
    fn = step.ir(x, stage="placement")
    assert op_devices(fn) == [("add", "cpu:1"), ("mul", "cpu:1"), ("add", "cpu:1"), ("assign", "cpu:2")]
    step(x)
    step(x)
    np.testing.assert_allclose(w.numpy(), [6, 6, 6])


@pytest.mark.parametrize("where", [None, "cpu:0"])
@pytest.mark.parametrize("opt", sorted(OPTIMIZERS))
def test_a_training_step_computed_on_another_device_updates_the_variables_where_they_live(monkeypatch, where, opt):
    monkeypatch.setenv("FLOWJIT_CPU_DEVICES", "2")
    check_training_elsewhere("cpu:1", where, OPTIMIZERS[opt])


def test_unplaced_readers_of_a_variable_go_with_it():
    with fj.device("cpu:3"):
        w = fj.Variable(np.ones(3, np.float32), name="w")

    @fj.function
    def step(x):
        y = w * 2  # unplaced: goes with w
        w.assign(w + 1)
        return y

    fn = step.ir(np.ones(3, np.float32), stage="placement")
    dev = dict(_devices(fn))
    assert dev["mul"] == "cpu:3" and dev["assign"] == "cpu:3"
    np.testing.assert_allclose(step(np.ones(3, np.float32)), [2, 2, 2])
    np.testing.assert_allclose(w.numpy(), [2, 2, 2])


def test_an_op_owning_blocks_runs_on_one_device_with_everything_inside():
    def f(p, x):
        with fj.device("cpu:1"):
            y = fj.cond(p, lambda x: fj.exp(x), lambda x: x * 2, x)
        return y + 1

    p, x = np.array(True), np.arange(3, dtype=np.float32)
    g = fj.function(f)
    fn = g.ir(p, x, stage="placement")
    (cond,) = [op for op in fn.body.ops if op.blocks]
    assert cond.device == "cpu:1" and {op.device for b in cond.blocks for op in b.walk()} == {"cpu:1"}
    np.testing.assert_allclose(g(p, x), np.exp(x) + 1, rtol=1e-6)
    np.testing.assert_allclose(g(np.array(False), x), x * 2 + 1)


def test_variables_on_the_cpu_read_and_trained_on_a_simulated_gpu(tmp_path):
    # numba reads NUMBA_ENABLE_CUDASIM when first imported: the cases run in a subprocess.
    env = _env(tmp_path, NUMBA_ENABLE_CUDASIM="1", FLOWJIT_CUDA_SIMULATOR_DEVICES="1", FLOWJIT_CPU_DEVICES="1")
    _passed_or_skip(_pytest("tests/passes/sim_variable_cases.py", env))


# ---- soft placement (TensorFlow's allow_soft_placement) -------------------------------------------------

NO_EXP_ON_CPU1 = DeviceTarget(CPUS.devices, feasible=lambda op, d: not (op.name == "exp" and d == "cpu:1"))


def test_soft_placement_sends_an_op_its_device_cannot_run_to_the_cheapest_device_that_can():
    fn = parse("""func @f(%x: f32[4]) -> (f32[4]) {
  %0 = tanh %x : f32[4] @cpu:2
  %1 = exp %0 : f32[4] @cpu:1  # model.py:3
  %2 = neg %1 : f32[4] @cpu:1
  return %2
}""")
    with pytest.raises(PlacementError, match=r"exp at model.py:3 is placed on cpu:1 .*has no kernel"):
        placement(fn.clone(), NO_EXP_ON_CPU1)
    soft = DeviceTarget(NO_EXP_ON_CPU1.devices, feasible=NO_EXP_ON_CPU1.feasible, soft=True)
    # Its input is on cpu:2: running it there moves nothing.
    assert _devices(placement(fn, soft)) == [("tanh", "cpu:2"), ("exp", "cpu:2"), ("neg", "cpu:1")]


def test_soft_placement_sends_an_op_on_a_missing_device_where_the_cost_model_says():
    text = """func @f(%x: f32[4]) -> (f32[4]) {
  %0 = exp %x : f32[4] @cpu:7
  return %0
}"""
    with pytest.raises(PlacementError, match="cpu:7 .*does not exist"):
        placement(parse(text), CPUS)
    assert _devices(placement(parse(text), DeviceTarget(CPUS.devices, soft=True))) == [("exp", "cpu:0")]


def test_soft_placement_moves_a_variable_whose_update_its_device_cannot_run_with_the_update():
    fn = parse("""func @f(%x: f32[3], %w: f32[3] var) -> (f32[3], f32[3]) {
  %0 = mul %w, %x : f32[3]
  %1 = assign %w, %0 : f32[3]
  return %0, %1
}""")
    fn.arg_devices = [None, "cpu:1"]
    no_assign = DeviceTarget(CPUS.devices, feasible=lambda op, d: not (op.name == "assign" and d == "cpu:1"))
    with pytest.raises(PlacementError, match=r"assign is placed on cpu:1 \(with Variable w\).*create Variable w "
                                             r"under fj.device\('cpu:0'\)"):
        placement(fn.clone(), no_assign)
    soft = DeviceTarget(no_assign.devices, feasible=no_assign.feasible, soft=True)
    placed = placement(fn, soft)
    assert placed.arg_devices == ["cpu:0", "cpu:0"]
    assert _devices(placed) == [("mul", "cpu:0"), ("assign", "cpu:0")]


def test_an_unplaced_reader_of_a_variable_whose_device_cannot_run_it_goes_where_it_can():
    # Following its variable is a preference of the pass, not the user's choice: never an error.
    fn = parse("""func @f(%w: f32[4] var) -> (f32[4]) {
  %0 = exp %w : f32[4]
  return %0
}""")
    fn.arg_devices = ["cpu:1"]
    assert _devices(placement(fn, NO_EXP_ON_CPU1)) == [("exp", "cpu:0")]

