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
