"""CBLAS gemm entry points without SciPy or numba: NumPy's bundled OpenBLAS, else the
system's.

NumPy 2.x wheels ship ``numpy.libs/libscipy_openblas64_-<hash>.so`` whose CBLAS symbols
carry a prefix and a suffix and take 64-bit integers (``scipy_cblas_sgemm64_``); a system
OpenBLAS or reference CBLAS exports plain ``cblas_sgemm`` with 32-bit integers. The
library found is also added to the JIT's symbol search (``jit.add_library``), so JIT code
may call the symbol by name as well as through the address.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import dataclasses
import glob
import importlib.util
import os
import threading
from collections.abc import Iterator, Mapping

from flowjit.ir.records import compile_records, record

from . import jit, objcache, program_plan, pthread_pool
from .program_plan import BLAS_PARALLEL_MIN_WORK, NO_TRANS, ROW_MAJOR
from .pthread_pool import native_pool, unoptimized

# (library file pattern relative to NumPy's bundled-library folder, symbol prefix, suffix, int bits)
_BUNDLED = [
    ("libscipy_openblas64_*.so*", "scipy_cblas_", "64_", 64),
    ("libscipy_openblas64_*.dylib", "scipy_cblas_", "64_", 64),
    ("libscipy_openblas*.so*", "scipy_cblas_", "", 32),
    ("libscipy_openblas*.dylib", "scipy_cblas_", "", 32),
    ("libopenblas*.so*", "cblas_", "", 32),  # NumPy 1.x wheels
]
_SYSTEM = ["openblas", "cblas", "blas"]
# The thread-count setter and getter of each library kind, tried in order in the library that
# holds the gemm: NumPy's bundled OpenBLAS (ILP64 and LP64) and a plain OpenBLAS.
_THREAD_CONTROLS = [("scipy_openblas_set_num_threads64_", "scipy_openblas_get_num_threads64_"),
                    ("scipy_openblas_set_num_threads", "scipy_openblas_get_num_threads"),
                    ("openblas_set_num_threads", "openblas_get_num_threads")]


# A product of at least GEMM_SPLIT_MIN_WORK multiply-adds (the plan's BLAS_PARALLEL_MIN_WORK:
# below it a program runs the BLAS on one thread itself) is cut into pieces of rows of C (of
# columns when C is wider than tall) that the threads of flowjit's native pool claim as
# chunks, each piece one call of the BLAS on one thread, while the BLAS's own threads stay
# asleep. OpenBLAS splits a product over its threads in fixed shares that wait for each
# other, so one of its threads without a core stalls the whole product: 1024x1024x1024 took
# 36-40 ms on its 2 threads against 8.9-18 on one beside one busy process, 76-118 ms beside
# two. A piece holds at least GEMM_PIECE_MIN_ROWS rows and GEMM_PIECE_MIN_WORK
# multiply-adds: each call packs the other operand again and costs microseconds of its own
# (one thread, pieces against the whole product: 64 rows 1.08x of 1024^3 and of
# 256x256x784, 128 rows 1.03-1.07x; 4096x64x64 in pieces of 256 rows 1.22x).
GEMM_SPLIT_MIN_WORK = BLAS_PARALLEL_MIN_WORK
GEMM_PIECE_MIN_ROWS = 64
GEMM_PIECE_MIN_WORK = 1 << 21
# One piece a thread: each piece packs the other operand again, and a thread that starts
# late takes none (the caller takes what is left). Against two a thread, medians of fresh
# processes: the zoo MLP's inference 0.228-0.233 -> 0.218-0.220 ms (0.386-0.393 -> 0.366-
# 0.375 beside two busy processes), the transformer's 4.95 -> 4.85 ms, a 1024^3 product
# 5.20-5.27 -> 4.98-5.05 ms (10.7-12.0 -> 9.8-9.9 beside two busy processes); the other
# zoo rows within their spread.
GEMM_PIECES_PER_THREAD = 1
GEMM_DIRECT_MIN_WORK = 1 << 26


@record
class BlasThreads:
    """The BLAS library's thread control: ``set_address`` of ``void set(int)`` (how many
    threads its next calls may use) and ``get_address`` of ``int get()``."""

    set_address: int
    get_address: int

    def get(self) -> int:
        """The thread count the library's calls use now."""
        return int(ctypes.CFUNCTYPE(ctypes.c_int)(self.get_address)())


