"""The ``llvm`` backend end to end: ``fj.function(..., backend="llvm")`` lowers every fused
kernel to loop IR (``flowjit.lowering``) and compiles it through llvmlite
(``flowjit.codegen_cpu``); each program here is checked against the interpreter. That
every registry case compiles with it, none left to the interpreter, is
``tests/registry/test_compiled.py``'s check, case by case.

Every test runs on a kernel cache of its own module (a temporary ``FLOWJIT_CACHE_DIR``),
so a run is cold, as on CI's clean clone.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import flowjit as fj
from flowjit import optim
from flowjit.lowering.loops import Kernel
from tests.registry.case import kernel_tolerance
from tests.test_programs import ZERO_D_REDUCTIONS, zero_d_input


@pytest.fixture(scope="module", autouse=True)
def llvm_cache(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        path = tmp_path_factory.mktemp("llvm-cache")
        mp.setenv("FLOWJIT_CACHE_DIR", str(path))
        yield path


def executable(f):
    """The one Executable ``f`` traced."""
    return f._cache[next(iter(f._cache))].executable


def as_tuple(x):
    return x if isinstance(x, tuple) else (x,)


def assert_matches(got, want):
    for g, w in zip(as_tuple(got), as_tuple(want)):
        g, w = np.asarray(g), np.asarray(w)
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, g.dtype, w.shape, w.dtype)
        if g.dtype.kind in "fc":
            tol = kernel_tolerance(g.dtype)
            np.testing.assert_allclose(g, w, equal_nan=True, **tol)
        else:
            np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("name", sorted(ZERO_D_REDUCTIONS))
def test_zero_d_reductions_on_llvm(name):
    fn, _ = ZERO_D_REDUCTIONS[name]
    x = zero_d_input(name)
    f = fj.function(fn, backend="llvm")
    got = f(x)
    assert_matches(got, fj.function(fn, interpret=True)(x))
    assert executable(f).kernels


def test_backend_from_the_environment(monkeypatch):
    monkeypatch.setenv("FLOWJIT_BACKEND", "llvm")
    f = fj.function(lambda x: fj.tanh(x) * 2)
    x = np.linspace(-2, 2, 8, dtype=np.float32)
    np.testing.assert_allclose(f(x), np.tanh(x) * 2, rtol=1e-6)
    assert executable(f).backend == "llvm"


def test_strided_argument_and_dispatch():
    f = fj.function(lambda x: x + 1, backend="llvm")
    x = np.arange(16, dtype=np.float32).reshape(4, 4)
    np.testing.assert_array_equal(f(x.T), x.T + 1)
    np.testing.assert_array_equal(f(x.T), x.T + 1)  # the driver, on a strided argument
    y = np.arange(8, dtype=np.float32)
    out = f(y)
    out[0] = 99  # results never alias the arguments
    assert y[0] == 0


def test_a_kernel_writes_into_a_dead_input():
    def f(x):
        a = fj.exp(x)
        return a * 2 + a @ a  # the second kernel may write into a, which dies there

    x = np.random.default_rng(0).standard_normal((16, 16)).astype(np.float32) * 0.1
    g = fj.function(f, backend="llvm")
    for _ in range(2):  # the first call and the driver
        assert_matches(g(x), fj.function(f, interpret=True)(x))
    # The native driver writes the last kernel's output (the result) where `a` was: `a`
    # is computed into the result's array.
    assert "'s memory)" in executable(g).driver_source()


def test_large_kernels_split_over_threads_small_ones_call_the_entry():
    from flowjit.codegen_cpu.parallel import PARALLEL_MIN_ELEMENTS, default_threads
    from flowjit.codegen_cpu.pthread_pool import NATIVE_PARALLEL_MIN_ELEMENTS

    # The native driver: a large kernel's rows split over the native pool.
    f = fj.function(lambda x: fj.tanh(x) * 2, backend="llvm")
    for n in (8, 4 * NATIVE_PARALLEL_MIN_ELEMENTS):
        x = np.linspace(-3, 3, n, dtype=np.float32)
        for _ in range(2):  # the first call and the driver
            np.testing.assert_allclose(f(x), np.tanh(x) * 2, rtol=1e-6, atol=1e-7)
    small, large = (f._cache[key].executable.driver_source() for key in f._cache)
    assert small.startswith("native driver") and "threads" not in small
    if default_threads() > 1:
        assert f"on {default_threads()} threads over {4 * NATIVE_PARALLEL_MIN_ELEMENTS} rows" in large

    # The Python driver (a Python callback is host work): the C entry with the dimensions as
    # constants, or the chunked call.
    f = fj.function(lambda x: fj.pure_callback(np.cumsum, fj.ShapeDtype(x.shape, x.dtype), fj.tanh(x) * 2),
                    backend="llvm")
    for n in (8, 4 * PARALLEL_MIN_ELEMENTS):
        x = np.linspace(-3, 3, n)  # float64: the long cumsum's rounding stays small
        for _ in range(2):
            np.testing.assert_allclose(f(x), np.cumsum(np.tanh(x) * 2), rtol=1e-9, atol=1e-9)
    small, large = (f._cache[key].executable.driver_source() for key in f._cache)
    assert ".ctypes.data" in small
    assert ".ctypes.data" not in large and "((v0,), (v1,))" in large.replace("cv0", "v0")


def test_a_program_on_virtual_cpus_runs_its_partitions_on_llvm_serially(monkeypatch):
    from flowjit.codegen_cpu.parallel import PARALLEL_MIN_ELEMENTS
    from flowjit.runtime.multi_device import MultiDeviceExecutable

    monkeypatch.setenv("FLOWJIT_CPU_DEVICES", "2")

    def f(x):
        with fj.device("cpu:1"):
            a = fj.tanh(x) * 2
        return a + x

    x = np.linspace(-3, 3, 2 * PARALLEL_MIN_ELEMENTS, dtype=np.float32)
    g = fj.function(f, backend="llvm")
    for _ in range(2):
        assert_matches(g(x), fj.function(f, interpret=True)(x))
    multi = executable(g)
    assert isinstance(multi, MultiDeviceExecutable)
    parts = [exe for _, exe in multi.partitions]
    assert all(exe.backend == "llvm" and not exe.parallel for exe in parts)
    # A virtual CPU is one core: even a large kernel calls its entry, never the thread pool.
    assert all(".ctypes.data" in exe.driver_source() for exe in parts if exe.kernels)


def test_a_kernel_llvm_rejects_names_the_users_line(monkeypatch, tmp_path):
    from flowjit.codegen_cpu import jit, render

    # A cold process: a warm one loads the kernel without rendering it.
    monkeypatch.setenv("FLOWJIT_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(jit, "_libraries", {})
    monkeypatch.setattr(render, "render_kernel", lambda kernel: "this is not LLVM IR")
    f = fj.function(lambda x: fj.sin(x) * 3, backend="llvm")
    with pytest.raises(render.KernelRenderError, match=r"kernel sin_mul.* from .*test_llvm_backend.py:\d+"):
        f(np.ones(3, np.float32))


def test_a_kernel_reading_one_strided_value_twice():
    from flowjit.ir.parser import parse
    from flowjit.runtime.executable import Executable

    fn = parse("""func @f(%x: f32[3,3]) -> (f32[3,3]) {
      %0 = fusion %x, %x {name="mul_add", lines="prog.py:1"} : f32[3,3] {
        ^(%1: f32[3,3], %2: f32[3,3])
        %3 = mul %1, %2 : f32[3,3]
        %4 = add %3, %1 : f32[3,3]
        return %4
      }
      return %0
    }""")
    exe = Executable(fn, "llvm")
    x = np.arange(9, dtype=np.float32).reshape(3, 3).T
    for _ in range(2):  # the first call and the driver (one contiguous copy, released once)
        np.testing.assert_array_equal(exe([x])[0], x * x + x)


def test_the_driver_never_hands_a_kernel_memory_of_another_dtype_or_shape():
    # The kernel's C entry reads raw memory: a float64 array given to a float32 program is
    # converted, not read as float32s, and a wrong shape raises instead of reading past it.
    f = fj.function(lambda x: x * 2 + 1, backend="llvm")
    x = np.arange(8, dtype=np.float32)
    f(x)
    exe = executable(f)
    np.testing.assert_array_equal(exe.run(x.astype(np.float64))[0], x * 2 + 1)
    with pytest.raises(ValueError, match=r"shape \(8,\) got one of shape \(4,\)"):
        exe.run(x[:4])


def test_kernel_listing_shows_loop_ir():
    f = fj.function(lambda x: fj.exp(x).sum(), backend="llvm")
    f(np.ones(5, np.float32))
    text = executable(f).kernel_listing()
    assert "for " in text and "exp" in text and "# driver" in text and ".reshape(" not in text


@pytest.mark.parametrize("name", ["gelu", "softmax", "layer_norm"])
def test_nn_functions_and_their_gradients_on_llvm(name):
    fn = getattr(fj.nn, name)
    x, w = np.random.default_rng(0).standard_normal((2, 16, 33)).astype(np.float32)

    def loss(x):  # weighted: the gradient of a layer norm's sum of squares is all cancellation
        return (fn(x) * w).sum()

    for program in (fn, fj.grad(loss)):
        got = fj.function(program, backend="llvm")(x)
        assert_matches(got, fj.function(program, interpret=True)(x))


def test_fori_loop_on_llvm():
    def power_sum(x):
        return fj.fori_loop(0, 5, lambda i, acc: acc * 0.5 + fj.tanh(x), x)

    x = np.linspace(-1, 1, 12, dtype=np.float32)
    f = fj.function(power_sum, backend="llvm")
    assert_matches(f(x), fj.function(power_sum, interpret=True)(x))
    exe = executable(f)
    blocks = [b for runners in exe.control_blocks.values() for b in runners]
    assert blocks and all(b.backend == "llvm" for b in blocks)
    assert any(isinstance(k, Kernel) for b in blocks for k in b.kernels.values())


def test_scan_and_cond_on_llvm():
    def program(xs):
        def step(c, x):
            c = fj.cond((x.sum() > 0), lambda: c + fj.exp(x) * 0.5, lambda: c * 0.9 - x)
            return c, c.sum()
        return fj.scan(step, fj.zeros(4, np.float32), xs)

    xs = np.random.default_rng(1).standard_normal((20, 4)).astype(np.float32)
    f = fj.function(program, backend="llvm")
    for _ in range(2):
        assert_matches(f(xs), fj.function(program, interpret=True)(xs))
    blocks = [b for runners in executable(f).control_blocks.values() for b in runners]
    assert blocks and all(b.backend == "llvm" for b in blocks)


def digits_mlp_step(backend: str):
    """An MLP (gelu, layer norm) on 128 digits with Adam on the mean cross-entropy."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    x, y = (digits.data[:128] / 16.0).astype(np.float32), digits.target[:128].astype(np.int32)
    model = fj.nn.Sequential([fj.nn.Dense(64, 32, fj.nn.gelu, key=0, name="hidden"),
                              fj.nn.Dense(32, 10, key=1, name="logits")], name="mlp")
    opt = optim.Adam(1e-2)

    @fj.function(backend=backend)
    def train_step(x, y):
        return opt.minimize(lambda: fj.mean(fj.nn.softmax_cross_entropy(model(fj.nn.layer_norm(x)), y)),
                            model.trainable_variables)

    return train_step, x, y


