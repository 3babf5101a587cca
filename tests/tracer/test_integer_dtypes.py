"""The array API's integer dtypes (int8/16/32/64, uint8/16/32/64) as NumPy computes them:
wrap-around, division by zero, unsigned compares and shifts, casts from floats, the dtypes
of sums and of true division, and the bitwise functions; compiled on the default backend,
through the interpreter."""

from __future__ import annotations

import numpy as np
import pytest

import flowjit as fj
from flowjit.ir.errors import FlowjitTypeError

INTS = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]


def _ints(rng: np.random.Generator, dtype, shape, nonzero: bool = False) -> np.ndarray:
    info = np.iinfo(dtype)
    # The extremes and small values both: wrap-around lives at the ends.
    pool = np.array(sorted({int(info.min), int(info.min) + 1, int(info.max) - 1, int(info.max), 0, 1, 2, 3, 7,
                            *(v for v in (-1, -2, -7) if v >= info.min)}), dtype=object)
    out = rng.choice(pool, size=shape).astype(dtype)
    if nonzero:
        out[out == 0] = 1
    return out


def _same(got, want) -> None:
    for g, w in zip(got, want, strict=True):
        g, w = np.asarray(g), np.asarray(w)
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, w.dtype, g.shape, w.shape)
        np.testing.assert_array_equal(g, w)


def arithmetic(x, y, z):
    return (x + y, x - y, x * y, -x, abs(x), x // z, x % z, x // y, x % y, x > y, x <= y, x == y,
            fj.maximum(x, y), fj.minimum(x, y), fj.sign(x), x ** 2, x + 1, 3 - x, fj.where(x > y, x, y))


def arithmetic_np(x, y, z):
    return (x + y, x - y, x * y, -x, np.abs(x), x // z, x % z, x // y, x % y, x > y, x <= y, x == y,
            np.maximum(x, y), np.minimum(x, y), np.sign(x), x ** 2, x + 1, 3 - x, np.where(x > y, x, y))


@pytest.mark.parametrize("backend", ["llvm", "interpreter"])
@pytest.mark.parametrize("dtype", INTS, ids=lambda d: np.dtype(d).name)
def test_arithmetic_wraps_and_divides_as_numpy(dtype, backend):
    rng = np.random.default_rng(np.dtype(dtype).itemsize)
    x, y, z = _ints(rng, dtype, (4, 6)), _ints(rng, dtype, (6,)), _ints(rng, dtype, (4, 6), nonzero=True)
    with np.errstate(all="ignore"):
        want = arithmetic_np(x, y, z)  # x // y has zeros: NumPy gives 0
    _same(fj.function(arithmetic, backend=backend)(x, y, z), want)


@pytest.mark.parametrize("dtype", INTS, ids=lambda d: np.dtype(d).name)
def test_reductions_take_numpys_dtypes(dtype):
    x = _ints(np.random.default_rng(5), dtype, (3, 5))

    def f(x):
        return (fj.sum(x), fj.sum(x, axis=0), fj.prod(x, axis=1), fj.max(x), fj.min(x, axis=0), fj.argmax(x),
                fj.argmin(x, axis=1), fj.mean(x), fj.cumsum(x, axis=1), x / x.max())
    with np.errstate(all="ignore"):
        want = (np.sum(x), np.sum(x, axis=0), np.prod(x, axis=1), np.max(x), np.min(x, axis=0), np.argmax(x),
                np.argmin(x, axis=1), np.mean(x), np.cumsum(x, axis=1), x / x.max())
    got = fj.function(f)(x)
    # NumPy's mean of int64 extremes loses bits in its float64 sum; the rest is exact.
    np.testing.assert_allclose(got[7], want[7], rtol=1e-12)
    _same(got[:7] + got[8:9], want[:7] + want[8:9])
    np.testing.assert_allclose(got[9], want[9], rtol=1e-15)
    assert got[9].dtype == np.float64  # true division of ints is float64, as NumPy's


@pytest.mark.parametrize("interpret", [False, True])
@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int16], ids=lambda d: np.dtype(d).name)
def test_mean_in_an_integer_dtype_sums_in_it(dtype, interpret):
    # NumPy's mean(x, dtype=int8) sums in int8, wrapping, then divides by the count in
    # float64 (200 elements: a count in int8 would wrap too) and casts back.
    x = (np.arange(200) % 120).astype(np.int8)
    got = fj.function(lambda x: (fj.mean(x, dtype=dtype), fj.mean(x.reshape(8, 25), axis=1, dtype=dtype)),
                      interpret=interpret)(x)
    _same(got, (np.mean(x, dtype=dtype), np.mean(x.reshape(8, 25), axis=1, dtype=dtype)))


@pytest.mark.parametrize("backend", ["llvm", "interpreter"])
def test_casts_between_every_pair_and_from_floats_as_numpy(backend):
    # Floats in the target's range truncate toward zero; out of range (NaN, inf, -1.0 to
    # unsigned) the standard leaves it undefined, and NumPy's own answer depends on which
    # of its SIMD loops converts the element, so only in-range values are compared.
    names = [np.dtype(d).name for d in INTS]

    def in_range(n):
        info = np.iinfo(n)
        return np.array([0.0, 1.7, 0.99, float(info.max) * 0.75, float(info.min) * 0.75, 100.5, -100.5 if info.min
                         else 55.25], np.float64)
    floats = [in_range(n) for n in names]

    def f(*xs):
        fl, ints = xs[:len(names)], xs[len(names):]
        return [x.astype(n) for x, n in zip(fl, names)] + \
               [x.astype(np.float32).astype(n) for x, n in zip(fl, names) if np.iinfo(n).bits < 64] + \
               [i.astype(n) for i in ints for n in names]
    ints = [_ints(np.random.default_rng(k), d, (9,)) for k, d in enumerate(INTS)]
    want = f(*floats, *ints)
    _same(fj.function(f, backend=backend)(*floats, *ints), want)


