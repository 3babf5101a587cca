"""``tf.gradients``: symbolic derivatives as one graph op, computed by flowjit's reverse mode.

``gradients(ys, xs)`` adds a ``Gradients`` op whose outputs are d(sum of ys)/dx for each
x. When it runs, it re-evaluates the part of the graph between ``xs`` and ``ys`` as a
function of fresh values of ``xs`` under ``fj.vjp``, so the derivative is the VJP rules'
ordinary IR in the same compiled program (CSE merges the repeated forward ops with the
originals). An ``x`` that no ``y`` depends on gets None, as in TensorFlow;
``stop_gradient`` blocks the path through it.

User gradients map onto ``fj.custom_vjp``. ``tf.custom_gradient(f)`` calls ``f`` when the
graph is built, then its ``grad_fn`` on stand-in tensors for the incoming gradients, and
adds one ``CustomGradient`` op whose outputs are ``f``'s: when it runs, a custom_vjp
evaluates ``f``'s ops as the forward and ``grad_fn``'s ops as the backward, so the user's
gradient is used wherever flowjit differentiates the op (``tf.gradients``, a ``tf.cond``
branch, a ``tf.while_loop`` body, a gradient of a gradient). ``tf.RegisterGradient``
stores ``fn(op, *grads)`` under a name; ``Graph.gradient_override_map`` marks ops with
such a name, and ``tf.gradients`` gives each marked op it differentiates the same
custom_vjp built from ``fn``. Names are looked up when ``tf.gradients`` runs, as in
TensorFlow: an override naming nothing registered is a LookupError there.
"""

from __future__ import annotations

import functools
import inspect
import re
from collections.abc import Callable, Sequence
from typing import Any

from flowjit.ir.errors import FlowjitTypeError
from flowjit.tracer import pytree
from flowjit.tracer.autodiff import vjp
from flowjit.tracer.core import user_location
from flowjit.tracer.custom_gradients import custom_vjp
from flowjit.tracer.custom_gradients import stop_gradient as fj_stop_gradient
from flowjit.tracer.jacobians import hessian
from flowjit.tracer.numpy import namespace as fnp
from flowjit.v1 import ops
from flowjit.v1.graph import Graph, Operation, Tensor, get_default_graph


def _between(xs: Sequence[Tensor], ys: Sequence[Tensor]) -> tuple[set[Operation], set[Tensor], set[Tensor]]:
    """The ops on a path from some x to some y (not through stop_gradient), the xs reached,
    and the tensors that depend on an x."""
    upstream: set[Operation] = set()
    stack = [y.op for y in ys]
    while stack:
        op = stack.pop()
        if op in upstream:
            continue
        upstream.add(op)
        if not _blocks_gradient(op):
            stack.extend(t.op for t in op.inputs)
    x_set = set(xs)
    between: set[Operation] = set()
    reached: set[Tensor] = set()
    # Creation order is a topological order: one forward sweep marks what depends on an x.
    depends: set[Tensor] = set(xs)
    ops_sorted = sorted(upstream, key=lambda o: o.id)
    for op in ops_sorted:
        if _blocks_gradient(op):
            continue
        if any(t in depends for t in _differentiated_inputs(op)):
            if set(op.outputs) & x_set:
                continue
            between.add(op)
            depends.update(op.outputs)
    for y in ys:
        if y in x_set:
            reached.add(y)
    for op in between:
        reached.update(t for t in _differentiated_inputs(op) if t in x_set)
    return between, reached, depends


def _differentiated_inputs(op: Operation) -> list[Tensor]:
    return [t for k, t in enumerate(op.inputs) if k not in op.gradient_free_inputs]


def _operands(ys: Any, xs: Any, what: str) -> tuple[list[Tensor], list[list[Tensor]]]:
    """``ys`` as tensors, and each of ``xs`` (one or a list) as the tensors that are its
    value: a tensor itself; a variable every read of it (``Variable.reads``: the value its
    uses share, and each fresh read, which a use under tf.control_dependencies makes), as
    TensorFlow differentiates through each read of a variable. A FlowjitTypeError for an x
    that is not floating point."""
    ys_l = [ops.convert_to_tensor(y) for y in (ys if isinstance(ys, (list, tuple)) else [ys])]
    xs_l = [x.reads() if hasattr(x, "_read_here") else [ops.convert_to_tensor(x)]
            for x in (xs if isinstance(xs, (list, tuple)) else [xs])]
    for x in xs_l:
        if not x[0].dtype.is_float:
            raise FlowjitTypeError(f"{what} with respect to {x[0].name} of dtype {x[0].dtype}: only float tensors "
                                   "have gradients")
    return ys_l, xs_l


