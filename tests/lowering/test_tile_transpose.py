"""lowering.tile_transpose: a nest that reads its input across rows runs in square tiles,
with the same results; nests whose order matters, or that read along rows, stay as they were.
And a reshape of a buffer reads it at its row-major position, without a division per axis."""

from __future__ import annotations

import numpy as np
import pytest

import flowjit as fj
from flowjit.ir.dtypes import float32
from flowjit.lowering import evaluate, print_kernel
from flowjit.lowering.loops import (
    INDEX,
    Accumulator,
    AccValue,
    Buffer,
    Const,
    Kernel,
    Load,
    Loop,
    Prim,
    SizeVar,
    Store,
    Update,
    Var,
    expressions,
    subexpressions,
    walk_statements,
)
from flowjit.lowering.tile_transpose import BLOCK_BYTES, MIN_EXTENT, TILE_COLUMNS, TILE_ROWS, tile_transposes
from tests.lowering.test_lowering import kernel_of
from tests.lowering.test_programs import check_fused


def _tiled(k: Kernel) -> bool:
    return any(isinstance(s, Loop) and s.var.endswith("_tile") for s in walk_statements(k.body))


def _random(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape) * 100
    if np.dtype(dtype).kind == "c":
        x = x + 1j * rng.standard_normal(shape)
    return x.astype(dtype)


CASES = [
    # (function, input shape, dtype): edges that are not multiples of the tile, every kind
    (lambda x: x.T * 2, (97, 130), np.float32),
    (lambda x: x.T + 1, (TILE_COLUMNS * 5, TILE_ROWS * 3), np.float64),
    (lambda x: x.T * (1 - 2j), (70, 200), np.complex64),
    (lambda x: x.T - 3, (130, 67), np.int32),
    (lambda x: fj.transpose(x, (0, 2, 1)) * 0.5, (3, 100, 70), np.float32),
    (lambda x: x[:, ::2].T + 0, (80, 260), np.float32),     # a strided row read
    (lambda x: x.reshape(72, 90).T * 3, (90, 72), np.float32),  # a reshape read across rows
    (lambda x: fj.transpose(x, (0, 2, 1)) * 0.5, (1, 100, 70), np.complex64),   # a unit axis's index bound at the top
    (lambda x: fj.reshape(fj.transpose(x * 2, (0, 2, 1)), (1, 130 * 97)), (1, 97, 130), np.float32),  # flattened
]


@pytest.mark.parametrize("case", range(len(CASES)))
def test_a_transpose_runs_in_tiles_with_numpys_values(case):
    f, shape, dtype = CASES[case]
    x = _random(shape, dtype)
    k = kernel_of(f, x)
    assert _tiled(k), print_kernel(k)
    np.testing.assert_array_equal(fj.function(f)(x), fj.function(f, backend="interpreter")(x))


def test_a_tile_that_only_moves_elements_is_left_scalar():
    # Its loads are rows apart: a vector's lanes would be gathered one by one (on the Zen 5
    # machine a float32 4096x1024 x.T + 1 took 3.6 ms vectorized, 1.9 scalar); a tile that
    # computes more than an operation per element stored keeps the vectorizer.
    def inner_tile_loops(k):
        return [s for s in walk_statements(k.body) if isinstance(s, Loop) and s.start != Const(0, INDEX)
                and not any(isinstance(x, Loop) for x in s.body)]
    moved = inner_tile_loops(kernel_of(lambda x: x.T + 1, _random((100, 130), np.float32)))
    computed = inner_tile_loops(kernel_of(lambda x: fj.exp(x.T) * 2 + fj.sin(x.T), _random((100, 130), np.float32)))
    assert moved and all(s.scalar for s in moved)
    assert computed and not any(s.scalar for s in computed)


