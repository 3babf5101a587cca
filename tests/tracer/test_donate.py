"""``fj.function(donate_argnums=...)``: a compiled program writes results over donated
arrays where it may, returns them as the results, and leaves alone any it may not."""

from __future__ import annotations

import numpy as np
import pytest

import flowjit as fj
from flowjit.ir import parse, print_function
from flowjit.ir.errors import FlowjitTypeError
from flowjit.ir.json_form import function_to_json


def adam(p, m, v, g):
    m = 0.9 * m + 0.1 * g
    v = 0.999 * v + 0.001 * g * g
    return p - 0.001 * m / (fj.sqrt(v) + 1e-8), m, v


def numpy_adam(p, m, v, g):
    m = np.float32(0.9) * m + np.float32(0.1) * g
    v = np.float32(0.999) * v + np.float32(0.001) * g * g
    return p - np.float32(0.001) * m / (np.sqrt(v) + np.float32(1e-8)), m, v


def state(seed=0, shape=(300, 64)):
    rng = np.random.default_rng(seed)
    p, m, v, g = (rng.standard_normal(shape).astype(np.float32) for _ in range(4))
    return p, m, np.abs(v), g


def test_donated_arrays_become_the_results_with_the_same_values():
    p, m, v, g = state()
    want = fj.function(adam)(p, m, v, g)
    step = fj.function(adam, donate_argnums=(0, 1, 2))
    dp, dm, dv = p.copy(), m.copy(), v.copy()
    got = step(dp, dm, dv, g)
    assert [a is b for a, b in zip(got, (dp, dm, dv))] == [True, True, True]
    for a, b, c in zip(got, want, numpy_adam(p, m, v, g)):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_allclose(a, c, rtol=2e-6, atol=1e-7)
    assert "in donated" in step.kernels(dp, dm, dv, g)
    # A plain call of the same function allocates its results.
    assert not any(a is b for a, b in zip(fj.function(adam)(p, m, v, g), (p, m, v)))


def test_a_pytree_argument_donates_every_leaf_and_steps_stay_exact():
    def train(params, grads):
        return {k: params[k] - 0.1 * grads[k] for k in params}
    rng = np.random.default_rng(1)
    params = {"w": rng.standard_normal((64, 32)).astype(np.float32),
              "b": rng.standard_normal(32).astype(np.float32)}
    grads = {k: rng.standard_normal(a.shape).astype(np.float32) for k, a in params.items()}
    plain, donating = fj.function(train), fj.function(train, donate_argnames="params")
    ref, cur = params, {k: a.copy() for k, a in params.items()}
    for _ in range(3):
        before = dict(cur)
        ref, cur = plain(ref, grads), donating(cur, grads)
        assert all(cur[k] is before[k] for k in cur)
        for k in ref:
            np.testing.assert_array_equal(cur[k], ref[k])


@pytest.mark.parametrize("how", ["read-only", "passed twice", "another argument views it",
                                 "it views another argument", "both view one array", "both view one memory map"])
def test_an_array_the_call_may_not_overwrite_is_left_alone(how, tmp_path):
    p, m, v, g = state(2)
    step = fj.function(adam, donate_argnums=0)
    if how == "read-only":
        donor = p.copy()
        donor.setflags(write=False)
        other = g
    elif how == "passed twice":          # the same array as the donated and as another argument
        donor = p.copy()
        other = donor
    elif how == "another argument views it":
        donor = p.copy()
        other = donor.reshape(donor.shape)
    elif how == "it views another argument":
        other = p.copy()
        donor = other[:]
    elif how == "both view one array":
        both = np.concatenate([p, g])
        donor, other = both[: len(p)], both[len(p):]
    else:                                # views of views whose bases differ but map one file
        mm = np.memmap(tmp_path / "both.f32", np.float32, "w+", shape=(2 * len(p), p.shape[1]))
        mm[: len(p)], mm[len(p):] = p, g
        donor, other = np.asarray(mm)[: len(p)], np.asarray(mm)[len(p):]
        assert type(donor) is np.ndarray and donor.base is not other.base
    kept, other_kept = donor.copy(), other.copy()
    got = step(donor, m, v, other)
    want = fj.function(adam)(p, m, v, other_kept)
    assert got[0] is not donor
    np.testing.assert_array_equal(donor, kept)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)