def _differentiated(xs: list[list[Tensor]], ys: list[Tensor]) -> tuple[list[int], list[list[Tensor]],
                                                                        frozenset[Operation]]:
    """Which xs (positions) the ys depend on, the tensors of each that they read, and the
    ops between them, registered gradients applied."""
    flat = [t for ts in xs for t in ts]
    between, reached, depends = _between(flat, ys)
    if _apply_registered_gradients(between, depends):  # a registered gradient gave some input None
        between, reached, _ = _between(flat, ys)
    read = [[t for t in ts if t in reached] for ts in xs]
    live = [i for i, ts in enumerate(read) if ts]
    return live, [read[i] for i in live], frozenset(between)


def gradients(ys: Any, xs: Any, grad_ys: Any = None, name: str = "gradients", colocate_gradients_with_ops: bool = False,
              gate_gradients: bool = False, aggregation_method: Any = None, stop_gradients: Any = None) -> list[Any]:
    """d(sum(ys))/dx for each x in ``xs`` (tensors or Variables), weighted by ``grad_ys``
    (default ones); None for an x the ys do not depend on."""
    ys_l, xs_l = _operands(ys, xs, "tf.gradients")
    if grad_ys is None:
        gys: list[Tensor] = []
    else:
        gys = [ops.convert_to_tensor(g, dtype=y.dtype) for g, y in
               zip(grad_ys if isinstance(grad_ys, (list, tuple)) else [grad_ys], ys_l)]
    if stop_gradients is not None:
        raise FlowjitTypeError("tf.gradients(stop_gradients=...) is not supported: wrap the tensors in "
                               "tf.stop_gradient instead")
    live, read, local = _differentiated(xs_l, ys_l)
    if not live:
        return [None] * len(xs_l)
    flat = [t for ts in read for t in ts]
    ny, nt = len(ys_l), len(flat)

    def compute(ev: Any, op: Operation, vals: list[Any]) -> list[Any]:
        # vals[:ny] are the ys: inputs so they (and what they need) run first; so are the
        # results of the host ops differentiated, read where the host op would run. Each
        # read of a variable is differentiated at its own value, and their gradients add.
        x_vals, seeds = vals[ny:ny + nt], vals[ny + nt:ny + nt + len(gys)]

        def forward(*fresh: Any) -> list[Any]:
            child = ev.child(dict(zip(flat, fresh)), local)
            return [child.value(y) for y in ys_l]

        outs, pullback = vjp(forward, *x_vals)
        cts = list(seeds) if seeds else [fnp.ones_like(o) for o in outs]
        grads = iter(pullback(cts))
        parts = [[next(grads) for _ in ts] for ts in read]
        return [sum(ps[1:], ps[0]) for ps in parts]

    graph = ys_l[0].graph
    host_results = [t for o in sorted(local, key=lambda o: o.id) if o.host for t in o.outputs]
    op = graph.create_op("Gradients", [*ys_l, *flat, *gys, *host_results], compute, name=name,
                         outputs=[(ts[0]._shape, ts[0].dtype) for ts in read])
    by_x = dict(zip(live, op.outputs))
    return [by_x.get(i) for i in range(len(xs_l))]



