"""``fj.jacrev``, ``fj.jacfwd``, ``fj.hessian`` and ``fj.hvp``: Jacobians and Hessians.

``jacrev`` is ``fj.vmap`` of the ``fj.vjp`` pullback over the standard basis of the
output's cotangent space (JAX's ``jacrev``, api.py): one batched backward pass computes
every row at once, so the compiled program has no per-row loop and the forward pass runs
once. The basis is an ``eye`` built from ``iota``, a traced value that fuses, not a
constant of ``Y*Y`` elements stored in the program. ``jacfwd`` is the forward-mode
dual: ``fj.vmap`` of ``fj.jvp`` over the standard basis of the inputs, one batched
tangent pass (the primal ops do not depend on the tangent, so they run once).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from flowjit.ir.errors import FlowjitTypeError
from flowjit.tracer import pytree
from flowjit.tracer.autodiff import check_holomorphic, compiled_outside_traces, grad, normalize_argnums, vjp
from flowjit.tracer.core import Tracer, operand, user_location
from flowjit.tracer.forward import jvp
from flowjit.tracer.numpy.layout import moveaxis, reshape
from flowjit.tracer.numpy.matrices import eye
from flowjit.tracer.transforms import vmap


def _std_basis(outs: list[Tracer]) -> tuple[list[Any], list[tuple[int, int]]]:
    """One cotangent leaf per output leaf, each with a leading axis of size Y (all output
    elements together): row r is one at element r of the flattened outputs. Also each
    leaf's (start, stop) in that axis."""
    total = sum(math.prod(o.shape) for o in outs)
    ones = eye(total, dtype=outs[0].dtype)
    leaves, spans, start = [], [], 0
    for o in outs:
        stop = start + math.prod(o.shape)
        cols = ones if len(outs) == 1 else ones[:, start:stop]
        leaves.append(reshape(cols, (total, *o.shape)))
        spans.append((start, stop))
        start = stop
    return leaves, spans


def jacrev(fun: Callable[..., Any], argnums: int | Sequence[int] = 0, has_aux: bool = False,
           holomorphic: bool = False) -> Callable[..., Any]:
    """The Jacobian of ``fun`` with respect to its positional arguments ``argnums`` by
    reverse mode, as ``jax.jacrev``: for an output leaf of shape S and an argument leaf of
    shape T the block has shape ``S + T``; the result nests the output's structure outside
    the argument's (a tuple of argument pytrees per output leaf when ``argnums`` is a
    tuple). With ``has_aux``, ``fun`` returns ``(output, aux)`` and the result is
    ``(jacobian, aux)``. Arguments and outputs must be real floats, or, with
    ``holomorphic=True`` (as in JAX), complex (the Jacobian of complex derivatives). All rows
    come from one vmapped pullback (no loop), so it composes with ``fj.function``,
    ``fj.grad`` and itself."""
    name = getattr(fun, "__name__", "function")

    def traced(*args: Any, **kwargs: Any) -> Any:
        nums = normalize_argnums(argnums, len(args), f"jacrev({name})")

        def partial(*wrt: Any) -> Any:
            full = list(args)
            for i, w in zip(nums, wrt):
                full[i] = w
            return fun(*full, **kwargs)

        primals = [args[i] for i in nums]
        if has_aux:
            out = vjp(partial, *primals, has_aux=True)
            if len(out) != 3:
                raise FlowjitTypeError(f"jacrev({name}) with has_aux=True: the function must return "
                                       f"(output, aux) at {user_location()}")
            y, pullback, aux = out
        else:
            (y, pullback), aux = vjp(partial, *primals), None
        outs, out_tree = pytree.flatten(y)
        if holomorphic:
            check_holomorphic(f"jacrev({name})", [operand(x, "an argument") for p in primals
                                                  for x in pytree.flatten(p)[0]], outs)
        for k, o in enumerate(outs):
            if holomorphic:
                continue
            if not o.dtype.is_float:
                raise FlowjitTypeError(f"jacrev({name}): output leaf {k} is {o.aval} at {user_location()}; jacrev "
                                       "needs real float outputs (cast integer outputs to float; complex outputs "
                                       "are not supported: take fj.real and fj.imag separately)")
        for i, p in zip(nums, primals):
            for leaf in pytree.flatten(p)[0]:
                if holomorphic:
                    break
                if getattr(leaf, "dtype", None) is not None and getattr(leaf.dtype, "is_complex", False):
                    raise FlowjitTypeError(f"jacrev({name}): argument {i} has a complex leaf at {user_location()};"
                                           " only real float arguments are supported")
        basis, spans = _std_basis(outs)
        rows = vmap(pullback)(pytree.unflatten(out_tree, basis))  # a tuple over argnums, leaves (Y, *T)
        arg_trees = [pytree.flatten(r) for r in rows]
        blocks = []
        for o, (start, stop) in zip(outs, spans):
            per_arg = []
            for leaves, tree in arg_trees:
                cut = [leaf if len(outs) == 1 else leaf[start:stop] for leaf in leaves]
                per_arg.append(pytree.unflatten(tree, [reshape(c, (*o.shape, *c.shape[1:])) for c in cut]))
            blocks.append(per_arg[0] if isinstance(argnums, int) else tuple(per_arg))
        jac = pytree.unflatten(out_tree, blocks)
        return (jac, aux) if has_aux else jac

    return compiled_outside_traces(traced, fun)