def test_adam_trains_a_digits_mlp_on_llvm():
    train_step, x, y = digits_mlp_step("llvm")
    losses = [float(train_step(x, y)) for _ in range(30)]
    assert np.all(np.isfinite(losses)) and losses[-1] < 0.5 * losses[0], losses
    assert train_step.trace_count == 1
    exe = executable(train_step)
    assert exe.kernels and not exe.fallbacks, exe.fallbacks
    assert exe.driver_source().startswith("native driver")  # the whole step is one native call
    # The same steps on the interpreter give the same losses (to float32 rounding).
    reference, x, y = digits_mlp_step("interpreter")
    want = [float(reference(x, y)) for _ in range(30)]
    np.testing.assert_allclose(losses, want, rtol=2e-3, atol=1e-5)


def test_cache_stats_count_the_cpu_backends_objects():
    from flowjit.codegen_cpu import cache_stats as cpu_stats

    total = fj.cache_stats()
    assert set(total) == {"compiled", "loaded", "reused"}
    assert all(total[k] >= cpu_stats()[k] for k in total)
    before = fj.cache_stats()["compiled"]
    fj.function(lambda x: fj.sin(x) * 7.25 - 1, backend="llvm")(np.ones(3, np.float32))
    assert fj.cache_stats()["compiled"] == before + 1