def hessians(ys: Any, xs: Any, name: str = "hessians", colocate_gradients_with_ops: bool = False,
             gate_gradients: bool = False, aggregation_method: Any = None) -> list[Any]:
    """For each x in ``xs``, the Hessian of sum(ys) with respect to it, of shape
    ``x.shape + x.shape`` (``tf.hessians``; None for an x the ys do not depend on): one op
    computing ``fj.hessian`` of the graph between them, forward over reverse mode."""
    ys_l, xs_l = _operands(ys, xs, "tf.hessians")
    for (x, *_) in xs_l:
        if x._shape is None or None in x._shape:
            raise FlowjitTypeError(f"tf.hessians with respect to {x.name} of shape {x.shape}: its shape must be "
                                   "known when the graph is built (the Hessian's shape is twice it)")
    live, read, local = _differentiated(xs_l, ys_l)
    if not live:
        return [None] * len(xs_l)
    flat = [t for ts in read for t in ts]
    ny, nt = len(ys_l), len(flat)

    def compute(ev: Any, op: Operation, vals: list[Any]) -> list[Any]:
        x_vals = vals[ny:ny + nt]
        out = []
        for k, ts in enumerate(read):
            # The sum as a function of the k-th x alone, each of its reads that x moved by
            # the same amount from the value it read (the other xs held at theirs).
            first = sum(len(r) for r in read[:k])

            def total(x: Any, first: int = first, ts: list = ts) -> Any:
                fresh = list(x_vals)
                for j in range(len(ts)):
                    fresh[first + j] = x_vals[first + j] + (x - x_vals[first])
                child = ev.child(dict(zip(flat, fresh)), local)
                return sum(fnp.sum(child.value(y)) for y in ys_l)
            out.append(hessian(total)(x_vals[first]))
        return out

    op = ys_l[0].graph.create_op("Hessians", [*ys_l, *flat], compute, name=name,
                                 outputs=[(tuple(ts[0]._shape) * 2, ts[0].dtype) for ts in read])
    by_x = dict(zip(live, op.outputs))
    return [by_x.get(i) for i in range(len(xs_l))]


# ---- registered gradients ------------------------------------------------------------------------------------

# Gradient name -> (fn(op, *grads) or None for "not differentiable", where it was registered).
_registry: dict[str, tuple[Callable[..., Any] | None, str]] = {}


def _register(name: str, fn: Callable[..., Any] | None, where: str) -> None:
    if not isinstance(name, str):
        raise TypeError(f"op_type must be a string, got {name!r}")
    if name in _registry or name in ops.builtin_gradients:
        where = _registry[name][1] if name in _registry else f"flowjit's built-in {name} op"
        raise KeyError(f"Registering two gradient with name '{name}'! (Previous registration was in {where}); "
                       "each name takes one gradient function")
    _registry[name] = (fn, where)


class RegisterGradient:
    """``@tf.RegisterGradient("Name")``: store ``fn(op, *grads)`` (one incoming gradient per
    output of ``op``; returns one gradient per input, None for none) as the gradient named
    ``Name``, used for ops that ``Graph.gradient_override_map`` maps to it. A name
    registered twice is a KeyError, as in TensorFlow."""

    def __init__(self, op_type: str):
        if not isinstance(op_type, str):
            raise TypeError(f"op_type must be a string, got {op_type!r}")
        self._op_type = op_type

    def __call__(self, f: Callable[..., Any]) -> Callable[..., Any]:
        code = getattr(f, "__code__", None)
        where = f"{f.__name__} {code.co_filename}:{code.co_firstlineno}" if code else repr(f)
        _register(self._op_type, f, where)
        return f


def no_gradient(op_type: str) -> None:
    """``tf.no_gradient("OpType")`` (``tf.NotDifferentiable``): ops of this type, or mapped
    to this name, pass no gradient, so ``tf.gradients`` gives None for what only they reach."""
    _register(op_type, None, f"no_gradient at {user_location()}")


NotDifferentiable = NoGradient = no_gradient


def _gradient_key(op: Operation) -> str:
    return op.gradient_override or op.type


def _blocks_gradient(op: Operation) -> bool:
    if _gradient_key(op) == "StopGradient":
        return True
    entry = _registry.get(_gradient_key(op))
    if entry is None:
        # A host op (py_func) has no derivative of its own: TF's PyFunc is NotDifferentiable.
        return op.host and op.gradient_override is None
    return entry[0] is None


def _held_ops(ops_: Sequence[Operation], depends: set[Tensor]) -> list[Operation]:
    """``ops_`` and the ops of their cond branches and loop bodies, recursively, that
    depend on an x (on ``depends``, or on a loop variable): the ops whose gradients
    differentiating ``ops_`` uses, as TensorFlow looks up gradients only on the path."""
    out: list[Operation] = []
    for op in ops_:
        out.append(op)
        for frame in op.attrs.get("frames", ()):
            inner = set(depends)
            on_path = []
            for o in frame.ops:  # creation order is a topological order
                if o.type == "LoopVar" or (not _blocks_gradient(o) and
                                           any(t in inner for t in _differentiated_inputs(o))):
                    inner.update(o.outputs)
                    on_path.append(o)
            out.extend(_held_ops(on_path, inner))
    return out


