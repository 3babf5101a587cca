"""``tile_transposes``: a loop nest that reads an input across its rows runs in square tiles.

A transpose, or any fused kernel that reads ``x[j, i]`` while it writes ``out[i, j]``,
walks its input down a column for each output row: every element read is on another
cache line, and with rows of more than a page each on another page too. The lines of one
column are evicted before the next column, the line's neighbours, comes back for them
once the column is longer than the cache holds, so each element costs a line from memory:
a float32 1024x1024 transpose moved 1.2 GB/s on one thread, a copy 20.

The pass finds each pair of directly nested loops ``for i: for j:`` whose stores move by
at most an element as ``j`` steps (the output is written along its rows) and which loads
some buffer a cache line or more apart as ``j`` steps and less than a line apart as ``i``
steps (its rows run along the outer variable: ``x[j, i]``, a strided ``x[j, 2 * i]``, a
reshape's ``x[0, j * n + i]``). The distances are those of the index expressions (their
``Let`` bindings substituted) evaluated at the middle of the nest at the shapes the kernel
is compiled for. It runs such a nest as tiles of ``TILE_ROWS`` rows by ``TILE_COLUMNS`` columns: ``for
it: for jt: for i in tile: for j in tile``. A tile's input lines (``TILE_COLUMNS`` rows of them) stay in
the first-level cache while its rows are written, so each line is read from memory once.

Guarantees: the same iterations with the same statements, so the same values; only the
order of the (i, j) iterations changes, and only where that order cannot matter: the
inner body is straight-line (bindings and stores, no accumulators, loops or branches),
every store writes an element of its own (its index holds both variables, as indices of
their own or in a sum of products whose strides keep the rows apart: an output flattened
by a reshape, ``out[i * m + j]``), and a buffer
the nest stores to, or one an output may share memory with, is read only at the element
the same iteration stores. The kernel's top-level bindings (a unit axis's ``i = 0``) are
known when the distances are evaluated. The outer tile loop keeps the outer loop's ``parallel`` flag
(one tile row of the output per iteration, so chunks of it split the output by rows as
before) and runs from 0 in steps of 1 to a size (``ceil(n / TILE_ROWS)``), so the program still
splits it over threads. Both loops must start at 0 in steps of 1 and neither may stream;
nests whose extents are below ``MIN_EXTENT`` (known at the concrete shapes) are left as
they were.

A nest that moves elements of 4 bytes and at most adds, subtracts,
multiplies or negates them runs in square tiles of a cache line's elements a side
(``BLOCK_BYTES``) instead, its row loop marked ``block`` (``block_reads`` says how each
load is read): the renderer moves a full tile as vectors, each line of an input read
across rows loaded whole and the tile transposed in registers, and runs the edge tiles'
loops as they are.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from flowjit.ir.dtypes import bool_
from flowjit.lowering.evaluate import evaluate_index
from flowjit.lowering.loops import (
    INDEX,
    Buffer,
    Const,
    Expr,
    Let,
    Load,
    Loop,
    Prim,
    Store,
    Var,
    expressions,
    free_names,
    subexpressions,
    substitute_lets,
)

# A tile's sides, in elements: TILE_ROWS rows of the output (the outer variable, along
# which the input's rows run) by TILE_COLUMNS columns (the inner variable: one input row
# each). The input's rows are often a power of two of bytes apart, so its lines share a
# few sets of the first-level cache; 16 of them (and 16 float32s, a vector's width) held
# against 32: on the Zen 5 machine, in one process alternated, 32x16 took a float32
# 4096x1024 transpose 4.6 -> 3.9 ms (one thread 9.2 -> 6.5), a complex64 1024^2 one 1.8 ->
# 1.6 and |rfft| of 256x1024 1.05 -> 0.91 ms; 16x16 and 32x8 were slower than 32x16.
TILE_ROWS = 32
TILE_COLUMNS = 16
# A cache line: a read that moves a line or more as the inner variable steps reads a line
# per element.
LINE = 64
# A block tile's side, in bytes: a line, so each vector loaded or stored is a whole line.
BLOCK_BYTES = LINE
# The operations a block evaluates on vectors: one LLVM instruction each, the same on a
# vector's lanes as on a scalar.
BLOCK_OPS = frozenset({"add", "sub", "mul", "neg"})
# Below this extent a column's lines stay cached until the next column reads them.
MIN_EXTENT = 64


def tile_transposes(body: tuple, buffers: Sequence[Buffer], shapes: Mapping[str, Sequence[int]],
                    sizes: Mapping[str, int], aliased: Iterable[str] = ()) -> tuple:
    """``body`` (a kernel's statements) with each transposing nest run in tiles (the module
    docstring); ``buffers``: the kernel's; ``shapes``: their dimensions at the shapes the
    kernel is compiled for (a complex buffer's with its parts' 2); ``sizes``: each size
    variable's value there; ``aliased``: the input buffers an output may share memory with."""
    # The kernel's top-level bindings (a unit axis's index, ``i = 0``) are known in every nest.
    top = {x.name: x.value for x in body if isinstance(x, Let)}
    tiler = _Tiler({b.name: b.dtype.itemsize for b in buffers}, shapes, sizes, frozenset(aliased), top)
    return tuple(tiler.statement(s) for s in body)


