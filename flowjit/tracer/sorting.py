"""Sorting and searching: ``sort``, ``argsort``, ``searchsorted``, ``partition``, ``unique``
(where shapes are static)."""

from __future__ import annotations

__all__: list[str] = []
