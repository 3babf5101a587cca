"""``flowjit loadtest``: a closed-loop load generator (perf_analyzer's method): at each
concurrency level that many clients each keep one request outstanding for the given
seconds; throughput and the latency percentiles of each level. The clients are protocols
on one event loop (uvloop's where installed), each writing one prebuilt request and reading
the answer's Content-Length in the loop's callbacks: a few µs of CPU a request, as
perf_analyzer's C++ client, so that on a small machine the load generator does not take
the server's core (the coroutine and stream clients before cost 19-33 µs a request); and
no client thread contends for the GIL."""

from __future__ import annotations

import asyncio
import collections
import http.client
import io
import json
import os
import socket
import threading
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


def _header(lower: bytes, head: bytes, name: bytes) -> bytes | None:
    """The value of header ``name`` (lower case, with its colon) in a response head, found
    in its lower-cased copy ``lower``; None when it has none."""
    i = lower.find(b"\r\n" + name)
    if i < 0:
        return None
    i += 2 + len(name)
    j = lower.find(b"\r\n", i)
    return head[i:j if j >= 0 else len(head)].strip()


class _Level:
    """One concurrency level's clients, their shared request and their tallies."""

    def __init__(self, loop: asyncio.AbstractEventLoop, host: str, port: int, request: bytes, end: float,
                 concurrency: int, on_response: Callable[[int, str | None, bytes], None] | None):
        self.loop, self.host, self.port, self.request, self.end = loop, host, port, request, end
        self.on_response = on_response
        self.latencies: list[float] = []
        self.codes: collections.Counter = collections.Counter()
        self.versions: collections.Counter = collections.Counter()
        self.running = concurrency
        self.done = loop.create_future()
        self.clients: set[_Client] = set()

    def connect(self) -> None:
        """Open one more client's connection (retried every 10 ms while it fails)."""
        if time.perf_counter() >= self.end:
            self.finished()
            return
        task = self.loop.create_task(self.loop.create_connection(lambda: _Client(self), self.host, self.port))

        def made(task: asyncio.Task) -> None:
            if task.cancelled() or task.exception() is not None:
                self.codes[0] += 1          # a failed connection: counted as code 0
                self.loop.call_later(0.01, self.connect)
        task.add_done_callback(made)

    def finished(self) -> None:
        """One client is done."""
        self.running -= 1
        if self.running == 0 and not self.done.done():
            self.done.set_result(None)


class _Client(asyncio.Protocol):
    """One closed-loop client on one kept-alive connection, driven by the loop's callbacks
    (no coroutine, no stream): write the level's prebuilt request, read the whole answer
    (its Content-Length), write again, until the level's end. A client costs a few µs a
    request, so the load generator leaves the machine's cores to the server."""

    def __init__(self, level: _Level):
        self.level = level
        self.transport: asyncio.Transport | None = None
        self.buf = b""
        self.t0 = 0.0
        self.active = False           # a request is outstanding
        self.ending = False           # this client closed its connection itself

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport    # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if sock is not None:
            # Without NODELAY, Nagle's algorithm may hold a segment for the server's delayed ACK (40 ms on Linux).
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.level.clients.add(self)
        self.send()

    def send(self) -> None:
        level = self.level
        if self.transport is None or self.transport.is_closing():
            return
        if time.perf_counter() >= level.end:
            self.close()
            level.finished()
            return
        self.buf = b""
        self.active = True
        self.t0 = time.perf_counter()
        self.transport.write(level.request)

    def close(self) -> None:
        self.ending = True
        self.level.clients.discard(self)
        if self.transport is not None:
            self.transport.close()

    def data_received(self, data: bytes) -> None:
        buf = self.buf + data if self.buf else data
        end = buf.find(b"\r\n\r\n")
        if end < 0:
            self.buf = buf
            return
        head = buf[:end]
        lower = head.lower()
        try:
            if lower[:7] != b"http/1." or not self.active:
                raise ValueError("not an answer")
            status = int(head[9:12])
            length = _header(lower, head, b"content-length:")
            need = end + 4 + (int(length) if length is not None else 0)
        except ValueError:
            self.failed()
            return
        if len(buf) < need:
            self.buf = buf
            return
        t1 = time.perf_counter()
        self.active = False
        level = self.level
        level.codes[status] += 1
        version = _header(lower, head, b"x-model-version:")
        tag = None if version is None else version.decode("latin-1")
        if status == 200:
            level.latencies.append(t1 - self.t0)
            level.versions[tag or "?"] += 1
        if level.on_response is not None:
            level.on_response(status, tag, buf[end + 4:need])
        if len(buf) > need:                 # more than one answer to one request
            self.failed()
            return
        if lower.find(b"\r\nconnection: close") >= 0:
            self.close()
            level.connect()
        elif status in (429, 503):          # a refusal says when to come back: a short back-off
            level.loop.call_later(0.001, self.send)
        else:
            self.send()

    def failed(self) -> None:
        """A broken answer or connection: counted as code 0; a new connection replaces it."""
        self.level.codes[0] += 1
        self.active = False
        self.close()
        self.level.connect()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.ending:
            if self.active:
                self.failed()
            else:                            # the server closed an idle connection
                self.close()
                self.level.connect()


