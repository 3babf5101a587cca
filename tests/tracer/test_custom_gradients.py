"""fj.custom_vjp and fj.stop_gradient: user-written and removed derivatives."""

import functools

import numpy as np
import pytest

import flowjit as fj
from flowjit.ir.errors import FlowjitTypeError


def _fd(f, x, eps=1e-6):
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        d = np.zeros_like(x)
        d[i] = eps
        g[i] = (float(f(x + d)) - float(f(x - d))) / (2 * eps)
    return g


@fj.custom_vjp
def logsumexp(x):
    return fj.log(fj.sum(fj.exp(x)))


def _lse_fwd(x):
    m = fj.max(x)
    y = m + fj.log(fj.sum(fj.exp(x - m)))
    return y, (x, y)


def _lse_bwd(res, g):
    x, y = res
    return (g * fj.exp(x - y),)


logsumexp.defvjp(_lse_fwd, _lse_bwd)


def test_logsumexp_custom_gradient_is_finite_where_the_naive_one_overflows():
    x = np.array([1e4, 1e4 + 1.0, 1e4 - 2.0])
    naive = fj.grad(lambda x: fj.log(fj.sum(fj.exp(x))))(x)
    assert not np.all(np.isfinite(naive))
    g = fj.grad(logsumexp)(x)
    e = np.exp(x - x.max())
    np.testing.assert_allclose(g, e / e.sum(), rtol=1e-12)


def test_custom_rule_that_is_the_true_gradient_matches_finite_differences():
    x = np.array([0.3, -1.2, 2.0, 0.5])
    np.testing.assert_allclose(fj.grad(logsumexp)(x), _fd(lambda v: np.log(np.exp(v).sum()), x), rtol=1e-6)


def test_without_differentiation_the_function_runs_as_itself_and_the_call_is_inlined():
    x = np.array([1.0, 2.0, 3.0])
    np.testing.assert_allclose(logsumexp(x), np.log(np.exp(x).sum()))
    f = fj.function(lambda x: logsumexp(x) * 2.0)
    np.testing.assert_allclose(f(x), 2 * np.log(np.exp(x).sum()))
    traced = str(f.ir(x))
    assert "custom_vjp_call" in traced and 'name="logsumexp"' in traced
    fused = str(f.ir(x, stage="fused"))
    assert "custom_vjp_call" not in fused and "reduce_max" not in fused  # fwd's residual ops are pruned
    assert str(fj.ir.parse(traced)) == traced  # printable and parseable back, exactly
    grad_text = str(fj.function(fj.grad(logsumexp)).ir(x))
    assert str(fj.ir.parse(grad_text)) == grad_text


def test_grad_under_function_value_and_grad_and_vjp():
    x = np.array([0.1, 0.7, -0.4])
    e = np.exp(x) / np.exp(x).sum()
    f = fj.function(lambda x: fj.grad(logsumexp)(x))
    np.testing.assert_allclose(f(x), e)
    np.testing.assert_allclose(f(x + 1.0), np.exp(x + 1) / np.exp(x + 1).sum())
    assert f.trace_count == 1
    v, g = fj.value_and_grad(logsumexp)(x)
    np.testing.assert_allclose(v, np.log(np.exp(x).sum()))
    np.testing.assert_allclose(g, e)

    @fj.function
    def pulled(x):
        y, pb = fj.vjp(logsumexp, x)
        return pb(3.0)[0]
    np.testing.assert_allclose(pulled(x), 3 * e)
    y, pb = fj.vjp(logsumexp, x)  # outside a trace: compiled programs
    np.testing.assert_allclose(pb(2.0)[0], 2 * e)


def test_grad_of_a_function_using_the_custom_rule_nests():
    x = np.array([0.2, -0.5, 1.1])

    def sq_norm_of_softmax(v):
        return fj.sum(fj.grad(logsumexp)(v) ** 2)

    def ref(v):
        s = np.exp(v) / np.exp(v).sum()
        return (s ** 2).sum()
    np.testing.assert_allclose(fj.grad(sq_norm_of_softmax)(x), _fd(ref, x), rtol=1e-6, atol=1e-9)


