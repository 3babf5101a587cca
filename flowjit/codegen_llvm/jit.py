"""The llvmlite JIT under the LLVM renderer: one host target, O3 with the new pass manager,
machine code loaded into a private MCJIT engine per module.

A module's LLVM IR text is the whole input. ``load(ir_text)`` returns a ``Library`` whose
functions are plain C-ABI addresses; the object code comes from the disk cache
(``objcache``) when an entry for the same IR, CPU and versions is there, and otherwise is
optimized and emitted here and written back. ``load_source`` keys the entry by other text
that identifies the IR (a kernel's loop IR), so a warm load does not render the IR at all.
Only llvmlite and ``flowjit.ir`` are imported: a process that runs cached kernels needs
neither numba nor SciPy.
"""

from __future__ import annotations

import ctypes
import os
import re
import struct
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import llvmlite
import llvmlite.binding as llvm

from flowjit.ir.errors import BUG_REPORT, FlowjitError

from . import objcache

# Bump when the way this package turns IR text into machine code changes (pass pipeline,
# code model, relocation model): it is part of every cache key, so old entries go stale.
JIT_VERSION = 2

OPT_LEVEL = 3

# The native pool's entry point (pthread_pool.py), which generated code declares and calls.
PARALLEL_FOR_SYMBOL = "flowjit_parallel_for"
_DECLARED = re.compile(r'^declare [^\n]*?@"?([\w.$]+)"?\(', re.MULTILINE)

_init_lock = threading.Lock()
_initialized = False
# LLVM's global context (parse_assembly) and the shared emitting target machine are not
# safe to use from two threads at once; compiles are milliseconds, so one lock serializes them.
_llvm_lock = threading.RLock()
_targets: dict[str, HostTarget] = {}
_libraries: dict[str, Library] = {}
_key_locks: dict[str, threading.Lock] = {}
timings: dict[str, float] = {}


class LLVMCompileError(FlowjitError):
    """LLVM rejected a module (parse or verification): the message names the module, the
    LLVM diagnostic, and the file the IR was saved to for a bug report."""


def _initialize() -> None:
    global _initialized
    if _initialized:
        return
    with _init_lock:
        if not _initialized:
            t = time.perf_counter()
            # llvm.initialize() raises in llvmlite 0.50: the native target is enough.
            llvm.initialize_native_target()
            llvm.initialize_native_asmprinter()
            timings["target_init_ms"] = (time.perf_counter() - t) * 1e3
            _initialized = True


@dataclass(frozen=True)
class HostTarget:
    """The CPU machine code is made for: LLVM CPU name and feature string (empty features
    mean the CPU name's own set, as for a baseline like ``x86-64-v3``)."""

    triple: str
    cpu: str
    features: str

    def machine(self, jit: bool) -> Any:
        """A new llvmlite TargetMachine for this CPU (an MCJIT engine takes ownership of
        the one it is given, so each engine gets its own)."""
        target = llvm.Target.from_triple(self.triple)
        return target.create_target_machine(cpu=self.cpu, features=self.features, opt=OPT_LEVEL,
                                            reloc="pic", codemodel="default", jit=jit)

    def fingerprint(self) -> str:
        """Everything besides the IR that decides the machine code, for cache keys."""
        return "|".join([self.triple, self.cpu, self.features, llvmlite.__version__,
                         ".".join(map(str, llvm.llvm_version_info)), f"jit{JIT_VERSION}",
                         f"O{OPT_LEVEL}"])


def host_target(cpu: str | None = None) -> HostTarget:
    """The target for ``cpu`` (an LLVM CPU name such as ``x86-64-v3``), or for
    ``FLOWJIT_LLVM_CPU`` when set, or else the host CPU with its detected features."""
    _initialize()
    cpu = cpu or os.environ.get("FLOWJIT_LLVM_CPU") or ""
    found = _targets.get(cpu)
    if found is None:
        if cpu:
            found = HostTarget(llvm.get_process_triple(), cpu, "")
        else:
            found = HostTarget(llvm.get_process_triple(), llvm.get_host_cpu_name(),
                               llvm.get_host_cpu_features().flatten())
        _targets[cpu] = found
    return found


_emitters: dict[HostTarget, Any] = {}


def _emitter(target: HostTarget) -> Any:
    tm = _emitters.get(target)
    if tm is None:
        tm = _emitters[target] = target.machine(jit=True)
    return tm


def _fail(name: str, ir_text: str, err: Exception) -> LLVMCompileError:
    path = objcache.save_failed(ir_text)
    where = f"; its IR is saved in {path}" if path else ""
    return LLVMCompileError(
        f"LLVM rejected module {name!r}: {str(err).strip()}{where}; {BUG_REPORT}")


def optimize(ir_text: str, target: HostTarget | None = None, name: str = "module") -> Any:
    """Parse and verify ``ir_text`` and run LLVM's O3 module pipeline (new pass manager)
    for ``target``; returns the optimized llvmlite ModuleRef (``str()`` of it is the IR)."""
    target = target or host_target()
    with _llvm_lock:
        try:
            module = llvm.parse_assembly(ir_text)
            module.verify()
        except RuntimeError as e:
            raise _fail(name, ir_text, e) from None
        tm = _emitter(target)
        module.triple = target.triple
        module.data_layout = str(tm.target_data)
        pto = llvm.create_pipeline_tuning_options(speed_level=OPT_LEVEL)
        pb = llvm.create_pass_builder(tm, pto)
        pb.getModulePassManager().run(module, pb)
        return module


