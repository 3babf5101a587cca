"""Tracing: ``Tracer`` values stand in for arrays while a Python function runs, and every
operation on them appends an op to the active ``Trace``'s block through the IR builder.

``bind`` is the single entry of every array operation: with a Tracer among its operands
it emits IR, otherwise it evaluates the primitive's NumPy reference at once (so the
``fj.*`` surface also works eagerly on plain arrays). Python scalars are weak (they take
the dtype of the array they meet); the weak flag lives on the Tracer, not in the IR,
whose ops always see explicit casts.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from flowjit.ir import registry
from flowjit.ir.builder import Builder
from flowjit.ir.core import Block, SourceLoc, Value
from flowjit.ir.dtypes import DType, promote_types
from flowjit.ir.dtypes import dtype as as_dtype
from flowjit.ir.errors import FlowjitTypeError, ShapeError, TracerError, set_locator
from flowjit.ir.registry import Literal
from flowjit.ir.types import TensorType
from flowjit.runtime import hooks
from flowjit.runtime.devices import check_device

# The package's own directory (this file is flowjit/tracer/core.py): frames inside it are not the user's.
_FLOWJIT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_NUMPY_DIR = os.path.dirname(np.__file__) + os.sep


def user_location(skip: int = 1, under: tuple[str, ...] = ()) -> SourceLoc | None:
    """The first stack frame outside the flowjit package: the user's line (or the line
    set by ``at_location``, for ops a graph front end emits on its user's behalf). With
    ``under``, only if a frame of one of those directories was on the way out."""
    loc = getattr(_state, "location", None)
    if loc is not None:
        return loc
    f = sys._getframe(skip)
    passed = not under
    while f is not None:
        filename = f.f_code.co_filename
        if filename.startswith(_FLOWJIT_DIR):
            passed = passed or filename.startswith(under)
        elif not filename.startswith(("<frozen", _NUMPY_DIR)):   # NumPy's own Python on the way (np.histogram2d)
            return SourceLoc(filename, f.f_lineno) if passed else None
        f = f.f_back
    return None


# The parts of flowjit a user calls into: an error made under one of them is about the
# user's program, and names the user's line (errors.set_locator).
_API_DIRS = tuple(os.path.join(_FLOWJIT_DIR, d) + os.sep for d in ("tracer", "nn", "optim", "scipy", "v1"))


def _error_location() -> SourceLoc | None:
    """The user's line for an error being made (the walk starts at the error's __init__,
    three frames up), if it arises under the tracer's API."""
    return user_location(3, under=_API_DIRS)


set_locator(_error_location)


