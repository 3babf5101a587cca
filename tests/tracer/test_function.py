"""``@fj.function``: tracing once per signature, pytrees, static arguments, nesting,
retrace logging, inspection, and the errors users meet."""

from __future__ import annotations

import collections

import numpy as np
import pytest

import flowjit as fj
from flowjit.ir import Function, parse


def f32(*shape):
    return np.arange(np.prod(shape), dtype=np.float32).reshape(shape) / 7


# ---- trace counting ------------------------------------------------------------------------

def test_same_signature_traces_once():
    @fj.function
    def f(x, y):
        return x * y + 1.0

    for _ in range(3):
        f(f32(2, 3), f32(2, 3))
    f(f32(2, 3) + 5, f32(2, 3) * 2)  # new values, same signature
    assert f.trace_count == 1


@pytest.mark.parametrize("second", [
    (f32(4, 3), f32(2, 3)[0]),                      # new shape
    (f32(2, 3).astype(np.float64), f32(2, 3)[0]),   # new dtype
])
def test_new_shape_or_dtype_retraces(second):
    @fj.function
    def f(x, y):
        return x + y

    f(f32(2, 3), f32(3))
    f(*second)
    assert f.trace_count == 2
    f(*second)
    assert f.trace_count == 2


def test_python_scalars_are_weak_dynamic_values():
    @fj.function
    def f(x, s):
        return x * s

    a = f(f32(2), 2.0)
    b = f(f32(2), 3.5)   # a new value of a Python float does not retrace
    assert f.trace_count == 1
    assert a.dtype == np.float32 and b.dtype == np.float32
    np.testing.assert_allclose(b, f32(2) * 3.5)
    f(f32(2), 3)         # a Python int is another signature
    assert f.trace_count == 2
    f(f32(2), np.float64(2.0))  # a NumPy scalar is strong: another signature, result f64
    assert f.trace_count == 3
    assert f(f32(2), np.float64(2.0)).dtype == np.float64


def test_static_values_retrace_and_pick_code():
    @fj.function(static_argnames="n")
    def power(x, n):
        out = x
        for _ in range(n - 1):
            out = out * x
        return out

    np.testing.assert_allclose(power(f32(3), n=3), f32(3) ** 3, rtol=1e-6)
    np.testing.assert_allclose(power(f32(3), n=3), f32(3) ** 3, rtol=1e-6)
    assert power.trace_count == 1
    power(f32(3), n=2)
    assert power.trace_count == 2


def test_static_argnums_and_positional_or_keyword_are_one_signature():
    @fj.function(static_argnums=1)
    def f(x, mode):
        return fj.tanh(x) if mode == "tanh" else fj.exp(x)

    np.testing.assert_allclose(f(f32(3), "tanh"), np.tanh(f32(3)), rtol=1e-6)
    f(f32(3), mode="tanh")
    assert f.trace_count == 1
    np.testing.assert_allclose(f(f32(3), "exp"), np.exp(f32(3)), rtol=1e-6)
    assert f.trace_count == 2


def test_pytree_structure_retraces():
    @fj.function
    def f(params):
        return sum(fj.sum(v) for v in params.values())

    f({"w": f32(2), "b": f32(1)})
    f({"w": f32(2), "b": f32(1)})
    assert f.trace_count == 1
    f({"w": f32(2), "b": f32(1), "c": f32(1)})
    assert f.trace_count == 2
    f([f32(2)] and {"w": f32(2), "b": f32(1)})
    assert f.trace_count == 2


