"""Functional indexed updates, JAX's ``x.at[key].set(v)``: a new array with the elements that
``x[key]`` selects replaced (``set``), combined with ``v`` (``add``, ``subtract``,
``multiply``, ``divide``, ``power``, ``min``, ``max``, ``apply``) or read (``get``).

``key`` is any index ``x[key]`` takes. The selected elements are found by indexing an array
of the element positions with the same key (so the rules of ``getitem`` hold: NumPy's
placement of advanced indices, negative indices from the end), and ``v`` broadcasts to the
shape of ``x[key]``, cast to ``x``'s dtype. A key of Python values is resolved while
tracing: an element that ``set`` selects twice takes its last update (NumPy's
``x[key] = v``), and the combining updates apply every update of an element in turn. A
traced key (integer arrays that are data) is clamped into range as ``x[key]`` is; ``add``
and ``subtract`` accumulate repeated entries (``scatter_add``), ``set`` keeps the last of
them, and the other updates need a key of Python values. ``set`` with ints and slices is
one fused pass over ``x`` (each element finds from its indices whether it is selected);
with integer arrays, one gather; with traced ones, two scatter_adds and a select.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from flowjit.ir.dtypes import bool_, int32, int64
from flowjit.ir.errors import FlowjitTypeError
from flowjit.tracer.core import Tracer, user_location
from flowjit.tracer.numpy.conversion import astype
from flowjit.tracer.numpy.creation import full, iota
from flowjit.tracer.numpy.indexing import flat_index, getitem, scatter_add, take
from flowjit.tracer.numpy.layout import broadcast_to, ravel, reshape, shape
from flowjit.tracer.numpy.manipulation import concatenate
from flowjit.tracer.numpy.operands import ArrayLike, as_operand, operand_value
from flowjit.tracer.numpy.sorting_searching import argsort
from flowjit.tracer.numpy.ufuncs import (
    clip,
    divide,
    equal,
    floor_divide,
    greater_equal,
    less,
    logical_and,
    maximum,
    minimum,
    multiply,
    negative,
    not_equal,
    power,
    remainder,
    subtract,
    where,
)

__all__: list[str] = ["at"]

# The keyword arguments of JAX's update methods that only promise something about the key
# (no effect here), and the out-of-range modes that behave as flowjit's indexing does.
_HINTS = ("indices_are_sorted", "unique_indices")
_CLAMPING_MODES = (None, "clip", "promise_in_bounds")


def _traced(key: Any) -> bool:
    parts = key if isinstance(key, (tuple, list)) else (key,)
    return any(isinstance(k, Tracer) or (isinstance(k, (tuple, list)) and _traced(k)) for k in parts)


class _Update:
    """``x.at[key]``: the methods that build the updated array."""

    def __init__(self, x: ArrayLike, key: Any) -> None:
        self.x = operand_value(as_operand(x))
        self.key = key
        self.shape = tuple(shape(self.x))
        self.size = math.prod(self.shape)

    def _check(self, op: str, kwargs: dict) -> None:
        mode = kwargs.pop("mode", None)
        for hint in _HINTS:
            kwargs.pop(hint, None)
        if kwargs:
            raise TypeError(f"x.at[...].{op}() got unexpected keyword arguments {sorted(kwargs)}")
        if mode not in _CLAMPING_MODES:
            raise FlowjitTypeError(f"x.at[...].{op}(mode={mode!r}) at {user_location()}: flowjit clamps "
                                   "out-of-range indices that are data (as x[key] does); leave mode out or "
                                   "give mode='clip'")

    def _positions(self) -> tuple[Any, bool]:
        """The flat positions ``x[key]`` selects, in its shape, and whether they are static."""
        if not _traced(self.key):
            # NumPy resolves a key of Python values: out-of-range entries raise here.
            at = np.arange(self.size, dtype=np.int64).reshape(self.shape)
            try:
                return np.asarray(at[self.key]), True
            except IndexError as e:
                raise IndexError(f"x.at[...] of an array of shape {list(self.shape)} at {user_location()}: "
                                 f"{e}") from None
        if not self.shape:
            return getitem(full((), 0, int64), self.key), False
        flat = flat_index([iota(int64, self.shape, d) for d in range(len(self.shape))], self.shape)
        return getitem(flat, self.key), False

    def _values(self, values: ArrayLike, where_shape: tuple) -> Any:
        v = as_operand(values, "values")
        dtype = as_operand(self.x).dtype
        v = operand_value(v) if v.dtype == dtype else astype(operand_value(v), dtype)
        try:
            return broadcast_to(v, where_shape)
        except Exception:
            raise FlowjitTypeError(f"x.at[...] at {user_location()}: values of shape {list(shape(v))} do not "
                                   f"broadcast to the selected shape {list(where_shape)}") from None

    def get(self, **kwargs: Any) -> Any:
        """``x[key]``."""
        kwargs.pop("fill_value", None)
        self._check("get", kwargs)
        return getitem(self.x, self.key)

    def _basic(self) -> list[tuple[int, int, int]] | None:
        """(start, step, count) per axis of x when the key is ints, slices, None and
        Ellipsis only (an int: its index, step 1, count 1); None for any other key."""
        parts = self.key if isinstance(self.key, tuple) else (self.key,)
        if not all(k is None or k is Ellipsis or isinstance(k, slice) or
                   (isinstance(k, (int, np.integer)) and not isinstance(k, (bool, np.bool_))) for k in parts):
            return None
        named = [k for k in parts if k is not None]
        if Ellipsis in named:
            e = named.index(Ellipsis)
            named = named[:e] + [slice(None)] * (len(self.shape) - len(named) + 1) + named[e + 1:]
        named += [slice(None)] * (len(self.shape) - len(named))
        axes = []
        for k, n in zip(named, self.shape):
            if isinstance(k, slice):
                start, stop, step = k.indices(n)
                axes.append((start, step, len(range(start, stop, step))))
            else:
                axes.append((int(k) % n, 1, 1))
        return axes

    def _set_basic(self, axes: list[tuple[int, int, int]], v: Any) -> Any:
        """``set`` for a key of ints and slices: each element of x tests, from its own
        indices, whether the key selects it and which update it takes (one pass over x, its
        selects and one gather from the updates, fused; no constant of x's size)."""
        counts = tuple(c for _, _, c in axes)
        v = reshape(v, counts)
        inside, ks = None, []
        for d in range(len(self.shape)):
            start, step, count = axes[d]
            if (start, step, count) == (0, 1, self.shape[d]):
                k = iota(int64, self.shape, d)
            else:
                offset = multiply(subtract(iota(int64, self.shape, d), start), 1 if step > 0 else -1)
                hit = logical_and(greater_equal(offset, 0), less(offset, count * abs(step)))
                if abs(step) != 1:
                    hit = logical_and(hit, equal(remainder(offset, abs(step)), 0))
                    offset = floor_divide(offset, abs(step))
                inside = hit if inside is None else logical_and(inside, hit)
                k = clip(offset, 0, count - 1)
            ks.append(k)
        picked = take(ravel(v), flat_index(ks, counts))
        return picked if inside is None else where(inside, picked, self.x)

    def set(self, values: ArrayLike, **kwargs: Any) -> Any:
        """``x`` with ``values`` at ``x[key]``; an element selected twice takes the last."""
        self._check("set", kwargs)
        at, static = self._positions()
        v = ravel(self._values(values, tuple(shape(at))))
        at = at.reshape(-1) if static else ravel(at)
        n = at.size if static else shape(at)[0]
        if n == 0:
            return self.x
        if static:
            axes = self._basic()
            if axes is not None and self.shape:
                return self._set_basic(axes, v)
            # Integer arrays and masks: one gather from x's elements followed by the
            # updates, position p reading p, or size + k where update k is the last to
            # select it (a constant of x's size).
            source = np.arange(self.size, dtype=np.int32 if self.size + n < 2**31 else np.int64)
            source[at] = self.size + np.arange(n)
            return reshape(take(concatenate([ravel(self.x), v]), source), self.shape)
        # In a stable sort of the positions an entry is the last of its element when the
        # next one differs.
        order = argsort(at, kind="stable")
        ranked = take(at, order)
        last_sorted = concatenate([not_equal(ranked[:-1], ranked[1:]), np.ones(1, bool)])
        last = not_equal(scatter_add(full((n,), 0, int32), order, astype(last_sorted, int32)), 0)
        work = as_operand(self.x).dtype
        carried = work if work != bool_ else int32
        # -0.0 + u is u exactly (also for u = -0.0): the one update an element keeps
        # arrives unrounded, the others add -0.0.
        blank = full((), -0.0 if carried.is_float else 0, carried)
        picked = scatter_add(broadcast_to(blank, (self.size,)), at, where(last, astype(v, carried), blank))
        hit = not_equal(scatter_add(full((self.size,), 0, int32), at, astype(last, int32)), 0)
        return reshape(where(hit, astype(picked, work), ravel(self.x)), self.shape)

    def add(self, values: ArrayLike, **kwargs: Any) -> Any:
        """``x`` with ``values`` added at ``x[key]``; repeated elements accumulate."""
        self._check("add", kwargs)
        rows = self.key[0] if isinstance(self.key, tuple) and len(self.key) == 1 else self.key
        if isinstance(rows, Tracer) and rows.dtype.is_int and rows.ndim == 1 and self.shape:
            # Rows at 1-D ids (an embedding's update): one scatter_add along the first axis.
            return scatter_add(self.x, rows, self._values(values, (rows.shape[0], *self.shape[1:])), axis=0)
        at, _ = self._positions()
        v = ravel(self._values(values, tuple(shape(at))))
        return reshape(scatter_add(ravel(self.x), ravel(at), v), self.shape)

    def subtract(self, values: ArrayLike, **kwargs: Any) -> Any:
        """``x`` with ``values`` subtracted at ``x[key]``; repeated elements accumulate."""
        self._check("subtract", kwargs)
        return self.add(negative(values))

    def _combine(self, op: str, fn: Callable[[Any, Any], Any], values: ArrayLike | None, kwargs: dict) -> Any:
        self._check(op, kwargs)
        at, static = self._positions()
        if not static:
            raise FlowjitTypeError(f"x.at[...].{op}() at {user_location()}: with indices that are data, only "
                                   "set, add and subtract are supported (repeated indices would need a scatter "
                                   f"of {op}); index with Python ints, slices or NumPy arrays, or combine "
                                   f"x[key] yourself and .set() the result")
        sel = tuple(at.shape)
        if self._basic() is not None:
            # Ints and slices select each element once: one update of x[key].
            old = getitem(self.x, self.key)
            new = fn(old, None if values is None else self._values(values, sel))
            return self.set(astype(new, as_operand(self.x).dtype))
        v = None if values is None else ravel(self._values(values, sel))
        at = at.reshape(-1)
        out = self.x
        # Each round takes the next occurrence of every selected element, so an element
        # selected k times is combined with its k updates in order: an entry's round is its
        # rank among the entries of its element (stable sort, rank from the group's start).
        order = np.argsort(at, kind="stable")
        ranked = at[order]
        starts = np.r_[0, np.flatnonzero(ranked[1:] != ranked[:-1]) + 1]
        rank = np.empty(at.size, np.int64)
        rank[order] = np.arange(at.size) - np.repeat(starts, np.diff(np.r_[starts, at.size]))
        for r in range(int(rank.max()) + 1 if at.size else 0):
            idx = np.flatnonzero(rank == r)
            pos = at[idx]
            old = take(ravel(out), pos)
            new = astype(fn(old, None if v is None else take(v, idx)), as_operand(self.x).dtype)
            if self.shape:
                out = _Update(out, np.unravel_index(pos, self.shape)).set(new)
            else:
                out = _Update(out, ()).set(reshape(new, ()))
        return out

    def multiply(self, values: ArrayLike, **kwargs: Any) -> Any:
        """``x`` with ``x[key]`` multiplied by ``values``."""
        return self._combine("multiply", multiply, values, kwargs)

    def divide(self, values: ArrayLike, **kwargs: Any) -> Any:
        """``x`` with ``x[key]`` divided by ``values``."""
        return self._combine("divide", divide, values, kwargs)

    def power(self, values: ArrayLike, **kwargs: Any) -> Any:
        """``x`` with ``x[key]`` raised to ``values``."""
        return self._combine("power", power, values, kwargs)

    def min(self, values: ArrayLike, **kwargs: Any) -> Any:
        """``x`` with ``x[key]`` replaced by its minimum with ``values``."""
        return self._combine("min", minimum, values, kwargs)

    def max(self, values: ArrayLike, **kwargs: Any) -> Any:
        """``x`` with ``x[key]`` replaced by its maximum with ``values``."""
        return self._combine("max", maximum, values, kwargs)

    def apply(self, func: Callable[[Any], Any], **kwargs: Any) -> Any:
        """``x`` with ``func`` applied to each element of ``x[key]`` (once per selection)."""
        return self._combine("apply", lambda old, _: func(old), None, kwargs)


class _At:
    """``x.at``: indexed by a key, gives the update methods for ``x[key]``."""

    def __init__(self, x: ArrayLike) -> None:
        self.x = x

    def __getitem__(self, key: Any) -> _Update:
        return _Update(self.x, key)


def at(x: ArrayLike) -> _At:
    """JAX's ``x.at`` for any array: ``fj.at(x)[key].set(v)`` is ``x.at[key].set(v)``, which
    traced arrays have as a property; NumPy arrays outside a trace have no ``.at``, so this
    gives the same updates on them (computed at once, as every fj function outside a trace)."""
    return _At(x)
