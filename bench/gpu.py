"""flowjit's CUDA backend on a GPU against CuPy, PyTorch and JAX on the same GPU.

    python -m bench.gpu [--repeat 20] [--quick] [--peers fj,cupy,torch,jax] [--only gelu,...] [--out FILE]

Each peer runs in a process of its own (so each first call is a cold one, and no library's
allocator holds memory another one needs) on the same inputs (a fixed seed), and the
parent prints one table: the median time of a call with the arrays already on the device
(synchronised after each call), each workload's limit (the device-to-device copy of the
same bytes, measured in the same run, for the memory-bound ones; cuBLAS's float32 GEMM
through CuPy for the matmuls), the first call of a fresh process (tracing and kernel
compilation included), and a checksum of each result against flowjit's. The flowjit rows
run the program the runtime runs for a ``cuda:K`` partition (``CudaBackend.compile_program``)
on device arrays; the "host" rows call the user's function with NumPy arrays in and out
(``fj.function(f, device="cuda:0")``), the copies over PCIe included, as the peers' "host"
rows do. Float32 throughout; JAX's matmuls at "highest" precision (no TF32), as the others.
Needs a GPU, cupy and numba-cuda (the ``cuda`` extra); the peers are optional. Under numba's
CUDA simulator (``NUMBA_ENABLE_CUDASIM=1 FLOWJIT_CUDA_SIMULATOR_DEVICES=1``) ``--quick
--peers fj`` runs the flowjit column, to check the script without a GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from bench.workloads.common import short_error

PEERS = ("fj", "cupy", "torch", "jax")
GELU_C, GELU_K = 0.7978845608028654, 0.044715


def shapes(quick: bool) -> dict[str, list[tuple[int, ...]]]:
    """Each workload's argument shapes (``quick``: small ones, to check the script)."""
    if quick:
        return {"gelu": [(256,)], "softmax": [(4, 64)], "layer_norm": [(4, 64)],
                "matmul": [(16, 16), (16, 16)], "mlp_grad": [(8, 16), (16, 32), (32, 8), (8, 8)],
                "gelu_host": [(256,)], "softmax_host": [(4, 64)]}
    return {"gelu": [(1 << 26,)], "softmax": [(16384, 4096)], "layer_norm": [(16384, 4096)],
            "matmul": [(4096, 4096), (4096, 4096)],
            "mlp_grad": [(8192, 1024), (1024, 4096), (4096, 1024), (8192, 1024)],
            "gelu_host": [(1 << 24,)], "softmax_host": [(4096, 1024)]}


def inputs(name: str, quick: bool) -> list[np.ndarray]:
    """The workload's arguments, the same in every peer's process."""
    rng = np.random.default_rng(0)
    scale = 1.0 if name != "mlp_grad" else 0.05
    return [(rng.standard_normal(s) * scale).astype(np.float32) for s in shapes(quick)[name]]


def cost(name: str, quick: bool) -> tuple[str, float]:
    """What bounds the workload: ("bytes", bytes read and written) or ("flops", count)."""
    s = shapes(quick)[name]
    if name == "matmul":
        return "flops", 2.0 * s[0][0] * s[0][1] * s[1][1]
    if name == "mlp_grad":
        (b, d), (_, h), (_, o) = s[0], s[1], s[2]
        return "flops", 2.0 * b * d * h * 3 + 2.0 * b * h * o * 3
    return "bytes", 2.0 * 4 * int(np.prod(s[0]))


# ---- the workloads, written once per library ------------------------------------------------------

def _fj_functions() -> dict[str, Callable]:
    import flowjit as fj

    def loss(w1, w2, x, y):
        return fj.mean((fj.nn.gelu(x @ w1) @ w2 - y) ** 2)
    grad = fj.grad(loss, argnums=(0, 1))
    return {"gelu": fj.nn.gelu, "softmax": fj.nn.softmax, "layer_norm": fj.nn.layer_norm,
            "matmul": lambda a, b: a @ b, "mlp_grad": lambda x, w1, w2, y: grad(w1, w2, x, y)}


