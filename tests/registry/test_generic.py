"""Every primitive in the registry against NumPy, through the builder, the verifier, the
text form and the reference interpreter, for each dtype it claims.

Elementwise primitives are tested generically from their declarations (dtypes, domain)
against an independent NumPy equivalent; every other primitive must have cases in a
``cases_*.py`` table beside this file.
"""

from __future__ import annotations

import importlib
import math
import pkgutil

import numpy as np
import pytest

import tests.registry as cases_pkg
from flowjit.ir import Builder, interpret, new_function, parse, print_function, verify
from flowjit.ir.dtypes import ALL_DTYPES
from flowjit.ir.dtypes import dtype as as_dtype
from flowjit.ir.registry import all_primitives, get
from flowjit.ir.types import TensorType
from flowjit.tracer.core import bind
from tests.registry.case import Case, random_array

_erf = np.vectorize(math.erf, otypes=[np.float64])

# An independent NumPy formulation of each elementwise primitive.
NUMPY_EQUIVALENT = {
    "neg": np.negative, "abs": np.abs, "sign": np.sign, "exp": np.exp, "expm1": np.expm1,
    "log": np.log, "log1p": np.log1p, "sqrt": np.sqrt, "rsqrt": lambda x: 1 / np.sqrt(x),
    "sin": np.sin, "cos": np.cos, "tanh": np.tanh, "logistic": lambda x: 1 / (1 + np.exp(-x)),
    "erf": lambda x: _erf(x).astype(x.dtype), "floor": np.floor, "ceil": np.ceil, "round": np.round,
    "isnan": np.isnan, "isfinite": np.isfinite, "logical_not": np.logical_not,
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide,
    "floor_div": np.floor_divide, "mod": np.mod, "pow": np.power, "maximum": np.maximum,
    "minimum": np.minimum, "atan2": np.arctan2, "hypot": np.hypot, "cbrt": np.cbrt, "eq": np.equal,
    "ne": np.not_equal, "lt": np.less,
    "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal, "logical_and": np.logical_and,
    "logical_or": np.logical_or, "logical_xor": np.logical_xor, "select": np.where,
    "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan, "sinh": np.sinh, "cosh": np.cosh,
    "asinh": np.arcsinh, "acosh": np.arccosh, "atanh": np.arctanh, "trunc": np.trunc, "signbit": np.signbit,
    "nextafter": np.nextafter, "bitwise_and": np.bitwise_and, "bitwise_or": np.bitwise_or,
    "bitwise_xor": np.bitwise_xor, "bitwise_not": np.invert, "left_shift": np.left_shift,
    "right_shift": np.right_shift, "real": np.real, "imag": np.imag, "conj": np.conjugate,
    "complex": lambda a, b: (a + 1j * b).astype(np.result_type(a.dtype, np.complex64)),
    "stop_gradient": np.copy, "name_tag": np.copy,
}

BROADCAST_SHAPES = [((3, 4), (3, 4)), ((2, 1, 4), (3, 1)), ((), (5,)), ((4, 1), ()), ((0, 3), (3,))]


def _domain_inputs(prim, arrays: list[np.ndarray]) -> list[np.ndarray]:
    """Move random inputs into the primitive's declared domain (a real one: complex
    functions are defined everywhere)."""
    dom = prim.domain
    if any(a.dtype.kind == "c" for a in arrays):
        return arrays
    if dom == "positive":
        return [np.abs(a) + np.asarray(0.25, a.dtype) for a in arrays]
    if dom == "unit":  # inside (-1, 1), away from the ends where finite differences fail
        return [np.tanh(a) * np.asarray(0.9, a.dtype) for a in arrays]
    if dom == "ge_one":
        return [np.abs(a) + np.asarray(1.25, a.dtype) for a in arrays]
    if dom == "gt_minus_one":
        return [np.abs(a) - np.asarray(0.75, a.dtype) for a in arrays]
    if dom == "nonzero_rhs":
        a, b = arrays
        return [a, np.where(b == 0, np.ones_like(b), b)]
    if dom == "pow":
        a, b = arrays
        if a.dtype.kind == "f":
            return [np.abs(a) + np.asarray(0.25, a.dtype), b]
        return [np.clip(a, -3, 3), np.abs(b) % 5]
    return arrays


