"""constant_fold: hand-written IR in, IR out, for every fold and every op that must stay;
and property tests on random programs: results bit for bit, idempotent."""

from __future__ import annotations

import functools
import warnings

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from flowjit.ir import Builder, Primitive, interpret, parse, verify
from flowjit.passes.constant_fold import MAX_FOLDED_ELEMENTS, constant_fold
from tests.passes.test_cse import PROPERTY, check_pass_property, random_functions, traced
from tests.test_programs import programs


def check(src: str, expected: str, **kwargs) -> None:
    fn = parse(src)
    args = [np.linspace(-2, 2, a.type.size).reshape(a.type.shape).astype(a.type.dtype.np) for a in fn.args]
    before = interpret(fn, args)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # evaluation warnings must not escape
        constant_fold(fn, **kwargs)
    verify(fn)
    assert str(fn) == expected
    for a, b in zip(before, interpret(fn, args), strict=True):
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes()
    assert str(constant_fold(fn, **kwargs)) == expected


def unchanged(src: str, **kwargs) -> None:
    check(src, str(parse(src)), **kwargs)


def test_default_limit_folds_results_of_up_to_1024_elements():
    # The README promises 1024; what matters is where folding stops, not the constant.
    fn = parse(f"""func @f() -> (i32[{MAX_FOLDED_ELEMENTS}], i32[{MAX_FOLDED_ELEMENTS + 1}]) {{
  %0 = iota {{shape=({MAX_FOLDED_ELEMENTS},), dtype=i32}} : i32[{MAX_FOLDED_ELEMENTS}]
  %1 = iota {{shape=({MAX_FOLDED_ELEMENTS + 1},), dtype=i32}} : i32[{MAX_FOLDED_ELEMENTS + 1}]
  return %0, %1
}}
""")
    constant_fold(fn)
    assert MAX_FOLDED_ELEMENTS == 1024 and [op.name for op in fn.body.ops] == ["constant", "iota"]
    np.testing.assert_array_equal(fn.body.ops[0].attrs["value"].array, np.arange(1024, dtype=np.int32))


def test_chains_fold_in_program_order():
    check("""func @f() -> (f32[4], f32[]) {
  %0 = constant {value=[1.0, 2.0, 3.0, 4.0]} : f32[4]
  %1 = constant {value=2.0} : f32[]
  %2 = mul %0, %1 : f32[4]
  %3 = sub %2, %0 : f32[4]
  %4 = reduce_sum %3 {axes=(0,)} : f32[]
  return %3, %4
}
""", """func @f() -> (f32[4], f32[]) {
  %0 = constant {value=[1.0, 2.0, 3.0, 4.0]} : f32[4]
  %1 = constant {value=2.0} : f32[]
  %2 = constant {value=[2.0, 4.0, 6.0, 8.0]} : f32[4]
  %3 = constant {value=[1.0, 2.0, 3.0, 4.0]} : f32[4]
  %4 = constant {value=10.0} : f32[]
  return %3, %4
}
""")


def test_special_values_are_what_numpy_gives_without_warnings():
    check("""func @f() -> (f32[], f32[], f32[], i32[], i32[], f32[], i32[]) {
  %0 = constant {value=0.0} : f32[]
  %1 = constant {value=1e38} : f32[]
  %2 = div %0, %0 : f32[]
  %3 = neg %0 : f32[]
  %4 = mul %1, %1 : f32[]
  %5 = constant {value=7} : i32[]
  %6 = constant {value=0} : i32[]
  %7 = floor_div %5, %6 : i32[]
  %8 = constant {value=2147483647} : i32[]
  %9 = add %8, %5 : i32[]
  %10 = log %3 : f32[]
  %11 = cast %2 {dtype=i32} : i32[]
  return %2, %3, %4, %7, %9, %10, %11
}
""", """func @f() -> (f32[], f32[], f32[], i32[], i32[], f32[], i32[]) {
  %0 = constant {value=0.0} : f32[]
  %1 = constant {value=1e+38} : f32[]
  %2 = constant {value=-nan} : f32[]
  %3 = constant {value=-0.0} : f32[]
  %4 = constant {value=inf} : f32[]
  %5 = constant {value=7} : i32[]
  %6 = constant {value=0} : i32[]
  %7 = constant {value=0} : i32[]
  %8 = constant {value=2147483647} : i32[]
  %9 = constant {value=-2147483642} : i32[]
  %10 = constant {value=-inf} : f32[]
  %11 = constant {value=-2147483648} : i32[]
  return %2, %3, %4, %7, %9, %10, %11
}
""")


def test_ops_without_inputs_fold_when_small_and_keep_loc_and_device():
    check("""func @f() -> (i32[3,4], f32[3]) {
  %0 = iota {shape=(3,4), dimension=1, dtype=i32} : i32[3,4] @cpu:1  # m.py:7
  %1 = iota {shape=(3,), dtype=f32} : f32[3]
  %2 = exp %1 : f32[3] @cpu:0  # m.py:8
  return %0, %2
}
""", """func @f() -> (i32[3,4], f32[3]) {
  %0 = constant {value=[[0, 1, 2, 3], [0, 1, 2, 3], [0, 1, 2, 3]]} : i32[3,4] @cpu:1  # m.py:7
  %1 = constant {value=[0.0, 1.0, 2.0]} : f32[3]
  %2 = constant {value=[1.0, 2.718282, 7.3890557]} : f32[3] @cpu:0  # m.py:8
  return %0, %2
}
""")


def test_large_results_stay_ops():
    unchanged("""func @f() -> (i32[40,32], f32[1025], f32[1025]) {
  %0 = iota {shape=(40,32), dtype=i32} : i32[40,32]
  %1 = constant {value=0.5} : f32[]
  %2 = broadcast_to %1 {shape=(1025,)} : f32[1025]
  %3 = exp %2 : f32[1025]
  return %0, %2, %3
}
""")


