"""The Chebyshev tables of J_0, J_1, Y_0 and Y_1 (``flowjit/ir/primitives/special.py``) are the
fits this module computes from mpmath's Bessel functions: the series of each near form
(entire functions of s = x^2 on [0, 8], J's over its first three zeros' factors) and of
Hankel's P_n and x Q_n / 8 from 8 on, at 64 Chebyshev nodes and 40 digits, cut where the
coefficients fall below 2e-19 of the first; and J's zeros, each a float64 and the rest."""

from __future__ import annotations

import mpmath as mp
import numpy as np
import pytest

from flowjit.ir.primitives import special

NODES = 64
CUT = 2e-19


def _chebyshev_fit(f) -> tuple[float, ...]:
    """The coefficients c_k of f(t) = c_0 / 2 + sum c_k T_k(t) on [-1, 1] (Cephes' ``chbevl``
    convention), highest first, cut after the last of magnitude CUT * |c_0| or more."""
    angles = [mp.pi * (j + mp.mpf(1) / 2) / NODES for j in range(NODES)]
    values = [f(mp.cos(a)) for a in angles]
    c = [2 * mp.fsum(v * mp.cos(k * a) for v, a in zip(values, angles)) / NODES for k in range(NODES)]
    last = max(k for k, ck in enumerate(c) if abs(ck) > CUT * abs(c[0]) or k == 0)
    assert last < NODES - 8, "the series did not converge within the nodes"
    return tuple(float(ck) for ck in reversed(c[:last + 1]))


def _zeros(order: int) -> list:
    return [mp.besseljzero(order, k) for k in (1, 2, 3)]


def _near(kind: str, order: int):
    # x^2 = s = 32 (t + 1) on [0, 8]: the entire function of s each near form is written with;
    # J's divided by its first three zeros' factors s - j^2.
    def f(t):
        s = 32 * (t + 1)
        x = mp.sqrt(s)
        if kind == "j":
            j = mp.besselj(0, x) if order == 0 else (mp.besselj(1, x) / x if s else mp.mpf(1) / 2)
            return j / mp.fprod(s - z * z for z in _zeros(order))
        if order == 0:
            return (2 / mp.pi) * (mp.euler - mp.log(2)) if s == 0 else \
                mp.bessely(0, x) - (2 / mp.pi) * mp.log(x) * mp.besselj(0, x)
        return (mp.bessely(1, x) - (2 / mp.pi) * (mp.log(x) * mp.besselj(1, x) - 1 / x)) / x
    return f


def _far(which: str, order: int):
    # 128 / x^2 = u + 1 from x = 8 (u = 1) to infinity (u = -1), where P_n is 1 and x Q_n / 8
    # is (4 n^2 - 1) / 64.
    def f(u):
        if u == -1:
            return mp.mpf(1) if which == "p" else mp.mpf(4 * order * order - 1) / 64
        x = mp.sqrt(128 / (u + 1))
        chi = x - (2 * order + 1) * mp.pi / 4
        j, y = mp.besselj(order, x), mp.bessely(order, x)
        scale = mp.sqrt(mp.pi * x / 2)
        if which == "p":
            return scale * (j * mp.cos(chi) + y * mp.sin(chi))
        return scale * (y * mp.cos(chi) - j * mp.sin(chi)) * x / 8
    return f


@pytest.mark.parametrize("name", ["J0_NEAR", "J1_NEAR", "Y0_NEAR", "Y1_NEAR", "P0_FAR", "Q0_FAR", "P1_FAR",
                                  "Q1_FAR"])
def test_each_table_is_mpmaths_fit(name):
    with mp.workdps(40):
        order = int(name[1])
        fit = _chebyshev_fit(_near(name[0].lower(), order) if name.endswith("NEAR") else _far(name[0].lower(), order))
    table = getattr(special, name)
    assert len(table) == len(fit)
    np.testing.assert_allclose(table, fit, rtol=1e-14, atol=0)


@pytest.mark.parametrize("order", [0, 1])
def test_the_zeros_are_mpmaths_as_two_floats(order):
    with mp.workdps(40):
        for (high, low), z in zip(getattr(special, f"J{order}_ZEROS"), _zeros(order)):
            assert high == float(z) and low == float(z - high)
