"""Structured control flow: ``cond``, ``while`` and ``scan``, ops that own blocks.

Every block is isolated from above: the values a branch or a loop body reads from the
enclosing program are explicit inputs of the op (the tracer turns closures into them),
passed on to each block as its trailing arguments.

- ``%r... = cond %index, %in... { branch 0 } { branch 1 } ...``: runs the branch
  ``index`` (an ``i32[]``, clamped to the branches there are; ``fj.cond`` passes
  ``pred`` as 1 for the true branch, so the false branch comes first). Every branch
  takes the inputs and returns the results' types.
- ``%carry... = while %init..., %c... {num_carry=k, maximum_iterations=m} { cond } { body }``:
  while ``cond(carry, c)`` (a ``bool[]``) holds, and fewer than ``m`` iterations ran
  (``m = -1``: no limit), ``carry = body(carry, c)``.
- ``%carry..., %ys... = scan %init..., %xs..., %c... {num_carry=k, num_xs=n, length=L,
  reverse=false} { body }``: for ``t`` in ``0..L-1`` (or back), ``carry, y = body(carry,
  xs[t], c)``; each result ``ys`` stacks its ``y`` along a new leading axis of size L.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np

from flowjit.ir.builder import Builder
from flowjit.ir.core import Block, Value, _clone_block, clone_op_into, clone_ops_into
from flowjit.ir.dtypes import bool_, int32
from flowjit.ir.errors import AutodiffError, ShapeError
from flowjit.ir.interpreter import run_block
from flowjit.ir.loop_residuals import choose_residuals
from flowjit.ir.registry import Literal, Loop, attr, declare, defjvp, defvjp
from flowjit.ir.types import TensorType


def _types(values: Sequence[Any]) -> str:
    return "(" + ", ".join(str(v.type if hasattr(v, "type") else v) for v in values) + ")"


def _check_args(block: Any, want: Sequence[TensorType], what: str) -> None:
    got = [a.type for a in block.args]
    if got != list(want):
        raise ShapeError(f"{what} takes {_types(block.args)}, but the op passes {_types(want)}")


# Blocks run from Python, counted (a loop compiled to one native function runs none):
# what tests and benchmarks read to tell a native loop from one stepping in Python.
PYTHON_BLOCK_RUNS = Counter()


def _run(block: Any, args: Sequence[Any]) -> list[np.ndarray]:
    """Run one block on ``args``: a Block with the interpreter, or (in a compiled
    Executable) the block compiled on its own, a callable on the argument list."""
    PYTHON_BLOCK_RUNS["blocks"] += 1
    if callable(block):
        return list(block(list(args)))
    return run_block(block, args)


def _cond_rule(in_types: Sequence[TensorType], *, blocks: Sequence[Any]) -> list[TensorType]:
    if not in_types or in_types[0] != TensorType((), int32):
        raise ShapeError(f"the branch index must be i32[], got {in_types[0] if in_types else 'nothing'}")
    for k, b in enumerate(blocks):
        _check_args(b, in_types[1:], f"branch {k}")
    first = [v.type for v in blocks[0].returns]
    for k, b in enumerate(blocks[1:], 1):
        if [v.type for v in b.returns] != first:
            raise ShapeError(f"the branches return different types: branch 0 returns {_types(blocks[0].returns)}, "
                             f"branch {k} returns {_types(b.returns)}")
    return first


def _cond_impl(index: np.ndarray, *inputs: np.ndarray, blocks: Sequence[Any]) -> tuple[np.ndarray, ...]:
    k = min(max(int(index), 0), len(blocks) - 1)
    return tuple(_run(blocks[k], inputs))


def _branch_names(count: int) -> list[str]:
    """``branch k``; with two, fj.cond's: the false branch (index 0) first, then the true."""
    if count == 2:
        return ["branch 0 (false)", "branch 1 (true)"]
    return [f"branch {k}" for k in range(count)]


declare("cond", kind="control", role="branch", rule=_cond_rule, impl=_cond_impl, arity=None, num_blocks=-1,
        block_names=_branch_names,
        doc="cond(index, inputs...): runs branch `index` (clamped) on the inputs")


