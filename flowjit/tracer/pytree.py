"""Pytrees: nested tuples, lists, dicts and namedtuples of leaves, as in JAX.

``flatten`` gives the leaves in a fixed order (dict keys sorted) and a hashable
``TreeDef`` that ``unflatten`` rebuilds the structure from. ``None`` is an empty node.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class TreeDef:
    """The structure of a pytree without its leaves; equal structures compare equal."""

    kind: str  # "leaf", "none", "tuple", "list", "dict", "namedtuple"
    meta: Any = None  # dict keys, or the namedtuple class
    children: tuple[TreeDef, ...] = ()

    @property
    def num_leaves(self) -> int:
        if self.kind == "leaf":
            return 1
        return sum(c.num_leaves for c in self.children)

    def __str__(self) -> str:
        if self.kind == "leaf":
            return "*"
        if self.kind == "none":
            return "None"
        inner = [str(c) for c in self.children]
        if self.kind == "tuple":
            return "(" + ", ".join(inner) + ("," if len(inner) == 1 else "") + ")"
        if self.kind == "list":
            return "[" + ", ".join(inner) + "]"
        if self.kind == "dict":
            return "{" + ", ".join(f"{k!r}: {c}" for k, c in zip(self.meta, inner)) + "}"
        return f"{self.meta.__name__}(" + ", ".join(inner) + ")"


LEAF = TreeDef("leaf")


def is_namedtuple(x: Any) -> bool:
    return isinstance(x, tuple) and hasattr(type(x), "_fields")


def flatten(tree: Any, is_leaf: Callable[[Any], bool] | None = None) -> tuple[list[Any], TreeDef]:
    """The leaves of ``tree`` in order, and its structure."""
    leaves: list[Any] = []
    return leaves, _flatten(tree, leaves, "", None, is_leaf)


def flatten_with_paths(tree: Any, prefix: str = "") -> tuple[list[tuple[str, Any]], TreeDef]:
    """Like ``flatten`` but each leaf comes with its path, e.g. ``params['w']`` or ``xs[0]``."""
    leaves: list[tuple[str, Any]] = []
    return leaves, _flatten(tree, leaves, prefix, True, None)


def _flatten(x: Any, out: list, path: str, with_paths: bool | None, is_leaf) -> TreeDef:
    def add(leaf_path: str, leaf: Any) -> None:
        out.append((leaf_path, leaf) if with_paths else leaf)

    if is_leaf is not None and is_leaf(x):
        add(path, x)
        return LEAF
    if x is None:
        return TreeDef("none")
    if is_namedtuple(x):
        kids = tuple(_flatten(v, out, f"{path}.{f}", with_paths, is_leaf) for f, v in zip(x._fields, x))
        return TreeDef("namedtuple", type(x), kids)
    if isinstance(x, (tuple, list)):
        kids = tuple(_flatten(v, out, f"{path}[{i}]", with_paths, is_leaf) for i, v in enumerate(x))
        return TreeDef("tuple" if isinstance(x, tuple) else "list", None, kids)
    if isinstance(x, dict):
        try:
            keys = tuple(sorted(x))
        except TypeError:
            keys = tuple(x)
        kids = tuple(_flatten(x[k], out, f"{path}[{k!r}]", with_paths, is_leaf) for k in keys)
        return TreeDef("dict", keys, kids)
    add(path, x)
    return LEAF


def arrays_key(x: Any, leaves: list[np.ndarray]) -> Any:
    """The fast-path cache key of ``x`` made of dicts (sortable keys), lists, tuples and None
    around NumPy arrays, appending its arrays to ``leaves`` in ``flatten``'s order (the same
    walk, for the trees it covers): its structure with each array's shape and dtype, a
    call's cache key without leaf paths. None for anything else (a Python number, a
    namedtuple, a dict of unsortable keys, another array type), which ``flatten`` handles."""
    t = type(x)
    if t is np.ndarray:
        leaves.append(x)
        return x.shape, x.dtype
    if t is dict:
        try:
            keys = tuple(sorted(x))
        except TypeError:
            return None
        kids = []
        for k in keys:
            kid = arrays_key(x[k], leaves)
            if kid is None:
                return None
            kids.append(kid)
        return "dict", keys, tuple(kids)
    if t is tuple or t is list:
        kids = []
        for v in x:
            kid = arrays_key(v, leaves)
            if kid is None:
                return None
            kids.append(kid)
        return t.__name__, tuple(kids)
    if x is None:
        return "none"
    return None


def unflatten(treedef: TreeDef, leaves: Iterable[Any]) -> Any:
    """Rebuild the structure ``treedef`` with ``leaves`` in order."""
    it = iter(leaves)
    out = _unflatten(treedef, it)
    if next(it, _END) is not _END:
        raise ValueError(f"too many leaves for structure {treedef}")
    return out


_END = object()


def _unflatten(t: TreeDef, it) -> Any:
    if t.kind == "leaf":
        x = next(it, _END)
        if x is _END:
            raise ValueError("too few leaves for the structure")
        return x
    if t.kind == "none":
        return None
    kids = [_unflatten(c, it) for c in t.children]
    if t.kind == "tuple":
        return tuple(kids)
    if t.kind == "list":
        return kids
    if t.kind == "dict":
        return dict(zip(t.meta, kids))
    return t.meta(*kids)


def tree_map(fn: Callable[..., Any], tree: Any, *rest: Any) -> Any:
    """Apply ``fn`` to the leaves of ``tree`` (and the matching leaves of ``rest``)."""
    leaves, td = flatten(tree)
    others = [flatten(r)[0] for r in rest]
    return unflatten(td, [fn(x, *ys) for x, *ys in zip(leaves, *others)])
