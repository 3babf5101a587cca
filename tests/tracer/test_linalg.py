"""fj.linalg: values against NumPy (compiled and through the interpreter), gradients against
central finite differences on well-conditioned random matrices, and the errors of bad input."""

from __future__ import annotations

import numpy as np
import pytest

import flowjit as fj
from flowjit.ir.errors import FlowjitTypeError, ShapeError
from tests.finite_differences import central_differences
from tests.tracer.traced_errors import assert_traced_error

RNG = np.random.default_rng(24)
A = RNG.standard_normal((2, 4, 4)) + 4 * np.eye(4)          # well conditioned
SPD = A @ np.swapaxes(A, -1, -2) + np.eye(4)
B = RNG.standard_normal((2, 4, 3))
TALL = RNG.standard_normal((5, 3))
WIDE = RNG.standard_normal((2, 3, 5))
V = RNG.standard_normal((2, 6))
X3 = RNG.standard_normal((4, 3))


def _programs(la):
    """Every function under test, written once on a namespace (fj.linalg or np.linalg), so the
    same calls run through flowjit and as NumPy's reference."""
    return lambda a, spd, b, tall, wide, v, x3: (
        la.inv(a), la.solve(a, b), la.solve(a[0], b[0, :, 0]), la.cholesky(spd), la.cholesky(spd, upper=True),
        la.det(a), tuple(la.slogdet(a)), tuple(la.eigh(spd)), tuple(la.eigh(spd, UPLO="U")), la.eigvalsh(spd),
        tuple(la.svd(tall, full_matrices=False)), tuple(la.svd(wide, full_matrices=False)), tuple(la.svd(a)),
        tuple(la.svd(tall)), tuple(la.svd(wide)),
        la.svdvals(wide), la.norm(tall), la.norm(v, axis=1), la.norm(v, ord=np.inf, axis=-1),
        la.norm(v, ord=1, axis=1, keepdims=True), la.norm(v[0], ord=3), la.norm(v[0], ord=0),
        la.norm(v, ord=-np.inf, axis=1), la.norm(tall, "fro"), la.norm(tall, "nuc"), la.norm(tall, 2),
        la.norm(tall, -2), la.norm(a, 1, axis=(1, 2)), la.norm(a, -np.inf, axis=(2, 1), keepdims=True),
        la.norm(a, keepdims=True), la.matrix_norm(a, ord=np.inf), la.matrix_norm(wide, ord="nuc", keepdims=True),
        la.vector_norm(a, axis=(0, 2), ord=2), la.vector_norm(v), la.matrix_power(a, 5),
        la.matrix_power(a, 0), la.matrix_power(a, -3), la.pinv(tall), la.pinv(wide), la.matrix_rank(tall),
        la.matrix_rank(np.zeros((3, 3)) + tall[:3, :1]), la.trace(a), la.trace(wide, offset=2),
        la.diagonal(a, offset=-1),
        la.diagonal(wide, offset=1), la.matrix_transpose(wide), la.outer(v[0], v[1]), la.cross(x3, x3[::-1]),
        la.cross(x3.T, x3.T[:, ::-1], axis=0), la.matmul(a, b), la.tensordot(a, b, axes=([0, 1], [0, 1])),
        la.vecdot(v, v[::-1]), tuple(la.qr(tall)), tuple(la.qr(wide)), la.qr(tall, mode="complete")[0],
        la.qr(a, mode="r"), la.multi_dot([v[0, :5], tall, wide[0], v[1, :5]]), la.multi_dot([a[0], a[1]]),
        la.cond(a), la.cond(tall), la.cond(a, "fro"), la.cond(a, -2), la.cond(a, np.inf),
        tuple(la.lstsq(tall, wide[0].T[:, :2])),
        tuple(la.lstsq(tall, tall[:, 0] + 1)), tuple(la.lstsq(wide[0], wide[1, :, 0])),
        la.tensorinv(a[0].reshape(2, 2, 4), ind=2), la.tensorsolve(a[0].reshape(2, 2, 2, 2), b[0, :, 0].reshape(2, 2)))


