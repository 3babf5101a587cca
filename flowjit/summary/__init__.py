"""``fj.summary``: TensorBoard event files of a training run and of a program's graph.

``with fj.summary.create_writer(logdir) as w:`` then ``w.scalar("loss", loss, step)``,
``w.histogram("weights", W, step)`` and ``w.graph(f, *example_args)`` (the program's ops
as TensorBoard nodes, each fused kernel a name scope). Files are written through
tensorboardX (no TensorFlow needed), which loads when a writer is made: ``import
flowjit`` never imports it. ``tensorboard --logdir LOGDIR`` shows them.
"""

from flowjit.summary.graph import function_graph_def
from flowjit.summary.writer import SummaryWriter, create_writer, histogram_summary, scalar_summary

__all__ = ["SummaryWriter", "create_writer", "function_graph_def", "histogram_summary", "scalar_summary"]
