"""The LLVM renderer (flowjit.codegen_cpu.render): every fusible registry case, random
fused programs and the 0-d reductions rendered, compiled and run against the reference
interpreter, plus the NaN, infinity and integer edges of max, min, floor_div, mod and cast."""

from __future__ import annotations

import numpy as np
import pytest

import flowjit as fj
from flowjit.codegen_cpu import jit
from flowjit.codegen_cpu.render import render_kernel
from flowjit.ir.interpreter import run_op
from flowjit.lowering import lower_block, print_kernel, verify_kernel
from flowjit.lowering.loops import Const
from tests.lowering.test_registry_cases import CASES, case_function
from tests.random_programs import random_program
from tests.registry.case import kernel_tolerance
from tests.test_programs import ZERO_D_REDUCTIONS, zero_d_input


@pytest.fixture(autouse=True)
def _own_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("FLOWJIT_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "llvm-cache"))


def run_kernel(kernel, inputs, outputs_like):
    """Compile ``kernel`` and run it on ``inputs`` into fresh outputs shaped like ``outputs_like``."""
    from flowjit.codegen_cpu.render import compile_kernel
    got = [np.full(np.shape(w), 7, np.asarray(w).dtype) for w in outputs_like]
    compile_kernel(kernel)([np.asarray(x, order="C") for x in inputs], got)
    return got


def check_block(block, inputs, want, name):
    kernel = lower_block(block, name, collapse=True)   # as the CPU compiles it
    verify_kernel(kernel)
    got = run_kernel(kernel, inputs, want)
    for g, w in zip(got, want):
        w = np.asarray(w)
        tol = kernel_tolerance(w.dtype)
        np.testing.assert_allclose(g, w, equal_nan=True, err_msg=print_kernel(kernel), **tol)
        assert g.dtype == w.dtype


# 34 s: every case is compiled in the default suite as a whole program by
# tests/registry/test_compiled.py, through this renderer; here each alone, as a kernel.
@pytest.mark.slow
def test_every_fusible_registry_case_compiles_and_runs_as_the_interpreter():
    from flowjit.ir import interpret
    failures = []
    for case in CASES:
        fn, arrays = case_function(case)
        try:
            check_block(fn.body, arrays, interpret(fn, arrays), f"case_{case.prim}")
        except Exception as e:  # collected, so one run names every failing case
            failures.append(f"{case.id or case.prim}: {str(e)[:3000]}")
    assert not failures, f"{len(failures)} of {len(CASES)} cases:\n" + "\n\n".join(failures[:5])


def check_compiled(f, *inputs: np.ndarray) -> int:
    """Run the fused program of ``f`` op by op with the interpreter, and every fusion block
    also compiled by the LLVM renderer on the block's inputs; assert they agree. Returns
    the number of kernels compiled."""
    fused = fj.function(f).ir(*inputs, stage="fused")
    values = dict(zip((a.id for a in fused.args), map(np.asarray, inputs)))
    kernels = 0
    for op in fused.body.ops:
        args = [values[v.id] for v in op.inputs]
        results = run_op(op, args)
        values.update(zip((r.id for r in op.results), results))
        if op.primitive.role == "kernel":
            check_block(op.blocks[0], args, results, op.attrs["name"])
            kernels += 1
    return kernels


def test_random_programs_compile_and_run_as_the_interpreter():
    programs = [random_program(seed) for seed in range(150)]
    failures, kernels = [], 0
    for program in programs:
        try:
            kernels += check_compiled(program.function(fj), *program.inputs())
        except AssertionError as e:  # collected, so one run names every failing program
            failures.append(f"{program}\n{str(e)[:3000]}")
    assert not failures, f"{len(failures)} of {len(programs)} programs:\n" + "\n\n".join(failures[:3])
    assert kernels >= 150


@pytest.mark.parametrize("name", sorted(ZERO_D_REDUCTIONS))
def test_zero_d_reductions(name):
    f, _ = ZERO_D_REDUCTIONS[name]
    assert check_compiled(f, zero_d_input(name)) >= 1


NAN, INF = float("nan"), float("inf")
FLOAT_EDGES = [NAN, INF, -INF, 0.0, -0.0, 1.5, -1.5, 2.5, -7.0, 3e9, -3e9, 1e300, 70000.5, 1e-310]
INT_EDGES = [0, 1, -1, 7, -7, 2**31 - 1, -2**31, 3, -3, 2]


def _edge_pairs(values, dtype):
    a = np.array([x for x in values for _ in values], dtype=dtype)
    b = np.array([y for _ in values for y in values], dtype=dtype)
    return a, b


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("op", ["maximum", "minimum", "floor_divide", "mod"])
def test_float_edges_of_binary_ops(op, dtype):
    with np.errstate(all="ignore"):
        a, b = _edge_pairs(FLOAT_EDGES, dtype)
    f = {"maximum": fj.maximum, "minimum": fj.minimum, "floor_divide": lambda x, y: x // y,
         "mod": lambda x, y: x % y}[op]
    assert check_compiled(lambda x, y: f(x * 1, y), a, b) == 1


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
@pytest.mark.parametrize("op", ["maximum", "minimum", "floor_divide", "mod"])
def test_int_edges_of_binary_ops(op, dtype):
    edges = INT_EDGES + ([2**63 - 1, -2**63] if dtype == np.int64 else [])
    a, b = _edge_pairs(edges, dtype)
    f = {"maximum": fj.maximum, "minimum": fj.minimum, "floor_divide": lambda x, y: x // y,
         "mod": lambda x, y: x % y}[op]
    assert check_compiled(lambda x, y: f(x + 0, y), a, b) == 1


@pytest.mark.parametrize("src", [np.float16, np.float32, np.float64, np.int32, np.int64])
def test_casts_of_edge_values(src):
    """Out-of-range and NaN float -> int casts give NumPy's result on this machine (INT_MIN),
    never LLVM poison; float64 -> float16 rounds once."""
    with np.errstate(all="ignore"):
        values = FLOAT_EDGES + [65519.99, 65520.0, 2.0**-25 * 1.0000001, 1 + 2.0**-11 + 2.0**-40]
        x = np.array(values if np.dtype(src).kind == "f" else INT_EDGES, np.float64).astype(src)
    targets = [d for d in (np.float16, np.float32, np.float64, np.int32, np.int64, np.bool_) if d != src]
    assert check_compiled(lambda v: tuple((v * 1).astype(t) for t in targets), x) >= 1


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_reductions_of_nan_and_inf(dtype):
    rows = np.array([[1, NAN, 3, -INF], [INF, 2, -1, 0], [NAN, NAN, 1, 2], [-INF, -INF, INF, INF]], dtype)
    f = lambda x: (fj.max(x * 1, axis=1), fj.min(x * 1, axis=1), fj.argmax(x * 1, axis=1),  # noqa: E731
                   fj.argmin(x * 1, axis=1), fj.sum(x * 1, axis=1), fj.prod(x * 1, axis=1))
    assert check_compiled(f, rows) >= 1


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_vectorized_max_and_min_reductions_propagate_a_nan_in_any_lane(dtype):
    """Float max/min reduce NaN-blind (maxnum) beside a "NaN seen" flag: a NaN in a vector's
    first or last lane, in the scalar tail, or in the first element still gives NaN, rows of
    infinities and zeros keep their value, and a softmax row with a NaN is all NaN."""
    x = np.random.default_rng(3).standard_normal((40, 301)).astype(dtype)
    for row, col in ((1, 0), (2, 15), (3, 16), (4, 63), (5, 299), (6, 300), (7, 137)):
        x[row, col] = NAN
    x[8], x[9], x[10] = INF, -INF, 0.0
    x[11, ::2] = -INF
    f = lambda v: (fj.max(v * 1, axis=1), fj.min(v * 1, axis=1), fj.max(v * 1), fj.min(v[8:] * 1),  # noqa: E731
                   fj.nn.softmax(v * 1, axis=-1))
    with np.errstate(invalid="ignore"):
        assert check_compiled(f, x) == 1


def test_a_running_maximum_stored_back_is_a_blend_and_a_store_not_a_masked_store():
    """A max pool keeps each window's running maximum in its output (``out = select(out >
    v, out, v)``, the old value read back): compiled for an AVX2 CPU (Zen 3) at no fixed
    shape, that store must not become ``vmaskmovps``, microcoded on AMD's cores, and the
    pool still gives NumPy's maxima, a NaN in a window included."""
    x = np.random.default_rng(5).standard_normal((4, 14, 14, 64)).astype(np.float32)
    x[1, 3, 4, 7] = NAN
    f = fj.function(lambda v: fj.nn.max_pool(fj.maximum(v, 0.0), 2))
    (_, _, kernel), = f.ir(x, stage="loops").kernels
    asm = jit.compile_assembly(render_kernel(kernel), jit.host_target("znver3"))
    assert "vmaskmov" not in asm and "vblendvps" in asm
    want = np.maximum(x, 0).reshape(4, 7, 2, 7, 2, 64).max(axis=(2, 4))
    np.testing.assert_array_equal(f(x), want)
    assert np.isnan(f(x)[1, 1, 2, 7])


def test_a_large_parallel_loop_runs_in_chunks_as_one_call():
    """Past PARALLEL_MIN_ELEMENTS a kernel with one top-level parallel loop runs as chunks
    on the pool (the chunk entry): rows of a softmax and elements of a gelu, every one written."""
    from flowjit.codegen_cpu.kernel_abi import chunk_loop
    rng = np.random.default_rng(1)
    x = rng.standard_normal(1 << 20).astype(np.float32)
    rows = rng.standard_normal((1 << 11, 300)).astype(np.float64)

    def gelu(v):
        return 0.5 * v * (1 + fj.tanh(0.7978845608 * (v + 0.044715 * v**3)))

    def softmax(v):
        e = fj.exp(v - v.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)
    for f, v in ((gelu, x), (softmax, rows)):
        (op,) = [op for op in fj.function(f).ir(v, stage="fused").body.ops if op.primitive.role == "kernel"]
        assert chunk_loop(lower_block(op.blocks[0])) is not None
        assert check_compiled(f, v) == 1


def _bad_kernel(value):
    from flowjit.ir.dtypes import float32, int64
    from flowjit.lowering.loops import Buffer, Kernel, Loop, SizeVar, Store, Var
    i = Var("i1", int64)
    return Kernel("bad", (Buffer("out0", "out", float32, 1),), (SizeVar("n0", "out0", 0),),
                  (Loop("i1", Const(0, int64), Var("n0", int64), 1, (Store("out0", (i,), value(i)),)),))


@pytest.mark.parametrize("what", ["unknown op", "loop IR rejects", "llvm rejects"])
def test_a_kernel_llvm_cannot_compile_is_an_error_naming_it_with_its_loop_ir_and_llvm_ir_saved(what, monkeypatch):
    """A loop-IR verification failure, a rendering failure and an LLVM verification failure
    are all KernelRenderError (an LLVMCompileError) naming the kernel, with the loop IR (and
    the LLVM IR, when there is some) saved for a report."""
    import re

    from flowjit.codegen_cpu.jit import LLVMCompileError
    from flowjit.codegen_cpu.render import KernelRenderError, compile_kernel
    from flowjit.ir.dtypes import float32
    from flowjit.ir.errors import BUG_REPORT
    from flowjit.lowering.loops import Prim
    if what == "unknown op":
        kernel = _bad_kernel(lambda i: Prim("frobnicate", (Const(1.0, float32),), float32))
    else:  # integer division of floats: the loop-IR verifier refuses it; past it, LLVM does
        kernel = _bad_kernel(lambda i: Prim("idiv", (Const(1.0, float32), Const(2.0, float32)), float32))
    if what == "llvm rejects":
        import flowjit.codegen_cpu.render as render
        monkeypatch.setattr(render, "verify_kernel", lambda k: None)
    with pytest.raises(KernelRenderError) as info:
        compile_kernel(kernel)
    assert isinstance(info.value, LLVMCompileError)
    message = str(info.value)
    assert "'bad'" in message and BUG_REPORT in message and message.count("bug") == 1  # said once
    saved = re.findall(r"(/\S+\.ll)", message)
    texts = [open(p).read() for p in saved]
    assert any("loop IR of kernel bad" in t and "out0[i1]" in t for t in texts)
    if what == "llvm rejects":
        assert any("fj_kernel_bad" in t and "define" in t for t in texts)
    if what == "loop IR rejects":
        assert "idiv" in message and len(texts) == 1  # LLVM never saw it


def test_an_in_place_output_may_be_its_input():
    """An output the kernel may write over an input (Kernel.in_place) gets no noalias: the
    kernel called with one array as both computes what it computes into a fresh one."""
    from flowjit.codegen_cpu.render import compile_kernel, render_kernel
    x = np.random.default_rng(2).standard_normal((64, 33)).astype(np.float32)
    (op,) = fj.function(lambda v: fj.tanh(v) * 2 + v).ir(x, stage="fused").body.ops
    kernel = lower_block(op.blocks[0], "inplace")
    assert kernel.in_place == (("in0",),)
    assert "noalias" not in render_kernel(kernel).split("define", 1)[1].split("{", 1)[0]
    want = run_kernel(kernel, [x], [x])[0]
    compile_kernel(kernel)([x], [x])
    np.testing.assert_array_equal(x, want)


def test_arrays_of_another_dtype_or_layout_are_refused_before_the_call():
    from flowjit.codegen_cpu.render import compile_kernel
    x = np.zeros((4, 6), np.float32)
    (op,) = fj.function(lambda v: v * 2).ir(x, stage="fused").body.ops
    compiled = compile_kernel(lower_block(op.blocks[0], "twice"))
    for bad in (x.astype(np.float64), x[:, ::2], x[0]):
        with pytest.raises(TypeError, match="twice: expected a C-contiguous float32 array of rank 2"):
            compiled([bad], [np.zeros(bad.shape, np.float32)])


@pytest.mark.parametrize("offset", [0, 1, 5])
def test_a_large_elementwise_output_is_streamed_line_by_line_from_any_offset(offset):
    """From STREAM_MIN_BYTES a ``stream`` loop stores whole 64-byte lines non-temporally:
    the elements before the first line of the output (``offset`` elements into one), the
    lines, and the rest are each written once, also when the pool splits the loop."""
    from flowjit.codegen_cpu.kernel_abi import STREAM_MIN_BYTES
    from flowjit.codegen_cpu.render import compile_kernel, render_kernel
    n = STREAM_MIN_BYTES // 4 + 21
    x = np.random.default_rng(4).standard_normal(n).astype(np.float32)
    (op,) = fj.function(lambda v: fj.maximum(v * 3 + 1, v)).ir(x, stage="fused").body.ops
    kernel = lower_block(op.blocks[0], "streamed")
    assert "!nontemporal" in render_kernel(kernel)
    storage = np.full(n + 16, np.nan, np.float32)
    out = storage[offset:offset + n]
    compile_kernel(kernel)([x], [out])
    np.testing.assert_array_equal(out, np.maximum(x * np.float32(3) + np.float32(1), x))
    assert np.isnan(storage[:offset]).all() and np.isnan(storage[offset + n:]).all()


def _edge_values(d):
    if d.is_bool:
        return [False, True]
    if d.is_int:
        info = np.iinfo(d.np)
        values = [0, 1, -1, 2, -2, 3, 7, -7, 100, info.max, info.min, info.max - 1, info.min + 1]
        return list(dict.fromkeys(v for v in values if info.min <= v <= info.max))
    return [0.0, -0.0, 0.5, -0.5, 1.0, -1.0, 1.5, 2.5, -2.5, 3.0, 1e-3, 7.25, -100.0, 1e30, -1e30, 1e-40, NAN,
            INF, -INF]


def _op_cases():
    from flowjit.ir.dtypes import INT_DTYPES, bool_, float16, float32, float64
    from flowjit.lowering import scalar
    numbers = (*INT_DTYPES, float16, float32, float64)
    for op, (arity, kinds, rule) in sorted(scalar.OPS.items()):
        for d in (*numbers, bool_):
            if scalar.kind_of(d) not in kinds:
                continue
            if op == "nextafter" and d == float16:
                continue  # never built: kernels compute float16 in float32, so fj.nextafter refuses it
            if op == "cast":
                for to in numbers:
                    if to != d and d != bool_:
                        yield op, d, to
            else:
                yield op, d, None


@pytest.mark.parametrize("op, d, to", list(_op_cases()), ids=lambda v: getattr(v, "short", v))
def test_every_scalar_op_for_every_dtype_computes_its_numpy_reference(op, d, to):
    """Each op of scalar.OPS over every dtype it takes, on every pair of edge values (NaN,
    infinities, signed zeros, denormals, integer limits), against ``scalar.reference``:
    bit for bit, but for the math intrinsics (kernel_tolerance)."""
    from flowjit.ir.dtypes import bool_, int64
    from flowjit.lowering import scalar
    from flowjit.lowering.loops import Buffer, Kernel, Load, Loop, Prim, SizeVar, Store, Var
    arity = scalar.OPS[op][0]
    values = _edge_values(d)
    with np.errstate(all="ignore"):
        grid = [np.array(col, d.np) for col in zip(*__import__("itertools").product(values, repeat=min(arity, 2)))]
    if op == "select":
        grid = [np.arange(grid[0].size) % 3 == 0, grid[0], grid[1]]
    elif arity == 3:   # betainc(a, b, x): the pairs, and the first reversed as a third
        grid = [*grid, grid[0][::-1]]
    if op in ("idiv", "irem"):  # the precondition: never a zero divisor nor (MIN, -1)
        keep = (grid[1] != 0) & ~((grid[0] == np.iinfo(d.np).min) & (grid[1] == -1))
        grid = [g[keep] for g in grid]
    if op == "ipow":
        keep = (grid[1] >= -3) & (grid[1] <= 9)
        grid = [g[keep] for g in grid]
    if op in ("shl", "shr"):  # the precondition: 0 <= shift < width (the templates guard it)
        keep = (grid[1] >= 0) & (grid[1] < 8 * d.itemsize)
        grid = [g[keep] for g in grid]
    if op == "pow":  # NumPy disagrees with itself on (-inf) ** 0.5: nan for scalars and float32
        # arrays, inf (C's pow) for float64 arrays; libm's inf is what renderers give
        keep = ~((grid[0] == -INF) & (np.floor(grid[1]) != grid[1]))
        grid = [g[keep] for g in grid]
    types = [bool_ if op == "select" and k == 0 else d for k in range(len(grid))]
    i = Var("i", int64)
    args = tuple(Load(f"in{k}", (i,), t) for k, t in enumerate(types))
    out_d = scalar.result_dtype(op, args, to)
    kernel = Kernel(f"op_{op}", (*[Buffer(f"in{k}", "in", t, 1) for k, t in enumerate(types)],
                                 Buffer("out0", "out", out_d, 1)), (SizeVar("n", "out0", 0),),
                    (Loop("i", Const(0, int64), Var("n", int64), 1, (Store("out0", (i,), Prim(op, args, out_d)),)),))
    verify_kernel(kernel)
    ref = scalar.reference(op, out_d)
    want = np.array([ref(*[g[j] for g in grid]) for j in range(grid[0].size)], out_d.np)
    got = run_kernel(kernel, grid, [want])[0]
    if op in scalar.INTRINSICS and out_d.is_float:
        tol = kernel_tolerance(want.dtype)
        np.testing.assert_allclose(got, want, equal_nan=True, **tol)
    else:
        np.testing.assert_array_equal(got, want, err_msg=f"{op} {d.short}: inputs {grid}")


def test_if_statements_and_temp_buffers():
    """An ``If`` (no lowering emits one yet) runs one branch; a reduction over leading axes
    accumulates in a temp buffer the kernel allocates and frees itself."""
    from flowjit.ir.dtypes import float64, int64
    from flowjit.lowering.loops import Buffer, If, Kernel, Load, Loop, Prim, SizeVar, Store, Var
    i = Var("i", int64)
    x = Load("in0", (i,), float64)
    branchy = Kernel("branchy", (Buffer("in0", "in", float64, 1), Buffer("out0", "out", float64, 1)),
                     (SizeVar("n", "out0", 0),),
                     (Loop("i", Const(0, int64), Var("n", int64), 1,
                           (If(Prim("gt", (x, Const(0.0, float64)), fj.bool_),
                               (Store("out0", (i,), Prim("mul", (x, Const(2.0, float64)), float64)),),
                               (Store("out0", (i,), Const(-1.0, float64)),)),)),))
    verify_kernel(branchy)
    v = np.array([1.5, -2.0, 0.0, NAN, 3.0])
    np.testing.assert_array_equal(run_kernel(branchy, [v], [v])[0], np.where(v > 0, v * 2, -1.0))
    m = np.random.default_rng(5).standard_normal((37, 5, 3)).astype(np.float32)
    (op,) = fj.function(lambda a: (a * 2).sum(axis=(0, 1))).ir(m, stage="fused").body.ops
    kernel = lower_block(op.blocks[0], "colsum")
    assert any(b.role == "temp" for b in kernel.buffers)
    assert check_compiled(lambda a: (a * 2).sum(axis=(0, 1)), m) == 1


@pytest.mark.parametrize("kind", ["argmax", "argmin"])
@pytest.mark.parametrize("start", [0.0, NAN, -INF, INF])
def test_arg_accumulators_from_any_start_as_the_evaluator(kind, start):
    """An argmax/argmin accumulator takes its first element whatever its start (the
    lowering starts at the extreme, where the renderer drops the "found" flag): rows with
    NaN, ties, infinities and all-below-start values, against flowjit.lowering.evaluate."""
    from flowjit.ir.dtypes import float32, int64
    from flowjit.lowering import evaluate
    from flowjit.lowering.loops import Accumulator, AccValue, Buffer, Kernel, Load, Loop, SizeVar, Store, Update, Var
    i, r = Var("i", int64), Var("r", int64)
    body = (Loop("i", Const(0, int64), Var("n0", int64), 1, (
        Accumulator("a", kind, float32, Const(start, float32)),
        Loop("r", Const(0, int64), Var("n1", int64), 1, (Update("a", Load("in0", (i, r), float32), r),)),
        Store("out0", (i,), AccValue("a", int64)))),)
    kernel = Kernel("args", (Buffer("in0", "in", float32, 2), Buffer("out0", "out", int64, 1)),
                    (SizeVar("n0", "in0", 0), SizeVar("n1", "in0", 1)), body)
    verify_kernel(kernel)
    rows = np.array([[-1, -2, -3, -1], [1, NAN, 3, NAN], [-INF, -INF, -INF, -INF], [INF, 2, INF, -INF],
                     [NAN, NAN, 0, 1], [0, 0, 0, 0], [5, -5, 6, -6], [-3, -7, -7, -3]], np.float32)
    want = np.zeros(len(rows), np.int64)
    evaluate(kernel, [rows], [want])
    np.testing.assert_array_equal(run_kernel(kernel, [rows], [want])[0], want)


def _row_sums(stop, step=1, kind="sum", dtype=None):
    """A kernel summing each row of ``in0`` over a loop of ``step`` from 0 to ``stop`` (a
    constant, or the row's length where None), with ``step < 0`` going down from ``stop``."""
    from flowjit.ir.dtypes import float32, int64
    from flowjit.lowering import loops as L
    dtype = dtype or float32
    i, r, n1 = L.Var("i", int64), L.Var("r", int64), L.Var("n1", int64)
    end = n1 if stop is None else Const(stop, int64)
    last = L.Prim("sub", (end, Const(1, int64)), int64) if stop is None else Const(stop - 1, int64)
    start, stop_at = (Const(0, int64), end) if step > 0 else (last, Const(-1, int64))
    body = (L.Loop("i", Const(0, int64), L.Var("n0", int64), 1, (
        L.Accumulator("a", kind, dtype, Const(0.0 if kind == "sum" else 1.0, dtype)),
        L.Loop("r", start, stop_at, step, (L.Update("a", L.Load("in0", (i, r), dtype)),)),
        L.Store("out0", (i,), L.AccValue("a", dtype)))),)
    return L.Kernel("rows", (L.Buffer("in0", "in", dtype, 2), L.Buffer("out0", "out", dtype, 1)),
                    (L.SizeVar("n0", "in0", 0), L.SizeVar("n1", "in0", 1)), body)


def test_float_sums_reassociate_only_in_loops_of_enough_trips():
    # emit.REASSOCIATE_MIN_TRIPS: a loop LLVM may unroll whole sums in order (whichever
    # pipeline optimizes it, the same order); a longer one keeps reassoc (it vectorizes); a
    # loop of unknown length both, behind a test of its trip count; the outer row loop none.
    import re

    from flowjit.codegen_cpu import emit
    from flowjit.codegen_cpu.render import render_kernel
    from flowjit.ir.dtypes import float16, float64

    least = emit.REASSOCIATE_MIN_TRIPS

    def adds(kernel):
        text = render_kernel(kernel)
        return (len(re.findall(r"= fadd reassoc ", text)), len(re.findall(r"= fadd (?:float|double) ", text)),
                bool(re.search(rf"icmp sge i64 %\S+, {least}\b", text)))

    assert adds(_row_sums(least - 1)) == (0, 1, False)
    assert adds(_row_sums(least)) == (1, 0, False)
    assert adds(_row_sums(least - 1, step=-1)) == (0, 1, False)
    assert adds(_row_sums(least, step=-1)) == (1, 0, False)
    assert adds(_row_sums(None)) == (1, 1, True)
    assert adds(_row_sums(None, step=-1)) == (1, 1, True)
    assert adds(_row_sums(None, dtype=float64)) == (1, 1, True)
    # a product likewise (fmul); a float16 sum never
    text = render_kernel(_row_sums(None, kind="prod"))
    assert text.count("= fmul reassoc ") == 1
    assert "reassoc" not in render_kernel(_row_sums(None, dtype=float16))
    # the two versions give the same row sums as NumPy's within rounding, short rows in order
    rows = np.random.default_rng(2).standard_normal((5, least + 7)).astype(np.float32)
    for width in (3, least - 1, least, least + 7):
        part = np.ascontiguousarray(rows[:, :width])
        got = run_kernel(_row_sums(None), [part], [np.zeros(5, np.float32)])[0]
        np.testing.assert_allclose(got, part.astype(np.float64).sum(axis=1), rtol=1e-5, atol=1e-5)
        if width < least:
            in_order = np.zeros(5, np.float32)
            for k in range(width):
                in_order += part[:, k]
            np.testing.assert_array_equal(got, in_order)


def test_a_temp_buffer_that_cannot_be_allocated_is_a_memory_error_and_nothing_runs():
    from flowjit.codegen_cpu.render import compile_kernel
    from flowjit.ir.dtypes import float32, int64
    from flowjit.lowering.loops import Buffer, Kernel, Load, Prim, SizeVar, Store, Var
    temp = Buffer("t", "temp", float32, 1, (Const(2**60, int64),))
    last = Prim("sub", (Var("n", int64), Const(1, int64)), int64)  # an index LLVM cannot know
    kernel = Kernel("hungry", (Buffer("out0", "out", float32, 1), temp), (SizeVar("n", "out0", 0),),
                    (Store("t", (last,), Const(1.0, float32)),
                     Store("out0", (Const(0, int64),), Load("t", (Const(0, int64),), float32))))
    verify_kernel(kernel)
    out = np.full(3, 5.0, np.float32)
    compiled = compile_kernel(kernel)
    with pytest.raises(MemoryError, match="kernel hungry: out of memory for its temp buffers"):
        compiled([], [out])
    assert out[0] == 5.0


@pytest.mark.parametrize("op", sorted({"exp", "expm1", "log", "log1p", "sqrt", "sin", "cos", "tanh", "erf",
                                       "atan2", "pow", "floor", "ceil", "rint", "fabs", "fmod", "copysign"}))
def test_math_without_a_port_falls_back_to_llvm_and_libm(op, monkeypatch, tmp_path):
    """For a name codegen_cpu.intrinsics has no port of, a math op is LLVM's intrinsic or
    libm's function, with the same results (here: as if it had none)."""
    from flowjit.codegen_cpu import intrinsics
    from flowjit.codegen_cpu.emit import _Renderer
    from flowjit.ir.dtypes import float16, float32, float64
    monkeypatch.setattr(intrinsics, "function", lambda module, name, *flags, **named: None)
    monkeypatch.setenv("FLOWJIT_CACHE_DIR", str(tmp_path))  # compiled here, not the ports' cached objects
    if op != "fmod":  # LLVM's frem instruction, never a call
        fn = _Renderer(_bad_kernel(lambda i: Const(1.0, float32))).intrinsic(op, float32)
        assert fn.name in (f"llvm.{op}.f32", f"{op}f"), fn.name
    for d in (float16, float32, float64):
        test_every_scalar_op_for_every_dtype_computes_its_numpy_reference(op, d, None)


def test_hypothesis_programs_compile_and_run_as_the_interpreter(monkeypatch):
    """tests/lowering's hypothesis programs (120, derandomized), each kernel compiled."""
    import tests.lowering.test_programs as lowering_programs
    monkeypatch.setattr(lowering_programs, "check_fused", check_compiled)
    lowering_programs.test_hypothesis_programs_lower_and_evaluate_as_the_interpreter()


def test_fastmath_puts_fast_flags_on_float_ops_and_stays_close_to_the_exact_kernel():
    import re

    from flowjit.codegen_cpu.render import compile_kernel, kernel_identity, render_kernel

    def f(x, y):
        e = fj.exp(x - x.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True) + fj.tanh(x * 0.5) - x / (y + 3.0)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 333)).astype(np.float32)
    y = rng.uniform(0, 2, (64, 333)).astype(np.float32)
    fused = fj.function(f).ir(x, y, stage="fused")
    values = dict(zip((a.id for a in fused.args), (x, y)))
    kernels = 0
    for op in fused.body.ops:
        args = [values[v.id] for v in op.inputs]
        results = run_op(op, args)
        values.update(zip((r.id for r in op.results), results))
        if op.primitive.role != "kernel":
            continue
        kernels += 1
        kernel = lower_block(op.blocks[0], f"fast_{op.attrs['name']}")
        exact, fast = render_kernel(kernel), render_kernel(kernel, fastmath=True)
        assert not re.search(r"\bfast\b", exact)
        assert re.search(r"= f(add|sub|mul|div) fast ", fast), fast
        assert "reassoc" not in fast.replace("fast", "")  # 'fast' already allows reassociation
        assert kernel_identity(kernel) != kernel_identity(kernel, fastmath=True)
        got = []
        for fm in (False, True):
            out = [np.full(np.shape(w), 7, np.asarray(w).dtype) for w in results]
            compile_kernel(kernel, fastmath=fm)([np.ascontiguousarray(a) for a in args], out)
            got.append(out)
        for g_exact, g_fast, w in zip(*got, results):
            np.testing.assert_allclose(g_exact, w, **kernel_tolerance(np.float32))
            np.testing.assert_allclose(g_fast, g_exact, rtol=1e-5, atol=1e-6)
    assert kernels >= 1