ARGS = (A, SPD, B, TALL, WIDE, V, X3)


def _flat(tree):
    out = []
    for x in tree:
        out.extend(_flat(x) if isinstance(x, tuple) else [x])
    return out


@pytest.mark.parametrize("interpret", [False, True], ids=["compiled", "interpreted"])
def test_values_match_numpy(interpret):
    got = _flat(fj.function(_programs(fj.linalg), interpret=interpret)(*ARGS))
    want = _flat(_programs(np.linalg)(*ARGS))
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want)):
        w = np.asarray(w)
        assert g.shape == w.shape, (k, g.shape, w.shape)
        np.testing.assert_allclose(g, w, rtol=1e-9, atol=1e-10, err_msg=f"result {k}")


def test_numpy_linalg_traces_as_fj_linalg():
    @fj.function
    def f(a, b, spd):
        w, v = np.linalg.eigh(spd)
        return (np.linalg.inv(a), np.linalg.solve(a, b), np.linalg.norm(a, axis=(1, 2)), w, v,
                np.linalg.trace(a), np.linalg.det(a))

    got = f(A, B, SPD)
    want = (np.linalg.inv(A), np.linalg.solve(A, B), np.linalg.norm(A, axis=(1, 2)), *np.linalg.eigh(SPD),
            np.linalg.trace(A), np.linalg.det(A))
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-9, atol=1e-10)


def test_float32_stays_float32_and_ints_compute_in_float64():
    a32 = A.astype(np.float32)
    out = fj.function(lambda a: (fj.linalg.inv(a), fj.linalg.eigh(a @ a.T)[0], fj.linalg.norm(a)))(a32[0])
    assert [o.dtype for o in out] == [np.float32] * 3
    np.testing.assert_allclose(out[0], np.linalg.inv(a32[0]), rtol=1e-4, atol=1e-5)
    ints = np.array([[2, 1], [1, 3]])
    assert fj.function(fj.linalg.det)(ints).dtype == np.float64
    np.testing.assert_allclose(fj.function(fj.linalg.det)(ints), 5.0)


# ---- gradients ----------------------------------------------------------------------------------

def _check_gradients(f, args):
    argnums = tuple(range(len(args)))
    grads = fj.grad(f, argnums=argnums)(*args)
    again = fj.function(fj.grad(f, argnums=argnums))(*args)
    for a, b in zip(grads, again, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-10)
    for i, g in enumerate(grads):
        np.testing.assert_allclose(g, central_differences(f, args, i), rtol=1e-5, atol=1e-6)


W44 = RNG.standard_normal((4, 4))
W43 = RNG.standard_normal((4, 3))
W53 = RNG.standard_normal((5, 3))


def _gram(x):
    """A symmetric positive-definite matrix that moves with every entry of x."""
    return x @ x.T + 4 * np.eye(x.shape[0])


