"""The fusion pass records why it kept two ops in different kernels (issue 22), from its
own decisions, without changing what fuses."""

from __future__ import annotations

import numpy as np
import pytest

import flowjit as fj
from flowjit.passes.fusion import REASONS, boundaries_of, fusion
from tests.random_programs import DTYPES, random_program

S = fj.ShapeDtype
F32 = np.float32


def gelu(x):
    return 0.5 * x * (1 + fj.tanh(0.7978845608 * (x + 0.044715 * x ** 3)))


def mlp_step(x, y, w1, b1, w2, b2):
    def loss(w1, b1, w2, b2):
        h = fj.nn.relu(x @ w1 + b1)
        logits = h @ w2 + b2
        return -fj.mean(fj.sum(fj.nn.log_softmax(logits) * y, axis=1))
    value, grads = fj.value_and_grad(loss, argnums=(0, 1, 2, 3))(w1, b1, w2, b2)
    return value, [p - 0.1 * g for p, g in zip((w1, b1, w2, b2), grads)]


def on_two_devices(x):
    y = fj.exp(x)
    with fj.device("cpu:1"):
        z = y * 2
    return z + 1


MLP_ARGS = (S((64, 32), F32), S((64, 10), F32), S((32, 16), F32), S((16,), F32), S((16, 10), F32), S((10,), F32))


def fused(f, *args):
    return fj.function(f).ir(*args, stage="fused")


def test_gelu_is_one_kernel_with_no_boundary():
    fn = fused(gelu, S((64, 32), F32))
    assert [op.primitive.role for op in fn.body.ops] == ["kernel"]
    assert boundaries_of(fn) == ()


def test_mlp_step_boundaries_are_the_matmuls_and_the_reductions():
    fn = fused(mlp_step, *MLP_ARGS)
    found = boundaries_of(fn)
    assert {b.code for b in found} <= set(REASONS)
    ids = {op.id: op for op in fn.body.ops}
    for b in found:  # each side is a top-level op of the fused program, named as it shows it
        for side, name in ((b.producer_id, b.producer), (b.consumer_id, b.consumer)):
            assert ids[side].attrs.get("name", ids[side].name) == name
    first = found[0]
    assert (first.producer, first.consumer, first.code) == ("matmul", "add_le_select", "library_call")
    assert first.producer_line == first.consumer_line == f"{__name__.rsplit('.', 1)[-1]}.py:23"
    # Every matmul is a boundary on each side; the loss's row sums and the bias gradient's
    # column sum are reductions of different axes.
    matmuls = [op for op in fn.body.ops if op.name == "matmul"]
    touching = {b.producer_id for b in found} | {b.consumer_id for b in found}
    assert all(m.id in touching for m in matmuls)
    mismatch = [b for b in found if b.code == "reduction_mismatch"]
    assert mismatch and "reduces axes [1] of [64, 10]" in mismatch[0].reason
    assert any(b.code == "cycle" and "leads back into the kernel" in b.reason for b in found)


def test_a_device_change_is_a_boundary(monkeypatch):
    monkeypatch.setenv("FLOWJIT_CPU_DEVICES", "2")
    found = boundaries_of(fused(on_two_devices, S((8, 4), F32)))
    assert [(b.producer, b.consumer, b.code) for b in found] == [
        ("exp", "send", "device_change"), ("recv", "mul_add", "device_change")]


def test_control_flow_is_a_boundary():
    def f(x):
        y = fj.exp(x)
        z = fj.cond(fj.sum(y) > 0, lambda v: v * 2, lambda v: v - 1, y)
        return z + 1
    found = boundaries_of(fused(f, S((8, 4), F32)))
    assert [(b.producer, b.consumer, b.code) for b in found] == [
        ("exp_reduce_sum_gt_cast", "cond", "control"), ("cond", "add", "control")]
    assert "runs its blocks as programs of their own" in found[0].reason


def test_a_random_draw_is_computed_in_the_kernel_that_reads_it():
    # The draw decomposes into the cipher's elementwise arithmetic (the decompose pass), which
    # fuses like any other: no boundary, one kernel.
    def f(x):
        return x * fj.random.uniform(fj.random.key(0), (8, 4))
    fn = fused(f, S((8, 4), F32))
    assert list(boundaries_of(fn)) == []
    assert [op.primitive.role for op in fn.body.ops].count("kernel") == 1


def _partitioned(seed: int) -> list:
    p = random_program(seed)
    args = [S(s, DTYPES[p.dtype]) for s in p.in_shapes]
    fns = [fj.function(p.function(fj))]
    if p.smooth:
        fns.append(fj.function(fj.grad(p.loss(fj), argnums=tuple(range(len(args))))))
    return [f.ir(*args, stage="partition") for f in fns]


@pytest.mark.parametrize("seed", range(40))
def test_recording_changes_nothing_that_fuses(seed):
    for fn in _partitioned(seed):
        recorded, plain = fusion(fn.clone()), fusion(fn.clone(), record=False)
        assert str(recorded) == str(plain)
        assert not hasattr(plain, "fusion_boundaries")


