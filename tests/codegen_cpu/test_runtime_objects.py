"""flowjit's own runtime modules (the native pool, the GEMMs over it, the entry points every
program shares) are compiled once per installation, into ``objcache.runtime_directory()``
(``FLOWJIT_RUNTIME_DIR`` here), not
once per ``FLOWJIT_CACHE_DIR``: a new process with an empty cache loads them without
rendering IR or importing LLVM; a corrupt entry there is refused and rebuilt; where that
directory cannot be written they are kept in the user's cache as a program's are."""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
import uuid

import numpy as np
import pytest

from flowjit.codegen_cpu import cache_stats, jit, objcache

from . import modules

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Starts the pool and the BLAS (the GEMMs over the pool when the library's threads can be
# set) and loads the programs' entry points; with an argument, then compiles and runs one
# small program with a matrix product.
CHILD = r"""
import json, sys
from flowjit.codegen_cpu import blas_functions, cache_stats, native_pool
from flowjit.codegen_cpu.program_glue import entry_points
native_pool()
entry_points()
gemms = any(f.address != f.routine for f in blas_functions().values())
out = {"runtime": cache_stats(), "modules": 2 + gemms,
       "llvm": sorted(m for m in ("llvmlite.binding", "llvmlite.ir") if m in sys.modules)}
if len(sys.argv) > 1:
    import numpy as np
    import flowjit as fj
    x = np.ones((8, 8), np.float32)
    y = fj.function(lambda x, w: fj.tanh(x @ w), backend="llvm")(x, x)
    out["program"], out["ok"] = fj.cache_stats(), bool(np.allclose(y, np.tanh(x @ x)))
print(json.dumps(out))
"""


def child(runtime_dir, cache_dir, *args):
    env = dict(os.environ, PYTHONPATH=ROOT, FLOWJIT_NUM_THREADS="2", FLOWJIT_RUNTIME_DIR=str(runtime_dir),
               FLOWJIT_CACHE_DIR=str(cache_dir))
    out = subprocess.run([sys.executable, "-c", CHILD, *args], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout)


def objects(directory):
    return sorted(p for p in (directory.iterdir() if directory.is_dir() else ()) if p.suffix == ".o")


def test_a_new_process_with_an_empty_cache_compiles_only_its_program(tmp_path):
    runtime = tmp_path / "runtime"
    first = child(runtime, tmp_path / "cache1")
    n = first["modules"]
    assert first["runtime"]["compiled"] == n and len(objects(runtime)) == n
    assert objects(tmp_path / "cache1" / "objects") == []       # not the user's cache
    second = child(runtime, tmp_path / "cache2", "program")
    # The runtime's modules come from the installation's directory, found without LLVM.
    assert second["runtime"]["compiled"] == 0 and second["runtime"]["loaded"] == n, second
    assert second["llvm"] == []
    assert second["ok"] and second["program"]["compiled"] == 1 and second["program"]["loaded"] == n, second
    assert len(objects(tmp_path / "cache2" / "objects")) == 1   # the program's only


@pytest.fixture
def dirs(tmp_path, monkeypatch):
    monkeypatch.setenv("FLOWJIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("FLOWJIT_RUNTIME_DIR", str(tmp_path / "runtime"))
    return tmp_path / "runtime", tmp_path / "cache" / "objects"


def load_runtime(text):
    """``text`` loaded as a runtime module is, in a process that has not loaded it yet."""
    key = objcache.key(f"; {text}", jit.host_fingerprint())
    jit._libraries.pop(key, None)
    return jit.load_source(f"; {text}", lambda: text, name="test_runtime", runtime=True)


def works(lib):
    x = np.arange(7, dtype=np.float32)
    y = np.zeros_like(x)
    lib.function("axpb", None, [ctypes.c_void_p] * 2 + [ctypes.c_int64])(x.ctypes.data, y.ctypes.data, 7)
    return (y == x * 2 + 1).all()


def counts(before):
    return {k: v - before[k] for k, v in cache_stats().items()}


def test_a_corrupt_runtime_entry_is_refused_and_rebuilt(dirs):
    runtime, user = dirs
    text = modules.axpb(f"t{uuid.uuid4().hex}")
    load_runtime(text)
    [entry] = objects(runtime)
    data = bytearray(entry.read_bytes())
    data[-1] ^= 0xFF
    entry.write_bytes(bytes(data))
    before = cache_stats()
    assert works(load_runtime(text))
    assert counts(before) == {"compiled": 1, "loaded": 0, "reused": 0, "rejected": 1}
    assert objcache.decode(entry.stem, entry.read_bytes()) is not None     # rewritten whole
    assert objects(user) == []
    before = cache_stats()
    assert works(load_runtime(text))
    assert counts(before) == {"compiled": 0, "loaded": 1, "reused": 0, "rejected": 0}


def test_an_unwritable_runtime_directory_falls_back_to_the_user_cache(dirs, tmp_path, monkeypatch):
    if os.geteuid() == 0:  # root writes to a read-only directory: one below a file cannot be made
        (tmp_path / "site-packages").write_text("")
        runtime = tmp_path / "site-packages" / "runtime"
    else:
        runtime = tmp_path / "site-packages"
        runtime.mkdir(mode=0o555)
    monkeypatch.setenv("FLOWJIT_RUNTIME_DIR", str(runtime))
    text = modules.axpb(f"t{uuid.uuid4().hex}")
    before = cache_stats()
    assert works(load_runtime(text))
    assert counts(before)["compiled"] == 1
    _, user = dirs
    assert len(objects(user)) == 1 and objects(runtime) == []
    before = cache_stats()
    assert works(load_runtime(text))                 # a later process: from the user's cache
    assert counts(before) == {"compiled": 0, "loaded": 1, "reused": 0, "rejected": 0}


KEYED_CHILD = r"""
import json
from flowjit.codegen_cpu import cache_stats, native_pool, patches_routine, program_glue
native_pool()
program_glue.entry_points()
patches_routine.routine()
print(json.dumps({k: cache_stats()[k] for k in ("compiled", "loaded")}))
"""


def test_a_runtime_module_is_compiled_again_when_a_file_its_ir_takes_changes(tmp_path):
    # The shared entry points and the patches routine loop with llvm_loops' counted_loop:
    # an edit there (an upgrade of flowjit) must not load their old objects from the
    # runtime directory, which an upgrade leaves in place. The pool's module takes nothing
    # of llvm_loops and loads as it was.
    import shutil

    shutil.copytree(os.path.join(ROOT, "flowjit"), tmp_path / "flowjit", ignore=shutil.ignore_patterns("__pycache__"))
    env = dict(os.environ, PYTHONPATH=str(tmp_path), FLOWJIT_NUM_THREADS="2",
               FLOWJIT_RUNTIME_DIR=str(tmp_path / "runtime"), FLOWJIT_CACHE_DIR=str(tmp_path / "cache"))

    def run():
        # From tmp_path: "-c" puts the working directory first on the path.
        out = subprocess.run([sys.executable, "-c", KEYED_CHILD], env=env, capture_output=True, text=True,
                             timeout=300, cwd=tmp_path)
        assert out.returncode == 0, out.stderr[-3000:]
        return json.loads(out.stdout)
    assert run()["compiled"] == 3
    assert run() == {"compiled": 0, "loaded": 3}
    loops = tmp_path / "flowjit" / "codegen_cpu" / "llvm_loops.py"
    loops.write_text(loops.read_text() + "\n# an edit\n")
    assert run() == {"compiled": 2, "loaded": 1}
