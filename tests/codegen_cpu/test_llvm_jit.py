"""The llvmlite machinery under the LLVM renderer: O3 code that vectorizes, results through
ctypes, the object cache on disk (warm processes load and compile nothing, bad entries are
recompiled and never run, concurrent writers), the chunk pool and BLAS by address."""

from __future__ import annotations

import ctypes
import dataclasses
import glob
import inspect
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import threading
import time
import uuid

import numpy as np
import pytest

from flowjit.codegen_cpu import (
    LLVMCompileError,
    blas_functions,
    cache_stats,
    compile_object,
    host_target,
    jit,
    load,
    objcache,
    optimize,
    run_chunked,
)
from flowjit.codegen_cpu.parallel import ChunkPool

from . import modules

P = ctypes.c_void_p
I64 = ctypes.c_int64
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("FLOWJIT_CACHE_DIR", str(tmp_path))
    return tmp_path


def fresh(builder, *args):
    """IR text no other test (or earlier run) has compiled: a new key each time."""
    return builder(f"t{uuid.uuid4().hex}", *args)


def axpb_call(lib, x):
    y = np.full_like(x, np.nan)
    lib.function("axpb", None, [P, P, I64])(x.ctypes.data, y.ctypes.data, x.size)
    return y


def delta(before):
    now = cache_stats()
    return {k: now[k] - before[k] for k in now}


def test_a_loop_compiles_to_correct_vectorized_code():
    text = fresh(modules.axpb)
    assert re.search(r"<\d+ x float>", str(optimize(text)))
    x = np.arange(1003, dtype=np.float32)
    before = cache_stats()
    lib = load(text)
    np.testing.assert_array_equal(axpb_call(lib, x), x * 2 + 1)
    assert delta(before)["compiled"] == 1
    assert load(text) is lib and delta(before)["reused"] == 1


@pytest.mark.skipif(platform.machine() != "x86_64", reason="x86 CPU names")
def test_a_cpu_override_targets_that_cpu():
    t = host_target("x86-64-v3")
    assert t.cpu == "x86-64-v3" and t.fingerprint() != host_target().fingerprint()
    ir_text = str(optimize(fresh(modules.axpb), t))
    assert "<8 x float>" in ir_text and "<16 x float>" not in ir_text  # AVX2, no AVX-512
    x = np.linspace(-3, 3, 77, dtype=np.float32)
    np.testing.assert_array_equal(axpb_call(load(fresh(modules.axpb), t), x), x * 2 + 1)


def test_a_float_sum_reduction():
    text = fresh(modules.fsum)
    assert re.search(r"fadd reassoc nsz <\d+ x float>", str(optimize(text)))
    f = load(text).function("fsum", ctypes.c_float, [P, I64])
    x = np.random.default_rng(0).standard_normal(10_007).astype(np.float32)
    assert f(x.ctypes.data, x.size) == pytest.approx(float(x.astype(np.float64).sum()), rel=1e-4, abs=1e-3)
    assert f(x.ctypes.data, 0) == 0.0


def test_ir_llvm_rejects_is_an_error_that_saves_the_ir(cache_dir):
    with pytest.raises(LLVMCompileError, match=r"(?s)'broken'.*ret i32 0.*saved in .*failed") as e:
        load("define void @f() {\n  ret i32 0\n}\n", name="broken")
    saved = re.search(r"saved in (\S+\.ll)", str(e.value)).group(1)
    assert "ret i32 0" in open(saved).read()


_WARM = r"""
import ctypes, json, sys, numpy as np
from flowjit.codegen_cpu import load, cache_stats, timings
text = open(sys.argv[1]).read()
lib = load(text)
x = np.arange(1000, dtype=np.float32); y = np.zeros_like(x)
lib.function("axpb", None, [ctypes.c_void_p] * 2 + [ctypes.c_int64])(x.ctypes.data, y.ctypes.data, x.size)
print(json.dumps({"stats": cache_stats(), "ok": bool((y == x * 2 + 1).all()), "timings": timings,
                  "numba": "numba" in sys.modules, "scipy": "scipy" in sys.modules,
                  "binding": "llvmlite.binding" in sys.modules}))
"""


