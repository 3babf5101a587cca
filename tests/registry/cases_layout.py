"""Cases for the layout primitives (layout.py) and gather / scatter_add / first_occurrence (indexing.py).

Expectations use plain NumPy written independently of the references: explicit index
arrays for slices, np.pad for pad, explicit loops for scatter_add and first_occurrence.
"""

from __future__ import annotations

import itertools

import numpy as np

from tests.registry.case import Case

ALL = ("bool", "i32", "i64", "f16", "f32", "f64")
NUMERIC = ("i32", "i64", "f16", "f32", "f64")


def _ints(shape: tuple[int, ...], lo: int, hi: int, dt: type = np.int32):
    """An input maker: random indices in [lo, hi] (out-of-range ones exercise clamping)."""
    return lambda rng: rng.integers(lo, hi + 1, size=shape).astype(dt)


def _first_expect(size):
    def expect(indices):
        out = np.full(size, -1, np.int64)
        for position, v in enumerate(indices.reshape(-1).tolist()):
            v = min(max(v, 0), size - 1)
            if out[v] < 0:
                out[v] = position
        return out
    return expect


def _slice_expect(start, size, step):
    def expect(x):
        idx = [b + s * np.arange(n, dtype=np.int64) for b, n, s in zip(start, size, step)]
        return x[np.ix_(*idx)] if idx else x.copy()
    return expect


def _pad_expect(low, high, value=0.0):
    def expect(x):
        if x.dtype == np.bool_:
            v = value != 0
        elif np.issubdtype(x.dtype, np.integer):
            v = int(value)
        else:
            v = value
        return np.pad(x, list(zip(low, high)), mode="constant", constant_values=v)
    return expect


def _gather_expect(axis):
    def expect(x, idx):
        n = x.shape[axis]
        out_shape = x.shape[:axis % x.ndim] + idx.shape + x.shape[axis % x.ndim + 1:]
        moved = np.moveaxis(x, axis, 0)
        rows = [moved[min(max(int(i), 0), n - 1)] for i in idx.reshape(-1)]
        block = np.stack(rows) if rows else np.empty((0,) + moved.shape[1:], x.dtype)
        block = block.reshape(idx.shape + moved.shape[1:])
        # block is indices.shape + (x without axis); put the index dims where axis was.
        ax = axis % x.ndim
        k = idx.ndim
        perm = list(range(k, k + ax)) + list(range(k)) + list(range(k + ax, block.ndim))
        out = np.transpose(block, perm)
        assert out.shape == out_shape
        return out
    return expect


def _patches_expect(kernel, strides, dilation, pads):
    def expect(x):
        n, h, w, c = x.shape
        (kh, kw), (sh, sw), (dh, dw) = kernel, strides, dilation
        pt, pb, pl, pr = pads
        oh = (h + pt + pb - (kh - 1) * dh - 1) // sh + 1
        ow = (w + pl + pr - (kw - 1) * dw - 1) // sw + 1
        out = np.zeros((n, oh, ow, kh, kw, c), x.dtype)
        for i, j, p, q in itertools.product(range(oh), range(ow), range(kh), range(kw)):
            r, s = i * sh + p * dh - pt, j * sw + q * dw - pl
            if 0 <= r < h and 0 <= s < w:
                out[:, i, j, p, q, :] = x[:, r, s, :]
        return out
    return expect


def _scatter_expect(axis, combine=np.add):
    """The scatter written as a loop over the clamped indices, each update combined in turn."""
    def expect(operand, idx, updates):
        ax = axis % operand.ndim
        out = operand.copy()
        n = operand.shape[ax]
        k = idx.ndim
        for pos in itertools.product(*(range(d) for d in idx.shape)):
            j = min(max(int(idx[pos]), 0), n - 1)
            dst = (slice(None),) * ax + (j,)
            src = (slice(None),) * ax + pos
            assert updates[src].shape == out[dst].shape, (k, updates.shape)
            out[dst] = combine(out[dst], updates[src])
        return out
    return expect


