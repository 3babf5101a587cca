"""Selection, insertion and set operations (``flowjit.tracer.numpy.selection``): each against
NumPy on several inputs, eagerly and compiled inside ``fj.function``; the ``size=``/``fill_value=``
paths on traced inputs and the errors without them; gradients against ``jax.grad``."""

from __future__ import annotations

import numpy as np
import pytest

import flowjit as fj
from flowjit.ir.errors import FlowjitTypeError, ShapeError

RNG = np.random.default_rng(11)
X = RNG.integers(-2, 3, (3, 4)).astype(np.float64)
Y = RNG.standard_normal((3, 4))
V = RNG.standard_normal(4)
A3 = RNG.standard_normal((2, 3, 4))


@pytest.fixture(scope="module")
def jax():
    jax = pytest.importorskip("jax")
    was = jax.config.read("jax_enable_x64")
    jax.config.update("jax_enable_x64", True)
    yield jax
    jax.config.update("jax_enable_x64", was)


def _same(got, want, exact=True):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, (got.shape, want.shape)
    if exact:
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def _padded(want, size, fill):
    want = np.asarray(want)[:size]
    return np.concatenate([want, np.full((size - len(want),) + want.shape[1:], fill, want.dtype)])


def test_registered_and_new():
    from flowjit.tracer.numpy import selection
    for name in selection.__all__:
        assert getattr(fj, name) is getattr(selection, name)


# ----------------------------------------------------------------------------- nonzero family

@pytest.mark.parametrize("seed", [0, 1])
def test_argwhere_flatnonzero_extract(seed):
    x = np.random.default_rng(seed).integers(-1, 2, (3, 5)).astype(np.float64)
    n = int(np.count_nonzero(x))
    _same(fj.argwhere(x), np.argwhere(x))
    _same(fj.flatnonzero(x), np.flatnonzero(x))
    _same(fj.extract(x > 0, x), np.extract(x > 0, x))
    f = fj.function(lambda x: (fj.argwhere(x, size=12, fill_value=-1), fj.flatnonzero(x, size=4),
                               fj.extract(x > 0, x, size=10, fill_value=-7.0), fj.argwhere(x[0, 0], size=2)))
    aw, fnz, ex, aw0 = f(x)
    _same(aw, _padded(np.argwhere(x), 12, -1))
    _same(fnz, _padded(np.flatnonzero(x), 4, 0))
    _same(ex, _padded(np.extract(x > 0, x), 10, -7.0))
    assert aw0.shape == (2, 0) and n >= 0
    # eager with size= computes the same
    _same(fj.argwhere(x, size=12, fill_value=-1), aw)


def test_compress():
    cond = np.array([True, False, True, True])
    for axis in (None, 0, 1):
        c = cond[:3] if axis == 0 else cond
        _same(fj.compress(c, Y, axis=axis), np.compress(c, Y, axis=axis))
        # a concrete condition fixes the size: no size= needed on a traced array
        _same(fj.function(lambda y, c=c, axis=axis: fj.compress(c, y, axis=axis))(Y), np.compress(c, Y, axis=axis))
    f = fj.function(lambda c, y: (fj.compress(c, y, axis=1, size=2), fj.compress(c, y, axis=1, size=5, fill_value=9),
                                  fj.compress(c[:2], y, axis=1, size=3)))
    a, b, short = f(cond, Y)
    _same(a, np.compress(cond, Y, axis=1)[:, :2])
    _same(b, np.concatenate([np.compress(cond, Y, axis=1), np.full((3, 2), 9.0)], axis=1))
    _same(short, np.concatenate([np.compress(cond[:2], Y, axis=1), np.zeros((3, 2))], axis=1))
    # a concrete condition with size pads too
    _same(fj.compress(cond, Y, axis=1, size=4, fill_value=1), np.concatenate([Y[:, cond], np.ones((3, 1))], axis=1))
    with pytest.raises(IndexError, match="True past"):
        fj.compress([True, False, False, False, True], V)


