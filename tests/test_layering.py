"""Imports flow one way (ir <- passes <- codegen/runtime <- tracer <- nn/optim <- v1), and
``import flowjit`` loads no compiler.

The import checks read every module's source (its ast, so an import inside a function
counts as much as one at the top), resolve relative imports, and name the file and line of
each import against the flow.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

import flowjit

PACKAGE = Path(flowjit.__file__).resolve().parent

# What each layer may import of flowjit (its own modules always): ``flowjit.X`` for X here.
ALLOWED = {
    "ir": {"ir"},
    "passes": {"ir"},
    "lowering": {"ir"},
    "codegen_cpu": {"ir", "lowering"},
    "codegen_cuda": {"ir", "lowering"},
    "runtime": {"ir", "passes", "lowering", "codegen_cpu", "codegen_cuda"},
    "tracer": {"ir", "passes", "runtime", "debug"},
    "debug": {"ir", "runtime"},  # numerics checks send calls down the slow path (runtime.hooks)
    "nn": {"ir", "tracer"},
    "optim": {"ir", "tracer", "nn"},
    "checkpoint": {"ir", "tracer", "optim", "version"},  # it saves optimizers' slots
    "aot": {"ir", "passes", "lowering", "codegen_cpu", "runtime", "tracer", "version"},
    "explain": {"ir", "passes", "lowering", "codegen_cpu", "runtime", "tracer"},
    "scipy": {"ir", "tracer", "nn"},  # fj.scipy: SciPy's names composed over the tracer (and nn's sigmoid)
    "summary": {"ir", "tracer"},  # TensorBoard files of a traced program (tensorboardX, imported on use)
    # Ray, imported only here (an optional extra); its tasks host partitions of placed programs
    # (runtime) and checkpoint the parameter servers.
    "distributed": {"ir", "runtime", "tracer", "optim", "checkpoint"},
    # flowjit validate: compiled artifacts (aot's loader and manifest) checked against the IR's interpreter.
    "validate": {"ir", "aot", "version"},
    # flowjit serve: compiled artifacts (aot's loader and manifest) behind Starlette, uvicorn, prometheus-client.
    "serving": {"ir", "aot", "version", "validate"},   # the live checks of a version's schema
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_module(name: str) -> bool:
    base = PACKAGE.parent.joinpath(*name.split("."))
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def flowjit_imports(path: Path) -> list[tuple[int, str]]:
    """Every flowjit module ``path`` imports, anywhere in it, with the line: ``from flowjit
    import x`` names ``flowjit.x`` when x is a module and ``flowjit`` itself otherwise."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            for a in node.names:
                full = f"{base}.{a.name}"
                found.append((node.lineno, full if _is_module(full) else base))
    return [(line, m) for line, m in found if m == "flowjit" or m.startswith("flowjit.")]


