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

import itertools
import os
import re
from functools import cache
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


def _is_exclusive(rel: str) -> bool:
    return any(rel == f or rel.startswith(f + "/") for f in EXCLUSIVE)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark the tests of ``EXCLUSIVE``'s files ``exclusive``."""
    for item in items:
        if _is_exclusive(Path(item.fspath).relative_to(_HERE).as_posix()):
            item.add_marker(pytest.mark.exclusive)


@cache
def _markexpr_can_select(markexpr: str, exclusive: bool) -> bool:
    """Whether ``-m markexpr`` is true for some test that is (or is not) ``exclusive``,
    whatever its other marks: every assignment of the expression's other names is tried.
    An expression this cannot read (keyword arguments of a mark) selects."""
    names = sorted(set(re.findall(r"[A-Za-z_]\w*", markexpr)) - {"and", "or", "not", "exclusive"})
    if len(names) > 8:
        return True
    for values in itertools.product((False, True), repeat=len(names)):
        try:
            if eval(markexpr, {"__builtins__": {}}, {**dict(zip(names, values)), "exclusive": exclusive}):
                return True
        except Exception:  # noqa: BLE001 - not a plain boolean expression of names
            return True
    return False


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Leave out the test files of the part ``-m`` deselects whole: the exclusive part
    collected the whole suite for its 279 tests (20 s of importing modules, rewriting
    their asserts and building 20,000 items), and each worker of the parallel part imported
    Ray and the servers' modules for tests it never runs."""
    if collection_path.suffix != ".py" or not config.option.markexpr:
        return None
    try:
        rel = collection_path.relative_to(_HERE).as_posix()
    except ValueError:
        return None
    return True if not _markexpr_can_select(config.option.markexpr, _is_exclusive(rel)) else None


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
