"""``fj.cond``, ``fj.switch``, ``fj.while_loop``, ``fj.fori_loop`` and ``fj.scan``.

Each traces its Python functions once into blocks of one ``cond``, ``while`` or ``scan``
op (see ``flowjit/ir/primitives/control.py``), as ``jax.lax`` does: branches and loop
bodies see tracers, not values, so they must not branch on data in Python. Values a
function reads from the enclosing trace (closures) become explicit inputs of the op.
Carries, operands and results are pytrees. Outside a trace the call is traced and run
at once, so eager code behaves exactly like traced code.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from flowjit.ir.core import Value
from flowjit.ir.dtypes import bool_, int32
from flowjit.ir.errors import FlowjitTypeError
from flowjit.ir.types import TensorType
from flowjit.tracer import pytree
from flowjit.tracer.blocks import leaves_in, share_captures, trace_block
from flowjit.tracer.core import Trace, Tracer, current_trace, user_location
from flowjit.tracer.function import TracedFunction
from flowjit.tracer.numpy.conversion import astype
from flowjit.tracer.numpy.ufuncs import add, less


def _eagerly(fn: Callable[..., Any], *args: Any) -> Any:
    return TracedFunction(fn, backend="interpreter")(*args)


def _emit(prim: str, inputs: Sequence[Tracer], attrs: dict[str, Any], subs: Sequence[Trace]) -> list[Tracer]:
    trace = current_trace()
    assert trace is not None
    results = trace.builder.emit(prim, [t.value for t in inputs], attrs, loc=user_location(),
                                 blocks=[s.block for s in subs])
    return [Tracer(v, trace) for v in results]


class _Shown:
    """A type shown in place of a value when a structure of values is printed."""

    def __init__(self, text: str):
        self.text = text

    def __repr__(self) -> str:
        return self.text


def _describe(leaves: Sequence[Tracer], tree: pytree.TreeDef) -> str:
    """What a function returned, as the user wrote it: ``f64[3]``, ``(f64[3], i32[])``,
    ``{'w': f32[2]}``; nothing of pytrees."""
    return repr(pytree.unflatten(tree, [_Shown(str(t.aval)) for t in leaves]))


def _scalar_index(x: Any, what: str, dtype_ok: Callable[[Any], bool], need: str) -> Tracer:
    trace = current_trace()
    (t,), _ = leaves_in(trace, x, what)
    if t.aval.shape != () or not dtype_ok(t.aval.dtype):
        raise FlowjitTypeError(f"{what} must be {need}, got {t.aval}")
    if t.aval.dtype != int32:
        t = astype(t, int32)
    return t


def switch(index: Any, branches: Sequence[Callable[..., Any]], *operands: Any) -> Any:
    """``branches[index](*operands)``, with ``index`` clamped to the branches there are, as
    ``jax.lax.switch``. Every branch must return the same structure, shapes and dtypes."""
    branches = list(branches)
    if not branches:
        raise FlowjitTypeError("switch needs at least one branch")
    if current_trace() is None:
        return _eagerly(lambda i, *ops: switch(i, branches, *ops), index, *operands)
    idx = _scalar_index(index, "the switch index", lambda d: d.is_int, "an integer scalar")
    return _branch(idx, branches, [getattr(b, "__name__", f"branch {k}") for k, b in enumerate(branches)],
                   operands)


def cond(pred: Any, true_fn: Callable[..., Any], false_fn: Callable[..., Any], *operands: Any) -> Any:
    """``true_fn(*operands)`` if ``pred`` else ``false_fn(*operands)``, as ``jax.lax.cond``
    and ``tf.cond``: both branches are traced into the program, only one runs. ``pred`` is
    a scalar bool; both branches must return the same structure, shapes and dtypes."""
    if current_trace() is None:
        return _eagerly(lambda p, *ops: cond(p, true_fn, false_fn, *ops), pred, *operands)
    idx = _scalar_index(pred, "the predicate of cond", lambda d: d == bool_, "a scalar bool (bool[])")
    return _branch(idx, [false_fn, true_fn], ["false_fn", "true_fn"], operands)


def _branch(idx: Tracer, branches: list[Callable[..., Any]], names: list[str], operands: Sequence[Any]) -> Any:
    trace = current_trace()
    leaves, tree = leaves_in(trace, tuple(operands), "an operand of cond")
    traced = [trace_block(b, tree, leaves, name) for b, name in zip(branches, names)]
    first_sub, first_out, first_tree = traced[0]
    for (sub, out, out_tree), name in zip(traced[1:], names[1:]):
        if out_tree != first_tree or [t.aval for t in out] != [t.aval for t in first_out]:
            what = "fj.cond" if names == ["false_fn", "true_fn"] else "fj.switch"
            raise FlowjitTypeError(
                f"{what} at {user_location()}: the branches return different types: {names[0]} returns "
                f"{_describe(first_out, first_tree)}, {name} returns {_describe(out, out_tree)}; both must return "
                "the same shapes and dtypes (cast one with .astype, or reshape it)")
    subs = [s for s, _, _ in traced]
    captured = share_captures(subs, len(leaves))
    results = _emit("cond", [idx, *leaves, *captured], {}, subs)
    return pytree.unflatten(first_tree, results)


def while_loop(cond_fun: Callable[[Any], Any], body_fun: Callable[[Any], Any], init: Any,
               maximum_iterations: int | None = None) -> Any:
    """Repeat ``carry = body_fun(carry)`` while ``cond_fun(carry)`` holds, from ``init``,
    as ``jax.lax.while_loop`` (and ``tf.while_loop``'s ``maximum_iterations``: stop after
    that many iterations). The body must keep each carry element's shape and dtype."""
    if current_trace() is None:
        return _eagerly(lambda c: while_loop(cond_fun, body_fun, c, maximum_iterations), init)
    return _while(cond_fun, body_fun, init, maximum_iterations, "fj.while_loop", 0)


