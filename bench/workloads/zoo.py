"""The model zoo of the ``models`` workload: five small models, each written ONCE against a
numpy-like namespace ``np_`` and a handful of adapter functions, so that flowjit (``fj``),
JAX (``jax.numpy``) and PyTorch (a thin shim over ``torch``) trace the same function body.

Models (``MODELS``), full sizes (``--quick`` shrinks them):

- ``mlp``: 784-256-256-10, ReLU, batch 128.
- ``cnn``: two 3x3 convolutions (32 and 64 channels, SAME, no bias) on NHWC 32x28x28x1,
  each followed by batch norm in its training form (the batch's mean and variance over
  N, H, W; scale and shift), ReLU and a 2x2 max pool; then dense 7*7*64 -> 10.
- ``transformer``: one pre-norm block, B=8, T=128, D=256, 4 heads: layer norm, self-attention
  (fused QKV projection, softmax over keys, no mask), residual; layer norm, GELU (tanh form)
  MLP of 4D, residual; then the mean over T and dense D -> 10.
- ``embedding``: a 50,000x64 table, 256 bags of 20 ids, the mean over each bag, dense 64 -> 10.
- ``lstm``: 32 steps, batch 64, 64 input features, hidden 128 (one fused 4-gate matmul for
  the input and one for the state per step), over the library's scan (``fj.scan``,
  ``jax.lax.scan``; PyTorch has none: a Python loop); dense hidden -> 10 on the last state.

Each model is ``forward(L, params, x) -> logits``. ``predict(L, model)`` is inference;
``train_step(L, model)`` is one training step: softmax cross entropy of the logits (labels
as a one-hot mask, so the loss itself needs no gather), its gradient by the library's own
autodiff (``L.value_and_grad``) and a hand-written Adam update (``adam``, PyTorch's and
optax's formulation), returning ``(params, state, loss)``. The adapter table (``Lib``: one
per library, built by ``lib(name)``) holds only what the namespaces spell differently:
convolution, pooling, the row gather, scan, value_and_grad and, for PyTorch, a numpy-named
shim. Parameters and batches come from ``init``/``batch`` with fixed seeds, as NumPy arrays.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

LR, B1, B2, EPS = 1e-3, 0.9, 0.999, 1e-8       # Adam
BN_EPS, LN_EPS = 1e-5, 1e-5
CLASSES = 10


# ---- the adapter table ------------------------------------------------------------------------
@dataclass
class Lib:
    """What one library spells differently. ``np`` is its numpy-like namespace."""

    name: str
    np: Any
    conv2d: Callable[[Any, Any], Any]          # NHWC x HWIO, stride 1, SAME
    max_pool2: Callable[[Any], Any]            # 2x2 window, stride 2, VALID, NHWC
    take_rows: Callable[[Any, Any], Any]       # table[ids] along axis 0
    scan: Callable[[Callable, Any, Any], Any]  # jax.lax.scan's (carry, ys) = scan(f, init, xs)
    value_and_grad: Callable[[Callable], Callable]   # of a function of one pytree


def _fj_lib() -> Lib:
    import flowjit as fj
    return Lib("flowjit", fj,
               conv2d=lambda x, w: fj.conv2d(x, w, padding="SAME"),
               max_pool2=lambda x: fj.nn.max_pool(x, 2),
               take_rows=lambda t, ids: fj.take(t, ids, axis=0),
               scan=fj.scan,
               value_and_grad=fj.value_and_grad)


def _jax_lib() -> Lib:
    import jax
    jnp, lax = jax.numpy, jax.lax
    return Lib("jax", jnp,
               conv2d=lambda x, w: lax.conv_general_dilated(x, w, (1, 1), "SAME",
                                                            dimension_numbers=("NHWC", "HWIO", "NHWC")),
               max_pool2=lambda x: lax.reduce_window(x, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID"),
               take_rows=lambda t, ids: jnp.take(t, ids, axis=0),
               scan=lax.scan,
               value_and_grad=jax.value_and_grad)


class _TorchNumpy:
    """The numpy names the models use, over torch (axis/keepdims as dim/keepdim)."""

    def __init__(self, torch: Any):
        self.t = torch
        self.float32 = torch.float32

    def __getattr__(self, name: str) -> Any:           # exp, log, sqrt, tanh, matmul, reshape, swapaxes
        return getattr(self.t, name)

    def mean(self, x, axis=None, keepdims=False):
        return self.t.mean(x, dim=axis, keepdim=keepdims)

    def sum(self, x, axis=None, keepdims=False):
        return self.t.sum(x, dim=axis, keepdim=keepdims)

    def max(self, x, axis=None, keepdims=False):
        return self.t.amax(x, dim=axis, keepdim=keepdims)

    def maximum(self, x, y):
        return self.t.clamp_min(x, y) if isinstance(y, (int, float)) else self.t.maximum(x, y)

    def transpose(self, x, axes):
        return x.permute(*axes)

    def astype(self, x, dtype):
        return x.to(dtype)

    def zeros(self, shape, dtype):
        return self.t.zeros(shape, dtype=dtype)


def _torch_lib() -> Lib:
    import torch
    F = torch.nn.functional

    def scan(f, init, xs):
        carry, ys = init, []
        for i in range(xs.shape[0]):
            carry, y = f(carry, xs[i])
            ys.append(y)
        return carry, (None if ys[0] is None else torch.stack(ys))

    def value_and_grad(f):
        def vg(params):
            grads, value = torch.func.grad_and_value(f)(params)
            return value, grads
        return vg

    return Lib("torch", _TorchNumpy(torch),
               conv2d=lambda x, w: F.conv2d(x.permute(0, 3, 1, 2), w.permute(3, 2, 0, 1),
                                            padding="same").permute(0, 2, 3, 1),
               max_pool2=lambda x: F.max_pool2d(x.permute(0, 3, 1, 2), 2).permute(0, 2, 3, 1),
               take_rows=lambda t, ids: t[ids.long()],
               scan=scan,
               value_and_grad=value_and_grad)


LIBS = {"flowjit": _fj_lib, "jax": _jax_lib, "torch": _torch_lib}


def lib(name: str) -> Lib:
    """The adapter table of ``flowjit``, ``jax`` or ``torch`` (imports the library)."""
    return LIBS[name]()


# ---- shared pieces ----------------------------------------------------------------------------
def relu(np_, x):
    return np_.maximum(x, 0.0)


def sigmoid(np_, x):
    return 1.0 / (1.0 + np_.exp(-x))


def gelu(np_, x):
    """The tanh form (jax.nn.gelu's default, torch's approximate='tanh')."""
    return 0.5 * x * (1.0 + np_.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * (x * x * x))))


def softmax(np_, x):
    z = x - np_.max(x, axis=-1, keepdims=True)
    e = np_.exp(z)
    return e / np_.sum(e, axis=-1, keepdims=True)


def layer_norm(np_, x, gamma, beta):
    mu = np_.mean(x, axis=-1, keepdims=True)
    d = x - mu
    var = np_.mean(d * d, axis=-1, keepdims=True)
    return d / np_.sqrt(var + LN_EPS) * gamma + beta


def batch_norm(np_, x, gamma, beta):
    """Training form: the batch's statistics over N, H, W of an NHWC array."""
    mu = np_.mean(x, axis=(0, 1, 2), keepdims=True)
    d = x - mu
    var = np_.mean(d * d, axis=(0, 1, 2), keepdims=True)
    return d / np_.sqrt(var + BN_EPS) * gamma + beta