def _cupy_functions() -> dict[str, Callable]:
    import cupy as cp

    def softmax(x):
        e = cp.exp(x - x.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)

    def layer_norm(x):
        m = x.mean(axis=-1, keepdims=True)
        v = ((x - m) ** 2).mean(axis=-1, keepdims=True)
        return (x - m) / cp.sqrt(v + 1e-5)
    return {"gelu": lambda x: 0.5 * x * (1.0 + cp.tanh(GELU_C * (x + GELU_K * x * x * x))),
            "softmax": softmax, "layer_norm": layer_norm, "matmul": lambda a, b: a @ b}


def _torch_functions() -> dict[str, Callable]:
    import torch
    import torch.nn.functional as F

    def mlp_grad(x, w1, w2, y):
        w1, w2 = w1.detach().requires_grad_(), w2.detach().requires_grad_()
        loss = ((F.gelu(x @ w1, approximate="tanh") @ w2 - y) ** 2).mean()
        return torch.autograd.grad(loss, (w1, w2))
    return {"gelu": lambda x: F.gelu(x, approximate="tanh"), "softmax": lambda x: torch.softmax(x, -1),
            "layer_norm": lambda x: F.layer_norm(x, x.shape[-1:], eps=1e-5), "matmul": lambda a, b: a @ b,
            "mlp_grad": mlp_grad}


def _jax_functions() -> dict[str, Callable]:
    import jax
    import jax.numpy as jnp

    def layer_norm(x):
        m = x.mean(axis=-1, keepdims=True)
        return (x - m) * jax.lax.rsqrt(((x - m) ** 2).mean(axis=-1, keepdims=True) + 1e-5)

    def loss(w1, w2, x, y):
        return jnp.mean((jax.nn.gelu(x @ w1, approximate=True) @ w2 - y) ** 2)
    grad = jax.grad(loss, argnums=(0, 1))
    fns = {"gelu": lambda x: jax.nn.gelu(x, approximate=True), "softmax": lambda x: jax.nn.softmax(x, -1),
           "layer_norm": layer_norm, "matmul": lambda a, b: a @ b, "mlp_grad": lambda x, w1, w2, y: grad(w1, w2, x, y)}
    return {k: jax.jit(f) for k, f in fns.items()}


# ---- one peer in its own process -------------------------------------------------------------------

def _flat(out: Any) -> list[Any]:
    return list(out) if isinstance(out, (list, tuple)) else [out]


def _time(call: Callable[[], Any], sync: Callable[[Any], None], repeat: int) -> tuple[float, float, Any]:
    """(first call's seconds, median ms of ``repeat`` calls after two warm ones, the result)."""
    t = time.perf_counter()
    out = call()
    sync(out)
    first = time.perf_counter() - t
    for _ in range(2):
        sync(call())
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        sync(call())
        times.append(time.perf_counter() - t)
    return first, 1e3 * statistics.median(times), out


def _checksum(out: Any, to_host: Callable[[Any], np.ndarray]) -> float:
    return float(sum(np.abs(to_host(o).astype(np.float64)).sum() for o in _flat(out)))


