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
from flowjit.ir.registry import Literal, attr, declare, defdecompose, defvjp
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


declare("fft", kind="opaque", role="fourier_transform", maps_leading_dims=True, rule=_fft_rule, impl=_fft_impl,
        dtypes=(float32, float64, complex64, complex128),
        attrs={"fft_type": attr("str"), "fft_lengths": attr("ints")},
        doc="the DFT of the trailing len(fft_lengths) axes, as XLA's Fft: fft (complex, unnormalized), ifft "
            "(complex, 1/N), rfft (real -> complex, last axis n//2 + 1), irfft (complex -> real, 1/N); "
            "NumPy's pocketfft, in the input's precision")


def _constant(e, value: np.ndarray):
    """A constant op holding ``value`` (its dtype and shape)."""
    return e.builder.op("constant", value=Literal(value))


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
    return _constant(e, mask.astype(like.type.dtype.np))


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


# ---- decomposition: the DFT as products of small DFT matrices --------------------------------
# Every code generator has complex GEMMs and fused elementwise and layout kernels, so the
# transform is written in those (as XLA does on TPUs): one program stays native and compiles
# ahead of time. A length n = r * m is Cooley-Tukey's step on rows: with the transformed axis
# first and every other axis flattened into columns, x viewed as [r, m * C] is multiplied by
# the r x r DFT matrix (one GEMM: its k1 rows), twiddled by w^(k1 j2), and the [r, m, C] array
# swapped to [m, r * C], whose length-m DFT over rows (the same step again) leaves output
# k1 + r * k2 at row k2, column k1: the result's own row-major order, so no reordering
# pass. Radices are products of n's prime factors up to DFT_RADIX; a prime above it is
# Bluestein's: the chirp-weighted rows padded to a power of two, circularly convolved with the
# chirp through two such DFTs. Every constant (DFT matrices, twiddles, chirps) is computed in
# float64 from exact integer phases, then rounded to the operand's precision.
DFT_RADIX = 32
# The code generators' own FFT kernel (flowjit/lowering/fourier.py: Stockham's FFT on blocks
# of rows, stages of radix 3, 5, 7, 4 and 2) takes a transform of the last axis alone: a
# complex fft or ifft whose length is a product of powers of 2, 3, 5 and 7, or an rfft of
# twice one (its pairs' complex FFT, untangled) or the irfft back to it (tangled, then the
# inverse complex FFT), up to
# KERNEL_MAX_LENGTH complex points, over at least KERNEL_MIN_ROWS rows (it runs 8 or 16 rows at
# once: fewer leave most of each vector idle), and over at least KERNEL_FULL_ROWS rows for a
# length from FOUR_STEP_MIN_LENGTH: a transform with fewer rows than that, or longer than
# KERNEL_MAX_LENGTH, runs as two batches of shorter transforms the kernel takes
# (``_four_step``). Measured on the Zen 5 machine (2026-12-01): fft of c64[4, 4096] 0.14 ms
# in the kernel, its four steps 0.04.
KERNEL_MAX_LENGTH = 1 << 14
KERNEL_MIN_ROWS = 4
# A length of the form 2^a 3^b 5^c 7^d that is not a power of two runs in the kernel too
# (its odd radices' stages), but over fewer rows than this one that splits at its power of
# two (``_splits_at_power``) splits there: the split has r times the rows, blocks for every
# thread (rfft of f32[32, 1536]: 0.052 ms split, 0.070-0.086 in the kernel's two blocks;
# f32[16, 768]: 0.013-0.016 against 0.033-0.039), where from 64 rows the kernel's one pass
# wins (f32[256, 768]: 0.15-0.19 -> 0.09-0.15; fft of c64[128, 1280]: 0.56-0.89 -> 0.19;
# Zen 5 machine, 2026-12-01).
KERNEL_MIXED_MIN_ROWS = 64
KERNEL_FULL_ROWS = 16
FOUR_STEP_MIN_LENGTH = 64
# A length that is not a power of two but has one of at least this many points as a factor
# (and an odd part of at most DFT_RADIX) runs its power of two in the kernel
# (``_mixed_split``); a prime above DFT_RADIX runs Bluestein's two power-of-two transforms
# there (``_bluestein_last``).
MIXED_MIN_POWER = 16
# ... whose odd part's DFT is sums of terms (one fused kernel) up to this many points, and a
# product by its DFT matrix above.
MIXED_SUM_RADIX = 7
# The four steps' transposes of complex elements run in scalar tiles, and the twiddles are a
# constant as large as the transform: past this many elements (2 MiB of complex64) the
# products were faster (fft of c64[1, 2^20]: 8.5 ms in four steps, 5.6 as products, JAX
# 7.7-8.3; c64[1, 2^18]: 1.20 against 1.57). That is one long row: over several rows the
# twiddles (n of them) are shared, and up to FOUR_STEP_MAX_LENGTH points the four steps won
# at every row count measured (Zen 5, 2026-12-02, ms as products -> four steps: c64[16, 2^16]
# 7.18 -> 5.64, [64, 2^16] 35.6 -> 24.3, [8, 2^17] 5.42 -> 4.62, [16, 2^17] 19.5 -> 14.1,
# [32, 2^15] 6.87 -> 6.60, [128, 2^15] 30.9 -> 25.2; at 2^18 points even, [4, 2^18] 6.99
# against 7.20, [8, 2^18] 16.0 against 15.8), the products' GEMMs of 32 terms a row running
# at a fifth of the memory's bandwidth.
FOUR_STEP_MAX_ELEMENTS = 1 << 18
FOUR_STEP_MAX_LENGTH = 1 << 17