def test_a_donated_view_is_written_through_and_a_pooled_result_donates_on_the_next_call():
    p, m, v, g = state(7, (1024, 512))            # 2 MiB: results come from the buffer pool
    step = fj.function(adam, donate_argnums=(0, 1, 2))
    want = fj.function(adam)(p, m, v, g)
    frozen = p.copy()
    frozen.setflags(write=False)
    first = step(frozen, m.copy(), v.copy(), g)   # p is read-only: a new (pooled) array
    assert first[0] is not frozen and first[0].base is not None
    again = step(*[a.copy() for a in (p, m, v)], g)
    np.testing.assert_array_equal(again[0], want[0])
    second = step(*first, g)                      # the pooled results are views: still donated
    assert [a is b for a, b in zip(second, first)] == [True, True, True]
    np.testing.assert_array_equal(second[0], fj.function(adam)(*want, g)[0])
    whole = np.concatenate([p, p])
    got = step(whole[: len(p)], m.copy(), v.copy(), g)
    assert got[0].base is whole                   # the view donated: its rows of ``whole`` hold p's update
    np.testing.assert_array_equal(whole[: len(p)], want[0])
    np.testing.assert_array_equal(whole[len(p):], p)


def test_an_argument_that_another_step_reads_is_overwritten_only_after_that_read():
    def f(p, w):
        return p + 1.0, p @ w, w @ p
    rng = np.random.default_rng(3)
    p, w = rng.standard_normal((8, 8)).astype(np.float32), rng.standard_normal((8, 8)).astype(np.float32)
    for _ in range(2):
        got = fj.function(f, donate_argnums=0)(p.copy(), w)
        np.testing.assert_array_equal(got[0], p + 1)
        np.testing.assert_allclose(got[1], p @ w, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(got[2], w @ p, rtol=1e-5, atol=1e-5)


def test_donation_is_ignored_where_nothing_is_compiled():
    p, m, v, g = state(4)
    got = fj.function(adam, donate_argnums=(0, 1, 2), backend="interpreter")(p.copy(), m.copy(), v.copy(), g)
    for a, b in zip(got, fj.function(adam)(p, m, v, g)):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def test_the_ir_marks_donated_arguments_and_its_text_round_trips():
    p, m, v, g = state(5, (2, 3))
    fn = fj.function(adam, donate_argnums=(0, 2)).ir(p, m, v, g)
    assert fn.donated == [True, False, True, False]
    text = print_function(fn)
    assert "%p: f32[2,3] donated" in text and "%m: f32[2,3]," in text
    assert print_function(parse(text)) == text
    assert [a["donated"] for a in function_to_json(fn)["args"]] == [True, False, True, False]


def test_bad_donations_are_refused_when_the_function_is_made():
    with pytest.raises(FlowjitTypeError, match="donate_argnums=4"):
        fj.function(adam, donate_argnums=4)
    with pytest.raises(FlowjitTypeError, match="donate_argnames: adam has no parameter 'q'"):
        fj.function(adam, donate_argnames="q")
    with pytest.raises(FlowjitTypeError, match="both static and donated"):
        fj.function(adam, static_argnums=3, donate_argnums=3)


def test_a_donated_array_is_preferred_over_a_dying_intermediate():
    """The update ``w - lr * g`` may take the gradient's memory (a matmul's result dying
    there) or the donated ``w``'s: the donated one, so the step allocates no new array."""
    def step(w, x, y):
        g = x.T @ (x @ w - y)
        return w - 0.01 * g
    rng = np.random.default_rng(6)
    x, y = rng.standard_normal((64, 16)).astype(np.float32), rng.standard_normal((64, 4)).astype(np.float32)
    w = rng.standard_normal((16, 4)).astype(np.float32)
    donor = w.copy()
    got = fj.function(step, donate_argnums=0)(donor, x, y)
    assert got is donor
    np.testing.assert_array_equal(got, fj.function(step)(w, x, y))
