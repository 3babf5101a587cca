"""One local Ray runtime for the whole test session (starting one takes seconds): the
clusters of the tests start their tasks on it and leave it running."""

from __future__ import annotations

import pytest

# Enough logical CPUs for the largest cluster a test asks for (2 ps + 4 workers).
SESSION_CPUS = 6


@pytest.fixture(scope="session")
def ray_address():
    # flowjit.distributed first: it sets what Ray reads at import (loopback only) before importing it.
    fjd = pytest.importorskip("flowjit.distributed", reason="the distributed tests need the distributed extra (Ray)",
                              exc_type=ImportError)
    init_local, ray = fjd.init_local, fjd.ray
    if ray.is_initialized():
        yield ray.get_runtime_context().gcs_address
        return
    address = init_local(SESSION_CPUS)
    yield address
    ray.shutdown()
