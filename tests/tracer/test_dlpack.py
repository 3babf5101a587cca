"""DLPack: fj.from_dlpack and fj.function's arguments share a producer's host memory (no
copy), and fj's results (NumPy arrays) go to PyTorch and JAX the same way."""

from __future__ import annotations

import numpy as np
import pytest

import flowjit as fj
from flowjit.tracer.core import to_array


class DLPackOnly:
    """An array of some library that speaks DLPack and not NumPy's protocol (no
    ``__array__``): the DLPack capsule is NumPy's own, over ``base``'s memory."""

    def __init__(self, base: np.ndarray):
        self.base = base

    def __dlpack__(self, **kwargs):
        return self.base.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.base.__dlpack_device__()


def _double_plus_one(x):
    return x * 2 + 1


def test_from_dlpack_shares_memory_and_copies_when_asked():
    base = np.arange(6, dtype=np.float32).reshape(2, 3)
    shared = fj.from_dlpack(DLPackOnly(base))
    assert np.shares_memory(shared, base) and shared.shape == (2, 3) and shared.dtype == np.float32
    copied = fj.from_dlpack(DLPackOnly(base), copy=True)
    assert not np.shares_memory(copied, base)
    np.testing.assert_array_equal(copied, base)
    assert np.shares_memory(fj.from_dlpack(base, device="cpu:0"), base)


def test_from_dlpack_errors_name_the_function_and_argument():
    with pytest.raises(TypeError, match=r"from_dlpack: argument 'x' has type list, which does not implement "
                                        r"DLPack .*test_dlpack.py"):
        fj.from_dlpack([1.0, 2.0])


def test_a_dlpack_argument_is_read_without_a_copy():
    base = np.linspace(-1, 1, 12).reshape(3, 4)
    arr, weak = to_array(DLPackOnly(base), "argument 'x'")
    assert np.shares_memory(arr, base) and not weak
    f = fj.function(_double_plus_one)
    np.testing.assert_array_equal(f(DLPackOnly(base)), base * 2 + 1)
    np.testing.assert_array_equal(fj.add(DLPackOnly(base), 1.0), base + 1)  # eager, outside a trace
    np.testing.assert_array_equal(base, np.linspace(-1, 1, 12).reshape(3, 4))  # the argument is unchanged


def test_jax_both_ways():
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    # 1 MiB: fj allocates results of that size 64-byte aligned, which JAX needs to import without a copy
    a = jnp.arange(1 << 18, dtype=jnp.float32)
    view = fj.from_dlpack(a)
    assert view.ctypes.data == a.unsafe_buffer_pointer()
    assert to_array(a)[0].ctypes.data == a.unsafe_buffer_pointer()
    f = fj.function(_double_plus_one)
    out = f(a)
    np.testing.assert_array_equal(out, np.asarray(a) * 2 + 1)
    back = jnp.from_dlpack(out, copy=False)
    assert back.unsafe_buffer_pointer() == out.ctypes.data
    np.testing.assert_array_equal(np.asarray(back), out)
    # Small results come from NumPy's allocator (16-byte aligned), which JAX copies from, as from any ndarray.
    small = f(jnp.ones(3, jnp.float32))
    np.testing.assert_array_equal(np.asarray(jnp.from_dlpack(small)), [3, 3, 3])


def test_torch_both_ways():
    torch = pytest.importorskip("torch")
    t = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    view = fj.from_dlpack(t)
    assert view.ctypes.data == t.data_ptr()
    t[0, 0] = 7.0
    assert view[0, 0] == 7.0  # shared, not copied
    assert to_array(t)[0].ctypes.data == t.data_ptr()
    out = fj.function(_double_plus_one)(t)
    np.testing.assert_array_equal(out, t.numpy() * 2 + 1)
    back = torch.from_dlpack(out)
    assert back.data_ptr() == out.ctypes.data
    back[0, 0] = -1.0
    assert out[0, 0] == -1.0


@pytest.mark.parametrize("dtype", ["int8", "uint8", "uint16", "uint32", "uint64", "int16", "complex64", "complex128"])
def test_jax_exchanges_every_dtype_without_a_copy(dtype):
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    wide = np.dtype(dtype).itemsize * (1 if np.dtype(dtype).kind != "c" else 0.5) == 8
    before = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", wide or before)  # JAX's 64-bit types need it; put back below
    try:
        # 1 MiB: big enough that fj allocates the result 64-byte aligned, as JAX needs to share it
        a = jnp.arange((1 << 20) // np.dtype(dtype).itemsize).astype(dtype)
        view = fj.from_dlpack(a)
        assert view.dtype == np.dtype(dtype) and view.ctypes.data == a.unsafe_buffer_pointer()
        out = fj.function(lambda x: x + x)(a)
        assert out.dtype == np.dtype(dtype)
        back = jnp.from_dlpack(out, copy=False)
        assert back.dtype == np.dtype(dtype) and back.unsafe_buffer_pointer() == out.ctypes.data
        np.testing.assert_array_equal(np.asarray(back), np.asarray(a) + np.asarray(a))
    finally:
        jax.config.update("jax_enable_x64", before)


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16", "uint16", "uint32", "uint64", "complex64", "complex128"])
def test_torch_exchanges_every_dtype_without_a_copy(dtype):
    torch = pytest.importorskip("torch")
    a = np.arange(1 << 14).astype(dtype)
    t = torch.from_numpy(a)
    view = fj.from_dlpack(t)
    assert view.dtype == np.dtype(dtype) and view.ctypes.data == t.data_ptr()
    out = fj.function(lambda x: x + x)(t)
    back = torch.from_dlpack(out)
    assert back.data_ptr() == out.ctypes.data  # torch shares any alignment
    np.testing.assert_array_equal(back.numpy(), a + a)
