"""SciPy's special functions, called per element from generated code.

The loop IR's library functions (``lowering.scalar.LIBRARY_FUNCTIONS``: the incomplete gamma
and beta functions, the Bessel functions of any order) have no vectorizable form here: a
kernel calls the C function SciPy compiled for each, the entry point that
``scipy.special.cython_special`` exports (a capsule per function, as numba-scipy finds them:
``double f(double, ..., int skip_dispatch)``, declared ``nogil``, so any thread may call
it). The same code as ``scipy.special``'s ufuncs run, without the Python driver: a program
using them stays one native program. Each symbol's address is registered when a module
calling it is linked (``jit.provide_symbol``), so SciPy is imported only by a process that
links such a module. A C library (``flowjit compile``) cannot link SciPy's extension module,
so the exporter refuses these ops.
"""

from __future__ import annotations

import ctypes
import functools

from flowjit.lowering.scalar import LIBRARY_FUNCTIONS

from . import jit

# Each library function's capsule in cython_special's ``__pyx_capi__``: the float64 variant
# of a fused function (its float64 arguments, real result).
CAPSULES = {"gammainc": "gammainc", "gammaincc": "gammaincc", "betainc": "__pyx_fuse_0betainc",
            "jv": "__pyx_fuse_1jv", "yv": "__pyx_fuse_1yv", "iv": "__pyx_fuse_1iv", "ive": "__pyx_fuse_1ive"}
assert set(CAPSULES) == set(LIBRARY_FUNCTIONS), "a library function without SciPy's entry point"
SYMBOL_PREFIX = "flowjit_scipy_"


def symbol(name: str) -> str:
    """The symbol generated code calls for library function ``name``."""
    return SYMBOL_PREFIX + name


@functools.cache
def address(name: str) -> int:
    """The address of SciPy's C function for library function ``name`` (imports SciPy)."""
    from scipy.special import cython_special

    capsule = cython_special.__pyx_capi__[CAPSULES[name]]
    get_name = ctypes.pythonapi.PyCapsule_GetName
    get_name.restype, get_name.argtypes = ctypes.c_char_p, [ctypes.py_object]
    get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
    get_pointer.restype, get_pointer.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    return get_pointer(capsule, get_name(capsule))


def _register(name: str) -> None:
    jit.register_symbol(symbol(name), address(name))


for _name in LIBRARY_FUNCTIONS:
    jit.provide_symbol(symbol(_name), functools.partial(_register, _name))
