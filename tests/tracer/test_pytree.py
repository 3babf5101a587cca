"""Pytree flatten/unflatten round trips and structure equality."""

from __future__ import annotations

import collections

from hypothesis import given
from hypothesis import strategies as st

from flowjit.tracer import pytree

Point = collections.namedtuple("Point", "x y")

leaves = st.integers() | st.floats(allow_nan=False)
trees = st.recursive(
    leaves | st.none(),
    lambda kids: st.lists(kids, max_size=3) | st.tuples(kids, kids)
    | st.dictionaries(st.text(max_size=3), kids, max_size=3) | st.builds(Point, kids, kids),
    max_leaves=12)


@given(trees)
def test_round_trip(tree):
    flat, td = pytree.flatten(tree)
    assert pytree.unflatten(td, flat) == tree
    assert td.num_leaves == len(flat)
    again, td2 = pytree.flatten(pytree.unflatten(td, flat))
    assert td2 == td and hash(td2) == hash(td)


def test_dict_order_does_not_matter_and_paths():
    a = pytree.flatten({"b": 1, "a": 2})
    b = pytree.flatten({"a": 2, "b": 1})
    assert a == b and a[0] == [2, 1]
    paths, _ = pytree.flatten_with_paths({"w": [1, 2], "p": Point(3, None)}, "params")
    assert [p for p, _ in paths] == ["params['p'].x", "params['w'][0]", "params['w'][1]"]


def test_structure_strings():
    _, td = pytree.flatten({"a": (1,), "b": [1, None]})
    assert str(td) == "{'a': (*,), 'b': [*, None]}"


def test_tree_map():
    assert pytree.tree_map(lambda a, b: a + b, {"x": [1, 2]}, {"x": [10, 20]}) == {"x": [11, 22]}
