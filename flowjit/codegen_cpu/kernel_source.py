"""Numba source for one ``fusion`` block: a loop nest per output, scalar code inside.

Every value of the block is computed at an index (one index expression per dimension of
its own shape): elementwise ops apply their registry scalar template to their operands at
the broadcast index; layout ops only rewrite the index (transpose permutes it, a slice
scales and shifts it, a reshape goes through the linear index, pad and concatenate read
clamped indices and select); reductions become loops over the reduced axes. A value is
computed once per loop scope and hoisted to the outermost loop whose variables its index
uses, so softmax's row maximum and row sum are computed once per row, not per element.
Inputs and outputs are arrays the driver passes in (0-d ones as 1-element arrays);
the kernel allocates nothing.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import numpy as np

from flowjit.codegen_cpu import streaming
from flowjit.ir.core import Block, Op, Value
from flowjit.ir.dtypes import DType, float32, float64
from flowjit.ir.index_source import (
    broadcast_index,
    cast_expr,
    clamp,
    highest,
    layout_expression,
    linear_index,
    literal,
    lowest,
    np_type,
    reduce_strength,
    scalar_constant,
)

# Output size from which the outer loop is a prange: threads cost ~10us to start, and
# numba's parallel lowering adds about half a second to the kernel's compile time.
PARALLEL_MIN_ELEMENTS = 1 << 18
# Elements a float32 sum adds in float32 before adding the block's sum to a float64 total.
SUM_BLOCK = 128


class UnsupportedOp(Exception):
    """An op this generator has no code for; the runtime runs its kernel with the interpreter."""


@dataclass
class _Scope:
    var: str | None
    lines: list[str] = field(default_factory=list)
    memo: dict[tuple, str] = field(default_factory=dict)


class KernelWriter:
    """Builds the source of one kernel; ``source()`` returns it."""

    def __init__(self, block: Block, name: str):
        self.block = block
        self.name = name
        self.arg_names = {a.id: f"in{i}" for i, a in enumerate(block.args)}
        self.counter = 0
        self.scopes: list[_Scope] = []
        self.local_depth: dict[str, int] = {}  # a bound local -> the scope it is bound in
        self.reads: dict[int, set[tuple[str, ...]]] = {}  # arg id -> the indices it is read at
        self.out_index: list[str] = []  # the loop variables of the first output
        # Reductions whose input elements could be stored in the output for reuse:
        # input id -> (its index in the loop, the reduced axis, marker line, local).
        self.storable: dict[int, tuple[list[str], int, str, str]] = {}
        self.stores: dict[str, str] = {}  # marker -> the store that replaces it
        self.stored_value: dict[int, int] = {}  # output -> the one value stored in it
        self.written: dict[int, int] = {}  # value id -> the output an emitted nest holds it in
        self.current: tuple = ([], [])  # the outputs of the loop nest being written, its index
        # Sizes are read from the argument arrays (``n1 = in0.shape[1]``), so the source --
        # and the compiled kernel, cached by source -- serves every shape that leads to
        # the same code, e.g. every batch size.
        self.sizes: dict[int, str] = {}
        self.size_lines: list[str] = []
        arrays = [(self.arg_names[a.id], a.type.shape) for a in block.args]
        arrays += [(f"out{k}", v.type.shape) for k, v in enumerate(block.returns)]
        for name, shape in arrays:
            for d, n in enumerate(shape):
                if n > 1 and n not in self.sizes:
                    self.sizes[n] = f"n{len(self.sizes)}"
                    self.size_lines.append(f"{self.sizes[n]} = {name}.shape[{d}]")

    def dim(self, n: int) -> str:
        """Size ``n`` in the source: a name bound to an argument's dimension when one has it."""
        return self.sizes.get(n, str(n))

    # ---- scopes -----------------------------------------------------------------------
    def fresh(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def _target_scope(self, idx: list[str]) -> int:
        text = " ".join(idx)
        used = set(re.findall(r"\b[ir]\d+\b", text))
        depth = max((self.local_depth[j] for j in re.findall(r"\bj\d+\b", text)), default=0)
        for k, s in enumerate(self.scopes):
            if s.var in used:
                depth = max(depth, k)
        return depth

    def clamp(self, index: str, n: str) -> str:
        """A local (``j``) holding ``index`` clamped to ``[0, n)``, bound in the scope of the
        loop variables it uses: a pad of a pad reads a clamp of a clamp, and written out
        as text the nest grows with every level (numba took 30 s on a pooling gradient)."""
        return self.temp(clamp(index, n), [index], ("clamp", index, n), prefix="j")

    def temp(self, expr: str, idx: list[str], key: tuple, prefix: str = "t") -> str:
        """Bind ``expr`` to a local in the outermost scope that has every variable it uses."""
        depth = self._target_scope(idx)
        for s in self.scopes[:depth + 1]:
            if key in s.memo:
                return s.memo[key]
        name = self.fresh(prefix)
        scope = self.scopes[depth]
        scope.lines.append(f"{name} = {expr}")
        scope.memo[key] = name
        self.local_depth[name] = depth
        return name

    # ---- values -----------------------------------------------------------------------
    def value(self, v: Value, idx: list[str]) -> str:
        """A local holding ``v`` at index ``idx``."""
        key = (v.id, tuple(idx))
        for s in self.scopes:
            if key in s.memo:
                return s.memo[key]
        if v.id in self.written:
            # An output an earlier loop nest of this kernel wrote: read it, not recompute it.
            return self.temp(f"out{self.written[v.id]}[{', '.join(idx) if idx else '0'}]", idx, key)
        if v.producer is None:
            name = self.arg_names[v.id]
            self.reads.setdefault(v.id, set()).add(tuple(idx))
            return self.temp(f"{name}[{', '.join(idx) if idx else '0'}]", idx, key)
        stored = self.read_stored(v, idx)
        if stored is not None:
            return self.temp(stored, idx, key)
        op = v.producer
        expr, deps = self.expression(op, v, idx)
        return self.temp(expr, deps, key)

    def expression(self, op: Op, v: Value, idx: list[str]) -> tuple[str, list[str]]:
        prim = op.primitive
        out = v.type
        d = out.dtype
        if prim.kind == "constant":
            arr = op.attrs["value"].array
            if arr.size != 1:
                raise UnsupportedOp("a non-scalar constant inside a kernel")
            return literal(arr.reshape(-1)[0], d), []
        if prim.kind == "elementwise":
            return self.elementwise(op, idx), idx
        if prim.kind == "reduction":
            return self.reduction(op, idx), idx
        if prim.kind == "layout":
            return self.layout(op, idx), idx
        raise UnsupportedOp(f"{prim.name} ({prim.kind}) inside a kernel")

    def elementwise(self, op: Op, idx: list[str]) -> str:
        out = op.results[0].type
        # A scalar constant operand is inlined as a literal, so `pow(x, 3)` can become
        # multiplies below.
        # Operands with fewer loop variables in their index first: a row's reduction is
        # then generated before the row's elements, which may reuse what it stored.
        names = [""] * len(op.inputs)
        indices = [broadcast_index(idx, out.shape, x.type.shape) for x in op.inputs]
        for k in sorted(range(len(op.inputs)), key=lambda k: self._target_scope(indices[k])):
            x = op.inputs[k]
            lit = scalar_constant(x)
            names[k] = literal(lit, x.type.dtype) if lit is not None else self.value(x, indices[k])
        template = op.primitive.template
        in_d = op.inputs[0].type.dtype
        if isinstance(template, dict):
            template = template[in_d.kind]
        assert template is not None
        if op.primitive.role == "convert":
            return cast_expr(names[0], in_d, out.dtype)
        expr = re.sub(r"\b([abc])\b", lambda m: names["abc".index(m.group(1))], typed_template(template, in_d))
        return cast_expr(f"({reduce_strength(expr)})", None, out.dtype)

    def layout(self, op: Op, idx: list[str]) -> str:
        expr = layout_expression(op, idx, self.value, self.dim, self.clamp)
        if expr is None:
            raise UnsupportedOp(f"layout op {op.name} (role {op.primitive.role})")
        return expr

    def reduction(self, op: Op, idx: list[str]) -> str:
        reducer = op.primitive.reducer
        if reducer is None:
            raise UnsupportedOp(f"reduction {op.name} declares no reducer")
        is_arg = reducer[0] == "arg"
        x = op.inputs[0]
        nd = x.type.ndim
        if "axes" in op.attrs:
            axes = sorted({ax % nd for ax in op.attrs["axes"]})
        else:
            axes = [op.attrs["axis"] % nd]
        keep = op.attrs.get("keepdims", False)
        d = op.results[0].type.dtype
        if not is_arg and axes and axes == list(range(len(axes))) and len(axes) < nd:
            kept = idx[len(axes):] if keep else idx
            return cast_expr(f"{self.leading_reduction(op, axes)}[{', '.join(kept)}]", None, d)
        # The index into x: loop variables on reduced axes, the result's index elsewhere.
        it = iter(idx)
        loop_vars = {}
        full = []
        for k in range(nd):
            if k in axes:
                if keep:
                    next(it)
                loop_vars[k] = self.fresh("r")
                full.append(loop_vars[k])
            else:
                full.append(next(it))
        depth = self._target_scope(idx)
        outer = self.scopes[depth]
        acc = self.fresh("acc")
        xd = x.type.dtype
        if is_arg:
            cmp = reducer[1]
            best = self.fresh("best")
            init = "np.inf" if cmp == "<" else "-np.inf"
            outer.lines.append(f"{best} = {cast_expr(init, None, xd) if xd.is_float else extreme(xd, cmp)}")
            outer.lines.append(f"{acc} = np.int64(0)")
            outer.lines.append("found = False")
        else:
            init, combine = reducer
            start = {"lowest": lowest(xd), "highest": highest(xd)}.get(init, init)
            # float32 sums and products accumulate in float64: sequential f32 sums would
            # lose more than NumPy's pairwise ones.
            acc_d = float64 if d == float32 and init in ("0", "1") else d
            outer.lines.append(f"{acc} = {cast_expr(start, None, acc_d)}")
        # A float32 sum adds blocks of SUM_BLOCK elements in float32, each block's sum into
        # the float64 total: a float64 addition in the loop would make LLVM vectorize the
        # whole loop body at float64 width, half the float32 lanes (softmax's exp ran 4
        # wide, not 8). Vectorized, a block is 32 or more partial sums (lanes x unrolled
        # copies) of at most 4 elements and a tree of 5+ levels: at most ~10 roundings per
        # element, NumPy's pairwise float32 sum up to 16 + log2(n / 128) (a loop that does
        # not vectorize adds its block's 128 in sequence).
        # A reduction over no axes (of a 0-d value, or ``axis=()``) opens no loop: it
        # combines its one element into the start value, with no block to flush.
        blocked = (not is_arg and axes and acc_d != d and d == float32
                   and re.fullmatch(r"acc \+ v", reducer[1]) is not None)
        # Open the loops inside the outer scope, compute x there, combine, close.
        opened = []
        saved = self.scopes
        self.scopes = self.scopes[:depth + 1]
        for k in axes:
            n = x.type.shape[k]
            scope = _Scope(loop_vars[k])
            scope.lines.append(f"for {loop_vars[k]} in range({self.dim(n)}):")
            self.scopes.append(scope)
            opened.append(scope)
        val = self.value(x, full)
        body = self.scopes[-1]
        if len(axes) == 1 and not is_arg:
            # The output may need these very elements next (softmax's exp(x - max) is
            # summed, then divided by the sum): a marker where they can be stored.
            marker = self.fresh("#store")
            body.lines.append(marker)
            self.storable[x.id] = (full, axes[0], marker, val)
        if is_arg:
            lin = linear_index([loop_vars[k] for k in axes], [x.type.shape[k] for k in axes], self.dim)
            nan_first = f" or ({val} != {val} and {best} == {best})" if xd.is_float else ""
            body.lines.append(f"if (not found) or ({val} {cmp} {best}){nan_first}:")
            body.lines.append(f"    {best} = {val}")
            body.lines.append(f"    {acc} = np.int64({lin})")
            body.lines.append("    found = True")
        elif blocked:
            part = self.fresh("part")
            body.lines.append(f"{part} = {accumulate(combine, part, val, d)}")
        else:
            body.lines.append(f"{acc} = {accumulate(combine, acc, val, acc_d)}")
        for scope in reversed(opened):
            self.scopes.pop()
            head, *rest = scope.lines
            parent = self.scopes[-1]
            if blocked and scope is opened[-1]:
                n = x.type.shape[axes[-1]]
                parent.lines.extend(self.blocked_sum(scope.var, n, rest, part, acc))
                continue
            parent.lines.append(head)
            parent.lines.extend("    " + line for line in rest)
        self.scopes = saved
        return acc if is_arg else cast_expr(acc, None, d)

    def blocked_sum(self, var: str, n: int, body: list[str], part: str, acc: str) -> list[str]:
        """The innermost loop of a float32 sum, ``var`` over ``range(n)`` with ``body``
        adding to ``part``, as loops over whole blocks of SUM_BLOCK (a constant trip count
        the vectorizer unrolls without a remainder) and one over the rest, each block's
        float32 ``part`` added to the float64 ``acc``. Both loops take their bounds from the
        size at run time, so the source is the same for every size of the reduced axis."""
        b, j = self.fresh("rb"), self.fresh("rj")
        size = self.dim(n)
        reset = f"{part} = np.float32(0)"
        flush = f"{acc} = {acc} + np.float64({part})"
        return [f"for {b} in range({size} // {SUM_BLOCK}):",
                f"    {reset}",
                f"    for {j} in range({SUM_BLOCK}):",
                f"        {var} = {b} * {SUM_BLOCK} + {j}",
                *("        " + line for line in body),
                f"    {flush}",
                reset,
                f"for {var} in range({size} // {SUM_BLOCK} * {SUM_BLOCK}, {size}):",
                *("    " + line for line in body),
                flush]

    def leading_reduction(self, op: Op, axes: list[int]) -> str:
        """An array of the results of a reduction over leading axes (a bias gradient's sum
        over the batch), made before the loop nest in row-major order: the inner loop runs
        along the kept axes, contiguous and vectorizable, where reducing each column on its
        own would stride through memory."""
        key = ("leading", op.results[0].id)
        top = self.scopes[0]
        if key in top.memo:
            return top.memo[key]
        x = op.inputs[0]
        init, combine = op.primitive.reducer
        xd, d = x.type.dtype, op.results[0].type.dtype
        start = {"lowest": lowest(xd), "highest": highest(xd)}.get(init, init)
        acc_d = float64 if d == float32 and init in ("0", "1") else d
        kept_shape = x.type.shape[len(axes):]
        name = self.fresh("cols")
        top.lines.append(f"{name} = np.full(({', '.join(self.dim(n) for n in kept_shape)},), "
                         f"{cast_expr(start, None, acc_d)}, {np_type(acc_d)})")
        saved = self.scopes
        self.scopes = self.scopes[:1]
        loop_vars = [self.fresh("r" if k in axes else "i") for k in range(x.type.ndim)]
        opened = []
        for var, n in zip(loop_vars, x.type.shape):
            scope = _Scope(var, [f"for {var} in range({self.dim(n)}):"])
            self.scopes.append(scope)
            opened.append(scope)
        val = self.value(x, loop_vars)
        cell = f"{name}[{', '.join(loop_vars[len(axes):])}]"
        self.scopes[-1].lines.append(f"{cell} = {accumulate(combine, cell, val, acc_d)}")
        for scope in reversed(opened):
            self.scopes.pop()
            head, *rest = scope.lines
            self.scopes[-1].lines.append(head)
            self.scopes[-1].lines.extend("    " + line for line in rest)
        self.scopes = saved
        top.memo[key] = name
        return name

    # ---- kernel ---------------------------------------------------------------------------
    def source(self) -> str:
        ins = [self.arg_names[a.id] for a in self.block.args]
        outs = [f"out{i}" for i in range(len(self.block.returns))]
        lines = [f"def {self.name}({', '.join(ins + outs)}):"]
        # Loops over the polynomial functions are bound by arithmetic, not memory: ask for
        # the CPU's widest vectors, in the kernel and in each parallel loop body numba
        # outlines into a function of its own.
        wide = uses_vector_math(self.block)
        if wide:
            lines.append("    wide_vectors()")
        lines.extend("    " + line for line in self.size_lines)
        for shape, outputs in self._loop_nests():
            self.scopes = [_Scope(None)]
            self.storable = {}
            loop_vars = [self.fresh("i") for _ in shape]
            opened = []
            size = math.prod(shape)
            for dim, (var, n) in enumerate(zip(loop_vars, shape)):
                rng = "prange" if dim == 0 and size >= PARALLEL_MIN_ELEMENTS else "range"
                scope = _Scope(var, [f"for {var} in {rng}({self.dim(n)}):"])
                if wide and rng == "prange":
                    scope.lines.append("wide_vectors()")
                self.scopes.append(scope)
                opened.append(scope)
            full = [(k, v) for k, v, depth in outputs if depth == len(shape)]
            if outputs[0][0] == 0:
                self.out_index = loop_vars
            self.current = (full, loop_vars)
            # Every value first, then the stores: a value may read a row stored in an output.
            stores = []
            for k, v, depth in outputs:
                idx = loop_vars[:depth] + ["0"] * (len(v.type.shape) - depth)
                val = self.value(v, idx)
                target = f"out{k}[{', '.join(idx) if idx else '0'}]"
                if depth < len(shape):  # a row's result: stored once per row, in the row's scope
                    self.scopes[depth].lines.append(f"{target} = {val}")
                    continue
                if len(full) > 1:
                    name = self.fresh("r")
                    self.scopes[-1].lines.append(f"{name} = {val}")
                    val = name
                stores.append(f"{target} = {val}")
            self.scopes[-1].lines.extend(stores)
            streamed = self.streamed_loop(opened, outputs)
            if streamed:
                opened = []
                self.scopes = [self.scopes[0]]
                self.scopes[0].lines.extend(streamed)
            for scope in reversed(opened):
                self.scopes.pop()
                head, *rest = scope.lines
                self.scopes[-1].lines.append(head)
                self.scopes[-1].lines.extend("    " + line for line in rest)
            lines.extend("    " + line for line in self.scopes[0].lines)
            self.written.update((v.id, k) for k, v, _ in outputs)
        lines.append("    return 0")
        text = "\n".join(lines) + "\n"
        return re.sub(r"^( *)(#store\d+)\n", lambda m: f"{m.group(1)}{self.stores[m.group(2)]}\n"
                      if m.group(2) in self.stores else "", text, flags=re.M)

    def streamed_loop(self, opened: list[_Scope], outputs: list[tuple[int, Value, int]]) -> list[str]:
        """The lines of a 1-D parallel elementwise nest that streams its stores when the
        output is large (flowjit.codegen_cpu.streaming), or [] when the nest is not one:
        the loop must read its inputs only at the loop index and store one float output."""
        if len(opened) != 1 or len(self.block.returns) != 1 or self.stores or len(outputs) != 1:
            return []
        loop = opened[0]
        out = self.block.returns[0].type
        header, *body = loop.lines
        m = re.fullmatch(r"for (i\d+) in prange\((\w+)\):", header)
        if m is None or out.dtype not in (float32, float64) or not body:
            return []
        var, n = m.groups()
        *work, store = body
        value = store.split(" = ")[-1]
        if store != f"out0[{var}] = {value}":
            return []
        inputs = sorted(set(re.findall(rf"\b(in\d+)\[{var}\]", "\n".join(work))))
        if re.search(rf"\b{var}\b", re.sub(rf"\b(in\d+)\[{var}\]", "", "\n".join(work))):
            return []  # the index is used otherwise (an iota, a shifted read)
        itemsize = out.dtype.itemsize
        width = streaming.CHUNK_BYTES // itemsize
        block = streaming.PAGES * streaming.PAGE_BYTES // itemsize
        page = streaming.PAGE_BYTES // itemsize
        head, nblocks, b, line, pg, start, e, chunk = (self.fresh(p) for p in "hnblpoec")
        views = {x: self.fresh("s") for x in inputs}
        ahead = streaming.PREFETCH_BLOCKS * block
        arg_of = {self.arg_names[a.id]: a for a in self.block.args}
        prefetches = [f"prefetch_line({x}, {start} + {ahead + k * streaming.CHUNK_BYTES // size})"
                      for x in inputs if ahead
                      for size in [arg_of[x].type.dtype.itemsize]
                      for k in range(max(1, size // itemsize))]  # every line of a wider input
        wide = [w for w in work if w == "wide_vectors()"]
        work = [w for w in work if w != "wide_vectors()"]
        chunked = [re.sub(rf"\b(in\d+)\[{var}\]", lambda m: f"{views[m.group(1)]}[{e}]", w) for w in work]
        chunked.append(f"{chunk}[{e}] = {value}")
        plain = [f"        {w}" for w in work + [store]]
        return [
            f"{head} = stream_head(out0) if {n} * {itemsize} >= {streaming.STREAM_MIN_BYTES} else -1",
            f"if {head} >= 0:",
            f"    {nblocks} = ({n} - {head}) // {block}",
            f"    for {var} in range({head}):",
            *plain,
            f"    for {b} in prange({nblocks}):",
            *(f"        {w}" for w in wide),
            f"        {chunk} = stack_chunk{itemsize * 8}()",
            f"        for {line} in range({page // width}):",
            f"            for {pg} in range({streaming.PAGES}):",
            f"                {start} = {head} + {b} * {block} + {pg} * {page} + {line} * {width}",
            *(f"                {w}" for w in prefetches),
            *(f"                {views[x]} = {x}[{start}:{start} + {width}]" for x in inputs),
            f"                for {e} in range({width}):",
            *(f"                    {w}" for w in chunked),
            f"                stream_chunk(out0, {start}, {chunk})",
            "        stream_fence()  # each thread orders its own streaming stores",
            f"    for {var} in range({head} + {nblocks} * {block}, {n}):",
            *plain,
            "else:",
            f"    {header}",
            *(f"        {w}" for w in body),
        ]

    def _loop_nests(self) -> list[tuple[tuple[int, ...], list[tuple[int, Value, int]]]]:
        """The loop nests of the kernel: each a shape and the outputs written in it, with
        the loop depth each is written at. Outputs of one shape share a nest, so what they
        have in common is computed once per element and the inputs are read once; an
        output shaped like a nest's leading axes (with trailing 1s: a row's sum or max) is
        written in that nest's row loop, next to the row work that computes it."""
        nests: list[tuple[tuple[int, ...], list[tuple[int, Value, int]]]] = []
        order = sorted(range(len(self.block.returns)), key=lambda k: -self.block.returns[k].type.size)
        for k in order:
            v = self.block.returns[k]
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
        # A nest runs after the nests whose outputs it reads (see ``value``): by the
        # program position of the earliest op it writes.
        position = {r.id: i for i, op in enumerate(self.block.ops) for r in op.results}
        nests.sort(key=lambda n: (min(position.get(v.id, -1) for _, v, _ in n[1]), n[1][0][0]))
        return nests

    def read_stored(self, v: Value, idx: list[str]) -> str | None:
        """A read of ``v`` at ``idx`` from the output, when a reduction loop of this row can
        store ``v`` there first: ``v`` has the output's type, ``idx`` is the output's own
        index, and the reduction ran over the innermost output axis with every other index
        the same. The reduction then computes each element once for both uses."""
        outputs, loop_vars = self.current
        entry = self.storable.get(v.id)
        if entry is None or list(idx) != list(loop_vars):
            return None
        full, axis, marker, val = entry
        if axis != len(idx) - 1 or full[:-1] != list(idx[:-1]):
            return None
        # One stored row per output: a second would overwrite the first before it is read.
        k = next((k for k, out_v in outputs
                  if out_v.type == v.type and self.stored_value.get(k, v.id) == v.id), None)
        if k is None:
            return None
        self.stored_value[k] = v.id
        self.stores[marker] = f"out{k}[{', '.join(full)}] = {val}"
        return f"out{k}[{', '.join(idx)}]"

    def in_place_inputs(self) -> list[int]:
        """The inputs (positions) the output may overwrite: after ``source()``, those of the
        output's type that are read only at the output's own index, in a one-output kernel
        (each element is read just before the same element is written), and no row is
        stored in the output ahead of its loop."""
        if len(self.block.returns) != 1 or not self.out_index or self.stores:
            # A stored row is written ahead of the output loop, over inputs not yet read.
            return []
        out_t = self.block.returns[0].type
        return [k for k, a in enumerate(self.block.args)
                if a.type == out_t and self.reads.get(a.id) == {tuple(self.out_index)}]


# Functions with a vectorizable implementation per float width (flowjit.codegen_cpu.
# scalar_math); libm's, which numba calls otherwise, keep a loop from vectorizing.
_TYPED_FUNCTIONS = {
    "exp": ("exp32", "exp64"), "expm1": ("expm1_32", "expm1_64"), "log": ("log32", "log64"),
    "tanh": ("tanh32", "tanh64"), "erf": ("erf32", "erf64"),
    "maximum": ("fmaximum", "fmaximum"), "minimum": ("fminimum", "fminimum"),
    "floordiv": ("floordiv_float", "floordiv_float"), "mod": ("mod_float", "mod_float"),
}
# A float accumulation the kernel may reassociate (so the loop vectorizes with partial sums).
_REASSOCIABLE = {"+": "add_reassoc", "*": "mul_reassoc"}
_NUMBER = re.compile(r"(?<![\w.])(\d+(?:\.\d*)?)(?![\w.])")


# The functions above whose implementation is a long polynomial evaluation (scalar_math).
_VECTOR_MATH = ("exp", "expm1", "log", "tanh", "erf")


def uses_vector_math(block: Block) -> bool:
    """Whether an elementwise op of the block calls one of scalar_math's polynomial
    functions (its template does, on a float32 or float64 operand)."""
    for op in block.ops:
        if op.primitive.kind != "elementwise" or not op.inputs:
            continue
        d = op.inputs[0].type.dtype
        template = op.primitive.template
        if isinstance(template, dict):
            template = template.get(d.kind)
        if template and d in (float32, float64) and re.search(rf"\b({'|'.join(_VECTOR_MATH)})\(", template):
            return True
    return False


def typed_template(template: str, d: DType) -> str:
    """A registry scalar template specialized to operands of dtype ``d``: float functions
    call their vectorizable implementation of that width, and bare number literals get
    dtype ``d`` (numba would otherwise compute ``1 / x`` of a float32 in float64)."""
    if not d.is_float or d.name == "float16":
        return template
    width = 0 if d == float32 else 1
    template = _NUMBER.sub(lambda m: literal(float(m.group(1)), d), template)
    return re.sub(r"\b(\w+)\(", lambda m: (_TYPED_FUNCTIONS[m.group(1)][width] + "(")
                  if m.group(1) in _TYPED_FUNCTIONS else m.group(0), template)


def accumulate(combine: str, acc: str, val: str, acc_d: DType) -> str:
    """One step of a reduction: the reducer's ``combine`` template over ``acc`` and ``val``,
    with float sums and products reassociable and float max/min NaN-propagating intrinsics."""
    if acc_d.is_float:
        m = re.fullmatch(r"acc ([+*]) v", combine)
        if m:
            return f"{_REASSOCIABLE[m.group(1)]}({acc}, {cast_expr(val, None, acc_d)})"
        combine = typed_template(combine, acc_d)
    step = re.sub(r"\b(acc|v)\b", lambda m: acc if m.group(1) == "acc" else val, combine)
    return cast_expr(step, None, acc_d)






def extreme(d: DType, cmp: str) -> str:
    """The value every element beats under ``cmp`` (the start of an arg reduction)."""
    if d.is_bool:
        return "False" if cmp == ">" else "True"
    info = np.iinfo(d.np)
    return f"{np_type(d)}({info.min if cmp == '>' else info.max})"
