"""The generated driver (second and later calls) against the interpreter, for programs
mixing kernels, library ops, views of arguments and constants."""

from __future__ import annotations

import numpy as np
import pytest

import flowjit as fj


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("FLOWJIT_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "flowjit-cache"))


PROGRAMS = {
    "matmul only": lambda a, b: a @ b,
    "kernel after matmul": lambda a, b: fj.tanh(a @ b + 1.0),
    "argument returned": lambda a, b: (a, b * 2),
    "view of an argument": lambda a, b: a.T,
    "constant returned": lambda a, b: (np.arange(3.0), a.sum()),
    "scalar result": lambda a, b: (a * b).sum(),
    "same value twice": lambda a, b: (a + b, a + b),
    "library op between kernels": lambda a, b: fj.cumsum(fj.exp(a), axis=0) * b,
}


@pytest.mark.parametrize("name", PROGRAMS)
def test_driver_matches_interpreter_and_results_are_fresh(name, backend="llvm"):
    prog = PROGRAMS[name]
    rng = np.random.default_rng(0)
    a = rng.standard_normal((4, 4))
    b = rng.standard_normal((4, 4))
    f = fj.function(prog, backend=backend)
    want = fj.function(prog, interpret=True)(a, b)
    for _ in range(3):  # the first call warms the kernels, the others run the driver
        got = f(a, b)
        for g, w in zip(*(x if isinstance(x, tuple) else (x,) for x in (got, want)), strict=True):
            np.testing.assert_allclose(g, w, rtol=1e-12)
            assert not np.may_share_memory(g, a) and not np.may_share_memory(g, b)
    # llvm: the whole program as one native function when every op has a native form.
    listing = f.kernels(a, b)
    assert "def driver(" in listing or "native driver" in listing


def test_a_kernel_with_outputs_of_several_dtypes_allocates_each_its_own():
    def f(x):
        positive = x > 0
        return positive, fj.where(positive, x, 0.0), (x * 2).astype(np.int32)

    x = np.linspace(-2, 2, 12).reshape(3, 4)
    g = fj.function(f)
    assert [op.name for op in g.ir(x, stage="fused").body.ops] == ["fusion"]
    for _ in range(3):  # the first call compiles; the driver runs the later ones
        for got, want in zip(g(x), (x > 0, np.where(x > 0, x, 0.0), (x * 2).astype(np.int32)), strict=True):
            assert got.dtype == want.dtype
            np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("n", [8, 1 << 19])  # a small result (np.empty) and a pooled one
@pytest.mark.parametrize("prog", [lambda x: x + 1, lambda x: x, lambda x: x.sum()], ids=["kernel", "identity", "sum"])
def test_one_argument_calls_keep_every_result_they_returned(prog, n):
    # Calls after the second go straight to the driver: each result must still be a fresh
    # array that a later call neither reuses nor overwrites while the caller holds it.
    x = np.arange(n, dtype=np.float32)
    f = fj.function(prog)
    want = prog(x)
    kept = [f(x) for _ in range(4)]
    for got in kept:
        np.testing.assert_allclose(got, want, rtol=1e-6)
        assert not np.may_share_memory(got, x)
    assert all(not np.may_share_memory(a, b) for i, a in enumerate(kept) for b in kept[i + 1:])
    kept[-1][...] = -1  # the caller owns what it got
    np.testing.assert_array_equal(x, np.arange(n, dtype=np.float32))


def test_a_kernel_with_no_inputs_is_called_with_its_outputs_only(tmp_path, monkeypatch, backend="llvm"):
    # An iota too large to fold is a kernel reading no array: its driver line once came out
    # as `k0(, v1)` (the rnn example's accuracy, cold).
    monkeypatch.setenv("FLOWJIT_CACHE_DIR", str(tmp_path))
    for n in (2000, 1 << 21):  # a kernel called directly, and one split over threads
        f = fj.function(lambda x, n=n: fj.arange(float(n)) * 2.0, backend=backend)
        for _ in range(3):  # the first call, then the driver
            np.testing.assert_array_equal(f(np.float64(1)), np.arange(float(n)) * 2.0)
