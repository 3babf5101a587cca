"""autograd's differential operators (autograd/differential_operators.py at bff107b, MIT license)
rebuilt on the transforms of the library under test: each is either the library's own
transform (``grad``, ``value_and_grad``, ``jacobian`` = ``jacrev``, ``hessian``, ``deriv`` and
``make_jvp`` = ``jvp``, ``make_vjp`` = ``vjp``, ``checkpoint`` = ``remat``) or autograd's own
composition of those (``hessian_tensor_product``, ``tensor_jacobian_product``, ``make_hvp``,
``make_ggnvp``, ``multigrad_dict``, ``grad_named``). Nothing here differentiates by itself.
``autograd._backend`` names the library: ``transforms`` (jax, or flowjit) and ``numpy`` (its
NumPy namespace, for the few array functions autograd's compositions call).
"""
import inspect
from collections import OrderedDict

from autograd._backend import numpy as tnp
from autograd._backend import transforms as T

from agpeer import core
from agpeer.wrap_util import unary_to_nary

make_vjp = unary_to_nary(core.make_vjp)
make_jvp = unary_to_nary(core.make_jvp)


@unary_to_nary
def grad(fun, x):
    """
    Returns a function which computes the gradient of `fun` with respect to
    positional argument number `argnum`. The returned function takes the same
    arguments as `fun`, but returns the gradient instead. The function `fun`
    should be scalar-valued. The gradient has the same type as the argument."""
    return T.grad(fun)(x)


@unary_to_nary
def elementwise_grad(fun, x):
    """The sum of each column of the Jacobian of `fun` (its diagonal when the Jacobian is
    diagonal): one vjp with a cotangent of ones."""
    ans, pullback = T.vjp(fun, x)
    return pullback(tnp.ones_like(ans))[0]


@unary_to_nary
def deriv(fun, x):
    """The derivative of `fun` in the direction of ones: one jvp."""
    return T.jvp(fun, (x,), (tnp.ones_like(x),))[1]


@unary_to_nary
def jacobian(fun, x):
    """The Jacobian of `fun` (output shape + input shape), by the library's reverse-mode
    Jacobian."""
    return T.jacrev(fun)(x)


@unary_to_nary
def holomorphic_grad(fun, x):
    """autograd's definition: the gradient of the real part of `fun`."""
    return T.grad(lambda z: tnp.real(fun(z)))(x)


def grad_named(fun, argname):
    """Takes gradients with respect to a named argument.
    Doesn't work on *args or **kwargs."""
    arg_index = inspect.getfullargspec(fun).args.index(argname)
    return grad(fun, arg_index)


@unary_to_nary
def hessian(fun, x):
    "Returns a function that computes the exact Hessian."
    return T.hessian(fun)(x)


@unary_to_nary
def make_hvp(fun, x):
    """(hvp, gradient) at `x`: the vjp of the gradient, as in autograd."""
    return core.make_vjp(T.grad(fun), x)


def hessian_tensor_product(fun, argnum=0):
    """The exact Hessian-tensor product, autograd's composition: the gradient of
    tensordot(gradient, tensor)."""
    fun_grad = grad(fun, argnum)

    def vector_dot_grad(*args, **kwargs):
        args, vector = args[:-1], args[-1]
        return tnp.tensordot(fun_grad(*args, **kwargs), vector, tnp.ndim(vector))

    return grad(vector_dot_grad, argnum)


hessian_vector_product = hessian_tensor_product


def tensor_jacobian_product(fun, argnum=0):
    """The Jacobian left-multiplied by a tensor, autograd's composition: the Jacobian of
    tensordot(tensor, fun)."""

    def vector_dot_fun(*args, **kwargs):
        args, vector = args[:-1], args[-1]
        return tnp.tensordot(vector, fun(*args, **kwargs), axes=tnp.ndim(vector))

    return jacobian(vector_dot_fun, argnum)


vector_jacobian_product = tensor_jacobian_product


def make_ggnvp(f, g=lambda x: 1.0 / 2 * tnp.sum(x**2, axis=-1), f_argnum=0):
    """Generalized-Gauss-Newton-vector products J^T H_g J v: jvp of `f`, vjp of the gradient
    of `g`, vjp of `f`."""

    @unary_to_nary
    def _make_ggnvp(f, x):
        f_vjp, f_x = core.make_vjp(f, x)
        g_hvp, _ = core.make_vjp(T.grad(g), f_x)

        def ggnvp(v):
            return f_vjp(g_hvp(T.jvp(f, (x,), (v,))[1]))

        return ggnvp

    return _make_ggnvp(f, f_argnum)


@unary_to_nary
def value_and_grad(fun, x):
    """Returns a function that returns both value and gradient. Suitable for use
    in scipy.optimize"""
    return T.value_and_grad(fun)(x)


@unary_to_nary
def grad_and_aux(fun, x):
    """Builds a function that returns the gradient of the first output and the
    (unmodified) second output of a function that returns two outputs."""
    return T.grad(fun, has_aux=True)(x)


def multigrad_dict(fun):
    """Gradients with respect to all arguments at once, as a dict from argument name to
    gradient (autograd's, with inspect.signature for funcsigs)."""
    sig = inspect.signature(fun)

    def select(preds, lst):
        idx = lambda item: next((i for i, pred in enumerate(preds) if pred(item)), len(preds))  # noqa: E731
        results = [[] for _ in preds] + [[]]
        for item in lst:
            results[idx(item)].append(item)
        return results

    is_var_pos = lambda name: sig.parameters[name].kind == sig.parameters[name].VAR_POSITIONAL  # noqa: E731
    is_var_kwd = lambda name: sig.parameters[name].kind == sig.parameters[name].VAR_KEYWORD  # noqa: E731
    var_pos, var_kwd, argnames = select([is_var_pos, is_var_kwd], sig.parameters)

    def apply_defaults(arguments):
        defaults = {name: p.default for name, p in sig.parameters.items() if p.default is not p.empty}
        return OrderedDict((name, arguments[name] if name in arguments else defaults[name])
                           for name in sig.parameters)

    def gradfun(*args, **kwargs):
        bindings = sig.bind(*args, **kwargs)

        def newfun(dct):
            pos = tuple(dct[var_pos[0]]) if var_pos else ()
            kw = dict(dct[var_kwd[0]]) if var_kwd else {}
            others = tuple(dct[a] for a in argnames if a not in var_kwd + var_pos)
            return fun(*(others + pos), **kw)

        argdict = apply_defaults(bindings.arguments)
        grad_dict = grad(newfun)(dict(argdict))
        return OrderedDict((argname, grad_dict[argname]) for argname in argdict)

    return gradfun


if hasattr(T, "remat"):
    def checkpoint(fun):
        """`fun` whose forward values are recomputed in the backward pass instead of kept:
        the library's remat."""
        return T.remat(fun)