@record
class BlasFunction:
    """One CBLAS routine: its symbol, the address compiled programs call, the width of its
    integer arguments (64 for NumPy's ILP64 OpenBLAS, 32 for the usual system CBLAS), the
    library that holds it (what an AOT library links against) and the routine's own address
    there. ``address`` is the native pool's gemm (``GEMM_SPLIT_MIN_WORK``: a
    large product split over flowjit's threads, each piece on one BLAS thread; with no
    workers, every product whole on one BLAS thread) where the library has a thread control
    this module knows, else ``routine``."""

    symbol: str
    address: int
    int_bits: int
    library: str
    routine: int


compile_records()


_found: dict[str, BlasFunction] | None = None
_threads: BlasThreads | None = None
_bracket: tuple[int, int] | None = None   # the gemm module's one-thread bracket
_lock = threading.Lock()
_pool_lock = threading.RLock()


def _numpy_lib_dirs() -> list[str]:
    # find_spec locates NumPy without importing it.
    spec = importlib.util.find_spec("numpy")
    if spec is None or not spec.submodule_search_locations:
        return []
    pkg = list(spec.submodule_search_locations)[0]
    site = os.path.dirname(pkg)
    return [os.path.join(site, "numpy.libs"), os.path.join(pkg, ".dylibs")]


def _candidates() -> Iterator[tuple[str, str, str, int]]:
    # Lazily: finding the system's library runs ldconfig and a compiler (ctypes.util,
    # 27 ms of a warm start), which NumPy's bundled OpenBLAS makes unnecessary.
    env = os.environ.get("FLOWJIT_BLAS")
    if env:
        yield from [(env, "scipy_cblas_", "64_", 64), (env, "cblas_", "", 32)]
    for d in _numpy_lib_dirs():
        for pattern, prefix, suffix, bits in _BUNDLED:
            yield from [(p, prefix, suffix, bits) for p in sorted(glob.glob(os.path.join(d, pattern)))]
    for name in _SYSTEM:
        p = ctypes.util.find_library(name)
        if p:
            yield (p, "cblas_", "", 32)


def cblas_symbol(sgemm_symbol: str, routine: str) -> str:
    """The C name of CBLAS ``routine`` (``zgemm``) in the library whose sgemm is called
    ``sgemm_symbol``."""
    head, _, tail = sgemm_symbol.partition("sgemm")
    return head + routine + tail


def lapacke_symbol(sgemm_symbol: str, routine: str) -> str:
    """LAPACKE's C name of ``routine`` (``dpotrf``) in the library whose CBLAS sgemm is
    called ``sgemm_symbol``: ``scipy_LAPACKE_dpotrf64_`` beside NumPy's bundled
    ``scipy_cblas_sgemm64_``, ``LAPACKE_dpotrf`` beside a system OpenBLAS's ``cblas_sgemm``."""
    head, _, tail = sgemm_symbol.partition("sgemm")
    return head.replace("cblas_", "LAPACKE_") + routine + tail


def missing_routines(found: Mapping[str, BlasFunction], routines: list[str]) -> list[str]:
    """The names of ``routines`` (LAPACKE's ``dpotrf``, CBLAS's ``zgemm``) that the library
    holding ``found``'s gemms does not export."""
    lib = ctypes.CDLL(found["sgemm"].library)
    missing = []
    for r in routines:
        name = (cblas_symbol if r.endswith("gemm") else lapacke_symbol)(found["sgemm"].symbol, r)
        try:
            getattr(lib, name)
        except AttributeError:
            missing.append(name)
    return missing