def test_a_kernel_writing_over_its_input_vectorizes_without_an_overlap_check():
    # In place, the input and the output are the same memory: LLVM's run-time overlap check
    # would find them equal and run the scalar loop (a GELU 15x slower). The kernel says its
    # innermost loops have no dependence between iterations through them instead.
    from flowjit.codegen_cpu import jit
    from flowjit.codegen_cpu.render import render_kernel
    from flowjit.lowering.backend import lower_program

    def gelu_of_product(h, w, b):
        x = h @ w + b
        return 0.5 * x * (1.0 + fj.tanh(0.7978846 * (x + 0.044715 * (x * x * x))))

    rng = np.random.default_rng(0)
    args = [rng.standard_normal(s).astype(np.float32) for s in ((64, 32), (32, 256), (256,))]
    f = fj.function(gelu_of_product)
    (kernel,) = lower_program(f.ir(*args, stage="fused")).kernels.values()
    assert kernel.in_place != ((),), "the product's buffer is reused in place"
    text = render_kernel(kernel)
    assert "llvm.loop.parallel_accesses" in text
    optimized = str(jit.optimize(text, name=kernel.name))
    assert "x float>" in optimized and "found.conflict" not in optimized
    x = args[0] @ args[1] + args[2]
    want = 0.5 * x * (1.0 + np.tanh(0.7978846 * (x + 0.044715 * (x * x * x))))
    np.testing.assert_allclose(f(*args), want, rtol=2e-5, atol=2e-6)


def test_a_scatter_written_in_place_declares_only_its_copy_loop_parallel():
    # Its loop over the ids writes at data-dependent places: repeated ids meet across
    # iterations, so that loop must keep LLVM's dependence checks (vectorized as if
    # parallel, repeated ids lost their updates: unique_counts counted 1 for 3).
    from flowjit.codegen_cpu.render import render_kernel
    from flowjit.lowering.backend import lower_program

    ids = np.array([3, 1, 3, 3, 0], np.int64)
    f = fj.function(lambda i: fj.scatter_add(fj.zeros(8, np.int64) + i.sum(), i, fj.ones(i.shape, np.int64)))
    (kernel,) = [k for k in lower_program(f.ir(ids, stage="fused")).kernels.values() if "scatter" in k.name]
    assert kernel.in_place != ((),)
    text = render_kernel(kernel)
    assert text.count("!llvm.loop ") == 1, text
    np.testing.assert_array_equal(f(ids), np.bincount(ids, minlength=8) + ids.sum())
