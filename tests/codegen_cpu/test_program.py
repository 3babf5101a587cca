"""The native program driver (flowjit/codegen_cpu/program.py): a whole program as one
CPython builtin, checked against NumPy and the interpreter."""

from __future__ import annotations

import ctypes
import os
import re
import threading

import numpy as np
import pytest

import flowjit as fj
from flowjit.codegen_cpu import program_plan


def _exe(f):
    (entry,) = f._cache.values()
    return entry.executable


def _native(f, *args):
    out = f(*args)
    out = f(*args)  # the driver
    exe = _exe(f)
    assert exe._program is not None, exe.native_reason
    return out, exe


def test_numpy_abi_offsets_the_driver_reads():
    x = np.arange(12, dtype=np.float32).reshape(3, 4)[1:]
    base = id(x)

    def word(offset, ctype=ctypes.c_int64):
        return ctype.from_address(base + offset).value

    assert word(program_plan.OB_TYPE) == id(np.ndarray)
    assert word(program_plan.ARRAY_DATA) == x.ctypes.data
    assert word(program_plan.ARRAY_ND, ctypes.c_int32) == 2
    dims = word(program_plan.ARRAY_DIMS)
    assert [ctypes.c_int64.from_address(dims + 8 * i).value for i in range(2)] == [2, 4]
    assert word(program_plan.ARRAY_DESCR) == id(x.dtype)
    flags = word(program_plan.ARRAY_FLAGS, ctypes.c_int32)
    assert flags & program_plan.NPY_C_CONTIGUOUS and flags & program_plan.NPY_ALIGNED
    assert not ctypes.c_int32.from_address(id(x.T) + program_plan.ARRAY_FLAGS).value & program_plan.NPY_C_CONTIGUOUS
    for dt in (np.float32, np.dtype(">f8"), np.int64, np.bool_):
        d = np.dtype(dt)
        assert ctypes.c_int32.from_address(id(d) + program_plan.DESCR_TYPE_NUM).value == d.num
        assert chr(ctypes.c_char.from_address(id(d) + program_plan.DESCR_BYTEORDER).value[0]) == d.byteorder


def test_pyarray_empty_is_where_numpys_header_says():
    header = os.path.join(np.get_include(), "numpy", "__multiarray_api.h")
    if not os.path.exists(header):
        pytest.skip("NumPy's headers are not installed")
    text = open(header).read()
    m = re.search(r"#define PyArray_Empty \\\s*\n.*?PyArray_API\[(\d+)\]", text, re.S)
    assert m and int(m.group(1)) == program_plan.PYARRAY_EMPTY


def test_assigned_offsets_never_overlap_buffers_alive_together():
    rng = np.random.default_rng(0)
    for _ in range(50):
        n = int(rng.integers(1, 12))
        sizes = [int(s) for s in rng.integers(1, 5000, n)]
        starts = rng.integers(0, 10, n)
        lives = [(int(s), int(s + rng.integers(0, 5))) for s in starts]
        offsets, total = program_plan._assign_offsets(sizes, lives)
        for i in range(n):
            assert offsets[i] % program_plan.SCRATCH_ALIGN == 0 and offsets[i] + sizes[i] <= total
            for j in range(i):
                if not (lives[i][1] < lives[j][0] or lives[j][1] < lives[i][0]):
                    assert offsets[i] + sizes[i] <= offsets[j] or offsets[j] + sizes[j] <= offsets[i]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_matmuls_with_transposes_and_kernels_between(dtype):
    rng = np.random.default_rng(1)
    a = rng.standard_normal((12, 7)).astype(dtype)
    b = rng.standard_normal((7, 5)).astype(dtype)
    c = rng.standard_normal((12, 5)).astype(dtype)

    def f(a, b, c):
        h = fj.tanh(a @ b) + c
        return h.T @ a, a.T @ h, (h @ b.T).sum(axis=1), b.T @ a.T
    out, exe = _native(fj.function(f, backend="llvm"), a, b, c)
    want = fj.function(f, interpret=True)(a, b, c)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    assert len(out) == len(want) == 4
    for got, ref in zip(out, want):
        assert got.dtype == ref.dtype and got.shape == ref.shape
        np.testing.assert_allclose(got, ref, rtol=tol, atol=tol)
    text = exe.driver_source()
    assert "gemm" in text and ".T @" in text and "@ v" in text


def test_empty_matmuls():
    f = fj.function(lambda a, b: (a @ b) + 1, backend="llvm")
    out, _ = _native(f, np.ones((3, 0), np.float32), np.ones((0, 4), np.float32))
    np.testing.assert_array_equal(out, np.ones((3, 4), np.float32))
    g = fj.function(lambda a, b: (a @ b) + 1, backend="llvm")
    out, _ = _native(g, np.ones((0, 2), np.float32), np.ones((2, 4), np.float32))
    assert out.shape == (0, 4)


def test_arguments_the_driver_refuses_go_through_python():
    f = fj.function(lambda x: fj.exp(x) * 2, backend="llvm")
    x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    _native(f, x)
    exe = _exe(f)

    class Sub(np.ndarray):
        pass

    strided = np.linspace(-1, 1, 24, dtype=np.float32).reshape(3, 8)[:, ::2]
    for arg in (strided, x.view(Sub), x.astype(">f4"), x.astype(np.float64)):
        want = np.exp(np.asarray(arg, np.float32)) * 2
        np.testing.assert_allclose(exe.run(arg)[0], want, rtol=1e-6)
        np.testing.assert_allclose(exe._program.call_one(arg), want, rtol=1e-6)
    with pytest.raises(ValueError, match=r"shape \(3, 4\) got one of shape \(4, 3\)"):
        exe.run(x.T.copy())
    with pytest.raises(TypeError, match="takes 1 arrays, got 2"):
        exe.run(x, x)


