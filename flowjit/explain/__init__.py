"""``fj.explain`` and ``flowjit explain``: a program's kernels, what each moves and
computes, the machine bound that limits it, and why fusion stopped where it did.

``core`` builds the ``Explanation``, whose types (dataclasses, ``to_json()``) are in
``report``; ``bounds`` measures this machine's memory bandwidth and BLAS rate once and
keeps them on disk; ``text`` renders the table. Nothing here loads a compiler on import.
"""

from flowjit.explain.bounds import MachineBounds, machine_bounds
from flowjit.explain.core import explain
from flowjit.explain.report import BoundaryReport, Explanation, KernelReport

__all__ = ["BoundaryReport", "Explanation", "KernelReport", "MachineBounds", "explain", "machine_bounds"]
