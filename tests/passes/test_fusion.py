"""Fusion: structure of the fused IR for the benchmark workloads, and exactness on
random programs."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import flowjit as fj
from flowjit.ir import interpret, parse, verify
from flowjit.passes.fusion import fusion
from tests.test_programs import programs, run_program


def _kernels(fn) -> list:
    return [op for op in fn.walk() if op.name == "fusion"]


def _top_level(fn) -> list[str]:
    return [op.name for op in fn.body.ops]


def gelu(x):
    return 0.5 * x * (1 + fj.tanh(0.7978845608 * (x + 0.044715 * x ** 3)))


def softmax(x):
    m = x.max(axis=-1, keepdims=True)
    e = fj.exp(x - m)
    return e / e.sum(axis=-1, keepdims=True)


def layer_norm(x, g, b):
    mu = x.mean(axis=-1, keepdims=True)
    d = x - mu
    var = (d * d).mean(axis=-1, keepdims=True)
    return d * fj.rsqrt(var + 1e-5) * g + b


X = np.random.default_rng(0).standard_normal((8, 16)).astype(np.float32)


def test_gelu_is_one_kernel():
    fn = fj.function(gelu).ir(X, stage="fused")
    assert _top_level(fn) == ["fusion"]
    fused = fj.function(gelu, backend="interpreter")(X)  # the fused IR, run exactly
    np.testing.assert_allclose(fused, interpret(fj.function(gelu).ir(X), [X])[0], rtol=0, atol=0)


def test_softmax_and_layer_norm_are_at_most_two_kernels():
    for f, args in ((softmax, (X,)), (layer_norm, (X, X[0], X[1]))):
        fn = fj.function(f).ir(*args, stage="fused")
        assert len(_kernels(fn)) <= 2 and set(_top_level(fn)) == {"fusion"}, str(fn)


def test_chain_of_twenty_elementwise_ops_is_one_kernel():
    def chain(x, y):
        for i in range(20):
            x = fj.tanh(x) * y if i % 2 else x + y
        return x
    fn = fj.function(chain).ir(X, X, stage="fused")
    assert _top_level(fn) == ["fusion"]
    assert sum(1 for op in fn.walk() if op.primitive.kind == "elementwise") == 30


def test_matmul_stays_outside_and_bias_activation_fuse_after_it():
    fn = fj.function(lambda x, w, b: fj.tanh(x @ w + b)).ir(X, X.T, X[:, 0], stage="fused")
    assert _top_level(fn) == ["matmul", "fusion"]


def test_fused_ops_are_named_and_list_lines():
    (k,) = _kernels(fj.function(softmax).ir(X, stage="fused"))
    assert k.attrs["name"] == "reduce_max_sub_exp_reduce_sum_div"
    assert k.attrs["lines"].startswith("test_fusion.py:")


def test_value_used_outside_is_an_extra_output():
    def f(x):
        y = fj.exp(x)
        return y * 2, y.sum()
    fn = fj.function(f).ir(X, stage="fused")
    verify(fn)
    outs = interpret(fn, [X])
    np.testing.assert_allclose(outs[0], np.exp(X) * 2, rtol=1e-6)
    np.testing.assert_allclose(outs[1], np.exp(X).sum(), rtol=1e-5)


def test_a_producer_with_users_in_two_kernels_is_not_duplicated():
    def f(x, w):
        e = fj.exp(x)             # used by a kernel before the matmul and by one after
        return (e @ w) + e.sum(axis=1, keepdims=True)
    fn = fj.function(f).ir(X, X.T, stage="fused")
    verify(fn)
    assert sum(1 for op in fn.walk() if op.name == "exp") == 1


def test_fused_text_round_trips():
    fn = fj.function(layer_norm).ir(X, X[0], X[1], stage="fused")
    assert str(parse(str(fn))) == str(fn)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs(), st.integers(0, 2**31 - 1))
@example(program=("f32", [(4, 4), (4, 4)],
                  [("prim", "neg", (0,)), ("prim", "neg", (0,)), ("prim", "neg", (0,)), ("prim", "neg", (0,)),
                   ("gram", None, (3,)), ("prim", "add", (0, 2)), ("gram", None, (2,)), ("prim", "add", (6, 7)),
                   ("transpose", None, (0,)), ("prim", "add", (8, 3))], 1),
          seed=0)  # a path that returns through an earlier member of a kernel closed a cycle
def test_fusion_is_exact_on_random_programs(program, seed):
    short, in_shapes, steps, n_out = program
    rng = np.random.default_rng(seed)
    dt = {"f32": np.float32, "f64": np.float64, "i32": np.int32, "i64": np.int64}[short]
    inputs = [(rng.standard_normal(s) * 3).astype(dt) for s in in_shapes]
    traced = fj.function(lambda *xs: run_program(steps, xs, n_out, traced=True)).ir(*inputs)
    fused = fusion(traced.clone())
    verify(fused)
    assert all(op.primitive.kind not in ("elementwise", "layout", "reduction")
               or all(u.primitive.kind == "opaque" for r in op.results for u, _ in r.uses)
               for op in fused.body.ops)
    for a, b in zip(interpret(fused, inputs), interpret(traced, inputs), strict=True):
        np.testing.assert_array_equal(a, b)


def test_ops_on_different_devices_are_not_fused_together():
    fn = parse("""func @f(%x: f32[4]) -> (f32[4]) {
  %0 = exp %x : f32[4] @cpu:0
  %1 = neg %0 : f32[4] @cpu:0
  %2 = tanh %1 : f32[4] @cpu:1
  %3 = abs %2 : f32[4] @cpu:1
  return %3
}
""")
    fused = fusion(fn)
    verify(fused)
    kernels = [op for op in fused.body.ops if op.name == "fusion"]
    assert [(k.device, [o.name for o in k.blocks[0].ops]) for k in kernels] == [
        ("cpu:0", ["exp", "neg"]), ("cpu:1", ["tanh", "abs"])]


def _training_step_ir():
    l1 = fj.nn.Dense(8, 16, fj.nn.relu, key=0, name="h")
    l2 = fj.nn.Dense(16, 4, key=1, name="o")
    opt = fj.optim.Adam(0.1)
    step = fj.function(lambda x, y: opt.minimize(lambda: fj.nn.softmax_cross_entropy(l2(l1(x)), y),
                                                 l1.variables + l2.variables))
    return step.ir(np.zeros((32, 8), np.float32), np.zeros(32, np.int32), stage="fused")


def test_a_value_read_by_several_kernels_joins_one_as_an_extra_output():
    fn = _training_step_ir()
    verify(fn)
    # relu's bias add, comparison and select are one kernel whose mask and activations
    # the backward pass and the next matmul read.
    (relu,) = [op for op in fn.body.ops if op.name == "fusion" and op.attrs["name"] == "add_le_select"]
    assert len(relu.results) == 2


def test_the_updates_of_every_parameter_are_a_handful_of_kernels():
    fn = _training_step_ir()
    # Adam's slots, the parameters and the step counter: 13 assigned values. The updates
    # that only leave the program merge into one kernel; one bias update fuses into the
    # kernel computing its gradient.
    feeding_assign = {op.inputs[1].producer.id for op in fn.body.ops if op.name == "assign"}
    assert len(feeding_assign) <= 2
    assert len([op for op in fn.body.ops if op.name == "fusion"]) <= 6, str(fn)


def test_a_large_parameters_update_is_a_kernel_of_its_own_split_over_the_pool():
    # An embedding table's Adam-like update (APART_ELEMENTS or more) stays apart from the
    # other updates, which still merge: a kernel of one loop is what the pool splits.
    from flowjit.codegen_cpu import native_pool, program_plan
    from flowjit.passes.fusion import APART_ELEMENTS
    if native_pool().workers == 0:
        pytest.skip("FLOWJIT_NUM_THREADS=1: no pool to split a loop over")

    rows = APART_ELEMENTS // 64

    def step(table, w, b, gt, gw, gb):
        return table - 0.1 * gt / (fj.sqrt(gt * gt) + 1e-8), w - 0.1 * gw, b - 0.1 * gb
    rng = np.random.default_rng(3)
    args = [rng.standard_normal(s).astype(np.float32) for s in ((rows, 64), (64, 10), (10,))] * 2
    f = fj.function(step)
    got = f(*args)
    for g, want in zip(got, step(*[np.asarray(a) for a in args])):
        np.testing.assert_allclose(g, want, rtol=1e-6, atol=1e-6)
    fused = f.ir(*args, stage="fused")
    kernels = _kernels(fused)
    big = [k for k in kernels if any(v.type.shape == (rows, 64) for v in k.results)]
    assert len(kernels) == 2 and len(big) == 1 and len(big[0].results) == 1, [k.results for k in kernels]
    from flowjit.passes.fusion import REASONS, boundaries_of
    assert [b.code for b in boundaries_of(fused)].count("split_apart") == 1 and "split_apart" in REASONS
    f(*args)
    exe = f._lookup(tuple(args), {})[0].executable
    calls = [s for s in program_plan.walk_steps(exe._program.plan.steps) if isinstance(s, program_plan.KernelCall)]
    assert [s.split is not None for s in calls].count(True) == 1, [(s.kernel.name, s.split) for s in calls]


def test_a_transposed_matmul_operand_is_a_view_not_a_kernel():
    fn = fj.function(lambda x, w: x.T @ w).ir(X, X, stage="fused")
    assert _top_level(fn) == ["transpose", "matmul"]
    np.testing.assert_allclose(fj.function(lambda x, w: x.T @ w)(X, X), X.T @ X, rtol=1e-5)


def test_joining_a_kernel_never_closes_a_cycle_through_a_library_call():
    def f(x, w):
        e = fj.exp(x)               # read by the matmul and by the kernel that reads the matmul
        return e * 2 + e @ w

    fn = fj.function(f).ir(X[:, :8], X[:8, :8], stage="fused")
    verify(fn)
    x, w = X[:, :8], X[:8, :8]
    np.testing.assert_allclose(fj.function(f)(x, w), np.exp(x) * 2 + np.exp(x) @ w, rtol=1e-5)


def _slice_and_join_chain(steps):
    def f(v):
        for _ in range(steps):
            v = fj.concatenate([v[:3] * 2.0 + v[3:], v[3:] - v[:3]])
        return v
    return f


def _lowered_size(fn) -> int:
    from flowjit.lowering import lower_block
    from flowjit.lowering.loops import expressions
    return sum(sum(1 for _ in expressions(lower_block(k.blocks[0]).body)) for k in _kernels(fn))


def test_an_op_read_through_several_layout_ops_is_not_recomputed_without_bound():
    # Each step reads the last one at two shifted positions: fused whole, the loop lowering
    # computes step 1 2**k times per element (compiling 8 steps took 55 s). The kernel is cut
    # where an op would be computed more than MAX_RECOMPUTE times, so the lowered code grows
    # linearly with the steps.
    from flowjit.passes.fusion import boundaries_of
    x = np.arange(6.0)
    small = fj.function(_slice_and_join_chain(8)).ir(x, stage="fused")
    large = fj.function(_slice_and_join_chain(16)).ir(x, stage="fused")
    assert _lowered_size(large) <= 3 * _lowered_size(small)
    assert any(b.code == "recompute" for b in boundaries_of(large))
    want = x
    for _ in range(16):
        want = np.concatenate([want[:3] * 2 + want[3:], want[3:] - want[:3]])
    np.testing.assert_allclose(fj.function(_slice_and_join_chain(16))(x), want)


def test_a_few_shifted_reads_of_a_cheap_op_still_fuse():
    # A periodic second difference of exp(x): exp is computed five times per element in one
    # kernel rather than stored and read back.
    def f(x):
        e = fj.exp(x)
        return fj.concatenate([e[1:], e[:1]]) + fj.concatenate([e[-1:], e[:-1]]) - 2 * e
    x = np.linspace(0.0, 1.0, 8)
    assert len(_kernels(fj.function(f).ir(x, stage="fused"))) == 1
    e = np.exp(x)
    np.testing.assert_allclose(fj.function(f)(x), np.roll(e, -1) + np.roll(e, 1) - 2 * e)


def test_a_transpose_read_only_by_a_sort_lapack_or_cumsum_is_a_kernel_not_a_view():
    # Only BLAS reads a transposed operand in place; a sort, LAPACK or a cumsum reads its
    # buffer as it is, so the transpose left outside every kernel had no native form.
    x = np.random.default_rng(0).standard_normal((4, 6)).astype(np.float32)
    cases = ((lambda a: fj.sort(a.T, axis=-1), lambda a: np.sort(a.T, axis=-1)),
             (lambda a: fj.linalg.inv((a @ a.T).T + 4.0 * np.eye(4, dtype=np.float32)),
              lambda a: np.linalg.inv((a @ a.T).T + 4.0 * np.eye(4))),
             (lambda a: fj.cumsum(a.T, axis=0), lambda a: np.cumsum(a.T, axis=0)))
    for f, want in cases:
        g = fj.function(f)
        np.testing.assert_allclose(g(x), want(x), rtol=1e-4, atol=1e-5)
        assert fj.explain(g, x).driver.startswith("one native call"), fj.explain(g, x).driver


@pytest.mark.parametrize(("kernel", "strides", "dilation", "fused"), [
    ((3, 3), (1, 1), (1, 1), False),   # 9 taps read each element: past MAX_RECOMPUTE
    ((2, 2), (1, 1), (1, 1), True),    # 4
    ((3, 3), (2, 2), (1, 1), True),    # 2 x 2: a stride skips taps
    ((3, 3), (2, 2), (2, 2), False),   # a dilation of the stride's brings them back: 3 x 3
])
def test_a_convolutions_windows_count_their_taps_against_the_recompute_bound(kernel, strides, dilation, fused):
    # A convolution's windows read each input element at up to one position a tap
    # (conv_patches declares ``reads``): fused, the producer (here the gradient's 2 * y, the
    # tanh of a layer) would be computed that many times per element, the windows' kernel a
    # six-deep nest where the lone windows run as a compiled routine.
    from flowjit.passes.fusion import boundaries_of
    from flowjit.tracer.core import bind
    x = np.random.default_rng(0).standard_normal((2, 7, 7, 3)).astype(np.float32)
    attrs = {"kernel": kernel, "strides": strides, "dilation": dilation, "pads": (1, 1, 1, 1)}
    f = fj.function(lambda x: bind("conv_patches", [fj.tanh(x)], attrs))
    fused_fn = f.ir(x, stage="fused")
    kernels = [op.attrs["name"] for op in _kernels(fused_fn)]
    assert (kernels == ["tanh_conv_patches"]) == fused, kernels
    assert any(b.code == "recompute" for b in boundaries_of(fused_fn)) != fused
    want = fj.function(lambda x: bind("conv_patches", [fj.tanh(x)], attrs), backend="interpreter")(x)
    np.testing.assert_allclose(f(x), want, rtol=1e-6, atol=1e-6)
