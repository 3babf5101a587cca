"""The v1 dataflow graph: ``Graph``, ``Operation`` and ``Tensor``, built first and run later.

A program written against ``flowjit.v1`` builds a graph of Operations (each with a
unique name, inputs, control inputs, a device string and a ``compute`` function) whose
outputs are Tensors with a static shape (``None`` where unknown) and a dtype. Nothing
runs while the graph is built: ``Session.run`` later evaluates the part its fetches need
by calling each op's ``compute`` on traced values inside one ``fj.function``, so a v1
program goes through the same IR, passes and compiled kernels as ``@fj.function``.

``compute(ev, op, inputs)`` receives the evaluator (for ops that need more than their
inputs: variables, feeds, random keys, gradients, nested graphs), the op, and the values
of its inputs; it returns one value per output. Host ops (queues, ``py_func``) are the
exception: they run in Python between compiled segments, on NumPy arrays.

Static shapes are inferred when an op is created, by tracing its ``compute`` once on
abstract inputs: unknown dimensions stand in as a probe size that maps back to ``None``.
An op whose inputs are fully known and whose shapes do not fit raises the flowjit
ShapeError at once, naming the op and the user's line, as TensorFlow does at graph
construction; with unknown dimensions the check waits for the fed shapes.
"""

from __future__ import annotations

import contextlib
import re
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from flowjit.ir.core import Block
from flowjit.ir.dtypes import DType
from flowjit.ir.dtypes import dtype as as_dtype
from flowjit.ir.errors import FlowjitError, FlowjitTypeError
from flowjit.ir.types import TensorType
from flowjit.tracer.core import Trace, Tracer, trace_context, user_location
from flowjit.tracer.numpy import namespace as fnp
from flowjit.v1.default_session import get_default_session_or_raise
from flowjit.v1.device_spec import merge_device, normalize_device

# An unknown dimension is traced as this size; a result dimension of this size is unknown.
# Prime and unusual, so it neither collides with real sizes nor divides them.
_PROBE = 7919

Shape = tuple[int | None, ...] | None  # None: the rank is unknown too
Compute = Callable[["Any", "Operation", list[Any]], Sequence[Any]]


class GraphKeys:
    """The standard names of graph collections (``tf.GraphKeys``)."""

    GLOBAL_VARIABLES = "variables"
    VARIABLES = "variables"
    TRAINABLE_VARIABLES = "trainable_variables"
    LOCAL_VARIABLES = "local_variables"
    QUEUE_RUNNERS = "queue_runners"
    UPDATE_OPS = "update_ops"
    LOSSES = "losses"
    REGULARIZATION_LOSSES = "regularization_losses"
    SUMMARIES = "summaries"
    GLOBAL_STEP = "global_step"
    MOVING_AVERAGE_VARIABLES = "moving_average_variables"
    METRIC_VARIABLES = "metric_variables"
    INIT_OP = "init_op"
    SAVERS = "savers"


def shape_from(shape: Any) -> Shape:
    """A static shape from a list/tuple with ``None`` or -1 for unknown dimensions, or None."""
    if shape is None:
        return None
    if isinstance(shape, TensorShape):
        return shape.dims
    if isinstance(shape, (int, np.integer)):
        return (int(shape),)
    return tuple(None if d is None or (isinstance(d, (int, np.integer)) and d < 0) else int(d) for d in shape)