def test_the_values_match_numpy_where_numpy_computes_them():
    x = _random((97, 130), np.float32)
    np.testing.assert_array_equal(fj.function(lambda a: a.T * 2)(x), x.T * 2)
    c = _random((70, 200), np.complex64)
    np.testing.assert_array_equal(fj.function(lambda a: a.T * (1 - 2j))(c), c.T * np.complex64(1 - 2j))
    b = _random((3, 100, 70), np.float64, seed=1)
    np.testing.assert_array_equal(fj.function(lambda a: fj.transpose(a, (0, 2, 1)) + 1)(b),
                                  np.transpose(b, (0, 2, 1)) + 1)


def test_a_large_transpose_is_split_over_threads_and_matches():
    x = _random((1024, 600), np.float32, seed=2)
    f = fj.function(lambda a: a.T * 2)
    np.testing.assert_array_equal(f(x), x.T * 2)
    k = kernel_of(lambda a: a.T * 2, x)
    (outer,) = k.body
    assert outer.parallel and outer.var.endswith("_tile"), print_kernel(k)


@pytest.mark.parametrize("shape", [(MIN_EXTENT - 1, 500), (500, MIN_EXTENT - 1)])
def test_a_short_extent_is_not_tiled(shape):
    x = _random(shape, np.float32)
    k = kernel_of(lambda a: a.T * 2, x)
    assert not _tiled(k), print_kernel(k)


def test_a_nest_that_reads_along_rows_is_not_tiled():
    x = _random((200, 300), np.float32)
    k = kernel_of(lambda a: a * 2 + 1, x)
    assert not _tiled(k)
    k = kernel_of(lambda a, b: a + b.T, x, _random((300, 200), np.float32))
    assert _tiled(k)


def _nest(inner_body: tuple, n: int = 128) -> tuple[Kernel, dict]:
    """for i in 0..n0: for j in 0..n1: <inner_body>, over in0: f32[n1, n0], out0: f32[n0, n1]."""
    bufs = (Buffer("in0", "in", float32, 2), Buffer("out0", "out", float32, 2))
    sizes = (SizeVar("n1", "in0", 0), SizeVar("n0", "out0", 0))
    body = (Loop("i", Const(0, INDEX), Var("n0", INDEX), 1,
                 (Loop("j", Const(0, INDEX), Var("n1", INDEX), 1, inner_body),)),)
    return Kernel("k", bufs, sizes, body), {"in0": (n, n), "out0": (n, n)}


I, J = Var("i", INDEX), Var("j", INDEX)
ACROSS = Load("in0", (J, I), float32)


def _tile(k: Kernel, shapes: dict, aliased=()) -> tuple:
    n = shapes["out0"][0]
    return tile_transposes(k.body, k.buffers, shapes, {"n0": n, "n1": n}, aliased)


def test_the_tiled_kernel_evaluates_to_the_untiled_ones_values():
    k, shapes = _nest((Store("out0", (I, J), Prim("mul", (ACROSS, Const(3.0, float32)), float32)),),
                      n=TILE_ROWS * 2 + 5)
    tiled = Kernel(k.name, k.buffers, k.sizes, _tile(k, shapes))
    assert _tiled(tiled)
    x = _random(shapes["in0"], np.float32)
    want, got = np.zeros(shapes["out0"], np.float32), np.full(shapes["out0"], np.nan, np.float32)
    evaluate(k, [x], [want])
    evaluate(tiled, [x], [got])
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got, x.T * 3)


def test_nests_whose_iteration_order_matters_stay_as_they_were():
    # an accumulator carried across the inner loop
    k, shapes = _nest((Accumulator("s", "sum", float32, Const(0.0, float32)), Update("s", ACROSS, None),
                       Store("out0", (I, J), AccValue("s", float32))))
    assert _tile(k, shapes) == k.body
    # a store that reads the output at another element (an earlier iteration's)
    k, shapes = _nest((Store("out0", (I, J), Prim("add", (ACROSS, Load("out0", (J, I), float32)), float32)),))
    assert _tile(k, shapes) == k.body
    # an input the output may share memory with, read at another element
    k, shapes = _nest((Store("out0", (I, J), ACROSS),))
    assert _tile(k, shapes, aliased={"in0"}) == k.body
    assert _tile(k, shapes) != k.body
    # a store that does not hold both variables writes an element more than once
    k, shapes = _nest((Store("out0", (Const(0, INDEX), J), ACROSS),))
    assert _tile(k, shapes) == k.body