def kernel_transform(t: TensorType, fft_type: str, fft_lengths: Sequence[int]) -> bool:
    """Whether an ``fft`` of ``t`` is the FFT kernel's (the decomposition then leaves the op
    to the lowering): a complex fft or ifft of the last axis alone, of a length from 2 to
    KERNEL_MAX_LENGTH whose prime factors are 2, 3, 5 and 7, or a real rfft of twice such a
    length or the irfft back to it, over at least KERNEL_MIN_ROWS rows (and the other
    thresholds above)."""
    if len(fft_lengths) != 1 or not t.ndim:
        return False
    rows = math.prod(t.shape[:-1])
    n = int(fft_lengths[0])
    if fft_type == "irfft":
        if not t.dtype.is_complex or n % 2 or t.shape[-1] != n // 2 + 1:
            return False
        n //= 2
    elif t.shape[-1] != n:
        return False
    elif fft_type == "rfft" and not t.dtype.is_complex and n % 2 == 0:
        n //= 2
    elif fft_type not in ("fft", "ifft") or not t.dtype.is_complex:
        return False
    # Fewer rows than a block's lanes leave lanes idle: a long transform of them is faster in
    # four steps of batches (``_four_step``).
    needed = KERNEL_MIN_ROWS if n < FOUR_STEP_MIN_LENGTH else KERNEL_FULL_ROWS
    if n & (n - 1) and rows < KERNEL_MIXED_MIN_ROWS and _splits_at_power(n):
        return False
    return 2 <= n <= KERNEL_MAX_LENGTH and _kernel_radices(n) and rows >= needed


def _splits_at_power(n: int) -> bool:
    """Whether an n-point transform splits at its power of two p (``_mixed_split``, the split
    in time): p at least MIXED_MIN_POWER and below n, the odd part at most DFT_RADIX."""
    p = n & -n
    return MIXED_MIN_POWER <= p < n and n // p <= DFT_RADIX


def _kernel_radices(n: int) -> bool:
    """Whether the FFT kernel's stages factor ``n``: a product of powers of 2, 3, 5 and 7."""
    for r in (2, 3, 5, 7):
        while n % r == 0:
            n //= r
    return n == 1


def _factors(n: int) -> list[int]:
    out, p = [], 2
    while p * p <= n:
        while n % p == 0:
            out.append(p)
            n //= p
        p += 1
    return out + ([n] if n > 1 else [])


def _radix(n: int) -> int:
    """The first radix of a length-n DFT: n's largest prime factor above DFT_RADIX alone
    (Bluestein's), else the largest product of its smallest prime factors up to DFT_RADIX."""
    primes = _factors(n)
    if primes[-1] > DFT_RADIX:
        return primes[-1]
    r = 1
    for p in primes:
        if r * p > DFT_RADIX:
            break
        r *= p
    return r


def _phases(numerators: np.ndarray, n: int, sign: int, dtype) -> np.ndarray:
    """exp(sign * 2 pi i * numerators / n), the integer numerators reduced mod n first, so the
    angle is exact however large the product that made them."""
    return np.exp(sign * 2j * np.pi * (numerators % n) / n).astype(dtype.np)


def _bluestein(n: int, sign: int, m: int = 0) -> tuple[int, np.ndarray, np.ndarray]:
    """Bluestein's constants for an n-point DFT: jk = (j^2 + k^2 - (k - j)^2) / 2, so X_k =
    c_k sum_j (x_j c_j) conj(c_(k-j)) with c_j = exp(sign pi i j^2 / n), a circular
    convolution over m >= 2n - 1 points (the least power of two unless given). Returns m, the
    chirp c and the transform of the convolution's kernel with the inverse's 1/m folded in
    (constants of the length, computed in float64)."""
    m = m or 1 << (2 * n - 2).bit_length()
    j = np.arange(n)
    chirp = np.exp(sign * 1j * np.pi * ((j * j) % (2 * n)) / n)
    kernel = np.zeros(m, np.complex128)
    kernel[:n] = np.conj(chirp)
    kernel[m - n + 1:] = np.conj(chirp[1:])[::-1]
    return m, chirp, np.fft.fft(kernel) / m


