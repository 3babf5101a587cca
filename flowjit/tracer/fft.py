"""``fj.fft``: the array API standard's ``fft`` extension (2024.12) and NumPy's ``numpy.fft``,
traced, compiled and differentiated.

Every transform is a composite on one opaque primitive, ``fft(x, fft_type, fft_lengths)``
(flowjit/ir/primitives/fft.py: XLA's semantics, NumPy's pocketfft as the reference, JAX's
gradients): the input is trimmed or zero-padded to the transform's length along each axis,
those axes are moved to the end, the primitive transforms them, the axes move back, and the
result is scaled for ``norm``. ``hfft``/``ihfft`` are ``irfft``/``rfft`` of the conjugate with
the normalization direction swapped, as NumPy's; ``fftshift``/``ifftshift`` are rolls.

Dtypes: the complex transforms take complex input as the standard asks and, as NumPy,
real input too (float32 -> complex64, float64 -> complex128, ints and bool -> complex128); the
precision is kept (complex64 in, complex64 out). ``rfft``, ``rfftn`` and ``ihfft`` take real
input only. ``n``, ``s``, ``axis`` and ``axes`` must be static (the result's shape depends on
them); ``norm`` is ``"backward"`` (the default; ``None`` is NumPy's spelling of it),
``"ortho"`` or ``"forward"``. Each function is what ``np.fft.<name>`` traces as.
"""

from __future__ import annotations

import builtins
import math
import operator
from collections.abc import Sequence
from typing import Any

import numpy as np

from flowjit.ir.dtypes import DType, complex128, float16, float32, float64
from flowjit.ir.dtypes import dtype as as_dtype
from flowjit.ir.errors import AxisError, FlowjitTypeError, ShapeError
from flowjit.tracer.core import Operand, Tracer, bind, user_location
from flowjit.tracer.numpy import conversion, indexing, layout, manipulation, ufuncs
from flowjit.tracer.numpy.counterparts import numpy_counterpart
from flowjit.tracer.numpy.manipulation import roll
from flowjit.tracer.numpy.operands import ArrayLike, as_operand, cast, on_device, operand_value

__all__: list[str] = [
    "fft", "ifft", "fftn", "ifftn", "rfft", "irfft", "rfftn", "irfftn", "hfft", "ihfft", "fftfreq", "rfftfreq",
    "fftshift", "ifftshift", "fft2", "ifft2", "rfft2", "irfft2",
]

NORMS = ("backward", "ortho", "forward")
_SWAPPED = {"backward": "forward", "ortho": "ortho", "forward": "backward"}


def _fail(fn: str, message: str, exc: type[Exception] = FlowjitTypeError) -> Exception:
    """The error for a bad argument of ``fft.<fn>``: it names the function and the user's line."""
    return exc(f"fft.{fn}: {message} (at {user_location()})")


def _norm(fn: str, norm: Any) -> str:
    if norm is None:
        return "backward"
    if not isinstance(norm, str) or norm not in NORMS:
        raise _fail(fn, f"norm={norm!r} is not a normalization mode; allowed: 'backward' (the default), "
                        "'ortho', 'forward'", ShapeError)
    return norm


def _static_int(fn: str, name: str, v: Any) -> int:
    if isinstance(v, Tracer):
        raise _fail(fn, f"{name} must be a static Python int (the result's shape depends on it), got traced {v.aval}")
    if isinstance(v, (bool, np.bool_)):
        raise _fail(fn, f"{name} must be an integer, got {v!r}")
    try:
        return operator.index(v)
    except TypeError:
        raise _fail(fn, f"{name} must be an integer, got {v!r}") from None


def _length(fn: str, name: str, v: Any) -> int:
    n = _static_int(fn, name, v)
    if n < 1:
        raise _fail(fn, f"{name}={n} is not a number of points; allowed: an int >= 1", ShapeError)
    return n


def _axis(fn: str, name: str, a: Any, ndim: int) -> int:
    a = _static_int(fn, name, a)
    if not -ndim <= a < ndim:
        allowed = f"{-ndim} to {ndim - 1}" if ndim else "none (x is 0-d)"
        raise _fail(fn, f"{name}={a} is out of range for an array of rank {ndim}; allowed: {allowed}", AxisError)
    return a % ndim


