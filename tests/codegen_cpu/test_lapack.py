"""LAPACK in the native program (``codegen_cpu.lapack``): cholesky, solve, inv, slogdet (and
det), eigh, svd, qr and eig call the LAPACKE of the BLAS in use, batched over leading dimensions,
NaN for a matrix LAPACK fails on, as the interpreter (NumPy's linalg) answers; in the JIT and
in a library compiled ahead of time for any batch size."""

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
@pytest.mark.parametrize("shape", [(3, 5, 5), (2, 1, 1), (2, 0, 0), (2, 3, 6, 6)])
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


def _spectra(a, g):
    sign, logdet = fj.linalg.slogdet(g)
    w, v = fj.linalg.eigh(a)
    w_upper, v_upper = fj.linalg.eigh(a, UPLO="U")
    return sign, logdet, fj.linalg.det(g), w, v, w_upper, v_upper


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape", [(3, 5, 5), (2, 1, 1), (2, 0, 0)])
def test_slogdet_det_and_eigh_run_natively_as_the_interpreter(dtype, shape):
    rng = np.random.default_rng(sum(shape) + 1)
    a, g = _spd(rng, shape, dtype), rng.standard_normal(shape).astype(dtype)
    if a.size:
        a[..., 0, -1] += 1.0   # the triangle eigh does not read differs
    f = fj.function(_spectra)
    got, want = f(a, g), fj.function(_spectra, interpret=True)(a, g)
    tol = 2e-4 if dtype in (np.float32, np.complex64) else 1e-10
    for i, (x, w) in enumerate(zip(got, want, strict=True)):
        assert x.dtype == w.dtype and x.shape == w.shape
        if i in (4, 6):   # eigenvectors: each column up to its phase
            x, w = np.abs(x), np.abs(w)
        np.testing.assert_allclose(x, w, rtol=tol, atol=tol, err_msg=f"result {i}")
    plan = f.kernels(a, g)
    assert "native driver" in plan and plan.count(" lapack ") == 3   # det shares slogdet's


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape", [(3, 5, 2), (2, 2, 6)])
@pytest.mark.parametrize("full", [False, True], ids=["reduced", "complete"])
def test_svd_runs_natively_and_reconstructs_its_matrices(dtype, shape, full):
    rng = np.random.default_rng(sum(shape) + full)
    a = rng.standard_normal(shape) + (1j * rng.standard_normal(shape) if np.dtype(dtype).kind == "c" else 0)
    a = a.astype(dtype)
    f = fj.function(lambda x: fj.linalg.svd(x, full_matrices=full))
    (u, s, vh), want = f(a), fj.function(lambda x: fj.linalg.svd(x, full_matrices=full), interpret=True)(a)
    tol = 2e-4 if dtype in (np.float32, np.complex64) else 1e-10
    for g, w in zip((u, s, vh), want, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape
    np.testing.assert_allclose(s, want[1], rtol=tol, atol=tol)
    k = min(shape[-2:])
    np.testing.assert_allclose((u[..., :k] * s[..., None, :]) @ vh[..., :k, :], a, rtol=10 * tol, atol=10 * tol)
    assert "native driver" in f.kernels(a)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape", [(3, 5, 2), (2, 4, 1)])
@pytest.mark.parametrize("mode", ["reduced", "complete"])
def test_qr_runs_natively_as_the_interpreter(dtype, shape, mode):
    rng = np.random.default_rng(sum(shape))
    a = rng.standard_normal(shape) + (1j * rng.standard_normal(shape) if np.dtype(dtype).kind == "c" else 0)
    a = a.astype(dtype)
    f = fj.function(lambda x: fj.linalg.qr(x, mode=mode))
    got, want = f(a), fj.function(lambda x: fj.linalg.qr(x, mode=mode), interpret=True)(a)
    tol = 2e-3 if dtype in (np.float32, np.complex64) else 1e-9
    for g, w in zip(got, want, strict=True):   # one LAPACK: the same reflectors, the same signs
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol)
    assert "native driver" in f.kernels(a)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape", [(2, 3, 0), (2, 0, 4), (0, 0), (3, 0, 0)])
@pytest.mark.parametrize("full", [False, True])
def test_svd_and_qr_of_empty_matrices_run_natively_as_numpy(dtype, shape, full):
    # No singular values and no reflectors: NumPy's factors follow from the shapes (identities
    # where full_matrices asks for square ones, empty arrays otherwise), and the program that
    # asks for them stays native.
    a = np.zeros(shape, dtype)
    mode = "complete" if full else "reduced"
    f = fj.function(lambda x: (*fj.linalg.svd(x, full_matrices=full), *fj.linalg.qr(x, mode=mode)))
    got = f(a)
    want = (*np.linalg.svd(a, full_matrices=full), *np.linalg.qr(a, mode=mode))
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)
    assert "native driver" in f.kernels(a)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape", [(3, 5, 5), (2, 0, 0), "rotation"])
