"""``fj.jvp`` and ``fj.jacfwd`` (issue 25 step 6, without control flow): against central
finite differences in float64 on elementwise, reduction, matmul and layout functions,
against ``jax.jvp``/``jax.jacfwd`` where JAX is installed, forward over reverse (jvp of
grad, a Hessian-vector product), under ``fj.function``, and the errors."""

from __future__ import annotations

import numpy as np
import pytest

import flowjit as fj
from flowjit.ir.errors import AutodiffError
from flowjit.tracer import pytree

RNG = np.random.default_rng(1)
A = RNG.standard_normal((4, 3))


def _fd_jvp(f, primals, tangents, eps=1e-6):
    """The directional derivative of ``f`` at ``primals`` along ``tangents`` (central)."""
    up = f(*[p + eps * t for p, t in zip(primals, tangents)])
    down = f(*[p - eps * t for p, t in zip(primals, tangents)])
    return (np.asarray(up) - np.asarray(down)) / (2 * eps)


CASES = [
    ("elementwise", lambda x: fj.sin(x) * fj.exp(x) - x ** 2 / (1 + x * x), (3, 2)),
    ("unary_mix", lambda x: fj.tanh(x) + fj.log1p(x * x) + fj.sqrt(x * x + 1) + fj.nn.relu(x), (5,)),
    ("binary_broadcast", lambda x: fj.maximum(x, 0.1) * fj.sum(x, axis=0, keepdims=True), (3, 4)),
    ("reduction", lambda x: fj.sum(x * x, axis=0) + fj.max(x, axis=0) + fj.prod(x, axis=1).sum(), (3, 2)),
    ("matmul", lambda x: fj.tanh(A @ x) @ x.T, (3, 2)),
    ("layout", lambda x: fj.concatenate([fj.transpose(x), fj.reshape(x, (2, 3))[:, ::-1]], axis=0)[1:, :2], (3, 2)),
    ("broadcast_pad", lambda x: fj.pad(fj.broadcast_to(x, (2, 3, 2)), 1) * 2.0, (3, 2)),
    ("softmax", lambda x: fj.nn.softmax(x), (4,)),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_jvp_equals_finite_differences(case):
    _, f, shape = case
    x, t = RNG.standard_normal(shape), RNG.standard_normal(shape)
    y, ty = fj.jvp(f, (x,), (t,))
    compiled = fj.function(f)
    np.testing.assert_allclose(y, compiled(x), rtol=1e-12)
    want = _fd_jvp(lambda v: compiled(v), (x,), (t,))
    assert ty.shape == want.shape and ty.dtype == np.float64
    np.testing.assert_allclose(ty, want, rtol=1e-6, atol=1e-7)


def test_two_arguments_and_pytrees():
    def f(params, x):
        h = fj.tanh(x @ params["w"] + params["b"])
        return {"out": h, "norm": fj.sum(h * h)}, fj.mean(x)

    params = {"w": RNG.standard_normal((3, 4)), "b": RNG.standard_normal(4)}
    x = RNG.standard_normal((2, 3))
    tp = {"w": RNG.standard_normal((3, 4)), "b": RNG.standard_normal(4)}
    tx = RNG.standard_normal((2, 3))
    y, ty = fj.jvp(f, (params, x), (tp, tx))
    assert set(ty[0]) == {"out", "norm"}
    eps = 1e-6
    up = fj.function(f)({k: params[k] + eps * tp[k] for k in params}, x + eps * tx)
    down = fj.function(f)({k: params[k] - eps * tp[k] for k in params}, x - eps * tx)
    for key in ("out", "norm"):
        np.testing.assert_allclose(ty[0][key], (up[0][key] - down[0][key]) / (2 * eps), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(ty[1], np.mean(tx), rtol=1e-12)


def test_integer_argument_and_output_have_zero_tangents():
    def f(x, n):
        return x * n, n + 1

    x, n = RNG.standard_normal(3), np.arange(3, dtype=np.int64)
    (y, m), (ty, tm) = fj.jvp(f, (x, n), (np.ones(3), np.zeros(3, np.int64)))
    np.testing.assert_allclose(ty, n.astype(float))
    np.testing.assert_array_equal(tm, 0)


def test_jvp_of_grad_is_a_hessian_vector_product():
    def loss(w):
        return fj.sum(fj.tanh(A @ w) ** 2) + fj.sum(fj.exp(w) * w)

    w, v = RNG.standard_normal(3), RNG.standard_normal(3)
    g = fj.grad(loss)
    _, hv = fj.jvp(g, (w,), (v,))
    want = _fd_jvp(lambda u: g(u), (w,), (v,))
    np.testing.assert_allclose(hv, want, rtol=1e-6, atol=1e-7)
    # against the Hessian from reverse over reverse
    np.testing.assert_allclose(hv, fj.hessian(loss)(w) @ v, rtol=1e-10, atol=1e-12)


def test_grad_of_jvp_reverse_over_forward():
    def f(w):
        return fj.sum(fj.sin(w) * w)

    w, v = RNG.standard_normal(4), RNG.standard_normal(4)
    hv = fj.grad(lambda u: fj.jvp(f, (u,), (v,))[1])(w)  # d/dw (grad f . v) = H v
    np.testing.assert_allclose(hv, fj.hessian(f)(w) @ v, rtol=1e-10, atol=1e-12)


def test_jvp_under_function_traces_once_and_fuses():
    def f(x):
        return fj.sum(fj.exp(x) * fj.sin(x))

    @fj.function
    def step(x, t):
        return fj.jvp(f, (x,), (t,))

    x, t = RNG.standard_normal(8), RNG.standard_normal(8)
    y, ty = step(x, t)
    step(x + 1, t)
    assert step.trace_count == 1
    np.testing.assert_allclose(ty, np.sum((np.exp(x) * np.sin(x) + np.exp(x) * np.cos(x)) * t), rtol=1e-12)
    # the placeholder cotangents and the transposed scaffolding are gone after the pipeline:
    # one kernel computing exp, sin and cos once, as a hand-written JVP
    fused = str(step.ir(x, t, stage="fused"))
    assert fused.count("= fusion") == 1 and "constant" not in fused
    assert [fused.count(f"= {p} ") for p in ("exp", "sin", "cos")] == [1, 1, 1]
    np.testing.assert_allclose(y, np.sum(np.exp(x) * np.sin(x)), rtol=1e-12)


def test_jvp_outside_a_trace_compiles_once_per_function():
    def f(x):
        return fj.cos(x) * 3.0

    x = RNG.standard_normal(5)
    for _ in range(3):
        _, ty = fj.jvp(f, (x,), (np.ones(5),))
    np.testing.assert_allclose(ty, -3.0 * np.sin(x), rtol=1e-12)


def test_jvp_inside_vmap_and_vmap_inside_jvp():
    def f(x):
        return fj.sum(fj.tanh(x) * x)

    xs, ts = RNG.standard_normal((5, 3)), RNG.standard_normal((5, 3))
    got = fj.vmap(lambda x, t: fj.jvp(f, (x,), (t,))[1])(xs, ts)
    want = [fj.jvp(f, (x,), (t,))[1] for x, t in zip(xs, ts)]
    np.testing.assert_allclose(got, want, rtol=1e-12)
    _, tys = fj.jvp(fj.vmap(f), (xs,), (ts,))
    np.testing.assert_allclose(tys, want, rtol=1e-12)


JAX_CASES = {
    "elementwise": (lambda np_: lambda x: np_.sin(x) * np_.exp(x) - x ** 2 / (1 + x * x), (3, 2)),
    "matmul": (lambda np_: lambda x: np_.tanh(A @ x) @ x.T, (3, 2)),
    "reduction": (lambda np_: lambda x: np_.sum(x * x, axis=0) + np_.max(x, axis=0), (3, 2)),
    "layout": (lambda np_: lambda x: np_.concatenate([x.T, np_.reshape(x, (2, 3))], axis=0)[1:, :2], (3, 2)),
}


@pytest.mark.parametrize("name", sorted(JAX_CASES))
def test_agrees_with_jax(name):
    jax = pytest.importorskip("jax")
    jnp = pytest.importorskip("jax.numpy")
    make, shape = JAX_CASES[name]
    x, t = RNG.standard_normal(shape), RNG.standard_normal(shape)
    x64 = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)
    try:
        y_j, ty_j = jax.jvp(make(jnp), (x,), (t,))
        jf_j = jax.jacfwd(make(jnp))(x)
    finally:
        jax.config.update("jax_enable_x64", x64)
    y, ty = fj.jvp(make(fj), (x,), (t,))
    np.testing.assert_allclose(y, np.asarray(y_j), rtol=1e-12)
    np.testing.assert_allclose(ty, np.asarray(ty_j), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(fj.jacfwd(make(fj))(x), np.asarray(jf_j), rtol=1e-10, atol=1e-12)


def test_jacfwd_equals_jacrev_with_structure():
    def f(x, y):
        return {"a": fj.sin(x) * y[0], "b": fj.sum(x @ A.T)}

    x, y = RNG.standard_normal(3), [RNG.standard_normal(3)]
    fwd = fj.jacfwd(f, argnums=(0, 1))(x, y)
    rev = fj.jacrev(f, argnums=(0, 1))(x, y)
    for key in ("a", "b"):
        np.testing.assert_allclose(fwd[key][0], rev[key][0], rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(fwd[key][1][0], rev[key][1][0], rtol=1e-12, atol=1e-14)
    assert fwd["a"][0].shape == (3, 3) and fwd["b"][1][0].shape == (3,)
    jac, aux = fj.jacfwd(lambda x: (fj.tanh(x), fj.sum(x)), has_aux=True)(x)
    np.testing.assert_allclose(jac, np.diag(1 - np.tanh(x) ** 2), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(aux, x.sum(), rtol=1e-12)


def test_jacfwd_of_jacrev_is_the_hessian():
    def f(x):
        return fj.sum(fj.exp(A @ x) * x[0])

    x = RNG.standard_normal(3) * 0.3
    np.testing.assert_allclose(fj.jacfwd(fj.jacrev(f))(x), fj.hessian(f)(x), rtol=1e-10, atol=1e-12)


def test_tangent_of_another_shape_or_dtype_names_the_argument():
    x = np.ones((2, 3))
    with pytest.raises(fj.FlowjitTypeError, match=r"tangent of argument 1\['w'\] is f64\[3\].*f64\[2,3\]"):
        fj.jvp(lambda a, p: a + p["w"], (x, {"w": x}), (x, {"w": np.ones(3)}))
    with pytest.raises(fj.FlowjitTypeError, match=r"tangent of argument 0 is f32\[2,3\].*f64\[2,3\]"):
        fj.jvp(fj.sin, (x,), (np.ones((2, 3), np.float32),))
    with pytest.raises(fj.FlowjitTypeError, match="structure"):
        fj.jvp(lambda p: p["w"], ({"w": x},), ({"v": x},))
    with pytest.raises(fj.FlowjitTypeError, match="1 primal.*2 tangent"):
        fj.jvp(fj.sin, (x,), (x, x))


CONTROL_CASES = {
    "cond_true": lambda x: fj.cond(fj.sum(x) > -9.0, lambda v: fj.sin(v) * v, lambda v: v * 2.0, x),
    "cond_false": lambda x: fj.cond(fj.sum(x) < -9.0, lambda v: fj.sin(v) * v, lambda v: fj.exp(v), x),
    "scan_carry_and_ys": lambda x: fj.scan(lambda c, xi: (fj.tanh(c * xi + 1.0), c * xi), x[0], x),
    "fori_loop": lambda x: fj.fori_loop(0, 3, lambda i, c: fj.sin(c) * c, x),
    "bounded_while": lambda x: fj.while_loop(lambda c: fj.sum(c) < 50.0, lambda c: c * c * 0.5 + 1.0, x,
                                             maximum_iterations=4),
}


@pytest.mark.parametrize("name", sorted(CONTROL_CASES))
def test_control_flow_equals_finite_differences(name):
    f = CONTROL_CASES[name]
    x, t = RNG.uniform(-1, 1, 4), RNG.standard_normal(4)
    _, ty = fj.jvp(f, (x,), (t,))
    compiled = fj.function(f)
    eps = 1e-6
    ups, downs = pytree.flatten(compiled(x + eps * t))[0], pytree.flatten(compiled(x - eps * t))[0]
    got = pytree.flatten(ty)[0]
    assert len(got) == len(ups)
    for g, up, down in zip(got, ups, downs):
        np.testing.assert_allclose(g, (up - down) / (2 * eps), rtol=1e-6, atol=1e-7)


def test_while_without_bound_as_in_jax():
    # Forward mode needs no bound (one loop carries primals and tangents); JAX's values.
    def f(x, s):
        return fj.while_loop(lambda c: fj.sum(c[0]) < 100.0, lambda c: (c[0] * c[0] * s + 1.0, c[1] + 1), (x, 0))

    x, s, tx, ts = np.array([1.0, 1.5, 0.5]), 1.1, np.array([0.3, -0.2, 1.0]), 0.7
    (y, n), (ty, tn) = fj.jvp(f, (x, s), (tx, ts))
    c, k = x.copy(), 0
    while c.sum() < 100.0:
        c, k = c * c * s + 1.0, k + 1
    np.testing.assert_allclose(y, c, rtol=1e-13)
    assert int(n) == k and int(tn) == 0
    # The loop runs the same number of steps at x +- eps t: central differences apply.
    eps = 1e-7
    up = fj.function(f)(x + eps * tx, s + eps * ts)[0]
    down = fj.function(f)(x - eps * tx, s - eps * ts)[0]
    np.testing.assert_allclose(ty, (up - down) / (2 * eps), rtol=1e-6)
    with pytest.raises(AutodiffError, match="maximum_iterations"):  # reverse mode still needs the bound
        fj.grad(lambda x: fj.sum(f(x, s)[0]))(x)


@pytest.mark.parametrize("name", sorted(CONTROL_CASES))
def test_control_flow_runs_once(name):
    # The JVP of a loop or branch is one op over primals and tangents: the op is not
    # kept beside it (its work would be done twice).
    f = CONTROL_CASES[name]
    x = RNG.uniform(-1, 1, 4)
    fun = fj.function(lambda x, t: fj.jvp(f, (x,), (t,)))
    ir = fun.ir(x, x, stage="traced")
    owners = [op for op in ir.body.ops if op.blocks]
    assert len(owners) == 1, ir


def test_while_jvp_agrees_with_jax():
    jax = pytest.importorskip("jax")
    jnp = pytest.importorskip("jax.numpy")

    def make(np_, loop):
        return lambda x: loop(lambda c: np_.sum(c) < 30.0, lambda c: np_.sin(c) + c * 1.5, x)

    x, t = np.array([0.5, 1.0, 0.25]), np.array([1.0, -1.0, 0.5])
    x64 = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)
    try:
        yj, tj = jax.jvp(make(jnp, jax.lax.while_loop), (x,), (t,))
    finally:
        jax.config.update("jax_enable_x64", x64)
    y, ty = fj.jvp(make(fj, fj.while_loop), (x,), (t,))
    np.testing.assert_allclose(y, np.asarray(yj), rtol=1e-13)
    np.testing.assert_allclose(ty, np.asarray(tj), rtol=1e-12)


def test_custom_jvp_rule_is_used_and_custom_vjp_is_transposed():
    @fj.custom_jvp
    def softplus(x):
        return fj.log1p(fj.exp(x))

    @softplus.defjvp
    def softplus_jvp(primals, tangents):
        (x,), (t,) = primals, tangents
        return softplus(x), 3.0 * t * fj.nn.sigmoid(x)  # 3x: shows the user's rule is what runs

    @fj.custom_vjp
    def sine(x):
        return fj.sin(x)

    sine.defvjp(lambda x: (fj.sin(x), fj.cos(x)), lambda c, g: (2.0 * g * c,))  # 2x the true VJP
    x, t = RNG.standard_normal(4), RNG.standard_normal(4)
    np.testing.assert_allclose(fj.jvp(softplus, (x,), (t,))[1], 3.0 * t / (1 + np.exp(-x)), rtol=1e-12)
    np.testing.assert_allclose(fj.jvp(sine, (x,), (t,))[1], 2.0 * t * np.cos(x), rtol=1e-12)


M = RNG.standard_normal((4, 4))
SPD = M @ M.T + 4 * np.eye(4)
SYM = M + M.T
IDX = np.array([2, 0, 3])
OPAQUE_CASES = {  # (function of the array namespace, primal, tangent)
    "inv": (lambda np_: lambda a: np_.linalg.inv(a), SPD, M),
    "solve": (lambda np_: lambda a: np_.linalg.solve(a, np.ones(4)), SPD, M),
    "cholesky": (lambda np_: lambda a: np_.linalg.cholesky(a), SPD, SYM),
    "slogdet": (lambda np_: lambda a: np_.linalg.slogdet(a)[1], SPD, M),
    "eigh": (lambda np_: lambda a: np_.linalg.eigh(a)[0], SPD, SYM),
    "fft": (lambda np_: lambda a: np_.abs(np_.fft.fft(a)), M, SYM),
    "sort_cumsum": (lambda np_: lambda a: np_.cumsum(np_.sort(a, axis=1), axis=0), M, SYM),
    "gather_take": (lambda np_: lambda a: a[IDX] * np_.take(a, IDX, axis=1).T, M, SYM),
}


@pytest.mark.parametrize("name", sorted(OPAQUE_CASES))
def test_opaque_ops_agree_with_jax(name):
    jax = pytest.importorskip("jax")
    jnp = pytest.importorskip("jax.numpy")
    make, x, t = OPAQUE_CASES[name]
    x64 = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)
    try:
        _, ty_j = jax.jvp(make(jnp), (x,), (t,))
    finally:
        jax.config.update("jax_enable_x64", x64)
    _, ty = fj.jvp(make(fj), (x,), (t,))
    np.testing.assert_allclose(ty, np.asarray(ty_j), rtol=1e-9, atol=1e-12)


COMPLEX_CASES = {  # JAX's convention: the JVP is R-linear in the tangent
    "abs_real_imag_conj": lambda np_: lambda z: np_.abs(z) + np_.real(z) * np_.imag(np_.conj(z) * z),
    "holomorphic": lambda np_: lambda z: np_.sin(z) / z * np_.exp(z),
    "real_to_complex": lambda np_: lambda z: np_.exp(1j * np_.real(z)) * (np_.imag(z) + 2j),
}


@pytest.mark.parametrize("name", sorted(COMPLEX_CASES))
def test_complex_agrees_with_jax(name):
    jax = pytest.importorskip("jax")
    jnp = pytest.importorskip("jax.numpy")
    z = RNG.standard_normal(4) + 1j * RNG.standard_normal(4)
    t = RNG.standard_normal(4) + 1j * RNG.standard_normal(4)
    x64 = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)
    try:
        _, ty_j = jax.jvp(COMPLEX_CASES[name](jnp), (z,), (t,))
    finally:
        jax.config.update("jax_enable_x64", x64)
    _, ty = fj.jvp(COMPLEX_CASES[name](fj), (z,), (t,))
    np.testing.assert_allclose(ty, np.asarray(ty_j), rtol=1e-10, atol=1e-12)


def test_singular_values_against_their_closed_form():
    # d s_i = u_i^T dA v_i (kept apart from the JAX cases: jaxlib's SVD failed once in
    # this process with an internal size overflow)
    u, _, vt = np.linalg.svd(M)
    _, ts = fj.jvp(lambda a: fj.linalg.svd(a)[1], (M,), (SYM,))
    np.testing.assert_allclose(ts, np.diag(u.T @ SYM @ vt.T), rtol=1e-10, atol=1e-12)


def test_conv2d_equals_finite_differences():
    w = RNG.standard_normal((3, 3, 2, 4))

    def f(x, w):
        return fj.nn.relu(fj.nn.conv2d(x, w, 1, "SAME")) ** 2

    x, tx, tw = RNG.standard_normal((2, 5, 5, 2)), RNG.standard_normal((2, 5, 5, 2)), RNG.standard_normal(w.shape)
    _, ty = fj.jvp(f, (x, w), (tx, tw))
    np.testing.assert_allclose(ty, _fd_jvp(fj.function(f), (x, w), (tx, tw)), rtol=1e-6, atol=1e-6)


def test_has_aux_and_the_compiled_entry_does_not_keep_the_function_alive():
    import gc
    import weakref

    from flowjit.tracer import forward

    def f(x):
        return fj.sin(x) * 2.0, {"mean": fj.mean(x)}

    x, t = RNG.standard_normal(3), RNG.standard_normal(3)
    y, ty, aux = fj.jvp(f, (x,), (t,), has_aux=True)
    np.testing.assert_allclose(ty, 2.0 * np.cos(x) * t, rtol=1e-12)
    np.testing.assert_allclose(aux["mean"], x.mean(), rtol=1e-12)
    y2, ty2, _ = fj.jvp(f, (x,), (t,), has_aux=True)  # the cached entry
    np.testing.assert_allclose(ty2, ty, rtol=0)
    alive = weakref.ref(f)
    assert f in forward._compiled
    del f
    gc.collect()
    assert alive() is None
    with pytest.raises(fj.FlowjitTypeError, match="has_aux=True: the function must return"):
        fj.jvp(fj.sin, (x,), (t,), has_aux=True)


def test_jacfwd_is_one_batched_pass_without_a_loop():
    def f(x):
        return fj.tanh(fj.sin(x) * fj.sum(x))

    counts = []
    for n in (3, 7):
        step = fj.function(fj.jacfwd(f))
        x = RNG.standard_normal(n)
        s, c = np.sin(x), np.sum(x)
        want = (1 - np.tanh(s * c) ** 2)[:, None] * (np.diag(np.cos(x)) * c + s[:, None])
        np.testing.assert_allclose(step(x), want, rtol=1e-12, atol=1e-14)
        ops = [op.primitive.name for op in step.ir(x).body.ops]
        assert not {"while", "scan", "cond"} & set(ops)
        counts.append(len(ops))
    assert counts[0] == counts[1]


def test_second_order_and_vmap_through_loops():
    # jvp of jvp through a scan (the rule's block is differentiated again), and vmap of a
    # jvp through an unbounded while (a batched predicate): against closed forms.
    def cube_scan(x):
        return fj.scan(lambda c, _: (c * x, None), fj.ones_like(x), None, length=3)[0]

    x = np.array([0.5, -1.25, 2.0])
    d2 = fj.jvp(lambda x: fj.jvp(cube_scan, (x,), (fj.ones_like(x),))[1], (x,), (np.ones(3),))[1]
    np.testing.assert_allclose(d2, 6 * x, rtol=1e-13)

    def doubled_until(x):
        return fj.while_loop(lambda c: c < 10.0, lambda c: c * 2.0, x)

    xs = np.array([1.0, 3.0, 0.7])
    ys, ts = fj.vmap(lambda x: fj.jvp(doubled_until, (x,), (1.0,)))(xs)
    steps = np.array([4, 2, 4])
    np.testing.assert_allclose(ys, xs * 2.0 ** steps, rtol=1e-13)
    np.testing.assert_allclose(ts, 2.0 ** steps, rtol=1e-13)


def test_linearize_as_in_jax():
    def f(x, p):
        return {"y": fj.sin(x) * p["w"], "s": fj.sum(x ** 3)}

    x, p = RNG.standard_normal(3), {"w": RNG.standard_normal(3)}
    tx, tp = RNG.standard_normal(3), {"w": RNG.standard_normal(3)}
    out, f_jvp = fj.linearize(f, x, p)
    np.testing.assert_allclose(out["y"], np.sin(x) * p["w"], rtol=1e-14)
    t = f_jvp(tx, tp)
    _, want = fj.jvp(f, (x, p), (tx, tp))
    for k in ("y", "s"):
        np.testing.assert_allclose(t[k], want[k], rtol=1e-13)
    with pytest.raises(fj.FlowjitTypeError, match="structure"):
        f_jvp(tx, {"v": tx})

    # Traced: the forward ops run once, each f_jvp call adds tangent ops only, in the same
    # block or in a body nested there (reading the forward values as captures), and vmap of
    # f_jvp maps a batch of tangents.
    def g(x, ts):
        y, lin = fj.linearize(fj.sin, x)
        in_scan = fj.scan(lambda c, t: (c + lin(t), None), fj.zeros_like(x), ts)[0]
        return y, lin(ts[0]), in_scan, fj.vmap(lin)(ts)

    ts = RNG.standard_normal((4, 3))
    y, t0, summed, batch = fj.function(g)(x, ts)
    np.testing.assert_allclose(t0, np.cos(x) * ts[0], rtol=1e-14)
    np.testing.assert_allclose(summed, np.cos(x) * ts.sum(0), rtol=1e-13)
    np.testing.assert_allclose(batch, np.cos(x) * ts, rtol=1e-14)
    traced = fj.function(g).ir(x, ts, stage="traced")
    assert sum(op.name == "sin" for op in traced.walk()) == 1, traced


def test_linearize_through_an_unbounded_while():
    def f(x):
        return fj.while_loop(lambda c: fj.sum(c) < 10.0, lambda c: c * 1.5, x)

    x = np.array([1.0, 2.0])
    out, lin = fj.linearize(f, x)
    _, want = fj.jvp(f, (x,), (np.array([1.0, -1.0]),))
    np.testing.assert_allclose(lin(np.array([1.0, -1.0])), want, rtol=1e-14)
    np.testing.assert_allclose(out, fj.function(f)(x), rtol=1e-14)
