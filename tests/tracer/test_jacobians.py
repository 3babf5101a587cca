"""``fj.jacrev`` and ``fj.hessian`` (issue 25 step 8, reverse half): against central
finite differences in float64, against ``jax.jacrev``/``jax.hessian`` where JAX is
installed, the output structure for pytrees, tuples of argnums and has_aux, and the
compiled program (one vmapped pullback: no loop, an op count independent of the size)."""

from __future__ import annotations

import re

import numpy as np
import pytest

import flowjit as fj

RNG = np.random.default_rng(0)
A = RNG.standard_normal((4, 3))


def _fd_jacobian(f, x, eps=1e-6):
    """d f / d x by central differences: shape f(x).shape + x.shape."""
    x = np.asarray(x, np.float64)
    y = np.asarray(f(x))
    jac = np.zeros(y.shape + x.shape)
    for idx in np.ndindex(*x.shape):
        up, down = x.copy(), x.copy()
        up[idx] += eps
        down[idx] -= eps
        jac[(...,) + idx] = (np.asarray(f(up)) - np.asarray(f(down))) / (2 * eps)
    return jac


CASES = [
    ("elementwise", lambda x: fj.sin(x) * fj.exp(x) - x ** 2, (3, 2)),
    ("matmul", lambda x: fj.tanh(A @ x), (3, 2)),
    ("reduction", lambda x: fj.sum(x * x, axis=0) + fj.max(x, axis=0), (3, 2)),
    ("scalar", lambda x: fj.mean(fj.log1p(x * x)), (5,)),
    ("softmax", lambda x: fj.nn.softmax(x), (4,)),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_jacrev_equals_finite_differences(case):
    _, f, shape = case
    x = RNG.standard_normal(shape)
    got = fj.jacrev(f)(x)
    want = _fd_jacobian(lambda v: np.asarray(fj.function(f)(v)), x)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


JAX_CASES = {
    "elementwise": (lambda np_: lambda x: np_.sin(x) * np_.exp(x) - x ** 2, (3, 2)),
    "matmul": (lambda np_: lambda x: np_.tanh(A @ x), (3, 2)),
    "reduction": (lambda np_: lambda x: np_.sum(x * x, axis=0) + np_.max(x, axis=0), (3, 2)),
}


@pytest.mark.parametrize("name", sorted(JAX_CASES))
def test_agrees_with_jax_jacrev(name):
    jax = pytest.importorskip("jax")
    x64 = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)
    try:
        make, shape = JAX_CASES[name]
        x = RNG.standard_normal(shape)
        want = np.asarray(jax.jacrev(make(jax.numpy))(x))
        got = fj.jacrev(make(fj))(x)
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
        w = RNG.standard_normal((3, 2))
        jf = jax.jacrev(lambda a, b: {"p": a * b, "s": jax.numpy.sum(a @ b.T)}, argnums=(0, 1))(x, w)
        ff = fj.jacrev(lambda a, b: {"p": a * b, "s": fj.sum(a @ b.T)}, argnums=(0, 1))(x, w)
        for key in ("p", "s"):
            for k in range(2):
                np.testing.assert_allclose(ff[key][k], np.asarray(jf[key][k]), rtol=1e-10, atol=1e-12)
        jh = jax.hessian(lambda v: jax.numpy.sum(jax.numpy.tanh(A @ v) ** 2))(x)
        fh = fj.hessian(lambda v: fj.sum(fj.tanh(A @ v) ** 2))(x)
        np.testing.assert_allclose(fh, np.asarray(jh), rtol=1e-9, atol=1e-11)
    finally:
        jax.config.update("jax_enable_x64", x64)


def _mlp_params():
    rng = np.random.default_rng(1)
    return [rng.standard_normal(s) for s in ((3, 4), (4,), (4, 2))], rng.standard_normal((5, 3)), \
        rng.standard_normal((5, 2))


def _mlp_loss(params, x, y):
    w1, b1, w2 = params
    return fj.mean((fj.tanh(x @ w1 + b1) @ w2 - y) ** 2)


def test_hessian_of_mlp_loss_equals_finite_differences_of_grad():
    params, x, y = _mlp_params()
    hess = fj.hessian(_mlp_loss)(params, x, y)
    grad = fj.grad(_mlp_loss)
    assert len(hess) == 3 and all(len(row) == 3 for row in hess)
    for i, pi in enumerate(params):
        for j, pj in enumerate(params):
            assert hess[i][j].shape == pi.shape + pj.shape

            def g_i(v, i=i, j=j):
                p = list(params)
                p[j] = v
                return np.asarray(grad(p, x, y)[i])
            np.testing.assert_allclose(hess[i][j], _fd_jacobian(g_i, pj), rtol=1e-5, atol=1e-7)
    # symmetric, as a Hessian of a smooth function must be
    np.testing.assert_allclose(hess[0][2], np.moveaxis(hess[2][0], (0, 1), (-2, -1)), rtol=1e-10, atol=1e-12)


