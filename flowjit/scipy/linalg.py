"""``flowjit.scipy.linalg``: scipy.linalg's names as compositions of ``flowjit.linalg``.

Every function here is built from traced flowjit ops (solve, cholesky, kron, gathers), so it
traces, compiles and differentiates to any order. ``sqrtm`` alone has a derivative rule of its
own (``fj.custom_jvp``: dX solves X dX + dX X = dA), because its value comes from an iteration
whose unrolled derivative would be both slow and only as exact as the iteration.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from flowjit.ir.errors import ShapeError
from flowjit.tracer import linalg as la
from flowjit.tracer.core import user_location
from flowjit.tracer.custom_gradients import custom_jvp
from flowjit.tracer.numpy import namespace as fnp
from flowjit.tracer.numpy import namespace as npx
from flowjit.tracer.numpy.operands import ArrayLike

__all__ = ["cho_factor", "cho_solve", "cholesky", "det", "inv", "solve", "solve_banded", "solve_sylvester",
           "solve_triangular", "sqrtm"]

# Denman-Beavers iterations with determinant scaling: quadratic convergence once scaled, so
# 30 steps reach float64 for any matrix sqrtm is defined on without being near-singular.
_SQRTM_STEPS = 30


def _square(x: Any, fname: str, arg: str = "a") -> Any:
    x = fnp.asarray(x)
    if x.ndim != 2 or x.shape[0] != x.shape[1]:
        raise ShapeError(f"scipy.linalg.{fname}: {arg} must be a square matrix, got shape {tuple(x.shape)} "
                         f"(at {user_location(3)})")
    return x


def inv(a: ArrayLike) -> Any:
    """The inverse of the square matrix ``a``, as ``scipy.linalg.inv``."""
    return la.inv(_square(a, "inv"))


def det(a: ArrayLike) -> Any:
    """The determinant of the square matrix ``a``, as ``scipy.linalg.det``."""
    return la.det(_square(a, "det"))


def solve(a: ArrayLike, b: ArrayLike, lower: bool = False, assume_a: str = "gen") -> Any:
    """x with ``a @ x = b`` for a square ``a`` and ``b`` of shape (n,) or (n, k), as
    ``scipy.linalg.solve``; ``lower`` and ``assume_a`` are accepted (LU serves every case)."""
    return la.solve(_square(a, "solve"), b)


def cholesky(a: ArrayLike, lower: bool = False) -> Any:
    """The Cholesky factor of the Hermitian positive-definite ``a``: upper (``U.T @ U = a``) by
    default as ``scipy.linalg.cholesky``, lower with ``lower=True``."""
    c = la.cholesky(_square(a, "cholesky"))
    return c if lower else fnp.swapaxes(c, -1, -2)


def cho_factor(a: ArrayLike, lower: bool = False) -> tuple[Any, bool]:
    """``(c, lower)`` for ``cho_solve``, as ``scipy.linalg.cho_factor``: c is the Cholesky factor
    (the other triangle is zero here, where scipy leaves garbage)."""
    return cholesky(a, lower=lower), lower


def cho_solve(c_and_lower: tuple[ArrayLike, bool], b: ArrayLike) -> Any:
    """x with ``a @ x = b`` from ``cho_factor(a)``'s ``(c, lower)``, as ``scipy.linalg.cho_solve``:
    two triangular solves."""
    c, lower = c_and_lower
    c = _square(c, "cho_solve", "c")
    ct = fnp.swapaxes(c, -1, -2)
    low, up = (c, ct) if lower else (ct, c)
    return la.solve(up, la.solve(low, b))


def solve_triangular(a: ArrayLike, b: ArrayLike, trans: int | str = 0, lower: bool = False,
                     unit_diagonal: bool = False) -> Any:
    """x with ``op(a) @ x = b`` for the triangle of ``a`` that ``lower`` names, as
    ``scipy.linalg.solve_triangular``: ``trans`` 0/'N', 1/'T' or 2/'C'; the other triangle of
    ``a`` is ignored, and its diagonal too with ``unit_diagonal``."""
    a = _square(a, "solve_triangular")
    t = npx.tril(a) if lower else npx.triu(a)
    if unit_diagonal:
        eye = fnp.eye(a.shape[0], dtype=a.dtype)
        t = t * (1 - eye) + eye
    if trans in (1, "T"):
        t = fnp.swapaxes(t, -1, -2)
    elif trans in (2, "C"):
        t = fnp.conj(fnp.swapaxes(t, -1, -2))
    elif trans not in (0, "N"):
        raise ValueError(f"scipy.linalg.solve_triangular: trans={trans!r} is not 0, 1, 2, 'N', 'T' or 'C' "
                         f"(at {user_location()})")
    return la.solve(t, b)


def solve_sylvester(a: ArrayLike, b: ArrayLike, q: ArrayLike) -> Any:
    """X with ``a @ X + X @ b = q`` (a: (n, n), b: (m, m), q: (n, m)), as
    ``scipy.linalg.solve_sylvester``. Solved as the (n m)-square linear system
    ``(kron(a, I_m) + kron(I_n, b.T)) vec(X) = vec(q)`` (row-major vec): O((n m)^3), meant for
    the small matrices of sqrtm's derivative and of tests, differentiable to any order."""
    a, b = _square(a, "solve_sylvester"), _square(b, "solve_sylvester", "b")
    q = fnp.asarray(q)
    n, m = a.shape[0], b.shape[0]
    if tuple(q.shape) != (n, m):
        raise ShapeError(f"scipy.linalg.solve_sylvester: q must have shape {(n, m)} for a {tuple(a.shape)} "
                         f"and b {tuple(b.shape)}, got {tuple(q.shape)} (at {user_location()})")
    system = npx.kron(a, fnp.eye(m, dtype=a.dtype)) + npx.kron(fnp.eye(n, dtype=b.dtype), fnp.swapaxes(b, 0, 1))
    return fnp.reshape(la.solve(system, fnp.reshape(q, (n * m,))), (n, m))


