"""TensorFlow 1.x queues (``tf.FIFOQueue``, ``tf.RandomShuffleQueue``, ``tf.PaddingFIFOQueue``) as host ops.

A queue object only builds graph ops; its contents live in the Session (one queue per
session, made on first use through ``session.resource``; queues built with the same
``shared_name`` share one per session). Every queue op is a *host op*: the Session runs
it in Python between compiled segments, on NumPy arrays, outside its run lock, so a
thread blocked in an enqueue or dequeue never stops other threads from running the
graph.

What this module guarantees, as TensorFlow 1.x does:

- ``enqueue`` blocks while the queue is full, ``dequeue``/``dequeue_many(n)`` block while
  it holds too few elements. Both are served first come, first served, and
  ``enqueue_many``/``dequeue_many`` move elements one at a time as room or elements
  appear, so n may exceed the capacity and a batch is never interleaved with another.
- After ``close()``: an enqueue raises ``CancelledError``; enqueues already waiting
  stay pending (``close(cancel_pending_enqueues=True)`` cancels them); dequeues drain
  what is left and then raise ``OutOfRangeError`` (``dequeue_many`` when fewer than n
  remain, putting back what it took; ``dequeue_up_to`` returns the remainder).
- ``Session.close()`` cancels the queue: every blocked op wakes with ``CancelledError``.
- Enqueued values are copied and checked against the declared shapes (an
  ``InvalidArgumentError`` naming the queue, the component and both shapes).
- Static shapes: ``dequeue`` gives the declared component shapes, ``dequeue_many(n)``
  prepends n, ``dequeue_up_to`` prepends an unknown dimension.
- A ``RandomShuffleQueue`` dequeues uniformly at random among its elements while more than
  ``min_after_dequeue`` remain (all of them once closed); its per-session random sequence
  is fixed by the graph seed and ``seed``, as TensorFlow's op seeds are.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from flowjit.ir.dtypes import DType
from flowjit.ir.dtypes import dtype as as_dtype
from flowjit.ir.errors import FlowjitTypeError
from flowjit.v1 import errors
from flowjit.v1.graph import (
    Graph,
    Operation,
    Shape,
    Tensor,
    TensorShape,
    get_default_graph,
    op_seed,
    shape_from,
    shape_str,
)
from flowjit.v1.ops import convert_to_tensor

__all__ = ["QueueBase", "FIFOQueue", "RandomShuffleQueue", "PaddingFIFOQueue", "host_rng"]

def host_rng(graph: Graph, seed: int | None, op: Operation) -> np.random.Generator:
    """A NumPy generator for a host op's randomness in one session, seeded as TensorFlow
    seeds ops (``graph.op_seed``): with neither a graph seed nor ``seed`` it differs on every
    call; with either, every session draws the same sequence."""
    parts = op_seed(op, seed)
    if parts is None:
        return np.random.default_rng()
    return np.random.default_rng(np.random.SeedSequence([*parts, 0x51]))


def _dtype_list(dtypes: Any) -> list[DType]:
    if isinstance(dtypes, (list, tuple)):
        if not dtypes:
            raise ValueError("a queue needs at least one component dtype")
        return [as_dtype(d) for d in dtypes]
    return [as_dtype(dtypes)]


def _shape_list(shapes: Any, n: int, *, partial: bool, qname: str) -> list[Shape] | None:
    """The per-component shapes, read as TensorFlow's ``_as_shape_list`` reads them: a single
    shape (a list of ints/None, or a TensorShape) stands for a one-component queue."""
    if shapes is None:
        return None
    if isinstance(shapes, TensorShape):
        shapes = [shapes]
    if not isinstance(shapes, (list, tuple)):
        raise FlowjitTypeError(f"{qname}: shapes must be a TensorShape or a list of shapes, got {shapes!r}")
    if partial and (not shapes or any(s is None or isinstance(s, (int, np.integer)) for s in shapes)):
        raise ValueError(f"{qname}: when shapes have unknown dimensions, give a list with one shape per component, "
                         f"e.g. shapes=[[None, 3]] (got {shapes!r})")
    if all(s is None or isinstance(s, (int, np.integer)) for s in shapes):
        shapes = [shapes]  # one shape, of a one-component queue
    out = [shape_from(s) for s in shapes]
    if len(out) != n:
        raise ValueError(f"{qname}: {len(out)} shape(s) for {n} dtype(s); give one shape per component")
    for i, s in enumerate(out):
        if s is None:
            raise ValueError(f"{qname}: the shape of component {i} has an unknown rank; give its rank")
        if not partial and None in s:
            raise ValueError(f"{qname}: the shape {shape_str(s)} of component {i} is not fully defined; a FIFOQueue "
                             "or RandomShuffleQueue needs fully defined shapes (use a PaddingFIFOQueue, or leave "
                             "shapes=None)")
    return out


class _QueueState:
    """One queue's contents in one session, with the condition its blocked ops wait on.

    Waiting enqueues and dequeues line up (``enq_line``/``deq_line``) and only the front of
    each line moves elements, which keeps the order and the batches of TensorFlow's queues.
    """

    def __init__(self, queue: QueueBase, rng: np.random.Generator | None):
        self.queue = queue
        self.cond = threading.Condition()
        self.shuffled = rng is not None
        self.items: Any = [] if self.shuffled else collections.deque()
        self.rng = rng
        self.closed = False
        self.cancelled = False          # the session closed: everything fails
        self.enqueues_cancelled = False  # close(cancel_pending_enqueues=True)
        self.enq_line: collections.deque[object] = collections.deque()
        self.deq_line: collections.deque[object] = collections.deque()

    def cancel(self) -> None:
        """Wake every blocked op with CancelledError (called by ``Session.close``)."""
        with self.cond:
            self.cancelled = True
            self.cond.notify_all()

    def _cancelled_error(self, op: Operation) -> errors.CancelledError:
        return errors.CancelledError(None, op, f"{op.where()}: the session of {self.queue._kind} "
                                     f"'{self.queue.name}' was closed, cancelling it")

    # ---- enqueue ----------------------------------------------------------------------------------------------
    def put(self, elements: list[tuple[np.ndarray, ...]], op: Operation) -> None:
        q = self.queue
        with self.cond:
            if self.cancelled:
                raise self._cancelled_error(op)
            if self.closed:
                raise errors.CancelledError(None, op, f"{op.where()}: {q._kind} '{q.name}' is closed; nothing can "
                                            "be enqueued after close()")
            ticket = object()
            self.enq_line.append(ticket)
            try:
                i = 0
                while i < len(elements):
                    if self.cancelled:
                        raise self._cancelled_error(op)
                    if self.enqueues_cancelled:
                        raise errors.CancelledError(None, op, f"{op.where()}: {q._kind} '{q.name}' was closed with "
                                                    "cancel_pending_enqueues=True while this enqueue waited")
                    room = q._capacity - len(self.items)
                    if self.enq_line[0] is ticket and room > 0:
                        k = min(room, len(elements) - i)
                        self.items.extend(elements[i:i + k])
                        i += k
                        self.cond.notify_all()
                        continue
                    self.cond.wait()
            finally:
                self.enq_line.remove(ticket)
                self.cond.notify_all()

    # ---- dequeue ----------------------------------------------------------------------------------------------
    def _available(self) -> int:
        if self.shuffled and not self.closed:
            return max(0, len(self.items) - self.queue._min_after_dequeue)
        return len(self.items)

    def _take(self) -> tuple[np.ndarray, ...]:
        if not self.shuffled:
            return self.items.popleft()
        items = self.items
        i = int(self.rng.integers(len(items)))
        items[i], items[-1] = items[-1], items[i]
        return items.pop()

    def _put_back(self, got: list[tuple[np.ndarray, ...]]) -> None:
        if self.shuffled:
            self.items.extend(got)
        else:
            self.items.extendleft(reversed(got))

    def take(self, n: int, allow_smaller: bool, op: Operation) -> list[tuple[np.ndarray, ...]]:
        q = self.queue
        got: list[tuple[np.ndarray, ...]] = []
        with self.cond:
            if self.cancelled:
                raise self._cancelled_error(op)
            ticket = object()
            self.deq_line.append(ticket)
            try:
                while len(got) < n:
                    if self.cancelled:
                        raise self._cancelled_error(op)
                    if self.deq_line[0] is ticket:
                        k = min(self._available(), n - len(got))
                        if k > 0:
                            got.extend(self._take() for _ in range(k))
                            self.cond.notify_all()
                            continue
                        if self.closed:
                            if allow_smaller and got:
                                break
                            self._put_back(got)
                            raise errors.OutOfRangeError(
                                None, op, f"{op.where()}: {q._kind} '{q.name}' is closed and has insufficient "
                                f"elements (requested {n}, current size {len(self.items)})")
                    self.cond.wait()
            finally:
                self.deq_line.remove(ticket)
                self.cond.notify_all()
        return got

    def close(self, cancel_pending_enqueues: bool) -> None:
        with self.cond:
            self.closed = True
            if cancel_pending_enqueues:
                self.enqueues_cancelled = True
            self.cond.notify_all()

    def size(self) -> int:
        with self.cond:
            return len(self.items)


class QueueBase:
    """A queue of tuples of tensors (``tf.QueueBase``): build ops that enqueue and dequeue.

    Subclasses choose the order (first in first out, random) and how batches are made.
    Its contents are per session; see the module doc for the blocking rules.
    """

    _kind = "Queue"
    _op_type = "QueueV2"

    def __init__(self, capacity: int, dtypes: Any, shapes: Any, names: Any, shared_name: str | None, name: str,
                 *, partial_shapes: bool = False, seed: int | None = None, min_after_dequeue: int = 0):
        if isinstance(capacity, bool) or not isinstance(capacity, (int, np.integer)) or capacity < 1:
            raise ValueError(f"{type(self).__name__} {name!r}: capacity must be a positive int, got {capacity!r}")
        self._capacity = int(capacity)
        self._min_after_dequeue = int(min_after_dequeue)
        self._dtypes = _dtype_list(dtypes)
        self._shapes = _shape_list(shapes, len(self._dtypes), partial=partial_shapes, qname=f"{self._kind} {name!r}")
        if names is not None:
            names = [names] if isinstance(names, str) else list(names)
            if len(names) != len(self._dtypes):
                raise ValueError(f"{self._kind} {name!r}: {len(names)} names for {len(self._dtypes)} dtypes; "
                                 "give one name per component")
        self._names: list[str] | None = names
        self._shared_name = shared_name or None
        self._seed = seed
        self._graph = get_default_graph()
        # The queue's own node: it reserves the name, keys the per-session contents and
        # records the queue in the graph. Running it does nothing.
        self._queue_op = self._graph.create_op(
            self._op_type, [], lambda session, op, xs: [], name=name, host=True, outputs=[],
            attrs={"capacity": self._capacity, "component_types": list(self._dtypes), "shapes": self._shapes,
                   "shared_name": self._shared_name or "", "seed": seed})

    # ---- properties ----------------------------------------------------------------------------------------------
    @property
    def name(self) -> str:
        """The queue's full name in the graph."""
        return self._queue_op.name

    @property
    def dtypes(self) -> list[DType]:
        return list(self._dtypes)

    @property
    def shapes(self) -> list[TensorShape]:
        """Each component's declared shape (unknown when the queue was built without shapes)."""
        if self._shapes is None:
            return [TensorShape(None) for _ in self._dtypes]
        return [TensorShape(s) for s in self._shapes]

    @property
    def names(self) -> list[str] | None:
        return None if self._names is None else list(self._names)

    @property
    def queue_ref(self) -> Operation:
        """The queue's node in the graph (TensorFlow's resource handle)."""
        return self._queue_op

    def _component_shape(self, i: int) -> Shape:
        return None if self._shapes is None else self._shapes[i]

    # ---- per-session state ------------------------------------------------------------------------------------------
    def _same_spec(self, other: QueueBase) -> bool:
        return (type(self) is type(other) and self._capacity == other._capacity and self._dtypes == other._dtypes
                and self._shapes == other._shapes and self._min_after_dequeue == other._min_after_dequeue)

    def _make_state(self) -> _QueueState:
        return _QueueState(self, None)

    def _state(self, session: Any, op: Operation) -> _QueueState:
        key: Any = ("shared_queue", self._shared_name) if self._shared_name else self._queue_op
        state = session.resource(key, self._make_state)
        if state.queue is not self and not state.queue._same_spec(self):
            raise errors.InvalidArgumentError(
                None, op, f"{op.where()}: {self._kind} '{self.name}' has shared_name={self._shared_name!r}, as "
                f"{state.queue._kind} '{state.queue.name}' does, but their capacity, dtypes or shapes differ; "
                "queues that share a name must be built alike")
        # Session.close marks the session closed before cancelling its resources: a state made
        # after that snapshot would never be cancelled, so check here (after it is registered).
        if getattr(session, "closed", False):
            raise state._cancelled_error(op)
        return state

    # ---- building ops -----------------------------------------------------------------------------------------------
    def _short(self) -> str:
        return self.name.split("/")[-1]

    def _values_list(self, vals: Any, what: str) -> list[Any]:
        if isinstance(vals, dict):
            if self._names is None:
                raise ValueError(f"{what} on {self._kind} '{self.name}': a dict of values needs a queue built with "
                                 "names=[...]")
            if set(vals) != set(self._names):
                raise ValueError(f"{what} on {self._kind} '{self.name}': the keys {sorted(vals)} do not match the "
                                 f"queue's names {sorted(self._names)}")
            return [vals[k] for k in self._names]
        if self._names is not None:
            raise ValueError(f"{what} on {self._kind} '{self.name}', which has names {self._names}: enqueue a dict "
                             "keyed by those names")
        if isinstance(vals, (list, tuple)) and not (len(self._dtypes) == 1 and _is_value_list(vals)):
            vals = list(vals)
        else:
            vals = [vals]
        if len(vals) != len(self._dtypes):
            raise ValueError(f"{what} on {self._kind} '{self.name}': {len(vals)} value(s) for a queue of "
                             f"{len(self._dtypes)} component(s)")
        return vals

    def _convert(self, vals: list[Any], many: bool, what: str) -> list[Tensor]:
        tensors = []
        for i, (v, d) in enumerate(zip(vals, self._dtypes)):
            if isinstance(v, Tensor) and v.dtype != d:
                raise FlowjitTypeError(f"{what} on {self._kind} '{self.name}': component {i} ({v.name}) has dtype "
                                       f"{v.dtype}, the queue holds {d}; use tf.cast")
            t = convert_to_tensor(v, dtype=d, name=f"component_{i}")
            declared = self._component_shape(i)
            static = t._shape
            if many and static is not None:
                if not static:
                    raise ValueError(f"{what} on {self._kind} '{self.name}': component {i} ({t.name}) is a scalar; "
                                     "enqueue_many splits its values along dimension 0, so each needs rank >= 1")
                static = static[1:]
            if declared is not None and static is not None and not _static_compatible(declared, static):
                raise ValueError(f"{what} on {self._kind} '{self.name}': component {i} ({t.name}) has "
                                 f"{'element ' if many else ''}shape {shape_str(static)}, the queue's shape "
                                 f"for it is {shape_str(declared)}")
            tensors.append(t)
        return tensors

    def _check_element(self, op: Operation, i: int, shape: tuple[int, ...], many: bool) -> None:
        declared = self._component_shape(i)
        if declared is None:
            return
        if len(declared) != len(shape) or any(d is not None and d != s for d, s in zip(declared, shape)):
            raise errors.InvalidArgumentError(
                None, op, f"{op.where()}: component {i} of an element enqueued into {self._kind} '{self.name}' has "
                f"shape {shape_str(shape)}{' (after splitting dimension 0)' if many else ''}, but the queue expects "
                f"{shape_str(declared)}; reshape the value or build the queue with matching shapes")

    def _host_op(self, type: str, inputs: Sequence[Tensor], compute: Any, name: str,
                 outputs: Sequence[tuple[Shape, Any]], attrs: dict[str, Any] | None = None) -> Operation:
        return self._graph.create_op(type, inputs, compute, name=name, exact_name=True, host=True,
                                     outputs=outputs, attrs=attrs)

    def _scope(self, name: str | None, default: str) -> Any:
        return self._graph.name_scope(name or f"{self._short()}_{default}")

    def enqueue(self, vals: Any, name: str | None = None) -> Operation:
        """An op that adds one element (a value per component: one value, a list, or a dict
        keyed by ``names``), blocking while the queue is full."""
        with self._graph.as_default(), self._scope(name, "enqueue") as scope:
            tensors = self._convert(self._values_list(vals, "enqueue"), False, "enqueue")

            def compute(session: Any, op: Operation, xs: list[np.ndarray]) -> list[np.ndarray]:
                element = []
                for i, (x, d) in enumerate(zip(xs, self._dtypes)):
                    arr = np.array(x, dtype=d.np, copy=True)
                    self._check_element(op, i, arr.shape, False)
                    element.append(arr)
                self._state(session, op).put([tuple(element)], op)
                return []

            return self._host_op("QueueEnqueueV2", tensors, compute, scope.rstrip("/"), [])

    def enqueue_many(self, vals: Any, name: str | None = None) -> Operation:
        """An op that splits each component along dimension 0 and enqueues the slices as
        elements, in order, blocking while the queue is full."""
        with self._graph.as_default(), self._scope(name, "EnqueueMany") as scope:
            tensors = self._convert(self._values_list(vals, "enqueue_many"), True, "enqueue_many")

            def compute(session: Any, op: Operation, xs: list[np.ndarray]) -> list[np.ndarray]:
                comps = []
                for i, (x, d) in enumerate(zip(xs, self._dtypes)):
                    arr = np.array(x, dtype=d.np, copy=True)
                    if arr.ndim == 0:
                        raise errors.InvalidArgumentError(
                            None, op, f"{op.where()}: component {i} given to enqueue_many on {self._kind} "
                            f"'{self.name}' is a scalar; it needs rank >= 1 (the elements along dimension 0)")
                    self._check_element(op, i, arr.shape[1:], True)
                    comps.append(arr)
                sizes = {c.shape[0] for c in comps}
                if len(sizes) > 1:
                    raise errors.InvalidArgumentError(
                        None, op, f"{op.where()}: enqueue_many on {self._kind} '{self.name}' got components with "
                        f"different sizes along dimension 0 ({', '.join(str(c.shape) for c in comps)}); "
                        "each must hold the same number of elements")
                n = comps[0].shape[0]
                self._state(session, op).put([tuple(c[j] for c in comps) for j in range(n)], op)
                return []

            return self._host_op("QueueEnqueueManyV2", tensors, compute, scope.rstrip("/"), [])

    def _outputs(self, tensors: list[Tensor]) -> Any:
        if self._names is not None:
            return dict(zip(self._names, tensors))
        return tensors[0] if len(tensors) == 1 else tensors

    def dequeue(self, name: str | None = None) -> Any:
        """One element: a tensor for a one-component queue, else a list (a dict with names);
        blocks until an element is there, raises OutOfRangeError once closed and empty."""
        with self._graph.as_default(), self._scope(name, "Dequeue") as scope:
            def compute(session: Any, op: Operation, xs: list[np.ndarray]) -> list[np.ndarray]:
                return list(self._state(session, op).take(1, False, op)[0])

            specs = [(self._component_shape(i), d) for i, d in enumerate(self._dtypes)]
            op = self._host_op("QueueDequeueV2", [], compute, scope.rstrip("/"), specs)
        return self._outputs(op.outputs)

    def _dequeue_n(self, n: Any, name: str | None, default: str, type: str, up_to: bool) -> Any:
        with self._graph.as_default(), self._scope(name, default) as scope:
            if isinstance(n, (int, np.integer)) and not isinstance(n, bool):
                if n < 0:
                    raise ValueError(f"{default} on {self._kind} '{self.name}': n must be >= 0, got {n}")
                inputs, static_n = [], int(n)
            else:
                t = convert_to_tensor(n, dtype="int32", name="n")
                if t._shape not in (None, ()):
                    raise ValueError(f"{default} on {self._kind} '{self.name}': n must be a scalar, got {t.name} of "
                                     f"shape {shape_str(t._shape)}")
                inputs, static_n = [t], None

            def compute(session: Any, op: Operation, xs: list[np.ndarray]) -> list[np.ndarray]:
                count = int(xs[0]) if xs else static_n
                if count < 0:
                    raise errors.InvalidArgumentError(None, op, f"{op.where()}: n must be >= 0, got {count}")
                got = self._state(session, op).take(count, up_to, op)
                return [self._batch(op, i, [e[i] for e in got]) for i in range(len(self._dtypes))]

            lead = None if up_to else static_n
            specs = [(None if s is None else (lead, *s), d)
                     for s, d in zip((self._component_shape(i) for i in range(len(self._dtypes))), self._dtypes)]
            op = self._host_op(type, inputs, compute, scope.rstrip("/"), specs)
        return self._outputs(op.outputs)

    def _batch(self, op: Operation, i: int, parts: list[np.ndarray]) -> np.ndarray:
        """Stack one component of the dequeued elements into a batch."""
        d = self._dtypes[i].np
        if not parts:
            declared = self._component_shape(i)
            if declared is None or None in declared:
                raise errors.InvalidArgumentError(
                    None, op, f"{op.where()}: an empty batch of component {i} of {self._kind} '{self.name}' has "
                    f"no known shape ({shape_str(declared)}); dequeue at least one element")
            return np.zeros((0, *declared), d)
        first = parts[0].shape
        if any(p.shape != first for p in parts):
            raise errors.InvalidArgumentError(
                None, op, f"{op.where()}: {self._kind} '{self.name}' was built without shapes and holds elements "
                f"of different shapes for component {i} ({sorted({shape_str(p.shape) for p in parts})}), which "
                "cannot be batched; give the queue shapes, or use a PaddingFIFOQueue to pad them")
        return np.stack(parts).astype(d, copy=False)

    def dequeue_many(self, n: Any, name: str | None = None) -> Any:
        """n elements stacked along a new dimension 0 (n an int or an int32 scalar tensor);
        blocks until n are there; once closed with fewer, raises OutOfRangeError and leaves
        them in the queue."""
        return self._dequeue_n(n, name, "DequeueMany", "QueueDequeueManyV2", False)

    def dequeue_up_to(self, n: Any, name: str | None = None) -> Any:
        """As ``dequeue_many``, but once the queue is closed it returns the last, smaller
        batch (OutOfRangeError only when nothing is left)."""
        return self._dequeue_n(n, name, "DequeueUpTo", "QueueDequeueUpToV2", True)

    def size(self, name: str | None = None) -> Tensor:
        """The number of elements in the queue now (an int32 scalar)."""
        with self._graph.as_default(), self._scope(name, "Size") as scope:
            def compute(session: Any, op: Operation, xs: list[np.ndarray]) -> list[np.ndarray]:
                return [np.asarray(self._state(session, op).size(), np.int32)]

            return self._host_op("QueueSizeV2", [], compute, scope.rstrip("/"), [((), "int32")]).outputs[0]

    def close(self, cancel_pending_enqueues: bool = False, name: str | None = None) -> Operation:
        """An op that closes the queue: later enqueues fail, dequeues drain what is left;
        with ``cancel_pending_enqueues`` the enqueues waiting now fail too."""
        with self._graph.as_default(), self._scope(name, "Close") as scope:
            def compute(session: Any, op: Operation, xs: list[np.ndarray]) -> list[np.ndarray]:
                self._state(session, op).close(bool(op.attrs["cancel_pending_enqueues"]))
                return []

            return self._host_op("QueueCloseV2", [], compute, scope.rstrip("/"), [],
                                 attrs={"cancel_pending_enqueues": bool(cancel_pending_enqueues)})

    def is_closed(self, name: str | None = None) -> Tensor:
        """Whether the queue is closed (a bool scalar)."""
        with self._graph.as_default(), self._scope(name, "IsClosed") as scope:
            def compute(session: Any, op: Operation, xs: list[np.ndarray]) -> list[np.ndarray]:
                state = self._state(session, op)
                with state.cond:
                    return [np.asarray(state.closed)]

            return self._host_op("QueueIsClosedV2", [], compute, scope.rstrip("/"), [((), "bool")]).outputs[0]

    def __repr__(self) -> str:
        return (f"<{type(self).__name__} '{self.name}' capacity={self._capacity} "
                f"dtypes={[str(d) for d in self._dtypes]} shapes={[str(s) for s in self.shapes]}>")


