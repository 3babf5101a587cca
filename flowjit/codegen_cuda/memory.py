"""Device memory for the CUDA backend, and the devices there are.

With cupy and a GPU, device arrays are cupy arrays (cupy's allocator, ``cupy.matmul``
on cuBLAS); numba.cuda kernels take them as they are (``__cuda_array_interface__``).
Without cupy, and always under numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``),
they are numba.cuda device arrays and matmul is a tiled shared-memory numba.cuda kernel.
numba.cuda and cupy are imported on first use, so asking ``cuda_devices()`` costs no
CUDA initialization on a machine without a GPU.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import sys
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np

from flowjit.ir.errors import FlowjitError

# The env var that gives the simulator N devices (cuda:0 .. cuda:N-1) for placement tests.
SIMULATOR_DEVICES_ENV = "FLOWJIT_CUDA_SIMULATOR_DEVICES"
# Matmul tile edge: a tile x tile thread block, two tile x tile shared arrays. The
# simulator runs a Python thread per GPU thread, so it gets small blocks.
MATMUL_TILE = 16
MATMUL_TILE_SIMULATOR = 8


class CudaDeviceError(FlowjitError):
    """A device name, device array or operation the CUDA backend cannot serve."""


def simulator() -> bool:
    """Whether numba's CUDA simulator is on (``NUMBA_ENABLE_CUDASIM=1`` when numba was imported)."""
    if "numba" not in sys.modules:
        # What numba will read at import; asking its config would import numba (and SciPy)
        # into a process that runs only llvm kernels, e.g. to list the devices.
        return os.environ.get("NUMBA_ENABLE_CUDASIM", "0").strip() not in ("", "0")
    from numba.core import config
    return bool(config.ENABLE_CUDASIM)


@functools.cache
def _cupy() -> Any:
    """cupy when it imports and sees a GPU (never under the simulator), else None."""
    if simulator():
        return None
    try:
        import cupy
        if cupy.cuda.runtime.getDeviceCount() < 1:
            return None
        return cupy
    except Exception:  # not installed, no driver, no device: all mean "no cupy here"
        return None


def uses_cupy() -> bool:
    """Whether device arrays are cupy arrays (cupy and a GPU present)."""
    return _cupy() is not None


def cuda_devices() -> list[str]:
    """The CUDA devices flowjit can place work on: ``["cuda:0", ...]``, one per GPU when a
    driver and cupy are present, ``[]`` otherwise. Under the simulator: ``[]`` unless
    ``FLOWJIT_CUDA_SIMULATOR_DEVICES=N`` asks for N simulated devices (all of them the
    simulator's one device), so placement onto CUDA devices can be tested without a GPU."""
    if simulator():
        text = os.environ.get(SIMULATOR_DEVICES_ENV, "").strip()
        try:
            count = int(text) if text else 0
        except ValueError:
            raise CudaDeviceError(f"{SIMULATOR_DEVICES_ENV}={text!r} must be a number of devices") from None
        return [f"cuda:{k}" for k in range(max(count, 0))]
    cp = _cupy()
    if cp is None:
        return []
    return [f"cuda:{k}" for k in range(cp.cuda.runtime.getDeviceCount())]


def device_index(device: str) -> int:
    """The ordinal K of device ``"cuda:K"`` (``"cuda"`` is ``cuda:0``); CudaDeviceError otherwise."""
    kind, _, k = device.partition(":")
    if kind != "cuda" or not (k.isdigit() or k == ""):
        raise CudaDeviceError(f"{device!r} is not a CUDA device (expected 'cuda:K')")
    return int(k or 0)


@contextlib.contextmanager
def on_device(index: int) -> Iterator[None]:
    """Make device ``index`` current for allocations and launches inside the block (the
    simulator has one device, which stands for every index)."""
    cp = _cupy()
    if cp is not None:
        with cp.cuda.Device(index):
            yield
    elif simulator():
        yield
    else:
        from numba import cuda
        with cuda.gpus[index]:
            yield


_SIMULATOR_LOCK = threading.RLock()


def launch_lock() -> contextlib.AbstractContextManager:
    """Held around every kernel launch: under the simulator a lock, because a simulated
    launch swaps the ``cuda`` global of the kernel's module for the duration (two device
    threads launching kernels of one module at once would see each other's); on a GPU
    nothing (launches are asynchronous and thread-safe)."""
    if not simulator():
        return contextlib.nullcontext()
    _fix_simulator_shared_arrays()
    return _SIMULATOR_LOCK


