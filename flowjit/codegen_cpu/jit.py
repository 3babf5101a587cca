"""The llvmlite JIT under the LLVM renderer: one host target, O3 with the new pass manager,
machine code loaded by ``elfload`` (or, for an object it does not handle, a private MCJIT
engine per module).

A module's LLVM IR text is the whole input. ``load(ir_text)`` returns a ``Library`` whose
functions are plain C-ABI addresses; the object code comes from the disk cache
(``objcache``) when an entry for the same IR, CPU and versions is there, and otherwise is
optimized and emitted here and written back. ``load_source`` keys the entry by other text
that identifies the IR (a kernel's loop IR), so a warm load does not render the IR at all;
with ``runtime=True`` (flowjit's own modules: the native pool, the GEMMs over it) the entry
is kept once per installation, in ``objcache.runtime_directory()``, not in the user's cache.
A warm load does not import ``llvmlite.binding`` either (15 ms): the host's fingerprint for
the cache key is remembered on disk (``host_fingerprint``) and ``elfload`` links the object.
A program's compile is tiered (``QUICK_CODEGEN_LEVEL``): its first calls run code from
LLVM's quick code generator (a large module's IR optimized by a lighter pipeline,
``QUICK_PIPELINE``), which the disk cache keeps; once the program is hot (its second call),
a thread renders and compiles the full code (``_upgrade``), which replaces it, in this
process and in the cache.
Only llvmlite and ``flowjit.ir`` are imported: a process that runs cached kernels needs
neither numba nor SciPy.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import functools
import hashlib
import importlib.util
import os
import platform
import re
import struct
import sys
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import llvmlite

from flowjit.ir.errors import BUG_REPORT, FlowjitError
from flowjit.ir.records import compile_records, record

from . import elfload, objcache

# Bump when the way this package turns IR text into machine code changes (pass pipeline,
# code model, relocation model): it is part of every cache key, so old entries go stale.
JIT_VERSION = 2

OPT_LEVEL = 3
# LLVM's unrolling budget (O3's is 300). A program's kernels are inlined into its driver with
# their shapes known, so every short loop is a candidate, and unrolling them made most of a
# cold call's compile. 300 -> 150 took a cold CNN call 407 -> 266 ms; 150 -> 20 takes the
# zoo's cold calls a further 0.6-0.85x (a transformer's training step 1.41 -> 0.86 s, CNN
# inference 289 -> 244 ms, MLP inference 129 -> 110) with every zoo model's steady state and
# the bandwidth kernels within noise (side by side in fresh processes; at 0, or with
# unrolling off, MLP and CNN inference lose 12-17% and an embedding bag's mean 40%). The
# option is LLVM's, process-wide: flowjit is what compiles with llvmlite here.
UNROLL_THRESHOLD = 20
# The most trips of a loop LLVM weighs unrolling whole by what that simplifies (its
# -unroll-max-iteration-count-to-analyze, at LLVM's default), set here because the renderer
# counts on it: a float sum of more trips than this and than UNROLL_THRESHOLD / 2 is never
# unrolled whole by any pipeline (emit.REASSOCIATE_MIN_TRIPS).
UNROLL_ANALYSED_TRIPS = 10

# Tiered code generation. A program's first compile emits its O3-optimized IR with LLVM's
# quick code generator (QUICK_CODEGEN_LEVEL: fast instruction selection and register
# allocation), which takes a quarter of the time of O3's (the CNN's two modules: 19 -> 4-5
# ms each) for code 0-5% slower on the zoo (its products and convolutions are the BLAS's
# and flowjit's own runtime's), and writes it to the disk cache as the quick code's entry.
# The zoo's cold first calls, fresh processes alternated: the CNN's inference 125-138 ->
# 120-126 ms, the transformer's 166-173 -> 142-153. Off with FLOWJIT_TIERED=0 (every
# compile then emits at O3 and writes the cache before returning).
# The full code is made when the program is hot: when its second call returns
# (``Library.upgrade_now``), a thread of its own renders the module again, compiles it as a
# single tier would, writes it to the cache as the full code's entry (which a warm process
# loads first) and points the program at it. A program run once (a test, a script's one
# batch) never pays for it: made after each first call, full code nobody ran had taken 30%
# of the suite's compile-bound files' time (tracer/test_array_api and
# lowering/test_complex_lowering on two workers: 74-79 -> 54-55 s), and a process that ran
# its program once waited for it at exit. A warm process that loads the quick code upgrades
# it the same way when its program gets hot there.
QUICK_CODEGEN_LEVEL = 0
# A large module's quick code comes from a lighter IR pipeline too (QUICK_PIPELINE: LLVM's O1,
# its loop vectorizer interleaving as O3's does, no unrolling), and the upgrade's thread then
# optimizes its IR text again at O3: the full code is the one a single tier makes. The
# quick code gives the full code's bits (tests/codegen_cpu/test_tiers.py): O1 without
# interleaving summed a row's reassociable sums in another order, 1 ulp apart. O3 spent 35
# and 36 ms on the CNN's two inference modules, this pipeline 28 and 26 (the transformer's
# 51 and 54 -> 36 and 42, the LSTM's training step's first 103 -> 66). Cold first calls,
# five fresh processes of each alternated in a slow spell of the machine: the CNN's
# inference 147 -> 130 ms, its training step 545 -> 428, the transformer's inference 206 ->
# 176, the LSTM's training step 423 -> 372, the MLP's 293 -> 273 (in a quiet one the CNN's
# inference 114 -> 107). A module under QUICK_PIPELINE_MIN_CHARS keeps O3's pipeline (the
# MLP's inference: 3 and 6 ms, about the same under both). An upgrade compiles its modules
# on threads of their own (``compile_objects(apart=True)``), off llvmlite's lock.
QUICK_PIPELINE: tuple[int, dict[str, bool]] = (1, {"loop_unrolling": False})
QUICK_PIPELINE_MIN_CHARS = 16_000
# A small program whose order of float arithmetic no pipeline may choose (no float
# accumulator in any kernel: nothing a reassociable sum or a max under nsz lets LLVM regroup)
# computes the same bits optimized or not, and its quick code then skips the IR pipeline
# (UNOPTIMIZED_PIPELINE: LLVM's O0, the kernels called, not inlined, their locals on the
# stack); the upgrade runs O3's on its text. The caller says which programs may
# (``program.quick_unoptimized``: no loop, few elements). The MLP's inference: its two
# modules' LLVM time on the first call 14 -> 7 ms, its first run 0.4 -> 0.9 ms.
UNOPTIMIZED_PIPELINE: tuple[int, dict[str, bool]] = (0, {})

# The native pool's entry point (pthread_pool.py), which generated code declares and calls.
PARALLEL_FOR_SYMBOL = "flowjit_parallel_for"

# Who defines what generated code may call, registered by the modules that make those calls
# possible (this module links; it never knows the pool or BLAS): a symbol's starter runs
# before a module declaring the symbol is linked, and the library loaders run when a
# module calls a function no loaded library defines yet.
_SYMBOL_STARTERS: dict[str, Callable[[], object]] = {}
_LIBRARY_LOADERS: list[Callable[[], object]] = []


def provide_symbol(symbol: str, start: Callable[[], object]) -> None:
    """Register ``start``, which defines ``symbol`` (``register_symbol``), to run before any
    module that declares ``symbol`` is linked."""
    _SYMBOL_STARTERS[symbol] = start


def provide_libraries(load: Callable[[], object]) -> None:
    """Register ``load``, which adds libraries to the symbol search (``add_library``), to
    run when a module calls a function nothing loaded defines."""
    if load not in _LIBRARY_LOADERS:
        _LIBRARY_LOADERS.append(load)
_DECLARED = r'^declare [^\n]*?@"?([\w.$]+)"?\('


def _declared(ir_text: str) -> list[str]:
    """The functions ``ir_text`` declares (compiled on the first compile, not at import)."""
    return re.findall(_DECLARED, ir_text, re.MULTILINE)


_DEFINED = r'^define (?!internal |private )[^\n]*?@"?([\w.$]+)"?\('


def _declared_by(ir_texts: Sequence[str]) -> list[str]:
    """The functions the modules ``ir_texts`` declare and none of them defines: what must
    come from outside when they are linked together."""
    own = {n for t in ir_texts for n in re.findall(_DEFINED, t, re.MULTILINE)}
    return list(dict.fromkeys(n for t in ir_texts for n in _declared(t) if n not in own))

_init_lock = threading.Lock()
_initialized = False
_llvm: Any = None
# Symbols flowjit defines for generated code (the native pool's entry), and libraries it
# loaded for it (CBLAS): both the ELF loader and MCJIT resolve names through them.
_symbols: dict[str, int] = {}
_search: list[tuple[str, ctypes.CDLL]] = []
# LLVM's global context (parse_assembly) and the shared emitting target machine are not
# safe to use from two threads at once; compiles are milliseconds, so one lock serializes them.
_llvm_lock = threading.RLock()
_targets: dict[str, HostTarget] = {}
_libraries: dict[str, Library] = {}
_key_locks: dict[str, threading.Lock] = {}
timings: dict[str, float] = {}
# The threads emitting a quick library's full code (``_upgrade``), each with that library,
# for ``wait_for_upgrades``; and the lock of that table and of each library's successor and
# watchers.
_upgrades: dict[threading.Thread, Library] = {}
_upgrade_lock = threading.Lock()
_upgrade_counts = {"upgraded": 0, "failed": 0}


class LLVMCompileError(FlowjitError):
    """LLVM rejected a module (parse or verification): the message names the module, the
    LLVM diagnostic, and the file the IR was saved to for a bug report."""


def binding() -> Any:
    """``llvmlite.binding`` with the native target initialized and flowjit's symbols and
    libraries registered, imported on first use: a warm process never needs it."""
    global _initialized, _llvm
    if _initialized:
        return _llvm
    with _init_lock:
        if not _initialized:
            t = time.perf_counter()
            import llvmlite.binding as llvm
            # llvm.initialize() raises in llvmlite 0.50: the native target is enough.
            llvm.initialize_native_target()
            llvm.initialize_native_asmprinter()
            llvm.set_option("flowjit", f"-unroll-threshold={UNROLL_THRESHOLD}")
            llvm.set_option("flowjit", f"-unroll-max-iteration-count-to-analyze={UNROLL_ANALYSED_TRIPS}")
            for path, _ in _search:
                llvm.load_library_permanently(path)
            for name, address in _symbols.items():
                llvm.add_symbol(name, address)
            timings["target_init_ms"] = (time.perf_counter() - t) * 1e3
            _llvm = llvm
            _initialized = True
    return _llvm


_prefetched = False


def prefetch_llvm() -> None:
    """Start loading LLVM's shared library (llvmlite's, ~180 MB) on a thread of its own, when
    a module is about to be compiled in a process that has not imported ``llvmlite.binding``:
    ``dlopen`` called through ctypes releases the GIL for the milliseconds the dynamic
    loader takes (7 of a cold call's 18 in ``binding``), while the calling thread renders
    the module, and llvmlite's own ``CDLL`` then finds the library loaded."""
    global _prefetched
    with _init_lock:
        if _initialized or _prefetched or os.name != "posix":   # dlopen: a POSIX loader
            return
        _prefetched = True
    try:
        from llvmlite.utils import get_library_name
        path = os.path.join(os.path.dirname(llvmlite.__file__), "binding", get_library_name())
        dlopen = ctypes.CDLL(None).dlopen
        mode = os.RTLD_NOW | os.RTLD_LOCAL   # what ctypes.CDLL passes, so both get one handle
    except (ImportError, OSError, AttributeError, TypeError):   # llvmlite loads it when used
        return
    if not os.path.exists(path):
        return
    dlopen.restype, dlopen.argtypes = ctypes.c_void_p, [ctypes.c_char_p, ctypes.c_int]
    threading.Thread(target=dlopen, args=(os.fsencode(path), mode), daemon=True, name="flowjit-load-llvm").start()


def register_symbol(name: str, address: int) -> None:
    """Make ``name`` resolve to ``address`` in every module loaded from now on."""
    with _init_lock:
        _symbols[name] = address
        if _llvm is not None:
            _llvm.add_symbol(name, address)


def add_library(path: str, lib: ctypes.CDLL) -> None:
    """Search shared library ``path`` (already loaded as ``lib``) for the symbols of
    modules loaded from now on, as the process's own symbols are."""
    with _init_lock:
        _search.append((path, lib))
        if _llvm is not None:
            _llvm.load_library_permanently(path)


_process: ctypes.CDLL | None = None


def _resolve(name: str) -> int | None:
    # The ELF loader's view of what MCJIT searches: flowjit's symbols, the process, then
    # the libraries added for generated code.
    global _process
    found = _symbols.get(name)
    if found:
        return found
    start = _SYMBOL_STARTERS.get(name)
    if start is not None:
        # A symbol the code generator called by name (a compiler builtin) rather than
        # one the IR declared: its provider defines it now.
        start()
        found = _symbols.get(name)
        if found:
            return found
    if _process is None:
        _process = ctypes.CDLL(None)
    for lib in (_process, *(lib for _, lib in _search)):
        try:
            return ctypes.cast(getattr(lib, name), ctypes.c_void_p).value
        except AttributeError:
            continue
    return None


# LLVM's x86 CPU names with AVX-512F (what ``HostTarget.native_ldexp`` knows of a named CPU).
_AVX512_CPUS = frozenset({
    "x86-64-v4", "skylake-avx512", "skx", "cascadelake", "cooperlake", "cannonlake", "icelake-client",
    "icelake-server", "tigerlake", "rocketlake", "sapphirerapids", "emeraldrapids", "graniterapids",
    "graniterapids-d", "diamondrapids", "znver4", "znver5"})


# ... and those with FMA3 but not AVX-512F (what ``HostTarget.native_fma`` knows of a named CPU).
_FMA_CPUS = frozenset({
    "x86-64-v3", "haswell", "broadwell", "skylake", "alderlake", "raptorlake", "meteorlake",
    "znver1", "znver2", "znver3", "bdver2", "bdver3", "bdver4"})


@record
class HostTarget:
    """The CPU machine code is made for: LLVM CPU name and feature string (empty features
    mean the CPU name's own set, as for a baseline like ``x86-64-v3``)."""

    triple: str
    cpu: str
    features: str

    def machine(self, jit: bool, opt_level: int = OPT_LEVEL) -> Any:
        """A new llvmlite TargetMachine for this CPU (an MCJIT engine takes ownership of
        the one it is given, so each engine gets its own), generating code at ``opt_level``."""
        target = binding().Target.from_triple(self.triple)
        return target.create_target_machine(cpu=self.cpu, features=self.features, opt=opt_level,
                                            reloc="pic", codemodel="default", jit=jit)

    def native_ldexp(self) -> bool:
        """Whether LLVM makes a vector ``llvm.ldexp`` one instruction for this CPU
        (AVX-512's ``vscalefps``; elsewhere it is a libm call per element): the host's
        detected features, or a CPU name known to have AVX-512F (an unknown name: no,
        which is only slower)."""
        if self.features:
            return "+avx512f" in self.features.split(",")
        return self.cpu in _AVX512_CPUS

    def has_avx(self) -> bool:
        """Whether this is an x86 CPU with AVX (its code may end the upper halves' use with
        ``vzeroupper``): the detected features, or a CPU name known to have FMA (an unknown
        name: no, which costs only speed after a library call)."""
        if not self.triple.startswith(("x86_64", "i386", "i686")):
            return False
        if self.features:
            return "+avx" in self.features.split(",")
        return self.cpu in _AVX512_CPUS or self.cpu in _FMA_CPUS

    def native_fma(self) -> bool:
        """Whether this CPU has a fused multiply-add instruction (LLVM's ``llvm.fma`` is one
        instruction, not a libm call): the detected features, AArch64, or a CPU name known
        to have it (an unknown name: no, which is only slower)."""
        if self.triple.startswith(("aarch64", "arm64")):
            return True
        if self.features:
            return "+fma" in self.features.split(",")
        return self.cpu in _AVX512_CPUS or self.cpu in _FMA_CPUS

    def fingerprint(self) -> str:
        """Everything besides the IR that decides the machine code, for cache keys."""
        return "|".join([self.triple, self.cpu, self.features, llvmlite.__version__,
                         ".".join(map(str, binding().llvm_version_info)), f"jit{JIT_VERSION}",
                         *_pipeline_settings()])


def _pipeline_settings() -> list[str]:
    """The settings of this module's pipelines that decide the machine code, each named:
    part of the fingerprint and of its no-LLVM probe (``_host_probe``) alike, so a note
    written under other settings is never read back."""
    return [f"O{OPT_LEVEL}", f"unroll{UNROLL_THRESHOLD}", f"analysed{UNROLL_ANALYSED_TRIPS}"]


compile_records()


def host_target(cpu: str | None = None) -> HostTarget:
    """The target for ``cpu`` (an LLVM CPU name such as ``x86-64-v3``), or for
    ``FLOWJIT_LLVM_CPU`` when set, or else the host CPU with its detected features. Before
    LLVM is loaded, the one ``host_fingerprint`` read from its note (what the cache key
    already trusts): a cold call renders its program's driver while LLVM's library loads
    (``prefetch_llvm``) rather than after it, to ask LLVM for the CPU's name and features
    (cold first calls, fresh processes alternated: the MLP's inference 61.9 -> 59.8 ms,
    medians of 8; the CNN's 154 -> 127, of 6, on a noisy host)."""
    cpu = cpu or os.environ.get("FLOWJIT_LLVM_CPU") or ""
    found = _targets.get(cpu)
    if found is None and not _initialized:
        found = _noted_targets.get(cpu)
        if found is not None:
            return found
    llvm = binding()
    if found is None:
        if cpu:
            found = HostTarget(llvm.get_process_triple(), cpu, "")
        else:
            found = HostTarget(llvm.get_process_triple(), llvm.get_host_cpu_name(),
                               llvm.get_host_cpu_features().flatten())
        _targets[cpu] = found
    return found


_emitters: dict[tuple[HostTarget, int], Any] = {}


def _emitter(target: HostTarget, opt_level: int = OPT_LEVEL) -> Any:
    tm = _emitters.get((target, opt_level))
    if tm is None:
        tm = _emitters[(target, opt_level)] = target.machine(jit=True, opt_level=opt_level)
    return tm


def _fail(name: str, ir_text: str, err: Exception) -> LLVMCompileError:
    path = objcache.save_failed(ir_text)
    where = f"; its IR is saved in {path}" if path else ""
    return LLVMCompileError(
        f"LLVM rejected module {name!r}: {str(err).strip()}{where}; {BUG_REPORT}")


def _pipeline(ir_text: str, target: HostTarget, name: str, opt_level: int, tm: Any,
              context: Any = None, tuning: tuple[int, dict[str, bool]] | None = None) -> tuple[Any, Any, Any]:
    """``ir_text`` parsed (in ``context``, LLVM's global one by default) and verified, set
    for ``tm``'s target, with the module pass manager at ``opt_level`` and its pass builder:
    ``(module, manager, builder)``, the pipeline not yet run."""
    llvm = binding()
    try:
        module = llvm.parse_assembly(ir_text, context=context)
        module.verify()
    except RuntimeError as e:
        raise _fail(name, ir_text, e) from None
    module.triple = target.triple
    module.data_layout = str(tm.target_data)
    pto = llvm.create_pipeline_tuning_options(speed_level=opt_level if tuning is None else tuning[0])
    for option, value in ({} if tuning is None else tuning[1]).items():
        setattr(pto, option, value)
    pb = llvm.create_pass_builder(tm, pto)
    return module, pb.getModulePassManager(), pb


def optimize(ir_text: str, target: HostTarget | None = None, name: str = "module",
             opt_level: int = OPT_LEVEL) -> Any:
    """Parse and verify ``ir_text`` and run LLVM's module pipeline at ``opt_level`` (O3; new
    pass manager) for ``target``; returns the optimized llvmlite ModuleRef (``str()`` of it
    is the IR)."""
    target = target or host_target()
    with _llvm_lock:
        module, mpm, pb = _pipeline(ir_text, target, name, opt_level, _emitter(target, opt_level))
        mpm.run(module, pb)
        return module


def compile_assembly(ir_text: str, target: HostTarget | None = None, name: str = "module",
                     opt_level: int = OPT_LEVEL) -> str:
    """The assembly text of the machine code ``compile_object`` makes of ``ir_text`` for
    ``target`` (for reading what a kernel became, on any target LLVM knows)."""
    target = target or host_target()
    with _llvm_lock:
        return _emitter(target, opt_level).emit_assembly(optimize(ir_text, target, name, opt_level))


def compile_object(ir_text: str, target: HostTarget | None = None, name: str = "module",
                   opt_level: int = OPT_LEVEL) -> bytes:
    """The relocatable object code (ELF on Linux) of ``ir_text`` optimized at ``opt_level``
    (O3) for ``target``: what the disk cache stores and an AOT build would link."""
    target = target or host_target()
    with _llvm_lock:
        t = time.perf_counter()
        module = optimize(ir_text, target, name, opt_level)
        t1 = time.perf_counter()
        obj = _emitter(target, opt_level).emit_object(module)
        timings["last_optimize_ms"] = (t1 - t) * 1e3
        timings["last_codegen_ms"] = (time.perf_counter() - t1) * 1e3
        return obj


def _compile_apart(ir_text: str, target: HostTarget, name: str, opt_level: int,
                   parsed: threading.Event | None = None, quick: bool = False,
                   quick_pipeline: tuple[int, dict[str, bool]] | None = None) -> bytes:
    """``compile_object`` for a thread of its own: the module in an LLVM context of its own
    and a target machine of its own, and LLVM's two long calls (the pass pipeline, code
    generation) made without llvmlite's lock, which serializes every call into LLVM (the
    other calls, short, take it). LLVM compiles modules of separate contexts at once.
    ``parsed`` is set when the module is parsed (or could not be), before the pipeline.
    ``quick``: a quick compile (tiered code generation): the code is emitted at
    QUICK_CODEGEN_LEVEL; a module of QUICK_PIPELINE_MIN_CHARS or more is optimized by
    QUICK_PIPELINE instead of ``opt_level``'s pipeline (by ``quick_pipeline`` whatever its
    size, where given)."""
    llvm = binding()
    from llvmlite.binding import ffi

    try:
        tm = target.machine(jit=True, opt_level=opt_level)
        light = quick and (quick_pipeline is not None or len(ir_text) >= QUICK_PIPELINE_MIN_CHARS)
        module, mpm, pb = _pipeline(ir_text, target, name, opt_level, tm, llvm.create_context(),
                                    (quick_pipeline or QUICK_PIPELINE) if light else None)
    finally:
        if parsed is not None:
            parsed.set()
    ffi.lib.LLVMPY_RunNewModulePassManager._cfn(mpm, module, pb)
    if quick:
        return _emit_unlocked(target.machine(jit=True, opt_level=QUICK_CODEGEN_LEVEL), module, name)
    return _emit_unlocked(tm, module, name)


def _emit_unlocked(tm: Any, module: Any, name: str) -> bytes:
    """The object code of optimized ``module`` from target machine ``tm``, generated
    without llvmlite's lock (the module and ``tm`` must be this thread's alone)."""
    from llvmlite.binding import ffi

    with ffi.OutputString() as err:
        buf = ffi.lib.LLVMPY_TargetMachineEmitToMemory._cfn(tm, module, 1, err)
        if not buf:
            raise LLVMCompileError(f"LLVM could not generate code for module {name!r}: {err}; {BUG_REPORT}")
    try:
        return ctypes.string_at(ffi.lib.LLVMPY_GetBufferStart(buf), ffi.lib.LLVMPY_GetBufferSize(buf))
    finally:
        ffi.lib.LLVMPY_DisposeMemoryBuffer(buf)


def _unlocked_calls() -> bool:
    """Whether this llvmlite exposes the unlocked C functions ``_compile_apart`` calls
    (``ffi.lib.NAME._cfn``, an internal of llvmlite 0.44-0.50): else modules compile one
    after the other, as before."""
    binding()
    from llvmlite.binding import ffi

    try:
        return all(callable(getattr(ffi.lib, n)._cfn) for n in
                   ("LLVMPY_RunNewModulePassManager", "LLVMPY_TargetMachineEmitToMemory"))
    except AttributeError:
        return False


def compile_objects(modules: Sequence[str | Callable[[], str]], target: HostTarget | None = None,
                    name: str = "module", opt_level: int = OPT_LEVEL,
                    rendered: Callable[[list[str]], None] | None = None,
                    quick: bool = False, quick_pipeline: tuple[int, dict[str, bool]] | None = None,
                    apart: bool = False) -> list[bytes]:
    """The object code of each module of ``modules`` (as ``compile_object``): each its IR
    text, or a function rendering it. Two or more compile at once, each on a thread of its
    own (``_compile_apart``): a program's split kernels beside its steps take a cold call's
    LLVM time to about 0.55x on two idle CPUs. The later modules are rendered first, each
    starting to compile as soon as its text exists, and the first last, on the calling
    thread, while they compile (LLVM's calls release the GIL; rendering is Python).
    ``rendered(texts)`` is called with the texts rendered so far (the later ones first)
    before each starts to compile. ``quick``: a quick compile (``_compile_apart``), each
    module by ``quick_pipeline`` where given. ``apart``: a single module compiled apart
    too, off llvmlite's lock (a full code's compile on a thread of its own, which must not
    stall the calling thread's compiles). A quick compile is always apart (the first module
    on the calling thread); both need ``_unlocked_calls()``."""
    target = target or host_target()
    texts: list[str | None] = [None] * len(modules)
    order = [*range(1, len(modules)), 0]

    def text(i: int) -> str:
        got = modules[i]
        texts[i] = got if isinstance(got, str) else got()
        if rendered is not None:
            rendered([texts[j] for j in order if texts[j] is not None])
        return texts[i]
    if not (quick or apart) and (len(modules) == 1 or not _unlocked_calls()):
        for i in order:
            text(i)
        return [compile_object(t, target, f"{name}[{i}]" if i else name, opt_level) for i, t in enumerate(texts)]
    out: list[bytes | BaseException | None] = [None] * len(modules)

    def run(i: int, parsed: threading.Event | None = None) -> None:
        try:
            out[i] = _compile_apart(texts[i], target, f"{name}[{i}]" if i else name, opt_level, parsed,
                                    quick, quick_pipeline)
        except BaseException as e:  # noqa: BLE001 (raised again on the calling thread)
            out[i] = e
        finally:
            if parsed is not None:
                parsed.set()
    t = time.perf_counter()
    threads = []
    try:
        for i in order[:-1]:
            text(i)
            parsed = threading.Event()
            thread = threading.Thread(target=run, args=(i, parsed), name=f"flowjit-llvm-{i}")
            thread.start()
            threads.append(thread)
            # Until the thread is in LLVM's pipeline (no GIL): each of its calls before it
            # waited up to the GIL's switch interval (5 ms) while this one rendered.
            parsed.wait()
        text(0)
        run(0)
    finally:
        for th in threads:
            th.join()
    timings["last_parallel_compile_ms"] = (time.perf_counter() - t) * 1e3
    for got in out:
        if isinstance(got, BaseException):
            raise got
    return [got for got in out if isinstance(got, bytes)]


def _defined(symbol: str) -> bool:
    if binding().address_of_symbol(symbol):
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
        for load in _LIBRARY_LOADERS:  # the CBLAS library, if it is one of those
            load()
        missing = [s for s in missing if not _defined(s)]
    if missing:
        raise LLVMCompileError(
            f"module {name!r} calls {', '.join(map(repr, missing))}, which no library loaded in "
            "this process defines: load the library first (llvmlite.binding.load_library_permanently) "
            "or register the address (llvmlite.binding.add_symbol)")


class Library:
    """Machine code of one module, resolved and executable; keep it alive as long as any
    address or function taken from it is used (it owns the memory). ``elfload`` links it
    unless the object needs what only MCJIT does (or ``FLOWJIT_LLVM_LOADER=mcjit``); then
    an engine of its own for ``target`` (the host when None) holds it, once every name of
    ``declared`` (the functions the module's IR declares) is known to be defined."""

    def __init__(self, objs: bytes | Sequence[bytes], target: HostTarget | None, key: str,
                 declared: Sequence[str] = (), name: str = "module", codegen_level: int = OPT_LEVEL) -> None:
        self.key = key
        # QUICK_CODEGEN_LEVEL: a quick library, whose full code a thread emits once it is
        # hot (``upgrade_now``, ``when_upgraded``); OPT_LEVEL: the full code.
        self.codegen_level = codegen_level
        self._successor: Library | None = None
        self._watchers: list[Callable[[Library], None]] = []
        # A quick library's way to its full code: the render function of the module, held
        # weakly (the caller keeps it alive while it wants the upgrade: a library outlives
        # its programs in this process's table, which must not keep their plans alive too),
        # where the full code is cached, the module's name and the quick code's key. None
        # once the upgrade started.
        self._full_from: tuple[weakref.ref, list[tuple[str, int | None]], str, str] | None = None
        self._target = target
        self._addresses: dict[str, int] = {}
        self._engine: Any = None
        self._native: list[elfload.LoadedObject] | None = None
        objs = [objs] if isinstance(objs, bytes) else list(objs)
        if os.environ.get("FLOWJIT_LLVM_LOADER", "").strip().lower() != "mcjit":
            # The later objects first (they call nothing of the first), then the first,
            # whose calls into them resolve to their addresses.
            loaded: list[elfload.LoadedObject] = []

            def resolve(symbol: str) -> int | None:
                return next((a for a in (o.address(symbol) for o in loaded) if a), None) or _resolve(symbol)
            for obj in reversed(objs):
                got = elfload.load_object(obj, resolve)
                if got is None:
                    break
                loaded.append(got)
            else:
                self._native = loaded[::-1]
        if self._native is None:
            # MCJIT links a missing symbol to address 0: refuse the module before that,
            # including what the code generator calls that the IR never declared.
            names = [elfload.symbol_names(obj) for obj in objs]
            own = {s for defined, _ in names for s in defined}
            undefined = [s for _, used in names for s in used if s not in own]
            _start_providers(undefined)
            _check_externals(list(dict.fromkeys([*declared, *undefined])), name)
            llvm = binding()
            target = self.target
            with _llvm_lock:
                # An empty module to create the engine: the code arrives as object files.
                self._engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), target.machine(jit=True))
                for obj in objs:
                    self._engine.add_object_file(llvm.ObjectFileRef.from_data(obj))
                self._engine.finalize_object()

    @property
    def target(self) -> HostTarget:
        """The CPU the code is for."""
        if self._target is None:
            self._target = host_target()
        return self._target

    @property
    def loader(self) -> str:
        """``"elf"`` (flowjit's loader) or ``"mcjit"``: what linked this module."""
        return "mcjit" if self._native is None else "elf"

    def address(self, name: str) -> int:
        """The address of function ``name`` (a C-ABI entry point); KeyError if the module
        defines no such symbol."""
        found = self._addresses.get(name)
        if found is None:
            if self._native is not None:
                found = next((a for a in (o.address(name) for o in self._native) if a), 0)
            else:
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

    def when_upgraded(self, callback: Callable[[Library], None]) -> None:
        """Call ``callback(full)`` with the full code's ``Library`` once a quick library's
        upgrade is linked (from the thread that emitted it; at once if it already is). The
        caller keeps this library alive while any of its code may still run: a call begun
        on the quick code finishes there. Never called for a full library, nor when the
        upgrade failed (the quick code, correct, stays)."""
        with _upgrade_lock:
            if self._successor is None:
                self._watchers.append(callback)
                return
        callback(self._successor)

    def upgrade_now(self, render: Callable[[], Any] | None = None) -> None:
        """Start making a quick library's full code on a thread of its own (``_upgrade``):
        its program is hot (its second call has returned). The module is rendered by the
        function the library was loaded with, or by ``render`` (the same module's) where
        that one is gone. Nothing for a full library, one whose upgrade started already, or
        one with no render function alive."""
        with _upgrade_lock:
            full_from = self._full_from
            if full_from is None:
                return
            render = full_from[0]() or render
            if render is None:
                return
            self._full_from = None
            _forget_finished_upgrades()
            upgrade = threading.Thread(target=_upgrade, name=f"flowjit-upgrade-{full_from[2]}", daemon=True,
                                       args=(self, render, *full_from[1:]))
            # Started under the lock: a thread not yet started is not alive, and another
            # compile pruning the table then would drop it, waited for by no one at exit.
            _upgrades[upgrade] = self
            upgrade.start()

    def _upgraded(self, full: Library) -> None:
        with _upgrade_lock:
            self._successor, watchers, self._watchers = full, self._watchers, []
        for callback in watchers:
            callback(full)


