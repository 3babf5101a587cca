"""``fj.explain`` and ``flowjit explain``: a program's kernels, what each moves and
computes, the machine bound that limits it, and why fusion stopped where it did.

``core`` builds the ``Explanation`` (data: dataclasses, ``to_json()``), ``bounds``
measures this machine's memory bandwidth and BLAS rate once and keeps them on disk,
``text`` renders the table. Nothing here loads a compiler on import.
"""

from flowjit.explain.bounds import MachineBounds, machine_bounds
from flowjit.explain.core import BoundaryReport, Explanation, KernelReport, explain

__all__ = ["BoundaryReport", "Explanation", "KernelReport", "MachineBounds", "explain", "machine_bounds"]
