"""flowjit: trace Python array programs into SSA dataflow IR and run them fast.

``import flowjit as fj``; decorate with ``@fj.function``; use ``fj.*`` with NumPy's names.
This module only re-exports the public API. The backends (``codegen_cpu``, ``codegen_cuda``)
load on first use: llvmlite is imported by the first compile, or by the first
``fj.codegen_cpu`` access, not by ``import flowjit``; numba only by the CUDA backend.
"""

import importlib
import sys
from typing import Any

from flowjit import (
    checkpoint,
    debug,
    ir,
    nn,
    optim,  # noqa: E402  (after Variable, which it builds on)
    scipy,
    summary,
)
from flowjit.aot import export, load_compiled
from flowjit.explain import explain
from flowjit.ir.dtypes import (
    DType,
    bool_,
    complex64,
    complex128,
    float16,
    float32,
    float64,
    int8,
    int16,
    int32,
    int64,
    uint8,
    uint16,
    uint32,
    uint64,
)
from flowjit.ir.dtypes import dtype as dtype
from flowjit.ir.errors import (
    AutodiffError,
    AxisError,
    BatchingError,
    FlowjitError,
    FlowjitTypeError,
    ParseError,
    ShapeError,
    TracerError,
    VerifyError,
)
from flowjit.passes.placement import PlacementError
from flowjit.runtime.devices import Device, DeviceError, devices
from flowjit.runtime.profiler import profile
from flowjit.tracer import array_namespace as _array_namespace
from flowjit.tracer import fft, linalg, ops, random
from flowjit.tracer.autodiff import grad, value_and_grad, vjp
from flowjit.tracer.callback import pure_callback
from flowjit.tracer.control_flow import cond, fori_loop, scan, switch, while_loop
from flowjit.tracer.core import device
from flowjit.tracer.custom_gradients import custom_jvp, custom_vjp, stop_gradient
from flowjit.tracer.forward import jvp, linearize
from flowjit.tracer.function import ShapeDtype, TracedFunction, function
from flowjit.tracer.jacobians import hessian, hvp, jacfwd, jacrev
from flowjit.tracer.numpy import namespace as _numpy_namespace
from flowjit.tracer.remat import checkpoint_name, remat, remat_policies
from flowjit.tracer.transforms import vmap
from flowjit.tracer.variables import Variable
from flowjit.version import __version__

# distributed: Ray, an optional extra; validate: statistics and model validation, loaded by fj.validate
_LAZY_MODULES = ("codegen_cpu", "codegen_cuda", "distributed", "validate")


def __getattr__(name: str) -> Any:
    """``fj.codegen_cpu`` and ``fj.codegen_cuda``, imported on first use (a module-level
    ``__getattr__``, PEP 562), so ``import flowjit`` loads no compiler; ``fj.cache_stats``,
    which imports none."""
    if name in _LAZY_MODULES:
        return importlib.import_module(f"flowjit.{name}")
    if name == "cache_stats":
        return _cache_stats
    raise AttributeError(f"module 'flowjit' has no attribute {name!r}")


def _cache_stats() -> dict[str, int]:
    """Kernels this process compiled, took from the disk cache (``loaded``) and reused from
    memory, summed over the backends that ran: the CPU backend's object modules and the
    CUDA backend's kernels. A backend this process never loaded counts nothing (and is not
    imported)."""
    total = {"compiled": 0, "loaded": 0, "reused": 0}
    for module, stats in (("flowjit.codegen_cpu.objcache", "stats"), ("flowjit.codegen_cuda.compile", "kernel_stats")):
        if module in sys.modules:
            counts = getattr(sys.modules[module], stats)()
            for key in total:
                total[key] += counts.get(key, 0)
    return total


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY_MODULES, "cache_stats"])


# The NumPy surface's names (flowjit.tracer.numpy's topic modules) and the array API's
# namespace extras are fj's.
for _module in (_numpy_namespace, _array_namespace):
    globals().update({_name: getattr(_module, _name) for _name in _module.__all__})
del _module
# The standard's main namespace has vecdot beside matmul and tensordot.
vecdot = linalg.vecdot
