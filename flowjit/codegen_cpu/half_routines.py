"""The half-precision conversions LLVM's code generator calls by name (``__truncdfhf2``,
``__truncsfhf2``, ``__extendhfsf2``, ``__extendhfdf2``), as flowjit's own code compiled once
per installation and registered for generated code.

Why: x86-64 has no instruction from float64 to float16, and none between float32 and
float16 without F16C, so LLVM lowers those conversions to calls of compiler-rt's (or
libgcc's, from GCC 12) builtins. A Python process does not have them in its symbol table,
and the code generator can form a float64 -> float16 rounding that the IR never spelled (a
float16 ``arctan`` computed in float64 and rounded to float32 then to float16 became one
call of ``__truncdfhf2``), so a program linked the call to nothing and crashed at its first
call. These definitions are integer code (and float32 <-> float64 conversions, which every
x86-64 CPU has), so LLVM never lowers them into calls of themselves, and they round as the
hardware's conversions do: to nearest, ties to even, NaN quieted with its payload's top
bits kept, overflow to infinity.

``__truncdfhf2`` rounds float64 to float32 "to odd" first (exact, or the nearer of the two
neighbours whose last bit is 1), then to float16: with 24 bits against float16's 11 that is
one correctly rounded conversion (``round_to_odd_f32``, which ``emit``'s casts call too)."""

from __future__ import annotations

import ctypes
import functools
from typing import Any

from . import jit, objcache

# What each symbol converts: (argument type, result type), LLVM's names.
SYMBOLS = {"__truncdfhf2": ("double", "half"), "__truncsfhf2": ("float", "half"),
           "__extendhfsf2": ("half", "float"), "__extendhfdf2": ("half", "double")}


def round_to_odd_f32(b: Any, v: Any) -> Any:
    """float64 ``v`` as float32 rounded to odd (exact, else its float32 neighbour toward zero
    with the last bit set), at llvmlite builder ``b``: a float32 -> float16 rounding that
    follows rounds as one correctly rounded float64 -> float16 conversion, with no libcall
    (``emit``'s casts and ``__truncdfhf2`` both)."""
    from llvmlite import ir

    i32 = ir.IntType(32)
    f = b.fptrunc(v, ir.FloatType())
    back = b.fpext(f, v.type)
    fabs = b.module.declare_intrinsic("llvm.fabs", [v.type])
    inexact = b.fcmp_ordered("!=", back, v)
    away = b.fcmp_ordered(">", b.call(fabs, [back]), b.call(fabs, [v]))
    bits = b.bitcast(f, i32)
    toward = b.select(away, b.sub(bits, ir.Constant(i32, 1)), bits)
    return b.bitcast(b.select(inexact, b.or_(toward, ir.Constant(i32, 1)), bits), ir.FloatType())


