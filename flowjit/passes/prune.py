"""Dead code elimination.

``prune(fn)`` erases every op whose work is not needed. An op is *needed* when it has side
effects (see below), or when one of its results is returned by its block or is an input
of a needed op (in any block). Working backwards from the returns, each block is swept
once, from its last op to its first.

Guarantees:

* ops with side effects always stay: those whose primitive ``has_side_effects`` (kind
  ``"stateful"``: variable updates and the like), and ops owning blocks that contain such
  an op at any depth; everything they use stays too;
* every other op whose results are not needed is erased -- including unused random draws
  (``kind="random"`` is impure only so that ``cse`` never merges two draws; dropping an
  unused draw changes no result), and ops owning blocks (such as ``fusion``) whose results
  are all unused and whose blocks have no side effects;
* inside the blocks of a needed op, all the block's returns are needed (they define the
  owner's results), and the ops of the block are pruned by the same rule; except that a
  loop's stacked outputs (a scan's ``ys``) nothing needs are dropped: the loop op is
  rebuilt in its place without them, and what only they needed in its block is erased;
* function arguments, block arguments, returns, the ``var`` flags and the order of the
  remaining ops are untouched; no op is created or changed but such a rebuilt loop.

The Function computes exactly the same results afterwards.
"""

from __future__ import annotations

from flowjit.ir.core import Block, Function, Op


def has_side_effects(op: Op) -> bool:
    """Whether ``op`` must run even when its results are unused: its primitive
    ``has_side_effects`` (not ``not pure``: random draws are impure yet safe to drop), or one
    of its blocks holds such an op at any depth."""
    if op.primitive.has_side_effects:
        return True
    return any(has_side_effects(inner) for b in op.blocks for inner in b.ops)


def _drop(op: Op) -> None:
    """Remove ``op`` and everything inside its blocks from their inputs' use lists."""
    for b in op.blocks:
        for inner in b.ops:
            _drop(inner)
    op.drop_inputs()
    op.parent = None


def _prune_block(block: Block, needed: set[int]) -> None:
    needed.update(v.id for v in block.returns)
    kept: list[Op] = []
    dead = False
    for op in reversed(block.ops):
        if has_side_effects(op) or any(r.id in needed for r in op.results):
            op = _without_unused_stacks(op, needed)
            # Nested blocks are isolated from above, so their ops need nothing of this
            # block; sharing ``needed`` (value ids are unique) is only a convenience.
            for b in op.blocks:
                _prune_block(b, needed)
            needed.update(v.id for v in op.inputs)
            kept.append(op)
        else:
            dead = True
            _drop(op)
    if dead:
        kept.reverse()
        block.ops[:] = kept


def _without_unused_stacks(op: Op, needed: set[int]) -> Op:
    """``op``, or where it is a loop stacking outputs (a scan) some of which nothing needs,
    the same loop without them: its block returns them no more, so what only they needed
    in the block is pruned with it. The new op takes the old one's place in its block."""
    loop = op.primitive.loop
    if loop is None or loop.scanned is None or len(op.blocks) != 1:
        return op
    k = loop.num_carry(op.attrs)
    keep = [i for i, r in enumerate(op.results) if i < k or r.id in needed]
    if len(keep) == len(op.results):
        return op
    (body,) = op.blocks
    body.set_returns([body.returns[i] for i in keep])
    new = Op(op.primitive, list(op.inputs), op.attrs, [op.results[i].type for i in keep], op.device, op.loc,
             op.blocks)
    block = op.parent
    renamed = {op.results[i].id: r for i, r in zip(keep, new.results)}
    for i, r in zip(keep, new.results):
        op.results[i].replace_all_uses_with(r)
        if op.results[i].id in needed:
            needed.add(r.id)
    block.set_returns([renamed.get(v.id, v) for v in block.returns])
    block.ops[block.ops.index(op)] = new
    new.parent = block
    op.blocks = []
    op.drop_inputs()
    op.parent = None
    return new


def prune(fn: Function) -> Function:
    """Erase every op that neither has side effects nor feeds one or a return (see module doc)."""
    _prune_block(fn.body, set())
    return fn
