"""The Python array API standard's namespace functions about dtypes and the namespace:
``finfo``, ``iinfo``, ``can_cast``, ``result_type``, ``isdtype``, the constants and
``__array_namespace_info__``."""

from __future__ import annotations

__all__: list[str] = []
