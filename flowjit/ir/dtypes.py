"""Element types and the rules that combine them.

flowjit has the array API standard's dtypes: bool, the signed and unsigned integers of 8 to
64 bits, float16/32/64 and complex64/128. Promotion follows NumPy 2 (NEP 50): two arrays promote as
``np.result_type`` does, and a Python scalar is *weak*: it takes the dtype of the array
it meets when their kinds allow (a float32 array times 2.0 stays float32, an int32 array
plus 1 stays int32), as in JAX. A weak scalar meeting a lower kind (a float scalar and an
int array) gives NumPy's default dtype of the scalar's kind (float64).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from flowjit.ir.errors import FlowjitTypeError

# How ``fj.float32(x)`` converts ``x``: the tracer's astype (it lives above this layer and
# registers itself when imported); None until then.
_constructor: Callable[[Any, DType], Any] | None = None


def register_constructor(fn: Callable[[Any, DType], Any]) -> None:
    """Set how calling a dtype converts a value (``fn(x, dtype)``); the tracer registers its
    ``astype`` so that ``fj.int64(traced)`` is a traced conversion."""
    global _constructor
    _constructor = fn


@dataclass(frozen=True, eq=False)
class DType:
    """One element type: its IR short name (``f32``), NumPy name and NumPy kind (b, i, u, f, c).

    It compares equal to the same NumPy dtype in any spelling (``np.float32``,
    ``np.dtype("float32")``, ``"float32"``), and ``np.dtype(fj.float32)`` works; compared
    with anything else (``None``, a string that is no dtype) it is unequal, never an error.
    """

    short: str
    name: str
    kind: str
    itemsize: int

    @property
    def np(self) -> np.dtype:
        return np.dtype(self.name)

    @property
    def dtype(self) -> np.dtype:
        # NumPy's protocol: np.dtype(obj) reads obj.dtype.
        return np.dtype(self.name)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, DType):
            return self.short == other.short
        if isinstance(other, str) and other == self.short:
            return True
        if other is None:  # np.dtype(None) is float64, but None names no dtype
            return False
        try:
            return bool(np.dtype(other) == np.dtype(self.name))  # type: ignore[arg-type]
        except Exception:  # noqa: BLE001 - whatever NumPy cannot read as a dtype is not this dtype
            return False

    def __hash__(self) -> int:
        return hash(self.short)

    def __call__(self, x: Any) -> Any:
        """``x`` (a Python number, a list, an array or a traced value) converted to this dtype,
        as ``np.float32(x)`` and ``jnp.float32(x)``: through the tracer's ``astype``, which
        registers itself (``register_constructor``), so a traced value stays traced."""
        if _constructor is None:
            return np.asarray(x).astype(self.np)
        return _constructor(x, self)

    @property
    def is_float(self) -> bool:
        return self.kind == "f"

    @property
    def is_int(self) -> bool:
        """Any integer, signed or unsigned: the kinds whose arithmetic wraps."""
        return self.kind in "iu"

    @property
    def is_unsigned(self) -> bool:
        return self.kind == "u"

    @property
    def is_bool(self) -> bool:
        return self.kind == "b"

    @property
    def is_complex(self) -> bool:
        return self.kind == "c"

    @property
    def is_inexact(self) -> bool:
        """Float or complex: the dtypes that carry gradients."""
        return self.kind in "fc"

    @property
    def real_dtype(self) -> DType:
        """The dtype of a complex dtype's parts (complex64: float32); itself otherwise."""
        return dtype(np.finfo(self.np).dtype) if self.is_complex else self

    @property
    def complex_dtype(self) -> DType:
        """The complex dtype of this float's precision (float16 and float32: complex64, as
        NumPy has no complex32); itself for a complex dtype."""
        return self if self.is_complex else dtype(np.result_type(self.np, np.complex64))

    def __str__(self) -> str:
        return self.short

    def __repr__(self) -> str:
        return f"fj.{self.name}"


bool_ = DType("bool", "bool", "b", 1)
int8 = DType("i8", "int8", "i", 1)
int16 = DType("i16", "int16", "i", 2)
int32 = DType("i32", "int32", "i", 4)
int64 = DType("i64", "int64", "i", 8)
uint8 = DType("u8", "uint8", "u", 1)
uint16 = DType("u16", "uint16", "u", 2)
uint32 = DType("u32", "uint32", "u", 4)
uint64 = DType("u64", "uint64", "u", 8)
float16 = DType("f16", "float16", "f", 2)
float32 = DType("f32", "float32", "f", 4)
float64 = DType("f64", "float64", "f", 8)
complex64 = DType("c64", "complex64", "c", 8)
complex128 = DType("c128", "complex128", "c", 16)

