"""The Python array API standard's namespace functions about dtypes and the namespace:
``finfo``, ``iinfo``, ``can_cast``, ``result_type``, ``isdtype``, the constants,
``__array_namespace_info__`` and ``from_dlpack`` (DLPack: zero-copy exchange on the host).

They answer for the dtypes flowjit has (bool, the signed and unsigned ints, float16/32/64);
promotion is flowjit's own (``flowjit.ir.dtypes.promote_types``: NumPy 2's table, which
contains the standard's, with Python scalars weak), so ``result_type`` says what an
operation on those operands gives, traced or not. A traced array names this namespace
(``x.__array_namespace__()`` is ``flowjit``), so code written against the standard
(``xp = array_namespace(x)``) runs under ``fj.function``.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from typing import Any

import numpy as np

from flowjit.ir.dtypes import (
    ALL_DTYPES,
    INEXACT_DTYPES,
    INT_DTYPES,
    DType,
    bool_,
    complex128,
    float64,
    int64,
    promote_types,
)
from flowjit.ir.dtypes import dtype as as_dtype
from flowjit.ir.errors import FlowjitTypeError
from flowjit.runtime.devices import Device, check_device, devices
from flowjit.tracer.core import Tracer, current_device, host_array_from_dlpack, operand, user_location
from flowjit.tracer.numpy.counterparts import numpy_counterpart

__array_api_version__ = "2024.12"

e = math.e
pi = math.pi
inf = math.inf
nan = math.nan
newaxis = None

# The standard's kind names, as sets of NumPy kind characters (flowjit's DType.kind is one
# of b, i, f; u and c answer for NumPy's dtypes that flowjit does not compute with).
_KINDS = {
    "bool": "b",
    "signed integer": "i",
    "unsigned integer": "u",
    "integral": "iu",
    "real floating": "f",
    "complex floating": "c",
    "numeric": "iufc",
}

# The standard's dtypes among flowjit's (float16 is NumPy's, not the standard's).
_STANDARD = tuple(d for d in ALL_DTYPES if d.name != "float16")


def _where() -> str:
    loc = user_location()
    return f" (at {loc})" if loc is not None else ""


def _dtype_arg(x: Any, fn: str, arg: str, allowed: tuple[DType, ...] = ALL_DTYPES) -> DType:
    """The dtype named by ``x`` (a dtype in any NumPy spelling, or an array, traced or not)."""
    try:
        if isinstance(x, (DType, np.dtype, str, type)):
            d = as_dtype(x)
        elif isinstance(x, Tracer) or hasattr(x, "dtype"):
            d = as_dtype(x.dtype)
        else:
            d = as_dtype(x)
    except FlowjitTypeError as err:
        raise FlowjitTypeError(f"{fn}: argument {arg!r}: {err}{_where()}") from None
    if d not in allowed:
        raise FlowjitTypeError(f"{fn}: argument {arg!r} has dtype {d.name}; allowed: "
                               f"{', '.join(a.name for a in allowed)}{_where()}")
    return d


@dataclass(frozen=True)
class FInfo:
    """Machine limits of a floating-point dtype (the standard's ``finfo_object``)."""

    bits: int
    eps: float
    max: float
    min: float
    smallest_normal: float
    dtype: DType


@dataclass(frozen=True)
class IInfo:
    """Machine limits of an integer dtype (the standard's ``iinfo_object``)."""

    bits: int
    max: int
    min: int
    dtype: DType


def finfo(type: Any, /) -> FInfo:  # noqa: A002 - the standard's parameter name
    """Machine limits of a floating-point dtype, or of an array's (traced or not): bits,
    eps, max, min, smallest_normal (Python numbers) and dtype; of a complex dtype those of
    its parts (``finfo(complex64).dtype`` is float32, as the standard says). A dtype that
    is not floating-point raises, naming the ones flowjit has (integers: ``iinfo``)."""
    d = _dtype_arg(type, "finfo", "type", INEXACT_DTYPES).real_dtype
    info = np.finfo(d.np)
    return FInfo(int(info.bits), float(info.eps), float(info.max), float(info.min),
                 float(info.smallest_normal), d)


def iinfo(type: Any, /) -> IInfo:  # noqa: A002 - the standard's parameter name
    """Machine limits of an integer dtype, or of an array's (traced or not): bits, max,
    min (Python ints) and dtype. A dtype that is not an integer raises, naming the integer
    dtypes flowjit has (floating-point: ``finfo``)."""
    d = _dtype_arg(type, "iinfo", "type", INT_DTYPES)
    info = np.iinfo(d.np)
    return IInfo(int(info.bits), int(info.max), int(info.min), d)


@numpy_counterpart
def result_type(*arrays_and_dtypes: Any) -> DType:
    """The dtype an operation on these operands gives: arrays (traced or not) and dtypes
    are strong and promote as NumPy 2 does (the standard's table, and NumPy's rules across
    kinds); Python scalars are weak (a float32 array and 2.0 give float32). With no
    operand it raises, as NumPy does."""
    if not arrays_and_dtypes:
        raise FlowjitTypeError(f"result_type: at least one array or dtype is required{_where()}")
    dtypes, weak = [], []
    for i, x in enumerate(arrays_and_dtypes):
        if isinstance(x, (DType, np.dtype, str, type)):
            dtypes.append(_dtype_arg(x, "result_type", f"arrays_and_dtypes[{i}]"))
            weak.append(False)
            continue
        try:
            o = operand(x, f"result_type: arrays_and_dtypes[{i}]")
        except FlowjitTypeError as err:
            raise FlowjitTypeError(f"{err}{_where()}") from None
        dtypes.append(o.dtype)
        weak.append(o.weak)
    return promote_types(dtypes, weak)


@numpy_counterpart
def can_cast(from_: Any, to: Any, /) -> bool:
    """Whether ``from_`` (a dtype, or an array, traced or not) casts to dtype ``to`` by
    promotion, i.e. ``result_type(from_, to) == to``: no value changes (NumPy's "safe"
    casting for the dtypes flowjit has)."""
    a = _dtype_arg(from_, "can_cast", "from_")
    b = _dtype_arg(to, "can_cast", "to")
    return promote_types([a, b], [False, False]) == b


def _kind_chars(kind: Any, fn: str) -> tuple[str, list[Any]]:
    """A kind argument (a kind name, a dtype or a tuple of them) as NumPy kind characters
    and the dtypes it names."""
    chars, named = "", []
    for k in kind if isinstance(kind, tuple) else (kind,):
        if isinstance(k, str) and k in _KINDS:
            chars += _KINDS[k]
            continue
        try:
            if isinstance(k, str):  # a string is a kind name, as in NumPy ("float" is no kind)
                raise TypeError
            named.append(k if isinstance(k, DType) else np.dtype(k))
        except (TypeError, ValueError):
            allowed = ", ".join(repr(n) for n in _KINDS)
            raise FlowjitTypeError(f"{fn}: kind {k!r} is neither a dtype nor a kind name; allowed: {allowed}, "
                                   f"a dtype, or a tuple of them{_where()}") from None
    return chars, named


def isdtype(dtype: Any, kind: Any) -> bool:
    """Whether ``dtype`` is of ``kind``: one of the standard's kind names ('bool',
    'signed integer', 'unsigned integer', 'integral', 'real floating', 'complex floating',
    'numeric'), a dtype, or a tuple of them (any matches). ``dtype`` is a dtype (flowjit's
    or NumPy's), not an array: pass ``x.dtype``. Both may be passed by keyword, as the
    standard's signature has them."""
    if isinstance(dtype, Tracer) or hasattr(dtype, "__array__") and not isinstance(dtype, (DType, type)):
        raise FlowjitTypeError(f"isdtype: argument 'dtype' is an array ({type(dtype).__name__}); "
                               f"pass its dtype, x.dtype{_where()}")
    try:
        char = dtype.kind if isinstance(dtype, DType) else np.dtype(dtype).kind
    except (TypeError, ValueError):
        raise FlowjitTypeError(f"isdtype: argument 'dtype' is {dtype!r}, which is not a dtype{_where()}") from None
    chars, named = _kind_chars(kind, "isdtype")
    return char in chars or any(n == dtype for n in named)


class ArrayNamespaceInfo:
    """What ``fj.__array_namespace_info__()`` returns: the namespace's capabilities, devices
    and dtypes, as the standard's inspection API names them."""

    def capabilities(self) -> dict[str, Any]:
        """Boolean-mask indexing and data-dependent shapes are not traceable (a compiled
        program's shapes follow from its arguments' shapes); arrays have at most NumPy's 64
        dimensions (results are NumPy arrays)."""
        return {"boolean indexing": False, "data-dependent shapes": False, "max dimensions": 64}

    def default_device(self) -> Device:
        """The device programs run on when nothing places them: the innermost ``fj.device``
        block's, else ``cpu:0``."""
        return check_device(current_device() or "cpu:0")

    def devices(self) -> list[Device]:
        """The devices of this process (``fj.devices()``)."""
        return devices()

    def _check(self, device: Any) -> None:
        if device is not None:
            check_device(device)

    def dtypes(self, *, device: Any = None, kind: Any = None) -> dict[str, DType]:
        """The standard's dtypes flowjit has, by name (every device has them all), of
        ``kind`` (as ``isdtype`` takes it) when given. float16, which flowjit also has, is
        not one of the standard's."""
        self._check(device)
        if kind is None:
            return {d.name: d for d in _STANDARD}
        _kind_chars(kind, "dtypes")  # rejects a bad kind even where no dtype would match
        return {d.name: d for d in _STANDARD if isdtype(d, kind)}

    def default_dtypes(self, *, device: Any = None) -> dict[str, DType | None]:
        """NumPy's defaults: float64, complex128 and int64 (indices too)."""
        self._check(device)
        return {"real floating": float64, "complex floating": complex128, "integral": int64, "indexing": int64}


def __array_namespace_info__() -> ArrayNamespaceInfo:
    """The standard's inspection API: ``capabilities()``, ``default_device()``,
    ``devices()``, ``dtypes(kind=...)`` and ``default_dtypes()``."""
    return ArrayNamespaceInfo()


def from_dlpack(x: Any, /, *, device: Any = None, copy: bool | None = None) -> Any:
    """An array of another library (PyTorch, JAX, CuPy, NumPy... anything with
    ``__dlpack__``) as a NumPy array sharing its memory, as flowjit's arrays are: on the
    CPU no data is copied (``copy=True`` copies; ``copy=False`` refuses to). Memory on
    another device (a CUDA tensor) raises: move it to the CPU first. ``device`` may only
    name a CPU device. A traced array is already flowjit's and is returned as it is."""
    if device is not None and check_device(device).kind != "cpu":
        raise FlowjitTypeError(f"from_dlpack: device {device!r} is not allowed; flowjit's arrays live in host "
                               f"memory: pass device=None or a CPU device{_where()}")
    if isinstance(x, Tracer):
        return x
    if not hasattr(x, "__dlpack__"):
        raise FlowjitTypeError(f"from_dlpack: argument 'x' has type {type(x).__name__}, which does not "
                               f"implement DLPack (__dlpack__); use fj.asarray for sequences and scalars{_where()}")
    return host_array_from_dlpack(x, "from_dlpack: argument 'x'", copy=copy)


def _array_namespace(self: Tracer, /, *, api_version: str | None = None) -> Any:
    if api_version is not None and api_version not in ("2021.12", "2022.12", "2023.12", __array_api_version__):
        raise FlowjitTypeError(f"__array_namespace__: api_version {api_version!r} is not supported; "
                               f"flowjit follows {__array_api_version__} (and the earlier versions)")
    return sys.modules["flowjit"]


Tracer.__array_namespace__ = _array_namespace  # type: ignore[attr-defined]

__all__: list[str] = [
    "__array_api_version__", "__array_namespace_info__", "bool", "can_cast", "e", "finfo", "from_dlpack",
    "iinfo", "inf", "isdtype", "nan", "newaxis", "pi", "result_type",
]

# The standard names the boolean dtype ``bool`` (``xp.bool``); defined last, as it shadows
# the builtin in this module.
bool = bool_  # noqa: A001
