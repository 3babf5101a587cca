"""The interior version of a loop whose selects test conditions it does not change
(``flowjit.lowering.unswitch_bounds``): its loop IR, and compiled results equal to NumPy's
at the borders and inside."""

from __future__ import annotations

import numpy as np
import pytest

import flowjit as fj
from flowjit.ir.dtypes import bool_, float32
from flowjit.lowering import lower_block, print_kernel
from flowjit.lowering.loops import INDEX, Const, If, Let, Load, Loop, Prim, Store, Var, expressions, walk_statements
from flowjit.lowering.unswitch_bounds import MAX_STATEMENTS, MIN_SELECTS, unswitch_bounds
from tests.lowering.test_lowering import kernel_of
from tests.lowering.test_programs import check_fused
from tests.registry.cases_reduction import _conv


def _versions(kernel) -> list[If]:
    return [s for s in walk_statements(kernel.body) if isinstance(s, If)]


def _selects(body: tuple) -> int:
    return sum(isinstance(e, Prim) and e.op == "select" for e in expressions(body))


def _clamps(body: tuple) -> int:
    return sum(isinstance(e, Prim) and e.op in ("min", "max") for e in expressions(body))


def test_a_padded_depthwise_tap_loop_has_an_interior_version_without_selects_or_clamps():
    x = np.random.default_rng(0).standard_normal((2, 6, 7, 8)).astype(np.float32)
    w = np.random.default_rng(1).standard_normal((5, 5, 1, 8)).astype(np.float32)
    k = kernel_of(lambda a, b: fj.conv2d(a, b, padding="SAME", groups=8), x, w)
    (version,) = _versions(k)
    (inside,), (border,) = version.then, version.orelse
    assert isinstance(inside, Loop) and isinstance(border, Loop)
    assert _selects(inside.body) == 0 and _selects(border.body) == 24   # the centre tap has none
    # inside, every tap reads its row and column as they are: no clamp left to compute
    assert _clamps(inside.body) == 0
    stores = [s for s in inside.body if isinstance(s, Store)]
    assert [s.buffer for s in stores] == ["out0"] and stores[0].index[-1].name == inside.var
    assert inside.var != border.var   # each name bound once
    assert check_fused(lambda a, b: fj.conv2d(a, b, padding="SAME", groups=8), x, w) == 1


def test_a_window_of_fewer_taps_than_min_selects_keeps_one_version():
    x = np.random.default_rng(0).standard_normal((2, 6, 7, 8)).astype(np.float32)
    w = np.random.default_rng(1).standard_normal((3, 3, 1, 8)).astype(np.float32)
    assert not _versions(kernel_of(lambda a, b: fj.conv2d(a, b, padding="SAME", groups=8), x, w))


def test_a_select_on_the_inner_loops_own_index_keeps_one_version():
    x = np.random.default_rng(2).standard_normal((4, 5)).astype(np.float32)
    y = np.random.default_rng(3).standard_normal((4, 3)).astype(np.float32)
    text = print_kernel(kernel_of(lambda a, b: fj.concatenate([a, b], axis=1) * 2.0, x, y))
    assert "if " not in text, text


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("strides, dilation, padding", [
    ((1, 1), (1, 1), "SAME"), ((2, 1), (1, 2), "SAME"), ((1, 2), (2, 1), ((2, 1), (0, 3))), ((1, 1), (1, 1), "VALID")])
def test_compiled_depthwise_convolutions_at_the_borders_give_the_references(dtype, strides, dilation, padding):
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 13, 14, 6)).astype(dtype)
    x[0, 0, 0, :] = np.inf   # a border element: padding's zeros must not meet it as inf * 0
    w = rng.standard_normal((5, 4, 1, 6)).astype(dtype)   # 20 taps: past MIN_SELECTS

    def conv(a, b):
        return fj.conv2d(a, b, strides=strides, dilation=dilation, padding=padding, groups=6)
    got = fj.function(conv)(x, w)
    want = _conv(strides, padding, dilation, groups=6)(x, w)
    np.testing.assert_allclose(got, want, rtol=2e-5 if dtype == np.float32 else 1e-12, atol=1e-5)
    if padding == "SAME" and strides == (1, 1):   # every tap but the centre's tests the borders
        assert _versions(kernel_of(conv, x, w))


