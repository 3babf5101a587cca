"""``fj.vmap`` (issue 25 steps 4-5): the batching pass run on a function traced per example.

Each case is checked against a Python loop of the same function run eagerly per example
(NumPy's reference implementations, no batching involved), both compiled (``fj.function``)
and called outside a trace. ``vmap(grad(loss))`` must equal a loop of ``grad`` with no
loop in the compiled program, and a few cases must agree with ``jax.vmap``.
"""

from __future__ import annotations

import re
from collections import namedtuple

import numpy as np
import pytest

import flowjit as fj
from flowjit.ir.errors import BatchingError, FlowjitTypeError
from flowjit.ir.primitives.control import PYTHON_BLOCK_RUNS

RNG = np.random.default_rng(0)
B = 4


def _r(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _loop(f, args, in_axes, out_axis=0):
    """``f`` run on each example (eagerly: NumPy), results stacked at ``out_axis``."""
    axes = in_axes if isinstance(in_axes, tuple) else (in_axes,) * len(args)
    size = next(a.shape[ax] for a, ax in zip(args, axes) if ax is not None)
    outs = [f(*[a if ax is None else np.take(a, i, axis=ax) for a, ax in zip(args, axes)]) for i in range(size)]
    return np.stack([np.asarray(o) for o in outs], axis=out_axis)


SPD = _r(B, 3, 3) @ np.swapaxes(_r(B, 3, 3), 1, 2) + 3 * np.eye(3, dtype=np.float32)
IDX = np.array([[0, 2], [1, 1], [2, 0], [0, 0]], np.int32)

# (id, function, arguments, in_axes)
CASES = [
    ("elementwise", lambda x, y: fj.exp(x) * y - fj.maximum(x, 0.5), (_r(B, 3), _r(B, 3)), 0),
    ("broadcast_unbatched", lambda x, y: x + y, (_r(B, 2, 3), _r(3)), (0, None)),
    ("broadcast_ranks", lambda x, y: x * y, (_r(B, 3), _r(B, 2, 3)), 0),
    ("reduce_sum", lambda x: fj.sum(x, axis=0), (_r(B, 3, 5),), 0),
    ("reduce_max_keepdims", lambda x: fj.max(x, axis=-1, keepdims=True), (_r(B, 3, 5),), 0),
    ("mean_all", lambda x: fj.mean(x), (_r(B, 3, 5),), 0),
    ("argmax", lambda x: fj.argmax(x, axis=1), (_r(B, 3, 5),), 0),
    ("cumsum", lambda x: fj.cumsum(x, axis=0), (_r(B, 3, 2),), 0),
    ("softmax", lambda x: fj.nn.softmax(x), (_r(B, 6),), 0),
    ("matmul_both", lambda a, b: a @ b, (_r(B, 2, 3), _r(B, 3, 4)), 0),
    ("matmul_lhs", lambda a, b: a @ b, (_r(B, 2, 3), _r(3, 4)), (0, None)),
    ("matmul_rhs", lambda a, b: a @ b, (_r(2, 3), _r(B, 3, 4)), (None, 0)),
    ("matvec", lambda w, x: w @ x, (_r(3, 4), _r(B, 4)), (None, 0)),
    ("matmul_lhs_stacked", lambda a, b: a @ b, (_r(B, 2, 2, 3), _r(3, 4)), (0, None)),
    ("outer_both", lambda a, b: a @ b, (_r(B, 3, 1), _r(B, 1, 4)), 0),
    ("outer_rhs", lambda a, b: a @ b, (_r(2, 3, 1), _r(B, 1, 4)), (None, 0)),
    ("outer_vectors", lambda a, b: fj.outer(a, b), (_r(B, 3), _r(B, 4)), 0),
    ("reshape_transpose", lambda x: fj.transpose(fj.reshape(x, (3, 2)), (1, 0)), (_r(B, 6),), 0),
    ("concat_slice", lambda x, y: fj.concatenate([x[1:], y], axis=0), (_r(B, 3), _r(2)), (0, None)),
    ("expand_squeeze", lambda x: fj.squeeze(fj.expand_dims(x, 0), 0), (_r(B, 3),), 0),
    ("gather_x", lambda x, i: x[i], (_r(B, 5), IDX[0]), (0, None)),
    ("gather_idx", lambda x, i: fj.take(x, i, axis=1), (_r(2, 3), IDX), (None, 0)),
    ("gather_both", lambda x, i: fj.take(x, i, axis=0), (_r(B, 3, 2), IDX), 0),
    ("solve", lambda a, b: fj.linalg.solve(a, b), (SPD, _r(B, 3)), 0),
    ("inv_shared_rhs", lambda a, b: fj.linalg.inv(a) @ b, (SPD, _r(3, 2)), (0, None)),
    ("cholesky", lambda a: fj.linalg.cholesky(a), (SPD,), 0),
    ("in_axis_1", lambda x: fj.sum(x * 2.0), (_r(3, B),), 1),
    ("in_axis_neg", lambda x, y: x - y, (_r(2, B), _r(B, 2)), (-1, 0)),
]


@pytest.mark.parametrize("compiled", [True, False], ids=["function", "eager"])
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_vmap_equals_a_loop(case, compiled):
    _, f, args, in_axes = case
    v = fj.vmap(f, in_axes=in_axes)
    got = (fj.function(v) if compiled else v)(*args)
    want = _loop(f, args, in_axes)
    assert np.asarray(got).shape == want.shape
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)


