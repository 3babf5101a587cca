"""The loop IR's math intrinsics as LLVM functions: flowjit's one copy of its polynomial math.

``function(module, "tanh.f32")`` defines (once per module) an internal, ``alwaysinline``
function ``fj.tanh.f32`` taking and returning the scalar type, and returns it; the
renderer calls it where the loop IR says ``tanh.f32``. ``None`` means there is no port
of that name here (the renderer then calls libm). ``NAMES`` is the set implemented.

Each body is range reduction, a polynomial and reconstruction, written with selects instead
of branches, ``llvm.fmuladd`` where the algorithm fuses and plain IEEE multiplies and adds
elsewhere (no fast-math flag is set here), exponent bits set with integer ops and bitcasts:
nothing in them branches, touches memory or calls libm, so a loop over them vectorizes. The
tests hold each against NumPy (and mpmath where NumPy's own libm is not exact) at a stated
ulp bound. This module imports llvmlite and NumPy only. (CUDA kernels use libdevice.)

Here: exp, expm1, log, tanh, erf in float32 and float64, and log1p: fdlibm's ``log1p``
scheme on the log kernel (u = 1 + x, log(u) plus the correction c / u for the rounding
error c of u). sqrt, floor,
ceil, rint, trunc, fabs, copysign and fmod are the LLVM intrinsics (``frem`` for fmod) wrapped in
the same calling form. float16 names compute in float32 and round once, as NumPy's float16
loops do; those whose float32 is float64's rounded (``F16_FROM_F64``) round once from float64.
sin and cos are fdlibm's kernels after an exact argument reduction (fdlibm's medium
one up to 2**20 pi/2, Payne and Hanek's beyond; see their section), float32 through float64
(one reduction round up to 2**28 pi/2, its 24 bits need no more).
pow has no vectorizable version here: the renderer calls libm for it. hypot is glibc's own
formulas inline (float32's exact in float64, float64's a root and one correction: NumPy's
bits); atan2 is fdlibm's on the atan port (float32 through float64). sinh, cosh,
asinh, acosh and atanh are flowjit's own
(fdlibm's formulas on the exp, expm1, log and log1p ports), asin, acos and atan fdlibm's
float64 algorithms (float32 through them); cbrt flowjit's own, division-free (float32 and
float16 through float64); see their sections. logistic is not a loop-IR intrinsic (its registry
template is ``1 / (1 + exp(-a))``).

Provenance and licences of the coefficients: erf64 and log from FreeBSD msun
(Copyright (C) 1993 by Sun Microsystems, Inc. All rights reserved. Developed at SunPro, a
Sun Microsystems, Inc. business. Permission to use, copy, modify, and distribute this
software is freely granted, provided that this notice is preserved), erf32's exp from
Cephes, the exp32, tanh32 and erf32 polynomials fitted for flowjit. Bump ``VERSION`` with any
numerical change (it belongs in kernel cache keys).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import TypeAlias

import numpy as np
from llvmlite import ir

# The version of the algorithms here (in kernel cache keys).
VERSION = 18

PREFIX = "fj."

f32 = np.float32

# ---- float32 constants (scalar_math's) ---------------------------------------------------
_E32_HI, _E32_LO = f32(89.0), f32(-104.0)
_LOG2E32 = f32(1.4426950408889634)
_MAGIC32 = f32(12582912.0)  # 1.5 * 2**23: (v + M) - M rounds v to an integer
_LN2HI32, _LN2LO32 = f32(0.693359375), f32(-2.12194440e-4)
_EX32 = tuple(f32(c) for c in (0.4999999403953552, 0.1666652113199234, 0.04166838899254799,
                                0.008368724025785923, 0.0013814583653584123))
_SHIFT32, _UP32, _DOWN32 = f32(64.0), f32(2.0 ** 64), f32(2.0 ** -64)
_CEPHES_EXP32 = tuple(f32(c) for c in (5.0000001201e-1, 1.6666665459e-1, 4.1665795894e-2,
                                        8.3334519073e-3, 1.3981999507e-3, 1.9875691500e-4))
_EM32_HI, _EM32_LO, _BIG32 = f32(89.0), f32(-30.0), f32(127.5)
_EXPM1_32 = tuple(f32(1 / k) for k in (2, 6, 24, 120, 720, 5040))
_TINY32, _SCALE32, _SCALE32_K = f32(1.17549435e-38), f32(33554432.0), f32(25.0)
_L2HI32, _L2LO32 = f32(6.9313812256e-01), f32(9.0580006145e-06)
_LG32 = tuple(f32(c) for c in (6.6666668653e-01, 4.0000000596e-01, 2.8571429849e-01, 2.2222198546e-01,
                                1.8183572590e-01, 1.5313838422e-01, 1.4798198640e-01))
_FTP = tuple(np.array([0x3E08A716, 0x3B62486C, 0x37A6FFA7, 0x3254E87F], np.uint32).view(np.float32))
_FTQ = tuple(np.array([0x3EEEFE30, 0x3CD2A679, 0x39A89922, 0x35461EAF], np.uint32).view(np.float32))
_FT_ONE = f32(8.125)
_ERF32_T, _ERF32_U, _ERF32_SHIFT = f32(0.921875), f32(3.921875), f32(2.4)
_EP32 = tuple(f32(c) for c in (
    0.12837916612625122, -0.37612634897232056, 0.11283695697784424, -0.026859397068619728,
    0.00520103145390749, -0.000814269355032593, 8.370054274564609e-05))
_EG32 = tuple(f32(c) for c in (
    -1.520975112915039, -0.3642370104789734, 0.05949841067194939, -0.011762580834329128,
    0.002397387521341443, -0.00046670332085341215, 7.994357292773202e-05, -2.1118381482665427e-05))

# ---- float64 constants (scalar_math's) ---------------------------------------------------
_E64_HI, _E64_LO = 710.0, -746.0
_LOG2E64 = 1.4426950408889634
_MAGIC64 = 6755399441055744.0  # 1.5 * 2**52
_LN2HI64, _LN2LO64 = 6.93147180369123816490e-01, 1.90821492927058770002e-10
_EXP64 = tuple(1 / f for f in (2, 6, 24, 120, 720, 5040, 40320, 362880, 3628800, 39916800, 479001600,
                               6227020800))
_EM64_HI, _EM64_LO = 710.0, -40.0
_TINY64, _SCALE64 = 2.2250738585072014e-308, 18014398509481984.0  # 2**54
_LG64 = (6.666666666666735130e-01, 3.999999999940941908e-01, 2.857142874366239149e-01,
         2.222219843214978396e-01, 1.818357216161805012e-01, 1.531383769920937332e-01,
         1.479819860511658591e-01)
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

_F32, _F64, _F16 = ir.FloatType(), ir.DoubleType(), ir.HalfType()
_I32 = ir.IntType(32)


# ---- a small expression layer over the IR builder -------------------------------------------
# Values overload Python's operators with the IEEE instruction of the same name and no
# flags, so the algorithms below read (and evaluate, left to right) as scalar_math's source.
Num: TypeAlias = "V | float | np.floating"


class Bool:
    """An i1 value (a comparison), the condition of a select."""

    __slots__ = ("f", "v")

    def __init__(self, f: Scalar, v: ir.Value) -> None:
        self.f, self.v = f, v


class V:
    """A float value of the function being built."""

    __slots__ = ("f", "v")
    __hash__ = None  # type: ignore[assignment]  # == builds a comparison

    def __init__(self, f: Scalar, v: ir.Value) -> None:
        self.f, self.v = f, v

    def _bin(self, op: str, other: Num, swap: bool = False) -> V:
        a, b = self.v, self.f.val(other).v
        if swap:
            a, b = b, a
        return V(self.f, getattr(self.f.b, op)(a, b))

    def __add__(self, o: Num) -> V:
        return self._bin("fadd", o)

    def __radd__(self, o: Num) -> V:
        return self._bin("fadd", o, True)

    def __sub__(self, o: Num) -> V:
        return self._bin("fsub", o)

    def __rsub__(self, o: Num) -> V:
        return self._bin("fsub", o, True)

    def __mul__(self, o: Num) -> V:
        return self._bin("fmul", o)

    def __rmul__(self, o: Num) -> V:
        return self._bin("fmul", o, True)

    def __neg__(self) -> V:
        return V(self.f, self.f.b.fneg(self.v))

    def _cmp(self, op: str, o: Num) -> Bool:  # ordered: false when either is nan, as Python's
        return Bool(self.f, self.f.b.fcmp_ordered(op, self.v, self.f.val(o).v))

    def __lt__(self, o: Num) -> Bool:
        return self._cmp("<", o)

    def __le__(self, o: Num) -> Bool:
        return self._cmp("<=", o)

    def __gt__(self, o: Num) -> Bool:
        return self._cmp(">", o)

    def __ge__(self, o: Num) -> Bool:
        return self._cmp(">=", o)

    def __eq__(self, o: Num) -> Bool:  # type: ignore[override]
        return self._cmp("==", o)


class Scalar:
    """Builds float32 or float64 code at ``builder``: constants, selects, the LLVM
    intrinsics and scalar_math's bit-level helpers (``pow2``, ``split_log``, ...)."""

    def __init__(self, builder: ir.IRBuilder, fty: ir.Type, native_ldexp: bool = False,
                 native_fma: bool = False) -> None:
        self.b, self.t = builder, fty
        self.native_ldexp, self.native_fma = native_ldexp, native_fma
        self.width, self.mant, self.bias = (32, 23, 127) if fty == _F32 else (64, 52, 1023)
        self.ity = ir.IntType(self.width)

    def val(self, x: Num) -> V:
        if isinstance(x, V):
            return x
        # float32 constants must be float32 values (llvmlite writes them as doubles)
        return V(self, ir.Constant(self.t, float(f32(x)) if self.t == _F32 else float(x)))

    def _intrinsic(self, name: str, *xs: Num) -> V:
        fn = self.b.module.declare_intrinsic(name, [self.t], ir.FunctionType(self.t, [self.t] * len(xs)))
        return V(self, self.b.call(fn, [self.val(x).v for x in xs]))

    def sel(self, c: Bool, a: Num, b: Num) -> V:
        """a where c else b: an LLVM select (a blend once vectorized)."""
        return V(self, self.b.select(c.v, self.val(a).v, self.val(b).v))

    def fma(self, a: Num, b: Num, c: Num) -> V:
        """a * b + c as ``llvm.fmuladd``: fused where the CPU has FMA (scalar_math's ``_fma``;
        ``llvm.fma`` would become a libm call per element on a CPU without it)."""
        return self._intrinsic("llvm.fmuladd", a, b, c)

    def div(self, a: Num, b: Num) -> V:
        return V(self, self.b.fdiv(self.val(a).v, self.val(b).v))

    def fabs(self, x: Num) -> V:
        return self._intrinsic("llvm.fabs", x)

    def copysign(self, mag: Num, sgn: Num) -> V:
        return self._intrinsic("llvm.copysign", mag, sgn)

    def _bits(self, x: V) -> ir.Value:
        return self.b.bitcast(x.v, self.ity)

    def _float(self, bits: ir.Value) -> V:
        return V(self, self.b.bitcast(bits, self.t))

    def pow2(self, nf: V) -> V:
        """2**nf for an integer-valued nf in the normal exponent range."""
        b = self.b
        n = b.fptosi(nf.v, _I32)  # a 32-bit conversion vectorizes on AVX2 too
        if self.width != 32:
            n = b.sext(n, self.ity)
        return self._float(b.shl(b.add(n, ir.Constant(self.ity, self.bias)), ir.Constant(self.ity, self.mant)))

    def ldexp_magic(self, p: V, v: V) -> V:
        """p * 2**n for v = MAGIC + n (MAGIC 1.5 * 2**23 in float32, 1.5 * 2**52 in float64;
        |n| < 2**22), rounded once: one ``vscalefps``/``vscalefpd`` a vector where the
        target has AVX-512 (the caller asks only then: elsewhere LLVM makes ``llvm.ldexp``
        a libm call per element). n is v's bits less MAGIC's, an integer subtraction,
        which a nan v leaves a defined integer (then the result is p's nan or the nan the
        scaling makes of it), where ``fptosi`` of a nan is poison."""
        b, i32 = self.b, ir.IntType(32)
        n = b.sub(self._bits(v), ir.Constant(self.ity, self._magic_bits()))
        if self.width != 32:
            n = b.trunc(n, i32)
        fn = b.module.declare_intrinsic("llvm.ldexp", [self.t, i32], ir.FunctionType(self.t, [self.t, i32]))
        return V(self, b.call(fn, [p.v, n]))

    def split_log(self, x: V) -> tuple[V, V]:
        """(m, k) with x = m * 2**k, m in [sqrt(1/2), sqrt(2)), k integer-valued, x normal > 0."""
        b, ity = self.b, self.ity
        bits = self._bits(x)
        tmp = b.sub(bits, ir.Constant(ity, 0x3F3504F3 if self.width == 32 else 0x3FE6A09E667F3BCD))
        k = b.ashr(tmp, ir.Constant(ity, self.mant))
        if self.width != 32:
            k = b.trunc(k, _I32)
        m = self._float(b.sub(bits, b.and_(tmp, ir.Constant(ity, -(1 << self.mant)))))
        return m, V(self, b.sitofp(k, self.t))

    def trunc_low(self, x: V) -> V:
        """x with the low half of its significand cleared (so x*x is exact)."""
        mask = -(1 << 12) if self.width == 32 else -(1 << 32)
        return self._float(self.b.and_(self._bits(x), ir.Constant(self.ity, mask)))

    def _magic_bits(self) -> int:
        """The bits of the rounding constant MAGIC (1.5 * 2**23 or 1.5 * 2**52) as an integer."""
        return int(np.array(_MAGIC32).view(np.int32) if self.width == 32 else np.array(_MAGIC64).view(np.int64))

    def pow2_magic(self, v: V) -> V:
        """2**n for v = MAGIC + n, n within the normal exponents: v's bits end in n, which
        moves to the exponent field with the bias added (an add and a shift). A nan v
        gives some power of two, a zero or an infinity, so p * 2**n of a nan p stays that
        nan, sign and payload."""
        b = self.b
        biased = b.add(self._bits(v), ir.Constant(self.ity, self.bias - self._magic_bits()))
        return self._float(b.shl(biased, ir.Constant(self.ity, self.mant)))


