"""flowjit serve --ray --replicas 2: the same answers through Ray Serve's proxy, and a killed
replica replaced while a load test runs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import flowjit as fj
from flowjit.serving import push
from flowjit.serving.loadtest import run_level
from tests.serving.helpers import ROOT, export_mlp, free_port, get, post

pytest.importorskip("ray.serve")


def _replicas() -> list[int]:
    found = subprocess.run(["pgrep", "-f", "ServeReplica:flowjit:FlowjitReplica"], capture_output=True, text=True)
    return sorted(int(p) for p in found.stdout.split())


# 28 s of Ray Serve start-up and a replica's restart: the served answers, batching and
# versions are the default suite's through flowjit serve itself (tests/serving).
@pytest.mark.slow
def test_two_replicas_answer_alike_and_a_killed_one_is_replaced(tmp_path):
    artifact = export_mlp(tmp_path / "v1", 1)
    push(artifact, tmp_path / "models" / "mlp", force=True, log=lambda s: None)
    x = np.random.default_rng(3).random((4, 64)).astype(np.float32)
    want = fj.load_compiled(artifact)(x)
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "flowjit.cli", "serve", str(tmp_path / "models"), "--ray",
                             "--replicas", "2", "--port", str(port)], cwd=ROOT,
                            env=dict(os.environ, PYTHONPATH=str(ROOT)), stdout=subprocess.DEVNULL,
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
        result = run_level(url, "mlp", 4, 6.0, json.dumps({"instances": x[:1].tolist()}).encode())
        # The requests on the killed replica fail (Ray Serve answers them 500); the rest are served.
        assert result["ok"] > 0 and result["failed"] <= 20, result["codes"]
        deadline = time.monotonic() + 60
        while len(_replicas()) != 2 or victim in _replicas():
            assert time.monotonic() < deadline, "the killed replica was not replaced in 60 s"
            time.sleep(0.5)
        assert post(f"{url}/v1/models/mlp:predict", {"instances": x.tolist()})[0] == 200
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
