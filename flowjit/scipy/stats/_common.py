"""What the distributions share: float promotion of their arguments, and a support mask that
keeps the gradient finite where the value is replaced (the 'double where')."""
from __future__ import annotations

from typing import Any

from flowjit.scipy import special
from flowjit.tracer.numpy import namespace as fnp
from flowjit.tracer.numpy.operands import as_operand as _op
from flowjit.tracer.numpy.operands import float_dtype as _float_dtype
from flowjit.tracer.numpy.operands import promote as _promote

ArrayLike = Any


def promote(*args: ArrayLike) -> list[Any]:
    """The arguments as arrays of their common float dtype (integers become float64), as scipy
    computes a distribution's functions."""
    d = _float_dtype(_promote(*[_op(a, "argument") for a in args]))
    return [fnp.astype(fnp.asarray(a), d) for a in args]


def standardize(x: Any, loc: Any, scale: Any) -> Any:
    """``(x - loc) / scale``, the standard variable of a location-scale family."""
    return (x - loc) / scale


def inside(mask: Any, x: Any, safe: float) -> Any:
    """``x`` where ``mask``, ``safe`` elsewhere: the value fed to a function that is undefined
    outside the support, so that neither it nor its derivatives (masked later) are NaN there."""
    return fnp.where(mask, x, fnp.full_like(x, safe))


def on_support(mask: Any, value: Any, outside: float) -> Any:
    """``value`` where ``mask``, the constant ``outside`` (0, -inf, 1...) elsewhere."""
    return fnp.where(mask, value, fnp.full_like(value, outside))


def xlogy(x: Any, y: Any) -> Any:
    """``x * log(y)`` (0 where x == 0 and y == 0, as scipy.special.xlogy) whose derivative in x is
    log(y) wherever y > 0, x == 0 included: a shape parameter of 1 (a - 1 == 0) must still have
    its derivative, which a mask on x == 0 would zero."""
    pos = y > 0
    return fnp.where(pos, x * fnp.log(inside(pos, y, 1.0)), special.xlogy(x, y))


def xlog1py(x: Any, y: Any) -> Any:
    """``x * log1p(y)`` as :func:`xlogy`: its derivative in x is log1p(y) wherever y > -1."""
    pos = y > -1
    return fnp.where(pos, x * fnp.log1p(inside(pos, y, 0.0)), special.xlog1py(x, y))
