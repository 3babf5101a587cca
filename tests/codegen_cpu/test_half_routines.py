"""The float16 conversions LLVM's code generator calls by name (``half_routines``): a
program whose code generator formed one (float16 ``arctan`` of int8 computes in float64 and
rounds twice, which became one call of ``__truncdfhf2``) links it and gives NumPy's values,
with flowjit's loader and with MCJIT; and each routine, called by name from a module of
its own, rounds as NumPy does at every float16 boundary (ties, subnormals, overflow, NaN)."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys

import numpy as np
import pytest

import flowjit as fj
from flowjit.codegen_cpu import elfload, half_routines, jit

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.parametrize("shape", [(), (256,)])
def test_float16_arctan_of_int8(shape):
    # int8 -> float16 (NumPy's smallest float for int8); the arctan's float64 algorithm
    # rounds to float32 and then float16, which x86's code generator made one __truncdfhf2.
    x = (np.arange(256) - 128).astype(np.int8) if shape else np.array(5, np.int8)
    got = fj.function(fj.arctan)(x)
    assert got.dtype == np.float16
    np.testing.assert_array_equal(got, np.arctan(x))


def test_float16_routines_with_mcjit():
    # MCJIT links a name nothing defines to address 0: the routines must be registered
    # for it too, and a program calling them runs (a new process: the loader is read once).
    code = ("import numpy as np, flowjit as fj\n"
            "x = (np.arange(256) - 128).astype(np.int8)\n"
            "assert np.array_equal(fj.function(fj.arctan)(x), np.arctan(x))\n"
            "print('ok')\n")
    env = {**os.environ, "FLOWJIT_LLVM_LOADER": "mcjit"}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-3000:]


def _harness(symbol: str) -> ctypes._CFuncPtr:
    """``convert(in, out, n)``: ``symbol`` applied to each of n values, called by name."""
    from llvmlite import ir

    arg, res = half_routines.SYMBOLS[symbol]
    types = {"double": ir.DoubleType(), "float": ir.FloatType(), "half": ir.HalfType()}
    a, r = types[arg], types[res]
    mod = ir.Module("half_harness")
    callee = ir.Function(mod, ir.FunctionType(r, [a]), symbol)
    fn = ir.Function(mod, ir.FunctionType(ir.VoidType(), [a.as_pointer(), r.as_pointer(), ir.IntType(64)]),
                     "convert")
    entry, loop, done = (fn.append_basic_block(n) for n in ("entry", "loop", "done"))
    b = ir.IRBuilder(entry)
    zero = ir.Constant(ir.IntType(64), 0)
    b.cbranch(b.icmp_signed(">", fn.args[2], zero), loop, done)
    b.position_at_end(loop)
    i = b.phi(ir.IntType(64))
    i.add_incoming(zero, entry)
    b.store(b.call(callee, [b.load(b.gep(fn.args[0], [i]))]), b.gep(fn.args[1], [i]))
    nxt = b.add(i, ir.Constant(ir.IntType(64), 1))
    i.add_incoming(nxt, loop)
    b.cbranch(b.icmp_signed("<", nxt, fn.args[2]), loop, done)
    b.position_at_end(done)
    b.ret_void()
    text = str(mod)
    lib = jit.load_source(f"; half harness\n{text}", lambda: text, name=f"half_harness_{symbol}")
    assert symbol in elfload.symbol_names(jit.compile_object(text))[1]   # called by name, not inlined
    convert = lib.function("convert", None, [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64])
    convert._library = lib
    return convert


def _run(symbol: str, x: np.ndarray, out_dtype: type) -> np.ndarray:
    out = np.empty(x.shape, out_dtype)
    _harness(symbol)(x.ctypes.data, out.ctypes.data, x.size)
    return out


def _same_bits(got: np.ndarray, want: np.ndarray) -> None:
    nan = np.isnan(want)
    np.testing.assert_array_equal(np.isnan(got), nan)
    np.testing.assert_array_equal(got[~nan].view(f"u{got.itemsize}"), want[~nan].view(f"u{want.itemsize}"))


def _float16_edges(dtype: type) -> np.ndarray:
    """Values of ``dtype`` at and around every float16 value and every midpoint between
    neighbours (where rounding ties), both signs, past the largest and below the least."""
    halves = np.arange(0x7C01, dtype=np.uint16).view(np.float16).astype(np.float64)
    mids = (halves[:-1] + halves[1:]) / 2          # exact in float64 and float32
    points = np.concatenate([halves, mids, [65520.0, 65519.99, 65536.0, 1e6, 2.0 ** -25, 2.0 ** -26, 1e-30]])
    points = points.astype(dtype)
    nudged = [points, np.nextafter(points, np.inf, dtype=dtype), np.nextafter(points, -np.inf, dtype=dtype)]
    values = np.concatenate([*nudged, [np.inf, np.nan]]).astype(dtype)
    values = np.concatenate([values, -values])
    rng = np.random.default_rng(0)
    wide = rng.standard_normal(20000) * np.exp2(rng.integers(-30, 20, 20000))
    return np.concatenate([values, wide.astype(dtype)])


@pytest.mark.parametrize("symbol,dtype", [("__truncsfhf2", np.float32), ("__truncdfhf2", np.float64)])
def test_narrowing_rounds_as_numpy(symbol, dtype):
    x = _float16_edges(dtype)
    with np.errstate(over="ignore"):
        want = x.astype(np.float16)
    _same_bits(_run(symbol, x, np.float16), want)


@pytest.mark.parametrize("symbol,dtype", [("__extendhfsf2", np.float32), ("__extendhfdf2", np.float64)])
def test_widening_is_exact(symbol, dtype):
    h = np.arange(1 << 16, dtype=np.uint16).view(np.float16)
    _same_bits(_run(symbol, h, dtype), h.astype(dtype))
