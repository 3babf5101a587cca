"""The child of ``python -m bench.compare``: times flowjit's workloads from ONE source tree.

    python bench/compare_child.py TREE

It is run by path (never imported from a tree): it puts ``TREE`` first on ``sys.path``, so
``import flowjit`` loads that tree's flowjit, and checks that it did. Everything here uses
flowjit's public API only (``fj.function``, ``fj.fori_loop``, ``fj.scan``, ``fj.grad``,
``fj.nn``, ``fj.optim``) and NumPy, so the same script times an older commit (one that still
had the numba backend and ``flowjit.codegen_llvm``) and a newer one alike. Each function runs
on the default backend (``FLOWJIT_BACKEND`` is removed from the environment by the parent).

Protocol: one JSON request per line on stdin, one JSON reply per line on stdout (anything
flowjit or a library prints goes to stderr):

- ``{"cmd": "setup", "quick": bool, "only": [names] | null, "target_s": float}``: imports
  flowjit, builds every workload in ``WORKLOADS`` order, times each first call (trace,
  compile, run: the disk cache the parent gives is empty), checks it against a float64 NumPy
  reference, warms up, and picks how many calls one sample holds. Replies ``{"import_s",
  "flowjit", "first": {name: s}, "inner": {name: n}, "labels": {name: label}, "errors":
  {name: text}}``.
- ``{"cmd": "time", "name": str, "samples": int, "gap_s": float}``: sleeps ``gap_s`` (thread
  pools of whatever ran before go idle), one untimed call, then ``samples`` samples of
  ``inner`` calls each. Replies ``{"samples": [seconds per call, ...]}`` or ``{"error"}``.
- ``{"cmd": "quit"}``.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback

# Run by path, so sys.path[0] is this file's folder (bench/): drop it (its modules must not
# shadow anything), and put the tree under test first.
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != HERE]
TREE = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else None
if TREE:
    sys.path.insert(0, TREE)

import numpy as np  # noqa: E402  (after the path is set)

GELU_C, GELU_K, LN_EPS, LR = 0.7978845608, 0.044715, 1e-5, 0.01


def _reply(out, obj) -> None:
    out.write(json.dumps(obj) + "\n")
    out.flush()


# ---- the workloads: name -> (label, build(fj, quick) -> (thunk, reference, tolerance)) ---------
def gelu(fj, quick, fastmath=False):
    n = 1 << 16 if quick else 1 << 24
    x = (3 * np.random.default_rng(0).standard_normal(n)).astype(np.float32)
    g = fj.function(lambda x: 0.5 * x * (1 + fj.tanh(GELU_C * (x + GELU_K * x**3))),
                    **({"fastmath": True} if fastmath else {}))
    x64 = x.astype(np.float64)
    ref = 0.5 * x64 * (1 + np.tanh(GELU_C * (x64 + GELU_K * x64**3)))
    return (lambda: g(x)), ref, 1e-4, f"gelu f32[{n}]" + (", fastmath=True" if fastmath else "")


def softmax(fj, quick):
    shape = (64, 256) if quick else (4096, 1024)
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)

    def f(x):
        e = fj.exp(x - x.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)
    g = fj.function(f)
    x64 = x.astype(np.float64)
    e = np.exp(x64 - x64.max(axis=-1, keepdims=True))
    return (lambda: g(x)), e / e.sum(axis=-1, keepdims=True), 1e-4, f"softmax f32[{shape[0]},{shape[1]}]"


def layernorm(fj, quick):
    shape = (64, 256) if quick else (4096, 1024)
    x = (2 * np.random.default_rng(0).standard_normal(shape) + 1).astype(np.float32)

    def f(x):
        d = x - x.mean(axis=-1, keepdims=True)
        return d * fj.rsqrt((d * d).mean(axis=-1, keepdims=True) + LN_EPS)
    g = fj.function(f)
    d = x.astype(np.float64) - x.astype(np.float64).mean(axis=-1, keepdims=True)
    ref = d / np.sqrt((d * d).mean(axis=-1, keepdims=True) + LN_EPS)
    return (lambda: g(x)), ref, 1e-4, f"layernorm f32[{shape[0]},{shape[1]}]"


def triad(fj, quick):
    n = 1 << 20 if quick else 1 << 25
    rng = np.random.default_rng(1)
    b, c = (rng.standard_normal(n).astype(np.float32) for _ in range(2))
    g = fj.function(lambda b, c, s: b + s * c)
    return (lambda: g(b, c, 3.0)), b.astype(np.float64) + 3.0 * c.astype(np.float64), 1e-6, f"triad f32[{n}]"


def reduction(fj, quick):
    n = 1 << 16 if quick else 1 << 24
    x = np.random.default_rng(2).standard_normal(n).astype(np.float32)
    g = fj.function(lambda x: (x * x).sum())
    return (lambda: g(x)), np.asarray((x.astype(np.float64) ** 2).sum()), 1e-4, f"sum(x*x) f32[{n}]"


def dispatch(fj, quick):
    x = np.arange(8, dtype=np.float32)
    g = fj.function(lambda x: x + 1)
    return (lambda: g(x)), x.astype(np.float64) + 1, 0.0, "dispatch x+1 f32[8]"


def matmul(fj, quick):
    n = 128 if quick else 512
    rng = np.random.default_rng(0)
    a, b = (rng.uniform(-1, 1, (n, n)).astype(np.float32) for _ in range(2))
    g = fj.function(lambda a, b: a @ b)
    return (lambda: g(a, b)), a.astype(np.float64) @ b.astype(np.float64), 1e-4, f"matmul {n}^3"


def fori_loop(fj, quick):
    steps = 1_000 if quick else 100_000
    g = fj.function(lambda v: fj.fori_loop(0, steps, lambda i, v: v * 0.5 + 1.0, v))
    x = np.float64(3.0)
    v = 3.0
    for _ in range(steps):
        v = v * 0.5 + 1.0
    return (lambda: g(x)), np.asarray(v), 1e-12, f"fori_loop {steps:,} trivial iterations, f64"


def scan(fj, quick):
    n = 1_000 if quick else 10_000
    xs = np.random.default_rng(3).standard_normal((n, 16)).astype(np.float32)
    g = fj.function(lambda c, xs: fj.scan(lambda c, x: (c * 0.9 + x, c.sum()), c, xs))
    c0 = np.zeros(16, np.float32)
    c, ys = np.zeros(16), []
    for x in xs.astype(np.float64):
        c, y = c * 0.9 + x, c.sum()
        ys.append(y)
    ref = np.concatenate([c, np.asarray(ys)])

    def call():
        carry, ys = g(c0, xs)
        return np.concatenate([np.asarray(carry), np.asarray(ys)])
    return call, ref, 1e-4, f"scan {n:,} steps, carry f32[16]"


def _mlp_problem(quick):
    batch, dims = (64, (784, 64, 64, 10)) if quick else (256, (784, 256, 256, 10))
    rng = np.random.default_rng(3)
    params = []
    for a, b in zip(dims[:-1], dims[1:]):
        limit = np.sqrt(6.0 / (a + b))
        params.append(rng.uniform(-limit, limit, (a, b)).astype(np.float32))
        params.append(rng.uniform(-0.1, 0.1, (b,)).astype(np.float32))
    x = rng.random((batch, dims[0]), dtype=np.float32)
    y = rng.integers(0, dims[-1], batch).astype(np.int32)
    p = [a.astype(np.float64) for a in params]
    h = x.astype(np.float64)
    for i in range(len(p) // 2):
        h = h @ p[2 * i] + p[2 * i + 1]
        if i < len(p) // 2 - 1:
            h = np.maximum(h, 0)
    z = h - h.max(axis=1, keepdims=True)
    loss = np.mean(np.log(np.exp(z).sum(axis=1)) - z[np.arange(batch), y])
    return params, x, y, np.asarray(loss), f"{'-'.join(map(str, dims))} b{batch}"


def mlp_step(fj, quick):
    """The bench's mlp_step: fj.nn.Dense layers (Variables), fj.optim.SGD, one fj.function
    around opt.minimize. Each call trains one more step; the first call's loss is checked."""
    params, x, y, loss, shape = _mlp_problem(quick)
    dims = [params[0].shape[0]] + [w.shape[1] for w in params[0::2]]
    n = len(dims) - 1
    model = fj.nn.Sequential([fj.nn.Dense(a, b, fj.nn.relu if i < n - 1 else None, key=i, name=f"mlp{i}")
                              for i, (a, b) in enumerate(zip(dims[:-1], dims[1:]))], name="mlp")
    for v, p in zip(model.variables, params):
        v.assign(p)
    opt = fj.optim.SGD(LR)
    g = fj.function(lambda x, y: opt.minimize(lambda: fj.nn.softmax_cross_entropy(model(x), y), model.variables))
    return (lambda: g(x, y)), loss, 1e-4, f"mlp_step {shape} f32, SGD step (fj.nn, fj.optim)"


