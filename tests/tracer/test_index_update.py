"""``x.at[key]``: JAX's functional indexed updates, compiled and eager, against ``jax.numpy``'s
own ``.at`` (and NumPy's in-place updates where JAX leaves the result unspecified), with
gradients against JAX's."""

from __future__ import annotations

import numpy as np
import pytest

import flowjit as fj
from flowjit.ir.errors import FlowjitTypeError

jax = pytest.importorskip("jax")
jnp = jax.numpy

X = np.arange(24, dtype=np.float32).reshape(4, 6) - 7.5

# (key, values): ints, slices, negative and stepped, None/Ellipsis, integer arrays that
# broadcast (adjacent and apart), a boolean mask, repeated entries.
KEYS = [
    ((1, 2), np.float32(9.0)),
    ((slice(None), 0), np.float32(-1.0)),
    ((slice(1, None, 2), slice(None, None, -2)), np.arange(6, dtype=np.float32).reshape(2, 3)),
    ((-1,), np.arange(6, dtype=np.float32)),
    ((Ellipsis, None, 3), np.float32(4.0)),
    ((np.array([0, 2, 3]), np.array([[1], [5]])), np.float32(2.5)),
    ((np.array([3, 0]), slice(None), ), np.ones((2, 6), np.float32)),
    ((slice(None), np.array([4, 1, 4, 4])), np.arange(16, dtype=np.float32).reshape(4, 4)),
    ((X > 3,), np.float32(0.0)),
]


def _jax_key(key):
    return tuple(jnp.asarray(k) if isinstance(k, np.ndarray) else k for k in key)


@pytest.mark.parametrize("op", ["set", "add", "subtract", "multiply", "divide", "max", "min", "get"])
@pytest.mark.parametrize("case", range(len(KEYS)))
def test_a_key_of_python_values_matches_jax(op, case):
    key, values = KEYS[case]

    def f(x, v):
        ref = x.at[key]
        return ref.get() if op == "get" else getattr(ref, op)(v)
    got = fj.function(f)(X, values)
    eager = getattr(fj.at(X)[key], op)(*(() if op == "get" else (values,)))
    jref = jnp.asarray(X).at[_jax_key(key)]
    want = np.asarray(jref.get() if op == "get" else getattr(jref, op)(jnp.asarray(values)))
    if op == "set" and case == 7:
        # Column 4 is selected three times: JAX leaves which update wins unspecified;
        # flowjit keeps the last, as NumPy's x[key] = v does.
        want = X.copy()
        want[key] = np.broadcast_to(values, want[key].shape)
    np.testing.assert_allclose(got, want, rtol=1e-6)
    np.testing.assert_allclose(eager, want, rtol=1e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.bool_])
def test_traced_indices_set_add_and_subtract(dtype):
    # The indices are data: set keeps the last of repeated entries, add accumulates them,
    # and a negative index counts from the end.
    x = (np.arange(10) % 3 == 0).astype(dtype) if dtype == np.bool_ else np.arange(10).astype(dtype)
    ids = np.array([7, 2, -1, 2, 0], np.int32)
    v = np.array([1, 0, 1, 1, 0]).astype(dtype) if dtype == np.bool_ else np.array([5, 6, 7, 8, 9]).astype(dtype)
    set_ = fj.function(lambda x, i, v: x.at[i].set(v))(x, ids, v)
    want = x.copy()
    want[ids] = v
    np.testing.assert_array_equal(set_, want)
    if dtype != np.bool_:
        added = fj.function(lambda x, i, v: (x.at[i].add(v), x.at[i].subtract(v)))(x, ids, v)
        plus, minus = x.copy(), x.copy()
        np.add.at(plus, ids, v)
        np.subtract.at(minus, ids, v)
        np.testing.assert_array_equal(added[0], plus)
        np.testing.assert_array_equal(added[1], minus)


def test_traced_set_keeps_the_sign_of_zero_and_nan_updates():
    x = np.ones(4, np.float32)
    got = fj.function(lambda x, i: x.at[i].set(np.array([-0.0, np.nan, np.inf], np.float32)))(x, np.array([0, 1, 2]))
    assert np.signbit(got[0]) and np.isnan(got[1]) and got[2] == np.inf and got[3] == 1


