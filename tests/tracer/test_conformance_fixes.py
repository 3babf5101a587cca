"""Faults the array API standard's own test suite (bench/array_api_conformance.py) found, each
at the smallest program that shows it, eager and inside fj.function: isdtype's keywords, an
explicit dtype=None on the creation functions, matrix_rank/pinv of empty stacks, eye with a
diagonal offset past int64, expand_dims' axis error class, and nonzero."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

import flowjit as fj
from flowjit.ir.errors import FlowjitTypeError, ShapeError
from tests.tracer.traced_errors import assert_traced_error

COMPILED = pytest.mark.parametrize("interpret", [False, True], ids=["compiled", "interpreted"])


def _same(got, want):
    np.testing.assert_array_equal(got, want)
    assert np.asarray(got).dtype == np.asarray(want).dtype, (np.asarray(got).dtype, np.asarray(want).dtype)
    assert np.shape(got) == np.shape(want)


# ---- isdtype(dtype, kind): both positional-or-keyword, as the standard's signature has them ---------------------


def test_isdtype_takes_dtype_and_kind_by_keyword():
    params = inspect.signature(fj.isdtype).parameters
    assert [(p.name, p.kind) for p in params.values()] == [
        ("dtype", inspect.Parameter.POSITIONAL_OR_KEYWORD), ("kind", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    assert fj.isdtype(dtype=fj.float32, kind="real floating")
    assert not fj.isdtype(fj.int64, kind=("bool", fj.float64))

    @fj.function
    def f(x):
        return x * 2 if fj.isdtype(dtype=x.dtype, kind="integral") else x / 2

    _same(f(np.arange(3)), np.arange(3) * 2)
    _same(f(np.ones(2)), np.full(2, 0.5))


# ---- an explicit dtype=None is the default dtype, as leaving it out ---------------------------------------------

I32 = np.arange(3, dtype=np.int32)
CREATIONS = {
    "ones": lambda m, **kw: m.ones((2, 3), **kw),
    "zeros": lambda m, **kw: m.zeros(4, **kw),
    "empty": lambda m, **kw: m.empty((0, 2), **kw).shape,  # values unspecified: dtype checked below
    "full": lambda m, **kw: m.full((2,), 7, **kw),
    "full_float": lambda m, **kw: m.full((2,), 7.5, **kw),
    "eye": lambda m, **kw: m.eye(3, 2, k=-1, **kw),
    "arange": lambda m, **kw: m.arange(5, **kw),
    "linspace": lambda m, **kw: m.linspace(0, 1, 5, **kw),
    "ones_like": lambda m, **kw: m.ones_like(I32, **kw),
    "zeros_like": lambda m, **kw: m.zeros_like(I32, **kw),
    "full_like": lambda m, **kw: m.full_like(I32, 3, **kw),
}


@pytest.mark.parametrize("name", sorted(CREATIONS))
def test_an_explicit_dtype_none_is_the_default(name):
    make = CREATIONS[name]
    want = make(np)
    _same(make(fj, dtype=None), want)
    _same(make(fj), want)
    if name == "empty":
        assert fj.empty((0, 2), dtype=None).dtype == np.float64
        assert fj.empty_like(I32, dtype=None).dtype == np.int32
    _same(fj.function(lambda: make(fj, dtype=None))(), want)


# ---- matrix_rank and pinv of empty stacks: NumPy's results, not an error -----------------------------------------

EMPTY_STACKS = [(0, 2, 0), (2, 0, 3), (0, 0), (0, 3), (3, 0), (2, 0, 0), (1, 2, 0), (0, 2, 2)]


@pytest.mark.parametrize("shape", EMPTY_STACKS, ids=str)
def test_matrix_rank_and_pinv_of_empty_stacks_are_numpys(shape):
    a = np.zeros(shape)
    want = (np.linalg.matrix_rank(a), np.linalg.pinv(a))
    for got in ((fj.linalg.matrix_rank(a), fj.linalg.pinv(a)),
                fj.function(lambda a: (fj.linalg.matrix_rank(a), fj.linalg.pinv(a)))(a),
                fj.function(lambda a: (np.linalg.matrix_rank(a), np.linalg.pinv(a)))(a)):
        _same(got[0], want[0])
        _same(got[1], want[1])


def test_matrix_rank_of_an_empty_stack_with_tolerances():
    a = np.zeros((2, 0, 3), np.float32)
    _same(fj.linalg.matrix_rank(a, rtol=0.5), np.linalg.matrix_rank(a, rtol=0.5))
    _same(fj.linalg.matrix_rank(a, tol=0.5), np.linalg.matrix_rank(a, tol=0.5))
    _same(fj.linalg.pinv(a, rtol=0.5), np.linalg.pinv(a, rtol=0.5))


# ---- eye with a diagonal offset past the array (even past int64): all zeros ---------------------------------------

EYES = [(0, None, 2**63), (3, None, 2**63), (2, 3, -2**70), (3, None, -3), (2, 4, 4), (2, 4, 3), (0, 0, 0)]


@pytest.mark.parametrize("n, m, k", EYES, ids=str)
def test_eye_with_any_offset_is_numpys(n, m, k):
    want = np.eye(n, m, k=k)
    _same(fj.eye(n, m, k=k), want)
    _same(fj.eye(n, m, k=k, dtype=np.int32), np.eye(n, m, k=k, dtype=np.int32))
    _same(fj.function(lambda: fj.eye(n, m, k=k))(), want)


def test_eye_refuses_an_offset_that_is_not_an_int():
    assert_traced_error(lambda: fj.eye(3, k=1.5), FlowjitTypeError, ["eye", "k=1.5", "int"],
                        "test_conformance_fixes.py")


# ---- expand_dims with an axis out of range: an IndexError (fj.AxisError), as NumPy's AxisError ---------------------


def test_expand_dims_of_a_0d_array_with_an_axis_out_of_range_is_an_index_error():
    with pytest.raises(IndexError):
        fj.expand_dims(np.zeros(()), axis=-2)
    with pytest.raises(fj.AxisError):
        fj.expand_dims(np.zeros(()), axis=1)
    assert_traced_error(lambda: fj.expand_dims(np.float64(1.0), axis=-2), IndexError, ["expand_dims", "-2"],
                        "test_conformance_fixes.py")
    _same(fj.expand_dims(np.zeros(()), axis=-1), np.zeros((1,)))


# ---- nonzero: NumPy's on concrete arrays; traced, JAX's size= ----------------------------------------------------

NONZERO_CASES = [
    np.array([0, 3, 0, -1, 5]),
    np.array([[0.0, np.nan, 1.0], [-0.0, 2.0, 0.0]]),
    np.array([[[True, False], [False, True]], [[True, True], [False, False]]]),
    np.zeros((2, 3), np.float32),
    np.zeros((0, 2), np.int32),
    np.array([7], np.int32),
]


@pytest.mark.parametrize("x", NONZERO_CASES, ids=lambda x: f"{x.dtype}{list(x.shape)}")
def test_nonzero_is_numpys_on_concrete_arrays(x):
    got, want = fj.nonzero(x), np.nonzero(x)
    assert isinstance(got, tuple) and len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        _same(g, w.astype(np.int64))


@COMPILED
@pytest.mark.parametrize("x", NONZERO_CASES, ids=lambda x: f"{x.dtype}{list(x.shape)}")
def test_nonzero_with_a_static_size_traces(x, interpret):
    want = np.nonzero(x)
    count = len(want[0])

    def padded(size, fill):
        fills = fill if isinstance(fill, tuple) else (fill,) * x.ndim
        return tuple(np.concatenate([w[:size], np.full(max(0, size - count), f)]).astype(np.int64)
                     for w, f in zip(want, fills, strict=True))

    @fj.function(interpret=interpret)
    def f(x):
        return (fj.nonzero(x, size=count + 2), fj.nonzero(x, size=1, fill_value=-1),
                fj.nonzero(x, size=3, fill_value=tuple(range(9, 9 + x.ndim))))

    more, one, per_axis = f(x)
    for got, want_ in ((more, padded(count + 2, 0)), (one, padded(1, -1)),
                       (per_axis, padded(3, tuple(range(9, 9 + x.ndim))))):
        assert isinstance(got, tuple) and len(got) == x.ndim
        for g, w in zip(got, want_, strict=True):
            _same(g, w)
    for g, w in zip(fj.nonzero(x, size=count + 2), padded(count + 2, 0), strict=True):
        _same(g, w)  # size= on a concrete array: the same padded result


def test_nonzero_is_in_the_namespace_and_what_np_nonzero_traces_as():
    assert "nonzero" in dir(fj)
    x = np.array([[1.0, 0.0], [0.0, 2.0]])
    for call in (fj.nonzero, np.nonzero):
        with pytest.raises(FlowjitTypeError) as info:
            fj.function(call)(x)
        message = str(info.value)
        for words in ("nonzero", "depends on the values", "size=K", "fill_value", "test_conformance_fixes.py"):
            assert words in message, (words, message)


@pytest.mark.parametrize("call, error, words", [
    (lambda: fj.nonzero(np.float64(1.0)), ShapeError, ["nonzero", "0-d", "atleast_1d"]),
    (lambda: fj.nonzero(np.ones(3), size=0), FlowjitTypeError, ["nonzero", "size=0", "positive"]),
    (lambda: fj.nonzero(np.ones(3), size=2, fill_value=(1, 2)), FlowjitTypeError,
     ["nonzero", "fill_value", "1 value"]),
])
def test_nonzero_bad_input_names_the_function_argument_and_line(call, error, words):
    assert_traced_error(call, error, words, "test_conformance_fixes.py")
    with pytest.raises(error):
        call()


# ---- matrix_rank and pinv with an array rtol: one tolerance per matrix, as NumPy's ---------------------------------

STACK = np.random.default_rng(3).standard_normal((3, 2, 4, 3))
STACK[0, 1] = 0.0
STACK[1, 0, :, 2] = STACK[1, 0, :, 1]


@pytest.mark.parametrize("x, rtol", [(STACK, np.array([1e-3, 0.5])), (STACK, np.full((3, 2), 0.4)),
                                     (STACK, np.array(0.5)), (np.ones((0, 3, 2)), np.zeros(0, np.float32))],
                         ids=["per-column", "per-matrix", "0-d", "empty"])
def test_matrix_rank_and_pinv_take_one_rtol_per_matrix(x, rtol):
    want = (np.linalg.matrix_rank(x, rtol=rtol), np.linalg.pinv(x, rtol=rtol), np.linalg.pinv(x, rcond=rtol))
    for got in ((fj.linalg.matrix_rank(x, rtol=rtol), fj.linalg.pinv(x, rtol=rtol), fj.linalg.pinv(x, rcond=rtol)),
                fj.function(lambda x, r: (fj.linalg.matrix_rank(x, rtol=r), fj.linalg.pinv(x, rtol=r),
                                          fj.linalg.pinv(x, rcond=r)))(x, rtol)):
        _same(got[0], want[0])
        for g, w in zip(got[1:], want[1:], strict=True):
            assert g.shape == w.shape and g.dtype == w.dtype
            np.testing.assert_allclose(g, w, atol=1e-12)


# ---- asarray(obj, dtype=None, copy=None, *, device=None), as the standard's signature ------------------------------


def test_asarray_takes_device_as_the_other_creation_functions():
    assert inspect.signature(fj.asarray).parameters["device"].kind == inspect.Parameter.KEYWORD_ONLY
    _same(fj.asarray([1, 2], device="cpu:0"), np.array([1, 2]))
    _same(fj.asarray(np.ones(2, np.float32), dtype=np.float64, device=None), np.ones(2))
    _same(fj.function(lambda x: fj.asarray(x, device="cpu:0") + 1)(np.arange(3)), np.arange(1, 4))
    with pytest.raises(fj.DeviceError, match="tpu:3"):
        fj.asarray([1.0], device="tpu:3")


# ---- names and keywords the standard's signature tests check ----------------------------------------------------


def test_clip_names_its_bounds_min_and_max_and_takes_numpys_a_min():
    params = list(inspect.signature(fj.clip).parameters)
    assert params[:3] == ["x", "min", "max"]
    x = np.array([-2.0, 0.5, 3.0])
    _same(fj.clip(x, -1, 1), np.clip(x, -1, 1))
    _same(fj.clip(x, min=0.0), np.clip(x, 0.0, None))
    _same(fj.function(lambda x: (np.clip(x, a_min=-1.0, a_max=2.0), fj.clip(x, None, 0.0)))(x)[0], np.clip(x, -1, 2))


def test_meshgrid_is_a_list_and_linspace_takes_device_and_complex_ends():
    out = fj.meshgrid(np.arange(3), np.arange(2))
    assert isinstance(out, list) and len(out) == 2
    empty = np.zeros(0, np.uint8)
    for xs in ((empty, empty), (np.arange(3), np.arange(0)), (np.arange(0), np.ones(2))):
        for indexing in ("xy", "ij"):
            for got, want in zip(fj.meshgrid(*xs, indexing=indexing), np.meshgrid(*xs, indexing=indexing), strict=True):
                _same(got, want)
    assert inspect.signature(fj.linspace).parameters["device"].kind == inspect.Parameter.KEYWORD_ONLY
    _same(fj.linspace(0.0, 1.0, 5, device="cpu:0"), np.linspace(0.0, 1.0, 5))
    want = np.linspace(1 + 2j, -3j, 7)
    for got in (fj.linspace(1 + 2j, -3j, 7), fj.function(lambda a, b: fj.linspace(a, b, 7))(1 + 2j, -3j)):
        assert got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=1e-15, atol=1e-15)


def test_vecdot_is_in_the_main_namespace_and_conjugates_x1():
    a = np.array([1 + 2j, 3 - 1j]), np.array([2 - 1j, 1j])
    _same(fj.vecdot(*a), np.vecdot(*a))
    _same(fj.function(fj.vecdot)(*a), np.vecdot(*a))


def test_tan_of_a_large_imaginary_part_is_plus_or_minus_i():
    z = np.array([1e-78 + 710j, 0.3 + 0.2j, -2 - 1e3j, 5 + 0j], np.complex128)
    with np.errstate(all="ignore"):
        want = np.tan(z)
    for got in (fj.tan(z), fj.function(fj.tan)(z)):
        np.testing.assert_allclose(got, want, rtol=1e-14)


def test_asarray_of_a_constant_inside_a_trace_is_traced_so_traced_ids_gather():
    # fj.asarray(table) stayed a NumPy array, and NumPy's indexing of it by traced ids asked
    # the Tracer for its value; jnp.asarray(table)[ids] works under jax.jit.
    table = np.arange(12.0).reshape(4, 3)
    ids = np.array([0, 2, 3, 2])
    np.testing.assert_array_equal(fj.function(lambda i: fj.asarray(table)[i])(ids), table[ids])
    np.testing.assert_array_equal(fj.function(lambda i: fj.array(table)[i] * 2)(ids), table[ids] * 2)
    # Its gradient is a scatter-add into the table's shape (repeated ids add up).
    grad = fj.function(fj.grad(lambda t, i: fj.sum(fj.asarray(t)[i] ** 2)))(table, ids)
    want = np.zeros_like(table)
    np.add.at(want, ids, 2 * table[ids])
    np.testing.assert_allclose(grad, want)
    # Eagerly it is still NumPy's array.
    assert type(fj.asarray(table)) is np.ndarray