def child(peer: str, quick: bool, repeat: int, only: list[str]) -> dict[str, dict[str, float]]:
    """Every workload ``peer`` has, timed in this process: name -> first_s, median_ms, checksum."""
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    rows: dict[str, dict[str, float]] = {}
    if peer == "copy":
        import cupy as cp
        for name in [n for n in ("gelu", "softmax", "layer_norm") if n in only]:
            x = cp.asarray(inputs(name, quick)[0])
            y = cp.empty_like(x)
            _, ms, _ = _time(lambda: cp.copyto(y, x), lambda _: cp.cuda.Device().synchronize(), repeat)
            rows[name] = {"median_ms": ms}
        return rows
    if peer == "cupy":
        import cupy as cp
        put, host, sync = cp.asarray, cp.asnumpy, (lambda _: cp.cuda.Device().synchronize())
    if peer == "fj":
        from numba import cuda

        import flowjit as fj
        from flowjit.codegen_cuda import to_device, to_host
        from flowjit.codegen_cuda.backend import BACKEND
        from flowjit.lowering.backend import lower_program
        fns = _fj_functions()
        put, host, sync = to_device, to_host, (lambda _: cuda.synchronize())

        def device_call(name: str, args: list[np.ndarray]) -> Callable[[], Any]:
            # device="cuda:0": the arguments live there, so the program has no copies in it.
            fused = fj.function(fns[name], device="cuda:0").ir(*args, stage="fused")
            copies = [op.name for op in fused.body.ops if op.primitive.role in ("send", "recv")]
            if copies:
                raise RuntimeError(f"the device program still copies ({', '.join(copies)}): not a device row")
            program = BACKEND.compile_program(lower_program(fused, single_ops=True), "cuda:0")
            dargs = [put(a) for a in args]
            return lambda: program.run(*dargs)
        host_fns = {"gelu_host": fj.function(fns["gelu"], device="cuda:0"),
                    "softmax_host": fj.function(fns["softmax"], device="cuda:0")}
    elif peer == "cupy":
        fns = _cupy_functions()
    elif peer == "torch":
        import torch
        fns = _torch_functions()
        put, host = (lambda a: torch.from_numpy(a).cuda()), (lambda t: t.detach().cpu().numpy())
        sync = lambda _: torch.cuda.synchronize()  # noqa: E731
    elif peer == "jax":
        import jax
        jax.config.update("jax_default_matmul_precision", "highest")
        fns = _jax_functions()
        gpu = jax.devices("gpu")[0]
        put, host, sync = (lambda a: jax.device_put(a, gpu)), np.asarray, jax.block_until_ready
    for name in only:
        base = name.removesuffix("_host")
        if base not in fns:
            continue
        args = inputs(name, quick)
        try:
            if name.endswith("_host"):
                if peer == "fj":
                    call = lambda f=host_fns[name], a=args: f(*a)  # noqa: E731
                else:
                    call = lambda f=fns[base], a=args: _flat_host(f(*[put(x) for x in a]), host)  # noqa: E731
                first, ms, out = _time(call, lambda _: None, repeat)
                rows[name] = {"first_s": first, "median_ms": ms, "checksum": _checksum(out, np.asarray)}
                continue
            t = time.perf_counter()
            if peer == "fj":
                call = device_call(name, args)
                build = time.perf_counter() - t
            else:
                dargs = [put(a) for a in args]
                call, build = (lambda f=fns[name], a=dargs: f(*a)), 0.0
            first, ms, out = _time(call, sync, repeat)
            rows[name] = {"first_s": build + first, "median_ms": ms, "checksum": _checksum(out, host)}
        except Exception as e:  # one workload a library cannot run is a row of its own, not the end
            rows[name] = {"error": short_error(e)[:200]}
    return rows


def _flat_host(out: Any, host: Callable[[Any], np.ndarray]) -> list[np.ndarray]:
    return [host(o) for o in _flat(out)]


# ---- the parent: run each peer, print the table ----------------------------------------------------

def run_peer(peer: str, quick: bool, repeat: int, only: list[str]) -> dict[str, dict[str, float]]:
    """``peer``'s rows from a child process (``_failed``: why it gave none)."""
    r = subprocess.run([sys.executable, "-m", "bench.gpu", "--child", peer, "--repeat", str(repeat),
                        "--only", ",".join(only)] + (["--quick"] if quick else []),
                       capture_output=True, text=True, timeout=900)
    lines = [line for line in r.stdout.splitlines() if line.startswith("{")]
    if r.returncode != 0 or not lines:
        tail = (r.stderr or r.stdout).strip().splitlines()[-3:]
        return {"_failed": {"error": " | ".join(tail)[:300]}}
    return json.loads(lines[-1])


