"""autograd.scipy: the scipy functions flowjit has, under scipy's names."""
from . import integrate, linalg, signal, special, stats  # noqa: F401
