"""flowjit loadtest's protocol clients against a scripted HTTP server: answers counted by
code and version, connections closed by the server replaced, broken answers counted as
failed (code 0), refusals backed off."""

from __future__ import annotations

import itertools
import socket
import threading

from flowjit.serving.loadtest import run_level


def _scripted(answer) -> tuple[str, threading.Event]:
    """A server on a free port whose ``answer(n)`` (n: the request's number on its
    connection) gives the bytes of each answer (None: close the connection at once)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    stop = threading.Event()

    def connection(conn: socket.socket) -> None:
        buf, n = b"", 0
        with conn:
            while not stop.is_set():
                while b"\r\n\r\n" not in buf:
                    data = conn.recv(65536)
                    if not data:
                        return
                    buf += data
                head, _, rest = buf.partition(b"\r\n\r\n")
                length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
                while len(rest) < length:
                    rest += conn.recv(65536)
                buf = rest[length:]
                out = answer(n)
                n += 1
                if out is None:
                    return
                conn.sendall(out)
                if b"connection: close" in out:
                    return

    def accept() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            threading.Thread(target=connection, args=(conn,), daemon=True).start()
        listener.close()
    threading.Thread(target=accept, daemon=True).start()
    return f"http://127.0.0.1:{listener.getsockname()[1]}", stop


def _answer(status: str, body: bytes, *extra: bytes) -> bytes:
    return b"".join([f"HTTP/1.1 {status}\r\n".encode(), b"Content-Type: application/json\r\n",
                     b"X-Model-Version: V7\r\n", *extra, b"Content-Length: %d\r\n\r\n" % len(body), body])


def test_answers_are_counted_by_code_and_version_and_bodies_passed_on():
    seen = []

    def answer(n):
        if n % 5 == 4:
            return _answer("429 Too Many Requests", b'{"error": "full"}', b"Retry-After: 1\r\n")
        return _answer("200 OK", b'{"predictions": [[%d]]}' % n)
    url, stop = _scripted(answer)
    try:
        r = run_level(url, "m", 4, 0.4, b"{}", on_response=lambda s, v, b: seen.append((s, v, b)))
    finally:
        stop.set()
    assert r["ok"] > 20 and r["codes"][429] > 0 and set(r["codes"]) == {200, 429}
    assert r["versions"] == {"V7": r["ok"]} and r["failed"] == r["codes"][429]
    assert all(v == "V7" for _, v, _ in seen) and len(seen) == r["requests"]
    assert {b for s, _, b in seen if s == 429} == {b'{"error": "full"}'}
    assert r["p50"] <= r["p99"] < 100


def test_a_closed_connection_is_replaced_and_a_broken_answer_fails():
    count = itertools.count()
    closed = []

    def answer(n):
        k = next(count)
        if k % 7 == 3:               # a good answer, then the server closes: no failure
            closed.append(k)
            return _answer("200 OK", b"{}", b"Connection: close\r\n")
        if k % 7 == 5:               # dropped: the request fails
            return None
        if k % 7 == 6:               # not HTTP: the request fails
            return b"garbage\r\n\r\n"
        return _answer("200 OK", b"{}")
    url, stop = _scripted(answer)
    try:
        r = run_level(url, "m", 2, 0.3, b"{}")
    finally:
        stop.set()
    assert closed and set(r["codes"]) == {0, 200}
    assert r["ok"] > 8 and r["failed"] == r["codes"][0] and abs(r["failed"] - 2 * r["requests"] / 7) <= 3


def test_a_server_that_refuses_connections_counts_failures():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    r = run_level(f"http://127.0.0.1:{port}", "m", 2, 0.2, b"{}")
    assert r["ok"] == 0 and r["failed"] == r["codes"][0] > 2


def test_the_clients_run_on_a_thread_of_their_own_that_does_not_preempt_on_wake():
    import os
    policies = []
    url, stop = _scripted(lambda n: _answer("200 OK", b"{}"))
    try:
        r = run_level(url, "m", 2, 0.2, b"{}", on_response=lambda *a: policies.append(os.sched_getscheduler(0)))
    finally:
        stop.set()
    assert r["ok"] > 0 and set(policies) == {getattr(os, "SCHED_BATCH", policies[0])}
    assert os.sched_getscheduler(0) == os.SCHED_OTHER          # the caller's thread is left as it was
