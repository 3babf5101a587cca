"""``flowjit serve``: a model repository served over HTTP in TensorFlow Serving's REST form,
an ASGI application on Starlette run by uvicorn.

A poller scans the repository (every ``poll_seconds``); a version directory complete with
its readiness marker is loaded, checked and warmed up off the request path, and only then
does traffic switch to it, in one assignment. Requests already holding the old version
finish on it; it is then unloaded (its library closed). A version that fails to load or to
warm up is refused with a log line and a metric, and the old one keeps serving.

A version that carries a schema (``schema.json``) has each request's inputs checked against
it once decoded (``flowjit.validate.LiveCheck``: the data validator's checks, a few NumPy
reductions per input) and its anomalies counted per feature and kind; the request is served
all the same. A version without one checks nothing.
"""

from __future__ import annotations

import asyncio
import bisect
import collections
import json
import logging
import math
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import prometheus_client as prom
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from flowjit.version import __version__

from . import repository
from .batching import Batcher, BatchStats, Overloaded
from .model import NPY, NPZ, BadRequest, LoadedVersion, VersionRefused, limit_blas_threads
from .protocol import FastRequest, Headers, http_protocol

try:  # the serving extra's JSON codec: 8x faster than json on a request's rows (json when it is missing)
    import orjson
except ImportError:  # pragma: no cover - the serving extra installs it
    orjson = None

log = logging.getLogger("flowjit.serving")

_LATENCY_BUCKETS = (.0005, .001, .002, .005, .01, .02, .05, .1, .2, .5, 1, 2, 5)
_BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)


@dataclass
class Config:
    """How the server batches, polls and bounds requests (the ``flowjit serve`` options)."""

    max_batch_size: int = 64
    batch_timeout_ms: float = 2.0
    latency_slo_ms: float | None = None
    batching: bool = True
    adaptive_wait: bool = True              # False: every batch waits the whole timeout (TF Serving's rule)
    max_queue_rows: int | None = None
    poll_seconds: float = 1.0
    max_body_mb: float = 64.0
    version_policy: str = "latest"          # latest | all | specific
    versions: tuple[int, ...] = ()           # for "specific"
    warmup_sizes: tuple[int, ...] = (1, 8, 32)
    blas_threads: int = 1                    # the BLAS's threads, process-wide (0: leave it as it is)


class Metrics:
    """The server's Prometheus metrics, in a registry of its own (several servers may run
    in one process)."""

    def __init__(self) -> None:
        r = self.registry = prom.CollectorRegistry()
        self.requests = prom.Counter("flowjit_serving_requests", "Predict requests by model, version and HTTP code",
                                     ["model", "version", "code"], registry=r)
        self.latency = prom.Histogram("flowjit_serving_request_seconds", "Predict latency in the server",
                                      ["model"], buckets=_LATENCY_BUCKETS, registry=r)
        self.queue = prom.Histogram("flowjit_serving_queue_seconds", "Time a request waited for its batch",
                                    ["model"], buckets=_LATENCY_BUCKETS, registry=r)
        self.compute = prom.Histogram("flowjit_serving_compute_seconds", "Time of one batch in the library",
                                      ["model"], buckets=_LATENCY_BUCKETS, registry=r)
        self.batch = prom.Histogram("flowjit_serving_batch_size", "Rows per batch", ["model"],
                                    buckets=_BATCH_BUCKETS, registry=r)
        self.depth = prom.Gauge("flowjit_serving_queue_depth", "Rows waiting", ["model"], registry=r)
        self.loaded = prom.Gauge("flowjit_serving_versions_loaded", "Versions loaded and serving", ["model"],
                                 registry=r)
        self.version = prom.Gauge("flowjit_serving_version", "The version serving by default", ["model"],
                                  registry=r)
        self.reloads = prom.Counter("flowjit_serving_reloads", "Versions loaded and switched to", ["model"],
                                    registry=r)
        self.refusals = prom.Counter("flowjit_serving_version_refusals", "Versions refused (load or warm-up failed)",
                                     ["model"], registry=r)
        self.rejected = prom.Counter("flowjit_serving_rejected", "Requests refused at once (429 queue full, 503 "
                                     "deadline)", ["model", "code"], registry=r)
        self.checked = prom.Counter("flowjit_serving_checked_requests", "Requests whose inputs were checked "
                                    "against their version's schema", ["model", "version"], registry=r)
        self.anomalies = prom.Counter("flowjit_serving_anomalies", "Requests whose inputs showed an anomaly, by "
                                      "feature and kind (the version's schema.json)",
                                      ["model", "version", "feature", "kind"], registry=r)


