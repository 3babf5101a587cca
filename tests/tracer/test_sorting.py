"""Sorting and searching: values against NumPy (compiled and through the interpreter), the
gradient of sort against finite differences, stability, NaN order, and the errors of bad input
and of unique on traced arrays."""

from __future__ import annotations

import numpy as np
import pytest

import flowjit as fj
from flowjit.ir.errors import FlowjitTypeError, ShapeError
from tests.finite_differences import central_differences
from tests.tracer.traced_errors import assert_traced_error

RNG = np.random.default_rng(7)
X = RNG.standard_normal((3, 6))
TIES = RNG.integers(0, 3, size=(4, 5)).astype(np.int32)
NANS = np.array([3.0, np.nan, -1.0, 2.0, np.nan, -1.0, 0.0])
SORTED = np.sort(RNG.integers(0, 6, size=9).astype(np.float64))
QUERIES = np.array([[-1.0, 0.0, 2.5], [5.0, 9.0, np.nan]])


def _stable_descending(x, axis=-1):
    # NumPy has no descending sort: reverse a stable ascending sort of the reversed array.
    n = x.shape[axis]
    return n - 1 - np.flip(np.argsort(np.flip(x, axis), axis=axis, kind="stable"), axis)


def _programs(mod):
    return lambda x, ties, nans, srt, q: (
        mod.sort(x), mod.sort(x, axis=0), mod.sort(x, axis=None), mod.argsort(x), mod.argsort(ties, kind="stable"),
        mod.argsort(ties, axis=0, kind="stable"), mod.sort(nans), mod.argsort(nans, kind="stable"),
        mod.searchsorted(srt, q), mod.searchsorted(srt, q, side="right"), mod.searchsorted(srt, 2.0),
        mod.searchsorted(srt[::-1], q, sorter=np.arange(8, -1, -1)), mod.partition(x, 2)[:, 2],
        mod.argpartition(ties, 1, axis=0)[1])


ARGS = (X, TIES, NANS, SORTED, QUERIES)


@pytest.mark.parametrize("interpret", [False, True], ids=["compiled", "interpreted"])
def test_values_match_numpy(interpret):
    got = fj.function(_programs(fj), interpret=interpret)(*ARGS)
    want = _programs(np)(*ARGS)
    want = want[:-1] + (np.sort(TIES, axis=0, kind="stable")[1],)  # argpartition's order is unspecified
    got = got[:-1] + (TIES[got[-1], np.arange(5)],)
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        np.testing.assert_array_equal(g, w, err_msg=f"result {k}")
        assert g.dtype == np.asarray(w).dtype or g.dtype == np.int64, (k, g.dtype)


def test_argsort_is_stable_unless_asked_otherwise():
    ties = np.repeat(np.arange(5.0), 40)[::-1].copy()  # long runs of ties: introsort reorders them
    f = fj.function(lambda x: (fj.argsort(x), np.argsort(x, kind="quicksort"), fj.argsort(x, stable=False)))
    stable, quick, unstable = f(ties)
    np.testing.assert_array_equal(stable, np.argsort(ties, kind="stable"))
    # Not stable: equal elements in an unspecified order (compiled code sorts stably anyway;
    # the interpreter runs NumPy's introsort), as np.argsort(kind="quicksort") promises.
    for order in (quick, unstable):
        np.testing.assert_array_equal(np.sort(order), np.arange(len(ties)))
        np.testing.assert_array_equal(ties[order], np.sort(ties))


def test_numpy_functions_on_traced_arrays_trace():
    got = fj.function(lambda x, s, q: (np.sort(x), np.argsort(x, axis=0), np.searchsorted(s, q)))(X, SORTED, QUERIES)
    for g, w in zip(got, (np.sort(X), np.argsort(X, axis=0), np.searchsorted(SORTED, QUERIES)), strict=True):
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("side", ["left", "right"])
def test_searchsorted_of_large_inputs_binary_searches(side):
    a = np.sort(RNG.integers(0, 50, size=400).astype(np.float64))
    v = np.concatenate([RNG.integers(-2, 53, size=297).astype(np.float64), [np.nan, np.inf, -np.inf]])
    f = fj.function(lambda a, v: fj.searchsorted(a, v, side=side))
    assert "gather" in str(f.ir(a, v))  # past the comparison limit: the binary search
    np.testing.assert_array_equal(f(a, v), np.searchsorted(a, v, side=side))
    a_nan = np.concatenate([a, [np.nan, np.nan]])
    np.testing.assert_array_equal(f(a_nan, v), np.searchsorted(a_nan, v, side=side))


@pytest.mark.parametrize("x", [TIES, NANS[None], X, (TIES > 1)], ids=["ties", "nans", "floats", "bool"])
def test_descending_is_stable(x):
    f = fj.function(lambda x: (fj.argsort(x, descending=True), fj.sort(x, descending=True)))
    idx, values = f(x)
    np.testing.assert_array_equal(idx, _stable_descending(x))
    np.testing.assert_array_equal(values, np.take_along_axis(x, _stable_descending(x), -1))


