"""autograd.scipy: the scipy functions JAX has, under scipy's names."""
from . import integrate, linalg, signal, special, stats  # noqa: F401