def _while(cond_fun: Callable[[Any], Any], body_fun: Callable[[Any], Any], init: Any,
           maximum_iterations: int | None, what: str, internal: int) -> Any:
    """``while_loop`` traced; ``what`` names the user's loop in errors, whose carry leaves
    follow ``internal`` leaves of the loop's own (fori_loop's counter)."""
    trace = current_trace()
    leaves, tree = leaves_in(trace, init, "the initial carry")
    leaves = [Tracer(t.value, trace, False) for t in leaves]  # the carry's types are fixed
    one_arg = pytree.flatten((pytree.unflatten(tree, leaves),))[1]  # called as fn(carry)
    csub, cout, ctree = trace_block(cond_fun, one_arg, leaves, "cond_fun")
    if len(cout) != 1 or cout[0].aval != TensorType((), bool_):
        raise FlowjitTypeError(f"cond_fun must return a scalar bool (bool[]), got {_describe(cout, ctree)}")
    bsub, bout, btree = trace_block(body_fun, one_arg, leaves, "body_fun")
    _check_carry(leaves, tree, bout, btree, what, internal)
    captured = share_captures([csub, bsub], len(leaves))
    attrs = {"num_carry": len(leaves),
             "maximum_iterations": -1 if maximum_iterations is None else int(maximum_iterations)}
    results = _emit("while", [*leaves, *captured], attrs, [csub, bsub])
    return pytree.unflatten(tree, results)


def _check_carry(init: Sequence[Tracer], tree: pytree.TreeDef, out: Sequence[Tracer], out_tree: pytree.TreeDef,
                 what: str, internal: int = 0) -> None:
    """The body's result against the carry it was given: the same structure, each leaf the
    same shape and dtype. Errors name the user's loop, line and carry (past ``internal``
    leaves of the loop's own)."""
    where = f"{what} at {user_location()}: the loop body"
    user = init[internal:]
    if out_tree != tree:
        got = out[internal:] if len(out) > internal else out
        raise FlowjitTypeError(f"{where} returns {_describe_user(got)} for a carry of {_describe_user(user)}; it "
                               "must return a value of the carry's structure")
    for k, (a, b) in enumerate(zip(init, out)):
        if a.aval != b.aval:
            element = "" if len(user) == 1 else f" element {k - internal}"
            raise FlowjitTypeError(f"{where} changes the carry{element} from {a.aval} to {b.aval}; a loop carry keeps "
                                   "its shape and dtype: cast the new value (.astype), or start the loop from a value "
                                   "of the final type")


