"""One scalar vocabulary: an op's scalar meaning is its registry declaration (a template over
``lowering.scalar``'s functions), one entry of ``lowering.scalar.OPS``, and one row of each
renderer's table (``CODE_FOR_OP``); no renderer tells a primitive by its name."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flowjit.ir.dtypes import dtype
from flowjit.ir.registry import all_primitives
from flowjit.lowering import scalar

ROOT = Path(scalar.__file__).resolve().parents[1]
# Each renderer's module with its table; the CUDA one imports numba.cuda (the test extra).
RENDERERS = {"cpu": "flowjit.codegen_cpu.emit", "cuda": "flowjit.codegen_cuda.writer"}


def _table(module: str) -> dict:
    if module.startswith("flowjit.codegen_cuda") and importlib.util.find_spec("numba") is None:
        pytest.skip("numba (the cuda extra) is not installed")
    return importlib.import_module(module).CODE_FOR_OP


@pytest.mark.parametrize("renderer", sorted(RENDERERS))
def test_each_renderer_has_exactly_one_row_per_scalar_op(renderer):
    table = _table(RENDERERS[renderer])
    assert sorted(set(scalar.OPS) - set(table)) == [], "ops the renderer cannot render"
    assert sorted(set(table) - set(scalar.OPS)) == [], "rows for ops the vocabulary does not have"


def test_every_scalar_op_renders_in_the_loop_ir_printer_and_evaluator():
    # The evaluator (the oracle) runs each op through its NumPy reference.
    for op in scalar.OPS:
        assert callable(scalar.reference(op, scalar.float64 if "f" in scalar.OPS[op][1] else scalar.int64)), op


def _compared_strings(path: Path) -> set[str]:
    """The strings ``path`` compares anything with (``x == "tanh"``, ``x in ("a", "b")``):
    how code tells one thing from another by name."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Compare):
            found |= {n.value for part in (node.left, *node.comparators) for n in ast.walk(part)
                      if isinstance(n, ast.Constant) and isinstance(n.value, str)}
    return found


def test_no_renderer_or_backend_names_a_primitive():
    # A primitive reaches code generation as scalar ops, kinds and roles: a backend that
    # names one (if op.name == "tanh") would be a second place for its meaning.
    vocabulary = set(scalar.OPS) | set(scalar.ACCUMULATOR_KINDS)
    declared = {p.name for p in all_primitives()}
    kinds_and_roles = {p.kind for p in all_primitives()} | {p.role for p in all_primitives() if p.role}
    named = {}
    for package in ("codegen_cpu", "codegen_cuda", "lowering"):
        for path in sorted((ROOT / package).rglob("*.py")):
            if path.name == "scalar.py":
                continue  # the vocabulary itself
            found = (_compared_strings(path) & declared) - vocabulary - kinds_and_roles
            if found:
                named[str(path.relative_to(ROOT.parent))] = sorted(found)
    assert named == {}


def test_the_name_check_sees_comparisons_only(tmp_path):
    source = tmp_path / "backend.py"
    source.write_text('__all__ = ["matmul"]\n'
                      'def f(op):\n    if op.name == "relu" or op.role in ("gather", "x"):\n        return "tanh"\n')
    assert _compared_strings(source) == {"relu", "gather", "x"}


_DTYPES = ["bool", "int8", "uint8", "int16", "int32", "uint32", "int64", "uint64", "float16", "float32", "float64"]
_EDGES = [0.0, -0.0, float("nan"), float("inf"), -float("inf"), 65504.0, 65520.0, 2.0 ** -24, 3 * 2.0 ** -26,
          2.0 ** -149, 2.0 ** -150, 1e300, True, False, -1, 255, 256, -129, 2 ** 31, 2 ** 63 - 1, -2 ** 63, 2 ** 64 - 1,
          2 ** 60 + 2 ** 36 + 1]  # an int a float32 rounds up, but down through float64 (a tie)


def _converted(convert, value, d):
    with np.errstate(all="ignore"):
        try:
            v = convert(value, d)
        except (OverflowError, ValueError, TypeError) as e:
            return type(e)
    return type(v), v.tobytes()


def _astype(value, d):
    return np.asarray(value).astype(d.np)[()]


@pytest.mark.parametrize("name", _DTYPES)
def test_a_python_number_becomes_the_scalar_astype_makes(name):
    # The evaluator's fast conversion (the scalar type's constructor) must round, wrap and
    # refuse as NumPy's astype does, bits and all (-0.0, a NaN, float16's halfway cases).
    d = dtype(name)
    for value in _EDGES:
        for convert in (scalar.bare_scalar, scalar.np_scalar):
            assert _converted(convert, value, d) == _converted(_astype, value, d), (value, convert)


@settings(max_examples=300)
@given(value=st.one_of(st.floats(allow_nan=True, allow_infinity=True, width=64), st.integers(-2 ** 65, 2 ** 65)),
       name=st.sampled_from(_DTYPES))
def test_any_python_number_becomes_the_scalar_astype_makes(value, name):
    d = dtype(name)
    assert _converted(scalar.bare_scalar, value, d) == _converted(_astype, value, d)
