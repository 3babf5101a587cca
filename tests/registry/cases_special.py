"""Cases for the special-function primitives (flowjit/ir/primitives/special.py).

Inputs are drawn inside each function's domain (positive for lgamma and the incomplete gamma,
(0, 1) for betainc's x and ndtri, (-1, 1) for erfinv), in float32 and float64, with shapes
that broadcast. Orders are integers, the form the Bessel functions of integer order and the
chi-square and Poisson distributions use; the gradient check then differentiates x alone (a
float order's derivative is refused but the incomplete gamma functions', whose float-order
cases the check differentiates in the order too: tests/scipy/test_special.py). Expectations come from
the Python standard library where it has the function (lgamma, erfc) and otherwise from
scipy.special entry points other than the reference's where there are any (j0, j1, y0, y1,
i0, i1 for orders 0 and 1; the references call jv, yv, iv).
"""

from __future__ import annotations

import math

import numpy as np
import scipy.special as ss

from tests.registry.case import Case

FLOATS = ("f32", "f64")
_NP = {"f32": np.float32, "f64": np.float64}


def _positive(shape, d, low=0.3, high=4.0):
    return lambda rng: rng.uniform(low, high, shape).astype(_NP[d])


def _uniform(shape, d, low, high):
    return lambda rng: rng.uniform(low, high, shape).astype(_NP[d])


def _orders(shape, low, high):
    return lambda rng: rng.integers(low, high + 1, shape).astype(np.int64)


def _vec(fn):
    return lambda x: np.vectorize(fn, otypes=[np.float64])(x.astype(np.float64)).astype(x.dtype)


def _of(fn):
    # scipy.special's value in float64, rounded to the argument's (the last input's) dtype.
    return lambda *xs: np.asarray(fn(*[x.astype(np.float64) if x.dtype.kind == "f" else x for x in xs])
                                  ).astype(xs[-1].dtype)


_BESSEL_01 = {("bessel_jv", 0): ss.j0, ("bessel_jv", 1): ss.j1, ("bessel_yv", 0): ss.y0,
              ("bessel_yv", 1): ss.y1, ("bessel_iv", 0): ss.i0, ("bessel_iv", 1): ss.i1}


def gammainc_order_derivative(a, x):
    # dP/da by two levels of Richardson's extrapolation of central differences (error O(h**6);
    # 1e-13 of the value) of scipy's P or Q, whichever is the smaller (the other is near 1 and
    # its differences cancel), in float64.
    a, x = np.broadcast_arrays(np.asarray(a, np.float64), np.asarray(x, np.float64))
    h = 1e-2 * np.maximum(np.abs(a), 1.0)

    def d(f):
        def central(h):
            return (f(a + h, x) - f(a - h, x)) / (2 * h)
        r1, r2 = (4 * central(h / 2) - central(h)) / 3, (4 * central(h / 4) - central(h / 2)) / 3
        return (16 * r2 - r1) / 15
    return np.where(ss.gammainc(a, x) < 0.5, d(ss.gammainc), -d(ss.gammaincc))


def _bessel_expect(prim, ref):
    def expect(v, x):
        out = np.asarray(ref(v, x.astype(np.float64)))
        v_b, x_b = np.broadcast_arrays(v, x.astype(np.float64))
        for (name, order), fn in _BESSEL_01.items():
            if name == prim:
                out = np.where(v_b == order, fn(x_b), out)
        return out.astype(x.dtype)
    return expect