@fj.custom_vjp
def clip_gradient(x):
    return x


clip_gradient.defvjp(lambda x: (x, None), lambda res, g: (fj.clip(g, -1.0, 1.0),))


def test_clipped_gradient_identity():
    x = np.array([1.0, 2.0, 3.0])
    g = fj.grad(lambda x: fj.sum(clip_gradient(x) * np.array([0.5, -4.0, 9.0])))(x)
    np.testing.assert_allclose(g, [0.5, -1.0, 1.0])
    np.testing.assert_allclose(clip_gradient(x), x)


@fj.custom_vjp
def round_ste(x):
    return fj.round(x)


round_ste.defvjp(lambda x: (fj.round(x), None), lambda res, g: (g,))


def test_straight_through_estimator():
    x = np.array([0.4, 1.6, -2.3])
    np.testing.assert_allclose(round_ste(x), np.round(x))
    np.testing.assert_allclose(fj.grad(lambda x: fj.sum(round_ste(x) * x))(x), np.round(x) + x)
    assert np.all(fj.grad(lambda x: fj.sum(fj.round(x) * 0 + fj.round(x)))(x) == 0)


def test_inside_a_scan_body_and_a_cond_branch():
    xs = np.array([[0.1, 0.2], [1.0, -1.0], [3.0, 2.0]])

    def total(xs):
        def body(c, x):
            return c + logsumexp(x * c), None
        c, _ = fj.scan(body, 1.0, xs)
        return c

    def ref(v):
        c = 1.0
        for row in v:
            c = c + np.log(np.exp(row * c).sum())
        return c
    np.testing.assert_allclose(fj.grad(total)(xs), _fd(ref, xs), rtol=1e-5)

    def branchy(x):
        return fj.cond(fj.sum(x) > 0, lambda v: fj.sum(clip_gradient(v) * 5.0), lambda v: fj.sum(v), x)
    np.testing.assert_allclose(fj.grad(branchy)(np.array([1.0, 2.0])), [1.0, 1.0])
    np.testing.assert_allclose(fj.grad(branchy)(np.array([-1.0, -2.0])), [1.0, 1.0])


def test_closures_in_the_rules_become_captures():
    scale = np.array([2.0, 3.0])

    @fj.custom_vjp
    def f(x, y):
        return x * y

    f.defvjp(lambda x, y: (x * y, (x, y)), lambda res, g: (g * res[1] * scale, None))

    @fj.function
    def g(x, y, s):
        return fj.grad(lambda x: fj.sum(f(x, y) * s))(x)
    x, y = np.array([1.0, 2.0]), np.array([4.0, 5.0])
    np.testing.assert_allclose(g(x, y, np.ones(2)), y * scale)
    gx, gy = fj.grad(lambda x, y: fj.sum(f(x, y)), argnums=(0, 1))(x, y)
    np.testing.assert_allclose(gx, y * scale)
    np.testing.assert_allclose(gy, [0.0, 0.0])


def test_pytree_arguments_and_outputs():
    @fj.custom_vjp
    def f(p):
        return {"s": fj.sum(p["a"] * p["b"])}

    def fwd(p):
        return f(p), p

    def bwd(p, g):
        return ({"a": g["s"] * p["b"], "b": None},)
    f.defvjp(fwd, bwd)
    p = {"a": np.array([1.0, 2.0]), "b": np.array([3.0, 4.0])}
    g = fj.grad(lambda p: f(p)["s"])(p)
    np.testing.assert_allclose(g["a"], p["b"])
    np.testing.assert_allclose(g["b"], [0.0, 0.0])


