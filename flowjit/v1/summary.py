"""``tf.summary``: TensorFlow 1.x's summary ops and ``FileWriter``, writing TensorBoard files.

``tf.summary.scalar``/``histogram`` add host ops whose value, when a Session runs them,
is a serialized ``Summary`` proto (a 0-d NumPy object array holding the bytes), as in
TF1; ``merge``/``merge_all`` merge them into one; ``FileWriter(logdir, graph)`` writes
them with ``add_summary(summary, step)`` and the graph (its ops with their types,
shapes, devices and name scopes) with ``add_graph``. The files are those ``fj.summary``
writes (through tensorboardX, loaded when a summary op runs or a writer is made).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from flowjit.ir.dtypes import DType
from flowjit.summary.graph import graph_def, node_def
from flowjit.summary.writer import SummaryWriter, histogram_summary, require_tensorboardx, scalar_summary
from flowjit.v1.graph import Graph, GraphKeys, Operation, Tensor, get_default_graph
from flowjit.v1.ops import convert_to_tensor

# A summary op's value: serialized proto bytes (TensorFlow's tf.string), held in an
# object array so NumPy's bytes dtype cannot drop trailing zero bytes of the proto.
string = DType("string", "object", "O", 8)

__all__ = ["FileWriter", "FileWriterCache", "histogram", "merge", "merge_all", "scalar"]


def _serialized(proto: Any) -> np.ndarray:
    return _serialized_bytes(proto.SerializeToString())


def _serialized_bytes(data: bytes) -> np.ndarray:
    out = np.empty((), dtype=object)
    out[()] = data
    return out


def _summary_op(type: str, name: str, value: Any, make: Any, collections: Sequence[str] | None) -> Tensor:
    tensor = convert_to_tensor(value)

    def compute(session: Any, op: Operation, xs: list[np.ndarray]) -> list[np.ndarray]:
        return [_serialized(_make(op, xs[0]))]

    op = tensor.graph.create_op(type, [tensor], compute, name=name, host=True, outputs=[((), string)],
                                attrs={"make": make})
    for key in [GraphKeys.SUMMARIES] if collections is None else collections:
        tensor.graph.add_to_collection(key, op.outputs[0])
    return op.outputs[0]


def _make(op: Operation, value: np.ndarray) -> Any:
    try:
        return op.attrs["make"](op.name, value)
    except ValueError as e:
        raise ValueError(f"{e} (running {op.where()})") from None


def scalar(name: str, tensor: Any, collections: Sequence[str] | None = None, family: str | None = None) -> Tensor:
    """A summary op of one number (``tensor`` of one element), tagged with its op's name
    (``name`` under the current name scope), added to ``collections`` (default:
    ``GraphKeys.SUMMARIES``, what ``merge_all`` merges)."""
    return _summary_op("ScalarSummary", _family(name, family), tensor, scalar_summary, collections)


def histogram(name: str, values: Any, collections: Sequence[str] | None = None, family: str | None = None) -> Tensor:
    """A summary op of the histogram of ``values`` (a tensor of any shape)."""
    return _summary_op("HistogramSummary", _family(name, family), values, histogram_summary, collections)


def _family(name: str, family: str | None) -> str:
    return f"{family}/{name}" if family else name


def merge(inputs: Sequence[Tensor], collections: Sequence[str] | None = None, name: str | None = None) -> Tensor:
    """One summary op holding every value of the summaries ``inputs``.

    It reads the summaries' own inputs and makes their protos itself, so a session runs
    it beside them rather than after them: host ops chained one after another would
    split the compiled program (its forward pass run twice in a training step)."""
    tensors = [convert_to_tensor(t) for t in inputs]
    leaves: list[Operation] = []
    for t in tensors:
        if t.dtype != string:
            raise TypeError(f"tf.summary.merge: {t.name} is a {t.dtype} tensor, not a summary (made by "
                            "tf.summary.scalar or tf.summary.histogram)")
        leaves += t.op.attrs.get("summaries", [t.op])
    graph = tensors[0].graph if tensors else get_default_graph()

    def compute(session: Any, op: Operation, xs: list[np.ndarray]) -> list[np.ndarray]:
        # A serialized message followed by another parses as their merge: the Summary's
        # repeated values concatenate.
        return [_serialized_bytes(b"".join(_make(s, x).SerializeToString() for s, x in zip(leaves, xs)))]

    op = graph.create_op("MergeSummary", [s.inputs[0] for s in leaves], compute, name=name, host=True,
                         outputs=[((), string)], attrs={"summaries": leaves})
    for key in collections or []:
        graph.add_to_collection(key, op.outputs[0])
    return op.outputs[0]


def merge_all(key: str = GraphKeys.SUMMARIES, scope: str | None = None, name: str | None = None) -> Tensor | None:
    """The merge of every summary in collection ``key`` of the default graph; None when it
    has none (as in TensorFlow)."""
    summaries = get_default_graph().get_collection(key, scope)
    return merge(summaries, name=name) if summaries else None


def summary_class() -> type:
    """TensorFlow's ``Summary`` proto class (``tf.Summary``), as tensorboardX defines it."""
    return require_tensorboardx("tf.Summary").proto.summary_pb2.Summary