def test_in_axes_pytree_and_out_axes():
    Params = namedtuple("Params", "w b")
    p = Params(_r(3, 2), _r(B, 2))
    xs = {"a": _r(B, 3), "scale": np.float32(2.0)}

    def f(p, xs):
        y = xs["a"] @ p.w + p.b
        return {"y": y * xs["scale"], "w": p.w}

    out = fj.vmap(f, in_axes=(Params(None, 0), {"a": 0, "scale": None}), out_axes={"y": 1, "w": None})(p, xs)
    want = np.stack([(xs["a"][i] @ p.w + p.b[i]) * 2.0 for i in range(B)], axis=1)
    np.testing.assert_allclose(out["y"], want, rtol=1e-5)
    np.testing.assert_array_equal(out["w"], p.w)  # unmapped output, out axis None


def test_in_axes_dict_with_int_keys_follows_the_leaf_order():
    d = {10: _r(B, 2), 2: _r(3)}
    out = fj.vmap(lambda d: d[10][:, None] * d[2], in_axes=({10: 0, 2: None},))(d)
    np.testing.assert_allclose(out, d[10][:, :, None] * d[2], rtol=1e-6)


def test_out_axes_broadcasts_an_output_that_does_not_depend_on_the_example():
    out = fj.vmap(lambda x, c: (x * 2, c + 1), in_axes=(0, None))(_r(B, 3), np.float32(1.0))
    assert out[1].shape == (B,) and np.all(out[1] == 2.0)


def test_nested_vmap():
    x, y = _r(B, 3), _r(5, 3)
    # pairwise distances: the outer maps x's rows, the inner y's
    d = fj.vmap(fj.vmap(lambda a, b: fj.sum((a - b) ** 2), in_axes=(None, 0)), in_axes=(0, None))(x, y)
    np.testing.assert_allclose(d, ((x[:, None] - y[None]) ** 2).sum(-1), rtol=1e-5)
    # both levels map the same argument: B x 5 x 3
    z = _r(B, 5, 3)
    np.testing.assert_allclose(fj.function(fj.vmap(fj.vmap(fj.nn.softmax)))(z),
                               np.exp(z) / np.exp(z).sum(-1, keepdims=True), rtol=1e-5)


def _mlp_loss(params, x, y):
    w1, b1, w2 = params
    h = fj.tanh(x @ w1 + b1)
    return fj.sum((h @ w2 - y) ** 2)


def _mlp(batch):
    rng = np.random.default_rng(1)
    params = [rng.standard_normal(s).astype(np.float32) for s in ((5, 8), (8,), (8, 2))]
    return params, rng.standard_normal((batch, 5)).astype(np.float32), rng.standard_normal((batch, 2)).astype(
        np.float32)


def test_per_example_gradients_equal_a_loop_of_grad_without_a_loop():
    per_example = fj.function(fj.vmap(fj.grad(_mlp_loss), in_axes=(None, 0, 0)))
    params, x, y = _mlp(B)
    runs = PYTHON_BLOCK_RUNS["blocks"]
    got = per_example(params, x, y)
    got = per_example(params, x, y)
    assert PYTHON_BLOCK_RUNS["blocks"] == runs and per_example.trace_count == 1
    loop = [fj.grad(_mlp_loss)(params, x[i], y[i]) for i in range(B)]
    for k in range(3):
        np.testing.assert_allclose(got[k], np.stack([g[k] for g in loop]), rtol=1e-4, atol=1e-5)
    # the gradient of the mean loss is the mean of the per-example gradients
    mean = fj.grad(lambda p, x, y: _mlp_loss(p, x, y) / B)(params, x, y)
    np.testing.assert_allclose(np.mean(got[0], 0), mean[0], rtol=1e-4, atol=1e-5)

    fused = per_example.ir(params, x, y, stage="fused")
    assert not re.search(r"\b(while|scan|cond)\b", str(fused))
    small, big = _mlp(3), _mlp(17)
    assert len(per_example.ir(*small, stage="prune").body.ops) == \
        len(per_example.ir(*big, stage="prune").body.ops)


