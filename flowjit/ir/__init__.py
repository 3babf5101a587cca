"""The IR: dtypes, types, SSA values and ops, the primitive registry, text form, verifier
and the NumPy reference interpreter. Nothing here imports the rest of flowjit."""

# The primitives' declarations register themselves on import: every user of the IR has them.
from flowjit.ir import primitives  # noqa: E402, F401  (last: they build on everything above)
from flowjit.ir.builder import Builder, new_function
from flowjit.ir.core import Block, Function, Op, SourceLoc, Value
from flowjit.ir.dtypes import DType
from flowjit.ir.errors import FlowjitError, FlowjitTypeError, ParseError, ShapeError, TracerError, VerifyError
from flowjit.ir.interpreter import interpret
from flowjit.ir.parser import parse
from flowjit.ir.printer import print_function
from flowjit.ir.registry import Primitive, all_primitives, get
from flowjit.ir.types import TensorType
from flowjit.ir.verifier import verify

__all__ = [
    "Block", "Builder", "DType", "FlowjitError", "FlowjitTypeError", "Function", "Op", "ParseError",
    "Primitive", "ShapeError", "SourceLoc", "TensorType", "TracerError", "Value", "VerifyError",
    "all_primitives", "get", "interpret", "new_function", "parse", "print_function", "verify",
]