class ModelState:
    """The versions of one model being served, switched atomically: ``served`` is replaced
    as a whole, never changed in place."""

    def __init__(self, name: str):
        self.name = name
        # (versions by number, the default version), replaced as a whole: a request reads both at once.
        self._serving: tuple[dict[int, tuple[LoadedVersion, Batcher]], int | None] = ({}, None)
        self.refused: dict[int, str] = {}      # version -> READY digest it was refused at
        self.counters: dict[tuple[str, str], Any] = {}   # (version, code) -> its requests counter
        self.checked: dict[str, Any] = {}              # version -> its checked requests counter
        self.anomaly_counters: dict[tuple[str, str, str], Any] = {}   # (version, feature, kind) -> its counter
        self.logged: set[tuple[str, str, str]] = set()   # the (version, feature, kind) of anomalies logged
        self.latency: Any = None                        # its request latency histogram, labelled once
        self.depth_watched = False                      # its queue depth gauge reads the batchers

    def count(self, metrics: Metrics, version: str, code: str, n: int = 1) -> None:
        """``n`` more requests answered ``code`` by ``version`` (the labelled counter cached:
        prometheus-client's labels() takes a lock and builds a key)."""
        counter = self.counters.get((version, code))
        if counter is None:
            counter = self.counters[(version, code)] = metrics.requests.labels(self.name, version, code)
        counter.inc(n)

    def check(self, metrics: Metrics, loaded: LoadedVersion, arrays: list[np.ndarray]) -> None:
        """Check one request's inputs against ``loaded``'s schema (its ``checks``, not None;
        ``watch`` has run) and count the request, and each (feature, kind) of anomaly it shows
        once; the first anomaly of each (version, feature, kind) is logged with what was
        expected and seen."""
        version = str(loaded.version)
        counters = self.anomaly_counters
        try:
            found = loaded.checks.check(arrays)
        except Exception:  # a check must never fail a request: log it and serve
            log.exception("flowjit serve: checking a request to %s version %s against its schema failed",
                          self.name, version)
            return
        self.checked[version].inc()
        for a in found:
            counter = counters.get((version, a.feature, a.kind))
            if counter is None:
                counter = counters[(version, a.feature, a.kind)] = metrics.anomalies.labels(
                    self.name, version, a.feature, a.kind)
            if (version, a.feature, a.kind) not in self.logged:
                self.logged.add((version, a.feature, a.kind))
                log.warning("flowjit serve: %s version %s: a request's %r shows %s: expected %s, seen %s (counted "
                            "in flowjit_serving_anomalies_total from now on, logged once; the schema change that "
                            "accepts it: %s)", self.name, version, a.feature, a.kind, a.expected, a.seen, a.fix)
            counter.inc()

    def watch(self, metrics: Metrics, loaded: LoadedVersion) -> None:
        """Start ``loaded``'s anomaly series at zero (every (feature, kind) its schema checks,
        and its checked requests), so /metrics shows what is checked before any anomaly."""
        version = str(loaded.version)
        self.checked[version] = metrics.checked.labels(self.name, version)
        for feature, kind in loaded.checks.series():
            self.anomaly_counters[(version, feature, kind)] = metrics.anomalies.labels(self.name, version, feature,
                                                                                       kind)

    @property
    def served(self) -> dict[int, tuple[LoadedVersion, Batcher]]:
        """The versions serving now, by number."""
        return self._serving[0]

    @property
    def default(self) -> int | None:
        """The version a request that names none gets."""
        return self._serving[1]

    def switch(self, served: dict[int, tuple[LoadedVersion, Batcher]]) -> None:
        """Serve ``served`` (its newest version by default) from now on: one assignment."""
        self._serving = (served, max(served) if served else None)

    def pick(self, version: int | None) -> tuple[LoadedVersion, Batcher] | None:
        """The version a request gets (the default when ``version`` is None), acquired;
        None when there is no such version. A version retired between the read and the
        acquire is skipped for the one serving now."""
        for _ in range(8):
            served, default = self._serving
            found = served.get(default if version is None else version)
            if found is None or found[0].acquire():
                return found
        return None


