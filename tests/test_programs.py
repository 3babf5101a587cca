"""Property test: random programs built from the registry are traced, printed, parsed back
and interpreted; the results equal a direct NumPy evaluation of the same program, and the
parsed program prints to the same text."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import flowjit as fj
from flowjit.ir import interpret, parse, print_function, verify
from flowjit.ir.dtypes import dtype as as_dtype
from flowjit.ir.registry import all_primitives
from flowjit.ir.types import TensorType
from flowjit.tracer.core import bind
from tests.random_programs import broadcastable
from tests.registry.test_generic import NUMPY_EQUIVALENT

DTYPES = {"f32": np.float32, "f64": np.float64, "i32": np.int32, "i64": np.int64}
SHAPES = [(3, 4), (2, 3, 4), (4,), (4, 4)]


def nested_pads(depth: int):
    """A program padding its input ``depth`` times, each pad reading the last: every read
    is a clamp of a clamp, the shape that once grew kernel source as 3**depth."""
    def f(x):
        for _ in range(depth):
            x = fj.pad(x, ((1, 0), (0, 1))) * 2
        return x
    return f


# Reductions that reduce nothing, with the shape and dtype of their input: of a 0-d value,
# over no axes, keeping dims, next to other outputs of one kernel, and in gradients.
ZERO_D_REDUCTIONS: dict[str, tuple] = {
    "sum of a 0-d value": (lambda x: (x / 100.0).sum(), ((), np.float32)),
    "sum keepdims of a 0-d value": (lambda x: x.sum(keepdims=True), ((), np.float32)),
    "mean of a 0-d value": (lambda x: fj.mean(x * 2), ((), np.float32)),
    "sum over no axes of a 0-d value": (lambda x: fj.sum(x * 2, axis=()), ((), np.float32)),
    "sum over no axes": (lambda x: fj.sum(x * 2, axis=()), ((3, 4), np.float32)),
    "max over no axes": (lambda x: fj.max(x - 1, axis=()), ((3, 4), np.float64)),
    "sum over no axes, int": (lambda x: fj.sum(x * 2, axis=()), ((3, 4), np.int32)),
    "prod of a 0-d value": (lambda x: fj.prod(x * 2), ((), np.float32)),
    "argmax of a 0-d value": (lambda x: fj.argmax(x * 2), ((), np.float32)),
    "fused with other outputs": (lambda x: (x * 3, (x * 2).sum(), fj.mean(x + 1, keepdims=True)),
                                 ((), np.float32)),
    "gradient of a 0-d mean": (fj.grad(lambda x: fj.mean(fj.tanh(x) * x)), ((), np.float32)),
    "gradient of a 0-d sum, float64": (fj.grad(lambda x: (x * x / 3.0).sum()), ((), np.float64)),
}


def zero_d_input(name: str) -> np.ndarray:
    """The input of ``ZERO_D_REDUCTIONS[name]``: fixed random values of its shape and dtype."""
    _, (shape, dtype) = ZERO_D_REDUCTIONS[name]
    return (np.random.default_rng(3).standard_normal(shape) * 4).astype(dtype)


def _keeps_the_pool_dtype(p, short: str) -> bool:
    # The pool holds one dtype (comparisons come back through a select): complex(re, im)
    # of two floats makes a complex, which the pool's other ops do not take.
    (out,) = p.infer([TensorType((), as_dtype(short))] * p.arity, {})
    return out.dtype.short in (short, "bool")


def _elementwise(short: str, arity: int):
    # NumPy raises for an integer to a negative power, where flowjit defines a result
    # (tested in tests/registry), so integer programs leave pow out.
    return [p for p in all_primitives()
            if p.kind == "elementwise" and p.arity == arity and p.name in NUMPY_EQUIVALENT
            and any(d.short == short for d in p.dtypes) and _keeps_the_pool_dtype(p, short)
            and not (short.startswith("i") and p.domain == "pow")]


@st.composite
def programs(draw):
    """A program as a list of steps over a value pool; inputs are the first values."""
    short = draw(st.sampled_from(sorted(DTYPES)))
    base = draw(st.sampled_from(SHAPES))
    n_in = draw(st.integers(1, 3))
    in_shapes = [draw(st.sampled_from([base, base[-1:], (), base])) for _ in range(n_in)]
    shapes = list(in_shapes)
    steps = []
    unary, binary = _elementwise(short, 1), _elementwise(short, 2)
    for _ in range(draw(st.integers(1, 12))):
        kind = draw(st.sampled_from(["unary", "binary", "binary", "reduce", "layout", "matmul"]))
        i = draw(st.integers(0, len(shapes) - 1))
        s = shapes[i]
        if kind == "unary" and unary:
            p = draw(st.sampled_from(unary))
            steps.append(("prim", p.name, (i,)))
            shapes.append(s)
        elif kind == "binary" and binary:
            p = draw(st.sampled_from(binary))
            partners = [j for j, t in enumerate(shapes) if broadcastable(s, t)]
            j = draw(st.sampled_from(partners))
            steps.append(("prim", p.name, (i, j)))
            shapes.append(tuple(np.broadcast_shapes(s, shapes[j])))
        elif kind == "reduce" and s:
            axis = draw(st.integers(-len(s), len(s) - 1))
            op = draw(st.sampled_from(["sum", "max", "min"]))
            steps.append((op, axis, (i,)))
            shapes.append(s[:axis % len(s)] + (1,) + s[axis % len(s) + 1:])
        elif kind == "layout" and len(s) >= 2:
            steps.append(("transpose", None, (i,)))
            shapes.append(s[::-1])
        elif kind == "matmul" and len(s) >= 2:
            steps.append(("gram", None, (i,)))
            shapes.append(s[:-2] + (s[-2], s[-2]))
    n_out = draw(st.integers(1, 2))
    return short, in_shapes, steps, n_out


def program_inputs(short: str, in_shapes, seed: int) -> list[np.ndarray]:
    """The inputs of a drawn program (``programs()``): normal floats, or small integers."""
    rng = np.random.default_rng(seed)
    npd = DTYPES[short]
    if short.startswith("f"):
        return [rng.standard_normal(s).astype(npd) for s in in_shapes]
    return [rng.integers(-5, 6, size=s).astype(npd) for s in in_shapes]


def _is_bool(x) -> bool:
    return fj.shape(x) is not None and str(getattr(x, "dtype", "")) in ("bool",)


def run_program(steps, inputs, n_out, traced: bool):
    """Evaluate the steps with flowjit primitives (traced=True) or plain NumPy."""
    vals = list(inputs)
    for kind, arg, idx in steps:
        xs = [vals[i] for i in idx]
        if kind == "prim":
            if traced:
                r = bind(arg, xs)
                # Comparisons give bool; keep the pool in one dtype with a select.
                if r.dtype == fj.bool_:
                    r = fj.where(r, xs[0], xs[-1])
            else:
                with np.errstate(all="ignore"):
                    r = NUMPY_EQUIVALENT[arg](*xs)
                if r.dtype == np.bool_:
                    r = np.where(r, xs[0], xs[-1])
                r = np.asarray(r).astype(np.result_type(*xs), copy=False)
                if len(xs) == 2:
                    r = np.broadcast_to(r, np.broadcast_shapes(xs[0].shape, xs[1].shape))
        elif kind in ("sum", "max", "min"):
            x = xs[0]
            if traced:
                r = {"sum": lambda: fj.sum(x, axis=arg, keepdims=True, dtype=x.dtype),
                     "max": lambda: fj.max(x, axis=arg, keepdims=True),
                     "min": lambda: fj.min(x, axis=arg, keepdims=True)}[kind]()
            else:
                r = {"sum": lambda: np.sum(x, axis=arg, keepdims=True, dtype=x.dtype),
                     "max": lambda: np.max(x, axis=arg, keepdims=True),
                     "min": lambda: np.min(x, axis=arg, keepdims=True)}[kind]()
        elif kind == "transpose":
            r = xs[0].T
        else:  # gram matrix x @ swapaxes(x)
            r = fj.matmul(xs[0], fj.swapaxes(xs[0], -1, -2)) if traced else xs[0] @ np.swapaxes(xs[0], -1, -2)
        vals.append(r)
    return tuple(vals[-n_out:])


@settings(max_examples=120, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(programs(), st.integers(0, 2**31 - 1))
def test_random_programs_round_trip_and_match_numpy(program, seed):
    short, in_shapes, steps, n_out = program
    inputs = program_inputs(short, in_shapes, seed)

    # The optimized program on the interpreter must equal the traced one exactly; compiled
    # kernels are compared with per-dtype tolerances in tests/codegen_cpu/test_kernels.py.
    f = fj.function(lambda *xs: run_program(steps, xs, n_out, traced=True), backend="interpreter")
    fn = f.ir(*inputs)
    verify(fn)
    text = print_function(fn)
    parsed = parse(text)
    verify(parsed)
    assert print_function(parsed) == text

    got = interpret(parsed, inputs)
    expected = run_program(steps, inputs, n_out, traced=False)
    direct = f(*inputs)
    for g, d, e in zip(got, direct, expected):
        e = np.asarray(e)
        assert g.shape == e.shape and g.dtype == e.dtype, (g.shape, g.dtype, e.shape, e.dtype)
        np.testing.assert_array_equal(g, d)
        if short.startswith("f"):
            tol = 1e-5 if short == "f32" else 1e-12
            np.testing.assert_allclose(g, e, rtol=tol, atol=tol, equal_nan=True)
        else:
            np.testing.assert_array_equal(g, e)


DEVICES = ("cpu:0", "cpu:1", "cpu:2", "cpu:3")


def _placed_randomly(fn, rng):
    """A copy of traced ``fn`` with a random device (or none: placement chooses) per op."""
    placed = fn.clone()
    for op in placed.body.ops:
        op.device = rng.choice([*DEVICES, None])
    return placed


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(programs(), st.integers(0, 2**31 - 1))
def test_random_programs_placed_randomly_on_four_devices_match_unpartitioned(program, seed):
    # Random manual placements over 4 virtual CPU devices: the partitioned program (run
    # by the multi-device executor, one thread per device, on the NumPy interpreter)
    # computes exactly what the unpartitioned one does, and its text round-trips.
    import os

    from flowjit.runtime.dispatch import compile_function
    from flowjit.runtime.multi_device import MultiDeviceExecutable

    short, in_shapes, steps, n_out = program
    rng = np.random.default_rng(seed)
    npd = DTYPES[short]
    inputs = [(rng.standard_normal(s) * 3).astype(npd) for s in in_shapes]
    traced = fj.function(lambda *xs: run_program(steps, xs, n_out, traced=True), backend="interpreter").ir(*inputs)
    want = compile_function(traced, backend="interpreter").run(*inputs)
    saved = os.environ.get("FLOWJIT_CPU_DEVICES")
    os.environ["FLOWJIT_CPU_DEVICES"] = "4"
    try:
        exe = compile_function(_placed_randomly(traced, rng), backend="interpreter")
        got = exe.run(*inputs)
    finally:
        if saved is None:
            del os.environ["FLOWJIT_CPU_DEVICES"]
        else:
            os.environ["FLOWJIT_CPU_DEVICES"] = saved
    if isinstance(exe, MultiDeviceExecutable):
        text = print_function(exe.function)
        assert print_function(parse(text)) == text
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)