GRADIENT_CASES = {
    "inv": (lambda a: (fj.linalg.inv(a) * W44).sum(), [A[0]]),
    "solve": (lambda a, b: (fj.linalg.solve(a, b) * W43).sum(), [A[0], B[0]]),
    "solve_vector": (lambda a, b: (fj.linalg.solve(a, b) * W44[0]).sum(), [A[1], B[1, :, 0]]),
    "solve_batched": (lambda a, b: (fj.linalg.solve(a, b) ** 2).sum(), [A, B]),
    "solve_broadcast": (lambda a, b: (fj.linalg.solve(a, b) * W43).sum(), [A[0], B]),
    "grad_of_grad_logdet": (lambda a: (fj.grad(lambda x: fj.linalg.slogdet(x).logabsdet)(a) * W44).sum(), [A[1]]),
    "cholesky": (lambda x: (fj.linalg.cholesky(_gram(x)) * W44).sum(), [W44 + 0.3 * A[0]]),
    "det": (lambda a: fj.linalg.det(a).sum(), [A * 0.5]),
    "slogdet": (lambda a: fj.linalg.slogdet(a).logabsdet.sum(), [A]),
    "eigh": (lambda x: (fj.linalg.eigh(x + x.T).eigenvalues * W44[0]).sum()
             + (fj.linalg.eigh(x + x.T).eigenvectors ** 2 * W44).sum(), [A[0]]),
    "svd_tall": (lambda m: (fj.linalg.svd(m, full_matrices=False).S * W43[0]).sum()
                 + (fj.linalg.svd(m, full_matrices=False).U ** 2 * W53).sum()
                 + (fj.linalg.svd(m, full_matrices=False).Vh ** 2 * W44[:3, :3]).sum(), [TALL]),
    "svd_wide": (lambda m: (fj.linalg.svd(m, full_matrices=False).U ** 2 * W44[:3, :3]).sum()
                 + (fj.linalg.svd(m, full_matrices=False).Vh[:, :4] ** 2 * W43.T).sum(), [WIDE[0]]),
    "svd_square_full": (lambda a: (fj.linalg.svd(a).U[:, 0] ** 2).sum() + fj.linalg.svd(a).S[1], [A[1]]),
    "norms": (lambda a: fj.linalg.norm(a) + fj.linalg.norm(a, "nuc") + fj.linalg.norm(a, 2)
              + fj.linalg.norm(a[0], 3) + fj.linalg.norm(a[1], 1) + fj.linalg.norm(a, np.inf), [A[0]]),
    "pinv": (lambda m: (fj.linalg.pinv(m) * W43.T).sum(), [TALL[:4]]),
    "matrix_power": (lambda a: (fj.linalg.matrix_power(a, -2) * W44).sum()
                     + (fj.linalg.matrix_power(a, 3) * W44).sum() * 1e-3, [A[0]]),
    "qr_tall": (lambda m: (fj.linalg.qr(m).Q * W53).sum() + (fj.linalg.qr(m).R * W44[:3, :3]).sum(), [TALL]),
    "qr_square": (lambda a: (fj.linalg.qr(a, mode="r") ** 2 * W44).sum(), [A[0]]),
    "qr_wide": (lambda m: (fj.linalg.qr(m).Q * W44[:3, :3]).sum() + (fj.linalg.qr(m).R * WIDE[1]).sum(),
                [WIDE[0]]),
    "cholesky_reads_the_lower_triangle": (lambda a: (fj.linalg.cholesky(a) * W44).sum(), [SPD[0]]),
    "eigh_reads_one_triangle": (lambda a: (fj.linalg.eigh(a).eigenvectors ** 2 * W44).sum()
                                + (fj.linalg.eigh(a, UPLO="U").eigenvalues * W44[1]).sum(), [SPD[1]]),
    "lstsq": (lambda m, b: (fj.linalg.lstsq(m, b).x * W43[:3, :1]).sum() + fj.linalg.lstsq(m, b).residuals.sum(),
              [TALL, W53[:, :1]]),
    "multi_dot_cond": (lambda m: (fj.linalg.multi_dot([W53.T, m, m.T, W53[:, 0]]) ** 2).sum()
                       + fj.linalg.cond(m) + fj.linalg.cond(m[:3], 1), [TALL]),
    "trace_cross_vecdot": (lambda x: fj.linalg.trace(x @ x.T) + (fj.linalg.cross(x, x[::-1]) * X3).sum()
                           + fj.linalg.vecdot(x, X3).sum(), [X3]),
}


@pytest.mark.parametrize("name", list(GRADIENT_CASES))
def test_gradient_matches_finite_differences(name):
    f, args = GRADIENT_CASES[name]
    _check_gradients(f, [np.array(a, dtype=np.float64) for a in args])