def _yield_on_wake() -> None:
    """Make this thread one that does not preempt the running task when it wakes (Linux's
    SCHED_BATCH, for this thread only): an answer that wakes a client then does not take the
    CPU from the server that wrote it in the middle of writing the rest of its batch, as a
    client on another machine would not. Nothing where the policy is missing."""
    try:
        os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        pass


def _event_loop() -> asyncio.AbstractEventLoop:
    try:  # uvloop's loop where installed (uvicorn's standard extra brings it): a third less CPU a request
        import uvloop
        return uvloop.new_event_loop()
    except ImportError:  # pragma: no cover
        return asyncio.new_event_loop()


def run_level(url: str, model: str, concurrency: int, seconds: float, body: bytes, *,
              version: int | None = None, content_type: str = "application/json",
              on_response: Callable[[int, str | None, bytes], None] | None = None) -> dict[str, Any]:
    """Keep ``concurrency`` requests outstanding for ``seconds`` (one event loop, one
    kept-alive connection per client, each a protocol of the loop's callbacks writing one
    prebuilt request); the level's numbers: requests, ok, failed, codes, throughput (answers
    with 200 a second), p50/p90/p99 (ms, of the answers with 200) and the versions that
    answered. An answer not back 30 s after the level's end counts as failed (code 0)."""
    parts = urllib.parse.urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    path = f"/v1/models/{model}" + (f"/versions/{version}" if version is not None else "") + ":predict"
    request = (f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: {content_type}\r\n"
               f"Content-Length: {len(body)}\r\n\r\n").encode() + body
    result: dict[str, Any] = {}

    def drive() -> None:
        _yield_on_wake()
        loop = _event_loop()
        try:
            start = time.perf_counter()
            level = result["level"] = _Level(loop, host, port, request, start + seconds, concurrency, on_response)
            for _ in range(concurrency):
                level.connect()
            try:
                loop.run_until_complete(asyncio.wait_for(asyncio.shield(level.done), seconds + 30))
            except TimeoutError:
                for client in list(level.clients):
                    if client.active:
                        level.codes[0] += 1
                    client.close()
            result["elapsed"] = time.perf_counter() - start
            for client in list(level.clients):
                client.close()
            loop.run_until_complete(asyncio.sleep(0))
        except BaseException as e:  # raised again on the caller's thread
            result["error"] = e
        finally:
            loop.close()
    thread = threading.Thread(target=drive, name="flowjit-loadtest", daemon=True)
    thread.start()
    thread.join()
    if "error" in result:
        raise result["error"]
    level, elapsed = result["level"], result["elapsed"]
    codes = level.codes
    lat = np.array(level.latencies) * 1e3
    pct = {f"p{q}": float(np.percentile(lat, q)) if lat.size else float("nan") for q in (50, 90, 99)}
    return {"concurrency": concurrency, "seconds": elapsed, "requests": sum(codes.values()), "ok": codes[200],
            "failed": sum(n for c, n in codes.items() if c != 200), "codes": dict(codes),
            "throughput": codes[200] / elapsed, **pct, "versions": dict(level.versions)}


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