def _is_value_list(vals: Sequence[Any]) -> bool:
    """Whether a list given to a one-component queue is that component's value (numbers)
    rather than a list of one value per component."""
    return len(vals) != 1 and all(isinstance(v, (int, float, bool, np.number, list, tuple)) for v in vals)


def _static_compatible(declared: tuple[int | None, ...], static: tuple[int | None, ...]) -> bool:
    return len(declared) == len(static) and all(a is None or b is None or a == b for a, b in zip(declared, static))


class FIFOQueue(QueueBase):
    """A queue that dequeues elements in the order they were enqueued (``tf.FIFOQueue``).

    ``shapes`` (one fully defined shape per component) lets ``dequeue_many`` give static
    shapes; without it any shapes may be enqueued, and a batch needs them equal.
    """

    _kind = "FIFOQueue"
    _op_type = "FIFOQueueV2"

    def __init__(self, capacity: int, dtypes: Any, shapes: Any = None, names: Any = None,
                 shared_name: str | None = None, name: str = "fifo_queue"):
        super().__init__(capacity, dtypes, shapes, names, shared_name, name)


class PaddingFIFOQueue(QueueBase):
    """A FIFOQueue whose shapes may have unknown (``None``) dimensions; ``dequeue_many`` and
    ``dequeue_up_to`` pad each component with zeros to the largest element in the batch
    (``tf.PaddingFIFOQueue``)."""

    _kind = "PaddingFIFOQueue"
    _op_type = "PaddingFIFOQueueV2"

    def __init__(self, capacity: int, dtypes: Any, shapes: Any, names: Any = None, shared_name: str | None = None,
                 name: str = "padding_fifo_queue"):
        if shapes is None:
            raise ValueError(f"PaddingFIFOQueue {name!r} needs shapes, one per component (None for the dimensions "
                             "that vary, e.g. shapes=[[None], []])")
        super().__init__(capacity, dtypes, shapes, names, shared_name, name, partial_shapes=True)

    def _batch(self, op: Operation, i: int, parts: list[np.ndarray]) -> np.ndarray:
        if not parts:
            declared = self._component_shape(i)
            return np.zeros((0, *(0 if s is None else s for s in declared)), self._dtypes[i].np)
        target = tuple(max(p.shape[k] for p in parts) for k in range(parts[0].ndim))
        out = np.zeros((len(parts), *target), self._dtypes[i].np)
        for j, p in enumerate(parts):
            out[(j, *(slice(0, s) for s in p.shape))] = p
        return out


