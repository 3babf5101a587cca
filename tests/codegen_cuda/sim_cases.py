"""The CUDA backend under numba's CUDA simulator, or on a GPU, against flowjit's NumPy
interpreter.

Run by ``test_cuda_backend.py`` in a subprocess with ``NUMBA_ENABLE_CUDASIM=1`` (the
simulator must be on before numba is imported), and in one without it, where it runs only
on a machine with a GPU (``tests.codegen_cuda.target``); skipped anywhere else. No simulated
device is listed (``FLOWJIT_CUDA_SIMULATOR_DEVICES`` unset) while programs are traced, so
placement leaves them on one device and each test hands the backend the fused program
itself. The simulator runs a Python thread per GPU thread, so arrays stay
at a few hundred elements; rows kernels get 8 threads and elementwise ones 32, in at
most 4 blocks, so the grid-stride loops over elements and rows and the strided column
loops all take more than one trip.

Tolerances (``tests.registry.case.kernel_tolerance``): float32 rtol 2e-5, atol 1e-6; float64 1e-12; ints
and bools exact.
"""

from __future__ import annotations

import sys
import warnings

import numpy as np
import pytest

from tests.codegen_cuda.target import SIMULATED, other_device, require_cuda_target  # noqa: E402

require_cuda_target("test_cuda_backend.py")

import flowjit as fj  # noqa: E402
from flowjit.codegen_cuda import (  # noqa: E402
    CudaDeviceError,
    CudaUnsupportedError,
    cuda_devices,
    feasible,
    is_device_array,
    kernel_stats,
    matmul,
    to_device,
    to_host,
    why_not,
)
from flowjit.codegen_cuda.compile import load_plan  # noqa: E402
from flowjit.codegen_cuda.render import cuda_kernel_plan  # noqa: E402
from flowjit.ir.errors import FlowjitTypeError, KernelCompileError  # noqa: E402
from flowjit.ir.interpreter import interpret, run_block  # noqa: E402
from flowjit.ir.registry import Primitive  # noqa: E402
from flowjit.ir.types import TensorType  # noqa: E402
from flowjit.lowering import evaluate  # noqa: E402
from tests.codegen_cuda.blocks import block_source, compile_block, cuda_executable, supported  # noqa: E402
from tests.codegen_cuda.helpers import (  # noqa: E402
    assert_matches,
    case_block,
    fused,
    fusion_ops,
    hand_built_kernel,
    train_inputs,
    train_step,
    values_at,
)
from tests.random_programs import random_program  # noqa: E402
from tests.registry.test_compiled import COMPLEX_REFUSED  # noqa: E402
from tests.registry.test_generic import one_case_per_primitive_and_dtype  # noqa: E402
from tests.test_programs import ZERO_D_REDUCTIONS, nested_pads, zero_d_input  # noqa: E402

# The simulator's block manager polls its threads while holding the GIL; a short switch
# interval lets the threads past a barrier run sooner (3-5x faster rows kernels).
sys.setswitchinterval(2e-4)

RNG = np.random.default_rng(0)


