"""fj.remat (jax.checkpoint): the same derivatives, the recomputation kept past CSE, less memory."""

import numpy as np
import pytest

import flowjit as fj
from flowjit.ir.errors import FlowjitTypeError

P = fj.remat_policies
POLICIES = [None, P.dots_saveable, P.everything_saveable, P.save_only_these_names("pre")]


def _params(depth, width, seed=0, dtype=np.float64):
    rng = np.random.default_rng(seed)
    return [((rng.standard_normal((width, width)) / np.sqrt(width)).astype(dtype),
             (0.1 * rng.standard_normal(width)).astype(dtype)) for _ in range(depth)]


def _layer(h, W, b):
    return fj.nn.gelu(fj.checkpoint_name(h @ W + b, "pre"))


def _loss(remat=False, policy=None, prevent_cse=True):
    layer = fj.remat(_layer, policy=policy, prevent_cse=prevent_cse) if remat else _layer

    def loss(params, x):
        h = x
        for W, b in params:
            h = layer(h, W, b)
        return fj.mean(h * h)
    return loss


def _close(a, b, tol=1e-10):
    for u, v in zip(_leaves(a), _leaves(b), strict=True):
        np.testing.assert_allclose(u, v, rtol=tol, atol=tol)


def _leaves(t):
    if isinstance(t, (list, tuple)):
        return [x for s in t for x in _leaves(s)]
    return [np.asarray(t)]


X = np.random.default_rng(1).standard_normal((6, 5))


@pytest.mark.parametrize("policy", POLICIES, ids=lambda p: getattr(p, "__name__", "none"))
def test_grad_and_value_and_grad_equal_those_without_remat(policy):
    params = _params(4, 5)
    want_v, want_g = fj.value_and_grad(_loss())(params, X)
    got_v, got_g = fj.value_and_grad(_loss(True, policy))(params, X)
    np.testing.assert_allclose(got_v, want_v, rtol=1e-12)
    _close(got_g, want_g)
    _close(fj.grad(_loss(True, policy), argnums=(0, 1))(params, X), fj.grad(_loss(), argnums=(0, 1))(params, X))


@pytest.mark.parametrize("policy", [None, P.dots_saveable], ids=["none", "dots"])
def test_nested_grad_through_remat(policy):
    # The second derivative differentiates the recomputation, and (with a policy) the
    # saved values' own cotangents.
    W = _params(1, 3, seed=2)[0][0]

    def f(remat):
        def g(x):
            inner = fj.remat(lambda x: fj.sin(x @ W) * x, policy=policy) if remat else (lambda x: fj.sin(x @ W) * x)
            return fj.sum(fj.tanh(inner(x)))
        return g
    x = np.array([0.3, -0.7, 1.1])
    want = fj.grad(lambda x: fj.sum(fj.grad(f(False))(x) ** 2))(x)
    got = fj.grad(lambda x: fj.sum(fj.grad(f(True))(x) ** 2))(x)
    np.testing.assert_allclose(got, want, rtol=1e-10)
    np.testing.assert_allclose(fj.hessian(f(True))(x), fj.hessian(f(False))(x), rtol=1e-10)


@pytest.mark.parametrize("policy", [None, P.dots_saveable], ids=["none", "dots"])
def test_jvp_and_hessian_vector_product_through_remat(policy):
    params = _params(3, 5)
    t = [(np.ones_like(W), np.ones_like(b)) for W, b in params]
    want = fj.jvp(lambda p: _loss()(p, X), (params,), (t,))
    got = fj.jvp(lambda p: _loss(True, policy)(p, X), (params,), (t,))
    np.testing.assert_allclose(got[0], want[0], rtol=1e-12)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-10)
    # jvp of grad (a Hessian-vector product) moves tangents through the recomputation.
    hvp = fj.jvp(lambda p: fj.grad(_loss(True, policy))(p, X), (params,), (t,))[1]
    _close(hvp, fj.jvp(lambda p: fj.grad(_loss())(p, X), (params,), (t,))[1], tol=1e-9)


def test_jvp_is_one_call_over_primals_and_tangents():
    # The call's JVP rule: each layer's call computes its tangents too, no backward (no
    # recomputing call) is built and transposed.
    params = _params(3, 5)
    t = [(np.ones_like(W), np.ones_like(b)) for W, b in params]
    traced = fj.function(lambda p, t: fj.jvp(lambda p: _loss(True)(p, X), (p,), (t,))).ir(params, t)
    calls = [op for op in traced.walk() if op.name == "call"]
    assert len(calls) == 3 and not any(op.attrs["recompute"] for op in calls)
    assert all(op.attrs["num_out"] == 2 for op in calls)  # the output and its tangent