def test_no_size_errors():
    cases = {
        "argwhere": lambda x: fj.argwhere(x),
        "flatnonzero": lambda x: fj.flatnonzero(x),
        "extract": lambda x: fj.extract(x > 0, x),
        "compress": lambda x: fj.compress(x > 0, x),
        "union1d": lambda x: fj.union1d(x, x),
        "intersect1d": lambda x: fj.intersect1d(x, np.ones(2)),
        "setdiff1d": lambda x: fj.setdiff1d(np.ones(2), x),
        "setxor1d": lambda x: fj.setxor1d(x, x),
    }
    for name, call in cases.items():
        where = r"on a traced (array|condition) .*test_numpy_selection.py.*size=K"
        with pytest.raises(FlowjitTypeError, match=rf"{name} {where}"):
            fj.function(call)(V)
    # NumPy's functions on traced arrays trace as fj's, with the same error
    with pytest.raises(FlowjitTypeError, match="argwhere on a traced array.*Pass size=K"):
        fj.function(lambda x: np.argwhere(x))(V)


# ----------------------------------------------------------------------------- choose, piecewise

def test_choose():
    a = np.array([[0, 1, 2, 1], [2, 0, 1, 0], [1, 1, 0, 2]])
    choices = [Y, -Y, np.float64(10.0)]
    _same(fj.choose(a, choices), np.choose(a, choices))
    wild = a * 3 - 2
    for mode in ("clip", "wrap"):
        _same(fj.choose(wild, choices, mode=mode), np.choose(wild, choices, mode=mode))
        f = fj.function(lambda a, y, mode=mode: fj.choose(a, [y, -y, 10.0], mode=mode))
        _same(f(wild, Y), np.choose(wild, choices, mode=mode))
    # concrete indices may use mode='raise' inside a trace
    _same(fj.function(lambda y: fj.choose(a, [y, -y, 10.0]))(Y), np.choose(a, choices))
    with pytest.raises(FlowjitTypeError, match=r"choose\(mode='raise'\) on a traced index.*mode='clip'"):
        fj.function(lambda a, y: fj.choose(a, [y, -y]))(a, Y)
    with pytest.raises(ValueError, match="invalid entry"):
        fj.function(lambda y: fj.choose(wild, [y, -y]))(Y)


def test_piecewise():
    xs = np.linspace(-2.5, 2.5, 11)
    cases = [
        (lambda x: [x < 0, x >= 0], [lambda v: -v, lambda v: v ** 2]),
        (lambda x: [x < -1, x > 1], [lambda v: v * 3, 7.0, lambda v: np.sin(v) if isinstance(v, np.ndarray)
                                     else fj.sin(v)]),
        (lambda x: x > 0, [lambda v: v + 1]),
        (lambda x: [x < 0, x < 1], [1, 2]),  # the later condition wins
    ]
    for conds, funcs in cases:
        want = np.piecewise(xs, conds(xs), funcs)
        _same(fj.piecewise(xs, conds(xs), funcs), want, exact=False)
        _same(fj.function(lambda x, conds=conds, funcs=funcs: fj.piecewise(x, conds(x), funcs))(xs), want,
              exact=False)
    ints = np.arange(-3, 4)
    _same(fj.function(lambda x: fj.piecewise(x, [x < 0], [lambda v: v * 1.5, 9]))(ints),
          np.piecewise(ints, [ints < 0], [lambda v: v * 1.5, 9]))
    with pytest.raises(ValueError, match="either 2 or 3 functions"):
        fj.function(lambda x: fj.piecewise(x, [x < 0, x > 1], [1]))(xs)


# ----------------------------------------------------------------------------- functional updates