def _layer(module: str) -> str | None:
    """``flowjit.passes.cse`` -> ``passes``; the package itself -> None."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def against_the_flow(layer: str) -> list[str]:
    """The imports of the modules of ``layer`` (a subpackage or a top-level module) that
    are not in ``ALLOWED[layer]``, as ``file:line imports module``."""
    root = PACKAGE / layer
    files = sorted(root.rglob("*.py")) if root.is_dir() else [root.with_suffix(".py")]
    bad = []
    for path in files:
        for line, module in sorted(flowjit_imports(path)):
            target = _layer(module)
            if target != layer and target not in ALLOWED[layer]:
                bad.append(f"{path.relative_to(PACKAGE.parent)}:{line} imports {module}")
    return bad


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_each_layer_imports_only_the_layers_below_it(layer):
    assert against_the_flow(layer) == []


def test_the_checker_sees_imports_inside_functions_and_relative_ones(tmp_path, monkeypatch):
    # The checker itself must find what it is there to find: a function-level import of
    # an upper layer, a relative one, and `from flowjit import <not a module>`.
    fake = tmp_path / "flowjit"
    (fake / "ir").mkdir(parents=True)
    (fake / "passes").mkdir()
    for init in (fake / "__init__.py", fake / "ir" / "__init__.py", fake / "passes" / "__init__.py"):
        init.write_text("")
    (fake / "passes" / "autodiff.py").write_text("")
    (fake / "ir" / "bad.py").write_text(
        "from flowjit.ir import core\n"
        "def f():\n    from flowjit.passes.autodiff import backward\n"
        "from ..passes import autodiff\n"
        "from flowjit import device\n")
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", fake)
    assert against_the_flow("ir") == [
        "flowjit/ir/bad.py:3 imports flowjit.passes.autodiff",
        "flowjit/ir/bad.py:4 imports flowjit.passes.autodiff",
        "flowjit/ir/bad.py:5 imports flowjit",
    ]


def test_the_tracer_never_imports_the_flowjit_package():
    # The package's __init__ imports the tracer; the tracer reaching back up for it would
    # depend on the order the package happens to import its parts in.
    uses = [f"{p.relative_to(PACKAGE.parent)}:{line}" for p in sorted((PACKAGE / "tracer").rglob("*.py"))
            for line, m in flowjit_imports(p) if m == "flowjit"]
    assert uses == []


def test_import_flowjit_loads_no_compiler():
    # llvmlite loads on the first compile; numba never does on the CPU.
    prog = ("import sys, flowjit\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('numba', 'llvmlite', 'scipy')))")
    out = subprocess.run([sys.executable, "-c", prog], capture_output=True, text=True, check=True,
                         env=dict(os.environ, PYTHONWARNINGS="ignore"))
    assert out.stdout.strip() == "[]"


def test_the_backend_loads_on_first_use(tmp_path):
    # fj.cache_stats and fj.codegen_cpu import the backend when first used, and a first
    # compile works without anyone importing it beforehand; the CPU backend never imports
    # numba.
    prog = ("import sys, numpy as np, flowjit as fj\n"
            "y = fj.function(lambda x: fj.tanh(x) + 1)(np.zeros(4, np.float32))\n"
            "assert (y == 1).all(), y\n"
            "s = fj.cache_stats()\n"
            "print(s['compiled'], s['loaded'], 'numba' in sys.modules)")
    env = dict(os.environ, FLOWJIT_CACHE_DIR=str(tmp_path / "cache"), FLOWJIT_RUNTIME_DIR=str(tmp_path / "runtime"))
    env.pop("FLOWJIT_BACKEND", None)
    out = subprocess.run([sys.executable, "-c", prog], capture_output=True, text=True, check=True, env=env)
    # The program and flowjit's own entry points every program's builtin calls (program_glue).
    assert out.stdout.split() == ["2", "0", "False"]


def _primitive_names(expr: ast.expr, tables: dict[str, set[str]], names: set[str]) -> set[str]:
    """The primitive names ``expr`` spells: a string literal, a tuple/list/set of them, or a
    module-level table (a literal holding them) by its name."""
    if isinstance(expr, ast.Name):
        return tables.get(expr.id, set())
    if isinstance(expr, (ast.Tuple, ast.List, ast.Set)):
        return set().union(*(_primitive_names(e, tables, names) for e in expr.elts))
    if isinstance(expr, ast.Constant) and isinstance(expr.value, str) and expr.value in names:
        return {expr.value}
    return set()


def name_lookups(path: Path) -> list[str]:
    """Where ``path`` tells a primitive by its name: ``x.name == "scan"``, ``x.name in
    ("while", "scan")``, ``x.name in TABLE`` or ``TABLE[x.name]`` for a module-level literal
    holding primitive names."""
    from flowjit.ir.registry import all_primitives
    names = {p.name for p in all_primitives()}
    tree = ast.parse(path.read_text(), str(path))
    tables = {}
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            held = {c.value for c in ast.walk(node.value) if isinstance(c, ast.Constant) and c.value in names}
            for t in node.targets if isinstance(node, ast.Assign) else [node.target]:
                if isinstance(t, ast.Name) and held:
                    tables[t.id] = held

    def is_name(e: ast.expr) -> bool:
        return isinstance(e, ast.Attribute) and e.attr == "name"

    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(map(is_name, sides)) and any(_primitive_names(s, tables, names) for s in sides):
                found.append(node.lineno)
        elif isinstance(node, ast.Subscript) and is_name(node.slice) and _primitive_names(node.value, tables, names):
            found.append(node.lineno)
    return [f"{path.relative_to(PACKAGE.parent)}:{line}" for line in sorted(found)]


def test_nothing_outside_the_registry_tells_a_primitive_by_its_name():
    # Passes, backends and the runtime ask a primitive's declared properties (kind, role,
    # loop, ...), so a new primitive with the same properties works everywhere. The front
    # ends (tracer, v1, nn) emit primitives by name, which is not telling them apart.
    skip = {"primitives"}
    files = [p for p in sorted(PACKAGE.rglob("*.py")) if not skip & set(p.relative_to(PACKAGE).parts)]
    assert [hit for p in files for hit in name_lookups(p)] == []


def test_the_name_lookup_check_finds_lookups(tmp_path, monkeypatch):
    (tmp_path / "flowjit").mkdir()
    bad = tmp_path / "flowjit" / "bad.py"
    bad.write_text('LOOPS = ("while", "scan")\nCALLS = {"matmul": print}\n'
                   'def f(op):\n'
                   '    if op.name in LOOPS or op.primitive.name == "cond" or op.name in ("exp", "log"):\n'
                   '        return CALLS[op.name]\n'
                   '    return op.name == "float16" or op.name in CALLS\n')
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", tmp_path / "flowjit")
    assert name_lookups(bad) == ["flowjit/bad.py:4", "flowjit/bad.py:4", "flowjit/bad.py:4", "flowjit/bad.py:5",
                                 "flowjit/bad.py:6"]