def test_argnums_tuple_and_pytree_output_structure():
    x, w = RNG.standard_normal((3,)), RNG.standard_normal((2, 3))

    def f(x, w, scale):
        return {"y": (w @ x) * scale, "n": (fj.sum(x * x), x[0])}
    jac = fj.jacrev(f, argnums=(1, 0))(x, w, 2.0)
    assert set(jac) == {"y", "n"}
    assert isinstance(jac["y"], tuple) and len(jac["y"]) == 2
    assert jac["y"][0].shape == (2, 2, 3) and jac["y"][1].shape == (2, 3)
    assert jac["n"][0][0].shape == (2, 3) and jac["n"][0][1].shape == (3,)
    np.testing.assert_allclose(jac["y"][1], 2 * w, rtol=1e-12)
    np.testing.assert_allclose(jac["y"][0], 2 * np.einsum("ab,c->abc", np.eye(2), x), rtol=1e-12)
    np.testing.assert_allclose(jac["n"][0][1], 2 * x, rtol=1e-12)
    np.testing.assert_allclose(jac["n"][1][1], [1, 0, 0])
    np.testing.assert_allclose(jac["n"][1][0], np.zeros((2, 3)))
    # argnums as an int gives the argument's structure per output leaf, not a 1-tuple
    single = fj.jacrev(f, argnums=1)(x, w, 2.0)
    np.testing.assert_allclose(single["y"], jac["y"][0])


def test_pytree_argument():
    params = {"a": RNG.standard_normal((2,)), "b": [RNG.standard_normal((3,))]}

    def f(p):
        return fj.concatenate([p["a"] * 3.0, fj.sin(p["b"][0])])
    jac = fj.jacrev(f)(params)
    assert jac["a"].shape == (5, 2) and jac["b"][0].shape == (5, 3)
    np.testing.assert_allclose(jac["a"], np.vstack([3 * np.eye(2), np.zeros((3, 2))]))
    np.testing.assert_allclose(jac["b"][0], np.vstack([np.zeros((2, 3)), np.diag(np.cos(params["b"][0]))]))


def test_has_aux():
    x = RNG.standard_normal((3,))
    jac, aux = fj.jacrev(lambda v: (v ** 2, {"m": fj.max(v)}), has_aux=True)(x)
    np.testing.assert_allclose(jac, np.diag(2 * x), rtol=1e-12)
    np.testing.assert_allclose(aux["m"], x.max())
    hess, aux = fj.hessian(lambda v: (fj.sum(v ** 3), fj.sum(v)), has_aux=True)(x)
    np.testing.assert_allclose(hess, np.diag(6 * x), rtol=1e-12)
    np.testing.assert_allclose(aux, x.sum())


def test_compiled_jacobian_is_one_vmapped_pullback_without_a_loop():
    def f(x):
        return fj.tanh(x) * fj.sum(x)
    jac = fj.function(fj.jacrev(f))
    small, big = RNG.standard_normal((3,)), RNG.standard_normal((17,))
    np.testing.assert_allclose(jac(big), _fd_jacobian(lambda v: np.tanh(v) * v.sum(), big), rtol=1e-6, atol=1e-7)
    assert not re.search(r"\b(while|scan|cond)\b", str(jac.ir(big, stage="fused")))
    assert len(jac.ir(small, stage="prune").body.ops) == len(jac.ir(big, stage="prune").body.ops)
    # inside a larger program: the Jacobian joins the caller's IR
    g = fj.function(lambda x: fj.sum(fj.jacrev(f)(x) ** 2))
    np.testing.assert_allclose(g(small), np.sum(_fd_jacobian(lambda v: np.tanh(v) * v.sum(), small) ** 2),
                               rtol=1e-6)


def test_errors_name_the_problem():
    x = RNG.standard_normal((3,))
    with pytest.raises(fj.FlowjitTypeError, match="float"):
        fj.jacrev(lambda v: fj.astype(v > 0, fj.int32))(x)
    with pytest.raises(fj.FlowjitTypeError, match="argnums"):
        fj.jacrev(lambda v: v, argnums=2)(x)
    with pytest.raises(fj.FlowjitTypeError, match="float or complex"):
        fj.jacrev(lambda v: v * 1.0)(np.arange(3))


