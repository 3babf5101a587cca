"""Ahead of time: a traced program as a C shared library with a header and a manifest
(``export``, ``flowjit compile``), and such a library as a Python callable
(``load_compiled``, which loads no compiler and calls no tracer).

Layout of a build directory for NAME: ``libNAME.so`` (entry ``int32_t NAME(const
NAME_args *in, NAME_results *out, void *scratch)``: see ``NAME.h``), ``NAME.h``,
``NAME.json`` (the manifest: arguments, results, pytrees, versions, CPU, digest),
``NAME.o``, and ``NAME.safetensors`` with the values of the Variables the function reads.
"""

# exporter imports the tracer and the compiler inside its functions only.
from __future__ import annotations

from .exporter import Exported, export
from .loader import CompiledFunction, load_compiled
from .manifest import AOTError

__all__ = ["AOTError", "CompiledFunction", "Exported", "export", "load_compiled"]
