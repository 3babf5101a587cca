"""Pullbacks called inside nested traces (issue 25, step 1): a ``vjp_fn`` made in one
trace and called in a ``fj.scan`` body or a ``fj.cond`` branch nested in it must emit
its gradient ops into the nested block, reading the forward values it needs as captures,
and ``fj.grad`` inside a branch must compose with an outer ``fj.vjp``. Each case runs
under ``fj.function`` and eagerly, against the un-nested result or finite differences."""

from __future__ import annotations

import numpy as np
import pytest

import flowjit as fj
from tests.finite_differences import central_differences

X = np.linspace(-1.0, 1.0, 4)
CTS = np.arange(12.0).reshape(3, 4) / 7.0


def _compiled_and_eager(f):
    return [pytest.param(fj.function(f), id="function"), pytest.param(f, id="eager")]


def _pullback_in_scan(x, cts):
    y, pb = fj.vjp(lambda a: fj.sin(a) * a, x)

    def body(c, ct):
        (g,) = pb(ct)
        return c + g, g * 2

    return fj.scan(body, fj.zeros_like(x), cts)


@pytest.mark.parametrize("f", _compiled_and_eager(_pullback_in_scan))
def test_a_pullback_called_in_a_scan_body(f):
    total, ys = f(X, CTS)
    dsin = np.cos(X) * X + np.sin(X)
    np.testing.assert_allclose(ys, 2 * CTS * dsin)
    np.testing.assert_allclose(total, CTS.sum(0) * dsin)


def _pullback_in_cond(p, x, ct):
    y, pb = fj.vjp(lambda a: fj.exp(a) * a, x)
    return y, fj.cond(p, lambda c: pb(c)[0], lambda c: c * 3.0, ct)


@pytest.mark.parametrize("f", _compiled_and_eager(_pullback_in_cond))
def test_a_pullback_called_in_a_cond_branch(f):
    ct = np.full(4, 2.0)
    y, g = f(np.bool_(True), X, ct)
    np.testing.assert_allclose(y, np.exp(X) * X)
    np.testing.assert_allclose(g, ct * (np.exp(X) * X + np.exp(X)))
    _, g = f(np.bool_(False), X, ct)
    np.testing.assert_allclose(g, ct * 3.0)


def _pullback_two_levels_down(x, cts):
    # Made in the top trace, called in a cond nested in a scan body: the captures go
    # through both blocks.
    _, pb = fj.vjp(lambda a: fj.tanh(a) ** 2, x)

    def body(c, ct):
        g = fj.cond(c.sum() < 1e9, lambda t: pb(t)[0], lambda t: t, ct)
        return c + g, g

    return fj.scan(body, fj.zeros_like(x), cts)


@pytest.mark.parametrize("f", _compiled_and_eager(_pullback_two_levels_down))
def test_a_pullback_called_two_levels_down(f):
    total, ys = f(X, CTS)
    d = 2 * np.tanh(X) * (1 - np.tanh(X) ** 2)
    np.testing.assert_allclose(ys, CTS * d)
    np.testing.assert_allclose(total, CTS.sum(0) * d)


def _pullback_of_a_scan_body_vjp(xs):
    # The vjp is taken inside the body and called in a cond inside the same body.
    def body(c, x):
        y, pb = fj.vjp(lambda a: fj.sin(a) * c, x)
        g = fj.cond(x.sum() > -1e9, lambda t: pb(t)[0], lambda t: t * 0.0, fj.ones_like(y))
        return c, g

    return fj.scan(body, np.float64(1.5), xs)[1]


@pytest.mark.parametrize("f", _compiled_and_eager(_pullback_of_a_scan_body_vjp))
def test_a_pullback_made_in_a_body_and_called_in_a_branch_of_it(f):
    np.testing.assert_allclose(f(CTS), 1.5 * np.cos(CTS))



def _pullback_in_scan_loss(x, cts):
    _, pb = fj.vjp(lambda a: fj.sin(a) * a, x)
    return fj.scan(lambda c, ct: (c + pb(ct)[0] ** 2, ct), fj.zeros_like(x), cts)[0].sum()


def test_grad_through_a_pullback_called_in_a_scan_body():
    # The forward values the pullback reads enter the scan as captures, so the scan's
    # own VJP carries the second derivative back to x (the pattern of hvp and jacrev).
    g = fj.grad(_pullback_in_scan_loss)(X, CTS)
    fd = central_differences(lambda x: float(fj.function(_pullback_in_scan_loss)(x, CTS)), [X], 0)
    np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-8)

