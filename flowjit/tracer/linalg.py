"""``fj.linalg``: the array API's ``linalg`` extension and NumPy's ``numpy.linalg``
(``norm``, ``inv``, ``solve``, ``cholesky``, ``det``, ``slogdet``, ``eigh``, ``svd``...),
traced, compiled and differentiated.

The decompositions bind the opaque primitives of ``flowjit.ir.primitives.decompositions``
(NumPy's LAPACK calls, batched over leading dimensions; JAX's gradients); everything else
(norms, ``det``, ``pinv``, ``matrix_power``, ``matrix_rank``, ``trace``...) is a composite of
registry primitives. Each function has NumPy's signature and is what ``np.linalg.<name>``
traces as on traced arrays. Where LAPACK fails on a matrix (singular, not positive-definite,
no convergence) its results are NaN, as in JAX, where NumPy raises LinAlgError.
Complex matrices (complex64, complex128) are taken wherever NumPy takes them: Hermitian for
``cholesky`` and ``eigh``, eigenvalues, singular values, norms and log|det| of the real dtype,
gradients in JAX's convention. Integer and bool matrices compute in float64, as NumPy's do;
float16 is refused, as NumPy refuses it (LAPACK has no half precision).
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from flowjit.ir.dtypes import float64
from flowjit.ir.errors import FlowjitTypeError, ShapeError
from flowjit.tracer.core import Operand, bind, user_location
from flowjit.tracer.numpy import (
    conversion,
    creation,
    indexing,
    layout,
    manipulation,
    matrices,
    products,
    reductions,
    ufuncs,
)
from flowjit.tracer.numpy.counterparts import numpy_counterpart
from flowjit.tracer.numpy.operands import ArrayLike, as_operand, cast, operand_value, promote

__all__: list[str] = [
    "cholesky", "cond", "cross", "det", "diagonal", "eig", "eigh", "eigvals", "eigvalsh", "inv", "lstsq", "matmul",
    "matrix_norm", "matrix_power", "matrix_rank", "matrix_transpose", "multi_dot", "norm", "outer", "pinv", "qr",
    "slogdet", "solve", "svd", "svdvals", "tensordot", "tensorinv", "tensorsolve", "trace", "vecdot", "vector_norm",
]


class SlogdetResult(NamedTuple):
    """``slogdet``'s result, as NumPy's: ``det == sign * exp(logabsdet)``."""

    sign: Any
    logabsdet: Any


class EighResult(NamedTuple):
    """``eigh``'s result, as NumPy's: eigenvalues ascending, eigenvectors as columns."""

    eigenvalues: Any
    eigenvectors: Any


class SVDResult(NamedTuple):
    """``svd``'s result, as NumPy's: ``a == U * S @ Vh`` (thin)."""

    U: Any
    S: Any
    Vh: Any


def _fail(fname: str, message: str) -> FlowjitTypeError:
    return FlowjitTypeError(f"linalg.{fname}: {message} (at {user_location()})")


_ALLOWED = "float32, float64, complex64, complex128, or ints/bool (computed in float64)"


def _float_matrix(x: ArrayLike, fname: str, arg: str = "a", square: bool = True) -> Operand:
    """x as a stack of f32/f64/c64/c128 matrices, or an error naming the function and the argument."""
    o = as_operand(x, arg)
    if o.dtype.is_float and o.dtype.itemsize < 4:
        raise _fail(fname, f"{arg} has dtype {o.dtype.name}, which linalg does not support (LAPACK has no "
                           f"half precision); allowed: {_ALLOWED}. Cast with .astype(np.float32)")
    if not (o.dtype.is_inexact or o.dtype.is_int or o.dtype.is_bool):
        raise _fail(fname, f"{arg} has dtype {o.dtype.name}; allowed: {_ALLOWED}")
    if len(o.shape) < 2:
        raise ShapeError(f"{arg} must be a stack of matrices [..., M, N] (at least 2-D), got shape "
                         f"{list(o.shape)}", op=f"linalg.{fname}", loc=user_location())
    if square and o.shape[-1] != o.shape[-2]:
        raise ShapeError(f"{arg} must be a stack of square matrices [..., N, N], got shape {list(o.shape)}",
                         op=f"linalg.{fname}", loc=user_location())
    return o if o.dtype.is_inexact else cast(o, float64)


def _bind(fname: str, prim: str, ops: Sequence[Operand], attrs: dict | None = None) -> Any:
    try:
        return bind(prim, list(ops), attrs or {})
    except ShapeError as e:
        raise ShapeError(e.reason, op=f"linalg.{fname}", loc=user_location()) from None


def _mT(x: Any) -> Any:
    return layout.swapaxes(x, -1, -2)


def _mH(x: Any) -> Any:
    """The conjugate transpose of each matrix (the transpose of a real one)."""
    t = _mT(x)
    return ufuncs.conj(t) if as_operand(t).dtype.is_complex else t


def _abs2(x: Any) -> Any:
    """|x|**2, real: x * x for a real x, re**2 + im**2 for a complex one (smooth at 0)."""
    if not as_operand(x).dtype.is_complex:
        return ufuncs.multiply(x, x)
    re, im = ufuncs.real(x), ufuncs.imag(x)
    return ufuncs.add(ufuncs.multiply(re, re), ufuncs.multiply(im, im))


# ---- decompositions ----------------------------------------------------------------------------


def inv(a: ArrayLike) -> Any:
    """The inverse of each matrix of ``a`` [..., N, N] (``np.linalg.inv``); a singular matrix
    gives NaN (JAX's answer: NumPy raises LinAlgError, which a compiled program cannot)."""
    return _bind("inv", "inv", [_float_matrix(a, "inv")])


def solve(a: ArrayLike, b: ArrayLike) -> Any:
    """x with ``a @ x == b`` (``np.linalg.solve``): a [..., N, N]; b [..., N, K], or [N] (one
    vector, NumPy 2's rule); batch dimensions broadcast."""
    ao = _float_matrix(a, "solve", "a")
    bo = as_operand(b, "b")
    if not (bo.dtype.is_inexact or bo.dtype.is_int or bo.dtype.is_bool) or len(bo.shape) == 0:
        raise _fail("solve", f"b must be a non-empty-rank float, complex, int or bool array, got {bo.aval}")
    d = promote(ao, bo)
    d = d if d.is_inexact and d.itemsize >= 4 else float64
    av, bv = operand_value(cast(ao, d)), operand_value(cast(bo, d))
    n = ao.shape[-1]
    vector = len(bo.shape) == 1
    if vector:
        bv = layout.expand_dims(bv, -1)
    bshape = tuple(layout.shape(bv))
    if bshape[-2] != n:
        raise ShapeError(f"b must have {n} rows to match a {list(ao.shape)}, got shape {list(bo.shape)}",
                         op="linalg.solve", loc=user_location())
    try:
        batch = np.broadcast_shapes(ao.shape[:-2], bshape[:-2])
    except ValueError:
        raise ShapeError(f"the batch dimensions of a {list(ao.shape)} and b {list(bo.shape)} do not broadcast",
                         op="linalg.solve", loc=user_location()) from None
    av = layout.broadcast_to(av, batch + (n, n))
    bv = layout.broadcast_to(bv, batch + bshape[-2:])
    x = _bind("solve", "solve", [as_operand(av), as_operand(bv)])
    return layout.squeeze(x, -1) if vector else x


def cholesky(a: ArrayLike, upper: bool = False) -> Any:
    """The Cholesky factor of each symmetric (Hermitian) positive-definite matrix of ``a``: lower
    L with ``L @ L^H == a`` (or upper ``U == L^H`` with ``upper=True``). Reads a's lower triangle, and
    its gradient is that of this function (zero above the diagonal); on a matrix built symmetric
    the chain rule gives JAX's. A matrix that is not positive-definite gives NaN (as in JAX)."""
    lower = _bind("cholesky", "cholesky", [_float_matrix(a, "cholesky")])
    return _mH(lower) if upper else lower


def slogdet(a: ArrayLike) -> SlogdetResult:
    """``(sign, logabsdet)`` of each matrix of ``a`` (``np.linalg.slogdet``); ``logabsdet`` is
    -inf and sign 0 for a singular matrix; of a complex matrix, sign is complex with |sign| = 1
    and logabsdet real. Differentiable through ``logabsdet`` (and a complex sign)."""
    sign, logdet = _bind("slogdet", "slogdet", [_float_matrix(a, "slogdet")])
    return SlogdetResult(sign, logdet)


def det(a: ArrayLike) -> Any:
    """The determinant of each matrix of ``a``: ``sign * exp(logabsdet)`` of one LU factorisation."""
    sign, logdet = _bind("det", "slogdet", [_float_matrix(a, "det")])
    return ufuncs.multiply(sign, ufuncs.exp(logdet))


def eigh(a: ArrayLike, UPLO: str = "L") -> EighResult:
    """Eigenvalues (ascending, real) and eigenvectors (columns) of each symmetric (Hermitian)
    matrix of ``a``, read from its lower (``UPLO='L'``) or upper (``'U'``) triangle. The gradient (JAX's rule,
    put in the triangle read) assumes distinct eigenvalues."""
    if UPLO not in ("L", "U"):
        raise _fail("eigh", f"UPLO={UPLO!r}: allowed 'L' or 'U'")
    w, v = _bind("eigh", "eigh", [_float_matrix(a, "eigh")], {"lower": UPLO == "L"})
    return EighResult(w, v)


def eigvalsh(a: ArrayLike, UPLO: str = "L") -> Any:
    """The eigenvalues (ascending) of each symmetric matrix of ``a`` (see ``eigh``)."""
    return eigh(a, UPLO).eigenvalues


class EigResult(NamedTuple):
    """``eig``'s result, as NumPy's: ``a @ eigenvectors == eigenvectors * eigenvalues``."""

    eigenvalues: Any
    eigenvectors: Any


def eig(a: ArrayLike) -> EigResult:
    """Eigenvalues and right eigenvectors (columns, unit norm, largest component real) of each
    general square matrix of ``a`` (``np.linalg.eig``), unordered. Both are complex even for a
    real ``a`` whose eigenvalues are all real (NumPy then gives real arrays, a dtype that depends
    on the values; JAX and the standard give complex). The gradient (JAX's) assumes distinct
    eigenvalues and differentiates through LAPACK's normalisation of the vectors."""
    w, v = _bind("eig", "eig", [_float_matrix(a, "eig")])
    return EigResult(w, v)


def eigvals(a: ArrayLike) -> Any:
    """The eigenvalues of each general square matrix of ``a``, complex and unordered (see ``eig``)."""
    return eig(a).eigenvalues


def svd(a: ArrayLike, full_matrices: bool = True, compute_uv: bool = True,
        hermitian: bool = False) -> Any:
    """``(U, S, Vh)`` with ``a == U[..., :K] * S @ Vh[..., :K, :]``, S descending, K = min(M, N)
    (``np.linalg.svd``); ``compute_uv=False`` gives S alone. ``hermitian`` is accepted for
    NumPy's signature and changes nothing but speed in NumPy; here it is the general SVD. The
    gradient (JAX's) assumes distinct non-zero singular values, and needs ``full_matrices=False``
    unless the matrices are square."""
    for name, v in (("full_matrices", full_matrices), ("compute_uv", compute_uv), ("hermitian", hermitian)):
        if not isinstance(v, (bool, np.bool_)):
            raise _fail("svd", f"{name}={v!r} must be True or False")
    o = _float_matrix(a, "svd", square=False)
    u, s, vh = _bind("svd", "svd", [o], {"full_matrices": bool(full_matrices) and bool(compute_uv)})
    return SVDResult(u, s, vh) if compute_uv else s


def svdvals(x: ArrayLike) -> Any:
    """The singular values of each matrix of ``x``, descending (the array API's ``svdvals``)."""
    return svd(x, full_matrices=False, compute_uv=False)


class QRResult(NamedTuple):
    """``qr``'s result, as NumPy's: ``a == Q @ R``."""

    Q: Any
    R: Any


def qr(a: ArrayLike, mode: str = "reduced") -> Any:
    """``(Q, R)`` with ``a == Q @ R``, Q with orthonormal columns and R upper-triangular
    (``np.linalg.qr``): ``mode='reduced'`` (K = min(M, N) columns), ``'complete'`` (Q square) or
    ``'r'`` (R alone). The gradient (JAX's) needs M >= N and the reduced mode."""
    if mode not in ("reduced", "complete", "r"):
        raise _fail("qr", f"mode={mode!r}; allowed 'reduced', 'complete' or 'r' (flowjit has no 'raw')")
    q, r = _bind("qr", "qr", [_float_matrix(a, "qr", square=False)], {"full_matrices": mode == "complete"})
    return r if mode == "r" else QRResult(q, r)


def multi_dot(arrays: Sequence[ArrayLike]) -> Any:
    """The product of the matrices in ``arrays`` in the cheapest order of the dynamic program
    NumPy's ``multi_dot`` uses; the first may be 1-D (a row) and the last 1-D (a column)."""
    if len(arrays) < 2:
        raise _fail("multi_dot", f"needs at least 2 arrays, got {len(arrays)}")
    ops = [as_operand(x, f"arrays[{i}]") for i, x in enumerate(arrays)]
    vals = [operand_value(o) for o in ops]
    first_1d, last_1d = len(ops[0].shape) == 1, len(ops[-1].shape) == 1
    if first_1d:
        vals[0] = layout.expand_dims(vals[0], 0)
    if last_1d:
        vals[-1] = layout.expand_dims(vals[-1], -1)
    shapes = [tuple(layout.shape(v)) for v in vals]
    for i, s in enumerate(shapes):
        if len(s) != 2:
            raise ShapeError(f"arrays[{i}] must be 2-D (the first and last may be 1-D), got shape {list(s)}",
                             op="linalg.multi_dot", loc=user_location())
    dims = [shapes[0][0]] + [s[1] for s in shapes]
    n = len(vals)
    cost = [[0] * n for _ in range(n)]
    split = [[0] * n for _ in range(n)]
    for length in range(1, n):
        for i in range(n - length):
            j = i + length
            cost[i][j], split[i][j] = builtins.min(
                (cost[i][k] + cost[k + 1][j] + dims[i] * dims[k + 1] * dims[j + 1], k) for k in range(i, j))

    def product(i: int, j: int) -> Any:
        if i == j:
            return vals[i]
        return products.matmul(product(i, split[i][j]), product(split[i][j] + 1, j))

    out = product(0, n - 1)
    if first_1d:
        out = layout.squeeze(out, 0)
    if last_1d:
        out = layout.squeeze(out, -1)
    return out


def cond(x: ArrayLike, p: Any = None) -> Any:
    """The condition number of each matrix of ``x`` in norm ``p`` (``np.linalg.cond``): the ratio of
    the extreme singular values for None, 2 and -2, else ``norm(x, p) * norm(inv(x), p)``."""
    if p is None or (not isinstance(p, str) and p in (2, -2)):
        s = svdvals(x)
        big, small = reductions.max(s, axis=-1), reductions.min(s, axis=-1)
        return ufuncs.divide(small, big) if p == -2 else ufuncs.divide(big, small)
    _float_matrix(x, "cond")
    return ufuncs.multiply(matrix_norm(x, ord=p), matrix_norm(inv(x), ord=p))


def tensorinv(a: ArrayLike, ind: int = 2) -> Any:
    """The inverse of ``a`` as a tensor map of its first ``ind`` axes onto the rest
    (``np.linalg.tensorinv``): the result has shape ``a.shape[ind:] + a.shape[:ind]``."""
    o = as_operand(a, "a")
    if not isinstance(ind, (int, np.integer)) or ind <= 0:
        raise _fail("tensorinv", f"ind={ind!r} must be a positive int")
    rows, cols = o.shape[:ind], o.shape[ind:]
    if int(np.prod(rows)) != int(np.prod(cols)):
        raise ShapeError(f"a of shape {list(o.shape)} must have prod(a.shape[:ind]) == prod(a.shape[ind:]) "
                         f"(ind={ind})", op="linalg.tensorinv", loc=user_location())
    n = int(np.prod(rows))
    return layout.reshape(inv(layout.reshape(operand_value(o), (n, n))), cols + rows)


def tensorsolve(a: ArrayLike, b: ArrayLike, axes: Any = None) -> Any:
    """x with ``tensordot(a, x, x.ndim) == b`` (``np.linalg.tensorsolve``); ``axes`` moves those axes
    of a to the end first."""
    o, bo = as_operand(a, "a"), as_operand(b, "b")
    av = operand_value(o)
    nd = len(o.shape)
    if axes is not None:
        moved = [ax % nd for ax in axes]
        av = layout.transpose(av, [i for i in range(nd) if i not in moved] + moved)
    shape = tuple(layout.shape(av))
    x_shape = shape[len(bo.shape):]
    n = int(np.prod(x_shape))
    if shape[:len(bo.shape)] != bo.shape or int(np.prod(bo.shape)) != n:
        raise ShapeError(f"a of shape {list(o.shape)} must start with b's shape {list(bo.shape)} and square up "
                         "(prod of the rest == b.size)", op="linalg.tensorsolve", loc=user_location())
    x = solve(layout.reshape(av, (n, n)), layout.ravel(operand_value(bo)))
    return layout.reshape(x, x_shape)


# ---- composites ------------------------------------------------------------------------------


def matrix_transpose(x: ArrayLike) -> Any:
    """Each matrix of ``x`` [..., M, N] transposed to [..., N, M]."""
    o = as_operand(x, "x")
    if len(o.shape) < 2:
        raise ShapeError(f"x must be at least 2-D, got shape {list(o.shape)}", op="linalg.matrix_transpose",
                         loc=user_location())
    return _mT(operand_value(o))


def diagonal(x: ArrayLike, offset: int = 0) -> Any:
    """The ``offset`` diagonal of each matrix of ``x`` [..., M, N] (the array API's: the last two
    axes, unlike ``np.diagonal``'s first two)."""
    o = as_operand(x, "x")
    if len(o.shape) < 2:
        raise ShapeError(f"x must be at least 2-D, got shape {list(o.shape)}", op="linalg.diagonal",
                         loc=user_location())
    if not isinstance(offset, (int, np.integer)) or isinstance(offset, bool):
        raise _fail("diagonal", f"offset={offset!r} must be an int")
    m, n = o.shape[-2:]
    rows = builtins.max(0, builtins.min(m, n - offset) if offset >= 0 else builtins.min(m + offset, n))
    batch = o.shape[:-2]
    if rows == 0:
        return creation.zeros(batch + (0,), o.dtype)
    # Flattened, the k-th diagonal element sits at (r0 + k) * n + c0 + k: a stride of n + 1.
    r0, c0 = (0, offset) if offset >= 0 else (-offset, 0)
    flat = layout.reshape(operand_value(o), batch + (m * n,))
    idx = np.arange(rows, dtype=np.int64) * (n + 1) + r0 * n + c0
    return indexing.take(flat, idx, axis=len(batch))


def trace(x: ArrayLike, offset: int = 0, dtype: Any = None) -> Any:
    """The sum of the ``offset`` diagonal of each matrix of ``x`` [..., M, N] (the array API's:
    the last two axes); ints sum in int64 as NumPy's does unless ``dtype`` is given."""
    return reductions.sum(diagonal(x, offset), axis=-1, dtype=dtype)


def outer(x1: ArrayLike, x2: ArrayLike) -> Any:
    """The outer product of two 1-D arrays (the array API's ``linalg.outer``: 1-D only)."""
    a, b = as_operand(x1, "x1"), as_operand(x2, "x2")
    if len(a.shape) != 1 or len(b.shape) != 1:
        raise ShapeError(f"x1 and x2 must be 1-D, got shapes {list(a.shape)} and {list(b.shape)}; "
                         "np.outer flattens, this does not", op="linalg.outer", loc=user_location())
    return products.outer(operand_value(a), operand_value(b))


def cross(x1: ArrayLike, x2: ArrayLike, axis: int = -1) -> Any:
    """The cross product of 3-vectors along ``axis`` (other dimensions broadcast)."""
    a, b = as_operand(x1, "x1"), as_operand(x2, "x2")
    for name, o in (("x1", a), ("x2", b)):
        if not o.shape or not -len(o.shape) <= axis < len(o.shape) or o.shape[axis] != 3:
            raise ShapeError(f"{name} must have size 3 along axis {axis}, got shape {list(o.shape)}",
                             op="linalg.cross", loc=user_location())
    av, bv = layout.moveaxis(operand_value(a), axis, -1), layout.moveaxis(operand_value(b), axis, -1)

    def part(v: Any, i: int) -> Any:
        return indexing.take(v, i, axis=-1)

    comps = [ufuncs.subtract(ufuncs.multiply(part(av, j), part(bv, k)), ufuncs.multiply(part(av, k), part(bv, j)))
             for j, k in ((1, 2), (2, 0), (0, 1))]
    return layout.moveaxis(manipulation.stack(comps, axis=-1), -1, axis)


def matmul(x1: ArrayLike, x2: ArrayLike) -> Any:
    """``x1 @ x2`` (the array API's ``linalg.matmul``)."""
    return products.matmul(x1, x2)


def tensordot(x1: ArrayLike, x2: ArrayLike, axes: Any = 2) -> Any:
    """``np.tensordot`` (the array API's ``linalg.tensordot``)."""
    return products.tensordot(x1, x2, axes)


def vecdot(x1: ArrayLike, x2: ArrayLike, axis: int = -1) -> Any:
    """The dot product of vectors along ``axis`` (other dimensions broadcast); of complex
    vectors ``sum(conj(x1) * x2)``, as the standard and NumPy define it."""
    a, b = as_operand(x1, "x1"), as_operand(x2, "x2")
    for name, o in (("x1", a), ("x2", b)):
        if not o.shape or not -len(o.shape) <= axis < len(o.shape):
            raise ShapeError(f"axis {axis} is out of range for {name} of shape {list(o.shape)}",
                             op="linalg.vecdot", loc=user_location())
    if a.shape[axis] != b.shape[axis]:
        raise ShapeError(f"x1 {list(a.shape)} and x2 {list(b.shape)} differ in length along axis {axis}",
                         op="linalg.vecdot", loc=user_location())
    prod = ufuncs.multiply(ufuncs.conj(operand_value(a)), operand_value(b))
    # In the inputs' promoted dtype, as np.vecdot and the standard: a sum alone widens small ints.
    return reductions.sum(prod, axis=axis, dtype=as_operand(prod).dtype)


def _float_array(x: ArrayLike, fname: str) -> Any:
    o = as_operand(x, "x")
    if not (o.dtype.is_inexact or o.dtype.is_int or o.dtype.is_bool):
        raise _fail(fname, f"x has dtype {o.dtype.name}; allowed: floats, complex, ints, bool")
    return operand_value(o if o.dtype.is_inexact else cast(o, float64))


def _axis_tuple(axis: Any, ndim: int, fname: str) -> tuple[int, ...]:
    if axis is None:
        return tuple(range(ndim))
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    if not builtins.all(isinstance(a, (int, np.integer)) and -ndim <= a < ndim for a in axes):
        raise _fail(fname, f"axis={axis!r} must be ints in [-{ndim}, {ndim}) for a {ndim}-D x")
    out = tuple(int(a) % ndim for a in axes)
    if len(set(out)) != len(out):
        raise _fail(fname, f"axis={axis!r} repeats an axis")
    return out


def vector_norm(x: ArrayLike, axis: Any = None, keepdims: bool = False, ord: Any = 2) -> Any:  # noqa: A002
    """The ``ord``-norm of ``x`` over ``axis`` (all axes when None), as one vector: ``ord`` is any
    real p (``sum(|x|**p)**(1/p)``), ``inf``, ``-inf`` or 0 (the count of non-zeros)."""
    v = _float_array(x, "vector_norm")
    nd = len(layout.shape(v))
    axes = _axis_tuple(axis, nd, "vector_norm")
    if isinstance(ord, (bool, np.bool_)) or not isinstance(ord, (int, float, np.integer, np.floating)):
        raise _fail("vector_norm", f"ord={ord!r} must be a number, inf or -inf")
    a = ufuncs.abs(v)
    if ord == 2:
        return ufuncs.sqrt(reductions.sum(_abs2(v), axis=axes, keepdims=keepdims))
    if ord == np.inf:
        return reductions.max(a, axis=axes, keepdims=keepdims)
    if ord == -np.inf:
        return reductions.min(a, axis=axes, keepdims=keepdims)
    if ord == 0:
        return reductions.sum(conversion.astype(ufuncs.not_equal(a, 0), as_operand(a).dtype), axis=axes,
                              keepdims=keepdims)
    if ord == 1:
        return reductions.sum(a, axis=axes, keepdims=keepdims)
    return ufuncs.power(reductions.sum(ufuncs.power(a, float(ord)), axis=axes, keepdims=keepdims), 1.0 / float(ord))


def matrix_norm(x: ArrayLike, keepdims: bool = False, ord: Any = "fro") -> Any:  # noqa: A002
    """The ``ord`` norm of each matrix of ``x`` [..., M, N]: ``'fro'``, ``'nuc'`` (sum of singular
    values), 1 / -1 (max / min column sum of |x|), inf / -inf (rows), 2 / -2 (largest / smallest
    singular value)."""
    return _matrix_norm(x, (-2, -1), keepdims, ord, "matrix_norm")


def _matrix_norm(x: ArrayLike, axes: tuple[int, int], keepdims: bool, ord: Any, fname: str) -> Any:
    v = _float_array(x, fname)
    nd = len(layout.shape(v))
    if nd < 2:
        raise ShapeError(f"x must be at least 2-D for a matrix norm, got shape {list(layout.shape(v))}",
                         op=f"linalg.{fname}", loc=user_location())
    r, c = (a % nd for a in axes)
    if r == c:
        raise _fail(fname, f"axis={axes} names one axis twice")
    m = layout.moveaxis(v, (r, c), (-2, -1))
    named = isinstance(ord, str) and ord in ("fro", "nuc")
    numeric = (isinstance(ord, (int, float, np.integer, np.floating)) and not isinstance(ord, (bool, np.bool_))
               and ord in (1, -1, 2, -2, np.inf, -np.inf))
    if not (named or numeric):
        raise _fail(fname, f"ord={ord!r}: allowed 'fro', 'nuc', 1, -1, 2, -2, inf, -inf")
    if ord == "fro":
        out = ufuncs.sqrt(reductions.sum(_abs2(m), axis=(-2, -1)))
    elif ord == "nuc":
        out = reductions.sum(svdvals(m), axis=-1)
    elif ord in (2, -2):
        s = svdvals(m)
        out = reductions.max(s, axis=-1) if ord == 2 else reductions.min(s, axis=-1)
    else:
        sums = reductions.sum(ufuncs.abs(m), axis=-2 if ord in (1, -1) else -1)
        out = reductions.max(sums, axis=-1) if ord > 0 else reductions.min(sums, axis=-1)
    if keepdims:
        out = layout.expand_dims(out, tuple(sorted((r, c))))
    return out


def norm(x: ArrayLike, ord: Any = None, axis: Any = None, keepdims: bool = False) -> Any:  # noqa: A002
    """``np.linalg.norm``: with ``axis`` None, the 2-norm of x flattened (``ord`` None), or of x as
    a vector (1-D) or matrix (2-D) for a given ``ord``; an int axis takes vector norms, a pair of
    axes matrix norms (see ``vector_norm`` and ``matrix_norm`` for the ``ord`` each allows)."""
    nd = len(as_operand(x, "x").shape)
    if axis is None:
        if ord is None:
            out = vector_norm(x, None, False, 2)
            return layout.reshape(out, (1,) * nd) if keepdims else out
        if nd == 1:
            return vector_norm(x, 0, keepdims, ord)
        if nd == 2:
            return _matrix_norm(x, (0, 1), keepdims, ord, "norm")
        raise _fail("norm", f"ord={ord!r} with axis=None needs a 1-D or 2-D x, got {nd}-D; give axis")
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    if len(axes) == 1:
        if isinstance(ord, str):
            raise _fail("norm", f"ord={ord!r} is a matrix norm; a vector norm (one axis) takes a number")
        return vector_norm(x, axes[0], keepdims, 2 if ord is None else ord)
    if len(axes) == 2:
        _axis_tuple(axes, nd, "norm")
        return _matrix_norm(x, axes, keepdims, "fro" if ord is None else ord, "norm")
    raise _fail("norm", f"axis={axis!r}: allowed an int (vector norm) or a pair of ints (matrix norm)")


def matrix_power(a: ArrayLike, n: int) -> Any:
    """``a`` [..., M, M] to the integer power ``n`` by repeated squaring (n < 0: of ``inv(a)``;
    n == 0: the identity)."""
    if not isinstance(n, (int, np.integer)) or isinstance(n, bool):
        raise _fail("matrix_power", f"n={n!r} must be an int")
    o = as_operand(a, "a")
    if len(o.shape) < 2 or o.shape[-1] != o.shape[-2]:
        raise ShapeError(f"a must be a stack of square matrices [..., M, M], got shape {list(o.shape)}",
                         op="linalg.matrix_power", loc=user_location())
    if n == 0:
        return layout.broadcast_to(matrices.eye(o.shape[-1], dtype=o.dtype), o.shape)
    base = inv(a) if n < 0 else operand_value(o)
    n = abs(int(n))
    result = None
    while n:
        if n & 1:
            result = base if result is None else products.matmul(result, base)
        n >>= 1
        if n:
            base = products.matmul(base, base)
    return result


def _per_matrix(tolerance: Any) -> Any:
    """A tolerance given per matrix (an array of the stack's batch shape, as NumPy and the
    standard take ``rtol``/``tol``/``rcond``) against the [..., K] singular values: a trailing axis."""
    return layout.expand_dims(tolerance, -1) if layout.ndim(tolerance) else tolerance


def pinv(a: ArrayLike, rcond: Any = None, hermitian: bool = False, *, rtol: Any = None) -> Any:
    """The Moore-Penrose pseudo-inverse of each matrix of ``a`` through its SVD: singular values
    at or below ``rtol`` (or NumPy's ``rcond``) times the largest count as zero. The default
    rtol is ``max(M, N) * eps``, the array API's."""
    o = _float_matrix(a, "pinv", square=False)
    m, n = o.shape[-2:]
    if m == 0 or n == 0:  # no singular value to take the largest of: the [..., N, M] zeros, as NumPy's
        return creation.zeros((*o.shape[:-2], n, m), o.dtype)
    cut = rtol if rtol is not None else rcond
    if cut is None:
        cut = builtins.max(m, n) * float(np.finfo(o.dtype.np).eps)
    u, s, vh = svd(operand_value(o), full_matrices=False)
    big = ufuncs.greater(s, ufuncs.multiply(reductions.max(s, axis=-1, keepdims=True), _per_matrix(cut)))
    s_inv = ufuncs.where(big, ufuncs.divide(1.0, ufuncs.where(big, s, 1.0)), 0.0)
    return products.matmul(_mH(vh), ufuncs.multiply(layout.expand_dims(s_inv, -1), _mH(u)))


class LstsqResult(NamedTuple):
    """``lstsq``'s result, NumPy's four values."""

    x: Any
    residuals: Any
    rank: Any
    s: Any


def lstsq(a: ArrayLike, b: ArrayLike, rcond: Any = None) -> LstsqResult:
    """The least-squares solution x of ``a @ x ~= b`` (``np.linalg.lstsq``): the minimum-norm x
    through the SVD of a [M, N], singular values at or below ``rcond`` (default ``eps * max(M, N)``)
    times the largest counted as zero; ``(x, residuals, rank, s)``, rank an int32 as NumPy's.
    residuals (the squared norm of each column of ``b - a @ x``, real for a complex b) has shape
    (K,) ((1,) for a 1-D b) when M > N, else (0,). Unlike NumPy's, they are given for a
    rank-deficient a too: the size cannot depend on the rank."""
    ao = _float_matrix(a, "lstsq", square=False)
    bo = as_operand(b, "b")
    if len(ao.shape) != 2 or len(bo.shape) not in (1, 2) or bo.shape[0] != ao.shape[0]:
        raise ShapeError(f"a must be [M, N] and b [M] or [M, K] with the same M, got a {list(ao.shape)} and "
                         f"b {list(bo.shape)}", op="linalg.lstsq", loc=user_location())
    m, n = ao.shape
    cut = float(np.finfo(ao.dtype.np).eps) * builtins.max(m, n) if rcond is None else rcond
    av, bv = operand_value(ao), operand_value(bo)
    x = products.matmul(pinv(av, rcond=cut), bv)
    s = svdvals(av)
    rank = conversion.astype(matrix_rank(av, rtol=cut), np.int32)  # LAPACK's int, as NumPy's lstsq gives it
    if m > n:
        r = ufuncs.subtract(bv, products.matmul(av, x))
        residuals = reductions.sum(_abs2(r), axis=0)
        residuals = layout.reshape(residuals, (1,)) if len(bo.shape) == 1 else residuals
    else:
        residuals = creation.zeros((0,), as_operand(s).dtype)
    return LstsqResult(x, residuals, rank, s)


def matrix_rank(A: ArrayLike, tol: Any = None, hermitian: bool = False, *, rtol: Any = None) -> Any:
    """The number of singular values of each matrix of ``A`` above ``tol`` (absolute, NumPy's) or
    ``rtol`` times the largest (default ``max(M, N) * eps``); int64. A 0-D or 1-D ``A`` is a
    vector, rank 1 unless all zeros, as NumPy's."""
    o = as_operand(A, "A")
    if len(o.shape) < 2:
        return conversion.astype(reductions.any(ufuncs.not_equal(operand_value(o), 0)), np.int64)
    o = _float_matrix(A, "matrix_rank", "A", square=False)
    m, n = o.shape[-2:]
    if m == 0 or n == 0:  # no singular value to take the largest of: rank 0, as NumPy's
        return creation.zeros(o.shape[:-2], np.int64)
    s = svdvals(operand_value(o))
    if tol is not None:
        limit = _per_matrix(tol)
    else:
        r = rtol if rtol is not None else builtins.max(m, n) * float(np.finfo(o.dtype.np).eps)
        limit = ufuncs.multiply(reductions.max(s, axis=-1, keepdims=True), _per_matrix(r))
    return reductions.sum(conversion.astype(ufuncs.greater(s, limit), np.int64), axis=-1)


for _name in __all__:
    numpy_counterpart(globals()[_name], f"linalg.{_name}")
