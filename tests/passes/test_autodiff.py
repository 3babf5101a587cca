"""Autodiff: every differentiable primitive's VJP against central finite differences in
float64 on the registry's own cases, second derivatives of the elementwise set, and the
``fj.grad`` / ``value_and_grad`` / ``vjp`` surface."""

from __future__ import annotations

import numpy as np
import pytest

import flowjit as fj
from flowjit.ir import Builder, get, interpret, new_function, print_function, verify
from flowjit.ir.registry import all_primitives
from flowjit.ir.types import TensorType
from flowjit.passes.autodiff import AutodiffError, grad_function
from tests.finite_differences import central_differences
from tests.registry.case import Case
from tests.registry.test_generic import ALL_CASES, _domain_inputs

EPS = 1e-6
# Non-smooth points the random inputs must stay away from, per primitive: the function
# value at x and x +- EPS must lie on one smooth piece.
KINKS = {
    "abs": lambda xs: [np.abs(xs[0])],
    "maximum": lambda xs: [np.abs(xs[0] - xs[1])],
    "minimum": lambda xs: [np.abs(xs[0] - xs[1])],
    "mod": lambda xs: [np.abs(np.remainder(xs[0], xs[1])), np.abs(np.remainder(xs[0], xs[1]) - np.abs(xs[1]))],
}


def _float64_case(case):
    """The case's inputs with every float input in float64, or None when it has none."""
    prim = get(case.prim)
    arrays = case.make_inputs(np.random.default_rng(7))
    if prim.kind == "elementwise":
        arrays = _domain_inputs(prim, arrays)
    arrays = [np.array(a, dtype=np.float64) if a.dtype.kind == "f" else np.asarray(a) for a in arrays]
    if not any(a.dtype == np.float64 and a.size for a in arrays):
        return None
    if any(a.dtype == np.float64 and not np.isfinite(a).all() for a in arrays):
        return None  # finite differences need finite inputs
    attrs = dict(case.attrs)
    if case.prim == "cast":
        if attrs["dtype"] not in ("f32", "f64", "float32", "float64"):
            return None
        attrs["dtype"] = "f64"
    with np.errstate(all="ignore"):
        out = prim.impl(*arrays, **prim.normalize_attrs(attrs))
    outs = out if isinstance(out, (list, tuple)) else [out]
    if any(np.iscomplexobj(o) for o in outs):
        return None  # complex gradients: tests/passes/test_autodiff_complex.py (JAX's convention)
    if not all(np.isfinite(np.asarray(o, dtype=np.float64)).all() for o in outs):
        return None  # e.g. padding with nan: the loss would be nan whatever the gradient
    kink = KINKS.get(case.prim)
    if kink and any((np.asarray(k) < 1e-3).any() for k in kink(arrays)):
        return None
    if case.prim in ("reduce_max", "reduce_min") and len(np.unique(arrays[0])) != arrays[0].size:
        return None
    return prim, arrays, attrs


# Strided slices in both directions (the registry cases have few).
EXTRA_CASES = [
    Case("slice", [((7, 5), "f64")], {"start": (6, 1), "size": (3, 2), "step": (-2, 3)}, id="slice-neg-step"),
    Case("slice", [((9,), "f64")], {"start": (8,), "size": (9,), "step": (-1,)}, id="slice-reverse"),
    Case("slice", [((4, 10), "f64")], {"start": (0, 2), "size": (4, 3), "step": (1, 3)}, id="slice-step-3"),
]


def _gradient_cases():
    seen: set = set()
    per_prim: dict[str, int] = {}
    out = []
    for c in EXTRA_CASES + ALL_CASES:
        p = get(c.prim)
        if not p.differentiable or p.vjp is None:
            continue
        # Distinct shapes and attributes (dtypes all become float64); a few per primitive.
        key = (c.prim, repr(c.attrs), repr([s[0] if isinstance(s, tuple) else getattr(s, "shape", s)
                                            for s in c.inputs]))
        if key in seen or per_prim.get(c.prim, 0) >= 6:
            continue
        if _float64_case(c) is not None:
            seen.add(key)
            per_prim[c.prim] = per_prim.get(c.prim, 0) + 1
            out.append(c)
    return out


