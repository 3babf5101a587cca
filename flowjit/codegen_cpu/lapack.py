"""LAPACK in the native program: the wrapper functions a plan's ``Lapack`` steps call.

The LAPACK is the one shipped with the BLAS the program's products already use (NumPy's
bundled OpenBLAS, or the system's): its LAPACKE entry points, in row-major layout, named as
that library names its CBLAS (``scipy_LAPACKE_dpotrf64_`` beside ``scipy_cblas_sgemm64_``,
``LAPACKE_dpotrf`` beside ``cblas_sgemm``), with integers of the library's width.

Each wrapper runs one op over a stack of matrices (the op's leading dimensions, as NumPy's
``linalg`` batches them): the operand copied into the output or a scratch copy (LAPACK works
in place), the routine called, and the answer NumPy's reference gives
(``decompositions._lapack``) where a matrix fails (singular, not positive-definite, no
convergence): NaN in every element of that matrix's results, the rest of the batch computed;
a singular matrix's ``slogdet`` is (0, -inf), as NumPy's. A wrapper returns 0, or 1 when
memory for its pivots or copy could not be allocated (the program reports it as a kernel's
temps). Complex matrices are their parts to the copies and fills (two reals an element).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from llvmlite import ir

from flowjit.ir.records import compile_records, record

from .blas import lapacke_symbol
from .llvm_loops import counted_loop
from .program_plan import LAPACK_DTYPES, Lapack

I8, I32, I64 = ir.IntType(8), ir.IntType(32), ir.IntType(64)
I8P = I8.as_pointer()
ROW_MAJOR = 101                  # LAPACK_ROW_MAJOR
MEMORY_ERROR = -1011             # LAPACK_WORK_MEMORY_ERROR, LAPACK_TRANSPOSE_MEMORY_ERROR


@record
class Routine:
    """What decides a wrapper: the op's role and dtype, and the triangle it reads."""

    role: str
    dtype: str
    lower: bool = True
    full: bool = False

    @staticmethod
    def of(step: Lapack) -> Routine:
        """The wrapper ``step`` calls."""
        return Routine(step.role, step.dtype, step.lower, step.full)

    @property
    def symbol(self) -> str:
        """The wrapper's function name in the program's module."""
        return f"fj_lapack_{self.role}_{self.dtype}{'' if self.lower else '_upper'}{'_full' if self.full else ''}"


compile_records()


def build_wrapper(r: Routine, sgemm_symbol: str, int_bits: int) -> str:
    """The LLVM IR text of ``r``'s wrapper, calling the LAPACKE routines of the library
    whose sgemm is ``sgemm_symbol`` with ``int_bits``-bit integers. Every wrapper is
    ``i32 fj_lapack_ROLE_DTYPE(ptr inputs..., ptr outputs..., i64 batch, i64 n[, i64 k])``:

    - cholesky (a -> L): ``potrf`` of each matrix's lower triangle, above the diagonal zero;
    - solve (a, b -> x): x with a x = b for [n, k] right-hand sides (``gesv`` on a copy of a);
    - inverse (a -> inv): ``getrf`` then ``getri``;
    - log_determinant (a -> sign, log|det|): ``getrf`` of a copy, then the diagonal's signs
      (phases) and logs and the pivots' swaps;
    - symmetric_eigen (a -> w, v): ``syevd``/``heevd`` of the lower (upper) triangle,
      eigenvalues ascending and eigenvectors as columns, in double precision for every
      dtype as NumPy computes them, rounded to the result's;
    - singular_values (a [m, n] -> u, s, vh): ``gesdd``, reduced or (``full``) complete;
    - orthogonal_triangular (a [m, n] -> q, r): ``geqrf`` of a copy, r its upper triangle,
      q from its reflectors (``orgqr``/``ungqr``), reduced or (``full``) complete;
    - general_eigen (a -> w, v, both complex): ``geev``'s eigenvalues and right eigenvectors
      (a real matrix's conjugate pairs unpacked from its real and imaginary columns), in
      double precision for every dtype as NumPy computes them, rounded to the result's.
    An SVD's and a QR's sizes are (batch, m, n)."""
    return _Wrapper(r, sgemm_symbol, int_bits).build()


