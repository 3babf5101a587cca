"""The runtime: turns a Function into an ``Executable`` and runs it on NumPy arrays."""

from flowjit.runtime.executable import Executable, compile_function

__all__ = ["Executable", "compile_function"]
