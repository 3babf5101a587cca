"""NumPy's everyday functions beyond the array API's core (``roll``, ``diag``, ``linspace``,
``hypot``...), written on the registry's primitives: traced, compiled and differentiated as
the primitives they are made of, and what NumPy's own functions trace as on traced arrays."""

from __future__ import annotations

__all__: list[str] = []