def test_a_pytree_of_arrays_seen_before_skips_binding_and_leaf_names(monkeypatch):
    # A model's parameter dict: the second call is keyed by structure, shapes and dtypes
    # alone (a dict in any insertion order, nested lists, tuples and None), not bound to the
    # signature with each leaf's path; a new shape, dtype or structure, a Python number or a
    # dict of another type takes the full path and traces as before.
    @fj.function
    def f(p, xs):
        return {"y": p["w"] * xs[0] + p["b"], "n": fj.sum(xs[1][0])}

    p, xs = {"w": f32(3), "b": f32(3) + 1}, (f32(3), [f32(2, 2), None])
    want = f(p, xs)
    lookups = []
    full = f._lookup
    monkeypatch.setattr(f, "_lookup", lambda *a: lookups.append(a) or full(*a))
    for args in ((p, xs), ({"b": p["b"], "w": p["w"]}, xs)):
        got = f(*args)
        np.testing.assert_array_equal(got["y"], want["y"])
        np.testing.assert_array_equal(got["n"], want["n"])
    assert lookups == [] and f.trace_count == 1
    got = f({"w": p["w"], "b": 2.0}, xs)                      # a Python number: weak, full path
    np.testing.assert_allclose(got["y"], p["w"] * xs[0] + 2.0)
    f(collections.OrderedDict(p), xs)                         # another mapping type
    f({"w": f32(4), "b": f32(4)}, (f32(4), [f32(2, 2), None]))  # another shape
    f({"w": p["w"].astype(np.float64), "b": p["b"]}, xs)        # another dtype
    assert len(lookups) == 4 and f.trace_count == 4, (len(lookups), f.trace_count)
    lookups.clear()
    f({"w": f32(4), "b": f32(4)}, (f32(4), [f32(2, 2), None]))
    assert lookups == [] and f.trace_count == 4


def test_pytrees_in_and_out():
    Pair = collections.namedtuple("Pair", "a b")

    @fj.function
    def f(tree):
        x, (y, z) = tree["xs"][0], tree["pair"]
        return {"sum": x + y, "pair": Pair(z * 2, None), "list": [x, y]}

    out = f({"xs": [f32(2), f32(2)], "pair": Pair(f32(2), f32(2) + 1)})
    assert set(out) == {"sum", "pair", "list"}
    assert isinstance(out["pair"], Pair) and out["pair"].b is None
    np.testing.assert_allclose(out["pair"].a, (f32(2) + 1) * 2)
    assert isinstance(out["list"], list) and len(out["list"]) == 2


def test_outputs_do_not_alias_inputs_or_constants():
    @fj.function
    def f(x):
        return x, np.ones(3, np.float32)

    x = f32(3)
    a, c = f(x)
    assert a is not x and not np.shares_memory(a, x)
    a[0] = 100.0
    c[0] = 100.0  # writable
    assert x[0] == 0.0
    assert f(x)[1][0] == 1.0


def test_nested_functions_inline_and_non_traced_results():
    @fj.function
    def inner(x):
        return fj.exp(x) - 1.0

    @fj.function
    def outer(x):
        return inner(x) * 2.0

    eager = np.exp(f32(3))  # a non-traced function's result as the argument
    np.testing.assert_allclose(outer(eager), (np.exp(eager) - 1) * 2, rtol=1e-6)
    assert inner.trace_count == 0  # inlined into outer's trace
    assert [op.name for op in outer.ir(eager).walk()].count("exp") == 1
    np.testing.assert_allclose(inner(eager), np.exp(eager) - 1, rtol=1e-6)
    assert inner.trace_count == 1


def test_retrace_log_says_why(monkeypatch, capsys):
    monkeypatch.setenv("FLOWJIT_LOG", "retrace")

    @fj.function(static_argnames="k")
    def f(x, k=1):
        return x * k

    f(f32(2, 3), k=1)
    assert capsys.readouterr().err == ""
    f(f32(4, 3), k=1)
    err = capsys.readouterr().err
    assert "retracing f" in err and "'x'" in err and "f32[2,3] -> f32[4,3]" in err
    f(f32(4, 3), k=2)
    err = capsys.readouterr().err
    assert "static argument 'k' changed: 1 -> 2" in err


def test_ir_returns_function_with_user_lines():
    @fj.function
    def f(x, w):
        h = x @ w  # LINE-MATMUL
        return fj.tanh(h)

    fn = f.ir(fj.ShapeDtype((2, 3), "float32"), fj.ShapeDtype((3, 4), fj.float32))
    assert isinstance(fn, Function)
    text = str(fn)
    line = next(i for i, s in enumerate(open(__file__).read().splitlines(), 1) if "LINE-MATMUL" in s
                and "h = x" in s)
    assert "matmul %x, %w : f32[2,4]" in text and f"test_function.py:{line}" in text
    assert str(parse(text)) == text
    with pytest.raises(ValueError, match="unknown stage"):
        f.ir(f32(2, 3), f32(3, 4), stage="nonsense")