def _f32(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def run_fusion(op, arrays: list[np.ndarray]) -> list[np.ndarray]:
    """The fusion op's kernel on ``arrays`` (copied to the device), results on the host."""
    kernel = compile_block(op.blocks[0], op.attrs["name"], op.attrs["lines"])
    return [to_host(x) for x in kernel(*[to_device(a) for a in arrays])]


def check_function(f, *args: np.ndarray) -> None:
    """Every fusion of ``f`` at ``args`` as a kernel against the interpreter's block, on
    the interpreter's values of the kernel's inputs."""
    fn = fused(f, *args)
    env = values_at(fn, list(args))
    ops = fusion_ops(fn)
    assert ops
    for op in ops:
        assert supported(op.blocks[0]) is None, supported(op.blocks[0])
        ins = [env[v.id] for v in op.inputs]
        assert_matches(run_fusion(op, ins), run_block(op.blocks[0], ins))


@pytest.fixture(autouse=True)
def _quiet():
    # The simulator computes with NumPy scalars: overflow to inf warns as it goes.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        yield


# ---- kernels from traced programs -----------------------------------------------------------
def test_gelu_elementwise_chain():
    # 6 x 40 = 240 elements over 4 blocks of 32 threads: two trips of the grid-stride loop.
    x = _f32(6, 40)
    check_function(lambda x: fj.nn.gelu(x), x)


def test_bias_add_broadcast_and_activation():
    x, b = _f32(5, 24), _f32(24)
    check_function(lambda x, b: fj.tanh(x + b) * b[None, :], x, b)


def test_softmax_rows():
    # 9 rows (4 blocks: grid-stride over rows) of 40 (8 threads: strided columns).
    check_function(lambda x: fj.nn.softmax(x), _f32(9, 40))


def test_layernorm_rows():
    x, g, b = _f32(7, 36), _f32(36), _f32(36)
    check_function(lambda x, g, b: fj.nn.layer_norm(x, g, b), x, g, b)


def test_reductions_of_every_layout():
    x = _f32(6, 5, 4)
    check_function(lambda x: (x.max(axis=0) + 1.0, x.sum(axis=(0, 2)), x.sum()), x)
    check_function(lambda x: fj.argmax(x, axis=1), x)
    check_function(lambda x: fj.argmin(x.reshape(6, 20), axis=1), x)
    xi = (RNG.integers(-50, 50, (5, 30))).astype(np.int32)
    check_function(lambda x: (x.sum(axis=1), (x > 3).any(axis=1), (x > -40).all(axis=1)), xi)


def test_row_and_element_outputs_of_one_kernel():
    # A row's result (thread 0 writes it) next to the row's elements, and an output that
    # needs no reduction at all (its own elementwise launch).
    x = _f32(5, 33)

    def f(x):
        m = x.max(axis=1, keepdims=True)
        return fj.exp(x - m), m, x * 2.0
    check_function(f, x)


def test_layout_ops_inside_kernels():
    x, y = _f32(6, 8), _f32(8, 6)
    check_function(lambda x, y: fj.concatenate([x, y.T * 2.0], axis=1)[:, ::3] + 1.0, x, y)
    check_function(lambda x: fj.pad(x, ((1, 2), (0, 3))) * 3.0, x)
    check_function(lambda x: fj.reshape(x, (4, 12)).T + fj.iota(np.float32, (12, 4), 0), x)
    check_function(lambda x, y: fj.where(x > 0, x, y.T) - fj.expand_dims(x[:, 0], 1), x, y)


def test_nested_pads():
    check_function(nested_pads(6), _f32(3, 4))


@pytest.mark.parametrize("name", list(ZERO_D_REDUCTIONS))
def test_reductions_of_nothing(name):
    # Of a 0-d value, over no axes, keeping dims, beside other outputs, in gradients.
    check_function(ZERO_D_REDUCTIONS[name][0], zero_d_input(name))

def test_every_fusible_primitive_of_the_registry():
    # One case per primitive, dtype and arity of the registry's generic tests, lowered to
    # loop IR and rendered as a one-op kernel (float16, empty arrays and the complex forms of
    # the functions the loop IR leaves to NumPy are not supported: `supported` says so),
    # against the interpreter.
    checked, roles = 0, set()
    for case in one_case_per_primitive_and_dtype():
        body, fn, arrays = case_block(case)
        reason = supported(body)
        if reason is not None:
            refused = any(f"{p} of c" in reason and "has no loop lowering" in reason for p in COMPLEX_REFUSED)
            assert "float16" in reason or "empty" in reason or refused, (case.id, reason)
            continue
        kernel = compile_block(body, case.prim)
        got = [to_host(x) for x in kernel(*[to_device(a) for a in arrays])]
        try:
            assert_matches(got, interpret(fn, arrays))
        except AssertionError as e:
            raise AssertionError(f"{case.id}: {e}") from None
        checked += 1
        op = body.ops[-1]
        roles.add((op.primitive.kind, op.primitive.role if op.primitive.kind == "layout" else
                   (op.primitive.reducer or ("",))[0]))
    assert checked > 150
    assert {k for k, _ in roles} == {"elementwise", "reduction", "layout"}, roles
    assert {"broadcast", "permute_axes", "strided_window", "join", "row_major_reshape"} <= {
        r for k, r in roles if k == "layout"}, roles
    assert ("reduction", "arg") in roles, roles


def test_a_nest_reading_a_value_an_earlier_nest_sums_runs_after_it():
    # Random program 79: the column sum of v1 and the sum over v1 are nests with temp
    # buffers; the output's nest reads the second sum through a top-level Let, so it must
    # not share a launch with the nest that fills it.
    x = RNG.standard_normal((3, 1))

    def f(x):
        v1 = x - fj.mean(x, axis=0, keepdims=True)
        return -(x + fj.mean(fj.cos(v1), axis=None, keepdims=True))
    check_function(f, x)
    check_function(fj.grad(lambda x: f(x).sum()), x)


@pytest.mark.parametrize("shape", [(3, 40), (40, 3), (2, 3, 300)])
def test_reductions_over_two_axes_split_rows_or_their_elements(shape):
    # A block's 8 threads take whole rows when rows are shorter than the block, else they
    # go through the rows one by one and split each (adjacent threads, adjacent elements);
    # 300 > 128 elements also runs the lowering's blocks of float32 partial sums.
    x = RNG.standard_normal(shape).astype(np.float32)
    check_function(lambda x: (x.sum(), fj.argmax(x.reshape(-1)), x.max(axis=(-2, -1))), x)
    if len(shape) == 3:
        check_function(lambda x: x - x.mean(axis=(1, 2), keepdims=True), x)


def test_a_loop_ir_kernel_built_by_hand_against_the_evaluator():
    # Statements today's lowering does not write (If, a loop from 1 in steps of 2, an
    # update under a condition, a top-level accumulator whose value a later launch reads)
    # rendered and run against flowjit.lowering.evaluate, the loop IR's own oracle.
    kernel = hand_built_kernel()
    plan = cuda_kernel_plan(kernel)
    assert [launch.kind for launch in plan.launches] == ["rows", "elements", "grid", "single", "elements"]
    assert len(plan.scratch) == 1
    x = _f32(9, 13)
    outs = [np.zeros((9, 13), np.float32), np.zeros(9, np.int64), np.zeros((), np.float32),
            np.zeros(9, np.float32)]
    cuda_kernel = load_plan(plan, "by_hand", "", [TensorType(x.shape, x.dtype)],
                            [TensorType(o.shape, o.dtype) for o in outs])
    evaluate(kernel, [x], outs)
    assert_matches([to_host(o) for o in cuda_kernel(to_device(x))], outs)


@pytest.mark.parametrize("shape", [(50, 3), (3, 2100)])
def test_column_reductions_few_or_many_columns(shape):
    # Fewer columns than COLUMN_THREADS: a block per column, its threads splitting the
    # rows (a tree of partial sums, thread 0 storing); more: a thread per column.
    x = RNG.standard_normal(shape).astype(np.float32)
    check_function(lambda x: (x.sum(axis=0), x.max(axis=0) * 2.0, (x > 0).any(axis=0)), x)


@pytest.mark.parametrize("fill", ["ties", "nan"])
def test_argmax_over_everything_takes_the_first_winner_across_blocks(fill):
    # The grid launch's 4 blocks each find their own first winner; the block combining
    # them keeps the smallest position among equal values (and the first NaN), as NumPy.
    x = RNG.integers(0, 3, 301).astype(np.float32)
    x[[7, 150, 299]] = 5.0
    if fill == "nan":
        x[[90, 200]] = np.nan
    check_function(lambda x: (fj.argmax(x), fj.argmin(x), x.max(), x.sum()), x)
    check_function(lambda x: (fj.argmax(x.reshape(7, 43)), x.reshape(43, 7).min()), x)


def test_reductions_over_everything_one_after_another():
    # A softmax and a variance over a whole vector: the max, then the sum of exp(x - max)
    # (its blocks of 128 also stored), each a grid launch whose blocks' partial results
    # the next single launch combines; the value between them travels in scratch.
    x = _f32(1000)
    check_function(lambda x: (fj.nn.softmax(x), ((x - x.mean()) ** 2).mean()), x)
    (op,) = fusion_ops(fused(lambda x: fj.nn.softmax(x), x))
    kernel = compile_block(op.blocks[0], op.attrs["name"])
    assert [launch.kind for launch in kernel.launches] == ["grid", "single", "grid", "single", "elements"]


def test_zero_d_inputs_and_outputs():
    # A 0-d argument broadcast into a nest, a 0-d sum of everything, and a 0-d result
    # computed from 0-d values only.
    x, s = _f32(5, 7), np.float32(1.5).reshape(())
    check_function(lambda x, s: (x * s, (x * s).sum(), s * 2.0 + 1.0), x, s)


@pytest.mark.parametrize("seed", range(24))
def test_random_programs(seed):
    # tests/test_differential.py's programs (and the smooth ones' gradients): every fusion
    # the generator supports, against the interpreter. What it does not support (a block
    # with reductions of two shapes) the executable splits into one-op kernels.
    program = random_program(seed)
    xs = program.inputs()
    if SIMULATED and max(x.size for x in xs) > 1000:
        pytest.skip("the simulator runs a Python thread per GPU thread: too large")
    functions = [program.function(fj)]
    if program.smooth:
        functions.append(fj.grad(program.loss(fj), argnums=tuple(range(len(xs)))))
    for f in functions:
        fn = fused(f, *xs)
        env = values_at(fn, xs)
        for op in fusion_ops(fn):
            if supported(op.blocks[0]) is not None:
                continue
            ins = [env[v.id] for v in op.inputs]
            try:
                assert_matches(run_fusion(op, ins), run_block(op.blocks[0], ins))
            except Exception as e:
                raise AssertionError(f"{op.attrs['name']} of\n{program}\n{e}") from e

# ---- shape-generic kernels and errors ----------------------------------------------------------
def test_training_step_kernels():
    # The fused forward and backward of a classifier: reshapes of row sums, the bias
    # gradient's column sum, relu's select, a loss over the batch.
    check_function(train_step, *train_inputs(RNG))


def test_new_batch_size_reuses_the_compiled_kernel():
    def f(x):
        return fj.nn.softmax(x * 2.0)
    (a,) = fusion_ops(fused(f, _f32(4, 24)))
    (b,) = fusion_ops(fused(f, _f32(6, 24)))
    assert block_source(a.blocks[0], a.attrs["name"]) == block_source(b.blocks[0], b.attrs["name"])
    before = kernel_stats()
    for op, batch in ((a, 4), (b, 6)):
        x = _f32(batch, 24)
        assert_matches(run_fusion(op, [x]), run_block(op.blocks[0], [x]))
    after = kernel_stats()
    assert after["compiled"] - before["compiled"] == 1
    assert after["reused"] - before["reused"] == 1


def test_a_kernel_called_with_another_shape_says_so():
    # A CudaKernel is compiled for its types (its outputs and launch sizes are worked out
    # from them at the first call); called with another batch size it ran with its first
    # call's sizes and returned outputs of its first shape, silently wrong (past the end of
    # smaller inputs on a GPU). It names the kernel, the input and both types instead.
    (op,) = fusion_ops(fused(lambda x: fj.nn.softmax(x * 2.0), _f32(4, 24)))
    kernel = compile_block(op.blocks[0], op.attrs["name"])
    x = _f32(4, 24)
    assert_matches([to_host(y) for y in kernel(to_device(x))], run_block(op.blocks[0], [x]))
    for bad in (_f32(6, 24), _f32(4, 24).astype(np.float64)):
        with pytest.raises(FlowjitTypeError) as info:
            kernel(to_device(bad))
        message = str(info.value)
        assert kernel.name in message and "(4, 24)" in message and str(bad.dtype) in message, message
    assert_matches([to_host(y) for y in kernel(to_device(x))], run_block(op.blocks[0], [x]))


def test_launch_configurations_are_worked_out_once(monkeypatch):
    # Which launches run and how they are sized is evaluated on the host from loop-IR
    # expressions (40-110 us a call on a 2-core Xeon): once, at a kernel's first call (its
    # types are its own), then reused; a sum over everything (grid, then single: told how
    # many blocks the grid launch ran) gives the same results at every call.
    from flowjit.codegen_cuda import compile as cuda_compile
    calls = []
    real = cuda_compile.launch_config

    def counted(launch, sizes):
        calls.append(launch.fname)
        return real(launch, sizes)
    monkeypatch.setattr(cuda_compile, "launch_config", counted)
    (op,) = fusion_ops(fused(lambda x: x - x.mean(), _f32(6, 24)))
    kernel = compile_block(op.blocks[0], op.attrs["name"])
    for seed in range(3):
        x = np.random.default_rng(seed).standard_normal((6, 24)).astype(np.float32)
        assert_matches([to_host(y) for y in kernel(to_device(x))], run_block(op.blocks[0], [x]))
    assert sorted(calls) == sorted(launch.fname for launch in kernel.launches)


def test_compile_error_names_the_ops_and_lines():
    fn = fused(lambda x: fj.tanh(x) * 3.0, _f32(4, 8))
    (op,) = fusion_ops(fn)
    tanh = next(o for o in op.blocks[0].ops if o.name == "tanh")
    p = tanh.primitive
    # A primitive whose template calls a function the scalar vocabulary does not define.
    tanh.primitive = Primitive("broken_tanh", kind="elementwise", rule=p.rule, impl=p.impl, template="no_such_fn(a)")
    with pytest.raises(KernelCompileError) as info:  # the runtime's lowering names it, before CUDA
        compile_block(op.blocks[0], op.attrs["name"], op.attrs["lines"])
    message = str(info.value)
    assert op.attrs["name"] in message and "sim_cases.py:" in message and "no_such_fn" in message
    assert "broken_tanh" in message


def test_transposed_row_sums_run_as_one_kernel():
    # A row's sum read by another row (through a transpose): a block per output element,
    # each summing the row it reads.
    x = _f32(5, 5)
    check_function(lambda x: x / x.sum(axis=1, keepdims=True).T, x)


def test_an_elements_launch_past_the_parameter_limit_splits_by_outputs():
    # 40 inputs and 40 outputs of rank 2 (an optimizer's update of 40 tensors): 80 arrays
    # are more parameter bytes than one launch may take, so the outputs go in halves.
    xs = [_f32(3, 4) for _ in range(40)]
    (op,) = fusion_ops(fused(lambda *xs: tuple(x * 2.0 - 1.0 for x in xs), *xs))
    kernel = compile_block(op.blocks[0], op.attrs["name"])
    assert len(kernel.launches) > 1 and {launch.kind for launch in kernel.launches} == {"elements"}
    assert_matches([to_host(y) for y in kernel(*[to_device(x) for x in xs])], run_block(op.blocks[0], xs))


def test_blocks_past_the_parameter_limit_run_op_by_op():
    # 60 inputs of rank 2: more kernel parameter bytes than CUDA allows in one launch,
    # so the executable runs that block's ops one kernel each.
    xs = [_f32(3, 4) for _ in range(60)]

    def f(*xs):
        total = xs[0]
        for x in xs[1:]:
            total = total + x
        return total
    fn = fused(f, *xs)
    (op,) = fusion_ops(fn)
    assert "parameters" in supported(op.blocks[0]) and feasible(op)
    exe = cuda_executable(fn, "cuda:0")
    assert "parameters" in exe.unfused[op.attrs["name"]]
    np.testing.assert_allclose(to_host(exe.run(*xs)[0]), sum(xs), rtol=2e-5, atol=1e-5)
    x16 = np.zeros((4, 4), np.float16)
    (op,) = fusion_ops(fused(lambda x: x * 2, x16))
    assert "float16" in supported(op.blocks[0])


# ---- memory and matmul ---------------------------------------------------------------------
def test_matmul_tiled_kernel():
    # Sizes that are not multiples of the tile, a batch broadcast against a matrix.
    a, b = _f32(2, 5, 11), _f32(11, 9)
    got = to_host(matmul(to_device(a), to_device(b)))
    np.testing.assert_allclose(got, a @ b, rtol=2e-5, atol=1e-5)
    ai, bi = RNG.integers(-9, 9, (3, 7)).astype(np.int64), RNG.integers(-9, 9, (7, 4)).astype(np.int64)
    np.testing.assert_array_equal(to_host(matmul(to_device(ai), to_device(bi))), ai @ bi)


def test_device_round_trip_keeps_shape_and_dtype():
    for x in (np.arange(6, dtype=np.int32).reshape(2, 3), np.array(2.5, np.float64), np.array([True, False])):
        d = to_device(x, other_device())
        assert is_device_array(d)
        got = to_host(d)
        assert got.shape == x.shape and got.dtype == x.dtype
        np.testing.assert_array_equal(got, x)


@pytest.mark.skipif(not SIMULATED, reason="a GPU's devices are the ones its driver lists")
def test_simulated_devices(monkeypatch):
    assert cuda_devices() == []
    monkeypatch.setenv("FLOWJIT_CUDA_SIMULATOR_DEVICES", "2")
    assert cuda_devices() == ["cuda:0", "cuda:1"]
    monkeypatch.setenv("FLOWJIT_CUDA_SIMULATOR_DEVICES", "two")
    with pytest.raises(CudaDeviceError):
        cuda_devices()


# ---- executables ----------------------------------------------------------------------------
def mlp(x, w, b, w2):
    h = fj.nn.gelu(x @ w + b)
    return fj.nn.softmax(h @ w2), fj.nn.layer_norm(h)


def test_executable_runs_a_fused_mlp():
    x, w, b, w2 = _f32(6, 20), _f32(20, 12) * 0.3, _f32(12), _f32(12, 5)
    fn = fused(mlp, x, w, b, w2)
    k = other_device()
    exe = cuda_executable(fn, f"cuda:{k}")
    outs = exe.run(x, to_device(w, k), b, w2)  # host and device arrays mixed
    assert all(is_device_array(o) for o in outs)
    want = interpret(fj.function(mlp).ir(x, w, b, w2), [x, w, b, w2])
    for g, e in zip(outs, want, strict=True):
        np.testing.assert_allclose(to_host(g), e, rtol=1e-4, atol=1e-5)
    listing = exe.kernel_listing()
    assert "# its loop IR:" in listing and "#     for i1 in 0..n0:" in listing and "cuda.syncthreads()" in listing
    # Constants and kernels are reused by a second call.
    again = exe.run(x, w, b, w2)
    np.testing.assert_allclose(to_host(again[0]), to_host(outs[0]), rtol=0, atol=0)


def test_executable_copies_returned_arguments_and_runs_lone_layout_ops():
    x, w = _f32(4, 6), _f32(3, 6)
    fn = fused(lambda x, w: (x, x @ w.T), x, w)  # the transpose stays outside: a one-op kernel
    assert any(op.primitive.kind == "layout" for op in fn.body.ops)
    dx = to_device(x)
    out = cuda_executable(fn, "cuda:0").run(dx, w)
    assert out[0] is not dx
    np.testing.assert_array_equal(to_host(out[0]), x)
    np.testing.assert_allclose(to_host(out[1]), x @ w.T, rtol=2e-5, atol=1e-5)


def test_executable_rejects_what_it_cannot_run():
    fn = fused(lambda x: fj.cumsum(x, axis=0) + 1.0, _f32(4, 3))
    cumsum = next(op for op in fn.body.ops if op.name == "cumsum")
    assert not feasible(cumsum) and "cumsum" in why_not(cumsum)
    with pytest.raises(CudaUnsupportedError) as info:
        cuda_executable(fn, f"cuda:{other_device()}")
    assert "cumsum" in str(info.value) and f"cuda:{other_device()}" in str(info.value) and "opaque" in str(info.value)
    assert all(feasible(op) for op in fn.body.ops if op is not cumsum)
    with pytest.raises(fj.FlowjitTypeError, match="must be f32"):
        cuda_executable(fused(lambda x: x + 1.0, _f32(2)), "cuda:0").run(_f32(3))


def test_placed_program_runs_its_cuda_partition_here(monkeypatch):
    # With a simulated device listed, work placed on cuda:0 (explicitly, so the test does
    # not depend on the placement cost model) is cut out by the partition pass and run by
    # the multi-device executor as a CudaExecutable, its inputs arriving through recv.
    monkeypatch.setenv("FLOWJIT_CUDA_SIMULATOR_DEVICES", "1")
    x, w, b = _f32(12, 16), _f32(16, 8), _f32(8)

    def f(x, w, b):
        with fj.device("cuda:0"):
            h = fj.nn.softmax(fj.nn.gelu(x @ w + b))
        return h * 2.0
    g = fj.function(f)
    text = str(g.ir(x, w, b, stage="fused"))
    assert "recv" in text and "@cuda:0" in text, text
    before = kernel_stats()["launches"]
    np.testing.assert_allclose(g(x, w, b), fj.function(f, interpret=True)(x, w, b), rtol=2e-5, atol=1e-6)
    assert kernel_stats()["launches"] > before
