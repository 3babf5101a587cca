"""fj.linalg on complex64 and complex128 matrices: every function against NumPy's result and
dtype (eigenvalues, singular values, norms and log|det| of the real dtype), eagerly and
inside fj.function, and the gradients of the decompositions against finite differences in
JAX's convention (df/dx - i df/dy of a real loss; ``fd_grad``). Losses on eigenvectors and
singular vectors are invariant to each vector's phase (|v|, or u * s @ vh), as in JAX's tests:
the phase is LAPACK's choice, with no derivative."""

from __future__ import annotations

import numpy as np
import pytest

import flowjit as fj
from flowjit.ir.errors import FlowjitTypeError
from tests.passes.test_autodiff_complex import fd_grad

DTYPES = [np.complex64, np.complex128]


def _normal(rng, *shape):
    return rng.standard_normal(shape) + 1j * rng.standard_normal(shape)


def _general(rng, *shape):
    """Well-conditioned complex matrices [..., n, n]."""
    return _normal(rng, *shape) + 3 * np.eye(shape[-1])


def _hpd(rng, *shape):
    """Hermitian positive-definite matrices [..., n, n]."""
    a = _normal(rng, *shape)
    return a @ np.conj(np.swapaxes(a, -1, -2)) + shape[-1] * np.eye(shape[-1])


def _tol(dt):
    return {"rtol": 2e-4, "atol": 2e-4} if np.dtype(dt) == np.complex64 else {"rtol": 1e-10, "atol": 1e-10}


