"""``jax.nn``'s activations and ``dot_product_attention`` in ``fj.nn``: values and
derivatives against JAX's at and around each function's kinks, compiled and eager."""

from __future__ import annotations

import types

import numpy as np
import pytest

import flowjit as fj
from flowjit.ir.errors import FlowjitTypeError

jax = pytest.importorskip("jax")
jnp = jax.numpy
JAX = types.SimpleNamespace(nn=jax.nn, sum=jnp.sum, sin=jnp.sin)  # fj's names, JAX's functions

# Kinks (0, ±1, ±3, 6, log 2), large values both ways, and the non-finite ones.
POINTS = np.array([-1e4, -30, -6, -3, -1, -0.5, 0, 0.25, 0.6931472, 1, 3, 6, 7.5, 30, 1e4,
                   np.nan, -np.inf, np.inf], np.float32)
ELEMENTWISE = ["silu", "swish", "softplus", "log_sigmoid", "soft_sign", "squareplus", "mish", "elu", "celu",
               "selu", "leaky_relu", "relu6", "hard_tanh", "hard_sigmoid", "hard_silu", "hard_swish",
               "sparse_plus", "sparse_sigmoid", "log1mexp", "tanh", "identity"]


def _both_finite_or_equal(got, want, rtol, what, atol=1e-7):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=f"{what}: NaN positions")
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, equal_nan=True, err_msg=what)


def test_elementwise_activations_and_their_derivatives_match_jax():
    names = ELEMENTWISE

    def values(m, x):
        return tuple(getattr(m.nn, n)(x) for n in names)

    def slopes(m, x):  # one derivative per point: the gradient of the sum
        return tuple(m.grad(lambda x, n=n: m.sum(getattr(m.nn, n)(x)))(x) for n in names) if m is fj else \
            tuple(jax.grad(lambda x, n=n: jnp.sum(getattr(jax.nn, n)(x)))(x) for n in names)

    got = fj.function(lambda x: values(fj, x))(POINTS)
    got_slopes = fj.function(lambda x: slopes(fj, x))(POINTS)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):  # NumPy's warnings at inf and NaN
        eager = values(fj, POINTS)
    want = values(jax, jnp.asarray(POINTS))
    want_slopes = slopes(jax, jnp.asarray(POINTS))
    for n, g, e, w, gs, ws in zip(names, got, eager, want, got_slopes, want_slopes):
        assert np.asarray(g).dtype == np.float32, n
        _both_finite_or_equal(g, w, 2e-6, f"{n} compiled")
        _both_finite_or_equal(e, w, 2e-6, f"{n} eager")
        # JAX's derivative at ±inf differs between equal forms; 1 - tanh(x)**2 near
        # saturation keeps tanh's rounding in either library (1% of 2.5e-5 at x = 6).
        finite = np.isfinite(POINTS)
        _both_finite_or_equal(np.asarray(gs)[finite], np.asarray(ws)[finite], 2e-5, f"{n}'", atol=1e-6)


def test_activations_with_parameters_and_along_axes_match_jax():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 6)).astype(np.float32) * 3

    def f(m, x):
        return (m.nn.elu(x, 0.5), m.nn.celu(x, 2.0), m.nn.leaky_relu(x, 0.2), m.nn.squareplus(x, 1.0),
                m.nn.glu(x), m.nn.glu(x, axis=0), m.nn.logmeanexp(x, axis=1), m.nn.logmeanexp(x),
                m.nn.logmeanexp(x, axis=(0, 1), keepdims=True), m.nn.standardize(x),
                m.nn.standardize(x, axis=0, epsilon=1e-3), m.nn.standardize(x, mean=0.5, variance=2.0))
    got = fj.function(lambda x: f(fj, x))(x)
    want = f(jax, jnp.asarray(x))
    for k, (g, w) in enumerate(zip(got, want)):
        np.testing.assert_allclose(g, w, rtol=2e-5, atol=2e-6, err_msg=f"result {k}")
    stable = fj.nn.standardize(x.astype(np.float64) + 1e4, algorithm="stable")
    np.testing.assert_allclose(stable.std(axis=-1), 1.0, rtol=1e-4)
    g = fj.function(fj.grad(lambda x: fj.sum(fj.nn.glu(x) * fj.nn.standardize(x)[:, :3])))(x)
    w = jax.grad(lambda x: jnp.sum(jax.nn.glu(x) * jax.nn.standardize(x)[:, :3]))(jnp.asarray(x))
    np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


