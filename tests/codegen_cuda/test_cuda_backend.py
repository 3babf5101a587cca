"""The CUDA backend: what can be checked in this process, and the simulator and PTX cases
in subprocesses.

numba reads ``NUMBA_ENABLE_CUDASIM`` once, when it is first imported, and this process
imported numba (with flowjit) long before this file: so ``sim_cases.py`` runs in a
subprocess with the simulator on, and ``ptx_cases.py`` in one with it off, each asserting
a clean pytest run and showing its output otherwise. On a machine with a GPU the simulator's
cases run once more without it, on the GPU.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import flowjit as fj
from flowjit.codegen_cuda import cuda_devices, feasible, launch_config, why_not
from flowjit.codegen_cuda.compile import ROW_THREADS
from flowjit.codegen_cuda.launch_plan import COLUMN_THREADS, host_value, jointly_parallel, parallel_vars
from flowjit.ir import dtypes as fjd
from flowjit.lowering.loops import INDEX, Const, Loop, Store, Var
from flowjit.lowering.scalar import apply
from tests.codegen_cuda.blocks import plan_block, supported
from tests.codegen_cuda.helpers import fused, fusion_ops
from tests.test_programs import nested_pads

ROOT = Path(__file__).resolve().parents[2]


def _pytest(path: str, env: dict[str, str], timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", "-rs", "-p", "no:cacheprovider", path],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_ENABLE_CUDASIM", "FLOWJIT_CUDA_SIMULATOR_DEVICES")}
    env["FLOWJIT_CACHE_DIR"] = str(tmp_path / "cache")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.update(extra)
    return env


def _passed_or_skip(r: subprocess.CompletedProcess) -> None:
    """Fail with the subprocess's output unless its pytest run passed; a run that only
    skipped (no CUDA target, no NVVM) skips this test with the same reason."""
    out = r.stdout + r.stderr
    assert r.returncode in (0, 5), out  # 5: no test ran, every module skipped at import
    if not re.search(r"\d+ passed", out):
        reason = re.search(r"SKIPPED \[\d+\] [^:]+:\d+: (.*)", out)
        pytest.skip(reason.group(1) if reason else out[-500:])
    assert not re.search(r"\d+ (failed|error)", out), out


def test_simulator_cases(tmp_path):
    _passed_or_skip(_pytest("tests/codegen_cuda/sim_cases.py", _env(tmp_path, NUMBA_ENABLE_CUDASIM="1")))


GPU_CASES = ("tests/codegen_cuda/sim_cases.py", "tests/runtime/sim_cuda_executable_cases.py",
             "tests/passes/sim_variable_cases.py")


def test_the_simulator_cases_on_a_gpu(tmp_path):
    # The same cases without the simulator: numba's CUDA target compiles them to PTX and
    # the driver runs them, where this machine has a GPU (CI has none: skipped there).
    r = subprocess.run([sys.executable, "-m", "pytest", "-rs", "-p", "no:cacheprovider", *GPU_CASES], cwd=ROOT,
                       env=_env(tmp_path, FLOWJIT_CPU_DEVICES="1"), capture_output=True, text=True, timeout=900)
    _passed_or_skip(r)


def test_ptx_cases(tmp_path):
    _passed_or_skip(_pytest("tests/codegen_cuda/ptx_cases.py", _env(tmp_path)))


def test_no_devices_without_a_gpu_or_the_simulator(monkeypatch):
    # This process runs numba's real CUDA target: the simulator's device count is ignored.
    without = cuda_devices()
    monkeypatch.setenv("FLOWJIT_CUDA_SIMULATOR_DEVICES", "3")
    assert cuda_devices() == without
    assert all(re.fullmatch(r"cuda:\d+", d) for d in without)


def test_importing_the_backend_loads_no_cuda():
    code = ("import sys, flowjit.codegen_cuda\n"
            "print(sorted(m for m in sys.modules if m.startswith(('numba.cuda', 'cupy'))))")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                       env=_env(Path("/nonexistent")))
    assert r.returncode == 0 and r.stdout.strip() == "[]", r.stdout + r.stderr


def _kinds(f, *args) -> list:
    (op,) = fusion_ops(fused(f, *args))
    plan = plan_block(op.blocks[0], op.attrs["name"])
    # Sizes come from the arrays at run time: no dimension of 6 or 40 is in the source.
    assert not re.search(r"\b(6|40)\b", plan.source), plan.source
    return [launch.kind for launch in plan.launches], plan


def test_a_complex_product_steps_its_recurrence_in_every_thread_without_a_tree():
    # Its two "assign" accumulators are read by the step that assigns them: no split runs the
    # loop in parts, so no thread's value is partial. Marked partial, each step had combined
    # them over the block's threads in shared memory (a tree per element: 5.8 s against
    # 0.03 s for a real product of 4x400 in the simulator).
    z = np.exp(1j * np.linspace(0, 6, 1600)).reshape(4, 400)
    real_kinds, real_plan = _kinds(lambda x: fj.prod(x, axis=1), z.real.copy())
    kinds, plan = _kinds(lambda z: fj.prod(z, axis=1), z)
    assert kinds == real_kinds
    assert plan.source.count("syncthreads") <= real_plan.source.count("syncthreads"), plan.source


def test_plans_launch_each_nest_by_what_its_body_needs():
    x = np.zeros((6, 40), np.float32)
    # A thread per element.
    assert _kinds(lambda x: x * 2.0 + 1.0, x)[0] == ["elements"]
    # A block per row: the row's max and sum are block reductions in shared memory, and the
    # row's elements (exp(x - max) beside them) are written by the block's threads.
    kinds, plan = _kinds(lambda x: (fj.nn.softmax(x), x.max(axis=1)), x)
    assert kinds == ["rows"] and "cuda.shared.array(256, np.float64)" in plan.source
    # A sum over everything: the rows spread over blocks (one partial sum each), combined
    # by one block; the mean reaches the elementwise launch through a scratch array.
    kinds, plan = _kinds(lambda x: x - x.mean(), x)
    assert kinds == ["grid", "single", "elements"] and len(plan.scratch) == len(plan.partials) == 1
    # A 0-d input is read by the launch that needs it (no scratch).
    kinds, plan = _kinds(lambda x, s: (x - x.mean()) * s, x, np.float32(2).reshape(()))
    assert kinds == ["grid", "single", "elements"] and len(plan.scratch) == 1
    # A column sum: a thread per column, each adding its rows in a loop, in a register
    # (the temp buffer of column sums is read before the loop and written after it).
    kinds, plan = _kinds(lambda x: x.sum(axis=0) * 2.0, x)
    assert kinds == ["elements", "elements", "rows", "elements"]
    lines = plan.source.splitlines()
    head = next(k for k, line in enumerate(lines) if line.lstrip().startswith("for r"))
    indent = len(lines[head]) - len(lines[head].lstrip())
    end = next(k for k in range(head + 1, len(lines)) if len(lines[k]) - len(lines[k].lstrip()) <= indent)
    assert not any("cols" in line for line in lines[head + 1:end]), "\n".join(lines)
    assert re.fullmatch(r"\s*cols\d+\[i\d+\] = _reg\d+", lines[end]), "\n".join(lines)
    # ... or, with fewer columns than COLUMN_THREADS, a block per column: one of the two
    # launches of that nest runs, chosen by the number of columns.
    (fill, many, few, out) = plan.launches
    assert (many.kind, few.kind) == ("elements", "rows") and fill.only_if is None is out.only_if
    for n, chosen in ((COLUMN_THREADS, many), (COLUMN_THREADS - 1, few)):
        sizes = {s.name: (6 if s.dim == 0 else n) for s in plan.kernel.sizes}
        assert [launch for launch in (many, few) if host_value(launch.only_if, sizes)] == [chosen]


def test_a_rows_blocked_sum_is_one_index_space_over_the_threads():
    # The lowering's blocks of 128 float32 partial sums (a row of 4096): in a block per
    # row the threads split the blocks and their elements as one flat index (rb * 128 + rj
    # is injective in the two together, neither alone), each adding into its own float64
    # partial; the blocks' own loop left threads past 128 idle, a barrier in every block.
    (op,) = fusion_ops(fused(lambda x: fj.nn.softmax(x), np.zeros((4, 4096), np.float32)))
    source = plan_block(op.blocks[0], op.attrs["name"]).source
    assert "range(_tid, 128, _nt)" not in source, source
    split = [line for line in source.splitlines() if re.search(r"for _j\d+ in range\(_tid, ", line)]
    flat = [k for k, line in enumerate(source.splitlines()) if re.fullmatch(r"\s*rj\d+ = _j\d+ % 128", line)]
    assert flat and len(split) >= 3, source
    lines = source.splitlines()
    body = lines[flat[0]:flat[0] + 12]
    assert not any("syncthreads" in line for line in body), "\n".join(body)
    assert any(re.search(r"acc\d+ \+ _x\d+", line) for line in body), "\n".join(body)


def test_joint_parallelism_of_a_blocked_index():
    # out[rb * 128 + rj] over rb in range(n // 128), rj in range(128): rb alone is
    # injective (rj's span 127 < 128), rj alone is not (rb's span is not known), the two
    # together are; rb * 100 + rj (a span of 127 past 100) is not.
    rb, rj, n = Var("rb", INDEX), Var("rj", INDEX), Var("n", INDEX)

    def nest(stride):
        index = apply("add", apply("mul", rb, Const(stride, INDEX)), rj)
        inner = Loop("rj", Const(0, INDEX), Const(128, INDEX), 1, (Store("out", (index,), Const(1.0, fjd.float32)),))
        return (Loop("rb", Const(0, INDEX), apply("idiv", n, Const(128, INDEX)), 1, (inner,)),)
    assert parallel_vars(["rb", "rj"], nest(128)) == {"rb"}
    assert jointly_parallel(["rb", "rj"], nest(128)) and jointly_parallel(["rb"], nest(128))
    assert not jointly_parallel(["rj"], nest(128))
    assert not jointly_parallel(["rb", "rj"], nest(100)) and parallel_vars(["rb", "rj"], nest(100)) == set()


def test_launches_are_sized_by_the_shapes_at_run_time():
    # (This process runs numba's real CUDA target: GPU sizes, not the simulator's.)
    def config(f, x):
        (op,) = fusion_ops(fused(f, x))
        plan = plan_block(op.blocks[0], op.attrs["name"])
        sizes = {s.name: x.shape[s.dim] for s in plan.kernel.sizes}
        return [launch_config(launch, sizes) for launch in plan.launches]
    # A block per row, threads enough for the row (a power of two, 32 to ROW_THREADS):
    # the lowering's blocks of 128 float32 partial sums do not make a row of 40 look longer.
    assert config(lambda x: fj.nn.softmax(x), np.zeros((6, 40), np.float32)) == [(6, 64)]
    assert config(lambda x: fj.nn.softmax(x), np.zeros((3, 100), np.float32)) == [(3, 128)]
    assert config(lambda x: fj.nn.softmax(x), np.zeros((3, 1000), np.float32)) == [(3, ROW_THREADS)]
    assert config(lambda x: fj.nn.softmax(x), np.zeros((5, 7), np.float32)) == [(5, 32)]
    # A thread per element, 256 a block.
    assert config(lambda x: x * 2.0, np.zeros((6, 1000), np.float32)) == [(24, 256)]
    # A sum over everything: a block per row (up to GRID_BLOCKS), then one block adding
    # their partial sums.
    assert config(lambda x: x.sum(), np.zeros((2, 50), np.float32)) == [(2, 64), (1, 32)]
    assert config(lambda x: x.sum(), np.zeros((3000, 50), np.float32)) == [(256, 64), (1, 32)]
    # A max over a vector: a thread per element over up to GRID_BLOCKS blocks of 256.
    assert config(lambda x: x.max(), np.zeros(1000, np.float32)) == [(4, 256), (1, 32)]
    assert config(lambda x: x.max(), np.zeros(10 ** 6, np.float32)) == [(256, 256), (1, 32)]


def test_nested_pads_bind_each_clamped_index_once():
    # A clamp of a clamp that repeats its index thrice grows as 3**depth.
    def source(depth):
        (op,) = fusion_ops(fused(nested_pads(depth), np.zeros((3, 4), np.float32)))
        return plan_block(op.blocks[0], op.attrs["name"]).source

    shallow, deep = len(source(4)), len(source(8))
    assert deep < 4 * shallow, (shallow, deep)


def test_feasibility_follows_the_registry_properties():
    x = np.zeros((4, 3), np.float32)
    fn = fused(lambda x, w: (fj.cumsum(x @ w, axis=0), fj.nn.softmax(x)), x, np.zeros((3, 3), np.float32))
    by_name = {op.name: op for op in fn.body.ops}
    assert feasible(by_name["matmul"]) and feasible(by_name["fusion"])
    assert not feasible(by_name["cumsum"]) and "no kernel for cumsum" in why_not(by_name["cumsum"])
    f16 = fused(lambda x: x * 2, x.astype(np.float16))
    assert not feasible(f16.body.ops[-1]) and "float16" in supported(f16.body.ops[-1].blocks[0])


def test_a_numba_cuda_that_fails_to_load_is_named_not_reported_as_flowjits_bug(tmp_path):
    # numba-cuda 0.30 registers an overload of np.row_stack, which NumPy 2.5 removed: its
    # typing modules fail to import at the first kernel compile (seen on a GPU machine).
    # The error must say so and how to fix it, not ask for a flowjit bug report.
    from types import SimpleNamespace

    from flowjit.codegen_cuda.compile import compile_error
    module = tmp_path / "numba_cuda" / "numba" / "cuda" / "np" / "arrayobj.py"
    module.parent.mkdir(parents=True)
    module.write_text("import numpy\noverloaded = numpy.row_stack_removed_in_numpy_2_5\n")
    try:
        exec(compile(module.read_text(), str(module), "exec"), {"__name__": "numba.cuda.np.arrayobj"})
    except AttributeError as e:
        error = e
    kernel = SimpleNamespace(ops="mul from f.py:3", path="/tmp/fjc_0.py")
    message = str(compile_error(kernel, error))
    assert "numba's CUDA target failed to load" in message and "row_stack_removed" in message, message
    assert "bug in flowjit" not in message
    assert "numpy<2.5" in message and "NVIDIA/numba-cuda#907" in message
    ours = str(compile_error(kernel, KeyError("x")))  # anything else still is flowjit's bug
    assert "bug in flowjit" in ours and "fjc_0.py" in ours