def test_rows_at_traced_ids_and_their_gradient_match_jax():
    # An embedding's update (rows at 1-D ids, repeated) and the gradients of set and add.
    rng = np.random.default_rng(0)
    table = rng.standard_normal((6, 3)).astype(np.float32)
    ids = np.array([4, 1, 4, 0], np.int32)
    rows = rng.standard_normal((4, 3)).astype(np.float32)

    def loss(op, m):
        def f(t, r):
            u = getattr(t.at[ids if m is jnp else ids], op)(r)
            return m.sum(m.sin(u) * np.arange(1, 19, dtype=np.float32).reshape(6, 3))
        return f
    for op in ("add", "set"):
        got = fj.function(fj.grad(loss(op, fj), argnums=(0, 1)))(table, rows)
        want = jax.grad(loss(op, jnp), argnums=(0, 1))(jnp.asarray(table), jnp.asarray(rows))
        if op == "set":  # row 4 is set twice: JAX's winner is unspecified, flowjit's the last
            np.testing.assert_allclose(got[0], want[0], rtol=1e-5)
            np.testing.assert_allclose(got[1][[1, 2, 3]], np.asarray(want[1])[[1, 2, 3]], rtol=1e-5)
            assert not got[1][0].any()
        else:
            for g, w in zip(got, want):
                np.testing.assert_allclose(g, w, rtol=1e-5)


def test_gradients_through_a_static_key_match_jax():
    # Repeated entries for add; JAX differentiates multiply and max at unique ones only,
    # told so (a hint flowjit accepts and needs not).
    def loss(op, m):
        key = (slice(1, 3), np.array([0, 5, 5] if op == "add" else [0, 5, 2]))
        hint = {} if op == "add" else {"unique_indices": True}

        def f(x, v):
            return m.sum(m.tanh(getattr(x.at[key], op)(v, **hint)) * X)
        return f
    v = np.array([0.5, -1.0, 2.0], np.float32)
    for op in ("add", "multiply", "max"):
        got = fj.function(fj.grad(loss(op, fj), argnums=(0, 1)))(X / 10, v)
        want = jax.grad(loss(op, jnp), argnums=(0, 1))(jnp.asarray(X / 10), jnp.asarray(v))
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_apply_and_a_zero_d_array():
    got = fj.function(lambda x: x.at[1:3].apply(lambda e: e * e + 1))(np.arange(4.0))
    np.testing.assert_array_equal(got, [0, 2, 5, 3])
    np.testing.assert_array_equal(fj.function(lambda x: x.at[()].multiply(3.0))(np.float64(2.0)), 6.0)


def test_bad_updates_say_what_to_do():
    with pytest.raises(FlowjitTypeError, match="mode='wrap'.*one of 'drop', 'fill', 'clip'"):
        fj.function(lambda x: x.at[0].set(1.0, mode="wrap"))(np.zeros(3))
    with pytest.raises(TypeError, match="unexpected keyword arguments"):
        fj.function(lambda x: x.at[0].set(1.0, fill=True))(np.zeros(3))
    with pytest.raises(FlowjitTypeError, match="do not broadcast"):
        fj.function(lambda x: x.at[:2].set(np.ones(3)))(np.zeros(3))


def test_updates_under_vmap():
    x = np.zeros((3, 3))
    ids = np.array([0, 2, 1])
    for op in ("set", "add"):
        got = fj.function(fj.vmap(lambda r, i: getattr(r.at[i], op)(5.0)))(x, ids)
        np.testing.assert_array_equal(got, 5.0 * np.eye(3)[[0, 2, 1]])


