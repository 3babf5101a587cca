"""flowjit.scipy.integrate.odeint: values against scipy.integrate.odeint (and jax's odeint where
installed), eagerly and compiled, pytree states, gradients to second order against finite
differences in y0, t and the extra arguments (autograd's test_odeint system), and bad input."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.integrate as si

import flowjit as fj
from flowjit.ir.errors import ShapeError
from flowjit.scipy.integrate import odeint
from tests.scipy.grad_checks import check_grads

R = np.random.default_rng(3).standard_normal


def _func(y, t, arg1, arg2):  # autograd's tests/test_scipy.py system
    return -fj.sqrt(t) - y + arg1 - fj.mean((y + arg2) ** 2)


def _np_func(y, t, arg1, arg2):
    return -np.sqrt(t) - y + arg1 - np.mean((y + arg2) ** 2)


Y0, TS, A1, A2 = R(3), np.linspace(0.1, 0.2, 4), R(3), R(3)


def test_values_match_scipy_eager_and_compiled():
    want = si.odeint(_np_func, Y0, TS, (A1, A2), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(odeint(_func, Y0, TS, A1, A2), want, rtol=1e-7, atol=1e-9)
    compiled = fj.function(lambda y0, ts, a1, a2: odeint(_func, y0, ts, a1, a2))
    np.testing.assert_allclose(compiled(Y0, TS, A1, A2), want, rtol=1e-7, atol=1e-9)
    assert odeint(_func, Y0, TS[:1], A1, A2).shape == (1, 3)


def test_stiff_decay_over_a_long_span_matches_scipy():
    # Many steps per interval, step sizes that grow and get rejected.
    ts = np.array([0.0, 0.5, 3.0, 10.0])
    k = np.array([0.5, 5.0, 50.0])
    want = si.odeint(lambda y, t: -k * (y - np.cos(t)), np.ones(3), ts, rtol=1e-12, atol=1e-12, mxstep=100000)
    got = odeint(lambda y, t, k: -k * (y - fj.cos(t)), np.ones(3), ts, k, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-8)


def test_pytree_state():
    # A harmonic oscillator as a (position, velocity) pair, solved as one state.
    ts = np.linspace(0.0, 3.0, 5)
    pos, vel = odeint(lambda s, t, w: (s[1], -w ** 2 * s[0]), (np.ones(2), np.zeros(2)), ts, np.array([1.0, 2.0]))
    np.testing.assert_allclose(pos, np.cos(np.outer(ts, [1.0, 2.0])), atol=1e-7)
    np.testing.assert_allclose(vel, -np.array([1.0, 2.0]) * np.sin(np.outer(ts, [1.0, 2.0])), atol=1e-7)


def _solution(y0, ts, a1, a2):
    return odeint(_func, y0, ts, a1, a2)


def test_first_order_gradients():
    check_grads(_solution, [Y0, TS, A1, A2], [0, 1, 2, 3], order=1, rtol=1e-4, atol=1e-6)


# Each second-order check compiles the adjoint of the adjoint (about 25 s on 2 cores): one in
# the default suite, the rest marked slow.
@pytest.mark.parametrize("argnum", [2, pytest.param(0, marks=pytest.mark.slow), pytest.param(1, marks=pytest.mark.slow),
                                    pytest.param(3, marks=pytest.mark.slow)])
def test_second_order_gradients(argnum):
    check_grads(_solution, [Y0, TS, A1, A2], [argnum], rtol=1e-4, atol=1e-6)


def test_gradient_compiled_matches_eager_and_jax(request):
    def loss(y0, ts, a1, a2):
        return fj.sum(odeint(_func, y0, ts, a1, a2) ** 2)
    eager = fj.grad(loss, argnums=(0, 1, 2, 3))(Y0, TS, A1, A2)
    compiled = fj.function(fj.grad(loss, argnums=(0, 1, 2, 3)))(Y0, TS, A1, A2)
    for e, c in zip(eager, compiled):
        np.testing.assert_allclose(c, e, rtol=1e-10, atol=1e-12)
    jax = request.getfixturevalue("jax_x64")
    from jax.experimental.ode import odeint as jodeint
    jfunc = lambda y, t, a1, a2: -jax.numpy.sqrt(t) - y + a1 - jax.numpy.mean((y + a2) ** 2)  # noqa: E731
    want = jax.grad(lambda *a: jax.numpy.sum(jodeint(jfunc, *a) ** 2), argnums=(0, 1, 2, 3))(Y0, TS, A1, A2)
    for e, w in zip(eager, want):
        np.testing.assert_allclose(e, np.asarray(w), rtol=1e-6, atol=1e-8)


def test_bad_times_name_the_problem():
    with pytest.raises(ShapeError, match="t must be a 1-d array"):
        odeint(_func, Y0, np.ones((2, 2)), A1, A2)


def test_vmap_batches_initial_states_and_forward_mode_is_refused_as_in_jax():
    ts = np.array([0.0, 0.5, 1.0])
    y0s = np.array([[1.0, 2.0], [3.0, -1.0]])
    k = np.array([0.5, 1.5])
    got = fj.vmap(lambda y0: odeint(lambda y, t, k: -k * y, y0, ts, k))(y0s)
    np.testing.assert_allclose(got, y0s[:, None, :] * np.exp(-k * ts[:, None]), rtol=1e-7)
    with pytest.raises(fj.AutodiffError, match="forward mode"):
        fj.jvp(lambda k: odeint(lambda y, t, k: -k * y, y0s[0], ts, k), (k,), (np.ones(2),))