def _axes(fn: str, s: Any, axes: Any, ndim: int) -> tuple[int, ...]:
    """The axes an n-dimensional transform runs over: ``axes``, else the last ``len(s)`` (NumPy's
    reading where the standard asks for axes with s), else all of them."""
    if axes is None:
        count = ndim if s is None else len(s)
        if count > ndim:
            raise _fail(fn, f"s={tuple(s)} has more entries than x has axes ({ndim}); pass axes=", ShapeError)
        return tuple(range(ndim - count, ndim))
    if isinstance(axes, (int, np.integer)) or isinstance(axes, Tracer):
        raise _fail(fn, f"axes={axes!r} must be a sequence of ints (axis= is the 1-D functions' argument)")
    out = tuple(_axis(fn, "axes", a, ndim) for a in axes)
    if len(set(out)) != len(out):
        raise _fail(fn, f"axes={tuple(axes)} repeats an axis; allowed: distinct axes (the standard leaves a repeated "
                        "axis unspecified)", ShapeError)
    return out


def _sizes(fn: str, s: Any, axes: tuple[int, ...], shape: tuple[int, ...], last: int | None = None) -> tuple[int, ...]:
    """The transform length along each of ``axes``: ``s`` (-1: the default), else the input's
    length; ``last`` is the default of the last axis where it differs (irfftn: 2 * (m - 1))."""
    defaults = [shape[a] for a in axes]
    if last is not None and defaults:
        defaults[-1] = last
    if s is None:
        sizes = defaults
    else:
        if isinstance(s, Tracer) or not isinstance(s, Sequence):
            raise _fail(fn, f"s={s!r} must be a sequence of ints")
        if len(s) != len(axes):
            raise _fail(fn, f"s={tuple(s)} and axes={axes} must have one entry each", ShapeError)
        sizes = [d if _static_int(fn, "s", v) == -1 else v for v, d in zip(s, defaults)]
    return tuple(_length(fn, "s" if s is not None else "the default s", v) for v in sizes)


def _resize(v: Any, axis: int, n: int) -> Any:
    """``v`` trimmed or zero-padded to length ``n`` along ``axis``."""
    m = layout.shape(v)[axis]
    if n < m:
        idx = [builtins.slice(None)] * layout.ndim(v)
        idx[axis] = builtins.slice(0, n)
        return indexing.getitem(v, tuple(idx))
    if n > m:
        width = [(0, 0)] * layout.ndim(v)
        width[axis] = (0, n - m)
        return manipulation.pad(v, width)
    return v


def _complex_input(fn: str, x: ArrayLike) -> tuple[Operand, DType]:
    """x as a complex array, and the dtype it came in (NumPy casts real input to the complex
    dtype of its precision, ints and bool to complex128)."""
    o = as_operand(x, "x")
    d = o.dtype
    if d.is_complex:
        return o, d
    return cast(o, d.complex_dtype if d.is_float else complex128), d


def _real_input(fn: str, x: ArrayLike) -> Operand:
    """x as a float32/float64 array (float16 computes in float32, ints and bool in float64), or
    an error for complex input."""
    o = as_operand(x, "x")
    d = o.dtype
    if d.is_complex:
        raise _fail(fn, f"x has dtype {d.name}; allowed: a real-valued floating-point array (float32, float64; "
                        "ints and bool compute in float64). Take fj.real(x), or use fft.fft")
    return cast(o, float32 if d == float16 else d if d.is_float else float64)


