"""Arrays built from a shape, from data or from blocks, beside ``creation`` and ``matrices``:
``copy``, ``identity``, ``tri``, ``vander`` and ``block``."""

from __future__ import annotations

import builtins
from typing import Any

import numpy as np

from flowjit.ir.dtypes import float64, int64, promote_types
from flowjit.ir.errors import ShapeError
from flowjit.tracer.numpy.conversion import asarray, astype
from flowjit.tracer.numpy.counterparts import numpy_counterpart
from flowjit.tracer.numpy.creation import iota, ones, zeros
from flowjit.tracer.numpy.layout import broadcast_to, expand_dims, ndim, reshape, shape
from flowjit.tracer.numpy.manipulation import concatenate, flip
from flowjit.tracer.numpy.matrices import eye
from flowjit.tracer.numpy.operands import ArrayLike, as_operand, bad_argument, on_device, operand_value, static_int
from flowjit.tracer.numpy.reductions import cumprod
from flowjit.tracer.numpy.ufuncs import add, less_equal

__all__: list[str] = [
    "block", "copy", "identity", "tri", "vander",
]


@numpy_counterpart
def copy(a: ArrayLike, order: str = "K", subok: bool = False) -> Any:
    """An array with a's values, as ``np.copy``: a new NumPy array for a concrete one (never a's
    own memory); a traced array is immutable, so its copy is the value itself."""
    return asarray(a, copy=True)


@numpy_counterpart
def identity(n: int, dtype: Any = None, *, device: Any = None) -> Any:
    """The n x n identity matrix (float64 by default), as ``np.identity``: ``eye(n)``."""
    n = static_int("identity", "n", n)
    return eye(n, dtype=dtype, device=device)


@numpy_counterpart
def tri(N: int, M: int | None = None, k: int = 0, dtype: Any = float, *, device: Any = None) -> Any:
    """An N x M array with ones at and below the k-th diagonal and zeros above, as ``np.tri``
    (float64 by default; built from iotas, so a traced program holds no N x M constant)."""
    N = static_int("tri", "N", N)
    M = N if M is None else static_int("tri", "M", M)
    k = static_int("tri", "k", k)
    with on_device(device):
        below = less_equal(iota(int64, (N, M), 1), add(iota(int64, (N, M), 0), k))
        return astype(below, np.dtype(dtype) if dtype is not None else float64)


@numpy_counterpart
def vander(x: ArrayLike, N: int | None = None, increasing: bool = False) -> Any:
    """The Vandermonde matrix of the 1-D ``x``: columns ``x**(N-1), ..., x, 1`` (reversed with
    ``increasing=True``), as ``np.vander``. Powers are running products, in NumPy's order (so
    the same bits), and NumPy's dtype: ``promote_types(x.dtype, int64)`` (float32 gives float64)."""
    o = as_operand(x, "x")
    if len(o.shape) != 1:
        raise bad_argument("vander", f"x must be a one-dimensional array or sequence, got shape {list(o.shape)}",
                           ShapeError)
    n = o.shape[0]
    N = n if N is None else static_int("vander", "N", N)
    if N < 0:
        raise bad_argument("vander", f"N={N} must be non-negative", ShapeError)
    d = promote_types([o.dtype, int64], [False, False])
    xv = astype(operand_value(o), d)
    if N == 0:
        return zeros((n, 0), d)
    cols = [ones((n, 1), d)]
    if N > 1:
        cols.append(cumprod(broadcast_to(expand_dims(xv, 1), (n, N - 1)), axis=1))
    v = concatenate(cols, axis=1)
    return v if increasing else flip(v, axis=1)


def _block_depth(arrays: Any, path: str) -> tuple[int, int]:
    """(nesting depth of lists, largest rank of an array) of np.block's argument, checking that
    every leaf sits at the same depth."""
    if isinstance(arrays, tuple):
        raise bad_argument("block", f"{path} is a tuple; np.block takes only lists of arrays", ShapeError)
    if not isinstance(arrays, list):
        return 0, ndim(arrays)
    if not arrays:
        raise bad_argument("block", f"{path} is an empty list; every list must hold at least one array", ShapeError)
    inner = [_block_depth(e, f"{path}[{i}]") for i, e in enumerate(arrays)]
    depths = {d for d, _ in inner}
    if len(depths) != 1:
        raise bad_argument("block", f"the lists under {path} are nested to different depths {sorted(depths)}; "
                           "nest every array equally deep", ShapeError)
    return depths.pop() + 1, builtins.max(r for _, r in inner)


@numpy_counterpart
def block(arrays: Any) -> Any:
    """An array assembled from nested lists of blocks, as ``np.block``: the innermost lists are
    joined along the last axis, the lists holding them along the second-last, and so on;
    blocks of lower rank gain leading axes of size 1 first."""
    depth, rank = _block_depth(arrays, "arrays")
    rank = builtins.max(rank, depth)

    def assemble(x: Any, level: int) -> Any:
        if isinstance(x, list):
            return concatenate([assemble(e, level + 1) for e in x], axis=-(depth - level))
        v = operand_value(as_operand(x, "arrays"))
        return reshape(v, (1,) * (rank - ndim(v)) + shape(v))

    return assemble(arrays, 0)