def test_eig_runs_natively_with_a_real_matrixs_conjugate_pairs_unpacked(dtype, shape):
    rng = np.random.default_rng(7)
    if shape == "rotation":   # eigenvalues +-i and 2: a conjugate pair
        a = np.array([[0.0, -1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 2.0]])
    else:
        a = rng.standard_normal(shape) + (1j * rng.standard_normal(shape) if np.dtype(dtype).kind == "c" else 0)
    a = a.astype(dtype)
    f = fj.function(fj.linalg.eig)
    (w, v), (w_ref, v_ref) = f(a), fj.function(fj.linalg.eig, interpret=True)(a)
    tol = 2e-4 if dtype in (np.float32, np.complex64) else 1e-10
    assert (w.dtype, v.dtype, w.shape, v.shape) == (w_ref.dtype, v_ref.dtype, w_ref.shape, v_ref.shape)
    # Unordered (LAPACK's order may differ with the layout it is handed): the same values,
    # each with an eigenvector of unit norm.
    np.testing.assert_allclose(np.sort_complex(w), np.sort_complex(w_ref), rtol=tol, atol=tol)
    np.testing.assert_allclose(a @ v, v * w[..., None, :], rtol=10 * tol, atol=10 * tol)
    np.testing.assert_allclose(np.linalg.norm(v, axis=-2), np.ones(w.shape), rtol=10 * tol, atol=10 * tol)
    assert "native driver" in f.kernels(a)


@pytest.mark.parametrize("dtype", [np.float32, np.complex64], ids=lambda d: np.dtype(d).name)
def test_a_single_precision_eig_is_numpys_double_precision_answer_rounded(dtype):
    # NumPy computes it in double and rounds: a single-precision geev gave other signs.
    rng = np.random.default_rng(8)
    a = rng.standard_normal((2, 4, 4)) + (1j * rng.standard_normal((2, 4, 4)) if dtype is np.complex64 else 0)
    a = a.astype(dtype)
    f = fj.function(fj.linalg.eig)
    w, v = f(a)
    w_ref, v_ref = np.linalg.eig(a)    # vectors' signs and the eigenvalues' order included
    np.testing.assert_allclose(w, w_ref, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(v, v_ref, rtol=1e-4, atol=1e-5)
    assert "native driver" in f.kernels(a)


@pytest.mark.parametrize("dtype", [np.float32, np.complex64], ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("uplo", ["L", "U"])
def test_a_single_precision_eigh_is_numpys_double_precision_answer_rounded(dtype, uplo):
    # NumPy computes it in double and rounds; a single-precision syevd/heevd's eigenvectors
    # were 1e-6 to 1e-5 from it (eigenvalues 0.35 apart in a 4x4), NumPy's 3e-8 from the truth.
    rng = np.random.default_rng(9)
    a = _spd(rng, (20, 4, 4), dtype)
    w, v = fj.function(lambda x: fj.linalg.eigh(x, UPLO=uplo))(a)
    w_ref, v_ref = np.linalg.eigh(a, UPLO=uplo)
    np.testing.assert_allclose(w, w_ref, rtol=1e-6, atol=0)
    np.testing.assert_allclose(v, v_ref, rtol=0, atol=2e-7)   # phases included: the same routine


def test_a_singular_matrixs_slogdet_is_zero_and_minus_infinity():
    s = np.array([[[1.0, 2.0], [2.0, 4.0]], [[2.0, 0.0], [0.0, -3.0]]])
    sign, logdet = fj.function(fj.linalg.slogdet)(s)
    np.testing.assert_array_equal(sign, [0.0, -1.0])
    np.testing.assert_allclose(logdet, [-np.inf, np.log(6.0)])


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


def test_a_solve_with_no_right_hand_sides_writes_nothing():
    # gesv was called with one right-hand side (the clamp meant for the leading dimension):
    # it wrote n elements into an empty result, and malloc aborted later in the process.
    a, b, c = np.eye(4) * 2.0, np.ones((2, 4, 0)), np.arange(4.0)
    a = np.broadcast_to(a, (2, 4, 4)).copy()

    def f(a, b, c):
        return fj.exp(c) * 2.0 + fj.sum(fj.linalg.solve(a, b)), fj.linalg.solve(a, b)
    g = fj.function(f)
    for _ in range(3):
        out, x = g(a, b, c)
        assert x.shape == (2, 4, 0)
        np.testing.assert_allclose(out, np.exp(c) * 2.0)
    assert "native driver" in g.kernels(a, b, c)


def test_nan_inputs_give_numpys_answers_not_a_singular_matrixs():
    # LAPACKE checks its inputs for NaN and refuses them (info < 0), which read as "singular".
    a = np.full((2, 3, 3), np.nan)
    a[1] = np.eye(3) * 2.0
    one = np.eye(3)
    one[0, 1] = np.nan

    def f(a, one):
        sign, logdet = fj.linalg.slogdet(a)
        s1, l1 = fj.linalg.slogdet(one)
        return sign, logdet, fj.linalg.det(a), s1, l1, fj.linalg.cholesky(a), fj.linalg.qr(a)[1]
    got = fj.function(f)(a, one)
    with np.errstate(invalid="ignore"):
        want = fj.function(f, interpret=True)(a, one)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, equal_nan=True)
