"""fj.debug.check_numerics: names the first op that made NaN or Inf, with its IR line
and the user's source line, and leaves Variables at their last finite values."""

from __future__ import annotations

import numpy as np
import pytest

import flowjit as fj
from flowjit.debug import NumericsError


def test_names_the_first_op_that_is_not_finite_and_updates_no_variable():
    W = fj.Variable(np.ones(3, np.float32), name="W")

    @fj.function
    def step(x):
        y = fj.log(x * W)       # the first non-finite value: log(0)
        z = fj.exp(-y) * 0.0    # inf * 0: nan, but later
        W.assign(W - 0.1 * y)
        return fj.sum(y) + fj.sum(z)

    x = np.array([1, 0, 2], np.float32)
    assert np.isnan(step(x))  # unchecked: runs, returns nan, updates W
    W.assign(np.ones(3, np.float32))
    with fj.debug.check_numerics():
        with pytest.raises(NumericsError) as err:
            step(x)
    msg = str(err.value)
    assert msg.startswith("check_numerics: log at test_debug.py:")
    assert "-inf in 1 of 3 elements" in msg and "= log %" in msg
    np.testing.assert_array_equal(W.numpy(), np.ones(3, np.float32))
    assert not fj.debug.numerics_checked()


def test_a_non_finite_argument_is_named():
    f = fj.function(lambda x, y: x * y)
    x = np.ones(4)
    f(x, x)  # the fast path is cached: checking must still happen
    with fj.debug.check_numerics():
        with pytest.raises(NumericsError, match=r"argument %y \(f64\[4\]\) of @\S+ already holds nan"):
            f(x, np.array([1.0, np.nan, 1.0, 1.0]))
        np.testing.assert_array_equal(f(x, x), x)  # finite results pass through


def test_diverging_training_is_caught_at_the_op_that_overflows():
    fj.debug.enable_check_numerics()
    try:
        layer = fj.nn.Dense(4, 3, key=0)
        opt = fj.optim.SGD(1e30)
        x = np.random.default_rng(0).standard_normal((8, 4)).astype(np.float32) * 1e5
        y = np.arange(8, dtype=np.int32) % 3
        step = fj.function(lambda x, y: opt.minimize(lambda: fj.nn.softmax_cross_entropy(layer(x), y),
                                                     layer.variables))
        with pytest.raises(NumericsError, match=r"it is the first op of @\S+ whose result is not finite"):
            for _ in range(5):
                step(x, y)
        assert all(np.isfinite(v.numpy()).all() for v in layer.variables)
    finally:
        fj.debug.disable_check_numerics()