@pytest.mark.parametrize("traced", [True, False])
def test_out_of_range_updates_are_dropped_and_clip_clamps_them_as_in_jax(traced):
    # JAX drops an update whose index is out of range after negative indices count from
    # the end; mode="clip" clamps it into range; get() clamps and get(mode="fill") fills.
    x = np.arange(5, dtype=np.float32) * 10
    ids = np.array([0, 5, -1, -6, 7, 2, 2], np.int32)
    v = np.arange(1, 8, dtype=np.float32)
    table = np.arange(12, dtype=np.float32).reshape(4, 3)
    rows_at = np.array([1, 4, -5, 3, -1], np.int32)
    rows = np.arange(15, dtype=np.float32).reshape(5, 3)

    def updates(m, i, r):
        def f(x, v, table, rows):
            u = (x.at[i[:6]].set(v[:6]), x.at[i].add(v), x.at[i].subtract(v), x.at[i].add(v, mode="clip"),
                 x.at[i[:6]].set(v[:6], mode="drop"), table.at[r].add(rows), table.at[r].set(rows),
                 table.at[r, 1:].add(rows[:, 1:]), table.at[:, i[:3]].set(-1.0), x.at[i].get(),
                 x.at[i].get(mode="fill"), x.at[i].get(mode="fill", fill_value=-9.0), x.at[7].set(1.0),
                 x.at[-6].add(1.0), x.at[7].add(1.0, mode="clip"))
            return u + (m.sum(m.sin(u[1]) + m.cos(u[5]).sum() * u[6].sum()),)
        return f

    if traced:
        got = fj.function(lambda x, v, t, r, i, ri: updates(fj, i, ri)(x, v, t, r))(x, v, table, rows, ids, rows_at)
        grad = fj.function(fj.grad(lambda x, v, t, r, i, ri: updates(fj, i, ri)(x, v, t, r)[-1], argnums=(0, 1, 2, 3)))(
            x, v, table, rows, ids, rows_at)
    else:
        got = fj.function(updates(fj, ids, rows_at))(x, v, table, rows)
        loss = fj.grad(lambda *a: updates(fj, ids, rows_at)(*a)[-1], argnums=(0, 1, 2, 3))
        grad = fj.function(loss)(x, v, table, rows)
    jargs = [jnp.asarray(a) for a in (x, v, table, rows)]
    want = updates(jnp, jnp.asarray(ids), jnp.asarray(rows_at))(*jargs)
    jloss = jax.grad(lambda *a: updates(jnp, jnp.asarray(ids), jnp.asarray(rows_at))(*a)[-1], argnums=(0, 1, 2, 3))
    jgrad = jloss(*jargs)
    for k, (g, w) in enumerate(zip(got, want)):
        np.testing.assert_allclose(g, w, rtol=1e-6, err_msg=f"update {k}")
    for g, w in zip(grad, jgrad):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
    eager = fj.at(x)[ids].add(v)
    np.testing.assert_array_equal(eager, want[1])


def test_setting_at_traced_ids_sorts_nothing_one_scatter_max_finds_each_last_update():
    # An embedding table's row set: an integer scatter_max over the table's 100 rows records
    # each row's last update, and x's 600 elements are read once; no sort (the earlier forms
    # sorted the ids, and before that every selected element's position).
    table = np.arange(600, dtype=np.float32).reshape(100, 6)
    ids = np.array([7, 99, 7, -1, 100], np.int32)
    rows = np.arange(30, dtype=np.float32).reshape(5, 6)
    f = fj.function(lambda t, i, r: t.at[i].set(r))
    text = str(f.ir(table, ids, rows))
    assert "argsort" not in text and "first_occurrence" not in text, text
    assert [line for line in text.splitlines() if "scatter_max" in line and "i32[100]" in line], text
    # Single elements at traced ids: the same, over x's elements.
    g = fj.function(lambda t, i, j, v: t.at[i, j].set(v))
    i, j = np.array([3, 3, 150, 0], np.int32), np.array([1, 1, 0, -1], np.int32)
    text = str(g.ir(table, i, j, np.float32(5)))
    assert "argsort" not in text and "scatter_max" in text, text
    want_g = table.copy()
    want_g[[3, 0], [1, 5]] = 5  # row 150 is dropped
    np.testing.assert_array_equal(g(table, i, j, np.float32(5)), want_g)
    want = table.copy()
    want[[7, 99]] = rows[[2, 3]]       # row 7 takes its last update; -1 is row 99; 100 is dropped
    np.testing.assert_array_equal(f(table, ids, rows), want)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.bool_])
