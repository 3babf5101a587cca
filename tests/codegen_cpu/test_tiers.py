"""Tiered code generation (jit.QUICK_CODEGEN_LEVEL): a program's first compile runs code from
LLVM's quick code generator, which the disk cache keeps; once the program is hot (its second
call), the full code made on another thread, with the same bits, replaces it in the process
and in the cache."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import weakref

import numpy as np
import pytest

import flowjit as fj
from flowjit.codegen_cpu import emit, jit
from flowjit.codegen_cpu import program as program_module
from flowjit.tracer.pytree import flatten

pytestmark = pytest.mark.skipif(not jit.tiered(), reason="FLOWJIT_TIERED=0, or an llvmlite without unlocked calls")


def _program(f):
    (entry,) = f._cache.values()
    program = entry.executable._program
    assert program is not None, entry.executable.native_reason
    return program


def _entries(cache) -> list[str]:
    where = cache / "objects"
    return sorted(os.listdir(where)) if where.is_dir() else []


def _block(x, w, g):
    # row reductions (softmax's invariant division, layer norm), a product, exp and tanh
    h = x @ w
    e = fj.exp(h - h.max(axis=-1, keepdims=True))
    s = e / e.sum(axis=-1, keepdims=True)
    d = s - s.mean(axis=-1, keepdims=True)
    return fj.tanh(d * fj.rsqrt((d * d).mean(axis=-1, keepdims=True) + 1e-5) * g)


def _args(seed, n=96):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((n, 64)).astype(np.float32), rng.standard_normal((64, 80)).astype(np.float32),
            rng.standard_normal(80).astype(np.float32))


@pytest.mark.parametrize("light", [True, False], ids=["quick-pipeline", "o3-pipeline"])
def test_the_first_call_runs_quick_code_then_the_full_code_gives_the_same_bits(light, tmp_path, monkeypatch):
    # Both ways of making quick code: the IR optimized by QUICK_PIPELINE (the full code
    # optimizes it again) or by O3's (the full code only emits it again). The block's row
    # sums are reassociable: a pipeline that vectorized or interleaved them otherwise than
    # O3 (QUICK_PIPELINE without interleaving) summed in another order, 1 ulp apart.
    monkeypatch.setenv("FLOWJIT_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(jit, "QUICK_PIPELINE_MIN_CHARS", 0 if light else 10**12)
    f = fj.function(_block)
    args = _args(0, n=97 if light else 95)
    before = jit.upgrade_counts()
    first = f(*args)
    program = _program(f)
    program.library.upgrade_now()       # as a second call would
    assert jit.wait_for_upgrades(60)
    # at least this program's (an earlier test's program in this process may land meanwhile)
    after = jit.upgrade_counts()
    assert after["upgraded"] >= before["upgraded"] + 1 and after["failed"] == before["failed"]
    # the quick library retired (kept alive), the full one in the table
    assert [lib.codegen_level for lib in program._retired] == [jit.QUICK_CODEGEN_LEVEL]
    assert program.library.codegen_level == jit.OPT_LEVEL
    assert _entries(tmp_path), "the full code is in the disk cache"
    again = f(*args)
    np.testing.assert_array_equal(again, first)
    want = fj.function(_block, interpret=True)(*args)
    np.testing.assert_allclose(first, want, rtol=1e-5, atol=1e-6)


def test_the_quick_code_is_cached_and_a_program_never_run_upgrades_when_asked(tmp_path, monkeypatch):
    # The quick code's entry is written as it is compiled; the full code's replaces it when made.
    monkeypatch.setenv("FLOWJIT_CACHE_DIR", str(tmp_path))
    f = fj.function(_block)
    args = _args(1, n=98)
    listing = f.kernels(*args)          # compiles the program, runs nothing
    assert "native driver" in listing
    program = _program(f)
    assert program.library.codegen_level == jit.QUICK_CODEGEN_LEVEL
    (quick,) = _entries(tmp_path)
    program.library.upgrade_now()       # as if the program were hot
    assert jit.wait_for_upgrades(60)
    assert program.library.codegen_level == jit.OPT_LEVEL
    (full,) = _entries(tmp_path)        # in place of the quick code's entry
    assert full != quick
    np.testing.assert_allclose(f(*args), fj.function(_block, interpret=True)(*args), rtol=1e-5, atol=1e-6)


def test_only_the_second_call_makes_a_program_hot(tmp_path, monkeypatch):
    # A program run once never pays for its full code; its second call starts it.
    monkeypatch.setenv("FLOWJIT_CACHE_DIR", str(tmp_path))
    f = fj.function(_block)
    args = _args(5, n=91)
    first = f(*args)
    program = _program(f)
    library = program.library
    assert library.codegen_level == jit.QUICK_CODEGEN_LEVEL and library._full_from is not None
    with jit._upgrade_lock:
        assert library not in jit._upgrades.values()
    second = f(*args)
    assert library._full_from is None, "the second call started the upgrade"
    assert jit.wait_for_upgrades(120)
    assert program.library.codegen_level == jit.OPT_LEVEL and program._retired == [library]
    third = f(*args)
    np.testing.assert_array_equal(second, first)
    np.testing.assert_array_equal(third, first)
    # the dispatch fast path (one array argument) goes straight to the program after its second call
    g = fj.function(lambda x: fj.tanh(x) * 2.5 + 1)
    x = np.linspace(-1, 1, 40, dtype=np.float32)
    quick = g(x)
    assert not g._direct
    g(x)
    assert g._direct and _program(g).library._full_from is None
    assert jit.wait_for_upgrades(120)
    assert _program(g).library.codegen_level == jit.OPT_LEVEL
    np.testing.assert_array_equal(g(x), quick)
    np.testing.assert_allclose(quick, np.tanh(x) * 2.5 + 1, rtol=1e-6)


def test_a_program_never_hot_is_not_kept_alive_and_another_of_its_module_upgrades_it(tmp_path, monkeypatch):
    # The process's table keeps a quick library (and its watchers) for good: a program
    # that never got hot must not stay alive with it, and a program that shares the
    # library renders the full code itself when the first one is gone.
    monkeypatch.setenv("FLOWJIT_CACHE_DIR", str(tmp_path))
    args = _args(6, n=89)
    f, g = fj.function(_block), fj.function(_block)
    f(*args)
    first = weakref.ref(_program(f))
    g(*args)
    library = _program(g).library
    assert first().library is library and library.codegen_level == jit.QUICK_CODEGEN_LEVEL
    del f
    gc.collect()
    assert first() is None
    quick = g(*args)                    # hot: rendered by g's program's function
    assert jit.wait_for_upgrades(120)
    assert _program(g).library.codegen_level == jit.OPT_LEVEL and _program(g)._retired == [library]
    np.testing.assert_array_equal(g(*args), quick)


def test_an_upgrade_that_cannot_start_never_replaces_the_second_calls_result(tmp_path, monkeypatch):
    monkeypatch.setenv("FLOWJIT_CACHE_DIR", str(tmp_path))
    f = fj.function(_block)
    args = _args(8, n=87)
    first = f(*args)

    def no_thread() -> None:
        raise RuntimeError("can't start new thread")
    monkeypatch.setattr(_program(f), "hot", no_thread)
    np.testing.assert_array_equal(f(*args), first)
    assert _program(f).library.codegen_level == jit.QUICK_CODEGEN_LEVEL   # the quick code stays


def test_off_with_the_environment_and_for_fastmath(tmp_path, monkeypatch):
    monkeypatch.setenv("FLOWJIT_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("FLOWJIT_TIERED", "0")
    assert not jit.tiered()
    f = fj.function(_block)
    f(*_args(2, n=99))
    program = _program(f)
    assert program.library.codegen_level == jit.OPT_LEVEL and not program._retired
    assert _entries(tmp_path), "written before the call returned"
    monkeypatch.delenv("FLOWJIT_TIERED")
    # LLVM's fast flags let the two code generators round differently: one tier only
    g = fj.function(_block, fastmath=True)
    g(*_args(2, n=100))
    assert _program(g).library.codegen_level == jit.OPT_LEVEL


_RUN = """
import json, sys, numpy as np, flowjit as fj
from flowjit.codegen_cpu import jit, objcache
sys.path.insert(0, {tests!r})
from codegen_cpu.test_tiers import _args, _block, _program
f = fj.function(_block)
outs = [f(*_args(3, n=101)) for _ in range(int(sys.argv[1]))]
level = _program(f).library.codegen_level
assert jit.wait_for_upgrades(120)
print(json.dumps({{"stats": objcache.stats(), "level": level, "upgraded": jit.upgrade_counts()["upgraded"],
                  "outs": [out.tobytes().hex() for out in outs]}}))