CASES = [
    # ---- broadcast_to
    Case("broadcast_to", [((3,), "T")], {"shape": (2, 3)}, lambda x: np.broadcast_to(x, (2, 3)),
         dtypes=ALL, id="row"),
    Case("broadcast_to", [((2, 1), "f32")], {"shape": (4, 2, 5)},
         lambda x: np.tile(x, (4, 1, 5)), id="middle"),
    Case("broadcast_to", [((), "T")], {"shape": (2, 2)}, lambda x: np.full((2, 2), x),
         dtypes=("i64", "f64"), id="scalar"),
    Case("broadcast_to", [((1, 3), "f32")], {"shape": (0, 3)},
         lambda x: np.zeros((0, 3), np.float32), id="to-empty"),
    Case("broadcast_to", [((2, 3), "f16")], {"shape": (2, 3)}, lambda x: x, id="identity"),
    Case("broadcast_to", [((), "bool")], {"shape": ()}, lambda x: x, id="rank0"),
    # ---- reshape
    Case("reshape", [((2, 3, 4), "T")], {"shape": (6, 4)}, lambda x: x.reshape(6, 4),
         dtypes=ALL, id="merge"),
    Case("reshape", [((6,), "f32")], {"shape": (1, 2, 1, 3)}, lambda x: x.reshape(1, 2, 1, 3),
         id="split"),
    Case("reshape", [((1, 1), "i32")], {"shape": ()}, lambda x: x.reshape(()), id="to-scalar"),
    Case("reshape", [((), "f64")], {"shape": (1,)}, lambda x: x.reshape(1), id="from-scalar"),
    Case("reshape", [((0, 3), "f32")], {"shape": (3, 0, 5)},
         lambda x: np.zeros((3, 0, 5), np.float32), id="empty"),
    # ---- transpose
    Case("transpose", [((2, 3), "T")], {"perm": (1, 0)}, lambda x: x.T, dtypes=ALL, id="2d"),
    Case("transpose", [((2, 3, 4), "f32")], {"perm": (2, 0, 1)},
         lambda x: np.einsum("abc->cab", x), id="3d"),
    # Extents from 64 run in tiles (lowering.tile_transpose), with partial tiles at the edges.
    Case("transpose", [((70, 100), "T")], {"perm": (1, 0)}, lambda x: x.T, dtypes=ALL, id="tiled"),
    Case("transpose", [((2, 65, 97), "f32")], {"perm": (0, 2, 1)},
         lambda x: np.einsum("abc->acb", x), id="tiled-batch"),
    Case("transpose", [((2, 3, 4), "i64")], {"perm": (0, 1, 2)}, lambda x: x, id="identity"),
    Case("transpose", [((), "f32")], {"perm": ()}, lambda x: x, id="rank0"),
    Case("transpose", [((0, 2), "f32")], {"perm": (1, 0)},
         lambda x: np.zeros((2, 0), np.float32), id="empty"),
    # ---- squeeze
    Case("squeeze", [((1, 3, 1), "T")], {"axes": (0, 2)}, lambda x: x.reshape(3), dtypes=ALL,
         id="both"),
    Case("squeeze", [((2, 1, 3, 1), "f32")], {"axes": (-1,)}, lambda x: x[..., 0], id="neg"),
    Case("squeeze", [((1, 1), "f32")], {"axes": (-2, 1)}, lambda x: x.reshape(()), id="to-scalar"),
    Case("squeeze", [((2, 3), "i32")], {"axes": ()}, lambda x: x, id="none"),
    Case("squeeze", [((0, 1), "f32")], {"axes": (1,)}, lambda x: np.zeros((0,), np.float32),
         id="empty"),
    # ---- expand_dims
    Case("expand_dims", [((2, 3), "T")], {"axes": (0,)}, lambda x: x[None], dtypes=ALL,
         id="front"),
    Case("expand_dims", [((2, 3), "f32")], {"axes": (-1, 1)}, lambda x: x.reshape(2, 1, 3, 1),
         id="neg-result-axes"),
    Case("expand_dims", [((2, 3), "f32")], {"axes": (0, 3)}, lambda x: x.reshape(1, 2, 3, 1),
         id="ends"),
    Case("expand_dims", [((), "i64")], {"axes": (0, 1)}, lambda x: x.reshape(1, 1),
         id="from-scalar"),
    Case("expand_dims", [((3,), "f64")], {"axes": ()}, lambda x: x, id="none"),
    # ---- slice
    Case("slice", [((5, 6), "T")], {"start": (1, 0), "size": (3, 6), "step": (1, 1)},
         _slice_expect((1, 0), (3, 6), (1, 1)), dtypes=ALL, id="rows"),
    Case("slice", [((10,), "f32")], {"start": (1,), "size": (3,), "step": (4,)},
         _slice_expect((1,), (3,), (4,)), id="stride"),
    Case("slice", [((10,), "f32")], {"start": (9,), "size": (10,), "step": (-1,)},
         lambda x: x[::-1], id="reverse-to-zero"),
    Case("slice", [((10,), "i32")], {"start": (8,), "size": (3,), "step": (-3,)},
         _slice_expect((8,), (3,), (-3,)), id="neg-stride"),
    Case("slice", [((4, 7), "f64")], {"start": (3, 2), "size": (2, 2), "step": (-2, 3)},
         _slice_expect((3, 2), (2, 2), (-2, 3)), id="mixed"),
    Case("slice", [((3, 4), "f32")], {"start": (7, 0), "size": (0, 4), "step": (1, 1)},
         lambda x: np.zeros((0, 4), np.float32), id="size0-start-unchecked"),
    Case("slice", [((3,), "f32")], {"start": (-5,), "size": (0,), "step": (-1,)},
         lambda x: np.zeros((0,), np.float32), id="size0-neg-start"),
    Case("slice", [((), "f32")], {"start": (), "size": (), "step": ()}, lambda x: x, id="rank0"),
    Case("slice", [((5,), "f32")], {"start": (2,), "size": (1,), "step": (100,)},
         lambda x: x[2:3], id="single-big-step"),
    # ---- concatenate
    Case("concatenate", [((2, 3), "T"), ((1, 3), "T")], {"axis": 0},
         lambda a, b: np.vstack([a, b]), dtypes=ALL, id="rows"),
    Case("concatenate", [((2, 3), "f32"), ((2, 0), "f32"), ((2, 2), "f32")], {"axis": -1},
         lambda a, b, c: np.hstack([a, b, c]), id="neg-axis-three"),
    Case("concatenate", [((4,), "i64")], {"axis": 0}, lambda a: a, id="single"),
    Case("concatenate", [((2, 1, 2), "f16"), ((2, 3, 2), "f16")], {"axis": 1},
         lambda a, b: np.concatenate([a, b], 1), id="middle"),
    # ---- pad
    Case("pad", [((2, 3), "T")], {"low": (1, 0), "high": (0, 2)},
         _pad_expect((1, 0), (0, 2)), dtypes=ALL, id="zero"),
    Case("pad", [((2, 3), "T")], {"low": (1, 2), "high": (2, 1), "value": 1.5},
         _pad_expect((1, 2), (2, 1), 1.5), dtypes=ALL, id="value"),
    Case("pad", [((2,), "i32")], {"low": (1,), "high": (1,), "value": -2.7},
         lambda x: np.concatenate([[-2], x, [-2]]).astype(np.int32), id="int-truncates"),
    Case("pad", [((2,), "i32")], {"low": (1,), "high": (0,), "value": float("-inf")},
         lambda x: np.concatenate([[np.iinfo(np.int32).min], x]).astype(np.int32),
         id="int-saturates"),
    Case("pad", [((2,), "f32")], {"low": (0,), "high": (1,), "value": float("nan")},
         lambda x: np.concatenate([x, [np.nan]]).astype(np.float32), id="nan"),
    Case("pad", [((), "f32")], {"low": (), "high": ()}, lambda x: x, id="rank0"),
    Case("pad", [((0, 2), "f64")], {"low": (1, 0), "high": (1, 1), "value": 3.0},
         lambda x: np.full((2, 3), 3.0), id="empty-input"),
    # ---- gather
    Case("gather", [((5, 3), "T"), _ints((4,), 0, 4)], {"axis": 0}, _gather_expect(0),
         dtypes=ALL, id="rows"),
    Case("gather", [((2, 5, 3), "f32"), _ints((2, 3), -3, 8, np.int64)], {"axis": 1},
         _gather_expect(1), id="clamped-2d-idx"),
    Case("gather", [((2, 5), "f32"), _ints((6,), -2, 7)], {"axis": -1},
         lambda x, i: x[:, np.clip(i, 0, 4)], id="neg-axis"),
    Case("gather", [((4,), "i64"), np.array(2, np.int32)], {"axis": 0},
         lambda x, i: x[2], id="scalar-index"),
    Case("gather", [((3, 2), "f32"), np.zeros((0,), np.int64)], {"axis": 0},
         lambda x, i: np.zeros((0, 2), np.float32), id="no-indices"),
    Case("gather", [((1, 0), "f32"), np.array([0, 5], np.int32)], {"axis": 0},
         lambda x, i: np.zeros((2, 0), np.float32), id="empty-rest"),
    Case("gather", [((3,), "f32"), np.array([-100, 100, 1], np.int32)], {"axis": 0},
         lambda x, i: np.array([x[0], x[2], x[1]]), id="clamp-both-ends"),
    # ---- scatter_add
    Case("scatter_add", [((5, 3), "T"), np.array([0, 2, 2, 4], np.int32), ((4, 3), "T")],
         {"axis": 0}, _scatter_expect(0), dtypes=NUMERIC, id="dup-rows"),
    Case("scatter_add", [((2, 4, 3), "f32"), _ints((2, 3), -3, 7, np.int64), ((2, 2, 3, 3), "f32")],
         {"axis": 1}, _scatter_expect(1), id="clamped-2d-idx"),
    Case("scatter_add", [((2, 5), "f64"), np.array([1, 1, 9, -1], np.int64), ((2, 4), "f64")],
         {"axis": -1}, _scatter_expect(-1), id="neg-axis"),
    Case("scatter_add", [((4,), "i32"), np.array(3, np.int32), ((), "i32")], {"axis": 0},
         lambda o, i, u: o + np.array([0, 0, 0, 1], np.int32) * u, id="scalar-index"),
    Case("scatter_add", [((3, 2), "f32"), np.zeros((0,), np.int32), ((0, 2), "f32")],
         {"axis": 0}, lambda o, i, u: o, id="no-indices"),
    # ---- scatter_mul, scatter_max, scatter_min: repeated and clamped indices combine in turn
    *[Case(name, [((5, 3), "T"), np.array([0, 2, 2, 4, -3, 9], np.int32), ((6, 3), "T")],
           {"axis": 0}, _scatter_expect(0, fn), dtypes=NUMERIC, id="dup-clamped-rows")
      for name, fn in (("scatter_mul", np.multiply), ("scatter_max", np.maximum), ("scatter_min", np.minimum))],
    *[Case(name, [((2, 4, 3), "f64"), _ints((2, 3), -3, 7, np.int64), ((2, 2, 3, 3), "f64")],
           {"axis": -2}, _scatter_expect(1, fn), id="2d-idx-neg-axis")
      for name, fn in (("scatter_mul", np.multiply), ("scatter_max", np.maximum), ("scatter_min", np.minimum))],
    Case("scatter_mul", [((4, 2), "c64"), np.array([1, 1, 3], np.int32), ((3, 2), "c64")],
         {"axis": 0}, _scatter_expect(0, np.multiply), id="complex"),
    *[Case(name, [((4,), "bool"), np.array([0, 0, 2, 3, 3], np.int32), ((5,), "bool")],
           {"axis": 0}, _scatter_expect(0, fn), id="bool")
      for name, fn in (("scatter_max", np.maximum), ("scatter_min", np.minimum))],
    # NaN propagates whether the operand or an update holds it; -0.0 against 0.0 keeps the
    # later operand (np.maximum's rule), an infinity wins or loses as a number.
    *[Case(name, [np.array([1.0, np.nan, 0.0, -0.0, 2.0], np.float32), np.array([0, 1, 2, 3, 0, 4, 4], np.int32),
                  np.array([np.nan, 5.0, -0.0, 0.0, 3.0, np.inf, -np.inf], np.float32)],
           {"axis": 0}, _scatter_expect(0, fn), id="nan-signed-zero-inf")
      for name, fn in (("scatter_max", np.maximum), ("scatter_min", np.minimum))],
    Case("scatter_max", [((3, 2), "i32"), np.zeros((0,), np.int32), ((0, 2), "i32")],
         {"axis": 0}, lambda o, i, u: o, id="no-indices"),
    # ---- first_occurrence: written here as a loop over the clamped indices
    Case("first_occurrence", [np.array([3, 1, 3, 9, -2, 0, 6, 1], np.int32)], {"size": 7},
         _first_expect(7), id="repeated-and-clamped"),
    Case("first_occurrence", [_ints((4, 6), -2, 12, np.int64)], {"size": 10}, _first_expect(10), id="2d-random"),
    Case("first_occurrence", [np.array(4, np.int32)], {"size": 3}, _first_expect(3), id="scalar-clamped"),
    Case("first_occurrence", [np.zeros((0,), np.int32)], {"size": 4}, _first_expect(4), id="no-indices"),
    Case("first_occurrence", [_ints((300,), 0, 40, np.uint16)], {"size": 50}, _first_expect(50), id="unsigned"),
    # ---- conv_patches: each window's taps, written here with explicit loops
    Case("conv_patches", [((2, 5, 4, 3), "T")], {"kernel": (3, 2)}, _patches_expect((3, 2), (1, 1), (1, 1), (0,) * 4),
         dtypes=("f16", "f32", "f64"), id="valid"),
    Case("conv_patches", [((1, 6, 7, 2), "f64")], {"kernel": (3, 3), "strides": (2, 3), "dilation": (1, 2),
                                                   "pads": (1, 2, 0, 3)},
         _patches_expect((3, 3), (2, 3), (1, 2), (1, 2, 0, 3)), id="strided-dilated-padded"),
    Case("conv_patches", [((2, 1, 1, 1), "f32")], {"kernel": (1, 1), "pads": (1, 1, 1, 1)},
         _patches_expect((1, 1), (1, 1), (1, 1), (1, 1, 1, 1)), id="all-padding-but-one"),
]