def _inner(z):
    return (fj.sin(z) ** 2 * z).sum()


def _grad_in_a_branch(p, x):
    return fj.cond(p, lambda a: fj.grad(_inner)(a) * a, lambda a: a * a, x)


def _vjp_of_grad_in_a_branch(p, x, ct):
    y, pb = fj.vjp(lambda a: _grad_in_a_branch(p, a), x)
    return y, pb(ct)[0]


@pytest.mark.parametrize("f", _compiled_and_eager(_vjp_of_grad_in_a_branch))
@pytest.mark.parametrize("pred", [True, False])
def test_grad_inside_a_cond_branch_of_an_outer_vjp(f, pred):
    ct = np.array([0.5, -1.0, 2.0, 1.5])
    p = np.bool_(pred)
    y, g = f(p, X, ct)

    def dot(a):
        return float(np.dot(np.asarray(fj.function(_grad_in_a_branch)(p, a)), ct))

    np.testing.assert_allclose(y, fj.function(_grad_in_a_branch)(p, X))
    np.testing.assert_allclose(g, central_differences(dot, [X], 0), rtol=1e-6, atol=1e-8)


def _pullback_with_grad_in_a_branch(p, x, ct):
    # The outer pullback and an inner grad, both inside one branch.
    _, pb = fj.vjp(lambda a: fj.sin(a) * a, x)
    return fj.cond(p, lambda c: pb(c)[0] + fj.grad(_inner)(c), lambda c: c, ct)


@pytest.mark.parametrize("f", _compiled_and_eager(_pullback_with_grad_in_a_branch))
def test_a_pullback_and_a_grad_in_one_branch(f):
    ct = np.array([0.5, -1.0, 2.0, 1.5])
    g = f(np.bool_(True), X, ct)
    dinner = np.sin(ct) ** 2 + 2 * np.sin(ct) * np.cos(ct) * ct
    np.testing.assert_allclose(g, ct * (np.cos(X) * X + np.sin(X)) + dinner)
    np.testing.assert_allclose(f(np.bool_(False), X, ct), ct)


def test_a_pullback_called_outside_the_trace_of_its_vjp_says_where_to_call_it():
    @fj.function
    def escaped(xs):
        pbs = []

        def body(c, x):
            y, pb = fj.vjp(fj.sin, x)
            pbs.append(pb)
            return c, y

        fj.scan(body, np.float64(0.0), xs)
        return pbs[0](fj.ones_like(xs[0]))[0]

    with pytest.raises(fj.TracerError, match="pullback was called at test_autodiff_nested.py:.*finished"):
        escaped(CTS)

    @fj.function
    def sibling(p, x):
        pbs = []

        def make(a):
            y, pb = fj.vjp(fj.sin, a)
            pbs.append(pb)
            return y

        y = fj.cond(p, make, lambda a: a, x)
        return fj.cond(p, lambda c: pbs[0](c)[0], lambda c: c, y)

    with pytest.raises(fj.TracerError, match="outside the trace where fj.vjp was taken"):
        sibling(np.bool_(True), X)


def test_free_values_are_what_a_region_reads_and_does_not_define():
    from flowjit.ir.core import free_values

    def f(p, x, y):
        z = fj.exp(x)
        return fj.cond(p, lambda a: a * y, lambda a: a + 1.0, z) * z

    fn = fj.function(f).ir(np.bool_(True), X, X)
    p, x, y = fn.args
    assert {v.id for v in free_values(fn.body.ops)} == {p.id, x.id, y.id}  # the arguments only
    k = next(i for i, op in enumerate(fn.body.ops) if op.name == "cond")
    cond_op, exp_op = fn.body.ops[k], next(op for op in fn.body.ops if op.name == "exp")
    # The region from the cond on reads the predicate, exp's result and y (a capture);
    # nothing defined inside the branches counts.
    assert {v.id for v in free_values(fn.body.ops[k:])} >= {exp_op.result.id, y.id}
    assert x.id not in {v.id for v in free_values(fn.body.ops[k:])}
    branch = cond_op.blocks[1]
    assert [v.id for v in free_values(branch.ops, branch.returns)] == [a.id for a in branch.args]  # a, y
    assert free_values([], [x, x]) == [x]
