"""Vectorizable scalar transcendental functions for the numba kernels flowjit generates.

numba compiles ``math.exp``, ``math.tanh``, ``np.tanh``... to libm calls, and a loop that
calls libm does not vectorize (llvmlite is built without SVML). These functions are
straight-line arithmetic instead -- range reduction, polynomials and rational functions,
exponent bits set through LLVM integer ops and bitcasts (``_pow2``, ``_split_log``),
clamps and selects (``_sel``: an LLVM ``select``, a vector blend once vectorized) and
no data-dependent branch -- so an elementwise loop calling them vectorizes: 4-21x faster
than the libm loop for float32, 2-7x for float64.

Names. ``exp32 expm1_32 log32 tanh32 logistic32 erf32`` compute in float32 (their argument
is converted to float32), ``exp64 expm1_64 log64 tanh64 logistic64 erf64`` in float64. The
generic ``exp expm1 log tanh logistic erf`` pick the float32 version for a float32 argument
and the float64 one for any other number inside jitted code (so ``from ... import tanh``
can replace ``math.tanh`` in generated source), and call NumPy from Python; they compile
about twice as slowly as the typed names (a numba overload), so a generator that knows
the dtype should call the typed ones. All are ``njit(inline="always")``.

Guarantees, as NumPy: nan propagates; ``exp`` overflows to inf and underflows through
correctly rounded subnormals to 0; ``expm1(-inf) = -1``; ``log(+-0) = -inf``,
``log(x < 0) = nan``, ``log(inf) = inf``, ``log`` of a subnormal is exact (scaled first);
``tanh``/``erf`` reach +-1 exactly and keep the sign of zero (both are exactly odd);
``logistic(x) = 1 / (1 + exp(-x))`` is evaluated as ``1 / (1 + e)`` or ``e / (1 + e)``,
``e = exp(-|x|)``, so neither tail overflows and the negative tail keeps its tiny
(subnormal) values. Largest error, in units in the last place (ulp, subnormals counted)
from the correctly rounded result -- float32: checked on every one of the 2**32 inputs
(exp32, tanh32 and logistic32 by tests/codegen_cpu/test_scalar_math.py's slow
``test_float32_exhaustive``); float64: on 6.7M random bit patterns, log-uniform magnitudes
and dense grids:

    exp32 1  expm1_32 1  log32 1  tanh32 5  logistic32 2  erf32 1
    exp64 1  expm1_64 1  log64 1  tanh64 2  logistic64 2  erf64 1

tanh32 is the one function that trades accuracy for speed: a single rational function as
XLA's (so TensorFlow's and JAX's) float32 tanh, 5 ulp as theirs, because the 1 ulp
exp-based form doubled its instructions and left gelu-like kernels bound by arithmetic;
``tanh64`` is there for those who need more.

NumPy's own float32 exp/expm1/log are up to 2-4 ulp off (AVX-512 machine), so over all
float32 inputs exp32/expm1_32 differ from NumPy's float32 results by at most 3 ulp,
log32 by 4, tanh32 by 6.

Division is an intrinsic ``fdiv`` (``_div``), so the functions vectorize whatever the
caller's ``error_model`` (numba's default 'python' would otherwise add a zero check).
exp32 and tanh32 evaluate their polynomials with multiply-adds (``_fma``) that LLVM fuses
where the CPU has FMA (x86-64 since 2013, AArch64): half the instructions and roundings.
Their bounds above hold fused and unfused (both checked on every input, the unfused code
compiled for a CPU without FMA: ``NUMBA_CPU_NAME=sandybridge NUMBA_CPU_FEATURES=""``), but
tanh32's, whose coefficients were chosen for fused evaluation: 6 ulp unfused (7 from NumPy).
``fastmath`` stays off: the Cody-Waite reductions, the Fast2Sum in expm1 and the
special-value selects rely on IEEE semantics. Kernels cached on disk embed this code:
``VERSION`` changes with any numerical change and belongs in the kernels' cache key.
A loop over these functions is bound by arithmetic: ``wide_vectors()`` asks LLVM for
512-bit vectors in it on AVX-512 CPUs (flowjit's kernels call it).

erf64 uses the approximations and coefficients of FreeBSD's msun ``s_erf.c``, log32 and
log64 the coefficients of msun's ``s_log1pf.c`` / ``e_log.c``: Copyright (C) 1993 by Sun
Microsystems, Inc. All rights reserved. Developed at SunPro, a Sun Microsystems, Inc.
business. Permission to use, copy, modify, and distribute this software is freely
granted, provided that this notice is preserved. erf32's exp polynomial is Cephes'
``expf``; the polynomials of exp32, tanh32 and erf32 were fitted for this module (minimax
for the relative error: a linear program on a dense grid for exp32 and tanh32, a Lawson
iteration for erf32).
"""

from __future__ import annotations

import math

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core.errors import TypingError
from numba.extending import intrinsic, overload

# Bump when any function changes numerically: generated kernels cached on disk embed the
# code of these functions, so the kernel source (and its cache key) should mention it.
VERSION = 3