def poly(f: Scalar, x: V, cs: Sequence[Num], fused: bool = False) -> V:
    """cs[0] + cs[1]*x + ... by Horner's rule, ((cs[-1]*x + cs[-2])*x + ...) + cs[0],
    each step a multiply and an add, or one ``fma`` where ``fused``."""
    acc = f.val(cs[-1])
    for c in reversed(cs[:-1]):
        acc = f.fma(acc, x, c) if fused else acc * x + c
    return acc


# ---- exp ------------------------------------------------------------------------------
def exp32(f: Scalar, x: V) -> V:
    """exp in float32: Cody-Waite reduction, a degree-6 polynomial in fused steps, 2**n as
    two factors so subnormal results round once (scalar_math.exp32, 1 ulp)."""
    # Each clamp keeps x where its compare is false (a vminps and a vmaxps), so a nan goes
    # through the arithmetic and out of the scaling as a nan, with no compare and blend at
    # the end: with native_ldexp n is read from v's bits (defined for a nan, where fptosi is
    # not), and the two factors are multiplied as floats (adding n into p's bits, as this
    # did until 2026-12-05, could turn a nan into a number, so a select returned x: two
    # instructions a vector more on AVX2).
    h = f.sel(x > _E32_HI, _E32_HI, x)
    h = f.sel(h < _E32_LO, _E32_LO, h)
    v = f.fma(h, _LOG2E32, _MAGIC32)  # MAGIC + n, n = round(h / ln2)
    nf = v - _MAGIC32
    r = f.fma(nf, -_LN2HI32, h)  # exact (Cody-Waite)
    r = f.fma(nf, -_LN2LO32, r)
    p = poly(f, r, (1.0, 1.0, *_EX32), fused=True)
    if f.native_ldexp:
        return f.ldexp_magic(p, v)
    # 2**n = 2**(n -+ 64) * 2**(+-64): the first factor always normal, one final rounding
    down = nf < 0.0
    return (p * f.pow2_magic(v - f.sel(down, -_SHIFT32, _SHIFT32))) * f.sel(down, _DOWN32, _UP32)


def _exp32_mid(f: Scalar, hi: V, lo: V) -> V:
    """exp(hi + lo) for |hi + lo| < 87 and small lo (Cephes' polynomial)."""
    nf = ((hi + lo) * _LOG2E32 + _MAGIC32) - _MAGIC32
    r = (hi - nf * _LN2HI32) + (lo - nf * _LN2LO32)
    q = poly(f, r, _CEPHES_EXP32)
    return (1.0 + (r + (r * r) * q)) * f.pow2(nf)