def blas_functions() -> dict[str, BlasFunction]:
    """``{"sgemm": ..., "dgemm": ...}`` from the first library that has both (the
    ``FLOWJIT_BLAS`` file if set, then NumPy's bundled OpenBLAS, then the system's), with
    ``"cgemm"`` and ``"zgemm"`` where it has them too; an empty dict when none is found, and
    the caller falls back to its own loops."""
    global _found
    if _found is None:
        found = _library_routines()
        # Not under _lock: starting the pool loads a module, which may look for libraries.
        # Under a lock of its own: two threads' first products would each build the gemms
        # and set them up, the second initialising the mutex the first's products hold.
        with _pool_lock:
            if _found is None:
                _found = _over_pool(found) if found and _threads is not None else found
    return _found


def product_bracket() -> tuple[int, int] | None:
    """The addresses of ``void()`` functions a program calls before and after a product too
    small for the BLAS's threads: the first of those running at once sets the library to one
    thread, the last sets back the count the first found (the gemms' own count, shared with
    their split products). None where the gemms are the library's own (no thread control)."""
    blas_functions()
    return _bracket


def _over_pool(found: dict[str, BlasFunction]) -> dict[str, BlasFunction]:
    global _bracket
    assert _threads is not None
    # FLOWJIT_NUM_THREADS=1 (a pool without workers): every product on one BLAS thread too.
    # With the library's own threads, beside two busy processes, the zoo's transformer
    # training step took 4.0-4.2x its idle time on average (p90 6-7.5x); on one thread
    # 1.4-1.5x.
    one_piece = native_pool().workers == 0
    bits = found["sgemm"].int_bits
    # Keyed by this file's text and the width, which decide the module: a warm process builds no
    # IR. flowjit's own code: compiled once per installation (objcache.runtime_directory()).
    # It calls the pool's parallel for, and takes program_plan's CBLAS constants and split threshold.
    digest = objcache.source_digest(__file__, pthread_pool.__file__, program_plan.__file__)
    lib = jit.load_source(f"; flowjit gemms over the pool {digest} int{bits}", lambda: build_gemm_module(bits),
                          name="flowjit_pool_gemms", opt_level=0, runtime=True)
    # The pieces' code must outlive any thread running it, as the pool's does: never dropped.
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(lib))
    lib.function("flowjit_gemms_set_blas", None, [ctypes.c_void_p] * 6 + [ctypes.c_int64] * 2)(
        *[found[r].routine if r in found else None for r in GEMM_ROUTINES], _threads.set_address,
        _threads.get_address, _threads.get(), int(one_piece))
    # A child forked while a product ran would keep the BLAS on the one thread set for it.
    os.register_at_fork(after_in_child=lib.function("flowjit_gemms_after_fork", None, []))
    _bracket = (lib.address("flowjit_gemms_one_thread"), lib.address("flowjit_gemms_threads_back"))
    return {r: dataclasses.replace(f, address=lib.address(f"flowjit_{r}{bits}")) for r, f in found.items()}


