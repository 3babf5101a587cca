"""The tracer's modules import each other without a cycle, counting imports anywhere in a
file, and import flowjit's modules only at the top (a function-level import of one is how a
cycle hides); ``flowjit.tracer.numpy``'s ``__init__`` imports nothing, so a topic module loads
only what it needs."""

from __future__ import annotations

import ast
import pathlib

import flowjit

ROOT = pathlib.Path(flowjit.__file__).parent
TRACER = ROOT / "tracer"


def _module(path: pathlib.Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module(p): p for p in TRACER.rglob("*.py")}


def _imports(path: pathlib.Path) -> list[tuple[ast.AST, str]]:
    """(node, imported module) for every import of a flowjit module in the file."""
    name = _module(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.extend((node, a.name) for a in node.names if a.name.startswith("flowjit"))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[:len(package.split(".")) - node.level + 1] + [base]).rstrip(".")
            if base.startswith("flowjit"):
                out.extend((node, f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base) for a in node.names)
    return out


def test_no_import_cycle_among_tracer_modules():
    graph = {name: {m for _, m in _imports(path) if m in MODULES and m != name} for name, path in MODULES.items()}
    done: set[str] = set()

    def visit(name: str, stack: list[str]) -> None:
        if name in stack:
            raise AssertionError("import cycle: " + " -> ".join(stack[stack.index(name):] + [name]))
        if name in done:
            return
        for dep in sorted(graph[name]):
            visit(dep, stack + [name])
        done.add(name)

    for name in sorted(graph):
        visit(name, [])


def test_flowjit_modules_are_imported_at_the_top():
    for name, path in MODULES.items():
        tree = ast.parse(path.read_text())
        for f in ast.walk(tree):
            if not isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(f):
                if isinstance(node, ast.Import | ast.ImportFrom):
                    mods = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or "."]
                    assert not any(m.startswith("flowjit") or getattr(node, "level", 0) for m in mods), (
                        f"{name}:{node.lineno} imports {mods} inside the function {f.name}")


def test_the_numpy_package_init_imports_nothing():
    assert not _imports(TRACER / "numpy" / "__init__.py")