def test_interpret_flag_and_env(monkeypatch):
    monkeypatch.setenv("FLOWJIT_INTERPRET", "1")
    f = fj.function(lambda x: x + 1)
    np.testing.assert_allclose(f(f32(2)), f32(2) + 1)
    g = fj.function(lambda x: x + 1, interpret=True)
    np.testing.assert_allclose(g(f32(2)), f32(2) + 1)


# ---- errors ---------------------------------------------------------------------------------

def test_python_control_flow_on_traced_value_names_line_and_fix():
    @fj.function
    def f(x):
        if x.sum() > 0:  # LINE-IF
            return x
        return -x

    with pytest.raises(fj.TracerError) as e:
        f(f32(3))
    line = next(i for i, s in enumerate(open(__file__).read().splitlines(), 1) if "LINE-IF" in s and "if x" in s)
    msg = str(e.value)
    assert f"test_function.py:{line}" in msg and "fj.cond" in msg and "fj.where" in msg


@pytest.mark.parametrize("conv", [bool, int, float])
def test_concrete_conversions_of_tracers_fail_clearly(conv):
    f = fj.function(lambda x: conv(x))
    with pytest.raises(fj.TracerError, match="not known while tracing"):
        f(np.float32(1.0))


def test_len_of_traced_dim_is_fine():
    f = fj.function(lambda x: x * len(x))
    np.testing.assert_allclose(f(f32(4, 2)), f32(4, 2) * 4)


def test_shape_error_names_primitive_shapes_and_line():
    @fj.function
    def f(a, b):
        return a @ b  # LINE-BAD-MATMUL

    with pytest.raises(fj.ShapeError) as e:
        f(f32(2, 3), f32(4, 5))
    line = next(i for i, s in enumerate(open(__file__).read().splitlines(), 1)
                if "LINE-BAD-MATMUL" in s and "return a" in s)
    msg = str(e.value)
    assert "matmul" in msg and "f32[2,3]" in msg and "f32[4,5]" in msg and f"test_function.py:{line}" in msg


def test_broadcast_error_names_both_shapes():
    f = fj.function(lambda a, b: a + b)
    with pytest.raises(fj.ShapeError, match=r"add.*\[2, 3\].*\[4\]"):
        f(f32(2, 3), f32(4))


@pytest.mark.parametrize("bad, what", [
    ("hello", "str"),
    (np.array([1, "a"], dtype=object), "object array"),
    (np.zeros(3, np.longdouble), "float128"),
    (object(), "object"),
])
def test_unsupported_argument_types_name_the_argument(bad, what):
    f = fj.function(lambda x, scale: x * 2)
    with pytest.raises(TypeError) as e:
        f(f32(2), bad)
    assert "'scale'" in str(e.value) and what in str(e.value)


def test_ragged_list_is_a_type_error_naming_the_argument():
    with pytest.raises(TypeError, match="ragged"):
        fj.sum([[1.0, 2.0], [3.0]])
    f = fj.function(lambda x: fj.asarray(x["rows"]))
    with pytest.raises(TypeError, match="ragged"):
        f({"rows": [[1.0, 2.0], [3.0]]})


def test_unhashable_static_argument():
    f = fj.function(lambda x, cfg: x, static_argnames="cfg")
    with pytest.raises(TypeError, match="'cfg'.*hashable"):
        f(f32(2), {"a": 1})


def test_escaped_tracer():
    leaked = []

    @fj.function
    def f(x):
        leaked.append(x)
        return x

    f(f32(2))
    with pytest.raises(fj.TracerError, match="escaped"):
        fj.exp(leaked[0])


def test_bad_static_argnames():
    with pytest.raises(TypeError, match="no parameter 'y'"):
        fj.function(lambda x: x, static_argnames="y")