"""


def test_the_next_process_loads_the_tier_the_last_one_reached(tmp_path):
    # A process that runs its program once leaves its quick code, which the next loads
    # (compiling nothing) and upgrades there when the program gets hot; then a third loads
    # the full code. Every tier gives the same bits.
    env = {**os.environ, "FLOWJIT_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("FLOWJIT_TIERED", None)
    script = _RUN.format(tests=os.path.dirname(os.path.dirname(__file__)))
    runs = []
    for calls in (1, 3, 1):
        done = subprocess.run([sys.executable, "-c", script, str(calls)], env=env, capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 0, done.stderr
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    once, hot, full = runs
    assert once["stats"]["compiled"] >= 1 and once["level"] == jit.QUICK_CODEGEN_LEVEL and once["upgraded"] == 0
    assert hot["stats"]["compiled"] == 0 and hot["level"] == jit.QUICK_CODEGEN_LEVEL and hot["upgraded"] == 1
    assert full["stats"]["compiled"] == 0 and full["level"] == jit.OPT_LEVEL and full["upgraded"] == 0
    assert len({out for run in runs for out in run["outs"]}) == 1


def _quick_then_full(make, args, monkeypatch):
    """The outputs of a fresh ``make()``'s first call (quick code) and of a call after its
    upgrade (full code), and its program. A program an earlier test in this process compiled
    is in the process's table of libraries (its full code, no quick tier): evicted and
    compiled again, so the comparison never depends on the order tests run in."""
    f = make()
    quick = f(*args)
    program = _program(f)
    if not program._retired and program.library.codegen_level == jit.OPT_LEVEL:
        assert jit.wait_for_upgrades(120)
        monkeypatch.delitem(jit._libraries, program.library.key)
        f = make()
        quick = f(*args)
        program = _program(f)
    program.library.upgrade_now()
    assert jit.wait_for_upgrades(120)
    assert [lib.codegen_level for lib in program._retired] == [jit.QUICK_CODEGEN_LEVEL], "ran quick code first"
    assert program.library.codegen_level == jit.OPT_LEVEL
    return quick, f(*args), program


def test_a_short_reassociable_sum_gives_the_same_bits_from_both_tiers(tmp_path, monkeypatch):
    # A sum of four floats: O3's pipeline unrolled the loop whole into a chain of adds in
    # order, the quick pipeline (no unrolling) vectorized it and summed the lanes pairwise:
    # (1 + 2**-24) - 1 + 2**-24 is 2**-24, (1 - 1) + (2**-24 + 2**-24) is 2**-23 (the zoo's
    # CNN training step's loss gradient, 1 ulp apart).
    monkeypatch.setenv("FLOWJIT_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(jit, "QUICK_PIPELINE_MIN_CHARS", 0)
    x = np.array([1, 2**-24, -1, 2**-24], np.float32)
    quick, full, _ = _quick_then_full(lambda: fj.function(lambda v: -v.sum() / 4), (x,), monkeypatch)
    np.testing.assert_array_equal(quick, full)
    np.testing.assert_allclose(full, -x.sum() / 4, atol=2**-24)


_ROW_REDUCTIONS = {
    "sum": lambda x: x.sum(axis=-1),
    "variance": lambda x: ((x - x.mean(axis=-1, keepdims=True)) ** 2).mean(axis=-1),
    "logsumexp": lambda x: fj.log(fj.exp(x).sum(axis=-1)),
    "product": lambda x: (1 + 0.01 * x).prod(axis=-1),
    "dot": lambda x: (x * x[:, ::-1]).sum(axis=-1),
}


@pytest.mark.parametrize("reduction", sorted(_ROW_REDUCTIONS))
def test_row_reductions_of_every_short_width_give_the_same_bits_from_both_tiers(reduction, tmp_path, monkeypatch):
    # Rows of 3 to 10 floats summed in another order by each tier (before emit's
    # REASSOCIATE_MIN_TRIPS); one row, and 37 (a loop over rows LLVM may vectorize instead).
    monkeypatch.setenv("FLOWJIT_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(jit, "QUICK_PIPELINE_MIN_CHARS", 0)
    rng = np.random.default_rng(7)
    for width in range(1, 2 * emit.REASSOCIATE_MIN_TRIPS):
        for rows in (1, 37):
            # magnitudes 1e-3 to 10 a row (exp within float32's range)
            x = (rng.standard_normal((rows, width)) * 10 ** rng.uniform(-3, 1, (rows, width))).astype(np.float32)
            quick, full, _ = _quick_then_full(lambda: fj.function(_ROW_REDUCTIONS[reduction]), (x,), monkeypatch)
            np.testing.assert_array_equal(quick, full, err_msg=f"{rows} rows of {width}")
            want = _ROW_REDUCTIONS[reduction](x.astype(np.float64))
            np.testing.assert_allclose(full, want, rtol=1e-5, atol=1e-5 * np.abs(x).sum(axis=-1).max(),
                                       err_msg=f"{rows} rows of {width}")


@pytest.mark.parametrize("model", ["mlp", "cnn", "transformer", "embedding", "lstm"])
def test_every_zoo_model_gives_the_same_bits_from_both_tiers(model, tmp_path, monkeypatch):
    monkeypatch.setenv("FLOWJIT_CACHE_DIR", str(tmp_path))
    # Every module's quick code from QUICK_PIPELINE, the small ones' too.
    monkeypatch.setattr(jit, "QUICK_PIPELINE_MIN_CHARS", 0)
    from bench.workloads import zoo
    L = zoo.lib("flowjit")
    params, (x, y) = zoo.init(model, quick=True), zoo.batch(model, quick=True)
    for make, args in ((lambda: fj.function(zoo.predict(L, model)), (params, x)),
                       (lambda: fj.function(zoo.train_step(L, model)), (params, zoo.adam_state(params), x, y))):
        quick, full, _ = _quick_then_full(make, args, monkeypatch)
        for a, b in zip(flatten(quick)[0], flatten(full)[0], strict=True):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_upgrades_started_by_threads_at_once_are_all_waited_for(tmp_path, monkeypatch):
    # Every upgrade is registered before any other compile can prune the table: one pruned
    # before it started was waited for by no one, and a process exiting then left a
    # half-written cache entry (tests/tracer/test_threads.py caught a .tmp file).
    import threading

    monkeypatch.setenv("FLOWJIT_CACHE_DIR", str(tmp_path))
    fs = [fj.function(lambda x, k=k: fj.tanh(x * (1.5 + k)) + 1) for k in range(8)]
    x = np.linspace(-1, 1, 64, dtype=np.float32)
    barrier = threading.Barrier(len(fs))

    def go(f):
        barrier.wait()
        f(x)
        f(x)        # hot: its upgrade starts
    threads = [threading.Thread(target=go, args=(f,)) for f in fs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert jit.wait_for_upgrades(120)
    assert not [t for t in threading.enumerate() if t.name.startswith("flowjit-upgrade-")]
    assert all(_program(f).library.codegen_level == jit.OPT_LEVEL for f in fs)
    assert not list(tmp_path.rglob("*.tmp"))


def _elementwise(x, w, k):
    # Every kind of float op but an accumulation: the math ports (inlined alwaysinline
    # functions with fused multiply-adds), libm calls, divisions, selects, float16 rounding.
    h = x @ w
    a = fj.tanh(h) * fj.exp(-h * h) + fj.erf(h / 3.0) - fj.log1p(fj.abs(h))
    b = fj.sqrt(fj.abs(a) + 1e-3) / (1.0 + 0.5 * fj.sin(h)) + fj.arctan(h) ** 3
    c = fj.where(h > 0, a, b).astype(np.float16).astype(np.float32)
    return c * fj.expm1(h / 8) + (k * 3 + 1).astype(np.float32)


def _elementwise_args(seed, n=64):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((n, 48)).astype(np.float32), rng.standard_normal((48, 80)).astype(np.float32),
            rng.integers(-5, 5, 80).astype(np.int32))


def test_a_small_program_without_accumulations_skips_the_pipeline_and_gives_the_same_bits(tmp_path, monkeypatch):
    # Its quick code unoptimized (jit.UNOPTIMIZED_PIPELINE), its full code from O3's pipeline
    # on the same text: no float accumulator, so no order for a pipeline to choose.
    monkeypatch.setenv("FLOWJIT_CACHE_DIR", str(tmp_path))
    quick_pipelines: list = []        # each quick compile's (a[5]: ``quick``, false for the upgrade's)
    compile_apart = jit._compile_apart

    def spy(*a, **k):
        if len(a) > 5 and a[5]:
            quick_pipelines.append(a[6] if len(a) > 6 else k.get("quick_pipeline"))
        return compile_apart(*a, **k)
    monkeypatch.setattr(jit, "_compile_apart", spy)
    f = fj.function(_elementwise)
    args = _elementwise_args(0)
    quick = f(*args)
    program = _program(f)
    assert program_module.quick_unoptimized(program.plan)
    assert quick_pipelines and all(p == jit.UNOPTIMIZED_PIPELINE for p in quick_pipelines)
    program.library.upgrade_now()
    assert jit.wait_for_upgrades(60)
    assert program.library.codegen_level == jit.OPT_LEVEL
    np.testing.assert_array_equal(f(*args), quick)
    np.testing.assert_allclose(quick, fj.function(_elementwise, interpret=True)(*args), rtol=2e-3, atol=2e-3)


def test_accumulations_loops_and_large_programs_keep_the_pipeline(tmp_path, monkeypatch):
    monkeypatch.setenv("FLOWJIT_CACHE_DIR", str(tmp_path))
    rows = fj.function(_block)                       # row sums and maxima
    rows(*_args(4, n=93))
    large = fj.function(_elementwise)                # 3,000 x 80 elements a kernel
    large(*_elementwise_args(5, n=3000))
    looped = fj.function(lambda x: fj.fori_loop(0, 3, lambda i, v: fj.tanh(v) * 1.5, x))
    looped(np.linspace(-1, 1, 256, dtype=np.float32))
    small = fj.function(_elementwise)
    small(*_elementwise_args(6, n=16))
    assert [program_module.quick_unoptimized(_program(g).plan) for g in (rows, large, looped, small)] == [
        False, False, False, True]
    assert jit.wait_for_upgrades(120)