def _fix_simulator_shared_arrays() -> None:
    """Make the simulator's ``cuda.shared.array`` allocate each array once per block.

    The simulator runs a block's threads as Python threads; each thread's first call of
    ``cuda.shared.array`` looks its call site up in a dict and allocates when it is
    missing, with no lock, so two threads can each allocate "the" shared array and write
    to different ones (a tree reduction then reads garbage, now and then). This version
    does the same under a lock, keyed by the caller's file and line as the original."""
    from numba.core import types
    from numba.cuda.simulator import kernelapi
    from numba.np import numpy_support

    cls = kernelapi.FakeCUDAShared
    if getattr(cls.array, "_flowjit_locked", False):
        return
    original = cls.array
    lock = threading.Lock()

    def array(self: Any, shape: Any, dtype: Any) -> np.ndarray:
        if shape == 0:  # dynamic shared memory: views of one preallocated buffer
            return original(self, shape, dtype)
        frame = sys._getframe(1)
        caller = (frame.f_code.co_filename, frame.f_lineno)
        with lock:
            res = self._allocations.get(caller)
            if res is None:
                np_dtype = numpy_support.as_dtype(dtype) if isinstance(dtype, types.Type) else dtype
                res = self._allocations[caller] = np.empty(shape, np_dtype)
        return res

    array._flowjit_locked = True  # type: ignore[attr-defined]
    cls.array = array


def is_device_array(x: object) -> bool:
    """Whether ``x`` is a device array of this backend (cupy, numba.cuda or the simulator's)."""
    cp = _cupy()
    if cp is not None and isinstance(x, cp.ndarray):
        return True
    return hasattr(x, "copy_to_host") and hasattr(x, "shape")


def to_device(x: Any, index: int = 0) -> Any:
    """``x`` (a NumPy array or scalar, or a device array) as a device array on device
    ``index``: an explicit host-to-device copy for host data; a device array is returned
    as it is (cupy: copied when it lives on another device)."""
    cp = _cupy()
    if is_device_array(x):
        if cp is not None and isinstance(x, cp.ndarray) and x.device.id != index:
            with cp.cuda.Device(index):
                return cp.array(x)
        return x
    host = np.asarray(x, order="C")  # keeps 0-d arrays 0-d, unlike ascontiguousarray
    with on_device(index):
        if cp is not None:
            return cp.asarray(host)
        from numba import cuda
        return cuda.to_device(host)


def to_host(x: Any) -> np.ndarray:
    """A NumPy copy of device array ``x`` (a host array is returned as an array)."""
    cp = _cupy()
    if cp is not None and isinstance(x, cp.ndarray):
        return cp.asnumpy(x)
    if hasattr(x, "copy_to_host"):
        return x.copy_to_host()
    return np.asarray(x)


def empty(shape: tuple[int, ...], dtype: Any) -> Any:
    """An uninitialized device array on the current device."""
    cp = _cupy()
    if cp is not None:
        return cp.empty(shape, dtype)
    from numba import cuda
    return cuda.device_array(tuple(shape), np.dtype(dtype))


def zeros(shape: tuple[int, ...], dtype: Any) -> Any:
    """A zeroed device array on the current device (a kernel's temp buffer)."""
    cp = _cupy()
    if cp is not None:
        return cp.zeros(shape, dtype)
    from numba import cuda
    return cuda.to_device(np.zeros(tuple(shape), np.dtype(dtype)))


def copy(x: Any) -> Any:
    """A new device array with the contents of device array ``x``."""
    cp = _cupy()
    if cp is not None and isinstance(x, cp.ndarray):
        return x.copy()
    out = empty(x.shape, x.dtype)
    out.copy_to_device(x)
    return out


def matmul(a: Any, b: Any) -> Any:
    """``a @ b`` on the device, with NumPy's matmul rules ([..., m, k] @ [..., k, n], batch
    dims broadcast): ``cupy.matmul`` (cuBLAS) when cupy is present, otherwise a tiled
    shared-memory numba.cuda kernel, which takes C-contiguous operands whose batch dims
    each either equal the broadcast batch shape or are all 1."""
    cp = _cupy()
    if cp is not None:
        return cp.matmul(a, b)
    # tuple(): the simulator's shapes are a tuple type without negative indexing.
    sa, sb = tuple(a.shape), tuple(b.shape)
    if len(sa) < 2 or len(sb) < 2 or sa[-1] != sb[-2] or a.dtype != b.dtype:
        raise CudaDeviceError(f"matmul: cannot multiply {a.dtype}{list(sa)} by {b.dtype}{list(sb)}")
    if a.dtype == np.float16 or a.dtype == np.bool_:
        raise CudaDeviceError(f"matmul: {a.dtype} is not supported by the numba CUDA matmul kernel")
    m, n = sa[-2], sb[-1]
    batch = np.broadcast_shapes(sa[:-2], sb[:-2])
    nb = math.prod(batch)

    def flat(x: Any, shape: tuple[int, ...]) -> Any:
        own = shape[:-2]
        if math.prod(own) != 1 and (1,) * (len(batch) - len(own)) + own != batch:
            raise CudaDeviceError(f"matmul: batch dims {list(own)} broadcast to {list(batch)} need cupy on CUDA")
        return x.reshape(math.prod(own), shape[-2], shape[-1])

    out = empty((nb, m, n), a.dtype)
    tile = MATMUL_TILE_SIMULATOR if simulator() else MATMUL_TILE
    grid = (max(1, -(-n // tile)), max(1, -(-m // tile)), max(1, min(nb, 65535)))
    from flowjit.codegen_cuda.matmul_kernel import matmul_kernel
    with launch_lock():
        matmul_kernel(tile, np.dtype(a.dtype).str)[grid, (tile, tile)](flat(a, sa), flat(b, sb), out)
    return out.reshape(*batch, m, n)