def load(ir_text: str, target: HostTarget | None = None, name: str = "module") -> Library:
    """The compiled ``Library`` of LLVM IR text ``ir_text`` for ``target`` (the host by
    default): reused if this process has it, loaded from the disk cache if a valid entry is
    there, compiled (and cached) otherwise. Threads asking for one module at once compile it
    once. ``name`` names the module in errors."""
    return load_source(ir_text, lambda: ir_text, target, name)


# An entry's payload: a tag, the length of the module's declared functions (newline-
# separated), those names, then the object code. A warm load links those names without
# the IR text.
# A module of several objects (a program and its split kernels): tag 02, then the number
# of objects and each one's length before the objects, the first the one to call into.
_META = struct.Struct("<8sI")
_META_TAG = b"FJDECL01"
_META_TAGS = b"FJDECL02"
_COUNT = struct.Struct("<I")
_LENGTH = struct.Struct("<Q")


def _pack(declared: Sequence[str], objs: Sequence[bytes]) -> bytes:
    names = "\n".join(declared).encode()
    if len(objs) == 1:
        return _META.pack(_META_TAG, len(names)) + names + objs[0]
    lengths = b"".join(_LENGTH.pack(len(o)) for o in objs)
    return _META.pack(_META_TAGS, len(names)) + names + _COUNT.pack(len(objs)) + lengths + b"".join(objs)


