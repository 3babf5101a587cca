"""``tf.group``, ``tf.tuple``, ``tf.no_op``, ``tf.cond``, ``tf.case`` and ``tf.while_loop`` on the graph.

``cond`` and ``while_loop`` build their branches and body as nested frames: the ops
the user's functions create while building are recorded in the frame and run only as
part of the control-flow op, which evaluates them with a child evaluator inside
``fj.cond`` / ``fj.while_loop``. So they become the IR's structured ``cond`` and
``while`` ops (one branch runs; the loop runs natively when compiled) and are
differentiable as those are (``while_loop`` with ``maximum_iterations``). Tensors of the
enclosing graph that a frame reads are inputs of the control-flow op, so pruning and
gradients see them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from flowjit.ir.errors import FlowjitTypeError
from flowjit.tracer import control_flow as fjcf
from flowjit.tracer import pytree
from flowjit.tracer.numpy import namespace as fnp
from flowjit.v1 import ops
from flowjit.v1.graph import Graph, Operation, Tensor, get_default_graph


def no_op(name: str | None = None) -> Operation:
    """An op that does nothing (a target for control dependencies)."""
    return get_default_graph().create_op("NoOp", [], lambda ev, op, xs: [], name=name, outputs=[])


def group(*inputs: Any, name: str | None = None) -> Operation:
    """One op that runs after all of ``inputs`` (ops or tensors) have run; it has no output."""
    graph = get_default_graph()
    deps = []
    for x in inputs:
        for item in (x if isinstance(x, (list, tuple)) else [x]):
            if item is None:
                continue
            op = item.op if isinstance(item, Tensor) else item
            if hasattr(item, "_as_graph_element"):
                op = item._as_graph_element().op
            if not isinstance(op, Operation):
                raise FlowjitTypeError(f"tf.group takes ops and tensors, got {type(item).__name__}")
            deps.append(op)
    return graph.create_op("NoOp", [], lambda ev, op, xs: [], name=name or "group_deps", outputs=[],
                           control_inputs=deps)


def tuple_(tensors: Sequence[Any], name: str | None = None, control_inputs: Sequence[Any] | None = None) -> list[Any]:
    """The tensors, each available only after all of them (and ``control_inputs``) are computed."""
    gate = group(*tensors, *(control_inputs or []), name=name or "tuple")
    graph = get_default_graph()
    with graph.control_dependencies([gate]):
        return [None if t is None else ops.identity(t) for t in tensors]


# ---- frames ---------------------------------------------------------------------------------------------------


@dataclass
class Frame:
    """The ops created while building a branch or loop body."""

    kind: str
    ops: list[Operation] = field(default_factory=list)

    def captures(self, outputs: Sequence[Tensor], exclude: Sequence[Tensor] = ()) -> list[Tensor]:
        """Tensors outside the frame that its ops or ``outputs`` read, in first-use order."""
        mine = set(self.ops)
        skip = set(exclude)
        found: list[Tensor] = []
        reads = [t for op in self.ops for t in op.inputs] + list(outputs)
        controls = [c.outputs[0] for op in self.ops for c in op.control_inputs if c not in mine and c.outputs]
        for t in reads + controls:
            if t.op not in mine and t not in skip and t not in found:
                found.append(t)
        return found

    def outside_controls(self) -> list[Operation]:
        mine = set(self.ops)
        return [c for op in self.ops for c in op.control_inputs if c not in mine and not c.outputs]


def _build(graph: Graph, kind: str, fn: Callable[[], Any]) -> tuple[Frame, Any]:
    frame = Frame(kind)
    graph.frames.append(frame)
    try:
        out = fn()
    finally:
        graph.frames.pop()
    return frame, out


def _as_tensors(tree: Any, what: str) -> tuple[list[Tensor], pytree.TreeDef]:
    leaves, treedef = pytree.flatten(tree, is_leaf=lambda x: not isinstance(x, (list, tuple, dict)))
    out = []
    for x in leaves:
        if isinstance(x, Operation):
            raise FlowjitTypeError(f"{what} returned an operation ({x.name}); return tensors (e.g. with "
                                   "tf.control_dependencies and tf.identity)")
        out.append(ops.convert_to_tensor(x))
    return out, treedef


# ---- cond ----------------------------------------------------------------------------------------------------------


def cond(pred: Any, true_fn: Callable[[], Any] | None = None, false_fn: Callable[[], Any] | None = None,
         strict: bool = False, name: str | None = None, fn1: Any = None, fn2: Any = None) -> Any:
    """``true_fn()`` if ``pred`` else ``false_fn()``: only the chosen branch runs. Both must
    return the same structure of tensors with the same dtypes and shapes."""
    true_fn = true_fn or fn1
    false_fn = false_fn or fn2
    if true_fn is None or false_fn is None:
        raise TypeError("tf.cond needs true_fn and false_fn")
    graph = get_default_graph()
    p = ops.convert_to_tensor(pred)
    with graph.name_scope(name or "cond"):
        tframe, tout = _build(graph, "the true branch of a tf.cond", true_fn)
        fframe, fout = _build(graph, "the false branch of a tf.cond", false_fn)
    t_leaves, t_tree = _as_tensors(tout, "true_fn")
    f_leaves, f_tree = _as_tensors(fout, "false_fn")
    if t_tree != f_tree or [t.dtype for t in t_leaves] != [f.dtype for f in f_leaves]:
        raise FlowjitTypeError(f"tf.cond: the branches return different structures or dtypes: true_fn "
                               f"{t_tree} {[str(t.dtype) for t in t_leaves]}, false_fn {f_tree} "
                               f"{[str(f.dtype) for f in f_leaves]}")
    captured = [t for t in tframe.captures(t_leaves) + fframe.captures(f_leaves) if t is not p]
    captured = list(dict.fromkeys(captured))
    t_local, f_local = frozenset(tframe.ops), frozenset(fframe.ops)

    def compute(ev: Any, op: Operation, xs: list[Any]) -> list[Any]:
        def branch(leaves: list[Tensor], local: frozenset[Operation]) -> Callable[[], list[Any]]:
            def run() -> list[Any]:
                child = ev.child({}, local)
                return [child.value(t) for t in leaves]
            return run
        return list(fjcf.cond(xs[0], branch(t_leaves, t_local), branch(f_leaves, f_local)))

    shapes = [t._shape if t._shape == f._shape else None for t, f in zip(t_leaves, f_leaves)]
    op = graph.create_op("If", [p, *captured], compute, name=name or "cond", exact_name=False,
                         outputs=[(s, t.dtype) for s, t in zip(shapes, t_leaves)],
                         control_inputs=tframe.outside_controls() + fframe.outside_controls(),
                         attrs={"frames": (tframe, fframe)})
    return pytree.unflatten(t_tree, op.outputs)


def case(pred_fn_pairs: Any, default: Callable[[], Any] | None = None, exclusive: bool = False,
         strict: bool = False, name: str = "case") -> Any:
    """The function of the first true predicate in ``pred_fn_pairs`` (else ``default``)."""
    pairs = list(pred_fn_pairs.items()) if isinstance(pred_fn_pairs, dict) else list(pred_fn_pairs)
    if default is None:
        *pairs, (_, default) = pairs
    result: Callable[[], Any] = default
    for pred, fn in reversed(pairs):
        result = (lambda p, f, rest: lambda: cond(p, f, rest))(pred, fn, result)
    return result()


# ---- while_loop ----------------------------------------------------------------------------------------------------


def while_loop(cond: Callable[..., Any], body: Callable[..., Any], loop_vars: Any, shape_invariants: Any = None,
               parallel_iterations: int = 10, back_prop: bool = True, swap_memory: bool = False,
               name: str | None = None, maximum_iterations: Any = None, return_same_structure: bool = False) -> Any:
    """Repeat ``loop_vars = body(*loop_vars)`` while ``cond(*loop_vars)``; returns the final
    loop variables (the same structure). Each keeps its shape and dtype;
    ``maximum_iterations`` bounds the loop (and makes it differentiable)."""
    graph = get_default_graph()
    single = not isinstance(loop_vars, (list, tuple))
    init_leaves, tree = _as_tensors([loop_vars] if single else loop_vars, "loop_vars")
    with graph.name_scope(name or "while"):
        frame = Frame("the body of a tf.while_loop")
        graph.frames.append(frame)
        try:
            loop_ts = [graph.create_op("LoopVar", [], _fed_by_loop, name="loop_var",
                                       outputs=[(t._shape, t.dtype)]).outputs[0] for t in init_leaves]
            args = pytree.unflatten(tree, loop_ts)
            c_out = cond(*args)
            b_out = body(*args)
        finally:
            graph.frames.pop()
    c_t = ops.convert_to_tensor(c_out)
    if single and not isinstance(b_out, (list, tuple)):
        b_out = [b_out]
    b_leaves, b_tree = _as_tensors(b_out, "the body of tf.while_loop")
    if len(b_leaves) != len(init_leaves):
        raise FlowjitTypeError(f"tf.while_loop: the body returns {len(b_leaves)} tensors for {len(init_leaves)} "
                               "loop variables; return one value per loop variable")
    for k, (a, b) in enumerate(zip(init_leaves, b_leaves)):
        if a.dtype != b.dtype:
            raise FlowjitTypeError(f"tf.while_loop: the body changes loop variable {k} from {a.dtype} to {b.dtype}")
    captured = frame.captures([c_t, *b_leaves], exclude=loop_ts)
    local = frozenset(frame.ops)
    n = len(init_leaves)
    max_it = None if maximum_iterations is None else int(maximum_iterations)

    def compute(ev: Any, op: Operation, xs: list[Any]) -> list[Any]:
        def child(carry: Any) -> Any:
            return ev.child(dict(zip(loop_ts, carry)), local)

        def cond_fn(carry: Any) -> Any:
            return child(carry).value(c_t)

        def body_fn(carry: Any) -> Any:
            c = child(carry)
            return [fnp.astype(c.value(t), a.dtype) for t, a in zip(b_leaves, init_leaves)]
        return list(fjcf.while_loop(cond_fn, body_fn, list(xs[:n]), maximum_iterations=max_it))

    shapes = [a._shape if a._shape == b._shape else None for a, b in zip(init_leaves, b_leaves)]
    op = graph.create_op("While", [*init_leaves, *captured], compute, name=name or "while",
                         outputs=[(s, a.dtype) for s, a in zip(shapes, init_leaves)],
                         control_inputs=frame.outside_controls(), attrs={"frames": (frame,)})
    result = pytree.unflatten(tree, op.outputs)
    return result[0] if single and not return_same_structure else result


def _fed_by_loop(ev: Any, op: Operation, xs: list[Any]) -> list[Any]:
    raise AssertionError("loop variables are given by the loop")  # the child evaluator overrides them


# ---- scan, map_fn, foldl, foldr ------------------------------------------------------------------------------------


def _scan_op(step: Callable[[Any, Any], tuple[Any, Any]], init: Any, elems: Any, reverse: bool, name: str,
             what: str) -> tuple[Any, Any]:
    """The graph op of a scan: ``carry, y = step(carry, x)`` for each ``x`` along the first
    axis of ``elems`` (a nest of tensors; last to first with ``reverse``), built once as a
    nested frame on stand-ins for the carry and the slices and run inside ``fj.scan`` (the
    IR's loop, differentiable). Returns the final carry and the ``y``s stacked (each with
    the leading axis of ``elems``), as nests."""
    graph = get_default_graph()
    x_leaves, x_tree = _as_tensors(elems, f"the elems of {what}")
    if not x_leaves:
        raise FlowjitTypeError(f"{what}: elems is empty; give at least one tensor to scan over")
    ranks = [t._shape for t in x_leaves]
    if any(s is not None and len(s) == 0 for s in ranks):
        raise FlowjitTypeError(f"{what}: every tensor of elems needs an axis to scan over; "
                               f"got shapes {[None if s is None else list(s) for s in ranks]}")
    lengths = {s[0] for s in ranks if s is not None and s[0] is not None}
    if len(lengths) > 1:
        raise FlowjitTypeError(f"{what}: the tensors of elems have different lengths along axis 0: {sorted(lengths)}")
    c_leaves, c_tree = _as_tensors(init, f"the initializer of {what}") if init is not None else ([], None)
    with graph.name_scope(name):
        frame = Frame(f"the function of a {what}")
        graph.frames.append(frame)
        try:
            c_ts = [graph.create_op("LoopVar", [], _fed_by_loop, name="carry",
                                    outputs=[(t._shape, t.dtype)]).outputs[0] for t in c_leaves]
            x_ts = [graph.create_op("LoopVar", [], _fed_by_loop, name="elem",
                                    outputs=[(None if t._shape is None else t._shape[1:], t.dtype)]).outputs[0]
                    for t in x_leaves]
            carry_in = pytree.unflatten(c_tree, c_ts) if c_tree is not None else None
            new_carry, y = step(carry_in, pytree.unflatten(x_tree, x_ts))
        finally:
            graph.frames.pop()
    nc_leaves, nc_tree = _as_tensors(new_carry, f"the function of {what}") if c_tree is not None else ([], None)
    if nc_tree != c_tree or [t.dtype for t in nc_leaves] != [t.dtype for t in c_leaves]:
        raise FlowjitTypeError(f"{what}: the function returns {[t.dtype.name for t in nc_leaves]} (as {nc_tree}) "
                               f"for an accumulator of {[t.dtype.name for t in c_leaves]} (as {c_tree}); return "
                               "the accumulator's structure and dtypes (or pass an initializer of the output's)")
    y_leaves, y_tree = _as_tensors(y, f"the function of {what}")
    captured = frame.captures([*nc_leaves, *y_leaves], exclude=[*c_ts, *x_ts])
    local = frozenset(frame.ops)
    nc, nx = len(c_leaves), len(x_leaves)

    def compute(ev: Any, op: Operation, xs: list[Any]) -> list[Any]:
        def body(carry: Any, x: Any) -> Any:
            child = ev.child(dict(zip([*c_ts, *x_ts], [*carry, *x])), local)
            out = [fnp.astype(child.value(t), a.dtype) for t, a in zip(nc_leaves, c_leaves)]
            return out, [child.value(t) for t in y_leaves]
        carry, ys = fjcf.scan(body, list(xs[:nc]), list(xs[nc:nc + nx]), reverse=reverse)
        return [*carry, *ys]

    n = next(iter(lengths)) if lengths else None
    outputs = [(t._shape, t.dtype) for t in c_leaves]
    outputs += [(None if t._shape is None else (n, *t._shape), t.dtype) for t in y_leaves]
    op = graph.create_op("Scan", [*c_leaves, *x_leaves, *captured], compute, name=name,
                         outputs=outputs, control_inputs=frame.outside_controls(), attrs={"frames": (frame,),
                                                                                          "reverse": reverse})
    final = pytree.unflatten(c_tree, op.outputs[:nc]) if c_tree is not None else None
    return final, pytree.unflatten(y_tree, op.outputs[nc:])


def _first_and_rest(elems: Any, reverse: bool) -> tuple[Any, Any]:
    leaves, tree = _as_tensors(elems, "elems")
    first = [t[-1] if reverse else t[0] for t in leaves]
    rest = [t[:-1] if reverse else t[1:] for t in leaves]
    return pytree.unflatten(tree, first), pytree.unflatten(tree, rest)


def scan(fn: Callable[[Any, Any], Any], elems: Any, initializer: Any = None, parallel_iterations: int = 10,
         back_prop: bool = True, swap_memory: bool = False, infer_shape: bool = True, reverse: bool = False,
         name: str | None = None) -> Any:
    """``tf.scan``: ``a = fn(a, x)`` for each ``x`` along axis 0 of ``elems`` (a nest), from
    ``initializer`` (default: the first element, which is then also the first output);
    returns every ``a``, stacked. ``reverse``: from the last element to the first."""
    def step(a: Any, x: Any) -> tuple[Any, Any]:
        out = fn(a, x)
        return out, out
    if initializer is None:
        first, elems = _first_and_rest(elems, reverse)
        _, ys = _scan_op(step, first, elems, reverse, name or "scan", "tf.scan")
        lead, tree = _as_tensors(first, "elems")
        stacked, _ = _as_tensors(ys, "tf.scan")
        joined = [ops.concat([ops.expand_dims(f, 0), s] if not reverse else [s, ops.expand_dims(f, 0)], 0)
                  for f, s in zip(lead, stacked)]
        return pytree.unflatten(tree, joined)
    return _scan_op(step, initializer, elems, reverse, name or "scan", "tf.scan")[1]


def map_fn(fn: Callable[[Any], Any], elems: Any, dtype: Any = None, parallel_iterations: int | None = None,
           back_prop: bool = True, swap_memory: bool = False, infer_shape: bool = True,
           name: str | None = None) -> Any:
    """``tf.map_fn``: ``fn(x)`` for each ``x`` along axis 0 of ``elems`` (a nest), stacked."""
    return _scan_op(lambda _, x: (None, fn(x)), None, elems, False, name or "map", "tf.map_fn")[1]


def foldl(fn: Callable[[Any, Any], Any], elems: Any, initializer: Any = None, parallel_iterations: int = 10,
          back_prop: bool = True, swap_memory: bool = False, name: str | None = None) -> Any:
    """``tf.foldl``: ``a = fn(a, x)`` for each ``x`` along axis 0 of ``elems`` from the first,
    starting at ``initializer`` (default: the first element); the last ``a``."""
    return _fold(fn, elems, initializer, False, name or "foldl", "tf.foldl")


def foldr(fn: Callable[[Any, Any], Any], elems: Any, initializer: Any = None, parallel_iterations: int = 10,
          back_prop: bool = True, swap_memory: bool = False, name: str | None = None) -> Any:
    """``tf.foldr``: as ``foldl``, from the last element to the first."""
    return _fold(fn, elems, initializer, True, name or "foldr", "tf.foldr")


def _fold(fn: Callable[[Any, Any], Any], elems: Any, initializer: Any, reverse: bool, name: str, what: str) -> Any:
    if initializer is None:
        initializer, elems = _first_and_rest(elems, reverse)
    return _scan_op(lambda a, x: (fn(a, x), ()), initializer, elems, reverse, name, what)[0]
