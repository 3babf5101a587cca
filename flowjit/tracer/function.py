"""``@fj.function``: trace a Python function once per argument signature and run the result.

A signature is, per parameter, either its static value (``static_argnums`` /
``static_argnames``) or its pytree structure with each leaf's shape, dtype and weakness
(Python scalars are weak). The first call with a new signature traces the function into a
Function and prepares an Executable; later calls with that signature only run it.
Inside another trace, a decorated function is inlined into the caller's trace.

A decorated function may be called from several threads at once: a new signature is
traced and compiled by one of its callers while the others wait for it, and calls of
signatures already compiled take no lock.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
import re
import sys
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from flowjit import debug
from flowjit.ir.core import Block, Function
from flowjit.ir.dtypes import DType
from flowjit.ir.dtypes import dtype as as_dtype
from flowjit.ir.errors import FlowjitTypeError, TracerError
from flowjit.ir.types import TensorType
from flowjit.ir.verifier import verify
from flowjit.runtime import Executable, compile_function, lower
from flowjit.runtime.collection import collection_deferred
from flowjit.runtime.devices import check_device
from flowjit.runtime.executable import IR_STAGES
from flowjit.runtime.hooks import SLOW_PATH
from flowjit.tracer import pytree
from flowjit.tracer.core import Trace, Tracer, current_trace, to_array, trace_context, user_location

if TYPE_CHECKING:
    from flowjit.runtime.executable import LoopProgram


@dataclass(frozen=True)
class ShapeDtype:
    """An abstract argument (shape and dtype, no data), for ``.ir()`` and ``flowjit ir``."""

    shape: tuple[int | str, ...]   # a name (``"B"``) is a symbolic dimension, for fj.export
    dtype: DType

    def __init__(self, shape: Sequence[int | str], dtype: Any):
        object.__setattr__(self, "shape", tuple(d if isinstance(d, str) else int(d) for d in shape))
        object.__setattr__(self, "dtype", as_dtype(dtype))

    def __str__(self) -> str:
        if any(isinstance(d, str) for d in self.shape):
            return f"{self.dtype}[{','.join(map(str, self.shape))}]"
        return str(TensorType(self.shape, self.dtype))


@dataclass(frozen=True)
class LeafSpec:
    """The part of a leaf that selects a trace: shape, dtype, and whether it is a Python scalar."""

    shape: tuple[int, ...]
    dtype: DType
    weak: bool

    def __str__(self) -> str:
        t = str(TensorType(self.shape, self.dtype))
        return f"Python {'float' if self.dtype.is_float else 'int' if self.dtype.is_int else 'bool'} ({t})" \
            if self.weak else t


@dataclass
class _Entry:
    function: Function
    executable: Executable
    out_tree: pytree.TreeDef
    single: bool = False  # the output is one array (no tree to rebuild)
    variables: tuple = ()  # Variables read, passed after the arguments (``var`` args)
    assigned: tuple = ()   # Variables updated; their new values follow the outputs

    def run(self, leaves: Sequence[Any]) -> list[Any]:
        """Run on the argument leaves; rebind updated Variables; return the output leaves."""
        if debug.numerics_checked():
            args = [*leaves, *(v._value for v in self.variables)]
            outs = self.executable(args)
            debug.check_results(self.function, args, outs)  # before any Variable changes
        elif not self.variables:
            return self.executable(leaves)
        else:
            outs = self.executable([*leaves, *(v._value for v in self.variables)])
        n = len(outs) - len(self.assigned)
        for var, new in zip(self.assigned, outs[n:]):
            var._rebind(new)
        return outs[:n]


def _leaf_name(path: str) -> str:
    return re.sub(r"\['?([^'\]]*)'?\]", r".\1", path)


class TracedFunction:
    """A Python function traced and compiled per signature; call it like the original.

    ``trace_count`` counts traces; ``ir(*args, stage=...)`` returns the Function for the
    given arguments' signature (arrays or ``ShapeDtype``).
    """

    def __init__(self, fun: Callable[..., Any], static_argnums: Sequence[int] = (),
                 static_argnames: Sequence[str] = (), interpret: bool | None = None,
                 passes: Any = None, backend: str | None = None, fastmath: bool = False,
                 device: Any = None, soft_placement: bool = False, donate_argnums: Sequence[int] | int = (),
                 donate_argnames: Sequence[str] | str = ()):
        if not callable(fun):
            raise FlowjitTypeError(f"fj.function expects a callable, got {type(fun).__name__}")
        functools.update_wrapper(self, fun)
        self.fun = fun
        self.interpret = interpret
        self.passes = passes
        self.backend = backend
        self.fastmath = fastmath
        self.device = None if device is None else check_device(device).name
        self.soft_placement = bool(soft_placement)
        self.trace_count = 0
        self._cache: dict[tuple, _Entry] = {}
        # Calls with only positional NumPy arrays (no static arguments) skip signature
        # binding and pytree flattening: keyed by each array's shape and dtype.
        self._fast: dict[tuple, _Entry] = {}
        # Of those, single-result programs without Variables after their first call: the
        # compiled driver itself, so a call is the key, one lookup and the driver.
        self._direct: dict[tuple, Callable[..., Any]] = {}
        # Calls with positional pytrees of NumPy arrays (a model's parameter dict): keyed by
        # their structure and each array's shape and dtype (``pytree.arrays_key``), without the leaf
        # paths and names only a trace needs.
        self._tree_fast: dict[Any, _Entry] = {}
        self._last_key: tuple | None = None
        # A signature being traced (and prepared) on some thread: the other callers of that
        # signature wait for its Future; other signatures, traced or not, do not wait.
        self._tracing: dict[tuple, Future] = {}
        self._tracing_lock = threading.Lock()
        try:
            self._sig: inspect.Signature | None = inspect.signature(fun)
        except (TypeError, ValueError):
            self._sig = None
        self.static_names = frozenset(self._parameter_names("static", static_argnums, static_argnames))
        self.donated_names = frozenset(self._parameter_names("donate", donate_argnums, donate_argnames))
        both = self.static_names & self.donated_names
        if both:
            raise FlowjitTypeError(f"{self.__name__}: parameter {sorted(both)[0]!r} is both static and donated; "
                                   "a static argument is a Python value, not an array to overwrite: drop one")

    def _parameter_names(self, what: str, argnums: Sequence[int] | int, argnames: Sequence[str] | str) -> list[str]:
        """The parameter names ``argnums`` and ``argnames`` (``static_`` or ``donate_``) name,
        checked against the signature; without one (a builtin), positions as ``arg{i}``."""
        names = list(argnames if not isinstance(argnames, str) else [argnames])
        nums = [argnums] if isinstance(argnums, int) else list(argnums)
        if nums:
            if self._sig is None and what == "donate":
                return names + [f"arg{i}" for i in nums]
            params = list(self._sig.parameters.values()) if self._sig else []
            for i in nums:
                if not -len(params) <= i < len(params) or params[i].kind not in (
                        inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD):
                    raise FlowjitTypeError(f"{what}_argnums={i} does not name a positional parameter of "
                                           f"{self.__name__}{self._sig}")
                names.append(params[i].name)
        if self._sig is not None:
            for n in names:
                if n not in self._sig.parameters:
                    raise FlowjitTypeError(f"{what}_argnames: {self.__name__} has no parameter {n!r}")
        return names

    # ---- signature ------------------------------------------------------------------------
    def _bind(self, args: tuple, kwargs: dict) -> inspect.BoundArguments | None:
        if self._sig is None:
            return None
        try:
            return self._sig.bind(*args, **kwargs)
        except TypeError as e:
            raise TypeError(f"{self.__name__}: {e}") from None

    def _signature(self, args: tuple, kwargs: dict) -> tuple[tuple, list, inspect.BoundArguments | None, list]:
        """The cache key, the flat leaf arrays, the bound arguments and per-parameter structure."""
        bound = self._bind(args, kwargs)
        items = list(bound.arguments.items()) if bound is not None else \
            [(f"arg{i}", a) for i, a in enumerate(args)] + list(kwargs.items())
        key = []
        leaves: list[Any] = []
        structure = []
        for name, value in items:
            if name in self.static_names:
                try:
                    hash(value)
                except TypeError:
                    raise FlowjitTypeError(f"static argument {name!r} of {self.__name__} must be hashable, "
                                           f"got {type(value).__name__}") from None
                key.append((name, "static", value))
                structure.append((name, None, []))
                continue
            flat, tree = pytree.flatten_with_paths(value, name)
            specs = []
            names = []
            for path, leaf in flat:
                if isinstance(leaf, ShapeDtype):
                    arr, weak = leaf, False
                    spec = LeafSpec(leaf.shape, leaf.dtype, False)
                elif isinstance(leaf, Tracer):
                    raise TracerError(f"a traced value ({leaf.aval}) was passed to {self.__name__} as "
                                      f"{path!r} outside of its trace: it escaped the function that made it")
                else:
                    arr, weak = to_array(leaf, f"argument {path!r} of {self.__name__}")
                    spec = LeafSpec(arr.shape, as_dtype(arr.dtype), weak)
                specs.append(spec)
                names.append(_leaf_name(path))
                leaves.append(arr)
            key.append((name, tree, tuple(specs)))
            structure.append((name, tree, names))
        return tuple(key), leaves, bound, structure

    # ---- tracing ----------------------------------------------------------------------------
    def _trace(self, key: tuple, bound: inspect.BoundArguments | None, args: tuple, kwargs: dict,
               structure: list) -> _Entry:
        self.trace_count += 1
        trace = Trace(Block([]), name=self.__name__)
        with trace_context(trace):
            new_values: dict[str, Any] = {}
            for (name, tree, names), entry in zip(structure, key):
                if tree is None:
                    new_values[name] = entry[2]
                    continue
                tracers = [trace.new_arg(TensorType(s.shape, s.dtype), n, s.weak)
                           for s, n in zip(entry[2], names)]
                new_values[name] = pytree.unflatten(tree, tracers)
            if bound is not None:
                for name, v in new_values.items():
                    bound.arguments[name] = v
                out = self.fun(*bound.args, **bound.kwargs)
            else:
                pos = [new_values[f"arg{i}"] for i in range(len(args))]
                out = self.fun(*pos, **{k: new_values[k] for k in kwargs})
            out_leaves, out_tree = pytree.flatten_with_paths(out, "output")
            returns = []
            for path, leaf in out_leaves:
                if isinstance(leaf, Tracer):
                    if leaf.trace is not trace:
                        raise TracerError(f"{self.__name__} returned a traced value ({leaf.aval}) as "
                                          f"{path!r} from another trace")
                    returns.append(leaf.value)
                else:
                    arr, weak = to_array(leaf, f"{path!r} returned by {self.__name__}")
                    returns.append(trace.constant(arr, weak).value)
        # Variables: one explicit assign op per updated one, its result after the outputs.
        var_ids = {id(v) for v in trace.variables}
        assigned = [v for v in trace.variables if id(v) in trace.assigned]
        for var in assigned:
            (new,) = trace.builder.emit("assign", [trace.var_args[id(var)].value, trace.current[id(var)].value], {},
                                        loc=trace.assigned[id(var)])
            new.producer.device = trace.assigned_device.get(id(var))
            returns.append(new)
        trace.block.set_returns(returns)
        n_vars = len(var_ids)
        n_plain = len(trace.block.args) - n_vars
        donated = [name in self.donated_names for name, tree, names in structure if tree is not None
                   for _ in names]
        fn = Function(re.sub(r"[^A-Za-z0-9_]", "_", self.__name__) or "f", trace.block,
                      [False] * n_plain + [True] * n_vars,
                      [None] * n_plain + [getattr(v, "device", None) for v in trace.variables],
                      donated + [False] * n_vars)
        verify(fn)
        interpret = self.interpret if self.interpret is not None else os.environ.get("FLOWJIT_INTERPRET") == "1"
        executable = compile_function(fn, interpret=interpret, passes=self.passes, backend=self.backend,
                                      fastmath=self.fastmath, device=self.device, soft=self.soft_placement)
        return _Entry(fn, executable, out_tree, single=out_tree.kind == "leaf",
                      variables=tuple(trace.variables), assigned=tuple(assigned))

    def _lookup(self, args: tuple, kwargs: dict,
                held: contextlib.ExitStack | None = None) -> tuple[_Entry, list]:
        key, leaves, bound, structure = self._signature(args, kwargs)
        entry = self._cache.get(key)
        if entry is None:
            if held is not None:   # the collector held back from here to the end of ``held``
                held.enter_context(collection_deferred())
            entry = self._trace_once(key, bound, args, kwargs, structure)
        self._last_key = key
        return entry, leaves

    def _trace_once(self, key: tuple, bound: inspect.BoundArguments | None, args: tuple, kwargs: dict,
                    structure: list) -> _Entry:
        # One trace per signature however many threads call it cold at once: the first
        # traces, the others wait for its entry (or its error).
        with self._tracing_lock:
            entry = self._cache.get(key)
            if entry is not None:
                return entry
            pending = self._tracing.get(key)
            if pending is None:
                mine = self._tracing[key] = Future()
        if pending is not None:
            return pending.result()
        try:
            if self._last_key is not None and "retrace" in os.environ.get("FLOWJIT_LOG", "").split(","):
                self._log_retrace(self._last_key, key)
            entry = self._trace(key, bound, args, kwargs, structure)
        except BaseException as e:
            with self._tracing_lock:
                del self._tracing[key]
            mine.set_exception(e)
            raise
        with self._tracing_lock:
            self._cache[key] = entry
            del self._tracing[key]
        mine.set_result(entry)
        return entry

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        # The dispatch fast path: one array argument of a signature already run, while no
        # thread traces, numerics are not checked and no profiler records (runtime.hooks).
        if len(args) == 1 and not kwargs and not SLOW_PATH[0]:
            a = args[0]
            if type(a) is np.ndarray:
                direct = self._direct.get((a.shape, a.dtype))
                if direct is not None:
                    return direct(a)
        if current_trace() is not None:
            # Nested in another trace: record our ops in the caller's trace.
            return self.fun(*args, **kwargs)
        key = None if kwargs else _array_key(args)
        if key is not None and not debug.numerics_checked():
            direct = None if SLOW_PATH[0] else self._direct.get(key)  # a profile sees each call
            if direct is not None:
                return direct(*args)
            entry = self._fast.get(key)
            if entry is not None:
                outs = entry.executable.run(*args) if not entry.variables else entry.run(args)
                if entry.single and not entry.variables:
                    make = getattr(entry.executable, "direct_call", None)
                    direct = make() if make is not None else None
                    if direct is not None:
                        self._direct[key] = direct
                return outs[0] if entry.single else pytree.unflatten(entry.out_tree, outs)
        tree_key = None
        if key is None and not kwargs and not self.static_names:
            tree_leaves: list[np.ndarray] = []
            tree_key = pytree.arrays_key(args, tree_leaves)
            entry = self._tree_fast.get(tree_key) if tree_key is not None else None
            if entry is not None:
                return pytree.unflatten(entry.out_tree, entry.run(tree_leaves))
        # A first call traces, compiles and runs with the collector held back; the one
        # young collection it puts off runs as it ends (runtime.collection).
        with contextlib.ExitStack() as held:
            entry, leaves = self._lookup(args, kwargs, held)
            if key is not None and not self.static_names and len(leaves) == len(args):
                self._fast[key] = entry
            if tree_key is not None:
                self._tree_fast[tree_key] = entry
            if any(isinstance(x, ShapeDtype) for x in leaves):
                raise FlowjitTypeError(f"{self.__name__} was called with an abstract ShapeDtype argument; "
                                       "pass arrays to run it (ShapeDtype is for .ir())")
            outs = entry.run(leaves)
            return pytree.unflatten(entry.out_tree, outs)

    def ir(self, *args: Any, stage: str = "traced", **kwargs: Any) -> Function | LoopProgram:
        """The Function traced for these arguments (arrays or ShapeDtype), at ``stage``;
        at ``loops``, the fused program's kernels as loop IR (print it)."""
        if stage not in IR_STAGES:
            raise ValueError(f"unknown stage {stage!r}; available: {', '.join(IR_STAGES)}")
        entry, _ = self._lookup(args, kwargs)
        return lower(entry.function, stage, self.passes, device=self.device, soft=self.soft_placement)

    def kernels(self, *args: Any, **kwargs: Any) -> str:
        """The generated kernel and driver source for these arguments' signature (arrays or
        ``ShapeDtype``): what ``flowjit ir --stage kernels`` prints."""
        entry, _ = self._lookup(args, kwargs)
        return entry.executable.kernel_listing()

    def __repr__(self) -> str:
        return f"<fj.function {self.__name__}: {self.trace_count} trace(s)>"

    # ---- diagnostics ---------------------------------------------------------------------------
    def _log_retrace(self, old: tuple, new: tuple) -> None:
        reasons = describe_signature_change(old, new)
        where = ""
        code = getattr(self.fun, "__code__", None)
        if code is not None:
            where = f" ({os.path.basename(code.co_filename)}:{code.co_firstlineno})"
        loc = user_location()
        print(f"flowjit: retracing {self.__name__}{where} (trace #{self.trace_count + 1}, called at {loc}): "
              + "; ".join(reasons), file=sys.stderr)


