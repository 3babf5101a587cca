"""The collector held back while flowjit compiles (runtime.collection): a first call
traces, compiles and runs without a young collection, and every threshold the user had is
back once the last compile in flight ends, whatever the nesting, threads and errors."""

from __future__ import annotations

import gc
import os
import threading

import numpy as np
import pytest

import flowjit as fj
from flowjit.runtime import collection
from flowjit.runtime.collection import COMPILE_THRESHOLD, collection_deferred

DEFAULT = (700, 10, 10)


@pytest.fixture
def thresholds():
    """CPython's default thresholds for the test, the suite's own back after it."""
    kept = gc.get_threshold()
    gc.set_threshold(*DEFAULT)
    yield
    gc.set_threshold(*kept)


def test_a_first_call_compiles_without_a_young_collection(thresholds):
    collections: list[int] = []
    calling = {"now": True}

    def count(phase: str, info: dict) -> None:
        if phase == "start" and calling["now"]:
            collections.append(info["generation"])

    @fj.function
    def step(x, w):
        h = fj.tanh(x @ w + 1.0)
        return (h * h).sum(axis=1) / fj.exp(h).sum(axis=1)

    x = np.random.default_rng(0).standard_normal((8, 16)).astype(np.float32)
    w = np.random.default_rng(1).standard_normal((16, 16)).astype(np.float32)
    gc.collect()   # every generation's count at 0: the call's own collections are what is counted
    gc.callbacks.append(count)
    try:
        got = step(x, w)
        calling["now"] = False
    finally:
        gc.callbacks.remove(count)
    h = np.tanh(x @ w + 1.0)
    np.testing.assert_allclose(got, (h * h).sum(axis=1) / np.exp(h).sum(axis=1), rtol=1e-5)
    # At the default thresholds the trace, the passes and lowering alone collect dozens of
    # times; held back, the one young collection put off runs as the call ends.
    assert collections in ([], [0])
    assert gc.get_threshold() == DEFAULT


def test_nested_and_concurrent_compiles_share_one_raise(thresholds):
    inside, leave = threading.Event(), threading.Event()

    def other() -> None:
        with collection_deferred():
            inside.set()
            leave.wait(10)

    with collection_deferred():
        assert gc.get_threshold() == (COMPILE_THRESHOLD, 10, 10)
        with collection_deferred():
            assert gc.get_threshold()[0] == COMPILE_THRESHOLD
        assert gc.get_threshold()[0] == COMPILE_THRESHOLD
        thread = threading.Thread(target=other)
        thread.start()
        assert inside.wait(10)
    assert gc.get_threshold()[0] == COMPILE_THRESHOLD   # the other thread still compiles
    leave.set()
    thread.join(10)
    assert gc.get_threshold() == DEFAULT
    assert collection._depth == 0


def test_an_error_in_a_compile_gives_the_thresholds_back(thresholds):
    with pytest.raises(ZeroDivisionError):
        with collection_deferred():
            1 / 0
    assert gc.get_threshold() == DEFAULT


@pytest.mark.parametrize("user", [(0, 10, 10), (COMPILE_THRESHOLD * 2, 5, 5)])
def test_a_threshold_the_user_chose_is_left_alone(user):
    kept = gc.get_threshold()
    gc.set_threshold(*user)
    try:
        with collection_deferred():
            assert gc.get_threshold() == user
        assert gc.get_threshold() == user
    finally:
        gc.set_threshold(*kept)


def test_a_threshold_set_during_a_compile_is_kept(thresholds):
    with collection_deferred():
        gc.set_threshold(5000, 10, 10)
    assert gc.get_threshold() == (5000, 10, 10)


def test_the_collector_stays_as_enabled_as_the_user_left_it(thresholds):
    was = gc.isenabled()
    try:
        gc.disable()
        with collection_deferred():
            pass
        assert not gc.isenabled()
        gc.enable()
        with collection_deferred():
            assert gc.isenabled()
        assert gc.isenabled()
    finally:
        (gc.enable if was else gc.disable)()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork is POSIX")