def _transform(fn: str, o: Operand, fft_type: str, axes: tuple[int, ...], lengths: tuple[int, ...],
               norm: str) -> Any:
    """The primitive over ``axes`` of ``o`` with logical ``lengths``, normalized for ``norm``."""
    v = operand_value(o)
    ins = lengths[:-1] + (lengths[-1] // 2 + 1,) if fft_type == "irfft" else lengths
    for a, n in zip(axes, ins):
        v = _resize(v, a, n)
    nd = layout.ndim(v)
    perm = [i for i in range(nd) if i not in axes] + list(axes)
    v = layout.transpose(v, perm)
    try:
        v = bind("fft", [as_operand(v)], {"fft_type": fft_type, "fft_lengths": lengths})
    except ShapeError as e:
        raise ShapeError(e.reason, op=f"fft.{fn}", loc=user_location()) from None
    v = layout.transpose(v, list(np.argsort(perm)))
    total = math.prod(lengths)
    inverse = fft_type in ("ifft", "irfft")  # the primitive already divides these by N
    scale = {"backward": 1.0, "ortho": math.sqrt(total) if inverse else 1 / math.sqrt(total),
             "forward": float(total) if inverse else 1.0 / total}[norm]
    return v if scale == 1.0 else ufuncs.multiply(v, scale)


def _real_output(v: Any, came_in: DType) -> Any:
    # NumPy's irfft and hfft of a float16 array are float16 (computed in complex64).
    return conversion.astype(v, float16) if came_in == float16 else v


# ---- one-dimensional -----------------------------------------------------------------------------


def _along(fn: str, fft_type: str, o: Operand, n: Any, axis: Any, norm: str) -> Any:
    """The primitive along one ``axis`` of ``o``, with ``n`` points (default: the axis' length,
    or ``2 * (m - 1)`` for m half-spectrum terms when the result is real)."""
    a = _axis(fn, "axis", axis, len(o.shape))
    if n is None:
        m = o.shape[a]
        n = _length(fn, "n (2 * (m - 1) for m terms along axis)" if fft_type == "irfft"
                    else "n (x's length along axis)", 2 * (m - 1) if fft_type == "irfft" else m)
    else:
        n = _length(fn, "n", n)
    return _transform(fn, o, fft_type, (a,), (n,), norm)


def fft(x: ArrayLike, n: int | None = None, axis: int = -1, norm: str | None = "backward") -> Any:
    """The one-dimensional DFT along ``axis``, of ``n`` points (x trimmed or zero-padded to n),
    unnormalized unless ``norm`` says otherwise (``np.fft.fft``; the array API's ``fft``)."""
    norm = _norm("fft", norm)
    return _along("fft", "fft", _complex_input("fft", x)[0], n, axis, norm)


def ifft(x: ArrayLike, n: int | None = None, axis: int = -1, norm: str | None = "backward") -> Any:
    """The one-dimensional inverse DFT along ``axis`` (scaled by 1/n with the default
    ``norm="backward"``), as ``np.fft.ifft``."""
    norm = _norm("ifft", norm)
    return _along("ifft", "ifft", _complex_input("ifft", x)[0], n, axis, norm)


def rfft(x: ArrayLike, n: int | None = None, axis: int = -1, norm: str | None = "backward") -> Any:
    """The DFT of real ``x`` along ``axis``: the ``n//2 + 1`` non-negative frequency terms, in
    the complex dtype of x's precision (``np.fft.rfft``)."""
    norm = _norm("rfft", norm)
    return _along("rfft", "rfft", _real_input("rfft", x), n, axis, norm)


def irfft(x: ArrayLike, n: int | None = None, axis: int = -1, norm: str | None = "backward") -> Any:
    """The inverse of ``rfft``: ``n`` real samples (default ``2 * (m - 1)`` for m input terms)
    from the half spectrum along ``axis``, trimmed or zero-padded to ``n//2 + 1`` terms; the
    imaginary parts of the DC (and, for even n, Nyquist) terms are ignored (``np.fft.irfft``)."""
    norm = _norm("irfft", norm)
    o, came_in = _complex_input("irfft", x)
    return _real_output(_along("irfft", "irfft", o, n, axis, norm), came_in)


def hfft(x: ArrayLike, n: int | None = None, axis: int = -1, norm: str | None = "backward") -> Any:
    """The DFT of a signal with Hermitian symmetry given by its first half ``x``: ``n`` real
    values (default ``2 * (m - 1)``), as ``np.fft.hfft`` (``irfft(conj(x))`` with the
    normalization direction swapped)."""
    norm = _norm("hfft", norm)
    o, came_in = _complex_input("hfft", x)
    conj = as_operand(ufuncs.conj(operand_value(o)))
    return _real_output(_along("hfft", "irfft", conj, n, axis, _SWAPPED[norm]), came_in)


def ihfft(x: ArrayLike, n: int | None = None, axis: int = -1, norm: str | None = "backward") -> Any:
    """The inverse of ``hfft`` for real ``x``: the ``n//2 + 1`` terms of its Hermitian spectrum
    (``conj(rfft(x))`` scaled by 1/n by default), as ``np.fft.ihfft``."""
    norm = _norm("ihfft", norm)
    return ufuncs.conj(_along("ihfft", "rfft", _real_input("ihfft", x), n, axis, _SWAPPED[norm]))


# ---- n-dimensional -------------------------------------------------------------------------------


def _complex_n(fn: str, fft_type: str, x: ArrayLike, s: Any, axes: Any, norm: Any) -> Any:
    norm = _norm(fn, norm)
    o, _ = _complex_input(fn, x)
    ax = _axes(fn, s, axes, len(o.shape))
    if not ax:  # nothing to transform: x itself, as NumPy's (in the complex dtype)
        return conversion.astype(operand_value(o), o.dtype)
    return _transform(fn, o, fft_type, ax, _sizes(fn, s, ax, o.shape), norm)


def fftn(x: ArrayLike, s: Sequence[int] | None = None, axes: Sequence[int] | None = None,
         norm: str | None = "backward") -> Any:
    """The n-dimensional DFT over ``axes`` (all by default; the last ``len(s)`` when only ``s``
    is given, as NumPy), each axis trimmed or zero-padded to its entry of ``s`` (-1: as is)."""
    return _complex_n("fftn", "fft", x, s, axes, norm)


def ifftn(x: ArrayLike, s: Sequence[int] | None = None, axes: Sequence[int] | None = None,
          norm: str | None = "backward") -> Any:
    """The n-dimensional inverse DFT over ``axes`` (scaled by 1/prod(s) by default), as
    ``np.fft.ifftn``."""
    return _complex_n("ifftn", "ifft", x, s, axes, norm)


def _nonempty(fn: str, ax: tuple[int, ...]) -> tuple[int, ...]:
    if not ax:
        raise _fail(fn, "axes=() names no axis; allowed: at least one axis", ShapeError)
    return ax


def rfftn(x: ArrayLike, s: Sequence[int] | None = None, axes: Sequence[int] | None = None,
          norm: str | None = "backward") -> Any:
    """The n-dimensional DFT of real ``x`` over ``axes``: the last axis keeps its ``s[-1]//2 + 1``
    non-negative frequency terms, the others are full (``np.fft.rfftn``)."""
    norm = _norm("rfftn", norm)
    o = _real_input("rfftn", x)
    ax = _nonempty("rfftn", _axes("rfftn", s, axes, len(o.shape)))
    return _transform("rfftn", o, "rfft", ax, _sizes("rfftn", s, ax, o.shape), norm)


def irfftn(x: ArrayLike, s: Sequence[int] | None = None, axes: Sequence[int] | None = None,
           norm: str | None = "backward") -> Any:
    """The inverse of ``rfftn``: a real array whose transformed axes have lengths ``s`` (by
    default the input's, the last one ``2 * (m - 1)``), as ``np.fft.irfftn``."""
    norm = _norm("irfftn", norm)
    o, came_in = _complex_input("irfftn", x)
    ax = _nonempty("irfftn", _axes("irfftn", s, axes, len(o.shape)))
    sizes = _sizes("irfftn", s, ax, o.shape, last=2 * (o.shape[ax[-1]] - 1))
    return _real_output(_transform("irfftn", o, "irfft", ax, sizes, norm), came_in)


# ---- frequencies and shifts ----------------------------------------------------------------------


def _frequencies(fn: str, k: np.ndarray, n: int, d: Any, dtype: Any, device: Any) -> Any:
    out_dtype = float64 if dtype is None else as_dtype(dtype)
    if not out_dtype.is_float:
        raise _fail(fn, f"dtype={out_dtype.name} is not allowed; allowed: a real floating-point dtype (float32, "
                        "float64, float16), or None for float64")
    with on_device(device):
        # NumPy's arithmetic: integer frequencies times 1 / (n * d), in float64.
        val = ufuncs.divide(1.0, ufuncs.multiply(float(n), d))
        return conversion.astype(ufuncs.multiply(conversion.asarray(k.astype(np.float64)), val), out_dtype)


def fftfreq(n: int, d: float = 1.0, *, dtype: Any = None, device: Any = None) -> Any:
    """The sample frequencies of an ``n``-point DFT with sample spacing ``d``:
    ``[0, 1, ..., -(n//2), ..., -1] / (d * n)``, float64 unless ``dtype`` (``np.fft.fftfreq``)."""
    n = _length("fftfreq", "n", n)
    half = (n - 1) // 2 + 1
    k = np.concatenate([np.arange(0, half), np.arange(-(n // 2), 0)])
    return _frequencies("fftfreq", k, n, d, dtype, device)


def rfftfreq(n: int, d: float = 1.0, *, dtype: Any = None, device: Any = None) -> Any:
    """The ``n//2 + 1`` non-negative sample frequencies of ``rfft`` (the Nyquist term counted
    positive), as ``np.fft.rfftfreq``."""
    n = _length("rfftfreq", "n", n)
    return _frequencies("rfftfreq", np.arange(0, n // 2 + 1), n, d, dtype, device)


def _shift(fn: str, x: ArrayLike, axes: Any, sign: int) -> Any:
    v = operand_value(as_operand(x, "x"))
    nd = layout.ndim(v)
    if axes is None:
        ax = tuple(range(nd))
    elif isinstance(axes, (int, np.integer)):
        ax = (_axis(fn, "axes", axes, nd),)
    else:
        ax = tuple(_axis(fn, "axes", a, nd) for a in axes)
    if not ax:
        return v
    shape = layout.shape(v)
    return roll(v, [sign * (shape[a] // 2) for a in ax], list(ax))


def fftshift(x: ArrayLike, axes: int | Sequence[int] | None = None) -> Any:
    """``x`` with the zero-frequency term moved to the centre of each of ``axes`` (all by
    default): a roll by half of each axis, as ``np.fft.fftshift``."""
    return _shift("fftshift", x, axes, 1)


def ifftshift(x: ArrayLike, axes: int | Sequence[int] | None = None) -> Any:
    """The inverse of ``fftshift`` (they differ for odd lengths), as ``np.fft.ifftshift``."""
    return _shift("ifftshift", x, axes, -1)


# NumPy's two-dimensional spellings: the n-dimensional transforms over the last two axes.
def fft2(x: ArrayLike, s: Sequence[int] | None = None, axes: Sequence[int] = (-2, -1),
         norm: str | None = "backward") -> Any:
    """The 2-D DFT over ``axes`` (the last two), as ``np.fft.fft2``."""
    return fftn(x, s, axes, norm)


def ifft2(x: ArrayLike, s: Sequence[int] | None = None, axes: Sequence[int] = (-2, -1),
          norm: str | None = "backward") -> Any:
    """The 2-D inverse DFT over ``axes`` (the last two), as ``np.fft.ifft2``."""
    return ifftn(x, s, axes, norm)


def rfft2(x: ArrayLike, s: Sequence[int] | None = None, axes: Sequence[int] = (-2, -1),
          norm: str | None = "backward") -> Any:
    """The 2-D DFT of real ``x`` over ``axes`` (the last two), as ``np.fft.rfft2``."""
    return rfftn(x, s, axes, norm)


def irfft2(x: ArrayLike, s: Sequence[int] | None = None, axes: Sequence[int] = (-2, -1),
           norm: str | None = "backward") -> Any:
    """The inverse of ``rfft2``, as ``np.fft.irfft2``."""
    return irfftn(x, s, axes, norm)


for _name in __all__:
    numpy_counterpart(globals()[_name], f"fft.{_name}")
del _name
