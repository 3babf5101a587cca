"""Every registry case compiled, as a user runs it: ``fj.function`` of the one primitive on
the default backend (llvm), against the
interpreter and the case's NumPy expectation.

A case whose fused program has a kernel runs that kernel, as one native program when it
has a native form (a matmul is a BLAS call in it); every other case (random draws, a
cumsum) runs the executable's NumPy reference for its op, which is what the backend does
with it. The module's first test traces every case; each case then compiles or loads and runs.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

import flowjit as fj
from flowjit.ir.registry import get
from flowjit.tracer.core import bind
from flowjit.tracer.function import TracedFunction
from tests.precompile import suite_cache, trace_and_precompile
from tests.registry.case import Case, kernel_tolerance
from tests.registry.test_generic import ALL_CASES, _domain_inputs, _tolerance

# The ops whose complex form the loop IR leaves to NumPy's references.
COMPLEX_REFUSED: frozenset[str] = frozenset()


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
            self.functions[k], self.inputs[k] = case_function(case), case_inputs(case)
        self.kernels = trace_and_precompile((self.functions[k], self.inputs[k]) for k in self.functions)
        self.seconds = time.perf_counter() - start


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    with suite_cache(tmp_path_factory):
        yield Compiled()


def test_precompile_every_case(compiled):
    before = fj.cache_stats()
    compiled.prepare()
    after = fj.cache_stats()
    print(f"\nregistry: {len(ALL_CASES)} cases, {compiled.kernels} kernels, "
          f"{after['compiled'] - before['compiled']} compiled in {compiled.seconds:.1f} s")
    assert compiled.kernels > 500


@pytest.mark.parametrize("k", range(len(ALL_CASES)), ids=[c.id or c.prim for c in ALL_CASES])
def test_case_compiled_matches_interpreter_and_numpy(compiled, k):
    case = ALL_CASES[k]
    f = compiled.functions.get(k) or case_function(case)
    arrays = compiled.inputs.get(k) or case_inputs(case)
    got = f(*arrays)
    got = got if isinstance(got, tuple) else (got,)
    want = case_function(case, interpret=True)(*arrays)
    want = want if isinstance(want, tuple) else (want,)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, g.dtype, w.shape, w.dtype)
        if g.dtype.kind in "fc":
            tol = kernel_tolerance(g.dtype)
            np.testing.assert_allclose(g, w, equal_nan=True, **tol)
        else:
            np.testing.assert_array_equal(g, w)
    exe = f._cache[next(iter(f._cache))].executable
    for name, reason in exe.fallbacks.items():  # what may run on the interpreter instead
        # The loop IR lowers complex values as pairs of floats, but for the functions whose
        # complex form it leaves to NumPy's references.
        refused = any(f"{p} of c" in reason and "has no loop lowering" in reason for p in COMPLEX_REFUSED)
        assert refused, (name, reason)
    assert_matches_again = f(*arrays)  # the second call runs the driver the first built
    for g, again in zip(got, assert_matches_again if isinstance(assert_matches_again, tuple) else
                        (assert_matches_again,)):
        np.testing.assert_array_equal(g, again)
    if case.expect is not None:
        with np.errstate(all="ignore"):
            expected = case.expect(*arrays)
        expected = expected if isinstance(expected, (tuple, list)) else (expected,)
        for g, e in zip(got, expected):
            e = np.asarray(e)
            if g.dtype.kind in "fc":
                tol = _tolerance(g.dtype)
                np.testing.assert_allclose(g.astype(np.complex128), e.astype(np.complex128), equal_nan=True,
                                           rtol=2 * tol["rtol"], atol=2 * tol["atol"])
            else:
                np.testing.assert_array_equal(g, e.astype(g.dtype))
