"""Sines and cosines of a loop whose arguments are all in the medium range
(codegen_cpu.medium_trig): either version of the loop gives the bits of the other, rows
holding a large, infinite or NaN argument take the version with both reductions, and the
analysis picks the loops it should."""

from __future__ import annotations

import numpy as np
import pytest

import flowjit as fj
from flowjit.codegen_cpu import intrinsics, medium_trig
from flowjit.codegen_cpu.render import render_kernel
from flowjit.lowering.loops import Loop, walk_statements

# each test compiles into a cache of its own (the autouse fixture), kernels lowered as there
from tests.codegen_cpu.test_invariant_division import _kernel, _own_cache  # noqa: F401


def _innermost(kernel):
    return [st for st in walk_statements(kernel.body) if isinstance(st, Loop)
            and not any(isinstance(c, Loop) for c in st.body)]


def _reference(op, x):
    """sin or cos of ``x`` computed in float64 and rounded to ``x``'s dtype: float32's are
    correctly rounded; float64's within an ulp of it (compared with a tolerance)."""
    return getattr(np, op)(x.astype(np.float64)).astype(x.dtype)


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_rows_in_the_medium_range_and_beyond_it_give_the_same_bits(dt):
    """Rows of a rotary table, one loop a row: rows whose angles all lie within the medium
    bound run the medium reduction alone, rows holding an angle past it, an infinity or a
    NaN both reductions; every row's sines are those of the loop as written (the bound's
    neighbours included)."""
    rng = np.random.default_rng(5)
    pos = rng.uniform(-1, 1, 64).astype(dt) * np.exp2(rng.integers(0, 24, 64)).astype(dt)
    freq = rng.uniform(0.5, 1.0, 96).astype(dt)
    bound = dt(medium_trig.MEDIUM)
    pos[:6] = [bound, np.nextafter(bound, dt(np.inf)), np.nan, np.inf, -bound, dt(1e30)]
    freq[0] = 1.0

    def rotary(p, f):
        a = p[:, None] * f[None, :]
        return fj.concatenate([fj.cos(a), fj.sin(a)], axis=-1)
    got = fj.function(rotary)(pos, freq)
    a = pos[:, None] * freq[None, :]
    with np.errstate(invalid="ignore"):
        want = np.concatenate([_reference("cos", a), _reference("sin", a)], axis=-1)
    if dt == np.float32:
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, rtol=2.3e-16, atol=1e-300)


def test_the_fast_version_is_rendered_only_for_loops_it_can_check():
    x = np.ones((8, 300), np.float32)
    rows = _kernel(fj.function(lambda x: fj.sin(x * 2.0) + fj.cos(x)), x)
    args = [a for lp in _innermost(rows) for a in medium_trig.arguments(lp)]
    assert {d for _, d in args} == {fj.float32} and len(args) == 2
    text = render_kernel(rows)
    assert "fj.sin.f32.medium" in text and "fj.cos.f32.medium" in text
    # an argument that costs a transcendental is not computed twice: one version only
    costly = _kernel(fj.function(lambda x: fj.sin(fj.exp(x))), x)
    assert not any(medium_trig.arguments(lp) for lp in _innermost(costly))
    assert ".medium" not in render_kernel(costly)
    # float16 sines compute in float32 and are not versioned
    halves = _kernel(fj.function(lambda x: fj.sin(x)), x.astype(np.float16))
    assert not any(medium_trig.arguments(lp) for lp in _innermost(halves))
    # unoptimized code (the quick tier's O0 kernels) keeps one version
    assert ".medium" not in render_kernel(rows, optimize=False)


def test_only_sin_and_cos_have_a_medium_form():
    from llvmlite import ir
    module = ir.Module()
    assert intrinsics.function(module, "sin.f64", medium=True).name == "fj.sin.f64.medium"
    assert intrinsics.function(module, "exp.f32", medium=True) is None


def test_an_argument_bounded_by_its_own_operations_takes_the_medium_form_with_no_check():
    """A normal draw's angle, ``2 pi * f64(53 bits of the cipher) * 2**-53``, lies in [0, 2 pi)
    by its last operations alone: its cosine is the medium form, unversioned (the general
    function is not in the module at all), and the draws are the interpreter's bits."""
    draw = fj.function(lambda k: fj.random.normal(k, (4096,), dtype=np.float32))
    key = fj.random.key(3)
    kernel = _kernel(draw, key)
    text = render_kernel(kernel)
    assert '@"fj.cos.f64.medium"' in text and '@"fj.cos.f64"' not in text
    assert not any(medium_trig.arguments(lp, medium_trig.kernel_lets(kernel.body)) for lp in _innermost(kernel))
    got = np.asarray(draw(key))
    want = np.asarray(fj.function(lambda k: fj.random.normal(k, (4096,), dtype=np.float32), interpret=True)(key))
    np.testing.assert_array_equal(got, want)


def test_the_bounds_follow_integer_ranges_and_refuse_what_may_wrap_or_is_loaded():
    from flowjit.ir.dtypes import float64, uint32, uint64
    from flowjit.lowering.loops import Const, Load, Prim, Var

    def p(op, *args, d=float64):
        return Prim(op, tuple(args), d)
    bits = Load("in0", (Var("i", fj.int64),), uint32)
    wide = p("cast", bits, d=uint64)
    angle = p("mul", p("mul", p("cast", p("shl", wide, Const(21, uint64), d=uint64)), Const(2.0 ** -53, float64)),
              Const(6.283185307179586, float64))
    assert medium_trig.bounded(angle, {})
    # 32 bits shifted by 21 stay below 2**53 (times 2**-40: 8192); by 40 they may wrap in 64
    # bits, anything in the type (times 2**-40: up to 2**24, past the bound)
    def scaled(shift):
        return p("mul", p("cast", p("shl", wide, Const(shift, uint64), d=uint64)), Const(2.0 ** -40, float64))
    assert medium_trig.bounded(scaled(21), {}) and not medium_trig.bounded(scaled(40), {})
    # a loaded float may be anything; a name is followed through the kernel's lets
    assert not medium_trig.bounded(p("mul", Load("in1", (), float64), Const(0.5, float64)), {})
    assert medium_trig.bounded(p("add", Var("t", float64), Const(1.0, float64)), {"t": angle})
    assert not medium_trig.bounded(p("mul", p("cast", wide), Const(1.0, float64)), {})   # up to 2**32


def test_the_bounds_count_the_kernels_rounding():
    """``(x + K) - K`` for x in [0, 1]: zero to one exactly, but float32 rounds ``x + K`` to
    a multiple of 2**26 when K is 1e15, so the difference may be 6.7e7: not bounded."""
    from flowjit.ir.dtypes import float32, uint8
    from flowjit.lowering.loops import Const, Load, Prim, Var
    x = Prim("cast", (Load("in0", (Var("i", fj.int64),), uint8),), float32)   # 0 to 255
    big = Const(1e15, float32)
    assert not medium_trig.bounded(Prim("sub", (Prim("add", (x, big), float32), big), float32), {})
    assert medium_trig.bounded(Prim("sub", (Prim("add", (x, Const(1e3, float32)), float32), Const(1e3, float32)),
                                        float32), {})
