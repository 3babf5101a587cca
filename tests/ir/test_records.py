"""``flowjit.ir.records``: frozen dataclasses whose ``__init__`` is one compiled per count of
fields, renamed per class."""

from __future__ import annotations

import copy
import dataclasses
import inspect
import pickle
import sys
import threading

import pytest

from flowjit.ir.records import compile_records, record


@record
class Point:
    x: int
    y: int = 0


@record
class Named:
    name: str
    where: Point

    def __repr__(self) -> str:   # the body's own method is kept
        return f"<{self.name}>"


@record
class One:
    value: float


@record
class Empty:
    pass


compile_records()


def test_equality_and_hash_are_those_of_the_fields_tuple_whatever_the_count():
    nan = float("nan")
    assert One(nan) == One(nan) and hash(One(nan)) == hash((nan,))   # a tuple's identity rule
    assert One(1.0) != One(2.0) and One(1.0) != Point(1) and repr(One(0.5)) == "One(value=0.5)"
    assert Empty() == Empty() and hash(Empty()) == hash(()) and repr(Empty()) == "Empty()"
    assert Point(1, 2).__eq__((1, 2)) is NotImplemented
    assert Point.__eq__.__qualname__ == "Point.__eq__" and Point.__init__.__qualname__ == "Point.__init__"


def test_records_behave_as_frozen_dataclasses():
    p = Point(1, 2)
    assert p == Point(1, 2) and p != Point(2, 1) and hash(p) == hash(Point(1, 2)) and Point(3).y == 0
    assert repr(p) == "Point(x=1, y=2)" and repr(Named("a", p)) == "<a>"
    assert [f.name for f in dataclasses.fields(Point)] == ["x", "y"]
    assert dataclasses.replace(p, y=5) == Point(1, 5)
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.x = 3
    with pytest.raises(dataclasses.FrozenInstanceError):
        del p.y
    assert pickle.loads(pickle.dumps(Named("b", p))).where == p
    assert Point(1, 2) != (1, 2) and {Point(1, 2): "a"}[Point(1, 2)] == "a"


@record
class Segment:   # two fields, as Point: the same template, its own names
    start: Point
    stop: Point = Point(9, 9)


compile_records()


def test_each_init_takes_its_own_fields_by_name_and_position():
    assert str(inspect.signature(Point)) == "(x, y=0)"
    assert str(inspect.signature(Segment)) == "(start, stop=Point(x=9, y=9))"
    s = Segment(stop=Point(1), start=Point(2))
    assert (s.start, s.stop) == (Point(2), Point(1)) and Segment(Point(0)).stop == Point(9, 9)
    assert Point(y=4, x=3) == Point(3, 4) and vars(Point(1)) == {"x": 1, "y": 0}
    with pytest.raises(TypeError, match="'start'"):
        Segment()
    with pytest.raises(TypeError, match="'z'"):
        Point(1, z=2)


def test_a_default_factory_is_refused():
    with pytest.raises(TypeError, match="default_factory"):
        @record
        class Bad:
            items: list = dataclasses.field(default_factory=list)


def test_threads_recording_and_compiling_at_once_each_get_working_classes():
    # Modules of records import lazily on a program's first call, from any thread.
    errors: list[BaseException] = []
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)

    def work(tag: int) -> None:
        try:
            for i in range(100):
                made = [record(type(f"R{tag}_{i}_{j}", (), {"__annotations__": {"a": "int", "b": "int"}}))
                        for j in range(10)]
                compile_records()
                assert all(cls(1, 2) == cls(1, 2) for cls in made)
        except BaseException as e:  # noqa: BLE001 (reported below)
            errors.append(e)
    try:
        threads = [threading.Thread(target=work, args=(t,)) for t in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    assert not errors, errors[:3]


class _Counted:
    """A field value that counts how often it is hashed."""

    hashed = 0

    def __hash__(self) -> int:
        _Counted.hashed += 1
        return 7


def test_a_record_hashes_its_fields_once_and_never_pickles_the_kept_hash():
    # A loop-IR tree is looked up in memos again and again: each lookup had hashed the whole
    # tree again.
    r = Segment(Point(1, _Counted()))
    _Counted.hashed = 0
    h = hash(r)
    assert hash(r) == h and hash(r.start) == hash(Point(1, r.start.y)) and _Counted.hashed == 2
    # The kept hash is this process's (str hashes are salted per process): a pickle or a copy
    # computes its own.
    s = Segment(Point(1, 2), Point(3, 4))
    hash(s)
    data = pickle.dumps(s)
    assert b"_record_hash" not in data and "_record_hash" not in vars(copy.copy(s))
    assert pickle.loads(data) == s and hash(pickle.loads(data)) == hash(s) == hash(copy.deepcopy(s))
    assert dataclasses.replace(s, stop=Point(3, 5)) != s and dataclasses.asdict(s)["stop"] == {"x": 3, "y": 4}