_JIT = dict(inline="always", fastmath=False, error_model="numpy")

f32 = np.float32
f64 = np.float64

# ---------------------------------------------------------------------------------------
# Bit-level helpers: LLVM integer ops and bitcasts, which vectorize (no libm, no memory).
# ---------------------------------------------------------------------------------------

_LAYOUT = {  # float type -> (int bits, mantissa bits, exponent bias)
    types.float32: (32, 23, 127),
    types.float64: (64, 52, 1023),
}


def _float_ir(fty):
    return ir.FloatType() if fty == types.float32 else ir.DoubleType()


@intrinsic
def _pow2(typingctx, nf):
    """2**nf for an integer-valued float nf in the normal exponent range (-bias < nf <= bias)."""
    if nf not in _LAYOUT:
        return None
    width, mant, bias = _LAYOUT[nf]

    def codegen(context, builder, sig, args):
        i32 = ir.IntType(32)
        ity = ir.IntType(width)
        n = builder.fptosi(args[0], i32)  # 32-bit conversion: vectorizes on AVX2 too
        if width != 32:
            n = builder.sext(n, ity)
        bits = builder.shl(builder.add(n, ir.Constant(ity, bias)), ir.Constant(ity, mant))
        return builder.bitcast(bits, _float_ir(nf))

    return nf(nf), codegen


@intrinsic
def _split_log(typingctx, x):
    """(m, k) with x = m * 2**k, m in [sqrt(1/2), sqrt(2)), k integer-valued, for normal x > 0."""
    if x not in _LAYOUT:
        return None
    width, mant, _ = _LAYOUT[x]
    off = 0x3F3504F3 if width == 32 else 0x3FE6A09E667F3BCD  # bits of sqrt(1/2)

    def codegen(context, builder, sig, args):
        ity = ir.IntType(width)
        bits = builder.bitcast(args[0], ity)
        tmp = builder.sub(bits, ir.Constant(ity, off))
        k = builder.ashr(tmp, ir.Constant(ity, mant))
        if width != 32:
            k = builder.trunc(k, ir.IntType(32))
        m_bits = builder.sub(bits, builder.and_(tmp, ir.Constant(ity, -(1 << mant))))
        m = builder.bitcast(m_bits, _float_ir(x))
        kf = builder.sitofp(k, _float_ir(x))
        return context.make_tuple(builder, sig.return_type, (m, kf))

    return types.UniTuple(x, 2)(x), codegen


@intrinsic
def _trunc_low(typingctx, x):
    """x with the low half of its significand cleared (so x*x is exact)."""
    if x not in _LAYOUT:
        return None
    width = _LAYOUT[x][0]
    mask = -(1 << 12) if width == 32 else -(1 << 32)

    def codegen(context, builder, sig, args):
        ity = ir.IntType(width)
        bits = builder.and_(builder.bitcast(args[0], ity), ir.Constant(ity, mask))
        return builder.bitcast(bits, _float_ir(x))

    return x(x), codegen


@intrinsic
def _copysign(typingctx, mag, sgn):
    """|mag| with the sign bit of sgn (llvm.copysign: an and/or on the bits)."""
    if mag not in _LAYOUT or sgn != mag:
        return None

    def codegen(context, builder, sig, args):
        fty = _float_ir(mag)
        fn = builder.module.declare_intrinsic("llvm.copysign", [fty], ir.FunctionType(fty, [fty, fty]))
        return builder.call(fn, args)

    return mag(mag, sgn), codegen


@intrinsic
def _sel(typingctx, c, a, b):
    """a if c else b, as an LLVM select (one basic block, a vector blend once vectorized)."""
    if not isinstance(c, types.Boolean) or a not in _LAYOUT or b != a:
        return None

    def codegen(context, builder, sig, args):
        return builder.select(args[0], args[1], args[2])

    return a(c, a, b), codegen


@intrinsic
def _div(typingctx, a, b):
    """a / b as a bare IEEE division: no zero check, whatever the caller's error model."""
    if a not in _LAYOUT or b != a:
        return None

    def codegen(context, builder, sig, args):
        return builder.fdiv(args[0], args[1])

    return a(a, b), codegen


@intrinsic
def _fma(typingctx, a, b, c):
    """a * b + c, rounded once where the CPU has fused multiply-adds (x86-64 since 2013,
    AArch64), as a multiply and an add elsewhere: ``llvm.fmuladd``, which LLVM fuses when
    the target has FMA and splits otherwise. (``llvm.fma`` would be fused everywhere, but
    a libm ``fmaf`` call per element without the instruction: 7x slower loops.)"""
    if a not in _LAYOUT or b != a or c != a:
        return None

    def codegen(context, builder, sig, args):
        fty = _float_ir(a)
        fn = builder.module.declare_intrinsic("llvm.fmuladd", [fty], ir.FunctionType(fty, [fty, fty, fty]))
        return builder.call(fn, args)

    return a(a, b, c), codegen


