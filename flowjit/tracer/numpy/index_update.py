"""Functional indexed updates, JAX's ``x.at[key].set(v)``: a new array with the elements that
``x[key]`` selects replaced (``set``), combined with ``v`` (``add``, ``subtract``,
``multiply``, ``divide``, ``power``, ``min``, ``max``, ``apply``) or read (``get``).

``key`` is any index ``x[key]`` takes. The selected elements are found by indexing an array
of the element positions with the same key (so the rules of ``getitem`` hold: NumPy's
placement of advanced indices, negative indices from the end; a key of integer indices
alone computes the positions from them), and ``v`` broadcasts to the shape of ``x[key]``,
cast to ``x``'s dtype. An element that ``set`` selects twice takes its last update (NumPy's
``x[key] = v``), and the combining updates apply every update of an element in turn: one
scatter of their own operation (``scatter_add``, ``scatter_mul``, ``scatter_max``,
``scatter_min``) whether the key is Python values or data, ``divide`` and ``power`` (as
JAX's) by the product of an element's updates, ``apply`` once per selection. Out-of-range
indices behave as in JAX: after a negative index counts from the end, an update whose
index is still out of range is dropped (``mode="clip"`` clamps it into range instead),
``get`` clamps and ``get(mode="fill")`` gives ``fill_value`` there. ``set`` and the other
updates with ints and slices are one fused pass over ``x`` (each element finds from its
indices whether it is selected); ``set`` with integer arrays is one gather, and with traced
ones an integer scatter_max of each update's position (the last wins) and one pass over x.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from flowjit.ir.dtypes import int32, int64
from flowjit.ir.errors import FlowjitTypeError
from flowjit.tracer.control_flow import while_loop
from flowjit.tracer.core import Tracer, user_location
from flowjit.tracer.numpy import reductions
from flowjit.tracer.numpy.conversion import astype
from flowjit.tracer.numpy.creation import full, iota
from flowjit.tracer.numpy.indexing import (
    _classify_index,
    flat_index,
    getitem,
    scatter_add,
    scatter_max,
    scatter_min,
    scatter_mul,
    take,
)
from flowjit.tracer.numpy.layout import broadcast_to, ravel, reshape, shape
from flowjit.tracer.numpy.manipulation import concatenate
from flowjit.tracer.numpy.operands import ArrayLike, as_operand, operand_value
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


def extreme_value(dtype: Any, high: bool) -> Any:
    """The Python value a minimum (``high``) or maximum with leaves every element of
    ``dtype`` as it was: an infinity for floats, the integer's bound, True or False (what an
    empty segment's minimum or maximum holds)."""
    return (math.inf if high else -math.inf) if dtype.is_inexact else high if dtype.is_bool else \
        (np.iinfo(dtype.np).max if high else np.iinfo(dtype.np).min)


