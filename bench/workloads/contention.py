"""Shared CPUs: flowjit's programs timed idle and beside busy processes, for one or two trees.

    python -m bench.workloads.contention                    # this working tree
    python -m bench.workloads.contention --base HEAD~1      # a revision against the working tree
    python -m bench.workloads.contention --base HEAD~1 --jax --rounds 6 --record bench/results/<name>.md
    python -m bench.workloads.contention --base /tmp/before --head /tmp/after   # folders holding a flowjit/

Not a ``python -m bench`` workload: it measures the native pool and the BLAS under load (issue
33, item 3), the figures behind docs/performance.md's "Shared CPUs". The workloads:

- ``lstm``: an LSTM over ``fj.scan``, 32 steps, batch 64, 128 inputs, hidden 128 (two
  64x128x512 products a step: small, one BLAS thread), inference (the states stacked);
- ``lstm_grad``: its gradient in the weights (a reverse scan);
- ``mlp_grad``: a 784-256-256-10 MLP, batch 256, ``fj.grad`` and an SGD update (products of
  16.7-51M multiply-adds, above the plan's ``BLAS_PARALLEL_MIN_WORK``);
- ``matmul``: 1024x1024 @ 1024x1024 float32 (one large product);
- ``gelu``: gelu (tanh form) on 2**22 float32 (one fused kernel split over the native pool);
- ``adam``: one Adam step (``zoo.adam``) over a 50,000x64 float32 table (the zoo embedding model's update:
  one loop of 3.2M elements, 4 arrays read and 3 written, memory-bound, 3.9 ms on one idle
  thread of the 2-vCPU Xeon): a split loop far longer than a time slice, where the loops
  above are short beside one;
- ``embedding_train``: the zoo's embedding model's training step (``zoo.train_step``: a gather,
  its scatter-add gradient, the Adam step above among small loops), its parameters and Adam
  state carried from call to call (JAX donates them): the long loop after short ones.

Each tree (``--base``/``--head``: a revision, checked out into a temporary git worktree, a
folder holding a ``flowjit/``, or ``.``: a copy of the working tree's ``flowjit/`` made at the
start; ``--jax``: ``jax.jit`` of the same functions) runs in its own child process
(``bench.compare.Child`` speaking to this file run by path), with ``--threads`` threads for
flowjit and the BLAS. Rounds alternate the loads (idle, then ``--busy`` processes running
``while True: pass`` started by this script, in its session, as a data loader would be; the
order flips every round), and within a load each workload asks every child in turn (the
order flipping too) for ``--seconds`` of back-to-back calls, each call timed alone, after a
``--gap`` in which the threads of the child before go idle. A cell is the median call over
all rounds; busy/idle divides a tree's loaded median by its idle one. Other processes on a
shared machine load both phases and every tree alike: read the ratios within one run.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.abspath(__file__)
CHILD_MODE = __name__ == "__main__" and __package__ in (None, "")
if CHILD_MODE:  # run by path as a child: drop bench/workloads from the path, the tree goes first
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != os.path.dirname(HERE)]
    if len(sys.argv) > 1 and sys.argv[1] != "jax":
        sys.path.insert(0, os.path.abspath(sys.argv[1]))

import numpy as np  # noqa: E402

T, B, IN, H = 32, 64, 128, 128
MLP = (784, 256, 256, 10)
MLP_BATCH = 256
GELU_N = 1 << 22
GELU_C, GELU_K = 0.7978845608, 0.044715
LR = 0.01
ADAM_ROWS, ADAM_COLS = 50_000, 64   # the zoo embedding model's table
NAMES = ("lstm", "lstm_grad", "mlp_grad", "matmul", "gelu", "adam", "embedding_train")


# ---- the child: one tree's workloads --------------------------------------------------------
class Lib:
    """The library a child times: flowjit (``fj``) or JAX, the few names they spell differently."""

    def __init__(self, which: str):
        if which == "jax":
            import jax
            import jax.numpy as jnp
            self.np, self.jit, self.grad, self.scan = jnp, jax.jit, jax.grad, jax.lax.scan
            self.ready = jax.block_until_ready
            self.where = f"jax {jax.__version__}"
        else:
            import flowjit as fj
            self.np, self.jit, self.grad, self.scan = fj, fj.function, fj.grad, fj.scan
            self.ready = lambda x: x
            self.where = os.path.dirname(fj.__file__)


def _lstm(L: Lib):
    m = L.np

    def sigmoid(x):
        return 1 / (1 + m.exp(-x))

    def forward(wx, wh, b, xs):
        def step(carry, x):
            h, c = carry
            g = x @ wx + h @ wh + b
            i, f, o, u = sigmoid(g[:, :H]), sigmoid(g[:, H:2 * H]), sigmoid(g[:, 2 * H:3 * H]), m.tanh(g[:, 3 * H:])
            c = f * c + i * u
            h = o * m.tanh(c)
            return (h, c), h
        zero = m.zeros((B, H), m.float32)
        return L.scan(step, (zero, zero), xs)[1]

    return forward


def _lstm_reference(wx, wh, b, xs):
    h = c = np.zeros((B, H))
    out = []
    for x in xs.astype(np.float64):
        g = x @ wx + h @ wh + b
        sig = 1 / (1 + np.exp(-g[:, :3 * H]))
        c = sig[:, H:2 * H] * c + sig[:, :H] * np.tanh(g[:, 3 * H:])
        h = sig[:, 2 * H:] * np.tanh(c)
        out.append(h)
    return np.stack(out)


def build(L: Lib, name: str):
    """``(thunk, reference or None)``: a call of workload ``name`` and what it must return."""
    rng = np.random.default_rng(0)

    def f32(*shape, scale=1.0):
        return (scale * rng.standard_normal(shape)).astype(np.float32)

    if name in ("lstm", "lstm_grad"):
        wx, wh, b, xs = f32(IN, 4 * H, scale=0.1), f32(H, 4 * H, scale=0.1), f32(4 * H, scale=0.1), f32(T, B, IN)
        forward = _lstm(L)
        if name == "lstm":
            g = L.jit(forward)
            return (lambda: L.ready(g(wx, wh, b, xs))), _lstm_reference(wx, wh, b, xs)
        g = L.jit(L.grad(lambda wx, wh, b, xs: L.np.sum(forward(wx, wh, b, xs) ** 2), argnums=(0, 1, 2)))
        return (lambda: L.ready(g(wx, wh, b, xs))), None
    if name == "mlp_grad":
        params = [(f32(a, c, scale=a ** -0.5), np.zeros(c, np.float32)) for a, c in zip(MLP, MLP[1:])]
        x, y = f32(MLP_BATCH, MLP[0]), np.eye(MLP[-1], dtype=np.float32)[rng.integers(0, MLP[-1], MLP_BATCH)]
        m = L.np

        def loss(ps, x, y):
            h = x
            for k, (w, b) in enumerate(ps):
                h = h @ w + b
                if k < len(ps) - 1:
                    h = m.maximum(h, 0.0)
            z = h - m.max(h, axis=1, keepdims=True)
            return -m.mean(m.sum(y * (z - m.log(m.sum(m.exp(z), axis=1, keepdims=True))), axis=1))

        def step(ps, x, y):
            grads = L.grad(loss)(ps, x, y)
            return [(w - LR * gw, b - LR * gb) for (w, b), (gw, gb) in zip(ps, grads)]
        g = L.jit(step)
        return (lambda: L.ready(g(params, x, y))), None
    if name == "matmul":
        a, b = f32(1024, 1024), f32(1024, 1024)
        g = L.jit(lambda a, b: a @ b)
        return (lambda: L.ready(g(a, b))), a.astype(np.float64) @ b
    if name == "gelu":
        x = f32(GELU_N, scale=3.0)
        g = L.jit(lambda x: 0.5 * x * (1 + L.np.tanh(GELU_C * (x + GELU_K * x * x * x))))
        x64 = x.astype(np.float64)
        return (lambda: L.ready(g(x))), 0.5 * x64 * (1 + np.tanh(GELU_C * (x64 + GELU_K * x64 ** 3)))
    if name == "adam":
        zoo = _zoo()
        w, g = f32(ADAM_ROWS, ADAM_COLS), f32(ADAM_ROWS, ADAM_COLS)
        state = {"t": np.float32(2.0), "m": {"w": f32(ADAM_ROWS, ADAM_COLS, scale=0.1)},
                 "v": {"w": np.abs(f32(ADAM_ROWS, ADAM_COLS, scale=0.01))}}
        step = L.jit(lambda p, d, s: zoo.adam(L.np, p, d, s))
        wide = {"t": np.float64(state["t"]), "m": {"w": state["m"]["w"].astype(np.float64)},
                "v": {"w": state["v"]["w"].astype(np.float64)}}
        want = zoo.adam(np, {"w": w.astype(np.float64)}, {"w": g.astype(np.float64)}, wide)[0]["w"]
        return (lambda: L.ready(step({"w": w}, {"w": g}, state)[0]["w"])), want
    if name == "embedding_train":
        zoo = _zoo()
        params, (ids, y) = zoo.init("embedding"), zoo.batch("embedding")
        carried = {"p": params, "s": zoo.adam_state(params)}
        # (bench.workloads.models.setup builds the same step, but a child here cannot import bench)
        jax = L.where.startswith("jax")
        train = zoo.train_step(zoo.lib("jax" if jax else "flowjit"), "embedding")
        step = L.jit(train, donate_argnums=(0, 1)) if jax else L.jit(train)

        def call():
            carried["p"], carried["s"], loss = step(carried["p"], carried["s"], ids, y)
            return L.ready(loss)
        return call, None
    raise ValueError(f"unknown workload {name!r}")


def _zoo():
    """bench/workloads/zoo.py loaded by its path (a child's path holds the tree, not bench):
    the zoo's Adam step, for the ``adam`` workload."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("bench_zoo", os.path.join(os.path.dirname(HERE), "zoo.py"))
    module = sys.modules["bench_zoo"] = importlib.util.module_from_spec(spec)  # its dataclasses look it up
    spec.loader.exec_module(module)
    return module


def _resting(which: str):
    """The tree's pool's seconds left in a rest, where it has one: ``resting`` (a pool of
    2026-12-01 resting after a straggler ran every split loop on its caller alone) or
    ``coarse_rest`` (since c9e74b0: loops of a chunk a thread alone after a worker's
    absence); else a stand-in saying 0."""
    if which != "jax":
        from flowjit.codegen_cpu import native_pool
        pool = native_pool()
        for name in ("resting", "coarse_rest"):
            if hasattr(pool, name):
                return getattr(pool, name)
    return lambda: 0.0


def child_main(which: str) -> None:
    """Answers the parent's JSON lines: ``{"cmd": "setup", "names": [...]}`` (builds, checks
    and warms each workload), ``{"cmd": "time", "name", "seconds", "most", "gap"}`` (sleeps
    ``gap`` seconds, one untimed call, then calls until ``seconds`` have passed, at least 3
    and at most ``most``; replies ``{"samples": [seconds per call]}``) and ``{"cmd": "quit"}``."""
    out = sys.stdout
    sys.stdout = sys.stderr  # whatever a library prints stays off the protocol
    thunks = {}
    resting = _resting(which)
    for line in sys.stdin:
        req = json.loads(line)
        if req["cmd"] == "quit":
            break
        if req["cmd"] == "setup":
            L = Lib(which)
            for name in req["names"]:
                thunk, want = build(L, name)
                got = thunk()
                if want is not None:
                    np.testing.assert_allclose(np.asarray(got), want, rtol=2e-3, atol=2e-3, err_msg=name)
                thunks[name] = thunk
            reply = {"where": L.where}
        else:
            thunk = thunks[req["name"]]
            time.sleep(req["gap"])  # the thread pools of whatever ran before go idle
            thunk()
            times: list[float] = []
            alone = 0
            start = time.perf_counter()
            while len(times) < req["most"] and (len(times) < 3 or time.perf_counter() - start < req["seconds"]):
                alone += resting() > 0
                t = time.perf_counter()
                thunk()
                times.append(time.perf_counter() - t)
            reply = {"samples": times, "alone": alone}
        out.write(json.dumps(reply) + "\n")
        out.flush()


# ---- the parent ------------------------------------------------------------------------------
class _Given:
    """Stands in for a ``bench.compare.Tree``: a folder holding a ``flowjit/`` as it is, or
    (``path`` "jax") the JAX child's 'tree'."""

    def __init__(self, path: str, role: str):
        self.path, self.role = path, role
        self.name = "jax.jit" if path == "jax" else f"the folder {path}"
        self.commit = "jax" if path == "jax" else os.path.basename(path.rstrip("/"))


def _tree(rev: str, scratch: str, role: str):
    from bench.compare import Tree
    if os.path.isdir(os.path.join(rev, "flowjit")) and rev != ".":
        return _Given(os.path.abspath(rev), role)
    return Tree(rev, scratch, role)


def _busy(n: int) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def _stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        p.kill()
        p.wait(timeout=30)


def _cpu_seconds(pids: list[int]) -> tuple[float, float]:
    """(CPU seconds the whole machine has spent busy, those of the processes ``pids``), from
    /proc (0s where it cannot be read)."""
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        machine = (v[0] + v[1] + v[2] + v[5] + v[6]) / tick
    except (OSError, ValueError, IndexError):
        return 0.0, 0.0
    mine = 0.0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            mine += (int(fields[11]) + int(fields[12])) / tick
        except (OSError, ValueError, IndexError):
            pass
    return machine, mine


def measure(args: argparse.Namespace, log=lambda msg: print(msg, file=sys.stderr, flush=True)) -> dict:
    from bench.compare import Child, Tree
    scratch = tempfile.mkdtemp(prefix="bench_contention_")
    trees, children, procs = [], {}, []
    try:
        if args.base:
            trees.append(_tree(args.base, scratch, "base"))
        trees.append(_tree(args.head, scratch, "head"))
        if args.jax:
            trees.append(_Given("jax", "jax"))
        for tree in trees:
            log(f"contention: set up {tree.role} ({tree.name})")
            child = children[tree.role] = Child(tree, scratch, args.threads, tree.role, script=HERE)
            child.ask(cmd="setup", names=args.names)
        samples = {t.role: {load: {n: [] for n in args.names} for load in ("idle", "busy")} for t in trees}
        alone = {t.role: {load: 0 for load in ("idle", "busy")} for t in trees}
        # CPU seconds of processes other than this run's (its children, its busy processes) per load
        others = {"idle": [0.0, 0.0], "busy": [0.0, 0.0]}
        for r in range(args.rounds):
            for load in (("idle", "busy") if r % 2 == 0 else ("busy", "idle")):
                log(f"contention: round {r + 1}/{args.rounds}, {load}")
                procs = _busy(args.busy) if load == "busy" else []
                time.sleep(0.5)
                ours = [os.getpid(), *(c.proc.pid for c in children.values()), *(p.pid for p in procs)]
                wall, (machine, mine) = time.perf_counter(), _cpu_seconds(ours)
                try:
                    for k, name in enumerate(args.names):
                        for tree in (trees if (r + k) % 2 == 0 else trees[::-1]):
                            rep = children[tree.role].ask(cmd="time", name=name, seconds=args.seconds, most=400,
                                                         gap=args.gap)
                            samples[tree.role][load][name] += rep["samples"]
                            alone[tree.role][load] += rep.get("alone", 0)
                finally:
                    machine2, mine2 = _cpu_seconds(ours)
                    others[load][0] += max(machine2 - machine - (mine2 - mine), 0.0)
                    others[load][1] += time.perf_counter() - wall
                    _stop(procs)
                    procs = []
        return {"trees": [(t.role, t.name, t.commit) for t in trees], "samples": samples, "alone": alone,
                "others": {load: cpu / (wall * (os.cpu_count() or 1)) if wall else 0.0
                           for load, (cpu, wall) in others.items()}}
    finally:
        _stop(procs)
        for child in children.values():
            child.close()
        for tree in trees:
            if isinstance(tree, Tree):
                tree.remove()
        shutil.rmtree(scratch, ignore_errors=True)
        if args.base:
            subprocess.run(["git", "worktree", "prune"], capture_output=True, timeout=120)


def report(args: argparse.Namespace, result: dict, started: datetime.datetime, elapsed: float, load: str) -> str:
    from bench.compare import fmt
    from bench.run import cpu_model, table
    trees, samples = result["trees"], result["samples"]

    def med(role, phase, name):
        xs = samples[role][phase][name]
        return statistics.median(xs) if xs else None

    heads = ["workload"]
    for role, _, commit in trees:
        heads += [f"{role}{'' if commit == role else ' ' + commit} idle", f"{role} busy", f"{role} busy/idle"]
    flowjit = [role for role, _, _ in trees if role in ("base", "head")]
    if len(flowjit) == 2:
        heads += ["head/base idle", "head/base busy"]
    rows = []
    for name in args.names:
        row = [name]
        for role, _, _ in trees:
            idle, busy = med(role, "idle", name), med(role, "busy", name)
            row += [fmt(idle), fmt(busy), f"{busy / idle:.2f}" if idle and busy else "—"]
        if len(flowjit) == 2:
            for phase in ("idle", "busy"):
                b, h = med("base", phase, name), med("head", phase, name)
                row.append(f"{h / b:.2f}" if b and h else "—")
        rows.append(row)
    counts = ", ".join(f"{role} {min(len(v) for p in samples[role].values() for v in p.values())}"
                       for role, _, _ in trees)
    cmd = "python -m bench.workloads.contention " + " ".join(sys.argv[1:] if args.argv is None else args.argv)
    lines = [f"# Shared CPUs: idle and beside {args.busy} busy processes, {started:%Y-%m-%d %H:%M}", "",
             f"`{cmd.strip()}` (took {elapsed:.0f} s)", ""]
    lines += [f"- {role}: {name}" for role, name, _ in trees]
    lines += [f"- CPU: {cpu_model()}; {os.cpu_count()} logical cores; {platform.platform()}",
              f"- Threads: {args.threads} (FLOWJIT_NUM_THREADS, OMP/MKL/OpenBLAS)",
              f"- {args.rounds} rounds, loads alternated; {args.seconds} s of calls per workload, tree and "
              f"load in each round (fewest calls in a cell: {counts})",
              f"- Load from other processes (not this run's children nor its busy processes): "
              f"{100 * result['others']['idle']:.0f}% of the machine in the idle phases, "
              f"{100 * result['others']['busy']:.0f}% in the busy ones ({load} over the whole run); load "
              f"average at the end {' '.join(f'{x:.2f}' for x in os.getloadavg())}", ""]
    lines += table(heads, rows)
    lines += ["", "Cells: the median time of one call over every round; busy/idle: the loaded median over the "
              "idle one; head/base: the working tree's median over the base's, in the same load.", ""]
    for role, _, _ in trees:
        calls = {phase: sum(len(v) for v in samples[role][phase].values()) for phase in ("idle", "busy")}
        if any(result["alone"][role].values()):
            lines.append(f"- {role}: calls begun while its pool rested (after a straggler, split loops on the "
                         f"caller alone; since c9e74b0, after a worker's absence, loops of a chunk a thread): "
                         f"idle {result['alone'][role]['idle']} of {calls['idle']}, busy "
                         f"{result['alone'][role]['busy']} of {calls['busy']}")
    lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.workloads.contention", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("--base", default="", help="also time this revision (a temporary git worktree) or folder "
                                              "holding a flowjit/")
    p.add_argument("--head", default=".", help="the revision or folder under test (default '.': a copy of the "
                                               "working tree's flowjit/)")
    p.add_argument("--jax", action="store_true", help="also time jax.jit of the same functions")
    p.add_argument("--rounds", type=int, default=4, help="rounds, each idle and busy (default 4)")
    p.add_argument("--seconds", type=float, default=1.0, help="seconds of calls per cell and round (default 1)")
    p.add_argument("--gap", type=float, default=0.3,
                   help="seconds a child sleeps before its calls, for the other's threads to go idle (default 0.3: "
                        "OpenBLAS's threads poll for about 0.1 s after a call)")
    p.add_argument("--busy", type=int, default=2, help="busy processes in the loaded phase (default 2)")
    p.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                   else os.cpu_count() or 1, help="threads for flowjit and the BLAS (default: this process's CPUs)")
    p.add_argument("--only", default="", help=f"comma-separated workloads (default all: {', '.join(NAMES)})")
    p.add_argument("--record", default="", help="also write the report to this file (markdown)")
    args = p.parse_args(argv)
    args.argv = argv
    args.names = [n for n in args.only.split(",") if n] or list(NAMES)
    unknown = set(args.names) - set(NAMES)
    if unknown:
        p.error(f"unknown workloads {sorted(unknown)}; choose from {', '.join(NAMES)}")
    from bench.run import Load
    started, t0, load = datetime.datetime.now(), time.perf_counter(), Load()
    result = measure(args)
    text = report(args, result, started, time.perf_counter() - t0, load.others())
    print(text)
    if args.record:
        with open(args.record, "w") as f:
            f.write(text.rstrip() + "\n")
    return 0


if __name__ == "__main__":
    if CHILD_MODE:
        child_main(sys.argv[1] if len(sys.argv) > 1 else "")
    else:
        raise SystemExit(main())