class Trace:
    """One active tracing context: a block being built and the tracers that live in it."""

    def __init__(self, block: Block, name: str = "trace", parent: Trace | None = None):
        self.block = block
        self.builder = Builder(block, device=current_device())
        self.name = name
        self.active = True
        # A trace of a branch or loop body nested in ``parent``: values of enclosing traces
        # it reads become block arguments, the op's extra inputs (blocks are isolated).
        self.parent = parent
        self.captures: list[tuple[Tracer, Value]] = []
        self._captured: dict[int, Tracer] = {}
        self._const_cache: dict[int, tuple[Any, Tracer]] = {}
        # Variables read or written in this trace, in first-use order: each becomes a
        # ``var`` argument; ``current`` is the value a read sees (the last assignment).
        self.variables: list[Any] = []
        self.var_args: dict[int, Tracer] = {}
        self.current: dict[int, Tracer] = {}
        self.assigned: dict[int, Any] = {}
        self.assigned_device: dict[int, str | None] = {}  # the fj.device of each update

    def new_arg(self, type: TensorType, name: str, weak: bool = False) -> Tracer:
        v = Value(type, name=name)
        self.block.args.append(v)
        return Tracer(v, self, weak)

    def encloses(self, other: Trace) -> bool:
        """Whether ``other`` is this trace or one it is nested in."""
        t: Trace | None = self
        while t is not None and t is not other:
            t = t.parent
        return t is not None

    def capture(self, outer: Tracer) -> Tracer:
        """``outer``, a value of an enclosing trace, as an argument of this block."""
        if outer.trace is self:
            return outer
        key = id(outer.value)
        if key not in self._captured:
            if self.parent is None or not self.parent.encloses(outer.trace):
                raise TracerError(f"a traced value ({outer.aval}) of trace {outer.trace.name} was used inside "
                                  f"another trace ({self.name}) at {user_location()}")
            in_parent = self.parent.capture(outer)
            inner = Value(outer.aval, name=outer.value.name)
            self.block.args.append(inner)
            self.captures.append((in_parent, inner))
            self._captured[key] = Tracer(inner, self, outer.weak)
        return self._captured[key]

    def read_variable(self, var: Any) -> Tracer:
        """The value of Variable ``var`` in this trace (an argument marked ``var`` on first use)."""
        if self.parent is not None:
            return self.capture(self.parent.read_variable(var))
        key = id(var)
        if key not in self.var_args:
            self.variables.append(var)
            self.var_args[key] = self.new_arg(var.type, var.name)
            self.current[key] = self.var_args[key]
        return self.current[key]

    def write_variable(self, var: Any, value: Tracer) -> None:
        """Record ``var``'s new value; reads after this see it."""
        if self.parent is not None:
            raise TracerError(f"assigning Variable {var.name} inside a branch or loop body ({self.name}) at "
                              f"{user_location()} is not supported: return the new value and assign it after")
        self.read_variable(var)
        self.current[id(var)] = value
        self.assigned[id(var)] = user_location()
        self.assigned_device[id(var)] = self.builder.device

    def constant(self, array: np.ndarray, weak: bool = False) -> Tracer:
        """A constant op for ``array``, emitted once per distinct closed-over array object."""
        key = id(array)
        hit = self._const_cache.get(key)
        if hit is not None and hit[0] is array and hit[1].weak == weak:
            return hit[1]
        (v,) = self.builder.emit("constant", [], {"value": Literal(array)}, loc=user_location())
        t = Tracer(v, self, weak)
        if array.size > 1:  # scalars are cheap to re-emit; CSE merges them later
            self._const_cache[key] = (array, t)
        return t


_state = threading.local()


class at_location:
    """Attribute the ops emitted inside a ``with`` block to ``loc`` (a SourceLoc or None):
    the v1 front end evaluates a graph built earlier, whose user lines are the ones where
    each graph op was created, not the line of ``Session.run``."""

    def __init__(self, loc: SourceLoc | None):
        self.loc = loc

    def __enter__(self) -> None:
        self.saved = getattr(_state, "location", None)
        _state.location = self.loc

    def __exit__(self, *exc: object) -> None:
        _state.location = self.saved


def current_device() -> str | None:
    """The device named by the innermost ``fj.device`` block of this thread, or None."""
    return getattr(_state, "device", None)


class DevicePolicy(Protocol):
    """A rule for ``fj.device`` instead of a name (TensorFlow's device functions, such as
    ``replica_device_setter``): where each Variable created in the block lives, and where
    the ops traced in it go (``op_device``; None leaves them to placement)."""

    op_device: str | None

    def variable_device(self, name: str, shape: tuple[int, ...], dtype: Any) -> str:
        """The device of a new Variable ``name`` of ``shape`` and ``dtype``."""


