"""Dtype promotion: NumPy 2's rules for arrays, weak Python scalars as in NEP 50 / JAX."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from flowjit.ir.dtypes import ALL_DTYPES, bool_, dtype, float16, float32, float64, int32, int64, promote_types


@pytest.mark.parametrize("a, b", list(itertools.product(ALL_DTYPES, ALL_DTYPES)))
def test_strong_promotion_is_numpys(a, b):
    assert promote_types([a, b], [False, False]).np == np.result_type(a.np, b.np)


@pytest.mark.parametrize("arr", ALL_DTYPES)
@pytest.mark.parametrize("scalar", [True, 1, 1.5])
def test_weak_scalar_promotion_matches_numpy_2(arr, scalar):
    # NumPy 2 (NEP 50) treats Python scalars as weak: the oracle for our rule.
    expected = (np.zeros(1, arr.np) + scalar).dtype if not (arr == bool_ and type(scalar) is bool) else np.bool_
    if arr == bool_ and type(scalar) is bool:
        expected = np.result_type(np.bool_, np.bool_)
    scalar_dtype = {bool: bool_, int: int64, float: float64}[type(scalar)]
    assert promote_types([arr, scalar_dtype], [False, True]).np == expected


def test_examples_from_the_issue():
    assert promote_types([float32, float64], [False, True]) == float32   # f32 array * 2.0
    assert promote_types([int32, int64], [False, True]) == int32         # i32 array + 1
    assert promote_types([int32, float64], [False, True]) == float64     # i32 array * 2.5
    assert promote_types([float16, int64], [False, True]) == float16
    assert promote_types([int64, float64], [True, True]) == float64      # two weak scalars


def test_dtype_coercion_and_errors():
    assert dtype("f32") is float32 and dtype(np.float32) is float32 and dtype("int64") is int64
    assert dtype(np.uint8).short == "u8" and dtype("i16").name == "int16"
    assert dtype(np.complex64).short == "c64" and dtype("c128").name == "complex128"
    with pytest.raises(TypeError, match="float128 is not supported"):
        dtype(np.longdouble)
    with pytest.raises(TypeError, match="not a dtype"):
        dtype(object())


def test_dtype_equals_numpy_spellings():
    import flowjit as fj
    assert fj.float32 == np.float32 and fj.float32 == np.dtype("float32") and fj.float32 == "float32"
    assert fj.int64 != np.int32 and fj.bool_ != None  # noqa: E711
    assert np.dtype(fj.float16) == np.float16
    assert len({fj.float32, dtype("f32"), float32}) == 1


def test_a_weak_int_keeps_an_unsigned_or_narrow_array_dtype():
    from flowjit.ir.dtypes import int8, uint8, uint64
    assert promote_types([uint8, int64], [False, True]) == uint8       # u8 array + 1 (NEP 50)
    assert promote_types([int8, float64], [False, True]) == float64    # i8 array * 2.5
    assert promote_types([uint64, int64], [False, False]) == float64   # NumPy: no integer holds both