def build_gemm_module(int_bits: int) -> str:
    """The LLVM IR text of ``flowjit_sgemm{int_bits}``, ``flowjit_dgemm{int_bits}``,
    ``flowjit_cgemm{int_bits}`` and ``flowjit_zgemm{int_bits}``: the arguments of
    ``cblas_sgemm`` and the others (the complex ones' alpha and beta by address) with C ints
    of ``int_bits`` bits; a row-major product of at least GEMM_SPLIT_MIN_WORK multiply-adds
    goes over the native pool (``flowjit_parallel_for``) in pieces, the BLAS on one thread
    meanwhile, any other to the library's routine as it is. ``flowjit_gemms_set_blas(sgemm,
    dgemm, cgemm, zgemm, set_threads, get_threads, threads, one_piece)`` gives the routines
    (a complex one null where the library lacks it), the library's thread setter
    ``void(int)`` and getter ``int()``, and its thread count when loaded (which sizes the
    pieces); the first product of those running at once reads the library's count and sets
    it to one, the last sets back what the first read. With ``one_piece`` (a pool of no
    workers: FLOWJIT_NUM_THREADS=1) every row-major product runs as one piece, the BLAS on
    one thread. ``flowjit_gemms_one_thread()`` and ``flowjit_gemms_threads_back()`` take a
    product of a program's own through the same count (``product_bracket``).
    ``flowjit_gemms_after_fork()``, in a forked child: no product runs there, so the
    library's count is set back."""
    # Imported here: a process that loads the module from the object cache builds no IR.
    from llvmlite import ir

    I8P, I32, I64, VOID = ir.IntType(8).as_pointer(), ir.IntType(32), ir.IntType(64), ir.VoidType()
    it = ir.IntType(int_bits)
    mod = ir.Module("flowjit_pool_gemms")
    chunk_ty = ir.FunctionType(VOID, [I64, I64, I8P])
    parallel_for = ir.Function(mod, ir.FunctionType(VOID, [chunk_ty.as_pointer(), I64, I8P, I64]),
                               jit.PARALLEL_FOR_SYMBOL)

    def const(v, ty=I64):
        return ir.Constant(ty, v)

    def glob(name, ty):
        g = ir.GlobalVariable(mod, ty, name)
        g.initializer, g.align, g.linkage = ir.Constant(ty, None), 8, "internal"
        return g

    def ld(b, g):  # atomic: other threads write these words
        return b.load_atomic(g, "acquire", 8)

    routines = {r: glob(f"blas_{r}", I8P) for r in GEMM_ROUTINES}
    setter, count, active = glob("blas_set_threads", I8P), glob("blas_threads", I64), glob("blas_active", I64)
    getter, found = glob("blas_get_threads", I8P), glob("blas_found_threads", I64)
    one_piece = glob("blas_one_piece", I64)
    setter_ty, getter_ty = ir.FunctionType(VOID, [I32]), ir.FunctionType(I32, [])
    # Held while the first product in reads and sets the count and the last out sets it back:
    # unlocked, a first product reading the count between another's last decrement and its
    # setting back would keep the one thread as the library's count.
    opaque = ir.ArrayType(ir.IntType(8), 128)   # a pthread_mutex_t (40 bytes on glibc, 64 on macOS)
    mutex = ir.GlobalVariable(mod, opaque, "blas_threads_mutex")
    mutex.initializer, mutex.align, mutex.linkage = ir.Constant(opaque, None), 64, "internal"
    mutex_init = ir.Function(mod, ir.FunctionType(I32, [I8P, I8P]), "pthread_mutex_init")
    lock = ir.Function(mod, ir.FunctionType(I32, [I8P]), "pthread_mutex_lock")
    unlock = ir.Function(mod, ir.FunctionType(I32, [I8P]), "pthread_mutex_unlock")

    def mutex_p(b):
        return b.bitcast(mutex, I8P)

    register = ir.Function(mod, ir.FunctionType(VOID, [I8P] * (len(routines) + 2) + [I64, I64]),
                           "flowjit_gemms_set_blas")
    b = ir.IRBuilder(register.append_basic_block("entry"))
    for g, v in zip((*routines.values(), setter, getter, count, one_piece), register.args):
        b.store_atomic(v, g, "release", 8)
    b.call(mutex_init, [mutex_p(b), ir.Constant(I8P, None)])
    b.ret_void()

    # after_fork(): products running in the parent at the fork left the library on one
    # thread; the child runs none of them, so back to the count, and none counted as running
    after_fork = ir.Function(mod, ir.FunctionType(VOID, []), "flowjit_gemms_after_fork")
    entry, reset, out = (after_fork.append_basic_block(x) for x in ("entry", "reset", "out"))
    b = ir.IRBuilder(entry)
    b.call(mutex_init, [mutex_p(b), ir.Constant(I8P, None)])   # a parent's thread may have held it
    was = b.atomic_rmw("xchg", active, const(0), "acq_rel")
    b.cbranch(b.and_(b.icmp_signed(">", was, const(0)), b.icmp_signed(">", ld(b, found), const(1))), reset, out)
    b.position_at_end(reset)
    b.call(b.bitcast(ld(b, setter), setter_ty.as_pointer()), [b.trunc(ld(b, found), I32)])
    b.branch(out)
    b.position_at_end(out)
    b.ret_void()

    def enter(b, fn):
        """``active += 1``; the first product in: the library's count now (a user's
        threadpoolctl or OPENBLAS_NUM_THREADS=1 included) kept, and one thread set."""
        b.call(lock, [mutex_p(b)])
        was = b.atomic_rmw("add", active, const(1), "acq_rel")
        first, go, after = (fn.append_basic_block(f"enter_{x}") for x in ("first", "set", "done"))
        b.cbranch(b.icmp_signed("==", was, const(0)), first, after)
        b.position_at_end(first)
        now = b.sext(b.call(b.bitcast(ld(b, getter), getter_ty.as_pointer()), []), I64)
        b.store_atomic(now, found, "release", 8)
        b.cbranch(b.icmp_signed(">", now, const(1)), go, after)
        b.position_at_end(go)
        b.call(b.bitcast(ld(b, setter), setter_ty.as_pointer()), [ir.Constant(I32, 1)])
        b.branch(after)
        b.position_at_end(after)
        b.call(unlock, [mutex_p(b)])

    def leave(b, fn):
        """``active -= 1``; the last product out sets back the count the first one found."""
        b.call(lock, [mutex_p(b)])
        was = b.atomic_rmw("sub", active, const(1), "acq_rel")
        go, after = fn.append_basic_block("leave_set"), fn.append_basic_block("leave_done")
        kept = ld(b, found)
        b.cbranch(b.and_(b.icmp_signed("==", was, const(1)), b.icmp_signed(">", kept, const(1))), go, after)
        b.position_at_end(go)
        b.call(b.bitcast(ld(b, setter), setter_ty.as_pointer()), [b.trunc(kept, I32)])
        b.branch(after)
        b.position_at_end(after)
        b.call(unlock, [mutex_p(b)])

    # The same first-in/last-out count around a product a program calls the library for and
    # that is too small for the BLAS's threads (program_emit.blas_one_thread): one counter,
    # so that a program's product and a split one on another thread never set the count back
    # under each other, and the count set back is the one found, not the one at load.
    for name, body in (("flowjit_gemms_one_thread", enter), ("flowjit_gemms_threads_back", leave)):
        bracket = ir.Function(mod, ir.FunctionType(VOID, []), name)
        b = ir.IRBuilder(bracket.append_basic_block("entry"))
        body(b, bracket)
        b.ret_void()

    def narrow(b, v):
        return b.trunc(v, it) if int_bits < 64 else v

    # A complex routine takes alpha and beta by address: passed through as pointers.
    for routine, fl, size in (("sgemm", ir.FloatType(), 4), ("dgemm", ir.DoubleType(), 8), ("cgemm", I8P, 8),
                              ("zgemm", I8P, 16)):
        sig = ir.FunctionType(VOID, [I32, I32, I32, it, it, it, fl, I8P, it, I8P, it, fl, I8P, it])
        # What a piece needs: the arguments (sizes as i64), the rows (or columns) of a unit,
        # the units, and whether the split is over rows (1) or columns (0).
        ctx_ty = ir.LiteralStructType([I32, I32, I64, I64, I64, fl, I8P, I64, I8P, I64, fl, I8P, I64, I64, I64, I64])
        piece = ir.Function(mod, chunk_ty, f"flowjit_{routine}{int_bits}_piece")
        piece.linkage = "internal"
        lo, hi, ctx = piece.args
        b = ir.IRBuilder(piece.append_basic_block("entry"))
        c = b.bitcast(ctx, ctx_ty.as_pointer())
        ta, tb, m, n, k, alpha, a, lda, bm, ldb, beta, cm, ldc, unit, units, rows = (
            b.load(b.gep(c, [ir.Constant(I32, 0), ir.Constant(I32, i)])) for i in range(16))
        by_rows = b.icmp_signed("!=", rows, const(0))
        first = b.mul(lo, unit)
        # the last unit takes the remainder: units [lo, hi) are rows (or columns) [first, last)
        last = b.select(b.icmp_signed("==", hi, units), b.select(by_rows, m, n), b.mul(hi, unit))
        length = b.sub(last, first)

        def at(ptr, elements):
            return b.gep(ptr, [b.mul(elements, const(size))])
        no_trans = const(NO_TRANS, I32)
        # rows [first, last) of op(A) and of C, or columns of op(B) and of C
        a_at = b.select(by_rows, at(a, b.select(b.icmp_signed("==", ta, no_trans), b.mul(first, lda), first)), a)
        b_at = b.select(by_rows, bm, at(bm, b.select(b.icmp_signed("==", tb, no_trans), first, b.mul(first, ldb))))
        c_at = at(cm, b.select(by_rows, b.mul(first, ldc), first))
        real = b.bitcast(ld(b, routines[routine]), sig.as_pointer())
        b.call(real, [const(ROW_MAJOR, I32), ta, tb, narrow(b, b.select(by_rows, length, m)),
                      narrow(b, b.select(by_rows, n, length)), narrow(b, k), alpha, a_at, narrow(b, lda), b_at,
                      narrow(b, ldb), beta, c_at, narrow(b, ldc)])
        b.ret_void()

        fn = ir.Function(mod, sig, f"flowjit_{routine}{int_bits}")
        args = fn.args
        entry, direct, split = (fn.append_basic_block(x) for x in ("entry", "direct", "split"))
        b = ir.IRBuilder(entry)
        slot = b.alloca(ctx_ty)
        wide = [b.sext(v, I64) if int_bits < 64 and i in (3, 4, 5, 8, 10, 13) else v for i, v in enumerate(args)]
        m, n, k = wide[3:6]
        by_rows = b.icmp_signed(">=", m, n)
        whole = b.select(by_rows, m, n)
        per_row = b.mul(b.select(by_rows, n, m), k)
        per_row = b.select(b.icmp_signed("<", per_row, const(1)), const(1), per_row)
        unit = b.sdiv(b.add(per_row, const(GEMM_PIECE_MIN_WORK - 1)), per_row)  # rows of at least the work
        unit = b.select(b.icmp_signed("<", unit, const(GEMM_PIECE_MIN_ROWS)), const(GEMM_PIECE_MIN_ROWS), unit)
        # At most GEMM_PIECES_PER_THREAD pieces a thread: each piece packs the other operand again.
        pieces = b.mul(ld(b, count), const(GEMM_PIECES_PER_THREAD))
        pieces = b.select(b.icmp_signed("<", pieces, const(1)), const(1), pieces)
        fewest = b.sdiv(b.add(whole, b.sub(pieces, const(1))), pieces)
        unit = b.select(b.icmp_signed("<", unit, fewest), fewest, unit)
        units = b.sdiv(whole, unit)
        units = b.select(b.icmp_signed("<", units, const(1)), const(1), units)
        # A product too narrow for two pieces still runs as one, the BLAS on one thread (its
        # own threads, once woken, spin beside the pool's), unless it is large enough for the
        # BLAS's threads to split its depth (GEMM_DIRECT_MIN_WORK: a weight gradient X.T @ dY
        # of 64 x 65536 x 64).
        work = b.mul(per_row, whole)
        splits = b.and_(b.icmp_signed(">=", work, const(GEMM_SPLIT_MIN_WORK)),
                        b.or_(b.icmp_signed(">=", units, const(2)),
                              b.icmp_signed("<", work, const(GEMM_DIRECT_MIN_WORK))))
        go = b.and_(b.icmp_signed("==", args[0], const(ROW_MAJOR, I32)),
                    b.or_(b.icmp_signed("!=", ld(b, one_piece), const(0)), splits))
        b.cbranch(go, split, direct)
        b.position_at_end(direct)
        b.call(b.bitcast(ld(b, routines[routine]), sig.as_pointer()), list(args))
        b.ret_void()
        b.position_at_end(split)
        values = [args[1], args[2], m, n, k, args[6], args[7], wide[8], args[9], wide[10], args[11], args[12],
                  wide[13], unit, units, b.zext(by_rows, I64)]
        for i, v in enumerate(values):
            b.store(v, b.gep(slot, [ir.Constant(I32, 0), ir.Constant(I32, i)]))
        enter(b, fn)
        # A pool busy with another caller's loop (or none: a forked child) runs the units
        # [0, units) as one piece, which is the whole product.
        b.call(parallel_for, [piece, units, b.bitcast(slot, I8P), const((1 << 63) - 1)])
        leave(b, fn)
        b.ret_void()
    unoptimized(mod)
    return str(mod)


