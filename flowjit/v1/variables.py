"""``tf.Variable``, ``tf.get_variable``, variable scopes, initializers and their init ops.

A graph Variable is an op (``VariableV2``) whose output reads the variable's value in the
running session; each Session holds its own value (an ``fj.Variable``), so a program
reads it as a ``var`` argument of the compiled segment and updates it with explicit
``assign`` ops that rebind it when the segment finishes. Every use of ``v`` in one
``Session.run`` sees the same value (the one when the run started), as TensorFlow's
ref variables do without control dependencies; ``read_value()`` and ops built under
``tf.control_dependencies`` read it again after those dependencies ran. Assign ops
(``v.assign``, ``tf.assign_add``...) read the value current at that point of the run,
so two updates in one run both apply.

Reading a variable before its initializer ran in the session raises
``FailedPreconditionError`` naming it.
"""

from __future__ import annotations

import abc
import contextlib
import math
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from flowjit.ir.dtypes import dtype as as_dtype
from flowjit.ir.errors import FlowjitTypeError
from flowjit.tracer.numpy import namespace as fnp
from flowjit.v1 import ops
from flowjit.v1.control_flow import group
from flowjit.v1.default_session import get_default_session_or_raise
from flowjit.v1.graph import GraphKeys, Operation, Tensor, TensorShape, get_default_graph, shape_from

# ---- Variable -----------------------------------------------------------------------------------------------


class Variable:
    """A variable of the graph: ``tf.Variable(tf.zeros([784, 10]), name="W")``."""

    def __init__(self, initial_value: Any = None, trainable: bool = True, collections: Sequence[str] | None = None,
                 validate_shape: bool = True, caching_device: Any = None, name: str | None = None,
                 variable_def: Any = None, dtype: Any = None, expected_shape: Any = None, import_scope: Any = None,
                 constraint: Any = None, use_resource: Any = None):
        if initial_value is None:
            raise ValueError("tf.Variable needs an initial_value")
        graph = get_default_graph()
        with graph.name_scope(name or "Variable") as scope:
            with graph.name_scope("Initializer"), graph.control_dependencies(None):
                init = initial_value() if callable(initial_value) else initial_value
                init_t = ops.convert_to_tensor(init, dtype=None)
                if dtype is not None and as_dtype(dtype) != init_t.dtype:
                    init_t = ops.cast(init_t, dtype)
            self.graph = graph
            self.trainable = trainable
            self.initial_value = init_t
            self.dtype = init_t.dtype
            self.constraint = constraint
            shape = init_t._shape if validate_shape else None
            self._reads: list[Tensor] = []   # fresh reads (read_value), which gradients flow through
            self.op = graph.create_op("VariableV2", [], lambda ev, op, xs: [ev.read_variable(self)],
                                      name=scope.rstrip("/"), exact_name=True,
                                      outputs=[(shape, self.dtype)], attrs={"variable": self})
            self._ref = self.op.outputs[0]
            with graph.control_dependencies(None):
                self.initializer = _assign_op(self, init_t, "Assign", "Assign", lambda ev, cur, x: x)
        for c in collections if collections is not None else [GraphKeys.GLOBAL_VARIABLES]:
            graph.add_to_collection(c, self)
        if trainable and GraphKeys.TRAINABLE_VARIABLES not in (collections or []):
            graph.add_to_collection(GraphKeys.TRAINABLE_VARIABLES, self)

    # ---- identity ---------------------------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self._ref.name

    @property
    def shape(self) -> TensorShape:
        return self._ref.shape

    def get_shape(self) -> TensorShape:
        return self.shape

    @property
    def device(self) -> str:
        return self.op.device

    def _as_graph_element(self) -> Tensor:
        return self._ref

    def _read_here(self) -> Tensor:
        # A use under tf.control_dependencies reads after them (TF's ref variables are read
        # when the consuming op runs); any other use shares the run's one read.
        return self.read_value() if self.graph.current_control_inputs() else self._ref

    def value(self) -> Tensor:
        """The variable's value in a run (shared by all its uses in that run)."""
        return self._ref

    def read_value(self) -> Tensor:
        """A fresh read: after the control dependencies in effect here have run."""
        op = self.graph.create_op("ReadVariableOp", [], lambda ev, op, xs: [ev.read_variable(self)],
                                  name=self.op.name + "/read", outputs=[(self._ref._shape, self.dtype)])
        self._reads.append(op.outputs[0])   # gradients with respect to the variable flow through it
        return op.outputs[0]

    def reads(self) -> list[Tensor]:
        """Every tensor that is this variable's value in a run: the shared one (``value()``)
        and each fresh read (``read_value()``, a use under tf.control_dependencies), the
        tensors a gradient with respect to the variable flows through."""
        return [self._ref, *self._reads]

    def initialized_value(self) -> Tensor:
        """The value after initialization (runs the initializer first)."""
        with self.graph.control_dependencies([self.initializer]):
            return self.read_value()

    def __repr__(self) -> str:
        return f"<tf.Variable '{self.name}' shape={self.shape} dtype={self.dtype}>"

    def __hash__(self) -> int:
        return id(self)

    # ---- updates ------------------------------------------------------------------------------------------
    def assign(self, value: Any, use_locking: bool = False, name: str | None = None, read_value: bool = True) -> Any:
        return assign(self, value, name=name)

    def assign_add(self, delta: Any, use_locking: bool = False, name: str | None = None,
                   read_value: bool = True) -> Any:
        return assign_add(self, delta, name=name)

    def assign_sub(self, delta: Any, use_locking: bool = False, name: str | None = None,
                   read_value: bool = True) -> Any:
        return assign_sub(self, delta, name=name)

    def eval(self, session: Any = None) -> np.ndarray:
        return self._ref.eval(session=session)

    def load(self, value: Any, session: Any = None) -> None:
        """Set the value in ``session`` (default: the default session) without an op."""
        (session or get_default_session_or_raise(f"{self.name}.load()")).load_variable(self, value)


