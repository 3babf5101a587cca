"""The tiled shared-memory matmul kernel, for CUDA without cupy (and the simulator).

Its own module, imported on first use: it imports numba.cuda at the top, as the
simulator requires (it swaps the ``cuda`` a kernel's module globals name for its fake).
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
from numba import cuda, from_dtype


@functools.cache
def matmul_kernel(tile: int, dtype_str: str) -> Any:
    """The kernel ``(a, b, out)`` computing ``out[i] = a[i or 0] @ b[i or 0]`` for 3-d
    operands (a batch of 1 broadcasts), with ``tile`` x ``tile`` thread blocks over the
    output (grid: column tiles, row tiles, batch). ``tile`` and the dtype are
    compile-time constants: the shared arrays' shape and type, the accumulator's start."""
    nb_dtype = from_dtype(np.dtype(dtype_str))
    zero = np.dtype(dtype_str).type(0)

    def kernel(a, b, out):
        sa = cuda.shared.array((tile, tile), nb_dtype)
        sb = cuda.shared.array((tile, tile), nb_dtype)
        tx = cuda.threadIdx.x
        ty = cuda.threadIdx.y
        col = cuda.blockIdx.x * tile + tx
        row = cuda.blockIdx.y * tile + ty
        m = out.shape[1]
        n = out.shape[2]
        k = a.shape[2]
        for bi in range(cuda.blockIdx.z, out.shape[0], cuda.gridDim.z):
            ia = bi if a.shape[0] > 1 else 0
            ib = bi if b.shape[0] > 1 else 0
            acc = zero
            # Each thread loads one element of each tile (zero past the edges), the block
            # waits, and each thread adds its row-by-column product over the tile; the
            # second barrier keeps the tiles until every thread has used them.
            for t0 in range(0, k, tile):
                if row < m and t0 + tx < k:
                    sa[ty, tx] = a[ia, row, t0 + tx]
                else:
                    sa[ty, tx] = zero
                if col < n and t0 + ty < k:
                    sb[ty, tx] = b[ib, t0 + ty, col]
                else:
                    sb[ty, tx] = zero
                cuda.syncthreads()
                for q in range(tile):
                    acc += sa[ty, q] * sb[q, tx]
                cuda.syncthreads()
            if row < m and col < n:
                out[bi, row, col] = acc

    return cuda.jit(kernel)
