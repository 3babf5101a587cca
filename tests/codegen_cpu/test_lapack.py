"""LAPACK in the native program (``codegen_cpu.lapack``): cholesky, solve and inv call the
LAPACKE of the BLAS in use, batched over leading dimensions, NaN for a matrix LAPACK fails
on, as the interpreter (NumPy's linalg) answers; in the JIT and in a library compiled ahead
of time for any batch size."""

from __future__ import annotations

import numpy as np
import pytest

import flowjit as fj

DTYPES = [np.float32, np.float64, np.complex64, np.complex128]


def _spd(rng, shape, dtype):
    a = rng.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        a = a + 1j * rng.standard_normal(shape)
    return (a @ np.conj(np.swapaxes(a, -1, -2)) + shape[-1] * np.eye(shape[-1])).astype(dtype)


def _ops(a, b):
    return fj.linalg.cholesky(a), fj.linalg.solve(a, b), fj.linalg.inv(a)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape", [(4, 4), (3, 5, 5), (2, 1, 1), (0, 3, 3), (2, 0, 0), (2, 3, 6, 6)])
def test_cholesky_solve_and_inv_run_natively_as_the_interpreter(dtype, shape):
    rng = np.random.default_rng(sum(shape))
    a, b = _spd(rng, shape, dtype), rng.standard_normal((*shape[:-1], 3)).astype(dtype)
    f = fj.function(_ops)
    got, want = f(a, b), fj.function(_ops, interpret=True)(a, b)
    tol = 2e-4 if dtype in (np.float32, np.complex64) else 1e-10
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol)
    plan = f.kernels(a, b)
    assert "native driver" in plan and plan.count(" lapack ") == 3


def test_a_matrix_lapack_fails_on_is_nan_and_the_rest_of_the_batch_computed():
    not_pd = np.array([[[1.0, 2.0], [2.0, 1.0]], [[2.0, 0.0], [0.0, 3.0]]])
    singular = np.array([[[1.0, 2.0], [2.0, 4.0]], [[2.0, 0.0], [0.0, 3.0]]])
    b = np.ones((2, 2, 1))

    def f(p, s, b):
        return fj.linalg.cholesky(p), fj.linalg.solve(s, b), fj.linalg.inv(s)
    got = fj.function(f)(not_pd, singular, b)
    want = fj.function(f, interpret=True)(not_pd, singular, b)
    for g, w in zip(got, want, strict=True):
        assert np.isnan(g[0]).all() and np.isfinite(g[1]).all()
        np.testing.assert_allclose(g, w)
    np.testing.assert_allclose(got[0][1], [[2 ** 0.5, 0.0], [0.0, 3 ** 0.5]])


def test_a_gaussian_log_likelihood_compiles_ahead_of_time_for_any_batch(tmp_path):
    # A stack of covariance matrices, one per example: the factor, a solve and its log-det.
    def loglik(cov, x):
        chol = fj.linalg.cholesky(cov)
        z = fj.linalg.solve(chol, x[..., None])[..., 0]
        logdet = 2.0 * fj.log(fj.diagonal(chol, axis1=-2, axis2=-1)).sum(axis=-1)
        return -0.5 * ((z * z).sum(axis=-1) + logdet)
    rng = np.random.default_rng(0)
    fj.export(loglik, fj.ShapeDtype(("B", 4, 4), np.float64), fj.ShapeDtype(("B", 4), np.float64),
              path=tmp_path, name="loglik")
    compiled = fj.load_compiled(tmp_path / "loglik.json")
    for batch in (1, 5, 17):
        cov, x = _spd(rng, (batch, 4, 4), np.float64), rng.standard_normal((batch, 4))
        np.testing.assert_allclose(compiled(cov, x), fj.function(loglik)(cov, x), rtol=1e-12)