def mlp_grad(fj, quick):
    """The same MLP written as a pure function: matmul + relu, fj.grad of the loss over the
    parameters, the SGD update; returns the loss (of the fixed parameters: each call the same)."""
    params, x, y, loss, shape = _mlp_problem(quick)

    def loss_fn(ps, x, y):
        h = x
        for i in range(len(ps) // 2):
            h = h @ ps[2 * i] + ps[2 * i + 1]
            if i < len(ps) // 2 - 1:
                h = fj.nn.relu(h)
        return fj.nn.softmax_cross_entropy(h, y)

    def step(ps, x, y):
        grads = fj.grad(loss_fn)(ps, x, y)
        return loss_fn(ps, x, y), [p - LR * d for p, d in zip(ps, grads)]
    g = fj.function(step)
    return (lambda: g(params, x, y)[0]), loss, 1e-4, f"mlp {shape} f32, fj.grad + update (pure)"


WORKLOADS = {"gelu": gelu, "gelu_fastmath": lambda fj, quick: gelu(fj, quick, fastmath=True), "softmax": softmax,
             "layernorm": layernorm, "triad": triad, "reduction": reduction, "dispatch": dispatch,
             "matmul": matmul, "mlp_step": mlp_step, "mlp_grad": mlp_grad, "fori_loop": fori_loop, "scan": scan}


def _check(out, ref: np.ndarray, tol: float) -> str | None:
    got = np.asarray(out, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    if got.shape != ref.shape:
        return f"WRONG shape {got.shape}, expected {ref.shape}"
    err = float(np.max(np.abs(got - ref))) / max(float(np.max(np.abs(ref))), 1e-30) if ref.size else 0.0
    return None if err <= tol else f"WRONG: max error {err:.2e} of max |ref| (tolerance {tol:.0e})"


def _error(e: BaseException) -> str:
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    return f"{type(e).__name__}: {lines[0]}" if lines else type(e).__name__


def main() -> int:
    out = os.fdopen(os.dup(1), "w")       # the replies; stdout itself goes to stderr
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    thunks: dict = {}
    inner: dict = {}
    for line in sys.stdin:
        req = json.loads(line)
        if req["cmd"] == "quit":
            break
        if req["cmd"] == "setup":
            t0 = time.perf_counter()
            import flowjit as fj
            import_s = time.perf_counter() - t0
            where = os.path.dirname(os.path.abspath(fj.__file__))
            if TREE and not where.startswith(TREE + os.sep):
                _reply(out, {"fatal": f"imported flowjit from {where}, not from the tree {TREE}"})
                return 1
            reply = {"import_s": import_s, "flowjit": where, "first": {}, "inner": {}, "labels": {}, "errors": {}}
            target = float(req.get("target_s", 0.02))
            for name, build in WORKLOADS.items():
                if req.get("only") and name not in req["only"]:
                    continue
                try:
                    thunk, ref, tol, label = build(fj, bool(req.get("quick")))
                    reply["labels"][name] = label
                    t0 = time.perf_counter()
                    res = thunk()
                    np.asarray(res)
                    reply["first"][name] = time.perf_counter() - t0
                    wrong = _check(res, ref, tol)
                    if wrong:
                        raise ValueError(wrong)
                    t0 = time.perf_counter()
                    n = 0
                    while n < 3 or (n < 50 and time.perf_counter() - t0 < 0.2):     # warm-up
                        thunk()
                        n += 1
                    one = (time.perf_counter() - t0) / n
                    # the full code's steady state, no upgrade's thread beside the timed calls
                    jit = sys.modules.get("flowjit.codegen_cpu.jit")
                    if jit is not None:
                        jit.wait_for_upgrades(120)
                    inner[name] = max(1, min(100_000, round(target / max(one, 1e-9))))
                    thunks[name] = thunk
                    reply["inner"][name] = inner[name]
                except Exception as e:
                    reply["errors"][name] = _error(e)
                    print(traceback.format_exc(), file=sys.stderr)
            _reply(out, reply)
        elif req["cmd"] == "time":
            name = req["name"]
            thunk, n = thunks[name], inner[name]
            time.sleep(float(req.get("gap_s", 0.0)))
            try:
                thunk()
                samples = []
                for _ in range(int(req["samples"])):
                    t0 = time.perf_counter()
                    for _ in range(n):
                        thunk()
                    samples.append((time.perf_counter() - t0) / n)
                _reply(out, {"samples": samples})
            except Exception as e:
                print(traceback.format_exc(), file=sys.stderr)
                _reply(out, {"error": _error(e)})
        else:
            _reply(out, {"error": f"unknown command {req['cmd']!r}"})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
