"""Random primitives: stateless, counter-based random numbers from an explicit key.

A key is an ``i32[2]`` array (two 32-bit words, read as uint32). Every random value is a
pure function of the key and the element's flat row-major index, computed with the
Threefry-2x32 block cipher (20 rounds; Salmon et al. 2011, "Parallel random numbers: as
easy as 1, 2, 3"), so results never depend on how a backend orders or splits the work,
and a program is reproducible from its keys alone. The first counter word selects the
stream: 0 and 1 feed value generation, 2 is reserved for ``random_split``, 3 for
``random_fold_in``.

The ops are ``kind="random"``, which marks them impure: two draws from the same key are
deliberately equal, but passes must not merge or drop them as if they were arithmetic.
Each decomposes (``defdecompose``, after the passes that merge and drop) into the cipher's
own arithmetic on uint32 words of the element index: elementwise ops, so a draw is computed
inside the kernel that reads it (dropout's mask in the kernel it scales) and runs in the
native program.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence

import numpy as np

from flowjit.ir.dtypes import DType, float64, int32, uint32, uint64
from flowjit.ir.dtypes import dtype as as_dtype
from flowjit.ir.errors import ShapeError
from flowjit.ir.registry import Literal, attr, declare, defdecompose
from flowjit.ir.types import TensorType

# Counters are 32-bit words, so a single draw can address at most this many elements.
MAX_ELEMENTS = 2**32

_ROTATIONS = (13, 15, 26, 6, 17, 29, 16, 24)
_PARITY = 0x1BD11BDA

# Counter word 0 of each stream (the second word is the element or key index).
_STREAM_A = 0
_STREAM_B = 1
_STREAM_SPLIT = 2
_STREAM_FOLD = 3


def _rotl(x: np.ndarray, r: int) -> np.ndarray:
    return (x << np.uint32(r)) | (x >> np.uint32(32 - r))


def threefry2x32(key0, key1, x0, x1) -> tuple[np.ndarray, np.ndarray]:
    """Threefry-2x32 with 20 rounds, elementwise over broadcast uint32 arrays.

    Returns the two output words as uint32 arrays of the broadcast shape (0-d for
    scalar inputs). Arithmetic wraps modulo 2**32, as the cipher defines it.
    """
    words = [np.asarray(w, dtype=np.uint32) for w in (key0, key1, x0, x1)]
    shape = np.broadcast_shapes(*(w.shape for w in words))
    # Work on 1-d copies: NumPy scalar arithmetic would warn on the intended wraparound.
    k0, k1, y0, y1 = (np.broadcast_to(w, shape).reshape(-1).copy() for w in words)
    ks = (k0, k1, k0 ^ k1 ^ np.uint32(_PARITY))
    with np.errstate(over="ignore"):
        y0 += ks[0]
        y1 += ks[1]
        for block in range(5):
            for r in _ROTATIONS[4 * (block % 2):4 * (block % 2) + 4]:
                y0 += y1
                y1 = _rotl(y1, r)
                y1 ^= y0
            # Key injection after every four rounds, with the injection count in word 1.
            y0 += ks[(block + 1) % 3]
            y1 += ks[(block + 2) % 3]
            y1 += np.uint32(block + 1)
    return y0.reshape(shape), y1.reshape(shape)


def key_from_seed(seed: int) -> np.ndarray:
    """The key for an integer seed: its high and low 32 bits, as ``int32[2]``.

    The seed is read as a 64-bit two's-complement value, so any int64 or uint64 value is
    accepted (``-1`` and ``2**64 - 1`` give the same key); anything wider is an error.
    """
    s = operator.index(seed)
    if not -2**63 <= s < 2**64:
        raise OverflowError(f"seed {s} does not fit in 64 bits")
    s &= 2**64 - 1
    return np.array([s >> 32, s & 0xFFFFFFFF], dtype=np.uint32).view(np.int32)


# ---- shared pieces -------------------------------------------------------------------

def _check_key(in_types: Sequence[TensorType]) -> None:
    key = in_types[0]
    if key.shape != (2,):
        raise ShapeError(f"key must be i32[2], got {key}")


def _check_draw(shape: tuple[int, ...], dtype: DType) -> TensorType:
    if not dtype.is_float:
        raise ShapeError(f"dtype must be a float dtype (f16, f32, f64), got {dtype}")
    out = TensorType(shape, dtype)
    if out.size > MAX_ELEMENTS:
        raise ShapeError(f"result {out} has {out.size} elements; one draw is limited to "
                         f"2**32 (split the key and draw in pieces)")
    return out


def _key_words(key: np.ndarray) -> tuple[np.uint32, np.uint32]:
    k = np.ascontiguousarray(key, dtype=np.int32).reshape(2).view(np.uint32)
    return k[0], k[1]


def _blocks(key: np.ndarray, stream: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    k0, k1 = _key_words(key)
    return threefry2x32(k0, k1, np.uint32(stream), np.arange(n, dtype=np.uint64).astype(np.uint32))


def _uniform53(w0: np.ndarray, w1: np.ndarray) -> np.ndarray:
    # 53 random bits (all of word 0, the top 21 of word 1) on the grid k * 2**-53 in [0, 1).
    bits = (w0.astype(np.uint64) << np.uint64(21)) | (w1.astype(np.uint64) >> np.uint64(11))
    return bits.astype(np.float64) * 2.0**-53


# ---- random_split --------------------------------------------------------------------

def _split_rule(in_types: Sequence[TensorType], *, num: int) -> TensorType:
    _check_key(in_types)
    if not 1 <= num <= MAX_ELEMENTS:
        raise ShapeError(f"num must be in [1, 2**32], got {num}")
    return TensorType((num, 2), int32)


def _split_impl(key: np.ndarray, *, num: int) -> np.ndarray:
    k0, k1 = _key_words(key)
    j = np.arange(num, dtype=np.uint64).astype(np.uint32)
    y0, y1 = threefry2x32(k0, k1, np.uint32(_STREAM_SPLIT), j)
    return np.stack([y0, y1], axis=-1).view(np.int32)


declare("random_split", kind="random", rule=_split_rule, impl=_split_impl, arity=1,
        attrs={"num": attr("int")}, dtypes=(int32,), differentiable=False,
        doc="num new keys from key: key j is threefry2x32(key, counter=(2, j)) as i32[num,2]")


# ---- random_fold_in ------------------------------------------------------------------

def _fold_in_rule(in_types: Sequence[TensorType]) -> TensorType:
    _check_key(in_types)
    if in_types[1].shape != ():
        raise ShapeError(f"the data folded into a key must be one integer (i32[]), got {in_types[1]}")
    return TensorType((2,), int32)


def _fold_in_impl(key: np.ndarray, data: np.ndarray) -> np.ndarray:
    k0, k1 = _key_words(key)
    d = np.asarray(data, dtype=np.int32).reshape(()).view(np.uint32)
    y0, y1 = threefry2x32(k0, k1, np.uint32(_STREAM_FOLD), d)
    return np.array([y0, y1], dtype=np.uint32).view(np.int32)


declare("random_fold_in", kind="random", rule=_fold_in_rule, impl=_fold_in_impl, arity=2, dtypes=(int32,),
        differentiable=False,
        doc="a new key from key and an integer: threefry2x32(key, counter=(3, data)) as i32[2]")


# ---- random_uniform ------------------------------------------------------------------

def _draw_rule(in_types: Sequence[TensorType], *, shape: tuple[int, ...], dtype: DType) -> TensorType:
    _check_key(in_types)
    return _check_draw(shape, dtype)


def _uniform_impl(key: np.ndarray, *, shape: tuple[int, ...], dtype: DType) -> np.ndarray:
    d = as_dtype(dtype)
    n = TensorType(shape, d).size
    a0, a1 = _blocks(key, _STREAM_A, n)
    # Each variant uses exactly as many bits as the dtype's significand holds, so the
    # value is exact in the target dtype and can never round up to 1.0.
    if d.itemsize == 8:
        u = _uniform53(a0, a1)
    elif d.itemsize == 4:
        u = (a0 >> np.uint32(8)).astype(np.float64) * 2.0**-24
    else:
        u = (a0 >> np.uint32(21)).astype(np.float64) * 2.0**-11
    return u.astype(d.np).reshape(shape)


declare("random_uniform", kind="random", rule=_draw_rule, impl=_uniform_impl, arity=1,
        attrs={"shape": attr("shape"), "dtype": attr("dtype")}, dtypes=(int32,),
        differentiable=False,
        doc="uniform floats in [0, 1) of shape and dtype; element i from threefry2x32(key, (0, i))")


# ---- random_normal -------------------------------------------------------------------

def _normal_impl(key: np.ndarray, *, shape: tuple[int, ...], dtype: DType) -> np.ndarray:
    d = as_dtype(dtype)
    n = TensorType(shape, d).size
    a0, a1 = _blocks(key, _STREAM_A, n)
    b0, b1 = _blocks(key, _STREAM_B, n)
    u1 = 1.0 - _uniform53(a0, a1)  # in (0, 1]: the log below never sees 0
    u2 = _uniform53(b0, b1)
    z = np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * np.pi * u2)
    return z.astype(d.np).reshape(shape)


declare("random_normal", kind="random", rule=_draw_rule, impl=_normal_impl, arity=1,
        attrs={"shape": attr("shape"), "dtype": attr("dtype")}, dtypes=(int32,),
        differentiable=False,
        doc="standard normal floats of shape and dtype by Box-Muller; element i from "
            "threefry2x32(key, (0, i)) and threefry2x32(key, (1, i))")


# ---- decompositions: the cipher as elementwise uint32 arithmetic ------------------------------
def _u32(e, value: int):
    return e.constant(value=Literal(np.asarray(value, np.uint32)))


def _threefry_ops(e, k0, k1, x0, x1):
    """threefry2x32 written with the emitter: 0-d key words, counter words broadcast."""
    ks = (k0, k1, e.bitwise_xor(e.bitwise_xor(k0, k1), _u32(e, _PARITY)))
    y0, y1 = e.add(x0, ks[0]), e.add(x1, ks[1])
    for block in range(5):
        for r in _ROTATIONS[4 * (block % 2):4 * (block % 2) + 4]:
            y0 = e.add(y0, y1)
            y1 = e.bitwise_or(e.left_shift(y1, _u32(e, r)), e.right_shift(y1, _u32(e, 32 - r)))
            y1 = e.bitwise_xor(y1, y0)
        y0 = e.add(y0, ks[(block + 1) % 3])
        y1 = e.add(e.add(y1, ks[(block + 2) % 3]), _u32(e, block + 1))
    return y0, y1


def _words(e, key):
    k = e.cast(key, dtype=uint32)
    return tuple(e.reshape(e.slice(k, start=(i,), size=(1,), step=(1,)), shape=()) for i in (0, 1))


def _stream(e, key, stream: int, n: int):
    k0, k1 = _words(e, key)
    return _threefry_ops(e, k0, k1, _u32(e, stream), e.iota(shape=(n,), dimension=0, dtype=uint32))


def _uniform53_ops(e, w0, w1):
    bits = e.bitwise_or(e.left_shift(e.cast(w0, dtype=uint64), e.constant(value=Literal(np.uint64(21)))),
                        e.right_shift(e.cast(w1, dtype=uint64), e.constant(value=Literal(np.uint64(11)))))
    return e.mul(e.cast(bits, dtype=float64), e.constant(value=Literal(np.float64(2.0**-53))))


def _uniform_decompose(e, key, *, shape, dtype):
    d = as_dtype(dtype)
    n = TensorType(shape, d).size
    a0, a1 = _stream(e, key, _STREAM_A, n)
    if d.itemsize == 8:
        u = _uniform53_ops(e, a0, a1)
    else:
        drop, scale = (8, 2.0**-24) if d.itemsize == 4 else (21, 2.0**-11)
        u = e.mul(e.cast(e.right_shift(a0, _u32(e, drop)), dtype=float64),
                  e.constant(value=Literal(np.float64(scale))))
    return [e.reshape(e.cast(u, dtype=d), shape=tuple(shape))]


def _normal_decompose(e, key, *, shape, dtype):
    d = as_dtype(dtype)
    n = TensorType(shape, d).size
    u1 = e.sub(e.constant(value=Literal(np.float64(1.0))), _uniform53_ops(e, *_stream(e, key, _STREAM_A, n)))
    u2 = _uniform53_ops(e, *_stream(e, key, _STREAM_B, n))
    radius = e.sqrt(e.mul(e.constant(value=Literal(np.float64(-2.0))), e.log(u1)))
    z = e.mul(radius, e.cos(e.mul(e.constant(value=Literal(np.float64(2.0 * np.pi))), u2)))
    return [e.reshape(e.cast(z, dtype=d), shape=tuple(shape))]


def _split_decompose(e, key, *, num):
    k0, k1 = _words(e, key)
    y0, y1 = _threefry_ops(e, k0, k1, _u32(e, _STREAM_SPLIT), e.iota(shape=(num,), dimension=0, dtype=uint32))
    pair = e.concatenate(e.expand_dims(y0, axes=(1,)), e.expand_dims(y1, axes=(1,)), axis=1)
    return [e.cast(pair, dtype=int32)]


def _fold_in_decompose(e, key, data):
    k0, k1 = _words(e, key)
    y0, y1 = _threefry_ops(e, k0, k1, _u32(e, _STREAM_FOLD), e.cast(data, dtype=uint32))
    pair = e.concatenate(e.reshape(y0, shape=(1,)), e.reshape(y1, shape=(1,)), axis=0)
    return [e.cast(pair, dtype=int32)]


defdecompose("random_uniform", _uniform_decompose)
defdecompose("random_fold_in", _fold_in_decompose)
defdecompose("random_normal", _normal_decompose)
defdecompose("random_split", _split_decompose)
