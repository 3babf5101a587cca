"""The decompose pass: ops written in other primitives before placement, where a rule
declines an op a code generator computes itself (a float32 matmul: BLAS)."""

from __future__ import annotations

import numpy as np
import pytest

import flowjit as fj
import flowjit.scipy.special as S


def _ops(f, *args):
    return [op.name for op in f.ir(*args, stage="fused").walk()]


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int16, np.int32, np.int64, np.uint64])
@pytest.mark.parametrize("shapes", [((5, 7), (7, 3)), ((2, 5, 7), (7, 3)), ((2, 1, 5, 7), (3, 7, 4))],
                         ids=["2d", "batched", "broadcast"])
def test_an_integer_matmul_is_one_native_kernel_that_wraps_as_numpy(dtype, shapes):
    rng = np.random.default_rng(len(shapes[0]))
    info = np.iinfo(dtype)
    a, b = (rng.integers(info.min, info.max, size=s, dtype=dtype, endpoint=True) for s in shapes)
    f = fj.function(lambda x, y: x @ y)
    with np.errstate(all="ignore"):
        want = np.matmul(a, b)   # NumPy's integer matmul wraps in the dtype
    np.testing.assert_array_equal(f(a, b), want)
    assert "native driver" in f.kernels(a, b)
    assert "matmul" not in _ops(f, a, b)


def test_a_float16_matmul_is_the_float32_product_rounded():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((9, 40)).astype(np.float16), rng.standard_normal((40, 6)).astype(np.float16)
    f = fj.function(lambda x, y: x @ y)
    got = f(a, b)
    want = np.matmul(a.astype(np.float32), b.astype(np.float32)).astype(np.float16)
    assert got.dtype == np.float16
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=1e-3, atol=1e-3)
    assert "native driver" in f.kernels(a, b)
    assert _ops(f, a, b).count("matmul") == 1   # the float32 product, one gemm


def test_float_and_complex_matmuls_stay_products():
    x = np.ones((4, 3), np.float32)
    assert _ops(fj.function(lambda a: a @ a.T), x).count("matmul") == 1
    z = np.ones((4, 3), np.complex64)
    assert _ops(fj.function(lambda a: a @ a.T), z).count("matmul") == 1


def test_what_a_decomposition_emits_is_decomposed_in_turn():
    # gammainc_grad_a becomes its sums (while loops, the tracer's block), which read lgamma and
    # digamma: those decompose too, into elementwise ops, and the program stays native.
    a, x = np.array([0.5, 2.0, 9.0]), np.array([0.3, 4.0, 2.0])
    f = fj.function(fj.grad(lambda a, x: S.gammainc(a, x).sum()))
    ops = _ops(f, a, x)
    assert "while" in ops
    assert not {"gammainc_grad_a", "lgamma", "polygamma"} & set(ops)
    assert "native driver" in f.kernels(a, x)