@intrinsic
def _mul_pow2_rounded(typingctx, p, v):
    """p * 2**n for v = MAGIC + n (``v`` is the float32 ``(t + MAGIC)`` that rounded t to the
    integer n): v's low mantissa bits hold n, shifted into p's exponent field by an integer
    add -- two integer ops, no conversion. Needs p * 2**n normal (its exponent in range)."""
    if p != types.float32 or v != p:
        return None

    def codegen(context, builder, sig, args):
        i32 = ir.IntType(32)
        bits = builder.bitcast(args[0], i32)
        # (MAGIC + n) << 23 = n << 23 modulo 2**32: MAGIC's set bits (22 and up) shift out.
        shifted = builder.shl(builder.bitcast(args[1], i32), ir.Constant(i32, 23))
        return builder.bitcast(builder.add(bits, shifted), ir.FloatType())

    return p(p, v), codegen


@intrinsic
def wide_vectors(typingctx):
    """Ask LLVM to vectorize the function being compiled (the caller, or the parallel loop
    body numba outlines from it) with 512-bit vectors where the CPU has them. LLVM prefers
    256 bits on AVX-512 CPUs (early ones lowered the clock for wide instructions), which
    halves the throughput of loops bound by arithmetic, as loops over these functions are:
    gelu and softmax kernels ran 1.15-1.4x faster with it (measured on a Sapphire Rapids
    VM, 2 threads). Emits no instruction; elsewhere (AVX2, AArch64) it changes nothing."""
    def codegen(context, builder, sig, args):
        try:  # a string attribute, which llvmlite's attribute set does not validate
            set.add(builder.function.attributes, '"prefer-vector-width"="512"')
        except Exception:  # an llvmlite without it: LLVM's own choice stands
            pass
        return context.get_dummy_value()

    return types.none(), codegen


# ---------------------------------------------------------------------------------------
# Accumulation and NaN-propagating max/min, for the generated kernels' reductions.
# ---------------------------------------------------------------------------------------


@intrinsic
def add_reassoc(typingctx, a, b):
    """a + b as an ``fadd reassoc``: this one addition may be reassociated, so a loop that
    accumulates with it vectorizes (several partial sums, as NumPy's pairwise sum) while
    every other operation of the kernel keeps strict IEEE semantics."""
    if a not in _LAYOUT or b != a:
        return None

    def codegen(context, builder, sig, args):
        return builder.fadd(args[0], args[1], flags=("reassoc",))

    return a(a, b), codegen


@intrinsic
def mul_reassoc(typingctx, a, b):
    """a * b as an ``fmul reassoc`` (see ``add_reassoc``)."""
    if a not in _LAYOUT or b != a:
        return None

    def codegen(context, builder, sig, args):
        return builder.fmul(args[0], args[1], flags=("reassoc",))

    return a(a, b), codegen


def _min_max(llvm_name):
    def impl(typingctx, a, b):
        if a not in _LAYOUT or b != a:
            return None

        def codegen(context, builder, sig, args):
            fty = _float_ir(a)
            fn = builder.module.declare_intrinsic(llvm_name, [fty], ir.FunctionType(fty, [fty, fty]))
            return builder.call(fn, args)

        return a(a, b), codegen

    return impl


fmaximum = intrinsic(_min_max("llvm.maximum"))
fmaximum.__doc__ = """The larger of two floats, nan if either is nan (``np.maximum``; LLVM's
``llvm.maximum``, which vectorizes as an elementwise op and as a reduction)."""
fminimum = intrinsic(_min_max("llvm.minimum"))
fminimum.__doc__ = """The smaller of two floats, nan if either is nan (``np.minimum``)."""


# ---------------------------------------------------------------------------------------
# exp
# ---------------------------------------------------------------------------------------
# exp(hi + lo) = 2**n * exp(r), n = round((hi + lo) / ln2), r = hi - n*ln2_hi + lo - n*ln2_lo
# (Cody-Waite: n*ln2_hi and hi - n*ln2_hi are exact). 2**n is applied as two factors
# 2**n1 * 2**n2 (n1 = round(n/2)) that are always normal, so results near overflow are
# right and subnormal results are rounded once.

_E32_HI = f32(89.0)  # exp(89) overflows: clamping there keeps inf
_E32_LO = f32(-104.0)  # exp(-104) < 2**-150: rounds to 0
_LOG2E32 = f32(1.4426950408889634)
_MAGIC32 = f32(12582912.0)  # 1.5 * 2**23: (v + M) - M rounds v to an integer
_LN2HI32 = f32(0.693359375)
_LN2LO32 = f32(-2.12194440e-4)
_HALF32 = f32(0.5)
_ONE32 = f32(1.0)
_TWO32 = f32(2.0)
_ZERO32 = f32(0.0)
# Cephes expf: exp(r) = 1 + r + r**2 * P(r) on |r| <= ln2/2 (erf32's exp)
_EP0_32 = f32(5.0000001201e-1)
_EP1_32 = f32(1.6666665459e-1)
_EP2_32 = f32(4.1665795894e-2)
_EP3_32 = f32(8.3334519073e-3)
_EP4_32 = f32(1.3981999507e-3)
_EP5_32 = f32(1.9875691500e-4)
# exp32: exp(r) = 1 + r + r**2 * (c2 + c3 r + ... + c6 r**4) on |r| <= ln2/2, minimax for the
# relative error (3.1e-9, 0.05 ulp; fitted for this module), Horner steps of ``_fma``.
_EX32 = tuple(f32(c) for c in (0.4999999403953552, 0.1666652113199234, 0.04166838899254799,
                                0.008368724025785923, 0.0013814583653584123))
