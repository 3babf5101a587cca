"""The simplify pass: IR text in, IR text out for each rewrite and each case it must leave
alone, plus property tests on random programs (same results on inputs full of NaN, inf,
-0.0 and extreme ints; idempotent)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import flowjit as fj
from flowjit.ir import ShapeError, TensorType, Value, interpret, new_function, parse, verify
from flowjit.ir.dtypes import from_short
from flowjit.ir.registry import ROLES, all_primitives
from flowjit.passes.prune import prune
from flowjit.passes.simplify import simplify
from tests.test_programs import programs, run_program

# ---- helpers ---------------------------------------------------------------------------------

_SPECIAL = {
    "f": [0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 3.0, np.nan, -np.nan, np.inf, -np.inf, 1e-3, 6e4],
    "i": [0, 1, -1, 2, -7, 100],
}


def _pool(d) -> np.ndarray:
    """The special values of dtype ``d`` that it can hold: extreme ints, signed zeros, NaN,
    infinities, and for a complex dtype each float special paired with a few others."""
    if d.is_int:
        info = np.iinfo(d.np)
        values = _SPECIAL["i"] + [int(info.min), int(info.max), int(info.min) + 1]
        return np.array([v for v in dict.fromkeys(values) if info.min <= v <= info.max], dtype=d.np)
    floats = _SPECIAL["f"]
    if d.is_complex:
        floats = [complex(x, y) for x in floats for y in (0.0, -0.0, np.nan, np.inf, 1.0)]
    with np.errstate(all="ignore"):
        return np.array(floats, dtype=np.complex128 if d.is_complex else np.float64).astype(d.np)


def _random_input(t: TensorType, rng: np.random.Generator) -> np.ndarray:
    d = t.dtype
    if d.is_bool:
        return rng.random(t.shape) < 0.5
    return rng.choice(_pool(d), size=t.shape).astype(d.np)


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal dtype, shape and elements: bits for ints/bools, and for floats bits everywhere
    except NaNs, which must be NaN in both (a NaN's sign and payload are not promised)."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype.kind == "c":  # each part as a float
        return _same(a.real.copy(), b.real.copy()) and _same(a.imag.copy(), b.imag.copy())
    if a.dtype.kind == "f":
        na, nb = np.isnan(a), np.isnan(b)
        if not np.array_equal(na, nb):
            return False
        a, b = np.where(na, 0, a).astype(a.dtype), np.where(nb, 0, b).astype(b.dtype)
    return a.tobytes() == b.tobytes()


def _check_same_results(before, after, seed: int = 0, trials: int = 3) -> None:
    rng = np.random.default_rng(seed)
    for _ in range(trials):
        inputs = [_random_input(a.type, rng) for a in before.args]
        want = interpret(before, inputs)
        got = interpret(after, inputs)
        assert len(want) == len(got)
        for w, g in zip(want, got, strict=True):
            assert _same(w, g), (w, g)


def run(text: str) -> str:
    """Parse, simplify, verify; check results and idempotence; return the printed result."""
    fn = parse(text)
    original = fn.clone()
    simplify(fn)
    verify(fn)
    out = str(fn)
    assert str(simplify(fn)) == out, "simplify is not idempotent"
    _check_same_results(original, fn)
    return out


def _unchanged(text: str) -> None:
    assert run(text) == str(parse(text))


# ---- identities --------------------------------------------------------------------------------

def test_mul_by_one_both_sides():
    assert run("""func @f(%x: f32[2,3]) -> (f32[2,3], f32[2,3]) {
  %0 = constant {value=1.0} : f32[]
  %1 = mul %x, %0 : f32[2,3]
  %2 = mul %0, %x : f32[2,3]
  return %1, %2
}
""") == """func @f(%x: f32[2,3]) -> (f32[2,3], f32[2,3]) {
  %0 = constant {value=1.0} : f32[]
  %1 = mul %x, %0 : f32[2,3]
  %2 = mul %0, %x : f32[2,3]
  return %x, %x
}
"""


def test_mul_by_larger_ones_broadcasts_x():
    # The constant is bigger than x: the result is x broadcast, not x.
    assert run("""func @f(%x: f32[3]) -> (f32[2,3]) {
  %0 = constant {value=[[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]]} : f32[2,3]
  %1 = mul %0, %x : f32[2,3]
  return %1
}
""") == """func @f(%x: f32[3]) -> (f32[2,3]) {
  %0 = constant {value=[[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]]} : f32[2,3]
  %1 = broadcast_to %x {shape=(2,3)} : f32[2,3]
  %2 = mul %0, %x : f32[2,3]
  return %1
}
"""


def test_mul_by_mixed_constant_unchanged():
    _unchanged("""func @f(%x: i32[3]) -> (i32[3]) {
  %0 = constant {value=[1, 2, 1]} : i32[3]
  %1 = mul %x, %0 : i32[3]
  return %1
}
""")


def test_add_zero_ints_both_sides():
    assert run("""func @f(%x: i64[3]) -> (i64[3], i64[3]) {
  %0 = constant {value=0} : i64[]
  %1 = add %x, %0 : i64[3]
  %2 = add %0, %x : i64[3]
  return %1, %2
}
""") == """func @f(%x: i64[3]) -> (i64[3], i64[3]) {
  %0 = constant {value=0} : i64[]
  %1 = add %x, %0 : i64[3]
  %2 = add %0, %x : i64[3]
  return %x, %x
}
"""


def test_add_float_zero_only_with_negative_zero():
    # x + 0.0 turns -0.0 into +0.0, so only -0.0 is an identity for floats.
    assert run("""func @f(%x: f32[3]) -> (f32[3], f32[3], f32[3], f32[3]) {
  %0 = constant {value=0.0} : f32[]
  %1 = add %x, %0 : f32[3]
  %2 = add %0, %x : f32[3]
  %3 = constant {value=-0.0} : f32[]
  %4 = add %x, %3 : f32[3]
  %5 = add %3, %x : f32[3]
  return %1, %2, %4, %5
}
""") == """func @f(%x: f32[3]) -> (f32[3], f32[3], f32[3], f32[3]) {
  %0 = constant {value=0.0} : f32[]
  %1 = add %x, %0 : f32[3]
  %2 = add %0, %x : f32[3]
  %3 = constant {value=-0.0} : f32[]
  %4 = add %x, %3 : f32[3]
  %5 = add %3, %x : f32[3]
  return %1, %2, %x, %x
}
"""


def test_sub_zero_right_only_and_float_sign():
    # x - 0.0 keeps -0.0; x - (-0.0) does not; 0 - x is not x.
    assert run("""func @f(%x: f16[3], %y: i32[3]) -> (f16[3], f16[3], i32[3], i32[3]) {
  %0 = constant {value=0.0} : f16[]
  %1 = sub %x, %0 : f16[3]
  %2 = constant {value=-0.0} : f16[]
  %3 = sub %x, %2 : f16[3]
  %4 = constant {value=0} : i32[]
  %5 = sub %y, %4 : i32[3]
  %6 = sub %4, %y : i32[3]
  return %1, %3, %5, %6
}
""") == """func @f(%x: f16[3], %y: i32[3]) -> (f16[3], f16[3], i32[3], i32[3]) {
  %0 = constant {value=0.0} : f16[]
  %1 = sub %x, %0 : f16[3]
  %2 = constant {value=-0.0} : f16[]
  %3 = sub %x, %2 : f16[3]
  %4 = constant {value=0} : i32[]
  %5 = sub %y, %4 : i32[3]
  %6 = sub %4, %y : i32[3]
  return %x, %3, %y, %6
}
"""


def test_div_and_pow_by_one_right_only():
    assert run("""func @f(%x: f64[2], %n: i32[2]) -> (f64[2], f64[2], f64[2], i32[2]) {
  %0 = constant {value=1.0} : f64[]
  %1 = div %x, %0 : f64[2]
  %2 = div %0, %x : f64[2]
  %3 = pow %x, %0 : f64[2]
  %4 = constant {value=[1, 1]} : i32[2]
  %5 = pow %n, %4 : i32[2]
  return %1, %2, %3, %5
}
""") == """func @f(%x: f64[2], %n: i32[2]) -> (f64[2], f64[2], f64[2], i32[2]) {
  %0 = constant {value=1.0} : f64[]
  %1 = div %x, %0 : f64[2]
  %2 = div %0, %x : f64[2]
  %3 = pow %x, %0 : f64[2]
  %4 = constant {value=[1, 1]} : i32[2]
  %5 = pow %n, %4 : i32[2]
  return %x, %2, %x, %n
}
"""


def test_logical_identities():
    assert run("""func @f(%p: bool[3]) -> (bool[3], bool[3], bool[3], bool[3]) {
  %0 = constant {value=true} : bool[]
  %1 = constant {value=false} : bool[]
  %2 = logical_and %0, %p : bool[3]
  %3 = logical_or %p, %1 : bool[3]
  %4 = logical_xor %1, %p : bool[3]
  %5 = logical_or %p, %0 : bool[3]
  return %2, %3, %4, %5
}
""") == """func @f(%p: bool[3]) -> (bool[3], bool[3], bool[3], bool[3]) {
  %0 = constant {value=true} : bool[]
  %1 = constant {value=false} : bool[]
  %2 = logical_and %0, %p : bool[3]
  %3 = logical_or %p, %1 : bool[3]
  %4 = logical_xor %1, %p : bool[3]
  %5 = logical_or %p, %0 : bool[3]
  return %p, %p, %p, %5
}
"""


def test_constant_seen_through_broadcast():
    assert run("""func @f(%x: f32[3]) -> (f32[2,3]) {
  %0 = constant {value=1.0} : f32[]
  %1 = broadcast_to %0 {shape=(2,3)} : f32[2,3]
  %2 = mul %x, %1 : f32[2,3]
  return %2
}
""") == """func @f(%x: f32[3]) -> (f32[2,3]) {
  %0 = constant {value=1.0} : f32[]
  %1 = broadcast_to %0 {shape=(2,3)} : f32[2,3]
  %2 = broadcast_to %x {shape=(2,3)} : f32[2,3]
  %3 = mul %x, %1 : f32[2,3]
  return %2
}
"""


# ---- same operand twice -------------------------------------------------------------------------

def test_max_min_of_same_value():
    assert run("""func @f(%x: f32[3]) -> (f32[3], f32[3], f32[3]) {
  %0 = maximum %x, %x : f32[3]
  %1 = minimum %x, %x : f32[3]
  %2 = add %x, %x : f32[3]
  return %0, %1, %2
}
""") == """func @f(%x: f32[3]) -> (f32[3], f32[3], f32[3]) {
  %0 = maximum %x, %x : f32[3]
  %1 = minimum %x, %x : f32[3]
  %2 = add %x, %x : f32[3]
  return %x, %x, %2
}
"""


def test_self_cancelling_ints_and_comparisons():
    assert run("""func @f(%x: i32[2,3]) -> (i32[2,3], bool[2,3], bool[2,3], i32[]) {
  %0 = sub %x, %x : i32[2,3]
  %1 = eq %x, %x : bool[2,3]
  %2 = lt %x, %x : bool[2,3]
  %3 = constant {value=5} : i32[]
  %4 = sub %3, %3 : i32[]
  return %0, %1, %2, %4
}
""") == """func @f(%x: i32[2,3]) -> (i32[2,3], bool[2,3], bool[2,3], i32[]) {
  %0 = constant {value=0} : i32[]
  %1 = broadcast_to %0 {shape=(2,3)} : i32[2,3]
  %2 = sub %x, %x : i32[2,3]
  %3 = constant {value=true} : bool[]
  %4 = broadcast_to %3 {shape=(2,3)} : bool[2,3]
  %5 = eq %x, %x : bool[2,3]
  %6 = constant {value=false} : bool[]
  %7 = broadcast_to %6 {shape=(2,3)} : bool[2,3]
  %8 = lt %x, %x : bool[2,3]
  %9 = constant {value=5} : i32[]
  %10 = constant {value=0} : i32[]
  %11 = sub %9, %9 : i32[]
  return %1, %4, %7, %10
}
"""


def test_self_cancelling_not_for_floats():
    # inf - inf is nan and nan == nan is false.
    _unchanged("""func @f(%x: f32[3]) -> (f32[3], bool[3], bool[3]) {
  %0 = sub %x, %x : f32[3]
  %1 = eq %x, %x : bool[3]
  %2 = ge %x, %x : bool[3]
  return %0, %1, %2
}
""")


def test_xor_of_same_bool_is_false():
    assert run("""func @f(%p: bool[2]) -> (bool[2], bool[2]) {
  %0 = logical_xor %p, %p : bool[2]
  %1 = logical_and %p, %p : bool[2]
  return %0, %1
}
""") == """func @f(%p: bool[2]) -> (bool[2], bool[2]) {
  %0 = constant {value=false} : bool[]
  %1 = broadcast_to %0 {shape=(2,)} : bool[2]
  %2 = logical_xor %p, %p : bool[2]
  %3 = logical_and %p, %p : bool[2]
  return %1, %p
}
"""


# ---- involutions --------------------------------------------------------------------------------

def test_double_negation_and_not():
    assert run("""func @f(%x: i32[3], %p: bool[3]) -> (i32[3], bool[3], i32[3]) {
  %0 = neg %x : i32[3]
  %1 = neg %0 : i32[3]
  %2 = logical_not %p : bool[3]
  %3 = logical_not %2 : bool[3]
  return %1, %3, %0
}
""") == """func @f(%x: i32[3], %p: bool[3]) -> (i32[3], bool[3], i32[3]) {
  %0 = neg %x : i32[3]
  %1 = neg %0 : i32[3]
  %2 = logical_not %p : bool[3]
  %3 = logical_not %2 : bool[3]
  return %x, %p, %0
}
"""


def test_quadruple_negation_to_fixed_point():
    assert run("""func @f(%x: f32[3]) -> (f32[3], f32[3]) {
  %0 = neg %x : f32[3]
  %1 = neg %0 : f32[3]
  %2 = neg %1 : f32[3]
  %3 = neg %2 : f32[3]
  %4 = neg %3 : f32[3]
  return %3, %4
}
""") == """func @f(%x: f32[3]) -> (f32[3], f32[3]) {
  %0 = neg %x : f32[3]
  %1 = neg %0 : f32[3]
  %2 = neg %x : f32[3]
  %3 = neg %2 : f32[3]
  %4 = neg %x : f32[3]
  return %x, %4
}
"""


def test_neg_of_abs_unchanged():
    _unchanged("""func @f(%x: f32[3]) -> (f32[3]) {
  %0 = abs %x : f32[3]
  %1 = neg %0 : f32[3]
  %2 = abs %1 : f32[3]
  return %2
}
""")


# ---- select -------------------------------------------------------------------------------------

def test_select_same_branches_and_constant_predicates():
    assert run("""func @f(%p: bool[2,3], %a: f32[2,3], %b: f32[3]) -> (f32[2,3], f32[2,3], f32[2,3]) {
  %0 = select %p, %b, %b : f32[2,3]
  %1 = constant {value=true} : bool[]
  %2 = select %1, %a, %b : f32[2,3]
  %3 = constant {value=[false, false, false]} : bool[3]
  %4 = select %3, %a, %b : f32[2,3]
  return %0, %2, %4
}
""") == """func @f(%p: bool[2,3], %a: f32[2,3], %b: f32[3]) -> (f32[2,3], f32[2,3], f32[2,3]) {
  %0 = broadcast_to %b {shape=(2,3)} : f32[2,3]
  %1 = select %p, %b, %b : f32[2,3]
  %2 = constant {value=true} : bool[]
  %3 = select %2, %a, %b : f32[2,3]
  %4 = constant {value=[false, false, false]} : bool[3]
  %5 = broadcast_to %b {shape=(2,3)} : f32[2,3]
  %6 = select %4, %a, %b : f32[2,3]
  return %0, %a, %5
}
"""


def test_select_mixed_predicate_unchanged():
    _unchanged("""func @f(%a: f32[3], %b: f32[3]) -> (f32[3]) {
  %0 = constant {value=[true, false, true]} : bool[3]
  %1 = select %0, %a, %b : f32[3]
  return %1
}
""")


# ---- casts --------------------------------------------------------------------------------------

def test_cast_to_same_dtype():
    assert run("""func @f(%x: f32[3]) -> (f32[3]) {
  %0 = cast %x {dtype=f32} : f32[3]
  return %0
}
""") == """func @f(%x: f32[3]) -> (f32[3]) {
  %0 = cast %x {dtype=f32} : f32[3]
  return %x
}
"""


def test_cast_chains_fold_only_through_exact_intermediates():
    assert run("""func @f(%h: f16[2], %i: i32[2], %x: f32[2], %b: bool[2]) -> (f64[2], f64[2], f32[2], i32[2], f64[2]) {
  %0 = cast %h {dtype=f32} : f32[2]
  %1 = cast %0 {dtype=f64} : f64[2]
  %2 = cast %i {dtype=i64} : i64[2]
  %3 = cast %2 {dtype=f64} : f64[2]
  %4 = cast %x {dtype=f64} : f64[2]
  %5 = cast %4 {dtype=f32} : f32[2]
  %6 = cast %b {dtype=f32} : f32[2]
  %7 = cast %6 {dtype=i32} : i32[2]
  %8 = cast %i {dtype=f64} : f64[2]
  %9 = cast %8 {dtype=i64} : i64[2]
  %10 = cast %9 {dtype=f64} : f64[2]
  return %1, %3, %5, %7, %10
}
""") == """func @f(%h: f16[2], %i: i32[2], %x: f32[2], %b: bool[2]) -> (f64[2], f64[2], f32[2], i32[2], f64[2]) {
  %0 = cast %h {dtype=f32} : f32[2]
  %1 = cast %h {dtype=f64} : f64[2]
  %2 = cast %0 {dtype=f64} : f64[2]
  %3 = cast %i {dtype=i64} : i64[2]
  %4 = cast %i {dtype=f64} : f64[2]
  %5 = cast %3 {dtype=f64} : f64[2]
  %6 = cast %x {dtype=f64} : f64[2]
  %7 = cast %6 {dtype=f32} : f32[2]
  %8 = cast %b {dtype=f32} : f32[2]
  %9 = cast %b {dtype=i32} : i32[2]
  %10 = cast %8 {dtype=i32} : i32[2]
  %11 = cast %i {dtype=f64} : f64[2]
  %12 = cast %i {dtype=i64} : i64[2]
  %13 = cast %11 {dtype=i64} : i64[2]
  %14 = cast %i {dtype=f64} : f64[2]
  %15 = cast %12 {dtype=f64} : f64[2]
  return %1, %4, %x, %9, %14
}
"""


def test_cast_chains_through_a_narrower_range_are_kept():
    # i8 -> u8 wraps negatives (-128 -> 128, which u64 keeps; i8 -> u64 would give 2**64 - 128);
    # u32 -> i32 wraps the upper half; c64 -> f64 drops the imaginary part.
    _unchanged("""func @f(%a: i8[2], %u: u32[2], %z: c64[2]) -> (u64[2], i64[2], c128[2]) {
  %0 = cast %a {dtype=u8} : u8[2]
  %1 = cast %0 {dtype=u64} : u64[2]
  %2 = cast %u {dtype=i32} : i32[2]
  %3 = cast %2 {dtype=i64} : i64[2]
  %4 = cast %z {dtype=f64} : f64[2]
  %5 = cast %4 {dtype=c128} : c128[2]
  return %1, %3, %5
}
""")


def test_a_cast_through_unsigned_bytes_wraps_as_numpy():
    a = np.array([-128, -1, 5], np.int8)
    f = fj.function(lambda v: fj.astype(fj.astype(v, np.uint8), np.uint64))
    np.testing.assert_array_equal(f(a), a.astype(np.uint8).astype(np.uint64))
    z = np.array([1 + 2j, -3.5j], np.complex64)
    g = fj.function(lambda v: fj.astype(fj.real(v).astype(np.float64), np.complex128))
    np.testing.assert_array_equal(g(z), z.real.astype(np.complex128))


def test_cast_chains_that_round_are_kept():
    # i32 -> f32 rounds; f64 -> f32 rounds; i64 -> f64 rounds; f32 -> i32 truncates;
    # float -> float -> int is kept even when exact (out-of-range conversion is not portable).
    _unchanged("""func @f(%i: i32[2], %d: f64[2], %l: i64[2], %x: f32[2]) -> (f64[2], f64[2], i64[2], f32[2], i32[2]) {
  %0 = cast %i {dtype=f32} : f32[2]
  %1 = cast %0 {dtype=f64} : f64[2]
  %2 = cast %d {dtype=f32} : f32[2]
  %3 = cast %2 {dtype=f64} : f64[2]
  %4 = cast %l {dtype=f64} : f64[2]
  %5 = cast %4 {dtype=i64} : i64[2]
  %6 = cast %x {dtype=i32} : i32[2]
  %7 = cast %6 {dtype=f32} : f32[2]
  %8 = cast %x {dtype=f64} : f64[2]
  %9 = cast %8 {dtype=i32} : i32[2]
  return %1, %3, %5, %7, %9
}
""")


# ---- layout -------------------------------------------------------------------------------------

def test_transposes_compose():
    assert run("""func @f(%x: f32[2,3,4]) -> (f32[2,3,4], f32[3,4,2], f32[2,3,4]) {
  %0 = transpose %x {perm=(1,0,2)} : f32[3,2,4]
  %1 = transpose %0 {perm=(1,0,2)} : f32[2,3,4]
  %2 = transpose %0 {perm=(0,2,1)} : f32[3,4,2]
  %3 = transpose %x {perm=(0,1,2)} : f32[2,3,4]
  return %1, %2, %3
}
""") == """func @f(%x: f32[2,3,4]) -> (f32[2,3,4], f32[3,4,2], f32[2,3,4]) {
  %0 = transpose %x {perm=(1,0,2)} : f32[3,2,4]
  %1 = transpose %0 {perm=(1,0,2)} : f32[2,3,4]
  %2 = transpose %x {perm=(1,2,0)} : f32[3,4,2]
  %3 = transpose %0 {perm=(0,2,1)} : f32[3,4,2]
  %4 = transpose %x {perm=(0,1,2)} : f32[2,3,4]
  return %x, %2, %x
}
"""


def test_a_matrix_transpose_that_only_products_read_is_not_composed_with_the_one_before():
    # k.swapaxes(-1, -2) of attention heads (B, T, H, dh) -> (B, H, T, dh): the BLAS reads the
    # swap in place (a gemm's transpose flag); composed into one (0,2,3,1) transpose, it became
    # a copy of its own, at a fifth of the copy bandwidth (three in the zoo transformer's step).
    # A transpose reading it (the product's gradient) still composes, back to the heads; a
    # swap that is returned is composed (a copy either way), and so is one whose heads
    # nothing else reads (one copy either way, where a backend copying a transposed operand
    # would make two of the kept pair).
    head = ("func @f(%k: f32[2,5,3,4], %q: f32[2,3,6,4], %g: f32[2,3,6,5]) -> "
            "(f32[2,3,6,5], f32[2,3,6,4], f32[2,3,4,5], f32[2,3,6,5]) {\n")
    got = run(head + """  %0 = transpose %k {perm=(0,2,1,3)} : f32[2,3,5,4]
  %1 = transpose %0 {perm=(0,1,3,2)} : f32[2,3,4,5]
  %2 = matmul %q, %1 : f32[2,3,6,5]
  %3 = transpose %1 {perm=(0,1,3,2)} : f32[2,3,5,4]
  %4 = matmul %g, %3 : f32[2,3,6,4]
  %5 = transpose %0 {perm=(0,1,3,2)} : f32[2,3,4,5]
  %6 = transpose %k {perm=(0,2,1,3)} : f32[2,3,5,4]
  %7 = transpose %6 {perm=(0,1,3,2)} : f32[2,3,4,5]
  %8 = matmul %q, %7 : f32[2,3,6,5]
  return %2, %4, %5, %8
}
""")
    assert got == head + """  %0 = transpose %k {perm=(0,2,1,3)} : f32[2,3,5,4]
  %1 = transpose %0 {perm=(0,1,3,2)} : f32[2,3,4,5]
  %2 = matmul %q, %1 : f32[2,3,6,5]
  %3 = transpose %1 {perm=(0,1,3,2)} : f32[2,3,5,4]
  %4 = matmul %g, %0 : f32[2,3,6,4]
  %5 = transpose %k {perm=(0,2,3,1)} : f32[2,3,4,5]
  %6 = transpose %0 {perm=(0,1,3,2)} : f32[2,3,4,5]
  %7 = transpose %k {perm=(0,2,1,3)} : f32[2,3,5,4]
  %8 = transpose %k {perm=(0,2,3,1)} : f32[2,3,4,5]
  %9 = transpose %7 {perm=(0,1,3,2)} : f32[2,3,4,5]
  %10 = matmul %q, %8 : f32[2,3,6,5]
  return %2, %4, %5, %10
}
"""


def test_transpose_of_square_unchanged():
    # Same type is not the identity: only the identity perm is.
    _unchanged("""func @f(%x: f32[3,3]) -> (f32[3,3]) {
  %0 = transpose %x {perm=(1,0)} : f32[3,3]
  return %0
}
""")


def test_reshape_chains():
    # Each chain of reshape/squeeze/expand_dims becomes one reshape of the chain's start
    # (duplicates such as %6 and %0 are left to cse).
    assert run("""func @f(%x: f32[2,3]) -> (f32[3,2], f32[2,3], f32[6], f32[2,3]) {
  %0 = reshape %x {shape=(6,)} : f32[6]
  %1 = reshape %0 {shape=(3,2)} : f32[3,2]
  %2 = reshape %1 {shape=(2,3)} : f32[2,3]
  %3 = expand_dims %0 {axes=(0,)} : f32[1,6]
  %4 = squeeze %3 {axes=(0,)} : f32[6]
  %5 = reshape %x {shape=(2,3)} : f32[2,3]
  return %1, %2, %4, %5
}
""") == """func @f(%x: f32[2,3]) -> (f32[3,2], f32[2,3], f32[6], f32[2,3]) {
  %0 = reshape %x {shape=(6,)} : f32[6]
  %1 = reshape %x {shape=(3,2)} : f32[3,2]
  %2 = reshape %0 {shape=(3,2)} : f32[3,2]
  %3 = reshape %1 {shape=(2,3)} : f32[2,3]
  %4 = reshape %x {shape=(1,6)} : f32[1,6]
  %5 = expand_dims %0 {axes=(0,)} : f32[1,6]
  %6 = reshape %x {shape=(6,)} : f32[6]
  %7 = squeeze %4 {axes=(0,)} : f32[6]
  %8 = reshape %x {shape=(2,3)} : f32[2,3]
  return %1, %x, %6, %x
}
"""


def test_squeeze_expand_broadcast_to_same_shape():
    assert run("""func @f(%x: f32[1,3]) -> (f32[1,3], f32[1,3], f32[1,3]) {
  %0 = squeeze %x {axes=()} : f32[1,3]
  %1 = expand_dims %x {axes=()} : f32[1,3]
  %2 = broadcast_to %x {shape=(1,3)} : f32[1,3]
  return %0, %1, %2
}
""") == """func @f(%x: f32[1,3]) -> (f32[1,3], f32[1,3], f32[1,3]) {
  %0 = squeeze %x {axes=()} : f32[1,3]
  %1 = expand_dims %x {axes=()} : f32[1,3]
  %2 = broadcast_to %x {shape=(1,3)} : f32[1,3]
  return %x, %x, %x
}
"""


def test_broadcasts_compose():
    assert run("""func @f(%x: f32[3]) -> (f32[4,2,3]) {
  %0 = broadcast_to %x {shape=(2,3)} : f32[2,3]
  %1 = broadcast_to %0 {shape=(4,2,3)} : f32[4,2,3]
  return %1
}
""") == """func @f(%x: f32[3]) -> (f32[4,2,3]) {
  %0 = broadcast_to %x {shape=(2,3)} : f32[2,3]
  %1 = broadcast_to %x {shape=(4,2,3)} : f32[4,2,3]
  %2 = broadcast_to %0 {shape=(4,2,3)} : f32[4,2,3]
  return %1
}
"""


def test_whole_slices():
    # Size-1 dimensions may have any step; a reversed slice is not the identity.
    assert run("""func @f(%x: i32[1,4]) -> (i32[1,4], i32[1,4]) {
  %0 = slice %x {start=(0,0), size=(1,4), step=(-1,1)} : i32[1,4]
  %1 = slice %x {start=(0,3), size=(1,4), step=(1,-1)} : i32[1,4]
  return %0, %1
}
""") == """func @f(%x: i32[1,4]) -> (i32[1,4], i32[1,4]) {
  %0 = slice %x {start=(0,0), size=(1,4), step=(-1,1)} : i32[1,4]
  %1 = slice %x {start=(0,3), size=(1,4), step=(1,-1)} : i32[1,4]
  return %x, %1
}
"""


def test_slices_compose():
    # x[1:9:2][::-1][1:] -> start 7 - 2 = 5, step -2, size 3: elements 5, 3, 1.
    # Reversing twice gives x back.
    assert run("""func @f(%x: i64[10]) -> (i64[3], i64[10]) {
  %0 = slice %x {start=(1,), size=(4,), step=(2,)} : i64[4]
  %1 = slice %0 {start=(3,), size=(4,), step=(-1,)} : i64[4]
  %2 = slice %1 {start=(1,), size=(3,), step=(1,)} : i64[3]
  %3 = slice %x {start=(9,), size=(10,), step=(-1,)} : i64[10]
  %4 = slice %3 {start=(9,), size=(10,), step=(-1,)} : i64[10]
  return %2, %4
}
""") == """func @f(%x: i64[10]) -> (i64[3], i64[10]) {
  %0 = slice %x {start=(1,), size=(4,), step=(2,)} : i64[4]
  %1 = slice %x {start=(7,), size=(4,), step=(-2,)} : i64[4]
  %2 = slice %0 {start=(3,), size=(4,), step=(-1,)} : i64[4]
  %3 = slice %x {start=(5,), size=(3,), step=(-2,)} : i64[3]
  %4 = slice %1 {start=(1,), size=(3,), step=(1,)} : i64[3]
  %5 = slice %x {start=(9,), size=(10,), step=(-1,)} : i64[10]
  %6 = slice %5 {start=(9,), size=(10,), step=(-1,)} : i64[10]
  return %3, %x
}
"""


def test_reductions_over_no_axes():
    # A float reduce_sum over no axes turns -0.0 into +0.0 in the reference: kept.
    assert run("""func @f(%x: f32[6], %i: i32[6], %p: bool[2]) -> (f32[6], f32[6], i32[6], bool[2], f32[6]) {
  %0 = reduce_max %x {axes=(), keepdims=true} : f32[6]
  %1 = reduce_prod %x {axes=()} : f32[6]
  %2 = reduce_sum %i {axes=(), keepdims=true} : i32[6]
  %3 = reduce_all %p {axes=()} : bool[2]
  %4 = reduce_sum %x {axes=(), keepdims=true} : f32[6]
  return %0, %1, %2, %3, %4
}
""") == """func @f(%x: f32[6], %i: i32[6], %p: bool[2]) -> (f32[6], f32[6], i32[6], bool[2], f32[6]) {
  %0 = reduce_max %x {axes=(), keepdims=true} : f32[6]
  %1 = reduce_prod %x {axes=()} : f32[6]
  %2 = reduce_sum %i {axes=(), keepdims=true} : i32[6]
  %3 = reduce_all %p {axes=()} : bool[2]
  %4 = reduce_sum %x {axes=(), keepdims=true} : f32[6]
  return %x, %x, %i, %p, %4
}
"""


def test_reduction_over_size_one_axis_unchanged():
    _unchanged("""func @f(%x: f32[1,3]) -> (f32[1,3]) {
  %0 = reduce_max %x {axes=(0,), keepdims=true} : f32[1,3]
  return %0
}
""")


# ---- broadcast of scalars ---------------------------------------------------------------------

def test_elementwise_uses_the_unbroadcast_value():
    assert run("""func @f(%s: f32[], %y: f32[2,3], %p: bool[]) -> (f32[2,3], f32[2,3]) {
  %0 = broadcast_to %s {shape=(2,3)} : f32[2,3]
  %1 = add %0, %y : f32[2,3]
  %2 = broadcast_to %p {shape=(2,3)} : bool[2,3]
  %3 = select %2, %0, %y : f32[2,3]
  return %1, %3
}
""") == """func @f(%s: f32[], %y: f32[2,3], %p: bool[]) -> (f32[2,3], f32[2,3]) {
  %0 = broadcast_to %s {shape=(2,3)} : f32[2,3]
  %1 = add %s, %y : f32[2,3]
  %2 = broadcast_to %p {shape=(2,3)} : bool[2,3]
  %3 = select %p, %s, %y : f32[2,3]
  return %1, %3
}
"""


def test_only_broadcasts_that_do_not_set_the_shape_are_dropped():
    # In %2 either broadcast alone may go, not both; in %4 the broadcast sets the shape;
    # cast does not broadcast its input.
    assert run("""func @f(%s: f32[3], %t: f32[]) -> (f32[2,3], f32[2,3], f64[2,3]) {
  %0 = broadcast_to %s {shape=(2,3)} : f32[2,3]
  %1 = broadcast_to %t {shape=(2,3)} : f32[2,3]
  %2 = mul %0, %1 : f32[2,3]
  %3 = sub %0, %s : f32[2,3]
  %4 = cast %0 {dtype=f64} : f64[2,3]
  return %2, %3, %4
}
""") == """func @f(%s: f32[3], %t: f32[]) -> (f32[2,3], f32[2,3], f64[2,3]) {
  %0 = broadcast_to %s {shape=(2,3)} : f32[2,3]
  %1 = broadcast_to %t {shape=(2,3)} : f32[2,3]
  %2 = mul %s, %1 : f32[2,3]
  %3 = sub %0, %s : f32[2,3]
  %4 = cast %0 {dtype=f64} : f64[2,3]
  return %2, %3, %4
}
"""


def test_broadcast_of_scalar_then_identity():
    # Dropping the broadcast exposes x * 1.
    assert run("""func @f(%x: f32[2,3]) -> (f32[2,3]) {
  %0 = constant {value=1.0} : f32[]
  %1 = broadcast_to %0 {shape=(2,3)} : f32[2,3]
  %2 = mul %1, %x : f32[2,3]
  %3 = neg %2 : f32[2,3]
  return %3
}
""") == """func @f(%x: f32[2,3]) -> (f32[2,3]) {
  %0 = constant {value=1.0} : f32[]
  %1 = broadcast_to %0 {shape=(2,3)} : f32[2,3]
  %2 = mul %0, %x : f32[2,3]
  %3 = neg %x : f32[2,3]
  return %3
}
"""


# ---- pass contract ----------------------------------------------------------------------------

def test_new_ops_keep_location_and_device():
    assert run("""func @f(%x: f32[2,3]) -> (f32[2,3]) {
  %0 = transpose %x {perm=(1,0)} : f32[3,2] @cpu:1    # a.py:1
  %1 = reshape %0 {shape=(6,)} : f32[6] @cpu:1        # a.py:2
  %2 = reshape %1 {shape=(2,3)} : f32[2,3] @cpu:2     # a.py:3
  return %2
}
""") == """func @f(%x: f32[2,3]) -> (f32[2,3]) {
  %0 = transpose %x {perm=(1,0)} : f32[3,2] @cpu:1          # a.py:1
  %1 = reshape %0 {shape=(6,)} : f32[6] @cpu:1              # a.py:2
  %2 = reshape %0 {shape=(2,3)} : f32[2,3] @cpu:2           # a.py:3
  %3 = reshape %1 {shape=(2,3)} : f32[2,3] @cpu:2           # a.py:3
  return %2
}
"""


def test_dead_ops_are_left_alone():
    # Nothing uses %1 or %3: no new ops are built for them and nothing is erased.
    _unchanged("""func @f(%x: f32[2,3]) -> (f32[2,3]) {
  %0 = transpose %x {perm=(1,0)} : f32[3,2]
  %1 = transpose %0 {perm=(1,0)} : f32[2,3]
  %2 = constant {value=1.0} : f32[]
  %3 = mul %x, %2 : f32[2,3]
  return %x
}
""")


def test_impure_ops_are_kept_and_not_merged():
    assert run("""func @f(%k: i32[2]) -> (f32[3], f32[3]) {
  %0 = random_uniform %k {shape=(3,), dtype=f32} : f32[3]
  %1 = random_uniform %k {shape=(3,), dtype=f32} : f32[3]
  %2 = neg %0 : f32[3]
  %3 = neg %2 : f32[3]
  return %3, %1
}
""") == """func @f(%k: i32[2]) -> (f32[3], f32[3]) {
  %0 = random_uniform %k {shape=(3,), dtype=f32} : f32[3]
  %1 = random_uniform %k {shape=(3,), dtype=f32} : f32[3]
  %2 = neg %0 : f32[3]
  %3 = neg %2 : f32[3]
  return %0, %1
}
"""


def test_long_chains_terminate():
    lines = ["func @f(%x: f32[2,3]) -> (f32[2,3]) {"]
    prev, shape = "%x", (2, 3)
    for i in range(200):
        shape = shape[::-1]
        lines.append(f"  %{i} = transpose {prev} {{perm=(1,0)}} : f32[{shape[0]},{shape[1]}]")
        prev = f"%{i}"
    lines += [f"  return {prev}", "}", ""]
    fn = parse("\n".join(lines))
    simplify(fn)
    verify(fn)
    assert fn.returns[0] is fn.args[0]


def test_ops_in_nested_blocks_are_simplified_in_place():
    # The fusion op itself is kept; its block's ops are rewritten inside the block and
    # the block's returns follow the replacements.
    assert run("""func @f(%x: f32[2,3]) -> (f32[2,3], f32[2,3]) {
  %0 = transpose %x {perm=(1,0)} : f32[3,2]
  %1 = transpose %0 {perm=(1,0)} : f32[2,3]
  %2, %3 = fusion %1, %x {name="k"} : f32[2,3], f32[2,3] {
    ^(%4: f32[2,3], %5: f32[2,3])
    %6 = neg %4 : f32[2,3]
    %7 = neg %6 : f32[2,3]
    %8 = constant {value=1.0} : f32[]
    %9 = mul %5, %8 : f32[2,3]
    %10 = add %7, %9 : f32[2,3]
    return %7, %10
  }
  return %2, %3
}
""") == """func @f(%x: f32[2,3]) -> (f32[2,3], f32[2,3]) {
  %0 = transpose %x {perm=(1,0)} : f32[3,2]
  %1 = transpose %0 {perm=(1,0)} : f32[2,3]
  %2, %3 = fusion %x, %x {name="k"} : f32[2,3], f32[2,3] {
    ^(%4: f32[2,3], %5: f32[2,3])
    %6 = neg %4 : f32[2,3]
    %7 = neg %6 : f32[2,3]
    %8 = constant {value=1.0} : f32[]
    %9 = mul %5, %8 : f32[2,3]
    %10 = add %4, %5 : f32[2,3]
    return %4, %10
  }
  return %2, %3
}
"""


# ---- properties on random programs ---------------------------------------------------------------

_DTYPES = ["bool", "i32", "i64", "f16", "f32", "f64"]
_BINARY = ["add", "sub", "mul", "div", "pow", "maximum", "minimum", "logical_and", "logical_or",
           "logical_xor", "eq", "lt", "ge", "mod"]
_CONST_VALUES = [0, -0.0, 1, True, False, 2, -1.0, np.nan]


@st.composite
def ir_programs(draw):
    """A random Function rich in the patterns simplify looks for."""
    base = draw(st.sampled_from([(2, 3), (3,), (), (1, 3), (2, 1, 3)]))
    main = draw(st.sampled_from(_DTYPES))
    n_in = draw(st.integers(1, 3))
    arg_types = [TensorType(draw(st.sampled_from([base, base[-1:], ()])),
                            draw(st.sampled_from([main, main, *_DTYPES]))) for _ in range(n_in)]
    fn, b = new_function("p", arg_types)
    pool: list[Value] = list(fn.args)

    def const(value, dtype, shape):
        with np.errstate(all="ignore"):
            arr = np.full(shape, value, dtype=np.float64 if isinstance(value, float) else None)
            return b.op("constant", value=arr.astype(dtype.np))

    for _ in range(draw(st.integers(1, 14))):
        # Mostly the newest value, so chains (neg of neg, cast of cast, ...) are common.
        x = pool[-1] if draw(st.integers(0, 2)) else draw(st.sampled_from(pool))
        kind = draw(st.sampled_from(["const_binary", "const_binary", "binary", "unary", "cast", "transpose",
                                     "reshape", "broadcast", "slice", "select", "reduce", "elementwise_bcast"]))
        try:
            if kind == "const_binary":
                shape = draw(st.sampled_from([(), x.shape, x.shape[-1:], (2, *x.shape)]))
                c = const(draw(st.sampled_from(_CONST_VALUES)), x.dtype, shape)
                args = [x, c] if draw(st.booleans()) else [c, x]
                v = b.op(draw(st.sampled_from(_BINARY)), *args)
            elif kind == "binary":
                same = [v for v in pool if v.dtype == x.dtype]
                y = draw(st.sampled_from([x, x, *same]))
                v = b.op(draw(st.sampled_from(_BINARY)), x, y)
            elif kind == "unary":
                v = b.op(draw(st.sampled_from(["neg", "logical_not", "abs"])), x)
            elif kind == "cast":
                v = b.op("cast", x, dtype=draw(st.sampled_from(_DTYPES)))
            elif kind == "transpose":
                v = b.op("transpose", x, perm=tuple(draw(st.permutations(range(x.type.ndim)))))
            elif kind == "reshape":
                options = [("reshape", {"shape": (x.type.size,)}), ("reshape", {"shape": x.shape}),
                           ("reshape", {"shape": (1, *x.shape)}), ("expand_dims", {"axes": (0,)}),
                           ("squeeze", {"axes": tuple(i for i, d in enumerate(x.shape) if d == 1)})]
                name, attrs = draw(st.sampled_from(options))
                v = b.op(name, x, **attrs)
            elif kind == "broadcast":
                shape = draw(st.sampled_from([x.shape, (2, *x.shape),
                                              tuple(3 if d == 1 else d for d in x.shape)]))
                v = b.op("broadcast_to", x, shape=shape)
            elif kind == "slice":
                start, size, step = [], [], []
                for d in x.shape:
                    s0, n, s = draw(st.sampled_from([(0, d, 1), (d - 1, d, -1), (d - 1, 1, 1),
                                                     (0, (d + 1) // 2, 2), (d - 1, (d + 1) // 2, -2)]))
                    start.append(s0)
                    size.append(n)
                    step.append(s)
                v = b.op("slice", x, start=tuple(start), size=tuple(size), step=tuple(step))
            elif kind == "select":
                bools = [v for v in pool if v.dtype.is_bool]
                p = draw(st.sampled_from([*bools, None, None]))
                if p is None:
                    p = const(draw(st.booleans()), from_short("bool"), draw(st.sampled_from([(), x.shape])))
                same = [v for v in pool if v.dtype == x.dtype]
                y = draw(st.sampled_from([x, *same]))
                v = b.op("select", p, x, y) if draw(st.booleans()) else b.op("select", p, y, x)
            elif kind == "reduce":
                axes = draw(st.sampled_from([(), (0,)] if x.type.ndim else [()]))
                name = draw(st.sampled_from(["reduce_sum", "reduce_prod", "reduce_max", "reduce_min", "reduce_any"]))
                v = b.op(name, x, axes=axes, keepdims=draw(st.booleans()))
            else:  # elementwise op on a broadcast operand
                bc = b.op("broadcast_to", x, shape=(2, *x.shape))
                same = [v for v in pool if v.dtype == x.dtype]
                v = b.op(draw(st.sampled_from(_BINARY)), bc, draw(st.sampled_from(same)))
        except ShapeError:
            continue
        pool.append(v)
    new = pool[n_in:] or pool
    fn.body.set_returns([draw(st.sampled_from(new)) for _ in range(draw(st.integers(1, 3)))])
    verify(fn)
    return fn


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ir_programs(), st.integers(0, 2**31 - 1))
def test_random_ir_programs_keep_their_results(fn, seed):
    original = fn.clone()
    simplify(fn)
    verify(fn)
    _check_same_results(original, fn, seed)
    once = str(fn)
    assert str(simplify(fn)) == once


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs(), st.integers(0, 2**31 - 1))
def test_random_traced_programs_keep_their_results(program, seed):
    short, in_shapes, steps, n_out = program
    rng = np.random.default_rng(seed)
    inputs = [_random_input(TensorType(s, short), rng) for s in in_shapes]
    fn = fj.function(lambda *xs: run_program(steps, xs, n_out, traced=True)).ir(*inputs)
    original = fn.clone()
    simplify(fn)
    verify(fn)
    _check_same_results(original, fn, seed)
    once = str(fn)
    assert str(simplify(fn)) == once


@pytest.mark.parametrize("dtype", ["f16", "f32", "f64"])
def test_float_identities_exact_on_special_values(dtype):
    # Every special float through each float identity the pass uses, checked against NumPy.
    x = np.array([0.0, -0.0, np.nan, np.inf, -np.inf, 1.5, -1e-3, 6e4]).astype(from_short(dtype).np)
    text = f"""func @f(%x: {dtype}[8]) -> ({dtype}[8], {dtype}[8], {dtype}[8], {dtype}[8], {dtype}[8], {dtype}[8]) {{
  %0 = constant {{value=-0.0}} : {dtype}[]
  %1 = add %x, %0 : {dtype}[8]
  %2 = constant {{value=0.0}} : {dtype}[]
  %3 = sub %x, %2 : {dtype}[8]
  %4 = constant {{value=1.0}} : {dtype}[]
  %5 = mul %4, %x : {dtype}[8]
  %6 = div %x, %4 : {dtype}[8]
  %7 = pow %x, %4 : {dtype}[8]
  %8 = maximum %x, %x : {dtype}[8]
  return %1, %3, %5, %6, %7, %8
}}
"""
    fn = parse(text)
    want = interpret(fn, [x])
    simplify(fn)
    assert all(r is fn.args[0] for r in fn.returns)
    for w in want:
        assert _same(w, x)


# ---- the declarations the rules read ----------------------------------------------------------

def _specials(d) -> np.ndarray:
    """Every special value of dtype ``d``: signed zeros, NaN, infinities, extreme ints."""
    if d.is_bool:
        return np.array([False, True])
    return _pool(d)


def _declared(fact: str) -> list:
    return [pytest.param(p, id=p.name) for p in all_primitives() if getattr(p, fact)]


@pytest.mark.parametrize("prim", [pytest.param(p, id=p.name) for p in all_primitives()
                                  if p.identity is not None])
def test_declared_identities_hold_on_special_values(prim):
    assert prim.arity == 2
    for d in prim.dtypes:
        if d.is_complex:
            continue  # the rule applies to real dtypes only
        x = _specials(d)
        e = np.asarray(prim.identity).astype(d.np)
        assert _same(prim.impl(x, e), x), (prim, d)
        if prim.commutative:
            assert _same(prim.impl(e, x), x), (prim, d)


@pytest.mark.parametrize("prim", _declared("idempotent"))
def test_declared_idempotence_holds_on_special_values(prim):
    for d in prim.dtypes:
        x = _specials(d)
        assert _same(prim.impl(x, x), x), (prim, d)


@pytest.mark.parametrize("prim", [pytest.param(p, id=p.name) for p in all_primitives()
                                  if p.self_value is not None])
def test_declared_self_values_hold_for_ints_and_bools(prim):
    for d in prim.dtypes:
        if d.is_inexact:
            continue
        x = _specials(d)
        (out,) = prim.infer([TensorType(x.shape, d)] * 2, {})
        want = np.full(x.shape, prim.self_value).astype(out.dtype.np)
        assert _same(prim.impl(x, x), want), (prim, d)


@pytest.mark.parametrize("prim", _declared("involution"))
def test_declared_involutions_hold_on_special_values(prim):
    for d in prim.dtypes:
        x = _specials(d)
        assert _same(prim.impl(prim.impl(x)), x), (prim, d)


@pytest.mark.parametrize("prim", _declared("no_axes_identity"))
def test_declared_no_axes_identities_hold_on_special_values(prim):
    assert prim.kind == "reduction" and "axes" in prim.attrs
    for d in prim.no_axes_identity:
        assert d in prim.dtypes
        x = _specials(d)
        for keepdims in (False, True):
            assert _same(prim.impl(x, axes=(), keepdims=keepdims), x), (prim, d)


def test_roles_the_rules_build_are_declared_once():
    # forward() emits the broadcast primitive and reshape chains emit the reshape one.
    for role in ("broadcast", "row_major_reshape"):
        assert len([p for p in all_primitives() if p.role == role]) == 1, role
    assert all(p.role in ROLES for p in all_primitives() if p.role is not None)
    for p in all_primitives():
        if p.copies_elements:
            assert p.kind == "layout" and p.arity == 1, p


# ---- pads side by side ---------------------------------------------------------------------------
GATES = """func @f(%i: f32[2,3], %g: f32[2,3], %o: f32[2,3]) -> (f32[2,9]) {
  %0 = pad %o {low=(0,6), high=(0,0)} : f32[2,9]
  %1 = pad %g {low=(0,3), high=(0,3)} : f32[2,9]
  %2 = add %0, %1 : f32[2,9]
  %3 = pad %i {low=(0,0), high=(0,6)} : f32[2,9]
  %4 = add %2, %3 : f32[2,9]
  return %4
}
"""


def test_a_sum_of_pads_side_by_side_is_one_concatenation():
    # The gradient of three slices of a row: each element is a piece's value plus +0.0s,
    # kept exactly (-0.0 + 0.0 is +0.0), with no loop over the whole row per piece: one flat
    # concatenate of the three (nested ones lowered to selects that computed every piece's
    # work for every element: the zoo LSTM's gradient step took 8.5 ms, 4.5 flat).
    out = str(prune(parse(run(GATES))))
    assert "pad" not in out and out.count("concatenate") == 1, out
    (join,) = [op for op in parse(out).body.ops if op.name == "concatenate"]
    assert len(join.inputs) == 3 and all(v.type.shape == (2, 3) for v in join.inputs)
    fn = parse(out)
    args = [np.array([[-0.0, 1.5, np.nan], [np.inf, -2.0, 0.0]], np.float32)] * 3
    (got,) = interpret(fn, args)
    assert _same(got, np.concatenate(args, axis=1) + np.float32(0.0))


@pytest.mark.parametrize("change", [
    ("%1 = pad %g {low=(0,3), high=(0,3)}", "%1 = pad %g {low=(0,2), high=(0,4)}"),                 # overlap
    ("%1 = pad %g {low=(0,3), high=(0,3)}", "%1 = pad %g {low=(0,3), high=(0,3), value=1.0}"),      # fills differ
])
def test_pads_that_overlap_or_fill_differently_stay(change):
    text = GATES.replace("%3 = pad %i {low=(0,0), high=(0,6)} : f32[2,9]\n  %4 = add %2, %3 : f32[2,9]\n  return %4",
                         "return %2").replace(*change)
    out = str(prune(parse(run(text))))
    assert out.count("pad") == 2 and "concatenate" not in out, out


def test_a_pad_of_nothing_is_its_input():
    out = run("""func @f(%x: f32[2,3]) -> (f32[2,3]) {
  %0 = pad %x {low=(0,0), high=(0,0)} : f32[2,3]
  return %0
}
""")
    assert "return %x" in out


_CAST_DTYPES = ("bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
                "float16", "float32", "float64", "complex64", "complex128")


def _cast_sources(name: str) -> np.ndarray:
    d = np.dtype(name)
    if d.kind == "b":
        return np.array([False, True])
    if d.kind in "iu":
        info = np.iinfo(d)
        return np.array([info.min, info.min + 1, -1 if info.min else 2, 0, 1, 127, 255, 65535, 2**24 + 1,
                         2**53 + 1, info.max - 1, info.max], dtype=object).clip(info.min, info.max).astype(d)
    x = np.array([0.0, -0.0, 1.0 / 3, -2.5, 1e-30, 1e30, 65504.0, 7e4, np.inf, -np.inf, np.nan])
    with np.errstate(all="ignore"):
        if d.kind == "c":
            x = x + 1j * x[::-1]
        return x.astype(d)


@pytest.mark.parametrize("source", _CAST_DTYPES)
def test_every_cast_chain_gives_numpys_values(source):
    # What the fold of cast(cast(x, d1), d2) must keep: NumPy's two casts, every dtype pair
    # (float -> int is out of it: out-of-range conversions are the platform's, never folded).
    x = _cast_sources(source)
    for middle in _CAST_DTYPES:
        for target in _CAST_DTYPES:
            if np.dtype(source).kind in "fc" and "int" in middle + target:
                continue
            if np.dtype(middle).kind in "fc" and "int" in target:
                continue
            with np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore")   # NumPy's ComplexWarning
                want = x.astype(middle).astype(target)
                got = fj.function(lambda v, m=middle, t=target: fj.astype(fj.astype(v, m), t))(x)
            np.testing.assert_array_equal(got, want, err_msg=f"{source} -> {middle} -> {target}")
