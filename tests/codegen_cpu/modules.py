"""Small LLVM modules built with llvmlite.ir for the codegen_cpu tests and benches: the
kind of loop the renderer will emit (a pointer per array, an i64 length, noalias)."""

from __future__ import annotations

from llvmlite import ir

# Modules here call the native pool by its symbol: as generated code does, they rely on the
# pool module, which registers that symbol with the JIT for linking.
import flowjit.codegen_cpu.pthread_pool  # noqa: F401

F32, F64, I64 = ir.FloatType(), ir.DoubleType(), ir.IntType(64)


def _loop(fn: ir.Function, start: ir.Value, stop: ir.Value, body, b: ir.IRBuilder | None = None) -> ir.IRBuilder:
    """``for i in [start, stop): body(builder, i)``, from builder ``b``'s block if given
    (else a new entry block); returns a builder at the exit block. A body that ends in a
    block of its own (a nested loop) returns the builder it ended at."""
    b = b or ir.IRBuilder(fn.append_basic_block("entry"))
    entry = b.block
    loop, exit_ = (fn.append_basic_block(s) for s in ("loop", "exit"))
    b.cbranch(b.icmp_signed("<", start, stop), loop, exit_)
    b.position_at_end(loop)
    i = b.phi(I64)
    i.add_incoming(start, entry)
    b = body(b, i) or b
    nxt = b.add(i, ir.Constant(I64, 1))
    i.add_incoming(nxt, b.block)
    b.cbranch(b.icmp_signed("<", nxt, stop), loop, exit_)
    b.position_at_end(exit_)
    return b


def axpb(name: str, a: float = 2.0, c: float = 1.0) -> str:
    """``void axpb(float* x, float* y, i64 n)``: y[i] = x[i]*a + c. ``name`` goes into the
    module id, so each test gets a text (and a cache key) of its own."""
    mod = ir.Module(name)
    fn = ir.Function(mod, ir.FunctionType(ir.VoidType(), [F32.as_pointer(), F32.as_pointer(), I64]), "axpb")
    x, y, n = fn.args
    for p in (x, y):
        p.add_attribute("noalias")

    def body(b, i):
        v = b.fadd(b.fmul(b.load(b.gep(x, [i], inbounds=True)), ir.Constant(F32, a)), ir.Constant(F32, c))
        b.store(v, b.gep(y, [i], inbounds=True))

    _loop(fn, ir.Constant(I64, 0), n, body).ret_void()
    return str(mod)


def fsum(name: str) -> str:
    """``float fsum(float* x, i64 n)``: the sum in float32, with the reassociation flag
    that lets LLVM vectorize it (as NumPy's pairwise sum reorders too)."""
    mod = ir.Module(name)
    fn = ir.Function(mod, ir.FunctionType(F32, [F32.as_pointer(), I64]), "fsum")
    x, n = fn.args
    x.add_attribute("noalias")
    acc = {}

    def body(b, i):
        phi = b.phi(F32)
        phi.add_incoming(ir.Constant(F32, 0.0), fn.entry_basic_block)
        s = b.fadd(phi, b.load(b.gep(x, [i], inbounds=True)), flags=("reassoc", "nsz"))
        phi.add_incoming(s, b.block)
        acc["phi"], acc["s"] = phi, s

    b = _loop(fn, ir.Constant(I64, 0), n, body)
    out = b.phi(F32)
    out.add_incoming(ir.Constant(F32, 0.0), fn.entry_basic_block)
    out.add_incoming(acc["s"], acc["s"].parent)
    b.ret(out)
    return str(mod)


def _chunk_body(fn: ir.Function, start, stop, x, y, b: ir.IRBuilder | None = None) -> None:
    def body(b, i):
        py = b.gep(y, [i], inbounds=True)
        v = b.fadd(b.load(b.gep(x, [i], inbounds=True)), ir.Constant(F32, 1.0))
        b.store(b.fadd(b.load(py), v), py)

    _loop(fn, start, stop, body, b).ret_void()


def chunk_add(name: str) -> str:
    """``void chunk_add(i64 start, i64 stop, float* x, float* y)``: y[i] += x[i] + 1 over
    [start, stop), the signature the Python chunk pool calls."""
    mod = ir.Module(name)
    fn = ir.Function(mod, ir.FunctionType(ir.VoidType(), [I64, I64, F32.as_pointer(), F32.as_pointer()]),
                     "chunk_add")
    start, stop, x, y = fn.args
    for p in (x, y):
        p.add_attribute("noalias")
    _chunk_body(fn, start, stop, x, y)
    return str(mod)


