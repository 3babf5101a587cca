"""The pass pipeline: order, stages, switching passes off, dumps, timings, verification."""

from __future__ import annotations

import numpy as np
import pytest

import flowjit as fj
from flowjit.ir import VerifyError
from flowjit.passes.pipeline import DEFAULT_PIPELINE, Pipeline
from flowjit.runtime import STAGES

X = np.arange(6, dtype=np.float32).reshape(2, 3)


def dup(x):
    return fj.exp(x) + fj.exp(x) * 1.0


def test_pipeline_prints_its_order_and_stages_exist():
    assert str(DEFAULT_PIPELINE) == (
        "inline_calls -> fold_shapes -> constant_fold_early -> simplify -> cse -> merge_loops -> constant_fold "
        "-> prune -> inline_remat -> hoist_invariants -> hoist_scanned -> sink_scanned "
        "-> decompose -> sparse_scatter -> placement -> partition -> fusion")
    assert STAGES[0] == "traced" and STAGES[-1] == "fused"


def test_identities_see_what_folds_to_a_constant():
    """constant_fold runs before simplify: the gradient of a square makes ``pow(x, 2 - 1)``
    and a ``select`` on ``2 == 0``, constants only once folded; simplify then removes both,
    and neither reaches the fused kernel (run after it, they stayed there)."""
    def loss(x):
        return (fj.maximum(x, 0.0) ** 2).sum()
    g = fj.function(fj.grad(loss))
    x = np.array([-1.0, 0.0, 0.5, 2.0], np.float32)
    names = [op.name for op in g.ir(x, stage="fused").walk()]
    assert "pow" not in names and "fusion" in names
    constant_predicates = [op for op in g.ir(x, stage="fused").walk() if op.name == "select"
                           and op.inputs[0].producer is not None and op.inputs[0].producer.name == "constant"]
    assert constant_predicates == []
    np.testing.assert_array_equal(g(x), 2 * np.maximum(x, 0))


def _fused_constant_sizes(g, *args):
    return sorted(int(np.prod(op.results[0].type.shape)) for op in g.ir(*args, stage="fused").walk()
                  if op.name == "constant")


def test_a_scalar_broadcast_stays_a_scalar_in_the_kernel():
    """The early fold grows nothing: a mean's gradient broadcasts 1/n, and simplify drops the
    broadcast (the kernel reads a scalar); folded first, it was an array of the input's
    shape that the fused kernel read element by element."""
    x = np.arange(8, dtype=np.float32)
    g = fj.function(fj.grad(lambda x: (x * x).mean()))
    assert max(_fused_constant_sizes(g, x)) == 1
    np.testing.assert_allclose(g(x), 2 * x / 8, rtol=1e-6)


def test_what_simplify_leaves_on_constants_is_folded():
    """``constant_fold`` runs after ``simplify`` too: ``i - i`` of ints is 0 only once
    simplified, and ``exp(0 + 1)`` is then folded with NumPy's exp (NumPy's bits), not left
    for the kernel."""
    i = np.arange(4, dtype=np.int32)
    g = fj.function(lambda i: fj.exp((i - i).astype(np.float32) + np.float32(1.0)))
    names = [op.name for op in g.ir(i, stage="fused").walk()]
    assert "exp" not in names
    np.testing.assert_array_equal(g(i), np.full(4, np.exp(np.float32(1.0))))


def test_each_stage_is_visible():
    f = fj.function(dup)
    assert sum(op.name == "exp" for op in f.ir(X, stage="traced").walk()) == 2
    simplified = f.ir(X, stage="simplify")  # x * 1.0 is bypassed; the dead mul waits for prune
    assert [v.producer.name for v in simplified.body.ops[-1].inputs] == ["exp", "exp"]
    pruned = f.ir(X, stage="prune")
    assert [op.name for op in pruned.body.ops] == ["exp", "add"]
    assert [op.name for op in f.ir(X, stage="fused").body.ops] == ["fusion"]
    assert str(f.ir(X, stage="fusion")) == str(f.ir(X, stage="fused"))
    # The traced Function is never changed by lowering.
    assert sum(op.name == "exp" for op in f.ir(X).walk()) == 2