class device:
    """``with fj.device("cpu:1"):`` places the ops traced inside the block on that device
    (``cpu:0``, ``cpu:N`` with ``FLOWJIT_CPU_DEVICES``, ``cuda:K``, a cluster task's
    ``/job:worker/task:1``), and Variables created inside it live there. The name is checked
    when the block is entered; whether the device can run each op is checked when the
    program is placed, naming the op. Given a ``DevicePolicy`` instead of a name, the
    policy says where each new Variable lives and where the ops go."""

    def __init__(self, name: Any):
        self.policy = name if hasattr(name, "variable_device") else None
        if self.policy is not None:
            op_device = self.policy.op_device
            self.name = None if op_device is None else check_device(op_device).name
        else:
            self.name = check_device(name).name

    def __enter__(self) -> str | None:
        self.saved = current_device()
        self.saved_policy = getattr(_state, "policy", None)
        _state.device = self.name
        _state.policy = self.policy
        trace = current_trace()
        self.trace, self.saved_builder_device = trace, (trace.builder.device if trace is not None else None)
        if trace is not None:
            trace.builder.device = self.name
        return self.name

    def __exit__(self, *exc: object) -> None:
        _state.device = self.saved
        _state.policy = self.saved_policy
        if self.trace is not None:
            self.trace.builder.device = self.saved_builder_device


def variable_device(name: str, shape: tuple[int, ...], dtype: Any) -> str | None:
    """Where a Variable created now lives: the innermost ``fj.device`` block's policy's
    choice, else its device (None: the default device of the programs using it)."""
    policy = getattr(_state, "policy", None)
    if policy is None:
        return current_device()
    return check_device(policy.variable_device(name, shape, dtype)).name


def current_trace() -> Trace | None:
    """The innermost active trace of this thread, or None when running eagerly."""
    stack = getattr(_state, "stack", None)
    return stack[-1] if stack else None




class trace_context:
    """Make ``trace`` the current trace for the duration of a ``with`` block."""

    def __init__(self, trace: Trace):
        self.trace = trace

    def __enter__(self) -> Trace:
        if not hasattr(_state, "stack"):
            _state.stack = []
        hooks.add_reason("tracing", 1)  # a trace in any thread: calls take the slow path
        _state.stack.append(self.trace)
        return self.trace

    def __exit__(self, *exc: object) -> None:
        _state.stack.pop()
        hooks.add_reason("tracing", -1)
        self.trace.active = False


class Tracer:
    """A traced array: an IR Value in a Trace, with a NumPy-like surface (see ``flowjit.tracer.numpy``)."""

    __slots__ = ("value", "trace", "weak")
    __array_priority__ = 1000
    # __array_ufunc__ and __array_function__ (NumPy's functions on traced arrays) are set by
    # flowjit.tracer.numpy.protocols, with the fj functions they trace as.

    def __init__(self, value: Value, trace: Trace, weak: bool = False):
        self.value = value
        self.trace = trace
        self.weak = weak

    @property
    def aval(self) -> TensorType:
        return self.value.type

    @property
    def shape(self) -> tuple[int, ...]:
        return self.value.type.shape

    @property
    def dtype(self) -> DType:
        return self.value.type.dtype

    @property
    def ndim(self) -> int:
        return len(self.value.type.shape)

    @property
    def size(self) -> int:
        return self.value.type.size

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d traced array")
        return self.shape[0]

    def __iter__(self):
        if not self.shape:
            raise TypeError("iteration over a 0-d traced array")
        return (self[i] for i in range(self.shape[0]))

    def _concrete_error(self, what: str) -> TracerError:
        loc = user_location()
        return TracerError(
            f"{what} of a traced value ({self.aval}) at {loc}: its value is not known while "
            "tracing. Use fj.where(cond, a, b) to choose elementwise, fj.cond(pred, true_fn, "
            "false_fn) for a branch, or mark the argument static with "
            "fj.function(static_argnames=...)")

    def __bool__(self) -> bool:
        raise self._concrete_error("Python control flow (bool())")

    def __int__(self) -> int:
        raise self._concrete_error("int()")

    def __float__(self) -> float:
        raise self._concrete_error("float()")

    def __index__(self) -> int:
        raise self._concrete_error("use as a Python index (__index__)")

    def __array__(self, *args: object, **kwargs: object) -> np.ndarray:
        raise self._concrete_error("conversion to a NumPy array")

    def __hash__(self) -> int:
        raise TypeError("a traced array is not hashable")

    def __setitem__(self, idx: object, value: object) -> None:
        raise TypeError("traced arrays are immutable: build a new array with x.at[key].set(value) "
                        "(or .add, .multiply...), or fj.where(mask, new, x)")

    def __repr__(self) -> str:
        return f"Tracer<{self.aval}{' weak' if self.weak else ''}>"