def _unpack(payload: bytes) -> tuple[list[str], list[bytes]] | None:
    if len(payload) < _META.size:
        return None
    tag, n = _META.unpack_from(payload)
    if tag not in (_META_TAG, _META_TAGS) or _META.size + n > len(payload):
        return None
    names = payload[_META.size:_META.size + n].decode(errors="replace")
    declared = names.split("\n") if names else []
    at = _META.size + n
    if tag == _META_TAG:
        return declared, [payload[at:]]
    if at + _COUNT.size > len(payload):
        return None
    (count,) = _COUNT.unpack_from(payload, at)
    at += _COUNT.size
    if count < 1 or at + count * _LENGTH.size > len(payload):
        return None
    lengths = [_LENGTH.unpack_from(payload, at + i * _LENGTH.size)[0] for i in range(count)]
    at += count * _LENGTH.size
    if at + sum(lengths) != len(payload):
        return None
    objs = []
    for size in lengths:
        objs.append(payload[at:at + size])
        at += size
    return declared, objs


def _start_providers(declared: Sequence[str]) -> None:
    # A symbol (the native pool's) must be registered before a caller of it is linked.
    for symbol in declared:
        start = _SYMBOL_STARTERS.get(symbol)
        if start is not None:
            start()


def _link(objs: Sequence[bytes], declared: Sequence[str], target: HostTarget | None, key: str,
          name: str, codegen_level: int = OPT_LEVEL) -> Library:
    _start_providers(declared)
    return Library(objs, target, key, declared, name, codegen_level)