def test_passes_option_switches_passes_off():
    f = fj.function(dup, passes={"cse": False})
    assert sum(op.name == "exp" for op in f.ir(X, stage="fused").walk()) == 2
    g = fj.function(dup, passes=["simplify", "prune"])  # only these run
    assert "fusion" not in [op.name for op in g.ir(X, stage="fused").walk()]
    np.testing.assert_allclose(f(X), 2 * np.exp(X), rtol=1e-6)
    with pytest.raises(ValueError, match="unknown pass"):
        fj.function(dup, passes={"nope": False})(X)


def test_env_disable_and_dump(monkeypatch, capsys):
    monkeypatch.setenv("FLOWJIT_DISABLE", "cse")
    monkeypatch.setenv("FLOWJIT_DUMP", "fusion")
    f = fj.function(dup)
    f(X)
    err = capsys.readouterr().err
    assert "// flowjit: IR after fusion" in err and "fusion %x" in err
    assert err.count("= exp") == 2


def test_timings_and_verification_after_each_pass():
    traced = fj.function(dup).ir(X)
    result = DEFAULT_PIPELINE.run(traced)
    assert [n for n, _ in result.timings] == DEFAULT_PIPELINE.names
    assert all(t >= 0 for _, t in result.timings)

    def breaks_ir(fn):
        fn.body.ops.reverse()
        return fn
    with pytest.raises(VerifyError, match="after pass 'bad'"):
        Pipeline([("bad", breaks_ir)]).run(traced)


def _count_verify(monkeypatch) -> list[int]:
    from flowjit.passes import pipeline
    calls = []
    real = pipeline.verify

    def counting(fn):
        calls.append(1)
        return real(fn)
    monkeypatch.setattr(pipeline, "verify", counting)
    return calls


def test_the_pipeline_verifies_once_unless_asked_for_each_pass(monkeypatch):
    traced = fj.function(dup).ir(X)
    calls = _count_verify(monkeypatch)
    DEFAULT_PIPELINE.run(traced)
    assert len(calls) == 1
    del calls[:]
    DEFAULT_PIPELINE.run(traced, verify_each=True)
    assert len(calls) == len(DEFAULT_PIPELINE.names)
    del calls[:]
    monkeypatch.setenv("FLOWJIT_VERIFY", "each")
    DEFAULT_PIPELINE.run(traced)
    assert len(calls) == len(DEFAULT_PIPELINE.names)


def test_a_broken_pass_is_named_when_a_later_pass_crashes_on_its_output():
    traced = fj.function(dup).ir(X)

    def breaks_ir(fn):
        fn.body.ops.reverse()
        return fn

    def needs_valid_ir(fn):
        # A pass that trusts its input: a use before the definition is a KeyError here.
        seen = {a.id for a in fn.body.args}
        for op in fn.body.ops:
            for v in op.inputs:
                if v.id not in seen:
                    raise KeyError(v.id)
            seen.update(r.id for r in op.results)
        return fn
    with pytest.raises(VerifyError, match="after pass 'bad'"):
        Pipeline([("simplify", dict(DEFAULT_PIPELINE.passes)["simplify"]), ("bad", breaks_ir),
                  ("trusting", needs_valid_ir)]).run(traced)

    def fails(fn):
        raise RuntimeError("a bug of its own")
    with pytest.raises(RuntimeError, match="a bug of its own"):  # nothing broke before it: its error stands
        Pipeline([("simplify", dict(DEFAULT_PIPELINE.passes)["simplify"]), ("fails", fails)]).run(traced)


def test_interpret_mode_runs_the_traced_program():
    f = fj.function(dup, interpret=True)
    np.testing.assert_allclose(f(X), 2 * np.exp(X), rtol=1e-6)
    from flowjit.tracer.function import TracedFunction
    assert isinstance(f, TracedFunction)