def _exp64_hl(f: Scalar, hi: V, lo: Num) -> V:
    """exp(hi + lo) for small lo; 2**n applied as two normal factors made from the magic
    roundings' bits, or by one ``ldexp`` where native: a nan hi goes through either as a
    nan (its clamps keep hi where their compare is false)."""
    h = f.sel(hi > _E64_HI, _E64_HI, hi)
    h = f.sel(h < _E64_LO, _E64_LO, h)
    v = (h + lo) * _LOG2E64 + _MAGIC64
    nf = v - _MAGIC64
    r = (h - nf * _LN2HI64) + (lo - nf * _LN2LO64)
    p = 1.0 + (r + (r * r) * poly(f, r, _EXP64, fused=True))
    if f.native_ldexp:
        return f.ldexp_magic(p, v)
    # 2**n = 2**n1 * 2**(n - n1), n1 = round(n / 2), both normal. Each factor from the bits
    # of a MAGIC + k (``pow2_magic``): converting n with fptosi, as this did until
    # 2026-12-05, was poison for a nan, so exp64 selected a nan argument to 0 and back.
    v1 = nf * 0.5 + _MAGIC64
    return (p * f.pow2_magic(v1)) * f.pow2_magic(v - (v1 - _MAGIC64))


def exp64(f: Scalar, x: V) -> V:
    """exp in float64 (scalar_math.exp64, 1 ulp); a nan goes through as that nan."""
    return _exp64_hl(f, x, 0.0)


# ---- expm1 ----------------------------------------------------------------------------
def _expm1(f: Scalar, x: V, hi_: float, lo_: float, big_: float, coeffs: Sequence[Num]) -> V:
    """expm1 = (s - 1) + s*r + s*tail, s = 2**n, summed with its rounding error kept; for
    the largest n (s would overflow) 2 * (2**(n-1) * (1 + em) - 1/2)."""
    magic, log2e, ln2hi, ln2lo = ((_MAGIC32, _LOG2E32, _LN2HI32, _LN2LO32) if f.width == 32
                                  else (_MAGIC64, _LOG2E64, _LN2HI64, _LN2LO64))
    h = f.sel(x > hi_, hi_, x)
    h = f.sel(h < lo_, lo_, h)
    h = f.sel(x == x, h, 0.0)
    nf = (h * log2e + magic) - magic
    hi = h - nf * ln2hi  # exact
    lo = nf * ln2lo
    r = hi - lo
    c = (hi - r) - lo
    tail = (r * r) * poly(f, r, coeffs, fused=True) + (c + c * r)  # expm1(r + c) = r + tail
    big = nf > big_
    s = f.pow2(f.sel(big, nf - 1.0, nf))
    a = s - f.sel(big, 0.5, 1.0)
    b = s * r
    hi = a + b  # |a| >= |b|: err is the exact rounding error of hi
    err = b - (hi - a)
    y = (hi + (err + s * tail)) * f.sel(big, 2.0, 1.0)
    y = f.sel(x == 0.0, x, y)  # keeps -0
    return f.sel(x == x, y, x)


def expm1_32(f: Scalar, x: V) -> V:
    """expm1 in float32 (scalar_math.expm1_32, 1 ulp)."""
    return _expm1(f, x, _EM32_HI, _EM32_LO, _BIG32, _EXPM1_32)


def expm1_64(f: Scalar, x: V) -> V:
    """expm1 in float64 (scalar_math.expm1_64, 1 ulp)."""
    return _expm1(f, x, _EM64_HI, _EM64_LO, 1023.5, _EXP64)


# ---- log, log1p -----------------------------------------------------------------------
def _log_kernel(f: Scalar, m: V, k: V, c: V | None = None) -> V:
    """log(m * 2**k) (+ c, a low-order term) for m in [sqrt(1/2), sqrt(2)) (fdlibm)."""
    lg, l2hi, l2lo = (_LG32, _L2HI32, _L2LO32) if f.width == 32 else (_LG64, _LN2HI64, _LN2LO64)
    fm = m - 1.0
    s = f.div(fm, 2.0 + fm)
    z = s * s
    w = z * z
    t1 = w * poly(f, w, lg[1::2], fused=True)
    t2 = z * poly(f, w, lg[0::2], fused=True)
    hfsq = 0.5 * fm * fm
    lo = k * l2lo if c is None else k * l2lo + c
    return k * l2hi - ((hfsq - (s * (hfsq + (t2 + t1)) + lo)) - fm)


def _log(f: Scalar, x: V) -> V:
    """log in float32 or float64: -inf at 0, nan below (scalar_math.log32 / log64, 1 ulp)."""
    tiny, scale, scale_k = (_TINY32, _SCALE32, _SCALE32_K) if f.width == 32 else (_TINY64, _SCALE64, 54.0)
    sub = x < tiny  # subnormal: scaled into the normal range first
    xs = f.sel(sub, x * scale, x)
    m, k = f.split_log(xs)
    k = f.sel(sub, k - scale_k, k)
    y = _log_kernel(f, m, k)
    y = f.sel(x < np.inf, y, x)  # +inf, nan
    y = f.sel(x == 0.0, -np.inf, y)
    return f.sel(x < 0.0, np.nan, y)


def _log1p(f: Scalar, x: V) -> V:
    """log(1 + x) as log(u) + c/u, u = 1 + x rounded, c = 1 + x - u its rounding error
    (fdlibm's log1p). c is computed exactly: as x - (u - 1) below u = 2 (u - 1 exact), as
    1 - (u - x) from there (u - x exact); fdlibm switches at sqrt(2) instead, where
    u - x can round, which cost 2 ulp on [0.41, 0.65]. For x > -1, u >= 2**-24 (float32)
    or 2**-53: never subnormal."""
    u = 1.0 + x
    m, k = f.split_log(u)
    c = f.div(f.sel(u < 2.0, x - (u - 1.0), 1.0 - (u - x)), u)
    y = _log_kernel(f, m, k, c)
    y = f.sel(x < np.inf, y, x)  # +inf, nan
    y = f.sel(x == 0.0, x, y)  # keeps -0
    y = f.sel(x == -1.0, -np.inf, y)
    return f.sel(x < -1.0, np.nan, y)


# ---- tanh -----------------------------------------------------------------------------
def tanh32(f: Scalar, x: V) -> V:
    """x * P(x**2) / Q(x**2), degrees 4 and 4 (XLA's form, 5 ulp), +-1 past 8.125."""
    x2 = x * x
    num = poly(f, x2, (1.0, *_FTP), fused=True)
    den = poly(f, x2, (1.0, *_FTQ), fused=True)
    return f.sel(f.fabs(x) > _FT_ONE, f.copysign(1.0, x), x * f.div(num, den))


def tanh64(f: Scalar, x: V) -> V:
    """glibc's (fdlibm's) split on a = |x|: below 1, -t / (t + 2) with t = expm1(-2a); from 1,
    1 - 2 / (t + 2) with t = expm1(2a), whose quotient is below a quarter, so that its
    rounding reaches the result a quarter as large (-t / (t + 2) near 1 had been 3 ulp off).
    One expm1 and one division, the branch chosen by selects."""
    a = f.fabs(x)
    a = f.sel(a > 40.0, 40.0, a)
    far = a >= 1.0
    t = expm1_64(f, f.sel(far, 2.0 * a, -2.0 * a))
    q = f.div(f.sel(far, 2.0, -t), t + 2.0)
    return f.copysign(f.sel(far, 1.0 - q, q), x)


# ---- erf ------------------------------------------------------------------------------
def erf32(f: Scalar, x: V) -> V:
    """erf in float32: x + x*P(x**2) below 0.921875, 1 - exp(-x**2 + G(|x| - 2.4)) up to
    3.921875, +-1 beyond (scalar_math.erf32, 1 ulp)."""
    a = f.fabs(x)
    a = f.sel(a > _ERF32_U, _ERF32_U, a)
    a = f.sel(a == a, a, 0.0)  # nan: computed as 0, returned as x below
    a2 = a * a
    small = a + a * poly(f, a2, _EP32)
    g = poly(f, a - _ERF32_SHIFT, _EG32)
    z = f.trunc_low(a)
    large = 1.0 - _exp32_mid(f, -(z * z), (z - a) * (z + a) + g)
    y = f.sel(a < _ERF32_T, small, large)
    y = f.sel(a >= _ERF32_U, 1.0, y)
    return f.sel(x == x, f.copysign(y, x), x)