def _array_key(args: tuple) -> tuple | None:
    """The fast-path cache key of positional arguments that are all NumPy arrays, else None."""
    if len(args) == 1:  # the common case, without the loop (this is on every call's path)
        a = args[0]
        return (a.shape, a.dtype) if type(a) is np.ndarray else None
    key = []
    for a in args:
        if type(a) is not np.ndarray:
            return None
        key.append(a.shape)
        key.append(a.dtype)
    return tuple(key)


def describe_signature_change(old: tuple, new: tuple) -> list[str]:
    """Human-readable differences between two signature keys, one line per changed argument."""
    reasons = []
    o = {e[0]: e for e in old}
    n = {e[0]: e for e in new}
    for name in list(dict.fromkeys([*o, *n])):
        a, b = o.get(name), n.get(name)
        if a == b:
            continue
        if a is None or b is None:
            reasons.append(f"argument {name!r} is {'now passed' if a is None else 'no longer passed'}")
        elif a[1] == "static" or b[1] == "static":
            reasons.append(f"static argument {name!r} changed: {a[2]!r} -> {b[2]!r}")
        elif a[1] != b[1]:
            reasons.append(f"argument {name!r} changed structure: {a[1]} -> {b[1]}")
        else:
            for i, (sa, sb) in enumerate(zip(a[2], b[2])):
                if sa != sb:
                    label = name if len(a[2]) == 1 else f"{name} leaf {i}"
                    reasons.append(f"argument {label!r} changed: {sa} -> {sb}")
    return reasons or ["new signature"]


