"""Shared pieces of the serving tests: small MLPs exported with a symbolic batch dimension,
blessings, and HTTP calls on loopback."""

from __future__ import annotations

import io
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np

import flowjit as fj
from flowjit.serving.repository import BLESSING, find_manifest

ROOT = Path(__file__).resolve().parents[2]


def export_mlp(path: Path, seed: int, hidden: int = 32) -> Path:
    """A 64-HIDDEN-10 softmax MLP of seed ``seed`` exported for f32[B,64] into ``path``."""
    rng = np.random.default_rng(seed)
    w1 = fj.Variable((rng.standard_normal((64, hidden)) * 0.2).astype(np.float32), name="W1")
    w2 = fj.Variable((rng.standard_normal((hidden, 10)) * 0.2).astype(np.float32), name="W2")

    def predict(x):
        return fj.nn.softmax(fj.nn.relu(x @ w1) @ w2, axis=-1)
    fj.export(predict, fj.ShapeDtype(("B", 64), "f32"), path=path, name="mlp")
    return path


def bless(artifact: Path, verdict: str = "BLESSED", digest: str | None = None) -> None:
    """Write the BLESSING.json flowjit validate would write."""
    _, manifest = find_manifest(artifact)
    (artifact / BLESSING).write_text(json.dumps({"verdict": verdict, "digest": digest or manifest["digest"],
                                                 "checks": []}))


def post(url: str, body: Any, content_type: str = "application/json",
         timeout: float = 30) -> tuple[int, Any, bytes]:
    """POST ``body`` (JSON-able, or bytes as they are); (status, headers, body)."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": content_type}, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


def get(url: str, timeout: float = 30) -> tuple[int, bytes]:
    """GET ``url``: (status, body)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def npy(array: np.ndarray) -> bytes:
    """``array`` as an .npy file's bytes."""
    buf = io.BytesIO()
    np.save(buf, array, allow_pickle=False)
    return buf.getvalue()


def free_port() -> int:
    """A free TCP port on loopback."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve_process(models: Path, *args: str) -> tuple[subprocess.Popen, str]:
    """``flowjit serve MODELS`` in a subprocess on a free port; returns once it is ready."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "flowjit.cli", "serve", str(models), "--port", str(port), *args],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env=dict(os.environ, PYTHONPATH=str(ROOT)))
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"flowjit serve exited: {proc.stderr.read().decode()}")
        try:
            if get(f"{url}/readyz", timeout=2)[0] == 200:
                return proc, url
        except OSError:
            pass
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    raise RuntimeError("flowjit serve did not become ready in 60 s")


def wait_for_version(url: str, model: str, version: int, seconds: float = 20) -> None:
    """Wait until ``model``'s default version is ``version``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        status, body = get(f"{url}/v1/models/{model}")
        if status == 200 and json.loads(body)["model_version_status"][0]["version"] == str(version):
            return
        time.sleep(0.05)
    status = get(f"{url}/v1/models/{model}")
    raise AssertionError(f"{model} did not switch to version {version} in {seconds} s: {status}")
