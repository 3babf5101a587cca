"""Memory planning: buffers released at their last use, kernels writing in place into a
temporary that dies there, and never into an argument, a constant or a returned value."""

from __future__ import annotations

import numpy as np
import pytest

import flowjit as fj
from flowjit.runtime.memory_plan import plan_memory


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("FLOWJIT_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "flowjit-cache"))


def chain(x):
    # cumsum is not fusible (a kernel of its own), so each mul is its own kernel, reading a
    # kernel's output that dies there.
    a = fj.exp(x)
    c = a * fj.cumsum(a, axis=0)
    return c * fj.cumsum(c, axis=0)


def _executable(f, *args):
    f(*args)
    return next(iter(f._cache.values())).executable


def test_a_dying_kernel_output_is_overwritten_in_place():
    x = np.linspace(-1, 1, 4096).astype(np.float32)
    f = fj.function(chain)
    ex = _executable(f, x)
    # The fusion kernels (each cumsum is a kernel of its own, which writes a new buffer).
    kernels = [i for i, op in enumerate(ex.function.body.ops) if op.id in ex.kernels and op.primitive.role == "kernel"]
    assert len(kernels) == 3
    assert [ex.memory_plan.write_into[i] for i in kernels] == [None, 0, 0]
    for _ in range(2):
        np.testing.assert_allclose(f(x), fj.function(chain, interpret=True)(x), rtol=1e-5)
    assert ex.memory_plan.peak_bytes < ex.memory_plan.unplanned_peak_bytes
    assert "writes in place into" in ex.memory_plan.describe(ex.function)


def test_arguments_and_returned_values_are_never_overwritten():
    def f(x):
        a = fj.exp(x)
        return a, a * fj.cumsum(a, axis=0), x * 2

    x = np.linspace(-1, 1, 512)
    keep = x.copy()
    g = fj.function(f)
    ex = _executable(g, x)
    assert all(w is None for w in ex.memory_plan.write_into)
    a, b, c = g(x)
    np.testing.assert_array_equal(x, keep)
    np.testing.assert_allclose(a, np.exp(keep))
    np.testing.assert_allclose(b, np.exp(keep) * np.cumsum(np.exp(keep)))
    np.testing.assert_allclose(c, keep * 2)


def test_an_output_read_at_other_indices_is_not_overwritten():
    # The second kernel reads `a` reversed and at its own index: writing in place would
    # clobber elements it still has to read.
    def f(x):
        a = fj.exp(x)
        b = fj.cumsum(a, axis=0)
        return a[::-1] + a * b

    x = np.linspace(-1, 1, 1000)
    ex = _executable(fj.function(f), x)
    # `a`'s buffer (the first kernel's) is never taken over; b's (the cumsum kernel's, read
    # at the writer's own index only) may be.
    assert 0 not in ex.memory_plan.write_into
    e = np.exp(x)
    np.testing.assert_allclose(fj.function(f)(x), e[::-1] + e * np.cumsum(e))


def test_plan_releases_each_temporary_after_its_last_use():
    x = np.ones((64,), np.float32)
    fn = fj.function(chain).ir(x, stage="fused")
    plan = plan_memory(fn, {})
    released = [s for step in plan.free_after for s in step]
    returned = {plan.slots[v.id] for v in fn.returns}
    assert len(released) == len(set(released))
    assert not returned & set(released)
    # Every value but the results is released exactly once.
    assert set(released) == set(plan.slots.values()) - returned


def test_a_value_a_layout_op_may_view_is_not_overwritten():
    # Run `transpose` on its NumPy reference (it returns a view): the kernel that reads
    # `a` last must not write into it, or the transposed result would change too.
    def f(x):
        a = fj.exp(x)
        t = a.T
        return t, a * 3

    x = np.linspace(-1, 1, 64).reshape(8, 8)
    fn = fj.function(f).ir(x, stage="prune")  # before fusion: every op is top level
    ops = fn.body.ops
    kernels = {op.id: (0,) for op in ops if op.primitive.kind == "elementwise"}
    plan = plan_memory(fn, kernels)
    assert [op.name for op in ops if op.primitive.kind == "layout"] == ["transpose"]
    assert all(w is None for w in plan.write_into)
    # Without the transpose, the same kernel would write into `a`.
    fn2 = fj.function(lambda x: fj.exp(x) * 3).ir(x, stage="prune")
    plan2 = plan_memory(fn2, {op.id: (0,) for op in fn2.body.ops if op.primitive.kind == "elementwise"})
    assert plan2.write_into[-1] == 0