def _apply_registered_gradients(between: set[Operation], depends: set[Tensor]) -> bool:
    """Give each op ``tf.gradients`` differentiates whose gradient was registered (through
    ``gradient_override_map`` or its own type) that gradient, once: its ``compute``
    becomes a custom_vjp whose backward is the registered function's ops. Whether one
    gave an input None (which changes what ``tf.gradients`` reaches)."""
    freed = False
    for op in _held_ops(sorted(between, key=lambda o: o.id), depends):
        if op.gradient_wrapped or not op.inputs:
            continue
        key = _gradient_key(op)
        if key not in _registry and op.gradient_override in ops.builtin_gradients:
            _install(op, _borrowed_gradient(op, key))
            continue
        if key not in _registry:
            if op.gradient_override is not None:
                raise LookupError(
                    f"No gradient defined for operation '{op.name}' (op type: {op.type}): "
                    f"gradient_override_map maps {op.type} to {key!r}, which no tf.RegisterGradient registered "
                    f"({op.where()}); register it with @tf.RegisterGradient({key!r}) before calling tf.gradients")
            continue
        fn = _registry[key][0]
        if fn is None:
            _install(op, _without_gradient(_forward_of(op)))
            continue
        graph = op.graph
        dys = _upstream_tensors(graph, op.outputs, op.name)
        start = len(graph._ops)
        with graph.as_default(), graph.name_scope(f"gradients/{op.name}_grad"):
            got = fn(op, *dys)
        grads = _gradient_list(got, op.inputs, f"the gradient {key!r} registered for {op.where()}")
        _install(op, _custom_compute(_sanitized(key), list(op.inputs), _run_op(_forward_of(op)),
                                     _Backward(dys, grads, graph._ops[start:])))
        op.gradient_free_inputs = _none_at(grads)
        freed = freed or bool(op.gradient_free_inputs)
    return freed


def _none_at(grads: Sequence[Tensor | None]) -> frozenset[int]:
    return frozenset(k for k, g in enumerate(grads) if g is None)


def _borrowed_gradient(op: Operation, key: str) -> Any:
    """``op``'s compute with the built-in gradient of op type ``key``: the VJP of the fj
    function that type computes, at ``op``'s inputs."""
    fn, arity = ops.builtin_gradients[key]
    if arity != len(op.inputs):
        n = len(op.inputs)
        raise ValueError(f"gradient_override_map maps {op.type} ({n} input{'s' if n != 1 else ''}) to the built-in "
                         f"gradient of {key}, which takes {arity} ({op.where()}); map it to a gradient of as many "
                         "inputs, or register one with tf.RegisterGradient")
    forward = _forward_of(op)

    def compute(ev: Any, op: Operation, vals: list[Any]) -> list[Any]:
        def fun(*xs: Any) -> list[Any]:
            return list(forward(ev, op, list(xs)))

        def back(xs: list[Any], gs: list[Any]) -> tuple:
            _, pullback = vjp(lambda *a: [fn(*a)], *xs)
            return tuple(pullback(list(gs)))
        return _call_custom(_sanitized(key), fun, lambda *xs: (fun(*xs), list(xs)), back, vals)
    return compute


def _without_gradient(forward: Any) -> Any:
    def compute(ev: Any, op: Operation, vals: list[Any]) -> list[Any]:
        return [fj_stop_gradient(v) for v in forward(ev, op, vals)]
    return compute


def _run_op(forward: Any) -> Callable[[Any, list[Any]], tuple[Any, list[Any]]]:
    """The forward of an op with a registered gradient: its own compute; what the
    gradient's ops read of the op's inputs and outputs comes from that run."""
    def run(ev: Any, op: Operation, vals: list[Any]) -> tuple[Any, list[Any]]:
        outs = list(forward(ev, op, vals))
        return ev.child({**dict(zip(op.inputs, vals)), **dict(zip(op.outputs, outs))}, frozenset()), outs
    return run


def _forward_of(op: Operation) -> Any:
    """How ``op`` computes its outputs inside a gradient: its compute, or for a host op the
    results its host run gave (inputs of the compiled segment: ``tf.gradients`` made the
    Gradients op need them)."""
    if op.host:
        return lambda ev, op, vals: [ev.root.value(t) for t in op.outputs]
    return op.compute


