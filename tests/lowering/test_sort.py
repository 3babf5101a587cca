"""Sorts as native kernels (``_Lowering.merge_sort``): ``fj.sort``, ``fj.argsort`` and
``fj.top_k`` compiled into the one native program, against NumPy's stable sort and the
interpreter (NumPy's references), for every dtype, axis, NaN and run of equal elements."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import flowjit as fj
from tests.registry.cases_decompositions import _argsort_expect

DTYPES = (np.float32, np.float64, np.float16, np.int32, np.int64, np.uint8, np.bool_, np.complex64, np.complex128)


def _data(rng, shape, dtype):
    if np.dtype(dtype).kind == "c":   # ties in either part; NaN in a real part, an imaginary part, both
        x = (rng.integers(-2, 3, size=shape) + 1j * rng.integers(-2, 3, size=shape)).astype(dtype)
        for k, v in enumerate((complex(np.nan, 1), complex(1, np.nan), complex(np.nan, np.nan))):
            if x.size > 3 * k + 2:
                x.flat[rng.integers(0, x.size)] = v
        return x
    if np.dtype(dtype).kind == "f":
        x = rng.integers(-3, 4, size=shape).astype(dtype) / 2   # many ties
        if x.size > 2:
            x.flat[rng.integers(0, x.size, size=max(1, x.size // 5))] = np.nan
        return x
    return rng.integers(0, 2 if dtype is np.bool_ else 5, size=shape).astype(dtype)


def _native(f, *args) -> bool:
    return "native driver" in f.kernels(*args)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape,axis", [((3, 17), 0), ((2, 9, 4), 1), ((2, 0), 1), ((1003,), 0)])
@pytest.mark.parametrize("descending", [False, True], ids=["asc", "desc"])
def test_sort_and_argsort_compiled_match_a_stable_sort(dtype, shape, axis, descending):
    x = _data(np.random.default_rng(sum(shape) + axis), shape, dtype)
    f = fj.function(lambda a: (fj.argsort(a, axis=axis, descending=descending),
                               fj.sort(a, axis=axis, descending=descending)))
    order, values = f(x)
    want = _argsort_expect(axis, descending)(x)
    np.testing.assert_array_equal(order, want)
    np.testing.assert_array_equal(values, np.take_along_axis(x, want, axis))
    assert values.dtype == x.dtype and order.dtype == np.int64
    assert _native(f, x)


def test_complex_sort_is_numpys_order_and_its_gradient_matches_the_interpreter():
    # NumPy (and flowjit) put R + nanj after every R + Rj; JAX's lexicographic order would
    # put 5 + nanj before 7 + 0j.
    nan = np.nan
    x = np.array([7, complex(5, nan), complex(nan, 1), 3 + 2j, complex(nan, nan), 5 + 1j, complex(nan, 0),
                  complex(8, nan), 5 + 1j, complex(-0.0, 3)], np.complex128)
    got = fj.function(lambda a: fj.sort(a))(x)
    np.testing.assert_array_equal(got, np.sort(x))
    assert list(got[:5]) == [complex(-0.0, 3), 3 + 2j, 5 + 1j, 5 + 1j, 7]    # every R + Rj first
    assert got[5].real == 5 and np.isnan(got[5].imag) and got[6].real == 8   # then R + nanj by R
    z = (np.random.default_rng(7).standard_normal((4, 33)) + 1j * np.random.default_rng(8).standard_normal((4, 33)))

    def loss(a):
        return fj.sum(fj.abs(fj.sort(a * (1 + 2j), axis=1)[:, :5]) ** 2)
    g = fj.function(fj.grad(lambda re: loss(re + 0.5j)))(z.real)
    np.testing.assert_allclose(g, fj.function(fj.grad(lambda re: loss(re + 0.5j)), interpret=True)(z.real),
                               rtol=1e-12, atol=1e-12)


def test_a_program_with_a_sort_runs_as_one_native_program_with_its_neighbours():
    x = np.random.default_rng(0).standard_normal((8, 40)).astype(np.float32)

    def f(a):
        s = fj.sort(fj.tanh(a) * 2.0, axis=-1)
        return s[:, -3:].sum(axis=-1) + fj.argsort(a, axis=-1)[:, 0].astype(np.float32)
    g = fj.function(f)
    assert _native(g, x)
    assert fj.explain(g, x).driver.startswith("one native call")
    np.testing.assert_allclose(g(x), fj.function(f, interpret=True)(x), rtol=1e-6)


def test_top_k_is_the_largest_first_with_ties_by_position_and_its_gradient_reaches_them():
    x = np.array([[3.0, 1.0, np.nan, 3.0, 2.0], [0.0, 5.0, 5.0, 1.0, -1.0]], np.float32)
    values, positions = fj.function(lambda a: fj.top_k(a, 3))(x)
    np.testing.assert_array_equal(positions, [[2, 0, 3], [1, 2, 3]])
    np.testing.assert_array_equal(values, [[np.nan, 3.0, 3.0], [5.0, 5.0, 1.0]])
    grad = fj.function(fj.grad(lambda a: (fj.top_k(a, 2)[0] * np.array([1.0, 10.0], np.float32)).sum()))
    np.testing.assert_array_equal(grad(np.array([1.0, 4.0, 2.0, 4.0], np.float32)), [0.0, 1.0, 0.0, 10.0])
    with pytest.raises(fj.FlowjitTypeError, match="k=6 must be an int in"):
        fj.top_k(x, 6)


@settings(max_examples=25, deadline=None, derandomize=True)
@given(hnp.arrays(np.float64, hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=20),
                  elements=st.sampled_from([0.0, -0.0, 1.0, -1.0, 2.5, np.inf, -np.inf, np.nan])),
       st.sampled_from([np.float32, np.float64, np.int32]), st.integers(0, 2), st.booleans())
def test_compiled_sorts_agree_with_the_interpreter(x, dtype, axis, descending):
    x = x.astype(dtype) if dtype is not np.int32 else np.nan_to_num(x, posinf=7, neginf=-7).astype(dtype)
    axis = axis % x.ndim

    def f(a):
        return fj.argsort(a, axis=axis, descending=descending), fj.sort(a, axis=axis, descending=descending)
    got = fj.function(f)(x)
    want = fj.function(f, interpret=True)(x)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("shape,k", [((0, 5), 0), ((0, 5), 3), ((4, 0), 0), ((4, 6), 0)])
# take_along_axis of an empty array raised (a gather of an empty axis): top_k answers at once.
def test_top_k_of_empty_arrays_or_none_is_empty(shape, k):
    x = np.zeros(shape, np.float32)
    for f in (fj.top_k, fj.function(lambda a: fj.top_k(a, k)), fj.function(lambda a: fj.top_k(a, k), interpret=True)):
        values, positions = f(x, k) if f is fj.top_k else f(x)
        assert values.shape == positions.shape == (*shape[:-1], k)
        assert values.dtype == np.float32 and positions.dtype == np.int64
