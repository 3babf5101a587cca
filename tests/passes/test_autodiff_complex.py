"""Gradients of complex programs follow JAX's convention: the cotangent of a complex value
pairs with its tangent as Re(ct * t), so for a real-valued f(z), z = x + iy,
grad(f)(z) = df/dx - i df/dy (the conjugate of PyTorch's). The literal expectations below
are JAX 0.10.2's answers; the finite-difference oracle is that formula."""

from __future__ import annotations

import numpy as np
import pytest

import flowjit as fj
from flowjit.ir.errors import AutodiffError
from flowjit.tracer.core import bind

# fft: against the same finite differences in tests/tracer/test_fft.py; eig (complex results even
# for a real matrix) in tests/tracer/test_linalg_complex.py.
COMPLEX_GRADIENTS_CHECKED = {"real", "imag", "conj", "complex", "fft", "eig"}

Z = np.complex128(1 + 2j)


def fd_grad(f, z: np.ndarray, h: float = 1e-6) -> np.ndarray:
    """df/dx - i df/dy of a real-valued f of a complex array, by central differences."""
    z = np.asarray(z, np.complex128)
    out = np.zeros_like(z)
    for k in np.ndindex(z.shape):
        e = np.zeros_like(z)
        e[k] = 1
        dx = (f(z + h * e) - f(z - h * e)) / (2 * h)
        dy = (f(z + 1j * h * e) - f(z - 1j * h * e)) / (2 * h)
        out[k] = dx - 1j * dy
    return out


@pytest.mark.parametrize("f, want", [
    (lambda z: fj.abs(z) ** 2, 2 - 4j),                        # 2 conj(z)
    (lambda z: fj.real(z * z), 2 + 4j),                         # x^2 - y^2: 2x + 2iy
    (lambda z: fj.imag(z), -1j),
    (lambda z: fj.abs(z), np.conj(Z) / abs(Z)),
    (lambda z: fj.angle(z), -0.4 - 0.2j),                       # (-y - ix) / |z|^2
    (lambda z: fj.real(fj.conj(z) * 3j), 0 - 3j),
    (lambda z: fj.real(z ** 2.5), 2.5 * Z ** 1.5),              # a holomorphic g: grad Re g = g'
    (lambda z: fj.real(fj.sign(z)), 0j),                        # JAX's sign has a zero derivative
])
def test_grad_of_a_real_function_of_z_is_jaxs(f, want):
    got = fj.grad(f)(np.array(Z))
    assert got.dtype == np.complex128
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_grad_of_abs_at_zero_is_zero():
    assert fj.grad(fj.abs)(np.array(0j)) == 0


def test_abs_of_complex_differentiates_twice():
    # The gradient conj(z)/|z| is a division, not sign(z) (declared flat): its own gradient
    # matches finite differences (the autograd suite's second-order abs check found it).
    w = 0.3 - 1.1j

    def h(z):
        return fj.real(fj.grad(fj.abs)(z) * w)
    z = np.array(0.4 + 0.03j)
    np.testing.assert_allclose(fj.grad(h)(z), fd_grad(lambda v: np.real(np.conj(v) / np.abs(v) * w), z),
                               rtol=1e-6)


def test_a_mixed_program_matches_finite_differences_and_jax():
    def f(z):
        return fj.sum(fj.abs(fj.sin(z)) ** 2 + fj.real(fj.exp(z) * fj.conj(z)))
    got = fj.grad(f)(np.array(Z))
    np.testing.assert_allclose(got, 3.5903420033 - 25.0275084296j, rtol=1e-9)
    np.testing.assert_allclose(got, fd_grad(lambda z: np.sum(np.abs(np.sin(z)) ** 2 + np.real(np.exp(z) * np.conj(z))),
                                            np.array(Z)), rtol=1e-7)