def _differentiated(e: Any, block: Any, n_inputs: int) -> Any:
    """A copy of ``block`` that also takes the cotangents of its results and returns the
    cotangents of its first ``n_inputs`` arguments: its ops run again, then their VJPs
    (through ``e.backward``, the autodiff pass's, handed down with the Emitter)."""
    new = _clone_block(block, {})
    outputs = list(new.returns)
    seeds = [Value(v.type, name="ct") for v in outputs]
    new.args.extend(seeds)
    grads = e.backward(new, list(new.ops), outputs, seeds, new.args[:n_inputs])
    new.set_returns(grads)
    return new


def _cond_vjp(e: Any, gs: Sequence[Any], ys: Sequence[Any], index: Any, *xs: Any, blocks: Sequence[Any]) -> list:
    # The same branch runs backward: each branch block becomes its own forward and VJP.
    branches = [_differentiated(e, b, len(xs)) for b in blocks]
    grads = e.builder.emit("cond", [index, *xs, *gs], {}, blocks=branches)
    return [None, *grads]


defvjp("cond", _cond_vjp)


def _while_rule(in_types: Sequence[TensorType], *, blocks: Sequence[Any], num_carry: int,
                maximum_iterations: int) -> list[TensorType]:
    cond, body = blocks
    if not 0 <= num_carry <= len(in_types):
        raise ShapeError(f"num_carry={num_carry} with {len(in_types)} inputs")
    _check_args(cond, in_types, "the condition")
    _check_args(body, in_types, "the body")
    if [v.type for v in cond.returns] != [TensorType((), bool_)]:
        raise ShapeError(f"the condition must return one bool[], got {_types(cond.returns)}")
    carry = list(in_types[:num_carry])
    out = [v.type for v in body.returns]
    if len(out) != len(carry):
        raise ShapeError(f"the body returns {len(out)} values for a carry of {len(carry)}")
    for k, (c, o) in enumerate(zip(carry, out)):
        if c != o:
            raise ShapeError(f"the body changes carry element {k} from {c} to {o}")
    return carry


def _while_impl(*inputs: np.ndarray, blocks: Sequence[Any], num_carry: int,
                maximum_iterations: int) -> tuple[np.ndarray, ...]:
    cond, body = blocks
    carry, consts = list(inputs[:num_carry]), list(inputs[num_carry:])
    n = 0
    while (maximum_iterations < 0 or n < maximum_iterations) and bool(_run(cond, carry + consts)[0]):
        carry = _run(body, carry + consts)
        n += 1
    return tuple(carry)


declare("while", kind="control", role="while_loop", loop=Loop("num_carry"), rule=_while_rule, impl=_while_impl,
        arity=None, num_blocks=2, block_names=("cond", "body"),
        attrs={"num_carry": attr("int"), "maximum_iterations": attr("int", -1)},
        doc="while(carry..., consts...): repeat the body on the carry while the condition holds")


def _scan_rule(in_types: Sequence[TensorType], *, blocks: Sequence[Any], num_carry: int, num_xs: int,
               length: int, reverse: bool) -> list[TensorType]:
    (body,) = blocks
    if num_carry < 0 or num_xs < 0 or num_carry + num_xs > len(in_types) or length < 0:
        raise ShapeError(f"num_carry={num_carry}, num_xs={num_xs}, length={length} with {len(in_types)} inputs")
    carry = list(in_types[:num_carry])
    xs = in_types[num_carry:num_carry + num_xs]
    for k, x in enumerate(xs):
        if not x.shape or x.shape[0] != length:
            raise ShapeError(f"scanned input {k} ({x}) must have a leading axis of length {length}")
    slices = [TensorType(x.shape[1:], x.dtype) for x in xs]
    _check_args(body, carry + slices + list(in_types[num_carry + num_xs:]), "the body")
    out = [v.type for v in body.returns]
    if len(out) < num_carry:
        raise ShapeError(f"the body returns {len(out)} values for a carry of {num_carry}")
    for k, (c, o) in enumerate(zip(carry, out)):
        if c != o:
            raise ShapeError(f"the body changes carry element {k} from {c} to {o}")
    return carry + [TensorType((length, *y.shape), y.dtype) for y in out[num_carry:]]


