"""``flowjit serve``: compiled models (``flowjit compile`` / ``fj.export``) served over HTTP
from a model repository (``MODELS/NAME/VERSION/``), in TensorFlow Serving's REST form, with
versions pushed under load (``flowjit push``), adaptive batching over the symbolic batch
dimension, Prometheus metrics, and a closed-loop load generator (``flowjit loadtest``).

Needs the ``serving`` extra (Starlette, uvicorn, prometheus-client); ``import flowjit``
never loads it. See docs/serving.md.
"""

from __future__ import annotations

import importlib
from typing import Any

from .batching import Batcher, Overloaded
from .loadtest import loadtest
from .model import BadRequest, LoadedVersion, Signature, VersionRefused
from .repository import BLESSING, READY, PushError, blessing_problem, complete_versions, push, read_blessing

_SERVER_NAMES = ("Config", "Metrics", "Server", "build_app")   # Starlette, uvicorn, prometheus-client behind them

__all__ = ["BLESSING", "READY", "BadRequest", "Batcher", "Config", "LoadedVersion", "Overloaded", "PushError",
           "Server", "Signature", "VersionRefused", "blessing_problem", "build_app", "complete_versions",
           "loadtest", "push", "read_blessing", "Metrics"]


def __getattr__(name: str) -> Any:
    """``Server``, ``Config``, ``Metrics`` and ``build_app``, imported on first use (PEP 562):
    ``flowjit push`` and ``flowjit loadtest`` run without loading the web framework."""
    if name in _SERVER_NAMES:
        return getattr(importlib.import_module("flowjit.serving.server"), name)
    raise AttributeError(f"module 'flowjit.serving' has no attribute {name!r}")
