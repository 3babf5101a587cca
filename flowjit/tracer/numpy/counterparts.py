"""The registry of what NumPy's functions trace as: ``np.roll(x, 1)`` on a traced ``x`` calls
the fj function registered under NumPy's name (``protocols`` reads it)."""

from __future__ import annotations

from typing import Any

# NumPy's functions that fj implements (the topic modules, linalg, fft...):
# each registers itself here (``numpy_counterpart``) so ``np.roll(x, 1)`` on a traced x traces.
NUMPY_COUNTERPARTS: dict[str, Any] = {}


def numpy_counterpart(fn: Any, name: str | None = None) -> Any:
    """Register ``fn`` as what NumPy's function ``name`` (default: fn's name; ``linalg.inv``
    for ``np.linalg.inv``) traces as on traced arrays; returns fn (a decorator)."""
    NUMPY_COUNTERPARTS[name or fn.__name__] = fn
    return fn
