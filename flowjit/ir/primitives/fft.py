"""The discrete Fourier transform: one opaque primitive with XLA's (and JAX's) semantics.

``fft(x, fft_type, fft_lengths)`` transforms the trailing ``len(fft_lengths)`` axes of ``x``:

- ``"fft"``: complex -> complex, unnormalized forward transform (``np.fft.fftn``);
- ``"ifft"``: complex -> complex, inverse transform scaled by ``1/N`` (``np.fft.ifftn``);
- ``"rfft"``: real -> complex of the same precision, the last axis halved to ``n//2 + 1``;
- ``"irfft"``: complex -> real of the same precision, scaled by ``1/N``: the last axis of the
  input holds ``n//2 + 1`` terms of a Hermitian spectrum and the result has ``n`` samples.

``N`` is the product of ``fft_lengths``. The input's trailing axes must already have the
lengths the transform expects (the array API's functions in ``flowjit.tracer.fft`` pad,
trim, move axes and normalize around this op). The reference is NumPy's pocketfft, which
keeps the precision (complex64 stays complex64, rfft of float32 is complex64). The VJP rules
are JAX's transpose rules (jax/_src/lax/fft.py; the line numbers cited below are of jax-ml/jax
at cec06d1), which follow JAX's complex convention.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from flowjit.ir.dtypes import complex64, complex128, float32, float64
from flowjit.ir.errors import ShapeError
from flowjit.ir.registry import Literal, attr, declare, defvjp
from flowjit.ir.types import TensorType

FFT_TYPES = ("fft", "ifft", "rfft", "irfft")


def _fft_rule(in_types: Sequence[TensorType], *, fft_type: str, fft_lengths: tuple[int, ...]) -> TensorType:
    x = in_types[0]
    lengths = tuple(fft_lengths)
    if fft_type not in FFT_TYPES:
        raise ShapeError(f"fft_type {fft_type!r} must be one of {', '.join(FFT_TYPES)}")
    if not lengths:
        raise ShapeError("fft_lengths must name at least one axis")
    if any(n < 1 for n in lengths):
        raise ShapeError(f"fft_lengths {lengths} must be positive")
    k = len(lengths)
    if k > x.ndim:
        raise ShapeError(f"{x} has fewer axes than fft_lengths {lengths}")
    tail = x.shape[-k:]
    lead = x.shape[:-k]
    if fft_type == "rfft":
        if x.dtype.is_complex:
            raise ShapeError(f"rfft takes a real input (float32, float64), got {x}")
        if tail != lengths:
            raise ShapeError(f"the trailing axes of {x} must be fft_lengths {lengths}")
        return TensorType(lead + lengths[:-1] + (lengths[-1] // 2 + 1,), x.dtype.complex_dtype)
    if not x.dtype.is_complex:
        raise ShapeError(f"{fft_type} takes a complex input (complex64, complex128), got {x}")
    if fft_type == "irfft":
        want = lengths[:-1] + (lengths[-1] // 2 + 1,)
        if tail != want:
            raise ShapeError(f"the trailing axes of {x} must be {want} (fft_lengths {lengths}, the last "
                             "one's n//2 + 1 Hermitian terms)")
        return TensorType(lead + lengths, x.dtype.real_dtype)
    if tail != lengths:
        raise ShapeError(f"the trailing axes of {x} must be fft_lengths {lengths}")
    return x


def _fft_impl(x: np.ndarray, *, fft_type: str, fft_lengths: tuple[int, ...]) -> np.ndarray:
    k = len(fft_lengths)
    axes = tuple(range(x.ndim - k, x.ndim))
    out_type = _fft_rule([TensorType(x.shape, x.dtype)], fft_type=fft_type, fft_lengths=fft_lengths)
    if x.size == 0:  # pocketfft refuses an empty batch
        return np.zeros(out_type.shape, out_type.dtype.np)
    if fft_type == "fft":
        out = np.fft.fftn(x, axes=axes)
    elif fft_type == "ifft":
        out = np.fft.ifftn(x, axes=axes)
    elif fft_type == "rfft":
        out = np.fft.rfftn(x, axes=axes)
    else:
        out = np.fft.irfftn(x, s=fft_lengths, axes=axes)
    return out.astype(out_type.dtype.np, copy=False)


declare("fft", kind="opaque", maps_leading_dims=True, rule=_fft_rule, impl=_fft_impl,
        dtypes=(float32, float64, complex64, complex128),
        attrs={"fft_type": attr("str"), "fft_lengths": attr("ints")},
        doc="the DFT of the trailing len(fft_lengths) axes, as XLA's Fft: fft (complex, unnormalized), ifft "
            "(complex, 1/N), rfft (real -> complex, last axis n//2 + 1), irfft (complex -> real, 1/N); "
            "NumPy's pocketfft, in the input's precision")


# ---- VJP rules: JAX's transposes (jax/_src/lax/fft.py, the fft_p rules) ------------------------
def _hermitian_mask(e, like, n: int):
    """[m] weights of the rfft half-spectrum along the last axis (m = n//2 + 1): 1 for the DC
    term and, for even n, the Nyquist term, 2 for the others, whose conjugate twins the half
    spectrum leaves out (jax/_src/lax/fft.py:190-197 and :214-221)."""
    m = n // 2 + 1
    mask = np.full(m, 2.0)
    mask[0] = 1.0
    if n % 2 == 0:
        mask[-1] = 1.0
    return e.builder.op("constant", value=Literal(mask.astype(like.type.dtype.np)))


def _fft_vjp(e, g, y, x, *, fft_type, fft_lengths):
    lengths = tuple(fft_lengths)
    if fft_type in ("fft", "ifft"):
        # Both DFT matrices are symmetric: each is its own transpose (jax/_src/lax/fft.py:235-236).
        return [e.fft(g, fft_type=fft_type, fft_lengths=lengths)]
    n_total = math.prod(lengths)
    mask = _hermitian_mask(e, g if fft_type == "rfft" else x, lengths[-1])  # complex either way
    if fft_type == "rfft":
        # N * irfft(conj(g) / mask) (jax/_src/lax/fft.py:183-204): irfft's 1/N undone, and the
        # doubled terms of irfft's Hermitian extension halved.
        back = e.fft(e.div(e.conj(g), mask), fft_type="irfft", fft_lengths=lengths)
        return [e.mul(back, e.const(n_total, back))]
    # irfft: conj(mask * rfft(g) / N) (jax/_src/lax/fft.py:206-228); the conj is JAX's
    # convention for complex cotangents.
    spec = e.fft(g, fft_type="rfft", fft_lengths=lengths)
    scaled = e.mul(spec, e.mul(mask, e.const(1.0 / n_total, mask)))
    return [e.conj(scaled)]


defvjp("fft", _fft_vjp)
