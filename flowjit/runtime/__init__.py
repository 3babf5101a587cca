"""The runtime: runs the pass pipeline and turns a Function into an ``Executable``."""

from flowjit.runtime.executable import STAGES, Executable, compile_function, lower

__all__ = ["STAGES", "Executable", "compile_function", "lower"]