def _assign_op(var: Variable, value: Any, type: str, name: str,
               combine: Callable[[Any, Any, Any], Any]) -> Operation:
    v = ops.convert_to_tensor(value, dtype_hint=var.dtype)

    def compute(ev: Any, op: Operation, xs: list[Any]) -> list[Any]:
        current = ev.read_variable(var) if type != "Assign" else None
        return [ev.assign_variable(var, combine(ev, current, xs[0]))]

    with var.graph.name_scope(var.op.name + "/"):
        return var.graph.create_op(type, [v], compute, name=name,
                                   outputs=[(var._ref._shape, var.dtype)], attrs={"variable": var})


def _variable_of(ref: Any) -> Variable:
    if isinstance(ref, Variable):
        return ref
    if isinstance(ref, Tensor) and isinstance(ref.op.attrs.get("variable"), Variable):
        return ref.op.attrs["variable"]
    raise FlowjitTypeError(f"assign needs a tf.Variable to update, got {ref!r}")


def assign(ref: Any, value: Any, validate_shape: bool | None = None, use_locking: bool | None = None,
           name: str | None = None) -> Tensor:
    """Set ``ref``'s value; the result is the new value."""
    var = _variable_of(ref)
    return _assign_op(var, value, "Assign", name or "Assign", lambda ev, cur, x: x).outputs[0]


def assign_add(ref: Any, value: Any, use_locking: bool | None = None, name: str | None = None) -> Tensor:
    """Add ``value`` to ``ref`` (to its value at this point of the run); the result is the new value."""
    var = _variable_of(ref)
    return _assign_op(var, value, "AssignAdd", name or "AssignAdd", lambda ev, cur, x: fnp.add(cur, x)).outputs[0]


def assign_sub(ref: Any, value: Any, use_locking: bool | None = None, name: str | None = None) -> Tensor:
    """Subtract ``value`` from ``ref``; the result is the new value."""
    var = _variable_of(ref)
    return _assign_op(var, value, "AssignSub", name or "AssignSub",
                      lambda ev, cur, x: fnp.subtract(cur, x)).outputs[0]


# ---- collections and init ops ------------------------------------------------------------------------------


def global_variables(scope: str | None = None) -> list[Variable]:
    return get_default_graph().get_collection(GraphKeys.GLOBAL_VARIABLES, scope)


all_variables = global_variables


def trainable_variables(scope: str | None = None) -> list[Variable]:
    return get_default_graph().get_collection(GraphKeys.TRAINABLE_VARIABLES, scope)


def local_variables(scope: str | None = None) -> list[Variable]:
    return get_default_graph().get_collection(GraphKeys.LOCAL_VARIABLES, scope)


