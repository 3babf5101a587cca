"""TensorFlow 1.x's queue-based input pipelines (``tf.train.batch``, ``tf.train.slice_input_producer``...).

Each helper builds queues and enqueue ops and registers a ``QueueRunner`` (with
``add_queue_runner``) that ``tf.train.start_queue_runners`` starts; the returned tensors
are dequeues, so every ``Session.run`` of them takes the next element or batch. The
guarantees, as in TensorFlow 1.x:

- ``limit_epochs``/``num_epochs``: the producer yields its input exactly ``num_epochs``
  times per session, then its runner closes its queue; consumers drain it and then get
  ``OutOfRangeError`` (with ``allow_smaller_final_batch`` the last, smaller batch first).
  The epoch count is per session and needs no initializer (TensorFlow keeps it in a local
  variable; running ``tf.local_variables_initializer()`` as TF programs do is harmless).
- ``shuffle=True`` draws a new permutation of the input every epoch, on the host with
  NumPy; with a graph seed (``tf.set_random_seed``) or ``seed``, every session draws the
  same permutations.
- ``batch``/``shuffle_batch`` return what they were given, batched: a dict for a dict, a
  list for a list of several tensors, a single tensor for one tensor or a list of one.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from flowjit.v1 import errors
from flowjit.v1.graph import Operation, Shape, Tensor, get_default_graph, shape_from, shape_str
from flowjit.v1.ops import constant, convert_to_tensor, gather
from flowjit.v1.queues import FIFOQueue, PaddingFIFOQueue, QueueBase, RandomShuffleQueue, host_rng
from flowjit.v1.train.queue_runner import QueueRunner, add_queue_runner

__all__ = ["limit_epochs", "random_shuffle", "input_producer", "range_input_producer", "slice_input_producer",
           "batch", "batch_join", "shuffle_batch", "shuffle_batch_join"]


def _convert(value: Any, name: str) -> Tensor:
    return convert_to_tensor(value, name=name)


class _EpochCounter:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.count = 0


def limit_epochs(tensor: Any, num_epochs: int | None = None, name: str | None = None) -> Tensor:
    """``tensor``, which may be run ``num_epochs`` times per session; the next run raises
    ``OutOfRangeError`` (None: no limit, the tensor itself is returned)."""
    if num_epochs is None:
        return _convert(tensor, "limit_epochs_input")
    if isinstance(num_epochs, bool) or not isinstance(num_epochs, (int, np.integer)) or num_epochs <= 0:
        raise ValueError(f"limit_epochs: num_epochs must be a positive int or None, got {num_epochs!r}")
    limit = int(num_epochs)
    g = get_default_graph()
    with g.name_scope(name or "limit_epochs") as scope:
        t = _convert(tensor, "tensor")

        def compute(session: Any, op: Operation, xs: list[np.ndarray]) -> list[np.ndarray]:
            counter = session.resource(op, _EpochCounter)
            with counter.lock:
                if counter.count >= limit:
                    raise errors.OutOfRangeError(
                        None, op, f"{op.where()}: reached the limit of {limit} epoch(s) (the input is exhausted)")
                counter.count += 1
            return [xs[0]]

        op = g.create_op("LimitEpochs", [t], compute, name=scope.rstrip("/"), exact_name=True, host=True,
                         outputs=[(t._shape, t.dtype)], attrs={"num_epochs": limit})
    return op.outputs[0]


class _HostRandom:
    def __init__(self, rng: np.random.Generator):
        self.lock = threading.Lock()
        self.rng = rng


def random_shuffle(value: Any, seed: int | None = None, name: str | None = None) -> Tensor:
    """``value`` with its elements along dimension 0 in a new random order on every run
    (``tf.random_shuffle``), drawn on the host with NumPy, seeded as TensorFlow seeds ops."""
    g = get_default_graph()
    with g.name_scope(name or "random_shuffle") as scope:
        t = _convert(value, "value")
        if t._shape is not None and len(t._shape) == 0:
            raise ValueError(f"random_shuffle: {t.name} is a scalar; it shuffles along dimension 0 (rank >= 1)")

        def compute(session: Any, op: Operation, xs: list[np.ndarray]) -> list[np.ndarray]:
            state = session.resource(op, lambda: _HostRandom(host_rng(op.graph, seed, op)))
            with state.lock:
                perm = state.rng.permutation(len(xs[0]))
            return [np.asarray(xs[0])[perm]]

        op = g.create_op("RandomShuffle", [t], compute, name=scope.rstrip("/"), exact_name=True, host=True,
                         outputs=[(t._shape, t.dtype)], attrs={"seed": seed})
    return op.outputs[0]


def input_producer(input_tensor: Any, element_shape: Any = None, num_epochs: int | None = None, shuffle: bool = True,
                   seed: int | None = None, capacity: int = 32, shared_name: str | None = None,
                   summary_name: str | None = None, name: str | None = None, cancel_op: Any = None) -> FIFOQueue:
    """A FIFOQueue fed with the rows of ``input_tensor`` (split along dimension 0), once per
    epoch, in a new random order each epoch if ``shuffle``; its QueueRunner is registered.
    Returns the queue: ``dequeue()`` it for one row at a time."""
    g = get_default_graph()
    with g.name_scope(name or "input_producer"):
        t = _convert(input_tensor, "input_tensor")
        shape = _merge(None if t._shape is None else t._shape[1:], shape_from(element_shape))
        if shape is None or None in shape:
            raise ValueError(f"input_producer: {t.name} has shape {shape_str(t._shape)}: either it must have a fully "
                             "defined shape beyond dimension 0, or element_shape must be given")
        if shuffle:
            t = random_shuffle(t, seed=seed)
        t = limit_epochs(t, num_epochs)
        q = FIFOQueue(capacity=capacity, dtypes=[t.dtype], shapes=[shape], shared_name=shared_name)
        enq = q.enqueue_many([t])
        add_queue_runner(QueueRunner(q, [enq], cancel_op=cancel_op))
    return q


def _merge(a: Shape, b: Shape) -> Shape:
    if a is None:
        return b
    if b is None:
        return a
    if len(a) != len(b) or any(x is not None and y is not None and x != y for x, y in zip(a, b)):
        raise ValueError(f"input_producer: element_shape {shape_str(b)} does not fit the input's element shape "
                         f"{shape_str(a)}")
    return tuple(x if x is not None else y for x, y in zip(a, b))


def _host_range(t: Tensor) -> Tensor:
    """0, 1, ..., n-1 for the length n of ``t`` along dimension 0, known only when it runs."""
    def compute(session: Any, op: Operation, xs: list[np.ndarray]) -> list[np.ndarray]:
        return [np.arange(np.shape(xs[0])[0], dtype=np.int32)]

    return t.graph.create_op("InputRange", [t], compute, name="range", host=True, outputs=[((None,), "int32")]
                             ).outputs[0]


def range_input_producer(limit: Any, num_epochs: int | None = None, shuffle: bool = True, seed: int | None = None,
                         capacity: int = 32, shared_name: str | None = None, name: str | None = None) -> FIFOQueue:
    """A queue of the integers 0 .. limit-1 (int32), each epoch in a new random order if
    ``shuffle``, ``num_epochs`` times (None: forever). ``limit`` is an int or a scalar tensor."""
    g = get_default_graph()
    with g.name_scope(name or "input_producer"):
        if isinstance(limit, (int, np.integer)) and not isinstance(limit, bool):
            r = constant(np.arange(int(limit), dtype=np.int32), name="range")
        else:
            lim = _convert(limit, "limit")

            def compute(session: Any, op: Operation, xs: list[np.ndarray]) -> list[np.ndarray]:
                return [np.arange(int(xs[0]), dtype=np.int32)]

            r = g.create_op("Range", [lim], compute, name="range", host=True, outputs=[((None,), "int32")]
                            ).outputs[0]
        return input_producer(r, [], num_epochs, shuffle, seed, capacity, shared_name, None, None)


def slice_input_producer(tensor_list: Sequence[Any], num_epochs: int | None = None, shuffle: bool = True,
                         seed: int | None = None, capacity: int = 32, shared_name: str | None = None,
                         name: str | None = None) -> list[Tensor]:
    """One slice (row) of each tensor in ``tensor_list`` per run, the same row of each: a
    queue of row indices (shuffled per epoch if ``shuffle``, ``num_epochs`` times) gathers
    them. The tensors must agree on dimension 0."""
    g = get_default_graph()
    with g.name_scope(name or "input_producer"):
        tensors = [_convert(t, "input") for t in tensor_list]
        if not tensors:
            raise ValueError("slice_input_producer needs at least one tensor")
        sizes = {t._shape[0] for t in tensors if t._shape}
        if None not in sizes and len(sizes) > 1:
            raise ValueError("slice_input_producer: the tensors differ in dimension 0 ("
                             + ", ".join(f"{t.name} {shape_str(t._shape)}" for t in tensors) + "); each row needs a "
                             "slice of every tensor")
        first = tensors[0]._shape
        if first and first[0] is not None:
            queue = range_input_producer(first[0], num_epochs, shuffle, seed, capacity, shared_name)
        else:  # the number of rows is known only when the tensor is computed
            queue = input_producer(_host_range(tensors[0]), [], num_epochs, shuffle, seed, capacity, shared_name)
        index = queue.dequeue()
        return [gather(t, index) for t in tensors]


# ---- batching ------------------------------------------------------------------------------------------------------


def _flatten(tensors: Any, what: str) -> tuple[list[Tensor], Any]:
    """The tensors of a dict/list/single tensor, and how to give a batch of them back."""
    if isinstance(tensors, dict):
        keys = sorted(tensors)
        return [_convert(tensors[k], "input") for k in keys], ("dict", keys)
    if isinstance(tensors, (list, tuple)):
        if not tensors:
            raise ValueError(f"{what} needs at least one tensor to batch")
        return [_convert(t, "input") for t in tensors], ("list", None)
    return [_convert(tensors, "input")], ("list", None)


def _restore(kind: Any, dequeued: Any) -> Any:
    tag, keys = kind
    if tag == "dict":
        parts = dequeued if isinstance(dequeued, list) else [dequeued]
        return dict(zip(keys, parts))
    return dequeued  # one component: a single tensor, as TensorFlow returns it


def _batch_shapes(lists: list[list[Tensor]], shapes: Any, enqueue_many: bool, what: str) -> list[Shape]:
    if shapes is not None:
        if not isinstance(shapes, (list, tuple)) or len(shapes) != len(lists[0]):
            raise ValueError(f"{what}: give one shape per tensor ({len(lists[0])}), got shapes={shapes!r}")
        return [shape_from(s) for s in shapes]
    out: list[Shape] = []
    for i in range(len(lists[0])):
        merged: Shape = None
        for tl in lists:
            t = tl[i]
            if t._shape is None:
                raise ValueError(f"{what}: cannot infer the rank of {t.name}; pass shapes=[...]")
            s = t._shape[1:] if enqueue_many else t._shape
            if enqueue_many and not t._shape:
                raise ValueError(f"{what}: {t.name} is a scalar, but enqueue_many=True splits dimension 0")
            merged = s if merged is None else tuple(a if a is not None else b for a, b in zip(merged, s))
        out.append(merged)
    return out


def _check_lists(lists: list[list[Tensor]], what: str) -> None:
    n = len(lists[0])
    for tl in lists:
        if len(tl) != n or any(a.dtype != b.dtype for a, b in zip(tl, lists[0])):
            raise ValueError(f"{what}: every list of tensors must have the same number of tensors with the same "
                             "dtypes")


def _make_batch(lists: list[list[Tensor]], kind: Any, batch_size: Any, queue: QueueBase, num_threads: int,
                enqueue_many: bool, allow_smaller_final_batch: bool, name: str | None) -> Any:
    enqueue = queue.enqueue_many if enqueue_many else queue.enqueue
    if len(lists) == 1:
        enqueue_ops = [enqueue(lists[0])] * int(num_threads)
    else:
        enqueue_ops = [enqueue(tl) for tl in lists]
    add_queue_runner(QueueRunner(queue, enqueue_ops))
    if allow_smaller_final_batch:
        out = queue.dequeue_up_to(batch_size, name=name)
    else:
        out = queue.dequeue_many(batch_size, name=name)
    return _restore(kind, out)


def _check_threads(num_threads: int, what: str) -> None:
    if isinstance(num_threads, bool) or not isinstance(num_threads, (int, np.integer)) or num_threads < 1:
        raise ValueError(f"{what}: num_threads must be a positive int, got {num_threads!r}")


def batch(tensors: Any, batch_size: Any, num_threads: int = 1, capacity: int = 32, enqueue_many: bool = False,
          shapes: Any = None, dynamic_pad: bool = False, allow_smaller_final_batch: bool = False,
          shared_name: str | None = None, name: str | None = None) -> Any:
    """Batches of ``tensors`` (a tensor, list or dict), ``batch_size`` examples each, in order,
    through a FIFOQueue of ``capacity`` filled by ``num_threads`` runner threads. With
    ``enqueue_many`` each tensor is a batch of examples along dimension 0; with
    ``dynamic_pad`` examples of varying shape are zero-padded to the longest in the batch;
    with ``allow_smaller_final_batch`` the last batch may be smaller instead of lost."""
    _check_threads(num_threads, "batch")
    g = get_default_graph()
    with g.name_scope(name or "batch") as scope:
        tl, kind = _flatten(tensors, "batch")
        shp = _batch_shapes([tl], shapes, enqueue_many, "batch")
        dtypes = [t.dtype for t in tl]
        if dynamic_pad:
            queue: QueueBase = PaddingFIFOQueue(capacity, dtypes, shp, shared_name=shared_name)
        else:
            _require_defined(shp, tl, "batch", "or pass dynamic_pad=True to pad them")
            queue = FIFOQueue(capacity, dtypes, shp, shared_name=shared_name)
        return _make_batch([tl], kind, batch_size, queue, num_threads, enqueue_many, allow_smaller_final_batch,
                           scope)


def _joined_lists(tensors_list: Sequence[Any], what: str) -> tuple[list[list[Tensor]], Any]:
    """The flattened lists of a ``*_join`` call (all alike) and their structure."""
    flat = [_flatten(ts, what) for ts in tensors_list]
    if not flat:
        raise ValueError(f"{what} needs at least one list of tensors")
    lists = [f[0] for f in flat]
    _check_lists(lists, what)
    return lists, flat[0][1]


def batch_join(tensors_list: Sequence[Any], batch_size: Any, capacity: int = 32, enqueue_many: bool = False,
               shapes: Any = None, dynamic_pad: bool = False, allow_smaller_final_batch: bool = False,
               shared_name: str | None = None, name: str | None = None) -> Any:
    """As ``batch``, from several lists (or dicts) of tensors alike, one runner thread each,
    so that several readers feed one batch queue."""
    g = get_default_graph()
    with g.name_scope(name or "batch_join") as scope:
        lists, kind = _joined_lists(tensors_list, "batch_join")
        shp = _batch_shapes(lists, shapes, enqueue_many, "batch_join")
        dtypes = [t.dtype for t in lists[0]]
        if dynamic_pad:
            queue: QueueBase = PaddingFIFOQueue(capacity, dtypes, shp, shared_name=shared_name)
        else:
            _require_defined(shp, lists[0], "batch_join", "or pass dynamic_pad=True to pad them")
            queue = FIFOQueue(capacity, dtypes, shp, shared_name=shared_name)
        return _make_batch(lists, kind, batch_size, queue, 1, enqueue_many, allow_smaller_final_batch,
                           scope)


def shuffle_batch(tensors: Any, batch_size: Any, capacity: int, min_after_dequeue: int, num_threads: int = 1,
                  seed: int | None = None, enqueue_many: bool = False, shapes: Any = None,
                  allow_smaller_final_batch: bool = False, shared_name: str | None = None,
                  name: str | None = None) -> Any:
    """Batches of ``tensors`` drawn at random from a RandomShuffleQueue of ``capacity`` that
    keeps at least ``min_after_dequeue`` examples to mix (until its input runs out), filled
    by ``num_threads`` runner threads. Otherwise as ``batch``."""
    _check_threads(num_threads, "shuffle_batch")
    g = get_default_graph()
    with g.name_scope(name or "shuffle_batch") as scope:
        tl, kind = _flatten(tensors, "shuffle_batch")
        shp = _batch_shapes([tl], shapes, enqueue_many, "shuffle_batch")
        _require_defined(shp, tl, "shuffle_batch", "or pass shapes=[...]")
        queue = RandomShuffleQueue(capacity, min_after_dequeue, [t.dtype for t in tl], shp, seed=seed,
                                   shared_name=shared_name)
        return _make_batch([tl], kind, batch_size, queue, num_threads, enqueue_many, allow_smaller_final_batch,
                           scope)


def shuffle_batch_join(tensors_list: Sequence[Any], batch_size: Any, capacity: int, min_after_dequeue: int,
                       seed: int | None = None, enqueue_many: bool = False, shapes: Any = None,
                       allow_smaller_final_batch: bool = False, shared_name: str | None = None,
                       name: str | None = None) -> Any:
    """As ``shuffle_batch``, from several lists (or dicts) of tensors alike, one runner thread each."""
    g = get_default_graph()
    with g.name_scope(name or "shuffle_batch_join") as scope:
        lists, kind = _joined_lists(tensors_list, "shuffle_batch_join")
        shp = _batch_shapes(lists, shapes, enqueue_many, "shuffle_batch_join")
        _require_defined(shp, lists[0], "shuffle_batch_join", "or pass shapes=[...]")
        queue = RandomShuffleQueue(capacity, min_after_dequeue, [t.dtype for t in lists[0]], shp, seed=seed,
                                   shared_name=shared_name)
        return _make_batch(lists, kind, batch_size, queue, 1, enqueue_many, allow_smaller_final_batch,
                           scope)


def _require_defined(shapes: list[Shape], tensors: list[Tensor], what: str, fix: str) -> None:
    for s, t in zip(shapes, tensors):
        if s is None or None in s:
            raise ValueError(f"{what}: the example shape {shape_str(s)} of {t.name} is not fully defined; every "
                             f"example must have the same known shape: pass shapes=[...] {fix}")
