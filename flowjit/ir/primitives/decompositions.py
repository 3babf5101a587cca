"""Matrix decompositions and sorting: the ops whose reference is a LAPACK call or a sort.

Each is ``opaque`` to fusion. The decompositions run NumPy's own routine (LAPACK through
``numpy.linalg``) through a backend's per-kernel driver, batched over the leading dimensions
as NumPy batches them; ``sort`` and ``argsort`` (roles ``sort``/``argsort``) lower to loop-IR
kernels of their own, a stable merge sort, and run in the native program. Matrix operands
are ``[..., m, n]`` in f32, f64, c64 or c128 (LAPACK has no f16; the tracer casts); a complex
matrix's eigenvalues, singular values and log|det| are of its real dtype, as NumPy's. The VJP
rules are JAX's: ``inv``, ``solve``, ``cholesky``, ``slogdet``, ``qr``; ``eigh`` for distinct
eigenvalues and ``svd`` for distinct (non-zero) singular values, where the derivative of the
vectors exists. Complex gradients follow JAX's convention (the transpose of the JVP: for a
real loss, dL/dx - i dL/dy). ``argsort`` has no gradient (an index); ``sort``'s scatters the
cotangent back through ``argsort``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from flowjit.ir.dtypes import ALL_DTYPES, complex64, complex128, float32, float64, int32, int64
from flowjit.ir.errors import ShapeError
from flowjit.ir.registry import Literal, attr, declare, defdecompose, defvjp, normalize_axis
from flowjit.ir.types import TensorType

LAPACK_DTYPES = (float32, float64, complex64, complex128)


def _matrix(t: TensorType, square: bool = True) -> tuple[int, int]:
    """The matrix dims of ``t`` (rank >= 2, square when asked), or ShapeError."""
    if t.ndim < 2:
        raise ShapeError(f"operand must be a stack of matrices [..., m, n] (rank >= 2), got {t}")
    m, n = t.shape[-2:]
    if square and m != n:
        raise ShapeError(f"operand must be a stack of square matrices [..., n, n], got {t}")
    return m, n


def _lapack(fn):
    """``fn`` (a NumPy LAPACK call over a stack of matrices ``a`` and matching operands) with
    JAX's answer where LAPACK fails on a matrix (singular for inv/solve, not positive-definite
    for cholesky, no convergence on NaN for eigh/svd): NaN in every result of that matrix, the
    rest of the batch computed. NumPy raises LinAlgError for the whole batch instead; a compiled
    program, and the interpreter on arbitrary inputs, must not stop there."""
    def impl(a: np.ndarray, *rest: np.ndarray, **attrs: object):
        try:
            return fn(a, *rest, **attrs)
        except np.linalg.LinAlgError:
            pass
        batch = a.shape[:-2]
        failed = np.zeros(batch, bool)
        usable = np.array(a, copy=True)
        for idx in np.ndindex(batch):
            try:
                fn(a[idx], *(x[idx] for x in rest), **attrs)
            except np.linalg.LinAlgError:
                failed[idx] = True
                usable[idx] = np.eye(*a.shape[-2:], dtype=a.dtype)  # any matrix LAPACK takes
        out = fn(usable, *rest, **attrs)
        for r in out if isinstance(out, tuple) else (out,):
            r[failed] = np.nan
        return out
    return impl


# ---- inv, solve, cholesky, slogdet ------------------------------------------------------------
def _square_rule(in_types: Sequence[TensorType]) -> TensorType:
    _matrix(in_types[0])
    return in_types[0]


def _solve_rule(in_types: Sequence[TensorType]) -> TensorType:
    a, b = in_types
    n, _ = _matrix(a)
    if b.dtype != a.dtype:
        raise ShapeError(f"a {a} and b {b} must have one dtype; cast one with .astype()")
    if b.ndim != a.ndim or b.shape[:-2] != a.shape[:-2] or b.shape[-2] != n:
        raise ShapeError(f"b must be [..., {n}, k] with a's batch dimensions {list(a.shape[:-2])}, "
                         f"got a {a} and b {b}")
    return b


def _slogdet_rule(in_types: Sequence[TensorType]) -> list[TensorType]:
    a = in_types[0]
    _matrix(a)
    # A complex matrix's sign is complex (|sign| = 1); log|det| is real, as NumPy's.
    return [a.with_shape(a.shape[:-2]), TensorType(a.shape[:-2], a.dtype.real_dtype)]


def _real_dtype(a: np.ndarray) -> np.dtype:
    return np.finfo(a.dtype).dtype


def _slogdet_impl(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    sign, logdet = np.linalg.slogdet(a)
    return np.asarray(sign, a.dtype), np.asarray(logdet, _real_dtype(a))


declare("inv", kind="opaque", role="inverse", maps_leading_dims=True, rule=_square_rule,
        impl=_lapack(lambda a: np.linalg.inv(a).astype(a.dtype)),
        dtypes=LAPACK_DTYPES, doc="np.linalg.inv over [..., n, n] (LAPACK getrf/getri); singular: LinAlgError")
declare("solve", kind="opaque", role="solve", maps_leading_dims=True, rule=_solve_rule, arity=2, dtypes=LAPACK_DTYPES,
        impl=_lapack(lambda a, b: np.linalg.solve(a, b).astype(a.dtype)),
        doc="x with a @ x == b for a [..., n, n] and b [..., n, k] of the same batch dims (LAPACK gesv)")
declare("cholesky", kind="opaque", role="cholesky", maps_leading_dims=True, rule=_square_rule, dtypes=LAPACK_DTYPES,
        impl=_lapack(lambda a: np.linalg.cholesky(a).astype(a.dtype)),
        doc="lower-triangular L with L @ L^H == a, reading a's lower triangle (and the real part of its "
            "diagonal) (LAPACK potrf)")
declare("slogdet", kind="opaque", role="log_determinant", maps_leading_dims=True, rule=_slogdet_rule,
        impl=_lapack(_slogdet_impl), dtypes=LAPACK_DTYPES,
        doc="(sign, log|det|) of [..., n, n], two results of shape [...] (LAPACK getrf)")


# ---- eigh, svd ----------------------------------------------------------------------------------
def _eigh_rule(in_types: Sequence[TensorType], *, lower: bool) -> list[TensorType]:
    a = in_types[0]
    _matrix(a)
    return [TensorType(a.shape[:-1], a.dtype.real_dtype), a]


def _eigh_impl(a: np.ndarray, *, lower: bool) -> tuple[np.ndarray, np.ndarray]:
    w, v = np.linalg.eigh(a, UPLO="L" if lower else "U")
    return w.astype(_real_dtype(a), copy=False), v.astype(a.dtype, copy=False)


def _svd_rule(in_types: Sequence[TensorType], *, full_matrices: bool) -> list[TensorType]:
    a = in_types[0]
    m, n = _matrix(a, square=False)
    k = min(m, n)
    batch = a.shape[:-2]
    um, vn = (m, n) if full_matrices else (k, k)
    return [a.with_shape(batch + (m, um)), TensorType(batch + (k,), a.dtype.real_dtype),
            a.with_shape(batch + (vn, n))]


def _svd_impl(a: np.ndarray, *, full_matrices: bool) -> tuple[np.ndarray, ...]:
    u, s, vh = np.linalg.svd(a, full_matrices=full_matrices)
    return u.astype(a.dtype, copy=False), s.astype(_real_dtype(a), copy=False), vh.astype(a.dtype, copy=False)


declare("eigh", kind="opaque", role="symmetric_eigen", maps_leading_dims=True, rule=_eigh_rule,
        impl=_lapack(_eigh_impl), dtypes=LAPACK_DTYPES,
        attrs={"lower": attr("bool", True)},
        doc="(eigenvalues ascending [..., n] of the real dtype, eigenvectors as columns [..., n, n]) of "
            "the symmetric (Hermitian) matrix whose lower (or upper) triangle is a's (LAPACK syevd/heevd)")
declare("svd", kind="opaque", role="singular_values", maps_leading_dims=True, rule=_svd_rule, impl=_lapack(_svd_impl),
        dtypes=LAPACK_DTYPES,
        attrs={"full_matrices": attr("bool", False)},
        doc="(u, s, vh) with a == u[..., :k] * s @ vh[..., :k, :], s descending [..., k] of the real "
            "dtype, k = min(m, n); "
            "u is [..., m, k] and vh [..., k, n], or [..., m, m] and [..., n, n] with full_matrices "
            "(LAPACK gesdd)")


def _eig_rule(in_types: Sequence[TensorType]) -> list[TensorType]:
    a = in_types[0]
    _matrix(a)
    c = a.dtype.complex_dtype
    return [TensorType(a.shape[:-1], c), TensorType(a.shape, c)]


def _eig_impl(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    # Complex even where every eigenvalue is real (NumPy then gives a real array: a dtype that
    # depends on the values, which a traced program cannot have; JAX's and the standard's answer).
    w, v = np.linalg.eig(a)
    c = np.result_type(a.dtype, np.complex64)
    return w.astype(c, copy=False), v.astype(c, copy=False)


declare("eig", kind="opaque", role="general_eigen", maps_leading_dims=True, rule=_eig_rule,
        impl=_lapack(_eig_impl), dtypes=LAPACK_DTYPES,
        doc="(eigenvalues [..., n], right eigenvectors as columns [..., n, n]) of a general matrix, both "
            "complex (of a's precision), unordered, each vector of unit norm with its largest component "
            "real (LAPACK geev)")


def _qr_rule(in_types: Sequence[TensorType], *, full_matrices: bool) -> list[TensorType]:
    a = in_types[0]
    m, n = _matrix(a, square=False)
    k = m if full_matrices else min(m, n)
    return [a.with_shape(a.shape[:-2] + (m, k)), a.with_shape(a.shape[:-2] + (k, n))]


def _qr_impl(a: np.ndarray, *, full_matrices: bool) -> tuple[np.ndarray, np.ndarray]:
    q, r = np.linalg.qr(a, mode="complete" if full_matrices else "reduced")
    return q.astype(a.dtype, copy=False), r.astype(a.dtype, copy=False)


declare("qr", kind="opaque", role="orthogonal_triangular", maps_leading_dims=True, rule=_qr_rule,
        impl=_lapack(_qr_impl), dtypes=LAPACK_DTYPES,
        attrs={"full_matrices": attr("bool", False)},
        doc="(q, r) with a == q @ r, q orthonormal (unitary) columns [..., m, k], r upper-triangular [..., k, n], "
            "k = min(m, n), or m with full_matrices (LAPACK geqrf/orgqr)")



def _identity_or_zeros(e, t: TensorType):
    """An empty matrix's factor of type ``t`` as NumPy gives it: the identity where ``t`` is a
    stack of square, non-empty matrices (full_matrices' ``u``, ``vh`` or ``q``), zeros
    otherwise (an empty array, singular values, ``r``)."""
    if t.ndim < 2 or t.shape[-1] != t.shape[-2] or t.shape[-1] == 0:
        return e.zeros(t)
    rows = e.iota(shape=t.shape, dimension=t.ndim - 2, dtype=int32)
    cols = e.iota(shape=t.shape, dimension=t.ndim - 1, dtype=int32)
    return e.cast(e.eq(rows, cols), dtype=t.dtype)


def _empty_factors(rule):
    # A matrix without rows or columns has no singular values and no reflectors: its factors
    # follow from the shapes, so LAPACK (which the native plan does not call on them) is not
    # needed; other matrices are left to it.
    def decompose(e, a, **attrs):
        if 0 not in a.type.shape[-2:]:
            return None
        return [_identity_or_zeros(e, t) for t in rule([a.type], **attrs)]
    return decompose


defdecompose("svd", _empty_factors(_svd_rule))
defdecompose("qr", _empty_factors(_qr_rule))

# ---- argsort ------------------------------------------------------------------------------------
def _argsort_rule(in_types: Sequence[TensorType], *, axis: int, descending: bool, stable: bool = True
                  ) -> TensorType:
    x = in_types[0]
    if x.ndim == 0:
        raise ShapeError(f"operand must have rank >= 1, got {x}")
    normalize_axis(axis, x.ndim)
    return TensorType(x.shape, int64)


def _argsort_impl(x: np.ndarray, *, axis: int, descending: bool, stable: bool) -> np.ndarray:
    kind = "stable" if stable else None  # NumPy's default: introsort, several times faster
    if not descending:
        return np.argsort(x, axis=axis, kind=kind).astype(np.int64, copy=False)
    # Descending: equal elements keep their order (when stable). Sorting the reversed array
    # and reversing the result does that for every dtype (negation would not: unsigned ints,
    # bools, -0.0).
    n = x.shape[axis]
    flipped = np.flip(x, axis=axis)
    return (n - 1 - np.flip(np.argsort(flipped, axis=axis, kind=kind), axis=axis)).astype(np.int64)


def _sort_impl(x: np.ndarray, *, axis: int, descending: bool) -> np.ndarray:
    out = np.sort(x, axis=axis)
    return np.ascontiguousarray(np.flip(out, axis=axis)) if descending else out


# sort is its own op, not a gather through argsort: NumPy's value sort is several times
# faster than its stable argsort (about 0.4 against 7 ms for 100,000 float64).


def _sort_rule(in_types: Sequence[TensorType], *, axis: int, descending: bool) -> TensorType:
    _argsort_rule(in_types, axis=axis, descending=descending)
    return in_types[0]


declare("sort", kind="opaque", role="sort", rule=_sort_rule, impl=_sort_impl, dtypes=ALL_DTYPES,
        attrs={"axis": attr("int", -1), "descending": attr("bool", False)},
        doc="x sorted along axis as np.sort (NaN last ascending, first descending; complex numbers by their "
            "real parts, then their imaginary parts, in NumPy's order [R + Rj, R + nanj, nan + Rj, nan + nanj]); "
            "its gradient scatters the cotangent back through argsort")
declare("argsort", kind="opaque", role="argsort", rule=_argsort_rule, impl=_argsort_impl, dtypes=ALL_DTYPES,
        attrs={"axis": attr("int", -1), "descending": attr("bool", False), "stable": attr("bool", True)},
        differentiable=False,
        doc="i64 indices that sort x along axis (NaN last ascending, first descending), as "
            "np.argsort(kind='stable'); not stable: equal elements in an unspecified order (the reference "
            "runs NumPy's faster default kind, compiled code its stable sort); a stable descending sort "
            "keeps equal elements in their order")


# ---- VJP rules (JAX's; see Primitive) ----------------------------------------------------------
# Line numbers cite jax-ml/jax at cec06d1 (jax/_src/lax/linalg.py unless said otherwise).
#
# Complex matrices. JAX pairs a cotangent with a tangent as Re(sum(ct * t)), so its VJP is the
# plain transpose of the JVP: for a holomorphic map (inv, solve) the real rules hold as written,
# with plain transposes. cholesky, eigh, svd and qr have JVPs with conjugate transposes (JAX's
# ``_H``) and parts (``.real``); their rules below are written as adjoints under the Hermitian
# pairing Re(sum(conj(ct) * t)) instead, which is the real rule with every transpose made
# conjugate (``_H``), and ``_jax_convention`` turns such an adjoint into JAX's VJP: the two
# differ by conjugating the cotangents in and the gradient out.
def _mT(e, v):
    n = v.type.ndim
    return e.transpose(v, perm=tuple(range(n - 2)) + (n - 1, n - 2))


def _conj(e, v):
    return e.conj(v) if v.type.dtype.is_complex else v


def _H(e, v):
    """The conjugate transpose of each matrix of ``v`` (the transpose of a real one)."""
    return _conj(e, _mT(e, v))


def _as(e, v, like):
    """``v`` (of a real dtype: eigenvalues, singular values) in ``like``'s dtype, to combine with it."""
    return v if v.type.dtype == like.type.dtype else e.cast(v, dtype=like.type.dtype)


def _imag_diagonal(e, x, eye):
    """i Im(diag(x)) as a diagonal matrix: the part of the complex rules that a real x lacks."""
    return e.mul(e.mul(e.sub(x, e.conj(x)), e.const(0.5, x)), eye)


def _jax_convention(adjoint):
    """A VJP rule in JAX's convention from ``adjoint``, the same rule written as the adjoint
    of the JVP under the Hermitian pairing: ``conj(adjoint(conj(cotangents)))``; the same rule
    on real dtypes."""
    def vjp(e, g, y, *args, **attrs):
        g = [_conj(e, c) for c in g] if isinstance(g, (list, tuple)) else _conj(e, g)
        return [None if r is None else _conj(e, r) for r in adjoint(e, g, y, *args, **attrs)]
    return vjp


def _eye(e, like, n: int):
    return e.builder.op("constant", value=Literal(np.eye(n, dtype=like.type.dtype.np)))


def _col(e, v):
    """[..., k] -> [..., 1, k]: a row vector that scales a matrix's columns when multiplied."""
    return e.expand_dims(v, axes=(v.type.ndim - 1,))


def _row(e, v):
    """[..., k] -> [..., k, 1]: scales a matrix's rows."""
    return e.expand_dims(v, axes=(v.type.ndim,))


def _diag_part(e, x, eye):
    return e.reduce_sum(e.mul(x, eye), axes=(x.type.ndim - 1,), keepdims=False)


def _read_triangle(e, x, lower: bool = True):
    """The gradient of a function of the symmetric (Hermitian) matrix built from one triangle of
    its input, given ``x``, any matrix whose symmetric part is that gradient on symmetric
    matrices: the (Hermitian) symmetric part, counted twice off the diagonal of the triangle read
    and zero in the other (where finite differences of NumPy's eigh and cholesky put it); on the
    diagonal the real part, as LAPACK reads only that of a Hermitian matrix's diagonal. On inputs
    built symmetric (``x + x.T``, ``x @ x.T``), the chain rule gives the same as JAX's symmetrized
    rule. The same in JAX's convention and the Hermitian adjoint's: it commutes with conj."""
    n = x.type.shape[-1]
    mask = np.tril(np.ones((n, n)), -1) + 0.5 * np.eye(n)
    mask = (mask if lower else mask.T).astype(x.type.dtype.np)
    return e.mul(e.add(x, _H(e, x)), e.builder.op("constant", value=Literal(mask)))


def _inv_vjp(e, g, y, a):
    # inv is holomorphic: JAX's transpose of dY = -Y dA Y has plain transposes, complex or not.
    yt = _mT(e, y)
    return [e.neg(e.matmul(e.matmul(yt, g), yt))]


def _solve_vjp(e, g, x, a, b):
    # Holomorphic too: JAX's _solve (3071) solves the transpose with trans=1, not conjugated.
    gb = e.solve(_mT(e, a), g)
    return [e.neg(e.matmul(gb, _mT(e, x))), gb]


def _cholesky_adjoint(e, g, lower, a):
    # Murray (2016), as JAX's _cholesky_jvp_rule (868): dL = L phi(L^-1 dA L^-H), phi keeping the
    # lower triangle with its diagonal halved. Its adjoint: gA = L^-H phi(L^H gL) L^-1, whose
    # Hermitian part is the gradient; a's lower triangle is read.
    n = a.type.shape[-1]
    phi = (np.tril(np.ones((n, n)), -1) + 0.5 * np.eye(n)).astype(a.type.dtype.np)
    phi_mask = e.builder.op("constant", value=Literal(phi))
    lh = _H(e, lower)
    p = e.mul(e.matmul(lh, g), phi_mask)
    x = e.solve(lh, p)                      # L^-H phi
    s = _H(e, e.solve(lh, _H(e, x)))        # (L^-H phi) L^-1
    return [_read_triangle(e, s)]


def _slogdet_vjp(e, gs, ys, a, blocks=()):
    # jax/_src/numpy/linalg.py _slogdet_jvp (624): with t = tr(A^-1 dA), d log|det| = Re(t) and,
    # for a complex A, d sign = i Im(t) sign (a real sign is piecewise constant). Transposed: the
    # cotangent of t is glog + i Im(gsign sign), and gA = that times A^-T.
    gsign, glog = gs
    sign, _ = ys
    scale = _as(e, glog, a)
    if a.type.dtype.is_complex:
        gs_s = e.mul(gsign, sign)
        scale = e.add(scale, e.mul(e.sub(gs_s, e.conj(gs_s)), e.const(0.5, gs_s)))
    return [e.mul(_row(e, _row(e, scale)), _mT(e, e.inv(a)))]   # [...] -> [..., 1, 1]


def _eigh_adjoint(e, gs, ys, a, blocks=(), *, lower):
    # JAX's _eigh_jvp_rule (1328): with P = V^H dA V, dw = Re diag(P) and dV = V (F * P). The
    # adjoint: gA = V (diag(gw) + F * (V^H gV)) V^H.
    gw, gv = gs
    w, v = ys
    n = a.type.shape[-1]
    eye = _eye(e, w, n)
    one = e.const(1.0, w)
    # F[i, j] = 1 / (w_j - w_i) off the diagonal, 0 on it (eigenvalues assumed distinct).
    diff = e.add(e.sub(_col(e, w), _row(e, w)), eye)
    f = _as(e, e.div(e.sub(one, eye), diff), a)
    inner = e.add(_as(e, e.mul(_col(e, gw), eye), a), e.mul(f, e.matmul(_H(e, v), gv)))
    return [_read_triangle(e, e.matmul(e.matmul(v, inner), _H(e, v)), lower)]


def _svd_adjoint(e, gs, ys, a, blocks=(), *, full_matrices):
    # JAX's _svd_jvp_rule (2324), with dS = U^H dA V: ds = Re diag(dS), dU = U (F * (dS S + S dS^H)
    # + D) and dV = V (F * (S dS + dS^H S)), D = i Im(diag(dS)) / s for a complex A (the relative
    # phase of u_j and v_j); the extra columns' terms when a is not square. Here their adjoint.
    m, n = a.type.shape[-2:]
    if full_matrices and m != n:
        raise ShapeError(f"the gradient of svd with full_matrices=True is defined only for square matrices "
                         f"(the extra columns of u or vh are not unique), got {a.type}; pass "
                         "full_matrices=False", op="svd")
    gu, gsv, gvh = gs
    u, s, vh = ys
    k = min(m, n)
    eye = _eye(e, s, k)
    one = e.const(1.0, s)
    v, gv = _H(e, vh), _H(e, gvh)
    sc, sr = _col(e, s), _row(e, s)         # s_j across columns, s_i across rows
    # F[i, j] = 1 / (s_j^2 - s_i^2) off the diagonal (singular values assumed distinct).
    f = _as(e, e.div(e.sub(one, eye), e.add(e.mul(e.add(sc, sr), e.sub(sc, sr)), eye)), a)
    sc, sr, eye_a = _as(e, sc, a), _as(e, sr, a), _as(e, eye, a)
    uh_gu = e.matmul(_H(e, u), gu)
    j = e.mul(f, uh_gu)
    kk = e.mul(f, e.matmul(_H(e, v), gv))
    gds = e.add(e.add(e.mul(_as(e, _col(e, gsv), a), eye_a), e.mul(e.add(j, _H(e, j)), sc)),
                e.mul(sr, e.add(kk, _H(e, kk))))
    if a.type.dtype.is_complex:
        # D's adjoint, with JAX's 1/s := 0 where s == 0.
        zero = e.const(0.0, s)
        s_inv = e.select(e.eq(s, zero), zero, e.div(one, e.select(e.eq(s, zero), one, s)))
        gds = e.add(gds, e.mul(_imag_diagonal(e, uh_gu, eye_a), _as(e, _col(e, s_inv), a)))
    ga = e.matmul(e.matmul(u, gds), vh)
    if m > n:   # u's columns span only part of the space: the rest moves with a
        proj = e.sub(gu, e.matmul(u, uh_gu))
        ga = e.add(ga, e.matmul(e.div(proj, sc), vh))
    if n > m:
        proj = e.sub(gv, e.matmul(v, e.matmul(vh, gv)))
        ga = e.add(ga, e.matmul(u, e.div(_H(e, proj), sr)))
    return [ga]


defvjp("inv", _inv_vjp)
defvjp("solve", _solve_vjp)
defvjp("cholesky", _jax_convention(_cholesky_adjoint))
defvjp("slogdet", _slogdet_vjp)
defvjp("eigh", _jax_convention(_eigh_adjoint))
defvjp("svd", _jax_convention(_svd_adjoint))


def _eig_vjp(e, gs, ys, a, blocks=()):
    # The transpose of JAX's eig_jvp_rule (1221) and _eig_vec_jvp (1197), distinct eigenvalues:
    # P = V^-1 dA V, dw = diag(P), dV = U + V diag(c) with U = V (F * P), F[i, j] = 1 / (w_j - w_i),
    # and c_j = -Re(v_j^H u_j) - i Im(u_kj) / Re(v_kj), k = argmax_i |v_ij|: the derivative of
    # LAPACK's normalisation (unit norm, largest component real). Holomorphic apart from c, so
    # plain transposes; a real a takes the real part (the transpose of its cast to complex).
    gw, gv = gs
    w, v = ys
    n = a.type.shape[-1]
    nd = v.type.ndim
    eye = _eye(e, w, n)
    one = e.const(1.0, w)
    f = e.sub(e.div(one, e.add(e.sub(_col(e, w), _row(e, w)), eye)), eye)
    absv = e.abs(v)
    mask = e.cast(e.eq(absv, e.reduce_max(absv, axes=(nd - 2,), keepdims=True)), dtype=v.type.dtype)
    gc = e.reduce_sum(e.mul(gv, v), axes=(nd - 2,), keepdims=True)          # [..., 1, n]
    v_k = e.real(e.reduce_sum(e.mul(mask, v), axes=(nd - 2,), keepdims=True))
    half = e.const(0.5, gc)
    re_gc = e.mul(e.add(gc, e.conj(gc)), half)                             # Re(gc), complex
    i_im_gc = e.mul(e.sub(gc, e.conj(gc)), half)                           # i Im(gc)
    gu = e.sub(e.sub(gv, e.mul(e.conj(v), re_gc)), e.mul(mask, e.div(i_im_gc, e.cast(v_k, dtype=v.type.dtype))))
    gp = e.add(e.mul(_col(e, gw), eye), e.mul(f, e.matmul(_mT(e, v), gu)))
    ga = e.matmul(e.solve(_mT(e, v), gp), _mT(e, v))
    return [ga if a.type.dtype.is_complex else e.real(ga)]


defvjp("eig", _eig_vjp)


def _qr_adjoint(e, gs, ys, a, blocks=(), *, full_matrices):
    m, n = a.type.shape[-2:]
    if full_matrices and m > n:
        raise ShapeError(f"the gradient of qr with mode='complete' is defined only when a has no more rows than "
                         f"columns (the extra columns of q are not unique), got {a.type}; use mode='reduced'",
                         op="qr")
    gq, gr = gs
    q, r = ys
    if m >= n:
        return [_qr_tall_adjoint(e, gq, gr, q, r)]
    # Wide a = [x | y] with x square (JAX's qr_jvp_rule, 2087): q, r_x = qr(x) and r_y = q^H y.
    nd = a.type.ndim
    batch = a.type.shape[:-2]

    def cols(v, start, size):
        return e.slice(v, start=(0,) * (nd - 1) + (start,), size=batch + (v.type.shape[-2], size),
                       step=(1,) * nd)

    y, gr_x, gr_y = cols(a, m, n - m), cols(gr, 0, m), cols(gr, m, n - m)
    gx = _qr_tall_adjoint(e, e.add(gq, e.matmul(y, _H(e, gr_y))), gr_x, q, cols(r, 0, m))
    return [e.concatenate(gx, e.matmul(q, gr_y), axis=nd - 1)]


def _qr_tall_adjoint(e, gq, gr, q, r):
    # The adjoint of JAX's _thin_qr_jvp (2070, m >= n): with M = Q^H gQ - gR R^H,
    # gA = (gQ + Q (tril(M - M^H, -1) - M + i Im(diag M))) R^-H; the last term is the adjoint of
    # JAX's "correction necessary for complex inputs" (the diagonal's imaginary part).
    n = r.type.shape[-1]
    m_ = e.sub(e.matmul(_H(e, q), gq), e.matmul(gr, _H(e, r)))
    below = np.tril(np.ones((n, n)), -1).astype(r.type.dtype.np)
    skew = e.mul(e.sub(m_, _H(e, m_)), e.builder.op("constant", value=Literal(below)))
    c = e.sub(skew, m_)
    if r.type.dtype.is_complex:
        c = e.add(c, _imag_diagonal(e, m_, _eye(e, r, n)))
    z = e.add(gq, e.matmul(q, c))
    return _H(e, e.solve(r, _H(e, z)))


defvjp("qr", _jax_convention(_qr_adjoint))


def _sort_vjp(e, g, y, x, *, axis, descending):
    # y[..., k, ...] = x[..., idx[k], ...] along axis: the cotangent goes back to position idx,
    # one scatter over the flattened array (ties share a value, so any sorting permutation works).
    shape = x.type.shape
    ax = axis % len(shape)
    idx = e.argsort(x, axis=ax, descending=descending, stable=False)
    linear, stride = None, 1
    for d in reversed(range(len(shape))):
        part = idx if d == ax else e.iota(shape=shape, dimension=d, dtype=int64)
        term = part if stride == 1 else e.mul(part, e.const(stride, part))
        linear = term if linear is None else e.add(linear, term)
        stride *= shape[d]
    flat = (stride,)
    gx = e.scatter_add(e.zeros(TensorType(flat, g.type.dtype)), e.reshape(linear, shape=flat),
                       e.reshape(g, shape=flat), axis=0)
    return [e.reshape(gx, shape=shape)]


defvjp("sort", _sort_vjp)
