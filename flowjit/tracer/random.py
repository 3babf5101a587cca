"""``fj.random``: stateless, counter-based random numbers from explicit keys, as in JAX.

A key is an int32 array of shape (2,). The same key always gives the same numbers, so
split a key (``split``) to get independent streams instead of reusing it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from flowjit.ir.dtypes import dtype as as_dtype
from flowjit.ir.dtypes import float32, float64, int32
from flowjit.ir.errors import FlowjitTypeError
from flowjit.ir.primitives.random import key_from_seed
from flowjit.tracer.core import Tracer, bind
from flowjit.tracer.numpy import conversion, layout, reductions, ufuncs


def key(seed: int) -> np.ndarray:
    """A new key from an integer seed (a concrete Python or NumPy int)."""
    if isinstance(seed, Tracer):
        raise FlowjitTypeError("fj.random.key needs a concrete int seed; pass keys, not seeds, into "
                               "traced functions")
    return key_from_seed(int(seed))


PRNGKey = key


def _check_key(k: Any) -> Any:
    shape = layout.shape(k)
    if shape != (2,):
        raise FlowjitTypeError(f"a random key must have shape (2,), got {list(shape)}; make one with "
                               "fj.random.key(seed)")
    return conversion.astype(k, int32)


def split(k: Any, num: int = 2) -> Any:
    """``num`` new independent keys, as an array of shape (num, 2)."""
    return bind("random_split", [_check_key(k)], {"num": int(num)})


def _shape(shape: Any) -> tuple[int, ...]:
    return (int(shape),) if isinstance(shape, int) else tuple(int(s) for s in shape)


def uniform(k: Any, shape: Any = (), dtype: Any = float32, minval: Any = 0.0, maxval: Any = 1.0) -> Any:
    """Uniform floats in [minval, maxval)."""
    d = as_dtype(dtype)
    if not d.is_float:
        raise FlowjitTypeError(f"uniform: dtype must be a float dtype, got {d}")
    u = bind("random_uniform", [_check_key(k)], {"shape": _shape(shape), "dtype": d})
    if minval == 0.0 and maxval == 1.0:
        return u
    return conversion.astype(ufuncs.add(ufuncs.multiply(u, ufuncs.subtract(maxval, minval)), minval), d)


def normal(k: Any, shape: Any = (), dtype: Any = float32) -> Any:
    """Standard normal floats."""
    d = as_dtype(dtype)
    if not d.is_float:
        raise FlowjitTypeError(f"normal: dtype must be a float dtype, got {d}")
    return bind("random_normal", [_check_key(k)], {"shape": _shape(shape), "dtype": d})


def bernoulli(k: Any, p: Any = 0.5, shape: Any = None) -> Any:
    """Booleans that are true with probability ``p`` (broadcast to ``shape``)."""
    shp = layout.shape(p) if shape is None else _shape(shape)
    return ufuncs.less(uniform(k, shp, float32), p)


def gumbel(k: Any, shape: Any = (), dtype: Any = float32) -> Any:
    """Standard Gumbel floats, ``-log(-log(u))`` of uniforms in [tiny, 1) (never infinite)."""
    d = as_dtype(dtype)
    if not d.is_float:
        raise FlowjitTypeError(f"gumbel: dtype must be a float dtype, got {d}")
    u = uniform(k, shape, d, minval=float(np.finfo(d.np).tiny), maxval=1.0)
    return ufuncs.negative(ufuncs.log(ufuncs.negative(ufuncs.log(u))))


def categorical(k: Any, logits: Any, axis: int = -1, shape: Any = None) -> Any:
    """Indices drawn along ``axis`` with probabilities ``softmax(logits)`` (unnormalized log
    probabilities; -inf: never), by the Gumbel-max trick, as ``jax.random.categorical``:
    int32 of ``logits``' shape without ``axis``, or of ``shape``, to which that batch shape
    broadcasts (several draws per row: ``logits[:, None, :]`` with shape ``(rows, n)``)."""
    lg = conversion.asarray(logits)
    nd = len(layout.shape(lg))
    ax = axis % nd if nd else 0
    lg = layout.moveaxis(lg, ax, -1)
    batch = tuple(layout.shape(lg)[:-1])
    out = batch if shape is None else _shape(shape)
    try:
        fits = tuple(np.broadcast_shapes(batch, out)) == out
    except ValueError:
        fits = False
    if not fits:
        raise FlowjitTypeError(f"categorical: shape {list(out)} does not take the logits' batch shape {list(batch)} "
                               f"(the logits without axis {axis}); it must broadcast to it")
    d = lg.dtype if as_dtype(lg.dtype).is_float else float32
    noise = gumbel(k, (*out, layout.shape(lg)[-1]), d)
    return conversion.astype(reductions.argmax(ufuncs.add(noise, lg), axis=-1), int32)


def randint(k: Any, shape: Any, minval: int, maxval: int, dtype: Any = int32) -> Any:
    """Uniform integers in [minval, maxval)."""
    u = uniform(k, shape, float64)
    span = ufuncs.subtract(maxval, minval)
    r = ufuncs.add(ufuncs.floor(ufuncs.multiply(u, span)), minval)
    return conversion.astype(ufuncs.minimum(r, ufuncs.subtract(maxval, 1)), dtype)
