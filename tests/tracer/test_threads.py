"""``@fj.function`` called from many threads and processes at once on a cold kernel cache:
every call right, one trace per signature, no half-written file or half-loaded module."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import flowjit as fj
from flowjit.codegen_cpu import jit
from tests.concurrency import THREADS, fresh_constant, hammer


@pytest.fixture(autouse=True)
def cold_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("FLOWJIT_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_cold_function_from_8_threads_traces_once_per_signature(cold_cache):
    salt = fresh_constant()
    traced: Counter = Counter()

    @fj.function
    def f(x):
        traced[x.shape] += 1
        return fj.tanh(x * salt + 1.0) * x.sum() - fj.exp(x).max()

    # Same rank (one kernel source shared by several signatures) and other ranks.
    shapes = [(3,), (4,), (5,), (2, 3)]
    wrong = []

    def call(t: int, i: int) -> None:
        x = np.linspace(-1, 1, int(np.prod(shapes[(t + i) % 4]))).reshape(shapes[(t + i) % 4]) * (t + 1)
        y = f(x)
        if not np.allclose(y, np.tanh(x * salt + 1.0) * x.sum() - np.exp(x).max(), rtol=1e-12, atol=1e-12):
            wrong.append((x.shape, t, i))

    errors = hammer(call, 100)
    assert not errors, errors
    assert not wrong
    assert f.trace_count == len(shapes) and traced == {s: 1 for s in shapes}
    # The full code's threads write the cache after the calls return (tiers): once they end,
    # every temporary file is renamed into place.
    assert jit.wait_for_upgrades(120)
    assert not list(cold_cache.rglob("*.tmp"))


def _stats_of(run: Callable[[], None]) -> dict[str, int]:
    before = fj.cache_stats()
    run()
    return {k: v - before[k] for k, v in fj.cache_stats().items()}


def test_kernel_stats_from_threads_count_as_one_thread_would():
    # Kernels compiled once are counted once; the other programs that use them reuse them.
    shapes = [(3,), (4,), (5,), (6,)]

    def program() -> Any:
        salt = fresh_constant()
        return fj.function(lambda x: fj.tanh(x * salt + 1.0) * x.sum() - fj.exp(x).max())

    f = program()
    alone = _stats_of(lambda: [f(np.ones(s)) for s in shapes])
    g = program()
    threaded = _stats_of(lambda: hammer(lambda t, i: g(np.ones(shapes[(t + i) % 4])), 10))
    assert threaded == alone and alone["compiled"] >= 1


def test_a_trace_error_reaches_every_thread_waiting_for_that_signature():
    salt = fresh_constant()
    f = fj.function(lambda x: (x * salt).reshape(7))

    def call(t: int, i: int) -> None:
        f(np.ones(3))

    errors = hammer(call, 5)
    assert sum(errors.values()) == THREADS * 5 and len(errors) == 1, errors
    (message,) = errors
    assert message.startswith("ShapeError: reshape: cannot reshape f64[3]")
    np.testing.assert_array_equal(f(np.ones(7)), np.full(7, salt))  # the next signature traces


def test_cold_program_with_several_results_and_keywords_from_threads():
    # The slow path (pytree outputs, keyword arguments) and the fast path race as well.
    salt = fresh_constant()

    @fj.function
    def f(x, *, scale):
        return {"y": x * scale + salt, "m": (x * salt).max(axis=0)}

    def call(t: int, i: int) -> None:
        x = np.arange(6.0 * (1 + i % 3)).reshape(-1, 2)
        out = f(x, scale=np.float64(t)) if i % 2 else f(x, scale=np.float64(t))
        np.testing.assert_array_equal(out["y"], x * t + salt)
        np.testing.assert_array_equal(out["m"], (x * salt).max(axis=0))

    errors = hammer(call, 30)
    assert not errors, errors
    assert f.trace_count == 3


def test_grad_inside_a_function_from_threads():
    salt = fresh_constant()

    def loss(w, x):
        return (fj.tanh(x @ w) * salt).sum()

    step = fj.function(lambda w, x: w - 0.1 * fj.grad(loss)(w, x))
    rng = np.random.default_rng(0)
    w = rng.standard_normal((3, 2))
    xs = [rng.standard_normal((n, 3)) for n in (1, 4, 6)]

    def want(w, x):
        return w - 0.1 * x.T @ ((1 - np.tanh(x @ w) ** 2) * salt)

    def call(t: int, i: int) -> None:
        x = xs[(t + i) % 3]
        np.testing.assert_allclose(step(w, x), want(w, x), rtol=1e-12)

    errors = hammer(call, 30)
    assert not errors, errors
    assert step.trace_count == 3


def test_loop_compiled_into_one_kernel_from_threads():
    # fori_loop bodies run inside the native program, compiled (or loaded) once.
    salt = fresh_constant()

    @fj.function
    def f(x):
        return fj.fori_loop(0, 5, lambda i, c: c * 0.5 + salt, x)

    def want(x):
        for _ in range(5):
            x = x * 0.5 + salt
        return x

    def call(t: int, i: int) -> None:
        x = np.full(2 + (t + i) % 3, float(t))
        np.testing.assert_allclose(f(x), want(x), rtol=1e-12)

    errors = hammer(call, 30)
    assert not errors, errors
    assert f.trace_count == 3


def test_program_on_two_devices_from_threads(monkeypatch):
    # Each step's partitions queue on the devices' worker threads in the same order, so two
    # callers' steps never wait on each other's sends.
    monkeypatch.setenv("FLOWJIT_CPU_DEVICES", "2")
    salt = fresh_constant()

    @fj.function
    def f(x):
        with fj.device("cpu:1"):
            h = fj.tanh(x * salt)
        return (h + x).sum()

    def call(t: int, i: int) -> None:
        x = np.linspace(0.1, 1, 3 + (t + i) % 2) * (t + 1)
        np.testing.assert_allclose(f(x), (np.tanh(x * salt) + x).sum(), rtol=1e-12)

    errors = hammer(call, 40)
    assert not errors, errors
    assert f.trace_count == 2


def _cuda_module(source: str) -> Any:
    from flowjit.codegen_cuda import compile as cuda_compile
    path = cuda_compile.write_source(source)
    assert open(path).read() == source
    return cuda_compile.import_source(path)


def test_threads_writing_and_importing_one_new_module_get_the_same_complete_module(cold_cache, load=_cuda_module):
    # The module takes a while to run: a thread that saw it registered before it finished
    # would find VALUE missing.
    source = f"import time\ntime.sleep(0.2)\nSALT = {fresh_constant()!r}\nVALUE = 42\n"
    modules: list[Any] = []

    def call(t: int, i: int) -> None:
        module = load(source)
        assert module.VALUE == 42
        modules.append(module)

    errors = hammer(call, 3)
    assert not errors, errors
    assert len({id(m) for m in modules}) == 1
    assert not list(cold_cache.rglob("*.tmp"))


def test_processes_sharing_a_cold_cache(cold_cache):
    # Four processes, each with four threads, compile the same kernels into one cache
    # directory at once (started together: each waits for the `go` file); a fifth, after
    # them, finds every kernel on disk.
    salt = fresh_constant()
    go = cold_cache.parent / "go"
    prog = textwrap.dedent(f"""
        import os, threading, time
        import numpy as np, flowjit as fj
        f = fj.function(lambda x: fj.tanh(x * {salt!r}) + x.mean(axis=-1, keepdims=True))
        while not os.path.exists({str(go)!r}):
            time.sleep(0.01)
        bad = []
        def work(t):
            for i in range(20):
                x = np.linspace(-1, 1, 12).reshape([(3, 4), (12,), (2, 6)][(t + i) % 3])
                try:
                    y = f(x)
                    if not np.allclose(y, np.tanh(x * {salt!r}) + x.mean(axis=-1, keepdims=True), rtol=1e-12):
                        bad.append("wrong")
                except Exception as e:
                    bad.append(repr(e))
        threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
        [th.start() for th in threads]
        [th.join() for th in threads]
        print(f.trace_count, fj.cache_stats()["compiled"], bad)
    """)
    env = dict(os.environ, FLOWJIT_CACHE_DIR=str(cold_cache))

    def start() -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-c", prog], env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)

    def result(p: subprocess.Popen) -> tuple[int, int]:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        traces, compiled, bad = out.split(None, 2)
        assert bad == "[]\n", out + err
        return int(traces), int(compiled)

    procs = [start() for _ in range(4)]
    go.write_text("")
    assert [result(p)[0] for p in procs] == [3] * 4
    assert result(start()) == (3, 0)
    assert not list(cold_cache.rglob("*.tmp"))
