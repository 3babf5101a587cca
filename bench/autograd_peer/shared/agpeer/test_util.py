"""autograd.test_util: autograd's own gradient checker, vendored from HIPS/autograd (bff107b,
autograd/test_util.py, MIT license, Copyright (c) 2025 by the President and Fellows of Harvard
University), unchanged but for ``vspace``: autograd's vector spaces are part of its tracer, so
here a small pytree-of-arrays helper (``VSpace``) stands in for them. The derivatives checked
come from the library under test (``autograd.core.make_vjp`` / ``make_jvp`` of the shim); the
finite differences are autograd's, on NumPy values.
"""
from itertools import product

import numpy as onp

from agpeer.wrap_util import get_name, unary_to_nary


class VSpace:
    """The vector space of a pytree (tuples, lists, dicts) of arrays and scalars: its structure
    and each leaf's shape and dtype (two values are in the same space when these are equal, as
    in autograd), and the operations check_grads needs (randn, inner_prod as real(vdot), add,
    scalar_mul, covector)."""

    def __init__(self, value):
        self.tree = _tree(value)

    def __eq__(self, other):
        return isinstance(other, VSpace) and self.tree == other.tree

    def __repr__(self):
        return f"VSpace({self.tree})"

    @property
    def _leaves(self):
        return _leaf_specs(self.tree)

    @property
    def size(self):
        return sum(int(onp.prod(shape)) for shape, _ in self._leaves)

    @property
    def shape(self):
        (shape, _), = self._leaves
        return shape

    @property
    def iscomplex(self):
        return any(onp.issubdtype(dtype, onp.complexfloating) for _, dtype in self._leaves)

    def _build(self, make):
        return _unflatten(self.tree, iter(make(shape, dtype) for shape, dtype in self._leaves))

    def zeros(self):
        return self._build(lambda shape, dtype: onp.zeros(shape, dtype))

    def ones(self):
        return self._build(lambda shape, dtype: onp.ones(shape, dtype) + (
            1j * onp.ones(shape, dtype) if onp.issubdtype(dtype, onp.complexfloating) else 0))

    def randn(self):
        def draw(shape, dtype):
            x = onp.array(onp.random.randn(*shape)).astype(dtype)
            if onp.issubdtype(dtype, onp.complexfloating):
                x = x + 1.0j * onp.array(onp.random.randn(*shape)).astype(dtype)
            return x
        return self._build(draw)

    def inner_prod(self, x, y):
        return sum(onp.real(onp.vdot(onp.ravel(onp.asarray(a)), onp.ravel(onp.asarray(b))))
                   for a, b in zip(_leaves(x), _leaves(y)))

    def add(self, x, y):
        return _unflatten(self.tree, iter(a + b for a, b in zip(_leaves(x), _leaves(y))))

    def scalar_mul(self, x, a):
        return _unflatten(self.tree, iter(v * a for v in _leaves(x)))

    def covector(self, x):
        return _unflatten(self.tree, iter(onp.conj(v) for v in _leaves(x)))


def vspace(value):
    """The VSpace of ``value`` (a pytree of arrays and scalars)."""
    return VSpace(value)


def _tree(x):
    if isinstance(x, (tuple, list)):
        return (type(x).__name__, tuple(_tree(v) for v in x))
    if isinstance(x, dict):
        return ("dict", tuple((k, _tree(v)) for k, v in x.items()))
    if hasattr(x, "shape") and hasattr(x, "dtype"):  # an array, or the library's traced value
        return ("leaf", tuple(x.shape), onp.dtype(x.dtype))
    a = onp.asarray(x)
    return ("leaf", a.shape, a.dtype)


def _leaf_specs(tree):
    if tree[0] == "leaf":
        return [(tree[1], tree[2])]
    children = [c for _, c in tree[1]] if tree[0] == "dict" else tree[1]
    return [spec for c in children for spec in _leaf_specs(c)]


def _leaves(x):
    if isinstance(x, (tuple, list)):
        return [leaf for v in x for leaf in _leaves(v)]
    if isinstance(x, dict):
        return [leaf for v in x.values() for leaf in _leaves(v)]
    return [x]