def _elementwise_cases() -> list[Case]:
    cases = []
    for prim in all_primitives():
        if prim.kind != "elementwise" or prim.name == "cast":
            continue
        for d in prim.dtypes:
            if prim.arity == 1:
                shapes = [((3, 5),), ((),), ((0, 2),)]
            elif prim.arity == 2:
                shapes = BROADCAST_SHAPES
            else:
                shapes = [((3, 1), (3, 4), (4,)), ((), (2,), ())]
            for shp in shapes:
                if prim.name == "select":
                    ins = [(shp[0], "bool"), (shp[1], d.short), (shp[2], d.short)]
                else:
                    ins = [(s, d.short) for s in shp]
                cases.append(Case(prim.name, ins, {}, NUMPY_EQUIVALENT[prim.name], (d.short,),
                                  f"{prim.name}-{d.short}-{'x'.join(map(str, shp))}"))
    shorts = [d.short for d in ALL_DTYPES]
    for src in shorts:
        for dst in shorts:
            cases.append(Case("cast", [((4, 3), src)], {"dtype": dst},
                              lambda x, dst=dst: np.real(x).astype(as_dtype(dst).np) if not as_dtype(dst).is_complex
                              else x.astype(as_dtype(dst).np), (src,), f"cast-{src}-{dst}"))
    return cases


def _table_cases() -> list[Case]:
    cases = []
    for info in pkgutil.iter_modules(cases_pkg.__path__):
        if info.name.startswith("cases_"):
            mod = importlib.import_module(f"tests.registry.{info.name}")
            for c in mod.CASES:
                cases.extend(c.expand())
    return cases


ALL_CASES = _elementwise_cases() + _table_cases()
FUSIBLE = ("elementwise", "layout", "reduction")


def one_case_per_primitive_and_dtype() -> list[Case]:
    """One case per fusible primitive, dtype and arity: what the kernel backends compile."""
    seen, out = set(), []
    for c in ALL_CASES:
        key = (c.prim, c.dtypes[0] if c.dtypes else None, len(c.inputs))
        if get(c.prim).kind in FUSIBLE and key not in seen:
            seen.add(key)
            out.append(c)
    return out


def test_every_primitive_has_cases():
    covered = {c.prim for c in ALL_CASES}
    # Ops that own blocks (fusion, control flow) are built by passes and tested with them;
    # so are send/recv, which only work in pairs (tests/passes/test_partition.py).
    missing = [p.name for p in all_primitives()
               if p.name not in covered and not p.num_blocks and p.kind != "transfer"]
    assert not missing, f"primitives without registry test cases: {missing}"


def test_every_elementwise_primitive_has_a_numpy_equivalent_and_template():
    for p in all_primitives():
        if p.kind == "elementwise":
            assert p.template, p.name
            assert p.name in NUMPY_EQUIVALENT or p.name == "cast", p.name


def _tolerance(dtype: np.dtype) -> dict:
    if np.dtype(dtype).kind == "c":
        return _tolerance(np.finfo(dtype).dtype)
    if dtype == np.float16:
        return {"rtol": 2e-3, "atol": 2e-3}
    if dtype == np.float32:
        return {"rtol": 2e-5, "atol": 1e-6}
    if dtype == np.float64:
        return {"rtol": 1e-12, "atol": 1e-14}
    return {"rtol": 0, "atol": 0}


