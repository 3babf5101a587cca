"""autograd.numpy: flowjit's NumPy namespace (a missing name raises AttributeError)."""
from agpeer import custom_where as where  # noqa: F401  (autograd's own where)
from agpeer import forwarding

from . import fft, linalg, random  # noqa: F401

__getattr__ = forwarding("numpy")
