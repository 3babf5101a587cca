"""Errors in the user's terms, with the user's line (issue 36, item 7): what a new user meets
when a branch, a loop body, an assignment, an index or a library's ufunc is wrong."""

from __future__ import annotations

import re

import numpy as np
import pytest

import flowjit as fj
from flowjit.ir.errors import FlowjitTypeError

HERE = re.escape(__file__.rsplit("/", 1)[-1])


def _raises(error, f, *args, match: str):
    with pytest.raises(error) as info:
        f(*args)
    message = str(info.value)
    assert re.search(rf"{HERE}:\d+", message), message  # the user's line
    assert re.search(match, message), message
    assert "leaves" not in message and "TreeDef" not in message and "*" not in message.split(":", 2)[-1][:40]
    return message


def test_cond_branches_of_different_types_name_the_line_and_the_types():
    x = np.ones(3)
    f = fj.function(lambda x: fj.cond(x.sum() > 0, lambda v: v, lambda v: v.astype(np.float32), x))
    _raises(FlowjitTypeError, f, x, match=r"fj\.cond at .*false_fn returns f32\[3\], true_fn returns f64\[3\]")
    g = fj.function(lambda x: fj.cond(x.sum() > 0, lambda v: (v, v), lambda v: (v, v.sum()), x))
    _raises(FlowjitTypeError, g, x, match=r"returns \(f64\[3\], f64\[\]\), true_fn returns \(f64\[3\], f64\[3\]\)")


@pytest.mark.parametrize("loop", ["fori_loop", "while_loop", "scan"])
def test_a_loop_body_changing_its_carry_names_the_loop_and_the_users_carry(loop):
    x = np.ones(3)
    bodies = {
        "fori_loop": lambda x: fj.fori_loop(0, 3, lambda i, c: c[None], x),
        "while_loop": lambda x: fj.while_loop(lambda c: c.sum() < 10, lambda c: c[None], x),
        "scan": lambda x: fj.scan(lambda c, y: (c[None], y), x, x),
    }
    message = _raises(FlowjitTypeError, fj.function(bodies[loop]), x,
                      match=rf"fj\.{loop} at .*changes the carry from f64\[3\] to f64\[1,3\]")
    assert "element" not in message  # fori_loop's own counter is not the user's element 0


def test_a_variable_assigned_another_shape_is_named_with_the_value_given():
    v = fj.Variable(np.zeros(3, np.float64), name="w")

    @fj.function
    def assign(x):
        v.assign(x)
        return v.value
    _raises(FlowjitTypeError, assign, np.ones((2, 3), np.float32),
            match=r"Variable w \(f64\[3\]\) assigned a f32\[2,3\] at .*has its shape \[3\]")
    _raises(FlowjitTypeError, v.assign, np.ones((2, 3), np.float32), match=r"Variable w .* assigned a f32\[2,3\]")
    np.testing.assert_array_equal(assign(np.float32(2.0)), [2.0, 2.0, 2.0])  # broadcasting still assigns


def test_a_float_index_array_names_the_line():
    x = np.ones(3)
    _raises(IndexError, fj.function(lambda x: x[np.array([0.0, 1.0])]), x, match=r"got float64.*astype")
    _raises(IndexError, fj.function(lambda x, i: x[i]), x, np.array([0.0, 1.0]), match=r"got f64\[2\]")


def test_scipy_special_ufuncs_trace_as_fj_scipy_special():
    scipy_special = pytest.importorskip("scipy.special")
    x = np.linspace(-2, 2, 5)
    np.testing.assert_allclose(fj.function(lambda x: scipy_special.expit(x))(x), scipy_special.expit(x))
    _raises(FlowjitTypeError, fj.function(lambda x: scipy_special.sici(x)[0]), x,
            match=r"sici of scipy\.special on a traced array .*fj\.scipy\.special")


@pytest.mark.parametrize("case", ["einsum", "take", "split", "stack", "grad", "glu", "pad"])
def test_errors_raised_before_an_op_is_recorded_name_the_line_too(case):
    # Shape and type checks in fj's own functions (not a primitive's rule), traced and eager.
    x = np.ones((3, 5), np.float32)
    calls = {
        "einsum": (lambda x: fj.einsum("ij,jk->ik", x, x), r"einsum: index 'j' has size 5 .* and 3"),
        "take": (lambda x: fj.take(x, np.array([0]), axis=5), r"take: axis 5 is out of range for f32\[3,5\]"),
        "split": (lambda x: fj.split(x, 4, axis=1), r"split: axis of size 5 does not divide into 4 sections"),
        "stack": (lambda x: fj.stack([x, x[:1]]), r"stack: .*same shape.*\[3, 5\].*\[1, 5\]"),
        "grad": (lambda x: fj.grad(lambda y: y * 2)(x), r"grad of <lambda>: the function must return a float scalar"),
        "glu": (lambda x: fj.nn.glu(x), r"glu: axis -1 of an array of shape \[3, 5\] has odd size 5"),
        "pad": (lambda x: fj.pad(x, 1, mode="linear_ramp"), r"pad: mode 'linear_ramp' is not supported; it is one "
                r"of 'constant', 'empty', 'edge', 'reflect', 'symmetric', 'wrap'"),
    }
    f, match = calls[case]
    message = _raises(Exception, fj.function(f), x, match=match)
    assert message.count(f"{__file__.rsplit('/', 1)[-1]}:") == 1, message  # named once
    _raises(Exception, f, x, match=match)
