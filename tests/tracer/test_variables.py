"""Variables: reads become ``var`` arguments, assignments explicit ``assign`` ops applied
when the call finishes; eager use; gradients with respect to variables."""

from __future__ import annotations

import numpy as np
import pytest

import flowjit as fj
from flowjit.ir.errors import FlowjitTypeError


def test_traced_reads_and_updates():
    w = fj.Variable(np.ones(3), name="w")
    count = fj.Variable(np.int64(0), name="count", trainable=False)

    @fj.function
    def step(x):
        y = (x * w).sum()
        w.assign_sub(0.5 * x)
        count.assign_add(1)
        return y + (w * 0).sum()  # a read after the assignment sees the new value's type

    x = np.arange(3.0)
    assert step(x) == 3.0
    np.testing.assert_allclose(w.numpy(), [1.0, 0.5, 0.0])
    assert step(x) == 0.5
    np.testing.assert_allclose(w.numpy(), [1.0, 0.0, -1.0])
    assert int(count.numpy()) == 2 and step.trace_count == 1
    text = str(step.ir(x))
    assert "%w: f64[3] var" in text and "assign %w" in text and "assign %count" in text


def test_read_after_write_in_one_call_sees_the_new_value():
    v = fj.Variable(np.float64(1.0))

    @fj.function
    def f():
        v.assign(v * 10)
        return v + 1

    assert f() == 11.0 and float(v.numpy()) == 10.0


def test_eager_assign_and_arithmetic():
    v = fj.Variable([1.0, 2.0], name="v")
    v.assign_add(1.0)
    np.testing.assert_allclose(v.numpy(), [2.0, 3.0])
    np.testing.assert_allclose(v * 2, [4.0, 6.0])
    np.testing.assert_allclose(fj.tanh(v), np.tanh([2.0, 3.0]))
    assert repr(v).startswith("<fj.Variable v f64[2]")


def test_assigning_another_shape_is_a_clear_error():
    v = fj.Variable(np.zeros(3))

    @fj.function
    def f():
        v.assign(np.zeros(4))

    with pytest.raises(FlowjitTypeError, match=r"Variable .* \(f64\[3\]\) assigned a f64\[4\] at .*shape \[3\]"):
        f()


def test_numpy_inside_a_trace_is_refused():
    v = fj.Variable(np.zeros(2))
    with pytest.raises(fj.FlowjitTypeError, match=r"\.numpy\(\) inside a traced function"):
        fj.function(lambda: v.numpy())()


def test_gradients_with_respect_to_variables_and_arguments():
    w = fj.Variable(np.array([1.0, 2.0]), name="w")
    x = np.array([3.0, -1.0])
    gx, (gw,) = fj.grad(lambda x: (x * w * w).sum(), argnums=0, variables=[w])(x)
    np.testing.assert_allclose(gx, [1.0, 4.0])
    np.testing.assert_allclose(gw, 2 * x * w.numpy())
