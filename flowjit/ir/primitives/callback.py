"""Host callbacks: ``pure_callback`` runs a Python function on NumPy arrays inside a program.

``%r... = pure_callback %x... {callback="name#k", results="f32[3];i64[]", vmap_method=m}``
calls the function registered under ``callback`` (``register_callback``) on the NumPy values
of its inputs and returns arrays of the declared ``results`` types, as ``jax.pure_callback``:
the function must be pure (the op may be merged with an equal one, dropped when unused, or
run at compile time on constant inputs). The op is opaque: a compiled program calls the
function between its kernels. It has no derivative (give it one with ``fj.custom_vjp`` or
``fj.custom_jvp``, as in JAX), and under ``fj.vmap`` its ``vmap_method`` says how a batch
reaches the function: ``sequential`` (one call per example), ``expand_dims`` (one call; the
unbatched inputs get a leading axis of size 1) or ``broadcast_all`` (one call; every input
broadcast to the batch); without one, vmap raises.

The functions live in a table of this process, keyed by name and a counter, so IR text that
names a callback parses back to the same program here; in another process the name is
unknown and running the op raises, naming it.
"""

from __future__ import annotations

import functools
import itertools
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from flowjit.ir.dtypes import ALL_DTYPES
from flowjit.ir.errors import BatchingError, FlowjitTypeError, ShapeError
from flowjit.ir.parser import ParseError, parse_type
from flowjit.ir.registry import attr, declare, defbatch
from flowjit.ir.types import TensorType

VMAP_METHODS = ("sequential", "expand_dims", "broadcast_all")

_CALLBACKS: dict[str, Callable[..., Any]] = {}
_counter = itertools.count()
_lock = threading.Lock()


def register_callback(fn: Callable[..., Any]) -> str:
    """Keep ``fn`` for the ops that name it, and return its name: the function's qualified
    name and a number unique in this process (the table holds it for the process's life, as
    a program may run it at any later call)."""
    with _lock:
        key = f"{getattr(fn, '__qualname__', type(fn).__name__)}#{next(_counter)}"
        _CALLBACKS[key] = fn
    return key


def callback_of(key: str) -> Callable[..., Any]:
    """The function registered as ``key``, or an error saying the program came from elsewhere."""
    fn = _CALLBACKS.get(key)
    if fn is None:
        raise FlowjitTypeError(f"pure_callback {key!r} is not registered in this process: a program with a host "
                               "callback runs only where the function was registered (trace it again here)")
    return fn


def format_results(types: Sequence[TensorType]) -> str:
    """The ``results`` attribute for ``types``: IR types joined by ``;``."""
    return ";".join(str(t) for t in types)


@functools.cache
def parse_results(text: str) -> tuple[TensorType, ...]:
    """The types a ``results`` attribute declares (parsed once per text: every run of the op
    reads them)."""
    try:
        return tuple(parse_type(part) for part in text.split(";")) if text else ()
    except ParseError as e:
        raise ShapeError(f"results={text!r} is not a list of IR types separated by ';' ({e})") from None


def _rule(in_types: Sequence[TensorType], *, callback: str, results: str, vmap_method: str) -> list[TensorType]:
    if vmap_method and vmap_method not in VMAP_METHODS:
        raise ShapeError(f"vmap_method={vmap_method!r}; it is one of {', '.join(VMAP_METHODS)} (or empty)")
    if callback not in _CALLBACKS:
        raise ShapeError(f"callback {callback!r} is not registered in this process")
    out = parse_results(results)
    if not out:
        raise ShapeError("a pure_callback returns at least one array")
    return list(out)


def run_callback(fn: Callable[..., Any], name: str, xs: Sequence[np.ndarray],
                 want: Sequence[TensorType]) -> tuple[np.ndarray, ...]:
    """``fn(*xs)`` as arrays of the types ``want``, or an error naming the callback ``name`` and
    what it returned against what was declared."""
    got = fn(*xs)
    outs = list(got) if isinstance(got, (tuple, list)) and len(want) > 1 else [got]
    if len(outs) != len(want):
        raise FlowjitTypeError(f"pure_callback {name}: the function returned {len(outs)} value(s), the call "
                               f"declared {len(want)} ({format_results(want)})")
    arrays = []
    for k, (o, t) in enumerate(zip(outs, want)):
        a = np.asarray(o)
        if a.shape != t.shape:
            raise FlowjitTypeError(f"pure_callback {name}: result {k} has shape {a.shape}, the call declared "
                                   f"{t}; return what result_shape_dtypes says")
        arrays.append(a.astype(t.dtype.np, copy=False))
    return tuple(arrays)


def _impl(*xs: np.ndarray, callback: str, results: str, vmap_method: str) -> tuple[np.ndarray, ...]:
    return run_callback(callback_of(callback), callback, xs, parse_results(results))


declare("pure_callback", kind="opaque", rule=_rule, impl=_impl, arity=None, dtypes=ALL_DTYPES,
        attrs={"callback": attr("str"), "results": attr("str"), "vmap_method": attr("str", "")},
        no_derivative="a host callback runs outside the program and has no derivative; give it one with "
                      "fj.custom_vjp (or fj.custom_jvp) around the call, as with jax.pure_callback",
        doc="pure_callback(x...) {callback, results, vmap_method}: a registered Python function on the "
            "inputs' values, returning arrays of the declared types (jax.pure_callback)")


def _sequential(fn: Callable[..., Any], batched: Sequence[bool], size: int, n_out: int) -> Callable[..., Any]:
    # One call per example: batched inputs sliced along axis 0, the results stacked.
    def per_example(*xs: np.ndarray) -> Any:
        rows = []
        for i in range(size):
            out = fn(*[x[i] if b else x for x, b in zip(xs, batched)])
            rows.append(list(out) if n_out > 1 else [out])
        stacked = [np.stack([np.asarray(r[k]) for r in rows]) for k in range(n_out)]
        return tuple(stacked) if n_out > 1 else stacked[0]
    per_example.__qualname__ = f"{getattr(fn, '__qualname__', 'callback')}.sequential"
    return per_example


def _batch(e: Any, xs: Sequence[Any], batched: Sequence[bool], *, callback: str, results: str,
           vmap_method: str) -> tuple[list, list]:
    if not vmap_method:
        where = f" at {e.builder.loc}" if e.builder.loc else ""
        raise BatchingError(f"pure_callback{where}: not supported under fj.vmap without vmap_method (inputs "
                            f"{', '.join(str(x.type) for x in xs)}, batched {list(batched)}); pass "
                            f"vmap_method='sequential', 'expand_dims' or 'broadcast_all' to fj.pure_callback")
    size = next(x.type.shape[0] for x, b in zip(xs, batched) if b)
    want = parse_results(results)
    out_types = [TensorType((size, *t.shape), t.dtype) for t in want]
    fn = callback_of(callback)
    ins = list(xs)
    if vmap_method == "sequential":
        fn = _sequential(fn, batched, size, len(want))
    else:
        for k, (x, b) in enumerate(zip(xs, batched)):
            if b:
                continue
            shape = (1, *x.type.shape)
            ins[k] = e.builder.op("reshape", x, shape=shape)
            if vmap_method == "broadcast_all":
                ins[k] = e.builder.op("broadcast_to", ins[k], shape=(size, *x.type.shape))
    key = register_callback(fn) if vmap_method == "sequential" else callback
    outs = e.builder.emit("pure_callback", ins, {"callback": key, "results": format_results(out_types),
                                                  "vmap_method": vmap_method})
    return list(outs), [True] * len(outs)


defbatch("pure_callback", _batch)