def test_grad_of_vmap():
    params, x, y = _mlp(B)
    total = fj.grad(lambda p: fj.sum(fj.vmap(_mlp_loss, in_axes=(None, 0, 0))(p, x, y)))(params)
    want = fj.grad(_mlp_loss)(params, x, y)
    for g, w in zip(total, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


def test_work_on_unbatched_values_is_done_once():
    w = _r(3, 5)
    f = fj.function(fj.vmap(lambda x: x * fj.sum(fj.exp(w), axis=1)))
    x = _r(B, 3)
    np.testing.assert_allclose(f(x), x * np.exp(w).sum(1), rtol=1e-5)
    text = str(f.ir(x))
    assert re.search(r"reduce_sum .*: f32\[3\]", text) and not re.search(r"reduce_sum .*: f32\[4", text)


def test_vmap_of_function_and_closures():
    w = _r(3, 2)
    f = fj.function(lambda x: fj.tanh(x @ w))
    x = _r(B, 3)
    np.testing.assert_allclose(fj.vmap(f)(x), np.tanh(x @ w), rtol=1e-5)


JAX_CASES = ["elementwise", "reduce_max_keepdims", "matmul_lhs", "gather_both", "in_axis_neg", "solve"]


@pytest.mark.parametrize("name", JAX_CASES)
def test_agrees_with_jax_vmap(name):
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    _, f, args, in_axes = next(c for c in CASES if c[0] == name)
    jax_fns = {
        "elementwise": lambda x, y: jnp.exp(x) * y - jnp.maximum(x, 0.5),
        "reduce_max_keepdims": lambda x: jnp.max(x, axis=-1, keepdims=True),
        "matmul_lhs": lambda a, b: a @ b,
        "gather_both": lambda x, i: jnp.take(x, i, axis=0),
        "in_axis_neg": lambda x, y: x - y,
        "solve": lambda a, b: jnp.linalg.solve(a, b),
    }
    want = np.asarray(jax.vmap(jax_fns[name], in_axes=in_axes)(*args))
    np.testing.assert_allclose(fj.vmap(f, in_axes=in_axes)(*args), want, rtol=2e-5, atol=2e-5)


def test_error_axes_of_different_sizes():
    with pytest.raises(FlowjitTypeError, match=r"different sizes.*size 4: args\[0\].*size 3: args\[1\]"):
        fj.vmap(lambda a, b: a + b)(_r(4, 2), _r(3, 2))


def test_error_in_axes_not_matching_the_arguments():
    with pytest.raises(FlowjitTypeError, match=r"in_axes has 3 entries.*2 positional"):
        fj.vmap(lambda a, b: a + b, in_axes=(0, 0, None))(_r(4, 2), _r(4, 2))
    mismatch = r"in_axes=\(\{'w': 0\}, 0\) does not match \(\{'b': \*, 'w': \*\}, \*\)"
    with pytest.raises(FlowjitTypeError, match=mismatch):
        fj.vmap(lambda p, x: p["w"] * x, in_axes=({"w": 0}, 0))({"w": _r(4), "b": _r(4)}, _r(4))
    with pytest.raises(FlowjitTypeError, match=r"maps axis 2 of args\[0\], which has shape \(4, 2\)"):
        fj.vmap(lambda a: a, in_axes=2)(_r(4, 2))


def test_error_primitive_without_a_rule_names_it_and_the_line():
    def f(k):
        return fj.random.uniform(k, (3,))  # the line named

    line = f.__code__.co_firstlineno + 1
    keys = np.stack([fj.random.key(s) for s in range(4)])
    assert fj.BatchingError is BatchingError  # users catch it as fj.BatchingError
    with pytest.raises(fj.BatchingError, match=rf"(?s)random_uniform: not supported under fj.vmap.*split the key.*"
                                            rf"test_vmap.py:{line}"):
        fj.vmap(f)(keys)
    # an unbatched key: one draw shared by every example, as in JAX
    out = fj.vmap(lambda x, k: x + fj.random.uniform(k, (3,)), in_axes=(0, None))(_r(4, 3) * 0, keys[0])
    np.testing.assert_array_equal(out, np.broadcast_to(out[0], (4, 3)))


def _collatz(n):
    def body(c):
        n, k = c
        return fj.where(n % 2 == 0, n // 2, 3 * n + 1), k + 1
    return fj.while_loop(lambda c: c[0] > 1, body, (n, fj.asarray(0, fj.int32)))


@pytest.mark.parametrize("compiled", [True, False], ids=["function", "eager"])
def test_while_with_a_batched_predicate_stops_each_example_on_its_own(compiled):
    ns = np.array([1, 2, 3, 6, 7, 27], np.int32)
    v = fj.vmap(_collatz)
    n, k = (fj.function(v) if compiled else v)(ns)
    np.testing.assert_array_equal(n, np.ones(6, np.int32))
    np.testing.assert_array_equal(k, [0, 1, 7, 8, 16, 111])


def test_while_with_a_shared_predicate_and_a_bound():
    def f(x, m):
        return fj.while_loop(lambda c: c[1] < m, lambda c: (c[0] * 2 + x, c[1] + 1), (x, 0))[0]

    xs = _r(B, 3)
    got = fj.function(fj.vmap(f, in_axes=(0, None)))(xs, np.int32(3))
    np.testing.assert_allclose(got, np.stack([f(x, np.int32(3)) for x in xs]), rtol=1e-6)


def _branches(x, flag):
    return fj.cond(flag, lambda v: fj.sin(v) * 2, lambda v: -v, x)


@pytest.mark.parametrize("compiled", [True, False], ids=["function", "eager"])
def test_cond_with_a_batched_predicate_selects_per_example(compiled):
    def f(x):
        return _branches(x, fj.sum(x) > 0)

    x = _r(8, 3)
    v = fj.vmap(f)
    got = (fj.function(v) if compiled else v)(x)
    np.testing.assert_allclose(got, _loop(f, (x,), 0), rtol=1e-6)
    assert {np.sum(r) > 0 for r in x} == {True, False}  # both branches taken


def test_cond_with_a_shared_predicate_runs_one_branch_for_the_batch():
    x, c = _r(B, 3), np.float32(1.0)
    f = fj.function(fj.vmap(lambda x, c: fj.cond(c > 0, lambda v: v * c, lambda v: fj.ones((3,), fj.float32), x),
                            in_axes=(0, None)))
    np.testing.assert_allclose(f(x, c), x, rtol=1e-6)  # the taken branch is batched
    np.testing.assert_allclose(f(x, -c), np.ones((B, 3), np.float32))  # the other: its result broadcast
    assert "cond" in str(f.ir(x, c))


def test_gradients_through_a_batched_cond():
    def f(v):
        return fj.cond(fj.sum(v) > 0, lambda a: fj.sum(fj.sin(a)), lambda a: fj.sum(a * a), v)

    x = _r(6, 3)
    want = np.stack([np.cos(r) if r.sum() > 0 else 2 * r for r in x])
    np.testing.assert_allclose(fj.grad(lambda x: fj.sum(fj.vmap(f)(x)))(x), want, rtol=1e-6)
    np.testing.assert_allclose(fj.vmap(fj.grad(f))(x), want, rtol=1e-6)


W3 = _r(3, 3)


def _rnn(x, h0):
    def body(h, xt):
        h2 = fj.tanh(h @ W3 + xt)
        return h2, fj.sum(h2)
    return fj.scan(body, h0, x)


@pytest.mark.parametrize("compiled", [True, False], ids=["function", "eager"])
def test_scan_over_batched_sequences(compiled):
    xs, h0 = _r(B, 5, 3), np.zeros(3, np.float32)
    v = fj.vmap(_rnn, in_axes=(0, None))
    h, ys = (fj.function(v) if compiled else v)(xs, h0)
    loop = [_rnn(x, h0) for x in xs]
    np.testing.assert_allclose(h, np.stack([a for a, _ in loop]), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ys, np.stack([b for _, b in loop]), rtol=1e-5, atol=1e-6)
    g = fj.vmap(fj.grad(lambda x: fj.sum(_rnn(x, h0)[1])))(xs)
    np.testing.assert_allclose(g, np.stack([fj.grad(lambda x: fj.sum(_rnn(x, h0)[1]))(x) for x in xs]),
                               rtol=1e-5, atol=1e-6)


def test_scan_carry_batched_by_the_body_only():
    # the init is shared, but the body adds a batched closure: the carry must enter batched
    def g(c):
        return fj.scan(lambda h, _: (h + c, h * 2), np.zeros(3, np.float32), None, length=4)

    cs = _r(5, 3)
    h, ys = fj.function(fj.vmap(g))(cs)
    np.testing.assert_allclose(h, 4 * cs, rtol=1e-6)
    np.testing.assert_allclose(ys, np.stack([2 * k * cs for k in range(4)], axis=1), rtol=1e-6)


def test_an_untaken_branch_puts_no_nan_in_the_gradient():
    # the false branch is harmless but the true one's derivative is infinite at -1: every
    # branch runs under a batched predicate, so its inputs must not carry gradient where
    # it is not taken (JAX's select with stop_gradient, jax issue 1052)
    w = np.float32(2.0)

    def f(v, w):
        return fj.cond(v > 0, lambda a: fj.sqrt(a * w), lambda a: a * 0, v)

    x = np.array([4.0, -1.0, 9.0], np.float32)
    gx, gw = fj.grad(lambda x, w: fj.sum(fj.vmap(f, in_axes=(0, None))(x, w)), argnums=(0, 1))(x, w)
    loop = [fj.grad(f, argnums=(0, 1))(xi, w) for xi in x]
    np.testing.assert_allclose(gx, [g for g, _ in loop], rtol=1e-6)
    np.testing.assert_allclose(gw, sum(g for _, g in loop), rtol=1e-6)


def test_switch_with_a_batched_index_clamps_as_the_op():
    def f(i, x):
        return fj.switch(i, [lambda v: v + 1, lambda v: v * 10, lambda v: -v], x)

    idx = np.array([-2, 0, 1, 2, 7], np.int32)
    x = _r(5, 2)
    np.testing.assert_allclose(fj.vmap(f)(idx, x), _loop(f, (idx, x), 0), rtol=1e-6)


def test_error_out_axes_none_for_a_batched_output():
    with pytest.raises(FlowjitTypeError, match=r"out_axes is None for out.*depends on the mapped"):
        fj.vmap(lambda x: x * 2, out_axes=None)(_r(4, 3))


def test_error_assigning_a_variable_inside_vmap():
    v = fj.Variable(np.zeros(3, np.float32), name="W")

    def f(x):
        v.assign(x)
        return x

    with pytest.raises(fj.TracerError, match="assigning Variable W inside fj.vmap is not supported"):
        fj.vmap(f)(_r(2, 3))


@fj.custom_vjp
def _scaled_sin(x, w):
    return fj.sin(x) * w


# a rule that differs from the true derivative (3 times it for x), so its use is visible
_scaled_sin.defvjp(lambda x, w: (fj.sin(x) * w, (x, w)),
                   lambda res, g: (3 * g * fj.cos(res[0]) * res[1], fj.sum(g * fj.sin(res[0]))))


def test_custom_vjp_under_vmap_keeps_the_users_rule():
    x, w = _r(B, 2), np.float32(2.0)
    np.testing.assert_allclose(fj.vmap(_scaled_sin, in_axes=(0, None))(x, w), np.sin(x) * w, rtol=1e-6)
    gx, gw = fj.grad(lambda x, w: fj.sum(fj.vmap(_scaled_sin, in_axes=(0, None))(x, w)), argnums=(0, 1))(x, w)
    np.testing.assert_allclose(gx, 3 * np.cos(x) * w, rtol=1e-5)
    np.testing.assert_allclose(gw, np.sin(x).sum(), rtol=1e-5)  # a shared argument: summed over examples
    per = fj.vmap(fj.grad(lambda x, w: fj.sum(_scaled_sin(x, w))), in_axes=(0, None))(x, w)
    np.testing.assert_allclose(per, 3 * np.cos(x) * w, rtol=1e-5)


def test_per_example_gradients_compile_to_one_native_program():
    # the batched products fold to 2-D matmuls and broadcast products (no batched gemm), so
    # the llvm backend keeps the whole program native
    f = fj.function(fj.vmap(fj.grad(_mlp_loss), in_axes=(None, 0, 0)), backend="llvm")
    params, x, y = _mlp(B)
    got = f(params, x, y)
    (entry,) = f._cache.values()
    assert entry.executable._program is not None, entry.executable.native_reason
    np.testing.assert_allclose(got[2], np.stack([fj.grad(_mlp_loss)(params, x[i], y[i])[2] for i in range(B)]),
                               rtol=1e-4, atol=1e-5)
