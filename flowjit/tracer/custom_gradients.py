"""``fj.custom_vjp`` and ``fj.stop_gradient``: derivatives the user writes or removes.

``@fj.custom_vjp`` with ``f.defvjp(fwd, bwd)`` works as in JAX: ``fwd(*args)`` returns
``(out, residuals)``, ``bwd(residuals, g)`` returns one cotangent per positional argument
(None for an argument with a zero cotangent). Called in a trace, ``f`` records its own
ops (so without differentiation ``f`` runs as itself), then ``fwd``'s ops for the
residuals, then one ``custom_vjp_call`` op whose block is ``bwd`` traced at that moment
on the residuals and output cotangents (``flowjit/ir/primitives/custom.py``). The IR
stays printable and cacheable; ``grad``, ``vjp`` and the control-flow rules inline
``bwd`` when they differentiate the op, and the ``inline_calls`` pass drops it (and
``prune`` then the unused residuals) when nothing does. The output ``grad`` sees is
``f``'s, as it is in JAX whenever ``fwd``'s ``out`` equals ``f``'s.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from flowjit.ir.errors import FlowjitTypeError
from flowjit.tracer import pytree
from flowjit.tracer.autodiff import vjp
from flowjit.tracer.blocks import leaves_in, share_captures, trace_block
from flowjit.tracer.core import Tracer, bind, current_trace, operand, user_location
from flowjit.tracer.function import TracedFunction
from flowjit.tracer.numpy.creation import zeros


def stop_gradient(x: Any) -> Any:
    """``x`` (a pytree of arrays) unchanged, with a zero derivative: ``grad``, ``vjp`` and
    the control-flow rules pass no cotangent through it, as ``jax.lax.stop_gradient``."""
    return pytree.tree_map(lambda leaf: bind("stop_gradient", [operand(leaf, "stop_gradient's argument")]), x)


def _nondiff(nums: tuple[int, ...], nargs: int, what: str) -> tuple[int, ...]:
    for i in nums:
        if not -nargs <= i < nargs:
            raise FlowjitTypeError(f"{what}: nondiff_argnums={nums} but it was called with {nargs} positional "
                                   f"argument(s) at {user_location(3)}")
    return tuple(sorted({i % nargs for i in nums}))


def _named(fun: Callable[..., Any], name: str) -> Callable[..., Any]:
    fun.__name__ = fun.__qualname__ = name  # errors about the rules name the user's function
    return fun


def _split(nums: tuple[int, ...], args: tuple, what: str) -> tuple[tuple, list, Callable[[tuple], list]]:
    """The arguments at ``nums`` (in order), the others, and the function putting a tuple
    of the others back among the fixed ones."""
    nd = _nondiff(nums, len(args), what)
    fixed = tuple(args[i] for i in nd)
    diff = [a for i, a in enumerate(args) if i not in nd]

    def merge(d: tuple) -> list:
        it, fx = iter(d), iter(fixed)
        return [next(fx) if i in nd else next(it) for i in range(len(args))]
    return fixed, diff, merge


def _compiled_with_fixed(owner: Any, traced: Callable[..., Any], args: tuple, what: str) -> Any:
    """Outside a trace: ``traced`` compiled over the differentiable arguments, the
    nondiff ones fixed, one compiled function per distinct (hashable) set of them."""
    fixed, diff, merge = _split(owner.nondiff_argnums, args, what)
    cache = owner.__dict__.setdefault("_compiled_fixed", {})
    try:
        key = (len(args), fixed)
        compiled = cache.get(key)
    except TypeError:  # an array among them: compiled for this call only
        key, compiled = None, None
    if compiled is None:
        compiled = TracedFunction(lambda *d: traced(*merge(d)))
        if key is not None:
            cache[key] = compiled
    return compiled(*diff)


def _describe(leaves: list[Any], tree: pytree.TreeDef) -> str:
    shapes = ", ".join(str(t.aval) if isinstance(t, Tracer) else type(t).__name__ for t in leaves)
    return f"{tree} with leaves ({shapes})"


class custom_vjp:
    """A function with a reverse-mode derivative of the user's own: decorate ``f``, then
    ``f.defvjp(fwd, bwd)``. ``fwd(*args)`` returns ``(out, residuals)`` with ``out`` of
    ``f``'s structure, shapes and dtypes; ``bwd(residuals, g)``, ``g`` shaped like ``out``,
    returns a tuple with one cotangent pytree per positional argument, each shaped like
    that argument (or None for zeros). ``grad``, ``value_and_grad`` and ``vjp`` use ``bwd``
    (nested too: ``grad(grad(f))`` differentiates ``bwd``'s ops), in ``fj.function`` bodies,
    branches and loop bodies; arguments are positional arrays or pytrees of them.
    ``nondiff_argnums`` (as in JAX, e.g. ``functools.partial(fj.custom_vjp,
    nondiff_argnums=(0,))``) names positional arguments that get no cotangent: Python
    values such as a function or a config (hashable, static outside a trace) or arrays;
    ``bwd`` is then called as ``bwd(*nondiff_args, residuals, g)`` and returns cotangents
    for the other arguments only."""

    def __init__(self, fun: Callable[..., Any], nondiff_argnums: tuple[int, ...] = ()):
        functools.update_wrapper(self, fun)
        self.fun = fun
        self.nondiff_argnums = tuple(nondiff_argnums)
        self.fwd: Callable[..., Any] | None = None
        self.bwd: Callable[..., Any] | None = None
        self._compiled: Any = None
        self._in_rule = False

    def defvjp(self, fwd: Callable[..., Any], bwd: Callable[..., Any]) -> custom_vjp:
        """Set the forward rule ``fwd(*args) -> (out, residuals)`` and the backward rule
        ``bwd(residuals, g) -> tuple of argument cotangents``; returns ``self``."""
        self.fwd, self.bwd = fwd, bwd
        return self

    @property
    def _name(self) -> str:
        return getattr(self.fun, "__name__", "function")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if kwargs:
            raise FlowjitTypeError(f"custom_vjp function {self._name} takes positional arguments only (as in JAX), "
                                   f"got keywords {sorted(kwargs)} at {user_location()}; pass them by position")
        if self.fwd is None or self.bwd is None:
            raise FlowjitTypeError(f"custom_vjp function {self._name} was called at {user_location()} before "
                                   f"{self._name}.defvjp(fwd, bwd) gave it its rules")
        if self._in_rule:
            # A rule calling f (``return f(x), res``) means the primal: this rule does not
            # differentiate that call (it would trace itself without end).
            return self.fun(*args)
        if current_trace() is None:
            if self.nondiff_argnums:
                return _compiled_with_fixed(self, self._traced, args, f"custom_vjp function {self._name}")
            if self._compiled is None:
                self._compiled = TracedFunction(self._traced)
            return self._compiled(*args)
        return self._traced(*args)

    def _with_nondiff(self, args: tuple) -> Any:
        # f of the differentiable arguments alone, the others fixed: bwd gets them first.
        fixed, diff, merge = _split(self.nondiff_argnums, args, f"custom_vjp function {self._name}")
        inner = custom_vjp(_named(lambda *d: self.fun(*merge(d)), self._name))
        inner.defvjp(lambda *d: self._rule(self.fwd, *merge(d)), lambda res, g: self._rule(self.bwd, *fixed, res, g))
        return inner._traced(*diff)

    def _traced(self, *args: Any) -> Any:
        if self.nondiff_argnums:
            return self._with_nondiff(args)
        trace = current_trace()
        name = self._name
        arg_leaves, arg_tree = leaves_in(trace, tuple(args), f"the arguments of {name}")
        args = pytree.unflatten(arg_tree, arg_leaves)
        out_leaves, out_tree = leaves_in(trace, self.fun(*args), f"the result of {name}")
        pair = self._rule(self.fwd, *args)
        if not (isinstance(pair, (tuple, list)) and len(pair) == 2):
            raise FlowjitTypeError(f"the fwd rule of custom_vjp function {name} must return a pair (out, residuals); "
                                   f"it returned {type(pair).__name__} (called at {user_location()})")
        fwd_leaves, fwd_tree = leaves_in(trace, pair[0], f"the out of {name}'s fwd rule")
        if fwd_tree != out_tree or [t.aval for t in fwd_leaves] != [t.aval for t in out_leaves]:
            raise FlowjitTypeError(f"the fwd rule of custom_vjp function {name} returns out = "
                                   f"{_describe(fwd_leaves, fwd_tree)}, but {name} returns "
                                   f"{_describe(out_leaves, out_tree)} (called at {user_location()}); they must match")
        res_leaves, res_tree = leaves_in(trace, pair[1], f"the residuals of {name}'s fwd rule")
        n_res = len(res_leaves)

        def bwd_flat(res: Any, g: Any) -> list[Any]:
            cts = self._rule(self.bwd, res, g)
            return self._checked_cotangents(cts, args, arg_leaves, arg_tree)

        bwd_in = (pytree.unflatten(res_tree, res_leaves), pytree.unflatten(out_tree, out_leaves))
        _, bwd_in_tree = pytree.flatten(bwd_in)
        sub, _, _ = trace_block(bwd_flat, bwd_in_tree, res_leaves + out_leaves, f"{name}.bwd")
        captures = share_captures([sub], n_res + len(out_leaves))
        inputs = [*out_leaves, *res_leaves, *arg_leaves, *captures]
        results = trace.builder.emit("custom_vjp_call", [t.value for t in inputs],
                                     {"num_out": len(out_leaves), "num_res": n_res, "name": name},
                                     loc=user_location(), blocks=[sub.block])
        return pytree.unflatten(out_tree, [Tracer(v, trace, o.weak) for v, o in zip(results, out_leaves)])

    def _rule(self, rule: Callable[..., Any], *args: Any) -> Any:
        self._in_rule = True
        try:
            return rule(*args)
        finally:
            self._in_rule = False

    def _checked_cotangents(self, cts: Any, args: tuple, arg_leaves: list[Tracer],
                            arg_tree: pytree.TreeDef) -> list[Any]:
        # One cotangent per argument leaf, of its type (None: zeros), or an error naming
        # the function and what was expected.
        name = self._name
        expected = f"a tuple of {len(args)} cotangent(s) shaped like the arguments, {_describe(arg_leaves, arg_tree)}"
        where = f"(differentiated at {user_location()})"
        if not isinstance(cts, (tuple, list)) or len(cts) != len(args):
            got = f"a {type(cts).__name__} of {len(cts)}" if isinstance(cts, (tuple, list)) else type(cts).__name__
            raise FlowjitTypeError(f"the bwd rule of custom_vjp function {name} returned {got}; expected {expected} "
                                   f"{where}. Return a tuple with one entry per positional argument (None for "
                                   "a zero cotangent), even for a single argument: (g,)")
        out: list[Any] = []
        it = iter(arg_leaves)
        for k, (ct, arg) in enumerate(zip(cts, args)):
            want_leaves, want_tree = pytree.flatten(arg)
            mine = [next(it) for _ in want_leaves]
            if ct is None:
                out.extend(zeros(t.shape, dtype=t.dtype) for t in mine)
                continue
            got_leaves, got_tree = pytree.flatten(ct, is_leaf=lambda x: x is None)
            got_types = [None if g is None else operand(g, "a cotangent").aval for g in got_leaves]
            bad = got_tree != want_tree or any(g is not None and (g.shape != t.shape or g.dtype != t.dtype)
                                               for g, t in zip(got_types, mine))
            if bad:
                got = f"{got_tree} with leaves ({', '.join(str(g) for g in got_types)})"
                raise FlowjitTypeError(f"the bwd rule of custom_vjp function {name} returned, for argument {k}, "
                                       f"{got}; expected {_describe(mine, want_tree)} {where}. Return a cotangent "
                                       "with the argument's structure, shape and dtype")
            out.extend(zeros(t.shape, dtype=t.dtype) if g is None else g for g, t in zip(got_leaves, mine))
        return out


class custom_jvp:
    """A function with a forward-mode derivative rule of the user's own, as ``jax.custom_jvp``:
    decorate ``f``, then ``f.defjvp(jvp)`` with ``jvp(primals, tangents) -> (out, tangent_out)``
    (``primals`` and ``tangents`` are tuples of the positional arguments; ``tangent_out`` is
    linear in ``tangents``). Reverse mode (``grad``, ``vjp``) uses the rule's transpose,
    JAX's convention too: the cotangent of the arguments is the VJP of ``tangent_out`` as a
    function of ``tangents``. Arguments are float arrays or pytrees of them. The op in the
    IR is a ``custom_vjp_call`` whose bwd is that transpose; forward mode (``fj.jvp``)
    transposes it back, so it computes the user's rule. ``nondiff_argnums`` as in JAX: the
    rule is then ``jvp(*nondiff_args, primals, tangents)`` over the other arguments."""

    def __init__(self, fun: Callable[..., Any], nondiff_argnums: tuple[int, ...] = ()):
        functools.update_wrapper(self, fun)
        self.fun = fun
        self.nondiff_argnums = tuple(nondiff_argnums)
        self.jvp: Callable[..., Any] | None = None
        self._as_vjp = custom_vjp(fun)
        self._as_vjp.defvjp(self._fwd, self._bwd)
        self._in_rule = False

    def defjvp(self, jvp: Callable[..., Any]) -> custom_jvp:
        """Set the rule ``jvp(primals, tangents) -> (out, tangent_out)``; returns ``self``."""
        self.jvp = jvp
        return self

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.jvp is None:
            name = getattr(self.fun, "__name__", "function")
            raise FlowjitTypeError(f"custom_jvp function {name} was called at {user_location()} before "
                                   f"{name}.defjvp(jvp) gave it its rule")
        if not self.nondiff_argnums or self._in_rule:
            return self.fun(*args, **kwargs) if self._in_rule else self._as_vjp(*args, **kwargs)
        if kwargs:
            raise FlowjitTypeError(f"custom_jvp function {self.__name__} takes positional arguments only (as in "
                                   f"JAX), got keywords {sorted(kwargs)} at {user_location()}")
        if current_trace() is None:
            return _compiled_with_fixed(self, self._with_nondiff, args, f"custom_jvp function {self.__name__}")
        return self._with_nondiff(*args)

    def _with_nondiff(self, *args: Any) -> Any:
        fixed, diff, merge = _split(self.nondiff_argnums, args, f"custom_jvp function {self.__name__}")
        inner = custom_jvp(_named(lambda *d: self.fun(*merge(d)), self.__name__))

        def rule(primals: tuple, tangents: tuple) -> Any:
            self._in_rule = True  # the rule calling f means the primal, as in custom_vjp
            try:
                return self.jvp(*fixed, primals, tangents)
            finally:
                self._in_rule = False
        inner.defjvp(rule)
        return inner(*diff)

    def _fwd(self, *args: Any) -> tuple[Any, Any]:
        return self.fun(*args), args

    def _bwd(self, primals: tuple, g: Any) -> tuple:
        # The rule is linear in the tangents, so its VJP at zero tangents is its transpose.
        zero = pytree.tree_map(lambda x: zeros(x.shape, dtype=x.dtype), primals)
        _, pullback = vjp(lambda *ts: self.jvp(primals, ts)[1], *zero)
        return tuple(pullback(g))
