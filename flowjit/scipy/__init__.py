"""``fj.scipy``: SciPy's names over traced arrays, as ``jax.scipy``; every function
differentiates, batches and compiles as the ``fj.*`` NumPy functions do.

Each submodule is imported here, one line each, so ``fj.scipy.<module>`` works after
``import flowjit as fj``; a sibling module adds its import line at the end.
"""

from flowjit.scipy import special  # noqa: F401

# isort: split
from flowjit.scipy import integrate, linalg, signal, stats  # noqa: E402, F401