@pytest.mark.parametrize("mode", [None, "clip"])
def test_traced_indices_multiply_divide_power_min_max_and_apply_match_jax(dtype, mode):
    # Indices that are data, repeated (2), negative (-1: the last) and out of range (9, -12:
    # dropped, or clamped with mode="clip"), as whole rows at 1-D ids and as single elements
    # at a 2-D key: each update of an element applies in turn (divide and power, as JAX's, by
    # the product of the element's updates).
    rng = np.random.default_rng(3)
    if dtype == np.bool_:
        x, v = rng.random((5, 3)) < 0.5, rng.random((6, 3)) < 0.5
        ops = ("min", "max", "apply")
    else:
        x = rng.integers(1, 5, (5, 3)).astype(dtype)
        x[1, 1] = 0
        v = rng.integers(-3, 4, (6, 3)).astype(dtype)
        v[v == 0] = 2
        ops = ("multiply", "divide", "power", "min", "max", "apply")
    if dtype == np.float32:
        x[0, 2], v[3, 1] = np.nan, np.nan
    ids = np.array([2, -1, 2, 9, 0, -12], np.int32)
    cols = np.array([0, 2, 0, 1, -1, 1], np.int32)
    kw = {} if mode is None else {"mode": mode}

    def update(m, op, key, values):
        ref = m.asarray(x).at[key] if m is jnp else fj.at(x)[key]
        if op == "apply":
            return ref.apply((lambda e: e * 2 - 1) if dtype != np.bool_ else (lambda e: ~e), **kw)
        if op == "power":
            values = m.abs(values) % 3
        return getattr(ref, op)(values, **kw)

    for op in ops:
        for key, values in (((ids,), v), ((ids, cols), v[:, 0])):
            want = np.asarray(update(jnp, op, tuple(map(jnp.asarray, key)), jnp.asarray(values)))
            got = fj.function(lambda k, u: update(fj, op, k, u))(key, values)
            eager = update(fj, op, key, values)
            # JAX (without x64) computes in 32 bits; NumPy's true division of ints is float64.
            dt = np.float64 if dtype == np.float64 or (op == "divide" and dtype == np.int32) else want.dtype
            for out in (got, eager):
                assert out.dtype == dt, (op, out.dtype, want.dtype)
                np.testing.assert_allclose(out, want, rtol=1e-6, err_msg=f"{op} at {len(key)}-d key")


def test_traced_max_min_and_multiply_gradients_match_jax():
    # Ties share the cotangent (x's element and every update that attains the result), as
    # JAX's scatter_max; multiply's gradient at unique ids against JAX's, and at repeated ids
    # with a zero among them (which JAX does not differentiate) against central differences.
    rng = np.random.default_rng(4)
    x = rng.standard_normal((5, 3))
    ids = np.array([1, 3, 1, 0, -1, 7], np.int32)
    v = rng.standard_normal((6, 3))
    v[2] = v[0]           # two updates tie on row 1
    v[3, 1] = x[0, 1]     # an update ties with x
    w = rng.standard_normal((5, 3))
    for op in ("max", "min"):
        def loss(m, op=op):
            return lambda x, v, i: m.sum(getattr(x.at[i], op)(v) * w)
        got = fj.function(fj.grad(loss(fj), argnums=(0, 1)))(x, v, ids)
        want = jax.grad(loss(jnp), argnums=(0, 1))(jnp.asarray(x), jnp.asarray(v), jnp.asarray(ids))
        for g, wt in zip(got, want):  # JAX computes in float32
            np.testing.assert_allclose(g, wt, rtol=1e-6, atol=1e-7)
    unique = np.array([4, 0, 2], np.int32)
    got = fj.function(fj.grad(lambda x, v, i: fj.sum(x.at[i].multiply(v) ** 2), argnums=(0, 1)))(x, v[:3], unique)
    want = jax.grad(lambda x, v, i: jnp.sum(x.at[i].multiply(v, unique_indices=True) ** 2), argnums=(0, 1))(
        jnp.asarray(x), jnp.asarray(v[:3]), jnp.asarray(unique))
    for g, wt in zip(got, want):
        np.testing.assert_allclose(g, wt, rtol=1e-6, atol=1e-7)
    v[0, 0] = 0.0            # row 1's column 0: one zero among its two updates
    v[0, 2] = v[2, 2] = 0.0  # ... and its column 2 two zeros (row 5's id, 7, is dropped)
    f = fj.function(lambda x, v: fj.sum(x.at[ids].multiply(v) * w))
    gv = fj.function(fj.grad(lambda x, v: fj.sum(x.at[ids].multiply(v) * w), argnums=1))(x, v)
    eps = 1e-6
    for k in np.ndindex(v.shape):
        up, dn = v.copy(), v.copy()
        up[k] += eps
        dn[k] -= eps
        np.testing.assert_allclose(gv[k], (f(x, up) - f(x, dn)) / (2 * eps), rtol=1e-6, atol=1e-8)
