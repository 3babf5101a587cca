"""Which OpenBLAS kernels flowjit's products run: a DYNAMIC_ARCH OpenBLAS that took an
AVX-512 CPU for an AVX2-only one (OpenBLAS 0.3.31 on some Zen 5 systems) restarts with its AVX-512
kernels, unless the user chose a core."""

from __future__ import annotations

import ctypes

import numpy as np

import flowjit as fj
from flowjit.codegen_cpu import blas

AVX512 = {f: True for f in blas.AVX512_FEATURES} | {"avx2": True}
AVX2 = {"avx2": True, "fma": True, "avx512f": False}


def test_an_avx2_core_on_an_avx512_cpu_gets_the_avx512_kernels():
    assert blas.better_openblas_core("Haswell", AVX512, {}) == blas.AVX512_OPENBLAS_CORE
    assert blas.better_openblas_core("Zen", AVX512, {}) == blas.AVX512_OPENBLAS_CORE


def test_the_core_stays_where_it_fits_or_the_user_chose_one():
    assert blas.better_openblas_core("Haswell", AVX2, {}) is None            # no AVX-512 to use
    assert blas.better_openblas_core("SkylakeX", AVX512, {}) is None         # already AVX-512
    assert blas.better_openblas_core("Cooperlake", AVX512, {}) is None
    assert blas.better_openblas_core("Haswell", AVX512, {"OPENBLAS_CORETYPE": "Haswell"}) is None
    assert blas.better_openblas_core("Haswell", AVX512, {"FLOWJIT_OPENBLAS_CORE": "keep"}) is None
    assert blas.better_openblas_core("Haswell", AVX2, {"FLOWJIT_OPENBLAS_CORE": "Sandybridge"}) == "Sandybridge"


def test_the_library_reports_the_core_its_products_run_and_they_are_right():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((300, 200)).astype(np.float32), rng.standard_normal((200, 500)).astype(np.float32)
    got = fj.function(lambda x, y: x @ y)(a, b)
    np.testing.assert_allclose(got, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-4, atol=1e-4)
    if blas.OPENBLAS_CORE:   # an OpenBLAS: the core recorded is the one it runs now
        library = ctypes.CDLL(blas.blas_functions()["sgemm"].library)
        assert blas.OPENBLAS_CORE["core"] == blas._openblas_core_name(library)
        if "was" in blas.OPENBLAS_CORE:
            assert blas.OPENBLAS_CORE["core"] == blas.AVX512_OPENBLAS_CORE