# What identifies the host to LLVM, remembered per cache directory: (probe, fingerprint).
_fingerprints: dict[tuple[str, str], str] = {}
# The targets of the fingerprints read from a note (``host_fingerprint``), by CPU name asked
# for ("" for the host): what ``host_target`` answers before LLVM is loaded.
_noted_targets: dict[str, HostTarget] = {}
_CPUINFO_KEYS = ("vendor_id", "cpu family", "model", "model name", "stepping", "flags", "cpu implementer",
                 "cpu architecture", "cpu variant", "cpu part", "cpu revision", "features", "isa")


@functools.cache
def _host_probe(cpu: str) -> str | None:
    """A digest of what decides ``host_target(cpu).fingerprint()`` that needs no LLVM: the
    first CPU's identity and flags in /proc/cpuinfo, the machine, llvmlite's version and
    its shared library's size and time, and this module's versions; None off Linux."""
    try:
        with open("/proc/cpuinfo", "rb") as f:
            first = f.read(1 << 16).decode(errors="replace").split("\n\n")[0]
    except OSError:
        return None
    fields = sorted(line.split(":", 1)[0].strip().lower() + ":" + line.split(":", 1)[1].strip()
                    for line in first.splitlines()
                    if ":" in line and line.split(":", 1)[0].strip().lower() in _CPUINFO_KEYS)
    spec = importlib.util.find_spec("llvmlite")
    if not fields or spec is None or not spec.submodule_search_locations:
        return None
    where = os.path.join(list(spec.submodule_search_locations)[0], "binding")
    libs = sorted(os.path.join(where, f) for f in os.listdir(where) if "llvmlite" in f)
    stats = [(p, os.stat(p).st_size, os.stat(p).st_mtime_ns) for p in libs]
    text = repr((fields, platform.machine(), sys.platform, llvmlite.__version__, stats, cpu, JIT_VERSION,
                 _pipeline_settings()))
    return hashlib.sha256(text.encode()).hexdigest()


