"""NumPy's own functions on traced arrays, through NumPy's two dispatch protocols
(``__array_ufunc__``, and NEP 18's ``__array_function__``) installed on Tracer."""

from __future__ import annotations

import builtins
import functools
import inspect
import sys
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from flowjit.ir.errors import FlowjitTypeError, TracerError
from flowjit.tracer.core import Tracer, user_location
from flowjit.tracer.numpy import (
    conversion,
    creation,
    indexing,
    layout,
    manipulation,
    matrices,
    products,
    ranges,
    reductions,
    setops,
    sorting_searching,
    ufuncs,
)
from flowjit.tracer.numpy.counterparts import NUMPY_COUNTERPARTS
from flowjit.tracer.numpy.layout import ndim, reshape, shape
from flowjit.tracer.numpy.reductions import all, any, max, min, prod, sum
from flowjit.tracer.numpy.ufuncs import round

# ---- NumPy's own functions on traced arrays -------------------------------------------------
# Inside a traced function ``np.tanh(x)``, ``np.sum(x, axis=1)``, ``np.maximum.reduce(x)`` or
# ``an_ndarray + x`` trace as the fj function of the same name, through NumPy's two dispatch
# protocols (``__array_ufunc__``, and NEP 18's ``__array_function__``), so code written for
# NumPy runs under fj.function unchanged wherever flowjit has the operation (torch.compile
# traces NumPy code too). Names are NumPy's; where fj's differs, or the op is an operator:
_NUMPY_NAMES = {
    "amax": max, "amin": min, "around": round, "positive": lambda x: x,
}
# ``ufunc.reduce``: the reduction each binary ufunc folds into.
_UFUNC_REDUCTIONS = {"add": sum, "multiply": prod, "maximum": max, "minimum": min,
                     "logical_and": all, "logical_or": any}
# fj's own functions by name (NumPy's names and the array API's), which NumPy's functions
# of the same names trace as.
_FJ_FUNCTIONS: dict[str, Any] = {name: getattr(module, name) for module in (
    conversion, creation, indexing, layout, manipulation, matrices, products, ranges, reductions, setops,
    sorting_searching, ufuncs) for name in module.__all__}


def _fj_counterpart(name: str) -> Any:
    """The fj function NumPy's function ``name`` traces as, or None."""
    fn = _NUMPY_NAMES.get(name) or NUMPY_COUNTERPARTS.get(name)
    if fn is None and not name.startswith("_"):
        fn = _FJ_FUNCTIONS.get(name)
        if not callable(fn):
            return None
    return fn


@functools.cache
def _parameters(fn: Any) -> tuple[frozenset[str], tuple[str, ...]] | None:
    """fn's parameter names and, in order, those that can be passed by position; None when
    it takes ``**kwargs`` or has no signature (the call itself then checks)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return None
    if builtins.any(p.kind == p.VAR_KEYWORD for p in params):
        return None
    return (frozenset(p.name for p in params),
            tuple(p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)))


def _call_as_numpy(fn: Any, label: str, args: Sequence[Any], kwargs: dict[str, Any], numpy_fn: Any = None) -> Any:
    """fn(*args, **kwargs), after checking that fn takes every keyword NumPy was given; a
    keyword named as in NumPy (``np.sum(a=x)``, ``np.reshape(x, shape=s)``) is renamed to
    fj's parameter at the same position."""
    ours = _parameters(fn) if kwargs else None
    if ours is not None:
        theirs = _parameters(numpy_fn) if numpy_fn is not None else None
        for k in [k for k in kwargs if k not in ours[0] and theirs is not None and k in theirs[1]]:
            i = theirs[1].index(k)
            # the same parameter under another name: NumPy has no parameter of fj's name
            if i < len(ours[1]) and ours[1][i] not in kwargs and ours[1][i] not in theirs[0]:
                kwargs[ours[1][i]] = kwargs.pop(k)
        unknown = [k for k in kwargs if k not in ours[0]]
        if unknown:
            names = ", ".join(f"{k}=" for k in unknown)
            why = " (traced arrays are immutable: out= has no meaning)" if "out" in unknown else ""
            raise FlowjitTypeError(
                f"{label}(..., {names}) on a traced array at {user_location()}: flowjit's {fn.__name__} "
                f"takes {', '.join(ours[1])}, not {names}{why}. Drop the keyword, or apply it outside "
                "the traced function")
    return fn(*args, **kwargs)


def _describe(values: Sequence[Any]) -> str:
    return ", ".join(str(v.aval) if isinstance(v, Tracer) else type(v).__name__ for v in values)


# Other libraries' ufuncs that flowjit has a function for, by name: (module, function),
# registered by the flowjit module that implements them (flowjit.scipy.special registers
# scipy.special's), so this layer imports neither.
FOREIGN_UFUNCS: dict[str, list[tuple[str, Callable[..., Any]]]] = {}


