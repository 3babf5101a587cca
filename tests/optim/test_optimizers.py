"""Each optimizer against an independent NumPy implementation of its algorithm, for
several steps, eagerly and inside a compiled ``@fj.function`` step."""

from __future__ import annotations

import numpy as np
import pytest

import flowjit as fj
from flowjit import optim

GRADS = [np.array([0.5, -1.0, 2.0]), np.array([0.1, 0.3, -0.7]), np.array([-1.5, 0.2, 0.0]),
         np.array([0.9, -0.4, 1.1]), np.array([0.05, 0.6, -0.2])]
W0 = np.array([1.0, -2.0, 0.5])


def numpy_reference(name, w, grads, lr, **kw):
    w = w.copy()
    s1, s2 = np.zeros_like(w), np.zeros_like(w)
    for t, g in enumerate(grads, start=1):
        if name == "SGD":
            w = w - lr * g
        elif name == "Momentum":
            s1 = kw.get("momentum", 0.9) * s1 - lr * g
            w = w + (kw.get("momentum", 0.9) * s1 - lr * g if kw.get("nesterov") else s1)
        elif name == "Adagrad":
            s1 = s1 + g * g
            w = w - lr * g / (np.sqrt(s1) + 1e-10)
        elif name == "Adadelta":
            rho, eps = 0.9, 1e-6
            s1 = rho * s1 + (1 - rho) * g * g
            d = np.sqrt(s2 + eps) / np.sqrt(s1 + eps) * g
            s2 = rho * s2 + (1 - rho) * d * d
            w = w - lr * d
        elif name == "RMSProp":
            s1 = 0.99 * s1 + 0.01 * g * g
            w = w - lr * g / (np.sqrt(s1) + 1e-8)
        elif name in ("Adam", "AdamW"):
            b1, b2, eps, wd = 0.9, 0.999, 1e-8, kw.get("weight_decay", 0.0)
            if name == "AdamW":
                w = w * (1 - lr * wd)
            elif wd:
                g = g + wd * w
            s1 = b1 * s1 + (1 - b1) * g
            s2 = b2 * s2 + (1 - b2) * g * g
            w = w - lr * (s1 / (1 - b1 ** t)) / (np.sqrt(s2 / (1 - b2 ** t)) + eps)
    return w


CONFIGS = [("SGD", {}), ("Momentum", {}), ("Momentum", {"nesterov": True}), ("Adagrad", {}),
           ("Adadelta", {}), ("RMSProp", {}), ("Adam", {}), ("Adam", {"weight_decay": 0.1}),
           ("AdamW", {"weight_decay": 0.1})]


@pytest.mark.parametrize("name,kw", CONFIGS, ids=[f"{n}{'-' + '-'.join(k) if k else ''}" for n, k in CONFIGS])
@pytest.mark.parametrize("traced", [False, True], ids=["eager", "compiled"])
def test_updates_equal_numpy_reference(name, kw, traced):
    w = fj.Variable(W0, name="w")
    opt = getattr(optim, name)(0.05, **kw)

    def step(g):
        opt.apply_gradients([(g, w)])

    run = fj.function(step) if traced else step
    for g in GRADS:
        run(g)
    np.testing.assert_allclose(w.numpy(), numpy_reference(name, W0, GRADS, 0.05, **kw), rtol=1e-12, atol=1e-14)
    assert int(opt.iterations.numpy()) == len(GRADS)
    if traced:
        assert run.trace_count == 1


def test_minimize_with_a_learning_rate_schedule_fits_a_line():
    rng = np.random.default_rng(0)
    x = rng.standard_normal(200).astype(np.float32)
    y = 0.1 * x + 0.3 + 0.01 * rng.standard_normal(200).astype(np.float32)
    w, b = fj.Variable(np.float32(0.0), name="w"), fj.Variable(np.float32(0.0), name="b")
    opt = optim.Momentum(lambda step: 0.1 / (1 + 0.001 * step), momentum=0.5)

    @fj.function
    def train(x, y):
        return opt.minimize(lambda: ((w * x + b - y) ** 2).mean(), [w, b])

    for _ in range(200):
        loss = train(x, y)
    assert abs(float(w.numpy()) - 0.1) < 0.01 and abs(float(b.numpy()) - 0.3) < 0.01
    assert float(loss) < 2e-4
    assert train.trace_count == 1


def test_adam_trains_a_digits_mlp_on_a_mean_loss():
    # The mean of the (0-d) cross-entropy is a reduction of a 0-d value, fused into the
    # update: its kernel once read a partial sum before assigning it and failed to compile.
    from sklearn.datasets import load_digits

    digits = load_digits()
    x, y = (digits.data[:128] / 16.0).astype(np.float32), digits.target[:128].astype(np.int32)
    model = fj.nn.Sequential([fj.nn.Dense(64, 32, fj.nn.relu, key=0, name="hidden"),
                              fj.nn.Dense(32, 10, key=1, name="logits")], name="mlp")
    opt = optim.Adam(1e-2)

    @fj.function
    def train_step(x, y):
        return opt.minimize(lambda: fj.mean(fj.nn.softmax_cross_entropy(model(x), y)), model.trainable_variables)

    losses = [float(train_step(x, y)) for _ in range(30)]
    assert np.all(np.isfinite(losses)) and losses[-1] < 0.5 * losses[0], losses
    assert train_step.trace_count == 1
    exe = train_step._cache[next(iter(train_step._cache))].executable
    assert exe.kernels and not exe.fallbacks, exe.fallbacks
