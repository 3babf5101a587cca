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
import glob
import importlib.util
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass

from . import jit

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


@dataclass(frozen=True)
class BlasThreads:
    """The BLAS library's thread control: ``set_address`` of ``void set(int)`` (how many
    threads its next calls may use) and ``get_address`` of ``int get()``."""

    set_address: int
    get_address: int

    def get(self) -> int:
        """The thread count the library's calls use now."""
        return int(ctypes.CFUNCTYPE(ctypes.c_int)(self.get_address)())


@dataclass(frozen=True)
class BlasFunction:
    """One CBLAS routine: its symbol, its address in this process, the width of its integer
    arguments (64 for NumPy's ILP64 OpenBLAS, 32 for the usual system CBLAS), and the
    library that holds it (what an AOT library links against)."""

    symbol: str
    address: int
    int_bits: int
    library: str


_found: dict[str, BlasFunction] | None = None
_threads: BlasThreads | None = None
_lock = threading.Lock()


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


def blas_functions() -> dict[str, BlasFunction]:
    """``{"sgemm": ..., "dgemm": ...}`` from the first library that has both (the
    ``FLOWJIT_BLAS`` file if set, then NumPy's bundled OpenBLAS, then the system's); an
    empty dict when none is found, and the caller falls back to its own loops."""
    global _found, _threads
    if _found is not None:
        return _found
    with _lock:
        if _found is None:
            _found = {}
            for path, prefix, suffix, bits in _candidates():
                try:
                    lib = ctypes.CDLL(path)
                    funcs = {r: ctypes.cast(getattr(lib, f"{prefix}{r}{suffix}"), ctypes.c_void_p).value
                             for r in ("sgemm", "dgemm")}
                except (OSError, AttributeError):
                    continue
                jit.add_library(path, lib)
                _found = {r: BlasFunction(f"{prefix}{r}{suffix}", a, bits, path)
                          for r, a in funcs.items()}
                for setter, getter in _THREAD_CONTROLS:
                    try:
                        _threads = BlasThreads(ctypes.cast(getattr(lib, setter), ctypes.c_void_p).value,
                                               ctypes.cast(getattr(lib, getter), ctypes.c_void_p).value)
                        break
                    except AttributeError:
                        continue
                break
    return _found


def blas_threads() -> BlasThreads | None:
    """The thread control of the library ``blas_functions`` found (None: it has none this
    module knows, and its calls keep the library's own threading)."""
    blas_functions()
    return _threads


jit.provide_libraries(blas_functions)
