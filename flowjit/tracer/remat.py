"""``fj.remat``: rematerialization (JAX's ``jax.checkpoint``), its policies and ``checkpoint_name``.

``fj.remat(f)`` traces ``f`` into the block of one ``call`` op (``flowjit/ir/primitives/
custom.py``). Its results are ``f``'s outputs, then the values of the block that the
policy marks saveable. Without differentiation the pipeline inlines the op and the
program is ``f``'s. When ``grad`` (or ``vjp``) reaches the op, its VJP rule emits a second
``call`` that runs ``f``'s forward again from the inputs and the saved values, then its
backward: the forward's other values (activations) are not kept from the forward pass
to the backward, which is the memory remat saves, for the time of one more forward. The
pipeline inlines that recomputation after CSE (``inline_remat``), so it is not merged
back into the forward. ``fj.checkpoint`` stays the save/restore module.

A policy is ``policy(primitive, *input_types, **attrs) -> bool``: whether the op's results
may be saved, as JAX's ``policy(prim, *avals, **params)``; ``fj.remat_policies`` holds
JAX's ``checkpoint_policies`` that mean something on a CPU.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from types import SimpleNamespace
from typing import Any

from flowjit.ir.errors import FlowjitTypeError
from flowjit.ir.registry import Primitive
from flowjit.ir.types import TensorType
from flowjit.tracer import pytree
from flowjit.tracer.blocks import leaves_in, share_captures, trace_block
from flowjit.tracer.core import Tracer, bind, current_trace, operand, user_location
from flowjit.tracer.function import TracedFunction

Policy = Callable[..., bool]


def checkpoint_name(x: Any, name: str) -> Any:
    """``x`` (a pytree of arrays) unchanged, named ``name`` for the policies
    ``save_only_these_names`` and ``save_any_names_but_these``, as ``jax.ad_checkpoint.checkpoint_name``."""
    if not isinstance(name, str):
        raise FlowjitTypeError(f"checkpoint_name: the name must be a str, got {type(name).__name__} "
                               f"at {user_location()}")
    return pytree.tree_map(lambda leaf: bind("name_tag", [operand(leaf, "checkpoint_name's argument")],
                                             {"name": name}), x)


def everything_saveable(prim: Primitive, *in_types: TensorType, **attrs: Any) -> bool:
    """Save every value: no recomputation (the same memory as without remat)."""
    return True


def nothing_saveable(prim: Primitive, *in_types: TensorType, **attrs: Any) -> bool:
    """Save nothing but the inputs: the whole forward runs again in the backward (the default)."""
    return False


def dots_saveable(prim: Primitive, *in_types: TensorType, **attrs: Any) -> bool:
    """Save the results of matrix products and convolutions, the costly ops; recompute the
    elementwise work around them."""
    return prim.role in ("matrix_product", "convolution")


def dots_with_no_batch_dims_saveable(prim: Primitive, *in_types: TensorType, **attrs: Any) -> bool:
    """Save the results of matrix products of two matrices (no batch dimensions)."""
    return prim.role == "matrix_product" and all(t.ndim <= 2 for t in in_types)


def save_only_these_names(*names: str) -> Policy:
    """A policy saving exactly the values named with ``checkpoint_name`` in ``names``."""
    wanted = frozenset(names)

    def policy(prim: Primitive, *in_types: TensorType, **attrs: Any) -> bool:
        return prim.role == "name_tag" and attrs.get("name") in wanted
    policy.__name__ = f"save_only_these_names({', '.join(sorted(wanted))})"
    return policy


def save_any_names_but_these(*names: str) -> Policy:
    """A policy saving every value named with ``checkpoint_name``, except those in ``names``."""
    unwanted = frozenset(names)

    def policy(prim: Primitive, *in_types: TensorType, **attrs: Any) -> bool:
        return prim.role == "name_tag" and attrs.get("name") not in unwanted
    policy.__name__ = f"save_any_names_but_these({', '.join(sorted(unwanted))})"
    return policy


def save_from_both_policies(policy_1: Policy, policy_2: Policy) -> Policy:
    """A policy saving what either policy saves."""
    def policy(prim: Primitive, *in_types: TensorType, **attrs: Any) -> bool:
        return policy_1(prim, *in_types, **attrs) or policy_2(prim, *in_types, **attrs)
    policy.__name__ = f"save_from_both_policies({_policy_name(policy_1)}, {_policy_name(policy_2)})"
    return policy


remat_policies = SimpleNamespace(
    everything_saveable=everything_saveable, nothing_saveable=nothing_saveable, dots_saveable=dots_saveable,
    checkpoint_dots=dots_saveable, dots_with_no_batch_dims_saveable=dots_with_no_batch_dims_saveable,
    checkpoint_dots_with_no_batch_dims=dots_with_no_batch_dims_saveable,
    save_only_these_names=save_only_these_names, save_any_names_but_these=save_any_names_but_these,
    save_from_both_policies=save_from_both_policies)


def _policy_name(policy: Policy | None) -> str:
    return "nothing_saveable" if policy is None else getattr(policy, "__name__", type(policy).__name__)


def remat(fun: Callable[..., Any] | None = None, policy: Policy | None = None, prevent_cse: bool = True,
          static_argnums: int | Sequence[int] = ()) -> Any:
    """``fun`` with its forward recomputed in the backward pass instead of its intermediate
    values kept, as ``jax.checkpoint`` (also ``jax.remat``): the gradient is the same, peak
    memory drops by the activations ``fun`` would keep, and a differentiated call costs one
    more forward. ``policy(primitive, *input_types, **attrs) -> bool`` (see
    ``fj.remat_policies``; default ``nothing_saveable``) says which values to save anyway.
    ``prevent_cse`` keeps the recomputation from being merged back into the forward (set it
    False only where that cannot happen, as inside a scan body). ``static_argnums`` are
    positional arguments passed as Python values (hashable), not traced. Usable as a
    decorator, with or without arguments."""
    if fun is None:
        return functools.partial(remat, policy=policy, prevent_cse=prevent_cse, static_argnums=static_argnums)
    if not callable(fun):
        raise FlowjitTypeError(f"fj.remat expects a callable, got {type(fun).__name__}")
    if policy is not None and not callable(policy):
        raise FlowjitTypeError(f"fj.remat: policy must be callable as policy(primitive, *input_types, **attrs) "
                               f"-> bool (see fj.remat_policies), got {type(policy).__name__}")
    statics = (static_argnums,) if isinstance(static_argnums, int) else tuple(static_argnums)
    name = getattr(fun, "__name__", "function")
    compiled: list[Any] = []

    @functools.wraps(fun)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if current_trace() is None:
            if not compiled:
                compiled.append(TracedFunction(wrapper, static_argnums=statics))
            return compiled[0](*args, **kwargs)
        return _traced(fun, name, policy, bool(prevent_cse), statics, args, kwargs)

    return wrapper


def _traced(fun: Callable[..., Any], name: str, policy: Policy | None, prevent_cse: bool,
            statics: tuple[int, ...], args: tuple, kwargs: dict) -> Any:
    trace = current_trace()
    for i in statics:
        if not -len(args) <= i < len(args):
            raise FlowjitTypeError(f"remat of {name}: static_argnums={statics} but it was called with "
                                   f"{len(args)} positional argument(s) at {user_location()}")
    static = {i % len(args) for i in statics}
    dynamic = tuple(a for i, a in enumerate(args) if i not in static)
    leaves, tree = leaves_in(trace, (dynamic, kwargs), f"the arguments of {name}")

    def flat(dyn: tuple, kw: dict) -> Any:
        it = iter(dyn)
        return fun(*(args[i] if i in static else next(it) for i in range(len(args))), **kw)

    sub, outs, out_tree = trace_block(flat, tree, leaves, name)
    captures = share_captures([sub], len(leaves))
    block = sub.block
    saved = []
    if policy is not None:
        seen: set[int] = set()
        for op in block.ops:
            if policy(op.primitive, *(v.type for v in op.inputs), **op.attrs):
                saved.extend(r for r in op.results if r.id not in seen)
                seen.update(r.id for r in op.results)
    block.set_returns([*block.returns, *saved])
    attrs = {"num_out": len(outs), "prevent_cse": prevent_cse, "recompute": False,
             "policy": _policy_name(policy), "name": name}
    results = trace.builder.emit("call", [t.value for t in [*leaves, *captures]], attrs, loc=user_location(),
                                 blocks=[block])
    return pytree.unflatten(out_tree, [Tracer(v, trace, o.weak) for v, o in zip(results, outs)])
