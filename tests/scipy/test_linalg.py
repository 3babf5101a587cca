"""flowjit.scipy.linalg: values against scipy.linalg (and jax.scipy.linalg where it has the
function), compiled with fj.function, gradients to second order against finite differences,
sqrtm's forward mode, and bad input."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg as sl

import flowjit as fj
from flowjit.scipy import linalg as L
from tests.scipy.grad_checks import check_grads

R = np.random.default_rng(2).standard_normal


def _spd(n):
    m = R((n, n))
    return m @ m.T + n * np.eye(n)


def _close(got, want, tol=1e-10):
    np.testing.assert_allclose(np.asarray(got), want, rtol=tol, atol=tol)


@pytest.mark.parametrize("a", [_spd(3), R((3, 3)) + 3 * np.eye(3), R((4, 4)) + 4 * np.eye(4),
                               np.array([[4.0, 1.0], [0.0, 9.0]])])
def test_sqrtm_values(a):
    _close(L.sqrtm(a), sl.sqrtm(a).real)
    _close(fj.function(L.sqrtm)(a), sl.sqrtm(a).real)


def test_sqrtm_gradients_general_matrix():
    # Not symmetric: the derivative must be the Sylvester solution, not eigh's.
    check_grads(L.sqrtm, [R((3, 3)) + 3 * np.eye(3)], [0])


def test_sqrtm_gradients_symmetrized():
    check_grads(lambda a: L.sqrtm(0.5 * (a + a.T)), [_spd(3)], [0])


def test_sqrtm_forward_mode():
    a, da = R((3, 3)) + 3 * np.eye(3), R((3, 3))
    x, dx = fj.jvp(L.sqrtm, (a,), (da,))
    eps = 1e-6
    _close(dx, (sl.sqrtm(a + eps * da).real - sl.sqrtm(a - eps * da).real) / (2 * eps), 1e-6)
    _close(x @ dx + dx @ x, da)


def test_solve_sylvester():
    a, b, q = R((3, 3)), R((2, 2)), R((3, 2))
    _close(L.solve_sylvester(a, b, q), sl.solve_sylvester(a, b, q))
    _close(fj.function(L.solve_sylvester)(a, b, q), sl.solve_sylvester(a, b, q))
    check_grads(L.solve_sylvester, [R((3, 3)), R((3, 3)), R((3, 3))], [0, 1, 2])


@pytest.mark.parametrize("lu", [(1, 1), (0, 2), (2, 0)])
def test_solve_banded(lu):
    ab, b = R((sum(lu) + 1, 5)), R(5)
    ab[lu[1]] += 4  # a dominant diagonal
    _close(L.solve_banded(lu, ab, b), sl.solve_banded(lu, ab, b))
    _close(fj.function(lambda ab, b: L.solve_banded(lu, ab, b))(ab, b), sl.solve_banded(lu, ab, b))
    check_grads(lambda ab, b: L.solve_banded(lu, ab, b), [ab, b], [0, 1])


@pytest.mark.parametrize("lower", [False, True])
def test_cholesky_and_cho_solve(lower):
    a, b = _spd(4), R((4, 2))
    _close(L.cholesky(a, lower=lower), sl.cholesky(a, lower=lower))
    _close(L.cho_solve(L.cho_factor(a, lower=lower), b), sl.cho_solve(sl.cho_factor(a, lower=lower), b))
    check_grads(lambda a: L.cholesky(0.5 * (a + a.T), lower=lower), [a], [0])
    check_grads(lambda a, b: L.cho_solve(L.cho_factor(0.5 * (a + a.T), lower), b), [a, b], [0, 1])


@pytest.mark.parametrize("lower", [False, True])
@pytest.mark.parametrize("trans", [0, 1, "C"])
@pytest.mark.parametrize("unit", [False, True])
def test_solve_triangular(lower, trans, unit):
    a, b = R((4, 4)) + 4 * np.eye(4), R(4)
    want = sl.solve_triangular(a, b, trans=trans, lower=lower, unit_diagonal=unit)
    _close(L.solve_triangular(a, b, trans=trans, lower=lower, unit_diagonal=unit), want)
    check_grads(lambda a, b: L.solve_triangular(a, b, trans=trans, lower=lower, unit_diagonal=unit),
                [a, b], [0, 1])


def test_against_jax(jax_x64):
    jsl = pytest.importorskip("jax.scipy.linalg")
    a, b = _spd(3), R(3)
    _close(L.sqrtm(a), np.asarray(jsl.sqrtm(a)).real, 1e-8)
    _close(L.solve_triangular(a, b, lower=True), np.asarray(jsl.solve_triangular(a, b, lower=True)))
    _close(L.cholesky(a), np.asarray(jsl.cholesky(a)))


def test_bad_input():
    with pytest.raises(fj.ShapeError, match="square matrix"):
        L.sqrtm(np.ones((2, 3)))
    with pytest.raises(fj.ShapeError, match=r"q must have shape \(3, 2\)"):
        L.solve_sylvester(np.eye(3), np.eye(2), np.ones((2, 3)))
    with pytest.raises(fj.ShapeError, match="ab must have shape"):
        L.solve_banded((1, 1), np.ones((2, 5)), np.ones(5))


def test_sqrtm_of_a_matrix_without_a_real_root_is_nan_not_a_wrong_matrix():
    # Eigenvalues -1.6, -0.34, 0.86: scipy's root is complex; the real iteration does not
    # converge, and returned a matrix whose square was 2.2 away from A (autograd's test_sqrtm).
    r = np.random.default_rng(0).standard_normal((3, 3))
    a = 0.5 * (r + r.T)
    assert np.isnan(np.asarray(L.sqrtm(a))).all()
    assert np.isnan(np.asarray(fj.function(L.sqrtm)(a))).all()
    assert np.isnan(np.asarray(fj.grad(lambda a: fj.sum(L.sqrtm(a)))(a))).all()
