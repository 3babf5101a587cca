"""prune: hand-written IR in, IR out, for every removal and every op that must stay;
and property tests on random programs: results bit for bit, idempotent, nothing dead left."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from flowjit.ir import Block, Builder, Function, Primitive, parse, verify
from flowjit.ir.registry import all_primitives
from flowjit.passes.prune import has_side_effects, prune
from tests.passes.test_cse import PROPERTY, check_pass_property, random_functions, traced
from tests.test_programs import programs


def check(src: str, expected: str) -> None:
    fn = parse(src)
    prune(fn)
    verify(fn)
    assert str(fn) == expected
    assert str(prune(fn)) == expected


def unchanged(src: str) -> None:
    check(src, str(parse(src)))


def test_removes_unused_chains_but_never_arguments():
    check("""func @f(%x: f32[4], %unused: i32[3] var) -> (f32[4]) {
  %0 = exp %x : f32[4]
  %1 = log %0 : f32[4]
  %2 = constant {value=2.0} : f32[]
  %3 = mul %x, %2 : f32[4]
  %4 = add %3, %1 : f32[4]
  %5 = neg %3 : f32[4]
  return %3
}
""", """func @f(%x: f32[4], %unused: i32[3] var) -> (f32[4]) {
  %0 = constant {value=2.0} : f32[]
  %1 = mul %x, %0 : f32[4]
  return %1
}
""")


def test_everything_needed_stays():
    unchanged("""func @f(%x: f32[4], %k: i32[2]) -> (f32[4], f32[4], f32[3]) {
  %0 = exp %x : f32[4]
  %1 = random_uniform %k {shape=(3,), dtype=f32} : f32[3]
  return %0, %0, %1
}
""")


def test_nothing_returned_removes_everything():
    check("""func @f(%x: f32[4]) -> () {
  %0 = exp %x : f32[4]
  return
}
""", """func @f(%x: f32[4]) -> () {
  return
}
""")


def test_unused_random_draws_are_removed():
    # Random ops are impure only so that cse never merges two draws; unused, they go.
    check("""func @f(%k: i32[2]) -> (f32[3]) {
  %0 = random_split %k {num=2} : i32[2,2]
  %1 = random_uniform %k {shape=(3,), dtype=f32} : f32[3]
  %2 = random_normal %k {shape=(3,), dtype=f32} : f32[3]
  return %2
}
""", """func @f(%k: i32[2]) -> (f32[3]) {
  %0 = random_normal %k {shape=(3,), dtype=f32} : f32[3]
  return %0
}
""")


FUSIONS = """func @f(%x: f32[4], %y: f32[4]) -> (f32[4]) {
  %0 = add %x, %y : f32[4]
  %1 = fusion %x, %y {name="dead"} : f32[4] {
    ^(%2: f32[4], %3: f32[4])
    %4 = add %2, %3 : f32[4]
    return %4
  }
  %5 = exp %0 : f32[4]
  %6, %7 = fusion %x, %5 {name="live"} : f32[4], f32[4] {
    ^(%8: f32[4], %9: f32[4])
    %10 = mul %8, %9 : f32[4]
    %11 = sub %8, %9 : f32[4]
    %12 = exp %10 : f32[4]
    %13 = neg %9 : f32[4]
    return %12, %13
  }
  return %6
}
"""


def test_blocks_unused_owners_go_and_inside_live_ones_only_dead_ops_go():
    # The live fusion keeps both results (its block's returns are its results) even
    # though only one is used; the unused sub inside it goes.
    check(FUSIONS, """func @f(%x: f32[4], %y: f32[4]) -> (f32[4]) {
  %0 = add %x, %y : f32[4]
  %1 = exp %0 : f32[4]
  %2, %3 = fusion %x, %1 {name="live"} : f32[4], f32[4] {
    ^(%4: f32[4], %5: f32[4])
    %6 = mul %4, %5 : f32[4]
    %7 = exp %6 : f32[4]
    %8 = neg %5 : f32[4]
    return %7, %8
  }
  return %2
}
""")


# An unregistered stateful primitive (the registry has none yet; variable updates will be):
# it takes a value and returns nothing, like a store into a variable.
STORE = Primitive("test_store", kind="stateful", rule=lambda ts: [], impl=lambda x: (), arity=1)


def _store_program() -> Function:
    fn = parse("""func @f(%x: f32[4] var, %y: f32[4]) -> (f32[4]) {
  %0 = exp %y : f32[4]
  %1 = neg %0 : f32[4]
  %2 = add %x, %y : f32[4]
  %3 = fusion %x, %y {name="dead"} : f32[4] {
    ^(%4: f32[4], %5: f32[4])
    %6 = add %4, %5 : f32[4]
    return %6
  }
  return %2
}
""")
    neg, fusion = fn.body.ops[1], fn.body.ops[3]
    # A store of %1 at top level, and one inside the fusion's block.
    Builder(fn.body, index=2).emit(STORE, [neg.result])
    inner = fusion.blocks[0]
    Builder(inner).emit(STORE, [inner.ops[0].result])
    return fn


def test_side_effects_come_from_the_declaration():
    assert STORE.has_side_effects
    # Random draws are impure (never merged) but have no side effects (dropped when unused).
    draws = [p for p in all_primitives() if p.kind == "random"]
    assert draws and not any(p.has_side_effects for p in draws)


def test_stateful_ops_and_blocks_holding_them_stay_with_their_inputs():
    fn = _store_program()
    verify(fn)
    prune(fn)
    verify(fn)
    assert str(fn) == """func @f(%x: f32[4] var, %y: f32[4]) -> (f32[4]) {
  %0 = exp %y : f32[4]
  %1 = neg %0 : f32[4]
  test_store %1
  %2 = add %x, %y : f32[4]
  %3 = fusion %x, %y {name="dead"} : f32[4] {
    ^(%4: f32[4], %5: f32[4])
    %6 = add %4, %5 : f32[4]
    test_store %6
    return %6
  }
  return %2
}
"""


def test_nested_block_with_stateful_op_in_a_deeper_block_stays():
    fn = _store_program()
    fusion = fn.body.ops[4]
    # Wrap the fusion into another fusion whose result nobody uses.
    outer = Block([type(a)(a.type) for a in fusion.inputs])
    b = Builder(outer)
    fn.body.ops.remove(fusion)
    fusion.drop_inputs()
    new_inner = b.emit(fusion.primitive, outer.args, fusion.attrs, blocks=fusion.blocks)
    outer.set_returns(new_inner)
    Builder(fn.body, index=4).emit("fusion", fn.args, {"name": "wrap"}, blocks=[outer])
    verify(fn)
    text = str(fn)
    prune(fn)
    verify(fn)
    assert str(fn) == text


def _assert_nothing_dead(fn: Function) -> None:
    def walk(block: Block) -> None:
        returned = {v.id for v in block.returns}
        for op in block.ops:
            assert has_side_effects(op) or any(r.uses or r.id in returned for r in op.results), op
            for inner in op.blocks:
                walk(inner)
    walk(fn.body)


@PROPERTY
@given(random_functions(), st.integers(0, 2**31 - 1))
def test_prune_keeps_results_on_random_programs(fn, seed):
    _assert_nothing_dead(check_pass_property(prune, fn, seed))


@PROPERTY
@given(programs(), st.integers(0, 2**31 - 1))
def test_prune_keeps_results_on_traced_programs(program, seed):
    _assert_nothing_dead(check_pass_property(prune, traced(program, seed), seed))


def test_prune_after_constant_fold_leaves_only_the_folded_result():
    from flowjit.passes.constant_fold import constant_fold
    fn = parse("""func @f() -> (f32[2]) {
  %0 = constant {value=[1.0, 2.0]} : f32[2]
  %1 = neg %0 : f32[2]
  %2 = mul %1, %0 : f32[2]
  return %2
}
""")
    prune(constant_fold(fn))
    verify(fn)
    assert str(fn) == """func @f() -> (f32[2]) {
  %0 = constant {value=[-1.0, -4.0]} : f32[2]
  return %0
}
"""
    assert np.array_equal(fn.body.ops[0].attrs["value"].array, [-1.0, -4.0])
