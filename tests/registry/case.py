"""A registry test case: one primitive, its inputs, attributes and the NumPy expectation.

Each ``cases_*.py`` module beside this file defines ``CASES``, a list of ``Case``; the
generic test runs every case through the IR builder and the reference interpreter, and
``test_compiled.py`` through ``fj.function`` on the default (compiled) backend, and both
compare with ``expect``.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

InputSpec = Any  # ((shape), "f32") | np.ndarray | Callable[[np.random.Generator], np.ndarray]


@dataclass
class Case:
    """``prim(*inputs, **attrs)`` must equal ``expect(*input_arrays)``.

    An input is ``(shape, dtype)`` (random values: normal floats, ints in [-10, 10],
    random bools), a fixed ``np.ndarray``, or ``fn(rng) -> np.ndarray``. A dtype written
    ``"T"`` is replaced by each entry of ``dtypes`` in turn, making one case per dtype.
    """

    prim: str
    inputs: Sequence[InputSpec]
    attrs: dict[str, Any] = field(default_factory=dict)
    expect: Callable[..., Any] | None = None
    dtypes: Sequence[str] = ("f32",)
    id: str = ""

    def expand(self) -> list[Case]:
        uses_t = any(isinstance(s, tuple) and len(s) == 2 and s[1] == "T" for s in self.inputs)
        if not uses_t:
            return [self]
        out = []
        for d in self.dtypes:
            ins = [(s[0], d) if isinstance(s, tuple) and len(s) == 2 and s[1] == "T" else s
                   for s in self.inputs]
            attrs = {k: (d if v == "T" else v) for k, v in self.attrs.items()}
            out.append(Case(self.prim, ins, attrs, self.expect, (d,), f"{self.id}-{d}" if self.id else d))
        return out

    @property
    def seed(self) -> int:
        """The seed of the case's random inputs: a stable hash of its id (``hash`` of a
        string is salted per process, which made the inputs differ from run to run)."""
        return zlib.crc32((self.id or self.prim).encode())

    def make_inputs(self, rng: np.random.Generator) -> list[np.ndarray]:
        arrays = []
        for s in self.inputs:
            if isinstance(s, np.ndarray):
                arrays.append(s)
            elif callable(s):
                arrays.append(np.asarray(s(rng)))
            else:
                shape, d = s
                arrays.append(random_array(rng, tuple(shape), d))
        return arrays


def random_array(rng: np.random.Generator, shape: tuple[int, ...], d: str) -> np.ndarray:
    """Random test values of IR dtype ``d`` (short name) and ``shape``."""
    from flowjit.ir.dtypes import dtype
    dt = dtype(d)
    if dt.is_float:
        return rng.standard_normal(shape).astype(dt.np)
    if dt.is_complex:
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dt.np)
    if dt.is_int:
        return rng.integers(-10, 11, size=shape).astype(dt.np)
    return rng.random(shape) < 0.5


def kernel_tolerance(dtype: np.dtype) -> dict:
    """How far a compiled kernel's result may be from the interpreter's: float32 rtol 2e-5,
    atol 1e-6 (float32 sums add float32 blocks in float64 where NumPy sums pairwise in
    float32; transcendental functions within a few ulp of NumPy's, libdevice's on a GPU);
    float64 rtol 1e-12, atol 1e-13; float16 rtol and atol 2e-3 (the llvm backend computes
    float16 in float32 and rounds once, where the interpreter may round after each NumPy
    step); a complex dtype as its parts' float; ints and bools exact."""
    if np.dtype(dtype).kind == "c":
        return kernel_tolerance(np.finfo(dtype).dtype)
    if dtype == np.float16:
        return {"rtol": 2e-3, "atol": 2e-3}
    if dtype == np.float32:
        return {"rtol": 2e-5, "atol": 1e-6}
    if dtype == np.float64:
        return {"rtol": 1e-12, "atol": 1e-13}
    return {"rtol": 0, "atol": 0}
