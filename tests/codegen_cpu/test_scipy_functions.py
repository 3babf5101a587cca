"""SciPy's special functions called per element from generated code (codegen_cpu.scipy_functions):
the incomplete gamma and beta functions and the Bessel functions of any order run in the native
program as SciPy's own C code (its bits, float32 computed in float64 as SciPy's loops do),
broadcast, on the pool's threads, from the disk cache in a new process, and in a kernel of their
own on the Python driver when another op keeps the program there."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import scipy.special as ss
from scipy.special import cython_special

import flowjit as fj
from flowjit.codegen_cpu import scipy_functions
from flowjit.codegen_cpu.parallel import default_threads
from flowjit.ir.errors import FlowjitError
from flowjit.lowering.scalar import LIBRARY_FUNCTIONS
from tests.scipy.test_special import _native

S = fj.scipy.special


# fj function, scipy function, the inputs' draws (orders first), by library function
CASES = {
    "gammainc": (S.gammainc, ss.gammainc, [(0.05, 30.0), (0.0, 60.0)]),
    "gammaincc": (S.gammaincc, ss.gammaincc, [(0.05, 30.0), (0.0, 60.0)]),
    "betainc": (S.betainc, ss.betainc, [(0.1, 8.0), (0.1, 8.0), (0.0, 1.0)]),
    "jv": (S.jv, ss.jv, [(-4.5, 12.0), (-20.0, 40.0)]),
    "yv": (S.yv, ss.yv, [(-4.5, 12.0), (0.0, 40.0)]),
    "iv": (S.iv, ss.iv, [(-4.5, 12.0), (-20.0, 40.0)]),
    "ive": (S.ive, ss.ive, [(-4.5, 12.0), (-800.0, 800.0)]),
}


def test_every_library_function_has_a_case_and_scipys_entry_point():
    assert set(CASES) == set(LIBRARY_FUNCTIONS)
    for name in LIBRARY_FUNCTIONS:
        assert scipy_functions.address(name) != 0


def test_the_entry_point_is_found_by_its_signature_under_any_name(monkeypatch):
    # SciPy 1.11 exported betainc unfused (its own name), 1.12 on as __pyx_fuse_0betainc; a
    # fused variant of another signature (jv's complex one) is never taken.
    capi = dict(cython_special.__pyx_capi__)
    want = scipy_functions.address("betainc")
    renamed = {k: v for k, v in capi.items() if not k.endswith("betainc")}
    renamed["betainc"] = capi["__pyx_fuse_0betainc"]
    monkeypatch.setattr(cython_special, "__pyx_capi__", renamed)
    scipy_functions.address.cache_clear()
    try:
        assert scipy_functions.address("betainc") == want
        only_complex = {k: v for k, v in capi.items() if not k.endswith("fuse_1jv")}
        monkeypatch.setattr(cython_special, "__pyx_capi__", only_complex)
        with pytest.raises(FlowjitError, match=r"exports no C function jv\(double \(double, double, int"):
            scipy_functions.address("jv")
    finally:
        scipy_functions.address.cache_clear()


@pytest.mark.parametrize("name", sorted(CASES))
def test_scipys_bits_in_one_native_program(name):
    f, ref, draws = CASES[name]
    rng = np.random.default_rng(sorted(CASES).index(name))
    args = [rng.uniform(lo, hi, 500) for lo, hi in draws]
    # The edges: NaN, the infinities, 0, negative arguments outside the domain.
    edges = np.array([np.nan, np.inf, -np.inf, 0.0, -1.0, 1e-300])
    args = [np.concatenate([a, np.full(6, a[0])]) for a in args[:-1]] + [np.concatenate([args[-1], edges])]
    with np.errstate(all="ignore"):
        want = ref(*args)
        np.testing.assert_array_equal(_native(fj.function(lambda *xs: f(*xs) * 1.0), *args), want)
        # float32 computed in float64 and rounded once (scipy's own float32 betainc computes in
        # float32, to about 1e-5).
        low = [a.astype(np.float32) for a in args]
        got = _native(fj.function(lambda *xs: f(*xs)), *low)
        assert got.dtype == np.float32
        np.testing.assert_array_equal(got, ref(*[v.astype(np.float64) for v in low]).astype(np.float32))


def test_broadcast_integer_orders_and_a_sum_fused_after():
    # Orders [3, 1] against x [4] (the loop over the broadcast result); int orders cast to x's
    # float in the kernel; the op's result read by the next kernel.
    n = np.array([[0], [1], [2]])
    x = np.array([0.5, 3.0, 7.5, 20.0])
    got = _native(fj.function(lambda n, x: (S.jv(n, x) ** 2).sum(axis=0)), n, x)
    np.testing.assert_allclose(got, (ss.jv(n, x) ** 2).sum(axis=0), rtol=1e-15)
    a = np.array([1, 3, 6])
    np.testing.assert_array_equal(_native(fj.function(lambda a, x: S.gammaincc(a[:, None], x)), a, x),
                                  ss.gammaincc(a[:, None], x))


def test_the_pools_threads_call_it():
    rng = np.random.default_rng(3)
    a, x = rng.uniform(0.5, 20, 1 << 19), rng.uniform(0, 40, 1 << 19)
    f = fj.function(lambda a, x: S.gammainc(a, x))
    assert "threads over 524288 rows" in f.kernels(a, x) or default_threads() == 1
    np.testing.assert_array_equal(_native(f, a, x), ss.gammainc(a, x))


def test_a_program_on_the_python_driver_calls_it_in_a_kernel_of_its_own():
    def f(a, x):
        y = S.gammainc(a, x)
        return fj.pure_callback(lambda t: np.asarray(t) * 2.0, fj.ShapeDtype(y.shape, y.dtype), y)
    g = fj.function(f)
    a, x = np.array([0.5, 2.0, 9.0]), np.array([1.0, 2.0, 3.0])
    np.testing.assert_array_equal(g(a, x), 2 * ss.gammainc(a, x))
    (entry,) = g._cache.values()
    assert entry.executable._program is None and "pure_callback" in entry.executable.native_reason
    assert "k0(" in g.kernels(a, x)   # the driver calls the op's compiled kernel, not its NumPy reference


_RUN = """
import json, sys, numpy as np, flowjit as fj
from flowjit.codegen_cpu import objcache
a, x = np.array([0.5, 2.0, 9.0, 30.0]), np.array([1.0, 2.0, 3.0, 25.0])
f = fj.function(lambda a, x: fj.scipy.special.gammaincc(a, x) + fj.scipy.special.ive(a, x))
out = f(a, x)
print(json.dumps({"loaded": objcache.stats().get("loaded", 0), "scipy": "scipy.special" in sys.modules,
                  "out": out.tolist()}))
"""


def test_a_new_process_links_it_from_the_disk_cache(tmp_path):
    # The second process loads the program's object code, which calls SciPy's symbols: their
    # providers register the addresses before it links.
    env = {"FLOWJIT_CACHE_DIR": str(tmp_path), "FLOWJIT_TIERED": "0"}
    runs = [json.loads(subprocess.run([sys.executable, "-c", _RUN], env={**os.environ, **env}, check=True,
                                      capture_output=True, text=True).stdout.splitlines()[-1]) for _ in range(2)]
    a, x = np.array([0.5, 2.0, 9.0, 30.0]), np.array([1.0, 2.0, 3.0, 25.0])
    want = (ss.gammaincc(a, x) + ss.ive(a, x)).tolist()
    assert runs[0]["out"] == want and runs[1]["out"] == want
    assert runs[1]["loaded"] >= 1 and runs[1]["scipy"]
