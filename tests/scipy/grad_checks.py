"""Gradient checks shared by the flowjit.scipy tests: first and second order reverse mode
against central differences, as autograd's ``check_grads(modes=["rev"], order=2)``."""
from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

import flowjit as fj
from tests.finite_differences import central_differences


def check_grads(f: Callable, args: Sequence[np.ndarray], argnums: Sequence[int], order: int = 2,
                rtol: float = 1e-5, atol: float = 1e-6, eps: float = 1e-6) -> None:
    """For each argnum, d/dx sum(w * f(...)) by fj.grad against central differences, and (order 2)
    d/dx <grad, v> by fj.grad of fj.grad against central differences of fj.grad."""
    rng = np.random.default_rng(0)
    args = [np.asarray(a, dtype=np.float64) for a in args]
    w = rng.standard_normal(np.shape(f(*args)))
    for i in argnums:
        def s(x, i=i):
            return fj.sum(f(*args[:i], x, *args[i + 1:]) * w)

        got = np.asarray(fj.grad(s)(args[i]))
        # The differences evaluate the function compiled once (eagerly, each of their 2n
        # calls would trace and run op by op).
        compiled = fj.function(s)
        want = central_differences(lambda x: float(np.asarray(compiled(x))), [args[i]], 0, eps)
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=f"first order, argument {i}")
        if order < 2:
            continue
        v = rng.standard_normal(args[i].shape)

        def gv(x, s=s, v=v):
            return fj.sum(fj.grad(s)(x) * v)

        got2 = np.asarray(fj.grad(gv)(args[i]))
        compiled_gv = fj.function(gv)
        want2 = central_differences(lambda x: float(np.asarray(compiled_gv(x))), [args[i]], 0, eps)
        np.testing.assert_allclose(got2, want2, rtol=10 * rtol, atol=10 * atol,
                                   err_msg=f"second order, argument {i}")
