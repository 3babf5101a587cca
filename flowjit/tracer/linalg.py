"""``fj.linalg``: the array API's ``linalg`` extension and NumPy's ``numpy.linalg``
(``norm``, ``inv``, ``solve``, ``cholesky``, ``det``, ``slogdet``, ``eigh``, ``svd``...),
traced, compiled and differentiated."""

from __future__ import annotations

__all__: list[str] = []
