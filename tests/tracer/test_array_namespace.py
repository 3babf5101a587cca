"""The array API standard's dtype functions and namespace inspection: finfo, iinfo,
result_type, can_cast, isdtype, the constants, __array_namespace_info__, and a traced
array naming flowjit as its namespace."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

import flowjit as fj
from flowjit.ir.dtypes import ALL_DTYPES, FLOAT_DTYPES, INT_DTYPES

PAIRS = list(itertools.product(ALL_DTYPES, ALL_DTYPES))
SCALARS = [True, 1, 1.5]


def test_finfo_of_a_complex_dtype_is_its_parts():
    assert fj.finfo(fj.complex64).dtype is fj.float32 and fj.finfo(np.complex128).eps == np.finfo(np.float64).eps


def test_finfo_is_numpys():
    for d in FLOAT_DTYPES:
        info, ref = fj.finfo(d), np.finfo(d.np)
        assert (info.bits, info.eps, info.max, info.min, info.smallest_normal) == \
            (ref.bits, ref.eps, ref.max, ref.min, ref.smallest_normal)
        assert info.dtype is d and type(info.eps) is float and type(info.bits) is int
    assert fj.finfo(np.zeros(2, np.float32)).dtype is fj.float32
    assert fj.finfo("float16").bits == 16 and fj.finfo(np.float64).eps == np.finfo(np.float64).eps


def test_iinfo_is_numpys():
    for d in INT_DTYPES:
        info, ref = fj.iinfo(d), np.iinfo(d.np)
        assert (info.bits, info.max, info.min) == (ref.bits, ref.max, ref.min)
        assert info.dtype is d and type(info.max) is int
    assert fj.iinfo(np.arange(3)).dtype is fj.int64


def test_info_of_a_traced_array():
    @fj.function
    def f(x, i):
        return x * fj.finfo(x).eps + fj.iinfo(i).bits

    np.testing.assert_allclose(f(np.ones(2, np.float32), np.ones(2, np.int32)), 32 + np.finfo(np.float32).eps)


def test_info_of_a_wrong_dtype_names_the_function_and_what_is_allowed():
    with pytest.raises(TypeError, match=r"finfo: argument 'type' has dtype int32; allowed: float16, float32, "
                                        r"float64, complex64, complex128 \(at .*test_array_namespace.py"):
        fj.finfo(fj.int32)
    with pytest.raises(TypeError, match="iinfo: argument 'type' has dtype float32; allowed: int8, int16, int32"):
        fj.iinfo(np.zeros(1, np.float32))
    with pytest.raises(TypeError, match="iinfo: argument 'type': dtype float128 is not supported"):
        fj.iinfo(np.longdouble)


@pytest.mark.parametrize("a, b", PAIRS)
def test_result_type_and_can_cast_are_numpys_for_two_dtypes(a, b):
    assert fj.result_type(a, b) == np.result_type(a.np, b.np)
    assert fj.result_type(np.zeros(1, a.np), b) == np.result_type(a.np, b.np)
    assert fj.can_cast(a, b) == np.can_cast(a.np, b.np)
    assert fj.can_cast(np.zeros(1, a.np), b) == np.can_cast(a.np, b.np)


def test_result_type_is_what_operations_give_compiled_and_interpreted():
    # Every pair of dtypes and every dtype with each weak Python scalar, in one compile.
    arrays = [np.ones(2, d.np) for d in ALL_DTYPES]

    def sums(*xs):
        return [x + y for x, y in itertools.product(xs, xs)] + [x + s for x in xs for s in SCALARS]

    expected = [fj.result_type(a, b) for a, b in PAIRS] + [fj.result_type(a, s) for a in arrays for s in SCALARS]
    for run in (fj.function(sums), fj.function(sums, interpret=True)):
        assert [fj.dtype(r.dtype) for r in run(*arrays)] == expected
    assert fj.result_type(np.zeros(1, np.float32), 2.0) == fj.float32          # weak scalars
    assert fj.result_type(np.zeros(1, np.int32), 1.5) == fj.float64
    assert fj.result_type(fj.int32, 1, fj.int64) == fj.int64
    assert fj.result_type(1, 2.0) == fj.float64                                # NumPy's, too


def test_result_type_of_traced_values_and_through_numpy():
    @fj.function
    def f(x, s):
        assert fj.result_type(x, s) == fj.float32        # s is a traced Python float: weak
        assert np.result_type(x, 1) == fj.float32        # NumPy's function on a traced array
        assert np.can_cast(x, fj.float64) and not np.can_cast(x, fj.int64)
        return x + s

    assert f(np.ones(2, np.float32), 2.0).dtype == np.float32


def test_result_type_errors():
    with pytest.raises(TypeError, match="result_type: at least one array or dtype is required"):
        fj.result_type()
    with pytest.raises(TypeError, match=r"result_type: argument 'arrays_and_dtypes\[1\]': dtype float128 is not"):
        fj.result_type(fj.int32, np.longdouble)
    with pytest.raises(TypeError, match=r"arrays_and_dtypes\[0\] has type object"):
        fj.result_type(object())


def test_isdtype_kinds():
    expected = {
        "bool": {"bool"}, "signed integer": {"int8", "int16", "int32", "int64"},
        "unsigned integer": {"uint8", "uint16", "uint32", "uint64"},
        "integral": {"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"},
        "real floating": {"float16", "float32", "float64"}, "complex floating": {"complex64", "complex128"},
        "numeric": {"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16", "float32",
                    "float64", "complex64", "complex128"},
    }
    for kind, names in expected.items():
        assert {d.name for d in ALL_DTYPES if fj.isdtype(d, kind)} == names
        for d in ALL_DTYPES:  # NumPy's isdtype agrees
            assert fj.isdtype(d, kind) == np.isdtype(d.np, kind)
    assert fj.isdtype(fj.int32, ("bool", fj.int32)) and not fj.isdtype(fj.int64, (fj.int32, "bool"))
    assert fj.isdtype(fj.float32, fj.float32) and fj.isdtype(np.dtype("float32"), fj.float32)
    assert fj.isdtype(np.uint8, "unsigned integer") and fj.isdtype(np.complex64, "numeric")


def test_isdtype_errors():
    with pytest.raises(TypeError, match=r"isdtype: kind 'floating' is neither a dtype nor a kind name; "
                                        r"allowed: 'bool', 'signed integer'"):
        fj.isdtype(fj.float32, "floating")
    with pytest.raises(TypeError, match=r"isdtype: argument 'dtype' is an array \(ndarray\); pass its dtype"):
        fj.isdtype(np.zeros(2), "numeric")


def test_constants():
    assert (fj.e, fj.pi, fj.inf) == (math.e, math.pi, math.inf) and math.isnan(fj.nan)
    assert fj.newaxis is None and np.zeros(3)[fj.newaxis].shape == (1, 3)
    assert fj.__array_api_version__ == "2024.12"
    assert fj.bool is fj.bool_


def test_namespace_info():
    info = fj.__array_namespace_info__()
    assert info.capabilities() == {"boolean indexing": False, "data-dependent shapes": False,
                                   "max dimensions": 64}
    assert info.default_device() == "cpu:0" and info.default_device() in info.devices()
    assert list(info.dtypes()) == ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                                   "float32", "float64", "complex64", "complex128"]
    assert info.dtypes(kind="real floating") == {"float32": fj.float32, "float64": fj.float64}
    assert info.dtypes(kind=("bool", "signed integer")) == {"bool": fj.bool_, "int8": fj.int8, "int16": fj.int16,
                                                            "int32": fj.int32, "int64": fj.int64}
    assert info.dtypes(kind="complex floating", device="cpu:0") == {"complex64": fj.complex64,
                                                                    "complex128": fj.complex128}
    assert info.default_dtypes() == {"real floating": fj.float64, "complex floating": fj.complex128,
                                     "integral": fj.int64, "indexing": fj.int64}
    with fj.device("cpu:0"):
        assert info.default_device() == "cpu:0"
    with pytest.raises(TypeError, match="dtypes: kind 'float'"):
        info.dtypes(kind="float")
    with pytest.raises(fj.DeviceError):
        info.dtypes(device="tpu:0")


def test_a_traced_array_names_flowjit_as_its_namespace():
    def standard_code(x):  # written against the standard only
        xp = x.__array_namespace__()
        return xp.where(x > 0, x, xp.zeros_like(x)) * xp.finfo(x.dtype).bits

    f = fj.function(standard_code)
    np.testing.assert_array_equal(f(np.array([-1.0, 2.0], np.float32)), [0.0, 64.0])
    with pytest.raises(TypeError, match="api_version '2099.12' is not supported"):
        fj.function(lambda x: x.__array_namespace__(api_version="2099.12"))(np.ones(1))


def test_array_api_compat_finds_flowjit_for_a_traced_array():
    compat = pytest.importorskip("array_api_compat")

    @fj.function
    def f(x):
        xp = compat.array_namespace(x)
        assert xp is fj
        return xp.sum(x * xp.asarray(2.0, dtype=x.dtype)) / xp.finfo(x.dtype).bits

    assert f(np.ones(4, np.float32)) == 0.25