def erf64(f: Scalar, x: V) -> V:
    """fdlibm's three ranges, their numerators and denominators selected before one division."""
    a = f.fabs(x)
    a = f.sel(a > 6.0, 6.0, a)
    a = f.sel(a == a, a, 0.0)
    ia, ib, ic = a < 0.84375, a < 1.25, a < _ERF_C
    z = a * a
    pa, qa = poly(f, z, _EFX_P), poly(f, z, (1.0, *_EFX_Q))
    s = a - 1.0
    pb, qb = poly(f, s, _ERX_P), poly(f, s, (1.0, *_ERX_Q))
    t = f.div(1.0, z)
    pc = poly(f, t, [f.sel(ic, r, q) for r, q in zip(_ERFC_RA, _ERFC_RB, strict=True)])
    qc = poly(f, t, [1.0] + [f.sel(ic, r, q) for r, q in zip(_ERFC_SA, _ERFC_SB, strict=True)])
    rat = f.div(f.sel(ia, pa, f.sel(ib, pb, pc)), f.sel(ia, qa, f.sel(ib, qb, qc)))
    zt = f.trunc_low(a)
    e = _exp64_hl(f, -(zt * zt) - 0.5625, (zt - a) * (zt + a) + rat)
    y = f.sel(ia, a + a * rat, f.sel(ib, _ERX + rat, 1.0 - f.div(e, a)))
    y = f.sel(a >= 6.0, 1.0, y)
    return f.sel(x == x, f.copysign(y, x), x)


# ---- hyperbolic functions and their inverses ---------------------------------------------
# fdlibm's formulas on the ports above, with selects for its branches (so they vectorize);
# flowjit's own. Against a
# long double reference they stay within 2 ulp in float32 and float64
# (tests/tracer/test_elementwise_extras.py).
_LN2 = 0.6931471805599453
# Past SMALL_EXP, exp(-|x|) no longer counts next to exp(|x|) (fdlibm: 22, and 9 in float32);
# past LN_MAX, exp(|x|) overflows before sinh and cosh do; past BIG, x*x would overflow.
_HYPER = {32: (f32(9.0), f32(88.0), f32(2.0 ** 14)), 64: (22.0, 709.0, 2.0 ** 28)}


def _exps(f: Scalar) -> tuple[Callable[[Scalar, V], V], Callable[[Scalar, V], V]]:
    return (exp32, expm1_32) if f.width == 32 else (exp64, expm1_64)


def _sqrt(f: Scalar, x: Num) -> V:
    return f._intrinsic("llvm.sqrt", x)


def _half_exp(f: Scalar, a: V) -> V:
    """exp(a) / 2 for a >= 0 up to where it overflows: exp(a/2)**2 / 2 past LN_MAX."""
    ln_max = _HYPER[f.width][1]
    far = a < ln_max
    e = _exps(f)[0](f, f.sel(far, a, a * 0.5))
    return f.sel(far, e * 0.5, (e * 0.5) * e)


def sinh(f: Scalar, x: V) -> V:
    """sinh: from t = expm1(|x|) below SMALL_EXP ((2t - t*t/(t+1)) / 2 below 1, (t + t/(t+1)) / 2
    above), exp(|x|) / 2 beyond; the sign of x (so -0 stays -0)."""
    small_exp = _HYPER[f.width][0]
    a = f.fabs(x)
    t = _exps(f)[1](f, f.sel(a < small_exp, a, small_exp))
    # one division, its dividend chosen: t*t/(t+1) rounded once (t * (t/(t+1)) had been 2 ulp)
    q = f.div(f.sel(a < 1.0, t * t, t), t + 1.0)
    near = (2.0 * t - q) * 0.5
    mid = (t + q) * 0.5
    y = f.sel(a < 1.0, near, f.sel(a < small_exp, mid, _half_exp(f, a)))
    return f.copysign(y, x)


def cosh(f: Scalar, x: V) -> V:
    """cosh: 1 + t*t / (2(1 + t)), t = expm1(|x|), below ln(2)/2; exp(|x|)/2 + 1/(2 exp(|x|))
    below SMALL_EXP; exp(|x|) / 2 beyond."""
    small_exp = _HYPER[f.width][0]
    exp, expm1 = _exps(f)
    a = f.fabs(x)
    t = expm1(f, f.sel(a < 0.34657359027997264, a, 0.0))
    near = 1.0 + f.div(t * t, (1.0 + t) * 2.0)
    e = exp(f, f.sel(a < small_exp, a, 0.0))
    mid = e * 0.5 + f.div(0.5, e)
    return f.sel(a < 0.34657359027997264, near, f.sel(a < small_exp, mid, _half_exp(f, a)))


def asinh(f: Scalar, x: V) -> V:
    """asinh as one log1p (a = |x|): of a + a*a / (1 + sqrt(1 + a*a)) up to 2; past it
    log(2a + 1/(a + sqrt(a*a + 1))) as log1p((2a - 1) + 1/(a + sqrt(a*a + 1))) (2a - 1 exact)
    up to BIG; log(a) + ln 2 beyond, as log1p(a - 1) + ln 2; the sign of x. The branches
    share the log1p and the division (selects choose their operands)."""
    big = _HYPER[f.width][2]
    a = f.fabs(x)
    a2 = a * a
    r = _sqrt(f, a2 + 1.0)
    near, far = a <= 2.0, a > big
    q = f.div(f.sel(near, a2, 1.0), f.sel(near, 1.0 + r, a + r))
    u = f.sel(near, a + q, f.sel(far, a - 1.0, (2.0 * a - 1.0) + q))
    y = _log1p(f, u) + f.sel(far, _LN2, 0.0)
    return f.copysign(y, x)


def acosh(f: Scalar, x: V) -> V:
    """acosh as one log1p: of t + sqrt(2t + t*t), t = x - 1, up to 2; past it
    log(2x - 1/(x + sqrt(x*x - 1))) as log1p((2x - 1) - 1/(x + sqrt(x*x - 1))) up to BIG;
    log(x) + ln 2 beyond, as log1p(x - 1) + ln 2; NaN below 1. One square root, one
    division (selects choose their operands)."""
    big = _HYPER[f.width][2]
    t = x - 1.0
    near, far = x <= 2.0, x > big
    s = _sqrt(f, f.sel(near, 2.0 * t + t * t, x * x - 1.0))
    u = f.sel(near, t + s, f.sel(far, t, (2.0 * x - 1.0) - f.div(1.0, x + s)))
    y = _log1p(f, u) + f.sel(far, _LN2, 0.0)
    return f.sel(x < 1.0, np.nan, y)


def atanh(f: Scalar, x: V) -> V:
    """atanh: log1p(2a + 2a*a / (1 - a)) / 2 below 1/2, log1p(2a / (1 - a)) / 2 above (a = |x|:
    +inf at 1, NaN past it through log1p's domain); the sign of x."""
    a = f.fabs(x)
    d = 1.0 - a
    near = _log1p(f, 2.0 * a + f.div((2.0 * a) * a, d))
    far = _log1p(f, f.div(2.0 * a, d))
    y = f.sel(a < 0.5, near, far) * 0.5
    return f.copysign(y, x)


# ---- inverse trigonometric functions ----------------------------------------------------
# fdlibm's asin, acos and atan in float64 (FreeBSD msun, the SunPro notice above), its
# branches as selects; float32 evaluates them in float64 and rounds once, so its results
# are within 0.5 ulp and a bit (the float64 ones within 1 ulp, fdlibm's bound).
_PIO2_HI, _PIO2_LO = 1.57079632679489655800e+00, 6.12323399573676603587e-17
_PIO4_HI, _PI = 7.85398163397448278999e-01, 3.14159265358979311600e+00
_AS_P = (1.66666666666666657415e-01, -3.25565818622400915405e-01, 2.01212532134862925881e-01,
         -4.00555345006794114027e-02, 7.91534994289814532176e-04, 3.47933107596021167570e-05)
_AS_Q = (1.0, -2.40339491173441421878e+00, 2.02094576023350569471e+00, -6.88283971605453293030e-01,
         7.70381505559019352791e-02)
_ATAN_HI = (4.63647609000806093515e-01, 7.85398163397448278999e-01, 9.82793723247329054082e-01,
            1.57079632679489655800e+00)