def _last_updates(size: int, targets: Any, valid: Any) -> Any:
    """For each of ``size`` slots, 1 + the position of the last of the 1-D ``targets`` that
    names it (an integer scatter_max of positions: the last update wins, no sort), 0 where
    none does; an entry where ``valid`` (None: all) is false names none."""
    m = shape(targets)[0]
    index = int32 if m < 2**31 - 1 else int64
    number = astype(iota(int64, (m,), 0) + 1, index)
    if valid is not None:
        number = where(valid, number, astype(0, index))
    return scatter_max(full((size,), 0, index), targets, number)


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
        direct = self._index_positions(key, padded)
        if direct is not None:
            return direct, False, may_drop
        iotas = [iota(int64, padded, d) for d in range(len(padded))]
        flat = flat_index(iotas, self.shape)
        past = [equal(iotas[d], n) for d, n in enumerate(self.shape) if padded[d] != n]
        if past:
            flat = where(functools.reduce(logical_or, past), -1, flat)
        return getitem(flat, key), False, may_drop

    def _index_positions(self, key: tuple, padded: tuple) -> Any:
        """For a (bounded) key of integer indices only, on x's first axes, the flat positions
        computed from the indices themselves (-1 where one points past its axis's end: a
        dropped update), in NumPy's shape: the indices' broadcast shape, then the axes the key
        leaves whole. No table of x's positions (x.at[i, j] of a 50,000x64 table had one of
        3.25M i64 written and gathered from). None for any other key."""
        if not isinstance(key, tuple) or not key or len(key) > len(self.shape) or not all(
                isinstance(k, (Tracer, int, np.integer)) or (isinstance(k, np.ndarray) and k.dtype.kind in "iu")
                for k in key):
            return None
        lead, rest = self.shape[:len(key)], self.shape[len(key):]
        parts, past = [], None
        for k, n, p in zip(key, lead, padded):
            k = astype(k, int64) if isinstance(k, Tracer) else np.asarray(k, np.int64)
            if p == n:  # clip mode: traced indices count from the end and clamp as getitem's
                k = clip(where(less(k, 0), k + n, k), 0, n - 1) if isinstance(k, Tracer) else k
            else:
                hit = equal(k, n)
                past = hit if past is None else logical_or(past, hit)
            parts.append(k)
        sel = tuple(np.broadcast_shapes(*(tuple(shape(k)) for k in parts)))
        flat = flat_index([broadcast_to(k, sel) for k in parts], lead)
        if past is not None:
            flat = where(broadcast_to(past, sel), -1, flat)
        if not rest:
            return flat
        inner = math.prod(rest)
        within = reshape(iota(int64, (inner,), 0), (1,) * len(sel) + rest)
        outer = reshape(flat, sel + (1,) * len(rest))
        return where(less(outer, 0), -1, outer * inner + within)

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
        # A dropped entry (position -1) wins nothing.
        winner = _last_updates(self.size, maximum(at, 0), greater_equal(at, 0) if may_drop else None)
        picked = take(v, maximum(winner - 1, 0))
        return reshape(where(greater_equal(winner, 1), picked, ravel(self.x)), self.shape)

    def _row_ids(self) -> Any:
        """The key when it is one 1-D array of traced ids along the first axis (an
        embedding table's rows), else None."""
        rows = self.key[0] if isinstance(self.key, tuple) and len(self.key) == 1 else self.key
        if isinstance(rows, Tracer) and rows.dtype.is_int and rows.ndim == 1 and self.shape:
            return rows
        return None

    def _set_rows(self, rows: Any, values: ArrayLike, drop: bool) -> Any:
        """``set`` of whole rows at traced ids: one integer scatter_max over the rows records
        each row's last update, and one pass over x takes each row from x or from it."""
        n = self.shape[0]
        m = rows.shape[0]
        v = self._values(values, (m, *self.shape[1:]))
        if m == 0:
            return self.x
        counted, inside = _counted(rows, n)
        winner = _last_updates(n, clip(counted, 0, n - 1), inside if drop else None)
        row_shape = (n,) + (1,) * (len(self.shape) - 1)
        picked = take(v, maximum(winner - 1, 0), axis=0)
        return where(reshape(greater_equal(winner, 1), row_shape), picked, self.x)

    def _scatter(self, scatter: Callable[..., Any], neutral: Any, values: ArrayLike, drop: bool) -> Any:
        """``x`` with ``values`` combined into ``x[key]`` by ``scatter`` (add, mul, max, min),
        repeated elements taking each of their updates in order; a dropped update becomes
        ``neutral``, which leaves its element as it was."""
        rows = self._row_ids()
        if rows is not None:
            # Rows at 1-D ids (an embedding's update): one scatter along the first axis, which
            # counts negative ids from the end and clamps the rest.
            v = self._values(values, (rows.shape[0], *self.shape[1:]))
            if drop:
                inside = _counted(rows, self.shape[0])[1]
                v = where(reshape(inside, (-1,) + (1,) * (len(self.shape) - 1)), v, neutral)
            return scatter(self.x, rows, v, axis=0)
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
                v = where(greater_equal(at, 0), v, neutral)
                at = maximum(at, 0)
        return reshape(scatter(ravel(self.x), at, v), self.shape)

    def add(self, values: ArrayLike, **kwargs: Any) -> Any:
        """``x`` with ``values`` added at ``x[key]``; repeated elements accumulate."""
        drop = self._mode("add", kwargs)
        # -0.0 leaves every element as it was (0.0 + -0.0 is 0.0).
        return self._scatter(scatter_add, _blank(as_operand(self.x).dtype), values, drop)

    def subtract(self, values: ArrayLike, **kwargs: Any) -> Any:
        """``x`` with ``values`` subtracted at ``x[key]``; repeated elements accumulate."""
        drop = self._mode("subtract", kwargs)
        return self.add(negative(values), mode="drop" if drop else "clip")

    def _fused(self, fn: Callable[[Any, Any], Any], values: ArrayLike | None, drop: bool) -> Any:
        """``fn(x[key], values)`` set back as one fused update when the key is ints and slices
        in range (each element selected once), else None."""
        key = self._bounded_key(drop)[0]
        if _traced(key) or self._basic(key) is None:
            return None
        at = self._positions(drop)[0]
        if (at < 0).any():
            return None
        new = fn(getitem(self.x, key), None if values is None else self._values(values, tuple(at.shape)))
        return self.set(astype(new, as_operand(self.x).dtype), mode="clip")

    def _combine(self, op: str, fn: Callable[[Any, Any], Any], scatter: Callable[..., Any], neutral: Any,
                 values: ArrayLike, kwargs: dict) -> Any:
        drop = self._mode(op, kwargs)
        fused = self._fused(fn, values, drop)
        return fused if fused is not None else self._scatter(scatter, neutral, values, drop)

    def _by_product(self, op: str, fn: Callable[[Any, Any], Any], values: ArrayLike, kwargs: dict) -> Any:
        # As JAX: x combined with the product of each element's updates (1 where none), so an
        # element selected twice is divided (raised) once, by the product.
        drop = self._mode(op, kwargs)
        ones = broadcast_to(full((), 1, as_operand(self.x).dtype), self.shape)
        return fn(self.x, _Update(ones, self.key).multiply(values, mode="drop" if drop else "clip"))

    def multiply(self, values: ArrayLike, **kwargs: Any) -> Any:
        """``x`` with ``x[key]`` multiplied by ``values``; repeated elements by each in turn."""
        return self._combine("multiply", multiply, scatter_mul, 1, values, kwargs)

    def divide(self, values: ArrayLike, **kwargs: Any) -> Any:
        """``x`` with ``x[key]`` divided by ``values`` (JAX's: by the product of an element's
        updates when it is selected more than once; NumPy's true division's dtype)."""
        return self._by_product("divide", divide, values, kwargs)

    def power(self, values: ArrayLike, **kwargs: Any) -> Any:
        """``x`` with ``x[key]`` raised to ``values`` (JAX's: to the product of an element's
        updates when it is selected more than once)."""
        return self._by_product("power", power, values, kwargs)

    def min(self, values: ArrayLike, **kwargs: Any) -> Any:
        """``x`` with ``x[key]`` replaced by its minimum with ``values``, NaN propagating."""
        d = as_operand(self.x).dtype
        return self._combine("min", minimum, scatter_min, full((), extreme_value(d, True), d), values, kwargs)

    def max(self, values: ArrayLike, **kwargs: Any) -> Any:
        """``x`` with ``x[key]`` replaced by its maximum with ``values``, NaN propagating."""
        d = as_operand(self.x).dtype
        return self._combine("max", maximum, scatter_max, full((), extreme_value(d, False), d), values, kwargs)

    def apply(self, func: Callable[[Any], Any], **kwargs: Any) -> Any:
        """``x`` with ``func`` applied to each element of ``x[key]``, once per selection (an
        element selected twice gets it twice, as JAX's and ``np.ufunc.at``)."""
        drop = self._mode("apply", kwargs)
        fused = self._fused(lambda old, _: func(old), None, drop)
        if fused is not None:
            return fused
        at, static, may_drop = self._positions(drop)
        at = ravel(at) if not static else at.reshape(-1)
        if static:
            at = at[at >= 0]
            counts = np.bincount(at, minlength=self.size).astype(np.int32)
            rounds = int(counts.max()) if at.size else 0
        else:
            hit = astype(greater_equal(at, 0), int32) if may_drop else full(tuple(shape(at)), 1, int32)
            counts = scatter_add(full((self.size,), 0, int32), maximum(at, 0), hit)
            rounds = reductions.max(counts)
        flat = ravel(self.x)
        dtype = as_operand(self.x).dtype

        def step(carry: tuple) -> tuple:
            r, out = carry
            return r + 1, where(less(r, counts), astype(func(out), dtype), out)

        if static:
            for r in range(rounds):
                flat = step((r, flat))[1]
        else:
            flat = while_loop(lambda c: less(c[0], rounds), step, (full((), 0, int32), flat))[1]
        return reshape(flat, self.shape)


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
