"""The one place flowjit imports Ray: with the environment it needs to stay on loopback,
and a clear error naming the extra when it is not installed."""

from __future__ import annotations

import os

# Ray reads these when it is imported. The second makes a local runtime take 127.0.0.1 as
# its node address, so every server it starts listens on loopback only (by default they
# listen on every interface); an internal knob of Ray, checked with Ray 2.60.
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

try:
    import ray
except ImportError as e:  # pragma: no cover - exercised in a subprocess that hides Ray
    raise ImportError("flowjit.distributed runs on Ray, which is not installed: "
                      "pip install 'flowjit[distributed]' (or pip install 'ray>=2.9')") from e

__all__ = ["ray"]