def test_library_calls_end_the_upper_halves_use_where_the_target_has_avx():
    # OpenBLAS returns with the vector registers' upper halves in use; a legacy-SSE libm
    # function after it (glibc's hypot: a complex128 abs) paid ~20x per call. After each
    # product and LAPACK call the program clears them, on x86 with AVX only (the intrinsic
    # does not exist elsewhere).
    from flowjit.codegen_cpu import jit
    from flowjit.codegen_cpu.program_emit import render_program

    a = np.linspace(0, 1, 64 * 64).reshape(64, 64) * (1 + 1j)
    b = np.eye(64) + 0j
    f = lambda a, b: fj.abs(a @ b) + fj.linalg.inv(b @ b).real  # noqa: E731
    got, exe = _native(fj.function(f), a, b)
    np.testing.assert_allclose(got, np.abs(a @ b) + np.linalg.inv(b @ b).real, rtol=1e-12)
    text = "".join(t if isinstance(t, str) else t() for t in render_program(exe._program.plan, 64, clear_upper=True))
    lines = text.splitlines()
    after = [lines[i - 1] for i, line in enumerate(lines) if "call void @llvm.x86.avx.vzeroupper()" in line]
    # the products: CBLAS calls through the table (row-major first, alpha by address)
    assert len(after) == 3 and all("(i32 101, " in x and "@fj_complex128_one" in x for x in after[:2])
    assert "call i32 @fj_lapack_inverse" in after[2]
    plain = "".join(t if isinstance(t, str) else t() for t in render_program(exe._program.plan, 64))
    assert "vzeroupper" not in plain
    assert jit.host_target("x86-64-v3").has_avx() and not jit.host_target("x86-64").has_avx()
    assert jit.host_target().has_avx() == ("+avx" in jit.host_target().features.split(","))


def test_every_program_calls_the_shared_entry_points_and_its_module_holds_only_its_steps():
    # The argument checks, the results, the scratch block and the GIL are flowjit's own code
    # (program_glue), compiled once per installation: a program's module defines its steps
    # behind fj_steps_v and no CPython glue. Arguments of several dtypes (int64 is two NumPy
    # type numbers), a 0-d one, and a result returned twice go through it.
    from flowjit.codegen_cpu import program_glue
    from flowjit.codegen_cpu.program_emit import render_program

    def f(i, x, s):
        y = x * s + i.astype(np.float64)
        return y, y.sum(), y
    i = np.arange(6, dtype=np.int64).reshape(2, 3)
    x = np.linspace(0, 1, 6).reshape(2, 3)
    (y, total, y2), exe = _native(fj.function(f), i, x, np.float64(2.0))
    np.testing.assert_allclose(y, x * 2 + i)
    assert y is y2 and float(total) == pytest.approx(float((x * 2 + i).sum()))
    (z, *_), exe2 = _native(fj.function(lambda x: (fj.tanh(x), x.sum())), x)
    np.testing.assert_allclose(z, np.tanh(x))
    addresses = program_glue.entry_points()
    for e in (exe, exe2):
        assert [d.ml_meth for d in e._program._defs] == list(addresses)
        (text, *_) = render_program(e._program.plan, 64)
        assert "define i32 @fj_steps_v(" in text
        assert not any(name in text for name in ("PyList_New", "PyEval_SaveThread", "PyObject_CallNoArgs"))
    np.testing.assert_allclose(exe.run(i.astype(np.longlong), x, np.float64(3.0))[0], x * 3 + i)
    np.testing.assert_allclose(exe.run(i.astype(np.int32), x, 3.0)[0], x * 3 + i)   # converted in Python


def test_results_are_fresh_arrays_and_repeated_results_one_object():
    def f(x):
        y = x * 3
        return y, y, x + 0
    g = fj.function(f, backend="llvm")
    x = np.arange(6, dtype=np.float32)
    (a, b, c), _ = _native(g, x)
    assert a is b and not np.shares_memory(c, x)
    np.testing.assert_array_equal(a, x * 3)
    (a2, _, _) = g(x)
    assert not np.shares_memory(a, a2)


def test_constants_and_intermediates_in_scratch():
    w = np.linspace(0, 1, 64, dtype=np.float32).reshape(8, 8)

    def f(x):
        h = fj.nn.relu(x @ fj.asarray(w) - 0.25)
        return fj.nn.softmax(h @ fj.asarray(w.T), axis=-1).sum(axis=0)
    x = np.random.default_rng(2).standard_normal((16, 8)).astype(np.float32)
    out, exe = _native(fj.function(f, backend="llvm"), x)
    np.testing.assert_allclose(out, fj.function(f, interpret=True)(x), rtol=1e-5, atol=1e-6)
    assert "scratch+" in exe.driver_source()


def test_leading_axis_reduction_through_a_temp():
    f = fj.function(lambda x: (fj.exp(x).sum(axis=0), x.max(axis=0)), backend="llvm")
    x = np.random.default_rng(3).standard_normal((300, 5)).astype(np.float32)
    (s, m), _ = _native(f, x)
    np.testing.assert_allclose(s, np.exp(x).sum(axis=0), rtol=1e-5)
    np.testing.assert_array_equal(m, x.max(axis=0))