GRADIENT_CASES = _gradient_cases()


def _loss_function(prim, arrays, attrs, weights):
    """IR for the sum of prim(*arrays)[k] * weights[k] over its results: a scalar whose gradient
    is the VJP of `weights` (one array per result: eigh, svd have several)."""
    types = [TensorType(a.shape, a.dtype) for a in arrays]
    fn, b = new_function("f", types)
    total = None
    for y, weight in zip(b.emit(prim, fn.args, attrs), weights, strict=True):
        w = b.op("constant", value=fj.ir.registry.Literal(weight))
        s = b.op("reduce_sum", b.op("mul", y, w), axes=tuple(range(y.type.ndim)), keepdims=False)
        total = s if total is None else b.op("add", total, s)
    fn.body.set_returns([total])
    return fn


def test_every_differentiable_primitive_has_a_vjp():
    assert [p.name for p in all_primitives() if p.differentiable and p.vjp is None and not p.no_derivative] == []


def test_a_differentiable_op_without_a_vjp_names_itself_and_the_line(monkeypatch):
    monkeypatch.setattr(get("sin"), "vjp", None)
    with pytest.raises(AutodiffError, match=r"no gradient for sin at .*test_autodiff.py"):
        fj.grad(lambda x: fj.sin(x).sum())(np.ones(3))


def test_every_primitive_is_covered_by_the_gradient_check():
    covered = {c.prim for c in GRADIENT_CASES}
    # Control flow (ops owning blocks) is checked by finite differences in
    # tests/tracer/test_control_flow.py, on programs with branches and loop bodies.
    want = {p.name for p in all_primitives() if p.differentiable and p.vjp is not None and not p.num_blocks}
    # sign's gradient is zero: checked below; the complex parts' (real, imag, conj, complex)
    # against JAX's convention in test_autodiff_complex.py.
    from tests.passes.test_autodiff_complex import COMPLEX_GRADIENTS_CHECKED
    assert want - covered - COMPLEX_GRADIENTS_CHECKED in ({"sign"}, set())


@pytest.mark.parametrize("case", GRADIENT_CASES, ids=lambda c: c.id or c.prim)
def test_vjp_matches_central_finite_differences(case):
    prim, arrays, attrs = _float64_case(case)
    rng = np.random.default_rng(3)
    weights = [rng.standard_normal(t.shape).astype(t.dtype.np)
               for t in prim.infer([TensorType(a.shape, a.dtype) for a in arrays], prim.normalize_attrs(attrs))]
    fn = _loss_function(prim, arrays, attrs, weights)
    wrt = [i for i, a in enumerate(arrays) if a.dtype == np.float64]
    g = grad_function(fn, wrt)
    verify(g)
    got = interpret(g, arrays)[1:]
    for i, analytic in zip(wrt, got, strict=True):
        fd = central_differences(lambda *xs: interpret(fn, xs)[0], arrays, i, EPS)
        np.testing.assert_allclose(analytic, fd, rtol=1e-5, atol=1e-6, err_msg=f"{case.id or case.prim} input {i}")


UNARY = ["neg", "abs", "exp", "expm1", "log", "log1p", "sqrt", "rsqrt", "sin", "cos", "tanh", "logistic", "erf"]


@pytest.mark.parametrize("name", UNARY)
def test_second_derivatives_of_elementwise_functions(name):
    f = getattr(fj, {"neg": "negative", "logistic": "sigmoid"}.get(name, name), None)
    if f is None:
        from flowjit.tracer.core import bind
        f = (lambda x: bind(name, [x]))  # noqa: E731
    x = np.linspace(0.3, 1.7, 9)
    d1 = fj.grad(lambda x: f(x).sum())
    d2 = fj.grad(lambda x: d1(x).sum())(x)
    fd = (d1(x + EPS) - d1(x - EPS)) / (2 * EPS)
    np.testing.assert_allclose(d2, fd, rtol=1e-5, atol=1e-6)


