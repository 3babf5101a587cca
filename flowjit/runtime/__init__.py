"""The runtime: runs the pass pipeline and turns a Function into an ``Executable``."""

# rendezvous registers the channel of the send/recv primitives' references (flowjit.ir cannot
# import the runtime), so a partitioned program runs on the interpreter too.
from flowjit.runtime import rendezvous  # noqa: F401
from flowjit.runtime.dispatch import compile_function
from flowjit.runtime.executable import STAGES, Executable, lower

__all__ = ["STAGES", "Executable", "compile_function", "lower"]
