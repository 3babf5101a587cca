"""What the topic modules share: an argument as an ``Operand`` (a Tracer or a concrete array,
weak when a Python scalar) and back, casts, NumPy 2's promotion, and the checks of static
arguments (axes, counts, sizes) with errors that name the function and the user's line."""

from __future__ import annotations

import builtins
import contextlib
import operator
from collections.abc import Sequence
from typing import Any

import numpy as np

from flowjit.ir.dtypes import DType, bool_, default_float, float16, promote_types
from flowjit.ir.errors import FlowjitTypeError, ShapeError
from flowjit.tracer.core import Operand, Tracer, bind, current_trace, operand, user_location
from flowjit.tracer.core import device as device_block

ArrayLike = Any


def as_operand(x: ArrayLike, name: str = "x") -> Operand:
    return x if isinstance(x, Operand) else operand(x, name)


def operand_value(o: Operand) -> Any:
    """Back from an Operand to what users hold: a Tracer or an ndarray."""
    return o.tracer if o.tracer is not None else o.array


def cast(o: Operand, d: DType, check: bool = True) -> Operand:
    if o.dtype == d:
        return o
    if o.tracer is None:
        if check and not fits(o, d):
            # NumPy 2 (NEP 50) refuses a Python int that the array's dtype cannot hold.
            raise OverflowError(f"Python integer {int(o.array)} out of bounds for {d.name}")
        with np.errstate(all="ignore"):
            return Operand(None, np.asarray(o.array).astype(d.np), o.weak)
    return _op_result(bind("cast", [o], {"dtype": d}, weak=o.weak))


def fits(o: Operand, d: DType) -> bool:
    """False for a concrete weak Python int that ``d`` (an integer dtype) cannot represent."""
    if not (o.weak and o.tracer is None and o.dtype.is_int and d.is_int):
        return True
    info = np.iinfo(d.np)
    return builtins.bool(np.all((o.array >= info.min) & (o.array <= info.max)))


def _op_result(x: Any) -> Operand:
    return operand(x)


def strong(o: Operand) -> Operand:
    """``o`` as an array of fixed dtype: an explicit dtype (astype, full) ends Python-scalar weakness."""
    if not o.weak:
        return o
    if o.tracer is not None:
        return Operand(Tracer(o.tracer.value, o.tracer.trace, False), None, False)
    return Operand(None, o.array, False)


def promote(*ops: Operand) -> DType:
    return promote_types([o.dtype for o in ops], [o.weak for o in ops])


def float_dtype(d: DType) -> DType:
    # NumPy computes transcendental functions of bool in float16 and of ints in float64.
    if d.is_bool:
        return float16
    return default_float(d)


def apply(prim: str, ops: Sequence[Operand], attrs: dict | None = None) -> Any:
    weak = builtins.all(o.weak for o in ops)
    return bind(prim, list(ops), attrs or {}, weak=weak)


def to_bool(o: Operand) -> Operand:
    if o.dtype == bool_:
        return o
    return _op_result(bind("ne", [o, cast(Operand(None, np.asarray(0), True), o.dtype)]))


def shape_tuple(shape: Any) -> tuple[int, ...]:
    if isinstance(shape, (int, np.integer)):
        return (int(shape),)
    return tuple(int(s) for s in shape)


def on_device(device: Any) -> Any:
    """The ``fj.device`` block of a creation function's ``device=`` (none for None)."""
    return contextlib.nullcontext() if device is None else device_block(device)


def bad_argument(fn: str, message: str, exc: type[Exception] = FlowjitTypeError) -> Exception:
    """The error for a bad argument of ``fn``: it names the function and the user's line."""
    return exc(f"{fn}: {message} (at {user_location()})")


def refuse_out(fn: str, out: Any) -> None:
    """Raise for NumPy's ``out=`` argument, which immutable arrays cannot take."""
    if out is not None:
        raise bad_argument(fn, "out= is not supported: flowjit's arrays are immutable; use the returned array")


def static_int(fn: str, name: str, v: Any) -> int:
    if isinstance(v, Tracer):
        raise bad_argument(fn, f"{name} must be a static Python int (the result's shape depends on it), got traced "
                           f"{v.aval}")
    try:
        return operator.index(v)
    except TypeError:
        raise bad_argument(fn, f"{name} must be an integer, got {v!r}") from None


def normalize_axis(fn: str, axis: Any, ndim: int, name: str = "axis") -> int:
    a = static_int(fn, name, axis)
    if not -ndim <= a < ndim:
        raise bad_argument(fn, f"{name}={a} is out of bounds for an array of rank {ndim}", ShapeError)
    return a % ndim


def normalize_axes(fn: str, axis: Any, ndim: int) -> tuple[int, ...]:
    if axis is None:
        return tuple(range(ndim))
    axes = (axis,) if not isinstance(axis, (tuple, list)) else tuple(axis)
    out = tuple(normalize_axis(fn, a, ndim) for a in axes)
    if len(set(out)) != len(out):
        raise bad_argument(fn, f"repeated axis in axis={axis!r}", ShapeError)
    return out


def concrete_array(fname: str, x: ArrayLike) -> np.ndarray | None:
    """x as a NumPy array when it is concrete (no trace running); None when traced."""
    o = as_operand(x, "x")
    if o.tracer is not None or current_trace() is not None:
        return None
    return np.asarray(o.array)


def known_array(x: ArrayLike) -> np.ndarray | None:
    """x's values when they are known while tracing (x is not a Tracer: a NumPy array, a
    Python number, a list), else None."""
    o = as_operand(x)
    return None if o.tracer is not None else np.asarray(o.array)


def needs_size(fname: str, x: ArrayLike, what: str, example: str, noun: str = "array",
               depends: str = "the values") -> FlowjitTypeError:
    """The error of ``fname`` called on a traced ``x`` without ``size=``: ``what`` (how many
    results there are) depends on the values, which a traced program does not know; JAX's
    ``size=K`` fixes it (``example`` shows the call)."""
    return FlowjitTypeError(
        f"{fname} on a traced {noun} ({as_operand(x).aval}) at {user_location()}: {what} depends on {depends}, "
        f"and flowjit's arrays have shapes fixed when tracing. Pass size=K (as JAX's {fname}): the first K "
        f"results, the rest filled with fill_value, e.g. {example}; or call it outside the traced function")


def check_size(fname: str, size: Any) -> None:
    if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 1:
        raise FlowjitTypeError(f"{fname}: size={size!r} must be a positive int (at {user_location()})")