def test_a_reshaped_input_is_read_at_its_row_major_position():
    x = _random((3, 8, 10), np.float32)

    def f(a):
        return fj.transpose(a.reshape(24, 10) * 2)   # a merge of the two first axes, read across

    k = kernel_of(f, x)
    ops = {e.op for e in expressions(k.body) if isinstance(e, Prim)}
    assert not ops & {"idiv", "irem"}, print_kernel(k)
    np.testing.assert_array_equal(fj.function(f)(x), x.reshape(24, 10).T * 2)
    assert check_fused(f, x) == 1


def test_a_transpose_flattened_by_a_reshape_loops_over_its_own_axes():
    # The reshape of the kernel's output merges the transposed axes: the nest runs over the
    # transpose's axes and stores at the merged index, with no division or remainder (as a
    # loop over the flat output it read x[i % n, i // n]: gathers no tile could be made of).
    x = _random((1, 600, 500), np.complex64)

    def f(a):
        return fj.reshape(fj.transpose(a, (0, 2, 1)) * 2, (1, 500 * 600))

    k = kernel_of(f, x)
    accesses = [s for s in walk_statements(k.body) if isinstance(s, Store)]
    accesses += [e for e in expressions(k.body) if isinstance(e, Load)]
    ops = {e.op for a in accesses for i in a.index for e in subexpressions(i) if isinstance(e, Prim)}
    assert not ops & {"idiv", "irem"} and _tiled(k), print_kernel(k)
    assert [s.parallel for s in k.body if isinstance(s, Loop)] == [True]   # the first axis that is not a unit
    np.testing.assert_array_equal(fj.function(f)(x), (np.transpose(x, (0, 2, 1)) * 2).reshape(1, -1))
    # A reshape that splits an axis keeps the output's nest.
    g = fj.function(lambda a: fj.reshape(fj.transpose(a, (0, 2, 1)) * 2, (1, 250, 2, 600)))
    np.testing.assert_array_equal(g(x), (np.transpose(x, (0, 2, 1)) * 2).reshape(1, 250, 2, 600))


def _blocks(k: Kernel) -> list[int]:
    return [s.block for s in walk_statements(k.body) if isinstance(s, Loop) and s.block]