_library: dict[str, BlasFunction] | None = None


def _library_routines() -> dict[str, BlasFunction]:
    global _library, _threads
    if _library is not None:
        return _library
    with _lock:
        if _library is None:
            _library = {}
            for path, prefix, suffix, bits in _candidates():
                try:
                    lib = ctypes.CDLL(path)
                    funcs = {r: ctypes.cast(getattr(lib, f"{prefix}{r}{suffix}"), ctypes.c_void_p).value
                             for r in ("sgemm", "dgemm")}
                except (OSError, AttributeError):
                    continue
                for r in COMPLEX_ROUTINES:   # a CBLAS without them still serves the real products
                    routine = getattr(lib, f"{prefix}{r}{suffix}", None)
                    if routine is not None:
                        funcs[r] = ctypes.cast(routine, ctypes.c_void_p).value
                _choose_openblas_core(lib)
                jit.add_library(path, lib)
                _library = {r: BlasFunction(f"{prefix}{r}{suffix}", a, bits, path, a)
                            for r, a in funcs.items()}
                for setter, getter in _THREAD_CONTROLS:
                    try:
                        _threads = BlasThreads(ctypes.cast(getattr(lib, setter), ctypes.c_void_p).value,
                                               ctypes.cast(getattr(lib, getter), ctypes.c_void_p).value)
                        break
                    except AttributeError:
                        continue
                break
    return _library


