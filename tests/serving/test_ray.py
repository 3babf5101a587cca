"""flowjit serve --ray --replicas 2: the same answers through Ray Serve's proxy, and a killed
replica replaced while a load test runs, the load test seeing no more failed requests than Ray
Serve's proxy records in its access log."""

from __future__ import annotations

import collections
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import flowjit as fj
from flowjit.serving import push
from flowjit.serving.loadtest import run_level
from tests.serving.helpers import ROOT, export_mlp, free_port, get, post

pytest.importorskip("ray.serve")


# Ray Serve's proxy logs each request it answers: "... -- POST / 500 45.0ms".
_ACCESS = re.compile(r" -- POST (\S+) (\d{3}) [\d.]+ms$")


def _proxy_statuses(ray_tmp: Path) -> collections.Counter:
    """The status of each POST Ray Serve's proxies recorded in their access logs (every
    session under the Ray temp directory ``ray_tmp``)."""
    seen: collections.Counter = collections.Counter()
    logs = {log.resolve() for log in ray_tmp.glob("ray/session_*/logs/serve/proxy_*.log")}   # and session_latest
    for log in logs:
        for line in log.read_text(errors="replace").splitlines():
            m = _ACCESS.search(line)
            if m:
                seen[int(m.group(2))] += 1
    return seen


def _replicas() -> list[int]:
    found = subprocess.run(["pgrep", "-f", "ServeReplica:flowjit:FlowjitReplica"], capture_output=True, text=True)
    return sorted(int(p) for p in found.stdout.split())


# About 20 s on the 2-core machine, most of it Ray Serve's start-up, the load test and the
# shutdown: in the default suite (under the ~30 s a test marked slow takes).
def test_two_replicas_answer_alike_and_a_killed_one_is_replaced(tmp_path):
    artifact = export_mlp(tmp_path / "v1", 1)
    push(artifact, tmp_path / "models" / "mlp", force=True, log=lambda s: None)
    x = np.random.default_rng(3).random((4, 64)).astype(np.float32)
    want = fj.load_compiled(artifact)(x)
    port = free_port()
    # Ray's own temp directory (short: it holds Unix sockets) keeps this runtime's logs apart;
    # the proxy writes each access-log line as it answers (a buffer of 1 record).
    ray_tmp = Path(tempfile.mkdtemp(prefix="fjray-"))
    env = dict(os.environ, PYTHONPATH=str(ROOT), RAY_TMPDIR=str(ray_tmp), RAY_SERVE_REQUEST_PATH_LOG_BUFFER_SIZE="1")
    proc = subprocess.Popen([sys.executable, "-m", "flowjit.cli", "serve", str(tmp_path / "models"), "--ray",
                             "--replicas", "2", "--port", str(port)], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if get(f"{url}/readyz", timeout=2)[0] == 200 and len(_replicas()) == 2:
                    break
            except OSError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, "Ray Serve did not start in 120 s"
            time.sleep(0.5)
        for _ in range(4):   # the proxy spreads them over both replicas
            status, headers, body = post(f"{url}/v1/models/mlp:predict", {"instances": x.tolist()})
            assert status == 200 and headers["X-Model-Version"] == "1"
            np.testing.assert_allclose(json.loads(body)["predictions"], want, rtol=1e-6)
        victim = _replicas()[0]
        threading.Timer(1.0, os.kill, args=(victim, signal.SIGKILL)).start()
        result = run_level(url, "mlp", 4, 4.0, json.dumps({"instances": x[:1].tolist()}).encode())
        assert result["ok"] > 0, result["codes"]
        deadline = time.monotonic() + 60
        while len(_replicas()) != 2 or victim in _replicas():
            assert time.monotonic() < deadline, "the killed replica was not replaced in 60 s"
            time.sleep(0.5)
        assert post(f"{url}/v1/models/mlp:predict", {"instances": x.tolist()})[0] == 200
        # The requests the killed replica held fail, and Ray Serve answers them 500; the load
        # test must see no failure Ray Serve does not record: none of another code, no broken
        # connection (code 0), and of each failing code no more than the proxy logged.
        seen = _proxy_statuses(ray_tmp)
        failed = {code: n for code, n in result["codes"].items() if code != 200}
        recorded = {code: n for code, n in seen.items() if code != 200}
        print(f"load test: {result['ok']} ok, failed {failed}; Ray Serve's proxy recorded {dict(seen)}")
        assert sum(seen.values()) >= result["requests"], (seen, result["codes"])   # it saw every request
        assert all(n <= recorded.get(code, 0) for code, n in failed.items()), (failed, recorded)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        shutil.rmtree(ray_tmp, ignore_errors=True)
