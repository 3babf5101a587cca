"""The workloads' functions, written once per library (the harness and its subprocesses share them).

flowjit's are written with flowjit's NumPy-like API. The peers' are the same formulas in their
own APIs; torch eager uses its own fused operator where it has one (``F.gelu``, ``softmax``,
``layer_norm``), as a PyTorch user would, and torch.compile compiles the written formula.
TensorFlow's are the written formulas too, each compiled whole by XLA
(``tf.function(jit_compile=True)``, see ``tf_jit``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

import flowjit as fj

GELU_C = 0.7978845608
GELU_K = 0.044715
LN_EPS = 1e-5


# ---- flowjit ---------------------------------------------------------------------------------
def fj_gelu(x):
    return 0.5 * x * (1 + fj.tanh(GELU_C * (x + GELU_K * x**3)))


def fj_softmax(x):
    e = fj.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def fj_layernorm(x):
    d = x - x.mean(axis=-1, keepdims=True)
    return d * fj.rsqrt((d * d).mean(axis=-1, keepdims=True) + LN_EPS)


def fj_add1(x):
    return x + 1


def fj_matmul(a, b):
    return a @ b


def fj_triad(b, c, s):
    return b + s * c


def fj_spectrum(x):
    return fj.abs(fj.fft.rfft(x)) ** 2


def fj_transpose(x):
    return x.T + 1


def fj_depthwise(x, w):
    return fj.nn.depthwise_conv2d(x, w, 1, "SAME")


def fj_rotary(pos, inv_freq):
    angle = pos[:, None] * inv_freq[None, :]
    return fj.concatenate([fj.cos(angle), fj.sin(angle)], axis=-1)


FJ = {"gelu": fj_gelu, "softmax": fj_softmax, "layernorm": fj_layernorm, "dispatch": fj_add1,
      "matmul": fj_matmul, "triad": fj_triad, "spectrum": fj_spectrum, "transpose": fj_transpose,
      "depthwise": fj_depthwise, "rotary": fj_rotary}


# ---- NumPy (also the float64 reference) ------------------------------------------------------
def np_gelu(x):
    return 0.5 * x * (1 + np.tanh(GELU_C * (x + GELU_K * x**3)))


def np_softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def np_layernorm(x):
    d = x - x.mean(axis=-1, keepdims=True)
    return d * (1 / np.sqrt((d * d).mean(axis=-1, keepdims=True) + LN_EPS))


def np_add1(x):
    return x + 1


def np_matmul(a, b):
    return a @ b


def np_spectrum(x):
    return np.abs(np.fft.rfft(x)) ** 2


def np_transpose(x):
    # order="C": a ufunc otherwise writes x.T's layout (column-major), which is no transpose
    return np.add(x.T, 1, order="C")


def np_depthwise(x, w):
    # A 3x3 SAME depthwise convolution (x NHWC, w [3, 3, C, 1]) as NumPy users write it: the
    # nine taps of the zero-padded input, each times its filter row, added up.
    n, h, wd, c = x.shape
    xp = np.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))
    out = np.zeros_like(x)
    for p in range(3):
        for q in range(3):
            out += xp[:, p:p + h, q:q + wd, :] * w[p, q, :, 0]
    return out


def np_rotary(pos, inv_freq):
    angle = pos[:, None] * inv_freq[None, :]
    return np.concatenate([np.cos(angle), np.sin(angle)], axis=-1)


NP = {"gelu": np_gelu, "softmax": np_softmax, "layernorm": np_layernorm, "dispatch": np_add1,
      "matmul": np_matmul, "spectrum": np_spectrum, "transpose": np_transpose, "depthwise": np_depthwise,
      "rotary": np_rotary}


# ---- JAX -------------------------------------------------------------------------------------
def jax_functions(jax: Any) -> dict[str, Any]:
    jnp = jax.numpy

    def gelu(x):
        return 0.5 * x * (1 + jnp.tanh(GELU_C * (x + GELU_K * x**3)))

    def softmax(x):
        e = jnp.exp(x - x.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)

    def layernorm(x):
        d = x - x.mean(axis=-1, keepdims=True)
        return d * jax.lax.rsqrt((d * d).mean(axis=-1, keepdims=True) + LN_EPS)

    def add1(x):
        return x + 1

    def matmul(a, b):
        return a @ b

    def spectrum(x):
        return jnp.abs(jnp.fft.rfft(x)) ** 2

    def transpose(x):
        return x.T + 1

    def depthwise(x, w):
        return jax.lax.conv_general_dilated(x, w.reshape(3, 3, 1, -1), (1, 1), "SAME",
                                            dimension_numbers=("NHWC", "HWIO", "NHWC"),
                                            feature_group_count=x.shape[-1])

    def rotary(pos, inv_freq):
        angle = pos[:, None] * inv_freq[None, :]
        return jnp.concatenate([jnp.cos(angle), jnp.sin(angle)], axis=-1)

    return {"gelu": gelu, "softmax": softmax, "layernorm": layernorm, "dispatch": add1, "matmul": matmul,
            "spectrum": spectrum, "transpose": transpose, "depthwise": depthwise, "rotary": rotary}


# ---- TensorFlow ------------------------------------------------------------------------------
def tf_functions(tf: Any) -> dict[str, Any]:
    def gelu(x):
        return 0.5 * x * (1 + tf.tanh(GELU_C * (x + GELU_K * x**3)))

    def softmax(x):
        e = tf.exp(x - tf.reduce_max(x, axis=-1, keepdims=True))
        return e / tf.reduce_sum(e, axis=-1, keepdims=True)

    def layernorm(x):
        d = x - tf.reduce_mean(x, axis=-1, keepdims=True)
        return d * tf.math.rsqrt(tf.reduce_mean(d * d, axis=-1, keepdims=True) + LN_EPS)

    def add1(x):
        return x + 1

    def matmul(a, b):
        return a @ b

    def spectrum(x):
        return tf.abs(tf.signal.rfft(x)) ** 2

    def transpose(x):
        return tf.transpose(x) + 1

    def depthwise(x, w):
        return tf.nn.depthwise_conv2d(x, w, [1, 1, 1, 1], "SAME")

    def rotary(pos, inv_freq):
        angle = pos[:, None] * inv_freq[None, :]
        return tf.concat([tf.cos(angle), tf.sin(angle)], axis=-1)

    return {"gelu": gelu, "softmax": softmax, "layernorm": layernorm, "dispatch": add1, "matmul": matmul,
            "spectrum": spectrum, "transpose": transpose, "depthwise": depthwise, "rotary": rotary}


def tf_jit(tf: Any, f: Any) -> Any:
    """``f`` as TensorFlow users compile it for speed: traced once per input signature and
    compiled whole by XLA (``jit_compile=True``), as ``jax.jit`` does; without it a
    ``tf.function`` runs its graph op by op."""
    return tf.function(f, jit_compile=True)


# ---- PyTorch ---------------------------------------------------------------------------------
def torch_functions(torch: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """(eager, written): torch eager's idiomatic operators, and the written formulas to compile."""
    F = torch.nn.functional

    def gelu(x):
        return 0.5 * x * (1 + torch.tanh(GELU_C * (x + GELU_K * x**3)))

    def softmax(x):
        e = torch.exp(x - x.amax(dim=-1, keepdim=True))
        return e / e.sum(dim=-1, keepdim=True)

    def layernorm(x):
        d = x - x.mean(dim=-1, keepdim=True)
        return d * torch.rsqrt((d * d).mean(dim=-1, keepdim=True) + LN_EPS)

    def add1(x):
        return x + 1

    def matmul(a, b):
        return a @ b

    def spectrum(x):
        return torch.fft.rfft(x).abs() ** 2

    def transpose(x):
        # contiguous: an elementwise op writes its input's layout, here x.T's (no transpose)
        return (x.T + 1).contiguous()

    def depthwise(x, w):
        # NHWC data read as channels-last NCHW (no copy), the HWIO filter as OIHW.
        y = F.conv2d(x.permute(0, 3, 1, 2), w.permute(2, 3, 0, 1), padding=1, groups=x.shape[-1])
        return y.permute(0, 2, 3, 1)

    def rotary(pos, inv_freq):
        angle = pos[:, None] * inv_freq[None, :]
        return torch.cat([torch.cos(angle), torch.sin(angle)], dim=-1)

    eager = {"gelu": lambda x: F.gelu(x, approximate="tanh"),
             "softmax": lambda x: torch.softmax(x, dim=-1),
             "layernorm": lambda x: F.layer_norm(x, (x.shape[-1],), eps=LN_EPS),
             "dispatch": add1, "matmul": matmul, "spectrum": spectrum, "transpose": transpose,
             "depthwise": depthwise, "rotary": rotary}
    written = {"gelu": gelu, "softmax": softmax, "layernorm": layernorm, "dispatch": add1, "matmul": matmul,
               "spectrum": spectrum, "transpose": transpose, "depthwise": depthwise, "rotary": rotary}
    return eager, written