def test_sort_gradient_gathers_back_through_the_permutation():
    w = RNG.standard_normal((3, 6))

    def loss(x):
        return (fj.sort(x, axis=1) * w).sum() + (fj.sort(x, axis=0, descending=True) ** 2 * w).sum()

    g = fj.grad(loss)(X)
    np.testing.assert_allclose(fj.function(fj.grad(loss))(X), g, rtol=1e-12)
    np.testing.assert_allclose(g, central_differences(loss, [X.copy()], 0), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("interpret", [False, True], ids=["compiled", "interpreted"])
def test_unique_with_a_static_size_traces(interpret):
    x = np.array([[3.0, np.nan, 1.0], [3.0, -2.0, np.nan], [1.0, 1.0, 7.0]])

    @fj.function(interpret=interpret)
    def f(x):
        return (fj.unique_all(x, size=7), fj.unique_values(x, size=3), fj.unique_counts(x, size=5, fill_value=-9.0),
                fj.unique(x, return_counts=True, size=5), fj.unique_inverse(x > 2, size=2))

    everything, three, counts, np_style, bools = f(x)
    values, index, inverse, n = np.unique(x, return_index=True, return_inverse=True, return_counts=True)
    np.testing.assert_array_equal(everything.values, np.concatenate([values, np.full(2, -2.0)]))
    np.testing.assert_array_equal(everything.indices[:5], index)
    np.testing.assert_array_equal(everything.inverse_indices, inverse.reshape(x.shape))
    np.testing.assert_array_equal(everything.counts, np.concatenate([n, [0, 0]]))
    np.testing.assert_array_equal(three, values[:3])
    np.testing.assert_array_equal(counts.values, values)  # exactly 5 distinct: no fill
    np.testing.assert_array_equal(np_style[1], n)  # NumPy's spelling with JAX's size=
    np.testing.assert_array_equal(bools.values, [False, True])
    np.testing.assert_array_equal(bools.inverse_indices, (x > 2).astype(np.int64))


def test_unique_values_with_size_is_differentiable():
    w = np.array([1.0, 2.0, 3.0])

    def loss(x):
        return (fj.unique_values(x, size=3) * w).sum()

    x = np.array([0.5, -1.0, 3.0, 2.0])  # ties would make finite differences jump between slots
    np.testing.assert_allclose(fj.grad(loss)(x), central_differences(loss, [x], 0), atol=1e-7)


def test_unique_is_numpy_on_concrete_arrays_and_an_error_when_traced():
    vals = np.array([[3, 1], [3, 2]])
    np.testing.assert_array_equal(fj.unique_values(vals), [1, 2, 3])
    assert fj.unique_inverse(vals).inverse_indices.shape == (2, 2)
    np.testing.assert_array_equal(fj.unique_counts(vals).counts, [1, 1, 2])
    np.testing.assert_array_equal(fj.unique_all(vals).indices, [1, 3, 0])
    for call in (lambda x: fj.unique_values(x), lambda x: np.unique(x)):
        with pytest.raises(FlowjitTypeError) as info:
            fj.function(call)(vals)
        assert "depends on the data" in str(info.value) and "size=K" in str(info.value)
        assert "test_sorting.py" in str(info.value)


@pytest.mark.parametrize("call, error, words", [
    (lambda: fj.sort(np.ones(3), kind="bogo"), FlowjitTypeError, ["sort", "kind", "'stable'"]),
    (lambda: fj.argsort(np.ones((2, 2)), axis=2), ShapeError, ["argsort", "axis 2", "[2, 2]"]),
    (lambda: fj.sort(np.float64(1.0)), ShapeError, ["sort", "0-d", "axis=None"]),
    (lambda: fj.sort(np.ones(3), order="f"), FlowjitTypeError, ["sort", "order"]),
    (lambda: fj.searchsorted(np.ones((2, 2)), 1.0), ShapeError, ["searchsorted", "1-D"]),
    (lambda: fj.searchsorted(np.ones(2), 1.0, side="middle"), FlowjitTypeError, ["searchsorted", "side", "'left'"]),
    (lambda: fj.partition(np.ones(3), 5), FlowjitTypeError, ["partition", "kth"]),
    (lambda: fj.unique_values(np.ones(3), size=0), FlowjitTypeError, ["unique_values", "size=0", "positive"]),
    (lambda: fj.unique(np.ones((2, 2)), axis=0, size=2), FlowjitTypeError, ["unique", "axis=0", "allowed"]),
    (lambda: fj.unique_counts(np.ones((0, 2)), size=2), ShapeError, ["unique", "empty"]),
])
def test_bad_input_names_the_function_argument_and_line(call, error, words):
    assert_traced_error(call, error, words, "test_sorting.py")
