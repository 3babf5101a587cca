"""A loop of 100,000 trivial iterations (``v = v * 0.5 + 1``, float64): what each system
pays per iteration when the loop lives inside the compiled program.

- flowjit: ``fj.fori_loop`` in an ``@fj.function``: the loop runs inside the native program
  (fj), or the interpreter steps it (interp).
- NumPy: the same loop in Python over a NumPy float64 scalar.
- JAX: ``jax.lax.fori_loop`` under ``jax.jit`` (an XLA while loop).
- TensorFlow: ``tf.while_loop`` over a counter in ``tf.function(jit_compile=True)`` (the
  same XLA while loop; TensorFlow has no fori_loop).
- torch: the Python loop on a 0-d tensor (eager); torch.compile unrolls or breaks the
  graph on a 100,000-step Python loop, so it is left out.
"""

from __future__ import annotations

import numpy as np

from bench.workloads.common import BACKENDS, Case, Ctx, Row, run_case

STEPS = 100_000


def _reference(steps: int) -> np.ndarray:
    v = 3.0
    for _ in range(steps):
        v = v * 0.5 + 1.0
    return np.asarray(v)


def run(ctx: Ctx) -> list[Row]:
    steps = 1_000 if ctx.quick else STEPS
    x = np.float64(3.0)

    def fj_build(backend: str):
        def build():
            import flowjit as fj
            g = fj.function(lambda v: fj.fori_loop(0, steps, lambda i, v: v * 0.5 + 1.0, v), backend=backend)
            return lambda: g(x)
        return build

    def np_build():
        def loop():
            v = x
            for _ in range(steps):
                v = v * 0.5 + 1.0
            return v
        return loop

    def jax_build():
        jax = ctx.module("jax")
        jax.config.update("jax_enable_x64", True)
        g = jax.jit(lambda v: jax.lax.fori_loop(0, steps, lambda i, v: v * 0.5 + 1.0, v))
        dev = jax.device_put(np.float64(3.0))
        return lambda: g(dev).block_until_ready()

    def tf_build():
        from bench.workloads.defs import tf_jit
        tf = ctx.module("tensorflow")

        def loop(v):
            return tf.while_loop(lambda i, v: i < steps, lambda i, v: (i + 1, v * 0.5 + 1.0), (tf.constant(0), v))[1]
        g = tf_jit(tf, loop)
        v0 = tf.constant(3.0, tf.float64)
        return lambda: g(v0)

    def torch_build():
        torch = ctx.module("torch")
        t = torch.tensor(3.0, dtype=torch.float64)

        def loop():
            v = t
            for _ in range(steps):
                v = v * 0.5 + 1.0
            return v
        return loop

    builders = {**{key: fj_build(backend) for key, backend in BACKENDS.items()}, "numpy": np_build,
                "jax": jax_build, "tf": tf_build, "torch": torch_build}
    case = Case("loop", f"fori_loop {steps:,} trivial iterations, f64", builders, reference=_reference(steps),
                tol=1e-12, unit="ms", note="per call: the whole loop; torch.compile left out (a Python loop)")
    return [run_case(case, ctx, target_s=0.05)]