def cross_entropy(np_, logits, y):
    """Mean softmax cross entropy over the batch; ``y`` integer labels."""
    z = logits - np_.max(logits, axis=-1, keepdims=True)
    logp = z - np_.log(np_.sum(np_.exp(z), axis=-1, keepdims=True))
    onehot = np_.astype(y[:, None] == np_.arange(logits.shape[-1]), logits.dtype)
    return -np_.mean(np_.sum(onehot * logp, axis=-1))


def adam(np_, params: dict, grads: dict, state: dict) -> tuple[dict, dict]:
    """One Adam step (bias-corrected moments, eps outside the square root)."""
    t = state["t"] + 1.0
    c1, c2 = 1.0 - B1 ** t, 1.0 - B2 ** t
    m = {k: B1 * state["m"][k] + (1.0 - B1) * grads[k] for k in params}
    v = {k: B2 * state["v"][k] + (1.0 - B2) * (grads[k] * grads[k]) for k in params}
    new = {k: params[k] - LR * (m[k] / c1) / (np_.sqrt(v[k] / c2) + EPS) for k in params}
    return new, {"t": t, "m": m, "v": v}


# ---- the models -------------------------------------------------------------------------------
def mlp(L: Lib, p: dict, x: Any) -> Any:
    np_ = L.np
    h = relu(np_, x @ p["w1"] + p["b1"])
    h = relu(np_, h @ p["w2"] + p["b2"])
    return h @ p["w3"] + p["b3"]


def cnn(L: Lib, p: dict, x: Any) -> Any:
    np_ = L.np
    h = L.max_pool2(relu(np_, batch_norm(np_, L.conv2d(x, p["c1"]), p["g1"], p["s1"])))
    h = L.max_pool2(relu(np_, batch_norm(np_, L.conv2d(h, p["c2"]), p["g2"], p["s2"])))
    n, hh, ww, c = h.shape
    return np_.reshape(h, (n, hh * ww * c)) @ p["w"] + p["b"]


HEADS = 4


