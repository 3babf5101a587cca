"""``fj.jvp``: forward-mode derivatives of traced code (Jacobian-vector products).

Inside a trace the function is called on the current trace, so its ops are recorded
there; ``flowjit.passes.forward.jvp`` then appends the tangent ops for exactly that
region. The tangent is ordinary IR in the caller's program: it is optimized, fused and
compiled with the rest, ``jvp(grad(f))`` is a Hessian-vector product, and ``vmap`` of a
``jvp`` batches only the tangent ops (the primal ops do not depend on the tangent, so
they run once). Values the function closes over are constants for the derivative, as
in JAX. Called outside a trace, ``jvp`` runs an ``fj.function`` of itself, traced once
per argument signature and compiled.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any
from weakref import WeakKeyDictionary, ref

from flowjit.ir.errors import FlowjitTypeError
from flowjit.passes.forward import jvp as forward_jvp
from flowjit.tracer import pytree
from flowjit.tracer.autodiff import derive_nested, own_value
from flowjit.tracer.core import Tracer, bind, current_trace, operand, user_location
from flowjit.tracer.function import TracedFunction, function

__all__ = ["jvp", "linearize"]

# Outside a trace, one compiled jvp per function and has_aux (traced once per signature),
# so calling fj.jvp(f, ...) again does not trace f again. The compiled function reaches f
# through a weak reference, or the entry would keep its own key alive.
_compiled: WeakKeyDictionary[Any, dict[bool, Any]] = WeakKeyDictionary()


def _tangent(name: str, i: int, path: str, primal: Tracer, tangent: Any) -> Tracer:
    """``tangent`` as a value of the trace, checked against its primal's shape and dtype
    (a Python scalar takes the primal's dtype, as weak scalars do elsewhere)."""
    t = operand(tangent, f"tangent {i}{path}")
    if t.weak and t.shape == () and primal.shape == ():
        return bind("cast", [t], {"dtype": primal.dtype})
    if t.shape != primal.shape or t.dtype != primal.dtype:
        raise FlowjitTypeError(f"jvp({name}): the tangent of argument {i}{path} is {t.aval} but the primal is "
                               f"{primal.aval} at {user_location(3)}; a tangent must have its primal's shape and "
                               "dtype (cast it, e.g. t.astype(x.dtype))")
    return own_value(tangent, f"tangent {i}{path}")


def jvp(fun: Callable[..., Any], primals: Sequence[Any], tangents: Sequence[Any],
        has_aux: bool = False) -> tuple[Any, ...]:
    """``(fun(*primals), tangent_out)``, as ``jax.jvp`` (``(out, tangent_out, aux)`` with
    ``has_aux``, ``fun`` then returning ``(out, aux)``): the derivative of ``fun`` at
    ``primals`` along ``tangents`` (a sequence with one pytree per positional argument,
    each of its primal's structure, shapes and dtypes), by forward mode. ``tangent_out``
    has the structure of the output; integer and bool leaves carry zero tangents.
    Composes with ``fj.grad`` (``jvp(grad(f), (x,), (v,))`` is a Hessian-vector product),
    ``fj.vmap`` and ``fj.function``, and goes through ``cond``, ``scan``, ``fori_loop``,
    ``while_loop`` (no bound needed, as in JAX) and custom derivatives (``custom_jvp``'s rule
    is used; a ``custom_vjp`` function's tangent is its bwd transposed)."""
    name = getattr(fun, "__name__", "function")
    if not isinstance(primals, (tuple, list)) or not isinstance(tangents, (tuple, list)):
        raise FlowjitTypeError(f"jvp({name}): primals and tangents must be tuples or lists (one entry per "
                               f"positional argument), got {type(primals).__name__} and {type(tangents).__name__}")
    if len(primals) != len(tangents):
        raise FlowjitTypeError(f"jvp({name}): {len(primals)} primal(s) but {len(tangents)} tangent(s); give one "
                               "tangent per primal")

    def traced(primals: tuple, tangents: tuple, fun_ref: Callable[[], Any]) -> tuple[Any, ...]:
        fun = fun_ref()
        trace = current_trace()
        assert trace is not None
        args, wrt, seeds = [], [], []
        for i, (p, t) in enumerate(zip(primals, tangents)):
            p_leaves, p_tree = pytree.flatten_with_paths(p)
            t_leaves, t_tree = pytree.flatten_with_paths(t)
            if p_tree != t_tree:
                raise FlowjitTypeError(f"jvp({name}): the tangent of argument {i} has structure {t_tree} but the "
                                       f"primal has {p_tree} at {user_location(2)}; give tangents of the primals' "
                                       "structure")
            fresh = []
            for (path, x), (_, tx) in zip(p_leaves, t_leaves):
                px = own_value(x, f"primal {i}{path}")
                wrt.append(px)
                seeds.append(_tangent(name, i, path, px, tx))
                fresh.append(px)
            args.append(pytree.unflatten(p_tree, fresh))
        start = len(trace.block.ops)
        out = fun(*args)
        end = len(trace.block.ops)
        if has_aux and not (isinstance(out, (tuple, list)) and len(out) == 2):
            raise FlowjitTypeError(f"jvp({name}) with has_aux=True: the function must return (output, aux), it "
                                   f"returned {type(out).__name__} at {user_location(2)}")
        value, aux = out if has_aux else (out, None)
        leaves, tree = pytree.flatten(value)
        outs = [x if isinstance(x, Tracer) else own_value(x, "an output") for x in leaves]
        tans = forward_jvp(trace.block, trace.block.ops[start:end], [w.value for w in wrt],
                           [s.value for s in seeds], [o.value for o in outs])
        result = pytree.unflatten(tree, outs), pytree.unflatten(tree, [Tracer(v, trace) for v in tans])
        return (*result, aux) if has_aux else result

    if current_trace() is not None:
        return traced(tuple(primals), tuple(tangents), lambda: fun)
    try:
        per_fun, weak = _compiled.setdefault(fun, {}), ref(fun)
    except TypeError:  # not weakly referenceable: compile for this call only
        per_fun, weak = {}, lambda: fun
    compiled = per_fun.get(has_aux)
    if compiled is None:
        def run(primals: tuple, tangents: tuple) -> tuple[Any, ...]:
            return traced(primals, tangents, weak)
        run.__name__ = run.__qualname__ = f"jvp_of_{name}"
        compiled = per_fun[has_aux] = TracedFunction(run)
    return compiled(tuple(primals), tuple(tangents))


def linearize(fun: Callable[..., Any], *primals: Any) -> tuple[Any, Callable[..., Any]]:
    """``(fun(*primals), f_jvp)`` as ``jax.linearize``: ``f_jvp(*tangents)`` (one tangent
    pytree per primal, of its structure, shapes and dtypes) is the tangent of the output,
    ``jvp(fun, primals, tangents)[1]``, as a function to call once per tangent. Inside a
    trace the forward ops run once and each ``f_jvp`` call adds only the tangent ops, which
    read the recorded forward values (it may be called in a branch or loop body nested
    there, and under ``fj.vmap``: a batch of tangents); outside one, ``fun`` runs compiled
    and each ``f_jvp`` call runs the compiled ``fj.jvp``, which computes the forward again."""
    name = getattr(fun, "__name__", "function")
    trace = current_trace()
    if trace is None:
        out = function(fun)(*primals)

        def f_jvp_outside(*tangents: Any) -> Any:
            return jvp(fun, primals, tangents)[1]
        return out, f_jvp_outside
    p_trees, wrt, args = [], [], []
    for i, p in enumerate(primals):
        leaves, tree = pytree.flatten_with_paths(p)
        fresh = [own_value(x, f"primal {i}{path}") for path, x in leaves]
        p_trees.append((tree, [path for path, _ in leaves]))
        wrt.extend(fresh)
        args.append(pytree.unflatten(tree, fresh))
    start = len(trace.block.ops)
    out = fun(*args)
    ops = trace.block.ops[start:]
    leaves, out_tree = pytree.flatten(out)
    outs = [x if isinstance(x, Tracer) else own_value(x, "an output") for x in leaves]

    def f_jvp(*tangents: Any) -> Any:
        if len(tangents) != len(primals):
            raise FlowjitTypeError(f"linearize({name}): the jvp function got {len(tangents)} tangent(s) for "
                                   f"{len(primals)} primal(s) at {user_location()}; give one per primal")
        seeds, it = [], iter(wrt)
        for i, (t, (tree, paths)) in enumerate(zip(tangents, p_trees)):
            t_leaves, t_tree = pytree.flatten(t)
            if t_tree != tree:
                raise FlowjitTypeError(f"linearize({name}): the tangent of argument {i} has structure {t_tree} but "
                                       f"the primal has {tree} at {user_location()}")
            seeds.extend(_tangent(name, i, path, next(it), x).value for path, x in zip(paths, t_leaves))
        here = current_trace()
        wrt_v, outs_v = [w.value for w in wrt], [o.value for o in outs]

        def build(block: Any) -> list[Any]:
            return forward_jvp(block, ops, wrt_v, seeds, outs_v, replace=False)
        values = build(trace.block) if here is trace else derive_nested(
            here, trace, build, seeds, what=f"linearize({name})'s jvp function", origin="fj.linearize")
        return pytree.unflatten(out_tree, [Tracer(v, here) for v in values])

    return pytree.unflatten(out_tree, outs), f_jvp
