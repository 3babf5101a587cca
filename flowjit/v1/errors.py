"""``tf.errors``: the errors a Session raises, named as TensorFlow 1.x names them.

Each carries the op it is about (``error.op``, may be None) and a message naming it, so
code that catches ``tf.errors.OutOfRangeError`` around an input pipeline works as is.
"""

from __future__ import annotations

from typing import Any

from flowjit.ir.errors import FlowjitError


class OpError(FlowjitError):
    """An error while running the graph: ``op`` is the Operation it concerns."""

    def __init__(self, node_def: Any, op: Any, message: str, *args: Any):
        super().__init__(message)
        self.node_def = node_def
        self.op = op
        self.message = message


class CancelledError(OpError):
    """A blocked queue operation was cancelled (its session or queue closed)."""


class UnknownError(OpError):
    """An error with no better class (e.g. raised by a ``py_func``)."""


class InvalidArgumentError(OpError, ValueError):
    """A bad argument: an unfed placeholder, a fed value of the wrong shape or dtype."""


class NotFoundError(OpError):
    """A file or name that does not exist (e.g. a checkpoint)."""


class AlreadyExistsError(OpError):
    pass


class ResourceExhaustedError(OpError):
    pass


class FailedPreconditionError(OpError):
    """An op ran before what it needs, e.g. reading a variable before it is initialized."""


class AbortedError(OpError):
    pass


class OutOfRangeError(OpError):
    """A dequeue from a closed queue that holds too few elements: the input is exhausted."""


class UnimplementedError(OpError):
    pass


class InternalError(OpError):
    pass
