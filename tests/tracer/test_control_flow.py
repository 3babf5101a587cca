"""fj.cond / switch / while_loop / fori_loop / scan against plain Python references,
traced and eager, interpreted and compiled; nesting; closures; errors; the text form."""

from __future__ import annotations

import numpy as np
import pytest

import flowjit as fj
from flowjit.ir import parse, print_function, verify
from flowjit.ir.errors import FlowjitTypeError, TracerError
from tests.finite_differences import central_differences

MODES = [pytest.param({}, id="compiled"), pytest.param({"interpret": True}, id="interpreted")]
RNG = np.random.default_rng(0)


@pytest.mark.parametrize("mode", MODES)
def test_cond_runs_the_chosen_branch_with_closures_and_pytrees(mode):
    @fj.function(**mode)
    def f(x, p):
        scale = x.sum()  # read by one branch only: an explicit input of the cond op
        out = fj.cond(p, lambda a, b: {"s": a * scale, "t": (b, a)}, lambda a, b: {"s": a - 1, "t": (b * 2, a)},
                      x, x[0])
        return out["s"], out["t"]

    x = RNG.standard_normal(5)
    for p in (True, False):
        s, (t0, t1) = f(x, p)
        np.testing.assert_allclose(s, x * x.sum() if p else x - 1)
        np.testing.assert_allclose(t0, x[0] if p else 2 * x[0])
        np.testing.assert_allclose(t1, x)


def test_cond_and_switch_work_eagerly():
    x = np.arange(3.0)
    np.testing.assert_allclose(fj.cond(np.bool_(False), lambda a: a + 1, lambda a: a - 1, x), x - 1)
    branches = [lambda a: a, lambda a: a * 10, lambda a: -a]
    for i, want in ((-4, x), (1, x * 10), (2, -x), (9, -x)):  # the index is clamped
        np.testing.assert_allclose(fj.switch(i, branches, x), want)


@pytest.mark.parametrize("mode", MODES)
def test_while_loop_newton_sqrt_converges(mode):
    def newton_sqrt(a):
        def body(c):
            x, _ = c
            nxt = 0.5 * (x + a / x)
            return nxt, fj.abs(nxt - x)
        x, _ = fj.while_loop(lambda c: c[1] > 1e-12, body, (a, fj.asarray(1.0)))
        return x

    a = np.array([2.0, 9.0, 1e4])
    np.testing.assert_allclose(fj.function(newton_sqrt, **mode)(a[0]), np.sqrt(2.0), rtol=1e-14)
    np.testing.assert_allclose([fj.function(newton_sqrt, **mode)(v) for v in a], np.sqrt(a), rtol=1e-14)


def test_while_loop_stops_at_maximum_iterations():
    i, x = fj.function(lambda x: fj.while_loop(lambda c: c[0] < 100, lambda c: (c[0] + 1, c[1] * 2), (0, x),
                                               maximum_iterations=7))(np.float32(1))
    assert int(i) == 7 and float(x) == 128.0


@pytest.mark.parametrize("lo,hi", [(0, 10), (3, 3), (5, 2)])
def test_fori_loop_static_and_traced_bounds(lo, hi):
    want = sum(range(lo, hi)) + 0.5
    assert float(fj.fori_loop(lo, hi, lambda i, v: v + i, np.float64(0.5))) == want
    traced = fj.function(lambda lo, hi, v: fj.fori_loop(lo, hi, lambda i, v: v + i, v))
    assert float(traced(np.int32(lo), np.int32(hi), np.float64(0.5))) == want


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("reverse", [False, True])
def test_scan_matches_a_python_loop(mode, reverse):
    xs = RNG.standard_normal((6, 3))
    w = RNG.standard_normal((3, 3))

    def rnn(h0, xs):
        return fj.scan(lambda h, x: (fj.tanh(h @ w + x), {"h": h, "sum": h.sum()}), h0, xs, reverse=reverse)

    h, ys = fj.function(rnn, **mode)(np.zeros(3), xs)
    ref_h, ref_ys, ref_sums = np.zeros(3), np.zeros((6, 3)), np.zeros(6)
    for t in (reversed(range(6)) if reverse else range(6)):
        ref_ys[t], ref_sums[t] = ref_h, ref_h.sum()
        ref_h = np.tanh(ref_h @ w + xs[t])
    np.testing.assert_allclose(h, ref_h, rtol=1e-12)
    np.testing.assert_allclose(ys["h"], ref_ys, rtol=1e-12)
    np.testing.assert_allclose(ys["sum"], ref_sums, rtol=1e-12, atol=1e-15)


def test_scan_with_length_and_no_xs():
    carry, ys = fj.scan(lambda c, _: (c * 2, c), np.int64(1), None, length=5)
    assert int(carry) == 32 and list(ys) == [1, 2, 4, 8, 16]


