"""The ``aot`` workload's functions, and its child process: run as a script, it goes from
process start to the first result of one function, as a user's program would.

    python bench/workloads/aot_child.py IMPL NAME DIR

IMPL: ``aot`` (``fj.load_compiled(DIR/build)``: no tracing, no compiling), ``llvm`` (the JIT,
its default backend; its disk cache is whatever ``FLOWJIT_CACHE_DIR`` holds), ``jax``
(``jax.jit``, with the persistent compilation cache ``BENCH_JAX_CACHE_DIR``) or ``numpy``
(imports NumPy and prints: the floor of every Python column). NAME: ``mlp`` (an MLP's
predict: ReLU layers, then the argmax of the logits as int32), ``gelu`` or ``add1``. The
inputs are ``DIR/data/*.npy`` (``x``, then ``param0``, ``param1``, ... for the MLP: its
kernels and biases); the result goes to ``DIR/out-IMPL.npy``. It prints one JSON line of
``time.monotonic()`` readings (CLOCK_MONOTONIC, the clock the parent reads before it
starts the process): ``imported`` (after the imports), ``first`` (the first result in
hand, as a NumPy array). Only NumPy is imported at the top: each column imports what its
user would, and nothing of the harness.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

GELU_C = 0.7978845608
GELU_K = 0.044715


def mlp_dims(params: list[np.ndarray]) -> list[int]:
    """The layer widths of an MLP given as ``[W1, b1, W2, b2, ...]``."""
    return [params[0].shape[0]] + [w.shape[1] for w in params[0::2]]


def flowjit_function(name: str, params: list[np.ndarray]) -> Callable[..., Any]:
    """The plain Python function that flowjit traces (``fj.function`` or ``fj.export``); for
    ``mlp`` a predict that reads ``fj.nn.Dense`` layers' Variables, set to ``params``."""
    import flowjit as fj
    if name == "gelu":
        def gelu(x):
            return 0.5 * x * (1 + fj.tanh(GELU_C * (x + GELU_K * x**3)))
        return gelu
    if name == "add1":
        def add1(x):
            return x + 1
        return add1
    if name != "mlp":
        raise ValueError(f"unknown function {name!r}")
    dims = mlp_dims(params)
    n = len(dims) - 1
    model = fj.nn.Sequential([fj.nn.Dense(a, b, fj.nn.relu if i < n - 1 else None, key=i, name=f"layer{i}")
                              for i, (a, b) in enumerate(zip(dims[:-1], dims[1:]))], name="mlp")
    for v, p in zip(model.variables, params):     # [kernel0, bias0, kernel1, ...]
        v.assign(p)

    def predict(x):
        return fj.argmax(model(x), axis=1).astype(fj.int32)
    return predict


def jax_function(jax: Any, name: str, params: list[np.ndarray]) -> Callable[[Any], Any]:
    """``jax.jit`` of the same function; call it with ``x`` alone (the MLP's parameters are
    already on the device)."""
    jnp = jax.numpy
    if name == "gelu":
        return jax.jit(lambda x: 0.5 * x * (1 + jnp.tanh(GELU_C * (x + GELU_K * x**3))))
    if name == "add1":
        return jax.jit(lambda x: x + 1)
    if name != "mlp":
        raise ValueError(f"unknown function {name!r}")
    n = len(params) // 2

    def predict(x, ps):
        h = x
        for i in range(n):
            h = h @ ps[2 * i] + ps[2 * i + 1]
            if i < n - 1:
                h = jax.nn.relu(h)
        return jnp.argmax(h, axis=1).astype(jnp.int32)
    g = jax.jit(predict)
    ps = [jax.device_put(p) for p in params]
    return lambda x: g(x, ps)


def load_inputs(directory: str) -> tuple[np.ndarray, list[np.ndarray]]:
    """``x`` and the parameters (none but for the MLP) the parent wrote."""
    data = os.path.join(directory, "data")
    params = []
    while os.path.exists(os.path.join(data, f"param{len(params)}.npy")):
        params.append(np.load(os.path.join(data, f"param{len(params)}.npy")))
    return np.load(os.path.join(data, "x.npy")), params


def main(argv: list[str]) -> int:
    impl, name, directory = argv
    if impl == "numpy":
        imported = time.monotonic()
        print(json.dumps({"imported": imported, "first": imported}))
        return 0
    if impl == "aot":
        import flowjit as fj
        imported = time.monotonic()
        f = fj.load_compiled(os.path.join(directory, "build"))
        x, _ = load_inputs(directory)
        out = f(x)
    elif impl == "llvm":
        import flowjit as fj
        imported = time.monotonic()
        x, params = load_inputs(directory)
        g = fj.function(flowjit_function(name, params), backend="llvm")
        out = g(x)
    elif impl == "jax":
        from bench.workloads.first_call import _jax
        jax = _jax()
        imported = time.monotonic()
        x, params = load_inputs(directory)
        out = np.asarray(jax_function(jax, name, params)(x))
    else:
        raise ValueError(f"unknown implementation {impl!r}")
    first = time.monotonic()
    np.save(os.path.join(directory, f"out-{impl}.npy"), np.asarray(out))
    print(json.dumps({"imported": imported, "first": first}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