def _install(op: Operation, compute: Any) -> None:
    # A host op keeps running on the host; a gradient's forward uses its traced_compute.
    if op.host:
        op.traced_compute = compute
    else:
        op.compute = compute
    op.gradient_wrapped = True


# ---- the custom_vjp that runs a graph gradient -----------------------------------------------------------------


class _Backward:
    """A gradient built as graph ops: the stand-ins ``dys`` for the incoming gradients,
    the gradient tensors (None: zero), the ops built for them, and the tensors those ops
    read from outside (residuals: the forward's values they need)."""

    def __init__(self, dys: list[Tensor], grads: list[Tensor | None], built: list[Operation]):
        self.dys = dys
        self.grads = grads
        self.local = frozenset(built)
        skip = set(dys)
        reads = [t for op in built for t in op.inputs] + [g for g in grads if g is not None]
        self.residuals = list(dict.fromkeys(t for t in reads if t.op not in self.local and t not in skip))


def _custom_compute(name: str, inputs: list[Tensor], forward: Any, bwd: _Backward) -> Any:
    """A ``compute`` that runs ``forward(ev, op, values) -> (evaluator, outputs)`` as an
    ``fj.custom_vjp`` whose backward evaluates ``bwd``'s ops on the residuals (read
    through that evaluator) and the incoming gradients."""

    def compute(ev: Any, op: Operation, vals: list[Any]) -> list[Any]:
        def fun(*xs: Any) -> list[Any]:
            return forward(ev, op, list(xs))[1]

        def fwd(*xs: Any) -> tuple[list[Any], list[Any]]:
            child, outs = forward(ev, op, list(xs))
            return outs, [child.value(r) for r in bwd.residuals]

        def back(res: list[Any], gs: list[Any]) -> tuple:
            child = ev.child({**dict(zip(bwd.residuals, res)), **dict(zip(bwd.dys, gs))}, bwd.local)
            return tuple(None if g is None else fnp.astype(child.value(g), x.dtype)
                         for g, x in zip(bwd.grads, inputs))

        return _call_custom(name, fun, fwd, back, vals)
    return compute


def _call_custom(name: str, fun: Callable[..., Any], fwd: Callable[..., Any], back: Callable[..., Any],
                 vals: list[Any]) -> list[Any]:
    fun.__name__ = name
    return list(custom_vjp(fun).defvjp(fwd, back)(*vals))


def _sanitized(name: str) -> str:
    return re.sub(r"\W", "_", name) or "custom_gradient"


def _upstream_tensors(graph: Graph, ys: Sequence[Tensor], name: str) -> list[Tensor]:
    """Stand-ins for the gradients flowing into ``ys``: tensors the custom_vjp's backward
    gives values to (they never run on their own)."""
    with graph.as_default(), graph.name_scope(f"gradients/{name}_grad"):
        return [graph.create_op("UpstreamGradient", [], _given_by_gradient, name="upstream",
                                outputs=[(y._shape, y.dtype)]).outputs[0] for y in ys]


def _given_by_gradient(ev: Any, op: Operation, xs: list[Any]) -> list[Any]:
    raise AssertionError("an upstream gradient is given by the gradient that reads it")


def _gradient_list(got: Any, wrt: Sequence[Tensor], what: str) -> list[Tensor | None]:
    """A gradient function's result as one tensor (or None) per tensor of ``wrt``."""
    leaves = [got] if got is None or not isinstance(got, (list, tuple)) else list(got)
    if len(leaves) != len(wrt):
        raise ValueError(f"Num gradients {len(leaves)} generated by {what} do not match num inputs {len(wrt)}: "
                         f"return one gradient (or None) for each of {[t.name for t in wrt]}")
    return [None if g is None else ops.convert_to_tensor(g, dtype_hint=x.dtype) for g, x in zip(leaves, wrt)]


# ---- tf.custom_gradient -----------------------------------------------------------------------------------------


