"""The code generator of each device kind, as the runtime finds it.

One table maps a device kind to the module implementing ``flowjit.lowering.backend.Backend``
for it; the module is imported the first time a program is compiled for that kind, so
``import flowjit`` loads no compiler (llvmlite for the CPU, numba.cuda and cupy for CUDA).
Adding a backend is one module and one row here.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from flowjit.ir.errors import FlowjitError

if TYPE_CHECKING:  # the interface's module loads with the loop IR, by the first compile
    from flowjit.lowering.backend import Backend

# Device kind -> the module whose ``BACKEND`` compiles for it.
CODE_GENERATORS = {
    "cpu": "flowjit.codegen_cpu.backend",
    "cuda": "flowjit.codegen_cuda.backend",
}


def device_kind(device: str) -> str:
    """``"cuda"`` for ``"cuda:1"`` (a local device name)."""
    return device.rpartition("/")[2].partition(":")[0]


def code_generator(device: str) -> Backend:
    """The backend that compiles programs for ``device`` (``"cpu:0"``, ``"cuda:1"``)."""
    kind = device_kind(device)
    module = CODE_GENERATORS.get(kind)
    if module is None:
        raise FlowjitError(f"no code generator for device {device!r} (kind {kind!r}); "
                           f"the kinds with one: {', '.join(CODE_GENERATORS)}")
    return importlib.import_module(module).BACKEND