def test_put_along_axis_and_put():
    idx = np.array([[0, 2], [3, 3], [1, -1]])
    for axis, ind, vals in [(1, idx, 7.0), (1, idx, np.arange(6.0).reshape(3, 2)), (0, np.array([[2, 0, 1, 0]]), -1.0),
                            (None, np.array([0, 11, 5]), np.array([1.0, 2.0, 3.0]))]:
        want = Y.copy()
        np.put_along_axis(want, ind, vals, axis)
        _same(fj.put_along_axis(Y, ind, vals, axis, inplace=False), want)
        f = fj.function(lambda y, i, v, axis=axis: fj.put_along_axis(y, i, v, axis, inplace=False))
        _same(f(Y, ind, np.asarray(vals)), want)
    with pytest.raises(ValueError, match="put_along_axis: flowjit's arrays are immutable.*inplace=False"):
        fj.put_along_axis(Y, idx, 1.0, 1)
    for ind, v, mode in [([0, 5, -1], [1.0, 2.0, 3.0], None), ([0, 13, -1, 30], [7.0, 8.0], "wrap"),
                         ([0, 13, -1], [5.0], "clip"), ([1, 1, 2], [1.0, 2.0, 3.0, 4.0], "raise")]:
        want = Y.copy()
        np.put(want, ind, v, mode=mode or "raise")
        _same(fj.put(Y, ind, v, mode=mode, inplace=False), want)
        if mode != "raise":
            f = fj.function(lambda y, i, mode=mode, v=v: fj.put(y, i, np.asarray(v), mode=mode, inplace=False))
            _same(f(Y, np.asarray(ind)), want)
    with pytest.raises(FlowjitTypeError, match=r"put\(mode='raise'\) on traced indices"):
        fj.function(lambda y, i: fj.put(y, i, 1.0, mode="raise", inplace=False))(Y, np.array([1]))
    with pytest.raises(ValueError, match="put: flowjit's arrays are immutable"):
        fj.function(lambda y: np.put(y, [0], 1.0))(Y)


def test_place_fill_diagonal_diagflat():
    mask = Y > 0
    for vals in ([10.0, 20.0, 30.0], [5.0], np.arange(20.0)):
        want = Y.copy()
        np.place(want, mask, vals)
        _same(fj.place(Y, mask, vals, inplace=False), want)
        _same(fj.function(lambda y, m, vals=vals: fj.place(y, m, np.asarray(vals), inplace=False))(Y, mask), want)
    with pytest.raises(ValueError, match="place: vals is empty"):
        fj.function(lambda y, m: fj.place(y, m, [], inplace=False))(Y, mask)
    for shp, wrap, val in [((4, 4), False, [1.0, 2.0]), ((7, 3), True, 5.0), ((7, 3), False, [1.0, 2.0, 3.0]),
                           ((3, 5), False, 2.0), ((3, 3, 3), False, [4.0, 5.0])]:
        a = RNG.standard_normal(shp)
        want = a.copy()
        np.fill_diagonal(want, val, wrap=wrap)
        _same(fj.fill_diagonal(a, val, wrap=wrap, inplace=False), want)
        f = fj.function(lambda a, wrap=wrap, val=val: fj.fill_diagonal(a, np.asarray(val), wrap=wrap, inplace=False))
        _same(f(a), want)
    with pytest.raises(ValueError, match="inplace=False"):
        fj.fill_diagonal(np.zeros((2, 2)), 1.0)
    for v, k in [(np.arange(3.0), 0), (Y[:2, :2], 1), (V, -2)]:
        _same(fj.diagflat(v, k), np.diagflat(v, k))
        _same(fj.function(lambda v, k=k: fj.diagflat(v, k))(v), np.diagflat(v, k))


# ----------------------------------------------------------------------------- insert, delete, lexsort