class _Wrapper:
    def __init__(self, r: Routine, sgemm_symbol: str, int_bits: int):
        self.r = r
        self.t = LAPACK_DTYPES[r.dtype]
        self.parts = 2 if self.t in "cz" else 1
        self.real = ir.FloatType() if self.t in "sc" else ir.DoubleType()
        self.size = np.dtype(r.dtype).itemsize
        self.lint = ir.IntType(int_bits)
        self.int_bits = int_bits
        self.sgemm = sgemm_symbol
        self.mod = ir.Module(f"flowjit_lapack_{r.role}_{r.dtype}")
        self.declared: dict[str, ir.Function] = {}

    # ---- helpers ----------------------------------------------------------------------------
    def c(self, v: int) -> ir.Constant:
        return ir.Constant(I64, v)

    def extern(self, name: str, ret: ir.Type, args: list[ir.Type]) -> ir.Function:
        if name not in self.declared:
            self.declared[name] = ir.Function(self.mod, ir.FunctionType(ret, args), name)
        return self.declared[name]

    def routine(self, name: str, args: list[ir.Type]) -> ir.Function:
        return self.extern(lapacke_symbol(self.sgemm, self.t + name), self.lint, args)

    def narrow(self, v: ir.Value) -> ir.Value:
        b = self.b
        v = b.select(b.icmp_signed("<", v, self.c(1)), self.c(1), v)  # a leading dimension of at least 1
        return v if self.int_bits == 64 else b.trunc(v, self.lint)

    def loop(self, count: ir.Value, name: str, body: Callable[[ir.Value], None], start: ir.Value | None = None) -> None:
        counted_loop(self.b, count, name, body, start)

    def reals(self, ptr: ir.Value, real: ir.Type | None = None) -> ir.Value:
        return self.b.bitcast(ptr, (real or self.real).as_pointer())

    def fill(self, ptr: ir.Value, count: ir.Value, value: float, parts: int | None = None) -> None:
        reals, b = self.reals(ptr), self.b
        n = b.mul(count, self.c(parts or self.parts))
        self.loop(n, "fill", lambda i: b.store(ir.Constant(self.real, value), b.gep(reals, [i], inbounds=True)))

    def at(self, ptr: ir.Value, index: ir.Value, size: int) -> ir.Value:
        return self.b.gep(ptr, [self.b.mul(index, self.c(size))], inbounds=True)

    def intrinsic(self, name: str, args: int = 1) -> ir.Function:
        suffix = "f32" if self.real == ir.FloatType() else "f64"
        return self.extern(f"llvm.{name}.{suffix}", self.real, [self.real] * args)

    # ---- the wrapper ------------------------------------------------------------------------
    def build(self) -> str:
        r = self.r
        ins, outs = {"solve": (2, 1), "log_determinant": (1, 2), "symmetric_eigen": (1, 2),
                     "singular_values": (1, 3), "orthogonal_triangular": (1, 2),
                     "general_eigen": (1, 2)}.get(r.role, (1, 1))
        rectangular = r.role in ("singular_values", "orthogonal_triangular")
        sizes = 3 if r.role == "solve" or rectangular else 2
        self.fn = ir.Function(self.mod, ir.FunctionType(I32, [I8P] * (ins + outs) + [I64] * sizes), r.symbol)
        self.b = b = ir.IRBuilder(self.fn.append_basic_block("entry"))
        args = list(self.fn.args)
        self.inputs, self.outputs = args[:ins], args[ins:ins + outs]
        batch = args[ins + outs]
        if rectangular:
            self.m, self.n = args[-2], args[-1]
        else:
            self.m = self.n = args[ins + outs + 1]
        self.k = args[-1] if r.role == "solve" else self.n
        self.status, self.info_slot = b.alloca(I32), b.alloca(self.lint)
        self.acc = [b.alloca(self.real) for _ in range(3)]   # slogdet's sign (parts) and log|det|
        n = self.n
        self.matrix = b.mul(self.m, n)
        malloc = self.extern("malloc", I8P, [I64])
        # Pivots (or a QR's reflectors' scales), a copy of one matrix (for the routines that
        # must keep a's), freed at the end.
        pivots = b.mul(n, self.c(max(self.int_bits // 8, self.size)))
        copy = b.mul(self.matrix, self.c(self.size))
        if r.role == "general_eigen":  # in doubles: [a][eigenvalues: wr, wi or w][eigenvectors: vr or v]
            copy = b.mul(b.add(b.mul(self.matrix, self.c(2 * self.parts)), b.mul(n, self.c(2))), self.c(8))
        elif r.role == "symmetric_eigen":  # single precision in doubles: [a][eigenvalues]
            copy = b.mul(b.add(b.mul(self.matrix, self.c(self.parts)), n), self.c(8))
        scratch = b.call(malloc, [b.add(b.add(pivots, copy), self.c(self.size))])
        no_memory, start = self.fn.append_basic_block("no_memory"), self.fn.append_basic_block("start")
        b.cbranch(b.icmp_unsigned("==", b.ptrtoint(scratch, I64), self.c(0)), no_memory, start)
        b.position_at_end(no_memory)
        b.ret(ir.Constant(I32, 1))
        b.position_at_end(start)
        self.ipiv = b.bitcast(scratch, self.lint.as_pointer())
        self.work = b.gep(scratch, [pivots], inbounds=True)
        b.store(ir.Constant(I32, 0), self.status)
        # LAPACKE refuses a matrix holding NaN (info < 0) where NumPy's LAPACK computes on
        # (NaN results, a NaN determinant): its check is off for these calls, then as it was.
        get_check = self.extern(lapacke_symbol(self.sgemm, "get_nancheck"), I32, [])
        set_check = self.extern(lapacke_symbol(self.sgemm, "set_nancheck"), ir.VoidType(), [I32])
        checking = b.call(get_check, [])
        b.call(set_check, [ir.Constant(I32, 0)])
        with b.if_then(b.icmp_signed(">", self.matrix, self.c(0))):
            self.loop(batch, "matrix", getattr(self, r.role))
        b.call(set_check, [checking])
        with b.if_then(b.icmp_signed("==", n, self.c(0))):  # an empty matrix: det 1, log|det| 0
            if r.role == "log_determinant":
                self.loop(batch, "empty", lambda t: self.store_sign_logdet(t, 1.0, 0.0))
        b.call(self.extern("free", ir.VoidType(), [I8P]), [scratch])
        b.ret(b.load(self.status))
        return str(self.mod)

    def copy(self, dst: ir.Value, src: ir.Value, elements: ir.Value) -> None:
        memcpy = self.extern("memcpy", I8P, [I8P, I8P, I64])
        self.b.call(memcpy, [dst, src, self.b.mul(elements, self.c(self.size))])

    def checked(self, info: ir.Value, ok: Callable[[], None], failed: Callable[[], None]) -> None:
        """``ok()`` when LAPACK's ``info`` is 0, else ``failed()`` (and a memory error noted)."""
        b = self.b
        with b.if_else(b.icmp_signed("==", info, ir.Constant(self.lint, 0))) as (then, otherwise):
            with then:
                ok()
            with otherwise:
                with b.if_then(b.icmp_signed("==", info, ir.Constant(self.lint, MEMORY_ERROR))):
                    b.store(ir.Constant(I32, 1), self.status)
                failed()

    def layout(self) -> ir.Constant:
        return ir.Constant(I32, ROW_MAJOR)

    def cholesky(self, t: ir.Value) -> None:
        b, n = self.b, self.n
        dst = self.at(self.outputs[0], b.mul(t, self.matrix), self.size)
        self.copy(dst, self.at(self.inputs[0], b.mul(t, self.matrix), self.size), self.matrix)
        info = b.call(self.routine("potrf", [I32, I8, self.lint, I8P, self.lint]),
                      [self.layout(), ir.Constant(I8, ord("L")), self.narrow(n), dst, self.narrow(n)])

        def zero_upper() -> None:  # LAPACK leaves the upper triangle as it was
            reals = self.reals(dst)

            def row(i: ir.Value) -> None:
                def column(j: ir.Value) -> None:
                    at = b.mul(b.add(b.mul(i, n), j), self.c(self.parts))
                    for p in range(self.parts):
                        b.store(ir.Constant(self.real, 0.0), b.gep(reals, [b.add(at, self.c(p))], inbounds=True))
                self.loop(n, "column", column, start=b.add(i, self.c(1)))
            self.loop(n, "row", row)
        self.checked(info, zero_upper, lambda: self.fill(dst, self.matrix, float("nan")))

    def solve(self, t: ir.Value) -> None:
        b, n, k = self.b, self.n, self.k
        result = b.mul(n, k)
        # No right-hand sides: nothing to write (narrow() clamps to 1, for leading dimensions).
        with b.if_then(b.icmp_signed(">", k, self.c(0))):
            dst = self.at(self.outputs[0], b.mul(t, result), self.size)
            self.copy(self.work, self.at(self.inputs[0], b.mul(t, self.matrix), self.size), self.matrix)
            self.copy(dst, self.at(self.inputs[1], b.mul(t, result), self.size), result)
            info = b.call(self.routine("gesv", [I32, self.lint, self.lint, I8P, self.lint, self.lint.as_pointer(),
                                                I8P, self.lint]),
                          [self.layout(), self.narrow(n), self.narrow(k), self.work, self.narrow(n), self.ipiv, dst,
                           self.narrow(k)])
            self.checked(info, lambda: None, lambda: self.fill(dst, result, float("nan")))

    def inverse(self, t: ir.Value) -> None:
        b, n = self.b, self.n
        dst = self.at(self.outputs[0], b.mul(t, self.matrix), self.size)
        self.copy(dst, self.at(self.inputs[0], b.mul(t, self.matrix), self.size), self.matrix)
        info = b.call(self.routine("getrf", [I32, self.lint, self.lint, I8P, self.lint, self.lint.as_pointer()]),
                      [self.layout(), self.narrow(n), self.narrow(n), dst, self.narrow(n), self.ipiv])
        b.store(info, self.info_slot)
        with b.if_then(b.icmp_signed("==", info, ir.Constant(self.lint, 0))):
            b.store(b.call(self.routine("getri", [I32, self.lint, I8P, self.lint, self.lint.as_pointer()]),
                           [self.layout(), self.narrow(n), dst, self.narrow(n), self.ipiv]), self.info_slot)
        self.checked(b.load(self.info_slot), lambda: None, lambda: self.fill(dst, self.matrix, float("nan")))

    def store_sign_logdet(self, t: ir.Value, sign: float | None, logdet: float | None) -> None:
        """Matrix ``t``'s results: the constants given, or (None) the accumulators."""
        b = self.b
        sign_ptr = b.gep(self.reals(self.outputs[0]), [b.mul(t, self.c(self.parts))], inbounds=True)
        real_sign = b.load(self.acc[0]) if sign is None else ir.Constant(self.real, sign)
        b.store(real_sign, sign_ptr)
        if self.parts == 2:
            imag = b.load(self.acc[1]) if sign is None else ir.Constant(self.real, 0.0)
            b.store(imag, b.gep(sign_ptr, [self.c(1)], inbounds=True))
        value = b.load(self.acc[2]) if logdet is None else ir.Constant(self.real, logdet)
        b.store(value, b.gep(self.reals(self.outputs[1]), [t], inbounds=True))

    def log_determinant(self, t: ir.Value) -> None:
        b, n = self.b, self.n
        self.copy(self.work, self.at(self.inputs[0], b.mul(t, self.matrix), self.size), self.matrix)
        info = b.call(self.routine("getrf", [I32, self.lint, self.lint, I8P, self.lint, self.lint.as_pointer()]),
                      [self.layout(), self.narrow(n), self.narrow(n), self.work, self.narrow(n), self.ipiv])
        zero, one = ir.Constant(self.real, 0.0), ir.Constant(self.real, 1.0)

        def factored() -> None:
            # sign: the product of the diagonal's signs (phases) and a -1 per row swap;
            # log|det|: the sum of the logs of the diagonal's magnitudes, as NumPy's.
            for acc, v in zip(self.acc, (one, zero, zero)):
                b.store(v, acc)
            reals = self.reals(self.work)

            def step(i: ir.Value) -> None:
                pivot = b.load(b.gep(self.ipiv, [i], inbounds=True))
                swapped = b.icmp_signed("!=", b.sext(pivot, I64) if self.int_bits < 64 else pivot,
                                        b.add(i, self.c(1)))
                at = b.mul(b.add(b.mul(i, n), i), self.c(self.parts))
                re = b.load(b.gep(reals, [at], inbounds=True))
                flip = b.select(swapped, ir.Constant(self.real, -1.0), one)
                if self.parts == 1:
                    magnitude = b.call(self.intrinsic("fabs"), [re])
                    flip = b.fmul(flip, b.select(b.fcmp_ordered("<", re, zero), ir.Constant(self.real, -1.0), one))
                    b.store(b.fmul(b.load(self.acc[0]), flip), self.acc[0])
                else:
                    im = b.load(b.gep(reals, [b.add(at, self.c(1))], inbounds=True))
                    magnitude = b.call(self.intrinsic("sqrt"), [b.fadd(b.fmul(re, re), b.fmul(im, im))])
                    pr, pi = b.fdiv(re, magnitude), b.fdiv(im, magnitude)
                    sr, si = b.load(self.acc[0]), b.load(self.acc[1])
                    b.store(b.fmul(flip, b.fsub(b.fmul(sr, pr), b.fmul(si, pi))), self.acc[0])
                    b.store(b.fmul(flip, b.fadd(b.fmul(sr, pi), b.fmul(si, pr))), self.acc[1])
                b.store(b.fadd(b.load(self.acc[2]), b.call(self.intrinsic("log"), [magnitude])), self.acc[2])
            self.loop(n, "diagonal", step)
            self.store_sign_logdet(t, None, None)
        self.checked(info, factored, lambda: self.store_sign_logdet(t, 0.0, float("-inf")))

    def symmetric_eigen(self, t: ir.Value) -> None:
        # In double precision whatever the dtype, as NumPy computes it (numpy.linalg's
        # _commonType), rounded to the result's: a single-precision syevd/heevd's eigenvectors
        # were 1e-6 to 1e-5 from NumPy's where NumPy's are 3e-8 from the exact ones.
        b, n, parts = self.b, self.n, self.parts
        D = ir.DoubleType()
        values = b.gep(self.reals(self.outputs[0]), [b.mul(t, n)], inbounds=True)
        vectors = self.at(self.outputs[1], b.mul(t, self.matrix), self.size)
        src = self.at(self.inputs[0], b.mul(t, self.matrix), self.size)
        single = self.real != D
        if single:   # the work buffer build() sized in doubles: [a][eigenvalues]
            reals = b.mul(self.matrix, self.c(parts))
            a = b.bitcast(self.work, D.as_pointer())
            w = b.gep(a, [reals], inbounds=True)
            self.convert(a, self.reals(src), reals, b.fpext)
        else:
            self.copy(vectors, src, self.matrix)
            a, w = self.reals(vectors), values
        name = lapacke_symbol(self.sgemm, "zheevd" if parts == 2 else "dsyevd")
        routine = self.extern(name, self.lint, [I32, I8, I8, self.lint, I8P, self.lint, D.as_pointer()])
        uplo = ir.Constant(I8, ord("L" if self.r.lower else "U"))
        info = b.call(routine, [self.layout(), ir.Constant(I8, ord("V")), uplo, self.narrow(n), b.bitcast(a, I8P),
                                self.narrow(n), w])

        def rounded() -> None:
            if single:
                self.convert(values, w, n, b.fptrunc)
                self.convert(self.reals(vectors), a, b.mul(self.matrix, self.c(parts)), b.fptrunc)

        def failed() -> None:
            self.fill(vectors, self.matrix, float("nan"))
            self.fill(b.bitcast(values, I8P), n, float("nan"), parts=1)
        self.checked(info, rounded, failed)

    def convert(self, dst: ir.Value, src: ir.Value, count: ir.Value, cast: Callable) -> None:
        """``count`` reals from ``src`` to ``dst`` through ``cast`` (fpext or fptrunc) to
        ``dst``'s element type."""
        b, to = self.b, dst.type.pointee

        def one(k: ir.Value) -> None:
            x = b.load(b.gep(src, [k], inbounds=True))
            b.store(x if x.type == to else cast(x, to), b.gep(dst, [k], inbounds=True))
        self.loop(count, "convert", one)

    def singular_values(self, t: ir.Value) -> None:
        b, m, n = self.b, self.m, self.n
        k = b.select(b.icmp_signed("<", m, n), m, n)
        um, vn = (m, n) if self.r.full else (k, k)
        u = self.at(self.outputs[0], b.mul(t, b.mul(m, um)), self.size)
        values = b.gep(self.reals(self.outputs[1]), [b.mul(t, k)], inbounds=True)
        vh = self.at(self.outputs[2], b.mul(t, b.mul(vn, n)), self.size)
        self.copy(self.work, self.at(self.inputs[0], b.mul(t, self.matrix), self.size), self.matrix)
        lint = self.lint
        info = b.call(self.routine("gesdd", [I32, I8, lint, lint, I8P, lint, self.real.as_pointer(), I8P, lint, I8P,
                                             lint]),
                      [self.layout(), ir.Constant(I8, ord("A" if self.r.full else "S")), self.narrow(m),
                       self.narrow(n), self.work, self.narrow(n), values, u, self.narrow(um), vh, self.narrow(n)])

        def failed() -> None:
            self.fill(u, b.mul(m, um), float("nan"))
            self.fill(b.bitcast(values, I8P), k, float("nan"), parts=1)
            self.fill(vh, b.mul(vn, n), float("nan"))
        self.checked(info, lambda: None, failed)

    def orthogonal_triangular(self, t: ir.Value) -> None:
        b, m, n, size = self.b, self.m, self.n, self.size
        k = b.select(b.icmp_signed("<", m, n), m, n)
        columns = m if self.r.full else k                 # q's columns and r's rows
        q = self.at(self.outputs[0], b.mul(t, b.mul(m, columns)), size)
        r = self.at(self.outputs[1], b.mul(t, b.mul(columns, n)), size)
        work, tau, lint = self.work, b.bitcast(self.ipiv, I8P), self.lint
        self.copy(work, self.at(self.inputs[0], b.mul(t, self.matrix), size), self.matrix)
        info = b.call(self.routine("geqrf", [I32, lint, lint, I8P, lint, I8P]),
                      [self.layout(), self.narrow(m), self.narrow(n), work, self.narrow(n), tau])
        memset = self.extern("memset", I8P, [I8P, I32, I64])

        def bytes_(v: ir.Value) -> ir.Value:
            return b.mul(v, self.c(size))

        def factored() -> None:
            def r_row(i: ir.Value) -> None:  # zeros left of the diagonal, the factor's row from it
                row = self.at(r, b.mul(i, n), size)
                left = b.select(b.icmp_signed("<", i, n), i, n)
                b.call(memset, [row, ir.Constant(I32, 0), bytes_(left)])
                self.copy(self.at(row, left, size), self.at(work, b.add(b.mul(i, n), left), size), b.sub(n, left))
            self.loop(columns, "r_row", r_row)

            def q_row(i: ir.Value) -> None:  # the reflectors' k columns, then zeros
                row = self.at(q, b.mul(i, columns), size)
                self.copy(row, self.at(work, b.mul(i, n), size), k)
                b.call(memset, [self.at(row, k, size), ir.Constant(I32, 0), bytes_(b.sub(columns, k))])
            self.loop(m, "q_row", q_row)
            name = "ungqr" if self.parts == 2 else "orgqr"
            made = b.call(self.routine(name, [I32, lint, lint, lint, I8P, lint, I8P]),
                          [self.layout(), self.narrow(m), self.narrow(columns), self.narrow(k), q,
                           self.narrow(columns), tau])
            with b.if_then(b.icmp_signed("!=", made, ir.Constant(lint, 0))):
                nan()

        def nan() -> None:
            self.fill(q, b.mul(m, columns), float("nan"))
            self.fill(r, b.mul(columns, n), float("nan"))
        self.checked(info, factored, nan)

    def general_eigen(self, t: ir.Value) -> None:
        # In double precision whatever the dtype, as NumPy computes it (numpy.linalg's
        # _commonType): a single-precision geev gives other eigenvector signs and orders.
        b, n, lint, parts = self.b, self.n, self.lint, self.parts
        D = ir.DoubleType()
        DP = D.as_pointer()
        w = b.gep(self.reals(self.outputs[0]), [b.mul(t, b.mul(n, self.c(2)))], inbounds=True)
        v = b.gep(self.reals(self.outputs[1]), [b.mul(t, b.mul(self.matrix, self.c(2)))], inbounds=True)
        reals = b.mul(self.matrix, self.c(parts))                # a matrix's reals
        a = b.bitcast(self.work, DP)                              # the scratch build() sized in doubles
        values = b.gep(a, [reals], inbounds=True)
        vectors = b.gep(values, [b.mul(n, self.c(2))], inbounds=True)
        src = b.gep(self.reals(self.inputs[0]), [b.mul(t, reals)], inbounds=True)

        self.convert(a, src, reals, b.fpext)

        def narrow(x: ir.Value) -> ir.Value:
            return x if self.real == D else b.fptrunc(x, self.real)
        none, right = ir.Constant(I8, ord("N")), ir.Constant(I8, ord("V"))
        letter = "z" if parts == 2 else "d"
        name = lapacke_symbol(self.sgemm, letter + "geev")
        if parts == 2:  # complex: geev writes complex results
            geev = self.extern(name, lint, [I32, I8, I8, lint, I8P, lint, DP, I8P, lint, DP, lint])
            info = b.call(geev, [self.layout(), none, right, self.narrow(n), b.bitcast(a, I8P), self.narrow(n), values,
                                 ir.Constant(I8P, None), ir.Constant(lint, 1), vectors, self.narrow(n)])
        else:
            wr, wi = values, b.gep(values, [n], inbounds=True)
            geev = self.extern(name, lint, [I32, I8, I8, lint, I8P, lint, DP, DP, I8P, lint, DP, lint])
            info = b.call(geev, [self.layout(), none, right, self.narrow(n), b.bitcast(a, I8P), self.narrow(n), wr, wi,
                                 ir.Constant(I8P, None), ir.Constant(lint, 1), vectors, self.narrow(n)])
        zero = ir.Constant(D, 0.0)

        def copy_complex() -> None:
            self.convert(w, values, b.mul(n, self.c(2)), b.fptrunc)
            self.convert(v, vectors, b.mul(self.matrix, self.c(2)), b.fptrunc)

        def unpack() -> None:
            # Column j of a real pair (wi[j] > 0 then < 0) is vr[:, j] + i vr[:, j+1], then its
            # conjugate; a real eigenvalue's vector is real.
            wr, wi = values, b.gep(values, [n], inbounds=True)

            def column(j: ir.Value) -> None:
                re = b.load(b.gep(wr, [j], inbounds=True))
                im = b.load(b.gep(wi, [j], inbounds=True))
                b.store(narrow(re), b.gep(w, [b.mul(j, self.c(2))], inbounds=True))
                b.store(narrow(im), b.gep(w, [b.add(b.mul(j, self.c(2)), self.c(1))], inbounds=True))
                first = b.fcmp_ordered(">", im, zero)
                second = b.fcmp_ordered("<", im, zero)
                real_col = b.select(second, b.sub(j, self.c(1)), j)
                imag_col = b.select(first, b.add(j, self.c(1)), j)

                def row(i: ir.Value) -> None:
                    base = b.mul(i, n)
                    x = b.load(b.gep(vectors, [b.add(base, real_col)], inbounds=True))
                    y = b.load(b.gep(vectors, [b.add(base, imag_col)], inbounds=True))
                    y = b.select(first, y, b.select(second, b.fneg(y), zero))
                    at = b.mul(b.add(base, j), self.c(2))
                    b.store(narrow(x), b.gep(v, [at], inbounds=True))
                    b.store(narrow(y), b.gep(v, [b.add(at, self.c(1))], inbounds=True))
                self.loop(n, "row", row)
            self.loop(n, "column", column)

        def failed() -> None:
            self.fill(b.bitcast(w, I8P), n, float("nan"), parts=2)
            self.fill(b.bitcast(v, I8P), self.matrix, float("nan"), parts=2)
        self.checked(info, unpack if parts == 1 else copy_complex, failed)