# name -> (flowjit function, NumPy function, inputs(rng)); every input is cast to the dtype tested.
CASES = {
    "inv": (fj.linalg.inv, np.linalg.inv, lambda r: [_general(r, 2, 3, 3)]),
    "solve": (fj.linalg.solve, np.linalg.solve, lambda r: [_general(r, 2, 3, 3), _normal(r, 2, 3, 2)]),
    "solve-vector": (fj.linalg.solve, np.linalg.solve, lambda r: [_general(r, 3, 3), _normal(r, 3)]),
    "cholesky": (fj.linalg.cholesky, np.linalg.cholesky, lambda r: [_hpd(r, 2, 3, 3)]),
    "cholesky-upper": (lambda a: fj.linalg.cholesky(a, upper=True), lambda a: np.linalg.cholesky(a, upper=True),
                       lambda r: [_hpd(r, 3, 3)]),
    "slogdet": (lambda a: tuple(fj.linalg.slogdet(a)), lambda a: tuple(np.linalg.slogdet(a)),
                lambda r: [_general(r, 2, 3, 3)]),
    "det": (fj.linalg.det, np.linalg.det, lambda r: [_general(r, 2, 3, 3)]),
    "eigh": (lambda a: tuple(fj.linalg.eigh(a)), lambda a: tuple(np.linalg.eigh(a)), lambda r: [_hpd(r, 2, 3, 3)]),
    "eigh-upper": (lambda a: tuple(fj.linalg.eigh(a, UPLO="U")), lambda a: tuple(np.linalg.eigh(a, UPLO="U")),
                   lambda r: [_hpd(r, 3, 3)]),
    "eigvalsh": (fj.linalg.eigvalsh, np.linalg.eigvalsh, lambda r: [_hpd(r, 3, 3)]),
    "svd": (lambda a: tuple(fj.linalg.svd(a)), lambda a: tuple(np.linalg.svd(a)), lambda r: [_normal(r, 2, 4, 3)]),
    "svd-thin": (lambda a: tuple(fj.linalg.svd(a, full_matrices=False)),
                 lambda a: tuple(np.linalg.svd(a, full_matrices=False)), lambda r: [_normal(r, 3, 5)]),
    "svdvals": (fj.linalg.svdvals, lambda a: np.linalg.svd(a, compute_uv=False), lambda r: [_normal(r, 4, 3)]),
    "qr": (lambda a: tuple(fj.linalg.qr(a)), lambda a: tuple(np.linalg.qr(a)), lambda r: [_normal(r, 2, 4, 3)]),
    "qr-complete": (lambda a: tuple(fj.linalg.qr(a, mode="complete")),
                    lambda a: tuple(np.linalg.qr(a, mode="complete")), lambda r: [_normal(r, 4, 3)]),
    "pinv": (fj.linalg.pinv, np.linalg.pinv, lambda r: [_normal(r, 2, 3, 4)]),
    "matrix_rank": (fj.linalg.matrix_rank, np.linalg.matrix_rank,
                    lambda r: [np.stack([_normal(r, 4, 3), _normal(r, 4, 1) @ _normal(r, 1, 3)])]),
    "norm": (fj.linalg.norm, np.linalg.norm, lambda r: [_normal(r, 3, 4)]),
    "norm-vector-3": (lambda x: fj.linalg.norm(x, 3, axis=1), lambda x: np.linalg.norm(x, 3, axis=1),
                      lambda r: [_normal(r, 3, 4)]),
    "vector_norm": (fj.linalg.vector_norm, lambda x: np.linalg.norm(x.ravel()), lambda r: [_normal(r, 2, 3, 2)]),
    "vector_norm-0": (lambda x: fj.linalg.vector_norm(x, axis=-1, ord=0),
                      lambda x: np.linalg.norm(x, 0, axis=-1), lambda r: [_normal(r, 3, 4) * (np.arange(4) > 1)]),
    "vector_norm-inf": (lambda x: fj.linalg.vector_norm(x, axis=0, ord=np.inf),
                        lambda x: np.linalg.norm(x, np.inf, axis=0), lambda r: [_normal(r, 3, 4)]),
    **{f"matrix_norm-{o}": (lambda x, o=o: fj.linalg.matrix_norm(x, ord=o),
                            lambda x, o=o: np.linalg.norm(x, o, axis=(-2, -1)), lambda r: [_normal(r, 2, 3, 4)])
       for o in ("fro", "nuc", 1, -1, 2, -2, np.inf, -np.inf)},
    "matrix_power-3": (lambda a: fj.linalg.matrix_power(a, 3), lambda a: np.linalg.matrix_power(a, 3),
                       lambda r: [_general(r, 2, 3, 3)]),
    "matrix_power--2": (lambda a: fj.linalg.matrix_power(a, -2), lambda a: np.linalg.matrix_power(a, -2),
                        lambda r: [_general(r, 3, 3)]),
    "matrix_power-0": (lambda a: fj.linalg.matrix_power(a, 0), lambda a: np.linalg.matrix_power(a, 0),
                       lambda r: [_general(r, 3, 3)]),
    "lstsq": (lambda a, b: tuple(fj.linalg.lstsq(a, b)), lambda a, b: tuple(np.linalg.lstsq(a, b)),
              lambda r: [_normal(r, 5, 3), _normal(r, 5, 2)]),
    "cond": (fj.linalg.cond, np.linalg.cond, lambda r: [_general(r, 2, 3, 3)]),
    "cond-fro": (lambda x: fj.linalg.cond(x, "fro"), lambda x: np.linalg.cond(x, "fro"),
                 lambda r: [_general(r, 3, 3)]),
    "tensorinv": (fj.linalg.tensorinv, np.linalg.tensorinv,
                  lambda r: [_general(r, 6, 6).reshape(2, 3, 6)]),
    "tensorsolve": (fj.linalg.tensorsolve, np.linalg.tensorsolve,
                    lambda r: [_general(r, 6, 6).reshape(2, 3, 2, 3), _normal(r, 2, 3)]),
    "trace": (fj.linalg.trace, lambda x: np.trace(x, axis1=-2, axis2=-1), lambda r: [_normal(r, 2, 3, 4)]),
    "diagonal": (lambda x: fj.linalg.diagonal(x, offset=1), lambda x: np.diagonal(x, 1, -2, -1),
                 lambda r: [_normal(r, 2, 3, 4)]),
    "outer": (fj.linalg.outer, np.outer, lambda r: [_normal(r, 3), _normal(r, 4)]),
    "tensordot": (fj.linalg.tensordot, lambda a, b: np.tensordot(a, b, 2),
                  lambda r: [_normal(r, 2, 3, 4), _normal(r, 3, 4, 2)]),
    "vecdot": (fj.linalg.vecdot, lambda a, b: np.vecdot(a, b), lambda r: [_normal(r, 2, 3), _normal(r, 3)]),
    "matmul": (fj.linalg.matmul, np.matmul, lambda r: [_normal(r, 2, 3), _normal(r, 3, 4)]),
    "multi_dot": (lambda a, b, c: fj.linalg.multi_dot([a, b, c]), lambda a, b, c: np.linalg.multi_dot([a, b, c]),
                  lambda r: [_normal(r, 3), _normal(r, 3, 4), _normal(r, 4, 2)]),
    "cross": (fj.linalg.cross, np.linalg.cross, lambda r: [_normal(r, 2, 3), _normal(r, 3)]),
}


