"""Arrays from what users hold, and between dtypes: ``asarray`` (``array``), ``astype``, and
``fj.float32(x)`` (the dtypes' constructor)."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from flowjit.ir.dtypes import DType, register_constructor
from flowjit.ir.dtypes import dtype as as_dtype
from flowjit.ir.errors import FlowjitTypeError
from flowjit.tracer.core import Operand, Tracer, current_trace, host_array_from_dlpack, user_location
from flowjit.tracer.numpy.operands import ArrayLike, as_operand, cast, on_device, operand_value, strong

__all__: list[str] = [
    "array", "asarray", "astype",
]


def astype(x: ArrayLike, dtype: Any, /, *, copy: bool = True, device: Any = None) -> Any:
    """``x`` converted to ``dtype`` (truncating toward zero from float to int). With
    ``copy=False`` a concrete array already of ``dtype`` is returned as it is (the array
    API's meaning); ``device`` places the conversion (``fj.device``)."""
    o = as_operand(x)
    d = as_dtype(dtype)
    if not copy and o.tracer is None and o.dtype == d and isinstance(x, np.ndarray):
        return x
    if o.dtype.is_complex and not d.is_complex and not d.is_bool:
        # NumPy's warning, once at the user's line (the compiled cast then runs quietly).
        warnings.warn(f"astype: casting {o.dtype.name} to {d.name} discards the imaginary part "
                      f"(at {user_location()}); take fj.real(x) first to say so", np.exceptions.ComplexWarning,
                      stacklevel=2)
    with on_device(device):
        out = operand_value(strong(cast(o, d, check=False)))
    if isinstance(out, np.ndarray) and isinstance(x, np.ndarray) and np.may_share_memory(out, x):
        out = out.copy()  # copy=True: never x's own memory
    return out


def asarray(x: ArrayLike, dtype: Any = None, copy: bool | None = None, *, device: Any = None) -> Any:
    """``x`` as an array (a Tracer stays one), optionally converted to ``dtype``, on ``device``
    (as ``fj.device``, like the other creation functions).

    ``copy`` has the array API's meaning: True always returns a new array, False never
    copies and raises ValueError where it would have to (a list, a Python or NumPy scalar,
    another dtype), None copies only where it must. A traced value is immutable, so for it
    only the dtype decides whether ``copy=False`` is possible.
    """
    if device is not None:
        with on_device(device):
            return asarray(x, dtype, copy)
    if copy is not None and not isinstance(copy, (bool, np.bool_)):
        raise FlowjitTypeError(f"asarray: copy={copy!r} at {user_location()}; copy must be True, False "
                               "or None")
    target = as_dtype(dtype) if dtype is not None else None
    read = getattr(type(x), "__flowjit_value__", None)
    value = read(x) if read is not None else x
    if copy is False and not isinstance(value, Tracer):
        try:  # NumPy decides whether the object's memory can be used as it is
            if isinstance(value, (list, tuple)):  # a new array, whatever it holds (Tracers too)
                raise ValueError
            if hasattr(value, "__dlpack__") and not hasattr(value, "__array__"):
                value = host_array_from_dlpack(value, "asarray", copy=False)
            value = np.asarray(value, dtype=target.np if target is not None else None, copy=False)
        except ValueError:
            raise ValueError(
                f"asarray(copy=False) at {user_location()}: a {type(value).__name__} cannot become an array "
                f"{'of ' + target.name + ' ' if target is not None else ''}without a copy; pass copy=None "
                "(copy only if needed) or copy=True") from None
    o = as_operand(value)
    if target is not None and target != o.dtype:
        if copy is False:
            raise ValueError(f"asarray(copy=False) at {user_location()}: converting {o.dtype.name} to "
                             f"{target.name} needs a copy; pass copy=None or copy=True")
        o = cast(o, target)
    elif copy and o.tracer is None and not isinstance(value, (bool, int, float, list, tuple)):
        o = Operand(None, np.array(o.array, copy=True), o.weak)  # it may be x's own memory
    o = strong(o)
    trace = current_trace()
    if o.tracer is None and trace is not None:
        # Inside a trace an array made here is a traced constant (as jnp.asarray under
        # jax.jit): indexing it with traced ids is a gather, not NumPy's indexing of a Tracer.
        return trace.constant(np.asarray(o.array))
    return operand_value(o)


array = asarray


def _construct(x: Any, d: DType) -> Any:
    # fj.float32(x): as np.float32(x), any array-like converted; a traced value stays traced.
    return astype(asarray(x), d)


register_constructor(_construct)