def test_gradient_of_svd_full_matrices_of_a_rectangle_is_refused():
    with pytest.raises(ShapeError, match="full_matrices"):
        fj.grad(lambda m: fj.linalg.svd(m).U.sum())(TALL)


def test_gradient_of_complete_qr_of_a_tall_matrix_is_refused():
    with pytest.raises(ShapeError, match="mode='reduced'"):
        fj.grad(lambda m: fj.linalg.qr(m, mode="complete").Q.sum())(TALL)


# ---- bad input ---------------------------------------------------------------------------------

@pytest.mark.parametrize("call, error, words", [
    (lambda: fj.linalg.inv(np.ones((3, 4))), ShapeError, ["linalg.inv", "square", "[3, 4]"]),
    (lambda: fj.linalg.det(np.ones(3)), ShapeError, ["linalg.det", "2-D"]),
    (lambda: fj.linalg.inv(np.ones((2, 2), np.float16)), FlowjitTypeError, ["linalg.inv", "float16", "float32"]),
    (lambda: fj.linalg.solve(np.eye(3), np.ones((4, 2))), ShapeError, ["linalg.solve", "3 rows"]),
    (lambda: fj.linalg.eigh(np.eye(3), UPLO="X"), FlowjitTypeError, ["linalg.eigh", "UPLO", "'L' or 'U'"]),
    (lambda: fj.linalg.norm(np.ones((2, 2)), ord="bad"), FlowjitTypeError, ["linalg.norm", "ord", "'fro'"]),
    (lambda: fj.linalg.norm(np.ones(3), ord="fro", axis=0), FlowjitTypeError, ["linalg.norm", "matrix norm"]),
    (lambda: fj.linalg.norm(np.ones((2, 2, 2)), ord=1), FlowjitTypeError, ["linalg.norm", "axis"]),
    (lambda: fj.linalg.matrix_power(np.eye(2), 1.5), FlowjitTypeError, ["linalg.matrix_power", "int"]),
    (lambda: fj.linalg.cross(np.ones(2), np.ones(2)), ShapeError, ["linalg.cross", "size 3"]),
    (lambda: fj.linalg.outer(np.ones((2, 2)), np.ones(2)), ShapeError, ["linalg.outer", "1-D"]),
    (lambda: fj.linalg.qr(np.ones((2, 2)), mode="raw"), FlowjitTypeError, ["linalg.qr", "mode", "'reduced'"]),
    (lambda: fj.linalg.multi_dot([np.ones((2, 2, 2)), np.ones((2, 2))]), ShapeError, ["linalg.multi_dot", "arrays[0]"]),
    (lambda: fj.linalg.tensorinv(np.ones((2, 3)), ind=1), ShapeError, ["linalg.tensorinv", "prod"]),
    (lambda: fj.linalg.svd(np.ones((2, 2)), full_matrices="no"), FlowjitTypeError, ["linalg.svd", "full_matrices"]),
])
def test_bad_input_names_the_function_argument_and_line(call, error, words):
    assert_traced_error(call, error, words, "test_linalg.py")


@pytest.mark.parametrize("interpret", [False, True], ids=["compiled", "interpreted"])
def test_a_matrix_lapack_fails_on_gives_nan_and_the_rest_of_the_batch_is_computed(interpret):
    singular = np.stack([np.ones((2, 2)), 2 * np.eye(2)])
    f = fj.function(lambda a, s: (fj.linalg.inv(a), fj.linalg.solve(a, a), fj.linalg.cholesky(s),
                                  fj.linalg.svd(s + np.nan)[1], fj.linalg.det(a)), interpret=interpret)
    inv, solved, chol, s_nan, det = f(singular, -singular)
    assert np.isnan(inv[0]).all() and np.isnan(solved[0]).all() and np.isnan(chol).all() and np.isnan(s_nan).all()
    np.testing.assert_allclose(inv[1], 0.5 * np.eye(2))
    np.testing.assert_allclose(solved[1], np.eye(2))
    np.testing.assert_allclose(det, [0.0, 4.0])