def host_fingerprint() -> str:
    """``host_target().fingerprint()``, the host's part of every cache key, without
    importing LLVM when an earlier process wrote it down for this CPU and llvmlite (in the
    cache directory's ``hosts`` or the runtime directory's, as an entry keyed by
    ``_host_probe``): a process with an empty cache finds flowjit's runtime modules
    without LLVM."""
    cpu = os.environ.get("FLOWJIT_LLVM_CPU") or ""
    probe = _host_probe(cpu)
    if probe is None:
        return host_target().fingerprint()
    found = _fingerprints.get((probe, objcache.directory()))
    if found is not None:
        return found
    note = objcache.key(probe, "flowjit host fingerprint")
    # The user's cache's note, then the runtime directory's (read by every user of the
    # installation); the one found, or the fingerprint computed, is written where it was not.
    lacking = []
    for where, mode in ((objcache.notes_directory(), None), (objcache.runtime_notes_directory(), 0o644)):
        payload = objcache.read(note, where)
        if payload is not None and payload.startswith(b"FJHOST01") and payload.count(b"|") >= 6:
            found = payload[8:].decode(errors="replace")
            break
        lacking.append((where, mode))
    else:
        found = host_target().fingerprint()
    for where, mode in lacking:
        objcache.write(note, b"FJHOST01" + found.encode(), where, mode)
    _fingerprints[(probe, objcache.directory())] = found
    triple, name, features = (found.split("|") + ["", "", ""])[:3]
    if triple and name:
        _noted_targets.setdefault(cpu, HostTarget(triple, name, features))
    return found