def test_a_child_forked_during_a_compile_gets_the_thresholds_back(thresholds):
    with collection_deferred():
        pid = os.fork()
        if pid == 0:   # the child: none of the parent's compiles runs here
            ok = gc.get_threshold() == DEFAULT and collection._depth == 0
            with collection_deferred():
                ok = ok and gc.get_threshold()[0] == COMPILE_THRESHOLD
            os._exit(0 if ok and gc.get_threshold() == DEFAULT else 1)
        _, status = os.waitpid(pid, 0)
        assert gc.get_threshold()[0] == COMPILE_THRESHOLD   # the parent's compile goes on
    assert os.waitstatus_to_exitcode(status) == 0
    assert gc.get_threshold() == DEFAULT


def test_an_export_compiles_without_a_young_collection(thresholds, tmp_path):
    collections: list[int] = []
    exporting = {"now": True}

    def count(phase: str, info: dict) -> None:
        if phase == "start" and exporting["now"]:
            collections.append(info["generation"])

    def step(x, w):
        return fj.tanh(x @ w + 1.0).sum(axis=1)

    x, w = np.ones((8, 16), np.float32), np.ones((16, 16), np.float32)
    gc.collect()
    gc.callbacks.append(count)
    try:
        fj.export(step, x, w, path=tmp_path)
        exporting["now"] = False
    finally:
        gc.callbacks.remove(count)
    assert collections in ([], [0])
    assert gc.get_threshold() == DEFAULT


def test_a_call_that_compiles_nothing_runs_at_the_users_thresholds(thresholds):
    # A call with a keyword argument takes the dispatch's slow path every time; only the
    # one that traces holds the collector back.
    seen: list[int] = []

    def look(x):
        seen.append(gc.get_threshold()[0])
        return x

    f = fj.function(lambda x, scale: fj.pure_callback(look, fj.ShapeDtype((4,), np.float32), x) * scale)
    x = np.ones(4, np.float32)
    for _ in range(3):
        np.testing.assert_allclose(f(x, scale=2.0), 2 * x)
    assert seen == [COMPILE_THRESHOLD, DEFAULT[0], DEFAULT[0]]


def _fresh_module(tmp_path, monkeypatch, name: str) -> None:
    (tmp_path / f"{name}.py").write_text("TABLE = {i: [i] for i in range(100)}\n")
    monkeypatch.syspath_prepend(str(tmp_path))


def _in_oldest(obj: object) -> bool:
    return any(o is obj for o in gc.get_objects(generation=2))


def test_a_compile_that_imported_modules_moves_the_young_generation_to_the_oldest(thresholds, tmp_path,
                                                                                  monkeypatch):
    _fresh_module(tmp_path, monkeypatch, "fj_collection_probe_a")
    gc.collect()
    with collection_deferred():
        import fj_collection_probe_a  # noqa: F401  (what a first compile's lazy imports do)
        kept = [[i] for i in range(50)]
        ring: list = []
        ring.append(ring)                 # a cycle the compile left behind
        ring_id = id(ring)
        del ring
    # No young collection traced them: they went to the oldest generation as they were.
    assert _in_oldest(kept) and gc.get_freeze_count() == 0
    gc.collect()                          # and a full collection still frees the cycle
    assert not any(id(o) == ring_id and isinstance(o, list) and o and o[0] is o for o in gc.get_objects())
    assert gc.get_threshold() == DEFAULT


def test_a_compile_that_imported_nothing_leaves_the_generations_alone(thresholds):
    gc.collect()
    with collection_deferred():
        kept = [[i] for i in range(50)]
    assert not _in_oldest(kept)


def test_objects_the_user_froze_stay_frozen(thresholds, tmp_path, monkeypatch):
    _fresh_module(tmp_path, monkeypatch, "fj_collection_probe_b")
    gc.collect()
    frozen = [[i] for i in range(10)]
    gc.freeze()
    try:
        count = gc.get_freeze_count()
        with collection_deferred():
            import fj_collection_probe_b  # noqa: F401
            kept = [[i] for i in range(50)]
        assert gc.get_freeze_count() == count and not _in_oldest(frozen) and not _in_oldest(kept)
    finally:
        gc.unfreeze()