def test_composes_with_vmap_grad_and_control_flow():
    xs = RNG.standard_normal((4, 3))

    def f(x):
        return fj.tanh(A[:2] @ x)
    batched = fj.vmap(fj.jacrev(f))(xs)
    np.testing.assert_allclose(batched, np.stack([fj.jacrev(f)(x) for x in xs]), rtol=1e-12)

    def frob(x):
        return fj.sum(fj.jacrev(f)(x) ** 2)
    np.testing.assert_allclose(fj.grad(frob)(xs[0]), _fd_jacobian(lambda v: np.asarray(fj.function(frob)(v)), xs[0]),
                               rtol=1e-6, atol=1e-8)

    def scanned(x):  # carry c <- c * x_i + 1 from c = x_0
        return fj.scan(lambda c, xi: (c * xi + 1.0, c), x[0], x)[0]
    np.testing.assert_allclose(fj.jacrev(scanned)(xs[0]),
                               _fd_jacobian(lambda v: np.asarray(fj.function(scanned)(v)), xs[0]), rtol=1e-6)

    def power(x):  # x ** 4 by a bounded while_loop
        return fj.while_loop(lambda c: c[1] < 3, lambda c: (c[0] * x, c[1] + 1), (x, 0), maximum_iterations=5)[0]
    np.testing.assert_allclose(fj.jacrev(power)(xs[0]), np.diag(4 * xs[0] ** 3), rtol=1e-12)


def test_hvp_is_the_hessian_times_the_tangent_without_building_it():
    params, x, y = _mlp_params()
    tangents = type(params)(RNG.standard_normal(p.shape) for p in params)
    hess = fj.hessian(_mlp_loss)(params, x, y)
    got = fj.hvp(lambda p: _mlp_loss(p, x, y), (params,), (tangents,))
    for i, p in enumerate(params):
        want = sum(np.tensordot(hess[i][j], tangents[j], axes=tangents[j].ndim) for j in range(len(params)))
        np.testing.assert_allclose(got[i], want, rtol=1e-9, atol=1e-12)
    # several primals: a tuple, one product per argument; no Hessian-sized value in the program
    a, b = RNG.standard_normal(50), RNG.standard_normal(50)
    f = lambda a, b: fj.sum(fj.sin(a) * b ** 2)  # noqa: E731
    ha, hb = fj.hvp(f, (a, b), (np.ones(50), np.zeros(50)))
    np.testing.assert_allclose(ha, -np.sin(a) * b ** 2, rtol=1e-12)
    np.testing.assert_allclose(hb, 2 * np.cos(a) * b, rtol=1e-12)
    ir = fj.function(lambda a, b, t: fj.hvp(f, (a, b), (t, t))).ir(a, b, a, stage="fused")
    assert all(r.type.shape in ((), (50,)) for op in ir.walk() for r in op.results), ir


def test_hessian_is_forward_over_reverse():
    # jax.hessian is jacfwd(jacrev): the program holds a jvp of the gradient (the
    # gradient's backward ops batched once over the input basis), not a second backward.
    x = RNG.standard_normal(3)
    f = lambda x: fj.sum(fj.exp(A @ x))  # noqa: E731
    np.testing.assert_allclose(fj.hessian(f)(x), A.T @ np.diag(np.exp(A @ x)) @ A, rtol=1e-12)
    np.testing.assert_allclose(fj.hessian(f)(x), fj.jacfwd(fj.jacrev(f))(x), rtol=1e-14)


def test_holomorphic_as_in_jax():
    # f'(z) for a holomorphic f (JAX's values); real arguments or outputs are refused as JAX does.
    f = lambda z: fj.sin(z) * z  # noqa: E731
    z = np.array([1.0 + 2.0j, 0.5j])
    want = np.cos(z) * z + np.sin(z)
    np.testing.assert_allclose(fj.grad(f, holomorphic=True)(z[0]), want[0], rtol=1e-13)
    np.testing.assert_allclose(fj.jacrev(f, holomorphic=True)(z), np.diag(want), rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(fj.jacfwd(f, holomorphic=True)(z), np.diag(want), rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(fj.hessian(lambda z: fj.sum(f(z)), holomorphic=True)(z),
                               np.diag(2 * np.cos(z) - z * np.sin(z)), rtol=1e-13, atol=1e-15)
    with pytest.raises(fj.FlowjitTypeError, match="holomorphic=True: an argument is f64"):
        fj.grad(f, holomorphic=True)(1.0)
    with pytest.raises(fj.AutodiffError, match="holomorphic=True"):
        fj.grad(f)(z[0])