def _small_dft(e, z, sign: int):
    """The DFT of ``z``'s rows [r, C] (unnormalized, exp(sign 2 pi i jk / r)): one GEMM by the
    DFT matrix, or Bluestein's for a prime r above DFT_RADIX."""
    r = z.type.shape[0]
    d = z.type.dtype
    if r <= DFT_RADIX:
        k = np.arange(r)
        return e.matmul(_constant(e, _phases(np.outer(k, k), r, sign, d)), z)
    c = z.type.shape[1]
    m, chirp, spectrum = _bluestein(r, sign)
    weighted = e.mul(z, _constant(e, chirp.astype(d.np)[:, None]))
    padded = e.pad(weighted, low=(0, 0), high=(m - r, 0), value=0.0)
    conv = _dft_rows(e, e.mul(_dft_rows(e, padded, -1), _constant(e, spectrum.astype(d.np)[:, None])), 1)
    return e.mul(e.slice(conv, start=(0, 0), size=(r, c), step=(1, 1)), _constant(e, chirp.astype(d.np)[:, None]))


def _dft_rows(e, z, sign: int):
    """The unnormalized DFT (exp(sign 2 pi i jk / n)) of the rows of ``z`` [n, C]: the output
    row k holds term k of every column's transform."""
    n, c = z.type.shape
    if n == 1:
        return z
    r = _radix(n)
    m = n // r
    y = _small_dft(e, e.reshape(z, shape=(r, m * c)), sign)
    if m == 1:
        return y
    k1, j2 = np.arange(r)[:, None], np.arange(m)[None, :]
    y = e.mul(e.reshape(y, shape=(r, m, c)), _constant(e, _phases(k1 * j2, n, sign, z.type.dtype)[:, :, None]))
    y = e.reshape(e.transpose(y, perm=(1, 0, 2)), shape=(m, r * c))
    return e.reshape(_dft_rows(e, y, sign), shape=(n, c))