def variables_initializer(var_list: Sequence[Variable], name: str = "init") -> Operation:
    """One op that runs the initializers of ``var_list``."""
    return group(*[v.initializer for v in var_list], name=name)


def assign_initializer(var: Variable, value: Tensor) -> None:
    """Make ``var``'s initializer assign ``value`` (a tensor of its shape and dtype) instead of
    its initial value: how ``tf.train.init_from_checkpoint`` has a variable loaded from a file
    by the initializer ops built afterwards (``global_variables_initializer``)."""
    with var.graph.control_dependencies(None):
        var.initializer = _assign_op(var, value, "Assign", "Assign", lambda ev, cur, x: x)
    var.initial_value = value


def global_variables_initializer() -> Operation:
    """The op that initializes every global variable: run it once per session."""
    return variables_initializer(global_variables(), name="init")


initialize_all_variables = global_variables_initializer


def local_variables_initializer() -> Operation:
    return variables_initializer(local_variables(), name="init_1")


initialize_local_variables = local_variables_initializer


def is_variable_initialized(variable: Variable) -> Tensor:
    """A bool scalar: whether ``variable`` is initialized in the running session."""
    op = variable.graph.create_op("IsVariableInitialized", [],
                                  lambda session, op, xs: [np.asarray(variable in session._initialized)],
                                  host=True, outputs=[((), "bool")])
    return op.outputs[0]


def report_uninitialized_variables(var_list: Sequence[Variable] | None = None) -> Tensor:
    """A vector of the names of uninitialized variables (as an int count here: names are strings,
    which flowjit tensors do not hold, so this gives how many)."""
    vs = list(var_list if var_list is not None else global_variables())
    op = get_default_graph().create_op("ReportUninitializedVariables", [],
                                       lambda session, op, xs: [np.asarray(sum(v not in session._initialized
                                                                                for v in vs), np.int32)],
                                       host=True, outputs=[((), "int32")])
    return op.outputs[0]


# ---- initializers ---------------------------------------------------------------------------------------------


class Initializer(abc.ABC):
    """``init(shape, dtype=None, partition_info=None)`` -> a Tensor with the initial value."""

    dtype: Any = None

    @abc.abstractmethod
    def __call__(self, shape: Any, dtype: Any = None, partition_info: Any = None) -> Tensor:
        """The initial value for a variable of ``shape``."""


class zeros_initializer(Initializer):
    def __init__(self, dtype: Any = "float32"):
        self.dtype = dtype

    def __call__(self, shape: Any, dtype: Any = None, partition_info: Any = None) -> Tensor:
        return ops.zeros(shape, dtype or self.dtype)


class ones_initializer(Initializer):
    def __init__(self, dtype: Any = "float32"):
        self.dtype = dtype

    def __call__(self, shape: Any, dtype: Any = None, partition_info: Any = None) -> Tensor:
        return ops.ones(shape, dtype or self.dtype)


class constant_initializer(Initializer):
    def __init__(self, value: Any = 0, dtype: Any = "float32", verify_shape: bool = False):
        self.value, self.dtype = value, dtype

    def __call__(self, shape: Any, dtype: Any = None, partition_info: Any = None) -> Tensor:
        return ops.constant(self.value, dtype=dtype or self.dtype, shape=shape)


class random_uniform_initializer(Initializer):
    def __init__(self, minval: float = 0, maxval: float | None = None, seed: Any = None, dtype: Any = "float32"):
        self.minval, self.maxval, self.seed, self.dtype = minval, maxval, seed, dtype

    def __call__(self, shape: Any, dtype: Any = None, partition_info: Any = None) -> Tensor:
        return ops.random_uniform(shape, self.minval, self.maxval, dtype or self.dtype, self.seed)


class random_normal_initializer(Initializer):
    def __init__(self, mean: float = 0.0, stddev: float = 1.0, seed: Any = None, dtype: Any = "float32"):
        self.mean, self.stddev, self.seed, self.dtype = mean, stddev, seed, dtype

    def __call__(self, shape: Any, dtype: Any = None, partition_info: Any = None) -> Tensor:
        return ops.random_normal(shape, self.mean, self.stddev, dtype or self.dtype, self.seed)