def register_ufuncs(module: str, functions: dict[str, Callable[..., Any]]) -> None:
    """Trace ``module``'s ufunc ``name`` applied to a traced array as ``functions[name]``
    (``scipy.special.expit(x)`` inside ``fj.function`` as ``fj.scipy.special.expit(x)``)."""
    for name, fn in functions.items():
        FOREIGN_UFUNCS.setdefault(name, []).append((module, fn))


def _foreign(ufunc: np.ufunc) -> tuple[str, Callable[..., Any] | None]:
    """The module of a ufunc that is not NumPy's, and flowjit's function for it if any."""
    for module, fn in FOREIGN_UFUNCS.get(ufunc.__name__, []):
        owner = sys.modules.get(module)
        if owner is not None and getattr(owner, ufunc.__name__, None) is ufunc:
            return module, fn
    for module in sorted({m for c in FOREIGN_UFUNCS.values() for m, _ in c}):
        if getattr(sys.modules.get(module), ufunc.__name__, None) is ufunc:
            return module, None
    return "another library", None


def _array_ufunc(self: Tracer, ufunc: np.ufunc, method: str, *inputs: Any, **kwargs: Any) -> Any:
    name = ufunc.__name__
    if getattr(np, name, None) is not ufunc:  # not NumPy's: scipy.special's, say
        module, fn = _foreign(ufunc)
        if fn is not None and method == "__call__" and kwargs.get("out") is None:
            return _call_as_numpy(fn, f"{module}.{name}", inputs, kwargs)
        known = sorted({m for c in FOREIGN_UFUNCS.values() for m, _ in c})
        raise FlowjitTypeError(
            f"{name} of {module} on a traced array ({_describe(inputs)}) at {user_location()}: flowjit traces "
            f"NumPy's ufuncs and those of {', '.join(known) or 'no other library'} it has functions for; write it "
            "with fj functions (fj.scipy.special for SciPy's), or apply it outside the traced function")
    if kwargs.get("out") is not None:
        raise FlowjitTypeError(
            f"np.{name}(..., out=...) with a traced array ({_describe(inputs)}) at {user_location()}: a "
            "traced value cannot be written into a NumPy array (an in-place operator such as `a += x` on "
            f"an ndarray `a` does this too). Write `a = a + x`, or np.{name}(...) without out=")
    fn = _fj_counterpart(name)
    if method == "__call__" and fn is not None:
        return _call_as_numpy(fn, f"np.{name}", inputs, kwargs)
    if method == "reduce" and name in _UFUNC_REDUCTIONS:
        kwargs.setdefault("axis", 0)  # NumPy's default for ufunc.reduce (np.sum's is None)
        return _call_as_numpy(_UFUNC_REDUCTIONS[name], f"np.{name}.reduce", inputs, kwargs)
    if method == "outer" and fn is not None and len(inputs) == 2 and not kwargs:
        a, b = inputs
        return fn(reshape(a, tuple(shape(a)) + (1,) * ndim(b)), b)
    what = f"np.{name}" if method == "__call__" else f"np.{name}.{method}"
    hint = ("flowjit has no such elementwise op" if fn is None
            else f"flowjit traces np.{name}(...), np.{name}.outer and, for add, multiply, maximum, minimum, "
                 "logical_and and logical_or, .reduce")
    raise FlowjitTypeError(f"{what} on a traced array ({_describe(inputs)}) at {user_location()}: {hint}. "
                           "Write it with fj functions (README: the fj.* names), or apply it outside the "
                           "traced function")


def _array_function(self: Tracer, func: Any, types: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> Any:
    name = func.__name__
    module = getattr(func, "__module__", None) or "numpy"
    label = "np" + module.removeprefix("numpy") + "." + name  # np.sum, np.linalg.norm
    key = name if module == "numpy" else module.removeprefix("numpy.") + "." + name  # linalg.inv, fft.fft
    fn = (_fj_counterpart(key) or (_fj_counterpart(name) if module == "numpy.linalg" else None)
          if module in ("numpy", "numpy.linalg", "numpy.fft") else None)
    if fn is not None:
        return _call_as_numpy(fn, label, args, dict(kwargs), numpy_fn=func)
    implementation = getattr(func, "_implementation", None)
    if implementation is None:  # not a NumPy function: its own dispatch decides
        return NotImplemented
    try:  # NumPy's own code: works where it only uses the methods and attributes we have
        return implementation(*args, **kwargs)
    except TracerError as e:
        raise FlowjitTypeError(
            f"{label} on a traced array at {user_location()}: flowjit has no counterpart, and NumPy's {label} "
            "needs the array's values, which are not known while tracing. Write it with fj functions "
            "(README: the fj.* names), or apply it outside the traced function") from e


Tracer.__array_ufunc__ = _array_ufunc  # type: ignore[assignment]
Tracer.__array_function__ = _array_function  # type: ignore[attr-defined]