_SHIFT32 = f32(64.0)
_UP32 = f32(2.0 ** 64)
_DOWN32 = f32(2.0 ** -64)


@njit(**_JIT)
def _exp32_mid(hi, lo):
    """exp(hi + lo) in float32 for |hi + lo| < 87 (a normal result) and |lo| small."""
    nf = ((hi + lo) * _LOG2E32 + _MAGIC32) - _MAGIC32
    r = (hi - nf * _LN2HI32) + (lo - nf * _LN2LO32)
    q = ((((_EP5_32 * r + _EP4_32) * r + _EP3_32) * r + _EP2_32) * r + _EP1_32) * r + _EP0_32
    return (_ONE32 + (r + (r * r) * q)) * _pow2(nf)


@njit(**_JIT)
def exp32(x):
    """exp(x) for float32 x, in float32."""
    x = f32(x)
    h = _sel(x < _E32_HI, x, _E32_HI)  # nan -> 89, returned as x below
    h = _sel(h > _E32_LO, h, _E32_LO)
    v = _fma(h, _LOG2E32, _MAGIC32)  # MAGIC + n, n = round(h / ln2)
    nf = v - _MAGIC32
    r = _fma(nf, -_LN2HI32, h)  # exact (Cody-Waite: nf * LN2HI has few bits)
    r = _fma(nf, -_LN2LO32, r)
    c = _EX32
    p = _fma(_fma(_fma(_fma(_fma(_fma(c[4], r, c[3]), r, c[2]), r, c[1]), r, c[0]), r, _ONE32), r, _ONE32)
    # 2**n = 2**(n -+ 64) * 2**(+-64): the first factor is always normal (n is in
    # [-150, 128]), so it goes into p's exponent bits exactly, and the one rounding of the
    # product makes subnormal results correctly rounded and large ones overflow to inf.
    down = nf < _ZERO32
    y = _mul_pow2_rounded(p, v - _sel(down, -_SHIFT32, _SHIFT32)) * _sel(down, _DOWN32, _UP32)
    return _sel(x == x, y, x)


_E64_HI = 710.0
_E64_LO = -746.0
_LOG2E64 = 1.4426950408889634
_MAGIC64 = 6755399441055744.0  # 1.5 * 2**52
_LN2HI64 = 6.93147180369123816490e-01  # 0x3fe62e42fee00000
_LN2LO64 = 1.90821492927058770002e-10
# 1/k! for k = 2..13: exp(r) = 1 + r + r**2 * sum(r**(k-2)/k!), truncation < 2**-58 on |r| <= ln2/2
_F2, _F3, _F4, _F5, _F6, _F7 = 1 / 2, 1 / 6, 1 / 24, 1 / 120, 1 / 720, 1 / 5040
_F8, _F9, _F10, _F11, _F12, _F13 = 1 / 40320, 1 / 362880, 1 / 3628800, 1 / 39916800, 1 / 479001600, 1 / 6227020800


@njit(**_JIT)
def _exp64_poly(r):
    """(exp(r) - 1 - r) / r**2 as sum(r**(k-2) / k!, k = 2..13)."""
    return ((((((((((_F13 * r + _F12) * r + _F11) * r + _F10) * r + _F9) * r + _F8) * r + _F7) * r + _F6) * r
            + _F5) * r + _F4) * r + _F3) * r + _F2


@njit(**_JIT)
def _exp64_hl(hi, lo):
    """exp(hi + lo) in float64 for non-nan hi and small lo."""
    h = _sel(hi > _E64_HI, _E64_HI, hi)
    h = _sel(h < _E64_LO, _E64_LO, h)
    nf = ((h + lo) * _LOG2E64 + _MAGIC64) - _MAGIC64
    r = (h - nf * _LN2HI64) + (lo - nf * _LN2LO64)
    p = 1.0 + (r + (r * r) * _exp64_poly(r))
    n1 = (nf * 0.5 + _MAGIC64) - _MAGIC64
    return (p * _pow2(n1)) * _pow2(nf - n1)


@njit(**_JIT)
def exp64(x):
    """exp(x) for float64 x."""
    x = f64(x)
    y = _exp64_hl(_sel(x == x, x, 0.0), 0.0)
    return _sel(x == x, y, x)


# ---------------------------------------------------------------------------------------
# expm1
# ---------------------------------------------------------------------------------------
# expm1(x) = 2**n * (1 + em) - 1 = (s - 1) + s*r + s*tail with s = 2**n, em = expm1(r + c)
# = r + tail (c: the rounding error of the reduced r). (s - 1) + s*r is summed with its
# rounding error kept (Fast2Sum), so the cancellation at n = 1 costs nothing. For the
# largest n (s would overflow) the result is computed as 2 * (2**(n-1) * (1 + em) - 1/2).