# A DYNAMIC_ARCH OpenBLAS picks its kernels for the CPU when it loads. 0.3.31 (NumPy 2.4's)
# lacks AMD Zen 5 in its list and falls back on the CPU's features, which on some systems
# gives an older core (OpenBLAS issue 6029, fixed after 0.3.31 by PR 6033); AVX2 kernels on a
# CPU with AVX-512 run at half its speed: 240 GFLOP/s for a 1024^3 sgemm on 2 Zen 5 cores
# where its SkylakeX kernels make 450 (and XLA's 440-480). Where the library says it runs an
# AVX2-only core and the CPU has what the SkylakeX kernels use, the library starts again with
# those (its own OPENBLAS_CORETYPE, read by gotoblas_dynamic_init), unless the user chose a
# core (OPENBLAS_CORETYPE) or FLOWJIT_OPENBLAS_CORE says another (``keep``: leave it). It
# is NumPy's library too, whose products get as fast; it switches before flowjit's first
# product, while no BLAS call runs on this thread's behalf.
# The CBLAS products flowjit calls: the real ones every library it uses has, the complex
# ones where it has them.
COMPLEX_ROUTINES = ("cgemm", "zgemm")
GEMM_ROUTINES = ("sgemm", "dgemm", *COMPLEX_ROUTINES)

