"""``flowjit loadtest``: a closed-loop load generator (perf_analyzer's method): at each
concurrency level that many clients each keep one request outstanding for the given
seconds; throughput and the latency percentiles of each level. The clients are coroutines
on one event loop, so a burst of answers does not wake a convoy of threads fighting for
the GIL (which measured the client, not the server)."""

from __future__ import annotations

import asyncio
import collections
import http.client
import io
import json
import socket
import time
import urllib.parse
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np


def _connection(url: str) -> http.client.HTTPConnection:
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port or 80, timeout=60)
    conn.connect()
    # Headers and body may leave in two segments: without NODELAY, Nagle's algorithm holds the
    # second until the server's delayed ACK (40 ms on Linux).
    conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return conn


NPY = "application/x-npy"


def example_body(url: str, model: str, rows: int = 1, seed: int = 0, content_type: str = "application/json") -> bytes:
    """A predict body of ``rows`` random instances built from the model's metadata: JSON
    instances, or with ``content_type`` application/x-npy one array of ``rows`` rows (a
    model of one input)."""
    with urllib_get(f"{url}/v1/models/{model}/metadata") as meta:
        inputs = meta["metadata"]["signature_def"]["inputs"]
    rng = np.random.default_rng(seed)
    if content_type == NPY:
        if len(inputs) != 1:
            raise ValueError(f"{model} takes {len(inputs)} inputs: an application/x-npy body holds one")
        (t,) = inputs.values()
        dtype = np.dtype(t["dtype"])
        shape = [rows, *t["shape"][1:]]
        value = rng.random(shape) if dtype.kind == "f" else rng.integers(0, 2, shape)
        buf = io.BytesIO()
        np.save(buf, value.astype(dtype), allow_pickle=False)
        return buf.getvalue()

    def row(t: dict[str, Any]) -> Any:
        shape = [d for d in t["shape"][1:]]
        value = rng.random(shape) if np.dtype(t["dtype"]).kind == "f" else rng.integers(0, 2, shape)
        return value.astype(t["dtype"]).tolist()
    if len(inputs) == 1:
        (t,) = inputs.values()
        return json.dumps({"instances": [row(t) for _ in range(rows)]}).encode()
    return json.dumps({"instances": [{n: row(t) for n, t in inputs.items()} for _ in range(rows)]}).encode()


class urllib_get:
    """``with urllib_get(url) as body``: GET a JSON document (a small helper, no
    dependency)."""

    def __init__(self, url: str):
        self.url = url

    def __enter__(self) -> Any:
        parts = urllib.parse.urlsplit(self.url)
        conn = _connection(self.url)
        conn.request("GET", parts.path)
        resp = conn.getresponse()
        data = resp.read()
        conn.close()
        if resp.status != 200:
            raise RuntimeError(f"GET {self.url} answered {resp.status}: {data[:200]!r}")
        return json.loads(data)

    def __exit__(self, *exc: object) -> None:
        return None


async def _client(host: str, port: int, request: bytes, end: float, out: dict[str, Any],
                  on_response: Callable[[int, str | None, bytes], None] | None) -> None:
    """One closed-loop client on one kept-alive connection: send, read the whole answer,
    send again, until ``end``."""
    reader = writer = None
    while time.perf_counter() < end:
        if writer is None:
            try:
                reader, writer = await asyncio.open_connection(host, port)
            except OSError:
                out["codes"][0] += 1
                await asyncio.sleep(0.01)
                continue
            writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        t0 = time.perf_counter()
        try:
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            status = int(lines[0].split()[1])
            headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:] if ln)}
            body = await reader.readexactly(int(headers.get("content-length", "0")))
        except (OSError, asyncio.IncompleteReadError, ValueError, IndexError):
            out["codes"][0] += 1         # a failed connection: counted as code 0
            writer.close()
            reader = writer = None
            continue
        t1 = time.perf_counter()
        out["codes"][status] += 1
        version = headers.get("x-model-version")
        if status == 200:
            out["latencies"].append(t1 - t0)
            out["versions"][version or "?"] += 1
        if on_response is not None:
            on_response(status, version, body)
        if status in (429, 503):           # a refusal says when to come back: a short back-off
            await asyncio.sleep(0.001)
        if headers.get("connection", "").lower() == "close":
            writer.close()
            reader = writer = None
    if writer is not None:
        writer.close()


def run_level(url: str, model: str, concurrency: int, seconds: float, body: bytes, *,
              version: int | None = None, content_type: str = "application/json",
              on_response: Callable[[int, str | None, bytes], None] | None = None) -> dict[str, Any]:
    """Keep ``concurrency`` requests outstanding for ``seconds`` (one event loop, one
    kept-alive connection per client: no client thread contends for the GIL); the level's
    numbers: requests, ok, failed, codes, throughput (answers with 200 a second),
    p50/p90/p99 (ms, of the answers with 200) and the versions that answered."""
    parts = urllib.parse.urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    path = f"/v1/models/{model}" + (f"/versions/{version}" if version is not None else "") + ":predict"
    request = (f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: {content_type}\r\n"
               f"Content-Length: {len(body)}\r\n\r\n").encode() + body
    out: dict[str, Any] = {"latencies": [], "codes": collections.Counter(), "versions": collections.Counter()}
    start = time.perf_counter()
    end = start + seconds

    async def level() -> None:
        await asyncio.gather(*[_client(host, port, request, end, out, on_response) for _ in range(concurrency)])
    asyncio.run(level())
    elapsed = time.perf_counter() - start
    codes = out["codes"]
    lat = np.array(out["latencies"]) * 1e3
    pct = {f"p{q}": float(np.percentile(lat, q)) if lat.size else float("nan") for q in (50, 90, 99)}
    return {"concurrency": concurrency, "seconds": elapsed, "requests": sum(codes.values()), "ok": codes[200],
            "failed": sum(n for c, n in codes.items() if c != 200), "codes": dict(codes),
            "throughput": codes[200] / elapsed, **pct, "versions": dict(out["versions"])}


def loadtest(url: str, model: str, concurrency: Sequence[int] = (1, 4, 16, 64), seconds: float = 10.0, *,
             version: int | None = None, rows: int = 1, body: bytes | None = None,
             content_type: str = "application/json",
             on_response: Callable[[int, str | None, bytes], None] | None = None) -> list[dict[str, Any]]:
    """Closed-loop load on ``url``'s ``model`` at each concurrency level for ``seconds``:
    one dict of numbers per level (``run_level``'s). The body defaults to ``rows`` random
    instances built from the model's metadata (JSON, or one .npy array when
    ``content_type`` is application/x-npy)."""
    url = url.rstrip("/")
    if body is None:
        body = example_body(url, model, rows, content_type=content_type)
    return [run_level(url, model, c, seconds, body, version=version, content_type=content_type,
                      on_response=on_response) for c in concurrency]


def format_table(results: list[dict[str, Any]]) -> str:
    """The levels as a text table."""
    lines = [f"{'concurrency':>11} {'req/s':>9} {'p50 ms':>8} {'p90 ms':>8} {'p99 ms':>8} {'ok':>8} {'failed':>7}"]
    for r in results:
        lines.append(f"{r['concurrency']:>11} {r['throughput']:>9.1f} {r['p50']:>8.2f} {r['p90']:>8.2f} "
                     f"{r['p99']:>8.2f} {r['ok']:>8} {r['failed']:>7}")
    return "\n".join(lines)
