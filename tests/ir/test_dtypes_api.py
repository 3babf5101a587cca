"""A dtype compared with anything: NumPy's spellings of it are equal, everything else is
simply unequal (never an exception), as the array API standard asks of ``==``; called on a
value, a dtype converts it, as NumPy's scalar types do."""

from __future__ import annotations

import numpy as np
import pytest

import flowjit as fj
from flowjit.ir.dtypes import ALL_DTYPES


@pytest.mark.parametrize("other", ["x: y, z", "not a dtype", "", "f32, i4", "(2,)f4", None, 3, 2.5,
                                   object(), [np.float32], {"names": ["a"], "formats": ["f4"]}])
def test_a_dtype_is_unequal_to_what_is_not_a_dtype(other):
    for d in ALL_DTYPES:
        assert (d == other) is False
        assert (d != other) is True


def test_numpy_spellings_still_compare_equal():
    assert fj.float32 == np.float32 and fj.float32 == np.dtype("float32")
    assert fj.float32 == "float32" and fj.float32 == "f32" and fj.float32 == "f4"
    assert fj.float64 == float and fj.int64 == int and fj.bool_ == bool  # noqa: E721 - the comparison under test
    assert fj.int32 != np.int64 and fj.float32 != "float64"
    assert [d for d in ALL_DTYPES if d == "int32"] == [fj.int32]


def test_a_dtype_converts_what_it_is_called_on_as_numpys_scalar_types():
    # fj.int64(x) as np.int64(x) and jnp.int64(x): truncation toward zero, lists, arrays.
    assert fj.int64(3.7).dtype == np.int64 and int(fj.int64(3.7)) == 3
    np.testing.assert_array_equal(fj.float32([1, 2]), np.array([1, 2], np.float32))
    assert fj.float32([1, 2]).dtype == np.float32
    assert fj.uint8(np.array([1.9, 255.0])).tolist() == [1, 255]


def test_a_dtype_called_on_a_traced_value_stays_traced_and_differentiable():
    # autograd's test_cast_to_int: integer indices cast from a float column, inside grad.
    def f(w):
        idx = fj.int64(w[:, -1])
        assert idx.dtype == fj.int64
        return fj.sum(w[:, :-1][idx] * fj.float64(2))
    w = np.concatenate([np.arange(12.0).reshape(4, 3), np.array([[1.0], [1.0], [3.0], [0.0]])], axis=1)
    want = np.zeros_like(w)
    for i in (1, 1, 3, 0):
        want[i, :-1] += 2
    np.testing.assert_array_equal(fj.grad(f)(w), want)
    assert float(fj.function(f)(w)) == 2 * float(np.sum(w[:, :-1][[1, 1, 3, 0]]))