INSERTS = [(1, 5.0, None), (1, [[9.0, 8.0, 7.0, 6.0]], 0), ([0, 2, 2], 5.0, 1), (slice(0, 3), np.arange(3.0), 1),
           (-1, np.arange(3.0), 1), ([1], [[1.0, 2.0, 3.0]], 1), ([3, 0, 4], [1.0, 2.0, 3.0], 1), (3, [1.0, 2.0], None)]


@pytest.mark.parametrize("obj,values,axis", INSERTS)
def test_insert(obj, values, axis):
    want = np.insert(Y, obj, values, axis)
    _same(fj.insert(Y, obj, values, axis), want)
    _same(fj.function(lambda y, v: fj.insert(y, obj, v, axis))(Y, np.asarray(values)), want)


def test_delete():
    for obj, axis in [(1, None), ([0, 2], 1), (slice(None, None, 2), 0), (np.array([True, False, True, False]), 1),
                      (-1, 0), ([], 1)]:
        want = np.delete(Y, obj, axis)
        _same(fj.delete(Y, obj, axis), want)
        _same(fj.function(lambda y, obj=obj, axis=axis: fj.delete(y, obj, axis))(Y), want)
    with pytest.raises(FlowjitTypeError, match="delete with traced obj.*concrete indices"):
        fj.function(lambda y, i: fj.delete(y, i))(Y, np.array([1]))
    with pytest.raises(FlowjitTypeError, match="insert with traced obj"):
        fj.function(lambda y, i: fj.insert(y, i, 1.0))(Y, np.array([1]))


def test_lexsort():
    rng = np.random.default_rng(3)
    k1, k2, k3 = rng.integers(0, 3, 12), rng.integers(0, 2, 12), rng.standard_normal(12)
    for keys in [(k1,), (k1, k2), (k3, k1, k2), (k1, k1 > 1)]:
        want = np.lexsort(keys)
        _same(fj.lexsort(keys), want)
        _same(fj.function(lambda *ks: fj.lexsort(ks))(*keys), want)
    grid = rng.integers(0, 2, (2, 3, 5))
    for axis in (-1, 0, 1):
        _same(fj.function(lambda g, axis=axis: fj.lexsort(g, axis=axis))(grid), np.lexsort(grid, axis=axis))


# ----------------------------------------------------------------------------- set operations

@pytest.mark.parametrize("seed", [0, 1, 2])
def test_set_operations(seed):
    rng = np.random.default_rng(seed)
    a1, a2 = rng.integers(0, 9, 10), rng.integers(4, 13, (2, 4))
    if seed == 2:
        a1, a2 = rng.standard_normal(6).round(1), np.array([np.nan, 0.1, 5.0])
        a1[3] = np.nan
    _same(fj.union1d(a1, a2), np.union1d(a1, a2))
    _same(fj.setdiff1d(a1, a2), np.setdiff1d(a1, a2))
    _same(fj.setxor1d(a1, a2), np.setxor1d(a1, a2))
    for got, want in zip(fj.intersect1d(a1, a2, return_indices=True), np.intersect1d(a1, a2, return_indices=True)):
        _same(got, want)
    size = 14
    f = fj.function(lambda a, b, u: (fj.union1d(a, b, size=size), fj.intersect1d(a, b, return_indices=True, size=size),
                                  fj.setdiff1d(a, b, size=size), fj.setxor1d(a, b, size=size, fill_value=-1),
                                  fj.intersect1d(a, b, size=2), fj.setdiff1d(u, b, True, size=size)))
    union, (inter, i1, i2), diff, xor, inter2, diff_unique = f(a1, a2, np.unique(a1)[::-1])
    w_union = np.union1d(a1, a2)
    _same(union, _padded(w_union, size, w_union[0]))
    w_inter, w1, w2 = np.intersect1d(a1, a2, return_indices=True)
    _same(inter, _padded(w_inter, size, w_inter[0] if w_inter.size else 0))
    _same(i1, _padded(w1, size, a1.size))
    _same(i2, _padded(w2, size, a2.size))
    _same(inter2, _padded(w_inter, 2, w_inter[0] if w_inter.size else 0))
    _same(diff, _padded(np.setdiff1d(a1, a2), size, 0))
    _same(diff_unique, _padded(np.setdiff1d(np.unique(a1)[::-1], a2, True), size, 0))
    if seed != 2:  # NumPy's setxor1d keeps one NaN of each array; flowjit's keeps one
        _same(xor, _padded(np.setxor1d(a1, a2), size, -1))
    # eager with size= computes the same
    _same(fj.union1d(a1, a2, size=size), union)


