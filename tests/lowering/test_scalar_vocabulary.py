"""One scalar vocabulary: an op's scalar meaning is its registry declaration (a template over
``lowering.scalar``'s functions), one entry of ``lowering.scalar.OPS``, and one row of each
renderer's table (``CODE_FOR_OP``); no renderer tells a primitive by its name."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest

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