def test_bwd_returning_the_wrong_structure_names_the_function_and_what_was_expected():
    @fj.custom_vjp
    def twice(x, y):
        return x * y

    twice.defvjp(lambda x, y: (x * y, (x, y)), lambda res, g: g * res[1])
    x = np.array([1.0, 2.0])
    with pytest.raises(FlowjitTypeError, match=r"bwd rule of custom_vjp function twice .*expected a tuple of 2 "
                                               r"cotangent.*test_custom_gradients.py"):
        fj.grad(lambda x: fj.sum(twice(x, x)))(x)

    twice.defvjp(lambda x, y: (x * y, (x, y)), lambda res, g: (fj.sum(g), None))
    with pytest.raises(FlowjitTypeError, match=r"twice returned, for argument 0, \* with leaves \(f64\[\]\); "
                                               r"expected \* with leaves \(f64\[2\]\)"):
        fj.grad(lambda x: fj.sum(twice(x, x)))(x)


def test_fwd_out_must_match_the_function_and_defvjp_must_come_first():
    @fj.custom_vjp
    def f(x):
        return x * 2

    with pytest.raises(FlowjitTypeError, match="before f.defvjp"):
        f(np.ones(2))
    f.defvjp(lambda x: (fj.sum(x), None), lambda r, g: (g,))
    with pytest.raises(FlowjitTypeError, match=r"fwd rule of custom_vjp function f returns out = \* with leaves "
                                               r"\(f64\[\]\), but f returns \* with leaves \(f64\[2\]\)"):
        fj.grad(lambda x: fj.sum(f(x)))(np.ones(2))
    f.defvjp(lambda x: x, lambda r, g: (g,))
    with pytest.raises(FlowjitTypeError, match="must return a pair"):
        f(np.ones(2))


def test_stop_gradient():
    x = np.array([1.0, -2.0, 3.0])
    np.testing.assert_allclose(fj.stop_gradient(x), x)
    np.testing.assert_allclose(fj.grad(lambda x: fj.sum(fj.stop_gradient(x) * x))(x), x)
    np.testing.assert_allclose(fj.grad(lambda x: fj.sum(fj.stop_gradient(x ** 2)))(x), [0.0, 0.0, 0.0])
    tree = fj.stop_gradient({"a": x, "b": (x, x)})
    np.testing.assert_allclose(tree["b"][1], x)
    # grad of grad: the inner gradient is 2 * sg(x) * x, whose own gradient is 2 * x
    gg = fj.grad(lambda x: fj.sum(fj.grad(lambda v: fj.sum(fj.stop_gradient(v) * v ** 2))(x)))(x)
    np.testing.assert_allclose(gg, 2 * x)

    f = fj.function(lambda x: fj.stop_gradient(x * 2.0) + 1.0)
    np.testing.assert_allclose(f(x), 2 * x + 1)
    assert "stop_gradient" in str(f.ir(x))
    np.testing.assert_allclose(fj.stop_gradient(np.array([1, 2], np.int32)), [1, 2])


def test_stop_gradient_inside_scan():
    xs = np.array([1.0, 2.0, 3.0])

    def f(xs):
        def body(c, x):
            return c * fj.stop_gradient(x) + x, None
        return fj.scan(body, 0.0, xs)[0]
    # c = ((0*1+1)*2+2)*3+3 = 15; d/dx treating the multipliers as constants: [6, 3, 1]
    np.testing.assert_allclose(f(xs), 15.0)
    np.testing.assert_allclose(fj.grad(f)(xs), [6.0, 3.0, 1.0])


@fj.custom_jvp
def log1pexp(x):
    return fj.log(1.0 + fj.exp(x))


def _log1pexp_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    return log1pexp(x), t * (1.0 - 1.0 / (1.0 + fj.exp(x)))


log1pexp.defjvp(_log1pexp_jvp)


