"""The numba backend against the reference interpreter: one registry case per fusible
primitive and dtype compiled as a kernel, random programs, and the disk cache.

Tolerances: exact for bool and integers; float32 rtol 2e-5 (kernels add float32 sums in
float32 blocks of 128 elements and the blocks' sums in float64, NumPy pairwise in float32;
their transcendental functions differ from NumPy's by a few ulp); float64 rtol 1e-12.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import flowjit as fj
from flowjit.codegen_cpu import compile_kernel
from flowjit.codegen_cpu.compile import supported, warm
from flowjit.ir import Builder, get, interpret, new_function
from flowjit.ir.core import Block, Value
from flowjit.ir.types import TensorType
from tests.registry.case import kernel_tolerance
from tests.registry.test_generic import _domain_inputs, one_case_per_primitive_and_dtype
from tests.test_programs import ZERO_D_REDUCTIONS, nested_pads, programs, run_program, zero_d_input
from tests.tracer.test_array_api import index_case

# numba is the optional backend: its kernels are checked on the dtypes its code paths
# differ by (bool, a narrow and a wide signed int, a narrow and the widest unsigned one, each
# float); the llvm backend runs every case of every dtype (tests/registry/test_compiled.py).
NUMBA_DTYPES = ("bool", "i8", "i32", "i64", "u8", "u64", "f16", "f32", "f64", "c64", "c128")
CASES = [c for c in one_case_per_primitive_and_dtype() if not c.dtypes or c.dtypes[0] in NUMBA_DTYPES]


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("FLOWJIT_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "flowjit-cache"))


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id or c.prim)
def test_kernel_matches_interpreter(case):
    prim = get(case.prim)
    rng = np.random.default_rng(0)
    arrays = case.make_inputs(rng)
    if prim.kind == "elementwise":
        arrays = _domain_inputs(prim, arrays)
    types = [TensorType(a.shape, a.dtype) for a in arrays]
    body = Block([Value(t) for t in types])
    body.set_returns(Builder(body).emit(prim, body.args, case.attrs))
    fn, b = new_function("k", types)
    fn.body.set_returns(b.emit("fusion", fn.args, {"name": case.prim}, blocks=[body]))
    expected = interpret(fn, arrays)
    reason = supported(body)
    if reason is not None:
        # Runs on the interpreter instead (the Executable records it in `fallbacks`).
        assert any(t.dtype.name == "float16" or t.dtype.is_complex or t.size == 0
                   for t in types + fn.result_types), reason
        return
    kernel = compile_kernel(body, case.prim)
    warm(kernel, arrays, case.prim)
    got = kernel(*arrays)
    for g, e in zip(got, expected):
        assert g.shape == e.shape and g.dtype == e.dtype
        if g.dtype.kind == "f":
            np.testing.assert_allclose(g, e, equal_nan=True, **kernel_tolerance(g.dtype))
        else:
            np.testing.assert_array_equal(g, e)


def test_benchmark_workloads_compile_and_match():
    def gelu(x):
        return 0.5 * x * (1 + fj.tanh(0.7978845608 * (x + 0.044715 * x ** 3)))

    def softmax(x):
        e = fj.exp(x - x.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)

    def layer_norm(x, g, b):
        mu = x.mean(axis=-1, keepdims=True)
        d = x - mu
        return d * fj.rsqrt((d * d).mean(axis=-1, keepdims=True) + 1e-5) * g + b

    x = np.random.default_rng(1).standard_normal((64, 256)).astype(np.float32)
    for f, args in ((gelu, (x,)), (softmax, (x,)), (layer_norm, (x, x[0], x[1]))):
        compiled = fj.function(f, backend="numba")
        np.testing.assert_allclose(compiled(*args), fj.function(f, interpret=True)(*args), rtol=2e-5, atol=2e-6)
        # Every fusion of these runs as a compiled kernel: nothing fell back.
        exe = compiled._cache[next(iter(compiled._cache))].executable
        assert exe.kernels and not exe.fallbacks, exe.fallbacks


@pytest.mark.parametrize("name", list(ZERO_D_REDUCTIONS))
def test_reductions_of_nothing_compile_and_match_numpy(name):
    # A float32 sum over no loop once read its block's partial sum before assigning it.
    f, x = ZERO_D_REDUCTIONS[name][0], zero_d_input(name)
    compiled = fj.function(f, backend="numba")
    got, want = compiled(x), fj.function(f, interpret=True)(x)
    got, want = (got, want) if isinstance(got, tuple) else ((got,), (want,))
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, g.dtype, w.shape, w.dtype)
        np.testing.assert_allclose(g, w, **kernel_tolerance(g.dtype))
    exe = compiled._cache[next(iter(compiled._cache))].executable
    assert not exe.fallbacks, exe.fallbacks


@settings(max_examples=25, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(programs(), st.integers(0, 2**31 - 1))
def test_random_programs_compiled_match_interpreter(program, seed):
    short, in_shapes, steps, n_out = program
    rng = np.random.default_rng(seed)
    dt = {"f32": np.float32, "f64": np.float64, "i32": np.int32, "i64": np.int64}[short]
    inputs = [(rng.standard_normal(s) * 3).astype(dt) for s in in_shapes]
    f = lambda *xs: run_program(steps, xs, n_out, traced=True)  # noqa: E731
    got = fj.function(f, backend="numba")(*inputs)
    want = fj.function(f, interpret=True)(*inputs)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        if g.dtype.kind == "f":
            tol = 1e-4 if g.dtype == np.float32 else 1e-11
            np.testing.assert_allclose(g, w, rtol=tol, atol=tol, equal_nan=True)
        else:
            np.testing.assert_array_equal(g, w)


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(index_case(), st.sampled_from([np.float64, np.int32]))
@example(((4, 1, 2, 4), (slice(None, None, -1), np.array(0, np.int32), slice(None), -3, Ellipsis)), np.float64)
def test_basic_indexing_compiled_matches_numpy(case, dtype):
    # Slices with negative steps, integer and None indices, Ellipsis: layout ops composed
    # into index expressions (operator precedence in the generated source matters).
    shape, key = case
    x = (np.arange(math.prod(shape)).reshape(shape) % 7).astype(dtype)
    got = fj.function(lambda x: x[key], backend="numba")(x)
    np.testing.assert_array_equal(got, x[key])


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
def test_floor_div_and_mod_by_zero_and_infinity_follow_numpy(dtype):
    # Outside the registry cases' domain: NumPy gives inf/nan for floats and 0 for ints.
    if np.dtype(dtype).kind == "f":
        a = np.array([1, -1, 0, 5, -5, np.inf, 7, -7], dtype)
        b = np.array([0, 0, 0, np.inf, np.inf, 2, -3, 3], dtype)
    else:
        a = np.array([1, -1, 0, 7, -7, 9], dtype)
        b = np.array([0, 0, 0, -3, 3, 4], dtype)
    got = fj.function(lambda a, b: (a // b, a % b), backend="numba")(a, b)
    with np.errstate(all="ignore"):
        want = (a // b, a % b)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def _softmax(x, axis):
    e = fj.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


@pytest.mark.parametrize("axis", [-1, 0])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_softmax_computes_each_exp_once_over_the_last_axis(axis, dtype):
    x = np.random.default_rng(1).standard_normal((6, 40)).astype(dtype) * 10
    x[2, 3] = np.nan
    f = fj.function(lambda x: _softmax(x, axis), backend="numba")
    got = f(x)
    want = fj.function(lambda x: _softmax(x, axis), interpret=True)(x)
    np.testing.assert_allclose(got, want, equal_nan=True, **kernel_tolerance(np.dtype(dtype)))
    source = f.kernels(x)
    exps = source.count("exp32(") + source.count("exp64(")
    # Over the last axis the summed exps are stored in the output and divided in place;
    # over another axis the row is not contiguous and each exp is computed twice. A
    # float32 sum's loop is written twice (whole blocks, then the rest; see blocked_sum).
    sum_loops = 2 if dtype == np.float32 and axis == -1 else 1
    assert exps == sum_loops + (0 if axis == -1 else 1), source


@pytest.mark.parametrize("n", [1, 127, 128, 129, 300, 1024, 100_003])
def test_float32_sums_add_blocks_in_float32_and_the_blocks_in_float64(n):
    # Row lengths around the block (whole blocks, a remainder, only a remainder) and a
    # long full reduction, where one float32 accumulator would drift.
    rng = np.random.default_rng(n)
    x = (rng.standard_normal((3, n)) * 100 + 1000).astype(np.float32)
    rows = fj.function(lambda x: x.sum(axis=-1), backend="numba")
    total = fj.function(lambda x: (x * 2).sum(), backend="numba")
    exact = x.astype(np.float64)
    np.testing.assert_allclose(rows(x), exact.sum(axis=-1), rtol=2e-7)
    np.testing.assert_allclose(total(x), 2 * exact.sum(), rtol=2e-7)
    source = rows.kernels(x)
    assert "range(128)" in source and "np.float64(part" in source, source
    if n > 1:  # shape-generic: the loops' bounds come from the row length at run time
        assert rows.kernels(np.ones((3, 1000), np.float32)) == source


def test_kernels_of_vectorized_math_ask_for_wide_vectors():
    x = np.random.default_rng(6).standard_normal((512, 1024)).astype(np.float32)
    math_kernel = fj.function(lambda x: fj.tanh(x) * 2, backend="numba")
    plain_kernel = fj.function(lambda x: x * 2 + 1, backend="numba")
    source = math_kernel.kernels(x)
    # the kernel and the parallel loop body numba outlines from it
    assert source.count("wide_vectors()") == 2, source
    assert "wide_vectors()" not in plain_kernel.kernels(x)
    np.testing.assert_allclose(math_kernel(x), np.tanh(x) * 2, rtol=3e-7, atol=1e-7)


def test_wide_vectors_sets_the_llvm_function_attribute():
    # wide_vectors adds a string attribute past llvmlite's list of known ones: if a new
    # llvmlite stops emitting it, kernels silently lose their wide vectors; this says so.
    from numba import njit

    from flowjit.codegen_cpu.scalar_math import wide_vectors

    @njit
    def double(x):
        wide_vectors()
        return x * 2.0

    assert double(1.5) == 3.0
    (llvm,) = double.inspect_llvm().values()
    assert '"prefer-vector-width"="512"' in llvm


def test_a_stored_row_is_not_reused_by_a_result_of_another_type():
    def f(x):
        e = fj.exp(x - x.max(axis=-1, keepdims=True))
        return (e / e.sum(axis=-1, keepdims=True)).astype(np.float64) + e.sum(axis=-1, keepdims=True)

    x = np.random.default_rng(2).standard_normal((5, 33)).astype(np.float32)
    np.testing.assert_allclose(fj.function(f, backend="numba")(x), fj.function(f, interpret=True)(x), rtol=2e-5)


def test_two_stored_rows_do_not_overwrite_each_other_in_the_output():
    # The gradient of a log-softmax sum: two row reductions (the sum of exps and the
    # count of maxima) could each store their inputs in the output; only one may.
    def f(x):
        s = x - fj.max(x, axis=-1, keepdims=True)
        return fj.sum(s - fj.log(fj.sum(fj.exp(s), axis=-1, keepdims=True)))

    x = np.random.default_rng(1).standard_normal((3, 4))
    want = 1 - 4 * np.exp(x) / np.exp(x).sum(axis=-1, keepdims=True)
    np.testing.assert_allclose(fj.function(fj.grad(f), backend="numba")(x), want, rtol=1e-12, atol=1e-12)


def test_clamped_indices_compile_in_parallel_loops():
    # prange's index is unsigned inside numba's parfors; min/max of it with a signed
    # size unified to float64, which no array accepts as an index.
    x = np.random.default_rng(4).standard_normal((256, 8, 8, 16)).astype(np.float32)
    pad = ((0, 0), (1, 1), (1, 1), (0, 0))
    f = fj.function(lambda x: fj.pad(fj.pad(x, pad) * 2, pad), backend="numba")
    assert "prange" in f.kernels(x)
    np.testing.assert_array_equal(f(x), np.pad(np.pad(x, pad) * 2, pad))


def test_nested_pads_write_each_index_once():
    # A pad reads its operand at a clamped index; when that index was itself a clamp
    # written out three times, the source grew as 3**depth and numba never finished
    # compiling the gradient of a max pool.
    def nested(depth):
        return fj.function(nested_pads(depth), backend="numba")

    x = np.random.default_rng(6).standard_normal((3, 4))
    shallow, deep = len(nested(4).kernels(x)), len(nested(8).kernels(x))
    assert deep < 4 * shallow, (shallow, deep)  # 3**4 times as long before the fix
    want = x
    for _ in range(8):
        want = np.pad(want, ((1, 0), (0, 1))) * 2
    np.testing.assert_array_equal(nested(8)(x), want)


def test_a_later_loop_nest_reads_an_output_instead_of_recomputing_it():
    def f(x):
        e = fj.exp(x) * 2
        return e, (fj.tanh(e) * 3).sum(axis=0)  # two shapes: two loop nests in one kernel

    x = np.random.default_rng(5).standard_normal((7, 5))
    g = fj.function(f, backend="numba")
    assert [op.name for op in g.ir(x, stage="fused").body.ops] == ["fusion"]
    source = g.kernels(x)
    assert source.count("exp64(") == 1, source
    for got, want in zip(g(x), (np.exp(x) * 2, (np.tanh(np.exp(x) * 2) * 3).sum(axis=0))):
        np.testing.assert_allclose(got, want, rtol=1e-12)


def test_fastmath_only_when_asked():
    def f(x):
        return (fj.exp(x) * 2 + 1).sum(axis=-1)

    x = np.random.default_rng(3).standard_normal((16, 100)).astype(np.float32)
    plain = fj.function(f)
    fast = fj.function(f, fastmath=True)
    assert "fastmath" not in plain.kernels(x)
    assert "fastmath={" in fast.kernels(x)
    x[3, 7] = np.nan  # nan handling survives the flags flowjit uses
    want = fj.function(f, interpret=True)(x)
    np.testing.assert_allclose(plain(x), want, rtol=2e-5)
    np.testing.assert_allclose(fast(x), want, rtol=1e-4)
    y = np.linspace(-80, 80, 1001).astype(np.float32)
    np.testing.assert_allclose(fj.function(fj.exp, fastmath=True)(y), np.exp(y), rtol=1e-6)


def test_float32_tanh_is_the_rational_with_and_without_fastmath():
    """A float32 tanh calls tanh32 (the 5 ulp rational), float64 tanh64, whatever the
    flags; a gelu in float32 stays within a few ulp of the float64 interpreter."""
    def gelu(x):
        return 0.5 * x * (1 + fj.tanh(0.7978845608 * (x + 0.044715 * x ** 3)))

    x32 = np.random.default_rng(4).standard_normal(4099).astype(np.float32) * 4
    fast, plain = fj.function(gelu, fastmath=True), fj.function(gelu)
    for f in (fast, plain):
        assert "tanh32(" in f.kernels(x32) and "tanh64(" not in f.kernels(x32)
        assert "tanh64(" in f.kernels(x32.astype(np.float64)) and "tanh32(" not in f.kernels(x32.astype(np.float64))
    want = fj.function(gelu, interpret=True)(x32.astype(np.float64))
    for f in (fast, plain):  # 1 + tanh cancels for x < 0: a few ulp of 1, times x / 2
        np.testing.assert_allclose(f(x32), want, rtol=2e-6, atol=4e-6)
    np.testing.assert_allclose(fast(x32.astype(np.float64)), want, rtol=1e-12, atol=1e-15)
    exact = np.tanh(x32.astype(np.float64)).astype(np.float32).view(np.int32)
    for fastmath in (False, True):
        t = fj.function(fj.tanh, fastmath=fastmath)(x32)
        ulps = np.abs(t.view(np.int32).astype(np.int64) - exact)
        assert 0 < ulps.max() <= 5  # the rational within its bound (not an exact tanh)


def test_new_process_with_warm_cache_compiles_nothing(tmp_path):
    prog = textwrap.dedent("""
        import numpy as np, flowjit as fj
        from flowjit.codegen_cpu import kernel_stats
        f = fj.function(lambda x: fj.tanh(x) * 2 + x.sum(axis=1, keepdims=True), backend="numba")
        f(np.ones((8, 32), np.float32))
        s = kernel_stats()
        print(s["compiled"], s["loaded"])
    """)
    env = dict(os.environ, FLOWJIT_CACHE_DIR=str(tmp_path))
    runs = [subprocess.run([sys.executable, "-c", prog], env=env, capture_output=True, text=True, check=True)
            for _ in range(2)]
    first, second = (tuple(map(int, r.stdout.split())) for r in runs)
    assert first[0] >= 1
    assert second == (0, first[0])


def test_cold_kernels_compile_on_two_cores_into_the_disk_cache(tmp_path):
    # Half of a program's cold kernels compile in a forked process that writes them to
    # the disk cache; the parent loads them. Every kernel ends up on disk and counted once.
    prog = textwrap.dedent("""
        import numpy as np, flowjit as fj
        from flowjit.codegen_cpu import kernel_stats
        def f(x, w):
            h = fj.tanh(x @ w + 1)
            g = fj.exp(h @ w.T - h.max()) * 3
            return (g / g.sum(axis=1, keepdims=True)).sum(axis=0), fj.sqrt(fj.abs(h)).mean()
        x = np.linspace(-1, 1, 64 * 16).reshape(64, 16)
        w = np.linspace(-0.5, 0.5, 16 * 16).reshape(16, 16)
        a, b = fj.function(f)(x, w)
        ra, rb = fj.function(f, interpret=True)(x, w)
        assert np.allclose(a, ra, rtol=1e-12) and np.allclose(b, rb, rtol=1e-12)
        s = kernel_stats()
        print(s["compiled"], s["loaded"])
    """)
    env = dict(os.environ, FLOWJIT_CACHE_DIR=str(tmp_path))
    first, second = (tuple(map(int, subprocess.run([sys.executable, "-c", prog], env=env, capture_output=True,
                                                   text=True, check=True).stdout.split())) for _ in range(2))
    kernels = sorted(p.stem for p in (tmp_path / "kernels").glob("fj_*.py"))
    indexed = {p.name.split(".")[0] for p in (tmp_path / "kernels" / "__pycache__").glob("fj_*.nbi")}
    assert len(kernels) >= 3 and set(kernels) <= indexed
    assert first == (len(kernels), 0) and second == (0, len(kernels))


@pytest.mark.parametrize("damage", ["garbage numba cache", "empty numba index", "garbage kernel source"])
def test_a_corrupt_cache_entry_is_recompiled_not_a_crash(tmp_path, damage):
    prog = textwrap.dedent("""
        import warnings
        import numpy as np, flowjit as fj
        from flowjit.codegen_cpu import kernel_stats
        warnings.simplefilter("ignore")
        f = fj.function(lambda x: fj.tanh(x) * 2 + 1)
        print(float(f(np.full(8, 0.5, np.float32))[3]), kernel_stats()["compiled"])
    """)
    env = dict(os.environ, FLOWJIT_CACHE_DIR=str(tmp_path))

    def run():
        out = subprocess.run([sys.executable, "-c", prog], env=env, capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        value, compiled = out.stdout.split()
        assert float(value) == pytest.approx(np.tanh(0.5) * 2 + 1, rel=1e-6)
        return int(compiled)

    assert run() == 1
    kernels = tmp_path / "kernels"
    if damage == "garbage kernel source":
        files = list(kernels.glob("fj_*.py"))
    else:
        files = list((kernels / "__pycache__").glob("*.nbi" if damage == "empty numba index" else "*.nb[ic]"))
    assert files
    for path in files:
        path.write_bytes(b"" if damage == "empty numba index" else bytes(range(200, 256)) * 3)
    run()
    assert run() == 0  # repaired: the next process loads from the cache again


def test_a_new_batch_size_reuses_the_compiled_kernels():
    from flowjit.codegen_cpu import kernel_stats

    def layer(x, w):
        h = x.reshape(x.shape[0], 4, 8).sum(axis=1)  # a reshape and a reduction
        return fj.tanh(h * w) - h.max(axis=-1, keepdims=True)

    f = fj.function(layer)
    w = np.linspace(-1, 1, 8).astype(np.float32)
    f(np.ones((3, 32), np.float32), w)
    before = kernel_stats()
    for batch in (5, 17, 64):
        x = np.random.default_rng(batch).standard_normal((batch, 32)).astype(np.float32)
        np.testing.assert_allclose(f(x, w), fj.function(layer, interpret=True)(x, w), rtol=2e-5, atol=1e-6)
    after = kernel_stats()
    assert f.trace_count == 4
    assert after["compiled"] == before["compiled"] and after["loaded"] == before["loaded"]
    assert after["reused"] >= before["reused"] + 3


def test_threads_checking_the_cache_at_once_all_find_it_writable(tmp_path, monkeypatch):
    # Threads of one process shared one probe file name: one removed it under another,
    # whose os.remove then failed, and the cache looked unwritable (seen in the suite with
    # a program running on two devices at once).
    import threading

    import flowjit.codegen_cpu.compile as comp
    monkeypatch.setenv("FLOWJIT_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(comp, "_warned", True)  # a failure shows as None, not as a warning
    start = threading.Barrier(4)
    found: list = []

    def check():
        start.wait()
        found.extend(comp.cache_dir() for _ in range(300))

    threads = [threading.Thread(target=check) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert found == [str(tmp_path / "kernels")] * 1200


def test_unwritable_cache_warns_once_and_still_runs(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("FLOWJIT_CACHE_DIR", str(blocker))
    import flowjit.codegen_cpu.compile as comp
    monkeypatch.setattr(comp, "_warned", False)
    with pytest.warns(UserWarning, match="not writable"):
        out = fj.function(lambda x: x * 3 + 1, backend="numba")(np.arange(4.0))
    np.testing.assert_array_equal(out, np.arange(4.0) * 3 + 1)