_EM32_HI = f32(89.0)
_EM32_LO = f32(-30.0)  # expm1(-30) rounds to -1
_BIG32 = f32(127.5)
_I2_32, _I3_32, _I4_32, _I5_32, _I6_32, _I7_32 = (f32(1 / 2), f32(1 / 6), f32(1 / 24), f32(1 / 120),
                                                   f32(1 / 720), f32(1 / 5040))


@njit(**_JIT)
def expm1_32(x):
    """expm1(x) = exp(x) - 1 for float32 x, accurate near 0."""
    x = f32(x)
    h = _sel(x > _EM32_HI, _EM32_HI, x)
    h = _sel(h < _EM32_LO, _EM32_LO, h)
    h = _sel(x == x, h, _ZERO32)
    nf = (h * _LOG2E32 + _MAGIC32) - _MAGIC32
    hi = h - nf * _LN2HI32  # exact
    lo = nf * _LN2LO32
    r = hi - lo
    c = (hi - r) - lo
    q = ((((_I7_32 * r + _I6_32) * r + _I5_32) * r + _I4_32) * r + _I3_32) * r + _I2_32
    tail = (r * r) * q + (c + c * r)  # expm1(r + c) = r + tail
    big = nf > _BIG32  # 2**nf overflows: use 2 * (2**(nf-1) * (1 + em) - 1/2)
    s = _pow2(_sel(big, nf - _ONE32, nf))
    a = s - _sel(big, _HALF32, _ONE32)
    b = s * r
    hi = a + b  # |a| >= |b|: err is the exact rounding error of hi
    err = b - (hi - a)
    y = (hi + (err + s * tail)) * _sel(big, _TWO32, _ONE32)
    y = _sel(x == _ZERO32, x, y)  # keeps -0
    return _sel(x == x, y, x)


_EM64_HI = 710.0
_EM64_LO = -40.0


@njit(**_JIT)
def expm1_64(x):
    """expm1(x) = exp(x) - 1 for float64 x, accurate near 0."""
    x = f64(x)
    h = _sel(x > _EM64_HI, _EM64_HI, x)
    h = _sel(h < _EM64_LO, _EM64_LO, h)
    h = _sel(x == x, h, 0.0)
    nf = (h * _LOG2E64 + _MAGIC64) - _MAGIC64
    hi = h - nf * _LN2HI64
    lo = nf * _LN2LO64
    r = hi - lo
    c = (hi - r) - lo
    tail = (r * r) * _exp64_poly(r) + (c + c * r)
    big = nf > 1023.5
    s = _pow2(_sel(big, nf - 1.0, nf))
    a = s - _sel(big, 0.5, 1.0)
    b = s * r
    hi = a + b
    err = b - (hi - a)
    y = (hi + (err + s * tail)) * _sel(big, 2.0, 1.0)
    y = _sel(x == 0.0, x, y)
    return _sel(x == x, y, x)


# ---------------------------------------------------------------------------------------
# log
# ---------------------------------------------------------------------------------------
# x = m * 2**k, m in [sqrt(1/2), sqrt(2)), f = m - 1, s = f / (2 + f):
# log(x) = k*ln2_hi + (f - hfsq + s*(hfsq + R(s**2)) + k*ln2_lo), hfsq = f*f/2 (fdlibm).
# Subnormal x is scaled into the normal range first.

_TINY32 = f32(1.17549435e-38)  # smallest normal float32
_SCALE32 = f32(33554432.0)  # 2**25
_SCALE32_K = f32(25.0)
_L2HI32 = f32(6.9313812256e-01)  # 0x3f317180
_L2LO32 = f32(9.0580006145e-06)  # 0x3717f7d1
_LG1_32 = f32(6.6666668653e-01)
_LG2_32 = f32(4.0000000596e-01)
_LG3_32 = f32(2.8571429849e-01)
_LG4_32 = f32(2.2222198546e-01)
_LG5_32 = f32(1.8183572590e-01)
_LG6_32 = f32(1.5313838422e-01)
_LG7_32 = f32(1.4798198640e-01)
_INF32 = f32(np.inf)
_NINF32 = f32(-np.inf)
_NAN32 = f32(np.nan)


@njit(**_JIT)
def log32(x):
    """Natural log of float32 x: -inf at 0, nan below 0."""
    x = f32(x)
    sub = x < _TINY32
    xs = _sel(sub, x * _SCALE32, x)
    m, k = _split_log(xs)
    k = _sel(sub, k - _SCALE32_K, k)
    f = m - _ONE32
    s = _div(f, _TWO32 + f)
    z = s * s
    w = z * z
    t1 = w * (_LG2_32 + w * (_LG4_32 + w * _LG6_32))
    t2 = z * (_LG1_32 + w * (_LG3_32 + w * (_LG5_32 + w * _LG7_32)))
    hfsq = _HALF32 * f * f
    y = k * _L2HI32 - ((hfsq - (s * (hfsq + (t2 + t1)) + k * _L2LO32)) - f)
    y = _sel(x < _INF32, y, x)  # +inf, nan
    y = _sel(x == _ZERO32, _NINF32, y)
    return _sel(x < _ZERO32, _NAN32, y)