def _run_case(case: Case, seed: int):
    prim = get(case.prim)
    rng = np.random.default_rng(seed)
    arrays = case.make_inputs(rng)
    if prim.kind == "elementwise":
        arrays = _domain_inputs(prim, arrays)
    types = [TensorType(a.shape, a.dtype) for a in arrays]
    fn, b = new_function(case.prim, types, [f"x{i}" for i in range(len(types))])
    results = b.emit(prim, fn.args, case.attrs)
    fn.body.set_returns(results)
    verify(fn)
    text = print_function(fn)
    parsed = parse(text)
    assert print_function(parsed) == text
    got = interpret(parsed, arrays)
    return prim, arrays, results, got


@pytest.mark.parametrize("case", ALL_CASES, ids=lambda c: c.id or c.prim)
def test_primitive_matches_numpy(case: Case):
    prim, arrays, results, got = _run_case(case, seed=case.seed)
    for r, g in zip(results, got):
        assert g.shape == r.type.shape, (case.prim, g.shape, r.type)
        assert g.dtype == r.type.dtype.np, (case.prim, g.dtype, r.type)
    if case.expect is None:
        return
    with np.errstate(all="ignore"):
        expected = case.expect(*arrays)
    expected = expected if isinstance(expected, (tuple, list)) else (expected,)
    for g, e in zip(got, expected):
        e = np.asarray(e)
        assert g.shape == e.shape, (case.prim, g.shape, e.shape)
        if g.dtype.kind in "fc":
            np.testing.assert_allclose(g.astype(np.complex128), e.astype(np.complex128), equal_nan=True,
                                       **_tolerance(g.dtype))
        else:
            np.testing.assert_array_equal(g, e.astype(g.dtype))


@pytest.mark.parametrize("case", [c for c in ALL_CASES if c.prim != "constant"][::7], ids=lambda c: c.id or c.prim)
def test_eager_bind_equals_interpreter(case: Case):
    """Outside a trace, the fj surface evaluates primitives at once; it must agree."""
    prim, arrays, results, got = _run_case(case, seed=1)
    eager = bind(case.prim, arrays, case.attrs)
    eager = eager if isinstance(eager, tuple) else (eager,)
    for e, g in zip(eager, got):
        np.testing.assert_array_equal(e, g)


def test_random_array_dtypes():
    rng = np.random.default_rng(0)
    for d, npd in (("bool", np.bool_), ("i32", np.int32), ("f16", np.float16)):
        assert random_array(rng, (2,), d).dtype == npd


def test_builder_reports_op_and_location():
    from flowjit.ir.core import SourceLoc
    from flowjit.ir.errors import ShapeError
    fn, b = new_function("f", [TensorType((2, 3), "f32"), TensorType((4, 5), "f32")])
    b.loc = SourceLoc("model.py", 12)
    with pytest.raises(ShapeError) as e:
        b.op("matmul", *fn.args)
    msg = str(e.value)
    assert "matmul" in msg and "f32[2,3]" in msg and "f32[4,5]" in msg and "model.py:12" in msg
    assert isinstance(Builder, type)


@pytest.mark.parametrize("prim, attrs", [
    ("pad", {"low": (0,), "high": (0,), "value": 10**400}),
    ("cast", {"dtype": ("i4", -1)}),
    ("cast", {"dtype": "(3,-1)i4"}),
    ("cast", {"dtype": "a"}),
    ("cast", {"dtype": ">f4"}),
    ("reduce_sum", {"axes": (10**5000,)}),
    ("reduce_sum", {"axes": (2**63,)}),
    ("reduce_sum", {"axes": (1,), "bogus": 1}),
])
def test_malformed_attributes_are_shape_errors(prim, attrs):
    import warnings

    from flowjit.ir.errors import ShapeError
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ShapeError, match=prim):
            get(prim).normalize_attrs(attrs)


def test_unrepresentable_shape_attribute_is_a_shape_error():
    from flowjit.ir.errors import ShapeError
    with pytest.raises(ShapeError, match="shape NumPy can represent"):
        get("broadcast_to").normalize_attrs({"shape": (0, 3036988439, 3037012561)})
