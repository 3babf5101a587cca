"""fj.random's derived draws: gumbel and categorical (the Gumbel-max trick), compiled, against
their distributions and the interpreter's bits."""

from __future__ import annotations

import numpy as np
import pytest

import flowjit as fj


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_gumbel_has_the_standard_gumbel_moments_and_no_infinity(dtype):
    x = np.asarray(fj.function(lambda k: fj.random.gumbel(k, (400_000,), dtype))(fj.random.key(2)))
    assert x.dtype == np.dtype(dtype) and np.isfinite(x).all()
    # mean: Euler's gamma; variance pi^2/6 (standard error of the mean 0.002)
    assert abs(x.mean() - np.euler_gamma) < 0.01 and abs(x.var() - np.pi ** 2 / 6) < 0.03


def test_categorical_draws_with_softmax_probabilities_and_never_an_impossible_class():
    p = np.array([[0.1, 0.2, 0.7, 0.0], [0.25, 0.25, 0.25, 0.25]])
    with np.errstate(divide="ignore"):
        logits = np.log(p) + 3.0                                  # unnormalized, -inf for p = 0
    draw = fj.function(lambda k, lg: fj.random.categorical(k, lg[:, None, :], shape=(2, 50_000)))
    s = np.asarray(draw(fj.random.key(0), logits))
    assert s.shape == (2, 50_000) and s.dtype == np.int32
    freq = np.stack([np.bincount(r, minlength=4) / 50_000 for r in s])
    assert freq[0, 3] == 0
    np.testing.assert_allclose(freq, p, atol=0.01)
    # The compiled draw is the interpreter's, bit for bit.
    interpreted = fj.function(lambda k, lg: fj.random.categorical(k, lg[:, None, :], shape=(2, 50_000)),
                              interpret=True)
    np.testing.assert_array_equal(s, np.asarray(interpreted(fj.random.key(0), logits)))


def test_categorical_along_another_axis_and_a_shape_that_does_not_fit():
    logits = np.zeros((4, 5))
    assert np.asarray(fj.random.categorical(fj.random.key(1), logits, axis=0)).shape == (5,)
    assert np.asarray(fj.random.categorical(fj.random.key(1), logits)).max() < 5
    with pytest.raises(fj.FlowjitTypeError, match=r"shape \[3\] does not take the logits' batch shape \[4\]"):
        fj.random.categorical(fj.random.key(1), logits, shape=(3,))