def test_vmap_of_grad_through_remat_equals_a_loop():
    params = _params(3, 5)
    xs = np.random.default_rng(3).standard_normal((4, 2, 5))
    got = fj.vmap(fj.grad(_loss(True)), in_axes=(None, 0))(params, xs)
    for i in range(len(xs)):
        _close([(gw[i], gb[i]) for gw, gb in got], fj.grad(_loss())(params, xs[i]))


def test_vmap_of_a_remat_function_and_its_gradient():
    W = _params(1, 4, seed=6)[0][0]
    f = fj.remat(lambda x: fj.tanh(x @ W) ** 2)
    xs = np.random.default_rng(7).standard_normal((3, 4))
    np.testing.assert_allclose(fj.vmap(f)(xs), np.tanh(xs @ W) ** 2, rtol=1e-12)
    got = fj.grad(lambda xs: fj.sum(fj.vmap(f)(xs)))(xs)
    want = fj.grad(lambda xs: fj.sum(fj.tanh(xs @ W) ** 2))(xs)
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_linearize_through_remat():
    params = _params(2, 5)
    t = [(np.ones_like(W), np.ones_like(b)) for W, b in params]
    y, f_jvp = fj.linearize(lambda p: _loss(True, P.dots_saveable)(p, X), params)
    want = fj.jvp(lambda p: _loss()(p, X), (params,), (t,))
    np.testing.assert_allclose(y, want[0], rtol=1e-12)
    np.testing.assert_allclose(f_jvp(t), want[1], rtol=1e-10)


def test_remat_inside_scan_and_cond_bodies():
    W = _params(1, 4, seed=4)[0][0]
    step = fj.remat(lambda c, W: fj.tanh(c @ W) + c)

    def scanned(W, x, remat):
        body = step if remat else (lambda c, W: fj.tanh(c @ W) + c)
        c, _ = fj.scan(lambda c, _: (body(c, W), None), x, length=3)
        return fj.sum(c ** 2)

    def branched(W, x, remat):
        body = step if remat else (lambda c, W: fj.tanh(c @ W) + c)
        return fj.sum(fj.cond(fj.sum(x) > 0, lambda c: body(c, W) ** 2, lambda c: c, x))

    x = np.array([[0.2, -0.4, 0.9, 0.1]])
    for f in (scanned, branched):
        want = fj.grad(lambda W, x: f(W, x, False), argnums=(0, 1))(W, x)
        got = fj.grad(lambda W, x: f(W, x, True), argnums=(0, 1))(W, x)
        _close(got, want)


def _count(fn, name):
    return sum(op.name == name for op in fn.walk())


def test_the_recomputation_survives_cse():
    params = _params(4, 5)
    counts = {}
    for key, loss in [("plain", _loss()), ("remat", _loss(True)), ("dots", _loss(True, P.dots_saveable)),
                      ("no_cse", _loss(True, prevent_cse=False))]:
        f = fj.function(fj.grad(loss))
        fused = f.ir(params, X, stage="fused")
        assert _count(fused, "call") == 0
        counts[key] = _count(fused, "matmul")
    # One more product per layer: the forward runs again in the backward, and CSE did not
    # merge it into the forward; with the products saved, or without prevent_cse, it did.
    assert counts["remat"] == counts["plain"] + 4
    assert counts["dots"] == counts["plain"]
    assert counts["no_cse"] == counts["plain"]
    traced = fj.function(fj.grad(_loss(True))).ir(params, X)
    recompute = [op for op in traced.walk() if op.name == "call" and op.attrs["recompute"]]
    assert len(recompute) == 4 and all(op.attrs["prevent_cse"] for op in recompute)
    # With dots saved: (h, W, b), the saved product, the output's cotangent; the saved
    # value's cotangent is zero in a first derivative and not passed.
    traced = fj.function(fj.grad(_loss(True, P.dots_saveable))).ir(params, X)
    recompute = [op for op in traced.walk() if op.name == "call" and op.attrs["recompute"]]
    assert [len(op.inputs) for op in recompute] == [5] * 4


