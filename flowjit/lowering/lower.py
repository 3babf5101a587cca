"""Lowering: a ``fusion`` block -> a loop-IR ``Kernel``.

Every value of the block is computed at an index (one int64 expression per dimension of
its own shape): elementwise ops expand their registry template (``scalar.expand``) over
their operands at the broadcast index; layout ops only rewrite the index (transpose
permutes it, a slice scales and shifts it, a reshape goes through the linear index, pad
and concatenate read clamped indices and select); reductions open loops over the reduced
axes around an accumulator. Each computed value is bound by a ``Let`` in the outermost
loop whose variables it uses, so softmax's row maximum and row sum are computed once per
row. Outputs of one shape share a loop nest; an output shaped like a nest's leading axes
(a row's sum) is stored in that nest's row loop; a lone output that a reshape makes by
merging axes of a value is stored from a nest over that value's axes.

A complex value is a pair of real expressions (``scalar.Pair``): a complex buffer of rank r
is, in the kernel, a buffer of its real dtype and rank r + 1 whose last dimension (2, which
the drivers pass) holds the parts, NumPy's ``z[..., None].view(real)``; a complex sum is two
real accumulators. A kernel whose op has no complex definition raises ``Unsupported``.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, field

from flowjit.ir import registry
from flowjit.ir.core import Block, Op, Value
from flowjit.ir.dtypes import DType, bool_, float32
from flowjit.ir.primitives.fft import kernel_transform
from flowjit.ir.primitives.layout import pad_fill
from flowjit.lowering import scalar
from flowjit.lowering.collapse import collapse_nests
from flowjit.lowering.dead_lets import drop_dead_lets
from flowjit.lowering.evaluate import evaluate_index
from flowjit.lowering.fourier import fourier_kernel
from flowjit.lowering.hoist_columns import hoist_columns
from flowjit.lowering.loops import (
    INDEX,
    Accumulator,
    AccValue,
    Buffer,
    Const,
    Expr,
    If,
    Kernel,
    Let,
    Load,
    Loop,
    SizeVar,
    Store,
    Update,
    Var,
    children,
    expressions,
    free_names,
    walk_statements,
)
from flowjit.lowering.scalar import Unsupported, apply, constant, is_pair
from flowjit.lowering.tile_transpose import tile_transposes
from flowjit.lowering.unswitch_bounds import unswitch_bounds

# Roles of ops outside any fusion that lower to a kernel of their own (not an element per
# result element: repeated indices add into one element, in order); see ``lower_block``.
OWN_KERNEL_ROLES = ("scatter", "first_occurrence", "cumulative_sum", "sort", "argsort", "fourier_transform",
                    "scalar_function")
# A merge sort's first runs, sorted by insertion (SORT_RUN a power of two), then merged in
# passes into runs of 2*SORT_RUN, 4*SORT_RUN, ... up to 2**MAX_SORT_PASSES elements.
SORT_RUN = 8
MAX_SORT_PASSES = 62
# Output size from which the outer loop is parallel (threads cost ~10us to start).
PARALLEL_MIN_ELEMENTS = 1 << 18
# Runs of a smaller output's innermost statements from which its outer loop is parallel
# (``parallel_by_work``), when the kernel has a buffer that large: the native program splits
# a kernel from 2**19 elements of its largest buffer (pthread_pool.NATIVE_PARALLEL_MIN_ELEMENTS).
PARALLEL_MIN_WORK = 1 << 19
# Elements a float32 sum adds in float32 before adding the block's sum to its float64 total
# (and the most a sum over middle axes, the first axis kept, adds in float32 alone:
# ``leading_reduction``).
SUM_BLOCK = 128
# A reduction over a large input's first axis (a batch norm's statistics over its rows) runs
# as up to LEADING_PARTS blocks of rows in parallel, each into a row of partial results, then
# those rows in order (``_Lowering.leading_parts``): a fixed cut, so the same sums on any
# number of threads; 64 blocks keep 2-16 threads busy with chunks to spare. Only where the
# partial results, a row of the kept shape a block, are at most 1/LEADING_PARTS_RATIO of the
# input (a sum over the rows of (2, 10**6) keeps a million columns: it stays serial).
LEADING_PARTS = 64
LEADING_PARTS_RATIO = 8
# From this many input elements: the blocks' nests cost LLVM 10-20 ms each at a cold first
# call (the zoo CNN's inference, two batch norms of 802K and 401K elements: 155 -> 193 ms,
# 1.26x JAX's, for 0.3 ms a call), which a larger input (a batch of 128 of that CNN: 3.2M)
# wins back within tens of calls.
LEADING_PARTS_MIN_ELEMENTS = 1 << 21


@dataclass
class _Scope:
    var: str | None
    body: list = field(default_factory=list)
    memo: dict = field(default_factory=dict)


@dataclass
class _StoreSlot:
    """Where a reduction loop may store the elements it reduces into an output, for the
    output's own loop to read back (softmax's exp(x - max), summed then divided by the
    sum, is computed once). Filled by ``read_stored``; an unfilled slot is dropped."""

    value_id: int
    index: tuple
    value: Expr
    store: Store | None = None


def _i(n: int) -> Const:
    return Const(int(n), INDEX)


def load(buffer: str, idx: tuple, d: DType) -> Expr | tuple:
    """Element ``idx`` of ``buffer`` of IR dtype ``d``: a complex element is the pair of
    loads of its parts (the kernel's buffer has one more dimension, of the parts)."""
    if d.is_complex:
        return tuple(Load(buffer, (*idx, _i(part)), d.real_dtype) for part in (0, 1))
    return Load(buffer, idx, d)


def store(buffer: str, idx: tuple, value: Expr | tuple) -> list:
    """The stores of ``value`` (a real expression or a complex pair) at ``idx`` of ``buffer``."""
    if is_pair(value):
        return [Store(buffer, (*idx, _i(part)), value[part]) for part in (0, 1)]
    return [Store(buffer, idx, value)]


def kernel_buffer(name: str, role: str, d: DType, rank: int) -> Buffer:
    """The kernel's buffer for an IR array of dtype ``d`` and ``rank``: a complex one as its
    parts (real dtype, a last dimension of 2)."""
    return Buffer(name, role, d.real_dtype, rank + 1) if d.is_complex else Buffer(name, role, d, rank)



def _reduced_axes(op: Op) -> list[int]:
    """The axes reduction ``op`` reduces, non-negative and sorted (``axes``, or one ``axis``)."""
    nd = op.inputs[0].type.ndim
    return sorted({ax % nd for ax in op.attrs["axes"]}) if "axes" in op.attrs else [op.attrs["axis"] % nd]

class _Lowering:
    def __init__(self, block: Block, name: str, collapse: bool = False):
        self.block = block
        self.collapse = collapse
        self.name = name
        self.arg_names = {a.id: f"in{i}" for i, a in enumerate(block.args)}
        self.counter = 0
        self.scopes: list[_Scope] = []
        self.depth_of: dict[str, int] = {}  # a bound name -> the scope it is bound in
        self.reads: dict[int, set] = {}  # arg id -> the indices it is read at
        self.written: dict[int, int] = {}  # value id -> the output an earlier nest stored it in
        self.size_of: dict[int, Var] = {}
        self.temps: list[Buffer] = []
        self.storable: dict[int, list] = {}  # value id -> the _StoreSlots of its reduction
        self.stored_value: dict[int, int] = {}  # output -> the one value stored in it
        # An output a leading reduction accumulates in though it holds the result reshaped
        # by axes of 1 -> its index of a cell of the reduction's kept shape (``cell_at``).
        self.cell_maps: dict[str, Callable[[tuple], tuple]] = {}
        self.current: tuple = ((), ())  # the nest being written: its full outputs, its index
        self.sizes: list[SizeVar] = []
        buffers = [(self.arg_names[a.id], a.type.shape) for a in block.args]
        buffers += [(f"out{k}", v.type.shape) for k, v in enumerate(block.returns)]
        for bname, shape in buffers:
            for d, n in enumerate(shape):
                # Sizes of 1 stay literal: broadcasting depends on them.
                if n > 1 and n not in self.size_of:
                    var = Var(f"n{len(self.sizes)}", INDEX)
                    self.size_of[n] = var
                    self.sizes.append(SizeVar(var.name, bname, d))

    # ---- helpers --------------------------------------------------------------------------
    def dim(self, n: int) -> Expr:
        return self.size_of.get(n, _i(n))

    def fresh(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def target_depth(self, exprs) -> int:
        names: set = set()
        for e in exprs:
            free_names(e, names)
        depth = max((self.depth_of[n] for n in names if n in self.depth_of), default=0)
        for k, s in enumerate(self.scopes):
            if s.var in names:
                depth = max(depth, k)
        return depth

    def bind(self, expr: Expr | tuple, key: tuple, prefix: str = "t", at_least: int = 0) -> Expr | tuple:
        """``expr`` bound to a name in the outermost scope that has every variable it uses,
        and no outer than scope ``at_least``; a complex pair part by part."""
        if is_pair(expr):
            pair = tuple(self.bind(e, (*key, part), prefix, at_least) for part, e in enumerate(expr))
            self.scopes[max(self.target_depth(pair), at_least)].memo[key] = pair
            return pair
        if isinstance(expr, (Const, Var)):
            # Remembered too: a value that folds to a constant is otherwise lowered again,
            # its producers with it, at each use (exponential in a chain of such values).
            self.scopes[max(self.target_depth([expr]), at_least)].memo[key] = expr
            return expr
        depth = max(self.target_depth([expr]), at_least)
        for s in self.scopes[:depth + 1]:
            if key in s.memo:
                return s.memo[key]
        name = self.fresh(prefix)
        self.scopes[depth].body.append(Let(name, expr))
        var = Var(name, expr.dtype)
        self.scopes[depth].memo[key] = var
        self.depth_of[name] = depth
        return var

    def name_pair(self, pair: tuple) -> tuple:
        """A complex pair's parts bound to names where their variables are (``scalar.expand``'s
        ``bind``); the same pair twice, the same names."""
        return self.bind(pair, ("pair", pair))

    def empty_loop_depth(self) -> int:
        """The scope of the outermost open loop that runs no iteration (its stop is 0); the
        innermost scope when none is (the read is then under a branch that never runs)."""
        for k, scope in enumerate(self.scopes):
            header = next((s for s in scope.body if isinstance(s, tuple) and s[0] == "loop"), None)
            if scope.var is not None and header is not None and header[1] == _i(0):
                return k
        return len(self.scopes) - 1

    def clamp(self, index: Expr, n: Expr, below: bool = True, above: bool = True) -> Expr:
        """``index`` kept in [0, n): raised to 0 where ``below``, lowered to n - 1 where
        ``above`` (a side the caller knows it cannot cross is left unchecked)."""
        e = apply("max", index, _i(0)) if below else index
        e = apply("min", e, apply("sub", n, _i(1))) if above else e
        if e is index:
            return index
        return self.bind(e, ("clamp", index, n, below, above), prefix="j")

    def open_loop(self, var: str, stop: Expr, parallel: bool = False) -> _Scope:
        scope = _Scope(var)
        scope.body.append(("loop", stop, parallel))
        self.scopes.append(scope)
        return scope

    def open_axes(self, shape: tuple, split: bool) -> list[Var]:
        """A loop per axis of ``shape`` in the current scope, over fresh variables (returned),
        the loop of its first axis longer than 1 parallel where ``split`` (``_outer_axis``: the
        loops of axes of 1 before it are inlined)."""
        names = [self.fresh("i") for _ in shape]
        outer = _outer_axis(tuple(shape))
        for d, (v, n) in enumerate(zip(names, shape)):
            self.open_loop(v, self.dim(n), split and d == outer)
        return [Var(v, INDEX) for v in names]

    def close_loop(self) -> None:
        scope = self.scopes.pop()
        (_, stop, parallel), *body = scope.body
        if stop == _i(1):
            # A loop over an axis of 1 (a kept axis of a reduction's result): its one
            # iteration inline. LLVM would delete the loop too, but only after its loop
            # passes, whose time grows with the loops a kernel has.
            self.scopes[-1].body.extend([Let(scope.var, _i(0)), *body])
            return
        self.scopes[-1].body.append(Loop(scope.var, _i(0), stop, 1, tuple(body), parallel))

    # ---- values ---------------------------------------------------------------------------
    def value(self, v: Value, idx: tuple) -> Expr | tuple:
        key = (v.id, idx)
        for s in self.scopes:
            if key in s.memo:
                return s.memo[key]
        if v.id in self.written:
            return self.bind(load(f"out{self.written[v.id]}", idx, v.type.dtype), key)
        if v.producer is None:
            self.reads.setdefault(v.id, set()).add(idx)
            # A read of an empty input only ever sits in a loop that runs no iteration:
            # hoisted out of it, it would run (no deeper: a row's value stored outside the
            # nest's inner loops may read it).
            at_least = self.empty_loop_depth() if v.type.size == 0 else 0
            return self.bind(load(self.arg_names[v.id], idx, v.type.dtype), key, at_least=at_least)
        stored = self.read_stored(v, idx)
        if stored is not None:
            return self.bind(stored, key)
        op = v.producer
        kind = op.primitive.kind
        if kind == "constant":
            arr = op.attrs["value"].array
            if arr.size != 1:
                raise Unsupported(f"{op.name}: a constant of {arr.size} elements inside a kernel")
            return constant(arr.reshape(-1)[0], v.type.dtype)
        if kind == "elementwise" or op.primitive.role == "scalar_function":
            expr = self.elementwise(op, idx)
        elif kind == "layout":
            expr = self.layout(op, idx)
        elif kind == "reduction":
            expr = self.reduction(op, idx)
        else:
            raise Unsupported(f"{op.name} ({kind}) inside a kernel")
        # An element of an empty value, like a read of an empty input, belongs in the loop
        # that runs no iteration: its index may name none (an empty reshape's is constant).
        return self.bind(expr, key, at_least=self.empty_loop_depth() if v.type.size == 0 else 0)

    def elementwise(self, op: Op, idx: tuple) -> Expr:
        out = op.results[0].type
        indices = [broadcast_index(idx, out.shape, x.type.shape) for x in op.inputs]
        # Operands with fewer loop variables first: a row's reduction is generated before
        # the row's elements.
        order = sorted(range(len(op.inputs)), key=lambda k: self.target_depth(indices[k]))
        operands: list = [None] * len(op.inputs)
        for k in order:
            operands[k] = self.value(op.inputs[k], indices[k])
        try:
            return scalar.expand(op.primitive.template, operands, out.dtype, bind=self.name_pair)
        except Unsupported as e:
            types = ", ".join(str(x.type) for x in op.inputs)
            raise Unsupported(f"{op.name} of {types}: {e} has no loop lowering (the kernel runs its ops' NumPy "
                              f"references)") from None

    def layout(self, op: Op, idx: tuple) -> Expr:
        role = op.primitive.role
        out = op.results[0].type
        x = op.inputs[0] if op.inputs else None
        a = op.attrs
        if role == "broadcast":
            return self.value(x, broadcast_index(idx, out.shape, x.type.shape))
        if role == "permute_axes":
            src: list = [None] * len(idx)
            for k, p in enumerate(a["perm"]):
                src[p % len(idx)] = idx[k]
            return self.value(x, tuple(src))
        if self.unit_axes_view(op.results[0]) is not None:
            return self.value(x, unit_axes_index(idx, out.shape, x.type.shape))
        if role == "row_major_reshape":
            if self.collapse and (x.producer is None or x.id in self.written) and x.type.size > 1:
                # A buffer's element at its row-major position: the same address without
                # a division per axis (Horner's sum never checks an index against its dimension).
                lin = self.bind(self.linear_index(idx, out.shape), ("linear", idx, out.shape), prefix="l")
                return self.value(x, (*(_i(0) for _ in x.type.shape[1:]), lin))
            return self.value(x, self.reshape_index(idx, out.shape, x.type.shape))
        if role == "strided_window":
            return self.value(x, tuple(apply("add", _i(s), apply("mul", _i(st), i))
                                       for s, st, i in zip(a["start"], a["step"], idx)))
        if role == "axis_index":
            return apply("cast", idx[a["dimension"] % out.ndim], to=out.dtype)
        if role == "element_count":
            # The sizes the kernel reads at run time: no element of x, and no literal that a
            # program compiled for every batch size would have to change.
            count: Expr = _i(1)
            for k in registry.normalize_axes(a["axes"], x.type.ndim):
                count = apply("mul", count, self.dim(x.type.shape[k]))
            if out.dtype.is_complex:   # a complex value is the pair of its parts
                return apply("cast", count, to=out.dtype.real_dtype), constant(0, out.dtype.real_dtype)
            return apply("cast", count, to=out.dtype)
        if role == "constant_pad":
            fill = constant(pad_fill(a["value"], out.dtype)[()], out.dtype)
            if x.type.size == 0:
                return fill
            cond, src = None, []
            for k, (lo, hi, n) in enumerate(zip(a["low"], a["high"], x.type.shape)):
                # Only a padded side is checked and clamped: an axis padded on neither side
                # (a convolution tap's batch and channels) reads at the loop's own index, which
                # keeps the innermost loop's loads contiguous (LLVM vectorizes a clamped index
                # as a gather).
                j = apply("sub", idx[k], _i(lo))
                size = self.dim(n)
                checks = ([apply("ge", j, _i(0))] if lo > 0 else []) + ([apply("lt", j, size)] if hi > 0 else [])
                for inside in checks:
                    cond = inside if cond is None else apply("and", cond, inside)
                # Clamped, so the read stays in bounds where the fill is taken.
                src.append(self.clamp(j, size, below=lo > 0, above=hi > 0))
            inner = self.value(x, tuple(src))
            return inner if cond is None else scalar.choose(cond, inner, fill)
        if role == "join":
            axis = a["axis"] % out.ndim
            offset: Expr = _i(0)
            pieces = []
            for part in op.inputs:
                n = part.type.shape[axis]
                if n:
                    src = list(idx)
                    size = self.dim(n)
                    src[axis] = self.clamp(apply("sub", idx[axis], offset), size)
                    offset = apply("add", offset, size)
                    pieces.append((offset, self.value(part, tuple(src))))
            if not pieces:  # every part is empty along the axis: so is the result, never read
                return constant(0, out.dtype)
            expr = pieces[-1][1]
            for end, piece in reversed(pieces[:-1]):
                expr = scalar.choose(apply("lt", idx[axis], end), piece, expr)
            return expr
        if role == "patches":
            n, i, j, p, q, c = idx
            (sh, sw), (dh, dw) = a["strides"], a["dilation"]
            top, _, left, _ = a["pads"]
            h, w = (self.dim(x.type.shape[k]) for k in (1, 2))
            row = apply("sub", apply("add", apply("mul", i, _i(sh)), apply("mul", p, _i(dh))), _i(top))
            col = apply("sub", apply("add", apply("mul", j, _i(sw)), apply("mul", q, _i(dw))), _i(left))
            inside = apply("and", apply("and", apply("ge", row, _i(0)), apply("lt", row, h)),
                           apply("and", apply("ge", col, _i(0)), apply("lt", col, w)))
            inner = self.value(x, (n, self.clamp(row, h), self.clamp(col, w), c))
            return scalar.choose(inside, inner, constant(0, out.dtype)) if any(a["pads"]) else inner
        if role == "gather":
            ind = op.inputs[1]
            axis = a["axis"] % x.type.ndim
            r = ind.type.ndim
            at = self.value(ind, tuple(idx[axis:axis + r]))
            src = (*idx[:axis], self.clamp(apply("cast", at, to=INDEX), self.dim(x.type.shape[axis])),
                   *idx[axis + r:])
            return self.value(x, src)
        raise Unsupported(f"layout op {op.name} (role {role})")

    def reshape_index(self, idx: tuple, out_shape: tuple, in_shape: tuple) -> tuple:
        if math.prod(in_shape) <= 1:
            return tuple(_i(0) for _ in in_shape)
        groups = _reshape_groups(out_shape, in_shape)
        if len(groups) > 1:
            # Axes that split or merge among themselves only (a head split [B, T, H*D] ->
            # [B, T, H, D]): each group's index from its own axes, no division by the rest.
            src: list = []
            for (o0, o1), (i0, i1) in groups:
                src += self.reshape_index(idx[o0:o1], out_shape[o0:o1], in_shape[i0:i1])
            return tuple(src)
        lin = self.bind(self.linear_index(idx, out_shape), ("linear", idx, out_shape), prefix="l")
        src = []
        leading = True  # the first axis of size > 1 needs no modulo
        for k, n in enumerate(in_shape):
            if n == 1:
                src.append(_i(0))
                continue
            rest = self.product([m for m in in_shape[k + 1:] if m != 1])
            part = apply("idiv", lin, rest)
            src.append(part if leading else apply("irem", part, self.dim(n)))
            leading = False
        return tuple(src)

    def product(self, sizes) -> Expr:
        e: Expr = _i(1)
        for n in sizes:
            if n != 1:
                e = apply("mul", e, self.dim(n))
        return e

    def linear_index(self, idx, shape) -> Expr:
        e: Expr = _i(0)
        for k, (i, n) in enumerate(zip(idx, shape)):
            if n != 1:
                e = apply("add", e, apply("mul", i, self.product(shape[k + 1:])))
        return e

    def reduction(self, op: Op, idx: tuple) -> Expr | tuple:
        if op.primitive.reducer is None:
            raise Unsupported(f"reduction {op.name} declares no reducer")
        kind = scalar.reducer_kind(op.primitive.reducer)
        # A complex sum is two real sums; a product's parts are not separate accumulations:
        # each step computes both from both (NumPy's four products, in order), assigned.
        cx = op.results[0].type.dtype.is_complex
        if cx and kind not in ("sum", "prod"):
            raise Unsupported(f"{op.name} of {op.inputs[0].type}: a {kind} of complex values has no loop lowering "
                              f"(the kernel runs its ops' NumPy references)")
        is_arg = kind in ("argmax", "argmin")
        x = op.inputs[0]
        nd = x.type.ndim
        axes = _reduced_axes(op)
        keep = op.attrs.get("keepdims", False)
        d = op.results[0].type.dtype
        if not is_arg and not cx and axes and nd - 1 not in axes:
            kept = tuple(i for k, i in enumerate(idx) if k not in axes) if keep else idx
            name, acc_d = self.leading_reduction(op, kind, axes)
            return apply("cast", Load(name, self.cell_at(name, kept), acc_d), to=d)
        it = iter(idx)
        loop_vars: dict[int, str] = {}
        full: list = []
        for k in range(nd):
            if k in axes:
                if keep:
                    next(it)
                loop_vars[k] = self.fresh("r")
                full.append(Var(loop_vars[k], INDEX))
            else:
                full.append(next(it))
        depth = self.target_depth(idx)
        if op.results[0].type.size == 0:
            # As in value(): the accumulator too, not only the reads of an empty result.
            depth = max(depth, self.empty_loop_depth())
        outer = self.scopes[depth]
        xd = x.type.dtype
        acc_d = xd if is_arg else scalar.accumulator_dtype(kind, d)
        accs = [self.fresh("acc") for _ in range(2 if cx else 1)]
        for n, acc in enumerate(accs):
            if cx and kind == "prod":   # 1 + 0i
                outer.body.append(Accumulator(acc, "assign", acc_d, constant(1 - n, acc_d)))
            else:
                outer.body.append(Accumulator(acc, kind, acc_d, scalar.start_value(kind, acc_d)))
            self.depth_of[acc] = depth
        # A float32 (float16) sum adds blocks of SUM_BLOCK elements in float32, each block's
        # sum into the wider total: a wider addition in the loop would make the vectorizer
        # run the whole body at the wider width (half the float32 lanes).
        blocked = kind == "sum" and acc_d != d and d == float32 and axes
        saved = self.scopes
        self.scopes = self.scopes[:depth + 1]
        last = None
        for k in axes:
            if blocked and k == axes[-1]:
                last = k
                break
            self.open_loop(loop_vars[k], self.dim(x.type.shape[k]))
        if last is not None:
            n = self.dim(x.type.shape[last])
            var = loop_vars[last]
            part = self.fresh("part")
            blocks = apply("idiv", n, _i(SUM_BLOCK))
            b, j = self.fresh("rb"), self.fresh("rj")
            # for b in range(n // SUM_BLOCK): part = 0; for j in range(SUM_BLOCK): r = b*S+j ...
            self.open_loop(b, blocks)
            self.scopes[-1].body.append(Accumulator(part, "sum", d, scalar.start_value("sum", d)))
            self.open_loop(j, _i(SUM_BLOCK))
            index = apply("add", apply("mul", Var(b, INDEX), _i(SUM_BLOCK)), Var(j, INDEX))
            self.scopes[-1].body.append(Let(var, index))
            self.depth_of[var] = len(self.scopes) - 1
            val = self.value(x, tuple(full))
            self.slot(x, full, val, axes)
            self.scopes[-1].body.append(Update(part, val))
            self.close_loop()
            self.scopes[-1].body.append(Update(acc, apply("cast", AccValue(part, d), to=acc_d)))
            self.close_loop()
            # The rest: a loop over the last partial block, from n // S * S to n.
            rest = self.fresh("rest")
            self.scopes[-1].body.append(Accumulator(rest, "sum", d, scalar.start_value("sum", d)))
            scope = _Scope(var)
            self.scopes.append(scope)
            self.depth_of.pop(var, None)
            val = self.value(x, tuple(full))
            self.slot(x, full, val, axes)
            body = tuple(scope.body) + (Update(rest, val),)
            self.scopes.pop()
            self.scopes[-1].body.append(Loop(var, apply("mul", blocks, _i(SUM_BLOCK)), n, 1, body))
            self.scopes[-1].body.append(Update(acc, apply("cast", AccValue(rest, d), to=acc_d)))
        else:
            val = self.value(x, tuple(full))
            if is_arg:
                pos = self.linear_index(tuple(Var(loop_vars[k], INDEX) for k in axes),
                                        tuple(x.type.shape[k] for k in axes))
                self.scopes[-1].body.append(Update(acc, val, pos))
            elif cx and kind == "prod":
                # Both parts of the product read before either is assigned.
                current = tuple(AccValue(acc, acc_d) for acc in accs)
                step = scalar.cmul(current, tuple(apply("cast", part, to=acc_d) for part in val))
                names = [self.fresh("t") for _ in accs]
                self.scopes[-1].body.extend(Let(name, e) for name, e in zip(names, step))
                self.scopes[-1].body.extend(Update(acc, Var(name, acc_d)) for acc, name in zip(accs, names))
            elif cx:
                self.scopes[-1].body.extend(Update(acc, part) for acc, part in zip(accs, val))
            else:
                self.slot(x, full, val, axes)
                self.scopes[-1].body.append(Update(acc, val))
        while len(self.scopes) > depth + 1:
            self.close_loop()
        self.scopes = saved
        if is_arg:
            return AccValue(acc, INDEX)
        if cx:
            return tuple(apply("cast", AccValue(acc, acc_d), to=d.real_dtype) for acc in accs)
        return apply("cast", AccValue(acc, acc_d), to=d)

    def leading_reduction(self, op: Op, kind: str, axes: list) -> tuple[str, DType]:
        """A temp buffer of the results of a reduction that keeps the last axis (a bias
        gradient's sum over the batch, a mean over a bag of embedding rows or over time),
        filled before the loop nest in row-major order: the inner loop runs along the last
        axis, contiguous and vectorizable, where reducing each column on its own would
        stride through memory (a mean over axis 1 of f32[64,512,256]: 5.8 ms so, against
        NumPy's 1.1)."""
        key = ("leading", op.results[0].id)
        top = self.scopes[0]
        if key in top.memo:
            return top.memo[key]
        x = op.inputs[0]
        kept_shape = tuple(n for k, n in enumerate(x.type.shape) if k not in axes)
        # This reduction and the others of the same input shape and axes that read none of
        # these results: one pass over the input for all (a batch norm's gradient sums, each
        # recomputing its input's elementwise chain, had made a pass each).
        group = [(op, kind)] + self.leading_siblings(op, axes)
        names = []
        saved = self.scopes
        self.scopes = self.scopes[:1]
        # A float32 sum over middle axes of at most SUM_BLOCK elements a cell (a bag of
        # embedding rows, a 7x7 depthwise filter's 49 taps) adds them in float32, as a row
        # sum's blocks of SUM_BLOCK are added, here in order (NumPy's order for such a sum):
        # a float64 accumulator's conversions and double-width loads and stores were most of
        # such a nest's work (a 7x7 depthwise's forward 10.2-15 -> 7.1-8.6 ms). Not over the
        # first axis, most often a batch, whose size an AOT library's symbolic B leaves open
        # (a symbolic size on a middle axis that crosses SUM_BLOCK between the exporter's
        # samples makes it trace again at larger ones, where the sum is float64 throughout).
        short = 0 not in axes and math.prod(x.type.shape[k] for k in axes) <= SUM_BLOCK
        for r, r_kind in group:
            acc_d = scalar.accumulator_dtype(r_kind, r.results[0].type.dtype)
            if short and r_kind == "sum" and r.results[0].type.dtype == float32:
                acc_d = float32
            found = self.accumulating_output(r.results[0], acc_d, kept_shape) if r is op else None
            if found is not None:
                # The kernel's output is the reduction's result as it is (a max pool's), or but
                # for axes of 1 (keepdims; a depthwise convolution's, its multiplier axis
                # dropped): the reduction accumulates in the output itself, which no other
                # value's row may then be stored in, and no nest stores it again (no temp, no
                # copy of it).
                out, returned = found
                name = f"out{out}"
                self.stored_value[out] = returned.id
                if tuple(returned.type.shape) != tuple(kept_shape):
                    self.cell_maps[name] = functools.partial(unit_axes_index, out_shape=kept_shape,
                                                             in_shape=tuple(returned.type.shape))
            else:
                name = self.fresh("cols")
                self.temps.append(Buffer(name, "temp", acc_d, len(kept_shape), tuple(self.dim(n) for n in kept_shape)))
            names.append((name, acc_d))
            self.fill_cells([(name, r_kind, acc_d)], kept_shape, (), value=None)
        loop_vars = [Var(self.fresh("r" if k in axes else "i"), INDEX) for k in range(x.type.ndim)]
        cell = tuple(v for k, v in enumerate(loop_vars) if k not in axes)
        # A first axis that is kept (a max pool's batch) writes its own cells of the results
        # in each iteration: parallel, when the input is large enough to split.
        lead = _outer_axis(x.type.shape)
        split = lead not in axes and math.prod(x.type.shape) >= PARALLEL_MIN_ELEMENTS
        parts = self.leading_parts(x.type.shape, axes, kept_shape)
        targets = names
        if parts:
            # A first axis that is reduced (a batch norm's statistics over the rows): blocks
            # of its indices fixed by the shape, each block's partial results in a row of a
            # temp, filled in parallel; then the rows combined in block order (below), so
            # that any number of threads gives the same result.
            n0 = self.dim(x.type.shape[0])
            per = apply("idiv", apply("add", n0, _i(parts - 1)), _i(parts))
            block = Var(self.fresh("rb"), INDEX)
            targets = []
            for (r, r_kind), (name, acc_d) in zip(group, names):
                part = self.fresh("parts")
                self.temps.append(Buffer(part, "temp", acc_d, 1 + len(kept_shape),
                                         (_i(parts), *(self.dim(n) for n in kept_shape))))
                targets.append((part, acc_d))
            self.open_loop(block.name, _i(parts), True)
            self.fill_cells([(p, r_kind, acc_d) for (p, acc_d), (_, r_kind) in zip(targets, group)], kept_shape,
                            (block,), value=None)
            rows = apply("min", per, apply("sub", n0, apply("mul", block, per)))
            j = self.fresh("rj")
            self.open_loop(j, rows)
            self.scopes[-1].body.append(Let(loop_vars[0].name, apply("add", apply("mul", block, per), Var(j, INDEX))))
            self.depth_of[loop_vars[0].name] = len(self.scopes) - 1
            cell = (block, *cell)
            first = 1
        else:
            first = 0
        for k, (v, n) in enumerate(zip(loop_vars, x.type.shape)):
            if k >= first:
                self.open_loop(v.name, self.dim(n), split and k == lead)
        for (r, r_kind), (name, acc_d) in zip(group, targets):
            val = self.value(r.inputs[0], tuple(loop_vars))
            at = self.cell_at(name, cell)
            self.scopes[-1].body.append(Store(name, at, scalar.combine(r_kind, Load(name, at, acc_d), val)))
        while len(self.scopes) > 1:
            self.close_loop()
        if parts:
            self.depth_of.pop(loop_vars[0].name, None)
            block = Var(self.fresh("rb"), INDEX)
            self.open_loop(block.name, _i(parts))
            self.fill_cells([(name, r_kind, acc_d) for (name, acc_d), (_, r_kind) in zip(names, group)], kept_shape,
                            (), value=lambda idx, k: Load(targets[k][0], (block, *idx), targets[k][1]))
            self.close_loop()
        self.scopes = saved
        for (r, _), (name, acc_d) in zip(group, names):
            top.memo[("leading", r.results[0].id)] = (name, acc_d)
        return top.memo[key]

    def leading_parts(self, shape: tuple, axes: list, kept_shape: tuple) -> int:
        """The blocks a reduction's nest over ``shape`` cuts its first axis into when that
        axis is reduced and the input is large enough (``LEADING_PARTS_MIN_ELEMENTS``):
        up to ``LEADING_PARTS``, fewer for a shorter axis, none (0) where the partial results
        (a row of ``kept_shape`` a block) would not be small beside the input."""
        size = math.prod(shape)
        # Only for the CPU's lowering (``collapse``): CUDA reduces a column with a thread
        # block of its own (codegen_cuda's column reductions), where these blocks would give
        # each GPU thread a long serial loop.
        if not self.collapse or 0 not in axes or size < LEADING_PARTS_MIN_ELEMENTS or shape[0] < 2:
            return 0
        parts = min(shape[0], LEADING_PARTS)
        return parts if parts * math.prod(kept_shape) * LEADING_PARTS_RATIO <= size else 0

    def fill_cells(self, targets: list, kept_shape: tuple, lead: tuple, value) -> None:
        """A nest over ``kept_shape`` in the current scope storing into each ``(name, kind,
        acc dtype)`` of ``targets`` at ``lead + cell``: its kind's start value (``value``
        None), or its combination with ``value(cell, k)`` for the ``k``-th target."""
        depth = len(self.scopes)
        # The start values of many cells, a pass of its own before the nest, are split like
        # any large elementwise loop: a 7x7 depthwise convolution's 12.8 MB output had been
        # zeroed on one thread (its forward 7.3-7.8 -> 6.4-6.5 ms on two). Not behind a lead
        # (a split reduction's parts, filled inside its parallel block loop).
        cell = self.open_axes(kept_shape, value is None and not lead
                              and math.prod(kept_shape) >= PARALLEL_MIN_ELEMENTS)
        for k, (name, kind, acc_d) in enumerate(targets):
            at = self.cell_at(name, (*lead, *cell))
            if value is None:
                self.scopes[-1].body.append(Store(name, at, scalar.start_value(kind, acc_d)))
            else:
                self.scopes[-1].body.append(Store(name, at, scalar.combine(kind, Load(name, at, acc_d),
                                                                           value(tuple(cell), k))))
        while len(self.scopes) > depth:
            self.close_loop()

    def leading_siblings(self, op: Op, axes: list) -> list:
        """The other reductions of the kernel, not yet lowered, that reduce an input of
        ``op``'s input's shape over the same ``axes`` keeping the last one (sums and the
        like, not arg- or complex reductions), whose inputs depend on no reduction of the
        kernel that is not lowered yet: each is ``(op, kind)``."""
        shape = tuple(op.inputs[0].type.shape)
        top = self.scopes[0]
        pending = {r.id for o in self.block.ops if o.primitive.kind == "reduction"
                   for r in o.results if ("leading", r.id) not in top.memo}
        found = []
        for o in self.block.ops:
            if o is op or o.primitive.kind != "reduction" or o.primitive.reducer is None \
                    or ("leading", o.results[0].id) in top.memo:
                continue
            x = o.inputs[0]
            kind = scalar.reducer_kind(o.primitive.reducer)
            if (tuple(x.type.shape) != shape or _reduced_axes(o) != list(axes) or kind in ("argmax", "argmin")
                    or o.results[0].type.dtype.is_complex or self._reads_any(x, pending)):
                continue
            found.append((o, kind))
        return found

    def _reads_any(self, v: Value, ids: set) -> bool:
        """Whether computing ``v`` in this kernel reads one of the values ``ids``."""
        seen: set = set()
        stack = [v]
        while stack:
            u = stack.pop()
            if u.id in ids:
                return True
            if u.id in seen or u.producer is None or u.producer.parent is not self.block:
                continue
            seen.add(u.id)
            stack.extend(u.producer.inputs)
        return False

    def accumulating_output(self, v: Value, acc_d: DType, kept_shape: tuple) -> tuple[int, Value] | None:
        """The output a reduction of ``v``'s kept shape may accumulate in, and the value it
        returns: the first output that returns ``v`` with the accumulator's dtype, its
        elements those of the kept shape but for axes of 1 (``keepdims``), or a reshape of
        ``v`` in this kernel that only adds or drops axes of 1, when no other value's row is
        stored there and its elements are not complex parts; None otherwise."""
        squeezed = [n for n in kept_shape if n != 1]
        if v.type.dtype != acc_d or acc_d.is_complex or [n for n in v.type.shape if n != 1] != squeezed:
            return None
        k = next((k for k, r in enumerate(self.block.returns) if r is v or self.unit_axes_view(r) is v), None)
        if k is None:
            return None
        r = self.block.returns[k]
        return None if self.stored_value.get(k, r.id) != r.id else (k, r)

    def unit_axes_view(self, v: Value) -> Value | None:
        """The value of this kernel that ``v`` reshapes by adding or dropping axes of 1 only
        (a squeeze, an ``expand_dims``), or None."""
        op = v.producer
        if op is None or op.parent is not self.block or not op.inputs \
                or op.primitive.role not in ("unit_axes_reshape", "row_major_reshape"):
            return None
        x = op.inputs[0]
        return x if [n for n in v.type.shape if n != 1] == [n for n in x.type.shape if n != 1] else None

    def cell_at(self, name: str, at: tuple) -> tuple:
        """The index in buffer ``name`` of a leading reduction's cell ``at`` (an index of
        its kept shape): ``at`` itself, or, in an output that holds the result but for axes
        of 1 (``cell_maps``), the same element's index there."""
        mapped = self.cell_maps.get(name)
        return at if mapped is None else mapped(at)

    def slot(self, x: Value, full: list, val: Expr, axes: list) -> None:
        """A store slot for the elements of ``x`` a one-axis reduction loop computes."""
        if len(axes) != 1:
            return
        slot = _StoreSlot(x.id, tuple(full), val)
        self.scopes[-1].body.append(slot)
        self.storable.setdefault(x.id, []).append((axes[0], slot))

    def read_stored(self, v: Value, idx: tuple) -> Expr | None:
        """A load of ``v`` at ``idx`` from an output, when a reduction loop of this row can
        store ``v`` there first: ``v`` has the output's type, ``idx`` is the output's own
        index, and the reduction ran over the innermost axis with every other index the
        same. Each element is then computed once for both uses."""
        outputs, loop_vars = self.current
        slots = self.storable.get(v.id)
        if not slots or idx != loop_vars:
            return None
        axis = slots[0][0]
        if axis != len(idx) - 1 or any(s.index[:-1] != idx[:-1] for _, s in slots):
            return None
        # One stored row per output: a second would overwrite the first before it is read.
        k = next((k for k, out_v, _ in outputs
                  if out_v.type == v.type and self.stored_value.get(k, v.id) == v.id), None)
        if k is None:
            return None
        self.stored_value[k] = v.id
        for _, s in slots:
            s.store = Store(f"out{k}", s.index, s.value)
        return Load(f"out{k}", idx, v.type.dtype)

    # ---- the kernel -----------------------------------------------------------------------
    def loop_nests(self) -> list:
        nests: list = []
        returns = self.block.returns
        for k in sorted(range(len(returns)), key=lambda k: -returns[k].type.size):
            v = returns[k]
            t = v.type.shape
            for shape, outputs in nests:
                depth = next((m for m in range(len(shape), -1, -1)
                              if t[:m] == shape[:m] and all(n == 1 for n in t[m:])), None)
                if depth is not None and (depth == len(shape)) == (t == shape):
                    outputs.append((k, v, depth))
                    break
            else:
                nests.append((t, [(k, v, len(t))]))
        for _, outputs in nests:
            outputs.sort(key=lambda o: o[0])
        position = {r.id: i for i, op in enumerate(self.block.ops) for r in op.results}
        nests.sort(key=lambda n: (min(position.get(v.id, -1) for _, v, _ in n[1]), n[1][0][0]))
        return nests

    def joined_output(self, shape: tuple, outputs: list) -> tuple | None:
        """``(k, join op)`` when the nest's one output is a concatenation along its last axis
        of values the kernel computes: such a nest runs one innermost loop per piece (or per
        group of pieces sharing a value, ``joined_groups``), each piece computed over its own
        range only (a select between the pieces would compute every piece at every element:
        an LSTM's four gate gradients, four times over)."""
        if len(outputs) != 1 or not shape:
            return None
        k, v, depth = outputs[0]
        op = v.producer
        if (depth != len(shape) or op is None or op.primitive.role != "join" or v.id in self.written
                or op.attrs["axis"] % len(shape) != len(shape) - 1
                or not any(x.producer is not None for x in op.inputs)):
            return None
        return k, op

    def joined_nest(self, top: _Scope, shape: tuple, k: int, op: Op) -> None:
        """The nest of output ``k``, the join ``op`` along the last axis: the outer loops,
        then for each non-empty piece a loop over its own columns storing its values."""
        self.scopes = [top]
        outer = self.open_axes(shape[:-1], math.prod(shape) >= PARALLEL_MIN_ELEMENTS)
        self.storable = {}
        offset: Expr = _i(0)
        for group in self.joined_groups(op):
            n = group[0].type.shape[-1]
            var = self.fresh("i")
            self.open_loop(var, self.dim(n))
            j = Var(var, INDEX)
            self.current = ((), (*outer, j))
            for part in group:
                val = self.value(part, (*outer, j))
                self.scopes[-1].body.extend(store(f"out{k}", (*outer, apply("add", offset, j)), val))
                offset = apply("add", offset, self.dim(n))
            self.close_loop()
        while len(self.scopes) > 1:
            self.close_loop()
        self.written[op.results[0].id] = k

    def joined_groups(self, op: Op) -> list[list[Value]]:
        """The join's non-empty pieces in order, neighbours of one width that compute a
        value in common (``cos(a)`` and ``sin(a)``; an LSTM's gate gradients from one cell
        gradient) in one group: a group runs as one loop storing each of its pieces at each
        column, so the value they share is computed once a column, not once a piece."""
        groups: list[list[Value]] = []
        shared: set[int] = set()
        for part in op.inputs:
            n = part.type.shape[-1]
            if n == 0:
                continue
            computed = self.computed_in_kernel(part)
            if groups and groups[-1][0].type.shape[-1] == n and shared & computed:
                groups[-1].append(part)
                shared &= computed
            else:
                groups.append([part])
                shared = computed
        return groups

    def computed_in_kernel(self, v: Value) -> set[int]:
        """The values of the kernel's own ops that ``v`` is computed from at its own index
        (``v`` included): the walk stops at inputs, constants and layout ops (past a slice
        or a transpose a value is read at other indices: not shared column by column)."""
        seen: set[int] = set()
        todo = [v]
        while todo:
            x = todo.pop()
            op = x.producer
            if (x.id in seen or op is None or x.id in self.written
                    or op.primitive.kind in ("constant", "layout")):
                continue
            seen.add(x.id)
            todo.extend(op.inputs)
        return seen

    def reshaped_output(self, shape: tuple, outputs: list) -> tuple | None:
        """``(k, reshape op)`` when the nest's one output is a row-major reshape that merges
        axes of a value the kernel computes (a transpose flattened: [n2, n1] -> [n2 * n1]):
        such a nest runs over the value's own axes, its store at the merged axes' linear
        index. Over the output's axes the value's index would be divisions and remainders
        of the merged one (a loop of gathers the tile pass cannot see as a nest)."""
        if len(outputs) != 1 or not shape:
            return None
        k, v, depth = outputs[0]
        op = v.producer
        if depth != len(shape) or op is None or op.primitive.role != "row_major_reshape" or v.id in self.written:
            return None
        x = op.inputs[0]
        in_shape = tuple(x.type.shape)
        if (x.producer is None or x.id in self.written or len(in_shape) <= len(shape)
                or [n for n in shape if n != 1] == [n for n in in_shape if n != 1]):
            return None
        groups = _reshape_groups(tuple(shape), in_shape)
        if any(o1 - o0 != 1 for (o0, o1), _ in groups):
            return None
        return k, op

    def parallel_by_work(self, nest: Loop) -> Loop:
        """Output nest ``nest`` with its outer loop parallel, though it writes fewer than
        PARALLEL_MIN_ELEMENTS elements, when its innermost statements run PARALLEL_MIN_WORK
        times or more and the kernel has a buffer that large (a row's reduction of a large
        input: a sum of exponentials over 4096 rows of 1024 took one thread 1.0 ms, two
        0.5); the CPU's lowering only (CUDA reduces a row with a thread block of its own)."""
        if nest.parallel or max(v.type.size for v in (*self.block.args, *self.block.returns)) < PARALLEL_MIN_WORK:
            return nest
        sizes = {v.name: n for n, v in self.size_of.items()}
        return dataclasses.replace(nest, parallel=True) if _iterations((nest,), sizes) >= PARALLEL_MIN_WORK else nest

    def reshaped_nest(self, top: _Scope, shape: tuple, k: int, op: Op) -> None:
        """The nest of output ``k``, the reshape ``op`` merging axes: loops over its
        operand's axes, the operand's value stored at the merged axes' linear index."""
        self.scopes = [top]
        x = op.inputs[0]
        in_shape = tuple(x.type.shape)
        parallel = math.prod(shape) >= PARALLEL_MIN_ELEMENTS
        idx: tuple = ()
        for n in in_shape:   # a unit axis's index is 0; the first loop is the one split
            if n == 1:
                idx += (_i(0),)
                continue
            var = self.fresh("i")
            self.open_loop(var, self.dim(n), parallel and len(self.scopes) == 1)
            idx += (Var(var, INDEX),)
        self.storable = {}
        self.current = ((), idx)
        val = self.value(x, idx)
        out_idx = tuple(self.linear_index(idx[i0:i1], in_shape[i0:i1])
                        for _, (i0, i1) in _reshape_groups(tuple(shape), in_shape))
        self.scopes[-1].body.extend(store(f"out{k}", out_idx, val))
        while len(self.scopes) > 1:
            self.close_loop()
        self.written[op.results[0].id] = k

    def kernel(self) -> Kernel:
        top = _Scope(None)
        out_index: tuple | None = None
        for shape, outputs in self.loop_nests():
            joined = self.joined_output(shape, outputs)
            if joined is not None:
                self.joined_nest(top, shape, *joined)
                continue
            reshaped = self.reshaped_output(shape, outputs)
            if reshaped is not None:
                self.reshaped_nest(top, shape, *reshaped)
                continue
            self.scopes = [top]
            parallel = math.prod(shape) >= PARALLEL_MIN_ELEMENTS
            index = tuple(self.open_axes(shape, parallel))
            if outputs[0][0] == 0:
                out_index = index
            self.storable = {}
            self.current = (tuple(o for o in outputs if o[2] == len(shape)), index)
            # Every value first, then the stores: a value may read a row a reduction loop
            # stored in an output, which that output's own store must not overwrite first.
            stores = []
            for k, v, depth in outputs:
                idx = index[:depth] + tuple(_i(0) for _ in v.type.shape[depth:])
                val = self.value(v, idx)
                if self.stored_value.get(k) == v.id:
                    continue   # already there: a reduction accumulated it, or stored its rows, in out{k}
                if depth < len(shape):  # a row's result, stored once per row
                    self.scopes[depth].body.extend(store(f"out{k}", idx, val))
                else:
                    stores.extend(store(f"out{k}", idx, val))
            self.scopes[-1].body.extend(stores)
            while len(self.scopes) > 1:
                self.close_loop()
            if top.body and _empty(top.body[-1]):
                top.body.pop()   # the nest's only output was accumulated in place
            elif not parallel and self.collapse and shape and top.body and isinstance(top.body[-1], Loop) \
                    and top.body[-1].var == index[_outer_axis(shape)].name:
                # (after the Lets of the nest's outer axes of 1, inlined)
                top.body[-1] = self.parallel_by_work(top.body[-1])
            self.written.update((v.id, k) for k, v, _ in outputs)
        buffers = [kernel_buffer(self.arg_names[a.id], "in", a.type.dtype, a.type.ndim) for a in self.block.args]
        buffers += [kernel_buffer(f"out{k}", "out", v.type.dtype, v.type.ndim)
                    for k, v in enumerate(self.block.returns)]
        buffers += self.temps
        in_place: tuple = tuple(() for _ in self.block.returns)
        body = drop_dead_lets(_fill_slots(tuple(top.body)))
        # A stored row is written ahead of the output loop, over inputs not yet read.
        if len(self.block.returns) == 1 and out_index is not None and not self.stored_value:
            out_t = self.block.returns[0].type   # its one store comes after every value
            in_place = (tuple(self.arg_names[a.id] for a in self.block.args
                              if a.type == out_t and self.reads.get(a.id) == {out_index}),)
        elif not self.stored_value:
            in_place = _overwritable(body, {self.arg_names[a.id]: (a.type, self.reads.get(a.id))
                                            for a in self.block.args}, [v.type for v in self.block.returns])
        if len(self.block.returns) == 1 and not self.stored_value:
            body = tuple(_mark_streaming(s) for s in body)
        if self.collapse:
            body = collapse_nests(body, self.concrete_shapes(buffers), {v.name: n for n, v in self.size_of.items()})
            body, columns = hoist_columns(body, (s.name for s in self.sizes), self.fresh)
            buffers += columns
            body = tile_transposes(body, buffers, self.concrete_shapes(buffers),
                                   {v.name: n for n, v in self.size_of.items()},
                                   {name for names in in_place for name in names})
            body = unswitch_bounds(body, self.fresh)
        return Kernel(self.name, tuple(buffers), tuple(self.sizes), body, in_place)

    def concrete_shapes(self, buffers: list[Buffer]) -> dict[str, tuple[int, ...]]:
        """Each of the kernel's ``buffers``' dimensions (a complex one's with its parts' 2)."""
        values = {v.name: n for n, v in self.size_of.items()}
        typed = [(self.arg_names[a.id], a.type) for a in self.block.args]
        typed += [(f"out{k}", v.type) for k, v in enumerate(self.block.returns)]
        shapes = {name: tuple(t.shape) + ((2,) if t.dtype.is_complex else ()) for name, t in typed}
        for b in buffers:
            if b.role == "temp" and all(isinstance(e, Const) or (isinstance(e, Var) and e.name in values)
                                        for e in b.shape):
                shapes[b.name] = tuple(int(e.value) if isinstance(e, Const) else values[e.name] for e in b.shape)
        return shapes


    def scatter_kernel(self) -> Kernel:
        """The kernel of a block holding one scatter (add, mul, max, min): the operand copied
        to the output (in place when they share memory), then each update combined into the
        element at its clamped index by the primitive's reducer, in the row-major order of
        the updates as ``np.add.at`` (``multiply.at``...) combines them."""
        (op,) = self.block.ops
        operand, indices, updates = op.inputs
        d = operand.type.dtype
        axis = op.attrs["axis"] % operand.type.ndim
        r = indices.type.ndim
        combine = op.primitive.reducer[1]
        top = _Scope(None)
        self.scopes = [top]
        loop_vars = [self.fresh("i") for _ in operand.type.shape]
        for d_, (var, n) in enumerate(zip(loop_vars, operand.type.shape)):
            self.open_loop(var, self.dim(n), d_ == _outer_axis(operand.type.shape)
                           and operand.type.size >= PARALLEL_MIN_ELEMENTS)
        idx = tuple(Var(v, INDEX) for v in loop_vars)
        self.scopes[-1].body.extend(store("out0", idx, load(self.arg_names[operand.id], idx, d)))
        while len(self.scopes) > 1:
            self.close_loop()
        loop_vars = [self.fresh("i") for _ in updates.type.shape]
        for var, n in zip(loop_vars, updates.type.shape):
            self.open_loop(var, self.dim(n))
        uidx = tuple(Var(v, INDEX) for v in loop_vars)
        at = self.bind(load(self.arg_names[indices.id], uidx[axis:axis + r], indices.type.dtype), ("index", uidx))
        j = self.clamp(apply("cast", at, to=INDEX), self.dim(operand.type.shape[axis]))
        dst = (*uidx[:axis], j, *uidx[axis + r:])
        total = scalar.expand(combine, [load("out0", dst, d), load(self.arg_names[updates.id], uidx, d)], d,
                              names=("acc", "v"))
        # Both parts of a complex product are computed before either is stored: each reads both.
        total = self.bind(total, ("combined", uidx)) if is_pair(total) else total
        self.scopes[-1].body.extend(store("out0", dst, total))
        while len(self.scopes) > 1:
            self.close_loop()
        buffers = [kernel_buffer(self.arg_names[a.id], "in", a.type.dtype, a.type.ndim) for a in self.block.args]
        buffers.append(kernel_buffer("out0", "out", d, operand.type.ndim))
        return Kernel(self.name, tuple(buffers), tuple(self.sizes), tuple(top.body),
                      ((self.arg_names[operand.id],),))


    def first_occurrence_kernel(self) -> Kernel:
        """The kernel of a block holding one first_occurrence: every slot set to -1, then the
        indices walked in row-major order, each writing its position into its clamped slot
        unless an earlier one already did (a later index reads what an earlier one wrote, so
        the walk is one serial loop: a few nanoseconds an index)."""
        (op,) = self.block.ops
        (indices,) = op.inputs
        size = op.attrs["size"]
        top = _Scope(None)
        self.scopes = [top]
        v = self.fresh("i")
        self.open_loop(v, self.dim(size), size >= PARALLEL_MIN_ELEMENTS)
        self.scopes[-1].body.extend(store("out0", (Var(v, INDEX),), constant(-1, INDEX)))
        self.close_loop()
        loop_vars = [self.fresh("i") for _ in indices.type.shape]
        for var, n in zip(loop_vars, indices.type.shape):
            self.open_loop(var, self.dim(n))
        idx = tuple(Var(name, INDEX) for name in loop_vars)
        at = load(self.arg_names[indices.id], idx, indices.type.dtype)
        slot = (self.clamp(apply("cast", at, to=INDEX), self.dim(size)),)
        seen = self.bind(load("out0", slot, INDEX), ("seen", idx))
        position = self.linear_index(idx, indices.type.shape)
        self.scopes[-1].body.extend(store("out0", slot, scalar.choose(apply("lt", seen, _i(0)), position, seen)))
        while len(self.scopes) > 1:
            self.close_loop()
        buffers = (kernel_buffer(self.arg_names[indices.id], "in", indices.type.dtype, indices.type.ndim),
                   kernel_buffer("out0", "out", INDEX, 1))
        return Kernel(self.name, buffers, tuple(self.sizes), tuple(top.body), ((),))

    def cumulative_sum_kernel(self) -> Kernel:
        """The kernel of a block holding one cumsum: along the axis each element is the one
        before it (written just before) plus the input's, in the input dtype as NumPy's
        running sum; the axes before it are the outer loops, those after it the inner ones,
        so each step of the running sum reads and writes whole rows. float16 accumulates in
        float32 (``running_sum_in_float32``), which a read back of the rounded sum would not do."""
        (op,) = self.block.ops
        (x,) = op.inputs
        d = x.type.dtype
        if d.itemsize == 2 and d.is_float:
            return self.running_sum_in_float32(op)
        shape = x.type.shape
        axis = op.attrs["axis"] % len(shape)
        reverse = op.attrs["reverse"]
        add = registry.get("add").template
        top = _Scope(None)
        self.scopes = [top]
        loop_vars = [self.fresh("i") for _ in shape]
        outer = math.prod(shape[:axis])
        for k, (var, n) in enumerate(zip(loop_vars, shape)):
            self.open_loop(var, self.dim(n), k == 0 and k != axis and outer * 64 >= PARALLEL_MIN_ELEMENTS)
        idx = [Var(v, INDEX) for v in loop_vars]
        step = idx[axis]
        n = self.dim(shape[axis])
        at = apply("sub", apply("sub", n, _i(1)), step) if reverse else step
        before = apply("add", at, _i(1)) if reverse else apply("sub", at, _i(1))
        here = (*idx[:axis], at, *idx[axis + 1:])
        prev = (*idx[:axis], self.clamp(before, n), *idx[axis + 1:])
        value = load(self.arg_names[x.id], here, d)
        total = scalar.choose(apply("gt", step, _i(0)), scalar.expand(add, [load("out0", prev, d), value], d), value)
        self.scopes[-1].body.extend(store("out0", here, total))
        while len(self.scopes) > 1:
            self.close_loop()
        buffers = [kernel_buffer(self.arg_names[x.id], "in", d, len(shape)),
                   kernel_buffer("out0", "out", d, len(shape))]
        return Kernel(self.name, tuple(buffers), tuple(self.sizes), tuple(top.body), ((),))


    def scalar_function_kernel(self) -> Kernel:
        """The kernel of a block holding one op of a function a library computes per element
        (a special function: ``scalar.LIBRARY_FUNCTIONS``): its template over the broadcast
        operands, one call an element, as an elementwise op's (it never fuses: the call keeps
        a loop scalar, and no other backend has it)."""
        return self.kernel()

    def fourier_transform_kernel(self) -> Kernel:
        """The kernel of a block holding one ``fft`` that ``kernel_transform`` takes: the
        FFT of ``flowjit.lowering.fourier``."""
        (op,) = self.block.ops
        (x,) = op.inputs
        if not kernel_transform(x.type, op.attrs["fft_type"], op.attrs["fft_lengths"]):
            raise Unsupported(f"{op.name}: an fft the decomposition keeps ({x.type}, {op.attrs['fft_type']} over "
                              f"{tuple(op.attrs['fft_lengths'])})")
        dims = [self.dim(m) for m in x.type.shape]
        return fourier_kernel(self.name, self.arg_names[x.id], dims, self.dim(op.results[0].type.shape[-1]),
                              x.type.dtype, op.attrs["fft_type"], tuple(self.sizes), self.fresh)

    def sort_kernel(self) -> Kernel:
        """The kernel of a block holding one sort: ``merge_sort`` of the values."""
        return self.merge_sort(positions=False)

    def argsort_kernel(self) -> Kernel:
        """The kernel of a block holding one argsort: ``merge_sort`` of (value, position)
        pairs, the positions its output."""
        return self.merge_sort(positions=True)

    def merge_sort(self, positions: bool) -> Kernel:
        """A stable bottom-up merge sort along the op's axis, every row of the other axes
        alike: the row copied in (with each element's position when ``positions``), then
        passes merging neighbouring runs of 1, 2, 4, ... elements from one buffer into the
        other, a right element taken before a left one only when it strictly comes first
        (NaN last ascending, first descending, as NumPy), so equal elements keep their
        order; after an odd number of passes the result is copied back into the output.
        Each merge walks its two runs with two accumulators as cursors, branch-free: a
        loop the CPU runs at a few nanoseconds an element a pass, in native code beside
        the program's other kernels (NumPy's vectorized value sort is faster on long
        rows; this keeps a program with a sort on the native path and ahead of time)."""
        (op,) = self.block.ops
        (x,) = op.inputs
        d = x.type.dtype
        shape = x.type.shape
        rank = len(shape)
        axis = op.attrs["axis"] % rank
        descending = op.attrs["descending"]
        n = self.dim(shape[axis])
        dims = tuple(self.dim(m) for m in shape)
        keys = ("out0", self.fresh("keys")) if not positions else (self.fresh("keys"), self.fresh("keys"))
        order = ("out0", self.fresh("order")) if positions else None
        pair = d.is_complex   # a complex key is its two parts (load/store), compared as NumPy orders them
        temps = [Buffer(b, "temp", d.real_dtype, rank + 1, (*dims, _i(2))) if pair else Buffer(b, "temp", d, rank, dims)
                 for b in keys if b != "out0"]
        if order is not None:
            temps.append(Buffer(order[1], "temp", INDEX, rank, dims))

        def var(prefix: str) -> tuple[str, Var]:
            name = self.fresh(prefix)
            return name, Var(name, INDEX)

        def over_rows(row) -> tuple:
            # Loops over every axis but the sorted one around row(index with None at the axis).
            names = {k: self.fresh("i") for k in range(rank) if k != axis}
            index = [Var(names[k], INDEX) if k != axis else None for k in range(rank)]
            body = row(index)
            for k in reversed(range(rank)):
                if k != axis:
                    body = (Loop(names[k], _i(0), dims[k], 1, body),)
            return body

        def at(index: list, position: Expr) -> tuple:
            return tuple(position if e is None else e for e in index)

        def bind(name: str, value) -> tuple[list, Expr | tuple]:
            # Let-bound key: one binding, or one per part
            if not pair:
                return [Let(name, value)], Var(name, d)
            names = (f"{name}_re", f"{name}_im")
            return ([Let(n, v) for n, v in zip(names, value)],
                    tuple(Var(n, d.real_dtype) for n in names))

        def pick(cond: Expr, a, b):
            if not pair:
                return apply("select", cond, a, b)
            return tuple(apply("select", cond, x, y) for x, y in zip(a, b))

        def complex_before(a: tuple, b: tuple) -> Expr:
            # NumPy's order: [R + Rj, R + nanj, nan + Rj, nan + nanj], each class by its
            # parts that are not NaN (the real part first)
            (ar, ai), (br, bi) = a, b
            nans = [apply("ne", v, v) for v in (ar, ai, br, bi)]

            def rank_of(nan_re: Expr, nan_im: Expr) -> Expr:
                return apply("add", apply("select", nan_re, _i(2), _i(0)), apply("select", nan_im, _i(1), _i(0)))
            ca, cb = rank_of(nans[0], nans[1]), rank_of(nans[2], nans[3])
            same_re = apply("or", apply("eq", ar, br), apply("and", nans[0], nans[2]))
            lex = apply("or", apply("lt", ar, br), apply("and", same_re, apply("lt", ai, bi)))
            return apply("or", apply("lt", ca, cb), apply("and", apply("eq", ca, cb), lex))

        def comes_first(a, b) -> Expr:
            if pair:
                return complex_before(b, a) if descending else complex_before(a, b)
            if not d.is_float:
                return apply("gt" if descending else "lt", a, b)
            nan_a, nan_b = apply("ne", a, a), apply("ne", b, b)
            if descending:
                return apply("or", apply("gt", a, b), apply("and", nan_a, apply("not", nan_b)))
            return apply("or", apply("lt", a, b), apply("and", nan_b, apply("not", nan_a)))

        def sorted_runs():
            # Runs of SORT_RUN elements, each sorted by insertion as it is copied in: element
            # t moves left past each element of its run it strictly comes before.
            def row(index):
                r_name, r = var("r")
                t_name, t = var("t")
                q_name, q = var("q")
                base_name, base = var("base")
                key_lets, key = bind(self.fresh("key"), load(self.arg_names[x.id], at(index, t), d))
                moving, pos = self.fresh("moving"), self.fresh("at")
                still = self.fresh("still")
                here = load(keys[0], at(index, q), d)
                after = at(index, apply("add", q, _i(1)))
                moves = Var(still, bool_)
                # Branch-free: an element that stays is written back as it is.
                shift = store(keys[0], after, pick(moves, here, load(keys[0], after, d)))
                if order is not None:
                    shift.append(Store(order[0], after, apply("select", moves, Load(order[0], at(index, q), INDEX),
                                                             Load(order[0], after, INDEX))))
                inner = (Let(still, apply("and", AccValue(moving, bool_), comes_first(key, here))),
                         Update(moving, moves),
                         *shift,
                         Update(pos, apply("select", moves, _i(-1), _i(0))))
                step = [*key_lets,
                        Accumulator(moving, "all", bool_, constant(True, bool_)),
                        Accumulator(pos, "sum", INDEX, t),
                        Loop(q_name, apply("sub", t, _i(1)), apply("sub", base, _i(1)), -1, inner),
                        *store(keys[0], at(index, AccValue(pos, INDEX)), key)]
                if order is not None:
                    step.append(Store(order[0], at(index, AccValue(pos, INDEX)), t))
                runs = apply("idiv", apply("add", n, _i(SORT_RUN - 1)), _i(SORT_RUN))
                block = (Let(base_name, apply("mul", r, _i(SORT_RUN))),
                         Loop(t_name, base, apply("min", apply("add", base, _i(SORT_RUN)), n), 1, tuple(step)))
                return (Loop(r_name, _i(0), runs, 1, block),)
            return over_rows(row)

        def copy(src: int, dst: int):
            def row(index):
                k_name, k = var("k")
                if order is not None:
                    body = [Store(order[dst], at(index, k), Load(order[src], at(index, k), INDEX))]
                else:
                    body = store(keys[dst], at(index, k), load(keys[src], at(index, k), d))
                return (Loop(k_name, _i(0), n, 1, tuple(body)),)
            return over_rows(row)

        _, width = var("w")
        _, twice = var("w2")

        def merge(src: int, dst: int) -> tuple:
            def row(index):
                b_name, b = var("b")
                k_name, k = var("k")
                lo_name, lo = var("lo")
                mid_name, mid = var("mid")
                hi_name, hi = var("hi")
                left, right = self.fresh("left"), self.fresh("right")
                li_name, li = var("li")
                rj_name, rj = var("rj")
                a_lets, a = bind(self.fresh("a"), load(keys[src], at(index, li), d))
                b_lets, bv = bind(self.fresh("b"), load(keys[src], at(index, rj), d))
                take = self.fresh("take")
                took = Var(take, bool_)
                i, j = AccValue(left, INDEX), AccValue(right, INDEX)
                step = [
                    Let(li_name, apply("min", i, apply("sub", mid, _i(1)))),
                    Let(rj_name, apply("min", j, apply("sub", hi, _i(1)))),
                    *a_lets,
                    *b_lets,
                    Let(take, apply("and", apply("lt", j, hi), apply("or", apply("ge", i, mid), comes_first(bv, a)))),
                    *store(keys[dst], at(index, k), pick(took, bv, a)),
                ]
                if order is not None:
                    from_right = Load(order[src], at(index, rj), INDEX)
                    from_left = Load(order[src], at(index, li), INDEX)
                    step.append(Store(order[dst], at(index, k), apply("select", took, from_right, from_left)))
                step += [Update(left, apply("select", took, _i(0), _i(1))),
                         Update(right, apply("select", took, _i(1), _i(0)))]
                runs = apply("idiv", apply("add", n, apply("sub", twice, _i(1))), twice)
                pair = (Let(lo_name, apply("mul", b, twice)),
                        Let(mid_name, apply("min", apply("add", lo, width), n)),
                        Let(hi_name, apply("min", apply("add", lo, twice), n)),
                        Accumulator(left, "sum", INDEX, lo),
                        Accumulator(right, "sum", INDEX, mid),
                        Loop(k_name, lo, hi, 1, tuple(step)))
                return (Loop(b_name, _i(0), runs, 1, pair),)
            return over_rows(row)

        p_name, p = var("p")
        passes = self.fresh("passes")
        odd = apply("eq", apply("and", AccValue(passes, INDEX), _i(1)), _i(1))
        one_pass = (Let(width.name, apply("shl", _i(1), p)),
                    If(apply("lt", width, n), (
                        Let(twice.name, apply("shl", width, _i(1))),
                        If(odd, merge(1, 0), merge(0, 1)),
                        Update(passes, _i(1)))))
        body = (*sorted_runs(),
                Accumulator(passes, "sum", INDEX, _i(0)),
                Loop(p_name, _i(SORT_RUN.bit_length() - 1), _i(MAX_SORT_PASSES), 1, one_pass),
                If(odd, copy(1, 0)))
        buffers = [kernel_buffer(self.arg_names[x.id], "in", d, rank),
                   kernel_buffer("out0", "out", INDEX if positions else d, rank), *temps]
        return Kernel(self.name, tuple(buffers), tuple(self.sizes), body, ((),))

    def running_sum_in_float32(self, op: Op) -> Kernel:
        """A float16 cumsum as NumPy's reference computes it: a float32 accumulator along
        the axis (the innermost loop), each partial sum rounded to float16 as it is stored."""
        (x,) = op.inputs
        shape = x.type.shape
        axis = op.attrs["axis"] % len(shape)
        top = _Scope(None)
        self.scopes = [top]
        others = [k for k in range(len(shape)) if k != axis]
        idx: list = [None] * len(shape)
        for k in others:
            var = self.fresh("i")
            self.open_loop(var, self.dim(shape[k]))
            idx[k] = Var(var, INDEX)
        acc = self.fresh("acc")
        self.scopes[-1].body.append(Accumulator(acc, "sum", float32, constant(0, float32)))
        step = self.fresh("i")
        self.open_loop(step, self.dim(shape[axis]))
        n = self.dim(shape[axis])
        at = apply("sub", apply("sub", n, _i(1)), Var(step, INDEX)) if op.attrs["reverse"] else Var(step, INDEX)
        idx[axis] = at
        value = apply("cast", load(self.arg_names[x.id], tuple(idx), x.type.dtype), to=float32)
        self.scopes[-1].body.append(Update(acc, value))
        self.scopes[-1].body.extend(store("out0", tuple(idx), apply("cast", AccValue(acc, float32),
                                                                       to=x.type.dtype)))
        while len(self.scopes) > 1:
            self.close_loop()
        buffers = [kernel_buffer(self.arg_names[x.id], "in", x.type.dtype, len(shape)),
                   kernel_buffer("out0", "out", x.type.dtype, len(shape))]
        return Kernel(self.name, tuple(buffers), tuple(self.sizes), tuple(top.body), ((),))


def _overwritable(body: tuple, reads: dict, out_types: list) -> tuple:
    """Per output of a kernel of several, each stored once at the index of the loop body
    that stores it: the inputs (``reads``: name -> (type, the indices it is read at)) of its
    type read only at that index and by no statement after its store, which that store may
    overwrite element for element (``Kernel.in_place``: Adam's update writing parameters
    and moments over themselves); nothing for an output stored more than once."""
    bodies = [body, *(s.body for s in walk_statements(body) if isinstance(s, Loop))]
    result = []
    for k, out_t in enumerate(out_types):
        found = [(stmts, n) for stmts in bodies for n, t in enumerate(stmts)
                 if isinstance(t, Store) and t.buffer == f"out{k}"]
        if len(found) != 1:
            result.append(())
            continue
        stmts, n = found[0]
        later = {e.buffer for e in expressions(stmts[n + 1:]) if isinstance(e, Load)}
        result.append(tuple(name for name, (t, at) in reads.items()
                            if t == out_t and at == {stmts[n].index} and name not in later))
    return tuple(result)


def _mark_streaming(s: object) -> object:
    """``s`` with the ``stream`` hint when it is a parallel 1-D elementwise loop that reads
    inputs only at its own index and ends storing one float at it."""
    if not isinstance(s, Loop) or not s.parallel or not s.body:
        return s
    *work, store = s.body
    var = Var(s.var, INDEX)
    # A constant stored is a reduction's cells starting (``fill_cells``), which its nest reads
    # back at once: from the cache, not from memory.
    if not (isinstance(store, Store) and store.index == (var,) and not isinstance(store.value, Const)
            and store.value.dtype.is_float
            and store.value.dtype.itemsize >= 4 and all(isinstance(w, Let) for w in work)):
        return s

    def only_loads_at_var(e: Expr) -> bool:
        if isinstance(e, Load):
            return e.buffer.startswith("in") and e.index == (var,)
        if isinstance(e, Var):
            return e != var
        return not isinstance(e, AccValue) and all(only_loads_at_var(c) for c in children(e))
    if not all(only_loads_at_var(w.value) for w in work) or not only_loads_at_var(store.value):
        return s
    return Loop(s.var, s.start, s.stop, s.step, s.body, s.parallel, stream=True)


def _empty(s: object) -> bool:
    """Whether ``s`` is a loop nest that stores nothing (its ``Let``s are only read by it)."""
    return isinstance(s, Loop) and all(isinstance(t, Let) or _empty(t) for t in s.body)


def _fill_slots(body: tuple) -> tuple:
    """``body`` with each filled store slot replaced by its store, unfilled ones dropped."""
    out = []
    for s in body:
        if isinstance(s, _StoreSlot):
            if s.store is not None:
                out.append(s.store)
        elif isinstance(s, Loop):
            out.append(Loop(s.var, s.start, s.stop, s.step, _fill_slots(s.body), s.parallel, s.stream))
        else:
            out.append(s)
    return tuple(out)


def _reshape_groups(out_shape: tuple, in_shape: tuple) -> list:
    """The shortest runs of axes ``((out_start, out_stop), (in_start, in_stop))`` of a
    row-major reshape whose element counts agree, in order (each run of one shape holds the
    same elements as its partner of the other): axes a reshape splits or merges together."""
    groups = []
    o = i = 0
    while o < len(out_shape) or i < len(in_shape):
        o1, i1 = o, i
        po = pi = 1
        while True:
            if po <= pi and o1 < len(out_shape) and (po < pi or o1 == o or i1 == len(in_shape)):
                po *= out_shape[o1]
                o1 += 1
            elif i1 < len(in_shape):
                pi *= in_shape[i1]
                i1 += 1
            else:
                break
            if po == pi and o1 > o and i1 > i and not (o1 < len(out_shape) and out_shape[o1] == 1) \
                    and not (i1 < len(in_shape) and in_shape[i1] == 1):
                break
        if po != pi or po == 0:
            return [((0, len(out_shape)), (0, len(in_shape)))]
        groups.append(((o, o1), (i, i1)))
        o, i = o1, i1
    return groups


def broadcast_index(idx: tuple, out_shape: tuple, in_shape: tuple) -> tuple:
    """The index of an operand of ``in_shape`` broadcast (NumPy rules) to ``out_shape``."""
    off = len(out_shape) - len(in_shape)
    return tuple(_i(0) if n == 1 and out_shape[k + off] != 1 else idx[k + off] for k, n in enumerate(in_shape))


def _outer_axis(shape: tuple) -> int:
    """The first axis of ``shape`` longer than 1 (0 if none): its loop is a nest's outermost,
    the loops of axes of 1 before it inlined (``close_loop``), and the one a parallel nest
    splits (a batch of 1's elementwise kernel over [1, 1024, 1024] had run on one thread)."""
    return next((k for k, n in enumerate(shape) if n != 1), 0)


def _iterations(body: tuple, sizes: dict) -> int:
    """How many times the innermost statements of ``body`` run (1 for a body of no loops;
    its loops' bounds evaluated at ``sizes``, a bound that depends on an enclosing loop's
    index at that loop's first iteration): a nest's elements, a row's passes over it."""
    loops = [s for s in body if isinstance(s, Loop)]
    if not loops:
        return 1
    total = 0
    for s in loops:
        lo, hi = evaluate_index(s.start, sizes), evaluate_index(s.stop, sizes)
        trips = 0 if lo is None or hi is None else max(0, -(-(hi - lo) // s.step))
        total += trips * _iterations(s.body, sizes)
    return total


def unit_axes_index(idx: tuple, out_shape: tuple, in_shape: tuple) -> tuple:
    """The operand index when only size-1 axes were added or removed (squeeze, expand_dims)."""
    it = iter([i for i, n in zip(idx, out_shape) if n != 1])
    return tuple(_i(0) if n == 1 else next(it) for n in in_shape)


def lower_block(block: Block, name: str = "kernel", collapse: bool = False) -> Kernel:
    """The loop-IR kernel of a ``fusion`` op's ``block`` (inputs ``in0..``, outputs
    ``out0..`` in the block's order). Raises ``Unsupported`` for an op it cannot lower
    (among complex values: a function with no definition over their parts, a product).
    A block of one op of ``OWN_KERNEL_ROLES`` gets that op's own kernel. ``collapse``:
    nests over leading axes read as one position become one loop (``collapse_nests``),
    for a renderer that reads a buffer by its row-major offset without checking each index
    against its dimension (the CPU's; not CUDA's arrays), a nest's costly values that
    depend only on its innermost index are computed once per index (``hoist_columns``), and
    a large reduction over a first axis fills blocks of partial results in parallel
    (``LEADING_PARTS``, for the CPU's thread pool)."""
    if len(block.ops) == 1 and block.ops[0].primitive.role in OWN_KERNEL_ROLES:
        return getattr(_Lowering(block, name), f"{block.ops[0].primitive.role}_kernel")()
    return _Lowering(block, name, collapse).kernel()
