"""Functional indexed updates, JAX's ``x.at[key].set(v)``: a new array with the elements that
``x[key]`` selects replaced (``set``), combined with ``v`` (``add``, ``subtract``,
``multiply``, ``divide``, ``power``, ``min``, ``max``, ``apply``) or read (``get``).

``key`` is any index ``x[key]`` takes. The selected elements are found by indexing an array
of the element positions with the same key (so the rules of ``getitem`` hold: NumPy's
placement of advanced indices, negative indices from the end), and ``v`` broadcasts to the
shape of ``x[key]``, cast to ``x``'s dtype. A key of Python values is resolved while
tracing: an element that ``set`` selects twice takes its last update (NumPy's
``x[key] = v``), and the combining updates apply every update of an element in turn. With a
traced key (integer arrays that are data) ``add`` and ``subtract`` accumulate repeated
entries (``scatter_add``), ``set`` keeps the last of them, and the other updates need a key
of Python values. Out-of-range indices behave as in JAX: after a negative index counts from
the end, an update whose index is still out of range is dropped (``mode="clip"`` clamps it
into range instead), ``get`` clamps and ``get(mode="fill")`` gives ``fill_value`` there. ``set`` with ints and slices is
one fused pass over ``x`` (each element finds from its indices whether it is selected);
with integer arrays, one gather; with traced ones, two scatter_adds and a select, and for whole
rows at 1-D traced ids a sort of the ids, one integer scatter over the rows and one pass over x.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from flowjit.ir.dtypes import bool_, int32, int64
from flowjit.ir.errors import FlowjitTypeError
from flowjit.tracer.core import Tracer, user_location
from flowjit.tracer.numpy.conversion import astype
from flowjit.tracer.numpy.creation import full, iota
from flowjit.tracer.numpy.indexing import _classify_index, flat_index, getitem, scatter_add, take
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
    logical_or,
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
# (no effect here), and JAX's out-of-range modes: an update's default drops what is out of
# range, get's clamps it ("promise_in_bounds" is taken as "clip": the cheaper rule).
_HINTS = ("indices_are_sorted", "unique_indices")
_DROPPING_MODES = ("drop", "fill")
_CLAMPING_MODES = ("clip", "promise_in_bounds")


def _traced(key: Any) -> bool:
    parts = key if isinstance(key, (tuple, list)) else (key,)
    return any(isinstance(k, Tracer) or (isinstance(k, (tuple, list)) and _traced(k)) for k in parts)


def _counted(ids: Any, n: int) -> tuple[Any, Any]:
    """Traced integer ids along an axis of size n counted from the end where negative (NumPy's
    and JAX's rule), and whether each then lies in [0, n): an update that would be dropped."""
    counted = where(less(ids, 0), ids + n, ids)
    return counted, logical_and(greater_equal(counted, 0), less(counted, n))


def _blank(dtype: Any) -> Any:
    """The value whose addition leaves every element as it was: -0.0 for floats (0.0 + -0.0
    is 0.0, -0.0 + -0.0 is -0.0), else 0."""
    return full((), -0.0 if dtype.is_inexact else 0, dtype)


class _Update:
    """``x.at[key]``: the methods that build the updated array."""

    def __init__(self, x: ArrayLike, key: Any) -> None:
        self.x = operand_value(as_operand(x))
        self.key = key
        self.shape = tuple(shape(self.x))
        self.size = math.prod(self.shape)

    def _mode(self, op: str, kwargs: dict) -> bool:
        """Checks the keyword arguments; whether out-of-range indices drop (else clamp)."""
        mode = kwargs.pop("mode", None)
        for hint in _HINTS:
            kwargs.pop(hint, None)
        if kwargs:
            raise TypeError(f"x.at[...].{op}() got unexpected keyword arguments {sorted(kwargs)}")
        if mode is not None and mode not in _DROPPING_MODES + _CLAMPING_MODES:
            raise FlowjitTypeError(f"x.at[...].{op}(mode={mode!r}) at {user_location()}: mode is one of "
                                   "'drop', 'fill', 'clip' and 'promise_in_bounds'")
        return mode in _DROPPING_MODES or (mode is None and op != "get")

    def _bounded_key(self, drop: bool) -> tuple[tuple, tuple[int, ...]]:
        """The key with each integer index counted from the end when negative and, if still out
        of range, clamped into it or (``drop``) pointed one past the axis's end; and the shape
        of the positions that key indexes: x's, one longer along each axis that may drop."""
        parts = self.key if isinstance(self.key, tuple) else (self.key,)
        if _traced([p for p in parts if isinstance(p, (tuple, list))]):
            return parts, self.shape  # a sequence holding traced entries: getitem's own rules
        entries = [_classify_index(p) for p in parts]
        ell = next((i for i, (kind, _) in enumerate(entries) if kind == "ellipsis"), len(entries))
        consumed = sum(v.ndim if kind == "mask" else kind in ("slice", "int", "array") for kind, v in entries)
        bounded, padded = [], list(self.shape)
        d = 0
        for i, (kind, v) in enumerate(entries):
            if i == ell:
                d += len(self.shape) - consumed
            if kind in ("int", "array") and d < len(self.shape):
                n = self.shape[d]
                if isinstance(v, Tracer) and not drop:
                    pass  # getitem and scatter_add count from the end and clamp the same way
                elif isinstance(v, Tracer):
                    counted, inside = _counted(v, n)
                    v = where(inside, counted, n)
                else:
                    counted = np.where(np.asarray(v) < 0, np.asarray(v) + n, v)
                    inside = (counted >= 0) & (counted < n)
                    v = np.where(inside, counted, n) if drop else np.clip(counted, 0, n - 1)
                    v = int(v) if kind == "int" else v
                if drop:
                    padded[d] = n + 1
            bounded.append(None if kind == "none" else Ellipsis if kind == "ellipsis" else
                           np.bool_(v) if kind == "bool0" else v)
            d += v.ndim if kind == "mask" else kind in ("slice", "int", "array")
        return tuple(bounded), tuple(padded)

    def _positions(self, drop: bool) -> tuple[Any, bool, bool]:
        """The flat positions ``x[key]`` selects, in its shape, whether they are static, and
        whether any may be -1: an entry whose update is dropped."""
        key, padded = self._bounded_key(drop)
        may_drop = padded != self.shape
        if not _traced(key):
            # NumPy resolves a key of Python values.
            at = np.full(padded, -1, dtype=np.int64)
            at[tuple(slice(0, n) for n in self.shape)] = np.arange(self.size).reshape(self.shape)
            try:
                return np.asarray(at[key]), True, may_drop
            except IndexError as e:
                raise IndexError(f"x.at[...] of an array of shape {list(self.shape)} at {user_location()}: "
                                 f"{e}") from None
        if not self.shape:
            return getitem(full((), 0, int64), key), False, False
        iotas = [iota(int64, padded, d) for d in range(len(padded))]
        flat = flat_index(iotas, self.shape)
        past = [equal(iotas[d], n) for d, n in enumerate(self.shape) if padded[d] != n]
        if past:
            flat = where(functools.reduce(logical_or, past), -1, flat)
        return getitem(flat, key), False, may_drop

    def _values(self, values: ArrayLike, where_shape: tuple) -> Any:
        v = as_operand(values, "values")
        dtype = as_operand(self.x).dtype
        v = operand_value(v) if v.dtype == dtype else astype(operand_value(v), dtype)
        try:
            return broadcast_to(v, where_shape)
        except Exception:
            raise FlowjitTypeError(f"x.at[...] at {user_location()}: values of shape {list(shape(v))} do not "
                                   f"broadcast to the selected shape {list(where_shape)}") from None

    def get(self, fill_value: Any = None, **kwargs: Any) -> Any:
        """``x[key]``: out-of-range indices clamped, or with ``mode="fill"`` giving
        ``fill_value`` (NaN for floats, the smallest signed or largest unsigned integer, True)."""
        if not self._mode("get", kwargs):
            return getitem(self.x, self._bounded_key(False)[0])
        at, static, _ = self._positions(True)
        dtype = as_operand(self.x).dtype
        if fill_value is None:
            fill_value = (np.nan if dtype.is_inexact else True if dtype.is_bool else
                          np.iinfo(dtype.np).max if dtype.is_unsigned else np.iinfo(dtype.np).min)
        inside = at >= 0 if static else greater_equal(at, 0)
        picked = take(ravel(self.x), np.maximum(at, 0) if static else maximum(at, 0))
        return where(inside, picked, astype(full((), fill_value), dtype))

    def _basic(self, key: tuple) -> list[tuple[int, int, int]] | None:
        """(start, step, count) per axis of x when ``key`` (in range) is ints, slices, None
        and Ellipsis only (an int: its index, step 1, count 1); None for any other key."""
        parts = key
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
        drop = self._mode("set", kwargs)
        rows = self._row_ids()
        if rows is not None:
            return self._set_rows(rows, values, drop)
        at, static, may_drop = self._positions(drop)
        v = ravel(self._values(values, tuple(shape(at))))
        if static:
            at = at.reshape(-1)
            kept = np.flatnonzero(at >= 0)
            if kept.size < at.size:
                at, v = at[kept], take(v, kept)
            elif self.shape and at.size and (axes := self._basic(self._bounded_key(drop)[0])) is not None:
                return self._set_basic(axes, v)
            if at.size == 0:
                return self.x
            # Integer arrays and masks: one gather from x's elements followed by the
            # updates, position p reading p, or size + k where update k is the last to
            # select it (a constant of x's size).
            n = at.size
            source = np.arange(self.size, dtype=np.int32 if self.size + n < 2**31 else np.int64)
            source[at] = self.size + np.arange(n)
            return reshape(take(concatenate([ravel(self.x), v]), source), self.shape)
        at = ravel(at)
        n = shape(at)[0]
        if n == 0:
            return self.x
        # In a stable sort of the positions an entry is the last of its element when the
        # next one differs.
        order = argsort(at, kind="stable")
        ranked = take(at, order)
        last_sorted = concatenate([not_equal(ranked[:-1], ranked[1:]), np.ones(1, bool)])
        last = not_equal(scatter_add(full((n,), 0, int32), order, astype(last_sorted, int32)), 0)
        if may_drop:  # a dropped entry (position -1) is nobody's last
            last = logical_and(last, greater_equal(at, 0))
            at = maximum(at, 0)
        work = as_operand(self.x).dtype
        carried = work if work != bool_ else int32
        # -0.0 + u is u exactly (also for u = -0.0): the one update an element keeps
        # arrives unrounded, the others add -0.0.
        blank = _blank(carried)
        picked = scatter_add(broadcast_to(blank, (self.size,)), at, where(last, astype(v, carried), blank))
        hit = not_equal(scatter_add(full((self.size,), 0, int32), at, astype(last, int32)), 0)
        return reshape(where(hit, astype(picked, work), ravel(self.x)), self.shape)

    def _row_ids(self) -> Any:
        """The key when it is one 1-D array of traced ids along the first axis (an
        embedding table's rows), else None."""
        rows = self.key[0] if isinstance(self.key, tuple) and len(self.key) == 1 else self.key
        if isinstance(rows, Tracer) and rows.dtype.is_int and rows.ndim == 1 and self.shape:
            return rows
        return None

    def _set_rows(self, rows: Any, values: ArrayLike, drop: bool) -> Any:
        """``set`` of whole rows at traced ids: the ids (not x's elements) are sorted to find
        the last update of each row, one integer scatter over the rows records it, and one
        pass over x takes each row from x or from its winning update."""
        n = self.shape[0]
        m = rows.shape[0]
        v = self._values(values, (m, *self.shape[1:]))
        if m == 0:
            return self.x
        counted, inside = _counted(rows, n)
        target = clip(counted, 0, n - 1)
        if drop:  # a dropped entry sorts apart (-1) and wins nothing
            target = where(inside, target, -1)
        order = argsort(target, kind="stable")
        ranked = take(target, order)
        last_sorted = concatenate([not_equal(ranked[:-1], ranked[1:]), np.ones(1, bool)])
        last = not_equal(scatter_add(full((m,), 0, int32), order, astype(last_sorted, int32)), 0)
        if drop:
            last = logical_and(last, greater_equal(target, 0))
        index = int32 if m < 2**31 - 1 else int64
        number = astype(iota(int64, (m,), 0) + 1, index)
        # Row r's winner: 1 + the position of its last update, 0 where none reaches it.
        winner = scatter_add(full((n,), 0, index), maximum(target, 0), where(last, number, astype(0, index)))
        row_shape = (n,) + (1,) * (len(self.shape) - 1)
        picked = take(v, maximum(winner - 1, 0), axis=0)
        return where(reshape(greater_equal(winner, 1), row_shape), picked, self.x)

    def add(self, values: ArrayLike, **kwargs: Any) -> Any:
        """``x`` with ``values`` added at ``x[key]``; repeated elements accumulate."""
        drop = self._mode("add", kwargs)
        blank = _blank(as_operand(self.x).dtype)
        rows = self._row_ids()
        if rows is not None:
            # Rows at 1-D ids (an embedding's update): one scatter_add along the first axis,
            # which counts negative ids from the end and clamps the rest; a dropped row adds
            # -0.0, which leaves every element as it was.
            v = self._values(values, (rows.shape[0], *self.shape[1:]))
            if drop:
                n = self.shape[0]
                inside = _counted(rows, n)[1]
                v = where(reshape(inside, (-1,) + (1,) * (len(self.shape) - 1)), v, blank)
            return scatter_add(self.x, rows, v, axis=0)
        at, static, may_drop = self._positions(drop)
        v = ravel(self._values(values, tuple(shape(at))))
        if static:
            at = at.reshape(-1)
            kept = np.flatnonzero(at >= 0)
            if kept.size == 0:
                return self.x
            if kept.size < at.size:
                at, v = at[kept], take(v, kept)
        else:
            at = ravel(at)
            if may_drop:
                v = where(greater_equal(at, 0), v, blank)
                at = maximum(at, 0)
        return reshape(scatter_add(ravel(self.x), at, v), self.shape)

    def subtract(self, values: ArrayLike, **kwargs: Any) -> Any:
        """``x`` with ``values`` subtracted at ``x[key]``; repeated elements accumulate."""
        drop = self._mode("subtract", kwargs)
        return self.add(negative(values), mode="drop" if drop else "clip")

    def _combine(self, op: str, fn: Callable[[Any, Any], Any], values: ArrayLike | None, kwargs: dict) -> Any:
        drop = self._mode(op, kwargs)
        at, static, _ = self._positions(drop)
        if not static:
            raise FlowjitTypeError(f"x.at[...].{op}() at {user_location()}: with indices that are data, only "
                                   "set, add and subtract are supported (repeated indices would need a scatter "
                                   f"of {op}); index with Python ints, slices or NumPy arrays, or combine "
                                   f"x[key] yourself and .set() the result")
        sel = tuple(at.shape)
        key = self._bounded_key(drop)[0]
        at = at.reshape(-1)
        kept = np.flatnonzero(at >= 0)
        if kept.size == at.size and self._basic(key) is not None:
            # Ints and slices select each element once: one update of x[key].
            old = getitem(self.x, key)
            new = fn(old, None if values is None else self._values(values, sel))
            return self.set(astype(new, as_operand(self.x).dtype), mode="clip")
        v = None if values is None else ravel(self._values(values, sel))
        if kept.size < at.size:
            at, v = at[kept], None if v is None else take(v, kept)
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
