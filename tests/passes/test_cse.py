"""cse: hand-written IR in, IR out, for every merge and every case that must not merge;
and property tests on random programs (``random_functions()``, shared with the
constant_fold and prune tests): the pass keeps results bit for bit and is idempotent."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import flowjit as fj
from flowjit.ir import Block, Builder, Function, Value, get, interpret, new_function, parse, verify
from flowjit.ir.dtypes import from_short
from flowjit.ir.errors import ShapeError
from flowjit.ir.registry import all_primitives, broadcast_shapes
from flowjit.ir.types import TensorType
from flowjit.passes.cse import cse
from tests.ir.test_text import random_args
from tests.test_programs import DTYPES, programs, run_program


def check(src: str, expected: str) -> None:
    fn = parse(src)
    cse(fn)
    verify(fn)
    assert str(fn) == expected
    # Idempotent, and the expected text is itself a fixed point.
    assert str(cse(fn)) == expected


def unchanged(src: str) -> None:
    check(src, str(parse(src)))


# ---- merges ---------------------------------------------------------------------------

def test_merges_equal_ops_and_chains():
    check("""func @f(%x: f32[4], %y: f32[4]) -> (f32[4]) {
  %0 = sub %x, %y : f32[4]
  %1 = sub %x, %y : f32[4]
  %2 = exp %0 : f32[4]
  %3 = exp %1 : f32[4]
  %4 = mul %2, %3 : f32[4]
  return %4
}
""", """func @f(%x: f32[4], %y: f32[4]) -> (f32[4]) {
  %0 = sub %x, %y : f32[4]
  %1 = exp %0 : f32[4]
  %2 = mul %1, %1 : f32[4]
  return %2
}
""")


def test_commutative_inputs_are_canonicalized():
    check("""func @f(%x: f32[4], %y: f32[4]) -> (f32[4], f32[4], bool[4]) {
  %0 = add %x, %y : f32[4]
  %1 = add %y, %x : f32[4]
  %2 = maximum %1, %0 : f32[4]
  %3 = maximum %0, %0 : f32[4]
  %4 = eq %x, %y : bool[4]
  %5 = eq %y, %x : bool[4]
  %6 = logical_and %4, %5 : bool[4]
  return %1, %3, %6
}
""", """func @f(%x: f32[4], %y: f32[4]) -> (f32[4], f32[4], bool[4]) {
  %0 = add %x, %y : f32[4]
  %1 = maximum %0, %0 : f32[4]
  %2 = eq %x, %y : bool[4]
  %3 = logical_and %2, %2 : bool[4]
  return %0, %1, %3
}
""")


def test_non_commutative_inputs_keep_their_order():
    unchanged("""func @f(%x: f32[4], %y: f32[4]) -> (f32[4], f32[4], bool[4], bool[4]) {
  %0 = sub %x, %y : f32[4]
  %1 = sub %y, %x : f32[4]
  %2 = lt %x, %y : bool[4]
  %3 = lt %y, %x : bool[4]
  return %0, %1, %2, %3
}
""")


def test_equal_constants_merge_by_contents():
    check("""func @f() -> (f32[3], f32[3], f32[], f32[], i32[]) {
  %0 = constant {value=[1.0, nan, -0.0]} : f32[3]
  %1 = constant {value=[1.0, nan, -0.0]} : f32[3]
  %2 = constant {value=0.0} : f32[]
  %3 = constant {value=-0.0} : f32[]
  %4 = constant {value=0} : i32[]
  %5 = constant {value=0.0} : f32[]
  %6 = add %0, %1 : f32[3]
  return %6, %1, %3, %5, %4
}
""", """func @f() -> (f32[3], f32[3], f32[], f32[], i32[]) {
  %0 = constant {value=[1.0, nan, -0.0]} : f32[3]
  %1 = constant {value=0.0} : f32[]
  %2 = constant {value=-0.0} : f32[]
  %3 = constant {value=0} : i32[]
  %4 = add %0, %0 : f32[3]
  return %4, %0, %2, %1, %3
}
""")


def test_attributes_compared_exactly():
    check("""func @f(%x: f32[2,3]) -> (f32[4,3], f32[4,3], f32[4,3], f32[3], f32[3], f32[2]) {
  %0 = pad %x {low=(1,0), high=(1,0), value=-0.0} : f32[4,3]
  %1 = pad %x {low=(1,0), high=(1,0)} : f32[4,3]
  %2 = pad %x {low=(1,0), high=(1,0), value=-0.0} : f32[4,3]
  %3 = reduce_sum %x {axes=(0,)} : f32[3]
  %4 = reduce_sum %x {axes=(0,)} : f32[3]
  %5 = reduce_sum %x {axes=(1,)} : f32[2]
  return %0, %1, %2, %3, %4, %5
}
""", """func @f(%x: f32[2,3]) -> (f32[4,3], f32[4,3], f32[4,3], f32[3], f32[3], f32[2]) {
  %0 = pad %x {low=(1,0), high=(1,0), value=-0.0} : f32[4,3]
  %1 = pad %x {low=(1,0), high=(1,0)} : f32[4,3]
  %2 = reduce_sum %x {axes=(0,)} : f32[3]
  %3 = reduce_sum %x {axes=(1,)} : f32[2]
  return %0, %1, %0, %2, %2, %3
}
""")


def test_device_must_match_and_first_location_is_kept():
    check("""func @f(%x: f32[4]) -> (f32[4], f32[4], f32[4]) {
  %0 = exp %x : f32[4] @cpu:0                               # a.py:1
  %1 = exp %x : f32[4] @cpu:1                               # a.py:2
  %2 = exp %x : f32[4] @cpu:0                               # a.py:3
  return %0, %1, %2
}
""", """func @f(%x: f32[4]) -> (f32[4], f32[4], f32[4]) {
  %0 = exp %x : f32[4] @cpu:0                               # a.py:1
  %1 = exp %x : f32[4] @cpu:1                               # a.py:2
  return %0, %1, %0
}
""")


def test_result_types_must_match():
    unchanged("""func @f(%x: f32[4]) -> (i32[4], i64[4]) {
  %0 = cast %x {dtype=i32} : i32[4]
  %1 = cast %x {dtype=i64} : i64[4]
  return %0, %1
}
""")


# ---- what must not merge ----------------------------------------------------------------

def test_random_ops_never_merge():
    unchanged("""func @f(%k: i32[2]) -> (f32[3], f32[3], i32[2,2], i32[2,2]) {
  %0 = random_uniform %k {shape=(3,), dtype=f32} : f32[3]
  %1 = random_uniform %k {shape=(3,), dtype=f32} : f32[3]
  %2 = random_split %k {num=2} : i32[2,2]
  %3 = random_split %k {num=2} : i32[2,2]
  return %0, %1, %2, %3
}
""")


FUSIONS = """func @f(%x: f32[4], %y: f32[4]) -> (f32[4], f32[4], f32[4]) {
  %0 = constant {value=2.0} : f32[]
  %1 = add %x, %y : f32[4]
  %2 = fusion %x, %y {name="a"} : f32[4] {
    ^(%3: f32[4], %4: f32[4])
    %5 = constant {value=2.0} : f32[]
    %6 = add %3, %4 : f32[4]
    %7 = add %4, %3 : f32[4]
    %8 = mul %6, %5 : f32[4]
    %9 = mul %7, %5 : f32[4]
    %10 = sub %8, %9 : f32[4]
    return %10
  }
  %11 = fusion %x, %y {name="a"} : f32[4] {
    ^(%12: f32[4], %13: f32[4])
    %14 = add %12, %13 : f32[4]
    return %14
  }
  %15 = add %y, %x : f32[4]
  %16 = mul %15, %0 : f32[4]
  return %2, %11, %16
}
"""


def test_ops_owning_blocks_never_merge_and_blocks_are_isolated():
    # The two fusions stay; inside the first, the duplicate add and mul merge, but
    # nothing inside a block is replaced by an outer op (blocks are isolated from
    # above), nor the other way round, nor across sibling blocks.
    check(FUSIONS, """func @f(%x: f32[4], %y: f32[4]) -> (f32[4], f32[4], f32[4]) {
  %0 = constant {value=2.0} : f32[]
  %1 = add %x, %y : f32[4]
  %2 = fusion %x, %y {name="a"} : f32[4] {
    ^(%3: f32[4], %4: f32[4])
    %5 = constant {value=2.0} : f32[]
    %6 = add %3, %4 : f32[4]
    %7 = mul %6, %5 : f32[4]
    %8 = sub %7, %7 : f32[4]
    return %8
  }
  %9 = fusion %x, %y {name="a"} : f32[4] {
    ^(%10: f32[4], %11: f32[4])
    %12 = add %10, %11 : f32[4]
    return %12
  }
  %13 = mul %1, %0 : f32[4]
  return %2, %9, %13
}
""")


# ---- properties on random programs ------------------------------------------------------

FLOAT_SPECIALS = [0.0, -0.0, 1.0, -1.5, 2.0, 0.5, np.inf, -np.inf, np.nan, 3.0]
SMALL_SHAPES = [(), (4,), (3, 4), (1, 4)]
BIG_SHAPE = (40, 32)  # more elements than constant_fold's default limit


def _elementwise(arity: int) -> list:
    return [p for p in all_primitives()
            if p.kind == "elementwise" and p.arity == arity and not p.attrs]


@st.composite
def random_functions(draw) -> Function:
    """A random well-typed Function rich in what the passes look at: duplicates (in either
    input order), equal constants (NaN, -0.0, inf), chains over constants, big iotas and
    broadcasts, random draws (repeated), casts, reductions, dead code and fusion blocks."""
    short = draw(st.sampled_from(["f32", "f64", "i32", "i64"]))
    d = from_short(short)
    n_in = draw(st.integers(0, 3))
    arg_types = [TensorType(draw(st.sampled_from(SMALL_SHAPES)), d) for _ in range(n_in)]
    fn, b = new_function("g", arg_types, [f"x{i}" for i in range(n_in)])
    pool = list(fn.args)
    emitted: list[tuple] = []
    unary, binary = _elementwise(1), _elementwise(2)

    def constant(shape, dt):
        size = int(np.prod(shape))
        if dt.is_float:
            vals = draw(st.lists(st.sampled_from(FLOAT_SPECIALS), min_size=size, max_size=size))
        elif dt.is_bool:
            vals = draw(st.lists(st.booleans(), min_size=size, max_size=size))
        else:
            vals = draw(st.lists(st.integers(-3, 3), min_size=size, max_size=size))
        return b.op("constant", value=np.array(vals, dtype=dt.np).reshape(shape))

    def emit(prim, inputs, **attrs):
        prim = get(prim) if isinstance(prim, str) else prim
        emitted.append((prim, tuple(inputs), attrs))
        return b.op(prim, *inputs, **attrs)

    for _ in range(draw(st.integers(1, 14))):
        what = draw(st.sampled_from(["const", "const", "unary", "binary", "binary", "repeat", "reduce",
                                     "transpose", "broadcast", "iota", "random", "cast", "fusion"]))
        if what == "const" or not pool:
            pool.append(constant(draw(st.sampled_from(SMALL_SHAPES)),
                                 draw(st.sampled_from([d, d, d, from_short("bool")]))))
            continue
        x = draw(st.sampled_from(pool))
        if what == "unary":
            ps = [p for p in unary if x.dtype in p.dtypes]
            if ps:
                pool.append(emit(draw(st.sampled_from(ps)), [x]))
        elif what == "binary":
            ys = [y for y in pool if y.dtype == x.dtype and _broadcasts(x.shape, y.shape)]
            ps = [p for p in binary if x.dtype in p.dtypes]
            if ps:
                pool.append(emit(draw(st.sampled_from(ps)), [x, draw(st.sampled_from(ys))]))
        elif what == "repeat" and emitted:
            prim, ins, attrs = draw(st.sampled_from(emitted))
            if prim.commutative and draw(st.booleans()):
                ins = ins[::-1]
            pool.append(b.op(prim, *ins, **attrs))
        elif what == "reduce" and x.shape and not x.dtype.is_bool:
            axis = draw(st.integers(0, len(x.shape) - 1))
            name = draw(st.sampled_from(["reduce_sum", "reduce_max"]))
            pool.append(emit(name, [x], axes=(axis,), keepdims=draw(st.booleans())))
        elif what == "transpose" and len(x.shape) == 2:
            pool.append(emit("transpose", [x], perm=(1, 0)))
        elif what == "broadcast" and _broadcasts(x.shape, BIG_SHAPE):
            shape = draw(st.sampled_from([BIG_SHAPE, (2, 3, 4)] if x.shape[-1:] in ((), (1,), (4,))
                                         else [BIG_SHAPE]))
            if _broadcasts(x.shape, shape) and broadcast_shapes(x.shape, shape) == shape:
                pool.append(emit("broadcast_to", [x], shape=shape))
        elif what == "iota" and not d.is_bool:
            shape = draw(st.sampled_from([(3, 4), (4,), BIG_SHAPE]))
            pool.append(emit("iota", [], shape=shape, dimension=draw(st.integers(0, len(shape) - 1)),
                             dtype=d))
        elif what == "random":
            key = constant((2,), from_short("i32"))
            for _ in range(draw(st.integers(1, 2))):
                r = b.op("random_uniform", key, shape=draw(st.sampled_from(SMALL_SHAPES)),
                         dtype="f32" if short == "f32" else "f64")
                pool.append(r if r.dtype == d else b.op("cast", r, dtype=d))
        elif what == "cast":
            pool.append(emit("cast", [x], dtype=draw(st.sampled_from(["f32", "f64", "i32", "i64"]))))
        elif what == "fusion":
            pool.extend(_fusion(draw, b, pool, x))
    rets = draw(st.lists(st.sampled_from(pool), min_size=1, max_size=5)) if pool else []
    fn.body.set_returns(rets)
    verify(fn)
    return fn


def _broadcasts(a: tuple, c: tuple) -> bool:
    try:
        broadcast_shapes(a, c)
        return True
    except ShapeError:
        return False


def _fusion(draw, b: Builder, pool: list, x) -> list:
    """A fusion op over ``x`` (and a partner) whose block holds duplicates and constants."""
    binary = [p for p in _elementwise(2) if x.dtype in p.dtypes and p.infer([x.type] * 2, {}) == [x.type]]
    if not binary:
        return []
    partners = [y for y in pool if y.type == x.type]
    ins = [x, draw(st.sampled_from(partners))]
    block = Block([Value(v.type) for v in ins])
    ib = Builder(block)
    vals = list(block.args)
    for _ in range(draw(st.integers(1, 5))):
        if draw(st.booleans()) and x.dtype.is_float:
            c = ib.op("constant", value=np.asarray(draw(st.sampled_from(FLOAT_SPECIALS)), dtype=x.dtype.np))
            c = ib.op("broadcast_to", c, shape=x.shape)
            vals.append(c)
        p = draw(st.sampled_from(binary))
        u, v = draw(st.sampled_from(vals)), draw(st.sampled_from(vals))
        vals.append(ib.op(p, u, v))
        if draw(st.booleans()):
            vals.append(ib.op(p, v, u) if p.commutative else ib.op(p, u, v))
    block.set_returns(draw(st.lists(st.sampled_from(vals), min_size=1, max_size=2)))
    return b.emit("fusion", ins, {"name": "f"}, blocks=[block])


def assert_same_results(got: list[np.ndarray], expected: list[np.ndarray]) -> None:
    assert len(got) == len(expected)
    for g, e in zip(got, expected, strict=True):
        g, e = np.asarray(g), np.asarray(e)
        assert g.dtype == e.dtype and g.shape == e.shape, (g.dtype, g.shape, e.dtype, e.shape)
        assert np.ascontiguousarray(g).tobytes() == np.ascontiguousarray(e).tobytes(), (g, e)


def check_pass_property(pass_fn, fn: Function, seed: int) -> Function:
    """``pass_fn`` on a clone verifies, computes the same bits, and is idempotent."""
    args = random_args(fn, seed)
    expected = interpret(fn, args)
    once = pass_fn(fn.clone())
    verify(once)
    assert_same_results(interpret(once, args), expected)
    text = str(once)
    twice = pass_fn(once)
    verify(twice)
    assert str(twice) == text
    # The text form reads back (no dangling uses left behind).
    assert str(parse(text)) == text
    return once


PROPERTY = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def traced(program, seed: int) -> Function:
    short, in_shapes, steps, n_out = program
    rng = np.random.default_rng(seed)
    inputs = [rng.standard_normal(s).astype(DTYPES[short]) for s in in_shapes]
    return fj.function(lambda *xs: run_program(steps, xs, n_out, traced=True)).ir(*inputs)


@PROPERTY
@given(random_functions(), st.integers(0, 2**31 - 1))
def test_cse_keeps_results_on_random_programs(fn, seed):
    before = len(list(fn.walk()))
    out = check_pass_property(cse, fn, seed)
    assert len(list(out.walk())) <= before


@PROPERTY
@given(programs(), st.integers(0, 2**31 - 1))
def test_cse_keeps_results_on_traced_programs(program, seed):
    check_pass_property(cse, traced(program, seed), seed)


def test_cse_leaves_no_duplicates():
    fn = parse(FUSIONS)
    cse(fn)
    seen = set()
    for op in fn.body.ops:
        if op.primitive.pure and not op.blocks:
            ids = [v.id for v in op.inputs]
            key = (op.primitive, tuple(sorted(ids) if op.primitive.commutative else ids), tuple(op.attrs.items()))
            assert key not in seen
            seen.add(key)


@pytest.mark.parametrize("n", [2000])
def test_cse_is_linear_enough(n):
    # A long chain with a duplicate at every step merges in one pass, quickly.
    fn, b = new_function("long", [TensorType((4,), from_short("f32"))])
    x = y = fn.args[0]
    for _ in range(n):
        x = b.op("exp", x)
        y = b.op("exp", y)
    fn.body.set_returns([x, y])
    cse(fn)
    verify(fn)
    assert len(fn.body.ops) == n and fn.returns[0] is fn.returns[1]