def test_sign_has_zero_gradient():
    np.testing.assert_array_equal(fj.grad(lambda x: fj.sign(x).sum())(np.array([-1.0, 2.0])), [0.0, 0.0])


def test_grad_of_a_binary_op_sums_over_broadcast_axes_and_nests():
    def f(w, b, x):
        return (fj.tanh(x @ w + b) ** 2).mean()

    rng = np.random.default_rng(0)
    w, b, x = rng.standard_normal((4, 3)), rng.standard_normal(3), rng.standard_normal((5, 4))
    gw, gb = fj.grad(f, argnums=(0, 1))(w, b, x)
    assert gw.shape == (4, 3) and gb.shape == (3,)
    h = np.tanh(x @ w + b)
    d = 2 * h * (1 - h * h) / h.size
    np.testing.assert_allclose(gw, x.T @ d, rtol=1e-10)
    np.testing.assert_allclose(gb, d.sum(0), rtol=1e-10)


def test_value_and_grad_with_pytrees_aux_and_inside_a_function():
    params = {"w": np.ones((3, 2)), "b": np.zeros(2)}
    x = np.arange(6.0).reshape(2, 3)

    def loss(p, x):
        y = x @ p["w"] + p["b"]
        return (y * y).sum(), y

    @fj.function
    def step(p, x):
        (value, y), g = fj.value_and_grad(loss, has_aux=True)(p, x)
        return value, y, {k: p[k] - 0.1 * g[k] for k in p}

    value, y, new = step(params, x)
    ref_y = x @ params["w"]
    assert value == pytest.approx((ref_y ** 2).sum())
    np.testing.assert_allclose(y, ref_y)
    np.testing.assert_allclose(new["w"], params["w"] - 0.1 * x.T @ (2 * ref_y))
    np.testing.assert_allclose(new["b"], params["b"] - 0.1 * (2 * ref_y).sum(0))
    assert step.trace_count == 1


def test_the_same_array_passed_twice_gets_two_gradients():
    x = np.array([1.0, 2.0])
    ga, gb = fj.grad(lambda a, b: (a * b * b).sum(), argnums=(0, 1))(x, x)
    np.testing.assert_allclose(ga, x * x)
    np.testing.assert_allclose(gb, 2 * x * x)


def test_vjp_inside_and_outside_a_trace():
    x = np.linspace(-1, 1, 4)
    y, pull = fj.vjp(lambda a: fj.sin(a) * 3, x)
    np.testing.assert_allclose(y, np.sin(x) * 3)
    (g,) = pull(np.ones(4))
    np.testing.assert_allclose(g, 3 * np.cos(x))

    @fj.function
    def f(a, ct):
        out, pb = fj.vjp(lambda a: fj.exp(a) * a, a)
        return out, pb(ct)[0]

    out, g = f(x, np.full(4, 2.0))
    np.testing.assert_allclose(g, 2 * (np.exp(x) * x + np.exp(x)))


def test_bad_uses_say_what_to_do():
    with pytest.raises(AutodiffError, match="float scalar.*vjp"):
        fj.grad(lambda x: x * 2)(np.ones(3))
    with pytest.raises(fj.FlowjitTypeError, match="float or complex arguments"):
        fj.grad(lambda n: (n * 2.0).sum())(np.arange(3))
    # A complex or non-scalar output is a TypeError too, as jax.grad raises.
    with pytest.raises(TypeError, match="complex scalar.*holomorphic=True"):
        fj.grad(lambda x: x * (1.0 + 0.2j))(1.0)


def test_maximum_and_minimum_split_a_tie():
    # As JAX and PyTorch: half to each side (all went to the first operand before).
    for f in (fj.maximum, fj.minimum):
        np.testing.assert_array_equal(fj.grad(f, argnums=(0, 1))(1.0, 1.0), [0.5, 0.5])
    np.testing.assert_array_equal(fj.grad(lambda x: fj.sum(fj.maximum(x, 0.0)))(np.array([-1.0, 0.0, 2.0])),
                                  [0.0, 0.5, 1.0])