AVX2_OPENBLAS_CORES = frozenset({"haswell", "zen", "sandybridge"})
AVX512_OPENBLAS_CORE = "SkylakeX"
AVX512_FEATURES = ("avx512f", "avx512bw", "avx512dq", "avx512vl")
_CORENAME_GETTERS = ("scipy_openblas_get_corename64_", "scipy_openblas_get_corename", "openblas_get_corename64_",
                     "openblas_get_corename")
# What _choose_openblas_core found and did: {"core": name now, "was": name before (when changed),
# "advice": what to set when it could not restart the library safely}.
OPENBLAS_CORE: dict[str, str] = {}


def _openblas_core_name(lib: ctypes.CDLL) -> str | None:
    for name in _CORENAME_GETTERS:
        getter = getattr(lib, name, None)
        if getter is not None:
            getter.restype = ctypes.c_char_p
            return (getter() or b"").decode().strip()
    return None


def better_openblas_core(core: str, features: Mapping[str, bool], environ: Mapping[str, str]) -> str | None:
    """The OpenBLAS core to restart a DYNAMIC_ARCH library with, or None to keep ``core``
    (the one it chose): FLOWJIT_OPENBLAS_CORE when set (``keep``: None); None when the user
    chose one (OPENBLAS_CORETYPE); AVX512_OPENBLAS_CORE when ``core`` is AVX2-only and the
    CPU's ``features`` (LLVM's names) hold AVX512_FEATURES."""
    want = environ.get("FLOWJIT_OPENBLAS_CORE", "")
    if want == "keep" or "OPENBLAS_CORETYPE" in environ:
        return None
    if want:
        return want if want.lower() != core.lower() else None
    if core.lower() in AVX2_OPENBLAS_CORES and all(features.get(f, False) for f in AVX512_FEATURES):
        return AVX512_OPENBLAS_CORE
    return None