def _places(runtime: bool) -> list[tuple[str, int | None]]:
    """Where an entry is looked for, in order, and written (the first that can be), with the
    mode of its files: the user's cache; for flowjit's runtime the installation's directory
    first, whose entries every user of the installation reads."""
    user = (objcache.directory(), None)
    return [(objcache.runtime_directory(), 0o644), user] if runtime else [user]


def _read_entry(key: str, places: Sequence[tuple[str, int | None]]) -> tuple[list[str], list[bytes]] | None:
    """The declared functions and object code (one object or more) of the first valid entry of ``key`` in
    ``places``; a corrupt one is counted as rejected and passed over. Found past the first
    place (the runtime's, kept in the user's cache), it is written to the first too, where
    that can be written now (so a corrupt entry there is replaced)."""
    for i, (where, _) in enumerate(places):
        payload = objcache.read(key, where)
        entry = _unpack(payload) if payload is not None else None
        if payload is not None and entry is None:
            objcache.count("rejected")
        if entry is not None:
            if i:
                objcache.write(key, payload, *places[0])
            return entry
    return None


def _tiers_wanted() -> bool:
    return os.environ.get("FLOWJIT_TIERED", "1").strip() != "0"


def tiered() -> bool:
    """Whether a program's first compile is tiered (``QUICK_CODEGEN_LEVEL``): unless
    FLOWJIT_TIERED=0, and where llvmlite lets modules compile apart (``_unlocked_calls``)."""
    return _tiers_wanted() and _unlocked_calls()