@pytest.mark.parametrize("mode", MODES)
def test_cond_inside_scan_inside_while(mode):
    def f(x, n):
        def outer_body(c):
            k, v = c

            def step(acc, xi):
                acc = fj.cond(xi > 0, lambda a: a + xi * k, lambda a: a - 1.0, acc)
                return acc, acc
            v, _ = fj.scan(step, v, x)
            return k + 1, v
        return fj.while_loop(lambda c: c[0] < n, outer_body, (fj.asarray(0.0), fj.asarray(0.0)))[1]

    x = np.array([1.0, -2.0, 3.0])

    def ref(x, n):
        k, v = 0.0, 0.0
        while k < n:
            for xi in x:
                v = v + xi * k if xi > 0 else v - 1.0
            k += 1
        return v

    for n in (0.0, 1.0, 3.0):
        assert float(fj.function(f, **mode)(x, np.float64(n))) == pytest.approx(ref(x, n))


def test_loops_of_kernels_run_natively_without_python_per_iteration():
    from flowjit.ir.primitives.control import PYTHON_BLOCK_RUNS

    f = fj.function(lambda xs: fj.scan(lambda c, x: (c + fj.exp(x) * 2, c.sum()), fj.zeros(4), xs))
    g = fj.function(lambda x: fj.fori_loop(0, 1000, lambda i, v: v * 0.5 + 1.0, x))
    xs = RNG.standard_normal((50, 4))
    f(xs), g(np.float64(3))  # compile
    before = PYTHON_BLOCK_RUNS["blocks"]
    c, ys = f(xs)
    v = g(np.float64(3))
    assert PYTHON_BLOCK_RUNS["blocks"] == before
    np.testing.assert_allclose(c, (np.exp(xs) * 2).sum(axis=0), rtol=1e-12)
    np.testing.assert_allclose(ys, np.concatenate([[0], np.cumsum((np.exp(xs) * 2).sum(axis=1))[:-1]]), rtol=1e-12)
    ref = 3.0
    for _ in range(1000):
        ref = ref * 0.5 + 1.0
    assert float(v) == ref
    # A 2-D matmul in the body runs natively too (a BLAS gemm).
    w = RNG.standard_normal((4, 4))
    rnn = fj.function(lambda xs: fj.scan(lambda c, x: (fj.tanh(c @ w + x), None), fj.zeros((1, 4)), xs)[0])
    rnn(xs[:, None])
    before = PYTHON_BLOCK_RUNS["blocks"]
    h = rnn(xs[:, None])
    assert PYTHON_BLOCK_RUNS["blocks"] == before
    ref = np.zeros((1, 4))
    for x in xs:
        ref = np.tanh(ref @ w + x)
    np.testing.assert_allclose(h, ref, rtol=1e-12)
    # A batched (3-D) matmul too (one gemm per batch position).
    batched = fj.function(lambda xs: fj.scan(lambda c, x: (fj.tanh(c @ w + x), None), fj.zeros((2, 1, 4)),
                                             xs)[0])
    xs3 = RNG.standard_normal((50, 2, 1, 4))
    batched(xs3)
    before = PYTHON_BLOCK_RUNS["blocks"]
    h3 = batched(xs3)
    assert PYTHON_BLOCK_RUNS["blocks"] == before
    ref = np.zeros((2, 1, 4))
    for x in xs3:
        ref = np.tanh(ref @ w + x)
    np.testing.assert_allclose(h3, ref, rtol=1e-12)
    # A Python callback in the body is host work: the loop steps in Python, its blocks
    # compiled on their own.
    hosted = fj.function(lambda xs: fj.scan(
        lambda c, x: (fj.pure_callback(np.tanh, fj.ShapeDtype(c.shape, c.dtype), c @ w + x), None),
        fj.zeros((1, 4)), xs)[0])
    hosted(xs[:, None])
    before = PYTHON_BLOCK_RUNS["blocks"]
    np.testing.assert_allclose(hosted(xs[:, None]), h, rtol=1e-12)
    assert PYTHON_BLOCK_RUNS["blocks"] == before + 50


def test_branch_and_carry_errors_name_what_differs():
    with pytest.raises(FlowjitTypeError, match=r"false_fn returns .*f64\[3\].* true_fn returns .*f64\[2\]"):
        fj.function(lambda x, p: fj.cond(p, lambda a: a[:2], lambda a: a, x))(np.zeros(3), True)
    with pytest.raises(FlowjitTypeError, match="branches return different types"):
        fj.cond(np.bool_(True), lambda a: (a, a), lambda a: a, np.zeros(2))
    with pytest.raises(FlowjitTypeError, match=r"changes the carry element 1 from f64\[2\] to f64\[3\]"):
        fj.while_loop(lambda c: c[0] < 3, lambda c: (c[0] + 1, fj.concatenate([c[1], c[1][:1]])),
                      (0, np.zeros(2)))
    with pytest.raises(FlowjitTypeError, match=r"changes the carry from f32\[\] to f64\[\]"):
        fj.scan(lambda c, x: (c + x, c), np.float32(0), np.zeros(3))
    with pytest.raises(FlowjitTypeError, match=r"predicate of cond must be a scalar bool \(bool\[\]\), got f64\[3\]"):
        fj.cond(np.zeros(3), lambda a: a, lambda a: a, np.zeros(3))
    with pytest.raises(FlowjitTypeError, match=r"cond_fun must return a scalar bool"):
        fj.while_loop(lambda c: c, lambda c: c, np.float64(1))