@custom_jvp
def _sqrtm(a: Any) -> Any:
    n = a.shape[0]
    eye = fnp.eye(n, dtype=a.dtype)
    y, z = a, eye
    for _ in range(_SQRTM_STEPS):
        # Scaling by |det(Y) det(Z)|^(-1/2n) (Higham's determinantal scaling) makes the
        # first steps converge as fast as the last; it tends to 1 as Y Z tends to I.
        mu = fnp.abs(la.det(y) * la.det(z)) ** (-0.5 / n)
        y, z = 0.5 * (mu * y + la.inv(z) / mu), 0.5 * (mu * z + la.inv(y) / mu)
    # Without a real principal root (an eigenvalue on the negative real axis) the iteration
    # does not converge: NaN then, as np.sqrt(-1.0), not a matrix whose square is not A.
    residual = la.norm(y @ y - a) / fnp.maximum(la.norm(a), np.finfo(a.dtype.np).tiny)
    return fnp.where(residual <= float(np.sqrt(np.finfo(a.dtype.np).eps)), y, np.nan)


@_sqrtm.defjvp
def _sqrtm_jvp(primals: tuple[Any], tangents: tuple[Any]) -> tuple[Any, Any]:
    x = _sqrtm(primals[0])
    return x, solve_sylvester(x, x, tangents[0])


def sqrtm(A: ArrayLike, disp: bool = True, blocksize: int = 64) -> Any:
    """The principal square root X of the square matrix ``A`` (X @ X = A), as
    ``scipy.linalg.sqrtm`` for a real A whose root is real (no eigenvalue on the closed negative
    real axis): scaled Denman-Beavers iterations, and the derivative dX that solves
    ``X dX + dX X = dA`` (forward, reverse, any order). A matrix without a real root (scipy
    returns a complex one) gives NaN. ``disp`` and ``blocksize`` are accepted."""
    return _sqrtm(_square(A, "sqrtm", "A"))


def solve_banded(l_and_u: tuple[int, int], ab: ArrayLike, b: ArrayLike, overwrite_ab: bool = False,
                 overwrite_b: bool = False, check_finite: bool = True) -> Any:
    """x with ``a @ x = b`` where ``a`` is banded and given in LAPACK band storage
    ``ab[u + i - j, j] = a[i, j]`` (``l_and_u = (l, u)``: sub- and super-diagonals), as
    ``scipy.linalg.solve_banded``. The dense matrix is gathered from ``ab`` and solved by LU:
    differentiable in ``ab`` and ``b``."""
    lo, up = (int(v) for v in l_and_u)
    ab = fnp.asarray(ab)
    if ab.ndim != 2 or ab.shape[0] != lo + up + 1:
        raise ShapeError(f"scipy.linalg.solve_banded: ab must have shape (l + u + 1, n) = ({lo + up + 1}, n) "
                         f"for (l, u) = {(lo, up)}, got {tuple(ab.shape)} (at {user_location()})")
    n = ab.shape[1]
    i, j = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    row = up + i - j
    inside = (row >= 0) & (row <= lo + up)
    flat = np.where(inside, row * n + j, 0)
    dense = fnp.where(inside, fnp.take(fnp.reshape(ab, (-1,)), flat), 0.0)
    return la.solve(dense, b)
