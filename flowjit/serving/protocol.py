"""The server's HTTP protocol: uvicorn's httptools protocol with a fast path for predict
requests below ASGI, and each response written in one ``send``.

A ``POST /v1/models/NAME[/versions/N]:predict`` whose body has a Content-Length (at most
``--max-body-mb``), with no ``Expect`` header, no query and no percent-escapes, is
recognised in the parser's callbacks; its complete body goes straight to the predictor
(``Predictor.fast``: the model's batcher or runner), and the answer's bytes go to the
transport when its batch has run: no ASGI scope, no task per request, no receive or send
coroutines. Every other request (other paths and methods, a chunked body, ``Expect:
100-continue``, a body over the limit) goes through the ASGI application as uvicorn runs
it, and the answers are the same bytes either way. Requests pipelined on a connection are
answered in order, whichever path each takes.
"""

from __future__ import annotations

import json
import logging
from typing import Any, Protocol

try:  # uvicorn's fast HTTP parser: present with httptools (uvicorn[standard]), else uvicorn's h11
    from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol
except ImportError:
    HttpToolsProtocol = None

log = logging.getLogger("flowjit.serving")

_PREFIX = b"/v1/models/"
_SUFFIX = b":predict"
_TYPES: dict[bytes, str] = {b"": ""}   # Content-Type values seen -> the media type, lower case


class Headers(list):
    """A response's headers that do not change (a version's answers of one content type),
    with their lines as they are written (``raw``), formatted once."""

    def __init__(self, headers: list[tuple[bytes, bytes]]):
        super().__init__(headers)
        self.raw = b"".join([b"%s: %s\r\n" % (name, value) for name, value in headers])


class Predictor(Protocol):
    """What the fast path needs of the server (server.Predictor)."""

    max_body: int

    def fast(self, request: FastRequest, rest: str, content_type: str, body: bytes) -> None:
        ...

    def answer(self, request: FastRequest, outputs: Any, error: BaseException | None) -> None:
        ...


class _OneWrite:
    """A connection's transport whose response head waits for the response's first body
    write and leaves with it in one ``send``: uvicorn writes them apart, and the second
    system call (and the client's second wake-up) cost a tenth of a request here. Everything
    else passes through; ``100 Continue`` goes at once, and a head no body follows (a HEAD
    request's) leaves when the response completes (``flush``) or the connection closes."""

    __slots__ = ("_transport", "_head")

    def __init__(self, transport: Any):
        self._transport = transport
        self._head: bytes | None = None

    def write(self, data: bytes) -> None:
        """Hold a response head; send a held head together with what follows it."""
        if self._head is not None:
            data, self._head = self._head + data, None
        elif data[-4:] == b"\r\n\r\n" and data[:9] == b"HTTP/1.1 " and data[9:13] != b"100 ":
            self._head = data
            return
        self._transport.write(data)

    def flush(self) -> None:
        """Send a held head."""
        if self._head is not None:
            data, self._head = self._head, None
            self._transport.write(data)

    def close(self) -> None:
        """Send a held head, then close."""
        self.flush()
        self._transport.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class _NoEvent:
    """What uvicorn's protocol sets on a request it thinks is ASGI's when the connection is
    lost: nothing waits on a fast request."""

    @staticmethod
    def set() -> None:
        return None