def _describe_user(leaves: Sequence[Tracer]) -> str:
    return ", ".join(str(t.aval) for t in leaves) or "nothing"


def fori_loop(lower: Any, upper: Any, body_fun: Callable[[Any, Any], Any], init: Any) -> Any:
    """``for i in range(lower, upper): val = body_fun(i, val)``, as ``jax.lax.fori_loop``;
    ``i`` is an int32 scalar. With Python int bounds the trip count is static."""
    static = isinstance(lower, int) and isinstance(upper, int)

    def loop(lo: Any, hi: Any, val: Any) -> Any:
        i0 = astype(lo, int32)
        _, out = _while(lambda c: less(c[0], astype(hi, int32)),
                        lambda c: (add(c[0], astype(1, int32)), body_fun(c[0], c[1])),
                        (i0, val), max(upper - lower, 0) if static else None, "fj.fori_loop", 1)
        return out

    if current_trace() is None:
        return _eagerly(loop, lower, upper, init)
    return loop(lower, upper, init)


def scan(f: Callable[[Any, Any], Any], init: Any, xs: Any = None, length: int | None = None,
         reverse: bool = False) -> tuple[Any, Any]:
    """``jax.lax.scan``: ``carry, y = f(carry, x)`` for each ``x`` along the leading axis of
    ``xs`` (a pytree; None with ``length``); returns the final carry and the ``y``s stacked."""
    if current_trace() is None:
        return _eagerly(lambda c, x: scan(f, c, x, length, reverse), init, xs)
    trace = current_trace()
    carry, ctree = leaves_in(trace, init, "the initial carry")
    carry = [Tracer(t.value, trace, False) for t in carry]
    xleaves, xtree = leaves_in(trace, xs, "xs")
    lengths = {t.aval.shape[0] if t.aval.shape else None for t in xleaves}
    if None in lengths:
        raise FlowjitTypeError("scan: every leaf of xs needs a leading axis to scan over")
    if length is not None:
        lengths.add(int(length))
    if len(lengths) != 1:
        raise FlowjitTypeError(f"scan: the leading axes of xs (and length) differ: {sorted(lengths)}"
                               if lengths else "scan: give xs or length")
    (n,) = lengths
    slices = [Tracer(Value(TensorType(t.aval.shape[1:], t.aval.dtype), name=t.value.name), trace) for t in xleaves]

    def body(c: Any, x: Any) -> Any:
        out = f(c, x)
        if not (isinstance(out, tuple) and len(out) == 2):
            raise FlowjitTypeError(f"the scan body must return a pair (carry, y), got {type(out).__name__}")
        return out

    arg_tree = pytree.flatten((pytree.unflatten(ctree, carry), pytree.unflatten(xtree, slices)))[1]
    sub, out, out_tree = trace_block(body, arg_tree, [*carry, *slices], "scan body")
    new_carry, ys = pytree.unflatten(out_tree, out)
    new_leaves, new_tree = pytree.flatten(new_carry)
    _check_carry(carry, ctree, new_leaves, new_tree, "fj.scan")
    y_leaves, y_tree = pytree.flatten(ys)
    captured = share_captures([sub], len(carry) + len(slices))
    attrs = {"num_carry": len(carry), "num_xs": len(xleaves), "length": n, "reverse": bool(reverse)}
    results = _emit("scan", [*carry, *xleaves, *captured], attrs, [sub])
    return pytree.unflatten(ctree, results[:len(carry)]), pytree.unflatten(y_tree, results[len(carry):])
