"""Index arrays (flowjit.tracer.numpy.index_tricks) and array constructors
(flowjit.tracer.numpy.array_construction) against NumPy, eagerly and compiled; JAX's
clamping of out-of-range indices; one bad argument per family."""

from __future__ import annotations

import numpy as np
import pytest

import flowjit as fj
from flowjit.ir.errors import FlowjitError
from tests.numpy_agreement import agree

RNG = np.random.default_rng(11)
X = RNG.normal(size=(3, 4))
XI = RNG.integers(-9, 9, size=(3, 4))


def _indices(m, x, xi):
    flat = np.abs(xi) % 12
    return (*m.unravel_index(flat, (3, 4)), *m.unravel_index(flat, (3, 4), order="F"), *m.unravel_index(7, (2, 2, 2)),
            m.ravel_multi_index((np.abs(xi) % 3, np.abs(xi[::-1]) % 4), (3, 4), mode="clip"),
            m.ravel_multi_index((xi, xi), (3, 4), mode="clip"), m.ravel_multi_index((xi, xi), (3, 4), mode="wrap"),
            m.ravel_multi_index((xi, xi[0]), (3, 4), mode=("clip", "wrap"), order="F"),
            m.indices((2, 3)), *m.indices((2, 3, 1), sparse=True), m.indices((3,), dtype=np.int32),
            *m.tril_indices(4), *m.tril_indices(3, -1, 5), *m.triu_indices(4, 1), *m.tril_indices_from(x, 1),
            *m.triu_indices_from(x, -1), *m.diag_indices(3), *m.diag_indices(2, 3), *m.diag_indices_from(x[:3, :3]))


def _constructors(m, x, xi):
    return (m.copy(x), m.copy(xi), m.identity(3), m.identity(2, dtype=np.int32), m.tri(3), m.tri(3, 5, 1),
            m.tri(4, 2, -1, dtype=int), m.vander(x[0]), m.vander(x[0], 2), m.vander(x[0], 5, increasing=True),
            m.vander(xi[0]), m.vander(x[0].astype(np.float32), 3), m.vander(xi[0].astype(np.int32), 0),
            m.block([[x, x[:, :1]], [x[:1], np.ones((1, 1))]]), m.block([x[0], 2.0, x[1]]), m.block([[1, 2], [3, 4]]),
            m.block([[[x]], [[x]]]), m.block(x))


@pytest.mark.parametrize("family", [_indices, _constructors])
def test_match_numpy(family):
    want = family(np, X, XI)
    agree(family(fj, X, XI), want, f"{family.__name__} eager")
    agree(fj.function(lambda *a: family(fj, *a))(X, XI), want, f"{family.__name__} compiled")
    agree(fj.function(lambda *a: family(np, *a))(X, XI), want, f"{family.__name__} as np.*")


def test_out_of_range_indices_clamp_as_in_jax():
    """Positions past the end give the last element and those before -size the first (NumPy
    raises); -size..-1 count from the end."""
    jnp = pytest.importorskip("jax.numpy")
    flat = np.array([-13, -12, -1, 0, 11, 12, 40])
    got = fj.function(lambda f: fj.unravel_index(f, (3, 4)))(flat)
    for g, w in zip(got, jnp.unravel_index(flat, (3, 4))):
        np.testing.assert_array_equal(g, w)
    assert fj.unravel_index(np.array([5]), (3, 4))[0].dtype == np.int64


def test_bad_arguments_name_the_function_and_the_line():
    traced = [
        (lambda i: fj.ravel_multi_index((i, i), (3, 4)), r"ravel_multi_index\(mode='raise'\) on a traced index "
                                                         r"\(i64\[3,4\]\) at .*mode='clip'"),
        (lambda i: fj.ravel_multi_index((i,), (3, 4), mode="clip"), r"ravel_multi_index: 1 index arrays for the 2"),
        (lambda i: fj.unravel_index(i, (3, 4), order="K"), r"unravel_index: order='K'"),
        (lambda i: fj.unravel_index(i * 0.5, (3, 4)), r"unravel_index: indices must be integers"),
        (lambda i: fj.tril_indices_from(i[0]), r"tril_indices_from: arr must be 2-D"),
        (lambda i: fj.diag_indices_from(i), r"diag_indices_from: all dimensions of arr must be of equal length"),
        (lambda i: fj.vander(i), r"vander: x must be a one-dimensional array"),
        (lambda i: fj.block([[i], i]), r"block: the lists under arrays are nested to different depths"),
        (lambda i: fj.block([i, []]), r"block: arrays\[1\] is an empty list"),
    ]
    for fn, message in traced:
        with pytest.raises(FlowjitError, match=message) as info:
            fj.function(fn)(XI)
        assert "test_index_tricks.py:" in str(info.value), str(info.value)
    with pytest.raises(ValueError, match=r"ravel_multi_index: invalid entry in coordinates array"):
        fj.ravel_multi_index((np.array([0, 3]), np.array([1, 1])), (3, 4))
