"""``tf.Session``: run the part of a graph that fetches need, compiled by flowjit.

``run(fetches, feed_dict)`` prunes the graph to the ops the fetches need (any tensor can
be fed: its producer then does not run), splits that set at host ops (queues,
``py_func``) into compiled segments, and runs each segment as one ``fj.function`` whose
arguments are the fed values and host results and whose body evaluates the segment's
ops on traced values. Each segment is therefore traced, optimized, fused and compiled
like any ``@fj.function``, once per fed shape: the plans are cached per (fetches, fed
tensors), the traces per fed shapes and dtypes.

A session owns its state, as in TensorFlow: each graph Variable's value (an
``fj.Variable``, created when first needed, readable once initialized) and each queue's
contents. Compiled segments that update variables or draw random numbers run one at a
time per session; those that only read, and host ops (a blocking enqueue or dequeue),
run outside that lock, so queue-runner threads, the training loop and threads serving
predictions share a session as they do in TensorFlow.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from flowjit.ir.core import Function
from flowjit.ir.errors import FlowjitError
from flowjit.runtime.devices import device_names
from flowjit.tracer import pytree
from flowjit.tracer.core import Tracer, at_location, current_trace
from flowjit.tracer.core import device as fj_device
from flowjit.tracer.function import TracedFunction
from flowjit.tracer.variables import Variable as FjVariable
from flowjit.v1 import errors
from flowjit.v1.default_session import get_default_session as get_default_session
from flowjit.v1.default_session import get_default_session_or_raise as get_default_session_or_raise
from flowjit.v1.default_session import session_stack
from flowjit.v1.device_spec import flowjit_device
from flowjit.v1.graph import Graph, Operation, Tensor, compatible, get_default_graph, op_seed, shape_str

# ---- the evaluator: graph ops on traced values ------------------------------------------------------------


class Evaluator:
    """Evaluates graph tensors inside the current trace, each op once (memoized).

    The root evaluator of a segment holds the fed values, the random keys and the
    session; a child (``child``) evaluates a nested graph -- a cond branch, a loop body,
    the forward pass a gradient differentiates -- computing the ops in ``local`` itself
    (with ``overrides`` for some tensors) and asking its parent for everything else.
    """

    def __init__(self, session: Session | None, values: dict[Tensor, Any], keys: dict[Operation, Any],
                 parent: Evaluator | None = None, local: frozenset[Operation] | None = None):
        self.session = session
        self.memo: dict[Tensor, Any] = dict(values)
        self.keys = keys
        self.parent = parent
        self.local = local
        self.done: set[Operation] = set()
        self.assigned: set[Any] = set() if parent is None else parent.assigned

    @property
    def root(self) -> Evaluator:
        return self if self.parent is None else self.parent.root

    def child(self, overrides: dict[Tensor, Any], local: frozenset[Operation]) -> Evaluator:
        """An evaluator for a nested graph: ``local`` ops computed here, the rest by this one."""
        return Evaluator(self.session, overrides, self.keys, self, local)

    def value(self, t: Tensor) -> Any:
        hit = self.memo.get(t)
        if hit is not None or t in self.memo:
            return hit
        if self.parent is not None and t.op not in self.local:
            return self.parent.value(t)
        self.run_op(t.op)
        return self.memo[t]

    def run_op(self, op: Operation) -> None:
        if op in self.done:
            return
        if self.parent is not None and op not in self.local:
            self.parent.run_op(op)
            return
        for c in op.control_inputs:
            # A host op (an assertion, a queue op) the op waits for ran as a step of its own,
            # before the segment: the plan orders it so.
            if not (c.host and self.parent is None):
                self.run_op(c)
        inputs = [self.value(t) for t in op.inputs]
        compute = op.compute
        if op.host:
            if op.traced_compute is None or self.parent is None:
                raise errors.UnimplementedError(None, op, f"{op.where()} runs on the host (a queue or py_func) and "
                                                "cannot run inside a cond branch, a loop body or a gradient")
            compute = op.traced_compute  # a gradient through it: its host results, the registered gradient
        # Ops inside a cond branch, a loop body or a gradient's forward pass run where the
        # op that holds them runs (a structured op runs on one device).
        placed = placement(op, self.root.session) if self.parent is None else contextlib.nullcontext()
        with at_location(op.location), placed:
            try:
                outs = compute(self, op, inputs)
            except errors.OpError:
                raise
            except FlowjitError as e:
                raise type(e)(f"{e}\n  (while running {op.where()})") from None
        self.done.add(op)
        for t, v in zip(op.outputs, outs):
            self.memo[t] = v

    # ---- what some ops need besides their inputs -----------------------------------------------------
    def random_key(self, op: Operation) -> Any:
        return self.root.keys[op]

    def read_variable(self, var: Any) -> Any:
        root = self.root
        if root.session is None:
            raise errors.FailedPreconditionError(None, var.op, f"reading {var.name} outside a session")
        if var not in root.session._initialized and var not in self.assigned:
            raise errors.FailedPreconditionError(
                None, var.op, f"Attempting to use uninitialized value {var.op.name}: variable {var.name!r} "
                f"(created at {var.op.location}) has not been initialized in this session; run "
                "tf.global_variables_initializer() (or its initializer) first")
        return root.session._state_of(var).value

    def assign_variable(self, var: Any, value: Any) -> Any:
        state = self.root.session._state_of(var)
        state.assign(value)
        self.assigned.add(var)
        return state.value


# ---- devices and the session's configuration ----------------------------------------------------------

_CONFIG_FIELDS = ("allow_soft_placement", "log_device_placement", "intra_op_parallelism_threads",
                  "inter_op_parallelism_threads", "device_count", "gpu_options", "graph_options",
                  "operation_timeout_in_ms", "use_per_session_threads")


class ConfigProto:
    """``tf.ConfigProto(allow_soft_placement=True, log_device_placement=True, ...)``, the
    ``config`` of a Session. flowjit honours the placement fields: with
    ``allow_soft_placement`` an op whose ``tf.device`` this process lacks, or which that
    device cannot run (``tf.cumsum`` on a GPU), is placed where flowjit chooses instead of
    failing the run, and ``log_device_placement`` prints the device each op of a program
    was placed on, once per compiled program. The thread counts, ``device_count`` and ``gpu_options``
    are accepted, so TensorFlow programs run unchanged, and have no effect: flowjit's
    threads are ``NUMBA_NUM_THREADS`` and its devices ``fj.devices()``."""

    def __init__(self, **fields: Any):
        unknown = sorted(set(fields) - set(_CONFIG_FIELDS))
        if unknown:
            raise TypeError(f"tf.ConfigProto got unknown fields {unknown}; it takes {', '.join(_CONFIG_FIELDS)}")
        self.allow_soft_placement = bool(fields.pop("allow_soft_placement", False))
        self.log_device_placement = bool(fields.pop("log_device_placement", False))
        self.__dict__.update(fields)


class GPUOptions:
    """``tf.GPUOptions(allow_growth=True, per_process_gpu_memory_fraction=0.5)``: accepted for
    ``ConfigProto(gpu_options=...)``; flowjit's CUDA memory comes from cupy's pool."""

    def __init__(self, **fields: Any):
        self.__dict__.update(fields)


def placement(op: Operation, session: Session | None) -> Any:
    """The device block an op is traced in: its ``tf.device`` when that device exists (a
    device of this process, or a task of the open cluster: ``/job:ps/task:0``); nothing
    when it names none (flowjit places the op), or when it names a missing one and the
    session allows soft placement; else InvalidArgumentError, as TensorFlow's hard
    placement. Whether the device can run the op is the placement pass's question: a
    soft session's programs are compiled with ``soft_placement=True``, so an op its device
    has no kernel for runs where one has it instead of raising PlacementError."""
    config = session.config if session is not None else None
    if not op.device:
        return contextlib.nullcontext()
    names = device_names()
    target = flowjit_device(op.device)
    if target in names:
        return fj_device(target)
    if config is not None and getattr(config, "allow_soft_placement", False):
        return contextlib.nullcontext()
    if target.startswith("/job:"):
        tasks = sorted({n.rpartition("/")[0] for n in names if n.startswith("/job:")})
        hint = (f" The open cluster's tasks are {', '.join(tasks)}." if tasks else
                " A task's device exists while its cluster runs: start a tf.train.Server(cluster_spec, ...) "
                "(or an fj.distributed.Cluster) listing that task first.")
        raise errors.InvalidArgumentError(
            None, op, f"Cannot assign a device for operation {op.name!r} ({op.where()}): it was explicitly "
            f"assigned to {op.device} ({target}), but the devices are {', '.join(names)}.{hint} Place it on one "
            "of them, or pass tf.Session(config=tf.ConfigProto(allow_soft_placement=True)) to let flowjit place it")
    hint = " FLOWJIT_CPU_DEVICES=N makes N virtual CPU devices," if target.startswith("cpu:") else ""
    raise errors.InvalidArgumentError(
        None, op, f"Cannot assign a device for operation {op.name!r} ({op.where()}): it was explicitly assigned "
        f"to {op.device}, but this process has {', '.join(names)}.{hint} or pass "
        "tf.Session(config=tf.ConfigProto(allow_soft_placement=True)) to let flowjit place it")


def log_placement(ops: Sequence[Operation], placed: Function) -> None:
    """Print ``name: (type): device`` to stderr for each of ``ops``, the devices its ops got
    in ``placed`` (the program after the placement pass), as TensorFlow's
    ``log_device_placement`` does; an op that left no op there shows its ``tf.device``, or
    that flowjit placed it."""
    # Each graph op's location is an object of its own, and passes copy an op's loc by
    # reference: identity maps placed ops back to graph ops, even two on one line.
    where: dict[int, set[str]] = {}
    for o in placed.walk():
        if o.loc is not None and o.device:
            where.setdefault(id(o.loc), set()).add(o.device)
    names = device_names()
    for op in ops:
        got = where.get(id(op.location))
        shown = (", ".join(sorted(got)) if got else op.device if op.device and flowjit_device(op.device) in names
                 else "placed by flowjit")
        print(f"{op.name}: ({op.type}): {shown}", file=sys.stderr)


# ---- plans: which ops run, in which compiled segment -----------------------------------------------------


@dataclass
class Segment:
    """Ops that run as one compiled program, with the tensors it takes and gives."""

    ops: list[Operation]
    inputs: list[Tensor]
    outputs: list[Tensor]
    random_ops: list[Operation]
    program: TracedFunction | None = None
    assigns: set[Any] = field(default_factory=set)  # variables the program initializes
    # Known after its first run: it assigns no variable and draws no random numbers, so
    # it may run beside other runs of the session (see Session._run_segment).
    read_only: bool = False


@dataclass
class Plan:
    steps: list[Segment | Operation]  # a compiled segment, or a host op


def _needed_ops(targets: Sequence[Operation | Tensor], fed: set[Tensor]) -> list[Operation]:
    """Every op the targets need, in creation order (a topological order of the graph)."""
    needed: set[Operation] = set()
    stack: list[Operation] = []
    for t in targets:
        if isinstance(t, Tensor):
            if t not in fed:
                stack.append(t.op)
        else:
            stack.append(t)
    while stack:
        op = stack.pop()
        if op in needed:
            continue
        needed.add(op)
        stack.extend(t.op for t in op.inputs if t not in fed)
        stack.extend(op.control_inputs)
    return sorted(needed, key=lambda o: o.id)


def _fed_upstream(ops: Sequence[Operation], fed: set[Tensor]) -> list[Tensor]:
    """The fed tensors ``ops`` depend on, through any producers, in creation order."""
    found: set[Tensor] = set()
    seen: set[Operation] = set()
    stack = list(ops)
    while stack:
        op = stack.pop()
        if op in seen:
            continue
        seen.add(op)
        for t in op.inputs:
            if t in fed:
                found.add(t)
            else:
                stack.append(t.op)
        stack.extend(op.control_inputs)
    return sorted(found, key=lambda t: (t.op.id, t.value_index))


def _with_frames(ops: Sequence[Operation]) -> list[Operation]:
    """``ops`` and the ops of the branches and loop bodies they own, recursively."""
    out = []
    for op in ops:
        out.append(op)
        for frame in op.attrs.get("frames", ()):
            out.extend(_with_frames(frame.ops))
    return out


def make_plan(targets: Sequence[Operation | Tensor], fetched: Sequence[Tensor], fed: set[Tensor]) -> Plan:
    """Split the needed ops at host ops: each compute op runs in the latest segment that
    still precedes every host op consuming it, so a program rarely has more than one."""
    ops = _needed_ops(targets, fed)
    for op in ops:
        frame = getattr(op, "frame", None)
        if frame is not None:
            raise errors.InvalidArgumentError(
                None, op, f"{op.where()} is inside {frame.kind}; it runs only as part of it: fetch the "
                f"outputs of the {frame.kind} op instead")
        if op.type == "Placeholder" and not set(op.outputs) & fed:
            t = op.outputs[0]
            raise errors.InvalidArgumentError(
                None, op, f"You must feed a value for placeholder tensor {op.name!r} with dtype {t.dtype} and "
                f"shape {shape_str(t._shape)} (created at {op.location}): it is needed by the fetches")
    consumers: dict[Operation, list[Operation]] = {op: [] for op in ops}
    for op in ops:
        for p in {t.op for t in op.inputs if t not in fed} | set(op.control_inputs):
            consumers[p].append(op)
    # After which segment each host op runs: as early as its producers allow.
    after: dict[Operation, int] = {}
    level: dict[Operation, int] = {}
    for op in ops:
        producers = {t.op for t in op.inputs if t not in fed} | set(op.control_inputs)
        lv = max((level[p] + (1 if p.host else 0) for p in producers), default=0)
        level[op] = lv
        if op.host:
            after[op] = lv
    last = max(level.values(), default=0)
    fetched_ops = {t.op for t in fetched} | {t for t in targets if isinstance(t, Operation)}
    # Each compute op as late as its consumers allow.
    seg_of: dict[Operation, int] = {}
    for op in reversed(ops):
        if op.host:
            continue
        limits = [after[c] if c.host else seg_of[c] for c in consumers[op]]
        if op in fetched_ops or not limits:
            limits.append(last)
        seg_of[op] = min(limits)
    steps: list[Segment | Operation] = []
    for k in range(last + 1):
        seg_ops = [op for op in ops if not op.host and seg_of[op] == k]
        if seg_ops:
            mine = set(seg_ops)
            inputs: list[Tensor] = []
            for op in seg_ops:
                for t in op.inputs:
                    if (t in fed or t.op not in mine) and t not in inputs:
                        inputs.append(t)
            # A gradient recomputes the forward pass it differentiates, whichever segment
            # computed it first: the fed values upstream of the segment reach it too.
            inputs += [t for t in _fed_upstream(seg_ops, fed) if t not in inputs]
            outputs = [t for op in seg_ops for t in op.outputs
                       if t in fetched or any(c not in mine and t in c.inputs for c in consumers[op])]
            steps.append(Segment(seg_ops, inputs, outputs, [op for op in _with_frames(seg_ops) if "seed" in op.attrs]))
        steps.extend(op for op in ops if op.host and after[op] == k)
    return Plan(steps)


# ---- the session ----------------------------------------------------------------------------------------------

# The default session (``with sess:``) is kept in flowjit.v1.default_session, below the graph.


# The targets of the servers this process runs (tf.train.Server.target -> the server).
_targets: dict[str, Any] = {}


def register_target(target: str, server: Any) -> None:
    """Make ``target`` a master a Session accepts, while ``server`` runs."""
    _targets[target] = server


def unregister_target(target: str) -> None:
    _targets.pop(target, None)


def check_target(target: str, what: str) -> None:
    """Accept the target of a server this process runs (the session runs here, the chief,
    with the server's cluster's tasks as devices); explain the launch model otherwise."""
    if target in _targets:
        return
    live = f"the servers running here have {', '.join(sorted(_targets))}" if _targets else \
        "no tf.train.Server runs here"
    raise errors.InvalidArgumentError(
        None, None, f"{what}(target={target!r}): flowjit runs a session in the process that creates it (the chief); "
        f"a target must be the .target of a tf.train.Server this process started ({live}). Start "
        "server = tf.train.Server(cluster_spec, job_name='worker', task_index=0) here and pass server.target, or "
        "leave the target out to run without a cluster")


class Session:
    """Runs fetches of a graph: ``with tf.Session() as sess: sess.run(loss, feed_dict={x: xs})``."""

    def __init__(self, target: str = "", graph: Graph | None = None, config: Any = None):
        if target:
            check_target(target, "tf.Session")
        self.target = target
        self.graph = graph if graph is not None else get_default_graph()
        self.config = config
        self._closed = False
        self._state: dict[Any, FjVariable] = {}
        self._initialized: set[Any] = set()
        self._resources: dict[Any, Any] = {}   # per-session host state (queues), keyed by its op
        self._plans: dict[tuple, Plan] = {}
        self._run_lock = threading.RLock()
        self._plan_lock = threading.Lock()
        self._state_lock = threading.Lock()
        self._random_counts: dict[Operation, int] = {}
        self._entropy = int(np.random.SeedSequence().entropy % (2 ** 63))
        self._entered: list[Any] = []

    # ---- context ------------------------------------------------------------------------------------------
    def __enter__(self) -> Session:
        cm = self.graph.as_default()
        cm.__enter__()
        self._entered.append(cm)
        session_stack().append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        session_stack().remove(self)
        self._entered.pop().__exit__(*exc)
        self.close()

    def as_default(self) -> Any:
        return _AsDefault(self)

    def close(self) -> None:
        """Free the session's state; blocked queue operations are cancelled."""
        if self._closed:
            return
        self._closed = True  # before listing: a queue checks `closed` after it registers
        with self._plan_lock:  # resource() may be adding one from a runner thread
            resources = list(self._resources.values())
        for res in resources:
            cancel = getattr(res, "cancel", None)
            if cancel is not None:
                cancel()

    @property
    def closed(self) -> bool:
        return self._closed

    # ---- state ---------------------------------------------------------------------------------------------
    def _state_of(self, var: Any) -> FjVariable:
        state = self._state.get(var)
        if state is None:
            with self._state_lock:  # read-only segments trace on several threads
                return self._new_state(var)
        return state

    def _new_state(self, var: Any) -> FjVariable:
        state = self._state.get(var)
        if state is None:
            if not var.shape.is_fully_defined():
                raise errors.InvalidArgumentError(None, var.op, f"variable {var.name} has the unknown shape "
                                                  f"{var.shape}: give its initial value a fully known shape")
            with placement(var.op, self):  # the variable's value lives on its tf.device
                state = FjVariable(np.zeros(var.shape.as_list(), var.dtype.np), name=var.op.name,
                                   trainable=var.trainable)
            self._state[var] = state
        return state

    def resource(self, key: Any, make: Any) -> Any:
        """The session's host state for ``key`` (an op, or any hashable, e.g. a queue's shared
        name), made by ``make()`` on first use."""
        with self._plan_lock:
            res = self._resources.get(key)
            if res is None:
                res = self._resources[key] = make()
            return res

    def variable_value(self, var: Any) -> np.ndarray:
        """The current value of a graph Variable in this session (a copy)."""
        if var not in self._initialized:
            raise errors.FailedPreconditionError(None, var.op, f"variable {var.name!r} is not initialized")
        return self._state_of(var).numpy()

    def load_variable(self, var: Any, value: Any) -> None:
        """Set a graph Variable's value in this session (marks it initialized)."""
        with self._run_lock:
            self._state_of(var).assign(value)
            self._initialized.add(var)

    # ---- run -------------------------------------------------------------------------------------------------
    def run(self, fetches: Any, feed_dict: dict | None = None, options: Any = None, run_metadata: Any = None) -> Any:
        """Evaluate ``fetches`` (a tensor, an op, a name, or a list/tuple/dict/namedtuple
        nest of them) with ``feed_dict`` values substituted; ops give None. Returns the
        same structure with NumPy values."""
        if self._closed:
            raise RuntimeError("Attempted to use a closed Session")
        if current_trace() is not None:
            raise RuntimeError("Session.run inside a traced function: build the graph first, run it outside")
        leaves, tree = pytree.flatten(fetches, is_leaf=lambda x: not isinstance(x, (list, tuple, dict)))
        targets = []
        for leaf in leaves:
            if leaf is None:
                raise TypeError("Fetch argument None has invalid type: fetch tensors, ops or their names")
            targets.append(self.graph.as_graph_element(leaf))
        feeds = self._feeds(feed_dict or {})
        fetched = tuple(t for t in targets if isinstance(t, Tensor))
        key = (tuple(targets), tuple(feeds))
        with self._plan_lock:
            plan = self._plans.get(key)
            if plan is None:
                plan = self._plans[key] = make_plan(targets, fetched, set(feeds))
        values: dict[Tensor, Any] = dict(feeds)
        for step in plan.steps:
            if isinstance(step, Segment):
                self._run_segment(step, values)
            else:
                self._run_host(step, values)
        out = [values[t] if isinstance(t, Tensor) else None for t in targets]
        return pytree.unflatten(tree, out)

    def _feeds(self, feed_dict: dict) -> dict[Tensor, np.ndarray]:
        feeds = {}
        for key, value in feed_dict.items():
            t = self.graph.as_graph_element(key)
            if isinstance(t, Operation):
                raise TypeError(f"feed_dict keys must be tensors, got the operation {t.name!r}")
            if isinstance(value, Tensor):
                raise TypeError(f"The value of a feed cannot be a tf.Tensor object ({value.name} fed to {t.name}); "
                                "feed NumPy arrays, lists or numbers")
            arr = np.asarray(value)
            if arr.dtype.kind not in "biuf" or not np.can_cast(arr.dtype, t.dtype.np, "same_kind"):
                if not (arr.dtype.kind in "biu" and t.dtype.is_int):
                    raise errors.InvalidArgumentError(
                        None, t.op, f"cannot feed a value of dtype {arr.dtype} to {t.name}, of dtype {t.dtype} "
                        f"(shape {shape_str(t._shape)}): convert it first")
            if not compatible(t._shape, arr.shape):
                raise errors.InvalidArgumentError(
                    None, t.op, f"Cannot feed value of shape {arr.shape} for Tensor {t.name!r}, which has shape "
                    f"{shape_str(t._shape)}")
            feeds[t] = np.array(arr, dtype=t.dtype.np, order="C", copy=None)
        return feeds

    def _random_keys(self, ops: list[Operation]) -> list[np.ndarray]:
        keys = []
        for op in ops:
            count = self._random_counts.get(op, 0)
            self._random_counts[op] = count + 1
            parts = op_seed(op, op.attrs.get("seed")) or [self._entropy, op.id]
            keys.append(np.random.SeedSequence([*parts, count]).generate_state(2, np.uint32).view(np.int32))
        return keys

    def _run_segment(self, seg: Segment, values: dict[Tensor, Any]) -> None:
        # Segments that update the session's state (variables, random counters) run one at
        # a time; one that only reads runs at once, as TensorFlow runs concurrent reads
        # (a read beside an update sees the variable before or after it).
        if seg.read_only:
            outs = self._call(seg, [values[t] for t in seg.inputs])
        else:
            with self._run_lock:
                if seg.program is None:
                    soft = bool(getattr(self.config, "allow_soft_placement", False))
                    seg.program = TracedFunction(self._segment_fn(seg), soft_placement=soft)
                args = [values[t] for t in seg.inputs] + self._random_keys(seg.random_ops)
                outs = self._call(seg, args)
                self._initialized |= seg.assigns
                seg.read_only = not seg.assigns and not seg.random_ops
        for t, v in zip(seg.outputs, outs):
            values[t] = v

    def _call(self, seg: Segment, args: list[Any]) -> Any:
        traces = seg.program.trace_count
        outs = seg.program(*args)
        if seg.program.trace_count != traces and getattr(self.config, "log_device_placement", False):
            log_placement(seg.ops, seg.program.ir(*args, stage="placement"))
        return outs

    def _segment_fn(self, seg: Segment) -> Any:
        n_in = len(seg.inputs)

        def program(*args: Any) -> list[Any]:
            ev = Evaluator(self, dict(zip(seg.inputs, args[:n_in])), dict(zip(seg.random_ops, args[n_in:])))
            for op in seg.ops:
                ev.run_op(op)
            seg.assigns |= ev.assigned
            return [_as_output(ev.value(t)) for t in seg.outputs]

        first = seg.outputs[0].op.name if seg.outputs else seg.ops[-1].name
        program.__name__ = "session_run_" + first.replace("/", "_")
        return program

    def _run_host(self, op: Operation, values: dict[Tensor, Any]) -> None:
        inputs = [values[t] for t in op.inputs]
        outs = op.compute(self, op, inputs)
        for t, v in zip(op.outputs, outs):
            values[t] = np.asarray(v)


def _as_output(x: Any) -> Any:
    return x if isinstance(x, Tracer) else np.asarray(x)


class _AsDefault:
    def __init__(self, session: Session):
        self.session = session

    def __enter__(self) -> Session:
        session_stack().append(self.session)
        return self.session

    def __exit__(self, *exc: object) -> None:
        session_stack().remove(self.session)


class InteractiveSession(Session):
    """A Session that makes itself the default on creation (for ``Tensor.eval()`` in a shell)."""

    def __init__(self, target: str = "", graph: Graph | None = None, config: Any = None):
        super().__init__(target, graph, config)
        session_stack().append(self)

    def close(self) -> None:
        if self in session_stack():
            session_stack().remove(self)
        super().close()