def _unflatten(tree, leaves):
    kind, body = tree[0], tree[1]
    if kind == "leaf":
        return next(leaves)
    if kind == "dict":
        return {k: _unflatten(c, leaves) for k, c in body}
    values = [_unflatten(c, leaves) for c in body]
    return tuple(values) if kind == "tuple" else values


# ---- autograd/test_util.py from here on (vspace as above) ----

TOL = 1e-6
RTOL = 1e-6


def scalar_close(a, b):
    return abs(a - b) < TOL or abs(a - b) / abs(a + b) < RTOL


EPS = 1e-6


def make_numerical_jvp(f, x):
    y = f(x)
    x_vs, y_vs = vspace(x), vspace(y)

    def jvp(v):
        # (f(x + v*eps/2) - f(x - v*eps/2)) / eps
        f_x_plus = f(x_vs.add(x, x_vs.scalar_mul(v, EPS / 2)))
        f_x_minus = f(x_vs.add(x, x_vs.scalar_mul(v, -EPS / 2)))
        neg_f_x_minus = y_vs.scalar_mul(f_x_minus, -1.0)
        return y_vs.scalar_mul(y_vs.add(f_x_plus, neg_f_x_minus), 1.0 / EPS)

    return jvp


def check_vjp(f, x):
    from autograd.core import make_vjp

    vjp, y = make_vjp(f, x)
    jvp = make_numerical_jvp(f, x)
    x_vs, y_vs = vspace(x), vspace(y)
    x_v, y_v = x_vs.randn(), y_vs.randn()

    vjp_y = x_vs.covector(vjp(y_vs.covector(y_v)))
    assert vspace(vjp_y) == x_vs
    vjv_exact = x_vs.inner_prod(x_v, vjp_y)
    vjv_numeric = y_vs.inner_prod(y_v, jvp(x_v))
    assert scalar_close(vjv_numeric, vjv_exact), (
        f"Derivative (VJP) check of {get_name(f)} failed with arg {x}:\nanalytic: {vjv_exact}\n"
        f"numeric:  {vjv_numeric}"
    )


def check_jvp(f, x):
    from autograd.core import make_jvp

    jvp = make_jvp(f, x)
    jvp_numeric = make_numerical_jvp(f, x)
    x_v = vspace(x).randn()
    check_equivalent(jvp(x_v)[1], jvp_numeric(x_v))


def check_equivalent(x, y):
    x_vs, y_vs = vspace(x), vspace(y)
    assert x_vs == y_vs, f"VSpace mismatch:\nx: {x_vs}\ny: {y_vs}"
    v = x_vs.randn()
    assert scalar_close(x_vs.inner_prod(x, v), x_vs.inner_prod(y, v)), f"Value mismatch:\nx: {x}\ny: {y}"


@unary_to_nary
def check_grads(f, x, modes=None, order=2):
    from autograd.core import make_jvp, make_vjp

    if modes is None:
        modes = ["fwd", "rev"]
    assert all(m in ["fwd", "rev"] for m in modes)
    if "fwd" in modes:
        check_jvp(f, x)
        if order > 1:
            grad_f = lambda x, v: make_jvp(f, x)(v)[1]  # noqa: E731
            grad_f.__name__ = f"jvp_{get_name(f)}"
            v = vspace(x).randn()
            check_grads(grad_f, (0, 1), modes, order=order - 1)(x, v)
    if "rev" in modes:
        check_vjp(f, x)
        if order > 1:
            grad_f = lambda x, v: make_vjp(f, x)[0](v)  # noqa: E731
            grad_f.__name__ = f"vjp_{get_name(f)}"
            v = vspace(f(x)).randn()
            check_grads(grad_f, (0, 1), modes, order=order - 1)(x, v)


def combo_check(fun, *args, **kwargs):
    # Tests all combinations of args and kwargs given.
    _check_grads = lambda f: check_grads(f, *args, **kwargs)  # noqa: E731

    def _combo_check(*args, **kwargs):
        kwarg_key_vals = [[(k, x) for x in xs] for k, xs in kwargs.items()]
        for _args in product(*args):
            for _kwargs in product(*kwarg_key_vals):
                _check_grads(fun)(*_args, **dict(_kwargs))

    return _combo_check