# ----------------------------------------------------------------------------- index helpers

def test_index_helpers():
    assert fj.s_[1:3, ::2] == np.s_[1:3, ::2] and fj.index_exp[2] == np.index_exp[2]
    _same(fj.mgrid[0:2, 0:3], np.mgrid[0:2, 0:3])
    _same(fj.mgrid[-1:1:5j], np.mgrid[-1:1:5j])
    for got, want in zip(fj.ogrid[0:3, 1:4:2], np.ogrid[0:3, 1:4:2]):
        _same(got, want)
    rows, cols = np.array([0, 2]), np.array([3, 1, 0])
    want = Y[np.ix_(rows, cols)]
    _same(Y[fj.ix_(rows, cols)], want)
    _same(fj.function(lambda y, r, c: y[fj.ix_(r, c)])(Y, rows, cols), want)
    _same(Y[fj.ix_([True, False, True], cols)], Y[np.ix_([True, False, True], cols)])
    with pytest.raises(FlowjitTypeError, match="ix_ with a traced boolean"):
        fj.function(lambda y: fj.ix_(y[:, 0] > 0))(Y)
    with pytest.raises(FlowjitTypeError, match=r"mgrid\[...\] with a traced bound"):
        fj.function(lambda n: fj.mgrid[0:n])(np.int64(3))


def test_matvec_vecmat():
    u = RNG.standard_normal(3)
    _same(fj.matvec(A3, V), np.matvec(A3, V), exact=False)
    _same(fj.function(fj.matvec)(A3, V), np.matvec(A3, V), exact=False)
    _same(fj.function(fj.vecmat)(u, A3), np.vecmat(u, A3), exact=False)
    u3 = RNG.standard_normal((3, 1, 3))
    _same(fj.function(fj.vecmat)(u3, A3), np.vecmat(u3, A3), exact=False)
    z = u + 1j * u[::-1]
    _same(fj.vecmat(z, A3), np.vecmat(z, A3), exact=False)
    with pytest.raises(ShapeError, match=r"matvec: x1 must be \(\.\.\., m, n\)"):
        fj.matvec(A3, u)


def test_predicates():
    assert fj.broadcast_shapes((2, 1), (3,), ()) == np.broadcast_shapes((2, 1), (3,), ()) == (2, 3)
    with pytest.raises(ShapeError, match="broadcast_shapes"):
        fj.broadcast_shapes((2,), (3,))
    for t1, t2 in [(np.int32, np.float32), ("i1", "u1"), (fj.int32, fj.float16), (np.bool_, np.int8)]:
        assert fj.promote_types(t1, t2) == np.promote_types(getattr(t1, "np", t1), getattr(t2, "np", t2))
    assert fj.issubdtype(fj.float32, np.floating) and not fj.issubdtype(np.int8, np.floating)
    assert fj.issubdtype(np.uint8, np.integer)
    for v in (3, 2.5, np.float32(1), "s", np.array(1.0), [1], None):
        assert fj.isscalar(v) == np.isscalar(v)
        assert fj.iterable(v) == np.iterable(v)

    def traced(x):
        assert not fj.isscalar(x) and fj.iterable(x) and not fj.iterable(x[0])
        return x

    fj.function(traced)(V)


