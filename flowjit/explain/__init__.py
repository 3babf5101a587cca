"""``fj.explain`` and ``flowjit explain``: a program's kernels, what each moves and
computes, the machine bound that limits it, and why fusion stopped where it did.

``core`` builds the ``Explanation``, whose types (dataclasses, ``to_json()``) are in
``report``; ``bounds`` measures this machine's memory bandwidth and BLAS rate once and
keeps them on disk; ``text`` renders the table. ``import flowjit`` loads none of them
(5 ms of its import): ``explain`` loads them on its first call, the other names on first
use.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from flowjit.explain.report import Explanation

# name -> the module of this package that defines it
_EXPORTS = {"BoundaryReport": "report", "Explanation": "report", "KernelReport": "report",
            "MachineBounds": "bounds", "machine_bounds": "bounds"}


def explain(f: Callable[..., Any], *args: Any, run: bool = False, stage: str = "fused",
            **kwargs: Any) -> Explanation:
    """Explain how ``f`` (an ``fj.function`` or a plain function) runs on ``args`` (arrays
    or ``fj.ShapeDtype``): its kernels in execution order with their ops, the user's
    lines, bytes read and written, FLOPs, the bound that applies and the time it
    predicts, then every fusion boundary with the reason the fusion pass recorded.
    ``run=True`` also times each kernel and the whole program. ``stage``: a pipeline stage
    before ``fused`` lists each op as a step of its own (see ``flowjit.explain.core``)."""
    from flowjit.explain.core import explain as explain_program
    return explain_program(f, *args, run=run, stage=stage, **kwargs)


def __getattr__(name: str) -> Any:
    where = _EXPORTS.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{where}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))


__all__ = ["BoundaryReport", "Explanation", "KernelReport", "MachineBounds", "explain", "machine_bounds"]