def run_warm(text_path, cache_dir, n=1):
    env = dict(os.environ, FLOWJIT_CACHE_DIR=str(cache_dir), PYTHONPATH=ROOT)
    env.pop("FLOWJIT_LLVM_LOADER", None)  # what a user's process does: the default loader
    procs = [subprocess.Popen([sys.executable, "-c", _WARM, str(text_path)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(n)]
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        outs.append(json.loads(out.splitlines()[-1]))
    return outs


def test_a_warm_process_loads_and_compiles_nothing_without_numba_or_scipy(tmp_path, cache_dir):
    text = fresh(modules.axpb)
    (tmp_path / "m.ll").write_text(text)
    load(text)  # this process fills the cache
    (out,) = run_warm(tmp_path / "m.ll", cache_dir)
    assert out["ok"] and out["stats"]["loaded"] == 1 and out["stats"]["compiled"] == 0
    assert not out["numba"] and not out["scipy"]
    if platform.system() == "Linux" and platform.machine() == "x86_64":
        assert not out["binding"]  # flowjit's ELF loader linked it: LLVM was not loaded at all


def test_processes_sharing_a_cold_cache_all_get_correct_results(tmp_path, cache_dir):
    text = fresh(modules.axpb)
    (tmp_path / "m.ll").write_text(text)
    outs = run_warm(tmp_path / "m.ll", cache_dir, n=4)
    assert all(o["ok"] for o in outs)
    assert all(o["stats"]["rejected"] == 0 for o in outs)  # nobody read half an entry
    assert sum(o["stats"]["compiled"] + o["stats"]["loaded"] for o in outs) == 4
    k = objcache.key(text, host_target().fingerprint())
    assert [p.name for p in (cache_dir / "objects").iterdir()] == [k + ".o"]  # no temporary left


def _flip(entry: bytes) -> bytes:
    b = bytearray(entry)
    b[len(b) // 2] ^= 0xFF
    return bytes(b)


@pytest.mark.parametrize("damage", ["flipped", "truncated", "other key", "header only"])
def test_a_bad_cache_entry_is_recompiled_not_executed(damage):
    # The entry under this key holds the code of y = x*3 + 5: if it ran, the result shows it.
    text, impostor = fresh(modules.axpb), fresh(modules.axpb, 3.0, 5.0)
    k = objcache.key(text, host_target().fingerprint())
    other = objcache.key(impostor, host_target().fingerprint())
    obj = compile_object(impostor)
    entry = {"flipped": _flip(objcache.encode(k, obj)),
             "truncated": objcache.encode(k, obj)[:-100],
             "other key": objcache.encode(other, obj),
             "header only": objcache.encode(k, obj)[:40]}[damage]
    os.makedirs(objcache.directory(), exist_ok=True)
    with open(objcache.path(k), "wb") as f:
        f.write(entry)
    before = cache_stats()
    x = np.arange(64, dtype=np.float32)
    np.testing.assert_array_equal(axpb_call(load(text), x), x * 2 + 1)
    assert delta(before) == {"compiled": 1, "loaded": 0, "reused": 0, "rejected": 1}
    assert objcache.read(k) is not None  # rewritten whole


def test_threads_loading_one_module_compile_it_once():
    text = fresh(modules.axpb)
    barrier, libs = threading.Barrier(8), []

    def go():
        barrier.wait()
        libs.append(load(text))

    before = cache_stats()
    threads = [threading.Thread(target=go) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert delta(before) == {"compiled": 1, "loaded": 0, "reused": 7, "rejected": 0}
    assert len({id(lib) for lib in libs}) == 1


def test_an_unwritable_cache_still_runs(monkeypatch, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("FLOWJIT_CACHE_DIR", str(blocker))  # objects/ cannot be made under a file
    x = np.arange(10, dtype=np.float32)
    np.testing.assert_array_equal(axpb_call(load(fresh(modules.axpb)), x), x * 2 + 1)


@pytest.mark.parametrize("n", [0, 5, 300_001, 1_000_000])
def test_chunks_cover_the_range_exactly_once(n):
    f = load(fresh(modules.chunk_add)).function("chunk_add", None, [I64, I64, P, P])
    x = np.arange(n, dtype=np.float32)
    y = np.zeros_like(x)
    run_chunked(f, n, x.ctypes.data, y.ctypes.data, min_elements=0)
    np.testing.assert_array_equal(y, x + 1)


def test_a_failing_chunk_raises_in_the_caller_and_the_pool_still_works():
    pool, seen = ChunkPool(3), []

    def chunk(start, stop):
        seen.append((start, stop))
        if start > 0:
            raise ValueError(f"chunk {start}")

    with pytest.raises(ValueError, match="chunk"):
        pool.run(chunk, 1 << 20)
    # every chunk ran (12: four a thread), one after another over the whole range
    assert len(seen) == 12 and [a for a, _ in sorted(seen)] == [0] + [b for _, b in sorted(seen)][:-1]
    assert sorted(seen)[-1][1] == 1 << 20
    seen.clear()
    pool.run(lambda a, b: seen.append((a, b)), 10)  # too small to split
    assert seen == [(0, 10)]


@pytest.fixture(scope="module")
def blas():
    found = blas_functions()
    if not found:
        pytest.skip("no CBLAS library found (NumPy's bundled OpenBLAS nor a system one)")
    return found


@pytest.mark.parametrize("routine, dtype, ct", [("sgemm", np.float32, ctypes.c_float),
                                                 ("dgemm", np.float64, ctypes.c_double)])
def test_gemm_through_its_address_matches_numpy(blas, routine, dtype, ct):
    fn = blas[routine]
    it = ctypes.c_int64 if fn.int_bits == 64 else ctypes.c_int32
    gemm = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_int, ctypes.c_int, it, it, it, ct, P, it,
                            P, it, ct, P, it)(fn.address)
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((5, 7)).astype(dtype), rng.standard_normal((7, 3)).astype(dtype)
    c = np.zeros((5, 3), dtype)
    gemm(101, 111, 111, 5, 3, 7, 1.0, a.ctypes.data, 7, b.ctypes.data, 3, 0.0, c.ctypes.data, 3)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5)


def test_jit_code_calls_gemm_by_symbol(blas):
    fn = blas["sgemm"]
    mm = load(fresh(modules.sgemm_caller, fn.symbol, fn.int_bits)).function("mm", None, [P, P, P, I64, I64, I64])
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((4, 6)).astype(np.float32), rng.standard_normal((6, 9)).astype(np.float32)
    c = np.zeros((4, 9), np.float32)
    mm(a.ctypes.data, b.ctypes.data, c.ctypes.data, 4, 9, 6)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5)


def test_numpys_openblas_is_found_without_searching_the_system(monkeypatch):
    from flowjit.codegen_cpu import blas as blas_module
    if not any(glob.glob(os.path.join(d, "lib*openblas*")) for d in blas_module._numpy_lib_dirs()):
        pytest.skip("this NumPy bundles no OpenBLAS")

    def find_library(name):  # ldconfig and a compiler in subprocesses: 27 ms of a warm start
        raise AssertionError(f"searched the system for {name!r}")
    monkeypatch.setattr(blas_module, "_found", None)
    monkeypatch.setattr(blas_module, "_library", None)
    monkeypatch.setattr(blas_module.ctypes.util, "find_library", find_library)
    found = blas_module.blas_functions()
    assert found and found["sgemm"].library.startswith(tuple(blas_module._numpy_lib_dirs()))


def test_math_calls_resolve_in_a_loaded_object():
    text = fresh(modules.exp_tanh)
    load(text)
    # forget this process's copy, so the next load links the object from disk afresh
    jit._libraries.pop(objcache.key(text, host_target().fingerprint()))
    before = cache_stats()
    f = load(text).function("et", None, [P, P, I64])
    assert delta(before)["loaded"] == 1
    x = np.linspace(-4, 4, 1001, dtype=np.float32)
    y = np.empty_like(x)
    f(x.ctypes.data, y.ctypes.data, x.size)
    np.testing.assert_allclose(y, np.exp(x) + np.tanh(x), rtol=2e-6, atol=2e-7)  # an ulp of each term


@pytest.mark.parametrize("n", [0, 5, 300_001, 1_000_000])
def test_generated_code_runs_its_loop_on_the_native_pool(n):
    f = load(fresh(modules.parallel_driver, 8)).function("driver", None, [P, P, I64])
    x = np.arange(n, dtype=np.float32)
    y = np.zeros_like(x)
    f(x.ctypes.data, y.ctypes.data, n)
    np.testing.assert_array_equal(y, x + 1)  # each element once: twice would give 2x + 2


def test_threads_starting_native_loops_at_once_each_get_their_whole_range():
    # one loop holds the pool; the others run their range on their own thread
    drive = load(fresh(modules.parallel_driver, 3)).function("driver", None, [P, P, I64])
    n = 200_003
    xs = [np.arange(n, dtype=np.float32) * k for k in range(6)]
    ys = [np.zeros(n, np.float32) for _ in xs]
    threads = [threading.Thread(target=drive, args=(x.ctypes.data, y.ctypes.data, n)) for x, y in zip(xs, ys)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for x, y in zip(xs, ys):
        np.testing.assert_array_equal(y, x + 1)


_MANY = r"""
import ctypes, sys, numpy as np
from flowjit.codegen_cpu import load, native_pool
from tests.codegen_cpu import modules
for parts in (1, 2, 4, 64):
    f = load(modules.parallel_driver("many%d" % parts, parts)).function(
        "driver", None, [ctypes.c_void_p] * 2 + [ctypes.c_int64])
    for n in (0, 3, 100_001):
        x = np.arange(n, dtype=np.float32); y = np.zeros_like(x)
        f(x.ctypes.data, y.ctypes.data, n)
        assert (y == x + 1).all(), (parts, n)
assert native_pool().workers == 3  # started by the first load that calls it
print("ok")
"""


def test_more_workers_than_pieces(cache_dir):
    env = dict(os.environ, FLOWJIT_CACHE_DIR=str(cache_dir), PYTHONPATH=ROOT, FLOWJIT_NUM_THREADS="4")
    out = subprocess.run([sys.executable, "-c", _MANY], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


@pytest.mark.skipif(platform.machine() != "x86_64", reason="x86 CPU names")
def test_flowjit_llvm_cpu_picks_the_target(monkeypatch):
    monkeypatch.setenv("FLOWJIT_LLVM_CPU", "x86-64-v2")
    assert host_target().cpu == "x86-64-v2"
    assert "<4 x float>" in str(optimize(fresh(modules.axpb)))  # SSE4.2: 128-bit vectors


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler to link a shared library")
def test_the_object_links_into_a_shared_library(tmp_path):
    (tmp_path / "k.o").write_bytes(compile_object(fresh(modules.axpb), host_target("x86-64")))
    subprocess.run(["cc", "-shared", "-o", str(tmp_path / "libk.so"), str(tmp_path / "k.o")], check=True)
    f = ctypes.CDLL(str(tmp_path / "libk.so")).axpb
    f.argtypes, f.restype = [P, P, I64], None
    x = np.arange(33, dtype=np.float32)
    y = np.zeros_like(x)
    f(x.ctypes.data, y.ctypes.data, x.size)
    np.testing.assert_array_equal(y, x * 2 + 1)


def _in_a_forked_child(work) -> int:
    """Run ``work()`` in a child made by os.fork; its exit status (1 on an exception, 2 if
    it has not finished in 20 s: a split loop waiting for workers the child lacks)."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            work()
            code = 0
        finally:
            os._exit(code)
    for _ in range(2000):
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.01)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    return 2


def test_a_forked_child_runs_its_loops_without_the_parents_workers():
    drive = load(fresh(modules.parallel_driver, 8)).function("driver", None, [P, P, I64])
    chunk = load(fresh(modules.chunk_add)).function("chunk_add", None, [I64, I64, P, P])
    n = 1 << 20
    x = np.arange(n, dtype=np.float32)
    y = np.zeros_like(x)
    run_chunked(chunk, n, x.ctypes.data, y.ctypes.data, min_elements=0)  # both pools started

    def work():
        for f in (lambda y: drive(x.ctypes.data, y.ctypes.data, n),
                  lambda y: run_chunked(chunk, n, x.ctypes.data, y.ctypes.data, min_elements=0)):
            y = np.zeros_like(x)
            f(y)
            assert (y == x + 1).all()

    assert _in_a_forked_child(work) == 0
    y = np.zeros_like(x)
    drive(x.ctypes.data, y.ctypes.data, n)  # the parent's pool is untouched
    np.testing.assert_array_equal(y, x + 1)


def test_a_call_to_a_function_nothing_defines_is_an_error_not_a_crash():
    text = ("declare void @flowjit_no_such_fn(i64)\n"
            "define void @f() {\n  call void @flowjit_no_such_fn(i64 1)\n  ret void\n}\n")
    with pytest.raises(LLVMCompileError, match="'missing' calls 'flowjit_no_such_fn'"):
        load(text, name="missing")


def _scale_kernel(name, c):
    """out0[i] = in0[i] * c for f32 vectors, as the lowering writes it."""
    from flowjit.ir.dtypes import float32, int64
    from flowjit.lowering.loops import Buffer, Const, Kernel, Load, Loop, Prim, SizeVar, Store, Var
    i = Var("i", int64)
    value = Prim("mul", (Load("in0", (i,), float32), Const(c, float32)), float32)
    return Kernel(name, (Buffer("in0", "in", float32, 1), Buffer("out0", "out", float32, 1)),
                  (SizeVar("n0", "in0", 0),),
                  (Loop("i", Const(0, int64), Var("n0", int64), 1, (Store("out0", (i,), value),), parallel=True),))


def test_a_warm_kernel_load_renders_nothing(monkeypatch):
    """The object cache keys a kernel by its loop IR and the renderer's sources: a process
    that has the entry on disk loads it without rendering the LLVM IR."""
    from flowjit.codegen_cpu import render
    kernel = _scale_kernel(f"k{uuid.uuid4().hex[:12]}", 2.5)
    render.compile_kernel(kernel)
    jit._libraries.clear()  # as a new process: only the disk entry is left

    def refuse(k):
        raise AssertionError("rendered on a warm load")
    monkeypatch.setattr(render, "render_kernel", refuse)
    before = cache_stats()
    compiled = render.compile_kernel(kernel)
    assert delta(before)["loaded"] == 1 and delta(before)["compiled"] == 0
    x = np.arange(10, dtype=np.float32)
    y = np.empty_like(x)
    compiled([x], [y])
    np.testing.assert_array_equal(y, x * np.float32(2.5))


_WARM_KERNEL = r"""
import json, sys
import numpy as np
from flowjit.codegen_cpu import cache_stats, render
exec(sys.argv[2])  # _scale_kernel's source: this test module imports llvmlite.ir itself
compiled = render.compile_kernel(_scale_kernel(sys.argv[1], 2.5))
x = np.arange(10, dtype=np.float32); y = np.empty_like(x)
compiled([x], [y])
print(json.dumps({"ok": bool((y == x * np.float32(2.5)).all()), "stats": cache_stats(),
                  "llvmlite": sorted(m for m in sys.modules if m.startswith("llvmlite."))}))
"""


@pytest.mark.skipif(platform.system() != "Linux" or platform.machine() != "x86_64", reason="flowjit's ELF loader")
def test_a_warm_process_loads_a_kernel_without_llvmlites_ir_builder_or_binding(cache_dir):
    from flowjit.codegen_cpu import render
    name = f"k{uuid.uuid4().hex[:12]}"
    render.compile_kernel(_scale_kernel(name, 2.5))  # fills the cache, and the host's note
    env = dict(os.environ, FLOWJIT_CACHE_DIR=str(cache_dir), PYTHONPATH=ROOT)
    env.pop("FLOWJIT_LLVM_LOADER", None)
    source = inspect.getsource(_scale_kernel)
    out = json.loads(subprocess.run([sys.executable, "-c", _WARM_KERNEL, name, source], env=env, capture_output=True,
                                    text=True, check=True, cwd=ROOT).stdout.splitlines()[-1])
    assert out["ok"] and out["stats"]["loaded"] == 1 and out["stats"]["compiled"] == 0
    assert out["llvmlite"] == ["llvmlite._version"]  # llvmlite's version (for the cache key) only


_WARM_POOL = r"""
import json, sys
from flowjit.codegen_cpu import cache_stats, native_pool
native_pool()
print(json.dumps({"stats": cache_stats(), "llvmlite": sorted(m for m in sys.modules if m.startswith("llvmlite."))}))
"""


@pytest.mark.skipif(platform.system() != "Linux" or platform.machine() != "x86_64", reason="flowjit's ELF loader")
def test_a_warm_process_starts_the_native_pool_without_building_its_ir(cache_dir):
    # The pool's object is kept per installation: a runtime directory of the test's own.
    env = dict(os.environ, FLOWJIT_CACHE_DIR=str(cache_dir), PYTHONPATH=ROOT,
               FLOWJIT_RUNTIME_DIR=str(cache_dir / "runtime"))
    env.pop("FLOWJIT_LLVM_LOADER", None)
    cold, warm = (json.loads(subprocess.run([sys.executable, "-c", _WARM_POOL], env=env, capture_output=True,
                                            text=True, check=True).stdout.splitlines()[-1]) for _ in range(2))
    assert cold["stats"]["compiled"] == 1
    assert warm["stats"]["loaded"] == 1 and warm["stats"]["compiled"] == 0
    assert warm["llvmlite"] == ["llvmlite._version"]


def test_kernels_differing_in_a_nans_sign_or_a_zeros_sign_have_distinct_identities():
    from flowjit.codegen_cpu.render import kernel_identity
    nan = float("nan")
    idents = {kernel_identity(_scale_kernel("k", c)) for c in (nan, -nan, 0.0, -0.0)}
    assert len(idents) == 4
    assert kernel_identity(_scale_kernel("k", 1.0)) == kernel_identity(_scale_kernel("k", 1.0))


def test_a_shared_sub_expressions_nans_count_at_each_use():
    # The identity's NaN walk visits a shared sub-expression once: its bits must still be
    # written at each place repr writes it.
    import struct

    from flowjit.codegen_cpu.render import kernel_identity
    from flowjit.ir.dtypes import float32
    from flowjit.lowering.loops import Const, Prim

    def kernel(first, second):
        k = _scale_kernel("k", 1.0)
        (loop,) = k.body
        (store,) = loop.body
        value = Prim("add", (Prim("mul", (store.value, first), float32), second), float32)
        store = dataclasses.replace(store, value=value)
        return dataclasses.replace(k, body=(dataclasses.replace(loop, body=(store,)),))
    nan, neg = Const(float("nan"), float32), Const(-float("nan"), float32)
    shared = Prim("mul", (nan, neg), float32)
    bits = [struct.pack("<d", c.value).hex() for c in (nan, neg, nan, neg)]
    assert kernel_identity(kernel(shared, shared)).endswith(",".join(bits))
    assert kernel_identity(kernel(shared, shared)) == kernel_identity(kernel(shared, Prim("mul", (nan, neg), float32)))
    assert kernel_identity(kernel(shared, shared)) != kernel_identity(kernel(shared, Prim("mul", (neg, nan), float32)))


def test_a_whole_entry_without_the_declared_names_is_recompiled_not_executed():
    """An entry whose checksum holds but whose payload is bare object code (another layout)
    is refused: the code under the key is never linked without its declared names."""
    text, impostor = fresh(modules.axpb), fresh(modules.axpb, 3.0, 5.0)
    k = objcache.key(text, host_target().fingerprint())
    assert objcache.write(k, compile_object(impostor))
    before = cache_stats()
    x = np.arange(64, dtype=np.float32)
    np.testing.assert_array_equal(axpb_call(load(text), x), x * 2 + 1)
    assert delta(before) == {"compiled": 1, "loaded": 0, "reused": 0, "rejected": 1}


_WARM_PRODUCT = r"""
import json, sys
import numpy as np
import flowjit as fj
from flowjit.codegen_cpu import cache_stats, jit
a = np.arange(12, dtype=np.float32).reshape(3, 4)
out = fj.function(lambda x, w: fj.tanh(x @ w))(a, a.T)
print(json.dumps({"ok": bool(np.allclose(out, np.tanh(a @ a.T))), "stats": cache_stats(),
                  "llvmlite": sorted(m for m in sys.modules if m.startswith("llvmlite.")),
                  "mapped": "libllvmlite" in open("/proc/self/maps").read(), "prefetched": jit._prefetched}))
"""


@pytest.mark.skipif(platform.system() != "Linux" or platform.machine() != "x86_64", reason="flowjit's ELF loader")
def test_a_warm_process_runs_a_program_with_a_product_without_llvmlites_binding(cache_dir):
    # Finding the BLAS (and which kernels it runs) must not load LLVM: 40 MiB more resident.
    env = dict(os.environ, FLOWJIT_CACHE_DIR=str(cache_dir), PYTHONPATH=ROOT)
    env.pop("FLOWJIT_LLVM_LOADER", None)
    cold, warm = (json.loads(subprocess.run([sys.executable, "-c", _WARM_PRODUCT], env=env, capture_output=True,
                                            text=True, check=True, cwd=ROOT).stdout.splitlines()[-1])
                  for _ in range(2))
    assert cold["ok"] and warm["ok"] and warm["stats"]["compiled"] == 0
    assert warm["llvmlite"] == ["llvmlite._version"] and not warm["mapped"] and cold["mapped"]
    assert cold["prefetched"] and not warm["prefetched"]   # LLVM's library loaded apart at the miss only


_PREFETCH = r"""
import json, sys, threading
from flowjit.codegen_cpu import jit
jit.prefetch_llvm()
jit.prefetch_llvm()   # once a process
loading = [t for t in threading.enumerate() if t.name == "flowjit-load-llvm"]
for t in loading:
    t.join()
print(json.dumps({"threads": len(loading) <= 1, "binding": "llvmlite.binding" in sys.modules,
                  "mapped": "libllvmlite" in open("/proc/self/maps").read()}))
"""


@pytest.mark.skipif(platform.system() != "Linux", reason="/proc/self/maps")
def test_llvms_library_is_loaded_on_a_thread_before_its_first_compile():
    # The dynamic loader's time (~7 ms) runs beside the rendering of the first module.
    got = json.loads(subprocess.run([sys.executable, "-c", _PREFETCH], env=dict(os.environ, PYTHONPATH=ROOT),
                                    capture_output=True, text=True, check=True, cwd=ROOT).stdout.splitlines()[-1])
    assert got == {"threads": True, "binding": False, "mapped": True}


def test_the_unrolling_budget_is_part_of_the_cache_key(monkeypatch):
    # Code compiled under another full-unrolling budget is other machine code: never reused,
    # nor the fingerprint an earlier process noted under the probe that finds it without LLVM.
    from flowjit.codegen_cpu import jit
    parts = jit.host_target().fingerprint().split("|")
    assert f"unroll{jit.UNROLL_THRESHOLD}" in parts and f"analysed{jit.UNROLL_ANALYSED_TRIPS}" in parts
    probe = jit._host_probe.__wrapped__
    if probe("") is None:
        pytest.skip("no /proc/cpuinfo: the fingerprint is computed with LLVM every time")
    before = probe("")
    for name in ("UNROLL_THRESHOLD", "UNROLL_ANALYSED_TRIPS"):
        with monkeypatch.context() as m:
            m.setattr(jit, name, getattr(jit, name) + 1)
            assert probe("") != before, name


def test_modules_compiled_at_once_on_threads_are_the_objects_compiled_one_at_a_time():
    # compile_objects runs LLVM on a thread per module, each in a context of its own,
    # without llvmlite's lock around the pass pipeline and code generation.
    texts = [f"define i64 @f{i}(i64 %x) {{\n  %y = mul i64 %x, {i + 3}\n  ret i64 %y\n}}\n" for i in range(3)]
    assert jit.compile_objects(texts) == [jit.compile_object(t) for t in texts]
    with pytest.raises(jit.LLVMCompileError, match=r"mod\[1\]"):
        jit.compile_objects([texts[0], "define i64 @broken("], name="mod")


def test_the_first_module_is_rendered_while_the_others_compile(monkeypatch):
    # A module given as a function is rendered when its turn comes: the later ones first,
    # each started on its thread (parsed, in LLVM's pipeline) before the next is rendered,
    # the first last. A module that fails to parse on its thread leaves no caller waiting.
    texts = [f"define i64 @h{i}(i64 %x) {{\n  %y = sub i64 %x, {i + 1}\n  ret i64 %y\n}}\n" for i in range(3)]
    seen, started, apart = [], [], jit._compile_apart

    def compile_apart(text, target, name, opt_level, *rest):
        started.append(name)
        return apart(text, target, name, opt_level, *rest)
    monkeypatch.setattr(jit, "_compile_apart", compile_apart)

    def later(i):
        def render():
            seen.append((i, sorted(started)))
            return texts[i]
        return render
    checked = []
    got = jit.compile_objects([later(0), later(1), texts[2]], name="m", rendered=lambda so: checked.append(len(so)))
    assert got == [jit.compile_object(t) for t in texts]
    assert seen == [(1, []), (0, ["m[1]", "m[2]"])], seen
    assert checked == [1, 2, 3]
    with pytest.raises(jit.LLVMCompileError, match=r"mod\[1\]"):
        jit.compile_objects([later(0), "define i64 @broken("], name="mod")
    with pytest.raises(ZeroDivisionError):   # the first's rendering fails: the others are joined
        jit.compile_objects([lambda: 1 // 0, texts[1]])
    assert not any(t.name.startswith("flowjit-llvm-") for t in threading.enumerate())


def test_without_llvmlites_unlocked_calls_modules_compile_one_after_the_other(monkeypatch):
    texts = [f"define i64 @g{i}(i64 %x) {{\n  %y = add i64 %x, {i}\n  ret i64 %y\n}}\n" for i in range(2)]
    assert jit._unlocked_calls()  # the llvmlite this suite runs on has them
    monkeypatch.setattr(jit, "_unlocked_calls", lambda: False)
    assert jit.compile_objects(texts) == [jit.compile_object(t) for t in texts]
