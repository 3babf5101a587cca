"""Differential test of the compiled path: random programs (tests/random_programs.py)
compiled on the default backend against the interpreter and against NumPy, and the
gradients of the smooth ones (``fj.grad``, compiled) against the interpreter's and
against central differences in float64.

The seeds are fixed: the default suite runs ``SEEDS`` (sized to take about a minute on
a cold kernel cache, two cores), ``-m slow`` the longer ``SLOW_SEEDS``. The first program
of each chunk of seeds traces the chunk's programs. A failure prints the program as source
(it runs as is, with ``m`` bound to flowjit or NumPy), its fused IR and the command that runs that one program again.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import flowjit as fj
from tests.finite_differences import central_differences
from tests.precompile import suite_cache, trace_and_precompile
from tests.random_programs import NUMPY, Program, random_program

SEEDS = range(0, 180)
SLOW_SEEDS = range(180, 2180)
CHUNK = 60  # programs whose kernels compile together (see Programs.prepare)
BACKEND = None  # the default backend: FLOWJIT_BACKEND, else llvm


def _close(got: np.ndarray, want: np.ndarray, what: str, rtol: float) -> None:
    """Same shape and dtype; floats within ``rtol`` of the value and of the output's
    largest finite magnitude (a difference of large terms keeps their rounding), nan where
    nan; ints and bools exact."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype, \
        f"{what}: {got.dtype}{list(got.shape)} where {want.dtype}{list(want.shape)}"
    if got.dtype.kind == "f":
        finite = np.abs(want[np.isfinite(want)])
        scale = max(1.0, float(finite.max())) if finite.size else 1.0
        np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * scale, equal_nan=True, err_msg=what)
    else:
        np.testing.assert_array_equal(got, want, err_msg=what)


def _rtol(dtype: str) -> float:
    return 1e-4 if dtype == "f32" else 1e-10


class Programs:
    """Each seed's program and its compiled functions (forward, and gradient when smooth)."""

    def __init__(self) -> None:
        self.compiled: dict[int, tuple] = {}
        self.prepared: set[int] = set()  # chunks whose kernels are compiled

    def get(self, seed: int) -> tuple:
        if seed not in self.compiled:
            program = random_program(seed)
            forward = fj.function(program.function(fj), backend=BACKEND)
            grad = None
            if program.smooth:
                grad = fj.function(fj.grad(program.loss(fj), argnums=tuple(range(len(program.in_shapes)))),
                                   backend=BACKEND)
            self.compiled[seed] = (program, forward, grad)
        return self.compiled[seed]

    def prepare(self, seed: int, many: bool) -> None:
        """Before the first program of a chunk of ``CHUNK`` seeds runs, when ``many`` tests
        of this module run: trace the chunk's programs and compile their cold kernels on
        two cores at once (one chunk at a time keeps each test inside its time limit)."""
        chunk = seed // CHUNK
        if not many or chunk in self.prepared:
            return
        self.prepared.add(chunk)
        calls = []
        for s in range(chunk * CHUNK, (chunk + 1) * CHUNK):
            program, forward, grad = self.get(s)
            calls += [(f, program.inputs()) for f in (forward, grad) if f is not None]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            trace_and_precompile(calls)


@pytest.fixture(scope="module")
def programs(tmp_path_factory):
    with suite_cache(tmp_path_factory):
        yield Programs()


def check_program(program: Program, forward, grad) -> None:
    """Compiled against interpreted and NumPy; compiled gradients against interpreted ones
    and central differences."""
    xs = program.inputs()
    rtol = _rtol(program.dtype)
    got = forward(*xs)
    want = fj.function(program.function(fj), interpret=True)(*xs)
    with np.errstate(all="ignore"):
        numpy = program.function(NUMPY)(*xs)
    for k, (g, w, n) in enumerate(zip(got, want, numpy)):
        _close(g, w, f"output {k}: compiled against the interpreter", rtol)
        _close(w, np.asarray(n), f"output {k}: the interpreter against NumPy", rtol)
    if grad is None:
        return
    grads = grad(*xs)
    interpreted = fj.function(fj.grad(program.loss(fj), argnums=tuple(range(len(xs)))), interpret=True)(*xs)
    loss = program.loss(NUMPY)
    for k, (g, w) in enumerate(zip(grads, interpreted)):
        _close(g, w, f"gradient {k}: compiled against the interpreter", 1e-10)
        numeric = central_differences(lambda *a: float(loss(*a)), xs, k)
        _close(g, numeric, f"gradient {k}: compiled against central differences", 1e-5)


def _run(request, programs: Programs, seed: int) -> None:
    module = request.node.module
    programs.prepare(seed, sum(item.module is module for item in request.session.items) > 1)
    program, forward, grad = programs.get(seed)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # inf and nan are compared, not warned
            check_program(program, forward, grad)
    except Exception as e:
        slow = " -m slow" if request.node.get_closest_marker("slow") else ""
        try:
            ir = str(forward.ir(*program.inputs(), stage="fused"))
        except Exception as why:
            ir = f"(no fused IR: {type(why).__name__}: {why})"
        raise AssertionError(f"{type(e).__name__}: {e}\n\n{program}\nfused IR:\n{ir}\n"
                             f"reproduce: python -m pytest{slow} -p no:cacheprovider "
                             f"'{request.node.nodeid}'") from e


@pytest.mark.parametrize("seed", SEEDS)
def test_random_program(request, programs, seed):
    _run(request, programs, seed)


@pytest.mark.slow
@pytest.mark.parametrize("seed", SLOW_SEEDS)
def test_random_program_slow(request, programs, seed):
    _run(request, programs, seed)