def build_module() -> str:
    """The LLVM IR text defining ``SYMBOLS`` (the module docstring)."""
    # Imported here: a process that loads the module from the object cache builds no IR.
    from llvmlite import ir

    I1, I16, I32 = ir.IntType(1), ir.IntType(16), ir.IntType(32)
    F16, F32, F64 = ir.HalfType(), ir.FloatType(), ir.DoubleType()
    types = {"double": F64, "float": F32, "half": F16}
    mod = ir.Module("flowjit_half_routines")

    def u32(v: int) -> Any:
        return ir.Constant(I32, v)

    def define(name: str) -> tuple[ir.Function, ir.IRBuilder]:
        arg, res = SYMBOLS[name]
        fn = ir.Function(mod, ir.FunctionType(types[res], [types[arg]]), name)
        fn.attributes.add("nounwind")
        return fn, ir.IRBuilder(fn.append_basic_block("entry"))

    def f32_to_f16_bits(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
        """float32 ``x`` rounded to float16 (nearest, ties to even), as i16 bits."""
        f = b.bitcast(x, I32)
        sign = b.and_(b.lshr(f, u32(16)), u32(0x8000))
        a = b.and_(f, u32(0x7FFFFFFF))
        # NaN: quiet, the payload's top ten bits kept (what F16C's vcvtps2ph gives).
        nan = b.or_(u32(0x7E00), b.and_(b.lshr(a, u32(13)), u32(0x3FF)))
        # Normal float16 (from 2**-14): rebias the exponent, round at bit 13 to even; a
        # carry out of the significand bumps the exponent, up to infinity (0x7C00) at 65520.
        v = b.sub(a, u32((127 - 15) << 23))
        odd = b.and_(b.lshr(v, u32(13)), u32(1))
        normal = b.lshr(b.add(b.add(v, u32(0xFFF)), odd), u32(13))
        # Subnormal float16 (below 2**-14): the 24-bit significand shifted by 126 - exponent
        # (14 to 24 here; anything at or below 2**-25 rounds to 0), rounded to even.
        shift = b.sub(u32(126), b.lshr(a, u32(23)))
        shift = b.select(b.icmp_unsigned(">", shift, u32(25)), u32(25), shift)
        m = b.or_(b.and_(a, u32(0x7FFFFF)), u32(0x800000))
        kept = b.lshr(m, shift)
        rest = b.sub(m, b.shl(kept, shift))
        half = b.shl(u32(1), b.sub(shift, u32(1)))
        up = b.or_(b.icmp_unsigned(">", rest, half),
                   b.and_(b.icmp_unsigned("==", rest, half), b.trunc(kept, I1)))
        tiny = b.add(kept, b.zext(up, I32))
        h = b.select(b.icmp_unsigned("<", a, u32(0x38800000)), tiny, normal)
        h = b.select(b.icmp_unsigned(">=", a, u32(0x47800000)), u32(0x7C00), h)   # 65536 and up, infinity
        h = b.select(b.icmp_unsigned(">", a, u32(0x7F800000)), nan, h)
        return b.trunc(b.or_(h, sign), I16)

    fn, b = define("__truncsfhf2")
    b.ret(b.bitcast(f32_to_f16_bits(b, fn.args[0]), F16))

    fn, b = define("__truncdfhf2")
    b.ret(b.bitcast(f32_to_f16_bits(b, round_to_odd_f32(b, fn.args[0])), F16))

    def f16_to_f32(b: ir.IRBuilder, h: ir.Value) -> ir.Value:
        """float16 ``h`` as float32 (exact; a NaN quieted, its payload kept)."""
        v = b.zext(b.bitcast(h, I16), I32)
        sign = b.shl(b.and_(v, u32(0x8000)), u32(16))
        e = b.and_(b.lshr(v, u32(10)), u32(0x1F))
        m = b.and_(v, u32(0x3FF))
        normal = b.or_(b.shl(b.add(e, u32(127 - 15)), u32(23)), b.shl(m, u32(13)))
        special = b.or_(u32(0x7F800000), b.shl(m, u32(13)))
        special = b.select(b.icmp_unsigned("!=", m, u32(0)), b.or_(special, u32(0x400000)), special)
        # Zero and subnormals: m * 2**-24, exact in float32 (m < 1024).
        small = b.bitcast(b.fmul(b.uitofp(m, F32), ir.Constant(F32, 2.0 ** -24)), I32)
        out = b.select(b.icmp_unsigned("==", e, u32(0)), small, normal)
        out = b.select(b.icmp_unsigned("==", e, u32(0x1F)), special, out)
        return b.bitcast(b.or_(out, sign), F32)

    fn, b = define("__extendhfsf2")
    b.ret(f16_to_f32(b, fn.args[0]))
    fn, b = define("__extendhfdf2")
    b.ret(b.fpext(f16_to_f32(b, fn.args[0]), F64))
    return str(mod)


@functools.cache
def _source_digest() -> str:
    return objcache.source_digest(__file__)


@functools.cache
def routines() -> dict[str, int]:
    """Each of ``SYMBOLS`` at its address, compiled once per installation
    (``objcache.runtime_directory()``) and registered for generated code; kept for the life
    of the process."""
    lib = jit.load_source(f"; flowjit half routines {_source_digest()}", build_module,
                          name="flowjit_half_routines", runtime=True)
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(lib))
    addresses = {name: lib.address(name) for name in SYMBOLS}
    for name, address in addresses.items():
        jit.register_symbol(name, address)
    return addresses


for _name in SYMBOLS:
    jit.provide_symbol(_name, routines)