def test_one_hot_matches_jax_out_of_range_classes_give_zeros():
    labels = np.array([[0, 3], [-1, 4]])
    for kwargs in ({}, {"axis": 0}, {"axis": 1}, {"dtype": np.int32}):
        got = fj.function(lambda y: fj.nn.one_hot(y, 4, **kwargs))(labels)
        want = jax.nn.one_hot(jnp.asarray(labels), 4, **kwargs)
        assert got.dtype == want.dtype and got.shape == want.shape, kwargs
        np.testing.assert_array_equal(got, want)
    logits = np.arange(8, dtype=np.float32).reshape(2, 4)
    loss = fj.nn.softmax_cross_entropy(logits, fj.nn.one_hot(np.array([1, 3]), 4))
    np.testing.assert_allclose(loss, fj.nn.softmax_cross_entropy(logits, np.array([1, 3])), rtol=1e-6)


def test_bad_arguments_name_the_shapes():
    with pytest.raises(FlowjitTypeError, match="glu: axis -1 .*odd size 5"):
        fj.nn.glu(np.zeros((2, 5)))
    with pytest.raises(FlowjitTypeError, match="algorithm"):
        fj.nn.standardize(np.zeros(3), algorithm="exact")


def _qkv(rng, b, t, s, n, k, h, dtype=np.float32):
    return (rng.standard_normal((b, t, n, h)).astype(dtype), rng.standard_normal((b, s, k, h)).astype(dtype),
            rng.standard_normal((b, s, k, h)).astype(dtype))


ATTENTION = [
    dict(),
    dict(is_causal=True),
    dict(scale=0.3, local_window_size=(2, 1)),
    dict(local_window_size=1, is_causal=True),
    dict(bias=True),
    dict(mask=True),
    dict(mask=True, bias=True, is_causal=True),
    dict(query_seq_lengths=np.array([3, 5]), key_value_seq_lengths=np.array([4, 2])),
]


@pytest.mark.parametrize("heads", [(4, 4), (4, 2), (3, 1)], ids=["mha", "gqa", "mqa"])
@pytest.mark.parametrize("case", range(len(ATTENTION)))
def test_dot_product_attention_matches_jax_with_its_gradients(heads, case):
    rng = np.random.default_rng(case)
    n, k = heads
    q, kk, v = _qkv(rng, 2, 5, 7, n, k, 8)
    options = dict(ATTENTION[case])
    if options.get("bias"):
        options["bias"] = rng.standard_normal((1, n, 5, 7)).astype(np.float32)
    if options.get("mask"):
        options["mask"] = rng.random((2, 1, 5, 7)) < 0.6
        options["mask"][0, 0, 2] = False      # a row with every key masked: even weights

    def loss(m, q, kk, v):
        out = m.nn.dot_product_attention(q, kk, v, **options)
        return m.sum(m.sin(out) * np.arange(out.size, dtype=np.float32).reshape(out.shape) / out.size), out
    f = fj.function(lambda q, kk, v: loss(fj, q, kk, v))
    got = f(q, kk, v)
    want = loss(JAX, *map(jnp.asarray, (q, kk, v)))
    np.testing.assert_allclose(got[1], want[1], rtol=1e-5, atol=1e-5)
    grads = fj.function(fj.grad(lambda *a: loss(fj, *a)[0], argnums=(0, 1, 2)))(q, kk, v)
    jgrads = jax.grad(lambda *a: loss(JAX, *a)[0], argnums=(0, 1, 2))(*map(jnp.asarray, (q, kk, v)))
    for g, w in zip(grads, jgrads):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
    assert "native driver" in f.kernels(q, kk, v)


def test_dot_product_attention_unbatched_and_in_float64():
    rng = np.random.default_rng(1)
    q, kk, v = (a[0] for a in _qkv(rng, 1, 4, 6, 2, 2, 3, np.float64))
    got = fj.function(lambda q, k, v: fj.nn.dot_product_attention(q, k, v, is_causal=True))(q, kk, v)
    logits = np.einsum("tnh,snh->nts", q, kk) / np.sqrt(3)
    logits = np.where(np.tril(np.ones((4, 6), bool)), logits, -np.inf)
    p = np.exp(logits - logits.max(-1, keepdims=True))
    want = np.einsum("nts,snh->tnh", p / p.sum(-1, keepdims=True), v)
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_dot_product_attention_errors_name_the_shapes():
    rng = np.random.default_rng(2)
    q, kk, v = _qkv(rng, 2, 5, 7, 4, 3, 8)
    with pytest.raises(FlowjitTypeError, match=r"query \[2, 5, 4, 8\], key \[2, 7, 3, 8\].*K dividing N"):
        fj.nn.dot_product_attention(q, kk, v)
    q, kk, v = _qkv(rng, 2, 5, 7, 4, 2, 8)
    with pytest.raises(FlowjitTypeError, match=r"bias of shape \[3, 5, 7\] does not broadcast"):
        fj.nn.dot_product_attention(q, kk, v, bias=np.zeros((3, 5, 7), np.float32))
    with pytest.raises(FlowjitTypeError, match="implementation"):
        fj.nn.dot_product_attention(q, kk, v, implementation="cudnn")
