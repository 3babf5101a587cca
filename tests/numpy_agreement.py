"""One check of a family of flowjit results against NumPy's, shared by the tests of the
NumPy surface's composite functions: the same count, shapes and dtypes, and values equal
(or within rounding of float sums), with the sign of each zero where asked."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def agree(got: Sequence, want: Sequence, label: str, *, exact: bool = True, signed_zeros: bool = False) -> None:
    """Assert that ``got`` matches ``want`` result by result; inexact results within 1e-12
    (1e-6 for float32, whose compiled sums may round differently)."""
    assert len(got) == len(want), label
    for i, (g, w) in enumerate(zip(got, want)):
        g, w = np.asarray(g), np.asarray(w)
        assert g.shape == w.shape and g.dtype == w.dtype, (label, i, g.shape, w.shape, g.dtype, w.dtype)
        if exact:
            np.testing.assert_array_equal(g, w, err_msg=f"{label} #{i}")
        else:
            tol = 1e-12 if g.dtype != np.float32 else 1e-6
            np.testing.assert_allclose(g, w, rtol=tol, atol=tol / 10, err_msg=f"{label} #{i}")
        if signed_zeros and g.dtype.kind == "f":   # the sign of a zero too (not of a NaN)
            keep = ~np.isnan(w)
            np.testing.assert_array_equal(np.signbit(g[keep]), np.signbit(w[keep]), err_msg=f"{label} #{i} sign")