def test_vjps_of_the_parts_are_jaxs():
    x, y = np.float64(3.0), np.float64(4.0)
    _, pull = fj.vjp(lambda a, b: bind("complex", [a, b]), x, y)
    gx, gy = pull(np.complex128(3 + 4j))
    assert (gx, gy) == (3.0, -4.0)
    _, pull = fj.vjp(lambda z: fj.conj(z), np.complex128(1 + 1j))
    assert pull(np.complex128(1 + 1j))[0] == 1 - 1j
    _, pull = fj.vjp(lambda a: fj.astype(a, fj.complex128), x)
    assert pull(np.complex128(3 + 4j))[0] == 3.0  # a real input takes the real part
    _, pull = fj.vjp(lambda z: z * z, Z)
    np.testing.assert_allclose(pull(np.complex128(1j))[0], -4 + 2j)  # ct * f'(z): no conjugate
    _, pull = fj.vjp(lambda a, z: a * z, x, Z)
    ga, gz = pull(np.complex128(1.0))
    np.testing.assert_allclose((ga, gz), (1.0, 3.0))  # ct_a = Re(ct z), ct_z = ct a


UNARY = ["exp", "expm1", "log", "log1p", "sqrt", "sin", "cos", "tanh", "sinh", "cosh", "arcsin", "arccos",
         "arctan", "arcsinh", "arccosh", "arctanh", "negative", "square", "conj", "real", "imag", "abs"]


@pytest.mark.parametrize("name", UNARY)
def test_each_complex_function_matches_finite_differences(name):
    rng = np.random.default_rng(len(name))
    # Away from branch cuts and poles: a quadrant where every function is smooth.
    z = (0.3 + 0.5 * rng.random(4)) + 1j * (0.2 + 0.5 * rng.random(4))
    w = rng.standard_normal(4) + 1j * rng.standard_normal(4)
    fj_fn, np_fn = getattr(fj, name), getattr(np, name) if name != "abs" else np.abs

    def loss(z):
        return fj.sum(fj.real(w * fj_fn(z)))
    got = fj.grad(loss)(z)
    want = fd_grad(lambda z: np.sum(np.real(w * np_fn(z))), z)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-8)
    # The same through fj.function (the compiled path) as eagerly.
    np.testing.assert_allclose(fj.function(fj.grad(loss))(z), got, rtol=1e-12)


@pytest.mark.parametrize("name", ["add", "subtract", "multiply", "divide", "power"])
def test_each_complex_binary_function_matches_finite_differences(name):
    rng = np.random.default_rng(7)
    a = (0.5 + rng.random(3)) + 1j * (0.5 + rng.random(3))
    b = (0.5 + rng.random(3)) + 1j * rng.random(3)
    w = rng.standard_normal(3) + 1j * rng.standard_normal(3)
    fj_fn, np_fn = getattr(fj, name), getattr(np, name)
    ga, gb = fj.grad(lambda a, b: fj.sum(fj.real(w * fj_fn(a, b))), argnums=(0, 1))(a, b)
    np.testing.assert_allclose(ga, fd_grad(lambda a: np.sum(np.real(w * np_fn(a, b))), a), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(gb, fd_grad(lambda b: np.sum(np.real(w * np_fn(a, b))), b), rtol=1e-6, atol=1e-8)


def test_sums_and_matmul_of_complex_match_finite_differences():
    rng = np.random.default_rng(1)
    a = rng.standard_normal((3, 4)) + 1j * rng.standard_normal((3, 4))
    b = rng.standard_normal((4, 2)) + 1j * rng.standard_normal((4, 2))

    def loss(a):
        return fj.sum(fj.abs(a @ b) ** 2) + fj.real(fj.sum(fj.prod(a, axis=0))) + fj.imag(fj.sum(fj.cumsum(a, 1)))
    want = fd_grad(lambda a: np.sum(np.abs(a @ b) ** 2) + np.real(np.sum(np.prod(a, axis=0)))
                   + np.imag(np.sum(np.cumsum(a, 1))), a)
    np.testing.assert_allclose(fj.grad(loss)(a), want, rtol=1e-6, atol=1e-7)


def test_grad_of_a_complex_result_says_to_take_a_real_part():
    assert fj.AutodiffError is AutodiffError  # users catch it as fj.AutodiffError
    with pytest.raises(fj.AutodiffError, match=r"returns a complex scalar.*fj.real\(\), fj.imag\(\) or fj.abs\(\)"):
        fj.grad(lambda z: z * z)(np.array(Z))