# ---- operands ----------------------------------------------------------------------

class Operand:
    """An argument of ``bind`` after conversion: a Tracer or a concrete array, and weakness."""

    __slots__ = ("tracer", "array", "weak")

    def __init__(self, tracer: Tracer | None, array: np.ndarray | None, weak: bool):
        self.tracer = tracer
        self.array = array
        self.weak = weak

    @property
    def aval(self) -> TensorType:
        if self.tracer is not None:
            return self.tracer.aval
        assert self.array is not None
        return TensorType(self.array.shape, as_dtype(self.array.dtype))

    @property
    def dtype(self) -> DType:
        return self.aval.dtype

    @property
    def shape(self) -> tuple[int, ...]:
        return self.aval.shape


def to_array(x: Any, name: str = "argument") -> tuple[np.ndarray, bool]:
    """A concrete value as a NumPy array of a supported dtype, and whether it is weak.

    Python scalars are weak; lists must be rectangular; str, object arrays and
    unsupported dtypes raise FlowjitTypeError naming ``name``.
    """
    if type(x) is bool:
        return np.asarray(x, dtype=np.bool_), True
    if type(x) is int:
        if not -2**63 <= x < 2**63:
            raise FlowjitTypeError(f"{name}: Python int {x} does not fit in int64")
        return np.asarray(x, dtype=np.int64), True
    if type(x) is float:
        return np.asarray(x, dtype=np.float64), True
    if type(x) is complex:
        return np.asarray(x, dtype=np.complex128), True
    if isinstance(x, (str, bytes)):
        raise FlowjitTypeError(f"{name} is a {type(x).__name__} ({x!r:.40}), where an array or number "
                               "is expected; pass it as a static argument (static_argnames=...) if it "
                               "configures the function")
    if isinstance(x, (list, tuple)):
        try:
            arr = np.asarray(x)
        except ValueError:
            raise FlowjitTypeError(f"{name} is a ragged nested sequence; every row must have the "
                                   "same length (pad it, or pass a list of arrays as a pytree)") from None
    elif isinstance(x, (np.ndarray, np.generic)) or hasattr(x, "__array__"):
        arr = np.asarray(x)
    elif hasattr(x, "__dlpack__"):
        arr = host_array_from_dlpack(x, name)
    else:
        raise FlowjitTypeError(f"{name} has type {type(x).__name__}, which is not an array, number "
                               "or pytree of them")
    if arr.dtype == object:
        raise FlowjitTypeError(f"{name} is an object array (dtype=object), which flowjit cannot trace; "
                               "convert it to a numeric dtype")
    try:
        as_dtype(arr.dtype)
    except FlowjitTypeError as e:
        raise FlowjitTypeError(f"{name}: {e}") from None
    return arr, False


def host_array_from_dlpack(x: Any, name: str = "argument", copy: bool | None = None) -> np.ndarray:
    """A DLPack producer's host memory as a NumPy array, shared (``copy=None``/False) or
    copied (True); memory on another device raises FlowjitTypeError naming ``name``."""
    try:
        # copy= only when asked: NumPy before 2.1 has no such keyword
        return np.from_dlpack(x) if copy is None else np.from_dlpack(x, copy=copy)
    except (BufferError, TypeError, ValueError, RuntimeError) as e:
        where = x.__dlpack_device__() if hasattr(x, "__dlpack_device__") else "?"
        raise FlowjitTypeError(f"{name} ({type(x).__name__}, DLPack device {where}) cannot be read as a "
                               f"host array through DLPack: {e}. flowjit reads arguments from host memory: "
                               "move it to the CPU first (tensor.cpu(), jax.device_get, cupy.asnumpy)") from None