CACHED_RUN = """
import json, sys
import numpy as np
import flowjit as fj
f = fj.function(lambda x: fj.nn.softmax(fj.tanh(x) * 3).sum(axis=0), backend="llvm")
y = f(np.linspace(-1, 1, 24, dtype=np.float32).reshape(4, 6))
print(json.dumps({"y": y.tolist(), "stats": fj.cache_stats(),
                  "modules": sorted(m for m in sys.modules if m.split(".")[0] in ("numba", "scipy"))}))
"""


def test_a_cached_llvm_function_loads_without_numba(llvm_cache):
    env = dict(os.environ, FLOWJIT_CACHE_DIR=str(llvm_cache / "subprocess"))
    runs = [json.loads(subprocess.run([sys.executable, "-c", CACHED_RUN], capture_output=True, text=True,
                                      check=True, env=env).stdout) for _ in range(2)]
    assert runs[0]["stats"]["compiled"] > 0
    # The programs' shared entry points are flowjit's runtime: compiled once per installation,
    # in the first run or before it.
    first, second = runs[0]["stats"], runs[1]["stats"]
    assert second["compiled"] == 0 and second["loaded"] == first["compiled"] + first["loaded"]
    assert runs[1]["y"] == runs[0]["y"]
    assert runs[0]["modules"] == [] and runs[1]["modules"] == []