def test_threads_calling_one_program_at_once():
    def f(x):  # the matmul's output lives in scratch, which one call at a time may hold
        return (fj.tanh(x @ x.T) * 2 + 1).sum(axis=1)
    g = fj.function(f, backend="llvm")
    xs = [np.random.default_rng(i).standard_normal((64, 256)).astype(np.float32) / 16 for i in range(4)]
    _native(g, xs[0])
    assert "scratch+0" in _exe(g).driver_source()
    errors = []

    def work(x):
        want = (np.tanh(x.astype(np.float64) @ x.T) * 2 + 1).sum(axis=1)
        for _ in range(200):
            got = g(x)
            if not np.allclose(got, want, rtol=1e-5, atol=1e-6):
                errors.append(np.abs(got - want).max())
    threads = [threading.Thread(target=work, args=(x,)) for x in xs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_gil_released_only_for_large_work():
    small = fj.function(lambda x: x + 1, backend="llvm")
    large = fj.function(lambda x: x + 1, backend="llvm")
    _native(small, np.ones(8, np.float32))
    _native(large, np.ones(program_plan.GIL_MIN_ELEMENTS, np.float32))
    assert "GIL held" in _exe(small).driver_source()
    assert "GIL released" in _exe(large).driver_source()


def test_programs_without_a_native_form_keep_the_python_driver():
    f = fj.function(lambda x: fj.pure_callback(np.cumsum, fj.ShapeDtype(x.shape, x.dtype), x * 2) + 1,
                    backend="llvm")
    np.testing.assert_allclose(f(np.arange(5.0)), np.cumsum(np.arange(5.0) * 2) + 1)
    exe = _exe(f)
    assert exe._program is None and "pure_callback" in exe.native_reason
    g = fj.function(lambda x: x, backend="llvm")  # the result is the argument
    x = np.arange(3.0)
    assert not np.shares_memory(g(x), x)


def _same_as_interpreter(f, *args, rtol=1e-12):
    out, exe = _native(fj.function(f, backend="llvm"), *args)
    want = fj.function(f, interpret=True)(*args)
    def leaves(o):
        return [x for item in o for x in leaves(item)] if isinstance(o, (tuple, list)) else [o]
    for got, ref in zip(leaves(out), leaves(want), strict=True):
        np.testing.assert_allclose(got, ref, rtol=rtol)
    return exe


def test_while_without_a_bound_and_a_carry_passed_through():
    def f(x, limit):
        # The second carry goes through the body unchanged (a copy into the next buffer).
        return fj.while_loop(lambda c: c[0].sum() < limit, lambda c: (c[0] * 1.5 + 0.25, c[1]), (x, x * 2))
    exe = _same_as_interpreter(f, np.linspace(0.1, 1, 6), np.float64(100.0))
    assert "while_loop (" in exe.driver_source() and "copy " in exe.driver_source()


def test_a_loop_over_small_carries_keeps_them_at_fixed_addresses_with_its_kernels_inlined():
    # fori_loop's v * 0.5 + 1 took 22 cycles an iteration (JAX 15): the carries swapped between
    # two copies each iteration, so no address was fixed, and the tiny kernels were optnone
    # (never inlined) in either module. Small carries are now copied back, and their loop's
    # kernels optimized in the steps' module, where LLVM keeps the carries in registers.
    from flowjit.codegen_cpu.program_emit import COPY_BACK_BYTES, copies_back, render_program

    # Each carry's next value reads the other's current one: a copy back that wrote over a
    # carry before the other read it would give the wrong pair.
    def fib(a, b):
        return fj.fori_loop(0, 30, lambda i, c: (c[1], c[0] + c[1]), (a, b))
    exe = _same_as_interpreter(fib, np.float64(0.0), np.float64(1.0))
    (loop,) = [s for s in exe._program.plan.steps if isinstance(s, program_plan.ControlCall)]
    assert copies_back(loop)
    texts = render_program(exe._program.plan, 64)
    defines = _kernel_defines(texts[0])
    assert defines and not any("optnone" in d for d in defines.values()), defines
    assert not any(_kernel_defines(t) for t in texts[1:]), texts[1:]
    # A scan's small carry and its rows, backward; a while loop whose condition reads a carry.
    xs = np.random.default_rng(6).standard_normal((9, 4))
    _same_as_interpreter(lambda c, xs: fj.scan(lambda c, x: (c * 0.5 + x, c * x), c, xs, reverse=True),
                         np.ones(4), xs)
    _same_as_interpreter(lambda x: fj.while_loop(lambda c: c[1] < 50.0, lambda c: (c[1], c[0] + c[1]), (x, x)),
                         np.float64(1.0))
    # Carries above the bound swap between their two copies.
    big = np.ones(COPY_BACK_BYTES // 8 + 1)
    exe = _same_as_interpreter(lambda x: fj.fori_loop(0, 5, lambda i, c: c * 0.5 + 1.0, x), big)
    (loop,) = [s for s in exe._program.plan.steps if isinstance(s, program_plan.ControlCall)]
    assert not copies_back(loop)


def test_scan_backward_with_several_outputs_and_a_constant():
    xs = np.random.default_rng(4).standard_normal((7, 3))

    def f(c, xs):
        return fj.scan(lambda c, x: (c * 0.5 + x, (c * x, x.sum())), c, xs, reverse=True)
    exe = _same_as_interpreter(f, np.ones(3), xs)
    assert "backward" in exe.driver_source()


def test_empty_scan_returns_its_carry():
    _same_as_interpreter(lambda c, xs: fj.scan(lambda c, x: (c + x, c), c, xs), np.ones(3), np.ones((0, 3)))


@pytest.mark.parametrize("index", [-3, 0, 1, 7])
def test_cond_picks_the_clamped_branch(index):
    def f(i, x):
        return fj.switch(i, [lambda x: x + 1, lambda x: fj.exp(x) @ x.T, lambda x: x * 0 + x.sum()], x)
    x = np.random.default_rng(5).standard_normal((3, 3))
    exe = _same_as_interpreter(f, np.int32(index), x)
    assert "branch (" in exe.driver_source()


def test_loops_inside_loops_and_a_matmul_in_the_body():
    w = np.random.default_rng(6).standard_normal((4, 4)) / 4

    def f(xs):
        def step(c, x):
            inner = fj.fori_loop(0, 3, lambda i, h: fj.tanh(h @ w + x), c)
            return inner, inner.sum()
        return fj.scan(step, fj.zeros((1, 4)), xs)
    exe = _same_as_interpreter(f, np.random.default_rng(7).standard_normal((6, 1, 4)))
    text = exe.driver_source()
    assert text.count("_loop") >= 2 and "gemm" in text


def _break_lowering(monkeypatch, tmp_path):
    """Every kernel lowered with a store at an index no loop defines (the lowering's bug,
    for the loop-IR verifier to catch before LLVM sees it), on a cold cache."""
    import dataclasses

    import flowjit.lowering.backend as lowering  # where the runtime lowers each fusion
    from flowjit.lowering.loops import INDEX, Const, Store, Var

    lower = lowering.lower_block

    def broken(block, name, collapse=False):
        k = lower(block, name, collapse)
        out = k.outputs[0]
        return dataclasses.replace(k, body=(Store(out.name, (Var("nowhere", INDEX),), Const(1.0, out.dtype)),))
    monkeypatch.setenv("FLOWJIT_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(lowering, "lower_block", broken)


def test_a_kernel_whose_loop_ir_does_not_verify_is_a_kernel_compile_error(monkeypatch, tmp_path):
    from flowjit.ir.errors import KernelCompileError

    _break_lowering(monkeypatch, tmp_path)
    f = fj.function(lambda x: fj.sin(x) * 3, backend="llvm")
    with pytest.raises(KernelCompileError, match=r"kernel sin_mul from .*test_program.py:\d+.*nowhere") as info:
        f(np.ones(3, np.float32))
    saved = re.search(r"saved in (\S+\.ll)", str(info.value)).group(1)
    assert "loop IR of kernel sin_mul" in open(saved).read()


def test_fastmath_reaches_every_kernel_of_the_program():
    from flowjit.codegen_cpu.program_emit import render_program

    def f(x, w):
        return fj.nn.softmax(fj.tanh(x @ w) * 2, axis=-1).sum(axis=0)
    x = np.random.default_rng(8).standard_normal((64, 32)).astype(np.float32)
    w = np.random.default_rng(9).standard_normal((32, 16)).astype(np.float32) / 4
    exact, exe = _native(fj.function(f), x, w)
    def made():
        stats = fj.cache_stats()
        return stats["compiled"] + stats["loaded"]
    before = made()
    fast, fast_exe = _native(fj.function(f, fastmath=True), x, w)
    assert made() == before + 1  # its own module, not the exact one's
    np.testing.assert_allclose(fast, exact, rtol=1e-4, atol=1e-5)
    assert not any(" fast " in text for text in render_program(exe._program.plan, 64))
    assert all(" fast " in text for text in render_program(fast_exe._program.plan, 64, fastmath=True))


def test_empty_intermediates_written_in_place():
    # A batch of 0: the intermediates take no scratch at all, and the kernel writing in
    # place over the first matmul's output still gets a buffer.
    def f(a, b, c):
        return fj.tanh(fj.exp(a @ b) + 1) @ c
    rng = np.random.default_rng(10)
    b, c = rng.standard_normal((3, 4)), rng.standard_normal((4, 2))
    for rows in (0, 2):
        a = rng.standard_normal((rows, 3))
        out, exe = _native(fj.function(f), a, b, c)
        np.testing.assert_allclose(out, np.tanh(np.exp(a @ b) + 1) @ c, rtol=1e-12)
    assert "'s memory" in exe.driver_source()


def test_the_python_drivers_kernels_verify_their_loop_ir_too(monkeypatch, tmp_path):
    from flowjit.ir.errors import KernelCompileError

    _break_lowering(monkeypatch, tmp_path)
    # A cumsum has no native form: the program keeps the Python driver, which compiles each kernel.
    f = fj.function(lambda x: fj.cumsum(fj.sin(x) * 3, axis=0), backend="llvm")
    with pytest.raises(KernelCompileError, match=r"kernel sin_mul from .*test_program.py:\d+.*nowhere is used "
                                                 r"before it is defined"):
        f(np.ones(3, np.float32))


def _blas_setter():
    from flowjit.codegen_cpu.blas import blas_threads
    threads = blas_threads()
    if threads is None:
        pytest.skip("this BLAS has no thread control flowjit knows")
    return threads, ctypes.CFUNCTYPE(None, ctypes.c_int)(threads.set_address)


def test_a_small_product_runs_on_one_blas_thread_and_leaves_the_blas_as_it_was():
    # Waking the BLAS's other threads for a small product costs more than they save, and on a
    # busy machine they may not run for a time slice: the digits MLP trained 8x slower beside
    # two busy processes until its 64x128x64 products ran on one thread.
    from flowjit.codegen_cpu.blas import product_bracket
    threads, set_threads = _blas_setter()
    before = threads.get()
    rng = np.random.default_rng(0)
    small = rng.standard_normal((64, 128)).astype(np.float32), rng.standard_normal((128, 64)).astype(np.float32)
    large = rng.standard_normal((256, 256)).astype(np.float32), rng.standard_normal((256, 128)).astype(np.float32)
    assert 64 * 128 * 64 < program_plan.BLAS_PARALLEL_MIN_WORK <= 256 * 256 * 128
    calls: list[str] = []
    # stand in for the gemms' bracket (blas.product_bracket)
    enter = ctypes.CFUNCTYPE(None)(lambda: calls.append("one thread"))
    leave = ctypes.CFUNCTYPE(None)(lambda: calls.append("back"))
    try:
        set_threads(2)
        for (a, b), want in ((small, ["one thread", "back"]), (large, [])):
            f = fj.function(lambda a, b: a @ b)
            out, exe = _native(f, a, b)
            np.testing.assert_allclose(out, a @ b, rtol=1e-4, atol=1e-4)
            assert threads.get() == 2  # as the program found it
            table = exe._program._table
            assert (table[program_plan.T_BLAS_ENTER], table[program_plan.T_BLAS_LEAVE]) == product_bracket()
            table[program_plan.T_BLAS_ENTER], table[program_plan.T_BLAS_LEAVE] = (
                ctypes.cast(x, ctypes.c_void_p).value for x in (enter, leave))
            calls.clear()
            np.testing.assert_allclose(f(a, b), a @ b, rtol=1e-4, atol=1e-4)
            table[program_plan.T_BLAS_ENTER], table[program_plan.T_BLAS_LEAVE] = product_bracket()
            assert calls == want, (a.shape, b.shape, calls)
    finally:
        set_threads(before)


def test_a_program_loaded_with_one_blas_thread_keeps_it(tmp_path, monkeypatch):
    # A user who set OPENBLAS_NUM_THREADS=1 (or threadpoolctl) keeps one thread after a call.
    monkeypatch.setenv("FLOWJIT_CACHE_DIR", str(tmp_path))
    threads, set_threads = _blas_setter()
    before = threads.get()
    try:
        set_threads(1)
        a = np.ones((32, 48), np.float64)
        out, _ = _native(fj.function(lambda a: a @ a.T), a)
        np.testing.assert_allclose(out, a @ a.T)
        assert threads.get() == 1
    finally:
        set_threads(before)


def test_a_programs_small_products_leave_the_blas_count_the_user_set_after_loading_it():
    # threadpoolctl or openblas_set_num_threads after the program loaded: a small product sets
    # back the count it found, not the one the library had when the program was loaded.
    threads, set_threads = _blas_setter()
    before = threads.get()
    try:
        set_threads(2)
        a = np.ones((32, 48), np.float64)
        f = fj.function(lambda a: a @ a.T)
        _native(f, a)
        set_threads(1)
        np.testing.assert_allclose(f(a), a @ a.T)
        assert threads.get() == 1
    finally:
        set_threads(before)


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_a_complex_matmul_is_the_blas_complex_gemm_in_the_program_and_ahead_of_time(dtype, tmp_path):
    rng = np.random.default_rng(0)

    def cplx(*shape):
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)

    def f(a, b, c, d):
        return (a @ b) * 2.0, a.T @ c, d @ b   # a transpose read in place, a batch broadcast
    a, b, c, d = cplx(6, 4), cplx(4, 3), cplx(6, 3), cplx(3, 5, 4)
    tol = 1e-4 if dtype == np.complex64 else 1e-12
    out, _ = _native(fj.function(f), a, b, c, d)
    want = fj.function(f, interpret=True)(a, b, c, d)
    for g, w in zip(out, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol)
    plan = fj.function(f).kernels(a, b, c, d)
    assert f"{np.dtype(dtype).name} gemm" in plan and "a0.T @" in plan   # the transpose read in place
    fj.export(lambda x, y: x @ y, fj.ShapeDtype(("B", 4), dtype), b, path=tmp_path, name="cmm")
    compiled = fj.load_compiled(tmp_path / "cmm.json")
    for batch in (1, 9):
        x = cplx(batch, 4)
        np.testing.assert_allclose(compiled(x, b), x @ b, rtol=tol, atol=tol)


_SPLIT_PROGRAM = ("import sys, numpy as np, flowjit as fj\n"
                  "x = np.linspace(-3, 3, 1 << 20, dtype=np.float32)\n"
                  "y = fj.function(lambda x: fj.tanh(x) * 2 + 1)(x)\n"
                  "assert np.allclose(y, np.tanh(x) * 2 + 1, rtol=1e-5, atol=1e-6)\n"
                  "print(fj.cache_stats()['compiled'], fj.cache_stats()['loaded'])\n")


def test_split_kernels_compile_in_a_module_of_their_own_and_load_from_the_cache(tmp_path):
    # A kernel split over the pool goes, with the wrapper the pool calls, to a second
    # module compiled on a thread of its own; the cache entry holds both objects, and a
    # warm process links them, with flowjit's loader and with MCJIT.
    import subprocess
    import sys

    from flowjit.codegen_cpu import native_pool
    if native_pool().workers == 0:
        pytest.skip("FLOWJIT_NUM_THREADS=1: no kernel is split")

    from flowjit.codegen_cpu import jit
    from flowjit.codegen_cpu.program_emit import render_program

    x = np.linspace(-3, 3, 1 << 20, dtype=np.float32)
    y, exe = _native(fj.function(lambda x: fj.tanh(x) * 2 + 1), x)
    np.testing.assert_allclose(y, np.tanh(x) * 2 + 1, rtol=1e-5, atol=1e-6)
    main, part = render_program(exe._program.plan, 64)
    assert "declare void @fj_split_1(" in main and "define void @fj_split_1(" in part
    assert "fj_chunk_" in part and "fj_chunk_" not in main
    env = {**os.environ, "FLOWJIT_CACHE_DIR": str(tmp_path)}
    runs = [subprocess.run([sys.executable, "-c", _SPLIT_PROGRAM], capture_output=True, text=True, timeout=300,
                           env={**env, **extra}) for extra in ({}, {}, {"FLOWJIT_LLVM_LOADER": "mcjit"})]
    assert all(r.returncode == 0 for r in runs), [r.stderr[-2000:] for r in runs]
    (compiled, _), *warm = [tuple(map(int, r.stdout.split())) for r in runs]
    assert compiled >= 1 and all(c == 0 and n >= 1 for c, n in warm), (compiled, warm)
    entries = [jit._unpack(jit.objcache.read(p.name[:-2], str(tmp_path / "objects")))
               for p in (tmp_path / "objects").glob("*.o")]
    assert any(e is not None and len(e[1]) == 2 for e in entries)


def test_two_objects_pack_and_unpack_and_a_truncated_entry_is_refused():
    from flowjit.codegen_cpu import jit

    payload = jit._pack(["memset", "flowjit_parallel_for"], [b"main object", b"part"])
    assert jit._unpack(payload) == (["memset", "flowjit_parallel_for"], [b"main object", b"part"])
    assert jit._unpack(payload[:-1]) is None and jit._unpack(payload + b"x") is None
    assert jit._unpack(jit._pack([], [b"one"])) == ([], [b"one"])


def test_kernels_on_the_calling_thread_are_shared_between_the_two_modules():
    # Two kernels run on the calling thread (not split; neither tiny): the first goes to the
    # second module behind fj_at_N, called at its shape (the steps' own function is the
    # first module's share so far), the second stays inlined into the steps, so that the
    # two modules' LLVM time is about even.
    from flowjit.codegen_cpu.program_emit import render_program

    def f(x, w):
        return fj.exp(x @ w).sum(axis=1) + fj.tanh((x * 2) @ w).max(axis=1)
    x = np.random.default_rng(3).standard_normal((64, 64)).astype(np.float32)
    w = np.random.default_rng(4).standard_normal((64, 4)).astype(np.float32) / 8
    got, exe = _native(fj.function(f), x, w)
    np.testing.assert_allclose(got, np.exp(x @ w).sum(axis=1) + np.tanh((x * 2) @ w).max(axis=1), rtol=1e-5)
    main, part = render_program(exe._program.plan, 64)
    assert re.search(r"declare i32 @fj_at_\d+\(", main) and re.search(r"define i32 @fj_at_\d+\(", part)
    assert "fj_kernel_" in main and "fj_kernel_" in part


def test_kernels_alike_but_for_their_name_compile_once_per_shape():
    # Two layers of one width fuse into two kernels that differ only in name (the bias and
    # the ReLU); at one shape they are one function, defined once and called by both
    # steps. The third layer's kernel is the same loop IR at another shape, defined again
    # (called directly: too small for LLVM's optimizer, it stays in the steps' module).
    from flowjit.codegen_cpu.program_emit import render_program

    def f(x, w1, b1, w2, b2, w3, b3):
        h = fj.maximum(x @ w1 + b1, 0.0)
        h = fj.maximum(h @ w2 + b2, 0.0)
        return fj.maximum(h @ w3 + b3, 0.0)
    rng = np.random.default_rng(5)
    x, w1, w2, w3 = (rng.standard_normal(s).astype(np.float32) for s in ((8, 16), (16, 32), (32, 32), (32, 4)))
    b1, b2, b3 = (rng.standard_normal(s).astype(np.float32) for s in (32, 32, 4))
    got, exe = _native(fj.function(f), x, w1, b1, w2, b2, w3, b3)
    h = np.maximum(np.maximum(x @ w1 + b1, 0) @ w2 + b2, 0)
    np.testing.assert_allclose(got, np.maximum(h @ w3 + b3, 0), rtol=1e-5, atol=1e-5)
    calls = [s for s in program_plan.walk_steps(exe._program.plan.steps) if isinstance(s, program_plan.KernelCall)]
    assert len({s.kernel.name for s in calls}) == len(calls) == 3
    texts = render_program(exe._program.plan, 64)
    for text in texts:   # the kernel's definition at most once in each module
        defined = re.findall(r"^define .*@(fj_kernel_\w+)\(", text, re.M)
        assert len(defined) == len(set(defined)) <= 1 and set(defined) <= {"fj_kernel_" + calls[0].kernel.name}
    at_calls = re.findall(r"call i32 @(fj_at_\d+)\(", texts[0])
    assert len(at_calls) == 2 and len(set(at_calls)) == 1, at_calls


def test_kernels_alike_but_for_the_sign_of_a_zero_are_two_kernels():
    # 0.0 == -0.0 in Python: kernels are one when their loop IR's text is, not their records.
    def f(x, w):
        a = fj.exp(1.0 / fj.minimum(x @ w, 0.0))
        return fj.exp(1.0 / fj.minimum(a @ w, -0.0))
    x, w = -np.ones((4, 4)), np.ones((4, 4))
    got, _ = _native(fj.function(f), x, w)
    with np.errstate(divide="ignore"):
        want = np.exp(1.0 / np.minimum(np.exp(1.0 / np.minimum(x @ w, 0.0)) @ w, -0.0))
    np.testing.assert_array_equal(got, want)


def test_a_branch_whose_first_step_is_split_over_the_pool():
    # The branch's block function places the split kernel's context at the start of its
    # entry block, under the builder emitting its steps: the steps must stay in order.
    x = np.random.default_rng(8).standard_normal(1 << 20).astype(np.float32)
    _same_as_interpreter(lambda x: fj.cond(x.sum() > 0, lambda: fj.exp(x * 0.1) * 2, lambda: fj.tanh(x) - 1), x,
                         rtol=1e-5)


def test_a_kernels_temps_live_in_the_scratch_block_and_start_as_whatever_was_there():
    # The sums over the first axis keep the other two: their f64 accumulators (1 MiB each)
    # are temps of the kernel, handed a slice of the scratch block (not calloc'd, not
    # zeroed). The tanh before it is an intermediate that dies there, so the scratch the
    # temps share holds its values: the accumulators start from what the lowering stores.
    from flowjit.codegen_cpu.program_plan import KernelCall, walk_steps

    def f(x, w):
        h = fj.tanh(x @ w)
        return (h - h.mean(axis=0)).sum(axis=0) + (h * h).sum(axis=0), (x * 2.0) @ w
    rng = np.random.default_rng(5)
    w = rng.standard_normal((64, 1024)).astype(np.float32) / 8
    g = fj.function(f)
    for k in range(3):
        x = rng.standard_normal((4, 128, 64)).astype(np.float32) * (k + 1)
        (got, _), exe = _native(g, x, w)
        h = np.tanh(x.astype(np.float64) @ w)
        np.testing.assert_allclose(got, (h - h.mean(axis=0)).sum(axis=0) + (h * h).sum(axis=0), rtol=2e-4, atol=2e-3)
    calls = [s for s in walk_steps(exe._program.plan.steps) if isinstance(s, KernelCall) and s.temps]
    assert calls, exe._program.plan.describe()
    temp = exe._program.plan.buffer(calls[0].temps)
    assert temp.kind == "scratch" and temp.slot % 64 == 0 and temp.shape[0] >= 128 * 1024 * 8


_TEMP_FAULTS = """
import resource
import numpy as np
import flowjit as fj

def f(x):   # one kernel, four temps of f64[128, 1024] (1 MiB each): the accumulators of each sum
    m = x.mean(axis=0)
    return ((x - m) ** 2).mean(axis=0) + (x * x).sum(axis=0) + fj.exp(x).sum(axis=0)
f = fj.function(f)
x = np.ones((8, 128, 1024), np.float32)
for _ in range(5):
    y = f(x)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(50):
    y = f(x)
print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 50)
"""


def test_a_kernels_large_temps_do_not_page_fault_every_call(tmp_path):
    # calloc'd and freed by the kernel on each call, temps past malloc's mmap threshold were
    # fresh pages every call: glibc gives the freed top of its heap back (here 1,880 page
    # faults a call; a transformer's training step: 2,900, 27 ms against 23).
    import subprocess
    import sys
    got = subprocess.run([sys.executable, "-c", _TEMP_FAULTS], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "FLOWJIT_CACHE_DIR": str(tmp_path)})
    assert got.returncode == 0, got.stderr[-2000:]
    faults = float(got.stdout.split()[-1])
    assert faults < 100, f"{faults} minor page faults a call"


def _kernel_defines(text):
    """Each kernel function's name in a module's IR text -> its definition line, with its
    attribute group's attributes written out."""
    groups = dict(re.findall(r"^attributes (#\d+) = \{([^}]*)\}", text, re.M))
    return {m.group(1): m.group(0) + " " + " ".join(groups.get(g, "") for g in re.findall(r"#\d+", m.group(0)))
            for m in re.finditer(r"^define [^\n]*@(fj_kernel_\w+)\([^\n]*", text, re.M)}


def test_a_tiny_kernel_is_left_out_of_llvms_optimizer_and_gives_the_same_bits():
    # A logits layer's bias add ([32, 10]): optnone, LLVM's optimizer skips it; the same
    # add on 4096 elements, or a tiny kernel with a math intrinsic, is optimized.
    from flowjit.codegen_cpu.program_emit import TINY_ELEMENTS, render_program

    rng = np.random.default_rng(11)
    b = rng.standard_normal(10).astype(np.float32)
    for rows, tiny in ((32, True), (TINY_ELEMENTS // 10 + 1, False)):
        x = rng.standard_normal((rows, 10)).astype(np.float32)
        x[0, :3] = [np.nan, np.inf, -0.0]
        got, exe = _native(fj.function(lambda x, b: x + b), x, b)
        np.testing.assert_array_equal(got.view(np.uint32), (x + b).view(np.uint32))
        defines = [d for text in render_program(exe._program.plan, 64) for d in _kernel_defines(text).values()]
        assert len(defines) == 1 and ("optnone" in defines[0]) is tiny, defines
    # A reduction writes few elements of many it reads (helper-21): optimized.
    y = rng.standard_normal((16, 1000)).astype(np.float32)
    got, exe = _native(fj.function(lambda y: fj.max(y, axis=1)), y)
    np.testing.assert_array_equal(got, y.max(axis=1))
    texts = render_program(exe._program.plan, 64)
    assert not any("optnone" in d for text in texts for d in _kernel_defines(text).values())
    x = rng.standard_normal((32, 10)).astype(np.float32)
    got, exe = _native(fj.function(lambda x, b: fj.exp(x) + b), x, b)
    np.testing.assert_allclose(got, np.exp(x) + b, rtol=1e-6, atol=1e-6)
    texts = render_program(exe._program.plan, 64)
    assert not any("optnone" in d for text in texts for d in _kernel_defines(text).values())


def test_a_kernel_of_many_loops_is_compiled_behind_a_function_of_its_own(monkeypatch):
    # Batch norm's kernels between two products (the second pair's backward has 26 loops): the
    # one of OWN_FUNCTION_LOOPS loops or more in the steps' module is called through a
    # function at its shape, never inlined into the steps: inlined, LLVM's time on the
    # steps grew faster than the kernel's.
    from flowjit.codegen_cpu import program_emit
    from flowjit.codegen_cpu.program_emit import OWN_FUNCTION_LOOPS, render_program
    from flowjit.lowering.loops import loop_count

    def norm(x, g):
        d = x - fj.mean(x, axis=(0, 1, 2), keepdims=True)
        return fj.maximum(d / fj.sqrt(fj.mean(d * d, axis=(0, 1, 2), keepdims=True) + 1e-5) * g, 0.0)

    def loss(x, g, w):
        h = fj.reshape(fj.reshape(norm(x, g), (-1, 8)) @ w, x.shape)
        return (norm(norm(h, g), g) ** 2).sum()
    rng = np.random.default_rng(12)
    x, g, w = (rng.standard_normal(s).astype(np.float32) for s in ((4, 6, 6, 8), (8,), (8, 8)))
    _, exe = _native(fj.function(fj.grad(loss)), x, g, w)
    # Every kernel in the steps' module (the heaviest would go to the second one first).
    monkeypatch.setattr(program_emit, "STEPS_WEIGHT", -(1 << 40))
    main = render_program(exe._program.plan, 64)[0]
    steps = main[main.index("define internal i32 @fj_steps("):]
    steps = steps[:steps.index("\n}\n")]
    called = set(re.findall(r"call i32 @(fj_kernel_\w+)\(", main))
    calls = [s for s in program_plan.walk_steps(exe._program.plan.steps) if isinstance(s, program_plan.KernelCall)]
    big = {program_plan.kernel_abi.symbol(s.kernel) for s in calls if loop_count(s.kernel.body) >= OWN_FUNCTION_LOOPS}
    assert big & called, (big, called)     # one in the steps' module
    assert not any(f"@{name}(" in steps for name in big)


def test_a_kernel_of_many_loops_at_one_shape_is_never_inlined(monkeypatch):
    # A batch-norm-like kernel (NOINLINE_LOOPS loops or more, one shape): noinline, so LLVM
    # optimizes its body once; IPSCCP still folds its constant dimensions (its one call).
    from flowjit.codegen_cpu import program_emit
    from flowjit.codegen_cpu.program_emit import NOINLINE_LOOPS, render_program
    from flowjit.lowering.loops import loop_count

    def norm(x):
        d = x - fj.mean(x, axis=(0, 1, 2), keepdims=True)
        return fj.maximum(d / fj.sqrt(fj.mean(d * d, axis=(0, 1, 2), keepdims=True) + 1e-5), 0.0)
    rng = np.random.default_rng(13)
    x = rng.standard_normal((4, 6, 7, 8)).astype(np.float32)
    got, exe = _native(fj.function(norm), x)
    d = x - x.mean(axis=(0, 1, 2), keepdims=True)
    np.testing.assert_allclose(got, np.maximum(d / np.sqrt((d * d).mean(axis=(0, 1, 2), keepdims=True) + 1e-5), 0),
                               rtol=1e-5, atol=1e-5)
    calls = [s for s in program_plan.walk_steps(exe._program.plan.steps) if isinstance(s, program_plan.KernelCall)]
    loops = {program_plan.kernel_abi.symbol(s.kernel): loop_count(s.kernel.body) for s in calls}
    defines = {n: d for text in render_program(exe._program.plan, 64) for n, d in _kernel_defines(text).items()}
    assert any(n >= NOINLINE_LOOPS for n in loops.values()), loops
    for name, n in loops.items():
        assert ("noinline" in defines[name]) is (n >= NOINLINE_LOOPS), (name, n, defines[name])
    # Optimized, the noinline kernel takes its buffers only: its one call's dimensions folded in.
    from flowjit.codegen_cpu import jit
    optimized = "".join(str(jit.optimize(t)) for t in render_program(exe._program.plan, 64))
    for name in (n for n, count in loops.items() if count >= NOINLINE_LOOPS):
        head = re.search(rf"^define [^\n]*@{name}\(([^\n]*)\)", optimized, re.M)
        assert head and "i64" not in head.group(1), head and head.group(0)

    # One kernel (bias and ReLU) at two widths stays inlinable, each call specializing its
    # copy; the others, at one shape each, are noinline at any size here.
    monkeypatch.setattr(program_emit, "NOINLINE_LOOPS", 1)

    def mlp(x, w1, b1, w2, b2, w3):
        return fj.maximum(fj.maximum(x @ w1 + b1, 0.0) @ w2 + b2, 0.0) @ w3
    a = [rng.standard_normal(s).astype(np.float32) for s in ((64, 24), (24, 40), (40,), (40, 72), (72,), (72, 8))]
    got, exe = _native(fj.function(mlp), *a)
    h = np.maximum(a[0] @ a[1] + a[2], 0)
    np.testing.assert_allclose(got, np.maximum(h @ a[3] + a[4], 0) @ a[5], rtol=1e-4, atol=1e-4)
    driver = program_emit._Driver(exe._program.plan, 64)
    calls = [s for s in program_plan.walk_steps(exe._program.plan.steps) if isinstance(s, program_plan.KernelCall)]
    shapes: dict[str, set] = {}
    for s in calls:
        shapes.setdefault(program_plan.kernel_abi.symbol(driver.canonical(s.kernel)), set()).add(s.dims)
    assert sorted(map(len, shapes.values()))[-1] == 2, shapes
    defines = {n: d for text in render_program(exe._program.plan, 64) for n, d in _kernel_defines(text).items()}
    for name, dims in shapes.items():
        assert ("noinline" in defines[name]) is (len(dims) == 1), (name, dims, defines[name])


def test_the_heaviest_kernels_are_placed_first_between_the_two_modules():
    # The zoo CNN's inference: two batch-norm statistics kernels and two heavier apply
    # kernels (with the pool), in step order statistics, apply, statistics, apply. Placed
    # heaviest first, each module gets one of each; in step order the first module took
    # both apply kernels (65 against 52 ms of LLVM).
    from bench.workloads import zoo
    from flowjit.codegen_cpu.program_emit import render_program

    params, (x, _) = zoo.init("cnn", False), zoo.batch("cnn", False)
    g = fj.function(zoo.predict(zoo.lib("flowjit"), "cnn"))
    g(params, x)
    exe = g._lookup((params, x), {})[0].executable
    assert exe._program is not None, exe.native_reason
    main, part = render_program(exe._program.plan, 64)
    defined = [set(re.findall(r"^define [^\n]*@(fj_kernel_\w+)\(", t, re.M)) for t in (main, part)]
    apply = {n for n in defined[0] | defined[1] if "sqrt" in n and "maximum" in n}
    stats = {n for n in defined[0] | defined[1] if "reduce_sum" in n and "sqrt" not in n}
    assert len(apply) == len(stats) == 2, defined
    assert all(len(apply & d) == 1 and len(stats & d) == 1 for d in defined), defined


def _pooled_names(plan) -> list[str]:
    from flowjit.codegen_cpu.program_emit import render_program
    text = "\n".join(render_program(plan, 64))
    return sorted(set(re.findall(r'define internal void @"?(fj_kernel_\w+?_at\d+)\.pool\d+"?\(', text)))


def test_the_parallel_loop_of_a_kernel_with_serial_loops_and_temps_runs_on_the_pool():
    # Centering by the column means: the column sums are serial loops into temps, so the
    # program cannot split the kernel as chunks; its parallel loop (the centering) runs on
    # the pool, its body rendered at the call's dims, one rendering per shape.
    from flowjit.codegen_cpu import native_pool
    if native_pool().workers == 0:
        pytest.skip("FLOWJIT_NUM_THREADS=1: nothing runs on the pool")
    rng = np.random.default_rng(7)
    x = rng.standard_normal((25088, 32)).astype(np.float32) + 3
    y = rng.standard_normal((8192, 96)).astype(np.float32)
    got, exe = _native(fj.function(lambda x, y: (x - x.mean(axis=0), y - y.mean(axis=0))), x, y)
    for g, a in zip(got, (x, y)):
        np.testing.assert_allclose(g, a - a.mean(axis=0, dtype=np.float64).astype(np.float32), rtol=1e-5, atol=1e-5)
    assert len(_pooled_names(exe._program.plan)) == 2


def test_a_large_scatter_add_onto_its_operand_runs_its_copy_on_the_pool_and_adds_repeated_ids():
    # The kernel copies the operand (a parallel loop) and then adds the updates (serial); in
    # the program the output is the operand's memory, which its rendering at the call knows.
    from flowjit.codegen_cpu import native_pool
    if native_pool().workers == 0:
        pytest.skip("FLOWJIT_NUM_THREADS=1: nothing runs on the pool")
    rng = np.random.default_rng(8)
    table = rng.standard_normal((100_000, 8)).astype(np.float32)
    ids = rng.integers(0, 1000, 4096).astype(np.int32)   # many repeats
    u = rng.standard_normal((4096, 8)).astype(np.float32)
    got, exe = _native(fj.function(lambda t, i, u: fj.scatter_add(t * 2, i, u)), table, ids, u)
    want = table * 2
    np.add.at(want, ids, u)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    assert _pooled_names(exe._program.plan)


_ENTRY_OUTLIVES_PROGRAM = """
import gc
import time
import numpy as np
import flowjit as fj
from flowjit.codegen_cpu import jit

f = fj.function(lambda x: x + 1)
x = np.ones(4, np.float32)
f(x)
f(x)
call = next(iter(f._direct.values()))   # the program's builtin, held by the dispatch fast path
name = call.__name__
while jit.upgrade_counts()["upgraded"] + jit.upgrade_counts()["failed"] < 1:
    time.sleep(0.01)   # the upgrade's watcher holds the program until it lands
del f
gc.collect()           # the program object is gone; its builtin is not
print(call.__name__ == name, call(x).tolist())
gc.collect()           # the collector visits the builtin, which reads its method definition
"""


def test_a_programs_builtin_outlives_the_program_object(tmp_path):
    # The builtin's PyMethodDef was a ctypes structure of the program object: once that
    # was collected (a TracedFunction's cycle, its dispatch cache still holding the
    # builtin), the builtin read freed memory for its name and flags, and the collector,
    # visiting it, followed a pointer from there (the suite's rare segfaults "Garbage-
    # collecting" in tests/tracer/test_fft.py). Python's debug allocator fills freed memory
    # with 0xDD, which makes the read fault every time.
    import subprocess
    import sys
    got = subprocess.run([sys.executable, "-c", _ENTRY_OUTLIVES_PROGRAM], capture_output=True, text=True,
                         timeout=300, env={**os.environ, "FLOWJIT_CACHE_DIR": str(tmp_path), "PYTHONMALLOC": "debug"})
    assert got.returncode == 0, got.stderr[-2000:]
    assert got.stdout.split("\n")[0] == "True [2.0, 2.0, 2.0, 2.0]"


def test_a_program_of_tiny_kernels_compiles_as_one_module():
    # A kernel too small for LLVM's optimizer has no optimization to overlap with the steps'
    # module: in a second module of its own it paid that module's set-up (a one-op program's
    # cold call took 0.4-1.3 ms longer). A kernel worth optimizing still goes to the second.
    from flowjit.codegen_cpu.program_emit import render_program

    _, tiny = _native(fj.function(lambda x: x * 2 + 1), np.ones((8, 9), np.float32))
    assert len(render_program(tiny._program.plan, 64)) == 1
    _, big = _native(fj.function(lambda x: x * 2 + 1), np.ones((300, 300), np.float32))
    assert len(render_program(big._program.plan, 64)) == 2
