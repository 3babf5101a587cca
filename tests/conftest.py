"""Suite-wide settings: hypothesis draws the same examples on every run (``derandomize``),
so the suite is deterministic from run to run and a failure on CI fails the same way on
a contributor's machine. ``HYPOTHESIS_PROFILE=random`` explores new examples instead.

The suite runs in two parts (README, ``.ci/run``): most of it on two pytest-xdist workers,
then the tests marked ``exclusive`` on their own, because what they check depends on
having the CPUs to themselves (a Ray worker rejoining within its deadline, the native
pool cutting a product into pieces, a server's latency under its own load generator).
``EXCLUSIVE`` lists their files, each with why; a plain ``python -m pytest`` runs both
parts in one process, one test at a time."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import settings

settings.register_profile("deterministic", derandomize=True)
settings.register_profile("random", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "deterministic"))


# Test files (relative to tests/) whose checks need the machine to themselves.
EXCLUSIVE = {
    "distributed": "Ray clusters whose tasks are killed and must rejoin within deadlines",
    "serving": "servers measured under their own load generators; Ray Serve replacing a replica",
    "codegen_cpu/test_pool.py": "the native pool's scheduling (pieces, stragglers) follows the CPUs it gets",
    "runtime/test_progress.py": "a progress line drawn after a delay by a thread of its own",
    "validate/test_model.py": "a model library refused at a timeout",
    "checkpoint/test_checkpoint.py": "saving processes killed at random moments",
    "v1/test_distributed.py": "TF1 programs on Ray tasks",
    "test_examples.py": "the distributed examples on Ray",
    "test_bench.py": "the benchmark's timed rows",
}
_HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark the tests of ``EXCLUSIVE``'s files ``exclusive``."""
    for item in items:
        rel = Path(item.fspath).relative_to(_HERE).as_posix()
        if any(rel == f or rel.startswith(f + "/") for f in EXCLUSIVE):
            item.add_marker(pytest.mark.exclusive)


@pytest.fixture
def jax_x64():
    """JAX with 64-bit types for one test (the module; skipped without JAX), restored after: a
    test that left ``jax_enable_x64`` on made JAX's integers int64 for the tests its xdist
    worker ran next (``jax.nn.dot_product_attention`` then refused int64 lengths)."""
    jax = pytest.importorskip("jax")
    was = jax.config.read("jax_enable_x64")
    jax.config.update("jax_enable_x64", True)
    try:
        yield jax
    finally:
        jax.config.update("jax_enable_x64", was)
