"""Child process of the ``compile`` workload: import, build inputs, then time the first call.

``python -m bench.workloads.first_call IMPL WORKLOAD SIZE`` prints one JSON line:
``{"import_s", "first_s", "second_s", "note"}`` or ``{"error"}``. IMPL is one of ``fj``
(flowjit, compiled), ``interp`` (flowjit interpreter),
``jax`` (jax.jit), ``tf`` (tf.function(jit_compile=True)) or ``compile`` (torch.compile).
flowjit's note gives ``fj.cache_stats()`` and whether the process imported numba (a CPU
program imports none);
TensorFlow's, the entries of its persistent XLA cache. The caches it uses come from the
environment the parent sets up (``FLOWJIT_CACHE_DIR``, ``TORCHINDUCTOR_CACHE_DIR``,
``BENCH_JAX_CACHE_DIR``, ``TF_XLA_FLAGS``).
WORKLOAD ``mlp_step`` (SIZE: batch and layer widths) times the first training step of
``mlp_step.py``'s MLP instead of a function from ``defs``.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback


def _jax():
    """jax on the CPU, with the persistent compilation cache the parent chose (every entry kept)."""
    import jax
    jax.config.update("jax_platforms", "cpu")
    cache = os.environ.get("BENCH_JAX_CACHE_DIR")
    if cache:
        jax.config.update("jax_compilation_cache_dir", cache)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
    return jax


def _tf():
    from bench.workloads.common import import_tensorflow
    return import_tensorflow(int(os.environ.get("BENCH_THREADS", "2")))


def _tf_cache_entries() -> int:
    """Files in the persistent XLA cache named in ``TF_XLA_FLAGS`` (0 when none is)."""
    for flag in os.environ.get("TF_XLA_FLAGS", "").split():
        if flag.startswith("--tf_xla_persistent_cache_directory="):
            path = flag.split("=", 1)[1]
            return len(os.listdir(path)) if os.path.isdir(path) else 0
    return 0


def _torch():
    import torch
    torch.set_num_threads(int(os.environ.get("BENCH_THREADS", "2")))
    return torch


def main(argv: list[str]) -> int:
    impl, workload, size = argv[0], argv[1], tuple(int(s) for s in argv[2].split(","))
    note = ""
    try:
        t0 = time.perf_counter()
        from bench.workloads import defs
        from bench.workloads.common import BACKENDS
        if workload == "mlp_step":
            from bench.workloads import mlp_step
            if impl not in mlp_step.IMPLS:
                raise ValueError(f"unknown implementation {impl!r}")
            module = {"jax": _jax, "tf": _tf, "compile": _torch}.get(impl, lambda: None)()
            call = mlp_step.setup(impl, *mlp_step.problem(size), module=module)[0]
        elif impl in BACKENDS:
            import flowjit as fj
            args = defs.inputs(workload, size)
            g = fj.function(defs.FJ[workload], backend=BACKENDS[impl])

            def call():
                return g(*args)
        elif impl == "jax":
            jax = _jax()
            args = defs.inputs(workload, size)
            g = jax.jit(defs.jax_functions(jax)[workload])
            dev = [jax.device_put(a) for a in args]
            jax.block_until_ready(dev)

            def call():
                return g(*dev).block_until_ready()
        elif impl == "tf":
            tf = _tf()
            args = defs.inputs(workload, size)
            g = defs.tf_jit(tf, defs.tf_functions(tf)[workload])
            ts = [tf.constant(a) for a in args]

            def call():
                return g(*ts)
        elif impl == "compile":
            torch = _torch()
            args = defs.inputs(workload, size)
            g = torch.compile(defs.torch_functions(torch)[1][workload])
            ts = [torch.from_numpy(a) for a in args]

            def call():
                with torch.no_grad():
                    return g(*ts)
        else:
            raise ValueError(f"unknown implementation {impl!r}")
        import_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        call()
        first_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        call()
        second_s = time.perf_counter() - t0
        if impl == "fj":
            import flowjit as fj
            st = fj.cache_stats()
            note = (f"kernels compiled {st['compiled']}, loaded from disk {st['loaded']}, "
                    f"numba {'imported' if 'numba' in sys.modules else 'not imported'}")
        elif impl == "tf":
            note = f"persistent XLA cache entries on disk after the calls: {_tf_cache_entries()}"
        print(json.dumps({"import_s": import_s, "first_s": first_s, "second_s": second_s, "note": note}))
        return 0
    except Exception as e:
        lines = [ln for ln in str(e).strip().splitlines() if ln.strip()]
        print(json.dumps({"error": f"{type(e).__name__}: {lines[0] if lines else ''}".rstrip(": "),
                          "traceback": traceback.format_exc()}))
        return 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