def test_bitwise_count():
    cases = [np.array([0, 1, -1, 7, 255, -128, 2 ** 40, -(2 ** 63)], np.int64),
             np.array([-128, -1, 127, 3], np.int8), np.array([0, 65535, 4097], np.uint16),
             np.array([2 ** 64 - 1, 12345678901234], np.uint64), np.array([True, False])]
    for x in cases:
        want = np.bitwise_count(x)
        _same(fj.bitwise_count(x), want)
        _same(fj.function(fj.bitwise_count)(x), want)
        _same(fj.function(lambda x: np.bitwise_count(x))(x), want)
    with pytest.raises(FlowjitTypeError, match="bitwise_count: x must hold integers"):
        fj.bitwise_count(np.ones(2))


def test_unwrap():
    phase = np.cumsum(RNG.uniform(-3.5, 3.5, (2, 12)), axis=1)
    for kwargs in ({}, {"axis": 0}, {"period": 4.0}, {"discont": 4.0}, {"discont": 1.0, "period": 3.0}):
        want = np.unwrap(phase, **kwargs)
        _same(fj.unwrap(phase, **kwargs), want, exact=False)
        _same(fj.function(lambda p, kw=kwargs: fj.unwrap(p, **kw))(phase), want, exact=False)
    ints = np.array([0, 5, 9, 2, 14, 3, 8])
    for period in (6, 7):
        _same(fj.function(lambda p, period=period: fj.unwrap(p, period=period))(ints), np.unwrap(ints, period=period))


# ----------------------------------------------------------------------------- vectorize, apply_along_axis

def test_vectorize():
    scaled = fj.vectorize(lambda a, b: fj.where(a > b, a - b, a * b))
    _same(fj.function(scaled)(Y, V), np.where(Y > V, Y - V, Y * V), exact=False)
    _same(scaled(Y, 2.0), np.where(Y > 2.0, Y - 2.0, Y * 2.0), exact=False)

    @fj.vectorize
    def clipped(a):
        return fj.minimum(a, 0.5)

    _same(fj.function(clipped)(A3), np.minimum(A3, 0.5), exact=False)
    dot = fj.vectorize(lambda a, b: fj.sum(a * b), signature="(n),(n)->()")
    _same(fj.function(dot)(A3, V), A3 @ V, exact=False)
    stats = fj.vectorize(lambda a: (fj.mean(a), a - fj.mean(a)), signature="(n)->(),(n)")
    mean, centred = fj.function(stats)(Y)
    _same(mean, Y.mean(-1), exact=False)
    _same(centred, Y - Y.mean(-1, keepdims=True), exact=False)
    power = fj.vectorize(lambda a, p: a ** p, excluded={1})
    _same(fj.function(lambda y: power(y, 3))(Y), Y ** 3, exact=False)
    with pytest.raises(ShapeError, match="core dimension 'n' is 4 in one argument and 3"):
        dot(Y, V[:3])
    with pytest.raises(ValueError, match="not a gufunc signature"):
        fj.vectorize(lambda a: a, signature="(n->()")


def test_vectorize_outside_a_trace_traces_once_per_signature():
    calls = []

    def scaled(a, b):
        calls.append(1)
        return fj.where(a > b, a - b, a * b)

    vec = fj.vectorize(scaled)
    for _ in range(3):
        _same(vec(Y, V), np.where(Y > V, Y - V, Y * V), exact=False)
    assert len(calls) == 1
    vec(Y[:2], V)  # a new shape is a new signature
    assert len(calls) == 2

    power = fj.vectorize(lambda a, p: (calls.append(1), a ** p)[1], excluded={1})
    calls.clear()
    for p in (3, 3, 2, 3):
        _same(power(Y, p), Y ** p, exact=False)
    assert len(calls) == 2  # one trace per excluded value
    # An excluded argument that cannot be hashed is passed through, traced each call.
    weights = fj.vectorize(lambda a, w: a * w[0] + w[1], excluded={"w"})
    _same(weights(Y, w=[2.0, 1.0]), Y * 2.0 + 1.0, exact=False)