def _scan_impl(*inputs: np.ndarray, blocks: Sequence[Any], num_carry: int, num_xs: int, length: int,
               reverse: bool) -> tuple[np.ndarray, ...]:
    (body,) = blocks
    carry = list(inputs[:num_carry])
    xs = inputs[num_carry:num_carry + num_xs]
    consts = list(inputs[num_carry + num_xs:])
    returns = (body.function if callable(body) else body).returns  # a compiled block keeps its Function
    ys = [np.empty((length, *v.type.shape), v.type.dtype.np) for v in returns[num_carry:]]
    for t in (reversed(range(length)) if reverse else range(length)):
        out = _run(body, carry + [x[t] for x in xs] + consts)
        carry = out[:num_carry]
        for y, v in zip(ys, out[num_carry:]):
            y[t] = v
    return tuple(carry + ys)


declare("scan", kind="control", role="scan_loop", loop=Loop("num_carry", "num_xs"), rule=_scan_rule,
        impl=_scan_impl, arity=None, num_blocks=1, block_names=("body",),
        attrs={"num_carry": attr("int"), "num_xs": attr("int"), "length": attr("int"),
               "reverse": attr("bool", False)},
        doc="scan(carry..., xs..., consts...): the body over the leading axis of xs, carrying state")


def _scan_vjp(e: Any, gs: Sequence[Any], ys: Sequence[Any], *inputs: Any, blocks: Sequence[Any], num_carry: int,
              num_xs: int, length: int, reverse: bool) -> list:
    """Reverse-mode through a scan: a forward scan again that also stacks each step's
    residuals (``flowjit.ir.loop_residuals``: the step's products and the carry entering it,
    where its VJP reads them), then a scan the other way that runs each step's VJP on them,
    computing cheap forward values again, carrying the carry's cotangent and summing the
    cotangents of the loop constants. The forward scan returns the original scan's results
    first, so ``merge_loops`` can let it stand for the original one."""
    (body,) = blocks
    k, n = num_carry, num_xs
    carry, xs, consts = inputs[:k], inputs[k:k + n], inputs[k + n:]
    m = len(consts)
    # 1. The reverse step, first as the body's forward ops again, then their VJP. Arguments:
    #    carried (ct of the carry, sums of the consts' cts); scanned (the carry entering the
    #    step, x, ct of y); loop constants (consts).
    diff = _differentiated(e, body, k + n + m)
    y_types = [v.type for v in body.returns[k:]]
    ct_c = [Value(c.type, name="ct") for c in carry]
    acc = [Value(c.type, name="acc") for c in consts]
    c_t = [Value(c.type, name=c.name) for c in carry]
    x_t = [Value(a.type, name=a.name) for a in body.args[k:k + n]]
    gy_t = [Value(t, name="ct") for t in y_types]
    cs = [Value(c.type, name=c.name) for c in consts]
    step = Block([*ct_c, *acc, *c_t, *x_t, *gy_t, *cs])
    grads = clone_ops_into(diff, step, [*c_t, *x_t, *cs, *ct_c, *gy_t])
    b = Builder(step)
    sums = [b.op("add", a, g) if a.type.dtype.is_float else a for a, g in zip(acc, grads[k + n:])]
    step.set_returns([*grads[:k], *sums, *grads[k:k + n]])
    res = choose_residuals(step, c_t, [*x_t, *cs])
    # 2. The forward scan: the body, returning its own results, then the residuals. The
    #    reverse step's first ops are the body's, one for one, so a residual one of them
    #    computes is the body's value; one the VJP computes from primal values is computed
    #    here as well.
    saving = Block([Value(a.type, name=a.name) for a in body.args])
    fwd: dict[int, Value] = {}
    outs = clone_ops_into(body, saving, saving.args, fwd)
    fwd.update({a.id: s for a, s in zip([*c_t, *x_t, *cs], saving.args)})
    for sop, bop in zip(step.ops, body.ops):
        fwd.update({r.id: fwd[br.id] for r, br in zip(sop.results, bop.results)})
    wanted = {v.id for v in res.saved}
    for op in reversed(step.ops[len(body.ops):]):
        if any(r.id in wanted for r in op.results):
            wanted.update(v.id for v in op.inputs)
    for op in step.ops[len(body.ops):]:
        if any(r.id in wanted for r in op.results):
            clone_op_into(op, saving, fwd)
    saving.set_returns([*outs, *[fwd[v.id] for v in res.saved]])
    attrs = {"num_carry": k, "num_xs": n, "length": length, "reverse": reverse}
    saved = e.builder.emit("scan", [*carry, *xs, *consts], attrs, blocks=[saving])[len(body.returns):]
    # 3. The reverse step on the residuals: the saved values are its scanned arguments.
    old = [*ct_c, *acc, *res.saved, *x_t, *gy_t, *cs]
    back = Block([Value(v.type, name=v.name) for v in old])
    rev: dict[int, Value] = {v.id: a for v, a in zip(old, back.args)}
    for op in step.ops:
        if op.id in res.kept and not all(r.id in rev for r in op.results):
            clone_op_into(op, back, rev)
    back.set_returns([rev[v.id] for v in step.returns])
    for op in step.ops:
        op.drop_inputs()
    r_t = res.saved
    zeros = [e.zeros(c.type) for c in consts]
    attrs = {"num_carry": k + m, "num_xs": len(r_t) + n + len(y_types), "length": length, "reverse": not reverse}
    res_ = e.builder.emit("scan", [*gs[:k], *zeros, *saved, *xs, *gs[k:], *consts], attrs, blocks=[back])
    return [*res_[:k], *res_[k + m:], *res_[k:k + m]]


