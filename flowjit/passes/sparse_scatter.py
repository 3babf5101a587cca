"""Sparse scatter: an embedding's gradient added into one row per distinct id, not a table of zeros.

The gradient of ``take(table, ids, axis=0)`` is ``scatter_add(zeros(table), ids, g)``: a
table-sized array of zeros with the looked-up rows added in. An optimizer then reads it
whole beside the table (Adam's moments), so a 50,000-row table whose batch touched 5,120
rows costs a fill and a read of 50,000 rows, most of them zeros. This pass gives such a
scatter_add the form TensorFlow's ``IndexedSlices`` and PyTorch's sparse embedding gradient
have, inside the program:

- ``slots = first_occurrence(ids, size=V)``: for each row v of the table, the first position
  j of v among the ids (clamped as scatter_add clamps them), -1 where v does not occur;
- ``compact = scatter_add(zeros with N rows, slots[ids], g)``: the updates added into the
  row of their id's first position, one row per distinct id;
- the dense value, ``select(slots[v] >= 0, compact[max(slots[v], 0)], 0)``, is what the
  consumers read: elementwise ops, into whose fusion the select and the gather go, so the
  table-sized gradient is never written.

Guarantees: the Function computes the same bits. Each row of ``compact`` receives the same
updates in the same (row-major) order as the table's row of the dense form, starting from the
same +0.0 (a zero fill of any other value is left alone), and a row no id reaches reads 0
where the dense form held its zero; so the rewrite holds for every scatter (``scatter_max``
of a segment's rows too), each compact one of the same primitive as the dense one. Only a
scatter whose operand is a fill of zeros,
whose result only elementwise ops read (not a block's return: there the dense table is
wanted), with static shapes, at least ``SPARSE_MIN_RATIO`` rows of the operand per index and
rows of at least ``SPARSE_MIN_ROW_BYTES`` is rewritten; each new op carries the scatter's
source line and device. Runs after
``decompose`` and before placement, at any depth of blocks.
"""

from __future__ import annotations

import math

import numpy as np

from flowjit.ir.builder import Builder, Emitter
from flowjit.ir.core import Block, Function, Op, Value
from flowjit.ir.registry import Literal, normalize_axis
from flowjit.ir.types import TensorType
from flowjit.passes.prune import prune
from flowjit.passes.simplify import is_splat

# Rows of the operand per index from which the compact form is worth its slot map (an i64
# per row, read once per row by the consumer) and its select: the zoo's embedding model,
# 50,000 rows and 5,120 ids (about 10 per index), took its Adam update from 2.24-2.28 to
# 1.74-1.76 ms on two threads and from 4.6-4.7 to 3.5-3.6 ms on one.
SPARSE_MIN_RATIO = 4
# Bytes of an operand row from which the compact form reads less than the dense one: the
# slot map costs an i64 per row, so a row must be several of those (an embedding's 64 floats
# are 256 bytes; the winner table of x.at[i, j].set, one i32 per row, was read and written
# through an i64 map twice its size: 4.0 -> 2.4 ms for 20,000 elements set in a 50,000x64
# table when left dense).
SPARSE_MIN_ROW_BYTES = 32


def _worth_it(op: Op, block: Block) -> bool:
    operand, indices, updates = op.inputs
    (result,) = op.results
    shapes = (operand.type.shape, indices.type.shape, updates.type.shape)
    if not all(isinstance(n, int) for s in shapes for n in s):
        return False
    axis = normalize_axis(op.attrs["axis"], operand.type.ndim)
    count = math.prod(indices.type.shape)
    if count == 0 or operand.type.shape[axis] < SPARSE_MIN_RATIO * count:
        return False
    row = math.prod(operand.type.shape) // operand.type.shape[axis]
    if row * operand.type.dtype.np.itemsize < SPARSE_MIN_ROW_BYTES:
        return False
    if any(r is result for r in block.returns) or not result.uses:
        return False
    return all(user.primitive.kind == "elementwise" for user, _ in result.uses) and is_splat(operand, 0)


def _sparse_form(e: Emitter, op: Op) -> Value:
    """The ops computing ``op``'s result through a compact scatter (see the module docstring)."""
    operand, indices, updates = op.inputs
    shape = operand.type.shape
    axis = normalize_axis(op.attrs["axis"], len(shape))
    rows, count = shape[axis], math.prod(indices.type.shape)
    ids = indices if indices.type.ndim == 1 else e.reshape(indices, shape=(count,))
    compact_shape = (*shape[:axis], count, *shape[axis + 1:])
    if updates.type.shape != compact_shape:
        updates = e.reshape(updates, shape=compact_shape)
    slots = e.first_occurrence(ids, size=rows)
    compact = getattr(e, op.primitive.name)(e.zeros(TensorType(compact_shape, operand.type.dtype)),
                                            e.gather(slots, ids, axis=0), updates, axis=axis)
    zero = e.constant(value=Literal(np.asarray(0, np.int64)))
    read = e.gather(compact, e.maximum(slots, zero), axis=axis)
    found = e.ge(slots, zero)
    found = e.reshape(found, shape=tuple(rows if k == axis else 1 for k in range(len(shape))))
    return e.select(e.broadcast_to(found, shape=shape), read, e.zeros(operand.type))


def _rewrite_block(block: Block) -> int:
    count = 0
    for op in list(block.ops):
        for inner in op.blocks:
            count += _rewrite_block(inner)
        if op.primitive.role != "scatter" or not _worth_it(op, block):
            continue
        dense = _sparse_form(Emitter(Builder.before(op)), op)
        op.results[0].replace_all_uses_with(dense)
        block.erase(op)
        count += 1
    return count


def sparse_scatter(fn: Function) -> Function:
    """``fn`` with each scatter (add, mul, max, min) into zeros that only elementwise ops read
    (and whose operand has ``SPARSE_MIN_RATIO`` rows per index or more) combined into one row
    per distinct index instead, its readers reading the rows through a slot map; the same
    bits."""
    return prune(fn) if _rewrite_block(fn.body) else fn