def function(fun: Callable[..., Any] | None = None, *, static_argnums: Sequence[int] | int = (),
             static_argnames: Sequence[str] | str = (), interpret: bool | None = None,
             passes: Any = None, backend: str | None = None, fastmath: bool = False,
             device: Any = None, soft_placement: bool = False, donate_argnums: Sequence[int] | int = (),
             donate_argnames: Sequence[str] | str = ()) -> Any:
    """Trace ``fun`` per argument signature into IR and run it; usable as ``@fj.function`` or
    ``@fj.function(static_argnames=...)``. ``interpret=True`` (or ``FLOWJIT_INTERPRET=1``)
    runs the traced program on the NumPy reference interpreter, unoptimized; ``passes``
    switches passes off (``{"cse": False}``) or names the passes to run; the default
    ``backend="llvm"`` lowers fused kernels to loop IR and compiles the whole program to
    one native function through llvmlite (``flowjit.codegen_cpu``), ``"interpreter"`` (or
    ``FLOWJIT_BACKEND=interpreter``) runs the optimized program on NumPy; ``fastmath=True``
    compiles kernels with LLVM's fast-math flags (float arithmetic reassociated, nan and
    inf assumed absent: faster reductions, results that may differ in the last bits);
    ``device`` (``"cpu:1"``, ``"cuda:0"``) is where the arguments live and where ops not
    placed with ``fj.device`` run (default ``cpu:0``); ``soft_placement=True`` (as
    TensorFlow's ``tf.config.set_soft_device_placement``) runs an op whose ``fj.device``
    has no kernel for it (``cumsum`` on a GPU) on the cheapest device that can, and keeps a
    Variable whose device cannot run its updates where they can run, instead of raising
    PlacementError. ``donate_argnums``/``donate_argnames`` (as ``jax.jit``'s) donate those
    arguments' arrays (every leaf of a pytree): the compiled program may write a result
    over one (a training step's new parameters and optimizer state over the old) and return
    that array, so the caller must not read a donated argument after the call (a donated
    view is written through); an array it cannot overwrite (read-only, or sharing its memory
    with another argument) is left alone."""
    options = dict(donate_argnums=donate_argnums, donate_argnames=donate_argnames)
    if fun is None:
        return lambda f: TracedFunction(f, static_argnums, static_argnames, interpret, passes, backend, fastmath,
                                        device, soft_placement, **options)
    return TracedFunction(fun, static_argnums, static_argnames, interpret, passes, backend, fastmath, device,
                          soft_placement, **options)
