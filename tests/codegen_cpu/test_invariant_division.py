"""Division by a loop invariant (codegen_cpu.invariant_division) and the next-row prefetch
(codegen_cpu.row_prefetch): the compiled results are NumPy's to the bit, on either version
of the loop, and the analyses pick the loops they should."""

from __future__ import annotations

import numpy as np
import pytest

import flowjit as fj
from flowjit.codegen_cpu import invariant_division, jit, row_prefetch
from flowjit.lowering import lower_block
from flowjit.lowering.loops import Loop, walk_statements


@pytest.fixture(autouse=True)
def _own_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("FLOWJIT_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "llvm-cache"))


def _kernel(f, *args):
    (op,) = f.ir(*args, stage="fused").body.ops
    return lower_block(op.blocks[0], "k")


def _bits_equal(got, want):
    got, want = np.asarray(got), np.asarray(want)
    u = f"u{got.itemsize}"
    same = (got.view(u) == want.view(u)) | (np.isnan(got) & np.isnan(want))
    return same.all(), np.argwhere(~same)[:3]


def _specials(dt):
    fi = np.finfo(dt)
    return np.array([0.0, -0.0, np.inf, -np.inf, np.nan, fi.tiny, fi.tiny / 8, -fi.tiny / 3, fi.max, -fi.max,
                     1.0, 3.0, fi.eps, 1e-30, 1e30], dt)


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_rows_divided_by_their_own_value_are_numpys_to_the_bit(dt):
    """``x / s[:, None]``: rows within the window take Markstein's version, rows holding a
    zero, a subnormal, an infinity, a NaN or a value far from 1 (dividend or divisor) the
    divider; either way every quotient is the IEEE one, signed zeros and NaNs included."""
    rng = np.random.default_rng(1)
    f = fj.function(lambda x, s: x / s[:, None])
    for trial in range(12):
        x = (rng.uniform(0.5, 2, (64, 256)) * np.exp2(rng.integers(-40, 40, (64, 1)))).astype(dt)
        x[::7, 3] = 0.0
        x[1::7, 5] = -0.0
        s = (rng.uniform(0.5, 2, 64) * np.exp2(rng.integers(-30, 30, 64))).astype(dt)
        if trial % 2:
            flat = x.reshape(-1)
            flat[rng.integers(0, flat.size, 120)] = rng.choice(_specials(dt), 120)
            s[rng.integers(0, 64, 10)] = rng.choice(_specials(dt), 10)
        with np.errstate(all="ignore"):
            ok, where = _bits_equal(f(x, s), x / s[:, None])
        assert ok, (trial, where)


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_signed_zeros_over_divisors_of_either_sign_keep_their_sign(dt):
    """``+0`` and ``-0`` dividends over positive and negative divisors within the window:
    the quotient's zero carries the product of the signs (Markstein's last sum, written for
    a positive divisor, would turn ``+0 / -3`` into ``+0``)."""
    f = fj.function(lambda x, s: x / s[:, None])
    x = np.tile(np.array([0.0, -0.0, 1.0, -2.5], dt), (4, 256))
    s = np.array([3.0, -3.0, 0.5, -1e-3], dt)
    ok, where = _bits_equal(f(x, s), x / s[:, None])
    assert ok, where


def test_every_float32_in_one_binade_divides_as_numpy_does():
    """Every float32 in [1, 2) over divisors that stress the last bit (1 - ulp, 1 + ulp,
    3, 7, 1.1, random ones): Markstein's quotient is the correctly rounded one."""
    f = fj.function(lambda x, s: x / s[:, None])
    x = ((127 << 23) | np.arange(1 << 23, dtype=np.uint32)).view(np.float32).reshape(8192, 1024)
    divisors = [3.0, 7.0, 1.1, 1.5, 0.7, 1e-10, 3e12, np.nextafter(np.float32(2), np.float32(0)),
                np.nextafter(np.float32(1), np.float32(2)), *np.random.default_rng(0).uniform(1, 2, 4)]
    for d in divisors:
        s = np.full(8192, d, np.float32)
        ok, where = _bits_equal(f(x, s), x / s[:, None])
        assert ok, (d, where)


def test_softmax_and_a_normalisation_keep_numpys_divisions():
    """The written softmax (its division reads the exponentials it stored) and a batch
    norm's ``(x - m) / s`` with the quotient also summed: NumPy's float32 quotients."""
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((32, 1024)) * 4).astype(np.float32)
    x[3, :500] = -1e30           # exponentials that are exactly zero: still the fast version
    x[4, 7] = 80.0               # a spread that leaves subnormal exponentials: the divider

    def softmax(v):
        e = fj.exp(v - v.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True), e, e.sum(axis=-1, keepdims=True)

    p, e, s = (np.asarray(a) for a in fj.function(softmax)(x))
    ok, where = _bits_equal(p, e / s)
    assert ok, where
    x = (rng.standard_normal((32, 1024)) * 4).astype(np.float32)
    m, sd = x.mean(axis=0), x.std(axis=0) + np.float32(1)
    y, total = fj.function(lambda v, m, s: ((v - m) / s, ((v - m) / s).sum(axis=0)))(x, m, sd)
    ok, where = _bits_equal(y, (x - m) / sd)
    assert ok, where