def custom_gradient(f: Callable[..., Any] | None = None) -> Any:
    """``@tf.custom_gradient``: ``f(*xs)`` returns ``(y, grad_fn)`` and ``grad_fn(*dys)``
    returns one gradient per ``x`` (None for none); if ``f`` reads Variables that are not
    among ``xs``, ``grad_fn(*dys, variables=...)`` gets them (sorted by name) and returns
    ``(x gradients, variable gradients)``. ``tf.gradients`` then uses ``grad_fn``'s ops,
    also inside ``tf.cond``, ``tf.while_loop`` and higher-order gradients."""
    if f is None:
        return custom_gradient

    @functools.wraps(f)
    def decorated(*args: Any, **kwargs: Any) -> Any:
        if kwargs:
            raise ValueError(f"The custom_gradient decorator currently supports keywords arguments only when eager "
                             f"execution is enabled: {f.__name__} got {sorted(kwargs)} at {user_location()}; pass "
                             "them by position")
        return _custom_gradient_call(f, args)
    return decorated


def _custom_gradient_call(f: Callable[..., Any], args: tuple) -> Any:
    graph = get_default_graph()
    name = getattr(f, "__name__", "custom_gradient")
    xs = [ops.convert_to_tensor(a) for a in args]
    start = len(graph._ops)
    pair = f(*xs)
    if not (isinstance(pair, (tuple, list)) and len(pair) == 2 and callable(pair[1])):
        raise TypeError(f"a @tf.custom_gradient function returns (y, grad_fn); {name} returned "
                        f"{type(pair).__name__} (called at {user_location()})")
    result, grad_fn = pair
    leaves, tree = pytree.flatten(result, is_leaf=lambda x: not isinstance(x, (list, tuple, dict)))
    ys = [ops.convert_to_tensor(y) for y in leaves]
    fwd_ops = graph._ops[start:]
    variables = _variables_read(fwd_ops, xs)
    spec = inspect.getfullargspec(grad_fn)
    takes_variables = "variables" in spec.args or "variables" in spec.kwonlyargs or spec.varkw is not None
    if variables and not takes_variables:
        raise TypeError(f"If using @custom_gradient with a function that uses variables, then grad_fn must accept "
                        f"a keyword argument 'variables': {name} (called at {user_location()}) reads "
                        f"{[v.name for v in variables]}")
    dys = _upstream_tensors(graph, ys, name)
    grad_start = len(graph._ops)
    with graph.name_scope(f"gradients/{name}_grad"):
        if variables:
            got = grad_fn(*dys, variables=variables)
            if not (isinstance(got, (tuple, list)) and len(got) == 2):
                raise TypeError(f"grad_fn of {name} (called at {user_location()}) takes variables=, so it returns "
                                "(gradients of the inputs, gradients of the variables)")
            x_grads, var_grads = got
            if len(var_grads) != len(variables):
                raise ValueError(f"Must return gradient for each variable from @custom_gradient grad_fn: {name}'s "
                                 f"returned {len(var_grads)} for {[v.name for v in variables]}")
        else:
            x_grads, var_grads = grad_fn(*dys), []
    refs = [v._ref for v in variables]
    what = f"grad_fn of {name} (called at {user_location()})"
    grads = _gradient_list(x_grads, xs, what) + _gradient_list(list(var_grads), refs, what)
    bwd = _Backward(dys, grads, graph._ops[grad_start:])
    inputs = [*xs, *refs]
    local = frozenset(fwd_ops)

    def forward(ev: Any, op: Operation, vals: list[Any]) -> tuple[Any, list[Any]]:
        child = ev.child(dict(zip(inputs, vals)), local)
        return child, [child.value(y) for y in ys]

    op = graph.create_op("CustomGradient", inputs, _custom_compute(_sanitized(name), inputs, forward, bwd),
                         name=f"CustomGradient_{name}", outputs=[(y._shape, y.dtype) for y in ys])
    op.gradient_free_inputs = _none_at(grads)
    return pytree.unflatten(tree, op.outputs)


def _variables_read(fwd_ops: Sequence[Operation], xs: Sequence[Tensor]) -> list[Any]:
    """The Variables whose value the ops ``f`` built read (or that ``f`` created), other
    than those passed in, sorted by name as TensorFlow passes them to ``grad_fn``."""
    found: dict[Any, None] = {}
    for op in fwd_ops:
        for t in [*op.inputs, *op.outputs]:
            var = t.op.attrs.get("variable") if t.op.type == "VariableV2" else None
            if var is not None and t not in xs:
                found[var] = None
    return sorted(found, key=lambda v: v.name)
