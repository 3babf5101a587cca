"""The verifier rejects each broken invariant with a message naming the op."""

from __future__ import annotations

import pytest

from flowjit.ir import Op, TensorType, VerifyError, get, new_function, verify
from flowjit.ir.core import SourceLoc, Value


def _fn():
    fn, b = new_function("f", [TensorType((2, 3), "f32"), TensorType((3,), "f32")], ["x", "w"])
    b.loc = SourceLoc("model.py", 7)
    y = b.op("add", fn.args[0], fn.args[1])
    z = b.op("exp", y)
    fn.body.set_returns([z])
    return fn


def test_valid_function_verifies():
    fn = _fn()
    assert verify(fn) is fn


def test_use_before_definition():
    fn = _fn()
    fn.body.ops.reverse()
    with pytest.raises(VerifyError, match=r"exp \(model.py:7\): input 0 .* used before it is defined"):
        verify(fn)


def test_value_from_another_function():
    fn, other = _fn(), _fn()
    fn.body.ops[1].set_input(0, other.body.ops[0].result)
    with pytest.raises(VerifyError, match="used before it is defined"):
        verify(fn)


def test_result_type_must_match_rule():
    fn = _fn()
    fn.body.ops[1].results[0].type = TensorType((2, 3), "f64")
    with pytest.raises(VerifyError, match=r"exp .*f64\[2,3\] differ from the rule's f32\[2,3\]"):
        verify(fn)


def test_an_op_repeating_a_checked_signature_is_still_checked():
    # The verifier infers each signature once: a second exp of the same input type with a
    # wrong result type must still fail, and a second add with other attributes too.
    fn, b = new_function("f", [TensorType((2, 3), "f32")], ["x"])
    first, second = b.op("exp", fn.args[0]), b.op("exp", fn.args[0])
    fn.body.set_returns([first, second])
    verify(fn)
    second.type = TensorType((2, 3), "f64")
    with pytest.raises(VerifyError, match=r"exp: .*f64\[2,3\] differ from the rule's f32\[2,3\]"):
        verify(fn)
    fn, b = new_function("g", [TensorType((2, 3), "f32")], ["x"])
    s1, s2 = b.op("reduce_sum", fn.args[0], axes=(0,)), b.op("reduce_sum", fn.args[0], axes=(1,))
    fn.body.set_returns([s1, s2])
    verify(fn)
    s2.type = s1.type  # the first one's type: wrong for axes (1,)
    with pytest.raises(VerifyError, match=r"reduce_sum: .*f32\[3\] differ from the rule's f32\[2\]"):
        verify(fn)


def test_use_lists_must_match():
    fn = _fn()
    fn.body.ops[0].result.uses.clear()
    with pytest.raises(VerifyError, match="use list"):
        verify(fn)


def test_stale_use_is_caught():
    fn = _fn()
    stray = Op(get("neg"), [fn.body.ops[0].result], {}, [TensorType((2, 3), "f32")])
    stray.drop_inputs()
    fn.body.ops[0].result.uses.append((stray, 0))
    with pytest.raises(VerifyError, match="stale use"):
        verify(fn)


def test_attributes_must_be_canonical():
    fn, b = new_function("g", [TensorType((2, 3), "f32")])
    r = b.op("reduce_sum", fn.args[0], axes=(1,))
    fn.body.set_returns([r])
    fn.body.ops[0].attrs["axes"] = [1]
    with pytest.raises(VerifyError, match="not canonical"):
        verify(fn)


def test_undefined_return():
    fn = _fn()
    fn.body.set_returns([Value(TensorType((1,), "f32"))])
    with pytest.raises(VerifyError, match="returned value"):
        verify(fn)


def test_replace_all_uses_keeps_lists_right():
    fn = _fn()
    add, ex = fn.body.ops
    neg = Op(get("neg"), [fn.args[0]], {}, [TensorType((2, 3), "f32")])
    fn.body.ops.insert(1, neg)
    neg.parent = fn.body
    add.result.replace_all_uses_with(neg.result)
    assert ex.inputs[0] is neg.result and not add.result.uses
    verify(fn)


def test_clone_is_deep_and_equal():
    fn = _fn()
    c = fn.clone()
    assert str(c) == str(fn)
    assert not {id(o) for o in c.walk()} & {id(o) for o in fn.walk()}
    verify(c)
    c.body.ops[1].set_input(0, c.args[0])  # mutating the clone leaves the original alone
    assert fn.body.ops[1].inputs[0] is fn.body.ops[0].result


def test_insert_before_and_erase():
    from flowjit.ir import Builder
    fn = _fn()
    add, ex = fn.body.ops
    b = Builder.before(ex)
    neg = b.op("neg", add.result)
    ex.set_input(0, neg)
    assert [o.name for o in fn.body.ops] == ["add", "neg", "exp"]
    verify(fn)
    with pytest.raises(ValueError, match="still used"):
        fn.body.erase(add)
    ex.set_input(0, add.result)
    fn.body.erase(neg.producer)
    verify(fn)
    assert [o.name for o in fn.body.ops] == ["add", "exp"]