def test_the_divisions_that_are_versioned():
    x, s = np.ones((8, 64), np.float32), np.ones(8, np.float32)

    def innermost(kernel):
        return [st for st in walk_statements(kernel.body) if isinstance(st, Loop)
                and not any(isinstance(c, Loop) for c in st.body)]

    by_row = _kernel(fj.function(lambda x, s: x / s[:, None]), x, s)
    (found,) = [d for lp in innermost(by_row) for d in invariant_division.divisions(lp)]
    assert found.dtype == fj.float32 and len(found.dividends) == 1
    # a divisor that changes along the loop, or a dividend that costs a transcendental: no
    assert not any(invariant_division.divisions(lp) for lp in innermost(_kernel(fj.function(lambda a: a / (a + 1)), x)))
    costly = _kernel(fj.function(lambda x, s: fj.exp(x) / s[:, None]), x, s)
    assert not any(invariant_division.divisions(lp) for lp in innermost(costly))
    # the vocabulary's cheap ops (lowering.scalar.CHEAP) may build it: |x| is one instruction
    magnitude = _kernel(fj.function(lambda x, s: fj.abs(x) / s[:, None]), x, s)
    assert any(invariant_division.divisions(lp) for lp in innermost(magnitude))
    rows = np.random.default_rng(3).standard_normal((8, 1024)).astype(np.float32)
    rows[2, :4] = [0.0, -0.0, np.inf, np.nan]
    scale = np.float32([3, -2, 1e-3, 7, 0.5, 1e30, 2, 9])
    got = fj.function(lambda x, s: fj.abs(x) / s[:, None])(rows, scale)
    ok, where = _bits_equal(got, np.abs(rows) / scale[:, None])
    assert ok, where
    # integer division has no such rounding to keep
    ints = _kernel(fj.function(lambda x, s: x // s[:, None]), x.astype(np.int32), s.astype(np.int32))
    assert not any(invariant_division.divisions(lp) for lp in innermost(ints))


def test_markstein_needs_a_fused_multiply_add_and_exact_math():
    from flowjit.codegen_cpu.render import render_kernel
    kernel = _kernel(fj.function(lambda x, s: x / s[:, None]), np.ones((8, 64), np.float32), np.ones(8, np.float32))
    assert "llvm.fma.f32" in render_kernel(kernel, native_fma=True)
    assert "llvm.fma" not in render_kernel(kernel, native_fma=False)
    assert "llvm.fma" not in render_kernel(kernel, fastmath=True, native_fma=True)
    assert jit.HostTarget("x86_64-unknown-linux-gnu", "x86-64-v3", "").native_fma()
    assert not jit.HostTarget("x86_64-unknown-linux-gnu", "x86-64", "").native_fma()


def test_the_next_row_is_prefetched_by_the_last_blocked_pass_of_a_row_read_twice():
    """Layer norm reads each row in three loops: the second blocked one (the variance's)
    prefetches the next row; gelu reads each element once: nothing."""
    from flowjit.codegen_cpu.render import render_kernel
    x = np.ones((16, 1024), np.float32)

    def layernorm(v):
        d = v - v.mean(axis=-1, keepdims=True)
        return d * fj.rsqrt((d * d).mean(axis=-1, keepdims=True) + 1e-5)

    kernel = _kernel(fj.function(layernorm), x)
    plans = [row_prefetch.plan(lp) for lp in walk_statements(kernel.body) if isinstance(lp, Loop)]
    (chosen,) = [p for plan in plans for p in plan.values()]
    (prefetch,) = chosen
    assert prefetch.buffer == "in0" and prefetch.block >= 16
    blocked = [lp for lp in walk_statements(kernel.body) if isinstance(lp, Loop) and id(lp) in
               {k for plan in plans for k in plan}]
    row = next(lp for lp in walk_statements(kernel.body) if isinstance(lp, Loop) and blocked[0] in lp.body)
    assert [c for c in row.body if isinstance(c, Loop) and any(isinstance(g, Loop) for g in c.body)][-1] is blocked[0]
    assert render_kernel(kernel).count('call void @"llvm.prefetch') == prefetch.block // 16
    np.testing.assert_allclose(fj.function(layernorm)(x * 3), np.zeros_like(x), atol=0)
    gelu = _kernel(fj.function(lambda v: v * fj.tanh(v)), x)
    assert not any(row_prefetch.plan(lp) for lp in walk_statements(gelu.body) if isinstance(lp, Loop))


def test_a_loop_longer_than_a_row_runs_as_written():
    """A flat loop over a whole array (Adam's ``m / c1``) is not checked: its dividends
    would come from memory twice. Its quotients are IEEE's all the same."""
    from flowjit.codegen_cpu.render import render_kernel
    rng = np.random.default_rng(5)
    m = rng.standard_normal(invariant_division.MAX_TRIPS * 3 + 5).astype(np.float32)
    f = fj.function(lambda m, c: m / c)
    c = np.float32(0.999)
    ok, where = _bits_equal(f(m, c), m / c)
    assert ok, where
    assert f"{invariant_division.MAX_TRIPS}" in render_kernel(_kernel(f, m, c), native_fma=True)


def test_a_loop_run_once_at_a_known_count_divides_as_written():
    """A batch norm's per-channel scale (32 values over a constant divisor), an embedding
    bag's mean over its cells (16,384): a loop that runs once at a count known when it is
    rendered is not versioned, whatever the count: the check pass and the second copy are
    two loops more for LLVM to compile, to save a few microseconds of divisions a call (a
    longer loop skips the check anyway). At a count known only at run time it is, and so is
    a short row inside a loop over rows (it runs many times)."""
    from flowjit.codegen_cpu.render import render_kernel
    flat = fj.function(lambda x, c: x / c)
    for n in (32, 256, invariant_division.MAX_TRIPS, invariant_division.MAX_TRIPS + 1):
        x = np.linspace(-3, 3, n, dtype=np.float32)
        assert ".check:" not in render_kernel(_kernel(flat, x, np.float32(3)), native_fma=True, dims=(n, n)), n
        # At a count known only at its call (inlined there), LLVM drops the second version:
        # the check is asked only while the count is not a constant.
        text = render_kernel(_kernel(flat, x, np.float32(3)), native_fma=True)
        assert ".check:" in text and "llvm.is.constant.i64" in text, n
        ok, where = _bits_equal(flat(x, np.float32(3)), x / np.float32(3))
        assert ok, where
    rows = fj.function(lambda x, s: x / s[:, None])
    x, s = np.ones((64, 32), np.float32), np.full(64, 3, np.float32)
    text = render_kernel(_kernel(rows, x, s), native_fma=True, dims=(64, 32, 64, 64, 32))
    assert ".check:" in text and "llvm.is.constant" not in text


@pytest.mark.timeout(120)
def test_a_dividend_built_of_a_random_draw_compiles_in_linear_time():
    # A class's log-uniform probability log((c + 2) / (c + 1)) of a drawn class c: the
    # dividend's names stand for the draw's counter-hash rounds, each read by several of
    # the next, and writing them out as one expression took time exponential in the rounds
    # (the compile never ended).
    def probability(k):
        c = fj.floor(fj.random.uniform(k, (4,), "float64") * 3.0)
        return (c + 2.0) / (c + 1.0)
    key = fj.random.PRNGKey(0)
    got = fj.function(probability)(key)
    c = np.floor(np.asarray(fj.function(lambda k: fj.random.uniform(k, (4,), "float64"))(key)) * 3.0)
    np.testing.assert_array_equal(got, (c + 2.0) / (c + 1.0))
