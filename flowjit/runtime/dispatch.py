"""``compile_function``: a traced Function made ready to run, on one device or several.

The pass pipeline places and fuses the program; a program that stays on its default device
becomes an ``Executable`` (``executable.py``), one placed across devices a
``MultiDeviceExecutable`` (``multi_device.py``) whose partitions are each an ``Executable``
on its device (or a remote task's). Either way every device's code goes through the same
path below fusion: lowered once, compiled by that device kind's code generator.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from flowjit.ir.core import Function
from flowjit.passes.pipeline import DEFAULT_PIPELINE, Pipeline
from flowjit.runtime.collection import collection_deferred
from flowjit.runtime.executable import Executable, chosen_backend, optimize

if TYPE_CHECKING:
    from flowjit.runtime.multi_device import MultiDeviceExecutable


def compile_function(function: Function, interpret: bool = False, device: str | None = None,
                     passes: Mapping[str, bool] | Iterable[str] | None = None,
                     pipeline: Pipeline = DEFAULT_PIPELINE, backend: str | None = None,
                     fastmath: bool = False, parallel: bool = True,
                     soft: bool = False) -> Executable | MultiDeviceExecutable:
    """Prepare ``function`` to run: the traced program as it is when ``interpret`` (the
    unfused debug mode), else the output of the pass pipeline on ``backend`` (default
    ``FLOWJIT_BACKEND`` or ``llvm``: lower the fused kernels to loop IR and compile them
    with the device's code generator, with LLVM's ``fast`` flags on float ops when
    ``fastmath``; ``interpreter`` runs the optimized program on the NumPy interpreter).
    ``device`` is the default device (``cpu:0``): where arguments live and unplaced ops go.
    A program placed on other devices than ``cpu:0`` becomes a ``MultiDeviceExecutable``:
    one partition per device, run concurrently. ``soft`` (TensorFlow's soft placement): an
    op whose ``fj.device`` cannot run it runs on the cheapest device that can, instead of
    raising PlacementError."""
    with collection_deferred():   # runtime.collection
        if interpret:
            return Executable(function, "interpreter", device or "cpu:0")
        result, target = optimize(function, device, passes, pipeline, soft)
        chosen = chosen_backend(backend)
        placed = {op.device for op in result.function.body.ops} | set(result.function.arg_devices)
        if placed - {None, "cpu:0"}:
            # Its device threads, queues and step ids load with the first placed program.
            from flowjit.runtime.multi_device import MultiDeviceExecutable
            return MultiDeviceExecutable(result.function, chosen, target.default, result, fastmath=fastmath)
        return Executable(result.function, chosen, target.default, result, fastmath=fastmath, parallel=parallel)
