"""flowjit's module import graph has no cycle, and an import inside a function is only a
lazy load of an optional or costly dependency named in ``LAZY`` with its reason.

The graph is read from every module's source (its ast): imports at the top and inside
functions alike, ``from flowjit.x import name`` resolved to ``flowjit.x.name`` when that is
a module; imports under ``if TYPE_CHECKING:`` are annotations, not imports, and are left
out. A package's ``__init__`` running before its modules is Python's order, not an edge.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

import flowjit

PACKAGE = Path(flowjit.__file__).resolve().parent

# What a function may import on first use, and why it is not imported at the top.
LAZY = {
    # The backends: `import flowjit` loads no compiler (llvmlite's binding, numba); the
    # runtime, AOT and explain reach a backend when they first compile.
    "flowjit.codegen_cpu": "the CPU backend: llvmlite loads on the first compile, not on `import flowjit`",
    "flowjit.codegen_cuda": "the CUDA backend: numba.cuda and cupy load only when a CUDA device is used",
    "llvmlite": "the compiler itself: loaded by the first compile",
    # Within the CPU backend: what only rendering needs, so a process that loads its kernels
    # and programs from the object cache never imports llvmlite's IR builder.
    "flowjit.codegen_cpu.emit": "the kernel renderer (llvmlite.ir): only a process that renders loads it",
    "flowjit.codegen_cpu.program_emit": "the program renderer (llvmlite.ir): only a process that renders loads it",
    "flowjit.codegen_cpu.lapack": "the LAPACK wrappers' builder: only a program with linear algebra loads it",
    # Optional extras: absent unless installed.
    "numba": "the `cuda` extra (numba-cuda kernels, its simulator in the tests)",
    "cupy": "the `cuda` extra (device memory, cuBLAS)",
    "flowjit.distributed": "Ray (the `distributed` extra) behind it",
    "flowjit.distributed._ray": "Ray itself, imported only where a task runs (the module's task code ships without it)",
    "flowjit.codegen_cuda.matmul_kernel": "numba.cuda's jit at its import: loaded by the first matmul without cupy",
    "graphviz": "the `viz` extra (flowjit ir --format svg)",
    "tensorboardX": "the `viz` extra (summaries)",
    "tqdm": "the `examples` extra (progress bars)",
    "pyarrow": "the `validate` extra (Parquet and CSV datasets for flowjit validate)",
    "uvloop": "the `serving` extra's event loop: flowjit loadtest's clients run on it when it is installed",
    "flowjit.serving.server": "the `serving` extra (Starlette, uvicorn, prometheus-client): loaded when "
                              "`flowjit serve` runs, so `flowjit push` and the other commands never import it",
    "flowjit.serving.ray_serve": "Ray Serve (ray[serve]): loaded only by `flowjit serve --ray`",
    # Costly at import and needed only by the first compile or when asked for.
    "flowjit.lowering": "the loop IR (10 ms of import): loaded by the first compile, not by `import flowjit`",
    "flowjit.runtime.multi_device": "device threads, queues and step ids: loaded by the first placed program",
    "flowjit.explain.core": "fj.explain's machinery (5 ms of import): loaded by its first call",
    "scipy": "0.1-0.3 s to import; only special functions and LAPACK references need it",
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


# Parsed once a file: each of test_every_lazy_entry_is_still_imported_somewhere's two dozen
# cases read the whole package again (41 s of the suite). A path is parsed against the
# MODULES of its own package (the real one, or a test's package in a directory of its own).
@functools.cache
def imports(path: Path) -> list[tuple[int, str, bool]]:
    """Every import of ``path`` as (line, module, inside a function), outside
    ``if TYPE_CHECKING:``; a flowjit import resolved to the module it loads."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: list[tuple[int, str, bool]] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child, in_function)
            return
        if isinstance(node, ast.Import):
            found.extend((node.lineno, a.name, in_function) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            for a in node.names:
                full = f"{base}.{a.name}"
                found.append((node.lineno, full if full in MODULES else base, in_function))
        inside = in_function or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        for child in ast.iter_child_nodes(node):
            visit(child, inside)

    visit(ast.parse(path.read_text(), str(path)), False)
    return found


def _flowjit_module(name: str) -> str | None:
    """The flowjit module an imported name loads (``flowjit.ir.core.Op`` -> ``flowjit.ir.core``)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def import_graph() -> dict[str, set[str]]:
    """Module -> the flowjit modules it imports (anywhere in it)."""
    graph = {}
    for name, path in MODULES.items():
        deps = {_flowjit_module(m) for _, m, _ in imports(path) if m.split(".")[0] == "flowjit"}
        graph[name] = {d for d in deps if d and d != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return found


def test_flowjit_has_no_import_cycle():
    found = cycles(import_graph())
    described = []
    for component in found:
        members = set(component)
        described.append("; ".join(f"{m} -> {', '.join(sorted(import_graph()[m] & members))}" for m in component))
    assert described == []


def _lazy_reason(module: str, importer: str = "") -> str | None:
    """Why ``importer`` may import ``module`` inside a function: the most specific ``LAZY``
    entry naming it or a package above it, unless ``importer`` is inside that package (a
    package loading its own modules lazily needs an entry for that module itself)."""
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        key = ".".join(parts[:n])
        reason = LAZY.get(key)
        if reason is not None:
            return None if importer.startswith(key + ".") and key != module else reason
    return None


def test_imports_inside_functions_are_only_the_listed_lazy_loads():
    bad = [f"{path.relative_to(PACKAGE.parent)}:{line} imports {module}"
           for name, path in MODULES.items() for line, module, inside in imports(path)
           if inside and _lazy_reason(module, name) is None]
    assert bad == []


def test_the_checks_find_a_cycle_through_a_function_and_skip_type_checking(tmp_path, monkeypatch):
    fake = tmp_path / "flowjit"
    (fake / "a").mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "a" / "__init__.py").write_text("")
    (fake / "a" / "x.py").write_text("from flowjit.a.y import f\n")
    (fake / "a" / "y.py").write_text("def f():\n    from . import x\n    import json\n")
    (fake / "a" / "z.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                     "    from flowjit.a import x\ndef g():\n    import ray\n")
    monkeypatch.setitem(globals(), "PACKAGE", fake)
    monkeypatch.setitem(globals(), "MODULES", {_module_name(p): p for p in sorted(fake.rglob("*.py"))})
    assert cycles(import_graph()) == [["flowjit.a.x", "flowjit.a.y"]]
    assert import_graph()["flowjit.a.z"] == set()
    inner = [(p.name, m) for p in MODULES.values() for _, m, inside in imports(p) if inside]
    assert sorted(inner) == [("y.py", "flowjit.a.x"), ("y.py", "json"), ("z.py", "ray")]
    assert _lazy_reason("cupy") and not _lazy_reason("json") and not _lazy_reason("flowjit.a.x")
    # A listed package's own modules need their own entry to load each other lazily.
    assert _lazy_reason("flowjit.codegen_cpu.render", "flowjit.explain.core")
    assert not _lazy_reason("flowjit.codegen_cpu.jit", "flowjit.codegen_cpu.render")
    assert _lazy_reason("flowjit.codegen_cpu.emit", "flowjit.codegen_cpu.render")


@pytest.mark.parametrize("module", sorted(LAZY))
def test_every_lazy_entry_is_still_imported_somewhere(module):
    # A stale entry would let a new lazy import of that name through unexplained.
    assert any(inside and (m == module or m.startswith(module + "."))
               for path in MODULES.values() for _, m, inside in imports(path)), module
