"""``fj.ops``: jax.ops' segment reductions, compiled and eager, against ``jax.ops`` (values,
empty segments, dropped and clamped ids, NaN, dtypes) with gradients against ``jax.grad``."""

from __future__ import annotations

import numpy as np
import pytest

import flowjit as fj
from flowjit.ir.errors import FlowjitTypeError

jax = pytest.importorskip("jax")
jnp = jax.numpy

KINDS = ("sum", "prod", "max", "min")


def _both(kind, data, ids, num_segments, **kw):
    """flowjit's result compiled and eager, and JAX's."""
    f = getattr(fj.ops, f"segment_{kind}")
    if num_segments is None:  # the ids must then be known while tracing
        compiled = fj.function(lambda d: f(d, ids, **kw))(data)
    else:
        compiled = fj.function(lambda d, i: f(d, i, num_segments, **kw))(data, ids)
    eager = f(data, ids, num_segments, **kw)
    want = getattr(jax.ops, f"segment_{kind}")(jnp.asarray(data), jnp.asarray(ids), num_segments, **kw)
    return compiled, eager, np.asarray(want)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.bool_])
@pytest.mark.parametrize("mode", [None, "clip"])
def test_segments_match_jax(kind, dtype, mode):
    # Repeated ids, an empty segment (4), ids out of range (-1, 6: dropped, or clamped
    # with mode="clip"), rows of three elements.
    if dtype == np.bool_ and kind in ("sum", "prod"):
        pytest.skip("JAX's segment_sum and segment_prod of bools are not bools")
    rng = np.random.default_rng(0)
    data = (rng.random((8, 3)) < 0.5) if dtype == np.bool_ else rng.integers(-3, 4, (8, 3)).astype(dtype)
    if dtype == np.float32:
        data[2, 1] = np.nan
    ids = np.array([0, 2, 2, 5, -1, 3, 6, 0], np.int32)
    compiled, eager, want = _both(kind, data, ids, 6, **({} if mode is None else {"mode": mode}))
    for got in (compiled, eager):
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)


def test_ids_of_any_rank_and_num_segments_from_concrete_ids():
    # segment_ids the shape of data's leading axes (TensorFlow's unsorted_segment_sum takes
    # them so; JAX's 1-D ids are the same ids flattened).
    rng = np.random.default_rng(1)
    data = rng.standard_normal((2, 4, 3)).astype(np.float32)
    ids = np.array([[0, 1, 1, 4], [2, 4, 0, 0]], np.int32)
    for kind in KINDS:
        f = getattr(fj.ops, f"segment_{kind}")
        compiled = fj.function(lambda d, f=f: f(d, ids))(data)
        eager = f(data, ids)
        want = np.asarray(getattr(jax.ops, f"segment_{kind}")(jnp.asarray(data.reshape(8, 3)),
                                                              jnp.asarray(ids.reshape(8))))
        assert want.shape == (5, 3)
        np.testing.assert_allclose(compiled, want, rtol=1e-6)
        np.testing.assert_allclose(eager, want, rtol=1e-6)


@pytest.mark.parametrize("kind", ["sum", "max", "min"])
def test_gradients_match_jax(kind):
    # Ties within a segment share the cotangent as in JAX; a dropped row gets none.
    rng = np.random.default_rng(2)
    data = rng.standard_normal((7, 2))
    data[3] = data[1]
    ids = np.array([1, 0, 1, 0, 2, -1, 2], np.int32)
    w = rng.standard_normal((3, 2))

    def loss(m, f):
        return lambda d: m.sum(m.sin(f(d, ids, 3)) * w)
    got = fj.function(fj.grad(loss(fj, getattr(fj.ops, f"segment_{kind}"))))(data)
    want = jax.grad(loss(jnp, getattr(jax.ops, f"segment_{kind}")))(jnp.asarray(data, jnp.float32))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert not got[5].any()


def test_product_gradient_through_zeros_against_central_differences():
    # JAX does not differentiate segment_prod; its derivative is the product of the
    # segment's other elements: at a segment's only zero that product, with two zeros 0.
    data = np.array([[2.0, 0.0], [0.0, 3.0], [-1.5, 0.0], [4.0, 0.5]])
    ids = np.array([0, 0, 0, 1], np.int32)
    f = fj.function(lambda d: fj.sum(fj.ops.segment_prod(d, ids, 2) * np.array([[1.0, -2.0], [0.5, 3.0]])))
    g = fj.function(fj.grad(lambda d: fj.sum(fj.ops.segment_prod(d, ids, 2)
                                             * np.array([[1.0, -2.0], [0.5, 3.0]]))))(data)
    eps = 1e-6
    for k in np.ndindex(data.shape):
        up, dn = data.copy(), data.copy()
        up[k] += eps
        dn[k] -= eps
        np.testing.assert_allclose(g[k], (f(up) - f(dn)) / (2 * eps), atol=1e-8)


def test_under_vmap_and_as_one_native_program():
    data = np.arange(24, dtype=np.float32).reshape(2, 4, 3)
    ids = np.array([[0, 2, 2, 1], [1, 1, 0, 5]], np.int32)
    f = fj.function(fj.vmap(lambda d, i: fj.ops.segment_max(d, i, 3)))
    want = np.stack([np.asarray(jax.ops.segment_max(jnp.asarray(d), jnp.asarray(i), 3)) for d, i in zip(data, ids)])
    np.testing.assert_array_equal(f(data, ids), want)
    assert "native driver" in f.kernels(data, ids)


def test_bad_arguments_say_what_to_do():
    with pytest.raises(FlowjitTypeError, match="num_segments is needed when segment_ids are traced"):
        fj.function(lambda d, i: fj.ops.segment_sum(d, i))(np.ones(3), np.array([0, 1, 1]))
    with pytest.raises(FlowjitTypeError, match=r"segment_ids of shape \[2\] must be the leading axes of data"):
        fj.ops.segment_sum(np.ones((3, 2)), np.array([0, 1]), 2)
    with pytest.raises(FlowjitTypeError, match="segment_ids must be integers"):
        fj.ops.segment_max(np.ones(3), np.array([0.0, 1.0, 1.0]), 2)
    with pytest.raises(FlowjitTypeError, match="mode is one of"):
        fj.ops.segment_min(np.ones(3), np.array([0, 1, 1]), 2, mode="wrap")
