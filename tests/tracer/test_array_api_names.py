"""The array API's names and keywords where NumPy's differ (found by the standard's own test
suite, bench/array_api_conformance.py): pow, atan2, concat, permute_dims, matrix_transpose,
positive, empty(_like), cumulative_sum, device= on the creation functions, correction= on
std/var, clip's min=/max=, and an explicit dtype=None meaning the default."""

from __future__ import annotations

import numpy as np
import pytest

import flowjit as fj


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_the_array_api_names_compute_what_numpy_does(compiled):
    rng = np.random.default_rng(0)
    x, y = rng.random((2, 3)) + 0.5, rng.random((2, 3)) - 0.5

    def run(f, *args):
        return fj.function(f)(*args) if compiled else f(*args)

    np.testing.assert_allclose(run(fj.pow, x, y), np.pow(x, y))
    np.testing.assert_allclose(run(fj.atan2, y, x), np.atan2(y, x))
    np.testing.assert_allclose(run(lambda a, b: fj.concat([a, b], axis=1), x, y), np.concat([x, y], axis=1))
    np.testing.assert_allclose(run(lambda a: fj.concat([a, a], axis=None), x), np.concat([x, x], axis=None))
    np.testing.assert_allclose(run(lambda a: fj.permute_dims(a, (1, 0)), x), np.permute_dims(x, (1, 0)))
    np.testing.assert_allclose(run(fj.matrix_transpose, x[None]), np.matrix_transpose(x[None]))
    np.testing.assert_allclose(run(fj.positive, y), np.positive(y))
    np.testing.assert_allclose(run(lambda a: fj.cumulative_sum(a, axis=1, include_initial=True), x),
                               np.cumulative_sum(x, axis=1, include_initial=True))
    np.testing.assert_allclose(run(lambda a: fj.cumulative_sum(a[0]), x), np.cumulative_sum(x[0]))
    np.testing.assert_allclose(run(lambda a: fj.std(a, axis=0, correction=1), x), np.std(x, axis=0, ddof=1))
    np.testing.assert_allclose(run(lambda a: fj.var(a, correction=1.5), x), np.var(x, correction=1.5))
    np.testing.assert_allclose(run(lambda a: fj.clip(a, min=-0.2, max=0.2), y), np.clip(y, min=-0.2, max=0.2))
    np.testing.assert_allclose(run(lambda a: a + fj.ones((2, 3), dtype=None, device="cpu:0"), x), x + 1)
    for f in (lambda: fj.zeros(3, dtype=None), lambda: fj.ones((2,), None), lambda: fj.eye(2, dtype=None),
              lambda: fj.empty((2, 2))):
        assert np.asarray(f()).dtype == np.float64
    assert np.asarray(fj.empty_like(np.ones(3, np.int32))).shape == (3,)
    assert np.asarray(fj.arange(4, device="cpu:0")).tolist() == [0, 1, 2, 3]


def test_their_gradients_and_errors():
    x = np.array([0.5, 1.0, 2.0])
    np.testing.assert_allclose(fj.grad(lambda a: fj.sum(fj.pow(a, 3.0)))(x), 3 * x ** 2)
    np.testing.assert_allclose(fj.grad(lambda a: fj.sum(fj.cumulative_sum(a)))(x), [3.0, 2.0, 1.0])
    with pytest.raises(fj.FlowjitTypeError, match=r"cumulative_sum: axis=None needs a 1-D array, got shape \[2, 2\]"):
        fj.cumulative_sum(np.ones((2, 2)))
    with pytest.raises(fj.FlowjitTypeError, match=r"matrix_transpose: x has shape \[3\]"):
        fj.matrix_transpose(np.ones(3))
    with pytest.raises(fj.DeviceError, match=r"no device cpu:7"):
        fj.zeros(2, device="cpu:7")


def test_astype_copy_reshape_shape_and_take_along_axis_default_axis():
    x = np.arange(6.0).reshape(2, 3)
    assert fj.astype(x, fj.float64, copy=False) is x
    assert not np.shares_memory(fj.astype(x, fj.float64), x)
    assert fj.function(lambda a: fj.astype(a, fj.float32, copy=False))(x).dtype == np.float32
    np.testing.assert_array_equal(fj.reshape(x, shape=(3, 2)), x.reshape(3, 2))
    assert not np.shares_memory(fj.reshape(x, (6,), copy=True), x)
    np.testing.assert_array_equal(fj.function(lambda a: np.reshape(a, shape=(3, 2)))(x), x.reshape(3, 2))
    idx = np.array([[2, 0], [1, 1]])
    np.testing.assert_array_equal(fj.take_along_axis(x, idx), np.take_along_axis(x, idx, axis=-1))


def test_an_axis_out_of_range_is_an_axis_error_an_index_error_and_a_shape_error():
    for f in (lambda: fj.expand_dims(np.ones(3), 5), lambda: fj.sum(np.ones(3), axis=2),
              lambda: fj.function(lambda x: fj.sum(x, axis=-3))(np.ones((2, 2))),
              lambda: fj.take(np.ones(3), np.array([0]), axis=3)):
        with pytest.raises(fj.AxisError, match=r"out of range") as info:
            f()
        assert isinstance(info.value, IndexError) and isinstance(info.value, fj.ShapeError)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_broadcast_arrays_unstack_cumulative_prod_count_nonzero(compiled):
    x = np.array([[1.0, 0.0, 3.0], [4.0, 5.0, 0.0]])

    def run(f, *args):
        return fj.function(f)(*args) if compiled else f(*args)

    got = run(lambda a: fj.broadcast_arrays(a, a[0], 2.0), x)
    want = np.broadcast_arrays(x, x[0], 2.0)
    assert isinstance(got, list) and [np.shape(g) for g in got] == [w.shape for w in want]
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    for g, w in zip(run(lambda a: fj.unstack(a, axis=1), x), np.unstack(x, axis=1)):
        np.testing.assert_array_equal(g, w)
    np.testing.assert_array_equal(run(lambda a: fj.cumulative_prod(a, axis=1, include_initial=True), x),
                                  np.cumulative_prod(x, axis=1, include_initial=True))
    np.testing.assert_array_equal(run(lambda a: fj.count_nonzero(a, axis=0), x), np.count_nonzero(x, axis=0))
    assert int(run(fj.count_nonzero, x)) == 4
    np.testing.assert_allclose(fj.grad(lambda a: fj.sum(fj.cumulative_prod(a)))(np.array([1.0, 2.0, 3.0])),
                               [9.0, 4.0, 2.0])
    with pytest.raises(fj.AxisError, match="unstack: axis 2"):
        fj.unstack(x, axis=2)
