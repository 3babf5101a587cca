"""The bench's model zoo ahead of time: each model's inference function compiles with
``fj.export`` (``flowjit compile``), for any batch size where it can, and the library gives
the JIT's results."""

from __future__ import annotations

import numpy as np
import pytest

import flowjit as fj
from bench.workloads import zoo

# The CNN's batch norm is in its training form (the batch's own mean and variance): its
# kernels divide by the element count of the batch they are given.
STATIC_BATCH: set[str] = set()
BATCH_AXIS = {"lstm": 1}     # the LSTM's inputs are [T, B, F]


@pytest.mark.parametrize("model", list(zoo.MODELS))
def test_a_zoo_model_compiles_ahead_of_time_and_gives_the_jits_results(model, tmp_path):
    L = zoo.lib("flowjit")
    forward = zoo.predict(L, model)
    params, (x, _) = zoo.init(model, quick=True), zoo.batch(model, quick=True)
    axis = BATCH_AXIS.get(model, 0)
    shape = list(x.shape)
    if model not in STATIC_BATCH:
        shape[axis] = "B"
    fj.export(forward, params, fj.ShapeDtype(tuple(shape), x.dtype), path=tmp_path, name=model)
    compiled = fj.load_compiled(tmp_path)
    jit = fj.function(forward)
    sizes = [x.shape[axis]] if model in STATIC_BATCH else [1, x.shape[axis], 3 * x.shape[axis] + 1]
    for b in sizes:
        xb = np.take(x, np.arange(b) % x.shape[axis], axis=axis)
        np.testing.assert_allclose(compiled(params, xb), jit(params, xb), rtol=2e-5, atol=1e-6, err_msg=f"B={b}")
