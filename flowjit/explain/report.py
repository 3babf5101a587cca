"""What ``fj.explain`` returns: the ``Explanation`` of a program, its steps
(``KernelReport``) and its fusion boundaries (``BoundaryReport``), as plain data.

``flowjit.explain.core`` builds them; ``str()`` of an ``Explanation`` is the table that
``flowjit.explain.text`` lays out (which reads their fields and imports none of explain's
modules), ``to_json()`` a JSON-ready dict.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from flowjit.explain.text import render_text
from flowjit.passes.fusion import FusionBoundary


@dataclass
class KernelReport:
    """One step of the program (see ``flowjit.explain.core``): ``kind`` is ``kernel``,
    ``blas``, ``library``, ``random``, ``transfer``, ``control`` or ``op``; ``block``
    names the control op's block it runs in ("" at the top); times are seconds."""

    index: int
    name: str
    kind: str
    ops: list[str]
    lines: str
    device: str
    outputs: list[str]
    bytes_read: int
    bytes_written: int
    flops: int
    bound: str
    predicted_s: float | None
    measured_s: float | None = None
    fraction_of_bound: float | None = None
    block: str = ""
    note: str = ""


@dataclass(frozen=True)
class BoundaryReport(FusionBoundary):
    """A fusion boundary as the fusion pass recorded it, in ``block`` ("" at the top)."""

    block: str = ""


@dataclass
class Explanation:
    """What ``fj.explain`` returns: the kernels in execution order, the fusion
    boundaries with their reasons, the machine's bounds, and the totals; ``str()`` is the
    table ``flowjit explain`` prints and ``to_json()`` a JSON-ready dict."""

    function: str
    arguments: list[str]
    stage: str
    driver: str
    kernels: list[KernelReport]
    boundaries: list[BoundaryReport]
    machine: dict[str, Any]
    bytes_moved: int = 0
    flops: int = 0
    predicted_s: float = 0.0
    measured_s: float | None = None
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """The explanation as plain data (``json.dumps`` takes it as it is)."""
        return dataclasses.asdict(self)

    def __str__(self) -> str:
        return render_text(self)
