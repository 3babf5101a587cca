"""The loop-level IR's data structures: expressions, statements and the kernel.

Every node is an immutable dataclass (``flowjit.ir.records.record``), so expressions hash and compare by
value (the lowering memoizes on them) and a Kernel is immutable once built. Expressions
are typed: every node has a ``dtype``; index arithmetic is int64. Statements nest like a
C loop nest.
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np

from flowjit.ir.dtypes import DType, int64
from flowjit.ir.records import compile_records, record

INDEX = int64  # the dtype of loop variables, sizes and index expressions
_DOUBLE = struct.Struct("<d")


# ---- expressions ----------------------------------------------------------------------------
@record
class Const:
    """A literal of ``dtype`` (a Python bool, int or float; NaN and infinities allowed).
    Two are equal when their values have the same bits: -0.0 is not 0.0 (a memo keyed on
    expressions would give both one name), and a NaN equals itself."""

    value: object
    dtype: DType

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not Const:
            return NotImplemented
        return self.dtype == other.dtype and _bits(self.value) == _bits(other.value)  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash((_bits(self.value), self.dtype))


def _bits(value: object) -> object:
    # Any float, a NumPy scalar too, by its float64 bits (the lowering's constants are Python
    # numbers of their dtype's kind: ``scalar.to_python``).
    return _DOUBLE.pack(value) if isinstance(value, (float, np.floating)) else value


@record
class Var:
    """A loop variable, a size variable or a ``Let``-bound name."""

    name: str
    dtype: DType


@record
class Prim:
    """A scalar instruction ``op`` of ``scalar.OPS`` applied to ``args``; result ``dtype``."""

    op: str
    args: tuple
    dtype: DType


@record
class Load:
    """Element ``index`` (one int64 expression per dimension; ``()`` for 0-d) of a buffer."""

    buffer: str
    index: tuple
    dtype: DType


@record
class AccValue:
    """The current value of accumulator ``name`` (for argmax/argmin: the winning position)."""

    name: str
    dtype: DType


Expr = Const | Var | Prim | Load | AccValue


# ---- statements -----------------------------------------------------------------------------
@record
class Loop:
    """``for var in range(start, stop, step): body``; ``parallel``: iterations are
    independent and the renderer may split them across threads. ``stream``: a hint that
    the loop's one store may bypass the cache when the output is large (the CPU renderer's
    non-temporal stores): the body reads inputs only at ``[var]`` and ends storing a float at ``[var]``.
    ``scalar``: a hint that the renderer should not vectorize the loop (its loads are rows
    apart, so a vector's lanes would be gathered one by one, and it computes too little for
    that to pay). ``block``: a transposing tile's row loop (``lowering.tile_transpose``)
    whose last statement loops over the tile's columns; when both run ``block`` iterations
    the renderer may run the tile as ``block`` vectors of ``block`` lanes, each input read
    across rows loaded along its rows and transposed in registers (0: no such tile).
    ``lanes``: the loop runs exactly ``lanes`` iterations and every access in it moves by
    one element along it: the renderer vectorizes it whole, one vector of ``lanes`` (0: no
    such hint)."""

    var: str
    start: Expr
    stop: Expr
    step: int
    body: tuple
    parallel: bool = False
    stream: bool = False
    scalar: bool = False
    block: int = 0
    lanes: int = 0


@record
class Let:
    """Bind ``name`` to ``value`` (in SSA form: each name is bound once in the kernel)."""

    name: str
    value: Expr


@record
class Store:
    """``buffer[index] = value``."""

    buffer: str
    index: tuple
    value: Expr


@record
class Accumulator:
    """Declare accumulator ``name`` of ``kind`` (``scalar.ACCUMULATOR_KINDS``) holding
    ``dtype``, reset to ``start`` here (each time control passes this statement). For
    argmax/argmin ``dtype`` is the compared values' dtype and the value read is the i64
    position of the first winner."""

    name: str
    kind: str
    dtype: DType
    start: Expr


@record
class Update:
    """Combine ``value`` into accumulator ``name`` (``scalar.combine``); ``position``: the
    i64 position of ``value`` for argmax/argmin, None otherwise."""

    name: str
    value: Expr
    position: Expr | None = None


@record
class If:
    """``if cond: then else: orelse``."""

    cond: Expr
    then: tuple
    orelse: tuple = ()


Stmt = Loop | Let | Store | Accumulator | Update | If


# ---- the kernel -----------------------------------------------------------------------------
@record
class Buffer:
    """An array the kernel reads or writes: ``role`` "in" or "out" (an argument), or "temp"
    (scratch the kernel owns for one call, of ``shape``: int64 expressions over the size
    variables); its element dtype and rank (row-major, contiguous; a 0-d buffer is indexed
    with ``()``)."""

    name: str
    role: str
    dtype: DType
    rank: int
    shape: tuple = ()


@record
class SizeVar:
    """An int64 size read at run time: dimension ``dim`` of buffer ``buffer``. Sizes are
    variables, so one kernel serves every shape that lowers to the same loop IR (every
    batch size)."""

    name: str
    buffer: str
    dim: int


@record
class Kernel:
    """One fused group as a loop program: its buffers (inputs first, then outputs), the size
    variables read from their shapes, and the body. ``in_place``: for each output, the
    inputs it may overwrite (same dtype and shape, read only at the output's own index
    before the element is written)."""

    name: str
    buffers: tuple
    sizes: tuple
    body: tuple
    in_place: tuple = ()

    @property
    def inputs(self) -> tuple:
        return tuple(b for b in self.buffers if b.role == "in")

    @property
    def outputs(self) -> tuple:
        return tuple(b for b in self.buffers if b.role == "out")

    @property
    def temps(self) -> tuple:
        """The kernel's own buffers (a reduction's accumulators, a sort's second buffer)."""
        return tuple(b for b in self.buffers if b.role == "temp")

    def buffer(self, name: str) -> Buffer:
        """The buffer called ``name``."""
        return next(b for b in self.buffers if b.name == name)