def parallel_driver(name: str, parts: int) -> str:
    """``void driver(float* x, float* y, i64 n)``: y += x + 1 in ``parts`` pieces through
    ``flowjit_parallel_for`` declared by name, with the arrays passed in a context struct:
    the shape of a program's parallel loop inside its one native call."""
    mod = ir.Module(name)
    i8p, fp = ir.IntType(8).as_pointer(), F32.as_pointer()
    ctx_ty = ir.LiteralStructType([fp, fp])
    chunk_ty = ir.FunctionType(ir.VoidType(), [I64, I64, i8p])
    chunk = ir.Function(mod, chunk_ty, "chunk")
    chunk.linkage = "internal"
    start, stop, ctx = chunk.args
    pre = ir.IRBuilder(chunk.append_basic_block("pre"))
    c = pre.bitcast(ctx, ctx_ty.as_pointer())
    zero = ir.Constant(ir.IntType(32), 0)
    x, y = (pre.load(pre.gep(c, [zero, ir.Constant(ir.IntType(32), k)])) for k in (0, 1))
    _chunk_body(chunk, start, stop, x, y, pre)
    pf = ir.Function(mod, ir.FunctionType(ir.VoidType(), [chunk_ty.as_pointer(), I64, i8p, I64]),
                     "flowjit_parallel_for")
    drv = ir.Function(mod, ir.FunctionType(ir.VoidType(), [fp, fp, I64]), "driver")
    b = ir.IRBuilder(drv.append_basic_block("entry"))
    slot = b.alloca(ctx_ty)
    for k, v in enumerate(drv.args[:2]):
        b.store(v, b.gep(slot, [zero, ir.Constant(ir.IntType(32), k)]))
    b.call(pf, [chunk, drv.args[2], b.bitcast(slot, i8p), ir.Constant(I64, parts)])
    b.ret_void()
    return str(mod)


def cpu_recorder(name: str) -> str:
    """``void record(i64 start, i64 stop, i8* ctx)``, a chunk function of the native pool's
    signature, ctx an ``{i32* cpus, i32* tids, i64 spin}``: for each i of [start, stop) it
    calls ``sched_getcpu`` ``spin`` times (about 1 us a call for spin 20), then stores the
    CPU it ran on in cpus[i] and its thread (``gettid``) in tids[i]. Linux only."""
    mod = ir.Module(name)
    i8p, i32 = ir.IntType(8).as_pointer(), ir.IntType(32)
    ctx_ty = ir.LiteralStructType([i32.as_pointer(), i32.as_pointer(), I64])
    getcpu = ir.Function(mod, ir.FunctionType(i32, []), "sched_getcpu")
    gettid = ir.Function(mod, ir.FunctionType(i32, []), "gettid")
    fn = ir.Function(mod, ir.FunctionType(ir.VoidType(), [I64, I64, i8p]), "record")
    start, stop, ctx = fn.args
    pre = ir.IRBuilder(fn.append_basic_block("pre"))
    c = pre.bitcast(ctx, ctx_ty.as_pointer())
    zero = ir.Constant(ir.IntType(32), 0)
    cpus, tids, spin = (pre.load(pre.gep(c, [zero, ir.Constant(ir.IntType(32), k)])) for k in (0, 1, 2))

    def element(b, i):
        def call(b, _k):
            b.call(getcpu, [])
        b = _loop(fn, ir.Constant(I64, 0), spin, call, b)
        b.store(b.call(getcpu, []), b.gep(cpus, [i], inbounds=True))
        b.store(b.call(gettid, []), b.gep(tids, [i], inbounds=True))
        return b

    _loop(fn, start, stop, element, pre).ret_void()
    return str(mod)


def sgemm_caller(name: str, symbol: str, int_bits: int) -> str:
    """``void mm(float* a, float* b, float* c, i64 m, i64 n, i64 k)``: C = A @ B
    (row-major) through CBLAS ``symbol``, declared by name: what generated code will do."""
    mod = ir.Module(name)
    it = ir.IntType(int_bits)
    i32 = ir.IntType(32)  # CBLAS enums are C ints
    fp = F32.as_pointer()
    gemm = ir.Function(mod, ir.FunctionType(ir.VoidType(), [i32, i32, i32, it, it, it, F32, fp, it,
                                                             fp, it, F32, fp, it]), symbol)
    fn = ir.Function(mod, ir.FunctionType(ir.VoidType(), [fp, fp, fp, I64, I64, I64]), "mm")
    a, bm, c, m, n, k = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    m, n, k = (b.trunc(v, it) if int_bits < 64 else v for v in (m, n, k))
    b.call(gemm, [ir.Constant(i32, 101), ir.Constant(i32, 111), ir.Constant(i32, 111), m, n, k,
                  ir.Constant(F32, 1.0), a, k, bm, n, ir.Constant(F32, 0.0), c, n])
    b.ret_void()
    return str(mod)


def exp_tanh(name: str) -> str:
    """``void et(float* x, float* y, i64 n)``: y[i] = exp(x[i]) + tanh(x[i]) through the
    llvm.exp intrinsic and libm's tanhf, calls the loaded object must resolve."""
    mod = ir.Module(name)
    fn = ir.Function(mod, ir.FunctionType(ir.VoidType(), [F32.as_pointer(), F32.as_pointer(), I64]), "et")
    exp = mod.declare_intrinsic("llvm.exp", [F32])
    tanh = ir.Function(mod, ir.FunctionType(F32, [F32]), "tanhf")
    x, y, n = fn.args

    def body(b, i):
        v = b.load(b.gep(x, [i], inbounds=True))
        b.store(b.fadd(b.call(exp, [v]), b.call(tanh, [v])), b.gep(y, [i], inbounds=True))

    _loop(fn, ir.Constant(I64, 0), n, body).ret_void()
    return str(mod)