def table(results: dict[str, dict[str, dict[str, float]]], quick: bool, only: list[str]) -> str:
    """The markdown table of ``results`` (peer -> workload -> row)."""
    peers = [p for p in PEERS if p in results]
    head = ["workload", *(f"{p} ms" for p in peers), "fj / best peer", "fj of its limit",
            *(f"{p} first s" for p in peers), "checksums vs fj"]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name in only:
        fj_row = results.get("fj", {}).get(name, {})
        cells = [name]
        for p in peers:
            row = results[p].get(name, {})
            cells.append(f"{row['median_ms']:.3f}" if "median_ms" in row else row.get("error", "-")[:60])
        others = [results[p][name]["median_ms"] for p in peers if p != "fj" and "median_ms" in results[p].get(name, {})]
        cells.append(f"{fj_row['median_ms'] / min(others):.2f}x" if others and "median_ms" in fj_row else "-")
        kind, amount = cost(name, quick)
        limit = "-"
        if "median_ms" in fj_row and not name.endswith("_host"):
            if kind == "bytes" and "median_ms" in results.get("copy", {}).get(name, {}):
                copy_ms = results["copy"][name]["median_ms"]
                limit = f"{copy_ms / fj_row['median_ms']:.0%} of copy ({amount / copy_ms / 1e6:.0f} GB/s)"
            elif kind == "flops":
                tf = amount / fj_row["median_ms"] / 1e9
                ref = results.get("cupy", {}).get(name, {}).get("median_ms") or results.get("torch", {}).get(
                    name, {}).get("median_ms")
                limit = f"{tf:.1f} TFLOP/s" + (f" ({ref / fj_row['median_ms']:.0%} of cuBLAS)" if ref else "")
        cells.append(limit)
        for p in peers:
            row = results[p].get(name, {})
            cells.append(f"{row['first_s']:.2f}" if "first_s" in row else "-")
        want = fj_row.get("checksum")
        checks = [f"{p} {results[p][name]['checksum'] / want - 1:+.1e}" for p in peers
                  if p != "fj" and want and "checksum" in results[p].get(name, {})]
        cells.append(", ".join(checks) or "-")
        out.append("| " + " | ".join(cells) + " |")
    failed = [f"{p}: {results[p]['_failed']['error']}" for p in results if "_failed" in results[p]]
    return "\n".join(out + ([""] + [f"- failed: {f}" for f in failed] if failed else []))


def main(argv: list[str] | None = None) -> int:
    """Run the peers (or, with ``--child``, one of them) and print the table."""
    ap = argparse.ArgumentParser(prog="python -m bench.gpu", description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--quick", action="store_true", help="small shapes: check the script, not the GPU")
    ap.add_argument("--peers", default=",".join(PEERS))
    ap.add_argument("--only", default=",".join(shapes(False)), help="the workloads, comma-separated")
    ap.add_argument("--out", help="also write the table to this file")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    only = a.only.split(",")
    unknown = sorted(set(only) - set(shapes(False)))
    if unknown:
        ap.error(f"no workload {', '.join(unknown)}; the workloads are {', '.join(shapes(False))}")
    if a.child:
        print(json.dumps(child(a.child, a.quick, a.repeat, only)), flush=True)
        return 0
    results: dict[str, dict[str, dict[str, float]]] = {}
    for peer in ["copy", *a.peers.split(",")]:
        results[peer] = run_peer(peer, a.quick, a.repeat, only)
        print(f"{peer}: {json.dumps(results[peer])}", file=sys.stderr, flush=True)
    text = "### bench.gpu\n\n" + table(results, a.quick, only)
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
