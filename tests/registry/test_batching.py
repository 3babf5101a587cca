"""Every batching rule (flowjit/ir/batching.py) against running the op once per example.

For each registry case whose primitive has a rule, each operand batched alone and all of
them batched together (B=3, the batch being 3 random draws of the operand stacked): the
rule's IR, run by the interpreter, must equal the 3 unbatched runs stacked.
"""

from __future__ import annotations

import numpy as np
import pytest

from flowjit.ir import interpret, new_function, verify
from flowjit.ir.batching import UNBATCHABLE_KINDS, batch_op, batch_rule
from flowjit.ir.builder import Emitter
from flowjit.ir.errors import BatchingError
from flowjit.ir.registry import all_primitives, get
from flowjit.ir.types import TensorType
from tests.registry.test_generic import ALL_CASES, _domain_inputs, _tolerance

B = 3
# Operands a rule refuses to batch, raising BatchingError (none now: a batched conv2d
# filter folds into the convolution's groups).
REFUSED_OPERAND: dict[str, int] = {}


def _batchable(case) -> bool:
    return bool(case.inputs) and batch_rule(get(case.prim)) is not None


def _subsets(n: int) -> list[tuple[bool, ...]]:
    alone = [tuple(i == j for j in range(n)) for i in range(n)]
    return alone + ([(True,) * n] if n > 1 else [])


def _draw(case, rng):
    arrays = case.make_inputs(rng)
    return _domain_inputs(get(case.prim), arrays) if get(case.prim).kind == "elementwise" else arrays


def _run(prim, arrays, attrs):
    types = [TensorType(a.shape, a.dtype) for a in arrays]
    fn, b = new_function(prim.name, types, [f"x{i}" for i in range(len(types))])
    fn.body.set_returns(b.emit(prim, fn.args, attrs))
    return interpret(fn, arrays)


def _run_batched(prim, arrays, batched, attrs):
    types = [TensorType(a.shape, a.dtype) for a in arrays]
    fn, b = new_function(prim.name + "_batched", types, [f"x{i}" for i in range(len(types))])
    outs, out_batched = batch_op(Emitter(b), prim, fn.args, batched, attrs)
    fn.body.set_returns(outs)
    verify(fn)
    return interpret(fn, arrays), out_batched


CASES = [c for c in ALL_CASES if _batchable(c)]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id or c.prim)
def test_rule_equals_stacked_runs(case):
    prim = get(case.prim)
    rng = np.random.default_rng(case.seed)
    draws = [_draw(case, rng) for _ in range(B)]
    with np.errstate(all="ignore"):
        for batched in _subsets(len(case.inputs)):
            per_example = [[d[i] if batched[i] else draws[0][i] for i in range(len(batched))] for d in draws]
            expected = [np.stack(ys) for ys in zip(*(_run(prim, xs, case.attrs) for xs in per_example))]
            ins = [np.stack([d[i] for d in draws]) if f else draws[0][i] for i, f in enumerate(batched)]
            if case.prim in REFUSED_OPERAND and batched[REFUSED_OPERAND[case.prim]]:
                with pytest.raises(BatchingError, match=case.prim):
                    _run_batched(prim, ins, batched, case.attrs)
                continue
            got, out_batched = _run_batched(prim, ins, batched, case.attrs)
            for g, ob, want in zip(got, out_batched, expected):
                g = g if ob else np.broadcast_to(g, (B, *g.shape))
                assert g.shape == want.shape and g.dtype == want.dtype, (batched, g.shape, want.shape)
                if g.dtype.kind in "fc":
                    np.testing.assert_allclose(g, want, equal_nan=True, err_msg=str(batched),
                                               **_tolerance(g.dtype))
                else:
                    np.testing.assert_array_equal(g, want, err_msg=str(batched))


def test_every_primitive_has_a_rule_or_a_declared_error():
    # A primitive without a rule must be one of the kinds the batching layer declares
    # unbatchable (each with its advice); anything else is a rule forgotten.
    missing = [p.name for p in all_primitives() if batch_rule(p) is None and p.kind not in UNBATCHABLE_KINDS]
    assert not missing, f"primitives with neither a batching rule nor a declared error: {missing}"


@pytest.mark.parametrize("name", [p.name for p in all_primitives() if p.kind in UNBATCHABLE_KINDS
                                  and not p.num_blocks and p.arity])
def test_unbatchable_ops_raise_naming_the_op(name):
    prim = get(name)
    case = next(c for c in ALL_CASES if c.prim == name) if any(c.prim == name for c in ALL_CASES) else None
    types = ([TensorType((B, *np.shape(a)), np.asarray(a).dtype) for a in case.make_inputs(np.random.default_rng(0))]
             if case else [TensorType((B, 4), np.float32)])
    fn, b = new_function(name, types, [f"x{i}" for i in range(len(types))])
    with pytest.raises(BatchingError, match=rf"^{name}: not supported under fj.vmap.*batched"):
        batch_op(Emitter(b), prim, fn.args, [True] * len(types), case.attrs if case else {})


@pytest.mark.parametrize("groups", [1, 2])
def test_an_ensemble_of_filters_under_vmap_is_one_grouped_convolution(groups):
    # A batch of filters (each ensemble member its own), with and without a batched input:
    # each member's result and its gradient are its own convolution's.
    import flowjit as fj
    rng = np.random.default_rng(3)
    x = rng.standard_normal((B, 2, 6, 5, 4)).astype(np.float32)
    w = rng.standard_normal((B, 3, 3, 4 // groups, 6)).astype(np.float32)

    def conv(x, w):
        return fj.conv2d(x, w, strides=(2, 1), padding="SAME", groups=groups)

    def loss(w, x):
        return (fj.tanh(conv(x, w)) ** 2).sum()

    both = fj.function(fj.vmap(conv))(x, w)
    shared = fj.function(fj.vmap(conv, in_axes=(None, 0)))(x[0], w)
    grads = fj.function(fj.vmap(fj.grad(loss)))(w, x)
    one, one_grad = fj.function(conv), fj.function(fj.grad(loss))
    for i in range(B):
        np.testing.assert_allclose(np.asarray(both)[i], np.asarray(one(x[i], w[i])), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(np.asarray(shared)[i], np.asarray(one(x[0], w[i])), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(np.asarray(grads)[i], np.asarray(one_grad(w[i], x[i])), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name,attrs", [("constant", {"value": np.arange(3.0)}),
                                        ("iota", {"shape": (2, 3), "dimension": 1, "dtype": "i32"})])
def test_ops_without_operands_stay_unbatched(name, attrs):
    fn, b = new_function(name, [], [])
    outs, out_batched = batch_op(Emitter(b), get(name), [], [], attrs)
    fn.body.set_returns(outs)
    (y,) = interpret(fn, [])
    assert out_batched == [False]
    np.testing.assert_array_equal(y, _run(get(name), [], attrs)[0])


def test_missing_rule_error_names_the_op_operands_and_line():
    fn, b = new_function("f", [TensorType((B, 2), np.uint32)], ["key"])
    with pytest.raises(BatchingError) as info:
        batch_op(Emitter(b), get("random_normal"), fn.args, [True], {"shape": (4,), "dtype": "f32"},
                 loc="model.py:12")
    text = str(info.value)
    assert text.startswith("random_normal: not supported under fj.vmap")
    assert "u32[3,2] (batched)" in text and "split the key" in text and "at model.py:12" in text
