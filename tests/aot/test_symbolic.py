"""A symbolic leading dimension (``flowjit compile ... --arg f32[B,64]``): one library for
every batch size, from C and from Python, against the JIT at each size."""

from __future__ import annotations

import numpy as np
import pytest

import flowjit as fj
from flowjit.aot import AOTError
from flowjit.cli import main
from flowjit.codegen_cpu.program_plan import Affine, unify_plans
from tests.aot.test_aot import build_c, needs_cc, run_c

MODULE = '''
import numpy as np
import flowjit as fj

rng = np.random.default_rng(0)
W1 = fj.Variable((rng.standard_normal((64, 32)) * 0.2).astype(np.float32), name="W1")
b1 = fj.Variable((rng.standard_normal(32) * 0.1).astype(np.float32), name="b1")
W2 = fj.Variable((rng.standard_normal((32, 10)) * 0.2).astype(np.float32), name="W2")

def predict(x):
    h = fj.nn.relu(x @ W1 + b1)
    return fj.nn.softmax(h @ W2, axis=-1), (h * h).sum(axis=1)

def centre(x):
    return x - x.mean(axis=0)

def scaled(x):
    return x / x.shape[0]
'''

C_PREDICT = r'''
#include <stdio.h>
#include <stdlib.h>
#include "predict.h"
int main(int argc, char **argv) {
    long batch = atol(argv[1]);
    float *x = malloc(sizeof(float) * PREDICT_X_SIZE(batch) + 1);
    for (long i = 0; i < PREDICT_X_SIZE(batch); i++) x[i] = (float)((i * 7919) % 13) / 13.0f - 0.5f;
    float *probs = malloc(sizeof(float) * PREDICT_OUTPUT_0_SIZE(batch) + 1);
    float *norms = malloc(sizeof(float) * PREDICT_OUTPUT_1_SIZE(batch) + 1);
    predict_args in = {x};
    predict_results out = {probs, norms};
    void *scratch = aligned_alloc(PREDICT_SCRATCH_ALIGN, PREDICT_SCRATCH_BYTES(batch) + PREDICT_SCRATCH_ALIGN);
    int rc = predict(&in, &out, scratch, batch);
    if (rc != PREDICT_OK) return 10 + rc;
    if (predict(&in, &out, NULL, -1) != PREDICT_ERR_SIZE) return 9;
    for (long i = 0; i < PREDICT_OUTPUT_0_SIZE(batch); i++) printf("%.9g\n", probs[i]);
    for (long i = 0; i < PREDICT_OUTPUT_1_SIZE(batch); i++) printf("%.9g\n", norms[i]);
    return 0;
}
'''


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("aot-symbolic")
    (root / "model.py").write_text(MODULE)
    assert main(["compile", f"{root / 'model.py'}:predict", "--arg", "f32[B,64]", "--freeze",
                 "-o", str(root / "build")]) == 0
    import importlib.util
    spec = importlib.util.spec_from_file_location("_aot_symbolic_model", root / "model.py")
    model = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(model)
    return root, model


def test_unified_sizes_are_lines_through_the_samples():
    from flowjit.codegen_cpu.program_plan import NotNative
    b = Affine(3, 1)
    assert unify_plans([(7, 31, "k"), (7, 61, "k"), (7, 91, "k")], [10, 20, 30]) == (7, b, "k")
    assert (b * 4 + 1).at(5) == 65 and (Affine(0, 7) + Affine(2, 0)).at(3) == 13
    with pytest.raises(NotNative, match="changes with the batch size"):
        unify_plans([("a",), ("b",), ("c",)], [1, 2, 3])
    with pytest.raises(NotNative, match="not a linear function"):
        unify_plans([(1,), (4,), (10,)], [1, 2, 3])