def test_a_products_gradient_through_zeros_is_the_product_of_the_others():
    # d prod / d x_i is the product of the other elements: with one zero only the zero's
    # is nonzero, with two none is (y / x_i gave 0/0 = nan there), as JAX, PyTorch and
    # TensorFlow give; along an axis with keepdims, compiled and eager, f32 and f64.
    x = np.array([[2.0, 0.0, 3.0, 4.0], [2.0, 0.0, 0.0, 5.0], [1.0, -2.0, 3.0, 0.5]])
    want = np.array([[0.0, 24.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0], [-3.0, 1.5, -1.0, -6.0]])
    g = np.array([[1.0], [2.0], [3.0]])
    for dt in (np.float32, np.float64):
        def loss(x):
            return fj.sum(fj.prod(x, axis=1, keepdims=True) * g.astype(dt))
        for grad in (fj.grad(loss), fj.function(fj.grad(loss))):
            np.testing.assert_array_equal(grad(x.astype(dt)), (want * g).astype(dt))
    np.testing.assert_array_equal(fj.grad(fj.prod)(np.array([0.0, 0.0])), [0.0, 0.0])
    np.testing.assert_array_equal(fj.grad(fj.prod)(np.array([3.0, 0.0, np.inf])), [0.0, np.inf, 0.0])
    _, t = fj.jvp(lambda x: fj.prod(x), (np.array([2.0, 0.0, 3.0]),), (np.array([1.0, 1.0, 1.0]),))
    assert t == 6.0


def test_an_output_of_one_element_is_a_scalar():
    # As PyTorch's backward() and autograd take it: shape (1,) or (1, 1) seeds with ones.
    x = np.array([[1.0, 2.0, 3.0]])
    np.testing.assert_allclose(fj.grad(lambda x: fj.sum(x * x, axis=1, keepdims=True))(x), 2 * x)
    np.testing.assert_allclose(fj.grad(lambda x: (x * x)[:, :1])(x), [[2.0, 0.0, 0.0]])


def test_grad_function_is_a_pass_from_ir_to_ir():
    fn = fj.function(lambda x, y: (fj.exp(x) * y).sum()).ir(np.ones(3), np.ones(3))
    g = grad_function(fn, [0, 1])
    verify(g)
    text = print_function(g)
    assert len(g.returns) == 3 and "exp" in text
    x, y = np.array([0.0, 1.0, 2.0]), np.array([1.0, 2.0, 3.0])
    _, gx, gy = interpret(g, [x, y])
    np.testing.assert_allclose(gx, np.exp(x) * y)
    np.testing.assert_allclose(gy, np.exp(x))
    assert print_function(fn) != text  # the input Function is left as it was
    assert Builder  # noqa: B018 (imported for the IR the tests build)


def test_a_matrix_applied_to_a_batch_gets_its_gradient_from_one_product():
    # A dense layer on (B, T, D): its weight's gradient summed a batch of B products (the zoo
    # transformer's MLP wrote 8 x 1024 x 256 partials and read them again); it is one product
    # over the B*T rows, as the forward pass is.
    x = np.random.default_rng(0).standard_normal((4, 5, 6))
    w = np.random.default_rng(1).standard_normal((6, 3))
    fn = fj.function(lambda x, w: fj.tanh(x @ w).sum()).ir(x, w)
    g = grad_function(fn, [0, 1])
    verify(g)
    ranks = [[v.type.ndim for v in op.inputs] for op in g.walk() if op.name == "matmul"]
    assert ranks == [[3, 2], [3, 2], [2, 2]], ranks   # the forward product, x's gradient, w's
    assert [op.name for op in g.walk()].count("reduce_sum") == 1   # the loss's sum only
    _, gx, gw = interpret(g, [x, w])
    dy = 1 - np.tanh(x @ w) ** 2
    np.testing.assert_allclose(gw, np.einsum("btd,btf->df", x, dy), rtol=1e-12)
    np.testing.assert_allclose(gx, dy @ w.T, rtol=1e-12)
    np.testing.assert_allclose(fj.grad(lambda w: fj.tanh(fj.asarray(x) @ w).sum())(w), gw, rtol=1e-10)
