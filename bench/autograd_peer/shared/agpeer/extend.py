"""autograd.extend: ``primitive`` gives a function hand-written derivatives (``defvjp``,
``defjvp`` and their ``_argnum`` forms, and the deprecated ``defgrad``/``defvjp``/
``defvjp_is_zero`` methods of ``autograd.core.primitive``), mapped onto the library's own
custom-derivative transforms, as JAX documents the port: a primitive with VJPs is a
``custom_vjp`` function, one with only JVPs a ``custom_jvp`` function. The function itself is
traced by the library, so its body must be the library's array code (operators and the
``autograd.numpy`` namespace); a body that calls NumPy on traced values fails in the library,
as it would under jax.custom_vjp. A primitive given no rule is its function (the library
differentiates it); autograd would raise instead.
"""
import warnings
from itertools import count

from agpeer import is_array
from agpeer.test_util import VSpace, vspace  # noqa: F401

_NUMPY_CODE = "it wraps NumPy code, which the library under test cannot trace"


def _unsupported(name: str, why: str = _NUMPY_CODE):
    def raise_unsupported(*args, **kwargs):
        raise NotImplementedError(f"autograd.{name} is not supported by the peer shim: {why}")

    raise_unsupported.__name__ = name
    return raise_unsupported


def _is_array_like(x) -> bool:
    # What the library differentiates: arrays, traced values and Python floats; ints, strings,
    # functions and other objects are static (nondiff_argnums).
    return isinstance(x, (float, complex)) or not isinstance(x, (list, tuple)) and is_array(x)


class Primitive:
    """autograd's wrapped function: calls ``fun`` through the library's custom rule built from
    the VJPs and JVPs registered so far (``defvjp``/``defjvp``)."""

    def __init__(self, fun):
        self.fun = fun
        self.vjps = {}   # argnum -> vjpmaker(ans, *args, **kwargs) -> (g -> cotangent)
        self.jvps = {}   # argnum -> jvpfun(g, ans, *args, **kwargs) -> tangent of ans
        self.vjp_argnum = None  # defvjp_argnum's vjpmaker(argnum, ans, *args, **kwargs)
        self.jvp_argnum = None  # defjvp_argnum's jvpmaker(argnum, g, ans, args, kwargs)
        self.__name__ = getattr(fun, "__name__", "primitive")
        self.__doc__ = getattr(fun, "__doc__", None)
        self.defvjp = self._deprecated_defvjp
        self.defgrad = self._deprecated_defgrad

    def __repr__(self):
        return f"wrapped {self.__name__}"

    def __call__(self, *args, **kwargs):
        if not (self.vjps or self.jvps or self.vjp_argnum or self.jvp_argnum):
            return self.fun(*args, **kwargs)
        from autograd._backend import numpy as tnp
        from autograd._backend import transforms as T

        static = tuple(i for i, a in enumerate(args) if not _is_array_like(a))

        def full(dynamic, statics):
            # The call's arguments in their order, from the differentiated and the static ones.
            it_d, it_s = iter(dynamic), iter(statics)
            return [next(it_s) if i in static else next(it_d) for i in range(len(args))]

        def call(*all_args):
            return self.fun(*all_args, **kwargs)

        diff_nums = [i for i in range(len(args)) if i not in static]
        if self.vjps or self.vjp_argnum:
            f = T.custom_vjp(call, nondiff_argnums=static)

            def fwd(*all_args):
                ans = self.fun(*all_args, **kwargs)
                return ans, (ans, tuple(all_args[i] for i in diff_nums))

            def bwd(*rest):
                statics, (ans, dynamic), g = rest[:-2], rest[-2], rest[-1]
                xs = full(dynamic, statics)
                out = []
                for i in diff_nums:
                    maker = self.vjp_of(i)
                    ct = maker(ans, *xs, **kwargs)(g) if maker is not None else None
                    out.append(tnp.zeros_like(xs[i]) if ct is None else ct)
                return tuple(out)

            f.defvjp(fwd, bwd)
            return f(*args)
        f = T.custom_jvp(call, nondiff_argnums=static)

        def jvp(*rest):
            statics, primals, tangents = rest[:-2], rest[-2], rest[-1]
            xs = full(primals, statics)
            ans = self.fun(*xs, **kwargs)
            t_out = None
            for i, t in zip(diff_nums, tangents):
                rule = self.jvp_of(i)
                if rule is None:
                    continue
                term = rule(t, ans, *xs, **kwargs)
                t_out = term if t_out is None else t_out + term
            if t_out is None:
                t_out = tnp.zeros_like(ans)
            return ans, tnp.broadcast_to(t_out, tnp.shape(ans))

        f.defjvp(jvp)
        return f(*args)

    def vjp_of(self, i):
        """The VJP maker of argument ``i`` (None: none given)."""
        if i in self.vjps or self.vjp_argnum is None:
            return self.vjps.get(i)
        return lambda ans, *a, **k: self.vjp_argnum(i, ans, *a, **k)

    def jvp_of(self, i):
        """The JVP of argument ``i`` (None: none given)."""
        if i in self.jvps or self.jvp_argnum is None:
            return self.jvps.get(i)
        return lambda g, ans, *a, **k: self.jvp_argnum(i, g, ans, a, k)

    # autograd.core's deprecated methods (autograd/core.py, primitive_with_deprecation_warnings)
    def _deprecated_defvjp(self, vjpmaker, argnum=0):
        warnings.warn("The defvjp method is deprecated.")

        def staged(ans, *args, **kwargs):
            return lambda g: vjpmaker(g, ans, vspace(args[argnum]), vspace(g), *args, **kwargs)

        self.vjps[argnum] = staged

    def _deprecated_defgrad(self, gradmaker, argnum=0):
        warnings.warn("The defgrad method is deprecated.")
        self.vjps[argnum] = gradmaker

    def defvjp_is_zero(self, argnums=(0,)):
        warnings.warn("The defvjp_is_zero method is deprecated.")
        for i in argnums:
            self.vjps[i] = lambda ans, *args, **kwargs: lambda g: None


