"""Programs whose Variables live on one device and are read, updated and trained on
another: shared by ``test_placement.py`` (virtual CPUs) and ``sim_variable_cases.py``
(a simulated GPU), each check asserting the device of every op and the values."""

from __future__ import annotations

import contextlib

import numpy as np

import flowjit as fj


def op_devices(fn):
    """(name, device) of each op that computes, in program order (transfers and constants left out)."""
    return [(op.name, op.device) for op in fn.body.ops if op.name not in ("send", "recv", "constant")]


def check_reader_elsewhere_gets_a_copy(device: str) -> fj.Variable:
    """A Variable created on the CPU, read under ``fj.device(device)``, assigned outside:
    it stays on cpu:0 with its assign, and the reader on ``device`` gets a copy."""
    w = fj.Variable(np.ones(3, np.float32), name="w")

    @fj.function
    def step(x):
        with fj.device(device):
            y = w * x
        w.assign(w + 1)
        return y

    x = np.full(3, 2, np.float32)
    fn = step.ir(x, stage="placement")
    assert op_devices(fn) == [("mul", device), ("add", "cpu:0"), ("assign", "cpu:0")]
    assert fn.arg_devices == ["cpu:0", "cpu:0"]
    np.testing.assert_allclose(step(x), [2, 2, 2])
    np.testing.assert_allclose(step(x), [4, 4, 4])
    np.testing.assert_allclose(w.numpy(), [3, 3, 3])
    assert step.trace_count == 1
    return step


def check_training_elsewhere(device: str, where: str | None, make_opt, rtol: float = 1e-6) -> None:
    """A training step computed under ``fj.device(device)`` on Variables created under
    ``where`` (None: no block, so cpu:0) trains as the same step with no device does,
    its assigns on cpu:0 and its matmul on ``device``."""
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(8, 5)).astype(np.float32), rng.normal(size=(8, 2)).astype(np.float32)
    w0 = rng.normal(size=(5, 2)).astype(np.float32)

    def train(compute_on):
        with fj.device(where) if where else contextlib.nullcontext():
            w, b = fj.Variable(w0, name="w"), fj.Variable(np.zeros(2, np.float32), name="b")
            opt = make_opt()

        def step(x, y):
            with fj.device(compute_on) if compute_on else contextlib.nullcontext():
                return opt.minimize(lambda: fj.mean(fj.square(x @ w + b - y)), [w, b])

        step = fj.function(step)
        return step, [float(step(x, y)) for _ in range(3)], w.numpy(), b.numpy()

    step, losses, w, b = train(device)
    _, want_losses, want_w, want_b = train(None)
    assert losses[2] < losses[0]
    np.testing.assert_allclose(losses, want_losses, rtol=rtol)
    np.testing.assert_allclose(w, want_w, rtol=rtol, atol=rtol / 10)
    np.testing.assert_allclose(b, want_b, rtol=rtol, atol=rtol / 10)
    fn = step.ir(x, y, stage="placement")
    devices = op_devices(fn)
    assert {d for name, d in devices if name == "assign"} == {"cpu:0"}, devices
    assert ("matmul", device) in devices
    assert all(d == "cpu:0" for d, var in zip(fn.arg_devices, fn.is_var) if var)


OPTIMIZERS = {"sgd": lambda: fj.optim.SGD(0.1), "adam": lambda: fj.optim.Adam(0.01)}