def test_assigning_a_variable_inside_a_body_is_a_clear_error():
    v = fj.Variable(np.zeros(2), name="v")

    def body(c):
        v.assign(c)
        return c

    with pytest.raises(TracerError, match="assigning Variable v inside a branch or loop body"):
        fj.function(lambda x: fj.while_loop(lambda c: c.sum() < 3, body, x))(np.ones(2))


def test_nested_blocks_print_parse_and_verify():
    def f(x, p):
        y = fj.cond(p, lambda a: a * 2, lambda a: a, x)
        _, ys = fj.scan(lambda c, xi: (c + xi, fj.while_loop(lambda z: z < 10.0, lambda z: z * 2 + c, xi)), 0.0, y)
        return ys

    fn = fj.function(f).ir(np.ones(4), True)
    verify(fn)
    text = print_function(fn)
    assert "cond" in text and "scan" in text and "while" in text
    assert print_function(parse(text)) == text
    fused = fj.function(f).ir(np.ones(4), True, stage="fused")
    verify(fused)
    assert print_function(parse(print_function(fused))) == print_function(fused)


# ---- gradients against central finite differences (float64) ------------------------------

def _check_gradients(f, args, compiled=True):
    grads = fj.grad(f, argnums=tuple(range(len(args))))(*args)
    if compiled:
        again = fj.function(fj.grad(f, argnums=tuple(range(len(args)))))(*args)
        for a, b in zip(grads, again, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
    for i, g in enumerate(grads):
        np.testing.assert_allclose(g, central_differences(f, args, i), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("p", [True, False])
def test_cond_gradient_flows_through_the_taken_branch_and_closures(p):
    w = RNG.standard_normal(3)

    def f(x, w):
        y = fj.cond(np.bool_(p), lambda a: fj.sin(a) * w, lambda a: a * a + w.sum(), x)
        return (y * y).sum()

    _check_gradients(f, [RNG.standard_normal(3), w])


@pytest.mark.parametrize("reverse", [False, True])
def test_scan_gradient_through_carry_xs_and_closures(reverse):
    def f(w, h0, xs):
        h, ys = fj.scan(lambda h, x: (fj.tanh(h @ w + x), (h * x).sum()), h0, xs, reverse=reverse)
        return (h ** 2).sum() + (ys ** 3).sum()

    _check_gradients(f, [RNG.standard_normal((3, 3)) * 0.5, RNG.standard_normal(3), RNG.standard_normal((4, 3))])


def test_while_loop_with_maximum_iterations_and_fori_loop_gradients():
    def f(x):
        _, y = fj.while_loop(lambda c: c[1].sum() < 10.0, lambda c: (c[0] + 1, c[1] * 1.5 + fj.sin(c[1])), (0, x),
                             maximum_iterations=20)
        return (y ** 2).sum()

    _check_gradients(f, [np.array([0.5, 0.7])])

    def g(x, a):
        return fj.fori_loop(0, 4, lambda i, v: fj.sin(v) * a + i, x).sum()

    _check_gradients(g, [np.array([0.3, -1.2]), np.array([0.9, 1.1])])


def test_nested_control_flow_gradient():
    def f(x, w):
        def step(acc, xi):
            acc = fj.cond(xi > 0, lambda a: a * w + xi, lambda a: fj.sin(a), acc)
            return acc, acc
        acc, ys = fj.scan(step, x, np.array([1.0, -1.0, 2.0]))
        return acc.sum() + (ys ** 2).sum()

    _check_gradients(f, [RNG.standard_normal(2), RNG.standard_normal(2)])


def test_a_while_loop_without_maximum_iterations_is_not_differentiable():
    from flowjit.passes.autodiff import AutodiffError
    with pytest.raises(AutodiffError, match="needs maximum_iterations"):
        fj.grad(lambda x: fj.while_loop(lambda c: c < 3.0, lambda c: c * 2, x))(np.float64(1))


def test_branches_and_nested_loops_inside_a_loop_run_natively():
    from flowjit.ir.primitives.control import PYTHON_BLOCK_RUNS

    def f(x, n):
        def outer_body(c):
            k, v = c

            def step(acc, xi):
                acc = fj.cond(xi > 0, lambda a: a + xi * k, lambda a: a - 1.0, acc)
                return acc, acc * 2
            v, ys = fj.scan(step, v, x)
            return k + 1, v + ys.sum()
        return fj.while_loop(lambda c: c[0] < n, outer_body, (fj.asarray(0.0), fj.asarray(0.0)))[1]

    x = np.array([1.0, -2.0, 3.0, 0.5])
    g = fj.function(f)
    g(x, np.float64(2))
    before = PYTHON_BLOCK_RUNS["blocks"]
    got = float(g(x, np.float64(5)))
    assert PYTHON_BLOCK_RUNS["blocks"] == before
    assert got == pytest.approx(float(fj.function(f, interpret=True)(x, np.float64(5))))