# ---- inputs ----------------------------------------------------------------------------------
def inputs(name: str, size: tuple[int, ...], seed: int = 0) -> list[np.ndarray]:
    """The float32 inputs of workload ``name`` at ``size``."""
    rng = np.random.default_rng(seed)
    if name == "gelu":
        return [(3 * rng.standard_normal(size)).astype(np.float32)]
    if name in ("softmax", "spectrum", "transpose"):
        return [rng.standard_normal(size).astype(np.float32)]
    if name == "layernorm":
        return [(2 * rng.standard_normal(size) + 1).astype(np.float32)]
    if name == "dispatch":
        return [np.arange(size[0], dtype=np.float32)]
    if name == "depthwise":
        return [rng.standard_normal(size).astype(np.float32),
                rng.standard_normal((3, 3, size[-1], 1)).astype(np.float32) / 3]
    if name == "rotary":   # positions and a RoPE's inverse frequencies, 10000**(-2i/d)
        positions, half = size
        return [np.arange(positions, dtype=np.float32),
                (10000.0 ** -(np.arange(half) / half)).astype(np.float32)]
    if name == "matmul":
        m, k, n = size
        return [rng.uniform(-1, 1, (m, k)).astype(np.float32), rng.uniform(-1, 1, (k, n)).astype(np.float32)]
    raise ValueError(f"no inputs for {name!r}")


def reference(name: str, args: list[np.ndarray]) -> np.ndarray:
    """The float64 NumPy result, as float32."""
    return NP[name](*[a.astype(np.float64) for a in args]).astype(np.float32)