CASES: list[Case] = []
for d in FLOATS:
    CASES += [
        Case("lgamma", [_positive((3, 4), d, 0.2, 12.0)], expect=_vec(math.lgamma), dtypes=(d,), id=f"lgamma-{d}"),
        Case("lgamma", [_positive((), d)], expect=_vec(math.lgamma), dtypes=(d,), id=f"lgamma-{d}-scalar"),
        Case("erfc", [lambda rng, d=d: rng.uniform(-3, 3, (5,)).astype(_NP[d])], expect=_vec(math.erfc),
             dtypes=(d,), id=f"erfc-{d}"),
        Case("erfinv", [lambda rng, d=d: rng.uniform(-0.95, 0.95, (2, 3)).astype(_NP[d])],
             expect=_of(lambda x: ss.ndtri((x + 1) / 2) / math.sqrt(2)), dtypes=(d,), id=f"erfinv-{d}"),
        Case("ndtri", [lambda rng, d=d: rng.uniform(0.05, 0.95, (4,)).astype(_NP[d])],
             expect=_of(lambda p: -math.sqrt(2) * ss.erfcinv(2 * p)), dtypes=(d,), id=f"ndtri-{d}"),
        Case("log_ndtr", [lambda rng, d=d: rng.uniform(-6, 4, (2, 5)).astype(_NP[d])],
             expect=_of(lambda x: np.log(ss.erfc(-x / math.sqrt(2)) / 2)), dtypes=(d,), id=f"log_ndtr-{d}"),
        Case("gammainc", [_orders((3, 1), 1, 5), _positive((4,), d, 0.3, 6.0)], expect=_of(ss.gammainc),
             dtypes=(d,), id=f"gammainc-{d}"),
        Case("gammaincc", [_orders((), 1, 4), _positive((2, 3), d, 0.3, 6.0)],
             expect=_of(lambda a, x: 1 - ss.gammainc(a, x)), dtypes=(d,), id=f"gammaincc-{d}"),
        # A float order: the gradient check differentiates it too (gammainc_grad_a).
        Case("gammainc", [_positive((3, 1), d, 0.4, 6.0), _positive((4,), d, 0.2, 9.0)], expect=_of(ss.gammainc),
             dtypes=(d,), id=f"gammainc-float-order-{d}"),
        Case("gammaincc", [_positive((2,), d, 0.4, 6.0), _positive((3, 2), d, 0.2, 9.0)], expect=_of(ss.gammaincc),
             dtypes=(d,), id=f"gammaincc-float-order-{d}"),
        Case("gammainc_grad_a", [_positive((3, 1), d, 0.1, 12.0), _positive((5,), d, 0.05, 15.0)],
             expect=lambda a, x: gammainc_order_derivative(a, x).astype(x.dtype), dtypes=(d,),
             id=f"gammainc_grad_a-{d}"),
        Case("gammainc_grad_a", [_orders((2, 1), 1, 6), _positive((3,), d, 0.3, 20.0)],
             expect=lambda a, x: gammainc_order_derivative(a, x).astype(x.dtype), dtypes=(d,),
             id=f"gammainc_grad_a-int-order-{d}"),
        Case("betainc", [_orders((3,), 1, 4), _orders((2, 1), 1, 4), _positive((3,), d, 0.05, 0.95)],
             expect=_of(lambda a, b, x: 1 - ss.betainc(b, a, 1 - x)), dtypes=(d,), id=f"betainc-{d}"),
    ]
    for n in (0, 1, 3):
        CASES.append(Case("polygamma", [_positive((3,), d, 0.4, 5.0)], {"n": n},
                          expect=_of(lambda x, n=n: ss.polygamma(n, x)), dtypes=(d,), id=f"polygamma-{n}-{d}"))
    for prim, ref in (("bessel_jv", ss.jv), ("bessel_yv", ss.yv), ("bessel_iv", ss.iv)):
        CASES.append(Case(prim, [_orders((2, 1), 0, 1), _positive((4,), d, 0.3, 12.0)],
                          expect=_bessel_expect(prim, ref), dtypes=(d,), id=f"{prim}-01-{d}"))
        CASES.append(Case(prim, [_orders((3,), 2, 4), _positive((3,), d, 0.3, 12.0)],
                          expect=_of(ref), dtypes=(d,), id=f"{prim}-{d}"))
    CASES.append(Case("bessel_ive", [_orders((3,), 0, 3), lambda rng, d=d: rng.uniform(-8, 8, (2, 3)).astype(_NP[d])],
                      expect=_of(lambda v, x: ss.iv(v, x) * np.exp(-np.abs(x))), dtypes=(d,), id=f"bessel_ive-{d}"))
    # Both series of each (|x| <= 8 and beyond), both signs; expected from iv, not i0e/i1e
    # (the references' own entry points).
    for n in (0, 1):
        CASES.append(Case(f"bessel_i{n}e", [lambda rng, d=d: rng.uniform(-20, 20, (2, 5)).astype(_NP[d])],
                          expect=_of(lambda x, n=n: ss.iv(n, x) * np.exp(-np.abs(x))), dtypes=(d,),
                          id=f"bessel_i{n}e-{d}"))
        # j0, j1 both signs (j0 even, j1 odd), y0, y1 positive; both forms (|x| <= 8, Hankel's).
        for kind, ref, low in (("j", ss.jv, -20.0), ("y", ss.yv, 0.05)):
            CASES.append(Case(f"bessel_{kind}{n}", [_uniform((3, 4), d, low, 20.0)],
                              expect=_of(lambda x, n=n, ref=ref: ref(n, x)), dtypes=(d,), id=f"bessel_{kind}{n}-{d}"))
for d, t in (("c64", np.complex64), ("c128", np.complex128)):
    CASES.append(Case("erfc", [lambda rng, t=t: (rng.uniform(-2, 2, (2, 3))
                                                 + 1j * rng.uniform(-1, 1, (2, 3))).astype(t)],
                      expect=lambda z: (1 - ss.erf(z.astype(np.complex128))).astype(z.dtype), dtypes=(d,),
                      id=f"erfc-{d}"))
