"""flowjit's own ELF loader (``codegen_cpu.elfload``): objects link and run as under MCJIT
(libm calls through stubs, constants, external data through the GOT, absolute pointers in
data), what it cannot link goes to MCJIT, and the host's fingerprint is remembered so
that a warm process needs no ``llvmlite.binding``."""

from __future__ import annotations

import ctypes
import json
import os
import platform
import subprocess
import sys
import uuid

import numpy as np
import pytest

from flowjit.codegen_cpu import compile_object, elfload, host_target, jit, load, objcache

from . import modules
from .test_llvm_jit import cache_dir, fresh  # noqa: F401  (the autouse fixture: a cache of each test's own)


@pytest.fixture(autouse=True)
def elf_loader(monkeypatch):
    monkeypatch.delenv("FLOWJIT_LLVM_LOADER", raising=False)  # the suite may run under the MCJIT switch


P = ctypes.c_void_p
I64 = ctypes.c_int64

pytestmark = pytest.mark.skipif(platform.system() != "Linux" or platform.machine() != "x86_64",
                                reason="the loader links x86-64 ELF objects only")


def run_exp_tanh(lib):
    f = lib.function("et", None, [P, P, I64])
    x = np.linspace(-4, 4, 1001, dtype=np.float32)
    y = np.empty_like(x)
    f(x.ctypes.data, y.ctypes.data, x.size)
    return y


def test_the_loader_links_what_mcjit_links_to_the_same_results(monkeypatch):
    text = fresh(modules.exp_tanh)
    lib = load(text)
    assert lib.loader == "elf"
    monkeypatch.setenv("FLOWJIT_LLVM_LOADER", "mcjit")
    other = load(fresh(modules.exp_tanh))
    assert other.loader == "mcjit"
    np.testing.assert_array_equal(run_exp_tanh(lib), run_exp_tanh(other))


GLOBALS = """
@environ = external global ptr
@x = internal global i64 7
@p = internal global ptr @x
@table = internal constant [2 x ptr] [ptr @x, ptr @environ]

define ptr @get_environ() {
  %v = load ptr, ptr @environ
  ret ptr %v
}

define ptr @get_p() {
  %v = load volatile ptr, ptr @p
  ret ptr %v
}

define i64 @x_address() {
  ret i64 ptrtoint (ptr @x to i64)
}

define i64 @bump() {
  %v = load volatile i64, ptr @x
  %w = add i64 %v, 1
  store volatile i64 %w, ptr @x
  ret i64 %w
}

define ptr @entry(i64 %i) {
  %slot = getelementptr [2 x ptr], ptr @table, i64 0, i64 %i
  %v = load volatile ptr, ptr %slot
  ret ptr %v
}
"""


def test_external_data_absolute_pointers_and_writable_globals():
    text = f"; {uuid.uuid4().hex}\n{GLOBALS}"
    lib = load(text)
    assert lib.loader == "elf"
    environ = ctypes.c_void_p.in_dll(ctypes.CDLL(None), "environ").value
    assert lib.function("get_environ", P, [])() == environ       # through a GOT slot
    x = lib.function("x_address", I64, [])()
    assert lib.function("get_p", P, [])() == x                   # an absolute pointer in .data
    assert lib.function("entry", P, [I64])(0) == x               # ... and in read-only data
    assert lib.function("entry", P, [I64])(1) == ctypes.addressof(ctypes.c_void_p.in_dll(ctypes.CDLL(None),
                                                                                          "environ"))
    bump = lib.function("bump", I64, [])
    assert [bump(), bump()] == [8, 9]                             # .data is writable


def test_what_the_loader_cannot_link_goes_to_mcjit():
    # A symbol only LLVM's own table knows: the ELF loader cannot bind it, MCJIT can.
    llvm = jit.binding()
    value = ctypes.c_int64(41)
    name = f"fj_test_only_llvm_{uuid.uuid4().hex}"
    llvm.add_symbol(name, ctypes.addressof(value))
    text = (f"@{name} = external global i64\n"
            f"define i64 @read() {{\n  %v = load i64, ptr @{name}\n  ret i64 %v\n}}\n")
    obj = compile_object(text)
    assert elfload.load_object(obj, lambda s: None) is None
    lib = load(text)
    assert lib.loader == "mcjit" and lib.function("read", I64, [])() == 41


def test_objects_it_does_not_understand_are_refused():
    obj = compile_object(fresh(modules.axpb))
    resolve = jit._resolve
    assert elfload.load_object(obj, resolve) is not None
    assert elfload.load_object(b"not an object", resolve) is None
    assert elfload.load_object(obj[:200], resolve) is None
    other_machine = obj[:18] + (183).to_bytes(2, "little") + obj[20:]   # EM_AARCH64
    assert elfload.load_object(other_machine, resolve) is None


def test_the_host_fingerprint_is_remembered_and_checked(tmp_path, monkeypatch):
    want = host_target().fingerprint()
    jit._fingerprints.clear()
    assert jit.host_fingerprint() == want
    notes = list((tmp_path / "hosts").iterdir())  # the autouse cache_dir is tmp_path
    assert len(notes) == 1
    jit._fingerprints.clear()
    assert jit.host_fingerprint() == want                 # read back
    notes[0].write_bytes(b"garbage")
    jit._fingerprints.clear()
    before = objcache.stats()["rejected"]
    assert jit.host_fingerprint() == want                 # a damaged note is recomputed
    assert objcache.stats()["rejected"] == before + 1
    monkeypatch.setenv("FLOWJIT_LLVM_CPU", "x86-64")
    assert jit.host_fingerprint() == host_target("x86-64").fingerprint() != want


def test_a_forked_child_writes_its_own_copy_of_a_modules_data():
    lib = load(f"; {uuid.uuid4().hex}\n{GLOBALS}")
    assert lib.loader == "elf"
    bump = lib.function("bump", I64, [])
    assert bump() == 8
    pid = os.fork()
    if pid == 0:  # the child: its bumps must not reach the parent's memory
        os._exit(0 if [bump(), bump(), bump()] == [9, 10, 11] else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert bump() == 9


_NOTED_TARGET = """
import json, sys
from flowjit.codegen_cpu import jit
jit.host_fingerprint()
noted = jit.host_target()
before = "llvmlite.binding" in sys.modules
llvm = jit.binding()
detected = jit.HostTarget(llvm.get_process_triple(), llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten())
print(json.dumps({"before": before, "same": noted == detected, "noted": str(noted)}))
"""


def test_before_llvm_loads_the_host_target_is_the_noted_fingerprints(tmp_path):
    # A cold call renders its driver while LLVM's library loads: the target comes from the
    # host's note, without importing llvmlite.binding, and is the one LLVM detects.
    env = {**os.environ, "FLOWJIT_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("FLOWJIT_LLVM_CPU", None)
    runs = []
    for _ in range(2):   # the first writes the note where no earlier process had
        done = subprocess.run([sys.executable, "-c", _NOTED_TARGET], env=env, capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 0, done.stderr
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    assert runs[1]["before"] is False, "host_target() imported LLVM though the host's note was there"
    assert runs[1]["same"], runs[1]["noted"]
