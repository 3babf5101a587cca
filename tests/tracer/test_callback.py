"""fj.pure_callback: a NumPy function inside traced programs, as jax.pure_callback: values
eager and compiled, one op per call in the IR, several results, keyword arguments, no
derivative unless fj.custom_vjp gives one, each vmap_method, and bad results named."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.special

import flowjit as fj

X = np.array([1.0, 2.5, 4.0])
SD = fj.ShapeDtype((3,), np.float64)


def _gamma(x, scale=1.0):
    return scipy.special.gamma(x) * scale


def test_values_eager_and_compiled_with_keywords():
    np.testing.assert_allclose(fj.pure_callback(_gamma, SD, X), scipy.special.gamma(X))
    f = fj.function(lambda x: fj.pure_callback(_gamma, SD, x * 2, scale=3.0) + 1)
    np.testing.assert_allclose(f(X), 3 * scipy.special.gamma(2 * X) + 1)
    assert [op.name for op in f.ir(X).walk()].count("pure_callback") == 1


def test_the_function_runs_once_per_call_of_the_compiled_program():
    calls = []

    def host(x):
        calls.append(x.copy())
        return np.sort(x)
    f = fj.function(lambda x: fj.pure_callback(host, SD, fj.exp(x)) * 2)
    for k in range(3):
        np.testing.assert_allclose(f(X + k), 2 * np.sort(np.exp(X + k)))
    assert len(calls) == 3
    np.testing.assert_allclose(calls[-1], np.exp(X + 2))


def test_several_results_as_a_pytree():
    def host(x):
        return {"total": x.sum(), "order": np.argsort(x)}
    spec = {"total": fj.ShapeDtype((), np.float64), "order": fj.ShapeDtype((3,), np.int64)}
    out = fj.function(lambda x: fj.pure_callback(host, spec, -x))(X)
    assert float(out["total"]) == -X.sum() and out["order"].tolist() == [2, 1, 0]
    assert out["order"].dtype == np.int64


def test_no_derivative_unless_custom_vjp_gives_one():
    with pytest.raises(fj.AutodiffError, match=r"no gradient for pure_callback at .*test_callback.py.*custom_vjp"):
        fj.grad(lambda x: fj.sum(fj.pure_callback(_gamma, SD, x)))(X)

    @fj.custom_vjp
    def gamma(x):
        return fj.pure_callback(_gamma, SD, x)

    def fwd(x):
        return gamma(x), x

    def bwd(x, g):
        return (g * fj.pure_callback(lambda x: scipy.special.gamma(x) * scipy.special.digamma(x), SD, x),)
    gamma.defvjp(fwd, bwd)
    want = scipy.special.gamma(X) * scipy.special.digamma(X)
    np.testing.assert_allclose(fj.grad(lambda x: fj.sum(gamma(x)))(X), want)
    np.testing.assert_allclose(fj.function(fj.grad(lambda x: fj.sum(gamma(x))))(X), want)


@pytest.mark.parametrize("method, calls_per_batch", [("sequential", 3), ("expand_dims", 1), ("broadcast_all", 1)])
def test_vmap_methods(method, calls_per_batch):
    shapes = []

    def host(x, y):
        shapes.append((x.shape, y.shape))
        return x * 10 + y
    spec = fj.ShapeDtype((2,), np.float64)
    xs, y = np.arange(6.0).reshape(3, 2), np.array([0.5, -0.5])
    f = fj.function(fj.vmap(lambda x: fj.pure_callback(host, spec, x, y, vmap_method=method)))
    np.testing.assert_allclose(f(xs), xs * 10 + y)
    assert len(shapes) == calls_per_batch
    want_y = {"sequential": (2,), "expand_dims": (1, 2), "broadcast_all": (3, 2)}[method]
    assert shapes[-1][1] == want_y


def test_vmap_without_a_method_raises_naming_the_line():
    with pytest.raises(fj.BatchingError, match=r"pure_callback at .*test_callback.py.*vmap_method"):
        fj.vmap(lambda x: fj.pure_callback(_gamma, fj.ShapeDtype((), np.float64), x))(X)


def test_a_result_of_another_shape_names_the_callback_and_the_declared_type():
    f = fj.function(lambda x: fj.pure_callback(lambda x: x[:2], SD, x))
    with pytest.raises(fj.FlowjitTypeError, match=r"pure_callback .*<lambda>#\d+: result 0 has shape \(2,\), the call "
                                                  r"declared f64\[3\]"):
        f(X)
    with pytest.raises(fj.FlowjitTypeError, match="vmap_method"):
        fj.pure_callback(_gamma, SD, X, vmap_method="loop")


def test_eager_calls_register_nothing():
    # Outside a trace the function runs at once: a loop of eager calls must not fill the table
    # that keeps the functions traced programs name.
    from flowjit.ir.primitives import callback
    before = len(callback._CALLBACKS)
    for k in range(5):
        np.testing.assert_allclose(fj.pure_callback(_gamma, SD, X + k), scipy.special.gamma(X + k))
    assert len(callback._CALLBACKS) == before
