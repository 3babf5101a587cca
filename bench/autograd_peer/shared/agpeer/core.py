"""autograd.core's ``make_vjp`` and ``make_jvp`` (unary: the derivative in ``x``), mapped onto
the ``vjp`` and ``jvp`` transforms of the library under test (``autograd._backend.transforms``)."""
from autograd._backend import transforms as T


def make_vjp(fun, x):
    """``(vjp, fun(x))``, ``vjp(g)`` the cotangent of ``x`` for a cotangent ``g`` of the output:
    the library's ``vjp`` (which returns one cotangent per primal; here the only one)."""
    ans, pullback = T.vjp(fun, x)

    def vjp(g):
        return pullback(g)[0]

    return vjp, ans


def make_jvp(fun, x):
    """``jvp(v) = (fun(x), J v)``: the library's ``jvp`` at ``x`` in direction ``v``."""

    def jvp(v):
        return T.jvp(fun, (x,), (v,))

    return jvp
