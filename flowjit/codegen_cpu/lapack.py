"""LAPACK in the native program: the wrapper functions a plan's ``Lapack`` steps call.

The LAPACK is the one shipped with the BLAS the program's products already use (NumPy's
bundled OpenBLAS, or the system's): its LAPACKE entry points, in row-major layout, named as
that library names its CBLAS (``scipy_LAPACKE_dpotrf64_`` beside ``scipy_cblas_sgemm64_``,
``LAPACKE_dpotrf`` beside ``cblas_sgemm``), with integers of the library's width.

Each wrapper runs one op over a stack of matrices (the op's leading dimensions, as NumPy's
``linalg`` batches them): the operand copied into the output (LAPACK works in place), the
routine called, and the answer NumPy's reference gives (``decompositions._lapack``) where a
matrix fails (singular, not positive-definite): NaN in every element of that matrix's
result, the rest of the batch computed. A wrapper returns 0, or 1 when memory for its
pivots or a copy could not be allocated (the program reports it as a kernel's temps).
Complex matrices are their parts to the copies and fills (two reals an element).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from llvmlite import ir

from .blas import lapacke_symbol
from .program_plan import LAPACK_DTYPES

I8, I32, I64 = ir.IntType(8), ir.IntType(32), ir.IntType(64)
I8P = I8.as_pointer()
ROW_MAJOR = 101                  # LAPACK_ROW_MAJOR
LOWER = ord("L")
MEMORY_ERROR = -1011             # LAPACK_WORK_MEMORY_ERROR, LAPACK_TRANSPOSE_MEMORY_ERROR



@dataclass(frozen=True)
class Routine:
    """How the wrapper of ``role`` for ``dtype`` is named and what it calls."""

    role: str
    dtype: str

    @property
    def symbol(self) -> str:
        """The wrapper's function name in the program's module."""
        return f"fj_lapack_{self.role}_{self.dtype}"


def build_wrapper(r: Routine, sgemm_symbol: str, int_bits: int) -> str:
    """The LLVM IR text of ``r``'s wrapper, calling the LAPACKE routines of the library
    whose sgemm is ``sgemm_symbol`` with ``int_bits``-bit integers:

    - ``i32 fj_lapack_cholesky_T(ptr a, ptr out, i64 batch, i64 n)``: the lower factor of
      each matrix (``potrf`` of its lower triangle), the part above the diagonal zero;
    - ``i32 fj_lapack_solve_T(ptr a, ptr b, ptr out, i64 batch, i64 n, i64 k)``: x with
      a x = b for each matrix and its [n, k] right-hand sides (``gesv`` on a copy of a);
    - ``i32 fj_lapack_inverse_T(ptr a, ptr out, i64 batch, i64 n)``: each matrix's inverse
      (``getrf`` then ``getri``)."""
    t = LAPACK_DTYPES[r.dtype]
    parts = 2 if t in "cz" else 1
    real = ir.FloatType() if t in "sc" else ir.DoubleType()
    size = np.dtype(r.dtype).itemsize
    lint = ir.IntType(int_bits)
    mod = ir.Module(f"flowjit_lapack_{r.role}_{r.dtype}")
    RP = real.as_pointer()

    def routine(name: str, args: list[ir.Type]) -> ir.Function:
        return ir.Function(mod, ir.FunctionType(lint, args), lapacke_symbol(sgemm_symbol, t + name))
    memcpy = ir.Function(mod, ir.FunctionType(I8P, [I8P, I8P, I64]), "memcpy")
    malloc = ir.Function(mod, ir.FunctionType(I8P, [I64]), "malloc")
    free = ir.Function(mod, ir.FunctionType(ir.VoidType(), [I8P]), "free")

    params = [I8P, I8P, I8P, I64, I64, I64] if r.role == "solve" else [I8P, I8P, I64, I64]
    fn = ir.Function(mod, ir.FunctionType(I32, params), r.symbol)
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    status, inverted = b.alloca(I32), b.alloca(lint)
    if r.role == "solve":
        a, rhs, out, batch, n, k = fn.args
    else:
        a, out, batch, n = fn.args
        rhs, k = None, n
    c = lambda v: ir.Constant(I64, v)  # noqa: E731

    def narrow(v: ir.Value) -> ir.Value:
        v = b.select(b.icmp_signed("<", v, c(1)), c(1), v)  # a leading dimension of at least 1
        return v if int_bits == 64 else b.trunc(v, lint)

    def loop(count: ir.Value, name: str, body) -> None:
        pre = b.block
        head, inner, done = (fn.append_basic_block(f"{name}.{x}") for x in ("head", "body", "done"))
        b.branch(head)
        b.position_at_end(head)
        i = b.phi(I64, name=name)
        i.add_incoming(c(0), pre)
        b.cbranch(b.icmp_signed("<", i, count), inner, done)
        b.position_at_end(inner)
        body(i)
        i.add_incoming(b.add(i, c(1)), b.block)
        b.branch(head)
        b.position_at_end(done)

    def fill(ptr: ir.Value, count: ir.Value, value: ir.Constant) -> None:
        reals = b.bitcast(ptr, RP)
        loop(b.mul(count, c(parts)), "fill", lambda i: b.store(value, b.gep(reals, [i], inbounds=True)))

    matrix = b.mul(n, n)
    result = b.mul(n, k)                 # elements of one matrix's result
    # Pivots (and for solve the copy of a) for one matrix at a time, freed before returning.
    scratch_bytes = b.add(b.mul(n, c(int_bits // 8)), b.mul(matrix, c(size)) if r.role == "solve" else c(0))
    scratch = b.call(malloc, [b.add(scratch_bytes, c(size))])
    no_memory, start = fn.append_basic_block("no_memory"), fn.append_basic_block("start")
    b.cbranch(b.icmp_unsigned("==", b.ptrtoint(scratch, I64), c(0)), no_memory, start)
    b.position_at_end(no_memory)
    b.ret(ir.Constant(I32, 1))
    b.position_at_end(start)
    ipiv = b.bitcast(scratch, lint.as_pointer())
    work = b.gep(scratch, [b.mul(n, c(int_bits // 8))], inbounds=True)   # solve's copy of a
    b.store(ir.Constant(I32, 0), status)
    layout = ir.Constant(I32, ROW_MAJOR)

    def one(t_: ir.Value) -> None:
        src = b.gep(a, [b.mul(b.mul(t_, matrix), c(size))], inbounds=True)
        dst = b.gep(out, [b.mul(b.mul(t_, result), c(size))], inbounds=True)
        if r.role == "cholesky":
            b.call(memcpy, [dst, src, b.mul(matrix, c(size))])
            info = b.call(routine("potrf", [I32, I8, lint, I8P, lint]),
                          [layout, ir.Constant(I8, LOWER), narrow(n), dst, narrow(n)])
        elif r.role == "solve":
            b.call(memcpy, [work, src, b.mul(matrix, c(size))])
            b.call(memcpy, [dst, b.gep(rhs, [b.mul(b.mul(t_, result), c(size))], inbounds=True),
                            b.mul(result, c(size))])
            info = b.call(routine("gesv", [I32, lint, lint, I8P, lint, lint.as_pointer(), I8P, lint]),
                          [layout, narrow(n), narrow(k), work, narrow(n), ipiv, dst, narrow(k)])
        else:
            b.call(memcpy, [dst, src, b.mul(matrix, c(size))])
            info = b.call(routine("getrf", [I32, lint, lint, I8P, lint, lint.as_pointer()]),
                          [layout, narrow(n), narrow(n), dst, narrow(n), ipiv])
            b.store(info, inverted)
            with b.if_then(b.icmp_signed("==", info, ir.Constant(lint, 0))):
                b.store(b.call(routine("getri", [I32, lint, I8P, lint, lint.as_pointer()]),
                               [layout, narrow(n), dst, narrow(n), ipiv]), inverted)
            info = b.load(inverted)
        with b.if_else(b.icmp_signed("==", info, ir.Constant(lint, 0))) as (ok, failed):
            with ok:
                if r.role == "cholesky":  # LAPACK leaves the upper triangle as it was
                    reals = b.bitcast(dst, RP)

                    def row(i: ir.Value) -> None:
                        def column(j: ir.Value) -> None:
                            at = b.mul(b.add(b.mul(i, n), b.add(b.add(i, c(1)), j)), c(parts))
                            for p in range(parts):
                                b.store(ir.Constant(real, 0.0), b.gep(reals, [b.add(at, c(p))], inbounds=True))
                        loop(b.sub(b.sub(n, i), c(1)), "column", column)
                    loop(n, "row", row)
            with failed:
                with b.if_then(b.icmp_signed("==", info, ir.Constant(lint, MEMORY_ERROR))):
                    b.store(ir.Constant(I32, 1), status)
                fill(dst, result, ir.Constant(real, float("nan")))
    with b.if_then(b.icmp_signed(">", matrix, c(0))):
        loop(batch, "matrix", one)
    b.call(free, [scratch])
    b.ret(b.load(status))
    return str(mod)