def transformer(L: Lib, p: dict, x: Any) -> Any:
    np_ = L.np
    b, t, d = x.shape
    dh = d // HEADS

    def heads(u):                       # (B, T, D) -> (B, H, T, dh)
        return np_.transpose(np_.reshape(u, (b, t, HEADS, dh)), (0, 2, 1, 3))

    h = layer_norm(np_, x, p["ln1_g"], p["ln1_b"])
    qkv = h @ p["wqkv"]
    q, k, v = heads(qkv[:, :, :d]), heads(qkv[:, :, d:2 * d]), heads(qkv[:, :, 2 * d:])
    att = softmax(np_, (q @ np_.swapaxes(k, -1, -2)) * (1.0 / math.sqrt(dh)))
    o = np_.reshape(np_.transpose(att @ v, (0, 2, 1, 3)), (b, t, d))
    x = x + o @ p["wo"]
    h = layer_norm(np_, x, p["ln2_g"], p["ln2_b"])
    x = x + gelu(np_, h @ p["w1"] + p["b1"]) @ p["w2"] + p["b2"]
    return np_.mean(x, axis=1) @ p["head_w"] + p["head_b"]


def embedding(L: Lib, p: dict, ids: Any) -> Any:
    bags = L.np.mean(L.take_rows(p["table"], ids), axis=1)
    return bags @ p["w"] + p["b"]


def lstm(L: Lib, p: dict, xs: Any) -> Any:
    np_ = L.np
    hidden = p["wh"].shape[0]
    batch = xs.shape[1]

    def cell(carry, x):
        h, c = carry
        z = x @ p["wx"] + h @ p["wh"] + p["bg"]
        i = sigmoid(np_, z[:, :hidden])
        f = sigmoid(np_, z[:, hidden:2 * hidden])
        g = np_.tanh(z[:, 2 * hidden:3 * hidden])
        o = sigmoid(np_, z[:, 3 * hidden:])
        c = f * c + i * g
        return (o * np_.tanh(c), c), None

    zeros = np_.zeros((batch, hidden), np_.float32)
    (h, _), _ = L.scan(cell, (zeros, zeros), xs)
    return h @ p["w"] + p["b"]


# ---- sizes, parameters and batches ------------------------------------------------------------
# Each model's sizes: full and quick.
SIZES: dict[str, dict[str, dict[str, int]]] = {
    "mlp": {"full": {"batch": 128, "inp": 784, "hidden": 256},
            "quick": {"batch": 32, "inp": 784, "hidden": 64}},
    "cnn": {"full": {"batch": 32, "side": 28, "c1": 32, "c2": 64},
            "quick": {"batch": 4, "side": 12, "c1": 4, "c2": 8}},
    "transformer": {"full": {"batch": 8, "seq": 128, "dim": 256},
                    "quick": {"batch": 2, "seq": 16, "dim": 32}},
    "embedding": {"full": {"vocab": 50_000, "dim": 64, "batch": 256, "bag": 20},
                  "quick": {"vocab": 1_000, "dim": 16, "batch": 32, "bag": 8}},
    "lstm": {"full": {"steps": 32, "batch": 64, "inp": 64, "hidden": 128},
             "quick": {"steps": 6, "batch": 8, "inp": 8, "hidden": 16}},
}
SEEDS = {"mlp": 11, "cnn": 12, "transformer": 13, "embedding": 14, "lstm": 15}


def describe(model: str, quick: bool = False) -> str:
    s = SIZES[model]["quick" if quick else "full"]
    if model == "mlp":
        return f"MLP {s['inp']}-{s['hidden']}-{s['hidden']}-10, b{s['batch']}"
    if model == "cnn":
        return f"CNN 2x(conv3x3 {s['c1']},{s['c2']} + BN + pool), {s['batch']}x{s['side']}x{s['side']}x1"
    if model == "transformer":
        return f"transformer block B{s['batch']} T{s['seq']} D{s['dim']} {HEADS} heads"
    if model == "embedding":
        return f"embedding {s['vocab']:,}x{s['dim']}, {s['batch']}x{s['bag']} ids"
    return f"LSTM {s['steps']} steps, b{s['batch']}, hidden {s['hidden']}"


def _glorot(rng: np.random.Generator, shape: tuple[int, ...], fan_in: int, fan_out: int) -> np.ndarray:
    limit = math.sqrt(6.0 / (fan_in + fan_out))
    return rng.uniform(-limit, limit, shape).astype(np.float32)


def _small(rng: np.random.Generator, n: int) -> np.ndarray:
    return rng.uniform(-0.1, 0.1, (n,)).astype(np.float32)


