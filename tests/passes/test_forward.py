"""Forward mode (flowjit/passes/forward.py) on the registry's own cases: every
differentiable primitive's JVP, compiled on the default backend, against central finite
differences in float64 along a random tangent of every float input at once (the same
cases as the VJP check in test_autodiff.py), and the rule slot of the control-flow ops."""

from __future__ import annotations

import numpy as np
import pytest

from flowjit.ir import get, interpret, new_function, verify
from flowjit.ir.types import TensorType
from flowjit.passes.forward import jvp
from flowjit.runtime.dispatch import compile_function
from tests.passes.test_autodiff import EPS, GRADIENT_CASES, _float64_case


def _jvp_function(prim, arrays, attrs, wrt):
    """IR taking the inputs and one tangent per input in ``wrt``, returning the results and
    their tangents."""
    types = [TensorType(a.shape, a.dtype) for a in arrays]
    fn, b = new_function("f", types + [types[i] for i in wrt])
    xs, ts = fn.args[:len(arrays)], fn.args[len(arrays):]
    ys = b.emit(prim, xs, attrs)
    tys = jvp(fn.body, list(fn.body.ops), [xs[i] for i in wrt], ts, ys)
    fn.body.set_returns([*ys, *tys])
    return fn


@pytest.mark.parametrize("case", GRADIENT_CASES, ids=lambda c: c.id or c.prim)
def test_jvp_matches_central_finite_differences(case):
    prim, arrays, attrs = _float64_case(case)
    rng = np.random.default_rng(5)
    wrt = [i for i, a in enumerate(arrays) if a.dtype == np.float64]
    tangents = [rng.standard_normal(arrays[i].shape) for i in wrt]
    fn = _jvp_function(prim, arrays, attrs, wrt)
    verify(fn)
    n = len(prim.infer([TensorType(a.shape, a.dtype) for a in arrays], prim.normalize_attrs(attrs)))
    got = compile_function(fn)([*arrays, *tangents])[n:]

    def moved(sign):
        xs = list(arrays)
        for i, t in zip(wrt, tangents):
            xs[i] = arrays[i] + sign * EPS * t
        return [np.asarray(r, np.float64) for r in interpret(fn, [*xs, *tangents])[:n]]
    up, down = moved(1), moved(-1)
    for k, (g, u, d) in enumerate(zip(got, up, down, strict=True)):
        if not np.issubdtype(np.asarray(g).dtype, np.floating):
            continue
        np.testing.assert_allclose(g, (u - d) / (2 * EPS), rtol=1e-5, atol=1e-6,
                                   err_msg=f"{case.id or case.prim} result {k}")


def test_control_flow_ops_declare_their_forward_rule():
    assert {p for p in ("cond", "scan", "while") if get(p).jvp is not None} == {"cond", "scan", "while"}