def graph_to_graph_def(graph: Graph) -> Any:
    """A v1 graph as TensorBoard's ``GraphDef``: each op a node of its type, with its
    inputs (``op:1`` for a second output, ``^op`` for a control input), device, output
    shapes and dtype; its name scopes are TensorBoard's groups."""
    nodes = []
    for op in graph.get_operations():
        # A merge reads its summaries' inputs (see merge); it is drawn reading the summaries.
        shown = [s.outputs[0] for s in op.attrs["summaries"]] if "summaries" in op.attrs else op.inputs
        inputs = [t.op.name if t.value_index == 0 else t.name for t in shown]
        inputs += [f"^{c.name}" for c in op.control_inputs]
        attrs = {k: _shown(v) for k, v in op.attrs.items() if _shown(v) is not None}
        if op.location:
            attrs["_source"] = op.location
        dtype = op.outputs[0].dtype.name if op.outputs else None
        nodes.append(node_def(op.name, op.type, inputs, op.device, [t._shape for t in op.outputs], dtype, attrs))
    return graph_def(nodes)


_SIMPLE = (bool, int, float, str, np.number, np.bool_)


def _shown(value: Any) -> str | None:
    """An op attribute as TensorBoard's node panel shows it: numbers, strings, tuples of
    them and small constants; None for what has no short text (functions, frames)."""
    if isinstance(value, np.ndarray):
        return np.array2string(value, threshold=16) if value.size <= 16 else f"<{value.dtype} array {value.shape}>"
    if isinstance(value, _SIMPLE) or (isinstance(value, (tuple, list)) and all(isinstance(v, _SIMPLE) for v in value)):
        return str(value)
    return None


class FileWriter:
    """``tf.summary.FileWriter``: writes summaries (``add_summary``) and graphs
    (``add_graph``; ``graph`` given here is written at once) into ``logdir``."""

    def __init__(self, logdir: str | os.PathLike, graph: Graph | None = None, max_queue: int = 10,
                 flush_secs: float = 120, graph_def: Any = None, filename_suffix: str | None = None,
                 session: Any = None):
        self._writer = SummaryWriter(logdir, max_queue, flush_secs, filename_suffix or "")
        if graph is not None:
            self.add_graph(graph)
        if graph_def is not None:
            self._writer.add_graph_def(graph_def)

    def get_logdir(self) -> str:
        return self._writer.logdir

    def add_summary(self, summary: Any, global_step: int | None = None) -> None:
        """Write ``summary``: what a Session returned for a summary op, or a Summary proto."""
        self._writer.add_summary(summary, global_step)

    def add_graph(self, graph: Graph, global_step: int | None = None, graph_def: Any = None) -> None:
        """Write ``graph`` (a ``tf.Graph``, e.g. ``sess.graph``) for TensorBoard's Graphs tab."""
        if not isinstance(graph, Graph):
            raise TypeError(f"FileWriter.add_graph takes a tf.Graph (sess.graph), got {type(graph).__name__}")
        self._writer.add_graph_def(graph_to_graph_def(graph))

    def flush(self) -> None:
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()

    def __enter__(self) -> FileWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class FileWriterCache:
    """``tf.summary.FileWriterCache``: one ``FileWriter`` per log directory, shared by the
    hooks of a training session that write there (a step counter, a summary saver)."""

    _writers: dict[str, FileWriter] = {}

    @classmethod
    def get(cls, logdir: str | os.PathLike) -> FileWriter:
        """The writer of ``logdir``, made on first use."""
        key = os.path.abspath(os.fspath(logdir))
        writer = cls._writers.get(key)
        if writer is None:
            writer = cls._writers[key] = FileWriter(key)
        return writer

    @classmethod
    def clear(cls) -> None:
        """Close and forget every cached writer."""
        writers, cls._writers = list(cls._writers.values()), {}
        for writer in writers:
            writer.close()
