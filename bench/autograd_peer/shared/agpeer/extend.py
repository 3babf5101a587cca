"""autograd.extend: ``primitive`` and ``defvjp``/``defjvp`` give a NumPy function hand-written
derivatives. The libraries under test trace their own array functions and cannot run NumPy code
on traced values, so these are unsupported: each raises when called (importing them works, so
a test file that imports them still runs its other tests)."""
from agpeer.test_util import VSpace, vspace  # noqa: F401

_NUMPY_CODE = "it wraps NumPy code, which the library under test cannot trace"


def _unsupported(name: str, why: str = _NUMPY_CODE):
    def raise_unsupported(*args, **kwargs):
        raise NotImplementedError(f"autograd.{name} is not supported by the peer shim: {why}")

    raise_unsupported.__name__ = name
    return raise_unsupported


primitive = _unsupported("extend.primitive")
notrace_primitive = _unsupported("extend.notrace_primitive")
defvjp = _unsupported("extend.defvjp")
defjvp = _unsupported("extend.defjvp")
defvjp_argnum = _unsupported("extend.defvjp_argnum")
defjvp_argnum = _unsupported("extend.defjvp_argnum")

# autograd's table of hand-written VJPs: the shim has none (its derivatives are the library's).
primitive_vjps: dict = {}
# autograd.misc: const_graph caches autograd's own trace; flatten is autograd's vspace flattening.
const_graph = _unsupported("misc.const_graph", "it caches the trace of autograd itself")
flatten = _unsupported("misc.flatten", "not mapped yet (the vspace flattening of autograd)")