def _to_rows(e, z, axis: int):
    """``z`` with ``axis`` moved first and the other axes flattened into columns, [n, C] (the
    layout ``_dft_rows`` transforms), and the permutation that moved it."""
    shape = z.type.shape
    perm = (axis, *[a for a in range(len(shape)) if a != axis])
    moved = e.transpose(z, perm=perm) if axis else z
    return e.reshape(moved, shape=(shape[axis], math.prod(shape) // shape[axis])), perm


def _from_rows(e, rows, perm: tuple[int, ...], shape: tuple[int, ...]):
    """``rows`` [n', C] back in the layout of a ``z`` of ``shape`` that ``_to_rows`` moved
    with ``perm``, its axis ``perm[0]`` now n' long."""
    back = e.reshape(rows, shape=(rows.type.shape[0], *[shape[a] for a in perm[1:]]))
    return e.transpose(back, perm=tuple(int(i) for i in np.argsort(perm))) if perm[0] else back


def _four_step(e, z, sign: int):
    """The unnormalized DFT of ``z``'s last axis, n = n1 * n2 long, as two batches of shorter
    transforms (Bailey's four steps): X[k1 + n1 k2] = sum_j2 W_n2^(j2 k2) W_n^(j2 k1)
    sum_j1 x[j1 n2 + j2] W_n1^(j1 k1), with W_m = exp(sign 2 pi i / m). The rows [n1, n2]
    transposed, n2 transforms of n1, the twiddles W_n^(j2 k1), transposed back, n1 transforms of
    n2, transposed to [k2, k1]: batches of rows the FFT kernel fills its lanes with, where one
    long row would fill one lane of sixteen."""
    *lead, n = z.type.shape
    rank = z.type.ndim
    n1 = 1 << ((n.bit_length() - 1) // 2)
    n2 = n // n1
    swap = (*range(rank - 1), rank, rank - 1)
    t = e.transpose(e.reshape(z, shape=(*lead, n1, n2)), perm=swap)           # [.., j2, j1]
    y = _dft_axis(e, t, rank, sign)                                            # [.., j2, k1]
    y = e.mul(y, _constant(e, _phases(np.outer(np.arange(n2), np.arange(n1)), n, sign, z.type.dtype)))
    y = _dft_axis(e, e.transpose(y, perm=swap), rank, sign)                    # [.., k1, k2]
    return e.reshape(e.transpose(y, perm=swap), shape=(*lead, n))              # [.., k2, k1]


def _mixed_split(e, z, sign: int):
    """The unnormalized DFT of ``z``'s last axis, n = r * p long (p a power of two, r odd and
    at most DFT_RADIX): the four steps with n1 = r (``_frequency_rows``), and one transpose
    puts term k1 + r k2 in place."""
    *lead, n = z.type.shape
    rank = z.type.ndim
    p = n & -n
    y = _frequency_rows(e, e.reshape(z, shape=(*lead, n // p, p)), sign)      # [.., k1, k2]
    return e.reshape(e.transpose(y, perm=(*range(rank - 1), rank, rank - 1)), shape=(*lead, n))


def _frequency_rows(e, x, sign: int):
    """The unnormalized DFT of the n = r * p terms of ``x`` [.., r, p] (term j1 p + j2 at [j1,
    j2]) split in frequency, left in the order it comes out: term k1 + r k2 of the transform at
    [k1, k2]. The first transforms (r points, of every column) are one kernel of sums up to
    MIXED_SUM_RADIX points (a product by the r x r DFT matrix above), with the twiddles
    W_n^(j2 k1); the p-point transforms of the rows run in the FFT kernel (or its four steps)."""
    *lead, r, p = x.type.shape
    n = r * p
    rank = x.type.ndim - 1
    d = x.type.dtype
    k = np.arange(r)
    dft = _phases(np.outer(k, k), r, sign, d)
    if r <= MIXED_SUM_RADIX:
        # r sums of r terms, one kernel with the twiddles (a product per batch row of
        # [r, r] @ [r, p] ran at a fraction of the BLAS's rate: 0.10 of rfft(f32[256, 768])'s
        # 0.44 ms)
        rows = [_row(e, x, j) for j in range(r)]
        terms = []
        for k1 in range(r):
            acc = rows[0]
            for j1 in range(1, r):
                acc = e.add(acc, e.mul(rows[j1], e.const(complex(dft[k1, j1]), rows[j1])))
            terms.append(acc)
        y = e.concatenate(*terms, axis=rank - 1)
    else:
        y = e.matmul(_constant(e, dft), x)
    y = e.mul(y, _constant(e, _phases(np.outer(k, np.arange(p)), n, sign, d)))
    return _dft_axis(e, y, rank, sign)                                         # [.., k1, k2]


def _split_in_time(e, z, sign: int, scale: float = 1.0):
    """The unnormalized DFT of ``z``'s last axis (n = r * p, ``_mixed_split``'s lengths) times
    ``scale``, as [.., r, p] in order (term k1 p + k2 at [k1, k2]): the terms z[j1 + r j2]
    transposed to rows [.., j1, j2], then ``_time_rows``. A reader of the terms in order (a
    reshape) then needs no transpose of them."""
    return _time_rows(e, _in_time_order(e, z), sign, scale)


def _in_time_order(e, z):
    """``z``'s last axis (n = r * p, p its power of two) as rows [.., r, p] with term j1 + r j2
    at [j1, j2]: the order in which ``_time_rows`` takes the terms (one transpose)."""
    *lead, n = z.type.shape
    rank = z.type.ndim
    p = n & -n
    return e.transpose(e.reshape(z, shape=(*lead, p, n // p)), perm=(*range(rank - 1), rank, rank - 1))


def _time_rows(e, t, sign: int, scale: float = 1.0):
    """The unnormalized DFT times ``scale`` of n = r * p terms held as [.., r, p] with term
    j1 + r j2 at [j1, j2] (``_frequency_rows``'s order), split in time and in order: the
    rows' p-point transforms Y in the FFT kernel, then Z[k1, k2] = sum_j1 W_n^(j1 (k1 p + k2))
    Y[j1, k2] (term k1 p + k2) in one kernel, every row of Y read forward."""
    *lead, r, p = t.type.shape
    n = r * p
    rank = t.type.ndim - 1
    d = t.type.dtype
    y = _dft_axis(e, t, rank, sign)                                           # [.., j1, k2]
    k = np.arange(n).reshape(r, p)
    total = None
    for j1 in range(r):
        phase = scale * np.exp(sign * 2j * np.pi * ((j1 * k) % n) / n)
        term = e.mul(_row(e, y, j1), _constant(e, phase.astype(d.np)))
        total = term if total is None else e.add(total, term)
    return total


def _bluestein_length(n: int, lead: tuple[int, ...], dtype) -> int:
    """The padded length of an n-point Bluestein convolution along the last axis (at least
    2n - 1): the least power of two, or r * p (r = 3, 5 or 7, p a power of two of at least
    MIXED_MIN_POWER) where it is shorter and the FFT kernel takes the rows [.., r, p] as they
    are (``_bluestein_last`` then transforms without a transpose)."""
    least = 2 * n - 1
    best = 1 << (least - 1).bit_length()
    for r in range(3, MIXED_SUM_RADIX + 1, 2):
        p = 1 << max((-(-least // r) - 1).bit_length(), MIXED_MIN_POWER.bit_length() - 1)
        if r * p < best and kernel_transform(TensorType((*lead, r, p), dtype), "fft", (p,)):
            best = r * p
    return best


def _bluestein_last(e, z, sign: int):
    """The unnormalized DFT of ``z``'s last axis of prime length n (above DFT_RADIX) by
    Bluestein's convolution (``_bluestein``) along that axis, without moving the axis first:
    padded to ``_bluestein_length``. Padded to a power of two, its two transforms are the FFT
    kernel's (or its four steps); padded to r * p, the forward transform is split in
    frequency (``_frequency_rows``) and the inverse in time (``_time_rows``), the convolution's
    spectrum multiplied in the order the first leaves its terms and the second takes them:
    no transpose, and rows of p points whose blocks fit the cache (rfft of f32[32, 4099]: two
    transforms of c64[32, 16384] took 2.7 ms, the kernel's blocks of rows 2 MB)."""
    *lead, n = z.type.shape
    rank = z.type.ndim
    d = z.type.dtype
    m = _bluestein_length(n, tuple(lead), d)
    m, chirp, spectrum = _bluestein(n, sign, m)
    weighted = e.mul(z, _constant(e, chirp.astype(d.np)))
    padded = e.pad(weighted, low=(0,) * rank, high=(0,) * (rank - 1) + (m - n,), value=0.0)
    if m & (m - 1) == 0:
        conv = _dft_axis(e, e.mul(_dft_axis(e, padded, rank - 1, -1), _constant(e, spectrum.astype(d.np))),
                         rank - 1, 1)
        return e.mul(_last(e, conv, 0, n), _constant(e, chirp.astype(d.np)))
    p = m & -m
    r = m // p
    y = _frequency_rows(e, e.reshape(padded, shape=(*lead, r, p)), -1)          # term k1 + r k2 at [k1, k2]
    y = e.mul(y, _constant(e, spectrum.reshape(p, r).T.astype(d.np)))
    conv = _time_rows(e, y, 1)                                                  # term k1 p + k2 at [k1, k2]
    # the first n terms in order: row k1's terms joined along the last axis, each weighted
    pieces = []
    for k1 in range(-(-n // p)):
        size = min(p, n - k1 * p)
        pieces.append(e.mul(e.reshape(_row(e, conv, k1, 0, size), shape=(*lead, size)),
                            _constant(e, chirp[k1 * p:k1 * p + size].astype(d.np))))
    return pieces[0] if len(pieces) == 1 else e.concatenate(*pieces, axis=rank - 1)


def _last_axis_form(t: TensorType):
    """How ``_dft_axis`` transforms the last axis of complex ``t`` through the FFT kernel
    without moving it first: in four steps, split at its power of two, or by Bluestein's
    convolution (the function that does it); None: the kernel as it is, or products by DFT
    matrices in the rows layout."""
    n = t.shape[-1]
    if _four_steps_apply(t):
        return _four_step
    if n > DFT_RADIX:
        if _splits_at_power(n):
            return _mixed_split
        if n % 2 and _radix(n) == n:
            return _bluestein_last
    return None


def _four_steps_apply(t: TensorType) -> bool:
    """Whether ``_four_step`` runs the last axis of complex ``t``: a power of two of at least
    FOUR_STEP_MIN_LENGTH, at most FOUR_STEP_MAX_LENGTH long or in at most
    FOUR_STEP_MAX_ELEMENTS, that the FFT kernel does not take as it is (too few rows, or too
    long), whose two batches it takes."""
    n = t.shape[-1]
    large = math.prod(t.shape) > FOUR_STEP_MAX_ELEMENTS and n > FOUR_STEP_MAX_LENGTH
    if n < FOUR_STEP_MIN_LENGTH or n & (n - 1) or large or kernel_transform(t, "fft", (n,)):
        return False
    n1 = 1 << ((n.bit_length() - 1) // 2)
    lead = t.shape[:-1]
    return all(kernel_transform(TensorType((*lead, n // m, m), t.dtype), "fft", (m,)) for m in (n1, n // n1))


def _dft_axis(e, z, axis: int, sign: int):
    """The unnormalized DFT of complex ``z`` along ``axis``: the FFT kernel's where it takes
    the transform (a leading axis moved last for it and back), else the axis moved first and
    the others flattened into columns for ``_dft_rows``, then moved back."""
    n = z.type.shape[axis]
    if e.own_kernels and axis == z.type.ndim - 1 and kernel_transform(z.type, "fft", (n,)):
        if sign < 0:
            return e.fft(z, fft_type="fft", fft_lengths=(n,))
        # the kernel's inverse times n: unnormalized (n a power of two: both exact)
        y = e.fft(z, fft_type="ifft", fft_lengths=(n,))
        return e.mul(y, e.const(n, y))
    if e.own_kernels and axis == z.type.ndim - 1:
        how = _last_axis_form(z.type)
        if how is not None:
            return how(e, z, sign)
    last = z.type.ndim - 1
    if e.own_kernels and axis != last:
        perm = tuple(a for a in range(z.type.ndim) if a != axis) + (axis,)
        if kernel_transform(TensorType(tuple(z.type.shape[a] for a in perm), z.type.dtype), "fft", (n,)):
            back = tuple(int(i) for i in np.argsort(perm))
            return e.transpose(_dft_axis(e, e.transpose(z, perm=perm), last, sign), perm=back)
    rows, perm = _to_rows(e, z, axis)
    return _from_rows(e, _dft_rows(e, rows, sign), perm, z.type.shape)


def _row(e, x, j: int, start: int = 0, size: int = -1, step: int = 1):
    """Row ``j`` of ``x`` [.., r, p] (its second-last axis), terms ``start::step``, ``size``
    of them (all p by default), as [.., 1, size]."""
    *lead, _, p = x.type.shape
    return e.slice(x, start=(0,) * len(lead) + (j, start), size=(*lead, 1, p if size < 0 else size),
                   step=(1,) * (len(lead) + 1) + (step,))


def _rows(e, z, start: int, size: int, step: int = 1):
    """``z[start::step]`` of rows [n, C], ``size`` rows."""
    return e.slice(z, start=(start, 0), size=(size, z.type.shape[1]), step=(step, 1))


def _last(e, z, start: int, size: int, step: int = 1):
    """``z[..., start::step]``, ``size`` terms."""
    rank = z.type.ndim
    return e.slice(z, start=(0,) * (rank - 1) + (start,), size=z.type.shape[:-1] + (size,),
                   step=(1,) * (rank - 1) + (step,))


def _rfft_last(e, x):
    """The half spectrum (n//2 + 1 terms) of real ``x`` along its last axis. An even length
    is one complex DFT of half the length: z = x[0::2] + i x[1::2], whose transform Z gives
    X_k = Z_k (1 + w^k / i) / 2 + conj(Z_(h-k)) (1 - w^k / i) / 2 (h = n/2, w = exp(-2 pi i / n),
    Z's index mod h). An odd one is the complex DFT of x, halved."""
    n = x.type.shape[-1]
    rank = x.type.ndim
    d = x.type.dtype.complex_dtype
    if n % 2:
        if n > DFT_RADIX and math.prod(x.type.shape[:-1]) >= 2 and e.fixed_sizes:
            return _rfft_odd_pairs(e, x)
        return _last(e, _dft_axis(e, e.cast(x, dtype=d), rank - 1, -1), 0, n // 2 + 1)
    if e.own_kernels and kernel_transform(x.type, "rfft", (n,)):
        return e.fft(x, fft_type="rfft", fft_lengths=(n,))
    h = n // 2
    packed = e.complex(_last(e, x, 0, h, 2), _last(e, x, 1, h, 2))
    twiddle = np.exp(-2j * np.pi * np.arange(h + 1) / n) / 2j
    if e.own_kernels and _last_axis_form(packed.type) is _mixed_split:
        return _rfft_split(e, packed, twiddle)
    if e.own_kernels and _last_axis_form(packed.type) is not None:
        # The half-length transform through the kernel along the last axis (four steps, or
        # split at its power of two), untangled along that axis.
        z = _dft_axis(e, packed, rank - 1, -1)
        first = _last(e, z, 0, 1)
        at_k = e.concatenate(z, first, axis=rank - 1)
        mirrored = e.concatenate(first, *([_last(e, z, h - 1, h - 1, -1)] if h > 1 else []), first, axis=rank - 1)
        return e.add(e.mul(at_k, _constant(e, (0.5 + twiddle).astype(d.np))),
                     e.mul(e.conj(mirrored), _constant(e, (0.5 - twiddle).astype(d.np))))
    # Untangled in the transform's own [h, C] layout, before moving back: the mirrored row
    # h - k is then a row read forward, and the move back is one transpose of the result
    # (cache-sized tiles), not two strided reads of every term.
    rows, perm = _to_rows(e, packed, rank - 1)
    z = _dft_rows(e, rows, -1)
    first = _rows(e, z, 0, 1)
    at_k = e.concatenate(z, first, axis=0)
    mirrored = [first] + ([_rows(e, z, h - 1, h - 1, -1)] if h > 1 else []) + [first]
    at_h_minus_k = e.conj(e.concatenate(*mirrored, axis=0))
    untangled = e.add(e.mul(at_k, _constant(e, (0.5 + twiddle[:, None]).astype(d.np))),
                      e.mul(at_h_minus_k, _constant(e, (0.5 - twiddle[:, None]).astype(d.np))))
    return _from_rows(e, untangled, perm, x.type.shape[:-1] + (h + 1,))


def _rfft_odd_pairs(e, x):
    """The half spectra of the rows of real ``x`` [.., n], n odd, two rows in one complex
    transform: z = a + i b, whose DFT Z gives A_k = (Z_k + conj(Z_(n-k))) / 2 and
    B_k = (Z_k - conj(Z_(n-k))) / 2i (Z's index mod n). An odd length has no pairs of samples
    to pack (the even lengths' untangling), and a real row cast to complex spent half of its
    transform's work on zeros: rfft of f32[64, 4099] (Bluestein's) took 2.2-2.6 ms against JAX's
    0.83-1.25. Row j is paired with row half + j; an odd count of rows gets a zero row. Not
    over a symbolic batch (``Emitter.fixed_sizes``): half its rows is no line in it."""
    *lead, n = x.type.shape
    rows = math.prod(lead)
    h = n // 2
    flat = e.reshape(x, shape=(rows, n))
    if rows % 2:
        flat = e.concatenate(flat, _constant(e, np.zeros((1, n), x.type.dtype.np)), axis=0)
    half = (rows + 1) // 2
    # row j paired with row half + j: both halves contiguous, every index affine
    a, b = (_rows(e, flat, j * half, half) for j in (0, 1))
    z = _dft_axis(e, e.complex(a, b), 1, -1)                                  # [half, n]
    at_k = _last(e, z, 0, h + 1)
    mirrored = e.conj(e.concatenate(_last(e, z, 0, 1), _last(e, z, n - 1, h, -1), axis=1))
    first = e.mul(e.add(at_k, mirrored), e.const(0.5, at_k))
    second = e.mul(e.sub(at_k, mirrored), e.const(-0.5j, at_k))
    both = e.concatenate(first, second, axis=0)                               # [2 half, h + 1]
    if rows % 2:
        both = e.slice(both, start=(0, 0), size=(rows, h + 1), step=(1, 1))
    return e.reshape(both, shape=(*lead, h + 1))


def _rfft_split(e, z, twiddle: np.ndarray):
    """The untangled half spectrum of real pairs ``z`` (``_rfft_last``'s packing, h = r * p
    points, p a power of two, r odd) with its transform split at p in time: the pairs
    transposed to [.., r, p] (row j1 holds z[j1 + r j2]), the rows' p-point transforms Y in
    the FFT kernel, then in one kernel Z_k = sum_j1 W_h^(j1 k) Y[j1, k mod p] for k = k1 p + k2
    untangled with its mirror Z_(h-k), whose conjugate is sum_j1 W_h^(j1 k) conj(Y[j1, -k2 mod
    p]). Every term is written in order, r rows of p and the Nyquist term joined along the last
    axis: no transpose of the spectrum, no index divided by r (the split of ``_mixed_split``
    transposes its result, and an untangling kernel reading that took 0.19 of rfft(f32[256,
    768])'s 0.27 ms through divisions by 3)."""
    *lead, h = z.type.shape
    rank = z.type.ndim
    d = z.type.dtype
    p = h & -h
    r = h // p
    y = _dft_axis(e, _in_time_order(e, z), rank, -1)                           # [.., j1, k2]

    # The head (k2 = 0, whose mirror is the same column) and the body of each row of p
    # apart: one term of the body mirrors a reversed row (read forward by LLVM's
    # vectorizer, not gathered), the head its own column.
    at_k, at_mirror = 0.5 + twiddle, 0.5 - twiddle              # X_k = Z_k a_k + conj(Z_(h-k)) b_k
    k = np.arange(h).reshape(r, p)

    def terms(start: int, size: int, mirror_start: int, step: int):
        ks = k[:, start:start + size]
        total = None
        for j1 in range(r):
            phase = np.exp(-2j * np.pi * ((j1 * ks) % h) / h)
            term = e.add(e.mul(_row(e, y, j1, start, size), _constant(e, (phase * at_k[ks]).astype(d.np))),
                         e.mul(e.conj(_row(e, y, j1, mirror_start, size, step)),
                               _constant(e, (phase * at_mirror[ks]).astype(d.np))))
            total = term if total is None else e.add(total, term)
        return total                                             # [.., r, size]
    heads, bodies = terms(0, 1, 0, 1), terms(1, p - 1, p - 1, -1)
    # Z_h = Z_0 = sum_j1 Y[j1, 0]: the Nyquist term
    column = _row(e, y, 0, 0, 1)
    for j1 in range(1, r):
        column = e.add(column, _row(e, y, j1, 0, 1))
    column = e.reshape(column, shape=(*lead, 1))
    nyquist = e.add(e.mul(column, e.const(complex(at_k[h]), column)),
                    e.mul(e.conj(column), e.const(complex(at_mirror[h]), column)))

    def piece(part, k1: int):
        n = part.type.shape[-1]
        return e.reshape(_row(e, part, k1, 0, n), shape=(*lead, n))
    pieces = [p_ for k1 in range(r) for p_ in (piece(heads, k1), piece(bodies, k1))]
    return e.concatenate(*pieces, nyquist, axis=rank - 1)


def _irfft_last(e, x, n: int, scale: float):
    """``n`` real samples from the half spectrum ``x`` along the last axis, unnormalized (times
    n) and times ``scale`` (the caller's 1/N, folded into a constant where one is there), as
    pocketfft's c2r: the DC term's imaginary part (and an even n's Nyquist term's)
    ignored. An even n inverts ``_rfft_last``'s packing: Z_k = X_k (1 + i w^-k) / 2 +
    conj(X_(h-k)) (1 - i w^-k) / 2 for k < h, whose inverse DFT holds the even samples in its
    real parts and the odd ones in its imaginary parts (times h). An odd n is the inverse
    complex DFT of the Hermitian extension X_(n-k) = conj(X_k)."""
    rank = x.type.ndim
    h = x.type.shape[-1] - 1   # n // 2
    d = x.type.dtype
    if e.own_kernels and kernel_transform(x.type, "irfft", (n,)):
        y = e.fft(x, fft_type="irfft", fft_lengths=(n,))   # the FFT kernel's, times 1/n
        return y if n * scale == 1.0 else e.mul(y, e.const(n * scale, y))
    keep = np.ones(h + 1)
    keep[0] = 0.0
    if n % 2 == 0:
        keep[h] = 0.0
    x = e.complex(e.real(x), e.mul(e.imag(x), _constant(e, keep.astype(d.real_dtype.np))))
    if n % 2:
        if h:
            x = e.concatenate(x, e.conj(_last(e, x, h, h, -1)), axis=rank - 1)
        y = e.real(_dft_axis(e, x, rank - 1, 1))
        return e.mul(y, e.const(scale, y))
    twiddle = 0.5j * np.exp(2j * np.pi * np.arange(h) / n)
    z = e.add(e.mul(_last(e, x, 0, h), _constant(e, (0.5 + twiddle).astype(d.np))),
              e.mul(e.conj(_last(e, x, h, h, -1)), _constant(e, (0.5 - twiddle).astype(d.np))))
    if e.own_kernels and _last_axis_form(z.type) is _mixed_split:
        # in order, [.., r, p]: the pairs' reshape is the kernel's one output, stored from a
        # nest over [.., r, p, 2] (no index divided by r)
        z = _split_in_time(e, z, 1, 2.0 * scale)
        pairs = e.concatenate(e.expand_dims(e.real(z), axes=(rank + 1,)), e.expand_dims(e.imag(z), axes=(rank + 1,)),
                              axis=rank + 1)
        return e.reshape(pairs, shape=x.type.shape[:-1] + (n,))
    z = _dft_axis(e, z, rank - 1, 1)
    pairs = e.concatenate(e.expand_dims(e.real(z), axes=(rank,)), e.expand_dims(e.imag(z), axes=(rank,)),
                          axis=rank)
    y = e.reshape(pairs, shape=z.type.shape[:-1] + (n,))
    return e.mul(y, e.const(2.0 * scale, y))


def _fft_decompose(e, x, *, fft_type, fft_lengths):
    lengths = tuple(fft_lengths)
    rank, k = x.type.ndim, len(lengths)
    axes = list(range(rank - k, rank))
    out_type = _fft_rule([x.type], fft_type=fft_type, fft_lengths=lengths)
    if e.own_kernels and kernel_transform(x.type, fft_type, lengths):
        return None   # the FFT kernel's (flowjit/lowering/fourier.py)
    if math.prod(out_type.shape) == 0 or math.prod(x.type.shape) == 0:
        return [e.zeros(out_type)]
    scale = 1.0 / math.prod(lengths)
    if fft_type in ("fft", "ifft"):
        sign = -1 if fft_type == "fft" else 1
        for a in axes:
            x = _dft_axis(e, x, a, sign)
        return [x if fft_type == "fft" else e.mul(x, e.const(scale, x))]
    if fft_type == "rfft":
        z = _rfft_last(e, x)
        for a in axes[:-1]:
            z = _dft_axis(e, z, a, -1)
        return [z]
    # irfft: the leading axes' inverse, then the last axis' Hermitian extension
    # X[n - j] = conj(X[j]) inverted, whose real part ignores the DC and Nyquist terms'
    # imaginary parts as pocketfft's c2r does.
    for a in axes[:-1]:
        x = _dft_axis(e, x, a, 1)
    return [_irfft_last(e, x, lengths[-1], scale)]


defdecompose("fft", _fft_decompose)