@pytest.mark.parametrize("pool", ["max_pool", "avg_pool"])
def test_compiled_same_pooling_at_the_borders_gives_numpys(pool):
    x = np.random.default_rng(5).standard_normal((2, 9, 8, 5)).astype(np.float32)

    def f(a):
        return getattr(fj.nn, pool)(a, 5, 1, "SAME")   # 25 taps: past MIN_SELECTS
    got = fj.function(f)(x)
    padded = np.pad(x.astype(np.float64), ((0, 0), (2, 2), (2, 2), (0, 0)),
                    constant_values=-np.inf if pool == "max_pool" else np.nan)
    taps = np.stack([padded[:, i:i + 9, j:j + 8] for i in range(5) for j in range(5)])
    want = taps.max(axis=0) if pool == "max_pool" else np.nanmean(taps, axis=0)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("window", [3, 5])
def test_a_compiled_same_average_pools_gradient_gives_the_interpreters(window):
    # The gradient spreads each window's cotangent back over its taps, a select on the
    # borders a tap: the loops the pass versions.
    x = np.random.default_rng(6).standard_normal((2, 9, 8, 5)).astype(np.float32)

    def loss(a):
        return (fj.nn.avg_pool(a, window, 1, "SAME") ** 2).sum()
    grad = fj.grad(loss)
    fused = fj.function(grad).ir(x, stage="fused")
    kernels = [lower_block(op.blocks[0], "k", collapse=True) for op in fused.body.ops if op.primitive.role == "kernel"]
    assert any(_versions(k) for k in kernels)
    np.testing.assert_allclose(fj.function(grad)(x), fj.function(grad, backend="interpreter")(x), rtol=1e-5, atol=1e-6)


def _tap_loop(cond: Prim) -> Loop:
    """for c in 0..n: out[c] = sum of MIN_SELECTS taps (cond ? x[k, c] : 0), over i and n bound outside."""
    c = Var("c", INDEX)
    total = Const(0.0, float32)
    for k in range(MIN_SELECTS):
        total = Prim("add", (total, Prim("select", (cond, Load("x", (Const(k, INDEX), c), float32),
                                                    Const(0.0, float32)), float32)), float32)
    return Loop("c", Const(0, INDEX), Var("n", INDEX), 1, (Let("t", total), Store("out", (c,), Var("t", float32))))


def test_a_condition_that_could_trap_before_an_empty_loop_keeps_one_version():
    i, n = Var("i", INDEX), Var("n", INDEX)
    names = iter(range(100))

    def fresh(prefix):
        return f"{prefix}{next(names)}"
    safe = Prim("ge", (Prim("sub", (i, Const(1, INDEX)), INDEX), Const(0, INDEX)), bool_)
    (version,) = unswitch_bounds((_tap_loop(safe),), fresh)
    assert isinstance(version, If) and version.cond == safe and _selects(version.then) == 0
    # i // n, n the loop's own extent: computed before a loop of no iteration it would divide by 0
    trapping = Prim("ge", (Prim("idiv", (i, n), INDEX), Const(0, INDEX)), bool_)
    (loop,) = unswitch_bounds((_tap_loop(trapping),), fresh)
    assert isinstance(loop, Loop) and _selects(loop.body) == MIN_SELECTS
    # a bool name may hold a float comparison, poison under fast math: no branch on it
    (loop,) = unswitch_bounds((_tap_loop(Var("mask", bool_)),), fresh)
    assert isinstance(loop, Loop) and _selects(loop.body) == MIN_SELECTS


def test_a_loop_of_more_statements_than_max_statements_keeps_one_version():
    i = Var("i", INDEX)
    names = iter(range(100))
    safe = Prim("ge", (i, Const(1, INDEX)), bool_)
    loop = _tap_loop(safe)
    # the same taps after as many lets again as the bound allows: LLVM's time for a second copy
    filler = tuple(Let(f"f{k}", Prim("mul", (Var("t", float32), Const(float(k), float32)), float32))
                   for k in range(MAX_STATEMENTS))
    big = Loop(loop.var, loop.start, loop.stop, 1, loop.body[:1] + filler + loop.body[1:])
    (kept,) = unswitch_bounds((big,), lambda prefix: f"{prefix}{next(names)}")
    assert kept is big
    (version,) = unswitch_bounds((loop,), lambda prefix: f"{prefix}{next(names)}")
    assert isinstance(version, If)
