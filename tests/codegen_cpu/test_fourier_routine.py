"""flowjit's FFT routines (``fourier_routine``): a native program calls the FFT kernel
compiled once per installation for an ``fft`` the kernel takes, one routine for every length
and batch of a type, dtype and rank, also inside a loop's body and when the program comes
from the disk cache in a new process; the C library of ``flowjit compile`` keeps the kernel."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import flowjit as fj
from flowjit.codegen_cpu.program_plan import KernelCall, plan_program, walk_steps
from tests.lowering.test_fourier import transform_pair

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _executable(f, *args):
    f(*args)
    (entry,) = f._cache.values()
    exe = entry.executable
    assert exe._program is not None, exe.native_reason
    return exe


def _kernel_calls(plan):
    return [s for s in walk_steps(plan.steps) if isinstance(s, KernelCall)]


def _complex(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)


@pytest.mark.parametrize("fft_type", ["fft", "ifft", "rfft", "irfft"])
@pytest.mark.parametrize("double", [False, True])
def test_every_length_and_batch_of_a_type_calls_one_routine(fft_type, double):
    names = set()
    for rows, n in ((37, 8), (16, 512), (17, 2048)):   # rows past a block's lanes; an odd power of two
        if fft_type == "irfft":
            x = _complex((rows, n // 2 + 1), np.complex128 if double else np.complex64, n)
        elif fft_type == "rfft":
            x = np.random.default_rng(n).standard_normal((rows, n)).astype(np.float64 if double else np.float32)
        else:
            x = _complex((rows, n), np.complex128 if double else np.complex64, n)
        transform, reference = transform_pair(fft_type, n)
        f = fj.function(transform)
        (call,) = _kernel_calls(_executable(f, x)._program.plan)
        assert call.routine and call.kernel.name.startswith(f"fft_routine_{fft_type}_")
        names.add(call.kernel.name)
        want = reference(x.astype(np.float64 if fft_type == "rfft" else np.complex128))
        tol = 1e-12 if double else 3e-6
        np.testing.assert_allclose(f(x), want, rtol=0, atol=tol * max(1.0, float(np.abs(want).max())))
    assert len(names) == 1, names


def test_the_plan_says_it_calls_the_routine():
    x = _complex((16, 64), np.complex64)
    f = fj.function(fj.fft.fft)
    text = f.kernels(x)
    assert "fj_kernel_fft_routine_fft_complex64_r2" in text, text


def test_a_loop_body_calls_the_routine_under_its_own_name():
    # A block's kernels are renamed with the block's prefix; the routine's name is its symbol.
    xs = _complex((3, 8, 32), np.complex64, 1)

    def body(carry, x):
        y = fj.fft.fft(x + carry) * 0.125       # the next step's carry: the fft stays in the loop
        return y, y

    f = fj.function(lambda xs: fj.scan(body, fj.zeros((8, 32), np.complex64), xs)[1])
    calls = _kernel_calls(_executable(f, xs)._program.plan)
    assert [c.kernel.name.startswith("fft_routine_fft_complex64_r2") for c in calls if c.routine] == [True]
    assert any(c.kernel.name.startswith("b") for c in calls)     # the loop's other kernels: prefixed
    carry, want = np.zeros((8, 32)), []
    for t in range(3):
        carry = np.fft.fft(xs[t].astype(np.complex128) + carry) * 0.125
        want.append(carry)
    want = np.stack(want)
    np.testing.assert_allclose(f(xs), want, rtol=0, atol=3e-6 * np.abs(want).max())


CHILD = r"""
import json, sys
import numpy as np
import flowjit as fj
n = int(sys.argv[1])
x = np.cos(np.arange(16 * n) * 0.37).reshape(16, n).astype(np.float32)
before = fj.cache_stats()["compiled"]
y = fj.function(lambda x: fj.fft.rfft(x))(x)
print(json.dumps({"y": [y.real.tolist(), y.imag.tolist()], "compiled": fj.cache_stats()["compiled"] - before}))
"""


def test_a_new_process_with_an_empty_cache_loads_the_routine_from_the_runtime_directory(tmp_path):
    # What the routine is for: a first call in a user's empty cache compiles the program
    # only. Each process has a cache of its own and the runtime directory is shared; the
    # second transforms another length.
    outs = []
    for k, n in enumerate((64, 256)):
        env = dict(os.environ, PYTHONPATH=ROOT, FLOWJIT_CACHE_DIR=str(tmp_path / f"cache{k}"),
                   FLOWJIT_RUNTIME_DIR=str(tmp_path / "runtime"))
        run = subprocess.run([sys.executable, "-c", CHILD, str(n)], env=env, capture_output=True, text=True,
                             timeout=300)
        assert run.returncode == 0, run.stderr[-3000:]
        out = json.loads(run.stdout)
        x = np.cos(np.arange(16 * n) * 0.37).reshape(16, n).astype(np.float32)
        want = np.fft.rfft(x.astype(np.float64))
        np.testing.assert_allclose(np.array(out["y"][0]) + 1j * np.array(out["y"][1]), want, rtol=0,
                                   atol=3e-6 * np.abs(want).max())
        outs.append(out["compiled"])
    assert outs[0] >= 2 and outs[1] == 1, outs      # the second: its program, no routine


def test_the_c_library_keeps_the_kernel():
    x = _complex((16, 64), np.complex64)
    exe = _executable(fj.function(fj.fft.fft), x)
    plan, _ = plan_program(exe.function, exe.lowered.kernels, False, 1, exe.lowered.blocks)
    (call,) = _kernel_calls(plan)
    assert not call.routine and not call.kernel.name.startswith("fft_routine")
