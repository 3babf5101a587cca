"""``fj.grad``, ``fj.value_and_grad`` and ``fj.vjp``: reverse-mode derivatives of traced code.

Inside a trace (an ``@fj.function`` body, or another ``grad``), the function is called on
the current trace, so its ops are recorded there; ``flowjit.passes.autodiff.backward``
then appends the gradient ops for exactly that region of the block. The gradient is
ordinary IR in the caller's program: it is optimized, fused and compiled with the rest,
and ``grad(grad(f))`` differentiates the first gradient's ops like any others. Values
the function closes over are constants for the derivative, as in JAX. Called outside a
trace, each of these builds an ``fj.function`` of itself, so it is traced once per
argument signature and compiled.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from flowjit.ir.core import Block, Op, Value, free_values
from flowjit.ir.errors import FlowjitTypeError, OutputTypeError, TracerError
from flowjit.ir.registry import Literal
from flowjit.passes.autodiff import backward
from flowjit.tracer import pytree
from flowjit.tracer.core import Trace, Tracer, bind, current_trace, operand, user_location
from flowjit.tracer.function import TracedFunction, function


def normalize_argnums(argnums: int | Sequence[int], nargs: int, name: str) -> tuple[int, ...]:
    nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
    for i in nums:
        if not -nargs <= i < nargs:
            raise FlowjitTypeError(f"{name}: argnums={argnums} but the function got {nargs} positional "
                                   "argument(s)")
    return tuple(i % nargs for i in nums)


def own_value(x: Any, what: str) -> Tracer:
    # A value of its own in the trace (a reshape to its own shape: gone once simplified),
    # so two arguments passed the same array get separate gradients, and an output that
    # is a plain array still has a Value to seed.
    op = operand(x, what)
    return bind("reshape", [op], {"shape": op.aval.shape})


def _fresh(x: Any) -> Tracer:
    t = own_value(x, "a differentiated argument")
    if not t.dtype.is_inexact:
        raise FlowjitTypeError(f"can only differentiate with respect to float or complex arguments, got {t.aval} "
                               f"at {user_location()}; cast it first, or leave it out of argnums")
    return t


def _forward(fun: Callable[..., Any], args: tuple, kwargs: dict, nums: tuple[int, ...],
             variables: Sequence[Any] = ()):
    """Call ``fun`` on the current trace with fresh values for the leaves of ``args[nums]``
    and for the reads of ``variables`` (their gradients come after the arguments')."""
    trace = current_trace()
    assert trace is not None
    args = list(args)
    wrt_trees = []
    for i in nums:
        leaves, tree = pytree.flatten(args[i])
        fresh = [_fresh(x) for x in leaves]
        wrt_trees.append((tree, fresh))
        args[i] = pytree.unflatten(tree, fresh)
    if variables:
        fresh = []
        for var in variables:
            t = _fresh(trace.read_variable(var))
            trace.current[id(var)] = t  # reads inside fun see the differentiated value
            fresh.append(t)
        wrt_trees.append((pytree.flatten(list(fresh))[1], fresh))
    start = len(trace.block.ops)
    out = fun(*args, **kwargs)
    return trace, start, out, wrt_trees


def _grads(trace, ops, outputs: list[Tracer], seeds: list[Tracer], wrt_trees) -> list[Any]:
    """The gradients (one pytree per entry of ``wrt_trees``) through ``ops``, the forward
    region recorded in ``trace``, emitted into the current trace (where ``seeds`` live)."""
    wrt = [t.value for _, fresh in wrt_trees for t in fresh]
    here = current_trace()
    outs, cts = [o.value for o in outputs], [s.value for s in seeds]
    if here is trace:
        values = backward(trace.block, ops, outs, cts, wrt)
    else:
        values = _backward_nested(here, trace, ops, outs, cts, wrt)
    it = iter(Tracer(v, here) for v in values)
    return [pytree.unflatten(tree, [next(it) for _ in fresh]) for tree, fresh in wrt_trees]


def _backward_nested(here: Trace, trace: Trace, ops: Sequence[Op], outputs: list[Value], seeds: list[Value],
                     wrt: list[Value]) -> list[Value]:
    """``backward`` for a pullback called in ``here``, a branch or loop body nested in
    ``trace``, where the forward region was recorded."""
    return derive_nested(here, trace, lambda block: backward(block, ops, outputs, seeds, wrt), seeds)


def derive_nested(here: Trace, trace: Trace, build: Callable[[Block], list[Value]],
                  local: Sequence[Value], what: str = "a vjp pullback", origin: str = "fj.vjp") -> list[Value]:
    """The values ``build`` appends to a scratch block (derivatives of a region recorded in
    ``trace``, from ``local`` values of ``here``), emitted into ``here``, a branch or loop
    body nested in ``trace``. Nested blocks are isolated, so the derivative ops are built
    apart and the region's values they read become captures of ``here`` (block arguments
    fed by the enclosing ops), as closures of a body do."""
    if not trace.active or not here.encloses(trace):
        raise TracerError(f"{what} was called at {user_location()} in trace {here.name}, outside the trace where "
                          f"{origin} was taken ({trace.name}, {'finished' if not trace.active else 'not enclosing it'})"
                          f": call it in that function or in a branch or loop body nested in it, or take {origin} "
                          "again there")
    scratch = Block()
    values = build(scratch)
    own = {v.id for v in local}
    mapping = {v.id: here.capture(Tracer(v, trace)).value
               for v in free_values(scratch.ops, values) if v.id not in own}
    for op in scratch.walk():
        for i, v in enumerate(op.inputs):
            if v.id in mapping:
                op.set_input(i, mapping[v.id])
        for b in op.blocks:
            b.set_returns([mapping.get(v.id, v) for v in b.returns])
    for op in scratch.ops:
        here.block.append(op)
    return [mapping.get(v.id, v) for v in values]


def value_and_grad(fun: Callable[..., Any], argnums: int | Sequence[int] | None = None,
                   has_aux: bool = False, variables: Sequence[Any] | None = None,
                   holomorphic: bool = False) -> Callable[..., Any]:
    """A function returning ``(fun(*args), gradient)``, the gradient of ``fun``'s float scalar
    result with respect to the positional arguments ``argnums`` (default 0; each a pytree
    of float arrays; a tuple of gradients when ``argnums`` is a sequence). With
    ``variables`` (``fj.Variable`` objects ``fun`` reads), the gradient is the list of
    theirs, or ``(argument gradients, variable gradients)`` when ``argnums`` is given too.
    With ``has_aux``, ``fun`` returns ``(value, aux)`` and the result is ``((value, aux),
    gradient)``. With ``holomorphic=True`` (as in JAX) ``fun`` maps complex arguments to a
    complex scalar and the gradient is its complex derivative ``f'(z)``."""
    name = getattr(fun, "__name__", "function")
    if argnums is None:
        argnums = () if variables else 0
    variables = list(variables or ())

    def traced(*args: Any, **kwargs: Any) -> Any:
        nums = normalize_argnums(argnums, len(args), f"value_and_grad({name})")
        trace, start, out, wrt_trees = _forward(fun, args, kwargs, nums, variables)
        value, aux = out if has_aux else (out, None)
        if has_aux and not (isinstance(out, (tuple, list)) and len(out) == 2):
            raise FlowjitTypeError(f"{name} was differentiated with has_aux=True, so it must return "
                                   f"(value, aux); it returned {type(out).__name__}")
        v = value if isinstance(value, Tracer) else own_value(value, "the differentiated output")
        if holomorphic:
            check_holomorphic(f"grad of {name}", [t for _, fresh in wrt_trees for t in fresh], [v])
        elif v.size == 1 and v.dtype.is_complex:
            raise OutputTypeError(f"grad of {name}: the function returns a complex scalar ({v.aval}); grad needs a "
                                  "real-valued result: take fj.real(), fj.imag() or fj.abs() of it, pass "
                                  "holomorphic=True for a holomorphic function (or use fj.vjp with a complex "
                                  "cotangent)")
        # One element of any shape is a scalar here, as PyTorch's backward() and autograd take it.
        if v.size != 1 or not v.dtype.is_inexact:
            raise OutputTypeError(f"grad of {name}: the function must return a float scalar, got {v.aval}; "
                                  "for other results use fj.vjp with a cotangent of their shape (or fj.jacrev)")
        seed = bind("constant", [], {"value": Literal(np.ones((), v.dtype.np))})
        if v.shape != ():
            seed = bind("broadcast_to", [seed], {"shape": v.shape})
        grads = _grads(trace, trace.block.ops[start:], [v], [seed], wrt_trees)
        var_grads = list(grads.pop()) if variables else None
        g = grads[0] if isinstance(argnums, int) else tuple(grads)
        if variables:
            g = var_grads if argnums == () else (g, var_grads)
        return ((value, aux) if has_aux else value), g

    return compiled_outside_traces(traced, fun)


def grad(fun: Callable[..., Any], argnums: int | Sequence[int] | None = None, has_aux: bool = False,
         variables: Sequence[Any] | None = None, holomorphic: bool = False) -> Callable[..., Any]:
    """The gradient of ``fun`` (which returns a float scalar) with respect to its positional
    arguments ``argnums`` (default 0) and/or the ``variables`` it reads (see
    ``value_and_grad``); ``grad(f)(x)`` has the structure of ``x``. With ``has_aux``,
    returns ``(gradient, aux)``; with ``holomorphic=True``, the complex derivative of a
    holomorphic complex scalar function. Nests: ``grad(grad(f))``."""
    vg = value_and_grad(fun, argnums, has_aux, variables, holomorphic)

    def traced(*args: Any, **kwargs: Any) -> Any:
        (value, aux), g = vg(*args, **kwargs) if has_aux else ((None, None), vg(*args, **kwargs)[1])
        return (g, aux) if has_aux else g

    return compiled_outside_traces(traced, fun)


def check_holomorphic(what: str, ins: Sequence[Tracer], outs: Sequence[Tracer]) -> None:
    """JAX's rule for ``holomorphic=True``: complex arguments and complex outputs."""
    for kind, values in (("argument", ins), ("output", outs)):
        for t in values:
            if not t.dtype.is_complex:
                raise FlowjitTypeError(f"{what} with holomorphic=True: an {kind} is {t.aval} at {user_location()}; "
                                       f"holomorphic differentiation needs complex {kind}s (cast with "
                                       ".astype(fj.complex128))")


def vjp(fun: Callable[..., Any], *primals: Any, has_aux: bool = False) -> tuple:
    """``(fun(*primals), vjp_fn)``; ``vjp_fn(cotangent)`` returns one cotangent per primal
    (a tuple), for a cotangent with the structure of ``fun``'s output. Inside a trace the
    gradient ops differentiate the recorded forward ops (``vjp_fn`` may be called there or
    in a branch or loop body nested there, which reads the forward values it needs as
    captures); outside one, each ``vjp_fn`` call runs a compiled program that recomputes
    the forward pass."""
    if current_trace() is None:
        out = function(fun)(*primals)
        value = out[0] if has_aux else out

        def vjp_outside(cotangent: Any) -> tuple:
            def pullback(ct, *ps):
                return vjp(fun, *ps, has_aux=has_aux)[1](ct)
            return function(pullback)(cotangent, *primals)
        return (value, vjp_outside, out[1]) if has_aux else (value, vjp_outside)

    trace, start, out, wrt_trees = _forward(fun, primals, {}, tuple(range(len(primals))))
    end = len(trace.block.ops)
    value, aux = out if has_aux else (out, None)
    out_leaves, out_tree = pytree.flatten(value)
    outs = [x if isinstance(x, Tracer) else own_value(x, "an output") for x in out_leaves]

    def vjp_fn(cotangent: Any) -> tuple:
        ct_leaves, ct_tree = pytree.flatten(cotangent)
        if ct_tree != out_tree or len(ct_leaves) != len(outs):
            raise FlowjitTypeError(f"vjp: the cotangent has structure {ct_tree}, the output {out_tree}")
        seeds = []
        for o, c in zip(outs, ct_leaves):
            t = bind("cast", [operand(c, "a cotangent")], {"dtype": o.dtype})
            if t.shape != o.shape:
                t = bind("broadcast_to", [t], {"shape": o.shape})
            seeds.append(t)
        return tuple(_grads(trace, trace.block.ops[start:end], outs, seeds, wrt_trees))

    value = pytree.unflatten(out_tree, outs)
    return (value, vjp_fn, aux) if has_aux else (value, vjp_fn)


def compiled_outside_traces(traced: Callable[..., Any], fun: Callable[..., Any]) -> Callable[..., Any]:
    # Inside a trace, run on it (the gradient joins the caller's program); outside, an
    # fj.function of it, traced once per signature and compiled.
    compiled = TracedFunction(traced)

    @functools.wraps(fun)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if current_trace() is not None:
            return traced(*args, **kwargs)
        return compiled(*args, **kwargs)

    return wrapper