def _contains_tracer(x: Any) -> bool:
    if isinstance(x, Tracer):
        return True
    return isinstance(x, (list, tuple)) and any(_contains_tracer(e) for e in x)


def _stack_sequence(x: Sequence[Any], name: str) -> Operand:
    """A (nested) list holding tracers, stacked into one traced array as NumPy would."""
    items = [operand(e, name) for e in x]
    shapes = {o.shape for o in items}
    if len(shapes) != 1:
        raise FlowjitTypeError(f"{name} is a ragged nested sequence (element shapes "
                               f"{sorted(map(list, shapes))}); every row must have the same length")
    d = promote_types([o.dtype for o in items], [o.weak for o in items])
    parts = []
    for o in items:
        v = o if o.dtype == d else operand(bind("cast", [o], {"dtype": d}))
        parts.append(bind("expand_dims", [v], {"axes": (0,)}))
    out = bind("concatenate", parts, {"axis": 0}, weak=all(o.weak for o in items))
    return Operand(out, None, out.weak)


def operand(x: Any, name: str = "argument") -> Operand:
    """Convert anything ``bind`` accepts into an Operand."""
    read = getattr(type(x), "__flowjit_value__", None)
    if read is not None:  # a Variable: its current value (a Tracer inside a trace)
        x = read(x)
    if isinstance(x, Tracer):
        return Operand(x, None, x.weak)
    if isinstance(x, (list, tuple)) and x and _contains_tracer(x):
        return _stack_sequence(x, name)
    arr, weak = to_array(x, name)
    return Operand(None, arr, weak)


def materialize(op: Operand, trace: Trace) -> Value:
    if op.tracer is not None:
        t = op.tracer
        if not t.trace.active:
            raise TracerError(
                f"a traced value ({t.aval}) from a finished trace ({t.trace.name}) was used at "
                f"{user_location()}: it escaped its function, e.g. through a global or a "
                "closure. Return it from the function instead")
        if t.trace is not trace:
            return trace.capture(t).value  # a closure of a branch or loop body; else an error
        return t.value
    assert op.array is not None
    return trace.constant(op.array, op.weak).value


def bind(prim: str, args: Sequence[Any], attrs: dict[str, Any] | None = None,
         weak: bool = False) -> Any:
    """Apply primitive ``prim`` to ``args``: emit IR when tracing, else compute with NumPy.

    ``weak`` marks the result as a weak-typed scalar (set when every input was weak).
    Returns a Tracer or ndarray (a tuple of them for multi-result primitives).
    """
    ops = [a if isinstance(a, Operand) else operand(a) for a in args]
    tracers = [o.tracer for o in ops if o.tracer is not None]
    # Inside a trace every operation is recorded, even on constants (constant folding
    # cleans up later); with no trace active it runs at once on NumPy.
    if not tracers and current_trace() is None:
        p = registry.get(prim)
        try:
            canon = p.normalize_attrs(attrs or {})
            p.infer([o.aval for o in ops], canon)
        except ShapeError as e:
            raise e.with_location(prim, user_location()) from None
        out = p.impl(*[o.array for o in ops], **canon)
        if isinstance(out, (tuple, list)):
            return tuple(np.asarray(x) for x in out)
        return np.asarray(out)
    # An escaped tracer (its trace finished) is reported by materialize.
    trace = current_trace() or tracers[0].trace
    values = [materialize(o, trace) for o in ops]
    results = trace.builder.emit(prim, values, attrs or {}, loc=user_location())
    outs = [Tracer(v, trace, weak) for v in results]
    return outs[0] if len(outs) == 1 else tuple(outs)
