"""Tests of the random primitives: Threefry known answers, rules, references and statistics."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import flowjit.ir.primitives.random as fjr
from flowjit.ir import registry
from flowjit.ir.dtypes import ALL_DTYPES
from flowjit.ir.errors import ShapeError
from flowjit.ir.types import TensorType
from tests.registry.cases_random import CASES

PRIMS = ("random_split", "random_fold_in", "random_uniform", "random_normal")


def run(prim_name: str, key: np.ndarray, *more: np.ndarray, **attrs) -> np.ndarray:
    prim = registry.get(prim_name)
    canon = prim.normalize_attrs(attrs)
    (out_t,) = prim.infer([TensorType(a.shape, a.dtype) for a in (key, *more)], canon)
    out = prim.impl(key, *more, **canon)
    assert isinstance(out, np.ndarray)
    assert out.shape == out_t.shape and out.dtype == out_t.dtype.np
    return out


# ---- Threefry-2x32 ---------------------------------------------------------------------

# Known-answer vectors for Threefry-2x32-20 published with Random123 (Salmon et al. 2011).
KAT = [
    ((0x00000000, 0x00000000), (0x00000000, 0x00000000), (0x6B200159, 0x99BA4EFE)),
    ((0xFFFFFFFF, 0xFFFFFFFF), (0xFFFFFFFF, 0xFFFFFFFF), (0x1CB996FC, 0xBB002BE7)),
    ((0x13198A2E, 0x03707344), (0x243F6A88, 0x85A308D3), (0xC4923A9C, 0x483DF7A0)),
]


@pytest.mark.parametrize("key,ctr,expected", KAT)
def test_threefry_known_answers(key, ctr, expected):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        y0, y1 = fjr.threefry2x32(key[0], key[1], ctr[0], ctr[1])
    assert y0.dtype == np.uint32 and y1.dtype == np.uint32
    assert (int(y0), int(y1)) == expected


def test_threefry_broadcasts_elementwise():
    keys0 = np.array([k[0] for k, _, _ in KAT], dtype=np.uint32)
    keys1 = np.array([k[1] for k, _, _ in KAT], dtype=np.uint32)
    c0 = np.array([c[0] for _, c, _ in KAT], dtype=np.uint32)
    c1 = np.array([c[1] for _, c, _ in KAT], dtype=np.uint32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        y0, y1 = fjr.threefry2x32(keys0, keys1, c0, c1)
        assert [(int(a), int(b)) for a, b in zip(y0, y1)] == [e for _, _, e in KAT]
        # One key against a (3, 4) grid of counters equals the scalar calls one by one.
        grid = np.arange(12, dtype=np.uint32).reshape(3, 4)
        g0, g1 = fjr.threefry2x32(np.uint32(7), np.uint32(9), np.uint32(1), grid)
    assert g0.shape == g1.shape == (3, 4)
    for idx in np.ndindex(3, 4):
        s0, s1 = fjr.threefry2x32(7, 9, 1, int(grid[idx]))
        assert (int(g0[idx]), int(g1[idx])) == (int(s0), int(s1))


def test_key_from_seed():
    assert fjr.key_from_seed(0).tolist() == [0, 0]
    assert fjr.key_from_seed(42).tolist() == [0, 42]
    assert fjr.key_from_seed(2**32 + 5).tolist() == [1, 5]
    assert fjr.key_from_seed(-1).tolist() == [-1, -1]
    assert fjr.key_from_seed(2**63 - 1).tolist() == [2**31 - 1, -1]
    assert fjr.key_from_seed(-(2**63)).tolist() == [-(2**31), 0]
    assert fjr.key_from_seed(np.int64(7)).tolist() == [0, 7]
    k = fjr.key_from_seed(123)
    assert k.dtype == np.int32 and k.shape == (2,)
    with pytest.raises(OverflowError):
        fjr.key_from_seed(2**64)


# ---- case table --------------------------------------------------------------------------

EXPANDED = [c for case in CASES for c in case.expand()]


@pytest.mark.parametrize("case", EXPANDED, ids=[c.id or c.prim for c in EXPANDED])
def test_case(case):
    prim = registry.get(case.prim)
    arrays = case.make_inputs(np.random.default_rng(0))
    attrs = prim.normalize_attrs(case.attrs)
    (out_t,) = prim.infer([TensorType(a.shape, a.dtype) for a in arrays], attrs)
    out = prim.impl(*arrays, **attrs)
    assert isinstance(out, np.ndarray)
    assert out.shape == out_t.shape
    assert out.dtype == out_t.dtype.np
    expected = np.asarray(case.expect(*arrays))
    assert expected.shape == out.shape and expected.dtype == out.dtype
    if out.dtype.kind == "f":
        np.testing.assert_allclose(out, expected, rtol=1e-5, equal_nan=True)
    else:
        np.testing.assert_array_equal(out, expected)


def test_cases_cover_every_primitive():
    assert {c.prim for c in CASES} == set(PRIMS)
    for name in PRIMS:
        prim = registry.get(name)
        assert prim.kind == "random" and not prim.pure and not prim.differentiable


# ---- rejected inputs and attributes ---------------------------------------------------------

K = TensorType((2,), "i32")
BAD = [
    ("random_fold_in", [K, TensorType((1,), "i32")], {}),
    ("random_fold_in", [TensorType((3,), "i32"), TensorType((), "i32")], {}),
    ("random_fold_in", [K, TensorType((), "f32")], {}),
    ("random_split", [TensorType((2,), "f32")], {"num": 2}),
    ("random_split", [TensorType((2,), "i64")], {"num": 2}),
    ("random_split", [TensorType((3,), "i32")], {"num": 2}),
    ("random_split", [TensorType((2, 2), "i32")], {"num": 2}),
    ("random_split", [TensorType((), "i32")], {"num": 2}),
    ("random_split", [K], {"num": 0}),
    ("random_split", [K], {"num": -3}),
    ("random_split", [K], {"num": 2**32 + 1}),
    ("random_split", [K], {}),
    ("random_split", [K], {"num": (2,)}),
    ("random_split", [K, K], {"num": 2}),
    ("random_split", [], {"num": 2}),
    ("random_uniform", [K], {"shape": (2,), "dtype": "i32"}),
    ("random_uniform", [K], {"shape": (2,), "dtype": "bool"}),
    ("random_uniform", [K], {"shape": (-1,), "dtype": "f32"}),
    ("random_uniform", [K], {"shape": (2**16, 2**16, 2), "dtype": "f32"}),
    ("random_uniform", [K], {"shape": (2,)}),
    ("random_uniform", [K], {"shape": 3, "dtype": "f32"}),
    ("random_uniform", [K], {"shape": (2,), "dtype": "f32", "seed": 1}),
    ("random_uniform", [TensorType((4,), "i32")], {"shape": (2,), "dtype": "f32"}),
    ("random_uniform", [TensorType((2,), "f32")], {"shape": (2,), "dtype": "f32"}),
    ("random_normal", [K], {"shape": (2,), "dtype": "i64"}),
    ("random_normal", [K], {"shape": (3, -2), "dtype": "f64"}),
    ("random_normal", [K], {"shape": (2**33,), "dtype": "f16"}),
    ("random_normal", [TensorType((1, 2), "i32")], {"shape": (2,), "dtype": "f32"}),
    ("random_normal", [K, K], {"shape": (2,), "dtype": "f32"}),
]


@pytest.mark.parametrize("name,in_types,attrs", BAD, ids=[f"{b[0]}-{i}" for i, b in enumerate(BAD)])
def test_rejects(name, in_types, attrs):
    prim = registry.get(name)
    with pytest.raises(ShapeError):
        prim.infer(in_types, prim.normalize_attrs(attrs))


def test_limits_are_inclusive():
    # Exactly 2**32 elements (or keys) still has a distinct 32-bit counter for each.
    for name in ("random_uniform", "random_normal"):
        prim = registry.get(name)
        (t,) = prim.infer([K], prim.normalize_attrs({"shape": (2**16, 2**16), "dtype": "f32"}))
        assert t.shape == (2**16, 2**16)
    prim = registry.get("random_split")
    (t,) = prim.infer([K], prim.normalize_attrs({"num": 2**32}))
    assert t.shape == (2**32, 2) and t.dtype.short == "i32"


def test_error_names_the_types():
    prim = registry.get("random_split")
    with pytest.raises(ShapeError, match=r"random_split: .*i32\[3\]"):
        prim.infer([TensorType((3,), "i32")], prim.normalize_attrs({"num": 2}))


# ---- behaviour ------------------------------------------------------------------------------

N = 100_000


def _normal_cdf(x: np.ndarray) -> np.ndarray:
    erf = np.frompyfunc(math.erf, 1, 1)
    return 0.5 * (1.0 + erf(x / math.sqrt(2.0)).astype(np.float64))


def _ks(samples: np.ndarray, cdf) -> float:
    x = np.sort(samples.astype(np.float64))
    f = cdf(x)
    n = len(x)
    hi = np.arange(1, n + 1) / n - f
    lo = f - np.arange(0, n) / n
    return float(max(hi.max(), lo.max()))


@pytest.mark.parametrize("dt", ["f16", "f32", "f64"])
def test_uniform_statistics(dt):
    u = run("random_uniform", fjr.key_from_seed(2024), shape=(N,), dtype=dt)
    assert np.all(u >= 0) and np.all(u < 1)
    assert abs(float(u.astype(np.float64).mean()) - 0.5) < 0.01
    assert _ks(u, lambda x: x) < 0.01
    assert len(np.unique(u)) > (1000 if dt == "f16" else N * 0.99)


@pytest.mark.parametrize("dt", ["f32", "f64"])
def test_normal_statistics(dt):
    z = run("random_normal", fjr.key_from_seed(7), shape=(N,), dtype=dt).astype(np.float64)
    assert np.all(np.isfinite(z))
    assert abs(z.mean()) < 0.02
    assert abs(z.std() - 1.0) < 0.02
    assert _ks(z, _normal_cdf) < 0.01


def test_normal_f16_is_finite_and_standard():
    z = run("random_normal", fjr.key_from_seed(8), shape=(N,), dtype="f16").astype(np.float64)
    assert np.all(np.isfinite(z))
    assert abs(z.mean()) < 0.02 and abs(z.std() - 1.0) < 0.02


def test_uniform_never_reaches_one():
    # The largest value each variant can produce is below 1 in its own dtype.
    for bits, np_dt in ((11, np.float16), (24, np.float32), (53, np.float64)):
        top = np.asarray((2**bits - 1) * 2.0**-bits).astype(np_dt)
        assert top < 1


def test_uniform_is_a_grid_of_the_dtype():
    u = run("random_uniform", fjr.key_from_seed(3), shape=(1000,), dtype="f32").astype(np.float64)
    assert np.array_equal(u * 2**24, np.floor(u * 2**24))
    h = run("random_uniform", fjr.key_from_seed(3), shape=(1000,), dtype="f16").astype(np.float64)
    assert np.array_equal(h * 2**11, np.floor(h * 2**11))


def test_split_keys_differ():
    parent = fjr.key_from_seed(0)
    keys = run("random_split", parent, num=64)
    rows = {tuple(k) for k in keys.tolist()}
    assert len(rows) == 64
    assert tuple(parent.tolist()) not in rows
    # Splitting a child gives yet other keys, and its streams differ from its siblings'.
    grand = run("random_split", keys[0], num=4)
    assert not rows & {tuple(k) for k in grand.tolist()}
    a = run("random_uniform", keys[0], shape=(16,), dtype="f32")
    b = run("random_uniform", keys[1], shape=(16,), dtype="f32")
    assert not np.array_equal(a, b)


def test_split_prefix_is_stable():
    key = fjr.key_from_seed(99)
    assert np.array_equal(run("random_split", key, num=10)[:3], run("random_split", key, num=3))


def test_different_keys_give_different_streams():
    k1, k2 = fjr.key_from_seed(1), fjr.key_from_seed(2)
    for name in ("random_uniform", "random_normal"):
        a = run(name, k1, shape=(1000,), dtype="f64")
        b = run(name, k2, shape=(1000,), dtype="f64")
        assert np.mean(a == b) < 0.01


def test_determinism():
    key = np.array([12345, -678], dtype=np.int32)
    for name in PRIMS:
        if name == "random_fold_in":
            data = np.array(-3, dtype=np.int32)
            assert np.array_equal(run(name, key.copy(), data), run(name, key.copy(), data.copy()))
            continue
        attrs = {"num": 5} if name == "random_split" else {"shape": (3, 7), "dtype": "f32"}
        assert np.array_equal(run(name, key.copy(), **attrs), run(name, key.copy(), **attrs))


def test_values_depend_on_flat_index_only():
    # Element i of any shape is the same draw: a reshape of a flat draw.
    key = fjr.key_from_seed(5)
    for name in ("random_uniform", "random_normal"):
        flat = run(name, key, shape=(24,), dtype="f64")
        assert np.array_equal(run(name, key, shape=(2, 3, 4), dtype="f64"), flat.reshape(2, 3, 4))
        assert np.array_equal(run(name, key, shape=(5,), dtype="f64"), flat[:5])


def test_impl_is_quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for key in (np.array([-1, -1], dtype=np.int32), np.zeros(2, dtype=np.int32)):
            run("random_split", key, num=3)
            run("random_uniform", key, shape=(), dtype="f16")
            run("random_normal", key, shape=(4,), dtype="f64")


# ---- fuzzing the rules ----------------------------------------------------------------------

_INT = st.integers(-1000, 1000)
_SMALL = st.integers(-2, 6)
_ATTR_VALUE = st.one_of(
    _INT,
    _SMALL,
    st.lists(_INT, max_size=4).map(tuple),
    st.lists(_SMALL, max_size=4).map(tuple),
    st.sampled_from(["f16", "f32", "f64", "i32", "i64", "bool", "float32", "nope"]),
    st.booleans(),
)
_BY_KIND = {
    "int": st.one_of(_SMALL, _INT),
    "shape": st.one_of(st.lists(_SMALL, max_size=4), st.lists(_INT, max_size=4)).map(tuple),
    "dtype": st.sampled_from(["f16", "f32", "f64", "float32", "i32", "bool"]),
}
_IN_TYPE = st.one_of(
    st.just(TensorType((2,), "i32")),
    st.builds(TensorType, st.lists(st.integers(0, 4), max_size=3).map(tuple),
              st.sampled_from([d.short for d in ALL_DTYPES])),
)


@st.composite
def _calls(draw):
    name = draw(st.sampled_from(PRIMS))
    prim = registry.get(name)
    attrs = {}
    for k, spec in prim.attrs.items():
        roll = draw(st.integers(0, 9))
        if roll >= 3:
            attrs[k] = draw(_BY_KIND[spec.kind])
        elif roll >= 1:
            attrs[k] = draw(_ATTR_VALUE)
    if draw(st.integers(0, 19)) == 0:
        attrs["extra"] = draw(_INT)
    n_in = draw(st.sampled_from([1, 1, 1, 1, 0, 2]))
    in_types = [draw(st.one_of(st.just(K), _IN_TYPE)) for _ in range(n_in)]
    return name, in_types, attrs


@settings(max_examples=400, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(_calls(), st.integers(0, 2**32 - 1))
def test_fuzz_rules(call, seed):
    name, in_types, attrs = call
    prim = registry.get(name)
    try:
        canon = prim.normalize_attrs(attrs)
        out_types = prim.infer(in_types, canon)
    except ShapeError:
        return
    (out_t,) = out_types
    if out_t.size > 10_000:
        return
    rng = np.random.default_rng(seed)
    arrays = [rng.integers(-2**31, 2**31, size=t.shape).astype(t.dtype.np) for t in in_types]
    out = prim.impl(*arrays, **canon)
    assert isinstance(out, np.ndarray)
    assert out.shape == out_t.shape
    assert out.dtype == out_t.dtype.np
