"""Cases for the decompositions and argsort (decompositions.py).

Expectations check defining properties where they fix the result (a @ inv(a) == I,
L @ L^H == a, ascending eigenvalues and a @ v == v * w, u * s @ vh == a) besides NumPy's
own call, so a reference that merely echoed NumPy with a wrong batch or dtype would fail.
Each runs in float32, float64, complex64 and complex128 (Hermitian matrices for cholesky and
eigh).
"""

from __future__ import annotations

import numpy as np

from tests.registry.case import Case

DTYPES = (np.float32, np.float64, np.complex64, np.complex128)


def _normal(rng, shape, dt):
    """Normal values of ``dt``: both parts drawn for a complex dtype."""
    x = rng.standard_normal(shape)
    return (x + 1j * rng.standard_normal(shape) if np.dtype(dt).kind == "c" else x).astype(dt)


def _H(a):
    return np.conj(np.swapaxes(a, -1, -2))


def _well_conditioned(shape, dt):
    def make(rng):
        n = shape[-1]
        return (_normal(rng, shape, np.complex128 if np.dtype(dt).kind == "c" else np.float64)
                + 3 * np.eye(n)).astype(dt)
    return make


def _spd(shape, dt):
    """Symmetric (Hermitian for a complex dt) positive-definite matrices."""
    def make(rng):
        a = _normal(rng, shape, np.complex128 if np.dtype(dt).kind == "c" else np.float64)
        return (a @ _H(a) + shape[-1] * np.eye(shape[-1])).astype(dt)
    return make


def _checked(expect, check):
    """expect, after asserting ``check`` holds for the inputs and NumPy's result."""
    def run(*xs):
        out = expect(*xs)
        check(*xs, *(out if isinstance(out, tuple) else (out,)))
        return out
    return run


def _close(x, y, dt):
    tol = 1e-3 if np.dtype(dt) in (np.float32, np.complex64) else 1e-9
    np.testing.assert_allclose(x, y, rtol=tol, atol=tol)


def _square_cases(dt, shape) -> list[Case]:
    tag = f"{np.dtype(dt).name}-{'x'.join(map(str, shape))}"
    eye = np.eye(shape[-1])

    def rhs(rng):
        return _normal(rng, shape[:-1] + (2,), dt)

    return [
        Case("inv", [_well_conditioned(shape, dt)], id=f"inv-{tag}",
             expect=_checked(np.linalg.inv, lambda a, y: _close(a @ y, np.broadcast_to(eye, a.shape), dt))),
        Case("solve", [_well_conditioned(shape, dt), rhs], id=f"solve-{tag}",
             expect=_checked(np.linalg.solve, lambda a, b, x: _close(a @ x, b, dt))),
        Case("cholesky", [_spd(shape, dt)], id=f"cholesky-{tag}",
             expect=_checked(np.linalg.cholesky, lambda a, l_: _close(l_ @ _H(l_), a, dt))),
        Case("slogdet", [_well_conditioned(shape, dt)], id=f"slogdet-{tag}",
             expect=_checked(lambda a: tuple(np.linalg.slogdet(a)),
                             lambda a, s, ld: _close(s * np.exp(ld), np.linalg.det(a.astype(np.complex128)), dt))),
        Case("eigh", [_spd(shape, dt)], id=f"eigh-{tag}",
             expect=_checked(lambda a: tuple(np.linalg.eigh(a)),
                             lambda a, w, v: (_close(a @ v, v * w[..., None, :], dt),
                                              np.testing.assert_array_less(w[..., :-1], w[..., 1:])))),
        Case("eigh", [_spd(shape, dt)], {"lower": False}, id=f"eigh-upper-{tag}",
             expect=lambda a: tuple(np.linalg.eigh(a, UPLO="U"))),
    ]


def _svd_case(dt, shape, full) -> Case:
    def reconstructs(a, u, s, vh):
        k = s.shape[-1]
        _close((u[..., :, :k] * s[..., None, :]) @ vh[..., :k, :], a, dt)

    return Case("svd", [lambda rng: _normal(rng, shape, dt)], {"full_matrices": full},
                id=f"svd-{np.dtype(dt).name}-{'x'.join(map(str, shape))}-{'full' if full else 'thin'}",
                expect=_checked(lambda a: tuple(np.linalg.svd(a, full_matrices=full)), reconstructs))


def _qr_case(dt, shape, full) -> Case:
    def orthonormal_and_triangular(a, q, r):
        _close(q @ r, a, dt)
        _close(_H(q) @ q, np.broadcast_to(np.eye(q.shape[-1]), q.shape[:-2] + (q.shape[-1],) * 2), dt)
        np.testing.assert_array_equal(np.tril(r, -1), 0)

    return Case("qr", [lambda rng: _normal(rng, shape, dt)], {"full_matrices": full},
                id=f"qr-{np.dtype(dt).name}-{'x'.join(map(str, shape))}-{'full' if full else 'reduced'}",
                expect=_checked(lambda a: tuple(np.linalg.qr(a, mode="complete" if full else "reduced")),
                                orthonormal_and_triangular))


CASES: list[Case] = [c for dt in DTYPES for shape in ((3, 3), (2, 4, 4)) for c in _square_cases(dt, shape)]
# full_matrices / complete of a tall matrix has columns with no derivative (not unique): the
# gradient check of every case would fail there, so those shapes are checked in tests/tracer/test_linalg.
CASES += [_svd_case(dt, shape, full) for dt in DTYPES
          for shape, full in (((4, 3), False), ((2, 3, 5), False), ((3, 3), True))]