def shape_str(shape: Shape) -> str:
    if shape is None:
        return "<unknown>"
    return "(" + ", ".join("?" if d is None else str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


def compatible(static: Shape, actual: Sequence[int]) -> bool:
    """Whether a concrete shape fits a static one (``None`` matches anything)."""
    if static is None:
        return True
    return len(static) == len(actual) and all(s is None or s == a for s, a in zip(static, actual))


class TensorShape:
    """A static shape as TensorFlow prints and compares it: ``tensor.shape``."""

    def __init__(self, dims: Shape):
        self.dims = dims

    @property
    def ndims(self) -> int | None:
        return None if self.dims is None else len(self.dims)

    rank = ndims

    def as_list(self) -> list[int | None]:
        if self.dims is None:
            raise ValueError("as_list() is not defined on an unknown TensorShape")
        return list(self.dims)

    def is_fully_defined(self) -> bool:
        return self.dims is not None and all(d is not None for d in self.dims)

    def num_elements(self) -> int | None:
        return int(np.prod(self.dims)) if self.is_fully_defined() else None

    def __iter__(self) -> Iterator[int | None]:
        return iter(self.as_list())

    def __len__(self) -> int:
        return len(self.as_list())

    def __getitem__(self, i: Any) -> Any:
        return self.as_list()[i]

    def __eq__(self, other: Any) -> bool:
        if isinstance(other, TensorShape):
            return self.dims == other.dims
        if isinstance(other, (list, tuple)):
            return self.dims is not None and list(self.dims) == list(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.dims)

    def __repr__(self) -> str:
        return f"TensorShape({None if self.dims is None else list(self.dims)})"

    def __str__(self) -> str:
        return shape_str(self.dims)


class Tensor:
    """One output of an Operation: ``<op name>:<index>``, with a static shape and dtype.
    Its operators, indexing and iteration build ops: ``flowjit.v1.ops`` installs them."""

    __array_priority__ = 100  # NumPy defers to our operators

    def __init__(self, op: Operation, index: int, shape: Shape, dtype: DType):
        self.op = op
        self.value_index = index
        self._shape = shape
        self.dtype = dtype

    @property
    def name(self) -> str:
        return f"{self.op.name}:{self.value_index}"

    @property
    def graph(self) -> Graph:
        return self.op.graph

    @property
    def device(self) -> str:
        return self.op.device

    @property
    def shape(self) -> TensorShape:
        return TensorShape(self._shape)

    def get_shape(self) -> TensorShape:
        return self.shape

    @property
    def type(self) -> str:
        return f"{self.dtype}{shape_str(self._shape)}"

    def consumers(self) -> list[Operation]:
        return [op for op in self.graph.get_operations() if self in op.inputs]

    def eval(self, feed_dict: dict | None = None, session: Any = None) -> np.ndarray:
        """This tensor's value in ``session`` (default: the default session)."""
        return (session or get_default_session_or_raise(f"Tensor {self.name}.eval()")).run(self, feed_dict)

    def __repr__(self) -> str:
        return f"<tf.Tensor '{self.name}' shape={self.shape} dtype={self.dtype}>"

    def __hash__(self) -> int:
        return id(self)

    # Python control flow on a graph tensor is a mistake TensorFlow 1.x also rejects.
    def __bool__(self) -> bool:
        raise FlowjitTypeError(f"using a graph tensor ({self.name}) as a Python bool is not allowed: its value "
                               "exists only when a Session runs it; use tf.cond or tf.where")

    def __len__(self) -> int:
        if self._shape is None or not self._shape or self._shape[0] is None:
            raise FlowjitTypeError(f"len() of {self.name} of shape {shape_str(self._shape)} is not known")
        return self._shape[0]


class Operation:
    """A node of the graph. ``run()`` runs it in the default session; ``outputs`` are its Tensors."""

    def __init__(self, graph: Graph, type: str, name: str, inputs: Sequence[Tensor], compute: Compute,
                 attrs: dict[str, Any], control_inputs: Sequence[Operation], device: str, host: bool):
        self.graph = graph
        self.type = type
        self.name = name
        self.inputs = list(inputs)
        self.compute = compute
        self.attrs = attrs
        self.control_inputs = list(control_inputs)
        self.device = device
        self.host = host  # runs in Python between compiled segments (queues, py_func)
        self.outputs: list[Tensor] = []
        self.location = user_location()
        self.id = len(graph._ops)
        self.frame: Any = None  # the cond branch or loop body this op was built in
        # The gradient function name ``Graph.gradient_override_map`` gave this op (TF's
        # ``_gradient_op_type`` attr); kept apart from ``attrs``, which ops pass to ``compute``.
        self.gradient_override: str | None = graph._gradient_override_map.get(type)
        self.gradient_wrapped = False  # tf.gradients gave ``compute`` its registered gradient
        # Inputs its user gradient gives None: tf.gradients does not reach an x through them.
        self.gradient_free_inputs: frozenset[int] = frozenset()
        # A host op with a registered gradient, inside a gradient's compiled forward: its
        # results (computed on the host) under the custom_vjp of that gradient.
        self.traced_compute: Compute | None = None

    def get_attr(self, name: str) -> Any:
        """An attr as TensorFlow names it: ``T`` (the element type, which gradient functions
        read), ``_gradient_op_type`` (from ``gradient_override_map``, bytes), or one of the
        op's own; a missing one is a ValueError, as in TensorFlow."""
        if name == "_gradient_op_type" and self.gradient_override is not None:
            return self.gradient_override.encode()
        if name == "T" and "T" not in self.attrs and (self.inputs or self.outputs):
            return (self.inputs or self.outputs)[0].dtype
        if name not in self.attrs:
            raise ValueError(f"Operation {self.name!r} ({self.type}) has no attr named {name!r}; it has "
                             f"{sorted(self.attrs) or 'none'}")
        return self.attrs[name]

    def run(self, feed_dict: dict | None = None, session: Any = None) -> None:
        """Run this op (and what it needs) in ``session`` (default: the default session)."""
        (session or get_default_session_or_raise(f"Operation {self.name}.run()")).run(self, feed_dict)

    def where(self) -> str:
        return f"{self.type} op {self.name!r}" + (f" (created at {self.location})" if self.location else "")

    def __repr__(self) -> str:
        return f"<tf.Operation '{self.name}' type={self.type}>"

    def __hash__(self) -> int:
        return id(self)


class Graph:
    """A dataflow graph under construction; ``with g.as_default():`` builds into it."""

    def __init__(self) -> None:
        self._ops: list[Operation] = []
        self._by_name: dict[str, Operation] = {}
        self._names: dict[str, int] = {}
        self._collections: dict[str, list[Any]] = {}
        self._scope: list[str] = []
        self._control: list[list[Operation]] = []
        self._device: list[Any] = []  # names, device functions, None (see device())
        self._lock = threading.Lock()
        # The thread adding an op and that op (None: none), so that an op added from inside
        # another's shape inference is refused: the lock is not reentrant.
        self._adding: tuple[int, Operation] | None = None
        self.seed: int | None = None
        self.variables_by_name: dict[str, Any] = {}
        self.finalized = False
        # The nested-graph frames (cond branches, loop bodies) being built, innermost last.
        self.frames: list[Any] = []
        self._gradient_override_map: dict[str, str] = {}

    # ---- defaults --------------------------------------------------------------------------
    @contextlib.contextmanager
    def as_default(self) -> Iterator[Graph]:
        _stack().append(self)
        try:
            yield self
        finally:
            _stack().pop()

    # ---- names -------------------------------------------------------------------------------
    def unique_name(self, name: str, mark_as_used: bool = True) -> str:
        """``name`` under the current name scope, with ``_1``, ``_2``... if already taken."""
        full = "/".join([*self._scope, name]) if self._scope else name
        full = re.sub(r"[^A-Za-z0-9_.\-/]", "_", full)
        count = self._names.get(full, 0)
        unique = full if count == 0 else f"{full}_{count}"
        while unique in self._names and count:
            count += 1
            unique = f"{full}_{count}"
        if mark_as_used:
            self._names[full] = count + 1
            self._names.setdefault(unique, 1)
        return unique

    @contextlib.contextmanager
    def name_scope(self, name: str | None) -> Iterator[str]:
        """Prefix the names of ops created inside with ``name/`` (made unique)."""
        if name is None or name == "":
            saved = self._scope
            self._scope = []
            try:
                yield ""
            finally:
                self._scope = saved
            return
        if name.endswith("/"):  # an existing scope, re-entered as is
            scope = name.rstrip("/")
        else:
            scope = self.unique_name(name)
        saved = self._scope
        self._scope = scope.split("/")
        try:
            yield scope + "/"
        finally:
            self._scope = saved

    def current_scope(self) -> str:
        return "/".join(self._scope)

    # ---- devices and control dependencies ------------------------------------------------------
    @contextlib.contextmanager
    def device(self, device_name_or_function: str | Callable[[Operation], Any] | None) -> Iterator[None]:
        """Ops created inside get this device: a name (merged with the enclosing blocks',
        its own fields winning), a function of the new op returning its device name
        (``tf.train.replica_device_setter``), or None (the enclosing blocks are ignored)."""
        entry = device_name_or_function
        if entry is not None and not callable(entry):
            entry = normalize_device(str(entry))
        self._device.append(entry)
        try:
            yield
        finally:
            self._device.pop()

    def _apply_device_functions(self, op: Operation) -> str:
        # As TensorFlow: the innermost block first; a name fills only the fields still unset,
        # a function sees the device chosen so far (op.device) and returns the op's device.
        for entry in reversed(self._device):
            if entry is None:
                break
            if callable(entry):
                op.device = normalize_device(str(entry(op) or ""))
            else:
                op.device = merge_device(entry, op.device)
        return op.device

    @contextlib.contextmanager
    def control_dependencies(self, control_inputs: Sequence[Any] | None) -> Iterator[None]:
        """Ops created inside run only after ``control_inputs`` (ops or tensors); ``None`` clears."""
        if control_inputs is None:
            saved = self._control
            self._control = []
            try:
                yield
            finally:
                self._control = saved
            return
        ops = []
        for c in control_inputs:
            op = c.op if isinstance(c, Tensor) else c
            if not isinstance(op, Operation):
                raise FlowjitTypeError(f"control_dependencies takes ops or tensors, got {type(c).__name__}")
            self._check_mine(op, "a control input")
            ops.append(op)
        self._control.append(ops)
        try:
            yield
        finally:
            self._control.pop()

    @contextlib.contextmanager
    def gradient_override_map(self, op_type_map: dict[str, str]) -> Iterator[None]:
        """Ops of a type in ``op_type_map`` created inside take their gradient from the
        function ``tf.RegisterGradient`` registered under the mapped name (looked up when
        ``tf.gradients`` differentiates them), as in TensorFlow; nested blocks restore the
        outer mapping on exit."""
        if not isinstance(op_type_map, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in op_type_map.items()):
            raise TypeError(f"gradient_override_map takes a dictionary mapping op types to gradient names "
                            f"(strings to strings), got {op_type_map!r}")
        saved = dict(self._gradient_override_map)
        self._gradient_override_map.update(op_type_map)
        try:
            yield
        finally:
            self._gradient_override_map = saved

    def current_control_inputs(self) -> list[Operation]:
        return [op for group in self._control for op in group]

    # ---- ops ---------------------------------------------------------------------------------------
    def create_op(self, type: str, inputs: Sequence[Tensor], compute: Compute, *, name: str | None = None,
                  attrs: dict[str, Any] | None = None, outputs: Sequence[tuple[Shape, Any]] | None = None,
                  host: bool = False, control_inputs: Sequence[Operation] = (),
                  exact_name: bool = False) -> Operation:
        """Add an op. ``outputs`` gives each output's (shape, dtype); without it they are
        inferred by tracing ``compute`` on the inputs' static types (see the module doc).
        ``exact_name``: ``name`` is already a unique full name (a name scope's own name)."""
        if self.finalized:
            raise RuntimeError(f"Graph is finalized and cannot be modified (adding a {type} op)")
        for t in inputs:
            if not isinstance(t, Tensor):
                raise FlowjitTypeError(f"{type}: inputs must be Tensors, got {t!r}")
            self._check_mine(t.op, f"an input of {type}")
        adding = self._adding
        if adding is not None and adding[0] == threading.get_ident():
            raise RuntimeError(
                f"a {type} op was added to the graph while {adding[1].where()} computed its output "
                f"types: an op's compute works on traced values and must use flowjit's functions "
                f"(fj.*) rather than tf ops, which add ops to the graph")
        with self._lock:
            full = name if exact_name and name else self.unique_name(name or type)
            op = Operation(self, type, full, inputs, compute, dict(attrs or {}),
                           [*self.current_control_inputs(), *control_inputs], "", host)
            self._adding = (threading.get_ident(), op)
            try:
                specs = list(outputs) if outputs is not None else infer_outputs(op)
            finally:
                self._adding = None
            op.outputs = [Tensor(op, i, shape_from(s), as_dtype(d)) for i, (s, d) in enumerate(specs)]
            self._apply_device_functions(op)
            self._ops.append(op)
            self._by_name[op.name] = op
            op.frame = self.frames[-1] if self.frames else None
            if op.frame is not None:
                op.frame.ops.append(op)
        return op

    def _check_mine(self, op: Operation, what: str) -> None:
        if op.graph is not self:
            raise ValueError(f"{what} ({op.name}) belongs to another graph than the one being built; "
                             "build everything a program uses in one tf.Graph")

    def get_operations(self) -> list[Operation]:
        return list(self._ops)

    def get_operation_by_name(self, name: str) -> Operation:
        if name not in self._by_name:
            raise KeyError(f"the graph has no operation named {name!r}")
        return self._by_name[name]

    def get_tensor_by_name(self, name: str) -> Tensor:
        op_name, _, index = name.rpartition(":")
        if not op_name or not index.isdigit():
            raise ValueError(f"a tensor name is '<op name>:<output index>', got {name!r}")
        op = self.get_operation_by_name(op_name)
        if int(index) >= len(op.outputs):
            raise KeyError(f"operation {op_name!r} has {len(op.outputs)} output(s), no {name!r}")
        return op.outputs[int(index)]

    def as_graph_element(self, obj: Any) -> Tensor | Operation:
        """A fetch or feed key as a Tensor or Operation of this graph (names are looked up)."""
        if isinstance(obj, str):
            return self.get_tensor_by_name(obj) if ":" in obj else self.get_operation_by_name(obj)
        if hasattr(obj, "_as_graph_element"):
            obj = obj._as_graph_element()
        if isinstance(obj, (Tensor, Operation)):
            if obj.graph is not self:
                raise ValueError(f"{obj.name} is not an element of this graph: it was built in another tf.Graph "
                                 "(fetch and feed only tensors of the session's graph)")
            return obj
        raise FlowjitTypeError(f"cannot interpret a {type(obj).__name__} as a tensor or operation of the graph")

    # ---- collections -----------------------------------------------------------------------------
    def add_to_collection(self, name: str, value: Any) -> None:
        self._collections.setdefault(name, []).append(value)

    def get_collection(self, name: str, scope: str | None = None) -> list[Any]:
        items = list(self._collections.get(name, []))
        if scope is None:
            return items
        return [x for x in items if re.match(scope, getattr(x, "name", ""))]

    def get_collection_ref(self, name: str) -> list[Any]:
        return self._collections.setdefault(name, [])

    def finalize(self) -> None:
        self.finalized = True


# TensorFlow's graph-level seed when only an op seed is given (random_seed.DEFAULT_GRAPH_SEED).
DEFAULT_GRAPH_SEED = 87654321


def op_seed(op: Operation, seed: Any) -> list[int] | None:
    """The seed of a random op as TensorFlow derives it: (graph seed, op seed), the op's id
    standing in for a missing op seed; None when neither the graph nor the op has one
    (then every session draws differently)."""
    graph_seed = op.graph.seed
    if graph_seed is None and seed is None:
        return None
    return [DEFAULT_GRAPH_SEED if graph_seed is None else int(graph_seed), op.id if seed is None else int(seed)]


# ---- shape inference ---------------------------------------------------------------------------------
class _ProbeEvaluator:
    """Stands in for the session's evaluator while an op's output types are inferred: ops
    that need session state (variables, nested graphs) declare their output types instead."""

    def __init__(self, trace: Trace):
        self.trace = trace

    def random_key(self, op: Operation) -> Any:
        return self.trace.new_arg(TensorType((2,), as_dtype("int32")), "key")

    def __getattr__(self, name: str) -> Any:
        raise _NeedsExplicitTypes


class _NeedsExplicitTypes(Exception):
    pass


def infer_outputs(op: Operation) -> list[tuple[Shape, DType]]:
    """The (shape, dtype) of each output of ``op``, by tracing its ``compute`` once."""
    unknown = any(t._shape is None or None in t._shape for t in op.inputs)
    trace = Trace(Block([]), name=f"shape of {op.name}")
    try:
        with trace_context(trace):
            args = []
            for t in op.inputs:
                if t._shape is None:
                    raise _NeedsExplicitTypes
                args.append(trace.new_arg(TensorType(tuple(_PROBE if d is None else d for d in t._shape), t.dtype),
                                          "probe"))
            outs = op.compute(_ProbeEvaluator(trace), op, args)
    except _NeedsExplicitTypes:
        if op.inputs:  # an input of unknown rank: so is the output
            return [(None, op.inputs[0].dtype)]
        raise FlowjitTypeError(f"{op.where()}: its output types cannot be inferred; declare them") from None
    except FlowjitError as e:
        if unknown:
            # Inputs of partly unknown shape: the probe size may not fit where the fed
            # shapes will; give the output an unknown shape and check when it runs.
            return [(None, op.inputs[0].dtype if op.inputs else as_dtype("float32"))]
        raise type(e)(f"{e} (building {op.where()})") from None
    return [(_unprobe(fnp.shape(o)), _dtype_of(o)) for o in outs]


def _unprobe(shape: tuple[int, ...]) -> Shape:
    return tuple(None if d == _PROBE or (d % _PROBE == 0 and d) else d for d in shape)


def _dtype_of(x: Any) -> DType:
    if isinstance(x, Tracer):
        return x.dtype
    return as_dtype(np.asarray(x).dtype)


# ---- the default graph ------------------------------------------------------------------------------------
# ``as_default()`` is per thread (as in TensorFlow); the global default graph is shared.
_local = threading.local()
_global_graph: list[Graph] = [Graph()]


def _stack() -> list[Graph]:
    if not hasattr(_local, "stack"):
        _local.stack = []
    return _local.stack


def get_default_graph() -> Graph:
    """The graph ops are added to: the innermost ``as_default()``, else the global one."""
    s = _stack()
    return s[-1] if s else _global_graph[0]


def reset_default_graph() -> None:
    """Replace the global default graph with a new, empty one (not inside ``as_default()``)."""
    if _stack():
        raise AssertionError("reset_default_graph() inside a `with graph.as_default():` block is not allowed")
    _global_graph[0] = Graph()