class RandomShuffleQueue(QueueBase):
    """A queue that dequeues a uniformly random element (``tf.RandomShuffleQueue``), keeping
    at least ``min_after_dequeue`` elements after each dequeue until it is closed, so that
    the draws mix well."""

    _kind = "RandomShuffleQueue"
    _op_type = "RandomShuffleQueueV2"

    def __init__(self, capacity: int, min_after_dequeue: int, dtypes: Any, shapes: Any = None, names: Any = None,
                 seed: int | None = None, shared_name: str | None = None, name: str = "random_shuffle_queue"):
        if isinstance(min_after_dequeue, bool) or not isinstance(min_after_dequeue, (int, np.integer)) \
                or min_after_dequeue < 0:
            raise ValueError(f"RandomShuffleQueue {name!r}: min_after_dequeue must be an int >= 0, got "
                             f"{min_after_dequeue!r}")
        if min_after_dequeue >= capacity:
            raise ValueError(f"RandomShuffleQueue {name!r}: min_after_dequeue ({min_after_dequeue}) must be below the "
                             f"capacity ({capacity}), or no element could ever be dequeued before close()")
        super().__init__(capacity, dtypes, shapes, names, shared_name, name, seed=seed,
                         min_after_dequeue=min_after_dequeue)

    @property
    def min_after_dequeue(self) -> int:
        return self._min_after_dequeue

    def _make_state(self) -> _QueueState:
        return _QueueState(self, host_rng(self._graph, self._seed, self._queue_op))