class FastRequest:
    """One predict request on the fast path, in the place of uvicorn's request-response
    cycle on its connection (``protocol.cycle``, ``protocol.pipeline``), and the waiter its
    batch answers (an asyncio future's ``done``, ``set_result``, ``set_exception``, which the
    predictor's ``answer`` turns into the response's bytes)."""

    __slots__ = ("protocol", "rest", "content_type", "body", "parts", "keep_alive", "started", "complete",
                 "response_complete", "disconnected", "context")
    message_event = _NoEvent

    def __init__(self, protocol: Any, rest: str, content_type: str, keep_alive: bool):
        self.protocol = protocol
        self.rest = rest
        self.content_type = content_type
        self.body = b""                 # the body's first chunk
        self.parts: list[bytes] | None = None   # its chunks, once there are two
        self.keep_alive = keep_alive
        self.started = False            # its turn on the connection has come
        self.complete = False           # its body is all here
        self.response_complete = False
        self.disconnected = False
        self.context: Any = None        # the predictor's state of the request

    def run(self) -> None:
        """Hand the whole body to the predictor (its turn has come and its body is here)."""
        body = self.body if self.parts is None else b"".join(self.parts)
        self.body, self.parts = b"", None
        try:
            self.protocol.predictor.fast(self, self.rest, self.content_type, body)
        except Exception as e:  # the predictor answers its failures: this is a bug, not a request's fault
            log.exception("flowjit serve: a predict request failed in the server")
            if not self.response_complete:
                self.reply(500, [(b"content-type", b"application/json")],
                           json.dumps({"error": f"{type(e).__name__}: {e}"}).encode())

    # ---- the batcher's waiter --------------------------------------------------------

    def done(self) -> bool:
        return self.response_complete

    def set_result(self, outputs: Any) -> None:
        self.protocol.predictor.answer(self, outputs, None)

    def set_exception(self, error: BaseException) -> None:
        self.protocol.predictor.answer(self, None, error)

    # ---- the answer ------------------------------------------------------------------

    def reply(self, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
        """Write the response (as uvicorn writes an ASGI application's, in one ``send``)
        and let the connection's next request go."""
        protocol = self.protocol
        self.response_complete = True
        transport = protocol.raw
        if not self.disconnected and not transport.is_closing():
            defaults = protocol.server_state.default_headers
            cache = protocol.defaults
            if cache[0] is not defaults:      # uvicorn replaces them (the date) every second
                cache[0], cache[1] = defaults, b"".join([b"%s: %s\r\n" % (n, v) for n, v in defaults])
            raw = getattr(headers, "raw", None)     # a fixed list's lines, written once (Headers)
            if raw is None:
                raw = b"".join([b"%s: %s\r\n" % (name, value) for name, value in headers])
            parts = [STATUS_LINE[status], cache[1], raw, b"content-length: %d\r\n" % len(body)]
            if not self.keep_alive:
                parts.append(b"connection: close\r\n")
            parts += (b"\r\n", body)
            transport.write(b"".join(parts))
            if not self.keep_alive:
                transport.close()
        protocol.answered()


def http_protocol(predictor: Predictor | None) -> Any:
    """uvicorn's httptools protocol writing each response in one ``send`` (``_OneWrite``)
    and answering predict requests below ASGI through ``predictor`` (None: every request
    through ASGI), or "auto" where httptools is missing (uvicorn's pure-Python h11 then)."""
    if HttpToolsProtocol is None:
        return "auto"
    max_body = predictor.max_body if predictor is not None else -1
    defaults: list[Any] = [None, b""]    # uvicorn's default headers, and their bytes

    class FastPredictProtocol(HttpToolsProtocol):
        def connection_made(self, transport: Any) -> None:
            self.raw = transport
            self.idle_since: float | None = None
            self.predictor = predictor
            self.defaults = defaults
            super().connection_made(_OneWrite(transport))

        def on_response_complete(self) -> None:
            # uvicorn's, but for the keep-alive timer: armed once and moved on by the answers
            # (uvicorn arms a timer at each answer and cancels it at each request, 1.2 µs).
            self.transport.flush()     # a head that no body followed (HEAD) goes now
            self.answered()

        def answered(self) -> None:
            """A response is complete (a fast request's: nothing held to flush)."""
            self.server_state.total_requests += 1
            if self.raw.is_closing():
                return
            if self.flow.read_paused:
                self.flow.resume_reading()
            if self.pipeline:          # the next request pipelined on the connection
                cycle, app = self.pipeline.pop()
                self._start_asgi_task(cycle, app)
                return
            self.idle_since = self.loop.time()
            if self.timeout_keep_alive_task is None:
                self.timeout_keep_alive_task = self.loop.call_later(self.timeout_keep_alive, self._keep_alive_due)

        def _unset_keepalive_if_required(self) -> None:
            self.idle_since = None     # busy: a timer armed finds it so, and the next answer arms another

        def _keep_alive_due(self) -> None:
            self.timeout_keep_alive_task = None
            since = self.idle_since
            if since is None:
                return
            left = since + self.timeout_keep_alive - self.loop.time()
            if left > 0:
                self.timeout_keep_alive_task = self.loop.call_later(left, self._keep_alive_due)
            else:
                self.timeout_keep_alive_handler()

        def connection_lost(self, exc: Exception | None) -> None:
            super().connection_lost(exc)
            if self.timeout_keep_alive_task is not None:
                self.timeout_keep_alive_task.cancel()
                self.timeout_keep_alive_task = None

        # ---- the parser's callbacks: a predict request is recognised as it is parsed --

        def on_message_begin(self) -> None:
            # uvicorn builds the ASGI scope here; it waits for on_headers_complete, where a
            # request that does not take the fast path gets it.
            self.url = b""
            self.expect_100_continue = False
            self.headers = []
            self.fast_type = b""
            self.fast_length = None
            self.fast_plain = True

        def on_header(self, name: bytes, value: bytes) -> None:
            name = name.lower()
            if name == b"content-type":
                self.fast_type = value
            elif name == b"content-length":
                self.fast_length = value
            elif name == b"expect" or name == b"transfer-encoding":
                self.fast_plain = False
                if name == b"expect" and value.lower() == b"100-continue":
                    self.expect_100_continue = True
            self.headers.append((name, value))

        def on_headers_complete(self) -> None:
            url = self.url
            if (predictor is not None and self.fast_plain and url.endswith(_SUFFIX) and url.startswith(_PREFIX)
                    and b"%" not in url and b"?" not in url and self.limit_concurrency is None):
                parser = self.parser
                length = self.fast_length
                if (parser.get_method() == b"POST" and (length is None or (length.isdigit()
                                                                             and int(length) <= max_body))
                        and not parser.should_upgrade()):
                    self._fast(url)
                    return
            # The ASGI path: uvicorn's scope, with what was parsed so far.
            url, headers, expect = self.url, self.headers, self.expect_100_continue
            super().on_message_begin()
            self.url, self.expect_100_continue = url, expect
            self.headers.extend(headers)
            super().on_headers_complete()

        def _fast(self, url: bytes) -> None:
            version = self.parser.get_http_version()
            ctype = _TYPES.get(self.fast_type)
            if ctype is None:
                ctype = self.fast_type.decode("latin-1").split(";")[0].strip().lower()
                if len(_TYPES) < 64:
                    _TYPES[self.fast_type] = ctype
            request = FastRequest(self, url[len(_PREFIX):].decode("ascii", "replace"), ctype,
                                  version != "1.0" and self.parser.should_keep_alive())
            existing, self.cycle = self.cycle, request
            if existing is None or existing.response_complete:
                request.started = True
            else:  # pipelined behind a request not yet answered
                self.flow.pause_reading()
                self.pipeline.appendleft((request, None))

        def on_body(self, body: bytes) -> None:
            cycle = self.cycle
            if cycle.__class__ is FastRequest:
                if cycle.parts is None:
                    if not cycle.body:
                        cycle.body = body
                        return
                    cycle.parts = [cycle.body]
                cycle.parts.append(body)
                return
            super().on_body(body)

        def on_message_complete(self) -> None:
            cycle = self.cycle
            if cycle.__class__ is FastRequest:
                cycle.complete = True
                if cycle.started:
                    cycle.run()
                return
            super().on_message_complete()

        def _start_asgi_task(self, cycle: Any, app: Any) -> None:
            # A request's turn after the one before it answered (uvicorn's pipeline).
            if cycle.__class__ is FastRequest:
                cycle.started = True
                if cycle.complete:    # on the loop's next turn: a long pipeline must not recurse
                    self.loop.call_soon(cycle.run)
                return
            super()._start_asgi_task(cycle, app)
    return FastPredictProtocol