class Repository:
    """The models of a repository directory, polled for new versions."""

    def __init__(self, root: str | Path, config: Config, metrics: Metrics):
        self.root = Path(root)
        self.config = config
        self.metrics = metrics
        self.models: dict[str, ModelState] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._unloaded = 0

    def _wanted(self, complete: list[int]) -> list[int]:
        policy = self.config.version_policy
        if not complete:
            return []
        if policy == "all":
            return complete
        if policy == "specific":
            return [v for v in complete if v in self.config.versions]
        return [complete[-1]]

    def poll(self) -> None:
        """Scan the repository once: load, check and warm up each wanted version not yet
        served, switch to it, unload versions no longer wanted."""
        with self._lock:
            for name in repository.models(self.root):
                state = self.models.setdefault(name, ModelState(name))
                model_dir = self.root / name
                complete = repository.complete_versions(model_dir)
                wanted = self._wanted([v for v in complete if v not in state.refused
                                       or state.refused[v] != repository.ready_digest(model_dir / str(v))])
                if set(wanted) == set(state.served):
                    continue
                added = {}
                for v in wanted:
                    if v not in state.served:
                        loaded = self._load(name, v, model_dir / str(v), state)
                        if loaded is not None:
                            added[v] = loaded
                served = {v: state.served.get(v) or added[v] for v in wanted if v in state.served or v in added}
                if not served:      # nothing wanted could load: what serves keeps serving
                    continue
                dropped = [s for v, s in state.served.items() if v not in served]
                state.switch(served)                        # the switch: one assignment
                for version, _ in dropped:
                    version.retire()
                self.metrics.loaded.labels(name).set(len(served))
                self.metrics.version.labels(name).set(state.default)
                for v in added:
                    self.metrics.reloads.labels(name).inc()
                    log.info("flowjit serve: %s version %d is serving", name, v)
                for version, batcher in dropped:
                    threading.Thread(target=self._unload, args=(version, batcher), daemon=True).start()

    def _load(self, name: str, v: int, directory: Path, state: ModelState) -> tuple[LoadedVersion, Batcher] | None:
        try:
            loaded = LoadedVersion(name, v, directory)
            limit_blas_threads(loaded.manifest, self.config.blas_threads)
            sizes = sorted({min(s, self.config.max_batch_size) for s in self.config.warmup_sizes}
                           | {self.config.max_batch_size})
            loaded.warm_up(sizes)
        except VersionRefused as e:
            state.refused[v] = repository.ready_digest(directory) or ""
            self.metrics.refusals.labels(name).inc()
            log.warning("flowjit serve: refused %s version %d: %s", name, v, e)
            return None
        c = self.config
        m = self.metrics
        batch, compute, queue = m.batch.labels(name), m.compute.labels(name), m.queue.labels(name)

        def on_batch(stats: BatchStats) -> None:
            batch.observe(stats.rows)
            compute.observe(stats.compute_s)
            observe_all(queue, stats.queue_s)

        if loaded.checks is not None:
            state.watch(m, loaded)
        batcher = Batcher(loaded, max_batch_size=c.max_batch_size, batch_timeout_s=c.batch_timeout_ms / 1e3,
                          slo_s=None if c.latency_slo_ms is None else c.latency_slo_ms / 1e3,
                          max_queue_rows=c.max_queue_rows, batching=c.batching, adaptive_wait=c.adaptive_wait,
                          on_batch=on_batch)
        if not state.depth_watched:    # the rows waiting in every served version's queue, read at each scrape
            state.depth_watched = True
            m.depth.labels(name).set_function(lambda: sum(b.depth for _, b in state.served.values()))
        return loaded, batcher

    def _unload(self, version: LoadedVersion, batcher: Batcher) -> None:
        # Requests hold the version from the moment they pick it until they answer: once none
        # does, nothing more reaches its queue.
        version.wait_idle()
        batcher.close()
        closed = version.unload()
        self._unloaded += closed
        log.info("flowjit serve: %s version %d unloaded%s", version.model, version.version,
                 "" if closed else " (its library stays mapped)")

    def start(self) -> None:
        """Poll once now, then every ``poll_seconds`` on a thread."""
        self.poll()

        def loop() -> None:
            while not self._stop.wait(self.config.poll_seconds):
                try:
                    self.poll()
                except Exception:  # a poll must never end the poller
                    log.exception("flowjit serve: polling %s failed", self.root)
        self._thread = threading.Thread(target=loop, name="flowjit-poller", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop polling; close every batcher and unload every version."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        with self._lock:
            for state in self.models.values():
                served = state.served
                state.switch({})
                for version, batcher in served.values():
                    version.retire()
                    self._unload(version, batcher)

    def ready(self) -> bool:
        """Every model of the repository has a version serving (and there is one model)."""
        return bool(self.models) and all(s.served for s in self.models.values())


def loads(body: bytes) -> Any:
    """A request's JSON: orjson's parser, or Python's json for what orjson refuses (the
    ``NaN``, ``Infinity`` and ``-Infinity`` TensorFlow Serving's JSON carries, integers past
    64 bits, malformed JSON, whose error json names). Raises ValueError."""
    if orjson is not None:
        try:
            return orjson.loads(body)
        except orjson.JSONDecodeError:
            pass
    return json.loads(body)


def dumps(content: Any, finite: bool = False) -> bytes:
    """``content`` as compact UTF-8 JSON; NaN and Inf written as TensorFlow Serving (and
    Python's json) write them, ``NaN``, ``Infinity``, ``-Infinity``. ``finite``: the caller
    knows it holds neither, so orjson (which would write them as null) may write it."""
    if finite and orjson is not None:
        return orjson.dumps(content)
    return json.dumps(content, ensure_ascii=False, allow_nan=True, separators=(",", ":")).encode("utf-8")


def dumps_numbers(content: Any) -> bytes:
    """``dumps`` of an answer whose values are numbers: orjson's bytes when they hold no
    ``null`` (orjson writes NaN and Inf as null, and numbers are never null), else Python's
    json's (``NaN``, ``Infinity``). Cheaper than checking the outputs for NaN and Inf first."""
    if orjson is not None:
        out = orjson.dumps(content)
        if b"null" not in out:
            return out
    return dumps(content)


def observe_all(histogram: Any, values: list[float]) -> None:
    """``histogram.observe(v)`` for each of ``values`` (a labelled prometheus-client
    histogram), in one step: each bucket's and the sum's lock taken once, not once a value
    (the per-request latencies of a batch, 1-2 µs each observed alone)."""
    if len(values) == 1:
        histogram.observe(values[0])
        return
    try:
        bounds, buckets, total = histogram._upper_bounds, histogram._buckets, histogram._sum
    except AttributeError:  # pragma: no cover - another prometheus-client's histogram
        for v in values:
            histogram.observe(v)
        return
    counts = collections.Counter([bisect.bisect_left(bounds, v) for v in values])
    total.inc(math.fsum(values))
    for i, n in counts.items():
        buckets[i].inc(n)


def _error(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers=headers)


class _Disconnected(Exception):
    """The client went away before its body arrived."""


_PREFIX = "/v1/models/"
_JSON = b"application/json"


def _parse_path(rest: str) -> tuple[str, int | None, str]:
    """``NAME``, ``NAME/metadata``, ``NAME:predict``, ``NAME/versions/N[...]`` -> (name,
    version, action)."""
    action = "status"
    if rest.endswith(":predict"):
        rest, action = rest[:-len(":predict")], "predict"
    elif rest.endswith("/metadata"):
        rest, action = rest[:-len("/metadata")], "metadata"
    parts = rest.split("/")
    version = None
    if len(parts) == 3 and parts[1] == "versions":
        if not parts[2].isdigit():
            raise BadRequest(f"version {parts[2]!r} is not a number: use /v1/models/NAME/versions/N", 400)
        version = int(parts[2])
    elif len(parts) != 1:
        raise BadRequest(f"no such path /v1/models/{rest}: use /v1/models/NAME[/versions/N][:predict|/metadata]",
                         404)
    return parts[0], version, action


def _error_answer(status: int, message: str, headers: list[tuple[bytes, bytes]]) -> tuple[int, list, bytes]:
    return status, [(b"content-type", _JSON), *headers], dumps({"error": message})


class _Answer(Exception):
    """A predict request answered before a version is picked (an unknown model or version)."""

    def __init__(self, answer: tuple[int, list, bytes]):
        self.answer = answer


class Predictor:
    """The predict requests of a repository, answered the same on both of the server's
    paths: the ASGI application's (``build_app``) and the HTTP protocol's fast path below
    ASGI (``fast``: a whole body in, the response's bytes written when its batch has run,
    no coroutine). An answer is (status, headers, body); the headers carry the version that
    answered (``X-Model-Version``), as every answer after a version is picked."""

    def __init__(self, repo: Repository):
        self.repo = repo
        self.metrics = repo.metrics
        self.max_body = int(repo.config.max_body_mb * (1 << 20))
        self._answered: list[tuple[ModelState, int, int, float]] = []   # counted at the loop turn's end
        self._paths: dict[str, tuple[str, int | None]] = {}     # predict paths parsed: (model, version)
        self._headers: dict[tuple[LoadedVersion, bytes], Headers] = {}   # a 200 answer's, by version and type

    def route(self, rest: str) -> tuple[ModelState, LoadedVersion, Batcher]:
        """The model, version (acquired: release it once answered) and batcher of a predict
        path's ``rest`` (after /v1/models/); raises _Answer (400, 404) when there is none."""
        parsed = self._paths.get(rest)
        if parsed is None:
            try:
                name, version, _ = _parse_path(rest)
            except BadRequest as e:
                raise _Answer(_error_answer(e.status, str(e), [])) from None
            if len(self._paths) >= 1024:
                self._paths.clear()
            parsed = self._paths[rest] = (name, version)
        name, version = parsed
        repo = self.repo
        state = repo.models.get(name)
        if state is None:
            known = ", ".join(sorted(repo.models)) or "none"
            raise _Answer(_error_answer(404, f"no model {name!r} in {repo.root} (models: {known})", []))
        if state.latency is None:
            state.latency = self.metrics.latency.labels(state.name)
        picked = state.pick(version)
        if picked is None:
            state.count(self.metrics, "", "404")
            which = f"version {version}" if version is not None else "a version"
            raise _Answer(_error_answer(404, f"model {state.name!r} has no {which} loaded (loaded: "
                                             f"{sorted(state.served)})", []))
        return state, picked[0], picked[1]

    def decode(self, state: ModelState, loaded: LoadedVersion, ctype: str,
               body: bytes) -> tuple[list[np.ndarray], int, str]:
        """The arrays, rows and form of a body of content type ``ctype``, checked against the
        version's schema where it has one; raises BadRequest."""
        sig = loaded.signature
        if ctype in (NPY, NPZ):
            arrays, rows, form = sig.decode_binary(body, ctype)
        elif ctype in ("application/json", "text/json", ""):
            try:
                parsed = loads(body)
            except ValueError as e:
                raise BadRequest(f"the body is not valid JSON ({e}); send "
                                 '{"instances": [...]} or {"inputs": ...}') from None
            arrays, rows, form = sig.decode_json(parsed)
        else:
            raise BadRequest(f"content type {ctype!r} is not served: send application/json, {NPY} (one "
                             f"input) or {NPZ}", 415)
        if loaded.checks is not None:
            state.check(self.metrics, loaded, arrays)
        return arrays, rows, form

    def encode(self, loaded: LoadedVersion, outputs: list[np.ndarray], form: str) -> tuple[int, list, bytes]:
        """The 200 answer of ``outputs``, in the request's form (its headers a Headers list
        shared by the version's answers of one content type: not to be changed)."""
        encoded = loaded.signature.encode(outputs, form)
        if isinstance(encoded, dict):
            body, ctype = dumps_numbers(encoded), _JSON
        else:
            body, ctype = encoded[0], encoded[1].encode()
        headers = self._headers.get((loaded, ctype))
        if headers is None:
            if len(self._headers) >= 64:
                self._headers.clear()
            headers = self._headers[(loaded, ctype)] = Headers(
                [(b"content-type", ctype), (b"x-model-version", str(loaded.version).encode())])
        return 200, headers, body

    def failure(self, state: ModelState, loaded: LoadedVersion, e: BaseException) -> tuple[int, list, bytes]:
        """The answer to a request that failed with ``e`` after its version was picked."""
        headers = [(b"x-model-version", str(loaded.version).encode())]
        if isinstance(e, BadRequest):
            return _error_answer(e.status, str(e), headers)
        if isinstance(e, Overloaded):
            self.metrics.rejected.labels(state.name, str(e.status)).inc()
            return _error_answer(e.status, str(e), [*headers, (b"retry-after", str(e.retry_after).encode())])
        # the library failed on a checked input: the server's fault
        log.error("flowjit serve: %s version %d failed", state.name, loaded.version, exc_info=e)
        return _error_answer(500, f"{type(e).__name__}: {e}", headers)

    def count(self, state: ModelState, loaded: LoadedVersion, status: int, t0: float) -> None:
        """Count an answered request and its latency since ``t0``: noted now, counted at the
        end of the loop's turn with the other requests answered in it (``_tally``: a
        batch's answers in one step)."""
        pending = self._answered
        pending.append((state, loaded.version, status, time.perf_counter() - t0))
        if len(pending) == 1:
            asyncio.get_running_loop().call_soon(self._tally)

    def _tally(self) -> None:
        """Count the requests answered since the last tally, and observe their latencies.
        Runs before the loop reads more requests, so a /metrics request sent after an answer
        sees it counted."""
        pending, self._answered = self._answered, []
        groups: dict[tuple[ModelState, int, int], list[float]] = {}
        for state, version, status, seconds in pending:
            group = groups.get((state, version, status))
            if group is None:
                groups[(state, version, status)] = [seconds]
            else:
                group.append(seconds)
        metrics = self.metrics
        for (state, version, status), seconds in groups.items():
            state.count(metrics, str(version), str(status), len(seconds))
            observe_all(state.latency, seconds)

    # ---- the fast path (protocol.FastRequest) ----------------------------------------------

    def fast(self, request: FastRequest, rest: str, ctype: str, body: bytes) -> None:
        """Answer a predict request whose whole ``body`` is here: at once when it fails
        before its batch or runs alone, else when its batch has run (``request`` is its
        batcher's waiter)."""
        t0 = time.perf_counter()
        try:
            state, loaded, batcher = self.route(rest)
        except _Answer as a:
            request.reply(*a.answer)
            return
        request.context = (state, loaded, t0, None)
        try:
            arrays, rows, form = self.decode(state, loaded, ctype, body)
            request.context = (state, loaded, t0, form)
            outputs = batcher.offer(arrays, rows, request)
        except Exception as e:
            self.answer(request, None, e)
            return
        if outputs is not None:
            self.answer(request, outputs, None)

    def answer(self, request: FastRequest, outputs: list[np.ndarray] | None, error: BaseException | None) -> None:
        """Answer a fast request: its outputs, or the error it failed with."""
        state, loaded, t0, form = request.context
        try:
            answer = self.encode(loaded, outputs, form) if error is None else self.failure(state, loaded, error)
        except Exception as e:
            answer = self.failure(state, loaded, e)
        finally:
            loaded.release()
        self.count(state, loaded, answer[0], t0)
        request.reply(*answer)


def build_app(repo: Repository, predictor: Predictor | None = None) -> ASGIApp:
    """The ASGI application serving ``repo``: predict requests on raw ASGI messages (through
    ``predictor``, one of its own by default), every other path through Starlette's routes."""
    metrics = repo.metrics
    predictor = predictor or Predictor(repo)
    max_body = predictor.max_body

    async def healthz(request: Request) -> Response:
        return JSONResponse({"status": "alive", "flowjit_version": __version__})

    async def readyz(request: Request) -> Response:
        missing = [n for n, s in repo.models.items() if not s.served]
        if repo.ready():
            return JSONResponse({"status": "ready"})
        return JSONResponse({"status": "not ready", "without_a_version": missing}, status_code=503)

    async def metrics_endpoint(request: Request) -> Response:
        return Response(prom.generate_latest(metrics.registry), media_type=prom.CONTENT_TYPE_LATEST)

    async def models(request: Request) -> Response:
        try:
            name, version, action = _parse_path(request.path_params["rest"])
        except BadRequest as e:
            return _error(e.status, str(e))
        state = repo.models.get(name)
        if state is None:
            known = ", ".join(sorted(repo.models)) or "none"
            return _error(404, f"no model {name!r} in {repo.root} (models: {known})")
        if action == "predict":    # a POST never gets here (build_app's app answers it)
            return _error(405, "predict takes POST with a JSON or binary body")
        if request.method != "GET":
            return _error(405, f"{action} takes GET")
        if action == "status":
            served = state.served
            vs = [v for v in served if version is None or v == version]
            if version is not None and not vs:
                return _error(404, f"model {name!r} has no version {version} loaded (loaded: {sorted(served)})")
            return JSONResponse({"model_version_status": [
                {"version": str(v), "state": "AVAILABLE", "status": {"error_code": "OK", "error_message": ""}}
                for v in sorted(vs, reverse=True)]})
        picked = state.pick(version)
        if picked is None:
            return _error(404, f"model {name!r} has no version {version if version is not None else ''} loaded "
                               f"(loaded: {sorted(state.served)})")
        loaded, batcher = picked
        try:
            body = {"model_spec": {"name": name, "version": str(loaded.version)},
                    "metadata": {"signature_def": loaded.signature.to_json(), "digest": loaded.digest,
                                 "batcher": batcher.describe()}}
        finally:
            loaded.release()
        return JSONResponse(body, headers={"X-Model-Version": str(loaded.version)})

    async def read_body(receive: Receive, length: int | None) -> bytes:
        if length is not None and length > max_body:
            raise BadRequest(f"the body has {length} bytes, more than --max-body-mb "
                             f"{repo.config.max_body_mb:g} MiB: send fewer rows per request", 413)
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise _Disconnected
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > max_body:
                raise BadRequest(f"the body is larger than --max-body-mb {repo.config.max_body_mb:g} MiB: send "
                                 "fewer rows per request", 413)
            chunks.append(chunk)
            if not message.get("more_body", False):
                return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    async def predict(scope: Scope, receive: Receive, rest: str) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        """One predict request, read from ASGI's ``receive``: (status, headers, body). Runs
        on raw ASGI messages, not Starlette's Request and Response (their routing,
        middleware and objects cost a third of a batched request's time in the server); the
        server's HTTP protocol answers most predict requests below ASGI (``Predictor.fast``),
        this one those it hands on (chunked bodies, ``Expect``, over the body limit)."""
        t0 = time.perf_counter()
        try:
            state, loaded, batcher = predictor.route(rest)
        except _Answer as a:
            return a.answer
        ctype, length = "application/json", None
        for key, value in scope["headers"]:
            if key == b"content-type":
                ctype = value.decode("latin-1").split(";")[0].strip().lower()
            elif key == b"content-length" and value.isdigit():
                length = int(value)
        try:
            body = await read_body(receive, length)
            arrays, rows, form = predictor.decode(state, loaded, ctype, body)
            outputs = await batcher.submit(arrays, rows)
            answer = predictor.encode(loaded, outputs, form)
        except _Disconnected:
            answer = (499, *_error_answer(400, "the client disconnected", [])[1:])
        except Exception as e:
            answer = predictor.failure(state, loaded, e)
        finally:
            loaded.release()
        predictor.count(state, loaded, answer[0], t0)
        return answer

    routes = [Route("/healthz", healthz), Route("/readyz", readyz), Route("/metrics", metrics_endpoint),
              Route("/v1/models/{rest:path}", models, methods=["GET", "POST"])]
    starlette = Starlette(routes=routes)

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        # POST .../NAME[/versions/N]:predict goes straight to predict; the rest to Starlette.
        if scope["type"] == "http" and scope["method"] == "POST":
            path, root = scope["path"], scope.get("root_path", "")
            if root and path.startswith(root + "/"):
                path = path[len(root):]
            if path.startswith(_PREFIX) and path.endswith(":predict"):
                status, headers, body = await predict(scope, receive, path[len(_PREFIX):])
                if status == 499:      # nobody to answer
                    status = 400
                headers = [*headers, (b"content-length", str(len(body)).encode())]
                await send({"type": "http.response.start", "status": status, "headers": headers})
                await send({"type": "http.response.body", "body": body})
                return
        await starlette(scope, receive, send)
    return app


class Server:
    """A model repository served over HTTP on a thread of this process: ``start()`` loads
    every model's versions and returns once the server listens (``url`` says where),
    ``stop()`` shuts it down and unloads every version. Also a context manager.

    ``models`` is the repository directory (``MODELS/NAME/VERSION/``); ``port=0`` takes a
    free port. The keyword options are ``Config``'s: ``max_batch_size``,
    ``batch_timeout_ms``, ``latency_slo_ms``, ``batching``, ``adaptive_wait``, ``max_queue_rows``,
    ``poll_seconds``, ``max_body_mb``, ``version_policy``, ``versions``, ``blas_threads`` (1
    by default: the BLAS the libraries link runs each product on one thread, process-wide;
    0 leaves it as it is)."""

    def __init__(self, models: str | Path, host: str = "127.0.0.1", port: int = 0, **options: Any):
        self.config = Config(**options)
        self.metrics = Metrics()
        self.repository = Repository(models, self.config, self.metrics)
        self.predictor = Predictor(self.repository)
        self.app = build_app(self.repository, self.predictor)
        self.host, self.port = host, port
        self._uvicorn: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """``http://HOST:PORT`` of the running server."""
        return f"http://{self.host}:{self.port}"

    def _socket(self) -> socket.socket:
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        # Accepted connections inherit NODELAY: uvicorn writes a response's head and body
        # apart, and Nagle's algorithm would hold the body for the client's delayed ACK
        # (40 ms on Linux) on every kept-alive connection.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind((self.host, self.port))
        self.port = sock.getsockname()[1]
        return sock

    def start(self) -> Server:
        """Load the repository and listen; returns when requests are answered."""
        self.repository.start()
        sock = self._socket()
        config = uvicorn.Config(self.app, log_level="warning", access_log=False, lifespan="off",
                                timeout_keep_alive=30, http=http_protocol(self.predictor))
        self._uvicorn = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._uvicorn.run, kwargs={"sockets": [sock]},
                                        name="flowjit-serve", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._uvicorn.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"flowjit serve did not start on {self.url}")
            time.sleep(0.01)
        return self

    def serve_forever(self) -> None:
        """Load the repository and serve on this thread until interrupted (SIGINT, SIGTERM)."""
        self.repository.start()
        sock = self._socket()
        log.warning("flowjit serve: serving %s on %s", self.repository.root, self.url)
        config = uvicorn.Config(self.app, log_level="warning", access_log=False, lifespan="off",
                                http=http_protocol(self.predictor))
        self._uvicorn = uvicorn.Server(config)
        try:
            self._uvicorn.run(sockets=[sock])
        finally:
            self.repository.stop()

    def stop(self) -> None:
        """Stop listening, then unload every version."""
        if self._uvicorn is not None:
            self._uvicorn.should_exit = True
        if self._thread is not None:
            self._thread.join(30)
        self.repository.stop()

    def __enter__(self) -> Server:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