def _cpu_features() -> Mapping[str, bool]:
    """The CPU's features by LLVM's names: Linux's flags (the same names for AVX-512), read
    without loading LLVM (a process running cached programs never loads it), else LLVM's."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return {name: True for name in line.split(":", 1)[1].split()}
    except OSError:
        pass
    return jit.binding().get_host_cpu_features()


def _choose_openblas_core(lib: ctypes.CDLL) -> None:
    """Restart a DYNAMIC_ARCH OpenBLAS with the core ``better_openblas_core`` names, if any;
    record the core in OPENBLAS_CORE."""
    core = _openblas_core_name(lib)
    init, quit_ = getattr(lib, "gotoblas_dynamic_init", None), getattr(lib, "gotoblas_dynamic_quit", None)
    if core is None or init is None or quit_ is None:
        return
    OPENBLAS_CORE["core"] = core
    if better_openblas_core(core, {f: True for f in AVX512_FEATURES}, os.environ) is None:
        return   # nothing to change whatever the CPU has: no need to ask it
    want = better_openblas_core(core, _cpu_features(), os.environ)
    if want is None:
        return
    if threading.active_count() > 1:
        # Another thread may be inside the library (NumPy releases the GIL for a product):
        # restarting it under that call crashed or corrupted it. Say so, change nothing.
        OPENBLAS_CORE["advice"] = (f"OpenBLAS runs its {core} kernels on a CPU with AVX-512; set "
                                   f"OPENBLAS_CORETYPE={want} before starting Python for about twice its speed")
        return

    def restart(coretype: str | None) -> str:
        # The library reads OPENBLAS_CORETYPE only as it starts: set for that alone, so
        # child processes choose for themselves.
        if coretype is not None:
            os.environ["OPENBLAS_CORETYPE"] = coretype
        try:
            quit_()
            init()
        finally:
            os.environ.pop("OPENBLAS_CORETYPE", None)
        return _openblas_core_name(lib) or ""
    now = restart(want)
    if now.lower() != want.lower():   # not a core this build has: back to its own choice
        now = restart(None)
    if now != core:
        OPENBLAS_CORE.update(core=now, was=core)


def blas_threads() -> BlasThreads | None:
    """The thread control of the library ``blas_functions`` found (None: it has none this
    module knows, and its calls keep the library's own threading)."""
    _library_routines()
    return _threads


jit.provide_libraries(_library_routines)
