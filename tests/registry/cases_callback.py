"""Cases for ``pure_callback`` (flowjit/ir/primitives/callback.py): registered NumPy functions
of one and two inputs, one and two results, and every dtype passed through, each vmap_method;
the expectation is the function itself run on the inputs."""

from __future__ import annotations

import numpy as np

from flowjit.ir.primitives.callback import register_callback
from tests.registry.case import Case


def _gamma_rows(x):
    import scipy.special
    return scipy.special.gamma(np.abs(x) + 0.5).astype(x.dtype)


def _outer_and_sum(a, b):
    return np.multiply.outer(a, b), (a.sum() + b.sum()).astype(a.dtype)


def _identity(x):
    return x.copy()


_GAMMA = register_callback(_gamma_rows)
_OUTER = register_callback(_outer_and_sum)
_IDENTITY = register_callback(_identity)

CASES = [
    *(Case("pure_callback", [((3, 4), d)], {"callback": _GAMMA, "results": f"{d}[3,4]", "vmap_method": "sequential"},
           _gamma_rows, (d,), f"gamma-{d}") for d in ("f32", "f64")),
    Case("pure_callback", [((3,), "f64"), ((2,), "f64")], {"callback": _OUTER, "results": "f64[3,2];f64[]",
                                                          "vmap_method": "sequential"},
         _outer_and_sum, ("f64",), "outer-sum"),
    *(Case("pure_callback", [((2, 3), d)], {"callback": _IDENTITY, "results": f"{d}[2,3]", "vmap_method": m},
           _identity, (d,), f"identity-{d}")
      for d, m in zip(("bool", "i8", "u16", "i32", "i64", "f16", "f32", "c64", "c128"),
                      ("expand_dims", "broadcast_all") * 5)),
]
