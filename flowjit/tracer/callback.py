"""``fj.pure_callback``: a Python function on NumPy values inside a traced program, as
``jax.pure_callback`` (the op and its rules: flowjit/ir/primitives/callback.py)."""
from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from flowjit.ir.dtypes import dtype as as_dtype
from flowjit.ir.errors import FlowjitTypeError
from flowjit.ir.primitives.callback import VMAP_METHODS, format_results, register_callback, run_callback
from flowjit.ir.types import TensorType
from flowjit.tracer import pytree
from flowjit.tracer.core import Tracer, bind, current_trace, user_location


def pure_callback(callback: Callable[..., Any], result_shape_dtypes: Any, *args: Any,
                  vmap_method: str | None = None, **kwargs: Any) -> Any:
    """``callback(*args, **kwargs)`` run on the arguments' NumPy values, returning arrays of the
    shapes and dtypes of ``result_shape_dtypes`` (a pytree of objects with ``.shape`` and
    ``.dtype``: ``fj.ShapeDtype``, ``jax.ShapeDtypeStruct``, arrays), as ``jax.pure_callback``.
    Inside ``fj.function`` it is one op that the compiled program calls between its kernels;
    the function must be pure (calls may be merged or dropped). It has no derivative: wrap it
    in ``fj.custom_vjp`` to give it one. Under ``fj.vmap``, ``vmap_method`` says how a batch
    reaches it: ``"sequential"`` (one call per example), ``"expand_dims"`` (one call, unbatched
    arguments with a leading axis of 1) or ``"broadcast_all"``; without it vmap raises."""
    if vmap_method is not None and vmap_method not in VMAP_METHODS:
        raise FlowjitTypeError(f"pure_callback: vmap_method={vmap_method!r} at {user_location()}; it is one of "
                               f"{', '.join(map(repr, VMAP_METHODS))} or None")
    fn = functools.partial(callback, **kwargs) if kwargs else callback
    if kwargs:
        functools.update_wrapper(fn, callback)
    specs, out_tree = pytree.flatten(result_shape_dtypes)
    try:
        types = [TensorType(tuple(int(d) for d in s.shape), as_dtype(s.dtype)) for s in specs]
    except (AttributeError, TypeError) as e:
        raise FlowjitTypeError(f"pure_callback: result_shape_dtypes must be a pytree of objects with .shape and "
                               f".dtype (fj.ShapeDtype((3,), 'float32')), got {result_shape_dtypes!r} at "
                               f"{user_location()}") from e
    if not types:
        raise FlowjitTypeError(f"pure_callback: result_shape_dtypes has no arrays at {user_location()}")
    leaves, in_tree = pytree.flatten(args)

    def flat(*xs: np.ndarray) -> Any:
        out = fn(*pytree.unflatten(in_tree, list(xs)))
        got = pytree.flatten(out)[0]
        return tuple(got) if len(types) > 1 else got[0]
    flat.__qualname__ = getattr(callback, "__qualname__", type(callback).__name__)
    if current_trace() is None and not any(isinstance(x, Tracer) for x in leaves):
        # Eagerly: called at once, and kept in no table (a loop of eager calls would fill it).
        outs = run_callback(flat, flat.__qualname__, [np.asarray(x) for x in leaves], types)
        return pytree.unflatten(out_tree, list(outs))
    attrs = {"callback": register_callback(flat), "results": format_results(types),
             "vmap_method": vmap_method or ""}
    outs = bind("pure_callback", leaves, attrs)
    return pytree.unflatten(out_tree, list(outs) if isinstance(outs, tuple) else [outs])