def init(model: str, quick: bool = False) -> dict[str, np.ndarray]:
    """The model's parameters (float32, fixed seed)."""
    s = SIZES[model]["quick" if quick else "full"]
    rng = np.random.default_rng(SEEDS[model])
    ones = lambda n: np.ones(n, np.float32)               # noqa: E731
    zeros = lambda n: np.zeros(n, np.float32)             # noqa: E731
    if model == "mlp":
        i, h = s["inp"], s["hidden"]
        return {"w1": _glorot(rng, (i, h), i, h), "b1": _small(rng, h), "w2": _glorot(rng, (h, h), h, h),
                "b2": _small(rng, h), "w3": _glorot(rng, (h, CLASSES), h, CLASSES), "b3": _small(rng, CLASSES)}
    if model == "cnn":
        c1, c2, side = s["c1"], s["c2"], s["side"] // 4
        flat = side * side * c2
        return {"c1": _glorot(rng, (3, 3, 1, c1), 9, 9 * c1), "g1": ones(c1), "s1": zeros(c1),
                "c2": _glorot(rng, (3, 3, c1, c2), 9 * c1, 9 * c2), "g2": ones(c2), "s2": zeros(c2),
                "w": _glorot(rng, (flat, CLASSES), flat, CLASSES), "b": _small(rng, CLASSES)}
    if model == "transformer":
        d = s["dim"]
        return {"ln1_g": ones(d), "ln1_b": zeros(d), "wqkv": _glorot(rng, (d, 3 * d), d, d),
                "wo": _glorot(rng, (d, d), d, d), "ln2_g": ones(d), "ln2_b": zeros(d),
                "w1": _glorot(rng, (d, 4 * d), d, 4 * d), "b1": _small(rng, 4 * d),
                "w2": _glorot(rng, (4 * d, d), 4 * d, d), "b2": _small(rng, d),
                "head_w": _glorot(rng, (d, CLASSES), d, CLASSES), "head_b": _small(rng, CLASSES)}
    if model == "embedding":
        v, d = s["vocab"], s["dim"]
        return {"table": rng.standard_normal((v, d)).astype(np.float32),
                "w": _glorot(rng, (d, CLASSES), d, CLASSES), "b": _small(rng, CLASSES)}
    if model == "lstm":
        i, h = s["inp"], s["hidden"]
        b = _small(rng, 4 * h)
        b[h:2 * h] += 1.0                                   # forget-gate bias 1
        return {"wx": _glorot(rng, (i, 4 * h), i, 4 * h), "wh": _glorot(rng, (h, 4 * h), h, 4 * h), "bg": b,
                "w": _glorot(rng, (h, CLASSES), h, CLASSES), "b": _small(rng, CLASSES)}
    raise KeyError(model)


def batch(model: str, quick: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """The model's input batch and int32 labels (fixed seed)."""
    s = SIZES[model]["quick" if quick else "full"]
    rng = np.random.default_rng(SEEDS[model] + 100)
    if model == "mlp":
        x = rng.random((s["batch"], s["inp"]), dtype=np.float32)
    elif model == "cnn":
        x = rng.random((s["batch"], s["side"], s["side"], 1), dtype=np.float32)
    elif model == "transformer":
        x = rng.standard_normal((s["batch"], s["seq"], s["dim"])).astype(np.float32)
    elif model == "embedding":
        x = rng.integers(0, s["vocab"], (s["batch"], s["bag"])).astype(np.int32)
    elif model == "lstm":
        x = rng.standard_normal((s["steps"], s["batch"], s["inp"])).astype(np.float32)
    else:
        raise KeyError(model)
    n = x.shape[1] if model == "lstm" else x.shape[0]
    return x, rng.integers(0, CLASSES, n).astype(np.int32)


def adam_state(params: dict[str, np.ndarray]) -> dict:
    """Adam's initial state: step 0 and zero moments."""
    return {"t": np.zeros((), np.float32), "m": {k: np.zeros_like(v) for k, v in params.items()},
            "v": {k: np.zeros_like(v) for k, v in params.items()}}


MODELS: dict[str, Callable[[Lib, dict, Any], Any]] = {
    "mlp": mlp, "cnn": cnn, "transformer": transformer, "embedding": embedding, "lstm": lstm}


# ---- inference and training, once for every library --------------------------------------------
def predict(L: Lib, model: str) -> Callable[[dict, Any], Any]:
    """``(params, x) -> logits``."""
    forward = MODELS[model]

    def predict_fn(params, x):
        return forward(L, params, x)
    return predict_fn


def train_step(L: Lib, model: str) -> Callable[[dict, dict, Any, Any], tuple[dict, dict, Any]]:
    """``(params, adam_state, x, y) -> (params, adam_state, loss)``: one Adam step on the
    softmax cross entropy of the model's logits."""
    forward = MODELS[model]

    def step(params, state, x, y):
        loss, grads = L.value_and_grad(lambda p: cross_entropy(L.np, forward(L, p, x), y))(params)
        params, state = adam(L.np, params, grads, state)
        return params, state, loss
    return step
