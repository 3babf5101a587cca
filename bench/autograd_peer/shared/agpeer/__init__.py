"""Code the two autograd shims (bench/autograd_peer/fj and bench/autograd_peer/jax) share.

HIPS/autograd's pure-Python helpers (wrap_util, util, test_util's check_grads) are vendored
here under autograd's MIT license (Copyright (c) 2025 by the President and Fellows of Harvard
University), and ``differential_operators`` rebuilds autograd's operators on the transforms of
the library under test, which each shim names in its ``autograd._backend`` module.
"""

OPERATORS = (
    "checkpoint", "deriv", "elementwise_grad", "grad", "grad_and_aux", "grad_named", "hessian",
    "hessian_tensor_product", "hessian_vector_product", "holomorphic_grad", "jacobian", "make_ggnvp",
    "make_hvp", "make_jvp", "make_vjp", "multigrad_dict", "tensor_jacobian_product", "value_and_grad",
    "vector_jacobian_product",
)


def export_operators(namespace: dict) -> None:
    """Put autograd's differential operators and builtins into a shim's ``autograd`` package
    namespace; an operator the library has no transform for (``checkpoint`` without ``remat``)
    stays missing, so importing it fails as it would for a missing function."""
    from agpeer import builtins, differential_operators

    namespace.update({n: getattr(differential_operators, n) for n in OPERATORS
                      if hasattr(differential_operators, n)})
    namespace.update({n: getattr(builtins, n) for n in ("dict", "isinstance", "list", "tuple", "type")})


def forwarding(section: str):
    """A module ``__getattr__`` that answers the names of ``autograd._backend.SECTIONS[section]``
    (a module of the library, or a dict of its functions under scipy's or NumPy's names) and
    raises AttributeError for the others, naming the library and the section, so a test that
    needs a function the library lacks fails and is counted under that name."""

    def __getattr__(name: str):
        from autograd import _backend

        source = _backend.SECTIONS[section]
        found = source.get(name) if isinstance(source, dict) else getattr(source, name, None)
        # __path__ would make a module look like a package to the import system
        if found is None or name == "__path__":
            raise AttributeError(f"{_backend.NAME} has no attribute {name!r} (autograd.{section}.{name})")
        return found

    return __getattr__


class _Distribution:
    """``autograd.scipy.stats.<name>``: ``rvs`` is scipy's own (autograd's is scipy's too, a
    primitive without derivative: the tests only draw data with it, some at import), every
    other function is the library's ``<stats section>.<name>.<function>`` or missing."""

    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, attr: str):
        if attr == "rvs":
            import scipy.stats

            return getattr(scipy.stats, self._name).rvs
        from autograd import _backend

        source = _backend.SECTIONS["scipy.stats"]
        found = getattr(source.get(self._name) if isinstance(source, dict) else getattr(source, self._name, None),
                        attr, None)
        if found is None or attr.startswith("__"):
            raise AttributeError(f"{_backend.NAME} has no attribute {attr!r} "
                                 f"(autograd.scipy.stats.{self._name}.{attr})")
        return found


def stats_getattr(name: str):
    """The module ``__getattr__`` of ``autograd.scipy.stats``: a distribution of scipy.stats
    (see ``_Distribution``), else the library's name or AttributeError as ``forwarding``."""
    import scipy.stats

    if not name.startswith("_") and hasattr(getattr(scipy.stats, name, None), "rvs"):
        return _Distribution(name)
    return forwarding("scipy.stats")(name)


def custom_where(condition, *args, **kwargs):
    """autograd.numpy.where (autograd/numpy/__init__.py at bff107b): the library's ``where``,
    except that without any array among its arguments (Python scalars and lists) the result is
    a Python value again, as autograd returns it."""
    from autograd import _backend

    where = _backend.SECTIONS["numpy"].where
    if not args and not kwargs:
        return where(condition)
    if len(args) + len(kwargs) != 2:
        raise ValueError("either both or neither of x and y should be given")
    x = args[0] if len(args) > 0 else kwargs.get("x")
    y = args[1] if len(args) > 1 else kwargs.get("y")
    res = where(condition, x, y)
    if any(is_array(v) for v in (condition, x, y)):
        return res
    return res.tolist()


def is_array(x) -> bool:
    """Whether ``x`` is (or a list or tuple holds) an array or a traced value."""
    from autograd import _backend

    if isinstance(x, (list, tuple)):
        return any(is_array(v) for v in x)
    return isinstance(x, _backend.Tracer) or hasattr(x, "shape") and hasattr(x, "dtype")


def scipy_odeint(odeint):
    """scipy's (and autograd's) ``odeint(func, y0, t, args=(), ...)`` onto a library odeint that
    takes the extra arguments positionally (jax.experimental.ode.odeint, fj.scipy.integrate)."""

    def scipy_signature(func, y0, t, args=(), **kwargs):
        return odeint(func, y0, t, *args, **kwargs)

    return scipy_signature