_ATAN_LO = (2.26987774529616870924e-17, 3.06161699786838301793e-17, 1.39033110312309984516e-17,
            6.12323399573676603587e-17)
_AT_ODD = (3.33333333333329318027e-01, 1.42857142725034663711e-01, 9.09088713343650656196e-02,
           6.66107313738753120669e-02, 4.97687799461593236017e-02, 1.62858201153657823623e-02)
_AT_EVEN = (-1.99999999998764832476e-01, -1.11111104054623557880e-01, -7.69187620504482999495e-02,
            -5.83357013379057348645e-02, -3.65315727442169155270e-02)


def _asin_r(f: Scalar, t: V) -> V:
    """fdlibm's R(t) = t * P(t) / Q(t), asin(x) = x + x * R(x*x) near 0."""
    return f.div(t * poly(f, t, _AS_P, fused=True), poly(f, t, _AS_Q, fused=True))


def _asin64(f: Scalar, x: V) -> V:
    a = f.fabs(x)
    near = x + x * _asin_r(f, x * x)
    t = (1.0 - a) * 0.5
    s = _sqrt(f, t)
    r = _asin_r(f, t)
    top = _PIO2_HI - (2.0 * (s + s * r) - _PIO2_LO)  # 0.975 <= |x| <= 1
    w = f.trunc_low(s)  # s = w + c with w*w exact
    c = f.div(t - w * w, s + w)
    mid = _PIO4_HI - ((2.0 * s * r - (_PIO2_LO - 2.0 * c)) - (_PIO4_HI - 2.0 * w))
    return f.sel(a < 0.5, near, f.copysign(f.sel(a < 0.975, mid, top), x))


def _acos64(f: Scalar, x: V) -> V:
    near = _PIO2_HI - (x - (_PIO2_LO - x * _asin_r(f, x * x)))
    z = (1.0 - f.fabs(x)) * 0.5
    s = _sqrt(f, z)
    r = _asin_r(f, z)
    low = _PI - 2.0 * (s + (r * s - _PIO2_LO))  # x < -0.5
    w = f.trunc_low(s)
    c = f.div(z - w * w, s + w)
    high = 2.0 * (w + (r * s + c))  # x > 0.5
    high = f.sel(x == 1.0, 0.0, high)  # c is 0/0 there
    return f.sel(x < -0.5, low, f.sel(x > 0.5, high, near))


def _atan64(f: Scalar, x: V) -> V:
    a = f.fabs(x)
    # fdlibm's intervals: atan(a) = atan(hi) + atan((a - c) / (1 + c a)), c = 1/2, 1, 3/2, inf
    i0, i1, i2, i3 = a < 0.6875, a < 1.1875, a < 2.4375, a < 0.4375
    num = f.sel(i3, a, f.sel(i0, 2.0 * a - 1.0, f.sel(i1, a - 1.0, f.sel(i2, a - 1.5, -1.0))))
    den = f.sel(i3, 1.0, f.sel(i0, 2.0 + a, f.sel(i1, a + 1.0, f.sel(i2, 1.0 + 1.5 * a, a))))
    hi = f.sel(i3, 0.0, f.sel(i0, _ATAN_HI[0], f.sel(i1, _ATAN_HI[1], f.sel(i2, _ATAN_HI[2], _ATAN_HI[3]))))
    lo = f.sel(i3, 0.0, f.sel(i0, _ATAN_LO[0], f.sel(i1, _ATAN_LO[1], f.sel(i2, _ATAN_LO[2], _ATAN_LO[3]))))
    r = f.div(num, den)
    z = r * r
    w = z * z
    tail = z * poly(f, w, _AT_ODD, fused=True) + w * poly(f, w, _AT_EVEN, fused=True)
    y = hi - ((r * tail - lo) - r)
    return f.copysign(y, x)


_PI_LO = 1.2246467991473531772e-16   # pi - _PI


def _atan2_64(f: Scalar, y: V, x: V) -> V:
    """fdlibm's atan2 (e_atan2.c) on the atan port: atan(|y / x|), pi/2 where |y| is 2^60
    times |x| or more, 0 where |x| is (x < 0), then the quadrant by the signs (pi - (z - pi_lo)
    for x < 0, y's sign); its special values (signed zeros, infinities, NaN) as IEEE's."""
    ib = f.b
    ay, ax = f.fabs(y), f.fabs(x)
    # The exponents' difference, as fdlibm reads it from the high words.
    k = ib.sub(ib.lshr(f._bits(ay), ir.Constant(f.ity, f.mant)), ib.lshr(f._bits(ax), ir.Constant(f.ity, f.mant)))
    big = Bool(f, ib.icmp_signed(">", k, ir.Constant(f.ity, 60)))
    x_neg = Bool(f, ib.icmp_signed("<", f._bits(x), ir.Constant(f.ity, 0)))
    small = Bool(f, ib.and_(ib.icmp_signed("<", k, ir.Constant(f.ity, -60)), x_neg.v))
    z = f.sel(big, _PIO2_HI + 0.5 * _PI_LO, f.sel(small, 0.0, _atan64(f, f.div(ay, ax))))
    turned = Bool(f, ib.and_(x_neg.v, ib.not_(big.v)))
    out = f.copysign(f.sel(turned, _PI - (z - _PI_LO), z), y)
    y_inf, x_inf = ay == np.inf, ax == np.inf
    quarter = f.sel(x_neg, 3 * math.pi / 4, math.pi / 4)
    out = f.sel(Bool(f, ib.or_(y_inf.v, (ax == 0.0).v)), f.copysign(_PIO2_HI, y), out)
    out = f.sel(Bool(f, ib.and_(y_inf.v, x_inf.v)), f.copysign(quarter, y), out)
    out = f.sel(ay == 0.0, f.sel(x_neg, f.copysign(_PI, y), y), out)
    return f.sel(Bool(f, ib.and_((x == x).v, (y == y).v)), out, x + y)


# ---- sin, cos ------------------------------------------------------------------------------
# Two argument reductions, both computed (a select picks one: branch-free, so a loop over them
# vectorizes; libm's scalar call had kept every loop holding a sine scalar). Up to
# 2**20 * pi/2, fdlibm's medium reduction (e_rem_pio2.c: n = floor(|x| * 2/pi + 1/2), |x| - n * pi/2
# with pi/2 in three 33-bit pieces and their tails), all three rounds always (fdlibm runs
# the second and third only after a cancellation, where they are needed; elsewhere they
# refine what is already exact to 85 bits). Beyond it, Payne and Hanek's: x * 1/(2 pi)
# modulo 1 from the 212 bits of 1/(2 pi) that matter at x's exponent (the bits above them
# add whole turns), each of four 53-bit windows multiplied exactly (``_two_prod``), their
# fractions summed in double-double. Then fdlibm's kernels (k_sin.c, k_cos.c) on the reduced
# argument y0 + y1, |y0| <= pi/4, and the quadrant.
_INVPIO2 = 6.36619772367581382433e-01
_PIO2_1, _PIO2_1T = 1.57079632673412561417e+00, 6.07710050650619224932e-11
_PIO2_2, _PIO2_2T = 6.07710050630396597660e-11, 2.02226624879595063154e-21
_PIO2_3, _PIO2_3T = 2.02226624871116645580e-21, 8.47842766036889956997e-32
MEDIUM = 1647099.0           # fdlibm's bound, 2**20 * pi/2 truncated (high word 0x413921fb)
_KSIN = (-1.66666666666666324348e-01, 8.33333333332248946124e-03, -1.98412698298579493134e-04,
         2.75573137070700676789e-06, -2.50507602534068634195e-08, 1.58969099521155010221e-10)
_KCOS = (4.16666666666666019037e-02, -1.38888888888741095749e-03, 2.48015872894767294178e-05,
         -2.75573143513906633035e-07, 2.08757232129817482790e-09, -1.13596475577881948265e-11)
_TWO_PI_HI, _TWO_PI_LO = 6.283185307179586, 2.4492935982947064e-16
_TINY_TRIG = 2.0 ** -27       # below it sin x = x and cos x = 1, rounded
_SPLIT = 134217729.0          # 2**27 + 1: Dekker's split
_TURN_WINDOWS, _TURN_STEP, _TURN_ROWS = 4, 32, 31   # the table: a row per 32 exponents, 4 windows + a scale