def wait_for_upgrades(timeout: float | None = None) -> bool:
    """Wait until every upgrade that has started (a hot program's, or one started by
    ``Library.upgrade_now``) has emitted its full code, cached it and handed it to its
    watchers (``Library.when_upgraded``), for at most ``timeout`` seconds (None: no limit);
    true when none is left. The interpreter calls it at exit, so that no entry of the disk
    cache is left half-written."""
    deadline = None if timeout is None else time.monotonic() + timeout
    with _upgrade_lock:
        running = [t for t in _upgrades if t.is_alive()]
    for t in running:
        t.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
    with _upgrade_lock:
        _forget_finished_upgrades()
        return not _upgrades


def _forget_finished_upgrades() -> None:
    """Drop the upgrades that have ended from ``_upgrades``; the caller holds
    ``_upgrade_lock`` (every thread in it was started under that lock, so not alive means
    done)."""
    for t in [t for t in _upgrades if not t.is_alive()]:
        del _upgrades[t]


# Daemonic threads joined here rather than left to die with the interpreter: only hot
# programs' upgrades run, and a program the process ran once keeps its quick code, which the
# cache holds already.
atexit.register(wait_for_upgrades)


def _upgrade(quick: Library, render: Callable[[], Any], places: list[tuple[str, int | None]], name: str,
             quick_key: str) -> None:
    """On a thread of its own: the module of quick library ``quick`` rendered again
    (``render``) and compiled as a single tier would (O3's pipeline and code generator),
    written to the disk cache under the library's key in place of the quick code's entry
    (``quick_key``), linked, and handed to ``quick``'s watchers; in-process lookups of the
    key then find the full library."""
    try:
        objs, declared, target, _ = _compile_rendered(render, quick._target, name, OPT_LEVEL, apart=True)
        payload = _pack(declared, objs)
        if any(objcache.write(quick.key, payload, where, mode) for where, mode in places):
            # A warm load looks for the full code's entry first: the quick one is dead weight
            # wherever it was copied (a reader that opened it still reads it whole).
            for where, _ in places:
                with contextlib.suppress(OSError):
                    os.remove(objcache.path(quick_key, where))
        full = _link(objs, declared, target, quick.key, name)
    except Exception:  # noqa: BLE001 (the quick code is correct: it stays)
        with _upgrade_lock:
            _upgrade_counts["failed"] += 1
        return
    _libraries[quick.key] = full
    with _upgrade_lock:
        _upgrade_counts["upgraded"] += 1
    quick._upgraded(full)


