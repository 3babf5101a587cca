"""Serving the digits MLP (64-128-128-10, softmax) over HTTP on loopback: ``flowjit serve``
with adaptive batching, the same server with ``--no-batching`` (each with JSON bodies and with
one-row application/x-npy bodies), and a plain Starlette
endpoint calling the JIT (``fj.function``) per request; each under ``flowjit loadtest``'s
closed loop at several concurrency levels (one instance per request, JSON). The servers run
in their own processes; the load generator (coroutines on one event loop) in this one.

The comparison at the same objective: for a p99 objective, the highest throughput a server
reaches at a level whose p99 meets it. Ray Serve alone: a deployment of one replica loading the same
library with ``fj.load_compiled`` and batching with ``@serve.batch`` (64, 2 ms).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

from bench.workloads.common import Cell, Ctx, Row

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Clients kept outstanding, perf_analyzer's sweep: on to 256, since a batching server's p99 is
# still a few milliseconds at 64 clients (the unbatched one's throughput is flat from 8 on).
LEVELS = (1, 8, 32, 64, 128, 256)
OBJECTIVES_MS = (10, 25, 50)

# A plain Starlette endpoint calling the JIT per request (what a user writes without flowjit serve).
PLAIN = r'''
import json, sys
import numpy as np
import uvicorn
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route
sys.path.insert(0, sys.argv[2])
from mnist_mlp import build_model
import flowjit as fj
model = build_model(0)
predict = fj.function(lambda x: fj.nn.softmax(model(x), axis=-1))
predict(np.zeros((1, 64), np.float32))

async def handle(request):
    x = np.asarray((await request.json())["instances"], np.float32)
    return JSONResponse({"predictions": predict(x).tolist()}, headers={"X-Model-Version": "jit"})

app = Starlette(routes=[Route("/v1/models/digits:predict", handle, methods=["POST"])])
import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1); s.bind(("127.0.0.1", int(sys.argv[1])))
uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off")).run(sockets=[s])
'''


# Ray Serve alone around the same compiled library: its own @serve.batch, one replica.
RAY_ALONE = r'''
import os, sys, time
os.environ["OPENBLAS_NUM_THREADS"] = "1"   # as flowjit serve holds it (--blas-threads 1); Ray's workers inherit it
import numpy as np
import ray
from ray import serve
from starlette.requests import Request
from starlette.responses import JSONResponse
import flowjit as fj

@serve.deployment(ray_actor_options={"num_cpus": 0})
class Digits:
    def __init__(self, path):
        self.fn = fj.load_compiled(path)

    @serve.batch(max_batch_size=64, batch_wait_timeout_s=0.002)
    async def run(self, rows):
        out = self.fn(np.asarray(rows, np.float32))
        return [r.tolist() for r in out]

    async def __call__(self, request: Request):
        rows = (await request.json())["instances"]
        return JSONResponse({"predictions": [await self.run(row) for row in rows]},
                            headers={"X-Model-Version": "ray"})

ray.init(include_dashboard=False, configure_logging=False, _node_ip_address="127.0.0.1")
serve.start(http_options={"host": "127.0.0.1", "port": int(sys.argv[1])})
serve.run(Digits.bind(sys.argv[2]), route_prefix="/")
print("ready", flush=True)
try:
    while True:
        time.sleep(3600)
finally:
    serve.shutdown()
    ray.shutdown()
'''


def _port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait(url: str, proc: subprocess.Popen, path: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited: {proc.stderr.read().decode()[-2000:]}")
        try:
            with urllib.request.urlopen(url + path, timeout=2):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"the server at {url} did not answer in 60 s")


def _build(root: str) -> str:
    sys.path.insert(0, os.path.join(ROOT, "examples"))
    from mnist_mlp import build_model

    import flowjit as fj
    from flowjit.serving import push
    model = build_model(0)
    fj.export(lambda x: fj.nn.softmax(model(x), axis=-1), fj.ShapeDtype(("B", 64), "f32"),
              path=os.path.join(root, "artifact"), name="digits")
    push(os.path.join(root, "artifact"), os.path.join(root, "models", "digits"), force=True, log=lambda s: None)
    return os.path.join(root, "models")


def _npy_body() -> bytes:
    import io

    import numpy as np
    buf = io.BytesIO()
    np.save(buf, np.full((1, 64), 0.5, np.float32), allow_pickle=False)
    return buf.getvalue()


def _measure(ctx: Ctx, label: str, cmd: list[str], ready: str, seconds: float, npy: bool = False) -> Row:
    from flowjit.serving.loadtest import loadtest
    port = _port()
    env = dict(os.environ, PYTHONPATH=ROOT)
    proc = subprocess.Popen(cmd + [str(port)], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    row = Row("serving", label)
    try:
        _wait(url, proc, ready)
        body = _npy_body() if npy else b'{"instances": [[' + b", ".join([b"0.5"] * 64) + b"]]}"
        results = loadtest(url, "digits", LEVELS, seconds, body=body,
                           content_type="application/x-npy" if npy else "application/json")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    for r in results:
        row.cells[f"c{r['concurrency']}"] = Cell(seconds=r["p99"] / 1e3, text=(
            f"{r['throughput']:.0f}/s, p50 {r['p50']:.1f} p99 {r['p99']:.1f} ms"
            + (f", {r['failed']} failed" if r["failed"] else "")))
    for objective in OBJECTIVES_MS:
        best = max((r["throughput"] for r in results if r["p99"] <= objective and not r["failed"]), default=0.0)
        row.cells[f"slo{objective}"] = Cell(seconds=best, text=f"{best:.0f}/s")
    ctx.log(f"bench: serving {label} done")
    return row


def run(ctx: Ctx) -> list[Row]:
    """The three servers, each at every level."""
    try:
        import starlette  # noqa: F401
    except ImportError:
        return [Row("serving", "serving", note="skipped: the serving extra is not installed")]
    seconds = 1.0 if ctx.quick else 5.0
    root = tempfile.mkdtemp(prefix="bench-serving-")
    try:
        models = _build(root)
        serve = [sys.executable, "-m", "flowjit.cli", "serve", models]
        rows = [
            _measure(ctx, "flowjit serve, batching (max 64, 2 ms)", serve + ["--port"], "/readyz", seconds),
            _measure(ctx, "flowjit serve --no-batching", serve + ["--no-batching", "--port"], "/readyz", seconds),
            _measure(ctx, "flowjit serve, batching, x-npy bodies", serve + ["--port"], "/readyz", seconds, npy=True),
            _measure(ctx, "flowjit serve --no-batching, x-npy bodies", serve + ["--no-batching", "--port"], "/readyz",
                     seconds, npy=True),
        ]
        plain = os.path.join(root, "plain.py")
        with open(plain, "w") as f:
            f.write(PLAIN)
        rows.append(_measure_plain(ctx, [sys.executable, plain], seconds))
        try:
            import ray.serve  # noqa: F401
            script = os.path.join(root, "ray_alone.py")
            with open(script, "w") as f:
                f.write(RAY_ALONE)
            rows.append(_measure_plain(ctx, [sys.executable, script], seconds, os.path.join(root, "artifact"),
                                       "Ray Serve alone (@serve.batch 64, 2 ms) around the same library"))
        except ImportError:
            rows.append(Row("serving", "Ray Serve alone around the same library", note="skipped: no ray[serve]"))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    for batched, alone in ((rows[0], rows[1]), (rows[2], rows[3])):
        for objective in OBJECTIVES_MS:
            b, a = batched.cells[f"slo{objective}"].seconds, alone.cells[f"slo{objective}"].seconds
            batched.cells[f"slo{objective}"].text += f" ({b / a:.2f}x)" if a else ""
    return rows


def _measure_plain(ctx: Ctx, cmd: list[str], seconds: float, second: str | None = None,
                   label: str = "plain Starlette endpoint, fj.function per request") -> Row:
    # A peer server takes its port as its first argument and ``second`` (default examples/) as its second.
    from flowjit.serving.loadtest import loadtest
    port = _port()
    proc = subprocess.Popen(cmd + [str(port), second or os.path.join(ROOT, "examples")], cwd=ROOT,
                            env=dict(os.environ, PYTHONPATH=ROOT), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    row = Row("serving", label)
    try:
        deadline = time.monotonic() + 120
        body = b'{"instances": [[' + b", ".join([b"0.5"] * 64) + b"]]}"
        while True:
            try:
                req = urllib.request.Request(url + "/v1/models/digits:predict", data=body,
                                             headers={"Content-Type": "application/json"})
                with urllib.request.urlopen(req, timeout=2):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the plain endpoint did not start: {proc.stderr.read().decode()[-2000:]}")
                time.sleep(0.1)
        results = loadtest(url, "digits", LEVELS, seconds, body=body)
    finally:
        proc.send_signal(signal.SIGINT)       # Ray shuts its runtime down on an interrupt
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    for r in results:
        row.cells[f"c{r['concurrency']}"] = Cell(seconds=r["p99"] / 1e3, text=(
            f"{r['throughput']:.0f}/s, p50 {r['p50']:.1f} p99 {r['p99']:.1f} ms"
            + (f", {r['failed']} failed" if r["failed"] else "")))
    for objective in OBJECTIVES_MS:
        best = max((r["throughput"] for r in results if r["p99"] <= objective and not r["failed"]), default=0.0)
        row.cells[f"slo{objective}"] = Cell(seconds=best, text=f"{best:.0f}/s")
    return row


def render(ctx: Ctx, rows: list[Row]) -> list[str]:
    """The serving tables (called by ``bench/run.py``)."""
    from bench.run import table
    lines = ["### Serving the digits MLP over HTTP (closed loop, one instance per request, JSON unless x-npy)", ""]
    lines += table(["server"] + [f"{c} clients" for c in LEVELS],
                   [[r.label] + [r.cells[f"c{c}"].text if f"c{c}" in r.cells else "—" for c in LEVELS]
                    for r in rows if not r.note])
    lines += ["", "Highest throughput at a level whose p99 meets the objective (batching over no batching):", ""]
    lines += table(["server"] + [f"p99 <= {o} ms" for o in OBJECTIVES_MS],
                   [[r.label] + [r.cells[f"slo{o}"].text if f"slo{o}" in r.cells else "—" for o in OBJECTIVES_MS]
                    for r in rows if not r.note])
    lines.append("")
    return lines