@functools.cache
def _turns_table() -> tuple[float, ...]:
    """Row k (x's exponent e - 52 in [32k, 32k + 31], k = 0 below): 1/(2 pi)'s bits 32k + 1
    on in four 53-bit windows, each scaled by 2**(32k) (so all four are normal floats), then
    2**-(32k), the exact scale that brings x to an integer below 2**84. From pi to 1400 bits
    by Machin's formula in Python integers (exact: each window's 53 bits are what they are)."""
    bits, n = 1400, 1300
    one = 1 << (bits + 64)

    def atan_inv(x: int) -> int:       # atan(1/x) in fixed point
        total, term, k = 0, one // x, 0
        while term:
            total += term // (2 * k + 1) * (-1 if k % 2 else 1)
            term //= x * x
            k += 1
        return total
    pi = (16 * atan_inv(5) - 4 * atan_inv(239)) >> 64          # floor(pi * 2**bits), +-1
    turn = (1 << (n + bits)) // (2 * pi)                         # 1/(2 pi) * 2**n
    rows: list[float] = []
    for k in range(_TURN_ROWS):
        j0 = _TURN_STEP * k + 1
        for i in range(_TURN_WINDOWS):
            last = j0 + 53 * i + 52                              # the window's last bit
            rows.append(math.ldexp((turn >> (n - last)) & ((1 << 53) - 1), -53 * (i + 1)))
        rows.append(math.ldexp(1.0, -_TURN_STEP * k))
    return tuple(rows)


def _two_sum(a: V, b: V) -> tuple[V, V]:
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def _split(x: V) -> tuple[V, V]:
    c = x * _SPLIT
    hi = c - (c - x)
    return hi, x - hi


def _two_prod(a: V, b: V) -> tuple[V, V]:
    """a * b as p + e exactly: e = fma(a, b, -p) where the target fuses (``native_fma``), else
    Dekker's product; both exact, so every target and tier gives these bits."""
    p = a * b
    if a.f.native_fma:
        return p, a.f._intrinsic("llvm.fma", a, b, -p)
    ah, al = _split(a)
    bh, bl = _split(b)
    return p, ((ah * bh - p) + ah * bl + al * bh) + al * bl


def _turns_row(f: Scalar, x: V, rows: int) -> list[V]:
    """The table's row of x's exponent, of the first ``rows`` (x's type's exponents need no
    more: 3 for a float32's): its four windows and its scale. Up to four rows chosen by
    selects; more gathered from a constant array (a gather a window once vectorized)."""
    b, i64 = f.b, ir.IntType(64)
    table = _turns_table()
    e = b.and_(b.lshr(f._bits(x), ir.Constant(i64, 52)), ir.Constant(i64, 0x7FF))
    s = b.sub(e, ir.Constant(i64, 1075))
    zero, last = ir.Constant(i64, 0), ir.Constant(i64, rows - 1)
    k = b.ashr(b.select(b.icmp_signed("<", s, zero), zero, s), ir.Constant(i64, _TURN_STEP.bit_length() - 1))
    k = b.select(b.icmp_signed(">", k, last), last, k)
    width = _TURN_WINDOWS + 1
    if rows <= 4:
        out = [f.val(table[(rows - 1) * width + c]) for c in range(width)]
        for row in reversed(range(rows - 1)):
            on = Bool(f, b.icmp_signed("==", k, ir.Constant(i64, row)))
            out = [f.sel(on, table[row * width + c], v) for c, v in enumerate(out)]
        return out
    found = b.module.globals.get("fj.turns")
    if found is None:
        aty = ir.ArrayType(_F64, len(table))
        found = ir.GlobalVariable(b.module, aty, "fj.turns")
        found.linkage, found.global_constant = "internal", True
        found.initializer = ir.Constant(aty, [ir.Constant(_F64, v) for v in table])
    at = b.mul(k, ir.Constant(i64, width))
    return [V(f, b.load(b.gep(found, [ir.Constant(ir.IntType(32), 0), b.add(at, ir.Constant(i64, c))],
                              inbounds=True))) for c in range(width)]


def _reduce_large(f: Scalar, x: V, rows: int) -> tuple[V, V, V]:
    """(q, y0, y1): x = q pi/2 + y0 + y1, |y0| <= pi/4, q in [-2, 2] (Payne-Hanek, above)."""
    t0, t1, t2, t3, scale = _turns_row(f, x, rows)
    a = x * scale                                    # an integer below 2**84 (or x itself below 2**52)
    h0, l0 = _two_prod(a, t0)
    h1, l1 = _two_prod(a, t1)
    h2, l2 = _two_prod(a, t2)
    h3 = a * t3
    s, err = h0 - f._intrinsic("llvm.rint", h0), l2 + h3    # whole turns dropped, exactly
    for t in (l0 - f._intrinsic("llvm.rint", l0), h1 - f._intrinsic("llvm.rint", h1), l1, h2):
        s, e = _two_sum(s, t)
        err = err + e
    s = s - f._intrinsic("llvm.rint", s)
    hi, lo = _two_sum(s, err)                        # turns, |hi| <= 1/2
    q = f._intrinsic("llvm.rint", hi * 4.0)
    rh, rl = _two_sum(hi - q * 0.25, lo)             # |rh| <= 1/8 turn
    p, pe = _two_prod(rh, f.val(_TWO_PI_HI))
    y0, y1 = _two_sum(p, pe + (rh * _TWO_PI_LO + rl * _TWO_PI_HI))
    return q, y0, y1


def _reduce_medium(f: Scalar, t: V) -> tuple[V, V, V]:
    """(n, y0, y1): t = n pi/2 + y0 + y1 for 0 <= t <= MEDIUM (fdlibm's three rounds)."""
    fn = f._intrinsic("llvm.floor", t * _INVPIO2 + 0.5)
    r = t - fn * _PIO2_1                             # exact: fn < 2**20, pi/2's first 33 bits
    for piece, tail in ((_PIO2_2, _PIO2_2T), (_PIO2_3, _PIO2_3T)):
        u = r
        w = fn * piece
        r = u - w
        w = fn * tail - ((u - r) - w)
    y0 = r - w
    return fn, y0, (r - y0) - w


def _sincos_reduced(f: Scalar, x: V, rows: int) -> tuple[V, V, V, V]:
    """(sin, cos of the reduced argument, x's quadrant 0-3 as a float, |x|) for x of
    ``rows`` rows of the table's (``_turns_row``); ``rows`` 0: x is known to be at most
    MEDIUM in magnitude (``medium_trig``), and only the medium reduction runs."""
    t = f.fabs(x)
    medium = t <= MEDIUM                            # false for inf and NaN: the large path's NaN
    n, m0, m1 = _reduce_medium(f, f.sel(medium, t, 0.0) if rows else t)
    neg = x < 0.0
    n, m0, m1 = f.sel(neg, -n, n), f.sel(neg, -m0, m0), f.sel(neg, -m1, m1)
    if rows:
        q, l0, l1 = _reduce_large(f, x, rows)
        q, y0, y1 = f.sel(medium, n, q), f.sel(medium, m0, l0), f.sel(medium, m1, l1)
    else:
        q, y0, y1 = n, m0, m1
    z = y0 * y0
    v = z * y0
    r = poly(f, z, _KSIN[1:], fused=True)
    sin = y0 - ((z * (0.5 * y1 - v * r) - y1) - v * _KSIN[0])
    w = z * z
    r = z * poly(f, z, _KCOS[:3], fused=True) + w * w * poly(f, z, _KCOS[3:], fused=True)
    hz = 0.5 * z
    w = 1.0 - hz
    cos = w + (((1.0 - w) - hz) + (z * r - y0 * y1))
    return sin, cos, q - 4.0 * f._intrinsic("llvm.floor", q * 0.25), t


def _quadrant(f: Scalar, sin: V, cos: V, q: V, odd: bool) -> V:
    """sin (odd) or cos of q pi/2 + y from sin y and cos y."""
    ib = f.b
    swap = Bool(f, ib.or_((q == 1.0).v, (q == 3.0).v))
    base = f.sel(swap, cos, sin) if odd else f.sel(swap, sin, cos)
    flip = (q >= 2.0) if odd else Bool(f, ib.or_((q == 1.0).v, (q == 2.0).v))
    return f.sel(flip, -base, base)


def _sin_or_cos(odd: bool, rows: int) -> Callable[[Scalar, V], V]:
    """sin (odd) or cos of x, whose table rows are the first ``rows``."""
    def trig(f: Scalar, x: V) -> V:
        s, c, q, t = _sincos_reduced(f, x, rows)
        return f.sel(t < _TINY_TRIG, x if odd else 1.0, _quadrant(f, s, c, q, odd))
    return trig


