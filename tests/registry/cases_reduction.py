"""Cases for the reduction primitives (reductions, argmax/argmin, cumsum) and linalg
(matmul, conv2d).

Expectations are computed independently of the registry's NumPy references: reductions
fold each reduced row with plain Python (exact ``math.fsum`` for floats, Python ints
wrapped to the dtype's width), matmul uses float64/int64 einsum, and conv2d loops over
output positions with its own padding arithmetic.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import reduce

import numpy as np

from tests.registry.case import Case

NUM = ("i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64", "f16", "f32", "f64")
NUMC = NUM + ("c64", "c128")  # what sums, products and matmul take
ORD = NUM + ("bool",)
FLOATS = ("f16", "f32", "f64")


def _wrap(v: object, dt: np.dtype) -> object:
    # Integers wrap to the dtype's width, as the primitives define.
    if dt.kind not in "iu":
        return v
    bits = dt.itemsize * 8
    v = int(v) % (1 << bits)
    return v - (1 << bits) if dt.kind == "i" and v >= 1 << (bits - 1) else v


def _fold(fn: Callable[[list], object], axes: Sequence[int], keepdims: bool = False,
          out_dtype: str | None = None) -> Callable[[np.ndarray], np.ndarray]:
    """expect(x): ``fn`` applied to the Python list of each reduced row of x."""
    def expect(x: np.ndarray) -> np.ndarray:
        nd = x.ndim
        red = sorted(a % nd for a in axes)
        rest = [i for i in range(nd) if i not in red]
        rest_shape = tuple(x.shape[i] for i in rest)
        k = math.prod(x.shape[i] for i in red)
        rows = np.transpose(x, rest + red).reshape(math.prod(rest_shape), k)
        dt = np.dtype(out_dtype) if out_dtype else x.dtype
        vals = [_wrap(fn([v.item() for v in row]), dt) for row in rows]
        out = np.array(vals, dtype=dt).reshape(rest_shape)
        if keepdims:
            out = out.reshape(tuple(1 if i in red else d for i, d in enumerate(x.shape)))
        return out
    return expect


def _isnan(v: object) -> bool:
    return isinstance(v, float) and math.isnan(v)


def _max(r: list) -> object:
    return math.nan if any(map(_isnan, r)) else max(r)


def _min(r: list) -> object:
    return math.nan if any(map(_isnan, r)) else min(r)


def _sum(r: list) -> object:
    if any(isinstance(v, complex) for v in r):
        return complex(math.fsum(v.real for v in r), math.fsum(v.imag for v in r))
    return math.fsum(r) if any(isinstance(v, float) for v in r) else sum(r)


def _prod(r: list) -> object:
    return reduce(lambda a, b: a * b, r, 1)


def _argmax(r: list) -> int:
    nans = [i for i, v in enumerate(r) if _isnan(v)]
    return nans[0] if nans else r.index(max(r))


def _argmin(r: list) -> int:
    nans = [i for i, v in enumerate(r) if _isnan(v)]
    return nans[0] if nans else r.index(min(r))


def _cumsum(axis: int, reverse: bool = False) -> Callable[[np.ndarray], np.ndarray]:
    def expect(x: np.ndarray) -> np.ndarray:
        xm = np.moveaxis(x, axis, -1)
        out = np.empty(xm.shape, dtype=x.dtype)
        for idx in np.ndindex(*xm.shape[:-1]):
            row = [v.item() for v in xm[idx]]
            order = range(len(row) - 1, -1, -1) if reverse else range(len(row))
            acc: list = []
            for j in order:
                acc.append(row[j])
                out[idx + (j,)] = _wrap(_sum(acc), x.dtype)
        return np.moveaxis(out, -1, axis)
    return expect


def _matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    wide = {"f": np.float64, "c": np.complex128}.get(a.dtype.kind, np.int64)
    return np.einsum("...mk,...kn->...mn", a.astype(wide), b.astype(wide)).astype(a.dtype)


def _conv(strides: tuple[int, int] = (1, 1), padding: object = "VALID",
          dilation: tuple[int, int] = (1, 1), groups: int = 1) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """Reference conv2d (NHWC x HWIO) with explicit loops over output positions; grouped,
    each group's channels with its own filters, the groups' outputs side by side."""
    if groups > 1:
        one = _conv(strides, padding, dilation)

        def grouped(x: np.ndarray, w: np.ndarray) -> np.ndarray:
            cg, og = w.shape[2], w.shape[3] // groups
            return np.concatenate([one(x[..., g * cg:(g + 1) * cg], w[..., g * og:(g + 1) * og])
                                   for g in range(groups)], axis=-1)
        return grouped

    def expect(x: np.ndarray, w: np.ndarray) -> np.ndarray:
        n, h, wd, c = x.shape
        kh, kw, _, o = w.shape
        spans = ((kh - 1) * dilation[0] + 1, (kw - 1) * dilation[1] + 1)
        if padding == "VALID":
            pads = [(0, 0), (0, 0)]
        elif padding == "SAME":
            pads = []
            for size, span, s in zip((h, wd), spans, strides):
                out = math.ceil(size / s)
                total = max((out - 1) * s + span - size, 0)
                pads.append((total // 2, total - total // 2))
        else:
            pads = list(padding)
        xp = np.zeros((n, h + sum(pads[0]), wd + sum(pads[1]), c))
        xp[:, pads[0][0]:pads[0][0] + h, pads[1][0]:pads[1][0] + wd, :] = x
        oh = (xp.shape[1] - spans[0]) // strides[0] + 1
        ow = (xp.shape[2] - spans[1]) // strides[1] + 1
        res = np.zeros((n, max(oh, 0), max(ow, 0), o))
        for i in range(oh):
            for j in range(ow):
                r0, c0 = i * strides[0], j * strides[1]
                win = xp[:, r0:r0 + spans[0]:dilation[0], c0:c0 + spans[1]:dilation[1], :]
                res[:, i, j, :] = np.einsum("nabc,abco->no", win, w.astype(np.float64))
        return res.astype(x.dtype)
    return expect


NAN_ROWS = np.array([[1.0, np.nan, 3.0, np.nan], [2.0, 5.0, 5.0, -1.0], [np.nan, 0.0, 9.0, 9.0]],
                    dtype=np.float32)
TIES = np.array([[3, 1, 3, 1], [0, 0, 0, 0], [-2, 7, 7, -2]], dtype=np.int32)

CASES: list[Case] = []

# ---- sum / prod ---------------------------------------------------------------------------
for _prim, _fn in (("reduce_sum", _sum), ("reduce_prod", _prod)):
    CASES += [
        Case(_prim, [((2, 3, 4), "T")], {"axes": (1,)}, _fold(_fn, (1,)), NUMC, "axis1"),
        Case(_prim, [((2, 3, 4), "T")], {"axes": (-1, 0), "keepdims": True},
             _fold(_fn, (-1, 0), True), NUMC, "neg-keepdims"),
        Case(_prim, [((2, 3, 2), "T")], {"axes": (0, 1, 2)}, _fold(_fn, (0, 1, 2)), NUMC, "all"),
        Case(_prim, [((2, 3), "T")], {"axes": ()}, lambda x: x, NUMC, "no-axes"),
        Case(_prim, [((), "T")], {"axes": ()}, lambda x: x, NUMC, "rank0"),
        Case(_prim, [((2, 0, 3), "T")], {"axes": (1,)}, _fold(_fn, (1,)), NUMC, "empty-axis"),
        Case(_prim, [((2, 0, 3), "T")], {"axes": (-3, 1), "keepdims": True},
             _fold(_fn, (-3, 1), True), NUMC, "empty-keepdims"),
        Case(_prim, [((0, 3), "T")], {"axes": (1,)}, _fold(_fn, (1,)), NUMC, "empty-rest"),
    ]
CASES += [
    # i32 sums wrap in 32 bits instead of widening as np.sum would.
    Case("reduce_sum", [np.full((3, 2), 2**30, np.int32)], {"axes": (0,)},
         _fold(_sum, (0,)), id="i32-wraps"),
    Case("reduce_prod", [np.full((4,), 70000, np.int32)], {"axes": (0,)},
         _fold(_prod, (0,)), id="i32-prod-wraps"),
    Case("reduce_sum", [NAN_ROWS], {"axes": (1,)}, lambda x: x.sum(axis=1), id="nan"),
]

# ---- element_count: the number of elements along axes, whatever x holds ----------------------
CASES += [
    Case("element_count", [((2, 3, 4), "T")], {"axes": (0, 2), "dtype": "f32"},
         lambda x: np.float32(2 * 4), ORD + ("c64", "c128"), "axes02"),
    Case("element_count", [((5, 3), "T")], {"axes": (-1,), "dtype": "i64"}, lambda x: np.int64(3), id="last"),
    Case("element_count", [((2, 0, 3), "T")], {"axes": (1, 2), "dtype": "f64"}, lambda x: np.float64(0),
         id="empty"),
    Case("element_count", [((), "T")], {"axes": (), "dtype": "f32"}, lambda x: np.float32(1), id="rank0"),
]

# ---- max / min ----------------------------------------------------------------------------
for _prim, _fn in (("reduce_max", _max), ("reduce_min", _min)):
    CASES += [
        Case(_prim, [((2, 3, 4), "T")], {"axes": (0, 2)}, _fold(_fn, (0, 2)), ORD, "axes02"),
        Case(_prim, [((2, 3, 4), "T")], {"axes": (-1,), "keepdims": True},
             _fold(_fn, (-1,), True), ORD, "neg-keepdims"),
        Case(_prim, [((3, 2), "T")], {"axes": (0, 1)}, _fold(_fn, (0, 1)), ORD, "all"),
        Case(_prim, [((), "T")], {"axes": ()}, lambda x: x, ORD, "rank0"),
        Case(_prim, [((0, 3), "T")], {"axes": (1,)}, _fold(_fn, (1,)), ORD, "empty-rest"),
        Case(_prim, [((0, 3), "T")], {"axes": ()}, lambda x: x, ORD, "empty-no-axes"),
        Case(_prim, [NAN_ROWS], {"axes": (1,)}, _fold(_fn, (1,)), id="nan-propagates"),
        Case(_prim, [NAN_ROWS.astype(np.float64)], {"axes": (-2,)}, _fold(_fn, (-2,)), id="nan-f64"),
    ]

# ---- any / all ----------------------------------------------------------------------------
for _prim, _fn in (("reduce_any", any), ("reduce_all", all)):
    CASES += [
        Case(_prim, [((3, 4), "bool")], {"axes": (1,)}, _fold(_fn, (1,)), id="axis1"),
        Case(_prim, [((2, 3, 4), "bool")], {"axes": (-3, -1), "keepdims": True},
             _fold(_fn, (-3, -1), True), id="neg-keepdims"),
        Case(_prim, [np.array([[True, True], [False, False], [True, False]])], {"axes": (1,)},
             _fold(_fn, (1,)), id="fixed"),
        Case(_prim, [((2, 0), "bool")], {"axes": (1,)}, _fold(_fn, (1,)), id="empty-axis"),
        Case(_prim, [((), "bool")], {"axes": ()}, lambda x: x, id="rank0"),
    ]

# ---- argmax / argmin ------------------------------------------------------------------------
for _prim, _fn in (("argmax", _argmax), ("argmin", _argmin)):
    CASES += [
        Case(_prim, [((3, 5), "T")], {"axis": 1}, _fold(_fn, (1,), out_dtype="int64"), ORD, "axis1"),
        Case(_prim, [((2, 3, 4), "T")], {"axis": -2, "keepdims": True},
             _fold(_fn, (-2,), True, "int64"), ORD, "neg-keepdims"),
        Case(_prim, [((4,), "T")], {"axis": 0}, _fold(_fn, (0,), out_dtype="int64"), ORD, "rank1"),
        Case(_prim, [((0, 3), "T")], {"axis": 1}, _fold(_fn, (1,), out_dtype="int64"), ORD, "empty-rest"),
        Case(_prim, [TIES], {"axis": 1}, _fold(_fn, (1,), out_dtype="int64"), id="ties-first"),
        Case(_prim, [TIES.T.copy()], {"axis": 0}, _fold(_fn, (0,), out_dtype="int64"), id="ties-axis0"),
        Case(_prim, [NAN_ROWS], {"axis": 1}, _fold(_fn, (1,), out_dtype="int64"), id="nan-wins"),
        Case(_prim, [NAN_ROWS], {"axis": 0, "keepdims": True},
             _fold(_fn, (0,), True, "int64"), id="nan-axis0"),
    ]

# ---- cumsum ---------------------------------------------------------------------------------
CASES += [
    Case("cumsum", [((3, 4), "T")], {"axis": 1}, _cumsum(1), NUMC, "axis1"),
    Case("cumsum", [((3, 4), "T")], {"axis": 0, "reverse": True}, _cumsum(0, True), NUMC, "reverse"),
    Case("cumsum", [((2, 3, 4), "T")], {"axis": -2}, _cumsum(-2), NUMC, "neg"),
    Case("cumsum", [((2, 3, 4), "T")], {"axis": -1, "reverse": True}, _cumsum(-1, True), NUMC,
         "neg-reverse"),
    Case("cumsum", [((2, 0), "T")], {"axis": 1}, _cumsum(1), NUMC, "empty-axis"),
    Case("cumsum", [((0, 3), "T")], {"axis": 1, "reverse": True}, _cumsum(1, True), NUMC, "empty-rest"),
    Case("cumsum", [np.full((3,), 2**30, np.int32)], {"axis": 0}, _cumsum(0), id="i32-wraps"),
]

# ---- matmul ---------------------------------------------------------------------------------
CASES += [
    Case("matmul", [((2, 3), "T"), ((3, 4), "T")], {}, _matmul, NUMC, "2d"),
    Case("matmul", [((2, 1, 3, 4), "T"), ((5, 4, 2), "T")], {}, _matmul, NUMC, "batch-broadcast"),
    Case("matmul", [((3, 2, 5), "T"), ((5, 1), "T")], {}, _matmul, NUMC, "batch-lhs-only"),
    Case("matmul", [((3, 0), "T"), ((0, 2), "T")], {}, _matmul, NUMC, "empty-k"),
    Case("matmul", [((0, 3), "T"), ((3, 2), "T")], {}, _matmul, NUMC, "empty-m"),
    Case("matmul", [((2, 0, 3, 1), "T"), ((1, 4), "T")], {}, _matmul, NUMC, "empty-batch"),
    Case("matmul", [((1, 1), "T"), ((1, 1), "T")], {}, _matmul, NUMC, "1x1"),
]

# ---- conv2d ---------------------------------------------------------------------------------
CASES += [
    Case("conv2d", [((1, 5, 5, 2), "T"), ((3, 3, 2, 3), "T")], {}, _conv(), FLOATS, "valid"),
    Case("conv2d", [((2, 7, 6, 3), "T"), ((3, 2, 3, 4), "T")], {"strides": (2, 2), "padding": "SAME"},
         _conv((2, 2), "SAME"), FLOATS, "same-stride2"),
    Case("conv2d", [((1, 4, 4, 1), "T"), ((2, 2, 1, 2), "T")], {"padding": "SAME"},
         _conv(padding="SAME"), FLOATS, "same-even-kernel"),
    Case("conv2d", [((1, 6, 7, 2), "T"), ((3, 3, 2, 2), "T")], {"padding": "SAME", "dilation": (2, 1)},
         _conv(padding="SAME", dilation=(2, 1)), FLOATS, "same-dilated"),
    Case("conv2d", [((2, 8, 9, 2), "T"), ((2, 3, 2, 3), "T")],
         {"strides": (2, 3), "dilation": (3, 2)}, _conv((2, 3), "VALID", (3, 2)), FLOATS,
         "valid-strided-dilated"),
    Case("conv2d", [((1, 4, 5, 2), "T"), ((3, 3, 2, 1), "T")],
         {"padding": ((1, 0), (2, 1)), "strides": (1, 2)},
         _conv((1, 2), ((1, 0), (2, 1))), FLOATS, "explicit-pads"),
    Case("conv2d", [((1, 2, 3, 1), "T"), ((1, 1, 1, 2), "T")], {"padding": ((3, 2), (0, 4))},
         _conv(padding=((3, 2), (0, 4))), FLOATS, "pads-larger-than-input"),
    Case("conv2d", [((2, 3, 3, 4), "T"), ((1, 1, 4, 2), "T")], {"strides": (3, 1)},
         _conv((3, 1)), FLOATS, "pointwise"),
    Case("conv2d", [((0, 5, 5, 2), "T"), ((3, 3, 2, 3), "T")], {"padding": "SAME"},
         _conv(padding="SAME"), FLOATS, "empty-batch"),
    Case("conv2d", [((1, 5, 5, 0), "T"), ((3, 3, 0, 3), "T")], {},
         _conv(), FLOATS, "no-channels"),
    Case("conv2d", [((1, 2, 2, 1), "T"), ((3, 3, 1, 1), "T")], {}, _conv(), FLOATS, "empty-output"),
    Case("conv2d", [((1, 0, 3, 1), "T"), ((2, 2, 1, 1), "T")], {"padding": "SAME"},
         _conv(padding="SAME"), FLOATS, "same-empty-input"),
    Case("conv2d", [((2, 5, 6, 4), "T"), ((3, 2, 2, 6), "T")], {"padding": "SAME", "groups": 2},
         _conv(padding="SAME", groups=2), FLOATS, "grouped"),
    Case("conv2d", [((1, 7, 6, 3), "T"), ((3, 3, 1, 6), "T")],
         {"strides": (2, 1), "dilation": (1, 2), "padding": "SAME", "groups": 3},
         _conv((2, 1), "SAME", (1, 2), groups=3), FLOATS, "depthwise-multiplier-strided-dilated"),
    Case("conv2d", [((2, 4, 4, 4), "T"), ((1, 1, 1, 4), "T")], {"groups": 4},
         _conv(groups=4), FLOATS, "depthwise-pointwise"),
    # past DEPTHWISE_TAPS_MAX taps: the sum over the filter's two axes
    Case("conv2d", [((1, 9, 11, 2), "T"), ((6, 5, 1, 4), "T")],
         {"strides": (2, 1), "dilation": (1, 2), "padding": "SAME", "groups": 2},
         _conv((2, 1), "SAME", (1, 2), groups=2), FLOATS, "depthwise-large-filter-multiplier-strided-dilated"),
]