_TINY64 = 2.2250738585072014e-308
_SCALE64 = 18014398509481984.0  # 2**54
_LG1 = 6.666666666666735130e-01
_LG2 = 3.999999999940941908e-01
_LG3 = 2.857142874366239149e-01
_LG4 = 2.222219843214978396e-01
_LG5 = 1.818357216161805012e-01
_LG6 = 1.531383769920937332e-01
_LG7 = 1.479819860511658591e-01


@njit(**_JIT)
def log64(x):
    """Natural log of float64 x: -inf at 0, nan below 0."""
    x = f64(x)
    sub = x < _TINY64
    xs = _sel(sub, x * _SCALE64, x)
    m, k = _split_log(xs)
    k = _sel(sub, k - 54.0, k)
    f = m - 1.0
    s = _div(f, 2.0 + f)
    z = s * s
    w = z * z
    t1 = w * (_LG2 + w * (_LG4 + w * _LG6))
    t2 = z * (_LG1 + w * (_LG3 + w * (_LG5 + w * _LG7)))
    hfsq = 0.5 * f * f
    y = k * _LN2HI64 - ((hfsq - (s * (hfsq + (t2 + t1)) + k * _LN2LO64)) - f)
    y = _sel(x < np.inf, y, x)
    y = _sel(x == 0.0, -np.inf, y)
    return _sel(x < 0.0, np.nan, y)


# ---------------------------------------------------------------------------------------
# tanh
# ---------------------------------------------------------------------------------------

# float32: x * P(x**2) / Q(x**2) with P(0) = Q(0) = 1, degrees 4 and 4, the form XLA uses
# on CPUs (so TensorFlow's and JAX's float32 tanh). Minimax for the relative error on
# |x| <= 9.02 (a linear program on 6500 points, bisecting on the error: 0.65 * 2**-24 with
# exact coefficients), then a random search over the float32 coefficients for the smallest
# error after float32 evaluation (fitted for this module). The roundings of two degree-4
# polynomials, a division and a product reach 5 ulp (XLA's, measured the same way through
# jax.jit on this module's grid: 4.75 ulp, and above 2 ulp on 6% of inputs against 1.3%
# here). The 1 ulp alternative, 1 - 2 / (1 + exp(2|x|)) with a rational near 0 (this
# module's tanh32 until version 3), takes 30 vector instructions against 15 and made a
# 2**24 gelu bound by arithmetic at 55% of copy bandwidth, against 72-86% with this one.
_FTP = tuple(np.array([0x3E08A716, 0x3B62486C, 0x37A6FFA7, 0x3254E87F], np.uint32).view(np.float32))
_FTQ = tuple(np.array([0x3EEEFE30, 0x3CD2A679, 0x39A89922, 0x35461EAF], np.uint32).view(np.float32))
_FT_ONE = f32(8.125)  # the rational passes 1 from 8.17; 1 is 3 ulp above tanh(8.125)


@njit(**_JIT)
def tanh32(x):
    """tanh(x) for float32 x within 5 ulp: one rational function, no exp."""
    x = f32(x)
    x2 = x * x
    p, q = _FTP, _FTQ
    num = _fma(_fma(_fma(_fma(p[3], x2, p[2]), x2, p[1]), x2, p[0]), x2, _ONE32)
    den = _fma(_fma(_fma(_fma(q[3], x2, q[2]), x2, q[1]), x2, q[0]), x2, _ONE32)
    # Past 8.125 (and at inf, where num / den is nan) the result is +-1; nan compares
    # false and keeps the rational's nan.
    return _sel(abs(x) > _FT_ONE, _copysign(_ONE32, x), x * _div(num, den))


@njit(**_JIT)
def tanh64(x):
    """tanh(x) for float64 x, as -t / (t + 2) with t = expm1(-2|x|)."""
    x = f64(x)
    a = abs(x)
    a = _sel(a > 40.0, 40.0, a)
    t = expm1_64(-2.0 * a)
    return _copysign(_div(-t, t + 2.0), x)


# ---------------------------------------------------------------------------------------
# logistic
# ---------------------------------------------------------------------------------------


@njit(**_JIT)
def logistic32(x):
    """1 / (1 + exp(-x)) for float32 x, accurate on both tails."""
    x = f32(x)
    e = exp32(-abs(x))
    d = _ONE32 + e
    return _div(_sel(x >= _ZERO32, _ONE32, e), d)


@njit(**_JIT)
def logistic64(x):
    """1 / (1 + exp(-x)) for float64 x, accurate on both tails."""
    x = f64(x)
    e = exp64(-abs(x))
    d = 1.0 + e
    return _div(_sel(x >= 0.0, 1.0, e), d)


