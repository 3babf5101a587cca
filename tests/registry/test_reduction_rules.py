"""Shape rules and NumPy references of the reduction and linalg primitives.

Every case of ``cases_reduction`` runs through the rule and the reference; a list of bad
programs must be rejected with ShapeError; and a property test throws arbitrary attribute
values and shapes at each rule, which may only answer with a type or a ShapeError.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import flowjit.ir.primitives.linalg  # registers matmul, conv2d
import flowjit.ir.primitives.reduction  # noqa: F401  (registers the reductions)
from flowjit.ir import registry
from flowjit.ir.errors import ShapeError
from flowjit.ir.primitives.linalg import conv2d_padding
from flowjit.ir.types import TensorType
from tests.registry.case import random_array
from tests.registry.cases_reduction import CASES

PRIMS = ("reduce_sum", "reduce_prod", "reduce_max", "reduce_min", "reduce_any", "reduce_all",
         "argmax", "argmin", "cumsum", "matmul", "conv2d", "element_count")

EXPANDED = [c for case in CASES for c in case.expand()]


def _tolerance(dt: np.dtype) -> dict:
    if dt == np.float16:
        return {"rtol": 1e-2, "atol": 1e-2}
    if dt == np.float32:
        return {"rtol": 1e-5, "atol": 1e-5}
    return {"rtol": 1e-5, "atol": 1e-12}


def _prim(name: str) -> registry.Primitive:
    # The package __init__ may not import these modules yet; they are registered above.
    return registry.PRIMITIVES[name]


@pytest.mark.parametrize("case", EXPANDED, ids=[f"{c.prim}-{c.id}" for c in EXPANDED])
def test_case(case):
    p = _prim(case.prim)
    rng = np.random.default_rng(0)
    arrays = case.make_inputs(rng)
    attrs = p.normalize_attrs(case.attrs)
    (out_type,) = p.infer([TensorType(a.shape, a.dtype) for a in arrays], attrs)
    got = p.impl(*arrays, **attrs)
    assert isinstance(got, np.ndarray)
    assert got.shape == out_type.shape
    assert got.dtype == out_type.dtype.np
    want = np.asarray(case.expect(*arrays))
    assert want.shape == got.shape
    if got.dtype.kind in "fc":
        np.testing.assert_allclose(got, want.astype(got.dtype), equal_nan=True, **_tolerance(got.dtype))
    else:
        np.testing.assert_array_equal(got, want.astype(got.dtype))


def test_every_primitive_has_cases():
    assert {c.prim for c in CASES} == set(PRIMS)
    for name in PRIMS:
        p = _prim(name)
        rng = np.random.default_rng(0)
        tested = {TensorType((), c.make_inputs(rng)[0].dtype).dtype for c in EXPANDED if c.prim == name}
        assert set(p.dtypes) == tested, name


def test_declarations():
    kinds = {n: _prim(n).kind for n in PRIMS}
    # cumsum is a scan (its result keeps the input's shape): fusion treats it as opaque.
    assert kinds["matmul"] == kinds["conv2d"] == kinds["cumsum"] == "opaque"
    assert kinds["element_count"] == "layout"   # reads only its input's shape
    assert all(kinds[n] == "reduction" for n in PRIMS[:9] if n != "cumsum")
    diff = {n for n in PRIMS if _prim(n).differentiable}
    assert diff == {"reduce_sum", "reduce_prod", "reduce_max", "reduce_min", "cumsum", "matmul", "conv2d"}


def test_impl_accepts_negative_axes_as_written():
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    p = _prim("reduce_sum")
    np.testing.assert_array_equal(p.impl(x, axes=(-1,), keepdims=False), x.sum(-1))
    np.testing.assert_array_equal(_prim("argmax").impl(x, axis=-3, keepdims=True), np.ones((1, 3, 4)))
    np.testing.assert_array_equal(_prim("cumsum").impl(x, axis=-1, reverse=True),
                                  x[..., ::-1].cumsum(-1)[..., ::-1])


@pytest.mark.parametrize("in_hw,k,s,d,pad,want", [
    ((5, 5), (3, 3), (1, 1), (1, 1), "VALID", ((0, 0), (0, 0))),
    ((5, 5), (3, 3), (1, 1), (1, 1), "SAME", ((1, 1), (1, 1))),
    ((4, 4), (2, 2), (1, 1), (1, 1), "SAME", ((0, 1), (0, 1))),
    ((7, 6), (3, 2), (2, 2), (1, 1), "SAME", ((1, 1), (0, 0))),
    ((6, 7), (3, 3), (1, 1), (2, 1), "SAME", ((2, 2), (1, 1))),
    ((5, 5), (1, 1), (2, 2), (1, 1), "SAME", ((0, 0), (0, 0))),
    ((3, 3), (1, 1), (1, 1), (1, 1), ((1, 2), (0, 4)), ((1, 2), (0, 4))),
])
def test_conv2d_padding(in_hw, k, s, d, pad, want):
    assert conv2d_padding(in_hw, k, s, d, pad) == want


def _t(shape, d="f32"):
    return TensorType(shape, d)


BAD = [
    ("reduce_sum", [_t((2, 3))], {"axes": (2,)}),
    ("reduce_sum", [_t((2, 3))], {"axes": (-3,)}),
    ("reduce_sum", [_t((2, 3))], {"axes": (0, -2)}),
    ("reduce_sum", [_t(())], {"axes": (0,)}),
    ("reduce_sum", [_t((2, 3), "bool")], {"axes": (0,)}),
    ("reduce_sum", [_t((2, 3))], {}),
    ("reduce_sum", [_t((2, 3))], {"axes": 0}),
    ("reduce_sum", [_t((2, 3)), _t((2, 3))], {"axes": (0,)}),
    ("reduce_prod", [_t((2, 3))], {"axes": (1,), "keepdims": 1}),
    ("reduce_max", [_t((2, 0))], {"axes": (1,)}),
    ("reduce_max", [_t((0, 2), "bool")], {"axes": (0, 1)}),
    ("reduce_min", [_t((3, 0, 2), "i32")], {"axes": (-2,)}),
    ("reduce_min", [_t((3,))], {"axes": (1,)}),
    ("reduce_any", [_t((3,))], {"axes": (0,)}),
    ("reduce_all", [_t((3,), "i32")], {"axes": (0,)}),
    ("reduce_all", [_t((3,), "bool")], {"axes": (0, 0)}),
    ("argmax", [_t((2, 3))], {"axis": 2}),
    ("argmax", [_t((2, 3))], {"axis": -3}),
    ("argmax", [_t(())], {"axis": 0}),
    ("argmax", [_t((2, 3))], {}),
    ("argmax", [_t((2, 3))], {"axis": (1,)}),
    ("argmin", [_t((2, 0))], {"axis": 1}),
    ("argmin", [_t((0,), "bool")], {"axis": -1}),
    ("cumsum", [_t((2, 3))], {"axis": 2}),
    ("cumsum", [_t(())], {"axis": 0}),
    ("cumsum", [_t((2,), "bool")], {"axis": 0}),
    ("cumsum", [_t((2,))], {"axis": 0, "exclusive": True}),
    ("matmul", [_t((3,)), _t((3, 2))], {}),
    ("matmul", [_t((2, 3)), _t((3,))], {}),
    ("matmul", [_t(()), _t(())], {}),
    ("matmul", [_t((2, 3)), _t((4, 2))], {}),
    ("matmul", [_t((2, 2, 3)), _t((3, 3, 4))], {}),
    ("matmul", [_t((2, 3)), _t((3, 4), "f64")], {}),
    ("matmul", [_t((2, 3), "bool"), _t((3, 4), "bool")], {}),
    ("matmul", [_t((2, 3))], {}),
    ("matmul", [_t((2, 3)), _t((3, 4))], {"transpose": True}),
    ("conv2d", [_t((5, 5, 2)), _t((3, 3, 2, 1))], {}),
    ("conv2d", [_t((1, 5, 5, 2)), _t((3, 3, 2))], {}),
    ("conv2d", [_t((1, 5, 5, 2)), _t((3, 3, 3, 1))], {}),
    ("conv2d", [_t((1, 5, 5, 2)), _t((3, 3, 2, 1), "f64")], {}),
    ("conv2d", [_t((1, 5, 5, 2), "i32"), _t((3, 3, 2, 1), "i32")], {}),
    ("conv2d", [_t((1, 5, 5, 2)), _t((0, 3, 2, 1))], {}),
    ("conv2d", [_t((1, 5, 5, 2)), _t((3, 3, 2, 1))], {"strides": (0, 1)}),
    ("conv2d", [_t((1, 5, 5, 2)), _t((3, 3, 2, 1))], {"strides": (1, -2)}),
    ("conv2d", [_t((1, 5, 5, 2)), _t((3, 3, 2, 1))], {"strides": (1,)}),
    ("conv2d", [_t((1, 5, 5, 2)), _t((3, 3, 2, 1))], {"strides": (1, 1, 1)}),
    ("conv2d", [_t((1, 5, 5, 2)), _t((3, 3, 2, 1))], {"dilation": (1, 0)}),
    ("conv2d", [_t((1, 5, 5, 2)), _t((3, 3, 2, 1))], {"dilation": ()}),
    ("conv2d", [_t((1, 5, 5, 2)), _t((3, 3, 2, 1))], {"padding": "FULL"}),
    ("conv2d", [_t((1, 5, 5, 2)), _t((3, 3, 2, 1))], {"padding": ((1, 1),)}),
    ("conv2d", [_t((1, 5, 5, 2)), _t((3, 3, 2, 1))], {"padding": ((1, 1), (1, 1), (0, 0))}),
    ("conv2d", [_t((1, 5, 5, 2)), _t((3, 3, 2, 1))], {"padding": ((-1, 0), (0, 0))}),
    ("conv2d", [_t((1, 5, 5, 2)), _t((3, 3, 2, 1))], {"padding": ((0, 0), (0, -5))}),
    ("conv2d", [_t((1, 2, 2, 1)), _t((5, 5, 1, 1))], {}),
    ("conv2d", [_t((1, 5, 5, 1)), _t((3, 3, 1, 1))], {"dilation": (4, 1)}),
    ("conv2d", [_t((1, 0, 5, 1)), _t((3, 3, 1, 1))], {}),
]


@pytest.mark.parametrize("prim,types,attrs", BAD, ids=[f"{b[0]}-{i}" for i, b in enumerate(BAD)])
def test_rejects(prim, types, attrs):
    p = _prim(prim)
    with pytest.raises(ShapeError) as e:
        p.infer(types, p.normalize_attrs(attrs))
    assert str(e.value).startswith(prim + ":")


def test_error_names_the_shapes():
    with pytest.raises(ShapeError, match=r"f32\[2,3\].*f32\[4,2\]"):
        _prim("matmul").infer([_t((2, 3)), _t((4, 2))], {})
    with pytest.raises(ShapeError, match=r"f32\[2,3\]"):
        _prim("reduce_sum").infer([_t((2, 3))], {"axes": (5,), "keepdims": False})
    with pytest.raises(ShapeError, match=r"f32\[1,2,2,1\]"):
        p = _prim("conv2d")
        p.infer([_t((1, 2, 2, 1)), _t((5, 5, 1, 1))], p.normalize_attrs({}))


# ---- property test: arbitrary attributes and shapes give a type or a ShapeError ------------
_INT = st.one_of(st.integers(-3, 4), st.integers(-1000, 1000))
_INTS = st.lists(_INT, max_size=4).map(tuple)
_DIMS = st.lists(st.integers(0, 4), max_size=4).map(tuple)
_DIMS4 = st.lists(st.integers(0, 5), min_size=4, max_size=4).map(tuple)
_DTYPE = st.sampled_from(["bool", "i32", "i64", "f16", "f32", "f64"])
# Plausible values are mixed in so that the rules accept often enough to run the impl.
_PAIR = st.lists(st.integers(1, 3), min_size=2, max_size=2).map(tuple)
_PADS = st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3)), min_size=2, max_size=2).map(tuple)
_ATTR = {
    "int": _INT,
    "ints": st.one_of(_INTS, _PAIR),
    "bool": st.booleans(),
    "padding": st.one_of(st.sampled_from(["SAME", "VALID", "same", "full"]), _PADS,
                         st.lists(st.tuples(_INT, _INT), max_size=4).map(tuple)),
    "dtype": _DTYPE,
}


@st.composite
def _call(draw, name: str):
    p = _prim(name)
    # Half the draws are plausible (an accepted dtype, the second operand derived from the
    # first as matmul/conv2d need it), so the rule accepts often enough to run the impl.
    plausible = draw(st.booleans())
    d = draw(st.sampled_from([t.short for t in p.dtypes]) if plausible else _DTYPE)
    shapes = [draw(_DIMS4 if plausible and p.arity == 2 and name == "conv2d" else _DIMS)]
    dtypes = [d]
    if p.arity == 2:
        a = shapes[0]
        if plausible and name == "conv2d":
            kh, kw, o = draw(st.tuples(st.integers(1, 3), st.integers(1, 3), st.integers(0, 3)))
            shapes.append((kh, kw, a[3], o))
        elif plausible and len(a) >= 2:
            batch, n = draw(st.tuples(_DIMS, st.integers(0, 4)))
            shapes.append(batch[:2] + (a[-1], n))
        else:
            shapes.append(draw(_DIMS))
        dtypes.append(d if plausible else draw(_DTYPE))
    attrs = {}
    for k, spec in p.attrs.items():
        if draw(st.booleans()):
            attrs[k] = draw(_ATTR[spec.kind])
        elif not spec.required or not plausible:
            continue
        else:
            attrs[k] = draw(_INT if spec.kind == "int" else _ATTR[spec.kind])
    return [TensorType(s, t) for s, t in zip(shapes, dtypes)], attrs


@pytest.mark.parametrize("name", PRIMS)
def test_rule_only_raises_shape_error(name):
    p = _prim(name)
    rng = np.random.default_rng(1)

    @settings(max_examples=300, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
    @given(_call(name))
    def check(call):
        types, attrs = call
        try:
            canon = p.normalize_attrs(attrs)
            out = p.infer(types, canon)
        except ShapeError:
            return
        assert len(out) == 1
        if out[0].size > 10_000 or any(t.size > 10_000 for t in types):
            return
        arrays = [random_array(rng, t.shape, t.dtype.short) for t in types]
        got = p.impl(*arrays, **canon)
        assert isinstance(got, np.ndarray)
        assert got.shape == out[0].shape
        assert got.dtype == out[0].dtype.np

    check()