BLOCK_CASES = [
    # (function, inputs): full tiles and edge tiles, every way a block reads a load
    (lambda x: x.T + 1, [(97, 130)]),                                    # edges on both sides
    (lambda x: x.T * 2, [(BLOCK_BYTES // 4 * 6, BLOCK_BYTES // 4 * 5)]),  # full tiles only
    (lambda x: -(x.T - 3), [(130, 67)]),
    (lambda x: fj.transpose(x, (0, 2, 1)) * 3, [(3, 100, 70)]),         # a batch of transposes
    (lambda x: x.reshape(72, 90).T * 3, [(90, 72)]),                    # a reshape read across rows
    (lambda a, b: a + b.T, [(200, 300), (300, 200)]),                   # along and across rows at once
    (lambda a, v: a.T * v, [(150, 90), (90, 1)]),                       # one element a tile row
]


@pytest.mark.parametrize("case", range(len(BLOCK_CASES)))
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_a_four_byte_tile_that_moves_elements_runs_as_vector_blocks(case, dtype):
    # A full tile of 16 x 16 four-byte elements is loaded a line at a time and transposed in
    # registers (a float32 4096x1024 x.T + 1: 1.4-1.9 -> 0.9 ms); edge tiles run the loops.
    f, shapes = BLOCK_CASES[case]
    args = [_random(s, dtype, seed=n) for n, s in enumerate(shapes)]
    k = kernel_of(f, *args)
    assert _blocks(k) == [BLOCK_BYTES // 4], print_kernel(k)
    got = fj.function(f)(*args)
    np.testing.assert_array_equal(got, fj.function(f, backend="interpreter")(*args))
    want = f(*args) if case != 3 else np.transpose(args[0], (0, 2, 1)) * 3
    np.testing.assert_array_equal(got, want.astype(dtype))


def test_tiles_of_other_sizes_or_with_other_work_are_not_blocks():
    # float64: its scalar tiles were at the copy's bandwidth; exp: more than one instruction;
    # complex: two parts an element; a strided read: its rows' elements are not adjacent.
    for f, x in ((lambda a: a.T * 2, _random((100, 130), np.float64)),
                 (lambda a: a[:, ::2].T + 0, _random((80, 260), np.float32)),
                 (lambda a: fj.exp(a.T), _random((100, 130), np.float32)),
                 (lambda a: a.T * (1 - 2j), _random((70, 200), np.complex64))):
        k = kernel_of(f, x)
        assert _tiled(k) and not _blocks(k), print_kernel(k)


@pytest.mark.parametrize("seed", range(6))
def test_random_block_tiles_match_the_interpreter(seed):
    # Shapes around the block's side (edges of 1 to 15 elements, or none), a permutation of a
    # batch of matrices, an elementwise partner read along, across or broadcast, and the
    # block's operations in a random order.
    rng = np.random.default_rng(100 + seed)
    side = BLOCK_BYTES // 4
    n, m = (int(side * rng.integers(4, 9) + rng.choice([0, 1, 7, side - 1])) for _ in range(2))
    batch = int(rng.integers(1, 4))
    dtype = [np.float32, np.int32][seed % 2]
    x = _random((batch, n, m), dtype, seed)
    partner = [_random((batch, m, n), dtype, seed + 1), _random((batch, n, m), dtype, seed + 2),
               _random((batch, m, 1), dtype, seed + 3)][seed % 3]
    steps = [rng.choice(["add", "sub", "mul", "neg"]) for _ in range(int(rng.integers(1, 4)))]

    def f(a, p):
        y = fj.transpose(a, (0, 2, 1))
        q = p if p.shape[1] == y.shape[1] else fj.transpose(p, (0, 2, 1))
        for op in steps:
            y = -y if op == "neg" else {"add": y + q, "sub": y - q, "mul": y * q}[op]
        return y
    k = kernel_of(f, x, partner)
    assert _blocks(k) == [side], print_kernel(k)
    np.testing.assert_array_equal(fj.function(f)(x, partner), fj.function(f, backend="interpreter")(x, partner))


_EIGHT_LANES = """
import numpy as np
import flowjit as fj
rng = np.random.default_rng(7)
x = (rng.standard_normal((3, 70, 97)) * 100).astype(np.float32)
p = (rng.standard_normal((3, 97, 1)) * 100).astype(np.float32)
k = x.astype(np.int32)
np.testing.assert_array_equal(fj.function(lambda a, p: fj.transpose(a, (0, 2, 1)) * p - 1)(x, p),
                              np.transpose(x, (0, 2, 1)) * p - 1)
np.testing.assert_array_equal(fj.function(lambda a: -fj.transpose(a, (0, 2, 1)))(k), -np.transpose(k, (0, 2, 1)))
print("ok")
"""


def test_a_target_without_avx512_runs_a_block_as_four_of_eight_lanes(tmp_path):
    # There 16-lane shuffles were slower than the scalar tiles (2.1 -> 3.7 ms); a 16x16 tile is
    # four 8x8 blocks.
    import os
    import platform
    import subprocess
    import sys
    if platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip("an x86-64 CPU name")
    got = subprocess.run([sys.executable, "-c", _EIGHT_LANES], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "FLOWJIT_LLVM_CPU": "haswell", "FLOWJIT_CACHE_DIR": str(tmp_path)})
    assert got.returncode == 0 and got.stdout.strip() == "ok", got.stderr[-3000:]
    from flowjit.codegen_cpu.render import render_kernel
    k = kernel_of(lambda a: a.T * 2, _random((100, 130), np.float32))
    for avx512, lanes in ((True, 16), (False, 8)):
        text = render_kernel(k, native_ldexp=avx512)
        assert f"shufflevector <{lanes} x float>" in text and f"shufflevector <{24 - lanes} x float>" not in text