def _step(depth, remat):
    def loss(params, x):
        h = x
        for W, b in params:
            h = (fj.remat(_layer) if remat else _layer)(h, W, b)
        return fj.mean(h * h)
    return fj.grad(loss)


def test_the_memory_plan_peak_drops_by_the_activations():
    # A deep gelu MLP keeps several activations per layer for its backward; with each
    # layer rematerialized it keeps the layer inputs only.
    depth, batch, width = 8, 16, 32
    params = _params(depth, width, dtype=np.float32)
    x = np.random.default_rng(5).standard_normal((batch, width)).astype(np.float32)
    act = batch * width * 4
    peaks, grads = {}, {}
    for remat in (False, True):
        f = fj.function(_step(depth, remat))
        grads[remat] = f(params, x)
        ex = next(iter(f._cache.values())).executable
        peaks[remat] = ex._program.plan.scratch_bytes
    _close(grads[True], grads[False], tol=1e-5)
    assert peaks[False] - peaks[True] >= (depth - 2) * act, peaks


def test_static_argnums_kwargs_and_pytrees():
    def f(x, n, scale=1.0):
        return {"y": fj.sin(x["a"]) ** n * scale}
    g = fj.remat(f, static_argnums=(1,))
    x = {"a": np.array([0.5, 1.5])}
    want = fj.grad(lambda x: fj.sum(f(x, 3, scale=2.0)["y"]))(x)
    got = fj.grad(lambda x: fj.sum(g(x, 3, scale=2.0)["y"]))(x)
    _close(got["a"], want["a"])
    # Outside a trace it runs as f does.
    np.testing.assert_allclose(g(x, 2)["y"], np.sin(x["a"]) ** 2)


def test_remat_as_a_decorator_with_and_without_arguments():
    @fj.remat
    def a(x):
        return fj.exp(x)

    @fj.remat(policy=P.nothing_saveable)
    def b(x):
        return fj.exp(x)
    x = np.array([0.1, 0.2])
    np.testing.assert_allclose(fj.grad(lambda x: fj.sum(a(x) * b(x)))(x), 2 * np.exp(2 * x))


def test_named_values_are_what_the_name_policies_save():
    params = _params(2, 5)
    only = fj.function(fj.grad(_loss(True, P.save_only_these_names("pre")))).ir(params, X)
    other = fj.function(fj.grad(_loss(True, P.save_any_names_but_these("pre")))).ir(params, X)
    forward = [op for op in only.body.ops if op.name == "call" and not op.attrs["recompute"]]
    assert [len(op.results) - op.attrs["num_out"] for op in forward] == [1, 1]
    assert forward[0].blocks[0].returns[1].producer.name == "name_tag"
    assert all(len(op.results) == op.attrs["num_out"] for op in other.body.ops if op.name == "call"
               and not op.attrs["recompute"])
    # The tags are gone once the pipeline ran, with remat or without.
    assert _count(fj.function(fj.grad(_loss(True))).ir(params, X, stage="fused"), "name_tag") == 0
    f = fj.function(fj.grad(_loss()))
    assert _count(f.ir(params, X, stage="fused"), "name_tag") == 0
    _close(f(params, X), fj.grad(_loss(True))(params, X))


def test_the_ir_prints_and_parses_back_and_interprets():
    params = _params(2, 5)
    f = fj.function(fj.grad(_loss(True, P.dots_saveable)))
    traced = f.ir(params, X)
    assert str(fj.ir.parse(str(traced))) == str(traced)
    interpreted = fj.function(fj.grad(_loss(True, P.dots_saveable)), interpret=True)(params, X)
    _close(interpreted, fj.grad(_loss())(params, X))


def test_bad_arguments_say_what_to_pass():
    with pytest.raises(FlowjitTypeError, match="fj.remat expects a callable"):
        fj.remat(3)
    with pytest.raises(FlowjitTypeError, match="policy must be callable"):
        fj.remat(fj.sin, policy="dots")
    with pytest.raises(FlowjitTypeError, match=r"remat of f: static_argnums=\(2,\)"):
        def f(x):
            return x
        fj.grad(lambda x: fj.sum(fj.remat(f, static_argnums=2)(x)))(np.ones(2))
    with pytest.raises(FlowjitTypeError, match="checkpoint_name: the name must be a str"):
        fj.grad(lambda x: fj.sum(fj.checkpoint_name(x, 3)))(np.ones(2))
