"""The sparse_scatter pass: an embedding's gradient added into one row per distinct id.

Every program runs compiled twice, with the pass and without it (``passes={"sparse_scatter":
False}``), and the two must agree to the bit; the interpreter is the reference.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import flowjit as fj
from flowjit.passes.sparse_scatter import SPARSE_MIN_RATIO

DENSE = {"sparse_scatter": False}


def _ops(f, *args) -> list[str]:
    return [op.primitive.name for op in f.ir(*args, stage="sparse_scatter").body.ops]


def _adam_like(table, m, ids, upd):
    """Adam's first moment and a step, both reading the scattered gradient elementwise."""
    g = fj.scatter_add(fj.zeros(table.shape, table.dtype), ids, upd)
    m2 = 0.9 * m + 0.1 * g
    return m2, table - 0.01 * m2 / (fj.sqrt(g * g) + 1e-3)


def _run_both(fn, *args):
    sparse, dense = fj.function(fn), fj.function(fn, passes=DENSE)
    got, want = sparse(*args), dense(*args)
    reference = fj.function(fn, interpret=True)(*args)
    for g, w, r in zip(got, want, reference):
        np.testing.assert_array_equal(g, w)   # the same bits as the dense form, compiled
        np.testing.assert_allclose(g, r, rtol=2e-6, atol=1e-6)
    return sparse


def test_an_optimizer_reading_an_embedding_gradient_gets_the_compact_form_and_the_same_bits():
    rng = np.random.default_rng(0)
    table, m = rng.standard_normal((400, 8), np.float32), rng.standard_normal((400, 8), np.float32)
    # Repeated ids (their updates add in order), out-of-range ones (clamped to rows 0 and 399).
    ids = np.array([[5, 9, 5, -3], [399, 420, 9, 5]], np.int32)
    upd = rng.standard_normal((2, 4, 8), np.float32)
    f = _run_both(_adam_like, table, m, ids, upd)
    ops = _ops(f, table, m, ids, upd)
    assert "first_occurrence" in ops
    scatters = [op for op in f.ir(table, m, ids, upd, stage="sparse_scatter").body.ops
                if op.primitive.name == "scatter_add"]
    assert [op.results[0].type.shape for op in scatters] == [(8, 8)]   # one row per index, not 400


def test_the_gradient_of_a_lookup_through_an_optimizer_step():
    # What a user writes: the gradient of a loss through take, then an update.
    rng = np.random.default_rng(1)
    table = rng.standard_normal((300, 16)).astype(np.float64)
    ids = rng.integers(0, 300, (6, 5)).astype(np.int64)
    ids[0, :3] = 7   # a bag with one id three times

    def step(table, ids):
        def loss(t):
            return fj.sum(fj.tanh(fj.take(t, ids, axis=0)).mean(axis=1) ** 2)
        g = fj.grad(loss)(table)
        return (table - 0.5 * g,)

    f = _run_both(step, table, ids)
    assert "first_occurrence" in _ops(f, table, ids)


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.complex64])
def test_along_an_inner_axis_and_other_dtypes(dtype):
    rng = np.random.default_rng(2)
    operand_shape, ids = (3, 80, 4), np.array([4, 79, 4, 0, 100], np.int32)
    upd = (rng.standard_normal((3, 5, 4)) * 10).astype(dtype)
    if dtype == np.complex64:
        upd = upd + 1j * upd[::-1]

    def f(ids, upd):
        g = fj.scatter_add(fj.zeros(operand_shape, dtype), ids, upd, axis=1)
        return (g * 2 + 1,)

    compiled = _run_both(f, ids, upd)
    assert "first_occurrence" in _ops(compiled, ids, upd)


@pytest.mark.parametrize("case", ["not zeros", "returned", "reduced", "few rows", "negative zero", "narrow rows"])
def test_what_stays_dense(case):
    rng = np.random.default_rng(3)
    rows = 30 if case == "few rows" else 400
    width = 4 if case == "narrow rows" else 8  # 16 bytes a row: less than SPARSE_MIN_ROW_BYTES
    ids = rng.integers(0, rows, 8).astype(np.int32)
    upd = rng.standard_normal((8, width)).astype(np.float32)

    def f(ids, upd):
        base = {"not zeros": fj.ones((rows, width), np.float32),
                "negative zero": fj.full((rows, width), -0.0, np.float32)}.get(
                    case, fj.zeros((rows, width), np.float32))
        g = fj.scatter_add(base, ids, upd)
        if case == "returned":
            return g, g * 3
        if case == "reduced":
            return (fj.sum(g, axis=1),)
        return (g * 3,)

    assert rows < SPARSE_MIN_RATIO * 8 or case != "few rows"
    compiled = _run_both(f, ids, upd)
    assert "first_occurrence" not in _ops(compiled, ids, upd)


@settings(max_examples=25, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(rows=st.integers(40, 200), ids=st.lists(st.integers(-5, 210), min_size=1, max_size=10),
       seed=st.integers(0, 2**16))
def test_random_ids_match_the_dense_form_bit_for_bit(rows, ids, seed):
    ids = np.array(ids, np.int32)
    upd = np.random.default_rng(seed).standard_normal((len(ids), 8)).astype(np.float32)
    def f(ids, upd):
        return (fj.exp(fj.scatter_add(fj.zeros((rows, 8), np.float32), ids, upd)),)
    compiled = _run_both(f, ids, upd)
    assert ("first_occurrence" in _ops(compiled, ids, upd)) == (rows >= SPARSE_MIN_RATIO * len(ids))


@pytest.mark.parametrize("scatter", ["scatter_mul", "scatter_max", "scatter_min"])
def test_every_scatter_into_zeros_gets_the_compact_form_of_its_own_primitive(scatter):
    # A segment's maximum (product, minimum) into a fill of zeros: each row of the compact
    # form takes the same updates in the same order from the same zero.
    rng = np.random.default_rng(5)
    ids = np.array([3, 250, 3, -2, 400, 77, 3], np.int32)
    upd = rng.standard_normal((7, 8)).astype(np.float32)
    upd[2, 1] = np.nan

    def f(ids, upd):
        return (fj.exp(getattr(fj, scatter)(fj.zeros((300, 8), np.float32), ids, upd)),)
    compiled = _run_both(f, ids, upd)
    names = _ops(compiled, ids, upd)
    assert "first_occurrence" in names and scatter in names