def _compile_rendered(render: Callable[[], str | Sequence[str | Callable[[], str]]], target: HostTarget | None,
                      name: str, opt_level: int, quick: bool = False,
                      quick_pipeline: tuple[int, dict[str, bool]] | None = None,
                      apart: bool = False) -> tuple[list[bytes], list[str], HostTarget, bool]:
    """The object code of the modules ``render()`` returns (``compile_objects``), each
    module's calls outside those rendered before it checked defined as it is rendered; the
    functions the modules declare, the target (the host's when None) and whether the
    compile was a quick one (``quick`` where ``tiered()``). LLVM's library loads while the
    modules render (``prefetch_llvm``), before anything asks LLVM (the host's CPU, llvmlite's
    calls)."""
    prefetch_llvm()
    rendered = render()
    modules = [rendered] if isinstance(rendered, str) else list(rendered)
    texts: list[str] = []
    checked: set[str] = set()

    def check(so_far: list[str]) -> None:
        # Before a module compiles: what it calls outside the modules rendered so far is
        # defined (the later modules call nothing of the first).
        texts[:] = so_far
        declared = [n for n in _declared_by(so_far) if n not in checked]
        checked.update(declared)
        _start_providers(declared)
        _check_externals(declared, name)
    target = target or host_target()
    quick = quick and tiered()
    objs = compile_objects(modules, target, name, opt_level, check, quick, quick_pipeline if quick else None, apart)
    return objs, _declared_by(texts), target, quick


def upgrade_counts() -> dict[str, int]:
    """Quick libraries of this process whose full code was made and linked (``upgraded``),
    and those whose full code could not be (``failed``: they keep the quick code, which is
    what the disk cache has for them)."""
    with _upgrade_lock:
        return dict(_upgrade_counts)


def load_source(source: str, render: Callable[[], str | Sequence[str | Callable[[], str]]],
                target: HostTarget | None = None, name: str = "module", opt_level: int = OPT_LEVEL,
                runtime: bool = False, tiered_codegen: bool = False,
                quick_pipeline: tuple[int, dict[str, bool]] | None = None) -> Library:
    """The compiled ``Library`` of the module ``render()`` returns (LLVM IR text; or several
    modules, compiled at once and linked together, the first the one to call into, each its
    text or a function rendering it, as ``compile_objects`` takes them), cached
    under ``source``: text that identifies that IR completely (the IR itself, or a kernel's
    loop IR with the renderer's version). A warm process loads the object code without
    calling ``render`` (nor importing LLVM, for the host); otherwise as ``load``.
    ``opt_level`` 0: code that waits and hands out work (the runtime's ``optnone``
    modules), compiled in a third of O3's time. ``runtime``: flowjit's own code, the same
    whatever the user's program (the native pool, the GEMMs over it), whose entry is kept
    once per installation in ``objcache.runtime_directory()``, or in the user's cache when
    that cannot be written. ``tiered_codegen``: where ``tiered()``, a cache miss compiles
    and caches a quick library (``QUICK_CODEGEN_LEVEL``), and an entry of the full code is
    looked for first, then one of the quick code; a quick library's full code is rendered
    (``render``, which the caller keeps alive for that), compiled, cached and linked by a
    thread once its program is hot (``Library.upgrade_now``, ``Library.when_upgraded``).
    ``quick_pipeline``: the IR pipeline of a quick library's modules
    (``UNOPTIMIZED_PIPELINE``), where not O3's or QUICK_PIPELINE."""
    if opt_level != OPT_LEVEL:
        source = f"{source}\n; O{opt_level}"
    fingerprint = target.fingerprint() if target is not None else host_fingerprint()
    key = objcache.key(source, fingerprint)
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
        places = _places(runtime)
        # Whether to look for the quick code's entry asks no LLVM (``tiered()`` loads it to ask
        # llvmlite): a warm load needs none. The full code's key is the library's, in this
        # process and on disk, once an upgrade has written it.
        tiers = tiered_codegen and opt_level == OPT_LEVEL and _tiers_wanted()
        # The quick tier's settings are the quick code's too (the fingerprint has the full
        # code's pipeline's).
        quick_key = objcache.key(f"{source}\n; quick code {QUICK_CODEGEN_LEVEL} {QUICK_PIPELINE} "
                                 f"{QUICK_PIPELINE_MIN_CHARS} {quick_pipeline}", fingerprint) if tiers else None
        level = OPT_LEVEL
        entry = _read_entry(key, places)
        if entry is None and quick_key is not None:
            entry = _read_entry(quick_key, places)
            level = QUICK_CODEGEN_LEVEL
        if entry is not None:
            declared, objs = entry
            lib = _link(objs, declared, target, key, name, level)
            objcache.count("loaded")
            timings["last_load_ms"] = (time.perf_counter() - t) * 1e3
        else:
            objs, declared, target, tiers = _compile_rendered(render, target, name, opt_level, tiers, quick_pipeline)
            quick_key = quick_key if tiers else None
            level = QUICK_CODEGEN_LEVEL if tiers else OPT_LEVEL
            payload = _pack(declared, objs)
            any(objcache.write(quick_key or key, payload, where, mode) for where, mode in places)
            lib = _link(objs, declared, target, key, name, level)
            objcache.count("compiled")
            timings["last_compile_ms"] = (time.perf_counter() - t) * 1e3
        if level != OPT_LEVEL:
            lib._full_from = (weakref.ref(render), places, name, quick_key)
        _libraries[key] = lib
        return lib