# ---------------------------------------------------------------------------------------
# erf
# ---------------------------------------------------------------------------------------
# float32 (polynomials fitted for this module by a Lawson minimax iteration: P to erf(x)/x - 1
# on [0, 0.921875] with relative weight, G to log(erfc(x)) + x**2 on [0.921875, 3.921875]
# weighted by erfc/erf, the error of erf; checked on every float32):
#   |x| < 0.921875:  erf = x + x * P(x**2)
#   |x| < 3.921875:  erf = 1 - exp(-x**2 + G(|x| - 2.4)), G ~ log(erfc(x)) + x**2, with
#                    -x**2 split as -z*z + (z - x)*(z + x) (z: x with a short significand,
#                    so z*z is exact) and passed to exp as hi + lo
#   beyond:          erf = +-1 (erfc(3.921875) < 2**-25)

_ERF32_T = f32(0.921875)
_ERF32_U = f32(3.921875)
_ERF32_SHIFT = f32(2.4)
_EP32 = tuple(f32(c) for c in (
    0.12837916612625122, -0.37612634897232056, 0.11283695697784424, -0.026859397068619728,
    0.00520103145390749, -0.000814269355032593, 8.370054274564609e-05))
_EG32 = tuple(f32(c) for c in (
    -1.520975112915039, -0.3642370104789734, 0.05949841067194939, -0.011762580834329128,
    0.002397387521341443, -0.00046670332085341215, 7.994357292773202e-05, -2.1118381482665427e-05))


@njit(**_JIT)
def erf32(x):
    """erf(x) for float32 x."""
    x = f32(x)
    a = abs(x)
    a = _sel(a > _ERF32_U, _ERF32_U, a)
    a = _sel(a == a, a, _ZERO32)  # nan: computed as 0, returned as x below
    a2 = a * a
    c = _EP32
    p = (((((c[6] * a2 + c[5]) * a2 + c[4]) * a2 + c[3]) * a2 + c[2]) * a2 + c[1]) * a2 + c[0]
    small = a + a * p
    u = a - _ERF32_SHIFT
    c = _EG32
    g = ((((((c[7] * u + c[6]) * u + c[5]) * u + c[4]) * u + c[3]) * u + c[2]) * u + c[1]) * u + c[0]
    z = _trunc_low(a)
    large = _ONE32 - _exp32_mid(-(z * z), (z - a) * (z + a) + g)
    y = _sel(a < _ERF32_T, small, large)
    y = _sel(a >= _ERF32_U, _ONE32, y)
    return _sel(x == x, _copysign(y, x), x)


# float64 (fdlibm s_erf.c):
#   |x| < 0.84375:        erf = x + x * P(x**2) / Q(x**2)
#   0.84375 <= |x| < 1.25: erf = erx + P(|x| - 1) / Q(|x| - 1)
#   1.25 <= |x| < 6:      erf = 1 - exp(-z*z - 0.5625 + (z - x)*(z + x) + R(1/x**2) / S(1/x**2)) / x
#                         (two coefficient sets for R, S split at 1/0.35, selected per element)
#   |x| >= 6:             erf = +-1
# The three numerators and denominators are selected before a single division.

_ERX = 8.45062911510467529297e-01
_EFX_P = (1.28379167095512558561e-01, -3.25042107247001499370e-01, -2.84817495755985104766e-02,
          -5.77027029648944159157e-03, -2.37630166566501626084e-05)
_EFX_Q = (3.97917223959155352819e-01, 6.50222499887672944485e-02, 5.08130628187576562776e-03,
          1.32494738004321644526e-04, -3.96022827877536812320e-06)
_ERX_P = (-2.36211856075265944077e-03, 4.14856118683748331666e-01, -3.72207876035701323847e-01,
          3.18346619901161753674e-01, -1.10894694282396677476e-01, 3.54783043256182359371e-02,
          -2.16637559486879084300e-03)
_ERX_Q = (1.06420880400844228286e-01, 5.40397917702171048937e-01, 7.18286544141962662868e-02,
          1.26171219808761642112e-01, 1.36370839120290507362e-02, 1.19844998467991074170e-02)
_ERFC_RA = (-9.86494403484714822705e-03, -6.93858572707181764372e-01, -1.05586262253232909814e+01,
            -6.23753324503260060396e+01, -1.62396669462573470355e+02, -1.84605092906711035994e+02,
            -8.12874355063065934246e+01, -9.81432934416914548592e+00)
_ERFC_SA = (1.96512716674392571292e+01, 1.37657754143519042600e+02, 4.34565877475229228821e+02,
            6.45387271733267880336e+02, 4.29008140027567833386e+02, 1.08635005541779435134e+02,
            6.57024977031928170135e+00, -6.04244152148580987438e-02)
_ERFC_RB = (-9.86494292470009928597e-03, -7.99283237680523006574e-01, -1.77579549177547519889e+01,
            -1.60636384855821916062e+02, -6.37566443368389627722e+02, -1.02509513161107724954e+03,
            -4.83519191608651397019e+02, 0.0)