def test_the_reasons_of_a_known_program_are_fixed():
    found = boundaries_of(fused(mlp_step, *MLP_ARGS))
    softmax = "add_reduce_max_sub_exp_reduce_sum_log_and_6_more"
    softmax_grad = "reshape_broadcast_to_div_mul_add_reduce_sum_and_1_more"
    assert [(b.producer, b.consumer, b.code) for b in found] == [
        ("matmul", "add_le_select", "library_call"),
        ("add_le_select", "select_reduce_sum_mul_sub", "cycle"),
        ("add_le_select", "matmul", "library_call"),
        ("add_le_select", "transpose", "library_view"),
        ("matmul", softmax, "library_call"),
        (softmax, "reduce_sum_div_neg_mul_sub", "reduction_mismatch"),
        (softmax, softmax_grad, "cycle"),
        (softmax_grad, "matmul", "library_call"),
        (softmax_grad, "matmul", "library_call"),
        ("matmul", "select_reduce_sum_mul_sub", "library_call"),
        ("matmul", "reduce_sum_div_neg_mul_sub", "library_call"),
        ("select_reduce_sum_mul_sub", "matmul", "library_call"),
        ("matmul", "reduce_sum_div_neg_mul_sub", "library_call"),
    ]


def test_softmax_and_layer_norm_are_one_kernel_and_their_gradient_says_why_not():
    x, g = S((64, 128), F32), S((128,), F32)
    assert boundaries_of(fused(fj.nn.softmax, x)) == ()
    assert boundaries_of(fused(fj.nn.layer_norm, x, g, g)) == ()
    grad = fj.grad(lambda x, g, b: fj.sum(fj.nn.layer_norm(x, g, b) ** 2), argnums=(0, 1, 2))
    found = boundaries_of(fused(grad, x, g, g))
    assert found and all(b.code in REASONS and b.reason for b in found)
    assert {b.code for b in found} == {"reduction_mismatch"}  # row statistics, then column sums for g and b
    assert "reducing axes [0] of [64, 128]" in found[0].reason


def test_a_variables_last_update_is_not_a_boundary():
    w = fj.Variable(np.ones((8, 8), F32))

    def step(x):
        w.assign(w * 0.5 + x)
        return fj.sum(x)
    fn = fused(step, S((8, 8), F32))
    assert any(op.primitive.kind == "stateful" for op in fn.body.ops)
    assert boundaries_of(fn) == ()


@pytest.mark.parametrize("f, args, expected", [
    # A reduction feeding a use larger than its input: the sum is broadcast to 1024 elements.
    (lambda x, y: fj.sum(x) * y, [S((8,), F32), S((1024,), F32)],
     [("reduce_sum", "mul", "reduction_smaller", "reduce_sum reduces [8] (8 elements), the kernel reading it "
                                                 "loops over 1024")]),
    # A shape change: exp loops over 1024 elements, the kernel of the slice reading it over 4
    # (a slice of an argument joins its consumer: it reads 4 elements wherever they are).
    (lambda x: fj.exp(x)[:4] * 2, [S((1024,), F32)],
     [("exp", "slice_mul", "larger_loop", "exp loops over 1024 elements, the consumer's kernel over 4")]),
    # The size limit of a kernel of results: 40 independent 3-op results make two kernels.
    (lambda *xs: [fj.exp(x) * 2 + 1 for x in xs], [S((4,), F32)] * 40,
     [("exp_mul_add", "exp_mul_add", "size_limit", "the kernel of the results holds 96 ops; with 3 more it "
                                                   "would pass the limit of 96")]),
], ids=["reduction_smaller", "larger_loop", "size_limit"])
def test_each_reason_at_the_smallest_program_that_shows_it(f, args, expected):
    found = boundaries_of(fused(f, *args))
    assert [(b.producer, b.consumer, b.code) for b in found] == [e[:3] for e in expected]
    for b, e in zip(found, expected):
        assert b.reason.startswith(e[3])


def test_an_op_with_a_kernel_of_its_own_is_not_called_a_blas_call():
    # fft and sort run as kernels of their own, not through the BLAS: the reason at their
    # boundary says what they are, and only a matrix product's names the BLAS.
    def spectrum_then_sort(x, w):
        p = fj.abs(fj.fft.rfft(x)) + 1.0
        return (fj.sort(p, axis=-1) @ w) + 1.0

    found = boundaries_of(fused(spectrum_then_sort, S((8, 64), F32), S((33, 4), F32)))
    # Each boundary's reason is about the op that never fuses, which it names first.
    said = {b.reason.split(" ", 1)[0]: b for b in found if b.code == "library_call"}
    assert {"fft", "sort", "matmul"} <= set(said)
    for name in ("fft", "sort"):
        assert "BLAS" not in said[name].reason and "kernel of its own" in said[name].reason
    assert "runs as a BLAS call" in said["matmul"].reason
