"""autograd.tracer: ``isbox`` is the library's own test for a traced value; ``primitive`` (a
NumPy function given derivatives by hand) is unsupported, see ``agpeer.extend``."""
from agpeer.extend import notrace_primitive, primitive  # noqa: F401


def isbox(x) -> bool:
    """Whether ``x`` is a traced value of the library under test (autograd's Box)."""
    from autograd._backend import Tracer

    return isinstance(x, Tracer)