# A float32's exponent is below 128: its table rows are the first three (x < 2**128 = 2**(76 + 52)).
_F32_ROWS = 3

# float32's sine and cosine, in float64: a float32 has 24 bits, so up to 2^28 pi/2 one
# reduction round is enough (FreeBSD's __ieee754_rem_pio2f, the SunPro notice above: n pi/2
# with pi/2's first 25 bits, exact for n <= 2^28, less n times the rest), where float64's
# takes three (its 53-bit arguments come nearer a multiple of pi/2); then fdlibm's float64
# kernels. Rounded once, the results are the float64 functions' rounded on every float32 in
# [2^-12, 1e9] (checked exhaustively) at 0.6x the time of the float64 reduction. Past the
# bound, Payne and Hanek's reduction as float64's.
_PIO2F_1, _PIO2F_1T = 1.57079631090164184570e+00, 1.58932547735281966916e-08
MEDIUM32 = 421657428.0                # 2^28 pi/2, truncated


def _sin_or_cos32(odd: bool, rows: int) -> Callable[[Scalar, V], V]:
    """float32's sin (odd) or cos of x, in float64 (``_via_f64``); ``rows`` 0: x is known to
    be at most MEDIUM in magnitude (``medium_trig``), and the large reduction is left out."""
    def trig(f: Scalar, x: V) -> V:
        t = f.fabs(x)
        medium = t <= MEDIUM32                       # false for inf and NaN: the large path's NaN
        n = f._intrinsic("llvm.rint", (f.sel(medium, t, 0.0) if rows else t) * _INVPIO2)
        y = (t - n * _PIO2F_1) - n * _PIO2F_1T
        neg = x < 0.0
        q, y = f.sel(neg, -n, n), f.sel(neg, -y, y)
        if rows:
            lq, l0, l1 = _reduce_large(f, x, rows)
            q, y = f.sel(medium, q, lq), f.sel(medium, y, l0 + l1)
        z = y * y
        sin = y + (z * y) * (_KSIN[0] + z * poly(f, z, _KSIN[1:], fused=True))
        w = z * z
        cos = (1.0 - 0.5 * z) + z * (z * poly(f, z, _KCOS[:3], fused=True) + w * w * poly(f, z, _KCOS[3:], fused=True))
        out = _quadrant(f, sin, cos, q - 4.0 * f._intrinsic("llvm.floor", q * 0.25), odd)
        return f.sel(t < _TINY_TRIG, x if odd else 1.0, out)
    return trig


def _via_f64(fn: Callable[..., V]) -> Callable[..., V]:
    """fn, a float64 algorithm (of any count of arguments), for float32 too: widened,
    computed, rounded once."""
    def run(f: Scalar, *xs: V) -> V:
        if f.width == 64:
            return fn(f, *xs)
        g = Scalar(f.b, _F64, f.native_ldexp, f.native_fma)
        return V(f, f.b.fptrunc(fn(g, *(V(g, f.b.fpext(x.v, _F64)) for x in xs)).v, f.t))
    run.through_f64 = True   # F16_FROM_F64: float16 rounds once from it too
    return run


# ---- cbrt -----------------------------------------------------------------------------------
# Without a division (a vector division issues once every 16 cycles: fdlibm's four made the
# loop divide-bound): y = v^(-1/3) by Newton's iteration y (4/3 - (v/3) y^3), from a first
# guess to 4 bits (the high word's exponent divided by 3, from a constant tuned for it), five
# steps to 64 bits; then t = v y^2 and one Newton step on the cube from the residual v - t^3,
# exact (t * t and t^2 * t with their rounding errors, _two_prod; v - t^3 by Sterbenz), times
# 1/(3 t^2) = y^2 / 3: the root correctly rounded (no miss found in 330,000 doubles checked
# exactly; glibc's misses 0.6%). v is |x| scaled by 2^(+-300) below 2^-900 and past 2^900 (exact), so that
# t^3 and its error stay normal; the root is scaled back by 2^(-+100).
_CBRT_GUESS = 0x553EF0FF   # the high word of the inverse cube root's first guess


def _cbrt64(f: Scalar, x: V) -> V:
    """cbrt(x) in float64: x itself for +-0, +-inf and NaN (quieted)."""
    b, i64 = f.b, f.ity
    a = f.fabs(x)
    small, large = a < 2.0 ** -900, a > 2.0 ** 900
    v = a * f.sel(small, 2.0 ** 300, f.sel(large, 2.0 ** -300, 1.0))
    high = b.trunc(b.lshr(f._bits(v), ir.Constant(i64, 32)), _I32)
    guess = b.sub(ir.Constant(_I32, _CBRT_GUESS), b.udiv(high, ir.Constant(_I32, 3)))
    y = f._float(b.shl(b.zext(guess, i64), ir.Constant(i64, 32)))
    third = v * (1.0 / 3.0)
    for _ in range(5):
        y = y * f.fma(-third, (y * y) * y, 4.0 / 3.0)
    y2 = y * y
    t = v * y2
    t2, e2 = _two_prod(t, t)
    t3, e3 = _two_prod(t2, t)
    residual = ((v - t3) - e3) - e2 * t
    root = (t + residual * (y2 * (1.0 / 3.0))) * f.sel(small, 2.0 ** -100, f.sel(large, 2.0 ** 100, 1.0))
    root = f.copysign(root, x)
    return f.sel(x == 0.0, x, f.sel(a < math.inf, root, x + x))


# ---- the table --------------------------------------------------------------------------
def _llvm(name: str) -> Callable[[Scalar, V], V]:
    return lambda f, x: f._intrinsic(name, x)


_UNARY: dict[tuple[str, str], Callable[[Scalar, V], V]] = {
    ("exp", "f32"): exp32, ("exp", "f64"): exp64,
    ("expm1", "f32"): expm1_32, ("expm1", "f64"): expm1_64,
    ("log", "f32"): _log, ("log", "f64"): _log,
    ("log1p", "f32"): _log1p, ("log1p", "f64"): _log1p,
    ("tanh", "f32"): tanh32, ("tanh", "f64"): tanh64,
    ("erf", "f32"): erf32, ("erf", "f64"): erf64,
    **{(op, d): fn for op, fn in (("sinh", sinh), ("cosh", cosh), ("asinh", asinh), ("acosh", acosh),
                                   ("atanh", atanh), ("asin", _via_f64(_asin64)), ("acos", _via_f64(_acos64)),
                                   ("atan", _via_f64(_atan64))) for d in ("f32", "f64")},
    ("sin", "f32"): _via_f64(_sin_or_cos32(True, _F32_ROWS)), ("sin", "f64"): _sin_or_cos(True, _TURN_ROWS),
    ("cos", "f32"): _via_f64(_sin_or_cos32(False, _F32_ROWS)), ("cos", "f64"): _sin_or_cos(False, _TURN_ROWS),
    ("cbrt", "f32"): _via_f64(_cbrt64), ("cbrt", "f64"): _cbrt64,
    **{(op, d): _llvm(f"llvm.{op}") for op in ("sqrt", "floor", "ceil", "rint", "fabs", "trunc")
       for d in ("f32", "f64")},
}

# sin and cos of arguments known to be at most MEDIUM in magnitude (``medium_trig``'s fast
# version of a loop): the medium reduction alone, the same bits there.
_MEDIUM_ONLY: dict[tuple[str, str], Callable[[Scalar, V], V]] = {
    ("sin", "f32"): _via_f64(_sin_or_cos32(True, 0)), ("sin", "f64"): _sin_or_cos(True, 0),
    ("cos", "f32"): _via_f64(_sin_or_cos32(False, 0)), ("cos", "f64"): _sin_or_cos(False, 0),
}


def _fmod(f: Scalar, a: V, b: V) -> V:
    return V(f, f.b.frem(a.v, b.v))  # C's fmod: exact, the sign of a


def _nextafter(f: Scalar, a: V, b: V) -> V:
    """C's nextafter: a's bits plus or minus one (toward b), the least subnormal with b's
    sign from zero, b where a == b (so -0 toward +0 is +0), NaN from either NaN."""
    ib = f.b
    inc = ib.icmp_unsigned("==", (a < b).v, (a > 0.0).v)  # away from zero iff b is on a's far side
    step = ib.select(inc, ir.Constant(f.ity, 1), ir.Constant(f.ity, -1))
    y = f._float(ib.add(f._bits(a), step))
    tiny = float(np.finfo(np.float32 if f.width == 32 else np.float64).smallest_subnormal)
    y = f.sel(a == 0.0, f.copysign(tiny, b), y)
    y = f.sel(a == b, b, y)
    return f.sel(a == a, f.sel(b == b, y, b), a)