def test_floats_of_narrow_ints_are_numpys_smallest_float():
    for dtype, want in ((np.int8, np.float16), (np.uint8, np.float16), (np.int16, np.float32),
                        (np.uint16, np.float32), (np.uint32, np.float64), (np.int64, np.float64)):
        x = np.arange(1, 5, dtype=dtype)
        got = fj.function(lambda x: (fj.exp(x), fj.sqrt(x), x / 2, x * 0.5))(x)
        assert [g.dtype for g in got] == [np.exp(x).dtype, np.sqrt(x).dtype, (x / 2).dtype, (x * 0.5).dtype]
        assert got[0].dtype == want
        np.testing.assert_allclose(got[0], np.exp(x), rtol=1e-3)


def test_weak_python_ints_keep_the_array_dtype_and_refuse_what_it_cannot_hold():
    x = np.array([250, 3], np.uint8)
    got = fj.function(lambda x: (x + 10, x * 2, x - 1))(x)
    with np.errstate(all="ignore"):
        _same(got, (x + 10, x * 2, x - 1))
    with pytest.raises(OverflowError, match="Python integer -1 out of bounds for uint8"):
        fj.function(lambda x: x + -1)(x)
    with pytest.raises(OverflowError, match="out of bounds for int8"):
        fj.add(np.int8([1]), 200)


def test_mixed_signedness_promotes_as_numpy():
    a, b = np.array([200, 7], np.uint8), np.array([-3, 4], np.int8)
    u64, i64 = np.array([2 ** 63 + 5], np.uint64), np.array([-1], np.int64)
    got = fj.function(lambda a, b, u, i: (a + b, a * b, u + i))(a, b, u64, i64)
    _same(got, (a + b, a * b, u64 + i64))
    assert got[0].dtype == np.int16 and got[2].dtype == np.float64


def test_gradient_flows_through_an_integer_index_program():
    # Ints are constants for autodiff: the float path around them differentiates.
    w = np.linspace(-1, 1, 6).astype(np.float32)
    k = np.array([3, 0, 5, 1], np.uint8)

    def loss(w, k):
        return fj.sum(fj.take(w, k.astype(np.int64)) * k.astype(np.float32))
    g = fj.grad(loss)(w, k)
    want = np.zeros(6, np.float32)
    np.add.at(want, k, k.astype(np.float32))
    np.testing.assert_allclose(g, want)


# ---- bitwise -------------------------------------------------------------------------------
def bitwise(x, y, s):
    return (x & y, x | y, x ^ y, ~x, x << s, x >> s, fj.bitwise_and(x, 6), fj.bitwise_left_shift(x, 1),
            fj.bitwise_right_shift(x, 2), fj.bitwise_invert(y), np.bitwise_or(x, y), np.left_shift(x, s),
            np.invert(x))


def bitwise_np(x, y, s):
    return (x & y, x | y, x ^ y, ~x, x << s, x >> s, x & 6, x << 1, x >> 2, ~y, x | y, x << s, ~x)


@pytest.mark.parametrize("backend", ["llvm", "interpreter"])
@pytest.mark.parametrize("dtype", INTS, ids=lambda d: np.dtype(d).name)
def test_bitwise_functions_and_operators(dtype, backend):
    rng = np.random.default_rng(11)
    x, y = _ints(rng, dtype, (3, 7)), _ints(rng, dtype, (7,))
    bits = 8 * np.dtype(dtype).itemsize
    # Shifts by 0, 1, width - 1, the width, past it, and (signed) negative: NumPy gives 0
    # (or -1 for a negative number shifted right) from the width on and below zero.
    amounts = [0, 1, bits - 1, bits, bits + 3, 2 * bits] + ([-1] if np.dtype(dtype).kind == "i" else [5])
    s = np.array(amounts, dtype)
    with np.errstate(all="ignore"):
        want = bitwise_np(x, y, s)
    _same(fj.function(bitwise, backend=backend)(x, y, s), want)


def test_bitwise_of_bools_is_logical_and_shifts_of_bools_are_int8():
    a, b = np.array([True, False, True]), np.array([True, True, False])
    got = fj.function(lambda a, b: (a & b, a | b, a ^ b, ~a, fj.left_shift(a, b), a // b, fj.square(a)))(a, b)
    with np.errstate(all="ignore"):
        _same(got, (a & b, a | b, a ^ b, ~a, np.left_shift(a, b), a // b, np.square(a)))


def test_bitwise_of_floats_is_an_error_naming_the_function():
    x = np.ones(3, np.float32)
    with pytest.raises(FlowjitTypeError, match=r"bitwise_xor: x1 \(float32\) and x2 \(int64\) promote to float32.*"
                                               r"test_integer_dtypes.py"):
        fj.function(lambda x: fj.bitwise_xor(x, 3))(x)
    with pytest.raises(FlowjitTypeError, match=r"invert: x is float32.*takes integer or bool"):
        fj.function(lambda x: ~x)(x)


def test_integer_state_round_trips_through_a_checkpoint(tmp_path):
    values = {"counts": np.array([0, 255, 7], np.uint8), "ids": np.array([2 ** 63 + 1], np.uint64),
              "small": np.int16(-300)}
    fj.checkpoint.save(tmp_path / "ck.safetensors", {k: fj.Variable(v, name=k) for k, v in values.items()})
    fresh = {k: fj.Variable(np.zeros_like(v), name=k) for k, v in values.items()}
    fj.checkpoint.restore(tmp_path / "ck.safetensors", fresh)
    for k, want in values.items():
        got = np.asarray(fresh[k])
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)
