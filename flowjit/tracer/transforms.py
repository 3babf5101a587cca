"""``fj.vmap``: a function of one example turned into a function of a batch, without a loop.

``vmap(f)`` traces ``f`` once on per-example types (the mapped axis dropped) into a block
nested in the current trace, then the batching pass (``flowjit.passes.batching``) rewrites
that block into batched ops of the caller's program: ``vmap(f)(xs)`` is the same IR as
``f`` written by hand for a leading batch axis, so it fuses and compiles with the rest, and
``vmap(grad(loss))`` gives per-example gradients with no loop over examples. Values ``f``
closes over are shared by every example. Outside a trace, ``vmap(f)`` is an ``fj.function``
of itself, traced once per argument signature and compiled.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flowjit.ir.core import Block
from flowjit.ir.errors import FlowjitTypeError, TracerError
from flowjit.ir.types import TensorType
from flowjit.passes.batching import batch_block
from flowjit.tracer import pytree
from flowjit.tracer.autodiff import compiled_outside_traces
from flowjit.tracer.blocks import leaves_in
from flowjit.tracer.core import Trace, Tracer, current_trace, trace_context, user_location
from flowjit.tracer.numpy.layout import broadcast_to, moveaxis

Axis = int | None


def _axes_per_leaf(axes: Any, tree: Any, path: str, what: str, whole: tuple[Any, Any]) -> list[tuple[str, Axis]]:
    """The axis of every leaf of ``tree`` (with its path), ``axes`` being a prefix of ``tree``:
    an int or None stands for the whole subtree under it, as in JAX."""
    if axes is None or isinstance(axes, int):
        if isinstance(axes, bool):
            raise FlowjitTypeError(f"vmap: {what} at {path or 'the top'} is {axes!r}; give an int axis or None")
        leaves, _ = pytree.flatten_with_paths(tree, path)
        return [(p, axes) for p, _ in leaves]
    if isinstance(axes, (list, tuple)) and isinstance(tree, (list, tuple)) and len(axes) == len(tree) \
            and not (pytree.is_namedtuple(axes) and type(axes) is not type(tree)):
        return [pa for i, (a, t) in enumerate(zip(axes, tree))
                for pa in _axes_per_leaf(a, t, f"{path}[{i}]", what, whole)]
    if isinstance(axes, dict) and isinstance(tree, dict) and set(axes) == set(tree):
        try:  # the leaf order of pytree.flatten
            keys = sorted(tree)
        except TypeError:
            keys = list(tree)
        return [pa for k in keys for pa in _axes_per_leaf(axes[k], tree[k], f"{path}[{k!r}]", what, whole)]
    tree_str = str(pytree.flatten(whole[1])[1])
    raise FlowjitTypeError(f"vmap: {what} must be an int, None, or a prefix of the structure it maps; "
                           f"{what}={whole[0]!r} does not match {tree_str} (at {path or 'the top'}: "
                           f"{axes!r} against {pytree.flatten(tree)[1]}) at {user_location()}")


def _mapped_size(named: list[tuple[str, Tracer, Axis]], name: str) -> int:
    sizes: dict[int, list[str]] = {}
    for path, t, axis in named:
        if axis is None:
            continue
        if not -t.ndim <= axis < t.ndim:
            raise FlowjitTypeError(f"vmap({name}): in_axes maps axis {axis} of {path}, which has shape "
                                   f"{t.shape} (rank {t.ndim}) at {user_location()}")
        sizes.setdefault(t.shape[axis], []).append(f"{path} (axis {axis}, shape {t.shape})")
    if not sizes:
        raise FlowjitTypeError(f"vmap({name}): in_axes maps no argument (every leaf is None) at "
                               f"{user_location()}; map at least one with an int axis")
    if len(sizes) > 1:
        listing = "; ".join(f"size {s}: {', '.join(ps)}" for s, ps in sizes.items())
        raise FlowjitTypeError(f"vmap({name}): the mapped axes have different sizes ({listing}) at "
                               f"{user_location()}; every mapped axis must have the same size")
    return next(iter(sizes))


def vmap(fun: Callable[..., Any], in_axes: Any = 0, out_axes: Any = 0) -> Callable[..., Any]:
    """``fun`` mapped over an axis of its positional arguments, as ``jax.vmap``: ``in_axes``
    gives the mapped axis of each argument (an int, None for an argument shared by every
    example, or a pytree of those that is a prefix of the arguments, a tuple with one entry
    per argument), and ``out_axes`` where the batch goes in each output (None: an output
    that does not depend on the example). Keyword arguments are shared, not mapped. No loop
    runs: the batched program is ordinary IR, so ``vmap`` nests and composes with
    ``fj.grad`` and ``fj.function`` either way round; a primitive without a batching rule
    raises ``BatchingError`` naming it and the line that called it."""
    name = getattr(fun, "__name__", "function")

    def traced(*args: Any, **kwargs: Any) -> Any:
        trace = current_trace()
        assert trace is not None
        axes = in_axes
        if isinstance(in_axes, list):
            axes = tuple(in_axes)
        if isinstance(axes, tuple) and len(axes) != len(args):
            raise FlowjitTypeError(f"vmap({name}): in_axes has {len(axes)} entries ({in_axes!r}) but the function "
                                   f"got {len(args)} positional argument(s) at {user_location()}; give one axis "
                                   "per argument, or a single int or None for all")
        paths = _axes_per_leaf(axes, args, "args", "in_axes", (in_axes, args))
        leaves, tree = leaves_in(trace, args, "an argument of vmap")
        named = [(p, t, a) for (p, a), t in zip(paths, leaves)]
        size = _mapped_size(named, name)
        inputs = [t if a is None else (moveaxis(t, a, 0) if a % t.ndim else t) for _, t, a in named]

        sub = Trace(Block(), name=f"vmap({name})", parent=trace)
        per_example = [sub.new_arg(TensorType(x.shape[1:] if a is not None else x.shape, x.dtype),
                                   x.value.name or f"a{k}", x.weak)
                       for k, (x, (_, _, a)) in enumerate(zip(inputs, named))]
        try:
            with trace_context(sub):
                out = fun(*pytree.unflatten(tree, per_example), **kwargs)
                out_leaves, out_tree = leaves_in(sub, out, f"the result of {name}")
        except TracerError as e:
            if str(e).startswith("assigning Variable"):
                raise TracerError(f"vmap({name}): {str(e).split(' inside ')[0]} inside fj.vmap is not supported "
                                  "(the Variable is state shared by every example): return the new value and "
                                  "assign it outside") from None
            raise
        sub.block.set_returns([t.value for t in out_leaves])
        captured = [o.value for o, _ in sub.captures]
        outs, flags = batch_block(sub.block, trace.block, [t.value for t in inputs] + captured,
                                  [a is not None for _, _, a in named] + [False] * len(captured))

        out_paths = _axes_per_leaf(out_axes, pytree.unflatten(out_tree, out_leaves), "out", "out_axes",
                                   (out_axes, pytree.unflatten(out_tree, out_leaves)))
        results = []
        for (path, axis), v, batched in zip(out_paths, outs, flags):
            t = Tracer(v, trace)
            if axis is None:
                if batched:
                    raise FlowjitTypeError(f"vmap({name}): out_axes is None for {path}, but it depends on the "
                                           f"mapped arguments (its per-example shape is {t.shape[1:]}) at "
                                           f"{user_location()}; give it an int out axis")
                results.append(t)
                continue
            if not batched:
                t = broadcast_to(t, (size, *t.shape))
            if not -t.ndim <= axis < t.ndim:
                raise FlowjitTypeError(f"vmap({name}): out_axes puts the batch at axis {axis} of {path}, "
                                       f"which has rank {t.ndim} with it, at {user_location()}")
            results.append(moveaxis(t, 0, axis) if axis % t.ndim else t)
        return pytree.unflatten(out_tree, results)

    return compiled_outside_traces(traced, fun)