class truncated_normal_initializer(Initializer):
    def __init__(self, mean: float = 0.0, stddev: float = 1.0, seed: Any = None, dtype: Any = "float32"):
        self.mean, self.stddev, self.seed, self.dtype = mean, stddev, seed, dtype

    def __call__(self, shape: Any, dtype: Any = None, partition_info: Any = None) -> Tensor:
        return ops.truncated_normal(shape, self.mean, self.stddev, dtype or self.dtype, self.seed)


def _fans(shape: tuple[int, ...]) -> tuple[float, float]:
    if len(shape) < 1:
        return 1.0, 1.0
    if len(shape) == 1:
        return float(shape[0]), float(shape[0])
    receptive = float(np.prod(shape[:-2])) if len(shape) > 2 else 1.0
    return shape[-2] * receptive, shape[-1] * receptive


class variance_scaling_initializer(Initializer):
    """TensorFlow's VarianceScaling: ``scale / n`` variance, n the fan in, out or their average;
    ``distribution`` "truncated_normal" (default), "untruncated_normal"/"normal" or "uniform"."""

    def __init__(self, scale: float = 1.0, mode: str = "fan_in", distribution: str = "truncated_normal",
                 seed: Any = None, dtype: Any = "float32"):
        if mode not in ("fan_in", "fan_out", "fan_avg"):
            raise ValueError(f"variance_scaling_initializer: mode must be fan_in, fan_out or fan_avg, got {mode!r}")
        self.scale, self.mode, self.distribution, self.seed, self.dtype = scale, mode, distribution, seed, dtype

    def __call__(self, shape: Any, dtype: Any = None, partition_info: Any = None) -> Tensor:
        shp = tuple(int(s) for s in shape_from(shape))
        fan_in, fan_out = _fans(shp)
        n = {"fan_in": fan_in, "fan_out": fan_out, "fan_avg": (fan_in + fan_out) / 2}[self.mode]
        var = self.scale / max(1.0, n)
        d = dtype or self.dtype
        if self.distribution == "uniform":
            limit = math.sqrt(3.0 * var)
            return ops.random_uniform(shp, -limit, limit, d, self.seed)
        if self.distribution in ("normal", "truncated_normal"):
            # The stddev of a standard normal truncated to (-2, 2).
            return ops.truncated_normal(shp, 0.0, math.sqrt(var) / 0.87962566103423978, d, self.seed)
        return ops.random_normal(shp, 0.0, math.sqrt(var), d, self.seed)


def glorot_uniform_initializer(seed: Any = None, dtype: Any = "float32") -> Initializer:
    """Uniform in +-sqrt(6 / (fan_in + fan_out)) (get_variable's default)."""
    return variance_scaling_initializer(1.0, "fan_avg", "uniform", seed, dtype)


def glorot_normal_initializer(seed: Any = None, dtype: Any = "float32") -> Initializer:
    return variance_scaling_initializer(1.0, "fan_avg", "truncated_normal", seed, dtype)


def he_normal(seed: Any = None) -> Initializer:
    return variance_scaling_initializer(2.0, "fan_in", "truncated_normal", seed)


def he_uniform(seed: Any = None) -> Initializer:
    return variance_scaling_initializer(2.0, "fan_in", "uniform", seed)


# ---- variable scopes and get_variable --------------------------------------------------------------------------

AUTO_REUSE = "auto_reuse"


class VariableScope:
    """The state of a ``tf.variable_scope``: its name, reuse mode and default initializer."""

    def __init__(self, name: str, reuse: Any = None, initializer: Any = None, dtype: Any = None):
        self.name, self.reuse, self.initializer, self.dtype = name, reuse, initializer, dtype

    @property
    def original_name_scope(self) -> str:
        return self.name + "/" if self.name else ""

    def reuse_variables(self) -> None:
        self.reuse = True


def _scopes() -> list[VariableScope]:
    g = get_default_graph()
    if not hasattr(g, "_variable_scopes"):
        g._variable_scopes = [VariableScope("")]
    return g._variable_scopes


def get_variable_scope() -> VariableScope:
    return _scopes()[-1]


