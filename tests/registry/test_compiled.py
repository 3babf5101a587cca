"""Every registry case compiled, as a user runs it: ``fj.function`` of the one primitive on
the default backend (numba), against the interpreter and the case's NumPy expectation.

A case whose fused program has a kernel runs that kernel; every other case (matmul,
random draws, a lone layout op) runs the executable's NumPy reference for its op, which is
what the default backend does with it. The module's first test compiles every cold kernel
at once on two cores (``precompile``: each kernel source once, however many cases share it;
a source's further signatures, e.g. one comparison of int32 and of int64 operands, compile
at their first call); each case then loads and runs its kernels.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

import flowjit as fj
from flowjit.codegen_cpu import kernel_stats
from flowjit.ir.registry import get
from flowjit.tracer.core import bind
from flowjit.tracer.function import TracedFunction
from tests.precompile import suite_cache, trace_and_precompile
from tests.registry.case import Case, kernel_tolerance
from tests.registry.test_generic import ALL_CASES, _domain_inputs, _tolerance


def case_inputs(case: Case) -> list[np.ndarray]:
    """The case's inputs from its seed, moved into an elementwise primitive's domain."""
    arrays = case.make_inputs(np.random.default_rng(case.seed))
    prim = get(case.prim)
    return _domain_inputs(prim, arrays) if prim.kind == "elementwise" else arrays


def case_function(case: Case, **options) -> TracedFunction:
    """The case's primitive applied to the function's arguments, as an ``fj.function``."""
    def one_op(*xs):
        return bind(case.prim, list(xs), case.attrs)

    one_op.__name__ = f"case_{case.prim}"
    return fj.function(one_op, **options)


class Compiled:
    """The compiled ``fj.function`` of every case, traced once per module."""

    def __init__(self) -> None:
        self.functions: dict[int, TracedFunction] = {}
        self.inputs: dict[int, list[np.ndarray]] = {}
        self.seconds = 0.0
        self.kernels = 0

    def prepare(self) -> None:
        start = time.perf_counter()
        for k, case in enumerate(ALL_CASES):
            self.functions[k], self.inputs[k] = case_function(case, backend="numba"), case_inputs(case)
        self.kernels = trace_and_precompile((self.functions[k], self.inputs[k]) for k in self.functions)
        self.seconds = time.perf_counter() - start


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    with suite_cache(tmp_path_factory):
        yield Compiled()


def test_precompile_every_case(compiled):
    before = kernel_stats()
    compiled.prepare()
    after = kernel_stats()
    print(f"\nregistry: {len(ALL_CASES)} cases, {compiled.kernels} kernels, "
          f"{after['compiled'] - before['compiled']} compiled in {compiled.seconds:.1f} s")
    assert compiled.kernels > 500


@pytest.mark.parametrize("k", range(len(ALL_CASES)), ids=[c.id or c.prim for c in ALL_CASES])
def test_case_compiled_matches_interpreter_and_numpy(compiled, k):
    case = ALL_CASES[k]
    f = compiled.functions.get(k) or case_function(case, backend="numba")
    arrays = compiled.inputs.get(k) or case_inputs(case)
    got = f(*arrays)
    got = got if isinstance(got, tuple) else (got,)
    want = case_function(case, interpret=True)(*arrays)
    want = want if isinstance(want, tuple) else (want,)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, g.dtype, w.shape, w.dtype)
        if g.dtype.kind == "f":
            np.testing.assert_allclose(g, w, equal_nan=True, **kernel_tolerance(g.dtype))
        else:
            np.testing.assert_array_equal(g, w)
    exe = f._cache[next(iter(f._cache))].executable
    for name, reason in exe.fallbacks.items():  # what may run on the interpreter instead
        assert "float16" in reason or "empty" in reason, (name, reason)
    if case.expect is not None:
        with np.errstate(all="ignore"):
            expected = case.expect(*arrays)
        expected = expected if isinstance(expected, (tuple, list)) else (expected,)
        for g, e in zip(got, expected):
            e = np.asarray(e)
            if g.dtype.kind == "f":
                tol = _tolerance(g.dtype)
                np.testing.assert_allclose(g.astype(np.float64), e.astype(np.float64), equal_nan=True,
                                           rtol=2 * tol["rtol"], atol=2 * tol["atol"])
            else:
                np.testing.assert_array_equal(g, e.astype(g.dtype))