def compile_object(ir_text: str, target: HostTarget | None = None, name: str = "module") -> bytes:
    """The relocatable object code (ELF on Linux) of ``ir_text`` optimized at O3 for
    ``target``: what the disk cache stores and an AOT build would link."""
    target = target or host_target()
    with _llvm_lock:
        t = time.perf_counter()
        module = optimize(ir_text, target, name)
        t1 = time.perf_counter()
        obj = _emitter(target).emit_object(module)
        timings["last_optimize_ms"] = (t1 - t) * 1e3
        timings["last_codegen_ms"] = (time.perf_counter() - t1) * 1e3
        return obj


def _defined(symbol: str) -> bool:
    if llvm.address_of_symbol(symbol):
        return True
    try:  # the process's own symbols (libc, libm), which the engine also searches
        ctypes.CDLL(None)[symbol]
        return True
    except (AttributeError, OSError):
        return False


def _check_externals(declared: Sequence[str], name: str) -> None:
    """Refuse a module that calls a function (of ``declared``) no loaded library defines:
    MCJIT would link the call to address 0 and the first call would crash the process."""
    declared = [s for s in declared if not s.startswith("llvm.")]
    missing = [s for s in declared if not _defined(s)]
    if missing:
        from .blas import blas_functions
        blas_functions()  # loads the CBLAS library into LLVM's search, if it is one of those
        missing = [s for s in missing if not _defined(s)]
    if missing:
        raise LLVMCompileError(
            f"module {name!r} calls {', '.join(map(repr, missing))}, which no library loaded in "
            "this process defines: load the library first (llvmlite.binding.load_library_permanently) "
            "or register the address (llvmlite.binding.add_symbol)")


class Library:
    """Machine code of one module, resolved and executable; keep it alive as long as any
    address or function taken from it is used (the engine owns the memory)."""

    def __init__(self, obj: bytes, target: HostTarget, key: str) -> None:
        self.key = key
        self.target = target
        with _llvm_lock:
            # An empty module to create the engine: the code arrives as an object file.
            self._engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), target.machine(jit=True))
            self._engine.add_object_file(llvm.ObjectFileRef.from_data(obj))
            self._engine.finalize_object()
        self._addresses: dict[str, int] = {}

    def address(self, name: str) -> int:
        """The address of function ``name`` (a C-ABI entry point); KeyError if the module
        defines no such symbol."""
        found = self._addresses.get(name)
        if found is None:
            with _llvm_lock:
                found = self._engine.get_function_address(name)
            if not found:
                raise KeyError(f"the compiled module defines no function {name!r}")
            self._addresses[name] = found
        return found

    def function(self, name: str, restype: Any, argtypes: Sequence[Any]) -> Any:
        """Function ``name`` as a ctypes callable with the given C types (``None`` restype
        for void); ctypes releases the GIL for the length of each call."""
        return ctypes.CFUNCTYPE(restype, *argtypes)(self.address(name))


def load(ir_text: str, target: HostTarget | None = None, name: str = "module") -> Library:
    """The compiled ``Library`` of LLVM IR text ``ir_text`` for ``target`` (the host by
    default): reused if this process has it, loaded from the disk cache if a valid entry is
    there, compiled (and cached) otherwise. Threads asking for one module at once compile it
    once. ``name`` names the module in errors."""
    return load_source(ir_text, lambda: ir_text, target, name)


# An entry's payload: a tag, the length of the module's declared functions (newline-
# separated), those names, then the object code. A warm load links those names without
# the IR text.
_META = struct.Struct("<8sI")
_META_TAG = b"FJDECL01"


def _pack(ir_text: str, obj: bytes) -> bytes:
    names = "\n".join(_DECLARED.findall(ir_text)).encode()
    return _META.pack(_META_TAG, len(names)) + names + obj


def _unpack(payload: bytes) -> tuple[list[str], bytes] | None:
    if len(payload) < _META.size:
        return None
    tag, n = _META.unpack_from(payload)
    if tag != _META_TAG or _META.size + n > len(payload):
        return None
    names = payload[_META.size:_META.size + n].decode(errors="replace")
    return (names.split("\n") if names else []), payload[_META.size + n:]


def _link_externals(declared: Sequence[str], name: str) -> None:
    if PARALLEL_FOR_SYMBOL in declared:
        # The pool's symbol must be registered before the engine links a caller of it.
        from .pthread_pool import native_pool
        native_pool()
    _check_externals(declared, name)


def load_source(source: str, render: Callable[[], str], target: HostTarget | None = None,
                name: str = "module") -> Library:
    """The compiled ``Library`` of the module ``render()`` returns (LLVM IR text), cached
    under ``source``: text that identifies that IR completely (the IR itself, or a kernel's
    loop IR with the renderer's version). A warm process loads the object code without
    calling ``render``; otherwise as ``load``."""
    target = target or host_target()
    key = objcache.key(source, target.fingerprint())
    lib = _libraries.get(key)
    if lib is not None:
        objcache.count("reused")
        return lib
    with _init_lock:
        lock = _key_locks.setdefault(key, threading.Lock())
    with lock:
        lib = _libraries.get(key)
        if lib is not None:
            objcache.count("reused")
            return lib
        t = time.perf_counter()
        payload = objcache.read(key)
        entry = _unpack(payload) if payload is not None else None
        if payload is not None and entry is None:
            objcache.count("rejected")
        if entry is not None:
            declared, obj = entry
            _link_externals(declared, name)
            lib = Library(obj, target, key)
            objcache.count("loaded")
            timings["last_load_ms"] = (time.perf_counter() - t) * 1e3
        else:
            ir_text = render()
            _link_externals(_DECLARED.findall(ir_text), name)
            obj = compile_object(ir_text, target, name)
            objcache.write(key, _pack(ir_text, obj))
            lib = Library(obj, target, key)
            objcache.count("compiled")
            timings["last_compile_ms"] = (time.perf_counter() - t) * 1e3
        _libraries[key] = lib
        return lib