SIGNED_DTYPES: tuple[DType, ...] = (int8, int16, int32, int64)
UNSIGNED_DTYPES: tuple[DType, ...] = (uint8, uint16, uint32, uint64)
INT_DTYPES: tuple[DType, ...] = SIGNED_DTYPES + UNSIGNED_DTYPES
FLOAT_DTYPES: tuple[DType, ...] = (float16, float32, float64)
COMPLEX_DTYPES: tuple[DType, ...] = (complex64, complex128)
INEXACT_DTYPES: tuple[DType, ...] = FLOAT_DTYPES + COMPLEX_DTYPES
# The real dtypes: what is ordered (compares, max, sort) and what most kernels compute.
REAL_DTYPES: tuple[DType, ...] = (bool_,) + INT_DTYPES + FLOAT_DTYPES
ALL_DTYPES: tuple[DType, ...] = REAL_DTYPES + COMPLEX_DTYPES
# The real numbers; a primitive that also takes complex lists COMPLEX_DTYPES beside them.
NUMERIC_DTYPES: tuple[DType, ...] = INT_DTYPES + FLOAT_DTYPES

_BY_SHORT = {d.short: d for d in ALL_DTYPES}
_BY_NAME = {d.name: d for d in ALL_DTYPES}

# A dict on np.dtype objects: the hot path (arr.dtype) skips np.dtype(...).name.
_BY_NP = {np.dtype(d.name): d for d in ALL_DTYPES}

# The dtype a weak Python scalar of each kind becomes when nothing else decides.
DEFAULT_FOR_KIND = {"b": bool_, "i": int64, "u": int64, "f": float64, "c": complex128}
# A weak int scalar keeps an unsigned array unsigned (NEP 50: uint8 + 1 is uint8).
_KIND_ORDER = {"b": 0, "i": 1, "u": 1, "f": 2, "c": 3}


def dtype(x: object) -> DType:
    """Coerce a DType, a short name (``'f32'``), a NumPy name or a NumPy dtype."""
    if isinstance(x, DType):
        return x
    hit = _BY_NP.get(x) if isinstance(x, np.dtype) else None  # the hot path: arr.dtype
    if hit is not None:
        return hit
    if isinstance(x, str) and x in _BY_SHORT:
        return _BY_SHORT[x]
    try:
        npd = np.dtype(x)  # type: ignore[call-overload]
    except TypeError:
        raise FlowjitTypeError(f"{x!r} is not a dtype; flowjit supports {supported_names()}") from None
    if npd.name in _BY_NAME:
        return _BY_NAME[npd.name]
    raise FlowjitTypeError(
        f"dtype {npd.name} is not supported by flowjit (supported: {supported_names()}); "
        f"cast it first, e.g. .astype(np.float32)")


def from_short(short: str) -> DType | None:
    """The dtype with IR short name ``short``, or None."""
    return _BY_SHORT.get(short)


def supported_names() -> str:
    return ", ".join(d.name for d in ALL_DTYPES)


def promote(a: DType, b: DType) -> DType:
    """Promote two strong dtypes as NumPy does (``np.result_type``)."""
    return dtype(np.result_type(a.np, b.np))


def promote_types(dtypes: list[DType], weak: list[bool]) -> DType:
    """The common dtype of several operands, some of them weak Python scalars.

    Strong dtypes promote as NumPy's; a weak operand only raises the kind, and when it
    does the result is the default dtype of its kind (float64 for a float scalar).
    """
    strong = [d for d, w in zip(dtypes, weak) if not w]
    if strong:
        result = strong[0]
        for d in strong[1:]:
            result = promote(result, d)
    else:
        # Only weak scalars: the highest kind, at its default width.
        kind = max((d.kind for d in dtypes), key=_KIND_ORDER.__getitem__)
        return DEFAULT_FOR_KIND[kind]
    for d, w in zip(dtypes, weak):
        if w and _KIND_ORDER[d.kind] > _KIND_ORDER[result.kind]:
            # A weak complex keeps a float array's precision (float32 + 1j is complex64).
            result = result.complex_dtype if d.is_complex and result.is_float else DEFAULT_FOR_KIND[d.kind]
    return result


def default_float(d: DType) -> DType:
    """The float dtype NumPy computes transcendental functions of ``d`` in: the smallest
    float that holds every value of ``d`` (int8 and uint8 in float16, int16 in float32)."""
    if d.is_inexact:
        return d
    return dtype(np.result_type(d.np, np.float16))