compile_records()


def loop_count(body: tuple) -> int:
    """How many loops ``body`` holds, nested ones and those under an ``If`` included."""
    n = 0
    for s in body:
        if isinstance(s, Loop):
            n += 1 + loop_count(s.body)
        elif isinstance(s, If):
            n += loop_count(s.then) + loop_count(s.orelse)
    return n


def as_parts(a: Any) -> Any:
    """A complex array (NumPy's, or a device array with NumPy's ``view``) as the float array
    a kernel reads: its parts along a new last axis of 2 (a view, so a kernel's writes land
    in ``a``); any other array as it is. The lowering gives complex buffers this layout."""
    if a.dtype.kind != "c":
        return a
    return a.reshape(*a.shape, 1).view(np.finfo(a.dtype).dtype)


def children(e: Expr) -> tuple:
    """The sub-expressions of ``e``."""
    if isinstance(e, Prim):
        return e.args
    if isinstance(e, Load):
        return e.index
    return ()


def free_names(e: Expr, out: set | None = None) -> set:
    """The names of the variables and accumulators ``e`` reads."""
    out = set() if out is None else out
    if isinstance(e, (Var, AccValue)):
        out.add(e.name)
    for c in children(e):
        free_names(c, out)
    return out


def substitute_lets(e: Expr, lets: dict) -> Expr:
    """``e`` with the ``Let`` names of ``lets`` (name -> bound value) replaced by their
    values, themselves substituted: the expression over the names bound outside them."""
    if isinstance(e, Var) and e.name in lets:
        return substitute_lets(lets[e.name], lets)
    if isinstance(e, Prim):
        return Prim(e.op, tuple(substitute_lets(a, lets) for a in e.args), e.dtype)
    if isinstance(e, Load):
        return Load(e.buffer, tuple(substitute_lets(a, lets) for a in e.index), e.dtype)
    return e


def walk_statements(body: tuple):
    """Every statement of ``body``, the statements nested in loops and branches included,
    each before those nested in it."""
    for s in body:
        yield s
        if isinstance(s, Loop):
            yield from walk_statements(s.body)
        elif isinstance(s, If):
            yield from walk_statements(s.then + s.orelse)


def subexpressions(e: Expr):
    """``e`` and every expression inside it, each before those inside it."""
    yield e
    for c in children(e):
        yield from subexpressions(c)


def own_expressions(s: Stmt) -> tuple:
    """The expressions statement ``s`` holds itself, not those of the statements nested in
    it: a loop's bounds, a branch's condition, a let's value, a store's index and value..."""
    if isinstance(s, Loop):
        return (s.start, s.stop)
    if isinstance(s, If):
        return (s.cond,)
    if isinstance(s, Let):
        return (s.value,)
    if isinstance(s, Accumulator):
        return (s.start,)
    if isinstance(s, Store):
        return (*s.index, s.value)
    return (s.value,) if s.position is None else (s.value, s.position)


def expressions(body: tuple):
    """Every expression of the statements ``body`` and of the statements nested in them,
    sub-expressions included (a renderer's scan for the intrinsics it must declare)."""
    for s in body:
        for e in own_expressions(s):
            yield from subexpressions(e)
        if isinstance(s, Loop):
            yield from expressions(s.body)
        elif isinstance(s, If):
            yield from expressions(s.then)
            yield from expressions(s.orelse)