def _hypot32(f: Scalar, a: V, b: V) -> V:
    """glibc's hypotf (2.35 on): the squares, exact in float64, summed, one square root,
    rounded once to float32 (the same bits), inf where either is infinite (even beside a quiet
    NaN), NaN from a NaN otherwise. Inline, where libm's call per element kept a complex abs (its
    only caller) from vectorizing; float64's hypot has no such exact shortcut and stays libm's."""
    g = Scalar(f.b, _F64)
    x, y = V(g, f.b.fpext(a.v, _F64)), V(g, f.b.fpext(b.v, _F64))
    root = V(f, f.b.fptrunc(g._intrinsic("llvm.sqrt", x * x + y * y).v, f.t))
    return _infinity_beside_quiet_nan(f, a, b, root)


def _infinity_beside_quiet_nan(f: Scalar, a: V, b: V, out: V) -> V:
    """C's hypot on special values: inf where either argument is infinite and neither is a
    signaling NaN (even beside a quiet NaN), else ``out``."""
    ib = f.b

    def quiet(v: V) -> ir.Value:   # not a signaling NaN: a number, or the quiet bit set
        bit = ib.and_(f._bits(v), ir.Constant(f.ity, 1 << (f.mant - 1)))
        return ib.or_((v == v).v, ib.icmp_unsigned("!=", bit, ir.Constant(f.ity, 0)))
    infinite = ib.or_((f.fabs(a) == np.inf).v, (f.fabs(b) == np.inf).v)
    return f.sel(Bool(f, ib.and_(infinite, ib.and_(quiet(a), quiet(b)))), np.inf, out)


# glibc's e_hypot.c: SCALE 0x1p-600, LARGE_VAL 0x1p+511, TINY_VAL 0x1p-459, EPS 0x1p-54.
_HYPOT_SCALE, _HYPOT_LARGE, _HYPOT_TINY, _HYPOT_EPS = 2.0 ** -600, 2.0 ** 511, 2.0 ** -459, 2.0 ** -54


def _hypot_kernel(f: Scalar, ax: V, ay: V) -> V:
    """glibc's hypot kernel without FMA (ax >= ay): the rounded root of the sum of squares,
    then one correction from the two products' exact residue, in glibc's order of operations."""
    h = f._intrinsic("llvm.sqrt", ax * ax + ay * ay)
    d1 = h - ay
    t1a, t2a = ax * (2.0 * d1 - ax), (d1 - 2.0 * (ax - ay)) * d1
    d2 = h - ax
    t1b, t2b = 2.0 * d2 * (ax - 2.0 * ay), (4.0 * d2 - ay) * ay + d2 * d2
    near = h <= 2.0 * ay
    t1, t2 = f.sel(near, t1a, t1b), f.sel(near, t2a, t2b)
    return h - f.div(t1 + t2, 2.0 * h)


def _hypot64(f: Scalar, a: V, b: V) -> V:
    """glibc's hypot (2.35 on, which NumPy calls): the kernel on |a|, |b| ordered, scaled by
    2^-600 past 2^511 and by 2^600 where the smaller is below 2^-459, their sum where it is below 2^-54 of
    the larger; inf where either is infinite (beside a quiet NaN too), NaN from a NaN. Inline,
    so that a loop holding it (a complex abs, log, asin...) vectorizes."""
    ib = f.b
    x, y = f.fabs(a), f.fabs(b)
    swap = x < y
    ax, ay = f.sel(swap, y, x), f.sel(swap, x, y)
    large, tiny = ax > _HYPOT_LARGE, ay < _HYPOT_TINY
    scale = f.sel(large, _HYPOT_SCALE, f.sel(tiny, 1 / _HYPOT_SCALE, 1.0))
    root = _hypot_kernel(f, ax * scale, ay * scale) * f.div(1.0, scale)
    # glibc's tests of the smaller's size: past 2^511 and in the common case ay <= ax eps,
    # below 2^-459 ax >= ay / eps (an eps times a subnormal would round)
    common = (ay <= ax * _HYPOT_EPS).v
    negligible = Bool(f, ib.select(large.v, common, ib.select(tiny.v, (ax >= f.div(ay, _HYPOT_EPS)).v, common)))
    out = f.sel(negligible, ax + ay, root)
    out = f.sel(Bool(f, ib.and_((x == x).v, (y == y).v)), out, a + b)
    return _infinity_beside_quiet_nan(f, a, b, out)


_BINARY: dict[tuple[str, str], Callable[[Scalar, V, V], V]] = {
    **{(op, d): fn for op, fn in (("copysign", Scalar.copysign), ("fmod", _fmod), ("nextafter", _nextafter))
       for d in ("f32", "f64")},
    ("hypot", "f32"): _hypot32, ("hypot", "f64"): _hypot64,
    ("atan2", "f32"): _via_f64(_atan2_64), ("atan2", "f64"): _atan2_64,
}
_FLOAT = {"f32": _F32, "f64": _F64}
# Ops whose float32 is the float64 function rounded (``_via_f64``): their float16 is too,
# rounded once (through float32 it would be a second rounding, which can land on a float16
# midpoint: cbrt(2.658) gave 1.385 for 1.386).
F16_FROM_F64 = frozenset(op for table in (_UNARY, _BINARY) for (op, d), fn in table.items()
                         if d == "f32" and getattr(fn, "through_f64", False))

NAMES: frozenset[str] = frozenset(
    f"{op}.{d}" for op, d in (*_UNARY, *_BINARY)
) | frozenset(f"{op}.f16" for op, d in (*_UNARY, *_BINARY) if d == "f32")


def function(module: ir.Module, name: str, native_ldexp: bool = False,
             native_fma: bool = False, medium: bool = False) -> ir.Function | None:
    """The LLVM function for loop-IR intrinsic ``name`` (``"tanh.f32"``: op and dtype as
    flowjit.lowering.scalar spells them) in ``module``, defined there on first use as
    ``fj.<name>``: internal, ``alwaysinline``, scalar in and out, branch-free so the loop
    vectorizer widens it. ``None`` if this module has no port of ``name`` (call libm).
    ``native_ldexp``: the module's target scales by a power of two in one instruction
    (``HostTarget.native_ldexp``), which exp's last step then is (same results; a
    signalling NaN comes out quiet);
    ``native_fma``: it fuses a multiply-add (``HostTarget.native_fma``), which sin's and cos's
    exact products then are (same results); ``medium``: ``sin`` and ``cos`` of arguments the
    caller knows to be at most MEDIUM in magnitude (``medium_trig``), as ``fj.<name>.medium``,
    the medium reduction alone (``None`` for any other op)."""
    if name not in NAMES:
        return None
    op, d = name.split(".")
    if medium and (op, "f32") not in _MEDIUM_ONLY:
        return None
    mangled = PREFIX + name + (".medium" if medium else "")
    found = module.globals.get(mangled)
    if found is not None:
        return found
    arity = 2 if (op, "f32") in _BINARY else 1
    fty = _F16 if d == "f16" else _FLOAT[d]
    fn = ir.Function(module, ir.FunctionType(fty, [fty] * arity), mangled)
    fn.linkage = "internal"
    fn.attributes.add("alwaysinline")
    fn.attributes.add("nounwind")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    if d == "f16":  # NumPy's float16 loops compute in float32 and round once
        # ... but a float64 algorithm rounds once from float64: through float32 a result can
        # land on a float16 midpoint (cbrt(2.658): 1.38525391, then 1.385 for 1.386).
        wide = "f64" if op in F16_FROM_F64 else "f32"
        inner = function(module, f"{op}.{wide}", native_ldexp, native_fma, medium)
        b.ret(b.fptrunc(b.call(inner, [b.fpext(a, _FLOAT[wide]) for a in fn.args]), _F16))
        return fn
    f = Scalar(b, fty, native_ldexp, native_fma)
    args = [V(f, a) for a in fn.args]
    unary = _MEDIUM_ONLY if medium else _UNARY
    out = unary[op, d](f, *args) if arity == 1 else _BINARY[op, d](f, *args)
    b.ret(out.v)
    return fn


__all__ = ["NAMES", "VERSION", "function"]
