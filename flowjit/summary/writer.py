"""The summary writer: scalars, histograms and graphs into TensorBoard event files.

tensorboardX writes the files (its ``FileWriter`` and ``Summary`` protos, the ones
TensorBoard reads); it is imported when a writer or a summary is made, so a process that
writes no summary never loads it.
"""

from __future__ import annotations

import functools
import os
from typing import Any

import numpy as np

from flowjit.ir.core import Function
from flowjit.summary._tensorboardx import INSTALL_HINT as INSTALL_HINT  # re-exported: the writer defined it before
from flowjit.summary._tensorboardx import require_tensorboardx
from flowjit.summary.graph import function_graph_def
from flowjit.tracer.function import TracedFunction


def _scalar_value(name: str, value: Any) -> float:
    arr = np.asarray(value)
    if arr.size != 1 or arr.dtype.kind not in "biuf":
        raise ValueError(f"summary scalar {name!r}: expected one number, got an array of shape {arr.shape} and "
                         f"dtype {arr.dtype}; log a reduction of it (its mean) or use histogram()")
    return float(arr.reshape(()))


def scalar_summary(name: str, value: Any) -> Any:
    """A ``Summary`` proto holding one scalar (a number or a one-element array)."""
    tbx = require_tensorboardx("a scalar summary")
    return tbx.summary.scalar(name, _scalar_value(name, value))


def histogram_summary(name: str, values: Any) -> Any:
    """A ``Summary`` proto holding the histogram of ``values`` (any shape), with
    TensorFlow's default buckets; every value must be finite, as TensorFlow requires."""
    tbx = require_tensorboardx("a histogram summary")
    arr = np.asarray(values)
    if arr.dtype.kind not in "biuf":
        raise ValueError(f"summary histogram {name!r}: values must be numbers, got dtype {arr.dtype}")
    arr = arr.astype(np.float64).ravel()
    if arr.size == 0:
        raise ValueError(f"summary histogram {name!r}: no values (an array of shape {np.shape(values)})")
    bad = ~np.isfinite(arr)
    if bad.any():
        raise ValueError(f"summary histogram {name!r}: {int(bad.sum())} of {arr.size} values are NaN or infinite; "
                         "check the model for divergence (fj.debug) before logging it")
    return tbx.summary.histogram(name, arr, _tensorflow_buckets())


@functools.cache
def _tensorflow_buckets() -> list[float]:
    # TensorFlow's default histogram bucket edges: +-1e-12 growing by 10% to 1e20, and 0
    # (what TensorBoard's own test data and tensorboardX's 'tensorflow' bins use).
    edges = []
    v = 1e-12
    while v < 1e20:
        edges.append(v)
        v *= 1.1
    return [-e for e in reversed(edges)] + [0.0] + edges


class SummaryWriter:
    """Writes one run's event files into ``logdir`` (created if missing): ``scalar``,
    ``histogram``, ``graph``; buffered, written by ``flush()`` and ``close()`` (and every
    ``flush_secs``). A context manager: leaving the block closes it."""

    def __init__(self, logdir: str | os.PathLike, max_queue: int = 10, flush_secs: float = 120,
                 filename_suffix: str = ""):
        tbx = require_tensorboardx("fj.summary.create_writer")
        self.logdir = os.fspath(logdir)
        self._writer = tbx.FileWriter(self.logdir, max_queue=max_queue, flush_secs=flush_secs,
                                      filename_suffix=filename_suffix)
        self.closed = False

    def _check_open(self, what: str) -> None:
        if self.closed:
            raise ValueError(f"{what} on a closed summary writer ({self.logdir}); make a new one with "
                             "fj.summary.create_writer")

    def add_summary(self, summary: Any, step: int | None = None) -> None:
        """Write a ``Summary`` proto, or its serialized bytes (what a v1 summary op
        returns: ``bytes`` or a 0-d NumPy bytes array), at ``step``."""
        self._check_open("add_summary")
        tbx = require_tensorboardx("add_summary")
        if isinstance(summary, np.ndarray):
            summary = summary.item()
        if isinstance(summary, (bytes, bytearray)):
            summary = tbx.proto.summary_pb2.Summary.FromString(bytes(summary))
        if not isinstance(summary, tbx.proto.summary_pb2.Summary):
            raise TypeError(f"add_summary takes a Summary proto or its serialized bytes, got {type(summary).__name__}")
        self._writer.add_summary(summary, None if step is None else int(step))

    def add_graph_def(self, graph_def: Any) -> None:
        """Write a ``GraphDef`` proto (TensorBoard's Graphs tab shows the last one written)."""
        self._check_open("add_graph_def")
        tbx = require_tensorboardx("add_graph_def")
        self._writer.add_event(tbx.proto.event_pb2.Event(graph_def=graph_def.SerializeToString()))

    def scalar(self, name: str, value: Any, step: int) -> None:
        """Log one number (a Python or NumPy number, a one-element array) as ``name`` at ``step``."""
        self.add_summary(scalar_summary(name, value), step)

    def histogram(self, name: str, values: Any, step: int) -> None:
        """Log the distribution of ``values`` (an array of any shape) as ``name`` at ``step``."""
        self.add_summary(histogram_summary(name, values), step)

    def graph(self, f: Any, *args: Any, stage: str = "fused", **kwargs: Any) -> None:
        """Write the program ``f`` runs for ``args`` (arrays or ``fj.ShapeDtype``) as a
        TensorBoard graph: ``f`` an ``fj.function`` (or a plain function, traced here), or a
        ``Function`` as is. ``stage`` as in ``f.ir``: ``fused`` (default) draws each kernel
        as a name scope holding its ops; ``traced`` the program before any pass."""
        if isinstance(f, Function):
            function = f
        else:
            traced = f if isinstance(f, TracedFunction) else TracedFunction(f)
            function = traced.ir(*args, stage=stage, **kwargs)
            if not isinstance(function, Function):
                raise ValueError(f"summary graph: stage {stage!r} is loop IR, not a dataflow graph; "
                                 "use stage='fused' or an earlier one")
        self.add_graph_def(function_graph_def(function))

    def flush(self) -> None:
        """Write what is buffered to disk now."""
        if not self.closed:
            self._writer.flush()

    def close(self) -> None:
        """Flush and close the event file; later writes raise."""
        if not self.closed:
            self._writer.close()
            self.closed = True

    def __enter__(self) -> SummaryWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<fj.summary writer {self.logdir!r}{' closed' if self.closed else ''}>"


def create_writer(logdir: str | os.PathLike, max_queue: int = 10, flush_secs: float = 120,
                  filename_suffix: str = "") -> SummaryWriter:
    """A ``SummaryWriter`` writing a new event file into ``logdir`` (as
    ``tf.summary.create_file_writer``); needs tensorboardX (``pip install 'flowjit[viz]'``)."""
    if not isinstance(logdir, (str, os.PathLike)) or not os.fspath(logdir):
        raise ValueError(f"create_writer: logdir must be a directory path, got {logdir!r}")
    return SummaryWriter(logdir, max_queue, flush_secs, filename_suffix)