def test_limit_is_a_keyword_and_counts_elements_per_result():
    src = """func @f() -> (f32[4], f32[2]) {
  %0 = constant {value=[1.0, 2.0, 3.0, 4.0]} : f32[4]
  %1 = neg %0 : f32[4]
  %2 = slice %0 {start=(0,), size=(2,), step=(1,)} : f32[2]
  return %1, %2
}
"""
    check(src, """func @f() -> (f32[4], f32[2]) {
  %0 = constant {value=[1.0, 2.0, 3.0, 4.0]} : f32[4]
  %1 = neg %0 : f32[4]
  %2 = constant {value=[1.0, 2.0]} : f32[2]
  return %1, %2
}
""", max_elements=3)
    unchanged(src, max_elements=0)


def test_ops_with_non_constant_inputs_random_ops_and_blocks_stay():
    check("""func @f(%x: f32[4], %k: i32[2]) -> (f32[4], f32[3], f32[3], f32[4]) {
  %0 = constant {value=[1.0, 2.0, 3.0, 4.0]} : f32[4]
  %1 = add %0, %x : f32[4]
  %2 = constant {value=[1, 2]} : i32[2]
  %3 = random_uniform %2 {shape=(3,), dtype=f32} : f32[3]
  %4 = random_normal %2 {shape=(3,), dtype=f32} : f32[3]
  %5 = fusion %0 {name="f"} : f32[4] {
    ^(%6: f32[4])
    %7 = constant {value=2.0} : f32[]
    %8 = constant {value=3.0} : f32[]
    %9 = mul %7, %8 : f32[]
    %10 = add %6, %9 : f32[4]
    return %10
  }
  return %1, %3, %4, %5
}
""", """func @f(%x: f32[4], %k: i32[2]) -> (f32[4], f32[3], f32[3], f32[4]) {
  %0 = constant {value=[1.0, 2.0, 3.0, 4.0]} : f32[4]
  %1 = add %0, %x : f32[4]
  %2 = constant {value=[1, 2]} : i32[2]
  %3 = random_uniform %2 {shape=(3,), dtype=f32} : f32[3]
  %4 = random_normal %2 {shape=(3,), dtype=f32} : f32[3]
  %5 = fusion %0 {name="f"} : f32[4] {
    ^(%6: f32[4])
    %7 = constant {value=2.0} : f32[]
    %8 = constant {value=3.0} : f32[]
    %9 = constant {value=6.0} : f32[]
    %10 = add %6, %9 : f32[4]
    return %10
  }
  return %1, %3, %4, %5
}
""")


def _custom(name: str, impl) -> Primitive:
    # Not registered: the registry stays as it is for every other test.
    return Primitive(name, kind="opaque", rule=lambda ts: ts[0], impl=impl, arity=1)


def _with_custom(prim: Primitive):
    fn = parse("""func @f() -> (f32[2]) {
  %0 = constant {value=[1.0, 2.0]} : f32[2]
  return %0
}
""")
    c = fn.body.ops[0]
    r = Builder(fn.body).op(prim, c.result)
    fn.body.set_returns([r])
    return fn


def test_op_whose_impl_raises_or_lies_is_left_alone():
    def boom(x):
        raise ValueError("no")

    for prim in [_custom("boom", boom),
                 _custom("wrong_dtype", lambda x: x.astype(np.float64)),
                 _custom("wrong_shape", lambda x: x[:1])]:
        fn = _with_custom(prim)
        text = str(fn)
        constant_fold(fn)
        verify(fn)
        assert str(fn) == text
    fn = _with_custom(_custom("twice", lambda x: x * 2))
    constant_fold(fn)
    assert str(fn) == """func @f() -> (f32[2]) {
  %0 = constant {value=[1.0, 2.0]} : f32[2]
  %1 = constant {value=[2.0, 4.0]} : f32[2]
  return %1
}
"""


@PROPERTY
@given(random_functions(), st.integers(0, 2**31 - 1), st.sampled_from([0, 4, 16, MAX_FOLDED_ELEMENTS]))
def test_constant_fold_keeps_results_on_random_programs(fn, seed, limit):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = check_pass_property(functools.partial(constant_fold, max_elements=limit), fn, seed)
    for op in out.walk():
        if op.primitive.kind != "constant" and op.primitive.pure and not op.blocks and op.results:
            assert (any(v.producer is None or v.producer.primitive.kind != "constant" for v in op.inputs)
                    or any(r.type.size > limit for r in op.results)), op


@PROPERTY
@given(programs(), st.integers(0, 2**31 - 1))
def test_constant_fold_keeps_results_on_traced_programs(program, seed):
    check_pass_property(constant_fold, traced(program, seed), seed)


def test_without_growing_folds_an_op_making_a_larger_array_stays_an_op():
    # For a program compiled for every size of a dimension: an iota over it or a scalar
    # broadcast to it would fold into an array of one size; same-size work still folds.
    fn = parse("""func @f() -> (i32[8,4], f32[8,4], f32[4]) {
  %0 = iota {shape=(8,4), dtype=i32} : i32[8,4]
  %1 = constant {value=0.5} : f32[]
  %2 = broadcast_to %1 {shape=(8,4)} : f32[8,4]
  %3 = constant {value=[1.0, 2.0, 3.0, 4.0]} : f32[4]
  %4 = neg %3 : f32[4]
  return %0, %2, %4
}
""")
    constant_fold(fn, fold_growing=False)
    names = [op.name for op in fn.body.ops]
    assert "iota" in names and "broadcast_to" in names and "neg" not in names