_ERFC_SB = (3.03380607434824582924e+01, 3.25792512996573918826e+02, 1.53672958608443695994e+03,
            3.19985821950859553908e+03, 2.55305040643316442583e+03, 4.74528541206955367215e+02,
            -2.24409524465858183362e+01, 0.0)
_ERF_C = 2.8571434020996094  # 0x4006DB6E00000000, ~1/0.35


@njit(**_JIT)
def erf64(x):
    """erf(x) for float64 x."""
    x = f64(x)
    a = abs(x)
    a = _sel(a > 6.0, 6.0, a)
    a = _sel(a == a, a, 0.0)  # nan: computed as 0, returned as x below
    ia = a < 0.84375
    ib = a < 1.25
    ic = a < _ERF_C
    # |x| < 0.84375
    z = a * a
    c = _EFX_P
    pa = (((c[4] * z + c[3]) * z + c[2]) * z + c[1]) * z + c[0]
    c = _EFX_Q
    qa = ((((c[4] * z + c[3]) * z + c[2]) * z + c[1]) * z + c[0]) * z + 1.0
    # 0.84375 <= |x| < 1.25
    s = a - 1.0
    c = _ERX_P
    pb = (((((c[6] * s + c[5]) * s + c[4]) * s + c[3]) * s + c[2]) * s + c[1]) * s + c[0]
    c = _ERX_Q
    qb = (((((c[5] * s + c[4]) * s + c[3]) * s + c[2]) * s + c[1]) * s + c[0]) * s + 1.0
    # 1.25 <= |x| < 6
    t = _div(1.0, z)
    r, q = _ERFC_RA, _ERFC_RB
    pc = _sel(ic, r[7], q[7])
    pc = pc * t + _sel(ic, r[6], q[6])
    pc = pc * t + _sel(ic, r[5], q[5])
    pc = pc * t + _sel(ic, r[4], q[4])
    pc = pc * t + _sel(ic, r[3], q[3])
    pc = pc * t + _sel(ic, r[2], q[2])
    pc = pc * t + _sel(ic, r[1], q[1])
    pc = pc * t + _sel(ic, r[0], q[0])
    r, q = _ERFC_SA, _ERFC_SB
    qc = _sel(ic, r[7], q[7])
    qc = qc * t + _sel(ic, r[6], q[6])
    qc = qc * t + _sel(ic, r[5], q[5])
    qc = qc * t + _sel(ic, r[4], q[4])
    qc = qc * t + _sel(ic, r[3], q[3])
    qc = qc * t + _sel(ic, r[2], q[2])
    qc = qc * t + _sel(ic, r[1], q[1])
    qc = qc * t + _sel(ic, r[0], q[0])
    qc = qc * t + 1.0
    rat = _div(_sel(ia, pa, _sel(ib, pb, pc)), _sel(ia, qa, _sel(ib, qb, qc)))
    zt = _trunc_low(a)
    e = _exp64_hl(-(zt * zt) - 0.5625, (zt - a) * (zt + a) + rat)
    y = _sel(ia, a + a * rat, _sel(ib, _ERX + rat, 1.0 - _div(e, a)))
    y = _sel(a >= 6.0, 1.0, y)
    return _sel(x == x, _copysign(y, x), x)


# ---------------------------------------------------------------------------------------
# Generic entry points: float32 -> the 32-bit version, anything else -> float64.
# ---------------------------------------------------------------------------------------


def _float_array(x):
    x = np.asarray(x)
    return x if x.dtype == np.float32 else x.astype(np.float64)


def _np_logistic(x):
    x = _float_array(x)
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e))[()]


def _np_erf(x):
    x = _float_array(x)
    return np.vectorize(math.erf, otypes=[x.dtype])(x)[()]


def _generic(name, np_impl, impl32, impl64):
    def fn(x):
        return np_impl(x)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"{name}(x): {impl32.__name__} for float32, {impl64.__name__} for other numbers (jitted code)."

    @overload(fn, inline="always")
    def _ov(x):
        if x == types.float32:
            return impl32.py_func
        if isinstance(x, (types.Float, types.Integer, types.Boolean)):
            return impl64.py_func  # converts x to float64 first
        raise TypingError(f"flowjit scalar_math.{name}: unsupported argument type {x}")

    return fn


exp = _generic("exp", np.exp, exp32, exp64)
expm1 = _generic("expm1", np.expm1, expm1_32, expm1_64)
log = _generic("log", np.log, log32, log64)
tanh = _generic("tanh", np.tanh, tanh32, tanh64)
logistic = _generic("logistic", _np_logistic, logistic32, logistic64)
erf = _generic("erf", _np_erf, erf32, erf64)

__all__ = [
    "VERSION", "exp", "exp32", "exp64", "expm1", "expm1_32", "expm1_64", "log", "log32", "log64",
    "tanh", "tanh32", "tanh64", "logistic", "logistic32", "logistic64", "erf", "erf32", "erf64",
    "add_reassoc", "mul_reassoc", "fmaximum", "fminimum", "wide_vectors",
]
