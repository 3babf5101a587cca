"""Every fusible registry case lowered to the loop IR, verified, printed and evaluated
against the reference interpreter (tolerances of tests/registry/case.py's kernel_tolerance):
the loop IR computes what the registry declares before any renderer exists."""

from __future__ import annotations

import numpy as np
import pytest

from flowjit.ir import interpret, new_function, verify
from flowjit.ir.registry import get
from flowjit.ir.types import TensorType
from flowjit.lowering import evaluate, lower_block, print_kernel, verify_kernel
from tests.registry.case import Case, kernel_tolerance
from tests.registry.test_compiled import COMPLEX_REFUSED
from tests.registry.test_generic import ALL_CASES, FUSIBLE, _domain_inputs, _tolerance


def _complex(case) -> bool:
    """Whether the case's op takes or makes a complex value (``complex(re, im)`` of floats does)."""
    prim = get(case.prim)
    types = [TensorType(a.shape, a.dtype) for a in case.make_inputs(np.random.default_rng(0))]
    outs = prim.infer(types, prim.normalize_attrs(case.attrs))
    return any(t.dtype.is_complex for t in (*types, *outs))


# The ops whose complex form has no loop lowering (COMPLEX_REFUSED): their kernels run the
# ops' NumPy references (NumPy's special cases), and the lowering says so (test below).
CASES = [c for c in ALL_CASES if get(c.prim).kind in FUSIBLE and not (c.prim in COMPLEX_REFUSED and _complex(c))]


def check_block_against_interpreter(fn, arrays: list[np.ndarray], name: str) -> str:
    """Lower ``fn``'s body, verify, print and evaluate it on ``arrays``; assert every output
    matches the interpreter. Returns the printed kernel."""
    kernel = lower_block(fn.body, name, collapse=True)   # as the CPU compiles it
    verify_kernel(kernel)
    text = print_kernel(kernel)
    want = interpret(fn, arrays)
    got = [np.zeros(v.type.shape, v.type.dtype.np) for v in fn.body.returns]
    evaluate(kernel, arrays, got)
    for g, w in zip(got, want):
        tol = _tolerance(w.dtype) if w.dtype == np.float16 else kernel_tolerance(w.dtype)
        np.testing.assert_allclose(g, w, equal_nan=True, err_msg=text, **tol)
        assert g.dtype == w.dtype
    return text


def case_function(case: Case):
    """The case's one-op function and its inputs (moved into an elementwise op's domain)."""
    prim = get(case.prim)
    arrays = case.make_inputs(np.random.default_rng(case.seed))
    if prim.kind == "elementwise":
        arrays = _domain_inputs(prim, arrays)
    types = [TensorType(a.shape, a.dtype) for a in arrays]
    fn, b = new_function(case.prim, types, [f"x{i}" for i in range(len(types))])
    fn.body.set_returns(b.emit(prim, fn.args, case.attrs))
    verify(fn)
    return fn, arrays


def test_every_fusible_registry_case_lowers_and_evaluates_as_the_interpreter():
    failures = []
    for case in CASES:
        fn, arrays = case_function(case)
        try:
            check_block_against_interpreter(fn, arrays, f"case_{case.prim}")
        except Exception as e:  # collected, so one run names every failing case
            failures.append(f"{case.id or case.prim}: {str(e)[:2000]}")
    assert not failures, f"{len(failures)} of {len(CASES)} cases:\n" + "\n\n".join(failures[:5])


def test_the_complex_ops_with_no_loop_lowering_are_refused_by_name():
    from flowjit.lowering import Unsupported

    refused = set()
    for case in ALL_CASES:
        if case.prim in COMPLEX_REFUSED and _complex(case):
            fn, _ = case_function(case)
            with pytest.raises(Unsupported, match=rf"{case.prim} of c(64|128)"):
                lower_block(fn.body)
            refused.add(case.prim)
    assert refused == COMPLEX_REFUSED