def _assert_matches_numpy(got, want, dt):
    got = got if isinstance(got, tuple) else (got,)
    want = want if isinstance(want, tuple) else (want,)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        g, w = np.asarray(g), np.asarray(w)
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, g.dtype, w.shape, w.dtype)
        np.testing.assert_allclose(g, w, **_tol(dt))


@pytest.mark.parametrize("dt", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_numpy_eagerly_and_compiled(name, dt):
    fj_fn, np_fn, inputs = CASES[name]
    xs = [x.astype(dt) for x in inputs(np.random.default_rng(len(name)))]
    want = np_fn(*xs)
    _assert_matches_numpy(fj_fn(*xs), want, dt)
    _assert_matches_numpy(fj.function(fj_fn)(*xs), want, dt)


def test_eigh_and_svd_factor_the_matrix():
    # Beyond NumPy's own call: a v = v w with real w, and u * s @ vh == a.
    rng = np.random.default_rng(0)
    a = _hpd(rng, 4, 4).astype(np.complex64)
    w, v = fj.function(fj.linalg.eigh)(a)
    assert w.dtype == np.float32 and v.dtype == np.complex64
    np.testing.assert_allclose(a @ v, v * w, rtol=1e-4, atol=1e-4)
    x = _normal(rng, 3, 5)
    u, s, vh = fj.linalg.svd(x, full_matrices=False)
    assert s.dtype == np.float64
    np.testing.assert_allclose((u * s) @ vh, x, rtol=1e-12, atol=1e-12)
    sign, logdet = fj.linalg.slogdet(_general(rng, 3, 3))
    assert logdet.dtype == np.float64 and abs(abs(sign) - 1) < 1e-12


# ---- gradients against finite differences -----------------------------------------------------
def _check_grad(f_fj, f_np, x):
    got = fj.grad(f_fj)(x)
    assert got.dtype == np.complex128
    np.testing.assert_allclose(got, fd_grad(f_np, x), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(fj.function(fj.grad(f_fj))(x), got, rtol=1e-10, atol=1e-12)


RNG = np.random.default_rng(5)
W = _normal(RNG, 3, 3)


def _weighted(f, m):
    """A real loss of a complex result: real(sum(W * f(a)))."""
    return lambda a: m.sum(m.real(W * f(a)))


@pytest.mark.parametrize("name", ["inv", "cholesky", "det", "matrix_power", "pinv"])
def test_gradient_of_a_complex_result(name):
    a = _hpd(np.random.default_rng(1), 3, 3) if name == "cholesky" else _general(np.random.default_rng(1), 3, 3)
    fns = {"inv": (fj.linalg.inv, np.linalg.inv), "cholesky": (fj.linalg.cholesky, np.linalg.cholesky),
           "det": (fj.linalg.det, np.linalg.det),
           "matrix_power": (lambda a: fj.linalg.matrix_power(a, -2), lambda a: np.linalg.matrix_power(a, -2)),
           "pinv": (fj.linalg.pinv, np.linalg.pinv)}[name]
    _check_grad(_weighted(fns[0], fj), _weighted(fns[1], np), a)


def test_gradient_of_solve_in_both_arguments():
    rng = np.random.default_rng(2)
    a, b, w = _general(rng, 3, 3), _normal(rng, 3, 2), _normal(rng, 3, 2)

    def loss(m, solve):
        return lambda a, b: m.sum(m.real(w * solve(a, b)))
    ga, gb = fj.grad(loss(fj, fj.linalg.solve), argnums=(0, 1))(a, b)
    np.testing.assert_allclose(ga, fd_grad(lambda a: loss(np, np.linalg.solve)(a, b), a), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(gb, fd_grad(lambda b: loss(np, np.linalg.solve)(a, b), b), rtol=1e-6, atol=1e-7)


def test_gradient_of_slogdet_through_sign_and_logabsdet():
    a = _general(np.random.default_rng(3), 3, 3)
    c = 0.4 - 1.3j
    _check_grad(lambda a: fj.linalg.slogdet(a)[1], lambda a: np.linalg.slogdet(a)[1], a)
    _check_grad(lambda a: fj.real(c * fj.linalg.slogdet(a)[0]), lambda a: np.real(c * np.linalg.slogdet(a)[0]), a)


@pytest.mark.parametrize("uplo", ["L", "U"])
def test_gradient_of_eigh(uplo):
    rng = np.random.default_rng(4)
    a = _hpd(rng, 3, 3)
    ww, wv = rng.standard_normal(3), rng.standard_normal((3, 3))

    def loss(m, eigh):   # |v| is invariant to each eigenvector's phase
        def f(a):
            w, v = eigh(a, UPLO=uplo)
            return m.sum(ww * w) + m.sum(wv * m.abs(v) ** 2)
        return f
    _check_grad(loss(fj, fj.linalg.eigh), loss(np, np.linalg.eigh), a)
    _check_grad(lambda a: fj.sum(ww * fj.linalg.eigvalsh(a, uplo)), lambda a: np.sum(ww * np.linalg.eigvalsh(a, uplo)),
                a)


@pytest.mark.parametrize("shape", [(3, 3), (4, 3), (3, 5)])
def test_gradient_of_svd(shape):
    rng = np.random.default_rng(shape[0] * 10 + shape[1])
    x = _normal(rng, *shape)
    k = min(shape)
    wu, ws, wv, wa = rng.standard_normal((shape[0], k)), rng.standard_normal(k), rng.standard_normal((k, shape[1])), \
        _normal(rng, *shape)

    def loss(m, svd):
        # |u| and |vh| are invariant to each pair's phase; u * s**2 @ vh is invariant to the pair's
        # common phase but not to their relative one (JAX's imaginary-diagonal term).
        def f(a):
            u, s, vh = svd(a, full_matrices=False)
            return (m.sum(wu * m.abs(u)) + m.sum(ws * s) + m.sum(wv * m.abs(vh))
                    + m.sum(m.real(wa * ((u * s ** 2) @ vh))))
        return f
    _check_grad(loss(fj, fj.linalg.svd), loss(np, np.linalg.svd), x)


@pytest.mark.parametrize("shape", [(3, 3), (4, 3), (3, 5)])
def test_gradient_of_qr(shape):
    rng = np.random.default_rng(shape[0] * 10 + shape[1])
    x = _normal(rng, *shape)
    k = min(shape)
    wq, wr = _normal(rng, shape[0], k), _normal(rng, k, shape[1])

    def loss(m, qr):   # Householder QR has a unique phase: r's diagonal real
        def f(a):
            q, r = qr(a)
            return m.sum(m.real(wq * q)) + m.sum(m.real(wr * r))
        return f
    _check_grad(loss(fj, fj.linalg.qr), loss(np, np.linalg.qr), x)


@pytest.mark.parametrize("name, ord_", [("norm", None), ("norm", "nuc"), ("norm", 2), ("vector_norm", 3)])
def test_gradient_of_norms(name, ord_):
    x = _normal(np.random.default_rng(6), 3, 3)
    if name == "vector_norm":
        f_fj, f_np = (lambda x: fj.linalg.vector_norm(x, ord=ord_)), (lambda x: np.linalg.norm(x.ravel(), ord_))
    else:
        f_fj, f_np = (lambda x: fj.linalg.norm(x, ord_)), (lambda x: np.linalg.norm(x, ord_))
    _check_grad(f_fj, f_np, x)


def test_a_bad_dtype_names_the_function_and_argument():
    with pytest.raises(FlowjitTypeError, match=r"linalg\.inv: a has dtype float16.*complex64"):
        fj.linalg.inv(np.eye(2, dtype=np.float16))
    with pytest.raises(FlowjitTypeError, match=r"linalg\.svd: a has dtype float16"):
        fj.function(fj.linalg.svd)(np.ones((2, 3), np.float16))


@pytest.mark.parametrize("dt", [np.uint8, np.int16, np.float32, np.complex64])
def test_vecdot_keeps_the_promoted_dtype(dt):
    # np.vecdot sums in the inputs' dtype: uint8 stays uint8 (a sum would give uint64).
    x = np.arange(6, dtype=dt).reshape(2, 3)
    for f in (fj.linalg.vecdot, fj.function(fj.linalg.vecdot)):
        got = f(x, x[::-1])
        want = np.vecdot(x, x[::-1])
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)


# ---- eig, eigvals: general matrices, complex results ---------------------------------------------
@pytest.mark.parametrize("dt", [np.float32, np.float64, np.complex64, np.complex128], ids=lambda d: np.dtype(d).name)
def test_eig_matches_numpy_with_complex_results(dt):
    rng = np.random.default_rng(8)
    a = (_general(rng, 2, 4, 4) if np.dtype(dt).kind == "c" else rng.standard_normal((2, 4, 4))).astype(dt)
    c = np.result_type(dt, np.complex64)
    w, v = np.linalg.eig(a)
    for f in (fj.linalg.eig, fj.function(fj.linalg.eig)):
        got = f(a)
        _assert_matches_numpy(tuple(got), (w.astype(c), v.astype(c)), c)
    np.testing.assert_allclose(fj.linalg.eigvals(a), w, **_tol(c))


def _eig_loss(m, eig, wrow, c):
    # Invariant to the order of the eigenpairs (LAPACK's, unsorted): sums over pairs.
    def f(a):
        w, v = eig(a)
        return m.sum(m.real(wrow * v * w ** 2)) + m.sum(m.real(c * w ** 3))
    return f


def test_gradient_of_eig_of_a_complex_matrix():
    rng = np.random.default_rng(9)
    a, wrow = _normal(rng, 4, 4), _normal(rng, 4, 1)
    _check_grad(_eig_loss(fj, fj.linalg.eig, wrow, 0.3 - 0.7j), _eig_loss(np, np.linalg.eig, wrow, 0.3 - 0.7j), a)


def test_gradient_of_eig_of_a_real_matrix_is_real():
    from tests.finite_differences import central_differences
    rng = np.random.default_rng(10)
    a, wrow = rng.standard_normal((4, 4)), _normal(rng, 4, 1)
    assert np.iscomplexobj(np.linalg.eigvals(a))   # a complex pair: the vectors' phase matters
    got = fj.grad(_eig_loss(fj, fj.linalg.eig, wrow, 1.5j))(a)
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, central_differences(_eig_loss(np, np.linalg.eig, wrow, 1.5j), [a], 0),
                               rtol=1e-6, atol=1e-7)


def test_numpy_linalg_traces_as_fj_linalg_on_complex():
    a = _general(np.random.default_rng(11), 3, 3)

    @fj.function
    def f(a):
        return np.linalg.eigvals(a), np.linalg.svd(a, compute_uv=False), np.linalg.slogdet(a).logabsdet

    w, s, logdet = f(a)
    np.testing.assert_allclose(np.sort_complex(w), np.sort_complex(np.linalg.eigvals(a)), rtol=1e-10)
    np.testing.assert_allclose(s, np.linalg.svd(a, compute_uv=False), rtol=1e-10)
    assert s.dtype == logdet.dtype == np.float64