def test_one_library_for_every_batch_size(built):
    root, model = built
    g = fj.load_compiled(root / "build")
    assert g.manifest["symbolic"] == "B" and g.manifest["args"][0]["shape"] == ["B", 64]
    header = (root / "build" / "predict.h").read_text()
    assert "int64_t B);" in header and "#define PREDICT_SCRATCH_BYTES(B)" in header
    jit = fj.function(model.predict)
    for batch in (0, 1, 3, 64, 100, 257):
        x = np.random.default_rng(batch).standard_normal((batch, 64)).astype(np.float32)
        probs, norms = g(x)
        want_probs, want_norms = jit(x)
        assert probs.shape == (batch, 10) and norms.shape == (batch,)
        np.testing.assert_allclose(probs, want_probs, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(norms, want_norms, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match=r"argument 'x' must have shape \(5, 64\)"):
        g(np.zeros((5, 63), np.float32))


@needs_cc
def test_a_c_program_passes_the_batch_size(built):
    root, model = built
    exe = build_c(root / "build", "predict", C_PREDICT)
    for batch in (1, 7, 130):
        i = np.arange(batch * 64)
        x = (((i * 7919) % 13).astype(np.float32) / np.float32(13.0) - np.float32(0.5)).reshape(batch, 64)
        probs, norms = fj.function(model.predict)(x)
        got = run_c(exe, batch)
        np.testing.assert_allclose(got, np.concatenate([probs.ravel(), norms.ravel()]), rtol=1e-5, atol=1e-5)


def test_a_mean_over_the_batch_compiles_for_any_batch_and_a_constant_made_from_it_is_refused(built, tmp_path,
                                                                                            capsys):
    # A mean divides by the element count its kernel reads from the sizes it is given.
    root, _ = built
    assert main(["compile", f"{root / 'model.py'}:centre", "--arg", "f32[B,8]", "-o", str(tmp_path / "m")]) == 0
    centre = fj.load_compiled(tmp_path / "m")
    for b in (1, 3, 70):
        x = np.random.default_rng(b).standard_normal((b, 8)).astype(np.float32)
        np.testing.assert_allclose(centre(x), x - x.mean(axis=0), rtol=1e-5, atol=1e-6)
    # x / x.shape[0] divides by a Python int: a literal of one size, refused for any B.
    assert main(["compile", f"{root / 'model.py'}:scaled", "--arg", "f32[B,8]", "-o", str(tmp_path / "c")]) == 1
    err = capsys.readouterr().err
    assert "for any B" in err and "changes with the batch size B" in err
    assert not (tmp_path / "c").exists()
    with pytest.raises(AOTError, match="one symbolic dimension at a time"):
        fj.export(lambda x, y: x + y.sum(), fj.ShapeDtype(("B", 2), "f32"), fj.ShapeDtype(("N",), "f32"),
                  path=tmp_path / "d")


def test_a_hidden_width_equal_to_a_sampled_batch_size_still_compiles(tmp_path):
    # 64-128-128-10 with biases (the digits MLP): traced at B = 128, B and the hidden width
    # share a size variable, so the exporter samples B again at sizes no dimension has.
    rng = np.random.default_rng(3)
    w1 = fj.Variable(rng.standard_normal((64, 128)).astype(np.float32), name="w1")
    b1 = fj.Variable(rng.standard_normal(128).astype(np.float32), name="b1")
    w2 = fj.Variable(rng.standard_normal((128, 10)).astype(np.float32), name="w2")

    def predict(x):
        return fj.nn.relu(x @ w1 + b1) @ w2
    fj.export(predict, fj.ShapeDtype(("B", 64), "f32"), path=tmp_path, name="mlp")
    run = fj.load_compiled(tmp_path)
    for batch in (1, 7, 128, 300):
        x = rng.standard_normal((batch, 64)).astype(np.float32)
        np.testing.assert_allclose(run(x), fj.function(predict)(x), rtol=1e-4, atol=1e-4)


def test_a_loop_over_a_symbolic_batch_compiles(tmp_path):
    # The scan's body is a function of its own in the library: it takes B as the entry does.
    w = np.random.default_rng(1).standard_normal((4, 4)).astype(np.float32)

    def rnn(xs):
        return fj.scan(lambda c, x: (fj.tanh(c @ w + x), None), xs[0] * 0.0, xs)[0]
    fj.export(rnn, fj.ShapeDtype((6, "B", 4), "f32"), path=tmp_path, name="rnn")
    g = fj.load_compiled(tmp_path)
    for b in (1, 5, 130):
        xs = np.random.default_rng(b).standard_normal((6, b, 4)).astype(np.float32)
        np.testing.assert_allclose(g(xs), fj.function(rnn)(xs), rtol=1e-6)


def test_a_loop_parallel_from_some_sampled_size_on_still_unifies(tmp_path):
    # A kernel's loop is marked parallel from 2**18 elements on: x's from B = 128 (of the
    # first samples, 64, 128, 192), y's from B = 448 (of the second, 320, 448, 576).
    def f(x, y):
        return fj.tanh(x * 2.0 + 1.0), fj.tanh(y * 2.0 + 1.0)
    fj.export(f, fj.ShapeDtype(("B", 2048), "f32"), fj.ShapeDtype(("B", 600), "f32"), path=tmp_path, name="f")
    g = fj.load_compiled(tmp_path)
    rng = np.random.default_rng(2)
    x, y = rng.standard_normal((3, 2048)).astype(np.float32), rng.standard_normal((3, 600)).astype(np.float32)
    for got, want in zip(g(x, y), (np.tanh(x * 2 + 1), np.tanh(y * 2 + 1))):
        np.testing.assert_allclose(got, want, rtol=1e-6)


def test_constant_work_still_folds_for_any_batch_but_an_array_made_from_b_does_not(tmp_path):
    # Folding is off only for ops that make a larger array than their inputs (an iota over B,
    # take_along_axis's row offsets): a constant-only eig (no native form) still folds.
    w = np.random.default_rng(0).standard_normal((4, 4)).astype(np.float32)

    def f(x):
        scaled = x * fj.real(fj.linalg.eig(w)[0])
        return fj.sort(scaled, axis=-1), fj.top_k(x @ w, 2)
    fj.export(f, fj.ShapeDtype(("B", 4), np.float32), path=tmp_path, name="folded")
    compiled = fj.load_compiled(tmp_path / "folded.json")
    for batch in (1, 6):
        x = np.random.default_rng(batch).standard_normal((batch, 4)).astype(np.float32)
        got, want = compiled(x), fj.function(f)(x)
        np.testing.assert_allclose(got[0], want[0], rtol=1e-5)
        for g, v in zip(got[1], want[1], strict=True):
            np.testing.assert_allclose(g, v, rtol=1e-5)


def test_a_kernels_temps_get_the_scratch_they_use_at_every_batch_size():
    # argsort's kernel has three temps (two key rows, one of positions); handed scratch, it
    # starts each at the next address that is a multiple of 64. The plan is fitted at B = 64,
    # 128, 192: at B = 1 or 7 the kernel used up to 128 bytes more than the line gave it (a
    # heap overflow from C). Here the slice starts at the worst place, 4 bytes past a line.
    from flowjit.aot.exporter import _symbolic_plan
    from flowjit.codegen_cpu.kernel_abi import TEMP_ALIGN
    from flowjit.codegen_cpu.program_plan import KernelCall, walk_steps

    _, plan, _ = _symbolic_plan(lambda x: fj.argsort(x, axis=-1), (fj.ShapeDtype(("B", 3), "f32"),), {}, "B", "f")
    (call,) = [s for s in walk_steps(plan.steps) if isinstance(s, KernelCall) and s.temps]
    temps = [b for b in call.kernel.buffers if b.role == "temp"]
    assert len(temps) == 3
    for batch in (1, 2, 7, 33, 64, 65):
        reserved = plan.buffer(call.temps).shape[0]
        reserved = reserved.at(batch) if isinstance(reserved, Affine) else reserved
        end = 4   # the emitter's carving (emit.py): each temp from the next multiple of TEMP_ALIGN
        for t in temps:
            end = -(-end // TEMP_ALIGN) * TEMP_ALIGN + batch * 3 * t.dtype.itemsize
        assert end - 4 <= reserved, (batch, end - 4, reserved)


def test_every_intermediate_starts_at_a_multiple_of_its_item_size_at_every_batch_size():
    # Laid out one after another for a symbolic batch, an int8 argsort's temps (30 * B + 192
    # bytes) came first and the float64 intermediates after them at offsets 2 or 6 past a
    # multiple of 8, which the kernels' loads (aligned to their item size) may not assume.
    from flowjit.aot.exporter import _symbolic_plan

    def f(x):
        order = fj.argsort(x, axis=-1)
        y = fj.tanh(x.astype(np.float64) * 2.0) @ np.ones((3, 3))
        return fj.exp(y).sum(axis=-1), order

    _, plan, _ = _symbolic_plan(f, (fj.ShapeDtype(("B", 3), "i8"),), {}, "B", "f")
    scratch = [b for b in plan.buffers if b.kind == "scratch" and b.dtype != "uint8"]
    assert any(np.dtype(b.dtype).itemsize == 8 for b in scratch), scratch
    for batch in (1, 2, 3, 7, 64, 65):
        for b in scratch:
            offset = b.slot.at(batch) if isinstance(b.slot, Affine) else b.slot
            assert offset % np.dtype(b.dtype).itemsize == 0, (b, batch, offset)


def test_a_loop_after_a_kernels_temps_aligns_its_scratch_for_any_batch(tmp_path):
    # Behind the argsort's temps (30 * B + 192 bytes), the scan's scratch (its float64 carry,
    # current and next) starts at 62 * B + 192: 254 for B = 1. The loop rounds its start up to
    # SCRATCH_ALIGN itself, so the plan gives its step that much room beyond its layout.
    from flowjit.aot.exporter import _symbolic_plan
    from flowjit.codegen_cpu.program_plan import SCRATCH_ALIGN, ControlCall, walk_steps

    def f(x):
        order = fj.argsort(x, axis=-1)
        xs = x.astype(np.float64).T
        return fj.scan(lambda c, r: (fj.tanh(c * 0.5 + r), None), xs[0] * 0.0, xs)[0], order

    def at(v, batch):
        return v.at(batch) if isinstance(v, Affine) else v

    _, plan, _ = _symbolic_plan(f, (fj.ShapeDtype(("B", 3), "i8"),), {}, "B", "f")
    (loop,) = [s for s in walk_steps(plan.steps) if isinstance(s, ControlCall)]
    for batch in (1, 2, 3, 5, 64, 65):
        needs = at(loop.block_offset, batch) + max((at(p.scratch_bytes, batch) for p in loop.blocks), default=0)
        assert at(plan.buffer(loop.temp).shape[0], batch) >= needs + SCRATCH_ALIGN - 1, batch
    fj.export(f, fj.ShapeDtype(("B", 3), "i8"), path=tmp_path, name="f")
    g = fj.load_compiled(tmp_path)
    for batch in (1, 2, 3, 5, 65):
        x = np.random.default_rng(batch).integers(-9, 9, (batch, 3)).astype(np.int8)
        for got, want in zip(g(x), fj.function(f)(x), strict=True):
            np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("rows", [4000, 3000])
def test_an_embedding_step_over_a_symbolic_batch_gives_the_jits_bits(tmp_path, rows):
    # The gradient of a lookup adds into one row per id (sparse_scatter) where the table has
    # 4 rows per id: at 4000 rows for every sampled batch (5 ids a row: 320-960 ids), at 3000
    # not for B = 192; any batch size then gives the bits of the JIT's program of that size.
    table = np.random.default_rng(0).standard_normal((rows, 8)).astype(np.float32)

    def step(table, ids):
        def loss(t):
            return fj.sum(fj.tanh(fj.take(t, ids, axis=0)).mean(axis=1) ** 2)
        return table - 0.5 * fj.grad(loss)(table)
    fj.export(step, fj.ShapeDtype((rows, 8), "f32"), fj.ShapeDtype(("B", 5), "i32"), path=tmp_path, name="step")
    compiled = fj.load_compiled(tmp_path)
    for batch in (1, 7, 130, 700):
        ids = np.random.default_rng(batch).integers(-3, rows + 3, (batch, 5)).astype(np.int32)
        np.testing.assert_array_equal(compiled(table, ids), fj.function(step)(table, ids))


def test_an_odd_length_rfft_over_a_symbolic_batch_compiles(tmp_path):
    # The JIT transforms an odd length's real rows two at a time (half as many complex rows);
    # over a symbolic batch the decomposition keeps one row per row, whose sizes are lines in B.
    def spectrum(x):
        return fj.abs(fj.fft.rfft(x))
    fj.export(spectrum, fj.ShapeDtype(("B", 101), "f32"), path=tmp_path, name="spectrum")
    compiled = fj.load_compiled(tmp_path)
    for batch in (1, 2, 3, 8, 65):
        x = np.random.default_rng(batch).standard_normal((batch, 101)).astype(np.float32)
        np.testing.assert_allclose(compiled(x), np.abs(np.fft.rfft(x)), rtol=2e-5, atol=2e-5 * 101)
        np.testing.assert_allclose(compiled(x), fj.function(spectrum)(x), rtol=2e-5, atol=2e-5 * 101)