def jacfwd(fun: Callable[..., Any], argnums: int | Sequence[int] = 0, has_aux: bool = False,
           holomorphic: bool = False) -> Callable[..., Any]:
    """The Jacobian of ``fun`` with respect to its positional arguments ``argnums`` by
    forward mode, as ``jax.jacfwd``: the same blocks and nesting as ``jacrev`` (``S + T``
    per output leaf of shape S and argument leaf of shape T, outputs outside arguments),
    cheaper when the arguments have fewer elements than the outputs. All columns come
    from one vmapped ``fj.jvp`` (no loop). With ``has_aux``, ``fun`` returns ``(output,
    aux)`` and the result is ``(jacobian, aux)``. Arguments and outputs must be real floats,
    or complex with ``holomorphic=True``."""
    name = getattr(fun, "__name__", "function")

    def traced(*args: Any, **kwargs: Any) -> Any:
        nums = normalize_argnums(argnums, len(args), f"jacfwd({name})")
        aux = None
        if has_aux:  # the aux is computed apart; CSE merges its ops with the jvp's primal ones
            out = fun(*args, **kwargs)
            if not (isinstance(out, (tuple, list)) and len(out) == 2):
                raise FlowjitTypeError(f"jacfwd({name}) with has_aux=True: the function must return "
                                       f"(output, aux) at {user_location()}")
            aux = out[1]

        def partial(*wrt: Any) -> Any:
            full = list(args)
            for i, w in zip(nums, wrt):
                full[i] = w
            out = fun(*full, **kwargs)
            return out[0] if has_aux else out

        primals = [args[i] for i in nums]
        in_trees = [pytree.flatten(p) for p in primals]
        ins = [operand(x, f"argument of jacfwd({name})") for leaves, _ in in_trees for x in leaves]
        if holomorphic:
            check_holomorphic(f"jacfwd({name})", ins, [])
        for k, x in enumerate(ins):
            if not x.dtype.is_float and not holomorphic:
                raise FlowjitTypeError(f"jacfwd({name}): argument leaf {k} is {x.aval} at {user_location()}; "
                                       "jacfwd needs real float arguments (cast integers to float; complex "
                                       "arguments are not supported)")
        basis, spans = _std_basis(ins)  # leaves (X, *T)
        it = iter(basis)
        tangents = [pytree.unflatten(tree, [next(it) for _ in leaves]) for leaves, tree in in_trees]
        cols = vmap(lambda *ts: jvp(partial, primals, ts)[1])(*tangents)  # the output tree, leaves (X, *S)
        outs, out_tree = pytree.flatten(cols)
        blocks = []
        for o in outs:
            if holomorphic:
                check_holomorphic(f"jacfwd({name})", [], [o])
            elif not o.dtype.is_float:
                raise FlowjitTypeError(f"jacfwd({name}): an output leaf is {o.aval} at {user_location()}; jacfwd "
                                       "needs real float outputs")
            last = moveaxis(o, 0, -1)  # (*S, X)
            shape = o.shape[1:]
            leaves_it = iter(zip(ins, spans))
            per_arg = []
            for leaves, tree in in_trees:
                cut = []
                for x, (start, stop) in (next(leaves_it) for _ in leaves):
                    c = last if len(ins) == 1 else last[..., start:stop]
                    cut.append(reshape(c, (*shape, *x.shape)))
                per_arg.append(pytree.unflatten(tree, cut))
            blocks.append(per_arg[0] if isinstance(argnums, int) else tuple(per_arg))
        jac = pytree.unflatten(out_tree, blocks)
        return (jac, aux) if has_aux else jac

    return compiled_outside_traces(traced, fun)


def hessian(fun: Callable[..., Any], argnums: int | Sequence[int] = 0, has_aux: bool = False,
            holomorphic: bool = False) -> Callable[..., Any]:
    """The Hessian of ``fun`` (a real float scalar, or any float output: then one Hessian
    per output element) with respect to ``argnums``, as ``jax.hessian``: for a scalar
    output and an argument leaf of shape T it has shape ``T + T``, nested as
    ``jacfwd(jacrev(fun))``'s result (a tuple of tuples for a tuple of ``argnums``). With
    ``has_aux``, returns ``(hessian, aux)``. Forward over reverse, as JAX: one batched
    tangent pass through the gradient program (the gradient's forward ops run once)."""
    return jacfwd(jacrev(fun, argnums, has_aux, holomorphic), argnums, has_aux, holomorphic)


def hvp(fun: Callable[..., Any], primals: Sequence[Any], tangents: Sequence[Any]) -> Any:
    """The Hessian-vector product of ``fun`` (a real float scalar function of the
    positional arguments ``primals``) along ``tangents`` (one pytree per primal, of its
    structure), without building the Hessian: forward over reverse,
    ``fj.jvp(fj.grad(fun, argnums=all), primals, tangents)[1]`` as in JAX's autodiff
    cookbook (``torch.func``'s ``jvp(grad(f))``); it has the structure of the primals (the
    single argument's own when there is one). Costs about one gradient."""
    if not isinstance(primals, (tuple, list)) or not isinstance(tangents, (tuple, list)):
        raise FlowjitTypeError(f"hvp({getattr(fun, '__name__', 'function')}): primals and tangents must be tuples "
                               f"or lists (one entry per positional argument), got {type(primals).__name__} and "
                               f"{type(tangents).__name__}")
    nums = 0 if len(primals) == 1 else tuple(range(len(primals)))
    return jvp(grad(fun, argnums=nums), tuple(primals), tuple(tangents))[1]