class _Tiler:
    def __init__(self, itemsize: Mapping[str, int], shapes: Mapping[str, Sequence[int]], sizes: Mapping[str, int],
                 aliased: frozenset, top: Mapping[str, Expr]):
        self.itemsize = itemsize
        self.shapes = shapes
        self.sizes = sizes
        self.aliased = aliased
        self.top = top

    def statement(self, s: object) -> object:
        if not isinstance(s, Loop):
            return s
        inner = s.body[-1] if s.body else None
        if isinstance(inner, Loop) and self.transposing(s, inner):
            return self.tiled(s, inner)
        return Loop(s.var, s.start, s.stop, s.step, tuple(self.statement(x) for x in s.body), s.parallel, s.stream,
                    s.scalar, s.block)

    def extent(self, e: Expr) -> int | None:
        if isinstance(e, Const):
            return int(e.value)
        if isinstance(e, Var):
            return self.sizes.get(e.name)
        if isinstance(e, Prim) and e.op == "mul":
            values = [self.extent(a) for a in e.args]
            return None if None in values else values[0] * values[1]
        return None

    def transposing(self, outer: Loop, inner: Loop) -> bool:
        zero = Const(0, INDEX)
        if (outer.step != 1 or inner.step != 1 or outer.start != zero or inner.start != zero
                or outer.stream or inner.stream or inner.parallel or outer.var in free_names(inner.stop)
                or not all(isinstance(x, Let) for x in outer.body[:-1])
                or not all(isinstance(x, (Let, Store)) for x in inner.body)):
            return False
        n, m = self.extent(outer.stop), self.extent(inner.stop)
        if n is None or m is None or n < MIN_EXTENT or m < MIN_EXTENT:
            return False
        stores = [x for x in inner.body if isinstance(x, Store)]
        if not stores:
            return False
        # Each store writes an element of its own: both variables index it, as indices of
        # their own or in an index the nest's row strides keep apart (an output flattened by
        # a reshape, out[i * m + j] with j < m).
        flat = [x for x in stores if Var(outer.var, INDEX) not in x.index or Var(inner.var, INDEX) not in x.index]
        if any(not _affine_in(x.index, outer.var, inner.var) for x in flat):
            return False
        written = {x.buffer for x in stores}
        loads = [e for e in expressions(outer.body) if isinstance(e, Load)]
        own = {x.index for x in stores}
        if any((e.buffer in written or e.buffer in self.aliased) and e.index not in own for e in loads):
            return False
        lets = {**self.top, **{x.name: x.value for x in (*outer.body[:-1], *inner.body) if isinstance(x, Let)}}
        point = {outer.var: n // 2, inner.var: m // 2}

        def steps(buffer: str, index: tuple) -> tuple[int, int] | None:
            """How far, in bytes, the element read or written moves as i and as j step by one."""
            at = [self.offset(buffer, index, lets, {outer.var: point[outer.var] + di, inner.var: point[inner.var] + dj})
                  for di, dj in ((0, 0), (1, 0), (0, 1))]
            if None in at:
                return None
            size = self.itemsize[buffer]
            return abs(at[1] - at[0]) * size, abs(at[2] - at[0]) * size

        out_steps = [steps(x.buffer, x.index) for x in stores]
        if any(st is None or st[1] > 2 * self.itemsize[x.buffer] for st, x in zip(out_steps, stores)):
            return False
        if any(st[1] == 0 or st[0] < m * st[1] for st, x in zip(out_steps, stores) if x in flat):
            return False
        for e in loads:
            st = steps(e.buffer, e.index)
            if st is not None and st[1] >= LINE and st[0] < LINE:
                return True
        return False

    def offset(self, buffer: str, index: tuple, lets: Mapping[str, Expr], at: Mapping[str, int]) -> int | None:
        """The row-major position of ``buffer[index]`` with the nest's variables at ``at``,
        any other loop variable at 0 (None: an index this pass cannot evaluate)."""
        shape = self.shapes.get(buffer)
        if shape is None:
            return None
        position = 0
        for e, dim in zip(index, shape):
            value = evaluate_index(substitute_lets(e, lets), {**self.sizes, **at})
            if value is None:
                return None
            position = position * dim + value
        return position

    def tiled(self, outer: Loop, inner: Loop) -> Loop:
        i_tile, j_tile = f"{outer.var}_tile", f"{inner.var}_tile"
        size = _block_itemsize(outer, inner)
        block = BLOCK_BYTES // size if size else 0
        rows, columns = (block, block) if block else (TILE_ROWS, TILE_COLUMNS)
        j_loop = Loop(inner.var, _first(j_tile, columns), _last(j_tile, inner.stop, columns), 1,
                      inner.body, scalar=_moves_data(inner.body))
        i_loop = Loop(outer.var, _first(i_tile, rows), _last(i_tile, outer.stop, rows), 1,
                      (*outer.body[:-1], j_loop), block=block)
        return Loop(i_tile, Const(0, INDEX), _tiles(outer.stop, rows), 1,
                    (Loop(j_tile, Const(0, INDEX), _tiles(inner.stop, columns), 1, (i_loop,)),), outer.parallel)


def _affine_in(index: tuple, i: str, j: str) -> bool:
    """Whether ``index`` names both ``i`` and ``j`` and is made by additions and
    multiplications only (its offsets then move by fixed strides as they step)."""
    names = set().union(*(free_names(e) for e in index)) if index else set()
    if not {i, j} <= names:
        return False
    return all(not isinstance(e, Prim) or e.op in ("add", "mul") for x in index for e in subexpressions(x))


def block_reads(outer: Loop, inner: Loop) -> dict[Load, str] | None:
    """How a block of the tile ``outer`` (its rows; its last statement ``inner`` over its
    columns) reads each of its loads, with their index ``Let``s substituted: ``row`` (its
    last index moves by one as the column steps, the others fixed: a vector a tile row),
    ``column`` (the same along the rows: a vector a tile column, transposed), ``fixed``
    (the column does not move it: one element a tile row). None: the tile cannot run as a
    block: a store not along the columns, a load read
    another way, an operation outside BLOCK_OPS, or a value that reads a loop variable."""
    i, j = outer.var, inner.var
    if not all(isinstance(x, Let) for x in outer.body[:-1]):
        return None
    lets = block_lets(outer, inner)
    statements = (*outer.body[:-1], *inner.body)
    values = {x.name for x in statements if isinstance(x, Let) and x.value.dtype != INDEX}
    reads: dict[Load, str] = {}

    def along(index: tuple, var: str) -> bool:
        """The last index moves by one as ``var`` steps, and ``var`` moves no other."""
        if not index:
            return False
        *lead, last = index
        return _unit(last, var) and not any(var in free_names(e) for e in lead)

    def value(e: Expr) -> bool:
        if isinstance(e, Const):
            return True
        if isinstance(e, Var):
            return e.name in values
        if isinstance(e, Load):
            index = tuple(substitute_lets(x, lets) for x in e.index)
            names = set().union(*(free_names(x) for x in index)) if index else set()
            how = ("row" if along(index, j) else "column" if along(index, i)
                   else "fixed" if j not in names else None)
            if how is None:
                return False
            reads[Load(e.buffer, index, e.dtype)] = how
            return True
        return isinstance(e, Prim) and e.op in BLOCK_OPS and all(value(a) for a in e.args)

    for x in statements:
        if isinstance(x, Store) and not along(tuple(substitute_lets(e, lets) for e in x.index), j):
            return None
        if isinstance(x, (Let, Store)) and not (isinstance(x, Let) and x.name not in values) and not value(x.value):
            return None
    return reads


def lanes_vectors(loop: Loop) -> bool:
    """Whether ``loop`` (``Loop.lanes``) can run as one vector of its lanes: it runs from a
    start to that start plus ``lanes``; its body binds and stores floats and ints only
    (``Let``, ``Store``), every access whose index reads the variable reads it as the last
    index's unit step (``_unit``), the others not at all, and no index reads a value bound
    in the body."""
    if not loop.lanes or loop.step != 1 or not all(isinstance(x, (Let, Store)) for x in loop.body):
        return False
    if not (isinstance(loop.stop, Prim) and loop.stop == Prim("add", (loop.start, Const(loop.lanes, INDEX)), INDEX)
            or isinstance(loop.start, Const) and isinstance(loop.stop, Const)
            and int(loop.stop.value) - int(loop.start.value) == loop.lanes):
        return False
    bound = {x.name for x in loop.body if isinstance(x, Let)}
    var = loop.var

    def lane_wide(index: tuple) -> bool:
        if not index or bound & set().union(*(free_names(e) for e in index)):
            return False
        *lead, last = index
        return not any(var in free_names(e) for e in lead) and (var not in free_names(last) or _unit(last, var))

    for x in loop.body:
        if isinstance(x, Let) and (x.value.dtype == bool_ or x.value.dtype == INDEX):
            return False
        if isinstance(x, Store) and not (lane_wide(x.index) and var in free_names(x.index[-1])):
            return False
        for e in subexpressions(x.value):
            if isinstance(e, Load) and not lane_wide(e.index):
                return False
            if isinstance(e, Prim) and e.dtype == bool_:
                return False
    return True


def block_lets(outer: Loop, inner: Loop) -> dict[str, Expr]:
    """The index ``Let``s of a tile's row loop ``outer`` and of its column loop ``inner``, name
    -> value: what ``block_reads`` substitutes into the indices."""
    return {x.name: x.value for x in (*outer.body[:-1], *inner.body) if isinstance(x, Let) and x.value.dtype == INDEX}


def _block_itemsize(outer: Loop, inner: Loop) -> int | None:
    """The one element size of every value a tile loads, computes and stores, when it is 4
    bytes and ``block_reads`` can run the tile as a block; None otherwise. Eight-byte tiles
    (8 by 8) took a float64 1024x1024 transpose from 0.22-0.31 to 0.34-0.50 ms: its scalar
    tiles were at the copy's bandwidth already."""
    if block_reads(outer, inner) is None:
        return None
    tops = [x.value for x in (*outer.body[:-1], *inner.body)
            if isinstance(x, Store) or (isinstance(x, Let) and x.value.dtype != INDEX)]
    dtypes = {e.dtype for v in tops for e in _value_nodes(v)}
    sizes = {d.itemsize for d in dtypes}
    if len(sizes) != 1 or any(d == bool_ or d.is_complex for d in dtypes):
        return None
    (size,) = sizes
    return size if size == 4 else None


def _value_nodes(e: Expr):
    """``e`` and the operands it computes from, not the indices of its loads."""
    yield e
    if isinstance(e, Prim):
        for a in e.args:
            yield from _value_nodes(a)


def moves_evenly(e: Expr, var: str) -> bool:
    """Whether index ``e`` moves by one constant step as loop variable ``var`` steps: sums and
    differences of terms, each free of ``var`` or ``var`` times terms free of it (what lets a
    block address a load's rows from the first and a step)."""
    if var not in free_names(e) or isinstance(e, Var):
        return True
    if isinstance(e, Prim) and e.op in ("add", "sub"):
        return all(moves_evenly(a, var) for a in e.args)
    if isinstance(e, Prim) and e.op == "mul":
        a, c = e.args
        return any(moves_evenly(x, var) and var not in free_names(y) for x, y in ((a, c), (c, a)))
    return False


def _unit(e: Expr, var: str) -> bool:
    """``e`` is ``var`` plus or minus terms that do not read it."""
    if isinstance(e, Var):
        return e.name == var
    if isinstance(e, Prim) and e.op in ("add", "sub") and len(e.args) == 2:
        a, b = e.args
        if _unit(a, var) and var not in free_names(b):
            return True
        return e.op == "add" and _unit(b, var) and var not in free_names(a)
    return False


def _moves_data(body: tuple) -> bool:
    """Whether a tile's inner loop mostly moves elements: at most one arithmetic operation
    (on the values, not their indices) per element stored. Its loads are rows apart, so a
    vector's lanes are gathered one by one, no faster than scalar loads; vectorizing it pays
    only for the arithmetic it vectorizes too."""
    stores = sum(isinstance(x, Store) for x in body)
    values = [x.value for x in body if isinstance(x, (Let, Store))]
    work = sum(1 for v in values for e in subexpressions(v)
               if isinstance(e, Prim) and e.dtype != INDEX and e.dtype != bool_)
    return work <= stores


def _tiles(n: Expr, side: int) -> Expr:
    if isinstance(n, Const):
        return Const(-(-int(n.value) // side), INDEX)
    return Prim("idiv", (Prim("add", (n, Const(side - 1, INDEX)), INDEX), Const(side, INDEX)), INDEX)


def _first(tile: str, side: int) -> Expr:
    return Prim("mul", (Var(tile, INDEX), Const(side, INDEX)), INDEX)


def _last(tile: str, n: Expr, side: int) -> Expr:
    return Prim("min", (Prim("add", (_first(tile, side), Const(side, INDEX)), INDEX), n), INDEX)
