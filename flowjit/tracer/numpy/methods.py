"""Tracer's operators and methods: ``x + y``, ``x @ y``, ``x[i]``, ``x.sum()``, ``x.T``...,
the fj functions of the same meaning."""

from __future__ import annotations

from typing import Any

from flowjit.ir.errors import FlowjitTypeError
from flowjit.tracer.core import Tracer, user_location
from flowjit.tracer.numpy.conversion import astype
from flowjit.tracer.numpy.index_update import at
from flowjit.tracer.numpy.indexing import getitem, take
from flowjit.tracer.numpy.layout import ravel, reshape, squeeze, swapaxes, transpose
from flowjit.tracer.numpy.manipulation import repeat
from flowjit.tracer.numpy.matrices import diagonal
from flowjit.tracer.numpy.products import dot, matmul
from flowjit.tracer.numpy.reductions import (
    all,
    any,
    argmax,
    argmin,
    cumprod,
    cumsum,
    max,
    mean,
    min,
    prod,
    std,
    sum,
    var,
)
from flowjit.tracer.numpy.ufuncs import (
    absolute,
    add,
    bitwise_and,
    bitwise_or,
    bitwise_xor,
    clip,
    conj,
    divide,
    equal,
    floor_divide,
    greater,
    greater_equal,
    imag,
    invert,
    left_shift,
    less,
    less_equal,
    mod,
    multiply,
    negative,
    not_equal,
    power,
    real,
    right_shift,
    round,
    subtract,
)


def _reflect(fn):
    return lambda self, other: fn(other, self)


METHODS = {
    "__add__": add, "__radd__": _reflect(add),
    "__sub__": subtract, "__rsub__": _reflect(subtract),
    "__mul__": multiply, "__rmul__": _reflect(multiply),
    "__truediv__": divide, "__rtruediv__": _reflect(divide),
    "__floordiv__": floor_divide, "__rfloordiv__": _reflect(floor_divide),
    "__mod__": mod, "__rmod__": _reflect(mod),
    "__pow__": power, "__rpow__": _reflect(power),
    "__matmul__": matmul, "__rmatmul__": _reflect(matmul),
    "__lt__": less, "__le__": less_equal, "__gt__": greater, "__ge__": greater_equal,
    "__eq__": equal, "__ne__": not_equal,
    "__and__": bitwise_and, "__rand__": _reflect(bitwise_and),
    "__or__": bitwise_or, "__ror__": _reflect(bitwise_or),
    "__xor__": bitwise_xor, "__rxor__": _reflect(bitwise_xor),
    "__lshift__": left_shift, "__rlshift__": _reflect(left_shift),
    "__rshift__": right_shift, "__rrshift__": _reflect(right_shift),
    "__neg__": negative, "__pos__": lambda self: self, "__abs__": absolute, "__invert__": invert,
    "__getitem__": getitem,
    "reshape": reshape, "astype": astype, "transpose": lambda self, *axes: transpose(
        self, axes[0] if len(axes) == 1 and not isinstance(axes[0], int) else (axes or None)),
    "sum": sum, "mean": mean, "max": max, "min": min, "prod": prod, "var": var, "std": std,
    "argmax": argmax, "argmin": argmin, "any": any, "all": all, "cumsum": cumsum,
    "squeeze": squeeze, "ravel": ravel, "flatten": ravel, "clip": clip, "round": round, "dot": dot,
    "take": take, "swapaxes": swapaxes, "conj": conj, "conjugate": conj,
}


def _mT_error(x: Tracer) -> Any:
    raise FlowjitTypeError(f"x.mT of a traced array of shape {list(x.shape)} at {user_location()}: mT transposes "
                           "the last two axes, so the array needs at least 2 dimensions")


for _name, _fn in METHODS.items():
    setattr(Tracer, _name, _fn)
Tracer.T = property(lambda self: transpose(self))  # type: ignore[attr-defined]
# The array API's matrix transpose: the last two axes swapped (a stack of matrices).
Tracer.mT = property(  # type: ignore[attr-defined]
    lambda self: swapaxes(self, -1, -2) if self.ndim >= 2 else _mT_error(self))
Tracer.real = property(real)  # type: ignore[attr-defined]
# JAX's functional updates: x.at[key].set(v), .add(v), .get()...
Tracer.at = property(at)  # type: ignore[attr-defined]
Tracer.imag = property(imag)  # type: ignore[attr-defined]
Tracer.__hash__ = None  # type: ignore[assignment]


# ndarray's methods of the same names (x.diagonal(), x.repeat(2), x.cumprod(1)); not
# x.trace(), as a Tracer's ``trace`` is the trace it belongs to.
for _method in (diagonal, repeat, cumprod):
    setattr(Tracer, _method.__name__, _method)
