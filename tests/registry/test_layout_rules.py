"""Rules and NumPy references of the layout and indexing primitives, checked directly."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import flowjit.ir.primitives.indexing
import flowjit.ir.primitives.layout  # noqa: F401
from flowjit.ir import registry
from flowjit.ir.dtypes import ALL_DTYPES
from flowjit.ir.dtypes import dtype as as_dtype
from flowjit.ir.errors import ShapeError
from flowjit.ir.types import TensorType
from tests.registry.case import random_array
from tests.registry.cases_layout import CASES

PRIMS = ("broadcast_to", "reshape", "transpose", "squeeze", "expand_dims", "slice",
         "concatenate", "pad", "gather", "scatter_add", "scatter_mul", "scatter_max", "scatter_min",
         "first_occurrence", "conv_patches")
SCATTERS = ("scatter_add", "scatter_mul", "scatter_max", "scatter_min")
OPAQUE = (*SCATTERS, "first_occurrence")  # not an element per result element

EXPANDED = [c for case in CASES for c in case.expand()]


def _type_of(a: np.ndarray) -> TensorType:
    return TensorType(a.shape, as_dtype(a.dtype))


def _run(prim: registry.Primitive, arrays: list[np.ndarray], attrs: dict) -> tuple[list, np.ndarray]:
    norm = prim.normalize_attrs(attrs)
    out_types = prim.infer([_type_of(a) for a in arrays], norm)
    result = prim.impl(*arrays, **norm)
    return out_types, result


def test_every_primitive_has_cases() -> None:
    assert {c.prim for c in CASES} == set(PRIMS)
    for name in PRIMS:
        p = registry.get(name)
        assert p.kind == ("opaque" if name in OPAQUE else "layout")
        assert p.differentiable == (name != "first_occurrence")  # an index has no gradient


@pytest.mark.parametrize("case", EXPANDED, ids=[f"{c.prim}-{c.id}" for c in EXPANDED])
def test_case(case) -> None:
    rng = np.random.default_rng(0)
    arrays = case.make_inputs(rng)
    originals = [a.copy() for a in arrays]
    prim = registry.get(case.prim)
    (out_type,), result = _run(prim, arrays, case.attrs)
    assert isinstance(result, np.ndarray)
    assert result.shape == out_type.shape
    assert result.dtype == out_type.dtype.np
    expected = np.asarray(case.expect(*originals))
    assert expected.shape == result.shape
    if out_type.dtype.is_inexact:
        np.testing.assert_allclose(result, expected.astype(result.dtype), rtol=1e-5, equal_nan=True)
    else:
        np.testing.assert_array_equal(result, expected)
    for a, o in zip(arrays, originals):
        np.testing.assert_array_equal(a, o)  # references never write into their inputs


def T(shape, d="f32") -> TensorType:
    return TensorType(shape, d)


BAD = [
    ("broadcast_to", [T((2, 3))], {"shape": (3,)}),
    ("broadcast_to", [T((2, 3))], {"shape": (4, 3)}),
    ("broadcast_to", [T((2, 3))], {"shape": (2, 1)}),
    ("broadcast_to", [T((2,))], {"shape": (-2,)}),
    ("reshape", [T((2, 3))], {"shape": (5,)}),
    ("reshape", [T((2, 3))], {"shape": (-1, 3)}),
    ("reshape", [T((2, 3))], {"shape": (0,)}),
    ("transpose", [T((2, 3))], {"perm": (0,)}),
    ("transpose", [T((2, 3))], {"perm": (0, 0)}),
    ("transpose", [T((2, 3))], {"perm": (-1, 0)}),
    ("transpose", [T((2, 3))], {"perm": (1, 2)}),
    ("squeeze", [T((2, 1))], {"axes": (0,)}),
    ("squeeze", [T((1, 1))], {"axes": (2,)}),
    ("squeeze", [T((1, 1))], {"axes": (0, -2)}),
    ("expand_dims", [T((2,))], {"axes": (2,)}),
    ("expand_dims", [T((2,))], {"axes": (0, 0)}),
    ("expand_dims", [T((2,))], {"axes": (-3,)}),
    ("slice", [T((5,))], {"start": (0, 0), "size": (1, 1), "step": (1, 1)}),
    ("slice", [T((5,))], {"start": (0,), "size": (6,), "step": (1,)}),
    ("slice", [T((5,))], {"start": (-1,), "size": (1,), "step": (1,)}),
    ("slice", [T((5,))], {"start": (5,), "size": (1,), "step": (1,)}),
    ("slice", [T((5,))], {"start": (2,), "size": (4,), "step": (-1,)}),
    ("slice", [T((5,))], {"start": (0,), "size": (3,), "step": (2 ** 70,)}),
    ("slice", [T((5,))], {"start": (0,), "size": (0,), "step": (0,)}),
    ("slice", [T((5,))], {"start": (0,), "size": (-1,), "step": (1,)}),
    ("slice", [T((5,))], {"start": (0,), "size": (1,)}),
    ("concatenate", [], {"axis": 0}),
    ("concatenate", [T((2, 3)), T((2, 3), "f64")], {"axis": 0}),
    ("concatenate", [T((2, 3)), T((3, 3))], {"axis": 1}),
    ("concatenate", [T((2, 3)), T((2,))], {"axis": 0}),
    ("concatenate", [T(()), T(())], {"axis": 0}),
    ("concatenate", [T((2, 3))], {"axis": 2}),
    ("pad", [T((2, 3))], {"low": (1,), "high": (1, 1)}),
    ("pad", [T((2, 3))], {"low": (1, -1), "high": (1, 1)}),
    ("pad", [T((2, 3))], {"low": (0, 0), "high": (0, 0), "value": "x"}),
    ("pad", [T((2, 3))], {"low": (0, 0), "high": (0, 0), "fill": 1.0}),
    ("gather", [T((3,)), T((2,), "f32")], {"axis": 0}),
    ("gather", [T(()), T((2,), "i32")], {"axis": 0}),
    ("gather", [T((3, 0)), T((2,), "i32")], {"axis": 1}),
    ("gather", [T((3,)), T((2,), "i32")], {"axis": 1}),
    ("gather", [T((3,)), T((2,), "bool")], {"axis": 0}),
    ("gather", [T((3,))], {"axis": 0}),
    ("scatter_add", [T((3,)), T((2,), "i32"), T((3,))], {"axis": 0}),
    ("scatter_add", [T((3,)), T((2,), "i32"), T((2,), "f64")], {"axis": 0}),
    ("scatter_add", [T((3, 2)), T((2,), "i64"), T((2, 3))], {"axis": 0}),
    ("scatter_add", [T((3,), "bool"), T((2,), "i32"), T((2,), "bool")], {"axis": 0}),
    ("scatter_add", [T((3,)), T((2,), "f32"), T((2,))], {"axis": 0}),
    ("scatter_add", [T((3,)), T((2,), "i32"), T((2,))], {"axis": -2}),
    ("scatter_mul", [T((3,), "bool"), T((2,), "i32"), T((2,), "bool")], {"axis": 0}),
    ("scatter_max", [T((3,), "c64"), T((2,), "i32"), T((2,), "c64")], {"axis": 0}),
    ("scatter_min", [T((3, 2)), T((2,), "i64"), T((2, 3))], {"axis": 0}),
]


@pytest.mark.parametrize("name, in_types, attrs", BAD, ids=[f"{b[0]}-{i}" for i, b in enumerate(BAD)])
def test_bad_raises_shape_error(name, in_types, attrs) -> None:
    prim = registry.get(name)
    with pytest.raises(ShapeError) as info:
        prim.infer(in_types, prim.normalize_attrs(attrs))
    assert name in str(info.value)


def test_messages_name_the_types() -> None:
    prim = registry.get("reshape")
    with pytest.raises(ShapeError, match=r"f32\[2,3\]"):
        prim.infer([T((2, 3))], prim.normalize_attrs({"shape": (5,)}))


def test_slice_impl_negative_steps_match_index_arithmetic() -> None:
    prim = registry.get("slice")
    x = np.arange(7)
    for start in range(7):
        for step in (-4, -3, -2, -1, 1, 2, 3):
            for size in range(9):
                attrs = {"start": (start,), "size": (size,), "step": (step,)}
                try:
                    prim.infer([_type_of(x)], prim.normalize_attrs(attrs))
                except ShapeError:
                    continue
                expected = start + step * np.arange(size)
                np.testing.assert_array_equal(prim.impl(x, **attrs), expected)


# ---- fuzzing: any attribute values give a result or a ShapeError, never another error ----

SMALL = st.integers(-4, 4)
INT = st.one_of(SMALL, SMALL, st.integers(-1000, 1000), st.integers(-2 ** 70, 2 ** 70))
SHAPES = st.lists(st.integers(0, 4), max_size=4).map(tuple)
DTYPES = st.sampled_from(ALL_DTYPES)
INDEX_DTYPES = st.sampled_from(ALL_DTYPES + (as_dtype("i32"), as_dtype("i64")) * 8)


def _attr_value(draw, kind: str):
    if kind == "int":
        return draw(INT)
    if kind in ("ints", "shape"):
        return tuple(draw(st.lists(INT, max_size=4)))
    if kind == "float":
        return draw(st.floats(allow_nan=True, allow_infinity=True))
    raise AssertionError(kind)


@st.composite
def _problem(draw, name: str):
    prim = registry.get(name)
    if name == "concatenate":
        d = draw(DTYPES)
        n = draw(st.integers(0, 3))
        base = draw(SHAPES)
        shapes = []
        for _ in range(n):
            if base and draw(st.booleans()):  # usually compatible: vary one dimension
                s = list(base)
                s[draw(st.integers(0, len(s) - 1))] = draw(st.integers(0, 3))
                shapes.append(tuple(s))
            else:
                shapes.append(draw(SHAPES))
        in_types = [TensorType(s, d if draw(st.integers(0, 5)) else draw(DTYPES)) for s in shapes]
    elif name in ("gather", *SCATTERS):
        x = TensorType(draw(st.lists(st.integers(0, 4) | st.integers(1, 3), max_size=3).map(tuple)),
                       draw(DTYPES))
        idx = TensorType(draw(st.lists(st.integers(0, 3), max_size=2).map(tuple)), draw(INDEX_DTYPES))
        in_types = [x, idx]
    else:
        in_types = [TensorType(draw(SHAPES), draw(DTYPES))]
    attrs = {k: _attr_value(draw, spec.kind) for k, spec in prim.attrs.items()
             if spec.required or draw(st.booleans())}
    x = in_types[0] if in_types else None
    # Bias towards valid attributes so the success path is exercised too.
    if x is not None and draw(st.integers(0, 2)):
        if name == "transpose":
            attrs["perm"] = tuple(draw(st.permutations(range(x.ndim))))
        elif name == "reshape":
            attrs["shape"] = tuple(draw(st.permutations(x.shape)))
        elif name == "broadcast_to":
            attrs["shape"] = tuple(draw(st.lists(st.integers(0, 3), max_size=2))) + tuple(
                draw(st.sampled_from([d, d, 3])) if d == 1 else d for d in x.shape)
        elif name == "slice":
            attrs["start"] = tuple(draw(st.integers(0, max(d - 1, 0))) for d in x.shape)
            attrs["step"] = tuple(draw(st.sampled_from([-2, -1, 1, 2])) for _ in x.shape)
            attrs["size"] = tuple(draw(st.integers(0, 3)) for _ in x.shape)
        elif name in ("pad",):
            attrs["low"] = tuple(draw(st.integers(0, 2)) for _ in x.shape)
            attrs["high"] = tuple(draw(st.integers(0, 2)) for _ in x.shape)
        elif name in ("squeeze", "expand_dims", "concatenate", "gather", *SCATTERS):
            key = "axes" if name in ("squeeze", "expand_dims") else "axis"
            ax = draw(st.integers(-max(x.ndim, 1), max(x.ndim - 1, 0)))
            attrs[key] = (ax,) if key == "axes" else ax
    if name in SCATTERS:
        upd_shape = draw(SHAPES)
        x, idx = in_types
        if x.ndim and isinstance(attrs.get("axis"), int) and -x.ndim <= attrs["axis"] < x.ndim \
                and draw(st.integers(0, 3)):
            ax = attrs["axis"] % x.ndim
            upd_shape = x.shape[:ax] + idx.shape + x.shape[ax + 1:]
        in_types.append(TensorType(upd_shape, x.dtype if draw(st.integers(0, 5)) else draw(DTYPES)))
    return in_types, attrs


@pytest.mark.parametrize("name", PRIMS)
@settings(max_examples=300, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_fuzz_only_shape_errors(name, data) -> None:
    prim = registry.get(name)
    in_types, attrs = data.draw(_problem(name))
    try:
        norm = prim.normalize_attrs(attrs)
        (out,) = prim.infer(in_types, norm)
    except ShapeError:
        return
    assert isinstance(out, TensorType)
    assert all(d >= 0 for d in out.shape)
    if out.size > 10_000 or any(t.size > 10_000 for t in in_types):
        return
    rng = np.random.default_rng(data.draw(st.integers(0, 2 ** 32 - 1)))
    arrays = [random_array(rng, t.shape, t.dtype.short) for t in in_types]
    result = prim.impl(*arrays, **norm)
    assert isinstance(result, np.ndarray)
    assert result.shape == out.shape
    assert result.dtype == out.dtype.np