def test_custom_jvp_rule_is_used_by_reverse_mode_through_its_transpose():
    x = np.array([0.0, 2.0, 100.0, 1000.0])
    naive = fj.grad(lambda x: fj.sum(fj.log(1.0 + fj.exp(x))))(x)
    assert np.isnan(naive[-1])
    np.testing.assert_allclose(fj.grad(lambda x: fj.sum(log1pexp(x)))(x), 1 / (1 + np.exp(-x)))
    np.testing.assert_allclose(fj.function(log1pexp)(x[:2]), np.log1p(np.exp(x[:2])))
    v = x[:3]
    s = 1 / (1 + np.exp(-v))
    second = fj.grad(lambda x: fj.sum(fj.grad(lambda u: fj.sum(log1pexp(u)))(x)))(v)
    np.testing.assert_allclose(second, s * (1 - s), atol=1e-15)


def test_custom_jvp_with_two_arguments_against_finite_differences():
    @fj.custom_jvp
    def f(x, y):
        return fj.sin(x) * y

    f.defjvp(lambda p, t: (f(*p), fj.cos(p[0]) * p[1] * t[0] + fj.sin(p[0]) * t[1]))
    x, y = np.array([0.3, 1.0]), np.array([2.0, -1.0])
    gx, gy = fj.grad(lambda x, y: fj.sum(f(x, y) ** 2), argnums=(0, 1))(x, y)
    np.testing.assert_allclose(gx, _fd(lambda v: ((np.sin(v) * y) ** 2).sum(), x), rtol=1e-6)
    np.testing.assert_allclose(gy, _fd(lambda v: ((np.sin(x) * v) ** 2).sum(), y), rtol=1e-6)


def test_custom_jvp_needs_its_rule():
    @fj.custom_jvp
    def f(x):
        return x

    with pytest.raises(FlowjitTypeError, match=r"before f.defjvp\(jvp\)"):
        f(np.ones(2))


def test_interpreter_backend_runs_the_custom_call():
    f = fj.function(lambda x: fj.grad(logsumexp)(x) + logsumexp(x), backend="interpreter")
    x = np.array([0.5, 1.5])
    e = np.exp(x)
    np.testing.assert_allclose(f(x), e / e.sum() + np.log(e.sum()))


def test_nondiff_argnums_as_in_jax():
    # A function argument (JAX's own example shape): bwd gets it first and returns
    # cotangents for the other arguments only; outside a trace it is fixed per compile.
    @functools.partial(fj.custom_vjp, nondiff_argnums=(0,))
    def apply(f, x):
        return f(x)

    apply.defvjp(lambda f, x: (f(x), x), lambda f, x, g: (3.0 * g * f(x),))
    x = np.array([0.5, 2.0])
    np.testing.assert_allclose(fj.grad(lambda x: fj.sum(apply(fj.exp, x)))(x), 3.0 * np.exp(x), rtol=1e-14)
    np.testing.assert_allclose(apply(fj.sin, x), np.sin(x), rtol=1e-14)
    np.testing.assert_allclose(apply(fj.cos, x), np.cos(x), rtol=1e-14)  # another f: its own compile
    with pytest.raises(fj.FlowjitTypeError, match="custom_vjp function apply.*1 cotangent"):
        apply.defvjp(lambda f, x: (f(x), x), lambda f, x, g: (g, g))
        fj.grad(lambda x: fj.sum(apply(fj.exp, x)))(x)

    @functools.partial(fj.custom_jvp, nondiff_argnums=(1,))
    def scaled(x, c):
        return x * c

    @scaled.defjvp
    def scaled_jvp(c, primals, tangents):
        (x,), (t,) = primals, tangents
        return scaled(x, c), 2.0 * c * t  # twice the true derivative: shows the rule runs

    t = np.array([1.0, -0.25])
    np.testing.assert_allclose(fj.jvp(lambda x: scaled(x, 0.5), (x,), (t,))[1], t, rtol=1e-14)
    np.testing.assert_allclose(fj.grad(lambda x: fj.sum(scaled(x, 1.5)))(x), [3.0, 3.0], rtol=1e-14)
    np.testing.assert_allclose(scaled(x, 4.0), 4.0 * x, rtol=1e-14)
