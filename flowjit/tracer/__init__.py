"""The tracer: Tracer values, pytrees, ``@function`` and the NumPy-like op surface."""

from flowjit.tracer.core import Trace, Tracer, bind, current_trace
from flowjit.tracer.function import ShapeDtype, TracedFunction, function

__all__ = ["ShapeDtype", "Trace", "TracedFunction", "Tracer", "bind", "current_trace", "function"]