@contextlib.contextmanager
def variable_scope(name_or_scope: Any = None, default_name: str | None = None, values: Any = None,
                   initializer: Any = None, regularizer: Any = None, reuse: Any = None, dtype: Any = None,
                   **kwargs: Any) -> Iterator[VariableScope]:
    """Prefix ``get_variable`` names with this scope (and op names with a name scope);
    ``reuse=True`` (or ``tf.AUTO_REUSE``) shares variables created before under the same names."""
    graph = get_default_graph()
    outer = get_variable_scope()
    if isinstance(name_or_scope, VariableScope):
        full = name_or_scope.name
        reuse = reuse if reuse is not None else name_or_scope.reuse
        initializer = initializer if initializer is not None else name_or_scope.initializer
    else:
        base = name_or_scope if name_or_scope is not None else default_name
        if base is None:
            raise ValueError("variable_scope needs a name_or_scope or a default_name")
        if name_or_scope is None:  # default_name: made unique among variable scopes
            used = graph.__dict__.setdefault("_var_scope_counts", {})
            key = f"{outer.original_name_scope}{base}"
            n = used.get(key, 0)
            used[key] = n + 1
            base = base if n == 0 else f"{base}_{n}"
        full = f"{outer.original_name_scope}{base}"
    scope = VariableScope(full, True if outer.reuse is True and reuse is None else reuse,
                          initializer if initializer is not None else outer.initializer,
                          dtype if dtype is not None else outer.dtype)
    _scopes().append(scope)
    try:
        with graph.name_scope(full.split("/")[-1] if not isinstance(name_or_scope, VariableScope) else full + "/"):
            yield scope
    finally:
        _scopes().pop()


def get_variable(name: str, shape: Any = None, dtype: Any = None, initializer: Any = None, regularizer: Any = None,
                 trainable: bool = True, collections: Sequence[str] | None = None, caching_device: Any = None,
                 partitioner: Any = None, validate_shape: bool = True, use_resource: Any = None,
                 custom_getter: Any = None, constraint: Any = None, **kwargs: Any) -> Variable:
    """The variable ``<scope>/name``: created with ``initializer`` (default Glorot uniform for
    floats, zeros otherwise), or, under a reusing scope, the one created before."""
    scope = get_variable_scope()
    full = f"{scope.original_name_scope}{name}"
    graph = get_default_graph()
    existing = graph.variables_by_name.get(full)
    if existing is not None:
        if scope.reuse not in (True, AUTO_REUSE):
            raise ValueError(f"Variable {full} already exists, disallowed. Did you mean to set reuse=True or "
                             f"reuse=tf.AUTO_REUSE in VarScope? Originally defined at {existing.op.location}")
        if shape is not None and shape_from(shape) != existing.shape.dims:
            raise ValueError(f"Trying to share variable {full}, but specified shape {list(shape_from(shape))} and "
                             f"found shape {existing.shape}")
        return existing
    if scope.reuse is True:
        raise ValueError(f"Variable {full} does not exist, or was not created with tf.get_variable(). Did you "
                         "mean to set reuse=tf.AUTO_REUSE in VarScope?")
    d = as_dtype(dtype or scope.dtype or "float32")
    init = initializer if initializer is not None else scope.initializer
    if init is None:
        init = glorot_uniform_initializer() if d.is_float else zeros_initializer()
    if isinstance(init, (Tensor, np.ndarray, list, int, float)) and not callable(init):
        value: Any = init
    else:
        if shape is None:
            raise ValueError(f"get_variable({full!r}) needs a shape to call its initializer")

        def value() -> Tensor:
            return init(list(shape_from(shape)), d)
    with graph.name_scope(None), graph.name_scope(full.rpartition("/")[0] + "/" if "/" in full else None):
        var = Variable(value, trainable=trainable, collections=collections, name=full.rpartition("/")[2],
                       dtype=d, validate_shape=validate_shape, constraint=constraint)
    graph.variables_by_name[full] = var
    if regularizer is not None:
        loss = regularizer(var._ref)
        if loss is not None:
            graph.add_to_collection(GraphKeys.REGULARIZATION_LOSSES, loss)
    return var


def _install_operators() -> None:
    # A Variable in an expression stands for its value, as in TensorFlow.
    for name in ["__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__truediv__",
                 "__rtruediv__", "__floordiv__", "__rfloordiv__", "__mod__", "__rmod__", "__pow__", "__rpow__",
                 "__matmul__", "__rmatmul__", "__lt__", "__le__", "__gt__", "__ge__", "__neg__", "__abs__",
                 "__getitem__"]:
        setattr(Variable, name, lambda self, *a, _n=name: getattr(ops.convert_to_tensor(self), _n)(*a))


_install_operators()