defvjp("scan", _scan_vjp)


def _while_vjp(e: Any, gs: Sequence[Any], ys: Sequence[Any], *inputs: Any, blocks: Sequence[Any], num_carry: int,
               maximum_iterations: int) -> list:
    """Reverse-mode through a while loop with ``maximum_iterations`` (TensorFlow's rule): the
    loop is a scan of that many steps, each running the body while the condition still
    holds, and the scan's VJP gives the gradient. Without the bound it is an error."""
    if maximum_iterations < 0:
        raise AutodiffError("differentiating a while_loop needs maximum_iterations=..., as in TensorFlow (the "
                            "number of steps to save); or use fj.fori_loop with Python int bounds, or fj.scan")
    cond, body = blocks
    k = num_carry
    carry, consts = inputs[:k], inputs[k:]
    # One step of the scan: carry (the loop's carry, whether it is still running).
    c = [Value(v.type, name=v.name) for v in carry]
    running = Value(TensorType((), bool_), name="running")
    cs = [Value(v.type, name=v.name) for v in consts]
    step = Block([*c, running, *cs])
    b = Builder(step)
    (holds,) = clone_ops_into(cond, step, [*c, *cs])
    go = b.op("logical_and", running, holds)
    keep = Block([Value(v.type, name=v.name) for v in [*c, *cs]])
    keep.set_returns(keep.args[:k])
    run = Block([Value(v.type, name=v.name) for v in [*c, *cs]])
    run.set_returns(clone_ops_into(body, run, run.args))
    index = b.op("cast", go, dtype=int32)
    new_c = b.emit("cond", [index, *c, *cs], {}, blocks=[keep, run])
    step.set_returns([*new_c, go])
    true = e.builder.emit("constant", [], {"value": _literal(True)})[0]
    gs_ext = [*gs, e.zeros(TensorType((), bool_))]
    grads = _scan_vjp(e, gs_ext, ys, *carry, true, *consts, blocks=[step], num_carry=k + 1, num_xs=0,
                      length=maximum_iterations, reverse=False)
    return [*grads[:k], *grads[k + 1:]]


def block_with_tangents(e: Any, block: Any, mask: Sequence[bool]) -> tuple[Any, list, list]:
    """A copy of ``block`` that also computes the tangents of its results: returns the copy
    (its ``args`` and ``returns`` still the primal ones, for the caller to lay out), a new
    tangent argument per argument where ``mask`` says so (None elsewhere) and the tangent of
    each inexact result (None for the others), derived with ``e.jvp`` (the forward pass's)."""
    new = _clone_block(block, {})
    targs = [Value(a.type, name="t") if m else None for a, m in zip(new.args, mask)]
    wrt = [a for a, t in zip(new.args, targs) if t is not None]
    tans = e.jvp(new, list(new.ops), wrt, [t for t in targs if t is not None], list(new.returns))
    touts = [t if r.type.dtype.is_inexact else None for t, r in zip(tans, new.returns)]
    return new, targs, touts


def present(values: Sequence[Any]) -> list:
    """The entries of ``values`` that are not None, in order."""
    return [v for v in values if v is not None]


def _tangent_operands(e: Any, ts: Sequence[Any], inputs: Sequence[Any], mask: Sequence[bool]) -> list:
    return [t if t is not None else e.zeros(x.type) for t, x, m in zip(ts, inputs, mask) if m]


