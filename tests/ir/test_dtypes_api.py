"""A dtype compared with anything: NumPy's spellings of it are equal, everything else is
simply unequal (never an exception), as the array API standard asks of ``==``."""

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
