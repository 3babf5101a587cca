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

from flowjit.ir.errors import BUG_REPORT, FlowjitError
from flowjit.lowering.scalar import LIBRARY_FUNCTIONS

from . import jit

# Each library function's capsule in cython_special's ``__pyx_capi__`` is found by its C
# signature, float64 arguments and result: its own name where the function is not fused
# (betainc before SciPy 1.12), else one of its fused variants' (``__pyx_fuse_1jv``), whose
# index a release may change (a complex variant has another signature, so never matches).
_VARIANTS = ("", "__pyx_fuse_0", "__pyx_fuse_1", "__pyx_fuse_2")
SYMBOL_PREFIX = "flowjit_scipy_"


def symbol(name: str) -> str:
    """The symbol generated code calls for library function ``name``."""
    return SYMBOL_PREFIX + name


def signature(name: str) -> bytes:
    """The C signature of SciPy's entry point for library function ``name``, as its capsule
    names it."""
    return f"double ({', '.join(['double'] * LIBRARY_FUNCTIONS[name])}, int __pyx_skip_dispatch)".encode()


@functools.cache
def address(name: str) -> int:
    """The address of SciPy's C function for library function ``name`` (imports SciPy); a
    FlowjitError where this SciPy exports none of that signature."""
    import scipy
    from scipy.special import cython_special

    get_name = ctypes.pythonapi.PyCapsule_GetName
    get_name.restype, get_name.argtypes = ctypes.c_char_p, [ctypes.py_object]
    get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
    get_pointer.restype, get_pointer.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    for variant in _VARIANTS:
        capsule = cython_special.__pyx_capi__.get(variant + name)
        if capsule is not None and get_name(capsule) == signature(name):
            return get_pointer(capsule, get_name(capsule))
    raise FlowjitError(f"SciPy {scipy.__version__} exports no C function {name}({signature(name).decode()}) in "
                       f"scipy.special.cython_special; {BUG_REPORT}")


def _register(name: str) -> None:
    jit.register_symbol(symbol(name), address(name))


for _name in LIBRARY_FUNCTIONS:
    jit.provide_symbol(symbol(_name), functools.partial(_register, _name))
