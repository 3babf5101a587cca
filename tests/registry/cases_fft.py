"""Cases for the ``fft`` primitive (flowjit/ir/primitives/fft.py).

The expectations are the DFT written out as matrix products in complex128 (not pocketfft,
which is the reference's own routine, nor the decomposition into products that the
compiled program runs), over the trailing ``len(fft_lengths)`` axes: odd and
even lengths, one and two transformed axes, a batch axis, each fft_type in complex64 /
float32 and complex128 / float64. An irfft expectation builds the full Hermitian spectrum from
the half it is given (after the leading axes' inverse), so a reference that read the DC or
Nyquist imaginary part would fail.
"""

from __future__ import annotations

import numpy as np

from tests.registry.case import Case


def _dft(x: np.ndarray, axis: int, inverse: bool) -> np.ndarray:
    n = x.shape[axis]
    k = np.arange(n)
    w = np.exp((2j if inverse else -2j) * np.pi * np.outer(k, k) / n) / (n if inverse else 1)
    return np.moveaxis(np.tensordot(np.moveaxis(x.astype(np.complex128), axis, -1), w, axes=([-1], [0])), -1, axis)


def _fft(k: int, inverse: bool):
    def expect(x):
        for a in range(x.ndim - k, x.ndim):
            x = _dft(x, a, inverse)
        return x
    return expect


def _rfft(k: int):
    def expect(x):
        full = _fft(k, False)(x)
        return full[..., : x.shape[-1] // 2 + 1]
    return expect


def _irfft(lengths: tuple[int, ...]):
    def expect(x):
        # The inverse over the leading transformed axes, then the last axis' Hermitian
        # extension (X[n - j] = conj(X[j])) inverted, as XLA's and NumPy's irfftn.
        n = lengths[-1]
        half = x.astype(np.complex128)
        for a in range(x.ndim - len(lengths), x.ndim - 1):
            half = _dft(half, a, True)
        full = np.empty(half.shape[:-1] + (n,), np.complex128)
        for j in range(n):
            full[..., j] = half[..., j] if j < half.shape[-1] else np.conj(half[..., n - j])
        return np.real(_dft(full, x.ndim - 1, True))
    return expect


def _case(fft_type: str, shape, d: str, lengths: tuple[int, ...], expect) -> Case:
    tag = "x".join(map(str, shape))
    return Case("fft", [(shape, d)], {"fft_type": fft_type, "fft_lengths": lengths}, expect=expect,
                id=f"fft-{fft_type}-{d}-{tag}-{'x'.join(map(str, lengths))}")


CASES: list[Case] = [
    _case("fft", (3, 8), "c64", (8,), _fft(1, False)),
    _case("fft", (5,), "c128", (5,), _fft(1, False)),
    _case("fft", (2, 3, 5), "c128", (3, 5), _fft(2, False)),
    _case("ifft", (4, 6), "c128", (6,), _fft(1, True)),
    _case("ifft", (2, 4, 3), "c64", (4, 3), _fft(2, True)),
    _case("rfft", (3, 8), "f32", (8,), _rfft(1)),
    _case("rfft", (2, 7), "f64", (7,), _rfft(1)),
    _case("rfft", (3, 4, 5), "f64", (4, 5), _rfft(2)),
    _case("irfft", (3, 5), "c64", (8,), _irfft((8,))),
    _case("irfft", (2, 4), "c128", (7,), _irfft((7,))),
    _case("irfft", (2, 3, 3), "c128", (3, 4), _irfft((3, 4))),
    _case("irfft", (1,), "c128", (1,), _irfft((1,))),
    # Lengths the decomposition splits: radix levels (96 = 32 x 3, 1024 = 32 x 32), a prime
    # above the radix (37, 67: Bluestein's, through a power-of-two DFT), a mixed one (74).
    _case("fft", (2, 96), "c64", (96,), _fft(1, False)),
    _case("fft", (37,), "c128", (37,), _fft(1, False)),
    _case("ifft", (3, 74), "c64", (74,), _fft(1, True)),
    _case("rfft", (2, 1024), "f32", (1024,), _rfft(1)),
    _case("rfft", (3, 67), "f64", (67,), _rfft(1)),
    _case("irfft", (2, 3, 33), "c64", (3, 64), _irfft((3, 64))),
    _case("irfft", (2, 34), "c128", (67,), _irfft((67,))),
    # The FFT kernel's (flowjit/lowering/fourier.py: a power of two over at least 4 rows):
    # rows that fill no block of lanes (5, 6), fill one and spill (17), a multi-axis
    # transform whose last axis it runs, irffts (two precisions, 17 rows, one multi-axis).
    _case("fft", (5, 16), "c64", (16,), _fft(1, False)),
    _case("fft", (17, 8), "c128", (8,), _fft(1, False)),
    _case("ifft", (2, 3, 32), "c128", (32,), _fft(1, True)),
    _case("ifft", (4, 2), "c64", (2,), _fft(1, True)),
    _case("rfft", (4, 64), "f32", (64,), _rfft(1)),
    _case("rfft", (6, 4), "f64", (4,), _rfft(1)),
    _case("rfft", (2, 4, 16), "f32", (4, 16), _rfft(2)),
    _case("irfft", (4, 33), "c64", (64,), _irfft((64,))),
    _case("irfft", (17, 5), "c128", (8,), _irfft((8,))),
    _case("irfft", (2, 4, 9), "c64", (4, 16), _irfft((4, 16))),
]
