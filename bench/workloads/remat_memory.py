"""Rematerialization (``fj.remat``): the MEASURED peak memory of one deep-MLP training step with
and without it, and what it costs in steps/s.

The step: an MLP of ``depth`` layers ``h = gelu(h @ W + b)`` (tanh GELU), width ``width``,
batch ``batch``, float32, loss ``mean(h * h)`` of the last layer, one SGD update
(``fj.optim.SGD(0.01)`` on ``fj.Variable`` parameters, the step one ``fj.function`` around
``opt.minimize``). Rows: each layer plain; each layer ``fj.remat`` with nothing saved (the
default policy); each layer ``fj.remat(policy=dots_saveable)`` (the matmul results kept, the
elementwise work recomputed). A GELU layer keeps several activation-sized values for its
backward (the pre-activation, its cube and tanh, the output), so remat has something to save.

Every cell comes from a fresh child process (``python -m bench.workloads.remat_memory IMPL
MODE SIZE``), so no allocator or buffer pool state of one row reaches the next:

- flowjit, the native program: its intermediates live in one scratch block that
  ``aligned_alloc`` makes on the first call and keeps, which tracemalloc does not see. The
  child compiles the program without running it, writes ``5`` to ``/proc/self/clear_refs``
  (resets VmHWM to the current RSS), reads ``VmRSS``, runs the first step and reads
  ``VmHWM``: the step's peak is HWM − RSS. Beside it, the plan's own figure
  (``scratch_bytes`` of the native program).
- JAX (when importable): ``jax.jit`` of the same step as a pure function, with each layer
  in ``jax.checkpoint`` (same policies, ``jax.checkpoint_policies``) or not:
  ``memory_analysis().temp_size_in_bytes`` of the compiled step, and HWM − RSS of its first
  run after compiling.

Every child checks its first step's loss against the plain flowjit row's (same parameters
and batch): remat changes the memory, not the result. steps/s is over ``--repeat`` steps
after the measured one (at least 3).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import traceback
from typing import Any

import numpy as np

from bench.workloads.common import Cell, Ctx, Row, short_error

TITLE = "Rematerialization: measured peak memory of one deep-MLP training step (each row a new process)"
LR = 0.01
MODES = (("plain", "plain (activations kept)"), ("remat", "{remat} per layer, nothing saved"),
         ("dots", "{remat} per layer, dots_saveable"))
IMPLS = ("fj", "jax")
COLUMNS = (("measured", "measured peak of the step"), ("how", "measured by"), ("plan", "planner's estimate"),
           ("steps", "steps/s"), ("vs_plain", "measured / plain"))
TIMEOUT_S = 900


def sizes(ctx: Ctx) -> tuple[int, int, int]:
    """(depth, width, batch)."""
    return (8, 256, 128) if ctx.quick else (16, 512, 1024)


def problem(depth: int, width: int, batch: int, seed: int = 0) -> tuple[list[np.ndarray], np.ndarray]:
    """Parameters ``[W0, b0, W1, b1, ...]`` (scaled normal kernels, small biases) and the batch."""
    rng = np.random.default_rng(seed)
    params: list[np.ndarray] = []
    for _ in range(depth):
        params.append((rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32))
        params.append((0.1 * rng.standard_normal(width)).astype(np.float32))
    return params, rng.standard_normal((batch, width)).astype(np.float32)


# ---- the child ---------------------------------------------------------------------------------
def _status(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise OSError(f"no {field} in /proc/self/status")


def _reset_hwm() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _rss_peak(run: Any) -> tuple[Any, int | None]:
    """``run()``'s result and how far the resident set rose above its size at the start (None
    where the kernel does not let VmHWM be reset)."""
    ok = _reset_hwm()
    rss = _status("VmRSS")
    out = run()
    return out, (_status("VmHWM") - rss if ok else None)


def _fj_child(mode: str, params: list[np.ndarray], x: np.ndarray, repeat: int) -> dict:
    import flowjit as fj
    policy = fj.remat_policies.dots_saveable if mode == "dots" else None
    variables = [fj.Variable(p, name=f"p{i}") for i, p in enumerate(params)]
    opt = fj.optim.SGD(LR)

    def layer(h, W, b):
        return fj.nn.gelu(h @ W + b)
    block = layer if mode == "plain" else fj.remat(layer, policy=policy)

    def loss(x):
        h = x
        for W, b in zip(variables[0::2], variables[1::2]):
            h = block(h, W, b)
        return fj.mean(h * h)

    step = fj.function(lambda x: opt.minimize(lambda: loss(x), variables), backend="llvm")
    entry, _ = step._lookup((x,), {})        # traced, kernels compiled or loaded; nothing run
    ex = entry.executable
    out: dict[str, Any] = {}
    ex._compile_llvm()                        # the native program, built before the measured step
    if ex._program is None:
        raise RuntimeError(f"the step is not one native program: {ex.native_reason}")
    first, out["rss"] = _rss_peak(lambda: step(x))
    out["plan"] = ex._program.plan.scratch_bytes
    out["loss"] = float(first)
    out["steps_s"] = _rate(lambda: step(x), repeat)
    return out


def _jax_child(mode: str, params: list[np.ndarray], x: np.ndarray, repeat: int) -> dict:
    import jax
    jax.config.update("jax_platforms", "cpu")
    jnp = jax.numpy

    def layer(h, W, b):
        return jax.nn.gelu(h @ W + b, approximate=True)
    if mode != "plain":
        policy = jax.checkpoint_policies.dots_saveable if mode == "dots" else None
        layer = jax.checkpoint(layer, policy=policy)

    def loss(ps, x):
        h = x
        for W, b in zip(ps[0::2], ps[1::2]):
            h = layer(h, W, b)
        return jnp.mean(h * h)

    def step(ps, x):
        value, g = jax.value_and_grad(loss)(ps, x)
        return [p - LR * d for p, d in zip(ps, g)], value

    ps = [jax.device_put(p) for p in params]
    dx = jax.device_put(x)
    compiled = jax.jit(step, donate_argnums=0).lower(ps, dx).compile()
    analysis = compiled.memory_analysis()
    state = {"ps": ps}

    def run() -> Any:
        state["ps"], value = compiled(state["ps"], dx)
        return value.block_until_ready()
    first, rss = _rss_peak(run)
    return {"rss": rss, "plan": getattr(analysis, "temp_size_in_bytes", None), "loss": float(first),
            "steps_s": _rate(run, repeat), "jax": jax.__version__}


def _rate(step: Any, repeat: int) -> float:
    n = max(3, repeat)
    t0 = time.perf_counter()
    for _ in range(n):
        out = step()
    np.asarray(out)
    return n / (time.perf_counter() - t0)


def child_main(argv: list[str]) -> int:
    """``IMPL MODE DEPTH,WIDTH,BATCH [REPEAT]``: one row, printed as one JSON line."""
    impl, mode = argv[0], argv[1]
    depth, width, batch = (int(s) for s in argv[2].split(","))
    repeat = int(argv[3]) if len(argv) > 3 else 3
    try:
        params, x = problem(depth, width, batch)
        out = (_jax_child(mode, params, x, repeat) if impl == "jax"
               else _fj_child(mode, params, x, repeat))
        print(json.dumps(out))
        return 0
    except Exception as e:
        print(json.dumps({"error": short_error(e), "trace": traceback.format_exc()}))
        return 1


# ---- the parent --------------------------------------------------------------------------------
def child(impl: str, mode: str, size: tuple[int, int, int], repeat: int) -> dict:
    """Run one row in a new process and return its JSON (or ``{"error"}``)."""
    from bench.workloads.compile import child_env
    cmd = [sys.executable, "-m", "bench.workloads.remat_memory", impl, mode, ",".join(map(str, size)), str(repeat)]
    try:
        p = subprocess.run(cmd, env=child_env(), capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {TIMEOUT_S} s"}
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    if not lines:
        return {"error": f"the child printed no result (exit {p.returncode})", "trace": p.stderr[-3000:]}
    return json.loads(lines[-1])


def _mib(n: float | None) -> str:
    return "—" if n is None else f"{n / 2**20:.1f} MiB"


def _row(ctx: Ctx, impl: str, mode: str, label: str, got: dict, plain: dict | None, want_loss: float | None) -> Row:
    row = Row("remat_memory", label)
    if "error" in got:
        ctx.errors.append((label, impl, got.get("trace") or got["error"]))
        row.cells["measured"] = Cell(text=f"ERROR {got['error'][:100]}", error=got["error"])
        return row
    if want_loss is not None and not np.isclose(got["loss"], want_loss, rtol=1e-3):
        msg = f"WRONG loss {got['loss']:.6g}, the plain flowjit step gives {want_loss:.6g}"
        ctx.errors.append((label, impl, msg))
        row.cells["measured"] = Cell(text=msg, error=msg)
        return row
    measured, how = got["rss"], "RSS HWM − RSS (/proc/self/clear_refs)"
    plan = f"{_mib(got['plan'])} ({'native scratch_bytes' if impl == 'fj' else 'memory_analysis temp_size_in_bytes'})"
    row.cells["measured"] = Cell(text=_mib(measured))
    row.cells["how"] = Cell(text=how)
    row.cells["plan"] = Cell(text=plan)
    row.cells["steps"] = Cell(text=f"{got['steps_s']:.2f}")
    base = None if plain is None or "error" in plain else plain["rss"]
    if base and measured is not None:
        row.cells["vs_plain"] = Cell(text=f"{measured / base:.2f}x")
    return row


def run(ctx: Ctx) -> list[Row]:
    depth, width, batch = size = sizes(ctx)
    names = {"fj": "flowjit", "jax": "JAX jit"}
    impls = [i for i in IMPLS if i in ctx.columns]
    rows: list[Row] = []
    want_loss = None
    for impl in impls:
        if impl == "jax":
            try:
                ctx.module("jax")
            except Exception as e:
                rows.append(Row("remat_memory", f"JAX jit, {describe(size)}", note=f"skipped: {short_error(e)}"))
                continue
        plain = None
        for mode, what in MODES:
            label = f"{names[impl]}, {what.format(remat='jax.checkpoint' if impl == 'jax' else 'fj.remat')}"
            ctx.log(f"bench: remat_memory, {label}")
            got = child(impl, mode, size, ctx.repeat)
            if mode == "plain":
                plain = got
                if want_loss is None and "loss" in got:
                    want_loss = got["loss"]
            rows.append(_row(ctx, impl, mode, label, got, plain, want_loss))
    return rows


def describe(size: tuple[int, int, int]) -> str:
    depth, width, batch = size
    return f"MLP {depth}x gelu({width}x{width}), batch {batch}, f32"


def render(ctx: Ctx, rows: list[Row]) -> list[str]:
    """The workload's table (called by ``bench/run.py``)."""
    from bench.run import table
    size = sizes(ctx)
    depth, width, batch = size
    act = batch * width * 4
    lines = [f"### {TITLE}", ""]
    lines += table(["step"] + [h for _, h in COLUMNS],
                   [[r.label] + [r.cells[k].text if k in r.cells else "—" for k, _ in COLUMNS] for r in rows])
    weights = depth * (width + 1) * width * 4
    return lines + ["", f"{describe(size)}: one activation is {_mib(act)}, the parameters {_mib(weights)}; "
                        "one SGD step (forward, backward, update). Each row runs in a new process; the first step "
                        "after compiling is measured, then steps/s over the following steps. remat trades one more "
                        "forward per step for the activations.", ""]


if __name__ == "__main__":
    raise SystemExit(child_main(sys.argv[1:]))