CASES += [_qr_case(dt, shape, full) for dt in DTYPES
          for shape, full in (((4, 3), False), ((2, 3, 5), False), ((3, 3), True), ((2, 3, 5), True))]

def _eig_case(dt, shape) -> Case:
    def eigenpairs(a, w, v):
        _close(a @ v, v * w[..., None, :], dt)
        _close(np.linalg.norm(v, axis=-2), np.ones(w.shape), dt)

    def expect(a):
        c = np.result_type(a.dtype, np.complex64)   # complex even where NumPy's are real
        return tuple(r.astype(c) for r in np.linalg.eig(a))

    return Case("eig", [_well_conditioned(shape, dt)], id=f"eig-{np.dtype(dt).name}-{'x'.join(map(str, shape))}",
                expect=_checked(expect, eigenpairs))


CASES += [_eig_case(dt, shape) for dt in DTYPES for shape in ((3, 3), (2, 4, 4))]


def _argsort_expect(axis, descending):
    def expect(x):
        # Independent of the reference: a stable sort of (key, position) pairs, row by row.
        moved = np.moveaxis(x, axis, -1)
        out = np.empty(moved.shape, np.int64)
        for idx in np.ndindex(moved.shape[:-1]):
            row = list(moved[idx])

            def key(i, row=row):
                v = row[i]
                if isinstance(v, complex | np.complexfloating):
                    # NumPy's order: [R + Rj, R + nanj, nan + Rj, nan + nanj], then the parts
                    # that are not NaN, the real part first
                    re, im = float(v.real), float(v.imag)
                    return (2 * np.isnan(re) + np.isnan(im), 0.0 if np.isnan(re) else re, 0.0 if np.isnan(im) else im)
                nan = isinstance(v, float | np.floating) and np.isnan(v)
                return (nan, 0 if nan else v)
            order = sorted(range(len(row)), key=key)
            if descending:  # stable: equal keys keep their order, so sort groups by key
                order = sorted(range(len(row)), key=key, reverse=True)
                groups: dict = {}
                for i in order:
                    groups.setdefault(key(i), []).append(i)
                order = [i for k in groups for i in sorted(groups[k])]
            out[idx] = order
        return np.moveaxis(out, -1, axis)
    return expect


def _with_ties(shape, dt):
    return lambda rng: rng.integers(0, 4, size=shape).astype(dt)


def _complex_ties(shape, dt):
    def make(rng):
        # few distinct parts (ties in either), a NaN in a real part, an imaginary part, both
        z = rng.integers(-1, 2, size=shape) + 1j * rng.integers(-1, 2, size=shape)
        z.flat[0] = complex(np.nan, 1)
        z.flat[3] = complex(2, np.nan)
        z.flat[5] = complex(np.nan, np.nan)
        return z.astype(dt)
    return make


def _with_nan(shape):
    def make(rng):
        x = rng.standard_normal(shape)
        x[..., 1] = np.nan
        return x
    return make


CASES += [
    Case("argsort", [_with_ties((3, 7), d)], {"axis": ax, "descending": desc}, expect=_argsort_expect(ax, desc),
         id=f"argsort-{np.dtype(d).name}-{ax}-{'desc' if desc else 'asc'}")
    for d in (np.int32, np.int64, np.float32, np.float64, np.bool_, np.float16)
    for ax in (-1, 0) for desc in (False, True)
] + [
    # Not stable: NumPy's default sort; distinct values, so the order is still unique.
    Case("argsort", [((4, 6), "f64")], {"axis": 0, "descending": desc, "stable": False},
         expect=_argsort_expect(0, desc), id=f"argsort-unstable-{'desc' if desc else 'asc'}")
    for desc in (False, True)
] + [
    Case("argsort", [_with_nan((2, 5))], {"descending": desc}, expect=_argsort_expect(-1, desc),
         id=f"argsort-nan-{'desc' if desc else 'asc'}") for desc in (False, True)
] + [
    Case("argsort", [_complex_ties((3, 9), d)], {"axis": ax, "descending": desc}, expect=_argsort_expect(ax, desc),
         id=f"argsort-{np.dtype(d).name}-{ax}-{'desc' if desc else 'asc'}")
    for d in (np.complex64, np.complex128) for ax in (-1, 0) for desc in (False, True)
]


def _sort_expect(axis, descending):
    def expect(x):
        order = _argsort_expect(axis, descending)(x)
        return np.take_along_axis(x, order, axis)
    return expect


CASES += [
    Case("sort", [spec], {"axis": ax, "descending": desc}, expect=_sort_expect(ax, desc),
         id=f"sort-{name}-{ax}-{'desc' if desc else 'asc'}")
    for name, spec in (("f64", ((3, 7), "f64")), ("f32", ((4, 5), "f32")), ("i32-ties", _with_ties((3, 7), np.int32)),
                       ("bool", _with_ties((3, 7), np.bool_)), ("nan", _with_nan((2, 5))),
                       ("c64", _complex_ties((3, 9), np.complex64)), ("c128", _complex_ties((4, 6), np.complex128)))
    for ax in (-1, 0) for desc in (False, True)
]