def primitive(fun):
    """autograd's ``primitive``: ``fun`` as a function that derivative rules can be attached to."""
    return Primitive(fun)


def notrace_primitive(fun):
    """autograd's ``notrace_primitive`` (a function whose result is constant): ``fun`` on the
    library's values with a zero derivative, the library's ``stop_gradient`` of each argument."""
    from autograd._backend import transforms as T

    def constant(*args, **kwargs):
        stop = getattr(T, "stop_gradient", None) or T.lax.stop_gradient
        return fun(*[stop(a) if _is_array_like(a) else a for a in args], **kwargs)

    return constant


def defvjp(fun, *vjpmakers, argnums=None):
    """Attach VJP makers ``vjpmaker(ans, *args, **kwargs) -> (g -> cotangent)`` to the
    arguments ``argnums`` (default 0, 1, ...) of a ``primitive``; None: a zero cotangent."""
    for i, maker in zip(count() if argnums is None else argnums, vjpmakers):
        fun.vjps[i] = maker if maker is not None else (lambda ans, *a, **k: lambda g: None)


def defjvp(fun, *jvpfuns, argnums=None):
    """Attach JVPs ``jvpfun(g, ans, *args, **kwargs) -> tangent`` to the arguments ``argnums``
    (default 0, 1, ...) of a ``primitive``; None: no tangent from that argument."""
    for i, rule in zip(count() if argnums is None else argnums, jvpfuns):
        if rule is not None:
            fun.jvps[i] = rule


def defvjp_argnum(fun, vjpmaker):
    """``vjpmaker(argnum, ans, *args, **kwargs)`` for every argument."""
    fun.vjp_argnum = vjpmaker


def defjvp_argnum(fun, jvpmaker):
    """``jvpmaker(argnum, g, ans, args, kwargs)`` for every argument."""
    fun.jvp_argnum = jvpmaker


# autograd's table of hand-written VJPs: the shim has none (its derivatives are the library's).
primitive_vjps: dict = {}
# autograd.misc: const_graph caches autograd's own trace; flatten is autograd's vspace flattening.
const_graph = _unsupported("misc.const_graph", "it caches the trace of autograd itself")
flatten = _unsupported("misc.flatten", "not mapped yet (the vspace flattening of autograd)")