def test_apply_along_axis():
    for axis in (0, 1, -1):
        want = np.apply_along_axis(lambda r: np.cumsum(r) * 2, axis, A3)
        _same(fj.function(lambda a, axis=axis: fj.apply_along_axis(lambda r: fj.cumsum(r) * 2, axis, a))(A3), want,
              exact=False)
        want = np.apply_along_axis(lambda r: np.outer(r, r[:2]), axis, A3)
        _same(fj.apply_along_axis(lambda r: fj.outer(r, r[:2]), axis, A3), want, exact=False)
    _same(fj.apply_along_axis(fj.sum, 1, Y), Y.sum(1), exact=False)
    _same(fj.apply_along_axis(lambda r, s: r * s, 0, V, 3.0), V * 3.0, exact=False)


# ----------------------------------------------------------------------------- gradients against JAX

def test_gradients_match_jax(jax):
    jnp = jax.numpy
    idx = np.array([[0, 2], [3, 3], [1, 0]])
    a = np.array([[0, 1, 2, 1], [2, 0, 1, 0], [1, 1, 0, 2]])
    cond = np.array([True, False, True, True])
    phase = np.cumsum(RNG.uniform(-3.5, 3.5, 10))
    xs = np.linspace(-2.3, 2.1, 9)
    w = RNG.standard_normal((3, 4))
    cases = [
        (lambda m, y: m.sum(m.compress(cond, y, axis=1) ** 2), Y),
        (lambda m, y: m.sum(m.choose(a, [y, 2 * y, m.sin(y)], mode="clip") * w), Y),
        (lambda m, y: m.sum(m.put_along_axis(y, idx, y[:, :2] ** 2, 1, inplace=False) * w), Y),
        (lambda m, x: m.sum(m.piecewise(x, [x < -1, x > 1], [lambda v: v ** 3, lambda v: m.sin(v), 0.5]) * x), xs),
        (lambda m, p: m.sum(m.unwrap(p) * m.arange(10.0)), phase),
        (lambda m, y: m.sum(m.apply_along_axis(lambda r: m.cumsum(r) * r, 1, y) * w), Y),
    ]
    for k, (fn, x) in enumerate(cases):
        want = jax.grad(lambda x, fn=fn: fn(jnp, x))(x)
        got = fj.grad(lambda x, fn=fn: fn(fj, x))(x)
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12, err_msg=f"case {k}")
    # and compiled, inside fj.function
    got = fj.function(lambda y, c: fj.grad(lambda y: fj.sum(fj.compress(c, y, axis=1, size=2) ** 2))(y))(Y, cond)
    want = np.zeros_like(Y)
    want[:, np.flatnonzero(cond)[:2]] = 2 * Y[:, np.flatnonzero(cond)[:2]]
    np.testing.assert_allclose(got, want)


def test_numpys_other_dtype_names_and_its_hierarchy():
    names = {"single": np.float32, "double": np.float64, "half": np.float16, "csingle": np.complex64,
             "cdouble": np.complex128, "int_": np.int64, "uint": np.uint64, "float_": np.float64,
             "complex_": np.complex128}
    x = np.arange(3)
    for name, want in names.items():
        assert fj.zeros(2, getattr(fj, name)).dtype == want, name
        assert fj.function(lambda a, d=getattr(fj, name): a.astype(d))(x).dtype == want, name
    for name in ("generic", "number", "integer", "signedinteger", "unsignedinteger", "inexact", "floating",
                 "complexfloating", "character", "flexible"):
        assert getattr(fj, name) is getattr(np, name)
    assert fj.issubdtype(fj.float32, fj.floating) and not fj.issubdtype(fj.int_, fj.floating)
    assert fj.issubdtype(fj.uint, fj.unsignedinteger) and fj.issubdtype(fj.csingle, fj.inexact)
