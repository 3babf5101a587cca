"""flowjit.scipy.signal.convolve: values against scipy.signal.convolve and jax.scipy.signal,
autograd's generalization (axes, dot_axes) against its definition, gradients to second order
against finite differences, compiled with fj.function, and bad input."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.signal

import flowjit as fj
from flowjit.scipy.signal import convolve
from tests.scipy.grad_checks import check_grads

R = np.random.default_rng(1).standard_normal
SHAPES = [((4,), (2,)), ((5,), (3,)), ((2,), (6,)), ((4, 3), (2, 2)), ((5, 4), (4, 1)), ((6, 7), (3, 2)),
          ((3, 5), (6, 2)), ((2, 3, 4), (3, 2, 2))]


def _cases():
    for sa, sb in SHAPES:
        for mode in ("full", "valid", "same"):
            a, b = np.zeros(sa), np.zeros(sb)
            try:
                scipy.signal.convolve(a, b, mode)
            except ValueError:
                continue
            yield sa, sb, mode


@pytest.mark.parametrize("sa,sb,mode", list(_cases()))
def test_matches_scipy(sa, sb, mode):
    a, b = R(sa), R(sb)
    want = scipy.signal.convolve(a, b, mode)
    np.testing.assert_allclose(np.asarray(convolve(a, b, mode)), want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(np.asarray(fj.function(lambda x, y: convolve(x, y, mode))(a, b)), want,
                               rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("mode", ["full", "valid", "same"])
def test_matches_jax(mode):
    jsig = pytest.importorskip("jax.scipy.signal")
    a, b = R((5, 4)), R((3, 2))
    np.testing.assert_allclose(np.asarray(convolve(a, b, mode)), np.asarray(jsig.convolve(a, b, mode)),
                               rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mode", ["valid", "full"])
def test_generalization(mode):
    a35, a34, a342, a2543, a24232 = R((3, 5)), R((3, 4)), R((3, 4, 2)), R((2, 5, 4, 3)), R((2, 4, 2, 3, 2))
    sp = scipy.signal.convolve
    np.testing.assert_allclose(np.asarray(convolve(a35, a34, axes=([1], [0]), mode=mode))[1, 2],
                               sp(a35[1, :], a34[:, 2], mode))
    np.testing.assert_allclose(np.asarray(convolve(a35, a34, axes=([], []), dot_axes=([0], [0]), mode=mode)),
                               np.tensordot(a35, a34, axes=([0], [0])))
    np.testing.assert_allclose(
        np.asarray(convolve(a35, a342, axes=([1], [2]), dot_axes=([0], [0]), mode=mode))[2],
        sum(sp(a35[i, :], a342[i, 2, :], mode) for i in range(3)))
    got = np.asarray(convolve(a2543, a24232, axes=([1, 2], [2, 4]), dot_axes=([0, 3], [0, 3]), mode=mode))
    want = sum(sp(a2543[i, :, :, j], a24232[i, 2, :, j, :], mode) for i in range(2) for j in range(3))
    np.testing.assert_allclose(got[2], want)


@pytest.mark.parametrize("axes", [([0], [0]), ([1], [1]), ([0], [1]), ([1], [0])])
@pytest.mark.parametrize("mode", ["full", "valid", "same"])
def test_ignored_axes(axes, mode):
    # One convolved axis each: the result is in1's other axis, in2's other axis, then the
    # convolution ('same' keeps in1's length), each entry scipy's 1-d convolution.
    a, b = R((4, 3)), R((3, 2))
    got = np.asarray(convolve(a, b, axes=axes, mode=mode))
    x = np.moveaxis(a, axes[0][0], 1)
    y = np.moveaxis(b, axes[1][0], 1)
    for i in range(x.shape[0]):
        for j in range(y.shape[0]):
            np.testing.assert_allclose(got[i, j], scipy.signal.convolve(x[i], y[j], mode), atol=1e-12)


@pytest.mark.parametrize("mode", ["full", "valid", "same"])
def test_axes_in_another_order(mode):
    a, b = R((4, 3)), R((3, 2))
    np.testing.assert_allclose(np.asarray(convolve(a, b, axes=([1, 0], [1, 0]), mode=mode)),
                               scipy.signal.convolve(a.T, b.T, mode), atol=1e-12)


@pytest.mark.parametrize("sa,sb,mode", [((4,), (2,), "full"), ((5,), (3,), "valid"), ((6,), (4,), "same"),
                                        ((5, 4), (3, 2), "same"), ((4, 3), (2, 2), "valid"),
                                        ((6, 7), (4, 1), "full")])
def test_gradients(sa, sb, mode):
    check_grads(lambda a, b: convolve(a, b, mode), [R(sa), R(sb)], [0, 1])


@pytest.mark.parametrize("mode", ["full", "valid", "same"])
def test_gradients_dot_axes(mode):
    check_grads(lambda a, b: convolve(a, b, axes=([1], [1]), dot_axes=([0], [2]), mode=mode),
                [R((3, 3, 2)), R((3, 2, 3))], [0, 1])


def test_bad_input():
    with pytest.raises(ValueError, match="mode 'wide'"):
        convolve(np.ones(3), np.ones(2), "wide")
    with pytest.raises(ValueError, match="at least as long"):
        convolve(np.ones((3, 2)), np.ones((2, 3)), "valid")
    with pytest.raises(fj.ShapeError, match="same number of dimensions"):
        convolve(np.ones((3, 2)), np.ones(2))