def spread(values: Sequence[Any], mask: Sequence[bool]) -> list:
    """``values`` (one per set flag of ``mask``) back at their flags' positions, None elsewhere."""
    it = iter(values)
    return [next(it) if m else None for m in mask]


def _cond_jvp(e: Any, ts: Sequence[Any], ys: Sequence[Any], index: Any, *xs: Any,
              blocks: Sequence[Any]) -> tuple[list, list]:
    # One cond over primals and tangents: each branch returns its results and their tangents.
    mask = [t is not None for t in ts[1:]]
    branches = []
    for b in blocks:
        new, targs, touts = block_with_tangents(e, b, mask)
        new.args = [*new.args, *present(targs)]
        new.set_returns([*new.returns, *present(touts)])
        branches.append(new)
    res = e.builder.emit("cond", [index, *xs, *present(ts[1:])], {}, blocks=branches)
    n = len(ys)
    return res[:n], spread(res[n:], [y.type.dtype.is_inexact for y in ys])


def _scan_jvp(e: Any, ts: Sequence[Any], ys: Sequence[Any], *inputs: Any, blocks: Sequence[Any], num_carry: int,
              num_xs: int, length: int, reverse: bool) -> tuple[list, list]:
    """Forward mode through a scan: one scan whose carry holds the tangents of the carry
    (every inexact carry: a tangent can enter it from a scanned input or a constant), whose
    scanned inputs and constants include the tangents given, and which stacks the tangents
    of its outputs."""
    (body,) = blocks
    k, n = num_carry, num_xs
    mask = [x.type.dtype.is_inexact if i < k else t is not None for i, (x, t) in enumerate(zip(inputs, ts))]
    new, targs, touts = block_with_tangents(e, body, mask)
    a = new.args
    new.args = [*a[:k], *present(targs[:k]), *a[k:k + n], *present(targs[k:k + n]), *a[k + n:],
                *present(targs[k + n:])]
    r = new.returns
    new.set_returns([*r[:k], *present(touts[:k]), *r[k:], *present(touts[k:])])
    tc = _tangent_operands(e, ts[:k], inputs[:k], mask[:k])
    tx = [t for t in ts[k:k + n] if t is not None]
    kk, ny = k + len(tc), len(r) - k
    attrs = {"num_carry": kk, "num_xs": n + len(tx), "length": length, "reverse": reverse}
    res = e.builder.emit("scan", [*inputs[:k], *tc, *inputs[k:k + n], *tx, *inputs[k + n:], *present(ts[k + n:])],
                         attrs, blocks=[new])
    inexact = [y.type.dtype.is_inexact for y in ys]
    return [*res[:k], *res[kk:kk + ny]], [*spread(res[k:kk], inexact[:k]), *spread(res[kk + ny:], inexact[k:])]


def _while_jvp(e: Any, ts: Sequence[Any], ys: Sequence[Any], *inputs: Any, blocks: Sequence[Any], num_carry: int,
               maximum_iterations: int) -> tuple[list, list]:
    """Forward mode through a while loop, bounded or not (as in JAX): one loop carrying the
    tangents of the inexact carries beside them; the condition reads only the primals."""
    cond, body = blocks
    k = num_carry
    mask = [x.type.dtype.is_inexact if i < k else t is not None for i, (x, t) in enumerate(zip(inputs, ts))]
    new, targs, touts = block_with_tangents(e, body, mask)
    a = new.args
    new.args = [*a[:k], *present(targs[:k]), *a[k:], *present(targs[k:])]
    new.set_returns([*new.returns, *present(touts)])
    test = _clone_block(cond, {})
    unused = [Value(x.type, name="t") if m else None for x, m in zip(inputs, mask)]
    test.args = [*test.args[:k], *present(unused[:k]), *test.args[k:], *present(unused[k:])]
    tc = _tangent_operands(e, ts[:k], inputs[:k], mask[:k])
    res = e.builder.emit("while", [*inputs[:k], *tc, *inputs[k:], *present(ts[k:])],
                         {"num_carry": k + len(tc), "maximum_iterations": maximum_iterations}, blocks=[test, new])
    return res[:k], spread(res[k:], mask[:k])


defjvp("cond", _cond_jvp)
defjvp("scan", _scan_jvp)
defjvp("while", _while_jvp)


def _literal(value: Any) -> Any:
    return Literal(np.asarray(value))


defvjp("while", _while_vjp)
